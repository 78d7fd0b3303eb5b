//! One worker's translation table (SPEC N3, N7): which real endpoint is
//! mapped to which, found from either side.
//!
//! An xlate binds a real (address, port) to a mapped (address, port) for
//! one protocol class (TCP, UDP, ICMP identifiers; port 0 for dynamic NAT's
//! address-only xlates). Outbound packets find it by the real side, return
//! traffic by the mapped side: two indices over one slab.
//!
//! Lifecycle:
//! - **per-session** xlates (PAT's default for TCP and DNS) serve one
//!   connection: when its last connection lets go (`release` to refcount
//!   0) the xlate goes at once and its port is returned;
//! - **multi-session** xlates (other UDP, ICMP, dynamic NAT) are shared by
//!   every connection of the real endpoint; at refcount 0 they stay until
//!   idle beyond the xlate timeout. The reference's **stale** xlate — idle
//!   beyond the timeout with refcount 0 — is visible in `snapshot` until
//!   `expire` reaps it (bounded work per call), which hands the mapped
//!   port back to the caller to free in its allocator;
//! - **cluster** xlates (dynamic NAT on a cluster member, N4) are replicas
//!   of the control node's table: never removed here for idleness or at
//!   refcount 0, only when the table says (`take`).
//!
//! Invariants (`tests`): the two indices always name the same live slots
//! (no mapped endpoint bound twice, no real endpoint twice per class); a
//! removed xlate is in neither; `insert` when full is an error, counted,
//! never an eviction of a live xlate; nothing allocates after `new`
//! (slab, free list and indices sized at construction).

use super::alloc::PortClass;
use super::blocks::BlockRef;
use crate::{Duration, Timestamp};
use std::collections::HashMap;
use std::net::Ipv4Addr;

/// One side of an xlate: address and port (or echo identifier; 0 for an
/// address-only xlate).
pub type Endpoint = (Ipv4Addr, u16);

/// How an xlate ends (module essay).
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sessions {
    PerSession,
    MultiSession,
    /// A replica of the control node's dynamic-NAT table (N4).
    Cluster,
}

/// One binding.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Xlate {
    pub class: PortClass,
    pub real: Endpoint,
    pub mapped: Endpoint,
    pub sessions: Sessions,
    /// The PAT block the mapped port came from (`None`: static or dynamic
    /// NAT).
    pub block: Option<BlockRef>,
}

/// A slot number in the table.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct XlateId(pub u32);

#[derive(Copy, Clone, Debug)]
struct Slot {
    x: Xlate,
    refs: u32,
    created: Timestamp,
    last_used: Timestamp,
}

/// Why an xlate was not inserted.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InsertError {
    #[error("the xlate table is full")]
    Full,
    #[error("the real or the mapped endpoint is bound already")]
    Bound,
}

/// What `show xlate` prints of one xlate.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct XlateInfo {
    pub proto: &'static str,
    pub real: String,
    pub mapped: String,
    pub sessions: Sessions,
    pub refcnt: u32,
    pub idle_ms: u64,
    pub age_ms: u64,
    /// Idle beyond the timeout with no connection (the reference's stale
    /// xlate), not reaped yet.
    pub stale: bool,
}

/// Counters of one table.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct XlateCounters {
    pub created: u64,
    pub removed: u64,
    pub reaped: u64,
    pub full: u64,
    pub bound: u64,
}

/// One worker's xlates (module essay).
pub struct XlateTable {
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    by_real: HashMap<u64, u32, KeyHash>,
    by_mapped: HashMap<u64, u32, KeyHash>,
    timeout: Duration,
    cursor: usize,
    pub counters: XlateCounters,
}

/// (class, address, port) packed into one word: the index key.
#[inline(always)]
fn key(class: PortClass, e: Endpoint) -> u64 {
    (class as u64) << 48 | u64::from(u32::from(e.0)) << 16 | u64::from(e.1)
}

/// The indices' hash: one keyed multiply-fold of the packed key (as
/// conntrack's), seeded per table so that return traffic cannot aim at a
/// bucket; std's SipHash cost more than the rest of a lookup.
#[derive(Clone)]
pub struct KeyHash([u64; 2]);

impl KeyHash {
    fn random() -> KeyHash {
        use std::hash::BuildHasher as _;
        let rs = std::collections::hash_map::RandomState::new();
        KeyHash([rs.hash_one(1u8) | 1, rs.hash_one(2u8)])
    }
}

impl std::hash::BuildHasher for KeyHash {
    type Hasher = KeyHasher;
    #[inline(always)]
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher { seed: self.0, h: 0 }
    }
}

/// [`KeyHash`]'s hasher (only `write_u64` is used: the keys are `u64`).
pub struct KeyHasher {
    seed: [u64; 2],
    h: u64,
}

impl std::hash::Hasher for KeyHasher {
    #[inline(always)]
    fn finish(&self) -> u64 {
        self.h
    }
    #[inline(always)]
    fn write_u64(&mut self, x: u64) {
        let p = u128::from(x ^ self.seed[1] ^ self.h) * u128::from(self.seed[0]);
        self.h = (p as u64) ^ ((p >> 64) as u64);
    }
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
}

impl XlateTable {
    /// Room for `capacity` xlates; multi-session xlates idle beyond
    /// `timeout` with no connection are reaped.
    pub fn new(capacity: usize, timeout: Duration) -> Self {
        XlateTable {
            slots: vec![None; capacity],
            free: (0..capacity as u32).rev().collect(),
            by_real: HashMap::with_capacity_and_hasher(capacity, KeyHash::random()),
            by_mapped: HashMap::with_capacity_and_hasher(capacity, KeyHash::random()),
            timeout,
            cursor: 0,
            counters: XlateCounters::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.by_real.len()
    }
    pub fn is_empty(&self) -> bool {
        self.by_real.is_empty()
    }

    /// Bind `x` with one connection holding it.
    pub fn insert(&mut self, now: Timestamp, x: Xlate) -> Result<XlateId, InsertError> {
        let (kr, km) = (key(x.class, x.real), key(x.class, x.mapped));
        if self.by_real.contains_key(&kr) || self.by_mapped.contains_key(&km) {
            self.counters.bound += 1;
            return Err(InsertError::Bound);
        }
        let Some(i) = self.free.pop() else {
            self.counters.full += 1;
            return Err(InsertError::Full);
        };
        self.slots[i as usize] = Some(Slot { x, refs: 1, created: now, last_used: now });
        self.by_real.insert(kr, i);
        self.by_mapped.insert(km, i);
        self.counters.created += 1;
        Ok(XlateId(i))
    }

    /// The xlate of a real endpoint (outbound).
    #[inline]
    pub fn by_real(&self, class: PortClass, real: Endpoint) -> Option<XlateId> {
        self.by_real.get(&key(class, real)).map(|&i| XlateId(i))
    }

    /// The xlate of a mapped endpoint (return traffic).
    #[inline]
    pub fn by_mapped(&self, class: PortClass, mapped: Endpoint) -> Option<XlateId> {
        self.by_mapped.get(&key(class, mapped)).map(|&i| XlateId(i))
    }

    /// Start loading xlate `id` (a burst's prefetch: its flow's mark).
    #[inline]
    pub fn prefetch(&self, id: XlateId) {
        if let Some(s) = self.slots.get(id.0 as usize) {
            crate::prefetch::prefetch(s);
        }
    }

    #[inline]
    pub fn get(&self, id: XlateId) -> Option<&Xlate> {
        self.slot(id).map(|s| &s.x)
    }

    fn slot(&self, id: XlateId) -> Option<&Slot> {
        self.slots.get(id.0 as usize)?.as_ref()
    }

    /// Connections holding `id`.
    pub fn refs(&self, id: XlateId) -> u32 {
        self.slot(id).map_or(0, |s| s.refs)
    }

    /// One more connection uses `id` (a multi-session xlate reused).
    pub fn acquire(&mut self, now: Timestamp, id: XlateId) -> bool {
        let Some(Some(s)) = self.slots.get_mut(id.0 as usize) else { return false };
        s.refs = s.refs.saturating_add(1);
        s.last_used = now;
        true
    }

    /// A packet used `id`.
    #[inline]
    pub fn touch(&mut self, now: Timestamp, id: XlateId) {
        if let Some(Some(s)) = self.slots.get_mut(id.0 as usize) {
            s.last_used = now;
        }
    }

    /// A connection using `id` ended. A per-session xlate left without
    /// connections is removed at once and returned (its port is the
    /// caller's to free); a multi-session one waits for `expire`.
    pub fn release(&mut self, now: Timestamp, id: XlateId) -> Option<Xlate> {
        let Some(Some(s)) = self.slots.get_mut(id.0 as usize) else { return None };
        s.refs = s.refs.saturating_sub(1);
        s.last_used = now;
        if s.refs == 0 && s.x.sessions == Sessions::PerSession {
            self.counters.removed += 1;
            return self.remove(id);
        }
        None
    }

    fn remove(&mut self, id: XlateId) -> Option<Xlate> {
        let s = self.slots.get_mut(id.0 as usize)?.take()?;
        self.by_real.remove(&key(s.x.class, s.x.real));
        self.by_mapped.remove(&key(s.x.class, s.x.mapped));
        self.free.push(id.0);
        Some(s.x)
    }

    /// Remove every xlate `doomed` says so, whatever its references (its
    /// connections were removed, or are about to be: a block handed back
    /// to its holder); each goes to `removed` (to free its port). A walk
    /// of the table: off the packet path.
    pub fn remove_where(&mut self, mut doomed: impl FnMut(&Xlate) -> bool, mut removed: impl FnMut(Xlate)) -> usize {
        let ids: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&i| self.slots[i as usize].as_ref().is_some_and(|s| doomed(&s.x)))
            .collect();
        for &i in &ids {
            if let Some(x) = self.remove(XlateId(i)) {
                self.counters.removed += 1;
                removed(x);
            }
        }
        ids.len()
    }

    fn is_stale(&self, s: &Slot, now: Timestamp) -> bool {
        s.refs == 0 && now.since(s.last_used) >= self.timeout && s.x.sessions != Sessions::Cluster
    }

    /// Remove `id` whatever its references (a cluster xlate the control
    /// node's table no longer has; the caller ends its connections).
    pub fn take(&mut self, id: XlateId) -> Option<Xlate> {
        let x = self.remove(id)?;
        self.counters.removed += 1;
        Some(x)
    }

    /// Every live xlate with its references and when it was last used
    /// (off the packet path).
    pub fn each(&self, mut f: impl FnMut(XlateId, &Xlate, u32, Timestamp)) {
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(s) = s {
                f(XlateId(i as u32), &s.x, s.refs, s.last_used);
            }
        }
    }

    /// Reap stale xlates, inspecting at most `budget` slots from where the
    /// last call stopped; each reaped xlate goes to `reaped` (to free its
    /// port). Returns how many were reaped.
    pub fn expire(&mut self, now: Timestamp, budget: usize, mut reaped: impl FnMut(Xlate)) -> usize {
        let cap = self.slots.len();
        if cap == 0 || self.by_real.is_empty() {
            return 0;
        }
        let mut n = 0;
        for _ in 0..budget.min(cap) {
            let i = self.cursor % cap;
            self.cursor = (i + 1) % cap;
            let stale = self.slots[i].as_ref().is_some_and(|s| self.is_stale(s, now));
            if stale {
                if let Some(x) = self.remove(XlateId(i as u32)) {
                    reaped(x);
                    n += 1;
                }
            }
        }
        self.counters.reaped += n as u64;
        n
    }

    /// Up to `max` xlates as `show xlate` lists them (off the packet path).
    pub fn snapshot(&self, now: Timestamp, max: usize) -> Vec<XlateInfo> {
        let ep = |(a, p): Endpoint| if p == 0 { a.to_string() } else { format!("{a}:{p}") };
        self.slots
            .iter()
            .flatten()
            .take(max)
            .map(|s| XlateInfo {
                proto: match s.x.class {
                    PortClass::Tcp => "tcp",
                    PortClass::Udp => "udp",
                    PortClass::Icmp => "icmp",
                },
                real: ep(s.x.real),
                mapped: ep(s.x.mapped),
                sessions: s.x.sessions,
                refcnt: s.refs,
                idle_ms: now.since(s.last_used).0 / 1_000_000,
                age_ms: now.since(s.created).0 / 1_000_000,
                stale: self.is_stale(s, now),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    const M: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);

    fn x(class: PortClass, rp: u16, mp: u16, sessions: Sessions) -> Xlate {
        Xlate { class, real: (R, rp), mapped: (M, mp), sessions, block: None }
    }

    fn secs(s: u64) -> Timestamp {
        Timestamp::from_secs(s)
    }

    #[test]
    fn found_from_both_sides_and_never_bound_twice() {
        let mut t = XlateTable::new(4, Duration::from_secs(30));
        let id = t.insert(secs(0), x(PortClass::Tcp, 40000, 1030, Sessions::PerSession)).unwrap();
        assert_eq!(t.by_real(PortClass::Tcp, (R, 40000)), Some(id));
        assert_eq!(t.by_mapped(PortClass::Tcp, (M, 1030)), Some(id));
        assert_eq!(t.by_mapped(PortClass::Udp, (M, 1030)), None, "classes are separate");
        assert_eq!(t.insert(secs(0), x(PortClass::Tcp, 40001, 1030, Sessions::PerSession)), Err(InsertError::Bound));
        assert_eq!(t.insert(secs(0), x(PortClass::Tcp, 40000, 1031, Sessions::PerSession)), Err(InsertError::Bound));
        assert!(t.insert(secs(0), x(PortClass::Udp, 40000, 1030, Sessions::MultiSession)).is_ok());
        assert_eq!(t.counters.bound, 2);
    }

    #[test]
    fn per_session_goes_with_its_connection_multi_session_waits() {
        let mut t = XlateTable::new(4, Duration::from_secs(30));
        let p = t.insert(secs(0), x(PortClass::Tcp, 40000, 1030, Sessions::PerSession)).unwrap();
        let m = t.insert(secs(0), x(PortClass::Udp, 5000, 1030, Sessions::MultiSession)).unwrap();
        assert!(t.acquire(secs(1), m));
        assert_eq!(t.refs(m), 2);
        assert_eq!(t.release(secs(2), p).map(|x| x.mapped), Some((M, 1030)), "removed, port returned");
        assert_eq!(t.by_mapped(PortClass::Tcp, (M, 1030)), None);
        assert_eq!(t.release(secs(3), m), None);
        assert_eq!(t.release(secs(4), m), None, "multi-session stays at refcount 0");
        // Stale from 34 s: visible, then reaped.
        let snap = t.snapshot(secs(33), 10);
        assert_eq!((snap.len(), snap[0].stale), (1, false));
        let snap = t.snapshot(secs(35), 10);
        assert_eq!((snap[0].refcnt, snap[0].idle_ms, snap[0].stale), (0, 31_000, true));
        assert_eq!(snap[0].mapped, "198.51.100.7:1030");
        let mut got = Vec::new();
        assert_eq!(t.expire(secs(35), 16, |x| got.push(x.mapped)), 1);
        assert_eq!(got, [(M, 1030)]);
        assert!(t.is_empty());
        assert_eq!(t.counters.reaped, 1);
    }

    #[test]
    fn in_use_xlates_are_never_reaped_and_full_is_an_error() {
        let mut t = XlateTable::new(2, Duration::from_secs(1));
        let a = t.insert(secs(0), x(PortClass::Icmp, 7, 1024, Sessions::MultiSession)).unwrap();
        t.insert(secs(0), x(PortClass::Icmp, 8, 1025, Sessions::MultiSession)).unwrap();
        assert_eq!(t.insert(secs(0), x(PortClass::Icmp, 9, 1026, Sessions::MultiSession)), Err(InsertError::Full));
        assert_eq!(t.expire(secs(100), 8, |_| {}), 0, "both held by a connection");
        t.release(secs(100), a);
        assert_eq!(t.expire(secs(100), 8, |_| {}), 0, "idle 0 s");
        assert_eq!(t.expire(secs(101), 8, |_| {}), 1);
        assert!(t.insert(secs(101), x(PortClass::Icmp, 9, 1026, Sessions::MultiSession)).is_ok(), "the slot is reused");
    }

    /// Random inserts, acquires, releases and reaps against a model: the
    /// indices always agree with the live slots.
    #[test]
    fn indices_agree_with_the_slots() {
        let mut t = XlateTable::new(64, Duration::from_secs(5));
        let mut model: HashMap<u32, (Xlate, u32)> = HashMap::new();
        let mut z = 0x0123_4567_89ab_cdefu64;
        let mut now = Timestamp::ZERO;
        for _ in 0..20_000 {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            now = now.saturating_add(Duration::from_millis(z % 300));
            let class = [PortClass::Tcp, PortClass::Udp, PortClass::Icmp][(z >> 8) as usize % 3];
            let sessions = if z >> 12 & 1 == 0 { Sessions::PerSession } else { Sessions::MultiSession };
            let ids: Vec<u32> = model.keys().copied().collect();
            match (z >> 16) % 4 {
                0 | 1 => {
                    let xl = x(class, (z >> 20) as u16 % 80, (z >> 40) as u16 % 80 + 1024, sessions);
                    if let Ok(id) = t.insert(now, xl) {
                        model.insert(id.0, (xl, 1));
                    }
                }
                2 if !ids.is_empty() => {
                    let id = ids[(z >> 24) as usize % ids.len()];
                    let gone = t.release(now, XlateId(id));
                    let e = model.get_mut(&id).unwrap();
                    e.1 = e.1.saturating_sub(1);
                    if gone.is_some() {
                        assert_eq!(gone, Some(e.0));
                        model.remove(&id);
                    }
                }
                3 if !ids.is_empty() => {
                    let id = ids[(z >> 24) as usize % ids.len()];
                    t.acquire(now, XlateId(id));
                    model.get_mut(&id).unwrap().1 += 1;
                }
                _ => {
                    t.expire(now, 16, |x| {
                        let id = model.iter().find(|(_, (m, _))| *m == x).map(|(&i, _)| i).unwrap();
                        assert_eq!(model[&id].1, 0, "reaped with connections");
                        model.remove(&id);
                    });
                }
            }
            assert_eq!(t.len(), model.len());
            for (&id, (xl, refs)) in &model {
                assert_eq!(t.by_real(xl.class, xl.real), Some(XlateId(id)));
                assert_eq!(t.by_mapped(xl.class, xl.mapped), Some(XlateId(id)));
                assert_eq!(t.refs(XlateId(id)), *refs);
            }
        }
    }
}
