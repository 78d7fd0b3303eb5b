//! Batched flow records: the payload of `FlowRegister` and `StateUpdate`.
//!
//! Layout: `count` (u16) then `count` records, each fixed-size for its
//! address family (86 bytes IPv4, 110 bytes IPv6; CCL v9):
//!
//! | off | len | field |
//! | --- | --- | --- |
//! | 0 | 14/38 | flow key (family byte first) |
//! | k | 1 | owner node id (0..=15) |
//! | k+1 | 1 | op (1 = upsert, 2 = delete) |
//! | k+2 | 1 | TCP state (conntrack's code; opaque here) |
//! | k+3 | 1 | flags (opaque here) |
//! | k+4 | 4 | sequence delta (SYN-cookie ISN translation, R6) |
//! | k+8 | 4 | idle timeout, seconds |
//! | k+12 | 60 | opaque state (the cluster logic's: version, flow state, NAT binding) |
//!
//! Invariants: `FlowBatch::parse` walks and validates every record once, so
//! its iterator is infallible and yields exactly `count` records;
//! `BatchWriter` appends whole records only and never writes past its
//! buffer, so a batch is always well-formed.

use super::key::{arr, too_small, truncated, FlowKey};
use super::CclError;
use crate::NodeId;

/// Bytes of per-flow state carried as-is (interpreted by the cluster logic):
/// the record version (8), the owner's flow state (`STATE_LEN`) and the
/// flow's NAT binding (8, `NatBinding`).
pub const OPAQUE_LEN: usize = 60;
/// Bytes of the owner's flow state in the opaque bytes (`FLAG_STATE`):
/// conntrack's `FlowState` wire form.
pub const STATE_LEN: usize = 44;
/// Record bytes after the flow key.
const TAIL_LEN: usize = 12 + OPAQUE_LEN;

/// What the receiver does with the record.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FlowOp {
    /// Create or replace the flow's record.
    Upsert = 1,
    /// Forget the flow.
    Delete = 2,
}

/// `FlowRecord::flags` bit: opaque bytes 0–7 hold the record's version
/// (docs/ccl-protocol.md, "Flow record versions").
pub const FLAG_VERSIONED: u8 = 0x01;
/// `FlowRecord::flags` bit: opaque bytes 8–47 hold the owner's flow state
/// (conntrack's `FlowState` wire form; docs/ccl-protocol.md, "Flow state").
pub const FLAG_STATE: u8 = 0x02;
/// `FlowRecord::flags` bit: an orphan hand-off — the record of a flow
/// whose owner (`owner`, a previous incarnation or a node gone) left, sent
/// by a holder to the flow's director, which could not hold it (it
/// rejoined); the director keeps it as an orphan and decides the takeover
/// (docs/failover.md, "Orphans").
pub const FLAG_ORPHAN: u8 = 0x04;
/// `FlowRecord::flags` bit: a takeover — the registration of a node that
/// took the flow over from the owner named in flags bits 4–7
/// (`FlowRecord::replaces`); a holder whose record still names that owner
/// (it is behind: the owner is a member in its set) lets it replace the
/// record (docs/failover.md, "Takeover").
pub const FLAG_TAKEOVER: u8 = 0x08;
const REPLACES_SHIFT: u8 = 4;

/// Byte ranges of the opaque state the cluster logic defines.
mod opaque {
    use core::ops::Range;
    /// With `FLAG_VERSIONED`: the version's generation, then its seq (BE).
    pub const GENERATION: Range<usize> = 0..4;
    pub const SEQ: Range<usize> = 4..8;
    /// With `FLAG_STATE`: the flow state.
    pub const STATE: Range<usize> = 8..8 + super::STATE_LEN;
    /// The NAT binding: mapped address (4), mapped port (2), port class
    /// (1), kind (1; 0 = none).
    pub const BINDING: Range<usize> = 52..60;
}

/// The source translation a translated flow uses (SPEC N2, R9: part of the
/// flow state a new owner takes over): its mapped address and port (or
/// echo identifier) in port class `class` (0 TCP, 1 UDP, 2 ICMP echo), and
/// whether it is shared by the real endpoint's connections
/// (`multi_session`). The real endpoint is the flow's source.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct NatBinding {
    pub addr: std::net::Ipv4Addr,
    pub port: u16,
    pub class: u8,
    pub multi_session: bool,
}

impl NatBinding {
    const PER_SESSION: u8 = 1;
    const MULTI_SESSION: u8 = 2;
}

/// One flow's replicated state.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    pub flow: FlowKey,
    pub owner: NodeId,
    pub op: FlowOp,
    pub tcp_state: u8,
    pub flags: u8,
    pub seq_delta: u32,
    pub idle_timeout_s: u32,
    pub opaque: [u8; OPAQUE_LEN],
}

impl FlowRecord {
    pub const V4_LEN: usize = FlowKey::V4_LEN + TAIL_LEN;
    pub const V6_LEN: usize = FlowKey::V6_LEN + TAIL_LEN;

    #[inline]
    pub fn wire_len(&self) -> usize {
        self.flow.wire_len() + TAIL_LEN
    }

    /// The record's version `(generation, seq)`, `None` without
    /// `FLAG_VERSIONED`.
    pub fn version(&self) -> Option<(u32, u32)> {
        if self.flags & FLAG_VERSIONED == 0 {
            return None;
        }
        let g: [u8; 4] = arr(&self.opaque, opaque::GENERATION.start).ok()?;
        let s: [u8; 4] = arr(&self.opaque, opaque::SEQ.start).ok()?;
        Some((u32::from_be_bytes(g), u32::from_be_bytes(s)))
    }

    /// Mark the record versioned and store its version.
    pub fn set_version(&mut self, generation: u32, seq: u32) {
        self.flags |= FLAG_VERSIONED;
        self.opaque[opaque::GENERATION].copy_from_slice(&generation.to_be_bytes());
        self.opaque[opaque::SEQ].copy_from_slice(&seq.to_be_bytes());
    }

    /// The owner's flow state bytes, `None` without `FLAG_STATE`.
    pub fn state(&self) -> Option<&[u8]> {
        if self.flags & FLAG_STATE == 0 {
            return None;
        }
        self.opaque.get(opaque::STATE)
    }

    /// Mark the record as carrying a flow state and store its bytes.
    pub fn set_state(&mut self, state: &[u8; STATE_LEN]) {
        self.flags |= FLAG_STATE;
        self.opaque[opaque::STATE].copy_from_slice(state);
    }

    /// The flow's NAT binding, `None` when it has none or its bytes are
    /// not one (a hostile record: ignored, as if untranslated).
    pub fn binding(&self) -> Option<NatBinding> {
        let b = self.opaque.get(opaque::BINDING)?;
        let multi_session = match b[7] {
            NatBinding::PER_SESSION => false,
            NatBinding::MULTI_SESSION => true,
            _ => return None,
        };
        if b[6] > 2 {
            return None;
        }
        let addr = std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]);
        Some(NatBinding { addr, port: u16::from_be_bytes([b[4], b[5]]), class: b[6], multi_session })
    }

    /// Store the flow's NAT binding (`None`: none).
    pub fn set_binding(&mut self, binding: Option<NatBinding>) {
        let b = &mut self.opaque[opaque::BINDING];
        b.fill(0);
        if let Some(n) = binding {
            b[..4].copy_from_slice(&n.addr.octets());
            b[4..6].copy_from_slice(&n.port.to_be_bytes());
            b[6] = n.class;
            b[7] = if n.multi_session { NatBinding::MULTI_SESSION } else { NatBinding::PER_SESSION };
        }
    }

    /// A takeover from `owner` (`FLAG_TAKEOVER`, the owner in bits 4–7).
    pub fn set_replaces(&mut self, owner: NodeId) {
        if owner.index() < NodeId::MAX_NODES {
            self.flags = (self.flags & 0x0f) | FLAG_TAKEOVER | (owner.0 << REPLACES_SHIFT);
        }
    }

    /// The owner this registration took the flow over from, if it is a
    /// takeover.
    pub fn replaces(&self) -> Option<NodeId> {
        (self.flags & FLAG_TAKEOVER != 0).then_some(NodeId(self.flags >> REPLACES_SHIFT))
    }

    /// Parse one record at the start of `b`; returns it and its length.
    pub fn parse_prefix(b: &[u8]) -> Result<(Self, usize), CclError> {
        let (flow, k) = FlowKey::parse_prefix(b)?;
        let t: [u8; TAIL_LEN] = arr(b, k)?;
        let owner = if usize::from(t[0]) < NodeId::MAX_NODES {
            NodeId(t[0])
        } else {
            return Err(CclError::BadNodeId(t[0]));
        };
        let op = match t[1] {
            1 => FlowOp::Upsert,
            2 => FlowOp::Delete,
            v => return Err(CclError::BadValue { field: "flow op", value: u64::from(v) }),
        };
        let mut opaque = [0u8; OPAQUE_LEN];
        opaque.copy_from_slice(&t[12..]);
        Ok((
            FlowRecord {
                flow,
                owner,
                op,
                tcp_state: t[2],
                flags: t[3],
                seq_delta: u32::from_be_bytes([t[4], t[5], t[6], t[7]]),
                idle_timeout_s: u32::from_be_bytes([t[8], t[9], t[10], t[11]]),
                opaque,
            },
            k + TAIL_LEN,
        ))
    }

    /// Parse a record that fills `b` exactly.
    pub fn parse(b: &[u8]) -> Result<Self, CclError> {
        let (r, n) = Self::parse_prefix(b)?;
        if b.len() != n {
            return Err(CclError::TrailingBytes { what: "flow record", extra: b.len() - n });
        }
        Ok(r)
    }

    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let n = self.wire_len();
        if out.len() < n {
            return Err(too_small(n, out));
        }
        if self.owner.index() >= NodeId::MAX_NODES {
            return Err(CclError::BadNodeId(self.owner.0));
        }
        let k = self.flow.emit(out)?;
        let t = &mut out[k..n];
        t[0] = self.owner.0;
        t[1] = self.op as u8;
        t[2] = self.tcp_state;
        t[3] = self.flags;
        t[4..8].copy_from_slice(&self.seq_delta.to_be_bytes());
        t[8..12].copy_from_slice(&self.idle_timeout_s.to_be_bytes());
        t[12..].copy_from_slice(&self.opaque);
        Ok(n)
    }
}

/// A received (or written) batch of records, borrowed from its bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlowBatch<'a> {
    count: u16,
    records: &'a [u8],
}

impl<'a> FlowBatch<'a> {
    /// Validate `count` and every record; trailing bytes are an error.
    pub fn parse(b: &'a [u8]) -> Result<Self, CclError> {
        let c: [u8; 2] = arr(b, 0)?;
        let count = u16::from_be_bytes(c);
        let records = &b[2..];
        let mut off = 0;
        for _ in 0..count {
            let rest = records.get(off..).unwrap_or(&[]);
            if rest.is_empty() {
                return Err(truncated(2 + off + FlowRecord::V4_LEN, b));
            }
            let (_, n) = FlowRecord::parse_prefix(rest)?;
            off += n;
        }
        if off != records.len() {
            return Err(CclError::TrailingBytes { what: "flow batch", extra: records.len() - off });
        }
        Ok(FlowBatch { count, records })
    }
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    #[inline]
    pub fn wire_len(&self) -> usize {
        2 + self.records.len()
    }
    #[inline]
    pub fn iter(&self) -> FlowBatchIter<'a> {
        FlowBatchIter { rest: self.records, left: self.count }
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let n = self.wire_len();
        if out.len() < n {
            return Err(too_small(n, out));
        }
        out[..2].copy_from_slice(&self.count.to_be_bytes());
        out[2..n].copy_from_slice(self.records);
        Ok(n)
    }
}

impl<'a> IntoIterator for &FlowBatch<'a> {
    type Item = FlowRecord;
    type IntoIter = FlowBatchIter<'a>;
    fn into_iter(self) -> FlowBatchIter<'a> {
        self.iter()
    }
}

/// Records of a validated batch, in order.
#[derive(Clone, Debug)]
pub struct FlowBatchIter<'a> {
    rest: &'a [u8],
    left: u16,
}

impl Iterator for FlowBatchIter<'_> {
    type Item = FlowRecord;
    fn next(&mut self) -> Option<FlowRecord> {
        if self.left == 0 {
            return None;
        }
        // Validated by `FlowBatch::parse` (or written by `BatchWriter`);
        // an error here would end the iteration rather than panic.
        let (r, n) = FlowRecord::parse_prefix(self.rest).ok()?;
        self.rest = self.rest.get(n..).unwrap_or(&[]);
        self.left -= 1;
        Some(r)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::from(self.left), Some(usize::from(self.left)))
    }
}

/// Appends records into a caller-provided payload buffer until it is full
/// (per-burst batching: push the burst's records, seal when `push` reports
/// `BatchFull` or the burst ends, then `reset`). Size the buffer with
/// [`super::MAX_PAYLOAD_MTU1500`] to fill one unfragmented datagram.
#[derive(Debug)]
pub struct BatchWriter<'b> {
    buf: &'b mut [u8],
    len: usize,
    count: u16,
}

impl<'b> BatchWriter<'b> {
    /// `BufferTooSmall` when `buf` cannot hold even the count field.
    pub fn new(buf: &'b mut [u8]) -> Result<Self, CclError> {
        if buf.len() < 2 {
            return Err(too_small(2, buf));
        }
        buf[..2].copy_from_slice(&0u16.to_be_bytes());
        Ok(BatchWriter { buf, len: 2, count: 0 })
    }
    /// Append `r`; `BatchFull` (nothing written) when it does not fit.
    pub fn push(&mut self, r: &FlowRecord) -> Result<(), CclError> {
        if self.count == u16::MAX {
            return Err(CclError::BatchFull(self.count));
        }
        let n = r.wire_len();
        let room = match self.buf.get_mut(self.len..) {
            Some(room) if room.len() >= n => room,
            _ => return Err(CclError::BatchFull(self.count)),
        };
        r.emit(room)?;
        self.len += n;
        self.count += 1;
        self.buf[..2].copy_from_slice(&self.count.to_be_bytes());
        Ok(())
    }
    /// Would a record of `r`'s family still fit?
    #[inline]
    pub fn has_room_for(&self, r: &FlowRecord) -> bool {
        self.count < u16::MAX && self.buf.len() - self.len >= r.wire_len()
    }
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// Bytes written so far (count field included).
    #[inline]
    pub fn bytes(&self) -> usize {
        self.len
    }
    /// The batch so far, ready for `Message::StateUpdate` / `FlowRegister`.
    #[inline]
    pub fn as_batch(&self) -> FlowBatch<'_> {
        FlowBatch { count: self.count, records: &self.buf[2..self.len] }
    }
    /// Start a new batch in the same buffer.
    pub fn reset(&mut self) {
        self.len = 2;
        self.count = 0;
        self.buf[..2].copy_from_slice(&0u16.to_be_bytes());
    }
}
