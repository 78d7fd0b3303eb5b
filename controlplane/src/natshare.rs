//! Dynamic NAT in a cluster (SPEC N4; docs/nat.md, "Dynamic NAT in a
//! cluster"): the control node keeps the translation table and every
//! member holds a replica of it. Sans-IO, on top of [`Membership`]'s
//! replicated tables: the time, the members' requests and the machine go
//! in; table changes (which the machine broadcasts) come out.
//!
//! ```text
//!   member's worker: no translation for host H ──▶ Membership::request_xlate
//!        (its packet held until the answer: pending_held) │ XlateRequest over the CCL,
//!                                                         ▼ or Action::XlateRequest here
//!   control node:  NatShare::on_request ──▶ table_upsert(NAT_TABLE, pool|H, A)
//!                                                         │ TableUpdate to every member
//!   every member:  Action::Replica(Entry) ──▶ decode ──▶ the workers install H ↔ A
//! ```
//!
//! - **Allocation** (control node only): a pool's addresses in their
//!   configured order, the first one no entry of the pool maps to. A pool
//!   without a free address refuses (counted `exhausted`; the member keeps
//!   dropping and asking).
//! - **One translation per host and pool, cluster-wide**: an entry is
//!   keyed by (pool, real address); a request for a host that has one
//!   renews it, whatever member asks. The member that received the
//!   connection still owns it (the reference: "the data node still owns
//!   the connection"); the entry only names the addresses.
//! - **Lifetime**: members renew the translations they use (a connection
//!   holds them, or they were used within the xlate timeout) every third
//!   of the timeout (`held` names the address they hold). The control node
//!   deletes an entry not renewed within `timeout` (the idle timeout of
//!   N7, cluster-wide) — checked every `timeout / 8`. A control node that
//!   takes over starts every entry's clock at its first tick. A renewal of
//!   an entry that is gone puts it back when its address is still free
//!   (a renewal lost on the CCL must not cut a live translation); if the
//!   address went to another host meanwhile, the table's entry wins and
//!   the member ends the connections of its old one.
//! - **Bad input**: an unknown pool, a key or value of the wrong length
//!   (`decode`), a request when this node is not the control node: counted,
//!   nothing changes.
//!
//! Invariants (`tests`): no address is mapped to two hosts of one pool;
//! every entry maps a host to an address of its pool; an entry is deleted
//! only after `timeout` without a request or renewal for it.

use crate::membership::{Membership, State, TableError};
use dataplane::{Duration, Timestamp};
use std::collections::HashMap;
use std::net::Ipv4Addr;

/// The replicated table of dynamic-NAT translations.
pub const NAT_TABLE: u8 = 1;

/// One translation of the table.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SharedXlate {
    pub pool: u16,
    pub real: Ipv4Addr,
    pub mapped: Ipv4Addr,
}

/// An entry's key: pool (2, big-endian), real address (4).
pub fn key(pool: u16, real: Ipv4Addr) -> [u8; 6] {
    let mut k = [0u8; 6];
    k[..2].copy_from_slice(&pool.to_be_bytes());
    k[2..].copy_from_slice(&real.octets());
    k
}

/// An entry's key as (pool, real address); `None` for another length.
pub fn decode_key(key: &[u8]) -> Option<(u16, Ipv4Addr)> {
    let &[p0, p1, a, b, c, d] = key else { return None };
    Some((u16::from_be_bytes([p0, p1]), Ipv4Addr::new(a, b, c, d)))
}

/// An entry of [`NAT_TABLE`] (value: the mapped address, 4 bytes);
/// `None` for any other length.
pub fn decode(key: &[u8], value: &[u8]) -> Option<SharedXlate> {
    let ((pool, real), &[e, f, g, h]) = (decode_key(key)?, value) else { return None };
    Some(SharedXlate { pool, real, mapped: Ipv4Addr::new(e, f, g, h) })
}

/// What the share did (`show cluster`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NatShareCounters {
    /// Requests for a new translation handled here (control node).
    pub requests: u64,
    /// Translations made.
    pub allocated: u64,
    /// Renewals (and requests for a host that has a translation).
    pub renewals: u64,
    /// Renewals of a deleted entry that put it back.
    pub restored: u64,
    /// Requests refused: no free address in the pool.
    pub exhausted: u64,
    /// Requests for a pool that is not a dynamic-NAT pool here.
    pub unknown_pool: u64,
    /// Requests that reached this node when it could not change the table
    /// (not the control node, or catching up).
    pub not_control: u64,
    /// Entries deleted: not renewed within the timeout.
    pub expired: u64,
}

/// The control node's side (module essay); every member holds one, and
/// it acts only while its node is the control node.
#[derive(Clone, Debug)]
pub struct NatShare {
    /// Dynamic-NAT pools: (index in the configuration's pools, addresses).
    pools: Vec<(u16, Vec<Ipv4Addr>)>,
    timeout: Duration,
    /// When each entry was last asked for or renewed (control node only).
    renewed: HashMap<[u8; 6], Timestamp>,
    next_sweep: Timestamp,
    pub counters: NatShareCounters,
}

impl NatShare {
    pub fn new(pools: Vec<(u16, Vec<Ipv4Addr>)>, timeout: Duration) -> NatShare {
        NatShare {
            pools,
            timeout,
            renewed: HashMap::new(),
            next_sweep: Timestamp::ZERO,
            counters: NatShareCounters::default(),
        }
    }

    /// The pools and timeout of a new policy (the pools of a running node
    /// do not change, N6; its first policy brings them).
    pub fn set_pools(&mut self, pools: Vec<(u16, Vec<Ipv4Addr>)>, timeout: Duration) {
        self.pools = pools;
        self.timeout = timeout;
    }

    pub fn has_pools(&self) -> bool {
        !self.pools.is_empty()
    }

    /// A member (`from`, this node included) asks for the translation of
    /// `real` in `pool`, or renews the one it holds (`held`): on the
    /// control node, the table changes as the module essay says.
    pub fn on_request(
        &mut self,
        now: Timestamp,
        m: &mut Membership,
        pool: u16,
        real: Ipv4Addr,
        held: Option<Ipv4Addr>,
    ) {
        if m.state() != State::Control {
            self.counters.not_control += 1;
            return;
        }
        let Some(addrs) = self.pools.iter().find(|(p, _)| *p == pool).map(|(_, a)| a) else {
            self.counters.unknown_pool += 1;
            return;
        };
        let k = key(pool, real);
        if m.table_get(NAT_TABLE, &k).is_some() {
            self.renewed.insert(k, now);
            self.counters.renewals += 1;
            return;
        }
        let used: Vec<Ipv4Addr> = m
            .table_iter(NAT_TABLE)
            .filter_map(|(k, v, _)| decode(k, v))
            .filter(|x| x.pool == pool)
            .map(|x| x.mapped)
            .collect();
        // A renewal of an entry that is gone keeps its address if it can.
        let want = held.filter(|h| addrs.contains(h) && !used.contains(h));
        let Some(a) = want.or_else(|| addrs.iter().copied().find(|a| !used.contains(a))) else {
            self.counters.exhausted += 1;
            return;
        };
        match m.table_upsert(now, NAT_TABLE, &k, &a.octets()) {
            Ok(_) => {
                self.renewed.insert(k, now);
                if want.is_some() {
                    self.counters.restored += 1;
                } else {
                    self.counters.requests += 1;
                    self.counters.allocated += 1;
                }
            }
            Err(TableError::Full(_)) => self.counters.exhausted += 1,
            Err(_) => self.counters.not_control += 1,
        }
    }

    /// The control node's sweep: entries not renewed within the timeout
    /// are deleted. A node that is not the control node forgets its clocks
    /// (a control node that takes over starts them afresh).
    pub fn tick(&mut self, now: Timestamp, m: &mut Membership) {
        if m.state() != State::Control {
            self.renewed.clear();
            return;
        }
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now.saturating_add(Duration(self.timeout.0 / 8).max(Duration::from_millis(100)));
        let keys: Vec<[u8; 6]> = m.table_iter(NAT_TABLE).filter_map(|(k, _, _)| <[u8; 6]>::try_from(k).ok()).collect();
        self.renewed.retain(|k, _| keys.contains(k));
        for k in keys {
            let since = *self.renewed.entry(k).or_insert(now);
            if now.since(since) >= self.timeout && m.table_delete(now, NAT_TABLE, &k).is_ok() {
                self.renewed.remove(&k);
                self.counters.expired += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::tests_support::Mini;

    const A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
    const B: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 11);
    const H1: Ipv4Addr = Ipv4Addr::new(198, 18, 10, 1);
    const H2: Ipv4Addr = Ipv4Addr::new(198, 18, 10, 2);
    const H3: Ipv4Addr = Ipv4Addr::new(198, 18, 10, 3);

    /// A formed two-node cluster: node 0 the control node, node 1 a data
    /// node.
    fn cluster() -> Mini {
        let mut c = Mini::of(2);
        c.run(2000);
        assert_eq!(c.states(), vec![State::Control, State::Data]);
        c
    }

    fn share(timeout_ms: u64) -> NatShare {
        NatShare::new(vec![(2, vec![A, B])], Duration::from_millis(timeout_ms))
    }

    fn entries(m: &Membership) -> Vec<SharedXlate> {
        m.table_iter(NAT_TABLE).filter_map(|(k, v, _)| decode(k, v)).collect()
    }

    #[test]
    fn key_and_value_bytes() {
        assert_eq!(key(0x0102, H2), [1, 2, 198, 18, 10, 2]);
        assert_eq!(decode(&key(7, H1), &A.octets()), Some(SharedXlate { pool: 7, real: H1, mapped: A }));
        assert_eq!(decode(&key(7, H1)[..5], &A.octets()), None);
        assert_eq!(decode(&key(7, H1), &[1, 2, 3]), None);
    }

    #[test]
    fn one_address_per_host_first_free_first_and_exhaustion_refused() {
        let mut c = cluster();
        let (t, m) = (c.now, &mut c.ms[0]);
        let mut s = share(30_000);
        s.on_request(t, m, 2, H1, None);
        s.on_request(t, m, 2, H1, None);
        s.on_request(t, m, 2, H2, None);
        s.on_request(t, m, 2, H3, None);
        s.on_request(t, m, 9, H3, None);
        let want = vec![SharedXlate { pool: 2, real: H1, mapped: A }, SharedXlate { pool: 2, real: H2, mapped: B }];
        assert_eq!(entries(m), want);
        let c0 = s.counters;
        assert_eq!((c0.allocated, c0.renewals, c0.exhausted, c0.unknown_pool), (2, 1, 1, 1));
        // Every member holds the same table.
        c.run(100);
        assert_eq!(entries(&c.ms[1]), want);
    }

    #[test]
    fn unrenewed_entries_expire_renewed_ones_stay_and_a_lost_one_comes_back() {
        let mut c = cluster();
        let mut s = share(1_000);
        s.on_request(c.now, &mut c.ms[0], 2, H1, None);
        s.on_request(c.now, &mut c.ms[0], 2, H2, None);
        s.tick(c.now, &mut c.ms[0]);
        // H1 renewed every 300 ms, H2 never: it goes within 1.2 s.
        for _ in 0..6 {
            c.run(300);
            s.on_request(c.now, &mut c.ms[0], 2, H1, Some(A));
            s.tick(c.now, &mut c.ms[0]);
        }
        assert_eq!(entries(&c.ms[0]), vec![SharedXlate { pool: 2, real: H1, mapped: A }]);
        assert_eq!(s.counters.expired, 1);
        c.run(100);
        assert_eq!(entries(&c.ms[1]), entries(&c.ms[0]), "the deletion replicated");
        // H2's member still held B and renews it: B is free, it comes back.
        s.on_request(c.now, &mut c.ms[0], 2, H2, Some(B));
        assert!(entries(&c.ms[0]).contains(&SharedXlate { pool: 2, real: H2, mapped: B }));
        assert_eq!(s.counters.restored, 1);
        // A renewal naming an address another host has gets a free one.
        let mut c2 = cluster();
        let mut s2 = share(30_000);
        s2.on_request(c2.now, &mut c2.ms[0], 2, H1, None);
        s2.on_request(c2.now, &mut c2.ms[0], 2, H2, Some(A));
        assert_eq!(entries(&c2.ms[0])[1], SharedXlate { pool: 2, real: H2, mapped: B });
    }

    #[test]
    fn a_node_that_is_not_the_control_node_changes_nothing() {
        let mut c = cluster();
        let mut s = share(1_000);
        s.on_request(c.now, &mut c.ms[1], 2, H1, None);
        s.tick(c.now, &mut c.ms[1]);
        assert!(entries(&c.ms[1]).is_empty());
        assert_eq!(s.counters.not_control, 1);
        // Its machine sends its own requests to the control node.
        assert!(c.ms[1].request_xlate(c.now, 2, H1, None));
        let asked = std::iter::from_fn(|| c.ms[1].poll_action()).any(|a| {
            matches!(a, crate::membership::Action::Send { to, msg: crate::membership::Outgoing::XlateRequest(r), .. }
                if to == dataplane::NodeId(0) && r.real == H1 && r.pool == 2 && r.held.is_none())
        });
        assert!(asked);
    }

    /// Random requests and renewals against the invariants.
    #[test]
    fn no_address_is_mapped_twice() {
        let mut c = cluster();
        let pool: Vec<Ipv4Addr> = (0..8).map(|i| Ipv4Addr::new(192, 0, 2, 100 + i)).collect();
        let mut s = NatShare::new(vec![(0, pool.clone())], Duration::from_millis(400));
        let mut z: u64 = 0x9e37_79b9_7f4a_7c15;
        for step in 0..1_000u64 {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            if step % 4 == 0 {
                c.run(10);
            }
            let now = c.now;
            // A window of 12 hosts drifting over 24: the ones left behind
            // stop asking and expire.
            let host = Ipv4Addr::new(198, 18, 0, ((step / 50 + z % 12) % 24) as u8);
            let held = (z >> 8 & 3 == 0).then(|| pool[(z >> 12) as usize % pool.len()]);
            s.on_request(now, &mut c.ms[0], 0, host, held);
            s.tick(now, &mut c.ms[0]);
            let e = entries(&c.ms[0]);
            let mut mapped: Vec<Ipv4Addr> = e.iter().map(|x| x.mapped).collect();
            mapped.sort();
            mapped.dedup();
            assert_eq!(mapped.len(), e.len(), "an address mapped twice at step {step}: {e:?}");
            assert!(e.iter().all(|x| pool.contains(&x.mapped)));
        }
        assert!(s.counters.expired > 0 && s.counters.exhausted > 0, "{:?}", s.counters);
    }
}
