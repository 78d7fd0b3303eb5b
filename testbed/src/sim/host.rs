//! Host models: just enough TCP and UDP to exercise the firewall, and to
//! notice when it gets something wrong.
//!
//! A TCP connection is a request/response exchange: handshake (MSS, window
//! scale and SACK-permitted in SYN and SYN-ACK, random ISNs), the client
//! sends its request, the server answers once the whole request arrived,
//! the client closes once the whole response arrived, the server answers
//! with FIN-ACK. Senders use go-back-N with a retransmission timer
//! (exponential back-off), receivers accept in-order data only and answer
//! out-of-order segments with a duplicate ACK carrying a SACK block (RFC
//! 2018 §8 lets a receiver renege, so discarding them is allowed).
//!
//! Invariants the models check on every segment (a violation is recorded
//! as a failure of the flow, with the numbers):
//! - the SYN-ACK acknowledges exactly the client's ISN + 1 (the owner must
//!   translate its cookie ISN back, SPEC R6), and carries wscale and
//!   SACK-permitted;
//! - a retransmitted SYN carries the ISN of the first one (two nodes
//!   translating one connection differently would break that);
//! - every ACK lies within what was sent, every SACK block within the
//!   sender's sequence space, every segment near the receive point;
//! - payload bytes match a per-flow, per-direction pattern, and no more
//!   data arrives than was sent;
//! - a flow completes: all bytes both ways, both FINs acknowledged.
//!
//! UDP flows are request/response exchanges (DNS on port 53 among them)
//! with a per-exchange header and patterned payload, retried on timeout.

use super::net::mix64;
use dataplane::wire::tcp::{flags, TcpOptions};
use std::net::IpAddr;

/// Segment size of the models.
pub const MSS: u32 = 1000;
/// Segments in flight.
pub const WINDOW_SEGS: u32 = 8;
/// Window scale announced in SYN and SYN-ACK (RFC 7323).
pub const WSCALE: u8 = 7;
/// Window field (scaled by `WSCALE`: 128 KiB, above what is ever in flight).
pub const WINDOW_FIELD: u16 = 1024;
/// First retransmission timeout (RFC 6298 says 1 s; the simulated RTT is
/// well under a millisecond).
pub const RTO_INITIAL_NS: u64 = 200_000_000;
pub const RTO_MAX_NS: u64 = 3_000_000_000;
/// Retransmissions without progress before a flow gives up.
pub const MAX_RETRIES: u32 = 10;
/// A segment this far from where it should be is a translation error.
const SEQ_SANITY: u32 = 1 << 22;

/// SYN / SYN-ACK options: MSS (1460 for IPv4, 1440 for IPv6: a 1500-byte
/// MTU less the headers), NOP, WSCALE, NOP, NOP, SACK-permitted.
pub fn syn_options(v6: bool) -> Vec<u8> {
    let mss: u16 = if v6 { 1440 } else { 1460 };
    let m = mss.to_be_bytes();
    vec![2, 4, m[0], m[1], 1, 3, 3, WSCALE, 1, 1, 4, 2]
}

/// NOP, NOP, SACK with one block.
fn sack_option(l: u32, r: u32) -> Vec<u8> {
    let mut v = vec![1, 1, 5, 10];
    v.extend_from_slice(&l.to_be_bytes());
    v.extend_from_slice(&r.to_be_bytes());
    v
}

/// The byte at stream offset `off` of flow `flow`, direction `dir`
/// (0 = client to server), exchange `xchg` (UDP; 0 for TCP).
pub fn pattern_byte(flow: u32, dir: u8, xchg: u16, off: u32) -> u8 {
    let k = (u64::from(flow) << 32) ^ (u64::from(dir) << 24) ^ (u64::from(xchg) << 8);
    (mix64(k ^ (u64::from(off / 8) << 40)) >> ((off % 8) * 8)) as u8
}

pub fn fill_pattern(out: &mut Vec<u8>, flow: u32, dir: u8, xchg: u16, off: u32, len: u32) {
    out.extend((off..off + len).map(|o| pattern_byte(flow, dir, xchg, o)));
}

/// First offset in `data` (at stream offset `off`) that differs from the
/// pattern.
pub fn check_pattern(data: &[u8], flow: u32, dir: u8, xchg: u16, off: u32) -> Option<u32> {
    data.iter()
        .enumerate()
        .find(|(i, &b)| b != pattern_byte(flow, dir, xchg, off + *i as u32))
        .map(|(i, _)| off + i as u32)
}

fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}
fn seq_le(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) <= 0
}

/// A segment to transmit (the driver adds IP and Ethernet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxSeg {
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    pub options: Vec<u8>,
    pub payload: Vec<u8>,
}

/// A received segment, parsed by the driver.
#[derive(Clone, Debug)]
pub struct RxSeg<'a> {
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub options: TcpOptions,
    pub payload: &'a [u8],
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum TcpState {
    Listen,
    SynSent,
    SynRcvd,
    Established,
    Failed,
}

/// One end of a TCP connection.
#[derive(Clone, Debug)]
pub struct TcpEnd {
    pub flow: u32,
    pub client: bool,
    pub local: (IpAddr, u16),
    pub remote: (IpAddr, u16),
    pub state: TcpState,
    iss: u32,
    snd_una: u32,
    snd_nxt: u32,
    /// Highest sequence number sent + 1.
    snd_max: u32,
    /// Bytes of the stream we send (request or response).
    send_len: u32,
    /// The application has handed its data over.
    send_open: bool,
    fin_queued: bool,
    /// Data bytes to send once open.
    app_send: u32,
    irs: u32,
    rcv_nxt: u32,
    recv_expect: u32,
    pub recv_got: u32,
    peer_fin: bool,
    rto_ns: u64,
    retries: u32,
    timer_running: bool,
    /// Bumped on every arm/cancel; timer events carry the generation.
    pub timer_gen: u64,
    /// Set when the driver must schedule a timer event (deadline, gen).
    pub timer_request: Option<(u64, u64)>,
    pub failures: Vec<String>,
    pub established_at: Option<u64>,
    pub done_at: Option<u64>,
    pub retransmissions: u64,
    pub sacks_sent: u64,
    /// Server: idle this long between the whole request and the response.
    pub think_ns: u64,
    /// Set when the driver must call `on_app` at this time.
    pub app_request: Option<u64>,
    thinking: bool,
    /// Server: the application writes its response `pace.0` bytes at a
    /// time, every `pace.1` ns (a rate-limited download, long-lived);
    /// `None`: all at once.
    pub pace: Option<(u32, u64)>,
    /// Bytes the paced application has written so far.
    written: u32,
    /// Longest time between two in-order data arrivals (the longest
    /// stall of the stream received), and when it began.
    pub max_stall_ns: u64,
    pub max_stall_at: u64,
    last_progress: Option<u64>,
    dup_acks: u32,
}

impl TcpEnd {
    /// A client that will send `request` bytes and expects `response`.
    #[allow(clippy::too_many_arguments)]
    pub fn client(
        flow: u32,
        local: (IpAddr, u16),
        remote: (IpAddr, u16),
        iss: u32,
        request: u32,
        response: u32,
    ) -> Self {
        Self::new(flow, true, local, remote, iss, request, response)
    }
    /// A listening server that answers `request` bytes with `response`.
    pub fn server(
        flow: u32,
        local: (IpAddr, u16),
        remote: (IpAddr, u16),
        iss: u32,
        request: u32,
        response: u32,
    ) -> Self {
        Self::new(flow, false, local, remote, iss, response, request)
    }
    fn new(
        flow: u32,
        client: bool,
        local: (IpAddr, u16),
        remote: (IpAddr, u16),
        iss: u32,
        send: u32,
        expect: u32,
    ) -> Self {
        TcpEnd {
            flow,
            client,
            local,
            remote,
            state: if client {
                TcpState::SynSent
            } else {
                TcpState::Listen
            },
            iss,
            snd_una: iss,
            snd_nxt: iss,
            snd_max: iss,
            send_len: 0,
            send_open: false,
            fin_queued: false,
            app_send: send,
            irs: 0,
            rcv_nxt: 0,
            recv_expect: expect,
            recv_got: 0,
            peer_fin: false,
            rto_ns: RTO_INITIAL_NS,
            retries: 0,
            timer_running: false,
            timer_gen: 0,
            timer_request: None,
            failures: Vec::new(),
            established_at: None,
            done_at: None,
            retransmissions: 0,
            sacks_sent: 0,
            think_ns: 0,
            app_request: None,
            thinking: false,
            pace: None,
            written: 0,
            max_stall_ns: 0,
            max_stall_at: 0,
            last_progress: None,
            dup_acks: 0,
        }
    }

    /// The ISN this end chose.
    pub fn iss(&self) -> u32 {
        self.iss
    }
    /// The ISN the peer's SYN carried, as this end received it.
    pub fn irs(&self) -> u32 {
        self.irs
    }

    /// The think time of a server is over: answer.
    pub fn on_app(&mut self, now: u64) -> Vec<TxSeg> {
        let mut out = Vec::new();
        if !self.thinking || self.state == TcpState::Failed {
            return out;
        }
        self.thinking = false;
        self.open_send(now);
        if self.peer_fin && !self.fin_queued && self.send_len == self.app_send {
            self.fin_queued = true;
        }
        self.fill(&mut out);
        self.update_timer(now, false);
        out
    }

    /// The application hands over its data: all of it, or (paced) the
    /// next `pace.0` bytes, with the next write due `pace.1` later.
    fn open_send(&mut self, now: u64) {
        self.send_open = true;
        match self.pace {
            Some((chunk, every)) if chunk > 0 => {
                self.written = self.written.saturating_add(chunk).min(self.app_send);
                self.send_len = self.written;
                if self.written < self.app_send {
                    self.thinking = true;
                    self.app_request = Some(now + every.max(1));
                }
            }
            _ => self.send_len = self.app_send,
        }
    }

    fn dir(&self) -> u8 {
        if self.client {
            0
        } else {
            1
        }
    }

    fn fail(&mut self, msg: String) {
        let who = if self.client { "client" } else { "server" };
        self.failures.push(format!("{who}: {msg}"));
    }

    pub fn is_done(&self) -> bool {
        self.done_at.is_some()
    }

    /// Both directions complete: everything received, our FIN acknowledged,
    /// the peer's FIN received.
    fn complete(&self) -> bool {
        self.state == TcpState::Established
            && self.recv_got == self.recv_expect
            && self.peer_fin
            && self.fin_queued
            && self.snd_una
                == self
                    .iss
                    .wrapping_add(1)
                    .wrapping_add(self.send_len)
                    .wrapping_add(1)
    }

    /// Client: send the SYN.
    pub fn open(&mut self, now: u64) -> Vec<TxSeg> {
        self.snd_nxt = self.iss.wrapping_add(1);
        self.snd_max = self.snd_nxt;
        self.arm(now);
        vec![self.syn()]
    }

    fn syn(&self) -> TxSeg {
        TxSeg {
            seq: self.iss,
            ack: 0,
            flags: flags::SYN,
            window: 65535,
            options: syn_options(self.local.0.is_ipv6()),
            payload: Vec::new(),
        }
    }
    fn syn_ack(&self) -> TxSeg {
        TxSeg {
            seq: self.iss,
            ack: self.rcv_nxt,
            flags: flags::SYN | flags::ACK,
            window: 65535,
            options: syn_options(self.local.0.is_ipv6()),
            payload: Vec::new(),
        }
    }
    fn pure_ack(&self, sack: Option<(u32, u32)>) -> TxSeg {
        TxSeg {
            seq: self.snd_nxt,
            ack: self.rcv_nxt,
            flags: flags::ACK,
            window: WINDOW_FIELD,
            options: sack.map(|(l, r)| sack_option(l, r)).unwrap_or_default(),
            payload: Vec::new(),
        }
    }

    fn arm(&mut self, now: u64) {
        self.timer_gen += 1;
        self.timer_running = true;
        self.timer_request = Some((now + self.rto_ns, self.timer_gen));
    }
    fn cancel(&mut self) {
        if self.timer_running {
            self.timer_gen += 1;
            self.timer_running = false;
        }
    }

    /// Emit what the window allows: data, then the FIN.
    fn fill(&mut self, out: &mut Vec<TxSeg>) {
        let base = self.iss.wrapping_add(1);
        loop {
            let off = self.snd_nxt.wrapping_sub(base);
            if self.snd_nxt.wrapping_sub(self.snd_una) >= WINDOW_SEGS * MSS {
                break;
            }
            if self.send_open && off < self.send_len {
                let len = MSS.min(self.send_len - off);
                let mut payload = Vec::with_capacity(len as usize);
                fill_pattern(&mut payload, self.flow, self.dir(), 0, off, len);
                let last = off + len == self.send_len;
                out.push(TxSeg {
                    seq: self.snd_nxt,
                    ack: self.rcv_nxt,
                    flags: flags::ACK | if last { flags::PSH } else { 0 },
                    window: WINDOW_FIELD,
                    options: Vec::new(),
                    payload,
                });
                self.snd_nxt = self.snd_nxt.wrapping_add(len);
            } else if self.fin_queued && off == self.send_len {
                out.push(TxSeg {
                    seq: self.snd_nxt,
                    ack: self.rcv_nxt,
                    flags: flags::FIN | flags::ACK,
                    window: WINDOW_FIELD,
                    options: Vec::new(),
                    payload: Vec::new(),
                });
                self.snd_nxt = self.snd_nxt.wrapping_add(1);
            } else {
                break;
            }
            if seq_lt(self.snd_max, self.snd_nxt) {
                self.snd_max = self.snd_nxt;
            }
        }
    }

    fn check_syn_options(&mut self, o: &TcpOptions, what: &str) {
        if o.wscale != Some(WSCALE) || !o.sack_permitted || o.mss.is_none() {
            self.fail(format!(
                "{what} options changed in transit: wscale {:?} sack-permitted {} mss {:?}",
                o.wscale, o.sack_permitted, o.mss
            ));
        }
    }

    /// A segment for this connection arrived.
    pub fn on_segment(&mut self, now: u64, s: &RxSeg<'_>) -> Vec<TxSeg> {
        let mut out = Vec::new();
        if self.state == TcpState::Failed {
            return out;
        }
        if s.flags & flags::RST != 0 {
            self.fail(format!("RST received (seq {} ack {})", s.seq, s.ack));
            self.state = TcpState::Failed;
            self.cancel();
            return out;
        }
        let syn = s.flags & flags::SYN != 0;
        let has_ack = s.flags & flags::ACK != 0;
        match self.state {
            TcpState::SynSent => {
                if !(syn && has_ack) {
                    self.fail(format!(
                        "flags {:#04x} while waiting for the SYN-ACK",
                        s.flags
                    ));
                    return out;
                }
                let want = self.iss.wrapping_add(1);
                if s.ack != want {
                    self.fail(format!(
                        "SYN-ACK acknowledges {} but the ISN was {} (expected {}): sequence number not translated back",
                        s.ack, self.iss, want
                    ));
                    return out;
                }
                self.check_syn_options(&s.options, "SYN-ACK");
                self.irs = s.seq;
                self.rcv_nxt = s.seq.wrapping_add(1);
                self.snd_una = want;
                self.state = TcpState::Established;
                self.established_at = Some(now);
                self.retries = 0;
                self.rto_ns = RTO_INITIAL_NS;
                out.push(self.pure_ack(None));
                self.send_len = self.app_send;
                self.send_open = true;
                if self.send_len == 0 {
                    self.fin_queued = true;
                }
                self.fill(&mut out);
                self.update_timer(now, true);
                return out;
            }
            TcpState::Listen => {
                if !syn || has_ack {
                    self.fail(format!("flags {:#04x} before the SYN", s.flags));
                    return out;
                }
                self.check_syn_options(&s.options, "SYN");
                self.irs = s.seq;
                self.rcv_nxt = s.seq.wrapping_add(1);
                self.state = TcpState::SynRcvd;
                self.snd_nxt = self.iss.wrapping_add(1);
                self.snd_max = self.snd_nxt;
                out.push(self.syn_ack());
                self.arm(now);
                return out;
            }
            TcpState::SynRcvd => {
                if syn && !has_ack {
                    if s.seq != self.irs {
                        self.fail(format!(
                            "SYN retransmission with ISN {} after ISN {}",
                            s.seq, self.irs
                        ));
                    } else {
                        out.push(self.syn_ack());
                    }
                    return out;
                }
                if !has_ack {
                    self.fail(format!("flags {:#04x} in SYN-RECEIVED", s.flags));
                    return out;
                }
                let want = self.iss.wrapping_add(1);
                if s.ack != want {
                    self.fail(format!(
                        "handshake ACK acknowledges {} (expected ISN+1 = {})",
                        s.ack, want
                    ));
                    return out;
                }
                self.snd_una = want;
                self.state = TcpState::Established;
                self.established_at = Some(now);
                self.retries = 0;
                self.rto_ns = RTO_INITIAL_NS;
                self.cancel();
                // Fall through: the ACK may carry data.
            }
            TcpState::Established => {
                if syn {
                    if s.seq != self.irs {
                        self.fail(format!(
                            "SYN{} with ISN {} after ISN {}",
                            if has_ack { "-ACK" } else { "" },
                            s.seq,
                            self.irs
                        ));
                    } else {
                        out.push(self.pure_ack(None));
                    }
                    return out;
                }
            }
            TcpState::Failed => return out,
        }

        // --- Established: acknowledgement. ---
        let mut progressed = false;
        if has_ack {
            if seq_lt(self.snd_max, s.ack) {
                self.fail(format!(
                    "ACK {} beyond what was sent (snd_max {}): not translated?",
                    s.ack, self.snd_max
                ));
                return out;
            }
            if self.snd_una.wrapping_sub(s.ack) > SEQ_SANITY && seq_lt(s.ack, self.snd_una) {
                self.fail(format!(
                    "ACK {} far below snd_una {}: not translated?",
                    s.ack, self.snd_una
                ));
                return out;
            }
            if seq_lt(self.snd_una, s.ack) {
                self.snd_una = s.ack;
                if seq_lt(self.snd_nxt, self.snd_una) {
                    self.snd_nxt = self.snd_una;
                }
                self.retries = 0;
                self.rto_ns = RTO_INITIAL_NS;
                progressed = true;
                self.dup_acks = 0;
            } else if self.pace.is_some() && s.ack == self.snd_una && self.snd_una != self.snd_max && s.payload.is_empty() {
                // Paced (long-lived) senders only: fast retransmit on the
                // third duplicate ACK (RFC 5681 §3.2), go-back-N from
                // snd_una — the receiver keeps no out-of-order data.
                self.dup_acks += 1;
                if self.dup_acks == 3 {
                    self.retransmissions += 1;
                    self.snd_nxt = self.snd_una;
                }
            }
            let lo = self.iss.wrapping_add(1);
            for &(l, r) in s.options.sack_blocks() {
                if !(seq_le(lo, l) && seq_lt(l, r) && seq_le(r, self.snd_max)) {
                    self.fail(format!(
                        "SACK block {l}-{r} outside the sent sequence space {lo}-{}: SACK not translated?",
                        self.snd_max
                    ));
                }
            }
        }

        // --- Data. ---
        let mut need_ack = false;
        let mut sack = None;
        let len = s.payload.len() as u32;
        let d = s.seq.wrapping_sub(self.rcv_nxt);
        if (len > 0 || s.flags & flags::FIN != 0) && d > SEQ_SANITY && d < u32::MAX - SEQ_SANITY {
            self.fail(format!(
                "segment seq {} is {} away from rcv_nxt {}: sequence number not translated?",
                s.seq, d as i32, self.rcv_nxt
            ));
            return out;
        }
        let mut in_order = d == 0;
        if len > 0 {
            need_ack = true;
            if d == 0 {
                let off = self.rcv_nxt.wrapping_sub(self.irs.wrapping_add(1));
                if self.peer_fin {
                    self.fail("data after FIN".into());
                } else if off + len > self.recv_expect {
                    self.fail(format!(
                        "{} bytes received, only {} were sent",
                        off + len,
                        self.recv_expect
                    ));
                } else if let Some(bad) =
                    check_pattern(s.payload, self.flow, 1 - self.dir(), 0, off)
                {
                    self.fail(format!("payload corrupted at stream offset {bad}"));
                } else {
                    self.recv_got += len;
                    if let Some(l) = self.last_progress {
                        if now - l > self.max_stall_ns {
                            self.max_stall_ns = now - l;
                            self.max_stall_at = l;
                        }
                    }
                    self.last_progress = Some(now);
                    self.rcv_nxt = self.rcv_nxt.wrapping_add(len);
                }
            } else if (d as i32) > 0 {
                sack = Some((s.seq, s.seq.wrapping_add(len)));
                in_order = false;
            } else {
                in_order = false;
            }
        }
        if s.flags & flags::FIN != 0 {
            need_ack = true;
            let fin_at = s.seq.wrapping_add(len);
            if !self.peer_fin && in_order && fin_at == self.rcv_nxt {
                if self.recv_got != self.recv_expect {
                    self.fail(format!(
                        "FIN after {} of {} bytes",
                        self.recv_got, self.recv_expect
                    ));
                }
                self.peer_fin = true;
                self.rcv_nxt = self.rcv_nxt.wrapping_add(1);
            }
        }

        // --- Application. ---
        if !self.client && !self.send_open && !self.thinking && self.recv_got == self.recv_expect {
            if self.think_ns > 0 {
                self.thinking = true;
                self.app_request = Some(now + self.think_ns);
            } else {
                self.open_send(now);
            }
        }
        if self.client && self.recv_got == self.recv_expect && !self.fin_queued {
            self.fin_queued = true;
        }
        if !self.client && self.peer_fin && self.send_open && !self.fin_queued && self.send_len == self.app_send {
            self.fin_queued = true;
        }
        let before = out.len();
        self.fill(&mut out);
        if need_ack && out.len() == before {
            if sack.is_some() {
                self.sacks_sent += 1;
            }
            out.push(self.pure_ack(sack));
        }
        self.update_timer(now, progressed);
        if self.done_at.is_none() && self.complete() {
            self.done_at = Some(now);
            self.cancel();
        }
        out
    }

    /// Keep the retransmission timer running while anything is unacknowledged.
    fn update_timer(&mut self, now: u64, progressed: bool) {
        if self.snd_una != self.snd_max {
            if progressed || !self.timer_running {
                self.arm(now);
            }
        } else {
            self.cancel();
        }
    }

    /// The retransmission timer of generation `gen` fired.
    pub fn on_timer(&mut self, now: u64, gen: u64) -> Vec<TxSeg> {
        let mut out = Vec::new();
        if gen != self.timer_gen || !self.timer_running || self.state == TcpState::Failed {
            return out;
        }
        self.timer_running = false;
        self.retries += 1;
        if self.retries > MAX_RETRIES {
            self.fail(format!(
                "gave up after {MAX_RETRIES} retransmissions in {:?} (snd_una {} snd_max {}, received {}/{} bytes, peer FIN {})",
                self.state, self.snd_una, self.snd_max, self.recv_got, self.recv_expect, self.peer_fin
            ));
            self.state = TcpState::Failed;
            return out;
        }
        self.rto_ns = (self.rto_ns * 2).min(RTO_MAX_NS);
        self.retransmissions += 1;
        match self.state {
            TcpState::SynSent => out.push(self.syn()),
            TcpState::SynRcvd => out.push(self.syn_ack()),
            TcpState::Established => {
                self.snd_nxt = self.snd_una;
                self.fill(&mut out);
            }
            _ => {}
        }
        self.arm(now);
        out
    }
}

/// Length of the UDP payload header: flow (4), exchange (2), direction (1),
/// pad (1).
pub const UDP_HDR: usize = 8;
pub const UDP_RTO_NS: u64 = 250_000_000;
pub const UDP_MAX_TRIES: u32 = 8;

pub fn udp_payload(flow: u32, xchg: u16, dir: u8, len: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(UDP_HDR + len as usize);
    v.extend_from_slice(&flow.to_be_bytes());
    v.extend_from_slice(&xchg.to_be_bytes());
    v.push(dir);
    v.push(0);
    fill_pattern(&mut v, flow, dir, xchg, 0, len);
    v
}

/// Parse and verify a UDP payload: (flow, exchange, direction), or why not.
pub fn check_udp_payload(p: &[u8]) -> Result<(u32, u16, u8), String> {
    if p.len() < UDP_HDR {
        return Err(format!("datagram payload of {} bytes", p.len()));
    }
    let flow = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
    let xchg = u16::from_be_bytes([p[4], p[5]]);
    let dir = p[6];
    if let Some(bad) = check_pattern(&p[UDP_HDR..], flow, dir, xchg, 0) {
        return Err(format!("datagram payload corrupted at offset {bad}"));
    }
    Ok((flow, xchg, dir))
}

/// The client of a UDP flow: `exchanges` request/response pairs, one at a
/// time, each retried on timeout.
#[derive(Clone, Debug)]
pub struct UdpClient {
    pub flow: u32,
    pub local: (IpAddr, u16),
    pub remote: (IpAddr, u16),
    pub exchanges: u16,
    pub next: u16,
    pub request_len: u32,
    pub response_len: u32,
    tries: u32,
    pub timer_gen: u64,
    pub timer_request: Option<(u64, u64)>,
    pub failures: Vec<String>,
    pub done_at: Option<u64>,
    pub retransmissions: u64,
    failed: bool,
    /// Idle this long between a reply and the next request.
    pub gap_ns: u64,
    /// Set when the driver must call `on_app` at this time.
    pub app_request: Option<u64>,
    /// Per-exchange (request, response) payload lengths; when empty every
    /// exchange uses `request_len` / `response_len`.
    pub sizes: Vec<(u32, u32)>,
}

impl UdpClient {
    /// (request, response) payload lengths of exchange `x`.
    pub fn lens(&self, x: u16) -> (u32, u32) {
        self.sizes
            .get(usize::from(x))
            .copied()
            .unwrap_or((self.request_len, self.response_len))
    }
    pub fn new(
        flow: u32,
        local: (IpAddr, u16),
        remote: (IpAddr, u16),
        exchanges: u16,
        request_len: u32,
        response_len: u32,
    ) -> Self {
        UdpClient {
            flow,
            local,
            remote,
            exchanges,
            next: 0,
            request_len,
            response_len,
            tries: 0,
            timer_gen: 0,
            timer_request: None,
            failures: Vec::new(),
            done_at: None,
            retransmissions: 0,
            failed: false,
            gap_ns: 0,
            app_request: None,
            sizes: Vec::new(),
        }
    }
    /// The gap after a reply is over: the next request.
    pub fn on_app(&mut self, now: u64) -> Option<Vec<u8>> {
        if self.done_at.is_some() || self.failed {
            return None;
        }
        self.tries = 1;
        Some(self.send(now))
    }
    fn send(&mut self, now: u64) -> Vec<u8> {
        self.timer_gen += 1;
        self.timer_request = Some((now + UDP_RTO_NS, self.timer_gen));
        udp_payload(self.flow, self.next, 0, self.lens(self.next).0)
    }
    pub fn open(&mut self, now: u64) -> Vec<u8> {
        self.tries = 1;
        self.send(now)
    }
    /// A datagram from the server; maybe the next request.
    pub fn on_reply(&mut self, now: u64, payload: &[u8]) -> Option<Vec<u8>> {
        self.check_reply(now, payload, 1, self.response_len, None)
    }
    /// An ICMP echo reply: it carries the request's bytes back (direction
    /// 0, request length) and the exchange in its sequence number.
    pub fn on_echo_reply(&mut self, now: u64, seq: u16, payload: &[u8]) -> Option<Vec<u8>> {
        self.check_reply(now, payload, 0, self.request_len, Some(seq))
    }
    fn check_reply(
        &mut self,
        now: u64,
        payload: &[u8],
        want_dir: u8,
        want_len: u32,
        seq: Option<u16>,
    ) -> Option<Vec<u8>> {
        if self.done_at.is_some() || self.failed {
            return None;
        }
        let (flow, xchg, dir) = match check_udp_payload(payload) {
            Err(e) => {
                self.failures.push(format!("client: {e}"));
                return None;
            }
            Ok(v) => v,
        };
        // Per-exchange sizes: a reply's length is that of its own exchange.
        let want_len = if want_dir == 1 && !self.sizes.is_empty() {
            self.lens(xchg).1
        } else {
            want_len
        };
        if flow != self.flow
            || dir != want_dir
            || payload.len() != UDP_HDR + want_len as usize
            || seq.is_some_and(|s| s != xchg)
        {
            self.failures.push(format!(
                "client: reply for flow {flow} exchange {xchg} (seq {seq:?}) dir {dir} len {} (expected flow {} dir {want_dir} len {})",
                payload.len(),
                self.flow,
                UDP_HDR + want_len as usize
            ));
            return None;
        }
        if xchg != self.next {
            // A late duplicate of an earlier exchange's reply.
            return None;
        }
        self.next += 1;
        if self.next == self.exchanges {
            self.done_at = Some(now);
            self.timer_gen += 1;
            return None;
        }
        if self.gap_ns > 0 {
            self.timer_gen += 1;
            self.app_request = Some(now + self.gap_ns);
            return None;
        }
        self.tries = 1;
        Some(self.send(now))
    }
    pub fn on_timer(&mut self, now: u64, gen: u64) -> Option<Vec<u8>> {
        if gen != self.timer_gen || self.done_at.is_some() || self.failed {
            return None;
        }
        if self.tries >= UDP_MAX_TRIES {
            self.failures.push(format!(
                "client: exchange {} unanswered after {} tries",
                self.next, self.tries
            ));
            self.failed = true;
            return None;
        }
        self.tries += 1;
        self.retransmissions += 1;
        Some(self.send(now))
    }
}

/// The server of a UDP flow: answers every valid request.
#[derive(Clone, Debug)]
pub struct UdpServer {
    pub flow: u32,
    pub response_len: u32,
    pub request_len: u32,
    pub requests: u64,
    pub failures: Vec<String>,
    /// Per-exchange (request, response) payload lengths (as the client's).
    pub sizes: Vec<(u32, u32)>,
}

impl UdpServer {
    pub fn on_request(&mut self, payload: &[u8]) -> Option<Vec<u8>> {
        match check_udp_payload(payload) {
            Err(e) => {
                self.failures.push(format!("server: {e}"));
                None
            }
            Ok((flow, xchg, dir)) => {
                let (req, resp) = self
                    .sizes
                    .get(usize::from(xchg))
                    .copied()
                    .unwrap_or((self.request_len, self.response_len));
                if flow != self.flow || dir != 0 || payload.len() != UDP_HDR + req as usize {
                    self.failures.push(format!(
                        "server: request for flow {flow} dir {dir} len {}",
                        payload.len()
                    ));
                    return None;
                }
                self.requests += 1;
                Some(udp_payload(self.flow, xchg, 1, resp))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rx(t: &TxSeg) -> (u32, u32, u8, Vec<u8>, Vec<u8>) {
        (t.seq, t.ack, t.flags, t.options.clone(), t.payload.clone())
    }

    /// Run a client and a server against each other over a perfect wire
    /// (optionally mangling the server's first reply) until quiet.
    fn converse(mangle_synack_ack: bool, drop_every: usize) -> (TcpEnd, TcpEnd) {
        let a = (IpAddr::from([198, 18, 64, 1]), 40000);
        let b = (IpAddr::from([198, 18, 128, 1]), 80);
        let mut c = TcpEnd::client(7, a, b, 0xffff_fff0, 4321, 2500);
        let mut s = TcpEnd::server(7, b, a, 1234, 4321, 2500);
        let mut now = 0;
        let mut to_s: Vec<TxSeg> = c.open(now);
        let mut to_c: Vec<TxSeg> = Vec::new();
        let mut n = 0usize;
        for _ in 0..10_000 {
            now += 1_000_000;
            if to_s.is_empty() && to_c.is_empty() {
                // Fire whichever timer is armed.
                if let Some((_, g)) = c.timer_request.take() {
                    to_s.extend(c.on_timer(now, g));
                }
                if let Some((_, g)) = s.timer_request.take() {
                    to_c.extend(s.on_timer(now, g));
                }
                if to_s.is_empty() && to_c.is_empty() {
                    break;
                }
            }
            for t in std::mem::take(&mut to_s) {
                n += 1;
                if drop_every > 0 && n.is_multiple_of(drop_every) {
                    continue;
                }
                let (seq, ack, f, o, p) = rx(&t);
                to_c.extend(s.on_segment(
                    now,
                    &RxSeg {
                        seq,
                        ack,
                        flags: f,
                        options: TcpOptions::parse(&o),
                        payload: &p,
                    },
                ));
            }
            for t in std::mem::take(&mut to_c) {
                n += 1;
                if drop_every > 0 && n.is_multiple_of(drop_every) {
                    continue;
                }
                let (seq, mut ack, f, o, p) = rx(&t);
                if mangle_synack_ack && f & flags::SYN != 0 {
                    ack = ack.wrapping_add(0x1000);
                }
                to_s.extend(c.on_segment(
                    now,
                    &RxSeg {
                        seq,
                        ack,
                        flags: f,
                        options: TcpOptions::parse(&o),
                        payload: &p,
                    },
                ));
            }
        }
        (c, s)
    }

    #[test]
    fn clean_conversation_completes() {
        let (c, s) = converse(false, 0);
        assert!(
            c.failures.is_empty() && s.failures.is_empty(),
            "{:?} {:?}",
            c.failures,
            s.failures
        );
        assert!(c.is_done() && s.is_done());
        assert_eq!((c.recv_got, s.recv_got), (2500, 4321));
    }

    #[test]
    fn lossy_conversation_completes() {
        for k in [3, 5, 7] {
            let (c, s) = converse(false, k);
            assert!(
                c.failures.is_empty() && s.failures.is_empty(),
                "{k}: {:?} {:?}",
                c.failures,
                s.failures
            );
            assert!(c.is_done() && s.is_done(), "{k}");
            assert!(c.retransmissions + s.retransmissions > 0);
        }
    }

    #[test]
    fn untranslated_synack_is_detected() {
        let (c, _) = converse(true, 0);
        assert!(
            c.failures.iter().any(|f| f.contains("not translated back")),
            "{:?}",
            c.failures
        );
        assert!(!c.is_done());
    }

    #[test]
    fn pattern_detects_corruption() {
        let mut v = Vec::new();
        fill_pattern(&mut v, 3, 1, 0, 100, 50);
        assert_eq!(check_pattern(&v, 3, 1, 0, 100), None);
        v[10] ^= 1;
        assert_eq!(check_pattern(&v, 3, 1, 0, 100), Some(110));
        let p = udp_payload(9, 2, 0, 30);
        assert_eq!(check_udp_payload(&p), Ok((9, 2, 0)));
    }
}
