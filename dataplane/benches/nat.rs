//! NAT building blocks' cost (issue 13): compiling 10 000 rules (N9), the
//! first-match lookup at 10 and at 10 000 rules, the PAT rewrite of a TCP
//! segment, a port allocation and its free. Run:
//! `cargo bench -p dataplane --bench nat`.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dataplane::nat::{rewrite, BlockRef, Endpoint, Geometry, PortAllocator, PortClass, RuleKind, RuleSpec, RuleTable};
use dataplane::route::IfIndex;
use dataplane::wire::build::{ipv4_offset, PacketBuilder};
use std::net::Ipv4Addr;

const BATCH: usize = 1024;

fn rules(n: u32) -> Vec<RuleSpec> {
    (0..n)
        .map(|i| RuleSpec {
            kind: if i % 10 == 0 { RuleKind::StaticNat } else { RuleKind::DynamicPat },
            real_iface: (i % 3 != 0).then_some(IfIndex((i % 2) as u16)),
            mapped_iface: None,
            source: (Ipv4Addr::from(0x0a00_0000 + i * 256), 24),
            mapped: (i % 10 == 0).then(|| (Ipv4Addr::from(0xc000_0000 + i * 256), 24)),
            ports: None,
            pool: (i % 10 != 0).then_some(0),
            per_session: Default::default(),
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("nat_rules");
    g.sample_size(10);
    let ten_k = rules(10_000);
    g.bench_function("build/10000", |b| b.iter(|| RuleTable::build(black_box(ten_k.clone()), 2)));
    g.finish();

    let sources: Vec<Ipv4Addr> = (0..BATCH as u32)
        .map(|i| Ipv4Addr::from(0x0a00_0000 + (i.wrapping_mul(2_654_435_761) % (10_000 * 256))))
        .collect();
    let mut g = c.benchmark_group("nat_rules");
    g.throughput(Throughput::Elements(BATCH as u64));
    for n in [10u32, 10_000] {
        let t = RuleTable::build(rules(n), 2);
        g.bench_with_input(BenchmarkId::new("outbound", n), &t, |b, t| {
            b.iter(|| {
                sources.iter().fold(0u32, |acc, &s| acc ^ t.outbound(IfIndex(1), black_box(s), 6, 40000).unwrap_or(0))
            })
        });
    }
    g.finish();

    let frame = PacketBuilder::new([2; 6], [4; 6], Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(192, 0, 2, 80)).tcp(
        40000,
        443,
        1,
        2,
        0x10,
        1000,
        &[],
        &[0u8; 64],
    );
    let ip = frame[ipv4_offset(&frame).unwrap()..].to_vec();
    let mut g = c.benchmark_group("nat_rewrite");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("tcp_snat", |b| {
        let mut p = ip.clone();
        b.iter(|| {
            for i in 0..BATCH as u16 {
                let _ = rewrite(black_box(&mut p), Endpoint::Source, Ipv4Addr::new(198, 51, 100, 7), Some(1024 + i));
            }
        })
    });
    g.finish();

    let geometry = Geometry::new(512, false).unwrap();
    let mut a = PortAllocator::new(geometry, None, 0);
    for b in 0..8 {
        a.add_block(BlockRef { addr: 0, block: b }, Ipv4Addr::new(198, 51, 100, 7));
    }
    let mut g = c.benchmark_group("nat_alloc");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("alloc+free/plain", |b| {
        let mut held = Vec::with_capacity(BATCH);
        b.iter(|| {
            for i in 0..BATCH as u32 {
                held.push(a.alloc(PortClass::Tcp, Ipv4Addr::from(0x0a00_0000 + i)).unwrap());
            }
            for m in held.drain(..) {
                a.free(PortClass::Tcp, m.block, m.port);
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
