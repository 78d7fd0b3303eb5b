//! Anti-replay windows, one per (sender node, channel), in the style of
//! RFC 4303 §3.4.3 with a 128-bit bitmap.
//!
//! Each window remembers the sender's incarnation, the highest sequence
//! number accepted (`top`) and which of `top − 127 ..= top` were seen. A
//! higher incarnation (the sender restarted) resets the window; a lower one
//! is refused as stale.
//!
//! Invariants: the table is allocated once (16 nodes × 33 channels) and
//! never grows; `check` never mutates, and the caller `commit`s only after
//! the MAC verified (RFC 4303 §3.4.3: "the receive window is updated only
//! if the integrity verification succeeds"), so forged messages cannot
//! move a window. Sequence 0 is never valid (senders start at 1).

use super::{CclDrop, CONTROL_CHANNEL, MAX_WORKER_CHANNELS};
use crate::NodeId;

/// Width of the window in sequence numbers.
pub const WINDOW: u64 = 128;

/// Channels with a window per node: workers 0..=31 and the control lcore.
const CHANNELS: usize = MAX_WORKER_CHANNELS as usize + 1;

#[derive(Copy, Clone, Debug, Default)]
struct Window {
    known: bool,
    incarnation: u32,
    top: u64,
    /// Bit i set: `top - i` was accepted.
    seen: u128,
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
    /// Windows for `NodeId::MAX_NODES` senders × 33 channels (≈ 21 KiB).
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
        let age = w.top - seq;
        if age >= WINDOW || w.seen & (1u128 << age) != 0 {
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
            *w = Window { known: true, incarnation, top: seq, seen: 1 };
        } else if seq > w.top {
            let shift = seq - w.top;
            w.seen = if shift >= WINDOW { 0 } else { w.seen << shift };
            w.seen |= 1;
            w.top = seq;
        } else {
            w.seen |= 1u128 << (w.top - seq);
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
        accept(&mut g, 1, 200).unwrap();
        assert_eq!(accept(&mut g, 1, 73), Ok(())); // age 127: last slot of the window
        assert_eq!(accept(&mut g, 1, 73), Err(CclDrop::Replay));
        assert_eq!(accept(&mut g, 1, 72), Err(CclDrop::Replay)); // age 128: too old
        assert_eq!(accept(&mut g, 1, 150), Ok(()));
        assert_eq!(accept(&mut g, 1, 150), Err(CclDrop::Replay));
        // A jump beyond the window clears it.
        assert_eq!(accept(&mut g, 1, 1000), Ok(()));
        assert_eq!(accept(&mut g, 1, 999), Ok(()));
        assert_eq!(accept(&mut g, 1, 872), Err(CclDrop::Replay));
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
        /// Against a model (a set of accepted numbers): every number is
        /// accepted at most once, and a fresh number within the window of
        /// the highest is always accepted.
        #[test]
        fn matches_model(seqs in proptest::collection::vec(1u64..400, 1..300)) {
            let mut g = ReplayGuard::new();
            let mut seen = std::collections::HashSet::new();
            let mut top = 0u64;
            for s in seqs {
                let r = accept(&mut g, 1, s);
                let fresh = !seen.contains(&s) && (s > top || top - s < WINDOW);
                prop_assert_eq!(r.is_ok(), fresh, "seq {} top {}", s, top);
                if r.is_ok() {
                    seen.insert(s);
                    top = top.max(s);
                }
            }
        }
    }
}
