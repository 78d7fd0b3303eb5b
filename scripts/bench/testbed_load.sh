#!/usr/bin/env bash
# (e) Test-bed run: the 3-node cluster bed with clusterfw-pktgen as the load.
#
#   scripts/bench/testbed_load.sh BIN_DIR OUT_DIR SECONDS RATE
#
# Brings up `clusterfw-testbed up --nodes 3` in OUT_DIR/testbed, starts a
# pktgen responder (--echo) on the server host's eth0 (cfw-outside) and a
# UDP pktgen of 1024 flows on the client host's eth0 (cfw-inside), both on
# net_af_packet vdevs, for SECONDS at RATE packets/s (0 = as fast as
# possible). The echoes come back through the cluster, hashed by the other
# router, so most of them reach a node that does not own the flow. Reads
# every node's `show stats` and `show cluster` before and after, and writes
# OUT_DIR/testbed.json: pktgen's reports, per node the packets received,
# forwarded, owned, forwarded to their owner over the CCL, drops by reason,
# and the totals (forwarded share = forwarded to an owner / owner packets).
# The af_packet path runs through the kernel and the bed's routers are
# Linux namespaces: this is about function under load, not speed.
#
# Everything it starts is stopped, and the bed is taken down, on exit.
set -euo pipefail
BIN=$1
OUT=$2
SECS=${3:-10}
RATE=${4:-20000}
RUN="$OUT/testbed"
mkdir -p "$RUN"
TAG="cfwtl$$"
PIDS=()
say() { printf 'bench: (e) %s\n' "$*" >&2; }

cleanup() {
  for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "/var/run/dpdk/$TAG-send" "/var/run/dpdk/$TAG-resp"
  "$BIN/clusterfw-testbed" down --run-dir "$RUN" >&2 || true
}
trap cleanup EXIT INT TERM

say "clusterfw-testbed up --nodes 3 --run-dir $RUN"
"$BIN/clusterfw-testbed" up --nodes 3 --run-dir "$RUN" >&2

snap() { # $1 = before|after
  for k in 1 2 3; do
    "$BIN/clusterfw-ctl" --socket "$RUN/n$k.sock" show stats --json >"$RUN/n$k.stats.$1.json"
    "$BIN/clusterfw-ctl" --socket "$RUN/n$k.sock" show cluster --json >"$RUN/n$k.cluster.$1.json"
  done
}

eal() { # $1 = file-prefix suffix
  echo "--no-huge -m 256 --no-pci --file-prefix $TAG-$1 -l 0 --vdev net_af_packet0,iface=eth0,framecnt=2048"
}

say "responder in cfw-outside: clusterfw-pktgen --mode responder --echo --ip 198.18.20.2"
ip netns exec cfw-outside "$BIN/clusterfw-pktgen" --mode responder --echo --ip 198.18.20.2 \
  --duration 0 --json --eal "$(eal resp)" >"$RUN/responder.json" 2>"$RUN/responder.log" &
PIDS+=($!)
sleep 3
snap before
SEND_CMD="ip netns exec cfw-inside clusterfw-pktgen --mode udp --flows 1024 --size 64 --gateway 198.18.10.1 --src-ip 198.18.10.2 --dst-ip 198.18.20.2 --rate $RATE --duration $SECS --json --eal \"$(eal send)\""
say "$SEND_CMD"
ip netns exec cfw-inside "$BIN/clusterfw-pktgen" --mode udp --flows 1024 --size 64 --gateway 198.18.10.1 \
  --src-ip 198.18.10.2 --dst-ip 198.18.20.2 --rate "$RATE" --duration "$SECS" --json --eal "$(eal send)" \
  >"$RUN/sender.json" 2>"$RUN/sender.log" || say "sender failed: $(tail -3 "$RUN/sender.log")"
sleep 1
snap after
kill -INT "${PIDS[0]}" 2>/dev/null || true
wait "${PIDS[0]}" 2>/dev/null || true
PIDS=()

python3 - "$RUN" "$SEND_CMD" "$SECS" "$RATE" >"$OUT/testbed.json" <<'EOF'
import json, sys
run, cmd, secs, rate = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
nodes, tot = [], {"rx": 0, "forwarded": 0, "owner_packets": 0, "forwarded_to_owner": 0, "forwarded_received": 0, "dropped": 0, "drops": {}}
for k in (1, 2, 3):
    sb, sa = load(f"{run}/n{k}.stats.before.json"), load(f"{run}/n{k}.stats.after.json")
    cb, ca = load(f"{run}/n{k}.cluster.before.json"), load(f"{run}/n{k}.cluster.after.json")
    if not (sb and sa and cb and ca):
        nodes.append({"node": k, "error": "stats missing"})
        continue
    c = lambda s: s.get("counters", s)
    d = lambda name: c(sa).get(name, 0) - c(sb).get(name, 0)
    cc = lambda name: ca["counters"].get(name, 0) - cb["counters"].get(name, 0)
    drops = {}
    for r, a in (c(sa).get("drops") or {}).items():
        b = (c(sb).get("drops") or {}).get(r, 0)
        if a - b:
            drops[r] = a - b
    n = {"node": k, "rx": d("packets"), "forwarded": d("forwarded"), "dropped": d("dropped"), "drops": drops,
         "owner_packets": cc("owner_packets"), "forwarded_to_owner": cc("forwarded_to_owner"),
         "forwarded_received": cc("forwarded_received")}
    nodes.append(n)
    for key in ("rx", "forwarded", "owner_packets", "forwarded_to_owner", "forwarded_received", "dropped"):
        tot[key] += n[key]
    for r, v in drops.items():
        tot["drops"][r] = tot["drops"].get(r, 0) + v
sender, resp = load(f"{run}/sender.json"), load(f"{run}/responder.json")
share = tot["forwarded_to_owner"] / tot["owner_packets"] if tot["owner_packets"] else None
print(json.dumps({"available": sender is not None, "command": cmd, "seconds": secs, "rate_pps": rate,
                  "sender": sender, "responder": resp, "nodes": nodes, "totals": tot,
                  "forwarded_share": share}, indent=2))
EOF
say "wrote $OUT/testbed.json"
