//! clusterfw control plane.
//!
//! - [`membership`]: cluster membership as a sans-IO state machine (the
//!   time and decoded CCL control messages in, actions out): today's
//!   heartbeats and last-heard tracking; election, hold time and join grow
//!   here. The node's control lcore and the simulator drive the same code.
//! - [`natshare`]: dynamic NAT in a cluster (N4), the control node's
//!   translation table on top of membership's replicated tables.
//! - [`limits`]: cluster-wide connection limits by estimate (L1): the
//!   workers' and the members' counts in, each worker's view of the rest
//!   of the cluster out.
//! - [`mgmt`]: the management protocol spoken on the node's control socket.
//! - [`clusterview`]: `cluster show`, one view of every member's answer
//!   (asked over the CCL by `membership`), merged.
//! - [`metrics`]: any counter set in Prometheus' text exposition format
//!   (the node's `/metrics`).
//! - [`ipfix`]: IPFIX (RFC 7011) messages of ended connections, two
//!   uniflows each (the node's export thread sends them).
//! - [`syslog`]: RFC 5424 messages of connections and events (the node's
//!   export thread sends them).
//! - [`stats`]: any counter set (`dataplane::stats::Stats`) as the JSON
//!   the management protocol answers with.
//!
//! Like the dataplane, the control plane's logic reads no clock and does
//! no I/O of its own: `membership` depends on neither DPDK nor `std::time`
//! (checked by `tests/sans_io.rs`). `mgmt` is the exception by nature — it
//! is the socket server and client — and keeps its I/O timeouts to itself.
#![deny(unsafe_code)]

pub mod clusterview;
pub mod ipfix;
pub mod limits;
pub mod membership;
pub mod metrics;
pub mod mgmt;
pub mod natshare;
pub mod stats;
pub mod syslog;
