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
use std::net::Ipv4Addr;

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
pub struct ArpInfo {
    pub ip: Ipv4Addr,
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

pub struct ArpCache {
    map: HashMap<Ipv4Addr, Entry>,
    capacity: usize,
    timeout: Duration,
    retry: Duration,
    /// Bumped by every `&mut self` call (anything that may change an
    /// entry), so a caller can memoize a `fresh` answer (`generation`).
    generation: u64,
}

impl ArpCache {
    pub fn new(capacity: usize, timeout: Duration, retry: Duration) -> Self {
        ArpCache {
            map: HashMap::with_capacity(capacity.saturating_mul(2)),
            capacity,
            timeout,
            retry,
            generation: 0,
        }
    }
    pub fn len(&self) -> usize {
        self.map.len()
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
    pub fn fresh(&self, now: Timestamp, ip: Ipv4Addr) -> Option<([u8; 6], Timestamp)> {
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
    pub fn resolve(&mut self, now: Timestamp, ip: Ipv4Addr, iface: IfIndex) -> Resolve {
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
                Resolve::SendRequest
            }
            None => Resolve::Full,
        }
    }

    /// The MAC of `ip` if resolved and not expired (stale entries excluded).
    pub fn lookup(&self, now: Timestamp, ip: Ipv4Addr) -> Option<[u8; 6]> {
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
        ip: Ipv4Addr,
        mac: [u8; 6],
        iface: IfIndex,
        create: bool,
    ) -> bool {
        self.generation = self.generation.wrapping_add(1);
        let state = ArpState::Resolved {
            mac,
            expires: now.saturating_add(self.timeout),
        };
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
    /// Returns the number removed. Does not allocate.
    pub fn age(&mut self, now: Timestamp) -> usize {
        self.generation = self.generation.wrapping_add(1);
        let before = self.map.len();
        let window = self.stale_window();
        self.map.retain(|_, e| match e.state {
            ArpState::Resolved { expires, .. } => now < expires || now.since(expires) < window,
            ArpState::Stale { since, .. } | ArpState::Pending { since, .. } => {
                now.since(since) < window
            }
        });
        before - self.map.len()
    }

    /// All entries by address; `names[i]` names interface `IfIndex(i)`.
    pub fn entries(&self, now: Timestamp, names: &[String]) -> Vec<ArpInfo> {
        let name = |i: IfIndex| names.get(usize::from(i.0)).cloned().unwrap_or_default();
        let mut v: Vec<ArpInfo> = self
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
}
