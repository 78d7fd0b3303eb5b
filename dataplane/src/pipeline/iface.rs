//! The configured interfaces as the packet path sees them: a read-only
//! table built once by `Pipeline::new` and lent to every stage.
//!
//! Invariants: `list[i]` is interface `IfIndex(i)` (the configuration's
//! order, the index names and ACL rules use); no two interfaces share
//! (port, VLAN); `untagged[p]` is the untagged interface on port `p`, if
//! any; `own` holds every interface address and directed broadcast, all
//! derived from `list` (nothing here changes after `new`).

use crate::route::{contains, mask, IfIndex};
use crate::types::PortId;
use std::net::Ipv4Addr;

/// Anti-spoofing on an interface (unicast reverse-path forwarding, RFC
/// 3704 §2): which sources a datagram received on it may carry.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum ReversePath {
    /// The route back to the source leaves by this interface (RFC 3704
    /// §2.2). A default route counts: on the interface it leaves by, any
    /// source not routed elsewhere passes.
    #[default]
    Strict,
    /// Some route leads back to the source, by any interface (§2.3).
    Loose,
    /// Not checked.
    Off,
}

/// An interface (Copy; the name lives in `Interfaces::names`).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Iface {
    pub port: PortId,
    pub mac: [u8; 6],
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    pub vlan: Option<u16>,
    /// The largest IPv4 datagram the link carries (bytes, L3).
    pub mtu: u16,
    pub reverse_path: ReversePath,
}

impl Iface {
    /// The subnet-directed broadcast address; none on /31 (RFC 3021) and
    /// /32 links.
    pub fn directed_broadcast(&self) -> Option<Ipv4Addr> {
        (self.prefix_len <= 30).then(|| Ipv4Addr::from(u32::from(self.addr) | !mask(self.prefix_len)))
    }
    pub fn in_subnet(&self, a: Ipv4Addr) -> bool {
        contains(self.addr, self.prefix_len, a)
    }
}

pub(crate) struct Interfaces {
    list: Vec<Iface>,
    names: Vec<String>,
    /// Per port: the untagged interface on it (the fast path's lookup).
    untagged: Vec<Option<u16>>,
    /// Every interface address and directed broadcast.
    own: Vec<Ipv4Addr>,
}

impl Interfaces {
    /// From interfaces already validated by `pipeline::config`; `max_port`
    /// is the highest port any of them uses.
    pub fn new(list: Vec<Iface>, names: Vec<String>, max_port: usize) -> Self {
        let untagged = (0..=max_port)
            .map(|p| list.iter().position(|i| usize::from(i.port.0) == p && i.vlan.is_none()).map(|i| i as u16))
            .collect();
        let own = list.iter().flat_map(|i| [Some(i.addr), i.directed_broadcast()]).flatten().collect();
        Interfaces { list, names, untagged, own }
    }
    /// Every interface, in configuration order.
    pub fn iter(&self) -> impl Iterator<Item = Iface> + '_ {
        self.list.iter().copied()
    }
    #[inline]
    pub fn get(&self, ifx: IfIndex) -> Option<Iface> {
        self.list.get(usize::from(ifx.0)).copied()
    }
    /// The interface on (port, VLAN).
    #[inline]
    pub fn by_port(&self, port: PortId, vlan: Option<u16>) -> Option<(IfIndex, Iface)> {
        self.list
            .iter()
            .enumerate()
            .find(|(_, i)| i.port == port && i.vlan == vlan)
            .map(|(n, i)| (IfIndex(n as u16), *i))
    }
    /// The untagged interface on `port`.
    #[inline(always)]
    pub fn untagged(&self, port: PortId) -> Option<(IfIndex, Iface)> {
        let i = self.untagged.get(usize::from(port.0)).copied().flatten()?;
        Some((IfIndex(i), *self.list.get(usize::from(i))?))
    }
    /// One of our addresses or directed broadcasts.
    #[inline(always)]
    pub fn is_own(&self, a: Ipv4Addr) -> bool {
        self.own.contains(&a)
    }
    /// The directed broadcast of one of our subnets.
    pub fn is_directed_broadcast(&self, a: Ipv4Addr) -> bool {
        self.list.iter().any(|i| i.directed_broadcast() == Some(a))
    }
    pub fn names(&self) -> &[String] {
        &self.names
    }
}
