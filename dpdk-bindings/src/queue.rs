//! Exclusive queue handles: the type-checked alternative to
//! [`Port::rx_burst`]/[`Port::tx_burst`].
//!
//! DPDK RX/TX queues must be used by one thread at a time. `Port` is a
//! `Copy` id and cannot enforce that; an [`RxQueue`] or [`TxQueue`] can:
//! at most one handle per (port, queue, direction) exists in the process
//! (claimed in a static bitmap, released on `Drop`), it is `Send` so it can
//! move to its worker, and bursting takes `&mut self`.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::ffi;
use crate::mbuf::MbufBurst;
use crate::port::Port;

const PORTS: usize = ffi::RTE_MAX_ETHPORTS as usize;
const QUEUES: usize = ffi::RTE_MAX_QUEUES_PER_PORT as usize;
const WORDS: usize = QUEUES.div_ceil(64);

/// Claimed-queue bitmaps, `[direction][port][word]`.
static CLAIMED: [[[AtomicU64; WORDS]; PORTS]; 2] =
    [const { [const { [const { AtomicU64::new(0) }; WORDS] }; PORTS] }; 2];

const RX: usize = 0;
const TX: usize = 1;

fn claim(dir: usize, port: Port, queue: u16, func: &'static str) -> Result<()> {
    let (p, q) = (usize::from(port.id()), usize::from(queue));
    if p >= PORTS || q >= QUEUES {
        return Err(Error::new(func, 22).with_detail(format!("{port} queue {queue} out of range")));
    }
    let bit = 1u64 << (q % 64);
    let prev = CLAIMED[dir][p][q / 64].fetch_or(bit, Ordering::AcqRel);
    if prev & bit != 0 {
        return Err(
            Error::new(func, 16).with_detail(format!("{port} queue {queue} already has a handle"))
        );
    }
    Ok(())
}

fn release(dir: usize, port: Port, queue: u16) {
    let (p, q) = (usize::from(port.id()), usize::from(queue));
    CLAIMED[dir][p][q / 64].fetch_and(!(1u64 << (q % 64)), Ordering::AcqRel);
}

/// The only handle to RX queue `queue` of a port.
#[derive(Debug)]
pub struct RxQueue {
    port: Port,
    queue: u16,
}

/// The only handle to TX queue `queue` of a port.
#[derive(Debug)]
pub struct TxQueue {
    port: Port,
    queue: u16,
}

impl Port {
    /// Claims RX queue `queue`: `EBUSY` if a handle to it already exists,
    /// `EINVAL` beyond `RTE_MAX_QUEUES_PER_PORT`. The queue need not be set
    /// up yet (bursting on it returns 0 until it is).
    pub fn rx_queue(self, queue: u16) -> Result<RxQueue> {
        claim(RX, self, queue, "rx_queue")?;
        Ok(RxQueue { port: self, queue })
    }

    /// Claims TX queue `queue`; see [`Port::rx_queue`].
    pub fn tx_queue(self, queue: u16) -> Result<TxQueue> {
        claim(TX, self, queue, "tx_queue")?;
        Ok(TxQueue { port: self, queue })
    }
}

impl RxQueue {
    /// The port.
    pub fn port(&self) -> Port {
        self.port
    }

    /// The queue id.
    pub fn id(&self) -> u16 {
        self.queue
    }

    /// [`Port::rx_burst`] on this queue.
    #[inline]
    pub fn rx_burst<const N: usize>(&mut self, burst: &mut MbufBurst<N>) -> usize {
        self.port.rx_burst(self.queue, burst)
    }
}

impl TxQueue {
    /// The port.
    pub fn port(&self) -> Port {
        self.port
    }

    /// The queue id.
    pub fn id(&self) -> u16 {
        self.queue
    }

    /// [`Port::tx_burst`] on this queue.
    #[inline]
    pub fn tx_burst<const N: usize>(&mut self, burst: &mut MbufBurst<N>) -> usize {
        self.port.tx_burst(self.queue, burst)
    }
}

impl Drop for RxQueue {
    fn drop(&mut self) {
        release(RX, self.port, self.queue);
    }
}

impl Drop for TxQueue {
    fn drop(&mut self) {
        release(TX, self.port, self.queue);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_handle_per_queue_and_direction() {
        let p = Port::unchecked(7);
        let rx = p.rx_queue(3).unwrap();
        assert_eq!(p.rx_queue(3).unwrap_err().errno(), 16);
        let tx = p.tx_queue(3).expect("TX is a separate direction");
        let other = p.rx_queue(67).expect("another queue");
        assert_eq!((rx.port(), rx.id(), tx.id(), other.id()), (p, 3, 3, 67));
        drop(rx);
        let again = p.rx_queue(3).expect("released on drop");
        assert_eq!(Port::unchecked(8).rx_queue(3).unwrap().port().id(), 8);
        assert_eq!(p.rx_queue(1024).unwrap_err().errno(), 22);
        drop((again, tx, other));
    }

    #[test]
    fn burst_on_unconfigured_queue_is_zero() {
        // No EAL in this binary: the shim sees no queue and returns 0.
        let mut q = Port::unchecked(5).rx_queue(0).unwrap();
        let mut b = MbufBurst::new();
        assert_eq!(q.rx_burst(&mut b), 0);
        let mut t = Port::unchecked(5).tx_queue(0).unwrap();
        assert_eq!(t.tx_burst(&mut b), 0);
    }
}
