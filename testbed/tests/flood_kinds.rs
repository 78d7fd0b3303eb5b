//! Floods of every kind through the three-node test bed with its defaults
//! (docs/flood.md): SYN, ACK, RST, FIN, UDP and ICMP, spoofed
//! (`--rand-source`) and not, from inside at the server and from outside
//! at a published inside host (permitted) and at an unpublished inside
//! address (denied), each `hping3 --flood` for `FLOOD_SECS` in turn, in
//! one bed bring-up; then `clusterfw-pktgen --mode synflood
//! --rand-source` from inside, a second spoofed SYN source. `flood.rs`
//! holds the longer spoofed SYN flood from inside and its reverse-path
//! figures.
//!
//! Before the floods:
//!
//! (0) a reload on the control node publishes the inside host
//!     (`PUBLISHED`, any protocol, permitted in from outside); the outside
//!     host downloads from it; a paced download from inside to the server
//!     starts and runs through every flood at `PACED_RATE` (`PACED_READ`),
//!     reading the rest at full speed once the floods are over.
//!
//! The floods start as soon as the bed is up, within the SYN guard of its
//! formation (`pipeline::DEFAULT_SYN_GUARD`, 35 s after the last member
//! set), as a flood right after a member change would: within it a SYN at
//! a non-director asks the director while half the pending table is free,
//! then is owned at once (`SYN_GUARD_PENDING`, `syn_guard_skipped`).
//!
//! # What each flood proves about the firewall
//!
//! - spoofed, from inside (1.1-1.6): anti-spoofing on the inside
//!   interface (strict `reverse-path` by default) drops the flood where
//!   it arrives, counted, with no flow, record or CCL message made for it;
//! - not spoofed, from inside at the server (1.7-1.12): permitted traffic
//!   from a real host; SYNs become flows and half-open connections the
//!   server answers (the SYN guard's queries and skips, the record
//!   table's early drop), ACK/RST without a flow are parked and asked
//!   about at their director (the pending table and the director's hold
//!   share bound the work), FIN without ACK is `tcp-bad-flags` where it
//!   lands, UDP becomes flows elected at their directors, ICMP one flow;
//! - from outside at the published host (1.13-1.24): the same, permitted
//!   by a rule; the spoofed SYN flood (1.13) **fills every member's flow
//!   table** and runs on until it has (at most `FILL_LIMIT`, under the
//!   60 s SYN timeout the test publishes, `SYN_TIMEOUT`): its checks
//!   are made while the tables are full, and it fails unless the
//!   **early drop** evicted embryonic flows to make room for the
//!   legitimate connections (with the early drop off, the legitimate
//!   connections are refused `flow-table-full` and the step fails);
//! - from outside at a denied address (1.25-1.36): the policy's default
//!   denies the flood at whichever member owns each packet, with no flow
//!   kept;
//! - pktgen (2): a second SYN source, faster than hping3 (af_packet beside
//!   the host's kernel), at the same anti-spoofing.
//!
//! During each flood (1 s in, or 1 s after the tables filled) and right
//! after it:
//!
//! - every node's management socket answers `show stats` (how long the
//!   slowest took is in the step text): the control lcore is not starved;
//! - a new download from inside to the server and one from outside to the
//!   published host each complete with their sha256 (from the legitimate
//!   clients' own addresses `LEGIT_IN`, `LEGIT_OUT`, not the flooders'),
//!   and connect within 1 s (curl's `time_connect`, the flood's bound on
//!   a new connection) — unless frames were lost before the nodes, below;
//! - every frame the kernel handed a member's af_packet port (its veth's
//!   `rx_packets`) was read by the node or counted as lost at its ring
//!   (`rx_ring_drops`), within a slack of 256 frames + 0.5 %: a loss the
//!   nodes do not count fails the step;
//! - the paced download (an established connection) made progress during
//!   the flood — unless its own frames were lost before the nodes, below
//!   — and in every case resumes after it (within `RESUME_LIMIT`): the
//!   firewall neither dropped nor reset it.
//!
//! # What the bed cannot prove: frames lost before the firewall
//!
//! On this bed 3 nodes, the flood tool, the hosts' and routers' kernels
//! share 2 cores, and the nodes' ports are af_packet sockets on veths: how
//! many frames a second reach a node is the kernel's and the host's
//! speed, not the firewall's. Many floods offer the members more frames
//! than they read, and the af_packet rings overflow (counted:
//! `rx_ring_drops`, the sockets' `PACKET_STATISTICS`, which DPDK 22.11's
//! driver never reads). A ring drops whatever arrives when it is full, a
//! legitimate handshake's or the paced transfer's frame as well as the
//! flood's, as a NIC does when its receive ring is full; TCP then waits
//! for its retransmission (1 s for a SYN; a backed-off timer for the
//! paced transfer). With several workers a frame read on one worker's
//! queue that belongs to another (af_packet's fanout hash is not the
//! node's symmetric one) crosses a steering ring, which overflows the
//! same way when the flood's worker is behind (counted: `handoff_drops`).
//! So the bounds that measure time are applied only where no frame was
//! lost before the firewall (`testbed::losses`):
//!
//! - the 1 s connect bound during a flood, where no member's receive or
//!   steering ring overran during the step; right after it, where none
//!   was still overrunning while those connections were made (a member
//!   behind drains its rings and its CCL backlog);
//! - the paced download's progress during a flood, where nothing was lost
//!   on its own path: the two ports its directions arrive on (the routers'
//!   ECMP choice for its 5-tuple, asked of their kernels), those members'
//!   CCL ports and steering rings, and the machine's input backlog.
//!
//! A waived bound is named in the step's text after `WAIVED:`, with the
//! losses that waived it; the downloads must still complete with their
//! sha256 and the paced one must resume. What the bed cannot show at all:
//! the rate a member sustains (`scripts/bench.sh` measures that on
//! in-memory ports), and how a real NIC's RSS queues and drop counters
//! behave under a flood.
//!
//! The step text gives hping3's summary (packets sent) and the counters
//! that grew on each member: drops by reason, CCL drops and membership
//! counters (`show cluster`), receive losses (`rx_ring_drops`,
//! `rx_missed`, `rx_nombuf`, `handoff_drops`) and the machine's input-backlog drops; each
//! flood's `show stats` and `show cluster` before and after are kept in
//! the run directory (`flood-kinds-fN-stats.json`). The last step stops the
//! paced download and checks its sha256: the established flow survived
//! everything.
//!
//! Needs root, curl and hping3 (scripts/setup.sh) and `clusterfw-pktgen` in
//! the binary directory (`harness::test_bin_dir`). A guard takes the bed
//! down on every exit path (with every process in its namespaces, the
//! floods and pktgen among them, and pktgen's DPDK runtime directory,
//! named under `topology::DPDK_PREFIX`).

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use testbed::harness::{self, Background, Steps, TestBed};
use testbed::{losses, sys, topology};

const NODES: usize = 3;
const INSIDE: &str = "cfw-inside";
const OUTSIDE: &str = "cfw-outside";
/// The server, outside.
const SERVER: &str = "198.18.20.2";
/// The client host, inside, published to the outside by `PERMIT_RULE`.
const PUBLISHED: &str = "198.18.10.2";
/// An inside address nothing publishes (and no host holds): floods at it
/// are denied by the security-level default.
const DENIED: &str = "198.18.10.3";
const PORT: &str = "8080";
/// The legitimate clients: second addresses of the inside and outside
/// hosts, so that their connections are not the flooder's (a flood not
/// spoofed comes from the host's own address and walks every source port,
/// leaving flows whose 5-tuples a client there would reuse at random).
const LEGIT_IN: &str = "198.18.10.5";
const LEGIT_OUT: &str = "198.18.20.5";
/// Each new download, either way.
const BYTES: u64 = 1 << 20;
/// The paced download: more than it reads at `PACED_RATE` over all floods.
const PACED_BYTES: u64 = 32 << 20;
const PACED_RATE: u64 = 64 << 10;
const FLOOD_SECS: u64 = 3;
/// How often the frame accounting reads a member again, 300 ms apart,
/// while frames are still in its rings after a flood.
const ACCOUNTING_REREADS: usize = 10;
/// The bound on a new connection's connect time, s.
const CONNECT_BOUND: f64 = 1.0;
/// How long the paced download may take to make progress again after a
/// flood: TCP's retransmission timer, doubled at each loss in a row from
/// 200 ms, is at most 6.4 s after a 3-4 s flood took every retransmission.
const RESUME_LIMIT: Duration = Duration::from_secs(15);
/// How long a filling flood may take to fill every member's flow table:
/// below the SYN timeout (`SYN_TIMEOUT`), after which its first flows
/// expire.
const FILL_LIMIT: Duration = Duration::from_secs(55);
/// The half-open TCP timeout this test publishes (`tcp-syn`; the default
/// is 30 s). A table fills only if the flood offers its capacity within
/// one SYN timeout: hping3 beside a CPU hog offered a member about 5 000
/// SYNs a second, 126 000 in 25 s against 131 072 flows (2 workers), and
/// the step failed on how fast the host generates, not on the firewall.
/// At 60 s the flood needs 2 200 a second; what is checked once the
/// tables are full does not depend on how long half-open flows live.
const SYN_TIMEOUT: &str = "  tcp-syn: 60\n";
/// A member's flow table is full at this share of its capacity.
const FULL: f64 = 0.98;
const PERMIT_RULE: &str = "access-rules:\n  - name: published\n    action: permit\n    interface: outside\n    destination: 198.18.10.2/32\n";
/// pktgen's DPDK file prefix: under the bed's prefix, so `down` removes its
/// runtime directory should the test die before it does.
const PKTGEN_PREFIX: &str = "cfw-tb-flood-pktgen";

/// A paced HTTP/1.0 GET (`python3 -c PACED_READ HOST PORT PATH OUT RATE
/// STOP SRC`), from address SRC: reads RATE bytes/s through a 4 KiB receive buffer (the server
/// can run at most that far ahead) until the file STOP exists, then the
/// rest at full speed; prints its local port once connected (`port N`),
/// then its byte count every 0.2 s (flushed), and writes the body to OUT
/// at the end. Like `harness::PACED_GET`, but its
/// length on the wire is the test's, not a fixed number of seconds.
/// (`\x20`: a continuation line's leading spaces are not part of the
/// string.)
const PACED_READ: &str = "import os, socket, sys, time\n\
host, port, path, out, rate, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5]), sys.argv[6]\n\
s = socket.socket()\n\
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)\n\
s.bind((sys.argv[7], 0))\n\
s.connect((host, port))\n\
print('port', s.getsockname()[1], flush=True)\n\
s.sendall(('GET %s HTTP/1.0\\r\\nHost: %s\\r\\n\\r\\n' % (path, host)).encode())\n\
buf = bytearray()\n\
while b'\\r\\n\\r\\n' not in buf:\n    c = s.recv(4096)\n    assert c, 'no header'\n    buf += c\n\
head, body = bytes(buf).split(b'\\r\\n\\r\\n', 1)\n\
total = int([l.split(b':')[1] for l in head.split(b'\\r\\n') if l.lower().startswith(b'content-length:')][0])\n\
body = bytearray(body)\n\
t0 = last = time.monotonic()\n\
while len(body) < total:\n    c = s.recv(4096)\n    assert c, 'short body'\n    body += c\n\
\x20   now = time.monotonic()\n\
\x20   if now - last >= 0.2:\n        print(len(body), flush=True)\n        last = now\n\
\x20   if not os.path.exists(stop):\n        time.sleep(max(0.0, t0 + len(body) / rate - now))\n\
open(out, 'wb').write(body)\n\
print(len(body), flush=True)\n\
print('done', flush=True)\n\
s.close()\n";

/// One flood: who sends what at whom.
struct Flood {
    name: String,
    ns: &'static str,
    /// hping3's arguments after `-q --flood`.
    args: Vec<String>,
    /// The flood runs until every member's flow table is full (at most
    /// `FILL_LIMIT`), then `FLOOD_SECS` more, its checks made while the
    /// tables are full: the early drop's steps.
    fill: bool,
}

/// hping3's option and name for each kind.
const KINDS: [(&str, &str); 6] = [("-S", "SYN"), ("-A", "ACK"), ("-R", "RST"), ("-F", "FIN"), ("--udp", "UDP"), ("--icmp", "ICMP")];

fn floods() -> Vec<Flood> {
    let mut v = Vec::new();
    let sides: [(&str, &'static str, &str); 3] =
        [("from inside at the server", INSIDE, SERVER), ("from outside at the published host", OUTSIDE, PUBLISHED), ("from outside at a denied address", OUTSIDE, DENIED)];
    for (side, ns, dst) in sides {
        for spoofed in [true, false] {
            for (opt, kind) in KINDS {
                let mut args = vec![opt.to_string()];
                if opt != "--icmp" {
                    args.extend(["-p".to_string(), PORT.to_string()]);
                }
                if spoofed {
                    args.push("--rand-source".into());
                }
                args.push(dst.into());
                let name = format!("{kind} flood {side}, {}", if spoofed { "spoofed" } else { "not spoofed" });
                // Spoofed SYNs at a permitted host: each one a new
                // embryonic flow the policy admits.
                let fill = spoofed && opt == "-S" && dst == PUBLISHED;
                v.push(Flood { name, ns, args, fill });
            }
        }
    }
    v
}

/// Every member's `show stats` (with its `show cluster` under
/// "cluster"), and how long the slowest answer took.
fn all_stats(bed: &TestBed) -> Result<(Vec<Value>, Duration)> {
    let mut out = Vec::new();
    let mut slowest = Duration::ZERO;
    for k in 1..=NODES {
        let t = Instant::now();
        let mut s = bed.show(k, "stats").with_context(|| format!("n{k}'s management socket"))?;
        slowest = slowest.max(t.elapsed());
        s["cluster"] = bed.show(k, "cluster").with_context(|| format!("n{k}'s management socket"))?;
        out.push(s);
    }
    Ok((out, slowest))
}

/// The counters of the object at `path` (`/drops`, `/cluster/ccl_drops`)
/// that grew between `before` and `after`, per member: `n1 reverse-path
/// +123, …`, or "none".
fn grown(before: &[Value], after: &[Value], path: &str) -> String {
    grown_of(before, after, path, |_| true)
}

/// `grown` of the counters whose name `keep` accepts.
fn grown_of(before: &[Value], after: &[Value], path: &str, keep: impl Fn(&str) -> bool) -> String {
    let mut parts = Vec::new();
    for (k, (b, a)) in before.iter().zip(after).enumerate() {
        for (r, n) in a.pointer(path).and_then(Value::as_object).into_iter().flatten().filter(|(r, _)| keep(r)) {
            let was = b.pointer(path).and_then(|o| o[r].as_u64()).unwrap_or(0);
            let d = n.as_u64().unwrap_or(0).saturating_sub(was);
            if d > 0 {
                parts.push(format!("n{} {r} +{d}", k + 1));
            }
        }
    }
    listed(&parts)
}

/// `parts` joined with commas, or "none".
fn listed(parts: &[String]) -> String {
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// The cluster stage's record-table, director-hold, SYN-guard and pending
/// counters that grew (`show cluster` counters: records evicted by the
/// early drop, records refused, queries held and answered at once, SYNs
/// asked about and owned at once within the guard or at their query's
/// timeout, parked frames dropped unanswered or without an owner — not
/// drop reasons), per member, or "none".
fn cluster_grown(before: &[Value], after: &[Value]) -> String {
    const KEYS: [&str; 10] = [
        "records_evicted",
        "record_table_full",
        "queries_held",
        "held_full",
        "held_share_full",
        "syn_guard_queries",
        "syn_guard_skipped",
        "guard_timeouts_owned",
        "pending_timeouts",
        "pending_no_owner",
    ];
    grown_of(before, after, "/cluster/counters", |k| KEYS.contains(&k))
}

/// Flows held and embryonic flows evicted, summed over the members.
fn flows_of(stats: &[Value]) -> (u64, u64) {
    let sum = |f: &str| stats.iter().map(|s| s[f].as_u64().unwrap_or(0)).sum();
    (sum("flows"), sum("flows_evicted_embryonic"))
}

/// A curl download from address `from` in `ns` of `url` to `got`: seconds to connect, after
/// checking the sha256.
fn download(ns: &str, from: &str, url: &str, got: &Path, want: &str) -> Result<f64> {
    let got_s = got.to_string_lossy().into_owned();
    let out = sys::ns_run(
        ns,
        "curl",
        &["-sS", "--fail", "--max-time", "30", "--interface", from, "-o", &got_s, "-w", "%{time_connect}", url],
    )?;
    let connect: f64 = out.trim().parse().with_context(|| format!("curl's time_connect {out:?}"))?;
    let sum = harness::sha256(got)?;
    let _ = std::fs::remove_file(got);
    ensure!(sum == want, "{url}: sha256 {sum}, served {want}");
    Ok(connect)
}

/// The two new downloads at once (inside to the server, outside from the
/// published host), each within the connect bound: their connect times.
struct Legit<'a> {
    out_dir: &'a Path,
    out_want: &'a str,
    in_dir: &'a Path,
    in_want: &'a str,
}

impl Legit<'_> {
    fn check(&self, when: &str) -> Result<(f64, f64)> {
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| {
                download(INSIDE, LEGIT_IN, &format!("http://{SERVER}:{PORT}/random.bin"), &self.out_dir.join(format!("got-{when}.bin")), self.out_want)
            });
            let b = s.spawn(|| {
                download(OUTSIDE, LEGIT_OUT, &format!("http://{PUBLISHED}:{PORT}/random.bin"), &self.in_dir.join(format!("got-{when}.bin")), self.in_want)
            });
            (a.join(), b.join())
        });
        let a = a.map_err(|_| anyhow::anyhow!("download thread panicked"))?.context("inside -> server")?;
        let b = b.map_err(|_| anyhow::anyhow!("download thread panicked"))?.context("outside -> published host")?;
        Ok((a, b))
    }
}

/// Both connects of `check` within `CONNECT_BOUND`.
fn within_bound(when: &str, r: &Result<(f64, f64)>) -> Result<()> {
    match r {
        Ok((a, b)) => {
            ensure!(
                *a < CONNECT_BOUND && *b < CONNECT_BOUND,
                "{when}: connected in {a:.3} s inside -> server, {b:.3} s outside -> published host (bound {CONNECT_BOUND} s)"
            );
            Ok(())
        }
        Err(e) => Err(anyhow::anyhow!("{when}: {e:#}")),
    }
}

/// The paced download's byte count so far (its last progress line).
fn progress(log: &Path) -> u64 {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .rev()
        .find_map(|l| l.trim().parse().ok())
        .unwrap_or(0)
}

/// The last line of hping3's summary that counts packets.
fn hping_summary(out: &std::process::Output) -> Result<String> {
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    text.lines()
        .find(|l| l.contains("packets transmitted"))
        .map(|l| l.trim().to_string())
        .with_context(|| format!("hping3 did not run: {}", text.trim()))
}

/// What a flood source is: started, and how to get its summary.
enum Source {
    /// `timeout -s INT SECS hping3 …`: its summary comes when it ends.
    Hping(Option<std::process::Child>),
    Pktgen(Background, PathBuf),
}

/// The paced download that runs through every flood: where its log is,
/// and the members its frames reach.
struct Paced {
    log: PathBuf,
    path: losses::FlowPath,
}

impl Paced {
    /// Once the paced download has said its local port: its path through
    /// the bed (the routers' ECMP choice for its 5-tuple).
    fn connected(log: PathBuf) -> Result<Paced> {
        let t = Instant::now();
        let port = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(p) = text.lines().find_map(|l| l.strip_prefix("port ").and_then(|p| p.trim().parse::<u16>().ok())) {
                break p;
            }
            ensure!(t.elapsed() < Duration::from_secs(10), "the paced download did not connect: {}", sys::tail(&log, 3));
            std::thread::sleep(Duration::from_millis(100));
        };
        let path = losses::FlowPath::of_tcp(LEGIT_IN, port, SERVER, PORT.parse()?)?;
        Ok(Paced { log, path })
    }

    /// Waits until the byte count passes `from`, at most `RESUME_LIMIT`:
    /// how long that took.
    fn resumed_after(&self, from: u64) -> Result<Duration> {
        let t = Instant::now();
        while progress(&self.log) <= from {
            ensure!(
                t.elapsed() < RESUME_LIMIT,
                "the paced download made no progress for {} s after the flood (at {from} bytes)",
                RESUME_LIMIT.as_secs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(t.elapsed())
    }
}

/// Every member's flow table full: each holds at least `FULL` of its
/// capacity (several workers' tables fill unevenly).
fn tables_full(stats: &[Value]) -> bool {
    stats.iter().all(|s| {
        let (flows, cap) = (s["flows"].as_u64().unwrap_or(0), s["flow_capacity"].as_u64().unwrap_or(u64::MAX));
        flows as f64 >= FULL * cap as f64
    })
}

/// For a filling flood: waits until every member's flow table is full,
/// at most `FILL_LIMIT`; the seconds it took.
fn fill(bed: &TestBed, t0: Instant) -> Result<f64> {
    loop {
        let (stats, _) = all_stats(bed).context("while the tables fill")?;
        if tables_full(&stats) {
            return Ok(t0.elapsed().as_secs_f64());
        }
        let held: Vec<String> = stats.iter().map(|s| format!("{}/{}", s["flows"], s["flow_capacity"])).collect();
        ensure!(t0.elapsed() < FILL_LIMIT, "the flow tables did not fill in {} s: {}", FILL_LIMIT.as_secs(), held.join(", "));
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A flood and the checks around it; the step's text.
fn flood_step(bed: &TestBed, legit: &Legit, paced: &Paced, tag: &str, filling: bool, source: impl FnOnce() -> Result<Source>) -> Result<String> {
    let kernel_before = kernel_rx(bed)?;
    let (before, _) = all_stats(bed)?;
    let backlog0 = losses::softnet_dropped();
    let p0 = progress(&paced.log);
    let t0 = Instant::now();
    let mut src = source()?;
    // A filling flood is judged once the tables are full, and runs
    // `FLOOD_SECS` from then.
    let filled = if filling { Some(fill(bed, t0)) } else { None };
    let flood_from = t0.elapsed();
    std::thread::sleep(Duration::from_millis(1000));
    let during_mgmt = all_stats(bed).context("during the flood");
    let during = legit.check(&format!("{tag}-during"));
    let during_at = t0.elapsed().as_secs_f64();
    let sent = match &mut src {
        Source::Hping(c) => match c.take() {
            Some(c) => {
                if filling {
                    std::thread::sleep((flood_from + Duration::from_secs(FLOOD_SECS)).saturating_sub(t0.elapsed()));
                    // `timeout` hands the signal on to hping3, which prints
                    // its summary.
                    sys::signal(c.id(), "INT");
                }
                c.wait_with_output().map_err(anyhow::Error::from).and_then(|o| hping_summary(&o))
            }
            None => Err(anyhow::anyhow!("hping3 not started")),
        },
        Source::Pktgen(p, log) => {
            let deadline = Instant::now() + Duration::from_secs(FLOOD_SECS + 15);
            loop {
                let text = std::fs::read_to_string(&*log).unwrap_or_default();
                if let Some(at) = text.find('{') {
                    if let Ok(v) = serde_json::from_str::<Value>(&text[at..]) {
                        p.stop();
                        break Ok(format!(
                            "pktgen sent {} SYNs in {:.1} s ({:.0} pps), {} refused by the port",
                            v["counters"]["tx_packets"],
                            v["duration_s"].as_f64().unwrap_or(0.0),
                            v["counters"]["tx_packets"].as_f64().unwrap_or(0.0) / v["duration_s"].as_f64().unwrap_or(1.0),
                            v["counters"]["tx_refused"]
                        ));
                    }
                }
                if Instant::now() > deadline {
                    p.stop();
                    break Err(anyhow::anyhow!("pktgen did not report: {}", sys::tail(log, 10)));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    let flood_secs = t0.elapsed().as_secs_f64();
    let p1 = progress(&paced.log);
    let (at_end, _) = all_stats(bed).context("as the flood ended")?;
    let after = legit.check(&format!("{tag}-after"));
    let (mut after_stats, slowest_after) = all_stats(bed).context("after the flood")?;
    // What the members were still losing while the connections right
    // after the flood were made: receive and steering rings still full of
    // the flood's frames, the CCL's backlog.
    let wake = losses::grown(&at_end, &after_stats);
    let mut kernel_after = kernel_rx(bed)?;
    let mut unaccounted = unaccounted(&before, &after_stats, &kernel_before, &kernel_after);
    // Frames still in a ring when the node was asked are the kernel's and
    // not yet read: a member behind after a flood (its CCL backlog, a
    // stalled thread) may hold up to a ring per queue. Read again while
    // it drains; a frame really lost stays missing.
    for _ in 0..ACCOUNTING_REREADS {
        if unaccounted.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
        after_stats = all_stats(bed).context("after the flood, read again")?.0;
        kernel_after = kernel_rx(bed)?;
        unaccounted = self::unaccounted(&before, &after_stats, &kernel_before, &kernel_after);
    }
    let overrun = losses::grown(&before, &after_stats);
    let backlog = losses::softnet_dropped().saturating_sub(backlog0);
    // The paced download's own frames met a loss: the losses on its path,
    // and any in the machine's input backlog (which has no port).
    let mut paced_met: Vec<String> = paced.path.met(&overrun).iter().map(|l| l.to_string()).collect();
    if backlog > 0 {
        paced_met.push(format!("kernel backlog drops +{backlog}"));
    }
    // However the flood went, the established transfer goes on after it.
    let resumed = paced.resumed_after(p1);
    let _ = std::fs::write(
        bed.run_dir.join(format!("flood-kinds-{tag}-stats.json")),
        serde_json::to_string_pretty(&serde_json::json!({ "before": before, "after": after_stats }))?,
    );
    // The figures, whatever failed; then every check, the first failure
    // first, with the figures.
    let ms = |r: &Result<(f64, f64)>| match r {
        Ok((a, b)) => format!("{:.0}/{:.0} ms", a * 1e3, b * 1e3),
        Err(e) => format!("FAILED ({e:#})"),
    };
    let (flows, evicted) = flows_of(&after_stats);
    let (_, evicted_before) = flows_of(&before);
    let filled_text = match &filled {
        Some(Ok(s)) => format!("every flow table full {s:.1} s in; "),
        Some(Err(e)) => format!("FAILED to fill ({e:#}); "),
        None => String::new(),
    };
    let figures = format!(
        "{}; {filled_text}connect during (at {during_at:.1} s) {}, after {} (inside->server/outside->published); \
         management: slowest show stats {} during, {:.0} ms after; paced +{} KiB over {flood_secs:.1} s ({}), {}; \
         received on data ports: {}; drops grown: {}; CCL drops grown: {}; CCL hand-off grown: {}; \
         membership counters grown: {}; receive losses grown: {}; kernel backlog drops +{backlog}; \
         {flows} flows held, {} embryonic evicted; cluster records and queries grown: {}",
        sent.as_ref().map(String::as_str).unwrap_or("no summary"),
        ms(&during),
        ms(&after),
        match &during_mgmt {
            Ok((_, t)) => format!("{:.0} ms", t.as_secs_f64() * 1e3),
            Err(e) => format!("FAILED ({e:#})"),
        },
        slowest_after.as_secs_f64() * 1e3,
        p1.saturating_sub(p0) >> 10,
        paced.path,
        match &resumed {
            Ok(t) if p1 > p0 => format!("on after it ({:.0} ms to the next progress)", t.as_secs_f64() * 1e3),
            Ok(t) => format!("resumed {:.1} s after the flood", t.as_secs_f64()),
            Err(e) => format!("FAILED ({e:#})"),
        },
        rx_grown(&before, &after_stats),
        grown(&before, &after_stats, "/drops"),
        grown(&before, &after_stats, "/cluster/ccl_drops"),
        grown_of(&before, &after_stats, "/cluster/driver", |k| k.starts_with("to_")),
        grown(&before, &after_stats, "/cluster/membership"),
        losses::listed(&overrun),
        evicted - evicted_before,
        cluster_grown(&before, &after_stats),
    );
    (|| {
        during_mgmt?;
        sent?;
        if let Some(f) = filled {
            f?;
            // The early drop made room for the connections above while
            // the tables were full.
            ensure!(evicted > evicted_before, "the flow tables were full and no embryonic flow was evicted");
        }
        // The bound during the flood holds unless the members' receive
        // or steering rings overran (the flood offered more than the nodes read on this
        // bed's 2 shared cores: any frame, a handshake's among them, may
        // have been lost there, counted); the connections must then still
        // open (curl's 30 s) with their sha256.
        if overrun.is_empty() {
            within_bound(&format!("{tag}-during"), &during)?;
        } else {
            during.as_ref().map_err(|e| anyhow::anyhow!("{tag}-during, receive rings overran: {e:#}"))?;
        }
        // Right after the flood the bound holds unless the members were
        // still losing frames at their rings while the connections were
        // made (the flood's wake: a member behind drains its rings and
        // its CCL backlog); the connections must then still open.
        if wake.is_empty() {
            within_bound(&format!("{tag}-after"), &after)?;
        } else {
            after.as_ref().map_err(|e| anyhow::anyhow!("{tag}-after, receive rings still overrunning: {e:#}"))?;
        }
        ensure!(unaccounted.is_empty(), "frames the kernel gave a member's port that it neither read nor counted as ring drops: {}", unaccounted.join(", "));
        // Progress during the flood is judged where the paced
        // download's own frames met no loss; where they did, TCP backs
        // off as it would behind any full NIC ring, and the download must
        // resume after the flood.
        if paced_met.is_empty() {
            ensure!(p1 > p0, "the paced download made no progress during the flood (at {p0} bytes before and after), and lost no frame on its path ({})", paced.path);
        }
        resumed?;
        Ok(())
    })()
    .map_err(|e| e.context(format!("figures: {figures}")))?;
    let mut waived = Vec::new();
    if !overrun.is_empty() {
        waived.push("connect bound during the flood not applied: receive rings overran (counted)".to_string());
    }
    if !wake.is_empty() {
        waived.push(format!("connect bound right after it not applied: rings still overrunning then ({})", losses::listed(&wake)));
    }
    if !paced_met.is_empty() {
        waived.push(format!("paced progress during the flood not judged: its path lost frames ({})", paced_met.join(", ")));
    }
    Ok(if waived.is_empty() { figures } else { format!("{figures}; WAIVED: {}", waived.join("; ")) })
}

/// Each member's af_packet ports as the kernel counts them: (kernel
/// interface, `rx_packets` of `/sys/class/net/<iface>/statistics` in the
/// member's namespace) per port, in `show stats`' port order (ports
/// without a `kernel_interface` are left out).
fn kernel_rx(bed: &TestBed) -> Result<Vec<Vec<(String, u64)>>> {
    let mut out = Vec::new();
    for k in 1..=NODES {
        let s = bed.show(k, "stats").with_context(|| format!("n{k}'s management socket"))?;
        let ifaces: Vec<&str> = s["ports"].as_array().into_iter().flatten().filter_map(|p| p["kernel_interface"].as_str()).collect();
        let paths: Vec<String> = ifaces.iter().map(|i| format!("/sys/class/net/{i}/statistics/rx_packets")).collect();
        // One `cat` for all of a member's ports: close together in time.
        let text = sys::ns_run(&format!("cfw-n{k}"), "cat", &paths)?;
        let counts: Vec<u64> = text.split_whitespace().map(|n| n.parse().with_context(|| format!("n{k}: {text:?}"))).collect::<Result<_>>()?;
        ensure!(counts.len() == ifaces.len(), "n{k}: {} counts for {} interfaces", counts.len(), ifaces.len());
        out.push(ifaces.iter().map(|i| i.to_string()).zip(counts).collect());
    }
    Ok(out)
}

/// The ports where the frames the kernel gave a member's af_packet
/// sockets between the two readings (`kernel_*`, taken before `before`
/// and after `after`) are not what the node read (`rx_packets`) plus
/// what it counted as lost at its rings (`rx_ring_drops`), beyond a
/// slack for frames that arrived between the readings: `n1 n1-in: kernel
/// +N, read +R, ring drops +D`. Empty when every frame is accounted for.
fn unaccounted(before: &[Value], after: &[Value], kernel_before: &[Vec<(String, u64)>], kernel_after: &[Vec<(String, u64)>]) -> Vec<String> {
    let mut bad = Vec::new();
    for (k, ((b, a), (kb, ka))) in before.iter().zip(after).zip(kernel_before.iter().zip(kernel_after)).enumerate() {
        for (iface, k1) in ka {
            let k0 = kb.iter().find(|(i, _)| i == iface).map_or(0, |x| x.1);
            let port = |v: &Value, key: &str| -> u64 {
                v["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|p| p["kernel_interface"].as_str() == Some(iface.as_str()))
                    .map_or(0, |p| p[key].as_u64().unwrap_or(0))
            };
            let read = port(a, "rx_packets").saturating_sub(port(b, "rx_packets"));
            let drops = port(a, "rx_ring_drops").saturating_sub(port(b, "rx_ring_drops"));
            let kernel = k1.saturating_sub(k0);
            // Frames that arrived between a member's `show stats` and
            // its `cat` (the CCL carries heartbeats and the cluster's
            // backlog after a flood) and frames still in a ring.
            let slack = 256 + kernel / 200;
            if kernel.abs_diff(read + drops) > slack {
                bad.push(format!("n{} {iface}: kernel +{kernel}, read +{read}, ring drops +{drops}", k + 1));
            }
        }
    }
    bad
}

/// Packets the members' data ports received during a step, per member
/// and port (`rx_packets`; the CCL's left out): set beside what the flood
/// tool sent, it shows how much the bed's kernel path (the routers' ECMP,
/// the veths, the af_packet rings: `rx_ring_drops`) lost before any node
/// saw it — e.g. a
/// one-flow ICMP flood all on one member.
fn rx_grown(before: &[Value], after: &[Value]) -> String {
    let mut parts = Vec::new();
    for (k, (b, a)) in before.iter().zip(after).enumerate() {
        for (i, p) in a["ports"].as_array().into_iter().flatten().enumerate() {
            let name = p["name"].as_str().unwrap_or("?");
            if name == "ccl" {
                continue;
            }
            let d = p["rx_packets"].as_u64().unwrap_or(0).saturating_sub(b["ports"][i]["rx_packets"].as_u64().unwrap_or(0));
            parts.push(format!("n{} {name} {d}", k + 1));
        }
    }
    parts.join(", ")
}

/// The control node publishes `PUBLISHED` (a reload of its file with
/// `PERMIT_RULE` and `SYN_TIMEOUT`) and every node runs that policy.
fn publish(bed: &TestBed) -> Result<String> {
    for k in 1..=NODES {
        harness::edit_file(&bed.run_dir.join(format!("n{k}.yaml")), "  tcp-syn: 30\n", SYN_TIMEOUT)?;
    }
    harness::publish_rule(bed, NODES, PERMIT_RULE, |_| true)
}

// About 4 minutes; in `scripts/test.sh` with 1 and 2 workers. It was
// left out of the test run while 1-4 of 37 floods a run broke the 1 s bound with no
// drop counted on any node: those handshake packets were lost at the
// members' af_packet rings, which the nodes did not count until
// `rx_ring_drops` (docs/flood.md, "On the test bed").
#[test]
fn floods_of_every_kind_leave_the_cluster_up_and_connections_working() {
    assert!(sys::is_root(), "the flood test bed test needs root (network namespaces, veths)");
    for tool in ["curl", "hping3"] {
        assert!(sys::have(tool), "{tool} is not installed (scripts/setup.sh installs it)");
    }
    // The product's membership timers (1 s heartbeats, 3 s hold time), not
    // the bed's fast 100/300 ms: this test is about the defaults, and on
    // 2 shared cores a flood stalls a node's threads past 300 ms (rx_stalls)
    // often enough to lapse leases under the fast timers (docs/flood.md).
    let shape = harness::Shape {
        workers: harness::bed_workers(),
        timers: testbed::topology::BedTimers::Product,
        ..harness::Shape::default()
    };
    let bed = TestBed::up_with(NODES, "/tmp/cfw-testbed-flood-kinds", shape).expect("bed up");
    let pktgen = bed.bin_dir.join("clusterfw-pktgen");
    assert!(pktgen.exists(), "{} is not built (cargo build --release --workspace --bins)", pktgen.display());
    let run = bed.run_dir.clone();
    let (out_www, out_want, _server) = harness::served_file(&run, "flood-kinds-out", OUTSIDE, SERVER, 8080, BYTES).expect("server outside");
    let (in_www, in_want, _published) = harness::served_file(&run, "flood-kinds-in", INSIDE, PUBLISHED, 8080, BYTES).expect("server inside");
    let paced_want = harness::random_file(&out_www.0.join("paced.bin"), PACED_BYTES).expect("paced file");
    let legit = Legit { out_dir: &out_www.0, out_want: &out_want, in_dir: &in_www.0, in_want: &in_want };
    let mut steps = Steps::default();
    for (ns, a) in [(INSIDE, LEGIT_IN), (OUTSIDE, LEGIT_OUT)] {
        sys::ip(ns, &["addr", "add", &format!("{a}/24"), "dev", "eth0"]).expect("legitimate client's address");
    }

    // (0) the published host, the paced download.
    steps.step(
        "(0) publish the inside host; downloads both ways",
        (|| {
            let p = publish(&bed)?;
            let (a, b) = legit.check("before")?;
            Ok(format!("{p}; connected in {:.0} ms inside->server, {:.0} ms outside->published", a * 1e3, b * 1e3))
        })(),
    );
    let paced_out = out_www.0.join("paced-got.bin");
    let paced_log = run.join("flood-kinds-paced.out");
    let stop = run.join("flood-kinds-paced.stop");
    let _ = std::fs::remove_file(&stop);
    let paced_run = Background::start(
        "paced download",
        INSIDE,
        harness::python(),
        &[
            "-c",
            PACED_READ,
            SERVER,
            PORT,
            "/paced.bin",
            &paced_out.to_string_lossy(),
            &PACED_RATE.to_string(),
            &stop.to_string_lossy(),
            LEGIT_IN,
        ],
        &paced_log,
    );
    let paced = Paced::connected(paced_log.clone()).expect("the paced download's path");
    std::thread::sleep(Duration::from_millis(1000));

    // (1) the hping3 floods, one after another.
    let secs = FLOOD_SECS.to_string();
    for (i, f) in floods().iter().enumerate() {
        let r = flood_step(&bed, &legit, &paced, &format!("f{i}"), f.fill, || {
            // A filling flood runs until the tables are full, then stops.
            let secs = if f.fill { (FILL_LIMIT.as_secs() + FLOOD_SECS + 10).to_string() } else { secs.clone() };
            let mut args = vec!["-s", "INT", &secs, "hping3", "-q", "--flood"];
            args.extend(f.args.iter().map(String::as_str));
            let child = sys::ns_command(f.ns, "timeout").args(&args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
            Ok(Source::Hping(Some(child)))
        });
        steps.step(&format!("(1.{}) {}", i + 1, f.name), r);
    }

    // (2) clusterfw-pktgen's spoofed SYN flood from inside, on the host's
    //     own interface (af_packet beside the kernel's stack).
    let r = flood_step(&bed, &legit, &paced, "pktgen", false, || {
        let log = run.join("flood-kinds-pktgen.out");
        let dpdk_dir = Path::new("/var/run/dpdk").join(PKTGEN_PREFIX);
        let _ = std::fs::remove_dir_all(&dpdk_dir);
        let p = Background::start(
            "clusterfw-pktgen",
            INSIDE,
            &pktgen.to_string_lossy(),
            &[
                "--mode",
                "synflood",
                "--rand-source",
                "--flows",
                "65536",
                "--port",
                "net_af_packet0",
                "--gateway",
                topology::cluster_addr::RIN_HOST_SIDE,
                "--ip",
                PUBLISHED,
                "--dst-ip",
                SERVER,
                "--dport",
                PORT,
                "--duration",
                &secs,
                "--json",
                "--",
                "--no-huge",
                "-m",
                "256",
                "--no-pci",
                "--file-prefix",
                PKTGEN_PREFIX,
                "--lcores",
                "0@(0,1)",
                "--log-level",
                "lib.eal:warning",
                "--vdev",
                "net_af_packet0,iface=eth0",
            ],
            &log,
        )?;
        Ok(Source::Pktgen(p, log))
    });
    let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(PKTGEN_PREFIX));
    steps.step("(2) clusterfw-pktgen --mode synflood --rand-source from inside", r);

    // (3) the established transfer, through everything.
    steps.step(
        "(3) the paced download that ran through every flood",
        (|| {
            let mut p = paced_run?;
            let got = progress(&paced_log);
            std::fs::write(&stop, b"")?;
            let t = Instant::now();
            while !std::fs::read_to_string(&paced_log).is_ok_and(|s| s.contains("done")) {
                ensure!(t.elapsed() < Duration::from_secs(60), "the paced download did not finish: {}", sys::tail(&paced_log, 3));
                std::thread::sleep(Duration::from_millis(200));
            }
            p.stop();
            let sum = harness::sha256(&paced_out)?;
            ensure!(sum == paced_want, "paced download: sha256 {sum}, served {paced_want}");
            Ok(format!(
                "{} KiB read at {} KiB/s through the floods, the rest in {:.1} s; sha256 matches",
                got >> 10,
                PACED_RATE >> 10,
                t.elapsed().as_secs_f64()
            ))
        })(),
    );
    let _ = std::fs::remove_file(&stop);
    steps.finish(&run, NODES);
}
