//! `clusterfw-sim`: run one deterministic cluster simulation and print what
//! happened (per node: owner packets, forwarded packets, cookie-decoded
//! SYN-ACKs, director queries, CCL messages by kind; totals; invariants).
#![deny(unsafe_code)]

use std::process::ExitCode;
use testbed::sim::{self, net::CclLink, SimConfig};

const USAGE: &str = "\
usage: clusterfw-sim [--nodes 3] [--workers 1] [--flows 2000] [--udp-flows N] [--seed 7]
                     [--loss 0.0] [--latency-us 20] [--jitter-us 0]
                     [--reorder 0.0] [--reorder-us 300] [--symmetric | --split-return]
                     [--no-cluster] [--no-seq-randomization] [--burst 32]
                     [--start-ms 500] [--json] [--trace-flow ID]
                     [--mixed] [--icmp-flows N] [--reuse P] [--idle-share P]
                     [--idle-max-s S] [--ccl-cut NODE:FROM_MS[:UNTIL_MS]] [--run-ms MS]
                     [--ipv6-share P]
       clusterfw-sim --seed S --randomized [--ipv6-share P] [--json]

Simulates N clusterfw nodes (real dataplane pipelines) between an inside and
an outside ECMP router, with TCP clients/servers and UDP/DNS flows, on a
virtual clock. The same seed gives the same run, bit for bit.

  --workers N           pipelines per node, frames steered to them as the
                        node does (docs/workers.md; default 1)
  --flows N             TCP flows (default 2000); --udp-flows defaults to N/4
  --loss P              CCL frame loss probability
  --latency-us/--jitter-us   CCL one-way latency and uniform jitter
  --reorder P           probability a CCL frame is held back up to --reorder-us
  --symmetric           both routers send both directions to the same node
                        (the cluster-tax baseline)
  --split-return        the return direction always reaches a node other than
                        the forward direction's (for inside-initiated TCP: a
                        non-owner), about half of all packets (the cluster-tax
                        scenario)
  --no-cluster          independent single-node firewalls (expected to fail)
  --mixed               add ICMP echo flows (UDP flows / 4), follow-up TCP
                        connections on 5% of the tuples and 2% idle flows
                        (server think time / UDP gaps up to 40 s)
  --icmp-flows N        ICMP echo flows
  --reuse P             share of TCP tuples reused by a second connection
  --idle-share P, --idle-max-s S   flows that idle mid-way, and for how long
  --ipv6-share P        share of the connections of each kind run over IPv6
                        (2001:db8::/32; default 0.25; 0: IPv4 only, as the
                        simulator ran before it was dual-stack)
  --randomized          the sweep's scenario for --seed (nodes, CCL impairments,
                        burst size, ... drawn from the seed; put it last)
  --randomized-any      the same (it once skipped known issues; none are left)
  --ccl-cut N:A[:B]     node N's CCL port is down from A ms (until B ms; else
                        for good): its data-plane CCL frames and heartbeats
  --run-ms MS           run at least this long even when every flow is done
                        (membership: `--flows 0 --run-ms 2000`)
  --trace-flow ID       print to stderr what happens to flow ID's frames (and
                        CCL control messages and losses)
  --json                print the report as JSON
Exit status: 0 when every invariant holds, 1 when one fails, 2 on usage errors.";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(ok) => {
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("clusterfw-sim: {e}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Vec<String>) -> Result<bool, String> {
    let mut cfg = SimConfig::new(7, 3).flows(2000, 500);
    let mut json = false;
    let mut udp: Option<usize> = None;
    let mut link = CclLink::default();
    let mut randomized = false;
    let mut trace: Option<u32> = None;
    let mut mixed = false;
    let mut icmp: Option<usize> = None;
    let mut ipv6_share: Option<f64> = None;
    let mut it = args.into_iter();
    fn val<T: std::str::FromStr>(
        it: &mut impl Iterator<Item = String>,
        flag: &str,
    ) -> Result<T, String> {
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        v.parse().map_err(|_| format!("{flag}: bad value {v:?}"))
    }
    while let Some(a) = it.next() {
        match a.as_str() {
            "--nodes" => cfg.nodes = val(&mut it, &a)?,
            "--workers" => cfg.workers = val(&mut it, &a)?,
            "--flows" => cfg.tcp_flows = val(&mut it, &a)?,
            "--udp-flows" => udp = Some(val(&mut it, &a)?),
            "--seed" => cfg.seed = val(&mut it, &a)?,
            "--loss" => link.loss = val(&mut it, &a)?,
            "--latency-us" => link.latency_ns = val::<u64>(&mut it, &a)? * 1000,
            "--jitter-us" => link.jitter_ns = val::<u64>(&mut it, &a)? * 1000,
            "--reorder" => link.reorder = val(&mut it, &a)?,
            "--reorder-us" => link.reorder_ns = val::<u64>(&mut it, &a)? * 1000,
            "--symmetric" => cfg.symmetric = true,
            "--split-return" => cfg.split_return = true,
            "--no-cluster" => cfg.cluster = false,
            "--no-seq-randomization" => cfg.seq_randomization = false,
            "--burst" => cfg.burst = val(&mut it, &a)?,
            "--start-ms" => cfg.start_window_ns = val::<u64>(&mut it, &a)? * 1_000_000,
            "--json" => json = true,
            "--mixed" => mixed = true,
            "--icmp-flows" => icmp = Some(val(&mut it, &a)?),
            "--reuse" => cfg.reuse_share = val(&mut it, &a)?,
            "--idle-share" => cfg.idle_share = val(&mut it, &a)?,
            "--idle-max-s" => cfg.idle_ns.1 = val::<u64>(&mut it, &a)? * 1_000_000_000,
            "--randomized-any" => {
                let seed = cfg.seed;
                cfg = SimConfig::randomized_any(seed);
                randomized = true;
            }
            "--trace-flow" => trace = Some(val(&mut it, &a)?),
            "--ipv6-share" => ipv6_share = Some(val(&mut it, &a)?),
            "--run-ms" => cfg.min_run_ns = val::<u64>(&mut it, &a)? * 1_000_000,
            "--ccl-cut" => {
                let v: String = val(&mut it, &a)?;
                cfg.ccl_cut = Some(parse_cut(&v).ok_or_else(|| format!("--ccl-cut: bad value {v:?}"))?);
            }
            "--randomized" => {
                let seed = cfg.seed;
                cfg = SimConfig::randomized(seed);
                randomized = true;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(true);
            }
            _ => return Err(format!("unknown argument {a:?}")),
        }
    }
    if link.reorder > 0.0 && link.reorder_ns == 0 {
        link.reorder_ns = 300_000;
    }
    if !(0.0..=1.0).contains(&link.loss) || !(0.0..=1.0).contains(&link.reorder) {
        return Err("--loss and --reorder are probabilities (0-1)".into());
    }
    if let Some(s) = ipv6_share {
        if !(0.0..=1.0).contains(&s) {
            return Err("--ipv6-share is a share (0-1)".into());
        }
        // Wherever it stands (also before --randomized).
        cfg.ipv6_share = s;
    }
    if !randomized {
        cfg.udp_flows = udp.unwrap_or(cfg.tcp_flows / 4);
        cfg.ccl = link;
        if mixed {
            let (r, i, m) = (cfg.reuse_share, cfg.idle_share, cfg.idle_ns.1);
            cfg = cfg.mixed();
            // Explicit flags win over the mix's defaults.
            if r > 0.0 {
                cfg.reuse_share = r;
            }
            if i > 0.0 {
                cfg.idle_share = i;
            }
            if m != SimConfig::new(0, 1).idle_ns.1 {
                cfg.idle_ns.1 = m;
            }
        }
        if let Some(n) = icmp {
            cfg.icmp_flows = n;
        }
        cfg.time_limit_ns = cfg.time_limit_ns.max(3 * cfg.idle_ns.1 + 60_000_000_000);
    }
    cfg.trace_flow = trace;
    let wall = std::time::Instant::now();
    let report = sim::run(cfg)?;
    let wall = wall.elapsed();
    if json {
        let mut v = serde_json::to_value(&report).map_err(|e| e.to_string())?;
        v["ok"] = serde_json::Value::Bool(report.ok());
        v["wall_ms"] = serde_json::json!(wall.as_millis() as u64);
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", report.summary());
        let per_pkt = report.totals.cpu_ns as f64 / report.host_packets.max(1) as f64;
        println!(
            "  cost: {} host packets delivered, {:.0} ns node CPU per delivered packet; wall {} ms",
            report.host_packets,
            per_pkt,
            wall.as_millis()
        );
        println!(
            "  result: {}",
            if report.ok() {
                "all invariants hold"
            } else {
                "INVARIANTS FAILED"
            }
        );
    }
    Ok(report.ok())
}

/// `NODE:FROM_MS[:UNTIL_MS]`.
fn parse_cut(v: &str) -> Option<sim::net::CclCut> {
    let mut it = v.split(':');
    let node = it.next()?.parse().ok()?;
    let from_ns = it.next()?.parse::<u64>().ok()? * 1_000_000;
    let until_ns = match it.next() {
        Some(u) => u.parse::<u64>().ok()? * 1_000_000,
        None => u64::MAX,
    };
    (it.next().is_none() && from_ns < until_ns).then_some(sim::net::CclCut { node, from_ns, until_ns })
}
