//! A per-client embryonic limit held cluster-wide on the three-node test
//! bed (issue 15 item 3, SPEC L1; docs/flood.md, "Connection limits").
//!
//! (a) a reload on the control node adds `limits: per-client-embryonic-max:
//!     60`; every member runs it (the limits travel in the replicated
//!     policy);
//! (b) the client host opens half-open connections as fast as hping3
//!     sends SYNs (1500 SYNs at 500/s from incrementing source ports, so
//!     the inside router's L4 hash spreads them over all three members) to
//!     an outside address that never answers: the sum of the members' own
//!     counts of that client — the truth — is sampled every 200 ms during
//!     and after, and must stay near 60 (report the overshoot: each member
//!     admits against its own count plus the others' last broadcasts);
//!     every member refused some of the SYNs, and each member's estimate of
//!     the client (`show limits`) is near the truth;
//! (b2) every member logged its refusals as limit events (the syslog
//!     messages `conn-limit`; one per class a second at most);
//! (c) `show conn count` answers on every member.
//!
//! Needs root and hping3 (scripts/setup.sh). A guard takes the bed down on
//! every exit path.

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use std::process::Stdio;
use std::time::{Duration, Instant};
use testbed::harness::{self, Shape, Steps, TestBed};
use testbed::{bed, sys};

const NODES: usize = 3;
const INSIDE: &str = "cfw-inside";
const CLIENT: &str = "198.18.10.2";
/// On the server's network, answered by no one: SYNs stay unanswered.
const NOWHERE: &str = "198.18.20.77";
const LIMIT: u64 = 60;

/// The client's row of node `k`'s `show limits`: (local embryonic,
/// estimate embryonic).
fn client_row(v: &Value) -> (u64, u64) {
    let row = v["clients"].as_array().into_iter().flatten().find(|c| c["client"] == CLIENT && c["class"] == "global");
    row.map_or((0, 0), |c| (c["local"]["embryonic"].as_u64().unwrap_or(0), c["estimate"]["embryonic"].as_u64().unwrap_or(0)))
}

fn reload_limits(bed: &TestBed) -> Result<String> {
    let control = bed.show(1, "cluster")?["control_node"].as_u64().context("no control node")? as usize;
    let limits = format!("access-rules: []\nlimits:\n  per-client-embryonic-max: {LIMIT}\n");
    harness::edit_file(&bed.run_dir.join(format!("n{control}.yaml")), "access-rules: []\n", &limits)?;
    let r = bed::ctl_reload(&bed.bin_dir, &bed.socket(control))?;
    let version = r["running"]["version"].as_u64().context("reload answered no version")?;
    let t0 = Instant::now();
    loop {
        let running = (1..=NODES).all(|k| {
            bed.show(k, "limits").is_ok_and(|v| v["classes"][0]["limits"]["per_client_embryonic_max"].as_u64() == Some(LIMIT))
        });
        if running {
            return Ok(format!("n{control} reloaded (v{version}); every member runs the limit after {} ms", t0.elapsed().as_millis()));
        }
        ensure!(t0.elapsed() < Duration::from_secs(10), "not every member runs the limit after 10 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_per_client_embryonic_limit_holds_across_three_nodes() {
    assert!(sys::is_root(), "the limits test bed test needs root (network namespaces, veths)");
    assert!(sys::have("hping3"), "hping3 is not installed (scripts/setup.sh installs it)");
    let shape = Shape { workers: harness::bed_workers(), ..Shape::default() };
    let bed = TestBed::up_with(NODES, "/tmp/cfw-testbed-limits", shape).expect("bed up");
    let run = bed.run_dir.clone();
    let mut steps = Steps::default();
    let mut step = |name: &str, r: Result<String>| steps.step(name, r);

    let reloaded = reload_limits(&bed);
    let ok = reloaded.is_ok();
    step("(a) the limit replicated to every member", reloaded);

    let half_open = (|| {
        ensure!(ok, "no limit running");
        let flood = sys::ns_command(INSIDE, "hping3")
            .args(["-q", "-S", "-p", "80", "-i", "u2000", "-c", "1500", NOWHERE])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let t0 = Instant::now();
        let (mut peak, mut samples, mut worst_est) = (0u64, 0, 0u64);
        let mut last = Vec::new();
        while t0.elapsed() < Duration::from_secs(6) {
            let rows: Vec<(u64, u64)> = (1..=NODES).map(|k| bed.show(k, "limits").map(|v| client_row(&v))).collect::<Result<_>>()?;
            let truth: u64 = rows.iter().map(|r| r.0).sum();
            peak = peak.max(truth);
            samples += 1;
            if t0.elapsed() > Duration::from_secs(4) {
                // Settled: every member's estimate against the truth.
                worst_est = worst_est.max(rows.iter().map(|r| r.1.abs_diff(truth)).max().unwrap_or(0));
            }
            last = rows;
            std::thread::sleep(Duration::from_millis(200));
        }
        let out = flood.wait_with_output()?;
        let sent = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        let line = sent.lines().find(|l| l.contains("packets transmitted")).unwrap_or("?").trim().to_string();
        let mut refused = Vec::new();
        let mut created = 0;
        let mut drops: std::collections::BTreeMap<String, u64> = Default::default();
        for k in 1..=NODES {
            let s = bed.show(k, "stats")?;
            refused.push(s["drops"]["per-client-embryonic-limit"].as_u64().unwrap_or(0));
            created += s["flows_created"].as_u64().unwrap_or(0);
            for (r, n) in s["drops"].as_object().into_iter().flatten() {
                *drops.entry(r.clone()).or_default() += n.as_u64().unwrap_or(0);
            }
        }
        drops.retain(|_, n| *n > 0);
        let held: Vec<u64> = last.iter().map(|r| r.0).collect();
        ensure!(peak >= LIMIT * 9 / 10, "the client never came near its limit: peak {peak} (members hold {held:?})");
        ensure!(peak <= LIMIT * 5 / 4, "held at {peak} half-open connections, limit {LIMIT} (members hold {held:?})");
        ensure!(refused.iter().all(|&r| r > 0), "refusals per member {refused:?}");
        ensure!(worst_est <= LIMIT / 5, "a member's estimate was {worst_est} off the truth");
        Ok(format!(
            "hping3: {line}; the client's half-open connections, summed over the members' own counts every 200 ms \
             ({samples} samples): peak {peak} against the limit {LIMIT} (overshoot {}), held per member {held:?}; \
             refused per member {refused:?}; members' estimates within {worst_est} of the truth once settled; \
             flows created over the members {created}; drops by reason over the members {drops:?}",
            peak.saturating_sub(LIMIT)
        ))
    })();
    step("(b) a client's half-open connections through all members held near the cluster-wide limit", half_open);

    step(
        "(b2) the refusals logged as limit events (one per class a second at most)",
        (|| {
            std::thread::sleep(Duration::from_millis(1200));
            let mut lines = Vec::new();
            for k in 1..=NODES {
                let log = std::fs::read_to_string(run.join(format!("n{k}.log")))?;
                let events: Vec<&str> = log.lines().filter(|l| l.contains("limits global:") && l.contains("per-client-embryonic-max")).collect();
                ensure!(!events.is_empty(), "n{k} logged no limit event");
                lines.push(format!("n{k}: {} event(s), first: {}", events.len(), events[0].split("limits global:").nth(1).unwrap_or("").trim()));
            }
            Ok(lines.join("; "))
        })(),
    );
    step(
        "(c) show conn count on every member",
        (|| {
            let mut parts = Vec::new();
            for k in 1..=NODES {
                let v = bed.show(k, "conn-count")?;
                let local = v["local"].as_u64().context("no local count")?;
                parts.push(format!("n{k} {local} here"));
            }
            Ok(parts.join(", "))
        })(),
    );
    steps.finish(&run, NODES);
}
