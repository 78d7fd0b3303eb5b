//! A fixed pool of frame slots: frames waiting for an owner reply
//! (pending) or for an ARP reply (held, `arphold`) and frames generated for
//! the driver (out queue), plus `SlotBuf`, the `PacketBuf` over one slot.
//!
//! Invariants: all slots and their 2 KiB boxes are allocated by `new`; a
//! slot is free, pending, held or queued for output, never two of these; its box
//! is moved out (`take`) only while its frame is processed and is put back
//! before the slot changes state; at most `MAX_PENDING` slots are pending,
//! so generated control messages always find room for the rest.

use super::{Via, MAX_PENDING, SLOT_LEN};
use crate::buf::PacketBuf;
use crate::fragpath::FragNote;
use crate::pipeline::PortCounters;
use crate::route::IfIndex;
use crate::types::{FiveTuple, PortId, Timestamp};
use std::net::Ipv4Addr;

/// Where a slot's frame starts when it is parked: room to wrap it in a CCL
/// datagram (92 bytes of headers and a few more) or add a VLAN tag.
pub const SLOT_HEADROOM: usize = 192;

#[derive(Copy, Clone, Debug)]
pub(crate) enum SlotState {
    Free,
    Pending {
        query_id: u32,
        /// Canonical flow key (queries are coalesced by flow).
        key: FiveTuple,
        deadline: Timestamp,
        in_port: PortId,
        via: Via,
        /// Ingress interface (for wrapping the frame).
        ifx: IfIndex,
        /// A fragment already accounted for by the reassembler, with its
        /// datagram's L4 header and tuple (`Rx::frag`).
        frag: Option<FragNote>,
    },
    Out {
        port: PortId,
    },
    /// Waiting for the ARP reply of `next_hop` (`arphold`), to leave on
    /// `port`; `seq` orders the held frames by arrival.
    Held {
        next_hop: Ipv4Addr,
        port: PortId,
        deadline: Timestamp,
        seq: u64,
    },
}

pub(crate) struct Slot {
    pub state: SlotState,
    pub start: usize,
    pub len: usize,
    pub buf: Option<Box<[u8; SLOT_LEN]>>,
}

pub(crate) struct FramePool {
    pub slots: Vec<Slot>,
    free: Vec<u16>,
    /// Slots to hand to the driver, in order.
    pub out: Vec<u16>,
    pending: usize,
}

impl FramePool {
    pub fn new(n: usize) -> Self {
        let n = n.min(usize::from(u16::MAX));
        FramePool {
            slots: (0..n)
                .map(|_| Slot { state: SlotState::Free, start: 0, len: 0, buf: Some(Box::new([0u8; SLOT_LEN])) })
                .collect(),
            free: (0..n as u16).rev().collect(),
            out: Vec::with_capacity(n),
            pending: 0,
        }
    }
    pub fn pending(&self) -> usize {
        self.pending
    }
    /// No room to park a frame (and send the query that goes with it).
    pub fn pending_full(&self) -> bool {
        self.pending >= MAX_PENDING || self.free.len() < 2
    }
    /// A free slot for a generated frame (the pending share excluded).
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
    /// Move slot `i`'s buffer out with its frame's bounds `(start, end)`,
    /// to process it as a `SlotBuf` while the pool is borrowed elsewhere;
    /// `put_back` returns it.
    pub fn take(&mut self, i: u16) -> Option<(Box<[u8; SLOT_LEN]>, usize, usize)> {
        let s = self.slots.get_mut(usize::from(i))?;
        Some((s.buf.take()?, s.start, s.start + s.len))
    }
    /// Return a buffer from `take`, its frame now at `start..end`.
    pub fn put_back(&mut self, i: u16, buf: Box<[u8; SLOT_LEN]>, start: usize, end: usize) {
        if let Some(s) = self.slots.get_mut(usize::from(i)) {
            s.buf = Some(buf);
            s.start = start;
            s.len = end - start;
        }
    }
    /// Return a slot from `alloc` that was never used.
    pub fn give_back(&mut self, i: u16) {
        if self.slots.get(usize::from(i)).is_some_and(|s| matches!(s.state, SlotState::Free)) {
            self.free.push(i);
        }
    }
    pub fn release(&mut self, i: u16) {
        if let Some(s) = self.slots.get_mut(usize::from(i)) {
            if let SlotState::Pending { .. } = s.state {
                self.pending = self.pending.saturating_sub(1);
            }
            if !matches!(s.state, SlotState::Free) {
                s.state = SlotState::Free;
                self.free.push(i);
            }
        }
    }
    pub fn set_pending(&mut self, i: u16, st: SlotState) {
        if let Some(s) = self.slots.get_mut(usize::from(i)) {
            if !matches!(s.state, SlotState::Pending { .. }) {
                self.pending += 1;
            }
            s.state = st;
        }
    }
    /// Queue slot `i` for output on `port`.
    pub fn push_out(&mut self, i: u16, port: PortId) {
        if let Some(s) = self.slots.get_mut(usize::from(i)) {
            if let SlotState::Pending { .. } = s.state {
                self.pending = self.pending.saturating_sub(1);
            }
            s.state = SlotState::Out { port };
            self.out.push(i);
        }
    }
    /// Hand the frames queued for output to `f`, in order (counted as
    /// transmitted on their port), and free their slots.
    pub fn drain(&mut self, ports: &mut [PortCounters], f: &mut impl FnMut(PortId, &[u8])) {
        for &i in &self.out {
            let Some(s) = self.slots.get(usize::from(i)) else {
                continue;
            };
            let (SlotState::Out { port }, Some(b)) = (s.state, s.buf.as_deref()) else {
                continue;
            };
            let Some(frame) = b.get(s.start..s.start + s.len) else {
                continue;
            };
            if let Some(pc) = ports.get_mut(usize::from(port.0)) {
                pc.tx_packets += 1;
                pc.tx_bytes += frame.len() as u64;
            }
            f(port, frame);
        }
        for k in 0..self.out.len() {
            if let Some(&i) = self.out.get(k) {
                self.release(i);
            }
        }
        self.out.clear();
    }
    /// The query pending for `key`, if any.
    pub fn pending_query(&self, key: &FiveTuple) -> Option<u32> {
        if self.pending == 0 {
            return None;
        }
        self.slots.iter().find_map(|s| match s.state {
            SlotState::Pending { query_id, key: k, .. } if k == *key => Some(query_id),
            _ => None,
        })
    }
}

/// A `PacketBuf` over a slot's bytes, `[start, end)` in use.
pub(crate) struct SlotBuf<'a> {
    pub mem: &'a mut [u8],
    pub start: usize,
    pub end: usize,
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
