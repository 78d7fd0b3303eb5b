//! The per-worker ARP cache (RFC 826 resolution for next hops).
//!
//! Each entry is either `Pending` (a request was sent at `last_request`; the
//! next one may go out `retry` later) or `Resolved` (a MAC, valid until
//! `expires`). The pipeline calls `resolve` for every forwarded packet's next
//! hop: a miss holds the packet (`arphold`) and asks for at most ONE
//! request per next hop per retry interval, so a burst towards an unresolved
//! host does not become a burst of ARP requests.
//!
//! Learning follows RFC 826 §"Packet Reception": a sender already in the
//! table is updated by any ARP packet; a new entry is created only when the
//! packet is addressed to one of our addresses (request or reply). The
//! pipeline additionally requires the sender to be inside the receiving
//! interface's subnet.
//!
//! Expiry without a drop: when a resolved entry expires it turns `Stale`
//! and keeps being used for `PENDING_RETRIES` retry intervals while a
//! unicast request (RFC 1122 §2.3.2.1 "unicast poll") goes to the known MAC
//! once per retry interval (`Resolve::Refresh`); a reply makes it resolved
//! again. A stale entry that is not confirmed in time is treated as a miss
//! (it turns pending, broadcast requests resume). `age` removes resolved
//! entries past their stale window and pending entries that stayed
//! unanswered for `PENDING_RETRIES` retry intervals.
//!
//! Invariants: at most `capacity` entries; the map is allocated at
//! construction with room for twice that, so inserts never reallocate
//! (hashbrown rehashes in place while at most half full); `resolve`,
//! `learn` and `lookup` never allocate.

use crate::route::IfIndex;
use crate::types::{Duration, Timestamp};
use hashbrown::HashMap;
use std::hash::Hash;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Unanswered retry intervals after which a pending entry is dropped.
pub const PENDING_RETRIES: u64 = 3;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ArpState {
    Pending {
        last_request: Timestamp,
        since: Timestamp,
    },
    Resolved {
        mac: [u8; 6],
        expires: Timestamp,
    },
    /// Expired at `since`, still used while being re-confirmed.
    Stale {
        mac: [u8; 6],
        since: Timestamp,
        last_request: Timestamp,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Entry {
    iface: IfIndex,
    state: ArpState,
}

/// Outcome of `resolve`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Resolve {
    Mac([u8; 6]),
    /// Usable but stale: forward, and send a unicast request to this MAC.
    Refresh([u8; 6]),
    /// Unresolved: the caller should send a request now.
    SendRequest,
    /// Unresolved, and a request went out less than `retry` ago.
    Wait,
    /// Unresolved, and the cache has no room for a pending entry.
    Full,
}

/// An entry as shown by `show arp`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ArpInfo<A = Ipv4Addr> {
    pub ip: A,
    /// `aa:bb:cc:dd:ee:ff`, or `None` while pending.
    pub mac: Option<String>,
    pub interface: String,
    pub state: &'static str,
    /// Milliseconds until a resolved entry expires (0 when pending).
    pub expires_in_ms: u64,
}

pub fn format_mac(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// The cache of one address family: ARP's (`ArpCache`) and IPv6
/// Neighbor Discovery's (`NdCache`, RFC 4861 §7.3: the same states —
/// INCOMPLETE is `Pending`, REACHABLE `Resolved`, STALE/PROBE `Stale`).
pub struct NeighborCache<A = Ipv4Addr> {
    map: HashMap<A, Entry>,
    capacity: usize,
    timeout: Duration,
    retry: Duration,
    /// Bumped by every `&mut self` call (anything that may change an
    /// entry), so a caller can memoize a `fresh` answer (`generation`).
    generation: u64,
    /// No entry can be removed before this (a lower bound on the earliest
    /// removal deadline): `age` returns at once until then, so an idle
    /// worker does not walk the map every timer tick.
    next_age: Timestamp,
}

/// The ARP cache.
pub type ArpCache = NeighborCache<Ipv4Addr>;
/// The IPv6 neighbour cache (issue 16).
pub type NdCache = NeighborCache<Ipv6Addr>;

impl<A: Copy + Eq + Hash + Ord> NeighborCache<A> {
    pub fn new(capacity: usize, timeout: Duration, retry: Duration) -> Self {
        NeighborCache {
            map: HashMap::with_capacity(capacity.saturating_mul(2)),
            capacity,
            timeout,
            retry,
            generation: 0,
            next_age: Timestamp(0),
        }
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// An empty cache of another address family with the same capacity,
    /// timeout and retry interval (the ND cache beside the ARP cache).
    pub fn same_settings<B: Copy + Eq + Hash + Ord>(&self) -> NeighborCache<B> {
        NeighborCache::new(self.capacity, self.timeout, self.retry)
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The MAC of a resolved entry that is unexpired at `now`, and when it
    /// expires (what `resolve` answers with `Resolve::Mac` and no change
    /// while `now < expires`); `None` for anything else.
    #[inline]
    pub fn fresh(&self, now: Timestamp, ip: A) -> Option<([u8; 6], Timestamp)> {
        match self.map.get(&ip)?.state {
            ArpState::Resolved { mac, expires } if now < expires => Some((mac, expires)),
            _ => None,
        }
    }

    /// Changes whenever an entry may have changed.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Find the MAC of `ip` for a packet leaving through `iface`.
    pub fn resolve(&mut self, now: Timestamp, ip: A, iface: IfIndex) -> Resolve {
        self.generation = self.generation.wrapping_add(1);
        let retry = self.retry;
        let window = self.stale_window();
        let room = self.map.len() < self.capacity;
        match self.map.get_mut(&ip) {
            Some(e) => match e.state {
                ArpState::Resolved { mac, expires } if now < expires => Resolve::Mac(mac),
                ArpState::Resolved { mac, expires } if now.since(expires) < window => {
                    e.state = ArpState::Stale {
                        mac,
                        since: expires,
                        last_request: now,
                    };
                    Resolve::Refresh(mac)
                }
                ArpState::Stale {
                    mac,
                    since,
                    last_request,
                } if now.since(since) < window => {
                    if now.since(last_request) >= retry {
                        e.state = ArpState::Stale {
                            mac,
                            since,
                            last_request: now,
                        };
                        Resolve::Refresh(mac)
                    } else {
                        Resolve::Mac(mac)
                    }
                }
                ArpState::Resolved { .. } | ArpState::Stale { .. } => {
                    e.iface = iface;
                    e.state = ArpState::Pending {
                        last_request: now,
                        since: now,
                    };
                    self.next_age = self.next_age.min(now.saturating_add(window));
                    Resolve::SendRequest
                }
                ArpState::Pending {
                    last_request,
                    since,
                } => {
                    if now.since(last_request) >= retry {
                        e.state = ArpState::Pending {
                            last_request: now,
                            since,
                        };
                        Resolve::SendRequest
                    } else {
                        Resolve::Wait
                    }
                }
            },
            None if room => {
                self.map.insert(
                    ip,
                    Entry {
                        iface,
                        state: ArpState::Pending {
                            last_request: now,
                            since: now,
                        },
                    },
                );
                self.next_age = self.next_age.min(now.saturating_add(window));
                Resolve::SendRequest
            }
            None => Resolve::Full,
        }
    }

    /// The MAC of `ip` if resolved and not expired (stale entries excluded).
    pub fn lookup(&self, now: Timestamp, ip: A) -> Option<[u8; 6]> {
        match self.map.get(&ip)?.state {
            ArpState::Resolved { mac, expires } if now < expires => Some(mac),
            _ => None,
        }
    }

    /// How long an unanswered next hop stays pending before `age` gives
    /// it up (`PENDING_RETRIES` retry intervals): as long as a frame held
    /// for it may wait (`arphold`).
    pub fn give_up_after(&self) -> Duration {
        self.stale_window()
    }

    /// How long an expired entry stays usable while being re-confirmed.
    fn stale_window(&self) -> Duration {
        Duration(self.retry.0.saturating_mul(PENDING_RETRIES))
    }

    /// Record `ip → mac` seen on `iface`. Updates an existing entry; creates
    /// one only when `create` (the ARP packet was addressed to us) and there
    /// is room. Returns whether the mapping is now stored.
    pub fn learn(
        &mut self,
        now: Timestamp,
        ip: A,
        mac: [u8; 6],
        iface: IfIndex,
        create: bool,
    ) -> bool {
        self.generation = self.generation.wrapping_add(1);
        let expires = now.saturating_add(self.timeout);
        let state = ArpState::Resolved { mac, expires };
        self.next_age = self.next_age.min(expires.saturating_add(self.stale_window()));
        if let Some(e) = self.map.get_mut(&ip) {
            *e = Entry { iface, state };
            return true;
        }
        if create && self.map.len() < self.capacity {
            self.map.insert(ip, Entry { iface, state });
            return true;
        }
        false
    }

    /// Remove expired resolved entries and long-unanswered pending ones.
    /// Returns the number removed. Does not allocate. Before the earliest
    /// removal deadline (`next_age`) it returns at once: a resolved entry
    /// goes `timeout` + the stale window after it was learnt, a stale or
    /// pending one the stale window after `since`, and every change of an
    /// entry only moves its deadline later (a new or re-requested entry
    /// lowers `next_age` to its own).
    pub fn age(&mut self, now: Timestamp) -> usize {
        if now < self.next_age {
            return 0;
        }
        let before = self.map.len();
        let window = self.stale_window();
        let mut next = Timestamp(u64::MAX);
        self.map.retain(|_, e| {
            let since = match e.state {
                ArpState::Resolved { expires, .. } => expires,
                ArpState::Stale { since, .. } | ArpState::Pending { since, .. } => since,
            };
            let keep = now < since || now.since(since) < window;
            if keep {
                next = next.min(since.saturating_add(window));
            }
            keep
        });
        self.next_age = next;
        let removed = before - self.map.len();
        if removed > 0 {
            self.generation = self.generation.wrapping_add(1);
        }
        removed
    }

    /// All entries by address; `names[i]` names interface `IfIndex(i)`.
    pub fn entries(&self, now: Timestamp, names: &[String]) -> Vec<ArpInfo<A>> {
        let name = |i: IfIndex| names.get(usize::from(i.0)).cloned().unwrap_or_default();
        let mut v: Vec<ArpInfo<A>> = self
            .map
            .iter()
            .map(|(&ip, e)| match e.state {
                ArpState::Resolved { mac, expires } => ArpInfo {
                    ip,
                    mac: Some(format_mac(mac)),
                    interface: name(e.iface),
                    state: if now < expires { "resolved" } else { "expired" },
                    expires_in_ms: expires.since(now).0 / 1_000_000,
                },
                ArpState::Stale { mac, .. } => ArpInfo {
                    ip,
                    mac: Some(format_mac(mac)),
                    interface: name(e.iface),
                    state: "stale",
                    expires_in_ms: 0,
                },
                ArpState::Pending { .. } => ArpInfo {
                    ip,
                    mac: None,
                    interface: name(e.iface),
                    state: "pending",
                    expires_in_ms: 0,
                },
            })
            .collect();
        v.sort_by_key(|e| e.ip);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn cache(cap: usize) -> ArpCache {
        ArpCache::new(cap, Duration::from_secs(300), Duration::from_secs(1))
    }

    #[test]
    fn one_request_per_retry_interval() {
        let mut c = cache(4);
        let t0 = Timestamp::from_secs(10);
        assert_eq!(c.resolve(t0, IP, IfIndex(0)), Resolve::SendRequest);
        assert_eq!(c.resolve(t0, IP, IfIndex(0)), Resolve::Wait);
        assert_eq!(
            c.resolve(Timestamp::from_millis(10_999), IP, IfIndex(0)),
            Resolve::Wait
        );
        assert_eq!(
            c.resolve(Timestamp::from_secs(11), IP, IfIndex(0)),
            Resolve::SendRequest
        );
        assert_eq!(c.entries(t0, &[])[0].state, "pending");
        assert!(c.learn(Timestamp::from_secs(12), IP, MAC, IfIndex(0), false));
        assert_eq!(
            c.resolve(Timestamp::from_secs(12), IP, IfIndex(0)),
            Resolve::Mac(MAC)
        );
        assert_eq!(c.lookup(Timestamp::from_secs(311), IP), Some(MAC));
        assert_eq!(c.lookup(Timestamp::from_secs(312), IP), None);
        // Expired at 312 s: stale, used while re-confirmed once per second.
        let ms = Timestamp::from_millis;
        assert_eq!(
            c.resolve(ms(312_000), IP, IfIndex(0)),
            Resolve::Refresh(MAC)
        );
        assert_eq!(c.resolve(ms(312_500), IP, IfIndex(0)), Resolve::Mac(MAC));
        assert_eq!(c.entries(ms(312_500), &[])[0].state, "stale");
        assert_eq!(
            c.resolve(ms(313_000), IP, IfIndex(0)),
            Resolve::Refresh(MAC)
        );
        assert_eq!(
            c.resolve(ms(314_999), IP, IfIndex(0)),
            Resolve::Refresh(MAC)
        );
        // Not confirmed within 3 retry intervals: a miss.
        assert_eq!(c.resolve(ms(315_000), IP, IfIndex(0)), Resolve::SendRequest);
        assert_eq!(c.resolve(ms(315_001), IP, IfIndex(0)), Resolve::Wait);
        // A reply while stale makes it resolved again.
        c.learn(ms(316_000), IP, MAC, IfIndex(0), false);
        c.resolve(ms(616_000), IP, IfIndex(0));
        c.learn(ms(616_100), IP, MAC, IfIndex(0), false);
        assert_eq!(c.resolve(ms(616_200), IP, IfIndex(0)), Resolve::Mac(MAC));
    }

    #[test]
    fn capacity_and_learning_rules() {
        let mut c = cache(1);
        assert!(!c.learn(Timestamp::ZERO, IP, MAC, IfIndex(0), false));
        assert!(c.learn(Timestamp::ZERO, IP, MAC, IfIndex(0), true));
        assert!(!c.learn(
            Timestamp::ZERO,
            Ipv4Addr::new(10, 0, 0, 2),
            MAC,
            IfIndex(0),
            true
        ));
        assert_eq!(
            c.resolve(Timestamp::ZERO, Ipv4Addr::new(10, 0, 0, 2), IfIndex(0)),
            Resolve::Full
        );
        let e = c.entries(Timestamp::ZERO, &["in".into()]);
        assert_eq!(e[0].mac.as_deref(), Some("02:00:00:00:00:01"));
        assert_eq!(e[0].expires_in_ms, 300_000);
        assert_eq!(e[0].interface, "in");
    }

    #[test]
    fn aging() {
        let mut c = cache(8);
        c.learn(Timestamp::ZERO, IP, MAC, IfIndex(0), true);
        c.resolve(Timestamp::ZERO, Ipv4Addr::new(10, 0, 0, 2), IfIndex(0));
        assert_eq!(c.age(Timestamp::from_secs(2)), 0);
        assert_eq!(c.age(Timestamp::from_secs(3)), 1);
        assert_eq!(c.age(Timestamp::from_secs(302)), 0); // stale window
        assert_eq!(c.age(Timestamp::from_secs(303)), 1);
        assert!(c.is_empty());
    }

    #[test]
    fn aging_waits_for_the_earliest_deadline_a_new_entry_lowers() {
        let mut c = cache(8);
        c.learn(Timestamp::ZERO, IP, MAC, IfIndex(0), true);
        assert_eq!(c.age(Timestamp::from_secs(10)), 0);
        assert_eq!(c.next_age, Timestamp::from_secs(303));
        let g = c.generation();
        assert_eq!(c.age(Timestamp::from_secs(11)), 0);
        assert_eq!(c.generation(), g, "an age with nothing due changes nothing");
        // A pending entry at 100 goes at 103, long before the resolved one.
        c.resolve(Timestamp::from_secs(100), Ipv4Addr::new(10, 0, 0, 2), IfIndex(0));
        assert_eq!(c.age(Timestamp::from_millis(102_999)), 0);
        assert_eq!(c.age(Timestamp::from_secs(103)), 1);
        assert_ne!(c.generation(), g);
        assert_eq!(c.len(), 1);
    }

    /// Skipping `age` until `next_age` removes the same entries at the
    /// same times as walking the map on every call.
    #[test]
    fn skipping_ages_like_walking_every_time() {
        let short = || ArpCache::new(6, Duration::from_secs(5), Duration::from_secs(1));
        let (mut fast, mut every) = (short(), short());
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut now = Timestamp::ZERO;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            now = now.saturating_add(Duration::from_millis(x % 700));
            let ip = Ipv4Addr::new(10, 0, 0, (x >> 8) as u8 % 9);
            let (port, create) = (IfIndex(0), x >> 20 & 1 == 1);
            match (x >> 16) % 4 {
                0 => assert_eq!(fast.resolve(now, ip, port), every.resolve(now, ip, port)),
                1 => assert_eq!(
                    fast.learn(now, ip, MAC, port, create),
                    every.learn(now, ip, MAC, port, create)
                ),
                _ => {
                    every.next_age = Timestamp::ZERO;
                    assert_eq!(fast.age(now), every.age(now), "at {now:?}");
                }
            }
            assert_eq!(fast.len(), every.len());
            assert_eq!(fast.lookup(now, ip), every.lookup(now, ip));
        }
    }
}
