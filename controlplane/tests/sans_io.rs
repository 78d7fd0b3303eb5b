//! Membership stays sans-IO (issue 9's boundary rule, SPEC P3): no clock,
//! no sleeping, no threads or sockets in `src/membership/`, and neither
//! `controlplane` nor what it builds on (`dataplane`) depends on DPDK.

use std::path::Path;

/// What a sans-IO module must not name, outside comments.
const FORBIDDEN: &[&str] = &[
    "std::time",
    "Instant",
    "SystemTime",
    "thread::sleep",
    "std::thread",
    "std::net::UdpSocket",
    "std::net::TcpStream",
    "std::os::unix::net",
    "dpdk_sys",
];

fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().filter(|(_, l)| !l.trim_start().starts_with("//")).map(|(i, l)| (i + 1, l))
}

#[test]
fn membership_reads_no_clock_and_does_no_io() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/membership");
    let mut files = 0;
    let mut found = Vec::new();
    for e in std::fs::read_dir(&dir).expect("src/membership exists") {
        let path = e.unwrap().path();
        if !matches!(path.extension(), Some(x) if x == "rs") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in code_lines(&text) {
            for f in FORBIDDEN.iter().filter(|f| line.contains(**f)) {
                found.push(format!("{}:{n}: {f}", path.display()));
            }
        }
    }
    // The other sans-IO machines the node and the simulator drive.
    for other in ["src/limits.rs", "src/natshare.rs"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(other);
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in code_lines(&text) {
            for f in FORBIDDEN.iter().filter(|f| line.contains(**f)) {
                found.push(format!("{}:{n}: {f}", path.display()));
            }
        }
    }
    assert!(files >= 3, "membership's files were not found in {}", dir.display());
    assert!(found.is_empty(), "membership must stay sans-IO:\n{}", found.join("\n"));
}

#[test]
fn no_dpdk_below_the_control_plane() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for manifest in [root.join("Cargo.toml"), root.join("../dataplane/Cargo.toml")] {
        let text = std::fs::read_to_string(&manifest).unwrap();
        let deps: Vec<&str> = code_lines(&text).map(|(_, l)| l).filter(|l| l.contains("dpdk")).collect();
        assert!(deps.is_empty(), "{} names DPDK: {deps:?}", manifest.display());
    }
}
