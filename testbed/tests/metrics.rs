//! Prometheus metrics of every node of the three-node test bed (issue 14,
//! SPEC O1): each node serves `GET /metrics` on its namespace's loopback
//! (`metrics.listen`, `nodeconf::METRICS_LISTEN`). After HTTP downloads
//! through the cluster:
//!
//! (a) Prometheus' own `promtool check metrics` accepts every node's scrape
//!     (format and naming lint);
//! (b) the scraped counters match `show stats` and `show cluster`: taken
//!     between two `show`s, every counter compared (packets, forwarded,
//!     flows created, fast path, drops by every reason, each NIC's
//!     received and sent packets, CCL messages by kind) lies between the
//!     two, the gauges (epoch, state, flow capacity) equal them, and the
//!     downloads show (forwarded > 0 on some node); worker 0's busy-loop
//!     histogram has its 14 cumulative buckets, a count and a sum; the
//!     replication lag (versions behind the control node) is there on the
//!     data nodes, as `show cluster` says, and not on the control node;
//! (c) anything but `/metrics` is refused (404), and a scrape answers
//!     while the downloads run.
//!
//! Needs root, curl and promtool (Debian's `prometheus`; scripts/setup.sh).
//! A guard takes the bed down on every exit path.

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Instant;
use testbed::harness::{self, Children, Shape, Steps, TestBed};
use testbed::nodeconf::METRICS_LISTEN;
use testbed::sys;

const NODES: usize = 3;
const INSIDE: &str = "cfw-inside";
const OUTSIDE: &str = "cfw-outside";
const SERVER: &str = "198.18.20.2";
const BYTES: u64 = 2 << 20;

fn scrape(k: usize, path: &str) -> Result<(String, String)> {
    let url = format!("http://{METRICS_LISTEN}{path}");
    let out = Command::new("ip")
        .args(["netns", "exec", &format!("cfw-n{k}"), "curl", "-sS", "--max-time", "10", "-w", "\n%{http_code}", &url])
        .output()?;
    ensure!(out.status.success(), "curl {url} in cfw-n{k}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout)?;
    let (body, code) = text.rsplit_once('\n').context("no status")?;
    Ok((code.to_string(), body.to_string()))
}

/// `name{labels}` → value (labels as written, in order; counts exact
/// below 2^53).
fn samples(text: &str) -> Result<BTreeMap<String, f64>> {
    let mut m = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (key, v) = line.rsplit_once(' ').with_context(|| format!("sample line {line:?}"))?;
        m.insert(key.to_string(), v.parse().with_context(|| format!("value of {line:?}"))?);
    }
    Ok(m)
}

fn promtool(text: &str) -> Result<()> {
    let mut c = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    std::io::Write::write_all(c.stdin.as_mut().context("stdin")?, text.as_bytes())?;
    drop(c.stdin.take());
    let out = c.wait_with_output()?;
    ensure!(
        out.status.success(),
        "promtool check metrics: {} {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// What `show` said, as the metric samples it must bracket:
/// (sample key, value).
fn expected(stats: &Value, cluster: &Value) -> Vec<(String, u64)> {
    let mut v = Vec::new();
    for name in ["packets", "forwarded", "flows_created", "fast_path", "consumed", "dropped"] {
        v.push((format!("clusterfw_{name}_total"), num(&stats[name])));
    }
    if let Some(drops) = stats["drops"].as_object() {
        for (reason, n) in drops {
            v.push((format!("clusterfw_drops_total{{reason=\"{reason}\"}}"), num(n)));
        }
    }
    for p in stats["ports"].as_array().into_iter().flatten() {
        let l = format!("{{port=\"{}\",device=\"{}\"}}", p["name"].as_str().unwrap_or(""), p["device"].as_str().unwrap_or(""));
        v.push((format!("clusterfw_nic_rx_packets_total{l}"), num(&p["rx_packets"])));
        v.push((format!("clusterfw_nic_tx_packets_total{l}"), num(&p["tx_packets"])));
        v.push((format!("clusterfw_nic_rx_ring_drops_total{l}"), num(&p["rx_ring_drops"])));
    }
    for k in cluster["ccl"].as_array().into_iter().flatten() {
        let kind = k["kind"].as_str().unwrap_or("");
        v.push((format!("clusterfw_ccl_rx_total{{kind=\"{kind}\"}}"), num(&k["rx"])));
        v.push((format!("clusterfw_ccl_tx_total{{kind=\"{kind}\"}}"), num(&k["tx"])));
    }
    v
}

/// One node: the scrape lies between two `show`s; its gauges equal them.
fn compare(bed: &TestBed, k: usize) -> Result<(usize, u64)> {
    let (s0, c0) = (bed.show(k, "stats")?, bed.show(k, "cluster")?);
    let (code, text) = scrape(k, "/metrics")?;
    let (s1, c1) = (bed.show(k, "stats")?, bed.show(k, "cluster")?);
    ensure!(code == "200", "n{k}: /metrics answered {code}");
    promtool(&text).with_context(|| format!("n{k}"))?;
    let m = samples(&text)?;
    let (lo, hi) = (expected(&s0, &c0), expected(&s1, &c1));
    ensure!(lo.len() == hi.len() && lo.len() > 40, "n{k}: {} values to compare", lo.len());
    let mut bad = Vec::new();
    for ((key, a), (_, b)) in lo.iter().zip(&hi) {
        match m.get(key) {
            Some(&x) if *a as f64 <= x && x <= *b as f64 => {}
            got => bad.push(format!("{key}: scraped {got:?}, show said {a} then {b}")),
        }
    }
    ensure!(bad.is_empty(), "n{k}: {} mismatch(es): {}", bad.len(), bad.join("; "));
    // Gauges that stand still while the bed idles.
    let epoch = num(&c0["epoch"]);
    ensure!(num(&c1["epoch"]) == epoch && m.get("clusterfw_cluster_epoch") == Some(&(epoch as f64)), "n{k}: epoch {epoch} vs {:?}", m.get("clusterfw_cluster_epoch"));
    let state = c0["state"].as_str().context("state")?;
    let key = format!("clusterfw_cluster_state{{state=\"{state}\"}}");
    ensure!(m.get(&key) == Some(&1.0), "n{k}: {key} is {:?}", m.get(&key));
    let states = m.iter().filter(|(k, v)| k.starts_with("clusterfw_cluster_state{") && **v == 1.0).count();
    ensure!(states == 1, "n{k}: {states} states at 1");
    // Replication lag: a data node's versions behind (0 on an idle bed),
    // as show cluster says; none on the control node.
    let lag = m.get("clusterfw_cluster_replica_versions_behind").copied();
    let want = c0["replica_lag"]["versions_behind"].as_u64().map(|v| v as f64);
    let control = c0["control_node"].as_u64() == c0["node_id"].as_u64();
    ensure!(lag == want && want.is_none() == control, "n{k}: replica versions behind {lag:?}, show cluster {want:?}");
    ensure!(m.get("clusterfw_flow_capacity").copied() == s0.get("flow_capacity").and_then(Value::as_u64).map(|c| c as f64), "n{k}: flow capacity");
    // Worker 0's busy loops: buckets cumulative up to +Inf = count > 0,
    // a sum in seconds.
    let h = "clusterfw_worker_busy_loop_seconds";
    let buckets: Vec<f64> = m.iter().filter(|(key, _)| key.starts_with(&format!("{h}_bucket{{worker=\"0\","))).map(|(_, v)| *v).collect();
    let count = m.get(&format!("{h}_count{{worker=\"0\"}}")).copied().unwrap_or(0.0);
    let inf = m.get(&format!("{h}_bucket{{worker=\"0\",le=\"+Inf\"}}")).copied();
    let sum = m.get(&format!("{h}_sum{{worker=\"0\"}}")).copied().unwrap_or(0.0);
    ensure!(buckets.len() == 14 && count > 0.0 && inf == Some(count) && sum > 0.0 && buckets.iter().all(|&b| b <= count),
        "n{k}: busy-loop histogram: buckets {buckets:?}, count {count}, +Inf {inf:?}, sum {sum}");
    Ok((lo.len(), m.get("clusterfw_forwarded_total").copied().unwrap_or(0.0) as u64))
}

#[test]
fn every_node_serves_prometheus_metrics_that_match_show() {
    assert!(sys::is_root(), "the metrics test bed test needs root (network namespaces, veths)");
    for tool in ["curl", "promtool"] {
        assert!(sys::have(tool), "{tool} is not installed (scripts/setup.sh installs it)");
    }
    let shape = Shape { workers: harness::bed_workers(), ..Shape::default() };
    let bed = TestBed::up_with(NODES, "/tmp/cfw-testbed-metrics", shape).expect("bed up");
    let mut steps = Steps::default();
    let mut step = |name: &str, r: Result<String>| steps.step(name, r);
    let (www, want, _server) = harness::served_file(&bed.run_dir, "metrics", OUTSIDE, SERVER, 8080, BYTES).expect("server");
    let url = format!("http://{SERVER}:8080/random.bin");
    let fetch = |i: usize| -> Result<std::process::Child> {
        let got = www.0.join(format!("got-{i}.bin")).to_string_lossy().into_owned();
        let args = ["netns", "exec", INSIDE, "curl", "-sS", "--fail", "--limit-rate", "1M", "--max-time", "60", "-o", &got, &url];
        Ok(Command::new("ip").args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?)
    };

    step(
        "(c) a scrape answers while downloads run; other paths are 404",
        (|| {
            let mut kids = Children((0..4).map(fetch).collect::<Result<_>>()?);
            let t0 = Instant::now();
            let mut sizes = Vec::new();
            for k in 1..=NODES {
                let (code, text) = scrape(k, "/metrics")?;
                ensure!(code == "200" && text.contains("# TYPE clusterfw_packets_total counter"), "n{k}: {code}");
                sizes.push(text.len());
            }
            let took = t0.elapsed();
            let (code, _) = scrape(1, "/nothing")?;
            ensure!(code == "404", "/nothing answered {code}");
            for (i, c) in kids.0.drain(..).enumerate() {
                let out = c.wait_with_output()?;
                ensure!(out.status.success(), "download {i}: {}", String::from_utf8_lossy(&out.stderr));
                let sum = harness::sha256(&www.0.join(format!("got-{i}.bin")))?;
                ensure!(sum == want, "download {i}: sha256 {sum}, served {want}");
            }
            Ok(format!("3 scrapes of {sizes:?} bytes in {:.0} ms during 4 downloads (sha256 right); /nothing 404", took.as_secs_f64() * 1e3))
        })(),
    );
    step(
        "(a, b) promtool accepts every scrape; counters between two shows, gauges equal",
        (|| {
            let mut forwarded = 0;
            let mut compared = Vec::new();
            for k in 1..=NODES {
                let (n, f) = compare(&bed, k)?;
                compared.push(n);
                forwarded += f;
            }
            ensure!(forwarded > 0, "no node forwarded anything");
            Ok(format!("values compared per node {compared:?}; forwarded {forwarded} in all"))
        })(),
    );
    steps.finish(&bed.run_dir, NODES);
}
