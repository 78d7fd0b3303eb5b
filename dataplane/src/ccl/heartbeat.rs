//! The heartbeat (SPEC M1, issue 10) and the pieces the other
//! control-channel payloads share with it: optional node and placement
//! bytes, member tables. Its own module so that `message` (whose
//! `Message::Heartbeat` the workers consume) and `control` (the control
//! lcore's `ControlMessage`) both use it without importing each other.
//!
//! Invariants: as for every payload codec here — `parse` consumes its
//! input exactly, never panics or allocates, refuses undefined values
//! (state above 5, flag bits, node ids above 15, site or chassis 255 in a
//! value); `emit` never writes past `out` and re-emits parsed bytes
//! exactly; per-node arrays hold defaults for clear bits.

use super::key::{arr, exact, too_small};
use super::CclError;
use crate::types::Epoch;
use crate::NodeId;
use std::net::Ipv4Addr;

/// "No node" in a one-byte node field.
pub const NO_NODE: u8 = 0xff;
/// "None" in a one-byte site or chassis field (ids are 0..=254).
pub const NO_PLACE: u8 = 0xff;
/// Node slots of the per-node arrays (`NodeId::MAX_NODES`).
pub const NODE_SLOTS: usize = NodeId::MAX_NODES;

/// Heartbeat flag bit 0: the sender runs `split-brain: quorum`.
pub const HB_FLAG_QUORUM: u8 = 0x01;
/// Heartbeat flag bit 1: a control node back from a pause past the hold
/// time, not yet confirmed by a member: other control nodes and their
/// members do not yield to it.
pub const HB_FLAG_RESUMED: u8 = 0x02;
const HB_FLAGS: u8 = HB_FLAG_QUORUM | HB_FLAG_RESUMED;
/// Highest heartbeat state code (the membership states 0..=5: joining,
/// syncing, data, control, inactive, disabled).
pub const HB_STATE_MAX: u8 = 5;

pub(super) fn opt_node(v: u8, field: &'static str) -> Result<Option<NodeId>, CclError> {
    match v {
        NO_NODE => Ok(None),
        n if usize::from(n) < NODE_SLOTS => Ok(Some(NodeId(n))),
        n => Err(CclError::BadValue { field, value: u64::from(n) }),
    }
}

pub(super) fn node_byte(n: Option<NodeId>) -> Result<u8, CclError> {
    match n {
        None => Ok(NO_NODE),
        Some(n) if n.index() < NODE_SLOTS => Ok(n.0),
        Some(n) => Err(CclError::BadNodeId(n.0)),
    }
}

pub(super) fn dest(v: u8) -> Result<NodeId, CclError> {
    if usize::from(v) < NODE_SLOTS {
        Ok(NodeId(v))
    } else {
        Err(CclError::BadNodeId(v))
    }
}

pub(super) fn dest_byte(n: NodeId) -> Result<u8, CclError> {
    if n.index() < NODE_SLOTS {
        Ok(n.0)
    } else {
        Err(CclError::BadNodeId(n.0))
    }
}

pub(super) fn place_id(v: u8) -> Option<u8> {
    (v != NO_PLACE).then_some(v)
}

pub(super) fn place_byte(v: Option<u8>, field: &'static str) -> Result<u8, CclError> {
    match v {
        None => Ok(NO_PLACE),
        Some(NO_PLACE) => Err(CclError::BadValue { field, value: u64::from(NO_PLACE) }),
        Some(x) => Ok(x),
    }
}

pub(super) fn be32(b: [u8; 4]) -> u32 {
    u32::from_be_bytes(b)
}
pub(super) fn be64(b: [u8; 8]) -> u64 {
    u64::from_be_bytes(b)
}

/// Where a node sits: optional site and chassis ids (0..=254; SPEC R4,
/// R12), as membership announces them.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Placement {
    pub site: Option<u8>,
    pub chassis: Option<u8>,
}

impl Placement {
    pub(super) fn parse(b: [u8; 2]) -> Placement {
        Placement { site: place_id(b[0]), chassis: place_id(b[1]) }
    }
    pub(super) fn bytes(&self) -> Result<[u8; 2], CclError> {
        Ok([place_byte(self.site, "site")?, place_byte(self.chassis, "chassis")?])
    }
}

/// A member table on the wire: member bitmap (2), then per member in
/// ascending node order its site (1), chassis (1) and admission epoch (8:
/// the epoch its current incarnation was admitted at, `MemberInfo::since`;
/// 0 unknown).
pub(super) type MemberTable = (u16, [Placement; NODE_SLOTS], [Epoch; NODE_SLOTS]);

pub(super) fn parse_members(b: &[u8], at: usize) -> Result<(MemberTable, usize), CclError> {
    let bits = u16::from_be_bytes(arr(b, at)?);
    let mut place = [Placement::default(); NODE_SLOTS];
    let mut since = [Epoch(0); NODE_SLOTS];
    let mut at = at + 2;
    for (i, (p, e)) in place.iter_mut().zip(since.iter_mut()).enumerate() {
        if bits & (1 << i) != 0 {
            *p = Placement::parse(arr(b, at)?);
            *e = Epoch(be64(arr(b, at + 2)?));
            at += MEMBER_ENTRY;
        }
    }
    Ok(((bits, place, since), at))
}

/// Bytes per member in a member table.
const MEMBER_ENTRY: usize = 10;

pub(super) fn members_len(bits: u16) -> usize {
    2 + MEMBER_ENTRY * bits.count_ones() as usize
}

pub(super) fn emit_members(
    bits: u16,
    place: &[Placement; NODE_SLOTS],
    since: &[Epoch; NODE_SLOTS],
    out: &mut [u8],
) -> Result<usize, CclError> {
    let n = members_len(bits);
    let o = out.get_mut(..n).ok_or_else(|| too_small(n, &[]))?;
    o[..2].copy_from_slice(&bits.to_be_bytes());
    let mut at = 2;
    for (i, (p, e)) in place.iter().zip(since.iter()).enumerate() {
        if bits & (1 << i) != 0 {
            o[at..at + 2].copy_from_slice(&p.bytes()?);
            o[at + 2..at + MEMBER_ENTRY].copy_from_slice(&e.0.to_be_bytes());
            at += MEMBER_ENTRY;
        }
    }
    Ok(n)
}

/// The periodic liveness and membership beacon (SPEC M1), broadcast by
/// every node every heartbeat interval (and at once when its state or
/// member set changes). The sender's member-set epoch is the CCL header's.
///
/// Layout (38 + 10·members + 4·echoes bytes, at most 262):
/// priority (1), state (1: 0 joining, 1 syncing, 2 data, 3 control,
/// 4 inactive, 5 disabled), follows (1: the control node the sender
/// follows and heard within its hold time, 0xff none), flags (1: bit 0
/// quorum mode, bit 1 a control node resumed and not yet confirmed),
/// site (1), chassis (1) (0xff none), CCL address (4),
/// heartbeat sequence (4: from 1 per incarnation), config version (8),
/// state version (8: replicated tables), grant (4: a control node's
/// quorum-backed lease left at sending, in µs; 0 none), member table
/// (bitmap 2, then site,
/// chassis and admission epoch per member), echo bitmap (2), then per set bit the highest
/// heartbeat sequence the sender has received from that node (4).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    pub priority: u8,
    pub state: u8,
    pub follows: Option<NodeId>,
    pub flags: u8,
    pub place: Placement,
    pub ccl_address: Ipv4Addr,
    pub seq: u32,
    pub config_version: u64,
    pub state_version: u64,
    /// A control node in quorum mode: how long (µs, from sending) its own
    /// lease, backed by a majority's echoes, still runs; members never
    /// lease past it. 0: none.
    pub grant_us: u32,
    /// Bit n set: the sender counts node n as a member.
    pub member_bitmap: u16,
    /// Site and chassis of each member (by node index).
    pub member_place: [Placement; NODE_SLOTS],
    /// The epoch each member's current incarnation was admitted at (by
    /// node index; `MemberInfo::since`).
    pub member_since: [Epoch; NODE_SLOTS],
    /// Bit n set: `echoes[n]` is the highest heartbeat sequence heard
    /// from node n (its current incarnation).
    pub echo_bitmap: u16,
    pub echoes: [u32; NODE_SLOTS],
}

impl Default for Heartbeat {
    fn default() -> Heartbeat {
        Heartbeat {
            priority: 0,
            state: 0,
            follows: None,
            flags: 0,
            place: Placement::default(),
            ccl_address: Ipv4Addr::UNSPECIFIED,
            seq: 0,
            config_version: 0,
            state_version: 0,
            grant_us: 0,
            member_bitmap: 0,
            member_place: [Placement::default(); NODE_SLOTS],
            member_since: [Epoch(0); NODE_SLOTS],
            echo_bitmap: 0,
            echoes: [0; NODE_SLOTS],
        }
    }
}

impl Heartbeat {
    /// Bytes before the member table.
    pub const FIXED_LEN: usize = 34;
    /// Shortest heartbeat: no members, no echoes.
    pub const MIN_LEN: usize = Self::FIXED_LEN + 4;
    /// Longest heartbeat: 16 members, 16 echoes.
    pub const MAX_LEN: usize = Self::MIN_LEN + MEMBER_ENTRY * NODE_SLOTS + 4 * NODE_SLOTS;

    pub fn parse(b: &[u8]) -> Result<Self, CclError> {
        let f: [u8; Self::FIXED_LEN] = arr(b, 0)?;
        if f[1] > HB_STATE_MAX {
            return Err(CclError::BadValue { field: "heartbeat state", value: u64::from(f[1]) });
        }
        let follows = opt_node(f[2], "heartbeat follows")?;
        if f[3] & !HB_FLAGS != 0 {
            return Err(CclError::BadValue { field: "heartbeat flags", value: u64::from(f[3]) });
        }
        let ((member_bitmap, member_place, member_since), mut at) = parse_members(b, Self::FIXED_LEN)?;
        let echo_bitmap = u16::from_be_bytes(arr(b, at)?);
        at += 2;
        let mut echoes = [0u32; NODE_SLOTS];
        for (i, e) in echoes.iter_mut().enumerate() {
            if echo_bitmap & (1 << i) != 0 {
                *e = be32(arr(b, at)?);
                at += 4;
            }
        }
        exact("heartbeat", b, at)?;
        let g = |r: core::ops::Range<usize>| f.get(r).unwrap_or(&[]);
        let mut a4 = [0u8; 4];
        a4.copy_from_slice(g(6..10));
        let mut s4 = [0u8; 4];
        s4.copy_from_slice(g(10..14));
        let mut c8 = [0u8; 8];
        c8.copy_from_slice(g(14..22));
        let mut v8 = [0u8; 8];
        v8.copy_from_slice(g(22..30));
        let mut g4 = [0u8; 4];
        g4.copy_from_slice(g(30..34));
        Ok(Heartbeat {
            priority: f[0],
            state: f[1],
            follows,
            flags: f[3],
            place: Placement::parse([f[4], f[5]]),
            ccl_address: Ipv4Addr::from(a4),
            seq: be32(s4),
            config_version: be64(c8),
            state_version: be64(v8),
            grant_us: be32(g4),
            member_bitmap,
            member_place,
            member_since,
            echo_bitmap,
            echoes,
        })
    }

    pub fn wire_len(&self) -> usize {
        Self::FIXED_LEN + members_len(self.member_bitmap) + 2 + 4 * self.echo_bitmap.count_ones() as usize
    }

    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let n = self.wire_len();
        if out.len() < n {
            return Err(too_small(n, out));
        }
        if self.state > HB_STATE_MAX {
            return Err(CclError::BadValue { field: "heartbeat state", value: u64::from(self.state) });
        }
        if self.flags & !HB_FLAGS != 0 {
            return Err(CclError::BadValue { field: "heartbeat flags", value: u64::from(self.flags) });
        }
        let o = &mut out[..n];
        o[0] = self.priority;
        o[1] = self.state;
        o[2] = node_byte(self.follows)?;
        o[3] = self.flags;
        o[4..6].copy_from_slice(&self.place.bytes()?);
        o[6..10].copy_from_slice(&self.ccl_address.octets());
        o[10..14].copy_from_slice(&self.seq.to_be_bytes());
        o[14..22].copy_from_slice(&self.config_version.to_be_bytes());
        o[22..30].copy_from_slice(&self.state_version.to_be_bytes());
        o[30..34].copy_from_slice(&self.grant_us.to_be_bytes());
        let mut at = Self::FIXED_LEN + emit_members(self.member_bitmap, &self.member_place, &self.member_since, &mut o[Self::FIXED_LEN..])?;
        o[at..at + 2].copy_from_slice(&self.echo_bitmap.to_be_bytes());
        at += 2;
        for (i, e) in self.echoes.iter().enumerate() {
            if self.echo_bitmap & (1 << i) != 0 {
                o[at..at + 4].copy_from_slice(&e.to_be_bytes());
                at += 4;
            }
        }
        Ok(at)
    }
}
