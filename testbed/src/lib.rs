//! clusterfw network-namespace test bed.
//!
//! Client and server hosts with real kernel TCP/IP stacks, firewall nodes
//! (`clusterfw` on `net_af_packet` ports) in their own namespaces, all wired
//! with veth pairs. Test traffic never leaves the namespaces the bed makes.
//! [`topology`] says what exists, [`bed`] makes and removes it, [`state`]
//! records it, [`nodeconf`] writes node configs, [`harness`] is what traffic
//! tests need around it (the bed lock, background processes).

pub mod bed;
pub mod harness;
pub mod nodeconf;
pub mod state;
pub mod sys;
pub mod topology;
