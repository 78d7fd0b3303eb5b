//! Bindings to the system DPDK (found with `pkg-config libdpdk`) and the
//! project's only set of typed, safe wrappers around it.
//!
//! # Layout
//! - [`ffi`]: raw bindgen output for an allowlisted part of DPDK (EAL, lcore,
//!   mempool, mbuf, ethdev), plus bindgen's wrappers for DPDK's
//!   `static inline` functions and a tiny hand-written C shim
//!   (`csrc/shim.c`: `rte_errno`, queue-checked RX/TX bursts).
//! - [`afpacket`]: the receive-ring drops of the process's `AF_PACKET`
//!   sockets, which DPDK's af_packet driver does not report.
//! - [`eal`], [`mempool`], [`mbuf`], [`port`], [`dev`]: safe wrappers. All
//!   `unsafe` code of the workspace lives in this crate; each block states
//!   the check it relies on in a `// SAFETY:` comment.
//!
//! # Invariants the wrappers rely on
//! - EAL is initialised at most once per process ([`eal::init`]); every
//!   constructor that touches DPDK state ([`Mempool::new_pktmbuf`],
//!   [`Port::by_name`], ...) fails with `ENODEV` before that.
//! - An [`Mbuf`] exclusively owns one direct mbuf and frees it exactly once,
//!   on `Drop`, unless it is handed to TX ([`Port::tx_burst`]) or released
//!   with [`Mbuf::into_raw`]. [`MbufBurst`] frees what it holds in batches.
//! - DPDK objects ([`Mempool`], [`Mbuf`], [`Port`]) must not be used after
//!   the [`eal::Eal`] guard is dropped (that calls `rte_eal_cleanup`). Create
//!   the guard first in `main` so it is dropped last.
//! - One RX or TX queue is polled by one thread at a time (DPDK's
//!   queues are not thread-safe). [`Port::rx_burst`] takes a queue number
//!   and leaves that to the caller; the exclusive handles [`RxQueue`] /
//!   [`TxQueue`] (from [`Port::rx_queue`] / [`Port::tx_queue`]) enforce it.
//! - Negative return codes and NULL pointers become [`Error`], which names
//!   the DPDK function and carries the errno / `rte_errno`.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

/// Raw bindgen output. Prefer the safe modules; this is public for the rare
/// call the wrappers do not cover (which then belongs in this crate).
#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    improper_ctypes,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    unnecessary_transmutes,
    clippy::all,
    clippy::pedantic,
    clippy::undocumented_unsafe_blocks
)]
pub mod ffi {
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}

pub mod afpacket;
pub mod dev;
pub mod eal;
mod error;
pub mod mbuf;
pub mod mempool;
pub mod port;
pub mod queue;
pub mod ring;

pub use eal::Eal;
pub use error::{Error, Result};
pub use mbuf::{Burst, Mbuf, MbufBurst, BURST_SIZE};
pub use mempool::{Mempool, SOCKET_ID_ANY};
pub use port::{Link, Port, PortInfo, PortStats};
pub use queue::{RxQueue, TxQueue};
pub use ring::{mbuf_ring, RingConsumer, RingProducer};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_markers() {
        fn send_sync<T: Send + Sync>() {}
        fn copy<T: Copy>() {}
        send_sync::<Mempool>();
        send_sync::<Mbuf>();
        send_sync::<Burst>();
        send_sync::<Port>();
        send_sync::<Error>();
        send_sync::<RxQueue>();
        send_sync::<TxQueue>();
        copy::<Port>();
    }

    #[test]
    fn mbuf_is_pointer_sized_for_burst_casts() {
        use std::mem::{align_of, size_of};
        assert_eq!(size_of::<Mbuf>(), size_of::<*mut ffi::rte_mbuf>());
        assert_eq!(align_of::<Mbuf>(), align_of::<*mut ffi::rte_mbuf>());
        assert_eq!(size_of::<Option<Mbuf>>(), size_of::<*mut ffi::rte_mbuf>());
    }

    #[test]
    fn no_eal_means_enodev_not_a_crash() {
        // This test binary never initialises EAL.
        assert!(!eal::is_initialized());
        let e = Port::by_name("net_null0").unwrap_err();
        assert_eq!((e.func(), e.errno()), ("rte_eth_dev_get_port_by_name", 19));
        assert!(e.to_string().contains("EAL is not initialised"), "{e}");
        assert_eq!(Port::count_avail(), 0);
        assert!(Port::all().is_empty());
        assert!(eal::worker_lcores().is_empty());
        assert!(eal::launch(1, || 0).is_err());
        assert_eq!(eal::wait_lcore(1), 0);
        assert!(dev::probe("net_null0").is_err());
        assert!(Mempool::lookup("x").is_err());
    }

    #[test]
    fn devargs_name_is_before_first_comma() {
        assert_eq!(
            dev::devargs_name("net_af_packet0,iface=eth0,qpairs=2"),
            "net_af_packet0"
        );
        assert_eq!(dev::devargs_name("net_null0"), "net_null0");
        assert_eq!(dev::devargs_name("0000:3b:00.0"), "0000:3b:00.0");
    }

    #[test]
    fn empty_burst_needs_no_eal() {
        let mut b = MbufBurst::new();
        assert_eq!(b.capacity(), BURST_SIZE);
        assert!(b.is_empty() && b.pop().is_none());
        b.clear();
        assert_eq!(b.drain().count(), 0);
        let small = MbufBurst::<4>::empty();
        assert_eq!(small.free_slots(), 4);
    }
}
