//! The cluster packet path in a steady state, for callgrind: three
//! in-process nodes (the `tests/cluster_bed` harness, as the `cluster_tax`
//! bench builds them), `FLOWS` established TCP connections owned by node A
//! whose SYN-ACKs reached node B, and server → client segments of 60 bytes
//! (pure ACKs) or 1514 bytes (full segments) arriving
//!
//! - at the owner A (`hot_owner_direct`), or
//! - at B, which forwards them to A over the CCL, and A processes them
//!   (`hot_via_forwarder`: both nodes' work, batches included).
//!
//! ```sh
//! cargo build --release -p dataplane --example cluster_profile
//! valgrind --tool=callgrind --toggle-collect='*hot_owner_direct*' \
//!     target/release/examples/cluster_profile direct 60 20000
//! valgrind --tool=callgrind --toggle-collect='*hot_via_forwarder*' \
//!     target/release/examples/cluster_profile via 60 20000
//! valgrind --tool=callgrind --toggle-collect='*hot_owner_direct*' \
//!     target/release/examples/cluster_profile out|pat-out|pat-out-general 60 20000
//! valgrind --tool=callgrind --toggle-collect='*hot_owner_direct*' \
//!     target/release/examples/cluster_profile pat-direct|pat-direct-general 60 20000
//! valgrind --tool=callgrind --toggle-collect='*hot_via_forwarder*' \
//!     target/release/examples/cluster_profile pat-via 60 20000
//! ```
//!
//! `out`: client → server segments at the owner A; `pat-out`: the same
//! with every member PAT'ing the inside network (the member NAT fast
//! path, `fast::nat_member`); `pat-direct`, `pat-via`: the server's
//! segments to the mapped endpoint through PAT, at A or handed to A by B
//! (N5: A holds the port's block); `-general`: with A's fast path off.
//!
//! Instruction counts are repeatable for one binary, whatever the machine
//! does meanwhile; divide the collected count by the packet count.

#[path = "../tests/cluster_bed/mod.rs"]
mod cluster_bed;

use cluster_bed::*;
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::conntrack::tcp_flags::{ACK, SYN};
use dataplane::pipeline::{Pipeline, Verdict};
use dataplane::Timestamp;
use std::hint::black_box;

const A: usize = 0;
const B: usize = 1;
const FLOWS: usize = 1000;
const BURST: usize = 32;
const C_ISN: u32 = 1000;
const S_ISN: u32 = 5000;

/// The bed with `FLOWS` connections (`pat`: the members PAT the inside
/// network to `POOL`); per flow the server → client segment as it arrives
/// at A and as it arrives at B, and the client → server segment as it
/// arrives at A.
/// Frames, one per flow.
type Frames = Vec<Vec<u8>>;

fn setup(payload: usize, pat: bool) -> (Bed, Frames, Frames, Frames) {
    let mut bed = Bed::new(3, true);
    bed.nodes = (0..3)
        .map(|n| {
            let mut c = config(n, 3, true);
            c.flow_capacity = 4 * FLOWS;
            let mut p = Pipeline::new(c).expect("pipeline");
            if pat {
                let spec = dataplane::pipeline::PatSpec { block_size: 4096, reserved_ports: false, max_per_host: None };
                let pool = dataplane::pipeline::PoolSpec { addresses: vec![POOL], pat: Some(spec) };
                p.set_nat(&one_rule_nat(dataplane::nat::RuleKind::DynamicPat, pool)).expect("PAT");
            }
            p
        })
        .collect();
    let data = vec![0x61u8; payload];
    let (mut at_a, mut at_b, mut out_a) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..FLOWS {
        let cport = 10_000 + i as u16;
        let out = bed.send(A, IN, from_host(A, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
        let isn = tcp_fields(&out[0].2).0;
        // The client's endpoint as the server sees it.
        let f = &out[0].2;
        let (caddr, cport_seen) = (std::net::Ipv4Addr::new(f[26], f[27], f[28], f[29]), u16::from_be_bytes([f[34], f[35]]));
        let to_client = |n| dataplane::wire::build::PacketBuilder::new(GW_MAC, out_mac(n), SERVER, caddr);
        let synack = to_client(B).tcp(80, cport_seen, S_ISN, isn.wrapping_add(1), SYN | ACK, 65535, &SYN_OPTS, b"");
        assert_eq!(bed.send(B, OUT, synack).len(), 1, "SYN-ACK via B reaches the client");
        let ack = from_host(A, SERVER).tcp(cport, 80, C_ISN + 1, S_ISN + 1, ACK, 502, &[], b"");
        assert_eq!(bed.send(A, IN, ack).len(), 1, "handshake completes at A");
        let seg = |n| to_client(n).tcp(80, cport_seen, S_ISN + 1, isn.wrapping_add(1), ACK, 502, &[], &data);
        at_a.push(seg(A));
        at_b.push(seg(B));
        out_a.push(from_host(A, SERVER).tcp(cport, 80, C_ISN + 1, S_ISN + 1, ACK, 502, &[], &data));
    }
    (bed, at_a, at_b, out_a)
}

/// The pool address of the `pat-` modes.
const POOL: std::net::Ipv4Addr = std::net::Ipv4Addr::new(192, 0, 2, 7);

#[inline(never)]
fn hot_owner_direct(a: &mut Pipeline, now: Timestamp, at_a: &[Vec<u8>], packets: usize, port: dataplane::PortId) -> u64 {
    let mut bufs: Vec<VecBuf> = (0..BURST).map(|_| VecBuf::with_room(&at_a[0], 256, 256)).collect();
    let mut next = 0usize;
    let mut out = 0u64;
    for _ in 0..packets / BURST {
        for buf in bufs.iter_mut() {
            buf.reset(&at_a[next], 256);
            next = (next + 1) % at_a.len();
        }
        a.prefetch_burst(bufs.iter().map(|b| b.data()));
        for buf in bufs.iter_mut() {
            if matches!(black_box(a.process(now, port, buf)), Verdict::Forward(_)) {
                out += 1;
            }
        }
        a.flush(now);
        a.drain_generated(|_, f| {
            black_box(f);
        });
    }
    out
}

#[inline(never)]
fn hot_via_forwarder(bed: &mut Bed, now: Timestamp, at_b: &[Vec<u8>], packets: usize) -> u64 {
    let [a, b, _] = &mut bed.nodes[..] else { panic!("three nodes") };
    let mut bufs: Vec<VecBuf> = (0..BURST).map(|_| VecBuf::with_room(&at_b[0], 256, 256)).collect();
    let mut carriers: Vec<VecBuf> = (0..2 * BURST).map(|_| VecBuf::with_room(&[0u8; 2048], 256, 256)).collect();
    let mut in_place = [false; BURST];
    let mut next = 0usize;
    let mut out = 0u64;
    for _ in 0..packets / BURST {
        for buf in bufs.iter_mut() {
            buf.reset(&at_b[next], 256);
            next = (next + 1) % at_b.len();
        }
        b.prefetch_burst(bufs.iter().map(|x| x.data()));
        for (k, buf) in bufs.iter_mut().enumerate() {
            in_place[k] = b.process(now, OUT, buf) == Verdict::Forward(CCL);
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
            if in_place[k] && matches!(black_box(a.process(now, CCL, buf)), Verdict::Forward(_)) {
                out += 1;
            }
        }
        for c in carriers.iter_mut().take(n) {
            black_box(a.process(now, CCL, c));
        }
        a.flush(now);
        a.drain_generated(|_, f| {
            out += 1;
            black_box(f);
        });
    }
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "direct".into());
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(60);
    let packets: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let payload = size.saturating_sub(66);
    let pat = mode.starts_with("pat");
    let (mut bed, at_a, at_b, out_a) = setup(payload, pat);
    if mode.ends_with("-general") {
        bed.nodes[A].set_fast_path(false);
    }
    let now = bed.now();
    let (a0, b0) = (bed.nodes[A].counters().dropped(), bed.nodes[B].counters().dropped());
    let start = std::time::Instant::now();
    let out = match mode.as_str() {
        "direct" | "pat-direct" | "pat-direct-general" => hot_owner_direct(&mut bed.nodes[A], now, &at_a, packets, OUT),
        "via" | "pat-via" | "pat-via-general" => hot_via_forwarder(&mut bed, now, &at_b, packets),
        // Client → server at the owner, without NAT and through PAT (the
        // member NAT fast path, or the general path: `-general`).
        "out" | "pat-out" | "pat-out-general" => hot_owner_direct(&mut bed.nodes[A], now, &out_a, packets, IN),
        m => {
            eprintln!(
                "usage: cluster_profile direct|via|out|pat-out|pat-direct|pat-via[-general] [SIZE] [PACKETS] (not {m:?})"
            );
            std::process::exit(2);
        }
    };
    let ns = start.elapsed().as_nanos() as f64 / packets as f64;
    assert_eq!(bed.nodes[A].counters().dropped(), a0, "owner drops");
    assert_eq!(bed.nodes[B].counters().dropped(), b0, "forwarder drops");
    println!("{mode} {} B x {packets}: {out} frames out, {ns:.1} ns/packet (wall clock, rough)", 54 + payload.max(6));
}
