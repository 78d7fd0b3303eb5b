//! Director lookup cost: flow hash, director, full ranking and backups, for
//! 2..16 members. Run: `cargo bench -p dataplane --bench director`.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dataplane::cluster::{flow_hash, CookieCodec, DirectorTable, MemberSet};
use dataplane::{Epoch, FiveTuple, NodeId};
use std::net::{Ipv4Addr, Ipv6Addr};

const BATCH: usize = 1024;

fn tuples_v4() -> Vec<FiveTuple> {
    (0..BATCH as u32)
        .map(|i| FiveTuple {
            src: Ipv4Addr::from(0x0a00_0000 | i.wrapping_mul(2_654_435_761) >> 8).into(),
            dst: Ipv4Addr::from(0xc633_6400 | (i & 0xff)).into(),
            proto: 6,
            src_port: 1024 + (i.wrapping_mul(40_503) as u16 % 60_000),
            dst_port: 443,
        })
        .collect()
}

fn tuples_v6() -> Vec<FiveTuple> {
    (0..BATCH as u128)
        .map(|i| FiveTuple {
            src: Ipv6Addr::from(0x2001_0db8_u128 << 96 | i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).into(),
            dst: Ipv6Addr::from(0x2001_0db8_ffff_u128 << 80 | 0x80).into(),
            proto: 6,
            src_port: 1024 + i as u16,
            dst_port: 443,
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("flow_hash");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (name, ts) in [("v4", tuples_v4()), ("v6", tuples_v6())] {
        g.bench_function(name, |b| {
            b.iter(|| ts.iter().fold(0u64, |acc, t| acc ^ flow_hash(black_box(t))))
        });
    }
    g.finish();

    let hashes: Vec<u64> = tuples_v4().iter().map(flow_hash).collect();
    let mut g = c.benchmark_group("director");
    g.throughput(Throughput::Elements(BATCH as u64));
    for n in [2u8, 4, 8, 16] {
        let set = MemberSet::from_nodes(Epoch(1), (0..n).map(NodeId)).unwrap();
        let t = DirectorTable::new(&set).unwrap();
        g.bench_with_input(BenchmarkId::new("director", n), &t, |b, t| {
            b.iter(|| hashes.iter().fold(0u8, |acc, &h| acc ^ t.director(black_box(h)).0))
        });
        g.bench_with_input(BenchmarkId::new("ranking", n), &t, |b, t| {
            b.iter(|| hashes.iter().fold(0u8, |acc, &h| acc ^ t.ranking(black_box(h)).as_slice()[0].0))
        });
        g.bench_with_input(BenchmarkId::new("backups", n), &t, |b, t| {
            b.iter(|| hashes.iter().fold(0usize, |acc, &h| acc ^ t.backups(black_box(h), NodeId(0)).len()))
        });
        g.bench_with_input(BenchmarkId::new("hash+director", n), &t, |b, t| {
            let ts = tuples_v4();
            b.iter(|| ts.iter().fold(0u8, |acc, tu| acc ^ t.director(flow_hash(black_box(tu))).0))
        });
    }
    g.finish();

    let codec = CookieCodec::new(*b"clusterfw-bench!");
    let mut g = c.benchmark_group("cookie");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("encode+decode", |b| {
        b.iter(|| {
            (0..BATCH as u32).fold(0u8, |acc, i| {
                let isn = codec.encode(NodeId((i & 15) as u8), black_box(i.wrapping_mul(2_654_435_761)));
                acc ^ codec.decode(isn).map_or(0, |n| n.0)
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
