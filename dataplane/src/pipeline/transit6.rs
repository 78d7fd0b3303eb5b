//! The IPv6 views the pipeline's stages share (issue 16; docs/ipv6.md):
//! the header checked and its extension chain walked once (`upper_layer`,
//! by the classification; the IPv6 stage takes its result), and the
//! conntrack view of a transit packet (`transit`: its five-tuple and L4
//! summary, or the tuple an ICMPv6 error quotes) — also what the cluster
//! stage reads from a relayed IPv6 frame. Nothing here keeps state.

use crate::conntrack::L4Info;
use crate::types::{ip_proto, DropReason, FiveTuple};
use crate::wire::icmpv6::{self, msg_type};
use crate::wire::ipv6::{self, Ipv6Packet, UpperLayer};
use crate::wire::tcp::TcpPacket;
use crate::wire::udp::UdpPacket;
use std::net::IpAddr;

/// The IPv6 header of `l3` checked (version, payload length within the
/// frame) and its extension chain walked (`Ipv6Packet::upper_layer`).
pub(crate) fn upper_layer(l3: &[u8]) -> Result<UpperLayer, DropReason> {
    let p = match Ipv6Packet::new_checked(l3) {
        Ok(p) => p,
        Err(ipv6::Error::Truncated) | Err(ipv6::Error::BadPayloadLen) => return Err(DropReason::Ipv6Truncated),
        Err(_) => return Err(DropReason::Ipv6Malformed),
    };
    p.upper_layer().map_err(|_| DropReason::Ipv6Malformed)
}

/// What the stage decided for a transit packet: track `tuple` with `l4`,
/// or forward an ICMPv6 error whose quoted connection exists.
pub(crate) enum Transit6 {
    Flow(FiveTuple, L4Info),
    Error(FiveTuple),
}

/// The conntrack view of a transit packet whose upper-layer header is
/// at `off` in the payload.
pub(crate) fn transit(p: &Ipv6Packet<&[u8]>, proto: u8, off: usize) -> Result<Transit6, DropReason> {
    let (src, dst) = (IpAddr::V6(p.src()), IpAddr::V6(p.dst()));
    let tuple = |sp, dp| FiveTuple { src, dst, proto, src_port: sp, dst_port: dp };
    let l4 = p.payload().get(off..).unwrap_or(&[]);
    Ok(match proto {
        ip_proto::TCP => {
            let t = TcpPacket::new_checked(l4).map_err(|e| match e {
                crate::wire::tcp::Error::BadHeaderLen => DropReason::TcpBadHeaderLen,
                _ => DropReason::L4Truncated,
            })?;
            Transit6::Flow(tuple(t.src_port(), t.dst_port()), L4Info::Tcp(super::ipv4::tcp_seg(&t)))
        }
        ip_proto::UDP => {
            let u = UdpPacket::new_checked(l4).map_err(|_| DropReason::L4Truncated)?;
            Transit6::Flow(tuple(u.src_port(), u.dst_port()), L4Info::Udp)
        }
        ip_proto::ICMPV6 => {
            let (t, id) = icmpv6::type_and_ident(l4).ok_or(DropReason::L4Truncated)?;
            match t {
                msg_type::ECHO_REQUEST => Transit6::Flow(tuple(id, 0), L4Info::IcmpEchoRequest),
                msg_type::ECHO_REPLY => Transit6::Flow(tuple(0, id), L4Info::IcmpEchoReply),
                t if icmpv6::is_error(t) => Transit6::Error(icmpv6::quoted_tuple(l4).ok_or(DropReason::L4Truncated)?),
                _ => Transit6::Flow(tuple(0, 0), L4Info::Other),
            }
        }
        _ => Transit6::Flow(tuple(0, 0), L4Info::Other),
    })
}

