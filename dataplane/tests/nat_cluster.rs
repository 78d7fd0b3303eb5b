//! PAT on cluster members (issue 13; SPEC N2, N5, R9, R11) on the
//! in-process cluster bed (`cluster_bed`): the blocks of the pool are dealt
//! over the members; the first receiver of a SYN owns the connection and
//! translates it from its own blocks; return traffic to a mapped port that
//! lands on another member goes straight to the block's holder (no director
//! query, no forwarding record); the binding rides in the flow records, and
//! when the owner fails the member that inherits the block (its heir) takes
//! the connection over with the same mapped address and port.

mod cluster_bed;

use cluster_bed::*;
use dataplane::ccl::MessageKind;
use dataplane::conntrack::tcp_flags::{ACK, PSH, SYN};
use dataplane::nat::{PortClass, RuleKind, RuleSpec as NatRule};
use dataplane::pipeline::{NatSpec, PatSpec, PoolSpec};
use dataplane::route::IfIndex;
use dataplane::wire::build::PacketBuilder;
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::wire::tcp::TcpPacket;
use dataplane::{DropReason, Duration, NodeId, PortId};
use std::net::Ipv4Addr;

const POOL: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 7);
const C_ISN: u32 = 1000;
const S_ISN: u32 = 5000;

type Out = Vec<(usize, PortId, Vec<u8>)>;

fn nat_spec() -> NatSpec {
    NatSpec {
        rules: vec![NatRule {
            kind: RuleKind::DynamicPat,
            real_iface: Some(IfIndex(0)),
            mapped_iface: Some(IfIndex(1)),
            source: (Ipv4Addr::new(198, 18, 1, 0), 24),
            mapped: None,
            ports: None,
            pool: Some(0),
            per_session: Default::default(),
        }],
        pools: vec![PoolSpec {
            addresses: vec![POOL],
            pat: Some(PatSpec { block_size: 4096, reserved_ports: false, max_per_host: None }),
        }],
        xlate_capacity: 1024,
        xlate_timeout: Duration::from_secs(30),
        host_capacity: 64,
    }
}

fn nat_bed(nodes: usize) -> Bed {
    let mut bed = Bed::new(nodes, true);
    for p in &mut bed.nodes {
        p.set_nat(&nat_spec()).unwrap();
    }
    bed
}

/// What the server sends to the mapped endpoint, arriving at node `n`.
fn from_server(n: usize) -> PacketBuilder {
    PacketBuilder::new(GW_MAC, out_mac(n), SERVER, POOL)
}

/// (source address, source port, seq, ack, flags) of a TCP frame.
fn tcp_of(frame: &[u8]) -> (Ipv4Addr, u16, Ipv4Addr, u16, u32, u32, u8) {
    let ip = Ipv4Packet::new_checked(&frame[14..]).unwrap();
    let t = TcpPacket::new_checked(ip.payload()).unwrap();
    assert!(t.verify_checksum(ip.src(), ip.dst()), "tcp checksum");
    (ip.src(), t.src_port(), ip.dst(), t.dst_port(), t.seq(), t.ack(), t.flags())
}

fn one(out: &Out) -> (usize, PortId, Vec<u8>) {
    assert_eq!(out.len(), 1, "exactly one frame leaves the cluster: {out:?}");
    out[0].clone()
}

/// The member holding mapped port `port`'s block, as every node's plan
/// says (they agree).
fn holder(bed: &Bed, port: u16) -> usize {
    let hs: Vec<NodeId> = (0..bed.nodes.len())
        .filter(|&n| !bed.down[n])
        .map(|n| bed.nodes[n].nat_plan().unwrap().holder(POOL, Some(PortClass::Tcp), port).unwrap().node)
        .collect();
    assert!(hs.windows(2).all(|w| w[0] == w[1]), "the members' maps agree: {hs:?}");
    hs[0].index()
}

fn queries(bed: &Bed) -> usize {
    bed.ccl.iter().filter(|c| c.kind == MessageKind::OwnerQuery).count()
}

/// A connection from HOST:`cport` opened at `owner` (its SYN), answered by
/// the server at `synack_at`: returns the mapped port and the ISN the
/// server saw.
fn open(bed: &mut Bed, cport: u16, owner: usize, synack_at: usize) -> (u16, u32) {
    let syn = from_host(owner, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, &[]);
    let (n, port, f) = one(&bed.send(owner, IN, syn));
    let (src, mport, dst, dport, isn, _, flags) = tcp_of(&f);
    assert_eq!((n, port, src, dst, dport, flags), (owner, OUT, POOL, SERVER, 80, SYN), "the SYN leaves translated");
    assert_eq!(holder(bed, mport), owner, "the owner translates from its own blocks");
    let q = queries(bed);
    let synack = from_server(synack_at).tcp(80, mport, S_ISN, isn.wrapping_add(1), SYN | ACK, 65160, &SYN_OPTS, &[]);
    let (n, port, f) = one(&bed.send(synack_at, OUT, synack));
    let (src, sport, dst, dport, seq, ack, _) = tcp_of(&f);
    assert_eq!(
        (n, port, src, sport, dst, dport),
        (owner, IN, SERVER, 80, HOST, cport),
        "the SYN-ACK reaches the client"
    );
    assert_eq!((seq, ack), (S_ISN, C_ISN + 1), "in the client's sequence space");
    assert_eq!(queries(bed), q, "return traffic to a mapped port asks no director (N5)");
    (mport, isn)
}

#[test]
fn return_traffic_goes_to_the_block_holder_and_both_directions_meet_there() {
    let mut bed = nat_bed(3);
    let delta_isn;
    let (mport, isn) = open(&mut bed, 40_001, 0, 1);
    delta_isn = isn;
    assert!(bed.ccl.iter().any(|c| c.from == 1 && c.to == 0 && c.kind == MessageKind::ForwardedPacket));
    assert_eq!(bed.nodes[1].nat_counters().unwrap().to_holder, 1);
    // The client's ACK and request at node 2, the server's answer at node 1
    // and at node 2: each crosses to the owner once, leaves translated.
    let req =
        from_host(2, SERVER).tcp(40_001, 80, C_ISN + 1, S_ISN + 1, ACK | PSH, 502, &[], b"GET / HTTP/1.1\r\n\r\n");
    let (n, port, f) = one(&bed.send(2, IN, req));
    let (src, sport, _, _, seq, _, _) = tcp_of(&f);
    assert_eq!((n, port, src, sport, seq), (0, OUT, POOL, mport, delta_isn.wrapping_add(1)));
    for at in [1, 2, 0] {
        let data = from_server(at).tcp(80, mport, S_ISN + 1, delta_isn.wrapping_add(19), ACK, 509, &[], &[0x5a; 100]);
        let (n, port, f) = one(&bed.send(at, OUT, data));
        let (_, _, dst, dport, _, ack, _) = tcp_of(&f);
        assert_eq!((n, port, dst, dport, ack), (0, IN, HOST, 40_001, C_ISN + 19), "answer at node {at}");
    }
    assert_eq!(bed.owners(&tuple(HOST, 40_001, SERVER, 80, 6)), vec![0]);
    // The binding rides in the owner's records: the director and backups
    // of the real tuple hold it.
    let c = bed.nodes[0].nat_counters().unwrap();
    assert_eq!((c.xlates_created, c.translated_out, c.translated_in), (1, 2, 4));
    // A probe of an unused port in another member's block goes there and
    // is dropped: no xlate.
    let other = (1024..=65535u16).find(|&p| holder(&bed, p) == 2).unwrap();
    let probe = from_server(0).tcp(80, other, 9, 0, SYN, 1024, &[], &[]);
    assert!(bed.send(0, OUT, probe).is_empty());
    assert_eq!(bed.drops(2, DropReason::NatNoXlate), 1);
    assert_eq!(bed.nodes[0].nat_counters().unwrap().to_holder, 1);
}

#[test]
fn each_member_translates_from_its_own_blocks_and_no_port_is_bound_twice() {
    let mut bed = nat_bed(3);
    let mut seen = std::collections::HashMap::new();
    for k in 0..30u16 {
        let owner = usize::from(k % 3);
        let (mport, _) = open(&mut bed, 41_000 + k, owner, usize::from((k + 1) % 3));
        assert!(seen.insert(mport, k).is_none(), "mapped port {mport} bound twice");
    }
    for n in 0..3 {
        let c = bed.nodes[n].nat_counters().unwrap();
        assert_eq!((c.xlates_created, c.exhausted), (10, 0), "node {n}");
    }
}

#[test]
fn a_translated_flow_survives_its_owner_with_its_mapped_port() {
    for client_at in [1, 2] {
        let mut bed = nat_bed(3);
        let (mport, isn) = open(&mut bed, 40_123, 0, 2);
        let req = from_host(0, SERVER).tcp(40_123, 80, C_ISN + 1, S_ISN + 1, ACK | PSH, 502, &[], &[0x41; 20]);
        assert_eq!(one(&bed.send(0, IN, req)).1, OUT);
        let block = bed.nodes[1].nat_plan().unwrap().block_map(0).unwrap().block(POOL, mport).unwrap();
        let heir = bed.nodes[1].nat_plan().unwrap().block_map(0).unwrap().heir(block).unwrap().index();
        assert_ne!(heir, 0);
        bed.kill(0, 2);
        assert_eq!(holder(&bed, mport), heir, "the heir holds the block now");
        // The client's next segment, at a survivor: the connection goes to
        // the heir, which keeps the mapped address and port.
        let more =
            from_host(client_at, SERVER).tcp(40_123, 80, C_ISN + 21, S_ISN + 1, ACK | PSH, 502, &[], &[0x42; 20]);
        let (n, port, f) = one(&bed.send(client_at, IN, more));
        let (src, sport, dst, _, seq, _, _) = tcp_of(&f);
        assert_eq!((n, port, src, sport, dst), (heir, OUT, POOL, mport, SERVER), "client at {client_at}");
        assert_eq!(seq, isn.wrapping_add(21), "the sequence translation is kept");
        assert_eq!(bed.owners_up(&tuple(HOST, 40_123, SERVER, 80, 6)), vec![heir]);
        let c = bed.nodes[heir].nat_counters().unwrap();
        assert_eq!((c.bindings_adopted, c.bindings_refused), (1, 0));
        // The server's answer, at every survivor, reaches the client.
        for at in (0..3).filter(|&m| m != 0) {
            let data = from_server(at).tcp(80, mport, S_ISN + 1, isn.wrapping_add(41), ACK, 509, &[], &[0x5a; 50]);
            let (n, port, f) = one(&bed.send(at, OUT, data));
            let (_, _, dst, dport, _, ack, _) = tcp_of(&f);
            assert_eq!((n, port, dst, dport, ack), (heir, IN, HOST, 40_123, C_ISN + 41), "answer at {at}");
        }
        // A new connection at the heir gets a port from its own blocks,
        // never from the inherited one.
        let (m2, _) = open(&mut bed, 40_124, heir, 3 - heir);
        assert_ne!(m2, mport);
        let b2 = bed.nodes[heir].nat_plan().unwrap().block_map(0).unwrap().block(POOL, m2).unwrap();
        assert_ne!(b2, block, "the inherited block only keeps the bindings taken over");
    }
}

/// Every mapped endpoint bound on a member that is up, with its members:
/// none may be bound on two at once.
fn bound_once(bed: &Bed) {
    let mut seen = std::collections::HashMap::new();
    for n in (0..bed.nodes.len()).filter(|&n| !bed.down[n]) {
        for x in bed.nodes[n].xlates(bed.now(), usize::MAX) {
            if let Some(m) = seen.insert((x.proto, x.mapped.clone()), n) {
                panic!("{} {} bound on {m} and {n}", x.proto, x.mapped);
            }
        }
    }
}

#[test]
fn a_member_that_comes_back_holds_its_blocks_again_and_gets_their_connections_back() {
    let mut bed = nat_bed(3);
    let (mport, isn) = open(&mut bed, 40_300, 0, 1);
    let map = bed.nodes[1].nat_plan().unwrap();
    let block = map.block_map(0).unwrap().block(POOL, mport).unwrap();
    let heir = map.block_map(0).unwrap().heir(block).unwrap().index();
    bed.kill(0, 2);
    let more = from_host(heir, SERVER).tcp(40_300, 80, C_ISN + 1, S_ISN + 1, ACK, 502, &[], &[]);
    let (n, _, f) = one(&bed.send(heir, IN, more));
    assert_eq!((n, tcp_of(&f).1), (heir, mport), "taken over with its binding");
    bound_once(&bed);
    // Node 0 comes back: it holds its dealt blocks again (the same map on
    // every member), so the heir hands the connection it took over in one
    // of them to node 0 — state and binding — and lets it go.
    bed.rejoin(0, 3);
    assert_eq!(holder(&bed, mport), 0);
    assert_eq!(bed.cluster(heir).counters.nat_handovers, 1);
    assert_eq!(bed.nodes[heir].nat_counters().unwrap().bindings_returned, 1);
    assert_eq!(bed.nodes[0].nat_counters().unwrap().bindings_adopted, 1);
    assert_eq!(bed.owners_up(&tuple(HOST, 40_300, SERVER, 80, 6)), vec![0]);
    bound_once(&bed);
    // Both directions meet at node 0, with the same mapping.
    for at in 0..3 {
        let data = from_server(at).tcp(80, mport, S_ISN + 1, isn.wrapping_add(1), ACK, 509, &[], &[1; 10]);
        let (n, port, f) = one(&bed.send(at, OUT, data));
        assert_eq!((n, port, tcp_of(&f).3), (0, IN, 40_300), "the server's segment at {at}");
        let ack = from_host(at, SERVER).tcp(40_300, 80, C_ISN + 1, S_ISN + 11, ACK, 502, &[], &[]);
        let (n, port, f) = one(&bed.send(at, IN, ack));
        assert_eq!((n, port, tcp_of(&f).1), (0, OUT, mport), "the client's segment at {at}");
    }
    // Every member translates new connections from its own blocks again.
    for (k, owner) in [0usize, 1, 2].into_iter().enumerate() {
        let (m, _) = open(&mut bed, 40_310 + k as u16, owner, (owner + 1) % 3);
        assert_eq!(holder(&bed, m), owner);
        bound_once(&bed);
    }
}

/// The members' re-registration after a member change (what their timers
/// do between bursts; the bed runs them only when ticked).
fn settle(bed: &mut Bed) {
    for _ in 0..2000 {
        let busy = (0..bed.nodes.len()).any(|n| !bed.down[n] && bed.nodes[n].sync_state().is_some_and(|s| s.0));
        if !busy {
            return;
        }
        bed.tick(1);
    }
    panic!("the re-registration did not end");
}

/// Every member's non-zero drop counters.
fn all_drops(bed: &Bed) -> Vec<(usize, &'static str, u64)> {
    let mut v = vec![];
    for n in 0..bed.nodes.len() {
        let c = bed.nodes[n].counters();
        v.extend(DropReason::ALL.iter().map(|r| (n, r.as_str(), c.drop_count(*r))).filter(|d| d.2 != 0));
    }
    v
}

/// One connection of the model run: its client port, its mapped port, the
/// server's ISN as the client sees it, the ISN the server saw, and its
/// state.
struct Conn {
    cport: u16,
    mport: u16,
    isn: u32,
    owner: usize,
    state: Life,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Life {
    /// Owned by the member holding its block.
    Alive,
    /// No member owns it since the last member change: the next client
    /// segment takes it over (or finds it lost).
    Orphaned,
    /// Lost: a client segment found no owner.
    Dead,
}

/// The cluster model run the issue asks of the simulator, on the
/// in-process bed: 10 000 PAT connections opened over 5 members while
/// members are killed and come back, client and server segments at random
/// members. After every step: a translated frame leaving for the server
/// carries its connection's mapped address and port and never the
/// client's address; the server's segments reach the client's port; every
/// connection alive keeps its mapping, across the failover of its owner
/// too; and (every 250 steps and after every member change) no mapped
/// endpoint is bound on two members at once.
#[test]
fn ten_thousand_pat_connections_over_five_members_with_kills_and_rejoins() {
    const NODES: usize = 5;
    const OPENS: usize = 10_000;
    let mut bed = Bed::with(NODES, |n| {
        let mut c = config(n, NODES, true);
        c.flow_capacity = 1 << 15;
        c
    });
    let mut spec = nat_spec();
    spec.xlate_capacity = 1 << 15;
    for p in &mut bed.nodes {
        p.set_nat(&spec).unwrap();
    }
    let mut rng = 0x5eed_0013u64;
    let mut next = move |n: usize| {
        // SplitMix64.
        rng = rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n as u64) as usize
    };
    let mut conns: Vec<Conn> = Vec::new();
    let (mut epoch, mut down) = (1u64, None::<usize>);
    let (mut kills, mut takeovers, mut moved, mut lost, mut steps) = (0, 0, 0, 0, 0);
    let up = |down: Option<usize>| (0..NODES).filter(move |&n| Some(n) != down);
    let pick_up = |down: Option<usize>, r: usize| up(down).nth(r % (NODES - usize::from(down.is_some()))).unwrap();
    while conns.len() < OPENS {
        steps += 1;
        let r = next(100);
        if r < 55 {
            let (at, synack_at) = (pick_up(down, next(NODES)), pick_up(down, next(NODES)));
            let cport = 1024 + conns.len() as u16 * 6 + next(6) as u16;
            let (mport, isn) = open(&mut bed, cport, at, synack_at);
            let ack = from_host(at, SERVER).tcp(cport, 80, C_ISN + 1, S_ISN + 1, ACK, 502, &[], &[]);
            assert_eq!(one(&bed.send(at, IN, ack)).0, at);
            conns.push(Conn { cport, mport, isn, owner: at, state: Life::Alive });
        } else if r < 75 && !conns.is_empty() {
            let i = next(conns.len());
            let c = &mut conns[i];
            let at = pick_up(down, next(NODES));
            let seg = from_host(at, SERVER).tcp(c.cport, 80, C_ISN + 1, S_ISN + 1, ACK, 502, &[], &[]);
            let c0 = bed.ccl.len();
            let out = bed.send(at, IN, seg);
            for (_, port, f) in &out {
                let (src, sport, dst, dport, seq, _, _) = tcp_of(f);
                assert_eq!((*port, src, sport, dst, dport), (OUT, POOL, c.mport, SERVER, 80), "step {steps}");
                assert_eq!(seq, c.isn.wrapping_add(1), "the sequence translation is kept");
            }
            match (c.state, out.len()) {
                (Life::Alive, 1) | (Life::Dead, 0) => {}
                // An orphan (or one a segment found lost, its record then
                // handed on by a later member change) taken over with its
                // mapping.
                (Life::Orphaned | Life::Dead, 1) => {
                    if c.state == Life::Dead {
                        lost -= 1;
                    }
                    c.owner = out[0].0;
                    assert_eq!(c.owner, holder(&bed, c.mport), "taken over by the block's holder");
                    c.state = Life::Alive;
                    takeovers += 1;
                }
                (Life::Orphaned, 0) => {
                    c.state = Life::Dead;
                    lost += 1;
                }
                (s, n) => panic!(
                    "step {steps}: a {s:?} connection's client segment at {at} (owner {}) gave {n} frame(s); drops {:?}, \
                     CCL {:?}",
                    c.owner,
                    all_drops(&bed),
                    &bed.ccl[c0..]
                ),
            }
        } else if r < 95 && !conns.is_empty() {
            let i = next(conns.len());
            let c = &mut conns[i];
            if !matches!(c.state, Life::Alive | Life::Orphaned) {
                continue;
            }
            let at = pick_up(down, next(NODES));
            let seg = from_server(at).tcp(80, c.mport, S_ISN + 1, c.isn.wrapping_add(1), ACK, 509, &[], &[]);
            let out = bed.send(at, OUT, seg);
            // An orphan's director hands it to the block's holder when the
            // member set changes, if it holds its state: then the server's
            // segment already finds it there.
            if c.state == Life::Orphaned && out.len() == 1 {
                if tcp_of(&out[0].2).3 != c.cport {
                    // Its mapping went to a newer connection: this one was
                    // lost (its takeover found the port taken).
                    c.state = Life::Dead;
                    lost += 1;
                    continue;
                }
                c.owner = holder(&bed, c.mport);
                c.state = Life::Alive;
                takeovers += 1;
            }
            let want = usize::from(c.state == Life::Alive);
            assert_eq!(out.len(), want, "step {steps}: the server's segment for a {:?} connection", c.state);
            for (n, port, f) in &out {
                let (src, _, dst, dport, _, ack, _) = tcp_of(f);
                assert_eq!((*n, *port, src, dst, dport, ack), (c.owner, IN, SERVER, HOST, c.cport, C_ISN + 1));
            }
        } else if r >= 95 {
            epoch += 1;
            match down.take() {
                None => {
                    let k = next(NODES);
                    bed.kill(k, epoch);
                    down = Some(k);
                    kills += 1;
                }
                Some(k) => bed.rejoin(k, epoch),
            }
            settle(&mut bed);
            bed.tick(1);
            // Every connection still owned is owned by the member holding
            // its block (taken over with its binding after a failure,
            // handed to its block's node when it came back); the others
            // wait for their next client segment.
            for c in conns.iter_mut().filter(|c| c.state != Life::Dead) {
                let owners = bed.owners_up(&tuple(HOST, c.cport, SERVER, 80, 6));
                match owners[..] {
                    [o] => {
                        assert_eq!(
                            o,
                            holder(&bed, c.mport),
                            "step {steps}: a translated connection away from its block"
                        );
                        if o != c.owner {
                            moved += 1;
                        }
                        c.owner = o;
                        c.state = Life::Alive;
                    }
                    [] => c.state = Life::Orphaned,
                    _ => panic!("step {steps}: owned by {owners:?}"),
                }
            }
            bound_once(&bed);
        }
        if steps % 250 == 0 {
            bound_once(&bed);
        }
    }
    bound_once(&bed);
    let count = |l: Life| conns.iter().filter(|c| c.state == l).count();
    let (alive, orphaned, dead) = (count(Life::Alive), count(Life::Orphaned), count(Life::Dead));
    let sum = |f: fn(&dataplane::pipeline::NatCounters) -> u64| -> u64 {
        (0..NODES).map(|n| f(&bed.nodes[n].nat_counters().unwrap())).sum()
    };
    let (adopted, refused) = (sum(|c| c.bindings_adopted), sum(|c| c.bindings_refused));
    let cl = |f: fn(&dataplane::pipeline::ClusterCounters) -> u64| -> u64 {
        (0..NODES).map(|n| f(&bed.cluster(n).counters)).sum()
    };
    let (regrants, handovers, failed) =
        (cl(|c| c.nat_regrants), cl(|c| c.nat_handovers), cl(|c| c.nat_handovers_failed));
    println!(
        "CCL: {regrants} orphans handed to their block's holder by their director, {handovers} connections handed \
         to their block's node when it came back, {failed} hand-overs not sent (frame pool full)"
    );
    println!(
        "{OPENS} PAT connections over {NODES} members in {steps} steps, {kills} kills and as many rejoins: {moved} \
         moved to their block's holder at a member change, {takeovers} taken over by a client segment, all with \
         their mapping; {lost} lost (orphaned, no member could keep them); at the end {alive} alive, {orphaned} \
         orphaned, {dead} lost; bindings adopted {adopted}, refused {refused} (counters since each node's last \
         restart)"
    );
    assert!(kills >= 10 && moved >= 100, "the run exercised failover: {kills} kills, {moved} moved");
}
