//! PAT port blocks: how a pool's ports are cut into blocks and which node
//! (and which of its workers) holds each block (SPEC N2, N6; the
//! reference's "NAT pool address distribution for dynamic PAT").
//!
//! A PAT pool address's ports `first..=65535` (`first` = 1024, or 1 when the
//! rule includes the reserved ports) are cut into blocks of `size` ports
//! (default 512; the last block may be shorter). The [`BlockMap`] gives
//! every block of every pool address one [`Holder`]: a member node and one
//! of its workers. Only the holder allocates ports from a block, so a
//! mapped (address, port) is never handed out twice cluster-wide, and any
//! node finds the owner of return traffic from (mapped address, port) alone
//! — one binary search over the pool's addresses and one index
//! (`BlockMap::lookup`), no query (N5). The worker part does the same
//! inside the owning node: the node's blocks are dealt over its workers so
//! no allocation takes a lock and return traffic is steered by port.
//!
//! How the map changes (each step a pure function of the map, so every
//! node that applies the same steps holds the same map):
//! - **deal** (a pool's first map): per address `a`, block `b` goes to the
//!   `(b + a·(B mod m)) mod m`-th member in id order; every member holds
//!   ⌊B/m⌋ or ⌈B/m⌉ blocks of every address (B ≥ 16 blocks per address ≥
//!   the most members there can be, so each holds at least one), and the
//!   ⌈⌉ go to the next `B mod m` members address after address: pool
//!   totals differ by at most one between members. A member's blocks are
//!   dealt over its workers round-robin.
//! - **leave** (`without`): only the leaver's blocks move. Each, in block
//!   order, goes to the remaining member holding the fewest blocks of that
//!   address (then fewest in the pool, then lowest id), to the same
//!   worker index there (a translation's connection is decided by the
//!   worker of its real tuple: the same index on every member). That
//!   member is the block's **heir** (`BlockMap::heir`, precomputed for
//!   every block): the translated connections of a failed member are
//!   taken over there with their bindings (`pipeline::cluster`), so live
//!   translations are not broken: the block follows them.
//! - **join** (`with`): nothing moves at once; the map records *debts*
//!   (how many blocks of each address each over-full member owes the
//!   joiner), paid by releasing blocks without translations (`release`).
//!   The node does not use it: its map in force is the deal over the
//!   configured nodes after `without` for the absent ones
//!   (`NatPlan::for_members`), so a node that joins holds its dealt blocks
//!   at once and the heirs hand their connections in them back to it
//!   (docs/nat.md, "The cluster").
//!
//! Invariants (`tests`):
//! - every block of every address has exactly one holder, a member, and a
//!   worker below the worker count;
//! - `deal` and every `without` leave each address balanced: members'
//!   counts differ by at most one; after `with` and all debts paid, too;
//! - `without(x)` moves x's blocks and no other; `release` moves exactly
//!   the released block, from the member that owed it to the one owed;
//! - heirs: `heir(a, b)` is the holder of `(a, b)` in `without(holder)`;
//! - lookups neither allocate nor panic (an unknown address or a port below
//!   `first` is `None`);
//! - `decode(encode(m)) == m` (heirs recomputed), and `decode` of any bytes
//!   is a map satisfying the invariants above or an error, never a panic.

use crate::cluster::MemberSet;
use crate::types::NodeId;
use std::net::Ipv4Addr;

/// Ports per block unless a rule says otherwise (the reference's default).
pub const DEFAULT_BLOCK_SIZE: u16 = 512;
/// Smallest block: keeps a pool's map small (a /24 of 32-port blocks is
/// 258 048 blocks, 1 MiB).
pub const MIN_BLOCK_SIZE: u16 = 32;
/// Largest block: an address still has 16 blocks, one per possible member.
pub const MAX_BLOCK_SIZE: u16 = 4096;
/// The first port of a block range without the reserved ports.
pub const FIRST_UNRESERVED_PORT: u16 = 1024;
/// Most addresses in one pool (a /16).
pub const MAX_POOL_ADDRESSES: usize = 65_536;
/// Most workers a block can be dealt to (the CCL's worker channels).
pub const MAX_WORKERS: u8 = 32;

/// What a block-map operation cannot do.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    #[error("port block size {0} out of range ({MIN_BLOCK_SIZE}..={MAX_BLOCK_SIZE})")]
    SizeOutOfRange(u16),
    #[error("a PAT pool needs 1..={MAX_POOL_ADDRESSES} addresses, not {0}")]
    PoolSize(usize),
    #[error("pool address {0} listed twice")]
    DuplicateAddress(Ipv4Addr),
    #[error("worker count {0} out of range (1..={MAX_WORKERS})")]
    Workers(u8),
    #[error("a block map needs at least one member")]
    NoMembers,
    #[error("no such block")]
    NoSuchBlock,
    #[error("node {0} does not hold that block")]
    NotHolder(NodeId),
    #[error("node {0} owes no block of that address")]
    NothingOwed(NodeId),
}

/// How one pool address's ports are cut into blocks.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Geometry {
    first: u16,
    size: u16,
    blocks: u16,
}

impl Geometry {
    /// Blocks of `size` ports from 1024 (or from 1 with `reserved_ports`)
    /// to 65535.
    pub fn new(size: u16, reserved_ports: bool) -> Result<Self, BlockError> {
        if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&size) {
            return Err(BlockError::SizeOutOfRange(size));
        }
        let first = if reserved_ports { 1 } else { FIRST_UNRESERVED_PORT };
        let ports = 65_536 - u32::from(first);
        let blocks = ports.div_ceil(u32::from(size)) as u16;
        Ok(Geometry { first, size, blocks })
    }
    /// Blocks per address.
    #[inline]
    pub const fn blocks(&self) -> u16 {
        self.blocks
    }
    /// Ports per block (the last may have fewer: `block_len`).
    #[inline]
    pub const fn size(&self) -> u16 {
        self.size
    }
    /// The lowest port a block covers.
    #[inline]
    pub const fn first_port(&self) -> u16 {
        self.first
    }
    /// The block holding `port`; `None` below the first port.
    #[inline]
    pub fn block_of(&self, port: u16) -> Option<u16> {
        port.checked_sub(self.first).map(|p| p / self.size)
    }
    /// The first and last port of `block`.
    pub fn ports(&self, block: u16) -> Option<(u16, u16)> {
        if block >= self.blocks {
            return None;
        }
        let lo = u32::from(self.first) + u32::from(block) * u32::from(self.size);
        let hi = (lo + u32::from(self.size) - 1).min(65_535);
        Some((lo as u16, hi as u16))
    }
    /// Ports in `block` (0 for no such block).
    pub fn block_len(&self, block: u16) -> u16 {
        self.ports(block).map_or(0, |(lo, hi)| hi - lo + 1)
    }
}

/// Who allocates from a block: a member and one of its workers.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Holder {
    pub node: NodeId,
    pub worker: u8,
}

/// A block of a pool: the address's index in the pool (ascending address
/// order) and the block's index.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockRef {
    pub addr: u32,
    pub block: u16,
}

/// Blocks of one address a member owes another (after a join).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Debt {
    pub addr: u32,
    pub from: NodeId,
    pub to: NodeId,
    pub count: u16,
}

/// Every block of one PAT pool and its holder (module essay).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockMap {
    geometry: Geometry,
    workers: u8,
    members: u16,
    /// Ascending, distinct.
    addrs: Vec<Ipv4Addr>,
    /// `addrs.len() × blocks`, address-major.
    holders: Vec<Holder>,
    /// Parallel to `holders`: who gets the block if its holder leaves.
    heirs: Vec<NodeId>,
    debts: Vec<Debt>,
    /// Bumped by every change.
    version: u64,
}

/// Members in id order.
fn member_list(bits: u16) -> impl Iterator<Item = NodeId> + Clone {
    (0..NodeId::MAX_NODES as u8).filter(move |i| bits >> i & 1 == 1).map(NodeId)
}

impl BlockMap {
    /// A pool's first map: `addrs` (any order, distinct) dealt over
    /// `members`, each member's share over `workers` workers.
    pub fn deal(geometry: Geometry, addrs: &[Ipv4Addr], members: &MemberSet, workers: u8) -> Result<Self, BlockError> {
        if addrs.is_empty() || addrs.len() > MAX_POOL_ADDRESSES {
            return Err(BlockError::PoolSize(addrs.len()));
        }
        if workers == 0 || workers > MAX_WORKERS {
            return Err(BlockError::Workers(workers));
        }
        if members.is_empty() {
            return Err(BlockError::NoMembers);
        }
        let mut sorted = addrs.to_vec();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(BlockError::DuplicateAddress(w[0]));
        }
        let nodes: Vec<NodeId> = member_list(members.bits()).collect();
        let m = nodes.len();
        let per = usize::from(geometry.blocks);
        // Address a starts `a × (B mod m)` members on: the members with
        // one block more (the remainder) are the next ones in turn.
        let shift = per % m;
        let mut dealt = [0u32; NodeId::MAX_NODES];
        let mut holders = Vec::with_capacity(sorted.len() * per);
        for a in 0..sorted.len() {
            for b in 0..per {
                let node = nodes[(b + a * shift) % m];
                let worker = (dealt[node.index()] % u32::from(workers)) as u8;
                dealt[node.index()] += 1;
                holders.push(Holder { node, worker });
            }
        }
        let mut map = BlockMap {
            geometry,
            workers,
            members: members.bits(),
            addrs: sorted,
            holders,
            heirs: Vec::new(),
            debts: Vec::new(),
            version: 1,
        };
        map.compute_heirs();
        Ok(map)
    }

    #[inline]
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }
    #[inline]
    pub fn workers(&self) -> u8 {
        self.workers
    }
    /// The members the map is dealt over (a bitmap like `MemberSet::bits`).
    #[inline]
    pub fn members(&self) -> u16 {
        self.members
    }
    #[inline]
    pub fn addresses(&self) -> &[Ipv4Addr] {
        &self.addrs
    }
    #[inline]
    pub fn version(&self) -> u64 {
        self.version
    }
    /// What members owe joiners (module essay, join).
    pub fn debts(&self) -> &[Debt] {
        &self.debts
    }

    #[inline]
    fn index(&self, r: BlockRef) -> Option<usize> {
        if r.block >= self.geometry.blocks || r.addr as usize >= self.addrs.len() {
            return None;
        }
        Some(r.addr as usize * usize::from(self.geometry.blocks) + usize::from(r.block))
    }

    /// The block of a mapped (address, port); `None` for an address not in
    /// the pool or a port below the first.
    #[inline]
    pub fn block(&self, ip: Ipv4Addr, port: u16) -> Option<BlockRef> {
        let addr = self.addrs.binary_search(&ip).ok()? as u32;
        let block = self.geometry.block_of(port)?;
        Some(BlockRef { addr, block })
    }

    /// Who holds the block of a mapped (address, port): where its return
    /// traffic goes.
    #[inline]
    pub fn lookup(&self, ip: Ipv4Addr, port: u16) -> Option<Holder> {
        self.holder(self.block(ip, port)?)
    }

    #[inline]
    pub fn holder(&self, r: BlockRef) -> Option<Holder> {
        self.holders.get(self.index(r)?).copied()
    }

    /// Who gets the block if its holder leaves (module essay, leave);
    /// `None` for a lone member or no such block.
    #[inline]
    pub fn heir(&self, r: BlockRef) -> Option<NodeId> {
        let h = self.heirs.get(self.index(r)?).copied()?;
        (h != self.holders[self.index(r)?].node).then_some(h)
    }

    /// The pool address of a block.
    pub fn address(&self, r: BlockRef) -> Option<Ipv4Addr> {
        self.addrs.get(r.addr as usize).copied()
    }

    /// Every block `node` holds, in (address, block) order.
    pub fn blocks_of(&self, node: NodeId) -> impl Iterator<Item = (BlockRef, Holder)> + '_ {
        let per = usize::from(self.geometry.blocks);
        self.holders
            .iter()
            .enumerate()
            .filter(move |(_, h)| h.node == node)
            .map(move |(i, h)| (BlockRef { addr: (i / per) as u32, block: (i % per) as u16 }, *h))
    }

    /// How many blocks of address index `addr` each node holds.
    pub fn counts(&self, addr: u32) -> [u16; NodeId::MAX_NODES] {
        let per = usize::from(self.geometry.blocks);
        let mut c = [0u16; NodeId::MAX_NODES];
        let start = addr as usize * per;
        for h in self.holders.get(start..start + per).unwrap_or(&[]) {
            c[h.node.index()] += 1;
        }
        c
    }

    /// Blocks per (node, worker) over the whole pool.
    fn worker_loads(&self) -> Vec<u32> {
        let mut l = vec![0u32; NodeId::MAX_NODES * usize::from(self.workers)];
        for h in &self.holders {
            l[h.node.index() * usize::from(self.workers) + usize::from(h.worker)] += 1;
        }
        l
    }

    /// `node`'s least-loaded worker (lowest index on a tie).
    fn lightest_worker(&self, loads: &[u32], node: NodeId) -> u8 {
        let w = usize::from(self.workers);
        let row = &loads[node.index() * w..node.index() * w + w];
        (0..w).min_by_key(|&i| (row[i], i)).unwrap_or(0) as u8
    }

    /// The map after `node` left (module essay, leave). Debts are
    /// recomputed (none from or to the leaver).
    pub fn without(&self, node: NodeId) -> Result<Self, BlockError> {
        let members = self.members & !(1u16.checked_shl(u32::from(node.0)).unwrap_or(0));
        if members == 0 {
            return Err(BlockError::NoMembers);
        }
        let mut map = self.clone();
        map.members = members;
        map.reassign_blocks_of(node);
        // The heirs took what was the leaver's; what the others still owe
        // (a join's debts) is recomputed against the new counts.
        map.rebalance();
        map.version += 1;
        map.compute_heirs();
        Ok(map)
    }

    /// Give `gone`'s blocks to the remaining members (no heirs, no debts,
    /// no version: `without` and `compute_heirs` do those).
    fn reassign_blocks_of(&mut self, gone: NodeId) {
        let per = usize::from(self.geometry.blocks);
        let mut pool = [0u32; NodeId::MAX_NODES];
        for h in &self.holders {
            pool[h.node.index()] += 1;
        }
        let nodes: Vec<NodeId> = member_list(self.members).filter(|&n| n != gone).collect();
        for a in 0..self.addrs.len() {
            if !self.holders[a * per..(a + 1) * per].iter().any(|h| h.node == gone) {
                continue;
            }
            let mut counts = self.counts(a as u32);
            for b in 0..per {
                if self.holders[a * per + b].node != gone {
                    continue;
                }
                let Some(&heir) = nodes.iter().min_by_key(|n| (counts[n.index()], pool[n.index()], n.0)) else {
                    return;
                };
                // The same worker index: every member runs as many
                // workers, and the connections a block's translations
                // belong to are decided by the worker of their real tuple,
                // the same index on the heir as on the holder.
                let worker = self.holders[a * per + b].worker;
                counts[heir.index()] += 1;
                pool[heir.index()] += 1;
                pool[gone.index()] -= 1;
                self.holders[a * per + b] = Holder { node: heir, worker };
            }
        }
    }

    /// Every block's heir: its holder in the map without its holder (the
    /// holder itself when it is the only member).
    fn compute_heirs(&mut self) {
        self.heirs = self.holders.iter().map(|h| h.node).collect();
        for x in member_list(self.members) {
            if self.members == 1 << x.0 {
                continue;
            }
            let mut trial = BlockMap { heirs: Vec::new(), debts: Vec::new(), ..self.clone() };
            trial.members &= !(1 << x.0);
            trial.reassign_blocks_of(x);
            for (i, h) in self.holders.iter().enumerate() {
                if h.node == x {
                    self.heirs[i] = trial.holders[i].node;
                }
            }
        }
    }

    /// The map after `node` joined: nothing moves; members above their
    /// share of an address owe the joiner blocks (module essay, join).
    /// Debts already recorded are recomputed with the new member.
    pub fn with(&self, node: NodeId) -> Result<Self, BlockError> {
        if node.index() >= NodeId::MAX_NODES {
            return Err(BlockError::NotHolder(node));
        }
        let mut map = self.clone();
        map.members |= 1 << node.0;
        map.rebalance();
        map.version += 1;
        map.compute_heirs();
        Ok(map)
    }

    /// Recompute the debts: per address, each member's share is ⌊B/m⌋ or
    /// ⌈B/m⌉ (the ⌈⌉ to those holding most now, then lowest id); members
    /// above their share owe the ones below, in id order.
    fn rebalance(&mut self) {
        self.debts.clear();
        let nodes: Vec<NodeId> = member_list(self.members).collect();
        let m = nodes.len();
        let per = usize::from(self.geometry.blocks);
        for a in 0..self.addrs.len() as u32 {
            let counts = self.counts(a);
            let mut order = nodes.clone();
            order.sort_by_key(|n| (core::cmp::Reverse(counts[n.index()]), n.0));
            let mut target = [0u16; NodeId::MAX_NODES];
            for (k, n) in order.iter().enumerate() {
                target[n.index()] = (per / m + usize::from(k < per % m)) as u16;
            }
            let mut over: Vec<(NodeId, u16)> = nodes
                .iter()
                .filter(|n| counts[n.index()] > target[n.index()])
                .map(|&n| (n, counts[n.index()] - target[n.index()]))
                .collect();
            for &to in nodes.iter().filter(|n| counts[n.index()] < target[n.index()]) {
                let mut want = target[to.index()] - counts[to.index()];
                for (from, extra) in over.iter_mut().filter(|(_, e)| *e > 0) {
                    if want == 0 {
                        break;
                    }
                    let k = want.min(*extra);
                    self.debts.push(Debt { addr: a, from: *from, to, count: k });
                    *extra -= k;
                    want -= k;
                }
            }
        }
    }

    /// `from` releases block `r`, which it holds and has no translation in,
    /// to the member it owes a block of that address: that member now
    /// holds it (its least-loaded worker). Returns the new holder.
    pub fn release(&mut self, r: BlockRef, from: NodeId) -> Result<Holder, BlockError> {
        let i = self.index(r).ok_or(BlockError::NoSuchBlock)?;
        if self.holders[i].node != from {
            return Err(BlockError::NotHolder(from));
        }
        let d = self
            .debts
            .iter()
            .position(|d| d.addr == r.addr && d.from == from && d.count > 0)
            .ok_or(BlockError::NothingOwed(from))?;
        let to = self.debts[d].to;
        self.debts[d].count -= 1;
        if self.debts[d].count == 0 {
            self.debts.remove(d);
        }
        let loads = self.worker_loads();
        let worker = self.lightest_worker(&loads, to);
        self.holders[i] = Holder { node: to, worker };
        self.version += 1;
        self.compute_heirs();
        Ok(self.holders[i])
    }

    /// Blocks of address `addr` that `node` still owes (0 when none).
    pub fn owed(&self, addr: u32, node: NodeId) -> u16 {
        self.debts.iter().filter(|d| d.addr == addr && d.from == node).map(|d| d.count).sum()
    }

    /// The map as the bytes the control node publishes (big-endian):
    ///
    /// | field | bytes |
    /// |---|---|
    /// | format (`MAP_FORMAT`) | 1 |
    /// | block size, reserved ports (0/1), workers | 2, 1, 1 |
    /// | members (bitmap), version | 2, 8 |
    /// | address count A, the addresses ascending | 4, 4·A |
    /// | per block, address-major: node (high 4 bits) and worker (low 5 bits) of a `u16` | 2 per block |
    /// | debt count D, per debt: address index, from, to, count | 2, 8·D |
    ///
    /// Heirs are not sent: [`BlockMap::decode`] computes them.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(23 + 4 * self.addrs.len() + 2 * self.holders.len() + 8 * self.debts.len());
        v.push(MAP_FORMAT);
        // layout: allow(offset) the block-map record's own encoding, not a packet header
        v.extend_from_slice(&self.geometry.size.to_be_bytes());
        v.push(u8::from(self.geometry.first == 1));
        v.push(self.workers);
        // layout: allow(offset) the block-map record's own encoding, not a packet header
        v.extend_from_slice(&self.members.to_be_bytes());
        // layout: allow(offset) the block-map record's own encoding, not a packet header
        v.extend_from_slice(&self.version.to_be_bytes());
        // layout: allow(offset) the block-map record's own encoding, not a packet header
        v.extend_from_slice(&(self.addrs.len() as u32).to_be_bytes());
        for a in &self.addrs {
            v.extend_from_slice(&a.octets());
        }
        for h in &self.holders {
            // layout: allow(offset) the block-map record's own encoding, not a packet header
            v.extend_from_slice(&(u16::from(h.node.0) << 5 | u16::from(h.worker)).to_be_bytes());
        }
        // layout: allow(offset) the block-map record's own encoding, not a packet header
        v.extend_from_slice(&(self.debts.len() as u16).to_be_bytes());
        for d in &self.debts {
            // layout: allow(offset) the block-map record's own encoding, not a packet header
            v.extend_from_slice(&d.addr.to_be_bytes());
            v.extend_from_slice(&[d.from.0, d.to.0]);
            // layout: allow(offset) the block-map record's own encoding, not a packet header
            v.extend_from_slice(&d.count.to_be_bytes());
        }
        v
    }

    /// A published map back, checked: the format, the geometry, addresses
    /// ascending and distinct, every holder a member with a worker in
    /// range, debts between members that name a real address, nothing
    /// left over. A peer's bytes are not trusted: any input gives a map
    /// or an error, never a panic.
    pub fn decode(b: &[u8]) -> Result<Self, MapDecodeError> {
        let mut r = Reader(b);
        if r.u8()? != MAP_FORMAT {
            return Err(MapDecodeError::Format);
        }
        let size = r.u16()?;
        let reserved = match r.u8()? {
            0 => false,
            1 => true,
            _ => return Err(MapDecodeError::Invalid("reserved-ports flag")),
        };
        let geometry = Geometry::new(size, reserved).map_err(|_| MapDecodeError::Invalid("block size"))?;
        let workers = r.u8()?;
        if workers == 0 || workers > MAX_WORKERS {
            return Err(MapDecodeError::Invalid("worker count"));
        }
        let members = r.u16()?;
        if members == 0 {
            return Err(MapDecodeError::Invalid("no members"));
        }
        let version = r.u64()?;
        let n = r.u32()? as usize;
        if n == 0 || n > MAX_POOL_ADDRESSES {
            return Err(MapDecodeError::Invalid("address count"));
        }
        let per = usize::from(geometry.blocks);
        // Every byte the counts promise must be there before anything is
        // reserved for them.
        if r.0.len() < n * 4 + n * per * 2 + 2 {
            return Err(MapDecodeError::Truncated);
        }
        let mut addrs = Vec::with_capacity(n);
        for _ in 0..n {
            let a = Ipv4Addr::from(r.u32()?);
            if addrs.last().is_some_and(|&l| l >= a) {
                return Err(MapDecodeError::Invalid("addresses not ascending"));
            }
            addrs.push(a);
        }
        let mut holders = Vec::with_capacity(n * per);
        for _ in 0..n * per {
            let x = r.u16()?;
            let (node, worker) = ((x >> 5) as u8, (x & 0x1f) as u8);
            if x >> 9 != 0 || members >> node & 1 == 0 || worker >= workers {
                return Err(MapDecodeError::Invalid("holder"));
            }
            holders.push(Holder { node: NodeId(node), worker });
        }
        let nd = usize::from(r.u16()?);
        if r.0.len() != nd * 8 {
            return Err(if r.0.len() < nd * 8 { MapDecodeError::Truncated } else { MapDecodeError::Trailing });
        }
        let mut debts = Vec::with_capacity(nd);
        for _ in 0..nd {
            let d = Debt { addr: r.u32()?, from: NodeId(r.u8()?), to: NodeId(r.u8()?), count: r.u16()? };
            let member = |x: NodeId| x.index() < NodeId::MAX_NODES && members >> x.0 & 1 == 1;
            if d.addr as usize >= n || !member(d.from) || !member(d.to) || d.from == d.to || d.count == 0 {
                return Err(MapDecodeError::Invalid("debt"));
            }
            debts.push(d);
        }
        let mut map = BlockMap { geometry, workers, members, addrs, holders, heirs: Vec::new(), debts, version };
        map.compute_heirs();
        Ok(map)
    }
}

/// The first byte of an encoded map.
pub const MAP_FORMAT: u8 = 1;

/// Why published map bytes were refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MapDecodeError {
    #[error("not a block map of format {MAP_FORMAT}")]
    Format,
    #[error("block map cut short")]
    Truncated,
    #[error("bytes after the block map")]
    Trailing,
    #[error("block map: invalid {0}")]
    Invalid(&'static str),
}

/// Big-endian reads off the front of a slice.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], MapDecodeError> {
        let (head, rest) = self.0.split_first_chunk::<N>().ok_or(MapDecodeError::Truncated)?;
        self.0 = rest;
        Ok(*head)
    }
    fn u8(&mut self) -> Result<u8, MapDecodeError> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, MapDecodeError> {
        // layout: allow(offset) the block-map record's own encoding, not a packet header
        Ok(u16::from_be_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, MapDecodeError> {
        // layout: allow(offset) the block-map record's own encoding, not a packet header
        Ok(u32::from_be_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, MapDecodeError> {
        // layout: allow(offset) the block-map record's own encoding, not a packet header
        Ok(u64::from_be_bytes(self.take()?))
    }
}

#[cfg(test)]
mod tests;
