//! The five boundary rules of issue 9. Each `check_*` function returns the
//! violations it finds in the tree; what each rule means, and the scanner's
//! limits, are in `docs/layout.md`. The lists that say where a rule applies
//! are the constants below: extend them here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::lex::{self, Source};
use crate::manifest::{self, Manifest};
use crate::modgraph::{self, Crate};
use crate::{Rule, Violation};

/// Crates whose module graph must have no cycles: (crate, root file).
pub const ACYCLIC_CRATES: &[(&str, &str)] = &[
    ("dataplane", "dataplane/src/lib.rs"),
    ("config", "config/src/lib.rs"),
];

/// The dataplane's leaf modules (top level): none of them may use
/// [`PIPELINE`]. Modules not (yet) present are skipped.
pub const DATAPLANE_LEAVES: &[&str] = &[
    "wire",
    "conntrack",
    "frag",
    "cluster",
    "ccl",
    "types",
    "buf",
    "route",
    "acl",
    "arp",
    "prefetch",
    "slots",
    "steer",
    "nat",
];

/// The module leaves must not use.
pub const PIPELINE: &str = "dataplane::pipeline";

/// The crate (directory) that must stay free of DPDK and of clocks.
pub const CLOCK_FREE_CRATE: &str = "controlplane";
/// Packages it must not depend on, directly or through workspace crates.
pub const FORBIDDEN_DEPS: &[&str] = &["dpdk-sys"];
/// Identifiers it must not name (besides any `std::time` path).
pub const CLOCK_IDENTS: &[&str] = &["Instant", "SystemTime"];

/// Workspace members (directories) allowed to use `unsafe` freely.
pub const UNSAFE_EXEMPT: &[&str] = &["dpdk-bindings"];

/// Where the offset lint runs: (directory, subdirectories and files left
/// out because they are wire-level codecs).
pub const OFFSET_SCOPE: &[(&str, &[&str])] = &[
    ("dataplane/src", &["wire", "ccl", "frag"]),
    ("node/src", &[]),
];
/// EtherType values that must come from `wire` constants, not literals.
pub const ETHERTYPES: &[u32] = &[0x0800, 0x0806, 0x8100, 0x86dd, 0x88a8];
/// The per-line opt-out of the offset lint; a reason must follow it.
pub const OFFSET_OPT_OUT: &str = "layout: allow(offset)";

/// A workspace member.
pub struct Member {
    /// Its directory relative to the tree root (`node`).
    pub dir: String,
    /// Its manifest.
    pub manifest: Manifest,
}

/// Reads the workspace members listed in `<root>/Cargo.toml`.
pub fn members(root: &Path) -> std::io::Result<Vec<Member>> {
    let ws = std::fs::read_to_string(root.join("Cargo.toml"))?;
    let mut out = Vec::new();
    for dir in manifest::workspace_members(&ws) {
        let text = std::fs::read_to_string(root.join(&dir).join("Cargo.toml"))?;
        out.push(Member {
            dir,
            manifest: manifest::parse(&text),
        });
    }
    Ok(out)
}

/// Every `.rs` file under `root/dir`, relative to `root`, sorted.
pub fn rust_files(root: &Path, dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(root.join(&d)) else {
            continue;
        };
        for e in rd.flatten() {
            let rel = d.join(e.file_name());
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(rel),
                Ok(t) if t.is_file() && rel.extension().is_some_and(|x| x == "rs") => out.push(rel),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// Whether `f` is a unit-test file (`tests.rs`, or under a `tests/`
/// folder inside `src/`): rules 3 and 5 skip them as they skip
/// `#[cfg(test)]` items.
pub fn is_test_file(f: &Path) -> bool {
    f.file_name().is_some_and(|n| n == "tests.rs")
        || f.components().any(|c| c.as_os_str() == "tests")
}

fn read(root: &Path, rel: &Path) -> Option<Source> {
    std::fs::read_to_string(root.join(rel))
        .ok()
        .map(Source::new)
}

fn slash(p: &Path) -> String {
    p.to_string_lossy().replace('\\', "/")
}

/// Loads the crates of [`ACYCLIC_CRATES`] that exist in the tree.
pub fn load_crates(root: &Path) -> std::io::Result<Vec<Crate>> {
    let mut out = Vec::new();
    for (name, file) in ACYCLIC_CRATES {
        if root.join(file).is_file() {
            out.push(Crate::load(root, Path::new(file), name)?);
        }
    }
    Ok(out)
}

/// Rule 1: no import cycles between sibling modules.
pub fn check_cycles(crates: &[Crate]) -> Vec<Violation> {
    let mut out = Vec::new();
    for c in crates {
        for (file, line, name) in &c.missing {
            out.push(Violation::new(Rule::Cycle, &c.name, file, *line, format!("`mod {name};`: neither {name}.rs nor {name}/mod.rs found; the module graph is incomplete")));
        }
        for cy in c.cycles() {
            let p = &c.modules[cy.parent];
            let short = |m: usize| {
                c.modules[m]
                    .path
                    .rsplit("::")
                    .next()
                    .unwrap_or("")
                    .to_string()
            };
            let names: Vec<String> = cy.members.iter().map(|&m| short(m)).collect();
            let (file, line) = cy.edges.first().map_or((p.file.clone(), 1), |(_, _, r)| {
                (c.modules[r.from].file.clone(), r.line)
            });
            let mut v = Violation::new(
                Rule::Cycle,
                &p.path,
                &file,
                line,
                format!(
                    "import cycle between the children of `{}`: {{{}}}",
                    p.path,
                    names.join(", ")
                ),
            );
            for (a, b, r) in &cy.edges {
                let f = &c.modules[r.from];
                v.detail.push(format!(
                    "{} -> {}  {}:{}  `{}`",
                    short(*a),
                    short(*b),
                    slash(&f.file),
                    r.line,
                    r.text
                ));
            }
            out.push(v);
        }
    }
    out
}

/// Rule 2: no leaf module of the dataplane uses `crate::pipeline`.
pub fn check_leaves(crates: &[Crate]) -> Vec<Violation> {
    let mut out = Vec::new();
    let Some(c) = crates.iter().find(|c| c.name == "dataplane") else {
        return out;
    };
    let Some(pipeline) = c.find(PIPELINE) else {
        return out;
    };
    for leaf in DATAPLANE_LEAVES {
        let Some(l) = c.find(&format!("dataplane::{leaf}")) else {
            continue;
        };
        let mut seen = BTreeSet::new();
        for r in c.refs.iter().filter(|r| c.within(r.from, l)) {
            if r.trail.iter().any(|&t| c.within(t, pipeline)) && seen.insert((r.from, r.line)) {
                let f = &c.modules[r.from];
                out.push(Violation::new(
                    Rule::LeafPipeline,
                    &slash(&f.file),
                    &f.file,
                    r.line,
                    format!("leaf module `{leaf}` uses `{PIPELINE}` (`{}`)", r.text),
                ));
            }
        }
    }
    out
}

/// Rule 3: the control plane depends on neither DPDK nor a clock.
pub fn check_controlplane(root: &Path, members: &[Member]) -> Vec<Violation> {
    let mut out = Vec::new();
    let Some(cp) = members.iter().find(|m| m.dir == CLOCK_FREE_CRATE) else {
        return out;
    };
    let manifest_file = PathBuf::from(&cp.dir).join("Cargo.toml");
    // Dependencies, and through workspace path dependencies theirs.
    let norm = |base: &str, p: &str| -> String {
        let mut parts: Vec<&str> = base.split('/').filter(|s| !s.is_empty()).collect();
        for s in p.split('/') {
            match s {
                ".." => {
                    parts.pop();
                }
                "." | "" => {}
                s => parts.push(s),
            }
        }
        parts.join("/")
    };
    for d in &cp.manifest.deps {
        let mut visited = BTreeSet::new();
        let mut frontier = vec![(
            d.package.clone(),
            d.path.as_ref().map(|p| norm(&cp.dir, p)),
            vec![d.package.clone()],
        )];
        let mut hit = None;
        while let Some((pkg, dir, ch)) = frontier.pop() {
            if FORBIDDEN_DEPS.contains(&pkg.as_str()) {
                hit = Some(ch);
                break;
            }
            let Some(dir) = dir else { continue };
            if !visited.insert(dir.clone()) {
                continue;
            }
            let Some(m) = members.iter().find(|m| m.dir == dir) else {
                continue;
            };
            if FORBIDDEN_DEPS.contains(&m.manifest.name.as_str()) {
                hit = Some(ch);
                break;
            }
            for sub in m.manifest.deps.iter().filter(|s| s.is_normal()) {
                let mut c2 = ch.clone();
                c2.push(sub.package.clone());
                frontier.push((
                    sub.package.clone(),
                    sub.path.as_ref().map(|p| norm(&m.dir, p)),
                    c2,
                ));
            }
        }
        if let Some(ch) = hit {
            out.push(Violation::new(
                Rule::ControlplaneIo,
                &slash(&manifest_file),
                &manifest_file,
                d.line,
                format!(
                    "`{CLOCK_FREE_CRATE}` depends on {} ([{}] {})",
                    ch.last().map_or("", |s| s.as_str()),
                    d.table,
                    ch.join(" -> ")
                ),
            ));
        }
    }
    for f in rust_files(root, &PathBuf::from(&cp.dir).join("src"))
        .into_iter()
        .filter(|f| !is_test_file(f))
    {
        let Some(src) = read(root, &f) else { continue };
        let code = lex::without_tests(&src.code);
        let toks = lex::tokens(&code);
        let mut lines: BTreeSet<(usize, String)> = BTreeSet::new();
        for (i, t) in toks.iter().enumerate() {
            let what = if t.text == "std"
                && toks.get(i + 1).is_some_and(|n| n.text == "::")
                && toks.get(i + 2).is_some_and(|n| n.text == "time")
            {
                Some("std::time".to_string())
            } else if CLOCK_IDENTS.contains(&t.text.as_str()) {
                Some(t.text.clone())
            } else if t.text == "use" {
                // `use std::{time::Duration}`.
                let mut j = i + 1;
                let mut leaves = Vec::new();
                modgraph::use_tree(&toks, &mut j, Vec::new(), &mut leaves);
                leaves
                    .iter()
                    .find(|l| l.segs.len() >= 2 && l.segs[0] == "std" && l.segs[1] == "time")
                    .map(|_| "std::time".to_string())
            } else {
                None
            };
            if let Some(w) = what {
                lines.insert((src.line(t.off), w));
            }
        }
        let mut last = 0;
        for (line, w) in lines {
            if line == last {
                continue;
            }
            last = line;
            out.push(Violation::new(
                Rule::ControlplaneIo,
                &slash(&f),
                &f,
                line,
                format!("`{CLOCK_FREE_CRATE}` names `{w}`: it must stay clock-free (time comes in as a Timestamp argument)"),
            ));
        }
    }
    out
}

/// Whether the leading inner attributes of a crate root deny (or forbid)
/// `unsafe_code`.
fn denies_unsafe(src: &Source) -> bool {
    let toks = lex::tokens(&src.code);
    let mut i = 0;
    while toks.get(i).is_some_and(|t| t.text == "#")
        && toks.get(i + 1).is_some_and(|t| t.text == "!")
        && toks.get(i + 2).is_some_and(|t| t.text == "[")
    {
        let close = lex::matching(&toks, i + 2);
        let body = &toks[(i + 3).min(toks.len())..close.min(toks.len())];
        if body
            .first()
            .is_some_and(|t| t.text == "deny" || t.text == "forbid")
            && body.iter().any(|t| t.text == "unsafe_code")
        {
            return true;
        }
        i = close + 1;
    }
    false
}

/// Rule 4: `#![deny(unsafe_code)]` at the top of every crate root, and no
/// `unsafe` outside an `#[allow(unsafe_code)]` item with a `// SAFETY:`
/// comment.
pub fn check_unsafe(root: &Path, members: &[Member]) -> Vec<Violation> {
    let mut out = Vec::new();
    for m in members
        .iter()
        .filter(|m| !UNSAFE_EXEMPT.contains(&m.dir.as_str()))
    {
        let dir = PathBuf::from(&m.dir);
        let mut roots: BTreeSet<PathBuf> = BTreeSet::new();
        for r in ["src/lib.rs", "src/main.rs"] {
            roots.insert(dir.join(r));
        }
        for f in rust_files(root, &dir.join("src/bin")) {
            if f.parent() == Some(&dir.join("src/bin")) {
                roots.insert(f);
            }
        }
        for p in &m.manifest.target_paths {
            roots.insert(dir.join(p));
        }
        for r in roots {
            let Some(src) = read(root, &r) else { continue };
            if !denies_unsafe(&src) {
                out.push(Violation::new(Rule::Unsafe, &slash(&r), &r, 1, "crate root lacks `#![deny(unsafe_code)]` (or `forbid`) among its leading inner attributes".into()));
            }
        }
        for f in rust_files(root, &dir.join("src")) {
            let Some(src) = read(root, &f) else { continue };
            let toks = lex::tokens(&src.code);
            // Spans of items carrying #[allow(unsafe_code)].
            let mut allowed = Vec::new();
            for (i, t) in toks.iter().enumerate() {
                if t.text != "#" {
                    continue;
                }
                let inner = toks.get(i + 1).is_some_and(|n| n.text == "!");
                let open = if inner { i + 2 } else { i + 1 };
                if toks.get(open).map(|n| n.text.as_str()) != Some("[") {
                    continue;
                }
                let close = lex::matching(&toks, open);
                let body = &toks[(open + 1).min(toks.len())..close.min(toks.len())];
                if body.first().is_some_and(|b| b.text == "allow")
                    && body.iter().any(|b| b.text == "unsafe_code")
                {
                    if inner {
                        out.push(Violation::new(Rule::Unsafe, &slash(&f), &f, src.line(t.off), "`#![allow(unsafe_code)]` opts a whole module out; put `#[allow(unsafe_code)]` on the one item instead".into()));
                    } else {
                        let end = lex::item_end(&toks, close + 1);
                        let end_off = toks.get(end).map_or(src.code.len(), |e| e.off + 1);
                        allowed.push((t.off, end_off));
                    }
                }
            }
            for t in toks.iter().filter(|t| t.text == "unsafe") {
                let line = src.line(t.off);
                let in_allowed = allowed.iter().any(|&(a, b)| a <= t.off && t.off < b);
                let mut safety = src.comment(line).contains("SAFETY:");
                let mut l = line;
                while !safety && l > 1 {
                    l -= 1;
                    let code = src.code_line(l).trim().to_string();
                    if src.comment_only(l) {
                        safety = src.comment(l).contains("SAFETY:");
                    } else if !code.starts_with("#[") {
                        break;
                    }
                }
                if !in_allowed || !safety {
                    let why = match (in_allowed, safety) {
                        (false, false) => "outside an `#[allow(unsafe_code)]` item and without a `// SAFETY:` comment",
                        (false, true) => "outside an `#[allow(unsafe_code)]` item",
                        _ => "without a `// SAFETY:` comment on the lines just above",
                    };
                    out.push(Violation::new(
                        Rule::Unsafe,
                        &slash(&f),
                        &f,
                        line,
                        format!("`unsafe` {why}"),
                    ));
                }
            }
        }
    }
    out
}

/// A hit of the offset lint on one line: what matched.
fn offset_hits(line: &str) -> Vec<String> {
    let mut hits = Vec::new();
    let toks = lex::tokens(line.as_bytes());
    for t in &toks {
        if t.text == "from_be_bytes" || t.text == "to_be_bytes" {
            hits.push(format!("`{}`", t.text));
        }
        if t.text.starts_with("0x") || t.text.starts_with("0X") {
            let digits: String = t.text[2..]
                .chars()
                .filter(|c| *c != '_')
                .take_while(|c| c.is_ascii_hexdigit())
                .collect();
            if let Ok(v) = u32::from_str_radix(&digits, 16) {
                if digits.len() == 4 && ETHERTYPES.contains(&v) {
                    hits.push(format!("EtherType literal `{}`", t.text));
                }
            }
        }
    }
    // Literal ranges: `x[12..14]`, `x[..6]`, `.get(0..12)`, `.get_mut(14..)`.
    let b = line.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        let opener = match c {
            b'[' => {
                let prev = line[..i].trim_end().bytes().last();
                prev.is_some_and(|p| {
                    p.is_ascii_alphanumeric() || p == b'_' || p == b')' || p == b']'
                })
            }
            b'(' => {
                let head = line[..i].trim_end();
                [".get", ".get_mut", ".get_unchecked", ".get_unchecked_mut"]
                    .iter()
                    .any(|m| head.ends_with(m))
            }
            _ => false,
        };
        if !opener {
            continue;
        }
        let close = if c == b'[' { ']' } else { ')' };
        let Some(end) = line[i + 1..].find(close) else {
            continue;
        };
        let inner: String = line[i + 1..i + 1 + end]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let Some((lo, hi)) = inner.split_once("..") else {
            continue;
        };
        let hi = hi.strip_prefix('=').unwrap_or(hi);
        let lit = |s: &str| {
            !s.is_empty()
                && s.bytes().next().is_some_and(|d| d.is_ascii_digit())
                && s.bytes().all(|d| d.is_ascii_alphanumeric() || d == b'_')
        };
        let ok = |s: &str| s.is_empty() || lit(s);
        if (lit(lo) || lit(hi)) && ok(lo) && ok(hi) {
            hits.push(format!("literal range `{}{}{}`", c as char, inner, close));
        }
    }
    hits
}

/// Rule 5: above `wire/`, no header field by byte offset. Returns the
/// violations and the number of opt-out comments honoured.
pub fn check_offsets(root: &Path) -> (Vec<Violation>, usize) {
    let mut out = Vec::new();
    let mut used = 0;
    for (dir, skip) in OFFSET_SCOPE {
        let base = PathBuf::from(dir);
        for f in rust_files(root, &base) {
            let rel = f.strip_prefix(&base).unwrap_or(&f);
            let first = rel.components().next().map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_string()
            });
            if first.is_some_and(|s| skip.contains(&s.as_str())) {
                continue;
            }
            if is_test_file(&f) {
                continue;
            }
            let Some(src) = read(root, &f) else { continue };
            let code = lex::without_tests(&src.code);
            // (line, has a reason, used).
            let mut opt_outs: Vec<(usize, bool, bool)> = Vec::new();
            for line in 1..=src.lines() {
                if let Some(p) = src.comment(line).find(OFFSET_OPT_OUT) {
                    let reason = !src.comment(line)[p + OFFSET_OPT_OUT.len()..]
                        .trim()
                        .is_empty();
                    if !reason {
                        out.push(Violation::new(
                            Rule::Offset,
                            &slash(&f),
                            &f,
                            line,
                            format!("`// {OFFSET_OPT_OUT}` without a reason"),
                        ));
                    }
                    opt_outs.push((line, reason, false));
                }
            }
            for line in 1..=src.lines() {
                let hits = offset_hits(src.line_in(&code, line));
                if hits.is_empty() {
                    continue;
                }
                // The opt-out on this line, or on a comment-only line just above.
                let opt = opt_outs
                    .iter_mut()
                    .find(|(l, _, _)| *l == line || (*l + 1 == line && src.comment_only(*l)));
                if let Some(o) = opt {
                    o.2 = true;
                    continue;
                }
                out.push(Violation::new(
                    Rule::Offset,
                    &slash(&f),
                    &f,
                    line,
                    format!(
                        "header bytes by offset above `wire/`: {} (use a wire view or constant)",
                        hits.join(", ")
                    ),
                ));
            }
            for (line, reason, was_used) in opt_outs {
                if was_used {
                    used += usize::from(reason);
                } else {
                    out.push(Violation::new(
                        Rule::Offset,
                        &slash(&f),
                        &f,
                        line,
                        format!("`// {OFFSET_OPT_OUT}` that suppresses nothing (delete it)"),
                    ));
                }
            }
        }
    }
    (out, used)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_patterns() {
        assert_eq!(offset_hits("if d.get(12..14)? != x {").len(), 1);
        assert_eq!(offset_hits("let h = &mut d[0..12];").len(), 1);
        assert_eq!(offset_hits("h[..6].copy_from_slice(&m);").len(), 1);
        assert_eq!(offset_hits("let t = d.get_mut(14..=15);").len(), 1);
        assert_eq!(
            offset_hits("let e = u16::from_be_bytes([b[0], b[1]]);").len(),
            1
        );
        assert_eq!(offset_hits("if e == 0x0800 || e == 0x86DD {").len(), 2);
        assert!(offset_hits(
            "let s = &d[a..b]; let t = &d[..]; let u = [0u8; 6]; let v = &d[off..off + 2];"
        )
        .is_empty());
        assert!(offset_hits("let m = 0x0fff; let n = 0x0800_0000;").is_empty());
        assert!(offset_hits("for i in 0..12 { x.get(i) }").is_empty());
    }
}
