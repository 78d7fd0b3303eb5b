//! Typed views over packet bytes, smoltcp style: one module per protocol,
//! each with a private `mod field` of byte ranges, a `new_checked`
//! constructor that validates lengths once, panic-free getters, setters only
//! where the buffer is `AsMut<[u8]>`, and a small error enum.
//!
//! Invariant: this layer has no policy and knows nothing above it — it
//! never decides to drop, count or forward; `pipeline` maps its errors to
//! `DropReason`s. Nothing here allocates except `build` (test frames).

pub mod arp;
pub mod build;
pub mod checksum;
pub mod ethernet;
pub mod icmp;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod rewrite;
pub mod synproxy;
pub mod tcp;
pub mod udp;

pub use arp::{ArpPacket, ArpRepr};
pub use ethernet::EthernetFrame;
pub use icmp::Icmpv4Packet;
pub use ipv4::{Ipv4Packet, Ipv4Repr};
pub use ipv6::Ipv6Packet;
pub use tcp::{TcpOptions, TcpPacket};
pub use udp::UdpPacket;
