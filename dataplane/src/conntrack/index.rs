//! The flow table's index: a bucketized cuckoo hash from a flow key's hash
//! to its slab slot, after DPDK's `rte_hash` and MemC3 (Fan et al., NSDI
//! 2013).
//!
//! Layout. A power-of-two array of 64-byte buckets, each one cache line of
//! eight `(signature, slot)` entries: `sig[8]: u32` then `slot[8]: u32`. A
//! key with hash `h` has the signature `s = h >> 32` (where 0 would be
//! taken as "empty", so 0 is replaced by 1) and two candidate buckets,
//! `b1 = h & mask` and `b2 = b1 ^ (mix(s) & mask)`. Because `b2` is computed
//! from the bucket and the signature alone, an entry can be moved to its
//! other bucket without the key ("partial-key cuckoo hashing"), and
//! `alt(alt(b)) = b`.
//!
//! A lookup reads `b1` (one cache line), compares the eight signatures and
//! checks the key of a matching slot; only if that fails does it read `b2`.
//! Inserts go to `b1` while it has room, so at the load the table runs at
//! (at most half full) nearly every hit costs one index line plus the slot.
//!
//! Invariants:
//! - Every live slot appears exactly once, in one of its two buckets, with
//!   its key's signature.
//! - Nothing allocates after `new`; an insert that finds no free entry on a
//!   bounded cuckoo path (BFS over at most `MAX_PATH_NODES` buckets) fails
//!   and leaves the index unchanged. With eight-way buckets at ≤ 50 % load
//!   that is not expected to happen; the caller counts it as a full table.
//! - The hash is keyed with a random seed per table (see `Key::hash`), so a
//!   sender cannot aim many flows at one bucket.

use crate::prefetch::prefetch;

const WAYS: usize = 8;
/// Buckets the cuckoo path search may visit on one insert.
const MAX_PATH_NODES: usize = 128;

#[derive(Copy, Clone, Debug, Default)]
#[repr(C, align(64))]
struct Bucket {
    sig: [u32; WAYS],
    slot: [u32; WAYS],
}

/// One bucket visited by the path search: reached from `parent` by moving
/// the entry at `way` of the parent's bucket to this bucket.
#[derive(Copy, Clone, Default)]
struct PathNode {
    bucket: u32,
    parent: u16,
    way: u8,
}

pub(super) struct Index {
    buckets: Vec<Bucket>,
    mask: usize,
}

#[inline(always)]
fn sig_of(hash: u64) -> u32 {
    ((hash >> 32) as u32).max(1)
}

impl Index {
    /// An index with room for at least `entries` entries at ≤ 50 % load.
    pub(super) fn new(entries: usize) -> Index {
        let buckets = (entries.saturating_mul(2).div_ceil(WAYS)).max(1).next_power_of_two();
        Index { buckets: vec![Bucket::default(); buckets], mask: buckets - 1 }
    }

    #[inline(always)]
    fn primary(&self, hash: u64) -> usize {
        hash as usize & self.mask
    }

    #[inline(always)]
    fn alt(&self, bucket: usize, sig: u32) -> usize {
        // A multiplicative mix of the signature (Knuth's constant); its high
        // half is well spread, and XOR makes `alt` an involution.
        let m = (u64::from(sig).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 29) as usize;
        (bucket ^ m) & self.mask
    }

    /// Bring the key's first bucket into the cache.
    #[inline(always)]
    pub(super) fn prefetch(&self, hash: u64) {
        if let Some(b) = self.buckets.get(self.primary(hash)) {
            prefetch(b);
        }
    }

    /// The slots in the key's first bucket whose signature matches, for
    /// prefetching them (`f` is called for each).
    #[inline(always)]
    pub(super) fn candidates(&self, hash: u64, mut f: impl FnMut(u32)) {
        let sig = sig_of(hash);
        if let Some(b) = self.buckets.get(self.primary(hash)) {
            let mut m = Self::matches(b, sig);
            while m != 0 {
                if let Some(&slot) = b.slot.get(m.trailing_zeros() as usize) {
                    f(slot);
                }
                m &= m - 1;
            }
        }
    }

    /// Bit `w` set where `sig[w] == sig` (branch-free; compiles to one
    /// vector compare and a mask).
    #[inline(always)]
    fn matches(b: &Bucket, sig: u32) -> u32 {
        let mut m = 0u32;
        for (w, &s) in b.sig.iter().enumerate() {
            m |= u32::from(s == sig) << w;
        }
        m
    }

    #[inline(always)]
    fn find_in(&self, bucket: usize, sig: u32, eq: &mut impl FnMut(u32) -> bool) -> Option<u32> {
        let b = self.buckets.get(bucket)?;
        let mut m = Self::matches(b, sig);
        while m != 0 {
            let w = m.trailing_zeros() as usize;
            let slot = *b.slot.get(w)?;
            if eq(slot) {
                return Some(slot);
            }
            m &= m - 1;
        }
        None
    }

    /// The slot for which `eq` holds among the key's candidates.
    #[inline(always)]
    pub(super) fn find(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let sig = sig_of(hash);
        let b1 = self.primary(hash);
        if let Some(s) = self.find_in(b1, sig, &mut eq) {
            return Some(s);
        }
        let b2 = self.alt(b1, sig);
        if b2 == b1 {
            return None;
        }
        self.find_in(b2, sig, &mut eq)
    }

    fn free_way(&self, bucket: usize) -> Option<usize> {
        self.buckets.get(bucket)?.sig.iter().position(|&s| s == 0)
    }

    fn put(&mut self, bucket: usize, way: usize, sig: u32, slot: u32) {
        if let Some(b) = self.buckets.get_mut(bucket) {
            b.sig[way] = sig;
            b.slot[way] = slot;
        }
    }

    /// Add `slot` under `hash`. `false`: no room (the index is unchanged).
    pub(super) fn insert(&mut self, hash: u64, slot: u32) -> bool {
        let sig = sig_of(hash);
        let b1 = self.primary(hash);
        if let Some(w) = self.free_way(b1) {
            self.put(b1, w, sig, slot);
            return true;
        }
        let b2 = self.alt(b1, sig);
        if let Some(w) = self.free_way(b2) {
            self.put(b2, w, sig, slot);
            return true;
        }
        self.insert_displacing(b1, b2, sig, slot)
    }

    /// Both buckets are full: find, breadth first, a chain of moves that
    /// ends in a bucket with a free entry, carry it out from the end, and
    /// put the new entry where the chain started.
    #[cold]
    #[inline(never)]
    fn insert_displacing(&mut self, b1: usize, b2: usize, sig: u32, slot: u32) -> bool {
        let mut nodes = [PathNode::default(); MAX_PATH_NODES];
        nodes[0] = PathNode { bucket: b1 as u32, parent: u16::MAX, way: 0 };
        nodes[1] = PathNode { bucket: b2 as u32, parent: u16::MAX, way: 0 };
        let mut len = 2;
        let mut head = 0;
        let mut found = None;
        'search: while head < len {
            let node = nodes[head];
            let bucket = node.bucket as usize;
            let Some(b) = self.buckets.get(bucket).copied() else { return false };
            for w in 0..WAYS {
                let to = self.alt(bucket, b.sig[w]);
                if to == bucket {
                    continue;
                }
                if let Some(free) = self.free_way(to) {
                    found = Some((head, w, to, free));
                    break 'search;
                }
                // Each bucket at most once in the tree, so a path never
                // visits a bucket twice (a move would otherwise pick up an
                // entry an earlier move of the same path put there).
                if len < MAX_PATH_NODES && !nodes[..len].iter().any(|n| n.bucket as usize == to) {
                    nodes[len] = PathNode { bucket: to as u32, parent: head as u16, way: w as u8 };
                    len += 1;
                }
            }
            head += 1;
        }
        let Some((mut at, mut way, mut to, mut free)) = found else { return false };
        loop {
            // Move the entry at (nodes[at].bucket, way) into (to, free).
            let from = nodes[at].bucket as usize;
            let Some(e) = self.buckets.get(from).map(|b| (b.sig[way], b.slot[way])) else { return false };
            self.put(to, free, e.0, e.1);
            let node = nodes[at];
            if node.parent == u16::MAX {
                self.put(from, way, sig, slot);
                return true;
            }
            // The freed entry is filled from the parent next.
            (to, free) = (from, way);
            way = usize::from(node.way);
            at = usize::from(node.parent);
        }
    }

    /// Remove the entry for `slot` under `hash`; `false` if absent.
    pub(super) fn remove(&mut self, hash: u64, slot: u32) -> bool {
        let sig = sig_of(hash);
        let b1 = self.primary(hash);
        for b in [b1, self.alt(b1, sig)] {
            if let Some(bk) = self.buckets.get_mut(b) {
                if let Some(w) = (0..WAYS).find(|&w| bk.sig[w] == sig && bk.slot[w] == slot) {
                    bk.sig[w] = 0;
                    return true;
                }
            }
        }
        false
    }

    pub(super) fn clear(&mut self) {
        self.buckets.fill(Bucket::default());
    }

    pub(super) fn allocation_size(&self) -> usize {
        self.buckets.capacity() * core::mem::size_of::<Bucket>()
    }

    /// Entries the index has room for (for tests).
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.buckets.len() * WAYS
    }

    /// Entries in use (for tests).
    #[cfg(test)]
    pub(super) fn entries(&self) -> usize {
        self.buckets.iter().map(|b| b.sig.iter().filter(|&&s| s != 0).count()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u64) -> u64 {
        // A stand-in for the keyed hash: well spread.
        let x = u128::from(i ^ 0x1234_5678_9abc_def0).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835);
        (x as u64) ^ ((x >> 64) as u64)
    }

    #[test]
    fn insert_find_remove_at_full_design_load() {
        let n = 10_000u64;
        let mut ix = Index::new(n as usize);
        for i in 0..n {
            assert!(ix.insert(h(i), i as u32), "insert {i}");
        }
        assert_eq!(ix.entries(), n as usize);
        for i in 0..n {
            assert_eq!(ix.find(h(i), |s| s == i as u32), Some(i as u32));
        }
        for i in (0..n).step_by(2) {
            assert!(ix.remove(h(i), i as u32));
            assert!(!ix.remove(h(i), i as u32));
        }
        for i in 0..n {
            let want = if i % 2 == 0 { None } else { Some(i as u32) };
            assert_eq!(ix.find(h(i), |s| s == i as u32), want);
        }
    }

    /// Same signature and buckets (a hash collision on all 64 bits): the
    /// entries are told apart through the key check; the two buckets hold
    /// sixteen, the seventeenth is refused and changes nothing; removing
    /// one keeps the others.
    #[test]
    fn full_hash_collisions_are_told_apart_by_the_key() {
        let mut ix = Index::new(64);
        for s in 0..16u32 {
            assert!(ix.insert(7, s));
        }
        assert!(!ix.insert(7, 16));
        assert_eq!(ix.entries(), 16);
        for s in 0..16u32 {
            assert_eq!(ix.find(7, |x| x == s), Some(s));
        }
        assert_eq!(ix.find(7, |x| x == 16), None);
        assert!(ix.remove(7, 3));
        assert_eq!(ix.find(7, |x| x == 3), None);
        assert_eq!(ix.find(7, |x| x == 4), Some(4));
        assert!(ix.insert(7, 16));
    }

    /// Filling far beyond the design load drives the displacement path;
    /// every entry that was accepted stays findable, and the ones refused
    /// left the index unchanged.
    #[test]
    fn displacement_keeps_every_accepted_entry() {
        let mut ix = Index::new(512); // 128 buckets of 8 = 1024 entries
        let mut accepted = Vec::new();
        for i in 0..1100u64 {
            if ix.insert(h(i), i as u32) {
                accepted.push(i);
            }
        }
        assert!(accepted.len() > 950, "cuckoo moves should fill most of the table: {}", accepted.len());
        assert_eq!(ix.entries(), accepted.len());
        for &i in &accepted {
            assert_eq!(ix.find(h(i), |s| s == i as u32), Some(i as u32), "entry {i}");
        }
    }
}
