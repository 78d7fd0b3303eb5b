//! NAT and PAT in the cluster (SPEC N1–N9): the leaf pieces the pipeline's
//! NAT stage is built from.
//!
//! - [`blocks`]: a PAT pool's ports cut into blocks, and the block map —
//!   which node and worker holds each block, how it changes when members
//!   join and leave, each block's heir, and the bytes the control node
//!   publishes it as (`encode` / `decode`, checked: a peer's bytes are not
//!   trusted). Any node finds the owner of
//!   return traffic from (mapped address, port) alone (N5).
//! - [`alloc`]: one worker's port allocator over the blocks it holds: ports
//!   per inside host a block at a time, the per-host maximum (N6), separate
//!   TCP / UDP / ICMP spaces, bindings reserved after a failover.
//! - the rewrite itself is wire-level (`crate::wire::rewrite`, re-exported
//!   here): one endpoint's address and port with incremental checksums —
//!   TCP, UDP (a zero checksum stays zero), ICMP echo identifiers, later
//!   fragments, and ICMP errors with their quoted packet.
//! - [`rules`]: the rule table compiled for first-match lookups that do
//!   not grow with the number of rules (10 000+, N9).
//! - [`plan`]: what a node's workers share of a NAT configuration, and
//!   where a datagram to a mapped address is decided (the steering by
//!   translation).
//! - [`xlate`]: one worker's translation table, found from the real and
//!   the mapped side, per-session and multi-session lifecycles, stale
//!   xlates visible until reaped (N7).
//!
//! Nothing here knows about packet buffers or the CCL; the pipeline stage and the
//! control plane drive these types (docs/nat.md).

pub mod alloc;
pub mod blocks;
pub mod plan;
pub mod rules;
pub mod xlate;

pub use alloc::{Exhausted, Mapped, PortAllocator, PortClass};
pub use blocks::{BlockError, BlockMap, BlockRef, Debt, Geometry, Holder, MapDecodeError};
pub use crate::wire::rewrite::{rewrite, rewrite_icmp_error, rewrite_icmp_error_out, Endpoint, RewriteError};
pub use rules::{PerSession, RuleKind, RuleSpec, RuleTable, UdpPerSession};
pub use xlate::{Sessions, Xlate, XlateId, XlateInfo, XlateTable};
