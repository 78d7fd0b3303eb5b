//! A fixed pool of frame slots, generic over what its user keeps about a
//! parked frame, plus `SlotBuf`, the `PacketBuf` over one slot.
//!
//! Four users on the packet path each own one pool: the cluster path
//! (frames waiting for an owner reply, generated CCL messages, frames of
//! received batches), the fragment path (released held fragments), the
//! ARP hold (frames waiting for their next hop's MAC) and the SYN proxy's
//! hold (client segments waiting for their connection's splice). Each
//! picks its own metadata type `M` for a parked slot (`Parked(M)`); the
//! pool knows nothing about clusters, fragments, ARP or the proxy.
//!
//! A slot is in exactly one state:
//! - `Free`: on the free list;
//! - `Parked(M)`: holding a frame that waits for something its user tracks
//!   (`parked()` counts these);
//! - `Out(port)`: queued for the driver, in order, until `drain`.
//!
//! A slot taken by `alloc` is still `Free` in state but off the free list:
//! its user fills it and then parks it, queues it (`push_out`) or hands it
//! back (`give_back`).
//!
//! Invariants: all slots and their boxes (`slot_len` bytes each, at least
//! `SLOT_LEN`) are allocated by `new`, and nothing allocates afterwards
//! (the free list and out queue are
//! reserved for every slot); a slot's box is moved out (`take`) only while
//! its frame is processed and is put back before the slot changes state; no
//! operation panics on a bad slot index (it is ignored, or `None`).

use crate::buf::PacketBuf;
use crate::types::PortId;

/// Bytes per slot at least: a 1522-byte frame wrapped in a CCL datagram
/// fits. A pipeline whose interfaces have larger MTUs gives its pools
/// larger slots (`slot_len_for`).
pub const SLOT_LEN: usize = 2048;

/// The slot length that holds a frame of `max_frame` bytes (L2 header
/// included) at `SLOT_HEADROOM` with `tail` more bytes behind it (a
/// CCL MAC tag), rounded up to 64 bytes: `SLOT_LEN` at least.
pub fn slot_len_for(max_frame: usize, tail: usize) -> usize {
    (SLOT_HEADROOM + max_frame + tail).div_ceil(64).saturating_mul(64).max(SLOT_LEN)
}
/// Where a slot's frame starts when it is filled: room to wrap it in a CCL
/// datagram (92 bytes of headers and a few more) or add a VLAN tag.
pub const SLOT_HEADROOM: usize = 192;

/// The state of one slot (module docs).
#[derive(Copy, Clone, Debug)]
pub(crate) enum SlotState<M> {
    Free,
    Parked(M),
    Out(PortId),
}

struct Slot<M> {
    state: SlotState<M>,
    start: usize,
    len: usize,
    buf: Option<SlotMem>,
}

/// A slot's buffer while it is out of the pool (`take` / `put_back`).
pub(crate) type SlotMem = Box<[u8]>;

pub(crate) struct FramePool<M> {
    slots: Vec<Slot<M>>,
    /// Two tags per slot that its user may give a parked slot
    /// (`park_tagged`), 0 otherwise: finding the parked slots of one tag
    /// (`tagged`) scans this dense array, not the slots.
    tags: Vec<[u32; 2]>,
    free: Vec<u16>,
    /// Slots to hand to the driver, in order.
    out: Vec<u16>,
    parked: usize,
    slot_len: usize,
}

impl<M: Copy> FramePool<M> {
    /// `n` slots (at most 65535) of `slot_len` bytes (at least
    /// `SLOT_LEN`), all free; slot 0 is handed out first.
    pub fn new(n: usize, slot_len: usize) -> Self {
        let n = n.min(usize::from(u16::MAX));
        let slot_len = slot_len.max(SLOT_LEN);
        FramePool {
            slots: (0..n)
                .map(|_| Slot { state: SlotState::Free, start: 0, len: 0, buf: Some(vec![0u8; slot_len].into_boxed_slice()) })
                .collect(),
            tags: vec![[0; 2]; n],
            free: (0..n as u16).rev().collect(),
            out: Vec::with_capacity(n),
            parked: 0,
            slot_len,
        }
    }
    /// Bytes per slot.
    pub fn slot_len(&self) -> usize {
        self.slot_len
    }
    /// Number of slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }
    /// Slots in `Parked` state now.
    pub fn parked(&self) -> usize {
        self.parked
    }
    /// Slots on the free list now.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }
    /// A free slot, off the free list (still `Free` in state).
    pub fn alloc(&mut self) -> Option<u16> {
        self.free.pop()
    }
    /// Copy `frame` into slot `i` at `SLOT_HEADROOM` and make it the slot's
    /// contents. `false` (nothing written) when it does not fit.
    pub fn fill(&mut self, i: u16, frame: &[u8]) -> bool {
        let Some(s) = self.slots.get_mut(usize::from(i)) else {
            return false;
        };
        let Some(dst) = s.buf.as_deref_mut().and_then(|b| b.get_mut(SLOT_HEADROOM..SLOT_HEADROOM + frame.len())) else {
            return false;
        };
        dst.copy_from_slice(frame);
        s.start = SLOT_HEADROOM;
        s.len = frame.len();
        true
    }
    /// Slot `i`'s whole buffer, to build a frame in place; `set_frame`
    /// then says where it is.
    pub fn mem_mut(&mut self, i: u16) -> Option<&mut [u8]> {
        self.slots.get_mut(usize::from(i))?.buf.as_deref_mut()
    }
    /// The slot's frame is `len` bytes at `start` (within the slot).
    pub fn set_frame(&mut self, i: u16, start: usize, len: usize) {
        let slot_len = self.slot_len;
        if let Some(s) = self.slots.get_mut(usize::from(i)) {
            if start.checked_add(len).is_some_and(|e| e <= slot_len) {
                s.start = start;
                s.len = len;
            }
        }
    }
    /// The slot's frame bytes.
    #[cfg(test)]
    pub fn frame(&self, i: u16) -> Option<&[u8]> {
        let s = self.slots.get(usize::from(i))?;
        s.buf.as_deref()?.get(s.start..s.start + s.len)
    }
    /// The slot's frame bytes, mutable.
    pub fn frame_mut(&mut self, i: u16) -> Option<&mut [u8]> {
        let s = self.slots.get_mut(usize::from(i))?;
        let (start, len) = (s.start, s.len);
        s.buf.as_deref_mut()?.get_mut(start..start + len)
    }
    /// Move slot `i`'s buffer out with its frame's bounds `(start, end)`,
    /// to process it as a `SlotBuf` while the pool is borrowed elsewhere;
    /// `put_back` returns it.
    pub fn take(&mut self, i: u16) -> Option<(SlotMem, usize, usize)> {
        let s = self.slots.get_mut(usize::from(i))?;
        Some((s.buf.take()?, s.start, s.start + s.len))
    }
    /// Return a buffer from `take`, its frame now at `start..end`.
    pub fn put_back(&mut self, i: u16, buf: SlotMem, start: usize, end: usize) {
        if let Some(s) = self.slots.get_mut(usize::from(i)) {
            s.buf = Some(buf);
            s.start = start;
            s.len = end - start;
        }
    }
    /// Return a slot from `alloc` that was never parked or queued.
    pub fn give_back(&mut self, i: u16) {
        if self.slots.get(usize::from(i)).is_some_and(|s| matches!(s.state, SlotState::Free)) {
            self.free.push(i);
        }
    }
    /// Free a parked or queued slot.
    pub fn release(&mut self, i: u16) {
        self.untag(i);
        if let Some(s) = self.slots.get_mut(usize::from(i)) {
            if let SlotState::Parked(_) = s.state {
                self.parked = self.parked.saturating_sub(1);
            }
            if !matches!(s.state, SlotState::Free) {
                s.state = SlotState::Free;
                self.free.push(i);
            }
        }
    }
    fn untag(&mut self, i: u16) {
        if let Some(t) = self.tags.get_mut(usize::from(i)) {
            *t = [0; 2];
        }
    }
    /// Park slot `i` with `meta` and the tags `tags` (each nonzero to be
    /// found by `tagged`); a parked slot gets new metadata and tags.
    pub fn park_tagged(&mut self, i: u16, meta: M, tags: [u32; 2]) {
        self.park(i, meta);
        if let Some(t) = self.tags.get_mut(usize::from(i)) {
            *t = tags;
        }
    }
    /// The parked slots whose tag `which` (0 or 1) is `tag` (nonzero), from
    /// slot `from` on, in slot order.
    pub fn tagged(&self, which: usize, tag: u32, from: usize) -> impl Iterator<Item = u16> + '_ {
        let which = which.min(1);
        self.tags.iter().enumerate().skip(from).filter(move |(_, t)| tag != 0 && t[which] == tag).map(|(i, _)| i as u16)
    }
    /// Park slot `i` with `meta` (a parked slot gets new metadata; its
    /// tags are cleared).
    pub fn park(&mut self, i: u16, meta: M) {
        self.untag(i);
        if let Some(s) = self.slots.get_mut(usize::from(i)) {
            if !matches!(s.state, SlotState::Parked(_)) {
                self.parked += 1;
            }
            s.state = SlotState::Parked(meta);
        }
    }
    /// What slot `i` is parked with, if it is parked.
    pub fn parked_meta(&self, i: u16) -> Option<M> {
        match self.slots.get(usize::from(i))?.state {
            SlotState::Parked(m) => Some(m),
            _ => None,
        }
    }
    /// Every parked slot with its metadata, in slot order.
    pub fn parked_slots(&self) -> impl Iterator<Item = (u16, M)> + '_ {
        self.slots.iter().enumerate().filter_map(|(i, s)| match s.state {
            SlotState::Parked(m) => Some((i as u16, m)),
            _ => None,
        })
    }
    /// Queue slot `i` for output on `port`.
    pub fn push_out(&mut self, i: u16, port: PortId) {
        self.untag(i);
        if let Some(s) = self.slots.get_mut(usize::from(i)) {
            if let SlotState::Parked(_) = s.state {
                self.parked = self.parked.saturating_sub(1);
            }
            s.state = SlotState::Out(port);
            self.out.push(i);
        }
    }
    /// Hand the frames queued for output to `f`, in order, and free their
    /// slots.
    pub fn drain(&mut self, f: &mut impl FnMut(PortId, &[u8])) {
        for &i in &self.out {
            let Some(s) = self.slots.get(usize::from(i)) else {
                continue;
            };
            let (SlotState::Out(port), Some(b)) = (s.state, s.buf.as_deref()) else {
                continue;
            };
            let Some(frame) = b.get(s.start..s.start + s.len) else {
                continue;
            };
            f(port, frame);
        }
        for k in 0..self.out.len() {
            if let Some(&i) = self.out.get(k) {
                self.release(i);
            }
        }
        self.out.clear();
    }
    /// Free every slot (parked, queued or taken by `alloc`), dropping
    /// their frames; buffers moved out by `take` stay with their taker.
    /// Keeps the reserved memory.
    pub fn clear(&mut self) {
        for s in &mut self.slots {
            s.state = SlotState::Free;
        }
        self.tags.fill([0; 2]);
        self.free.clear();
        self.free.extend((0..self.slots.len() as u16).rev());
        self.out.clear();
        self.parked = 0;
    }
    /// Bytes the slots reserve.
    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * self.slot_len
    }
}

/// A `PacketBuf` over a slot's bytes, `[start, end)` in use.
pub(crate) struct SlotBuf<'a> {
    pub mem: &'a mut [u8],
    pub start: usize,
    pub end: usize,
}

impl<'a> SlotBuf<'a> {
    /// The frame of a buffer taken out of a pool (`FramePool::take`).
    pub fn over(mem: &'a mut SlotMem, start: usize, end: usize) -> Self {
        SlotBuf { mem: &mut mem[..], start, end }
    }
}

impl PacketBuf for SlotBuf<'_> {
    fn data(&self) -> &[u8] {
        self.mem.get(self.start..self.end).unwrap_or(&[])
    }
    fn data_mut(&mut self) -> &mut [u8] {
        self.mem.get_mut(self.start..self.end).unwrap_or(&mut [])
    }
    fn prepend(&mut self, n: usize) -> bool {
        if n > self.start {
            return false;
        }
        self.start -= n;
        true
    }
    fn trim_front(&mut self, n: usize) -> bool {
        if n > self.end - self.start {
            return false;
        }
        self.start += n;
        true
    }
    fn append(&mut self, n: usize) -> bool {
        if n > self.mem.len() - self.end {
            return false;
        }
        self.end += n;
        true
    }
    fn trim_back(&mut self, n: usize) -> bool {
        if n > self.end - self.start {
            return false;
        }
        self.end -= n;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_and_counts() {
        let mut p: FramePool<u32> = FramePool::new(4, SLOT_LEN);
        assert_eq!((p.len(), p.free_slots(), p.parked()), (4, 4, 0));
        let a = p.alloc().unwrap();
        assert_eq!(a, 0, "slot 0 first");
        assert!(p.fill(a, &[1, 2, 3]));
        p.park(a, 7);
        p.park(a, 8);
        assert_eq!(p.parked(), 1, "re-parking does not count twice");
        assert_eq!(p.parked_meta(a), Some(8));
        let b = p.alloc().unwrap();
        assert!(p.fill(b, &[9]));
        p.push_out(b, PortId(3));
        p.push_out(a, PortId(1));
        assert_eq!(p.parked(), 0, "queued for output is not parked");
        let mut out = Vec::new();
        p.drain(&mut |port, f| out.push((port, f.to_vec())));
        assert_eq!(out, vec![(PortId(3), vec![9]), (PortId(1), vec![1, 2, 3])]);
        assert_eq!(p.free_slots(), 4);
        p.drain(&mut |_, _| panic!("drained twice"));
    }

    #[test]
    fn tags_find_parked_slots_until_they_change_state() {
        let mut p: FramePool<u32> = FramePool::new(6, SLOT_LEN);
        let s: Vec<u16> = (0..5).map(|_| p.alloc().unwrap()).collect();
        p.park_tagged(s[0], 1, [7, 100]);
        p.park_tagged(s[1], 2, [7, 200]);
        p.park_tagged(s[2], 3, [8, 100]);
        p.park(s[3], 4);
        let found = |p: &FramePool<u32>, w, t, from| p.tagged(w, t, from).collect::<Vec<u16>>();
        assert_eq!(found(&p, 0, 7, 0), vec![s[0], s[1]]);
        assert_eq!(found(&p, 0, 7, usize::from(s[0]) + 1), vec![s[1]], "from a slot on");
        assert_eq!(found(&p, 1, 100, 0), vec![s[0], s[2]]);
        assert!(found(&p, 0, 0, 0).is_empty(), "tag 0 is no tag");
        // Re-parking untagged clears the tags; released, queued or cleared
        // slots are found no more; a slot never parked takes no tags.
        p.park(s[1], 5);
        assert_eq!(found(&p, 0, 7, 0), vec![s[0]]);
        p.release(s[0]);
        assert!(found(&p, 0, 7, 0).is_empty());
        assert!(p.fill(s[2], &[1]));
        p.push_out(s[2], PortId(0));
        assert!(found(&p, 1, 100, 0).is_empty());
        p.park_tagged(s[1], 6, [9, 9]);
        p.clear();
        assert!(found(&p, 0, 9, 0).is_empty());
        p.park_tagged(9, 1, [1, 1]);
        assert!(found(&p, 0, 1, 0).is_empty(), "a bad index is ignored");
    }

    #[test]
    fn bad_indices_and_oversized_frames_are_refused() {
        let mut p: FramePool<()> = FramePool::new(2, SLOT_LEN);
        assert!(!p.fill(9, &[0]));
        p.park(9, ());
        p.release(9);
        p.push_out(9, PortId(0));
        p.give_back(9);
        assert!(p.take(9).is_none());
        let i = p.alloc().unwrap();
        assert!(!p.fill(i, &[0u8; SLOT_LEN - SLOT_HEADROOM + 1]));
        assert!(p.fill(i, &[0u8; SLOT_LEN - SLOT_HEADROOM]));
        p.set_frame(i, SLOT_LEN, 1);
        assert_eq!(p.frame(i).map(<[u8]>::len), Some(SLOT_LEN - SLOT_HEADROOM), "out-of-range bounds ignored");
        p.give_back(i);
        assert_eq!(p.free_slots(), 2);
        p.drain(&mut |_, _| panic!("nothing queued"));
    }

    #[test]
    fn take_and_put_back_move_the_frame() {
        let mut p: FramePool<()> = FramePool::new(1, SLOT_LEN);
        let i = p.alloc().unwrap();
        assert!(p.fill(i, &[1, 2, 3, 4]));
        let (mut mem, s, e) = p.take(i).unwrap();
        assert!(p.take(i).is_none(), "out while taken");
        let mut b = SlotBuf::over(&mut mem, s, e);
        assert!(b.trim_front(1) && b.prepend(1) && b.trim_back(2));
        assert_eq!(b.data(), &[1, 2]);
        let (s, e) = (b.start, b.end);
        p.put_back(i, mem, s, e);
        assert_eq!(p.frame(i), Some(&[1u8, 2][..]));
    }
}
