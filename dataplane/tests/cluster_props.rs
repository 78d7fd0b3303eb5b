//! Property tests of a cluster node (`cluster_bed`, node A of three): any
//! bytes on any port, and every truncation of corrupted valid frames —
//! data frames and authentic CCL messages of every kind — never panic,
//! are always accounted for
//! (`packets == forwarded + consumed + replies + Σ drops`), and a dropped
//! frame from a data port is unchanged.

mod cluster_bed;

use cluster_bed::*;
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::ccl::{
    BatchWriter, CclKey, FlowKey, FlowOp, FlowRecord, ForwardedPacket, FramePath, Message, OwnerQuery, OwnerReply,
    RelayToOwner, Sealer, OPAQUE_LEN,
};
use dataplane::conntrack::tcp_flags::{ACK, SYN};
use dataplane::pipeline::{Pipeline, Verdict};
use dataplane::{Epoch, NodeId, PortId, Timestamp};
use proptest::prelude::*;

const A: usize = 0;

fn seeds() -> Vec<(PortId, Vec<u8>)> {
    let key = CclKey::new(NAME, KEY).unwrap();
    let mut s = Sealer::new(&key, NodeId(1), 3, 1001).unwrap();
    let path = FramePath { src_mac: ccl_mac(1), dst_mac: ccl_mac(0), src_ip: ccl_addr(1), dst_ip: ccl_addr(0) };
    let mut seal = |m: &Message<'_>| {
        let mut out = vec![0u8; 2048];
        let n = s.seal_frame(&path, Epoch(1), m, &mut out).unwrap();
        out.truncate(n);
        out
    };
    let t = tuple(HOST, 40000, SERVER, 80, 6);
    let flow = FlowKey::new(t).unwrap();
    let syn = from_host(1, SERVER).tcp(40000, 80, 1000, 0, SYN, 64240, &[], b"");
    let synack = from_outside(1, SERVER).tcp(80, 40000, 5000, 1001, SYN | ACK, 65535, &[], b"");
    let mut batch = vec![0u8; 512];
    let mut w = BatchWriter::new(&mut batch).unwrap();
    w.push(&FlowRecord {
        flow,
        owner: NodeId(2),
        op: FlowOp::Upsert,
        tcp_state: 2,
        flags: 0,
        seq_delta: 7,
        idle_timeout_s: 60,
        opaque: [0; OPAQUE_LEN],
    })
    .unwrap();
    let register = seal(&Message::FlowRegister(w.as_batch()));
    vec![
        (IN, from_host(A, SERVER).tcp(40000, 80, 1000, 0, SYN, 64240, &[], b"")),
        (OUT, from_outside(A, SERVER).tcp(80, 40001, 5000, 77, SYN | ACK, 65535, &[], b"")),
        (IN, from_host(A, SERVER).udp(5353, 53, b"query")),
        (OUT, from_outside(A, DNS).udp(53, 5353, b"answer")),
        (IN, from_host(A, SERVER).icmp(8, 0, (1, 2), b"ping")),
        (CCL, seal(&Message::OwnerQuery(OwnerQuery { query_id: 1, flow, elect_if_absent: true, local: false }))),
        (CCL, seal(&Message::OwnerReply(OwnerReply { query_id: 1, flow, owner: Some(NodeId(2)) }))),
        (CCL, register),
        (CCL, seal(&Message::ForwardedPacket(ForwardedPacket { ingress_iface: 0, flow_hint: None, frame: &syn }))),
        (CCL, seal(&Message::ForwardedPacket(ForwardedPacket { ingress_iface: 9, flow_hint: None, frame: &synack }))),
        (CCL, seal(&Message::RelayToOwner(RelayToOwner { ingress_iface: 1, frame: &synack }))),
    ]
}

fn check_one(p: &mut Pipeline, now: Timestamp, port: PortId, frame: &[u8]) -> Result<(), TestCaseError> {
    let mut buf = VecBuf::new(frame);
    let v = p.process(now, port, &mut buf);
    if let Verdict::Drop(r) = v {
        if port != CCL {
            prop_assert_eq!(buf.data(), frame, "dropped ({}) frame modified", r);
        }
    }
    p.flush(now);
    p.drain_generated(|_, f| assert!(f.len() >= 42));
    let c = p.counters();
    prop_assert_eq!(c.packets, c.emitted() + c.consumed + c.dropped());
    Ok(())
}

fn node() -> Pipeline {
    Pipeline::new(config(A, 3, true)).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes(frames in proptest::collection::vec((0u16..4, proptest::collection::vec(any::<u8>(), 0..160)), 1..16)) {
        let mut p = node();
        for (i, (port, f)) in frames.iter().enumerate() {
            check_one(&mut p, Timestamp::from_millis(i as u64), PortId(*port), f)?;
        }
        prop_assert_eq!(p.counters().packets, frames.len() as u64);
    }

    #[test]
    fn truncated_and_corrupted(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4)) {
        let mut p = node();
        let mut n = 0u64;
        for (port, mut f) in seeds() {
            for &(i, x) in &flips {
                let at = i % f.len();
                f[at] ^= x;
            }
            for len in (0..=f.len()).rev() {
                check_one(&mut p, Timestamp::from_millis(len as u64), port, &f[..len])?;
                n += 1;
            }
            p.poll_timers(Timestamp::from_secs(n));
        }
        prop_assert_eq!(p.counters().packets, n);
    }
}
