//! Which of a node's workers owns a frame (issue 12; docs/workers.md).
//!
//! Every worker owns its flow table, reassembler and pending tables, and
//! takes no lock, so both directions of a connection, and every fragment of
//! its datagrams, must be decided by one worker. The owning worker is a
//! pure function of what the frame carries:
//!
//! - TCP, UDP, ICMP echo and other protocols: the symmetric flow hash of the
//!   five-tuple (ICMP echo ports per SPEC R3), with its own seed
//!   (`WORKER_HASH_SEED`, so the worker choice is independent of the
//!   director ranking), mapped onto `workers` by multiply-shift;
//! - an ICMP error: the tuple it quotes, so it meets its connection;
//! - an IPv4 or IPv6 fragment: the *fragment worker*, a hash of (source,
//!   destination, identification) — every fragment carries those, only the
//!   first carries the ports. The fragment worker's reassembler learns the
//!   datagram's five-tuple from the first fragment and hands each fragment
//!   on to the flow's worker with that knowledge (`Verdict::Handoff`), as
//!   the fragment owner does between nodes (R10);
//! - ARP: every worker (each keeps its own neighbour cache; the worker
//!   that received the frame answers, the others learn from a copy);
//! - IPv6 (docs/ipv6.md): a connection's datagrams by the same tuple hash
//!   (an ICMPv6 error by the tuple it quotes); neighbour solicitations and
//!   advertisements to every worker, as ARP; fragments to their fragment
//!   worker, as IPv4's (an atomic fragment is a whole packet);
//! - anything else (frames too short to tell): any worker — it is dropped
//!   or answered where it arrived.
//!
//! With NAT (`steer_nat`, docs/nat.md) a datagram to a mapped address is
//! decided where its translation lives: one to a PAT pool address by the
//! worker holding the block of its destination port (an ICMP echo by its
//! identifier), one to a dynamic-NAT address by that address's worker, one
//! to a static rule's mapped address by the worker of the real tuple it
//! translates to, one to a cluster member's dynamic-NAT address (handed out
//! by the control node, N4) by the worker of the real tuple the replicated
//! table translates it to (`real_of`: the receiving worker's own copy of
//! the table, which every worker holds); an ICMP error by the packet it
//! quotes, the same way.
//! The worker that allocated a translation is the worker of the
//! connection's real tuple, so both directions still meet.
//!
//! The same function runs on every node, so a peer can tell from a flow's
//! tuple which worker of another node holds it, whatever that node's
//! worker count (the receiver maps the hash onto its own count).
//!
//! Invariants: `worker_of_tuple(t, n) == worker_of_tuple(&t.reversed(), n)`
//! and is below `n`; a frame's steering never depends on anything but its
//! bytes, `n`, the NAT plan and (dynamic NAT on a cluster member) the
//! replicated table; nothing allocates or panics on any input.

use crate::cluster::FlowHasher;
use crate::frag::frag_hash_seeded;
use crate::nat::plan::{nat_class, NatInbound, NatPlan};
use crate::types::{ip_proto, FiveTuple, WorkerId};
use crate::wire::ethernet::{ethertype, EthernetFrame};
use crate::wire::icmp::{msg_type, Icmpv4Packet};
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::{tcp, udp};
use std::net::{IpAddr, Ipv4Addr};

/// Seed of the worker hash (distinct from the director's and the fragment
/// owner's, so the three choices are independent).
pub const WORKER_HASH_SEED: u64 = 0x7a3c_51e9_0d24_b86f;

/// Where a received frame is decided.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Steer {
    /// By this worker.
    Worker(WorkerId),
    /// By the receiving worker, every other worker learning from a copy
    /// (ARP).
    All,
    /// By whichever worker received it.
    Any,
}

/// `h` mapped onto `0..n` (multiply-shift: no division, uniform).
#[inline(always)]
fn pick(h: u64, workers: u16) -> WorkerId {
    WorkerId(((u128::from(h) * u128::from(workers.max(1))) >> 64) as u16)
}

/// The worker of `workers` that owns the connection of `t` (either
/// direction).
#[inline]
pub fn worker_of_tuple(t: &FiveTuple, workers: u16) -> WorkerId {
    if workers <= 1 {
        return WorkerId(0);
    }
    pick(FlowHasher::new(WORKER_HASH_SEED).hash(t), workers)
}

/// The worker that collects the fragments of datagram (`src`, `dst`,
/// `ident`).
#[inline]
pub fn fragment_worker(src: IpAddr, dst: IpAddr, ident: u32, workers: u16) -> WorkerId {
    if workers <= 1 {
        return WorkerId(0);
    }
    pick(frag_hash_seeded(WORKER_HASH_SEED, src, dst, ident), workers)
}

/// Where `frame` (as received on a port) is decided, for a node with
/// `workers` workers.
pub fn steer(frame: &[u8], workers: u16) -> Steer {
    steer_nat(frame, workers, None, no_shared)
}

/// A `real_of` for nodes without a replicated dynamic-NAT table.
pub fn no_shared(_: Ipv4Addr) -> Option<Ipv4Addr> {
    None
}

/// [`steer`] on a node translating with `nat` (the plan its workers share):
/// traffic to mapped addresses goes where its translation is (module
/// essay).
///
/// `real_of`: the replicated dynamic-NAT table (a cluster member's, N4):
/// the real address a mapped one is handed to (`Pipeline::shared_real_of`);
/// [`no_shared`] elsewhere.
pub fn steer_nat(
    frame: &[u8],
    workers: u16,
    nat: Option<&NatPlan>,
    real_of: impl Fn(Ipv4Addr) -> Option<Ipv4Addr>,
) -> Steer {
    if workers <= 1 {
        return Steer::Worker(WorkerId(0));
    }
    let Ok(eth) = EthernetFrame::new_checked(frame) else { return Steer::Any };
    match eth.ethertype() {
        ethertype::ARP => Steer::All,
        ethertype::IPV4 => ipv4_nat(eth.payload(), workers, nat, &real_of).map_or(Steer::Any, Steer::Worker),
        ethertype::IPV6 => ipv6(eth.payload(), workers),
        _ => Steer::Any,
    }
}

/// Where a frame received on the CCL port is decided: a data-channel CCL
/// datagram by the worker of its header's channel (the sending worker's
/// index: every member runs the same number of workers and a worker only
/// sends about connections of its own index, so that worker holds them
/// here too); anything else as [`steer`] says. The channel is read from
/// the MAC-covered header, so a replayed datagram always meets the replay
/// window that saw it first. A channel at or above `workers` (a member
/// with more workers) goes to the receiving worker, which drops it as
/// `ccl-wrong-worker`; the control channel likewise (the node hands
/// control frames to its control lcore before steering).
pub fn steer_ccl(frame: &[u8], workers: u16) -> Steer {
    if workers <= 1 {
        return Steer::Worker(WorkerId(0));
    }
    let Ok(d) = crate::ccl::strip_udp(frame) else { return steer(frame, workers) };
    match crate::ccl::CclPacket::new_checked(d.payload) {
        Ok(p) if u16::from(p.channel()) < workers => Steer::Worker(WorkerId(u16::from(p.channel()))),
        _ => Steer::Any,
    }
}

/// Where an IPv6 datagram is decided (module essay).
fn ipv6(l3: &[u8], workers: u16) -> Steer {
    use crate::wire::icmpv6::{self, msg_type as t6};
    let Ok(p) = crate::wire::ipv6::Ipv6Packet::new_checked(l3) else { return Steer::Any };
    let Ok(u) = p.upper_layer() else { return Steer::Any };
    // A fragment (not an atomic one, RFC 6946): its fragment worker, as
    // IPv4's (only the first fragment carries the ports).
    if let Some((_, _, ident)) = u.fragment.filter(|&(o, m, _)| o != 0 || m) {
        return Steer::Worker(fragment_worker(IpAddr::V6(p.src()), IpAddr::V6(p.dst()), ident, workers));
    }
    let (src, dst, proto) = (IpAddr::V6(p.src()), IpAddr::V6(p.dst()), u.protocol);
    let l4 = p.payload().get(u.offset..).unwrap_or(&[]);
    let t = |src_port, dst_port| FiveTuple { src, dst, proto, src_port, dst_port };
    let tuple = match proto {
        ip_proto::TCP => tcp::TcpPacket::new_checked(l4).ok().map(|p| t(p.src_port(), p.dst_port())),
        ip_proto::UDP => udp::ports(l4).map(|(s, d)| t(s, d)),
        ip_proto::ICMPV6 => match icmpv6::type_and_ident(l4) {
            Some((t6::NEIGHBOR_SOLICIT | t6::NEIGHBOR_ADVERT, _)) => return Steer::All,
            Some((t6::ECHO_REQUEST, id)) => Some(t(id, 0)),
            Some((t6::ECHO_REPLY, id)) => Some(t(0, id)),
            Some((k, _)) if icmpv6::is_error(k) => icmpv6::quoted_tuple(l4),
            _ => None,
        },
        _ => Some(t(0, 0)),
    };
    tuple.map_or(Steer::Any, |t| Steer::Worker(worker_of_tuple(&t, workers)))
}

/// The owning worker of an IPv4 datagram, `None` when the header does not
/// say (the receiving worker drops it).
pub fn ipv4(l3: &[u8], workers: u16) -> Option<WorkerId> {
    ipv4_nat(l3, workers, None, &no_shared)
}

/// The worker of a connection whose packet has tuple `t` as received
/// (`quoted`: the tuple of a packet an ICMP error quotes, sent by the
/// mapped side), on a node translating with `nat`: where its translation
/// is (module essay).
/// The worker of the connection of a datagram received with tuple `t`
/// (its fragments' datagram: the pipeline's fragment hand-off) on a node
/// translating with `nat`.
/// (`real_of` as for [`steer_nat`].)
pub fn nat_worker_of(
    t: &FiveTuple,
    nat: Option<&NatPlan>,
    workers: u16,
    real_of: impl Fn(Ipv4Addr) -> Option<Ipv4Addr>,
) -> WorkerId {
    if workers <= 1 {
        return WorkerId(0);
    }
    nat_worker(*t, false, nat, workers, &real_of)
}

fn nat_worker(
    t: FiveTuple,
    quoted: bool,
    nat: Option<&NatPlan>,
    workers: u16,
    real_of: &impl Fn(Ipv4Addr) -> Option<Ipv4Addr>,
) -> WorkerId {
    // Inbound the mapped endpoint is the destination; a quoted packet
    // went out from it.
    let t = if quoted { t.reversed() } else { t };
    let IpAddr::V4(dst) = t.dst else { return worker_of_tuple(&t, workers) };
    let class = nat_class(t.proto);
    // An echo's identifier is its "port" both ways (R3: in one of the two).
    let port = if t.proto == ip_proto::ICMP { t.src_port | t.dst_port } else { t.dst_port };
    match nat.and_then(|n| n.inbound(dst, t.proto, class, port)) {
        Some(NatInbound::Worker(w)) => WorkerId(w.0.min(workers - 1)),
        Some(NatInbound::Real(a, p)) => {
            worker_of_tuple(&FiveTuple { dst: IpAddr::V4(a), dst_port: p.unwrap_or(t.dst_port), ..t }, workers)
        }
        // Dynamic NAT keeps ports: the address alone. Not (yet) in the
        // table: where it arrived as, dropped there (`nat-no-xlate`).
        Some(NatInbound::Shared) => match real_of(dst) {
            Some(a) => worker_of_tuple(&FiveTuple { dst: IpAddr::V4(a), ..t }, workers),
            None => worker_of_tuple(&t, workers),
        },
        None => worker_of_tuple(&t, workers),
    }
}

fn ipv4_nat(
    l3: &[u8],
    workers: u16,
    nat: Option<&NatPlan>,
    real_of: &impl Fn(Ipv4Addr) -> Option<Ipv4Addr>,
) -> Option<WorkerId> {
    let ip = Ipv4Packet::new_checked_header(l3).ok()?;
    let (src, dst, proto) = (IpAddr::V4(ip.src()), IpAddr::V4(ip.dst()), ip.protocol());
    if ip.is_fragment() {
        return Some(fragment_worker(src, dst, u32::from(ip.ident()), workers));
    }
    let t = |src_port, dst_port| FiveTuple { src, dst, proto, src_port, dst_port };
    let payload = ip.payload();
    let (tuple, quoted) = match proto {
        ip_proto::TCP | ip_proto::UDP => {
            let (sp, dp) = if proto == ip_proto::TCP {
                tcp::TcpPacket::new_checked(payload).ok().map(|p| (p.src_port(), p.dst_port()))?
            } else {
                udp::ports(payload)?
            };
            (t(sp, dp), false)
        }
        ip_proto::ICMP => {
            let i = Icmpv4Packet::new_checked(payload).ok()?;
            match i.msg_type() {
                msg_type::ECHO_REQUEST => (t(i.echo_ident(), 0), false),
                msg_type::ECHO_REPLY => (t(0, i.echo_ident()), false),
                _ if i.is_error() => {
                    let e = i.embedded().ok()?;
                    let (sp, dp) = e.ports();
                    let q = FiveTuple {
                        src: IpAddr::V4(e.src),
                        dst: IpAddr::V4(e.dst),
                        proto: e.protocol,
                        src_port: sp,
                        dst_port: dp,
                    };
                    (q, true)
                }
                _ => (t(0, 0), false),
            }
        }
        _ => (t(0, 0), false),
    };
    Some(if nat.is_some() { nat_worker(tuple, quoted, nat, workers, real_of) } else { worker_of_tuple(&tuple, workers) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::build::PacketBuilder;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    const A: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 10);
    const B: Ipv4Addr = Ipv4Addr::new(93, 184, 216, 34);
    const MA: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const MB: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn b(src: Ipv4Addr, dst: Ipv4Addr) -> PacketBuilder {
        PacketBuilder::new(MA, MB, src, dst)
    }

    #[test]
    fn both_directions_errors_and_fragments_meet() {
        for n in [2u16, 3, 4, 8, 32] {
            let fwd = steer(&b(A, B).tcp(40000, 80, 1, 0, 2, 1024, &[], b""), n);
            let rev = steer(&b(B, A).tcp(80, 40000, 1, 2, 0x12, 1024, &[], b""), n);
            assert_eq!(fwd, rev, "{n} workers");
            let Steer::Worker(w) = fwd else { panic!("a worker") };
            assert!(w.0 < n);
            // An error about the client's segment, from a router.
            let seg = b(A, B).tcp(40000, 80, 1, 0, 2, 1024, &[], b"");
            let err = b(Ipv4Addr::new(203, 0, 113, 1), A).icmp(3, 4, (0, 1400), &seg[14..42]);
            assert_eq!(steer(&err, n), fwd, "the error meets its connection");
            // Echo request and reply (R3 ports).
            let req = steer(&b(A, B).icmp(8, 0, (77, 1), b""), n);
            assert_eq!(req, steer(&b(B, A).icmp(0, 0, (77, 1), b""), n));
            // Every fragment of a datagram to its fragment worker.
            let mut f1 = PacketBuilder { dont_frag: false, ident: 4242, ..b(A, B) }.udp(5000, 53, &[0; 100]);
            Ipv4Packet::new_unchecked(&mut f1[14..]).set_flags_frag(crate::wire::ipv4::FLAG_MF, 0);
            let mut f2 = f1.clone();
            Ipv4Packet::new_unchecked(&mut f2[14..]).set_flags_frag(0, 64);
            f2[34..].fill(0xee); // no ports in a later fragment
            let fw = fragment_worker(IpAddr::V4(A), IpAddr::V4(B), 4242, n);
            assert_eq!((steer(&f1, n), steer(&f2, n)), (Steer::Worker(fw), Steer::Worker(fw)));
        }
    }

    /// An Ethernet + IPv6 frame `src` → `dst` around `payload`.
    fn v6(src: &str, dst: &str, nh: u8, payload: &[u8]) -> Vec<u8> {
        let (s, d): (std::net::Ipv6Addr, std::net::Ipv6Addr) = (src.parse().unwrap(), dst.parse().unwrap());
        let mut f = vec![0u8; 54];
        f[0..6].copy_from_slice(&MB);
        f[6..12].copy_from_slice(&MA);
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        let mut p = crate::wire::ipv6::Ipv6Packet::new_unchecked(&mut f[14..54]);
        p.set_ver_tc_flow(0, 0);
        p.set_payload_len(payload.len() as u16);
        p.set_next_header(nh);
        p.set_hop_limit(64);
        p.set_src(s);
        p.set_dst(d);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn ipv6_connections_errors_and_echoes_meet_neighbour_discovery_goes_to_all() {
        let tcp = |sp: u16, dp: u16| {
            let mut t = vec![0u8; 20];
            t[0..2].copy_from_slice(&sp.to_be_bytes());
            t[2..4].copy_from_slice(&dp.to_be_bytes());
            t[12] = 0x50;
            t
        };
        let (a, b) = ("2001:db8:1::10", "2001:db8:99::80");
        for n in [2u16, 3, 4, 8, 32] {
            let fwd = steer(&v6(a, b, 6, &tcp(40000, 80)), n);
            assert_eq!(fwd, steer(&v6(b, a, 6, &tcp(80, 40000)), n), "{n} workers");
            assert!(matches!(fwd, Steer::Worker(w) if w.0 < n));
            // Packet too big from a router, quoting the client's segment.
            let seg = v6(a, b, 6, &tcp(40000, 80));
            let mut err = vec![2, 0, 0, 0, 0, 0, 5, 0x78];
            err.extend_from_slice(&seg[14..]);
            assert_eq!(steer(&v6("2001:db8:2::fe", a, 58, &err), n), fwd, "the error meets its connection");
            // Echo request and reply.
            let echo = |t: u8| vec![t, 0, 0, 0, 0, 77, 0, 1];
            assert_eq!(steer(&v6(a, b, 58, &echo(128)), n), steer(&v6(b, a, 58, &echo(129)), n));
            // Solicitations and advertisements: every worker learns.
            let mut ns = vec![0u8; 24];
            ns[0] = 135;
            assert_eq!(steer(&v6(a, "ff02::1:ff00:1", 58, &ns), n), Steer::All);
            ns[0] = 136;
            assert_eq!(steer(&v6(a, "2001:db8:1::1", 58, &ns), n), Steer::All);
            // Every fragment of a datagram to its fragment worker (only
            // the first carries the ports); an atomic fragment as a whole
            // packet; a cut header where it arrived.
            let (ia, ib) = (IpAddr::V6(a.parse().unwrap()), IpAddr::V6(b.parse().unwrap()));
            let fw = Steer::Worker(fragment_worker(ia, ib, 9, n));
            let mut first = vec![6, 0, 0, 1, 0, 0, 0, 9];
            first.extend_from_slice(&tcp(40000, 80));
            assert_eq!(steer(&v6(a, b, 44, &first), n), fw);
            assert_eq!(steer(&v6(a, b, 44, &[6, 0, 0, 0x19, 0, 0, 0, 9, 0xee, 0xee]), n), fw);
            let mut atomic = vec![6, 0, 0, 0, 0, 0, 0, 9];
            atomic.extend_from_slice(&tcp(40000, 80));
            assert_eq!(steer(&v6(a, b, 44, &atomic), n), fwd);
            assert_eq!(steer(&v6(a, b, 6, &[0, 1]), n), Steer::Any);
        }
    }

    #[test]
    fn arp_to_all_junk_anywhere_one_worker_always_zero() {
        let arp = crate::wire::build::arp(MA, [0xff; 6], None, crate::wire::arp::Operation::Request, MA, A, [0; 6], B);
        assert_eq!(steer(&arp, 4), Steer::All);
        assert_eq!(steer(&[0u8; 10], 4), Steer::Any);
        let mut v6 = b(A, B).udp(1, 2, b"");
        v6[12] = 0x86;
        v6[13] = 0xdd;
        assert_eq!(steer(&v6, 4), Steer::Any);
        assert_eq!(steer(&arp, 1), Steer::Worker(WorkerId(0)));
        assert_eq!(steer(&[], 1), Steer::Worker(WorkerId(0)));
    }

    #[test]
    fn ccl_datagrams_go_to_their_channel() {
        use crate::ccl::{CclKey, FramePath, Message, Sealer, SyncDone, CONTROL_CHANNEL};
        use crate::{Epoch, NodeId};
        let key = CclKey::new("lab", "a secret of some length").unwrap();
        let path = FramePath { src_mac: MA, dst_mac: MB, src_ip: Ipv4Addr::new(10, 9, 0, 1), dst_ip: Ipv4Addr::new(10, 9, 0, 2) };
        let msg = Message::SyncDone(SyncDone { epoch: Epoch(3), records: 0, round: 0 });
        let frame = |channel: u8| {
            let mut s = Sealer::new(&key, NodeId(0), channel, 7).unwrap();
            let mut out = vec![0u8; 256];
            let n = s.seal_frame(&path, Epoch(3), &msg, &mut out).unwrap();
            out.truncate(n);
            out
        };
        for ch in 0..4u8 {
            assert_eq!(steer_ccl(&frame(ch), 4), Steer::Worker(WorkerId(u16::from(ch))));
            assert_eq!(steer_ccl(&frame(ch), 1), Steer::Worker(WorkerId(0)));
        }
        // A member with more workers, the control channel: where it arrived.
        assert_eq!(steer_ccl(&frame(5), 4), Steer::Any);
        assert_eq!(steer_ccl(&frame(CONTROL_CHANNEL), 4), Steer::Any);
        // Not a CCL datagram (ARP, a ping to the CCL address): as `steer`.
        let arp = crate::wire::build::arp(MA, [0xff; 6], None, crate::wire::arp::Operation::Request, MA, A, [0; 6], B);
        assert_eq!(steer_ccl(&arp, 4), Steer::All);
        let ping = b(A, B).icmp(8, 0, (77, 1), b"");
        assert_eq!(steer_ccl(&ping, 4), steer(&ping, 4));
        // A CCL datagram whose header is not ours (bad magic): where it
        // arrived (and dropped there).
        let mut f = frame(2);
        f[42] ^= 0xff;
        assert_eq!(steer_ccl(&f, 4), Steer::Any);
    }

    #[test]
    fn flows_spread_over_the_workers() {
        let n = 4u16;
        let mut seen = [0u32; 4];
        for p in 0..4000u16 {
            let t = FiveTuple { src: IpAddr::V4(A), dst: IpAddr::V4(B), proto: 6, src_port: 20000 + p, dst_port: 80 };
            seen[usize::from(worker_of_tuple(&t, n).0)] += 1;
        }
        assert!(seen.iter().all(|&c| (850..1150).contains(&c)), "{seen:?}");
    }

    proptest! {
        /// Any bytes: a worker below `n` or All/Any, never a panic.
        #[test]
        fn any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200), n in 1u16..64) {
            match steer(&bytes, n) {
                Steer::Worker(w) => prop_assert!(w.0 < n),
                Steer::All | Steer::Any => {}
            }
        }

        /// Symmetric for any tuple.
        #[test]
        fn symmetric(a in any::<u32>(), b in any::<u32>(), pa in any::<u16>(), pb in any::<u16>(), proto in any::<u8>(), n in 1u16..64) {
            let t = FiveTuple { src: IpAddr::V4(a.into()), dst: IpAddr::V4(b.into()), proto, src_port: pa, dst_port: pb };
            prop_assert_eq!(worker_of_tuple(&t, n), worker_of_tuple(&t.reversed(), n));
        }
    }
}
