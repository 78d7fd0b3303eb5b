//! The fixed CCL header (34 bytes, network byte order) as a view over a
//! whole datagram, and its value type.
//!
//! Invariant: `CclPacket::new_checked` guarantees the buffer is exactly
//! `HEADER_LEN + payload_len() + TAG_LEN` bytes with the v1 magic and
//! version, so every getter, `payload()` and `tag()` is panic-free.

use super::auth::TAG_LEN;
use super::CclDrop;
use crate::{Epoch, NodeId};

/// "CF": the first two bytes of every CCL message, in every version.
pub const MAGIC: [u8; 2] = [0x43, 0x46];
/// The protocol version this code speaks (8: the `ToControl` kind, 16;
/// 7: flow records of 82/106 bytes,
/// 56 opaque bytes, the last 8 a NAT binding; 6: the join request carries the
/// joiner's worker count; 5: member tables carry each
/// member's admission epoch, and the orphan hand-off flag; 4: flow records of 74/98 bytes
/// with 48 opaque bytes carrying the owner's flow state, and the
/// FlowTransfer and SyncDone kinds; 3 had 32 opaque bytes; the MACs are
/// v3's — AEGIS-128L / AEGIS-128X4 by message length; 2 had AEGIS-128L
/// only, 1 BLAKE3). 10: `SyncDone` counts the records before it and the
/// `SyncAgain` kind (docs/failover.md, "Lost re-registrations").
pub const VERSION: u8 = 10;
/// Length of the fixed header.
pub const HEADER_LEN: usize = 34;

mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..2;
    pub const VERSION: usize = 2;
    pub const KIND: usize = 3;
    pub const FLAGS: usize = 4;
    pub const SENDER: usize = 5;
    pub const CHANNEL: usize = 6;
    /// Sent as zero, ignored on receipt (covered by the MAC).
    pub const RESERVED: usize = 7;
    pub const CLUSTER: Range<usize> = 8..12;
    pub const INCARNATION: Range<usize> = 12..16;
    pub const SEQ: Range<usize> = 16..24;
    pub const EPOCH: Range<usize> = 24..32;
    pub const PAYLOAD_LEN: Range<usize> = 32..34;
}

#[inline]
fn be16(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    u16::from_be_bytes([b[r.start], b[r.start + 1]])
}
#[inline]
fn be32(b: &[u8], r: core::ops::Range<usize>) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[r]);
    u32::from_be_bytes(a)
}
#[inline]
fn be64(b: &[u8], r: core::ops::Range<usize>) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[r]);
    u64::from_be_bytes(a)
}

/// A view of one CCL datagram (header, payload, tag).
#[derive(Debug, Clone)]
pub struct CclPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> CclPacket<T> {
    /// Check, in this order: at least 3 bytes (`Truncated`), magic
    /// (`BadMagic`), version (`BadVersion`), room for header and tag
    /// (`Truncated`), and `HEADER_LEN + payload_len + TAG_LEN == len`
    /// (`BadLength`). Magic and version come first because they are the
    /// only fields every version keeps at the same offsets.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, CclDrop> {
        let b = buffer.as_ref();
        if b.len() < 3 {
            return Err(CclDrop::Truncated);
        }
        if b[field::MAGIC] != MAGIC {
            return Err(CclDrop::BadMagic);
        }
        if b[field::VERSION] != VERSION {
            return Err(CclDrop::BadVersion);
        }
        if b.len() < HEADER_LEN + TAG_LEN {
            return Err(CclDrop::Truncated);
        }
        if HEADER_LEN + usize::from(be16(b, field::PAYLOAD_LEN)) + TAG_LEN != b.len() {
            return Err(CclDrop::BadLength);
        }
        Ok(CclPacket { buffer })
    }
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }
    #[inline]
    pub fn kind(&self) -> u8 {
        self.buffer.as_ref()[field::KIND]
    }
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    #[inline]
    pub fn sender(&self) -> NodeId {
        NodeId(self.buffer.as_ref()[field::SENDER])
    }
    #[inline]
    pub fn channel(&self) -> u8 {
        self.buffer.as_ref()[field::CHANNEL]
    }
    #[inline]
    pub fn cluster_id(&self) -> u32 {
        be32(self.buffer.as_ref(), field::CLUSTER)
    }
    #[inline]
    pub fn incarnation(&self) -> u32 {
        be32(self.buffer.as_ref(), field::INCARNATION)
    }
    #[inline]
    pub fn seq(&self) -> u64 {
        be64(self.buffer.as_ref(), field::SEQ)
    }
    #[inline]
    pub fn epoch(&self) -> Epoch {
        Epoch(be64(self.buffer.as_ref(), field::EPOCH))
    }
    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN..b.len() - TAG_LEN]
    }
    /// The bytes the tag covers: header and payload.
    #[inline]
    pub fn authenticated(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[..b.len() - TAG_LEN]
    }
    #[inline]
    pub fn tag(&self) -> [u8; TAG_LEN] {
        let b = self.buffer.as_ref();
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&b[b.len() - TAG_LEN..]);
        t
    }
}

/// The header as a value. `emit` writes magic, version, a zero reserved
/// byte and these fields into the first `HEADER_LEN` bytes of a buffer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CclHeader {
    pub kind: u8,
    pub flags: u8,
    pub sender: NodeId,
    pub channel: u8,
    pub cluster_id: u32,
    pub incarnation: u32,
    pub seq: u64,
    pub epoch: Epoch,
    pub payload_len: u16,
}

impl CclHeader {
    pub fn parse<T: AsRef<[u8]>>(p: &CclPacket<T>) -> Self {
        CclHeader {
            kind: p.kind(),
            flags: p.flags(),
            sender: p.sender(),
            channel: p.channel(),
            cluster_id: p.cluster_id(),
            incarnation: p.incarnation(),
            seq: p.seq(),
            epoch: p.epoch(),
            payload_len: p.payload_len(),
        }
    }

    /// Write the header; `None` when `out` is shorter than `HEADER_LEN`.
    #[inline]
    pub fn emit(&self, out: &mut [u8]) -> Option<usize> {
        let b = out.get_mut(..HEADER_LEN)?;
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::VERSION] = VERSION;
        b[field::KIND] = self.kind;
        b[field::FLAGS] = self.flags;
        b[field::SENDER] = self.sender.0;
        b[field::CHANNEL] = self.channel;
        b[field::RESERVED] = 0;
        b[field::CLUSTER].copy_from_slice(&self.cluster_id.to_be_bytes());
        b[field::INCARNATION].copy_from_slice(&self.incarnation.to_be_bytes());
        b[field::SEQ].copy_from_slice(&self.seq.to_be_bytes());
        b[field::EPOCH].copy_from_slice(&self.epoch.0.to_be_bytes());
        b[field::PAYLOAD_LEN].copy_from_slice(&self.payload_len.to_be_bytes());
        Some(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CclHeader {
        CclHeader {
            kind: 1,
            flags: 0,
            sender: NodeId(3),
            channel: 255,
            cluster_id: 0xdead_beef,
            incarnation: 1_700_000_000,
            seq: 7,
            epoch: Epoch(9),
            payload_len: 4,
        }
    }

    #[test]
    fn emit_parse_round_trip() {
        let mut b = [0u8; HEADER_LEN + 4 + TAG_LEN];
        assert_eq!(sample().emit(&mut b), Some(HEADER_LEN));
        assert_eq!(&b[..8], &[0x43, 0x46, 10, 1, 0, 3, 255, 0]);
        let p = CclPacket::new_checked(&b[..]).unwrap();
        assert_eq!(CclHeader::parse(&p), sample());
        assert_eq!(p.payload().len(), 4);
        assert_eq!(p.authenticated().len(), HEADER_LEN + 4);
        assert!(sample().emit(&mut b[..HEADER_LEN - 1]).is_none());
    }

    #[test]
    fn checks_in_order() {
        let mut b = [0u8; HEADER_LEN + 4 + TAG_LEN];
        sample().emit(&mut b);
        assert_eq!(CclPacket::new_checked(&b[..2]).unwrap_err(), CclDrop::Truncated);
        assert_eq!(CclPacket::new_checked(&b[..40]).unwrap_err(), CclDrop::Truncated);
        assert_eq!(CclPacket::new_checked(&b[..53]).unwrap_err(), CclDrop::BadLength);
        for version in [1, 2, 3, 4, 5, 6, 7, 8, 9, 11] {
            let mut v = b;
            v[2] = version;
            assert_eq!(CclPacket::new_checked(&v[..]).unwrap_err(), CclDrop::BadVersion);
        }
        let mut m = b;
        m[0] = 0;
        assert_eq!(CclPacket::new_checked(&m[..]).unwrap_err(), CclDrop::BadMagic);
    }
}
