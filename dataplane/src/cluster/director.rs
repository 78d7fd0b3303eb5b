//! Symmetric flow hash, director ranking and backup owners (SPEC R2–R4).
//!
//! `flow_hash` maps both directions of a connection to the same `u64`: the
//! two (address, port) endpoints are put in a canonical order before they
//! are hashed, and the ICMP "ports" already follow R3 in `FiveTuple` (echo
//! request `(id, 0)`, reply `(0, id)`), so a request and its reply agree.
//! `DirectorTable` ranks the members for a hash by rendezvous
//! (highest-random-weight) hashing: member `n` weighs `weight(h, n)`, the
//! heaviest is the director, the rest follow in weight order.
//!
//! Invariants:
//! - the hash is a pure function of the tuple and a seed — no per-process
//!   randomness — so every node, every run and every build computes the
//!   same value; `tests::golden_values` pins it, because two nodes that
//!   disagree on a hash disagree on the director (rolling upgrades!);
//! - `weight(h, n)` depends on `h` and `n` only, never on who else is a
//!   member; so when a member leaves only the flows it directed move, and
//!   when one joins only the flows it now wins move (to it): ≈ 1/N of the
//!   flows, and never between two members that stay (`tests::movement`);
//! - a weight carries its node id in its low 4 bits, so weights never tie
//!   and the ranking is a total order, identical on every node;
//! - lookups neither allocate nor panic; a table always has ≥ 1 member.

use super::members::{MemberError, MemberSet};
use crate::types::{Epoch, FiveTuple, NodeId};
use std::net::IpAddr;

/// Cluster-wide default seed of the flow hash (ASCII "clusterf"). All
/// members must use the same seed; a deployment may derive another one
/// from its cluster key (`FlowHasher::new`) so that outsiders cannot aim
/// many flows at one director.
pub const FLOW_HASH_SEED: u64 = 0x636c_7573_7465_7266;

/// Odd 64-bit constants with balanced bits (wyhash's published secrets).
const K: [u64; 5] = [
    0xa076_1d64_78bd_642f,
    0xe703_7ed1_a0b4_28db,
    0x8ebc_6af0_9c88_c6e3,
    0x5899_65cc_7537_4cc3,
    0x1d8e_4e27_c47d_124f,
];

/// The full 128-bit product folded to 64 bits (the wyhash/foldhash
/// primitive: every input bit reaches every output bit in one multiply).
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

/// MurmurHash3's 64-bit finalizer: a bijection with full avalanche.
#[inline(always)]
fn fmix64(mut z: u64) -> u64 {
    z ^= z >> 33;
    z = z.wrapping_mul(0xff51_afd7_ed55_8ccd);
    z ^= z >> 33;
    z = z.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    z ^ (z >> 33)
}

/// The symmetric flow hash with an explicit seed. `Copy`, stateless.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlowHasher {
    seed: u64,
}

impl Default for FlowHasher {
    fn default() -> Self {
        FlowHasher::new(FLOW_HASH_SEED)
    }
}

impl FlowHasher {
    pub const fn new(seed: u64) -> Self {
        FlowHasher { seed }
    }

    /// Hash of the connection `t` belongs to; `hash(t) == hash(&t.reversed())`.
    #[inline]
    pub fn hash(&self, t: &FiveTuple) -> u64 {
        match (t.src, t.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let (a, pa) = (u32::from(s), t.src_port);
                let (b, pb) = (u32::from(d), t.dst_port);
                let ((lo, plo), (hi, phi)) = if (a, pa) <= (b, pb) { ((a, pa), (b, pb)) } else { ((b, pb), (a, pa)) };
                let addrs = u64::from(lo) << 32 | u64::from(hi);
                let h = fold_mul(self.seed ^ K[0] ^ addrs, K[1]);
                let h = fold_mul(h ^ ports_word(plo, phi, t.proto, 4), K[2]);
                fmix64(h)
            }
            (s, d) => {
                // IPv6, or (never seen on the wire) mixed families: IPv4
                // becomes IPv4-mapped IPv6 so the order is still total.
                let (a, pa) = (v6_bits(s), t.src_port);
                let (b, pb) = (v6_bits(d), t.dst_port);
                let ((lo, plo), (hi, phi)) = if (a, pa) <= (b, pb) { ((a, pa), (b, pb)) } else { ((b, pb), (a, pa)) };
                let mut h = self.seed ^ K[0];
                h = fold_mul(h ^ (lo >> 64) as u64, K[1]);
                h = fold_mul(h ^ lo as u64, K[2]);
                h = fold_mul(h ^ (hi >> 64) as u64, K[3]);
                h = fold_mul(h ^ hi as u64, K[4]);
                h = fold_mul(h ^ ports_word(plo, phi, t.proto, 6), K[1]);
                fmix64(h)
            }
        }
    }
}

#[inline(always)]
fn ports_word(plo: u16, phi: u16, proto: u8, family: u8) -> u64 {
    u64::from(plo) << 32 | u64::from(phi) << 16 | u64::from(proto) << 8 | u64::from(family)
}

#[inline(always)]
fn v6_bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// `FlowHasher::default().hash(t)`: the symmetric flow hash with the
/// cluster-wide `FLOW_HASH_SEED`.
#[inline]
pub fn flow_hash(t: &FiveTuple) -> u64 {
    FlowHasher::default().hash(t)
}

/// Per-node salt of the rendezvous weight: a fixed function of the node id.
#[inline(always)]
const fn node_salt(node: u8) -> u64 {
    // (n + 1) * 2^64/φ, a Weyl sequence: distinct, well spread salts.
    (node as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Rendezvous weight of `node` for flow hash `h`. Independent of the
/// member set — that is the whole movement guarantee. The low 4 bits are
/// the node id, so the weights of two members never tie (equal top 60 bits,
/// probability 2^-60, go to the higher id) and the director is a plain
/// branch-free `max`.
#[inline(always)]
pub fn weight(h: u64, node: NodeId) -> u64 {
    packed_weight(h, node_salt(node.0), node)
}

#[inline(always)]
fn packed_weight(h: u64, salt: u64, node: NodeId) -> u64 {
    (fmix64(h ^ salt) & !NODE_BITS_MASK) | (u64::from(node.0) & NODE_BITS_MASK)
}

const NODE_BITS_MASK: u64 = (NodeId::MAX_NODES - 1) as u64;

/// Members in rank order for one flow hash (director first). Fixed
/// capacity, `Copy`, no allocation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ranking {
    nodes: [NodeId; NodeId::MAX_NODES],
    len: u8,
}

impl Ranking {
    #[inline]
    pub fn as_slice(&self) -> &[NodeId] {
        &self.nodes[..usize::from(self.len)]
    }
    #[inline]
    pub fn iter(&self) -> core::iter::Copied<core::slice::Iter<'_, NodeId>> {
        self.as_slice().iter().copied()
    }
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The director (never `None` for a ranking from a `DirectorTable`).
    #[inline]
    pub fn first(&self) -> Option<NodeId> {
        self.as_slice().first().copied()
    }
}

/// Most backups one flow can have: two backup owners (`backups: 2`), a
/// chassis backup, a site backup (R4) and the local director (R12).
pub const MAX_BACKUPS: usize = 5;

/// Backup owners per flow a table may be asked for (`backups: 1 | 2`).
pub const MAX_BACKUP_OWNERS: u8 = 2;

/// The backup owners of one flow, in order: the backup owner(s) (R4; two
/// with `backups: 2`), then the extra chassis backup, then the extra site
/// backup, then the local director (R12), each present only if its rule
/// applies; never the owner, never twice the same node.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Backups {
    nodes: [NodeId; MAX_BACKUPS],
    len: u8,
}

impl Backups {
    const EMPTY: Backups = Backups { nodes: [NodeId(0); MAX_BACKUPS], len: 0 };
    #[inline]
    pub fn as_slice(&self) -> &[NodeId] {
        &self.nodes[..usize::from(self.len)]
    }
    #[inline]
    pub fn iter(&self) -> core::iter::Copied<core::slice::Iter<'_, NodeId>> {
        self.as_slice().iter().copied()
    }
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    #[inline]
    pub fn contains(&self, n: NodeId) -> bool {
        self.as_slice().contains(&n)
    }
    /// Add `n` unless it is there or the set is full.
    #[inline]
    pub fn push(&mut self, n: NodeId) {
        self.push_unique(n);
    }
    #[inline]
    fn push_unique(&mut self, n: NodeId) {
        if !self.contains(n) && usize::from(self.len) < MAX_BACKUPS {
            self.nodes[usize::from(self.len)] = n;
            self.len += 1;
        }
    }
}

impl Default for Backups {
    fn default() -> Self {
        Backups::EMPTY
    }
}

/// Director ranking for one member set, stamped with its epoch. Rebuild it
/// (cheap: a few hundred bytes copied) whenever the member set changes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DirectorTable {
    epoch: Epoch,
    len: u8,
    /// Members ascending, then their salts: the hot loop reads these two.
    nodes: [NodeId; NodeId::MAX_NODES],
    salts: [u64; NodeId::MAX_NODES],
    /// Indexed by node id.
    site: [Option<u8>; NodeId::MAX_NODES],
    chassis: [Option<u8>; NodeId::MAX_NODES],
    site_redundancy: bool,
    /// Director localization (R12, `with_localization`).
    localization: bool,
    /// Backup owners per flow, 1 or 2 (`with_backups`).
    backup_owners: u8,
}

impl DirectorTable {
    /// The table for `set` (site redundancy off). An empty set has no
    /// director: `MemberError::Empty`.
    pub fn new(set: &MemberSet) -> Result<Self, MemberError> {
        if set.is_empty() {
            return Err(MemberError::Empty);
        }
        let mut t = DirectorTable {
            epoch: set.epoch(),
            len: 0,
            nodes: [NodeId(0); NodeId::MAX_NODES],
            salts: [0; NodeId::MAX_NODES],
            site: [None; NodeId::MAX_NODES],
            chassis: [None; NodeId::MAX_NODES],
            site_redundancy: false,
            localization: false,
            backup_owners: 1,
        };
        for n in set.iter() {
            let i = usize::from(t.len);
            t.nodes[i] = n;
            t.salts[i] = node_salt(n.0);
            let info = set.info(n).unwrap_or_default();
            t.site[n.index()] = info.site;
            t.chassis[n.index()] = info.chassis;
            t.len += 1;
        }
        Ok(t)
    }

    /// With site redundancy on, a flow whose backup owner is at the
    /// owner's site also gets a backup at another site (R4).
    pub fn with_site_redundancy(mut self, on: bool) -> Self {
        self.site_redundancy = on;
        self
    }

    /// Director localization (R12): every flow also has a local director
    /// at its owner's site (`local_director`), which holds its record
    /// like a backup; forwarders ask the local director of their own site
    /// first. Nodes without a site id have no local director.
    pub fn with_localization(mut self, on: bool) -> Self {
        self.localization = on;
        self
    }

    /// `next` (a table for a new member set) with this table's rules:
    /// backup owners, site redundancy, localization.
    pub fn same_rules(&self, next: DirectorTable) -> DirectorTable {
        next.with_backups(self.backup_owners)
            .with_site_redundancy(self.site_redundancy)
            .with_localization(self.localization)
    }

    /// The site id of member `n` (`None`: none configured, or not a
    /// member).
    #[inline]
    pub fn site_of(&self, n: NodeId) -> Option<u8> {
        self.site.get(n.index()).copied().flatten()
    }

    /// The local director of flow hash `h` at `site` (R12): the member of
    /// highest weight among the members at that site, as the director is
    /// among all (so it is the director whenever the director is at that
    /// site). `None` when localization is off or no member is there.
    #[inline]
    pub fn local_director(&self, h: u64, site: u8) -> Option<NodeId> {
        if !self.localization {
            return None;
        }
        let n = usize::from(self.len);
        let mut best = None;
        for (&node, &salt) in self.nodes[..n].iter().zip(&self.salts[..n]) {
            if self.site[node.index()] == Some(site) {
                let w = packed_weight(h, salt, node);
                best = Some(best.map_or(w, |b: u64| b.max(w)));
            }
        }
        best.map(|w| NodeId((w & NODE_BITS_MASK) as u8))
    }

    /// `backups: 1 | 2`: how many backup owners every flow has (clamped to
    /// 1..=`MAX_BACKUP_OWNERS`). With 2, the backup owners are the first two
    /// members of the flow's ranking other than the owner, so any two
    /// failures leave one of them — and the first survivor of the ranking,
    /// the new director, is one of them whenever the owner failed.
    pub fn with_backups(mut self, n: u8) -> Self {
        self.backup_owners = n.clamp(1, MAX_BACKUP_OWNERS);
        self
    }

    /// Backup owners per flow (1 or 2).
    #[inline]
    pub fn backup_owners(&self) -> u8 {
        self.backup_owners
    }

    /// The epoch of the member set this table was built from.
    #[inline]
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }
    /// Always false (a table has at least one member); for clippy's sake.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    #[inline]
    pub fn members(&self) -> &[NodeId] {
        &self.nodes[..usize::from(self.len)]
    }

    /// The director of flow hash `h`: the member of highest weight.
    #[inline]
    pub fn director(&self, h: u64) -> NodeId {
        let n = usize::from(self.len);
        let mut best = 0u64;
        for (&node, &salt) in self.nodes[..n].iter().zip(&self.salts[..n]) {
            best = best.max(packed_weight(h, salt, node));
        }
        NodeId((best & NODE_BITS_MASK) as u8)
    }

    /// The two heaviest members for `h` (director, runner-up), in one
    /// branch-free pass.
    #[inline]
    fn top2(&self, h: u64) -> (NodeId, Option<NodeId>) {
        let n = usize::from(self.len);
        let (mut best, mut second) = (0u64, 0u64);
        for (&node, &salt) in self.nodes[..n].iter().zip(&self.salts[..n]) {
            let w = packed_weight(h, salt, node);
            second = second.max(best.min(w));
            best = best.max(w);
        }
        let id = |w: u64| NodeId((w & NODE_BITS_MASK) as u8);
        (id(best), (n > 1).then(|| id(second)))
    }

    /// All members in rank order for `h` (director first).
    #[inline]
    pub fn ranking(&self, h: u64) -> Ranking {
        let n = usize::from(self.len);
        let mut w = [0u64; NodeId::MAX_NODES];
        for (slot, (&node, &salt)) in w.iter_mut().zip(self.nodes[..n].iter().zip(&self.salts[..n])) {
            *slot = packed_weight(h, salt, node);
        }
        // Insertion sort, descending: ≤ 16 elements, no allocation.
        for i in 1..n {
            let x = w[i];
            let mut j = i;
            while j > 0 && w[j - 1] < x {
                w[j] = w[j - 1];
                j -= 1;
            }
            w[j] = x;
        }
        let mut r = Ranking { nodes: [NodeId(0); NodeId::MAX_NODES], len: self.len };
        for (out, &wt) in r.nodes.iter_mut().zip(&w[..n]) {
            *out = NodeId((wt & NODE_BITS_MASK) as u8);
        }
        r
    }

    /// The backup owner (R4): the director, unless `owner` is the
    /// director, then the next member in rank order. `None` when the owner
    /// is the only member.
    #[inline]
    pub fn backup(&self, h: u64, owner: NodeId) -> Option<NodeId> {
        let (d, runner_up) = self.top2(h);
        if d != owner {
            Some(d)
        } else {
            runner_up
        }
    }

    /// Every backup of a flow (R4): the backup owner(s) (the director
    /// unless it is the owner, then the next member in rank order; with
    /// `backups: 2` the first two members of the ranking other than the
    /// owner); plus, if chassis ids are configured and every backup owner
    /// sits in the owner's chassis, the first member in rank order on
    /// another (configured) chassis; plus, with site redundancy, if every
    /// backup owner is at the owner's site, the first member in rank order
    /// at another (configured) site. The two extra rules are independent;
    /// a node chosen twice appears once. An owner that is not in the table
    /// has no chassis or site configured here, so only the backup owners
    /// apply.
    pub fn backups(&self, h: u64, owner: NodeId) -> Backups {
        let mut out = Backups::EMPTY;
        let mut ranking = None;
        if self.backup_owners <= 1 {
            let Some(primary) = self.backup(h, owner) else {
                return out;
            };
            out.push_unique(primary);
        } else {
            let r = self.ranking(h);
            for n in r.iter().filter(|&n| n != owner).take(usize::from(self.backup_owners)) {
                out.push_unique(n);
            }
            ranking = Some(r);
        }
        if out.is_empty() {
            return out;
        }
        let (own_chassis, own_site) = if owner.index() < NodeId::MAX_NODES {
            (self.chassis[owner.index()], self.site[owner.index()])
        } else {
            (None, None)
        };
        let primaries = out;
        let all = |f: &dyn Fn(NodeId) -> bool| primaries.iter().all(f);
        let chassis_rule = own_chassis.filter(|&c| all(&|n| self.chassis[n.index()] == Some(c)));
        let site_rule = own_site.filter(|&s| self.site_redundancy && all(&|n| self.site[n.index()] == Some(s)));
        if chassis_rule.is_none() && site_rule.is_none() {
            self.push_local(&mut out, h, owner, own_site);
            return out; // the common case: no full ranking needed
        }
        let ranking = ranking.unwrap_or_else(|| self.ranking(h));
        if let Some(c) = chassis_rule {
            if let Some(n) = ranking.iter().find(|n| matches!(self.chassis[n.index()], Some(x) if x != c)) {
                out.push_unique(n);
            }
        }
        if let Some(s) = site_rule {
            if let Some(n) = ranking.iter().find(|n| matches!(self.site[n.index()], Some(x) if x != s)) {
                out.push_unique(n);
            }
        }
        self.push_local(&mut out, h, owner, own_site);
        out
    }

    /// With localization, the local director at the owner's site (R12),
    /// unless it is the owner (or already a backup).
    #[inline]
    fn push_local(&self, out: &mut Backups, h: u64, owner: NodeId, own_site: Option<u8>) {
        if let Some(l) = own_site.and_then(|s| self.local_director(h, s)).filter(|&l| l != owner) {
            out.push_unique(l);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::members::MemberInfo;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn n(i: u8) -> NodeId {
        NodeId(i)
    }
    fn set(nodes: &[u8]) -> MemberSet {
        MemberSet::from_nodes(Epoch(1), nodes.iter().copied().map(NodeId)).unwrap()
    }
    fn v4(s: [u8; 4], sp: u16, d: [u8; 4], dp: u16, proto: u8) -> FiveTuple {
        FiveTuple { src: Ipv4Addr::from(s).into(), dst: Ipv4Addr::from(d).into(), proto, src_port: sp, dst_port: dp }
    }

    /// splitmix64: a seeded, reproducible stream for the measurements.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            fmix64(self.0)
        }
        fn tuple(&mut self) -> FiveTuple {
            let (a, b) = (self.next(), self.next());
            let proto = [6, 17, 6, 6][(b >> 60) as usize & 3];
            if b & 3 == 0 {
                let c = self.next();
                FiveTuple {
                    src: Ipv6Addr::from(u128::from(a) << 64 | u128::from(c)).into(),
                    dst: Ipv6Addr::from(u128::from(c) << 64 | u128::from(b)).into(),
                    proto,
                    src_port: (a >> 48) as u16,
                    dst_port: (b >> 48) as u16,
                }
            } else {
                FiveTuple {
                    src: Ipv4Addr::from(a as u32).into(),
                    dst: Ipv4Addr::from((a >> 32) as u32).into(),
                    proto,
                    src_port: (b >> 16) as u16,
                    dst_port: (b >> 32) as u16,
                }
            }
        }
    }

    fn hashes(count: usize) -> Vec<u64> {
        let mut r = Rng(0x5eed);
        (0..count).map(|_| flow_hash(&r.tuple())).collect()
    }

    #[test]
    fn symmetric_v4_v6_icmp() {
        let t = v4([10, 0, 0, 2], 50000, [93, 184, 216, 34], 443, 6);
        assert_eq!(flow_hash(&t), flow_hash(&t.reversed()));
        assert_ne!(flow_hash(&t), flow_hash(&FiveTuple { proto: 17, ..t }));
        assert_ne!(flow_hash(&t), flow_hash(&FiveTuple { src_port: 50001, ..t }));
        // Same address on both sides: the ports decide the order.
        let u = v4([10, 0, 0, 1], 1, [10, 0, 0, 1], 2, 17);
        assert_eq!(flow_hash(&u), flow_hash(&u.reversed()));
        // ICMP echo (R3): request (id, 0) from the client, reply (0, id) from the server.
        let req = v4([10, 0, 0, 2], 0x1234, [8, 8, 8, 8], 0, 1);
        let rep = v4([8, 8, 8, 8], 0, [10, 0, 0, 2], 0x1234, 1);
        assert_eq!(flow_hash(&req), flow_hash(&rep));
        assert_ne!(flow_hash(&req), flow_hash(&FiveTuple { src_port: 0x1235, ..req }));
        let s6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d6: Ipv6Addr = "2001:db8:ffff::80".parse().unwrap();
        let t6 = FiveTuple { src: s6.into(), dst: d6.into(), proto: 58, src_port: 7, dst_port: 0 };
        let r6 = FiveTuple { src: d6.into(), dst: s6.into(), proto: 58, src_port: 0, dst_port: 7 };
        assert_eq!(flow_hash(&t6), flow_hash(&r6));
        // A different seed is a different hash, still symmetric.
        let h = FlowHasher::new(42);
        assert_ne!(h.hash(&t), flow_hash(&t));
        assert_eq!(h.hash(&t), h.hash(&t.reversed()));
    }

    /// Every node of every version must compute these: a change here is a
    /// cluster-wide protocol change (the director of every flow moves).
    #[test]
    fn golden_values() {
        let t = v4([10, 0, 0, 2], 50000, [93, 184, 216, 34], 443, 6);
        let s6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d6: Ipv6Addr = "2001:db8:ffff::80".parse().unwrap();
        let t6 = FiveTuple { src: s6.into(), dst: d6.into(), proto: 6, src_port: 40000, dst_port: 80 };
        let got = [flow_hash(&t), flow_hash(&t6), weight(flow_hash(&t), n(3))];
        println!("golden: {got:?}");
        assert_eq!(got, GOLDEN);
        let tbl = DirectorTable::new(&set(&[0, 1, 2, 3, 4, 5, 6, 7])).unwrap();
        assert_eq!(tbl.ranking(flow_hash(&t)).as_slice(), GOLDEN_RANKING.map(NodeId));
    }
    const GOLDEN: [u64; 3] = [7265483929512209326, 14646975901653397895, 5631401776506407715];
    const GOLDEN_RANKING: [u8; 8] = [6, 7, 2, 5, 4, 1, 3, 0];

    #[test]
    fn ranking_and_director_agree() {
        let tbl = DirectorTable::new(&set(&[0, 2, 5, 9, 15])).unwrap();
        assert_eq!((tbl.len(), tbl.epoch(), tbl.members()), (5, Epoch(1), &[n(0), n(2), n(5), n(9), n(15)][..]));
        for h in hashes(10_000) {
            let r = tbl.ranking(h);
            assert_eq!(r.len(), 5);
            assert_eq!(r.first(), Some(tbl.director(h)));
            let mut sorted: Vec<_> = r.iter().collect();
            sorted.sort();
            assert_eq!(sorted, tbl.members());
            let w: Vec<_> = r.iter().map(|m| weight(h, m)).collect();
            assert!(w.windows(2).all(|p| p[0] >= p[1]));
        }
        assert_eq!(DirectorTable::new(&MemberSet::empty(Epoch(0))), Err(MemberError::Empty));
        let one = DirectorTable::new(&set(&[7])).unwrap();
        assert_eq!((one.director(0), one.director(u64::MAX)), (n(7), n(7)));
        assert_eq!(one.backup(123, n(7)), None);
        assert!(one.backups(123, n(7)).is_empty());
        assert_eq!(one.backup(123, n(3)), Some(n(7)), "an owner outside the set is backed by the director");
    }

    #[test]
    fn backup_owner() {
        let tbl = DirectorTable::new(&set(&[0, 1, 2, 3])).unwrap();
        for h in hashes(2_000) {
            let r = tbl.ranking(h);
            let d = r.as_slice()[0];
            for owner in tbl.members().iter().copied() {
                let b = tbl.backup(h, owner).unwrap();
                if owner == d {
                    assert_eq!(b, r.as_slice()[1]);
                } else {
                    assert_eq!(b, d);
                }
                assert_eq!(tbl.backups(h, owner).as_slice(), &[b], "no chassis/site ids: one backup");
            }
        }
    }

    #[test]
    fn chassis_and_site_backups() {
        // Two sites; site 1 has chassis 10 (nodes 0,1) and 11 (node 2);
        // site 2 has chassis 20 (nodes 3,4).
        let m = |site, chassis| MemberInfo { site: Some(site), chassis: Some(chassis), since: Epoch(0) };
        let s = MemberSet::from_members(
            Epoch(9),
            [(n(0), m(1, 10)), (n(1), m(1, 10)), (n(2), m(1, 11)), (n(3), m(2, 20)), (n(4), m(2, 20))],
        )
        .unwrap();
        let plain = DirectorTable::new(&s).unwrap();
        let sited = plain.with_site_redundancy(true);
        let (mut chassis_extra, mut site_extra, mut both) = (0, 0, 0);
        for h in hashes(5_000) {
            let r = plain.ranking(h);
            for owner in (0..5).map(NodeId) {
                let primary = plain.backup(h, owner).unwrap();
                let b = plain.backups(h, owner);
                assert_eq!(b.as_slice()[0], primary);
                assert!(!b.contains(owner));
                let info = |x: NodeId| s.info(x).unwrap();
                let same_chassis = info(primary).chassis == info(owner).chassis;
                if same_chassis {
                    let want = r.iter().find(|&x| info(x).chassis != info(owner).chassis).unwrap();
                    assert!(b.contains(want));
                    if want != primary {
                        chassis_extra += 1;
                    }
                } else {
                    assert_eq!(b.len(), 1);
                }
                // Site rule only with site redundancy, independent of the chassis rule.
                let bs = sited.backups(h, owner);
                assert_eq!(&bs.as_slice()[..b.len()], b.as_slice());
                if info(primary).site == info(owner).site {
                    let want = r.iter().find(|&x| info(x).site != info(owner).site).unwrap();
                    assert!(bs.contains(want));
                    site_extra += 1;
                    if same_chassis && bs.len() == 3 {
                        both += 1;
                    }
                } else {
                    assert_eq!(bs.len(), b.len());
                }
                let mut seen = bs.as_slice().to_vec();
                seen.dedup();
                assert_eq!(seen.len(), bs.len());
            }
        }
        assert!(chassis_extra > 0 && site_extra > 0 && both > 0, "{chassis_extra} {site_extra} {both}");
    }

    #[test]
    fn local_directors() {
        // Two sites of two and three nodes; node 5 has no site.
        let m = |site| MemberInfo { site, chassis: None, since: Epoch(0) };
        let s = MemberSet::from_members(
            Epoch(3),
            [(n(0), m(Some(1))), (n(1), m(Some(1))), (n(2), m(Some(2))), (n(3), m(Some(2))), (n(4), m(Some(2))), (n(5), m(None))],
        )
        .unwrap();
        let plain = DirectorTable::new(&s).unwrap();
        let t = plain.with_localization(true);
        assert_eq!(plain.local_director(7, 1), None, "off: no local director");
        assert_eq!(t.local_director(7, 9), None, "no member at site 9");
        let (mut extra, mut same) = (0, 0);
        for h in hashes(5_000) {
            let r = t.ranking(h);
            for site in [1u8, 2] {
                let l = t.local_director(h, site).unwrap();
                // The first of the ranking at that site: the director
                // whenever the director is there.
                assert_eq!(Some(l), r.iter().find(|&x| s.info(x).unwrap().site == Some(site)));
                if s.info(t.director(h)).unwrap().site == Some(site) {
                    assert_eq!(l, t.director(h));
                    same += 1;
                }
            }
            for owner in (0..6).map(NodeId) {
                let (b, bl) = (plain.backups(h, owner), t.backups(h, owner));
                assert_eq!(&bl.as_slice()[..b.len()], b.as_slice(), "the local director comes last");
                match s.info(owner).unwrap().site {
                    Some(site) => {
                        let l = t.local_director(h, site).unwrap();
                        assert_eq!(bl.contains(l), l != owner);
                        if bl.len() > b.len() {
                            extra += 1;
                        }
                    }
                    None => assert_eq!(bl, b, "an owner without a site has no local director"),
                }
                assert!(!bl.contains(owner));
            }
        }
        assert!(extra > 0 && same > 0, "{extra} {same}");
    }

    /// Share of flows whose director changes, and the rendezvous property.
    #[test]
    fn movement() {
        let hs = hashes(1_000_000);
        let total = hs.len() as f64;
        // 3 → 2: node 1 leaves.
        let (a, b) = (DirectorTable::new(&set(&[0, 1, 2])).unwrap(), DirectorTable::new(&set(&[0, 2])).unwrap());
        let mut moved = 0usize;
        for &h in &hs {
            let (x, y) = (a.director(h), b.director(h));
            if x != y {
                assert_eq!(x, n(1), "a flow moved between two members that stayed");
                moved += 1;
            } else {
                assert_ne!(x, n(1));
            }
        }
        let leave = moved as f64 / total;
        // 4 → 5: node 4 joins.
        let (a, b) = (DirectorTable::new(&set(&[0, 1, 2, 3])).unwrap(), DirectorTable::new(&set(&[0, 1, 2, 3, 4])).unwrap());
        let mut moved = 0usize;
        for &h in &hs {
            let (x, y) = (a.director(h), b.director(h));
            if x != y {
                assert_eq!(y, n(4), "a flow moved to a member other than the one that joined");
                moved += 1;
            }
        }
        let join = moved as f64 / total;
        println!("movement: 3→2 (leave) {:.3}% (ideal 33.333%), 4→5 (join) {:.3}% (ideal 20.000%)", leave * 100.0, join * 100.0);
        assert!((leave - 1.0 / 3.0).abs() < 0.015, "{leave}");
        assert!((join - 1.0 / 5.0).abs() < 0.015, "{join}");
    }

    #[test]
    fn balance() {
        let hs = hashes(1_000_000);
        let mut worst = 0f64;
        for size in 2..=16u8 {
            let nodes: Vec<u8> = (0..size).collect();
            let tbl = DirectorTable::new(&set(&nodes)).unwrap();
            let mut count = [0usize; 16];
            for &h in &hs {
                count[tbl.director(h).index()] += 1;
            }
            let ideal = 1.0 / f64::from(size);
            let shares: Vec<f64> = count[..usize::from(size)].iter().map(|&c| c as f64 / hs.len() as f64).collect();
            let dev = shares.iter().map(|s| (s - ideal).abs()).fold(0.0, f64::max);
            worst = worst.max(dev);
            println!(
                "balance N={size:2}: ideal {:.3}%, min {:.3}%, max {:.3}%, max deviation {:.3} pp",
                ideal * 100.0,
                shares.iter().cloned().fold(1.0, f64::min) * 100.0,
                shares.iter().cloned().fold(0.0, f64::max) * 100.0,
                dev * 100.0
            );
            assert!(dev < 0.02, "N={size}: {shares:?}");
        }
        println!("balance: worst deviation over N=2..16: {:.3} pp", worst * 100.0);
    }

    /// R11 with rendezvous ranking: removing members keeps the others'
    /// order, so when the owner fails the new director (the first survivor
    /// of the flow's ranking) already holds the flow's state — for every
    /// single failure with `backups: 1`, and every double failure that
    /// takes the owner with `backups: 2`. Chassis and site ids only add
    /// holders.
    fn new_director_holds_the_state(bits: u16, h: u64, owner_pick: usize, failed: &[usize], backups: u8, ids: u64) {
        let nodes: Vec<NodeId> = (0..16).filter(|i| bits & (1 << i) != 0).map(NodeId).collect();
        if nodes.len() < failed.len() + 2 {
            return;
        }
        let info = |n: NodeId| MemberInfo {
            site: (ids & 1 != 0).then_some(((ids >> (n.0 * 2)) & 1) as u8),
            chassis: (ids & 2 != 0).then_some(((ids >> (n.0 * 2 + 1)) & 3) as u8),
            since: Epoch(0),
        };
        let s = MemberSet::from_members(Epoch(1), nodes.iter().map(|&n| (n, info(n)))).unwrap();
        let t = DirectorTable::new(&s).unwrap().with_backups(backups).with_site_redundancy(ids & 4 != 0);
        let owner = nodes[owner_pick % nodes.len()];
        let holders = t.backups(h, owner);
        assert_eq!(holders.len().min(usize::from(backups)), usize::from(backups).min(nodes.len() - 1));
        // The owner and the others that fail (distinct, not the owner).
        let mut gone = vec![owner];
        for &f in failed {
            let cand: Vec<NodeId> = nodes.iter().copied().filter(|n| !gone.contains(n)).collect();
            gone.push(cand[f % cand.len()]);
        }
        let mut left = s;
        for &g in &gone {
            left = left.without(g);
        }
        let d = DirectorTable::new(&left).unwrap().director(h);
        assert!(holders.contains(d), "owner {owner} and {gone:?} gone: new director {d} not among {holders:?}");
    }

    proptest! {
        #[test]
        fn single_failure_new_director_holds_the_state(bits in 3u16.., h in any::<u64>(), o in any::<usize>(), ids in any::<u64>()) {
            new_director_holds_the_state(bits, h, o, &[], 1, ids);
            new_director_holds_the_state(bits, h, o, &[], 2, ids);
        }

        #[test]
        fn double_failure_with_two_backups_new_director_holds_the_state(bits in 7u16.., h in any::<u64>(), o in any::<usize>(), f in any::<usize>(), ids in any::<u64>()) {
            new_director_holds_the_state(bits, h, o, &[f], 2, ids);
        }

        #[test]
        fn two_backups_are_the_next_two_of_the_ranking(bits in 1u16.., h in any::<u64>(), owner in 0u8..16) {
            let s = MemberSet::from_nodes(Epoch(0), (0..16).filter(|i| bits & (1 << i) != 0).map(NodeId)).unwrap();
            let t = DirectorTable::new(&s).unwrap().with_backups(2);
            let want: Vec<NodeId> = t.ranking(h).iter().filter(|&n| n != NodeId(owner)).take(2).collect();
            let got = t.backups(h, NodeId(owner));
            prop_assert_eq!(got.as_slice(), &want[..]);
            prop_assert_eq!(got.as_slice().first().copied(), t.backup(h, NodeId(owner)));
        }

        #[test]
        fn symmetry_always(s in any::<u32>(), d in any::<u32>(), sp in any::<u16>(), dp in any::<u16>(),
                           proto in any::<u8>(), s6 in any::<u128>(), d6 in any::<u128>(), six in any::<bool>(),
                           seed in any::<u64>()) {
            let t = if six {
                FiveTuple { src: Ipv6Addr::from(s6).into(), dst: Ipv6Addr::from(d6).into(), proto, src_port: sp, dst_port: dp }
            } else {
                FiveTuple { src: Ipv4Addr::from(s).into(), dst: Ipv4Addr::from(d).into(), proto, src_port: sp, dst_port: dp }
            };
            prop_assert_eq!(flow_hash(&t), flow_hash(&t.reversed()));
            let h = FlowHasher::new(seed);
            prop_assert_eq!(h.hash(&t), h.hash(&t.reversed()));
        }

        #[test]
        fn tables_total(bits in 1u16.., h in any::<u64>(), owner in 0u8..32) {
            let s = MemberSet::from_nodes(Epoch(0), (0..16).filter(|i| bits & (1 << i) != 0).map(NodeId)).unwrap();
            let t = DirectorTable::new(&s).unwrap();
            prop_assert!(s.contains(t.director(h)));
            prop_assert_eq!(t.ranking(h).len(), s.len());
            let b = t.backups(h, NodeId(owner));
            prop_assert!(!b.contains(NodeId(owner)));
            prop_assert_eq!(b.as_slice().first().copied(), t.backup(h, NodeId(owner)));
        }
    }
}
