//! NAT on a node with several workers (issue 13, docs/nat.md): the workers
//! share one plan, each allocates from its own blocks and addresses, and
//! the driver steers return traffic to mapped (address, port) to the
//! worker holding the block (`steer::steer_nat`). Run against one
//! pipeline with the same rules:
//!
//! - the same random traffic (inside hosts behind PAT and dynamic NAT to
//!   outside servers over TCP, UDP and ICMP echo, the servers' replies to
//!   whatever mapped endpoint each node chose, the outside router's ICMP
//!   errors quoting the translated packets, outside clients through
//!   static PAT and static NAT, probes of unmapped pool ports, fragments
//!   to mapped addresses (translated at the worker of their block once
//!   the first arrived), time passing) leaves the same frames, once each
//!   outbound frame's mapped source is turned back into its real one (the
//!   mapped ports differ: each worker allocates from its own blocks);
//!   what reaches the inside is the same byte for byte;
//! - no frame leaves on the outside with an inside or DMZ source, no
//!   mapped (protocol, address, port) is bound twice at any instant over
//!   all the workers, PAT ports come from the pool's blocks, dynamic NAT
//!   keeps the port;
//! - after the run the same connections, the same drops by reason, the
//!   same translations counted in and out;
//! - the single pipeline with the fast path on (established translated
//!   flows handled there, `NatPath::fast`) and with it off agree on every
//!   frame, byte for byte, and on every counter, xlate and connection.

mod common;
mod frag_util;
mod workers_util;

use common::*;
use dataplane::conntrack::tcp_flags::{ACK, FIN, PSH, SYN};
use dataplane::nat::{Endpoint, RuleKind, RuleSpec as NatRule};
use dataplane::pipeline::{NatCounters, NatInbound, NatSpec, PatSpec, Pipeline, PipelineConfig, PoolSpec};
use dataplane::route::IfIndex;
use dataplane::wire::build::{ipv4_offset, PacketBuilder};
use dataplane::{DropReason, Duration, PortId, Timestamp, WorkerId};
use proptest::prelude::*;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use workers_util::{single, Out, Workers};

const PAT: [Ipv4Addr; 2] = [Ipv4Addr::new(192, 0, 2, 7), Ipv4Addr::new(192, 0, 2, 8)];
const DYN: [Ipv4Addr; 4] = [
    Ipv4Addr::new(192, 0, 2, 100),
    Ipv4Addr::new(192, 0, 2, 101),
    Ipv4Addr::new(192, 0, 2, 102),
    Ipv4Addr::new(192, 0, 2, 103),
];
const WEB_MAPPED: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 80);
const DB_MAPPED: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 200);
const ROUTER: Ipv4Addr = Ipv4Addr::new(93, 184, 216, 1);
/// Inside hosts; the second is translated by dynamic NAT, the others by PAT.
const HOSTS: [Ipv4Addr; 4] =
    [HOST, Ipv4Addr::new(198, 18, 1, 11), Ipv4Addr::new(198, 18, 1, 12), Ipv4Addr::new(198, 18, 1, 13)];
const DYN_HOST: usize = 1;
/// Outbound flows: `i` and `i + 8` share host and protocol and differ in
/// port and server. (Connections from one real endpoint that land on
/// different workers hold an xlate each, by design: per-session ones then
/// end at different times than one shared xlate would —
/// `a_shared_endpoint_holds_an_xlate_per_worker`.)
const FLOWS: usize = 16;
/// Outside clients of the static rules.
const CLIENTS: usize = 4;

fn host_mac(h: usize) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x01, 0x0a + h as u8]
}

fn cfg() -> PipelineConfig {
    let mut cfg = config();
    cfg.timeouts = short_timeouts();
    cfg.arp_timeout = Duration::from_secs(4 * 3600);
    cfg.icmp_errors.rate = 100_000;
    cfg.icmp_errors.burst = 100_000;
    cfg.static_neighbors = (0..HOSTS.len()).map(|h| (HOSTS[h], host_mac(h))).collect();
    cfg.static_neighbors.extend([(GW, GW_MAC), (DMZ_HOST, DMZ_HOST_MAC)]);
    cfg.rules.insert(
        0,
        dataplane::pipeline::RuleSpec {
            name: "db-in".into(),
            permit: true,
            interface: Some("outside".into()),
            protocol: Some(6),
            src: None,
            dst: Some((DMZ_HOST.into(), 32)),
            src_ports: (0, 65535),
            dst_ports: (5432, 5432),
        },
    );
    cfg
}

/// PAT of the inside /24 over two addresses in 512-port blocks, dynamic
/// NAT of host .11 over four addresses (first in rule order), static PAT
/// 192.0.2.80:8080 → HOST:80, static NAT DMZ_HOST ↔ 192.0.2.200.
fn spec() -> NatSpec {
    let rule = |kind, source| NatRule {
        kind,
        real_iface: Some(IfIndex(0)),
        mapped_iface: Some(IfIndex(1)),
        source,
        mapped: None,
        ports: None,
        pool: None,
        per_session: Default::default(),
    };
    NatSpec {
        rules: vec![
            NatRule { pool: Some(1), ..rule(RuleKind::DynamicNat, (HOSTS[DYN_HOST], 32)) },
            NatRule {
                mapped: Some((WEB_MAPPED, 32)),
                ports: Some((6, 80, 8080)),
                ..rule(RuleKind::StaticPat, (HOST, 32))
            },
            NatRule { pool: Some(0), ..rule(RuleKind::DynamicPat, (Ipv4Addr::new(198, 18, 1, 0), 24)) },
            NatRule {
                real_iface: None,
                mapped_iface: None,
                mapped: Some((DB_MAPPED, 32)),
                ..rule(RuleKind::StaticNat, (DMZ_HOST, 32))
            },
        ],
        pools: vec![
            PoolSpec {
                addresses: PAT.to_vec(),
                pat: Some(PatSpec { block_size: 512, reserved_ports: false, max_per_host: None }),
            },
            PoolSpec { addresses: DYN.to_vec(), pat: None },
        ],
        xlate_capacity: 4096,
        // Longer than any run: a mapped port is never reused for another
        // host here, so "bound twice" is checkable over the whole run.
        xlate_timeout: Duration::from_secs(24 * 3600),
        host_capacity: 64,
    }
}

/// (host index, protocol, client port or echo id, server) of flow `i`.
fn flow(i: usize) -> (usize, u8, u16, Ipv4Addr) {
    let k = i % 8;
    (k / 2, [6, 17, 1][k % 3], 40000 + i as u16, Ipv4Addr::new(93, 184, 216, 30 + (i / 8) as u8))
}

fn client(c: usize) -> (Ipv4Addr, u16) {
    (Ipv4Addr::new(93, 184, 216, 100 + c as u8), 50000 + c as u16)
}

#[derive(Clone, Debug)]
enum Op {
    /// Flow `flow`'s client (or, `reply`, its server) sends; TCP with
    /// `flags` and `len` bytes.
    Out {
        flow: usize,
        reply: bool,
        flags: u8,
        len: u8,
        rx: u8,
    },
    /// The outside router's "fragmentation needed" about the last packet
    /// flow `flow`'s client sent out.
    IcmpError {
        flow: usize,
        rx: u8,
    },
    /// Outside client `c` to the static PAT web server (`db`: the static
    /// NAT database) or, `reply`, the server back.
    StaticIn {
        c: usize,
        db: bool,
        reply: bool,
        flags: u8,
        rx: u8,
    },
    /// A probe of a PAT address's port below the blocks (never mapped).
    Probe {
        addr: usize,
        port: u16,
        udp: bool,
        rx: u8,
    },
    /// Flow `flow`'s server sends a fragmented reply (`len` bytes).
    Fragments {
        flow: usize,
        len: u16,
        rx: u8,
    },
    /// Outside client `c` sends the static NAT database a segment of `len`
    /// bytes cut into fragments, the first one last (`first_last`: held by
    /// the fragment worker, released to the flow's worker).
    StaticFragments {
        c: usize,
        len: u16,
        first_last: bool,
        rx: u8,
    },
    Tick {
        ms: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let flags = prop::sample::select(vec![SYN, SYN | ACK, ACK, ACK, ACK | PSH, ACK | PSH, FIN | ACK]);
    prop_oneof![
        12 => (0..FLOWS, any::<bool>(), flags.clone(), 0u8..=120, any::<u8>())
            .prop_map(|(flow, reply, flags, len, rx)| Op::Out { flow, reply, flags, len, rx }),
        1 => (0..FLOWS, any::<u8>()).prop_map(|(flow, rx)| Op::IcmpError { flow, rx }),
        4 => (0..CLIENTS, any::<bool>(), any::<bool>(), flags, any::<u8>())
            .prop_map(|(c, db, reply, flags, rx)| Op::StaticIn { c, db, reply, flags, rx }),
        1 => (0..PAT.len(), 1u16..1024, any::<bool>(), any::<u8>()).prop_map(|(addr, port, udp, rx)| Op::Probe { addr, port, udp, rx }),
        1 => (0..FLOWS, 100u16..400, any::<u8>()).prop_map(|(flow, len, rx)| Op::Fragments { flow, len, rx }),
        2 => (0..CLIENTS, 100u16..400, any::<bool>(), any::<u8>())
            .prop_map(|(c, len, first_last, rx)| Op::StaticFragments { c, len, first_last, rx }),
        2 => prop_oneof![0u32..2_000, 2_000u32..40_000].prop_map(|ms| Op::Tick { ms }),
    ]
}

/// What one node (one pipeline, or the workers) has shown of its
/// translations.
#[derive(Default)]
struct Seen {
    /// Flow → the mapped (address, port) its client's packets left with.
    mapped: HashMap<usize, (Ipv4Addr, u16)>,
    /// Flow → the last frame its client's packets left as.
    last_out: HashMap<usize, Vec<u8>>,
}

fn l3(f: &[u8]) -> &[u8] {
    &f[ipv4_offset(f).unwrap()..]
}
fn src(f: &[u8]) -> Ipv4Addr {
    let l = l3(f);
    Ipv4Addr::new(l[12], l[13], l[14], l[15])
}
/// The source port (echo id for ICMP) of an unfragmented datagram.
fn sport(f: &[u8]) -> u16 {
    let l = l3(f);
    let at = if l[9] == 1 { 24 } else { 20 };
    u16::from_be_bytes([l[at], l[at + 1]])
}

impl Seen {
    /// Check and undo the source translation of the frames `out` sent on
    /// the outside when flow `flow` (if any) sent one, learning its mapping.
    fn normalize(&mut self, mut out: Out, from: Option<usize>) -> Out {
        for (port, f) in &mut out {
            if *port != OUT_PORT || f.get(12..14) != Some(&[8, 0]) {
                continue;
            }
            let s = src(f);
            let inside = |a: Ipv4Addr| matches!(a.octets(), [198, 18, 1 | 3, _]);
            assert!(!inside(s), "an inside or DMZ source leaked: {s}");
            if !PAT.contains(&s) && !DYN.contains(&s) {
                continue;
            }
            let i = from.expect("a translated frame out answers a client's packet");
            let (h, _, cp, _) = flow(i);
            let ms = sport(f);
            if PAT.contains(&s) {
                assert!(h != DYN_HOST && ms >= 1024, "PAT from the blocks: {s}:{ms} for host {h}");
            } else {
                assert!(h == DYN_HOST && ms == cp, "dynamic NAT keeps the port: {s}:{ms}");
            }
            self.mapped.insert(i, (s, ms));
            self.last_out.insert(i, f.clone());
            let port = if PAT.contains(&s) { Some(cp) } else { None };
            let at = ipv4_offset(f).unwrap();
            dataplane::nat::rewrite(&mut f[at..], Endpoint::Source, HOSTS[h], port).unwrap();
        }
        out.sort();
        out
    }
}

struct Pair {
    one: Pipeline,
    /// `one` with the fast path off: every frame, its bytes out and all
    /// state must be the same as `one`'s (the fast path's NAT step does
    /// exactly what the general path's NAT steps do, or nothing).
    general: Pipeline,
    many: Workers,
    seen: (Seen, Seen),
    now: Timestamp,
    /// Fragments to the static NAT database that reached the DMZ.
    static_fragments: usize,
}

impl Pair {
    fn new(n: u16) -> Pair {
        let mut one = Pipeline::new(cfg()).unwrap();
        one.set_nat(&spec()).unwrap();
        let mut general = Pipeline::new(cfg()).unwrap();
        general.set_nat(&spec()).unwrap();
        general.set_fast_path(false);
        let many = Workers::with_nat(n, &cfg(), &spec());
        Pair { one, general, many, seen: Default::default(), now: Timestamp::from_secs(1), static_fragments: 0 }
    }

    /// The same frame to both; true if it went anywhere.
    fn send(&mut self, port: PortId, frame: &[u8], rx: u8, flow: Option<usize>) -> bool {
        self.send2(port, frame, frame, rx, flow) > 0
    }

    /// `a` to one pipeline, `b` to the workers (the same packet to each
    /// node's own mapped endpoint); how many frames went out.
    fn send2(&mut self, port: PortId, a: &[u8], b: &[u8], rx: u8, flow: Option<usize>) -> usize {
        let x = single(&mut self.one, self.now, port, a);
        assert_eq!(x, single(&mut self.general, self.now, port, a), "fast path against general path for {a:02x?}");
        let y = self.many.receive(self.now, port, b, usize::from(rx));
        let x = self.seen.0.normalize(x, flow);
        let y = self.seen.1.normalize(y, flow);
        assert_eq!(x, y, "frames out (translation undone) for {a:02x?}");
        self.one_binding_per_mapped_endpoint();
        x.len()
    }

    /// At every instant, over all the workers' xlates: no mapped
    /// (protocol, address, port) bound twice — the workers allocate from
    /// disjoint blocks and addresses.
    fn one_binding_per_mapped_endpoint(&self) {
        let mut seen = std::collections::HashMap::new();
        for (w, p) in self.many.w.iter().enumerate() {
            for x in p.xlates(self.now, 10_000) {
                if let Some((other, real)) = seen.insert((x.proto, x.mapped.clone()), (w, x.real.clone())) {
                    panic!(
                        "{} {} bound on worker {other} to {real} and on worker {w} to {}",
                        x.proto, x.mapped, x.real
                    );
                }
            }
        }
    }

    fn tick(&mut self, ms: u32) {
        self.now = Timestamp(self.now.nanos() + u64::from(ms) * 1_000_000);
        self.one.poll_timers(self.now);
        self.general.poll_timers(self.now);
        let mut x = vec![];
        self.one.drain_generated(|o, f| x.push((o, f.to_vec())));
        let mut g = vec![];
        self.general.drain_generated(|o, f| g.push((o, f.to_vec())));
        assert_eq!(x, g, "timers: fast path against general path");
        let y = self.many.tick(self.now);
        let (x, y) = (self.seen.0.normalize(x, None), self.seen.1.normalize(y, None));
        assert_eq!(x, y, "timers");
        self.one_binding_per_mapped_endpoint();
    }
}

fn drops(p: &Pipeline) -> Vec<u64> {
    let c = p.counters();
    DropReason::ALL.iter().map(|&r| c.drops[r.index()] + p.frag_release_drops(r)).collect()
}

/// Runs `ops` on one pipeline and `n` workers; returns the pair.
fn run(n: u16, ops: &[Op]) -> Pair {
    let mut pair = Pair::new(n);
    // Sequence numbers per flow (client, server), and per static client.
    let mut seq = [(1000u32, 5000u32); FLOWS + 2 * CLIENTS];
    // Each fragmented datagram its own identification (a repeated one
    // would meet the reassembler's record of the last).
    let mut ident = 77u16;
    for op in ops {
        match *op {
            Op::Out { flow: i, reply, flags, len, rx } => {
                let (h, proto, cp, server) = flow(i);
                let s = &mut seq[i];
                if flags == SYN && !reply {
                    s.0 = s.0.wrapping_add(100_000);
                }
                if flags == SYN | ACK && reply {
                    s.1 = s.1.wrapping_add(100_000);
                }
                let payload = vec![0x61u8; usize::from(len)];
                let opts: &[u8] = if flags & SYN != 0 { &SYN_OPTS } else { &[] };
                let (dp, ident) = (if proto == 6 { 80 } else { 53 }, cp);
                let went = if !reply {
                    let b = PacketBuilder::new(host_mac(h), IN_MAC, HOSTS[h], server);
                    let f = match proto {
                        6 => b.tcp(cp, dp, s.0, s.1, flags, 502, opts, &payload),
                        17 => b.udp(cp, dp, b"query"),
                        _ => b.icmp(8, 0, (ident, 1), b"ping"),
                    };
                    pair.send(IN_PORT, &f, rx, Some(i))
                } else {
                    let (Some(&ma), Some(&mb)) = (pair.seen.0.mapped.get(&i), pair.seen.1.mapped.get(&i)) else {
                        assert_eq!(pair.seen.0.mapped.get(&i), pair.seen.1.mapped.get(&i));
                        continue;
                    };
                    let frame = |(a, p): (Ipv4Addr, u16)| {
                        let b = from_outside(server, a);
                        match proto {
                            6 => b.tcp(dp, p, s.1, s.0, flags, 502, opts, &payload),
                            17 => b.udp(dp, p, b"answer"),
                            _ => b.icmp(0, 0, (p, 1), b"ping"),
                        }
                    };
                    pair.send2(OUT_PORT, &frame(ma), &frame(mb), rx, None) > 0
                };
                if went && proto == 6 {
                    let adv = u32::from(len) + u32::from(flags & (SYN | FIN) != 0);
                    let side = if reply { &mut seq[i].1 } else { &mut seq[i].0 };
                    *side = side.wrapping_add(adv);
                }
            }
            Op::IcmpError { flow: i, rx } => {
                let (Some(a), Some(b)) = (pair.seen.0.last_out.get(&i), pair.seen.1.last_out.get(&i)) else { continue };
                let err = |f: &[u8]| icmp_error_frame(f, GW_MAC, ROUTER, OUT_MAC, 3, 4, 1280);
                let (a, b) = (err(a), err(b));
                pair.send2(OUT_PORT, &a, &b, rx, None);
            }
            Op::StaticIn { c, db, reply, flags, rx } => {
                let (ca, cp) = client(c);
                let s = &mut seq[FLOWS + 2 * c + usize::from(db)];
                if flags == SYN && !reply {
                    s.0 = s.0.wrapping_add(100_000);
                }
                if flags == SYN | ACK && reply {
                    s.1 = s.1.wrapping_add(100_000);
                }
                let opts: &[u8] = if flags & SYN != 0 { &SYN_OPTS } else { &[] };
                let (frame, port) = match (db, reply) {
                    (false, false) => {
                        (from_outside(ca, WEB_MAPPED).tcp(cp, 8080, s.0, s.1, flags, 502, opts, b""), OUT_PORT)
                    }
                    (true, false) => {
                        (from_outside(ca, DB_MAPPED).tcp(cp, 5432, s.0, s.1, flags, 502, opts, b""), OUT_PORT)
                    }
                    (false, true) => (from_host(ca).tcp(80, cp, s.1, s.0, flags, 502, opts, b""), IN_PORT),
                    (true, true) => (from_dmz(ca).tcp(5432, cp, s.1, s.0, flags, 502, opts, b""), DMZ_PORT),
                };
                if pair.send(port, &frame, rx, None) {
                    let adv = u32::from(flags & (SYN | FIN) != 0);
                    let side = if reply { &mut s.1 } else { &mut s.0 };
                    *side = side.wrapping_add(adv);
                }
            }
            Op::Probe { addr, port, udp, rx } => {
                let b = from_outside(Ipv4Addr::new(93, 184, 216, 66), PAT[addr]);
                let f = if udp { b.udp(4444, port, b"probe") } else { b.tcp(4444, port, 1, 0, SYN, 1024, &[], b"") };
                assert!(!pair.send(OUT_PORT, &f, rx, None), "a probe of an unmapped port went through");
            }
            Op::Fragments { flow: i, len, rx } => {
                let (_, proto, _, server) = flow(i);
                // UDP fragments to a UDP flow's mapped endpoint (to another
                // class's, what they meet depends on each side's own
                // allocations).
                if proto != 17 {
                    continue;
                }
                let (Some(&ma), Some(&mb)) = (pair.seen.0.mapped.get(&i), pair.seen.1.mapped.get(&i)) else { continue };
                ident = ident.wrapping_add(1);
                let frags = |(a, p): (Ipv4Addr, u16)| {
                    let b = PacketBuilder { dont_frag: false, ident, ..from_outside(server, a) };
                    frag_util::fragments(&b.udp(53, p, &vec![0x63; usize::from(len)]), 64)
                };
                // Translated to the flow's real endpoint when it is a UDP
                // flow's mapped port (the fragments are UDP), at the worker
                // holding its block; dropped otherwise — the same frames
                // out of both (`send2`).
                for (k, (a, b)) in frags(ma).iter().zip(frags(mb)).enumerate() {
                    pair.send2(OUT_PORT, a, &b, rx.wrapping_add(k as u8), Some(i));
                }
            }
            Op::StaticFragments { c, len, first_last, rx } => {
                let (ca, cp) = client(c);
                let s = seq[FLOWS + 2 * c + 1];
                let b = PacketBuilder { dont_frag: false, ident: 99 + c as u16, ..from_outside(ca, DB_MAPPED) };
                let mut frags =
                    frag_util::fragments(&b.tcp(cp, 5432, s.0, s.1, ACK, 502, &[], &vec![0x64; usize::from(len)]), 64);
                if first_last {
                    frags.rotate_left(1);
                }
                let mut went = false;
                for (k, f) in frags.iter().enumerate() {
                    let through = pair.send2(OUT_PORT, f, f, rx.wrapping_add(k as u8), None);
                    pair.static_fragments += through;
                    went |= through > 0;
                }
                if went {
                    let side = &mut seq[FLOWS + 2 * c + 1].0;
                    *side = side.wrapping_add(u32::from(len));
                }
            }
            Op::Tick { ms } => pair.tick(ms),
        }
    }
    let (one, general, many, now) = (&pair.one, &pair.general, &pair.many.w, pair.now);
    // The fast path changed nothing the general path would not have.
    let (mut fc, gc) = (one.counters(), general.counters());
    assert_eq!(gc.fast_path, 0);
    fc.fast_path = 0;
    assert_eq!(fc, gc, "counters, fast path against general path");
    assert_eq!(one.nat_counters(), general.nat_counters());
    assert_eq!(format!("{:?}", one.xlates(now, 1000)), format!("{:?}", general.xlates(now, 1000)));
    assert_eq!(format!("{:?}", one.conns(now, 1000)), format!("{:?}", general.conns(now, 1000)));
    assert_eq!(one.nat_pools(), general.nat_pools());
    let mut a: Vec<String> = one.conns(now, 1000).iter().map(|c| format!("{c:?}")).collect();
    let mut b: Vec<String> = many.iter().flat_map(|p| p.conns(now, 1000)).map(|c| format!("{c:?}")).collect();
    a.sort();
    b.sort();
    assert_eq!(a, b, "connections (real tuples)");
    let mut d = vec![0; DropReason::COUNT];
    for p in many {
        for (x, y) in d.iter_mut().zip(drops(p)) {
            *x += y;
        }
    }
    assert_eq!(d, drops(one), "drops by reason");
    let mut c = NatCounters::default();
    for p in many {
        c += p.nat_counters().unwrap();
    }
    let o = one.nat_counters().unwrap();
    let key =
        |c: &NatCounters| (c.translated_out, c.translated_in, c.icmp_errors_in, c.no_xlate, c.fragments_in, c.exhausted);
    assert_eq!(key(&c), key(&o), "NAT counters: {c:?} / {o:?}");
    // Multi-session xlates are per worker: a client endpoint whose
    // connections land on two workers holds one on each.
    assert!(c.xlates_created >= o.xlates_created, "{c:?} / {o:?}");
    pair
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn workers_translate_as_one_pipeline(n in 2u16..=4, ops in prop::collection::vec(op(), 1..150)) {
        run(n, &ops);
    }
}

/// The property is only worth something if the work is spread: every
/// flow opened and answered through three workers, each worker holding
/// xlates, each xlate's mapped port in a block the plan deals to that
/// worker (so its return traffic is steered there), the replies and the
/// errors about them delivered inside, the static rules served both ways.
#[test]
fn return_traffic_meets_the_worker_of_its_block() {
    let mut ops = vec![];
    for flow in 0..FLOWS {
        ops.push(Op::Out { flow, reply: false, flags: SYN, len: 0, rx: 0 });
        ops.push(Op::Out { flow, reply: true, flags: SYN | ACK, len: 0, rx: 1 });
        ops.push(Op::Out { flow, reply: false, flags: ACK, len: 10, rx: 2 });
        ops.push(Op::IcmpError { flow, rx: 0 });
    }
    for c in 0..CLIENTS {
        for db in [false, true] {
            ops.push(Op::StaticIn { c, db, reply: false, flags: SYN, rx: 0 });
            ops.push(Op::StaticIn { c, db, reply: true, flags: SYN | ACK, rx: 0 });
        }
        ops.push(Op::StaticIn { c, db: true, reply: false, flags: ACK, rx: 0 });
        ops.push(Op::StaticFragments { c, len: 300, first_last: c % 2 == 0, rx: 1 });
    }
    // Established traffic both ways, through the fast path.
    for flow in 0..FLOWS {
        for _ in 0..4 {
            ops.push(Op::Out { flow, reply: false, flags: ACK | PSH, len: 20, rx: 0 });
            ops.push(Op::Out { flow, reply: true, flags: ACK, len: 0, rx: 1 });
        }
    }
    let pair = run(3, &ops);
    let now = pair.now;
    let fast = pair.one.counters().fast_path;
    assert!(fast >= 80, "translated TCP and UDP packets took the fast path: {fast}");
    let plan = pair.many.w[0].nat_plan().unwrap();
    for (w, p) in pair.many.w.iter().enumerate() {
        let x = p.xlates(now, 1000);
        assert!(!x.is_empty(), "worker {w} holds xlates");
        for e in x {
            // "address:port", or the address alone (dynamic NAT).
            let (a, port) = match e.mapped.rsplit_once(':') {
                Some((a, p)) => (a.parse().unwrap(), p.parse().unwrap()),
                None => (e.mapped.parse().unwrap(), 0),
            };
            let (proto, class) = match e.proto {
                "tcp" => (6, dataplane::nat::PortClass::Tcp),
                "udp" => (17, dataplane::nat::PortClass::Udp),
                _ => (1, dataplane::nat::PortClass::Icmp),
            };
            assert_eq!(
                plan.inbound(a, proto, Some(class), port),
                Some(NatInbound::Worker(WorkerId(w as u16))),
                "{e:?}"
            );
        }
    }
    let c = pair.many.w.iter().fold(NatCounters::default(), |mut c, p| {
        c += p.nat_counters().unwrap();
        c
    });
    // Every flow's reply and error came back in; both static rules served.
    assert!(c.translated_in >= (2 * FLOWS + 2 * CLIENTS) as u64, "{c:?}");
    assert_eq!(c.icmp_errors_in, FLOWS as u64, "{c:?}");
    assert_eq!(pair.seen.1.mapped.len(), FLOWS);
    // A 320-byte segment (header and 300 bytes) in 64-byte pieces: 5
    // fragments per client.
    assert_eq!(pair.static_fragments, 5 * CLIENTS, "fragments through static NAT, handed to their worker");
    let pat_workers: std::collections::HashSet<u16> = pair
        .seen
        .1
        .mapped
        .values()
        .filter_map(|&(a, p)| match plan.inbound(a, 6, Some(dataplane::nat::PortClass::Tcp), p) {
            Some(NatInbound::Worker(w)) if PAT.contains(&a) => Some(w.0),
            _ => None,
        })
        .collect();
    assert_eq!(pat_workers.len(), 3, "PAT flows on every worker: {pat_workers:?}");
}

/// A dynamic-NAT pool's addresses are dealt over the workers: the plan
/// reports the workers left without one.
#[test]
fn dynamic_nat_addresses_are_dealt_over_the_workers() {
    let mut s = spec();
    s.pools[1].addresses.truncate(2);
    let mut w = Workers::with_nat(3, &cfg(), &s);
    let plan = w.w[0].nat_plan().unwrap();
    assert_eq!(plan.idle_workers(), vec![(1, 1)]);
    let owners: Vec<_> = DYN[..2].iter().map(|&a| plan.inbound(a, 17, None, 0)).collect();
    assert_eq!(owners, [Some(NatInbound::Worker(WorkerId(0))), Some(NatInbound::Worker(WorkerId(1)))]);
    // The plan is the workers' own: a mismatched one is refused.
    let other = dataplane::pipeline::NatPlan::new(&s, 3, 2).unwrap();
    assert!(w.w[1].set_nat_plan(other).is_err());
    assert!(w.w[2].set_worker(WorkerId(0), 2).is_err(), "set_worker after set_nat");
    let _ = w.tick(Timestamp::from_secs(2));
}

proptest! {
    /// Any bytes, also shaped like a frame to a mapped address: a worker
    /// below `n` or All/Any, never a panic.
    #[test]
    fn steering_by_translation_takes_any_bytes(mut bytes in prop::collection::vec(any::<u8>(), 0..120), n in 2u16..8, to in 0usize..4) {
        let plan = dataplane::pipeline::NatPlan::new(&spec(), 3, n).unwrap();
        if bytes.len() >= 34 {
            bytes[12..14].copy_from_slice(&[8, 0]);
            bytes[14] = 0x45;
            bytes[30..34].copy_from_slice(&[PAT[0], DYN[1], WEB_MAPPED, DB_MAPPED][to].octets());
        }
        match dataplane::steer::steer_nat(&bytes, n, Some(&plan), dataplane::steer::no_shared) {
            dataplane::steer::Steer::Worker(w) => prop_assert!(w.0 < n),
            _ => {}
        }
    }
}

/// One real endpoint whose connections land on several workers holds an
/// xlate on each (docs/nat.md, what several workers cost): one pipeline
/// binds it once.
#[test]
fn a_shared_endpoint_holds_an_xlate_per_worker() {
    let mut pair = Pair::new(3);
    for k in 0..12u8 {
        let f =
            PacketBuilder::new(host_mac(0), IN_MAC, HOST, Ipv4Addr::new(93, 184, 216, 40 + k)).udp(40000, 123, b"t");
        // From flow 0's client endpoint (HOST:40000), UDP to many servers.
        pair.send(IN_PORT, &f, 0, Some(0));
    }
    let real = format!("{HOST}:40000");
    let one = pair.one.xlates(pair.now, 100).into_iter().filter(|x| x.real == real).count();
    let per: Vec<usize> =
        pair.many.w.iter().map(|p| p.xlates(pair.now, 100).into_iter().filter(|x| x.real == real).count()).collect();
    assert_eq!(one, 1);
    assert_eq!(per, [1, 1, 1], "12 servers over 3 workers: an xlate on each");
}
