//! `layout-check [--root DIR] [--pending FILE | --no-pending] [--verbose]`
//! `layout-check [--root DIR] --edges` (the module graphs, for debugging)
//!
//! Checks the issue 9 boundary rules over the tree at `--root` (default:
//! the current directory) and prints each violation as `file:line: [rule]
//! message`. Violations listed in the allow-list (default
//! `tools/layout-check/pending.txt` under the root) are summarized per entry
//! (`--verbose` lists them); an entry that no longer matches anything is an
//! error. Exit status: 0 clean, 1 violations or stale entries, 2 usage or
//! I/O error.
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use layout_check::{run, Pending};

const USAGE: &str = "usage: layout-check [--root DIR] [--pending FILE | --no-pending] [--verbose] | --edges [--root DIR]";

fn main() -> ExitCode {
    let mut root = PathBuf::from(".");
    let mut pending_file: Option<PathBuf> = None;
    let mut no_pending = false;
    let mut verbose = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--root" => match args.next() {
                Some(v) => root = v.into(),
                None => return usage(),
            },
            "--pending" => match args.next() {
                Some(v) => pending_file = Some(v.into()),
                None => return usage(),
            },
            "--no-pending" => no_pending = true,
            "--verbose" | "-v" => verbose = true,
            "--edges" => {
                // The module graphs, one resolved reference per line.
                return match layout_check::rules::load_crates(&root) {
                    Ok(crates) => {
                        for c in &crates {
                            for r in &c.refs {
                                let to: Vec<&str> = r
                                    .trail
                                    .iter()
                                    .map(|&t| c.modules[t].path.as_str())
                                    .collect();
                                println!(
                                    "{} -> {}  {}:{}  `{}`",
                                    c.modules[r.from].path,
                                    to.join(" > "),
                                    c.modules[r.from].file.display(),
                                    r.line,
                                    r.text
                                );
                            }
                        }
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("layout-check: {e}");
                        ExitCode::from(2)
                    }
                };
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ => return usage(),
        }
    }
    let pending = if no_pending {
        Pending::default()
    } else {
        let f = pending_file.unwrap_or_else(|| root.join("tools/layout-check/pending.txt"));
        match std::fs::read_to_string(&f) {
            Ok(t) => match Pending::parse(&f, &t) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("layout-check: {e}");
                    return ExitCode::from(2);
                }
            },
            Err(e) => {
                eprintln!("layout-check: {}: {e}", f.display());
                return ExitCode::from(2);
            }
        }
    };
    let report = match run(&root, &pending) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("layout-check: reading {}: {e}", root.display());
            return ExitCode::from(2);
        }
    };
    for v in &report.violations {
        println!("{v}");
    }
    for e in &report.stale {
        println!(
            "{}:{}: [{}] stale allow-list entry `{} {}`: no such violation any more; delete the line",
            pending.file.display(),
            e.line,
            e.rule,
            e.rule,
            e.subject
        );
    }
    for (i, e) in pending.entries.iter().enumerate() {
        let hits: Vec<_> = report.allowed.iter().filter(|(_, j)| *j == i).collect();
        if hits.is_empty() {
            continue;
        }
        println!(
            "allowed by {}:{}: {} {}: {} violation(s) ({})",
            pending.file.display(),
            e.line,
            e.rule,
            e.subject,
            hits.len(),
            e.reason
        );
        if verbose {
            for (v, _) in hits {
                for l in v.to_string().lines() {
                    println!("    {l}");
                }
            }
        }
    }
    let graphs: Vec<String> = report
        .graphs
        .iter()
        .map(|(c, n)| format!("{c} ({n} modules)"))
        .collect();
    println!(
        "layout-check: module graphs of {}; {} offset opt-out(s) (`// layout: allow(offset)`); {} violation(s), {} allowed, {} stale allow-list entr(ies)",
        graphs.join(", "),
        report.opt_outs,
        report.violations.len(),
        report.allowed.len(),
        report.stale.len()
    );
    if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn usage() -> ExitCode {
    eprintln!("{USAGE}");
    ExitCode::from(2)
}
