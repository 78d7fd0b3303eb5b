//! Ingress: what a frame is at layer 2, and the frames the node answers
//! itself.
//!
//! - **Ethernet**: header and up to two VLAN tags (`EthTruncated`); the
//!   (port, VLAN) pair selects the ingress interface (`NoInterface`; QinQ
//!   frames never match, the configuration cannot express them); the
//!   destination MAC must be the interface's or broadcast (`EthNotForUs`);
//!   EtherType ARP / IPv4 / IPv6 (`EthUnsupportedType`).
//! - **ARP** (RFC 826): requests for the ingress interface's address are
//!   turned into replies in place; the sender is learnt (through the egress
//!   stage, which owns the ARP cache) when the packet is addressed to us
//!   and the sender is inside the interface subnet; others only refresh
//!   existing entries (`ArpMalformed`, `ArpConsumed`, `ArpNotForUs`).
//! - **IPv6** is classified and counted, its header checked and its
//!   extension chain walked once (`Ipv6Truncated`, `Ipv6Malformed`); the
//!   IPv6 stage (`ipv6.rs`) takes it from there.
//! - **Local delivery**: ICMP echo requests to the ingress interface's
//!   address are answered in place (addresses and MACs swapped, TTL 64,
//!   type 0); everything else for us is `LocalUnhandled`.
//!
//! Every change is made through the `wire` views, and only once the frame
//! is certain to be answered.

use super::context::Outcome;
use super::counters::Ipv6Counters;
use super::egress::Egress;
use super::iface::Iface;
use super::ipv4::martian_source;
use crate::buf::PacketBuf;
use crate::route::IfIndex;
use crate::types::{ip_proto, DropReason, PortId, Timestamp};
use crate::wire::arp::{ArpPacket, ArpRepr, Operation};
use crate::wire::checksum;
use crate::wire::ethernet::{self, EthernetFrame, BROADCAST};
use crate::wire::icmp::{msg_type, Icmpv4Packet};
use crate::wire::ipv4::{self, Ipv4Packet};
use crate::wire::ipv6::UpperLayer;

/// Ingress counters (`Counters`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct IngressCounters {
    /// Frames received with an 802.1Q tag.
    pub vlan_tagged: u64,
    pub ipv6: Ipv6Counters,
}

/// The layer-2 facts of a received frame.
#[derive(Copy, Clone, Debug)]
pub(crate) struct L2 {
    /// Header length (14 + 4 per tag).
    pub len: usize,
    pub tags: u8,
    pub vlan: Option<u16>,
    pub ethertype: u16,
    pub dst: [u8; 6],
}

impl L2 {
    /// Sent to the broadcast MAC.
    pub fn broadcast(&self) -> bool {
        self.dst == BROADCAST
    }
}

pub(crate) struct Ingress {
    pub counters: IngressCounters,
}

fn is_multicast_mac(m: &[u8; 6]) -> bool {
    m[0] & 1 != 0
}

impl Ingress {
    pub fn new() -> Self {
        Ingress { counters: IngressCounters::default() }
    }

    /// Parse the Ethernet header (counting tagged frames); QinQ frames
    /// have no interface.
    #[inline]
    pub fn l2(&mut self, frame: &[u8]) -> Result<L2, DropReason> {
        let e = EthernetFrame::new_checked(frame).map_err(|_| DropReason::EthTruncated)?;
        let l2 = L2 { len: e.header_len(), tags: e.tag_count(), vlan: e.vlan(), ethertype: e.ethertype(), dst: e.dst() };
        if l2.tags > 0 {
            self.counters.vlan_tagged += 1;
        }
        if l2.tags > 1 {
            return Err(DropReason::NoInterface);
        }
        Ok(l2)
    }

    /// An ARP packet on interface `ifx`: learn, answer a request for our
    /// address in place.
    #[allow(clippy::too_many_arguments)]
    pub fn arp_in<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        egress: &mut Egress,
        in_port: PortId,
        ifx: IfIndex,
        ing: Iface,
        l2: usize,
        buf: &mut B,
    ) -> Outcome {
        let repr = match arp_learn(now, egress, ifx, ing, buf.data().get(l2..).unwrap_or(&[])) {
            Ok(r) => r,
            Err(r) => return r.into(),
        };
        let for_us = repr.target_ip == ing.addr;
        if !for_us {
            return DropReason::ArpNotForUs.into();
        }
        match repr.operation {
            Operation::Request => {
                let data = buf.data_mut();
                let Ok(mut eth) = EthernetFrame::new_checked(&mut data[..]) else {
                    return DropReason::EthTruncated.into();
                };
                eth.set_dst(repr.sender_mac);
                eth.set_src(ing.mac);
                let Some(body) = data.get_mut(l2..) else {
                    return DropReason::ArpMalformed.into();
                };
                let Ok(mut a) = ArpPacket::new_checked(body) else {
                    return DropReason::ArpMalformed.into();
                };
                a.set_operation(Operation::Reply);
                a.set_target_mac(repr.sender_mac);
                a.set_target_ip(repr.sender_ip);
                a.set_sender_mac(ing.mac);
                a.set_sender_ip(ing.addr);
                Outcome::ArpReply(in_port)
            }
            Operation::Reply => DropReason::ArpConsumed.into(),
            Operation::Other(_) => DropReason::ArpMalformed.into(),
        }
    }

}

/// What an ARP packet (`body`, after the L2 header) received on interface
/// `ifx` teaches: a plausible sender — inside the subnet, not us, not the
/// probe address 0.0.0.0 (RFC 5227) — is learnt (an entry is created only
/// by ARP addressed to us). Returns the packet, or why it is malformed.
pub(crate) fn arp_learn(now: Timestamp, egress: &mut Egress, ifx: IfIndex, ing: Iface, body: &[u8]) -> Result<ArpRepr, DropReason> {
    let repr = ArpPacket::new_checked(body).map(|p| ArpRepr::parse(&p)).map_err(|_| DropReason::ArpMalformed)?;
    if is_multicast_mac(&repr.sender_mac) || repr.sender_mac == [0; 6] {
        return Err(DropReason::ArpMalformed);
    }
    let plausible = ing.in_subnet(repr.sender_ip)
        && repr.sender_ip != ing.addr
        && Some(repr.sender_ip) != ing.directed_broadcast()
        && !martian_source(repr.sender_ip);
    if plausible {
        egress.learn(now, repr.sender_ip, repr.sender_mac, ifx, repr.target_ip == ing.addr);
    }
    Ok(repr)
}

impl Ingress {
    /// IPv6: classified and counted; the header and its extension chain
    /// checked far enough for the IPv6 stage (`ipv6.rs`), which takes the
    /// walk's result from here (the chain is walked once per packet).
    pub fn ipv6_in(&mut self, l3: &[u8]) -> Result<UpperLayer, DropReason> {
        let c = &mut self.counters.ipv6;
        c.packets += 1;
        let u = super::transit6::upper_layer(l3)?;
        if u.fragment.is_some() {
            c.fragments += 1;
        }
        match u.protocol {
            ip_proto::TCP => c.tcp += 1,
            ip_proto::UDP => c.udp += 1,
            ip_proto::ICMPV6 => c.icmpv6 += 1,
            _ => c.other += 1,
        }
        Ok(u)
    }
}

/// Answer an ICMP echo request to the ingress interface's address, in
/// place.
pub(crate) fn local_in<B: PacketBuf>(in_port: PortId, ing: Iface, l2: usize, buf: &mut B) -> Result<Outcome, DropReason> {
    let (src, dst, eth_src) = {
        let data = buf.data();
        let ip = Ipv4Packet::new_checked(data.get(l2..).unwrap_or(&[])).map_err(|_| DropReason::Ipv4Truncated)?;
        if ip.protocol() != ip_proto::ICMP {
            return Err(DropReason::LocalUnhandled);
        }
        let icmp = Icmpv4Packet::new_checked(ip.payload()).map_err(|_| DropReason::L4Truncated)?;
        if icmp.msg_type() != msg_type::ECHO_REQUEST || icmp.code() != 0 {
            return Err(DropReason::LocalUnhandled);
        }
        if !icmp.verify_checksum() {
            return Err(DropReason::IcmpBadChecksum);
        }
        let eth_src = EthernetFrame::new_checked(data).map(|e| e.src()).map_err(|_| DropReason::EthTruncated)?;
        (ip.src(), ip.dst(), eth_src)
    };
    let data = buf.data_mut();
    ethernet::write_macs(data, eth_src, ing.mac);
    let l3 = data.get_mut(l2..).ok_or(DropReason::Ipv4Truncated)?;
    let mut ip = Ipv4Packet::new_checked(l3).map_err(|_| DropReason::Ipv4Truncated)?;
    ip.set_src(dst);
    ip.set_dst(src);
    ip.set_ttl(ipv4::DEFAULT_TTL);
    ip.fill_checksum();
    let mut icmp = Icmpv4Packet::new_checked(ip.payload_mut()).map_err(|_| DropReason::L4Truncated)?;
    // Type 8 → 0 changes only the type/code word: RFC 1624 update.
    let c = checksum::update_u16(icmp.checksum(), u16::from(msg_type::ECHO_REQUEST) << 8, 0);
    icmp.set_msg_type(msg_type::ECHO_REPLY);
    icmp.set_checksum(c);
    Ok(Outcome::EchoReply(in_port))
}
