#!/usr/bin/env bash
# Runs every clusterfw benchmark and writes target/bench/summary.{json,md}.
#
#   scripts/bench.sh [--peers] [--quick] [--skip-micro] [--skip-dpdk] [--skip-tax] [--skip-testbed]
#
#   (a) pipeline microbenchmarks without EAL (criterion): ns/packet and Mpps
#       for established flows (1k/100k/1M), new connections/s, and bytes per
#       flow (ConnTable::bytes_per_flow, printed by a conntrack test), and
#       the NAT blocks (`--bench nat`: 10 000 rules compiled, first-match
#       lookup at 10 and 10 000 rules, PAT rewrite, port alloc + free);
#   (b) DPDK single node: one clusterfw worker lcore forwarding net_pcap
#       (infinite_rx, 1024 UDP flows, 64-byte frames) -> net_pcap, rate from
#       `clusterfw-ctl show stats --json` over a fixed interval; in the same
#       run, on the same vdevs and input, dpdk-testpmd --forward-mode=io
#       (before and after clusterfw; the mean is the framework limit); and
#       the same node with `dpdk.workers: 2`, each vdev with two queues:
#       "aligned" (queue i replays the flows worker i owns, split with the
#       node's own steering by `dataplane/examples/worker_split`: RSS that
#       agrees with the worker hash, nothing crosses), "mixed" (both queues
#       replay every flow: half the frames are steered to the other worker)
#       and "crossed" (queue i replays the other worker's flows: every frame
#       crosses); aligned over one worker is the scaling, crossed against
#       aligned the cost of a handoff; the one-worker node with PAT of
#       the inside network (issue 13): its rate against the node without
#       NAT is the cost of PAT; and the one-worker node forwarding the same
#       1024 flows over IPv6 (issue 16: 62-byte UDP/IPv6 frames, the next
#       hop learnt from its neighbour solicitation in the outside pcap):
#       IPv6 Mpps next to IPv4's, same run;
#   (c) --peers: Open vSwitch's userspace datapath (ovs-vswitchd-dpdk) on the
#       same vdevs and input with ct(commit) and ct(commit,nat(src=...)), in
#       a private run directory, rate from the egress port's tx_packets over
#       the same interval (pmd-stats-show is kept alongside);
#   (d) the cluster tax: `cargo bench --bench cluster_tax` (per packet, three
#       in-process nodes; runs with (a)) and `clusterfw-sim --split-return`
#       vs `--symmetric` (whole simulated cluster);
#   (e) the 3-node namespace test bed with clusterfw-pktgen as the load
#       (UDP, 1024 flows, echoed back through the cluster): per node packets,
#       forwarded share and drops (scripts/bench/testbed_load.sh).
#
# Never asserts on time; prints figures, targets and whether each is met.
# Installs what it needs (idempotent). Every process and DPDK runtime
# directory it made is removed on exit, also on failure or Ctrl-C.
#
# Environment: CFW_BENCH_OUT (default target/bench), CFW_BENCH_SECONDS
# (measurement interval, default 10, --quick 4), CFW_BENCH_BIN (a directory
# holding prebuilt clusterfw, clusterfw-ctl, clusterfw-pktgen: skips the
# cargo build of the node; the microbenchmarks always build).
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PEERS=0
QUICK=0
SKIP_MICRO=0
SKIP_DPDK=0
SKIP_TESTBED=0
SKIP_TAX=0
for a in "$@"; do
  case "$a" in
    --peers) PEERS=1 ;;
    --quick) QUICK=1 ;;
    --skip-micro) SKIP_MICRO=1 ;;
    --skip-dpdk) SKIP_DPDK=1 ;;
    --skip-testbed) SKIP_TESTBED=1 ;;
    --skip-tax) SKIP_TAX=1 ;;
    -h|--help) sed -n '2,47p' "$0"; exit 0 ;;
    *) echo "bench: unknown argument $a" >&2; exit 2 ;;
  esac
done

say() { printf 'bench: %s\n' "$*" >&2; }
[ "$(id -u)" -eq 0 ] || { say "run as root (DPDK, package installs)"; exit 1; }

SECS=${CFW_BENCH_SECONDS:-$([ $QUICK = 1 ] && echo 4 || echo 10)}
WARMUP=2
TAG="cfwb$$"
OUT=${CFW_BENCH_OUT:-$ROOT/target/bench}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/{micro,single,ovs,cluster_tax,testbed,meta,summary}.json "$OUT"/summary.md

# ---------------------------------------------------------------- cleanup
PIDS=()          # processes we started
PREFIXES=()      # DPDK --file-prefix values we used
OVS_DIR=""       # private OVS run directory, if started
stop_pid() {
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}
stop_ovs() {
  [ -n "$OVS_DIR" ] || return 0
  local n pid
  for n in ovs-vswitchd ovsdb-server; do
    if [ -f "$OVS_DIR/run/$n.pid" ]; then
      pid=$(cat "$OVS_DIR/run/$n.pid" 2>/dev/null || true)
      [ -n "$pid" ] && stop_pid "$pid"
      rm -f "$OVS_DIR/run/$n.pid"
    fi
  done
  OVS_DIR=""
}
cleanup() {
  local rc=$? pid p
  stop_ovs
  for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
  for p in "${PREFIXES[@]}"; do rm -rf "/var/run/dpdk/$p"; done
  [ $rc -eq 0 ] || say "failed (exit $rc); everything it started is stopped"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- setup
PY=/usr/bin/python3
need_pkgs=(dpdk jq python3)
[ $PEERS = 1 ] && need_pkgs+=(openvswitch-switch-dpdk)
missing=()
for p in "${need_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ! -x "$ROOT/target/release/clusterfw" ] && [ -z "${CFW_BENCH_BIN:-}" ] || [ ${#missing[@]} -gt 0 ]; then
  "$ROOT/scripts/setup.sh"
fi
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/cfw-bench-apt.log 2>&1 ||
    { tail -20 /tmp/cfw-bench-apt.log >&2; exit 1; }
fi
[ -x "$PY" ] || PY=python3

cd "$ROOT"
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
if [ -n "${CFW_BENCH_BIN:-}" ]; then
  BIN=$CFW_BENCH_BIN
elif [ $SKIP_DPDK = 0 ]; then
  say "building clusterfw, clusterfw-ctl, clusterfw-pktgen (release)"
  cargo build --release -p clusterfw -p testbed --bins >&2
  BIN=$TARGET_DIR/release
fi

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
"$PY" - "$OUT/meta.json" "$(date -u +%FT%TZ)" "$(hostname)" "$(nproc)" "$(loadavg)" \
  "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty')" \
  "$([ $QUICK = 1 ] && echo quick || echo full), interval ${SECS}s" <<'EOF'
import json, sys
o, date, host, cores, load, git, mode = sys.argv[1:]
json.dump({"date": date, "host": host, "cores": int(cores), "load_start": load, "git": git, "mode": mode}, open(o, "w"), indent=2)
EOF
say "load average at start: $(loadavg)"

# ---------------------------------------------------------------- (a) micro
if [ $SKIP_MICRO = 0 ]; then
  mkdir -p "$OUT/micro"
  crit_args=()
  [ $QUICK = 1 ] && crit_args=(--warm-up-time 1 --measurement-time 3)
  micro_cmd="cargo bench -p dataplane --bench pipeline -- ${crit_args[*]}"
  say "(a) $micro_cmd"
  micro_start=$(date +%s)
  cargo bench -p dataplane --bench pipeline -- "${crit_args[@]}" 2>&1 | tee "$OUT/micro/criterion.log" >&2
  say "(a) cargo bench -p dataplane --bench cluster_tax -- ${crit_args[*]}"
  cargo bench -p dataplane --bench cluster_tax -- "${crit_args[@]}" 2>&1 | tee -a "$OUT/micro/criterion.log" >&2
  say "(a) cargo bench -p dataplane --bench nat -- ${crit_args[*]}"
  cargo bench -p dataplane --bench nat -- "${crit_args[@]}" 2>&1 | tee -a "$OUT/micro/criterion.log" >&2
  bpf_cmd="cargo test --release -p dataplane --lib bytes_per_flow -- --nocapture"
  say "(a) $bpf_cmd"
  cargo test --release -p dataplane --lib bytes_per_flow -- --nocapture >"$OUT/micro/bytes_per_flow.log" 2>&1 || true
  "$PY" scripts/bench/parse.py criterion "$TARGET_DIR/criterion" "$micro_start" >"$OUT/micro/criterion.json"
  "$PY" scripts/bench/parse.py bytes-per-flow "$OUT/micro/bytes_per_flow.log" >"$OUT/micro/bpf.json"
  "$PY" - "$OUT" "$micro_cmd" "$bpf_cmd" <<'EOF'
import json, sys
out, mc, bc = sys.argv[1:]
b = json.load(open(f"{out}/micro/bpf.json")); b["command"] = bc
json.dump({"command": mc, "criterion": json.load(open(f"{out}/micro/criterion.json")), "bytes_per_flow": b},
          open(f"{out}/micro.json", "w"), indent=2)
EOF
fi

# ---------------------------------------------------------------- (b) DPDK
# The input: 1024 UDP/IPv4 flows 198.18.1.10:1024-2047 -> 198.18.2.10:9,
# 60-byte frames (64 with FCS), addressed to the first net_pcap port's MAC
# (02:70:63:61:70:00 in DPDK 22.11, checked against the node's log below).
# The next hop 198.18.2.10 is a static neighbor of the node (`neighbors:`);
# the second port reads one ARP reply from it, which teaches the same MAC to
# anything else on those vdevs. TX on both ports is net_pcap's tx_drop
# (counted, freed).
W="$OUT/single"
PCAP_IN="$W/udp-1024flows-64B.pcap"
PCAP_ARP="$W/arp-reply.pcap"
# IPv6 (issue 16): the same 1024 flows, 2001:db8:1::10:1024-2047 ->
# 2001:db8:2::10:9, 62-byte frames (the smallest UDP/IPv6 frame: 14 + 40 +
# 8); the outside port reads the ARP reply and a neighbour solicitation
# from 2001:db8:2::10 for the node's 2001:db8:2::1 (source link-layer
# address NH_MAC), which the node answers and learns the next hop from.
PCAP_IN6="$W/udp6-1024flows-66B.pcap"
PCAP_ND="$W/arp-reply-ns6.pcap"
IN_MAC=02:70:63:61:70:00
OUT_MAC=02:70:63:61:70:01
NH_MAC=02:00:00:00:02:0a
make_pcaps() {
  "$PY" scripts/bench/mkpcap.py udp "$PCAP_IN" --flows 1024 --size 60 --dst-mac "$IN_MAC"
  cargo run --release -q -p dataplane --example worker_split -- "$PCAP_IN" 2 "${PCAP_IN%.pcap}" >&2
  "$PY" scripts/bench/mkpcap.py arp-reply "$PCAP_ARP" --dst-mac "$OUT_MAC" --sender-mac "$NH_MAC" \
    --sender 198.18.2.10 --target 198.18.2.1
  "$PY" scripts/bench/mkpcap.py udp6 "$PCAP_IN6" --flows 1024 --size 62 --dst-mac "$IN_MAC"
  "$PY" scripts/bench/mkpcap.py arp-reply "$PCAP_ND" --dst-mac "$OUT_MAC" --sender-mac "$NH_MAC" \
    --sender 198.18.2.10 --target 198.18.2.1 --ns6-sender 2001:db8:2::10 --ns6-target 2001:db8:2::1
}
VDEV_IN="net_pcap0,rx_pcap=$PCAP_IN,infinite_rx=1"
VDEV_OUT="net_pcap1,rx_pcap=$PCAP_ARP"

run_testpmd() { # $1 = label
  local prefix="${TAG}-testpmd-$1" log="$W/testpmd-$1.log"
  PREFIXES+=("$prefix")
  local cmd="sleep $((SECS + WARMUP + 3)) | timeout -s INT $((SECS + WARMUP + 1)) dpdk-testpmd --no-huge -m 1024 --no-pci --file-prefix $prefix -l 0,1 --vdev $VDEV_IN --vdev $VDEV_OUT -- --forward-mode=io --stats-period 1 --total-num-mbufs 16384"
  say "(b) testpmd ($1): $cmd"
  # With --stats-period testpmd runs until SIGINT, then prints its totals and
  # waits for a line on stdin (kept open by sleep; testpmd exits at EOF).
  sleep $((SECS + WARMUP + 3)) | timeout -s INT $((SECS + WARMUP + 1)) dpdk-testpmd --no-huge -m 1024 --no-pci --file-prefix "$prefix" -l 0,1 \
    --vdev "$VDEV_IN" --vdev "$VDEV_OUT" -- --forward-mode=io --stats-period 1 --total-num-mbufs 16384 \
    >"$log" 2>&1 || true
  rm -rf "/var/run/dpdk/$prefix"
  "$PY" scripts/bench/parse.py testpmd "$log" "$SECS" >"$W/testpmd-$1.json"
  "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); d["command"]=sys.argv[2]; json.dump(d,open(sys.argv[1],"w"),indent=2)' \
    "$W/testpmd-$1.json" "$cmd"
  say "(b) testpmd ($1): $("$PY" -c 'import json,sys; print("%.2f Mpps" % json.load(open(sys.argv[1])).get("mpps", 0))' "$W/testpmd-$1.json")"
}

node_yaml() { # $1 = file, $2 = prefix, $3 = workers (1 or 2), $4 = aligned|mixed|crossed, $5 = pat (NAT), $6 = v6 (IPv6 input)
  local workers=${3:-1} vin=$VDEV_IN vout=$VDEV_OUT in=${PCAP_IN%.pcap} nat=${5:-} v6=${6:-} a6_in="" a6_out=""
  if [ "$v6" = v6 ]; then
    vin="net_pcap0,rx_pcap=$PCAP_IN6,infinite_rx=1"
    vout="net_pcap1,rx_pcap=$PCAP_ND"
    a6_in=$'\n    address6: 2001:db8:1::1/64'
    a6_out=$'\n    address6: 2001:db8:2::1/64'
  fi
  if [ "$workers" = 2 ]; then
    case $4 in
      aligned) vin="net_pcap0,rx_pcap=$in-w0.pcap,rx_pcap=$in-w1.pcap,infinite_rx=1" ;;
      crossed) vin="net_pcap0,rx_pcap=$in-w1.pcap,rx_pcap=$in-w0.pcap,infinite_rx=1" ;;
      *) vin="net_pcap0,rx_pcap=$PCAP_IN,rx_pcap=$PCAP_IN,infinite_rx=1" ;;
    esac
    vout="$vout,rx_pcap=$PCAP_ARP"
  fi
  cat >"$1" <<EOF
# Written by scripts/bench.sh: $workers worker(s), net_pcap in -> net_pcap out.
node:
  name: bench
logging:
  level: info
control-socket: $W/node.sock
dpdk:
  eal-args: ["--no-huge", "-m", "1024", "--no-pci", "--file-prefix", "$2", "-l", "0,1", "--log-level", "lib.eal:warning"]
  mbufs: 16383
  idle-sleep-us: 200
  workers: $workers
interfaces:
  - name: inside
    device: "$vin"
    address: 198.18.1.1/24$a6_in
    security-level: 100
  - name: outside
    device: "$vout"
    address: 198.18.2.1/24$a6_out
    security-level: 0
flow-table:
  capacity: 65536
neighbors:                    # the next hop, so no flow waits for ARP
  - address: 198.18.2.10
    mac: "$NH_MAC"
EOF
  # PAT of the inside network to one pool address on the way out (the
  # 1024 flows take 1024 ports of its blocks).
  [ "$nat" = pat ] && cat >>"$1" <<EOF
nat:
  pools:
    - name: pat
      addresses: [198.51.100.7]
  rules:
    - name: inside-out
      kind: dynamic-pat
      real-interface: inside
      mapped-interface: outside
      source: 198.18.1.0/24
      pool: pat
EOF
  return 0
}

ctl() { "$BIN/clusterfw-ctl" --socket "$W/node.sock" "$@"; }

run_clusterfw() { # $1 = label, $2 = workers (default 1), $3 = input split (2 workers), $4 = pat, $5 = v6
  local label=$1 workers=${2:-1} split=${3:-} nat=${4:-} v6=${5:-} prefix="${TAG}-node-$1" pid i
  PREFIXES+=("$prefix")
  node_yaml "$W/node.yaml" "$prefix" "$workers" "$split" "$nat" "$v6"
  local cmd="$BIN/clusterfw --config $W/node.yaml; clusterfw-ctl show stats --json at +${WARMUP}s and +$((WARMUP + SECS))s"
  say "(b) clusterfw: $cmd"
  rm -f "$W/node.sock"
  "$BIN/clusterfw" --config "$W/node.yaml" >"$W/node.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  for i in $(seq 100); do [ -S "$W/node.sock" ] && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  [ -S "$W/node.sock" ] || { tail -20 "$W/node.log" >&2; say "clusterfw did not start"; return 1; }
  local mac
  mac=$(grep -o 'on net_pcap0 (port 0): [0-9./]* mac [0-9a-f:]*' "$W/node.log" | awk '{print $NF}')
  if [ -n "$mac" ] && [ "$mac" != "$IN_MAC" ]; then
    say "net_pcap MAC is $mac here, not $IN_MAC: regenerating the input"
    stop_pid "$pid"
    IN_MAC=$mac
    OUT_MAC=$(grep -o 'on net_pcap1 (port 1): [0-9./]* mac [0-9a-f:]*' "$W/node.log" | awk '{print $NF}')
    make_pcaps
    run_clusterfw "$label" "$workers" "$split" "$nat" "$v6"
    return
  fi
  sleep "$WARMUP"
  local t1 t2
  t1=$(date +%s.%N); ctl show stats --json >"$W/stats1.json"
  sleep "$SECS"
  t2=$(date +%s.%N); ctl show stats --json >"$W/stats2.json"
  ctl show conn --json >"$W/conn.json" 2>/dev/null || true
  stop_pid "$pid"
  rm -rf "/var/run/dpdk/$prefix"
  "$PY" scripts/bench/parse.py ctl-rate "$W/stats1.json" "$W/stats2.json" "$t1" "$t2" >"$W/clusterfw-$label.json"
  "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); d["command"]=sys.argv[2]; json.dump(d,open(sys.argv[1],"w"),indent=2)' \
    "$W/clusterfw-$label.json" "$cmd"
  cp "$W/node.log" "$W/node-$label.log"
  say "(b) clusterfw ($label): $("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.2f Mpps, drops in interval %s" % (d["mpps"], d["drops_in_interval"]))' "$W/clusterfw-$label.json")"
}

# Order: testpmd, clusterfw, [OVS ct, OVS ct+nat], clusterfw, testpmd, so
# that each figure has a neighbour of the other kind in time (the load of a
# shared VM drifts); each reported rate is the mean of its runs.
if [ $SKIP_DPDK = 0 ]; then
  mkdir -p "$W"
  make_pcaps
  run_testpmd before
  run_clusterfw first
  run_clusterfw v6-first 1 "" "" v6
  run_clusterfw pat-first 1 "" pat
  for split in aligned mixed crossed; do run_clusterfw "w2-$split-first" 2 "$split"; done
fi

# ---------------------------------------------------------------- (c) OVS
if [ $PEERS = 1 ] && [ $SKIP_DPDK = 0 ]; then
  OVSD="$OUT/ovs"
  rm -rf "$OVSD"
  mkdir -p "$OVSD/run" "$OVSD/db" "$OVSD/log" "$OVSD/etc"
  OVS_DIR=$OVSD
  export OVS_RUNDIR="$OVSD/run" OVS_DBDIR="$OVSD/db" OVS_LOGDIR="$OVSD/log" OVS_SYSCONFDIR="$OVSD/etc"
  prefix="${TAG}-ovs"
  PREFIXES+=("$prefix")
  VS=(ovs-vsctl --db="unix:$OVSD/run/db.sock" --timeout=30)
  APP=(ovs-appctl -t "$OVSD/run/ovs-vswitchd.ctl")
  say "(c) Open vSwitch (ovs-vswitchd-dpdk) in $OVSD"
  ovsdb-tool create "$OVSD/db/conf.db" /usr/share/openvswitch/vswitch.ovsschema
  ovsdb-server "$OVSD/db/conf.db" --remote="punix:$OVSD/run/db.sock" --pidfile="$OVSD/run/ovsdb-server.pid" \
    --unixctl="$OVSD/run/ovsdb-server.ctl" --detach --no-chdir --log-file="$OVSD/log/ovsdb-server.log" \
    2>>"$OVSD/log/console.log"
  "${VS[@]}" --no-wait init
  "${VS[@]}" --no-wait set Open_vSwitch . other_config:dpdk-init=true \
    "other_config:dpdk-extra=--no-huge --legacy-mem -m 1024 --no-pci --file-prefix $prefix --log-level=lib.eal:warning" \
    other_config:dpdk-lcore-mask=0x1 other_config:pmd-cpu-mask=0x2
  /usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk "unix:$OVSD/run/db.sock" --pidfile="$OVSD/run/ovs-vswitchd.pid" \
    --unixctl="$OVSD/run/ovs-vswitchd.ctl" --detach --no-chdir --log-file="$OVSD/log/ovs-vswitchd.log" \
    2>>"$OVSD/log/console.log"
  "${VS[@]}" add-br br0 -- set bridge br0 datapath_type=netdev
  "${VS[@]}" add-port br0 p0 -- set Interface p0 type=dpdk "options:dpdk-devargs=$VDEV_IN" ofport_request=1
  "${VS[@]}" add-port br0 p1 -- set Interface p1 type=dpdk "options:dpdk-devargs=$VDEV_OUT" ofport_request=2
  ovs_measure() { # $1 = name, $2 = action
    ovs-ofctl del-flows br0
    ovs-ofctl add-flow br0 "table=0,priority=100,ip,in_port=1,actions=$2,output:2"
    ovs-ofctl add-flow br0 "table=0,priority=0,actions=drop"
    "${APP[@]}" dpctl/flush-conntrack >/dev/null
    say "(c) OVS $1: flow 'ip,in_port=1,actions=$2,output:2'"
    sleep "$WARMUP"
    # Live port counters (OpenFlow port stats): the database's
    # Interface statistics are refreshed only every 5 s
    # (stats-update-interval, at least 5000 ms), so two readings 4 s apart
    # (--quick) could see the same numbers and a rate of 0.
    stats() { "$PY" -c '
import json, re, sys
def pkts(text, port, way):
    m = re.search(r"port\s+%s:\s*rx pkts=(\d+).*?tx pkts=(\d+)" % port, text, re.S)
    return int(m.group(1 if way == "rx" else 2))
print(json.dumps({"tx_packets": pkts(sys.argv[1], 2, "tx"), "rx_packets": pkts(sys.argv[2], 1, "rx")}))' \
      "$(ovs-ofctl dump-ports br0 2)" "$(ovs-ofctl dump-ports br0 1)"; }
    local t1 t2
    "${APP[@]}" dpif-netdev/pmd-stats-clear >/dev/null
    t1=$(date +%s.%N); stats >"$OVSD/$1-s1.json"
    sleep "$SECS"
    t2=$(date +%s.%N); stats >"$OVSD/$1-s2.json"
    "${APP[@]}" dpif-netdev/pmd-stats-show >"$OVSD/$1-pmd-stats.txt"
    "${APP[@]}" dpctl/dump-conntrack | head -3 >"$OVSD/$1-conntrack-sample.txt" || true
    "$PY" scripts/bench/parse.py ovs-rate "$OVSD/$1-s1.json" "$OVSD/$1-s2.json" "$t1" "$t2" "$OVSD/$1-pmd-stats.txt" >"$OVSD/$1.json"
    "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); d["command"]=sys.argv[2]; json.dump(d,open(sys.argv[1],"w"),indent=2)' \
      "$OVSD/$1.json" "ovs-vswitchd-dpdk, ovs-ofctl add-flow br0 'ip,in_port=1,actions=$2,output:2', p1 tx_packets over ${SECS}s"
    say "(c) OVS $1: $("$PY" -c 'import json,sys; print("%.2f Mpps" % json.load(open(sys.argv[1]))["mpps"])' "$OVSD/$1.json")"
  }
  ovs_measure ct_commit "ct(commit)"
  ovs_measure ct_commit_nat "ct(commit,nat(src=198.18.2.1))"
  stop_ovs
  rm -rf "/var/run/dpdk/$prefix"
  "$PY" -c 'import json,sys; d=sys.argv[1]; json.dump({k: json.load(open(f"{d}/{k}.json")) for k in ("ct_commit","ct_commit_nat")}, open(f"{d}/../ovs.json","w"), indent=2)' "$OVSD"
fi

if [ $SKIP_DPDK = 0 ]; then
  for split in crossed mixed aligned; do run_clusterfw "w2-$split-second" 2 "$split"; done
  run_clusterfw pat-second 1 "" pat
  run_clusterfw v6-second 1 "" "" v6
  run_clusterfw second
  run_testpmd after
  "$PY" - "$W" <<'EOF'
import json, sys
w = sys.argv[1]
b, a = (json.load(open(f"{w}/testpmd-{n}.json")) for n in ("before", "after"))
c1, c2 = (json.load(open(f"{w}/clusterfw-{n}.json")) for n in ("first", "second"))
mean = lambda xs: sum(xs) / len(xs) if xs else None
tp = {"mpps": mean([x["mpps"] for x in (b, a) if "mpps" in x]), "runs": [b, a], "command": b.get("command")}
cf = {"mpps": mean([c1["mpps"], c2["mpps"]]), "runs": [c1, c2], "command": c1.get("command"),
      "drops_in_interval": [c1["drops_in_interval"], c2["drops_in_interval"]]}
two = {}
for split in ("aligned", "mixed", "crossed"):
    r1, r2 = (json.load(open(f"{w}/clusterfw-w2-{split}-{n}.json")) for n in ("first", "second"))
    two[split] = {"mpps": mean([r1["mpps"], r2["mpps"]]), "runs": [r1, r2], "command": r1.get("command"),
                  "steered_share": mean([r["steered_share"] for r in (r1, r2)]),
                  "handoff_drops_in_interval": [r["handoff_drops_in_interval"] for r in (r1, r2)]}
a, x = two["aligned"]["mpps"], two["crossed"]["mpps"]
# CPU per packet over both workers, crossed minus aligned: what a frame
# that crosses to the other worker costs (the drops of an overloaded ring
# included).
handoff_ns = 2e3 / x - 2e3 / a if a and x else None
p1, p2 = (json.load(open(f"{w}/clusterfw-pat-{n}.json")) for n in ("first", "second"))
pat = {"mpps": mean([p1["mpps"], p2["mpps"]]), "runs": [p1, p2], "command": p1.get("command"),
       "drops_in_interval": [p1["drops_in_interval"], p2["drops_in_interval"]]}
s1, s2 = (json.load(open(f"{w}/clusterfw-v6-{n}.json")) for n in ("first", "second"))
v6 = {"mpps": mean([s1["mpps"], s2["mpps"]]), "runs": [s1, s2], "command": s1.get("command"),
      "drops_in_interval": [s1["drops_in_interval"], s2["drops_in_interval"]]}
json.dump({"clusterfw": cf, "clusterfw_pat": pat,
           "pat_cost_ratio": cf["mpps"] / pat["mpps"] if pat["mpps"] else None,
           "clusterfw_v6": v6, "v6_over_v4": v6["mpps"] / cf["mpps"] if cf["mpps"] else None,
           "testpmd": tp, "ratio": cf["mpps"] / tp["mpps"] if tp["mpps"] else None,
           "workers2": two, "workers2_over_1": a / cf["mpps"] if cf["mpps"] else None, "handoff_ns": handoff_ns},
          open(f"{w}/../single.json", "w"), indent=2)
EOF
fi

# ---------------------------------------------------------------- (d) tax
# CPU per delivered packet, asymmetric vs --symmetric arrival, in the
# simulator (real pipelines, virtual clock, no EAL); median of interleaved
# pairs because the simulator's cpu_ns is wall time inside the pipelines.
SIM="${BIN:-$TARGET_DIR/release}/clusterfw-sim"
[ -x "$SIM" ] || SIM="$TARGET_DIR/release/clusterfw-sim"
if [ ! -x "$SIM" ] && [ -z "${CFW_BENCH_BIN:-}" ]; then
  cargo build --release -p testbed --bin clusterfw-sim >&2 2>/dev/null || true
fi
if [ $SKIP_TAX = 1 ]; then
  echo '{"available": false, "note": "skipped (--skip-tax)"}' >"$OUT/cluster_tax.json"
elif [ -x "$SIM" ] && "$SIM" --help 2>&1 | grep -q -- '--symmetric'; then
  say "(d) cluster tax: $SIM --json --split-return vs --symmetric"
  # IPv4 only (`--ipv6-share 0`): comparable with the figures before the
  # simulator went dual-stack (its default sends a quarter over IPv6).
  if ! "$PY" scripts/bench/cluster_tax.py "$SIM" "$([ $QUICK = 1 ] && echo 3 || echo 7)" --ipv6-share 0 >"$OUT/cluster_tax.json" 2>"$OUT/cluster_tax.log"; then
    echo '{"available": false, "note": "clusterfw-sim failed; see cluster_tax.log"}' >"$OUT/cluster_tax.json"
  fi
else
  echo '{"available": false, "note": "not yet available: clusterfw-sim --symmetric (simulator CLI) is not built"}' >"$OUT/cluster_tax.json"
  say "(d) cluster tax: not yet available (no clusterfw-sim --symmetric)"
fi

# ---------------------------------------------------------------- (e) bed
if [ $SKIP_TESTBED = 0 ] && [ $SKIP_DPDK = 0 ]; then
  bash scripts/bench/testbed_load.sh "$BIN" "$OUT" "$SECS" "${CFW_BENCH_TESTBED_PPS:-20000}" ||
    { say "(e) test bed run failed"; echo '{"available": false, "note": "test bed run failed; see the log"}' >"$OUT/testbed.json"; }
fi

# ---------------------------------------------------------------- summary
"$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); m["load_end"]=sys.argv[2]; json.dump(m,open(sys.argv[1],"w"),indent=2)' \
  "$OUT/meta.json" "$(loadavg)"
"$PY" scripts/bench/parse.py summary "$OUT"
say "wrote $OUT/summary.json and $OUT/summary.md"
