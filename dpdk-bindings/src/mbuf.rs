//! Owned packet buffers ([`Mbuf`]) and fixed-capacity bursts of them
//! ([`MbufBurst`]).
//!
//! Invariants:
//! - An `Mbuf` is a non-NULL pointer to a *direct* mbuf (it owns its data
//!   buffer; no clones or attached buffers are created by this crate) that no
//!   one else references. It is freed exactly once: by `Drop`
//!   (`rte_pktmbuf_free`, all segments), by a burst's batched free, or by
//!   the PMD after a successful TX. [`Mbuf::into_raw`] opts out.
//! - `Mbuf` is `#[repr(transparent)]` over `NonNull<rte_mbuf>`, so a run of
//!   initialised `*mut rte_mbuf` slots is also a valid `[Mbuf]`: that is how
//!   bursts are handed to DPDK and back without copying.
//! - `MbufBurst<N>` holds `len <= N` owned mbufs in `slots[..len]`; slots
//!   past `len` hold no ownership. It never allocates after construction and
//!   frees what it still holds in one `rte_pktmbuf_free_bulk`.
//! - Data accessors look at the first segment only; RX on the PMDs used here
//!   yields single-segment mbufs ([`Mbuf::is_contiguous`],
//!   [`Mbuf::linearize`]).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::slice;

use crate::ffi;

/// Default burst capacity (what the poll loops use).
pub const BURST_SIZE: usize = 64;
/// A burst of the default capacity.
pub type Burst = MbufBurst<BURST_SIZE>;

/// One owned packet buffer (possibly a chain of segments).
#[repr(transparent)]
pub struct Mbuf {
    raw: NonNull<ffi::rte_mbuf>,
}

// SAFETY: an Mbuf is the only reference to its mbuf; freeing it from another
// thread returns it to a thread-safe (MP/MC) mempool.
unsafe impl Send for Mbuf {}
// SAFETY: `&Mbuf` only reads the mbuf; there is no interior mutability.
unsafe impl Sync for Mbuf {}

impl Mbuf {
    /// Takes ownership of a raw mbuf; `None` for NULL.
    ///
    /// # Safety
    /// `raw` must be NULL or point to a valid, direct, single-owner mbuf that
    /// nothing else will use or free afterwards.
    #[inline]
    pub unsafe fn from_raw(raw: *mut ffi::rte_mbuf) -> Option<Mbuf> {
        NonNull::new(raw).map(|raw| Mbuf { raw })
    }

    /// Gives up ownership without freeing; the caller must free or transmit
    /// the mbuf (or rebuild an `Mbuf` with [`Mbuf::from_raw`]).
    #[inline]
    pub fn into_raw(self) -> *mut ffi::rte_mbuf {
        let p = self.raw.as_ptr();
        std::mem::forget(self);
        p
    }

    /// The raw pointer, still owned by `self`.
    #[inline]
    pub fn as_ptr(&self) -> *mut ffi::rte_mbuf {
        self.raw.as_ptr()
    }

    #[inline]
    fn m(&self) -> &ffi::rte_mbuf {
        // SAFETY: the pointer is valid and exclusively ours while self lives.
        unsafe { self.raw.as_ref() }
    }

    #[inline]
    fn m_mut(&mut self) -> &mut ffi::rte_mbuf {
        // SAFETY: as in `m`, and `&mut self` makes the access exclusive.
        unsafe { self.raw.as_mut() }
    }

    /// Bytes in the first segment (`data_len`).
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.m().data_len)
    }

    /// Whether the first segment holds no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.m().data_len == 0
    }

    /// Bytes in the whole packet, all segments (`pkt_len`).
    #[inline]
    pub fn pkt_len(&self) -> u32 {
        self.m().pkt_len
    }

    /// Number of segments.
    #[inline]
    pub fn nb_segs(&self) -> u16 {
        self.m().nb_segs
    }

    /// Whether all data is in the first segment.
    #[inline]
    pub fn is_contiguous(&self) -> bool {
        self.m().nb_segs == 1
    }

    /// The first segment's data.
    #[inline]
    pub fn data(&self) -> &[u8] {
        let m = self.m();
        // SAFETY: buf_addr + data_off .. + data_len lies inside the mbuf's
        // data buffer (DPDK invariant); we own the mbuf, and the borrow of
        // self keeps it alive and unmodified.
        unsafe {
            slice::from_raw_parts(
                m.buf_addr.cast::<u8>().add(usize::from(m.data_off)),
                usize::from(m.data_len),
            )
        }
    }

    /// The first segment's data, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let m = self.m_mut();
        // SAFETY: as in `data`; the mbuf is direct (it owns its buffer) and
        // `&mut self` is exclusive.
        unsafe {
            slice::from_raw_parts_mut(
                m.buf_addr.cast::<u8>().add(usize::from(m.data_off)),
                usize::from(m.data_len),
            )
        }
    }

    /// Free bytes in front of the data.
    #[inline]
    pub fn headroom(&self) -> u16 {
        self.m().data_off
    }

    /// Free bytes after the data of the last segment.
    #[inline]
    pub fn tailroom(&self) -> u16 {
        // SAFETY: valid owned mbuf; reads only.
        unsafe { ffi::rte_pktmbuf_tailroom(self.raw.as_ptr()) }
    }

    /// Grows the packet by `n` bytes at the front (`rte_pktmbuf_prepend`)
    /// and returns them (uninitialised contents: whatever was there), or
    /// `None` if the headroom is too small.
    #[inline]
    pub fn prepend(&mut self, n: u16) -> Option<&mut [u8]> {
        // SAFETY: valid owned mbuf; DPDK checks the headroom.
        let p = unsafe { ffi::rte_pktmbuf_prepend(self.raw.as_ptr(), n) };
        if p.is_null() {
            return None;
        }
        // SAFETY: p points at the n new bytes at the front of the data,
        // inside the buffer; the slice borrows self mutably.
        Some(unsafe { slice::from_raw_parts_mut(p.cast::<u8>(), usize::from(n)) })
    }

    /// Removes `n` bytes from the front (`rte_pktmbuf_adj`); false (and no
    /// change) if the first segment is shorter than `n`.
    #[inline]
    pub fn adj(&mut self, n: u16) -> bool {
        // SAFETY: valid owned mbuf; DPDK checks the length.
        !unsafe { ffi::rte_pktmbuf_adj(self.raw.as_ptr(), n) }.is_null()
    }

    /// Grows the packet by `n` bytes at the end of the last segment
    /// (`rte_pktmbuf_append`) and returns them, or `None` if the tailroom is
    /// too small.
    #[inline]
    pub fn append(&mut self, n: u16) -> Option<&mut [u8]> {
        // SAFETY: valid owned mbuf; DPDK checks the tailroom.
        let p = unsafe { ffi::rte_pktmbuf_append(self.raw.as_ptr(), n) };
        if p.is_null() {
            return None;
        }
        // SAFETY: p points at the n new bytes at the end of the last
        // segment, inside its buffer; the slice borrows self mutably.
        Some(unsafe { slice::from_raw_parts_mut(p.cast::<u8>(), usize::from(n)) })
    }

    /// Removes `n` bytes from the end of the last segment
    /// (`rte_pktmbuf_trim`); false (and no change) if it is shorter.
    #[inline]
    pub fn trim(&mut self, n: u16) -> bool {
        // SAFETY: valid owned mbuf; DPDK checks the length.
        unsafe { ffi::rte_pktmbuf_trim(self.raw.as_ptr(), n) == 0 }
    }

    /// Copies a multi-segment packet into its first segment
    /// (`rte_pktmbuf_linearize`); false if it does not fit.
    pub fn linearize(&mut self) -> bool {
        // SAFETY: valid owned mbuf; segments freed by DPDK were ours.
        unsafe { ffi::rte_pktmbuf_linearize(self.raw.as_ptr()) == 0 }
    }

    /// Empties the packet and restores the default headroom and metadata
    /// (`rte_pktmbuf_reset`), for reusing a buffer. Frees nothing: a chained
    /// packet is first cut to its first segment by freeing the rest.
    pub fn reset(&mut self) {
        let m = self.m_mut();
        if !m.next.is_null() {
            let next = m.next;
            m.next = std::ptr::null_mut();
            // SAFETY: the rest of the chain belongs to this packet only.
            unsafe { ffi::rte_pktmbuf_free(next) };
        }
        // SAFETY: valid owned mbuf, now a single segment.
        unsafe { ffi::rte_pktmbuf_reset(self.raw.as_ptr()) };
    }

    /// The port the packet was received on (`port` field), as set by the
    /// PMD on RX (hardware PMDs, net_null, net_af_packet, net_pcap do;
    /// net_ring passes mbufs through unchanged). Otherwise whatever was set
    /// with [`Mbuf::set_port`], or `u16::MAX` (`RTE_MBUF_PORT_INVALID`) for
    /// a fresh mbuf.
    #[inline]
    pub fn port(&self) -> u16 {
        self.m().port
    }

    /// Sets the `port` field.
    #[inline]
    pub fn set_port(&mut self, port: u16) {
        self.m_mut().port = port;
    }

    /// The RSS hash the NIC computed, if it did (`RTE_MBUF_F_RX_RSS_HASH`).
    #[inline]
    pub fn rss_hash(&self) -> Option<u32> {
        let m = self.m();
        if m.ol_flags & u64::from(ffi::RTE_MBUF_F_RX_RSS_HASH) != 0 {
            // SAFETY: with RX_RSS_HASH set, the hash union holds `rss`; any
            // bit pattern is a valid u32 anyway.
            Some(unsafe { m.__bindgen_anon_2.hash.rss })
        } else {
            None
        }
    }

    /// Offload flags (`ol_flags`, `RTE_MBUF_F_*` bits in [`crate::ffi`]).
    #[inline]
    pub fn ol_flags(&self) -> u64 {
        self.m().ol_flags
    }
}

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we own the mbuf (invariant) and it is freed only here.
        unsafe { ffi::rte_pktmbuf_free(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mbuf")
            .field("ptr", &self.raw)
            .field("len", &self.len())
            .field("pkt_len", &self.pkt_len())
            .field("nb_segs", &self.nb_segs())
            .field("port", &self.port())
            .finish()
    }
}

/// An owned, fixed-capacity array of up to `N` mbufs: what RX fills and TX
/// drains. Dereferences to `[Mbuf]` (the held ones, in order). Allocates
/// nothing after construction; frees in batches.
pub struct MbufBurst<const N: usize = BURST_SIZE> {
    len: usize,
    slots: [*mut ffi::rte_mbuf; N],
}

// SAFETY: the burst owns its mbufs, which are Send.
unsafe impl<const N: usize> Send for MbufBurst<N> {}
// SAFETY: `&MbufBurst` only gives `&[Mbuf]`, and Mbuf is Sync.
unsafe impl<const N: usize> Sync for MbufBurst<N> {}

impl<const N: usize> Default for MbufBurst<N> {
    fn default() -> Self {
        Self::empty()
    }
}

impl MbufBurst<BURST_SIZE> {
    /// An empty burst of the default capacity, [`BURST_SIZE`]. (Defined for
    /// that size only, like `HashMap::new`, so `MbufBurst::new()` needs no
    /// type annotation; other sizes use [`MbufBurst::empty`].)
    pub const fn new() -> Self {
        Self::empty()
    }
}

impl<const N: usize> MbufBurst<N> {
    /// An empty burst of capacity `N`, e.g. `MbufBurst::<32>::empty()`.
    /// `N` must fit in `u16` (DPDK burst counts).
    pub const fn empty() -> Self {
        assert!(N <= u16::MAX as usize, "burst capacity must fit in u16");
        MbufBurst {
            len: 0,
            slots: [std::ptr::null_mut(); N],
        }
    }

    /// `N`.
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Mbufs held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no mbuf is held.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `len() == N`.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == N
    }

    /// `N - len()`.
    #[inline]
    pub fn free_slots(&self) -> usize {
        N - self.len
    }

    /// The held mbufs.
    #[inline]
    pub fn as_slice(&self) -> &[Mbuf] {
        // SAFETY: slots[..len] are owned non-NULL mbuf pointers, and Mbuf is
        // repr(transparent) over NonNull<rte_mbuf>, which has the layout of
        // *mut rte_mbuf.
        unsafe { slice::from_raw_parts(self.slots.as_ptr().cast::<Mbuf>(), self.len) }
    }

    /// The held mbufs, mutably (swapping or replacing elements keeps
    /// ownership sound: every slot always holds exactly one owned mbuf).
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Mbuf] {
        // SAFETY: as in as_slice, with exclusive access through &mut self.
        unsafe { slice::from_raw_parts_mut(self.slots.as_mut_ptr().cast::<Mbuf>(), self.len) }
    }

    /// Adds `m` at the end, or gives it back if the burst is full.
    #[inline]
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        if self.len == N {
            return Err(m);
        }
        self.slots[self.len] = m.into_raw();
        self.len += 1;
        Ok(())
    }

    /// Removes and returns the last mbuf (LIFO: to process a received burst
    /// in arrival order use [`MbufBurst::drain`] or iterate).
    #[inline]
    pub fn pop(&mut self) -> Option<Mbuf> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: slot `len` held an owned mbuf and is now outside the held range.
        unsafe { Mbuf::from_raw(self.slots[self.len]) }
    }

    /// Removes mbuf `i`, moving the last one into its place (O(1), order not
    /// kept). Panics if `i >= len()`.
    #[inline]
    pub fn swap_remove(&mut self, i: usize) -> Mbuf {
        assert!(
            i < self.len,
            "swap_remove index {i} out of range for burst of {}",
            self.len
        );
        let p = self.slots[i];
        self.len -= 1;
        self.slots[i] = self.slots[self.len];
        // SAFETY: p was owned by slot i, which now holds another mbuf (or is
        // outside the held range).
        unsafe { Mbuf::from_raw(p) }.expect("held slots are non-NULL")
    }

    /// Removes mbuf `i`, shifting the later ones down (order kept). Panics
    /// if `i >= len()`.
    pub fn remove(&mut self, i: usize) -> Mbuf {
        assert!(
            i < self.len,
            "remove index {i} out of range for burst of {}",
            self.len
        );
        let p = self.slots[i];
        self.slots.copy_within(i + 1..self.len, i);
        self.len -= 1;
        // SAFETY: p was owned by slot i, which has been overwritten.
        unsafe { Mbuf::from_raw(p) }.expect("held slots are non-NULL")
    }

    /// Frees every held mbuf in one batch (`rte_pktmbuf_free_bulk`).
    #[inline]
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Keeps the first `len` mbufs and frees the rest in one batch.
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        let n = self.len - len;
        self.len = len;
        // SAFETY: slots[len..len + n] held owned mbufs, now outside the held
        // range, so each is freed exactly once; n <= N fits in u32.
        unsafe { ffi::rte_pktmbuf_free_bulk(self.slots.as_mut_ptr().add(len), n as u32) };
    }

    /// Keeps the mbufs for which `keep` returns true (in order) and frees
    /// the others in one batch. The filter step of a poll loop.
    pub fn retain_mut(&mut self, mut keep: impl FnMut(&mut Mbuf) -> bool) {
        let mut w = 0;
        for r in 0..self.len {
            if keep(&mut self.as_mut_slice()[r]) {
                self.slots.swap(w, r);
                w += 1;
            }
        }
        // Rejected mbufs are now in slots[w..len].
        self.truncate(w);
    }

    /// Removes all mbufs, yielding them in order. Mbufs the iterator did not
    /// yield are freed in one batch when it is dropped.
    pub fn drain(&mut self) -> Drain<'_, N> {
        let end = self.len;
        self.len = 0;
        Drain {
            burst: self,
            pos: 0,
            end,
        }
    }

    /// Moves as many mbufs as fit from the front of `other` to the end of
    /// `self`; returns how many moved.
    pub fn append_from<const M: usize>(&mut self, other: &mut MbufBurst<M>) -> usize {
        let n = self.free_slots().min(other.len);
        self.slots[self.len..self.len + n].copy_from_slice(&other.slots[..n]);
        self.len += n;
        // SAFETY: the n moved pointers are now owned by self.
        unsafe { other.consume_front(n) };
        n
    }

    /// Pointer to the first free slot and the number of free slots, for
    /// DPDK calls that fill the tail (RX, bulk alloc).
    #[inline]
    pub(crate) fn free_tail_raw(&mut self) -> (*mut *mut ffi::rte_mbuf, usize) {
        // SAFETY: len <= N, so the offset stays within (or one past) the array.
        (
            unsafe { self.slots.as_mut_ptr().add(self.len) },
            N - self.len,
        )
    }

    /// Marks `n` more slots (written through `free_tail_raw`) as held.
    ///
    /// # Safety
    /// The `n` slots after `len` must hold owned, valid mbufs; `n <= free_slots()`.
    #[inline]
    pub(crate) unsafe fn commit_tail(&mut self, n: usize) {
        debug_assert!(n <= N - self.len);
        self.len += n;
    }

    /// Pointer to the held mbufs, for DPDK calls that consume from the
    /// front (TX).
    #[inline]
    pub(crate) fn head_raw(&mut self) -> *mut *mut ffi::rte_mbuf {
        self.slots.as_mut_ptr()
    }

    /// Forgets the first `n` held mbufs (their ownership moved elsewhere)
    /// and shifts the rest to the front.
    ///
    /// # Safety
    /// Ownership of `slots[..n]` must have been transferred; `n <= len()`.
    #[inline]
    pub(crate) unsafe fn consume_front(&mut self, n: usize) {
        debug_assert!(n <= self.len);
        if n == self.len {
            self.len = 0; // the common case: everything was sent
        } else if n > 0 {
            self.slots.copy_within(n..self.len, 0);
            self.len -= n;
        }
    }
}

impl<const N: usize> Drop for MbufBurst<N> {
    fn drop(&mut self) {
        self.clear();
    }
}

impl<const N: usize> Deref for MbufBurst<N> {
    type Target = [Mbuf];
    #[inline]
    fn deref(&self) -> &[Mbuf] {
        self.as_slice()
    }
}

impl<const N: usize> DerefMut for MbufBurst<N> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [Mbuf] {
        self.as_mut_slice()
    }
}

impl<'a, const N: usize> IntoIterator for &'a MbufBurst<N> {
    type Item = &'a Mbuf;
    type IntoIter = slice::Iter<'a, Mbuf>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl<'a, const N: usize> IntoIterator for &'a mut MbufBurst<N> {
    type Item = &'a mut Mbuf;
    type IntoIter = slice::IterMut<'a, Mbuf>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_mut_slice().iter_mut()
    }
}

impl<const N: usize> fmt::Debug for MbufBurst<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MbufBurst")
            .field("capacity", &N)
            .field("mbufs", &self.as_slice())
            .finish()
    }
}

/// Iterator from [`MbufBurst::drain`].
pub struct Drain<'a, const N: usize> {
    burst: &'a mut MbufBurst<N>,
    pos: usize,
    end: usize,
}

impl<const N: usize> Iterator for Drain<'_, N> {
    type Item = Mbuf;
    #[inline]
    fn next(&mut self) -> Option<Mbuf> {
        if self.pos == self.end {
            return None;
        }
        let p = self.burst.slots[self.pos];
        self.pos += 1;
        // SAFETY: slots[pos..end] are owned mbufs detached from the burst
        // (its len is 0); each is yielded or freed exactly once.
        unsafe { Mbuf::from_raw(p) }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.end - self.pos, Some(self.end - self.pos))
    }
}

impl<const N: usize> ExactSizeIterator for Drain<'_, N> {}

impl<const N: usize> Drop for Drain<'_, N> {
    fn drop(&mut self) {
        let n = self.end - self.pos;
        if n > 0 {
            // SAFETY: slots[pos..end] are owned mbufs not yet yielded.
            unsafe {
                ffi::rte_pktmbuf_free_bulk(self.burst.slots.as_mut_ptr().add(self.pos), n as u32)
            };
        }
    }
}
