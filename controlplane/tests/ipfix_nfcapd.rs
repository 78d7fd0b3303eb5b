//! The IPFIX encoder against a real collector: Debian's `nfdump` package
//! (`nfcapd` collects, `nfdump` reads its file back). A few ended
//! connections go through `IpfixEncoder`, out of a UDP socket to an
//! `nfcapd` on 127.0.0.1; `nfcapd` is stopped with SIGTERM (which writes
//! its file), and `nfdump -o csv` must list every exported direction with
//! exactly the addresses, ports, protocol, packets, bytes, interfaces,
//! TCP flags and times sent — and nothing else (no empty direction, no
//! built or denied connection); `nfcapd`'s own tally must count no
//! sequence error and no bad packet. Linux only (readiness is read from
//! `/proc/net/udp`).
//!
//! Without `nfcapd`/`nfdump` the test fails (scripts/setup.sh installs
//! them): a collector that nobody runs is a collector nobody checks.
//! `nfcapd` is killed and its directory removed whatever happens (`Drop`).

use controlplane::ipfix::IpfixEncoder;
use dataplane::conntrack::flowlog::{RuleRef, UNKNOWN_IF};
use dataplane::conntrack::{tcp_flags, EndReason, FlowEvent, FlowNat, FlowRecord};
use dataplane::route::IfIndex;
use dataplane::{FiveTuple, Timestamp};
use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::ErrorKind;
use std::net::{IpAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const WAIT: Duration = Duration::from_secs(5);

/// A running `nfcapd` and its directory; both gone on drop.
struct Nfcapd {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for Nfcapd {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// `tool -V`, or a failure that says what to install.
fn require(tool: &str) -> String {
    match Command::new(tool).arg("-V").output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_string() + String::from_utf8_lossy(&out.stderr).trim(),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            panic!("`{tool}` is not installed: this test needs Debian's `nfdump` package (apt-get install nfdump; scripts/setup.sh installs it)")
        }
        Err(e) => panic!("cannot run `{tool} -V`: {e}"),
    }
}

/// The `/proc/net/udp` line of a socket bound to 127.0.0.1:`port`, if any.
fn proc_udp(port: u16) -> Option<String> {
    let want = format!("0100007F:{port:04X}");
    let table = fs::read_to_string("/proc/net/udp").ok()?;
    table.lines().find(|l| l.split_whitespace().nth(1) == Some(want.as_str())).map(str::to_string)
}

/// Bytes waiting in that socket's receive queue.
fn rx_queue(line: &str) -> Option<u64> {
    let queues = line.split_whitespace().nth(4)?; // tx_queue:rx_queue, hex
    u64::from_str_radix(queues.split(':').nth(1)?, 16).ok()
}

impl Nfcapd {
    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("nfcapd.log")).unwrap_or_default()
    }

    /// `nfcapd` listening on a free port of 127.0.0.1.
    fn start() -> Nfcapd {
        let stamp = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("clusterfw-ipfix-{}-{stamp}", std::process::id()));
        let flows = dir.join("flows");
        fs::create_dir_all(&flows).unwrap();
        let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = File::create(dir.join("nfcapd.log")).unwrap();
        let child = Command::new("nfcapd")
            .args(["-b", "127.0.0.1", "-p", &port.to_string(), "-w"])
            .arg(&flows)
            .args(["-t", "3600"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                let _ = fs::remove_dir_all(&dir);
                panic!("spawn nfcapd: {e}")
            });
        let mut n = Nfcapd { child, port, dir };
        let t0 = Instant::now();
        while proc_udp(port).is_none() {
            if let Ok(Some(status)) = n.child.try_wait() {
                panic!("nfcapd exited ({status}) before binding 127.0.0.1:{port}:\n{}", n.log());
            }
            assert!(t0.elapsed() < WAIT, "nfcapd did not bind 127.0.0.1:{port} within {WAIT:?}:\n{}", n.log());
            std::thread::sleep(Duration::from_millis(10));
        }
        n
    }

    /// Waits until `nfcapd` has read every datagram, stops it with
    /// SIGTERM (it writes its file) and returns that file.
    fn stop(&mut self) -> PathBuf {
        let t0 = Instant::now();
        while proc_udp(self.port).and_then(|l| rx_queue(&l)).is_some_and(|q| q > 0) {
            assert!(t0.elapsed() < WAIT, "nfcapd did not read its socket:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        }
        let ok = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().is_ok_and(|s| s.success());
        assert!(ok, "kill -TERM nfcapd");
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(t0.elapsed() < WAIT, "nfcapd did not stop on SIGTERM:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "nfcapd: {status}\n{}", self.log());
        let files: Vec<PathBuf> = fs::read_dir(self.dir.join("flows"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("nfcapd.") && !n.contains("current")))
            .collect();
        assert_eq!(files.len(), 1, "nfcapd's files: {files:?}\n{}", self.log());
        files.into_iter().next().unwrap()
    }
}

/// One row of `nfdump -o csv`, by the header's column names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Row {
    sa: IpAddr,
    da: IpAddr,
    sp: u16,
    dp: u16,
    pr: String,
    ipkt: u64,
    ibyt: u64,
    input: u32,
    output: u32,
    /// TCP flags, nfdump's spelling.
    flg: String,
    /// First and last packet (UTC, to the second) and duration.
    ts: String,
    te: String,
    td: String,
}

fn nfdump_rows(file: &Path) -> (Vec<Row>, String) {
    let out = Command::new("nfdump").arg("-r").arg(file).args(["-o", "csv", "-N"]).env("TZ", "UTC").output().expect("run nfdump");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "nfdump: {}\n{text}{}", out.status, String::from_utf8_lossy(&out.stderr));
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no column {name} in nfdump's csv:\n{text}"));
    let c = [
        col("sa"),
        col("da"),
        col("sp"),
        col("dp"),
        col("pr"),
        col("ipkt"),
        col("ibyt"),
        col("in"),
        col("out"),
        col("flg"),
        col("ts"),
        col("te"),
        col("td"),
    ];
    let rows = lines
        .take_while(|l| !l.starts_with("Summary"))
        .map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            let get = |i: usize| f.get(c[i]).copied().unwrap_or_else(|| panic!("short row {l:?}"));
            let num = |i: usize| get(i).parse::<u64>().unwrap_or_else(|e| panic!("{}: {e} in {l:?}", header[c[i]]));
            Row {
                sa: get(0).parse().unwrap_or_else(|e| panic!("sa: {e} in {l:?}")),
                da: get(1).parse().unwrap_or_else(|e| panic!("da: {e} in {l:?}")),
                sp: num(2) as u16,
                dp: num(3) as u16,
                pr: get(4).to_string(),
                ipkt: num(5),
                ibyt: num(6),
                input: num(7) as u32,
                output: num(8) as u32,
                flg: get(9).to_string(),
                ts: get(10).to_string(),
                te: get(11).to_string(),
                td: get(12).to_string(),
            }
        })
        .collect();
    (rows, text)
}

#[allow(clippy::too_many_arguments)]
fn record(
    event: FlowEvent,
    src: &str,
    dst: &str,
    proto: u8,
    ports: (u16, u16),
    packets: [u64; 2],
    bytes: [u64; 2],
    ifs: (IfIndex, IfIndex),
) -> FlowRecord {
    FlowRecord {
        event,
        tuple: FiveTuple { src: src.parse().unwrap(), dst: dst.parse().unwrap(), proto, src_port: ports.0, dst_port: ports.1 },
        start: Timestamp::from_millis(100_250),
        last: Timestamp::from_millis(104_750),
        packets,
        bytes,
        reported_packets: [0; 2],
        reported_bytes: [0; 2],
        tcp_flags: if proto == 6 { tcp_flags::SYN | tcp_flags::ACK | tcp_flags::FIN } else { 0 },
        ingress: ifs.0,
        egress: ifs.1,
        rule: RuleRef::Rule(3),
        adopted: false,
        mark: 0,
        nat: None,
    }
}

/// `nfdump -o fmt:` of every row: (source, destination) as it arrived →
/// its translation (nfdump's NSEL xlate fields, RFC 8158's post-NAT
/// elements), as text.
fn nfdump_xlates(file: &Path) -> BTreeSet<(String, String)> {
    let fmt = "fmt:%sa|%sp|%da|%dp|%xsa|%xsp|%xda|%xdp";
    let out = Command::new("nfdump").arg("-r").arg(file).args(["-o", fmt, "-q", "-N"]).env("TZ", "UTC").output().expect("run nfdump");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "nfdump: {}\n{text}{}", out.status, String::from_utf8_lossy(&out.stderr));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('|').map(str::trim).collect();
            assert_eq!(f.len(), 8, "{l:?}");
            (format!("{}:{} > {}:{}", f[0], f[1], f[2], f[3]), format!("{}:{} > {}:{}", f[4], f[5], f[6], f[7]))
        })
        .collect()
}

#[test]
fn nfdump_reads_what_the_encoder_sends() {
    let version = require("nfdump");
    require("nfcapd");
    let (if0, if1) = (IfIndex(0), IfIndex(1));
    let fin = FlowEvent::Ended(EndReason::Fin);
    let idle = FlowEvent::Ended(EndReason::Idle);
    let records = [
        record(fin, "198.18.10.2", "198.18.20.2", 6, (40000, 80), [10, 12], [1000, 20000], (if0, if1)),
        record(idle, "198.18.10.3", "198.18.20.53", 17, (5353, 53), [2, 1], [150, 300], (if0, if1)),
        record(idle, "198.18.10.4", "198.18.20.4", 17, (123, 123), [3, 0], [228, 0], (if0, UNKNOWN_IF)),
        record(fin, "2001:db8:10::2", "2001:db8:20::2", 6, (41000, 443), [7, 9], [700, 9000], (if1, if0)),
        // Outbound PAT: 198.18.10.5:40001 left as 198.18.20.100:1024.
        FlowRecord {
            nat: Some(FlowNat { src: "198.18.20.100".parse().unwrap(), src_port: 1024, dst: "198.18.20.2".parse().unwrap(), dst_port: 80 }),
            ..record(fin, "198.18.10.5", "198.18.20.2", 6, (40001, 80), [4, 5], [400, 5000], (if0, if1))
        },
        // In to a static rule's mapped address 198.18.20.50:8053, real
        // 198.18.10.53:53.
        FlowRecord {
            nat: Some(FlowNat { src: "198.18.20.7".parse().unwrap(), src_port: 7777, dst: "198.18.20.50".parse().unwrap(), dst_port: 8053 }),
            ..record(idle, "198.18.20.7", "198.18.10.53", 17, (7777, 53), [1, 1], [80, 120], (if1, if0))
        },
        // Not flows for IPFIX: must not show up.
        record(FlowEvent::Built, "198.18.10.9", "198.18.20.9", 6, (1, 2), [1, 0], [60, 0], (if0, if1)),
        record(FlowEvent::Denied, "198.18.10.9", "198.18.20.9", 6, (3, 4), [1, 0], [60, 0], (if0, if1)),
    ];
    let row = |sa: &str, da: &str, sp, dp, pr: &str, ipkt, ibyt, input, output| Row {
        flg: if pr == "TCP" { "...A..SF" } else { "........" }.into(),
        ts: "2023-11-14 22:15:00".into(),
        te: "2023-11-14 22:15:04".into(),
        td: "4.500".into(),
        sa: sa.parse().unwrap(),
        da: da.parse().unwrap(),
        sp,
        dp,
        pr: pr.into(),
        ipkt,
        ibyt,
        input,
        output,
    };
    let want: BTreeSet<Row> = [
        row("198.18.10.2", "198.18.20.2", 40000, 80, "TCP", 10, 1000, 1, 2),
        row("198.18.20.2", "198.18.10.2", 80, 40000, "TCP", 12, 20000, 2, 1),
        row("198.18.10.3", "198.18.20.53", 5353, 53, "UDP", 2, 150, 1, 2),
        row("198.18.20.53", "198.18.10.3", 53, 5353, "UDP", 1, 300, 2, 1),
        row("198.18.10.4", "198.18.20.4", 123, 123, "UDP", 3, 228, 1, 0),
        row("2001:db8:10::2", "2001:db8:20::2", 41000, 443, "TCP", 7, 700, 2, 1),
        row("2001:db8:20::2", "2001:db8:10::2", 443, 41000, "TCP", 9, 9000, 1, 2),
        // Translated: each direction as it arrived.
        row("198.18.10.5", "198.18.20.2", 40001, 80, "TCP", 4, 400, 1, 2),
        row("198.18.20.2", "198.18.20.100", 80, 1024, "TCP", 5, 5000, 2, 1),
        row("198.18.20.7", "198.18.20.50", 7777, 8053, "UDP", 1, 80, 2, 1),
        row("198.18.10.53", "198.18.20.7", 53, 7777, "UDP", 1, 120, 1, 2),
    ]
    .into_iter()
    .collect();

    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    // The node's clock started at 2023-11-14T22:13:20Z: its connections
    // ran from 22:15:00.250 to 22:15:04.750.
    let unix_ns_at_zero = 1_700_000_000 * 1_000_000_000;
    // Small messages, so the collector sees several and a data set of
    // each template without the templates in front.
    let mut enc = IpfixEncoder::new(42, 600, 300);
    for r in &records {
        enc.push(r, unix_ns_at_zero);
    }
    let mut msgs = Vec::new();
    enc.flush(now.as_secs() as u32, &mut msgs);
    assert!(msgs.len() > 2, "{} messages", msgs.len());

    let mut nfcapd = Nfcapd::start();
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    for m in &msgs {
        sock.send_to(m, ("127.0.0.1", nfcapd.port)).unwrap();
    }
    let file = nfcapd.stop();
    // Its closing line counts what it took: the sequence numbers checked
    // out (RFC 7011 §3.1: records before the message), nothing was bad.
    let log = nfcapd.log();
    let tally = log.lines().find(|l| l.contains("Sequence Errors")).unwrap_or_else(|| panic!("no tally in nfcapd's log:\n{log}"));
    eprintln!("nfcapd: {tally}");
    assert!(tally.contains("Flows: 11,") && tally.contains("Sequence Errors: 0,") && tally.contains("Bad Packets: 0"), "{log}");
    let (rows, text) = nfdump_rows(&file);
    eprintln!("{version}, {} messages from the encoder, nfdump -o csv:\n{text}", msgs.len());
    assert_eq!(rows.len(), want.len(), "one row per exported direction:\n{text}\nnfcapd:\n{}", nfcapd.log());
    let got: BTreeSet<Row> = rows.into_iter().collect();
    assert_eq!(got, want, "\n{text}");
    assert_eq!(enc.counters.records, want.len() as u64);
    // …and how each translated direction left (RFC 8158's post-NAT fields).
    let xlates = nfdump_xlates(&file);
    eprintln!("nfdump's xlate fields: {xlates:#?}");
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    for want in [
        pair("198.18.10.5:40001 > 198.18.20.2:80", "198.18.20.100:1024 > 198.18.20.2:80"),
        pair("198.18.20.2:80 > 198.18.20.100:1024", "198.18.20.2:80 > 198.18.10.5:40001"),
        pair("198.18.20.7:7777 > 198.18.20.50:8053", "198.18.20.7:7777 > 198.18.10.53:53"),
        pair("198.18.10.53:53 > 198.18.20.7:7777", "198.18.20.50:8053 > 198.18.20.7:7777"),
    ] {
        assert!(xlates.contains(&want), "{want:?} not in nfdump's rows: {xlates:#?}");
    }
    let untranslated: Vec<_> = xlates.iter().filter(|(_, x)| x != "0.0.0.0:0 > 0.0.0.0:0").collect();
    assert_eq!(untranslated.len(), 4, "only the translated rows carry xlate fields: {xlates:#?}");
}
