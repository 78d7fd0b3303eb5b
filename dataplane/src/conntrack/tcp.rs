//! TCP connection tracking: a state machine over the flags of the segments
//! both endpoints send, plus sequence-window tracking in the style of Guido
//! van Rooij, "Real Stateful TCP Packet Filtering in IP Filter" (2000), as
//! used by OpenBSD pf and Linux nf_conntrack.
//!
//! Invariants:
//! - A segment is checked against a *copy* of the connection and the copy is
//!   committed only if every check passes, so a rejected segment (bad flags,
//!   bad state, out of window) never changes what is tracked.
//! - Per direction ("peer" = the endpoint sending in that direction) we keep
//!   `end` (highest `seq + len` it sent, SYN and FIN counting one each),
//!   `maxend` (highest `ack + window` the *other* endpoint advertised, i.e. the
//!   right edge this peer may send up to), `maxwin` (largest window this peer
//!   advertised, scaled) and its window-scale shift. A peer whose `maxwin` is
//!   zero has not spoken yet (a real SYN always yields `maxwin >= 1`).
//! - Window scaling (RFC 7323 §2) is applied only if both the SYN and the
//!   SYN-ACK carried the option, and never to the window of a SYN segment.
//! - Every comparison of sequence numbers goes through [`SeqNumber`], which
//!   compares modulo 2^32 (RFC 9293 §3.4).
//! - A connection installed from another node's (possibly stale) record
//!   ([`TcpConn::resync`]) re-learns each direction from its first
//!   segments instead of dropping them: see "Resync" below.
//! - Nothing here allocates or panics.
//!
//! Resync (docs/failover.md). A flow handed over from a dead owner carries
//! the windows of the owner's last flow record, which may be arbitrarily
//! old: records are sent on state changes and refreshes, not per segment.
//! `resync` marks both peers `P_RESYNC` ("this peer's edges are unknown")
//! and `P_PICKED` ("this peer may have sent data we never saw"). Then, for
//! a segment from sender S to receiver R:
//! - no window check runs while S or R is in resync: each needs an edge
//!   of both sides (I: the edge R advertised, which S may have overrun
//!   with a FIN or a probe before the install; II: `S.end` and R's window;
//!   III/IV: `R.end` and, III's fallback below, S's acks);
//! - the segment is recorded as the truth: S's first segment *sets*
//!   `S.end`, and, if it carries an ACK, *sets* `R.maxend = ack + window`
//!   and clears S's `P_RESYNC` (so each direction is exact again after
//!   its first ACK-carrying segment, as Linux conntrack's mid-stream
//!   pickup learns a direction from its first segment);
//! - for ever after, check I accepts `seq` up to `max(S.maxend, S.end) +
//!   1` (a FIN or window probe at the edge before the install, unseen
//!   here, leaves the next sequence number one past it), and check III
//!   accepts an ack of a `P_PICKED` receiver up to `R.maxend`
//!   (what R was allowed to send; right edges never move left, RFC 9293
//!   §3.8.6) rather than only up to the data seen here: the data R sent
//!   before the install went through the dead owner and may be acked now.
//!
//! An exactly installed flow (no `resync`) behaves as the original.

use super::tcp_flags::{ACK, CWR, ECE, FIN, PSH, RST, SYN, URG};
use super::TcpSeg;
use crate::types::{Direction, DropReason};
use core::ops::{Add, Sub};

/// A TCP sequence number with wrapping arithmetic and comparison modulo 2^32
/// (RFC 9293 §3.4: "the space ranges from 0 to 2^32 - 1 ... all arithmetic
/// dealing with sequence numbers must be performed modulo 2^32").
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SeqNumber(pub u32);

impl SeqNumber {
    /// Signed distance `self - other`, valid while the two are less than
    /// 2^31 apart.
    #[inline]
    pub fn diff(self, other: SeqNumber) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }
    #[inline]
    pub fn lt(self, other: SeqNumber) -> bool {
        self.diff(other) < 0
    }
    #[inline]
    pub fn le(self, other: SeqNumber) -> bool {
        self.diff(other) <= 0
    }
    #[inline]
    pub fn gt(self, other: SeqNumber) -> bool {
        self.diff(other) > 0
    }
    #[inline]
    pub fn ge(self, other: SeqNumber) -> bool {
        self.diff(other) >= 0
    }
    /// The later of the two (modulo 2^32).
    #[inline]
    pub fn max(self, other: SeqNumber) -> SeqNumber {
        if self.ge(other) {
            self
        } else {
            other
        }
    }
}

impl Add<u32> for SeqNumber {
    type Output = SeqNumber;
    #[inline]
    fn add(self, rhs: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_add(rhs))
    }
}

impl Sub<u32> for SeqNumber {
    type Output = SeqNumber;
    #[inline]
    fn sub(self, rhs: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_sub(rhs))
    }
}

/// Lower bound on how far an acknowledgement may lag behind the data the
/// other side has sent: pf's `MAXACKWINDOW` (van Rooij §4: the ack may be at
/// most one maximal window behind; pf uses 65535 + 1 + 464 rounded to 66000).
/// The effective bound is `max(MAX_ACK_WINDOW, peer's largest window)`.
pub const MAX_ACK_WINDOW: u32 = 66_000;

/// Largest window-scale shift; larger values are treated as 14
/// (RFC 7323 §2.3).
pub const MAX_WSCALE: u8 = 14;

/// TCP connection states as seen from the middle.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum TcpState {
    /// The initiator sent a SYN; no answer yet.
    SynSent,
    /// The responder answered with SYN-ACK (or, for a simultaneous open,
    /// with a SYN); the initiator has not acknowledged it yet.
    SynReceived,
    /// Handshake complete, no FIN seen.
    Established,
    /// Exactly one side sent a FIN.
    FinWait,
    /// Both sides sent a FIN; at least one is not yet acknowledged
    /// (LAST-ACK / CLOSING of RFC 9293 §3.3.2).
    Closing,
    /// Both FINs sent and acknowledged (TIME-WAIT, RFC 9293 §3.3.2).
    TimeWait,
    /// Reset seen (RFC 9293 §3.10.7.4, "If the RST bit is set").
    Closed,
}

impl TcpState {
    pub const fn as_str(self) -> &'static str {
        match self {
            TcpState::SynSent => "SYN_SENT",
            TcpState::SynReceived => "SYN_RECV",
            TcpState::Established => "ESTABLISHED",
            TcpState::FinWait => "FIN_WAIT",
            TcpState::Closing => "CLOSING",
            TcpState::TimeWait => "TIME_WAIT",
            TcpState::Closed => "CLOSED",
        }
    }
}

/// Peer flag: this peer's SYN carried a window-scale option.
const P_WSCALE: u8 = 0x01;
/// Peer flag: this peer's SYN carried SACK-permitted.
const P_SACK_PERM: u8 = 0x02;
/// Peer flag: this peer sent a FIN (its `end` then includes the FIN).
const P_FIN_SENT: u8 = 0x04;
/// Peer flag: this peer's FIN was acknowledged by the other side.
const P_FIN_ACKED: u8 = 0x08;
/// Peer flag (resync, module docs): this peer has not sent an ACK-carrying
/// segment since the flow was installed from a record; its edges are not
/// known.
const P_RESYNC: u8 = 0x10;
/// Peer flag (resync): the flow was installed from a record; this peer may
/// have sent data this node never saw (acks of it are accepted up to the
/// edge the peer was allowed to send to).
const P_PICKED: u8 = 0x20;
/// Every peer flag (for validating a decoded state).
pub(super) const PEER_FLAGS: u8 = P_WSCALE | P_SACK_PERM | P_FIN_SENT | P_FIN_ACKED | P_RESYNC | P_PICKED;

/// What we know about one endpoint (the sender of one direction).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    /// Highest `seq + len` sent (SYN and FIN count one).
    pub end: SeqNumber,
    /// Highest `ack + window` the other endpoint advertised: the right edge
    /// of what this peer may send.
    pub maxend: SeqNumber,
    /// Largest (scaled) window this peer advertised; 0 = not seen yet.
    pub maxwin: u32,
    /// Window-scale shift applied to this peer's non-SYN windows.
    pub scale: u8,
    flags: u8,
}

impl Peer {
    fn from_syn(seg: &TcpSeg) -> Peer {
        let end = SeqNumber(seg.seq) + seg.payload_len.wrapping_add(1);
        let mut flags = 0;
        let mut scale = 0;
        if let Some(ws) = seg.wscale {
            flags |= P_WSCALE;
            scale = ws.min(MAX_WSCALE);
        }
        if seg.sack_permitted {
            flags |= P_SACK_PERM;
        }
        Peer { end, maxend: end, maxwin: u32::from(seg.window).max(1), scale, flags }
    }
    #[inline]
    fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }
    /// Did this peer's SYN offer SACK (RFC 2018)? Informational.
    pub fn sack_permitted(&self) -> bool {
        self.has(P_SACK_PERM)
    }
    /// Is this peer waiting for its first segment since a resync?
    pub fn in_resync(&self) -> bool {
        self.has(P_RESYNC)
    }
    /// The peer's flag bits (for the flow-state codec).
    pub(super) fn flags(&self) -> u8 {
        self.flags
    }
    /// A peer from its parts (flags already validated by the caller).
    pub(super) fn from_parts(end: SeqNumber, maxend: SeqNumber, maxwin: u32, scale: u8, flags: u8) -> Peer {
        Peer { end, maxend, maxwin, scale, flags }
    }
}

/// Flag combinations (after masking PSH, ECE, CWR) that a TCP may send. The
/// same set nf_conntrack accepts: every segment but the first SYN and a RST
/// carries ACK (RFC 9293 §3.10.7.4: "if the ACK bit is off, drop the
/// segment"), SYN never travels with FIN or RST, and a segment has at least
/// one of SYN/ACK/RST. Everything else (NULL, XMAS, SYN+FIN, SYN+RST,
/// FIN without ACK, FIN+RST) is a scan or a forgery.
pub fn flags_valid(flags: u8) -> bool {
    let f = flags & !(PSH | ECE | CWR);
    matches!(
        f,
        x if x == SYN
            || x == SYN | URG
            || x == SYN | ACK
            || x == RST
            || x == RST | ACK
            || x == FIN | ACK
            || x == FIN | ACK | URG
            || x == ACK
            || x == ACK | URG
    )
}

/// True for a segment that may open a connection: SYN without ACK, RST, FIN.
pub fn is_opening_syn(flags: u8) -> bool {
    flags & (SYN | ACK | RST | FIN) == SYN
}

/// Result of feeding an accepted segment to a connection.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Accept {
    /// The segment belongs to the connection; state updated.
    Ok,
    /// A fresh SYN on a connection in TIME-WAIT or CLOSED: the caller should
    /// forget this connection and treat the segment as a new one (port
    /// reuse, RFC 9293 §3.10.7.4 TIME-WAIT / RFC 6191).
    Reopen,
}

/// One tracked TCP connection.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TcpConn {
    pub state: TcpState,
    /// Both sides sent a bare SYN (simultaneous open, RFC 9293 §3.5 fig. 8).
    simultaneous: bool,
    /// A connection the SYN proxy opened, and where its splice is
    /// (`ConnTable`, `synproxy`). In what was padding: the slot does not grow.
    pub proxy: ProxyStage,
    /// The initiator's ISS, to accept a SYN-ACK that acknowledges only the
    /// SYN and not its data (TCP Fast Open, RFC 7413 §4.2).
    iss: SeqNumber,
    /// `[Original, Reply]`.
    pub peers: [Peer; 2],
}

#[inline]
fn idx(dir: Direction) -> usize {
    match dir {
        Direction::Original => 0,
        Direction::Reply => 1,
    }
}

/// Where a connection the SYN proxy opened stands (`conntrack::synproxy`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
pub enum ProxyStage {
    /// Not proxied: the endpoints did their own handshake.
    #[default]
    None = 0,
    /// The client completed its handshake with the proxy; the proxy's SYN
    /// went to the server, which has not answered.
    Connecting = 1,
    /// The server answered: the two halves are spliced, the server's
    /// sequence numbers translated by the table's delta for the flow.
    Spliced = 2,
}

/// The private parts of a [`TcpConn`], for the flow-state codec
/// (`conntrack::state`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct TcpParts {
    pub state: TcpState,
    pub simultaneous: bool,
    pub proxy: ProxyStage,
    pub iss: SeqNumber,
    pub peers: [Peer; 2],
}

impl TcpConn {
    pub(super) fn parts(&self) -> TcpParts {
        TcpParts { state: self.state, simultaneous: self.simultaneous, proxy: self.proxy, iss: self.iss, peers: self.peers }
    }

    pub(super) fn from_parts(p: TcpParts) -> TcpConn {
        TcpConn { state: p.state, simultaneous: p.simultaneous, proxy: p.proxy, iss: p.iss, peers: p.peers }
    }

    /// The initiator's ISS.
    pub fn iss(&self) -> u32 {
        self.iss.0
    }

    /// Mark both directions for resync (module docs): the connection was
    /// installed from a record that may be stale.
    pub fn resync(&mut self) {
        for p in &mut self.peers {
            p.flags |= P_RESYNC | P_PICKED;
        }
    }

    /// A connection opened by `seg`, which must satisfy [`is_opening_syn`].
    pub fn from_syn(seg: &TcpSeg) -> TcpConn {
        TcpConn {
            state: TcpState::SynSent,
            simultaneous: false,
            proxy: ProxyStage::None,
            iss: SeqNumber(seg.seq),
            peers: [Peer::from_syn(seg), Peer::default()],
        }
    }

    /// Feed one segment travelling in `dir`. On `Err` nothing changed.
    pub fn on_segment(&mut self, dir: Direction, seg: &TcpSeg) -> Result<Accept, DropReason> {
        if !flags_valid(seg.flags) {
            return Err(DropReason::TcpBadFlags);
        }
        if self.state == TcpState::Established && seg.flags & (SYN | FIN | RST) == 0 {
            // What `step` does for this case, without the copy: no
            // handshake rule applies, `in_window` commits only on success,
            // and with no FIN sent by either side (that would have left
            // ESTABLISHED) the state stays ESTABLISHED.
            self.in_window(idx(dir), 1 - idx(dir), seg)?;
            return Ok(Accept::Ok);
        }
        self.on_segment_general(dir, seg)
    }

    /// `on_segment` without the ESTABLISHED shortcut (what the shortcut
    /// must equal; `tests::established_shortcut_equals_the_general_step`).
    fn on_segment_general(&mut self, dir: Direction, seg: &TcpSeg) -> Result<Accept, DropReason> {
        if !flags_valid(seg.flags) {
            return Err(DropReason::TcpBadFlags);
        }
        let mut next = *self;
        let r = next.step(dir, seg)?;
        *self = next;
        Ok(r)
    }

    fn step(&mut self, dir: Direction, seg: &TcpSeg) -> Result<Accept, DropReason> {
        let syn = seg.flags & SYN != 0;
        let ack = seg.flags & ACK != 0;
        let rst = seg.flags & RST != 0;
        let fin = seg.flags & FIN != 0;
        let orig = dir == Direction::Original;
        let (s, r) = (idx(dir), 1 - idx(dir));

        // 1. Handshake gatekeeping: what may be sent in which state and
        //    direction (RFC 9293 §3.5, §3.10.7).
        match self.state {
            TcpState::SynSent => {
                if orig {
                    if syn && !ack {
                        // Retransmitted SYN, or the client restarted with a
                        // new ISN / options: nothing to protect yet.
                        *self = TcpConn::from_syn(seg);
                        return Ok(Accept::Ok);
                    }
                    if !rst {
                        // SYN-ACK in the original direction, or data / ACK /
                        // FIN before the responder answered.
                        return Err(DropReason::TcpBadState);
                    }
                    // An initiator aborting: window-checked below.
                } else if syn {
                    if ack && !self.acks_syn(seg.ack) {
                        return Err(DropReason::TcpOutOfWindow);
                    }
                    self.peers[1] = Peer::from_syn(seg);
                    if !(self.peers[0].has(P_WSCALE) && self.peers[1].has(P_WSCALE)) {
                        // RFC 7323 §2.2: scaling only if both sides offered it.
                        self.peers[0].scale = 0;
                        self.peers[1].scale = 0;
                    }
                    self.simultaneous = !ack;
                    // The SYN-ACK's ack/window are checked and recorded below.
                    if !ack {
                        self.state = TcpState::SynReceived;
                        return Ok(Accept::Ok);
                    }
                } else if rst {
                    // RFC 9293 §3.10.7.3: a RST in SYN-SENT is acceptable only
                    // if it acknowledges our SYN.
                    if ack && self.acks_syn(seg.ack) {
                        self.state = TcpState::Closed;
                        return Ok(Accept::Ok);
                    }
                    return Err(DropReason::TcpOutOfWindow);
                } else {
                    return Err(DropReason::TcpBadState);
                }
            }
            TcpState::SynReceived => {
                if syn && !ack {
                    if orig && SeqNumber(seg.seq) + seg.payload_len.wrapping_add(1) == self.peers[0].end {
                        // Retransmitted SYN (our SYN-ACK was lost downstream).
                        return Ok(Accept::Ok);
                    }
                    if orig {
                        // A new ISN: the initiator started over.
                        *self = TcpConn::from_syn(seg);
                        return Ok(Accept::Ok);
                    }
                    if !(self.simultaneous && SeqNumber(seg.seq) + seg.payload_len.wrapping_add(1) == self.peers[1].end)
                    {
                        return Err(DropReason::TcpBadState);
                    }
                    return Ok(Accept::Ok);
                }
                if syn && orig && !self.simultaneous {
                    return Err(DropReason::TcpBadState);
                }
            }
            TcpState::Established | TcpState::FinWait | TcpState::Closing => {
                if syn && !ack {
                    if self.state == TcpState::Closing {
                        // Both sides have finished sending; the closing
                        // handshake's last ACK may have been lost beyond us
                        // while the initiator already left TIME-WAIT. pf
                        // ("state reuse") lets such a SYN replace the state.
                        return Ok(Accept::Reopen);
                    }
                    return Err(DropReason::TcpBadState);
                }
                if syn && orig && !self.simultaneous {
                    return Err(DropReason::TcpBadState);
                }
                // A responder's SYN-ACK retransmission (our initiator's ACK
                // was lost downstream) is window-checked below.
            }
            TcpState::TimeWait | TcpState::Closed => {
                if syn && !ack {
                    return Ok(Accept::Reopen);
                }
                if syn && orig && !self.simultaneous {
                    return Err(DropReason::TcpBadState);
                }
            }
        }

        // 2. Sequence-window check (van Rooij §3, checks I-IV).
        self.in_window(s, r, seg)?;

        // 3. State transitions.
        if rst {
            self.state = TcpState::Closed;
            return Ok(Accept::Ok);
        }
        if self.state == TcpState::SynSent {
            // Only a valid SYN-ACK from the responder gets here.
            self.state = TcpState::SynReceived;
            return Ok(Accept::Ok);
        }
        if self.state == TcpState::SynReceived && ack && !syn && (orig || self.simultaneous) {
            // The third segment of the handshake (RFC 9293 §3.5).
            self.state = TcpState::Established;
        }
        if fin {
            self.peers[s].flags |= P_FIN_SENT;
        }
        if ack && self.peers[r].has(P_FIN_SENT) && SeqNumber(seg.ack) == self.peers[r].end {
            self.peers[r].flags |= P_FIN_ACKED;
        }
        if matches!(self.state, TcpState::Established | TcpState::FinWait | TcpState::Closing) {
            let fins = [self.peers[0].has(P_FIN_SENT), self.peers[1].has(P_FIN_SENT)];
            let acked = [self.peers[0].has(P_FIN_ACKED), self.peers[1].has(P_FIN_ACKED)];
            self.state = match (fins, acked) {
                ([true, true], [true, true]) => TcpState::TimeWait,
                ([true, true], _) => TcpState::Closing,
                ([true, false], _) | ([false, true], _) => TcpState::FinWait,
                _ => TcpState::Established,
            };
        }
        Ok(Accept::Ok)
    }

    /// RFC 9293 §3.10.7.3: in SYN-SENT an acknowledgement is acceptable iff
    /// ISS < SEG.ACK =< SND.NXT.
    fn acks_syn(&self, ack: u32) -> bool {
        let ack = SeqNumber(ack);
        ack.gt(self.iss) && ack.le(self.peers[0].end)
    }

    /// van Rooij's four checks; on success record the segment. `s` is the
    /// sender's index, `r` the receiver's. A flow installed from a record
    /// (`resync`) takes `in_window_picked` instead.
    #[inline]
    fn in_window(&mut self, s: usize, r: usize, seg: &TcpSeg) -> Result<(), DropReason> {
        let (Some(&sender), Some(&receiver)) = (self.peers.get(s), self.peers.get(r)) else {
            return Err(DropReason::TcpBadState);
        };
        // `resync` marks both peers and nothing clears the mark (a new
        // connection on the tuple starts from `from_syn`): one test.
        if sender.flags & P_PICKED != 0 {
            return self.in_window_picked(s, r, seg);
        }
        let syn = seg.flags & SYN != 0;
        let fin = seg.flags & FIN != 0;
        let has_ack = seg.flags & ACK != 0;
        let rst = seg.flags & RST != 0;
        let seq = SeqNumber(seg.seq);
        let end = seq + seg.payload_len.wrapping_add(u32::from(syn)).wrapping_add(u32::from(fin));
        // No ACK (a bare SYN or RST), or the broken-stack RST+ACK with ack 0:
        // pretend it acknowledged everything (as nf_conntrack does).
        let ack = if !has_ack || (rst && seg.ack == 0) { receiver.end } else { SeqNumber(seg.ack) };
        let receiver_known = receiver.maxwin != 0;

        // I: the segment starts no later than the right edge the receiver
        //    advertised.
        let upper_ok = seq.le(sender.maxend);
        // II: the segment ends no earlier than one receive window before the
        //     highest data sent (a retransmission of anything still in flight).
        let lower_ok = end.ge(sender.end - receiver.maxwin);
        // III: no acknowledgement of data the receiver has not sent.
        // IV: the ack lags the receiver's data by at most one window.
        let (ack_hi_ok, ack_lo_ok) = if receiver_known {
            (ack.le(receiver.end), ack.ge(receiver.end - sender.maxwin.max(MAX_ACK_WINDOW)))
        } else {
            (true, true)
        };
        if !(upper_ok && lower_ok && ack_hi_ok && ack_lo_ok) {
            return Err(DropReason::TcpOutOfWindow);
        }

        // Record. Windows of SYN segments are never scaled (RFC 7323 §2.2).
        let win = if syn { u32::from(seg.window) } else { u32::from(seg.window) << sender.scale.min(MAX_WSCALE) };
        let mut sender = sender;
        let mut receiver = receiver;
        sender.maxwin = sender.maxwin.max(win).max(1);
        if end.gt(sender.end) {
            sender.end = end;
        }
        if receiver_known && end.gt(sender.maxend) {
            // The sender overran the window we knew of: the receiver must
            // have offered more than we saw.
            receiver.maxwin = receiver.maxwin.saturating_add(end.diff(sender.maxend) as u32);
            sender.maxend = end;
        }
        if has_ack && !rst {
            // A zero window still admits a one-byte probe (RFC 9293 §3.8.6.1).
            let edge = ack + win.max(1);
            if edge.gt(receiver.maxend) {
                receiver.maxend = edge;
            }
        }
        if let Some(p) = self.peers.get_mut(s) {
            *p = sender;
        }
        if let Some(p) = self.peers.get_mut(r) {
            *p = receiver;
        }
        Ok(())
    }

    /// `in_window` for a flow installed from a record (module docs,
    /// "Resync"): no check runs until both sides have been re-learnt, a
    /// direction's first segment is recorded as the truth, and checks I
    /// and III allow for what was sent before the install.
    #[cold]
    fn in_window_picked(&mut self, s: usize, r: usize, seg: &TcpSeg) -> Result<(), DropReason> {
        let (Some(&sender), Some(&receiver)) = (self.peers.get(s), self.peers.get(r)) else {
            return Err(DropReason::TcpBadState);
        };
        let syn = seg.flags & SYN != 0;
        let fin = seg.flags & FIN != 0;
        let has_ack = seg.flags & ACK != 0;
        let rst = seg.flags & RST != 0;
        let seq = SeqNumber(seg.seq);
        let end = seq + seg.payload_len.wrapping_add(u32::from(syn)).wrapping_add(u32::from(fin));
        let ack = if !has_ack || (rst && seg.ack == 0) { receiver.end } else { SeqNumber(seg.ack) };
        let receiver_known = receiver.maxwin != 0;
        let (s_resync, r_resync) = (sender.has(P_RESYNC), receiver.has(P_RESYNC));

        // Every check needs an edge of each side (I: the receiver's
        // advertised edge, which the sender may have overrun with a FIN or
        // a probe before the install; II: the sender's end, the receiver's
        // window; III/IV: the receiver's end and, III's fallback, the
        // sender's acks): none runs until both sides have been re-learnt.
        let resync = s_resync || r_resync;
        // I, after an install: a FIN (or a window probe) the sender put at
        // the edge before the install, unseen here, leaves its next
        // sequence number one past the edge (the original flow grew
        // `maxend` on seeing it); acks of that data raise `S.end`.
        let upper_ok = resync || seq.le(sender.maxend.max(sender.end) + 1);
        let lower_ok = resync || end.ge(sender.end - receiver.maxwin);
        let (ack_hi_ok, ack_lo_ok) = if receiver_known && !resync {
            let hi = if receiver.has(P_PICKED) { receiver.end.max(receiver.maxend) } else { receiver.end };
            (ack.le(hi), ack.ge(receiver.end - sender.maxwin.max(MAX_ACK_WINDOW)))
        } else {
            (true, true)
        };
        if !(upper_ok && lower_ok && ack_hi_ok && ack_lo_ok) {
            return Err(DropReason::TcpOutOfWindow);
        }

        let win = if syn { u32::from(seg.window) } else { u32::from(seg.window) << sender.scale.min(MAX_WSCALE) };
        let mut sender = sender;
        let mut receiver = receiver;
        sender.maxwin = sender.maxwin.max(win).max(1);
        if s_resync || end.gt(sender.end) {
            // The first segment since the install is the truth.
            sender.end = end;
        }
        if receiver_known && end.gt(sender.maxend) {
            if !r_resync {
                receiver.maxwin = receiver.maxwin.saturating_add(end.diff(sender.maxend) as u32);
            }
            sender.maxend = end;
        }
        if has_ack && !rst {
            let edge = ack + win.max(1);
            if s_resync || edge.gt(receiver.maxend) {
                receiver.maxend = edge;
            }
        }
        if has_ack {
            sender.flags &= !P_RESYNC;
        }
        if let Some(p) = self.peers.get_mut(s) {
            *p = sender;
        }
        if let Some(p) = self.peers.get_mut(r) {
            *p = receiver;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seg(flags: u8, seq: u32, ack: u32, window: u16, len: u32, ws: Option<u8>) -> TcpSeg {
        TcpSeg { flags, seq, ack, window, payload_len: len, wscale: ws, sack_permitted: false }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        /// From an established connection (random ISNs, windows, scaling),
        /// any sequence of segments — in and out of window, every flag
        /// combination — leaves `on_segment` and `on_segment_general` with
        /// the same results and the same connection state.
        #[test]
        fn established_shortcut_equals_the_general_step(
            isn_c in any::<u32>(), isn_s in any::<u32>(),
            ws_c in proptest::option::of(0u8..=14), ws_s in proptest::option::of(0u8..=14),
            win_c in 1u16..=65535, win_s in 1u16..=65535,
            segs in proptest::collection::vec(
                (any::<bool>(), any::<u8>(), prop_oneof![4 => -3000i32..3000, 1 => any::<i32>()],
                 prop_oneof![4 => -3000i32..3000, 1 => any::<i32>()], any::<u16>(), 0u32..2000),
                1..60),
        ) {
            let mut c = TcpConn::from_syn(&seg(SYN, isn_c, 0, win_c, 0, ws_c));
            let sa = seg(SYN | ACK, isn_s, isn_c.wrapping_add(1), win_s, 0, ws_s);
            prop_assert_eq!(c.on_segment(Direction::Reply, &sa), Ok(Accept::Ok));
            let a = seg(ACK, isn_c.wrapping_add(1), isn_s.wrapping_add(1), win_c, 0, None);
            prop_assert_eq!(c.on_segment(Direction::Original, &a), Ok(Accept::Ok));
            prop_assert_eq!(c.state, TcpState::Established);
            let mut g = c;
            for (reply, flags, dseq, dack, window, len) in segs {
                let dir = if reply { Direction::Reply } else { Direction::Original };
                let (s, r) = (idx(dir), 1 - idx(dir));
                let sq = c.peers[s].end.0.wrapping_add(dseq as u32);
                let ak = c.peers[r].end.0.wrapping_add(dack as u32);
                let x = seg(flags, sq, ak, window, len, None);
                let rc = c.on_segment(dir, &x);
                let rg = g.on_segment_general(dir, &x);
                prop_assert_eq!(rc, rg);
                prop_assert_eq!(c, g);
            }
        }
    }
}
