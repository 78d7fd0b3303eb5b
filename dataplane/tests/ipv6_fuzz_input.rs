//! The `ipv6_packet` fuzz target's input shape as a property test (issue
//! 16): the harness is `dataplane/fuzz/ipv6_input.rs`, included here by
//! path, so every test run builds it and runs it on random records —
//! raw bytes after an IPv6 EtherType, and well-formed IPv6 headers with
//! random extension-header chains and upper layers, on every port — and
//! checks no panic, one verdict per frame matching the counters, and the
//! accounting invariant. `cargo fuzz run ipv6_packet` (dataplane/fuzz)
//! explores the same shape with coverage guidance.

#[path = "../fuzz/ipv6_input.rs"]
mod ipv6_input;

use proptest::prelude::*;

/// Records as the fuzz target reads them: `[ctl][len][len bytes]`.
fn records() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec((any::<u8>(), prop::collection::vec(any::<u8>(), 0..120)), 1..48).prop_map(|rs| {
        let mut data = Vec::new();
        for (ctl, body) in rs {
            data.push(ctl);
            data.push(body.len() as u8);
            data.extend(body);
        }
        data
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_ipv6_records_are_accounted_for(data in records()) {
        ipv6_input::run(&data);
    }

    /// Truncated inputs, as the fuzzer makes them: a record's length byte
    /// beyond the data takes what is left.
    #[test]
    fn any_bytes_are_accounted_for(data in prop::collection::vec(any::<u8>(), 0..600)) {
        ipv6_input::run(&data);
    }
}

/// The chain builder reaches what it claims to: a structured record makes
/// a frame whose IPv6 header, with the payload length right, covers the
/// rest of the frame, and an extension header chain of each kind is
/// built (the fuzz target is only as good as its shapes).
#[test]
fn structured_records_make_well_formed_ipv6() {
    // ctl 0x08: port 0, structured, lengths and checksums right; bytes:
    // source and destination (hosts), hop limit 64, flow label, length
    // (ignored), 3 headers: hop-by-hop, fragment, UDP.
    let body = [2, 5, 0, 0, 0, 0, 0, 3, 0, 2, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
    let f = ipv6_input::frame(0x08, &body);
    assert_eq!(f[12..14], [0x86, 0xdd]);
    assert_eq!(f[14] >> 4, 6);
    let plen = usize::from(u16::from_be_bytes([f[18], f[19]]));
    assert_eq!(plen, f.len() - 54, "payload length right");
    assert_eq!(f[20], 0, "hop-by-hop first");
    assert_eq!(f[54], 44, "then a fragment header");
    assert_eq!(f[62], 17, "then UDP");
    // The same record through the pipeline: a fragment, dropped as such.
    let mut data = vec![0x08, body.len() as u8];
    data.extend(body);
    ipv6_input::run(&data);
}
