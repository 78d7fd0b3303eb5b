//! The responder: the far end of `tcp` and `cps` runs, stateless.
//!
//! It answers a SYN with a SYN-ACK, data with an ACK, a FIN with a FIN-ACK,
//! UDP with the same datagram sent back (when echo is on) and ARP requests
//! for its address — just enough TCP for a stateful firewall in between to
//! see complete, window-correct connections. It keeps no per-connection
//! state: its initial sequence number is a hash of the 4-tuple, so every
//! reply of a connection uses the same numbers ([`isn`]). Replies go back to
//! the MAC the frame came from, with addresses and ports swapped.

use super::packet::{self, Endpoints, Parsed};
use dataplane::conntrack::tcp_flags::{ACK, FIN, RST, SYN};
use std::net::Ipv4Addr;

/// The window the responder advertises (no window scaling).
pub const WINDOW: u16 = 65535;

/// The responder's ISN for a connection (from the client's point of view:
/// client address/port, server address/port).
pub fn isn(client: Ipv4Addr, cport: u16, server: Ipv4Addr, sport: u16) -> u32 {
    // FNV-1a over the tuple: stable, cheap, spreads well enough.
    let mut h: u32 = 0x811c_9dc5;
    for b in client
        .octets()
        .into_iter()
        .chain(cport.to_be_bytes())
        .chain(server.octets())
        .chain(sport.to_be_bytes())
    {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// What the responder did with a frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    None,
    Arp,
    SynAck,
    Ack,
    FinAck,
    Echo,
}

/// Responder settings.
#[derive(Copy, Clone, Debug)]
pub struct Responder {
    pub mac: [u8; 6],
    pub ip: Ipv4Addr,
    /// Addresses answered in ARP: `ip` and the `ip_count - 1` after it
    /// (servers the responder stands in for; 0 or 1 = `ip` alone).
    pub ip_count: u32,
    /// Send UDP datagrams back (for round-trip latency).
    pub echo_udp: bool,
}

impl Responder {
    /// The answer to `frame` (written to `out`, which is cleared first).
    pub fn answer(&self, frame: &[u8], out: &mut Vec<u8>) -> Answer {
        out.clear();
        if frame.len() < 14 {
            return Answer::None;
        }
        let peer_mac: [u8; 6] = frame[6..12].try_into().unwrap_or([0; 6]);
        match packet::parse(frame) {
            Parsed::Arp { .. } => match packet::arp_reply_range(frame, self.mac, self.ip, self.ip_count) {
                Some(f) => {
                    *out = f;
                    Answer::Arp
                }
                None => Answer::None,
            },
            Parsed::Tcp { src, dst, sport, dport, seq, flags, payload_len, .. } => {
                if flags & RST != 0 {
                    return Answer::None;
                }
                let ep = Endpoints { src_mac: self.mac, dst_mac: peer_mac, src: dst, dst: src };
                let my_isn = isn(src, sport, dst, dport);
                let (reply_seq, reply_ack, reply_flags, what) = if flags & SYN != 0 {
                    (my_isn, seq.wrapping_add(1), SYN | ACK, Answer::SynAck)
                } else if flags & FIN != 0 {
                    (
                        my_isn.wrapping_add(1),
                        seq.wrapping_add(payload_len).wrapping_add(1),
                        FIN | ACK,
                        Answer::FinAck,
                    )
                } else if payload_len > 0 {
                    (my_isn.wrapping_add(1), seq.wrapping_add(payload_len), ACK, Answer::Ack)
                } else {
                    return Answer::None;
                };
                *out = packet::tcp_frame(
                    &ep, dport, sport, reply_seq, reply_ack, reply_flags, WINDOW, 0, None,
                );
                what
            }
            Parsed::Udp { .. } if self.echo_udp => {
                if frame.len() < packet::L4_OFFSET + 8 {
                    return Answer::None;
                }
                out.extend_from_slice(frame);
                swap_udp(out, self.mac);
                Answer::Echo
            }
            _ => Answer::None,
        }
    }
}

/// Turns a UDP frame around in place: MACs, addresses, ports (the IPv4
/// checksum is unchanged by swapping its two address words; the UDP
/// checksum likewise).
pub fn swap_udp(f: &mut [u8], my_mac: [u8; 6]) {
    let (dst, src) = f[..12].split_at_mut(6);
    dst.copy_from_slice(src);
    src.copy_from_slice(&my_mac);
    let l3 = packet::L3_OFFSET;
    for i in 0..4 {
        f.swap(l3 + 12 + i, l3 + 16 + i);
    }
    let l4 = packet::L4_OFFSET;
    for i in 0..2 {
        f.swap(l4 + i, l4 + 2 + i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pktgen::packet::{tcp_frame, udp_frame, Stamp};
    use dataplane::wire::ipv4::Ipv4Packet;

    const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    fn client() -> Endpoints {
        Endpoints {
            src_mac: CLIENT_MAC,
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: Ipv4Addr::new(198, 18, 1, 10),
            dst: Ipv4Addr::new(198, 18, 2, 10),
        }
    }
    fn r() -> Responder {
        Responder { mac: [2, 0, 0, 0, 0, 3], ip: Ipv4Addr::new(198, 18, 2, 10), ip_count: 1, echo_udp: true }
    }

    fn tcp_of(f: &[u8]) -> (u16, u16, u32, u32, u8) {
        match packet::parse(f) {
            Parsed::Tcp { sport, dport, seq, ack, flags, .. } => (sport, dport, seq, ack, flags),
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn a_whole_connection() {
        let c = client();
        let mut out = Vec::new();
        let i = isn(c.src, 40000, c.dst, 80);
        let syn = tcp_frame(&c, 40000, 80, 1000, 0, SYN, 64240, 0, None);
        assert_eq!(r().answer(&syn, &mut out), Answer::SynAck);
        assert_eq!(tcp_of(&out), (80, 40000, i, 1001, SYN | ACK));
        assert_eq!(&out[0..6], &CLIENT_MAC);
        let ip = Ipv4Packet::new_checked(&out[14..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!((ip.src(), ip.dst()), (c.dst, c.src));

        let ack = tcp_frame(&c, 40000, 80, 1001, i + 1, ACK, 64240, 0, None);
        assert_eq!(r().answer(&ack, &mut out), Answer::None);
        let data = tcp_frame(&c, 40000, 80, 1001, i + 1, ACK, 64240, 100, Some(Stamp { seq: 0, tsc: 1 }));
        assert_eq!(r().answer(&data, &mut out), Answer::Ack);
        assert_eq!(tcp_of(&out), (80, 40000, i + 1, 1101, ACK));
        let fin = tcp_frame(&c, 40000, 80, 1101, i + 1, FIN | ACK, 64240, 0, None);
        assert_eq!(r().answer(&fin, &mut out), Answer::FinAck);
        assert_eq!(tcp_of(&out), (80, 40000, i + 1, 1102, FIN | ACK));
        let rst = tcp_frame(&c, 40000, 80, 1102, 0, RST, 0, 0, None);
        assert_eq!(r().answer(&rst, &mut out), Answer::None);
    }

    #[test]
    fn udp_echo_swaps_everything() {
        let c = client();
        let f = udp_frame(&c, 1111, 2222, 64);
        let mut out = Vec::new();
        assert_eq!(r().answer(&f, &mut out), Answer::Echo);
        match packet::parse(&out) {
            Parsed::Udp { src, dst, sport, dport, stamp } => {
                assert_eq!((src, dst, sport, dport), (c.dst, c.src, 2222, 1111));
                assert!(stamp.is_some());
            }
            p => panic!("{p:?}"),
        }
        assert!(Ipv4Packet::new_checked(&out[14..]).unwrap().verify_checksum());
        assert_eq!(&out[0..6], &CLIENT_MAC);
        let quiet = Responder { echo_udp: false, ..r() };
        assert_eq!(quiet.answer(&f, &mut out), Answer::None);
    }

    #[test]
    fn arp_and_garbage() {
        let mut out = Vec::new();
        let req = packet::arp_request(CLIENT_MAC, Ipv4Addr::new(198, 18, 2, 1), r().ip);
        assert_eq!(r().answer(&req, &mut out), Answer::Arp);
        assert_eq!(r().answer(&[0u8; 10], &mut out), Answer::None);
        assert!(out.is_empty());
    }
}
