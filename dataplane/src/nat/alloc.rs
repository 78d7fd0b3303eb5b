//! One worker's PAT port allocator over the blocks the block map deals it
//! (SPEC N2, N6; the reference's "port block allocation").
//!
//! A worker allocates mapped ports only from blocks it holds
//! (`BlockMap`'s holder is this node and this worker), so no allocation
//! takes a lock and no two workers or nodes hand out the same (address,
//! port). Plain PAT (no maximum per host) hands out any free port of any
//! block, a block at a time. With port block allocation, ports are given
//! to inside hosts a block at a time: a host's translations use its blocks;
//! when they are full it takes another free block, up to `max_per_host`
//! (enforced per node and worker, not cluster-wide, as the reference says:
//! a host balanced over three nodes can hold three times the maximum). A
//! block whose last translation ended goes back to the free blocks (and
//! may then be released to a joiner).
//!
//! TCP, UDP and ICMP (echo identifiers) are separate port spaces: each
//! block has a bitmap per protocol class, and a block counts as in use
//! while any of them holds a port.
//!
//! Invariants (`tests`):
//! - a port is handed out at most once per (address, class) until freed;
//!   `reserve` (a binding taken over from a failed owner) marks one
//!   without handing it out again;
//! - a host never holds more than `max_per_host` blocks; exhaustion (host
//!   or worker) is an `Err`, counted, never a reused port;
//! - `alloc` and `free` do not allocate: the hosts table is sized at
//!   construction and a host's blocks are inline; a full hosts table is
//!   exhaustion.
//! - a block is removable (`take_idle_block`) only with no port in use.

use super::blocks::{BlockRef, Geometry};
use std::collections::HashMap;
use std::net::Ipv4Addr;

/// The port spaces of one block.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PortClass {
    Tcp = 0,
    Udp = 1,
    /// ICMP echo identifiers.
    Icmp = 2,
}

impl PortClass {
    /// The class of its code (`as u8`; a flow record's binding byte,
    /// checked there to be 0..=2): anything above 1 is ICMP.
    pub fn from_code(c: u8) -> PortClass {
        match c {
            0 => PortClass::Tcp,
            1 => PortClass::Udp,
            _ => PortClass::Icmp,
        }
    }
}

const CLASSES: usize = 3;

/// Most blocks one host may hold on one worker (the reference's
/// maximum-per-host is 1..=8, default 4).
pub const MAX_PER_HOST: u16 = 8;
/// The reference's default maximum-per-host.
pub const DEFAULT_PER_HOST: u16 = 4;

/// The blocks one host holds: indices into the allocator's blocks, inline
/// so that a new host costs no allocation.
#[derive(Copy, Clone, Default)]
struct Held {
    n: u8,
    idx: [u32; MAX_PER_HOST as usize],
}

impl Held {
    fn as_slice(&self) -> &[u32] {
        &self.idx[..usize::from(self.n)]
    }
    fn push(&mut self, i: usize) -> bool {
        let Some(slot) = self.idx.get_mut(usize::from(self.n)) else {
            return false;
        };
        *slot = i as u32;
        self.n += 1;
        true
    }
    fn remove(&mut self, i: usize) {
        if let Some(k) = self.as_slice().iter().position(|&x| x as usize == i) {
            self.idx.copy_within(k + 1..usize::from(self.n), k);
            self.n -= 1;
        }
    }
    fn replace(&mut self, old: usize, new: usize) {
        let n = usize::from(self.n);
        for x in self.idx[..n].iter_mut().filter(|x| **x as usize == old) {
            *x = new as u32;
        }
    }
}

/// Why no port was handed out.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Exhausted {
    #[error("the host holds its maximum of blocks, all full")]
    Host,
    #[error("no free block left on this worker")]
    Pool,
    #[error("the hosts table is full")]
    Hosts,
}

/// One mapped port handed out.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Mapped {
    pub block: BlockRef,
    pub addr: Ipv4Addr,
    pub port: u16,
}

struct Block {
    r: BlockRef,
    addr: Ipv4Addr,
    first: u16,
    len: u16,
    host: Option<Ipv4Addr>,
    /// Per class, one bit per port of the block.
    used: [Vec<u64>; CLASSES],
    in_use: u32,
    /// Where the next search starts (per class): ports are handed out in
    /// turn, so a just-freed port is the last to be reused.
    cursor: [u16; CLASSES],
    /// Inherited from a member that left (`add_inherited_block`): its
    /// ports are only `reserve`d for the bindings taken over, never
    /// allocated.
    inherited: bool,
}

impl Block {
    fn bit(&self, class: PortClass, off: u16) -> bool {
        self.used[class as usize][usize::from(off / 64)] >> (off % 64) & 1 == 1
    }
    fn set(&mut self, class: PortClass, off: u16, on: bool) {
        let w = &mut self.used[class as usize][usize::from(off / 64)];
        if on {
            *w |= 1 << (off % 64);
        } else {
            *w &= !(1 << (off % 64));
        }
    }
    /// A free port offset of `class` from the cursor on, taken.
    fn take(&mut self, class: PortClass) -> Option<u16> {
        let start = self.cursor[class as usize];
        for k in 0..self.len {
            let off = (start + k) % self.len;
            if !self.bit(class, off) {
                self.set(class, off, true);
                self.in_use += 1;
                self.cursor[class as usize] = (off + 1) % self.len;
                return Some(off);
            }
        }
        None
    }
}

/// Counters of one allocator.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AllocCounters {
    pub allocated: u64,
    pub freed: u64,
    pub reserved: u64,
    pub exhausted_host: u64,
    pub exhausted_pool: u64,
    pub exhausted_hosts_table: u64,
    /// `free` of a port not in use (a bug or a hostile record): ignored.
    pub bad_free: u64,
}

/// One worker's blocks of one pool and the hosts using them.
pub struct PortAllocator {
    geometry: Geometry,
    /// `None`: any host takes ports from any block (plain PAT); `Some`:
    /// port block allocation, at most this many blocks per host.
    max_per_host: Option<u16>,
    /// Plain PAT: the block each class allocates from next.
    current: [usize; CLASSES],
    blocks: Vec<Block>,
    by_ref: HashMap<BlockRef, usize>,
    /// Blocks without a host, as indices into `blocks`.
    free: Vec<usize>,
    hosts: HashMap<Ipv4Addr, Held>,
    host_capacity: usize,
    pub counters: AllocCounters,
}

impl PortAllocator {
    /// An allocator without blocks. With `max_per_host` (1..=`MAX_PER_HOST`)
    /// ports go to hosts a block at a time (port block allocation) and at
    /// most `host_capacity` hosts hold blocks at once; without, every host
    /// takes ports from any block (plain PAT).
    pub fn new(geometry: Geometry, max_per_host: Option<u16>, host_capacity: usize) -> Self {
        let max_per_host = max_per_host.map(|m| m.clamp(1, MAX_PER_HOST));
        PortAllocator {
            geometry,
            max_per_host,
            current: [0; CLASSES],
            blocks: Vec::new(),
            by_ref: HashMap::new(),
            free: Vec::new(),
            hosts: HashMap::with_capacity(host_capacity),
            host_capacity,
            counters: AllocCounters::default(),
        }
    }

    /// Start allocating from block `r` of pool address `addr` (the map
    /// dealt it to this worker). Adding a block twice changes nothing.
    pub fn add_block(&mut self, r: BlockRef, addr: Ipv4Addr) {
        self.push_block(r, addr, false);
    }

    /// Hold block `r` of `addr` inherited from a member that left: the
    /// bindings of its connections taken over here are `reserve`d in it,
    /// and `free`d when they end; no new port is allocated from it (the
    /// ports of its connections not taken over yet are unknown here, and
    /// one of them must never be handed out twice). Adding a block held
    /// already changes nothing.
    pub fn add_inherited_block(&mut self, r: BlockRef, addr: Ipv4Addr) {
        self.push_block(r, addr, true);
    }

    /// Is block `r` held, and inherited?
    pub fn holds(&self, r: BlockRef) -> Option<bool> {
        self.by_ref.get(&r).map(|&i| self.blocks[i].inherited)
    }

    fn push_block(&mut self, r: BlockRef, addr: Ipv4Addr, inherited: bool) {
        if self.by_ref.contains_key(&r) {
            return;
        }
        let Some((first, last)) = self.geometry.ports(r.block) else {
            return;
        };
        let len = last - first + 1;
        let words = usize::from(len).div_ceil(64);
        self.blocks.push(Block {
            r,
            addr,
            first,
            len,
            host: None,
            used: [vec![0; words], vec![0; words], vec![0; words]],
            in_use: 0,
            cursor: [0; CLASSES],
            inherited,
        });
        let i = self.blocks.len() - 1;
        self.by_ref.insert(r, i);
        if !inherited {
            self.free.push(i);
        }
    }

    /// Blocks held.
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }
    /// The blocks held, in no particular order.
    pub fn block_refs(&self) -> impl Iterator<Item = BlockRef> + '_ {
        self.blocks.iter().map(|b| b.r)
    }
    /// Blocks with no host and no port in use (what could be released to
    /// a joiner; off the packet path: a walk).
    pub fn free_blocks(&self) -> usize {
        self.blocks.iter().filter(|b| b.in_use == 0 && b.host.is_none() && !b.inherited).count()
    }
    /// Ports in use over every block and class.
    pub fn in_use(&self) -> u64 {
        self.blocks.iter().map(|b| u64::from(b.in_use)).sum()
    }
    /// The blocks `host` holds.
    pub fn host_blocks(&self, host: Ipv4Addr) -> impl Iterator<Item = BlockRef> + '_ {
        self.hosts.get(&host).into_iter().flat_map(|h| h.as_slice()).map(|&i| self.blocks[i as usize].r)
    }

    /// A mapped port of `class` for inside host `host`: from a block it
    /// holds, else from a free block it takes (up to `max_per_host`).
    pub fn alloc(&mut self, class: PortClass, host: Ipv4Addr) -> Result<Mapped, Exhausted> {
        let Some(max_per_host) = self.max_per_host else {
            // Plain PAT: the current block, else the next with a free port.
            let n = self.blocks.len();
            let start = self.current[class as usize];
            for k in 0..n {
                let i = (start + k) % n;
                if self.blocks[i].inherited {
                    continue;
                }
                if let Some(off) = self.blocks[i].take(class) {
                    self.current[class as usize] = i;
                    self.counters.allocated += 1;
                    let b = &self.blocks[i];
                    return Ok(Mapped { block: b.r, addr: b.addr, port: b.first + off });
                }
            }
            self.counters.exhausted_pool += 1;
            return Err(Exhausted::Pool);
        };
        if let Some(held) = self.hosts.get(&host) {
            for &i in held.as_slice() {
                let i = i as usize;
                if let Some(off) = self.blocks[i].take(class) {
                    self.counters.allocated += 1;
                    let b = &self.blocks[i];
                    return Ok(Mapped { block: b.r, addr: b.addr, port: b.first + off });
                }
            }
            if u16::from(held.n) >= max_per_host {
                self.counters.exhausted_host += 1;
                return Err(Exhausted::Host);
            }
        } else if self.hosts.len() >= self.host_capacity {
            self.counters.exhausted_hosts_table += 1;
            return Err(Exhausted::Hosts);
        }
        let Some(i) = self.free.pop() else {
            self.counters.exhausted_pool += 1;
            return Err(Exhausted::Pool);
        };
        self.blocks[i].host = Some(host);
        self.hosts.entry(host).or_default().push(i);
        let b = &mut self.blocks[i];
        let off = b.take(class).unwrap_or(0); // a free block has every port free
        self.counters.allocated += 1;
        Ok(Mapped { block: b.r, addr: b.addr, port: b.first + off })
    }

    /// Whether `port` of `class` is in use in block `r`.
    pub fn is_used(&self, class: PortClass, r: BlockRef, port: u16) -> bool {
        let Some(&i) = self.by_ref.get(&r) else {
            return false;
        };
        let b = &self.blocks[i];
        port.checked_sub(b.first).is_some_and(|off| off < b.len && b.bit(class, off))
    }

    /// Mark `port` of `class` in block `r` used by `host` (a binding
    /// taken over after a failover, or installed from a replicated
    /// record). `false` if the block is not this allocator's or the port
    /// is in use already (the caller counts a conflict).
    pub fn reserve(&mut self, class: PortClass, r: BlockRef, port: u16, host: Ipv4Addr) -> bool {
        let Some(&i) = self.by_ref.get(&r) else {
            return false;
        };
        let b = &mut self.blocks[i];
        let Some(off) = port.checked_sub(b.first).filter(|&o| o < b.len) else {
            return false;
        };
        if b.bit(class, off) {
            return false;
        }
        b.set(class, off, true);
        b.in_use += 1;
        if b.host.is_none() && self.max_per_host.is_some() && !b.inherited {
            // An inherited binding: the block serves that host now (it may
            // exceed the host's maximum: the binding exists already; past
            // `MAX_PER_HOST` the block is not allocated from until it
            // empties). A new host past the table's capacity is not
            // entered: the block only waits for its bindings to end.
            b.host = Some(host);
            self.free.retain(|&f| f != i);
            if self.hosts.contains_key(&host) || self.hosts.len() < self.host_capacity {
                self.hosts.entry(host).or_default().push(i);
            }
        }
        self.counters.reserved += 1;
        true
    }

    /// The translation using `port` of `class` in block `r` ended. A block
    /// left without ports in use returns to the free blocks.
    pub fn free(&mut self, class: PortClass, r: BlockRef, port: u16) {
        let Some(&i) = self.by_ref.get(&r) else {
            self.counters.bad_free += 1;
            return;
        };
        let b = &mut self.blocks[i];
        let Some(off) = port.checked_sub(b.first).filter(|&o| o < b.len && b.bit(class, o)) else {
            self.counters.bad_free += 1;
            return;
        };
        b.set(class, off, false);
        b.in_use -= 1;
        self.counters.freed += 1;
        if b.in_use == 0 {
            if let Some(h) = b.host.take() {
                if let Some(held) = self.hosts.get_mut(&h) {
                    held.remove(i);
                    if held.n == 0 {
                        self.hosts.remove(&h);
                    }
                }
                self.free.push(i);
            }
        }
    }

    /// Give up a block with no port in use, of pool address index `addr`
    /// (a debt to a joiner): it is no longer allocated from. `None` when
    /// every such block has translations.
    pub fn take_idle_block(&mut self, addr: u32) -> Option<BlockRef> {
        let k = self.free.iter().position(|&i| self.blocks[i].r.addr == addr && self.blocks[i].in_use == 0)?;
        let i = self.free.swap_remove(k);
        Some(self.drop_block(i))
    }

    /// Stop holding block `r` (the map gave it back to its holder), once
    /// no port of it is in use; `false` (nothing changes) while one is.
    pub fn remove_block(&mut self, r: BlockRef) -> bool {
        let Some(&i) = self.by_ref.get(&r) else { return false };
        if self.blocks[i].in_use != 0 {
            return false;
        }
        self.free.retain(|&f| f != i);
        self.drop_block(i);
        true
    }

    /// Swap-remove block `i` (not in `free`, no host), fixing the moved
    /// block's indices.
    fn drop_block(&mut self, i: usize) -> BlockRef {
        let r = self.blocks[i].r;
        let last = self.blocks.len() - 1;
        self.blocks.swap_remove(i);
        self.by_ref.remove(&r);
        if i != last {
            let moved = self.blocks[i].r;
            self.by_ref.insert(moved, i);
            for f in self.free.iter_mut().filter(|f| **f == last) {
                *f = i;
            }
            if let Some(h) = self.blocks[i].host {
                if let Some(held) = self.hosts.get_mut(&h) {
                    held.replace(last, i);
                }
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks_for(a: &mut PortAllocator, n: u16) {
        for b in 0..n {
            a.add_block(BlockRef { addr: 0, block: b }, Ipv4Addr::new(198, 51, 100, 1));
        }
    }
    const H1: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const H2: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

    #[test]
    fn a_host_fills_its_blocks_then_stops_at_its_maximum() {
        let g = Geometry::new(512, false).unwrap();
        let mut a = PortAllocator::new(g, Some(2), 16);
        blocks_for(&mut a, 4);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1024 {
            let m = a.alloc(PortClass::Tcp, H1).unwrap();
            assert!(seen.insert(m.port), "port {} handed out twice", m.port);
        }
        assert_eq!(a.host_blocks(H1).count(), 2);
        assert_eq!(a.alloc(PortClass::Tcp, H1), Err(Exhausted::Host));
        assert_eq!(a.counters.exhausted_host, 1);
        // Other classes are other port spaces.
        assert!(a.alloc(PortClass::Udp, H1).is_ok());
        // Another host takes the two blocks left, then the worker is out.
        for _ in 0..1024 {
            a.alloc(PortClass::Tcp, H2).unwrap();
        }
        assert_eq!(a.alloc(PortClass::Tcp, H2), Err(Exhausted::Host));
        assert_eq!(a.alloc(PortClass::Tcp, Ipv4Addr::new(10, 0, 0, 3)), Err(Exhausted::Pool));
    }

    #[test]
    fn freed_ports_come_back_last_and_empty_blocks_return() {
        let g = Geometry::new(64, false).unwrap();
        let mut a = PortAllocator::new(g, Some(4), 16);
        blocks_for(&mut a, 2);
        let p: Vec<Mapped> = (0..3).map(|_| a.alloc(PortClass::Udp, H1).unwrap()).collect();
        assert_eq!(p.iter().map(|m| m.port).collect::<Vec<_>>(), [1024, 1025, 1026].map(|x| x + 64));
        a.free(PortClass::Udp, p[0].block, p[0].port);
        assert_eq!(a.alloc(PortClass::Udp, H1).unwrap().port, 1024 + 64 + 3, "not the one just freed");
        a.free(PortClass::Udp, p[0].block, p[0].port);
        assert_eq!(a.counters.bad_free, 1, "a double free is counted, not applied");
        for m in &p[1..] {
            a.free(PortClass::Udp, m.block, m.port);
        }
        a.free(PortClass::Udp, p[0].block, 1024 + 64 + 3);
        assert_eq!(a.free_blocks(), 2, "the host's empty block is free again");
        assert_eq!(a.host_blocks(H1).count(), 0);
    }

    #[test]
    fn plain_pat_hands_out_every_port_once_from_any_block() {
        let g = Geometry::new(64, false).unwrap();
        let mut a = PortAllocator::new(g, None, 0);
        blocks_for(&mut a, 2);
        let mut seen = std::collections::HashSet::new();
        for i in 0..128u16 {
            let host = Ipv4Addr::from(0x0a00_0000 + u32::from(i)); // 128 hosts, no table
            let m = a.alloc(PortClass::Tcp, host).unwrap();
            assert!(seen.insert(m.port), "port {} twice", m.port);
        }
        assert_eq!(a.alloc(PortClass::Tcp, H1), Err(Exhausted::Pool));
        assert_eq!(a.host_blocks(H1).count(), 0, "no per-host blocks");
        // Freeing one port of block 1 makes room; no block is idle yet.
        a.free(PortClass::Tcp, BlockRef { addr: 0, block: 1 }, 1024 + 64 + 5);
        assert_eq!(a.alloc(PortClass::Tcp, H2).unwrap().port, 1024 + 64 + 5);
        assert_eq!(a.take_idle_block(0), None);
        for p in 1024..1024 + 64 {
            a.free(PortClass::Tcp, BlockRef { addr: 0, block: 0 }, p);
        }
        assert_eq!(a.take_idle_block(0), Some(BlockRef { addr: 0, block: 0 }));
        assert_eq!(a.counters.exhausted_pool, 1);
    }

    #[test]
    fn the_hosts_table_is_bounded() {
        let g = Geometry::new(512, false).unwrap();
        let mut a = PortAllocator::new(g, Some(1), 2);
        blocks_for(&mut a, 8);
        a.alloc(PortClass::Tcp, H1).unwrap();
        a.alloc(PortClass::Tcp, H2).unwrap();
        assert_eq!(a.alloc(PortClass::Tcp, Ipv4Addr::new(10, 0, 0, 3)), Err(Exhausted::Hosts));
        assert_eq!(a.counters.exhausted_hosts_table, 1);
    }

    #[test]
    fn reserve_keeps_an_inherited_binding_and_blocks_reuse() {
        let g = Geometry::new(512, false).unwrap();
        let mut a = PortAllocator::new(g, Some(1), 16);
        blocks_for(&mut a, 1);
        let r = BlockRef { addr: 0, block: 0 };
        assert!(a.reserve(PortClass::Tcp, r, 1030, H1));
        assert!(!a.reserve(PortClass::Tcp, r, 1030, H1), "in use already");
        assert!(!a.reserve(PortClass::Tcp, r, 80, H1), "not in the block");
        assert!(!a.reserve(PortClass::Tcp, BlockRef { addr: 0, block: 9 }, 6000, H1), "not our block");
        for _ in 0..511 {
            assert_ne!(a.alloc(PortClass::Tcp, H1).unwrap().port, 1030);
        }
        assert_eq!(a.alloc(PortClass::Tcp, H1), Err(Exhausted::Host));
        assert!(a.is_used(PortClass::Tcp, r, 1030));
    }

    #[test]
    fn inherited_blocks_take_reserves_only() {
        let g = Geometry::new(512, false).unwrap();
        for max in [None, Some(2)] {
            let mut a = PortAllocator::new(g, max, 16);
            blocks_for(&mut a, 1);
            let inh = BlockRef { addr: 0, block: 5 };
            a.add_inherited_block(inh, Ipv4Addr::new(198, 51, 100, 1));
            assert_eq!((a.holds(inh), a.holds(BlockRef { addr: 0, block: 0 })), (Some(true), Some(false)));
            let (lo, _) = g.ports(5).unwrap();
            assert!(a.reserve(PortClass::Udp, inh, lo + 3, H2));
            assert!(!a.reserve(PortClass::Udp, inh, lo + 3, H1), "in use already");
            // Every port handed out comes from the dealt block, none from
            // the inherited one, until the dealt block is exhausted.
            for _ in 0..512 {
                let m = a.alloc(PortClass::Udp, H1).unwrap();
                assert_eq!(m.block.block, 0, "{max:?}");
            }
            assert!(a.alloc(PortClass::Udp, H1).is_err(), "{max:?}: the inherited block is not allocated from");
            assert_eq!(a.free_blocks(), 0);
            // The binding ends: the port is free, the block still not
            // allocated from.
            a.free(PortClass::Udp, inh, lo + 3);
            assert!(!a.is_used(PortClass::Udp, inh, lo + 3));
            assert!(a.alloc(PortClass::Udp, H2).is_err(), "{max:?}");
            assert_eq!(a.counters.bad_free, 0);
        }
    }

    #[test]
    fn only_idle_blocks_are_given_up() {
        let g = Geometry::new(512, false).unwrap();
        let mut a = PortAllocator::new(g, Some(4), 16);
        blocks_for(&mut a, 3);
        let m = a.alloc(PortClass::Icmp, H1).unwrap();
        let given: Vec<BlockRef> = std::iter::from_fn(|| a.take_idle_block(0)).collect();
        assert_eq!(given.len(), 2);
        assert!(!given.contains(&m.block));
        assert_eq!(a.blocks(), 1);
        // The remaining block still works after the indices moved.
        assert!(a.is_used(PortClass::Icmp, m.block, m.port));
        a.free(PortClass::Icmp, m.block, m.port);
        assert_eq!(a.take_idle_block(0), Some(m.block));
        assert_eq!(a.blocks(), 0);
    }
}
