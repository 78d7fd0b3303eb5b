//! NAT on the single-node test bed (issue 13, single node): the bed comes
//! up with `--nat` (the inside network PAT'ed to 198.51.100.7, the inside
//! host's port 8080 at 198.51.100.80:80 by static PAT;
//! `testbed::nodeconf::NAT_SECTION`) and real peers check it:
//!
//! (a) an HTTP download inside → outside through PAT, sha256 checked;
//! (b) ping (also 8000-byte echoes: fragments to the pool address) and a
//!     2 s iperf3 UDP stream inside → outside through PAT;
//! (c) an HTTP download outside → 198.51.100.80:80, reaching the inside
//!     host's server on port 8080 (static PAT), sha256 checked;
//! (d) a TCP connection from outside to an unmapped port of the pool
//!     address fails and is counted (`nat-no-xlate`);
//! (e) tcpdump on the outside host's link saw the pool addresses and the
//!     server, never an inside address;
//! (f) `show xlate` lists the translations and the stage's counters,
//!     `show nat pool` every worker's share of the pool's 126 blocks;
//! (g) a reload that moves the static PAT's mapped port to 81 is applied
//!     without a restart (N9: an HTTP download through :81, :80 closed);
//!     one that changes the pool's address is refused (N6) and PAT keeps
//!     working.
//!
//! Run twice: with one worker, and with two (`dpdk.workers: 2`, each
//! af_packet port with two queue pairs): the return traffic to the pool
//! address is then steered to the worker holding its port's block
//! (`steer::steer_nat`), whichever queue it arrived on.
//!
//! Needs root, curl, iperf3 and tcpdump (scripts/test.sh installs them).
//! A guard takes the bed down on every exit path.

use anyhow::{ensure, Context, Result};
use std::process::Command;
use std::time::{Duration, Instant};
use testbed::harness::{self, Shape, TestBed};
use testbed::sys;

const INSIDE: &str = "cfw-inside";
const OUTSIDE: &str = "cfw-outside";
const INSIDE_ADDR: &str = "198.18.1.2";
const OUTSIDE_ADDR: &str = "198.18.2.2";
const PAT_ADDR: &str = "198.51.100.7";
const WEB_MAPPED: &str = "198.51.100.80";
const BYTES: u64 = 4 << 20;

/// `harness::http_download` of a `BYTES` file.
fn download(
    bed: &TestBed,
    tag: &str,
    server_ns: &str,
    bind: &str,
    port: u16,
    client_ns: &str,
    url: &str,
) -> Result<String> {
    harness::http_download(&bed.run_dir, &format!("nat-{tag}"), server_ns, bind, port, client_ns, url, BYTES)
}

fn drops(bed: &TestBed, reason: &str) -> Result<u64> {
    let s = bed.show(1, "stats")?;
    Ok(s.get("drops").and_then(|d| d.get(reason)).and_then(serde_json::Value::as_u64).unwrap_or(0))
}

#[test]
fn nat_on_a_single_node() {
    nat_bed(1);
}

#[test]
fn nat_on_a_single_node_with_two_workers() {
    nat_bed(2);
}

fn nat_bed(workers: u16) {
    assert!(sys::is_root(), "the NAT test bed test needs root (network namespaces, veths)");
    for tool in ["curl", "iperf3", "tcpdump"] {
        assert!(sys::have(tool), "{tool} is not installed (scripts/test.sh installs it)");
    }
    let shape = Shape { nat: testbed::topology::BedNat::Pat, workers, ..Shape::default() };
    let bed = TestBed::up_with(1, "/tmp/cfw-testbed-nat", shape).expect("bed up");
    eprintln!("NAT bed, {workers} worker(s)");
    let mut failures = Vec::new();
    let mut step = |name: &str, r: Result<String>| match r {
        Ok(d) => eprintln!("step {name}: ok: {d}"),
        Err(e) => {
            eprintln!("step {name}: FAILED: {e:#}");
            failures.push(format!("{name}: {e:#}"));
        }
    };

    // The outside host's link, captured for the whole test.
    let (mut cap, cap_log) = harness::capture_ip(&bed.run_dir, OUTSIDE, "nat-outside-tcpdump").expect("tcpdump");

    step(
        "(a) HTTP inside -> outside through PAT",
        download(&bed, "a", OUTSIDE, OUTSIDE_ADDR, 8080, INSIDE, &format!("http://{OUTSIDE_ADDR}:8080/random.bin")),
    );
    step(
        "(b) ping and iperf3 UDP through PAT",
        (|| {
            let ping = sys::ns_run(INSIDE, "ping", &["-c", "3", "-i", "0.2", "-W", "2", OUTSIDE_ADDR])?;
            ensure!(ping.contains(" 0% packet loss"), "ping: {ping}");
            // 8000-byte echoes: both ways in fragments, the replies to the
            // pool address translated piece by piece.
            let big = sys::ns_run(INSIDE, "ping", &["-c", "3", "-i", "0.2", "-W", "2", "-s", "8000", OUTSIDE_ADDR])?;
            ensure!(big.contains(" 0% packet loss"), "ping -s 8000: {big}");
            let udp = harness::iperf3(&bed.run_dir, "nat-b", OUTSIDE, OUTSIDE_ADDR, INSIDE, true)?;
            Ok(format!("ping 3/3, ping -s 8000 3/3; {udp}"))
        })(),
    );
    step(
        "(c) HTTP outside -> 198.51.100.80:80 (static PAT to the inside host's 8080)",
        download(&bed, "c", INSIDE, INSIDE_ADDR, 8080, OUTSIDE, &format!("http://{WEB_MAPPED}:80/random.bin")),
    );
    step(
        "(d) outside to an unmapped port of the pool address is dropped and counted",
        (|| {
            let before = drops(&bed, "nat-no-xlate")?;
            let out = Command::new("ip")
                .args(["netns", "exec", OUTSIDE, "curl", "-sS", "--max-time", "2", "-o", "/dev/null"])
                .arg(format!("http://{PAT_ADDR}:2000/"))
                .output()?;
            ensure!(!out.status.success(), "a connection to an unmapped port of {PAT_ADDR} succeeded");
            let deadline = Instant::now() + Duration::from_secs(3);
            loop {
                let after = drops(&bed, "nat-no-xlate")?;
                if after > before {
                    return Ok(format!("nat-no-xlate {before} -> {after}"));
                }
                ensure!(Instant::now() < deadline, "nat-no-xlate stayed at {after}");
                std::thread::sleep(Duration::from_millis(200));
            }
        })(),
    );
    cap.stop();
    step(
        "(e) the outside link saw only the pool addresses and the server",
        harness::capture_shows_only(&cap_log, "198.18.1.", "198.51.100.", 100),
    );
    step(
        "(f) show xlate",
        (|| {
            let x = bed.show(1, "xlate")?;
            let c = &x["counters"];
            let out = c["translated_out"].as_u64().unwrap_or(0);
            let inn = c["translated_in"].as_u64().unwrap_or(0);
            ensure!(out > 0 && inn > 0, "counters: {c}");
            let n = x["xlates"].as_array().map_or(0, Vec::len);
            ensure!(n > 0, "no xlate listed: {x}");
            // One row per worker and pool: the workers' shares of the
            // pool's 126 blocks add up.
            let pools = bed.show(1, "nat-pool")?;
            let rows: Vec<&serde_json::Value> =
                pools["pools"].as_array().map(|a| a.iter().filter(|p| p["name"] == "pat").collect()).unwrap_or_default();
            ensure!(rows.len() == usize::from(workers), "a row per worker: {pools}");
            ensure!(rows.iter().all(|p| p["kind"] == "dynamic-pat"), "show nat pool: {pools}");
            let blocks: u64 = rows.iter().map(|p| p["blocks"].as_u64().unwrap_or(0)).sum();
            let ports: Vec<u64> = rows.iter().map(|p| p["ports_in_use"].as_u64().unwrap_or(0)).collect();
            ensure!(blocks == 126, "blocks over the workers: {pools}");
            let stats = bed.show(1, "stats")?;
            Ok(format!(
                "{n} xlates; translated out {out}, in {inn}; created {}; pool \"pat\": {blocks} blocks, ports in use \
                 per worker {ports:?}; frames steered between workers {}",
                c["xlates_created"], stats["steered_out"]
            ))
        })(),
    );
    step(
        "(g) a reload moves the static PAT to port 81 (N9); one that changes the pool is refused (N6)",
        (|| {
            let file = bed.run_dir.join("n1.yaml");
            harness::edit_file(&file, "      mapped-port: 80\n", "      mapped-port: 81\n")?;
            let r = testbed::bed::ctl_reload(&bed.bin_dir, &bed.socket(1)).context("reload")?;
            let moved = download(&bed, "g", INSIDE, INSIDE_ADDR, 8080, OUTSIDE, &format!("http://{WEB_MAPPED}:81/random.bin"))?;
            let old = Command::new("ip")
                .args(["netns", "exec", OUTSIDE, "curl", "-sS", "--max-time", "2", "-o", "/dev/null"])
                .arg(format!("http://{WEB_MAPPED}:80/"))
                .output()?;
            ensure!(!old.status.success(), "the old mapped port 80 still answers after the reload");
            harness::edit_file(&file, "addresses: [198.51.100.7]", "addresses: [198.51.100.9]")?;
            let e = testbed::bed::ctl_reload(&bed.bin_dir, &bed.socket(1)).err().context("a pool change was taken")?;
            let e = format!("{e:#}");
            ensure!(e.contains("SPEC N6") && e.contains("restart"), "refusal: {e}");
            harness::edit_file(&file, "addresses: [198.51.100.9]", "addresses: [198.51.100.7]")?;
            let ping = sys::ns_run(INSIDE, "ping", &["-c", "2", "-i", "0.2", "-W", "2", OUTSIDE_ADDR])?;
            ensure!(ping.contains(" 0% packet loss"), "PAT after the refused reload: {ping}");
            Ok(format!("reload applied ({}); 198.51.100.80:81 {moved}; :80 refused; pool change refused (N6); PAT still up", r["running"]["source"]))
        })(),
    );
    if !failures.is_empty() {
        panic!(
            "{} step(s) failed:\n{}\nnode log:\n{}",
            failures.len(),
            failures.join("\n"),
            sys::tail(&bed.run_dir.join("n1.log"), 30)
        );
    }
}
