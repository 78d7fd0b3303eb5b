//! The Cluster Control Link (CCL) protocol, version 4 ([`VERSION`]):
//! codec, authentication and replay protection (SPEC M9). The design note
//! is `docs/ccl-protocol.md`.
//!
//! A CCL message is a fixed 34-byte header, a kind-specific payload and a
//! 16-byte AEGIS-MAC tag over header and payload (AEGIS-128L below
//! `MAC_X4_FROM` = 512 bytes, AEGIS-128X4 from there, each under its own
//! key derived from the cluster secret; `docs/ccl-protocol.md`,
//! "Authentication"; versions 1 and 2 — a BLAKE3 keyed hash, AEGIS-128L
//! for every length — are dropped as `ccl-bad-version`), carried in
//! UDP/IPv4 to port [`CCL_UDP_PORT`] on the dedicated CCL Ethernet port.
//! [`Sealer`] writes messages (one per sender stream: node × channel),
//! [`Opener`] checks and decodes them and keeps the per-(sender, channel)
//! replay windows ([`ReplayGuard`]).
//!
//! Why this sits in the dataplane crate rather than the control plane:
//! workers are CCL endpoints on the packet path. A forwarder encapsulates
//! frames for the owner ([`ForwardedPacket`], [`RelayToOwner`]), an owner
//! batches [`FlowRecord`]s of a burst into one state update, and the owner
//! opens forwarded packets and processes them as if received on the named
//! interface — all per packet, without locks or allocation. The control
//! lcore uses the very same codec (`controlplane::membership::ControlLink`:
//! heartbeats today; bulk sync and the like later), so there is exactly
//! one encoder and one decoder of the format; the cluster logic and its
//! simulator are written against it.
//!
//! Invariants:
//! - Nothing in `seal`, `open`, the payload parsers and emitters allocates
//!   or panics, whatever the input bytes; errors are `Copy` values. The only
//!   allocation is the [`ReplayGuard`]'s fixed table, made once in
//!   [`Opener::new`].
//! - `open` checks, in order: framing (length, magic, version, cluster,
//!   exact length), sender and channel range, the replay window (read-only),
//!   the MAC (constant-time compare), and only then advances the window and
//!   parses the payload. A message that fails the MAC never moves a window;
//!   an unauthenticated message is never reported as anything but a framing
//!   error or [`CclDrop::BadMac`].
//! - Every message [`Opener::open`] rejects is counted under exactly one
//!   [`CclDrop`] reason; every accepted one under its [`MessageKind`].

mod auth;
mod batch;
mod control;
mod heartbeat;
mod header;
mod key;
mod message;
mod replay;
mod seal;
#[cfg(test)]
mod tests;

pub use auth::{ClusterId, CclKey, TAG_LEN};
pub use control::{
    ControlMessage, JoinReply, JoinRequest, JoinVerdict, LimitReport, QueryArg, QueryRequest, SyncChunk, SyncRequest, TableOp, TableUpdate, XlateRequest,
    ClassCount, ClientCount, EMPTY_LIMIT_REPORT, LIMIT_REPORT_CLASSES, LIMIT_REPORT_CLIENTS,
    QUERY_ARG_MAX, QUERY_TOPIC_MAX, SYNC_CHUNK_DATA, SYNC_CHUNK_HEAD, SYNC_FULL, SYNC_MAX_WINDOW, TABLE_KEY_MAX, TABLE_VALUE_MAX,
};
pub use heartbeat::{Heartbeat, Placement, HB_FLAG_QUORUM, HB_FLAG_RESUMED, HB_STATE_MAX, NODE_SLOTS, NO_NODE, NO_PLACE};
pub use batch::{BatchWriter, FlowBatch, FlowBatchIter, FlowOp, FlowRecord, NatBinding, FLAG_ORPHAN, FLAG_STATE, FLAG_TAKEOVER, FLAG_VERSIONED, OPAQUE_LEN, STATE_LEN};
pub use header::{CclHeader, CclPacket, HEADER_LEN, MAGIC, VERSION};
pub use key::FlowKey;
pub use message::{
    FlowTransfer, ForwardedBatch, ForwardedPacket, Message, MessageKind, OwnerQuery, OwnerReply, RelayToOwner,
    SyncAgain, SyncDone, BATCH_MAX_FRAMES,
};
pub use replay::{ReplayGuard, WINDOW};
pub use seal::{strip_udp, FramePath, Opened, OpenedControl, Opener, Sealer, UdpDatagram, FRAME_OVERHEAD};

use core::fmt;

/// Destination UDP port of every CCL datagram. The source port is
/// `CCL_UDP_PORT + channel`, so receive-side RSS on L4 ports keeps each
/// (sender, channel) stream on one queue — one [`Opener`] sees it whole.
pub const CCL_UDP_PORT: u16 = 31300;

/// Channel of the control lcore; workers use their index `0..MAX_WORKER_CHANNELS`.
pub const CONTROL_CHANNEL: u8 = 255;
/// Workers per node that can each own a CCL sequence space (channels
/// `0..=31`: a clustered node runs at most 32 workers); with the control
/// channel that is 33 replay windows per node.
pub const MAX_WORKER_CHANNELS: u8 = 32;

/// Largest payload that fits an outer IPv4 MTU of 1500 bytes:
/// 1500 − 20 (IPv4) − 8 (UDP) − 34 (header) − 16 (tag) = 1422.
pub const MAX_PAYLOAD_MTU1500: usize = 1500 - 20 - 8 - HEADER_LEN - TAG_LEN;

/// Errors of the encoders and payload parsers (`Copy`, no allocation: the
/// packet path uses them as they are; the control plane can `Display` them).
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CclError {
    #[error("output buffer too small: need {needed} bytes, have {available}")]
    BufferTooSmall { needed: usize, available: usize },
    #[error("input truncated: need {needed} bytes, have {available}")]
    Truncated { needed: usize, available: usize },
    #[error("{extra} trailing bytes after the {what}")]
    TrailingBytes { what: &'static str, extra: usize },
    #[error("invalid {field}: {value}")]
    BadValue { field: &'static str, value: u64 },
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    #[error("payload of {0} bytes exceeds the 65535-byte limit")]
    PayloadTooLarge(usize),
    #[error("five-tuple mixes IPv4 and IPv6 addresses")]
    MixedFamily,
    #[error("node id {0} out of range (0..=15)")]
    BadNodeId(u8),
    #[error("channel {0} out of range (0..=31 or 255)")]
    BadChannel(u8),
    #[error("sequence numbers exhausted for this incarnation")]
    SequenceExhausted,
    #[error("batch full ({0} records)")]
    BatchFull(u16),
    #[error("the cluster key is empty")]
    EmptyKey,
}

macro_rules! ccl_drops {
    ($( $(#[$doc:meta])* $name:ident => $text:literal, )*) => {
        /// Why [`Opener`] dropped a received CCL frame or datagram. One
        /// counter per reason in [`CclCounters`]; the text is the stable
        /// name shown by `show cluster`.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum CclDrop { $( $(#[$doc])* $name, )* }

        impl CclDrop {
            pub const ALL: &'static [CclDrop] = &[ $( CclDrop::$name, )* ];
            pub const COUNT: usize = CclDrop::ALL.len();
            pub const fn as_str(self) -> &'static str {
                match self { $( CclDrop::$name => $text, )* }
            }
            pub const fn index(self) -> usize { self as usize }
        }
    };
}

ccl_drops! {
    /// Shorter than the fixed header and tag (or an outer header cut short).
    Truncated => "ccl-truncated",
    /// First two bytes are not `MAGIC`.
    BadMagic => "ccl-bad-magic",
    /// A version this node does not speak (SPEC M9; see docs/ccl-protocol.md).
    BadVersion => "ccl-bad-version",
    /// Cluster id of another cluster sharing the segment.
    WrongCluster => "ccl-wrong-cluster",
    /// Header payload length disagrees with the datagram length.
    BadLength => "ccl-bad-length",
    /// Sender node id outside 0..=15.
    BadSender => "ccl-bad-sender",
    /// Tag does not verify under the cluster key.
    BadMac => "ccl-bad-mac",
    /// Sequence number already seen, zero, or older than the window.
    Replay => "ccl-replay",
    /// Incarnation lower than the sender's known one (a previous boot).
    StaleIncarnation => "ccl-stale-incarnation",
    /// Authentic, but a message kind this node does not know.
    UnknownKind => "ccl-unknown-kind",
    /// Authentic, but the payload does not parse.
    MalformedPayload => "ccl-malformed-payload",
    /// Channel with no replay window (32..=254).
    TooManyChannels => "ccl-too-many-channels",
    /// Sent by this node (a looped-back broadcast).
    Loopback => "ccl-loopback",
    /// Not IPv4/UDP to `CCL_UDP_PORT` (the driver handles ARP first).
    NotCcl => "ccl-not-ccl",
    /// Outer IPv4/UDP header inconsistent (checksum, lengths, fragment).
    BadOuterHeader => "ccl-bad-outer-header",
}

impl fmt::Display for CclDrop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Counters of one CCL endpoint (a [`Sealer`] counts `tx`, an [`Opener`]
/// counts `rx` and drops); `show cluster` adds them up with [`CclCounters::add`]
/// and prints "CCL counters by message kind".
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CclCounters {
    /// Drops by [`CclDrop::index`].
    pub drops: [u64; CclDrop::COUNT],
    /// Accepted messages by [`MessageKind::index`].
    pub rx: [u64; MessageKind::COUNT],
    /// Sealed messages by [`MessageKind::index`].
    pub tx: [u64; MessageKind::COUNT],
    /// Bytes of accepted datagrams (CCL header + payload + tag).
    pub rx_bytes: u64,
    /// Bytes of sealed datagrams (CCL header + payload + tag).
    pub tx_bytes: u64,
}

impl crate::stats::Stats for CclCounters {
    /// Messages by kind received and sent, drops by reason (every kind
    /// and reason), bytes.
    fn visit(&self, v: &mut dyn crate::stats::Visitor) {
        v.family("rx", "kind", &mut MessageKind::ALL.iter().map(|&k| (k.as_str(), self.rx(k))));
        v.family("tx", "kind", &mut MessageKind::ALL.iter().map(|&k| (k.as_str(), self.tx(k))));
        v.family("drops", "reason", &mut CclDrop::ALL.iter().map(|&r| (r.as_str(), self.drop(r))));
        v.counter("rx_bytes", self.rx_bytes);
        v.counter("tx_bytes", self.tx_bytes);
    }
}

impl CclCounters {
    #[inline]
    pub fn drop(&self, r: CclDrop) -> u64 {
        self.drops[r.index()]
    }
    #[inline]
    pub fn rx(&self, k: MessageKind) -> u64 {
        self.rx[k.index()]
    }
    #[inline]
    pub fn tx(&self, k: MessageKind) -> u64 {
        self.tx[k.index()]
    }
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
    pub fn total_rx(&self) -> u64 {
        self.rx.iter().sum()
    }
    pub fn total_tx(&self) -> u64 {
        self.tx.iter().sum()
    }
    /// Add another endpoint's counters (per-worker totals → node totals).
    pub fn add(&mut self, o: &CclCounters) {
        for (a, b) in self.drops.iter_mut().zip(o.drops.iter()) {
            *a += b;
        }
        for (a, b) in self.rx.iter_mut().zip(o.rx.iter()) {
            *a += b;
        }
        for (a, b) in self.tx.iter_mut().zip(o.tx.iter()) {
            *a += b;
        }
        self.rx_bytes += o.rx_bytes;
        self.tx_bytes += o.tx_bytes;
    }
    /// `(name, rx, tx)` per message kind, in wire order.
    pub fn by_kind(&self) -> impl Iterator<Item = (&'static str, u64, u64)> + '_ {
        MessageKind::ALL.iter().map(|k| (k.as_str(), self.rx(*k), self.tx(*k)))
    }
    /// `(name, count)` per drop reason, in declaration order.
    pub fn by_drop(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        CclDrop::ALL.iter().map(|r| (r.as_str(), self.drop(*r)))
    }
}
