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
//! Invariants: no state is kept for a SYN answered with a cookie (a
//! spoofed flood costs one SipHash and one rewritten frame per SYN); an
//! unknown ACK is checked against the cookies only while this worker has
//! sent cookies in the last two cookie periods (`check_until`), so outside
//! a flood the stage costs the established path nothing; the frame is
//! resized and rewritten only after every check passed (a failed rewrite
//! drops it, counted); nothing allocates.

use super::egress::Route;
use crate::buf::PacketBuf;
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
}

crate::impl_stats!(SynProxyCounters { counter cookies_sent, counter opened, counter spliced, counter bad_cookies });

/// One worker's SYN proxy.
pub(crate) struct SynProxy {
    cookies: ProxyCookies,
    /// Unknown ACKs are checked against the cookies until then.
    check_until: Timestamp,
    pub counters: SynProxyCounters,
}

impl SynProxy {
    pub fn new() -> SynProxy {
        SynProxy { cookies: ProxyCookies::new(random_key()), check_until: Timestamp::ZERO, counters: SynProxyCounters::default() }
    }

    /// The cookie for a client's SYN of `tuple` (`isn`, its MSS option),
    /// and the MSS it encodes; unknown ACKs are checked from now on for
    /// two cookie periods.
    pub fn cookie(&mut self, now: Timestamp, tuple: &FiveTuple, isn: u32, mss: Option<u16>) -> (u32, u16) {
        self.check_until = now.saturating_add(PERIOD).saturating_add(PERIOD);
        self.counters.cookies_sent += 1;
        self.cookies.encode(tuple, isn, mss, now)
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

    /// `None`: not a segment to check (no cookie out lately, not a bare
    /// ACK); else whether its cookie is valid (the MSS it carries).
    #[inline]
    fn returned(&self, now: Timestamp, tuple: &FiveTuple, l4: &L4Info) -> Option<Option<u16>> {
        if now >= self.check_until {
            return None;
        }
        let L4Info::Tcp(seg) = l4 else { return None };
        if seg.flags & (tcp_flags::SYN | tcp_flags::RST | tcp_flags::FIN | tcp_flags::ACK) != tcp_flags::ACK {
            return None;
        }
        Some(self.cookies.check(tuple, seg.seq, seg.ack, now))
    }
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
