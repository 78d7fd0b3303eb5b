//! The fast path in cluster mode must do exactly what the general path
//! does, or nothing: two three-node clusters (`cluster_bed`), one with the
//! fast path on in every node and one with it off, get the same random
//! traffic — TCP connections whose segments land on random nodes in both
//! directions (so owners, forwarders, directors and cookies are all in
//! play), with FIN/RST and out-of-window segments, UDP and DNS flows, and
//! time steps that run the timers. After every step what left the
//! clusters on data ports, every CCL message delivered, and every node's
//! counters, cluster counters and connection table must be equal.

mod cluster_bed;

use cluster_bed::*;
use dataplane::conntrack::tcp_flags::{ACK, FIN, PSH, RST, SYN};
use dataplane::PortId;
use proptest::prelude::*;

const FLOWS: usize = 5;
const NODES: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    /// A TCP segment of flow `flow` arriving at node `at`; `reply`: server
    /// → client.
    Tcp { flow: usize, at: usize, reply: bool, flags: u8, skew: i32, len: u8 },
    Udp { flow: usize, at: usize, reply: bool, dns: bool },
    Tick { ms: u64 },
    /// Node `node` fails: the others get the member set without it, and
    /// its owned connections are taken over (issue 10).
    Kill { node: usize },
}

fn op() -> impl Strategy<Value = Op> {
    let flags = prop::sample::select(vec![SYN, SYN | ACK, ACK, ACK, ACK, ACK | PSH, ACK | PSH, FIN | ACK, RST | ACK, RST]);
    let skew = prop_oneof![8 => Just(0i32), 1 => -3000i32..3000];
    prop_oneof![
        10 => (0..FLOWS, 0..NODES, any::<bool>(), flags, skew, 0u8..=120).prop_map(|(flow, at, reply, flags, skew, len)| Op::Tcp { flow, at, reply, flags, skew, len }),
        3 => (0..FLOWS, 0..NODES, any::<bool>(), any::<bool>()).prop_map(|(flow, at, reply, dns)| Op::Udp { flow, at, reply, dns }),
        1 => prop_oneof![1u64..50, 1_000u64..5_000].prop_map(|ms| Op::Tick { ms }),
        1 => (0..NODES).prop_map(|node| Op::Kill { node }),
    ]
}

/// Per flow: the next sequence numbers of the client and the server as the
/// *hosts* see them (the cluster translates the server's view of the
/// client's ISN; `client_isn_seen` is what the server saw in the SYN).
#[derive(Clone, Copy, Default)]
struct Model {
    client: u32,
    server: u32,
    client_isn_seen: Option<u32>,
}

type Out = Vec<(usize, PortId, Vec<u8>)>;

fn compare(a: &Bed, b: &Bed) {
    for n in 0..NODES {
        let (mut sa, sb) = (a.nodes[n].counters(), b.nodes[n].counters());
        assert_eq!(sb.fast_path, 0);
        sa.fast_path = 0;
        assert_eq!(sa, sb, "node {n} counters");
        assert_eq!(format!("{:?}", a.cluster(n)), format!("{:?}", b.cluster(n)), "node {n} cluster counters");
        let now = a.now();
        assert_eq!(format!("{:?}", a.nodes[n].conns(now, 100)), format!("{:?}", b.nodes[n].conns(now, 100)), "node {n} conns");
    }
    assert_eq!(a.ccl, b.ccl, "CCL messages");
}

fn run(ops: &[Op]) -> u64 {
    run_full(ops).0
}

/// `run`, also returning the takeovers of the fast-path cluster (transfers
/// and local).
fn run_full(ops: &[Op]) -> (u64, u64) {
    let mut a = Bed::new(NODES, true);
    let mut b = Bed::new(NODES, true);
    for p in &mut b.nodes {
        p.set_fast_path(false);
    }
    let mut model = [Model { client: 1000, server: 7000, client_isn_seen: None }; FLOWS];
    for op in ops {
        let step = |bed: &mut Bed, op: &Op, m: &[Model; FLOWS]| -> Out {
            match *op {
                Op::Tcp { flow, at, reply, flags, skew, len } => {
                    let cport = 20_000 + flow as u16;
                    let f = &m[flow];
                    let payload = vec![0x62u8; usize::from(len)];
                    let opts: &[u8] = if flags & SYN != 0 { &SYN_OPTS } else { &[] };
                    if reply {
                        let ack = f.client_isn_seen.map_or(f.client, |i| i.wrapping_add(f.client.wrapping_sub(1000)));
                        let seq = f.server.wrapping_add(skew as u32);
                        bed.send(at, OUT, from_outside(at, SERVER).tcp(80, cport, seq, ack, flags, 502, opts, &payload))
                    } else {
                        let seq = f.client.wrapping_add(skew as u32);
                        bed.send(at, IN, from_host(at, SERVER).tcp(cport, 80, seq, f.server, flags, 502, opts, &payload))
                    }
                }
                Op::Udp { flow, at, reply, dns } => {
                    let cport = 30_000 + flow as u16;
                    let sport = if dns { 53 } else { 9000 };
                    if reply {
                        bed.send(at, OUT, from_outside(at, SERVER).udp(sport, cport, b"answer"))
                    } else {
                        bed.send(at, IN, from_host(at, SERVER).udp(cport, sport, b"query"))
                    }
                }
                Op::Tick { ms } => bed.tick(ms),
                Op::Kill { node } => {
                    // At most one failure: two nodes stay.
                    if bed.down.iter().any(|d| *d) {
                        return vec![];
                    }
                    bed.kill(node, 2);
                    bed.tick(1)
                }
            }
        };
        let oa = step(&mut a, op, &model);
        let ob = step(&mut b, op, &model);
        assert_eq!(oa, ob, "frames out after {op:?}");
        compare(&a, &b);
        // Follow what got through, so that later segments are in window.
        if let Op::Tcp { flow, reply, flags, skew: 0, len, .. } = *op {
            let m = &mut model[flow];
            let adv = u32::from(len) + u32::from(flags & (SYN | FIN) != 0);
            for (_, port, f) in &oa {
                if !reply && *port == OUT {
                    if flags & SYN != 0 && flags & ACK == 0 {
                        m.client_isn_seen = Some(tcp_fields(f).0);
                    }
                    m.client = m.client.wrapping_add(adv);
                } else if reply && *port == IN {
                    m.server = m.server.wrapping_add(adv);
                }
            }
        }
    }
    let takeovers = (0..NODES).map(|n| a.cluster(n).counters).map(|c| c.takeovers + c.takeovers_local).sum();
    ((0..NODES).map(|n| a.nodes[n].counters().fast_path).sum(), takeovers)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn cluster_fast_path_equals_general_path(ops in prop::collection::vec(op(), 1..150)) {
        run(&ops);
    }
}

/// The cluster fast path takes traffic: established segments landing on
/// the owner and on a forwarder (both the forwarder's packet and the
/// owner's unwrapped frame), and the equivalence holds for them.
#[test]
fn established_cluster_traffic_takes_the_fast_path() {
    let mut ops = vec![
        Op::Tcp { flow: 0, at: 0, reply: false, flags: SYN, skew: 0, len: 0 },
        Op::Tcp { flow: 0, at: 1, reply: true, flags: SYN | ACK, skew: 0, len: 0 },
        Op::Tcp { flow: 0, at: 0, reply: false, flags: ACK, skew: 0, len: 0 },
    ];
    for at in [0, 1, 2, 0, 1, 2] {
        ops.push(Op::Tcp { flow: 0, at, reply: false, flags: ACK | PSH, skew: 0, len: 100 });
        ops.push(Op::Tcp { flow: 0, at, reply: true, flags: ACK, skew: 0, len: 0 });
    }
    let fast = run(&ops);
    assert!(fast >= 12, "fast-path packets: {fast}");
}

/// A failure in the middle of established traffic: the owner dies, the
/// next segments land on every survivor in both directions (takeovers,
/// local at the director and through `FlowTransfer`), and the fast path
/// still does exactly what the general path does.
#[test]
fn takeover_after_a_failure_is_equivalent() {
    let mut ops = vec![
        Op::Tcp { flow: 0, at: 0, reply: false, flags: SYN, skew: 0, len: 0 },
        Op::Tcp { flow: 0, at: 1, reply: true, flags: SYN | ACK, skew: 0, len: 0 },
        Op::Tcp { flow: 0, at: 0, reply: false, flags: ACK, skew: 0, len: 0 },
        Op::Tcp { flow: 1, at: 0, reply: false, flags: SYN, skew: 0, len: 0 },
        Op::Tcp { flow: 1, at: 2, reply: true, flags: SYN | ACK, skew: 0, len: 0 },
        Op::Tcp { flow: 1, at: 0, reply: false, flags: ACK, skew: 0, len: 0 },
        Op::Kill { node: 0 },
    ];
    for at in [1, 2, 1, 2] {
        for flow in [0, 1] {
            ops.push(Op::Tcp { flow, at, reply: false, flags: ACK | PSH, skew: 0, len: 100 });
            ops.push(Op::Tcp { flow, at, reply: true, flags: ACK, skew: 0, len: 0 });
        }
    }
    let (fast, takeovers) = run_full(&ops);
    assert!(fast >= 8, "fast-path packets: {fast}");
    assert_eq!(takeovers, 2, "both connections taken over");
}
