//! Pipeline throughput (criterion).
//!
//! `established/N`: N TCP flows are opened through the pipeline (SYN,
//! SYN-ACK, ACK each) with both neighbours' ARP entries resolved; then each
//! iteration processes a burst of 32 frames, round-robin over the flows, each
//! a 60-byte pure ACK inside → outside that is forwarded (flow lookup, TCP
//! window check, ACL not consulted, route, ARP, TTL/checksum, MAC rewrite).
//! The pipeline rewrites frames in place, so every packet first restores its
//! pristine 60-byte copy into a `VecBuf` (one `copy_from_slice`, included in
//! the timing — a few ns).
//!
//! `new_connections`: SYNs for distinct tuples into a fresh table (1024 per
//! iteration, table of 4096; table creation is outside the timing): ACL
//! evaluation, flow insert, forwarding.
//!
//! Throughput is in packets (criterion `Throughput::Elements`): criterion
//! prints it as "elem/s" — Melem/s = Mpps; time / 32 = ns per packet.

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use dataplane::buf::VecBuf;
use dataplane::conntrack::tcp_flags::{ACK, SYN};
use dataplane::conntrack::Timeouts;
use dataplane::pipeline::{InterfaceSpec, Pipeline, PipelineConfig, RouteSpec, Verdict};
use dataplane::wire::arp::Operation;
use dataplane::wire::build::{self, PacketBuilder};
use dataplane::{Duration, PortId, Timestamp};
use std::hint::black_box;
use std::net::Ipv4Addr;

const IN_MAC: [u8; 6] = [2, 0, 0, 0, 1, 1];
const OUT_MAC: [u8; 6] = [2, 0, 0, 0, 2, 1];
const HOST_MAC: [u8; 6] = [2, 0, 0, 0, 1, 10];
const GW_MAC: [u8; 6] = [2, 0, 0, 0, 2, 254];
const IN_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
const OUT_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 1);
const HOST: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 10);
const GW: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 254);
const BURST: usize = 32;
const FRAME_LEN: usize = 60;

fn pipeline(flows: usize) -> Pipeline {
    let iface = |name: &str, port, mac, addr, level| InterfaceSpec {
        name: name.into(),
        port: PortId(port),
        mac,
        addr,
        prefix_len: 24,
        security_level: level,
        vlan: None,
    };
    let mut p = Pipeline::new(PipelineConfig {
        interfaces: vec![
            iface("inside", 0, IN_MAC, IN_ADDR, 100),
            iface("outside", 1, OUT_MAC, OUT_ADDR, 0),
        ],
        routes: vec![RouteSpec {
            destination: Ipv4Addr::UNSPECIFIED,
            prefix_len: 0,
            via: GW,
        }],
        rules: vec![],
        timeouts: Timeouts::default(),
        flow_capacity: flows,
        arp_capacity: 64,
        arp_timeout: Duration::from_secs(3600),
        arp_retry: Duration::from_secs(1),
        static_neighbors: vec![],
        cluster: None,
    })
    .unwrap();
    let t = Timestamp::from_secs(1);
    let req = build::arp(
        HOST_MAC,
        [0xff; 6],
        None,
        Operation::Request,
        HOST_MAC,
        HOST,
        [0; 6],
        IN_ADDR,
    );
    assert!(matches!(
        p.process(t, PortId(0), &mut VecBuf::new(&req)),
        Verdict::Forward(_)
    ));
    let rep = build::arp(
        GW_MAC,
        OUT_MAC,
        None,
        Operation::Reply,
        GW_MAC,
        GW,
        OUT_MAC,
        OUT_ADDR,
    );
    p.process(t, PortId(1), &mut VecBuf::new(&rep));
    p
}

/// Flow i: HOST:(1024 + i % 60000) → 100.64.0.0 + i / 60000, port 443.
fn flow(i: usize) -> (u16, Ipv4Addr) {
    (
        1024 + (i % 60_000) as u16,
        Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + (i / 60_000) as u32),
    )
}

fn pad(mut v: Vec<u8>) -> [u8; FRAME_LEN] {
    v.resize(FRAME_LEN, 0);
    let mut a = [0u8; FRAME_LEN];
    a.copy_from_slice(&v);
    a
}

/// Open `n` flows; return one pristine established-ACK frame per flow.
fn established(p: &mut Pipeline, n: usize) -> Vec<[u8; FRAME_LEN]> {
    let t = Timestamp::from_secs(1);
    let mut buf = VecBuf::new(&[0u8; FRAME_LEN]);
    let mut frames = Vec::with_capacity(n);
    for i in 0..n {
        let (sport, dst) = flow(i);
        let out = PacketBuilder::new(HOST_MAC, IN_MAC, HOST, dst);
        let back = PacketBuilder::new(GW_MAC, OUT_MAC, dst, HOST);
        for (port, f) in [
            (0, out.tcp(sport, 443, 1000, 0, SYN, 64240, &[], b"")),
            (
                1,
                back.tcp(443, sport, 9000, 1001, SYN | ACK, 65535, &[], b""),
            ),
            (0, out.tcp(sport, 443, 1001, 9001, ACK, 64240, &[], b"")),
        ] {
            buf.reset(&f, 128);
            let v = p.process(t, PortId(port), &mut buf);
            assert!(
                matches!(v, Verdict::Forward(_)),
                "handshake of flow {i}: {v:?}"
            );
        }
        frames.push(pad(out.tcp(sport, 443, 1001, 9001, ACK, 64240, &[], b"")));
    }
    assert_eq!(p.flow_count(), n);
    frames
}

fn bench_established(c: &mut Criterion) {
    eprintln!(
        "note: the pipeline rewrites frames in place (TTL, MACs); each packet first restores \
         its pristine 60-byte copy into the buffer (copy_from_slice, included in the timing). \
         time/32 = ns per packet; Melem/s = Mpps."
    );
    let mut g = c.benchmark_group("established");
    g.throughput(Throughput::Elements(BURST as u64));
    for &n in &[1_000usize, 100_000, 1_000_000] {
        let mut p = pipeline(n + n / 4);
        let frames = established(&mut p, n);
        let mut bufs: Vec<VecBuf> = (0..BURST).map(|_| VecBuf::new(&frames[0])).collect();
        let t = Timestamp::from_secs(2);
        let mut next = 0usize;
        let dropped_before = p.counters().dropped();
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                for buf in bufs.iter_mut() {
                    buf.reset(&frames[next], 128);
                    next += 1;
                    if next == frames.len() {
                        next = 0;
                    }
                    black_box(p.process(t, PortId(0), buf));
                }
            })
        });
        assert_eq!(
            p.counters().dropped(),
            dropped_before,
            "established frames must all be forwarded"
        );
    }
    g.finish();
}

fn bench_new_connections(c: &mut Criterion) {
    const N: usize = 1024;
    let mut g = c.benchmark_group("new_connections");
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

criterion_group!(benches, bench_established, bench_new_connections);
criterion_main!(benches);
