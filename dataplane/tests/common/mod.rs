//! Shared test bed for the pipeline tests: the example configuration
//! (config/examples/node.yaml) plus a tagged "dmz" interface, the hosts
//! around it, and frame builders bound to them.
#![allow(dead_code)]

use dataplane::conntrack::Timeouts;
use dataplane::pipeline::{InterfaceSpec, Pipeline, PipelineConfig, RouteSpec, RuleSpec};
use dataplane::wire::arp::Operation;
use dataplane::wire::build::{self, PacketBuilder};
use dataplane::{Duration, PortId};
use std::net::Ipv4Addr;

pub const IN_PORT: PortId = PortId(0);
pub const OUT_PORT: PortId = PortId(1);
pub const DMZ_PORT: PortId = PortId(2);
pub const DMZ_VLAN: u16 = 10;

pub const IN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x01];
pub const OUT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x02, 0x01];
pub const DMZ_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x03, 0x01];
pub const IN_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
pub const OUT_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 1);
pub const DMZ_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 3, 1);

/// Inside host.
pub const HOST: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 10);
pub const HOST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x0a];
/// Outside gateway (the default route's next hop).
pub const GW: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 254);
pub const GW_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x02, 0xfe];
/// DMZ host (VLAN 10).
pub const DMZ_HOST: Ipv4Addr = Ipv4Addr::new(198, 18, 3, 10);
pub const DMZ_HOST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x03, 0x0a];
/// Somewhere on the Internet.
pub const SERVER: Ipv4Addr = Ipv4Addr::new(93, 184, 216, 34);

/// Timeouts short enough for a random run to see flows expire (the
/// equivalence tests).
pub fn short_timeouts() -> Timeouts {
    Timeouts {
        tcp_syn: Duration::from_secs(10),
        tcp_established: Duration::from_secs(60),
        tcp_closing: Duration::from_secs(20),
        tcp_closed: Duration::from_secs(5),
        udp: Duration::from_secs(20),
        icmp: Duration::from_secs(5),
        other: Duration::from_secs(10),
    }
}

pub fn config() -> PipelineConfig {
    let any = None;
    PipelineConfig {
        interfaces: vec![
            InterfaceSpec {
                name: "inside".into(),
                port: IN_PORT,
                mac: IN_MAC,
                addr: IN_ADDR,
                prefix_len: 24,
                security_level: 100,
                vlan: None,
                mtu: 1500,
                reverse_path: dataplane::pipeline::ReversePath::Strict,
            },
            InterfaceSpec {
                name: "outside".into(),
                port: OUT_PORT,
                mac: OUT_MAC,
                addr: OUT_ADDR,
                prefix_len: 24,
                security_level: 0,
                vlan: None,
                mtu: 1500,
                reverse_path: dataplane::pipeline::ReversePath::Strict,
            },
            InterfaceSpec {
                name: "dmz".into(),
                port: DMZ_PORT,
                mac: DMZ_MAC,
                addr: DMZ_ADDR,
                prefix_len: 24,
                security_level: 50,
                vlan: Some(DMZ_VLAN),
                mtu: 1500,
                reverse_path: dataplane::pipeline::ReversePath::Strict,
            },
        ],
        routes: vec![
            RouteSpec {
                destination: Ipv4Addr::UNSPECIFIED,
                prefix_len: 0,
                via: GW,
            },
            RouteSpec {
                destination: Ipv4Addr::new(203, 0, 113, 0),
                prefix_len: 24,
                via: Ipv4Addr::new(198, 18, 1, 254),
            },
        ],
        rules: vec![
            RuleSpec {
                name: "web-in".into(),
                permit: true,
                interface: Some("outside".into()),
                protocol: Some(6),
                src: any,
                dst: Some((HOST.into(), 32)),
                src_ports: (0, 65535),
                dst_ports: (80, 80),
            },
            RuleSpec {
                name: "no-telnet".into(),
                permit: false,
                interface: None,
                protocol: Some(6),
                src: any,
                dst: any,
                src_ports: (0, 65535),
                dst_ports: (23, 23),
            },
        ],
        timeouts: Timeouts::default(),
        flow_capacity: 1024,
        arp_capacity: 64,
        arp_timeout: Duration::from_secs(300),
        arp_retry: Duration::from_secs(1),
        static_neighbors: vec![],
        icmp_errors: Default::default(),
        cluster: None,
    }
}

pub fn pipeline() -> Pipeline {
    Pipeline::new(config()).expect("example config is valid")
}

/// Frames from the inside host to the firewall's inside MAC.
pub fn from_host(dst: Ipv4Addr) -> PacketBuilder {
    PacketBuilder::new(HOST_MAC, IN_MAC, HOST, dst)
}
/// Frames arriving from the outside gateway.
pub fn from_outside(src: Ipv4Addr, dst: Ipv4Addr) -> PacketBuilder {
    PacketBuilder::new(GW_MAC, OUT_MAC, src, dst)
}
/// Frames from the DMZ host (tagged VLAN 10).
pub fn from_dmz(dst: Ipv4Addr) -> PacketBuilder {
    PacketBuilder::new(DMZ_HOST_MAC, DMZ_MAC, DMZ_HOST, dst).vlan(Some(DMZ_VLAN))
}

/// Linux-like SYN options: MSS 1460, SACK-permitted, NOP, window scale 7.
pub const SYN_OPTS: [u8; 12] = [2, 4, 0x05, 0xb4, 4, 2, 1, 1, 1, 3, 3, 7];

pub fn arp_request(
    eth_src: [u8; 6],
    vlan: Option<u16>,
    sender_mac: [u8; 6],
    sender_ip: Ipv4Addr,
    target_ip: Ipv4Addr,
) -> Vec<u8> {
    build::arp(
        eth_src,
        [0xff; 6],
        vlan,
        Operation::Request,
        sender_mac,
        sender_ip,
        [0; 6],
        target_ip,
    )
}

pub fn arp_reply(
    eth_src: [u8; 6],
    eth_dst: [u8; 6],
    vlan: Option<u16>,
    sender_ip: Ipv4Addr,
    target_mac: [u8; 6],
    target_ip: Ipv4Addr,
) -> Vec<u8> {
    build::arp(
        eth_src,
        eth_dst,
        vlan,
        Operation::Reply,
        eth_src,
        sender_ip,
        target_mac,
        target_ip,
    )
}

/// The ICMP error the node sends about `offending` (an untagged Ethernet
/// frame as it arrived): from `our_ip` / `our_mac` back to the datagram's
/// source at `to_mac`, TTL 64, DF, identification 0, quoting the datagram
/// (at most 548 bytes, so the error is at most 576), with `word` as the
/// header's second word (the next-hop MTU of "fragmentation needed").
pub fn icmp_error_frame(
    offending: &[u8],
    our_mac: [u8; 6],
    our_ip: Ipv4Addr,
    to_mac: [u8; 6],
    msg_type: u8,
    code: u8,
    word: u16,
) -> Vec<u8> {
    let l3 = &offending[14..];
    let ip = dataplane::wire::ipv4::Ipv4Packet::new_checked(l3).expect("an IPv4 frame");
    let quoted = &l3[..usize::from(ip.total_len()).min(548)];
    let mut b = PacketBuilder::new(our_mac, to_mac, our_ip, ip.src());
    b.ident = 0;
    b.icmp(msg_type, code, (0, word), quoted)
}
