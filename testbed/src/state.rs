//! `RUN/state.json`: what `up` made, so that `down` and `status` work from a
//! record rather than from assumptions. `up` writes the full plan before it
//! creates anything and rewrites it as node processes start, so a crash
//! half-way through still leaves a record `down` can act on.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const STATE_FILE: &str = "state.json";
pub const STATE_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Each node is a `clusterfw` process.
    Clusterfw,
    /// Test-bed self-check: each node namespace is a plain Linux router.
    KernelRouter,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VethRecord {
    pub namespace: String,
    pub ifname: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub name: String,
    pub namespace: String,
    /// `None` before the process started, and in kernel-router mode.
    pub pid: Option<u32>,
    pub config: Option<PathBuf>,
    pub log: Option<PathBuf>,
    pub pid_file: Option<PathBuf>,
    pub control_socket: Option<PathBuf>,
    pub dpdk_prefix: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRecord {
    pub name: String,
    pub namespace: String,
    pub address: String,
    /// Host or router (absent in state files of older beds: host).
    #[serde(default)]
    pub kind: crate::topology::HostKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub version: u32,
    pub run_dir: PathBuf,
    pub mode: Mode,
    pub namespaces: Vec<String>,
    pub veths: Vec<VethRecord>,
    pub nodes: Vec<NodeRecord>,
    pub hosts: Vec<HostRecord>,
}

impl State {
    pub fn path(run_dir: &Path) -> PathBuf {
        run_dir.join(STATE_FILE)
    }

    /// Reads the state of `run_dir`; `Ok(None)` if there is none.
    pub fn load(run_dir: &Path) -> Result<Option<State>> {
        let path = State::path(run_dir);
        match std::fs::read_to_string(&path) {
            Ok(text) => State::parse(&text)
                .with_context(|| format!("{}: not a test-bed state file", path.display()))
                .map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    pub fn parse(text: &str) -> Result<State> {
        let state: State = serde_json::from_str(text)?;
        anyhow::ensure!(
            state.version == STATE_VERSION,
            "state version {} (this test bed writes {STATE_VERSION})",
            state.version
        );
        Ok(state)
    }

    /// Writes atomically (temp file + rename) so a reader never sees half.
    pub fn save(&self) -> Result<()> {
        let path = State::path(&self.run_dir);
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_string_pretty(self)? + "\n";
        std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> State {
        State {
            version: STATE_VERSION,
            run_dir: "/tmp/cfw-testbed".into(),
            mode: Mode::Clusterfw,
            namespaces: vec!["cfw-inside".into(), "cfw-n1".into()],
            veths: vec![VethRecord {
                namespace: "cfw-inside".into(),
                ifname: "eth0".into(),
            }],
            nodes: vec![NodeRecord {
                name: "n1".into(),
                namespace: "cfw-n1".into(),
                pid: Some(4242),
                config: Some("/tmp/cfw-testbed/n1.yaml".into()),
                log: Some("/tmp/cfw-testbed/n1.log".into()),
                pid_file: Some("/tmp/cfw-testbed/n1.pid".into()),
                control_socket: Some("/tmp/cfw-testbed/n1.sock".into()),
                dpdk_prefix: Some("cfw-tb-n1".into()),
            }],
            hosts: vec![HostRecord {
                name: "inside".into(),
                namespace: "cfw-inside".into(),
                address: "198.18.1.2".into(),
                kind: crate::topology::HostKind::Host,
            }],
        }
    }

    #[test]
    fn round_trips_through_json() {
        let s = sample();
        let text = serde_json::to_string_pretty(&s).unwrap();
        assert!(text.contains("\"mode\": \"clusterfw\""), "{text}");
        assert_eq!(State::parse(&text).unwrap(), s);
        let mut k = s.clone();
        k.mode = Mode::KernelRouter;
        k.nodes[0].pid = None;
        let text = serde_json::to_string(&k).unwrap();
        assert!(
            text.contains("\"kernel-router\"") && text.contains("\"pid\":null"),
            "{text}"
        );
        assert_eq!(State::parse(&text).unwrap(), k);
    }

    #[test]
    fn rejects_other_versions_and_garbage() {
        let mut s = sample();
        s.version = 99;
        let err = State::parse(&serde_json::to_string(&s).unwrap()).unwrap_err();
        assert!(err.to_string().contains("99"), "{err}");
        assert!(State::parse("{\"version\": 1}").is_err());
        assert!(State::parse("").is_err());
    }

    #[test]
    fn save_and_load_in_a_directory() {
        let dir = std::env::temp_dir().join(format!("cfw-testbed-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(State::load(&dir).unwrap(), None);
        let mut s = sample();
        s.run_dir = dir.clone();
        s.save().unwrap();
        assert_eq!(State::load(&dir).unwrap(), Some(s));
        std::fs::write(State::path(&dir), "not json").unwrap();
        assert!(State::load(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
