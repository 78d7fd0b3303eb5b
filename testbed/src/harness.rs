//! Helpers for traffic tests and scripts around a running bed.

use crate::sys;
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// `$CFW_TESTBED_LOCK`, else `/run/lock/cfw-testbed.lock`. Every user of the
/// fixed `cfw-*` names (the tests, `scripts/demo.sh` via flock(1)) holds this
/// lock for as long as its bed is up, so concurrent runs queue rather than
/// tear down each other's namespaces.
pub fn lock_path() -> PathBuf {
    std::env::var_os("CFW_TESTBED_LOCK")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/lock/cfw-testbed.lock"))
}

/// Takes the bed lock (flock(2), exclusive), waiting for another holder.
/// Released when the returned file is dropped or the process dies.
pub fn lock_bed() -> Result<File> {
    let path = lock_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let f = File::create(&path).with_context(|| format!("cannot open {}", path.display()))?;
    if f.try_lock().is_err() {
        eprintln!(
            "waiting for the test-bed lock {} (another run holds it)",
            path.display()
        );
        f.lock()
            .with_context(|| format!("cannot lock {}", path.display()))?;
    }
    Ok(f)
}

/// The Python that serves and listens in host namespaces: the system one if
/// present (no version-manager shims that fork around `exec`), else `python3`.
pub fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// A threaded static-file HTTP server with a listen backlog of 256
/// (`python3 -c HTTP_SERVER ADDR PORT DIR`). `python3 -m http.server`
/// listens with a backlog of 5: twenty clients connecting at once lose
/// SYNs at the server and wait out a 1 s retransmission, which a test of
/// the firewall would misread as its own stall.
pub const HTTP_SERVER: &str = "import functools, http.server, sys\n\
class S(http.server.ThreadingHTTPServer):\n    request_queue_size = 256\n    daemon_threads = True\n\
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[3])\n\
S((sys.argv[1], int(sys.argv[2])), h).serve_forever()\n";

/// A process running in a namespace for the length of a test step; killed
/// (SIGTERM, then SIGKILL) and reaped on drop, including on panic.
pub struct Background {
    pub what: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Background {
    /// Starts `program args…` in namespace `ns`, output to `log`.
    pub fn start(
        what: &str,
        ns: &str,
        program: &str,
        args: &[&str],
        log: &Path,
    ) -> Result<Background> {
        let out = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
        let child = sys::ns_command(ns, program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("cannot start {what}"))?;
        Ok(Background {
            what: what.to_string(),
            child: Some(child),
            log: log.to_path_buf(),
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Waits until a TCP listener on `port` exists in `ns` (`ss -ltn`),
    /// failing early if the process died.
    pub fn wait_listening(&mut self, ns: &str, port: u16, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let filter = format!("( sport = :{port} )");
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Some(status) = c.try_wait()? {
                    bail!(
                        "{} exited ({status}) before listening: {}",
                        self.what,
                        sys::tail(&self.log, 10)
                    );
                }
            }
            let out = sys::ns_run(ns, "ss", &["-Hltn", &filter]).unwrap_or_default();
            if !out.trim().is_empty() {
                return Ok(());
            }
            if start.elapsed() > timeout {
                bail!(
                    "{} not listening on port {port} after {timeout:?}: {}",
                    self.what,
                    sys::tail(&self.log, 10)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the process now (what drop does).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Ok(None) = c.try_wait() {
                sys::terminate(&[c.id()], Duration::from_secs(2));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(parent: &Path, name: &str) -> Result<TempDir> {
        let p = parent.join(format!("{name}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).with_context(|| format!("cannot create {}", p.display()))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The sha256 of a file, as `sha256sum` prints it.
/// Replace the first `from` in the file at `path` with `to` (a node's
/// configuration before a reload); an error when `from` is not there.
pub fn edit_file(path: &Path, from: &str, to: &str) -> Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    anyhow::ensure!(text.contains(from), "{} has no {from:?}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).with_context(|| format!("writing {}", path.display()))
}

pub fn sha256(path: &Path) -> Result<String> {
    let out = sys::run("sha256sum", &[path.to_string_lossy()])?;
    out.split_whitespace().next().map(str::to_string).context("sha256sum printed nothing")
}

/// Write `bytes` random bytes (from /dev/urandom) to `path`; returns their
/// sha256.
pub fn random_file(path: &Path, bytes: u64) -> Result<String> {
    use std::io::Read;
    let mut src = File::open("/dev/urandom")?.take(bytes);
    std::io::copy(&mut src, &mut File::create(path)?)?;
    sha256(path)
}

/// Runs `bed::down` when dropped: after a test-bed test, and when it
/// panics. Arm it before `up`, so that a half-made bed is removed as well.
pub struct BedGuard {
    pub run_dir: PathBuf,
}

impl Drop for BedGuard {
    fn drop(&mut self) {
        match crate::bed::down(&self.run_dir) {
            Ok(r) => eprintln!("test bed down: {}", r.summary()),
            Err(e) => eprintln!("test bed down FAILED: {e:#}"),
        }
    }
}

/// What a test's bed differs in from `up`'s defaults.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Link MTUs (`up --mtu`).
    pub mtu: crate::topology::BedMtu,
    /// Workers per node (`up --workers`).
    pub workers: u16,
    /// The single node translates (`up --nat`).
    pub nat: bool,
}

impl Default for Shape {
    fn default() -> Shape {
        Shape { mtu: crate::topology::BedMtu::default(), workers: 1, nat: false }
    }
}

/// A test's own cluster bed, brought up in-process (`bed::up`): the bed
/// lock held for its life, `down` when dropped (also on panic; armed
/// before `up`, so a half-made bed is removed as well).
pub struct TestBed {
    pub run_dir: PathBuf,
    pub bin_dir: PathBuf,
    // Dropped in this order: down, then the lock.
    _guard: BedGuard,
    _lock: File,
}

impl TestBed {
    /// `nodes` nodes in `$CFW_TESTBED_DIR`, else `default_run_dir`, with
    /// the binaries of [`test_bin_dir`].
    pub fn up(nodes: usize, default_run_dir: &str) -> Result<TestBed> {
        TestBed::up_with(nodes, default_run_dir, Shape::default())
    }

    /// `up` with the link MTUs and worker count of `shape`.
    pub fn up_with(nodes: usize, default_run_dir: &str, shape: Shape) -> Result<TestBed> {
        let lock = lock_bed()?;
        std::env::set_var("CFW_TESTBED_LOCK_HELD", "1");
        let run_dir = test_run_dir(default_run_dir);
        let bin_dir = test_bin_dir();
        let guard = BedGuard { run_dir: run_dir.clone() };
        crate::bed::up(&crate::bed::UpOptions {
            nodes,
            run_dir: run_dir.clone(),
            kernel_router: false,
            bin_dir: bin_dir.clone(),
            ready_timeout: Duration::from_secs(30),
            mtu: shape.mtu,
            workers: shape.workers,
            nat: shape.nat,
        })?;
        Ok(TestBed { run_dir, bin_dir, _guard: guard, _lock: lock })
    }

    /// Node `k`'s control socket.
    pub fn socket(&self, k: usize) -> PathBuf {
        self.run_dir.join(format!("n{k}.sock"))
    }

    /// `show TOPIC --json` on node `k`.
    pub fn show(&self, k: usize, topic: &str) -> Result<serde_json::Value> {
        crate::bed::ctl_json(&self.bin_dir, &self.socket(k), topic)
    }
}

/// Where a test-bed test finds `clusterfw` and `clusterfw-ctl`:
/// `$CLUSTERFW_BIN_DIR`, else the workspace's `target/release`.
pub fn test_bin_dir() -> PathBuf {
    std::env::var_os("CLUSTERFW_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release"))
}

/// Workers per node for the cluster bed tests: `$CFW_BED_WORKERS` (1 when
/// unset; `scripts/test.sh` runs the cluster tests once more with 2, issue
/// 12).
pub fn bed_workers() -> u16 {
    std::env::var("CFW_BED_WORKERS").ok().and_then(|v| v.parse().ok()).filter(|&w| w >= 1).unwrap_or(1)
}

/// A test-bed test's run directory: `$CFW_TESTBED_DIR`, else `default`.
pub fn test_run_dir(default: &str) -> PathBuf {
    std::env::var_os("CFW_TESTBED_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(default))
}
