//! One node with two workers on the namespace test bed (issue 12, single
//! node): `dpdk.workers: 2`, each af_packet port with two queue pairs (the
//! kernel's fanout spreads the frames over them by its own hash), the
//! workers steering every frame to the worker that owns its connection
//! (`dataplane::steer`). With `-l 0,1` the EAL has one worker lcore: worker
//! 0 runs on it, worker 1 on a thread. Steps:
//!
//! - (a) the node runs two workers (`show stats` lists both);
//! - (b) 16 HTTP downloads at once, each a new connection, all arrive
//!   whole (sha256); `show conn` holds them on both workers, each worker
//!   decided traffic, frames were steered between them, none was lost on
//!   the way (`handoff_drops` 0);
//! - (c) an 8-stream iperf3 run moves bytes (the rate, retransmissions and
//!   steering are printed);
//! - (d) a 4000-byte ping (fragments on the wire) is answered;
//! - (e) a TCP connection outside -> inside is refused and the node's
//!   summed `acl-denied` rises;
//! - (f) `config reload` with a rule denying the HTTP port reaches both
//!   workers: 0 of 16 connections pass, the rule's summed hits cover them;
//!   the rule removed again, 16 of 16 pass.
//!
//! The steps build on each other; the first failure ends the test. A guard
//! runs `down` on every exit path; the bed lock keeps concurrent runs
//! apart. Needs root, curl, iperf3 and python3 (`scripts/setup.sh`).

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use testbed::bed;
use testbed::harness::{self, Background, Shape, TempDir, TestBed};
use testbed::sys;

const WORKERS: u16 = 2;
const INSIDE: &str = "cfw-inside";
const OUTSIDE: &str = "cfw-outside";
const SERVER: &str = "198.18.2.2";
const CLIENT: &str = "198.18.1.2";
const HTTP_PORT: &str = "8080";
const DOWNLOADS: usize = 16;
const FILE_BYTES: u64 = 2 << 20;
const DENY_RULE: &str = "access-rules:\n  - name: no-http\n    action: deny\n    protocol: tcp\n    destination-port: 8080\n";

struct Ctx {
    bed: TestBed,
    dl: PathBuf,
    want: String,
}

impl Ctx {
    fn show(&self, topic: &str) -> Result<Value> {
        self.bed.show(1, topic)
    }
    fn stats(&self) -> Result<Value> {
        self.show("stats")
    }
    fn file(&self) -> PathBuf {
        self.bed.run_dir.join("n1.yaml")
    }
    /// `config reload`, then wait until every worker applied it.
    fn reload(&self) -> Result<()> {
        let r = bed::ctl_reload(&self.bed.bin_dir, &self.bed.socket(1))?;
        ensure!(r["message"].as_str().is_some_and(|m| m.contains("applied")), "reload answered {r}");
        let t0 = Instant::now();
        loop {
            let p = self.show("config")?["policy"].take();
            if p["generation_applied"] == p["generation_sent"] {
                return Ok(());
            }
            ensure!(t0.elapsed() < Duration::from_secs(5), "workers did not apply the reload: {p}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `DOWNLOADS` downloads at once, each a new connection (each gives
    /// up after 10 s); how many arrived whole.
    fn downloads(&self) -> Result<usize> {
        let url = format!("http://{SERVER}:{HTTP_PORT}/blob.bin");
        let children: Vec<_> = (0..DOWNLOADS)
            .map(|i| {
                let out = self.dl.join(format!("blob{i}.bin"));
                let _ = std::fs::remove_file(&out);
                sys::ns_command(INSIDE, "curl")
                    .args(["-s", "-m", "10", "-o"])
                    .arg(&out)
                    .arg(&url)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
            })
            .collect::<std::io::Result<_>>()
            .context("starting curl")?;
        for mut c in children {
            c.wait().context("curl")?;
        }
        let mut whole = 0;
        for i in 0..DOWNLOADS {
            let out = self.dl.join(format!("blob{i}.bin"));
            whole += usize::from(out.is_file() && harness::sha256(&out)? == self.want);
        }
        Ok(whole)
    }
}

fn counter(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

fn steps(c: &Ctx) -> Result<()> {
    // (a)
    let s = c.stats()?;
    let workers = s["workers"].as_array().map_or(0, Vec::len);
    ensure!(workers == usize::from(WORKERS), "(a) show stats lists {workers} workers: {s}");
    let log = std::fs::read_to_string(c.bed.run_dir.join("n1.log"))?;
    ensure!(log.contains("worker 1 of 2 started"), "(a) no second worker in the log");
    eprintln!("step (a) two workers running (worker 0 on lcore 1, worker 1 on a thread)");

    // (b)
    let before = c.stats()?;
    let t0 = Instant::now();
    let whole = c.downloads()?;
    let secs = t0.elapsed().as_secs_f64();
    ensure!(whole == DOWNLOADS, "(b) {whole} of {DOWNLOADS} downloads arrived whole");
    let conns = c.show("conn")?;
    let on = |w: u64| {
        conns["connections"].as_array().into_iter().flatten().filter(|x| x["worker"] == w && x["tuple"]["dst_port"] == 8080).count()
    };
    let per_worker: Vec<usize> = (0..u64::from(WORKERS)).map(on).collect();
    ensure!(per_worker.iter().sum::<usize>() >= DOWNLOADS, "(b) show conn: {per_worker:?} HTTP connections, {conns}");
    ensure!(per_worker.iter().all(|&n| n > 0), "(b) HTTP connections per worker {per_worker:?}: one worker holds none");
    let after = c.stats()?;
    let delta = |w: usize, k: &str| counter(&after["workers"][w], k) - counter(&before["workers"][w], k);
    let decided: Vec<u64> = (0..usize::from(WORKERS)).map(|w| delta(w, "packets")).collect();
    ensure!(decided.iter().all(|&n| n > 100), "(b) packets per worker {decided:?}");
    let steered = counter(&after, "steered_out") - counter(&before, "steered_out");
    ensure!(steered > 0, "(b) no frame steered between the workers: the kernel's fanout and the flow hash agreed on every frame?");
    let lost = counter(&after, "handoff_drops");
    ensure!(lost == 0, "(b) {lost} frames lost between the workers");
    eprintln!(
        "step (b) {whole}/{DOWNLOADS} downloads of {FILE_BYTES} bytes whole in {secs:.2} s; HTTP connections per worker \
         {per_worker:?}; packets per worker {decided:?}; {steered} frames steered; 0 lost"
    );

    // (c)
    let before = c.stats()?;
    let out = sys::ns_run(INSIDE, "timeout", &["30", "iperf3", "-c", SERVER, "-p", "5201", "-P", "8", "-t", "3", "-J"])
        .context("(c) iperf3")?;
    let j: Value = serde_json::from_str(&out).context("(c) iperf3 -J output")?;
    let bps = j["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0);
    let retr = j["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    ensure!(bps > 0.0, "(c) iperf3 moved nothing: {}", j["end"]);
    let after = c.stats()?;
    let steered = counter(&after, "steered_out") - counter(&before, "steered_out");
    let fwd = counter(&after, "forwarded") - counter(&before, "forwarded");
    eprintln!(
        "step (c) iperf3 -P 8: {:.2} Gbit/s, {retr} retransmissions; {fwd} frames forwarded, {steered} steered ({:.0} %), \
         {} lost between the workers",
        bps / 1e9,
        100.0 * steered as f64 / fwd.max(1) as f64,
        counter(&after, "handoff_drops")
    );

    // (d)
    let out = sys::ns_run(INSIDE, "ping", &["-c", "5", "-i", "0.2", "-W", "2", "-s", "4000", SERVER]).context("(d) ping -s 4000")?;
    ensure!(out.contains("5 received"), "(d) {out}");
    eprintln!("step (d) ping -s 4000 (three fragments each way): 5/5 answered");

    // (e)
    let denied = |v: &Value| v["drops"]["acl-denied"].as_u64().unwrap_or(0);
    let before = denied(&c.stats()?);
    let refused = sys::ns_run(OUTSIDE, "curl", &["-s", "-m", "2", &format!("http://{CLIENT}:22/")]).is_err();
    ensure!(refused, "(e) a connection outside -> inside passed");
    let after = denied(&c.stats()?);
    ensure!(after > before, "(e) acl-denied {before} -> {after}");
    eprintln!("step (e) outside -> inside refused; acl-denied {before} -> {after}");

    // (f)
    harness::edit_file(&c.file(), "access-rules: []\n", DENY_RULE)?;
    c.reload().context("(f) reload with the deny rule")?;
    let whole = c.downloads()?;
    ensure!(whole == 0, "(f) {whole} downloads passed the deny rule");
    let rules = c.show("rules")?;
    let hits = rules["rules"].as_array().into_iter().flatten().filter(|r| r["name"] == "no-http").filter_map(|r| r["hits"].as_u64()).sum::<u64>();
    ensure!(hits >= DOWNLOADS as u64, "(f) no-http hits {hits} < {DOWNLOADS}");
    harness::edit_file(&c.file(), DENY_RULE, "access-rules: []\n")?;
    c.reload().context("(f) reload without the rule")?;
    let whole = c.downloads()?;
    ensure!(whole == DOWNLOADS, "(f) {whole} of {DOWNLOADS} downloads after the rule went");
    eprintln!("step (f) reload: both workers deny (0/{DOWNLOADS}, {hits} hits), rule removed: {whole}/{DOWNLOADS} again");
    Ok(())
}

#[test]
fn one_node_two_workers() {
    if !sys::is_root() {
        eprintln!("skipped: the test bed needs root (run scripts/test.sh)");
        return;
    }
    let bed = TestBed::up_with(1, "/tmp/cfw-testbed-workers", Shape { workers: WORKERS, ..Shape::default() })
        .expect("test bed up");
    let run_dir = bed.run_dir.clone();
    let www = TempDir::new(&run_dir, "www").expect("www dir");
    let dl = TempDir::new(&run_dir, "download").expect("download dir");
    let want = harness::random_file(&www.0.join("blob.bin"), FILE_BYTES).expect("blob");
    let www_dir = www.0.to_string_lossy().into_owned();
    let mut http = Background::start(
        "HTTP server",
        OUTSIDE,
        harness::python(),
        &["-c", harness::HTTP_SERVER, SERVER, HTTP_PORT, &www_dir],
        &run_dir.join("workers-http.log"),
    )
    .expect("HTTP server");
    http.wait_listening(OUTSIDE, 8080, Duration::from_secs(10)).expect("HTTP server listening");
    let mut iperf = Background::start("iperf3 server", OUTSIDE, "iperf3", &["-s", "-B", SERVER, "-p", "5201"], &run_dir.join("workers-iperf3.log"))
        .expect("iperf3 server");
    iperf.wait_listening(OUTSIDE, 5201, Duration::from_secs(10)).expect("iperf3 listening");
    let c = Ctx { bed, dl: dl.0.clone(), want };
    if let Err(e) = steps(&c) {
        eprintln!("--- n1.log (tail) ---\n{}", sys::tail(&run_dir.join("n1.log"), 30));
        panic!("{e:#}");
    }
}
