//! Shared setup for the pipeline benchmark and the `pipeline_profile`
//! example: a two-interface pipeline (inside 198.18.1.1/24 level 100,
//! outside 198.18.2.1/24 level 0, default route via 198.18.2.254) with both
//! neighbours resolved, and N established TCP flows — also through PAT
//! (`pipeline_pat`, `established_pat`).
#![allow(dead_code)]

use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::conntrack::tcp_flags::{ACK, SYN};
use dataplane::conntrack::Timeouts;
use dataplane::pipeline::{InterfaceSpec, Pipeline, PipelineConfig, RouteSpec, Verdict};
use dataplane::wire::arp::Operation;
use dataplane::wire::build::{self, PacketBuilder};
use dataplane::{Duration, PortId, Timestamp};
use std::net::Ipv4Addr;

pub const IN_MAC: [u8; 6] = [2, 0, 0, 0, 1, 1];
pub const OUT_MAC: [u8; 6] = [2, 0, 0, 0, 2, 1];
pub const HOST_MAC: [u8; 6] = [2, 0, 0, 0, 1, 10];
pub const GW_MAC: [u8; 6] = [2, 0, 0, 0, 2, 254];
pub const IN_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
pub const OUT_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 1);
pub const HOST: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 10);
pub const GW: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 254);
pub const BURST: usize = 32;
pub const FRAME_LEN: usize = 60;

pub fn pipeline(flows: usize) -> Pipeline {
    pipeline_mtu(flows, 1500, 1500)
}

/// `pipeline` with the inside and outside MTUs given.
pub fn pipeline_mtu(flows: usize, in_mtu: u16, out_mtu: u16) -> Pipeline {
    let iface = |name: &str, port, mac, addr, level, mtu| InterfaceSpec {
        name: name.into(),
        port: PortId(port),
        mac,
        addr,
        prefix_len: 24,
        security_level: level,
        vlan: None,
        mtu,
        reverse_path: dataplane::pipeline::ReversePath::Strict,
    };
    let mut p = Pipeline::new(PipelineConfig {
        interfaces: vec![
            iface("inside", 0, IN_MAC, IN_ADDR, 100, in_mtu),
            iface("outside", 1, OUT_MAC, OUT_ADDR, 0, out_mtu),
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
        icmp_errors: Default::default(),
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
pub fn flow(i: usize) -> (u16, Ipv4Addr) {
    (
        1024 + (i % 60_000) as u16,
        Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + (i / 60_000) as u32),
    )
}

pub fn pad(mut v: Vec<u8>) -> [u8; FRAME_LEN] {
    v.resize(FRAME_LEN, 0);
    let mut a = [0u8; FRAME_LEN];
    a.copy_from_slice(&v);
    a
}

/// Open `n` flows; return one pristine established-ACK frame per flow.
pub fn established(p: &mut Pipeline, n: usize) -> Vec<[u8; FRAME_LEN]> {
    let t = Timestamp::from_secs(1);
    let mut buf = VecBuf::new(&[0u8; FRAME_LEN]);
    let mut frames = Vec::with_capacity(n);
    for i in 0..n {
        let (sport, dst) = flow(i);
        let out = PacketBuilder::new(HOST_MAC, IN_MAC, HOST, dst);
        // The SYN leaves with the source the server answers to: the host's
        // own, or its mapped one through PAT.
        buf.reset(&out.tcp(sport, 443, 1000, 0, SYN, 64240, &[], b""), 128);
        let v = p.process(t, PortId(0), &mut buf);
        assert!(matches!(v, Verdict::Forward(_)), "SYN of flow {i}: {v:?}");
        let l3 = &buf.data()[14..];
        let to = Ipv4Addr::new(l3[12], l3[13], l3[14], l3[15]);
        let to_port = u16::from_be_bytes([l3[20], l3[21]]);
        let back = PacketBuilder::new(GW_MAC, OUT_MAC, dst, to);
        for (port, f) in [
            (1, back.tcp(443, to_port, 9000, 1001, SYN | ACK, 65535, &[], b"")),
            (0, out.tcp(sport, 443, 1001, 9001, ACK, 64240, &[], b"")),
        ] {
            buf.reset(&f, 128);
            let v = p.process(t, PortId(port), &mut buf);
            assert!(matches!(v, Verdict::Forward(_)), "handshake of flow {i}: {v:?}");
        }
        frames.push(pad(out.tcp(sport, 443, 1001, 9001, ACK, 64240, &[], b"")));
    }
    assert_eq!(p.flow_count(), n);
    frames
}

/// The PAT pool of `pipeline_pat`: 16 addresses, over a million ports.
pub const PAT_POOL: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 0);

/// `pipeline(flows)` translating the inside /24 by PAT to the 16
/// addresses from `PAT_POOL` (512-port blocks, plain PAT) on the way out.
pub fn pipeline_pat(flows: usize) -> Pipeline {
    use dataplane::nat::{RuleKind, RuleSpec};
    use dataplane::pipeline::{NatSpec, PatSpec, PoolSpec};
    let mut p = pipeline(flows);
    let spec = NatSpec {
        rules: vec![RuleSpec {
            kind: RuleKind::DynamicPat,
            real_iface: Some(dataplane::route::IfIndex(0)),
            mapped_iface: Some(dataplane::route::IfIndex(1)),
            source: (Ipv4Addr::new(198, 18, 1, 0), 24),
            mapped: None,
            ports: None,
            pool: Some(0),
            per_session: Default::default(),
        }],
        pools: vec![PoolSpec {
            addresses: (0..16u32).map(|i| Ipv4Addr::from(u32::from(PAT_POOL) + i)).collect(),
            pat: Some(PatSpec { block_size: 512, reserved_ports: false, max_per_host: None }),
        }],
        xlate_capacity: flows.max(1),
        xlate_timeout: Duration::from_secs(3600),
        host_capacity: 16,
    };
    p.set_nat(&spec).unwrap();
    p
}


/// A fixed pseudo-random visiting order of `n` flows (a permutation, so
/// every flow is visited once per round, in an order the hardware
/// prefetcher cannot follow — as with real traffic).
pub fn shuffled(n: usize) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n as u32).collect();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// The frames of all flows in arrival order: one per flow, flows in
/// `shuffled` order. Read front to back like a NIC's receive ring (frames
/// arrive one after another in memory), while the flows they hit are
/// spread over the table in an order no prefetcher can guess.
pub fn arrival_stream(frames: &[[u8; FRAME_LEN]]) -> Vec<[u8; FRAME_LEN]> {
    shuffled(frames.len()).into_iter().map(|i| frames[i as usize]).collect()
}

/// `pipeline` with every connection limit set globally (max-conns,
/// max-embryonic, per-client-max, per-client-embryonic-max), far above
/// what the benchmark opens: the counting, never a refusal.
pub fn pipeline_limited(n: usize) -> Pipeline {
    let mut p = pipeline(n);
    let high = Some(1 << 30);
    let all = dataplane::conntrack::LimitSet { max_conns: high, max_embryonic: high, per_client_max: high, per_client_embryonic_max: high, syn_proxy: true };
    p.set_limits(&dataplane::conntrack::LimitSpec { global: all, rules: vec![] });
    p
}

/// `pipeline` whose global `max-embryonic` is 1 with the SYN proxy on (the
/// default), the node alone: past the first SYN every one is answered with
/// a cookie (`syn_proxy_cookies`).
pub fn pipeline_proxying(n: usize) -> Pipeline {
    let mut p = pipeline(n);
    let set = dataplane::conntrack::LimitSet { max_embryonic: Some(1), ..Default::default() };
    p.set_limits(&dataplane::conntrack::LimitSpec { global: set, rules: vec![] });
    p.set_remote_limits(&dataplane::conntrack::limits::Remote { places: 1, ..Default::default() });
    p
}
