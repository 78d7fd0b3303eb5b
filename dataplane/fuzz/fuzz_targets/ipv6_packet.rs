//! Fuzz the IPv6 path of the pipeline: arbitrary bytes after an IPv6
//! EtherType, and well-formed IPv6 headers with arbitrary extension-header
//! chains and upper layers, on every port of a pipeline with IPv6
//! addresses, routes and access rules with IPv6 prefixes
//! (`Pipeline::set_ipv6`). The input shape and the checks (no panic, one
//! verdict per frame agreeing with the counters, the accounting invariant)
//! are in `../ipv6_input.rs`, which `dataplane/tests/ipv6_fuzz_input.rs`
//! also runs as a property test.
//!
//! Run: `cargo fuzz run ipv6_packet` from `dataplane/` (nightly), or the
//! stable recipe in `parse_packet.rs` with `--bin ipv6_packet` and
//! `corpus/ipv6_packet` (a copy of `seeds_ipv6/` to start from: neighbour
//! discovery, then connections out and in, and an extension-header chain).
#![no_main]

#[path = "../ipv6_input.rs"]
mod ipv6_input;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ipv6_input::run(data));
