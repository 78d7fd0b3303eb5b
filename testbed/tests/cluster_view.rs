//! One view of the whole cluster from any node (issue 14, item 4; SPEC
//! L5) on the three-node test bed: `clusterfw-ctl cluster show TOPIC`
//! asks the node, which asks the other members over the CCL and merges.
//!
//! (a) while `DOWNLOADS` paced downloads run (each `PACE_SECS` on the
//!     wire), `cluster show conn` asked of each node lists each download
//!     exactly once (in the client's direction when its owner answered,
//!     though a forwarder's record holds the direction it saw first), owned by a member
//!     that answered, its state kept on one more member (the director, or
//!     a backup when the owner directs it); the owner, director and backups are
//!     the roles each member's own `show conn` gives the connection, and
//!     the three nodes' merged views agree on them;
//! (b) `cluster show stats`: every member answered, and the cluster's
//!     total of forwarded packets lies between the sums of the members'
//!     own `show stats` taken just before and just after;
//! (c) `cluster show cluster`: the members agree on epoch, control node
//!     and configuration version;
//! (d) a trace (`clusterfw-ctl trace start … port 8081` on n2, then
//!     `TRACED` downloads from another server port): every member
//!     records; only frames of the filter are recorded; a download whose
//!     server half lands on a non-owner shows the forwarder hop (at the
//!     forwarder: from a port, role forwarder, `to <owner>`) and the
//!     owner hop (at the owner: from the forwarder, role owner, out of a
//!     port) — with `TRACED` downloads the chance that none has a
//!     forwarder is 3^-8 (the forwarding node may be the connection's
//!     director: its role then says so);
//! (e) n3 killed: `cluster show conn` asked of n1 still answers (within
//!     the 2 s deadline and the client's timeout), names n3 as not
//!     answering, and lists the downloads that survive the kill.
//!
//! Needs root and python3 (`scripts/setup.sh`). A guard takes the bed down
//! on every exit path.

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testbed::faults::{self, Fault};
use testbed::harness::{self, Children, Shape, Steps, TestBed};
use testbed::sys;

const NODES: usize = 3;
const INSIDE: &str = "cfw-inside";
const OUTSIDE: &str = "cfw-outside";
const SERVER: &str = "198.18.20.2";
const CLIENT: &str = "198.18.10.2";
const BYTES: u64 = 2 << 20;
const DOWNLOADS: usize = 6;
const PACE_SECS: &str = "14";
const TRACED: usize = 8;

fn names(v: &Value) -> BTreeSet<String> {
    v.as_array().into_iter().flatten().filter_map(|x| x.as_str().map(String::from)).collect()
}

/// Node `k`'s roles per download (by client port) in its own `show conn`.
fn local_roles(bed: &TestBed, k: usize) -> Result<BTreeMap<u64, BTreeSet<String>>> {
    let v = bed.show(k, "conn")?;
    let mut out: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for r in v["connections"].as_array().context("connections")? {
        if let Some(port) = download_port(&r["tuple"]) {
            out.entry(port).or_default().insert(r["role"].as_str().unwrap_or("owner").to_string());
        }
    }
    Ok(out)
}

/// A download's client port, whichever direction the tuple is in (a
/// forwarder's record holds the direction it saw first).
fn download_port(t: &Value) -> Option<u64> {
    if t["src"] == CLIENT && t["dst"] == SERVER && t["dst_port"] == 8080 {
        t["src_port"].as_u64()
    } else if t["src"] == SERVER && t["dst"] == CLIENT && t["src_port"] == 8080 {
        t["dst_port"].as_u64()
    } else {
        None
    }
}

/// The merged rows of the downloads, by client port: one row per
/// download, in whichever direction; a row whose owner answered shows the
/// client's direction.
fn merged_rows(v: &Value) -> Result<BTreeMap<u64, Value>> {
    let mut out = BTreeMap::new();
    for r in v["rows"].as_array().context("rows")? {
        let t = &r["tuple"];
        if let Some(port) = download_port(t) {
            ensure!(r["owner_answered"] != true || t["src"] == CLIENT, "the owner's row in the reply's direction: {r}");
            ensure!(out.insert(port, r.clone()).is_none(), "port {port} listed twice");
        }
    }
    Ok(out)
}

/// The roles of node `name` in a merged row.
fn roles_in(row: &Value, name: &str) -> BTreeSet<String> {
    let mut s = BTreeSet::new();
    if row["owner"] == name {
        s.insert("owner".to_string());
    }
    if row["director"] == name {
        s.insert("director".to_string());
    }
    if names(&row["backups"]).contains(name) {
        s.insert("backup".to_string());
    }
    if names(&row["forwarders"]).contains(name) {
        s.insert("forwarder".to_string());
    }
    s
}

fn forwarded(v: &Value) -> u64 {
    v["forwarded"].as_u64().unwrap_or(0)
}

#[test]
fn cluster_show_merges_every_members_answer() {
    assert!(sys::is_root(), "the cluster view test bed test needs root (network namespaces, veths)");
    let shape = Shape { workers: harness::bed_workers(), ..Shape::default() };
    let bed = TestBed::up_with(NODES, "/tmp/cfw-testbed-view", shape).expect("bed up");
    let mut steps = Steps::default();
    let (www, _want, _server) = harness::served_file(&bed.run_dir, "view", OUTSIDE, SERVER, 8080, BYTES).expect("server");
    // The paced downloads: each prints its port once connected.
    let mut kids = Children(Vec::new());
    let mut ports = Vec::new();
    let started = (|| -> Result<()> {
        for i in 0..DOWNLOADS {
            let got = www.0.join(format!("got-{i}.bin")).to_string_lossy().into_owned();
            let mut c = Command::new("ip")
                .args(["netns", "exec", INSIDE, harness::python(), "-c", harness::PACED_GET, SERVER, "8080", "/random.bin", &got, PACE_SECS])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?;
            let mut line = String::new();
            use std::io::BufRead;
            std::io::BufReader::new(c.stdout.as_mut().context("stdout")?).read_line(&mut line)?;
            ports.push(line.trim().parse::<u64>().with_context(|| format!("download {i}: port {line:?}"))?);
            kids.0.push(c);
        }
        // Registrations and backups settle.
        std::thread::sleep(Duration::from_millis(500));
        Ok(())
    })();
    let ports: BTreeSet<u64> = ports.into_iter().collect();

    steps.step(
        "(a) cluster show conn: each download once, roles as every member's own show conn, the same from every node",
        (|| {
            started?;
            let mut views = Vec::new();
            for k in 1..=NODES {
                let t0 = Instant::now();
                let v = bed.cluster_show(k, "conn")?;
                let took = t0.elapsed();
                ensure!(names(&v["not_answering"]).is_empty(), "asked of n{k}: {} not answering", v["not_answering"]);
                let rows = merged_rows(&v)?;
                let seen: BTreeSet<u64> = rows.keys().copied().collect();
                ensure!(seen == ports, "asked of n{k}: downloads {seen:?}, running {ports:?}");
                for (p, r) in &rows {
                    ensure!(r["owner_answered"] == true, "port {p}: owner {} did not answer", r["owner"]);
                    // The state is kept on one more member (`backups: 1`):
                    // the director, unless the owner is the director, then
                    // a backup (docs/cluster-design.md, "Roles").
                    let owner = r["owner"].as_str().unwrap_or("");
                    let (director, backups) = (r["director"].as_str(), names(&r["backups"]));
                    let held = match director {
                        Some(d) => d != owner && backups.is_empty(),
                        None => backups.len() == 1 && !backups.contains(owner),
                    };
                    ensure!(held, "port {p}: owner {owner}, director {director:?}, backups {backups:?}");
                    ensure!(r["state"] == "ESTABLISHED", "port {p}: state {}", r["state"]);
                }
                views.push((rows, took));
            }
            // Each member's own view of the downloads, then the merge again:
            // owner, director and backups as the members say.
            let local: Vec<_> = (1..=NODES).map(|k| local_roles(&bed, k)).collect::<Result<_>>()?;
            let again = merged_rows(&bed.cluster_show(1, "conn")?)?;
            let mut forwarders = 0;
            for p in &ports {
                let r = &again[p];
                for k in 1..=NODES {
                    let name = format!("n{k}");
                    let strict = |s: &BTreeSet<String>| s.iter().filter(|x| *x != "forwarder").cloned().collect::<BTreeSet<_>>();
                    let mine = local[k - 1].get(p).cloned().unwrap_or_default();
                    ensure!(strict(&roles_in(r, &name)) == strict(&mine), "port {p}: n{k} says {mine:?}, the merge {:?}: {r}", roles_in(r, &name));
                }
                forwarders += names(&r["forwarders"]).len();
                for (rows, _) in &views {
                    let o = &rows[p];
                    ensure!((&o["owner"], &o["director"], &o["backups"]) == (&r["owner"], &r["director"], &r["backups"]), "port {p}: views differ: {o} / {r}");
                }
            }
            let owners: BTreeMap<String, usize> = again.values().fold(BTreeMap::new(), |mut m, r| {
                *m.entry(r["owner"].as_str().unwrap_or("?").to_string()).or_default() += 1;
                m
            });
            let took: Vec<String> = views.iter().map(|(_, t)| format!("{:.0} ms", t.as_secs_f64() * 1e3)).collect();
            Ok(format!("{} downloads listed once by each node (answered in {took:?}); owners {owners:?}; {forwarders} forwarder roles", ports.len()))
        })(),
    );
    steps.step(
        "(b) cluster show stats: every member answered; the total between the members' own shows",
        (|| {
            let before: u64 = (1..=NODES).map(|k| bed.show(k, "stats").map(|v| forwarded(&v))).sum::<Result<u64>>()?;
            let v = bed.cluster_show(2, "stats")?;
            let after: u64 = (1..=NODES).map(|k| bed.show(k, "stats").map(|v| forwarded(&v))).sum::<Result<u64>>()?;
            let statuses: Vec<&str> = v["members"].as_array().context("members")?.iter().filter_map(|m| m["status"].as_str()).collect();
            ensure!(statuses == ["answered"; NODES], "statuses {statuses:?}");
            let total = forwarded(&v["total"]);
            let per: u64 = (1..=NODES).map(|k| forwarded(&v["nodes"][format!("n{k}")])).sum();
            ensure!(before <= total && total <= after && per == total, "forwarded: members {before} then {after}, cluster total {total}, nodes {per}");
            Ok(format!("forwarded {before} <= {total} <= {after}"))
        })(),
    );
    steps.step(
        "(c) cluster show cluster: the members agree",
        (|| {
            let v = bed.cluster_show(3, "cluster")?;
            ensure!(v["agree"] == serde_json::json!({"epoch": true, "control_node": true, "config_version": true}), "{}", v["agree"]);
            let epochs: Vec<&Value> = (1..=NODES).map(|k| &v["nodes"][format!("n{k}")]["epoch"]).collect();
            Ok(format!("epoch {} on every member, control node {}", epochs[0], v["nodes"]["n1"]["control_node_name"]))
        })(),
    );
    steps.step(
        "(d) a trace across the members shows the forwarder and owner hops of a download",
        (|| {
            let (www2, want, _server2) = harness::served_file(&bed.run_dir, "view-traced", OUTSIDE, SERVER, 8081, 256 << 10)?;
            let ctl = bed.bin_dir.join("clusterfw-ctl");
            let sock = bed.socket(2);
            let (ctl, sock) = (ctl.to_string_lossy(), sock.to_string_lossy());
            let started = sys::run("timeout", &["8", &ctl, "--socket", &sock, "trace", "start", CLIENT, SERVER, "port", "8081", "--secs", "30", "--json"])?;
            let started: Value = serde_json::from_str(&started)?;
            let statuses: Vec<&str> = started["members"].as_array().context("members")?.iter().filter_map(|m| m["status"].as_str()).collect();
            ensure!(statuses == ["answered"; NODES], "trace start: {started}");
            let mut ports = BTreeSet::new();
            for i in 0..TRACED {
                let got = www2.0.join(format!("got-{i}.bin")).to_string_lossy().into_owned();
                let url = format!("http://{SERVER}:8081/random.bin");
                let p = sys::ns_run(INSIDE, "curl", &["-sS", "--fail", "--max-time", "30", "-o", &got, "-w", "%{local_port}", &url])?;
                ensure!(harness::sha256(std::path::Path::new(&got))? == want, "traced download {i}: sha256");
                ports.insert(p.trim().parse::<u64>()?);
            }
            let v = bed.cluster_show(1, "trace")?;
            ensure!(names(&v["not_answering"]).is_empty(), "{}", v["not_answering"]);
            let events = v["events"].as_array().context("events")?;
            // Only the filter's frames.
            for e in events {
                let t = &e["tuple"];
                let ours = (t["src"] == CLIENT && t["dst"] == SERVER && t["dst_port"] == 8081) || (t["src"] == SERVER && t["dst"] == CLIENT && t["src_port"] == 8081);
                ensure!(ours, "an event outside the filter: {e}");
            }
            let port_of = |e: &Value| if e["tuple"]["src"] == CLIENT { e["tuple"]["src_port"].as_u64() } else { e["tuple"]["dst_port"].as_u64() };
            let nodes: BTreeSet<&str> = events.iter().filter_map(|e| e["node"].as_str()).collect();
            ensure!(nodes.len() == NODES, "events from {nodes:?} only");
            // Per download: its forwarder and owner hops.
            let mut shown = None;
            let mut with_hop = 0;
            for p in &ports {
                let mine: Vec<&Value> = events.iter().filter(|e| port_of(e) == Some(*p)).collect();
                let owner = mine.iter().find(|e| e["role"] == "owner").and_then(|e| e["node"].as_str()).with_context(|| format!("port {p}: no owner event"))?;
                let to_owner = format!("to {owner}");
                // The node the server's half lands on forwards it: as a
                // forwarder, or as the connection's director.
                let fwd: Vec<&&Value> = mine
                    .iter()
                    .filter(|e| e["verdict"] == to_owner.as_str() && (e["role"] == "forwarder" || e["role"] == "director"))
                    .collect();
                if let Some(f) = fwd.first() {
                    let fnode = f["node"].as_str().unwrap_or("?");
                    let at_owner = mine.iter().filter(|e| e["node"] == owner && e["from"] == fnode && e["role"] == "owner" && e["verdict"].as_str().is_some_and(|v| v.starts_with("out "))).count();
                    ensure!(at_owner > 0, "port {p}: {} frames from forwarder {fnode} to {owner}, none decided at {owner} as from {fnode}", fwd.len());
                    with_hop += 1;
                    if shown.is_none() {
                        let first = |pred: &dyn Fn(&&&Value) -> bool| mine.iter().find(pred).map(|e| format!("{} {} {} {} {}", e["node"], e["flags"], e["from"], e["role"], e["verdict"]));
                        shown = Some(format!(
                            "port {p}: owner {owner}, forwarder {fnode} ({} frames to {owner}, {at_owner} decided at {owner} from {fnode}); e.g. [{}], [{}]",
                            fwd.len(),
                            first(&|e| e["node"] == fnode && e["verdict"] == to_owner.as_str()).unwrap_or_default(),
                            first(&|e| e["node"] == owner && e["from"] == fnode).unwrap_or_default(),
                        ));
                    }
                }
            }
            ensure!(with_hop > 0, "none of {} traced downloads had a forwarder", ports.len());
            Ok(format!("{} events from {nodes:?}; {with_hop} of {} downloads through a forwarder; {}", events.len(), ports.len(), shown.unwrap_or_default()))
        })(),
    );
    steps.step(
        "(e) n3 killed: cluster show conn on n1 names it not answering and still lists the downloads",
        (|| {
            faults::apply(&bed.run_dir, &bed.bin_dir, "n3", Fault::Kill)?;
            let t0 = Instant::now();
            let v = bed.cluster_show(1, "conn")?;
            let took = t0.elapsed();
            ensure!(names(&v["not_answering"]) == BTreeSet::from(["n3".to_string()]), "not answering: {}", v["not_answering"]);
            let rows = merged_rows(&v)?;
            // The downloads are still running (paced), now owned by n1/n2.
            ensure!(!rows.is_empty(), "no download listed");
            let unknown: Vec<&u64> = rows.keys().filter(|p| !ports.contains(p)).collect();
            ensure!(unknown.is_empty(), "unknown downloads {unknown:?}");
            Ok(format!("answered in {:.0} ms naming n3; {} of {} downloads listed", took.as_secs_f64() * 1e3, rows.len(), ports.len()))
        })(),
    );
    drop(kids);
    steps.finish(&bed.run_dir, NODES);
}
