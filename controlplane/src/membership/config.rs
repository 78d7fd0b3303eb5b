//! What the membership machine starts from, and the checks that refuse a
//! configuration it cannot run (thiserror, with the values a person needs).
//!
//! Invariant: a [`Config`] that passed [`Config::validate`] has an interval
//! of at least 50 ms, a hold time of at least 150 ms and 3 intervals (a
//! lost heartbeat or two never removes a member), distinct node ids 0..=15 and CCL addresses, this
//! node among them, quorum mode only with three or more nodes, and bounded
//! limits; the machine relies on nothing else.

use dataplane::ccl::{Placement, NO_PLACE};
use dataplane::{Duration, NodeId};
use std::net::Ipv4Addr;

/// Shortest heartbeat interval (issue 10: "intervals down to 50 ms").
pub const MIN_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(50);
/// Shortest hold time (issue 10: "hold times down to 150 ms").
pub const MIN_HOLD_TIME: Duration = Duration::from_millis(150);
/// Defaults of the contract's configuration knobs.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(1000);
pub const DEFAULT_HOLD_TIME: Duration = Duration::from_millis(3000);
pub const DEFAULT_INTERFACE_DEBOUNCE: Duration = Duration::from_millis(500);
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_millis(5000);

/// A configured cluster node, as `show cluster` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    pub id: NodeId,
    pub name: String,
    pub ccl_address: Ipv4Addr,
}

/// What a partition does that has no control node (SPEC M3, issue 10).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum SplitBrain {
    /// Every partition elects its own control node (the reference's
    /// behaviour); on heal the better control node keeps the role.
    #[default]
    Elect,
    /// A partition without a majority of its last member set (of the
    /// configured nodes for a node that was not a member) goes inactive,
    /// data ports down; needs three or more configured nodes.
    Quorum,
}

/// Automatic rejoin after leaving (SPEC M4): the first retry after a fault
/// waits `initial`, each further consecutive failure doubles the wait up
/// to `max`; after `attempts` consecutive failures the node goes disabled.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Rejoin {
    pub initial: Duration,
    pub max: Duration,
    pub attempts: u32,
}

impl Default for Rejoin {
    /// 1 s doubling to 60 s, disabled after 5 consecutive failures: waits
    /// of 1, 2, 4, 8 s between them, so a node gives up after about 15 s
    /// of waiting plus 5 join attempts (each up to 2 hold times, or a sync
    /// timeout) — long past any transient (an election, a control node's
    /// restart: a few hold times), short enough that a node with a broken
    /// port or a refused configuration stops costing the cluster an epoch
    /// change and a re-registration every try, and its data ports stay
    /// shut for the operator.
    fn default() -> Rejoin {
        Rejoin { initial: Duration::from_secs(1), max: Duration::from_secs(60), attempts: 5 }
    }
}

/// Bounds on what the network can make the machine hold.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Replicated-table entries, live ones (tombstones of deletes are kept
    /// besides, at most a quarter of this many).
    pub table_entries: usize,
    /// Largest replicated configuration blob.
    pub config_bytes: usize,
    /// Largest serialized replicated state one transfer may carry (a
    /// received transfer announcing more is refused).
    pub transfer_bytes: usize,
    /// Transfers served at once (each holds a snapshot of the state).
    pub serving: usize,
    /// Entries of `history()`.
    pub history: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            table_entries: 16_384,
            config_bytes: 1 << 20,
            transfer_bytes: 32 << 20,
            serving: 4,
            history: 256,
        }
    }
}

/// The replicated configuration: an opaque blob with a version (the
/// control node bumps it on every change) and a digest of its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigBlob {
    pub version: u64,
    pub bytes: Vec<u8>,
}

impl ConfigBlob {
    /// FNV-1a (64 bit) of the bytes: tells two blobs of the same version
    /// apart (config-diverged); not a security measure — the CCL's MAC is.
    pub fn digest(&self) -> u64 {
        fnv1a(&self.bytes)
    }
}

pub(super) fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3))
}

/// Everything the machine starts from. Build with [`Config::new`] and
/// override fields: `Config { hold_time: .., ..Config::new(me, inc, nodes) }`.
#[derive(Clone, Debug)]
pub struct Config {
    /// This node.
    pub me: NodeId,
    /// This boot's CCL incarnation (the `Sealer`'s): replies and echoes
    /// are matched against it.
    pub incarnation: u32,
    /// Election priority: lower is better (ties: lower node id).
    pub priority: u8,
    /// This node's site and chassis (bootstrap settings, local).
    pub place: Placement,
    /// This node's workers (`dpdk.workers`): a control node admits only
    /// joiners that run as many (docs/workers.md).
    pub workers: u8,
    /// Every configured node, this one included, in `show cluster` order.
    pub nodes: Vec<NodeConfig>,
    pub heartbeat_interval: Duration,
    pub hold_time: Duration,
    pub split_brain: SplitBrain,
    /// How long a port must stay down (or up again) before it counts.
    pub interface_debounce: Duration,
    /// A joiner's readiness gate gives up waiting for the dataplane's sync
    /// after this long (and goes `data` anyway, logged).
    pub sync_timeout: Duration,
    pub rejoin: Rejoin,
    /// The CCL port's number in `on_port` reports (every other port is a
    /// data port); `None`: no CCL carrier reports.
    pub ccl_port: Option<u16>,
    /// The replicated configuration this node holds at start (its own
    /// copy; the control node's replaces it when this node joins).
    pub config: Option<ConfigBlob>,
    /// The configuration this node publishes when it is the control node
    /// and holds none (`config` is `None` and no member has one to catch
    /// up from): a cluster formed from nothing runs its first control
    /// node's file. A node holding the cluster's copy keeps that one.
    pub publish: Option<Vec<u8>>,
    /// The driver confirms the replicated configuration it runs
    /// (`Membership::config_applied`), and a joiner's readiness gate waits
    /// for it besides the replicated state and the dataplane's sync (on
    /// `sync_timeout` it goes ready without, as without the sync).
    pub confirm_config: bool,
    pub limits: Limits,
}

impl Config {
    /// The contract's defaults: 1 s interval, 3 s hold time, elect,
    /// 500 ms debounce, 5 s sync timeout, rejoin 1 s → 60 s × 5, priority
    /// 100, no site or chassis, no CCL port reports, no configuration.
    pub fn new(me: NodeId, incarnation: u32, nodes: Vec<NodeConfig>) -> Config {
        Config {
            me,
            incarnation,
            priority: 100,
            place: Placement::default(),
            workers: 1,
            nodes,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            hold_time: DEFAULT_HOLD_TIME,
            split_brain: SplitBrain::Elect,
            interface_debounce: DEFAULT_INTERFACE_DEBOUNCE,
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
            rejoin: Rejoin::default(),
            ccl_port: None,
            config: None,
            publish: None,
            confirm_config: false,
            limits: Limits::default(),
        }
    }

    /// Every check [`super::Membership::new`] makes.
    pub fn validate(&self) -> Result<(), MembershipError> {
        let (i, h) = (self.heartbeat_interval, self.hold_time);
        if i < MIN_HEARTBEAT_INTERVAL {
            return Err(MembershipError::IntervalTooShort { ms: ms(i) });
        }
        if h < MIN_HOLD_TIME {
            return Err(MembershipError::HoldTooShort { ms: ms(h) });
        }
        if h.0 < i.0.saturating_mul(3) {
            return Err(MembershipError::HoldBelowThreeIntervals { hold_ms: ms(h), interval_ms: ms(i) });
        }
        let mut seen = [false; NodeId::MAX_NODES];
        for (k, n) in self.nodes.iter().enumerate() {
            let s = seen.get_mut(n.id.index()).ok_or(MembershipError::NodeOutOfRange(n.id.0))?;
            if *s {
                return Err(MembershipError::DuplicateNode(n.id));
            }
            *s = true;
            if let Some(o) = self.nodes[..k].iter().find(|o| o.ccl_address == n.ccl_address) {
                return Err(MembershipError::DuplicateAddress { address: n.ccl_address, a: o.id, b: n.id });
            }
        }
        if !seen.get(self.me.index()).copied().unwrap_or(false) {
            return Err(MembershipError::MeNotConfigured(self.me));
        }
        if self.split_brain == SplitBrain::Quorum && self.nodes.len() < 3 {
            return Err(MembershipError::QuorumNeedsThree(self.nodes.len()));
        }
        for (what, v) in [("site", self.place.site), ("chassis", self.place.chassis)] {
            if v == Some(NO_PLACE) {
                return Err(MembershipError::PlacementReserved(what));
            }
        }
        if self.sync_timeout.0 == 0 {
            return Err(MembershipError::ZeroSyncTimeout);
        }
        let r = self.rejoin;
        if r.attempts == 0 || r.initial.0 == 0 || r.max < r.initial {
            return Err(MembershipError::BadRejoin {
                initial_ms: ms(r.initial),
                max_ms: ms(r.max),
                attempts: r.attempts,
            });
        }
        let l = self.limits;
        if l.serving == 0 || l.history == 0 || l.table_entries == 0 || l.transfer_bytes < l.config_bytes {
            return Err(MembershipError::BadLimits);
        }
        for bytes in self.config.iter().map(|c| c.bytes.len()).chain(self.publish.as_ref().map(Vec::len)) {
            if bytes > l.config_bytes {
                return Err(MembershipError::ConfigTooLarge { bytes, limit: l.config_bytes });
            }
        }
        Ok(())
    }
}

fn ms(d: Duration) -> u64 {
    d.0 / 1_000_000
}

/// A configuration the machine cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    #[error("cluster.heartbeat-interval is {ms} ms; it must be at least 50 ms")]
    IntervalTooShort { ms: u64 },
    #[error("cluster.hold-time is {ms} ms; it must be at least 150 ms")]
    HoldTooShort { ms: u64 },
    #[error("cluster.hold-time ({hold_ms} ms) must be at least 3 × cluster.heartbeat-interval ({interval_ms} ms)")]
    HoldBelowThreeIntervals { hold_ms: u64, interval_ms: u64 },
    #[error("node id {0} out of range (cluster nodes are 0..=15)")]
    NodeOutOfRange(u8),
    #[error("{0} is configured twice")]
    DuplicateNode(NodeId),
    #[error("{a} and {b} are both configured with CCL address {address}")]
    DuplicateAddress { address: Ipv4Addr, a: NodeId, b: NodeId },
    #[error("this node ({0}) is not among the configured nodes")]
    MeNotConfigured(NodeId),
    #[error("cluster.split-brain: quorum needs 3 or more configured nodes, {0} configured")]
    QuorumNeedsThree(usize),
    #[error("{0} id 255 is reserved (it means none on the wire)")]
    PlacementReserved(&'static str),
    #[error("cluster.sync-timeout must be above zero")]
    ZeroSyncTimeout,
    #[error("cluster.rejoin: initial {initial_ms} ms, max {max_ms} ms, {attempts} attempts: need initial > 0, max ≥ initial, attempts ≥ 1")]
    BadRejoin { initial_ms: u64, max_ms: u64, attempts: u32 },
    #[error("membership limits must be above zero (and the transfer limit at least the configuration limit)")]
    BadLimits,
    #[error("the replicated configuration is {bytes} bytes, above the {limit}-byte limit")]
    ConfigTooLarge { bytes: usize, limit: usize },
}
