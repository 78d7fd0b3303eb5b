//! The packet buffer abstraction the pipeline edits in place.
//!
//! The DPDK driver implements `PacketBuf` over an mbuf (`rte_pktmbuf_mtod`,
//! `rte_pktmbuf_prepend`, `rte_pktmbuf_adj`); tests and the simulator use
//! `VecBuf`. Invariant: `prepend`, `trim_front`, `append` and `trim_back`
//! either succeed completely or leave the buffer untouched and return
//! `false`; they never allocate (`VecBuf` reserves its headroom and
//! tailroom at construction), so the pipeline can add or remove a 4-byte
//! 802.1Q tag, or wrap a frame in a CCL datagram (outer headers in front,
//! MAC tag behind), without copying the packet.

/// A contiguous packet with adjustable front and back.
pub trait PacketBuf {
    /// The packet bytes, starting at the Ethernet header.
    fn data(&self) -> &[u8];
    fn data_mut(&mut self) -> &mut [u8];
    /// Grow the packet by `n` bytes at the front (contents unspecified).
    /// `false` if there is not enough headroom.
    fn prepend(&mut self, n: usize) -> bool;
    /// Remove `n` bytes from the front. `false` if shorter than `n`.
    fn trim_front(&mut self, n: usize) -> bool;
    /// Grow the packet by `n` bytes at the back (contents unspecified).
    /// `false` if there is not enough tailroom.
    fn append(&mut self, n: usize) -> bool;
    /// Remove `n` bytes from the back. `false` if shorter than `n`.
    fn trim_back(&mut self, n: usize) -> bool;
}

/// Default headroom of a `VecBuf` (DPDK's RTE_PKTMBUF_HEADROOM is 128).
pub const DEFAULT_HEADROOM: usize = 128;
/// Default tailroom of a `VecBuf`: room for a CCL tag and then some (an
/// mbuf of a 1518-byte frame in a 2048-byte data room has 530).
pub const DEFAULT_TAILROOM: usize = 128;

/// A `Vec<u8>`-backed packet with headroom and tailroom, for tests and the
/// simulator. The tailroom is the `Vec`'s spare capacity, so `append`
/// never reallocates.
#[derive(Clone, Debug)]
pub struct VecBuf {
    storage: Vec<u8>,
    start: usize,
}

/// Equal when the packet bytes and the headroom are (the tailroom is
/// spare capacity, not contents).
impl PartialEq for VecBuf {
    fn eq(&self, o: &Self) -> bool {
        self.start == o.start && self.storage == o.storage
    }
}
impl Eq for VecBuf {}

impl VecBuf {
    pub fn new(frame: &[u8]) -> Self {
        Self::with_room(frame, DEFAULT_HEADROOM, DEFAULT_TAILROOM)
    }
    pub fn with_headroom(frame: &[u8], headroom: usize) -> Self {
        Self::with_room(frame, headroom, DEFAULT_TAILROOM)
    }
    pub fn with_room(frame: &[u8], headroom: usize, tailroom: usize) -> Self {
        let mut storage = Vec::with_capacity(headroom + frame.len() + tailroom);
        storage.resize(headroom, 0);
        storage.extend_from_slice(frame);
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
    pub fn tailroom(&self) -> usize {
        self.storage.capacity() - self.storage.len()
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
    fn append(&mut self, n: usize) -> bool {
        if n > self.tailroom() {
            return false;
        }
        let len = self.storage.len();
        self.storage.resize(len + n, 0);
        true
    }
    fn trim_back(&mut self, n: usize) -> bool {
        if n > self.len() {
            return false;
        }
        let len = self.storage.len();
        self.storage.truncate(len - n);
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

    #[test]
    fn append_and_trim_back() {
        let mut b = VecBuf::with_room(&[1, 2, 3], 1, 2);
        assert_eq!(b.tailroom(), 2);
        assert!(!b.append(3));
        assert!(b.append(2));
        assert_eq!(b.len(), 5);
        assert_eq!(&b.data()[..3], &[1, 2, 3]);
        assert!(!b.append(1));
        assert!(b.trim_back(4));
        assert_eq!(b.data(), &[1]);
        assert!(!b.trim_back(2));
        assert!(b.trim_back(1));
        assert!(b.is_empty());
        assert!(b.append(3));
    }
}
