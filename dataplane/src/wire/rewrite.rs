//! Rewriting one endpoint of an IPv4 packet (what NAT and PAT do), and
//! reading the endpoints that decide it: the address and port, checksums
//! updated incrementally (RFC 1624 eqn. 3, `wire::checksum`). Mechanism
//! only: which endpoint becomes what is the NAT stage's business
//! (`pipeline/nat.rs`).
//!
//! | packet | what changes | checksums |
//! |---|---|---|
//! | IPv4 | the endpoint's address | IPv4 header |
//! | TCP | + the endpoint's port | TCP (pseudo-header address and port) |
//! | UDP | + the endpoint's port | UDP, unless 0 (no checksum): stays 0 |
//! | ICMP echo request / reply | + the identifier (PAT's "port", either endpoint) | ICMP (no pseudo-header) |
//! | other IPv4 protocols, other ICMP | the address only (a port asked for is an error) | IPv4 header |
//! | a non-first fragment | the address only (its L4 header travels in the first) | IPv4 header |
//! | ICMP error (`rewrite_icmp_error`) | the outer endpoint's address; in the quoted packet, which went the other way, the *opposite* endpoint's address and port | outer IPv4, quoted IPv4, quoted TCP / UDP (when quoted and non-zero), quoted ICMP echo, the ICMP message |
//!
//! TCP options (MSS included) are not touched. The ICMP error's checksum
//! is updated from the sums of the quoted headers before and after (the
//! quoted bytes start at an even offset of the message, so the words line
//! up), which is O(header), not O(message).
//!
//! Invariants (`tests`):
//! - when the incoming checksums were correct, the outgoing ones equal a
//!   full recompute (golden cases and properties);
//! - rewriting back to the old address and port restores the packet byte
//!   for byte (UDP: unless the checksum became 0xffff from 0x0000, which
//!   cannot come in: a sender writes a computed 0 as 0xffff, RFC 768);
//! - total: any byte string gives `Ok` or an `Err`, never a panic, and an
//!   `Err` leaves the packet unchanged.

use crate::wire::checksum;
use std::net::Ipv4Addr;

/// Which end of the packet's tuple is rewritten.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Source,
    Destination,
}

impl Endpoint {
    fn flip(self) -> Self {
        match self {
            Endpoint::Source => Endpoint::Destination,
            Endpoint::Destination => Endpoint::Source,
        }
    }
    /// Offset of the address in an IPv4 header, of the port in a TCP or
    /// UDP header.
    fn offsets(self) -> (usize, usize) {
        match self {
            Endpoint::Source => (12, 0),
            Endpoint::Destination => (16, 2),
        }
    }
}

/// Why a packet was not rewritten (it is unchanged).
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    #[error("not a whole IPv4 header")]
    BadIpHeader,
    #[error("the transport header is cut short")]
    Truncated,
    #[error("a port was given for a protocol without ports")]
    NoPorts,
    #[error("not an ICMP error message")]
    NotIcmpError,
}

const TCP: u8 = 6;
const UDP: u8 = 17;
const ICMP: u8 = 1;

#[inline]
fn rd16(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(o)?, *b.get(o + 1)?]))
}
#[inline]
fn rd32(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
#[inline]
fn wr16(b: &mut [u8], o: usize, v: u16) {
    if let Some(d) = b.get_mut(o..o + 2) {
        d.copy_from_slice(&v.to_be_bytes());
    }
}
#[inline]
fn wr32(b: &mut [u8], o: usize, v: u32) {
    if let Some(d) = b.get_mut(o..o + 4) {
        d.copy_from_slice(&v.to_be_bytes());
    }
}

/// An IPv4 header's length, protocol and whether it carries the start of
/// the transport header (fragment offset 0).
fn ipv4(b: &[u8]) -> Result<(usize, u8, bool), RewriteError> {
    let v = *b.first().ok_or(RewriteError::BadIpHeader)?;
    let ihl = usize::from(v & 0x0f) * 4;
    if v >> 4 != 4 || ihl < 20 || b.len() < ihl {
        return Err(RewriteError::BadIpHeader);
    }
    let first = rd16(b, 6).ok_or(RewriteError::BadIpHeader)? & 0x1fff == 0;
    Ok((ihl, b[9], first))
}

fn is_echo(icmp_type: u8) -> bool {
    matches!(icmp_type, 0 | 8)
}

fn is_error(icmp_type: u8) -> bool {
    matches!(icmp_type, 3 | 4 | 5 | 11 | 12)
}

/// What a transport rewrite will do, checked before anything is written.
enum L4 {
    /// TCP or UDP: port at `port`, checksum at `csum` (`None`: UDP 0, or
    /// not in the bytes present, as in a quoted header).
    Ports { port: usize, csum: Option<usize>, udp: bool },
    /// ICMP echo: identifier at 4, checksum at 2 (no pseudo-header).
    Echo,
    /// Nothing but the address.
    None,
}

/// Plan the transport part of rewriting `ep` in the L4 bytes `l4` of
/// protocol `proto`; `quoted`: these are the first bytes of a quoted
/// header (a checksum beyond them is left alone).
fn plan(l4: &[u8], proto: u8, ep: Endpoint, port: Option<u16>, quoted: bool) -> Result<L4, RewriteError> {
    let (_, poff) = ep.offsets();
    match proto {
        TCP | UDP => {
            let need = if quoted {
                8
            } else if proto == TCP {
                20
            } else {
                8
            };
            if l4.len() < need {
                return Err(RewriteError::Truncated);
            }
            let coff = if proto == TCP { 16 } else { 6 };
            let csum = rd16(l4, coff).filter(|&c| !(proto == UDP && c == 0)).map(|_| coff);
            Ok(L4::Ports { port: poff, csum, udp: proto == UDP })
        }
        ICMP => {
            if l4.len() < 8 {
                return Err(RewriteError::Truncated);
            }
            match (is_echo(l4[0]), port) {
                (true, _) => Ok(L4::Echo),
                (false, None) => Ok(L4::None),
                (false, Some(_)) => Err(RewriteError::NoPorts),
            }
        }
        _ if port.is_some() => Err(RewriteError::NoPorts),
        _ => Ok(L4::None),
    }
}

/// Apply a planned transport rewrite: the port (or identifier) becomes
/// `port`, the checksum follows the port and, for TCP / UDP, the
/// pseudo-header address `old_addr → new_addr`.
fn apply(l4: &mut [u8], how: &L4, port: Option<u16>, old_addr: u32, new_addr: u32) {
    match *how {
        L4::Ports { port: poff, csum, udp } => {
            let old_port = rd16(l4, poff).unwrap_or(0);
            let new_port = port.unwrap_or(old_port);
            if let Some(c) = csum.and_then(|o| rd16(l4, o).map(|v| (o, v))) {
                let mut v = checksum::update_u32(c.1, old_addr, new_addr);
                v = checksum::update_u16(v, old_port, new_port);
                if udp && v == 0 {
                    v = 0xffff; // RFC 768: a computed 0 is sent as all ones
                }
                wr16(l4, c.0, v);
            }
            wr16(l4, poff, new_port);
        }
        L4::Echo => {
            if let Some(new_id) = port {
                let old_id = rd16(l4, 4).unwrap_or(0);
                let c = rd16(l4, 2).unwrap_or(0);
                wr16(l4, 2, checksum::update_u16(c, old_id, new_id));
                wr16(l4, 4, new_id);
            }
        }
        L4::None => {}
    }
}

/// Set the address of `ep` in the IPv4 header `ip` to `new`, updating its
/// checksum; returns the old address.
fn set_addr(ip: &mut [u8], ep: Endpoint, new: u32) -> u32 {
    let (aoff, _) = ep.offsets();
    let old = rd32(ip, aoff).unwrap_or(0);
    let c = rd16(ip, 10).unwrap_or(0);
    wr16(ip, 10, checksum::update_u32(c, old, new));
    wr32(ip, aoff, new);
    old
}

/// Rewrite endpoint `ep` of the IPv4 packet `ip` (from its IP header on)
/// to `addr` and, with `port`, its TCP / UDP port or ICMP echo identifier.
/// ICMP errors go through [`rewrite_icmp_error`].
pub fn rewrite(ip: &mut [u8], ep: Endpoint, addr: Ipv4Addr, port: Option<u16>) -> Result<(), RewriteError> {
    let (ihl, proto, first) = ipv4(ip)?;
    let new = u32::from(addr);
    let (aoff, _) = ep.offsets();
    let old = rd32(ip, aoff).ok_or(RewriteError::BadIpHeader)?;
    if first {
        if proto == ICMP && ip.get(ihl).is_some_and(|&t| is_error(t)) && port.is_some() {
            return Err(RewriteError::NoPorts);
        }
        let how = plan(&ip[ihl..], proto, ep, port, false)?;
        apply(&mut ip[ihl..], &how, port, old, new);
    } else if port.is_some() && !matches!(proto, TCP | UDP | ICMP) {
        return Err(RewriteError::NoPorts);
    }
    set_addr(ip, ep, new);
    Ok(())
}

/// [`rewrite`] of a TCP or UDP datagram whose IPv4 header (`ihl` bytes,
/// not a fragment) and transport header the caller has checked already
/// (the fast path): the same bytes out, without parsing the packet again —
/// the address and its header checksum, the port and the transport
/// checksum (a UDP checksum 0 stays 0), each an RFC 1624 update. `Err`,
/// the packet unchanged, for another protocol or a packet shorter than
/// its headers.
#[inline(always)]
pub fn rewrite_transport(
    ip: &mut [u8],
    ihl: usize,
    proto: u8,
    ep: Endpoint,
    addr: Ipv4Addr,
    port: Option<u16>,
) -> Result<(), RewriteError> {
    let (aoff, poff) = ep.offsets();
    let (coff, hlen) = match proto {
        TCP => (16, 20),
        UDP => (6, 8),
        _ => return Err(RewriteError::NoPorts),
    };
    if ihl < 20 || ip.len() < ihl + hlen {
        return Err(RewriteError::Truncated);
    }
    let (hdr, l4) = ip.split_at_mut(ihl);
    let old = u32::from_be_bytes([hdr[aoff], hdr[aoff + 1], hdr[aoff + 2], hdr[aoff + 3]]);
    let new = u32::from(addr);
    // The address's change (RFC 1624 eqn. 3: ~m + m'), summed once for
    // both checksums; the results equal `update_u32` then `update_u16`
    // (one's-complement sums congruent mod 0xffff, never 0 unless every
    // term is; property `one_delta_for_two_checksums_equals_the_updates_
    // one_by_one` in `checksum`).
    let d = checksum::delta_u32(old, new);
    let ipc = u16::from_be_bytes([hdr[10], hdr[11]]);
    hdr[10..12].copy_from_slice(&(!checksum::fold(u32::from(!ipc) + d)).to_be_bytes());
    hdr[aoff..aoff + 4].copy_from_slice(&new.to_be_bytes());
    let old_port = u16::from_be_bytes([l4[poff], l4[poff + 1]]);
    let new_port = port.unwrap_or(old_port);
    let c = u16::from_be_bytes([l4[coff], l4[coff + 1]]);
    if !(proto == UDP && c == 0) {
        let mut v = !checksum::fold(u32::from(!c) + d + u32::from(!old_port) + u32::from(new_port));
        if proto == UDP && v == 0 {
            v = 0xffff; // RFC 768: a computed 0 is sent as all ones
        }
        l4[coff..coff + 2].copy_from_slice(&v.to_be_bytes());
    }
    l4[poff..poff + 2].copy_from_slice(&new_port.to_be_bytes());
    Ok(())
}

/// Rewrite an ICMP error about a translated flow: the outer endpoint `ep`
/// gets `addr`; in the quoted packet (it went the other way) the opposite
/// endpoint gets `addr` and, with `port`, its port or echo identifier.
pub fn rewrite_icmp_error(ip: &mut [u8], ep: Endpoint, addr: Ipv4Addr, port: Option<u16>) -> Result<(), RewriteError> {
    icmp_error(ip, ep, addr, port, true)
}

/// An ICMP error a real endpoint's side sends about a translated flow
/// (outbound): the quoted packet's destination (the real endpoint) gets
/// `addr` and, with `port`, its port or identifier; the outer source gets
/// `addr` too when it is that real endpoint (the host answered itself),
/// and stays when it is not (a router on the way answered: its own
/// address).
pub fn rewrite_icmp_error_out(ip: &mut [u8], addr: Ipv4Addr, port: Option<u16>) -> Result<(), RewriteError> {
    let (ihl, _, _) = ipv4(ip)?;
    let outer_src = rd32(ip, 12).ok_or(RewriteError::Truncated)?;
    let quoted_dst = rd32(ip, ihl + 8 + 16).ok_or(RewriteError::Truncated)?;
    icmp_error(ip, Endpoint::Source, addr, port, outer_src == quoted_dst)
}

fn icmp_error(ip: &mut [u8], ep: Endpoint, addr: Ipv4Addr, port: Option<u16>, outer: bool) -> Result<(), RewriteError> {
    let (ihl, proto, first) = ipv4(ip)?;
    if proto != ICMP || !first || !ip.get(ihl).is_some_and(|&t| is_error(t)) {
        return Err(RewriteError::NotIcmpError);
    }
    let icmp_len = ip.len() - ihl;
    if icmp_len < 8 {
        return Err(RewriteError::Truncated);
    }
    let q0 = ihl + 8;
    let (qihl, qproto, qfirst) = ipv4(&ip[q0..]).map_err(|_| RewriteError::Truncated)?;
    let qep = ep.flip();
    let (qaoff, _) = qep.offsets();
    let qold = rd32(&ip[q0..], qaoff).ok_or(RewriteError::Truncated)?;
    let new = u32::from(addr);
    let l4_at = q0 + qihl;
    let how = if qfirst {
        plan(&ip[l4_at..], qproto, qep, port, true)?
    } else if port.is_some() {
        return Err(RewriteError::NoPorts);
    } else {
        L4::None
    };
    // The quoted headers' sum before and after gives the ICMP checksum's
    // update (they start at the message's offset 8: even).
    let region_end = ip.len().min(l4_at + 20);
    let before = checksum::fold(checksum::sum(0, &ip[q0..region_end]));
    apply(&mut ip[l4_at..], &how, port, qold, new);
    set_addr(&mut ip[q0..], qep, new);
    let after = checksum::fold(checksum::sum(0, &ip[q0..region_end]));
    let c = rd16(ip, ihl + 2).unwrap_or(0);
    wr16(ip, ihl + 2, checksum::update_u16(c, before, after));
    if outer {
        set_addr(ip, ep, new);
    }
    Ok(())
}

/// What decides a translation, read from an IPv4 packet: both addresses,
/// the protocol, the ports (an ICMP echo's identifier as both; 0 for other
/// protocols and for a later fragment), the ICMP type, and whether this is
/// a later fragment (its transport header is in the first).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Endpoints {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
    pub icmp_type: Option<u8>,
    pub later_fragment: bool,
}

/// The endpoints of the IPv4 packet `ip` (a quote may be cut short after
/// the first 8 transport bytes); `None` if the header is not whole.
pub fn endpoints(ip: &[u8]) -> Option<Endpoints> {
    let (ihl, proto, first) = ipv4(ip).ok()?;
    let src = Ipv4Addr::from(rd32(ip, 12)?);
    let dst = Ipv4Addr::from(rd32(ip, 16)?);
    let l4 = &ip[ihl..];
    let (mut sport, mut dport, mut icmp_type) = (0, 0, None);
    if first {
        match proto {
            TCP | UDP => {
                sport = rd16(l4, 0)?;
                dport = rd16(l4, 2)?;
            }
            ICMP => {
                let t = *l4.first()?;
                icmp_type = Some(t);
                if is_echo(t) {
                    sport = rd16(l4, 4)?;
                    dport = sport;
                }
            }
            _ => {}
        }
    }
    Some(Endpoints { src, dst, proto, sport, dport, icmp_type, later_fragment: !first })
}

/// The packet an ICMP error quotes (from its IP header on), if `ip` is one.
pub fn icmp_quote(ip: &[u8]) -> Option<&[u8]> {
    let (ihl, proto, first) = ipv4(ip).ok()?;
    (proto == ICMP && first && ip.get(ihl).is_some_and(|&t| is_error(t))).then(|| ip.get(ihl + 8..)).flatten()
}

#[cfg(test)]
mod tests;
