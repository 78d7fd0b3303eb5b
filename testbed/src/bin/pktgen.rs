//! `clusterfw-pktgen`: a DPDK traffic generator and TCP responder for
//! benchmarking clusterfw (or anything else) on any DPDK port.
//!
//! One thread on the main lcore runs the whole loop: allocate a burst,
//! fill it from prebuilt templates (patching the payload stamp), transmit,
//! then poll RX on every port it owns, answer ARP for its addresses and,
//! where it is the responder, TCP and UDP echo. Frame construction and
//! parsing live in `testbed::pktgen` and are tested without EAL.
//!
//! ```text
//! clusterfw-pktgen --mode udp --port net_af_packet0 --gateway 198.18.1.1 \
//!     --flows 1024 --size 64 --rate 0 --duration 10 --json \
//!     -- --no-huge -m 512 --no-pci -l 0 --vdev net_af_packet0,iface=veth0
//! ```
#![deny(unsafe_code)]

use anyhow::{bail, Context, Result};
use dpdk_sys::{eal, mempool, Burst, Mbuf, MbufBurst, Mempool, Port};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use testbed::pktgen::hist::Histogram;
use testbed::pktgen::packet::{self, Endpoints, Parsed, Stamp};
use testbed::pktgen::packet6::{self, Endpoints6, Parsed6};
use testbed::pktgen::report::{Counters, Latency, Report};
use testbed::pktgen::responder::{Answer, Responder};
use testbed::pktgen::tcpgen::{ClientConfig, Mode as TcpMode, TcpClient};

const USAGE: &str = "\
usage: clusterfw-pktgen [OPTIONS] [-- EAL-ARGS...]

  --mode M         udp | tcp | cps | frag | synflood | responder   (udp)
  --port NAME      DPDK port to send on (and receive on); default port 0
  --rx-port NAME   a second port to receive on; in tcp/cps it is the
                   responder side (one process drives both ends)
  --eal \"ARGS\"     EAL arguments as one string (or put them after --)
  --duration S     seconds of traffic (5; responder: 0 = until SIGINT)
  --rate PPS       packets per second to send, 0 = as fast as possible (0)
  --flows N        udp/frag/synflood: distinct flows; tcp/cps: concurrent
                   connections (1024)
  --size BYTES     Ethernet frame length without FCS, 60-1514 (64);
                   frag: UDP payload bytes of each datagram (3000)
  --frag-size B    frag: IP payload bytes per fragment (1480)
  --src-ip A       first source address (198.18.1.10)
  --dst-ip A       first destination address (198.18.2.10)
  --dst-ips N      destination addresses to spread flows over (1); the
                   receiving side answers ARP for all of them
  --sport P        first source port (1024)
  --rand-source    synflood: each flow from a random unicast address and
                   port (spoofed, as hping3 --rand-source), not from
                   --src-ip onwards
  --seed N         --rand-source: the seed of the sources (1)
  --dport P        destination port (udp 9, tcp 80)
  --dst-mac MAC    next hop's MAC (default: ARP for --gateway, else broadcast)
  --gateway IP     resolve --dst-mac by ARP for this address at start
  --ip IP          our address on --port, answered in ARP (default --src-ip)
  --rx-ip IP       our address on --rx-port (default --dst-ip)
  --echo           responder: send UDP datagrams back (round-trip latency)
  --ipv6           udp: the flows over IPv6 (UDP checksum set, stamped
                   frames at least 78 bytes); ND answered for --src-ip6 on
                   --port and --dst-ip6 (and --dst-ips after it) on --rx-port
  --src-ip6 A      IPv6 source (2001:db8:1::10)
  --dst-ip6 A      IPv6 destination (2001:db8:2::10); --dst-ips spreads
                   flows over the addresses after it
  --gateway6 IP    --ipv6: resolve --dst-mac by neighbour solicitation
  --burst N        packets per TX burst (32)
  --json           print the report as JSON on stdout";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Udp,
    Tcp,
    Cps,
    Frag,
    SynFlood,
    Responder,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Udp => "udp",
            Mode::Tcp => "tcp",
            Mode::Cps => "cps",
            Mode::Frag => "frag",
            Mode::SynFlood => "synflood",
            Mode::Responder => "responder",
        }
    }
}

struct Opts {
    mode: Mode,
    port: Option<String>,
    rx_port: Option<String>,
    eal: Vec<String>,
    duration: Option<f64>,
    rate: f64,
    flows: usize,
    size: Option<usize>,
    frag_size: usize,
    src_ip: Ipv4Addr,
    dst_ip: Ipv4Addr,
    dst_ips: u32,
    sport: u16,
    dport: Option<u16>,
    dst_mac: Option<[u8; 6]>,
    gateway: Option<Ipv4Addr>,
    ip: Option<Ipv4Addr>,
    rx_ip: Option<Ipv4Addr>,
    echo: bool,
    burst: usize,
    json: bool,
    /// synflood: where the SYNs come from (`--rand-source`, `--seed`).
    flood_source: packet::FloodSource,
    /// `--ipv6`: the udp flows over IPv6, from `src_ip6` to `dst_ip6`.
    ipv6: bool,
    src_ip6: Ipv6Addr,
    dst_ip6: Ipv6Addr,
    gateway6: Option<Ipv6Addr>,
}

fn parse_mac(s: &str) -> Result<[u8; 6]> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        bail!("MAC {s:?}: expected aa:bb:cc:dd:ee:ff");
    }
    let mut m = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        m[i] = u8::from_str_radix(p, 16).with_context(|| format!("MAC {s:?}"))?;
    }
    Ok(m)
}

fn parse_opts() -> Result<Opts> {
    let mut o = Opts {
        mode: Mode::Udp,
        port: None,
        rx_port: None,
        eal: Vec::new(),
        duration: None,
        rate: 0.0,
        flows: 1024,
        size: None,
        frag_size: 1480,
        src_ip: Ipv4Addr::new(198, 18, 1, 10),
        dst_ip: Ipv4Addr::new(198, 18, 2, 10),
        dst_ips: 1,
        sport: 1024,
        dport: None,
        dst_mac: None,
        gateway: None,
        ip: None,
        rx_ip: None,
        echo: false,
        burst: 32,
        json: false,
        flood_source: packet::FloodSource::Sequential,
        ipv6: false,
        src_ip6: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10),
        dst_ip6: Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0x10),
        gateway6: None,
    };
    let mut rand_source = false;
    let mut seed = 1u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().with_context(|| format!("{name} needs a value\n{USAGE}"));
        match a.as_str() {
            "--mode" => {
                o.mode = match val("--mode")?.as_str() {
                    "udp" => Mode::Udp,
                    "tcp" => Mode::Tcp,
                    "cps" => Mode::Cps,
                    "frag" => Mode::Frag,
                    "synflood" => Mode::SynFlood,
                    "responder" => Mode::Responder,
                    m => bail!("unknown mode {m:?}\n{USAGE}"),
                }
            }
            "--port" => o.port = Some(val(&a)?),
            "--rx-port" => o.rx_port = Some(val(&a)?),
            "--eal" => o.eal.extend(val(&a)?.split_whitespace().map(String::from)),
            "--duration" => o.duration = Some(val(&a)?.parse().context("--duration")?),
            "--rate" => o.rate = val(&a)?.parse().context("--rate")?,
            "--flows" => o.flows = val(&a)?.parse().context("--flows")?,
            "--size" => o.size = Some(val(&a)?.parse().context("--size")?),
            "--frag-size" => o.frag_size = val(&a)?.parse().context("--frag-size")?,
            "--src-ip" => o.src_ip = val(&a)?.parse().context("--src-ip")?,
            "--dst-ip" => o.dst_ip = val(&a)?.parse().context("--dst-ip")?,
            "--dst-ips" => o.dst_ips = val(&a)?.parse().context("--dst-ips")?,
            "--sport" => o.sport = val(&a)?.parse().context("--sport")?,
            "--dport" => o.dport = Some(val(&a)?.parse().context("--dport")?),
            "--dst-mac" => o.dst_mac = Some(parse_mac(&val(&a)?)?),
            "--gateway" => o.gateway = Some(val(&a)?.parse().context("--gateway")?),
            "--ip" => o.ip = Some(val(&a)?.parse().context("--ip")?),
            "--rx-ip" => o.rx_ip = Some(val(&a)?.parse().context("--rx-ip")?),
            "--echo" => o.echo = true,
            "--burst" => o.burst = val(&a)?.parse().context("--burst")?,
            "--json" => o.json = true,
            "--rand-source" => rand_source = true,
            "--seed" => seed = val(&a)?.parse().context("--seed")?,
            "--ipv6" => o.ipv6 = true,
            "--src-ip6" => o.src_ip6 = val(&a)?.parse().context("--src-ip6")?,
            "--dst-ip6" => o.dst_ip6 = val(&a)?.parse().context("--dst-ip6")?,
            "--gateway6" => o.gateway6 = Some(val(&a)?.parse().context("--gateway6")?),
            "--" => o.eal.extend(args.by_ref()),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unexpected argument {other:?}\n{USAGE}"),
        }
    }
    if o.flows == 0 {
        bail!("--flows must be at least 1");
    }
    if rand_source {
        if o.mode != Mode::SynFlood {
            bail!("--rand-source is for --mode synflood");
        }
        o.flood_source = packet::FloodSource::Random { seed };
    }
    if o.ipv6 && !matches!(o.mode, Mode::Udp | Mode::Responder) {
        bail!("--ipv6 is for --mode udp (and a responder answering neighbour discovery)");
    }
    o.burst = o.burst.clamp(1, dpdk_sys::BURST_SIZE);
    o.dst_ips = o.dst_ips.max(1);
    Ok(o)
}

/// Removes the DPDK runtime directory of our file prefix on exit.
struct PrefixDir(Option<std::path::PathBuf>);
impl Drop for PrefixDir {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn main() {
    match run() {
        Ok(()) => {}
        Err(e) => {
            eprintln!("clusterfw-pktgen: {e:#}");
            std::process::exit(1);
        }
    }
}

/// What a port does besides counting.
struct PortRole {
    port: Port,
    mac: [u8; 6],
    ip: Ipv4Addr,
    /// ARP is answered for `ip` and the `ip_count - 1` addresses after it.
    ip_count: u32,
    /// `--ipv6`: neighbour solicitations are answered for this address and
    /// the `ip_count - 1` after it.
    ip6: Option<Ipv6Addr>,
    /// Answers TCP/UDP as the responder.
    responder: Option<Responder>,
    replies: Burst,
}

fn run() -> Result<()> {
    let o = parse_opts()?;
    let mut eal_args = vec!["clusterfw-pktgen".to_string()];
    eal_args.extend(o.eal.iter().cloned());
    let mut prefix_dir = PrefixDir(None);
    if !eal_args.iter().any(|a| a == "--file-prefix" || a.starts_with("--file-prefix=")) {
        let prefix = format!("cfw-pktgen-{}", std::process::id());
        eal_args.push("--file-prefix".into());
        eal_args.push(prefix.clone());
        prefix_dir.0 = Some(std::path::Path::new("/var/run/dpdk").join(prefix));
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).context("signal handler")?;
    }
    let eal = eal::init(&eal_args).context("EAL init")?;
    let result = generate(&o, &stop);
    drop(eal);
    drop(prefix_dir);
    let report = result?;
    if o.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.text());
    }
    Ok(())
}

fn open_port(name: Option<&str>, pool: &Mempool) -> Result<Port> {
    let port = match name {
        Some(n) => Port::by_name(n).with_context(|| format!("port {n}"))?,
        None => *Port::all().first().context("no DPDK port (give --vdev or -a in the EAL arguments)")?,
    };
    port.configure(1, 1, 1024, 1024, pool, 0).with_context(|| format!("configuring {port}"))?;
    port.start().with_context(|| format!("starting {port}"))?;
    let _ = port.set_promiscuous(true);
    let _ = port.reset_stats();
    Ok(port)
}

/// What the TX side sends.
enum Source {
    /// Prebuilt frames, sent round-robin; `stamp_at` = stamp offset, if
    /// any; `udp6`: UDP/IPv6, whose checksum covers the stamp.
    Templates { frames: Vec<Vec<u8>>, next: usize, stamp_at: Option<usize>, frag_ident: bool, udp6: bool },
    Tcp(Box<TcpClient>, Vec<u8>),
    Nothing,
}

fn generate(o: &Opts, stop: &AtomicBool) -> Result<Report> {
    let pool = Mempool::new_pktmbuf("pktgen", 32767, 256, mempool::DEFAULT_DATA_ROOM, dpdk_sys::SOCKET_ID_ANY)
        .context("mbuf pool")?;
    let tx_port = open_port(o.port.as_deref(), &pool)?;
    let tx_mac = tx_port.mac_addr()?;
    let mut roles = vec![PortRole {
        port: tx_port,
        mac: tx_mac,
        ip: o.ip.unwrap_or(if o.mode == Mode::Responder { o.dst_ip } else { o.src_ip }),
        ip_count: if o.mode == Mode::Responder { o.dst_ips } else { 1 },
        ip6: o.ipv6.then_some(if o.mode == Mode::Responder { o.dst_ip6 } else { o.src_ip6 }),
        responder: None,
        replies: MbufBurst::new(),
    }];
    if o.mode == Mode::Responder {
        roles[0].responder = Some(Responder { mac: tx_mac, ip: roles[0].ip, ip_count: o.dst_ips, echo_udp: o.echo });
    }
    if let Some(rx) = &o.rx_port {
        let p = open_port(Some(rx), &pool)?;
        let mac = p.mac_addr()?;
        let ip = o.rx_ip.unwrap_or(o.dst_ip);
        let responder = matches!(o.mode, Mode::Tcp | Mode::Cps).then_some(Responder { mac, ip, ip_count: o.dst_ips, echo_udp: o.echo });
        let ip6 = o.ipv6.then_some(o.dst_ip6);
        roles.push(PortRole { port: p, mac, ip, ip_count: o.dst_ips, ip6, responder, replies: MbufBurst::new() });
    }
    let hz = eal::tsc_hz();
    let mut counters = Counters::default();

    // The next hop's MAC.
    let dst_mac = match (o.dst_mac, o.gateway) {
        (Some(m), _) => m,
        (None, _) if o.ipv6 && o.gateway6.is_some() && o.mode != Mode::Responder => {
            resolve6(&pool, &mut roles, o.gateway6.unwrap_or(o.dst_ip6), hz, &mut counters)?
        }
        (None, Some(gw)) if o.mode != Mode::Responder => resolve(&pool, &mut roles, gw, hz, &mut counters)?,
        _ => [0xff; 6],
    };
    let ep = Endpoints { src_mac: tx_mac, dst_mac, src: o.src_ip, dst: o.dst_ip };
    let flow_dst = |i: usize| Ipv4Addr::from(u32::from(o.dst_ip).wrapping_add((i as u32) % o.dst_ips));
    let flow_sport = |i: usize| o.sport.wrapping_add(((i / o.dst_ips as usize) % (65536 - o.sport as usize)) as u16);
    let udp_dport = o.dport.unwrap_or(9);
    let frame_len = o.size.unwrap_or(64);
    let ep6 = Endpoints6 { src_mac: tx_mac, dst_mac, src: o.src_ip6, dst: o.dst_ip6 };
    let flow_dst6 = |i: usize| Ipv6Addr::from(u128::from(o.dst_ip6).wrapping_add(u128::from((i as u32) % o.dst_ips)));
    let mut source = match o.mode {
        Mode::Udp if o.ipv6 => Source::Templates {
            frames: (0..o.flows)
                .map(|i| packet6::udp6_frame(&Endpoints6 { dst: flow_dst6(i), ..ep6 }, flow_sport(i), udp_dport, frame_len))
                .collect(),
            next: 0,
            stamp_at: Some(packet6::L4_OFFSET6 + 8),
            frag_ident: false,
            udp6: true,
        },
        Mode::Udp => Source::Templates {
            frames: (0..o.flows)
                .map(|i| packet::udp_frame(&Endpoints { dst: flow_dst(i), ..ep }, flow_sport(i), udp_dport, frame_len))
                .collect(),
            next: 0,
            stamp_at: Some(packet::L4_OFFSET + 8),
            frag_ident: false,
            udp6: false,
        },
        Mode::Frag => {
            let mut frames = Vec::new();
            for i in 0..o.flows {
                frames.extend(packet::udp_fragments(
                    &Endpoints { dst: flow_dst(i), ..ep },
                    flow_sport(i),
                    udp_dport,
                    i as u16,
                    o.size.unwrap_or(3000),
                    o.frag_size,
                    Stamp { seq: 0, tsc: 0 },
                ));
            }
            Source::Templates { frames, next: 0, stamp_at: Some(packet::L4_OFFSET + 8), frag_ident: true, udp6: false }
        }
        Mode::SynFlood => Source::Templates {
            frames: (0..o.flows)
                .map(|i| packet::syn_flood_frame(&Endpoints { dst: flow_dst(i), ..ep }, i, o.dport.unwrap_or(80), o.flood_source))
                .collect(),
            next: 0,
            stamp_at: None,
            frag_ident: false,
            udp6: false,
        },
        Mode::Tcp | Mode::Cps => Source::Tcp(
            Box::new(TcpClient::new(ClientConfig {
                ep,
                dport: o.dport.unwrap_or(80),
                base_sport: o.sport.max(1024),
                slots: o.flows,
                ndst: o.dst_ips,
                payload: packet::tcp_payload_for(frame_len),
                mode: if o.mode == Mode::Cps { TcpMode::Cps } else { TcpMode::Stream },
                timeout: hz,
            })),
            Vec::with_capacity(2048),
        ),
        Mode::Responder => Source::Nothing,
    };
    let report_len = match &source {
        Source::Templates { frames, .. } => frames.iter().map(Vec::len).max().unwrap_or(0),
        _ => packet::clamp_frame_len(frame_len, 20),
    };

    let duration = o.duration.unwrap_or(if o.mode == Mode::Responder { 0.0 } else { 5.0 });
    let start = eal::rdtsc();
    let end = if duration > 0.0 { start + (duration * hz as f64) as u64 } else { u64::MAX };
    let per_tick = o.rate / hz as f64;
    let mut hist = Histogram::new();
    let mut hs_hist = Histogram::new();
    let mut stamped_sent = 0u64;
    let mut seq = 0u32;
    let mut ident = 0u16;
    let mut tx: Burst = MbufBurst::new();
    let mut rx: Burst = MbufBurst::new();
    let mut scratch = Vec::with_capacity(2048);
    let mut draining_until = None;
    loop {
        let now = eal::rdtsc();
        if draining_until.is_none() && (now >= end || stop.load(Ordering::Relaxed)) {
            // Stop sending; receive what is still on its way for 100 ms.
            draining_until = Some(now + hz / 10);
        }
        if let Some(d) = draining_until {
            if now >= d {
                break;
            }
        }
        // TX.
        if draining_until.is_none() && !matches!(source, Source::Nothing) {
            let mut want = o.burst;
            if o.rate > 0.0 {
                let allowed = ((now - start) as f64 * per_tick) as u64;
                want = want.min(allowed.saturating_sub(counters.tx_packets + counters.tx_refused) as usize);
            }
            if want > 0 {
                fill(&mut source, &pool, &mut tx, want, now, &mut seq, &mut ident, &mut stamped_sent, &mut counters);
                let total: u64 = tx.iter().map(|m| m.len() as u64).sum();
                let sent = tx_port.tx_burst(0, &mut tx);
                let unsent: u64 = tx.iter().map(|m| m.len() as u64).sum();
                counters.tx_packets += sent as u64;
                counters.tx_bytes += total - unsent;
                counters.tx_refused += tx.len() as u64;
                tx.clear();
            }
        }
        // RX on every port.
        let mut got = 0;
        for role in roles.iter_mut() {
            let n = role.port.rx_burst(0, &mut rx);
            got += n;
            if n == 0 {
                continue;
            }
            let now = eal::rdtsc();
            for m in rx.drain() {
                let data = m.data();
                counters.rx_packets += 1;
                counters.rx_bytes += data.len() as u64;
                let parsed = packet::parse(data);
                match parsed {
                    Parsed::Arp { .. } => {
                        if let Some(r) = packet::arp_reply_range(data, role.mac, role.ip, role.ip_count) {
                            if let Some(mb) = pool.alloc_from_slice(&r) {
                                let _ = role.replies.push(mb);
                                counters.arp_replies_sent += 1;
                            }
                        }
                        continue;
                    }
                    Parsed::Udp { stamp: Some(s), .. } | Parsed::Tcp { stamp: Some(s), .. } => {
                        counters.rx_stamped += 1;
                        if s.tsc <= now && s.tsc >= start {
                            hist.record(now - s.tsc);
                        }
                    }
                    Parsed::Other if role.ip6.is_some() => match packet6::parse6(data) {
                        Parsed6::Nd { .. } => {
                            let first = role.ip6.unwrap_or(Ipv6Addr::UNSPECIFIED);
                            if let Some(r) = packet6::nd_answer(data, role.mac, first, role.ip_count) {
                                if let Some(mb) = pool.alloc_from_slice(&r) {
                                    let _ = role.replies.push(mb);
                                    counters.arp_replies_sent += 1;
                                }
                            }
                            continue;
                        }
                        Parsed6::Udp { stamp: Some(s), .. } => {
                            counters.rx_stamped += 1;
                            if s.tsc <= now && s.tsc >= start {
                                hist.record(now - s.tsc);
                            }
                        }
                        _ => {}
                    },
                    _ => {}
                }
                if let Some(resp) = &role.responder {
                    match resp.answer(data, &mut scratch) {
                        Answer::None | Answer::Arp => {}
                        _ => {
                            if let Some(mb) = pool.alloc_from_slice(&scratch) {
                                if role.replies.push(mb).is_ok() {
                                    counters.responder_replies += 1;
                                }
                            }
                        }
                    }
                    if role.replies.is_full() {
                        flush_replies(role, &mut counters);
                    }
                } else if let Source::Tcp(client, _) = &mut source {
                    if let Some(lat) = client.on_frame(&parsed, now) {
                        hs_hist.record(lat);
                    }
                }
                drop::<Mbuf>(m);
            }
            flush_replies(role, &mut counters);
        }
        if got == 0 && matches!(source, Source::Nothing) {
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    }
    let elapsed = (eal::rdtsc() - start) as f64 / hz as f64 - if duration > 0.0 { 0.1 } else { 0.0 };
    for role in &roles {
        if let Ok(s) = role.port.stats() {
            counters.rx_missed += s.imissed;
            counters.rx_nombuf += s.rx_nombuf;
        }
    }
    for role in &roles {
        let _ = role.port.stop();
        let _ = role.port.close();
    }
    let mut data_latency = None;
    let (tcp, latency) = match &source {
        Source::Tcp(c, _) => {
            data_latency = (hist.count() > 0).then(|| Latency::from_ticks("one-way", &hist, hz));
            (Some(c.stats), Some(Latency::from_ticks("handshake", &hs_hist, hz)))
        }
        _ => {
            let kind = if o.rx_port.is_some() { "one-way" } else { "round-trip" };
            (None, (hist.count() > 0).then(|| Latency::from_ticks(kind, &hist, hz)))
        }
    };
    let lost = (stamped_sent > 0 && counters.rx_stamped > 0).then(|| stamped_sent.saturating_sub(counters.rx_stamped));
    let mut report = Report {
        mode: o.mode.name().into(),
        duration_s: elapsed.max(1e-9),
        frame_len: report_len,
        flows: o.flows,
        counters,
        lost,
        tcp,
        latency,
        data_latency,
        ..Default::default()
    };
    report.compute_rates();
    Ok(report)
}

fn flush_replies(role: &mut PortRole, counters: &mut Counters) {
    if role.replies.is_empty() {
        return;
    }
    role.port.tx_burst(0, &mut role.replies);
    counters.tx_refused += role.replies.len() as u64;
    role.replies.clear();
}

#[allow(clippy::too_many_arguments)]
fn fill(
    source: &mut Source,
    pool: &Mempool,
    tx: &mut Burst,
    want: usize,
    now: u64,
    seq: &mut u32,
    ident: &mut u16,
    stamped_sent: &mut u64,
    counters: &mut Counters,
) {
    match source {
        Source::Templates { frames, next, stamp_at, frag_ident, udp6 } => {
            if !pool.alloc_bulk(tx, want) {
                counters.tx_nombuf += want as u64;
                return;
            }
            for m in tx.iter_mut() {
                let f = &frames[*next];
                *next += 1;
                if *next == frames.len() {
                    *next = 0;
                }
                let Some(buf) = m.append(f.len() as u16) else { continue };
                buf.copy_from_slice(f);
                if *frag_ident {
                    // A new datagram starts at each first fragment.
                    let first = u16::from_be_bytes([buf[20], buf[21]]) & 0x1fff == 0;
                    if first {
                        *ident = ident.wrapping_add(1);
                    }
                    let mut ip = dataplane::wire::ipv4::Ipv4Packet::new_unchecked(&mut buf[packet::L3_OFFSET..]);
                    ip.set_ident(*ident);
                    ip.fill_checksum();
                    if !first {
                        continue;
                    }
                }
                if let Some(at) = *stamp_at {
                    *seq = seq.wrapping_add(1);
                    let stamp = Stamp { seq: *seq, tsc: now };
                    if *udp6 {
                        packet6::stamp_udp6(buf, stamp);
                    } else {
                        stamp.write(&mut buf[at..]);
                    }
                    *stamped_sent += 1;
                }
            }
        }
        Source::Tcp(client, scratch) => {
            for _ in 0..want {
                if !client.next_frame(now, scratch) {
                    break;
                }
                let Some(m) = pool.alloc_from_slice(scratch) else {
                    counters.tx_nombuf += 1;
                    break;
                };
                let _ = tx.push(m);
            }
        }
        Source::Nothing => {}
    }
}

/// Neighbour solicitations for `gw` on the first port until it
/// advertises itself (3 s at most); solicitations for our own IPv6
/// address are answered meanwhile.
fn resolve6(pool: &Mempool, roles: &mut [PortRole], gw: Ipv6Addr, hz: u64, counters: &mut Counters) -> Result<[u8; 6]> {
    let role = &mut roles[0];
    let me = role.ip6.context("--gateway6 needs --ipv6")?;
    let ns = packet6::nd_solicit(role.mac, me, gw);
    let deadline = eal::rdtsc() + 3 * hz;
    let mut next_ns = 0;
    let mut rx: Burst = MbufBurst::new();
    while eal::rdtsc() < deadline {
        if eal::rdtsc() >= next_ns {
            if let Some(m) = pool.alloc_from_slice(&ns) {
                let _ = role.replies.push(m);
                flush_replies(role, counters);
            }
            next_ns = eal::rdtsc() + hz / 5;
        }
        role.port.rx_burst(0, &mut rx);
        for m in rx.drain() {
            let data = m.data();
            if let Some(mac) = packet6::nd_advertised(data, gw) {
                return Ok(mac);
            }
            if let Some(r) = packet6::nd_answer(data, role.mac, me, 1) {
                if let Some(mb) = pool.alloc_from_slice(&r) {
                    let _ = role.replies.push(mb);
                }
            }
        }
        flush_replies(role, counters);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    bail!("no neighbour advertisement from {gw} within 3 s (give --dst-mac)")
}

/// ARP for `gw` on the first port until it answers (3 s at most).
fn resolve(pool: &Mempool, roles: &mut [PortRole], gw: Ipv4Addr, hz: u64, counters: &mut Counters) -> Result<[u8; 6]> {
    let role = &mut roles[0];
    let req = packet::arp_request(role.mac, role.ip, gw);
    let deadline = eal::rdtsc() + 3 * hz;
    let mut next_req = 0;
    let mut rx: Burst = MbufBurst::new();
    while eal::rdtsc() < deadline {
        if eal::rdtsc() >= next_req {
            if let Some(m) = pool.alloc_from_slice(&req) {
                let _ = role.replies.push(m);
                flush_replies(role, counters);
            }
            next_req = eal::rdtsc() + hz / 5;
        }
        role.port.rx_burst(0, &mut rx);
        for m in rx.drain() {
            let data = m.data();
            if let Parsed::Arp { operation, sender_mac, sender_ip, .. } = packet::parse(data) {
                if operation == dataplane::wire::arp::Operation::Reply && sender_ip == gw {
                    return Ok(sender_mac);
                }
                if let Some(r) = packet::arp_reply(data, role.mac, role.ip) {
                    if let Some(mb) = pool.alloc_from_slice(&r) {
                        let _ = role.replies.push(mb);
                    }
                }
            }
        }
        flush_replies(role, counters);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    bail!("no ARP reply from {gw} within 3 s (give --dst-mac)")
}
