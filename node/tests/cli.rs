//! The `clusterfw` command line: a configuration error names the file, line
//! and field, and the process exits 2 before it touches DPDK (no EAL runtime
//! directory appears).

use std::process::Command;

fn write(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cfw-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const GOOD: &str = "node:\n  name: cli-test\ndpdk:\n  eal-args: [\"--no-huge\", \"--file-prefix\", \"cfw-cli-test-PREFIX\"]\ninterfaces:\n  - name: inside\n    device: net_null0\n    address: 198.18.1.1/24\n    security-level: 100\n";

#[test]
fn config_error_names_file_line_field_and_exits_before_dpdk() {
    let prefix = format!("cfw-cli-test-{}", std::process::id());
    let bad = GOOD.replace("PREFIX", &std::process::id().to_string()).replace("198.18.1.1/24", "198.18.1.1/33");
    let path = write("bad.yaml", &bad);
    let out = Command::new(env!("CARGO_BIN_EXE_clusterfw")).arg("--config").arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "exit status; stderr: {stderr}");
    assert!(stderr.contains("bad.yaml:8:14:"), "file and line in: {stderr}");
    assert!(stderr.contains("interfaces[0].address"), "field in: {stderr}");
    assert!(!std::path::Path::new("/var/run/dpdk").join(&prefix).exists(), "EAL must not have started");
}

#[test]
fn check_mode_validates_without_dpdk() {
    let good = GOOD.replace("PREFIX", &std::process::id().to_string());
    let path = write("good.yaml", &good);
    let out = Command::new(env!("CARGO_BIN_EXE_clusterfw")).arg("--config").arg(&path).arg("--check").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("configuration OK"));
}

#[test]
fn missing_file_and_bad_arguments_exit_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_clusterfw")).args(["--config", "/nonexistent/cfw.yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/cfw.yaml"));
    let out = Command::new(env!("CARGO_BIN_EXE_clusterfw")).arg("--bogus").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn ctl_reports_a_missing_socket_clearly() {
    let out = Command::new(env!("CARGO_BIN_EXE_clusterfw-ctl"))
        .args(["--socket", "/nonexistent/cfw.sock", "show", "stats"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/cfw.sock"));
    let out = Command::new(env!("CARGO_BIN_EXE_clusterfw-ctl")).args(["show", "nonsense"]).output().unwrap();
    assert!(!out.status.success());
}

/// NAT runs on a single node, with one worker or several (steered by the
/// plan), and on a cluster member, dynamic NAT (the control node's table,
/// SPEC N4) included, with one worker or several (steered through the
/// table).
#[test]
fn nat_rules_run_on_a_single_node_and_in_a_cluster_with_any_worker_count() {
    let pool = "nat:\n  pools:\n    - name: p\n      addresses: [198.51.100.1]\n";
    let rule = "  rules:\n    - name: r\n      kind: dynamic-pat\n      source: 198.18.1.0/24\n      pool: p\n";
    let base = GOOD.replace("PREFIX", &std::process::id().to_string());
    let two = base.replace("dpdk:\n", "dpdk:\n  workers: 2\n");
    assert_ne!(two, base);
    for (name, text) in [("nat.yaml", &base), ("nat2.yaml", &two)] {
        let path = write(name, &format!("{text}{pool}{rule}"));
        let out = Command::new(env!("CARGO_BIN_EXE_clusterfw")).arg("--config").arg(&path).arg("--check").output().unwrap();
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let cluster = "cluster:\n  name: c\n  key: \"a secret of some length here\"\n  node-id: 0\n  priority: 1\n  \
                   ccl: {device: net_null1, address: 10.9.0.1/24}\n  members: [{id: 0, name: cli-test, ccl-address: 10.9.0.1}]\n";
    let path = write("nat3.yaml", &format!("{base}{cluster}{pool}{rule}"));
    let out = Command::new(env!("CARGO_BIN_EXE_clusterfw")).arg("--config").arg(&path).arg("--check").output().unwrap();
    assert!(out.status.success(), "PAT in a cluster: {}", String::from_utf8_lossy(&out.stderr));
    // Dynamic NAT in a cluster (the control node's table, N4): one worker
    // and two.
    let dynamic = rule.replace("dynamic-pat", "dynamic-nat");
    let one = format!("{base}{cluster}{pool}{dynamic}");
    let two = one.replacen("dpdk:\n", "dpdk:\n  workers: 2\n", 1);
    assert_ne!(one, two);
    for (name, text) in [("nat4.yaml", &one), ("nat5.yaml", &two)] {
        let path = write(name, text);
        let out = Command::new(env!("CARGO_BIN_EXE_clusterfw")).arg("--config").arg(&path).arg("--check").output().unwrap();
        assert!(out.status.success(), "dynamic NAT in a cluster, {name}: {}", String::from_utf8_lossy(&out.stderr));
    }
}
