//! `layout-check`: the boundary rules of issue 9, checked over the source
//! tree by a careful scanner (no compiler, no dependencies).
//!
//! The rules (ids as printed and as written in the allow-list):
//!
//! 1. `cycle`: no import cycles between the modules of `dataplane` and of
//!    `config` (graph defined in [`modgraph`]).
//! 2. `leaf-pipeline`: no leaf module of the dataplane uses
//!    `crate::pipeline` ([`rules::DATAPLANE_LEAVES`]).
//! 3. `controlplane-io`: `controlplane` depends on neither `dpdk-sys` nor
//!    `std::time` (`Instant`, `SystemTime`).
//! 4. `unsafe`: `#![deny(unsafe_code)]` at the top of every crate root but
//!    `dpdk-bindings`'; `unsafe` only inside an `#[allow(unsafe_code)]` item
//!    with a `// SAFETY:` comment.
//! 5. `offset`: above `wire/`, no header field read or written by byte
//!    offset (a heuristic; `// layout: allow(offset) <reason>` opts a line
//!    out).
//!
//! Invariants: the checker never panics on any input text (unterminated
//! literals and unbalanced brackets just end a scan); it reports every
//! violation it finds, in a stable order (rule, file, line); and a run is
//! clean only if every violation is allowed by the allow-list
//! ([`Pending`]) and every allow-list entry still matches a violation, so
//! the list cannot go stale.
#![deny(unsafe_code)]

pub mod lex;
pub mod manifest;
pub mod modgraph;
pub mod rules;

use std::fmt;
use std::path::{Path, PathBuf};

/// A rule of issue 9.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// 1: no import cycles.
    Cycle,
    /// 2: leaves do not use `crate::pipeline`.
    LeafPipeline,
    /// 3: `controlplane` without DPDK and clocks.
    ControlplaneIo,
    /// 4: `deny(unsafe_code)` and documented `unsafe` only.
    Unsafe,
    /// 5: no header bytes by offset above `wire/`.
    Offset,
}

impl Rule {
    /// Every rule, in order.
    pub const ALL: [Rule; 5] = [
        Rule::Cycle,
        Rule::LeafPipeline,
        Rule::ControlplaneIo,
        Rule::Unsafe,
        Rule::Offset,
    ];

    /// The id printed and used in the allow-list.
    pub fn id(self) -> &'static str {
        match self {
            Rule::Cycle => "cycle",
            Rule::LeafPipeline => "leaf-pipeline",
            Rule::ControlplaneIo => "controlplane-io",
            Rule::Unsafe => "unsafe",
            Rule::Offset => "offset",
        }
    }

    /// The rule by id.
    pub fn from_id(s: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.id() == s)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// One violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule broken.
    pub rule: Rule,
    /// What an allow-list entry names to allow it: a module path
    /// (`dataplane`, `dataplane::clusterpath`) for cycles, a file path
    /// relative to the root for the other rules.
    pub subject: String,
    /// File (relative to the root) and 1-based line where it shows.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// One line saying what is wrong.
    pub message: String,
    /// Further lines (a cycle's edges).
    pub detail: Vec<String>,
}

impl Violation {
    /// A violation without detail lines.
    pub fn new(rule: Rule, subject: &str, file: &Path, line: usize, message: String) -> Violation {
        Violation {
            rule,
            subject: subject.to_string(),
            file: file.to_path_buf(),
            line,
            message,
            detail: Vec::new(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: [{}] {}",
            self.file.display(),
            self.line,
            self.rule,
            self.message
        )?;
        for d in &self.detail {
            write!(f, "\n    {d}")?;
        }
        Ok(())
    }
}

/// One line of the allow-list: `<rule> <subject> <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEntry {
    /// 1-based line in the allow-list file.
    pub line: usize,
    /// The rule allowed.
    pub rule: Rule,
    /// A module path or a file or directory path (see [`PendingEntry::matches`]).
    pub subject: String,
    /// Why (required).
    pub reason: String,
}

impl PendingEntry {
    /// Whether the entry allows `v`: same rule, and the same subject, or
    /// for a file path a directory holding it (`node/src` and `node/src/`
    /// allow `node/src/ccl.rs`). A module path (a cycle's parent) matches
    /// only itself: `dataplane` does not allow a cycle in `dataplane::ccl`.
    pub fn matches(&self, v: &Violation) -> bool {
        let s = self.subject.trim_end_matches('/');
        v.rule == self.rule
            && (v.subject == s
                || (v.subject.contains('/') && v.subject.starts_with(&format!("{s}/"))))
    }
}

/// The allow-list: violations that are known and being fixed.
#[derive(Debug, Clone, Default)]
pub struct Pending {
    /// The file it was read from (for messages).
    pub file: PathBuf,
    /// Its entries.
    pub entries: Vec<PendingEntry>,
}

impl Pending {
    /// Parses allow-list text: one `<rule> <subject> <reason>` per line;
    /// blank lines and lines starting with `#` are ignored. Errors name the
    /// line.
    pub fn parse(file: &Path, text: &str) -> Result<Pending, String> {
        let mut entries = Vec::new();
        for (n, l) in text.lines().enumerate() {
            let l = l.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let (rule, rest) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
            let rest = rest.trim_start();
            let (subject, reason) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            let reason = reason.trim();
            let at = format!("{}:{}", file.display(), n + 1);
            let rule = Rule::from_id(rule).ok_or_else(|| {
                let ids: Vec<&str> = Rule::ALL.iter().map(|r| r.id()).collect();
                format!(
                    "{at}: unknown rule `{rule}` (expected one of {})",
                    ids.join(", ")
                )
            })?;
            if subject.is_empty() || reason.is_empty() {
                return Err(format!("{at}: expected `<rule> <subject> <reason>`"));
            }
            entries.push(PendingEntry {
                line: n + 1,
                rule,
                subject: subject.into(),
                reason: reason.into(),
            });
        }
        Ok(Pending {
            file: file.to_path_buf(),
            entries,
        })
    }
}

/// The outcome of a run.
#[derive(Debug, Default)]
pub struct Report {
    /// Violations no allow-list entry covers: these fail the run.
    pub violations: Vec<Violation>,
    /// Violations allowed, with the index of the entry allowing them.
    pub allowed: Vec<(Violation, usize)>,
    /// Allow-list entries that match no violation: these fail the run too.
    pub stale: Vec<PendingEntry>,
    /// Offset opt-out comments honoured.
    pub opt_outs: usize,
    /// Crates and modules whose graph was checked: (crate, modules).
    pub graphs: Vec<(String, usize)>,
}

impl Report {
    /// Whether the run passes.
    pub fn ok(&self) -> bool {
        self.violations.is_empty() && self.stale.is_empty()
    }
}

/// What [`check`] finds.
#[derive(Debug, Default)]
pub struct Findings {
    /// Every violation, sorted by rule, file and line.
    pub violations: Vec<Violation>,
    /// Offset opt-out comments honoured.
    pub opt_outs: usize,
    /// Crates whose module graph was checked: (crate, modules).
    pub graphs: Vec<(String, usize)>,
}

/// Every violation of every rule in the tree at `root`.
pub fn check(root: &Path) -> std::io::Result<Findings> {
    let members = rules::members(root)?;
    let crates = rules::load_crates(root)?;
    let mut all = rules::check_cycles(&crates);
    all.extend(rules::check_leaves(&crates));
    all.extend(rules::check_controlplane(root, &members));
    all.extend(rules::check_unsafe(root, &members));
    let (offsets, opt_outs) = rules::check_offsets(root);
    all.extend(offsets);
    all.sort_by(|a, b| (a.rule, &a.file, a.line).cmp(&(b.rule, &b.file, b.line)));
    let graphs = crates
        .iter()
        .map(|c| (c.name.clone(), c.modules.len()))
        .collect();
    Ok(Findings {
        violations: all,
        opt_outs,
        graphs,
    })
}

/// Checks the tree at `root` against the allow-list `pending`.
pub fn run(root: &Path, pending: &Pending) -> std::io::Result<Report> {
    let found = check(root)?;
    let mut report = Report {
        opt_outs: found.opt_outs,
        graphs: found.graphs,
        ..Report::default()
    };
    let mut used = vec![false; pending.entries.len()];
    for v in found.violations {
        match pending.entries.iter().position(|e| e.matches(&v)) {
            Some(i) => {
                used[i] = true;
                report.allowed.push((v, i));
            }
            None => report.violations.push(v),
        }
    }
    report.stale = pending
        .entries
        .iter()
        .zip(used)
        .filter(|(_, u)| !u)
        .map(|(e, _)| e.clone())
        .collect();
    Ok(report)
}
