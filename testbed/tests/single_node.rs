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
//! - (d) the node answers ping on its inside address.
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
    up.args(["up", "--run-dir"])
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
    let steps: [(&str, Step); 4] = [
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
