//! `cargo fuzz run parse_policy` (from `config/`): `config::parse_policy`
//! (a replicated policy document, checked against the example node's
//! interfaces) on arbitrary UTF-8 must return `Ok` or an `Err` with a
//! position, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

const NODE: &str = include_str!("../../examples/node.yaml");

fuzz_target!(|data: &[u8]| {
    let interfaces = config::parse(NODE, "node.yaml").expect("the example parses").interfaces;
    if let Ok(src) = std::str::from_utf8(data) {
        if let Err(e) = config::parse_policy(src, "fuzz", &interfaces) {
            assert!(e.line() >= 1 && e.column() >= 1, "{e}");
        }
    }
});
