//! Real traffic through a three-node cluster on the namespace test bed
//! (`clusterfw-testbed up --nodes 3`): client `cfw-inside` (198.18.10.2)
//! behind router `cfw-rin`, server `cfw-outside` (198.18.20.2) behind
//! router `cfw-rout`, both routers spreading flows over the nodes by ECMP
//! with L4 hashing, so the two directions of most connections cross
//! different nodes. Steps:
//!
//! - (a) 50 concurrent HTTP downloads inside → outside, every sha256 right;
//! - (b) a 10 s iperf3 TCP run inside → outside;
//! - (c) iperf3 UDP at 20 Mbit/s for 5 s, loss under 5 %;
//! - (d) 50 DNS-like UDP request/response pairs to a UDP echo on port 53
//!   (a new source port per request, like a resolver);
//! - (e) the nodes' summed counters: SYN-ACKs whose owner was decoded from
//!   the cookie > 0 and packets forwarded to another owner > 0 (asymmetric
//!   paths happened and were handled);
//! - (f) no node sent the hosts a packet of a connection it does not own:
//!   tcpdump on the router side of every node link (`rin-nK`, `rout-nK`,
//!   inbound) maps every TCP/UDP packet to the node that sent it; each
//!   connection must come from exactly one node, and where a node's
//!   `show conn` lists the connection as owner, that node;
//! - (g) a CCL message sealed with the wrong key, a truncated message and a
//!   replayed heartbeat, injected on the CCL bridge with scapy, are dropped
//!   and counted (`show cluster` drops `ccl-bad-mac`, `ccl-truncated`,
//!   `ccl-replay`).
//!
//! All steps run even if one fails; the test then fails naming each failed
//! step. A guard runs `down` on every exit path (panics included) and
//! background processes are stopped by their guards; the bed lock keeps
//! concurrent runs apart. Needs root, iperf3, curl, tcpdump and scapy for
//! /usr/bin/python3 (`scripts/setup.sh`).

use anyhow::{bail, ensure, Context, Result};
use dataplane::ccl::{CclKey, FramePath, Heartbeat, Message, Sealer, CONTROL_CHANNEL};
use dataplane::{Epoch, NodeId};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testbed::bed;
use testbed::harness::{self, Background, Children, TempDir};
use testbed::sys;

const NODES: usize = 3;
const INSIDE: &str = "cfw-inside";
const OUTSIDE: &str = "cfw-outside";
const SERVER: &str = "198.18.20.2";
const DOWNLOADS: usize = 50;
const FILE_BYTES: u64 = 2 << 20;
const CCL_NS: &str = "cfw-ccl";
const CCL_BRIDGE: &str = "cfw-ccl";

struct Ctx {
    run_dir: PathBuf,
    bin_dir: PathBuf,
}

impl Ctx {
    fn socket(&self, k: usize) -> PathBuf {
        self.run_dir.join(format!("n{k}.sock"))
    }
    fn show(&self, k: usize, topic: &str) -> Result<Value> {
        bed::ctl_json(&self.bin_dir, &self.socket(k), topic)
    }
    /// `show cluster` of every node.
    fn clusters(&self) -> Result<Vec<Value>> {
        (1..=NODES).map(|k| self.show(k, "cluster")).collect()
    }
}

fn counter(v: &Value, name: &str) -> u64 {
    v["counters"][name].as_u64().unwrap_or(0)
}

fn sum(cl: &[Value], name: &str) -> u64 {
    cl.iter().map(|v| counter(v, name)).sum()
}

fn drops(cl: &[Value], reason: &str) -> u64 {
    cl.iter().map(|v| v["ccl_drops"][reason].as_u64().unwrap_or(0)).sum()
}


fn wait_membership(c: &Ctx) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let cl = c.clusters()?;
        let heard = cl
            .iter()
            .all(|v| v["members"].as_array().is_some_and(|m| m.iter().all(|p| p["this_node"] == true || !p["last_heard_ms"].is_null())));
        if heard {
            return Ok(format!("every node hears the other {} (heartbeats)", NODES - 1));
        }
        if Instant::now() > deadline {
            bail!("heartbeats not heard by every node after 10 s: {cl:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn step_a_http(c: &Ctx) -> Result<String> {
    let www = TempDir::new(&c.run_dir, "www")?;
    let dl = TempDir::new(&c.run_dir, "download")?;
    let file = www.0.join("random.bin");
    let want = harness::random_file(&file, FILE_BYTES)?;
    let www_dir = www.0.to_string_lossy().into_owned();
    let mut server = Background::start(
        "HTTP server",
        OUTSIDE,
        harness::python(),
        &["-m", "http.server", "8080", "--bind", SERVER, "--directory", &www_dir],
        &c.run_dir.join("step-a-http.log"),
    )?;
    server.wait_listening(OUTSIDE, 8080, Duration::from_secs(10))?;
    let url = format!("http://{SERVER}:8080/random.bin");
    let start = Instant::now();
    let mut kids = Children(Vec::new());
    for i in 0..DOWNLOADS {
        let out = dl.0.join(format!("d{i}.bin"));
        kids.0.push(
            sys::ns_command(INSIDE, "curl")
                .args(["-sS", "--fail", "--connect-timeout", "10", "--max-time", "90", "-o"])
                .arg(&out)
                .arg(&url)
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
    let secs = start.elapsed().as_secs_f64();
    for i in 0..DOWNLOADS {
        let p = dl.0.join(format!("d{i}.bin"));
        if p.exists() {
            let got = harness::sha256(&p)?;
            if got != want {
                failed.push(format!("download {i}: sha256 {got}, served {want}"));
            }
        }
    }
    ensure!(failed.is_empty(), "{} of {DOWNLOADS} downloads failed:\n  {}", failed.len(), failed.join("\n  "));
    Ok(format!("{DOWNLOADS} x {} KiB in {secs:.1} s, every sha256 matches", FILE_BYTES >> 10))
}

fn iperf3(args: &[&str]) -> Result<Value> {
    let mut full = vec!["60", "ip", "netns", "exec", INSIDE, "iperf3", "-c", SERVER, "-p", "5201", "--json", "--connect-timeout", "10000"];
    full.extend_from_slice(args);
    let out = Command::new("timeout").args(&full).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&text).with_context(|| {
        format!("iperf3 ({}) printed no JSON: {text} {}", out.status, String::from_utf8_lossy(&out.stderr))
    })?;
    if let Some(e) = v.get("error") {
        bail!("iperf3 ({}): {e}", out.status);
    }
    ensure!(out.status.success(), "iperf3 exited with {}", out.status);
    Ok(v)
}

fn step_b_iperf3_tcp(c: &Ctx) -> Result<String> {
    let mut server = Background::start(
        "iperf3 server",
        OUTSIDE,
        "iperf3",
        &["-s", "-B", SERVER, "-p", "5201"],
        &c.run_dir.join("step-b-iperf3-server.log"),
    )?;
    server.wait_listening(OUTSIDE, 5201, Duration::from_secs(10))?;
    let v = iperf3(&["-t", "10"])?;
    let sent = v["end"]["sum_sent"]["bytes"].as_u64().unwrap_or(0);
    let received = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    let bps = v["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0);
    let retrans = v["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    ensure!(sent > 0 && received > 0, "iperf3 moved nothing: sent {sent} B, received {received} B");
    Ok(format!("sent {sent} B, received {received} B, {:.3} Gbit/s, {retrans} retransmits", bps / 1e9))
}

fn step_c_iperf3_udp(c: &Ctx) -> Result<String> {
    let mut server = Background::start(
        "iperf3 server",
        OUTSIDE,
        "iperf3",
        &["-s", "-B", SERVER, "-p", "5201"],
        &c.run_dir.join("step-c-iperf3-server.log"),
    )?;
    server.wait_listening(OUTSIDE, 5201, Duration::from_secs(10))?;
    let v = iperf3(&["-u", "-b", "20M", "-t", "5"])?;
    let packets = v["end"]["sum"]["packets"].as_u64().unwrap_or(0);
    let lost = v["end"]["sum"]["lost_packets"].as_u64().unwrap_or(0);
    let pct = v["end"]["sum"]["lost_percent"].as_f64().unwrap_or(100.0);
    ensure!(packets > 0, "iperf3 -u sent no packets: {v}");
    ensure!(pct < 5.0, "iperf3 -u lost {lost} of {packets} datagrams ({pct:.2} %)");
    Ok(format!("{packets} datagrams at 20 Mbit/s, {lost} lost ({pct:.3} %)"))
}

const UDP_ECHO: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
while True:
    data, addr = s.recvfrom(65535)
    s.sendto(b"echo:" + data, addr)
"#;

const UDP_CLIENT: &str = r#"
import socket, sys, os
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ok = tries = 0
for i in range(n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    q = os.urandom(32)
    for attempt in range(3):
        tries += 1
        s.sendto(q, (host, port))
        try:
            data, _ = s.recvfrom(65535)
        except socket.timeout:
            continue
        if data == b"echo:" + q:
            ok += 1
            break
    s.close()
print(ok, n, tries)
"#;

fn step_d_udp_echo(c: &Ctx) -> Result<String> {
    let server_py = c.run_dir.join("udp-echo.py");
    let client_py = c.run_dir.join("udp-client.py");
    std::fs::write(&server_py, UDP_ECHO)?;
    std::fs::write(&client_py, UDP_CLIENT)?;
    let _server = Background::start(
        "UDP echo on port 53",
        OUTSIDE,
        harness::python(),
        &[&server_py.to_string_lossy(), SERVER, "53"],
        &c.run_dir.join("step-d-udp-echo.log"),
    )?;
    // Wait for the UDP socket.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sys::ns_run(OUTSIDE, "ss", &["-Hlun", "( sport = :53 )"]).unwrap_or_default().trim().is_empty() {
        ensure!(Instant::now() < deadline, "UDP echo not listening after 10 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = sys::ns_run(INSIDE, harness::python(), &[&client_py.to_string_lossy(), SERVER, "53", "50"])?;
    let f: Vec<u64> = out.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    let [ok, n, tries] = f[..] else { bail!("UDP client printed {out:?}") };
    ensure!(ok == n, "{ok} of {n} requests answered ({tries} sent)");
    Ok(format!("{ok} of {n} DNS-like requests to port 53 answered ({tries} datagrams sent)"))
}

fn step_e_counters(c: &Ctx) -> Result<String> {
    let cl = c.clusters()?;
    let per = |name: &str| cl.iter().map(|v| counter(v, name).to_string()).collect::<Vec<_>>().join("+");
    let cookies = sum(&cl, "synack_cookie_decoded");
    let fwd = sum(&cl, "forwarded_to_owner");
    let detail = format!(
        "owner packets {}, forwarded to owner {} = {fwd}, SYN-ACK owners from cookies {} = {cookies}, director queries {}",
        per("owner_packets"),
        per("forwarded_to_owner"),
        per("synack_cookie_decoded"),
        per("director_queries_sent"),
    );
    ensure!(cookies > 0, "no SYN-ACK owner decoded from a cookie: {detail}");
    ensure!(fwd > 0, "no packet forwarded to another owner: {detail}");
    Ok(detail)
}

/// Several workers (`CFW_BED_WORKERS`): `show stats --json` of every node
/// has each worker deciding packets and owning connections, nothing lost
/// between them, and no CCL datagram at the wrong worker.
fn step_h_workers(c: &Ctx, workers: u16) -> Result<String> {
    let mut detail = Vec::new();
    for k in 1..=NODES {
        let s = c.show(k, "stats")?;
        let ws = s["workers"].as_array().cloned().unwrap_or_default();
        ensure!(ws.len() == usize::from(workers), "n{k}: {} workers in show stats, {workers} configured", ws.len());
        let packets: Vec<u64> = ws.iter().map(|w| w["packets"].as_u64().unwrap_or(0)).collect();
        let flows: Vec<u64> = ws.iter().map(|w| w["flows_created"].as_u64().unwrap_or(0)).collect();
        ensure!(packets.iter().all(|&p| p > 0), "n{k}: a worker decided no packet: {packets:?}");
        ensure!(flows.iter().all(|&f| f > 0), "n{k}: a worker created no flow: {flows:?}");
        let lost = s["handoff_drops"].as_u64().unwrap_or(0);
        ensure!(lost == 0, "n{k}: {lost} frames lost between the workers");
        let wrong = s["drops"]["ccl-wrong-worker"].as_u64().unwrap_or(0);
        ensure!(wrong == 0, "n{k}: {wrong} CCL datagrams at the wrong worker");
        detail.push(format!(
            "n{k} packets {packets:?} flows {flows:?} steered {}",
            s["steered_out"].as_u64().unwrap_or(0)
        ));
    }
    Ok(detail.join("; "))
}

/// tcpdump on the router end of every node link, inbound: what the nodes
/// sent towards the hosts.
struct Captures {
    procs: Vec<Background>,
    files: Vec<(usize, PathBuf)>,
}

fn start_captures(c: &Ctx) -> Result<Captures> {
    let mut procs = Vec::new();
    let mut files = Vec::new();
    for k in 1..=NODES {
        for (ns, ifname) in [("cfw-rin", format!("rin-n{k}")), ("cfw-rout", format!("rout-n{k}"))] {
            let file = c.run_dir.join(format!("cap-{ifname}.pcap"));
            let _ = std::fs::remove_file(&file);
            let f = file.to_string_lossy().into_owned();
            procs.push(Background::start(
                &format!("tcpdump on {ifname}"),
                ns,
                "tcpdump",
                &["-i", &ifname, "-Q", "in", "-nn", "-s", "80", "-B", "16384", "-U", "-w", &f, "tcp or udp"],
                &c.run_dir.join(format!("cap-{ifname}.log")),
            )?);
            files.push((k, file));
        }
    }
    // tcpdump says "listening on" once its socket is open.
    let deadline = Instant::now() + Duration::from_secs(10);
    for k in 1..=NODES {
        for ifname in [format!("rin-n{k}"), format!("rout-n{k}")] {
            let log = c.run_dir.join(format!("cap-{ifname}.log"));
            while !std::fs::read_to_string(&log).unwrap_or_default().contains("listening on") {
                ensure!(Instant::now() < deadline, "tcpdump on {ifname} did not start: {}", sys::tail(&log, 5));
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    Ok(Captures { procs, files })
}

/// A connection: protocol and its two endpoints, sorted.
type ConnKey = (String, String, String);

fn endpoint_key(proto: &str, a: &str, b: &str) -> ConnKey {
    let (x, y) = if a <= b { (a, b) } else { (b, a) };
    (proto.to_string(), x.to_string(), y.to_string())
}

/// `tcpdump -r -nn -q` lines: `… IP 198.18.20.2.8080 > 198.18.10.2.41234: tcp 1448`.
fn parse_line(line: &str) -> Option<ConnKey> {
    let ip = line.find(" IP ")?;
    let mut it = line[ip + 4..].split_whitespace();
    let a = it.next()?;
    let _gt = it.next()?;
    let b = it.next()?.trim_end_matches(':');
    let proto = match it.next()? {
        "tcp" => "tcp",
        "UDP," | "udp" => "udp",
        _ => return None,
    };
    Some(endpoint_key(proto, a, b))
}

/// `show conn` tuple → the key used for the capture.
fn conn_key(row: &Value) -> Option<ConnKey> {
    let t = &row["tuple"];
    let proto = match t["proto"].as_u64()? {
        6 => "tcp",
        17 => "udp",
        _ => return None,
    };
    let a = format!("{}.{}", t["src"].as_str()?, t["src_port"].as_u64()?);
    let b = format!("{}.{}", t["dst"].as_str()?, t["dst_port"].as_u64()?);
    Some(endpoint_key(proto, &a, &b))
}

fn step_f_ownership(_c: &Ctx, caps: &mut Option<Captures>, owners: &BTreeMap<ConnKey, BTreeSet<usize>>) -> Result<String> {
    let Some(mut caps) = caps.take() else { bail!("no captures were started") };
    std::thread::sleep(Duration::from_millis(500));
    for p in &mut caps.procs {
        p.stop();
    }
    let mut senders: BTreeMap<ConnKey, BTreeSet<usize>> = BTreeMap::new();
    let mut packets = 0u64;
    for (k, file) in &caps.files {
        let out = sys::run("tcpdump", &["-r", &file.to_string_lossy(), "-nn", "-q"])?;
        for line in out.lines() {
            if let Some(key) = parse_line(line) {
                packets += 1;
                senders.entry(key).or_default().insert(*k);
            }
        }
    }
    ensure!(packets > 0, "the captures hold no packets");
    let mut bad = Vec::new();
    for (key, nodes) in &senders {
        if nodes.len() != 1 {
            bad.push(format!("{} {} <-> {} sent by nodes {nodes:?}", key.0, key.1, key.2));
        } else if let Some(own) = owners.get(key) {
            if own != nodes {
                bad.push(format!("{} {} <-> {} sent by node {nodes:?}, owner per show conn {own:?}", key.0, key.1, key.2));
            }
        }
    }
    let checked = senders.keys().filter(|k| owners.contains_key(*k)).count();
    if bad.is_empty() {
        // Tens of MB; kept (in the run directory) only when the step fails.
        for (_, file) in &caps.files {
            let _ = std::fs::remove_file(file);
        }
    }
    ensure!(
        bad.is_empty(),
        "{} of {} connections reached the hosts from a node that does not own them:\n  {}",
        bad.len(),
        senders.len(),
        bad.iter().take(20).cloned().collect::<Vec<_>>().join("\n  ")
    );
    Ok(format!(
        "{packets} packets of {} connections towards the hosts, each connection from one node; {checked} matched against show conn owners",
        senders.len()
    ))
}

/// Owners per connection from every node's `show conn` (rows with role owner).
fn owners(c: &Ctx) -> Result<BTreeMap<ConnKey, BTreeSet<usize>>> {
    let mut m: BTreeMap<ConnKey, BTreeSet<usize>> = BTreeMap::new();
    for k in 1..=NODES {
        let v = c.show(k, "conn")?;
        for row in v["connections"].as_array().into_iter().flatten() {
            if row["role"] == "owner" {
                if let Some(key) = conn_key(row) {
                    m.entry(key).or_default().insert(k);
                }
            }
        }
    }
    Ok(m)
}

const INJECT: &str = r#"
import sys
from scapy.all import sniff, sendp, Raw, conf
conf.verb = 0
iface, wrong_hex = sys.argv[1], sys.argv[2]
got = sniff(iface=iface, filter="udp src port 31555 and udp dst port 31300", count=1, timeout=5)
if not got:
    print("no heartbeat seen on", iface)
    sys.exit(1)
hb = bytes(got[0])
sendp(Raw(bytes.fromhex(wrong_hex)), iface=iface)   # sealed with another key
# Truncated: the CCL message cut to 20 bytes (shorter than its fixed
# header), in outer headers that are consistent (lengths, checksum), so the
# message itself, not the IPv4/UDP framing, is what is short.
from scapy.all import Ether, IP, UDP
p = Ether(hb)
short = Ether(src=p.src, dst=p.dst) / IP(src=p[IP].src, dst=p[IP].dst, tos=p[IP].tos, flags="DF") / UDP(sport=p[UDP].sport, dport=p[UDP].dport) / Raw(bytes(p[UDP].payload)[:20])
sendp(short, iface=iface)
sendp(Raw(hb), iface=iface)                         # replayed
print("injected: wrong key %d B, truncated %d B, replay %d B" % (len(wrong_hex) // 2, len(bytes(short)), len(hb)))
"#;

/// A heartbeat claiming to come from node 2, sealed with a key that is not
/// the cluster's, as an Ethernet broadcast frame.
fn wrong_key_frame() -> Result<Vec<u8>> {
    let key = CclKey::new(testbed::topology::cluster_addr::CLUSTER_NAME, "not-the-cluster-key-at-all")
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let inc = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs() as u32 + 3600;
    let mut s = Sealer::new(&key, NodeId(2), CONTROL_CHANNEL, inc).map_err(|e| anyhow::anyhow!("{e}"))?;
    let path = FramePath {
        src_mac: [0x02, 0, 0, 0, 0, 0x02],
        dst_mac: [0xff; 6],
        src_ip: Ipv4Addr::new(198, 19, 0, 12),
        dst_ip: Ipv4Addr::new(198, 19, 0, 255),
    };
    let mut buf = [0u8; 256];
    let msg = Message::Heartbeat(Heartbeat { priority: 20, state: 0, member_bitmap: 0b1110, ..Heartbeat::default() });
    let n = s.seal_frame(&path, Epoch(1), &msg, &mut buf).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(buf[..n].to_vec())
}

fn step_g_bad_ccl(c: &Ctx) -> Result<String> {
    let reasons = ["ccl-bad-mac", "ccl-truncated", "ccl-replay"];
    let before = c.clusters()?;
    let script = c.run_dir.join("inject.py");
    std::fs::write(&script, INJECT)?;
    let hex: String = wrong_key_frame()?.iter().map(|b| format!("{b:02x}")).collect();
    let out = sys::ns_run(CCL_NS, "/usr/bin/python3", &[&script.to_string_lossy(), CCL_BRIDGE, &hex])
        .context("scapy injection on the CCL bridge (needs python3-scapy for /usr/bin/python3)")?;
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let after = c.clusters()?;
        let delta: Vec<(&str, u64)> = reasons.iter().map(|r| (*r, drops(&after, r) - drops(&before, r))).collect();
        if delta.iter().all(|(_, d)| *d > 0) {
            let all: Vec<String> = delta.iter().map(|(r, d)| format!("{r} +{d}")).collect();
            return Ok(format!("{}; drops: {}", out.trim(), all.join(", ")));
        }
        if Instant::now() > deadline {
            bail!("after injecting ({}) the CCL drop counters moved only by {delta:?}", out.trim());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn cluster_three_nodes_traffic() {
    assert!(
        sys::is_root(),
        "the cluster test bed test needs root (network namespaces, veths); run scripts/test.sh as root"
    );
    let _lock = harness::lock_bed().expect("test-bed lock");
    let bin_dir = harness::test_bin_dir();
    let run_dir = harness::test_run_dir("/tmp/cfw-testbed-cluster-test");
    let _bed = harness::BedGuard { run_dir: run_dir.clone() };
    let workers = harness::bed_workers();
    let out = Command::new(env!("CARGO_BIN_EXE_clusterfw-testbed"))
        .args(["up", "--nodes", "3", "--workers", &workers.to_string(), "--run-dir"])
        .arg(&run_dir)
        .env("CLUSTERFW_BIN_DIR", &bin_dir)
        .env("CFW_TESTBED_LOCK_HELD", "1")
        .output()
        .expect("run clusterfw-testbed up");
    assert!(
        out.status.success(),
        "step up: `clusterfw-testbed up --nodes 3 --workers {workers}` failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&out.stdout));
    let c = Ctx { run_dir: run_dir.clone(), bin_dir };

    let mut failures = Vec::new();
    let mut record = |name: &str, start: Instant, r: Result<String>| match r {
        Ok(detail) => eprintln!("step {name}: ok in {:.1} s: {detail}", start.elapsed().as_secs_f64()),
        Err(e) => {
            eprintln!("step {name}: FAILED: {e:#}");
            failures.push(format!("step {name}: {e:#}"));
        }
    };
    let t = Instant::now();
    record("membership", t, wait_membership(&c));
    let t = Instant::now();
    let mut caps = match start_captures(&c) {
        Ok(caps) => Some(caps),
        Err(e) => {
            record("captures", t, Err(e));
            None
        }
    };
    let t = Instant::now();
    record("(a) 50 concurrent HTTP downloads, sha256 checked", t, step_a_http(&c));
    // Owners of the HTTP connections while they are still in the tables.
    let conn_owners = owners(&c).unwrap_or_default();
    let t = Instant::now();
    record("(b) 10 s iperf3 TCP inside->outside", t, step_b_iperf3_tcp(&c));
    let t = Instant::now();
    record("(c) iperf3 UDP 20 Mbit/s", t, step_c_iperf3_udp(&c));
    let t = Instant::now();
    record("(d) DNS-like UDP echo on port 53", t, step_d_udp_echo(&c));
    let t = Instant::now();
    record("(e) cookies decoded and packets forwarded", t, step_e_counters(&c));
    let t = Instant::now();
    record("(f) every connection reaches the hosts from its owner only", t, step_f_ownership(&c, &mut caps, &conn_owners));
    let t = Instant::now();
    record("(g) wrong key, truncated, replayed CCL messages dropped and counted", t, step_g_bad_ccl(&c));
    if workers > 1 {
        let t = Instant::now();
        record("(h) every worker of every node carried traffic", t, step_h_workers(&c, workers));
    }

    for k in 1..=NODES {
        match c.show(k, "cluster") {
            Ok(v) => {
                let gaps: Vec<String> = v["members"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|m| m["this_node"] != true)
                    .map(|m| format!("{} longest gap {} ms", m["name"], m["longest_gap_ms"]))
                    .collect();
                eprintln!(
                    "n{k} show cluster: heartbeats: {}; membership {}; counters {} ccl {} drops {}",
                    gaps.join(", "),
                    v["membership"],
                    v["counters"],
                    v["ccl"],
                    v["ccl_drops"]
                )
            }
            Err(e) => failures.push(format!("after: n{k} no longer answers: {e:#}")),
        }
    }
    if !failures.is_empty() {
        let logs: String = (1..=NODES)
            .map(|k| format!("\n--- n{k} log tail ---\n{}", sys::tail(&run_dir.join(format!("n{k}.log")), 15)))
            .collect();
        panic!("{} step(s) failed:\n{}{logs}", failures.len(), failures.join("\n"));
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn capture_lines_parse_to_sorted_endpoints() {
        let a = parse_line("12:00:00.000001 IP 198.18.20.2.8080 > 198.18.10.2.41234: tcp 1448").unwrap();
        let b = parse_line("12:00:00.000002 IP 198.18.10.2.41234 > 198.18.20.2.8080: tcp 0").unwrap();
        assert_eq!(a, b);
        let u = parse_line("12:00:00.1 IP 198.18.10.2.5000 > 198.18.20.2.53: UDP, length 32").unwrap();
        assert_eq!(u.0, "udp");
        assert!(parse_line("12:00:00.1 ARP, Request who-has 198.18.11.2").is_none());
        let row = serde_json::json!({"tuple": {"src": "198.18.10.2", "dst": "198.18.20.2", "proto": 6, "src_port": 41234, "dst_port": 8080}});
        assert_eq!(conn_key(&row), Some(a));
    }

    #[test]
    fn wrong_key_frame_is_a_heartbeat_the_cluster_key_rejects() {
        let f = wrong_key_frame().unwrap();
        let right = CclKey::new(testbed::topology::cluster_addr::CLUSTER_NAME, testbed::topology::cluster_addr::CLUSTER_KEY).unwrap();
        let mut o = dataplane::ccl::Opener::new(&right, NodeId(1));
        assert_eq!(o.open_frame(&f).unwrap_err(), dataplane::ccl::CclDrop::BadMac);
    }
}
