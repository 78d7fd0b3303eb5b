//! Thin wrappers over the tools the bed drives (`ip`, `ethtool`, `sysctl`,
//! `kill`) and over `/proc`. Every failure names the command line and carries
//! its stderr.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `program args…`, returns its stdout; fails on a non-zero exit.
pub fn run<S: AsRef<str>>(program: &str, args: &[S]) -> Result<String> {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let line = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run `{line}`"))?;
    if !out.status.success() {
        // Some tools (ping) say why on stdout.
        let why = match String::from_utf8_lossy(&out.stderr).trim() {
            "" => String::from_utf8_lossy(&out.stdout).trim().to_string(),
            e => e.to_string(),
        };
        bail!("`{line}` failed ({}): {why}", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip netns exec <ns> program args…`.
pub fn ns_run<S: AsRef<str>>(ns: &str, program: &str, args: &[S]) -> Result<String> {
    let mut full = vec!["netns", "exec", ns, program];
    full.extend(args.iter().map(AsRef::as_ref));
    run("ip", &full)
}

/// A `Command` for `ip netns exec <ns> program`.
pub fn ns_command(ns: &str, program: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program]);
    c
}

/// `ip -n <ns> args…`.
pub fn ip(ns: &str, args: &[&str]) -> Result<String> {
    let mut full = vec!["-n", ns];
    full.extend_from_slice(args);
    run("ip", &full)
}

pub fn sysctl(ns: &str, key: &str, value: &str) -> Result<()> {
    ns_run(ns, "sysctl", &["-q", "-w", &format!("{key}={value}")]).map(drop)
}

/// Names of the namespaces that exist now (`ip netns list`).
pub fn namespaces() -> Result<Vec<String>> {
    let out = run::<&str>("ip", &["netns", "list"])?;
    // Lines look like `cfw-n1 (id: 3)` or just `cfw-n1`.
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// Pids of the processes in namespace `ns` (`ip netns pids`); empty if the
/// namespace is gone.
pub fn ns_pids(ns: &str) -> Vec<u32> {
    run("ip", &["netns", "pids", ns])
        .map(|out| {
            out.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `pid` is a running process (exists and is not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may
        // itself contain spaces and parentheses.
        Ok(stat) => match stat.rfind(')') {
            Some(i) => !matches!(stat[i + 1..].trim_start().chars().next(), Some('Z' | 'X')),
            None => false,
        },
        Err(_) => false,
    }
}

pub fn signal(pid: u32, sig: &str) {
    // The process may have exited in between; that is the goal anyway.
    let _ = run("kill", &[format!("-{sig}"), pid.to_string()]);
}

/// Wait up to `timeout` for `pid` to be gone.
pub fn wait_exit(pid: u32, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while alive(pid) {
        if Instant::now() > deadline {
            anyhow::bail!("process {pid} still alive after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// SIGTERM to every pid, wait up to `grace` for them to exit, then SIGKILL
/// the rest. Returns the pids that needed SIGKILL. A stopped process (a
/// paused node) is continued after the SIGTERM, so it can act on it.
pub fn terminate(pids: &[u32], grace: Duration) -> Vec<u32> {
    let pids: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    for &p in &pids {
        signal(p, "TERM");
        signal(p, "CONT");
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && pids.iter().any(|&p| alive(p)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let stubborn: Vec<u32> = pids.into_iter().filter(|&p| alive(p)).collect();
    for &p in &stubborn {
        signal(p, "KILL");
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && stubborn.iter().any(|&p| alive(p)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    stubborn
}

/// Whether the effective user is root (read from `/proc/self/status`).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Whether `program` can be found on `PATH` (or is a path that exists).
pub fn have(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).exists();
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}

/// The last `n` lines of a text file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("({}: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_bogus_pid_is_not() {
        assert!(alive(std::process::id()));
        assert!(!alive(u32::MAX));
    }

    #[test]
    fn run_reports_failures_with_the_command_line() {
        let err = run("sh", &["-c", "echo oops >&2; exit 3"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("sh -c") && err.contains("oops"), "{err}");
        assert_eq!(run("sh", &["-c", "echo hi"]).unwrap(), "hi\n");
    }
}
