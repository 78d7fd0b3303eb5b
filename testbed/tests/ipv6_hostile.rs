//! A hostile IPv6 set, sent with scapy on the single-node test bed (issue
//! 16's evidence; `clusterfw-testbed up`, dual-stack: 2001:db8:1::/64
//! inside, 2001:db8:2::/64 outside). Every kind is sent from the outside
//! host, Ethernet-addressed to the node's outside port (the ND kinds to the
//! node's multicast groups on that link), towards the inside host, each
//! kind with its own IPv6 flow label (`0xcf6NN`) so that a capture can tell
//! them apart:
//!
//! | kind | what | counted as (`show stats` drops) |
//! |---|---|---|
//! | rh0 | a routing header of type 0, segments left 1 (RFC 5095) | `ipv6-routing-type0` |
//! | chain100 | 100 chained destination-options headers | `ipv6-malformed` (the walk's bound, 8) |
//! | hop-limit | hop limit 0, and hop limit 1 | `ttl-exceeded` (one each) |
//! | payload-long | a payload length beyond the frame | `ipv6-truncated` |
//! | payload-short | a payload length of 4, shorter than the UDP header it carries | `l4-truncated` |
//! | overlap | two middle fragments of one datagram, the second overlapping the first (RFC 5722) | `frag-overlap`: the fragment in hand; the reassembler's `reasm_drops` count both |
//! | tiny-first | a first fragment that cuts the TCP header after 8 bytes (RFC 7112: the first fragment must hold the whole header chain) | `frag-tiny-first` |
//! | ns-foreign | a neighbour solicitation to the node's solicited-node group for a target that is not the node's | `nd-invalid` (`ipv6.nd_invalid`) |
//! | na-unsolicited | an unsolicited neighbour advertisement for an unknown neighbour, to all nodes | `nd-consumed`, `ipv6.nd_ignored`; `show nd` learns nothing |
//!
//! Per kind the node's drop counter must rise by exactly what was sent
//! (`nd-consumed` by at least that: the outside host's own advertisements
//! land there too). Then:
//!
//! - a tcpdump on the inside host's interface (from the outside host's
//!   address, inbound) holds no frame with a hostile flow label — and it
//!   holds the control: a UDP datagram, sent by the same scapy way with
//!   its own label, answering a flow the inside host opened, which the node
//!   must pass (so an empty capture cannot pass the test);
//! - the node still forwards: a `curl -6` download inside → outside with
//!   its sha256, `ipv6.forwarded` rising.
//!
//! Fragments: until the node reassembles IPv6 (issue 16, in progress) it
//! drops every IPv6 fragment as `ipv6-fragment`, so the overlap and
//! tiny-first steps fail today with that reason in their message; their
//! assertions are written for the reassembler (`docs/fragments.md`:
//! overlaps discard the datagram, `frag-overlap`; a first fragment too
//! short for its L4 header, `frag-tiny-first`).
//!
//! All steps run even if one fails; the test then fails naming each failed
//! step. A guard runs `down` on every exit path, the capture is a
//! `Background` guard, and the bed lock keeps concurrent runs apart. Needs
//! root, tcpdump, curl and python3-scapy for /usr/bin/python3
//! (`scripts/setup.sh`).

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use testbed::harness::{self, Background, Steps, TempDir, TestBed};
use testbed::sys;
use testbed::topology::single_addr6;

const INSIDE: &str = "cfw-inside";
const OUTSIDE: &str = "cfw-outside";
const INSIDE6: &str = "2001:db8:1::2";
const OUTSIDE6: &str = "2001:db8:2::2";
/// Frames of each kind (datagrams for `overlap`: two fragments each;
/// pairs for `hop-limit`: one of each limit).
const COUNT: u64 = 4;
/// The control datagram's ports: the inside host opens the flow from
/// `CONTROL_PORT` to `CONTROL_PORT + 1` on the outside host.
const CONTROL_PORT: u16 = 40000;
const CONTROL_LABEL: u32 = 0xcf6ff;

/// The sender: `KIND COUNT LABEL IFACE NODE_MAC SRC DST NODE6`, Ethernet
/// frames out of IFACE; prints the frames it sent.
const SEND: &str = r#"
import sys
from scapy.all import (Ether, IPv6, IPv6ExtHdrRouting, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, UDP, TCP, Raw,
                       ICMPv6ND_NS, ICMPv6ND_NA, ICMPv6NDOptSrcLLAddr, ICMPv6NDOptDstLLAddr, sendp, get_if_hwaddr, conf,
                       in6_getnsma, inet_pton, inet_ntop, socket)
conf.verb = 0
kind, count, label, iface, node_mac, src, dst, node6 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3], 16), sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7], sys.argv[8]
mac = get_if_hwaddr(iface)
eth = Ether(src=mac, dst=node_mac)
udp = UDP(sport=33333, dport=9) / Raw(b"hostile!")
frames = []
for i in range(count):
    ip = IPv6(src=src, dst=dst, fl=label, hlim=64)
    if kind == "rh0":
        frames.append(eth / IPv6(src=src, dst=dst, fl=label) / IPv6ExtHdrRouting(type=0, segleft=1, addresses=[dst]) / udp)
    elif kind == "chain100":
        p = ip
        for _ in range(100):
            p = p / IPv6ExtHdrDestOpt()
        frames.append(eth / (p / udp))
    elif kind == "hop-limit":
        frames.append(eth / IPv6(src=src, dst=dst, fl=label, hlim=0) / udp)
        frames.append(eth / IPv6(src=src, dst=dst, fl=label, hlim=1) / udp)
    elif kind == "payload-long":
        frames.append(eth / IPv6(src=src, dst=dst, fl=label, plen=200) / udp)
    elif kind == "payload-short":
        frames.append(eth / IPv6(src=src, dst=dst, fl=label, plen=4) / udp)
    elif kind == "overlap":
        # Two middle fragments of one datagram: [8, 24), then [16, 32),
        # which overlaps it (neither is the last: no last-fragment rule
        # applies). No first fragment: nothing may ever leave.
        ident = 0xcf600 + i
        frames.append(eth / ip / IPv6ExtHdrFragment(nh=17, offset=1, m=1, id=ident) / Raw(b"A" * 16))
        frames.append(eth / ip / IPv6ExtHdrFragment(nh=17, offset=2, m=1, id=ident) / Raw(b"B" * 16))
    elif kind == "tiny-first":
        # A first fragment with 8 bytes of a TCP SYN's header (ports and
        # sequence number; the flags are in the next fragment).
        tcp = bytes(TCP(sport=33333, dport=22, flags="S", seq=1000 + i))[:8]
        frames.append(eth / ip / IPv6ExtHdrFragment(nh=6, offset=0, m=1, id=0xcf700 + i) / Raw(tcp))
    elif kind == "ns-foreign":
        group = inet_ntop(socket.AF_INET6, in6_getnsma(inet_pton(socket.AF_INET6, node6)))
        gmac = "33:33:" + ":".join("%02x" % b for b in inet_pton(socket.AF_INET6, group)[12:])
        frames.append(Ether(src=mac, dst=gmac) / IPv6(src=src, dst=group, fl=label, hlim=255)
                      / ICMPv6ND_NS(tgt="2001:db8:2::99") / ICMPv6NDOptSrcLLAddr(lladdr=mac))
    elif kind == "na-unsolicited":
        frames.append(Ether(src=mac, dst="33:33:00:00:00:01") / IPv6(src=src, dst="ff02::1", fl=label, hlim=255)
                      / ICMPv6ND_NA(tgt="2001:db8:2::77", R=0, S=0, O=1) / ICMPv6NDOptDstLLAddr(lladdr="02:00:00:00:02:77"))
    elif kind == "control":
        frames.append(eth / IPv6(src=src, dst=dst, fl=label) / UDP(sport=int(sys.argv[9]) + 1, dport=int(sys.argv[9])) / Raw(b"control"))
    else:
        sys.exit("unknown kind " + kind)
for f in frames:
    sendp(f, iface=iface)
print("%s: %d frames of %s bytes" % (kind, len(frames), sorted(set(len(bytes(f)) for f in frames))))
"#;

/// One kind: what to send and what the node must count.
struct Kind {
    name: &'static str,
    label: u32,
    /// Drop reasons that must rise by exactly `n` (per `COUNT` sent),
    /// or at least `n` where `at_least`.
    drops: &'static [(&'static str, u64, bool)],
    /// `show stats` `ipv6.*` counters that must rise by exactly `n`.
    ipv6: &'static [(&'static str, u64)],
    /// `fragments.reasm_drops.*` that must rise by exactly `n`.
    reasm: &'static [(&'static str, u64)],
}

const KINDS: &[Kind] = &[
    Kind { name: "rh0", label: 0xcf601, drops: &[("ipv6-routing-type0", 1, false)], ipv6: &[], reasm: &[] },
    Kind { name: "chain100", label: 0xcf602, drops: &[("ipv6-malformed", 1, false)], ipv6: &[], reasm: &[] },
    Kind { name: "hop-limit", label: 0xcf603, drops: &[("ttl-exceeded", 2, false)], ipv6: &[], reasm: &[] },
    Kind { name: "payload-long", label: 0xcf604, drops: &[("ipv6-truncated", 1, false)], ipv6: &[], reasm: &[] },
    Kind { name: "payload-short", label: 0xcf605, drops: &[("l4-truncated", 1, false)], ipv6: &[], reasm: &[] },
    Kind { name: "overlap", label: 0xcf606, drops: &[("frag-overlap", 1, false)], ipv6: &[], reasm: &[("frag-overlap", 2)] },
    Kind { name: "tiny-first", label: 0xcf607, drops: &[("frag-tiny-first", 1, false)], ipv6: &[], reasm: &[] },
    Kind { name: "ns-foreign", label: 0xcf608, drops: &[("nd-invalid", 1, false)], ipv6: &[("nd_invalid", 1)], reasm: &[] },
    Kind {
        name: "na-unsolicited",
        label: 0xcf609,
        drops: &[("nd-consumed", 1, true)],
        ipv6: &[("nd_ignored", 1)],
        reasm: &[],
    },
];

struct Ctx<'a> {
    bed: &'a TestBed,
    script: PathBuf,
    node_mac: String,
}

impl Ctx<'_> {
    fn stats(&self) -> Result<Value> {
        self.bed.show(1, "stats")
    }

    fn send(&self, kind: &str, label: u32, count: u64) -> Result<String> {
        let out = sys::run::<&str>(
            "timeout",
            &[
                "60",
                "ip",
                "netns",
                "exec",
                OUTSIDE,
                "/usr/bin/python3",
                &self.script.to_string_lossy(),
                kind,
                &count.to_string(),
                &format!("{label:x}"),
                "eth0",
                &self.node_mac,
                OUTSIDE6,
                INSIDE6,
                single_addr6::OUTSIDE_NODE,
                &CONTROL_PORT.to_string(),
            ],
        )
        .context("scapy sender (needs python3-scapy for /usr/bin/python3)")?;
        Ok(out.trim().to_string())
    }
}

/// Every non-zero drop reason of `stats`.
fn drops(stats: &Value) -> BTreeMap<String, u64> {
    stats["drops"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_u64().map(|n| (k.clone(), n)))
        .collect()
}

/// The reasons that moved from `before` to `after`, `reason +n`.
fn moved(before: &Value, after: &Value) -> String {
    let (b, a) = (drops(before), drops(after));
    let v: Vec<String> = a
        .iter()
        .filter_map(|(k, n)| {
            let d = n.saturating_sub(b.get(k).copied().unwrap_or(0));
            (d > 0).then(|| format!("{k} +{d}"))
        })
        .collect();
    if v.is_empty() {
        "no drop counter moved".into()
    } else {
        v.join(", ")
    }
}

fn count_at(v: &Value, path: &[&str]) -> u64 {
    path.iter().fold(v, |v, k| &v[*k]).as_u64().unwrap_or(0)
}

/// Send `k` and check the node counted it.
fn hostile(c: &Ctx, k: &Kind) -> Result<String> {
    let before = c.stats()?;
    let sent = c.send(k.name, k.label, COUNT)?;
    // Expected rises, as (what, path in show stats, want, at least).
    let mut want: Vec<(String, Vec<&str>, u64, bool)> = Vec::new();
    for (r, per, at_least) in k.drops {
        want.push((format!("drops {r}"), vec!["drops", r], per * COUNT, *at_least));
    }
    for (n, per) in k.ipv6 {
        want.push((format!("ipv6.{n}"), vec!["ipv6", n], per * COUNT, false));
    }
    for (r, per) in k.reasm {
        want.push((format!("fragments.reasm_drops.{r}"), vec!["fragments", "reasm_drops", r], per * COUNT, false));
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut after;
    loop {
        after = c.stats()?;
        let done = want.iter().all(|(_, p, n, _)| count_at(&after, p).saturating_sub(count_at(&before, p)) >= *n);
        if done || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // A moment more: a count beyond what was sent shows too.
    std::thread::sleep(Duration::from_millis(300));
    after = c.stats()?;
    let mut bad = Vec::new();
    let mut good = Vec::new();
    for (what, p, n, at_least) in &want {
        let d = count_at(&after, p).saturating_sub(count_at(&before, p));
        let ok = if *at_least { d >= *n } else { d == *n };
        let line = format!("{what} +{d} (want {}{n})", if *at_least { ">= " } else { "" });
        if ok {
            good.push(line);
        } else {
            bad.push(line);
        }
    }
    ensure!(bad.is_empty(), "sent {sent}; {}; every drop that moved: {}", bad.join(", "), moved(&before, &after));
    Ok(format!("sent {sent}; {}", good.join(", ")))
}

/// tcpdump on the inside host's interface: IPv6 from the outside host,
/// inbound, to a pcap.
fn start_capture(run_dir: &Path) -> Result<(Background, PathBuf)> {
    let pcap = run_dir.join("ipv6-hostile-inside.pcap");
    let _ = std::fs::remove_file(&pcap);
    let log = run_dir.join("ipv6-hostile-tcpdump.log");
    let filter = format!("ip6 and src host {OUTSIDE6}");
    let cap = Background::start(
        "tcpdump on the inside host",
        INSIDE,
        "tcpdump",
        // Immediate mode: without it a frame waits in the kernel's ring
        // for up to tcpdump's 1 s buffer timeout, and one that arrived
        // just before the stop is counted "received by filter" but never
        // written.
        &["-i", "eth0", "-Q", "in", "-nn", "-U", "--immediate-mode", "-w", &pcap.to_string_lossy(), &filter],
        &log,
    )?;
    harness::wait_log(&log, "listening on", "tcpdump")?;
    Ok((cap, pcap))
}

/// The flow labels of the captured frames (`tcpdump -v` prints
/// `flowlabel 0x…`), counted.
fn captured_labels(pcap: &Path) -> Result<BTreeMap<u32, usize>> {
    let out = sys::run::<&str>("tcpdump", &["-r", &pcap.to_string_lossy(), "-nn", "-v"])?;
    let mut m = BTreeMap::new();
    for l in out.lines() {
        if let Some(i) = l.find("flowlabel 0x") {
            let hex: String = l[i + 12..].chars().take_while(|c| c.is_ascii_hexdigit()).collect();
            if let Ok(v) = u32::from_str_radix(&hex, 16) {
                *m.entry(v).or_default() += 1;
            }
        }
    }
    Ok(m)
}

fn step_capture(c: &Ctx, cap: &mut Option<(Background, PathBuf)>) -> Result<String> {
    // The control: the inside host opens a UDP flow to the outside host;
    // its answer, sent the scapy way with a label of its own, must pass.
    let opener = format!(
        "import socket\ns = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\ns.bind(('{INSIDE6}', {CONTROL_PORT}))\n\
         s.sendto(b'open', ('{OUTSIDE6}', {}))\n",
        CONTROL_PORT + 1
    );
    sys::ns_run(INSIDE, harness::python(), &["-c", &opener])?;
    let sent = c.send("control", CONTROL_LABEL, 1)?;
    std::thread::sleep(Duration::from_millis(1000));
    let Some((mut proc, pcap)) = cap.take() else { bail!("no capture was started") };
    proc.stop();
    let labels = captured_labels(&pcap)?;
    let hostile: Vec<String> = KINDS
        .iter()
        .filter_map(|k| labels.get(&k.label).map(|n| format!("{} ({n} frames, label {:#x})", k.name, k.label)))
        .collect();
    ensure!(hostile.is_empty(), "hostile frames reached the inside host: {}", hostile.join(", "));
    let control = labels.get(&CONTROL_LABEL).copied().unwrap_or(0);
    ensure!(control >= 1, "the control datagram ({sent}) did not reach the inside host: the capture shows nothing (labels seen: {labels:x?})");
    let total: usize = labels.values().sum();
    Ok(format!(
        "{total} IPv6 frames from {OUTSIDE6} captured on the inside host, the control among them, none with a hostile label"
    ))
}

fn step_nd_learnt_nothing(c: &Ctx) -> Result<String> {
    let nd = c.bed.show(1, "nd")?;
    let rows = nd["nd"].as_array().cloned().unwrap_or_default();
    let ips: Vec<&str> = rows.iter().filter_map(|r| r["ip"].as_str()).collect();
    for foreign in ["2001:db8:2::77", "2001:db8:2::99"] {
        ensure!(!ips.contains(&foreign), "show nd lists {foreign}: {nd}");
    }
    // The hosts it talked to are there: `show nd` is not merely empty.
    for host in [INSIDE6, OUTSIDE6] {
        ensure!(ips.contains(&host), "show nd does not list {host}: {nd}");
    }
    Ok(format!("show nd: {ips:?}, none of the advertised or solicited foreign targets"))
}

fn step_still_forwards(c: &Ctx) -> Result<String> {
    let before = count_at(&c.stats()?, &["ipv6", "forwarded"]);
    let www = TempDir::new(&c.bed.run_dir, "ipv6-hostile-www")?;
    let want = harness::random_file(&www.0.join("random.bin"), 2 << 20)?;
    let _server = harness::http_server(&c.bed.run_dir, "ipv6-hostile", OUTSIDE, OUTSIDE6, 8086, &www.0)?;
    let got = www.0.join("got.bin");
    sys::ns_run(
        INSIDE,
        "curl",
        &["-6", "-g", "-sS", "--fail", "--max-time", "60", "-o", &got.to_string_lossy(), &format!("http://[{OUTSIDE6}]:8086/random.bin")],
    )?;
    let sum = harness::sha256(&got)?;
    ensure!(sum == want, "sha256 {sum}, served {want}");
    let after = count_at(&c.stats()?, &["ipv6", "forwarded"]);
    ensure!(after > before + 1000, "ipv6.forwarded {before} -> {after}: the download did not go through the node's IPv6 path");
    Ok(format!("2 MiB curl -6 download inside->outside, sha256 matches; ipv6.forwarded {before} -> {after}"))
}

/// The node's MAC on the outside link, from the outside host's
/// neighbour cache after a ping -6 of the node (which also checks that
/// the node answers over IPv6).
fn node_mac() -> Result<String> {
    sys::ns_run(OUTSIDE, "ping", &["-6", "-c", "2", "-W", "2", single_addr6::OUTSIDE_NODE])?;
    sys::ns_run(INSIDE, "ping", &["-6", "-c", "2", "-W", "2", OUTSIDE6])?;
    let out = sys::ip(OUTSIDE, &["-6", "neigh", "show", single_addr6::OUTSIDE_NODE, "dev", "eth0"])?;
    let mac = out.split_whitespace().skip_while(|w| *w != "lladdr").nth(1).map(str::to_string);
    mac.with_context(|| format!("the outside host has no MAC for {}: {out}", single_addr6::OUTSIDE_NODE))
}

#[test]
fn hostile_ipv6_is_dropped_counted_and_kept_out() {
    assert!(sys::is_root(), "the test bed test needs root (network namespaces, veths); run scripts/test.sh as root");
    let bed = TestBed::up_with(1, "/tmp/cfw-testbed-ipv6-hostile", harness::Shape::default()).expect("test bed up");
    let node_mac = node_mac().expect("the node's MAC on the outside link");
    let script = bed.run_dir.join("ipv6-hostile-send.py");
    std::fs::write(&script, SEND).expect("sender script");
    let c = Ctx { bed: &bed, script, node_mac };
    eprintln!("node n1's outside MAC {}", c.node_mac);
    let mut steps = Steps::default();
    let mut cap = match start_capture(&bed.run_dir) {
        Ok(cap) => Some(cap),
        Err(e) => {
            steps.step("capture on the inside host", Err(e));
            None
        }
    };
    for k in KINDS {
        steps.step(&format!("{} dropped and counted", k.name), hostile(&c, k));
    }
    steps.step("nothing hostile reached the inside host (the control did)", step_capture(&c, &mut cap));
    steps.step("the neighbour cache learnt nothing from the hostile ND", step_nd_learnt_nothing(&c));
    steps.step("the node still forwards IPv6", step_still_forwards(&c));
    if let Ok(s) = c.stats() {
        eprintln!("node drops after the set: {:?}", drops(&s));
        eprintln!("node ipv6: {}", s["ipv6"]);
        eprintln!("node fragments: {}", s["fragments"]);
    }
    steps.finish(&bed.run_dir, 1);
}
