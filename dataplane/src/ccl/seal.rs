//! Sealing (header, payload, tag; optionally Ethernet/IPv4/UDP around it)
//! and opening (framing checks, replay window, MAC, payload decode).
//!
//! Invariants: `seal*` check every size before writing, consume a sequence
//! number only when they return `Ok`, and never allocate. `open*` never
//! allocate or panic, advance a replay window only after the MAC verified,
//! and count every outcome exactly once (a drop reason or an rx kind).

use super::auth::{CclKey, ClusterId, TAG_LEN};
use super::header::{CclHeader, CclPacket, HEADER_LEN};
use super::key::too_small;
use super::control::ControlMessage;
use super::message::{ForwardedBatch, Message, MessageKind, MIN_FRAME_LEN};
use super::replay::ReplayGuard;
use super::{CclCounters, CclDrop, CclError, CCL_UDP_PORT, CONTROL_CHANNEL, MAX_WORKER_CHANNELS};
use crate::ip_proto::UDP as IP_PROTO_UDP;
use crate::wire::{ethernet, ipv4, udp, EthernetFrame, Ipv4Packet, UdpPacket};
use crate::{Epoch, NodeId};
use std::net::Ipv4Addr;

/// Outer Ethernet (14) + IPv4 (20) + UDP (8) + CCL header (34) + tag (16)
/// = 92 bytes around every CCL payload sent by [`Sealer::seal_frame`].
pub const FRAME_OVERHEAD: usize = OUTER_LEN + HEADER_LEN + TAG_LEN;
const OUTER_LEN: usize = ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN + udp::HEADER_LEN;
/// DSCP CS6 (network control, RFC 4594 §3.1) in the IPv4 TOS byte.
const TOS_CS6: u8 = 48 << 2;

/// Addresses of the outer headers of one CCL frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FramePath {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
}

/// Writes one sender stream (node, channel, incarnation): every message
/// gets the next sequence number, starting at 1.
#[derive(Clone, Debug)]
pub struct Sealer {
    key: CclKey,
    sender: NodeId,
    channel: u8,
    incarnation: u32,
    next_seq: u64,
    counters: CclCounters,
}

impl Sealer {
    /// `channel` is the worker index (0..=31) or [`CONTROL_CHANNEL`];
    /// `incarnation` must grow across restarts of this node (boot time in
    /// seconds, kept strictly above the last one used).
    pub fn new(key: &CclKey, sender: NodeId, channel: u8, incarnation: u32) -> Result<Self, CclError> {
        if sender.index() >= NodeId::MAX_NODES {
            return Err(CclError::BadNodeId(sender.0));
        }
        if channel >= MAX_WORKER_CHANNELS && channel != CONTROL_CHANNEL {
            return Err(CclError::BadChannel(channel));
        }
        Ok(Sealer { key: key.clone(), sender, channel, incarnation, next_seq: 1, counters: CclCounters::default() })
    }

    /// The same sender on `channel`, a stream of its own from sequence 1
    /// (a worker's sealer, made before the worker knew its index).
    pub fn on_channel(&self, channel: u8) -> Result<Self, CclError> {
        Sealer::new(&self.key, self.sender, channel, self.incarnation)
    }

    #[inline]
    pub fn sender(&self) -> NodeId {
        self.sender
    }
    #[inline]
    pub fn channel(&self) -> u8 {
        self.channel
    }
    #[inline]
    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }
    #[inline]
    pub fn cluster_id(&self) -> ClusterId {
        self.key.cluster_id()
    }
    /// Sequence number the next sealed message will carry.
    #[inline]
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
    /// Counts `tx` per kind and `tx_bytes`.
    #[inline]
    pub fn counters(&self) -> &CclCounters {
        &self.counters
    }

    /// Bytes `seal` writes for `msg` (header + payload + tag).
    #[inline]
    pub fn sealed_len(msg: &Message<'_>) -> usize {
        HEADER_LEN + msg.wire_len() + TAG_LEN
    }

    /// Bytes `seal_control` writes for `msg` (header + payload + tag).
    #[inline]
    pub fn sealed_len_control(msg: &ControlMessage<'_>) -> usize {
        HEADER_LEN + msg.wire_len() + TAG_LEN
    }

    /// Write header, payload and tag of `msg` into `out`; returns the
    /// length. The UDP payload of a CCL datagram.
    pub fn seal(&mut self, epoch: Epoch, msg: &Message<'_>, out: &mut [u8]) -> Result<usize, CclError> {
        self.seal_with(epoch, msg.kind(), msg.wire_len(), |p| msg.emit(p), out)
    }

    /// `seal` with the payload written by `emit` into its `payload_len`
    /// bytes (it returns how many it accounts for, which must be all).
    fn seal_with(
        &mut self,
        epoch: Epoch,
        kind: MessageKind,
        pl: usize,
        emit: impl FnOnce(&mut [u8]) -> Result<usize, CclError>,
        out: &mut [u8],
    ) -> Result<usize, CclError> {
        let payload_len = u16::try_from(pl).map_err(|_| CclError::PayloadTooLarge(pl))?;
        let total = HEADER_LEN + pl + TAG_LEN;
        if out.len() < total {
            return Err(too_small(total, out));
        }
        if self.next_seq == u64::MAX {
            return Err(CclError::SequenceExhausted);
        }
        let hdr = CclHeader {
            kind: kind as u8,
            flags: 0,
            sender: self.sender,
            channel: self.channel,
            cluster_id: self.key.cluster_id().0,
            incarnation: self.incarnation,
            seq: self.next_seq,
            epoch,
            payload_len,
        };
        hdr.emit(out).ok_or_else(|| too_small(HEADER_LEN, &[]))?;
        let n = emit(&mut out[HEADER_LEN..HEADER_LEN + pl])?;
        if n != pl {
            return Err(CclError::BadValue { field: "payload length", value: n as u64 });
        }
        let tag = self.key.tag(&out[..HEADER_LEN + pl]);
        out[HEADER_LEN + pl..total].copy_from_slice(&tag);
        self.next_seq += 1;
        self.counters.tx[kind.index()] += 1;
        self.counters.tx_bytes += total as u64;
        Ok(total)
    }

    /// `seal` inside Ethernet + IPv4 + UDP headers: UDP source port
    /// `CCL_UDP_PORT + channel`, destination `CCL_UDP_PORT`, UDP checksum 0
    /// (allowed for IPv4, RFC 768; the MAC protects the contents far better),
    /// IPv4 DF set, identification 0 (RFC 6864 §4.1: atomic datagram), TTL
    /// 64, DSCP CS6, header checksum filled. Returns the frame length.
    pub fn seal_frame(
        &mut self,
        path: &FramePath,
        epoch: Epoch,
        msg: &Message<'_>,
        out: &mut [u8],
    ) -> Result<usize, CclError> {
        self.seal_frame_with(path, epoch, msg.kind(), msg.wire_len(), |p| msg.emit(p), out)
    }

    /// `seal` of a control-channel message (the control lcore's).
    pub fn seal_control(&mut self, epoch: Epoch, msg: &ControlMessage<'_>, out: &mut [u8]) -> Result<usize, CclError> {
        self.seal_with(epoch, msg.kind(), msg.wire_len(), |p| msg.emit(p), out)
    }

    /// `seal_frame` of a control-channel message.
    pub fn seal_control_frame(
        &mut self,
        path: &FramePath,
        epoch: Epoch,
        msg: &ControlMessage<'_>,
        out: &mut [u8],
    ) -> Result<usize, CclError> {
        self.seal_frame_with(path, epoch, msg.kind(), msg.wire_len(), |p| msg.emit(p), out)
    }

    /// `seal_frame` of a `ForwardedPacket`, `RelayToOwner` or `ToControl` whose frame is
    /// already in `out`, at the end of the payload: `out` is
    /// `FRAME_OVERHEAD + head_len + frame_len` bytes with the frame at
    /// `FRAME_OVERHEAD - TAG_LEN + head_len`; `head` writes the `head_len`
    /// bytes in front of it (`ForwardedPacket::emit_head`,
    /// `RelayToOwner::emit_head`). The result is byte for byte what
    /// `seal_frame` makes of the same message, without copying the frame.
    #[allow(clippy::too_many_arguments)]
    pub fn seal_frame_in_place(
        &mut self,
        path: &FramePath,
        epoch: Epoch,
        kind: MessageKind,
        head_len: usize,
        frame_len: usize,
        head: impl FnOnce(&mut [u8]) -> Result<usize, CclError>,
        out: &mut [u8],
    ) -> Result<usize, CclError> {
        if !matches!(kind, MessageKind::ForwardedPacket | MessageKind::RelayToOwner | MessageKind::ToControl) {
            return Err(CclError::BadValue { field: "in-place kind", value: kind as u64 });
        }
        if frame_len < MIN_FRAME_LEN {
            return Err(CclError::BadValue { field: "frame length", value: frame_len as u64 });
        }
        let emit = |p: &mut [u8]| {
            let n = head(p.get_mut(..head_len).ok_or_else(|| too_small(head_len, &[]))?)?;
            if n != head_len {
                return Err(CclError::BadValue { field: "head length", value: n as u64 });
            }
            Ok(head_len + frame_len)
        };
        self.seal_frame_with(path, epoch, kind, head_len + frame_len, emit, out)
    }

    /// `seal_frame` of a `ForwardedBatch` built in place: `out` holds its
    /// `payload_len` payload bytes at `FRAME_OVERHEAD - TAG_LEN` (written
    /// with `ForwardedBatch::push`) and room for the tag behind them. The
    /// result is byte for byte what `seal_frame` makes of the same batch.
    pub fn seal_batch_in_place(
        &mut self,
        path: &FramePath,
        epoch: Epoch,
        payload_len: usize,
        out: &mut [u8],
    ) -> Result<usize, CclError> {
        let at = FRAME_OVERHEAD - TAG_LEN;
        let payload = out.get(at..at + payload_len).ok_or_else(|| too_small(at + payload_len, out))?;
        ForwardedBatch::parse(payload)?;
        self.seal_frame_with(path, epoch, MessageKind::ForwardedBatch, payload_len, |_| Ok(payload_len), out)
    }

    fn seal_frame_with(
        &mut self,
        path: &FramePath,
        epoch: Epoch,
        kind: MessageKind,
        pl: usize,
        emit: impl FnOnce(&mut [u8]) -> Result<usize, CclError>,
        out: &mut [u8],
    ) -> Result<usize, CclError> {
        let ccl = HEADER_LEN + pl + TAG_LEN;
        let total = OUTER_LEN + ccl;
        let ip_len = total - ethernet::HEADER_LEN;
        let ip_len16 = u16::try_from(ip_len).map_err(|_| CclError::PayloadTooLarge(pl))?;
        if out.len() < total {
            return Err(too_small(total, out));
        }
        self.seal_with(epoch, kind, pl, emit, &mut out[OUTER_LEN..total])?;
        ethernet::emit_header(&mut out[..ethernet::HEADER_LEN + ethernet::TAG_LEN], path.dst_mac, path.src_mac, None, ethernet::ethertype::IPV4);
        {
            let mut ip = Ipv4Packet::new_unchecked(&mut out[ethernet::HEADER_LEN..ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN]);
            ip.set_version_ihl(ipv4::MIN_HEADER_LEN);
            ip.set_dscp_ecn(TOS_CS6);
            ip.set_total_len(ip_len16);
            ip.set_ident(0);
            ip.set_flags_frag(ipv4::FLAG_DF, 0);
            ip.set_ttl(ipv4::DEFAULT_TTL);
            ip.set_protocol(IP_PROTO_UDP);
            ip.set_src(path.src_ip);
            ip.set_dst(path.dst_ip);
            ip.fill_checksum();
        }
        let udp_start = ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN;
        let mut u = UdpPacket::new_unchecked(&mut out[udp_start..OUTER_LEN]);
        u.set_src_port(CCL_UDP_PORT.wrapping_add(u16::from(self.channel)));
        u.set_dst_port(CCL_UDP_PORT);
        u.set_len(ip_len16 - ipv4::MIN_HEADER_LEN as u16);
        u.set_checksum(0);
        Ok(total)
    }
}

/// A received CCL datagram and the outer addresses it came with.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct UdpDatagram<'a> {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub src_port: u16,
    /// The UDP payload: a CCL message for [`Opener::open`].
    pub payload: &'a [u8],
}

/// Strip Ethernet (VLAN tags allowed), IPv4 and UDP from a frame received
/// on the CCL port. `NotCcl` for anything but unfragmented IPv4/UDP to
/// [`CCL_UDP_PORT`] (ARP is the driver's, before this); the IPv4 header
/// checksum is verified, the UDP checksum is not (the MAC is).
pub fn strip_udp(frame: &[u8]) -> Result<UdpDatagram<'_>, CclDrop> {
    let eth = EthernetFrame::new_checked(frame).map_err(|_| CclDrop::Truncated)?;
    if eth.ethertype() != ethernet::ethertype::IPV4 {
        return Err(CclDrop::NotCcl);
    }
    let ip_bytes = frame.get(eth.header_len()..).unwrap_or(&[]);
    let ip = Ipv4Packet::new_checked(ip_bytes).map_err(|e| match e {
        ipv4::Error::Truncated => CclDrop::Truncated,
        ipv4::Error::BadVersion => CclDrop::NotCcl,
        _ => CclDrop::BadOuterHeader,
    })?;
    if ip.protocol() != IP_PROTO_UDP {
        return Err(CclDrop::NotCcl);
    }
    if ip.is_fragment() || !ip.verify_checksum() {
        return Err(CclDrop::BadOuterHeader);
    }
    // Borrow from `frame` (not the view) so the payload outlives `ip`;
    // `new_checked` proved header_len <= total_len <= len.
    let ip_payload = ip_bytes.get(ip.header_len()..usize::from(ip.total_len())).unwrap_or(&[]);
    let u = UdpPacket::new_checked(ip_payload).map_err(|e| match e {
        udp::Error::Truncated => CclDrop::Truncated,
        udp::Error::BadLength => CclDrop::BadOuterHeader,
    })?;
    if u.dst_port() != CCL_UDP_PORT {
        return Err(CclDrop::NotCcl);
    }
    let end = usize::from(u.len());
    Ok(UdpDatagram {
        src_mac: eth.src(),
        dst_mac: eth.dst(),
        src_ip: ip.src(),
        dst_ip: ip.dst(),
        src_port: u.src_port(),
        payload: ip_payload.get(udp::HEADER_LEN..end).unwrap_or(&[]),
    })
}

/// An authenticated, fresh, decoded message.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Opened<'a> {
    pub sender: NodeId,
    pub channel: u8,
    pub incarnation: u32,
    pub epoch: Epoch,
    pub seq: u64,
    /// Header flags (none defined yet; sent as 0).
    pub flags: u8,
    pub msg: Message<'a>,
}

/// An authenticated, fresh, decoded control-channel message
/// ([`Opener::open_control`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OpenedControl<'a> {
    pub sender: NodeId,
    pub channel: u8,
    pub incarnation: u32,
    pub epoch: Epoch,
    pub seq: u64,
    pub flags: u8,
    pub msg: ControlMessage<'a>,
}

/// The authenticated header fields `open_with` hands back with the payload.
struct Fresh {
    sender: NodeId,
    channel: u8,
    incarnation: u32,
    epoch: Epoch,
    seq: u64,
    flags: u8,
}

/// Receives CCL messages for one node: checks, authenticates, de-duplicates
/// and decodes them, and counts every outcome.
#[derive(Clone, Debug)]
pub struct Opener {
    key: CclKey,
    me: NodeId,
    guard: ReplayGuard,
    counters: CclCounters,
}

impl Opener {
    /// Allocates the replay table (once); `me` is this node (its own
    /// looped-back messages are dropped as `Loopback`).
    pub fn new(key: &CclKey, me: NodeId) -> Self {
        Opener { key: key.clone(), me, guard: ReplayGuard::new(), counters: CclCounters::default() }
    }
    #[inline]
    pub fn counters(&self) -> &CclCounters {
        &self.counters
    }
    #[inline]
    pub fn replay_guard(&self) -> &ReplayGuard {
        &self.guard
    }
    /// Forget a node's replay windows (it left the cluster for good).
    pub fn forget(&mut self, sender: NodeId) {
        self.guard.forget(sender);
    }

    /// Open one CCL datagram (a UDP payload). Counts the outcome.
    pub fn open<'a>(&mut self, datagram: &'a [u8]) -> Result<Opened<'a>, CclDrop> {
        let r = self.open_with(datagram, Message::parse);
        self.count(&r.as_ref().map(|(_, m)| m.kind()), datagram.len());
        r.map(|(f, msg)| Opened {
            sender: f.sender,
            channel: f.channel,
            incarnation: f.incarnation,
            epoch: f.epoch,
            seq: f.seq,
            flags: f.flags,
            msg,
        })
    }

    /// Strip Ethernet/IPv4/UDP ([`strip_udp`]) and `open` the payload.
    /// Counts the outcome, outer-header drops included.
    pub fn open_frame<'a>(&mut self, frame: &'a [u8]) -> Result<Opened<'a>, CclDrop> {
        match strip_udp(frame) {
            Ok(d) => self.open(d.payload),
            Err(e) => {
                self.counters.drops[e.index()] += 1;
                Err(e)
            }
        }
    }

    /// `open` for the control lcore: the same checks and counters, the
    /// payload decoded as a [`ControlMessage`] (a data-channel kind is
    /// `UnknownKind` here).
    pub fn open_control<'a>(&mut self, datagram: &'a [u8]) -> Result<OpenedControl<'a>, CclDrop> {
        let r = self.open_with(datagram, ControlMessage::parse);
        self.count(&r.as_ref().map(|(_, m)| m.kind()), datagram.len());
        r.map(|(f, msg)| OpenedControl {
            sender: f.sender,
            channel: f.channel,
            incarnation: f.incarnation,
            epoch: f.epoch,
            seq: f.seq,
            flags: f.flags,
            msg,
        })
    }

    /// `open_frame` for the control lcore.
    pub fn open_control_frame<'a>(&mut self, frame: &'a [u8]) -> Result<OpenedControl<'a>, CclDrop> {
        match strip_udp(frame) {
            Ok(d) => self.open_control(d.payload),
            Err(e) => {
                self.counters.drops[e.index()] += 1;
                Err(e)
            }
        }
    }

    fn count(&mut self, r: &Result<MessageKind, &CclDrop>, len: usize) {
        match r {
            Ok(k) => {
                self.counters.rx[k.index()] += 1;
                self.counters.rx_bytes += len as u64;
            }
            Err(d) => self.counters.drops[d.index()] += 1,
        }
    }

    fn open_with<'a, M>(
        &mut self,
        datagram: &'a [u8],
        parse: impl FnOnce(u8, &'a [u8]) -> Result<M, CclError>,
    ) -> Result<(Fresh, M), CclDrop> {
        let p = CclPacket::new_checked(datagram)?;
        if p.cluster_id() != self.key.cluster_id().0 {
            return Err(CclDrop::WrongCluster);
        }
        let sender = p.sender();
        if sender.index() >= NodeId::MAX_NODES {
            return Err(CclDrop::BadSender);
        }
        if sender == self.me {
            return Err(CclDrop::Loopback);
        }
        let (channel, inc, seq) = (p.channel(), p.incarnation(), p.seq());
        self.guard.check(sender, channel, inc, seq)?;
        if !self.key.verify(p.authenticated(), &p.tag()) {
            return Err(CclDrop::BadMac);
        }
        self.guard.commit(sender, channel, inc, seq)?;
        // `new_checked` proved HEADER_LEN + TAG_LEN <= len; borrow from
        // `datagram` so the message lives as long as the input.
        let payload = datagram.get(HEADER_LEN..datagram.len().saturating_sub(TAG_LEN)).unwrap_or(&[]);
        let msg = parse(p.kind(), payload).map_err(|e| match e {
            CclError::UnknownKind(_) => CclDrop::UnknownKind,
            _ => CclDrop::MalformedPayload,
        })?;
        Ok((Fresh { sender, channel, incarnation: inc, epoch: p.epoch(), seq, flags: p.flags() }, msg))
    }
}
