//! The client side of `tcp` and `cps` runs: a sans-IO TCP connection
//! driver (the DPDK loop feeds it received frames and the TSC, and sends
//! what it asks for).
//!
//! Each connection slot holds one source port at a time, taken from a
//! rotation over `base_sport..=65535`; when its connection closes or times
//! out the slot moves to the next free port and its generation advances,
//! which also moves its destination to `dst + (generation % ndst)`. So a
//! `cps` run reuses a 4-tuple only after cycling through every port (and
//! `ndst` addresses). A reply finds its slot by its destination port in a
//! 64 Ki-entry table.
//!
//! - `Stream` (mode `tcp`): every slot opens one connection (SYN, SYN-ACK,
//!   ACK) and then sends stamped data segments while the responder's
//!   window (65535, no scaling) has room; the responder ACKs each.
//! - `Cps` (mode `cps`): SYN, SYN-ACK, ACK, FIN-ACK, FIN-ACK, ACK, then the
//!   slot starts its next connection at once.
//!
//! The latency recorded is the handshake round trip (SYN sent to SYN-ACK
//! received), in TSC ticks.

use super::packet::{self, Endpoints, Parsed, Stamp};
use super::responder::WINDOW;
use dataplane::conntrack::tcp_flags::{ACK, FIN, PSH, RST, SYN};
use std::collections::VecDeque;
use std::net::Ipv4Addr;

/// The window the client advertises.
pub const CLIENT_WINDOW: u16 = 64240;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    Stream,
    Cps,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum State {
    Idle,
    SynSent,
    Established,
    FinSent,
}

#[derive(Copy, Clone, Debug)]
struct Conn {
    state: State,
    generation: u32,
    snd_nxt: u32,
    snd_una: u32,
    rcv_nxt: u32,
    since: u64,
}

#[derive(Copy, Clone, Debug)]
enum Ctl {
    Ack,
    Fin,
    LastAck,
}

/// Client settings.
#[derive(Copy, Clone, Debug)]
pub struct ClientConfig {
    /// MACs, source address and first destination address.
    pub ep: Endpoints,
    pub dport: u16,
    pub base_sport: u16,
    /// Concurrent connections (slots), at most `65536 - base_sport`.
    pub slots: usize,
    /// Destination addresses cycled through (>= 1).
    pub ndst: u32,
    /// TCP payload bytes per data segment (`Stream`).
    pub payload: usize,
    pub mode: Mode,
    /// TSC ticks after which an unanswered SYN or FIN gives up the slot.
    pub timeout: u64,
}

/// What the client has done.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClientStats {
    pub syn_sent: u64,
    pub established: u64,
    pub completed: u64,
    pub data_segments: u64,
    pub data_bytes: u64,
    pub timeouts: u64,
    pub resets: u64,
    pub unmatched: u64,
}

/// The connection driver.
pub struct TcpClient {
    cfg: ClientConfig,
    conns: Vec<Conn>,
    ctl: VecDeque<(usize, Ctl)>,
    cursor: usize,
    seq: u32,
    /// Per slot: (generation, source port, seq, ack) of the last closed
    /// connection, for its final ACK.
    last_closed: Vec<(u32, u16, u32, u32)>,
    /// Current source port of each slot.
    sports: Vec<u16>,
    /// Port -> slot + 1 (0: not in use).
    port_slot: Vec<u32>,
    next_port: u16,
    pub stats: ClientStats,
}

impl TcpClient {
    pub fn new(mut cfg: ClientConfig) -> Self {
        // Leave at least as many spare ports as slots for the rotation.
        cfg.slots = cfg.slots.clamp(1, (65536 - usize::from(cfg.base_sport)) / 2);
        cfg.ndst = cfg.ndst.max(1);
        let idle = Conn { state: State::Idle, generation: 0, snd_nxt: 0, snd_una: 0, rcv_nxt: 0, since: 0 };
        TcpClient {
            conns: vec![idle; cfg.slots],
            ctl: VecDeque::with_capacity(cfg.slots * 3),
            cursor: 0,
            seq: 0,
            last_closed: vec![(0, 0, 0, 0); cfg.slots],
            sports: (0..cfg.slots).map(|j| cfg.base_sport + j as u16).collect(),
            port_slot: {
                let mut t = vec![0u32; 65536];
                for j in 0..cfg.slots {
                    t[usize::from(cfg.base_sport) + j] = j as u32 + 1;
                }
                t
            },
            next_port: (usize::from(cfg.base_sport) + cfg.slots).min(65535) as u16,
            cfg,
            stats: ClientStats::default(),
        }
    }

    fn dst(&self, j: usize) -> Ipv4Addr {
        let g = self.conns[j].generation % self.cfg.ndst;
        Ipv4Addr::from(u32::from(self.cfg.ep.dst).wrapping_add(g))
    }

    fn sport(&self, j: usize) -> u16 {
        self.sports[j]
    }

    fn ep(&self, j: usize) -> Endpoints {
        Endpoints { dst: self.dst(j), ..self.cfg.ep }
    }

    fn segment(&self, j: usize, seq: u32, flags: u8, payload: usize, stamp: Option<Stamp>) -> Vec<u8> {
        let c = &self.conns[j];
        packet::tcp_frame(&self.ep(j), self.sport(j), self.cfg.dport, seq, c.rcv_nxt, flags, CLIENT_WINDOW, payload, stamp)
    }

    /// Connections currently established.
    pub fn established_now(&self) -> usize {
        self.conns.iter().filter(|c| c.state == State::Established).count()
    }

    /// The next frame to send, if any, written to `out`.
    pub fn next_frame(&mut self, now: u64, out: &mut Vec<u8>) -> bool {
        while let Some((j, ctl)) = self.ctl.pop_front() {
            let c = self.conns[j];
            match ctl {
                Ctl::Ack if c.state == State::Established => {
                    *out = self.segment(j, c.snd_nxt, ACK, 0, None);
                    return true;
                }
                Ctl::Fin if c.state == State::Established => {
                    *out = self.segment(j, c.snd_nxt, FIN | ACK, 0, None);
                    let c = &mut self.conns[j];
                    c.snd_nxt = c.snd_nxt.wrapping_add(1);
                    c.state = State::FinSent;
                    c.since = now;
                    return true;
                }
                Ctl::LastAck => {
                    // The slot already moved on; acknowledge the old
                    // connection's FIN with its own numbers (rcv_nxt is set).
                    *out = self.segment_last_ack(j);
                    return true;
                }
                _ => {}
            }
        }
        let n = self.conns.len();
        for _ in 0..n.min(64) {
            let j = self.cursor;
            self.cursor = if self.cursor + 1 == n { 0 } else { self.cursor + 1 };
            if matches!(self.conns[j].state, State::SynSent | State::FinSent)
                && now.saturating_sub(self.conns[j].since) > self.cfg.timeout
            {
                self.stats.timeouts += 1;
                self.recycle(j);
            }
            let c = self.conns[j];
            match c.state {
                State::Idle => {
                    let isn = 0x1000_0000u32.wrapping_mul(c.generation).wrapping_add((j as u32).wrapping_mul(7919));
                    let conn = &mut self.conns[j];
                    conn.snd_nxt = isn.wrapping_add(1);
                    conn.snd_una = conn.snd_nxt;
                    conn.rcv_nxt = 0;
                    conn.state = State::SynSent;
                    conn.since = now;
                    *out = self.segment(j, isn, SYN, 0, None);
                    self.stats.syn_sent += 1;
                    return true;
                }
                State::Established if self.cfg.mode == Mode::Stream => {
                    let in_flight = c.snd_nxt.wrapping_sub(c.snd_una) as usize;
                    if in_flight + self.cfg.payload <= usize::from(WINDOW) {
                        self.seq = self.seq.wrapping_add(1);
                        let stamp = Stamp { seq: self.seq, tsc: now };
                        *out = self.segment(j, c.snd_nxt, ACK | PSH, self.cfg.payload, Some(stamp));
                        let conn = &mut self.conns[j];
                        conn.snd_nxt = conn.snd_nxt.wrapping_add(self.cfg.payload as u32);
                        self.stats.data_segments += 1;
                        self.stats.data_bytes += self.cfg.payload as u64;
                        return true;
                    }
                }
                _ => {}
            }
        }
        false
    }

    fn segment_last_ack(&self, j: usize) -> Vec<u8> {
        // Built from the parked numbers of the closed connection.
        let (gen, sport, seq, ack) = self.last_closed[j];
        let dst = Ipv4Addr::from(u32::from(self.cfg.ep.dst).wrapping_add(gen % self.cfg.ndst));
        let ep = Endpoints { dst, ..self.cfg.ep };
        packet::tcp_frame(&ep, sport, self.cfg.dport, seq, ack, ACK, CLIENT_WINDOW, 0, None)
    }

    fn recycle(&mut self, j: usize) {
        let c = &mut self.conns[j];
        c.state = State::Idle;
        c.generation = c.generation.wrapping_add(1);
        // Move to the next source port nobody holds (there are more ports
        // than slots, so this ends).
        let old = self.sports[j];
        loop {
            let p = self.next_port;
            self.next_port = if p == u16::MAX { self.cfg.base_sport } else { p + 1 };
            if p == old || self.port_slot[usize::from(p)] == 0 {
                self.port_slot[usize::from(old)] = 0;
                self.port_slot[usize::from(p)] = j as u32 + 1;
                self.sports[j] = p;
                break;
            }
        }
    }

    /// Feeds one received frame; returns the handshake latency (TSC ticks)
    /// when it completed a handshake.
    pub fn on_frame(&mut self, parsed: &Parsed, now: u64) -> Option<u64> {
        let Parsed::Tcp { src, dport, seq, ack, flags, payload_len, .. } = *parsed else {
            return None;
        };
        let Some(j) = self.port_slot[usize::from(dport)].checked_sub(1).map(|j| j as usize) else {
            self.stats.unmatched += 1;
            return None;
        };
        if src != self.dst(j) {
            self.stats.unmatched += 1;
            return None;
        }
        let c = self.conns[j];
        if flags & RST != 0 {
            self.stats.resets += 1;
            self.recycle(j);
            return None;
        }
        match c.state {
            State::SynSent if flags & (SYN | ACK) == SYN | ACK && ack == c.snd_nxt => {
                let conn = &mut self.conns[j];
                conn.rcv_nxt = seq.wrapping_add(1);
                conn.state = State::Established;
                self.stats.established += 1;
                self.ctl.push_back((j, Ctl::Ack));
                if self.cfg.mode == Mode::Cps {
                    self.ctl.push_back((j, Ctl::Fin));
                }
                Some(now.saturating_sub(c.since))
            }
            State::Established if flags & ACK != 0 => {
                if ack.wrapping_sub(c.snd_una) as i32 > 0 && c.snd_nxt.wrapping_sub(ack) as i32 >= 0 {
                    self.conns[j].snd_una = ack;
                }
                None
            }
            State::FinSent if flags & FIN != 0 && ack == c.snd_nxt => {
                let last_ack = seq.wrapping_add(payload_len).wrapping_add(1);
                self.last_closed[j] = (c.generation, self.sports[j], c.snd_nxt, last_ack);
                self.stats.completed += 1;
                self.recycle(j);
                self.ctl.push_back((j, Ctl::LastAck));
                None
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pktgen::responder::{Answer, Responder};

    fn cfg(mode: Mode) -> ClientConfig {
        ClientConfig {
            ep: Endpoints {
                src_mac: [2, 0, 0, 0, 0, 1],
                dst_mac: [2, 0, 0, 0, 0, 2],
                src: Ipv4Addr::new(198, 18, 1, 10),
                dst: Ipv4Addr::new(198, 18, 2, 10),
            },
            dport: 80,
            base_sport: 10000,
            slots: 4,
            ndst: 2,
            payload: 1000,
            mode,
            timeout: 1000,
        }
    }

    /// Runs client and responder against each other, frame by frame,
    /// `rounds` times; returns the flags of every client frame.
    fn converse(c: &mut TcpClient, r: &Responder, rounds: usize, now: u64) -> Vec<u8> {
        let mut sent = Vec::new();
        let (mut f, mut back) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            if !c.next_frame(now, &mut f) {
                break;
            }
            let p = packet::parse(&f);
            if let Parsed::Tcp { flags, .. } = p {
                sent.push(flags);
            }
            if r.answer(&f, &mut back) != Answer::None {
                c.on_frame(&packet::parse(&back), now + 5);
            }
        }
        sent
    }

    fn responder(ip: Ipv4Addr) -> Responder {
        Responder { mac: [2, 0, 0, 0, 0, 3], ip, ip_count: 1, echo_udp: false }
    }

    #[test]
    fn cps_opens_and_closes_with_six_segments() {
        let mut c = TcpClient::new(ClientConfig { slots: 1, ..cfg(Mode::Cps) });
        let r = responder(Ipv4Addr::new(198, 18, 2, 10));
        let flags = converse(&mut c, &r, 4, 0);
        assert_eq!(flags, vec![SYN, ACK, FIN | ACK, ACK]);
        assert_eq!((c.stats.syn_sent, c.stats.established, c.stats.completed), (1, 1, 1));
        // The slot reopens from the next port, towards the next address.
        let mut f = Vec::new();
        assert!(c.next_frame(0, &mut f));
        match packet::parse(&f) {
            Parsed::Tcp { dst, flags, sport, .. } => {
                assert_eq!((dst, flags, sport), (Ipv4Addr::new(198, 18, 2, 11), SYN, 10001));
            }
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn stream_respects_the_window_and_reports_handshake_latency() {
        let mut c = TcpClient::new(ClientConfig { slots: 1, ..cfg(Mode::Stream) });
        let mut f = Vec::new();
        assert!(c.next_frame(100, &mut f));
        let mut back = Vec::new();
        let r = responder(Ipv4Addr::new(198, 18, 2, 10));
        assert_eq!(r.answer(&f, &mut back), Answer::SynAck);
        assert_eq!(c.on_frame(&packet::parse(&back), 130), Some(30));
        assert_eq!(c.established_now(), 1);
        // Without ACKs the client stops at the window: 65 segments of 1000.
        let mut sent = 0;
        while c.next_frame(200, &mut f) {
            sent += 1;
            assert!(sent < 1000);
        }
        assert_eq!(sent, 1 + 65); // the handshake ACK + data
        assert_eq!(c.stats.data_bytes, 65_000);
        // An ACK of everything reopens the window.
        assert_eq!(r.answer(&f, &mut back), Answer::Ack);
        c.on_frame(&packet::parse(&back), 300);
        assert!(c.next_frame(300, &mut f));
    }

    #[test]
    fn unanswered_syns_time_out_and_strays_are_counted() {
        let mut c = TcpClient::new(ClientConfig { slots: 2, ..cfg(Mode::Cps) });
        let mut f = Vec::new();
        assert!(c.next_frame(0, &mut f));
        assert!(c.next_frame(0, &mut f));
        assert!(!c.next_frame(10, &mut f));
        assert!(c.next_frame(5000, &mut f)); // slot 0 times out and reopens
        assert!(c.next_frame(5000, &mut f)); // slot 1 likewise
        assert_eq!(c.stats.timeouts, 2);
        assert_eq!(c.stats.syn_sent, 4);
        let stray = packet::tcp_frame(
            &Endpoints { src: Ipv4Addr::new(1, 1, 1, 1), dst: Ipv4Addr::new(198, 18, 1, 10), ..cfg(Mode::Cps).ep },
            80, 10000, 1, 1, SYN | ACK, 1, 0, None,
        );
        c.on_frame(&packet::parse(&stray), 0);
        let out_of_range = packet::tcp_frame(&cfg(Mode::Cps).ep, 80, 9999, 1, 1, ACK, 1, 0, None);
        c.on_frame(&packet::parse(&out_of_range), 0);
        assert_eq!(c.stats.unmatched, 2);
    }

    #[test]
    fn many_slots_all_complete() {
        let mut c = TcpClient::new(ClientConfig { slots: 100, ndst: 7, ..cfg(Mode::Cps) });
        let r = responder(Ipv4Addr::new(198, 18, 2, 10));
        converse(&mut c, &r, 10_000, 0);
        assert!(c.stats.completed >= 2000, "{:?}", c.stats);
        assert_eq!(c.stats.timeouts + c.stats.resets + c.stats.unmatched, 0);
        // Ports rotate: no port is held by two slots, each slot's is mapped.
        let mut seen = std::collections::HashSet::new();
        for (j, &p) in c.sports.iter().enumerate() {
            assert!(seen.insert(p));
            assert_eq!(c.port_slot[usize::from(p)], j as u32 + 1);
        }
        assert_eq!(c.port_slot.iter().filter(|&&x| x != 0).count(), 100);
    }
}
