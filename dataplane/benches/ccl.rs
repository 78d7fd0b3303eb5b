//! CCL seal + open cost per forwarded packet (criterion).
//!
//! `seal_open/N`: a `ForwardedPacket` carrying an N-byte Ethernet frame
//! (64 and 1500) is sealed (header, payload copy, BLAKE3 keyed hash) and
//! opened (framing checks, replay window, MAC, payload decode) — one
//! iteration is one packet through a forwarder and its owner.
//! `seal_open_frame/N`: the same inside Ethernet + IPv4 + UDP (IPv4 header
//! checksum on both sides). Every iteration uses the next sequence number,
//! so the replay window slides as in production.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dataplane::ccl::{CclKey, ForwardedPacket, FramePath, Message, Opener, Sealer};
use dataplane::{Epoch, NodeId};
use std::hint::black_box;
use std::net::Ipv4Addr;

const PATH: FramePath = FramePath {
    src_mac: [2, 0, 0, 0, 9, 1],
    dst_mac: [2, 0, 0, 0, 9, 2],
    src_ip: Ipv4Addr::new(169, 254, 9, 1),
    dst_ip: Ipv4Addr::new(169, 254, 9, 2),
};

fn bench(c: &mut Criterion) {
    let key = CclKey::new("bench", "bench secret").unwrap();
    for (name, framed) in [("seal_open", false), ("seal_open_frame", true)] {
        let mut g = c.benchmark_group(name);
        for len in [64usize, 1500] {
            let frame: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut s = Sealer::new(&key, NodeId(1), 0, 1).unwrap();
            let mut o = Opener::new(&key, NodeId(2));
            let mut out = vec![0u8; 2048];
            g.throughput(Throughput::Elements(1));
            g.bench_with_input(BenchmarkId::from_parameter(len), &frame, |b, frame| {
                b.iter(|| {
                    let m = Message::ForwardedPacket(ForwardedPacket {
                        ingress_iface: 1,
                        flow_hint: None,
                        frame: black_box(frame),
                    });
                    let n = if framed {
                        s.seal_frame(&PATH, Epoch(1), &m, &mut out).unwrap()
                    } else {
                        s.seal(Epoch(1), &m, &mut out).unwrap()
                    };
                    let r = if framed { o.open_frame(&out[..n]) } else { o.open(&out[..n]) };
                    black_box(r.unwrap().seq)
                })
            });
            assert_eq!(o.counters().total_drops(), 0);
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
