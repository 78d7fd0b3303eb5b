//! Frames a stage holds until what they wait for comes, then decides
//! again: the SYN proxy's client segments until their connection's splice
//! (`synproxy`), a host's first packets until a cluster member has its
//! dynamic-NAT translation (`nat`, N4). One mechanism, keyed by what the
//! frames wait for (`K`: a connection's client tuple, a host).
//!
//! - `hold` copies a frame as received (with its ingress port and `Rx`)
//!   into one of `HoldLimits::slots` slots of a `FramePool` (no
//!   allocation after `new`), at most `per_key` per key; with no room
//!   (pool full, the key's bound reached, a frame too long for a slot) it
//!   refuses and the caller drops the frame as it would have;
//! - `take` hands back the oldest frame of a key held before a point in
//!   the arrival order (`next_seq` when the release began: a frame held
//!   again while released waits for the next release), its buffer moved
//!   out of the slot for the pipeline to decide in place; `finish` files
//!   the result: queued for `drain` (forwarded, or an ARP or echo reply),
//!   freed (consumed: the pipeline kept its own copy; dropped);
//! - `expire` frees the frames whose wait (`HoldLimits::timeout`) is over
//!   or whose key the stage no longer waits for.
//!
//! A held frame ends in exactly one of: taken and finished, expired,
//! cleared. Every operation is bounded by the pool's slot count; nothing
//! here is reached by a packet that is not held or released.

use super::context::{Outcome, Rx};
use crate::slots::{FramePool, SlotMem, SLOT_HEADROOM};
use crate::types::{Duration, PortId, Timestamp};

/// A hold's bounds.
#[derive(Copy, Clone, Debug)]
pub(crate) struct HoldLimits {
    /// Frame slots.
    pub slots: usize,
    /// Frames held per key, at most.
    pub per_key: usize,
    /// How long a frame waits.
    pub timeout: Duration,
}

/// A held frame: its key, how it was received, until when it may wait;
/// `seq` orders the held frames by arrival.
#[derive(Copy, Clone, Debug)]
struct Held<K> {
    key: K,
    in_port: PortId,
    rx: Rx,
    deadline: Timestamp,
    seq: u64,
}

/// Frames waiting, in a pool's parked slots tagged with `tag(key)`.
pub(crate) struct FrameHold<K: Copy + PartialEq> {
    pool: FramePool<Held<K>>,
    limits: HoldLimits,
    /// The slot tag of a key (never 0).
    tag: fn(&K) -> u32,
    /// Arrival order of held frames (oldest = smallest).
    seq: u64,
}

/// A held frame taken out of its slot to be decided (`FrameHold::take`);
/// `FrameHold::finish` files its fate.
pub(crate) struct Taken {
    pub slot: u16,
    pub in_port: PortId,
    pub rx: Rx,
    pub mem: SlotMem,
    pub start: usize,
    pub end: usize,
}

impl<K: Copy + PartialEq> FrameHold<K> {
    pub fn new(limits: HoldLimits, slot_len: usize, tag: fn(&K) -> u32) -> Self {
        FrameHold { pool: FramePool::new(limits.slots, slot_len), limits, tag, seq: 0 }
    }

    /// Frames held now.
    pub fn len(&self) -> usize {
        self.pool.parked()
    }

    /// The arrival number the next held frame gets (`take` takes the
    /// frames held before it).
    pub fn next_seq(&self) -> u64 {
        self.seq
    }

    /// How many frames of `key` are held, and the slot of the oldest held
    /// before `before`.
    fn of_key(&self, key: &K, before: u64) -> (usize, Option<u16>) {
        let mut n = 0;
        let mut oldest: Option<(u64, u16)> = None;
        for i in self.pool.tagged(0, (self.tag)(key), 0) {
            let Some(h) = self.pool.parked_meta(i).filter(|h| h.key == *key) else { continue };
            n += 1;
            if h.seq < before && oldest.is_none_or(|(q, _)| h.seq < q) {
                oldest = Some((h.seq, i));
            }
        }
        (n, oldest.map(|(_, i)| i))
    }

    /// Copy `frame` to wait under `key`. False (nothing held): no free
    /// slot, `per_key` frames of the key held already, or too long for a
    /// slot.
    pub fn hold(&mut self, now: Timestamp, key: &K, in_port: PortId, rx: Rx, frame: &[u8]) -> bool {
        if SLOT_HEADROOM + frame.len() > self.pool.slot_len() || self.of_key(key, 0).0 >= self.limits.per_key {
            return false;
        }
        let Some(i) = self.pool.alloc() else { return false };
        if !self.pool.fill(i, frame) {
            self.pool.give_back(i);
            return false;
        }
        let held = Held { key: *key, in_port, rx, deadline: now.saturating_add(self.limits.timeout), seq: self.seq };
        self.pool.park_tagged(i, held, [(self.tag)(key), 0]);
        self.seq += 1;
        true
    }

    /// The oldest frame of `key` held before `before` (`next_seq` when
    /// the release began), its buffer moved out of the slot.
    pub fn take(&mut self, key: &K, before: u64) -> Option<Taken> {
        if self.pool.parked() == 0 {
            return None;
        }
        loop {
            let i = self.of_key(key, before).1?;
            let h = self.pool.parked_meta(i)?;
            match self.pool.take(i) {
                Some((mem, start, end)) => return Some(Taken { slot: i, in_port: h.in_port, rx: h.rx, mem, start, end }),
                // (Never: nothing else takes a held slot's buffer.)
                None => self.pool.release(i),
            }
        }
    }

    /// Put a taken frame back and queue it for output (`Forward`, an ARP
    /// or echo reply) or free it (`Consumed`: the pipeline kept a copy,
    /// held for its next hop's ARP reply; a drop). True unless it was
    /// dropped.
    pub fn finish(&mut self, slot: u16, mem: SlotMem, start: usize, end: usize, outcome: Outcome) -> bool {
        self.pool.put_back(slot, mem, start, end);
        match outcome {
            Outcome::Forward(p) | Outcome::ArpReply(p) | Outcome::EchoReply(p) => {
                self.pool.push_out(slot, p);
                true
            }
            Outcome::Consumed => {
                self.pool.release(slot);
                true
            }
            Outcome::Drop(_) | Outcome::Handoff(_) => {
                self.pool.release(slot);
                false
            }
        }
    }

    /// Free the frames whose wait is over or whose key `waiting` no longer
    /// holds for. Returns how many.
    pub fn expire(&mut self, now: Timestamp, waiting: impl Fn(&K) -> bool) -> u64 {
        let mut n = 0;
        if self.pool.parked() == 0 {
            return n;
        }
        for i in 0..self.pool.len() as u16 {
            if self.pool.parked_meta(i).is_some_and(|h| h.deadline <= now || !waiting(&h.key)) {
                n += 1;
                self.pool.release(i);
            }
        }
        n
    }

    /// Free every held frame. Returns how many.
    pub fn clear(&mut self) -> u64 {
        let n = self.pool.parked() as u64;
        self.pool.clear();
        n
    }

    /// Hand the released frames to `f` (from `drain_generated`).
    pub fn drain(&mut self, f: &mut impl FnMut(PortId, &[u8])) {
        self.pool.drain(f);
    }
}
