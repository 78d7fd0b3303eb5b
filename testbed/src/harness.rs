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
/// An IPv6 ADDR (one with a colon) makes it an IPv6 server.
pub const HTTP_SERVER: &str = "import functools, http.server, socket, sys\n\
class S(http.server.ThreadingHTTPServer):\n    request_queue_size = 256\n    daemon_threads = True\n\
if ':' in sys.argv[1]:\n    S.address_family = socket.AF_INET6\n\
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[3])\n\
S((sys.argv[1], int(sys.argv[2])), h).serve_forever()\n";

/// A paced HTTP/1.0 GET (`python3 -c PACED_GET HOST PORT PATH OUT SECS`):
/// reads the body at an even rate over SECS seconds through a small
/// receive buffer, so the server can run at most that far ahead and the
/// connection lasts SECS on the wire; prints the local port once
/// connected (flushed) and the byte count at the end. (curl 7.88's
/// `--limit-rate` paces only its reads: the kernel's auto-tuned receive
/// buffer took the whole 2 MiB in well under a second about as often as
/// not, and the connection's packets all fell in one active interval.)
pub const PACED_GET: &str = "import socket, sys, time\n\
host, port, path, out, secs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])\n\
s = socket.socket()\n\
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)\n\
s.connect((host, port))\n\
print(s.getsockname()[1], flush=True)\n\
s.sendall(('GET %s HTTP/1.0\\r\\nHost: %s\\r\\n\\r\\n' % (path, host)).encode())\n\
buf = bytearray()\n\
while b'\\r\\n\\r\\n' not in buf:\n    c = s.recv(4096)\n    assert c, 'no header'\n    buf += c\n\
head, body = bytes(buf).split(b'\\r\\n\\r\\n', 1)\n\
total = int([l.split(b':')[1] for l in head.split(b'\\r\\n') if l.lower().startswith(b'content-length:')][0])\n\
body = bytearray(body)\n\
t0 = time.monotonic()\n\
while len(body) < total:\n    c = s.recv(4096)\n    assert c, 'short body'\n    body += c\n    time.sleep(max(0.0, t0 + secs * len(body) / total - time.monotonic()))\n\
open(out, 'wb').write(body)\n\
print(len(body))\n\
s.close()\n";

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

/// Reload the control node's configuration with `rule` in place of its
/// `access-rules: []` and wait (10 s at most) until each of the `nodes`
/// members runs the new policy version — applied, not only received — and
/// `also(k)` holds for member `k`. Returns what happened, for a step line.
pub fn publish_rule(bed: &TestBed, nodes: usize, rule: &str, also: impl Fn(usize) -> bool) -> Result<String> {
    let control = bed.show(1, "cluster")?["control_node"].as_u64().context("no control node")? as usize;
    edit_file(&bed.run_dir.join(format!("n{control}.yaml")), "access-rules: []\n", rule)?;
    let r = crate::bed::ctl_reload(&bed.bin_dir, &bed.socket(control))?;
    let version = r["running"]["version"].as_u64().context("reload answered no version")?;
    let t0 = Instant::now();
    loop {
        let applied = (1..=nodes).all(|k| {
            bed.show(k, "config").is_ok_and(|v| {
                v["policy"]["version"].as_u64() == Some(version) && v["policy"]["generation_applied"] == v["policy"]["generation_sent"]
            }) && also(k)
        });
        if applied {
            return Ok(format!("n{control} reloaded; every node runs v{version} in {} ms", t0.elapsed().as_millis()));
        }
        if t0.elapsed() > Duration::from_secs(10) {
            bail!("not every node runs v{version} after 10 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
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
    /// The nodes translate (`up --nat`, `--dynamic-nat`).
    pub nat: crate::topology::BedNat,
    /// Membership timers (`up --default-timers`).
    pub timers: crate::topology::BedTimers,
}

impl Default for Shape {
    fn default() -> Shape {
        Shape {
            mtu: crate::topology::BedMtu::default(),
            workers: 1,
            nat: crate::topology::BedNat::Off,
            timers: crate::topology::BedTimers::Fast,
        }
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
            timers: shape.timers,
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

    /// `show TOPIC --json` on nodes 1 to `nodes`, in order.
    pub fn show_each(&self, nodes: usize, topic: &str) -> Result<Vec<serde_json::Value>> {
        (1..=nodes).map(|k| self.show(k, topic).with_context(|| format!("n{k}'s management socket"))).collect()
    }

    /// `cluster show TOPIC --json` asked of node `k`.
    pub fn cluster_show(&self, k: usize, topic: &str) -> Result<serde_json::Value> {
        crate::bed::ctl_cluster_json(&self.bin_dir, &self.socket(k), topic)
    }
}

/// Child processes killed and reaped on drop (a test's concurrent
/// clients), also when the test fails half-way.
pub struct Children(pub Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A 2 s iperf3 stream from `client_ns` to an iperf3 server started in
/// `server_ns` on `server:5201`: UDP at 10 Mbit/s (at most 1 % lost) or
/// TCP; returns the figures.
pub fn iperf3(run_dir: &Path, tag: &str, server_ns: &str, server: &str, client_ns: &str, udp: bool) -> Result<String> {
    let mut srv = Background::start(
        "iperf3 server",
        server_ns,
        "iperf3",
        &["-s", "-1", "-B", server, "-p", "5201"],
        &run_dir.join(format!("{tag}-iperf3.log")),
    )?;
    srv.wait_listening(server_ns, 5201, Duration::from_secs(10))?;
    let mut args = vec!["-c", server, "-p", "5201", "-t", "2", "--json"];
    if udp {
        args.extend_from_slice(&["-u", "-b", "10M"]);
    }
    let out = sys::ns_run(client_ns, "iperf3", &args)?;
    let v: serde_json::Value = serde_json::from_str(&out).context("iperf3 --json")?;
    if udp {
        let sum = &v["end"]["sum"];
        let (packets, lost) = (sum["packets"].as_u64().unwrap_or(0), sum["lost_packets"].as_u64().unwrap_or(u64::MAX));
        anyhow::ensure!(packets > 0 && lost * 100 <= packets, "iperf3 UDP: {packets} sent, {lost} lost");
        Ok(format!("UDP {packets} datagrams, {lost} lost"))
    } else {
        let bps = v["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0);
        anyhow::ensure!(bps > 0.0, "iperf3 TCP: {out}");
        Ok(format!("TCP {:.0} Mbit/s", bps / 1e6))
    }
}

/// tcpdump on `eth0` of namespace `ns` (IPv4, `-nn -q`) into
/// `run_dir/tag.log`, listening when this returns; stopped when dropped.
pub fn capture_ip(run_dir: &Path, ns: &str, tag: &str) -> Result<(Background, PathBuf)> {
    let log = run_dir.join(format!("{tag}.log"));
    let cap = Background::start(&format!("tcpdump in {ns}"), ns, "tcpdump", &["-i", "eth0", "-nn", "-q", "-l", "ip"], &log)?;
    wait_log(&log, "listening on", "tcpdump")?;
    Ok((cap, log))
}

/// A tcpdump log (`-nn -q`) of a link that must carry no address starting
/// with `hidden` and at least `min` packets with an address starting
/// with `pool`: the NAT tests' capture check.
pub fn capture_shows_only(log: &Path, hidden: &str, pool: &str, min: usize) -> Result<String> {
    let text = std::fs::read_to_string(log)?;
    let (mut packets, mut pooled) = (0, 0);
    for line in text.lines().filter(|l| l.contains(" IP ")) {
        packets += 1;
        anyhow::ensure!(!line.contains(hidden), "an address {hidden}* on the captured link: {line}");
        if line.contains(pool) {
            pooled += 1;
        }
    }
    anyhow::ensure!(pooled >= min, "only {pooled} of {packets} captured packets carry a pool address");
    Ok(format!("{packets} packets captured, {pooled} with a pool address, none with an address {hidden}*"))
}

/// Wait (10 s at most) until the log at `path` contains `needle` (a
/// background tool printed that it started).
pub fn wait_log(path: &Path, needle: &str, what: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::fs::read_to_string(path).is_ok_and(|s| s.contains(needle)) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("{what} did not start: {}", sys::tail(path, 5))
}

/// A web server in namespace `ns` on `bind:port` serving `dir` (stopped
/// when dropped), listening when this returns.
pub fn http_server(run_dir: &Path, tag: &str, ns: &str, bind: &str, port: u16, dir: &Path) -> Result<Background> {
    let dir = dir.to_string_lossy().into_owned();
    let mut server = Background::start(
        &format!("HTTP server ({tag})"),
        ns,
        python(),
        &["-m", "http.server", &port.to_string(), "--bind", bind, "--directory", &dir],
        &run_dir.join(format!("{tag}-http.log")),
    )?;
    server.wait_listening(ns, port, Duration::from_secs(10))?;
    Ok(server)
}

/// An HTTP download of a random file of `bytes` served in `server_ns` on
/// `bind:port`, fetched from `client_ns` at `url` (which names the file
/// `random.bin`); the sha256 must match.
#[allow(clippy::too_many_arguments)]
pub fn http_download(
    run_dir: &Path,
    tag: &str,
    server_ns: &str,
    bind: &str,
    port: u16,
    client_ns: &str,
    url: &str,
    bytes: u64,
) -> Result<String> {
    let www = TempDir::new(run_dir, &format!("www-{tag}"))?;
    let want = random_file(&www.0.join("random.bin"), bytes)?;
    let _server = http_server(run_dir, tag, server_ns, bind, port, &www.0)?;
    let got = www.0.join("got.bin");
    sys::ns_run(
        client_ns,
        "curl",
        &["-sS", "--fail", "--connect-timeout", "10", "--max-time", "60", "-o", &got.to_string_lossy(), url],
    )?;
    let sum = sha256(&got)?;
    anyhow::ensure!(sum == want, "{url}: sha256 {sum}, served {want}");
    Ok(format!("{bytes} bytes, sha256 matches"))
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

/// A bed test's steps: each outcome printed as the step ends, failures
/// kept so that every step runs, then one panic naming them all with the
/// tail of each node's log (`finish`).
#[derive(Default)]
pub struct Steps(pub Vec<String>);

impl Steps {
    pub fn step(&mut self, name: &str, r: Result<String>) {
        match r {
            Ok(d) => eprintln!("step {name}: ok: {d}"),
            Err(e) => {
                eprintln!("step {name}: FAILED: {e:#}");
                self.0.push(format!("{name}: {e:#}"));
            }
        }
    }

    /// Panic if a step failed, with the last lines of nodes 1..=`nodes`'
    /// logs in `run_dir`.
    pub fn finish(self, run_dir: &Path, nodes: usize) {
        if self.0.is_empty() {
            return;
        }
        let logs: Vec<String> =
            (1..=nodes).map(|k| format!("n{k}:\n{}", sys::tail(&run_dir.join(format!("n{k}.log")), 15))).collect();
        panic!("{} step(s) failed:\n{}\nnode logs:\n{}", self.0.len(), self.0.join("\n"), logs.join("\n"));
    }
}

/// A file of `bytes` random bytes served over HTTP from `ns` at
/// `addr:port` (`http_server`): its directory, its sha256 and the server.
pub fn served_file(
    run_dir: &Path,
    tag: &str,
    ns: &str,
    addr: &str,
    port: u16,
    bytes: u64,
) -> Result<(TempDir, String, Background)> {
    let www = TempDir::new(run_dir, &format!("{tag}-www"))?;
    let sha = random_file(&www.0.join("random.bin"), bytes)?;
    let server = http_server(run_dir, tag, ns, addr, port, &www.0)?;
    Ok((www, sha, server))
}
