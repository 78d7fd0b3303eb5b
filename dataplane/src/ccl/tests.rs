//! End-to-end tests of the CCL codec: seal → open for every kind, a pinned
//! byte fixture, authentication, replay, framing, counters, and properties
//! over truncations, bit flips and random bytes.

use super::*;
use crate::{Epoch, FiveTuple, NodeId};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const NAME: &str = "lab";
const SECRET: &str = "correct horse battery staple";
const INC: u32 = 1_700_000_000;
const A: NodeId = NodeId(1);
const B: NodeId = NodeId(2);

fn key() -> CclKey {
    CclKey::new(NAME, SECRET).unwrap()
}
fn sealer() -> Sealer {
    Sealer::new(&key(), A, 0, INC).unwrap()
}
fn opener() -> Opener {
    Opener::new(&key(), B)
}

fn v4_key() -> FlowKey {
    FlowKey::new(FiveTuple {
        src: Ipv4Addr::new(198, 18, 1, 10).into(),
        dst: Ipv4Addr::new(198, 18, 2, 20).into(),
        proto: 6,
        src_port: 40000,
        dst_port: 80,
    })
    .unwrap()
}
fn v6_key() -> FlowKey {
    FlowKey::new(FiveTuple {
        src: "2001:db8::10".parse::<Ipv6Addr>().unwrap().into(),
        dst: "2001:db8:1::20".parse::<Ipv6Addr>().unwrap().into(),
        proto: 17,
        src_port: 53000,
        dst_port: 53,
    })
    .unwrap()
}

fn record(flow: FlowKey, i: u32) -> FlowRecord {
    let mut opaque = [0u8; OPAQUE_LEN];
    opaque[0] = i as u8;
    opaque[OPAQUE_LEN - 1] = 0xaa;
    FlowRecord {
        flow,
        owner: NodeId((i % 16) as u8),
        op: if matches!(i % 3, 0) { FlowOp::Delete } else { FlowOp::Upsert },
        tcp_state: (i % 11) as u8,
        flags: 0x5a,
        seq_delta: 0x8000_0000 ^ i,
        idle_timeout_s: 3600 + i,
        opaque,
    }
}

/// A 64-byte Ethernet frame to tunnel.
fn frame(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7) as u8).collect()
}

/// Seal `msg` with `s` and open it with `o`, returning the datagram too.
fn seal(s: &mut Sealer, msg: &Message<'_>) -> Vec<u8> {
    let mut out = vec![0u8; 2048];
    let n = s.seal(Epoch(5), msg, &mut out).unwrap();
    out.truncate(n);
    out
}

/// Build an authentic datagram with arbitrary header fields and payload
/// bytes (what a buggy or newer peer holding the key could send).
fn forge(k: &CclKey, hdr: CclHeader, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; HEADER_LEN + payload.len() + TAG_LEN];
    hdr.emit(&mut b).unwrap();
    b[HEADER_LEN..HEADER_LEN + payload.len()].copy_from_slice(payload);
    let t = k.tag(&b[..HEADER_LEN + payload.len()]);
    let l = b.len();
    b[l - TAG_LEN..].copy_from_slice(&t);
    b
}

fn header(seq: u64) -> CclHeader {
    CclHeader {
        kind: MessageKind::Heartbeat as u8,
        flags: 0,
        sender: A,
        channel: 0,
        cluster_id: key().cluster_id().0,
        incarnation: INC,
        seq,
        epoch: Epoch(1),
        payload_len: 4,
    }
}

fn all_messages<'a>(batch_buf: &'a mut [u8], fr: &'a [u8], fam6: bool) -> Vec<Message<'a>> {
    let k = if fam6 { v6_key() } else { v4_key() };
    // The transfer's record lives behind the batch in the same buffer.
    let (batch_buf, rec_buf) = batch_buf.split_at_mut(400);
    let rn = record(k, 4).emit(rec_buf).unwrap();
    let rec_bytes: &'a [u8] = &rec_buf[..rn];
    let mut w = BatchWriter::new(batch_buf).unwrap();
    for i in 0..3 {
        w.push(&record(if i == 1 { v4_key() } else { k }, i)).unwrap();
    }
    let n = w.bytes();
    let batch = FlowBatch::parse(&batch_buf[..n]).unwrap();
    vec![
        Message::Heartbeat(Heartbeat { priority: 10, state: 2, member_bitmap: 0x8007, ..Heartbeat::default() }),
        Message::OwnerQuery(OwnerQuery { query_id: 77, flow: k, elect_if_absent: true, local: false }),
        Message::OwnerQuery(OwnerQuery { query_id: 78, flow: k, elect_if_absent: false, local: false }),
        Message::OwnerReply(OwnerReply { query_id: 77, flow: k, owner: Some(NodeId(15)) }),
        Message::OwnerReply(OwnerReply { query_id: 78, flow: k, owner: None }),
        Message::FlowRegister(batch),
        Message::StateUpdate(batch),
        Message::ForwardedPacket(ForwardedPacket { ingress_iface: 3, flow_hint: None, frame: fr }),
        Message::ForwardedPacket(ForwardedPacket { ingress_iface: 4, flow_hint: Some(k), frame: fr }),
        Message::RelayToOwner(RelayToOwner { ingress_iface: 1, frame: fr }),
        Message::ToControl(RelayToOwner { ingress_iface: 2, frame: fr }),
        Message::FlowTransfer(FlowTransfer::new(9, rec_bytes).unwrap()),
        Message::SyncDone(SyncDone { epoch: Epoch(0x0102_0304_0506_0708), records: 0x0a0b_0c0d, round: 2 }),
        Message::SyncAgain(SyncAgain { epoch: Epoch(0x0102_0304_0506_0708), round: 3 }),
    ]
}

#[test]
fn round_trip_every_kind_v4_and_v6() {
    for fam6 in [false, true] {
        let mut bb = [0u8; 512];
        let fr = frame(64);
        let msgs = all_messages(&mut bb, &fr, fam6);
        let mut s = sealer();
        let mut o = opener();
        for (i, m) in msgs.iter().enumerate() {
            let d = seal(&mut s, m);
            assert_eq!(d.len(), Sealer::sealed_len(m));
            let got = o.open(&d).unwrap();
            assert_eq!(got.msg, *m, "{m:?}");
            assert_eq!((got.sender, got.channel, got.incarnation), (A, 0, INC));
            assert_eq!((got.epoch, got.seq, got.flags), (Epoch(5), i as u64 + 1, 0));
            // Re-emitting the decoded payload reproduces the bytes.
            let mut p = vec![0u8; got.msg.wire_len()];
            assert_eq!(got.msg.emit(&mut p), Ok(p.len()));
            assert_eq!(&p[..], &d[HEADER_LEN..d.len() - TAG_LEN]);
        }
        assert_eq!(o.counters().total_rx(), msgs.len() as u64);
        assert_eq!(o.counters().rx(MessageKind::OwnerQuery), 2);
        assert_eq!(o.counters().rx(MessageKind::ForwardedPacket), 2);
        assert_eq!(s.counters().tx(MessageKind::StateUpdate), 1);
        assert_eq!(s.counters().total_tx(), msgs.len() as u64);
        assert_eq!(o.counters().total_drops(), 0);
        assert_eq!(o.counters().rx_bytes, s.counters().tx_bytes);
    }
}

#[test]
fn batch_records_come_back() {
    let mut bb = [0u8; 512];
    let fr = frame(64);
    let msgs = all_messages(&mut bb, &fr, true);
    let Message::StateUpdate(b) = msgs[6] else { panic!("not a batch") };
    let got: Vec<FlowRecord> = b.iter().collect();
    assert_eq!(got, vec![record(v6_key(), 0), record(v4_key(), 1), record(v6_key(), 2)]);
}

/// A sealed heartbeat, byte for byte: a change here is a wire-format change
/// (bump `VERSION`, see docs/ccl-protocol.md).
fn fixture_heartbeat() -> Heartbeat {
    Heartbeat {
        priority: 10,
        state: 2,
        follows: Some(NodeId(0)),
        ccl_address: Ipv4Addr::new(10, 99, 0, 2),
        seq: 1,
        config_version: 3,
        state_version: 4,
        grant_us: 250_000,
        member_bitmap: 0x8007,
        member_since: {
            let mut s = [Epoch(0); 16];
            s[2] = Epoch(5);
            s
        },
        echo_bitmap: 0x0001,
        echoes: [9; 16],
        ..Heartbeat::default()
    }
}

#[test]
fn fixture_sealed_heartbeat() {
    const FIXTURE: [u8; 132] = [
        0x43, 0x46, 0x0a, 0x01, 0x00, 0x01, 0x00, 0x00, // magic, v10, heartbeat, flags, node1, ch0, rsvd
        0xab, 0x20, 0x99, 0xd9, // cluster id of "lab"
        0x65, 0x53, 0xf1, 0x00, // incarnation 1_700_000_000
        0, 0, 0, 0, 0, 0, 0, 1, // seq 1
        0, 0, 0, 0, 0, 0, 0, 5, // epoch 5
        0x00, 0x52, // payload length 82
        0x0a, 0x02, 0x00, 0x00, 0xff, 0xff, // priority 10, data, follows node0, no flags, no site/chassis
        0x0a, 0x63, 0x00, 0x02, // CCL address 10.99.0.2
        0, 0, 0, 1, // heartbeat seq 1
        0, 0, 0, 0, 0, 0, 0, 3, // config version 3
        0, 0, 0, 0, 0, 0, 0, 4, // state version 4
        0x00, 0x03, 0xd0, 0x90, // grant 250 ms
        0x80, 0x07, // members 0, 1, 2, 15: no placement; node 2 admitted at epoch 5
        0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, //
        0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, //
        0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 5, //
        0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, //
        0x00, 0x01, 0, 0, 0, 9, // echo: node0's heartbeat 9
        // tag
        0x3d, 0x31, 0x4f, 0xd9, 0x51, 0xbe, 0x8d, 0x87, 0xd0, 0x78, 0x71, 0xa4, 0xfd, 0x51, 0x20, 0x1d,
    ];
    let mut s = sealer();
    let d = seal(&mut s, &Message::Heartbeat(fixture_heartbeat()));
    assert_eq!(d.len(), FIXTURE.len());
    assert_eq!(&d[..], &FIXTURE[..], "{:02x?}", d);
    let mut want = fixture_heartbeat();
    want.echoes = [0; 16];
    want.echoes[0] = 9;
    let o = opener().open(&FIXTURE).unwrap();
    assert_eq!(o.msg, Message::Heartbeat(want));
    let o = opener().open_control(&FIXTURE).unwrap();
    assert_eq!(o.msg, ControlMessage::Heartbeat(want));
}

#[test]
fn wrong_key_is_bad_mac() {
    let d = seal(&mut sealer(), &Message::Heartbeat(Heartbeat { priority: 1, state: 1, member_bitmap: 1, ..Heartbeat::default() }));
    let other = CclKey::new(NAME, "another secret").unwrap();
    let mut o = Opener::new(&other, B);
    assert_eq!(o.open(&d).unwrap_err(), CclDrop::BadMac);
    assert_eq!(o.counters().drop(CclDrop::BadMac), 1);
    assert_eq!(o.counters().total_drops(), 1);
}

#[test]
fn other_cluster_is_wrong_cluster() {
    let d = seal(&mut sealer(), &Message::Heartbeat(Heartbeat { priority: 1, state: 1, member_bitmap: 1, ..Heartbeat::default() }));
    let other = CclKey::new("lab2", SECRET).unwrap();
    assert_eq!(Opener::new(&other, B).open(&d).unwrap_err(), CclDrop::WrongCluster);
}

#[test]
fn every_flipped_bit_is_refused() {
    let fr = frame(64);
    let m = Message::ForwardedPacket(ForwardedPacket { ingress_iface: 2, flow_hint: Some(v4_key()), frame: &fr });
    let d = seal(&mut sealer(), &m);
    for bit in 0..d.len() * 8 {
        let mut x = d.clone();
        x[bit / 8] ^= 1 << (bit % 8);
        let r = opener().open(&x);
        assert!(r.is_err(), "bit {bit} accepted");
        // Only the framing fields (and seq 1 → 0, a Replay) can fail
        // before the MAC.
        let byte = bit / 8;
        let expect_mac = !(byte < 3
            || (5..7).contains(&byte)
            || (8..12).contains(&byte)
            || (byte == 23 && bit % 8 == 0)
            || (32..34).contains(&byte));
        if expect_mac {
            assert_eq!(r.unwrap_err(), CclDrop::BadMac, "bit {bit}");
        }
    }
}

#[test]
fn replay_of_same_datagram() {
    let d = seal(&mut sealer(), &Message::Heartbeat(Heartbeat { priority: 1, state: 1, member_bitmap: 1, ..Heartbeat::default() }));
    let mut o = opener();
    assert!(o.open(&d).is_ok());
    assert_eq!(o.open(&d).unwrap_err(), CclDrop::Replay);
    assert_eq!(o.counters().drop(CclDrop::Replay), 1);
    assert_eq!(o.counters().rx(MessageKind::Heartbeat), 1);
}

#[test]
fn out_of_order_and_too_old() {
    let mut s = sealer();
    let hb = Message::Heartbeat(Heartbeat { priority: 1, state: 1, member_bitmap: 1, ..Heartbeat::default() });
    let n = (crate::ccl::WINDOW + 200) as usize;
    let ds: Vec<Vec<u8>> = (0..n).map(|_| seal(&mut s, &hb)).collect();
    let mut o = opener();
    // 1..=50, then the last (WINDOW + 200), then 300 (inside the window),
    // 150 (age WINDOW + 50: too old), 201 (age WINDOW − 1: the window's
    // last slot), 200 (age WINDOW).
    for d in &ds[..50] {
        o.open(d).unwrap();
    }
    assert_eq!(o.open(&ds[n - 1]).unwrap().seq, n as u64);
    assert_eq!(o.open(&ds[299]).unwrap().seq, 300);
    assert_eq!(o.open(&ds[299]).unwrap_err(), CclDrop::Replay);
    assert_eq!(o.open(&ds[149]).unwrap_err(), CclDrop::Replay);
    assert_eq!(o.open(&ds[200]).unwrap().seq, 201);
    assert_eq!(o.open(&ds[199]).unwrap_err(), CclDrop::Replay);
}

#[test]
fn restarted_sender() {
    let hb = Message::Heartbeat(Heartbeat { priority: 1, state: 1, member_bitmap: 1, ..Heartbeat::default() });
    let mut old = sealer();
    let early = seal(&mut old, &hb);
    let mut o = opener();
    for _ in 0..10 {
        o.open(&seal(&mut old, &hb)).unwrap();
    }
    let mut new = Sealer::new(&key(), A, 0, INC + 30).unwrap();
    assert_eq!(o.open(&seal(&mut new, &hb)).unwrap().seq, 1);
    assert_eq!(o.replay_guard().incarnation(A, 0), Some(INC + 30));
    assert_eq!(o.open(&seal(&mut old, &hb)).unwrap_err(), CclDrop::StaleIncarnation);
    assert_eq!(o.open(&early).unwrap_err(), CclDrop::StaleIncarnation);
    assert_eq!(o.counters().drop(CclDrop::StaleIncarnation), 2);
}

#[test]
fn bad_mac_does_not_advance_window() {
    let k = key();
    let mut forged = forge(&k, header(500), &[1, 1, 0, 1]);
    let l = forged.len();
    forged[l - 1] ^= 1;
    let mut o = opener();
    assert_eq!(o.open(&forged).unwrap_err(), CclDrop::BadMac);
    assert_eq!(o.replay_guard().top(A, 0), None);
    // Seq 1 would be outside the window had 500 been recorded.
    let d = seal(&mut sealer(), &Message::Heartbeat(Heartbeat { priority: 1, state: 1, member_bitmap: 1, ..Heartbeat::default() }));
    assert_eq!(o.open(&d).unwrap().seq, 1);
    // A forged higher incarnation does not reset the window either.
    let mut h = header(1);
    h.incarnation = INC + 1;
    let mut f2 = forge(&k, h, &[1, 1, 0, 1]);
    f2[HEADER_LEN] ^= 1;
    assert_eq!(o.open(&f2).unwrap_err(), CclDrop::BadMac);
    assert_eq!(o.replay_guard().incarnation(A, 0), Some(INC));
    assert_eq!(o.open(&d).unwrap_err(), CclDrop::Replay);
}

#[test]
fn framing_drops() {
    let k = key();
    let mut o = opener();
    let good = forge(&k, header(1), &[1, 1, 0, 1]);
    let mut v2 = good.clone();
    v2[2] = 1; // v1 (BLAKE3 MAC) is not spoken any more
    assert_eq!(o.open(&v2).unwrap_err(), CclDrop::BadVersion);
    let mut mg = good.clone();
    mg[1] = 0;
    assert_eq!(o.open(&mg).unwrap_err(), CclDrop::BadMagic);
    let mut long = good.clone();
    long.push(0);
    assert_eq!(o.open(&long).unwrap_err(), CclDrop::BadLength);
    assert_eq!(o.open(&good[..10]).unwrap_err(), CclDrop::Truncated);
    let mut h = header(1);
    h.sender = B;
    assert_eq!(o.open(&forge(&k, h, &[1, 1, 0, 1])).unwrap_err(), CclDrop::Loopback);
    h.sender = NodeId(16);
    assert_eq!(o.open(&forge(&k, h, &[1, 1, 0, 1])).unwrap_err(), CclDrop::BadSender);
    let mut h = header(1);
    h.channel = 40;
    assert_eq!(o.open(&forge(&k, h, &[1, 1, 0, 1])).unwrap_err(), CclDrop::TooManyChannels);
    let mut h = header(1);
    h.kind = 99;
    assert_eq!(o.open(&forge(&k, h, &[1, 1, 0, 1])).unwrap_err(), CclDrop::UnknownKind);
    let mut h = header(2);
    h.payload_len = 3;
    assert_eq!(o.open(&forge(&k, h, &[1, 1, 0])).unwrap_err(), CclDrop::MalformedPayload);
    // The authentic-but-undecodable messages still consumed their numbers.
    assert_eq!(o.open(&good).unwrap_err(), CclDrop::Replay);
    let c = o.counters();
    for r in [
        CclDrop::BadVersion,
        CclDrop::BadMagic,
        CclDrop::BadLength,
        CclDrop::Truncated,
        CclDrop::Loopback,
        CclDrop::BadSender,
        CclDrop::TooManyChannels,
        CclDrop::UnknownKind,
        CclDrop::MalformedPayload,
        CclDrop::Replay,
    ] {
        assert_eq!(c.drop(r), 1, "{r}");
    }
    assert_eq!(c.total_drops(), 10);
    assert_eq!(c.total_rx(), 0);
}

#[test]
fn sealer_refuses_bad_identity_and_small_buffers() {
    assert_eq!(Sealer::new(&key(), NodeId(16), 0, 1).unwrap_err(), CclError::BadNodeId(16));
    assert_eq!(Sealer::new(&key(), A, 32, 1).unwrap_err(), CclError::BadChannel(32));
    assert!(Sealer::new(&key(), A, 31, 1).is_ok());
    assert!(Sealer::new(&key(), A, CONTROL_CHANNEL, 1).is_ok());
    let mut s = sealer();
    let hb = Message::Heartbeat(Heartbeat { priority: 1, state: 1, member_bitmap: 1, ..Heartbeat::default() });
    for n in 0..Sealer::sealed_len(&hb) {
        let mut out = vec![0u8; n];
        assert!(matches!(s.seal(Epoch(0), &hb, &mut out), Err(CclError::BufferTooSmall { .. })));
    }
    assert_eq!(s.next_seq(), 1, "failed seals consume no sequence number");
    let big = vec![0u8; 70_000];
    let m = Message::RelayToOwner(RelayToOwner { ingress_iface: 0, frame: &big });
    let mut out = vec![0u8; 80_000];
    assert!(matches!(s.seal(Epoch(0), &m, &mut out), Err(CclError::PayloadTooLarge(_))));
}

const PATH: FramePath = FramePath {
    src_mac: [2, 0, 0, 0, 9, 1],
    dst_mac: [0xff; 6],
    src_ip: Ipv4Addr::new(169, 254, 9, 1),
    dst_ip: Ipv4Addr::new(169, 254, 9, 255),
};

fn sealed_frame(s: &mut Sealer, m: &Message<'_>) -> Vec<u8> {
    let mut out = vec![0u8; 2048];
    let n = s.seal_frame(&PATH, Epoch(3), m, &mut out).unwrap();
    out.truncate(n);
    out
}

#[test]
fn udp_frame_round_trip() {
    let fr = frame(1514);
    let m = Message::ForwardedPacket(ForwardedPacket { ingress_iface: 1, flow_hint: None, frame: &fr });
    let mut s = Sealer::new(&key(), A, 3, INC).unwrap();
    let f = sealed_frame(&mut s, &m);
    // 14 + 20 + 8 + 34 + 2 (iface, no hint) + 1514 + 16.
    assert_eq!(f.len(), FRAME_OVERHEAD + 2 + 1514);
    assert_eq!(FRAME_OVERHEAD, 92);
    let ip = crate::wire::Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert!(ip.verify_checksum());
    assert!(ip.dont_frag());
    assert_eq!(usize::from(ip.total_len()), f.len() - 14);
    let d = strip_udp(&f).unwrap();
    assert_eq!((d.src_port, d.src_ip, d.dst_mac), (CCL_UDP_PORT + 3, PATH.src_ip, PATH.dst_mac));
    let mut o = opener();
    let got = o.open_frame(&f).unwrap();
    assert_eq!((got.msg, got.channel, got.epoch), (m, 3, Epoch(3)));
    assert_eq!(o.open_frame(&f).unwrap_err(), CclDrop::Replay);

    // Padded short frames open (the UDP length bounds the datagram).
    let hb = Message::Heartbeat(Heartbeat { priority: 1, state: 1, member_bitmap: 1, ..Heartbeat::default() });
    let mut c = sealed_frame(&mut Sealer::new(&key(), A, CONTROL_CHANNEL, INC).unwrap(), &hb);
    assert_eq!(&c[34..36], &31555u16.to_be_bytes());
    c.resize(c.len() + 20, 0);
    assert!(o.open_frame(&c).is_ok());
}

#[test]
fn non_ccl_frames() {
    let hb = Message::Heartbeat(Heartbeat { priority: 1, state: 1, member_bitmap: 1, ..Heartbeat::default() });
    let f = sealed_frame(&mut sealer(), &hb);
    let mut o = opener();
    let mut arp = f.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert_eq!(o.open_frame(&arp).unwrap_err(), CclDrop::NotCcl);
    let mut port = f.clone();
    port[36..38].copy_from_slice(&53u16.to_be_bytes());
    assert_eq!(o.open_frame(&port).unwrap_err(), CclDrop::NotCcl);
    let mut tcp = f.clone();
    tcp[23] = 6;
    assert_eq!(o.open_frame(&tcp).unwrap_err(), CclDrop::NotCcl);
    let mut csum = f.clone();
    csum[24] ^= 0xff;
    assert_eq!(o.open_frame(&csum).unwrap_err(), CclDrop::BadOuterHeader);
    assert_eq!(o.open_frame(&f[..20]).unwrap_err(), CclDrop::Truncated);
    assert_eq!(o.counters().total_drops(), 5);
    assert!(o.open_frame(&f).is_ok());
}

#[test]
fn batch_writer_fills_to_capacity() {
    let mut buf = [0u8; MAX_PAYLOAD_MTU1500];
    let mut w = BatchWriter::new(&mut buf).unwrap();
    let mut pushed = Vec::new();
    let mut i = 0u32;
    loop {
        let r = record(if matches!(i % 4, 0) { v6_key() } else { v4_key() }, i);
        let room = w.has_room_for(&r);
        match w.push(&r) {
            Ok(()) => {
                assert!(room);
                pushed.push(r);
            }
            Err(e) => {
                assert!(!room);
                assert_eq!(e, CclError::BatchFull(pushed.len() as u16));
                break;
            }
        }
        i += 1;
    }
    assert!(MAX_PAYLOAD_MTU1500 - w.bytes() < FlowRecord::V6_LEN);
    assert_eq!(w.len(), pushed.len());
    // 1422 bytes: 2 + 4 × 110 (IPv6) + 11 × 86 (IPv4) = 1388, then an
    // IPv4 record (the 16th) does not fit the 34 bytes left.
    assert_eq!((FlowRecord::V4_LEN, FlowRecord::V6_LEN), (86, 110));
    assert_eq!(pushed.len(), 15);
    assert_eq!(w.bytes(), 2 + 4 * 110 + 11 * 86);
    let batch = w.as_batch();
    let mut s = sealer();
    let mut out = [0u8; 1514];
    let n = s
        .seal_frame(&PATH, Epoch(1), &Message::StateUpdate(batch), &mut out)
        .unwrap();
    assert!(n <= 1514, "one datagram within a 1500-byte MTU");
    let mut o = opener();
    let got = o.open_frame(&out[..n]).unwrap();
    let Message::StateUpdate(b) = got.msg else { panic!("kind") };
    assert_eq!(b.iter().collect::<Vec<_>>(), pushed);
    w.reset();
    assert!(w.is_empty());
    assert_eq!(w.as_batch().iter().count(), 0);
}

#[test]
fn counters_add_and_name() {
    let mut a = CclCounters::default();
    a.drops[CclDrop::Replay.index()] = 2;
    a.rx[MessageKind::Heartbeat.index()] = 3;
    let mut b = a;
    b.add(&a);
    assert_eq!(b.drop(CclDrop::Replay), 4);
    assert_eq!(b.by_kind().next(), Some(("heartbeat", 6, 0)));
    assert_eq!(CclDrop::ALL.len(), CclDrop::COUNT);
    let names: std::collections::HashSet<_> = CclDrop::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(names.len(), CclDrop::COUNT);
}

proptest! {
    #[test]
    fn every_truncation_is_an_error(kind in 0usize..12, cut in any::<prop::sample::Index>()) {
        let mut bb = [0u8; 512];
        let fr = frame(64);
        let msgs = all_messages(&mut bb, &fr, kind % 2 == 0);
        let m = msgs[kind];
        let d = seal(&mut sealer(), &m);
        let mut o = opener();
        for n in 0..d.len() {
            prop_assert!(o.open(&d[..n]).is_err());
        }
        prop_assert_eq!(o.counters().total_drops(), d.len() as u64);
        prop_assert!(o.open(&d).is_ok());
        // And every truncation of the payload alone fails to parse or
        // parses to something else (trailing data is refused).
        let p = &d[HEADER_LEN..d.len() - TAG_LEN];
        let pn = cut.index(p.len());
        if let Ok(x) = Message::parse(m.kind() as u8, &p[..pn]) {
            prop_assert_ne!(x, m);
        }
    }

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut o = opener();
        let _ = o.open(&data);
        let _ = o.open_frame(&data);
        for k in 0..=11u8 {
            let _ = Message::parse(k, &data);
        }
        let _ = FlowKey::parse(&data);
        let _ = FlowRecord::parse(&data);
        if let Ok(b) = FlowBatch::parse(&data) {
            prop_assert_eq!(b.iter().count(), b.len());
        }
        prop_assert_eq!(o.counters().total_drops() + o.counters().total_rx(), 2);
    }

    /// Random bytes behind a valid, authentic header: the payload parsers
    /// see arbitrary input after the MAC passes.
    #[test]
    fn authentic_garbage_never_panics(kind in 0u8..12, payload in proptest::collection::vec(any::<u8>(), 0..200)) {
        let k = key();
        let mut h = header(1);
        h.kind = kind;
        h.payload_len = payload.len() as u16;
        let d = forge(&k, h, &payload);
        let mut o = opener();
        match o.open(&d) {
            Ok(x) => {
                let mut out = vec![0u8; x.msg.wire_len()];
                prop_assert_eq!(x.msg.emit(&mut out), Ok(payload.len()));
                prop_assert_eq!(out, payload);
            }
            Err(e) => prop_assert!(matches!(e, CclDrop::UnknownKind | CclDrop::MalformedPayload)),
        }
    }
}

/// `seal_frame_in_place` makes the very bytes `seal_frame` makes of the
/// same message (forwarded packets with and without a flow hint, relayed
/// frames, several frame sizes), and both sealers advance alike.
#[test]
fn in_place_sealing_equals_copying() {
    let path = FramePath { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], src_ip: Ipv4Addr::new(198, 19, 0, 1), dst_ip: Ipv4Addr::new(198, 19, 0, 2) };
    let hint = FlowKey::new(crate::FiveTuple {
        src: Ipv4Addr::new(10, 0, 0, 1).into(),
        dst: Ipv4Addr::new(10, 0, 0, 2).into(),
        proto: 17,
        src_port: 1,
        dst_port: 2,
    })
    .ok();
    let (mut a, mut b) = (sealer(), sealer());
    for len in [14usize, 60, 61, 1514] {
        let fr: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        for (kind, hint) in [(MessageKind::ForwardedPacket, None), (MessageKind::ForwardedPacket, hint), (MessageKind::RelayToOwner, None), (MessageKind::ToControl, None)] {
            let msg = match kind {
                MessageKind::ForwardedPacket => Message::ForwardedPacket(ForwardedPacket { ingress_iface: 3, flow_hint: hint, frame: &fr }),
                MessageKind::ToControl => Message::ToControl(RelayToOwner { ingress_iface: 3, frame: &fr }),
                _ => Message::RelayToOwner(RelayToOwner { ingress_iface: 3, frame: &fr }),
            };
            let mut want = vec![0u8; FRAME_OVERHEAD + msg.wire_len()];
            let n = a.seal_frame(&path, Epoch(4), &msg, &mut want).unwrap();
            assert_eq!(n, want.len());
            let head_len = msg.wire_len() - len;
            let mut got = vec![0u8; want.len()];
            let at = FRAME_OVERHEAD - TAG_LEN + head_len;
            got[at..at + len].copy_from_slice(&fr);
            let head = |out: &mut [u8]| match kind {
                MessageKind::ForwardedPacket => ForwardedPacket::emit_head(3, hint.as_ref(), out),
                _ => RelayToOwner::emit_head(3, out),
            };
            let m = b.seal_frame_in_place(&path, Epoch(4), kind, head_len, len, head, &mut got).unwrap();
            assert_eq!(m, n);
            assert_eq!(got, want, "{kind:?} hint {} len {len}", hint.is_some());
        }
    }
    assert_eq!(a.next_seq(), b.next_seq());
    assert!(b.seal_frame_in_place(&path, Epoch(4), MessageKind::Heartbeat, 1, 60, |_| Ok(1), &mut [0u8; 256]).is_err());
    assert!(b.seal_frame_in_place(&path, Epoch(4), MessageKind::RelayToOwner, 1, 13, |_| Ok(1), &mut [0u8; 256]).is_err());
}

/// A `ForwardedBatch` built in place with `push` and sealed with
/// `seal_batch_in_place` is the very datagram `seal_frame` makes of it, and
/// it opens to the same frames; a payload that is not a valid batch is
/// refused.
#[test]
fn in_place_batch_equals_copying_and_opens() {
    let path = FramePath { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], src_ip: Ipv4Addr::new(198, 19, 0, 1), dst_ip: Ipv4Addr::new(198, 19, 0, 2) };
    let (mut a, mut b) = (sealer(), sealer());
    let frames: Vec<Vec<u8>> = [14usize, 60, 400].iter().map(|&n| (0..n).map(|i| (i * 3 + n) as u8).collect()).collect();
    let at = FRAME_OVERHEAD - TAG_LEN;
    let mut got = vec![0u8; 1024];
    let mut used = 0;
    for (k, f) in frames.iter().enumerate() {
        used = ForwardedBatch::push(&mut got[at..], used, k as u8, f).unwrap();
    }
    let m = b.seal_batch_in_place(&path, Epoch(4), used, &mut got).unwrap();
    let batch = ForwardedBatch::parse(&got[at..at + used]).unwrap();
    let mut want = vec![0u8; FRAME_OVERHEAD + used];
    let n = a.seal_frame(&path, Epoch(4), &Message::ForwardedBatch(batch), &mut want).unwrap();
    assert_eq!((m, n), (want.len(), want.len()));
    assert_eq!(got[..m], want[..]);
    let mut o = opener();
    let opened = o.open_frame(&want).unwrap();
    let Message::ForwardedBatch(back) = opened.msg else { panic!("{:?}", opened.msg) };
    let back: Vec<(u8, Vec<u8>)> = back.frames().map(|(i, f)| (i, f.to_vec())).collect();
    assert_eq!(back, frames.iter().enumerate().map(|(k, f)| (k as u8, f.clone())).collect::<Vec<_>>());
    // Not a batch: count 0.
    let mut bad = vec![0u8; 256];
    assert!(b.seal_batch_in_place(&path, Epoch(4), 20, &mut bad).is_err());
}

/// The MAC follows the message length: below `MAC_X4_FROM` bytes of header
/// and payload it is AEGIS-128L, from there AEGIS-128X4, each under its own
/// key derived from the secret (computed here independently of `CclKey`).
#[test]
fn mac_by_length_with_independent_keys() {
    use aegis::aegis128l::Aegis128LMac;
    use aegis::aegis128x4::Aegis128X4Mac;
    let derive = |context: &str| {
        let k = blake3::derive_key(context, SECRET.as_bytes());
        let mut m = [0u8; 16];
        m.copy_from_slice(&k[..16]);
        m
    };
    let (kl, kx) = (derive("clusterfw ccl v5 aegis-128l-mac"), derive("clusterfw ccl v5 aegis-128x4-mac"));
    assert_ne!(kl, kx);
    for frame_len in [14usize, auth::MAC_X4_FROM - HEADER_LEN - 3, auth::MAC_X4_FROM - HEADER_LEN - 2, 1514] {
        let fr = vec![0x5au8; frame_len];
        let d = seal(&mut sealer(), &Message::ForwardedPacket(ForwardedPacket { ingress_iface: 1, flow_hint: None, frame: &fr }));
        let (covered, tag) = d.split_at(d.len() - TAG_LEN);
        let want: [u8; 16] = if covered.len() < auth::MAC_X4_FROM {
            let mut m = Aegis128LMac::<16>::new(&kl);
            m.update(covered);
            m.finalize()
        } else {
            let mut m = Aegis128X4Mac::<16>::new(&kx);
            m.update(covered);
            m.finalize()
        };
        assert_eq!(tag, &want[..], "{} bytes covered", covered.len());
        assert!(opener().open(&d).is_ok());
    }
}

#[test]
fn record_version_round_trips_through_the_opaque_bytes() {
    let flow = FlowKey::new(FiveTuple {
        src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        proto: 6,
        src_port: 1000,
        dst_port: 80,
    })
    .unwrap();
    let mut r = FlowRecord {
        flow,
        owner: NodeId(3),
        op: FlowOp::Upsert,
        tcp_state: 2,
        flags: 0,
        seq_delta: 7,
        idle_timeout_s: 30,
        opaque: [0; OPAQUE_LEN],
    };
    assert_eq!(r.version(), None, "no flag, no version");
    r.set_version(0x0102_0304, 0xa0b0_c0d0);
    assert_eq!(r.flags & FLAG_VERSIONED, FLAG_VERSIONED);
    assert_eq!(&r.opaque[..8], &[1, 2, 3, 4, 0xa0, 0xb0, 0xc0, 0xd0], "big-endian, generation first");
    let mut buf = [0u8; 128];
    let n = r.emit(&mut buf).unwrap();
    let (back, m) = FlowRecord::parse_prefix(&buf[..n]).unwrap();
    assert_eq!((m, back.version()), (n, Some((0x0102_0304, 0xa0b0_c0d0))));
    // The flow state rides behind the version, under its own flag.
    assert_eq!(back.state(), None);
    let mut st = [0u8; STATE_LEN];
    st[0] = 7;
    st[STATE_LEN - 1] = 9;
    r.set_state(&st);
    assert_eq!(r.flags, FLAG_VERSIONED | FLAG_STATE);
    assert_eq!(&r.opaque[8..52], &st[..]);
    let n = r.emit(&mut buf).unwrap();
    assert_eq!(n, FlowRecord::V4_LEN);
    let back = FlowRecord::parse(&buf[..n]).unwrap();
    assert_eq!((back.state(), back.version()), (Some(&st[..]), Some((0x0102_0304, 0xa0b0_c0d0))));
}

// --- The control channel (issue 10). ---

fn control_messages(data: &[u8]) -> Vec<ControlMessage<'_>> {
    let mut accepted = JoinReply {
        to: B,
        to_incarnation: INC,
        verdict: JoinVerdict::Accepted,
        detail: 0,
        member_bitmap: 0b111,
        member_place: [Placement::default(); NODE_SLOTS],
        member_since: [Epoch(0); NODE_SLOTS],
    };
    accepted.member_place[1] = Placement { site: Some(1), chassis: Some(2) };
    vec![
        ControlMessage::Heartbeat(fixture_heartbeat_canonical()),
        ControlMessage::JoinRequest(JoinRequest {
            to: B,
            priority: 4,
            place: Placement::default(),
            ccl_address: Ipv4Addr::new(10, 99, 0, 2),
            config_version: 1,
            config_digest: 2,
            workers: 1,
        }),
        ControlMessage::JoinReply(accepted),
        ControlMessage::SyncRequest(SyncRequest {
            to: B,
            xfer: 1,
            since: 0,
            config_version: 0,
            next: 0,
            window: 16,
            full: true,
        }),
        ControlMessage::SyncChunk(SyncChunk { to: B, to_incarnation: INC, xfer: 1, index: 0, total: 1, data }),
        ControlMessage::TableUpdate(TableUpdate { version: 3, table: 2, key: b"10.0.0.1:1024", op: TableOp::Upsert(&data[..TABLE_VALUE_MAX]) }),
        ControlMessage::TableUpdate(TableUpdate { version: 4, table: 2, key: b"x", op: TableOp::Delete }),
    ]
}

fn fixture_heartbeat_canonical() -> Heartbeat {
    let mut h = fixture_heartbeat();
    h.echoes = [0; 16];
    h.echoes[0] = 9;
    h
}

#[test]
fn control_messages_seal_and_open_on_the_control_lcore_only() {
    let data = frame(SYNC_CHUNK_DATA);
    let path = FramePath {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [0xff; 6],
        src_ip: Ipv4Addr::new(10, 99, 0, 1),
        dst_ip: Ipv4Addr::new(10, 99, 0, 255),
    };
    let mut s = Sealer::new(&key(), A, CONTROL_CHANNEL, INC).unwrap();
    let mut control = opener();
    let mut worker = opener();
    for m in control_messages(&data) {
        let mut out = vec![0u8; 1600];
        let n = s.seal_control_frame(&path, Epoch(7), &m, &mut out).unwrap();
        assert!(n <= 1514, "{} bytes for {}", n, m.kind());
        let o = control.open_control_frame(&out[..n]).unwrap();
        assert_eq!((o.msg, o.sender, o.epoch, o.channel, o.incarnation), (m, A, Epoch(7), CONTROL_CHANNEL, INC));
        // A worker's opener does not decode control kinds (the heartbeat
        // excepted: it is a `Message` too).
        match worker.open_frame(&out[..n]) {
            Ok(w) => assert_eq!(m.kind(), MessageKind::Heartbeat, "{:?}", w.msg),
            Err(e) => assert_eq!(e, CclDrop::UnknownKind),
        }
        // Every truncation of the datagram is dropped.
        let mut o2 = opener();
        let d = &out[FRAME_OVERHEAD - HEADER_LEN - TAG_LEN..n];
        for cut in 0..d.len() {
            assert!(o2.open_control(&d[..cut]).is_err());
        }
        assert_eq!(o2.counters().total_drops(), d.len() as u64);
    }
    let c = control.counters();
    for k in [MessageKind::JoinRequest, MessageKind::JoinReply, MessageKind::SyncRequest, MessageKind::SyncChunk] {
        assert_eq!((c.rx(k), s.counters().tx(k)), (1, 1), "{k}");
    }
    assert_eq!(c.rx(MessageKind::TableUpdate), 2);
    assert_eq!(worker.counters().drop(CclDrop::UnknownKind), 6);
    // A data-channel kind on the control lcore: unknown kind, after the MAC.
    let q = seal(&mut sealer(), &Message::OwnerQuery(OwnerQuery { query_id: 1, flow: v4_key(), elect_if_absent: false, local: false }));
    assert_eq!(opener().open_control(&q), Err(CclDrop::UnknownKind));
    // The longest chunk fills an MTU-1500 datagram exactly.
    let ch = ControlMessage::SyncChunk(SyncChunk { to: B, to_incarnation: 1, xfer: 1, index: 0, total: 1, data: &data });
    assert_eq!(Sealer::sealed_len_control(&ch), 1500 - 28);
}

proptest! {
    #[test]
    fn authentic_control_garbage_never_panics(kind in 0u8..16, payload in proptest::collection::vec(any::<u8>(), 0..400)) {
        let k = key();
        let mut h = header(1);
        h.kind = kind;
        h.channel = CONTROL_CHANNEL;
        h.payload_len = payload.len() as u16;
        let d = forge(&k, h, &payload);
        let mut o = opener();
        match o.open_control(&d) {
            Ok(x) => {
                let mut out = vec![0u8; x.msg.wire_len()];
                prop_assert_eq!(x.msg.emit(&mut out), Ok(payload.len()));
                prop_assert_eq!(out, payload);
            }
            Err(e) => prop_assert!(matches!(e, CclDrop::UnknownKind | CclDrop::MalformedPayload)),
        }
        prop_assert_eq!(o.counters().total_drops() + o.counters().total_rx(), 1);
        let _ = o.open_control_frame(&d);
    }
}

#[test]
fn nat_binding_rides_in_the_record_and_junk_is_none() {
    use super::NatBinding;
    let mut r = record(v4_key(), 1);
    r.opaque = [0; OPAQUE_LEN];
    assert_eq!(r.binding(), None);
    let b = NatBinding { addr: Ipv4Addr::new(198, 51, 100, 7), port: 40_961, class: 1, multi_session: true };
    r.set_binding(Some(b));
    let mut bytes = [0u8; FlowRecord::V6_LEN];
    let n = r.emit(&mut bytes).unwrap();
    assert_eq!(n, FlowRecord::V4_LEN);
    let back = FlowRecord::parse(&bytes[..n]).unwrap();
    assert_eq!(back.binding(), Some(b));
    // The binding takes the last 8 opaque bytes: the version and the flow
    // state stay where they were.
    assert_eq!(&back.opaque[52..], &[198, 51, 100, 7, 0xa0, 0x01, 1, 2]);
    assert!(back.opaque[..52].iter().all(|&x| x == 0));
    r.set_binding(None);
    assert_eq!(r.binding(), None);
    assert!(r.opaque.iter().all(|&x| x == 0));
    // Any kind or class byte that is not one: no binding (never a panic).
    for kind in 0..=255u8 {
        for class in [0u8, 1, 2, 3, 200] {
            let mut j = record(v4_key(), 2);
            j.opaque[OPAQUE_LEN - 2] = class;
            j.opaque[OPAQUE_LEN - 1] = kind;
            let ok = matches!(kind, 1 | 2) && class <= 2;
            assert_eq!(j.binding().is_some(), ok, "kind {kind} class {class}");
        }
    }
}
