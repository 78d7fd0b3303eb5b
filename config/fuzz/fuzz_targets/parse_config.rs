//! `cargo fuzz run parse_config` (from `config/`): `config::parse` on
//! arbitrary UTF-8 must return `Ok` or an `Err` with a position, never
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(src) = std::str::from_utf8(data) {
        if let Err(e) = config::parse(src, "fuzz.yaml") {
            assert!(e.line() >= 1 && e.column() >= 1, "{e}");
        }
    }
});
