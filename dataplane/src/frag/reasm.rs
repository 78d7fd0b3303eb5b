//! Bounded, per-worker IP reassembly (SPEC R10, B4; `docs/fragments.md`).
//!
//! A `Reassembler` holds the fragments of up to `max_contexts` datagrams.
//! Each fragment's bytes are copied into a fixed arena of `BLOCK_SIZE`-byte
//! blocks (a fragment is a chain of blocks); a completed datagram is copied
//! once into a 65535-byte scratch buffer and lent to the caller
//! (`FragResult::Complete`), and a fragment released in shallow mode is
//! lent the same way (`take_held`). All of it — contexts, fragment slots,
//! arena, index, scratch — is reserved by `new`; the per-packet path never
//! allocates and never panics.
//!
//! DoS bounds (each a constructor parameter; defaults in `ReasmConfig`):
//! - memory: fixed at construction, `memory_bytes()`; with the defaults
//!   ≈ 4.8 MiB per worker, of which 4 MiB is fragment data (the Linux
//!   default `ipfrag_high_thresh`);
//! - datagrams in reassembly ≤ `max_contexts`; a new datagram that finds
//!   the table full (after reclaiming one expired context) is refused
//!   (`FragTableFull`) — live datagrams are never evicted, so an attacker
//!   cannot flush legitimate ones, only occupy free contexts;
//! - fragments per datagram ≤ `max_frags_per_datagram` (one more discards
//!   the datagram, `FragTooMany`), so the overlap scan of one fragment is
//!   O(max_frags) and a datagram's work is O(max_frags²);
//! - bytes per datagram ≤ 65535 (offset + length beyond it: `FragTooBig`,
//!   RFC 791 §3.1, RFC 8200 §4.5);
//! - lifetime ≤ `timeout` from the first fragment (2 s by default; see
//!   `DEFAULT_TIMEOUT`); `expire(now, budget)` reclaims at most `budget`
//!   contexts per call, oldest first, and lookups reclaim lazily;
//! - every fragment is accounted for exactly once: completed, forwarded,
//!   taken, still held, or dropped with a `DropReason`
//!   (`ReasmCounters::accounted`).
//!
//! Policy (checked in this order for each fragment):
//! 1. alone: zero length or an offset or non-last length that is not a
//!    multiple of 8 → `FragBadLength`; offset + length > 65535 →
//!    `FragTooBig`; a TCP fragment at offset 8 (RFC 1858 §3) or a first
//!    fragment too short for its whole L4 header (TCP with options, UDP 8,
//!    ICMP/ICMPv6 8; RFC 1858 §2, RFC 7112) → `FragTinyFirst`. Only this
//!    fragment is dropped.
//! 2. against its datagram: a last fragment whose end differs from an
//!    earlier last's, or any data beyond the known end →
//!    `FragLastConflict`; an exact duplicate (same offset and length) →
//!    `FragDuplicate`, only the copy is dropped (RFC 791 retransmissions
//!    are legitimate and identical ranges cannot rewrite anything that
//!    was checked); any other overlap → `FragOverlap` and the *whole*
//!    datagram is discarded (RFC 5722, applied to IPv4 as well: teardrop,
//!    and overlapping-fragment policy evasion); the fragment beyond the
//!    limit → `FragTooMany`; arena exhausted → `FragNoBuffer`. Each of
//!    these except the duplicate discards the datagram.
//! 3. An atomic fragment (offset 0, no more fragments; RFC 6946) is not
//!    reassembled: `Unfragmented`, nothing held.

use super::{FragInfo, FragKey};
use crate::types::{ip_proto, DropReason, Duration, FiveTuple, Timestamp};
use core::hash::BuildHasher;
use hashbrown::{DefaultHashBuilder, HashTable};
use std::net::{IpAddr, Ipv4Addr};

/// Largest datagram payload (offset + length of any fragment): the 16-bit
/// IPv4 total length / IPv6 payload length (RFC 791 §3.1, RFC 8200 §4.5).
pub const MAX_DATAGRAM: usize = 65535;
/// Arena block: a 1480-byte fragment (1500-byte MTU) takes 6 blocks, 96 %
/// of them used; a chain costs a 4-byte link per block.
pub const BLOCK_SIZE: usize = 256;
/// L4 header bytes kept from the first fragment: a TCP header with the
/// largest options (RFC 9293 §3.1: data offset ≤ 15 words).
pub const L4_HEAD_MAX: usize = 60;
/// Default lifetime of a datagram in reassembly. RFC 791 suggests 15 s and
/// Linux uses 30 s, but the fragments of one datagram leave the sender
/// back to back, so anything not complete within 2 s is lost or hostile;
/// a shorter lifetime frees an attacker's contexts sooner and narrows the
/// window in which a wrapped 16-bit IPv4 id mis-associates fragments
/// (RFC 4963 §2: at gigabit rates the id space wraps in well under 30 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

const NIL: u32 = u32::MAX;

/// What happens when the first fragment has revealed the L4 header and the
/// datagram is complete.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ReasmMode {
    /// Hold every fragment and return the whole datagram (`Complete`):
    /// where L4 must be inspected or rewritten (NAT of ports).
    Full,
    /// Hold fragments only until the first one is seen (`FirstSeen`); the
    /// caller then drains them with `take_held`, and later fragments of the
    /// datagram come back as `Forward` without being held: the fragment
    /// owner forwarding to the flow owner, or policy on the 5-tuple only.
    Shallow,
}

/// Limits of one reassembler (per worker).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReasmConfig {
    /// Datagrams in reassembly at once.
    pub max_contexts: usize,
    /// Fragments one datagram may have.
    pub max_frags_per_datagram: usize,
    /// Bytes of fragment data held at once (rounded up to `BLOCK_SIZE`).
    pub arena_bytes: usize,
    /// Lifetime of a datagram in reassembly, from its first-arrived fragment.
    pub timeout: Duration,
    pub mode: ReasmMode,
}

impl Default for ReasmConfig {
    /// 1024 datagrams, 64 fragments each (a 65535-byte datagram over a
    /// 1500-byte MTU has 45), 4 MiB of data, 2 s, full reassembly.
    fn default() -> Self {
        ReasmConfig {
            max_contexts: 1024,
            max_frags_per_datagram: 64,
            arena_bytes: 4 << 20,
            timeout: DEFAULT_TIMEOUT,
            mode: ReasmMode::Full,
        }
    }
}

impl ReasmConfig {
    /// The same limits in shallow mode.
    pub fn shallow(self) -> Self {
        ReasmConfig { mode: ReasmMode::Shallow, ..self }
    }
}

/// A reassembler configuration that cannot be built (off the packet path).
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReasmConfigError {
    #[error("reassembly max_contexts is {0}, expected 1..=65536")]
    Contexts(usize),
    #[error("reassembly max_frags_per_datagram is {0}, expected 1..=8192 (65535 / 8)")]
    Frags(usize),
    #[error("reassembly arena_bytes is {found}, expected {min}..=1 GiB (at least one 65535-byte datagram in max_frags_per_datagram fragments)")]
    Arena { found: usize, min: usize },
    #[error("reassembly timeout is zero")]
    Timeout,
}

/// The L4 header of a datagram, from its first fragment.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct L4Head {
    pub proto: u8,
    /// Ports as in `FiveTuple` (ICMP echo: SPEC R3; other protocols 0).
    pub src_port: u16,
    pub dst_port: u16,
    len: u8,
    bytes: [u8; L4_HEAD_MAX],
}

impl L4Head {
    /// The first `min(60, first fragment length)` bytes of the L4 header.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len).min(L4_HEAD_MAX)]
    }

    /// The datagram's 5-tuple.
    #[inline]
    pub fn five_tuple(&self, key: &FragKey) -> FiveTuple {
        FiveTuple { src: key.src, dst: key.dst, proto: self.proto, src_port: self.src_port, dst_port: self.dst_port }
    }

    /// Check that a first fragment holds the whole L4 header (RFC 1858
    /// §2: a TCP header split over fragments hides its flags and ports
    /// from filters) and take its ports.
    pub fn parse(proto: u8, data: &[u8]) -> Result<L4Head, DropReason> {
        let be16 = |i: usize| data.get(i..i + 2).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
        let (min, ports) = match proto {
            ip_proto::TCP => {
                let off = data.get(12).ok_or(DropReason::FragTinyFirst)? >> 4;
                if off < 5 {
                    return Err(DropReason::TcpBadHeaderLen);
                }
                (usize::from(off) * 4, (be16(0), be16(2)))
            }
            ip_proto::UDP => (8, (be16(0), be16(2))),
            ip_proto::ICMP | ip_proto::ICMPV6 => {
                let (req, rep) = if proto == ip_proto::ICMP { (8, 0) } else { (128, 129) };
                let ports = match data.first() {
                    Some(&t) if t == req => (be16(4), 0),
                    Some(&t) if t == rep => (0, be16(4)),
                    _ => (0, 0),
                };
                (8, ports)
            }
            _ => (0, (0, 0)),
        };
        if data.len() < min {
            return Err(DropReason::FragTinyFirst);
        }
        let n = data.len().min(L4_HEAD_MAX);
        let mut bytes = [0u8; L4_HEAD_MAX];
        bytes[..n].copy_from_slice(&data[..n]);
        Ok(L4Head { proto, src_port: ports.0, dst_port: ports.1, len: n as u8, bytes })
    }
}

/// What became of one fragment.
#[derive(Debug, PartialEq, Eq)]
pub enum FragResult<'a> {
    /// Held; nothing to do yet.
    Pending,
    /// This fragment was the first (offset 0): the L4 header is known and
    /// the fragment is held. Full mode: ignore it or use it to find the
    /// director early, or switch the datagram to forwarding by draining it
    /// with `take_held`. Shallow mode: drain the held fragments with
    /// `take_held` now; later ones come back as `Forward`.
    FirstSeen { l4: L4Head },
    /// The datagram is being forwarded (its first fragment was seen and
    /// `take_held` was called, or shallow mode): send this fragment on as
    /// it is; it was checked (overlap, limits) but not held.
    Forward { l4: L4Head },
    /// Full mode: the whole datagram's payload (L4 header first), lent
    /// until the next call. The context is already released.
    Complete { l4: L4Head, data: &'a [u8] },
    /// Offset 0 and no more fragments (RFC 6946 atomic fragment): process
    /// the packet as a whole; nothing held.
    Unfragmented,
    /// This fragment is dropped (and, for a datagram-level reason, every
    /// fragment held for its datagram); counted in `ReasmCounters`.
    Drop(DropReason),
}

/// A fragment released by `take_held`, lent until the next call.
#[derive(Debug, PartialEq, Eq)]
pub struct Held<'a> {
    pub offset: u16,
    pub more: bool,
    pub data: &'a [u8],
}

/// Counters of one reassembler. Fragment conservation:
/// `fragments == unfragmented + completed_fragments + forwarded + taken +
/// total_dropped() + held` (`accounted`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReasmCounters {
    /// Calls to `insert`.
    pub fragments: u64,
    /// Atomic fragments passed back (`Unfragmented`).
    pub unfragmented: u64,
    /// Datagrams opened (first fragment to arrive, any offset).
    pub datagrams: u64,
    /// `FirstSeen` results.
    pub first_seen: u64,
    /// Datagrams returned whole (`Complete`), and their fragments.
    pub completed: u64,
    pub completed_fragments: u64,
    /// Fragments returned as `Forward`.
    pub forwarded: u64,
    /// Fragments released by `take_held`.
    pub taken: u64,
    /// Datagrams all of whose bytes went through forwarding.
    pub forwarded_datagrams: u64,
    /// Datagrams discarded (any reason, timeout included).
    pub datagrams_dropped: u64,
    /// Fragments dropped, by reason: the offending fragment and every
    /// fragment held for a discarded datagram.
    drops: [u64; DropReason::COUNT],
}

impl Default for ReasmCounters {
    fn default() -> Self {
        ReasmCounters {
            fragments: 0,
            unfragmented: 0,
            datagrams: 0,
            first_seen: 0,
            completed: 0,
            completed_fragments: 0,
            forwarded: 0,
            taken: 0,
            forwarded_datagrams: 0,
            datagrams_dropped: 0,
            drops: [0; DropReason::COUNT],
        }
    }
}

impl crate::stats::Stats for ReasmCounters {
    fn visit(&self, v: &mut dyn crate::stats::Visitor) {
        for (name, n) in [
            ("fragments", self.fragments),
            ("unfragmented", self.unfragmented),
            ("datagrams", self.datagrams),
            ("first_seen", self.first_seen),
            ("completed", self.completed),
            ("completed_fragments", self.completed_fragments),
            ("forwarded", self.forwarded),
            ("taken", self.taken),
            ("forwarded_datagrams", self.forwarded_datagrams),
            ("datagrams_dropped", self.datagrams_dropped),
        ] {
            v.counter(name, n);
        }
        v.family("drops", "reason", &mut DropReason::ALL.iter().map(|&r| (r.as_str(), self.dropped(r))));
    }
}

impl ReasmCounters {
    /// Fragments dropped for `reason`.
    #[inline]
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops.get(reason.index()).copied().unwrap_or(0)
    }
    pub fn total_dropped(&self) -> u64 {
        self.drops.iter().sum()
    }
    /// Non-zero drop counters, for `show stats`.
    pub fn drops(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(|&r| (r, self.dropped(r))).filter(|&(_, n)| n != 0)
    }
    /// Every fragment is in exactly one place, given `held` still held.
    pub fn accounted(&self, held: usize) -> bool {
        self.fragments
            == self.unfragmented
                + self.completed_fragments
                + self.forwarded
                + self.taken
                + self.total_dropped()
                + held as u64
    }
    #[inline]
    fn count(&mut self, reason: DropReason, n: u64) {
        if let Some(c) = self.drops.get_mut(reason.index()) {
            *c += n;
        }
    }
}

/// One fragment's range (8 bytes); `block` is its data chain, `NIL` once
/// the bytes are not held (forwarded, taken). The last fragment is the
/// one that ends at the datagram's end: no other can (it would overlap).
#[derive(Copy, Clone, Debug)]
struct Slot {
    offset: u16,
    len: u16,
    block: u32,
}

const EMPTY_SLOT: Slot = Slot { offset: 0, len: 0, block: NIL };

#[derive(Copy, Clone, Debug)]
struct Ctx {
    key: FragKey,
    hash: u64,
    created: Timestamp,
    /// Age list (creation order), indices into `ctxs`.
    prev: u32,
    next: u32,
    /// Slots used; fragments whose bytes are held.
    nfrags: u16,
    held: u16,
    /// Bytes of distinct fragments seen (no overlaps, so coverage).
    received: u32,
    /// Highest end seen, and the end a last fragment set.
    max_end: u32,
    end: Option<u32>,
    l4: Option<L4Head>,
    forwarding: bool,
    live: bool,
}

const FREE_CTX: Ctx = Ctx {
    key: FragKey { src: IpAddr::V4(Ipv4Addr::UNSPECIFIED), dst: IpAddr::V4(Ipv4Addr::UNSPECIFIED), ident: 0, proto: 0 },
    hash: 0,
    created: Timestamp::ZERO,
    prev: NIL,
    next: NIL,
    nfrags: 0,
    held: 0,
    received: 0,
    max_end: 0,
    end: None,
    l4: None,
    forwarding: false,
    live: false,
};

/// A per-worker reassembly table. See the module doc for the bounds.
pub struct Reassembler {
    cfg: ReasmConfig,
    ctxs: Vec<Ctx>,
    free_ctx: Vec<u32>,
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
    /// `max_frags_per_datagram` slots per context.
    slots: Vec<Slot>,
    arena: Vec<u8>,
    block_next: Vec<u32>,
    free_block: u32,
    free_blocks: usize,
    age_head: u32,
    age_tail: u32,
    scratch: Vec<u8>,
    held_total: usize,
    counters: ReasmCounters,
}

impl Reassembler {
    /// A reassembler with every byte it will use reserved now.
    pub fn new(cfg: ReasmConfig) -> Result<Self, ReasmConfigError> {
        if !(1..=65536).contains(&cfg.max_contexts) {
            return Err(ReasmConfigError::Contexts(cfg.max_contexts));
        }
        if !(1..=MAX_DATAGRAM / 8 + 1).contains(&cfg.max_frags_per_datagram) {
            return Err(ReasmConfigError::Frags(cfg.max_frags_per_datagram));
        }
        let min = MAX_DATAGRAM + cfg.max_frags_per_datagram * BLOCK_SIZE;
        if !(min..=1 << 30).contains(&cfg.arena_bytes) {
            return Err(ReasmConfigError::Arena { found: cfg.arena_bytes, min });
        }
        if cfg.timeout.0 == 0 {
            return Err(ReasmConfigError::Timeout);
        }
        let blocks = cfg.arena_bytes.div_ceil(BLOCK_SIZE);
        let mut block_next: Vec<u32> = (1..=blocks as u32).collect();
        if let Some(l) = block_next.last_mut() {
            *l = NIL;
        }
        let mut free_ctx = Vec::with_capacity(cfg.max_contexts);
        free_ctx.extend((0..cfg.max_contexts as u32).rev());
        Ok(Reassembler {
            cfg,
            ctxs: vec![FREE_CTX; cfg.max_contexts],
            free_ctx,
            // Twice the contexts: removals leave tombstones, and hashbrown
            // rehashes in place (no allocation) while items ≤ capacity / 2.
            index: HashTable::with_capacity(cfg.max_contexts * 2),
            hasher: DefaultHashBuilder::default(),
            slots: vec![EMPTY_SLOT; cfg.max_contexts * cfg.max_frags_per_datagram],
            arena: vec![0; blocks * BLOCK_SIZE],
            block_next,
            free_block: 0,
            free_blocks: blocks,
            age_head: NIL,
            age_tail: NIL,
            scratch: vec![0; MAX_DATAGRAM],
            held_total: 0,
            counters: ReasmCounters::default(),
        })
    }

    pub fn config(&self) -> &ReasmConfig {
        &self.cfg
    }
    /// Datagrams in reassembly.
    pub fn len(&self) -> usize {
        self.cfg.max_contexts - self.free_ctx.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fragments whose bytes are held.
    pub fn held_fragments(&self) -> usize {
        self.held_total
    }
    /// Arena bytes in use (whole blocks).
    pub fn held_bytes(&self) -> usize {
        (self.block_next.len() - self.free_blocks) * BLOCK_SIZE
    }
    pub fn counters(&self) -> &ReasmCounters {
        &self.counters
    }
    /// Bytes reserved by this reassembler (heap, by capacity, plus the
    /// struct): constant from `new` on.
    pub fn memory_bytes(&self) -> usize {
        use core::mem::size_of;
        size_of::<Self>()
            + self.ctxs.capacity() * size_of::<Ctx>()
            + self.free_ctx.capacity() * size_of::<u32>()
            // hashbrown: a power-of-two bucket count, 7/8 usable; one
            // control byte per bucket plus one group of 16.
            + (self.index.capacity() * 8 / 7).next_power_of_two() * (size_of::<u32>() + 1) + 16
            + self.slots.capacity() * size_of::<Slot>()
            + self.arena.capacity()
            + self.block_next.capacity() * size_of::<u32>()
            + self.scratch.capacity()
    }

    /// Insert one fragment (`frag` from `ipv4_fragment` / `ipv6_fragment`,
    /// `payload` its data after the IP / Fragment header).
    pub fn insert(&mut self, now: Timestamp, frag: &FragInfo, payload: &[u8]) -> FragResult<'_> {
        self.counters.fragments += 1;
        if frag.is_atomic() {
            self.counters.unfragmented += 1;
            return FragResult::Unfragmented;
        }
        let (off, len) = (usize::from(frag.offset), payload.len());
        let end = off + len;
        // 1. The fragment alone.
        let alone = if len == 0 || off % 8 != 0 || (frag.more && len % 8 != 0) {
            Err(DropReason::FragBadLength)
        } else if end > MAX_DATAGRAM {
            Err(DropReason::FragTooBig)
        } else if frag.key.proto == ip_proto::TCP && off == 8 {
            Err(DropReason::FragTinyFirst)
        } else if off == 0 {
            L4Head::parse(frag.key.proto, payload).map(Some)
        } else {
            Ok(None)
        };
        let l4 = match alone {
            Ok(l4) => l4,
            Err(r) => return self.reject(r),
        };
        // 2. Its datagram: found (and not expired), or a new context.
        let hash = self.hasher.hash_one(frag.key);
        let mut found = self.lookup(hash, &frag.key);
        if let Some(i) = found {
            if self.expired(i, now) {
                self.discard_ctx(i, DropReason::FragTimeout);
                found = None;
            }
        }
        let i = match found {
            Some(i) => i,
            None => match self.open(hash, frag.key, now) {
                Some(i) => i,
                None => return self.reject(DropReason::FragTableFull),
            },
        };
        let c = self.ctxs[i];
        // 3. Against what the datagram already has.
        let end32 = end as u32;
        if !frag.more {
            if c.end.is_some_and(|e| e != end32) || c.max_end > end32 {
                return self.fail(i, DropReason::FragLastConflict);
            }
        } else if c.end.is_some_and(|e| end32 > e) {
            return self.fail(i, DropReason::FragLastConflict);
        }
        let base = i * self.cfg.max_frags_per_datagram;
        for s in &self.slots[base..base + usize::from(c.nfrags)] {
            let (so, se) = (usize::from(s.offset), usize::from(s.offset) + usize::from(s.len));
            if so == off && se == end {
                return self.reject(DropReason::FragDuplicate);
            }
            if off < se && so < end {
                return self.fail(i, DropReason::FragOverlap);
            }
        }
        if usize::from(c.nfrags) >= self.cfg.max_frags_per_datagram {
            return self.fail(i, DropReason::FragTooMany);
        }
        // 4. Keep its range, and its bytes unless the datagram is being forwarded.
        let block = if c.forwarding {
            NIL
        } else {
            match self.alloc(payload) {
                Some(b) => b,
                None => return self.fail(i, DropReason::FragNoBuffer),
            }
        };
        self.slots[base + usize::from(c.nfrags)] =
            Slot { offset: frag.offset, len: len as u16, block };
        let c = &mut self.ctxs[i];
        c.nfrags += 1;
        if block != NIL {
            c.held += 1;
            self.held_total += 1;
        }
        c.received += len as u32;
        c.max_end = c.max_end.max(end32);
        if !frag.more {
            c.end = Some(end32);
        }
        if l4.is_some() {
            c.l4 = l4;
        }
        let c = *c;
        let complete = c.end == Some(c.received);
        // 5. What the caller does next.
        match (c.l4, l4) {
            (Some(h), _) if c.forwarding => {
                self.counters.forwarded += 1;
                if complete && c.held == 0 {
                    self.counters.forwarded_datagrams += 1;
                    self.close(i);
                }
                FragResult::Forward { l4: h }
            }
            (Some(h), _) if complete && self.cfg.mode == ReasmMode::Full => {
                let n = self.assemble(i);
                self.counters.completed += 1;
                self.counters.completed_fragments += u64::from(c.nfrags);
                self.close(i);
                FragResult::Complete { l4: h, data: &self.scratch[..n] }
            }
            (_, Some(h)) => {
                self.counters.first_seen += 1;
                if self.cfg.mode == ReasmMode::Shallow {
                    self.ctxs[i].forwarding = true;
                }
                FragResult::FirstSeen { l4: h }
            }
            _ => FragResult::Pending,
        }
    }

    /// Release one held fragment of a datagram whose first fragment has
    /// been seen (lowest offset first), and switch the datagram to
    /// forwarding: its later fragments come back as `Forward`. `None` when
    /// nothing is held, the first fragment is not in yet, or no such
    /// datagram. The context is freed once every byte has gone through.
    pub fn take_held(&mut self, key: &FragKey) -> Option<Held<'_>> {
        let i = self.lookup(self.hasher.hash_one(key), key)?;
        let c = self.ctxs[i];
        c.l4?;
        self.ctxs[i].forwarding = true;
        let base = i * self.cfg.max_frags_per_datagram;
        let mut best: Option<usize> = None;
        for j in base..base + usize::from(c.nfrags) {
            let s = self.slots[j];
            match best {
                _ if s.block == NIL => {}
                Some(b) if self.slots[b].offset <= s.offset => {}
                _ => best = Some(j),
            }
        }
        let j = best?;
        let s = self.slots[j];
        let n = usize::from(s.len);
        copy_chain(&self.arena, &self.block_next, s.block, &mut self.scratch[..n]);
        self.free_chain(s.block);
        self.slots[j].block = NIL;
        self.ctxs[i].held -= 1;
        self.held_total -= 1;
        self.counters.taken += 1;
        if c.held == 1 && c.end == Some(c.received) {
            self.counters.forwarded_datagrams += 1;
            self.close(i);
        }
        let more = c.end != Some(u32::from(s.offset) + u32::from(s.len));
        Some(Held { offset: s.offset, more, data: &self.scratch[..n] })
    }

    /// Discard a datagram on the caller's decision (e.g. `AclDenied` on its
    /// 5-tuple at `FirstSeen`): its held fragments are counted as dropped
    /// for `reason`; later fragments open a new context and time out.
    /// Returns the number of fragments dropped, `None` if no such datagram.
    pub fn discard(&mut self, key: &FragKey, reason: DropReason) -> Option<usize> {
        let i = self.lookup(self.hasher.hash_one(key), key)?;
        let n = usize::from(self.ctxs[i].held);
        self.discard_ctx(i, reason);
        Some(n)
    }

    /// Discard at most `budget` datagrams whose timeout has passed (at
    /// `created + timeout` a datagram is expired), oldest first; returns
    /// how many. Their held fragments count as `FragTimeout`.
    pub fn expire(&mut self, now: Timestamp, budget: usize) -> usize {
        let mut n = 0;
        while n < budget && self.age_head != NIL && self.expired(self.age_head as usize, now) {
            self.discard_ctx(self.age_head as usize, DropReason::FragTimeout);
            n += 1;
        }
        n
    }

    // --- internals ---

    fn reject(&mut self, reason: DropReason) -> FragResult<'static> {
        self.counters.count(reason, 1);
        FragResult::Drop(reason)
    }

    /// Discard the datagram and the fragment in hand.
    fn fail(&mut self, i: usize, reason: DropReason) -> FragResult<'static> {
        self.discard_ctx(i, reason);
        self.reject(reason)
    }

    fn lookup(&self, hash: u64, key: &FragKey) -> Option<usize> {
        let ctxs = &self.ctxs;
        self.index
            .find(hash, |&j| ctxs.get(j as usize).is_some_and(|c| c.live && c.key == *key))
            .map(|&j| j as usize)
    }

    #[inline]
    fn expired(&self, i: usize, now: Timestamp) -> bool {
        now.since(self.ctxs[i].created) >= self.cfg.timeout
    }

    /// A new context at the age-list tail; reclaims the oldest if the table
    /// is full and it has expired, else `None`.
    fn open(&mut self, hash: u64, key: FragKey, now: Timestamp) -> Option<usize> {
        if self.free_ctx.is_empty() && self.age_head != NIL && self.expired(self.age_head as usize, now) {
            self.discard_ctx(self.age_head as usize, DropReason::FragTimeout);
        }
        let i = self.free_ctx.pop()? as usize;
        self.ctxs[i] = Ctx { key, hash, created: now, prev: self.age_tail, ..FREE_CTX };
        self.ctxs[i].live = true;
        match self.age_tail {
            NIL => self.age_head = i as u32,
            t => self.ctxs[t as usize].next = i as u32,
        }
        self.age_tail = i as u32;
        let (ctxs, hasher) = (&self.ctxs, &self.hasher);
        self.index.insert_unique(hash, i as u32, |&j| ctxs.get(j as usize).map_or(0, |c| hasher.hash_one(c.key)));
        self.counters.datagrams += 1;
        Some(i)
    }

    fn discard_ctx(&mut self, i: usize, reason: DropReason) {
        self.counters.count(reason, u64::from(self.ctxs[i].held));
        self.counters.datagrams_dropped += 1;
        self.close(i);
    }

    /// Free a context: its held blocks, its index entry, its age-list link.
    fn close(&mut self, i: usize) {
        let c = self.ctxs[i];
        let base = i * self.cfg.max_frags_per_datagram;
        for j in base..base + usize::from(c.nfrags) {
            let b = self.slots[j].block;
            if b != NIL {
                self.free_chain(b);
                self.slots[j].block = NIL;
            }
        }
        self.held_total -= usize::from(c.held);
        if let Ok(e) = self.index.find_entry(c.hash, |&j| j as usize == i) {
            e.remove();
        }
        match c.prev {
            NIL => self.age_head = c.next,
            p => self.ctxs[p as usize].next = c.next,
        }
        match c.next {
            NIL => self.age_tail = c.prev,
            n => self.ctxs[n as usize].prev = c.prev,
        }
        self.ctxs[i] = FREE_CTX;
        self.free_ctx.push(i as u32);
    }

    /// Copy every held fragment of context `i` to its place in `scratch`;
    /// the datagram length.
    fn assemble(&mut self, i: usize) -> usize {
        let c = self.ctxs[i];
        let base = i * self.cfg.max_frags_per_datagram;
        for s in &self.slots[base..base + usize::from(c.nfrags)] {
            let (o, n) = (usize::from(s.offset), usize::from(s.len));
            copy_chain(&self.arena, &self.block_next, s.block, &mut self.scratch[o..o + n]);
        }
        c.end.map_or(0, |e| e as usize)
    }

    /// Copy `data` (non-empty) into a fresh chain of blocks; `None` if the
    /// arena has too few free blocks.
    fn alloc(&mut self, data: &[u8]) -> Option<u32> {
        let need = data.len().div_ceil(BLOCK_SIZE);
        if need == 0 || need > self.free_blocks {
            return None;
        }
        let head = self.free_block;
        let (mut b, mut last) = (head, head);
        for chunk in data.chunks(BLOCK_SIZE) {
            let at = b as usize * BLOCK_SIZE;
            self.arena[at..at + chunk.len()].copy_from_slice(chunk);
            last = b;
            b = self.block_next[b as usize];
        }
        self.block_next[last as usize] = NIL;
        self.free_block = b;
        self.free_blocks -= need;
        Some(head)
    }

    fn free_chain(&mut self, head: u32) {
        let (mut b, mut n) = (head, 1usize);
        while self.block_next[b as usize] != NIL {
            b = self.block_next[b as usize];
            n += 1;
        }
        self.block_next[b as usize] = self.free_block;
        self.free_block = head;
        self.free_blocks += n;
    }
}

/// Copy a chain's bytes into `dst` (exactly the fragment's length).
fn copy_chain(arena: &[u8], next: &[u32], head: u32, dst: &mut [u8]) {
    let mut b = head;
    for chunk in dst.chunks_mut(BLOCK_SIZE) {
        if b == NIL {
            return;
        }
        let at = b as usize * BLOCK_SIZE;
        chunk.copy_from_slice(&arena[at..at + chunk.len()]);
        b = next[b as usize];
    }
}
