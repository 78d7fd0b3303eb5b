//! The cluster packet path never allocates: `process` (data ports and the
//! CCL port: forwarding, relays, queries, replies, elections, flow records,
//! pending frames), `flush`, `drain_generated` and `poll_timers` run under
//! a counting allocator while TCP, UDP and DNS flows cross a three-node
//! cluster and bad CCL frames arrive. The harness between the calls may
//! allocate; only the pipeline calls are measured.

mod cluster_bed;
mod frag_util;

use cluster_bed::*;
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::conntrack::tcp_flags::{ACK, FIN, PSH, SYN};
use dataplane::pipeline::{Pipeline, Verdict};
use dataplane::{PortId, Timestamp};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::VecDeque;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GA: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

const SLOT: usize = 2048;

struct Harness {
    nodes: Vec<Pipeline>,
    /// Allocations seen inside pipeline calls.
    spent: u64,
    calls: u64,
    /// Generated frames land here without allocating: (node, port, len, bytes).
    gen: Vec<(usize, PortId, usize, [u8; SLOT])>,
    emitted: usize,
    /// Nodes whose frames stop (failed).
    down: Vec<bool>,
}

impl Harness {
    fn measure<T>(&mut self, f: impl FnOnce(&mut Vec<Pipeline>, &mut Vec<(usize, PortId, usize, [u8; SLOT])>) -> T) -> T {
        let a = allocs();
        let r = f(&mut self.nodes, &mut self.gen);
        self.spent += allocs() - a;
        self.calls += 1;
        r
    }

    fn send(&mut self, now: Timestamp, n: usize, port: PortId, frame: Vec<u8>) {
        let mut queue = VecDeque::from([(n, port, frame)]);
        loop {
            while let Some((n, port, frame)) = queue.pop_front() {
                if self.down[n] {
                    continue;
                }
                let mut buf = VecBuf::new(&frame);
                let v = self.measure(|nodes, _| nodes[n].process(now, port, &mut buf));
                match v {
                    Verdict::Forward(p) if p == CCL => {
                        let dst = &buf.data()[..6];
                        for m in (0..self.nodes.len()).filter(|&m| m != n && dst == ccl_mac(m)) {
                            queue.push_back((m, CCL, buf.to_vec()));
                        }
                    }
                    Verdict::Forward(_) => self.emitted += 1,
                    _ => {}
                }
            }
            self.gen.clear();
            for i in 0..self.nodes.len() {
                if self.down[i] {
                    continue;
                }
                self.measure(|nodes, gen| {
                    nodes[i].flush(now);
                    nodes[i].drain_generated(|port, f| {
                        if gen.len() < gen.capacity() && f.len() <= SLOT {
                            let mut b = [0u8; SLOT];
                            b[..f.len()].copy_from_slice(f);
                            gen.push((i, port, f.len(), b));
                        }
                    });
                });
            }
            if self.gen.is_empty() {
                break;
            }
            for (i, port, len, b) in std::mem::take(&mut self.gen) {
                if port == CCL {
                    for m in (0..self.nodes.len()).filter(|&m| m != i && b[..6] == ccl_mac(m)) {
                        queue.push_back((m, CCL, b[..len].to_vec()));
                    }
                } else {
                    self.emitted += 1;
                }
            }
            self.gen = Vec::with_capacity(64);
        }
    }
}

#[test]
fn cluster_path_does_not_allocate() {
    let mut h = Harness {
        nodes: (0..3).map(|n| Pipeline::new(config(n, 3, true)).unwrap()).collect(),
        spent: 0,
        calls: 0,
        gen: Vec::with_capacity(64),
        emitted: 0,
        down: vec![false; 3],
    };
    let (a, b, c) = (0, 1, 2);
    let opts = SYN_OPTS;
    let mut t = 1_000u64;
    let mut now = || {
        t += 1;
        Timestamp::from_millis(t)
    };
    let later = Timestamp::from_millis(5_000);

    // TCP through mixed nodes (cookie, forwarding, records, updates).
    let cport = port_with_director(SERVER, 80, 6, 3, c);
    h.send(now(), a, IN, from_host(a, SERVER).tcp(cport, 80, 1000, 0, SYN, 64240, &opts, b""));
    // The cookie ISN the owner chose: a retransmitted SYN carries it too.
    let cookie = {
        let mut buf = VecBuf::new(&from_host(a, SERVER).tcp(cport, 80, 1000, 0, SYN, 64240, &opts, b""));
        let ts = now();
        let v = h.measure(|nodes, _| nodes[a].process(ts, IN, &mut buf));
        assert_eq!(v, Verdict::Forward(OUT));
        tcp_fields(buf.data()).0
    };
    h.send(now(), b, OUT, from_outside(b, SERVER).tcp(80, cport, 5000, cookie.wrapping_add(1), SYN | ACK, 65535, &opts, b""));
    h.send(now(), b, IN, from_host(b, SERVER).tcp(cport, 80, 1001, 5001, ACK, 502, &[], b""));
    h.send(now(), c, IN, from_host(c, SERVER).tcp(cport, 80, 1001, 5001, ACK | PSH, 502, &[], b"hello"));
    let d = cookie.wrapping_sub(1000);
    h.send(now(), c, OUT, from_outside(c, SERVER).tcp(80, cport, 5001, 1006u32.wrapping_add(d), ACK | PSH, 509, &[], b"world"));
    h.send(now(), b, IN, from_host(b, SERVER).tcp(cport, 80, 1006, 5006, FIN | ACK, 502, &[], b""));

    // UDP election and a forwarded reply; DNS relay.
    let uport = port_with_director(SERVER, 5000, 17, 3, c);
    h.send(now(), b, IN, from_host(b, SERVER).udp(uport, 5000, b"ping"));
    h.send(now(), a, OUT, from_outside(a, SERVER).udp(5000, uport, b"pong"));
    let dport = port_with_director(DNS, 53, 17, 3, c);
    h.send(now(), a, IN, from_host(a, DNS).udp(dport, 53, b"q"));
    h.send(now(), b, OUT, from_outside(b, DNS).udp(53, dport, b"a"));

    // Fragments (R10): a new flow's first datagram lands on a, c, c, a
    // (first fragment last) and goes to its fragment owner; the reply's
    // fragments land on every node.
    let fport = port_with_director(SERVER, 6000, 17, 3, c);
    let fq = |n: usize| PacketBuilder { dont_frag: false, ident: 0x4242, ..from_host(n, SERVER) }.udp(fport, 6000, &[1u8; 200]);
    let fr = |n: usize| PacketBuilder { dont_frag: false, ident: 0x4343, ..from_outside(n, SERVER) }.udp(6000, fport, &[2u8; 200]);
    for (i, n) in [(1, a), (3, c), (2, c), (0, a)] {
        h.send(now(), n, IN, frag_util::fragments(&fq(n), 64)[i].clone());
    }
    for (i, n) in [(3, c), (2, b), (1, a), (0, c)] {
        h.send(now(), n, OUT, frag_util::fragments(&fr(n), 64)[i].clone());
    }

    // Garbage on the CCL port; a query that will time out (peer gone).
    let junk = PacketBuilder::new(ccl_mac(1), ccl_mac(0), ccl_addr(1), ccl_addr(0)).udp(31300, 31300, &[0x43, 0x46, 1, 0, 0]);
    h.send(now(), a, CCL, junk);
    let qport = port_with_director(SERVER, 7000, 17, 3, b);
    let mut lone = VecBuf::new(&from_host(a, SERVER).udp(qport, 7000, b"lost"));
    h.measure(|nodes, _| nodes[a].process(later, IN, &mut lone));
    for n in 0..3 {
        h.measure(|nodes, _| nodes[n].poll_timers(Timestamp::from_secs(100)));
        h.measure(|nodes, _| nodes[n].poll_timers(Timestamp::from_secs(7200)));
    }

    assert_eq!(h.spent, 0, "allocations on the cluster packet path ({} calls)", h.calls);
    assert!(h.emitted >= 9, "{}", h.emitted);
    assert_eq!(h.nodes[b].cluster_counters().unwrap().counters.synack_cookie_decoded, 1);
    assert_eq!(h.nodes[c].cluster_counters().unwrap().counters.elections, 3, "UDP, DNS and the fragmented flow");
    assert_eq!(h.nodes[c].cluster_counters().unwrap().counters.relays_relayed, 1);
    assert!(h.nodes[a].cluster_counters().unwrap().counters.pending_timeouts >= 1);
    let inserted: u64 = h.nodes.iter().map(|p| p.frag_counters().inserted).sum();
    assert_eq!(inserted, 8 + h.nodes.iter().map(|p| p.frag_counters().from_fragment_owner).sum::<u64>());
    assert!(h.nodes.iter().all(|p| p.frag_in_progress() == (0, 0)));
    // Control: the counter does see allocations on this thread.
    let before = allocs();
    let v = std::hint::black_box(vec![0u8; 16]);
    assert!(allocs() > before && v.len() == 16);
}

use dataplane::wire::build::PacketBuilder;

/// Failover never allocates either: `set_members` (re-registration scan,
/// SYN guard), takeovers by transfer and locally, `SyncDone`, the
/// director's hold, fencing and `reset` (the RST|ACK cookie is the
/// SYN-ACK's decode and forward, covered above).
#[test]
fn failover_path_does_not_allocate() {
    use dataplane::conntrack::tcp_flags::RST;
    use dataplane::{Epoch, NodeId};
    let cfg = |n| {
        let mut c = config(n, 3, true);
        if let Some(cl) = c.cluster.as_mut() {
            cl.director_hold = dataplane::pipeline::DEFAULT_DIRECTOR_HOLD;
        }
        c
    };
    let mut h = Harness {
        nodes: (0..3).map(|n| Pipeline::new(cfg(n)).unwrap()).collect(),
        spent: 0,
        calls: 0,
        gen: Vec::with_capacity(64),
        emitted: 0,
        down: vec![false; 3],
    };
    let (a, b, c) = (0, 1, 2);
    let mut t = 1_000u64;
    let mut now = || {
        t += 1;
        Timestamp::from_millis(t)
    };
    // Two connections owned by A (forwarder B), director C.
    let ports: Vec<u16> = (0..2).map(|k| port_with_director(SERVER, 80 + k, 6, 3, c)).collect();
    for (k, &cport) in ports.iter().enumerate() {
        let dport = 80 + k as u16;
        let syn = from_host(a, SERVER).tcp(cport, dport, 1000, 0, SYN, 64240, &SYN_OPTS, b"");
        let mut buf = VecBuf::new(&syn);
        let ts = now();
        assert_eq!(h.measure(|nodes, _| nodes[a].process(ts, IN, &mut buf)), Verdict::Forward(OUT));
        let cookie = tcp_fields(buf.data()).0;
        h.send(now(), a, IN, syn.clone()); // the registration goes out with this burst
        h.send(now(), b, OUT, from_outside(b, SERVER).tcp(dport, cport, 5000, cookie.wrapping_add(1), SYN | ACK, 65535, &SYN_OPTS, b""));
        h.send(now(), a, IN, from_host(a, SERVER).tcp(cport, dport, 1001, 5001, ACK, 502, &[], b""));
    }
    // A fails.
    h.down[a] = true;
    let set = dataplane::cluster::MemberSet::from_nodes(Epoch(2), [NodeId(1), NodeId(2)]).unwrap();
    for n in [b, c] {
        let ts = now();
        h.measure(|nodes, _| nodes[n].set_members(ts, set));
    }
    // Takeover through the director (B asks C), locally at C.
    h.send(now(), b, IN, from_host(b, SERVER).tcp(ports[0], 80, 1001, 5001, ACK | PSH, 502, &[], b"x"));
    h.send(now(), c, OUT, from_outside(c, SERVER).tcp(81, ports[1], 5001, 1001, ACK, 509, &[], b""));
    // Scans, SyncDone, holds.
    for n in [b, c] {
        for _ in 0..4 {
            let ts = now();
            h.measure(|nodes, _| nodes[n].poll_timers(ts));
        }
    }
    // SYN guard: a new SYN on B asks C (which elects B); a RST|ACK (the
    // owner's own, through conntrack); a query C holds and answers "none"
    // later.
    let g = port_with_director(SERVER, 90, 6, 3, c);
    h.send(now(), b, IN, from_host(b, SERVER).tcp(g, 90, 7, 0, SYN, 64240, &SYN_OPTS, b""));
    h.send(now(), b, OUT, from_outside(b, SERVER).tcp(90, g, 0, 8, RST | ACK, 0, &[], b""));
    let lone = port_with_director(SERVER, 91, 6, 3, c);
    h.send(now(), b, OUT, from_outside(b, SERVER).tcp(91, lone, 1, 2, ACK, 0, &[], b""));
    for n in [b, c] {
        h.measure(|nodes, _| nodes[n].poll_timers(Timestamp::from_secs(10)));
    }
    // Fencing, then reset.
    h.measure(|nodes, _| nodes[b].set_lease(Timestamp::ZERO));
    h.send(now(), b, IN, from_host(b, SERVER).tcp(ports[0], 80, 1002, 5001, ACK, 502, &[], b""));
    let ts = now();
    h.measure(|nodes, _| nodes[b].reset(ts));
    h.measure(|nodes, _| nodes[b].set_lease(Timestamp::MAX));

    assert_eq!(h.spent, 0, "allocations on the failover path ({} calls)", h.calls);
    let (bc, cc) = (h.nodes[b].cluster_counters().unwrap().counters, h.nodes[c].cluster_counters().unwrap().counters);
    assert_eq!((bc.takeovers, cc.takeovers_local, cc.takeovers_granted), (1, 1, 1));
    assert!(bc.sync_done_sent >= 1 && cc.sync_done_received >= 1);
    assert_eq!((bc.syn_guard_queries, bc.resets), (1, 1));
    assert!(cc.queries_held >= 1);
    assert_eq!(h.nodes[b].counters().drop_count(dataplane::DropReason::ClusterFenced), 1);
}
