//! `clusterfw-pktgen`'s sans-IO parts: frame construction and parsing
//! ([`packet`]; IPv6 UDP and neighbour discovery in [`packet6`]), the stateless TCP [`responder`], the TCP client driver
//! ([`tcpgen`]), the latency [`hist`]ogram and the [`report`]. The DPDK
//! driver (`src/bin/pktgen.rs`) only moves these frames through ports, so
//! everything here is tested on byte buffers without EAL.

pub mod hist;
pub mod packet;
pub mod packet6;
pub mod report;
pub mod responder;
pub mod tcpgen;
