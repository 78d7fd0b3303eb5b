//! The owner packed into the initial sequence number (SPEC R6).
//!
//! The owner of a new TCP connection replaces the client's ISN by a cookie
//! ISN' that carries its `NodeId`; the server acknowledges `ISN' + 1` in its
//! SYN-ACK, so whichever member receives the SYN-ACK computes the owner from
//! `ack - 1` alone (`owner_from_synack_ack`), without asking the director.
//! The owner then translates sequence numbers for the life of the
//! connection (`seqxlate`). Layout (see `docs/owner-encoding.md`):
//!
//! ```text
//!  31                              12 11     8 7             0
//! +----------------------------------+--------+---------------+
//! |        r: 20 random bits         | node^p |   check c     |
//! +----------------------------------+--------+---------------+
//!   m = SipHash-2-4(cluster key, r)   p = m[0..4]   c = m[8..16]
//! ```
//!
//! Invariants:
//! - `decode(encode(n, x)) == Some(n)` for every node `0..=15` and every
//!   `x` (the only input is the ISN; no state, no clock);
//! - a 32-bit value not produced by `encode` with this key decodes with
//!   probability exactly 2^-8 (for each `r` exactly one of the 256 check
//!   values is accepted), so forwarders drop or query for ≈ 99.6 % of
//!   forged or foreign SYN-ACKs without sending them to an owner;
//! - the node is masked by a keyed pad, so an outsider does not learn node
//!   ids from ISNs; the check does not bind the node (flipping the node
//!   bits of a valid cookie yields another valid cookie): the check filters
//!   foreign acks, it does not authenticate packets — the owner's state
//!   machine still validates everything;
//! - unpredictability (RFC 6528 §3): `r` is 20 fresh random bits; to an
//!   attacker without the key the 8 check bits are unpredictable too, so a
//!   blind guess of ISN' succeeds with probability 2^-28 (2^-32 if it does
//!   not know the node), against 2^-32 for an RFC 6528 ISN. The random bits
//!   are the high ones, so ISN's spread over the whole sequence space and
//!   in-window injection odds (window / 2^32, RFC 5961) are unchanged.

use crate::types::NodeId;
use core::fmt;

/// Bits carrying the owner: 16 nodes (`NodeId::MAX_NODES`).
pub const NODE_BITS: u32 = 4;
/// Keyed check bits: false-accept probability 2^-CHECK_BITS = 1/256.
pub const CHECK_BITS: u32 = 8;
/// Fresh random bits per ISN'.
pub const RANDOM_BITS: u32 = 32 - NODE_BITS - CHECK_BITS;
const CHECK_SHIFT: u32 = 0;
const NODE_SHIFT: u32 = CHECK_BITS;
const RANDOM_SHIFT: u32 = CHECK_BITS + NODE_BITS;
const CHECK_MASK: u32 = (1 << CHECK_BITS) - 1;
const NODE_MASK: u32 = (1 << NODE_BITS) - 1;

const _: () = assert!(1 << NODE_BITS == NodeId::MAX_NODES);
const _: () = assert!(RANDOM_BITS == 20);

/// Encoder/decoder of cookie ISNs for one cluster key. Every member must
/// hold the same key. `Copy`; its `Debug` does not print the key.
#[derive(Copy, Clone, PartialEq, Eq)]
pub struct CookieCodec {
    k0: u64,
    k1: u64,
}

impl fmt::Debug for CookieCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CookieCodec { key: <redacted> }")
    }
}

impl CookieCodec {
    /// A codec keyed with the 128-bit cluster secret.
    pub fn new(cluster_secret: [u8; 16]) -> Self {
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        // layout: allow(offset) the 128-bit key split into SipHash's k0 and k1, not packet bytes
        a.copy_from_slice(&cluster_secret[..8]);
        // layout: allow(offset) the 128-bit key split into SipHash's k0 and k1, not packet bytes
        b.copy_from_slice(&cluster_secret[8..]);
        CookieCodec { k0: u64::from_le_bytes(a), k1: u64::from_le_bytes(b) }
    }

    /// The keyed pad and check for random part `r`.
    #[inline]
    fn mac(&self, r: u32) -> (u32, u32) {
        let m = siphash24(self.k0, self.k1, &r.to_le_bytes());
        ((m as u32) & NODE_MASK, ((m >> 8) as u32) & CHECK_MASK)
    }

    /// The cookie ISN' for `node`, using the top `RANDOM_BITS` bits of
    /// `random` (the caller's PRNG; the core reads no entropy itself).
    /// `node` must be a cluster node (0..=15); only its low 4 bits are
    /// encoded.
    #[inline]
    pub fn encode(&self, node: NodeId, random: u32) -> u32 {
        debug_assert!(node.index() < NodeId::MAX_NODES, "{node} is not a cluster node id");
        let r = random >> (32 - RANDOM_BITS);
        let (pad, check) = self.mac(r);
        let field = (u32::from(node.0) ^ pad) & NODE_MASK;
        r << RANDOM_SHIFT | field << NODE_SHIFT | check << CHECK_SHIFT
    }

    /// The owner encoded in `isn`, or `None` if the check bits show it was
    /// not produced by `encode` with this key (probability 1 - 2^-8 for a
    /// foreign value).
    #[inline]
    pub fn decode(&self, isn: u32) -> Option<NodeId> {
        let r = isn >> RANDOM_SHIFT;
        let (pad, check) = self.mac(r);
        if (isn >> CHECK_SHIFT) & CHECK_MASK != check {
            return None;
        }
        Some(NodeId((((isn >> NODE_SHIFT) ^ pad) & NODE_MASK) as u8))
    }

    /// The owner of a connection from the acknowledgement number of the
    /// server's SYN-ACK: it acknowledges ISN' + 1 (RFC 9293 §3.4, the SYN
    /// occupies one sequence number), modulo 2^32.
    #[inline]
    pub fn owner_from_synack_ack(&self, ack: u32) -> Option<NodeId> {
        self.decode(ack.wrapping_sub(1))
    }
}

/// SipHash-2-4 (Aumasson & Bernstein, 2012) of `msg` under key (k0, k1),
/// little-endian as in the reference implementation. The keyed PRF that
/// Linux also uses for SYN cookies and RFC 6528 ISNs.
pub fn siphash24(k0: u64, k1: u64, msg: &[u8]) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    #[inline(always)]
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    let mut chunks = msg.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let m = u64::from_le_bytes(w);
        v[3] ^= m;
        round(&mut v);
        round(&mut v);
        v[0] ^= m;
    }
    let mut last = [0u8; 8];
    let rest = chunks.remainder();
    last[..rest.len()].copy_from_slice(rest);
    last[7] = msg.len() as u8;
    let m = u64::from_le_bytes(last);
    v[3] ^= m;
    round(&mut v);
    round(&mut v);
    v[0] ^= m;
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: [u8; 16] = *b"clusterfw-test-k";

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u32 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) >> 32) as u32
        }
    }

    /// Reference vectors of the SipHash paper (key 00..0f, message 00..n-1),
    /// and agreement with std's (deprecated) SipHash-2-4 for every length.
    #[test]
    fn siphash_vectors() {
        let key: Vec<u8> = (0..16).collect();
        let (k0, k1) = (u64::from_le_bytes(key[..8].try_into().unwrap()), u64::from_le_bytes(key[8..].try_into().unwrap()));
        let msg: Vec<u8> = (0..64).collect();
        assert_eq!(siphash24(k0, k1, &[]), 0x726f_db47_dd0e_0e31);
        assert_eq!(siphash24(k0, k1, &msg[..15]), 0xa129_ca61_49be_45e5);
        for len in 0..64 {
            #[allow(deprecated)]
            let mut h = std::hash::SipHasher::new_with_keys(k0, k1);
            std::hash::Hasher::write(&mut h, &msg[..len]);
            assert_eq!(siphash24(k0, k1, &msg[..len]), std::hash::Hasher::finish(&h), "len {len}");
        }
    }

    #[test]
    fn round_trip_every_node() {
        let c = CookieCodec::new(KEY);
        let mut rng = Rng(1);
        for node in 0..16u8 {
            for _ in 0..20_000 {
                let isn = c.encode(NodeId(node), rng.next());
                assert_eq!(c.decode(isn), Some(NodeId(node)));
                assert_eq!(c.owner_from_synack_ack(isn.wrapping_add(1)), Some(NodeId(node)));
            }
        }
    }

    #[test]
    fn limits() {
        let c = CookieCodec::new(KEY);
        for node in [NodeId(0), NodeId(15)] {
            for random in [0, 1, 0xfff, 0x1000, 0x7fff_ffff, 0x8000_0000, 0xffff_f000, u32::MAX] {
                let isn = c.encode(node, random);
                assert_eq!(isn >> 12, random >> 12, "the random bits are the top 20");
                assert_eq!(c.decode(isn), Some(node));
                assert_eq!(c.owner_from_synack_ack(isn.wrapping_add(1)), Some(node));
            }
        }
        // Wrap-around at 2^32: the top random part, every node; the ack
        // arithmetic wraps (ISN' = 0xffff_ffff is acknowledged as 0).
        for node in 0..16u8 {
            let isn = c.encode(NodeId(node), u32::MAX);
            assert_eq!(isn >> 12, 0xfffff);
            assert_eq!(c.owner_from_synack_ack(isn.wrapping_add(1)), Some(NodeId(node)));
        }
        // A key whose cookie for (node, r = 0xfffff) is exactly 0xffff_ffff,
        // found deterministically, so the ack = 0 case is always exercised.
        let mut key = KEY;
        let (codec, node) = (0u16..=u16::MAX)
            .find_map(|k| {
                key[14..].copy_from_slice(&k.to_le_bytes());
                let c = CookieCodec::new(key);
                let (pad, check) = c.mac(0xfffff);
                (check == 0xff).then_some((c, NodeId((0xf ^ pad) as u8)))
            })
            .expect("one in 256 keys gives check 0xff for r = 0xfffff; 65536 tried");
        assert_eq!(codec.encode(node, u32::MAX), u32::MAX);
        assert_eq!(codec.owner_from_synack_ack(0), Some(node));
    }

    #[test]
    fn layout_and_hiding() {
        let c = CookieCodec::new(KEY);
        // The node field is padded: the same node gives different field
        // values across r, and other keys decode foreign cookies at chance.
        let fields: std::collections::HashSet<u32> =
            (0..256u32).map(|r| (c.encode(NodeId(3), r << 12) >> 8) & 0xf).collect();
        assert!(fields.len() > 8, "{fields:?}");
        let other = CookieCodec::new(*b"another-cluster!");
        assert_ne!(c, other);
        assert_eq!(format!("{c:?}"), "CookieCodec { key: <redacted> }");
    }

    /// Values not produced by `encode` are accepted with probability 2^-8.
    #[test]
    fn forged_rejected() {
        let c = CookieCodec::new(KEY);
        let other = CookieCodec::new(*b"another-cluster!");
        let mut rng = Rng(99);
        let n = 1_000_000u32;
        let (mut random_ok, mut foreign_ok) = (0u32, 0u32);
        for i in 0..n {
            if c.decode(rng.next()).is_some() {
                random_ok += 1;
            }
            if c.decode(other.encode(NodeId((i % 16) as u8), rng.next())).is_some() {
                foreign_ok += 1;
            }
        }
        // Binomial(1e6, 1/256): mean 3906.25, σ ≈ 62.4; allow ±6σ.
        let expect = f64::from(n) / 256.0;
        println!(
            "cookie false accept: random {random_ok}/{n} = {:.4}%, other key {foreign_ok}/{n} = {:.4}% (ideal {:.4}%)",
            f64::from(random_ok) / f64::from(n) * 100.0,
            f64::from(foreign_ok) / f64::from(n) * 100.0,
            100.0 / 256.0
        );
        for got in [random_ok, foreign_ok] {
            assert!((f64::from(got) - expect).abs() < 6.0 * 62.4, "{got} vs {expect}");
        }
        // Exactly one check value per r is accepted.
        for r in [0u32, 1, 0x12345, 0xfffff] {
            let ok = (0..4096u32).filter(|low| c.decode(r << 12 | low).is_some()).count();
            assert_eq!(ok, 16, "r = {r:#x}: one check value × 16 node fields");
        }
    }

    proptest! {
        #[test]
        fn round_trip_any(node in 0u8..16, random in any::<u32>(), key in any::<[u8; 16]>()) {
            let c = CookieCodec::new(key);
            let isn = c.encode(NodeId(node), random);
            prop_assert_eq!(c.decode(isn), Some(NodeId(node)));
            prop_assert_eq!(c.owner_from_synack_ack(isn.wrapping_add(1)), Some(NodeId(node)));
        }
    }
}
