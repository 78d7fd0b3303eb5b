#!/usr/bin/env python3
"""Cluster tax from the simulator (no EAL): CPU per delivered packet when
about half of all packets arrive at a non-owner (`--split-return`: the
return direction of every flow reaches a node other than the forward
direction's, so for inside-initiated TCP every return packet arrives at a
non-owner) against symmetric arrival (`--symmetric`: both directions at one
node, the baseline). The natural ECMP case (each router hashing its
direction independently; about a third of the packets at a non-owner with
3 nodes) is run too and reported alongside.

  cluster_tax.py SIM_BINARY [RUNS] [extra clusterfw-sim args...]  -> JSON

`cpu_ns` is the wall time the simulator measured inside the nodes'
pipelines (per node, summed), so it is noisy on a shared machine: the pair
is run RUNS times (default 5), interleaved, and the median ratio reported.
"""
import json
import statistics
import subprocess
import sys


def run(sim, extra, mode):
    cmd = [sim, "--json"] + extra + ([mode] if mode else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    d = json.loads(p.stdout)
    t = d["totals"]
    cl = t.get("cluster", {})
    delivered = d["host_packets"]
    return {
        "ok": d.get("ok"),
        "cpu_ns": t["cpu_ns"],
        "delivered": delivered,
        "cpu_ns_per_delivered": t["cpu_ns"] / max(delivered, 1),
        "node_packets": t["packets"],
        "ccl_bytes": d["ccl"]["bytes"],
        "ccl_bytes_per_delivered": d["ccl"]["bytes"] / max(delivered, 1),
        "forwarded_to_owner": cl.get("forwarded_to_owner"),
        "split_flows": d.get("split_flows"),
        "flows": d.get("tcp_flows", 0) + d.get("udp_flows", 0),
        "command": " ".join(cmd),
    }


def main():
    sim = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    extra = sys.argv[3:]
    pairs = []
    natural = []
    for _ in range(runs):
        a = run(sim, extra, "--split-return")
        s = run(sim, extra, "--symmetric")
        n = run(sim, extra, None)
        pairs.append((a, s))
        natural.append(n["cpu_ns_per_delivered"] / s["cpu_ns_per_delivered"])
    ratios = [a["cpu_ns_per_delivered"] / s["cpu_ns_per_delivered"] for a, s in pairs]
    a, s = pairs[-1]
    fwd = a["forwarded_to_owner"]
    out = {
        "available": True,
        "command": f"{' '.join([sim, '--json'] + extra)} --split-return vs. the same with --symmetric, {runs} interleaved pairs (median ratio)",
        "tax": statistics.median(ratios),
        "tax_runs": ratios,
        "asymmetric": a,
        "natural_ecmp_tax": statistics.median(natural),
        "natural_ecmp_non_owner_share": None if n.get("forwarded_to_owner") is None else n["forwarded_to_owner"] / max(n["delivered"], 1),
        "symmetric": s,
        "non_owner_arrival_share": None if fwd is None else fwd / max(a["delivered"], 1),
        "split_flow_share": a["split_flows"] / max(a["flows"], 1) if a["split_flows"] is not None else None,
        "ccl_bytes_per_delivered_packet": a["ccl_bytes_per_delivered"],
        "ccl_bytes_per_delivered_packet_symmetric": s["ccl_bytes_per_delivered"],
        "all_invariants_ok": all(x["ok"] and y["ok"] for x, y in pairs),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
