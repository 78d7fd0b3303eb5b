//! The conntrack side of the SYN proxy (TCP intercept; docs/flood.md, "SYN
//! proxy"): a connection opened by [`ConnTable::open_proxied`] after the
//! client returned a valid cookie (`synproxy`), from the server's answer to
//! the end of the connection.
//!
//! The client numbers the server's bytes from the cookie `C` it was sent as
//! the server's ISN; the server numbers them from its own ISN `S`. Once the
//! server answers, the connection is *spliced*: `d = C − S` (mod 2^32) is
//! added to every server sequence number on its way to the client and taken
//! from every client acknowledgement (and SACK edge) on its way to the
//! server — the mirror image of the cluster's client-side delta (R6), which
//! still applies on top of it. Conntrack tracks the client's view of both
//! sequence spaces (as it already does for the cluster's delta): a reply
//! segment's `seq` is taken into it before the window checks.
//!
//! ```text
//!  client ──SYN──▶ proxy (limit reached): SYN-ACK seq=C (cookie), no state
//!  client ──ACK ack=C+1──▶ proxy: cookie valid → open_proxied, Connecting;
//!                            the ACK becomes the SYN to the server
//!  server ──SYN-ACK seq=S──▶ proxy: d = C − S, Spliced; the SYN-ACK becomes
//!                            the handshake's last ACK to the server
//!  later: reply seq += d, original ack −= d (`Splice::Xlate`)
//! ```
//!
//! Invariants: a segment is checked against a copy of the connection and
//! nothing changes unless it is accepted (as in `tcp.rs`); while
//! connecting, the client may only reset (its other segments are refused
//! as `syn-proxy-pending` until the server answers: the pipeline holds the
//! first few and decides them again right after the splice,
//! `pipeline::synproxy`; the client retransmits the rest) and the server
//! may only answer with SYN-ACK or RST; the stage only moves forward;
//! nothing allocates or panics. `ConnTable::proxy_connecting` tells the
//! hold whether a connection still waits.
//!
//! [`ConnTable::open_proxied`]: super::ConnTable::open_proxied

use super::tcp::{Accept, ProxyStage, TcpConn};
use super::tcp_flags::{ACK, RST, SYN};
use super::TcpSeg;
use crate::types::{Direction, DropReason};

/// What a packet of a proxied connection needs besides conntrack.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Splice {
    /// Not a proxied connection.
    #[default]
    None,
    /// Translate by the server-side delta: a reply's `seq += d`, an
    /// original packet's `ack −= d` and SACK edges (`seqxlate` with the
    /// directions' roles swapped).
    Xlate(u32),
    /// The client's ACK of a valid cookie opened the connection
    /// (`ConnTable::open_proxied`): in its place the server gets the SYN —
    /// the client's `isn` (the cluster's delta applies), its `window`, MSS
    /// `mss` (what the cookie carried), no other option.
    Opened { isn: u32, window: u16, mss: u16 },
    /// The server's SYN-ACK of a connection the proxy opened: in its place
    /// the server gets the handshake's last ACK — `seq` in the client's
    /// space (the cluster's delta still applies), `ack` in the server's,
    /// the client's `window`. The SYN-ACK itself never reaches the client
    /// (it completed its handshake with the proxy).
    Answered { delta: u32, seq: u32, ack: u32, window: u16 },
}

/// The SYN the proxy sends the server for a client's ACK of a valid cookie
/// (`ack`): the client's ISN and window, no window scaling or SACK (the
/// proxy's SYN-ACK offered neither). The flow starts from it.
pub fn proxy_syn(ack: &TcpSeg) -> TcpSeg {
    TcpSeg { flags: SYN, seq: ack.seq.wrapping_sub(1), ack: 0, window: ack.window, payload_len: 0, wscale: None, sack_permitted: false }
}

/// Feed one segment of a proxied connection (`conn.proxy` not `None`)
/// travelling in `dir`; `seq` is the table's value for it (the cookie
/// while connecting, the delta once spliced) and is updated. On `Err`
/// nothing changed.
pub(super) fn segment(conn: &mut TcpConn, dir: Direction, seg: &TcpSeg, seq: &mut u32) -> Result<(Accept, Splice), DropReason> {
    match (conn.proxy, dir) {
        (ProxyStage::None, _) => Ok((conn.on_segment(dir, seg)?, Splice::None)),
        (ProxyStage::Connecting, Direction::Original) => {
            if seg.flags & RST == 0 {
                return Err(DropReason::SynProxyPending);
            }
            // The client's RST carries its next sequence number: past
            // any request it sent behind its ACK, which the proxy holds
            // (`pipeline::synproxy`) and conntrack never saw. One within
            // the window the proxy's SYN-ACK offered (64 KiB at most,
            // unscaled) resets the connection as if at its first byte; the
            // frame itself is sent on unchanged.
            let first = conn.iss().wrapping_add(1);
            let fed = if seg.seq.wrapping_sub(first) <= u32::from(u16::MAX) { TcpSeg { seq: first, ..*seg } } else { *seg };
            Ok((conn.on_segment(dir, &fed)?, Splice::None))
        }
        (ProxyStage::Connecting, Direction::Reply) => {
            let cookie = *seq;
            let syn_ack = seg.flags & (SYN | ACK) == SYN | ACK;
            // The server's answer numbers its side from S (SYN-ACK: seq S;
            // a refusal, RST|ACK, from S + 1 or 0): the client expects C
            // (C + 1 after the SYN).
            let delta = if syn_ack {
                cookie.wrapping_sub(seg.seq)
            } else if seg.flags & RST != 0 {
                cookie.wrapping_add(1).wrapping_sub(seg.seq)
            } else {
                return Err(DropReason::SynProxyPending);
            };
            let mut c = *conn;
            let s = TcpSeg { seq: seg.seq.wrapping_add(delta), ..*seg };
            let accept = c.on_segment(Direction::Reply, &s)?;
            let splice = if syn_ack {
                // The client's side of the handshake, as it happened with
                // the proxy: its ACK of the cookie, its (unscaled) window.
                let window = c.peers[0].maxwin.min(u32::from(u16::MAX)) as u16;
                let last = TcpSeg {
                    flags: ACK,
                    seq: c.iss().wrapping_add(1),
                    ack: cookie.wrapping_add(1),
                    window,
                    payload_len: 0,
                    wscale: None,
                    sack_permitted: false,
                };
                c.on_segment(Direction::Original, &last)?;
                Splice::Answered { delta, seq: last.seq, ack: seg.seq.wrapping_add(1), window }
            } else {
                Splice::Xlate(delta)
            };
            c.proxy = ProxyStage::Spliced;
            *conn = c;
            *seq = delta;
            Ok((accept, splice))
        }
        (ProxyStage::Spliced, Direction::Reply) => {
            let s = TcpSeg { seq: seg.seq.wrapping_add(*seq), ..*seg };
            Ok((conn.on_segment(dir, &s)?, Splice::Xlate(*seq)))
        }
        (ProxyStage::Spliced, Direction::Original) => Ok((conn.on_segment(dir, seg)?, Splice::Xlate(*seq))),
    }
}
