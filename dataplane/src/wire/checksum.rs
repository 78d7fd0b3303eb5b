//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Invariants: every function here is total (no panics, no allocation) and
//! works on big-endian 16-bit words as they appear on the wire. A "sum" is
//! the unfolded 32-bit accumulator; a "checksum" is the folded,
//! complemented 16-bit value stored in a header. A buffer whose stored
//! checksum is correct sums (including the checksum field) to `0xffff`.
//!
//! Incremental updates follow RFC 1624 §3 eqn. 3, `HC' = ~(~HC + ~m + m')`,
//! which — unlike RFC 1141's eqn. 2 — never produces `0x0000` from a
//! non-zero input; that matters for TTL decrement on the fast path and for
//! address/port rewrites (NAT) later.

/// Add `data` as big-endian 16-bit words to `acc` (RFC 1071 §4.1). An odd
/// trailing byte is padded with zero on the right. The result is folded to
/// at most 17 bits, so it can be passed back in as `acc`.
#[inline]
pub fn sum(acc: u32, data: &[u8]) -> u32 {
    // RFC 1071 §2(B): the sum may be computed on 32-bit words and folded at
    // the end; a u64 accumulator cannot overflow for any slice that fits in
    // memory (2^32 words of at most 2^32 - 1 each).
    let mut wide = u64::from(acc);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        wide += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
    }
    let mut rest = chunks.remainder();
    if rest.len() >= 2 {
        wide += u64::from(u16::from_be_bytes([rest[0], rest[1]]));
        rest = &rest[2..];
    }
    if let [b] = rest {
        wide += u64::from(*b) << 8;
    }
    // Fold 64 → 32 → 17 bits with end-around carry.
    wide = (wide & 0xffff_ffff) + (wide >> 32);
    wide = (wide & 0xffff_ffff) + (wide >> 32);
    let w = wide as u32;
    (w & 0xffff) + (w >> 16)
}

/// Fold a 32-bit accumulator to 16 bits with end-around carry. Two steps
/// always suffice (the first leaves at most 0x1fffe, the second at most
/// 0xffff), so there is no loop and no branch.
#[inline]
pub fn fold(acc: u32) -> u16 {
    let a = (acc & 0xffff) + (acc >> 16);
    ((a & 0xffff) + (a >> 16)) as u16
}

/// The checksum to store for `data` (whose checksum field must be zero).
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(0, data))
}

/// True when `data` (checksum field included) sums to `0xffff`.
#[inline]
pub fn verify(acc: u32, data: &[u8]) -> bool {
    fold(sum(acc, data)) == 0xffff
}

/// Sum of the IPv4 pseudo-header used by TCP and UDP (RFC 9293 §3.1,
/// RFC 768): source, destination, zero + protocol, upper-layer length.
#[inline]
pub fn pseudo_header_v4(src: [u8; 4], dst: [u8; 4], proto: u8, len: u16) -> u32 {
    let mut acc = sum(0, &src);
    acc = sum(acc, &dst);
    acc + u32::from(proto) + u32::from(len)
}

/// RFC 1624 eqn. 3: the new checksum after one 16-bit word of the covered
/// data changed from `old` to `new`.
#[inline]
pub fn update_u16(csum: u16, old: u16, new: u16) -> u16 {
    let acc = u32::from(!csum) + u32::from(!old) + u32::from(new);
    !fold(acc)
}

/// RFC 1624 eqn. 3 applied to a 32-bit field (e.g. an IPv4 address).
#[inline]
pub fn update_u32(csum: u16, old: u32, new: u32) -> u16 {
    let acc = u32::from(!csum)
        + u32::from(!(old >> 16) as u16)
        + u32::from(!(old as u16))
        + (new >> 16)
        + (new & 0xffff);
    !fold(acc)
}

/// The one's-complement sum of a 32-bit field's change from `old` to
/// `new` (~old + new, 16 bits at a time; below 2^18): add it to `!csum`
/// and fold, for one or several checksums covering the field.
#[inline]
pub fn delta_u32(old: u32, new: u32) -> u32 {
    u32::from(!(old >> 16) as u16) + u32::from(!(old as u16)) + (new >> 16) + (new & 0xffff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RFC 1071 §3 worked example: words 0001 f203 f4f5 f6f7 sum to ddf2.
    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(0, &data)), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn odd_length_pads_right() {
        assert_eq!(fold(sum(0, &[0x12])), 0x1200);
        assert_eq!(fold(sum(0, &[0x12, 0x34, 0x56])), 0x1234 + 0x5600);
    }

    /// A real IPv4 header (checksum 0xb861), from a capture.
    #[test]
    fn ipv4_header_fixture() {
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert!(verify(0, &h));
        h[10] = 0;
        h[11] = 0;
        assert_eq!(checksum(&h), 0xb861);
    }

    /// RFC 1624 §4 example: HC = 0xdd2f, m = 0x5555 → m' = 0x3285, HC' = 0x0000.
    #[test]
    fn rfc1624_example() {
        assert_eq!(update_u16(0xdd2f, 0x5555, 0x3285), 0x0000);
    }

    fn naive(data: &[u8]) -> u16 {
        let mut acc: u64 = 0;
        for (i, b) in data.iter().enumerate() {
            acc += if i % 2 == 0 {
                u64::from(*b) << 8
            } else {
                u64::from(*b)
            };
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    proptest! {
        #[test]
        fn fold_matches_the_loop(acc in any::<u32>()) {
            let mut a = acc;
            while a > 0xffff {
                a = (a & 0xffff) + (a >> 16);
            }
            prop_assert_eq!(fold(acc), a as u16);
        }

        #[test]
        fn wide_sum_matches_naive(data in proptest::collection::vec(any::<u8>(), 0..200), acc in 0u32..0x20000) {
            prop_assert_eq!(fold(sum(acc, &data)), fold(u32::from(naive(&data)) + acc));
        }

        #[test]
        fn one_delta_for_two_checksums_equals_the_updates_one_by_one(
            c in any::<u16>(), old in any::<u32>(), new in any::<u32>(), op in any::<u16>(), np in any::<u16>()) {
            let d = delta_u32(old, new);
            prop_assert!(d < 1 << 18);
            prop_assert_eq!(!fold(u32::from(!c) + d), update_u32(c, old, new));
            prop_assert_eq!(!fold(u32::from(!c) + d + u32::from(!op) + u32::from(np)),
                            update_u16(update_u32(c, old, new), op, np));
        }

        #[test]
        fn incremental_matches_full(mut data in proptest::collection::vec(any::<u8>(), 8..64),
                                    idx in 0usize..4, new16 in any::<u16>(), new32 in any::<u32>()) {
            // Word 0 is the checksum field.
            data[0] = 0; data[1] = 0;
            let c = checksum(&data);
            data[0..2].copy_from_slice(&c.to_be_bytes());
            prop_assert!(verify(0, &data));
            // 16-bit update at word 1 + idx.
            let off = 2 + 2 * (idx % ((data.len() - 2) / 2).max(1));
            if off + 2 <= data.len() {
                let old = u16::from_be_bytes([data[off], data[off + 1]]);
                data[off..off + 2].copy_from_slice(&new16.to_be_bytes());
                let c2 = update_u16(c, old, new16);
                data[0..2].copy_from_slice(&c2.to_be_bytes());
                prop_assert!(verify(0, &data));
            }
            // 32-bit update at bytes 4..8.
            let c = u16::from_be_bytes([data[0], data[1]]);
            let old = u32::from_be_bytes([data[4], data[5], data[6], data[7]]);
            data[4..8].copy_from_slice(&new32.to_be_bytes());
            let c3 = update_u32(c, old, new32);
            data[0..2].copy_from_slice(&c3.to_be_bytes());
            prop_assert!(verify(0, &data));
        }
    }
}
