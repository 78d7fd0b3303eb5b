//! clusterfw dataplane: everything that touches a packet, as a sans-IO core.
//!
//! Layers, bottom up: `wire` (typed views over bytes, no policy), `conntrack`
//! (per-worker flow table and TCP/UDP/ICMP state), `route`, `acl`, `arp`,
//! `steer` (which of a node's workers owns a frame), and `pipeline` (one
//! worker's run-to-completion packet processing). Nothing in
//! this crate reads a clock, opens a socket or knows about DPDK: drivers pass
//! packets and `Timestamp`s in and act on the returned verdicts.
#![deny(unsafe_code)]

pub mod acl;
pub mod arp;
pub mod buf;
pub mod ccl;
pub mod cluster;
pub mod conntrack;
pub mod frag;
pub mod nat;
pub mod pipeline;
pub mod prefetch;
pub mod route;
pub(crate) mod slots;
pub mod stats;
pub mod steer;
pub mod types;
pub mod wire;

pub use types::*;
