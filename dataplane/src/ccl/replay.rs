//! Anti-replay windows, one per (sender node, channel), in the style of
//! RFC 4303 §3.4.3 with a bitmap of `WINDOW` (16 384) sequence numbers.
//!
//! Each window remembers the sender's incarnation, the highest sequence
//! number accepted (`top`) and which of `top − 16383 ..= top` were seen. A
//! higher incarnation (the sender restarted) resets the window; a lower one
//! is refused as stale.
//!
//! Why 16 384 and not RFC 4303's 64 (or the 128 of versions before): the
//! CCL port's queues reorder a stream. On af_packet (a VM with vdevs, the
//! test bed) the kernel's fanout is HASH with ROLLOVER: a stream hashed to
//! the control lcore's queue rolls over to the worker's when that ring is
//! full (and the reverse), so the frames still in one ring (framecnt 2 048
//! by default) and in the control lcore's hand-off queue (2 048,
//! node/src/ccl.rs) arrive after later ones. Under floods a 128-wide
//! window refused tens of thousands of such frames a flood as replays
//! (`ccl-replay`: lost queries, replies, forwarded packets and
//! heartbeats; flood_kinds). 4 096 covered one ring plus one hand-off;
//! with two workers per node (9 threads of 3 nodes on 2 cores) a starved
//! worker or control lcore leaves its share of a stream in its ring while
//! the other queue's reader moves on, and a 4 096-wide window still
//! refused 400-3 000 frames in a quarter of the floods (2026-12-05).
//! 16 384 is four of those; the cost is memory, not time.
//!
//! The bitmap is 256 words indexed circularly by `seq % WINDOW` (no shift
//! of a 16 384-bit value): when `top` advances, the bits of the numbers
//! skipped are cleared (a word at a time; all of them on a jump of a
//! window or more), so an in-order message costs a couple of word
//! operations. 2 064 bytes a window, 16 nodes × 33 channels: ≈ 1.1 MB per
//! [`ReplayGuard`] (one per worker and one for the control lcore).
//!
//! Invariants: the table is allocated once (16 nodes × 33 channels) and
//! never grows; `check` never mutates, and the caller `commit`s only after
//! the MAC verified (RFC 4303 §3.4.3: "the receive window is updated only
//! if the integrity verification succeeds"), so forged messages cannot
//! move a window. Sequence 0 is never valid (senders start at 1). Every
//! operation is total over `u64` sequence numbers (no overflow, no
//! out-of-range index).

use super::{CclDrop, CONTROL_CHANNEL, MAX_WORKER_CHANNELS};
use crate::NodeId;

/// Width of the window in sequence numbers: a number more than `WINDOW −
/// 1` below the highest accepted is refused as a replay.
pub const WINDOW: u64 = 16384;

/// Words of the bitmap.
const WORDS: usize = (WINDOW / 64) as usize;

/// Channels with a window per node: workers 0..=31 and the control lcore.
const CHANNELS: usize = MAX_WORKER_CHANNELS as usize + 1;

#[derive(Copy, Clone, Debug)]
struct Window {
    known: bool,
    incarnation: u32,
    top: u64,
    /// Bit `s % 64` of word `(s / 64) % WORDS` set: `s` was accepted (for
    /// `s` in `top − WINDOW + 1 ..= top`).
    seen: [u64; WORDS],
}

impl Default for Window {
    fn default() -> Self {
        Window { known: false, incarnation: 0, top: 0, seen: [0; WORDS] }
    }
}

/// Word and bit mask of `seq` in a window's bitmap.
#[inline]
fn bit(seq: u64) -> (usize, u64) {
    (((seq / 64) % WORDS as u64) as usize, 1u64 << (seq % 64))
}

impl Window {
    #[inline]
    fn seen(&self, seq: u64) -> bool {
        let (w, m) = bit(seq);
        self.seen.get(w).is_some_and(|x| x & m != 0)
    }

    #[inline]
    fn mark(&mut self, seq: u64) {
        let (w, m) = bit(seq);
        if let Some(x) = self.seen.get_mut(w) {
            *x |= m;
        }
    }

    /// `top` moves up to `seq`: forget the numbers a window below it
    /// (their bits are those of `top + 1 ..= seq`), then mark `seq`.
    /// Returns the words it cleared (the per-message cost, for the tests):
    /// 1 for the next number, at most `WORDS + 1` for any jump.
    fn advance(&mut self, seq: u64) -> usize {
        let mut cleared = 0;
        if seq - self.top >= WINDOW {
            self.seen = [0; WORDS];
            cleared = WORDS;
        } else {
            let mut s = self.top + 1;
            while s <= seq {
                cleared += 1;
                let (w, _) = bit(s);
                let b = s % 64;
                let n = (64 - b).min(seq - s + 1);
                let mask = if n == 64 { u64::MAX } else { ((1u64 << n) - 1) << b };
                if let Some(x) = self.seen.get_mut(w) {
                    *x &= !mask;
                }
                match s.checked_add(n) {
                    Some(next) => s = next,
                    None => break,
                }
            }
        }
        self.top = seq;
        self.mark(seq);
        cleared
    }
}

/// Fixed-size replay state for every (sender, channel) of a cluster.
#[derive(Clone, Debug)]
pub struct ReplayGuard {
    windows: Box<[Window]>,
}

impl Default for ReplayGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplayGuard {
    /// Windows for `NodeId::MAX_NODES` senders × 33 channels (≈ 1.1 MB).
    pub fn new() -> Self {
        ReplayGuard { windows: vec![Window::default(); NodeId::MAX_NODES * CHANNELS].into_boxed_slice() }
    }

    /// Slot of a (sender, channel): `BadSender` / `TooManyChannels`.
    #[inline]
    fn slot(sender: NodeId, channel: u8) -> Result<usize, CclDrop> {
        if sender.index() >= NodeId::MAX_NODES {
            return Err(CclDrop::BadSender);
        }
        let c = match channel {
            CONTROL_CHANNEL => CHANNELS - 1,
            c if c < MAX_WORKER_CHANNELS => usize::from(c),
            _ => return Err(CclDrop::TooManyChannels),
        };
        Ok(sender.index() * CHANNELS + c)
    }

    /// Would `(incarnation, seq)` from this stream be fresh? Read-only.
    #[inline]
    pub fn check(&self, sender: NodeId, channel: u8, incarnation: u32, seq: u64) -> Result<(), CclDrop> {
        let w = self.windows.get(Self::slot(sender, channel)?).ok_or(CclDrop::BadSender)?;
        if seq == 0 {
            return Err(CclDrop::Replay);
        }
        if !w.known || incarnation > w.incarnation {
            return Ok(());
        }
        if incarnation < w.incarnation {
            return Err(CclDrop::StaleIncarnation);
        }
        if seq > w.top {
            return Ok(());
        }
        if w.top - seq >= WINDOW || w.seen(seq) {
            return Err(CclDrop::Replay);
        }
        Ok(())
    }

    /// Record `(incarnation, seq)` as accepted. Call only after `check`
    /// passed and the MAC verified; re-checks and refuses otherwise.
    #[inline]
    pub fn commit(&mut self, sender: NodeId, channel: u8, incarnation: u32, seq: u64) -> Result<(), CclDrop> {
        self.check(sender, channel, incarnation, seq)?;
        let i = Self::slot(sender, channel)?;
        let w = self.windows.get_mut(i).ok_or(CclDrop::BadSender)?;
        if !w.known || incarnation > w.incarnation {
            *w = Window { known: true, incarnation, top: seq, seen: [0; WORDS] };
            w.mark(seq);
        } else if seq > w.top {
            let _cleared = w.advance(seq);
        } else {
            w.mark(seq);
        }
        Ok(())
    }

    /// The incarnation last accepted from a stream, if any.
    pub fn incarnation(&self, sender: NodeId, channel: u8) -> Option<u32> {
        let w = self.windows.get(Self::slot(sender, channel).ok()?)?;
        w.known.then_some(w.incarnation)
    }

    /// Highest sequence number accepted from a stream, if any.
    pub fn top(&self, sender: NodeId, channel: u8) -> Option<u64> {
        let w = self.windows.get(Self::slot(sender, channel).ok()?)?;
        w.known.then_some(w.top)
    }

    /// Forget everything known about `sender` (e.g. removed from the cluster).
    pub fn forget(&mut self, sender: NodeId) {
        if sender.index() < NodeId::MAX_NODES {
            let s = sender.index() * CHANNELS;
            for w in self.windows.iter_mut().skip(s).take(CHANNELS) {
                *w = Window::default();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const N: NodeId = NodeId(2);

    fn accept(g: &mut ReplayGuard, inc: u32, seq: u64) -> Result<(), CclDrop> {
        g.commit(N, 0, inc, seq)
    }

    #[test]
    fn in_order_then_replay() {
        let mut g = ReplayGuard::new();
        for s in 1..=300 {
            assert_eq!(accept(&mut g, 1, s), Ok(()));
        }
        assert_eq!(accept(&mut g, 1, 300), Err(CclDrop::Replay));
        assert_eq!(accept(&mut g, 1, 200), Err(CclDrop::Replay));
        assert_eq!(accept(&mut g, 1, 0), Err(CclDrop::Replay));
    }

    #[test]
    fn out_of_order_within_window_once() {
        let mut g = ReplayGuard::new();
        accept(&mut g, 1, 20000).unwrap();
        assert_eq!(accept(&mut g, 1, 3617), Ok(())); // age 16383: last slot of the window
        assert_eq!(accept(&mut g, 1, 3617), Err(CclDrop::Replay));
        assert_eq!(accept(&mut g, 1, 3616), Err(CclDrop::Replay)); // age 16384: too old
        assert_eq!(accept(&mut g, 1, 19000), Ok(()));
        assert_eq!(accept(&mut g, 1, 19000), Err(CclDrop::Replay));
        // A jump beyond the window clears it.
        assert_eq!(accept(&mut g, 1, 80000), Ok(()));
        assert_eq!(accept(&mut g, 1, 79999), Ok(()));
        assert_eq!(accept(&mut g, 1, 15904), Err(CclDrop::Replay));
    }

    #[test]
    fn jumps_of_exactly_a_window_and_within_it() {
        // A jump of exactly WINDOW forgets everything: the old numbers are
        // out of the window, the ones between are fresh.
        let mut g = ReplayGuard::new();
        for s in 1..=100 {
            accept(&mut g, 1, s).unwrap();
        }
        accept(&mut g, 1, 100 + WINDOW).unwrap();
        assert_eq!(accept(&mut g, 1, 100), Err(CclDrop::Replay), "age WINDOW");
        for s in [101, 164, 165, 100 + WINDOW - 1] {
            assert_eq!(accept(&mut g, 1, s), Ok(()), "{s} skipped by the jump");
        }
        // A jump of WINDOW − 1: the numbers left in the window keep their
        // bits (100 + WINDOW is at age WINDOW − 1 then), the skipped ones
        // (whose bits held numbers a window older) are fresh.
        let top = 100 + 2 * WINDOW - 1;
        accept(&mut g, 1, top).unwrap();
        assert_eq!(accept(&mut g, 1, 100 + WINDOW), Err(CclDrop::Replay));
        assert_eq!(accept(&mut g, 1, 100 + WINDOW + 1), Ok(()));
        assert_eq!(accept(&mut g, 1, top - 1), Ok(()));
        // A jump of WINDOW + 1 forgets everything too, the old top included.
        let mut g = ReplayGuard::new();
        for s in 1..=100 {
            accept(&mut g, 1, s).unwrap();
        }
        accept(&mut g, 1, 101 + WINDOW).unwrap();
        assert_eq!(accept(&mut g, 1, 101), Err(CclDrop::Replay), "age WINDOW");
        for s in [102, 128, 129, 192, 100 + WINDOW] {
            assert_eq!(accept(&mut g, 1, s), Ok(()), "{s} skipped by the jump");
        }
        assert_eq!(accept(&mut g, 1, 100 + WINDOW), Err(CclDrop::Replay));
    }

    #[test]
    fn cost_per_message_is_constant() {
        // Counted, not timed: the words `advance` clears per message.
        let mut w = Window { known: true, incarnation: 1, top: 1, seen: [0; WORDS] };
        w.mark(1);
        for s in 2..=3 * WINDOW {
            assert_eq!(w.advance(s), 1, "in order: one word at {s}");
        }
        // A jump within a word touches one word, across an edge two, any
        // longer one at most the whole bitmap once.
        let t = w.top;
        assert_eq!(w.advance(t + 3), 1);
        let t = w.top;
        let to_edge = 64 - (t % 64);
        assert_eq!(w.advance(t + to_edge + 1), 2);
        for jump in [WINDOW / 2, WINDOW - 1, WINDOW, WINDOW + 1, u64::MAX / 2] {
            let t = w.top;
            assert!(w.advance(t + jump) <= WORDS + 1, "jump {jump}");
        }
    }

    #[test]
    fn word_boundaries_and_the_top_of_the_range() {
        let mut g = ReplayGuard::new();
        // In order across the circular index's wrap (word 63 → word 0).
        for s in WINDOW - 70..WINDOW + 70 {
            assert_eq!(accept(&mut g, 1, s), Ok(()));
        }
        for s in [WINDOW - 1, WINDOW, WINDOW + 63, WINDOW + 64] {
            assert_eq!(accept(&mut g, 1, s), Err(CclDrop::Replay));
        }
        // Jumps that end on and across word edges.
        accept(&mut g, 1, 3 * WINDOW + 127).unwrap();
        assert_eq!(accept(&mut g, 1, 3 * WINDOW + 64), Ok(()));
        assert_eq!(accept(&mut g, 1, 3 * WINDOW + 63), Ok(()));
        assert_eq!(accept(&mut g, 1, 3 * WINDOW + 63), Err(CclDrop::Replay));
        // Numbers near the top of u64: no overflow, the window still works.
        accept(&mut g, 1, u64::MAX - 1).unwrap();
        assert_eq!(accept(&mut g, 1, u64::MAX), Ok(()));
        assert_eq!(accept(&mut g, 1, u64::MAX), Err(CclDrop::Replay));
        assert_eq!(accept(&mut g, 1, u64::MAX - 1), Err(CclDrop::Replay));
        assert_eq!(accept(&mut g, 1, u64::MAX - 2), Ok(()));
        assert_eq!(accept(&mut g, 1, u64::MAX - WINDOW), Err(CclDrop::Replay));
    }

    #[test]
    fn incarnations() {
        let mut g = ReplayGuard::new();
        accept(&mut g, 10, 500).unwrap();
        assert_eq!(accept(&mut g, 11, 1), Ok(()));
        assert_eq!(g.incarnation(N, 0), Some(11));
        assert_eq!(accept(&mut g, 10, 501), Err(CclDrop::StaleIncarnation));
        assert_eq!(accept(&mut g, 11, 1), Err(CclDrop::Replay));
    }

    #[test]
    fn streams_are_independent() {
        let mut g = ReplayGuard::new();
        g.commit(N, 0, 1, 5).unwrap();
        assert_eq!(g.commit(N, CONTROL_CHANNEL, 1, 5), Ok(()));
        assert_eq!(g.commit(NodeId(3), 0, 1, 5), Ok(()));
        assert_eq!(g.commit(N, 31, 1, 5), Ok(()));
        assert_eq!(g.commit(N, 32, 1, 5), Err(CclDrop::TooManyChannels));
        assert_eq!(g.commit(N, 254, 1, 5), Err(CclDrop::TooManyChannels));
        assert_eq!(g.commit(NodeId(16), 0, 1, 5), Err(CclDrop::BadSender));
        g.forget(N);
        assert_eq!(g.top(N, 0), None);
        assert_eq!(g.top(NodeId(3), 0), Some(5));
    }

    proptest! {
        /// Against a model (a set of accepted numbers and the highest):
        /// every number is accepted at most once, 0 never, and a fresh
        /// number within the window of the highest is always accepted;
        /// `check` agrees with `commit`.
        #[test]
        fn matches_model(seqs in proptest::collection::vec(0u64..12_000, 1..600)) {
            let mut g = ReplayGuard::new();
            let mut seen = std::collections::BTreeSet::new();
            let mut top = 0u64;
            for s in seqs {
                let checked = g.check(N, 0, 1, s);
                let r = accept(&mut g, 1, s);
                prop_assert_eq!(checked, r);
                let fresh = s > 0 && (s > top || (top - s < WINDOW && !seen.contains(&s)));
                prop_assert_eq!(r.is_ok(), fresh, "seq {} top {}", s, top);
                if r.is_ok() {
                    seen.insert(s);
                    top = top.max(s);
                }
            }
        }

        /// A stream as the CCL's queues deliver it: mostly in order, some
        /// late by up to a window and a half, now and then a jump (lost
        /// messages), from anywhere in the `u64` range; `check` agrees
        /// with `commit` and both with the model.
        #[test]
        fn reordered_streams_match_the_model(
            start in proptest::prop_oneof![Just(1u64), 1u64..u64::MAX / 2, u64::MAX - 20_000..u64::MAX - 10_000],
            steps in proptest::collection::vec(proptest::prop_oneof![
                8 => 0i64..3,
                3 => -6_000i64..0,
                1 => 0i64..10_000,
            ], 1..800),
        ) {
            let mut g = ReplayGuard::new();
            let mut seen = std::collections::HashSet::new();
            let mut top = 0u64;
            let mut pos = start;
            for d in steps {
                let s = pos.saturating_add_signed(d).max(1);
                pos = pos.max(s).saturating_add(1);
                let checked = g.check(N, 0, 1, s);
                let r = accept(&mut g, 1, s);
                prop_assert_eq!(checked, r);
                let fresh = !seen.contains(&s) && (top == 0 || s > top || top - s < WINDOW);
                prop_assert_eq!(r.is_ok(), fresh, "seq {} top {}", s, top);
                if r.is_ok() {
                    seen.insert(s);
                    top = top.max(s);
                }
            }
        }
    }
}
