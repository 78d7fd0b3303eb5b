#!/usr/bin/env bash
# Demo, as root: installs what is missing, builds, brings up the single-node
# test bed (client cfw-inside 198.18.1.2 — clusterfw node cfw-n1 — server
# cfw-outside 198.18.2.2), runs real traffic through the node and prints a
# summary, then tears everything down (also on failure or Ctrl-C).
#
#   scripts/demo.sh                    # through clusterfw
#   scripts/demo.sh --kernel-router    # test-bed self-check: a Linux router instead
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

kernel_router=
case "${1:-}" in
  "") ;;
  --kernel-router) kernel_router=--kernel-router ;;
  *) echo "usage: scripts/demo.sh [--kernel-router]" >&2; exit 2 ;;
esac

say() { printf '\n== %s\n' "$*"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (packages, network namespaces)"

scripts/setup.sh
if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
  . "$HOME/.cargo/env"
fi

say "build (release)"
pkgs=(-p testbed)
[ -n "$kernel_router" ] || pkgs+=(-p clusterfw)
cargo build --release "${pkgs[@]}"

bin=$root/target/release
export CLUSTERFW_BIN_DIR=$bin
tb=$bin/clusterfw-testbed
run=${CFW_TESTBED_DIR:-/tmp/cfw-testbed}
export CFW_TESTBED_DIR=$run
sock=$run/n1.sock
work=$(mktemp -d /tmp/cfw-demo.XXXXXX)
bg_pids=()

# The bed's namespace names are fixed: hold the bed lock (shared with the
# tests) until the bed is down again.
lock=${CFW_TESTBED_LOCK:-/run/lock/cfw-testbed.lock}
mkdir -p "$(dirname "$lock")"
exec 9>"$lock"
if ! flock -n 9; then
  echo "demo: waiting for the test-bed lock (a test run holds it)" >&2
  flock -w 300 9 || die "test bed busy for 5 minutes"
fi
export CFW_TESTBED_LOCK_HELD=1

cleanup() {
  local rc=$?
  set +e
  for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${bg_pids[@]}"; do wait "$p" 2>/dev/null; done
  "$tb" down --run-dir "$run"
  rm -rf "$work"
  [ "$rc" -eq 0 ] || echo "demo: FAILED (exit $rc); logs in $run" >&2
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# Starts a server in a namespace in the background, waits for its port.
serve() {
  local ns=$1 port=$2 logf=$3; shift 3
  ip netns exec "$ns" "$@" >"$logf" 2>&1 9>&- &
  bg_pids+=($!)
  for _ in $(seq 100); do
    [ -n "$(in_ns "$ns" ss -Hltn "( sport = :$port )")" ] && return 0
    sleep 0.1
  done
  cat "$logf" >&2
  die "server on port $port in $ns did not start"
}

ctl() { timeout 5 "$bin/clusterfw-ctl" --socket "$sock" "$@"; }

start=$(date +%s)
say "test bed up ${kernel_router:-(clusterfw)}"
# fd 9 (the lock) closed: the node must not hold the lock.
"$tb" up --run-dir "$run" $kernel_router 9>&-

py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3

say "HTTP: 20 MB download, server in cfw-outside, client in cfw-inside"
mkdir -p "$work/www"
head -c $((20 * 1024 * 1024)) /dev/urandom >"$work/www/random.bin"
want=$(sha256sum "$work/www/random.bin" | cut -d' ' -f1)
serve cfw-outside 8080 "$work/http.log" "$py" -m http.server 8080 --bind 198.18.2.2 --directory "$work/www"
dl_time=$(in_ns cfw-inside curl -sS --fail --connect-timeout 10 --max-time 60 \
  -o "$work/download.bin" -w '%{time_total}' http://198.18.2.2:8080/random.bin)
got=$(sha256sum "$work/download.bin" | cut -d' ' -f1)
[ "$got" = "$want" ] || die "download corrupted: sha256 $got, expected $want"
echo "20 MB in ${dl_time} s, sha256 ok ($want)"

say "iperf3: 5 s TCP, cfw-inside -> cfw-outside"
serve cfw-outside 5201 "$work/iperf3-server.log" iperf3 -s -B 198.18.2.2 -p 5201
timeout 40 ip netns exec cfw-inside iperf3 -c 198.18.2.2 -p 5201 -t 5 --json --connect-timeout 10000 \
  >"$work/iperf3.json" || true
if jq -e '.error' "$work/iperf3.json" >/dev/null 2>&1 || ! jq -e '.end.sum_received.bytes > 0' "$work/iperf3.json" >/dev/null 2>&1; then
  cat "$work/iperf3.json" >&2
  die "iperf3 run failed"
fi
gbps=$(jq -r '.end.sum_received.bits_per_second / 1e9 | . * 1000 | round / 1000' "$work/iperf3.json")
retrans=$(jq -r '.end.sum_sent.retransmits // 0' "$work/iperf3.json")
echo "${gbps} Gbit/s received, ${retrans} retransmits"

say "outside -> inside: a new TCP connection must be denied"
serve cfw-inside 80 "$work/inside-http.log" "$py" -m http.server 80 --bind 198.18.1.2
if in_ns cfw-outside curl -sS --max-time 3 -o /dev/null http://198.18.1.2:80/ 2>"$work/denied.err"; then
  die "outside reached 198.18.1.2:80: not denied"
fi
echo "denied as expected: $(cat "$work/denied.err")"

say "ping the node's inside address from cfw-inside"
in_ns cfw-inside ping -c 3 -W 2 198.18.1.1 | tail -n 2

say "summary"
echo "download: 20 MB in ${dl_time} s; iperf3: ${gbps} Gbit/s"
if [ -z "$kernel_router" ]; then
  stats=$(ctl show stats --json)
  echo "ports:"
  jq -r '.ports[] | "  \(.name) (port \(.port)): RX \(.rx_packets) pkts / \(.rx_bytes) B, TX \(.tx_packets) pkts / \(.tx_bytes) B, missed \(.rx_missed), rx errors \(.rx_errors), tx errors \(.tx_errors)"' <<<"$stats"
  echo "forwarded: $(jq -r '.forwarded // "n/a"' <<<"$stats"), local replies: $(jq -r '.local_replies // "n/a"' <<<"$stats")"
  echo "drops (non-zero):"
  jq -r '.drops | to_entries[] | select(.value > 0) | "  \(.key): \(.value)"' <<<"$stats"
  flows=$(ctl show conn --json 2>/dev/null | jq -r '
    if type == "array" then length
    elif has("total") then .total
    elif has("connections") then (.connections | length)
    elif has("flows") then (.flows | if type == "array" then length else . end)
    else "?" end' 2>/dev/null || echo "?")
  echo "flows in the table (show conn): $flows"
else
  echo "kernel router interfaces in cfw-n1:"
  ip -n cfw-n1 -s -j link show | jq -r '.[] | select(.ifname != "lo") |
    "  \(.ifname): RX \(.stats64.rx.packets) pkts / \(.stats64.rx.bytes) B, TX \(.stats64.tx.packets) pkts / \(.stats64.tx.bytes) B, dropped \(.stats64.rx.dropped)"'
fi
echo "demo traffic took $(( $(date +%s) - start )) s"
