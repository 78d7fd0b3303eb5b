//! Software prefetch. Prefetching a flow-table bucket and slot for every
//! packet of a burst before processing the first one overlaps the cache
//! misses of the whole burst (DPDK's `rte_hash_lookup_bulk` and VPP's
//! dual/quad loops do the same).
//!
//! The only `unsafe` in this crate: `_mm_prefetch` is a `#[target_feature]`
//! intrinsic, so Rust requires an `unsafe` block even though a prefetch is
//! a hint that never faults and never changes memory. The pointer comes
//! from a reference, so it is valid anyway.

/// Ask the CPU to bring the cache line holding `r` into L1.
#[inline(always)]
#[allow(unsafe_code)]
pub fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: SSE is part of the x86_64 baseline; a prefetch is a hint
        // that does not fault or write, and `r` is a valid reference.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((r as *const T).cast::<i8>()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = r;
    }
}
