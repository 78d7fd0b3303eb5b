//! Ethernet II frames with up to two VLAN tags (IEEE 802.1Q C-tag,
//! IEEE 802.1ad S-tag "QinQ").
//!
//! Invariant: an `EthernetFrame` built by `new_checked` holds at least
//! `header_len()` bytes — the 14-byte header plus 4 bytes per tag counted at
//! construction — so every getter below is panic-free. The frame check
//! sequence is never present (NICs strip it). Payload padding (frames are at
//! least 60 bytes) is left to the layer above, which knows its own length.

use core::fmt;

/// EtherType values (IEEE "EtherType" registry).
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    /// IEEE 802.1Q customer VLAN tag (C-tag).
    pub const VLAN: u16 = 0x8100;
    pub const IPV6: u16 = 0x86dd;
    /// IEEE 802.1ad service VLAN tag (S-tag, QinQ).
    pub const QINQ: u16 = 0x88a8;
}

pub const BROADCAST: [u8; 6] = [0xff; 6];
/// Length of the untagged header (dst, src, EtherType).
pub const HEADER_LEN: usize = 14;
/// Length of one 802.1Q tag (TPID + TCI).
pub const TAG_LEN: usize = 4;
/// Minimum frame length without FCS (IEEE 802.3 §4.4.2: 64 bytes with FCS).
pub const MIN_FRAME_LEN: usize = 60;
/// Largest VLAN ID (0 and 4095 are reserved, IEEE 802.1Q §9.6).
pub const VLAN_ID_MAX: u16 = 4094;

mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    /// TCI of the outermost tag (when tagged).
    pub const TCI0: Range<usize> = 14..16;
    /// EtherType after the first tag.
    pub const ETHERTYPE1: Range<usize> = 16..18;
    pub const TCI1: Range<usize> = 18..20;
    pub const ETHERTYPE2: Range<usize> = 20..22;
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// Shorter than the header, or a VLAN tag is cut short.
    Truncated,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ethernet frame truncated")
    }
}

/// A read/write view of an Ethernet frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
    tags: u8,
}

#[inline]
fn be16(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    u16::from_be_bytes([b[r.start], b[r.start + 1]])
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Validate lengths and count VLAN tags (at most two: an outer 0x88a8
    /// or 0x8100 tag followed by an inner 0x8100 tag).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let outer = be16(b, field::ETHERTYPE);
        let mut tags = 0u8;
        if outer == ethertype::VLAN || outer == ethertype::QINQ {
            if b.len() < HEADER_LEN + TAG_LEN {
                return Err(Error::Truncated);
            }
            tags = 1;
            if be16(b, field::ETHERTYPE1) == ethertype::VLAN {
                if b.len() < HEADER_LEN + 2 * TAG_LEN {
                    return Err(Error::Truncated);
                }
                tags = 2;
            }
        }
        Ok(EthernetFrame { buffer, tags })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }
    #[inline]
    pub fn dst(&self) -> [u8; 6] {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        m
    }
    #[inline]
    pub fn src(&self) -> [u8; 6] {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        m
    }
    /// The outermost EtherType (0x8100/0x88a8 for tagged frames).
    #[inline]
    pub fn outer_ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE)
    }
    /// Number of VLAN tags (0, 1 or 2).
    #[inline]
    pub fn tag_count(&self) -> u8 {
        self.tags
    }
    /// VLAN ID of the outermost tag.
    #[inline]
    pub fn vlan(&self) -> Option<u16> {
        (self.tags >= 1).then(|| be16(self.buffer.as_ref(), field::TCI0) & 0x0fff)
    }
    /// VLAN ID of the inner tag of a QinQ frame.
    #[inline]
    pub fn inner_vlan(&self) -> Option<u16> {
        (self.tags >= 2).then(|| be16(self.buffer.as_ref(), field::TCI1) & 0x0fff)
    }
    /// The EtherType of the payload, after any tags.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        let b = self.buffer.as_ref();
        match self.tags {
            0 => be16(b, field::ETHERTYPE),
            1 => be16(b, field::ETHERTYPE1),
            _ => be16(b, field::ETHERTYPE2),
        }
    }
    /// Offset of the payload: 14 + 4 × tags.
    #[inline]
    pub fn header_len(&self) -> usize {
        HEADER_LEN + TAG_LEN * usize::from(self.tags)
    }
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    #[inline]
    pub fn set_dst(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&mac);
    }
    #[inline]
    pub fn set_src(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&mac);
    }
    /// Set the VLAN ID of the outermost tag, keeping PCP/DEI. No-op when
    /// untagged (adding a tag needs headroom: see `buf::PacketBuf`).
    #[inline]
    pub fn set_vlan(&mut self, vid: u16) {
        if self.tags >= 1 {
            let b = self.buffer.as_mut();
            let tci = (be16(b, field::TCI0) & 0xf000) | (vid & 0x0fff);
            b[field::TCI0].copy_from_slice(&tci.to_be_bytes());
        }
    }
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let off = self.header_len();
        &mut self.buffer.as_mut()[off..]
    }
}

/// Write both MACs of the frame at the start of `buf` (a rewrite of a frame
/// already parsed: only the 12 address bytes are needed). `false` (nothing
/// written) when `buf` is shorter.
#[inline]
pub fn write_macs(buf: &mut [u8], dst: [u8; 6], src: [u8; 6]) -> bool {
    let Some(h) = buf.get_mut(field::DST.start..field::SRC.end) else {
        return false;
    };
    h[field::DST].copy_from_slice(&dst);
    h[field::SRC].copy_from_slice(&src);
    true
}

/// Turn a frame that just had `TAG_LEN` bytes prepended (an untagged frame
/// whose MACs now sit 4 bytes early) into a tagged one: write the 802.1Q
/// tag (TPID 0x8100, PCP 0, `vid`) where the tag goes. Bytes 0..12 are
/// stale afterwards: the caller writes both MACs. `false` (nothing written)
/// when `buf` is shorter than a tagged header.
pub fn write_tag(buf: &mut [u8], vid: u16) -> bool {
    if buf.len() < HEADER_LEN + TAG_LEN {
        return false;
    }
    buf[field::ETHERTYPE].copy_from_slice(&ethertype::VLAN.to_be_bytes());
    buf[field::TCI0].copy_from_slice(&(vid & 0x0fff).to_be_bytes());
    true
}

/// Write an untagged (or single-tagged) Ethernet header into `buf` and
/// return its length; `buf` must hold at least 18 bytes.
pub fn emit_header(
    buf: &mut [u8],
    dst: [u8; 6],
    src: [u8; 6],
    vlan: Option<u16>,
    ethertype: u16,
) -> usize {
    buf[field::DST].copy_from_slice(&dst);
    buf[field::SRC].copy_from_slice(&src);
    match vlan {
        None => {
            buf[field::ETHERTYPE].copy_from_slice(&ethertype.to_be_bytes());
            HEADER_LEN
        }
        Some(v) => {
            buf[field::ETHERTYPE].copy_from_slice(&ethertype::VLAN.to_be_bytes());
            buf[field::TCI0].copy_from_slice(&(v & 0x0fff).to_be_bytes());
            buf[field::ETHERTYPE1].copy_from_slice(&ethertype.to_be_bytes());
            HEADER_LEN + TAG_LEN
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An ARP request as captured (broadcast, from 00:1b:21:3a:4f:5c), 42 bytes.
    pub(crate) const ARP_FRAME: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x1b, 0x21, 0x3a, 0x4f, 0x5c, 0x08,
        0x06, // eth
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x00, 0x1b, 0x21, 0x3a, 0x4f, 0x5c, 0xc0,
        0xa8, 0x01, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0xa8, 0x01, 0x01,
    ];

    /// QinQ: S-tag 100 (0x88a8), C-tag 200 (0x8100, PCP 5), IPv4.
    const QINQ_HDR: [u8; 22] = [
        0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0xa0, 0xc8,
        0x08, 0x00,
    ];

    #[test]
    fn parse_untagged() {
        let f = EthernetFrame::new_checked(&ARP_FRAME[..]).unwrap();
        assert_eq!(f.dst(), BROADCAST);
        assert_eq!(f.src(), [0x00, 0x1b, 0x21, 0x3a, 0x4f, 0x5c]);
        assert_eq!(f.ethertype(), ethertype::ARP);
        assert_eq!(f.vlan(), None);
        assert_eq!(f.header_len(), 14);
        assert_eq!(f.payload().len(), 28);
    }

    #[test]
    fn parse_qinq() {
        let f = EthernetFrame::new_checked(&QINQ_HDR[..]).unwrap();
        assert_eq!(f.tag_count(), 2);
        assert_eq!(f.vlan(), Some(100));
        assert_eq!(f.inner_vlan(), Some(200));
        assert_eq!(f.ethertype(), ethertype::IPV4);
        assert_eq!(f.header_len(), 22);
        assert!(f.payload().is_empty());
        assert_eq!(
            EthernetFrame::new_checked(&QINQ_HDR[..21]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            EthernetFrame::new_checked(&QINQ_HDR[..17]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn emit_and_set() {
        let mut b = [0u8; 18];
        assert_eq!(
            emit_header(
                &mut b,
                BROADCAST,
                [2, 0, 0, 0, 0, 9],
                Some(42),
                ethertype::IPV4
            ),
            18
        );
        let mut f = EthernetFrame::new_checked(&mut b[..]).unwrap();
        assert_eq!(f.vlan(), Some(42));
        assert_eq!(f.ethertype(), ethertype::IPV4);
        f.set_vlan(7);
        f.set_src([1; 6]);
        f.set_dst([3; 6]);
        assert_eq!(f.vlan(), Some(7));
        assert_eq!(&b[..14], &[3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 0x81, 0x00]);
    }

    #[test]
    fn write_tag_after_prepend() {
        // An untagged IPv4 frame with 4 bytes of headroom used up: the old
        // MACs sit at 4..16, the EtherType at 16..18.
        let mut b = [0u8; 4 + 14];
        b[4..10].copy_from_slice(&[9; 6]);
        b[10..16].copy_from_slice(&[8; 6]);
        b[16..18].copy_from_slice(&ethertype::IPV4.to_be_bytes());
        assert!(write_tag(&mut b, 0x1234 | 5));
        let mut f = EthernetFrame::new_checked(&mut b[..]).unwrap();
        f.set_dst([1; 6]);
        f.set_src([2; 6]);
        assert_eq!((f.tag_count(), f.vlan(), f.ethertype()), (1, Some(0x234 | 5), ethertype::IPV4));
        assert_eq!(f.src(), [2; 6]);
        assert!(!write_tag(&mut [0u8; 17], 5), "too short for a tagged header");
        let mut short = [7u8; 11];
        assert!(!write_macs(&mut short, [1; 6], [2; 6]));
        assert_eq!(short, [7; 11], "nothing written");
        let mut h = [0u8; 12];
        assert!(write_macs(&mut h, [1; 6], [2; 6]));
        assert_eq!(h, [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]);
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..40), flip in any::<(usize, u8)>()) {
            let mut data = data;
            if !data.is_empty() { let i = flip.0 % data.len(); data[i] ^= flip.1; }
            for n in 0..=data.len() {
                if let Ok(f) = EthernetFrame::new_checked(&data[..n]) {
                    let _ = (f.dst(), f.src(), f.vlan(), f.inner_vlan(), f.ethertype(), f.payload().len());
                    prop_assert!(f.header_len() <= n);
                }
            }
        }
    }
}
