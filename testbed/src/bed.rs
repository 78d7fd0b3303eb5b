//! `up`, `down` and `status`.
//!
//! `up` = clean leftovers, record the plan, build namespaces → veths →
//! bridges → routes → nodes, wait for each node to answer on its control
//! socket. Any failure on the way prints the node log tail and runs `down`,
//! so a failed `up` leaves nothing behind. `down` works from the state file
//! *and* from `ip netns list` (every `cfw-*` namespace), so it also clears
//! the remains of a run that crashed before it could record anything.

use crate::nodeconf;
use crate::state::{HostRecord, Mode, NodeRecord, State, VethRecord, STATE_VERSION};
use crate::sys;
use crate::topology::{BedMtu, Endpoint, NodeSpec, Topology, DPDK_PREFIX, NS_PREFIX};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Offloads turned off on every veth end. With them on, the sending kernel
/// hands AF_PACKET 64 KB TSO/GSO super-frames and packets with partial
/// checksums, which a real NIC would never deliver.
pub const ETHTOOL_OFF: [&str; 10] = [
    "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off",
];
/// Per-namespace files `ip netns exec` bind-mounts over `/etc`.
pub const NETNS_ETC: &str = "/etc/netns";
/// Where DPDK keeps per-`--file-prefix` runtime files.
pub const DPDK_RUNTIME_DIR: &str = "/var/run/dpdk";
/// How long a node gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct UpOptions {
    pub nodes: usize,
    pub run_dir: PathBuf,
    pub kernel_router: bool,
    /// Directory holding `clusterfw` and `clusterfw-ctl`.
    pub bin_dir: PathBuf,
    pub ready_timeout: Duration,
    /// Link MTUs (`up --mtu`); 1500 everywhere by default.
    pub mtu: BedMtu,
    /// Workers of the (single) node (`up --workers`); 1 by default.
    pub workers: u16,
    /// The nodes translate (`up --nat`, `--dynamic-nat`).
    pub nat: crate::topology::BedNat,
    /// The cluster nodes' membership timers (`up --default-timers`).
    pub timers: crate::topology::BedTimers,
}

/// `$CFW_TESTBED_DIR`, else `/tmp/cfw-testbed`.
pub fn default_run_dir() -> PathBuf {
    std::env::var_os("CFW_TESTBED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/cfw-testbed"))
}

/// `$CLUSTERFW_BIN_DIR`, else the directory of the running executable (the
/// cargo target directory the test bed was built into).
pub fn default_bin_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("CLUSTERFW_BIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().context("cannot locate the running executable")?;
    Ok(exe.parent().map(Path::to_path_buf).unwrap_or_default())
}

/// Control-socket client: `clusterfw-ctl --socket S show <topic> --json`,
/// parsed. Bounded by a 5 s timeout so a wedged node cannot hang a caller.
pub fn ctl_json(bin_dir: &Path, socket: &Path, topic: &str) -> Result<Value> {
    let ctl = bin_dir.join("clusterfw-ctl");
    let (ctl, socket) = (ctl.to_string_lossy(), socket.to_string_lossy());
    // A topic of several words (`nat pool`, `conn count`) is several
    // arguments.
    let mut args = vec!["5", &ctl, "--socket", &socket, "show"];
    args.extend(topic.split_whitespace());
    args.push("--json");
    let out = sys::run("timeout", &args)?;
    serde_json::from_str(&out)
        .with_context(|| format!("clusterfw-ctl show {topic} --json printed non-JSON: {out}"))
}

/// `clusterfw-ctl --socket S cluster show TOPIC --json`, parsed: the
/// node's merge of every member's answer (it waits up to 2 s for silent
/// members; bounded here at 8 s).
pub fn ctl_cluster_json(bin_dir: &Path, socket: &Path, topic: &str) -> Result<Value> {
    let ctl = bin_dir.join("clusterfw-ctl");
    let (ctl, socket) = (ctl.to_string_lossy(), socket.to_string_lossy());
    let mut args = vec!["8", &ctl, "--socket", &socket, "cluster", "show"];
    args.extend(topic.split_whitespace());
    args.push("--json");
    let out = sys::run("timeout", &args)?;
    serde_json::from_str(&out).with_context(|| format!("clusterfw-ctl cluster show {topic} --json printed non-JSON: {out}"))
}

/// `clusterfw-ctl --socket S config reload --json`, parsed; a refusal is
/// an error carrying the node's reason. Bounded like [`ctl_json`].
pub fn ctl_reload(bin_dir: &Path, socket: &Path) -> Result<Value> {
    let ctl = bin_dir.join("clusterfw-ctl");
    let out = sys::run(
        "timeout",
        &["5", &ctl.to_string_lossy(), "--socket", &socket.to_string_lossy(), "config", "reload", "--json"],
    )?;
    serde_json::from_str(&out).with_context(|| format!("clusterfw-ctl config reload --json printed non-JSON: {out}"))
}

fn plan(topo: &Topology, run_dir: &Path, mode: Mode) -> State {
    State {
        version: STATE_VERSION,
        run_dir: run_dir.to_path_buf(),
        mode,
        namespaces: topo.namespaces.iter().map(|n| n.name.clone()).collect(),
        veths: topo
            .endpoints()
            .map(|e| VethRecord {
                namespace: e.namespace.clone(),
                ifname: e.ifname.clone(),
            })
            .collect(),
        nodes: topo
            .nodes
            .iter()
            .map(|n| {
                let dpdk = mode == Mode::Clusterfw;
                let file = |ext: &str| dpdk.then(|| run_dir.join(format!("{}.{ext}", n.name)));
                NodeRecord {
                    name: n.name.clone(),
                    namespace: n.namespace.clone(),
                    pid: None,
                    config: file("yaml"),
                    log: file("log"),
                    pid_file: file("pid"),
                    control_socket: file("sock"),
                    dpdk_prefix: dpdk.then(|| n.dpdk_prefix()),
                }
            })
            .collect(),
        hosts: topo
            .hosts
            .iter()
            .map(|h| HostRecord {
                name: h.name.clone(),
                namespace: h.namespace.clone(),
                address: h.address.clone(),
                kind: h.kind,
            })
            .collect(),
    }
}

/// The kernel address of a veth end: its own, or in kernel-router mode the
/// address of the node interface it carries.
fn kernel_address(topo: &Topology, e: &Endpoint, mode: Mode) -> Option<String> {
    if e.address.is_some() || mode != Mode::KernelRouter {
        return e.address.clone();
    }
    topo.nodes
        .iter()
        .filter(|n| n.namespace == e.namespace)
        .flat_map(|n| &n.interfaces)
        .find(|i| i.ifname == e.ifname)
        .map(|i| i.address.clone())
}

/// Brings the bed up. On failure everything made so far is removed again.
pub fn up(o: &UpOptions) -> Result<State> {
    if !sys::is_root() {
        bail!("the test bed needs root (network namespaces, veths, sysctls); run it with sudo or as root");
    }
    for tool in ["ip", "ethtool", "sysctl", "setsid", "timeout", "kill"] {
        if !sys::have(tool) {
            bail!("`{tool}` not found; run scripts/setup.sh");
        }
    }
    let topo = Topology::new(o.nodes)?.with_mtu(o.mtu).with_workers(o.workers)?.with_nat(o.nat)?.with_timers(o.timers);
    topo.validate()?;
    if o.kernel_router && topo.nodes.len() != 1 {
        bail!("--kernel-router is the single-node self-check; it does not combine with --nodes {}", o.nodes);
    }
    let mode = if o.kernel_router {
        Mode::KernelRouter
    } else {
        Mode::Clusterfw
    };
    if mode == Mode::Clusterfw {
        for bin in ["clusterfw", "clusterfw-ctl"] {
            let p = o.bin_dir.join(bin);
            if !p.is_file() {
                bail!(
                    "{} not found: build it with `cargo build --release -p clusterfw`, or point \
                     CLUSTERFW_BIN_DIR at the directory holding it (or use --kernel-router for the \
                     test-bed self-check)",
                    p.display()
                );
            }
        }
    }
    let leftovers = down(&o.run_dir)?;
    if !leftovers.is_empty() {
        eprintln!(
            "clusterfw-testbed: removed leftovers: {}",
            leftovers.summary()
        );
    }
    std::fs::create_dir_all(&o.run_dir)
        .with_context(|| format!("cannot create {}", o.run_dir.display()))?;
    let mut state = plan(&topo, &o.run_dir, mode);
    state.save()?;
    match build(&topo, &mut state, o) {
        Ok(()) => Ok(state),
        Err(e) => {
            // Only nodes that were started: an older log would mislead.
            for n in state.nodes.iter().filter(|n| n.pid.is_some()) {
                if let Some(log) = &n.log {
                    eprintln!(
                        "--- last lines of {} ---\n{}\n---",
                        log.display(),
                        sys::tail(log, 40)
                    );
                }
            }
            if let Err(d) = down(&o.run_dir) {
                eprintln!("clusterfw-testbed: cleanup after failed up also failed: {d:#}");
            }
            Err(e.context("test bed up failed; everything it made has been removed"))
        }
    }
}

fn build(topo: &Topology, state: &mut State, o: &UpOptions) -> Result<()> {
    let hosts = topo.hosts_file();
    for n in &topo.namespaces {
        sys::run("ip", &["netns", "add", &n.name])?;
        // `ip netns exec` bind-mounts these over /etc: names resolve from
        // the bed's hosts file, and with no nameserver the resolver asks
        // 127.0.0.1 and is refused at once. No DNS query leaves the bed (a
        // server's reverse lookup of its own address would otherwise wait
        // for a nameserver it cannot reach).
        let etc = Path::new(NETNS_ETC).join(&n.name);
        std::fs::create_dir_all(&etc)
            .with_context(|| format!("cannot create {}", etc.display()))?;
        std::fs::write(etc.join("hosts"), &hosts)?;
        std::fs::write(
            etc.join("resolv.conf"),
            "# clusterfw test bed: no DNS inside the bed\n",
        )?;
        sys::ip(&n.name, &["link", "set", "lo", "up"])?;
        let forward = n.ip_forward
            || (state.mode == Mode::KernelRouter
                && topo.nodes.iter().any(|x| x.namespace == n.name));
        sys::sysctl(
            &n.name,
            "net.ipv4.ip_forward",
            if forward { "1" } else { "0" },
        )?;
        for c in &n.sysctls {
            match sys::sysctl(&n.name, &c.key, &c.value) {
                Ok(()) => {}
                Err(e) if c.optional => {
                    eprintln!("clusterfw-testbed: {}: optional sysctl {} not set: {e:#}", n.name, c.key)
                }
                Err(e) => return Err(e),
            }
        }
    }
    for l in &topo.links {
        sys::ip(
            &l.a.namespace,
            &[
                "link",
                "add",
                &l.a.ifname,
                "type",
                "veth",
                "peer",
                "name",
                &l.b.ifname,
                "netns",
                &l.b.namespace,
            ],
        )?;
    }
    for e in topo.endpoints() {
        if e.disable_ipv6 {
            sys::sysctl(
                &e.namespace,
                &format!("net.ipv6.conf.{}.disable_ipv6", e.ifname),
                "1",
            )?;
        }
        let mut args = vec!["-K", e.ifname.as_str()];
        args.extend_from_slice(&ETHTOOL_OFF);
        sys::ns_run(&e.namespace, "ethtool", &args)?;
        if let Some(mtu) = e.mtu {
            sys::ip(&e.namespace, &["link", "set", "dev", &e.ifname, "mtu", &mtu.to_string()])?;
        }
        if let Some(addr) = kernel_address(topo, e, state.mode) {
            sys::ip(&e.namespace, &["addr", "add", &addr, "dev", &e.ifname])?;
        }
        if let Some(addr) = &e.address6 {
            // No DAD: the address is usable as soon as the link is up.
            sys::ip(&e.namespace, &["-6", "addr", "add", addr, "dev", &e.ifname, "nodad"])?;
        }
        sys::ip(&e.namespace, &["link", "set", &e.ifname, "up"])?;
    }
    for b in &topo.bridges {
        sys::ip(&b.namespace, &["link", "add", &b.name, "type", "bridge"])?;
        for m in &b.members {
            sys::ip(&b.namespace, &["link", "set", m, "master", &b.name])?;
        }
        if let Some(addr) = &b.address {
            sys::ip(&b.namespace, &["addr", "add", addr, "dev", &b.name])?;
        }
        sys::ip(&b.namespace, &["link", "set", &b.name, "up"])?;
    }
    for r in &topo.routes {
        let v6 = r.nexthops.iter().any(|h| h.contains(':'));
        // The kernel-router self-check forwards IPv4 only.
        if v6 && state.mode == Mode::KernelRouter {
            continue;
        }
        let mut args = if v6 { vec!["-6", "route", "add", r.destination.as_str()] } else { vec!["route", "add", r.destination.as_str()] };
        match r.nexthops.as_slice() {
            [one] => args.extend(["via", one.as_str()]),
            many => many
                .iter()
                .for_each(|h| args.extend(["nexthop", "via", h.as_str()])),
        }
        sys::ip(&r.namespace, &args)?;
    }
    for (i, node) in topo.nodes.iter().enumerate() {
        match state.mode {
            Mode::KernelRouter => {
                // Stand-in for the default policy (no access rules: higher to
                // lower security level permitted, lower to higher denied),
                // without iptables: TCP to well-known ports (1-1023) arriving
                // on a lower-level interface is refused by a policy rule.
                // Stateless, but enough for the self-check: replies to client
                // connections go to ephemeral ports and pass.
                let top = node
                    .interfaces
                    .iter()
                    .map(|x| x.security_level)
                    .max()
                    .unwrap_or(0);
                for x in node.interfaces.iter().filter(|x| x.security_level < top) {
                    sys::ip(
                        &node.namespace,
                        &[
                            "rule", "add", "iif", &x.ifname, "ipproto", "tcp", "dport", "1-1023",
                            "prohibit",
                        ],
                    )?;
                }
            }
            Mode::Clusterfw => {
                let pid = spawn_node(node, &state.nodes[i], &o.bin_dir)?;
                // On record before the readiness wait, so that a crash during
                // the wait still leaves the pid for `down`.
                state.nodes[i].pid = Some(pid);
                state.save()?;
                wait_ready(&state.nodes[i], pid, o)?;
            }
        }
    }
    if state.mode == Mode::Clusterfw && topo.nodes.len() > 1 {
        let formed = wait_cluster_formed(&state.nodes, &o.bin_dir, o.ready_timeout)?;
        eprintln!("cluster formed: {formed}");
    }
    Ok(())
}

/// Polls `show cluster` on every node until they agree: each one ready
/// (data or control, data ports up), one control node, one epoch, every
/// node a member. Returns a one-line summary; errors after `timeout` with
/// what each node said last.
pub fn wait_cluster_formed(nodes: &[NodeRecord], bin_dir: &Path, timeout: Duration) -> Result<String> {
    let start = Instant::now();
    loop {
        let views: Vec<Result<Value>> = nodes
            .iter()
            .map(|n| match &n.control_socket {
                Some(s) => ctl_json(bin_dir, s, "cluster"),
                None => Err(anyhow::anyhow!("node {} has no control socket", n.name)),
            })
            .collect();
        let ok: Vec<&Value> = views.iter().filter_map(|v| v.as_ref().ok()).collect();
        if ok.len() == nodes.len() {
            let ready = ok.iter().all(|v| v["ready"] == true && v["data_ports_open"] == true);
            let control = &ok[0]["control_node"];
            let epoch = &ok[0]["epoch"];
            let same = ok.iter().all(|v| &v["control_node"] == control && &v["epoch"] == epoch);
            let all_members = ok.iter().all(|v| v["member_ids"].as_array().is_some_and(|m| m.len() == nodes.len()));
            if ready && same && all_members && !control.is_null() {
                return Ok(format!(
                    "{} nodes ready, control node {} ({}), epoch {epoch}, after {:.1} s",
                    nodes.len(),
                    ok[0]["control_node_name"].as_str().unwrap_or("?"),
                    control,
                    start.elapsed().as_secs_f64()
                ));
            }
        }
        if start.elapsed() > timeout {
            let said: Vec<String> = nodes
                .iter()
                .zip(&views)
                .map(|(n, v)| match v {
                    Ok(v) => format!(
                        "{}: state {} ready {} control {} epoch {} members {}",
                        n.name, v["state"], v["ready"], v["control_node"], v["epoch"], v["member_ids"]
                    ),
                    Err(e) => format!("{}: {e:#}", n.name),
                })
                .collect();
            bail!("the cluster did not form within {timeout:?}: {}", said.join("; "));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes the node's config and starts `clusterfw` detached in its
/// namespace; returns its pid.
fn spawn_node(node: &NodeSpec, rec: &NodeRecord, bin_dir: &Path) -> Result<u32> {
    let (Some(config), Some(socket)) = (&rec.config, &rec.control_socket) else {
        bail!("node {} has no file paths in its record", node.name);
    };
    std::fs::write(config, nodeconf::node_yaml(node, &socket.to_string_lossy()))
        .with_context(|| format!("cannot write {}", config.display()))?;
    // A fresh log per `up` (a restart appends to it).
    if let Some(log) = &rec.log {
        std::fs::write(log, b"").with_context(|| format!("cannot truncate {}", log.display()))?;
    }
    start_node(rec, bin_dir)
}

/// Starts `clusterfw` with the config already written for it, detached in
/// its namespace, the log appended to; returns its pid (used again by
/// `faults` to restart a node).
pub fn start_node(rec: &NodeRecord, bin_dir: &Path) -> Result<u32> {
    let (Some(config), Some(log), Some(pid_file), Some(socket)) =
        (&rec.config, &rec.log, &rec.pid_file, &rec.control_socket)
    else {
        bail!("node {} has no file paths in its record", rec.name);
    };
    let _ = std::fs::remove_file(socket);
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open {}", log.display()))?;
    // setsid: the node gets its own session, detached from our terminal and
    // process group. Neither `setsid` (not a group leader here) nor
    // `ip netns exec` forks, so the spawned pid is the clusterfw pid.
    let child = Command::new("setsid")
        .args(["ip", "netns", "exec", &rec.namespace])
        .arg(bin_dir.join("clusterfw"))
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("cannot start clusterfw")?;
    let pid = child.id();
    // Not waited for: the node outlives this process. `sys::alive` treats a
    // zombie as dead for callers that keep running.
    drop(child);
    std::fs::write(pid_file, format!("{pid}\n"))
        .with_context(|| format!("cannot write {}", pid_file.display()))?;
    Ok(pid)
}

/// Polls `show stats` until the node answers, it dies, or the timeout.
fn wait_ready(rec: &NodeRecord, pid: u32, o: &UpOptions) -> Result<()> {
    wait_node_ready(rec, pid, &o.bin_dir, o.ready_timeout)
}

/// Polls `show stats` until the node answers, it dies, or `timeout`.
pub fn wait_node_ready(rec: &NodeRecord, pid: u32, bin_dir: &Path, timeout: Duration) -> Result<()> {
    let (Some(socket), Some(log)) = (&rec.control_socket, &rec.log) else {
        bail!("node {} has no control socket in its record", rec.name);
    };
    let start = Instant::now();
    let mut last_err = String::from("socket not created");
    loop {
        if !sys::alive(pid) {
            bail!(
                "node {} (pid {pid}) exited during start-up; see {}",
                rec.name,
                log.display()
            );
        }
        if socket.exists() {
            match ctl_json(bin_dir, socket, "stats") {
                Ok(_) => return Ok(()),
                Err(e) => last_err = format!("{e:#}"),
            }
        }
        if start.elapsed() > timeout {
            bail!(
                "node {} not ready after {:?} (control socket {}: {last_err}); see {}",
                rec.name,
                timeout,
                socket.display(),
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// What `down` removed.
#[derive(Debug, Default)]
pub struct DownReport {
    pub terminated: Vec<u32>,
    pub killed: Vec<u32>,
    pub veths: Vec<String>,
    pub namespaces: Vec<String>,
    pub dpdk_dirs: Vec<PathBuf>,
    pub etc_dirs: Vec<PathBuf>,
    pub files: Vec<PathBuf>,
}

impl DownReport {
    pub fn is_empty(&self) -> bool {
        self.terminated.is_empty()
            && self.veths.is_empty()
            && self.namespaces.is_empty()
            && self.dpdk_dirs.is_empty()
            && self.etc_dirs.is_empty()
    }

    pub fn summary(&self) -> String {
        format!(
            "{} process(es) stopped ({} needed SIGKILL), {} veth(s), {} namespace(s) [{}], {} DPDK runtime dir(s)",
            self.terminated.len(),
            self.killed.len(),
            self.veths.len(),
            self.namespaces.len(),
            self.namespaces.join(" "),
            self.dpdk_dirs.len()
        )
    }
}

/// Tears down what the state file of `run_dir` records plus every `cfw-*`
/// namespace. Idempotent; keeps going past individual failures and reports
/// them together at the end.
pub fn down(run_dir: &Path) -> Result<DownReport> {
    if !sys::is_root() {
        bail!("tearing down the test bed needs root");
    }
    let mut report = DownReport::default();
    let mut errors = Vec::new();
    let state = State::load(run_dir).unwrap_or_else(|e| {
        eprintln!("clusterfw-testbed: ignoring unreadable state: {e:#}");
        None
    });
    let existing = sys::namespaces()?;
    let mut namespaces: BTreeSet<String> = existing
        .iter()
        .filter(|n| n.starts_with(NS_PREFIX))
        .cloned()
        .collect();
    if let Some(s) = &state {
        namespaces.extend(
            s.namespaces
                .iter()
                .filter(|n| existing.contains(n))
                .cloned(),
        );
    }

    // 1. Processes: recorded node pids (if still theirs), then anything in a
    //    cfw-* namespace.
    let mut pids: BTreeSet<u32> = namespaces.iter().flat_map(|n| sys::ns_pids(n)).collect();
    for n in state.iter().flat_map(|s| &s.nodes) {
        if let Some(pid) = n.pid {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if sys::alive(pid) && String::from_utf8_lossy(&cmdline).contains("clusterfw") {
                pids.insert(pid);
            }
        }
    }
    let pids: Vec<u32> = pids.into_iter().collect();
    report.killed = sys::terminate(&pids, STOP_GRACE);
    report.terminated = pids;
    // Anything started in the meantime gets no grace.
    for n in &namespaces {
        let late = sys::ns_pids(n);
        report.killed.extend(sys::terminate(&late, Duration::ZERO));
    }

    // 2. Veths by name (deleting one end removes its peer), then namespaces.
    for v in state.iter().flat_map(|s| &s.veths) {
        if namespaces.contains(&v.namespace)
            && sys::ip(&v.namespace, &["link", "show", "dev", &v.ifname]).is_ok()
        {
            match sys::ip(&v.namespace, &["link", "del", "dev", &v.ifname]) {
                Ok(_) => report.veths.push(format!("{}/{}", v.namespace, v.ifname)),
                Err(e) => errors.push(format!("{e:#}")),
            }
        }
    }
    for n in &namespaces {
        match sys::run("ip", &["netns", "del", n]) {
            Ok(_) => report.namespaces.push(n.clone()),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }

    // 3. Per-namespace /etc files of cfw-* namespaces, then DPDK runtime
    //    dirs of test-bed nodes.
    remove_prefixed(
        Path::new(NETNS_ETC),
        NS_PREFIX,
        &mut report.etc_dirs,
        &mut errors,
    );
    remove_prefixed(
        Path::new(DPDK_RUNTIME_DIR),
        DPDK_PREFIX,
        &mut report.dpdk_dirs,
        &mut errors,
    );

    // 4. Run-dir files that describe a live bed; logs and configs stay for
    //    post-mortems.
    if let Ok(entries) = std::fs::read_dir(run_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".sock") || name.ends_with(".pid") || name.starts_with("state.json") {
                match std::fs::remove_file(e.path()) {
                    Ok(()) => report.files.push(e.path()),
                    Err(err) => errors.push(format!("cannot remove {}: {err}", e.path().display())),
                }
            }
        }
    }
    if !errors.is_empty() {
        bail!("test bed down incomplete:\n  {}", errors.join("\n  "));
    }
    Ok(report)
}

/// Removes every directory in `dir` whose name starts with `prefix`.
fn remove_prefixed(dir: &Path, prefix: &str, removed: &mut Vec<PathBuf>, errors: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(prefix) {
            match std::fs::remove_dir_all(e.path()) {
                Ok(()) => removed.push(e.path()),
                Err(err) => errors.push(format!("cannot remove {}: {err}", e.path().display())),
            }
        }
    }
}

/// `status --json`. Works without root (only reads the state file and
/// `/proc`).
pub fn status(run_dir: &Path) -> Result<Value> {
    let state = State::load(run_dir)?;
    let Some(s) = state else {
        return Ok(json!({ "run_dir": run_dir, "up": false, "nodes": [], "hosts": [] }));
    };
    let existing = sys::namespaces().unwrap_or_default();
    let nodes: Vec<Value> = s
        .nodes
        .iter()
        .map(|n| {
            let ns_up = existing.contains(&n.namespace);
            let alive = match n.pid {
                Some(pid) => ns_up && sys::alive(pid),
                None => ns_up && s.mode == Mode::KernelRouter,
            };
            json!({
                "name": n.name,
                "namespace": n.namespace,
                "pid": n.pid,
                "alive": alive,
                "control_socket": n.control_socket,
                "log": n.log,
                "config": n.config,
            })
        })
        .collect();
    let hosts: Vec<Value> = s
        .hosts
        .iter()
        .map(|h| json!({ "name": h.name, "namespace": h.namespace, "address": h.address, "kind": h.kind }))
        .collect();
    let ccl = s
        .namespaces
        .iter()
        .any(|n| n == crate::topology::CCL_NAMESPACE)
        .then(|| json!({ "namespace": crate::topology::CCL_NAMESPACE, "bridge": crate::topology::CCL_BRIDGE }));
    Ok(json!({
        "run_dir": s.run_dir,
        "up": true,
        "mode": s.mode,
        "nodes": nodes,
        "hosts": hosts,
        "ccl": ccl,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_records_everything_the_topology_makes() {
        let t = Topology::single_node();
        let s = plan(&t, Path::new("/run/x"), Mode::Clusterfw);
        assert_eq!(s.namespaces, ["cfw-inside", "cfw-outside", "cfw-n1"]);
        assert_eq!(s.veths.len(), 4);
        let n = &s.nodes[0];
        assert_eq!(
            n.control_socket.as_deref(),
            Some(Path::new("/run/x/n1.sock"))
        );
        assert_eq!(n.log.as_deref(), Some(Path::new("/run/x/n1.log")));
        assert_eq!(n.dpdk_prefix.as_deref(), Some("cfw-tb-n1"));
        let k = plan(&t, Path::new("/run/x"), Mode::KernelRouter);
        assert!(k.nodes[0].control_socket.is_none() && k.nodes[0].dpdk_prefix.is_none());
    }

    #[test]
    fn kernel_router_mode_addresses_node_ends() {
        let t = Topology::single_node();
        let n1_in = t.endpoints().find(|e| e.ifname == "n1-in").unwrap();
        assert_eq!(kernel_address(&t, n1_in, Mode::Clusterfw), None);
        assert_eq!(
            kernel_address(&t, n1_in, Mode::KernelRouter).as_deref(),
            Some("198.18.1.1/24")
        );
        let host = t.endpoints().find(|e| e.namespace == "cfw-inside").unwrap();
        assert_eq!(
            kernel_address(&t, host, Mode::Clusterfw).as_deref(),
            Some("198.18.1.2/24")
        );
    }

    #[test]
    fn status_of_an_empty_run_dir_says_down() {
        let dir = std::env::temp_dir().join(format!("cfw-testbed-status-{}", std::process::id()));
        let v = status(&dir).unwrap();
        assert_eq!(v["up"], false);
        assert_eq!(v["nodes"].as_array().unwrap().len(), 0);
    }
}
