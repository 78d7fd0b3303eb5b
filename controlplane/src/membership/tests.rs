//! The membership machine on decoded messages (schedule, peers, hostile
//! input), then through `ControlLink` on real bytes.

use super::*;
use dataplane::ccl::{CclDrop, CclKey, FlowKey, FramePath, MessageKind, OwnerQuery};
use dataplane::{ip_proto, FiveTuple};
use std::net::IpAddr;

const MS: u64 = 1_000_000;

fn nodes(n: u8) -> Vec<NodeConfig> {
    (0..n)
        .map(|i| NodeConfig { id: NodeId(i), name: format!("n{i}"), ccl_address: Ipv4Addr::new(10, 99, 0, 1 + i) })
        .collect()
}

fn config(me: u8, n: u8) -> Config {
    Config {
        me: NodeId(me),
        priority: 7,
        nodes: nodes(n),
        members: MemberSet::from_nodes(Epoch(1), (0..n).map(NodeId)).unwrap(),
        heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
    }
}

fn machine(me: u8, n: u8) -> Membership {
    Membership::new(config(me, n)).unwrap()
}

fn at(ms: u64) -> Timestamp {
    Timestamp(ms * MS)
}

fn hb() -> Message<'static> {
    Message::Heartbeat(Heartbeat { priority: 1, state: 0, member_bitmap: 0b111, ..Heartbeat::default() })
}

fn from(sender: u8, incarnation: u32) -> Envelope {
    Envelope { sender: NodeId(sender), incarnation, epoch: Epoch(1) }
}

/// The actions queued so far.
fn drain(m: &mut Membership) -> Vec<Action> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

#[test]
fn first_heartbeat_at_the_first_tick_then_every_interval() {
    let mut m = machine(0, 3);
    assert_eq!(m.next_heartbeat(), None);
    assert_eq!(drain(&mut m), vec![], "nothing before the first tick");
    m.tick(at(5));
    let want = Action::Broadcast {
        epoch: Epoch(1),
        msg: Message::Heartbeat(Heartbeat { priority: 7, state: HEARTBEAT_STATE_MEMBER, member_bitmap: 0b111, ..Heartbeat::default() }),
    };
    assert_eq!(drain(&mut m), vec![want]);
    assert_eq!(m.next_heartbeat(), Some(at(105)));
    // None twice for one instant, none before the interval is over.
    m.tick(at(5));
    m.tick(Timestamp(105 * MS - 1));
    assert_eq!(drain(&mut m), vec![]);
    m.tick(at(105));
    assert_eq!(drain(&mut m), vec![want]);
    // A late tick sends one heartbeat, not the missed ones, and the
    // schedule restarts from it.
    m.tick(at(480));
    assert_eq!(drain(&mut m), vec![want]);
    assert_eq!(m.next_heartbeat(), Some(at(580)));
    assert_eq!(m.counters().heartbeats_queued, 3);
}

#[test]
fn ten_heartbeats_per_second_when_ticked_often() {
    let mut m = machine(1, 2);
    let mut sent = 0;
    for us in (0..1_000_000u64).step_by(250) {
        m.tick(Timestamp(us * 1000));
        sent += drain(&mut m).len();
    }
    assert_eq!(sent, 10);
    assert_eq!(m.counters().heartbeats_queued, 10);
}

#[test]
fn the_interval_is_configurable() {
    let mut c = config(0, 2);
    c.heartbeat_interval = Duration::from_millis(50);
    let mut m = Membership::new(c).unwrap();
    assert_eq!(m.heartbeat_interval(), Duration::from_millis(50));
    m.tick(at(0));
    m.tick(at(50));
    m.tick(at(99));
    m.tick(at(100));
    assert_eq!(drain(&mut m).len(), 3);
}

#[test]
fn peers_heard_with_age_count_and_incarnation() {
    let mut m = machine(0, 3);
    assert_eq!(m.on_message(at(10), from(1, 1000), &hb()), Received::Heartbeat);
    assert_eq!(m.on_message(at(110), from(1, 1000), &hb()), Received::Heartbeat);
    let s = m.snapshot(at(150));
    assert_eq!(s.len(), 3);
    assert_eq!((s[0].id, s[0].this_node, s[0].last_heard, s[0].heartbeats), (NodeId(0), true, None, 0));
    assert_eq!(s[0].name, "n0");
    assert_eq!(s[1].last_heard, Some(Duration::from_millis(40)));
    assert_eq!(s[1].last_heard_ms(), Some(40));
    assert_eq!((s[1].heartbeats, s[1].incarnation, s[1].this_node), (2, 1000, false));
    assert_eq!(s[1].ccl_address, Ipv4Addr::new(10, 99, 0, 2));
    assert_eq!((s[2].last_heard, s[2].heartbeats, s[2].incarnation), (None, 0, 0), "never heard");
    // The age grows with the time asked about.
    assert_eq!(m.member(NodeId(1), at(1110)).unwrap().last_heard_ms(), Some(1000));
    assert_eq!(m.counters().heartbeats_rx, 2);
    // A restart of the peer: a higher incarnation is taken.
    assert_eq!(m.on_message(at(200), from(1, 1001), &hb()), Received::Heartbeat);
    assert_eq!(m.member(NodeId(1), at(200)).unwrap().incarnation, 1001);
}

#[test]
fn unknown_senders_and_ourselves_are_counted_and_ignored() {
    let mut m = machine(0, 3);
    let before = m.snapshot(at(50));
    // Node 5 is a valid id, but not configured; 200 is no node id at all.
    assert_eq!(m.on_message(at(20), from(5, 1), &hb()), Received::UnknownSender);
    assert_eq!(m.on_message(at(20), from(200, 1), &hb()), Received::UnknownSender);
    assert_eq!(m.on_message(at(20), from(u8::MAX, u32::MAX), &hb()), Received::UnknownSender);
    // A message that claims to be ours (a looped-back or forged frame).
    assert_eq!(m.on_message(at(20), from(0, 1), &hb()), Received::FromSelf);
    assert_eq!(m.snapshot(at(50)), before, "no state changed");
    assert_eq!(m.member(NodeId(5), at(50)), None);
    assert_eq!(m.member(NodeId(200), at(50)), None);
    let c = *m.counters();
    assert_eq!((c.unknown_sender, c.from_self, c.heartbeats_rx), (3, 1, 0));
    assert_eq!(drain(&mut m), vec![], "input never makes the machine send");
}

#[test]
fn stale_incarnations_and_other_kinds_change_nothing() {
    let mut m = machine(2, 3);
    assert_eq!(m.on_message(at(10), from(0, 2000), &hb()), Received::Heartbeat);
    assert_eq!(m.on_message(at(20), from(0, 1999), &hb()), Received::StaleIncarnation);
    let tuple = FiveTuple {
        src: IpAddr::V4(Ipv4Addr::new(198, 18, 64, 1)),
        dst: IpAddr::V4(Ipv4Addr::new(198, 18, 128, 1)),
        proto: ip_proto::UDP,
        src_port: 1,
        dst_port: 2,
    };
    let q = Message::OwnerQuery(OwnerQuery { query_id: 1, flow: FlowKey::new(tuple).unwrap(), elect_if_absent: true });
    assert_eq!(m.on_message(at(30), from(1, 5), &q), Received::OtherKind);
    let p0 = m.member(NodeId(0), at(30)).unwrap();
    assert_eq!((p0.heartbeats, p0.incarnation, p0.last_heard_ms()), (1, 2000, Some(20)));
    assert_eq!(m.member(NodeId(1), at(30)).unwrap().heartbeats, 0);
    let c = *m.counters();
    assert_eq!((c.heartbeats_rx, c.stale_incarnation, c.other_messages), (1, 1, 1));
}

#[test]
fn last_heard_never_moves_back() {
    let mut m = machine(0, 2);
    m.on_message(at(300), from(1, 1), &hb());
    // A driver handing in an earlier time (two clocks) cannot rewind it.
    m.on_message(at(100), from(1, 1), &hb());
    let p = m.member(NodeId(1), at(400)).unwrap();
    assert_eq!((p.last_heard_ms(), p.heartbeats), (Some(100), 2));
    // Asked about a time before the last heartbeat: age zero, no panic.
    assert_eq!(m.member(NodeId(1), at(0)).unwrap().last_heard, Some(Duration(0)));
}

#[test]
fn configurations_it_cannot_run_are_refused() {
    let err = |f: &dyn Fn(&mut Config)| {
        let mut c = config(0, 3);
        f(&mut c);
        Membership::new(c).err()
    };
    assert_eq!(err(&|_| {}), None);
    assert_eq!(err(&|c| c.heartbeat_interval = Duration(0)), Some(MembershipError::ZeroInterval));
    assert_eq!(err(&|c| c.me = NodeId(9)), Some(MembershipError::MeNotConfigured(NodeId(9))));
    assert_eq!(err(&|c| c.nodes[2].id = NodeId(1)), Some(MembershipError::DuplicateNode(NodeId(1))));
    assert_eq!(err(&|c| c.nodes[2].id = NodeId(16)), Some(MembershipError::NodeOutOfRange(16)));
    assert_eq!(
        err(&|c| {
            c.nodes.pop();
        }),
        Some(MembershipError::MemberNotConfigured(NodeId(2)))
    );
    // Configured nodes need not all be members (a node that is down).
    assert_eq!(err(&|c| c.members = c.members.without(NodeId(2))), None);
}

#[test]
fn heartbeats_carry_the_member_set() {
    let mut c = config(0, 4);
    c.members = c.members.without(NodeId(3));
    let mut m = Membership::new(c).unwrap();
    m.tick(at(0));
    match m.poll_action() {
        Some(Action::Broadcast { epoch, msg: Message::Heartbeat(h) }) => {
            assert_eq!((epoch, h.member_bitmap), (Epoch(2), 0b0111));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(m.epoch(), Epoch(2));
}

// --- Through the codec. ---

fn key() -> CclKey {
    CclKey::new("lab", "lab-secret-0123456789").unwrap()
}

fn link(me: u8) -> ControlLink {
    let path = FramePath {
        src_mac: [0x02, 0, 0, 0, 0x99, 1 + me],
        dst_mac: [0xff; 6],
        src_ip: Ipv4Addr::new(10, 99, 0, 1 + me),
        dst_ip: Ipv4Addr::new(10, 99, 0, 255),
    };
    ControlLink::new(&key(), NodeId(me), 1000 + u32::from(me), path).unwrap()
}

/// Node `m`'s due heartbeat, sealed.
fn heartbeat_frame(m: &mut Membership, l: &mut ControlLink, now: Timestamp) -> Vec<u8> {
    m.tick(now);
    let Some(Action::Broadcast { epoch, msg }) = m.poll_action() else { panic!("no heartbeat due") };
    let mut buf = [0u8; MAX_CONTROL_FRAME];
    let n = l.seal_broadcast(epoch, &msg, &mut buf).unwrap();
    buf[..n].to_vec()
}

#[test]
fn heartbeats_travel_as_sealed_frames() {
    let (mut m0, mut l0) = (machine(0, 2), link(0));
    let (mut m1, mut l1) = (machine(1, 2), link(1));
    let f = heartbeat_frame(&mut m0, &mut l0, at(0));
    assert_eq!(f.len(), dataplane::ccl::FRAME_OVERHEAD + Heartbeat::MIN_LEN + 2 * 2);
    assert_eq!(l1.receive(&mut m1, at(1), &f), Ok(Received::Heartbeat));
    let p = m1.member(NodeId(0), at(1)).unwrap();
    assert_eq!((p.heartbeats, p.incarnation, p.last_heard_ms()), (1, 1000, Some(0)));
    assert_eq!(l0.counters().tx(MessageKind::Heartbeat), 1);
    assert_eq!(l1.counters().rx(MessageKind::Heartbeat), 1);
    // The same frame again is a replay; our own frame a loopback.
    assert_eq!(l1.receive(&mut m1, at(2), &f), Err(CclDrop::Replay));
    assert_eq!(l0.receive(&mut m0, at(2), &f), Err(CclDrop::Loopback));
    // A flipped payload bit fails the MAC.
    let mut bad = heartbeat_frame(&mut m0, &mut l0, at(100));
    let last = bad.len() - 20;
    bad[last] ^= 1;
    assert_eq!(l1.receive(&mut m1, at(101), &bad), Err(CclDrop::BadMac));
    // Another cluster's heartbeat.
    let mut other = ControlLink::new(
        &CclKey::new("other", "x").unwrap(),
        NodeId(0),
        1,
        FramePath {
            src_mac: [2; 6],
            dst_mac: [0xff; 6],
            src_ip: Ipv4Addr::new(10, 99, 0, 9),
            dst_ip: Ipv4Addr::new(10, 99, 0, 255),
        },
    )
    .unwrap();
    let f = heartbeat_frame(&mut machine(0, 2), &mut other, at(0));
    assert_eq!(l1.receive(&mut m1, at(102), &f), Err(CclDrop::WrongCluster));
    let c = l1.counters();
    assert_eq!(
        (c.drop(CclDrop::Replay), c.drop(CclDrop::BadMac), c.drop(CclDrop::WrongCluster), c.total_drops()),
        (1, 1, 1, 3)
    );
    assert_eq!(m1.member(NodeId(0), at(200)).unwrap().heartbeats, 1, "only the good one counted");
    assert_eq!(m1.counters().heartbeats_rx, 1);
}

#[test]
fn truncated_and_garbage_frames_are_dropped_and_counted() {
    let (mut m0, mut l0) = (machine(0, 2), link(0));
    let (mut m1, mut l1) = (machine(1, 2), link(1));
    let f = heartbeat_frame(&mut m0, &mut l0, at(0));
    for n in 0..f.len() {
        assert!(l1.receive(&mut m1, at(1), &f[..n]).is_err(), "prefix of {n} bytes");
    }
    // Deterministic garbage, some of it with a CCL-looking start.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut garbage = 0;
    for len in (0..300).step_by(7) {
        let mut b: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        if b.len() > f.len() {
            b[..60].copy_from_slice(&f[..60]);
        }
        assert!(l1.receive(&mut m1, at(2), &b).is_err());
        garbage += 1;
    }
    assert_eq!(l1.counters().total_drops(), f.len() as u64 + garbage);
    assert_eq!(m1.member(NodeId(0), at(3)).unwrap().heartbeats, 0);
    // The intact frame still opens after all that.
    assert_eq!(l1.receive(&mut m1, at(4), &f), Ok(Received::Heartbeat));
}
