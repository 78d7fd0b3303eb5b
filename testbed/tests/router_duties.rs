//! Router duties on the test bed with its default data ports (af_packet,
//! which hands the node datagrams the kernel reassembled), issue 11:
//!
//! - single node and three nodes: `ping -s 8000` and an iperf3 UDP run of
//!   8000-byte datagrams pass (under 1 % loss); `traceroute` from inside to
//!   outside shows the node's (a node's) inside address as the hop after
//!   the first router, from the time-exceeded errors the node sends;
//! - three nodes, the nodes' outside links at MTU 1400: a DF ping of 1478
//!   bytes gets "frag needed" with MTU 1400 from a node; an upload with DF
//!   (Linux's default) completes through PMTUD with the right sha256, and
//!   the nodes count the frag-needed errors they sent;
//! - three nodes, the inside links at 1400: a download completes the same
//!   way (the nodes send the server the frag-needed errors);
//! - three nodes, every link at 9000: a download completes, a DF ping of
//!   9000 bytes passes whole, frames of about 9000 bytes leave the nodes and
//!   nothing is fragmented.
//!
//! Each bed comes up, runs its steps and goes down (a guard, also on
//! panic); the first failing step ends the test with the nodes' logs.
//! Needs root, iperf3, curl, ping, traceroute and python3
//! (`scripts/setup.sh`).

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;
use testbed::harness::{self, Background, Shape, TempDir, TestBed};
use testbed::sys;
use testbed::topology::BedMtu;

const INSIDE: &str = "cfw-inside";
const OUTSIDE: &str = "cfw-outside";

/// The server address of a bed with `nodes` nodes.
fn server(nodes: usize) -> &'static str {
    if nodes == 1 {
        "198.18.2.2"
    } else {
        "198.18.20.2"
    }
}

/// Sum of a counter over every node (`show stats --json`, dotted path).
fn stat(bed: &TestBed, nodes: usize, path: &[&str]) -> u64 {
    (1..=nodes)
        .filter_map(|k| bed.show(k, "stats").ok())
        .map(|v| path.iter().fold(&v, |v, p| &v[*p]).as_u64().unwrap_or(0))
        .sum()
}

fn ping(ns: &str, args: &[&str]) -> Result<String> {
    let out = Command::new("ip").args(["netns", "exec", ns, "ping"]).args(args).output()?;
    Ok(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn big_ping(nodes: usize) -> Result<String> {
    let out = ping(INSIDE, &["-c", "5", "-i", "0.3", "-W", "2", "-s", "8000", server(nodes)])?;
    ensure!(out.contains("5 received"), "ping -s 8000: {out}");
    Ok("ping -s 8000: 5/5 replies".into())
}

fn udp_8000(bed: &TestBed, nodes: usize) -> Result<String> {
    let mut srv = Background::start(
        "iperf3 server",
        OUTSIDE,
        "iperf3",
        &["-s", "-B", server(nodes), "-p", "5201"],
        &bed.run_dir.join("router-iperf3.log"),
    )?;
    srv.wait_listening(OUTSIDE, 5201, Duration::from_secs(10))?;
    let out = Command::new("timeout")
        .args(["60", "ip", "netns", "exec", INSIDE, "iperf3", "-c", server(nodes), "-p", "5201", "--json"])
        .args(["-u", "-l", "8000", "-b", "20M", "-t", "5"])
        .output()?;
    let v: Value = serde_json::from_slice(&out.stdout).context("iperf3 printed no JSON")?;
    let s = &v["end"]["sum"];
    let (lost, total) = (s["lost_packets"].as_u64().unwrap_or(u64::MAX), s["packets"].as_u64().unwrap_or(0));
    ensure!(total > 1000, "iperf3 moved {total} datagrams: {}", String::from_utf8_lossy(&out.stdout));
    ensure!(lost * 100 < total, "iperf3 UDP 8000-byte datagrams: {lost} of {total} lost");
    Ok(format!("iperf3 UDP 8000-byte datagrams 20 Mbit/s 5 s: {lost} of {total} lost"))
}

/// traceroute inside -> outside: the hop after the client's first router
/// (or the first hop, single node) is a node's inside address.
fn traceroute(nodes: usize) -> Result<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", INSIDE, "traceroute", "-n", "-q", "1", "-w", "1", "-m", "6", server(nodes)])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let hop = if nodes == 1 { 1 } else { 2 };
    let line = text.lines().find(|l| l.split_whitespace().next() == Some(&hop.to_string())).unwrap_or("");
    let addr = line.split_whitespace().nth(1).unwrap_or("");
    let is_node = if nodes == 1 { addr == "198.18.1.1" } else { (1..=nodes).any(|k| addr == format!("198.18.1{k}.2")) };
    ensure!(is_node, "hop {hop} is {addr:?}, not a node's inside address:\n{text}");
    ensure!(text.contains(server(nodes)), "traceroute did not reach the server:\n{text}");
    Ok(format!("traceroute hop {hop}: {addr}"))
}

/// A file of `bytes` served from `ns` at `addr:port` (python3 HTTP server).
fn http_server(bed: &TestBed, ns: &str, addr: &str, dir: &TempDir) -> Result<Background> {
    let d = dir.0.to_string_lossy().into_owned();
    let mut s = Background::start(
        "HTTP server",
        ns,
        harness::python(),
        &["-c", harness::HTTP_SERVER, addr, "8080", &d],
        &bed.run_dir.join("router-http.log"),
    )?;
    s.wait_listening(ns, 8080, Duration::from_secs(10))?;
    Ok(s)
}

/// Download `file.bin` from the server to the client; its sha256 must be
/// `sha`.
fn download(bed: &TestBed, nodes: usize, sha: &str) -> Result<String> {
    let got = bed.run_dir.join("router-download.bin");
    let url = format!("http://{}:8080/file.bin", server(nodes));
    let out = sys::ns_run(INSIDE, "curl", &["-s", "-m", "60", "-o", &got.to_string_lossy(), "-w", "%{http_code} %{size_download}", &url])?;
    let have = harness::sha256(&got)?;
    ensure!(have == sha, "download ({out}): sha256 {have}, served {sha}");
    Ok(format!("download {out} bytes, sha256 matches"))
}

/// A TCP sink on the server that writes the sha256 of what one connection
/// sent to stdout (its log).
const SHA_SINK: &str = r#"
import hashlib, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
c, _ = s.accept(); h = hashlib.sha256(); n = 0
while True:
    d = c.recv(65536)
    if not d: break
    h.update(d); n += len(d)
print(n, h.hexdigest(), flush=True)
"#;

/// Upload `file` (sha256 `sha`) from the client to the server's sink.
fn upload(bed: &TestBed, nodes: usize, file: &std::path::Path, sha: &str) -> Result<String> {
    let log = bed.run_dir.join("router-sink.log");
    let mut sink = Background::start("sha sink", OUTSIDE, harness::python(), &["-c", SHA_SINK, server(nodes), "9000"], &log)?;
    sink.wait_listening(OUTSIDE, 9000, Duration::from_secs(10))?;
    let send = format!(
        "import socket,sys; s=socket.create_connection(('{}',9000),timeout=60); s.sendall(open('{}','rb').read()); s.close()",
        server(nodes),
        file.display()
    );
    sys::ns_run(INSIDE, harness::python(), &["-c", &send])?;
    for _ in 0..100 {
        // A whole line only: with PYTHONUNBUFFERED the sink's print
        // reaches the file in pieces (the count, then the digest).
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some((line, _)) = text.split_once('\n') {
            ensure!(line.ends_with(sha), "upload: the server received {line}, sent {sha}");
            return Ok(format!("upload of {} bytes, sha256 matches at the server", line.split(' ').next().unwrap_or("?")));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("upload: the sink reported nothing")
}

fn payload(bed: &TestBed, bytes: u64) -> Result<(TempDir, String)> {
    let www = TempDir::new(&bed.run_dir, "www")?;
    let sha = harness::random_file(&www.0.join("file.bin"), bytes)?;
    Ok((www, sha))
}

/// Runs `steps` on a fresh bed; logs every node's tail on failure.
fn with_bed(nodes: usize, mtu: BedMtu, what: &str, steps: impl FnOnce(&TestBed) -> Result<()>) -> Result<()> {
    let bed = TestBed::up_with(nodes, "/tmp/cfw-testbed-router", Shape { mtu, ..Shape::default() }).with_context(|| format!("{what}: bed up"))?;
    let r = steps(&bed).with_context(|| what.to_string());
    if r.is_err() {
        for k in 1..=nodes {
            eprintln!("--- n{k}.log (tail) ---\n{}", sys::tail(&bed.run_dir.join(format!("n{k}.log")), 25));
        }
    }
    r
}

fn say(bed: &str, r: Result<String>) -> Result<()> {
    let s = r?;
    eprintln!("{bed}: {s}");
    Ok(())
}

#[test]
fn router_duties_on_af_packet_ports() {
    if !sys::is_root() {
        eprintln!("skipped: the test bed needs root (run scripts/test.sh)");
        return;
    }
    let run = || -> Result<()> {
        for nodes in [1, 3] {
            let name = format!("{nodes} node(s), MTU 1500");
            with_bed(nodes, BedMtu::default(), &name, |bed| {
                say(&name, big_ping(nodes))?;
                say(&name, udp_8000(bed, nodes))?;
                say(&name, traceroute(nodes))?;
                let te = stat(bed, nodes, &["icmp_errors", "time_exceeded"]);
                ensure!(te > 0, "no time-exceeded counted");
                let split = stat(bed, nodes, &["fragments", "split_datagrams"]);
                ensure!(split > 0, "no reassembled datagram split back: did af_packet deliver fragments?");
                eprintln!("{name}: time-exceeded sent {te}, datagrams split back into fragments {split}");
                Ok(())
            })?;
        }
        let name = "3 nodes, outside links MTU 1400";
        with_bed(3, BedMtu { outside: 1400, ..BedMtu::default() }, name, |bed| {
            // The upload first: the client's path MTU is not known yet.
            let (www, sha) = payload(bed, 3 << 20)?;
            say(name, upload(bed, 3, &www.0.join("file.bin"), &sha))?;
            let fnd = stat(bed, 3, &["icmp_errors", "frag_needed"]);
            ensure!(fnd > 0, "the upload completed without a frag-needed error");
            eprintln!("{name}: frag-needed sent during the upload {fnd}");
            // The client's route cache now says 1400: flush it, then a DF
            // ping of 1478 bytes.
            sys::ns_run(INSIDE, "ip", &["route", "flush", "cache"])?;
            let out = ping(INSIDE, &["-c", "1", "-W", "2", "-M", "do", "-s", "1450", server(3)])?;
            let from_node = (1..=3).any(|k| out.contains(&format!("From 198.18.1{k}.2")));
            ensure!(out.contains("mtu = 1400") && from_node, "DF ping of 1478 bytes: {out}");
            say(name, Ok("DF ping of 1478 bytes: frag needed, mtu = 1400, from a node".into()))?;
            Ok(())
        })?;
        let name = "3 nodes, inside links MTU 1400";
        with_bed(3, BedMtu { inside: 1400, ..BedMtu::default() }, name, |bed| {
            let (www, sha) = payload(bed, 5 << 20)?;
            let _http = http_server(bed, OUTSIDE, server(3), &www)?;
            say(name, download(bed, 3, &sha))?;
            let fnd = stat(bed, 3, &["icmp_errors", "frag_needed"]);
            ensure!(fnd > 0, "no frag-needed counted");
            eprintln!("{name}: frag-needed sent {fnd}");
            Ok(())
        })?;
        let name = "3 nodes, every link MTU 9000";
        with_bed(3, BedMtu::all(9000), name, |bed| {
            let (www, sha) = payload(bed, 5 << 20)?;
            let _http = http_server(bed, OUTSIDE, server(3), &www)?;
            say(name, download(bed, 3, &sha))?;
            let out = ping(INSIDE, &["-c", "3", "-W", "2", "-M", "do", "-s", "8972", server(3)])?;
            ensure!(out.contains("3 received"), "DF ping of 9000 bytes: {out}");
            let (fragd, split) = (stat(bed, 3, &["fragmented"]), stat(bed, 3, &["fragments", "split_datagrams"]));
            ensure!(fragd == 0 && split == 0, "fragmented {fragd}, split {split}: jumbo frames should pass whole");
            // The node that carried the download sent its frames at ~9000 bytes.
            let biggest = (1..=3)
                .filter_map(|k| bed.show(k, "stats").ok())
                .flat_map(|v| v["ports"].as_array().cloned().unwrap_or_default())
                .filter(|p| p["name"] == "inside")
                .map(|p| p["tx_bytes"].as_u64().unwrap_or(0) / p["tx_packets"].as_u64().unwrap_or(1).max(1))
                .max()
                .unwrap_or(0);
            ensure!(biggest > 8000, "largest mean inside frame {biggest} bytes");
            eprintln!("{name}: DF ping 9000 B 3/3; mean frame towards the client {biggest} B; nothing fragmented");
            Ok(())
        })
    };
    if let Err(e) = run() {
        panic!("{e:#}");
    }
}
