//! The flow key, the one field most CCL payloads share (a five-tuple in its
//! compact wire form), and the bounds-checked byte helpers the payload
//! codecs (`message`, `batch`) are written with.
//!
//! Invariants: nothing here panics or allocates on any input; a parsed key
//! re-emits to the same bytes.

use super::CclError;
use crate::FiveTuple;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[inline]
pub(crate) fn too_small(needed: usize, out: &[u8]) -> CclError {
    CclError::BufferTooSmall { needed, available: out.len() }
}

#[inline]
pub(crate) fn truncated(needed: usize, b: &[u8]) -> CclError {
    CclError::Truncated { needed, available: b.len() }
}

#[inline]
pub(crate) fn exact(what: &'static str, b: &[u8], used: usize) -> Result<(), CclError> {
    if b.len() > used {
        Err(CclError::TrailingBytes { what, extra: b.len() - used })
    } else {
        Ok(())
    }
}

#[inline]
pub(crate) fn arr<const N: usize>(b: &[u8], at: usize) -> Result<[u8; N], CclError> {
    let s = b.get(at..at + N).ok_or_else(|| truncated(at + N, b))?;
    let mut a = [0u8; N];
    a.copy_from_slice(s);
    Ok(a)
}

/// Address family byte of an encoded [`FlowKey`]; `0` encodes "no key"
/// where a key is optional.
pub mod family {
    pub const NONE: u8 = 0;
    pub const V4: u8 = 4;
    pub const V6: u8 = 6;
}

/// A five-tuple whose two addresses share one family, in its compact wire
/// form: family (1: 4 or 6), source address (4/16), destination address
/// (4/16), source port (2), destination port (2), protocol (1) — 14 bytes
/// for IPv4, 38 for IPv6.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    tuple: FiveTuple,
}

impl FlowKey {
    pub const V4_LEN: usize = 14;
    pub const V6_LEN: usize = 38;

    /// `MixedFamily` when source and destination families differ.
    pub fn new(tuple: FiveTuple) -> Result<Self, CclError> {
        match (tuple.src, tuple.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => Ok(FlowKey { tuple }),
            _ => Err(CclError::MixedFamily),
        }
    }
    #[inline]
    pub fn tuple(&self) -> FiveTuple {
        self.tuple
    }
    #[inline]
    pub fn is_ipv6(&self) -> bool {
        self.tuple.src.is_ipv6()
    }
    /// Encoded length (14 or 38).
    #[inline]
    pub fn wire_len(&self) -> usize {
        if self.is_ipv6() {
            Self::V6_LEN
        } else {
            Self::V4_LEN
        }
    }
    /// Encoded length announced by a family byte.
    #[inline]
    pub(crate) fn len_for_family(f: u8) -> Result<usize, CclError> {
        match f {
            family::V4 => Ok(Self::V4_LEN),
            family::V6 => Ok(Self::V6_LEN),
            v => Err(CclError::BadValue { field: "address family", value: u64::from(v) }),
        }
    }

    /// Parse a key that fills `b` exactly.
    pub fn parse(b: &[u8]) -> Result<Self, CclError> {
        let (k, n) = Self::parse_prefix(b)?;
        exact("flow key", b, n)?;
        Ok(k)
    }

    /// Parse a key at the start of `b`; returns it and its length.
    pub fn parse_prefix(b: &[u8]) -> Result<(Self, usize), CclError> {
        let f = *b.first().ok_or_else(|| truncated(1, b))?;
        let n = Self::len_for_family(f)?;
        let body = b.get(..n).ok_or_else(|| truncated(n, b))?;
        let (src, dst, rest): (IpAddr, IpAddr, usize) = if f == family::V4 {
            let s: [u8; 4] = arr(body, 1)?;
            let d: [u8; 4] = arr(body, 5)?;
            (Ipv4Addr::from(s).into(), Ipv4Addr::from(d).into(), 9)
        } else {
            let s: [u8; 16] = arr(body, 1)?;
            let d: [u8; 16] = arr(body, 17)?;
            (Ipv6Addr::from(s).into(), Ipv6Addr::from(d).into(), 33)
        };
        let sp = u16::from_be_bytes(arr(body, rest)?);
        let dp = u16::from_be_bytes(arr(body, rest + 2)?);
        let [proto] = arr::<1>(body, rest + 4)?;
        let tuple = FiveTuple { src, dst, proto, src_port: sp, dst_port: dp };
        Ok((FlowKey { tuple }, n))
    }

    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let n = self.wire_len();
        let o = match out.get_mut(..n) {
            Some(o) => o,
            None => return Err(CclError::BufferTooSmall { needed: n, available: out.len() }),
        };
        let rest = match (self.tuple.src, self.tuple.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                o[0] = family::V4;
                o[1..5].copy_from_slice(&s.octets());
                o[5..9].copy_from_slice(&d.octets());
                9
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                o[0] = family::V6;
                o[1..17].copy_from_slice(&s.octets());
                o[17..33].copy_from_slice(&d.octets());
                33
            }
            // `new` refuses mixed families, so this arm is never taken.
            _ => return Err(CclError::MixedFamily),
        };
        o[rest..rest + 2].copy_from_slice(&self.tuple.src_port.to_be_bytes());
        o[rest + 2..rest + 4].copy_from_slice(&self.tuple.dst_port.to_be_bytes());
        o[rest + 4] = self.tuple.proto;
        Ok(n)
    }
}

impl TryFrom<FiveTuple> for FlowKey {
    type Error = CclError;
    fn try_from(t: FiveTuple) -> Result<Self, CclError> {
        FlowKey::new(t)
    }
}

impl From<FlowKey> for FiveTuple {
    fn from(k: FlowKey) -> FiveTuple {
        k.tuple
    }
}

