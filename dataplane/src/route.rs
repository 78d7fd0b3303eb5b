//! IPv4 routing table: connected routes (one per interface subnet) and
//! static routes whose next hop is resolved to an egress interface through
//! the connected subnet that contains it.
//!
//! Lookup is longest-prefix match over one hash map per prefix length that
//! is present, probed longest first: at most 33 probes, typically a handful
//! (a firewall has few distinct prefix lengths), no allocation.
//!
//! Invariants: the table is built once by `RouteTable::new` and immutable
//! afterwards; every entry's interface index is valid for the interface list
//! it was built from; a connected route beats a static route to the same
//! prefix (administrative distance 0, as on every router); two static routes
//! to the same prefix are a configuration error (no ECMP yet).

use hashbrown::HashMap;
use std::net::Ipv4Addr;

/// Index of an interface in the pipeline's interface list (dense, 0-based).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct IfIndex(pub u16);

/// Result of a lookup.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RouteResult {
    pub iface: IfIndex,
    /// The gateway, or the destination itself for a connected route.
    pub next_hop: Ipv4Addr,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Target {
    Connected,
    Via(Ipv4Addr),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Entry {
    iface: IfIndex,
    target: Target,
}

/// One route as shown by `show route`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RouteInfo {
    pub destination: Ipv4Addr,
    pub prefix_len: u8,
    /// `None` for connected routes.
    pub via: Option<Ipv4Addr>,
    /// Interface name (from the `names` passed to `entries`).
    pub interface: String,
    pub kind: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteError {
    BadPrefixLen {
        destination: Ipv4Addr,
        prefix_len: u8,
    },
    /// The next hop is not inside any connected subnet.
    NextHopUnreachable {
        destination: Ipv4Addr,
        prefix_len: u8,
        via: Ipv4Addr,
    },
    Duplicate {
        destination: Ipv4Addr,
        prefix_len: u8,
    },
}

impl core::fmt::Display for RouteError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RouteError::BadPrefixLen {
                destination,
                prefix_len,
            } => {
                write!(
                    f,
                    "route {destination}/{prefix_len}: prefix length above 32"
                )
            }
            RouteError::NextHopUnreachable {
                destination,
                prefix_len,
                via,
            } => write!(
                f,
                "route {destination}/{prefix_len}: next hop {via} is not in any interface subnet"
            ),
            RouteError::Duplicate {
                destination,
                prefix_len,
            } => {
                write!(f, "route {destination}/{prefix_len} configured twice")
            }
        }
    }
}

/// Netmask of a prefix length (0..=32) as a host-order u32.
#[inline]
pub const fn mask(prefix_len: u8) -> u32 {
    if prefix_len == 0 {
        0
    } else if prefix_len >= 32 {
        u32::MAX
    } else {
        u32::MAX << (32 - prefix_len)
    }
}

/// True when `addr` is inside `net/prefix_len`.
#[inline]
pub fn contains(net: Ipv4Addr, prefix_len: u8, addr: Ipv4Addr) -> bool {
    let m = mask(prefix_len);
    u32::from(net) & m == u32::from(addr) & m
}

/// Routes of one prefix length kept inline in a `Level`.
const FEW: usize = 4;

#[derive(Copy, Clone, Debug)]
struct Level {
    mask: u32,
    /// `Some(n)`: the level's routes are `few[..n]`; `None`: look in
    /// `by_len`.
    n: Option<u8>,
    few: [(u32, Entry); FEW],
}

pub struct RouteTable {
    /// Index = prefix length; `None` when no route of that length exists.
    by_len: [Option<HashMap<u32, Entry>>; 33],
    /// Present prefix lengths, longest first, excluding /0.
    lens: Vec<u8>,
    /// Probe plan, one per entry of `lens`: the mask, and the routes of
    /// that length inline when there are at most `FEW` (compared without
    /// hashing: a firewall's connected subnets and a handful of static
    /// routes never touch the hash maps).
    levels: Vec<Level>,
    /// The /0 route, checked last without hashing.
    default: Option<Entry>,
    /// Connected subnets for next-hop resolution: (network, prefix, iface).
    connected: Vec<(u32, u8, IfIndex)>,
}

impl RouteTable {
    /// `connected`: (interface address, prefix length) in interface order.
    /// `statics`: (destination, prefix length, via).
    pub fn new(
        connected: &[(Ipv4Addr, u8)],
        statics: &[(Ipv4Addr, u8, Ipv4Addr)],
    ) -> Result<Self, RouteError> {
        let mut t = RouteTable {
            by_len: std::array::from_fn(|_| None),
            lens: Vec::new(),
            levels: Vec::new(),
            default: None,
            connected: Vec::new(),
        };
        for (i, &(addr, len)) in connected.iter().enumerate() {
            if len > 32 {
                return Err(RouteError::BadPrefixLen {
                    destination: addr,
                    prefix_len: len,
                });
            }
            let net = u32::from(addr) & mask(len);
            let iface = IfIndex(i as u16);
            t.connected.push((net, len, iface));
            // Two interfaces on one subnet: the first one wins.
            t.by_len[usize::from(len)]
                .get_or_insert_with(HashMap::new)
                .entry(net)
                .or_insert(Entry {
                    iface,
                    target: Target::Connected,
                });
        }
        for &(dst, len, via) in statics {
            if len > 32 {
                return Err(RouteError::BadPrefixLen {
                    destination: dst,
                    prefix_len: len,
                });
            }
            let iface = t
                .connected_iface(via)
                .ok_or(RouteError::NextHopUnreachable {
                    destination: dst,
                    prefix_len: len,
                    via,
                })?;
            let map = t.by_len[usize::from(len)].get_or_insert_with(HashMap::new);
            let key = u32::from(dst) & mask(len);
            match map.get(&key) {
                Some(Entry {
                    target: Target::Connected,
                    ..
                }) => {}
                Some(_) => {
                    return Err(RouteError::Duplicate {
                        destination: dst,
                        prefix_len: len,
                    })
                }
                None => {
                    map.insert(
                        key,
                        Entry {
                            iface,
                            target: Target::Via(via),
                        },
                    );
                }
            }
        }
        t.lens = (1..=32u8)
            .rev()
            .filter(|&l| t.by_len[usize::from(l)].is_some())
            .collect();
        t.levels = t
            .lens
            .iter()
            .map(|&l| {
                let none = (0, Entry { iface: IfIndex(0), target: Target::Connected });
                let mut lv = Level { mask: mask(l), n: None, few: [none; FEW] };
                if let Some(m) = &t.by_len[usize::from(l)] {
                    if m.len() <= FEW {
                        for (slot, (&k, &e)) in lv.few.iter_mut().zip(m.iter()) {
                            *slot = (k, e);
                        }
                        lv.n = Some(m.len() as u8);
                    }
                }
                lv
            })
            .collect();
        t.default = t.by_len[0].as_ref().and_then(|m| m.get(&0).copied());
        Ok(t)
    }

    /// The interface whose connected subnet contains `addr` (longest match).
    pub fn connected_iface(&self, addr: Ipv4Addr) -> Option<IfIndex> {
        let a = u32::from(addr);
        self.connected
            .iter()
            .filter(|&&(net, len, _)| a & mask(len) == net)
            .max_by_key(|&&(_, len, _)| len)
            .map(|&(_, _, i)| i)
    }

    /// Longest-prefix match. No allocation; prefix lengths holding at most
    /// `FEW` routes and the default route are compared without hashing.
    #[inline(always)]
    pub fn lookup(&self, dst: Ipv4Addr) -> Option<RouteResult> {
        let a = u32::from(dst);
        let hit = |e: &Entry| RouteResult {
            iface: e.iface,
            next_hop: match e.target {
                Target::Connected => dst,
                Target::Via(v) => v,
            },
        };
        for (&len, lv) in self.lens.iter().zip(&self.levels) {
            let key = a & lv.mask;
            match lv.n {
                Some(n) => {
                    if let Some((_, e)) = lv.few.iter().take(usize::from(n)).find(|(k, _)| *k == key) {
                        return Some(hit(e));
                    }
                }
                None => {
                    if let Some(e) = self.by_len[usize::from(len)].as_ref().and_then(|map| map.get(&key)) {
                        return Some(hit(e));
                    }
                }
            }
        }
        self.default.as_ref().map(hit)
    }

    /// All routes, longest prefix first, then by destination; `names[i]`
    /// names interface `IfIndex(i)`.
    pub fn entries(&self, names: &[String]) -> Vec<RouteInfo> {
        let mut out = Vec::new();
        for &len in self
            .lens
            .iter()
            .chain(self.default.is_some().then_some(&0u8))
        {
            if let Some(map) = &self.by_len[usize::from(len)] {
                let mut v: Vec<_> = map
                    .iter()
                    .map(|(&net, e)| RouteInfo {
                        destination: Ipv4Addr::from(net),
                        prefix_len: len,
                        via: match e.target {
                            Target::Connected => None,
                            Target::Via(v) => Some(v),
                        },
                        interface: names
                            .get(usize::from(e.iface.0))
                            .cloned()
                            .unwrap_or_default(),
                        kind: match e.target {
                            Target::Connected => "connected",
                            Target::Via(_) => "static",
                        },
                    })
                    .collect();
                v.sort_by_key(|r| r.destination);
                out.extend(v);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn a(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    /// The routes of config/examples/node.yaml.
    fn example() -> RouteTable {
        RouteTable::new(
            &[(a("198.18.1.1"), 24), (a("198.18.2.1"), 24)],
            &[
                (a("0.0.0.0"), 0, a("198.18.2.254")),
                (a("203.0.113.0"), 24, a("198.18.1.254")),
            ],
        )
        .unwrap()
    }

    #[test]
    fn longest_prefix_wins() {
        let t = example();
        assert_eq!(
            t.lookup(a("198.18.1.10")),
            Some(RouteResult {
                iface: IfIndex(0),
                next_hop: a("198.18.1.10")
            })
        );
        assert_eq!(
            t.lookup(a("198.18.2.7")),
            Some(RouteResult {
                iface: IfIndex(1),
                next_hop: a("198.18.2.7")
            })
        );
        assert_eq!(
            t.lookup(a("203.0.113.9")),
            Some(RouteResult {
                iface: IfIndex(0),
                next_hop: a("198.18.1.254")
            })
        );
        assert_eq!(
            t.lookup(a("8.8.8.8")),
            Some(RouteResult {
                iface: IfIndex(1),
                next_hop: a("198.18.2.254")
            })
        );
        let e = t.entries(&["inside".into(), "outside".into()]);
        assert_eq!(e[3].interface, "outside");
        assert_eq!(e.len(), 4);
        assert_eq!(e[3].prefix_len, 0);
        assert_eq!(e[0].kind, "connected");
    }

    #[test]
    fn no_default_no_route() {
        let t = RouteTable::new(&[(a("10.0.0.1"), 8)], &[]).unwrap();
        assert_eq!(t.lookup(a("11.0.0.1")), None);
    }

    #[test]
    fn errors() {
        assert!(matches!(
            RouteTable::new(&[(a("10.0.0.1"), 8)], &[(a("0.0.0.0"), 0, a("192.0.2.1"))]),
            Err(RouteError::NextHopUnreachable { .. })
        ));
        assert!(matches!(
            RouteTable::new(
                &[(a("10.0.0.1"), 8)],
                &[
                    (a("1.0.0.0"), 8, a("10.0.0.2")),
                    (a("1.2.0.0"), 8, a("10.0.0.3"))
                ]
            ),
            Err(RouteError::Duplicate { .. })
        ));
        assert!(matches!(
            RouteTable::new(&[(a("10.0.0.1"), 33)], &[]),
            Err(RouteError::BadPrefixLen { .. })
        ));
    }

    proptest! {
        /// Lookup agrees with a linear scan for the longest matching prefix.
        /// Short prefixes are frequent, so that random probes hit them and
        /// some lengths hold more than `FEW` routes (the hash-map levels).
        #[test]
        fn matches_linear_scan(routes in proptest::collection::vec((any::<u32>(), prop_oneof![0u8..=32, 1u8..=4]), 0..30),
                               probes in proptest::collection::vec(any::<u32>(), 1..50)) {
            let mut statics = Vec::new();
            let mut seen = std::collections::HashSet::new();
            seen.insert((u32::from(a("10.0.0.0")), 8u8)); // shadowed by the connected route
            for &(d, l) in &routes {
                if seen.insert((d & mask(l), l)) {
                    let via = Ipv4Addr::from(u32::from(a("10.0.1.0")) + statics.len() as u32);
                    statics.push((Ipv4Addr::from(d), l, via));
                }
            }
            let t = RouteTable::new(&[(a("10.0.0.1"), 8)], &statics).unwrap();
            for p in probes {
                let dst = Ipv4Addr::from(p);
                let mut cands: Vec<(u8, Ipv4Addr)> =
                    statics.iter().filter(|s| contains(s.0, s.1, dst)).map(|s| (s.1, s.2)).collect();
                if contains(a("10.0.0.0"), 8, dst) { cands.push((8, dst)); }
                let best = cands.into_iter().max_by_key(|c| c.0).map(|c| c.1);
                prop_assert_eq!(t.lookup(dst).map(|r| r.next_hop), best);
            }
        }
    }
}
