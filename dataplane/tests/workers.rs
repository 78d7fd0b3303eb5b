//! A node with several workers (issue 12) must do what a node with one
//! does. `Workers` (`workers_util`) is the node's worker loop without
//! DPDK: steering, the receiving queue (the op says which: RSS may put a
//! frame anywhere), ARP learnt by every worker, handoffs.
//!
//! The same random traffic goes to one pipeline and to 2–4 workers: TCP
//! connections in both directions, UDP, pings, ICMP errors quoting a
//! connection, frames with TTL 1 (an ICMP error made here), datagrams cut
//! into fragments delivered in any order (the first one last, or missing),
//! ARP refreshes and time that expires flows and reassembly. After every
//! op the frames that leave (forwarded and generated) must be the same
//! multiset; after the run the connections (`show conn`), the flows
//! created and the drops by reason (the fragment path's included).

mod common;
mod frag_util;
mod workers_util;

use common::*;
use dataplane::conntrack::tcp_flags::{ACK, FIN, PSH, SYN};
use dataplane::pipeline::Pipeline;
use dataplane::wire::build::PacketBuilder;
use dataplane::{Duration, DropReason, PortId, Timestamp};
use proptest::prelude::*;
use workers_util::{single, Out, Workers};
use std::net::Ipv4Addr;

const FLOWS: usize = 8;

fn cfg() -> dataplane::pipeline::PipelineConfig {
    let mut cfg = config();
    // Longer than any run: the neighbours stay resolved here (each worker
    // asks for itself when one expires: `arp_expiry_every_worker_asks`).
    cfg.arp_timeout = Duration::from_secs(4 * 3600);
    cfg.timeouts = short_timeouts();
    // Every worker answers ICMP errors at its share of the rate: high
    // enough here that neither limit is reached.
    cfg.icmp_errors.rate = 100_000;
    cfg.icmp_errors.burst = 100_000;
    cfg
}

#[derive(Clone, Copy)]
struct FlowModel {
    client: u32,
    server: u32,
}

#[derive(Clone, Copy, Debug)]
enum First {
    Anywhere,
    Last,
    Lost,
}

#[derive(Clone, Debug)]
enum Op {
    Tcp { flow: usize, reply: bool, flags: u8, len: u8, rx: u8 },
    Udp { flow: usize, reply: bool, rx: u8 },
    Ping { flow: usize, reply: bool, rx: u8 },
    /// The outside router's "fragmentation needed" about flow `flow`'s
    /// client's segment.
    IcmpError { flow: usize, rx: u8 },
    /// A client's segment with TTL 1: the node's own ICMP error.
    Ttl1 { flow: usize, rx: u8 },
    /// A UDP datagram of flow `flow` (`reply`: from the server) of `len`
    /// bytes, cut into 64-byte fragments delivered in the order `order`
    /// picks (a permutation seed), then the first one (`first_last`: held
    /// until then) or never (`drop_first`).
    Fragments { flow: usize, reply: bool, len: u16, order: u64, first: First, ident: u16, rx: u8 },
    Arp { gateway: bool, rx: u8 },
    Tick { ms: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    let flags = prop::sample::select(vec![SYN, SYN | ACK, ACK, ACK, ACK | PSH, ACK | PSH, FIN | ACK, 0]);
    prop_oneof![
        10 => (0..FLOWS, any::<bool>(), flags, 0u8..=200, any::<u8>())
            .prop_map(|(flow, reply, flags, len, rx)| Op::Tcp { flow, reply, flags, len, rx }),
        3 => (0..FLOWS, any::<bool>(), any::<u8>()).prop_map(|(flow, reply, rx)| Op::Udp { flow, reply, rx }),
        2 => (0..FLOWS, any::<bool>(), any::<u8>()).prop_map(|(flow, reply, rx)| Op::Ping { flow, reply, rx }),
        1 => (0..FLOWS, any::<u8>()).prop_map(|(flow, rx)| Op::IcmpError { flow, rx }),
        1 => (0..FLOWS, any::<u8>()).prop_map(|(flow, rx)| Op::Ttl1 { flow, rx }),
        3 => (0..FLOWS, any::<bool>(), 65u16..600, any::<u64>(), first(), any::<u16>(), any::<u8>())
            .prop_map(|(flow, reply, len, order, first, ident, rx)| Op::Fragments { flow, reply, len, order, first, ident, rx }),
        1 => (any::<bool>(), any::<u8>()).prop_map(|(gateway, rx)| Op::Arp { gateway, rx }),
        2 => prop_oneof![0u32..2_000, 2_000u32..40_000].prop_map(|ms| Op::Tick { ms }),
    ]
}

fn first() -> impl Strategy<Value = First> {
    prop_oneof![4 => Just(First::Anywhere), 2 => Just(First::Last), 1 => Just(First::Lost)]
}

fn server(flow: usize) -> Ipv4Addr {
    Ipv4Addr::new(93, 184, 216, 30 + flow as u8)
}

/// (client builder, server builder, client port, client port id, server port id)
fn endpoints(flow: usize) -> (PacketBuilder, PacketBuilder, u16, PortId, PortId) {
    let srv = server(flow);
    if flow >= 6 {
        (from_dmz(srv), from_outside(srv, DMZ_HOST), 41000 + flow as u16, DMZ_PORT, OUT_PORT)
    } else {
        (from_host(srv), from_outside(srv, HOST), 40000 + flow as u16, IN_PORT, OUT_PORT)
    }
}

/// `v` in a random order drawn from `seed` (Fisher–Yates on an LCG).
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        v.swap(i, (seed >> 33) as usize % (i + 1));
    }
}

/// The frames (port, bytes) of one op as one pipeline sends them and as
/// the workers do, for `run`'s comparison.
struct Pair {
    one: Pipeline,
    many: Workers,
    now: Timestamp,
    /// ARP requests sent by one pipeline, by the workers.
    arp: (usize, usize),
}

impl Pair {
    fn send(&mut self, port: PortId, frame: &[u8], rx: u8) -> bool {
        let a = single(&mut self.one, self.now, port, frame);
        let b = self.many.receive(self.now, port, frame, usize::from(rx));
        let a = self.same(a, b, frame);
        a.iter().any(|(p, _)| *p != port)
    }

    /// `a` (one pipeline's frames) and `b` (the workers') must be the same
    /// multiset, but for the ARP requests: every worker keeps its own
    /// neighbour cache, so when an entry expires each worker that needs it
    /// asks (`run` checks the totals).
    fn same(&mut self, mut a: Out, mut b: Out, what: &[u8]) -> Out {
        let is_request = |(_, f): &(PortId, Vec<u8>)| {
            let l2 = if f.get(12..14) == Some(&[0x81, 0]) { 18 } else { 14 };
            f.get(l2 - 2..l2) == Some(&[8, 6]) && f.get(l2 + 6..l2 + 8) == Some(&[0, 1])
        };
        self.arp.0 += a.iter().filter(|f| is_request(f)).count();
        self.arp.1 += b.iter().filter(|f| is_request(f)).count();
        a.retain(|f| !is_request(f));
        b.retain(|f| !is_request(f));
        a.sort();
        b.sort();
        assert_eq!(a, b, "frames out for {what:02x?}");
        a
    }
}

/// Drops by reason, the fragment path's release drops included.
fn drops(p: &Pipeline) -> Vec<u64> {
    let c = p.counters();
    DropReason::ALL.iter().map(|&r| c.drops[r.index()] + p.frag_release_drops(r)).collect()
}

/// Runs `ops` on one pipeline and on `n` workers; returns the number of
/// frames the workers handed to each other and the flows each holds.
fn run(n: u16, ops: &[Op]) -> (u64, Vec<usize>) {
    let mut pair = Pair { one: Pipeline::new(cfg()).unwrap(), many: Workers::new(n, &cfg()), now: Timestamp::from_secs(1), arp: (0, 0) };
    let mut model = [FlowModel { client: 1000, server: 5000 }; FLOWS];
    let arp_host = arp_request(HOST_MAC, None, HOST_MAC, HOST, IN_ADDR);
    let arp_gw = arp_reply(GW_MAC, OUT_MAC, None, GW, OUT_MAC, OUT_ADDR);
    let arp_dmz = arp_request(DMZ_HOST_MAC, Some(DMZ_VLAN), DMZ_HOST_MAC, DMZ_HOST, DMZ_ADDR);
    pair.send(IN_PORT, &arp_host, 0);
    pair.send(OUT_PORT, &arp_gw, 1);
    pair.send(DMZ_PORT, &arp_dmz, 2);
    for op in ops {
        match *op {
            Op::Tcp { flow, reply, flags, len, rx } => {
                let (cb, sb, cp, cport, sport) = endpoints(flow);
                let m = &mut model[flow];
                if flags == SYN && !reply {
                    m.client = m.client.wrapping_add(100_000);
                }
                if flags == SYN | ACK && reply {
                    m.server = m.server.wrapping_add(100_000);
                }
                let payload = vec![0x61u8; usize::from(len)];
                let opts: &[u8] = if flags & SYN != 0 { &SYN_OPTS } else { &[] };
                let (frame, port) = if reply {
                    (sb.tcp(80, cp, m.server, m.client, flags, 502, opts, &payload), sport)
                } else {
                    (cb.tcp(cp, 80, m.client, m.server, flags, 502, opts, &payload), cport)
                };
                if pair.send(port, &frame, rx) {
                    let adv = u32::from(len) + u32::from(flags & (SYN | FIN) != 0);
                    let side = if reply { &mut m.server } else { &mut m.client };
                    *side = side.wrapping_add(adv);
                }
            }
            Op::Udp { flow, reply, rx } => {
                let (cb, sb, cp, cport, sport) = endpoints(flow);
                let (frame, port) = if reply { (sb.udp(53, cp, b"answer"), sport) } else { (cb.udp(cp, 53, b"query"), cport) };
                pair.send(port, &frame, rx);
            }
            Op::Ping { flow, reply, rx } => {
                let (cb, sb, cp, cport, sport) = endpoints(flow);
                let (frame, port) =
                    if reply { (sb.icmp(0, 0, (cp, 1), b"ping"), sport) } else { (cb.icmp(8, 0, (cp, 1), b"ping"), cport) };
                pair.send(port, &frame, rx);
            }
            Op::IcmpError { flow, rx } => {
                // The client's segment as the firewall forwarded it, and
                // the outside router's error about it.
                let client = if flow >= 6 { DMZ_HOST } else { HOST };
                let (_, _, cp, _, sport) = endpoints(flow);
                let m = model[flow];
                let seen = PacketBuilder::new(OUT_MAC, GW_MAC, client, server(flow)).ttl(63).tcp(cp, 80, m.client, m.server, ACK, 502, &[], &[0x62; 40]);
                let e = icmp_error_frame(&seen, GW_MAC, Ipv4Addr::new(93, 184, 216, 1), OUT_MAC, 3, 4, 1280);
                pair.send(sport, &e, rx);
            }
            Op::Ttl1 { flow, rx } => {
                let (cb, _, cp, cport, _) = endpoints(flow);
                let m = model[flow];
                let frame = cb.ttl(1).tcp(cp, 80, m.client, m.server, ACK, 502, &[], b"");
                pair.send(cport, &frame, rx);
            }
            Op::Fragments { flow, reply, len, order, first, ident, rx } => {
                let (mut cb, mut sb, cp, cport, sport) = endpoints(flow);
                cb.ident = ident;
                sb.ident = ident;
                let data = vec![0x63u8; usize::from(len)];
                let (frame, port) = if reply { (sb.udp(53, cp, &data), sport) } else { (cb.udp(cp, 53, &data), cport) };
                let mut frags = frag_util::fragments(&frame, 64);
                match first {
                    First::Anywhere => shuffle(&mut frags, order),
                    First::Last => {
                        let f0 = frags.remove(0);
                        shuffle(&mut frags, order);
                        frags.push(f0);
                    }
                    First::Lost => {
                        frags.remove(0);
                        shuffle(&mut frags, order);
                    }
                }
                for (k, f) in frags.iter().enumerate() {
                    pair.send(port, f, rx.wrapping_add(k as u8));
                }
            }
            Op::Arp { gateway, rx } => {
                if gateway {
                    pair.send(OUT_PORT, &arp_gw, rx);
                } else {
                    pair.send(IN_PORT, &arp_host, rx);
                }
            }
            Op::Tick { ms } => {
                pair.now = Timestamp(pair.now.nanos() + u64::from(ms) * 1_000_000);
                pair.one.poll_timers(pair.now);
                let mut a = vec![];
                pair.one.drain_generated(|o, f| a.push((o, f.to_vec())));
                let b = pair.many.tick(pair.now);
                pair.same(a, b, b"timers");
            }
        }
    }
    let (one, many, now) = (&pair.one, &pair.many.w, pair.now);
    // The same connections, each on one worker.
    let mut a: Vec<String> = one.conns(now, 1000).iter().map(|c| format!("{c:?}")).collect();
    let mut b: Vec<String> = many.iter().flat_map(|p| p.conns(now, 1000)).map(|c| format!("{c:?}")).collect();
    a.sort();
    b.sort();
    assert_eq!(a, b, "connections");
    let sum = |f: &dyn Fn(&Pipeline) -> u64| -> u64 { many.iter().map(f).sum() };
    assert_eq!(sum(&|p| p.counters().flows_created), one.counters().flows_created);
    // Every frame is decided once: a handed-off one counts where it went.
    let handed = sum(&|p| p.counters().handed_off + p.frag_counters().handed_off);
    assert_eq!(sum(&|p| p.counters().handoffs_in), handed, "every handoff taken");
    assert_eq!(sum(&|p| p.counters().packets) - handed, one.counters().packets, "packets");
    let mut d = vec![0; DropReason::COUNT];
    for p in many {
        for (x, y) in d.iter_mut().zip(drops(p)) {
            *x += y;
        }
    }
    assert_eq!(d, drops(one), "drops by reason");
    let (ra, rb) = pair.arp;
    assert!(ra <= rb && rb <= ra * many.len(), "ARP requests: {ra} from one pipeline, {rb} from the workers");
    assert_eq!((one.counters().arp_requests, sum(&|p| p.counters().arp_requests)), (ra as u64, rb as u64), "ARP requests counted, sent");
    (handed, many.iter().map(|p| p.conns(now, 1000).len()).collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn workers_decide_as_one_pipeline(n in 2u16..=4, ops in prop::collection::vec(op(), 1..200)) {
        run(n, &ops);
    }
}

/// The equivalence is only worth something if the work is shared and the
/// workers hand fragments on: connections spread over the three workers,
/// and fragments whose fragment worker is not their flow's go across
/// (the first one last: held, then released to the flow's worker).
#[test]
fn work_is_shared_and_fragments_cross() {
    let mut ops = vec![];
    for flow in 0..FLOWS {
        ops.push(Op::Tcp { flow, reply: false, flags: SYN, len: 0, rx: 0 });
        ops.push(Op::Tcp { flow, reply: true, flags: SYN | ACK, len: 0, rx: 0 });
        ops.push(Op::Tcp { flow, reply: false, flags: ACK, len: 0, rx: 0 });
        for ident in 0..4 {
            let first = if ident % 2 == 0 { First::Anywhere } else { First::Last };
            ops.push(Op::Fragments { flow, reply: false, len: 300, order: 7, first, ident, rx: 1 });
        }
    }
    let (handed, per_worker) = run(3, &ops);
    assert!(handed >= 8, "fragments handed across: {handed}");
    assert!(per_worker.iter().all(|&n| n > 0), "connections on every worker: {per_worker:?}");
    assert_eq!(per_worker.iter().sum::<usize>(), 2 * FLOWS, "a TCP and a UDP connection per flow");
}

/// When the gateway's entry is gone, each worker that needs it asks (its
/// own cache, no lock) and holds its own frames; the gateway's one reply,
/// answered by the worker that received it and learnt by the others,
/// releases every worker's held frames.
#[test]
fn arp_expiry_every_worker_asks() {
    let n = 3;
    let mut many = Workers::new(n, &cfg());
    let mut now = Timestamp::from_secs(1);
    let arp_gw = arp_reply(GW_MAC, OUT_MAC, None, GW, OUT_MAC, OUT_ADDR);
    many.receive(now, OUT_PORT, &arp_gw, 0);
    // One flow per worker.
    let mut flows = vec![None; usize::from(n)];
    for flow in 0..FLOWS {
        let (cb, _, cp, cport, _) = endpoints(flow);
        if cport != IN_PORT {
            continue;
        }
        let t = dataplane::FiveTuple {
            src: HOST.into(),
            dst: server(flow).into(),
            proto: 17,
            src_port: cp,
            dst_port: 53,
        };
        let w = usize::from(dataplane::steer::worker_of_tuple(&t, n).0);
        flows[w].get_or_insert((cb, cp));
    }
    let flows: Vec<_> = flows.into_iter().map(|f| f.expect("a flow for every worker among 6")).collect();
    for (cb, cp) in &flows {
        assert_eq!(many.receive(now, IN_PORT, &cb.udp(*cp, 53, b"one"), 0).len(), 1, "resolved: forwarded");
    }
    // Past the entry's life and its stale window: a miss.
    now = Timestamp(now.nanos() + (4 * 3600 + 120) * 1_000_000_000);
    many.tick(now);
    let mut requests = 0;
    for (cb, cp) in &flows {
        let out = many.receive(now, IN_PORT, &cb.udp(*cp, 53, b"two"), 0);
        assert_eq!(out.len(), 1, "held, one ARP request: {out:02x?}");
        assert_eq!(out[0].1[12..14], [8, 6]);
        requests += 1;
    }
    assert_eq!(requests, n);
    let out = many.receive(now, OUT_PORT, &arp_gw, 2);
    assert_eq!(out.len(), usize::from(n), "every worker's held frame released: {out:02x?}");
    assert!(out.iter().all(|(p, f)| *p == OUT_PORT && f[..6] == GW_MAC && f.ends_with(b"two")));
}

/// With one worker there is nothing to steer or hand off.
#[test]
fn one_worker_hands_nothing() {
    let ops: Vec<Op> = (0..FLOWS)
        .map(|flow| Op::Fragments { flow, reply: false, len: 300, order: 7, first: First::Last, ident: 9, rx: 0 })
        .collect();
    assert_eq!(run(1, &ops).0, 0);
}

/// A trace on every worker (issue 14, item 5) follows the fragments handed
/// between workers: each hand-off is recorded by the worker that received
/// the piece (`Worker`) and by the datagram's worker that decided it (from
/// its port "via another worker").
#[test]
fn a_trace_follows_fragments_handed_between_workers() {
    use dataplane::pipeline::trace::{TraceFilter, TraceFrom, TraceVerdict};
    let (cb, _, _, cport, _) = endpoints(0);
    let f = TraceFilter::parse(&format!("{HOST} {}", server(0))).unwrap();
    // Pieces are steered by their addresses, the datagram decided by the
    // worker of its ports: a source port where the two differ.
    let mut events: Vec<(usize, TraceFrom, TraceVerdict)> = vec![];
    for cp in 40000..40064 {
        let mut ws = Workers::new(2, &cfg());
        for p in &mut ws.w {
            p.trace_start(f, Timestamp::from_secs(60));
        }
        let frags = frag_util::fragments(&cb.udp(cp, 53, &[0x63u8; 300]), 64);
        assert!(frags.len() >= 4);
        for (i, fr) in frags.iter().enumerate() {
            ws.receive(Timestamp::from_millis(i as u64), cport, fr, i);
        }
        events = ws
            .w
            .iter()
            .enumerate()
            .flat_map(|(w, p)| p.trace_events().map(|(_, _, e, _)| e.iter().map(|e| (w, e.from, e.verdict)).collect::<Vec<_>>()).unwrap_or_default())
            .collect();
        if events.iter().any(|(_, _, v)| matches!(v, TraceVerdict::Worker(_))) {
            break;
        }
    }
    let handed = events.iter().filter(|(_, _, v)| matches!(v, TraceVerdict::Worker(_))).count();
    let taken = events.iter().filter(|(_, from, _)| *from == TraceFrom::Handoff(cport)).count();
    assert!(handed > 0 && handed == taken, "every hand-off recorded on both sides: {events:?}");
    let datagram_worker = events.iter().find(|(_, from, _)| *from == TraceFrom::Handoff(cport)).map(|e| e.0);
    assert!(
        events.iter().filter(|(_, from, _)| *from == TraceFrom::Handoff(cport)).all(|e| Some(e.0) == datagram_worker),
        "one worker takes the datagram: {events:?}"
    );
}
