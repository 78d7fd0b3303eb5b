//! The stateless SYN-cookie codec of the SYN proxy (TCP intercept).
//!
//! When a rule's embryonic-connection limit is reached, the firewall stops
//! creating state for new connections and answers a client's SYN itself,
//! with a SYN-ACK whose sequence number is a cookie C. Only when the
//! client's ACK comes back (`ack = C + 1`, `seq = ISN + 1`, RFC 9293 §3.4:
//! the SYN occupies one sequence number) and validates does the proxy open
//! the connection to the server. Nothing is stored between the SYN and the
//! ACK: everything the proxy needs later is in the cookie or recomputable.
//! Layout of the 32-bit cookie:
//!
//! ```text
//!  31      27 26   24 23                                        0
//! +----------+-------+-------------------------------------------+
//! | t mod 32 |  mss  |  low 24 bits of SipHash-2-4(key, message)  |
//! +----------+-------+-------------------------------------------+
//!   t = now / PERIOD (64 s)      mss = index into MSS_TABLE
//!   message = address families, src address, dst address (4 or 16
//!             bytes each), src port, dst port, protocol, ISN, the full
//!             64-bit t, mss index
//! ```
//!
//! Invariants:
//! - `check(tuple, isn + 1, encode(tuple, isn, mss, now).0 + 1, now')`
//!   returns the encoded MSS for every tuple, ISN, MSS and `now` when
//!   `now'` is in the same period as `now` or the next one; all sequence
//!   arithmetic wraps modulo 2^32. A cookie is therefore valid for 64 to
//!   128 s after it was issued, depending on where in its period it was
//!   issued; two periods later it is refused.
//! - The MSS is the largest `MSS_TABLE` entry not above the client's
//!   (536, RFC 9293 §3.7.1's default, when it sent none or less), so the
//!   proxy never announces more than the client can take.
//! - A forged ACK is accepted with probability 2^-24 per try by a forger
//!   who knows the period counter (it is public: it only depends on time)
//!   and 2^-28 for a uniformly random (seq, ack): 2 of the 32 counter
//!   values are live, then the 24 hash bits must match. The MSS bits are
//!   under the MAC, so a forger cannot pick a larger MSS for a valid
//!   cookie either. The key never leaves the codec (`Debug` redacts it).
//! - No state, no allocation, no panics: `check` is a pure function of
//!   its arguments and the key.
//!
//! The clock. `t` comes from the [`Timestamp`] the caller passes (the core
//! reads no clock): a cookie validates where the key is the same and the
//! clock agrees to within the window. A single node keys each worker at
//! random (the client's ACK has the same tuple as its SYN, so it reaches
//! the same worker by the same steering); cluster members share the
//! cluster's key and count on the system clock, so any member validates
//! any member's cookie (`pipeline::synproxy`, `SynProxy::share`).
//!
//! Compared with Linux syncookies (`net/ipv4/syncookies.c`): Linux puts a
//! minute counter in the top 8 bits and hash + MSS index (4 values for
//! IPv4) in the low 24, adds the client's ISN arithmetically, and, when
//! the client sent the timestamp option, hides window scale, SACK-permitted
//! and ECN in the low bits of its TSval. We bind the ISN into the MAC
//! instead, take 5 counter bits and 3 MSS bits (8 values, jumbo included),
//! and drop the timestamp trick: the proxy's SYN-ACK carries only the MSS
//! option, so window scaling (RFC 7323 §2.2: only if both SYNs carry it)
//! and SACK (RFC 2018) are not negotiated on proxied connections — they
//! run with windows of at most 64 KiB and cumulative ACKs only, and the
//! proxy's SYN to the server must omit them too so both legs agree.

use crate::cluster::cookie::siphash24;
use crate::types::{Duration, FiveTuple, Timestamp};
use core::fmt;
use std::net::IpAddr;

/// MSS values a cookie can carry (3 bits); the index chosen is that of the
/// largest entry not above the client's MSS (536 when the client sent none
/// or less than 536: RFC 9293 §3.7.1's default for IPv4). 1220: IPv6
/// minimum MTU 1280 less 60; 1460: Ethernet; 8960: 9000-byte jumbo frames.
pub const MSS_TABLE: [u16; 8] = [536, 1220, 1300, 1360, 1400, 1440, 1460, 8960];

/// Length of one cookie period: a cookie lives one to two of them.
pub const PERIOD: Duration = Duration::from_secs(64);

/// Bits of the period counter carried in the cookie.
pub const COUNTER_BITS: u32 = 5;
/// Bits of the MSS index.
pub const MSS_BITS: u32 = 3;
/// Keyed hash bits: a forger's odds per try are 2^-HASH_BITS.
pub const HASH_BITS: u32 = 32 - COUNTER_BITS - MSS_BITS;

const MSS_SHIFT: u32 = HASH_BITS;
const COUNTER_SHIFT: u32 = HASH_BITS + MSS_BITS;
const HASH_MASK: u32 = (1 << HASH_BITS) - 1;
const MSS_MASK: u32 = (1 << MSS_BITS) - 1;
const COUNTER_MASK: u64 = (1 << COUNTER_BITS) - 1;

const _: () = assert!(HASH_BITS == 24);
const _: () = assert!(MSS_TABLE.len() == 1 << MSS_BITS);
const _: () = assert!(PERIOD.0 > 0);

/// The longest hash message: families (1), two IPv6 addresses (32),
/// ports (4), protocol (1), ISN (4), t (8), MSS index (1).
const MSG_CAP: usize = 1 + 16 + 16 + 2 + 2 + 1 + 4 + 8 + 1;

/// A fixed-size message on the stack, appended to without bounds panics.
struct Msg {
    buf: [u8; MSG_CAP],
    len: usize,
}

impl Msg {
    fn new() -> Self {
        Msg { buf: [0; MSG_CAP], len: 0 }
    }
    /// Appends `bytes`; never fails for the messages built here (`MSG_CAP`
    /// is the longest; `tests::message_fits` checks it).
    fn put(&mut self, bytes: &[u8]) {
        let end = self.len.saturating_add(bytes.len());
        if let Some(dst) = self.buf.get_mut(self.len..end) {
            dst.copy_from_slice(bytes);
            self.len = end;
        }
    }
    fn put_addr(&mut self, a: &IpAddr) {
        match a {
            IpAddr::V4(v) => self.put(&v.octets()),
            IpAddr::V6(v) => self.put(&v.octets()),
        }
    }
    fn bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

/// SYN-cookie encoder and checker for one secret. `Copy`; its `Debug`
/// does not print the key.
#[derive(Copy, Clone, PartialEq, Eq)]
pub struct ProxyCookies {
    k0: u64,
    k1: u64,
}

impl fmt::Debug for ProxyCookies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProxyCookies { key: <redacted> }")
    }
}

/// The index of the largest `MSS_TABLE` entry not above `mss` (0 for none).
fn mss_index(mss: Option<u16>) -> u32 {
    let m = mss.unwrap_or(0);
    MSS_TABLE.iter().rposition(|&e| e <= m).map_or(0, |i| i as u32)
}

/// The MSS of table index `idx` (only the low `MSS_BITS` bits are used).
fn mss_of(idx: u32) -> u16 {
    MSS_TABLE.get((idx & MSS_MASK) as usize).copied().unwrap_or(MSS_TABLE[0])
}

/// The period counter at `now`.
fn period(now: Timestamp) -> u64 {
    now.nanos() / PERIOD.0
}

impl ProxyCookies {
    /// A codec keyed with a 128-bit secret (k0 from the first 8 bytes, k1
    /// from the last 8, little-endian, as `CookieCodec` splits its key).
    pub fn new(key: [u8; 16]) -> Self {
        let k = u128::from_le_bytes(key);
        ProxyCookies { k0: k as u64, k1: (k >> 64) as u64 }
    }

    /// The 24 hash bits for (tuple, isn, t, mss index).
    fn hash(&self, tuple: &FiveTuple, isn: u32, t: u64, idx: u32) -> u32 {
        let fam = u8::from(tuple.src.is_ipv6()) | u8::from(tuple.dst.is_ipv6()) << 1;
        let mut m = Msg::new();
        m.put(&[fam]);
        m.put_addr(&tuple.src);
        m.put_addr(&tuple.dst);
        m.put(&tuple.src_port.to_le_bytes());
        m.put(&tuple.dst_port.to_le_bytes());
        m.put(&[tuple.proto]);
        m.put(&isn.to_le_bytes());
        m.put(&t.to_le_bytes());
        m.put(&[(idx & MSS_MASK) as u8]);
        (siphash24(self.k0, self.k1, m.bytes()) as u32) & HASH_MASK
    }

    /// The cookie for period `t`.
    fn cookie_at(&self, tuple: &FiveTuple, isn: u32, t: u64, idx: u32) -> u32 {
        ((t & COUNTER_MASK) as u32) << COUNTER_SHIFT
            | (idx & MSS_MASK) << MSS_SHIFT
            | self.hash(tuple, isn, t, idx)
    }

    /// The cookie for a SYN of `tuple` (the client's packet's own tuple:
    /// src = client) with initial sequence number `isn` and MSS option
    /// `mss` (`None`: none sent), at `now`. Returns (cookie, MSS the cookie
    /// encodes); the proxy's SYN-ACK carries seq = cookie and that MSS.
    pub fn encode(&self, tuple: &FiveTuple, isn: u32, mss: Option<u16>, now: Timestamp) -> (u32, u16) {
        let idx = mss_index(mss);
        (self.cookie_at(tuple, isn, period(now), idx), mss_of(idx))
    }

    /// Check the client's ACK-carrying segment of `tuple` (same direction
    /// as the SYN) with sequence `seq` and acknowledgement `ack`: valid iff
    /// `ack - 1` is the cookie `encode` gave for ISN `seq - 1` in the
    /// current period or the one before (arithmetic modulo 2^32). Returns
    /// the encoded MSS.
    pub fn check(&self, tuple: &FiveTuple, seq: u32, ack: u32, now: Timestamp) -> Option<u16> {
        let isn = seq.wrapping_sub(1);
        let cookie = ack.wrapping_sub(1);
        let t_c = u64::from(cookie >> COUNTER_SHIFT);
        let idx = (cookie >> MSS_SHIFT) & MSS_MASK;
        let now_t = period(now);
        // The two live periods differ in their low bits, so at most one
        // matches the cookie's counter.
        let t = [Some(now_t), now_t.checked_sub(1)]
            .into_iter()
            .flatten()
            .find(|t| t & COUNTER_MASK == t_c)?;
        (self.cookie_at(tuple, isn, t, idx) == cookie).then(|| mss_of(idx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ip_proto;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const KEY: [u8; 16] = *b"clusterfw-proxy!";

    struct Rng(u64);
    impl Rng {
        fn next64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn next(&mut self) -> u32 {
            (self.next64() >> 32) as u32
        }
    }

    fn v4() -> FiveTuple {
        FiveTuple {
            src: IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7)),
            dst: IpAddr::V4(Ipv4Addr::new(203, 0, 113, 80)),
            proto: ip_proto::TCP,
            src_port: 50_000,
            dst_port: 443,
        }
    }

    fn v6() -> FiveTuple {
        FiveTuple {
            src: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 7)),
            dst: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 2, 0, 0, 0, 0x80)),
            proto: ip_proto::TCP,
            src_port: 40_001,
            dst_port: 80,
        }
    }

    /// A time `quarter`/4 of the way into period `t`.
    fn at(t: u64, quarter: u64) -> Timestamp {
        Timestamp(t * PERIOD.0 + quarter * (PERIOD.0 / 4))
    }

    #[test]
    fn round_trip_v4_v6_every_mss() {
        let c = ProxyCookies::new(KEY);
        for tuple in [v4(), v6()] {
            for (i, &mss) in MSS_TABLE.iter().enumerate() {
                for isn in [0, 1, 0x1234_5678, u32::MAX - 1, u32::MAX] {
                    let now = at(1000 + i as u64, 1);
                    let (cookie, got) = c.encode(&tuple, isn, Some(mss), now);
                    assert_eq!(got, mss);
                    assert_eq!((cookie >> 24) & 7, i as u32, "mss index bits");
                    assert_eq!(u64::from(cookie >> 27), (1000 + i as u64) % 32, "counter bits");
                    let (seq, ack) = (isn.wrapping_add(1), cookie.wrapping_add(1));
                    assert_eq!(c.check(&tuple, seq, ack, now), Some(mss), "{tuple} isn {isn:#x}");
                }
            }
        }
    }

    /// Client MSS → MSS the cookie encodes (and the proxy announces).
    #[test]
    fn message_fits() {
        let mut m = Msg::new();
        m.put(&[0]);
        m.put_addr(&v6().src);
        m.put_addr(&v6().dst);
        m.put(&[0; 2 + 2 + 1 + 4 + 8 + 1]);
        assert_eq!(m.bytes().len(), MSG_CAP);
        m.put(&[1]);
        assert_eq!(m.bytes().len(), MSG_CAP, "a full message ignores more bytes");
    }

    #[test]
    fn mss_golden() {
        let c = ProxyCookies::new(KEY);
        let table: &[(Option<u16>, u16)] = &[
            (None, 536),
            (Some(0), 536),
            (Some(100), 536),
            (Some(535), 536),
            (Some(536), 536),
            (Some(1219), 536),
            (Some(1220), 1220),
            (Some(1299), 1220),
            (Some(1300), 1300),
            (Some(1380), 1360),
            (Some(1400), 1400),
            (Some(1452), 1440),
            (Some(1460), 1460),
            (Some(1500), 1460),
            (Some(8959), 1460),
            (Some(8960), 8960),
            (Some(9000), 8960),
            (Some(65535), 8960),
        ];
        for &(client, want) in table {
            let (cookie, got) = c.encode(&v4(), 7, client, at(5, 0));
            assert_eq!(got, want, "client {client:?}");
            assert_eq!(c.check(&v4(), 8, cookie.wrapping_add(1), at(5, 3)), Some(want));
        }
    }

    #[test]
    fn lifetime_in_periods() {
        let c = ProxyCookies::new(KEY);
        for issued in 0..4 {
            let (cookie, _) = c.encode(&v4(), 99, Some(1460), at(10, issued));
            let ok = |now| c.check(&v4(), 100, cookie.wrapping_add(1), now);
            for q in 0..4 {
                assert_eq!(ok(at(10, q)), Some(1460), "same period, quarter {q}");
                assert_eq!(ok(at(11, q)), Some(1460), "next period, quarter {q}");
                assert_eq!(ok(at(12, q)), None, "two periods later, quarter {q}");
                assert_eq!(ok(at(9, q)), None, "a period before it was issued");
            }
            // The last nanosecond of the next period, the first of the one after.
            assert_eq!(ok(Timestamp(12 * PERIOD.0 - 1)), Some(1460));
            assert_eq!(ok(Timestamp(12 * PERIOD.0)), None);
            // 32 periods later the counter bits match again but t does not.
            assert_eq!(ok(at(42, 0)), None);
            assert_eq!(ok(at(43, 0)), None);
        }
    }

    #[test]
    fn counter_wrap_and_origin() {
        let c = ProxyCookies::new(KEY);
        let (cookie, _) = c.encode(&v6(), 5, None, at(31, 3));
        assert_eq!(cookie >> 27, 31);
        assert_eq!(c.check(&v6(), 6, cookie.wrapping_add(1), at(32, 0)), Some(536));
        assert_eq!(c.check(&v6(), 6, cookie.wrapping_add(1), at(33, 0)), None);
        // At t = 0 only the current period is live: a counter of 31 must
        // not make t - 1 underflow.
        let (cookie, _) = c.encode(&v6(), 5, None, at(0, 0));
        assert_eq!(cookie >> 27, 0);
        assert_eq!(c.check(&v6(), 6, cookie.wrapping_add(1), Timestamp::ZERO), Some(536));
        for forged in [31u32 << 27, u32::MAX] {
            assert_eq!(c.check(&v6(), 6, forged.wrapping_add(1), Timestamp::ZERO), None);
        }
        // The end of time.
        let end = Timestamp::MAX;
        let (cookie, _) = c.encode(&v4(), 5, Some(1400), end);
        assert_eq!(c.check(&v4(), 6, cookie.wrapping_add(1), end), Some(1400));
    }

    #[test]
    fn refused_when_anything_differs() {
        let c = ProxyCookies::new(KEY);
        let now = at(77, 2);
        for base in [v4(), v6()] {
            let isn = 0xdead_beef;
            let (cookie, _) = c.encode(&base, isn, Some(1460), now);
            let (seq, ack) = (isn.wrapping_add(1), cookie.wrapping_add(1));
            assert_eq!(c.check(&base, seq, ack, now), Some(1460));
            let mut others = Vec::new();
            let mut t = base;
            t.src = match base.src {
                IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) ^ 1)),
                IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) ^ 1)),
            };
            others.push(("src", t));
            let mut t = base;
            t.dst = match base.dst {
                IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) ^ 0x8000_0000)),
                IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) ^ 1 << 127)),
            };
            others.push(("dst", t));
            others.push(("src_port", FiveTuple { src_port: base.src_port + 1, ..base }));
            others.push(("dst_port", FiveTuple { dst_port: base.dst_port + 1, ..base }));
            others.push(("proto", FiveTuple { proto: ip_proto::UDP, ..base }));
            others.push(("reversed", base.reversed()));
            for (what, t) in others {
                assert_ne!(t, base);
                assert_eq!(c.check(&t, seq, ack, now), None, "{what} changed");
            }
            // The ISN is bound: seq off by one either way.
            assert_eq!(c.check(&base, seq.wrapping_add(1), ack, now), None);
            assert_eq!(c.check(&base, seq.wrapping_sub(1), ack, now), None);
            // Another key.
            let other = ProxyCookies::new(*b"another-secret!!");
            assert_ne!(other, c);
            assert_eq!(other.check(&base, seq, ack, now), None);
            // Every other MSS index (the index is under the MAC).
            for idx in 0..8u32 {
                if idx == 6 {
                    continue;
                }
                let forged = cookie & !(7 << 24) | idx << 24;
                assert_eq!(c.check(&base, seq, forged.wrapping_add(1), now), None, "mss index {idx}");
            }
            // Every single bit flipped: hash, MSS index and counter bits.
            for bit in 0..32 {
                let forged = cookie ^ 1 << bit;
                assert_eq!(c.check(&base, seq, forged.wrapping_add(1), now), None, "bit {bit}");
            }
        }
    }

    /// Pins the hash message and the bit layout: a change to either breaks
    /// cookies in flight across an upgrade, so it must be deliberate.
    #[test]
    fn golden_cookies() {
        let c = ProxyCookies::new(KEY);
        let got = [
            c.encode(&v4(), 0x0102_0304, Some(1460), at(1, 0)),
            c.encode(&v6(), 0x0102_0304, None, at(40, 1)),
        ];
        assert_eq!(got, GOLDEN, "{:#010x} {:#010x}", got[0].0, got[1].0);
        assert_eq!(got[0].0 >> 24, 1 << 3 | 6);
        assert_eq!(got[1].0 >> 24, 8 << 3);
        assert_eq!(format!("{c:?}"), "ProxyCookies { key: <redacted> }");
        // The message spelt out, hashed by std's SipHash-2-4 with the key
        // split as documented (k0 = first 8 bytes, little-endian).
        let mut msg = vec![0u8]; // both IPv4
        msg.extend_from_slice(&[198, 51, 100, 7, 203, 0, 113, 80]);
        msg.extend_from_slice(&50_000u16.to_le_bytes());
        msg.extend_from_slice(&443u16.to_le_bytes());
        msg.push(ip_proto::TCP);
        msg.extend_from_slice(&0x0102_0304u32.to_le_bytes());
        msg.extend_from_slice(&1u64.to_le_bytes());
        msg.push(6);
        let k0 = u64::from_le_bytes(KEY[..8].try_into().unwrap());
        let k1 = u64::from_le_bytes(KEY[8..].try_into().unwrap());
        #[allow(deprecated)]
        let mut h = std::hash::SipHasher::new_with_keys(k0, k1);
        std::hash::Hasher::write(&mut h, &msg);
        let want = 1 << 27 | 6 << 24 | (std::hash::Hasher::finish(&h) as u32 & 0xff_ffff);
        assert_eq!(got[0].0, want);
    }
    const GOLDEN: [(u32, u16); 2] = [(0x0e0b_e53b, 1460), (0x40fb_3ad5, 536)];

    /// 1,000,000 random (seq, ack) pairs against a live codec: each is
    /// accepted with probability 2^-28 (2/32 live counters × 2^-24), so
    /// ~0.004 are expected; with the counter bits set to the live period,
    /// 2^-24 each, ~0.06 expected.
    #[test]
    fn forged_acks_rejected() {
        let c = ProxyCookies::new(KEY);
        let mut rng = Rng(2024);
        let n = 1_000_000u32;
        let now = at(1234, 2);
        let (mut accepted, mut live_counter) = (0u32, 0u32);
        for i in 0..n {
            let tuple = if i % 2 == 0 { v4() } else { v6() };
            if c.check(&tuple, rng.next(), rng.next(), now).is_some() {
                accepted += 1;
            }
            // A forger who sets the live counter bits: 2^-24 per try.
            let ack = (1234 % 32) << 27 | rng.next() >> 5;
            if c.check(&tuple, rng.next(), ack.wrapping_add(1), now).is_some() {
                live_counter += 1;
            }
        }
        println!(
            "synproxy cookie false accept: {accepted}/{n} random (seq, ack) (expected {:.4}); {live_counter}/{n} with the live counter (expected {:.4})",
            f64::from(n) / f64::from(1u32 << 28),
            f64::from(n) / f64::from(1u32 << 24)
        );
        assert!(accepted <= 3, "{accepted}");
        assert!(live_counter <= 3, "{live_counter}");
    }

    /// A seeded sweep of random tuples (either family), ISNs, MSS values and
    /// times, checked later in the same or the next period.
    #[test]
    fn round_trip_seeded() {
        let mut rng = Rng(7);
        for _ in 0..100_000 {
            let key = (u128::from(rng.next64()) << 64 | u128::from(rng.next64())).to_le_bytes();
            let c = ProxyCookies::new(key);
            let addr = |rng: &mut Rng, six: bool| {
                if six {
                    IpAddr::V6(Ipv6Addr::from(u128::from(rng.next64()) << 64 | u128::from(rng.next64())))
                } else {
                    IpAddr::V4(Ipv4Addr::from(rng.next()))
                }
            };
            let six = rng.next() & 1 == 1;
            let tuple = FiveTuple {
                src: addr(&mut rng, six),
                dst: addr(&mut rng, six),
                proto: ip_proto::TCP,
                src_port: rng.next() as u16,
                dst_port: rng.next() as u16,
            };
            let isn = rng.next();
            let mss = (rng.next() & 1 == 1).then(|| rng.next() as u16);
            let now = Timestamp(rng.next64() >> 1);
            let later = Timestamp(now.nanos() + rng.next64() % (PERIOD.0 - now.nanos() % PERIOD.0 + PERIOD.0));
            let (cookie, m) = c.encode(&tuple, isn, mss, now);
            assert_eq!(c.check(&tuple, isn.wrapping_add(1), cookie.wrapping_add(1), later), Some(m));
        }
    }

    proptest! {
        #[test]
        fn round_trip_any(
            key in any::<[u8; 16]>(),
            src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(), six in any::<bool>(),
            ports in any::<(u16, u16)>(), isn in any::<u32>(), mss in any::<Option<u16>>(),
            now in any::<u64>(), later in 0u64..2,
        ) {
            let c = ProxyCookies::new(key);
            let addr = |b: [u8; 16]| if six {
                IpAddr::V6(Ipv6Addr::from(b))
            } else {
                IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
            };
            let tuple = FiveTuple { src: addr(src), dst: addr(dst), proto: ip_proto::TCP, src_port: ports.0, dst_port: ports.1 };
            let now = Timestamp(now);
            let (cookie, m) = c.encode(&tuple, isn, mss, now);
            prop_assert!(m <= mss.unwrap_or(0).max(536));
            prop_assert!(MSS_TABLE.contains(&m));
            let check_at = Timestamp(now.nanos().saturating_add(later * PERIOD.0));
            let expect = if period(check_at) <= period(now) + 1 { Some(m) } else { None };
            prop_assert_eq!(c.check(&tuple, isn.wrapping_add(1), cookie.wrapping_add(1), check_at), expect);
        }
    }
}
