//! Fuzz the CCL decoder on untrusted bytes.
//!
//! Each input is fed, whole, to `Opener::open_frame` (Ethernet/IPv4/UDP +
//! CCL) and `Opener::open` (a bare datagram), and — as kind byte plus
//! payload — to `Message::parse`, `ControlMessage::parse` and every payload
//! parser directly (the control lcore's `open_control` too), which
//! is what runs after a MAC verified. Checked: no panic; every open is
//! counted exactly once; a payload that parses re-emits to the same bytes,
//! and sealing the parsed message (inside a UDP frame) opens back to it.
//!
//! Run: `cargo fuzz run ccl_decode` from `dataplane/` (nightly), or the
//! stable recipe in `parse_packet.rs` with the `ccl_decode` binary and
//! `corpus/ccl_decode`.
#![no_main]

use dataplane::ccl::{
    CclKey, ControlMessage, FlowBatch, FlowKey, FlowRecord, FlowTransfer, ForwardedBatch, ForwardedPacket, FramePath,
    Heartbeat, JoinReply, JoinRequest, Message, Opener, OwnerQuery, OwnerReply, RelayToOwner, Sealer, SyncChunk,
    SyncDone, SyncRequest, TableUpdate, XlateRequest, QueryRequest, CONTROL_CHANNEL,
};
use dataplane::{Epoch, NodeId};
use libfuzzer_sys::fuzz_target;
use std::net::Ipv4Addr;

const PATH: FramePath = FramePath {
    src_mac: [2, 0, 0, 0, 9, 1],
    dst_mac: [0xff; 6],
    src_ip: Ipv4Addr::new(169, 254, 9, 1),
    dst_ip: Ipv4Addr::new(169, 254, 9, 255),
};

fuzz_target!(|data: &[u8]| {
    let key = CclKey::new("fuzz", "fuzz-secret").expect("non-empty secret");
    let mut o = Opener::new(&key, NodeId(2));
    let _ = o.open_frame(data);
    let _ = o.open(data);
    let _ = o.open_control_frame(data);
    let _ = o.open_control(data);
    let c = o.counters();
    assert_eq!(c.total_drops() + c.total_rx(), 4);

    let _ = Heartbeat::parse(data);
    let _ = JoinRequest::parse(data);
    let _ = JoinReply::parse(data);
    let _ = SyncRequest::parse(data);
    let _ = SyncChunk::parse(data);
    let _ = TableUpdate::parse(data);
    let _ = XlateRequest::parse(data);
    let _ = QueryRequest::parse(data);
    let _ = OwnerQuery::parse(data);
    let _ = OwnerReply::parse(data);
    let _ = ForwardedPacket::parse(data);
    let _ = RelayToOwner::parse(data);
    let _ = FlowTransfer::parse(data);
    let _ = SyncDone::parse(data);
    if let Ok(b) = ForwardedBatch::parse(data) {
        assert_eq!(b.frames().count(), b.len());
        assert_eq!(b.wire_len(), data.len());
    }
    let _ = FlowKey::parse(data);
    let _ = FlowRecord::parse(data);
    if let Ok(b) = FlowBatch::parse(data) {
        assert_eq!(b.iter().count(), b.len());
    }

    if let [kind, payload @ ..] = data {
        if let Ok(m) = Message::parse(*kind, payload) {
            let mut out = vec![0u8; m.wire_len()];
            assert_eq!(m.emit(&mut out), Ok(payload.len()));
            assert_eq!(&out[..], payload);
            let mut s = Sealer::new(&key, NodeId(1), 0, 1).expect("valid sealer");
            let mut frame = vec![0u8; payload.len() + 200];
            if let Ok(n) = s.seal_frame(&PATH, Epoch(1), &m, &mut frame) {
                let got = o.open_frame(&frame[..n]).expect("own sealed frame opens");
                assert_eq!(got.msg, m);
            }
        }
        if let Ok(m) = ControlMessage::parse(*kind, payload) {
            let mut out = vec![0u8; m.wire_len()];
            assert_eq!(m.emit(&mut out), Ok(payload.len()));
            assert_eq!(&out[..], payload);
            let mut s = Sealer::new(&key, NodeId(1), CONTROL_CHANNEL, 1).expect("valid sealer");
            let mut frame = vec![0u8; payload.len() + 200];
            if let Ok(n) = s.seal_control_frame(&PATH, Epoch(1), &m, &mut frame) {
                let got = o.open_control_frame(&frame[..n]).expect("own sealed frame opens");
                assert_eq!(got.msg, m);
            }
        }
    }
});
