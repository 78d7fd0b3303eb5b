#!/usr/bin/env python3
"""Parsers and the summary writer for scripts/bench.sh (standard library only).

  parse.py criterion CRITERION_DIR [SINCE]    -> JSON on stdout
  parse.py bytes-per-flow TEST_LOG            -> JSON
  parse.py testpmd LOG SECONDS                -> JSON (Tx-pps of the egress port)
  parse.py ctl-rate S1.json S2.json T1 T2     -> JSON (clusterfw port counters)
  parse.py ovs-rate S1 S2 T1 T2 PMD_STATS     -> JSON
  parse.py summary OUT_DIR                    -> writes OUT_DIR/summary.{json,md}

Every figure keeps the command that produced it (the caller passes it in
through the component JSON files' "command" fields).
"""
import glob
import json
import os
import re
import statistics
import sys


def criterion(root, since=0):
    """Results under target/criterion written at or after `since` (epoch
    seconds), so stale results of benches that did not run are left out."""
    out = {}
    for bench in (
        glob.glob(os.path.join(root, "*", "*", "*", "new", "benchmark.json"))
        + glob.glob(os.path.join(root, "*", "*", "new", "benchmark.json"))
        + glob.glob(os.path.join(root, "*", "new", "benchmark.json"))
    ):
        d = os.path.dirname(bench)
        if os.path.getmtime(os.path.join(d, "estimates.json")) < float(since):
            continue
        try:
            b = json.load(open(bench))
            e = json.load(open(os.path.join(d, "estimates.json")))
        except (OSError, ValueError):
            continue
        elems = (b.get("throughput") or {}).get("Elements")
        ns_iter = e["mean"]["point_estimate"]
        r = {"ns_per_iter": ns_iter, "elements_per_iter": elems}
        if elems:
            r["ns_per_packet"] = ns_iter / elems
            r["mpps"] = elems / ns_iter * 1e3
            r["per_s"] = elems / ns_iter * 1e9
        out[b["full_id"]] = r
    return out


def bytes_per_flow(log):
    rows = []
    for m in re.finditer(r"capacity (\d+): slot (\d+) B, bytes_per_flow (\d+)", open(log).read()):
        rows.append({"capacity": int(m[1]), "slot_bytes": int(m[2]), "bytes_per_flow": int(m[3])})
    return {"rows": rows, "max_bytes_per_flow": max((r["bytes_per_flow"] for r in rows), default=None)}


def testpmd(log, seconds):
    """Per-second Tx-pps samples of every port; the egress port is the one
    with the highest TX. Drops the first two samples (start-up)."""
    port = None
    samples = {}
    totals = {}
    for line in open(log, errors="replace"):
        m = re.search(r"NIC statistics for port (\d+)", line)
        if m:
            port = int(m[1])
            continue
        m = re.search(r"Tx-pps:\s+(\d+)", line)
        if m and port is not None:
            samples.setdefault(port, []).append(int(m[1]))
        m = re.search(r"TX-packets:\s+(\d+)", line)
        if m and port is not None:
            totals[port] = int(m[1])
    if not samples:
        return {"error": "no Tx-pps samples in " + log}
    egress = max(samples, key=lambda p: sum(samples[p]))
    s = samples[egress]
    while s and s[0] == 0:
        s = s[1:]
    s = s[1:] or s  # the first non-zero second is partial
    return {
        "egress_port": egress,
        "samples_pps": s,
        "mpps": statistics.median(s) / 1e6,
        "mpps_mean": statistics.mean(s) / 1e6,
        "tx_packets_total": totals.get(egress),
    }


def ctl_rate(s1, s2, t1, t2):
    a, b = json.load(open(s1)), json.load(open(s2))
    dt = float(t2) - float(t1)
    ports = {}
    for pa, pb in zip(a["ports"], b["ports"]):
        ports[pa["name"]] = {k: pb[k] - pa[k] for k in pa if isinstance(pa[k], int) and k != "port"}
    egress = max(ports, key=lambda n: ports[n].get("tx_packets", 0))
    fwd = ports[egress]["tx_packets"]
    drops = {k: b["drops"][k] - a["drops"].get(k, 0) for k in b.get("drops", {}) if b["drops"][k] - a["drops"].get(k, 0)}
    return {
        "interval_s": dt,
        "egress": egress,
        "forwarded": fwd,
        "mpps": fwd / dt / 1e6,
        "ports": ports,
        "drops_in_interval": drops,
        "flows_created_total": b.get("flows_created"),
        "tx_full_drops_in_interval": b.get("tx_full_drops", 0) - a.get("tx_full_drops", 0),
        # Several workers: frames steered to their worker, and lost because
        # its ring was full.
        "steered_share": (b.get("steered_out", 0) - a.get("steered_out", 0)) / fwd if fwd else 0.0,
        "handoff_drops_in_interval": b.get("handoff_drops", 0) - a.get("handoff_drops", 0),
        "workers": len(b.get("workers", [])) or 1,
    }


def ovs_rate(s1, s2, t1, t2, pmd):
    a, b = json.load(open(s1)), json.load(open(s2))
    dt = float(t2) - float(t1)
    fwd = b["tx_packets"] - a["tx_packets"]
    text = open(pmd, errors="replace").read()
    pmd_rx = [int(x) for x in re.findall(r"packets received:\s+(\d+)", text)]
    cyc = re.findall(r"avg processing cycles per packet:\s+([\d.]+)", text)
    return {
        "interval_s": dt,
        "forwarded": fwd,
        "mpps": fwd / dt / 1e6,
        "rx_mpps": (b["rx_packets"] - a["rx_packets"]) / dt / 1e6,
        "pmd_packets_received": pmd_rx,
        "pmd_cycles_per_packet": [float(c) for c in cyc],
    }


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


def fmt(x, unit="", nd=2):
    return "n/a" if x is None else f"{x:.{nd}f}{unit}"


def summary(out):
    micro = load(os.path.join(out, "micro.json")) or {}
    single = load(os.path.join(out, "single.json")) or {}
    ovs = load(os.path.join(out, "ovs.json"))
    tax = load(os.path.join(out, "cluster_tax.json"))
    meta = load(os.path.join(out, "meta.json")) or {}
    bed = load(os.path.join(out, "testbed.json"))
    c = micro.get("criterion", {})
    est = lambda n: c.get(f"established/{n}", {})
    newc = c.get("new_connections/syn_1024_into_4096") or next((v for k, v in c.items() if k.startswith("new_connections")), {})
    bpf = (micro.get("bytes_per_flow") or {}).get("max_bytes_per_flow")
    cfw = (single.get("clusterfw") or {}).get("mpps")
    tp = (single.get("testpmd") or {}).get("mpps")
    rows = []

    def row(name, value, target, ok, command):
        rows.append({"what": name, "value": value, "target": target, "met": ok, "command": command})

    mc = micro.get("command")
    for n, tgt in [(1000, None), (100000, 14.0), (1000000, 8.0)]:
        e = est(n)
        v = e.get("mpps")
        row(
            f"microbench established, {n} flows (Mpps; ns/packet {fmt(e.get('ns_per_packet'), '', 1)})",
            v,
            f">= {tgt} Mpps" if tgt else None,
            None if v is None or tgt is None else v >= tgt,
            mc,
        )
    v = newc.get("per_s")
    row("microbench new connections per second", v, ">= 1000000", None if v is None else v >= 1e6, mc)
    row("bytes per flow (ConnTable::bytes_per_flow, max over capacities)", bpf, "<= 256", None if bpf is None else bpf <= 256, (micro.get("bytes_per_flow") or {}).get("command"))
    runs = lambda k: ", ".join(fmt(r.get("mpps")) for r in (single.get(k) or {}).get("runs", []))
    row(f"DPDK single node: clusterfw Mpps (1 worker lcore, net_pcap infinite_rx -> net_pcap; mean of runs {runs('clusterfw')})",
        cfw, None, None, (single.get("clusterfw") or {}).get("command"))
    row(f"DPDK single node: testpmd io Mpps, same vdevs and input (mean of runs {runs('testpmd')})",
        tp, None, None, (single.get("testpmd") or {}).get("command"))
    ratio = cfw / tp if cfw and tp else None
    row("clusterfw / testpmd io", ratio, ">= 0.25", None if ratio is None else ratio >= 0.25, "ratio of the two above")
    pat = (single.get("clusterfw_pat") or {}).get("mpps")
    if single.get("clusterfw_pat"):
        row(f"DPDK single node: clusterfw with PAT Mpps (same input, inside /24 PAT'ed; mean of runs {runs('clusterfw_pat')})",
            pat, None, None, (single.get("clusterfw_pat") or {}).get("command"))
        r = single.get("pat_cost_ratio")
        row("cost of PAT: clusterfw without NAT / with PAT (Mpps ratio, same run)", r, "<= 1.15",
            None if r is None else r <= 1.15, "ratio of the two")
    if single.get("clusterfw_v6"):
        v6 = single["clusterfw_v6"]
        row(f"DPDK single node: clusterfw IPv6 Mpps (the same 1024 flows over IPv6, 62-byte frames; mean of runs {runs('clusterfw_v6')}; "
            f"drops in interval {v6.get('drops_in_interval')})", v6.get("mpps"), None, None, v6.get("command"))
        row("IPv6 / IPv4 Mpps, same run (issue 16)", single.get("v6_over_v4"), None, None, "ratio of the two")
    for key, label in [("established/1000", "1k"), ("established/100000", "100k")]:
        a, b = c.get(key, {}).get("mpps"), c.get(key.replace("established", "established_pat"), {}).get("mpps")
        if a and b:
            row(f"microbench established {label} flows: without NAT (fast path) / through PAT (Mpps {fmt(a)} / {fmt(b)})",
                a / b, "<= 1.15", a / b <= 1.15, mc)
    g, b = c.get("established_general_path/100000", {}).get("mpps"), c.get("established_pat/100000", {}).get("mpps")
    if g and b:
        row(f"microbench established 100k flows: general path without NAT / through PAT (Mpps {fmt(g)} / {fmt(b)})",
            g / b, None, None, mc)
    v = (c.get("new_pat_connections/syn_1024_into_4096") or {}).get("per_s")
    if v:
        row("microbench new PAT connections per second (one core)", v, None, None, mc)
    two = single.get("workers2") or {}
    if two:
        for split, what in [("aligned", "queue i replays worker i's flows: nothing crosses"),
                            ("mixed", "both queues replay every flow: half cross"),
                            ("crossed", "queue i replays the other worker's flows: everything crosses")]:
            t = two.get(split) or {}
            rr = ", ".join(fmt(r.get("mpps")) for r in t.get("runs", []))
            row(f"DPDK single node, 2 workers, {split} ({what}; handoff drops {t.get('handoff_drops_in_interval')}; "
                f"mean of runs {rr}) Mpps", t.get("mpps"), None, None, t.get("command"))
        r = single.get("workers2_over_1")
        row("2 workers aligned / 1 worker (2 vCPUs, shared with the control thread)", r, ">= 1.8 on 2 idle cores",
            None, "ratio of the two, same run")
        row("handoff cost: CPU ns per packet, crossed minus aligned (2 workers)", single.get("handoff_ns"), None, None,
            "2000 / crossed Mpps - 2000 / aligned Mpps")
    if ovs:
        for key, label in [("ct_commit", "ct(commit)"), ("ct_commit_nat", "ct(commit,nat(src))")]:
            o = (ovs.get(key) or {}).get("mpps")
            row(f"Open vSwitch userspace {label} Mpps, same vdevs and input", o, None, None, (ovs.get(key) or {}).get("command"))
            r = cfw / o if cfw and o else None
            if key == "ct_commit":
                row(f"clusterfw / OVS {label}", r, ">= 2.0", None if r is None else r >= 2.0, "ratio")
            else:
                # PAT against PAT, same vdevs and input.
                r = pat / o if pat and o else None
                row(f"clusterfw with PAT / OVS {label}", r, ">= 2.0", None if r is None else r >= 2.0, "ratio")
    else:
        row("Open vSwitch peers", None, None, None, "not run (scripts/bench.sh --peers)")
    for size in (60, 1502):
        d = c.get(f"cluster_tax/owner_direct/{size}", {}).get("ns_per_packet")
        f = c.get(f"cluster_tax/via_forwarder/{size}", {}).get("ns_per_packet")
        t = (d + f) / (2 * d) if d and f else None
        row(f"cluster tax microbench, {size}-byte frames: (owner_direct + via_forwarder) / (2 x owner_direct), ns/packet {fmt(d, '', 0)} direct, {fmt(f, '', 0)} via a forwarder",
            t, "<= 1.3", None if t is None else t <= 1.3, "cargo bench -p dataplane --bench cluster_tax")
    if tax and tax.get("available"):
        v = tax.get("tax")
        row("cluster tax in the simulator (CPU per delivered packet, --split-return vs --symmetric)", v, "<= 1.3", None if v is None else v <= 1.3, tax.get("command"))
        share = tax.get("non_owner_arrival_share")
        row(f"  share of delivered packets that arrived at a non-owner (forwarded over the CCL)", share, "~0.5", None, tax.get("command"))
        row("  natural ECMP (independent router hashes): tax", tax.get("natural_ecmp_tax"), None, None, tax.get("command"))
        row("  natural ECMP: share of delivered packets that arrived at a non-owner", tax.get("natural_ecmp_non_owner_share"), None, None, tax.get("command"))
        row("CCL bytes per delivered packet (asymmetric)", tax.get("ccl_bytes_per_delivered_packet"), None, None, tax.get("command"))
        row("CCL bytes per delivered packet (symmetric baseline)", tax.get("ccl_bytes_per_delivered_packet_symmetric"), None, None, tax.get("command"))
    else:
        row("cluster tax", None, "<= 1.3", None, (tax or {}).get("note", "not yet available"))
    if bed and bed.get("available"):
        snd, tot = bed.get("sender") or {}, bed.get("totals") or {}
        lat = snd.get("latency") or {}
        row(f"test bed, 3 nodes, pktgen UDP 1024 flows at {bed.get('rate_pps')} pps, echoed: sent / received back (Mpps)",
            f"{fmt(snd.get('tx_mpps'), '', 4)} / {fmt(snd.get('rx_mpps'), '', 4)}, lost {snd.get('lost')}", None, None, bed.get("command"))
        row("  round trip through the cluster p50 / p99 (us)", f"{fmt(lat.get('p50_us'), '', 0)} / {fmt(lat.get('p99_us'), '', 0)}", None, None, bed.get("command"))
        row("  forwarded share (packets forwarded to their owner over the CCL / packets the owners processed)",
            bed.get("forwarded_share"), None, None, "scripts/bench/testbed_load.sh: show cluster deltas")
        per = ", ".join(f"n{n['node']} {n.get('owner_packets')}/{n.get('forwarded_to_owner')}" for n in bed.get("nodes", []))
        row(f"  node drops during the run (by reason); per node owner/forwarded: {per}",
            f"{tot.get('dropped')} {json.dumps(tot.get('drops'))}", None, None, "show stats deltas")
    elif bed:
        row("test bed run", None, None, None, bed.get("note"))
    s = {"meta": meta, "rows": rows, "micro": micro, "single": single, "ovs": ovs, "cluster_tax": tax, "testbed": bed}
    json.dump(s, open(os.path.join(out, "summary.json"), "w"), indent=2)
    md = ["# clusterfw benchmark summary", ""]
    md.append(f"- date: {meta.get('date')}, host: {meta.get('host')}, cores: {meta.get('cores')}")
    md.append(f"- load average at start / end: {meta.get('load_start')} / {meta.get('load_end')}")
    md.append(f"- git: {meta.get('git')}; mode: {meta.get('mode')}")
    md.append("")
    md.append("| what | value | target | met | command |")
    md.append("|---|---|---|---|---|")
    for r in rows:
        v = r["value"]
        if v is None:
            vs = "n/a"
        elif isinstance(v, str):
            vs = v
        else:
            vs = f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}" if v < 10 else f"{v:.1f}"
        met = {True: "yes", False: "**no**", None: ""}[r["met"]]
        md.append(f"| {r['what']} | {vs} | {r['target'] or ''} | {met} | `{r['command'] or ''}` |")
    md.append("")
    md.append("Rates on a shared 2-vCPU VM are noisy; the ratios (same run, same input) matter more than absolute rates.")
    open(os.path.join(out, "summary.md"), "w").write("\n".join(md) + "\n")
    print("\n".join(md))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "criterion":
        r = criterion(*args)
    elif cmd == "bytes-per-flow":
        r = bytes_per_flow(*args)
    elif cmd == "testpmd":
        r = testpmd(*args)
    elif cmd == "ctl-rate":
        r = ctl_rate(*args)
    elif cmd == "ovs-rate":
        r = ovs_rate(*args)
    elif cmd == "summary":
        summary(*args)
        return 0
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
