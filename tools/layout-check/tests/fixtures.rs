//! Each rule on small fixture trees: a tree that breaks the rule must give
//! exactly that violation (file, line, rule), and the same tree with the
//! fault removed must be clean, so a disabled or broken rule fails here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use layout_check::{check, run, Pending, Rule, Violation};

/// A temporary tree, removed on drop.
struct Tree(PathBuf);

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

static N: AtomicUsize = AtomicUsize::new(0);

/// The members every fixture has, each a crate with a clean `src/lib.rs`.
const BASE: &[(&str, &str)] = &[
    ("Cargo.toml", "[workspace]\nmembers = [\"dataplane\", \"config\", \"controlplane\", \"node\", \"dpdk-bindings\"]\n"),
    ("dataplane/Cargo.toml", "[package]\nname = \"dataplane\"\n"),
    ("dataplane/src/lib.rs", "//! dp\n#![deny(unsafe_code)]\npub mod wire;\npub mod pipeline;\n"),
    ("dataplane/src/wire.rs", "pub struct View;\n"),
    ("dataplane/src/pipeline.rs", "use crate::wire::View;\npub struct Rx(View);\n"),
    ("config/Cargo.toml", "[package]\nname = \"config\"\n"),
    ("config/src/lib.rs", "#![deny(unsafe_code)]\nmod net;\nmod model;\n"),
    ("config/src/net.rs", "pub struct Net;\n"),
    ("config/src/model.rs", "use crate::net::Net;\npub struct Model(Net);\n"),
    ("controlplane/Cargo.toml", "[package]\nname = \"controlplane\"\n[dependencies]\nlog = \"0.4\"\n"),
    ("controlplane/src/lib.rs", "#![deny(unsafe_code)]\npub fn tick(now: u64) -> u64 { now }\n"),
    ("node/Cargo.toml", "[package]\nname = \"clusterfw\"\n[dependencies]\ndpdk-sys = { path = \"../dpdk-bindings\" }\n"),
    ("node/src/main.rs", "#![deny(unsafe_code)]\nfn main() {}\n"),
    ("dpdk-bindings/Cargo.toml", "[package]\nname = \"dpdk-sys\"\n"),
    ("dpdk-bindings/src/lib.rs", "pub unsafe fn raw() {}\n"),
];

/// The base tree with `files` added or replaced.
fn tree(files: &[(&str, &str)]) -> Tree {
    let dir = std::env::temp_dir().join(format!(
        "layout-check-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    for (p, text) in BASE
        .iter()
        .filter(|(p, _)| !files.iter().any(|(q, _)| q == p))
        .chain(files)
    {
        let f = dir.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, text).unwrap();
    }
    Tree(dir)
}

fn violations(t: &Tree) -> Vec<Violation> {
    check(&t.0).unwrap().violations
}

fn of(t: &Tree, rule: Rule) -> Vec<Violation> {
    violations(t)
        .into_iter()
        .filter(|v| v.rule == rule)
        .collect()
}

/// (file, line) of each violation.
fn at(v: &[Violation]) -> Vec<(String, usize)> {
    v.iter()
        .map(|v| (v.file.to_string_lossy().into_owned(), v.line))
        .collect()
}

#[test]
fn base_tree_is_clean() {
    let t = tree(&[]);
    assert_eq!(violations(&t), vec![]);
}

#[test]
fn two_module_cycle_is_found() {
    let t = tree(&[(
        "dataplane/src/wire.rs",
        "pub struct View;\npub fn f(_: crate::pipeline::Rx) {}\n",
    )]);
    let v = of(&t, Rule::Cycle);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert_eq!(v[0].subject, "dataplane");
    assert!(
        v[0].message.contains("{pipeline, wire}"),
        "{}",
        v[0].message
    );
    let text = v[0].to_string();
    assert!(
        text.contains("pipeline -> wire  dataplane/src/pipeline.rs:1  `crate::wire::View`"),
        "{text}"
    );
    assert!(
        text.contains("wire -> pipeline  dataplane/src/wire.rs:2  `crate::pipeline::Rx`"),
        "{text}"
    );
}

#[test]
fn cycle_through_a_reexport_and_in_config() {
    // `crate::Rx` is `pipeline::Rx` re-exported at the root.
    let t = tree(&[
        (
            "dataplane/src/lib.rs",
            "#![deny(unsafe_code)]\npub mod wire;\npub mod pipeline;\npub use pipeline::Rx;\n",
        ),
        (
            "dataplane/src/wire.rs",
            "use crate::Rx;\npub struct View;\n",
        ),
        (
            "config/src/net.rs",
            "use super::model::Model;\npub struct Net;\n",
        ),
    ]);
    let v = of(&t, Rule::Cycle);
    assert_eq!(
        v.iter().map(|v| v.subject.as_str()).collect::<Vec<_>>(),
        ["config", "dataplane"],
        "{v:#?}"
    );
}

#[test]
fn nested_cycle_is_reported_under_its_parent() {
    let t = tree(&[
        (
            "dataplane/src/lib.rs",
            "#![deny(unsafe_code)]\npub mod wire;\npub mod pipeline;\n",
        ),
        (
            "dataplane/src/pipeline/mod.rs",
            "mod a;\nmod b;\npub use a::A;\npub struct Rx;\n",
        ),
        (
            "dataplane/src/pipeline/a.rs",
            "use super::b::B;\npub struct A(B);\n",
        ),
        (
            "dataplane/src/pipeline/b.rs",
            "pub struct B;\nfn f() -> Option<super::a::A> { None }\n",
        ),
        ("dataplane/src/pipeline.rs", ""),
    ]);
    std::fs::remove_file(t.0.join("dataplane/src/pipeline.rs")).unwrap();
    let v = of(&t, Rule::Cycle);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert_eq!(v[0].subject, "dataplane::pipeline");
    assert_eq!(at(&v), [("dataplane/src/pipeline/a.rs".to_string(), 1)]);
}

#[test]
fn parent_and_child_using_each_other_is_not_a_cycle() {
    // mod.rs composes its children, the children use what mod.rs defines;
    // comments, strings and test modules name anything without an edge.
    let t = tree(&[
        ("dataplane/src/lib.rs", "#![deny(unsafe_code)]\npub mod wire;\npub mod pipeline;\n"),
        ("dataplane/src/pipeline/mod.rs", "mod a;\nmod b;\npub struct Rx;\npub fn go() { a::run(); b::run(); }\n"),
        ("dataplane/src/pipeline/a.rs", "use super::Rx;\n/// Unlike [`super::b::run`].\npub fn run() { let _ = \"crate::pipeline::b\"; }\n#[cfg(test)]\nmod tests {\n    use super::super::b;\n}\n"),
        ("dataplane/src/pipeline/b.rs", "pub fn run() { let _r: Option<super::Rx> = None; } // super::a::run()\n"),
        ("dataplane/src/wire.rs", "pub struct View;\n/* crate::pipeline::Rx */\n"),
    ]);
    assert_eq!(of(&t, Rule::Cycle), vec![]);
}

#[test]
fn leaf_using_pipeline() {
    let t = tree(&[(
        "dataplane/src/wire.rs",
        "pub struct View;\n#[cfg(test)]\nmod tests { use crate::pipeline::Rx; }\npub fn f(_: &crate::pipeline::Rx) {}\n",
    )]);
    let v = of(&t, Rule::LeafPipeline);
    assert_eq!(at(&v), [("dataplane/src/wire.rs".to_string(), 4)], "{v:#?}");
    assert!(v[0].message.contains("leaf module `wire`"));

    // Through a root re-export, from a folder leaf.
    let t = tree(&[
        (
            "dataplane/src/lib.rs",
            "#![deny(unsafe_code)]\npub mod wire;\npub mod pipeline;\npub use pipeline::*;\n",
        ),
        ("dataplane/src/wire.rs", "pub mod ipv4;\npub struct View;\n"),
        ("dataplane/src/wire/ipv4.rs", "use crate::Rx;\n"),
    ]);
    assert_eq!(
        at(&of(&t, Rule::LeafPipeline)),
        [("dataplane/src/wire/ipv4.rs".to_string(), 1)]
    );

    // A non-leaf may use the pipeline.
    let t = tree(&[
        (
            "dataplane/src/lib.rs",
            "#![deny(unsafe_code)]\npub mod wire;\npub mod pipeline;\npub mod fastpath;\n",
        ),
        ("dataplane/src/fastpath.rs", "use crate::pipeline::Rx;\n"),
    ]);
    assert_eq!(violations(&t), vec![]);
}

#[test]
fn missing_deny_unsafe() {
    let t = tree(&[
        ("node/src/main.rs", "fn main() {}\n"),
        (
            "node/src/bin/ctl.rs",
            "//! ctl\nfn main() {}\n#![deny(unsafe_code)]\n",
        ),
        (
            "config/src/lib.rs",
            "//! doc\n#![forbid(unsafe_code)]\nmod net;\nmod model;\n",
        ),
        (
            "controlplane/src/lib.rs",
            "#![warn(missing_docs)]\n#![deny(unsafe_code, unused)]\n",
        ),
    ]);
    let v = of(&t, Rule::Unsafe);
    assert_eq!(
        at(&v),
        [
            ("node/src/bin/ctl.rs".to_string(), 1),
            ("node/src/main.rs".to_string(), 1)
        ],
        "{v:#?}"
    );
}

#[test]
fn unsafe_needs_allow_and_safety() {
    let ok = "#[inline]\n#[allow(unsafe_code)]\npub fn p(r: &u8) {\n    // SAFETY: r is a reference.\n    unsafe { core::ptr::read(r) };\n}\n";
    let t = tree(&[("dataplane/src/wire.rs", &format!("pub struct View;\n{ok}"))]);
    assert_eq!(violations(&t), vec![]);

    let t = tree(&[(
        "dataplane/src/wire.rs",
        "pub struct View;\n#[allow(unsafe_code)]\npub fn p(r: &u8) {\n    unsafe { core::ptr::read(r) };\n}\n// SAFETY: none\npub fn q(r: &u8) { unsafe { core::ptr::read(r) }; }\n#[cfg(test)]\nmod t { fn z() { let _ = unsafe { 1 }; } }\n",
    )]);
    let v = of(&t, Rule::Unsafe);
    assert_eq!(
        at(&v),
        [4, 7, 9].map(|l| ("dataplane/src/wire.rs".to_string(), l)),
        "{v:#?}"
    );

    let t = tree(&[(
        "dataplane/src/wire.rs",
        "#![allow(unsafe_code)]\npub struct View;\n",
    )]);
    assert_eq!(
        at(&of(&t, Rule::Unsafe)),
        [("dataplane/src/wire.rs".to_string(), 1)]
    );
}

#[test]
fn offset_reads_and_opt_outs() {
    let t = tree(&[
        (
            "node/src/ccl.rs",
            "fn f(d: &[u8]) -> Option<u16> {\n    let e = u16::from_be_bytes([*d.get(12)?, *d.get(13)?]);\n    if e == 0x0800 { return None; }\n    let _mac = d.get(0..6)?;\n    Some(e)\n}\n",
        ),
        ("node/src/main.rs", "#![deny(unsafe_code)]\nmod ccl;\nfn main() {}\n"),
        // wire/ is the codec layer: offsets are its business.
        ("dataplane/src/wire.rs", "pub struct View;\npub fn t(d: &[u8]) -> &[u8] { &d[12..14] }\n"),
    ]);
    let v = of(&t, Rule::Offset);
    assert_eq!(
        at(&v),
        [2, 3, 4].map(|l| ("node/src/ccl.rs".to_string(), l)),
        "{v:#?}"
    );
    assert!(v[1].message.contains("EtherType literal `0x0800`"));

    let t = tree(&[(
        "dataplane/src/pipeline.rs",
        "pub struct Rx;\npub fn f(d: &mut [u8]) {\n    d[..6].fill(0); // layout: allow(offset) fixture: a reason\n    // layout: allow(offset) the line below\n    d[6..12].fill(0);\n    let _ = 1; // layout: allow(offset) nothing to allow here\n    d[12..14].fill(0); // layout: allow(offset)\n}\n",
    )]);
    let found = check(&t.0).unwrap();
    let (all, opt_outs) = (found.violations, found.opt_outs);
    assert_eq!(opt_outs, 2);
    let v: Vec<_> = all.into_iter().filter(|v| v.rule == Rule::Offset).collect();
    assert_eq!(
        at(&v),
        [6, 7].map(|l| ("dataplane/src/pipeline.rs".to_string(), l)),
        "{v:#?}"
    );
    assert!(
        v[0].message.contains("suppresses nothing") && v[1].message.contains("without a reason"),
        "{v:#?}"
    );
}

#[test]
fn controlplane_without_dpdk_and_clock() {
    let t = tree(&[
        ("controlplane/Cargo.toml", "[package]\nname = \"controlplane\"\n[dependencies]\nnode = { package = \"clusterfw\", path = \"../node\" }\n"),
        (
            "controlplane/src/lib.rs",
            "#![deny(unsafe_code)]\nuse core::time::Duration;\nuse std::{io, time::Instant};\npub fn t() -> std::time::SystemTime { todo!() }\n#[cfg(test)]\nmod tests { fn d() { let _ = std::time::Instant::now(); } }\n",
        ),
    ]);
    let v = of(&t, Rule::ControlplaneIo);
    assert_eq!(
        at(&v),
        [
            ("controlplane/Cargo.toml".to_string(), 4),
            ("controlplane/src/lib.rs".to_string(), 3),
            ("controlplane/src/lib.rs".to_string(), 4)
        ],
        "{v:#?}"
    );
    assert!(
        v[0].message.contains("clusterfw -> dpdk-sys"),
        "{}",
        v[0].message
    );
}

#[test]
fn allow_list_allows_and_must_not_go_stale() {
    let t = tree(&[("node/src/main.rs", "fn main() {}\n")]);
    let p = |s: &str| Pending::parse(Path::new("pending.txt"), s).unwrap();
    let r = run(
        &t.0,
        &p("# comment\nunsafe node/src/main.rs issue 9 restructure in progress\n"),
    )
    .unwrap();
    assert!(r.ok() && r.allowed.len() == 1, "{r:#?}");
    let r = run(
        &t.0,
        &p("unsafe node/ whole crate\noffset node/src/ccl.rs gone already\n"),
    )
    .unwrap();
    assert!(!r.ok());
    assert_eq!(r.stale.iter().map(|e| e.line).collect::<Vec<_>>(), [2]);
    let r = run(&t.0, &Pending::default()).unwrap();
    assert_eq!(r.violations.len(), 1);
    assert!(Pending::parse(Path::new("p"), "cycles dataplane x\n")
        .unwrap_err()
        .contains("p:1: unknown rule"));
    assert!(Pending::parse(Path::new("p"), "cycle dataplane\n").is_err());
}

#[test]
fn binary_prints_file_line_rule_and_fails() {
    let t = tree(&[(
        "dataplane/src/wire.rs",
        "pub struct View;\npub fn f(_: crate::pipeline::Rx) {}\n",
    )]);
    let out = Command::new(env!("CARGO_BIN_EXE_layout-check"))
        .args(["--no-pending", "--root"])
        .arg(&t.0)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("dataplane/src/wire.rs:2: [leaf-pipeline]"),
        "{stdout}"
    );
    assert!(
        stdout
            .contains("[cycle] import cycle between the children of `dataplane`: {pipeline, wire}"),
        "{stdout}"
    );

    let clean = tree(&[]);
    std::fs::create_dir_all(clean.0.join("tools/layout-check")).unwrap();
    std::fs::write(clean.0.join("tools/layout-check/pending.txt"), "# empty\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_layout-check"))
        .arg("--root")
        .arg(&clean.0)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
