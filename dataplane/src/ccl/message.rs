//! Message kinds and their payloads: small value types that `parse` a
//! payload slice and `emit` into a caller's buffer. Payloads that carry
//! bytes (frames, record batches) borrow them from the datagram.
//!
//! Invariants: every `parse` consumes its input exactly (trailing bytes are
//! an error, so one datagram has one meaning), never panics and never
//! allocates; every `emit` returns `BufferTooSmall` rather than writing
//! past `out`, and `emit` of a parsed value reproduces the input bytes.

use super::batch::{FlowBatch, FlowRecord};
use super::heartbeat::Heartbeat;
use super::key::{arr, exact, family, too_small, truncated, FlowKey};
use super::CclError;
use crate::NodeId;
use core::fmt;

macro_rules! kinds {
    ($( $(#[$doc:meta])* $name:ident = $code:literal => $text:literal, )*) => {
        /// The message kind byte of the header.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum MessageKind { $( $(#[$doc])* $name = $code, )* }

        impl MessageKind {
            pub const ALL: &'static [MessageKind] = &[ $( MessageKind::$name, )* ];
            pub const COUNT: usize = MessageKind::ALL.len();
            pub const fn as_str(self) -> &'static str {
                match self { $( MessageKind::$name => $text, )* }
            }
            pub const fn from_u8(v: u8) -> Option<Self> {
                match v { $( $code => Some(MessageKind::$name), )* _ => None }
            }
            /// Dense index for counter arrays (wire code − 1).
            pub const fn index(self) -> usize { self as usize - 1 }
        }
    };
}

kinds! {
    /// Periodic liveness and membership beacon (SPEC M1).
    Heartbeat = 1 => "heartbeat",
    /// Forwarder/owner → director: who owns this flow? (R5, R8)
    OwnerQuery = 2 => "owner-query",
    /// Director → querier.
    OwnerReply = 3 => "owner-reply",
    /// Owner → director: new connections (R2).
    FlowRegister = 4 => "flow-register",
    /// Owner → director/backups: state changes (R9).
    StateUpdate = 5 => "state-update",
    /// Forwarder → owner: an encapsulated data frame (R5).
    ForwardedPacket = 6 => "forwarded-packet",
    /// Forwarder → director, relayed to the owner (R7).
    RelayToOwner = 7 => "relay-to-owner",
    /// Forwarder → owner: several small data frames in one message (R5;
    /// one MAC and one set of headers for a burst's frames to one owner).
    ForwardedBatch = 8 => "forwarded-batch",
    /// Director → querier: the querier is the new owner of a flow whose
    /// owner left the cluster; here is its state (R11).
    FlowTransfer = 9 => "flow-transfer",
    /// Worker → every other member: my re-registration for this epoch is
    /// queued, all of it before this message (issue 10 sync marker).
    SyncDone = 10 => "sync-done",
    // Control-channel kinds (issue 10): decoded by `ControlMessage`
    // (`Opener::open_control`), never by `Message::parse`.
    /// Joiner → control node: admit me (M6).
    JoinRequest = 11 => "join-request",
    /// Control node → joiner: admitted (member table) or refused (reason).
    JoinReply = 12 => "join-reply",
    /// Requester → holder of the replicated state: send transfer chunks.
    SyncRequest = 13 => "sync-request",
    /// Holder → requester: one chunk of the replicated state (M7, M8).
    SyncChunk = 14 => "sync-chunk",
    /// Control node → members: one replicated-table change (M8).
    TableUpdate = 15 => "table-update",
    /// Data node → control node: a frame of a new multi-session PAT
    /// connection, which the control node owns (N3). Layout as
    /// [`RelayToOwner`]; the control node decides it as if received on
    /// its own port.
    ToControl = 16 => "to-control",
    /// Member → control node: a dynamic-NAT translation, please (N4;
    /// control channel).
    XlateRequest = 17 => "xlate-request",
    /// Member → member: your part of a cluster-wide `show`, please (L5;
    /// control channel).
    QueryRequest = 18 => "query-request",
    /// The answer, in chunks (a `SyncChunk`'s layout; control channel).
    QueryChunk = 19 => "query-chunk",
    /// Member → every member: connection counts for the cluster-wide
    /// limits (control channel; `LimitReport`).
    LimitReport = 20 => "limit-report",
    /// Worker → a member whose `SyncDone` counted more flow records than
    /// arrived: send your re-registration to me again (v10; `SyncAgain`).
    SyncAgain = 21 => "sync-again",
    /// Worker → the member that holds a translated flow's port block
    /// again (it rejoined): take these flows over from me, with their
    /// state and NAT binding (a flow batch; docs/nat.md, "Join and
    /// rejoin"). Data channel, added to v10 as a new kind.
    FlowHandOver = 22 => "flow-hand-over",
}

impl fmt::Display for MessageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Optional key: family byte `0` alone means none.
fn parse_opt_key(b: &[u8]) -> Result<(Option<FlowKey>, usize), CclError> {
    match b.first() {
        None => Err(truncated(1, b)),
        Some(&family::NONE) => Ok((None, 1)),
        Some(_) => FlowKey::parse_prefix(b).map(|(k, n)| (Some(k), n)),
    }
}

fn emit_opt_key(k: &Option<FlowKey>, out: &mut [u8]) -> Result<usize, CclError> {
    match k {
        Some(k) => k.emit(out),
        None => match out.first_mut() {
            Some(b) => {
                *b = family::NONE;
                Ok(1)
            }
            None => Err(too_small(1, out)),
        },
    }
}

const ELECT_IF_ABSENT: u8 = 0x01;
const LOCAL_LOOKUP: u8 = 0x02;

/// Who owns `flow`? Layout: query id (4), flags (1: bit 0 = elect the
/// querier if the director knows no flow, SPEC R8; bit 1 = a lookup at the
/// querier's local director, R12: answered at once from a record naming a
/// live owner, else "none" — never held, never an election or a grant —
/// so the querier asks the global director next; the two bits never
/// together; other bits zero), flow key (14/38).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OwnerQuery {
    pub query_id: u32,
    pub flow: FlowKey,
    pub elect_if_absent: bool,
    /// A local-director lookup (R12).
    pub local: bool,
}

impl OwnerQuery {
    pub fn parse(b: &[u8]) -> Result<Self, CclError> {
        let id: [u8; 4] = arr(b, 0)?;
        let [flags] = arr::<1>(b, 4)?;
        if flags & !(ELECT_IF_ABSENT | LOCAL_LOOKUP) != 0 || flags == ELECT_IF_ABSENT | LOCAL_LOOKUP {
            return Err(CclError::BadValue { field: "owner-query flags", value: u64::from(flags) });
        }
        let flow = FlowKey::parse(&b[5..])?;
        Ok(OwnerQuery {
            query_id: u32::from_be_bytes(id),
            flow,
            elect_if_absent: flags & ELECT_IF_ABSENT != 0,
            local: flags & LOCAL_LOOKUP != 0,
        })
    }
    pub fn wire_len(&self) -> usize {
        5 + self.flow.wire_len()
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let n = self.wire_len();
        if out.len() < n {
            return Err(too_small(n, out));
        }
        out[..4].copy_from_slice(&self.query_id.to_be_bytes());
        if self.elect_if_absent && self.local {
            return Err(CclError::BadValue { field: "owner-query flags", value: u64::from(ELECT_IF_ABSENT | LOCAL_LOOKUP) });
        }
        out[4] = if self.elect_if_absent { ELECT_IF_ABSENT } else { 0 } | if self.local { LOCAL_LOOKUP } else { 0 };
        self.flow.emit(&mut out[5..])?;
        Ok(n)
    }
}

const NO_OWNER: u8 = 0xff;

/// The director's answer. Layout: query id (4), owner (1: node id 0..=15,
/// or 0xff = unknown), flow key (14/38).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OwnerReply {
    pub query_id: u32,
    pub flow: FlowKey,
    pub owner: Option<NodeId>,
}

impl OwnerReply {
    pub fn parse(b: &[u8]) -> Result<Self, CclError> {
        let id: [u8; 4] = arr(b, 0)?;
        let [o] = arr::<1>(b, 4)?;
        let owner = match o {
            NO_OWNER => None,
            n if usize::from(n) < NodeId::MAX_NODES => Some(NodeId(n)),
            n => return Err(CclError::BadNodeId(n)),
        };
        let flow = FlowKey::parse(&b[5..])?;
        Ok(OwnerReply { query_id: u32::from_be_bytes(id), flow, owner })
    }
    pub fn wire_len(&self) -> usize {
        5 + self.flow.wire_len()
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let n = self.wire_len();
        if out.len() < n {
            return Err(too_small(n, out));
        }
        out[..4].copy_from_slice(&self.query_id.to_be_bytes());
        out[4] = match self.owner {
            None => NO_OWNER,
            Some(n) if n.index() < NodeId::MAX_NODES => n.0,
            Some(n) => return Err(CclError::BadNodeId(n.0)),
        };
        self.flow.emit(&mut out[5..])?;
        Ok(n)
    }
}

/// Shortest frame a forwarded/relayed payload may carry (an Ethernet header).
pub const MIN_FRAME_LEN: usize = 14;

/// A data frame tunnelled from a forwarder (or a relaying director) to the
/// owner, who processes it as if received on `ingress_iface`. Layout:
/// ingress interface (1), optional flow key (family 0 = none, else 14/38),
/// then the original Ethernet frame to the end of the payload.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ForwardedPacket<'a> {
    pub ingress_iface: u8,
    /// The forwarder's five-tuple, when it has one the owner cannot read
    /// from the frame itself (a non-first fragment, SPEC R10).
    pub flow_hint: Option<FlowKey>,
    pub frame: &'a [u8],
}

impl<'a> ForwardedPacket<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Self, CclError> {
        let [iface] = arr::<1>(b, 0)?;
        let (flow_hint, n) = parse_opt_key(&b[1..])?;
        let frame = &b[1 + n..];
        if frame.len() < MIN_FRAME_LEN {
            return Err(truncated(1 + n + MIN_FRAME_LEN, b));
        }
        Ok(ForwardedPacket { ingress_iface: iface, flow_hint, frame })
    }
    pub fn wire_len(&self) -> usize {
        Self::head_len(self.flow_hint.as_ref()) + self.frame.len()
    }
    /// Bytes in front of the frame: the interface and the optional key.
    pub fn head_len(flow_hint: Option<&FlowKey>) -> usize {
        2 + flow_hint.map_or(0, |k| k.wire_len() - 1)
    }
    /// Write the bytes in front of the frame (`head_len` of them) into
    /// `out`; for sealing a frame that is already in place
    /// (`Sealer::seal_frame_in_place`).
    pub fn emit_head(ingress_iface: u8, flow_hint: Option<&FlowKey>, out: &mut [u8]) -> Result<usize, CclError> {
        let n = Self::head_len(flow_hint);
        if out.len() < n {
            return Err(too_small(n, out));
        }
        out[0] = ingress_iface;
        let k = emit_opt_key(&flow_hint.copied(), &mut out[1..])?;
        Ok(1 + k)
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let n = self.wire_len();
        if out.len() < n {
            return Err(too_small(n, out));
        }
        if self.frame.len() < MIN_FRAME_LEN {
            return Err(CclError::BadValue { field: "frame length", value: self.frame.len() as u64 });
        }
        let k = Self::emit_head(self.ingress_iface, self.flow_hint.as_ref(), out)?;
        out[k..n].copy_from_slice(self.frame);
        Ok(n)
    }
}

/// A short-lived flow's frame sent to the director, which relays it to the
/// owner (SPEC R7). Layout: ingress interface (1), then the frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RelayToOwner<'a> {
    pub ingress_iface: u8,
    pub frame: &'a [u8],
}

impl<'a> RelayToOwner<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Self, CclError> {
        let [iface] = arr::<1>(b, 0)?;
        let frame = &b[1..];
        if frame.len() < MIN_FRAME_LEN {
            return Err(truncated(1 + MIN_FRAME_LEN, b));
        }
        Ok(RelayToOwner { ingress_iface: iface, frame })
    }
    pub fn wire_len(&self) -> usize {
        Self::HEAD_LEN + self.frame.len()
    }
    /// Bytes in front of the frame: the interface.
    pub const HEAD_LEN: usize = 1;
    /// Write the bytes in front of the frame (`HEAD_LEN`) into `out`.
    pub fn emit_head(ingress_iface: u8, out: &mut [u8]) -> Result<usize, CclError> {
        let b = out.first_mut().ok_or_else(|| too_small(Self::HEAD_LEN, &[]))?;
        *b = ingress_iface;
        Ok(Self::HEAD_LEN)
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let n = self.wire_len();
        if out.len() < n {
            return Err(too_small(n, out));
        }
        if self.frame.len() < MIN_FRAME_LEN {
            return Err(CclError::BadValue { field: "frame length", value: self.frame.len() as u64 });
        }
        let k = Self::emit_head(self.ingress_iface, out)?;
        out[k..n].copy_from_slice(self.frame);
        Ok(n)
    }
}

/// Most frames in one `ForwardedBatch`.
pub const BATCH_MAX_FRAMES: usize = 16;

/// Several data frames from a forwarder to the owner, each processed as if
/// received on its ingress interface, in order. Layout: count (1, 1 to
/// `BATCH_MAX_FRAMES`), then per frame: ingress interface (1), frame length
/// (2), the original Ethernet frame (≥ 14 bytes).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ForwardedBatch<'a> {
    count: u8,
    /// The entries, validated by `parse`.
    entries: &'a [u8],
}

impl<'a> ForwardedBatch<'a> {
    /// Bytes in front of each frame: interface and length.
    pub const ENTRY_HEAD: usize = 3;

    pub fn parse(b: &'a [u8]) -> Result<Self, CclError> {
        let [count] = arr::<1>(b, 0)?;
        if count == 0 || usize::from(count) > BATCH_MAX_FRAMES {
            return Err(CclError::BadValue { field: "batch count", value: u64::from(count) });
        }
        let mut at = 1;
        for _ in 0..count {
            let [_, hi, lo] = arr::<3>(b, at)?;
            let len = usize::from(u16::from_be_bytes([hi, lo]));
            if len < MIN_FRAME_LEN {
                return Err(CclError::BadValue { field: "frame length", value: len as u64 });
            }
            at += Self::ENTRY_HEAD + len;
            if b.len() < at {
                return Err(truncated(at, b));
            }
        }
        exact("forwarded batch", b, at)?;
        Ok(ForwardedBatch { count, entries: &b[1..] })
    }
    /// Frames in the batch.
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// `(ingress interface, frame)`, in order.
    pub fn frames(&self) -> impl Iterator<Item = (u8, &'a [u8])> + 'a {
        let mut rest = self.entries;
        (0..self.count).map_while(move |_| {
            let (&iface, tail) = rest.split_first()?;
            let len = usize::from(u16::from_be_bytes([*tail.first()?, *tail.get(1)?]));
            let frame = tail.get(2..2 + len)?;
            rest = tail.get(2 + len..)?;
            Some((iface, frame))
        })
    }
    pub fn wire_len(&self) -> usize {
        1 + self.entries.len()
    }
    /// Append one entry to a batch being built in `out` (payload bytes,
    /// starting with the count byte, `used` of them in use; `used == 0`
    /// starts the batch). Returns the new `used`.
    pub fn push(out: &mut [u8], used: usize, ingress_iface: u8, frame: &[u8]) -> Result<usize, CclError> {
        let used = used.max(1);
        let count = out.first().copied().filter(|_| used > 1).unwrap_or(0);
        if usize::from(count) >= BATCH_MAX_FRAMES {
            return Err(CclError::BadValue { field: "batch count", value: u64::from(count) + 1 });
        }
        let len = u16::try_from(frame.len())
            .ok()
            .filter(|_| frame.len() >= MIN_FRAME_LEN)
            .ok_or(CclError::BadValue { field: "frame length", value: frame.len() as u64 })?;
        let end = used + Self::ENTRY_HEAD + frame.len();
        let dst = out.get_mut(used..end).ok_or_else(|| too_small(end, &[]))?;
        dst[0] = ingress_iface;
        dst[1..3].copy_from_slice(&len.to_be_bytes());
        dst[3..].copy_from_slice(frame);
        out[0] = count + 1;
        Ok(end)
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let n = self.wire_len();
        let dst = out.get_mut(..n).ok_or_else(|| too_small(n, &[]))?;
        dst[0] = self.count;
        dst[1..].copy_from_slice(self.entries);
        Ok(n)
    }
}

/// The director's answer to an owner query for a flow whose owner left:
/// the querier is elected owner and gets the flow's record (its `owner` the
/// querier, `FLAG_STATE` with the last state the director holds, the
/// sequence delta). Layout: query id (4), one flow record (74/98 bytes,
/// `FlowRecord`). The record stays in the datagram's bytes (validated by
/// `parse`), so a decoded `Message` is no larger than before.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlowTransfer<'a> {
    pub query_id: u32,
    record: &'a [u8],
}

impl<'a> FlowTransfer<'a> {
    /// A transfer of the record whose wire form is `record` (one whole
    /// record, as `FlowRecord::emit` writes it).
    pub fn new(query_id: u32, record: &'a [u8]) -> Result<Self, CclError> {
        FlowRecord::parse(record)?;
        Ok(FlowTransfer { query_id, record })
    }
    pub fn parse(b: &'a [u8]) -> Result<Self, CclError> {
        let id: [u8; 4] = arr(b, 0)?;
        Self::new(u32::from_be_bytes(id), &b[4..])
    }
    /// The record (validated by `new` / `parse`).
    pub fn record(&self) -> Result<FlowRecord, CclError> {
        FlowRecord::parse(self.record)
    }
    pub fn wire_len(&self) -> usize {
        4 + self.record.len()
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let n = self.wire_len();
        if out.len() < n {
            return Err(too_small(n, out));
        }
        out[..4].copy_from_slice(&self.query_id.to_be_bytes());
        out[4..n].copy_from_slice(self.record);
        Ok(n)
    }
}

/// A worker's sync marker: every flow record of its re-registration scan
/// for `epoch` was queued before this message, on the same channel, and
/// `records` flow records (registrations and state updates, in messages
/// stamped with `epoch`) went to the receiver on this channel before it;
/// `round` counts the re-sends the receiver asked for (`SyncAgain`).
/// Layout: epoch (8), records (4), round (4).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SyncDone {
    pub epoch: crate::Epoch,
    pub records: u32,
    pub round: u32,
}

impl SyncDone {
    pub const LEN: usize = 16;
    pub fn parse(b: &[u8]) -> Result<Self, CclError> {
        let e: [u8; 8] = arr(b, 0)?;
        let r: [u8; 4] = arr(b, 8)?;
        let n: [u8; 4] = arr(b, 12)?;
        exact("sync-done", b, Self::LEN)?;
        Ok(SyncDone { epoch: crate::Epoch(u64::from_be_bytes(e)), records: u32::from_be_bytes(r), round: u32::from_be_bytes(n) })
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let o = out.get_mut(..Self::LEN).ok_or_else(|| too_small(Self::LEN, &[]))?;
        o[..8].copy_from_slice(&self.epoch.0.to_be_bytes());
        o[8..12].copy_from_slice(&self.records.to_be_bytes());
        o[12..].copy_from_slice(&self.round.to_be_bytes());
        Ok(Self::LEN)
    }
}

/// A receiver's request after a short `SyncDone` (fewer flow records
/// arrived than it counted): register again every flow this node directs
/// or backs up, as round `round` of `epoch`'s re-registration.
/// Layout: epoch (8), round (4).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SyncAgain {
    pub epoch: crate::Epoch,
    pub round: u32,
}

impl SyncAgain {
    pub const LEN: usize = 12;
    pub fn parse(b: &[u8]) -> Result<Self, CclError> {
        let e: [u8; 8] = arr(b, 0)?;
        let n: [u8; 4] = arr(b, 8)?;
        exact("sync-again", b, Self::LEN)?;
        Ok(SyncAgain { epoch: crate::Epoch(u64::from_be_bytes(e)), round: u32::from_be_bytes(n) })
    }
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        let o = out.get_mut(..Self::LEN).ok_or_else(|| too_small(Self::LEN, &[]))?;
        o[..8].copy_from_slice(&self.epoch.0.to_be_bytes());
        o[8..].copy_from_slice(&self.round.to_be_bytes());
        Ok(Self::LEN)
    }
}

/// One decoded message; byte-carrying variants borrow from the datagram.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Message<'a> {
    Heartbeat(Heartbeat),
    OwnerQuery(OwnerQuery),
    OwnerReply(OwnerReply),
    FlowRegister(FlowBatch<'a>),
    StateUpdate(FlowBatch<'a>),
    ForwardedPacket(ForwardedPacket<'a>),
    RelayToOwner(RelayToOwner<'a>),
    /// Same layout as `RelayToOwner`.
    ToControl(RelayToOwner<'a>),
    ForwardedBatch(ForwardedBatch<'a>),
    FlowTransfer(FlowTransfer<'a>),
    SyncDone(SyncDone),
    SyncAgain(SyncAgain),
    FlowHandOver(FlowBatch<'a>),
}

impl<'a> Message<'a> {
    pub fn kind(&self) -> MessageKind {
        match self {
            Message::Heartbeat(_) => MessageKind::Heartbeat,
            Message::OwnerQuery(_) => MessageKind::OwnerQuery,
            Message::OwnerReply(_) => MessageKind::OwnerReply,
            Message::FlowRegister(_) => MessageKind::FlowRegister,
            Message::StateUpdate(_) => MessageKind::StateUpdate,
            Message::ForwardedPacket(_) => MessageKind::ForwardedPacket,
            Message::RelayToOwner(_) => MessageKind::RelayToOwner,
            Message::ToControl(_) => MessageKind::ToControl,
            Message::ForwardedBatch(_) => MessageKind::ForwardedBatch,
            Message::FlowTransfer(_) => MessageKind::FlowTransfer,
            Message::SyncDone(_) => MessageKind::SyncDone,
            Message::SyncAgain(_) => MessageKind::SyncAgain,
            Message::FlowHandOver(_) => MessageKind::FlowHandOver,
        }
    }

    /// Decode `payload` as a message of wire kind `kind`.
    pub fn parse(kind: u8, payload: &'a [u8]) -> Result<Self, CclError> {
        let k = MessageKind::from_u8(kind).ok_or(CclError::UnknownKind(kind))?;
        Ok(match k {
            MessageKind::Heartbeat => Message::Heartbeat(Heartbeat::parse(payload)?),
            MessageKind::OwnerQuery => Message::OwnerQuery(OwnerQuery::parse(payload)?),
            MessageKind::OwnerReply => Message::OwnerReply(OwnerReply::parse(payload)?),
            MessageKind::FlowRegister => Message::FlowRegister(FlowBatch::parse(payload)?),
            MessageKind::StateUpdate => Message::StateUpdate(FlowBatch::parse(payload)?),
            MessageKind::ForwardedPacket => Message::ForwardedPacket(ForwardedPacket::parse(payload)?),
            MessageKind::RelayToOwner => Message::RelayToOwner(RelayToOwner::parse(payload)?),
            MessageKind::ToControl => Message::ToControl(RelayToOwner::parse(payload)?),
            MessageKind::ForwardedBatch => Message::ForwardedBatch(ForwardedBatch::parse(payload)?),
            MessageKind::FlowTransfer => Message::FlowTransfer(FlowTransfer::parse(payload)?),
            MessageKind::SyncDone => Message::SyncDone(SyncDone::parse(payload)?),
            MessageKind::SyncAgain => Message::SyncAgain(SyncAgain::parse(payload)?),
            MessageKind::FlowHandOver => Message::FlowHandOver(FlowBatch::parse(payload)?),
            // Control-channel kinds are `ControlMessage`s: not a kind the
            // data-channel decoder (the workers') handles.
            MessageKind::JoinRequest
            | MessageKind::JoinReply
            | MessageKind::SyncRequest
            | MessageKind::SyncChunk
            | MessageKind::TableUpdate
            | MessageKind::XlateRequest
            | MessageKind::QueryRequest
            | MessageKind::QueryChunk
            | MessageKind::LimitReport => return Err(CclError::UnknownKind(kind)),
        })
    }

    /// Payload length `emit` will write.
    pub fn wire_len(&self) -> usize {
        match self {
            Message::Heartbeat(m) => m.wire_len(),
            Message::OwnerQuery(m) => m.wire_len(),
            Message::OwnerReply(m) => m.wire_len(),
            Message::FlowRegister(b) | Message::StateUpdate(b) | Message::FlowHandOver(b) => b.wire_len(),
            Message::ForwardedPacket(m) => m.wire_len(),
            Message::RelayToOwner(m) | Message::ToControl(m) => m.wire_len(),
            Message::ForwardedBatch(m) => m.wire_len(),
            Message::FlowTransfer(m) => m.wire_len(),
            Message::SyncDone(_) => SyncDone::LEN,
            Message::SyncAgain(_) => SyncAgain::LEN,
        }
    }

    /// Write the payload (not the header) into `out`.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, CclError> {
        match self {
            Message::Heartbeat(m) => m.emit(out),
            Message::OwnerQuery(m) => m.emit(out),
            Message::OwnerReply(m) => m.emit(out),
            Message::FlowRegister(b) | Message::StateUpdate(b) | Message::FlowHandOver(b) => b.emit(out),
            Message::ForwardedPacket(m) => m.emit(out),
            Message::RelayToOwner(m) | Message::ToControl(m) => m.emit(out),
            Message::ForwardedBatch(m) => m.emit(out),
            Message::FlowTransfer(m) => m.emit(out),
            Message::SyncDone(m) => m.emit(out),
            Message::SyncAgain(m) => m.emit(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FiveTuple;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4() -> FlowKey {
        FlowKey::new(FiveTuple {
            src: Ipv4Addr::new(198, 18, 1, 10).into(),
            dst: Ipv4Addr::new(198, 18, 2, 20).into(),
            proto: 17,
            src_port: 53000,
            dst_port: 53,
        })
        .unwrap()
    }

    #[test]
    fn flow_key_v4_bytes() {
        let mut b = [0u8; 14];
        assert_eq!(v4().emit(&mut b), Ok(14));
        assert_eq!(b, [4, 198, 18, 1, 10, 198, 18, 2, 20, 0xcf, 0x08, 0, 53, 17]);
        assert_eq!(FlowKey::parse(&b), Ok(v4()));
        assert!(matches!(FlowKey::parse(&b[..13]), Err(CclError::Truncated { .. })));
        let mut c = b;
        c[0] = 5;
        assert!(matches!(FlowKey::parse(&c), Err(CclError::BadValue { .. })));
        let t: FiveTuple = v4().into();
        assert_eq!(FlowKey::try_from(t), Ok(v4()));
    }

    #[test]
    fn mixed_family_refused() {
        let t = FiveTuple {
            src: Ipv4Addr::LOCALHOST.into(),
            dst: Ipv6Addr::LOCALHOST.into(),
            proto: 6,
            src_port: 1,
            dst_port: 2,
        };
        assert_eq!(FlowKey::new(t), Err(CclError::MixedFamily));
    }

    #[test]
    fn kinds_dense() {
        for (i, k) in MessageKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
            assert_eq!(MessageKind::from_u8(*k as u8), Some(*k));
        }
        assert_eq!(MessageKind::from_u8(0), None);
        assert_eq!(MessageKind::from_u8(MessageKind::COUNT as u8 + 1), None);
    }

    #[test]
    fn forwarded_batch_round_trip_and_limits() {
        let f1 = [1u8; 14];
        let f2: Vec<u8> = (0..60).collect();
        let mut buf = [0u8; 200];
        let used = ForwardedBatch::push(&mut buf, 0, 3, &f1).unwrap();
        let used = ForwardedBatch::push(&mut buf, used, 7, &f2).unwrap();
        assert_eq!(used, 1 + 3 + 14 + 3 + 60);
        let b = ForwardedBatch::parse(&buf[..used]).unwrap();
        assert_eq!(b.len(), 2);
        let got: Vec<(u8, &[u8])> = b.frames().collect();
        assert_eq!(got, vec![(3u8, &f1[..]), (7u8, &f2[..])]);
        let mut out = [0u8; 200];
        assert_eq!(Message::ForwardedBatch(b).emit(&mut out), Ok(used));
        assert_eq!(out[..used], buf[..used]);
        // Trailing bytes, a short frame, a zero or too large count, a cut.
        assert!(ForwardedBatch::parse(&buf[..used + 1]).is_err());
        assert!(ForwardedBatch::parse(&buf[..used - 1]).is_err());
        let mut short = buf;
        short[2..4].copy_from_slice(&13u16.to_be_bytes());
        assert!(ForwardedBatch::parse(&short[..used - 1]).is_err());
        for c in [0u8, BATCH_MAX_FRAMES as u8 + 1] {
            let mut bad = buf;
            bad[0] = c;
            assert!(ForwardedBatch::parse(&bad[..used]).is_err());
        }
        // Full: the seventeenth frame is refused, the batch unchanged.
        let mut big = [0u8; 1 + BATCH_MAX_FRAMES * 17 + 17];
        let mut used = 0;
        for _ in 0..BATCH_MAX_FRAMES {
            used = ForwardedBatch::push(&mut big, used, 0, &f1).unwrap();
        }
        assert!(ForwardedBatch::push(&mut big, used, 0, &f1).is_err());
        assert_eq!(ForwardedBatch::parse(&big[..used]).unwrap().frames().count(), BATCH_MAX_FRAMES);
        // No room in `out`.
        assert!(ForwardedBatch::push(&mut [0u8; 10], 0, 0, &f1).is_err());
    }

    #[test]
    fn small_buffers_refused() {
        let q = OwnerQuery { query_id: 1, flow: v4(), elect_if_absent: true, local: false };
        for n in 0..q.wire_len() {
            let mut b = vec![0u8; n];
            assert!(matches!(q.emit(&mut b), Err(CclError::BufferTooSmall { .. })));
        }
        let h = Heartbeat { priority: 1, state: 2, member_bitmap: 3, ..Heartbeat::default() };
        assert!(Message::Heartbeat(h).emit(&mut [0u8; 3]).is_err());
        assert!(h.emit(&mut vec![0u8; h.wire_len() - 1]).is_err());
    }
}
