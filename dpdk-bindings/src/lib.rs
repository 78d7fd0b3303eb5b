//! Bindings to the system DPDK (found with `pkg-config libdpdk`) and the
//! project's only set of typed, safe wrappers around it.
//!
//! # Layout
//! - [`ffi`]: raw bindgen output for an allowlisted part of DPDK (EAL, lcore,
//!   mempool, mbuf, ethdev), plus bindgen's wrappers for DPDK's
//!   `static inline` functions and a tiny hand-written C shim
//!   (`csrc/shim.c`: `rte_errno`, queue-checked RX/TX bursts).
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
//!   queues are not thread-safe); [`Port`] is only an id and cannot enforce
//!   it.
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

pub mod dev;
pub mod eal;
mod error;
pub mod mbuf;
pub mod mempool;
pub mod port;

pub use eal::Eal;
pub use error::{Error, Result};
pub use mbuf::{Burst, Mbuf, MbufBurst, BURST_SIZE};
pub use mempool::{Mempool, SOCKET_ID_ANY};
pub use port::{Link, Port, PortInfo, PortStats};
