//! The `nat` section (SPEC N1–N9): address pools and translation rules.
//! Part of the replicated policy: every member runs the control node's
//! rules (a pool's block map is only meaningful if all agree on it).

use std::net::Ipv4Addr;

use crate::net::Ipv4Net;

/// Ports per PAT block unless a rule says otherwise (N2).
pub const DEFAULT_BLOCK_SIZE: u16 = 512;
/// Smallest PAT block (the dataplane's `nat::blocks::MIN_BLOCK_SIZE`).
pub const MIN_BLOCK_SIZE: u16 = 32;
/// Largest PAT block: 16 blocks per address, one per possible member.
pub const MAX_BLOCK_SIZE: u16 = 4096;
/// Largest maximum blocks per host.
pub const MAX_BLOCKS_PER_HOST: u16 = 8;
/// Most addresses in one pool (a /16).
pub const MAX_POOL_ADDRESSES: usize = 65_536;

/// `nat`: pools and rules.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct NatConfig {
    /// `nat.pools`.
    pub pools: Vec<NatPool>,
    /// `nat.rules`, in order: the first rule whose interfaces and real
    /// source match translates.
    pub rules: Vec<NatRule>,
}

impl NatConfig {
    /// No pool and no rule.
    pub fn is_empty(&self) -> bool {
        self.pools.is_empty() && self.rules.is_empty()
    }
    /// The pool called `name`.
    pub fn pool(&self, name: &str) -> Option<&NatPool> {
        self.pools.iter().find(|p| p.name == name)
    }
}

/// `nat.pools[]`: mapped addresses for dynamic NAT and PAT.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NatPool {
    /// `name`: what rules call it.
    pub name: String,
    /// Every address, ascending, distinct (from the entries as written:
    /// addresses, prefixes, `a-b` ranges).
    pub addresses: Vec<Ipv4Addr>,
    /// The entries as written (what `to_yaml` writes back).
    pub entries: Vec<String>,
}

/// What a rule translates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NatKind {
    /// One real address (or prefix) to one mapped address (or prefix of
    /// the same length), both ways.
    StaticNat,
    /// One real (address, protocol, port) to one mapped (address, port).
    StaticPat,
    /// Real sources to pool addresses, one each (the control node hands
    /// them out, N4).
    DynamicNat,
    /// Real sources to pool (address, port)s, by port blocks (N2, N3).
    DynamicPat,
}

impl NatKind {
    /// The YAML word.
    pub fn as_str(self) -> &'static str {
        match self {
            NatKind::StaticNat => "static-nat",
            NatKind::StaticPat => "static-pat",
            NatKind::DynamicNat => "dynamic-nat",
            NatKind::DynamicPat => "dynamic-pat",
        }
    }
    /// Dynamic NAT or dynamic PAT (from a pool).
    pub fn is_dynamic(self) -> bool {
        matches!(self, NatKind::DynamicNat | NatKind::DynamicPat)
    }
}

/// Which UDP connections of a PAT rule are per-session (N3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum UdpSessions {
    /// DNS (destination port 53) per-session, other UDP multi-session:
    /// the reference's default.
    Dns,
    /// Every UDP connection per-session.
    All,
    /// Every UDP connection multi-session.
    None,
}

impl UdpSessions {
    /// The YAML word.
    pub fn as_str(self) -> &'static str {
        match self {
            UdpSessions::Dns => "dns",
            UdpSessions::All => "all",
            UdpSessions::None => "none",
        }
    }
}

/// `nat.rules[]`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NatRule {
    /// `name`.
    pub name: String,
    /// `kind`.
    pub kind: NatKind,
    /// `real-interface`: where the real side is; `None` for "any".
    pub real_interface: Option<String>,
    /// `mapped-interface`: where the mapped side is; `None` for "any".
    pub mapped_interface: Option<String>,
    /// `source`: the real addresses translated.
    pub source: Ipv4Net,
    /// `pool` (dynamic kinds).
    pub pool: Option<String>,
    /// `mapped` (static kinds): the mapped address (prefix for static NAT
    /// of a prefix, same length as `source`).
    pub mapped: Option<Ipv4Net>,
    /// `protocol` (static PAT): 6 or 17.
    pub protocol: Option<u8>,
    /// `real-port` (static PAT).
    pub real_port: Option<u16>,
    /// `mapped-port` (static PAT).
    pub mapped_port: Option<u16>,
    /// `block-size` (dynamic PAT).
    pub block_size: u16,
    /// `include-reserved-ports` (dynamic PAT): blocks from port 1, not 1024.
    pub include_reserved_ports: bool,
    /// `max-blocks-per-host` (dynamic PAT): port block allocation, at most
    /// this many blocks per inside host on each node and worker (N6);
    /// `None`: plain PAT, any host takes ports from any of the node's
    /// blocks.
    pub max_blocks_per_host: Option<u16>,
    /// `per-session-tcp` (PAT): default true (N3).
    pub per_session_tcp: bool,
    /// `per-session-udp` (PAT): default DNS only (N3).
    pub per_session_udp: UdpSessions,
}

impl NatRule {
    /// Whether the rule names specific interfaces on both sides (N1: the
    /// rules sharing a pool must all do, or all use "any").
    pub fn specific_interfaces(&self) -> bool {
        self.real_interface.is_some() && self.mapped_interface.is_some()
    }
}
