#!/usr/bin/env bash
# Demo, as root: installs what is missing, builds, brings up the test bed,
# runs real traffic through it and prints a summary, then tears everything
# down (also on failure or Ctrl-C).
#
# Default: a three-node cluster. Client cfw-inside 198.18.10.2 behind
# router cfw-rin, server cfw-outside 198.18.20.2 behind router cfw-rout; the
# routers spread connections over the nodes cfw-n1..3 by ECMP with L4
# hashing, so the two directions of a connection usually cross different
# nodes; the nodes talk over the CCL bridge cfw-ccl (198.19.0.0/24).
#
#   scripts/demo.sh                    # three-node cluster
#   scripts/demo.sh --nodes 1          # one node (client 198.18.1.2 - cfw-n1 - server 198.18.2.2)
#   scripts/demo.sh --kernel-router    # single-node test-bed self-check: a Linux router instead
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

kernel_router=
nodes=3
while [ $# -gt 0 ]; do
  case "$1" in
    --kernel-router) kernel_router=--kernel-router; nodes=1 ;;
    --nodes) nodes=${2:-}; shift ;;
    *) echo "usage: scripts/demo.sh [--nodes 1|3] [--kernel-router]" >&2; exit 2 ;;
  esac
  shift
done
case "$nodes" in
  1|2|3|4|5|6|7|8) ;;
  *) echo "demo: --nodes must be 1-8" >&2; exit 2 ;;
esac

say() { printf '\n== %s\n' "$*"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (packages, network namespaces)"

scripts/setup.sh
if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
  . "$HOME/.cargo/env"
fi

say "build (release)"
cargo build --release -p testbed -p clusterfw --bins

bin=$root/target/release
export CLUSTERFW_BIN_DIR=$bin
tb=$bin/clusterfw-testbed
run=${CFW_TESTBED_DIR:-/tmp/cfw-testbed}
export CFW_TESTBED_DIR=$run
work=$(mktemp -d /tmp/cfw-demo.XXXXXX)
bg_pids=()

if [ "$nodes" -eq 1 ]; then
  client=198.18.1.2 server=198.18.2.2 node_inside=198.18.1.1
else
  client=198.18.10.2 server=198.18.20.2 node_inside=198.18.11.2
fi

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

ctl() { local k=$1; shift; timeout 5 "$bin/clusterfw-ctl" --socket "$run/n$k.sock" "$@"; }

start=$(date +%s)
what=clusterfw
[ -n "$kernel_router" ] && what="kernel router"
say "test bed up: $nodes node(s), $what"
# fd 9 (the lock) closed: the nodes must not hold the lock.
"$tb" up --nodes "$nodes" --run-dir "$run" $kernel_router 9>&-

if [ "$nodes" -gt 1 ]; then
  say "cluster membership (heartbeats on the CCL, node n1's view)"
  ctl 1 show cluster --json | jq -r '"  control node \(.control_node_name), epoch \(.epoch), members \(.member_ids)"'
  for _ in $(seq 50); do
    heard=$(ctl 1 show cluster --json | jq '[.members[] | select(.this_node or .last_heard_ms != null)] | length')
    [ "$heard" -eq "$nodes" ] && break
    sleep 0.1
  done
  ctl 1 show cluster --json | jq -r '.members[] | "  node \(.id) \(.name) \(.ccl_address)\(if .this_node then " (this node)" else ", last heard \(.last_heard_ms) ms ago" end)"'
fi

py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3

if [ "$nodes" -gt 1 ]; then
  # The collectors an operator runs: rsyslog (UDP and TCP) and nfdump's
  # nfcapd (IPFIX) on the management segment, where the nodes send.
  say "collectors on the management segment (cfw-mgmt, 192.0.2.1): rsyslog, nfcapd"
  mkdir -p "$work/flows"
  cat >"$work/rsyslog.conf" <<CONF
global(workDirectory="$work")
module(load="imudp")
module(load="imtcp")
template(name="raw" type="string" string="%inputname% %rawmsg%\n")
ruleset(name="cfw") { action(type="omfile" file="$work/syslog.log" template="raw") }
input(type="imudp" address="192.0.2.1" port="514" ruleset="cfw")
input(type="imtcp" address="192.0.2.1" port="514" ruleset="cfw")
CONF
  serve cfw-mgmt 514 "$work/rsyslogd.out" rsyslogd -n -f "$work/rsyslog.conf" -i "$work/rsyslog.pid"
  ip netns exec cfw-mgmt nfcapd -b 192.0.2.1 -p 4739 -w "$work/flows" -t 3600 >"$work/nfcapd.out" 2>&1 9>&- &
  nfcapd_pid=$!
  bg_pids+=($nfcapd_pid)
  # The nodes send their IPFIX templates every template-refresh (2 s on the bed).
  sleep 3
fi

say "HTTP: 20 MB download, server in cfw-outside, client in cfw-inside"
mkdir -p "$work/www"
head -c $((20 * 1024 * 1024)) /dev/urandom >"$work/www/random.bin"
want=$(sha256sum "$work/www/random.bin" | cut -d' ' -f1)
# A threaded server with a listen backlog of 256 (python's http.server
# listens with 5: twenty clients at once would lose SYNs at the server).
http_server='import functools, http.server, sys
class S(http.server.ThreadingHTTPServer):
    request_queue_size = 256
    daemon_threads = True
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[3])
S((sys.argv[1], int(sys.argv[2])), h).serve_forever()'
serve cfw-outside 8080 "$work/http.log" "$py" -c "$http_server" "$server" 8080 "$work/www"
dl_time=$(in_ns cfw-inside curl -sS --fail --connect-timeout 10 --max-time 60 \
  -o "$work/download.bin" -w '%{time_total}' "http://$server:8080/random.bin")
got=$(sha256sum "$work/download.bin" | cut -d' ' -f1)
[ "$got" = "$want" ] || die "download corrupted: sha256 $got, expected $want"
echo "20 MB in ${dl_time} s, sha256 ok ($want)"

if [ "$nodes" -gt 1 ]; then
  # Many connections, so that ECMP sends many of them back over another
  # node than they went out (forwarding, cookies).
  say "HTTP: 20 concurrent 1 MB downloads (asymmetric paths through the cluster)"
  head -c $((1024 * 1024)) /dev/urandom >"$work/www/small.bin"
  small=$(sha256sum "$work/www/small.bin" | cut -d' ' -f1)
  pids=()
  for i in $(seq 20); do
    in_ns cfw-inside curl -sS --fail --connect-timeout 10 --max-time 60 -o "$work/small.$i" \
      "http://$server:8080/small.bin" 9>&- &
    pids+=($!)
  done
  bad=0
  for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
  for i in $(seq 20); do
    [ "$(sha256sum "$work/small.$i" 2>/dev/null | cut -d' ' -f1)" = "$small" ] || bad=$((bad + 1))
  done
  [ "$bad" -eq 0 ] || die "$bad of the 20 concurrent downloads failed or were corrupted"
  echo "20 x 1 MB, every sha256 ok"
fi

failover_summary=""
if [ "$nodes" -gt 1 ] && [ -z "$kernel_router" ] && [ -z "${DEMO_NO_FAILOVER:-}" ]; then
  # Failover (issue 10): 20 paced downloads run while the control node is
  # killed (its router-side links taken down, as link loss or BFD would);
  # every download must finish intact. The client's receive buffer is
  # capped so the data is still in flight when the node dies.
  victim=$(ctl 1 show cluster --json | jq -r '.control_node_name // "n1"')
  say "failover: 20 downloads at 256 KB/s while the control node ($victim) is killed"
  in_ns cfw-inside sysctl -qw net.ipv4.tcp_rmem="4096 16384 32768"
  head -c $((2 * 1024 * 1024)) /dev/urandom >"$work/www/long.bin"
  long=$(sha256sum "$work/www/long.bin" | cut -d' ' -f1)
  pids=()
  for i in $(seq 20); do
    in_ns cfw-inside curl -sS --fail --limit-rate 256k --connect-timeout 10 --max-time 90 -o "$work/long.$i" \
      "http://$server:8080/long.bin" 9>&- &
    pids+=($!)
  done
  sleep 3
  survivors=()
  for k in $(seq "$nodes"); do [ "n$k" = "$victim" ] || survivors+=("$k"); done
  s0=${survivors[0]}
  epoch0=$(ctl "$s0" show cluster --json | jq -r '.epoch')
  takeovers0=0
  for k in "${survivors[@]}"; do
    takeovers0=$((takeovers0 + $(ctl "$k" show cluster --json | jq -r '.counters.takeovers // 0')))
  done
  t0=$(date +%s%N)
  "$tb" kill "$victim" --run-dir "$run" 9>&- >/dev/null
  detect_ms=""
  for _ in $(seq 100); do
    e=$(ctl "$s0" show cluster --json 2>/dev/null | jq -r '.epoch')
    if [ -n "$e" ] && [ "$e" != "$epoch0" ]; then detect_ms=$(( ($(date +%s%N) - t0) / 1000000 )); break; fi
    sleep 0.02
  done
  bad=0
  for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
  for i in $(seq 20); do
    [ "$(sha256sum "$work/long.$i" 2>/dev/null | cut -d' ' -f1)" = "$long" ] || bad=$((bad + 1))
  done
  cl=$(ctl "$s0" show cluster --json)
  new_control=$(jq -r '.control_node_name // "none"' <<<"$cl")
  takeovers=0
  for k in "${survivors[@]}"; do
    takeovers=$((takeovers + $(ctl "$k" show cluster --json | jq -r '.counters.takeovers // 0')))
  done
  echo "detection (kill -> new member set at n$s0): ${detect_ms:-not seen} ms"
  echo "new control node: $new_control, members $(jq -c '.member_ids' <<<"$cl"), epoch $(jq -r '.epoch' <<<"$cl")"
  echo "flows taken over by the survivors: $((takeovers - takeovers0))"
  echo "membership history at n$s0 (last 6 events):"
  ctl "$s0" show cluster history --json | jq -r '.events[-6:][] | "  \(.at_ms / 1000) s  \(.event)"'
  [ "$bad" -eq 0 ] || die "$bad of the 20 downloads failed or were corrupted across the failover"
  echo "20 x 2 MB across the failover, every sha256 ok"
  failover_summary="failover: $victim killed, detected in ${detect_ms:-?} ms, new control node $new_control, $((takeovers - takeovers0)) flows taken over, 20/20 downloads intact"
  in_ns cfw-inside sysctl -qw net.ipv4.tcp_rmem="4096 131072 6291456"
  say "restart $victim: it rejoins the cluster"
  "$tb" restart "$victim" --run-dir "$run" 9>&- >/dev/null
  for _ in $(seq 100); do
    ready=$(ctl "${victim#n}" show cluster --json 2>/dev/null | jq -r '.ready' 2>/dev/null || echo false)
    [ "$ready" = "true" ] && break
    sleep 0.1
  done
  ctl "${victim#n}" show cluster --json | jq -r '"  \(.node): state \(.state), control node \(.control_node_name), epoch \(.epoch), ready \(.ready)"'
fi

say "iperf3: 5 s TCP, cfw-inside -> cfw-outside"
serve cfw-outside 5201 "$work/iperf3-server.log" iperf3 -s -B "$server" -p 5201
timeout 40 ip netns exec cfw-inside iperf3 -c "$server" -p 5201 -t 5 --json --connect-timeout 10000 \
  >"$work/iperf3.json" || true
if jq -e '.error' "$work/iperf3.json" >/dev/null 2>&1 || ! jq -e '.end.sum_received.bytes > 0' "$work/iperf3.json" >/dev/null 2>&1; then
  cat "$work/iperf3.json" >&2
  die "iperf3 run failed"
fi
gbps=$(jq -r '.end.sum_received.bits_per_second / 1e9 | . * 1000 | round / 1000' "$work/iperf3.json")
retrans=$(jq -r '.end.sum_sent.retransmits // 0' "$work/iperf3.json")
echo "${gbps} Gbit/s received, ${retrans} retransmits"

say "outside -> inside: a new TCP connection must be denied"
serve cfw-inside 80 "$work/inside-http.log" "$py" -m http.server 80 --bind "$client"
if in_ns cfw-outside curl -sS --max-time 3 -o /dev/null "http://$client:80/" 2>"$work/denied.err"; then
  die "outside reached $client:80: not denied"
fi
echo "denied as expected: $(cat "$work/denied.err")"

say "ping the node's inside address ($node_inside) from cfw-inside"
in_ns cfw-inside ping -c 3 -W 2 "$node_inside" | tail -n 2

say "fragments: ping -s 8000 to the server (each request and reply in 6 fragments)"
frag_ping=$(in_ns cfw-inside ping -c 3 -i 0.3 -W 2 -s 8000 "$server" | grep -E 'packets transmitted' || true)
echo "${frag_ping:-no answer}"
case "$frag_ping" in *" 0 received"*|"") die "fragmented pings got no answer" ;; esac

say "traceroute to the server: the cluster is a hop of its own"
in_ns cfw-inside traceroute -n -q 1 -w 1 -m 6 "$server" || true

say "summary"
echo "download: 20 MB in ${dl_time} s; iperf3: ${gbps} Gbit/s"
[ -n "$failover_summary" ] && echo "$failover_summary"
if [ -n "$kernel_router" ]; then
  echo "kernel router interfaces in cfw-n1:"
  ip -n cfw-n1 -s -j link show | jq -r '.[] | select(.ifname != "lo") |
    "  \(.ifname): RX \(.stats64.rx.packets) pkts / \(.stats64.rx.bytes) B, TX \(.stats64.tx.packets) pkts / \(.stats64.tx.bytes) B, dropped \(.stats64.rx.dropped)"'
else
  for k in $(seq "$nodes"); do
    stats=$(ctl "$k" show stats --json)
    echo "node n$k:"
    jq -r '.ports[] | "  \(.name) (port \(.port)): RX \(.rx_packets) pkts / \(.rx_bytes) B, TX \(.tx_packets) pkts / \(.tx_bytes) B, missed \(.rx_missed), rx errors \(.rx_errors), tx errors \(.tx_errors)"' <<<"$stats"
    echo "  forwarded: $(jq -r '.forwarded // "n/a"' <<<"$stats"), local replies: ARP $(jq -r '.arp_replies // "n/a"' <<<"$stats"), ICMP echo $(jq -r '.icmp_echo_replies // "n/a"' <<<"$stats"); fast path took $(jq -r '.fast_path // "n/a"' <<<"$stats") of $(jq -r '.packets // "n/a"' <<<"$stats") frames"
    echo "  drops (non-zero): $(jq -r '[.drops | to_entries[] | select(.value > 0) | "\(.key) \(.value)"] | if length == 0 then "none" else join(", ") end' <<<"$stats")"
    echo "  ICMP errors sent: $(jq -r '.icmp_errors | "time exceeded \(.time_exceeded), frag needed \(.frag_needed), unreachable \(.net_unreachable + .port_unreachable + .protocol_unreachable), suppressed by the rate \(.suppressed)"' <<<"$stats"); datagrams split back into fragments (af_packet): $(jq -r '.fragments.split_datagrams' <<<"$stats")"
    flows=$(ctl "$k" show conn --json 2>/dev/null | jq -r '.total // "?"' 2>/dev/null || echo "?")
    echo "  flows in the table (show conn): $flows"
    # Prometheus' view of the same node (metrics.listen in its namespace).
    metrics=$(in_ns "cfw-n$k" curl -s --max-time 5 http://127.0.0.1:9105/metrics || true)
    echo "  Prometheus /metrics: $(grep -c '^# TYPE' <<<"$metrics") metrics, clusterfw_forwarded_total $(awk '$1 == "clusterfw_forwarded_total" {print $2}' <<<"$metrics")"
    if [ "$nodes" -gt 1 ]; then
      cl=$(ctl "$k" show cluster --json)
      jq -r '"  cluster: packets processed as owner \(.counters.owner_packets), forwarded to another owner \(.counters.forwarded_to_owner), forwarded packets received as owner \(.counters.forwarded_received)",
             "           SYN-ACKs whose owner was decoded from the cookie \(.counters.synack_cookie_decoded), director queries sent \(.counters.director_queries_sent) / answered \(.counters.queries_answered), relays to the director \(.counters.relays_sent)",
             "  CCL messages by kind (rx/tx): \([.ccl[] | "\(.kind) \(.rx)/\(.tx)"] | join(", "))",
             "  CCL drops (non-zero): \([.ccl_drops | to_entries[] | select(.value > 0) | "\(.key) \(.value)"] | if length == 0 then "none" else join(", ") end)"' <<<"$cl"
    fi
  done
fi
if [ "$nodes" -gt 1 ] && [ -z "$kernel_router" ]; then
  # Flows still open are exported at their end or active timeout.
  sleep 2
  kill "$nfcapd_pid" 2>/dev/null && wait "$nfcapd_pid" 2>/dev/null || true
  echo "syslog received by rsyslog (UDP / TCP): $(grep -c '^imudp' "$work/syslog.log" || true) / $(grep -c '^imtcp' "$work/syslog.log" || true) messages; by MSGID over UDP:"
  awk '$1 == "imudp" {n[$7]++} END {for (m in n) printf "  %s %d\n", m, n[m]}' "$work/syslog.log" | sort
  echo "  e.g.: $(grep -m1 '^imudp.*conn-teardown' "$work/syslog.log" | cut -d' ' -f2- | cut -c1-300)"
  echo "IPFIX received by nfcapd: $(nfdump -R "$work/flows" -o csv -N 2>/dev/null | awk -F, 'NR > 1 && NF > 10 && $4 ~ /\./' | wc -l) flow records; the largest:"
  nfdump -R "$work/flows" -O bytes -n 3 -o 'fmt:%sa:%sp -> %da:%dp %pr %pkt packets %byt bytes' -N 2>/dev/null | sed -n '2,4p' | sed 's/^/  /'
fi
echo "demo traffic took $(( $(date +%s) - start )) s"
