//! Pipeline throughput (criterion).
//!
//! `established/N`: N TCP flows are opened through the pipeline (SYN,
//! SYN-ACK, ACK each) with both neighbours' ARP entries resolved; then each
//! iteration processes a burst of 32 frames the way the DPDK worker does
//! (`Pipeline::prefetch_burst`, then `process` for each), each a 60-byte
//! pure ACK inside → outside that is forwarded (flow lookup, TCP window
//! check, route, ARP, TTL/checksum, MAC rewrite). Frames come from an
//! arrival stream read front to back like a receive ring, one per flow,
//! flows in a fixed pseudo-random order (`support::arrival_stream`): every
//! flow once per round, in an order the hardware prefetcher cannot follow.
//! The pipeline rewrites frames in place, so every packet first restores
//! its 60-byte copy into a `VecBuf` (one `copy_from_slice`, in the timing).
//!
//! `established_general_path/100000`: the same with the fast path off
//! (`Pipeline::set_fast_path(false)`): what every established packet cost
//! before the fast path (`pipeline/fast.rs`), and what packets the fast path declines
//! (VLAN, cluster mode, options, ...) still cost.
//!
//! `new_connections`: SYNs for distinct tuples into a fresh table (1024 per
//! iteration, table of 4096; table creation is outside the timing): ACL
//! evaluation, flow insert, forwarding.
//!
//! With PAT (issue 13; `support::pipeline_pat`: the inside /24 to 16 pool
//! addresses): `established_pat/N` is `established/N` through PAT (the
//! fast path steps aside with NAT: the general path, NAT rule lookup on
//! the existing xlate, source rewrite); `new_pat_connections` is
//! `new_connections` through PAT (rule lookup, port allocation, xlate
//! insert, flow mark). Same run, same frames: the ratios to the figures
//! without NAT are the cost of PAT.
//!
//! With connection limits (issue 15; `pipeline_limited`: all four limits
//! set globally, far above what is opened): `established_limits/N` and
//! `new_connections_limits` against the same without, same run.
//! `syn_proxy_cookies` is `new_connections` past `max-embryonic` with the
//! SYN proxy on (`pipeline_proxying`): each SYN answered by a cookie
//! SYN-ACK, nothing stored — what a SYN flood at a limited rule costs.
//!
//! Throughput is in packets (criterion `Throughput::Elements`): criterion
//! prints it as "elem/s" — Melem/s = Mpps; time / 32 = ns per packet.

mod support;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::conntrack::tcp_flags::SYN;
use dataplane::pipeline::Pipeline;
use dataplane::wire::build::PacketBuilder;
use dataplane::{PortId, Timestamp};
use support::*;
use std::hint::black_box;

/// One group member: `n` flows, fast path on or off.
fn run_established(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, id: BenchmarkId, n: usize, fast: bool) {
    let mut p: Pipeline = pipeline(n + n / 4);
    p.set_fast_path(fast);
    run_established_on(g, id, p, n);
}

fn run_established_on(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, id: BenchmarkId, mut p: Pipeline, n: usize) {
    let frames = established(&mut p, n);
    let stream = arrival_stream(&frames);
    drop(frames);
    let mut bufs: Vec<VecBuf> = (0..BURST).map(|_| VecBuf::new(&stream[0])).collect();
    let t = Timestamp::from_secs(2);
    let mut next = 0usize;
    let dropped_before = p.counters().dropped();
    g.bench_function(id, |b| {
        b.iter(|| {
            for buf in bufs.iter_mut() {
                buf.reset(&stream[next], 128);
                next += 1;
                if next == stream.len() {
                    next = 0;
                }
            }
            p.prefetch_burst(bufs.iter().map(|b| b.data()));
            for buf in bufs.iter_mut() {
                black_box(p.process(t, PortId(0), buf));
            }
        })
    });
    assert_eq!(p.counters().dropped(), dropped_before, "established frames must all be forwarded");
}

fn bench_established(c: &mut Criterion) {
    eprintln!(
        "note: bursts of 32 as the worker runs them (prefetch_burst, then process); each packet \
         first restores its 60-byte frame into the buffer (copy_from_slice, in the timing). \
         time/32 = ns per packet; Melem/s = Mpps."
    );
    let mut g = c.benchmark_group("established");
    g.throughput(Throughput::Elements(BURST as u64));
    for &n in &[1_000usize, 100_000, 1_000_000] {
        run_established(&mut g, BenchmarkId::from_parameter(n), n, true);
    }
    g.finish();
    let mut g = c.benchmark_group("established_general_path");
    g.throughput(Throughput::Elements(BURST as u64));
    run_established(&mut g, BenchmarkId::from_parameter(100_000), 100_000, false);
    g.finish();
    // The flow log on (a syslog or IPFIX exporter configured): established
    // packets make no records; against "established" in the same run.
    let mut g = c.benchmark_group("established_flow_log");
    g.throughput(Throughput::Elements(BURST as u64));
    for &n in &[1_000usize, 100_000] {
        run_established_on(&mut g, BenchmarkId::from_parameter(n), pipeline_logged(n + n / 4), n);
    }
    g.finish();
    // A trace running for another host (issue 14, item 5): every packet
    // takes the traced path and is read against the filter, none is
    // recorded; against "established" in the same run (the cost with the
    // trace off is counted by callgrind, docs/trace.md).
    let mut g = c.benchmark_group("established_traced_elsewhere");
    g.throughput(Throughput::Elements(BURST as u64));
    for &n in &[1_000usize, 100_000] {
        run_established_on(&mut g, BenchmarkId::from_parameter(n), pipeline_traced_elsewhere(n + n / 4), n);
    }
    g.finish();
    // Connection limits configured (issue 15; every limit, none reached):
    // against "established" in the same run.
    let mut g = c.benchmark_group("established_limits");
    g.throughput(Throughput::Elements(BURST as u64));
    for &n in &[1_000usize, 100_000] {
        run_established_on(&mut g, BenchmarkId::from_parameter(n), pipeline_limited(n + n / 4), n);
    }
    g.finish();
    let mut g = c.benchmark_group("established_pat");
    g.throughput(Throughput::Elements(BURST as u64));
    for &n in &[1_000usize, 100_000] {
        run_established_on(&mut g, BenchmarkId::from_parameter(n), pipeline_pat(n + n / 4), n);
    }
    g.finish();
}

/// `pipeline` tracing a host none of the benchmark's packets is from or to.
fn pipeline_traced_elsewhere(n: usize) -> Pipeline {
    let mut p = pipeline(n);
    let f = dataplane::pipeline::trace::TraceFilter::parse("192.0.2.99").expect("filter");
    p.trace_start(f, dataplane::Timestamp(u64::MAX));
    p
}

/// `pipeline` with the flow log on, active records every 60 s.
fn pipeline_logged(n: usize) -> Pipeline {
    let mut p = pipeline(n);
    p.log_flows(Some(dataplane::Duration::from_secs(60)));
    p
}

fn bench_new_connections(c: &mut Criterion) {
    new_connections(c, "new_connections", pipeline);
    // A built record per connection (the log holds 4096: every one fits).
    new_connections(c, "new_connections_flow_log", pipeline_logged);
    new_connections(c, "new_pat_connections", pipeline_pat);
    // Every connection limit set (none reached): counted per class and per
    // client on admission (issue 15); against "new_connections".
    new_connections(c, "new_connections_limits", pipeline_limited);
    // Past max-embryonic: every SYN answered by the SYN proxy with a cookie
    // SYN-ACK (SipHash, the frame rewritten and sent back), no flow made.
    new_connections(c, "syn_proxy_cookies", pipeline_proxying);
}

fn new_connections(c: &mut Criterion, group: &str, pipeline: fn(usize) -> Pipeline) {
    const N: usize = 1024;
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(N as u64));
    let syns: Vec<[u8; FRAME_LEN]> = (0..N)
        .map(|i| {
            let (sport, dst) = flow(i);
            pad(PacketBuilder::new(HOST_MAC, IN_MAC, HOST, dst).tcp(
                sport,
                443,
                1000,
                0,
                SYN,
                64240,
                &[],
                b"",
            ))
        })
        .collect();
    // Every SYN is forwarded (and, with PAT, translated): checked once,
    // outside the timing.
    let mut check = pipeline(4096);
    for f in &syns {
        let v = check.process(Timestamp::from_secs(2), PortId(0), &mut VecBuf::new(f));
        assert!(matches!(v, dataplane::pipeline::Verdict::Forward(_)), "{group}: {v:?}");
    }
    g.bench_function("syn_1024_into_4096", |b| {
        b.iter_batched_ref(
            || (pipeline(4096), VecBuf::new(&syns[0])),
            |(p, buf)| {
                let t = Timestamp::from_secs(2);
                for f in &syns {
                    buf.reset(f, 128);
                    black_box(p.process(t, PortId(0), buf));
                }
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

/// Egress fragmentation (issue 11): a UDP datagram of `size` bytes of IPv4
/// (no DF) from a jumbo inside (MTU 9000) to a 1500-byte outside, through
/// an established flow, plus `drain_generated` handing the later fragments
/// to a sink (what the worker does after a burst). `whole_1500` is the same
/// flow's 1500-byte datagram, which fits: the per-packet reference of the
/// same run. Throughput counts frames out (fragments), so time per element
/// is the cost per fragment.
fn bench_fragmentation(c: &mut Criterion) {
    let mut g = c.benchmark_group("fragmentation");
    let mut p = pipeline_mtu(64, 9000, 1500);
    let dgram = |len: usize| {
        PacketBuilder { dont_frag: false, ..PacketBuilder::new(HOST_MAC, IN_MAC, HOST, std::net::Ipv4Addr::new(198, 18, 30, 1)) }
            .udp(5000, 53, &vec![0x42; len - 28])
    };
    let t = Timestamp::from_secs(2);
    // (The set-up's ARP reply is counted as `arp-consumed`.)
    let dropped_before = p.counters().dropped();
    // The flow, created by the first datagram.
    black_box(p.process(t, PortId(0), &mut VecBuf::new(&dgram(100))));
    for (name, size, frames) in [("whole_1500", 1500usize, 1u64), ("split_8000_into_6", 8000, 6)] {
        let f = dgram(size);
        let mut buf = VecBuf::new(&f);
        g.throughput(Throughput::Elements(frames));
        let mut out = 0usize;
        g.bench_function(name, |b| {
            b.iter(|| {
                buf.reset(&f, 128);
                black_box(p.process(t, PortId(0), &mut buf));
                p.drain_generated(|_, fr| out += fr.len());
            })
        });
        black_box(out);
    }
    assert_eq!(p.counters().dropped(), dropped_before, "every datagram forwarded");
    g.finish();
}

criterion_group!(benches, bench_established, bench_new_connections, bench_fragmentation);
criterion_main!(benches);
