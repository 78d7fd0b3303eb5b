//! The SYN proxy stage (TCP intercept; docs/flood.md, "SYN proxy"): what a
//! node does with the three packets a proxied connection's handshakes turn
//! on, each rewritten in place into the segment the proxy sends instead.
//!
//! ```text
//!  SYN over max-embryonic (conntrack: `SynProxyCookie`)
//!      → SYN-ACK to the client, seq = cookie, MSS only
//!  unknown ACK whose ack − 1 is a valid cookie (`Flows::track`)
//!      → conntrack `open_proxied`; the ACK becomes the SYN to the server,
//!        the client's ISN and MSS (the cluster's ISN' on top)
//!  the server's SYN-ACK (`Splice::Answered`)
//!      → the handshake's last ACK to the server
//!  later packets: `Splice::Xlate` (egress translates both sequence spaces)
//! ```
//!
//! A real client sends its request right behind its ACK, long before the
//! server's SYN-ACK can come back: while the connection is `Connecting`
//! conntrack refuses the client's segments (`syn-proxy-pending`) and this
//! stage *holds* them instead (`ProxyHold`, the ARP hold's and the pending
//! table's `FramePool` with its own metadata): copied as received (after
//! NAT inbound, before any other change) into one of `HOLD_SLOTS` slots,
//! at most `HOLD_PER_CONN` per connection (`Verdict::Consumed`, counted
//! `held`). When the server's SYN-ACK splices the connection the pipeline
//! decides them again, oldest first, right after the handshake's last ACK
//! (`Pipeline::release_held`): now spliced, each is tracked and translated
//! like any later segment of the connection (the server-side delta, the
//! cluster's, NAT) and queued for `drain_generated` behind the ACK (the
//! frame's own verdict) — `released`. A frame that finds no room (pool
//! full, the connection's bound reached, too long for a slot) is dropped
//! as before (`syn-proxy-pending`). Held frames whose connection is no
//! longer connecting (a RST from either side, the flow expired or gone)
//! or that waited `HOLD_TIMEOUT` are freed by `expire` (`poll_timers`) and
//! counted `held_dropped` (they were counted `consumed` when held: a drop
//! reason would count them twice), as are released frames the pipeline
//! then drops.
//!
//! In a cluster the cookies are the cluster's (`share`): every member and
//! worker keys them with `proxy_key(cluster secret)` and counts their
//! periods on the system clock (`set_wall_clock`: members agree as their
//! clocks do, within a period of 64 s), so the member a client's ACK
//! reaches can validate a cookie another member sent — after a member
//! change ECMP may move the handshake between the SYN-ACK and the ACK.
//! Nothing was stored for the cookie, so whoever validates it may open
//! the connection; the pipeline asks the director first (an election,
//! as for a new UDP flow: `ClusterPath::plan_opening`), so that a client
//! segment reaching a second member while the first opens is sent to it,
//! not opened twice. Checking every unknown bare ACK costs one SipHash
//! on a packet that is about to ask a director anyway.
//!
//! Invariants: no state is kept for a SYN answered with a cookie (a
//! spoofed flood costs one SipHash and one rewritten frame per SYN); an
//! unknown ACK is checked against the cookies only while this worker has
//! sent cookies in the last two cookie periods (`check_until`) — on a
//! cluster member always (`share`: below) —, so outside a flood the stage
//! costs the established path nothing; the frame is
//! resized and rewritten only after every check passed (a failed rewrite
//! drops it, counted); nothing allocates (the hold's slots are reserved by
//! `SynProxy::new`), and the hold costs the established path nothing (it
//! is reached only from conntrack's `syn-proxy-pending` refusal and the
//! SYN-ACK that splices).

use super::context::{Outcome, Rx};
use super::egress::Route;
use crate::buf::PacketBuf;
use super::hold::{FrameHold, HoldLimits};
use crate::slots::SlotMem;
use crate::types::{Duration, PortId};
use crate::conntrack::synproxy::{ProxyCookies, PERIOD};
use crate::conntrack::{tcp_flags, L4Info};
use crate::types::{DropReason, FiveTuple, Timestamp};
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::synproxy::{segment_len, write_segment, Segment};

/// The SYN proxy's counters (`show stats`, group `syn_proxy`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SynProxyCounters {
    /// SYNs over an embryonic limit answered with a cookie SYN-ACK.
    pub cookies_sent: u64,
    /// Client ACKs that returned a valid cookie: connections opened to the
    /// server.
    pub opened: u64,
    /// Servers' SYN-ACKs that completed a splice.
    pub spliced: u64,
    /// ACKs without a flow, checked while cookies were out, that carried
    /// no valid cookie (dropped as before: `tcp-no-flow`, or asked about in
    /// a cluster).
    pub bad_cookies: u64,
    /// Client segments held while their connection was connecting
    /// (`Verdict::Consumed`); each ends in `released` or `held_dropped`.
    pub held: u64,
    /// Held segments sent on once the server's SYN-ACK spliced their
    /// connection (or handed to the ARP hold on their way out).
    pub released: u64,
    /// Held segments freed unsent: their connection never spliced within
    /// `HOLD_TIMEOUT` (server silent), was reset or expired, or the
    /// pipeline dropped them when they were decided after the splice.
    pub held_dropped: u64,
}

crate::impl_stats!(SynProxyCounters {
    counter cookies_sent,
    counter opened,
    counter spliced,
    counter bad_cookies,
    counter held,
    counter released,
    counter held_dropped,
});

/// One worker's SYN proxy.
pub(crate) struct SynProxy {
    cookies: ProxyCookies,
    /// Unknown ACKs are checked against the cookies until then; for ever
    /// in cluster mode (`share`: after a member change ECMP may bring a
    /// client's ACK to a member that sent no cookie itself).
    check_until: Timestamp,
    /// Added to `now` for the cookie's period counter (`set_wall_clock`):
    /// the Unix time of the node clock's origin, so members' periods agree
    /// as their system clocks do.
    wall_offset: u64,
    pub counters: SynProxyCounters,
    /// Client segments waiting for their connection's splice.
    pub hold: ProxyHold,
}

impl SynProxy {
    /// `slot_len`: bytes per held frame's slot (`slots::slot_len_for`).
    pub fn new(slot_len: usize) -> SynProxy {
        SynProxy {
            cookies: ProxyCookies::new(random_key()),
            check_until: Timestamp::ZERO,
            wall_offset: 0,
            counters: SynProxyCounters::default(),
            hold: proxy_hold(slot_len),
        }
    }

    /// A client segment conntrack refused while its connection connects
    /// (`SynProxyPending`): hold a copy of `frame` (as received on
    /// `in_port`, `rx`; not a fragment) for the splice — `Consumed` — or,
    /// without room, drop it as before.
    #[cold]
    #[inline(never)]
    pub fn hold_early(&mut self, now: Timestamp, tuple: &FiveTuple, in_port: PortId, rx: Rx, frame: &[u8]) -> Outcome {
        if rx.frag.is_some() || !self.hold.hold(now, tuple, in_port, rx, frame) {
            return Outcome::Drop(DropReason::SynProxyPending);
        }
        self.counters.held += 1;
        Outcome::Consumed
    }

    /// File the fate of a held frame decided after its splice (`take`),
    /// its frame now at `start..end` of `mem`.
    pub fn finish_held(&mut self, slot: u16, mem: SlotMem, start: usize, end: usize, outcome: Outcome) {
        if self.hold.finish(slot, mem, start, end, outcome) {
            self.counters.released += 1;
        } else {
            self.counters.held_dropped += 1;
        }
    }

    /// Free the held frames whose connection is no longer connecting
    /// (`connecting` says) or whose wait is over.
    pub fn expire_held(&mut self, now: Timestamp, connecting: impl Fn(&FiveTuple) -> bool) {
        self.counters.held_dropped += self.hold.expire(now, connecting);
    }

    /// Free every held frame (the flow table was cleared).
    pub fn clear_held(&mut self) {
        self.counters.held_dropped += self.hold.clear();
    }

    /// Cookies keyed with the cluster's `key` (`proxy_key`), checked on
    /// every unknown ACK: any member validates another's cookie.
    pub fn share(&mut self, key: [u8; 16]) {
        self.cookies = ProxyCookies::new(key);
        self.check_until = Timestamp::MAX;
    }

    /// The Unix time, ns, of the clock origin `now` counts from.
    pub fn set_wall_clock(&mut self, origin_unix_ns: u64) {
        self.wall_offset = origin_unix_ns;
    }

    /// `now` on the cookies' clock.
    #[inline]
    fn wall(&self, now: Timestamp) -> Timestamp {
        Timestamp(now.0.saturating_add(self.wall_offset))
    }

    /// The cookie for a client's SYN of `tuple` (`isn`, its MSS option),
    /// and the MSS it encodes; unknown ACKs are checked from now on for
    /// two cookie periods.
    pub fn cookie(&mut self, now: Timestamp, tuple: &FiveTuple, isn: u32, mss: Option<u16>) -> (u32, u16) {
        self.check_until = self.check_until.max(now.saturating_add(PERIOD).saturating_add(PERIOD));
        self.counters.cookies_sent += 1;
        self.cookies.encode(tuple, isn, mss, self.wall(now))
    }

    /// A TCP segment without a flow: is it a client's ACK returning a
    /// valid cookie? The MSS the cookie carries. Cheap (no hash) unless
    /// cookies went out recently and the segment is an ACK without SYN,
    /// RST or FIN.
    #[inline]
    pub fn check(&mut self, now: Timestamp, tuple: &FiveTuple, l4: &L4Info) -> Option<u16> {
        let mss = self.returned(now, tuple, l4)?;
        if mss.is_none() {
            self.counters.bad_cookies += 1;
        }
        mss
    }

    /// `check` without counting (a cluster member's plan looks first,
    /// `Flows::track` opens).
    #[inline]
    pub fn valid(&self, now: Timestamp, tuple: &FiveTuple, l4: &L4Info) -> bool {
        matches!(self.returned(now, tuple, l4), Some(Some(_)))
    }

    /// `None`: not a segment to check (outside a cluster no cookie out
    /// lately; not a bare ACK); else whether its cookie is valid (the MSS
    /// it carries).
    #[inline]
    fn returned(&self, now: Timestamp, tuple: &FiveTuple, l4: &L4Info) -> Option<Option<u16>> {
        if now >= self.check_until {
            return None;
        }
        let L4Info::Tcp(seg) = l4 else { return None };
        if seg.flags & (tcp_flags::SYN | tcp_flags::RST | tcp_flags::FIN | tcp_flags::ACK) != tcp_flags::ACK {
            return None;
        }
        Some(self.cookies.check(tuple, seg.seq, seg.ack, self.wall(now)))
    }
}

/// Frame slots for held client segments (2 KiB each: 64 KiB per worker).
pub const HOLD_SLOTS: usize = 32;
/// Segments held per connection, at most: what a client sends before the
/// server could answer is its request (an HTTP GET, a TLS ClientHello: one
/// or two segments); the rest is dropped as before and retransmitted.
pub const HOLD_PER_CONN: usize = 4;
/// How long a held segment waits for its connection's splice: the initial
/// retransmission timeout (RFC 6298 §2.1, 1 s), after which the client
/// has sent it again anyway. (Linux starts at 1 s too, 200 ms minimum.)
pub const HOLD_TIMEOUT: Duration = Duration::from_millis(1000);

/// Client segments waiting for their connection's splice
/// (`hold::FrameHold`), each keyed by its client tuple.
pub(crate) type ProxyHold = FrameHold<FiveTuple>;

/// The SYN proxy's hold: `HOLD_SLOTS` slots, `HOLD_PER_CONN` per
/// connection, `HOLD_TIMEOUT`, tagged with the tuple's hash.
fn proxy_hold(slot_len: usize) -> ProxyHold {
    FrameHold::new(HoldLimits { slots: HOLD_SLOTS, per_key: HOLD_PER_CONN, timeout: HOLD_TIMEOUT }, slot_len, tag)
}

/// The slot tag of a connection's held frames (`FramePool::park_tagged`):
/// its client tuple's hash folded to 32 bits, never 0.
fn tag(tuple: &FiveTuple) -> u32 {
    let h = crate::cluster::flow_hash(tuple);
    ((h ^ (h >> 32)) as u32) | 1
}

/// The SYN proxy's cookie key of a cluster: 16 bytes derived from its
/// secret, distinct from the CCL MAC key and the ISN cookie key.
pub fn proxy_key(secret: &str) -> [u8; 16] {
    let k = blake3::derive_key("clusterfw syn proxy cookie v1", secret.as_bytes());
    let mut out = [0u8; 16];
    for (d, s) in out.iter_mut().zip(k) {
        *d = s;
    }
    out
}

fn random_key() -> [u8; 16] {
    use std::hash::BuildHasher;
    let s = std::collections::hash_map::RandomState::new();
    let a = s.hash_one(0x5359_4e50_u64);
    let b = s.hash_one(0x524f_5859_u64);
    let mut k = [0u8; 16];
    for (d, v) in k.iter_mut().zip(a.to_le_bytes().into_iter().chain(b.to_le_bytes())) {
        *d = v;
    }
    k
}

/// What the proxy sends in place of a frame: `seg`, by `route`; `back`:
/// to where the frame came from (addresses and ports swapped) — the
/// cookie SYN-ACK to the client, the last ACK of the server's handshake —
/// or on (the client's ACK becomes the SYN to the server, `seq` in the
/// client's space: the cluster's translation, if any, follows).
#[derive(Copy, Clone, Debug)]
pub(crate) struct ProxyStep {
    pub route: Route,
    pub seg: Segment,
    pub back: bool,
}

impl ProxyStep {
    /// Rewrite the frame (its IPv4 datagram at `l2`) into the step's
    /// segment, resized to it.
    pub fn rewrite<B: PacketBuf>(&self, l2: usize, buf: &mut B) -> Result<(), DropReason> {
        let ihl = {
            let l3 = buf.data().get(l2..).ok_or(DropReason::EthTruncated)?;
            Ipv4Packet::new_checked(l3).map_err(|_| DropReason::Ipv4Truncated)?.header_len()
        };
        let want = l2 + segment_len(ihl, self.seg.mss.is_some());
        let have = buf.data().len();
        let resized = if have < want { buf.append(want - have) } else { buf.trim_back(have - want) };
        if !resized {
            return Err(DropReason::SynProxyCookie);
        }
        let l3 = buf.data_mut().get_mut(l2..).ok_or(DropReason::EthTruncated)?;
        write_segment(l3, self.back, &self.seg).map_err(|_| DropReason::SynProxyCookie)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slots::SLOT_LEN;
    use std::net::{IpAddr, Ipv4Addr};

    const T: Timestamp = Timestamp::from_secs(1);

    fn conn(port: u16) -> FiveTuple {
        FiveTuple { src: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 8)), dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 10)), proto: 6, src_port: port, dst_port: 80 }
    }

    fn frame(tag: u8) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[20] = tag;
        f
    }

    /// Take every frame of `c` held so far, in order, sent on port 1.
    fn release(h: &mut ProxyHold, c: &FiveTuple) -> Vec<u8> {
        let before = h.next_seq();
        let mut tags = vec![];
        while let Some(x) = h.take(c, before) {
            tags.push(x.mem[x.start + 20]);
            assert!(h.finish(x.slot, x.mem, x.start, x.end, Outcome::Forward(PortId(1))));
        }
        tags
    }

    /// The client's ACK of `cookie` for a SYN with ISN 1000.
    fn ack_of(cookie: u32) -> L4Info {
        L4Info::Tcp(crate::conntrack::TcpSeg {
            flags: tcp_flags::ACK,
            seq: 1001,
            ack: cookie.wrapping_add(1),
            window: 502,
            payload_len: 0,
            wscale: None,
            sack_permitted: false,
        })
    }

    #[test]
    fn shared_cookies_validate_on_another_member_whose_clock_agrees() {
        let key = proxy_key("lab-secret");
        let (mut a, mut b) = (SynProxy::new(SLOT_LEN), SynProxy::new(SLOT_LEN));
        // A started 1 000 s after the epoch, B 1 200 s: at A's 300 s and
        // B's 100 s it is 1 300 s on both system clocks.
        a.share(key);
        b.share(key);
        a.set_wall_clock(1_000_000_000_000);
        b.set_wall_clock(1_200_000_000_000);
        let c = conn(4000);
        let (cookie, _) = a.cookie(Timestamp::from_secs(300), &c, 1000, Some(1460));
        assert!(b.valid(Timestamp::from_secs(100), &c, &ack_of(cookie)), "B validates A's cookie (B sent none)");
        assert!(!b.valid(Timestamp::from_secs(100), &conn(4001), &ack_of(cookie)), "bound to the connection");
        // Without the shared clock B's periods are A's minus 200 s: the
        // cookie is three periods ahead and refused.
        b.set_wall_clock(0);
        assert!(!b.valid(Timestamp::from_secs(100), &c, &ack_of(cookie)));
        // Without the cluster's key (a node's own random one) never; and
        // unshared, an ACK is not even checked until cookies went out.
        let lone = SynProxy::new(SLOT_LEN);
        assert!(!lone.valid(Timestamp::from_secs(100), &c, &ack_of(cookie)));
        assert_eq!(lone.returned(Timestamp::from_secs(100), &c, &ack_of(cookie)), None);
    }

    #[test]
    fn held_per_connection_in_arrival_order_and_bounded() {
        let mut h = proxy_hold(SLOT_LEN);
        let n = HOLD_PER_CONN as u8;
        for k in 0..n + 1 {
            assert_eq!(h.hold(T, &conn(1), PortId(0), Rx::PORT, &frame(k)), k < n, "conn 1, frame {k}");
            assert_eq!(h.hold(T, &conn(2), PortId(0), Rx::PORT, &frame(100 + k)), k < n);
        }
        assert_eq!(h.len(), 2 * HOLD_PER_CONN);
        // Free conn 2's: conn 3's frames reuse its slots in another order.
        assert_eq!(h.expire(T, |c| c.src_port != 2), u64::from(n));
        for k in 0..n {
            assert!(h.hold(T, &conn(3), PortId(0), Rx::PORT, &frame(50 + k)));
        }
        assert_eq!(release(&mut h, &conn(3)), (50..50 + n).collect::<Vec<_>>());
        assert_eq!(release(&mut h, &conn(1)), (0..n).collect::<Vec<_>>());
        assert!(release(&mut h, &conn(1)).is_empty(), "taken once");
        let mut out = vec![];
        h.drain(&mut |p, f| out.push((p, f[20])));
        assert_eq!(out.len(), 2 * HOLD_PER_CONN);
        assert!(out.iter().all(|(p, _)| *p == PortId(1)));
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn a_frame_held_while_released_waits_for_the_next_release() {
        let mut h = proxy_hold(SLOT_LEN);
        assert!(h.hold(T, &conn(1), PortId(0), Rx::PORT, &frame(1)));
        let before = h.next_seq();
        let x = h.take(&conn(1), before).unwrap();
        assert!(h.hold(T, &conn(1), PortId(0), Rx::PORT, &frame(2)));
        assert!(!h.finish(x.slot, x.mem, x.start, x.end, Outcome::Drop(DropReason::TcpOutOfWindow)), "a drop");
        assert!(h.take(&conn(1), before).is_none());
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn a_full_pool_refuses_and_the_wait_ends() {
        let mut h = proxy_hold(SLOT_LEN);
        for c in 0..(HOLD_SLOTS / HOLD_PER_CONN) as u16 {
            for k in 0..HOLD_PER_CONN as u8 {
                assert!(h.hold(T, &conn(c), PortId(0), Rx::PORT, &frame(k)));
            }
        }
        assert!(!h.hold(T, &conn(999), PortId(0), Rx::PORT, &frame(0)), "no slot left");
        assert!(!h.hold(T, &conn(999), PortId(0), Rx::PORT, &vec![0u8; SLOT_LEN]), "too long");
        assert_eq!(h.expire(Timestamp(T.0 + HOLD_TIMEOUT.0 - 1), |_| true), 0);
        assert_eq!(h.expire(T.saturating_add(HOLD_TIMEOUT), |_| true), HOLD_SLOTS as u64);
        assert_eq!(h.len(), 0);
        let mut n = 0;
        h.drain(&mut |_, _| n += 1);
        assert_eq!(n, 0, "freed frames never leave");
    }
}
