//! PAT through the three-node test bed (issue 13): the bed comes up with
//! `--nat` (`nodeconf::cluster_nat_section`: the client network PAT'ed to
//! 198.51.100.7, the client's port 8080 at 198.51.100.80:80 by static PAT;
//! the outside router spreads 198.51.100.0/24 over the members by ECMP, as
//! it does the client network), and real peers check it:
//!
//! (a) HTTP downloads client → server through PAT, sha256 checked: their
//!     connections are owned by different members, each translating from
//!     its own port blocks;
//! (b) ping and iperf3 TCP and UDP through PAT;
//! (c) an HTTP download server → 198.51.100.80:80, reaching the client's
//!     server on port 8080 (static PAT), sha256 checked;
//! (d) every member's `show xlate`: translations on more than one member,
//!     return traffic sent to the block's holder (`to_holder`); `cluster
//!     show nat pool`: the members' blocks add up to the pool's, each
//!     member holding some;
//! (e) rate-limited downloads through PAT while the member holding the
//!     most translations is killed: every one completes with its sha256,
//!     the survivors took translated connections over with their mapped
//!     ports (`bindings_adopted`); `cluster show xlate` asked of a
//!     survivor lists each translation once with its holder, the killed
//!     member as not answering;
//! (f) tcpdump on the server's link saw the pool addresses, never the
//!     client's;
//! (g) rate-limited downloads through PAT while the killed member
//!     restarts and rejoins: every one completes with its sha256 (the
//!     connections translated in its blocks are handed back to it);
//! (h) (run after (d)) ping (also 8000-byte echoes, whose replies come
//!     back in fragments) and tracepath through multi-session PAT (ICMP
//!     and UDP other than DNS, N3): both work — tracepath shows a node
//!     and the hop behind the cluster, whose ICMP errors come back through
//!     the translation — and every multi-session xlate is at the control
//!     node, the data nodes sending such connections there (`to_control`;
//!     32 datagrams from as many source ports make sure some land on a
//!     data node).
//! (i) (run after (h)) the members' IPFIX to nfdump's `nfcapd` on the
//!     management segment: three more downloads, each listed by `nfdump`
//!     with its translation (RFC 8158's post-NAT fields, nfdump's xlate
//!     columns) — the original direction leaving from 198.51.100.7 and a
//!     port the server's link capture shows, the reply reaching the
//!     client's real address and port — and (c)'s connection to the static
//!     PAT address reaching the client's 8080.
//!
//! Needs root, curl, iperf3, tcpdump, tracepath and nfdump (scripts/test.sh
//! installs them).
//! A guard takes the bed down on every exit path.

use anyhow::{ensure, Context, Result};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testbed::faults::{self, Fault};
use testbed::harness::{self, Background, Children, Shape, Steps, TestBed};
use testbed::sys;
use testbed::topology::{cluster_addr as a, MGMT_NAMESPACE};

const NODES: usize = 3;
const INSIDE: &str = "cfw-inside";
const OUTSIDE: &str = "cfw-outside";
const CLIENT: &str = "198.18.10.2";
const SERVER: &str = "198.18.20.2";
const WEB_MAPPED: &str = "198.51.100.80";
/// The PAT pool's address (`nodeconf::NAT_SECTION`).
const PAT_ADDR: &str = "198.51.100.7";
const BYTES: u64 = 2 << 20;
/// Downloads running while a member is killed, each 2 MiB at 256 KiB/s
/// (about 8 s); the kill comes `KILL_AFTER` into them.
const LIVE: usize = 8;
const KILL_AFTER: Duration = Duration::from_secs(3);

fn counter(v: &serde_json::Value, name: &str) -> u64 {
    v["counters"][name].as_u64().unwrap_or(0)
}

/// Per member: (xlates listed, the NAT stage's counters).
fn xlates(bed: &TestBed, up: &[usize]) -> Result<Vec<(usize, usize, serde_json::Value)>> {
    up.iter()
        .map(|&k| {
            let x = bed.show(k, "xlate")?;
            Ok((k, x["xlates"].as_array().map_or(0, Vec::len), x))
        })
        .collect()
}

/// Step (h) (module essay).
fn multi_session(bed: &TestBed, all: &[usize]) -> Result<String> {
    let control = bed.show(1, "cluster")?["control_node"].as_u64().unwrap_or(0) as usize;
    ensure!(all.contains(&control), "no control node: {control}");
    let ping = sys::ns_run(INSIDE, "ping", &["-c", "5", "-i", "0.2", "-W", "2", SERVER])?;
    ensure!(ping.contains(" 0% packet loss"), "ping: {ping}");
    // 8000-byte echoes: the replies to the pool address come back in
    // fragments, which reach the block's holder from any member.
    let big = sys::ns_run(INSIDE, "ping", &["-c", "3", "-i", "0.2", "-W", "2", "-s", "8000", SERVER])?;
    ensure!(big.contains(" 0% packet loss"), "ping -s 8000: {big}");
    let out = Command::new("ip").args(["netns", "exec", INSIDE, "tracepath", "-n", "-m", "8", SERVER]).output()?;
    let trace = String::from_utf8_lossy(&out.stdout).to_string();
    // Hop 2 is a node's inside address (the client's router is hop 1);
    // the destination answers ("reached"), and some hop between is the
    // outside router, behind the translation.
    let hop = |n: &str| {
        trace.lines().find(|l| l.trim_start().starts_with(&format!("{n}:"))).and_then(|l| l.split_whitespace().nth(1))
    };
    let node_hop = hop("2").unwrap_or("");
    ensure!((1..=NODES).any(|k| node_hop == format!("198.18.1{k}.2")), "hop 2 is {node_hop:?}:\n{trace}");
    ensure!(trace.contains("reached"), "tracepath did not reach the server:\n{trace}");
    let behind = hop("3").unwrap_or("");
    ensure!(!behind.is_empty() && behind != "no" && behind != SERVER, "no hop behind the cluster:\n{trace}");
    // Datagrams from 32 source ports (UDP other than DNS: multi-session):
    // the inside router spreads them by their ports, so some land on a
    // data node, which must send them to the control node. Ping's echoes
    // alone do not show it — the router hashes ICMP by its addresses, so
    // all of them may land on the control node — nor do the two or three
    // probes tracepath sends past the cluster (CI once saw none sent).
    let spread = "import socket,sys\nfor _ in range(32):\n s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n \
                  s.sendto(b'multi-session',(sys.argv[1],9))\n s.close()\n";
    sys::ns_run(INSIDE, "/usr/bin/python3", &["-c", spread, SERVER])?;
    std::thread::sleep(Duration::from_millis(300));
    let x = xlates(bed, all)?;
    let multi = |v: &serde_json::Value| {
        v["xlates"].as_array().map_or(0, |a| a.iter().filter(|x| x["sessions"] == "multi-session").count())
    };
    let per: Vec<(usize, usize)> = x.iter().map(|(k, _, v)| (*k, multi(v))).collect();
    ensure!(
        per.iter().all(|&(k, n)| (k == control) == (n > 0)),
        "multi-session xlates per member {per:?}, control node n{control}"
    );
    let cl: Vec<serde_json::Value> = all.iter().map(|&k| bed.show(k, "cluster")).collect::<Result<_>>()?;
    let sent: u64 = cl.iter().map(|v| counter(v, "to_control_sent")).sum();
    let received = counter(&cl[control - 1], "to_control_received");
    ensure!(sent > 0 && received == sent, "frames to the control node: sent {sent}, received {received}");
    Ok(format!(
        "ping 5/5, ping -s 8000 3/3; tracepath: node hop {node_hop}, then {behind}, reached; 32 datagrams; multi-session xlates per member {per:?} \
         (control n{control}); {sent} frames sent to the control node"
    ))
}

/// nfdump's rows as (source, destination) → (xlate source, xlate
/// destination, bytes), addresses as `a:p`.
fn nfdump_xlates(dir: &Path) -> Result<Vec<[String; 5]>> {
    let fmt = "fmt:%sa|%sp|%da|%dp|%xsa|%xsp|%xda|%xdp|%byt";
    let out = sys::run("nfdump", &["-R", &dir.to_string_lossy(), "-q", "-N", "-o", fmt])?;
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('|').map(str::trim).collect();
            ensure!(f.len() == 9, "nfdump row {l:?}");
            let ap = |i: usize| format!("{}:{}", f[i], f[i + 1]);
            Ok([ap(0), ap(2), ap(4), ap(6), f[8].to_string()])
        })
        .collect()
}

/// Step (i) (module essay).
fn ipfix_translations(bed: &TestBed, nfcapd: &mut Option<Background>, flows: &Path, www: &Path, cap_log: &Path) -> Result<String> {
    let url = format!("http://{SERVER}:8080/random.bin");
    let mut ports = Vec::new();
    for i in 0..3 {
        let got = www.join(format!("got-i{i}.bin")).to_string_lossy().into_owned();
        let port = sys::ns_run(INSIDE, "curl", &["-sS", "--fail", "--max-time", "60", "-o", &got, "-w", "%{local_port}", &url])?;
        ports.push(port.trim().parse::<u16>().with_context(|| format!("curl's local port {port:?}"))?);
    }
    // Their flows end (tcp-closed, 10 s on the bed) and the owners export
    // them (a flush a second).
    let t0 = Instant::now();
    loop {
        let mut live = 0;
        for k in 1..=NODES {
            let v = bed.show(k, "conn")?;
            live += v["connections"].as_array().into_iter().flatten().filter(|c| {
                let t = &c["tuple"];
                let port = |k: &str| t[k].as_u64().is_some_and(|p| ports.contains(&(p as u16)));
                (t["src"] == CLIENT && port("src_port")) || (t["dst"] == CLIENT && port("dst_port"))
            }).count();
        }
        if live == 0 {
            break;
        }
        ensure!(t0.elapsed() < Duration::from_secs(40), "{live} flows of the downloads still listed after 40 s");
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_millis(2500));
    // SIGTERM makes nfcapd write its file out.
    drop(nfcapd.take());
    let rows = nfdump_xlates(flows)?;
    let capture = std::fs::read_to_string(cap_log)?;
    let mut out = Vec::new();
    for p in &ports {
        let me = format!("{CLIENT}:{p}");
        let orig: Vec<_> = rows.iter().filter(|r| r[0] == me && r[1] == format!("{SERVER}:8080")).collect();
        ensure!(!orig.is_empty(), "no IPFIX record from {me} ({} rows)", rows.len());
        let mapped = orig[0][2].clone();
        ensure!(
            orig.iter().all(|r| r[2] == mapped && r[3] == format!("{SERVER}:8080")) && mapped.starts_with(&format!("{PAT_ADDR}:")),
            "{me}: original direction's translations {orig:?}"
        );
        let mport = mapped.rsplit(':').next().unwrap_or_default();
        ensure!(
            capture.contains(&format!("{PAT_ADDR}.{mport} > {SERVER}.8080")),
            "{me} left as {mapped} by IPFIX, which the server's link never carried"
        );
        let reply: Vec<_> = rows.iter().filter(|r| r[0] == format!("{SERVER}:8080") && r[1] == mapped).collect();
        ensure!(!reply.is_empty() && reply.iter().all(|r| r[2] == format!("{SERVER}:8080") && r[3] == me), "{me}: replies {reply:?}");
        let bytes: u64 = reply.iter().filter_map(|r| r[4].parse::<u64>().ok()).sum();
        ensure!(bytes >= BYTES, "{me}: {bytes} bytes towards the client in IPFIX, the file has {BYTES}");
        out.push(format!("{me} as {mapped} ({} + {} records, {bytes} bytes back)", orig.len(), reply.len()));
    }
    let statics: Vec<_> = rows.iter().filter(|r| r[1] == format!("{WEB_MAPPED}:80")).collect();
    ensure!(
        !statics.is_empty() && statics.iter().all(|r| r[3] == format!("{CLIENT}:8080")),
        "(c)'s connection to {WEB_MAPPED}:80: {statics:?}"
    );
    Ok(format!("{}; {} record(s) to {WEB_MAPPED}:80 reaching {CLIENT}:8080", out.join(", "), statics.len()))
}

#[test]
fn pat_through_the_three_node_cluster() {
    assert!(sys::is_root(), "the NAT test bed test needs root (network namespaces, veths)");
    for tool in ["curl", "iperf3", "tcpdump", "tracepath", "nfcapd", "nfdump"] {
        assert!(sys::have(tool), "{tool} is not installed (scripts/test.sh installs it)");
    }
    let workers = harness::bed_workers();
    let shape = Shape { nat: testbed::topology::BedNat::Pat, workers, ..Shape::default() };
    let bed = TestBed::up_with(NODES, "/tmp/cfw-testbed-natc", shape).expect("bed up");
    eprintln!("NAT cluster bed, {NODES} nodes, {workers} worker(s) each");
    let mut steps = Steps::default();
    let mut step = |name: &str, r: Result<String>| steps.step(name, r);
    // The server's link, captured for the whole test.
    let (mut cap, cap_log) = harness::capture_ip(&bed.run_dir, OUTSIDE, "natc-outside-tcpdump").expect("tcpdump");
    // The members' IPFIX collector, for (i).
    let flows = bed.run_dir.join("nfcapd");
    let _ = std::fs::remove_dir_all(&flows);
    std::fs::create_dir_all(&flows).expect("nfcapd dir");
    let nfcapd_args = ["-b", a::COLLECTOR, "-p", &a::IPFIX_PORT.to_string(), "-w", &flows.to_string_lossy(), "-t", "3600"].map(String::from);
    let nfcapd_args: Vec<&str> = nfcapd_args.iter().map(String::as_str).collect();
    let mut nfcapd = Some(Background::start("nfcapd", MGMT_NAMESPACE, "nfcapd", &nfcapd_args, &bed.run_dir.join("nfcapd.out")).expect("nfcapd"));

    // One file served by the server for (a) and (e).
    let (www, want, server) = harness::served_file(&bed.run_dir, "natc", OUTSIDE, SERVER, 8080, BYTES).expect("server");
    let url = format!("http://{SERVER}:8080/random.bin");
    let fetch = |tag: String, extra: &[&str]| -> Result<Child> {
        let got = www.0.join(format!("got-{tag}.bin"));
        let mut args =
            vec!["netns", "exec", INSIDE, "curl", "-sS", "--fail", "--connect-timeout", "10", "--max-time", "60"];
        args.extend_from_slice(extra);
        let got = got.to_string_lossy().into_owned();
        args.extend_from_slice(&["-o", &got, &url]);
        Ok(Command::new("ip").args(&args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?)
    };
    let check = |tag: String, child: Child| -> Result<()> {
        let out = child.wait_with_output()?;
        ensure!(out.status.success(), "download {tag}: {}", String::from_utf8_lossy(&out.stderr));
        let sum = harness::sha256(&www.0.join(format!("got-{tag}.bin")))?;
        ensure!(sum == want, "download {tag}: sha256 {sum}, served {want}");
        Ok(())
    };

    step(
        "(a) HTTP client -> server through PAT",
        (|| {
            for i in 0..6 {
                check(format!("a{i}"), fetch(format!("a{i}"), &[])?)?;
            }
            Ok(format!("6 downloads of {BYTES} bytes, sha256 matches"))
        })(),
    );
    step(
        "(b) ping, iperf3 TCP and UDP through PAT",
        (|| {
            let ping = sys::ns_run(INSIDE, "ping", &["-c", "5", "-i", "0.2", "-W", "2", SERVER])?;
            ensure!(ping.contains(" 0% packet loss"), "ping: {ping}");
            let tcp = harness::iperf3(&bed.run_dir, "natc-tcp", OUTSIDE, SERVER, INSIDE, false)?;
            let udp = harness::iperf3(&bed.run_dir, "natc-udp", OUTSIDE, SERVER, INSIDE, true)?;
            Ok(format!("ping 5/5; {tcp}; {udp}"))
        })(),
    );
    step(
        "(c) HTTP server -> 198.51.100.80:80 (static PAT to the client's 8080)",
        harness::http_download(
            &bed.run_dir,
            "natc-c",
            INSIDE,
            CLIENT,
            8080,
            OUTSIDE,
            &format!("http://{WEB_MAPPED}:80/random.bin"),
            BYTES,
        ),
    );
    let all: Vec<usize> = (1..=NODES).collect();
    step(
        "(d) translations on the members, return traffic to the block holders",
        (|| {
            let x = xlates(&bed, &all)?;
            let holding = x.iter().filter(|(_, n, v)| *n > 0 || counter(v, "xlates_created") > 0).count();
            let to_holder: u64 = x.iter().map(|(_, _, v)| counter(v, "to_holder")).sum();
            let created: Vec<u64> = x.iter().map(|(_, _, v)| counter(v, "xlates_created")).collect();
            ensure!(holding >= 2, "translations on one member only: created {created:?}");
            ensure!(to_holder > 0, "no return traffic sent to a block holder: {x:?}");
            // The merged pool view: the members' blocks add up to the
            // pool's (512-port blocks of 1024-65535 per address, the
            // defaults), every member holding some.
            let v = bed.cluster_show(1, "nat pool")?;
            let pat = v["pools"].as_array().and_then(|p| p.iter().find(|p| p["kind"] == "dynamic-pat")).context("no PAT pool in cluster show nat pool")?;
            let want = pat["addresses"].as_u64().unwrap_or(0) * ((65_536 - 1024) / 512);
            let shares: Vec<u64> = all.iter().map(|k| pat["nodes"][format!("n{k}")]["blocks"].as_u64().unwrap_or(0)).collect();
            ensure!(
                pat["blocks"].as_u64() == Some(want) && shares.iter().all(|&b| b > 0),
                "cluster show nat pool: {} blocks, members' shares {shares:?} (want {want}, every member some)",
                pat["blocks"]
            );
            Ok(format!(
                "xlates created per member {created:?}; datagrams sent to the block holder {to_holder}; \
                 cluster show nat pool: {want} blocks, shares {shares:?}"
            ))
        })(),
    );
    step("(h) ping and tracepath through multi-session PAT, at the control node", multi_session(&bed, &all));
    step(
        "(i) nfdump lists translated downloads with their post-NAT addresses and ports",
        ipfix_translations(&bed, &mut nfcapd, &flows, &www.0, &cap_log),
    );
    // `LIVE` rate-limited downloads, `fault` applied to a member
    // `KILL_AFTER` into them (`pick`: which, from the members' xlates);
    // every one must complete with its sha256.
    let live = |tag: &str,
                fault: Fault,
                pick: &dyn Fn(&[(usize, usize, serde_json::Value)]) -> usize|
     -> Result<(usize, usize, f64)> {
        let mut children = Children(Vec::new());
        for i in 0..LIVE {
            children.0.push(fetch(format!("{tag}{i}"), &["--limit-rate", "256k"])?);
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(KILL_AFTER);
        // The members that answer (a killed one does not).
        let x: Vec<_> = all.iter().filter_map(|&k| xlates(&bed, &[k]).ok()).flatten().collect();
        let node = pick(&x);
        let held = x.iter().find(|(k, _, _)| *k == node).map_or(0, |(_, n, _)| *n);
        eprintln!("{fault:?} n{node}, which holds {held} xlates");
        let t0 = Instant::now();
        faults::apply(&bed.run_dir, &bed.bin_dir, &format!("n{node}"), fault)?;
        let mut res = Ok(());
        for (i, c) in children.0.drain(..).enumerate() {
            if let Err(e) = check(format!("{tag}{i}"), c) {
                res = Err(e);
            }
        }
        if res.is_err() {
            // What the members made of it, for the failure's diagnosis.
            for k in &all {
                for (topic, part) in [("xlate", "counters"), ("cluster", "counters"), ("stats", "drops")] {
                    if let Ok(v) = bed.show(*k, topic) {
                        eprintln!("n{k} {topic} {part}: {}", v[part]);
                    }
                }
            }
        }
        res?;
        Ok((node, held, t0.elapsed().as_secs_f64()))
    };
    let mut victim = 0;
    step(
        "(e) rate-limited downloads through PAT while a member is killed",
        (|| {
            let most = |x: &[(usize, usize, serde_json::Value)]| x.iter().max_by_key(|(_, n, _)| *n).map_or(1, |e| e.0);
            let (node, held, took) = live("e", Fault::Kill, &most)?;
            victim = node;
            let up: Vec<usize> = all.iter().copied().filter(|&k| k != node).collect();
            let x = xlates(&bed, &up)?;
            let adopted: u64 = x.iter().map(|(_, _, v)| counter(v, "bindings_adopted")).sum();
            let refused: u64 = x.iter().map(|(_, _, v)| counter(v, "bindings_refused")).sum();
            ensure!(held == 0 || adopted > 0, "n{node} held {held} xlates, none taken over: {x:?}");
            ensure!(refused == 0, "bindings refused: {refused}");
            // The cluster-wide view from a survivor: one row per
            // translation naming its holders, the killed member marked.
            let v = bed.cluster_show(up[0], "xlate")?;
            let rows = v["xlates"].as_array().cloned().unwrap_or_default();
            let per_member: usize = x.iter().map(|(_, n, _)| n).sum();
            let holders: std::collections::BTreeSet<String> =
                rows.iter().flat_map(|r| r["nodes"].as_array().cloned().unwrap_or_default()).filter_map(|n| n.as_str().map(String::from)).collect();
            ensure!(v["not_answering"] == serde_json::json!([format!("n{node}")]), "not answering: {}", v["not_answering"]);
            ensure!(
                !rows.is_empty()
                    && rows.iter().all(|r| r["mapped"].as_str().is_some_and(|m| m.starts_with(PAT_ADDR)))
                    && rows.iter().filter(|r| r["sessions"] == "per-session").all(|r| r["nodes"].as_array().is_some_and(|n| n.len() == 1))
                    && !holders.contains(&format!("n{node}")),
                "cluster show xlate from n{}: {rows:?}",
                up[0]
            );
            Ok(format!(
                "{LIVE} downloads complete with their sha256 after n{node} (holding {held} xlates) was killed; \
                 {adopted} translated connections taken over with their mapped ports; done {took:.1} s after the kill; \
                 cluster show xlate from n{}: {} translations ({per_member} rows in the members' own views) held by {holders:?}, n{node} not answering",
                up[0],
                rows.len()
            ))
        })(),
    );
    step(
        "(g) rate-limited downloads through PAT while the killed member comes back",
        (|| {
            ensure!(victim != 0, "no member was killed in (e)");
            let (node, _, took) = live("g", Fault::Restart, &|_| victim)?;
            let x = xlates(&bed, &all)?;
            let returned: u64 = x.iter().map(|(_, _, v)| counter(v, "bindings_returned")).sum();
            let adopted = x.iter().find(|(k, _, _)| *k == node).map_or(0, |(_, _, v)| counter(v, "bindings_adopted"));
            Ok(format!(
                "{LIVE} downloads complete with their sha256 while n{node} restarted and rejoined; {returned} \
                 connections handed back to it with their blocks ({adopted} bindings adopted there); done {took:.1} s \
                 after the restart"
            ))
        })(),
    );
    drop(server);
    cap.stop();
    step(
        "(f) the server's link saw only the pool addresses",
        harness::capture_shows_only(&cap_log, "198.18.10.", "198.51.100.", 1000),
    );
    steps.finish(&bed.run_dir, NODES);
}
