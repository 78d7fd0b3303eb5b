//! clusterfw control plane.
//!
//! For now: the management protocol spoken on the node's control socket.
//! Membership, heartbeats, election, replication and the CCL protocol land
//! here in later issues; like the dataplane they stay sans-IO, driven by the
//! node's control lcore or by the simulator.
#![deny(unsafe_code)]

pub mod mgmt;
