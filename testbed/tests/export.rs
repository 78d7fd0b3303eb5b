//! Syslog and IPFIX of the three-node test bed to real collectors (issue
//! 14, SPEC L3, L4): every bed node sends syslog to rsyslog over UDP
//! (`device-id: node`) and TCP (RFC 6587 octet counting, `device-id:
//! cluster`) and IPFIX to nfdump's `nfcapd`, all on the management segment
//! (`topology::MGMT_NAMESPACE`, 192.0.2.1; `nodeconf::cluster_syslog`).
//!
//! (a) three HTTP downloads through the cluster: each connection has
//!     exactly one `conn-built` and one `conn-teardown` per collector (from
//!     its owner, whichever node that is), the teardown's byte and packet
//!     counts the same over UDP and TCP, the bytes towards the client at
//!     least the file's size; the UDP messages carry the node's name as
//!     HOSTNAME, the TCP ones the cluster's; PRI is local4 (20);
//! (b) a SYN flood of 90 connection attempts from outside to the client
//!     (denied by the security levels): per node and second at most
//!     `deny-rate` (10) `conn-denied` messages, and the messages plus the
//!     counts of `conn-denied-suppressed` equal the connections the nodes
//!     denied (their flow logs' `denied`) exactly, at least 90 % of the
//!     SYNs sent;
//! (c) n3 killed and restarted: `cluster-leave` from the control node,
//!     `cluster-join` and `cluster-ready` for n3 when it is back;
//! (d) `nfdump` lists each download as two uniflows whose packets and
//!     bytes add up to the syslog teardown's; the first download, paced
//!     on the wire to outlive the bed's 1 s `active-timeout`, in several records.
//!
//! Needs root, curl, hping3, rsyslog and nfdump (scripts/setup.sh).
//! A guard takes the bed down on every exit path.

use anyhow::{bail, ensure, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use testbed::faults::{self, Fault};
use testbed::harness::{self, Background, Shape, Steps, TestBed};
use testbed::sys;
use testbed::topology::{cluster_addr as a, MGMT_NAMESPACE};

const NODES: usize = 3;
const INSIDE: &str = "cfw-inside";
const OUTSIDE: &str = "cfw-outside";
const SERVER: &str = "198.18.20.2";
const CLIENT: &str = "198.18.10.2";
const BYTES: u64 = 2 << 20;
const DOWNLOADS: usize = 3;
const SYNS: u64 = 90;
/// The bed's `logging.deny-rate` (the default).
const DENY_RATE: usize = 10;
/// Seconds the paced first download lasts on the wire.
const SLOW_SECS: &str = "3.5";


/// One received syslog message.
#[derive(Debug, Clone)]
struct Syslog {
    /// `imudp` or `imtcp`.
    input: String,
    pri: u16,
    /// Unix seconds of its timestamp.
    second: String,
    host: String,
    msgid: String,
    sd: BTreeMap<String, String>,
    text: String,
}

/// `<PRI>1 TS HOST APP PROCID MSGID [cfw@32473 k="v" ...] TEXT` (values
/// have no escaped characters here).
fn parse_line(line: &str) -> Result<Syslog> {
    let (input, raw) = line.split_once(' ').context("input name")?;
    let rest = raw.strip_prefix('<').context("PRI")?;
    let (pri, rest) = rest.split_once(">1 ").context("version")?;
    let mut f = rest.splitn(5, ' ');
    let (ts, host, _app, _pid) = (f.next().context("ts")?, f.next().context("host")?, f.next(), f.next());
    let rest = f.next().context("msgid")?;
    let (msgid, rest) = rest.split_once(' ').context("sd")?;
    let mut sd = BTreeMap::new();
    let text = if let Some(body) = rest.strip_prefix("[cfw@32473") {
        let (params, text) = body.split_once(']').context("sd end")?;
        for kv in params.split("\" ").map(str::trim) {
            if let Some((k, v)) = kv.split_once("=\"") {
                sd.insert(k.to_string(), v.trim_end_matches('"').to_string());
            }
        }
        text.trim().to_string()
    } else {
        rest.strip_prefix("- ").unwrap_or(rest).to_string()
    };
    Ok(Syslog {
        input: input.to_string(),
        pri: pri.parse()?,
        second: ts.get(..19).unwrap_or(ts).to_string(),
        host: host.to_string(),
        msgid: msgid.to_string(),
        sd,
        text,
    })
}

fn read_log(path: &Path) -> Result<Vec<Syslog>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| parse_line(l).with_context(|| format!("line {l:?}"))).collect()
}

fn rsyslog_conf(run: &Path, out: &Path) -> String {
    let c = a::COLLECTOR;
    let p = a::SYSLOG_PORT;
    format!(
        "global(workDirectory=\"{run}\")\n\
         module(load=\"imudp\")\n\
         module(load=\"imtcp\")\n\
         template(name=\"raw\" type=\"string\" string=\"%inputname% %rawmsg%\\n\")\n\
         ruleset(name=\"cfw\") {{ action(type=\"omfile\" file=\"{out}\" template=\"raw\" flushOnTXEnd=\"on\" asyncWriting=\"off\") }}\n\
         input(type=\"imudp\" address=\"{c}\" port=\"{p}\" ruleset=\"cfw\")\n\
         input(type=\"imtcp\" address=\"{c}\" port=\"{p}\" ruleset=\"cfw\")\n",
        run = run.display(),
        out = out.display(),
    )
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<bool>) -> Result<()> {
    let t0 = Instant::now();
    loop {
        if f()? {
            return Ok(());
        }
        if t0.elapsed() > timeout {
            bail!("{what}: not after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Connections node `k` refused by policy: its flow log's denied records.
/// (Not the `acl-denied` drops: a SYN the SYN guard held for the director
/// is denied when released and counted as a release drop instead.)
fn denied(bed: &TestBed, k: usize) -> Result<u64> {
    Ok(bed.show(k, "stats")?["flow_log"]["denied"].as_u64().unwrap_or(0))
}

/// Every node's drops by reason, added up.
fn drops(bed: &TestBed) -> Result<BTreeMap<String, u64>> {
    let mut m = BTreeMap::new();
    for k in 1..=NODES {
        for (r, n) in bed.show(k, "stats")?["drops"].as_object().into_iter().flatten() {
            *m.entry(r.clone()).or_default() += n.as_u64().unwrap_or(0);
        }
    }
    Ok(m)
}

/// nfdump's CSV rows as maps of its header's names.
fn nfdump_rows(dir: &Path) -> Result<Vec<BTreeMap<String, String>>> {
    // -N: plain numbers (no "2.1 M").
    let out = sys::run("nfdump", &["-R", &dir.to_string_lossy(), "-o", "csv", "-N"])?;
    let mut lines = out.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<String> = lines.next().context("nfdump printed nothing")?.split(',').map(str::to_string).collect();
    Ok(lines
        .filter(|l| l.contains(','))
        .map(|l| header.iter().cloned().zip(l.split(',').map(|v| v.trim().to_string())).collect())
        .collect())
}

#[test]
fn syslog_and_ipfix_reach_real_collectors() {
    assert!(sys::is_root(), "the export test bed test needs root (network namespaces, veths)");
    for tool in ["curl", "hping3", "rsyslogd", "nfcapd", "nfdump"] {
        assert!(sys::have(tool), "{tool} is not installed (scripts/setup.sh installs it)");
    }
    let shape = Shape { workers: harness::bed_workers(), ..Shape::default() };
    let bed = TestBed::up_with(NODES, "/tmp/cfw-testbed-export", shape).expect("bed up");
    let run = bed.run_dir.clone();
    let log = run.join("syslog.log");
    let _ = std::fs::remove_file(&log);
    let conf = run.join("rsyslog.conf");
    std::fs::write(&conf, rsyslog_conf(&run, &log)).expect("rsyslog.conf");
    let pid = run.join("rsyslog.pid").to_string_lossy().into_owned();
    let mut rsyslog = Background::start(
        "rsyslogd",
        MGMT_NAMESPACE,
        "rsyslogd",
        &["-n", "-f", &conf.to_string_lossy(), "-i", &pid],
        &run.join("rsyslogd.out"),
    )
    .expect("rsyslogd");
    rsyslog.wait_listening(MGMT_NAMESPACE, a::SYSLOG_PORT, Duration::from_secs(10)).expect("rsyslog listening");
    let flows: PathBuf = run.join("nfcapd");
    let _ = std::fs::remove_dir_all(&flows);
    std::fs::create_dir_all(&flows).expect("nfcapd dir");
    let mut nfcapd = Some(
        Background::start(
            "nfcapd",
            MGMT_NAMESPACE,
            "nfcapd",
            &["-b", a::COLLECTOR, "-p", &a::IPFIX_PORT.to_string(), "-w", &flows.to_string_lossy(), "-t", "3600"],
            &run.join("nfcapd.out"),
        )
        .expect("nfcapd"),
    );
    let mut steps = Steps::default();
    let mut step = |name: &str, r: Result<String>| steps.step(name, r);
    let (www, want, _server) = harness::served_file(&run, "export", OUTSIDE, SERVER, 8080, BYTES).expect("server");

    // A collector started after the exporters learns their templates at
    // the next refresh (`template-refresh`, 2 s on the bed; RFC 7011
    // §8.4): records before that are lost to it, as to any collector.
    std::thread::sleep(Duration::from_secs(3));
    // Every node's TCP collector connected (it retries every 2 s).
    let connected = wait_until("every node connected to the TCP collector", Duration::from_secs(10), || {
        Ok((1..=NODES).all(|k| bed.show(k, "stats").is_ok_and(|s| s["export"]["syslog_connects"].as_u64() >= Some(1))))
    });

    // (a) downloads, their client ports.
    let mut ports: Vec<u16> = Vec::new();
    let downloads = (|| {
        connected?;
        for i in 0..DOWNLOADS {
            let got = www.0.join(format!("got-{i}.bin")).to_string_lossy().into_owned();
            let url = format!("http://{SERVER}:8080/random.bin");
            // The first one paced (3.5 s on the wire), to outlive the
            // bed's 1 s active timeout: IPFIX reports it in intervals.
            let port = if i == 0 {
                sys::ns_run(INSIDE, harness::python(), &["-c", harness::PACED_GET, SERVER, "8080", "/random.bin", &got, SLOW_SECS])
            } else {
                sys::ns_run(INSIDE, "curl", &["-sS", "--fail", "--max-time", "60", "-o", &got, "-w", "%{local_port}", &url])
            }?;
            ports.push(port.lines().next().unwrap_or("").trim().parse().with_context(|| format!("curl's local port {port:?}"))?);
            let sum = harness::sha256(Path::new(&got))?;
            ensure!(sum == want, "download {i}: sha256 {sum}, served {want}");
        }
        Ok(())
    })();

    // (b) denied attempts, before the downloads' teardowns come (their
    // flows wait out tcp-closed, 10 s on the bed).
    let before: Result<Vec<u64>> = (1..=NODES).map(|k| denied(&bed, k)).collect();
    let drops_before = drops(&bed);
    // hping3 exits 1 when nothing answers (the point here).
    let flood = sys::ns_command(OUTSIDE, "hping3")
        .args(["-q", "-S", "-p", "22", "-c", &SYNS.to_string(), "-i", "u5000", CLIENT])
        .output()
        .map_err(anyhow::Error::from)
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
            ensure!(text.contains(&format!("{SYNS} packets transmitted")), "hping3: {text}");
            Ok(())
        });

    // Teardowns of the downloads in both collectors.
    let torn = downloads.and_then(|()| {
        wait_until("the downloads' teardowns in both collectors", Duration::from_secs(30), || {
            let l = read_log(&log)?;
            Ok(ports.iter().all(|p| {
                l.iter().filter(|m| m.msgid == "conn-teardown" && m.sd.get("sport") == Some(&p.to_string())).count() >= 2
            }))
        })
    });
    step(
        "(a) one built and one teardown per connection and collector, bytes and hosts right",
        (|| {
            torn?;
            let l = read_log(&log)?;
            let mut out = Vec::new();
            for p in &ports {
                let of = |id: &str, input: &str| -> Vec<&Syslog> {
                    l.iter().filter(|m| m.msgid == id && m.input == input && m.sd.get("sport") == Some(&p.to_string())).collect()
                };
                let mut counts = Vec::new();
                for input in ["imudp", "imtcp"] {
                    let (b, t) = (of("conn-built", input), of("conn-teardown", input));
                    ensure!(b.len() == 1 && t.len() == 1, "port {p} over {input}: {} built, {} teardown", b.len(), t.len());
                    let (b, t) = (b[0], t[0]);
                    let node = t.sd.get("node").cloned().unwrap_or_default();
                    ensure!(b.sd.get("node") == Some(&node), "port {p}: built by {:?}, torn down by {node}", b.sd.get("node"));
                    let host = if input == "imudp" { node.clone() } else { a::CLUSTER_NAME.to_string() };
                    ensure!(b.host == host && t.host == host, "port {p} over {input}: host {} / {}, want {host}", b.host, t.host);
                    ensure!(b.pri == 20 * 8 + 6 && t.pri == 20 * 8 + 6, "PRI {} {}", b.pri, t.pri);
                    ensure!(t.sd.get("dst").map(String::as_str) == Some(SERVER) && t.sd.get("dport").map(String::as_str) == Some("8080"), "{t:?}");
                    let n = |k: &str| t.sd.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                    counts.push((n("packets-out"), n("packets-in"), n("bytes-out"), n("bytes-in"), node, t.sd["reason"].clone()));
                }
                ensure!(counts[0] == counts[1], "port {p}: UDP and TCP teardowns differ: {counts:?}");
                let (po, pi, bo, bi, node, reason) = counts.swap_remove(0);
                ensure!(bi >= BYTES && bi <= BYTES + pi * 100, "port {p}: {bi} bytes in {pi} packets to the client for a {BYTES}-byte file");
                ensure!(po > 0 && bo > 0 && reason == "tcp-fins", "port {p}: out {po} packets {bo} bytes, reason {reason}");
                out.push(format!("port {p}: owner {node}, {po}/{pi} packets, {bo}/{bi} bytes, {reason}"));
            }
            Ok(out.join("; "))
        })(),
    );
    step(
        "(b) denied connections: at most deny-rate per node and second, the rest summarised, all accounted",
        (|| {
            flood?;
            let before = before?;
            let mut deltas = Vec::new();
            for (k, b) in (1..=NODES).zip(&before) {
                deltas.push(denied(&bed, k)? - b);
            }
            let total: u64 = deltas.iter().sum();
            if total < SYNS * 9 / 10 {
                let (a, b) = (drops_before?, drops(&bed)?);
                let moved: Vec<String> = b.iter().filter(|(r, n)| a.get(*r) != Some(n)).map(|(r, n)| format!("{r} +{}", n - a.get(r).unwrap_or(&0))).collect();
                bail!("denied records {deltas:?}, {SYNS} SYNs sent; drops that moved: {moved:?}");
            }
            // Summaries come once a second.
            let mut per_node: BTreeMap<String, (u64, u64)> = BTreeMap::new();
            wait_until("every denied attempt logged or summarised", Duration::from_secs(5), || {
                let l = read_log(&log)?;
                per_node.clear();
                for m in l.iter().filter(|m| m.input == "imudp" && m.sd.get("dport").map(String::as_str) != Some("8080")) {
                    let e = per_node.entry(m.host.clone()).or_default();
                    match m.msgid.as_str() {
                        "conn-denied" if m.sd.get("dport").map(String::as_str) == Some("22") => e.0 += 1,
                        "conn-denied-suppressed" => e.1 += m.sd.get("suppressed").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0),
                        _ => {}
                    }
                }
                Ok(per_node.values().map(|(a, b)| a + b).sum::<u64>() >= total)
            })?;
            let logged: u64 = per_node.values().map(|(a, b)| a + b).sum();
            ensure!(logged == total, "denied: {per_node:?} (messages, suppressed) against {total} denied records {deltas:?}");
            let l = read_log(&log)?;
            let mut per_second: BTreeMap<(String, String), usize> = BTreeMap::new();
            for m in l.iter().filter(|m| m.input == "imudp" && m.msgid == "conn-denied") {
                *per_second.entry((m.host.clone(), m.second.clone())).or_default() += 1;
                ensure!(m.sd.get("rule").map(String::as_str) == Some("security-level") && m.pri == 20 * 8 + 4, "{m:?}");
            }
            ensure!(per_second.values().all(|&n| n <= DENY_RATE), "more than {DENY_RATE} per node and second: {per_second:?}");
            let suppressed: u64 = per_node.values().map(|v| v.1).sum();
            ensure!(suppressed > 0, "nothing suppressed: {per_node:?}");
            Ok(format!("{total} connections denied {deltas:?} = (messages, suppressed) per node {per_node:?}"))
        })(),
    );
    step(
        "(c) a member killed and restarted: leave, join and ready in syslog",
        (|| {
            // The downloads' IPFIX records out first (sent once a second;
            // a killed node's unsent ones are lost with it).
            wait_until("the downloads' IPFIX records sent", Duration::from_secs(5), || {
                let sent: u64 = (1..=NODES)
                    .map(|k| bed.show(k, "stats").map(|s| s["export"]["ipfix_records"].as_u64().unwrap_or(0)))
                    .sum::<Result<u64>>()?;
                Ok(sent >= 2 * DOWNLOADS as u64)
            })?;
            let control = bed.show(1, "cluster")?["control_node"].as_u64().unwrap_or(0) as usize;
            let victim = (1..=NODES).rev().find(|&k| k != control).context("a data node")?;
            faults::apply(&bed.run_dir, &bed.bin_dir, &format!("n{victim}"), Fault::Kill)?;
            let name = format!("n{victim}");
            wait_until("the control node's cluster-leave", Duration::from_secs(10), || {
                Ok(read_log(&log)?.iter().any(|m| m.msgid == "cluster-leave" && m.text.contains(&name)))
            })?;
            faults::apply(&bed.run_dir, &bed.bin_dir, &name, Fault::Restart)?;
            wait_until("cluster-join and cluster-ready", Duration::from_secs(20), || {
                let l = read_log(&log)?;
                Ok(l.iter().any(|m| m.msgid == "cluster-join" && m.text.contains(&name))
                    && l.iter().any(|m| m.msgid == "cluster-ready" && m.input == "imudp" && m.host == name))
            })?;
            let l = read_log(&log)?;
            let ids: BTreeSet<&str> = l.iter().filter(|m| m.msgid.starts_with("cluster-")).map(|m| m.msgid.as_str()).collect();
            let leave = l.iter().find(|m| m.msgid == "cluster-leave").map(|m| format!("{} ({}): {}", m.host, m.input, m.text));
            Ok(format!("n{victim} killed and back; cluster MSGIDs seen {ids:?}; {}", leave.unwrap_or_default()))
        })(),
    );
    step(
        "(d) nfdump lists each download as two uniflows adding up to the teardown's counts",
        (|| {
            // SIGTERM makes nfcapd write its file out.
            drop(nfcapd.take());
            let rows = nfdump_rows(&flows)?;
            let l = read_log(&log)?;
            let mut out = Vec::new();
            for p in &ports {
                let t = l
                    .iter()
                    .find(|m| m.msgid == "conn-teardown" && m.input == "imudp" && m.sd.get("sport") == Some(&p.to_string()))
                    .context("teardown")?;
                let n = |k: &str| t.sd.get(k).cloned().unwrap_or_default();
                // (rows, packets, bytes) of one direction: its records'
                // deltas add up.
                let find = |sa: &str, sp: &str, da: &str, dp: &str| {
                    let mine: Vec<_> = rows
                        .iter()
                        .filter(|r| {
                            r.get("sa").map(String::as_str) == Some(sa)
                                && r.get("sp").map(String::as_str) == Some(sp)
                                && r.get("da").map(String::as_str) == Some(da)
                                && r.get("dp").map(String::as_str) == Some(dp)
                        })
                        .collect();
                    let sum = |k: &str| mine.iter().filter_map(|r| r.get(k)?.parse::<u64>().ok()).sum::<u64>();
                    (mine.len(), sum("ipkt").to_string(), sum("ibyt").to_string())
                };
                let ps = p.to_string();
                let orig = find(CLIENT, &ps, SERVER, "8080");
                let reply = find(SERVER, "8080", CLIENT, &ps);
                ensure!(
                    (&orig.1, &orig.2, &reply.1, &reply.2) == (&n("packets-out"), &n("bytes-out"), &n("packets-in"), &n("bytes-in")),
                    "port {p}: nfdump (records, packets, bytes) {orig:?} / {reply:?}, syslog {}/{} packets {}/{} bytes ({} rows)",
                    n("packets-out"),
                    n("packets-in"),
                    n("bytes-out"),
                    n("bytes-in"),
                    rows.len()
                );
                // The slow download outlived the active timeout.
                ensure!(*p != ports[0] || reply.0 >= 2, "port {p}: {} record(s) towards the client", reply.0);
                out.push(format!("{p}: {orig:?} {reply:?}"));
            }
            Ok(format!("{} rows; (records, packets, bytes) per download and direction {}", rows.len(), out.join(", ")))
        })(),
    );
    rsyslog.stop();
    steps.finish(&run, NODES);
}
