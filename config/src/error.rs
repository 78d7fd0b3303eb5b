//! Configuration errors.
//!
//! Invariant: every [`ConfigError`] produced by [`crate::parse`] carries a
//! position with `line >= 1` and `column >= 1` (1-based, counted in
//! characters) and the dotted field path of the offending value (empty for
//! errors about the document as a whole, such as a YAML syntax error). Only a
//! read failure in [`crate::load`] has no position (`line() == 0`).

use std::fmt;

use crate::net::{PortError, Prefix6Error, PrefixError, ProtocolError};

/// One step of a [`FieldPath`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

/// A path to a value in the document, like `interfaces[1].address`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct FieldPath(pub(crate) Vec<Seg>);

impl FieldPath {
    pub(crate) fn root() -> FieldPath {
        FieldPath(Vec::new())
    }

    pub(crate) fn key(&self, k: &str) -> FieldPath {
        let mut v = self.0.clone();
        v.push(Seg::Key(k.to_string()));
        FieldPath(v)
    }

    pub(crate) fn index(&self, i: usize) -> FieldPath {
        let mut v = self.0.clone();
        v.push(Seg::Index(i));
        FieldPath(v)
    }

    pub(crate) fn from_serde(p: &serde_path_to_error::Path) -> FieldPath {
        use serde_path_to_error::Segment;
        FieldPath(
            p.iter()
                .filter_map(|s| match s {
                    Segment::Seq { index } => Some(Seg::Index(*index)),
                    Segment::Map { key } => Some(Seg::Key(key.clone())),
                    Segment::Enum { .. } | Segment::Unknown => None,
                })
                .collect(),
        )
    }

    /// Every proper ancestor's rendering plus our own, longest first.
    pub(crate) fn renderings(&self) -> Vec<String> {
        (1..=self.0.len())
            .rev()
            .map(|n| FieldPath(self.0[..n].to_vec()).to_string())
            .collect()
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Seg::Key(k) if i == 0 => f.write_str(k)?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// What is wrong, without the position (see [`ConfigError`] for that).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The file could not be read.
    #[error("cannot read configuration: {0}")]
    Read(#[source] std::io::Error),
    /// The text is not a single well-formed YAML document.
    #[error("YAML syntax error: {0}")]
    Syntax(String),
    /// The document does not have the schema's shape: an unknown or
    /// duplicate key, a missing key, or a value of the wrong type. The
    /// message comes from the deserializer and names expected and found.
    #[error("{0}")]
    Schema(String),
    /// A string is not an `a.b.c.d/len` prefix (or has host bits set where a
    /// network is required).
    #[error("invalid IPv4 prefix \"{found}\": {reason}")]
    InvalidPrefix {
        /// The text as written.
        found: String,
        /// What is wrong with it.
        reason: PrefixError,
    },
    /// A string is not an `address/len` IPv6 prefix (or has host bits set
    /// where a network is required).
    #[error("invalid IPv6 prefix \"{found}\": {reason}")]
    InvalidPrefix6 {
        /// The text as written.
        found: String,
        /// What is wrong with it.
        reason: Prefix6Error,
    },
    /// A string is not an IPv6 address.
    #[error("invalid IPv6 address \"{found}\": expected an address like 2001:db8::1")]
    InvalidAddress6 {
        /// The text as written.
        found: String,
    },
    /// A route whose next hop is not of its destination's address family.
    #[error("next hop {via} is {via_family} but destination {destination} is {destination_family}: a route's next hop must be of its destination's family")]
    RouteFamilyMismatch {
        /// The next hop as written.
        via: String,
        /// `IPv4` or `IPv6`.
        via_family: &'static str,
        /// The destination as written.
        destination: String,
        /// `IPv4` or `IPv6`.
        destination_family: &'static str,
    },
    /// An access rule whose source and destination are of different
    /// address families (it could match no packet).
    #[error("source {src} is {source_family} but destination {destination} is {destination_family}: a rule's addresses must be of one family (leave one out to match any address)")]
    RuleFamilyMismatch {
        /// The source as written (not `source`: thiserror's name for a
        /// cause).
        src: String,
        /// `IPv4` or `IPv6`.
        source_family: &'static str,
        /// The destination as written.
        destination: String,
        /// `IPv4` or `IPv6`.
        destination_family: &'static str,
    },
    /// An access rule with the other family's ICMP as its protocol (it
    /// could match no packet): `icmp` (1) on an IPv6 rule, `icmp6` (58)
    /// on an IPv4 one.
    #[error("protocol {protocol} is {protocol_family}'s ICMP but the rule's addresses are {family}: use {instead}")]
    RuleIcmpFamily {
        /// `icmp` or `icmp6`.
        protocol: &'static str,
        /// The family whose ICMP that is.
        protocol_family: &'static str,
        /// The family of the rule's addresses.
        family: &'static str,
        /// What to write instead.
        instead: &'static str,
    },
    /// An interface with an IPv6 address whose MTU is below IPv6's
    /// minimum link MTU.
    #[error("MTU {mtu} is below {min}, the smallest link MTU IPv6 allows (RFC 8200 §5), and this interface has an address6")]
    Ipv6MtuTooSmall {
        /// The MTU written.
        mtu: u16,
        /// 1280.
        min: u16,
    },
    /// An interface address that is not a usable unicast host address.
    #[error("invalid interface address \"{found}\": {reason}")]
    InvalidHostAddress {
        /// The text as written.
        found: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A string is not a dotted-quad IPv4 address.
    #[error("invalid IPv4 address \"{found}\": expected a.b.c.d")]
    InvalidAddress {
        /// The text as written.
        found: String,
    },
    /// A socket address (to listen on or send to) that is not
    /// `a.b.c.d:port` (port 1-65535).
    #[error("invalid address \"{found}\": expected a.b.c.d:port with a port from 1 to 65535")]
    InvalidSocketAddress {
        /// The text as written.
        found: String,
    },
    /// A number outside its permitted range.
    #[error("value {found} out of range: expected {min}-{max}")]
    OutOfRange {
        /// The value as written.
        found: u64,
        /// Smallest permitted value.
        min: u64,
        /// Largest permitted value.
        max: u64,
    },
    /// A name with characters or a form that is not allowed.
    #[error("invalid name \"{found}\": expected {expected}")]
    InvalidName {
        /// The name as written.
        found: String,
        /// A description of the permitted form.
        expected: &'static str,
    },
    /// A string that must not be empty is empty.
    #[error("must not be empty")]
    Empty,
    /// The list must have at least one entry.
    #[error("at least one {what} is required")]
    NoEntries {
        /// What kind of entry.
        what: &'static str,
    },
    /// A name (or key such as a route destination) used twice.
    #[error("duplicate {what} \"{name}\" (first at line {first_line})")]
    Duplicate {
        /// What kind of thing is duplicated ("interface name", ...).
        what: &'static str,
        /// The duplicated value.
        name: String,
        /// Line of the first occurrence.
        first_line: usize,
    },
    /// An access rule names an interface that is not configured.
    #[error("unknown interface \"{found}\": expected \"any\" or one of {known}")]
    UnknownInterface {
        /// The name as written.
        found: String,
        /// The configured interface names, comma-separated.
        known: String,
    },
    /// A protocol that is not tcp/udp/icmp/any or a number 0-255.
    #[error("invalid protocol \"{found}\": {reason}")]
    InvalidProtocol {
        /// The text as written.
        found: String,
        /// What is expected.
        reason: ProtocolError,
    },
    /// A port or port range that does not parse.
    #[error("invalid port range \"{found}\": {reason}")]
    InvalidPortRange {
        /// The text as written.
        found: String,
        /// What is wrong with it.
        reason: PortError,
    },
    /// A port range on a rule whose protocol has no ports.
    #[error("a port range needs protocol tcp or udp, found protocol {protocol}")]
    PortsWithoutTransport {
        /// The rule's protocol as written or defaulted.
        protocol: String,
    },
    /// `limits` on a deny rule (it permits no connection to limit).
    #[error("limits apply to the connections a rule permits; this rule denies")]
    LimitsOnDeny,
    /// A route whose next hop is not in any interface's subnet.
    #[error("next hop {via} is not in a connected subnet (connected: {connected})")]
    NotConnected {
        /// The next hop.
        via: std::net::Ipv4Addr,
        /// The connected subnets, comma-separated.
        connected: String,
    },
    /// A route whose next hop is one of this node's own addresses.
    #[error("next hop {via} is the address of interface \"{interface}\"")]
    NextHopIsLocal {
        /// The next hop.
        via: std::net::Ipv4Addr,
        /// The interface that owns it.
        interface: String,
    },
    /// Two interfaces whose subnets overlap.
    #[error("subnet {subnet} overlaps {other} of interface \"{other_interface}\"")]
    OverlappingSubnets {
        /// This interface's subnet.
        subnet: crate::net::Ipv4Net,
        /// The earlier interface's subnet.
        other: crate::net::Ipv4Net,
        /// The earlier interface's name.
        other_interface: String,
    },
    /// An IPv6 route whose next hop is not in any interface's IPv6 subnet.
    #[error("next hop {via} is not in a connected IPv6 subnet (connected: {connected})")]
    NotConnected6 {
        /// The next hop.
        via: std::net::Ipv6Addr,
        /// The interfaces' IPv6 subnets, comma-separated, or `none`.
        connected: String,
    },
    /// An IPv6 route whose next hop is one of this node's own addresses.
    #[error("next hop {via} is the address of interface \"{interface}\"")]
    NextHopIsLocal6 {
        /// The next hop.
        via: std::net::Ipv6Addr,
        /// The interface that owns it.
        interface: String,
    },
    /// Two interfaces whose IPv6 subnets overlap.
    #[error("subnet {subnet} overlaps {other} of interface \"{other_interface}\"")]
    OverlappingSubnets6 {
        /// This interface's IPv6 subnet.
        subnet: crate::net::Ipv6Net,
        /// The earlier interface's IPv6 subnet.
        other: crate::net::Ipv6Net,
        /// The earlier interface's name.
        other_interface: String,
    },
    /// The cluster key is shorter than the minimum. The key itself is never
    /// part of a message.
    #[error("the cluster key is too short: {length} characters, at least {min} required")]
    KeyTooShort {
        /// Characters in the key as written.
        length: usize,
        /// The minimum.
        min: usize,
    },
    /// A name the node reserves for itself.
    #[error("the name \"{name}\" is reserved: {why}")]
    ReservedName {
        /// The reserved name.
        name: &'static str,
        /// Why.
        why: &'static str,
    },
    /// A member's CCL address outside the CCL subnet.
    #[error("{addr} is not in the CCL subnet {subnet} (cluster.ccl.address)")]
    NotInCclSubnet {
        /// The address.
        addr: std::net::Ipv4Addr,
        /// The CCL subnet.
        subnet: crate::net::Ipv4Net,
    },
    /// The member entry of this node disagrees with this node's own
    /// settings, or another member claims this node's CCL address.
    #[error("this node's member entry: {what} is {found}, expected {expected}")]
    SelfMemberMismatch {
        /// The field (`name`, `ccl-address`).
        what: &'static str,
        /// The value as written.
        found: String,
        /// What was expected and from where.
        expected: String,
    },
    /// Another member uses this node's CCL address.
    #[error("{addr} is this node's CCL address (cluster.ccl.address, node-id {node_id}), not member {id}'s")]
    CclAddressOfThisNode {
        /// The address.
        addr: std::net::Ipv4Addr,
        /// `cluster.node-id`.
        node_id: u8,
        /// The member that claims it.
        id: u8,
    },
    /// The member list does not include this node.
    #[error("the member list must include this node (node-id {node_id}); member ids are {ids}")]
    SelfNotAMember {
        /// `cluster.node-id`.
        node_id: u8,
        /// The member ids, comma-separated.
        ids: String,
    },
    /// `cluster.hold-time` shorter than the heartbeats it must span.
    #[error("hold time {hold_ms} ms is shorter than {heartbeats} heartbeat intervals ({interval_ms} ms each, cluster.heartbeat-interval)")]
    HoldTimeTooShort {
        /// The hold time written.
        hold_ms: u64,
        /// How many intervals it must span.
        heartbeats: u64,
        /// The heartbeat interval in effect.
        interval_ms: u64,
    },
    /// A feature SPEC N8 excludes from a cluster.
    #[error("{feature} is not supported in a cluster (SPEC N8)")]
    NotInCluster {
        /// The feature, as the reference names it.
        feature: &'static str,
    },
    /// A feature clusterfw does not have.
    #[error("{feature} is not supported by clusterfw")]
    Unsupported {
        /// The feature.
        feature: &'static str,
    },
    /// A NAT rule that differs from the first rule using the same pool.
    #[error("pool \"{pool}\" is also used by rule \"{rule}\" (line {first_line}), which differs in {what}")]
    NatPoolShared {
        /// The pool.
        pool: String,
        /// The first rule using it.
        rule: String,
        /// Line of that rule's name.
        first_line: usize,
        /// What differs, and the rule.
        what: &'static str,
    },
    /// A NAT rule without a key its kind needs.
    #[error("a {kind} rule needs `{key}`")]
    NatNeeds {
        /// The rule's kind.
        kind: &'static str,
        /// The missing key.
        key: &'static str,
    },
    /// A NAT rule with a key its kind does not use.
    #[error("`{key}` does not apply to a {kind} rule")]
    NatNotFor {
        /// The rule's kind.
        kind: &'static str,
        /// The key.
        key: &'static str,
    },
    /// A NAT rule naming a pool that is not configured.
    #[error("unknown pool \"{found}\": expected one of {known}")]
    UnknownPool {
        /// The name as written.
        found: String,
        /// The configured pools, comma-separated.
        known: String,
    },
    /// A static rule's prefix of the wrong length.
    #[error("prefix length /{found}: expected /{expected} (static NAT maps a prefix to one of the same length; static PAT one address)")]
    NatPrefixLength {
        /// The length as written.
        found: u8,
        /// The length needed.
        expected: u8,
    },
    /// A value that must be one of a few words.
    #[error("invalid value \"{found}\": expected {expected}")]
    InvalidChoice {
        /// The text as written.
        found: String,
        /// The choices.
        expected: &'static str,
    },
    /// `split-brain: quorum` with too few members to have a majority.
    #[error("split-brain quorum needs at least {min} members (cluster.members has {members})")]
    QuorumTooFewMembers {
        /// Configured members.
        members: usize,
        /// Members needed.
        min: usize,
    },
    /// A setting that needs this node's `cluster.site-id`.
    #[error("{setting} needs cluster.site-id (this node's site)")]
    NeedsSiteId {
        /// The setting.
        setting: &'static str,
    },
    /// A string that is not a unicast Ethernet address.
    #[error("invalid MAC address \"{found}\": {reason}")]
    InvalidMac {
        /// The text as written.
        found: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A replicated policy gives no security level for one of this node's
    /// interfaces: the node's interfaces are not the cluster's.
    #[error("no security level for this node's interface \"{name}\" (every member must have the interfaces the control node has)")]
    MissingInterface {
        /// This node's interface the policy does not name.
        name: String,
    },
    /// A CCL MTU too small to carry the data interfaces' frames.
    #[error("CCL MTU {found} cannot carry the data interfaces' frames: their largest MTU is {data_mtu}, and the CCL adds 96 bytes of headers; at least {need} required")]
    CclMtuTooSmall {
        /// The MTU configured.
        found: u64,
        /// The least MTU.
        need: u64,
        /// The largest data interface MTU.
        data_mtu: u64,
    },
    /// More workers on a cluster member than CCL channels.
    #[error("{workers} workers: a cluster member runs at most {max} (one CCL channel each; docs/workers.md)")]
    ClusterWorkers {
        /// The workers configured.
        workers: u16,
        /// The most a member may run.
        max: u16,
    },
    /// More workers than a NAT pool's block map deals over.
    #[error("{workers} workers: NAT rules run on at most {max} (a PAT pool's blocks are dealt over the workers; docs/nat.md)")]
    NatWorkers {
        /// The workers configured.
        workers: u16,
        /// The most NAT runs with.
        max: u16,
    },
    /// Two interfaces on the same device and VLAN.
    #[error("device \"{device}\"{vlan} is already used by interface \"{other_interface}\"")]
    DuplicateDevice {
        /// The device name (before the first comma).
        device: String,
        /// `" vlan N"` or empty.
        vlan: String,
        /// The earlier interface's name.
        other_interface: String,
    },
}

/// A configuration error with the position and field it concerns.
///
/// Display: `node.yaml:12:14: interfaces[1].address: invalid IPv4 prefix
/// "198.18.1.1/33": prefix length must be 0-32`. The details live behind one
/// `Box`, so `Result<_, ConfigError>` stays pointer-sized on the error side.
/// [`std::error::Error::source`] is the [`ErrorKind`].
#[derive(Debug)]
pub struct ConfigError(Box<Inner>);

#[derive(Debug)]
struct Inner {
    file: String,
    line: usize,
    column: usize,
    field: String,
    kind: ErrorKind,
}

impl ConfigError {
    pub(crate) fn new(
        file: &str,
        line: usize,
        column: usize,
        field: &FieldPath,
        kind: ErrorKind,
    ) -> ConfigError {
        ConfigError(Box::new(Inner {
            file: file.to_string(),
            line: line.max(1),
            column: column.max(1),
            field: field.to_string(),
            kind,
        }))
    }

    pub(crate) fn read(file: &str, e: std::io::Error) -> ConfigError {
        ConfigError(Box::new(Inner {
            file: file.to_string(),
            line: 0,
            column: 0,
            field: String::new(),
            kind: ErrorKind::Read(e),
        }))
    }

    /// The file name as given to [`crate::parse`] or [`crate::load`].
    pub fn file(&self) -> &str {
        &self.0.file
    }

    /// The 1-based line of the offending value; 0 only for a read error.
    pub fn line(&self) -> usize {
        self.0.line
    }

    /// The 1-based column (in characters); 0 only for a read error.
    pub fn column(&self) -> usize {
        self.0.column
    }

    /// The field path, like `interfaces[1].address`; empty when the error
    /// concerns the document as a whole (a YAML syntax error, a read error).
    pub fn field(&self) -> &str {
        &self.0.field
    }

    /// What is wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.0.kind
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.0;
        f.write_str(&e.file)?;
        if e.line != 0 {
            write!(f, ":{}:{}", e.line, e.column)?;
        }
        f.write_str(": ")?;
        if !e.field.is_empty() {
            write!(f, "{}: ", e.field)?;
        }
        write!(f, "{}", e.kind)
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_display() {
        let p = FieldPath::root().key("interfaces").index(1).key("address");
        assert_eq!(p.to_string(), "interfaces[1].address");
        assert_eq!(FieldPath::root().to_string(), "");
        assert_eq!(
            p.renderings(),
            vec!["interfaces[1].address", "interfaces[1]", "interfaces"]
        );
    }

    #[test]
    fn error_display() {
        let p = FieldPath::root().key("interfaces").index(1).key("address");
        let e = ConfigError::new(
            "node.yaml",
            12,
            14,
            &p,
            ErrorKind::InvalidPrefix {
                found: "198.18.1.1/33".into(),
                reason: PrefixError::LengthTooLong,
            },
        );
        assert_eq!(
            e.to_string(),
            "node.yaml:12:14: interfaces[1].address: invalid IPv4 prefix \"198.18.1.1/33\": prefix length must be 0-32"
        );
        let r = ConfigError::read("x.yaml", std::io::Error::from(std::io::ErrorKind::NotFound));
        assert!(
            r.to_string()
                .starts_with("x.yaml: cannot read configuration: "),
            "{r}"
        );
        assert_eq!(r.line(), 0);
    }
}
