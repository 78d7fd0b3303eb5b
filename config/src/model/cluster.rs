//! The types of the `cluster:` section, public as [`crate::cluster`] (whose
//! module essay lists their invariants); the raw form and the checks that
//! build them are in `validate/cluster.rs`.

use std::fmt;
use std::net::Ipv4Addr;

use serde::{Serialize, Serializer};

use crate::net::Ipv4Net;

/// Shortest accepted cluster key, in characters.
pub const MIN_KEY_LEN: usize = 16;
/// Largest node ID (16 members: 0-15).
pub const MAX_NODE_ID: u8 = 15;
/// Smallest (most preferred) priority.
pub const MIN_PRIORITY: u8 = 1;
/// Largest (least preferred) priority.
pub const MAX_PRIORITY: u8 = 100;
/// Shortest `heartbeat-interval`, ms (SPEC M1).
pub const MIN_HEARTBEAT_MS: u64 = 50;
/// Longest `heartbeat-interval`, ms.
pub const MAX_HEARTBEAT_MS: u64 = 10_000;
/// Default `heartbeat-interval`, ms.
pub const DEFAULT_HEARTBEAT_MS: u64 = 1_000;
/// Shortest `hold-time`, ms.
pub const MIN_HOLD_MS: u64 = 150;
/// Longest `hold-time`, ms.
pub const MAX_HOLD_MS: u64 = 60_000;
/// Default `hold-time`, ms.
pub const DEFAULT_HOLD_MS: u64 = 3_000;
/// `hold-time` spans at least this many heartbeat intervals.
pub const HOLD_HEARTBEATS: u64 = 3;
/// Longest `interface-debounce`, ms (SPEC M5).
pub const MAX_DEBOUNCE_MS: u64 = 60_000;
/// Default `interface-debounce`, ms.
pub const DEFAULT_DEBOUNCE_MS: u64 = 500;
/// Shortest `sync-timeout`, ms (SPEC M7).
pub const MIN_SYNC_TIMEOUT_MS: u64 = 100;
/// Longest `sync-timeout`, ms.
pub const MAX_SYNC_TIMEOUT_MS: u64 = 600_000;
/// Default `sync-timeout`, ms.
pub const DEFAULT_SYNC_TIMEOUT_MS: u64 = 5_000;
/// Fewest configured members for `split-brain: quorum`.
pub const MIN_QUORUM_MEMBERS: usize = 3;
/// Name of the interface the node makes for the CCL port; a data interface
/// must not use it when a cluster is configured.
pub const CCL_INTERFACE: &str = "ccl";
/// What [`Secret`] and the redacted source text show instead of the key.
pub const REDACTED: &str = "<redacted>";

/// A string that is never printed: `Debug`, `Display` and `Serialize` give
/// [`REDACTED`]. Read it with [`Secret::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }
    /// The secret itself, for the code that needs it (the CCL key).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(REDACTED)
    }
}

/// `cluster`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ClusterConfig {
    /// `name`: the cluster name; `[A-Za-z0-9_.-]+`. Members of one cluster
    /// use the same name (it selects the cluster id on the CCL).
    pub name: String,
    /// `key`: the cluster key that authenticates every CCL message; at
    /// least 16 characters. Never printed.
    pub key: Secret,
    /// `node-id`: this node's ID, 0-15.
    pub node_id: u8,
    /// `priority`: 1-100, lower is preferred (for the election, later).
    pub priority: u8,
    /// `site-id`: optional, 1-255.
    pub site_id: Option<u8>,
    /// `chassis-id`: optional, 1-255.
    pub chassis_id: Option<u8>,
    /// `tcp-sequence-randomization`: SYN-cookie owner encoding (SPEC R6);
    /// default true.
    pub tcp_sequence_randomization: bool,
    /// `ccl`: the dedicated cluster control link port.
    pub ccl: CclConfig,
    /// `members`: every node that may be a member, this node included.
    pub members: Vec<MemberConfig>,
    /// `heartbeat-interval`: ms between heartbeats (50-10000, default 1000).
    pub heartbeat_interval_ms: u64,
    /// `hold-time`: ms without a heartbeat before a member is removed
    /// (150-60000, at least 3 heartbeat intervals; default 3000).
    pub hold_time_ms: u64,
    /// `backups`: backup owners per connection, 1 or 2 (default 1).
    pub backups: u8,
    /// `split-brain`: what a partition does (default `elect`).
    pub split_brain: SplitBrain,
    /// `director-localization`: a local director per site (SPEC R12;
    /// default false; needs `site-id`).
    pub director_localization: bool,
    /// `site-redundancy`: a flow whose backups all sit at its owner's site
    /// gets one at another site too (SPEC R4; default false; needs
    /// `site-id`).
    pub site_redundancy: bool,
    /// `interface-debounce`: ms a data port may be down before the node
    /// leaves the cluster (0-60000, default 500).
    pub interface_debounce_ms: u64,
    /// `sync-timeout`: ms a joining node waits for the bulk sync before it
    /// takes traffic anyway (100-600000, default 5000).
    pub sync_timeout_ms: u64,
}

/// `cluster.split-brain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SplitBrain {
    /// Each partition elects its own control node; on heal the better
    /// control node keeps the role (SPEC M3).
    Elect,
    /// A partition without a majority of the last member set shuts its
    /// data ports (3 or more configured members).
    Quorum,
}

impl ClusterConfig {
    /// The member entry of this node (always present).
    pub fn this_member(&self) -> Option<&MemberConfig> {
        self.members.iter().find(|m| m.id == self.node_id)
    }

    /// The other members, in list order.
    pub fn peers(&self) -> impl Iterator<Item = &MemberConfig> {
        let me = self.node_id;
        self.members.iter().filter(move |m| m.id != me)
    }
}

/// `cluster.ccl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CclConfig {
    /// `device`: PCI address or vdev string of the CCL port, as for
    /// interfaces; not shared with a data interface.
    pub device: String,
    /// The host address of `address: a.b.c.d/len`.
    pub address: Ipv4Addr,
    /// The prefix length of `address`.
    pub prefix_len: u8,
    /// `mtu`: the CCL link's MTU; default (and least) the largest data
    /// interface MTU plus `CCL_OVERHEAD`.
    pub mtu: u16,
}

/// Bytes the CCL adds around a forwarded data frame: the frame's Ethernet
/// header and a VLAN tag (18), and the outer IPv4 (20), UDP (8), CCL
/// header (34) and MAC tag (16) — 96; a data datagram of the largest data
/// MTU fits a CCL datagram of that MTU + 96 (docs/ccl-protocol.md).
pub const CCL_OVERHEAD: u16 = 96;

impl CclConfig {
    /// The CCL subnet.
    pub fn subnet(&self) -> Ipv4Net {
        Ipv4Net::containing(self.address, self.prefix_len)
    }

    /// Whether `device` is a DPDK virtual device (see
    /// [`InterfaceConfig::is_vdev`](crate::InterfaceConfig::is_vdev)).
    pub fn is_vdev(&self) -> bool {
        self.device.starts_with("net_") || self.device.starts_with("eth_")
    }

    /// The device name without arguments.
    pub fn device_name(&self) -> &str {
        self.device.split(',').next().unwrap_or("")
    }
}

/// One entry of `cluster.members`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct MemberConfig {
    /// `id`: node ID 0-15, unique.
    pub id: u8,
    /// `name`: node name, unique; the entry of this node carries
    /// `node.name`.
    pub name: String,
    /// `ccl-address`: the member's CCL address (no prefix length), inside
    /// the CCL subnet, unique.
    pub ccl_address: Ipv4Addr,
}
