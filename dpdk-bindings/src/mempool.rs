//! Packet-buffer pools (`rte_mempool` of `rte_mbuf`s).
//!
//! Invariants:
//! - A [`Mempool`] is a handle to a pool that lives until the process
//!   exits: pools are never freed. Ports keep using the pool they were
//!   configured with and in-flight mbufs point back to it, so freeing one
//!   safely would need every port stopped and every mbuf returned; pools are
//!   created once at start-up instead (capacity reserved up front).
//! - `Mempool` is `Send + Sync`: the pools are created with DPDK's default
//!   multi-producer/multi-consumer ring ops, whose get/put are thread-safe;
//!   the per-lcore caches are indexed by the calling lcore, and threads that
//!   are not EAL lcores bypass the cache and go to the ring.

use std::ffi::{CStr, CString};
use std::ptr::NonNull;

use crate::eal;
use crate::error::{Error, Result};
use crate::ffi;
use crate::mbuf::{Mbuf, MbufBurst};

/// "Any NUMA socket", for [`Mempool::new_pktmbuf`] and the like.
pub const SOCKET_ID_ANY: i32 = ffi::SOCKET_ID_ANY;
/// Default bytes of headroom in front of packet data (`RTE_PKTMBUF_HEADROOM`).
pub const PKTMBUF_HEADROOM: u16 = ffi::RTE_PKTMBUF_HEADROOM as u16;
/// Default data room: 2048 bytes of data plus the headroom
/// (`RTE_MBUF_DEFAULT_BUF_SIZE`).
pub const DEFAULT_DATA_ROOM: u16 = 2048 + PKTMBUF_HEADROOM;

/// A pool of packet mbufs. Cheap to clone (it is a pointer); never freed.
#[derive(Clone, Debug)]
pub struct Mempool {
    raw: NonNull<ffi::rte_mempool>,
}

// SAFETY: see the module doc — pool operations are thread-safe (MP/MC ring
// ops), and the pool is never freed, so the pointer stays valid everywhere.
unsafe impl Send for Mempool {}
// SAFETY: as for Send; `&Mempool` only allows get/put and counter reads.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// Creates a pool of `n` mbufs (`rte_pktmbuf_pool_create`) with a
    /// per-lcore cache of `cache` mbufs and `data_room` bytes of buffer per
    /// mbuf (headroom included; [`DEFAULT_DATA_ROOM`] fits a 1500-byte
    /// frame), on NUMA `socket` ([`SOCKET_ID_ANY`] or a port's
    /// [`crate::Port::socket_id`]). `n` is best a power of two minus one;
    /// names must be unique in the process.
    pub fn new_pktmbuf(
        name: &str,
        n: u32,
        cache: u32,
        data_room: u16,
        socket: i32,
    ) -> Result<Mempool> {
        const F: &str = "rte_pktmbuf_pool_create";
        eal::require(F)?;
        let cname = c_name(F, name)?;
        // SAFETY: EAL is up; cname is a valid C string that DPDK copies.
        let raw =
            unsafe { ffi::rte_pktmbuf_pool_create(cname.as_ptr(), n, cache, 0, data_room, socket) };
        NonNull::new(raw).map(|raw| Mempool { raw }).ok_or_else(|| {
            Error::from_rte_errno(F).with_detail(format!("pool {name:?} of {n} mbufs"))
        })
    }

    /// Finds an existing pool by name (`rte_mempool_lookup`).
    pub fn lookup(name: &str) -> Result<Mempool> {
        const F: &str = "rte_mempool_lookup";
        eal::require(F)?;
        let cname = c_name(F, name)?;
        // SAFETY: EAL is up; cname is a valid C string.
        let raw = unsafe { ffi::rte_mempool_lookup(cname.as_ptr()) };
        NonNull::new(raw)
            .map(|raw| Mempool { raw })
            .ok_or_else(|| Error::from_rte_errno(F).with_detail(format!("pool {name:?}")))
    }

    /// One mbuf, reset (empty, default headroom), or `None` if the pool is
    /// exhausted.
    #[inline]
    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: self.raw is a live pktmbuf pool (never freed).
        let m = unsafe { ffi::rte_pktmbuf_alloc(self.raw.as_ptr()) };
        // SAFETY: a non-NULL result is a fresh direct mbuf that we now own.
        unsafe { Mbuf::from_raw(m) }
    }

    /// An mbuf holding a copy of `bytes`, or `None` if the pool is empty or
    /// `bytes` does not fit in one segment's tailroom.
    pub fn alloc_from_slice(&self, bytes: &[u8]) -> Option<Mbuf> {
        let n = u16::try_from(bytes.len()).ok()?;
        let mut m = self.alloc()?;
        m.append(n)?.copy_from_slice(bytes);
        Some(m)
    }

    /// Appends `n` fresh mbufs to `burst` in one call
    /// (`rte_pktmbuf_alloc_bulk`): all of them or none. Returns false if the
    /// pool has fewer than `n` available or `burst` has fewer than `n` free
    /// slots.
    pub fn alloc_bulk<const N: usize>(&self, burst: &mut MbufBurst<N>, n: usize) -> bool {
        if n > burst.free_slots() {
            return false;
        }
        if n == 0 {
            return true;
        }
        let (tail, _) = burst.free_tail_raw();
        // SAFETY: the pool is live; tail points at >= n writable slots (checked
        // above); n <= N fits in u32.
        let ret = unsafe { ffi::rte_pktmbuf_alloc_bulk(self.raw.as_ptr(), tail, n as u32) };
        if ret != 0 {
            return false;
        }
        // SAFETY: on success DPDK wrote n valid, owned mbufs to those slots.
        unsafe { burst.commit_tail(n) };
        true
    }

    /// Mbufs currently in the pool (ring and caches).
    pub fn avail_count(&self) -> u32 {
        // SAFETY: the pool is live; this only reads counters.
        unsafe { ffi::rte_mempool_avail_count(self.raw.as_ptr()) }
    }

    /// Mbufs currently taken from the pool (by us, by ports' RX rings, ...).
    pub fn in_use_count(&self) -> u32 {
        // SAFETY: the pool is live; this only reads counters.
        unsafe { ffi::rte_mempool_in_use_count(self.raw.as_ptr()) }
    }

    /// Total mbufs in the pool.
    pub fn capacity(&self) -> u32 {
        // SAFETY: the pool is live; `size` is set at creation and never changes.
        unsafe { (*self.raw.as_ptr()).size }
    }

    /// The pool's name.
    pub fn name(&self) -> String {
        // SAFETY: the pool is live; `name` is a NUL-terminated fixed array set
        // at creation.
        unsafe { CStr::from_ptr((*self.raw.as_ptr()).name.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// The raw pool pointer, for FFI calls made inside this crate.
    pub fn as_ptr(&self) -> *mut ffi::rte_mempool {
        self.raw.as_ptr()
    }
}

pub(crate) fn c_name(func: &'static str, name: &str) -> Result<CString> {
    CString::new(name)
        .map_err(|_| Error::new(func, 22).with_detail(format!("name {name:?} contains a NUL byte")))
}
