//! The replicated state every member holds (SPEC M6, M8): the replicated
//! configuration (an opaque versioned blob) and the replicated tables
//! (table id → key → value bytes), and the byte stream a transfer carries.
//!
//! Versions: one cluster-wide change counter, the *state version*. The
//! control node gives each change (upsert or delete of one entry) the next
//! version; an entry keeps the version of its last change, a table's
//! version is its highest entry version, and a delete leaves a tombstone
//! with its version so that "every change after version v" can be sent.
//! Members apply broadcast changes strictly in version order (`version`
//! is always "every change up to here applied") and fetch what they miss
//! as a delta transfer; a joiner fetches the whole state. The
//! configuration has its own version (bumped by the control node on every
//! change) and a digest of its bytes.
//!
//! Invariants:
//! - live entries ≤ `Limits::table_entries`; tombstones ≤ a quarter of
//!   that (the oldest are dropped first, and `gc_floor` records the
//!   highest version dropped: a delta from before it is sent as the whole
//!   state instead, which carries no tombstones);
//! - `version` and every entry's version only grow on a member except
//!   through a whole-state transfer (`Stream::full`), which replaces
//!   everything (a joiner, whose old copy may be another lineage's);
//! - a stream is decoded and checked completely before anything of it is
//!   applied: a bad stream changes nothing.

use super::config::{fnv1a, ConfigBlob, Limits};
use dataplane::ccl::{TABLE_KEY_MAX, TABLE_VALUE_MAX};
use std::collections::BTreeMap;

/// A change a member's copy went through (for `Action::Replica`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaChange {
    /// The replicated configuration is now `version` (read it with
    /// `Membership::config`).
    Config { version: u64 },
    /// An entry was set or deleted at state version `version`.
    Entry { table: u8, key: Vec<u8>, version: u64, deleted: bool },
    /// The whole state was replaced by a transfer (a joiner): every table
    /// may have changed; read them again.
    Replaced { version: u64 },
}

/// Why a table operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    #[error("tables change on the control node only (this node follows {control:?})")]
    NotControl { control: Option<dataplane::NodeId> },
    #[error("the control node is fetching a newer replicated state (version {want}) from a member")]
    CatchingUp { want: u64 },
    #[error("key of {0} bytes, at most 255")]
    KeyTooLong(usize),
    #[error("value of {0} bytes, at most 1024")]
    ValueTooLong(usize),
    #[error("configuration of {bytes} bytes, at most {limit}")]
    ConfigTooLarge { bytes: usize, limit: usize },
    #[error("tables full ({0} entries)")]
    Full(usize),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) version: u64,
    /// `None`: deleted (a tombstone).
    pub(super) value: Option<Vec<u8>>,
}

/// What applying a broadcast change did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Applied {
    Change(ReplicaChange),
    /// Version already applied.
    Duplicate,
    /// A version missing before it: not applied.
    Gap,
    /// Applying it would exceed the table limit: not applied (the control
    /// node enforces the same limit, so a member only sees this when
    /// configured with a smaller limit; the whole-state fetch fixes it up
    /// as far as it fits).
    Full,
}

#[derive(Clone, Debug)]
pub(super) struct Replica {
    limits: Limits,
    config: Option<ConfigBlob>,
    version: u64,
    tables: BTreeMap<u8, BTreeMap<Vec<u8>, Entry>>,
    live: usize,
    /// Tombstones by version → (table, key), oldest first.
    tombstones: BTreeMap<u64, (u8, Vec<u8>)>,
    gc_floor: u64,
}

impl Replica {
    pub(super) fn new(limits: Limits, config: Option<ConfigBlob>) -> Replica {
        Replica {
            limits,
            config,
            version: 0,
            tables: BTreeMap::new(),
            live: 0,
            tombstones: BTreeMap::new(),
            gc_floor: 0,
        }
    }

    pub(super) fn version(&self) -> u64 {
        self.version
    }
    pub(super) fn config(&self) -> Option<&ConfigBlob> {
        self.config.as_ref()
    }
    pub(super) fn config_version(&self) -> u64 {
        self.config.as_ref().map_or(0, |c| c.version)
    }
    pub(super) fn config_digest(&self) -> u64 {
        self.config.as_ref().map_or(0, ConfigBlob::digest)
    }
    pub(super) fn live(&self) -> usize {
        self.live
    }
    pub(super) fn tombstones(&self) -> usize {
        self.tombstones.len()
    }

    pub(super) fn get(&self, table: u8, key: &[u8]) -> Option<(u64, &[u8])> {
        let e = self.tables.get(&table)?.get(key)?;
        e.value.as_deref().map(|v| (e.version, v))
    }

    /// Live entries of `table` in key order: (key, value, version).
    pub(super) fn iter(&self, table: u8) -> impl Iterator<Item = (&[u8], &[u8], u64)> {
        self.tables
            .get(&table)
            .into_iter()
            .flat_map(|t| t.iter())
            .filter_map(|(k, e)| e.value.as_deref().map(|v| (k.as_slice(), v, e.version)))
    }

    /// Highest entry version of `table` (0: never changed).
    pub(super) fn table_version(&self, table: u8) -> u64 {
        self.tables.get(&table).map_or(0, |t| t.values().map(|e| e.version).max().unwrap_or(0))
    }

    pub(super) fn check(key: &[u8], value: Option<&[u8]>) -> Result<(), TableError> {
        if key.len() > TABLE_KEY_MAX {
            return Err(TableError::KeyTooLong(key.len()));
        }
        match value {
            Some(v) if v.len() > TABLE_VALUE_MAX => Err(TableError::ValueTooLong(v.len())),
            _ => Ok(()),
        }
    }

    /// Would setting `key` add a live entry beyond the limit?
    fn would_overflow(&self, table: u8, key: &[u8], value: Option<&[u8]>) -> bool {
        let exists = self.get(table, key).is_some();
        value.is_some() && !exists && self.live >= self.limits.table_entries
    }

    /// Set (or tombstone) one entry at `version` if newer than what is
    /// held; keeps the counts and the tombstone budget.
    fn put(&mut self, table: u8, key: &[u8], version: u64, value: Option<Vec<u8>>) -> bool {
        let t = self.tables.entry(table).or_default();
        let old = t.get(key).cloned();
        if old.as_ref().is_some_and(|o| o.version >= version) {
            return false;
        }
        if let Some(o) = &old {
            if o.value.is_some() {
                self.live -= 1;
            } else {
                self.tombstones.remove(&o.version);
            }
        }
        let deleted = value.is_none();
        if !deleted {
            self.live += 1;
        }
        t.insert(key.to_vec(), Entry { version, value });
        if deleted {
            self.tombstones.insert(version, (table, key.to_vec()));
            self.gc();
        }
        true
    }

    fn gc(&mut self) {
        let budget = (self.limits.table_entries / 4).max(1);
        while self.tombstones.len() > budget {
            let Some((v, (table, key))) = self.tombstones.pop_first() else { break };
            if let Some(t) = self.tables.get_mut(&table) {
                if t.get(&key).is_some_and(|e| e.version == v && e.value.is_none()) {
                    t.remove(&key);
                }
            }
            self.gc_floor = self.gc_floor.max(v);
        }
    }

    /// The control node's own change: the next version.
    pub(super) fn local_change(&mut self, table: u8, key: &[u8], value: Option<&[u8]>) -> Result<u64, TableError> {
        Self::check(key, value)?;
        if self.would_overflow(table, key, value) {
            return Err(TableError::Full(self.limits.table_entries));
        }
        let v = self.version.saturating_add(1);
        self.put(table, key, v, value.map(<[u8]>::to_vec));
        self.version = v;
        Ok(v)
    }

    /// The control node's new configuration: the next configuration version.
    pub(super) fn set_config(&mut self, bytes: Vec<u8>) -> Result<u64, TableError> {
        if bytes.len() > self.limits.config_bytes {
            return Err(TableError::ConfigTooLarge { bytes: bytes.len(), limit: self.limits.config_bytes });
        }
        let version = self.config_version().saturating_add(1);
        self.config = Some(ConfigBlob { version, bytes });
        Ok(version)
    }

    /// Forget the configuration (a joiner whose copy the control node
    /// refused: it takes the control node's with the join).
    pub(super) fn drop_config(&mut self) {
        self.config = None;
    }

    /// A broadcast change from the control node.
    pub(super) fn apply(&mut self, version: u64, table: u8, key: &[u8], value: Option<&[u8]>) -> Applied {
        if version <= self.version {
            return Applied::Duplicate;
        }
        if version != self.version + 1 {
            return Applied::Gap;
        }
        if Self::check(key, value).is_err() || self.would_overflow(table, key, value) {
            return Applied::Full;
        }
        self.put(table, key, version, value.map(<[u8]>::to_vec));
        self.version = version;
        Applied::Change(ReplicaChange::Entry { table, key: key.to_vec(), version, deleted: value.is_none() })
    }

    /// The stream for a requester holding state version `since` and
    /// configuration version `config_version` (`full`: the whole state).
    pub(super) fn encode(&self, full: bool, since: u64, config_version: u64) -> Vec<u8> {
        let full = full || since < self.gc_floor || since > self.version;
        let config = self.config.as_ref().filter(|c| full || c.version != config_version);
        let entries: Vec<(u8, &[u8], &Entry)> = self
            .tables
            .iter()
            .flat_map(|(&t, m)| m.iter().map(move |(k, e)| (t, k.as_slice(), e)))
            .filter(|(_, _, e)| if full { e.value.is_some() } else { e.version > since })
            .collect();
        let mut out = Vec::with_capacity(32 + config.map_or(0, |c| c.bytes.len() + 20) + entries.len() * 32);
        out.extend_from_slice(STREAM_MAGIC);
        out.push(STREAM_FORMAT);
        out.push(u8::from(full) | if config.is_some() { FLAG_CONFIG } else { 0 });
        out.extend_from_slice(&self.version.to_be_bytes());
        out.extend_from_slice(&(if full { 0 } else { since }).to_be_bytes());
        out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
        if let Some(c) = config {
            out.extend_from_slice(&c.version.to_be_bytes());
            out.extend_from_slice(&(c.bytes.len() as u32).to_be_bytes());
            out.extend_from_slice(&c.bytes);
        }
        for (t, k, e) in entries {
            out.push(t);
            out.extend_from_slice(&e.version.to_be_bytes());
            out.push(if e.value.is_some() { 1 } else { 2 });
            out.push(k.len() as u8);
            out.extend_from_slice(k);
            let v = e.value.as_deref().unwrap_or(&[]);
            out.extend_from_slice(&(v.len() as u16).to_be_bytes());
            out.extend_from_slice(v);
        }
        out
    }

    /// Decode a whole stream, then apply it. `Err`: malformed or a delta
    /// from beyond this copy's version (nothing applied).
    pub(super) fn apply_stream(&mut self, bytes: &[u8]) -> Result<Vec<ReplicaChange>, StreamError> {
        let s = Stream::decode(bytes, &self.limits)?;
        if !s.full && s.since > self.version {
            return Err(StreamError::Gap { since: s.since, have: self.version });
        }
        let mut changes = Vec::new();
        if s.full {
            self.tables.clear();
            self.tombstones.clear();
            self.live = 0;
            self.gc_floor = s.version;
            for (t, k, v, value) in &s.entries {
                if value.is_some() && self.live >= self.limits.table_entries {
                    break;
                }
                self.put(*t, k, *v, value.map(<[u8]>::to_vec));
            }
            self.version = s.version;
            changes.push(ReplicaChange::Replaced { version: s.version });
        } else {
            for (t, k, v, value) in &s.entries {
                if self.would_overflow(*t, k, *value) {
                    continue;
                }
                if self.put(*t, k, *v, value.map(<[u8]>::to_vec)) {
                    changes.push(ReplicaChange::Entry { table: *t, key: k.to_vec(), version: *v, deleted: value.is_none() });
                }
            }
            self.version = self.version.max(s.version);
        }
        if let Some((version, blob)) = s.config {
            if s.full || version > self.config_version() {
                self.config = Some(ConfigBlob { version, bytes: blob.to_vec() });
                changes.push(ReplicaChange::Config { version });
            }
        }
        Ok(changes)
    }

    /// A digest of everything held (tests and the harness compare copies).
    pub fn fingerprint(&self) -> u64 {
        let mut b = Vec::new();
        b.extend_from_slice(&self.version.to_be_bytes());
        b.extend_from_slice(&self.config_version().to_be_bytes());
        b.extend_from_slice(&self.config_digest().to_be_bytes());
        for (t, m) in &self.tables {
            for (k, e) in m.iter().filter(|(_, e)| e.value.is_some()) {
                b.push(*t);
                b.extend_from_slice(k);
                b.extend_from_slice(&e.version.to_be_bytes());
                b.extend_from_slice(e.value.as_deref().unwrap_or(&[]));
            }
        }
        fnv1a(&b)
    }
}

const STREAM_MAGIC: &[u8; 4] = b"CFRS";
const STREAM_FORMAT: u8 = 1;
const FLAG_FULL: u8 = 0x01;
const FLAG_CONFIG: u8 = 0x02;
const STREAM_HEAD: usize = 4 + 1 + 1 + 8 + 8 + 4;

/// A stream that cannot be applied.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error("replicated-state stream malformed at byte {0}")]
    Malformed(usize),
    #[error("delta from state version {since}, this copy holds {have}")]
    Gap { since: u64, have: u64 },
}

/// A decoded stream, borrowing from its bytes.
pub(super) struct Stream<'a> {
    pub(super) full: bool,
    pub(super) version: u64,
    pub(super) since: u64,
    pub(super) config: Option<(u64, &'a [u8])>,
    /// (table, key, version, value or None for a delete)
    pub(super) entries: Vec<(u8, &'a [u8], u64, Option<&'a [u8]>)>,
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StreamError> {
        let s = self.b.get(self.at..self.at.saturating_add(n)).ok_or(StreamError::Malformed(self.at))?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, StreamError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, StreamError> {
        let s = self.take(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Result<u32, StreamError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_be_bytes(a))
    }
    fn u64(&mut self) -> Result<u64, StreamError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }
}

impl<'a> Stream<'a> {
    pub(super) fn decode(b: &'a [u8], limits: &Limits) -> Result<Stream<'a>, StreamError> {
        let mut r = Reader { b, at: 0 };
        if r.take(4)? != STREAM_MAGIC || r.u8()? != STREAM_FORMAT {
            return Err(StreamError::Malformed(0));
        }
        let flags = r.u8()?;
        if flags & !(FLAG_FULL | FLAG_CONFIG) != 0 {
            return Err(StreamError::Malformed(5));
        }
        let full = flags & FLAG_FULL != 0;
        let version = r.u64()?;
        let since = r.u64()?;
        let count = r.u32()? as usize;
        // Every entry takes at least 13 bytes: a count the bytes cannot
        // hold is refused before anything is reserved for it.
        if count > b.len().saturating_sub(STREAM_HEAD) / 13 {
            return Err(StreamError::Malformed(STREAM_HEAD - 4));
        }
        let config = if flags & FLAG_CONFIG != 0 {
            let v = r.u64()?;
            let n = r.u32()? as usize;
            if n > limits.config_bytes {
                return Err(StreamError::Malformed(r.at));
            }
            Some((v, r.take(n)?))
        } else {
            None
        };
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let table = r.u8()?;
            let v = r.u64()?;
            let op = r.u8()?;
            let klen = usize::from(r.u8()?);
            let key = r.take(klen)?;
            let vlen = usize::from(r.u16()?);
            let value = r.take(vlen)?;
            let value = match op {
                1 if vlen <= TABLE_VALUE_MAX => Some(value),
                2 if vlen == 0 && !full => None,
                _ => return Err(StreamError::Malformed(r.at)),
            };
            if v == 0 || v > version || (!full && v <= since) {
                return Err(StreamError::Malformed(r.at));
            }
            entries.push((table, key, v, value));
        }
        if r.at != b.len() {
            return Err(StreamError::Malformed(r.at));
        }
        Ok(Stream { full, version, since, config, entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn replica() -> Replica {
        Replica::new(Limits { table_entries: 8, ..Limits::default() }, None)
    }

    #[test]
    fn changes_in_order_duplicates_and_gaps() {
        let mut c = replica();
        assert_eq!(c.local_change(1, b"a", Some(b"1")), Ok(1));
        assert_eq!(c.local_change(1, b"b", Some(b"2")), Ok(2));
        assert_eq!(c.local_change(1, b"a", None), Ok(3));
        assert_eq!((c.get(1, b"a"), c.get(1, b"b")), (None, Some((2, &b"2"[..]))));
        assert_eq!((c.table_version(1), c.table_version(2), c.version()), (3, 0, 3));
        let mut m = replica();
        assert_eq!(m.apply(2, 1, b"b", Some(b"2")), Applied::Gap);
        assert!(matches!(m.apply(1, 1, b"a", Some(b"1")), Applied::Change(_)));
        assert_eq!(m.apply(1, 1, b"a", Some(b"1")), Applied::Duplicate);
        assert!(matches!(m.apply(2, 1, b"b", Some(b"2")), Applied::Change(_)));
        assert!(matches!(m.apply(3, 1, b"a", None), Applied::Change(ReplicaChange::Entry { deleted: true, .. })));
        assert_eq!(m.fingerprint(), c.fingerprint());
        assert_eq!(m.iter(1).collect::<Vec<_>>(), vec![(&b"b"[..], &b"2"[..], 2)]);
        assert_eq!(m.tombstones(), 1);
    }

    #[test]
    fn deltas_and_whole_state_reach_the_same_copy() {
        let mut c = replica();
        c.set_config(b"policy v1".to_vec()).unwrap();
        for i in 0..6u8 {
            c.local_change(0, &[i], Some(&[i; 3])).unwrap();
        }
        c.local_change(0, &[2], None).unwrap();
        // A member that has the first 3 changes fetches the rest.
        let mut m = replica();
        for v in 1..=3u8 {
            m.apply(u64::from(v), 0, &[v - 1], Some(&[v - 1; 3]));
        }
        let changes = m.apply_stream(&c.encode(false, 3, 0)).unwrap();
        assert_eq!(m.fingerprint(), c.fingerprint());
        assert!(changes.contains(&ReplicaChange::Config { version: 1 }));
        assert!(changes.contains(&ReplicaChange::Entry { table: 0, key: vec![2], version: 7, deleted: true }));
        // A joiner with another lineage's copy takes the whole state.
        let mut j = replica();
        j.local_change(9, b"stale", Some(b"x")).unwrap();
        for _ in 0..10 {
            j.local_change(9, b"y", Some(b"z")).unwrap();
        }
        assert_eq!(j.apply_stream(&c.encode(true, 0, 0)).unwrap()[0], ReplicaChange::Replaced { version: 7 });
        assert_eq!(j.fingerprint(), c.fingerprint());
        assert_eq!(j.get(9, b"stale"), None);
        // A delta from beyond this copy is refused, nothing applied.
        let mut behind = replica();
        let before = behind.fingerprint();
        assert_eq!(behind.apply_stream(&c.encode(false, 5, 0)), Err(StreamError::Gap { since: 5, have: 0 }));
        assert_eq!(behind.fingerprint(), before);
    }

    #[test]
    fn limits_hold() {
        let mut c = replica();
        for i in 0..8u8 {
            c.local_change(0, &[i], Some(b"v")).unwrap();
        }
        assert_eq!(c.local_change(0, &[9], Some(b"v")), Err(TableError::Full(8)));
        assert!(c.local_change(0, &[1], Some(b"w")).is_ok(), "an update of a live key is no new entry");
        assert_eq!(c.local_change(0, &[0; 256], None), Err(TableError::KeyTooLong(256)));
        assert_eq!(c.local_change(0, b"k", Some(&[0; 1025])), Err(TableError::ValueTooLong(1025)));
        // Tombstones: at most a quarter of the limit, oldest dropped, and a
        // delta from before the dropped ones is sent whole.
        for i in 0..8u8 {
            c.local_change(0, &[i], None).unwrap();
        }
        assert_eq!((c.live(), c.tombstones()), (0, 2));
        let s = c.encode(false, 1, 0);
        let d = Stream::decode(&s, &c.limits).unwrap();
        assert!(d.full && d.entries.is_empty());
        assert_eq!(c.set_config(vec![0; (1 << 20) + 1]), Err(TableError::ConfigTooLarge { bytes: (1 << 20) + 1, limit: 1 << 20 }));
    }

    #[test]
    fn every_truncation_of_a_stream_is_refused() {
        let mut c = replica();
        c.set_config(b"cfg".to_vec()).unwrap();
        c.local_change(1, b"k", Some(b"v")).unwrap();
        c.local_change(1, b"k2", None).unwrap();
        let s = c.encode(false, 0, 0);
        for n in 0..s.len() {
            let mut m = replica();
            assert!(m.apply_stream(&s[..n]).is_err(), "{n}");
            assert_eq!(m.version(), 0);
        }
        let mut longer = s.clone();
        longer.push(0);
        assert!(replica().apply_stream(&longer).is_err());
    }

    proptest! {
        #[test]
        fn random_streams_never_panic_or_change_on_error(data in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut m = replica();
            m.local_change(0, b"x", Some(b"y")).unwrap();
            let before = m.fingerprint();
            let mut b = STREAM_MAGIC.to_vec();
            b.extend_from_slice(&data);
            if m.apply_stream(&b).is_err() {
                prop_assert_eq!(m.fingerprint(), before);
            }
            let _ = m.apply_stream(&data);
        }
    }
}
