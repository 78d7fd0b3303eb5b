//! IPv6 through a three-node cluster on the namespace test bed (issue 16:
//! `clusterfw-testbed up --nodes 3`, dual-stack). The client `cfw-inside`
//! (2001:db8:10::2) is behind the router `cfw-rin`, the server
//! `cfw-outside` (2001:db8:20::2) behind `cfw-rout`; both routers spread
//! IPv6 over the nodes by ECMP with an L4 hash, as they do IPv4
//! (`topology::Topology::cluster`), so the two directions of most
//! connections cross different nodes and meet over the CCL. Steps:
//!
//! - (a) the bed's own IPv6: each host pings its router over IPv6, and
//!   each router's ECMP route lists every node's address as a next hop
//!   (`ip -6 route`) — no node involved, so a failure here is the bed's;
//! - (b) `DOWNLOADS` concurrent `curl -6` downloads inside → outside, every
//!   sha256 right; the nodes' `show stats` say more than one node
//!   forwarded IPv6 (`ipv6.forwarded`) and `show cluster` that frames
//!   crossed the CCL to their owner meanwhile (`forwarded_to_owner`; no
//!   other traffic runs during the step);
//! - (c) a 5 s `iperf3 -6` TCP run inside → outside;
//! - (d) `ping -6` inside → outside through the cluster, 5 of 5;
//! - (e) `ping -6 -s 8000`: the client fragments each request (and the
//!   server each reply; routers never fragment IPv6), 5 of 5 — but the
//!   first, whose 1 500-byte fragments a node answers with packet too big
//!   (the outside links are 1 400 bytes, see (i));
//! - (f) an IPv6 TCP connection outside → inside fails, and the nodes'
//!   policy denials rise (`acl-denied` drops, or `show cluster`
//!   `release_drops` for a SYN the SYN guard held for its director);
//! - (g) `tracepath -6` inside → outside shows a node (its inside address)
//!   as a hop — its ICMPv6 time exceeded — and reaches the server;
//! - (i) (run before (h)) path-MTU discovery: the nodes' outside links are
//!   1 400 bytes, the server advertises an MSS for 1 500, a node answers
//!   the client's full segments with ICMPv6 packet too big, the client's
//!   path MTU drops to 1 400 and an iperf3 -6 upload completes;
//! - (h) failover: `FAILOVER_DOWNLOADS` rate-limited `curl -6` downloads
//!   (the client's receive buffer capped, so the data is in flight), the
//!   control node killed `FAULT_AFTER` into them (`faults::apply`, as
//!   `cluster_failover.rs` does: SIGKILL, its router-side links down);
//!   every download completes with its sha256 and the survivors agree on
//!   the membership. The longest stall of each transfer is printed.
//!
//! Workers per node: `CFW_BED_WORKERS` (1 when unset; `scripts/test.sh`
//! runs it again with 2). All steps run even if one fails (the failover
//! last: it kills a node); the test then fails naming each failed step. A
//! guard runs `down` on every exit path, background processes are stopped
//! by their guards, and the bed lock keeps concurrent runs apart. Needs
//! root, curl, iperf3 and tracepath (`scripts/setup.sh`).

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testbed::faults::{self, Fault};
use testbed::harness::{self, Background, Children, Steps, TempDir, TestBed};
use testbed::sys;
use testbed::topology::cluster_addr6 as a6;

const NODES: usize = 3;
const INSIDE: &str = "cfw-inside";
const OUTSIDE: &str = "cfw-outside";
const DOWNLOADS: usize = 12;
const FILE_BYTES: u64 = 2 << 20;
const FAILOVER_DOWNLOADS: usize = 10;
const FAILOVER_BYTES: u64 = 3 << 20;
/// Per download: 3 MiB at 256 KiB/s is about 12 s.
const RATE: &str = "256k";
const FAULT_AFTER: Duration = Duration::from_secs(4);
const POLL: Duration = Duration::from_millis(25);
/// The node the failover step kills: the control node (priority order
/// makes n1 control at bring-up; checked before the kill).
const VICTIM: usize = 1;

struct Ctx<'a> {
    bed: &'a TestBed,
}

impl Ctx<'_> {
    fn stats(&self) -> Result<Vec<Value>> {
        (1..=NODES).map(|k| self.bed.show(k, "stats")).collect()
    }
    fn clusters(&self, live: &[usize]) -> Result<Vec<Value>> {
        live.iter().map(|&k| self.bed.show(k, "cluster")).collect()
    }
}

fn ipv6_counter(s: &Value, name: &str) -> u64 {
    s["ipv6"][name].as_u64().unwrap_or(0)
}

fn drop_count(s: &Value, reason: &str) -> u64 {
    s["drops"][reason].as_u64().unwrap_or(0)
}

/// Per node `after - before` of `f`.
fn deltas(before: &[Value], after: &[Value], f: impl Fn(&Value) -> u64) -> Vec<u64> {
    before.iter().zip(after).map(|(b, a)| f(a).saturating_sub(f(b))).collect()
}

fn loss_line(out: &str) -> String {
    out.lines().find(|l| l.contains("received")).unwrap_or("").trim().to_string()
}

fn step_a_plumbing(_c: &Ctx) -> Result<String> {
    let mut detail = Vec::new();
    for (ns, router) in [(INSIDE, a6::RIN_HOST_SIDE), (OUTSIDE, a6::ROUT_HOST_SIDE)] {
        let out = sys::ns_run(ns, "ping", &["-6", "-c", "2", "-W", "2", router])?;
        ensure!(loss_line(&out).contains(" 0% packet loss"), "{ns} -> {router}: {out}");
        detail.push(format!("{ns} -> router {router}: {}", loss_line(&out)));
    }
    for (ns, dst, hops) in [
        ("cfw-rin", a6::SERVER_NET, (1..=NODES).map(a6::node_inside).collect::<Vec<_>>()),
        ("cfw-rout", a6::CLIENT_NET, (1..=NODES).map(a6::node_outside).collect()),
    ] {
        let out = sys::ip(ns, &["-6", "route", "show", dst])?;
        for h in &hops {
            ensure!(out.contains(&format!("nexthop via {h} ")), "{ns}: no next hop {h} in `ip -6 route show {dst}`:\n{out}");
        }
        ensure!(!out.contains("dead") && !out.contains("linkdown"), "{ns}: a dead next hop:\n{out}");
        detail.push(format!("{ns} {dst} over {}", hops.join(", ")));
    }
    // The kernel's own hash policy, as set.
    for ns in ["cfw-rin", "cfw-rout"] {
        let p = sys::ns_run(ns, "sysctl", &["-n", "net.ipv6.fib_multipath_hash_policy"])?;
        ensure!(matches!(p.trim(), "1" | "3"), "{ns}: net.ipv6.fib_multipath_hash_policy {}", p.trim());
    }
    Ok(detail.join("; "))
}

/// `n` concurrent `curl -6` downloads of `url` into `dir`; every sha256
/// must be `want`.
fn downloads(dir: &std::path::Path, url: &str, n: usize, want: &str, extra: &[&str]) -> Result<String> {
    let start = Instant::now();
    let mut kids = Children(Vec::new());
    for i in 0..n {
        kids.0.push(
            sys::ns_command(INSIDE, "curl")
                .args(["-6", "-g", "-sS", "--fail", "--connect-timeout", "10", "--max-time", "90"])
                .args(extra)
                .arg("-o")
                .arg(dir.join(format!("d{i}.bin")))
                .arg(url)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .context("cannot start curl")?,
        );
    }
    let mut failed = Vec::new();
    for (i, k) in kids.0.iter_mut().enumerate() {
        let status = k.wait()?;
        if !status.success() {
            let mut err = String::new();
            if let Some(e) = k.stderr.as_mut() {
                let _ = e.read_to_string(&mut err);
            }
            failed.push(format!("download {i}: curl {status}: {}", err.trim()));
        }
    }
    kids.0.clear();
    for i in 0..n {
        let p = dir.join(format!("d{i}.bin"));
        if p.exists() {
            let got = harness::sha256(&p)?;
            if got != want {
                failed.push(format!("download {i}: sha256 {got}, served {want}"));
            }
        }
    }
    ensure!(failed.is_empty(), "{} of {n} downloads failed:\n  {}", failed.len(), failed.join("\n  "));
    Ok(format!("{n} x {} KiB in {:.1} s, every sha256 matches", FILE_BYTES >> 10, start.elapsed().as_secs_f64()))
}

/// A file of `bytes` random bytes served by the threaded HTTP server
/// (`harness::HTTP_SERVER`, backlog 256) on the server's IPv6 address at
/// `port` as `random.bin`: its directory, its sha256 and the server.
fn serve6(run_dir: &std::path::Path, tag: &str, port: u16, bytes: u64) -> Result<(TempDir, String, Background)> {
    let www = TempDir::new(run_dir, &format!("{tag}-www"))?;
    let sha = harness::random_file(&www.0.join("random.bin"), bytes)?;
    let dir = www.0.to_string_lossy().into_owned();
    let mut server = Background::start(
        &format!("HTTP server ({tag}, IPv6)"),
        OUTSIDE,
        harness::python(),
        &["-c", harness::HTTP_SERVER, a6::SERVER, &port.to_string(), &dir],
        &run_dir.join(format!("{tag}-http.log")),
    )?;
    server.wait_listening(OUTSIDE, port, Duration::from_secs(10))?;
    Ok((www, sha, server))
}

fn step_b_downloads(c: &Ctx) -> Result<String> {
    let run_dir = &c.bed.run_dir;
    let (_www, want, _server) = serve6(run_dir, "v6-b", 8086, FILE_BYTES)?;
    let dl = TempDir::new(run_dir, "v6-b-download")?;
    let before = c.stats()?;
    let cl_before = c.clusters(&[1, 2, 3])?;
    let url = format!("http://[{}]:8086/random.bin", a6::SERVER);
    let got = downloads(&dl.0, &url, DOWNLOADS, &want, &[]);
    let after = c.stats()?;
    let cl_after = c.clusters(&[1, 2, 3])?;
    let fwd = deltas(&before, &after, |s| ipv6_counter(s, "forwarded"));
    let seen = deltas(&before, &after, |s| ipv6_counter(s, "packets"));
    let ccl = deltas(&cl_before, &cl_after, |v| v["counters"]["forwarded_to_owner"].as_u64().unwrap_or(0));
    let not_fwd = deltas(&before, &after, |s| drop_count(s, "ipv6-not-forwarded"));
    let counters = format!(
        "per node: IPv6 frames received {seen:?}, ipv6.forwarded {fwd:?}, forwarded_to_owner (CCL) {ccl:?}, ipv6-not-forwarded drops {not_fwd:?}"
    );
    let got = got.with_context(|| counters.clone())?;
    let carriers = fwd.iter().filter(|&&f| f > 0).count();
    ensure!(carriers >= 2, "only {carriers} node(s) forwarded IPv6: {counters}");
    ensure!(ccl.iter().sum::<u64>() > 0, "no frame crossed the CCL to its owner: {counters}");
    Ok(format!("{got}; {counters}"))
}

/// An iperf3 -6 upload of `secs` seconds from the client to a server on
/// `port` (started here, stopped on return): its JSON summary.
fn iperf3_upload(c: &Ctx, port: u16, secs: u32) -> Result<(Value, std::process::ExitStatus)> {
    let port_s = port.to_string();
    let mut server = Background::start(
        "iperf3 server (IPv6)",
        OUTSIDE,
        "iperf3",
        &["-s", "-B", a6::SERVER, "-p", &port_s],
        &c.bed.run_dir.join(format!("v6-iperf3-server-{port}.log")),
    )?;
    server.wait_listening(OUTSIDE, port, Duration::from_secs(10))?;
    let out = Command::new("timeout")
        .args(["40", "ip", "netns", "exec", INSIDE, "iperf3", "-6", "-c", a6::SERVER, "-p", &port_s, "-t", &secs.to_string(), "--json", "--connect-timeout", "10000"])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&text)
        .with_context(|| format!("iperf3 -6 ({}) printed no JSON: {text} {}", out.status, String::from_utf8_lossy(&out.stderr)))?;
    if let Some(e) = v.get("error") {
        bail!("iperf3 -6 ({}): {e}", out.status);
    }
    Ok((v, out.status))
}

fn step_c_iperf3(c: &Ctx) -> Result<String> {
    let (v, status) = iperf3_upload(c, 5206, 5)?;
    let sent = v["end"]["sum_sent"]["bytes"].as_u64().unwrap_or(0);
    let received = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    let bps = v["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0);
    let retrans = v["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    ensure!(status.success() && sent > 0 && received > 0, "iperf3 -6 moved nothing ({status}): sent {sent} B, received {received} B");
    Ok(format!("sent {sent} B, received {received} B, {:.3} Gbit/s, {retrans} retransmits", bps / 1e9))
}

fn step_d_ping(_c: &Ctx) -> Result<String> {
    let out = sys::ns_run(INSIDE, "ping", &["-6", "-c", "5", "-i", "0.2", "-W", "2", a6::SERVER])?;
    ensure!(loss_line(&out).contains(" 0% packet loss"), "{out}");
    Ok(loss_line(&out))
}

fn step_e_ping_8000(c: &Ctx) -> Result<String> {
    let before = c.stats()?;
    let out = sys::ns_run(INSIDE, "ping", &["-6", "-s", "8000", "-c", "5", "-i", "0.2", "-W", "2", a6::SERVER]);
    let after = c.stats()?;
    let frags = deltas(&before, &after, |s| ipv6_counter(s, "fragments"));
    let frag_drops = deltas(&before, &after, |s| drop_count(s, "ipv6-fragment"));
    let out = out.with_context(|| format!("per node IPv6 fragments received {frags:?}, dropped ipv6-fragment {frag_drops:?}"))?;
    // The nodes' outside links are 1 400 bytes (step (i)): the host's first
    // 1 500-byte fragments earn a packet too big from a node, and its
    // echo is lost; the host then fragments for 1 400 and every later echo
    // is answered.
    let nodes: Vec<String> = (1..=NODES).map(a6::node_inside).collect();
    let too_big = out.lines().filter(|l| l.contains("Packet too big: mtu=1400") && nodes.iter().any(|n| l.contains(&format!("From {n} ")))).count();
    let received = out.lines().filter(|l| l.starts_with("8008 bytes from")).count();
    ensure!(received + too_big == 5 && too_big <= 1, "5 echoes: {received} answered, {too_big} packet too big from a node:\n{out}");
    Ok(format!("{}; {too_big} packet too big from a node first; per node IPv6 fragments received {frags:?}", loss_line(&out)))
}

fn step_f_denied(c: &Ctx) -> Result<String> {
    let mut listener = Background::start(
        "inside listener (IPv6)",
        INSIDE,
        harness::python(),
        &["-m", "http.server", "8087", "--bind", a6::CLIENT],
        &c.bed.run_dir.join("v6-f-listener.log"),
    )?;
    listener.wait_listening(INSIDE, 8087, Duration::from_secs(10))?;
    let url = format!("http://[{}]:8087/", a6::CLIENT);
    sys::ns_run(INSIDE, "curl", &["-6", "-g", "-sS", "--fail", "--max-time", "3", "-o", "/dev/null", &url])
        .context("the listener does not answer even inside its own host")?;
    // Denied where it landed (`acl-denied`), or — a SYN the SYN guard
    // held for its director after the cluster formed (35 s) — when the
    // director's answer released it (`show cluster` release drops).
    let denied = |v: &[Value]| -> Result<u64> {
        let released: u64 = c.clusters(&[1, 2, 3])?.iter().map(|s| s["release_drops"]["acl-denied"].as_u64().unwrap_or(0)).sum();
        Ok(v.iter().map(|s| drop_count(s, "acl-denied")).sum::<u64>() + released)
    };
    let before_all = c.stats()?;
    let before = denied(&before_all)?;
    let out = Command::new("ip")
        .args(["netns", "exec", OUTSIDE, "curl", "-6", "-g", "-sS", "--max-time", "3", "-o", "/dev/null", &url])
        .output()?;
    match out.status.code() {
        Some(7 | 28) => {}
        Some(0) => bail!("outside reached the inside listener over IPv6: the connection was not denied"),
        other => bail!("curl -6 from outside failed oddly ({other:?}): {}", String::from_utf8_lossy(&out.stderr).trim()),
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let after = denied(&c.stats()?)?;
        if after > before {
            return Ok(format!("connection failed ({}); denied by policy (all nodes, acl-denied and release drops) {before} -> {after}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        if Instant::now() > deadline {
            let now = c.stats()?;
            let moved: Vec<String> = (0..NODES)
                .flat_map(|k| {
                    let (b, a) = (&before_all[k]["drops"], &now[k]["drops"]);
                    a.as_object().into_iter().flatten().filter_map(move |(r, v)| {
                        let d = v.as_u64().unwrap_or(0).saturating_sub(b[r].as_u64().unwrap_or(0));
                        (d > 0).then(|| format!("n{} {r} +{d}", k + 1))
                    })
                })
                .collect();
            bail!("connection failed but acl-denied (all nodes) stayed at {after} (was {before}); drops meanwhile: {moved:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn step_g_tracepath(c: &Ctx) -> Result<String> {
    let out = sys::ns_run(INSIDE, "tracepath", &["-6", "-n", "-m", "6", a6::SERVER])?;
    let nodes: Vec<String> = (1..=NODES).map(a6::node_inside).collect();
    let hop = out
        .lines()
        .find(|l| nodes.iter().any(|n| l.split_whitespace().nth(1) == Some(n.as_str())))
        .map(|l| l.trim().to_string());
    let Some(hop) = hop else { bail!("tracepath -6 shows no node ({}) as a hop:\n{out}", nodes.join(", ")) };
    ensure!(out.contains("reached"), "tracepath -6 did not reach {}:\n{out}", a6::SERVER);
    let sent: u64 = c.stats()?.iter().map(|s| ipv6_counter(s, "time_exceeded_sent")).sum();
    ensure!(sent > 0, "no node counted a time exceeded sent");
    Ok(format!("hop `{hop}`, reached {}; time_exceeded_sent (all nodes) {sent}", a6::SERVER))
}

/// (i) Path-MTU discovery through the cluster: the nodes' outside links
/// are 1 400 bytes (the bed is up with `--mtu outside=1400`); the server
/// advertises an MSS for 1 500 (`advmss 1440` on its route back), so the
/// client's full segments are too big where they leave a node: the node
/// answers ICMPv6 packet too big, the client's kernel lowers its path MTU
/// to 1 400 and a 3 s iperf3 -6 upload completes.
fn step_i_packet_too_big(c: &Ctx) -> Result<String> {
    sys::ip(OUTSIDE, &["-6", "route", "replace", a6::CLIENT_NET, "via", a6::ROUT_HOST_SIDE, "dev", "eth0", "advmss", "1440"])?;
    // Forget the path MTU tracepath (g) may have learnt.
    sys::ip(INSIDE, &["-6", "route", "flush", "cache"])?;
    let fresh = sys::ns_run(INSIDE, "ip", &["-6", "route", "get", a6::SERVER])?;
    ensure!(!fresh.contains("mtu 1400"), "the client still knows the path MTU: {fresh}");
    let too_big = |v: &[Value]| v.iter().map(|s| ipv6_counter(s, "too_big_sent")).sum::<u64>();
    let before = too_big(&c.stats()?);
    let (v, status) = iperf3_upload(c, 5207, 3)?;
    let received = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    ensure!(status.success() && received > 0, "iperf3 -6 moved nothing ({status})");
    let after = too_big(&c.stats()?);
    ensure!(after > before, "no node sent a packet too big ({before} -> {after})");
    let route = sys::ns_run(INSIDE, "ip", &["-6", "route", "get", a6::SERVER])?;
    ensure!(route.contains("mtu 1400"), "the client's path MTU was not lowered: {route}");
    Ok(format!("{received} B uploaded; too_big_sent (all nodes) {before} -> {after}; client route: {}", route.trim()))
}

/// The member set, control node and epoch each of `live` reports, once
/// they agree (15 s at most).
fn agreement(c: &Ctx, live: &[usize]) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let views = c.clusters(live)?;
        let key = |v: &Value| {
            let members: Vec<u64> = v["member_ids"].as_array().into_iter().flatten().filter_map(Value::as_u64).collect();
            (members, v["control_node"].clone(), v["epoch"].clone(), v["ready"].clone())
        };
        let first = key(&views[0]);
        if views.iter().all(|v| key(v) == first) && first.0.len() == live.len() && first.3 == true {
            return Ok(format!("members {:?}, control node {}, epoch {}", first.0, first.1, first.2));
        }
        if Instant::now() > deadline {
            let all: Vec<String> = views.iter().map(|v| format!("{:?}", key(v))).collect();
            bail!("nodes disagree on members / control node after 15 s: {}", all.join(" vs "));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn step_h_failover(c: &Ctx) -> Result<String> {
    let run_dir = &c.bed.run_dir;
    let control = c.bed.show(VICTIM, "cluster")?["control_node"].as_u64();
    ensure!(control == Some(VICTIM as u64), "n{VICTIM} is not the control node (control node {control:?})");
    // The client's receive buffer capped: the data stays in flight (the
    // sysctl is shared by IPv4 and IPv6 TCP).
    sys::sysctl(INSIDE, "net.ipv4.tcp_rmem", "4096 16384 32768")?;
    let (_www, sha, _http) = serve6(run_dir, "v6-h", 8088, FAILOVER_BYTES)?;
    let dl = TempDir::new(run_dir, "v6-h-download")?;
    let url = format!("http://[{}]:8088/random.bin", a6::SERVER);
    let outs: Vec<PathBuf> = (0..FAILOVER_DOWNLOADS).map(|i| dl.0.join(format!("d{i}.bin"))).collect();
    let before = c.stats()?;
    let mut kids = Children(Vec::new());
    for out in &outs {
        kids.0.push(
            sys::ns_command(INSIDE, "curl")
                .args(["-6", "-g", "-sS", "--fail", "--limit-rate", RATE, "--connect-timeout", "10", "--max-time", "120", "-o"])
                .arg(out)
                .arg(&url)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .context("cannot start curl")?,
        );
    }
    let start = Instant::now();
    let mut size = vec![0u64; FAILOVER_DOWNLOADS];
    let mut grown = [start; FAILOVER_DOWNLOADS];
    let mut stall = [Duration::ZERO; FAILOVER_DOWNLOADS];
    let mut killed: Option<Result<Vec<u64>>> = None;
    loop {
        let now = Instant::now();
        let mut running = 0;
        for (i, kid) in kids.0.iter_mut().enumerate() {
            let len = std::fs::metadata(&outs[i]).map(|m| m.len()).unwrap_or(0);
            if len > size[i] {
                size[i] = len;
                grown[i] = now;
            }
            if kid.try_wait()?.is_none() {
                running += 1;
                stall[i] = stall[i].max(now.duration_since(grown[i]));
            }
        }
        if killed.is_none() && now.duration_since(start) >= FAULT_AFTER {
            // What the victim had carried, then the kill (its router-side
            // links go down: the routers move its flows to the others).
            let carried = c.stats().map(|after| deltas(&before, &after, |s| ipv6_counter(s, "forwarded")));
            killed = Some(faults::apply(run_dir, &c.bed.bin_dir, &format!("n{VICTIM}"), Fault::Kill).and(carried));
        }
        if running == 0 && killed.is_some() {
            break;
        }
        ensure!(start.elapsed() < Duration::from_secs(150), "downloads still running after 150 s: {size:?} bytes");
        std::thread::sleep(POLL);
    }
    let carried = killed.context("no kill")?.context("killing the control node")?;
    let mut failed = Vec::new();
    for (i, kid) in kids.0.iter_mut().enumerate() {
        match kid.try_wait()? {
            Some(s) if s.success() => {
                let got = harness::sha256(&outs[i])?;
                if got != sha {
                    failed.push(format!("download {i}: sha256 {got}, served {sha}"));
                }
            }
            Some(s) => {
                let mut err = String::new();
                if let Some(e) = kid.stderr.as_mut() {
                    let _ = e.read_to_string(&mut err);
                }
                failed.push(format!("download {i}: curl {s} after {} of {FAILOVER_BYTES} bytes: {}", size[i], err.trim()))
            }
            None => failed.push(format!("download {i}: hung at {} of {FAILOVER_BYTES} bytes", size[i])),
        }
    }
    kids.0.clear();
    let survivors: Vec<usize> = (1..=NODES).filter(|&k| k != VICTIM).collect();
    let agree = agreement(c, &survivors);
    let mut ms: Vec<u128> = stall.iter().map(|s| s.as_millis()).collect();
    let stalls = format!("longest stall per transfer (ms): {ms:?}");
    ms.sort();
    ensure!(
        failed.is_empty(),
        "{} of {FAILOVER_DOWNLOADS} downloads lost (ipv6.forwarded per node before the kill {carried:?}; {stalls}):\n  {}",
        failed.len(),
        failed.join("\n  ")
    );
    let agree = agree?;
    ensure!(carried[VICTIM - 1] > 0, "n{VICTIM} carried no IPv6 before it was killed ({carried:?}): the kill tested nothing");
    Ok(format!(
        "{FAILOVER_DOWNLOADS}/{FAILOVER_DOWNLOADS} downloads intact after n{VICTIM} (control node) was killed {} s in; ipv6.forwarded per node before the kill {carried:?}; stall median {} ms, worst {} ms; {agree}",
        FAULT_AFTER.as_secs(),
        ms[ms.len() / 2],
        ms[ms.len() - 1]
    ))
}

#[test]
fn ipv6_through_the_cluster() {
    assert!(sys::is_root(), "the cluster test bed test needs root (network namespaces, veths); run scripts/test.sh as root");
    let workers = harness::bed_workers();
    eprintln!("{NODES} nodes with {workers} worker(s) each (CFW_BED_WORKERS)");
    // The nodes' outside links 1 400 bytes: step (i)'s path-MTU discovery
    // (the other steps' segments keep within it by MSS and PMTUD).
    let mtu = testbed::topology::BedMtu { outside: 1400, ..Default::default() };
    let bed = TestBed::up_with(NODES, "/tmp/cfw-testbed-cluster-ipv6", harness::Shape { workers, mtu, ..Default::default() })
        .expect("test bed up");
    let c = Ctx { bed: &bed };
    let mut steps = Steps::default();
    let timed = |f: &dyn Fn(&Ctx) -> Result<String>| {
        let t = Instant::now();
        f(&c).map(|d| format!("{d} ({:.1} s)", t.elapsed().as_secs_f64()))
    };
    steps.step("(a) hosts reach their routers over IPv6; ECMP IPv6 routes over every node", timed(&step_a_plumbing));
    steps.step("(b) concurrent curl -6 downloads, sha256 checked, spread over nodes and the CCL", timed(&step_b_downloads));
    steps.step("(c) 5 s iperf3 -6 TCP inside->outside", timed(&step_c_iperf3));
    steps.step("(d) ping -6 inside->outside through the cluster", timed(&step_d_ping));
    steps.step("(e) ping -6 -s 8000 (fragmented by the hosts)", timed(&step_e_ping_8000));
    steps.step("(f) IPv6 TCP outside->inside denied, acl-denied counted", timed(&step_f_denied));
    steps.step("(g) tracepath -6 shows a node as a hop", timed(&step_g_tracepath));
    steps.step("(i) IPv6 upload through 1400-byte outside links by packet too big", timed(&step_i_packet_too_big));
    steps.step("(h) failover: the control node killed during rate-limited curl -6 downloads", timed(&step_h_failover));
    for k in 1..=NODES {
        match bed.show(k, "stats") {
            Ok(s) => eprintln!("n{k} ipv6: {}", s["ipv6"]),
            Err(e) => eprintln!("n{k} show stats: {e:#}"),
        }
    }
    steps.finish(&bed.run_dir, NODES);
}
