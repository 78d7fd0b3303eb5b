//! A flow's complete conntrack state as a fixed-size `Copy` value, and its
//! wire form: what an owner hands to its director and backups in every
//! flow record, and what a node taking a connection over installs
//! (SPEC R9, R11; docs/failover.md).
//!
//! [`ConnTable::export`](super::ConnTable::export) reads a live flow into a
//! [`FlowState`]; [`ConnTable::install`](super::ConnTable::install)
//! creates (or replaces) the flow of a tuple from one. An exact install
//! behaves, packet for packet, as the flow it was exported from
//! (`tests::export_install_same_verdicts`). A record may be stale — the
//! owner sends one per state change and refresh, not per segment — so the
//! cluster installs [`FlowState::resync`]ed states: each TCP direction
//! re-learns its edges from its first segment (`tcp.rs`, "Resync").
//!
//! Wire form ([`FlowState::LEN`] = 44 bytes, network byte order):
//!
//! | off | len | field |
//! | --- | --- | --- |
//! | 0 | 1 | class: 0 TCP, 1 UDP, 2 ICMP echo, 3 other |
//! | 1 | 1 | TCP state (`TcpState as u8`; 0 for other classes) |
//! | 2 | 1 | flags: bit 0 = simultaneous open; bit 1 = SYN proxy connecting, bit 2 = SYN proxy spliced (not both); other bits 0 |
//! | 3 | 1 | reserved, 0 |
//! | 4 | 4 | idle age at export, ms (saturating) |
//! | 8 | 4 | initiator's ISS |
//! | 12 | 14 | original-direction peer: end (4), maxend (4), maxwin (4), scale (1), flags (1) |
//! | 26 | 14 | reply-direction peer, the same |
//! | 40 | 4 | SYN proxy: the cookie (connecting) or the server-side sequence delta (spliced); 0 if not proxied |
//!
//! For a class other than TCP bytes 1..44 but the idle age are 0.
//!
//! Invariants: `from_bytes(to_bytes(s)) == s` for every state; decoding
//! checks every field (class, state, flag bits, scale ≤ 14, zero padding),
//! so bytes from the network either give a state the table could have
//! produced itself or an error; nothing allocates or panics.

use super::tcp::{self, Peer, ProxyStage, SeqNumber, TcpConn, TcpParts, TcpState, MAX_WSCALE};
use super::{Class, FlowKind};
use crate::types::Duration;

/// A flow's state, as exported from or installed into a `ConnTable`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlowState {
    pub(super) kind: FlowKind,
    /// Time since the flow's last accepted packet, at export.
    pub(super) idle: Duration,
    /// A proxied TCP connection's sequence value (`ConnTable::proxy_seq`:
    /// the cookie while connecting, the server-side delta once spliced);
    /// 0 otherwise.
    pub(super) proxy_seq: u32,
}

/// Why bytes are not a `FlowState`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlowStateError {
    #[error("flow state: need {0} bytes")]
    Length(usize),
    #[error("flow state: invalid {0}")]
    Field(&'static str),
}

mod off {
    pub const CLASS: usize = 0;
    pub const STATE: usize = 1;
    pub const FLAGS: usize = 2;
    pub const RESERVED: usize = 3;
    pub const IDLE: usize = 4;
    pub const ISS: usize = 8;
    pub const PEERS: [usize; 2] = [12, 26];
    /// Within a peer.
    pub const END: usize = 0;
    pub const MAXEND: usize = 4;
    pub const MAXWIN: usize = 8;
    pub const SCALE: usize = 12;
    pub const PEER_FLAGS: usize = 13;
    pub const PROXY_SEQ: usize = 40;
}

const F_SIMULTANEOUS: u8 = 0x01;
/// The SYN proxy opened the connection and waits for the server.
const F_PROXY_CONNECTING: u8 = 0x02;
/// The SYN proxy spliced the connection.
const F_PROXY_SPLICED: u8 = 0x04;

const TCP_STATES: [TcpState; 7] = [
    TcpState::SynSent,
    TcpState::SynReceived,
    TcpState::Established,
    TcpState::FinWait,
    TcpState::Closing,
    TcpState::TimeWait,
    TcpState::Closed,
];

fn put32(out: &mut [u8], at: usize, v: u32) {
    if let Some(d) = out.get_mut(at..at + 4) {
        d.copy_from_slice(&v.to_be_bytes()); // layout: allow(offset) a flow-state field, not a header
    }
}

fn get32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_be_bytes(a) // layout: allow(offset) a flow-state field, not a header
}

fn byte(b: &[u8], at: usize) -> u8 {
    b.get(at).copied().unwrap_or(0)
}

impl FlowState {
    /// Bytes of the wire form.
    pub const LEN: usize = 44;

    /// The TCP state, `None` for a flow of another class.
    pub fn tcp_state(&self) -> Option<TcpState> {
        match &self.kind {
            FlowKind::Tcp(c) => Some(c.state),
            _ => None,
        }
    }

    /// The TCP connection, `None` for a flow of another class.
    pub fn tcp(&self) -> Option<&TcpConn> {
        match &self.kind {
            FlowKind::Tcp(c) => Some(c),
            _ => None,
        }
    }

    /// Time since the flow's last accepted packet, when it was exported.
    pub fn idle(&self) -> Duration {
        self.idle
    }

    /// The same state, marked so that each TCP direction re-learns its
    /// edges from its first segments (`tcp.rs`, "Resync"); for a record
    /// that may be older than the connection. No-op for other classes.
    pub fn resync(mut self) -> FlowState {
        if let FlowKind::Tcp(c) = &mut self.kind {
            c.resync();
        }
        self
    }

    pub(super) fn class(&self) -> Class {
        match self.kind {
            FlowKind::Tcp(_) => Class::Tcp,
            FlowKind::Udp => Class::Udp,
            FlowKind::IcmpEcho => Class::IcmpEcho,
            FlowKind::Other => Class::Other,
        }
    }

    /// The wire form (module docs).
    pub fn to_bytes(&self) -> [u8; FlowState::LEN] {
        let mut out = [0u8; FlowState::LEN];
        out[off::CLASS] = self.class() as u8;
        put32(&mut out, off::IDLE, (self.idle.0 / 1_000_000).min(u64::from(u32::MAX)) as u32);
        if let FlowKind::Tcp(c) = &self.kind {
            let p = c.parts();
            out[off::STATE] = p.state as u8;
            let proxy = match p.proxy {
                ProxyStage::None => 0,
                ProxyStage::Connecting => F_PROXY_CONNECTING,
                ProxyStage::Spliced => F_PROXY_SPLICED,
            };
            out[off::FLAGS] = if p.simultaneous { F_SIMULTANEOUS } else { 0 } | proxy;
            if p.proxy != ProxyStage::None {
                put32(&mut out, off::PROXY_SEQ, self.proxy_seq);
            }
            put32(&mut out, off::ISS, p.iss.0);
            for (peer, &at) in p.peers.iter().zip(off::PEERS.iter()) {
                put32(&mut out, at + off::END, peer.end.0);
                put32(&mut out, at + off::MAXEND, peer.maxend.0);
                put32(&mut out, at + off::MAXWIN, peer.maxwin);
                out[at + off::SCALE] = peer.scale;
                out[at + off::PEER_FLAGS] = peer.flags();
            }
        }
        out
    }

    /// Decode and validate the wire form; `b` must be exactly `LEN` bytes.
    pub fn from_bytes(b: &[u8]) -> Result<FlowState, FlowStateError> {
        if b.len() != FlowState::LEN {
            return Err(FlowStateError::Length(FlowState::LEN));
        }
        let idle = Duration::from_millis(u64::from(get32(b, off::IDLE)));
        if byte(b, off::RESERVED) != 0 {
            return Err(FlowStateError::Field("reserved byte"));
        }
        let kind = match byte(b, off::CLASS) {
            0 => FlowKind::Tcp(Self::tcp_from_bytes(b)?),
            c @ 1..=3 => {
                if b.iter().enumerate().any(|(i, &x)| x != 0 && i != off::CLASS && !(off::IDLE..off::IDLE + 4).contains(&i)) {
                    return Err(FlowStateError::Field("non-TCP padding"));
                }
                match c {
                    1 => FlowKind::Udp,
                    2 => FlowKind::IcmpEcho,
                    _ => FlowKind::Other,
                }
            }
            _ => return Err(FlowStateError::Field("class")),
        };
        let proxy_seq = get32(b, off::PROXY_SEQ);
        if proxy_seq != 0 && !matches!(&kind, FlowKind::Tcp(c) if c.proxy != ProxyStage::None) {
            return Err(FlowStateError::Field("proxy sequence without a proxied connection"));
        }
        Ok(FlowState { kind, idle, proxy_seq })
    }

    fn tcp_from_bytes(b: &[u8]) -> Result<TcpConn, FlowStateError> {
        let code = byte(b, off::STATE);
        let state = *TCP_STATES.iter().find(|s| **s as u8 == code).ok_or(FlowStateError::Field("TCP state"))?;
        let flags = byte(b, off::FLAGS);
        if flags & !(F_SIMULTANEOUS | F_PROXY_CONNECTING | F_PROXY_SPLICED) != 0 {
            return Err(FlowStateError::Field("flags"));
        }
        let proxy = match flags & (F_PROXY_CONNECTING | F_PROXY_SPLICED) {
            0 => ProxyStage::None,
            F_PROXY_CONNECTING => ProxyStage::Connecting,
            F_PROXY_SPLICED => ProxyStage::Spliced,
            _ => return Err(FlowStateError::Field("proxy stage")),
        };
        let mut peers = [Peer::default(); 2];
        for (peer, &at) in peers.iter_mut().zip(off::PEERS.iter()) {
            let scale = byte(b, at + off::SCALE);
            let pf = byte(b, at + off::PEER_FLAGS);
            if scale > MAX_WSCALE {
                return Err(FlowStateError::Field("window scale"));
            }
            if pf & !tcp::PEER_FLAGS != 0 {
                return Err(FlowStateError::Field("peer flags"));
            }
            *peer = Peer::from_parts(
                SeqNumber(get32(b, at + off::END)),
                SeqNumber(get32(b, at + off::MAXEND)),
                get32(b, at + off::MAXWIN),
                scale,
                pf,
            );
        }
        Ok(TcpConn::from_parts(TcpParts {
            state,
            simultaneous: flags & F_SIMULTANEOUS != 0,
            proxy,
            iss: SeqNumber(get32(b, off::ISS)),
            peers,
        }))
    }
}
