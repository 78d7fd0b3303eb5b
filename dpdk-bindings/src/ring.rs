//! Mbuf rings between lcores (`rte_ring`): many producers, one consumer.
//!
//! What one worker hands another in bursts (`node/src/worker.rs`): a ring
//! slot is one mbuf pointer, a burst moves with one index update, so the
//! cross-core cost is a few cache lines per burst instead of per frame.
//!
//! Invariants:
//! - [`mbuf_ring`] returns the ring's two ends. [`RingProducer`] is
//!   `Clone + Send + Sync` (DPDK's multi-producer enqueue is thread-safe);
//!   [`RingConsumer`] is `Send` and not `Clone`, and dequeuing takes
//!   `&mut self`: the single consumer the ring was created for
//!   (`RING_F_SC_DEQ`) is a fact of the types.
//! - Ownership: an mbuf enqueued belongs to the ring until dequeued; one
//!   that does not fit stays in the caller's burst.
//! - Like mempools, rings are never freed: they are made once at start-up,
//!   and an mbuf still on a ring at exit belongs to a pool that is not
//!   freed either (freeing it after EAL cleanup would crash).

use std::ptr::NonNull;
use std::sync::Arc;

use crate::eal;
use crate::error::{Error, Result};
use crate::ffi;
use crate::mbuf::MbufBurst;
use crate::mempool::c_name;

#[derive(Debug)]
struct Raw(NonNull<ffi::rte_ring>);

// SAFETY: the ring is never freed; enqueue is multi-producer safe, and
// dequeue is reachable only through the one `RingConsumer`.
unsafe impl Send for Raw {}
// SAFETY: as for Send.
unsafe impl Sync for Raw {}

/// The enqueuing end of an mbuf ring; clone it for every producer.
#[derive(Clone, Debug)]
pub struct RingProducer {
    raw: Arc<Raw>,
    capacity: usize,
}

/// The dequeuing end of an mbuf ring (the only one).
#[derive(Debug)]
pub struct RingConsumer {
    raw: Arc<Raw>,
}

/// A ring of `count` mbuf slots (a power of two, at most 2^28; `count - 1`
/// usable) named `name` (unique in the process) on NUMA `socket`.
pub fn mbuf_ring(name: &str, count: u32, socket: i32) -> Result<(RingProducer, RingConsumer)> {
    const F: &str = "rte_ring_create";
    eal::require(F)?;
    if !count.is_power_of_two() || count < 2 {
        return Err(Error::new(F, 22).with_detail(format!("ring {name:?}: {count} slots is not a power of two >= 2")));
    }
    let cname = c_name(F, name)?;
    // SAFETY: EAL is up; cname is a valid C string that DPDK copies.
    let raw = unsafe { ffi::rte_ring_create(cname.as_ptr(), count, socket, ffi::RING_F_SC_DEQ) };
    let raw = NonNull::new(raw)
        .map(|r| Arc::new(Raw(r)))
        .ok_or_else(|| Error::from_rte_errno(F).with_detail(format!("ring {name:?} of {count} slots")))?;
    Ok((RingProducer { raw: raw.clone(), capacity: count as usize - 1 }, RingConsumer { raw }))
}

impl RingProducer {
    /// Moves as many mbufs from the front of `burst` onto the ring as fit;
    /// returns how many moved (the rest stay in `burst`).
    #[inline]
    pub fn enqueue_burst<const N: usize>(&self, burst: &mut MbufBurst<N>) -> usize {
        let n = burst.len();
        if n == 0 {
            return 0;
        }
        let head = burst.head_raw();
        // SAFETY: the ring is valid (never freed); `head` points at `n`
        // owned mbuf pointers; multi-producer enqueue is thread-safe.
        let done = unsafe { ffi::rte_ring_enqueue_burst(self.raw.0.as_ptr(), head.cast(), n as u32, std::ptr::null_mut()) };
        let done = (done as usize).min(n);
        // SAFETY: the first `done` mbufs now belong to the ring.
        unsafe { burst.consume_front(done) };
        done
    }

    /// Usable slots.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

impl RingConsumer {
    /// Moves up to the free room of `burst` mbufs off the ring into it;
    /// returns how many.
    #[inline]
    pub fn dequeue_burst<const N: usize>(&mut self, burst: &mut MbufBurst<N>) -> usize {
        let (tail, free) = burst.free_tail_raw();
        if free == 0 {
            return 0;
        }
        // SAFETY: the ring is valid; `tail` has `free` writable slots; this
        // is the ring's only consumer (`&mut self`, not Clone).
        let n = unsafe { ffi::rte_ring_dequeue_burst(self.raw.0.as_ptr(), tail.cast(), free as u32, std::ptr::null_mut()) };
        let n = (n as usize).min(free);
        // SAFETY: the ring held n owned, valid mbufs, now in those slots.
        unsafe { burst.commit_tail(n) };
        n
    }

    /// Mbufs on the ring now.
    pub fn len(&self) -> usize {
        // SAFETY: the ring is valid; a count read is racy but safe.
        unsafe { ffi::rte_ring_count(self.raw.0.as_ptr()) as usize }
    }

    /// Whether the ring is empty now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
