//! The packet buffer abstraction the pipeline edits in place.
//!
//! The DPDK driver implements `PacketBuf` over an mbuf (`rte_pktmbuf_mtod`,
//! `rte_pktmbuf_prepend`, `rte_pktmbuf_adj`); tests and the simulator use
//! `VecBuf`. Invariant: `prepend` and `trim_front` either succeed completely
//! or leave the buffer untouched and return `false`; they never allocate
//! (`VecBuf` reserves its headroom at construction), so the pipeline can
//! add or remove a 4-byte 802.1Q tag without copying the packet.

/// A contiguous packet with adjustable front.
pub trait PacketBuf {
    /// The packet bytes, starting at the Ethernet header.
    fn data(&self) -> &[u8];
    fn data_mut(&mut self) -> &mut [u8];
    /// Grow the packet by `n` bytes at the front (contents unspecified).
    /// `false` if there is not enough headroom.
    fn prepend(&mut self, n: usize) -> bool;
    /// Remove `n` bytes from the front. `false` if shorter than `n`.
    fn trim_front(&mut self, n: usize) -> bool;
}

/// Default headroom of a `VecBuf` (DPDK's RTE_PKTMBUF_HEADROOM is 128).
pub const DEFAULT_HEADROOM: usize = 128;

/// A `Vec<u8>`-backed packet with headroom, for tests and the simulator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VecBuf {
    storage: Vec<u8>,
    start: usize,
}

impl VecBuf {
    pub fn new(frame: &[u8]) -> Self {
        Self::with_headroom(frame, DEFAULT_HEADROOM)
    }
    pub fn with_headroom(frame: &[u8], headroom: usize) -> Self {
        let mut storage = vec![0u8; headroom + frame.len()];
        storage[headroom..].copy_from_slice(frame);
        VecBuf {
            storage,
            start: headroom,
        }
    }
    /// Replace the contents with `frame`, restoring the original headroom
    /// when it fits (no allocation if capacity allows).
    pub fn reset(&mut self, frame: &[u8], headroom: usize) {
        self.storage.clear();
        self.storage.resize(headroom + frame.len(), 0);
        self.storage[headroom..].copy_from_slice(frame);
        self.start = headroom;
    }
    pub fn headroom(&self) -> usize {
        self.start
    }
    pub fn len(&self) -> usize {
        self.storage.len() - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn to_vec(&self) -> Vec<u8> {
        self.data().to_vec()
    }
}

impl PacketBuf for VecBuf {
    fn data(&self) -> &[u8] {
        &self.storage[self.start..]
    }
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..]
    }
    fn prepend(&mut self, n: usize) -> bool {
        if n > self.start {
            return false;
        }
        self.start -= n;
        true
    }
    fn trim_front(&mut self, n: usize) -> bool {
        if n > self.len() {
            return false;
        }
        self.start += n;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepend_and_trim() {
        let mut b = VecBuf::with_headroom(&[1, 2, 3], 4);
        assert!(!b.prepend(5));
        assert!(b.prepend(4));
        assert_eq!(b.data(), &[0, 0, 0, 0, 1, 2, 3]);
        assert_eq!(b.headroom(), 0);
        assert!(b.trim_front(5));
        assert_eq!(b.data(), &[2, 3]);
        assert!(!b.trim_front(3));
        assert_eq!(b.data(), &[2, 3]);
        b.data_mut()[0] = 9;
        assert_eq!(b.to_vec(), vec![9, 3]);
        b.reset(&[7], 2);
        assert_eq!((b.data(), b.headroom()), (&[7u8][..], 2));
    }
}
