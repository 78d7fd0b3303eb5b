//! Real traffic through one clusterfw node on the namespace test bed.
//!
//! One test brings the bed up once (`clusterfw-testbed up`) and runs four
//! steps between the client host `cfw-inside` and the server host
//! `cfw-outside`:
//!
//! - (a) a 20 MB HTTP download, inside → outside, arrives with the right
//!   sha256;
//! - (b) a 5 s iperf3 TCP run, inside → outside, moves bytes;
//! - (c) a TCP connection outside → inside fails, and the node's
//!   `acl-denied` drop counter rises;
//! - (d) the node answers ping on its inside address;
//! - (e)-(h) the same over IPv6 (issue 16; the bed is dual-stack,
//!   2001:db8:1::/64 inside, 2001:db8:2::/64 outside): a 5 MB `curl -6`
//!   download with its sha256, `ping -6` of the node and through it, a
//!   TCP connection outside → inside denied (`acl-denied` rises), and
//!   `tracepath -6` showing the node as the first hop (its ICMPv6 time
//!   exceeded);
//! - (i) path-MTU discovery through packet too big: the bed's outside link
//!   is 1 400 bytes (`up --mtu outside=1400`, the node's outside MTU too);
//!   the server advertises an MSS for 1 500 (`advmss 1440` on its route
//!   back), so the client's full segments are too big for the node's
//!   outside link: the node answers ICMPv6 packet too big, the client's
//!   kernel lowers its path MTU to 1 400, and a 3 s iperf3 -6 upload
//!   completes (`too_big_sent` rises; the client's route cache shows
//!   `mtu 1400`).
//!
//! In kernel-router mode the IPv6 steps are skipped, said so in their
//! line: the self-check's router forwards IPv4 only.
//!
//! All steps run even if one fails; the test then fails naming every failed
//! step. A guard runs `down` on every exit path, panics included, and the
//! bed lock (see `testbed::harness::lock_bed`) keeps concurrent runs apart.
//!
//! Needs root; without it the test fails (it does not pass vacuously).
//! Binaries: `$CLUSTERFW_BIN_DIR`, else `<workspace>/target/release`.
//! `CFW_TESTBED_KERNEL_ROUTER=1` runs the same steps against a plain Linux
//! router instead of clusterfw: a self-check of the bed and of these tests
//! (the `acl-denied` counter is then not checked — there is none).

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use testbed::bed;
use testbed::harness::{self, Background, TempDir};
use testbed::sys;

const INSIDE: &str = "cfw-inside";
const OUTSIDE: &str = "cfw-outside";
const INSIDE_ADDR: &str = "198.18.1.2";
const OUTSIDE_ADDR: &str = "198.18.2.2";
const NODE_INSIDE_ADDR: &str = "198.18.1.1";
const DOWNLOAD_BYTES: u64 = 20 << 20;
const INSIDE_ADDR6: &str = "2001:db8:1::2";
const OUTSIDE_ADDR6: &str = "2001:db8:2::2";
const NODE_INSIDE_ADDR6: &str = "2001:db8:1::1";
const DOWNLOAD6_BYTES: u64 = 5 << 20;

struct Ctx {
    run_dir: PathBuf,
    bin_dir: PathBuf,
    /// `None` in kernel-router mode.
    socket: Option<PathBuf>,
}

impl Ctx {
    fn stats(&self) -> Result<Option<Value>> {
        match &self.socket {
            Some(s) => bed::ctl_json(&self.bin_dir, s, "stats").map(Some),
            None => Ok(None),
        }
    }

    fn acl_denied(&self) -> Result<Option<u64>> {
        let Some(stats) = self.stats()? else {
            return Ok(None);
        };
        let drops = stats
            .get("drops")
            .and_then(Value::as_object)
            .context("show stats: no \"drops\" object")?;
        Ok(Some(
            drops.get("acl-denied").and_then(Value::as_u64).unwrap_or(0),
        ))
    }
}

fn step_a_http_download(c: &Ctx) -> Result<String> {
    let www = TempDir::new(&c.run_dir, "www")?;
    let dl = TempDir::new(&c.run_dir, "download")?;
    let file = www.0.join("random.bin");
    let want = harness::random_file(&file, DOWNLOAD_BYTES)?;

    let www_dir = www.0.to_string_lossy().into_owned();
    let mut server = Background::start(
        "HTTP server",
        OUTSIDE,
        harness::python(),
        &[
            "-m",
            "http.server",
            "8080",
            "--bind",
            OUTSIDE_ADDR,
            "--directory",
            &www_dir,
        ],
        &c.run_dir.join("step-a-http.log"),
    )?;
    server.wait_listening(OUTSIDE, 8080, Duration::from_secs(10))?;

    let got_path = dl.0.join("random.bin");
    let url = format!("http://{OUTSIDE_ADDR}:8080/random.bin");
    let start = Instant::now();
    sys::ns_run(
        INSIDE,
        "curl",
        &[
            "-sS",
            "--fail",
            "--connect-timeout",
            "10",
            "--max-time",
            "60",
            "-o",
            &got_path.to_string_lossy(),
            &url,
        ],
    )?;
    let secs = start.elapsed().as_secs_f64();
    let got = harness::sha256(&got_path)?;
    let len = std::fs::metadata(&got_path)?.len();
    ensure!(
        got == want,
        "downloaded {len} bytes with sha256 {got}, served file has {want}"
    );
    Ok(format!("{len} bytes in {secs:.2} s, sha256 matches"))
}

fn step_b_iperf3(c: &Ctx) -> Result<String> {
    let mut server = Background::start(
        "iperf3 server",
        OUTSIDE,
        "iperf3",
        &["-s", "-B", OUTSIDE_ADDR, "-p", "5201"],
        &c.run_dir.join("step-b-iperf3-server.log"),
    )?;
    server.wait_listening(OUTSIDE, 5201, Duration::from_secs(10))?;
    let out = Command::new("timeout")
        .args([
            "40",
            "ip",
            "netns",
            "exec",
            INSIDE,
            "iperf3",
            "-c",
            OUTSIDE_ADDR,
            "-p",
            "5201",
            "-t",
            "5",
            "--json",
            "--connect-timeout",
            "10000",
        ])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&text).with_context(|| {
        format!(
            "iperf3 ({}) printed no JSON: {text} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    if let Some(e) = v.get("error") {
        bail!("iperf3 ({}): {e}", out.status);
    }
    let sent = v["end"]["sum_sent"]["bytes"].as_u64().unwrap_or(0);
    let received = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    ensure!(out.status.success(), "iperf3 exited with {}", out.status);
    ensure!(
        sent > 0 && received > 0,
        "iperf3 moved nothing: sent {sent} B, received {received} B"
    );
    Ok(format!(
        "sent {sent} B, received {received} B, {:.3} Gbit/s",
        bps / 1e9
    ))
}

fn step_c_outside_to_inside_denied(c: &Ctx) -> Result<String> {
    // Port 80: in kernel-router mode only TCP ports 1-1023 are refused.
    let mut listener = Background::start(
        "inside listener",
        INSIDE,
        harness::python(),
        &["-m", "http.server", "80", "--bind", INSIDE_ADDR],
        &c.run_dir.join("step-c-listener.log"),
    )?;
    listener.wait_listening(INSIDE, 80, Duration::from_secs(10))?;
    let url = format!("http://{INSIDE_ADDR}:80/");
    // The listener itself works: the failure below is the firewall's doing.
    sys::ns_run(
        INSIDE,
        "curl",
        &["-sS", "--fail", "--max-time", "3", "-o", "/dev/null", &url],
    )
    .context("the listener does not answer even inside its own host")?;

    let before = c.acl_denied()?;
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            OUTSIDE,
            "curl",
            "-sS",
            "--max-time",
            "3",
            "-o",
            "/dev/null",
            &url,
        ])
        .output()?;
    // 7: could not connect (refused / prohibited); 28: timed out (silent drop).
    match out.status.code() {
        Some(7 | 28) => {}
        Some(0) => bail!("outside reached the inside listener: the connection was not denied"),
        other => bail!(
            "curl from outside failed oddly ({other:?}): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    }
    let how = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let Some(before) = before else {
        return Ok(format!(
            "connection failed ({how}); kernel-router mode: no acl-denied counter to check"
        ));
    };
    // Counters may be gathered from the workers periodically: give them a
    // moment.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let after = c.acl_denied()?.unwrap_or(0);
        if after > before {
            return Ok(format!(
                "connection failed ({how}); acl-denied {before} -> {after}"
            ));
        }
        if Instant::now() > deadline {
            bail!("connection failed ({how}) but acl-denied stayed at {after} (was {before})");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn step_d_ping_node(_c: &Ctx) -> Result<String> {
    let out = sys::ns_run(INSIDE, "ping", &["-c", "3", "-W", "2", NODE_INSIDE_ADDR])?;
    let summary = out
        .lines()
        .find(|l| l.contains("received"))
        .unwrap_or("")
        .trim()
        .to_string();
    Ok(summary)
}

/// The IPv6 steps need clusterfw (the kernel-router self-check forwards
/// IPv4 only): `Some(line)` says why a step is skipped.
fn v6_skipped(c: &Ctx) -> Option<String> {
    c.socket.is_none().then(|| "skipped: kernel-router mode forwards IPv4 only".to_string())
}

fn step_e_http_download_v6(c: &Ctx) -> Result<String> {
    if let Some(s) = v6_skipped(c) {
        return Ok(s);
    }
    let www = TempDir::new(&c.run_dir, "www6")?;
    let dl = TempDir::new(&c.run_dir, "download6")?;
    let file = www.0.join("random6.bin");
    let want = harness::random_file(&file, DOWNLOAD6_BYTES)?;
    let www_dir = www.0.to_string_lossy().into_owned();
    let mut server = Background::start(
        "HTTP server (IPv6)",
        OUTSIDE,
        harness::python(),
        &["-m", "http.server", "8086", "--bind", OUTSIDE_ADDR6, "--directory", &www_dir],
        &c.run_dir.join("step-e-http6.log"),
    )?;
    server.wait_listening(OUTSIDE, 8086, Duration::from_secs(10))?;
    let got_path = dl.0.join("random6.bin");
    let url = format!("http://[{OUTSIDE_ADDR6}]:8086/random6.bin");
    let start = Instant::now();
    sys::ns_run(
        INSIDE,
        "curl",
        &["-6", "-g", "-sS", "--fail", "--connect-timeout", "10", "--max-time", "60", "-o", &got_path.to_string_lossy(), &url],
    )?;
    let secs = start.elapsed().as_secs_f64();
    let got = harness::sha256(&got_path)?;
    let len = std::fs::metadata(&got_path)?.len();
    ensure!(got == want, "downloaded {len} bytes with sha256 {got}, served file has {want}");
    let fwd = c.stats()?.map(|s| s["ipv6"]["forwarded"].as_u64().unwrap_or(0)).unwrap_or(0);
    ensure!(fwd > 1000, "the node's ipv6.forwarded is {fwd}: the download did not go through its IPv6 path");
    Ok(format!("{len} bytes in {secs:.2} s over IPv6, sha256 matches; ipv6.forwarded {fwd}"))
}

fn step_f_ping_v6(c: &Ctx) -> Result<String> {
    if let Some(s) = v6_skipped(c) {
        return Ok(s);
    }
    let node = sys::ns_run(INSIDE, "ping", &["-6", "-c", "3", "-W", "2", NODE_INSIDE_ADDR6])?;
    let through = sys::ns_run(INSIDE, "ping", &["-6", "-c", "3", "-W", "2", OUTSIDE_ADDR6])?;
    let line = |o: &str| o.lines().find(|l| l.contains("received")).unwrap_or("").trim().to_string();
    ensure!(line(&node).contains(" 0% packet loss") && line(&through).contains(" 0% packet loss"), "{node}\n{through}");
    Ok(format!("node: {}; outside host through the node: {}", line(&node), line(&through)))
}

fn step_g_outside_to_inside_denied_v6(c: &Ctx) -> Result<String> {
    if let Some(s) = v6_skipped(c) {
        return Ok(s);
    }
    let mut listener = Background::start(
        "inside listener (IPv6)",
        INSIDE,
        harness::python(),
        &["-m", "http.server", "8087", "--bind", INSIDE_ADDR6],
        &c.run_dir.join("step-g-listener6.log"),
    )?;
    listener.wait_listening(INSIDE, 8087, Duration::from_secs(10))?;
    let url = format!("http://[{INSIDE_ADDR6}]:8087/");
    sys::ns_run(INSIDE, "curl", &["-6", "-g", "-sS", "--fail", "--max-time", "3", "-o", "/dev/null", &url])
        .context("the listener does not answer even inside its own host")?;
    let before = c.acl_denied()?.unwrap_or(0);
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
        let after = c.acl_denied()?.unwrap_or(0);
        if after > before {
            return Ok(format!("connection failed; acl-denied {before} -> {after}"));
        }
        if Instant::now() > deadline {
            bail!("connection failed but acl-denied stayed at {after} (was {before})");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn step_h_tracepath_v6(c: &Ctx) -> Result<String> {
    if let Some(s) = v6_skipped(c) {
        return Ok(s);
    }
    let out = sys::ns_run(INSIDE, "tracepath", &["-6", "-n", "-m", "5", OUTSIDE_ADDR6])?;
    let hop1 = out.lines().find(|l| l.trim_start().starts_with("1:") && l.contains(NODE_INSIDE_ADDR6));
    ensure!(hop1.is_some(), "tracepath -6 shows no hop 1 at the node ({NODE_INSIDE_ADDR6}):\n{out}");
    ensure!(out.contains("reached"), "tracepath -6 did not reach {OUTSIDE_ADDR6}:\n{out}");
    let sent = c.stats()?.map(|s| s["ipv6"]["time_exceeded_sent"].as_u64().unwrap_or(0)).unwrap_or(0);
    ensure!(sent > 0, "the node counted no time exceeded sent");
    Ok(format!("hop 1 {NODE_INSIDE_ADDR6}, reached {OUTSIDE_ADDR6}; time_exceeded_sent {sent}"))
}

fn step_i_packet_too_big_v6(c: &Ctx) -> Result<String> {
    if let Some(s) = v6_skipped(c) {
        return Ok(s);
    }
    // The server advertises an MSS for a 1500-byte path back to the
    // client (its own link is 1400): the client's full segments need PTB.
    sys::ip(OUTSIDE, &["-6", "route", "replace", "2001:db8:1::/64", "via", "2001:db8:2::1", "dev", "eth0", "advmss", "1440"])?;
    // Forget the path MTU tracepath (h) learnt: this transfer learns it.
    sys::ip(INSIDE, &["-6", "route", "flush", "cache"])?;
    let fresh = sys::ns_run(INSIDE, "ip", &["-6", "route", "get", OUTSIDE_ADDR6])?;
    ensure!(!fresh.contains("mtu 1400"), "the client still knows the path MTU: {fresh}");
    let mut server = Background::start(
        "iperf3 server (IPv6)",
        OUTSIDE,
        "iperf3",
        &["-s", "-B", OUTSIDE_ADDR6, "-p", "5206"],
        &c.run_dir.join("step-i-iperf3-server.log"),
    )?;
    server.wait_listening(OUTSIDE, 5206, Duration::from_secs(10))?;
    let before = c.stats()?.map(|s| s["ipv6"]["too_big_sent"].as_u64().unwrap_or(0)).unwrap_or(0);
    let out = Command::new("timeout")
        .args(["40", "ip", "netns", "exec", INSIDE, "iperf3", "-6", "-c", OUTSIDE_ADDR6, "-p", "5206", "-t", "3", "--json", "--connect-timeout", "10000"])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&text)
        .with_context(|| format!("iperf3 -6 ({}) printed no JSON: {text} {}", out.status, String::from_utf8_lossy(&out.stderr)))?;
    if let Some(e) = v.get("error") {
        bail!("iperf3 -6 ({}): {e}", out.status);
    }
    let received = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    ensure!(out.status.success() && received > 0, "iperf3 -6 moved nothing ({})", out.status);
    let after = c.stats()?.map(|s| s["ipv6"]["too_big_sent"].as_u64().unwrap_or(0)).unwrap_or(0);
    ensure!(after > before, "the node sent no packet too big ({before} -> {after})");
    let route = sys::ns_run(INSIDE, "ip", &["-6", "route", "get", OUTSIDE_ADDR6])?;
    ensure!(route.contains("mtu 1400"), "the client's path MTU was not lowered: {route}");
    Ok(format!("{received} B uploaded; too_big_sent {before} -> {after}; client route: {}", route.trim()))
}

/// A step: its outcome in one line, or why it failed.
type Step = fn(&Ctx) -> Result<String>;

#[test]
fn single_node_traffic() {
    assert!(
        sys::is_root(),
        "the single-node test bed test needs root (network namespaces, veths); \
         run `sudo -E cargo test -p testbed` or scripts/test.sh as root"
    );
    let _lock = harness::lock_bed().expect("test-bed lock");
    let kernel_router = std::env::var("CFW_TESTBED_KERNEL_ROUTER").is_ok_and(|v| v == "1");
    let bin_dir = harness::test_bin_dir();
    let run_dir = harness::test_run_dir("/tmp/cfw-testbed-test");

    // Armed before `up`, so that a half-made bed is removed as well.
    let _bed = harness::BedGuard {
        run_dir: run_dir.clone(),
    };
    let mut up = Command::new(env!("CARGO_BIN_EXE_clusterfw-testbed"));
    // A smaller outside link: step (i)'s path-MTU discovery (TCP's MSS
    // keeps the other steps' segments within it).
    up.args(["up", "--mtu", "outside=1400", "--run-dir"])
        .arg(&run_dir)
        .env("CLUSTERFW_BIN_DIR", &bin_dir)
        .env("CFW_TESTBED_LOCK_HELD", "1");
    if kernel_router {
        up.arg("--kernel-router");
    }
    let out = up.output().expect("run clusterfw-testbed up");
    assert!(
        out.status.success(),
        "step up: `clusterfw-testbed up` failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&out.stdout));

    let c = Ctx {
        socket: (!kernel_router).then(|| run_dir.join("n1.sock")),
        run_dir: run_dir.clone(),
        bin_dir,
    };
    let steps: [(&str, Step); 9] = [
        (
            "(a) 20 MB HTTP download inside->outside, sha256 checked",
            step_a_http_download,
        ),
        ("(b) 5 s iperf3 TCP inside->outside", step_b_iperf3),
        (
            "(c) TCP outside->inside denied, acl-denied counted",
            step_c_outside_to_inside_denied,
        ),
        ("(d) ping node inside address 198.18.1.1", step_d_ping_node),
        ("(e) 5 MB HTTP download over IPv6 (curl -6), sha256 checked", step_e_http_download_v6),
        ("(f) ping -6 of the node and of the outside host through it", step_f_ping_v6),
        ("(g) IPv6 TCP outside->inside denied, acl-denied counted", step_g_outside_to_inside_denied_v6),
        ("(h) tracepath -6 shows the node as hop 1", step_h_tracepath_v6),
        ("(i) IPv6 upload through a 1400-byte link by packet too big", step_i_packet_too_big_v6),
    ];
    let mut failures = Vec::new();
    for (name, step) in steps {
        let start = Instant::now();
        match step(&c) {
            Ok(detail) => eprintln!(
                "step {name}: ok in {:.1} s: {detail}",
                start.elapsed().as_secs_f64()
            ),
            Err(e) => {
                eprintln!("step {name}: FAILED: {e:#}");
                failures.push(format!("step {name}: {e:#}"));
            }
        }
    }
    match c.stats() {
        Ok(Some(stats)) => eprintln!("node stats after the steps: {stats}"),
        Ok(None) => {}
        Err(e) => failures.push(format!(
            "step after: node no longer answers show stats: {e:#}"
        )),
    }
    if !failures.is_empty() {
        let log = if kernel_router {
            String::new()
        } else {
            format!(
                "\n--- node log tail ---\n{}",
                sys::tail(&run_dir.join("n1.log"), 40)
            )
        };
        panic!(
            "{} step(s) failed:\n{}{log}",
            failures.len(),
            failures.join("\n")
        );
    }
}
