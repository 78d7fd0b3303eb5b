//! Connection limits (SPEC L1; docs/flood.md, "Connection limits"): at most
//! so many connections, embryonic connections, connections per client and
//! embryonic connections per client — globally and per permit rule — held
//! **cluster-wide by estimate**, as the reference describes: "each node has
//! an estimate of the cluster-wide counter values based on broadcast
//! messages … each node may overestimate or underestimate the cluster-wide
//! counter value at any given time".
//!
//! This module is the worker's half. It counts the worker's own flows
//! exactly (every flow the table holds is counted in the classes it was
//! admitted under; `ConnTable` keeps the tag in the slot) and holds the
//! rest of the cluster as a number the control lcore sets
//! ([`Limits::set_remote`]: the other workers of this node and the other
//! members, from their last reports). A new flow is refused when
//! `local + remote` has reached a limit of a class it falls in.
//!
//! ```text
//!   new flow admitted by rule R ──▶ check(global, R; client = initiator)
//!        refused: conn-limit | embryonic-limit | client-limit | client-embryonic-limit
//!        admitted: counted in each class that has limits ──▶ tag in the slot
//!   handshake completes (TCP leaves SYN-SENT/SYN-RECEIVED) ──▶ embryonic −1
//!   flow leaves the table (any way)                        ──▶ conns −1 (embryonic −1)
//! ```
//!
//! - **Classes.** Class 0 is the global `limits`; class k ≥ 1 is the k-th
//!   permit rule that has limits (`rule_class` maps an ACL rule index to
//!   it). A class is identified across nodes by [`class_id`] (a hash of
//!   the rule's name; 0 for global), since members may briefly run
//!   different policy generations.
//! - **Embryonic** means a TCP connection whose handshake has not
//!   completed (the reference's half-open connection); UDP and ICMP flows
//!   count as connections only.
//! - **Clients** are a connection's initiating address. Per-client counts
//!   are kept only for classes with a per-client limit, in a bounded
//!   open-addressing table (one entry per client and class; full: the
//!   connection is admitted uncounted per client, counted
//!   `clients_untracked`).
//! - **Flows installed** from another node's state (a failover) are counted
//!   in the global class (their rule is not carried).
//!
//! Invariants (`conntrack::tests`, `limits` tests): for every class the
//! local counts equal the table's live flows tagged with it (embryonic:
//! those still embryonic), and the client table holds exactly the clients
//! with a nonzero count; nothing here allocates after [`Limits::new`]
//! except `report` and `set_remote` (the worker's timer, between bursts).

use std::net::IpAddr;

/// One class's limits (`None`: no limit).
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LimitSet {
    pub max_conns: Option<u32>,
    pub max_embryonic: Option<u32>,
    pub per_client_max: Option<u32>,
    pub per_client_embryonic_max: Option<u32>,
    /// A SYN over `max_embryonic` is answered by the SYN proxy (a cookie
    /// SYN-ACK, `synproxy`) instead of refused. On by default.
    pub syn_proxy: bool,
}

impl Default for LimitSet {
    fn default() -> Self {
        LimitSet { max_conns: None, max_embryonic: None, per_client_max: None, per_client_embryonic_max: None, syn_proxy: true }
    }
}

impl LimitSet {
    /// No limit set (`syn_proxy` alone limits nothing).
    pub fn is_empty(&self) -> bool {
        LimitSet { syn_proxy: true, ..*self } == LimitSet::default()
    }
    fn per_client(&self) -> bool {
        self.per_client_max.is_some() || self.per_client_embryonic_max.is_some()
    }
}

/// The limits a pipeline runs: global, and by access-rule name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimitSpec {
    pub global: LimitSet,
    pub rules: Vec<(String, LimitSet)>,
}

impl LimitSpec {
    pub fn is_empty(&self) -> bool {
        self.global.is_empty() && self.rules.iter().all(|(_, l)| l.is_empty())
    }
}

/// Connections and embryonic connections.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Count {
    pub conns: u32,
    pub embryonic: u32,
}

impl Count {
    pub fn add(self, o: Count) -> Count {
        Count { conns: self.conns.saturating_add(o.conns), embryonic: self.embryonic.saturating_add(o.embryonic) }
    }
}

/// What refused a new flow.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Hit {
    Conns = 0,
    Embryonic = 1,
    Client = 2,
    ClientEmbryonic = 3,
}

impl Hit {
    pub const ALL: [Hit; 4] = [Hit::Conns, Hit::Embryonic, Hit::Client, Hit::ClientEmbryonic];
    pub fn as_str(self) -> &'static str {
        match self {
            Hit::Conns => "max-conns",
            Hit::Embryonic => "max-embryonic",
            Hit::Client => "per-client-max",
            Hit::ClientEmbryonic => "per-client-embryonic-max",
        }
    }
    pub fn drop_reason(self) -> crate::types::DropReason {
        use crate::types::DropReason;
        match self {
            Hit::Conns => DropReason::ConnLimit,
            Hit::Embryonic => DropReason::EmbryonicLimit,
            Hit::Client => DropReason::ClientLimit,
            Hit::ClientEmbryonic => DropReason::ClientEmbryonicLimit,
        }
    }
}

/// Why `Limits::admit` did not admit a new flow.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Refused by this limit (counted).
    Hit(Hit),
    /// A SYN over `max_embryonic` where the SYN proxy answers instead.
    Proxy,
}

impl Refusal {
    pub fn drop_reason(self) -> crate::types::DropReason {
        match self {
            Refusal::Hit(h) => h.drop_reason(),
            Refusal::Proxy => crate::types::DropReason::SynProxyCookie,
        }
    }
}

/// A class's identity across nodes: 0 for the global limits, else a
/// (nonzero) FNV-1a hash of the rule's name.
pub fn class_id(rule: Option<&str>) -> u32 {
    let Some(name) = rule else { return 0 };
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h.max(1)
}

/// A flow's tag in its slot (`u16`): the rule class in the low 11 bits,
/// and which counts hold it.
pub(crate) mod tag {
    pub const CLASS_MASK: u16 = 0x07ff;
    /// Counted in class 0.
    pub const GLOBAL: u16 = 1 << 11;
    /// Counted in its rule class.
    pub const RULE: u16 = 1 << 12;
    /// Counted per client in class 0.
    pub const GLOBAL_CLIENT: u16 = 1 << 13;
    /// Counted per client in its rule class.
    pub const RULE_CLIENT: u16 = 1 << 14;
    /// Counted as embryonic wherever it is counted.
    pub const EMBRYONIC: u16 = 1 << 15;
}

/// Most limited rules (the tag's class bits).
pub const MAX_CLASSES: usize = tag::CLASS_MASK as usize;

/// A client's address as a table key (IPv4 as its v4-mapped IPv6 value).
fn addr_key(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The address of a key.
pub fn key_addr(k: u128) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(k);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
struct ClientEntry {
    addr: u128,
    /// Class + 1 (0: free).
    class: u16,
    count: Count,
    /// Admissions (connections, embryonic) in view interval `epoch` and
    /// in the one before it.
    since: Count,
    since_prev: Count,
    epoch: u32,
}

/// Per (class, client) counts: linear probing, deletion by backward shift
/// (no tombstones), at most half full.
#[derive(Clone, Debug)]
pub struct ClientTable {
    slots: Vec<ClientEntry>,
    len: usize,
    max: usize,
    seed: u64,
}

impl ClientTable {
    /// Room for `max` entries (none: a table that holds nothing).
    pub fn new(max: usize) -> ClientTable {
        let n = if max == 0 { 0 } else { (max * 2).next_power_of_two() };
        ClientTable { slots: vec![ClientEntry::default(); n], len: 0, max, seed: random_seed() }
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn home(&self, class: u16, addr: u128) -> usize {
        let x = (addr as u64) ^ ((addr >> 64) as u64).rotate_left(23) ^ (u64::from(class) << 48) ^ self.seed;
        let p = u128::from(x) * 0x9E37_79B9_7F4A_7C15u128;
        (((p as u64) ^ ((p >> 64) as u64)) as usize) & (self.slots.len() - 1)
    }

    fn find(&self, class: u16, addr: u128) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(class, addr);
        loop {
            let e = self.slots.get(i)?;
            if e.class == 0 {
                return None;
            }
            if e.class == class + 1 && e.addr == addr {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The count of `(class, addr)` (zero when absent).
    pub fn get(&self, class: u16, addr: u128) -> Count {
        self.find(class, addr).and_then(|i| self.slots.get(i)).map(|e| e.count).unwrap_or_default()
    }

    /// Add `d` to `(class, addr)`'s count, inserting it. `false`: the table
    /// is full (nothing changed).
    pub fn add(&mut self, class: u16, addr: u128, d: Count) -> bool {
        if let Some(i) = self.find(class, addr) {
            if let Some(e) = self.slots.get_mut(i) {
                e.count = e.count.add(d);
            }
            return true;
        }
        if self.len >= self.max || self.slots.is_empty() {
            return false;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(class, addr);
        while self.slots.get(i).is_some_and(|e| e.class != 0) {
            i = (i + 1) & mask;
        }
        if let Some(e) = self.slots.get_mut(i) {
            *e = ClientEntry { addr, class: class + 1, count: d, ..ClientEntry::default() };
            self.len += 1;
        }
        true
    }

    /// Admissions of `(class, addr)` in intervals `epoch` and `epoch − 1`.
    pub fn since(&self, class: u16, addr: u128, epoch: u32) -> Count {
        match self.find(class, addr).and_then(|i| self.slots.get(i)) {
            Some(e) if e.epoch == epoch => e.since.add(e.since_prev),
            Some(e) if e.epoch.wrapping_add(1) == epoch => e.since,
            _ => Count::default(),
        }
    }

    /// Count an admission of `(class, addr)` in interval `epoch` (the
    /// entry exists: `add` came first).
    pub fn admitted(&mut self, class: u16, addr: u128, epoch: u32, d: Count) {
        let Some(e) = self.find(class, addr).and_then(|i| self.slots.get_mut(i)) else { return };
        if e.epoch != epoch {
            let prev = if e.epoch.wrapping_add(1) == epoch { e.since } else { Count::default() };
            (e.epoch, e.since, e.since_prev) = (epoch, Count::default(), prev);
        }
        e.since = e.since.add(d);
    }

    /// Take `d` from `(class, addr)`'s count; an entry that reaches zero
    /// leaves the table.
    pub fn sub(&mut self, class: u16, addr: u128, d: Count) {
        let Some(i) = self.find(class, addr) else { return };
        let Some(e) = self.slots.get_mut(i) else { return };
        e.count.conns = e.count.conns.saturating_sub(d.conns);
        e.count.embryonic = e.count.embryonic.saturating_sub(d.embryonic);
        if e.count.conns == 0 && e.count.embryonic == 0 {
            self.remove_at(i);
        }
    }

    /// Backward-shift deletion: later entries of the run move up into the
    /// hole when their home allows it.
    fn remove_at(&mut self, mut hole: usize) {
        let mask = self.slots.len() - 1;
        if let Some(e) = self.slots.get_mut(hole) {
            *e = ClientEntry::default();
        }
        self.len = self.len.saturating_sub(1);
        let mut j = (hole + 1) & mask;
        while let Some(e) = self.slots.get(j).copied().filter(|e| e.class != 0) {
            let home = self.home(e.class - 1, e.addr);
            // Move `e` into the hole unless its home lies cyclically in (hole, j].
            let dist_home = j.wrapping_sub(home) & mask;
            let dist_hole = j.wrapping_sub(hole) & mask;
            if dist_home >= dist_hole {
                if let Some(h) = self.slots.get_mut(hole) {
                    *h = e;
                }
                if let Some(x) = self.slots.get_mut(j) {
                    *x = ClientEntry::default();
                }
                hole = j;
            }
            j = (j + 1) & mask;
        }
    }

    /// Every entry: (class, address key, count).
    pub fn iter(&self) -> impl Iterator<Item = (u16, u128, Count)> + '_ {
        self.slots.iter().filter(|e| e.class != 0).map(|e| (e.class - 1, e.addr, e.count))
    }

    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|e| *e = ClientEntry::default());
        self.len = 0;
    }
}

fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
}

/// What the rest of the cluster holds, as this worker's control lcore
/// last told it ([`Limits::set_remote`]): per class (in this worker's
/// class order), and per (class, client) for the busiest clients.
#[derive(Clone, Debug, Default)]
pub struct Remote {
    pub classes: Vec<Count>,
    pub clients: Vec<(u16, IpAddr, Count)>,
    /// Places admitting connections against the same limits, this worker
    /// included (workers × members reporting; 0 or 1: only this one).
    /// Between two views a worker admits at most its share of what was
    /// left under a limit (see `Limits::check`).
    pub places: u32,
}

/// One worker's report for its control lcore: its classes (id, count)
/// in order, its busiest clients (class id, address, count), and each
/// class's refusals so far by limit (`Hit` order; for the limit events).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimitReport {
    pub classes: Vec<(u32, Count)>,
    pub clients: Vec<(u32, IpAddr, Count)>,
    pub refused: Vec<(u32, [u64; 4])>,
}

/// One class as `show limits` lists it (local to the worker; the control
/// lcore adds the workers and the estimate).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ClassInfo {
    /// "global" or the rule's name.
    pub name: String,
    pub id: u32,
    pub limits: LimitSet,
    pub local: Count,
    /// The rest of the cluster as this worker last heard it.
    pub remote: Count,
    /// Connections refused, by the limit that refused them
    /// (max-conns, max-embryonic, per-client-max, per-client-embryonic-max).
    pub refused: [u64; 4],
    /// SYN proxy: cookie SYN-ACKs sent, connections opened to the server.
    pub syn_proxy: [u64; 2],
}

/// `places` before the first view of the rest of the cluster (at start,
/// after a policy change; the control lcore sends one every report
/// interval): as many as a cluster can have, so that a worker that does
/// not know yet how many share a limit takes only 1/16 of its room.
pub const UNKNOWN_PLACES: u32 = 16;

/// Clients a report carries at most (the busiest by share of their limit).
pub const REPORT_CLIENTS: usize = 256;

/// A worker's connection limits. See the module documentation.
#[derive(Clone, Debug)]
pub struct Limits {
    sets: Vec<LimitSet>,
    names: Vec<String>,
    ids: Vec<u32>,
    /// ACL rule index → class (0: the rule has no limits).
    rule_class: Vec<u16>,
    local: Vec<Count>,
    remote: Vec<Count>,
    refused: Vec<[u64; 4]>,
    /// SYN proxy per class: cookie SYN-ACKs sent for SYNs over
    /// `max_embryonic`, and connections opened to the server for a client
    /// ACK that returned a valid cookie.
    proxied: Vec<[u64; 2]>,
    clients: ClientTable,
    remote_clients: ClientTable,
    /// Connections admitted without a per-client count (client table full).
    pub clients_untracked: u64,
    /// `Remote::places` of the last view, its number (`set_remote` calls),
    /// and the admissions per class in this view's interval and the one
    /// before (`since`, `since_prev`).
    places: u32,
    epoch: u32,
    since: Vec<Count>,
    since_prev: Vec<Count>,
}

impl Limits {
    /// Limits `spec` over the ACL rules named `rules` (in ACL order; a
    /// limited rule the ACL does not have is ignored), with a client table
    /// for up to `max_clients` (the flow capacity) when a class has a
    /// per-client limit.
    pub fn new(spec: &LimitSpec, rules: &[String], max_clients: usize) -> Limits {
        let mut sets = vec![spec.global];
        let mut names = vec!["global".to_string()];
        let mut ids = vec![0];
        let mut rule_class = vec![0u16; rules.len()];
        for (i, r) in rules.iter().enumerate() {
            let Some((_, set)) = spec.rules.iter().find(|(n, s)| n == r && !s.is_empty()) else { continue };
            if sets.len() > MAX_CLASSES {
                break;
            }
            if let Some(c) = rule_class.get_mut(i) {
                *c = sets.len() as u16;
            }
            sets.push(*set);
            names.push(r.clone());
            ids.push(class_id(Some(r)));
        }
        let per_client = sets.iter().any(LimitSet::per_client);
        let n = sets.len();
        Limits {
            sets,
            names,
            ids,
            rule_class,
            local: vec![Count::default(); n],
            remote: vec![Count::default(); n],
            refused: vec![[0; 4]; n],
            proxied: vec![[0; 2]; n],
            clients: ClientTable::new(if per_client { max_clients } else { 0 }),
            remote_clients: ClientTable::new(if per_client { REPORT_CLIENTS * 4 } else { 0 }),
            clients_untracked: 0,
            places: UNKNOWN_PLACES,
            epoch: 0,
            since: vec![Count::default(); n],
            since_prev: vec![Count::default(); n],
        }
    }

    /// Check a new flow admitted by ACL rule `rule` (`None`: the default
    /// rule, or a flow installed from another node) from `client`
    /// (embryonic: a TCP SYN) against local + remote counts; count it
    /// and return its slot tag, or the limit it hits (counted).
    ///
    /// `proxied`: a connection the SYN proxy opens for a client that
    /// returned a valid cookie — `max_embryonic` does not refuse it (the
    /// client is real; the other limits do), it is counted as usual.
    /// A SYN that `max_embryonic` refuses in a class with `syn_proxy` is
    /// [`Refusal::Proxy`] (counted as a cookie sent, not as refused).
    pub(crate) fn admit(&mut self, rule: Option<usize>, client: IpAddr, embryonic: bool, proxied: bool) -> Result<u16, Refusal> {
        let class = rule.and_then(|r| self.rule_class.get(r).copied()).unwrap_or(0);
        let addr = addr_key(client);
        let g = self.sets.first().copied().unwrap_or_default();
        if let Err(h) = self.check(0, &g, addr, embryonic, proxied) {
            return Err(self.refuse(0, &g, h));
        }
        let r = if class != 0 { self.sets.get(usize::from(class)).copied() } else { None };
        if let Some(r) = r {
            if let Err(h) = self.check(class, &r, addr, embryonic, proxied) {
                return Err(self.refuse(class, &r, h));
            }
        }
        if proxied {
            self.bump_proxied(class, 1);
        }
        Ok(self.count(class, addr, embryonic, true))
    }

    fn refuse(&mut self, class: u16, set: &LimitSet, h: Hit) -> Refusal {
        if h == Hit::Embryonic && set.syn_proxy {
            self.bump_proxied(class, 0);
            return Refusal::Proxy;
        }
        if let Some(r) = self.refused.get_mut(usize::from(class)).and_then(|r| r.get_mut(h as usize)) {
            *r += 1;
        }
        Refusal::Hit(h)
    }

    fn bump_proxied(&mut self, class: u16, which: usize) {
        if let Some(p) = self.proxied.get_mut(usize::from(class)).and_then(|p| p.get_mut(which)) {
            *p += 1;
        }
    }

    /// Refuse when `local + remote` has reached a limit, or when this
    /// worker already admitted its share of what its view left under the
    /// limit: with `places` places admitting at once against views up to
    /// two report intervals old (a worker's report, then the broadcast),
    /// each taking all the room it sees would overshoot by up to
    /// `places − 1` times it. So each place takes at most `room / places`
    /// over the last two view intervals (`since` + `since_prev`), `room`
    /// being the limit less the count as it was before them.
    fn check(&self, class: u16, set: &LimitSet, addr: u128, embryonic: bool, proxied: bool) -> Result<(), Hit> {
        let c = usize::from(class);
        let total = self.local.get(c).copied().unwrap_or_default().add(self.remote.get(c).copied().unwrap_or_default());
        let since = self.since.get(c).copied().unwrap_or_default().add(self.since_prev.get(c).copied().unwrap_or_default());
        let places = self.places;
        if over(set.max_conns, total.conns, since.conns, places) {
            return Err(Hit::Conns);
        }
        if embryonic && !proxied && over(set.max_embryonic, total.embryonic, since.embryonic, places) {
            return Err(Hit::Embryonic);
        }
        if set.per_client() {
            let t = self.clients.get(class, addr).add(self.remote_clients.get(class, addr));
            let since = self.clients.since(class, addr, self.epoch);
            if over(set.per_client_max, t.conns, since.conns, places) {
                return Err(Hit::Client);
            }
            if embryonic && over(set.per_client_embryonic_max, t.embryonic, since.embryonic, places) {
                return Err(Hit::ClientEmbryonic);
            }
        }
        Ok(())
    }

    /// Take `d` off every count tag `t` is in (client `client`).
    fn take(&mut self, t: u16, client: IpAddr, d: Count) {
        let class = t & tag::CLASS_MASK;
        let addr = addr_key(client);
        if t & tag::GLOBAL != 0 {
            drop_count(&mut self.local, 0, d);
        }
        if t & tag::RULE != 0 {
            drop_count(&mut self.local, usize::from(class), d);
        }
        if t & tag::GLOBAL_CLIENT != 0 {
            self.clients.sub(0, addr, d);
        }
        if t & tag::RULE_CLIENT != 0 {
            self.clients.sub(class, addr, d);
        }
    }

    /// A tagged flow leaves the table.
    pub(crate) fn ended(&mut self, t: u16, client: IpAddr) {
        let d = Count { conns: 1, embryonic: u32::from(t & tag::EMBRYONIC != 0) };
        self.take(t, client, d);
    }

    /// A tagged embryonic flow completed its handshake: returns its new tag.
    pub(crate) fn established(&mut self, t: u16, client: IpAddr) -> u16 {
        self.take(t, client, Count { conns: 0, embryonic: 1 });
        t & !tag::EMBRYONIC
    }

    /// The rest of the cluster, as the control lcore estimates it (classes
    /// in this worker's order; clients by class index). Replaces the last.
    pub fn set_remote(&mut self, remote: &Remote) {
        for (i, c) in self.remote.iter_mut().enumerate() {
            *c = remote.classes.get(i).copied().unwrap_or_default();
        }
        self.places = remote.places.max(1);
        self.epoch = self.epoch.wrapping_add(1);
        self.since_prev.copy_from_slice(&self.since);
        self.since.iter_mut().for_each(|c| *c = Count::default());
        self.remote_clients.clear();
        for &(class, addr, count) in &remote.clients {
            self.remote_clients.add(class, addr_key(addr), count);
        }
    }

    /// This worker's counts for its control lcore: every class, and the
    /// clients holding at least 1/32 of a per-client limit of their class,
    /// the `REPORT_CLIENTS` busiest first.
    pub fn report(&self) -> LimitReport {
        let classes = self.ids.iter().zip(&self.local).map(|(&id, &c)| (id, c)).collect();
        let mut busy: Vec<(u64, u32, IpAddr, Count)> = Vec::new();
        for (class, addr, count) in self.clients.iter() {
            let Some(set) = self.sets.get(usize::from(class)) else { continue };
            let share = |n: u32, lim: Option<u32>| lim.map_or(0, |l| u64::from(n) * 1024 / u64::from(l.max(1)));
            let s = share(count.conns, set.per_client_max).max(share(count.embryonic, set.per_client_embryonic_max));
            if s >= 32 {
                busy.push((s, self.ids.get(usize::from(class)).copied().unwrap_or(0), key_addr(addr), count));
            }
        }
        busy.sort_unstable_by(|a, b| b.0.cmp(&a.0));
        busy.truncate(REPORT_CLIENTS);
        let refused = self.ids.iter().zip(&self.refused).map(|(&id, &r)| (id, r)).collect();
        LimitReport { classes, clients: busy.into_iter().map(|(_, id, a, c)| (id, a, c)).collect(), refused }
    }

    /// The classes, for `show limits`.
    pub fn classes(&self) -> Vec<ClassInfo> {
        (0..self.sets.len())
            .map(|i| ClassInfo {
                name: self.names.get(i).cloned().unwrap_or_default(),
                id: self.ids.get(i).copied().unwrap_or(0),
                limits: self.sets.get(i).copied().unwrap_or_default(),
                local: self.local.get(i).copied().unwrap_or_default(),
                remote: self.remote.get(i).copied().unwrap_or_default(),
                refused: self.refused.get(i).copied().unwrap_or_default(),
                syn_proxy: self.proxied.get(i).copied().unwrap_or_default(),
            })
            .collect()
    }

    /// The class ids in order (what `Remote::classes` is aligned with).
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// A class index by id.
    pub fn class_of(&self, id: u32) -> Option<u16> {
        self.ids.iter().position(|&i| i == id).map(|i| i as u16)
    }

    /// The local count of a client in a class (tests, `show limits`).
    pub fn client(&self, class: u16, client: IpAddr) -> Count {
        self.clients.get(class, addr_key(client))
    }

    /// Local clients with a count (class, address, count).
    pub fn clients(&self) -> impl Iterator<Item = (u16, IpAddr, Count)> + '_ {
        self.clients.iter().map(|(c, a, n)| (c, key_addr(a), n))
    }

    /// The local counts per class (tests).
    pub fn local(&self) -> &[Count] {
        &self.local
    }

    /// Forget every count (the table was cleared); refusals stay.
    pub(crate) fn clear_counts(&mut self) {
        self.local.iter_mut().for_each(|c| *c = Count::default());
        self.clients.clear();
    }

    /// Carry the refusal counters of classes `old` also has (by id).
    pub fn carry_refused(&mut self, old: &Limits) {
        for (i, id) in self.ids.iter().enumerate() {
            if let (Some(j), Some(r)) = (old.ids.iter().position(|x| x == id), self.refused.get_mut(i)) {
                *r = old.refused.get(j).copied().unwrap_or_default();
                if let Some(p) = self.proxied.get_mut(i) {
                    *p = old.proxied.get(j).copied().unwrap_or_default();
                }
            }
        }
    }

    /// The class a flow tagged `t` under the old limits belongs to here
    /// (by id), for re-tagging after a policy change.
    pub(crate) fn retag_class(&self, old: &Limits, t: u16) -> Option<u16> {
        let c = t & tag::CLASS_MASK;
        if c == 0 || t & tag::RULE == 0 {
            return None;
        }
        old.ids.get(usize::from(c)).and_then(|&id| self.class_of(id)).filter(|&k| k != 0)
    }

    /// Count an existing flow under these limits (a policy change
    /// re-counts the table): class `class` (0: global only), embryonic or
    /// not. Never refuses. Returns its tag.
    pub(crate) fn recount(&mut self, class: u16, client: IpAddr, embryonic: bool) -> u16 {
        self.count(class, addr_key(client), embryonic, false)
    }

    /// Count a flow of `class` (0: global only) from `addr` in every count
    /// its class has limits for, and return its tag. `admitted`: a new
    /// flow (`admit`), also counted in this view's admissions and, when
    /// the client table is full, as untracked; else an existing one
    /// counted again (`recount`).
    fn count(&mut self, class: u16, addr: u128, embryonic: bool, admitted: bool) -> u16 {
        let d = Count { conns: 1, embryonic: u32::from(embryonic) };
        let mut t = class & tag::CLASS_MASK;
        if embryonic {
            t |= tag::EMBRYONIC;
        }
        let g = self.sets.first().copied().unwrap_or_default();
        let r = (class != 0).then(|| self.sets.get(usize::from(class)).copied()).flatten();
        let parts = [(!g.is_empty()).then_some((0, g, tag::GLOBAL, tag::GLOBAL_CLIENT)), r.map(|r| (class, r, tag::RULE, tag::RULE_CLIENT))];
        for (c, set, counted, per_client) in parts.into_iter().flatten() {
            t |= counted;
            bump(&mut self.local, usize::from(c), d);
            if admitted {
                bump(&mut self.since, usize::from(c), d);
            }
            if set.per_client() {
                if self.clients.add(c, addr, d) {
                    t |= per_client;
                    if admitted {
                        self.clients.admitted(c, addr, self.epoch, d);
                    }
                } else if admitted {
                    self.clients_untracked += 1;
                }
            }
        }
        t
    }
}

/// Is a limit reached: `total` (local + remote) at `limit`, or, with
/// several places admitting, this one's share of the room the last view
/// left (`total − since` then) used up by its `since` admissions?
fn over(limit: Option<u32>, total: u32, since: u32, places: u32) -> bool {
    let Some(m) = limit else { return false };
    if total >= m {
        return true;
    }
    if places <= 1 {
        return false;
    }
    let room = m.saturating_sub(total.saturating_sub(since));
    since >= room.div_ceil(places).max(1)
}

fn bump(v: &mut [Count], i: usize, d: Count) {
    if let Some(c) = v.get_mut(i) {
        *c = c.add(d);
    }
}

fn drop_count(v: &mut [Count], i: usize, d: Count) {
    if let Some(c) = v.get_mut(i) {
        c.conns = c.conns.saturating_sub(d.conns);
        c.embryonic = c.embryonic.saturating_sub(d.embryonic);
    }
}

#[cfg(test)]
mod table_tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// The client table against a map: any sequence of adds and subs on
        /// a few colliding keys leaves exactly the nonzero entries, and a
        /// full table refuses without changing anything.
        #[test]
        fn client_table_matches_a_map(ops in proptest::collection::vec((0u16..3, 0u128..12, any::<bool>(), 1u32..3), 0..400)) {
            let mut t = ClientTable::new(8);
            let mut m: HashMap<(u16, u128), Count> = HashMap::new();
            for (class, addr, add, n) in ops {
                let d = Count { conns: n, embryonic: n / 2 };
                if add {
                    let fits = m.contains_key(&(class, addr)) || m.len() < 8;
                    prop_assert_eq!(t.add(class, addr, d), fits);
                    if fits {
                        let e = m.entry((class, addr)).or_default();
                        *e = e.add(d);
                    }
                } else {
                    t.sub(class, addr, d);
                    if let Some(e) = m.get_mut(&(class, addr)) {
                        e.conns = e.conns.saturating_sub(d.conns);
                        e.embryonic = e.embryonic.saturating_sub(d.embryonic);
                        if *e == Count::default() {
                            m.remove(&(class, addr));
                        }
                    }
                }
                prop_assert_eq!(t.len(), m.len());
                for (&(c, a), &n) in &m {
                    prop_assert_eq!(t.get(c, a), n);
                }
                let mut got: Vec<_> = t.iter().collect();
                got.sort();
                let mut want: Vec<_> = m.iter().map(|(&(c, a), &n)| (c, a, n)).collect();
                want.sort();
                prop_assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn class_ids_are_stable_and_nonzero_for_rules() {
        assert_eq!(class_id(None), 0);
        assert_eq!(class_id(Some("web-in")), class_id(Some("web-in")));
        assert_ne!(class_id(Some("web-in")), class_id(Some("web-out")));
        assert_ne!(class_id(Some("")), 0);
        // FNV-1a of "a" (a golden value: ids travel between nodes).
        assert_eq!(class_id(Some("a")), 0xe40c292c);
    }

    #[test]
    fn addresses_round_trip_through_keys() {
        for a in ["198.18.10.2", "0.0.0.0", "2001:db8::1", "::1"] {
            let ip: IpAddr = a.parse().unwrap();
            assert_eq!(key_addr(addr_key(ip)), ip);
        }
    }
}
