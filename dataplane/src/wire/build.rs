//! Frame builders for tests, benchmarks, fuzz seeds and the simulator.
//!
//! These allocate (`Vec<u8>`) and are not for the packet path. Every frame
//! they produce is well-formed — correct lengths and checksums — and goes
//! through the same wire views (`emit`/setters) that the pipeline uses, so a
//! builder bug shows up as a wire-view test failure too.

use super::arp::{ArpRepr, Operation, PACKET_LEN as ARP_LEN};
use super::ethernet::{emit_header, ethertype};
use super::icmp::Icmpv4Packet;
use super::ipv4::{Ipv4Packet, Ipv4Repr, MIN_HEADER_LEN};
use super::tcp::TcpPacket;
use super::udp::UdpPacket;
use crate::types::ip_proto;
use std::net::Ipv4Addr;

/// Ethernet + IPv4 header parameters shared by the L4 builders.
#[derive(Copy, Clone, Debug)]
pub struct PacketBuilder {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub vlan: Option<u16>,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub ttl: u8,
    pub ident: u16,
    pub dont_frag: bool,
}

impl PacketBuilder {
    pub fn new(src_mac: [u8; 6], dst_mac: [u8; 6], src: Ipv4Addr, dst: Ipv4Addr) -> Self {
        PacketBuilder {
            src_mac,
            dst_mac,
            vlan: None,
            src,
            dst,
            ttl: 64,
            ident: 1,
            dont_frag: true,
        }
    }
    pub fn vlan(mut self, vlan: Option<u16>) -> Self {
        self.vlan = vlan;
        self
    }
    pub fn ttl(mut self, ttl: u8) -> Self {
        self.ttl = ttl;
        self
    }
    /// Ethernet + IPv4 header around `l4` (whose checksum the caller filled).
    pub fn ip(&self, protocol: u8, l4: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; 18 + MIN_HEADER_LEN + l4.len()];
        let l2 = emit_header(
            &mut v,
            self.dst_mac,
            self.src_mac,
            self.vlan,
            ethertype::IPV4,
        );
        v.truncate(l2 + MIN_HEADER_LEN + l4.len());
        Ipv4Repr {
            src: self.src,
            dst: self.dst,
            protocol,
            ttl: self.ttl,
            ident: self.ident,
            dont_frag: self.dont_frag,
            payload_len: l4.len() as u16,
        }
        .emit(&mut v[l2..]);
        v[l2 + MIN_HEADER_LEN..].copy_from_slice(l4);
        v
    }
    /// A TCP segment; `options` must be a multiple of 4 bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn tcp(
        &self,
        sport: u16,
        dport: u16,
        seq: u32,
        ack: u32,
        flags: u8,
        window: u16,
        options: &[u8],
        payload: &[u8],
    ) -> Vec<u8> {
        let hl = 20 + options.len();
        let mut seg = vec![0u8; hl + payload.len()];
        seg[20..hl].copy_from_slice(options);
        seg[hl..].copy_from_slice(payload);
        let mut t = TcpPacket::new_unchecked(&mut seg[..]);
        t.set_src_port(sport);
        t.set_dst_port(dport);
        t.set_seq(seq);
        t.set_ack(ack);
        t.set_header_len(hl);
        t.set_flags(flags);
        t.set_window(window);
        t.fill_checksum(self.src, self.dst);
        self.ip(ip_proto::TCP, &seg)
    }
    pub fn udp(&self, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut d = vec![0u8; 8 + payload.len()];
        d[8..].copy_from_slice(payload);
        let mut u = UdpPacket::new_unchecked(&mut d[..]);
        u.set_src_port(sport);
        u.set_dst_port(dport);
        u.set_len((8 + payload.len()) as u16);
        u.fill_checksum(self.src, self.dst);
        self.ip(ip_proto::UDP, &d)
    }
    /// An ICMP message; for echo `rest` is (ident, seq), otherwise the
    /// second header word (zero for errors).
    pub fn icmp(&self, msg_type: u8, code: u8, rest: (u16, u16), body: &[u8]) -> Vec<u8> {
        let mut m = vec![0u8; 8 + body.len()];
        m[8..].copy_from_slice(body);
        let mut p = Icmpv4Packet::new_unchecked(&mut m[..]);
        p.set_msg_type(msg_type);
        p.set_code(code);
        p.set_echo_ident(rest.0);
        p.set_echo_seq(rest.1);
        p.fill_checksum();
        self.ip(ip_proto::ICMP, &m)
    }
}

/// An Ethernet/IPv4 ARP frame (42 bytes untagged, not padded).
#[allow(clippy::too_many_arguments)]
pub fn arp(
    eth_src: [u8; 6],
    eth_dst: [u8; 6],
    vlan: Option<u16>,
    operation: Operation,
    sender_mac: [u8; 6],
    sender_ip: Ipv4Addr,
    target_mac: [u8; 6],
    target_ip: Ipv4Addr,
) -> Vec<u8> {
    let mut v = vec![0u8; 18 + ARP_LEN];
    let l2 = emit_header(&mut v, eth_dst, eth_src, vlan, ethertype::ARP);
    ArpRepr {
        operation,
        sender_mac,
        sender_ip,
        target_mac,
        target_ip,
    }
    .emit(&mut v[l2..]);
    v.truncate(l2 + ARP_LEN);
    v
}

/// Parse a frame back enough to check it in tests: the IPv4 view offset.
pub fn ipv4_offset(frame: &[u8]) -> Option<usize> {
    let e = super::ethernet::EthernetFrame::new_checked(frame).ok()?;
    (e.ethertype() == ethertype::IPV4 && Ipv4Packet::new_checked(e.payload()).is_ok())
        .then(|| e.header_len())
}
