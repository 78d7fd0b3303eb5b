//! `parse` never panics and every error has a position (house style point
//! 10: every parser of untrusted input gets truncation and mutation tests).

use config::parse;
use proptest::prelude::*;

const EXAMPLE: &str = include_str!("../examples/node.yaml");

/// Parses `src` and checks the error invariants; returns whether it parsed.
fn check(src: &str) -> bool {
    match parse(src, "t.yaml") {
        Ok(c) => {
            assert!(!c.interfaces.is_empty());
            true
        }
        Err(e) => {
            let lines = src.split('\n').count();
            assert!(e.line() >= 1, "line 0 for {src:?}: {e}");
            assert!(e.column() >= 1, "column 0 for {src:?}: {e}");
            assert!(
                e.line() <= lines + 1,
                "line {} beyond {lines} lines: {e}",
                e.line()
            );
            assert_eq!(e.file(), "t.yaml");
            assert!(
                e.to_string()
                    .starts_with(&format!("t.yaml:{}:{}: ", e.line(), e.column())),
                "{e}"
            );
            false
        }
    }
}

#[test]
fn every_truncation_of_the_example() {
    let mut ok = 0;
    for n in 0..=EXAMPLE.len() {
        if EXAMPLE.is_char_boundary(n) && check(&EXAMPLE[..n]) {
            ok += 1;
        }
    }
    // Cutting after the interfaces section (and after each later complete
    // line) still yields a valid file; the full text certainly does.
    assert!(check(EXAMPLE));
    assert!(ok > 100, "only {ok} truncations parsed");
}

#[test]
fn every_single_line_deletion_of_the_example() {
    let lines: Vec<&str> = EXAMPLE.lines().collect();
    for i in 0..lines.len() {
        let mut v = lines.clone();
        v.remove(i);
        check(&v.join("\n"));
    }
}

/// A dual-stack file (issue 16): `address6` and IPv6 routes.
const DUAL: &str = "\
node: {name: ds}
interfaces:
  - name: lan
    device: net_tap0
    address: 10.0.0.1/24
    address6: 2001:db8:1::1/64
    security-level: 50
  - {name: wan, device: net_tap1, address: 10.0.1.1/24, address6: \"2001:db8:2::1/64\", security-level: 0}
routes:
  - destination: ::/0
    via: 2001:db8:2::fe
  - destination: 0.0.0.0/0
    via: 10.0.1.254
  - destination: 2001:db8:9::/48
    via: 2001:db8:1::fe
";

#[test]
fn every_truncation_and_line_deletion_of_a_dual_stack_file() {
    assert!(check(DUAL));
    for n in 0..=DUAL.len() {
        check(&DUAL[..n]);
    }
    let lines: Vec<&str> = DUAL.lines().collect();
    for i in 0..lines.len() {
        let mut v = lines.clone();
        v.remove(i);
        check(&v.join("\n"));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Any text as `address6` or as an IPv6 route's `via` or destination.
    #[test]
    fn ipv6_fields_accept_any_text(v in "[0-9a-fA-F:./%]{0,45}", line in prop::sample::select(vec![6usize, 10, 11, 15])) {
        let mut lines: Vec<String> = DUAL.lines().map(str::to_string).collect();
        let l = &mut lines[line - 1];
        let key = l.split(": ").next().unwrap_or("").to_string();
        *l = format!("{key}: \"{v}\"");
        let src = lines.join("\n");
        // The error may concern another line (a duplicate, an overlap, a
        // next hop no longer connected): it has a position, within the file.
        check(&src);
    }
}

/// YAML fragments that tend to reach deep into the parsers.
const TOKENS: &[&str] = &[
    ":",
    "- ",
    "\n",
    "  ",
    "\t",
    "[",
    "]",
    "{",
    "}",
    ",",
    "&a ",
    "*a",
    "!!str ",
    "? ",
    "'",
    "\"",
    "#",
    "---\n",
    "...\n",
    "|\n",
    ">\n",
    "~",
    "null",
    "0",
    "-1",
    "65536",
    "1-2",
    "0.0.0.0/0",
    "10.0.0.1/24",
    "any",
    "tcp",
    "name",
    "node",
    "interfaces",
    "access-rules",
    "routes",
    "via",
    "<<: *a",
    "\u{feff}",
    "é",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_byte_flips(flips in prop::collection::vec((0usize..EXAMPLE.len(), any::<u8>()), 1..8)) {
        let mut bytes = EXAMPLE.as_bytes().to_vec();
        for (i, b) in flips {
            bytes[i] = b;
        }
        check(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn random_splices_of_tokens(at in 0usize..EXAMPLE.len(), toks in prop::collection::vec(prop::sample::select(TOKENS), 1..6)) {
        let at = (0..=at).rev().find(|&i| EXAMPLE.is_char_boundary(i)).unwrap_or(0);
        let mut s = EXAMPLE[..at].to_string();
        for t in toks {
            s.push_str(t);
        }
        s.push_str(&EXAMPLE[at..]);
        check(&s);
    }

    #[test]
    fn random_token_soup(toks in prop::collection::vec(prop::sample::select(TOKENS), 0..60)) {
        check(&toks.concat());
    }

    #[test]
    fn arbitrary_strings(s in "\\PC{0,300}") {
        check(&s);
    }

    #[test]
    fn numeric_fields_accept_any_integer(v in any::<i64>(), line in prop::sample::select(vec![15usize, 16, 17, 18, 19, 26, 57, 66, 69, 70, 71])) {
        let mut lines: Vec<String> = EXAMPLE.lines().map(str::to_string).collect();
        let l = &mut lines[line - 1];
        let key = l.split(':').next().unwrap_or("").to_string();
        *l = format!("{key}: {v}");
        let src = lines.join("\n");
        if let Err(e) = parse(&src, "t.yaml") {
            prop_assert_eq!(e.line(), line, "{}", e);
        }
    }
}
