//! The NAT rule table: which rule translates a packet (SPEC N1, N9).
//!
//! Rules are ordered; the first that matches wins. A rule matches an
//! outbound packet (real side → mapped side) by the interface it arrived
//! on (its real interface, or any), its source address (the rule's source
//! prefix) and, for static PAT, its protocol and source port. Inbound
//! traffic to a static rule's mapped address (or mapped address, protocol
//! and port) finds its rule by that alone; inbound traffic to dynamic
//! translations goes by the translation table, not by rules.
//!
//! For 10 000 rules and more (N9) the table is compiled once, aside, and
//! swapped in whole by the caller (the pipeline takes a new `Arc`-free box
//! between bursts, as it does the policy): a lookup costs a walk of at
//! most 33 trie nodes per candidate set (the packet's interface and "any"),
//! plus one hash probe for static PAT, whatever the number of rules.
//!
//! - source tries: one per real interface and one for "any"; each node of
//!   a binary trie over the prefix bits keeps the lowest rule index whose
//!   source prefix ends there; a lookup walks the address's bits and keeps
//!   the lowest index seen — the first matching rule of that set;
//! - static PAT rules (one address, protocol and port) are in hash maps by
//!   (real address, protocol, port) and by (mapped address, protocol,
//!   port), per real interface and for "any";
//! - static NAT rules' mapped prefixes are in a trie of their own for the
//!   inbound direction (a mapped prefix is owned by one rule: the first).
//!
//! Invariants (`tests`): `outbound` and `inbound` give the same answer as
//! a linear scan of the rules in order (property test over random rule
//! sets); lookups do not allocate; building never panics on any rule set.

use crate::route::IfIndex;
use std::collections::HashMap;
use std::net::Ipv4Addr;

/// What a rule does (the configuration's kinds).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RuleKind {
    StaticNat,
    StaticPat,
    DynamicNat,
    DynamicPat,
}

/// One rule as the table needs it (built from the configuration by the
/// node; `pool` indexes the node's pools).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSpec {
    pub kind: RuleKind,
    /// `None`: any interface.
    pub real_iface: Option<IfIndex>,
    pub mapped_iface: Option<IfIndex>,
    /// Real source prefix (address with host bits clear, length).
    pub source: (Ipv4Addr, u8),
    /// Static kinds: the mapped prefix (same length as `source`).
    pub mapped: Option<(Ipv4Addr, u8)>,
    /// Static PAT: protocol, real port, mapped port.
    pub ports: Option<(u8, u16, u16)>,
    /// Dynamic kinds: the pool.
    pub pool: Option<u16>,
    /// Dynamic PAT: which connections' xlates are per-session (N3).
    pub per_session: PerSession,
}

/// Which connections of a PAT rule get per-session xlates (N3): removed
/// when their connection ends, instead of waiting for the xlate timeout.
/// ICMP is always multi-session.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PerSession {
    pub tcp: bool,
    pub udp: UdpPerSession,
}

/// UDP's share of [`PerSession`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum UdpPerSession {
    /// To destination port 53 (DNS) only: the reference's default.
    Dns,
    All,
    None,
}

impl Default for PerSession {
    /// The reference's defaults: TCP and DNS per-session.
    fn default() -> Self {
        PerSession { tcp: true, udp: UdpPerSession::Dns }
    }
}

impl PerSession {
    /// Is a connection of `proto` to `dst_port` per-session?
    pub fn applies(&self, proto: u8, dst_port: u16) -> bool {
        match proto {
            6 => self.tcp,
            17 => match self.udp {
                UdpPerSession::Dns => dst_port == 53,
                UdpPerSession::All => true,
                UdpPerSession::None => false,
            },
            _ => false,
        }
    }
}

/// A binary trie over prefixes; each node keeps the lowest rule index of
/// the prefixes ending there (`u32::MAX`: none).
#[derive(Clone, Debug, Default)]
struct Trie {
    /// Node 0 is the root (prefix length 0).
    nodes: Vec<TrieNode>,
}

#[derive(Copy, Clone, Debug)]
struct TrieNode {
    child: [u32; 2],
    best: u32,
}

const NONE: u32 = u32::MAX;

impl Trie {
    fn insert(&mut self, addr: Ipv4Addr, len: u8, rule: u32) {
        if self.nodes.is_empty() {
            self.nodes.push(TrieNode { child: [NONE; 2], best: NONE });
        }
        let bits = u32::from(addr);
        let mut n = 0usize;
        for i in 0..u32::from(len.min(32)) {
            let b = (bits >> (31 - i) & 1) as usize;
            let next = self.nodes[n].child[b];
            n = if next == NONE {
                self.nodes.push(TrieNode { child: [NONE; 2], best: NONE });
                let new = self.nodes.len() - 1;
                self.nodes[n].child[b] = new as u32;
                new
            } else {
                next as usize
            };
        }
        self.nodes[n].best = self.nodes[n].best.min(rule);
    }

    /// The lowest rule index among the prefixes containing `addr`.
    #[inline]
    fn lookup(&self, addr: Ipv4Addr) -> u32 {
        let Some(mut node) = self.nodes.first() else { return NONE };
        let bits = u32::from(addr);
        let mut best = node.best;
        for i in 0..32 {
            let next = node.child[(bits >> (31 - i) & 1) as usize];
            let Some(n) = self.nodes.get(next as usize) else { break };
            node = n;
            best = best.min(node.best);
        }
        best
    }
}

/// A candidate set: the rules of one real interface, or of "any".
#[derive(Clone, Debug, Default)]
struct Set {
    sources: Trie,
    /// Static PAT by (real address, protocol, real port).
    static_pat: HashMap<(Ipv4Addr, u8, u16), u32>,
}

impl Set {
    #[inline]
    fn outbound(&self, src: Ipv4Addr, proto: u8, sport: u16) -> u32 {
        let t = self.sources.lookup(src);
        if self.static_pat.is_empty() {
            return t;
        }
        t.min(self.static_pat.get(&(src, proto, sport)).copied().unwrap_or(NONE))
    }
}

/// The compiled rules (module essay).
#[derive(Clone, Debug, Default)]
pub struct RuleTable {
    rules: Vec<RuleSpec>,
    per_iface: Vec<Set>,
    any: Set,
    /// Inbound: static NAT mapped prefixes, static PAT mapped endpoints.
    mapped: Trie,
    mapped_pat: HashMap<(Ipv4Addr, u8, u16), u32>,
}

impl RuleTable {
    /// Compile `rules` (in order) for `ifaces` interfaces. A rule naming an
    /// interface at or beyond `ifaces` never matches.
    pub fn build(rules: Vec<RuleSpec>, ifaces: usize) -> Self {
        let mut t = RuleTable { per_iface: vec![Set::default(); ifaces], ..Default::default() };
        for (i, r) in rules.iter().enumerate() {
            let i = i as u32;
            let set = match r.real_iface {
                None => &mut t.any,
                Some(x) => match t.per_iface.get_mut(usize::from(x.0)) {
                    Some(s) => s,
                    None => continue,
                },
            };
            match (r.kind, r.ports) {
                (RuleKind::StaticPat, Some((proto, rport, mport))) => {
                    set.static_pat.entry((r.source.0, proto, rport)).or_insert(i);
                    if let Some((m, _)) = r.mapped {
                        t.mapped_pat.entry((m, proto, mport)).or_insert(i);
                    }
                }
                (RuleKind::StaticPat, None) => {}
                _ => {
                    set.sources.insert(r.source.0, r.source.1, i);
                    if let (RuleKind::StaticNat, Some((m, len))) = (r.kind, r.mapped) {
                        t.mapped.insert(m, len, i);
                    }
                }
            }
        }
        t.rules = rules;
        t
    }

    /// Rules compiled.
    pub fn len(&self) -> usize {
        self.rules.len()
    }
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
    /// Rule `i`.
    pub fn rule(&self, i: u32) -> Option<&RuleSpec> {
        self.rules.get(i as usize)
    }

    /// The first rule translating a packet that arrived on `iface` from
    /// `src` (protocol `proto`, source port `sport`, 0 without ports).
    #[inline]
    pub fn outbound(&self, iface: IfIndex, src: Ipv4Addr, proto: u8, sport: u16) -> Option<u32> {
        let mut best = self.any.outbound(src, proto, sport);
        if let Some(s) = self.per_iface.get(usize::from(iface.0)) {
            best = best.min(s.outbound(src, proto, sport));
        }
        (best != NONE).then_some(best)
    }

    /// The static rule owning a packet to `dst` (protocol, destination
    /// port): static PAT by the exact endpoint, static NAT by prefix; the
    /// first in rule order when both match.
    #[inline]
    pub fn inbound(&self, dst: Ipv4Addr, proto: u8, dport: u16) -> Option<u32> {
        let mut best = self.mapped.lookup(dst);
        if !self.mapped_pat.is_empty() {
            best = best.min(self.mapped_pat.get(&(dst, proto, dport)).copied().unwrap_or(NONE));
        }
        (best != NONE).then_some(best)
    }
}

#[cfg(test)]
mod tests;
