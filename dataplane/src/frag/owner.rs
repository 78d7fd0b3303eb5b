//! The fragment owner (SPEC R10): the member that collects every fragment
//! of one datagram, chosen by a hash of (source, destination,
//! identification) over the member table.
//!
//! Why not the flow hash: only the first fragment carries the ports, so the
//! flow hash of a later fragment is unknown where it lands. (src, dst, id)
//! is in every fragment's IP header (IPv4 16-bit id widened to `u32`; IPv6
//! 32-bit id from the Fragment header), so every member that receives any
//! fragment of the datagram computes the same owner without talking to
//! anyone.
//!
//! Invariants:
//! - `frag_hash` is a pure function of its inputs and `FRAG_HASH_SEED`
//!   (pinned by `tests::golden_values`): two members that disagree on it
//!   would send the fragments of one datagram to two owners;
//! - it is directional on purpose — a datagram's fragments all travel one
//!   way — and it separates the families, so an IPv4 address and its
//!   IPv4-mapped IPv6 form hash differently;
//! - the owner is `DirectorTable::director(frag_hash(..))`, the same
//!   rendezvous rule as the director: when a member leaves only the
//!   datagrams it owned move, when one joins only those it now wins move
//!   (≈ 1/N, `tests::movement`); the table's epoch tells which member set
//!   a decision was made for;
//! - no allocation, no panic.

use crate::cluster::DirectorTable;
use crate::types::NodeId;
use std::net::IpAddr;

/// Cluster-wide seed of the fragment hash (ASCII "clusfrag"). A different
/// seed from the flow hash's, so the fragment owner of a datagram and the
/// director of its flow are independent choices.
pub const FRAG_HASH_SEED: u64 = 0x636c_7573_6672_6167;

const K: [u64; 4] = [0xa076_1d64_78bd_642f, 0xe703_7ed1_a0b4_28db, 0x8ebc_6af0_9c88_c6e3, 0x5899_65cc_7537_4cc3];

#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

#[inline(always)]
fn fmix64(mut z: u64) -> u64 {
    z ^= z >> 33;
    z = z.wrapping_mul(0xff51_afd7_ed55_8ccd);
    z ^= z >> 33;
    z = z.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    z ^ (z >> 33)
}

/// Hash of (source, destination, identification) with the cluster-wide
/// seed. Not symmetric (see the module doc).
#[inline]
pub fn frag_hash(src: IpAddr, dst: IpAddr, ident: u32) -> u64 {
    frag_hash_seeded(FRAG_HASH_SEED, src, dst, ident)
}

/// `frag_hash` with an explicit seed (a deployment may derive one from its
/// cluster key so that outsiders cannot aim datagrams at one member).
#[inline]
pub fn frag_hash_seeded(seed: u64, src: IpAddr, dst: IpAddr, ident: u32) -> u64 {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let addrs = u64::from(u32::from(s)) << 32 | u64::from(u32::from(d));
            let h = fold_mul(seed ^ K[0] ^ addrs, K[1]);
            fmix64(fold_mul(h ^ (u64::from(ident) << 8 | 4), K[2]))
        }
        (s, d) => {
            let (a, b) = (v6_bits(s), v6_bits(d));
            let mut h = seed ^ K[0];
            h = fold_mul(h ^ (a >> 64) as u64, K[1]);
            h = fold_mul(h ^ a as u64, K[2]);
            h = fold_mul(h ^ (b >> 64) as u64, K[3]);
            h = fold_mul(h ^ b as u64, K[1]);
            fmix64(fold_mul(h ^ (u64::from(ident) << 8 | 6), K[2]))
        }
    }
}

#[inline(always)]
fn v6_bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The fragment owner of the datagram (src, dst, ident) among the members
/// of `table`: the heaviest member by the director's rendezvous weight.
#[inline]
pub fn fragment_owner(src: IpAddr, dst: IpAddr, ident: u32, table: &DirectorTable) -> NodeId {
    table.director(frag_hash(src, dst, ident))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::MemberSet;
    use crate::types::Epoch;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn table(nodes: &[u8]) -> DirectorTable {
        DirectorTable::new(&MemberSet::from_nodes(Epoch(1), nodes.iter().copied().map(NodeId)).unwrap()).unwrap()
    }

    /// Reproducible keys: splitmix64 over addresses and ids.
    fn keys(n: usize) -> Vec<(IpAddr, IpAddr, u32)> {
        let mut s = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            fmix64(s)
        };
        (0..n)
            .map(|i| {
                let r = next();
                if i % 4 == 3 {
                    let a = Ipv6Addr::from(u128::from(r) << 64 | u128::from(next()));
                    let b = Ipv6Addr::from(u128::from(next()) << 64 | u128::from(next()));
                    (a.into(), b.into(), next() as u32)
                } else {
                    // Realistic: few hosts, many ids.
                    let a = Ipv4Addr::from(0x0a00_0000 | (r as u32 & 0xff));
                    let b = Ipv4Addr::from(0xc0a8_0000 | ((r >> 8) as u32 & 0xff));
                    (a.into(), b.into(), (r >> 32) as u32 & 0xffff)
                }
            })
            .collect()
    }

    #[test]
    fn golden_values() {
        let a: IpAddr = Ipv4Addr::new(10, 0, 0, 1).into();
        let b: IpAddr = Ipv4Addr::new(192, 168, 1, 2).into();
        let c: IpAddr = "2001:db8::1".parse().unwrap();
        let d: IpAddr = "2001:db8::2".parse().unwrap();
        // Pinned: changing these breaks mixed-version clusters.
        assert_eq!(frag_hash(a, b, 0x1234), GOLDEN[0]);
        assert_eq!(frag_hash(c, d, 0xdead_beef), GOLDEN[1]);
        assert_ne!(frag_hash(a, b, 0x1234), frag_hash(b, a, 0x1234), "directional");
        assert_ne!(frag_hash(a, b, 1), frag_hash(a, b, 2));
        let a6: IpAddr = Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped().into();
        let b6: IpAddr = Ipv4Addr::new(192, 168, 1, 2).to_ipv6_mapped().into();
        assert_ne!(frag_hash(a, b, 7), frag_hash(a6, b6, 7), "families are separated");
        assert_ne!(frag_hash_seeded(1, a, b, 7), frag_hash(a, b, 7));
    }
    const GOLDEN: [u64; 2] = [0xcb16_a784_dbae_8b97, 0xe920_d7b7_913c_0acc];

    /// Share of datagrams whose fragment owner changes on 3→2 and 4→5,
    /// and the rendezvous property (nothing moves between staying members).
    #[test]
    fn movement() {
        let ks = keys(1_000_000);
        let total = ks.len() as f64;
        let (a, b) = (table(&[0, 1, 2]), table(&[0, 2]));
        let mut moved = 0usize;
        for &(s, d, id) in &ks {
            let (x, y) = (fragment_owner(s, d, id, &a), fragment_owner(s, d, id, &b));
            if x != y {
                assert_eq!(x, NodeId(1), "a datagram moved between two members that stayed");
                moved += 1;
            }
        }
        let leave = moved as f64 / total;
        let (a, b) = (table(&[0, 1, 2, 3]), table(&[0, 1, 2, 3, 4]));
        let mut moved = 0usize;
        for &(s, d, id) in &ks {
            let (x, y) = (fragment_owner(s, d, id, &a), fragment_owner(s, d, id, &b));
            if x != y {
                assert_eq!(y, NodeId(4), "a datagram moved to a member other than the one that joined");
                moved += 1;
            }
        }
        let join = moved as f64 / total;
        println!(
            "fragment owner movement: 3→2 (leave) {:.3}% (ideal 33.333%), 4→5 (join) {:.3}% (ideal 20.000%)",
            leave * 100.0,
            join * 100.0
        );
        assert!((leave - 1.0 / 3.0).abs() < 0.015, "{leave}");
        assert!((join - 1.0 / 5.0).abs() < 0.015, "{join}");
    }

    #[test]
    fn balance() {
        let ks = keys(300_000);
        for size in [2u8, 3, 5, 16] {
            let nodes: Vec<u8> = (0..size).collect();
            let t = table(&nodes);
            let mut count = [0usize; 16];
            for &(s, d, id) in &ks {
                count[fragment_owner(s, d, id, &t).index()] += 1;
            }
            let ideal = 1.0 / f64::from(size);
            let dev = count[..usize::from(size)]
                .iter()
                .map(|&c| (c as f64 / ks.len() as f64 - ideal).abs())
                .fold(0.0, f64::max);
            println!("fragment owner balance N={size:2}: max deviation {:.3} pp", dev * 100.0);
            assert!(dev < 0.02, "N={size}: {count:?}");
        }
    }
}
