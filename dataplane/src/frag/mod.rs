//! IP fragments in the cluster (SPEC R10, B3, B4; `docs/fragments.md`).
//!
//! - `owner`: the fragment owner of a datagram, a rendezvous choice over
//!   the member table by a hash of (source, destination, identification),
//!   so every member sends every fragment of one datagram to one place;
//! - `reasm`: the per-worker bounded `Reassembler`, which holds fragments
//!   until the first one reveals the L4 header (`FirstSeen`), then either
//!   reassembles the datagram fully (`Complete`: NAT of ports, L4
//!   inspection) or releases the held fragments one by one for forwarding
//!   (`take_held`, shallow mode: policy on the 5-tuple only);
//! - `split`: a datagram into fragments for a smaller MTU (RFC 791 §2.3),
//!   for egress fragmentation and for datagrams a port handed over
//!   reassembled;
//! - here: the key and per-fragment facts (`FragKey`, `FragInfo`) and the
//!   classification of IPv4 and IPv6 packets through the wire views.
//!
//! Invariants: nothing in this module allocates or panics after
//! `Reassembler::new`; every fragment handed to the reassembler ends in
//! exactly one place — completed, forwarded, taken, held, or dropped and
//! counted by `DropReason` (`ReasmCounters::accounted`); the memory a
//! reassembler uses is fixed at construction (`Reassembler::memory_bytes`).

pub mod owner;
pub mod reasm;
pub mod split;

#[cfg(test)]
mod tests;

pub use owner::{frag_hash, frag_hash_seeded, fragment_owner, FRAG_HASH_SEED};
pub use reasm::{
    FragResult, Held, L4Head, ReasmConfig, ReasmConfigError, ReasmCounters, ReasmMode, Reassembler, BLOCK_SIZE,
    L4_HEAD_MAX, MAX_DATAGRAM,
};

use crate::types::DropReason;
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::ipv6::{next_header, Ipv6Packet, MAX_EXT_HEADERS};
use std::net::IpAddr;

/// What identifies the fragments of one datagram (RFC 791 §3.2: source,
/// destination, protocol, identification; RFC 8200 §4.5: source,
/// destination, identification — the protocol is the Fragment header's
/// Next Header, the same in every fragment).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct FragKey {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IPv4: the 16-bit identification widened; IPv6: the 32-bit one.
    pub ident: u32,
    pub proto: u8,
}

/// One fragment's place in its datagram.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FragInfo {
    pub key: FragKey,
    /// Offset of the fragment's data in the datagram's payload, in bytes
    /// (a multiple of 8 on the wire).
    pub offset: u16,
    /// More-fragments flag: false on the last fragment.
    pub more: bool,
}

impl FragInfo {
    /// Offset 0 and no more fragments: not really a fragment (an IPv6
    /// atomic fragment, RFC 6946) — process it as a whole packet.
    #[inline]
    pub fn is_atomic(&self) -> bool {
        self.offset == 0 && !self.more
    }
}

/// The fragment facts of an IPv4 packet, or `None` if it is not a fragment
/// (MF clear and offset zero). Its data is `ip.payload()`. A fragment whose
/// data would end beyond the 65535-byte total length once the header is
/// added back (RFC 791 §3.1) is `Err(FragTooBig)`.
pub fn ipv4_fragment<T: AsRef<[u8]>>(ip: &Ipv4Packet<T>) -> Result<Option<FragInfo>, DropReason> {
    if !ip.is_fragment() {
        return Ok(None);
    }
    let end = usize::from(ip.frag_offset()) + ip.payload().len() + ip.header_len();
    if end > MAX_DATAGRAM {
        return Err(DropReason::FragTooBig);
    }
    Ok(Some(FragInfo {
        key: FragKey { src: ip.src().into(), dst: ip.dst().into(), ident: u32::from(ip.ident()), proto: ip.protocol() },
        offset: ip.frag_offset(),
        more: ip.more_frags(),
    }))
}

/// The fragment facts of an IPv6 packet and the offset of the fragment's
/// data (the byte after the Fragment header) within `ip.payload()`, or
/// `None` if the packet has no Fragment header. The Fragment header is
/// found by the wire layer's bounded extension-header walk
/// (`Ipv6Packet::upper_layer`); a chain that walk rejects is
/// `Err(Ipv6Malformed)`.
pub fn ipv6_fragment<T: AsRef<[u8]>>(ip: &Ipv6Packet<T>) -> Result<Option<(FragInfo, usize)>, DropReason> {
    let ul = ip.upper_layer().map_err(|_| DropReason::Ipv6Malformed)?;
    let Some((offset, more, ident)) = ul.fragment else {
        return Ok(None);
    };
    // The walk stops after the Fragment header of a non-first fragment and
    // continues to the upper layer in a first one; find the header itself
    // (the walk above proved the chain up to it well-formed and bounded).
    let (frag_at, proto) = fragment_header_at(ip.payload(), ip.next_header()).ok_or(DropReason::Ipv6Malformed)?;
    let data = frag_at + 8;
    let key = FragKey { src: ip.src().into(), dst: ip.dst().into(), ident, proto };
    Ok(Some((FragInfo { key, offset, more }, data)))
}

/// Offset of the first Fragment header in an IPv6 payload and its Next
/// Header, by the same bounded walk as `Ipv6Packet::upper_layer`.
fn fragment_header_at(p: &[u8], mut nh: u8) -> Option<(usize, u8)> {
    let mut off = 0usize;
    for _ in 0..=MAX_EXT_HEADERS {
        let len = match nh {
            next_header::FRAGMENT => return p.get(off).map(|&n| (off, n)).filter(|_| off + 8 <= p.len()),
            next_header::HOP_BY_HOP | next_header::ROUTING | next_header::DEST_OPTS | next_header::MOBILITY => {
                (usize::from(*p.get(off + 1)?) + 1) * 8
            }
            next_header::AH => (usize::from(*p.get(off + 1)?) + 2) * 4,
            _ => return None,
        };
        nh = *p.get(off)?;
        off += len;
    }
    None
}
