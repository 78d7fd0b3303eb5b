//! The cluster tax per packet, without EAL or simulator: three in-process
//! cluster nodes (the `tests/cluster_bed` harness: real pipelines, CCL
//! frames sealed and opened), 1000 established TCP connections owned by
//! node A, whose SYN-ACKs reached node B (so B holds forwarder records).
//!
//! - `cluster_tax/owner_direct/<size>`: a server → client segment arrives
//!   at the owner A and is forwarded to the client (what every packet costs
//!   with symmetric routers).
//! - `cluster_tax/via_forwarder/<size>`: the same segment arrives at B,
//!   which looks up its record and sends the frame to A over the CCL —
//!   small frames in a `ForwardedBatch` per burst (sealed when B drains),
//!   large ones wrapped and sealed alone, in place; A opens and processes
//!   them (the CPU a non-owner arrival costs the cluster).
//!
//! - `cluster_tax/forwarder_only/<size>`: B's part of `via_forwarder`
//!   alone (the rest is A's: opening and processing the CCL datagram).
//!
//! With half of all packets arriving at a non-owner, the tax is
//! `(owner_direct + via_forwarder) / (2 × owner_direct)`; `scripts/bench.sh`
//! computes it. Sizes: 60-byte pure ACKs and 1514-byte frames (1448 bytes
//! of payload, the same segment repeated: a retransmission the window
//! check accepts every time). Bursts of 32, round-robin over the flows,
//! each frame restored from its pristine copy inside the timing.

#[path = "../tests/cluster_bed/mod.rs"]
mod cluster_bed;

use cluster_bed::*;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::conntrack::tcp_flags::{ACK, SYN};
use dataplane::pipeline::{Pipeline, Verdict};
use std::hint::black_box;

const A: usize = 0;
const B: usize = 1;
const FLOWS: usize = 1000;
const BURST: usize = 32;
const C_ISN: u32 = 1000;
const S_ISN: u32 = 5000;

/// The bed with `FLOWS` connections; per flow the server → client segment
/// as it arrives at A and as it arrives at B.
fn setup(payload: usize) -> (Bed, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut bed = Bed::new(3, true);
    bed.nodes = (0..3)
        .map(|n| {
            let mut c = config(n, 3, true);
            c.flow_capacity = 4 * FLOWS;
            Pipeline::new(c).unwrap()
        })
        .collect();
    let data = vec![0x61u8; payload];
    let (mut at_a, mut at_b) = (Vec::new(), Vec::new());
    for i in 0..FLOWS {
        let cport = 10_000 + i as u16;
        let out = bed.send(A, IN, from_host(A, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
        let isn = tcp_fields(&out[0].2).0;
        let synack = from_outside(B, SERVER).tcp(80, cport, S_ISN, isn.wrapping_add(1), SYN | ACK, 65535, &SYN_OPTS, b"");
        assert_eq!(bed.send(B, OUT, synack).len(), 1, "SYN-ACK via B reaches the client");
        let ack = from_host(A, SERVER).tcp(cport, 80, C_ISN + 1, S_ISN + 1, ACK, 502, &[], b"");
        assert_eq!(bed.send(A, IN, ack).len(), 1, "handshake completes at A");
        let seg = |n| from_outside(n, SERVER).tcp(80, cport, S_ISN + 1, isn.wrapping_add(1), ACK, 502, &[], &data);
        at_a.push(seg(A));
        at_b.push(seg(B));
    }
    (bed, at_a, at_b)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("cluster_tax");
    g.throughput(Throughput::Elements(BURST as u64));
    for payload in [0usize, 1448] {
        let size = 54 + payload.max(6);
        let (mut bed, at_a, at_b) = setup(payload);
        let now = bed.now();
        let mut bufs: Vec<VecBuf> = (0..BURST).map(|_| VecBuf::with_room(&at_a[0], 256, 256)).collect();
        let mut next = 0usize;
        let (a_before, b_before) = (bed.nodes[A].counters().dropped(), bed.nodes[B].counters().dropped());
        g.bench_function(BenchmarkId::new("owner_direct", size), |bch| {
            bch.iter(|| {
                let a = &mut bed.nodes[A];
                for buf in bufs.iter_mut() {
                    buf.reset(&at_a[next], 256);
                    next = (next + 1) % FLOWS;
                }
                a.prefetch_burst(bufs.iter().map(|b| b.data()));
                for buf in bufs.iter_mut() {
                    black_box(a.process(now, OUT, buf));
                }
                a.flush(now);
                a.drain_generated(|_, f| {
                    black_box(f);
                });
            })
        });
        // B's CCL datagrams for A: the frames it wrapped in place, then the
        // batches it sealed when drained (as a driver would send them).
        let mut carriers: Vec<VecBuf> = (0..2 * BURST).map(|_| VecBuf::with_room(&[0u8; 2048], 256, 256)).collect();
        let mut in_place = [false; BURST];
        g.bench_function(BenchmarkId::new("via_forwarder", size), |bch| {
            bch.iter(|| {
                let [a, b, _] = &mut bed.nodes[..] else { unreachable!() };
                for buf in bufs.iter_mut() {
                    buf.reset(&at_b[next], 256);
                    next = (next + 1) % FLOWS;
                }
                b.prefetch_burst(bufs.iter().map(|x| x.data()));
                for (k, buf) in bufs.iter_mut().enumerate() {
                    let v = b.process(now, OUT, buf);
                    debug_assert!(matches!(v, Verdict::Forward(CCL) | Verdict::Consumed));
                    in_place[k] = v == Verdict::Forward(CCL);
                }
                b.flush(now);
                let mut n = 0;
                b.drain_generated(|port, f| {
                    if port == CCL {
                        if let Some(c) = carriers.get_mut(n) {
                            c.reset(f, 256);
                            n += 1;
                        }
                    }
                });
                for (k, buf) in bufs.iter_mut().enumerate() {
                    if in_place[k] {
                        black_box(a.process(now, CCL, buf));
                    }
                }
                for c in carriers.iter_mut().take(n) {
                    black_box(a.process(now, CCL, c));
                }
                a.flush(now);
                a.drain_generated(|_, f| {
                    black_box(f);
                });
            })
        });
        g.bench_function(BenchmarkId::new("forwarder_only", size), |bch| {
            bch.iter(|| {
                let b = &mut bed.nodes[B];
                for buf in bufs.iter_mut() {
                    buf.reset(&at_b[next], 256);
                    next = (next + 1) % FLOWS;
                }
                b.prefetch_burst(bufs.iter().map(|x| x.data()));
                for buf in bufs.iter_mut() {
                    black_box(b.process(now, OUT, buf));
                }
                b.flush(now);
                b.drain_generated(|_, f| {
                    black_box(f);
                });
            })
        });
        assert_eq!(bed.nodes[A].counters().dropped(), a_before, "owner drops: {:?}", dataplane::stats::flatten(&bed.nodes[A].counters()).into_iter().filter(|(k, n)| k.starts_with("drops.") && *n > 0).collect::<Vec<_>>());
        assert_eq!(bed.nodes[B].counters().dropped(), b_before, "forwarder drops");
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
