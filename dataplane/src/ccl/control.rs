//! Control-channel payloads (issue 10): the join handshake,
//! chunked bulk transfers and replicated-table updates that the control
//! lcore's membership machine (`controlplane::membership`) exchanges on
//! [`super::CONTROL_CHANNEL`]. Layouts: `docs/ccl-protocol.md`, "Control
//! channel".
//!
//! Why a second message enum ([`ControlMessage`]) next to [`Message`]: the
//! workers' pipeline matches `Message` exhaustively and never sees these
//! kinds (the driver routes the control channel to the control lcore by
//! UDP source port); keeping them out of `Message` keeps that match, and
//! the per-packet `Opened` value, as they were. The heartbeat is in both:
//! a worker that receives one consumes it. [`super::Opener::open_control`]
//! and [`super::Sealer::seal_control_frame`] are the control lcore's open
//! and seal.
//!
//! Invariants (as for every payload codec here): `parse` consumes its input
//! exactly, never panics, never allocates, and refuses any value the
//! layout does not define (unknown state, verdict or flag bits, node ids
//! above 15 where a node id is meant, empty or oversized chunks); `emit`
//! returns `BufferTooSmall` rather than writing past `out`, refuses values
//! it could not parse back, and `emit` of a parsed value reproduces the
//! input bytes. Per-node arrays (member placement, echoes) are meaningful
//! only for the nodes whose bit is set; parsed values hold the default in
//! the others and `emit` ignores them.

use super::heartbeat::{
    be32, be64, dest, dest_byte, emit_members, members_len, parse_members, Heartbeat, Placement, NODE_SLOTS,
};
use super::key::{arr, exact, too_small, truncated};
use super::message::MessageKind;
use super::{CclError, MAX_PAYLOAD_MTU1500};
use crate::types::Epoch;
use crate::NodeId;
use std::net::Ipv4Addr;

/// Joiner → control node: admit me. The joiner's incarnation and last
/// epoch are the header's. Layout (25 bytes): to (1: the control node
/// addressed), priority (1), site (1), chassis (1), CCL address (4),
/// config version (8: of the replicated configuration it holds, 0 none),
/// config digest (8), flags (1: none defined, 0).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct JoinRequest {
    pub to: NodeId,
    pub priority: u8,
    pub place: Placement,
    pub ccl_address: Ipv4Addr,
    pub config_version: u64,
    pub config_digest: u64,
    /// The joiner's workers (`dpdk.workers`, 1..=32): every member runs
    /// the same number, because a worker's CCL channel names the worker
    /// that holds the connections (docs/workers.md).
    pub workers: u8,
}

impl JoinRequest {
    pub const LEN: usize = 25;
    pub fn parse(b: &[u8]) -> Result<Self, CclError> {
        let a: [u8; Self::LEN] = arr(b, 0)?;
        exact("join request", b, Self::LEN)?;
        if a[24] == 0 || a[24] > super::MAX_WORKER_CHANNELS {
            return Err(CclError::BadValue { field: "join request workers", value: u64::from(a[24]) });
        }
        let mut ip = [0u8; 4];
        ip.copy_from_slice(&a[4..8]);
        let mut v = [0u8; 8];
        v.copy_from_slice(&a[8..16]);
        let mut d = [0u8; 8];
        d.copy_from_slice(&a[16..24]);
        Ok(JoinRequest {
            to: dest(a[0])?,
            priority: a[1],
            place: Placement::parse([a[2], a[3]]),
            ccl_address: Ipv4Addr::from(ip),
            config_version: be64(v),
            config_digest: be64(d),
            workers: a[24],
        })
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let o = out.get_mut(..Self::LEN).ok_or_else(|| too_small(Self::LEN, &[]))?;
        o[0] = dest_byte(self.to)?;
        o[1] = self.priority;
        o[2..4].copy_from_slice(&self.place.bytes()?);
        o[4..8].copy_from_slice(&self.ccl_address.octets());
        o[8..16].copy_from_slice(&self.config_version.to_be_bytes());
        o[16..24].copy_from_slice(&self.config_digest.to_be_bytes());
        if self.workers == 0 || self.workers > super::MAX_WORKER_CHANNELS {
            return Err(CclError::BadValue { field: "join request workers", value: u64::from(self.workers) });
        }
        o[24] = self.workers;
        Ok(Self::LEN)
    }
}

macro_rules! verdicts {
    ($( $(#[$doc:meta])* $name:ident = $code:literal => $text:literal, )*) => {
        /// The control node's answer to a [`JoinRequest`].
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum JoinVerdict { $( $(#[$doc])* $name = $code, )* }

        impl JoinVerdict {
            pub const ALL: &'static [JoinVerdict] = &[ $( JoinVerdict::$name, )* ];
            pub const fn as_str(self) -> &'static str {
                match self { $( JoinVerdict::$name => $text, )* }
            }
            pub const fn from_u8(v: u8) -> Option<Self> {
                match v { $( $code => Some(JoinVerdict::$name), )* _ => None }
            }
        }
    };
}

verdicts! {
    /// Admitted: the member table is the new set (the header's epoch).
    Accepted = 0 => "accepted",
    /// The addressee is not the control node; detail: the node it follows (0xff none).
    NotControl = 1 => "not-control",
    /// Another machine holds this node id: the joiner's CCL address is not
    /// the one configured for it; detail: the configured address.
    DuplicateId = 2 => "duplicate-id",
    /// A live member has this id with another incarnation (a restart
    /// before the old one timed out, or a clone); detail: its incarnation.
    IdInUse = 3 => "id-in-use",
    /// The joiner's configuration version is newer than the control
    /// node's (issued by a control node this one never followed); detail:
    /// the control node's version.
    ConfigAhead = 4 => "config-ahead",
    /// Same configuration version, different contents; detail: the control
    /// node's digest.
    ConfigDiverged = 5 => "config-diverged",
    /// The node id is not configured on the control node.
    UnknownNode = 6 => "unknown-node",
    /// The joiner runs another number of workers than the cluster (every
    /// member runs the same: docs/workers.md); detail: the control node's.
    WorkersMismatch = 7 => "workers-mismatch",
}

/// Control node → joiner. Layout: to (1), to-incarnation (4: the
/// joiner's, so a second node with the same id does not take it), verdict
/// (1), detail (8), then the member table (bitmap 2, site, chassis and
/// admission epoch per member; empty bitmap unless accepted).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct JoinReply {
    pub to: NodeId,
    pub to_incarnation: u32,
    pub verdict: JoinVerdict,
    pub detail: u64,
    pub member_bitmap: u16,
    pub member_place: [Placement; NODE_SLOTS],
    pub member_since: [Epoch; NODE_SLOTS],
}

impl JoinReply {
    const HEAD: usize = 14;
    pub fn parse(b: &[u8]) -> Result<Self, CclError> {
        let h: [u8; Self::HEAD] = arr(b, 0)?;
        let verdict = JoinVerdict::from_u8(h[5])
            .ok_or(CclError::BadValue { field: "join verdict", value: u64::from(h[5]) })?;
        let ((member_bitmap, member_place, member_since), at) = parse_members(b, Self::HEAD)?;
        if verdict != JoinVerdict::Accepted && member_bitmap != 0 {
            return Err(CclError::BadValue { field: "refusal member bitmap", value: u64::from(member_bitmap) });
        }
        exact("join reply", b, at)?;
        let mut i = [0u8; 4];
        i.copy_from_slice(&h[1..5]);
        let mut d = [0u8; 8];
        d.copy_from_slice(&h[6..14]);
        Ok(JoinReply { to: dest(h[0])?, to_incarnation: be32(i), verdict,
            detail: be64(d),
            member_bitmap,
            member_place,
            member_since,
        })
    }
    pub fn wire_len(&self) -> usize {
        Self::HEAD + members_len(self.member_bitmap)
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let n = self.wire_len();
        if out.len() < n {
            return Err(too_small(n, out));
        }
        if self.verdict != JoinVerdict::Accepted && self.member_bitmap != 0 {
            return Err(CclError::BadValue { field: "refusal member bitmap", value: u64::from(self.member_bitmap) });
        }
        out[0] = dest_byte(self.to)?;
        out[1..5].copy_from_slice(&self.to_incarnation.to_be_bytes());
        out[5] = self.verdict as u8;
        out[6..14].copy_from_slice(&self.detail.to_be_bytes());
        emit_members(self.member_bitmap, &self.member_place, &self.member_since, &mut out[Self::HEAD..n])?;
        Ok(n)
    }
}

/// SyncRequest flag bit 0: send the whole replicated state (a joiner),
/// not the changes since `since`.
pub const SYNC_FULL: u8 = 0x01;
/// Most chunks one request may ask for.
pub const SYNC_MAX_WINDOW: u8 = 64;

/// Requester → holder of the replicated state: send (more of) transfer
/// `xfer`. The requester drives the transfer: it asks for `window` chunks
/// from `next` (the first it lacks) and asks again when they arrived or
/// after a timeout, so a lost chunk or request is simply asked for again.
/// Layout (27 bytes): to (1), transfer id (4), since (8: state version
/// held), config version held (8), next chunk (4), window (1: 1..=64),
/// flags (1: bit 0 full).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SyncRequest {
    pub to: NodeId,
    pub xfer: u32,
    pub since: u64,
    pub config_version: u64,
    pub next: u32,
    pub window: u8,
    pub full: bool,
}

impl SyncRequest {
    pub const LEN: usize = 27;
    pub fn parse(b: &[u8]) -> Result<Self, CclError> {
        let a: [u8; Self::LEN] = arr(b, 0)?;
        exact("sync request", b, Self::LEN)?;
        if a[25] == 0 || a[25] > SYNC_MAX_WINDOW {
            return Err(CclError::BadValue { field: "sync window", value: u64::from(a[25]) });
        }
        if a[26] & !SYNC_FULL != 0 {
            return Err(CclError::BadValue { field: "sync flags", value: u64::from(a[26]) });
        }
        let mut x = [0u8; 4];
        x.copy_from_slice(&a[1..5]);
        let mut s = [0u8; 8];
        s.copy_from_slice(&a[5..13]);
        let mut c = [0u8; 8];
        c.copy_from_slice(&a[13..21]);
        let mut n = [0u8; 4];
        n.copy_from_slice(&a[21..25]);
        Ok(SyncRequest {
            to: dest(a[0])?,
            xfer: be32(x),
            since: be64(s),
            config_version: be64(c),
            next: be32(n),
            window: a[25],
            full: a[26] & SYNC_FULL != 0,
        })
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        if self.window == 0 || self.window > SYNC_MAX_WINDOW {
            return Err(CclError::BadValue { field: "sync window", value: u64::from(self.window) });
        }
        let o = out.get_mut(..Self::LEN).ok_or_else(|| too_small(Self::LEN, &[]))?;
        o[0] = dest_byte(self.to)?;
        o[1..5].copy_from_slice(&self.xfer.to_be_bytes());
        o[5..13].copy_from_slice(&self.since.to_be_bytes());
        o[13..21].copy_from_slice(&self.config_version.to_be_bytes());
        o[21..25].copy_from_slice(&self.next.to_be_bytes());
        o[25] = self.window;
        o[26] = if self.full { SYNC_FULL } else { 0 };
        Ok(Self::LEN)
    }
}

/// Bytes of a [`SyncChunk`] in front of its data.
pub const SYNC_CHUNK_HEAD: usize = 17;
/// Most data bytes in one chunk: a chunk datagram fits an outer IPv4 MTU
/// of 1500 bytes (`MAX_PAYLOAD_MTU1500` = 1422 payload bytes).
pub const SYNC_CHUNK_DATA: usize = MAX_PAYLOAD_MTU1500 - SYNC_CHUNK_HEAD;

/// Holder → requester: chunk `index` of `total` of transfer `xfer` (an
/// opaque byte stream, the serialized replicated state; every chunk but
/// the last carries exactly `SYNC_CHUNK_DATA` bytes). Layout: to (1),
/// to-incarnation (4), transfer id (4), index (4), total (4: ≥ 1, index <
/// total), data (1..=1405 bytes, to the end).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SyncChunk<'a> {
    pub to: NodeId,
    pub to_incarnation: u32,
    pub xfer: u32,
    pub index: u32,
    pub total: u32,
    pub data: &'a [u8],
}

impl<'a> SyncChunk<'a> {
    fn check(index: u32, total: u32, len: usize) -> Result<(), CclError> {
        if total == 0 || index >= total {
            return Err(CclError::BadValue { field: "chunk index", value: u64::from(index) });
        }
        if len == 0 || len > SYNC_CHUNK_DATA {
            return Err(CclError::BadValue { field: "chunk length", value: len as u64 });
        }
        Ok(())
    }
    pub fn parse(b: &'a [u8]) -> Result<Self, CclError> {
        let h: [u8; SYNC_CHUNK_HEAD] = arr(b, 0)?;
        let q = |r: core::ops::Range<usize>| {
            let mut a = [0u8; 4];
            a.copy_from_slice(h.get(r).unwrap_or(&[0; 4]));
            be32(a)
        };
        let (inc, xfer, index, total) = (q(1..5), q(5..9), q(9..13), q(13..17));
        let data = b.get(SYNC_CHUNK_HEAD..).unwrap_or(&[]);
        Self::check(index, total, data.len())?;
        Ok(SyncChunk { to: dest(h[0])?, to_incarnation: inc, xfer, index, total, data })
    }
    pub fn wire_len(&self) -> usize {
        SYNC_CHUNK_HEAD + self.data.len()
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        Self::check(self.index, self.total, self.data.len())?;
        let n = self.wire_len();
        let o = out.get_mut(..n).ok_or_else(|| too_small(n, &[]))?;
        o[0] = dest_byte(self.to)?;
        o[1..5].copy_from_slice(&self.to_incarnation.to_be_bytes());
        o[5..9].copy_from_slice(&self.xfer.to_be_bytes());
        o[9..13].copy_from_slice(&self.index.to_be_bytes());
        o[13..17].copy_from_slice(&self.total.to_be_bytes());
        o[SYNC_CHUNK_HEAD..].copy_from_slice(self.data);
        Ok(n)
    }
}

/// Longest key of a replicated-table entry.
pub const TABLE_KEY_MAX: usize = 255;
/// Longest value a [`TableUpdate`] carries (so that every update with the
/// longest key fits one datagram at MTU 1500).
pub const TABLE_VALUE_MAX: usize = 1024;

/// What a [`TableUpdate`] does to its entry.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TableOp<'a> {
    Upsert(&'a [u8]),
    Delete,
}

/// Control node → every member: one change of a replicated table, state
/// version `version` (the cluster-wide change counter; members apply
/// changes in version order and fetch what they missed). Layout: version
/// (8), table (1), op (1: 1 upsert, 2 delete), key length (1), key, value
/// length (2: 0 for a delete, ≤ 1024), value.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TableUpdate<'a> {
    pub version: u64,
    pub table: u8,
    pub key: &'a [u8],
    pub op: TableOp<'a>,
}

impl<'a> TableUpdate<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Self, CclError> {
        let h: [u8; 11] = arr(b, 0)?;
        let mut v = [0u8; 8];
        v.copy_from_slice(&h[..8]);
        let klen = usize::from(h[10]);
        let key = b.get(11..11 + klen).ok_or_else(|| truncated(11 + klen, b))?;
        let vlen = usize::from(u16::from_be_bytes(arr(b, 11 + klen)?));
        let at = 13 + klen;
        let value = b.get(at..at + vlen).ok_or_else(|| truncated(at + vlen, b))?;
        exact("table update", b, at + vlen)?;
        let op = match h[9] {
            1 if vlen <= TABLE_VALUE_MAX => TableOp::Upsert(value),
            1 => return Err(CclError::BadValue { field: "table value length", value: vlen as u64 }),
            2 if vlen == 0 => TableOp::Delete,
            2 => return Err(CclError::BadValue { field: "delete value length", value: vlen as u64 }),
            op => return Err(CclError::BadValue { field: "table op", value: u64::from(op) }),
        };
        Ok(TableUpdate { version: be64(v), table: h[8], key, op })
    }
    pub fn wire_len(&self) -> usize {
        13 + self.key.len() + if let TableOp::Upsert(v) = self.op { v.len() } else { 0 }
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        if self.key.len() > TABLE_KEY_MAX {
            return Err(CclError::BadValue { field: "table key length", value: self.key.len() as u64 });
        }
        let (op, value): (u8, &[u8]) = match self.op {
            TableOp::Upsert(v) if v.len() <= TABLE_VALUE_MAX => (1, v),
            TableOp::Upsert(v) => return Err(CclError::BadValue { field: "table value length", value: v.len() as u64 }),
            TableOp::Delete => (2, &[]),
        };
        let n = self.wire_len();
        let o = out.get_mut(..n).ok_or_else(|| too_small(n, &[]))?;
        let k = self.key.len();
        o[..8].copy_from_slice(&self.version.to_be_bytes());
        o[8] = self.table;
        o[9] = op;
        o[10] = k as u8;
        o[11..11 + k].copy_from_slice(self.key);
        o[11 + k..13 + k].copy_from_slice(&(value.len() as u16).to_be_bytes());
        o[13 + k..].copy_from_slice(value);
        Ok(n)
    }
}

/// Member → control node: the dynamic-NAT translation of a real address
/// in a pool (SPEC N4; docs/nat.md, "Dynamic NAT in a cluster"). The
/// control node answers through the replicated NAT table (a
/// `TableUpdate` every member applies), never directly. Layout (12
/// bytes): to (1: the control node addressed), flags (1: none defined,
/// 0), pool (2), real address (4), mapped address (4: the translation the
/// sender holds and uses — a renewal —, or 0.0.0.0 to ask for one).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct XlateRequest {
    pub to: NodeId,
    pub pool: u16,
    pub real: Ipv4Addr,
    /// A renewal: the mapped address the sender holds.
    pub held: Option<Ipv4Addr>,
}

impl XlateRequest {
    pub const LEN: usize = 12;
    pub fn parse(b: &[u8]) -> Result<Self, CclError> {
        let a: [u8; Self::LEN] = arr(b, 0)?;
        exact("xlate request", b, Self::LEN)?;
        if a[1] != 0 {
            return Err(CclError::BadValue { field: "xlate request flags", value: u64::from(a[1]) });
        }
        let held = Ipv4Addr::new(a[8], a[9], a[10], a[11]);
        Ok(XlateRequest {
            to: dest(a[0])?,
            pool: u16::from_be_bytes([a[2], a[3]]),
            real: Ipv4Addr::new(a[4], a[5], a[6], a[7]),
            held: (!held.is_unspecified()).then_some(held),
        })
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let o = out.get_mut(..Self::LEN).ok_or_else(|| too_small(Self::LEN, &[]))?;
        if self.held.is_some_and(|h| h.is_unspecified()) {
            return Err(CclError::BadValue { field: "xlate request held address", value: 0 });
        }
        o[0] = dest_byte(self.to)?;
        o[1] = 0;
        o[2..4].copy_from_slice(&self.pool.to_be_bytes());
        o[4..8].copy_from_slice(&self.real.octets());
        o[8..12].copy_from_slice(&self.held.unwrap_or(Ipv4Addr::UNSPECIFIED).octets());
        Ok(Self::LEN)
    }
}

/// Classes a [`LimitReport`] carries at most (the global limits and 31
/// limited rules).
pub const LIMIT_REPORT_CLASSES: usize = 32;
/// Clients a [`LimitReport`] carries at most.
pub const LIMIT_REPORT_CLIENTS: usize = 32;

/// Member → every member, every report interval: this node's connection
/// counts per limit class and for its busiest clients (SPEC L1; each node
/// enforces against its own counts plus the others' last reports,
/// `controlplane::limits`). Layout (8 + 12 × classes + 28 × clients
/// bytes): sequence (4: the sender's report counter; a report older than
/// the last one taken is stale), classes (1: ≤ 32), clients (1: ≤ 32),
/// flags (2: none defined, 0); per class: id (4, `conntrack::limits::
/// class_id`), connections (4), embryonic (4); per client: class id (4),
/// address (16: IPv6, IPv4 as its v4-mapped form), connections (4),
/// embryonic (4). A node reports a class or client it holds nothing of
/// as zeros, or leaves it out.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LimitReport<'a> {
    pub seq: u32,
    classes: &'a [u8],
    clients: &'a [u8],
}

/// A report of nothing (sequence 0).
pub const EMPTY_LIMIT_REPORT: LimitReport<'static> = LimitReport { seq: 0, classes: &[], clients: &[] };

/// One class of a [`LimitReport`]: (class id, connections, embryonic).
pub type ClassCount = (u32, u32, u32);
/// One client of a [`LimitReport`]: (class id, address, connections, embryonic).
pub type ClientCount = (u32, std::net::IpAddr, u32, u32);

impl<'a> LimitReport<'a> {
    pub const HEAD_LEN: usize = 8;
    pub const CLASS_LEN: usize = 12;
    pub const CLIENT_LEN: usize = 28;

    pub fn parse(b: &'a [u8]) -> Result<Self, CclError> {
        let a: [u8; 8] = arr(b, 0)?;
        let (nc, nk) = (usize::from(a[4]), usize::from(a[5]));
        if nc > LIMIT_REPORT_CLASSES {
            return Err(CclError::BadValue { field: "limit report classes", value: nc as u64 });
        }
        if nk > LIMIT_REPORT_CLIENTS {
            return Err(CclError::BadValue { field: "limit report clients", value: nk as u64 });
        }
        if a[6] != 0 || a[7] != 0 {
            return Err(CclError::BadValue { field: "limit report flags", value: u64::from(u16::from_be_bytes([a[6], a[7]])) });
        }
        let end_c = Self::HEAD_LEN + nc * Self::CLASS_LEN;
        let end = end_c + nk * Self::CLIENT_LEN;
        let body = b.get(..end).ok_or_else(|| truncated(end, b))?;
        exact("limit report", b, end)?;
        Ok(LimitReport {
            seq: be32([a[0], a[1], a[2], a[3]]),
            classes: body.get(Self::HEAD_LEN..end_c).unwrap_or(&[]),
            clients: body.get(end_c..).unwrap_or(&[]),
        })
    }

    /// The classes, in the order sent.
    pub fn classes(&self) -> impl Iterator<Item = ClassCount> + 'a {
        self.classes.chunks_exact(Self::CLASS_LEN).map(|c| {
            let w = |i: usize| be32([c[i], c[i + 1], c[i + 2], c[i + 3]]);
            (w(0), w(4), w(8))
        })
    }

    /// The clients, in the order sent.
    pub fn clients(&self) -> impl Iterator<Item = ClientCount> + 'a {
        self.clients.chunks_exact(Self::CLIENT_LEN).map(|c| {
            let w = |i: usize| be32([c[i], c[i + 1], c[i + 2], c[i + 3]]);
            let mut a = [0u8; 16];
            a.copy_from_slice(&c[4..20]);
            let v6 = std::net::Ipv6Addr::from(a);
            let addr = v6.to_ipv4_mapped().map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4);
            (w(0), addr, w(20), w(24))
        })
    }

    pub fn wire_len(&self) -> usize {
        Self::HEAD_LEN + self.classes.len() + self.clients.len()
    }

    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let n = self.wire_len();
        let o = out.get_mut(..n).ok_or_else(|| too_small(n, &[]))?;
        o[0..4].copy_from_slice(&self.seq.to_be_bytes());
        o[4] = (self.classes.len() / Self::CLASS_LEN) as u8;
        o[5] = (self.clients.len() / Self::CLIENT_LEN) as u8;
        o[6..8].copy_from_slice(&[0, 0]);
        let end_c = Self::HEAD_LEN + self.classes.len();
        o[Self::HEAD_LEN..end_c].copy_from_slice(self.classes);
        o[end_c..].copy_from_slice(self.clients);
        Ok(n)
    }

    /// Encode a report (the payload bytes, what `parse` reads): at most
    /// `LIMIT_REPORT_CLASSES` classes and `LIMIT_REPORT_CLIENTS` clients
    /// are taken, the rest left out.
    pub fn encode(seq: u32, classes: &[ClassCount], clients: &[ClientCount]) -> Vec<u8> {
        let classes = classes.get(..LIMIT_REPORT_CLASSES).unwrap_or(classes);
        let clients = clients.get(..LIMIT_REPORT_CLIENTS).unwrap_or(clients);
        let mut v = Vec::with_capacity(Self::HEAD_LEN + classes.len() * Self::CLASS_LEN + clients.len() * Self::CLIENT_LEN);
        v.extend_from_slice(&seq.to_be_bytes());
        v.extend_from_slice(&[classes.len() as u8, clients.len() as u8, 0, 0]);
        for &(id, c, e) in classes {
            for w in [id, c, e] {
                v.extend_from_slice(&w.to_be_bytes());
            }
        }
        for &(id, addr, c, e) in clients {
            v.extend_from_slice(&id.to_be_bytes());
            let a = match addr {
                std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                std::net::IpAddr::V6(v6) => v6,
            };
            v.extend_from_slice(&a.octets());
            v.extend_from_slice(&c.to_be_bytes());
            v.extend_from_slice(&e.to_be_bytes());
        }
        v
    }
}

/// Topics a [`QueryRequest`] may name (`1..=QUERY_TOPIC_MAX`; what each
/// is, the control plane decides: `controlplane::clusterview`).
pub const QUERY_TOPIC_MAX: u8 = 15;

/// Most bytes of a [`QueryRequest`]'s argument.
pub const QUERY_ARG_MAX: usize = 64;

/// A query's argument (a topic's parameter, e.g. a trace filter's text):
/// 0..=`QUERY_ARG_MAX` bytes, kept inline so a request stays `Copy`.
#[derive(Copy, Clone, PartialEq, Eq)]
pub struct QueryArg {
    len: u8,
    bytes: [u8; QUERY_ARG_MAX],
}

impl QueryArg {
    pub const EMPTY: QueryArg = QueryArg { len: 0, bytes: [0; QUERY_ARG_MAX] };
    /// `None`: longer than `QUERY_ARG_MAX`.
    pub fn new(b: &[u8]) -> Option<QueryArg> {
        let mut a = QueryArg::EMPTY;
        a.bytes.get_mut(..b.len())?.copy_from_slice(b);
        a.len = b.len() as u8;
        Some(a)
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl core::fmt::Debug for QueryArg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "QueryArg({:?})", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// Member → member: send (more of) your answer to cluster-wide query
/// `query` on `topic` (`clusterfw-ctl cluster show`, SPEC L5). Driven by
/// the requester exactly as a [`SyncRequest`]: a window of chunks from the
/// first one it lacks; the answer comes back as [`MessageKind::QueryChunk`]
/// messages (a [`SyncChunk`]'s layout, `xfer` the query id). Layout (11
/// to 75 bytes): to (1), query id (4), topic (1: 1..=15), next chunk (4),
/// window (1: 1..=64), argument (0..=64 bytes, to the end).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct QueryRequest {
    pub to: NodeId,
    pub query: u32,
    pub topic: u8,
    pub next: u32,
    pub window: u8,
    pub arg: QueryArg,
}

impl QueryRequest {
    /// Bytes before the argument.
    pub const HEAD_LEN: usize = 11;
    fn check(topic: u8, window: u8) -> Result<(), CclError> {
        if topic == 0 || topic > QUERY_TOPIC_MAX {
            return Err(CclError::BadValue { field: "query topic", value: u64::from(topic) });
        }
        if window == 0 || window > SYNC_MAX_WINDOW {
            return Err(CclError::BadValue { field: "query window", value: u64::from(window) });
        }
        Ok(())
    }
    pub fn parse(b: &[u8]) -> Result<Self, CclError> {
        let a: [u8; Self::HEAD_LEN] = arr(b, 0)?;
        let rest = b.get(Self::HEAD_LEN..).unwrap_or(&[]);
        let arg = QueryArg::new(rest).ok_or(CclError::BadValue { field: "query argument length", value: rest.len() as u64 })?;
        Self::check(a[5], a[10])?;
        Ok(QueryRequest {
            to: dest(a[0])?,
            query: be32([a[1], a[2], a[3], a[4]]),
            topic: a[5],
            next: be32([a[6], a[7], a[8], a[9]]),
            window: a[10],
            arg,
        })
    }
    pub fn wire_len(&self) -> usize {
        Self::HEAD_LEN + self.arg.as_bytes().len()
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        Self::check(self.topic, self.window)?;
        let n = self.wire_len();
        let o = out.get_mut(..n).ok_or_else(|| too_small(n, &[]))?;
        o[0] = dest_byte(self.to)?;
        o[1..5].copy_from_slice(&self.query.to_be_bytes());
        o[5] = self.topic;
        o[6..10].copy_from_slice(&self.next.to_be_bytes());
        o[10] = self.window;
        o[Self::HEAD_LEN..].copy_from_slice(self.arg.as_bytes());
        Ok(n)
    }
}

/// One decoded control-channel message (`Opener::open_control`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ControlMessage<'a> {
    Heartbeat(Heartbeat),
    JoinRequest(JoinRequest),
    JoinReply(JoinReply),
    SyncRequest(SyncRequest),
    SyncChunk(SyncChunk<'a>),
    TableUpdate(TableUpdate<'a>),
    XlateRequest(XlateRequest),
    QueryRequest(QueryRequest),
    /// A chunk of a member's answer to a [`QueryRequest`] (`xfer`: the
    /// query id).
    QueryChunk(SyncChunk<'a>),
    LimitReport(LimitReport<'a>),
}

impl<'a> ControlMessage<'a> {
    pub fn kind(&self) -> MessageKind {
        match self {
            ControlMessage::Heartbeat(_) => MessageKind::Heartbeat,
            ControlMessage::JoinRequest(_) => MessageKind::JoinRequest,
            ControlMessage::JoinReply(_) => MessageKind::JoinReply,
            ControlMessage::SyncRequest(_) => MessageKind::SyncRequest,
            ControlMessage::SyncChunk(_) => MessageKind::SyncChunk,
            ControlMessage::TableUpdate(_) => MessageKind::TableUpdate,
            ControlMessage::XlateRequest(_) => MessageKind::XlateRequest,
            ControlMessage::QueryRequest(_) => MessageKind::QueryRequest,
            ControlMessage::QueryChunk(_) => MessageKind::QueryChunk,
            ControlMessage::LimitReport(_) => MessageKind::LimitReport,
        }
    }

    /// Decode `payload` as a control message of wire kind `kind`; a kind
    /// that is not a control kind is `UnknownKind`.
    pub fn parse(kind: u8, payload: &'a [u8]) -> Result<Self, CclError> {
        Ok(match MessageKind::from_u8(kind) {
            Some(MessageKind::Heartbeat) => ControlMessage::Heartbeat(Heartbeat::parse(payload)?),
            Some(MessageKind::JoinRequest) => ControlMessage::JoinRequest(JoinRequest::parse(payload)?),
            Some(MessageKind::JoinReply) => ControlMessage::JoinReply(JoinReply::parse(payload)?),
            Some(MessageKind::SyncRequest) => ControlMessage::SyncRequest(SyncRequest::parse(payload)?),
            Some(MessageKind::SyncChunk) => ControlMessage::SyncChunk(SyncChunk::parse(payload)?),
            Some(MessageKind::TableUpdate) => ControlMessage::TableUpdate(TableUpdate::parse(payload)?),
            Some(MessageKind::XlateRequest) => ControlMessage::XlateRequest(XlateRequest::parse(payload)?),
            Some(MessageKind::QueryRequest) => ControlMessage::QueryRequest(QueryRequest::parse(payload)?),
            Some(MessageKind::QueryChunk) => ControlMessage::QueryChunk(SyncChunk::parse(payload)?),
            Some(MessageKind::LimitReport) => ControlMessage::LimitReport(LimitReport::parse(payload)?),
            _ => return Err(CclError::UnknownKind(kind)),
        })
    }

    pub fn wire_len(&self) -> usize {
        match self {
            ControlMessage::Heartbeat(m) => m.wire_len(),
            ControlMessage::JoinRequest(_) => JoinRequest::LEN,
            ControlMessage::JoinReply(m) => m.wire_len(),
            ControlMessage::SyncRequest(_) => SyncRequest::LEN,
            ControlMessage::SyncChunk(m) => m.wire_len(),
            ControlMessage::TableUpdate(m) => m.wire_len(),
            ControlMessage::XlateRequest(_) => XlateRequest::LEN,
            ControlMessage::QueryRequest(m) => m.wire_len(),
            ControlMessage::QueryChunk(m) => m.wire_len(),
            ControlMessage::LimitReport(m) => m.wire_len(),
        }
    }

    /// Write the payload (not the header) into `out`.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        match self {
            ControlMessage::Heartbeat(m) => m.emit(out),
            ControlMessage::JoinRequest(m) => m.emit(out),
            ControlMessage::JoinReply(m) => m.emit(out),
            ControlMessage::SyncRequest(m) => m.emit(out),
            ControlMessage::SyncChunk(m) => m.emit(out),
            ControlMessage::TableUpdate(m) => m.emit(out),
            ControlMessage::XlateRequest(m) => m.emit(out),
            ControlMessage::QueryRequest(m) => m.emit(out),
            ControlMessage::QueryChunk(m) => m.emit(out),
            ControlMessage::LimitReport(m) => m.emit(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ccl::heartbeat::{HB_FLAG_QUORUM, HB_STATE_MAX, NO_PLACE};
    use proptest::prelude::*;

    pub(crate) fn sample_heartbeat() -> Heartbeat {
        let mut h = Heartbeat {
            priority: 10,
            state: 3,
            follows: Some(NodeId(1)),
            flags: HB_FLAG_QUORUM,
            place: Placement { site: Some(2), chassis: None },
            ccl_address: Ipv4Addr::new(10, 99, 0, 2),
            seq: 77,
            config_version: 5,
            state_version: 123_456,
            member_bitmap: 0b1000_0000_0000_0011,
            echo_bitmap: 0b10,
            ..Heartbeat::default()
        };
        h.member_place[0] = Placement { site: Some(1), chassis: Some(7) };
        h.member_place[15] = Placement { site: None, chassis: Some(0) };
        h.member_since[0] = Epoch(3);
        h.member_since[15] = Epoch(0x0102_0304_0506_0708);
        h.echoes[1] = 0xdead_beef;
        h
    }

    pub(crate) fn samples(data: &[u8]) -> Vec<ControlMessage<'_>> {
        let mut accepted = JoinReply {
            to: NodeId(4),
            to_incarnation: 1_700_000_001,
            verdict: JoinVerdict::Accepted,
            detail: 0,
            member_bitmap: 0b11010,
            member_place: [Placement::default(); NODE_SLOTS],
            member_since: [Epoch(0); NODE_SLOTS],
        };
        accepted.member_place[3] = Placement { site: Some(9), chassis: Some(254) };
        vec![
            ControlMessage::Heartbeat(sample_heartbeat()),
            ControlMessage::Heartbeat(Heartbeat::default()),
            ControlMessage::JoinRequest(JoinRequest {
                to: NodeId(1),
                priority: 3,
                place: Placement { site: None, chassis: Some(4) },
                ccl_address: Ipv4Addr::new(10, 99, 0, 5),
                config_version: 9,
                config_digest: 0x0123_4567_89ab_cdef,
                workers: 2,
            }),
            ControlMessage::JoinReply(accepted),
            ControlMessage::JoinReply(JoinReply {
                to: NodeId(4),
                to_incarnation: 7,
                verdict: JoinVerdict::ConfigAhead,
                detail: 42,
                member_bitmap: 0,
                member_place: [Placement::default(); NODE_SLOTS],
                member_since: [Epoch(0); NODE_SLOTS],
            }),
            ControlMessage::SyncRequest(SyncRequest {
                to: NodeId(0),
                xfer: 99,
                since: 17,
                config_version: 3,
                next: 5,
                window: 16,
                full: true,
            }),
            ControlMessage::SyncChunk(SyncChunk { to: NodeId(2), to_incarnation: 8, xfer: 99, index: 2, total: 3, data }),
            ControlMessage::TableUpdate(TableUpdate { version: 18, table: 1, key: b"k1", op: TableOp::Upsert(data) }),
            ControlMessage::TableUpdate(TableUpdate { version: 19, table: 1, key: b"", op: TableOp::Delete }),
            ControlMessage::XlateRequest(XlateRequest {
                to: NodeId(0),
                pool: 3,
                real: Ipv4Addr::new(198, 18, 10, 2),
                held: None,
            }),
            ControlMessage::XlateRequest(XlateRequest {
                to: NodeId(15),
                pool: 0,
                real: Ipv4Addr::UNSPECIFIED,
                held: Some(Ipv4Addr::new(192, 0, 2, 9)),
            }),
            ControlMessage::QueryRequest(QueryRequest { to: NodeId(3), query: 0x0a0b_0c0d, topic: 2, next: 7, window: 16, arg: QueryArg::EMPTY }),
            ControlMessage::QueryRequest(QueryRequest {
                to: NodeId(3),
                query: 1,
                topic: 10,
                next: 0,
                window: 16,
                arg: QueryArg::new(b"198.18.10.2 port 8080 for 10").unwrap(),
            }),
            ControlMessage::QueryChunk(SyncChunk { to: NodeId(1), to_incarnation: 5, xfer: 11, index: 0, total: 1, data }),
            ControlMessage::LimitReport(LimitReport::parse(&LIMIT_REPORT_GOLDEN).unwrap()),
            ControlMessage::LimitReport(LimitReport::parse(&[0, 0, 0, 0, 0, 0, 0, 0]).unwrap()),
        ]
    }

    /// Report 7: the global class (10 connections, 3 embryonic) and
    /// client 10.0.0.1 of class 0x12345678 (2, 1).
    const LIMIT_REPORT_GOLDEN: [u8; 48] = [
        0, 0, 0, 7, 1, 1, 0, 0, // seq, classes, clients, flags
        0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 3, // class 0
        0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 1,
    ];

    #[test]
    fn limit_report_golden_and_bounds() {
        let r = LimitReport::parse(&LIMIT_REPORT_GOLDEN).unwrap();
        assert_eq!(r.seq, 7);
        assert_eq!(r.classes().collect::<Vec<_>>(), [(0, 10, 3)]);
        let client = (0x1234_5678, std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 2, 1);
        assert_eq!(r.clients().collect::<Vec<_>>(), [client]);
        assert_eq!(LimitReport::encode(7, &[(0, 10, 3)], &[client]), LIMIT_REPORT_GOLDEN);
        // IPv6 clients travel as themselves.
        let v6 = (1, "2001:db8::7".parse().unwrap(), 4, 0);
        let b = LimitReport::encode(1, &[], &[v6]);
        assert_eq!(LimitReport::parse(&b).unwrap().clients().collect::<Vec<_>>(), [v6]);
        // At most 32 of each are encoded; more, or flags, are refused.
        let many: Vec<ClassCount> = (0..40).map(|i| (i, i, 0)).collect();
        let b = LimitReport::encode(2, &many, &[]);
        let r = LimitReport::parse(&b).unwrap();
        assert_eq!(r.classes().count(), LIMIT_REPORT_CLASSES);
        assert!(r.wire_len() + LimitReport::CLIENT_LEN * LIMIT_REPORT_CLIENTS <= MAX_PAYLOAD_MTU1500);
        for (at, v) in [(4, 33u8), (5, 33), (6, 1), (7, 1)] {
            let mut x = LIMIT_REPORT_GOLDEN;
            x[at] = v;
            assert!(LimitReport::parse(&x).is_err(), "byte {at} = {v}");
        }
        assert!(LimitReport::parse(&LIMIT_REPORT_GOLDEN[..47]).is_err());
    }

    #[test]
    fn heartbeat_bytes() {
        let h = sample_heartbeat();
        let mut b = [0u8; Heartbeat::MAX_LEN];
        let n = h.emit(&mut b).unwrap();
        assert_eq!(n, Heartbeat::MIN_LEN + 10 * 3 + 4);
        assert_eq!(
            &b[..n],
            &[
                10, 3, 1, 1, 2, 0xff, 10, 99, 0, 2, // priority, control, follows 1, quorum, site 2, no chassis, address
                0, 0, 0, 77, // seq
                0, 0, 0, 0, 0, 0, 0, 5, // config version
                0, 0, 0, 0, 0, 1, 0xe2, 0x40, // state version
                0, 0, 0, 0, // no grant
                0x80, 0x03, // members 0, 1, 15, each with placement and admission epoch:
                1, 7, 0, 0, 0, 0, 0, 0, 0, 3, // node 0: site 1, chassis 7, since epoch 3
                0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, // node 1: none, unknown
                0xff, 0, 1, 2, 3, 4, 5, 6, 7, 8, // node 15: chassis 0, since 0x0102030405060708
                0, 2, 0xde, 0xad, 0xbe, 0xef, // echo of node 1
            ][..]
        );
        assert_eq!(Heartbeat::parse(&b[..n]), Ok(h));
        let full = Heartbeat { member_bitmap: 0xffff, echo_bitmap: 0xffff, ..Heartbeat::default() };
        assert_eq!(full.wire_len(), Heartbeat::MAX_LEN);
        assert!(Heartbeat::MAX_LEN < 512, "one AEGIS-128L MAC per heartbeat");
    }

    #[test]
    fn round_trip_every_control_kind() {
        let data: Vec<u8> = (0..100).map(|i| i as u8).collect();
        for m in samples(&data) {
            let mut b = vec![0u8; m.wire_len()];
            assert_eq!(m.emit(&mut b), Ok(b.len()), "{m:?}");
            assert_eq!(ControlMessage::parse(m.kind() as u8, &b), Ok(m));
            for n in 0..b.len() {
                assert!(m.emit(&mut vec![0u8; n]).is_err(), "{n} bytes of room for {m:?}");
                if let Ok(x) = ControlMessage::parse(m.kind() as u8, &b[..n]) {
                    assert_ne!(x, m, "a truncation parses to something else");
                }
            }
            let mut longer = b.clone();
            longer.push(0);
            // Chunks carry their data to the end: one byte more is more data.
            if !matches!(m.kind(), MessageKind::SyncChunk | MessageKind::QueryChunk | MessageKind::QueryRequest) {
                assert!(ControlMessage::parse(m.kind() as u8, &longer).is_err(), "{m:?}");
            }
        }
    }

    #[test]
    fn values_outside_the_layout_are_refused() {
        let mut b = [0u8; Heartbeat::MAX_LEN];
        let n = sample_heartbeat().emit(&mut b).unwrap();
        for (at, v) in [(1, HB_STATE_MAX + 1), (2, 16), (3, 0x04)] {
            let mut x = b;
            x[at] = v;
            assert!(Heartbeat::parse(&x[..n]).is_err(), "byte {at} = {v}");
        }
        assert!(Heartbeat { state: 6, ..Heartbeat::default() }.emit(&mut b).is_err());
        assert!(Heartbeat { follows: Some(NodeId(16)), ..Heartbeat::default() }.emit(&mut b).is_err());
        let bad_site = Heartbeat { place: Placement { site: Some(NO_PLACE), chassis: None }, ..Heartbeat::default() };
        assert!(bad_site.emit(&mut b).is_err());
        // A refusal carries no members; unknown verdicts; chunk limits.
        let r = JoinReply {
            to: NodeId(1),
            to_incarnation: 1,
            verdict: JoinVerdict::IdInUse,
            detail: 0,
            member_bitmap: 1,
            member_place: [Placement::default(); NODE_SLOTS],
            member_since: [Epoch(0); NODE_SLOTS],
        };
        assert!(r.emit(&mut [0u8; 64]).is_err());
        let mut ok = [0u8; 64];
        let n = JoinReply { member_bitmap: 0, ..r }.emit(&mut ok).unwrap();
        ok[5] = 200;
        assert!(JoinReply::parse(&ok[..n]).is_err());
        let big = [0u8; SYNC_CHUNK_DATA + 1];
        let c = SyncChunk { to: NodeId(1), to_incarnation: 1, xfer: 1, index: 0, total: 1, data: &big };
        assert!(c.emit(&mut [0u8; 2000]).is_err());
        assert!(SyncChunk { data: &big[..SYNC_CHUNK_DATA], ..c }.emit(&mut [0u8; 2000]).is_ok());
        assert!(SyncChunk { data: &[], ..c }.emit(&mut [0u8; 2000]).is_err());
        assert!(SyncChunk { index: 1, data: &big[..1], ..c }.emit(&mut [0u8; 2000]).is_err());
        assert_eq!(SYNC_CHUNK_HEAD + SYNC_CHUNK_DATA, MAX_PAYLOAD_MTU1500);
        let q = SyncRequest { to: NodeId(1), xfer: 1, since: 0, config_version: 0, next: 0, window: 0, full: false };
        assert!(q.emit(&mut [0u8; 64]).is_err());
        assert!(SyncRequest { window: SYNC_MAX_WINDOW + 1, ..q }.emit(&mut [0u8; 64]).is_err());
        let long = [0u8; TABLE_KEY_MAX + 1];
        let u = TableUpdate { version: 1, table: 0, key: &long, op: TableOp::Delete };
        assert!(u.emit(&mut [0u8; 2000]).is_err());
        let value = [0u8; TABLE_VALUE_MAX + 1];
        let u = TableUpdate { version: 1, table: 0, key: b"k", op: TableOp::Upsert(&value) };
        assert!(u.emit(&mut [0u8; 2000]).is_err());
        // An xlate request: its bytes; unknown flags, a node above 15.
        let x = XlateRequest {
            to: NodeId(2),
            pool: 0x0102,
            real: Ipv4Addr::new(198, 18, 10, 2),
            held: Some(Ipv4Addr::new(192, 0, 2, 7)),
        };
        let mut xb = [0u8; XlateRequest::LEN];
        assert_eq!(x.emit(&mut xb), Ok(12));
        assert_eq!(xb, [2, 0, 1, 2, 198, 18, 10, 2, 192, 0, 2, 7]);
        // A query request: its bytes; topic and window within their
        // ranges; an argument of at most QUERY_ARG_MAX bytes.
        let q = QueryRequest { to: NodeId(2), query: 0x0102_0304, topic: 3, next: 0x10, window: 16, arg: QueryArg::new(b"ab").unwrap() };
        let mut qb = [0u8; QueryRequest::HEAD_LEN + 2];
        assert_eq!(q.emit(&mut qb), Ok(13));
        assert_eq!(qb, [2, 1, 2, 3, 4, 3, 0, 0, 0, 0x10, 16, b'a', b'b']);
        for (at, v) in [(5, 0), (5, QUERY_TOPIC_MAX + 1), (10, 0), (10, SYNC_MAX_WINDOW + 1), (0, 16)] {
            let mut x = qb;
            x[at] = v;
            assert!(QueryRequest::parse(&x).is_err(), "byte {at} = {v}");
        }
        assert!(QueryRequest { topic: 0, ..q }.emit(&mut qb).is_err());
        assert_eq!(QueryArg::new(&[0; QUERY_ARG_MAX]).map(|a| a.as_bytes().len()), Some(QUERY_ARG_MAX));
        assert_eq!(QueryArg::new(&[0; QUERY_ARG_MAX + 1]), None);
        let mut qlong = vec![0u8; QueryRequest::HEAD_LEN + QUERY_ARG_MAX + 1];
        assert_eq!(q.emit(&mut qlong), Ok(13));
        assert!(QueryRequest::parse(&qlong).is_err(), "an argument one byte too long");
        assert!(QueryRequest::parse(&qlong[..QueryRequest::HEAD_LEN + QUERY_ARG_MAX]).is_ok());
        for (at, v) in [(1, 1), (1, 0x80), (0, 16)] {
            let mut y = xb;
            y[at] = v;
            assert!(XlateRequest::parse(&y).is_err(), "byte {at} = {v}");
        }
        assert!(XlateRequest::parse(&xb[..11]).is_err());
        assert!(XlateRequest { to: NodeId(16), ..x }.emit(&mut [0u8; 12]).is_err());
        assert!(XlateRequest { held: Some(Ipv4Addr::UNSPECIFIED), ..x }.emit(&mut [0u8; 12]).is_err());
        // The longest update fits one datagram.
        let u = TableUpdate {
            version: 1,
            table: 0,
            key: &long[..TABLE_KEY_MAX],
            op: TableOp::Upsert(&value[..TABLE_VALUE_MAX]),
        };
        assert!(u.wire_len() <= MAX_PAYLOAD_MTU1500);
        assert_eq!(ControlMessage::parse(MessageKind::OwnerQuery as u8, &[]), Err(CclError::UnknownKind(2)));
    }

    proptest! {
        #[test]
        fn random_payloads_never_panic_and_reemit_exactly(kind in 0u8..24, data in proptest::collection::vec(any::<u8>(), 0..1500)) {
            if let Ok(m) = ControlMessage::parse(kind, &data) {
                let mut out = vec![0u8; m.wire_len()];
                prop_assert_eq!(m.emit(&mut out), Ok(data.len()));
                prop_assert_eq!(out, data);
            }
        }
    }
}
