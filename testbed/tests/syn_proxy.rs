//! The SYN proxy on the three-node test bed with its defaults (issue 15
//! item 4; docs/flood.md, "SYN proxy"): with an inbound server permitted
//! by policy, a spoofed SYN flood from outside at it leaves the server's
//! own SYN backlog untouched while real clients still connect.
//!
//! (0) a reload on the control node publishes the inside host
//!     (`PUBLISHED`, TCP port 8080, permitted in from outside) with
//!     `limits: {max-embryonic: LIMIT, syn-proxy: true}`; every member
//!     runs the class; the inside host serves a file with a listen
//!     backlog of 256 (`harness::HTTP_SERVER`: without the proxy a flood
//!     would fill those 256 SYN-RECV slots, then the kernel's own
//!     syncookies);
//! (1) baseline: the outside host downloads the file (connects within
//!     `CONNECT_BOUND`, sha256 matches); the server holds no SYN-RECV
//!     socket;
//! (2) once the SYN guard of the bed's formation has closed (as in
//!     `flood_kinds.rs`: within it a SYN at a non-director is a director
//!     query, not what this measures), `hping3 -S --flood --rand-source`
//!     from the outside host at the server's port for `FLOOD_SECS`; the
//!     server's SYN-RECV sockets on the port (`ss state syn-recv`) are
//!     counted every 200 ms during it and for a second after; downloads
//!     from the outside host run one after another from 1 s into the
//!     flood to its end, and one right after it: each connects within
//!     `CONNECT_BOUND` (curl's `time_connect`: the proxy's cookie SYN-ACK)
//!     — unless a member's receive rings overran during it, when the
//!     flood offered more than the bed's 2 shared cores read and a
//!     handshake frame may have been lost there (counted; the waiver is
//!     in the step's text) — and completes with its sha256 (its first request, sent before the
//!     server's handshake completes, is held by the owner and sent behind
//!     the handshake's last ACK: `held`/`released`; the total time is
//!     reported, not bounded);
//!     every management socket answers during the flood;
//! (3) the peak SYN-RECV count stayed within `LIMIT + SLACK` (and reached
//!     at least half the limit: the spoofed SYNs admitted under the limit
//!     do reach the server, so the count measures what it should), far
//!     below what hping3 sent; the server's kernel sent no syncookie (its
//!     backlog never filled); the members sent at least 1000 cookie
//!     SYN-ACKs between them; every download started while the class was
//!     at its limit (all but the baseline) was opened by the proxy
//!     (`syn_proxy.opened` grew by at least one over it); no
//!     `flow-table-full` drop.
//!
//! Needs root, curl and hping3 (scripts/setup.sh). A guard takes the bed
//! down on every exit path (with every process in its namespaces, hping3
//! and the server among them).

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use testbed::harness::{self, Background, Shape, Steps, TempDir, TestBed};
use testbed::{losses, sys};

const NODES: usize = 3;
const INSIDE: &str = "cfw-inside";
const OUTSIDE: &str = "cfw-outside";
/// The inside host, published to the outside by `PERMIT_RULE`: the server.
const PUBLISHED: &str = "198.18.10.2";
const PORT: u16 = 8080;
/// The rule's `max-embryonic`.
const LIMIT: u64 = 20;
/// What the server's SYN-RECV count may exceed `LIMIT` by. The limit is
/// held cluster-wide by estimate (docs/flood.md, "Connection limits"):
/// each of the places (workers over the members) admits at most
/// ceil(room / places) of what its view, up to two report intervals old,
/// leaves under the limit, and a view that has forgotten its own recent
/// admissions before the others' reports arrive admits again; and a real
/// client's proxied connection is an embryonic one at the server for the
/// moment between the proxy's SYN and its ACK (admitted past the limit).
/// Measured peaks: 19–26 in four runs (cluster-wide count up to 28, 40 %
/// over). Without the proxy the flood fills the server's 256 slots and
/// its kernel sends syncookies (asserted never to happen here).
const SLACK: u64 = LIMIT;
const BYTES: u64 = 1 << 20;
const FLOOD_SECS: u64 = 6;
/// The bound on a new connection's connect time, s (as in
/// `flood.rs`, `flood_kinds.rs`).
const CONNECT_BOUND: f64 = 1.0;
/// The server's listen backlog (`harness::HTTP_SERVER`).
const BACKLOG: u64 = 256;
const PERMIT_RULE: &str = "access-rules:\n  - name: published\n    action: permit\n    interface: outside\n    protocol: tcp\n    \
destination: 198.18.10.2/32\n    destination-port: 8080\n    limits:\n      max-embryonic: 20\n      syn-proxy: true\n";

/// Every member's `show stats`, and how long the slowest answer took.
fn all_stats(bed: &TestBed) -> Result<(Vec<Value>, Duration)> {
    let mut out = Vec::new();
    let mut slowest = Duration::ZERO;
    for k in 1..=NODES {
        let t = Instant::now();
        out.push(bed.show(k, "stats").with_context(|| format!("n{k}'s management socket"))?);
        slowest = slowest.max(t.elapsed());
    }
    Ok((out, slowest))
}

/// Counter `name` of `show stats` group `group` (`/syn_proxy`, `/drops`),
/// per member.
fn per_member(stats: &[Value], group: &str, name: &str) -> Vec<u64> {
    stats.iter().map(|s| s.pointer(group).and_then(|g| g[name].as_u64()).unwrap_or(0)).collect()
}

fn grown_by(before: &[Value], after: &[Value], group: &str, name: &str) -> Vec<u64> {
    per_member(after, group, name).into_iter().zip(per_member(before, group, name)).map(|(a, b)| a.saturating_sub(b)).collect()
}

/// `syn_proxy.opened` summed over the members.
fn opened(stats: &[Value]) -> u64 {
    per_member(stats, "/syn_proxy", "opened").iter().sum()
}

/// The server's SYN-RECV sockets on its port.
fn syn_recv() -> Result<u64> {
    let filter = format!("( sport = :{PORT} )");
    let out = sys::ns_run(INSIDE, "ss", &["-Htn", "state", "syn-recv", &filter])?;
    Ok(out.lines().filter(|l| !l.trim().is_empty()).count() as u64)
}

/// The server namespace's TcpExt counters of its listen queue:
/// (SyncookiesSent, ListenOverflows, ListenDrops).
fn listen_counters() -> Result<(u64, u64, u64)> {
    let text = sys::ns_run(INSIDE, "cat", &["/proc/net/netstat"])?;
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (lines.next().context("no TcpExt names")?, lines.next().context("no TcpExt values")?);
    let get = |key: &str| {
        names.split_whitespace().zip(values.split_whitespace()).find(|(n, _)| *n == key).and_then(|(_, v)| v.parse().ok()).unwrap_or(0)
    };
    Ok((get("SyncookiesSent"), get("ListenOverflows"), get("ListenDrops")))
}

/// One download from the outside host.
struct Got {
    tag: String,
    connect: f64,
    total: f64,
    /// `syn_proxy.opened` grew over it (summed over the members).
    opened: u64,
    /// The receive losses that grew on the members over it.
    lost: Vec<losses::Loss>,
}

/// A curl download of the served file to `dir/got-TAG.bin` from the
/// outside host, checked against `want`.
fn download(bed: &TestBed, dir: &Path, tag: &str, want: &str) -> Result<Got> {
    let before = all_stats(bed)?.0;
    let got = dir.join(format!("got-{tag}.bin"));
    let got_s = got.to_string_lossy().into_owned();
    let url = format!("http://{PUBLISHED}:{PORT}/random.bin");
    let out = sys::ns_run(OUTSIDE, "curl", &["-sS", "--fail", "--max-time", "30", "-o", &got_s, "-w", "%{time_connect} %{time_total}", &url])
        .with_context(|| format!("download {tag}"))?;
    let mut t = out.split_whitespace().map(str::parse::<f64>);
    let (connect, total) = match (t.next(), t.next()) {
        (Some(Ok(c)), Some(Ok(t))) => (c, t),
        _ => bail!("download {tag}: curl's times {out:?}"),
    };
    let sum = harness::sha256(&got)?;
    let _ = std::fs::remove_file(&got);
    ensure!(sum == want, "download {tag}: sha256 {sum}, served {want}");
    let after = all_stats(bed)?.0;
    let opened = opened(&after).saturating_sub(opened(&before));
    Ok(Got { tag: tag.to_string(), connect, total, opened, lost: losses::grown(&before, &after) })
}

fn times(gots: &[Got]) -> String {
    gots.iter()
        .map(|g| {
            format!(
                "{} {:.0}/{:.0} ms{}{}",
                g.tag,
                g.connect * 1e3,
                g.total * 1e3,
                if g.opened > 0 { " (proxied)" } else { "" },
                if g.lost.is_empty() {
                    String::new()
                } else {
                    format!(" (WAIVED: connect bound not applied, receive rings overran: {})", losses::listed(&g.lost))
                }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The control node publishes `PUBLISHED` with its limit (a reload of its
/// file with `PERMIT_RULE`) and every member runs the class.
fn publish(bed: &TestBed) -> Result<String> {
    let class = |k: usize| {
        bed.show(k, "limits").is_ok_and(|v| {
            v["classes"].as_array().into_iter().flatten().any(|c| {
                c["name"] == "published" && c["limits"]["max_embryonic"].as_u64() == Some(LIMIT) && c["limits"]["syn_proxy"] == Value::Bool(true)
            })
        })
    };
    let done = harness::publish_rule(bed, NODES, PERMIT_RULE, class)?;
    Ok(format!("{done}, with the class `published` (max-embryonic {LIMIT}, syn-proxy)"))
}

/// What the flood step saw.
struct Flooded {
    /// Every member's `show stats` before and after.
    before: Vec<Value>,
    after: Vec<Value>,
    /// The server's SYN-RECV count: peak, samples.
    peak: u64,
    samples: u32,
    /// The downloads during and after the flood.
    gots: Vec<Got>,
    /// hping3's summary line.
    sent: String,
    /// The slowest `show stats` during and after the flood.
    slowest: (Duration, Duration),
    /// The server's `listen_counters` before and after.
    listen: [(u64, u64, u64); 2],
}

/// The flood, the server's SYN backlog sampled every 200 ms, the
/// downloads during and after it (each's sha256 checked; the connect
/// bound is the caller's).
fn flood(bed: &TestBed, dir: &Path, want: &str) -> Result<Flooded> {
    let (before, _) = all_stats(bed)?;
    let listen0 = listen_counters()?;
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let ((peak, samples, sample_errors), r) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let (mut peak, mut samples, mut errors) = (0u64, 0u32, 0u32);
            while !stop.load(Ordering::Relaxed) {
                match syn_recv() {
                    Ok(n) => {
                        peak = peak.max(n);
                        samples += 1;
                    }
                    Err(_) => errors += 1,
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            (peak, samples, errors)
        });
        let r = flood_and_downloads(bed, dir, want, t0);
        stop.store(true, Ordering::Relaxed);
        (sampler.join().unwrap_or((0, 0, 0)), r)
    });
    let (gots, errs, during, sent, (after, slowest_after)) = r?;
    let listen1 = listen_counters()?;
    ensure!(samples >= 10, "only {samples} SYN-RECV samples ({sample_errors} failed)");
    ensure!(errs.is_empty(), "download(s) failed: {}; the others: {}", errs.join("; "), times(&gots));
    let slowest_during = during?.1;
    Ok(Flooded { before, after, peak, samples, gots, sent, slowest: (slowest_during, slowest_after), listen: [listen0, listen1] })
}

type Downloads = (Vec<Got>, Vec<String>, Result<(Vec<Value>, Duration)>, String, (Vec<Value>, Duration));

/// hping3 for `FLOOD_SECS`, downloads one after another from 1 s into it
/// until its end and one right after it; returns a second after the
/// flood (the sampler's last look): the downloads, their errors, the
/// members' stats during the flood, hping3's summary, the stats after.
fn flood_and_downloads(bed: &TestBed, dir: &Path, want: &str, t0: Instant) -> Result<Downloads> {
    let secs = FLOOD_SECS.to_string();
    let hping = sys::ns_command(OUTSIDE, "timeout")
        .args(["-s", "INT", &secs, "hping3", "-q", "-S", "--flood", "--rand-source", "-p", &PORT.to_string(), PUBLISHED])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("hping3")?;
    // Killed on an early return (the bed's guard stops the rest).
    let mut hping = harness::Children(vec![hping]);
    std::thread::sleep(Duration::from_millis(1000));
    let during = all_stats(bed).context("during the flood");
    let (mut gots, mut errs) = (Vec::new(), Vec::new());
    let mut i = 0;
    // The last may end after the flood.
    while t0.elapsed() < Duration::from_secs(FLOOD_SECS) - Duration::from_millis(500) {
        i += 1;
        match download(bed, dir, &format!("during{i}@{:.1}s", t0.elapsed().as_secs_f64()), want) {
            Ok(g) => gots.push(g),
            Err(e) => {
                errs.push(format!("{e:#}"));
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    let out = hping.0.pop().context("hping3 gone")?.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let sent = text
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .map(|l| l.trim().to_string())
        .with_context(|| format!("hping3 did not run: {}", text.trim()))?;
    let ended = t0.elapsed().as_secs_f64();
    match download(bed, dir, &format!("after@{ended:.1}s"), want) {
        Ok(g) => gots.push(g),
        Err(e) => errs.push(format!("{e:#}")),
    }
    std::thread::sleep(Duration::from_secs(FLOOD_SECS + 1).saturating_sub(t0.elapsed()).max(Duration::from_millis(1000)));
    let after = all_stats(bed).context("after the flood")?;
    Ok((gots, errs, during, sent, after))
}

#[test]
fn a_spoofed_syn_flood_from_outside_at_a_published_server_is_held_off_by_the_syn_proxy() {
    assert!(sys::is_root(), "the SYN proxy test bed test needs root (network namespaces, veths)");
    for tool in ["curl", "hping3", "ss"] {
        assert!(sys::have(tool), "{tool} is not installed (scripts/setup.sh installs it)");
    }
    let started = Instant::now();
    let shape = Shape { workers: harness::bed_workers(), ..Shape::default() };
    let bed = TestBed::up_with(NODES, "/tmp/cfw-testbed-syn-proxy", shape).expect("bed up");
    // The member set is final now: the SYN guard closes a window after.
    let guard_closes = Instant::now() + Duration::from_secs(dataplane::pipeline::DEFAULT_SYN_GUARD.as_secs() + 1);
    let run = bed.run_dir.clone();
    let www = TempDir::new(&run, "syn-proxy-www").expect("www");
    let want = harness::random_file(&www.0.join("random.bin"), BYTES).expect("served file");
    let mut server = Background::start(
        "HTTP server (backlog 256)",
        INSIDE,
        harness::python(),
        &["-c", harness::HTTP_SERVER, PUBLISHED, &PORT.to_string(), &www.0.to_string_lossy()],
        &run.join("syn-proxy-http.log"),
    )
    .expect("server");
    server.wait_listening(INSIDE, PORT, Duration::from_secs(10)).expect("server listening");
    let mut steps = Steps::default();

    // (0) the published server and its limit.
    let published = publish(&bed);
    let ok = published.is_ok();
    steps.step("(0) publish the inside server with max-embryonic and the SYN proxy", published);

    // (1) baseline.
    let baseline = (|| {
        ensure!(ok, "no limit running");
        let g = download(&bed, &www.0, "baseline", &want)?;
        let held = syn_recv()?;
        ensure!(g.connect < CONNECT_BOUND, "connected in {:.3} s (bound {CONNECT_BOUND} s)", g.connect);
        Ok((g, held))
    })();
    let base_ok = baseline.is_ok();
    steps.step(
        "(1) baseline download from outside; the server's SYN backlog",
        baseline.map(|(g, held)| format!("{}; sha256 matches; {held} SYN-RECV socket(s) at the server", times(&[g]))),
    );

    // (2) the flood, after the SYN guard. Within it (no wait) the test
    // failed once in CI on 2026-12-05: 1 of 8 downloads connected in
    // 1.02 s (one lost handshake packet) while a director query per SYN
    // loaded the CCL; 4 runs by hand passed. Until that is found, the
    // test waits the guard out (docs/flood.md).
    let now = Instant::now();
    if now < guard_closes {
        eprintln!("waiting {:.1} s for the SYN guard of the bed's formation to close", (guard_closes - now).as_secs_f64());
        std::thread::sleep(guard_closes - now);
    }
    let flooded = if base_ok { flood(&bed, &www.0, &want) } else { Err(anyhow::anyhow!("no baseline")) };
    let flooded = flooded.and_then(|f| {
        // The bound is the proxy's where no frame was lost before it: a
        // download during which a member's receive rings overran (the
        // flood offered more than the bed's 2 shared cores read) may have
        // lost a handshake frame there, counted; it must still complete.
        let slow = f.gots.iter().filter(|g| g.connect >= CONNECT_BOUND && g.lost.is_empty()).count();
        ensure!(f.gots.len() >= 2, "only {} download(s): {}", f.gots.len(), times(&f.gots));
        ensure!(slow == 0, "{slow} download(s) connected in {CONNECT_BOUND} s or more with no receive loss on any member: {}", times(&f.gots));
        Ok(f)
    });
    let mut checks = None;
    steps.step(
        "(2) downloads from outside during and right after a spoofed SYN flood at the published server",
        flooded.map(|f| {
            let text = format!(
                "hping3: {}; {} downloads, connect at most {:.0} ms, total at most {:.0} ms (each in step 3); \
                 management: slowest show stats {:.0} ms during, {:.0} ms after",
                f.sent,
                f.gots.len(),
                f.gots.iter().map(|g| g.connect).fold(0.0, f64::max) * 1e3,
                f.gots.iter().map(|g| g.total).fold(0.0, f64::max) * 1e3,
                f.slowest.0.as_secs_f64() * 1e3,
                f.slowest.1.as_secs_f64() * 1e3
            );
            checks = Some(f);
            text
        }),
    );

    // (3) the figures.
    steps.step(
        "(3) the server's SYN backlog held near the limit; cookies sent; the downloads proxied",
        (|| {
            let Some(Flooded { before, after, peak, samples, gots, sent, listen: [listen0, listen1], .. }) = checks else {
                bail!("no flood, or the downloads failed")
            };
            let cookies = grown_by(&before, &after, "/syn_proxy", "cookies_sent");
            let opened = grown_by(&before, &after, "/syn_proxy", "opened");
            let spliced = grown_by(&before, &after, "/syn_proxy", "spliced");
            let bad = grown_by(&before, &after, "/syn_proxy", "bad_cookies");
            let held = grown_by(&before, &after, "/syn_proxy", "held");
            let released = grown_by(&before, &after, "/syn_proxy", "released");
            let held_dropped = grown_by(&before, &after, "/syn_proxy", "held_dropped");
            let pending = grown_by(&before, &after, "/drops", "syn-proxy-pending");
            let cookie_drops = grown_by(&before, &after, "/drops", "syn-proxy-cookie");
            let full = grown_by(&before, &after, "/drops", "flow-table-full");
            let missed: u64 = after
                .iter()
                .zip(&before)
                .map(|(a, b)| {
                    a["ports"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .enumerate()
                        .map(|(i, p)| p["rx_missed"].as_u64().unwrap_or(0).saturating_sub(b["ports"][i]["rx_missed"].as_u64().unwrap_or(0)))
                        .sum::<u64>()
                })
                .sum();
            let sum = |v: &[u64]| v.iter().sum::<u64>();
            let class: Vec<String> = (1..=NODES)
                .map(|k| {
                    bed.show(k, "limits").map_or_else(
                        |e| format!("n{k} ?({e:#})"),
                        |v| {
                            let c = v["classes"].as_array().into_iter().flatten().find(|c| c["name"] == "published").cloned().unwrap_or_default();
                            format!("n{k} local {} estimate {}", c["local"]["embryonic"], c["estimate"]["embryonic"])
                        },
                    )
                })
                .collect();
            let hping_sent: Option<u64> = sent.split_whitespace().next().and_then(|n| n.parse().ok());
            let proxied = gots.iter().filter(|g| g.opened > 0).count();
            let figures = format!(
                "SUMMARY hping3 sent {} SYNs; the server's SYN-RECV peak {peak} over {samples} samples (limit {LIMIT}, \
                 slack {SLACK}, listen backlog {BACKLOG}); server kernel syncookies sent +{}, listen overflows +{}, \
                 listen drops +{}; cookies sent per member {cookies:?} (sum {}); opened {opened:?}, spliced {spliced:?}, \
                 bad cookies {bad:?}; early segments held {held:?}, released {released:?}, freed unsent \
                 {held_dropped:?}; drops syn-proxy-pending {pending:?}, syn-proxy-cookie {cookie_drops:?}, \
                 flow-table-full {full:?}; rx_missed +{missed}; class `published` embryonic after the flood: {}; \
                 downloads proxied {proxied} of {}, connect/total {}",
                hping_sent.map_or("?".into(), |n| n.to_string()),
                listen1.0.saturating_sub(listen0.0),
                listen1.1.saturating_sub(listen0.1),
                listen1.2.saturating_sub(listen0.2),
                sum(&cookies),
                class.join(", "),
                gots.len(),
                times(&gots),
            );
            ensure!(peak <= LIMIT + SLACK, "the server held {peak} SYN-RECV sockets, limit {LIMIT} + slack {SLACK}: {figures}");
            ensure!(peak >= LIMIT / 2, "the server held at most {peak} SYN-RECV sockets: the flood did not reach the limit? {figures}");
            if let Some(n) = hping_sent {
                ensure!(n >= 10 * BACKLOG, "hping3 sent only {n} SYNs: {figures}");
            }
            ensure!(listen1.0 == listen0.0, "the server's kernel sent syncookies (its backlog filled): {figures}");
            ensure!(sum(&cookies) >= 1000, "only {} cookie SYN-ACKs: {figures}", sum(&cookies));
            ensure!(proxied == gots.len(), "only {proxied} of {} downloads opened by the proxy: {figures}", gots.len());
            ensure!(sum(&opened) >= gots.len() as u64, "opened {opened:?} for {} proxied downloads: {figures}", gots.len());
            ensure!(sum(&spliced) >= gots.len() as u64, "spliced {spliced:?} for {} proxied downloads: {figures}", gots.len());
            ensure!(sum(&full) == 0, "flow-table-full drops {full:?}: {figures}");
            Ok(figures)
        })(),
    );
    server.stop();
    eprintln!("syn_proxy test: {:.1} s from the start to the bed's teardown", started.elapsed().as_secs_f64());
    steps.finish(&run, NODES);
}
