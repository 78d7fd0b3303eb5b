//! `clusterfw`: one firewall node on DPDK.
//!
//! ```text
//! clusterfw --config node.yaml [--check] [-- EAL args...]
//! ```
//! Order of start-up, so that a bad configuration never touches DPDK:
//! load and validate the YAML (exit 2 with file:line: field on error), set up
//! logging, then EAL, the packet pool and the ports, build the sans-IO
//! pipeline, launch the worker on the first worker lcore, and serve the
//! control socket and timers on the main lcore until SIGINT/SIGTERM.
#![deny(unsafe_code)]

mod ccl;
mod clock;
mod control;
mod links;
mod export;
mod metrics_http;
mod policy;
mod shared;
mod sizing;
mod worker;

use anyhow::{bail, Context, Result};
use clock::Clock;
use config::Config;
use controlplane::membership::{self, ControlLink, Membership};
use dataplane::ccl::{CclKey, FramePath, Placement};
use dataplane::cluster::MemberSet;
use dataplane::pipeline::{ClusterSpec, InterfaceSpec, Pipeline, PipelineConfig, RouteSpec};
use dataplane::{Duration, Epoch, NodeId, PortId, WorkerId};
use dpdk_sys::{Mempool, Port};
use shared::Shared;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const USAGE: &str = "usage: clusterfw --config FILE [--check] [-- EAL-ARGS...]";

struct Cli {
    config: PathBuf,
    check_only: bool,
    extra_eal: Vec<String>,
}

fn parse_cli() -> Result<Cli> {
    let mut config = None;
    let mut check_only = false;
    let mut extra_eal = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--config" | "-c" => config = Some(PathBuf::from(args.next().context("--config needs a file")?)),
            "--check" => check_only = true,
            "--" => {
                extra_eal.extend(args.by_ref());
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unexpected argument {other:?}\n{USAGE}"),
        }
    }
    Ok(Cli { config: config.context(USAGE)?, check_only, extra_eal })
}

/// Nice value of the control lcore's thread (heartbeats, membership).
const CONTROL_NICE: i32 = -10;
/// The control lcore's real-time priority (SCHED_RR), low in the 1-99
/// range: above every ordinary thread, below the kernel's own.
const CONTROL_RT_PRIORITY: i32 = 10;

fn main() -> ExitCode {
    let cli = match parse_cli() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("clusterfw: {e:#}");
            return ExitCode::from(2);
        }
    };
    let cfg = match config::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("clusterfw: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.check_only {
        println!("{}: configuration OK", cli.config.display());
        return ExitCode::SUCCESS;
    }
    init_logging(&cfg);
    match run(cfg, cli.extra_eal) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e:#}");
            ExitCode::from(1)
        }
    }
}

fn init_logging(cfg: &Config) {
    let level = cfg.logging.level.as_str();
    env_logger::Builder::new()
        .parse_filters(level)
        .format_timestamp_millis()
        .target(env_logger::Target::Stderr)
        .init();
}

/// EAL arguments: program name, the YAML's `eal-args`, one `--vdev` or `-a`
/// per distinct device, then what followed `--` on the command line.
fn eal_args(cfg: &Config, extra: &[String]) -> Vec<String> {
    let mut args = vec!["clusterfw".to_string()];
    args.extend(cfg.dpdk.eal_args.iter().cloned());
    let mut seen = Vec::new();
    // Queue pairs: one per worker on a data port; on the CCL one per
    // worker and the control lcore's.
    let workers = cfg.dpdk.workers;
    let ccl = cfg.cluster.iter().map(|c| (c.ccl.device_name(), c.ccl.is_vdev(), &c.ccl.device, workers + 1));
    let data = cfg.interfaces.iter().map(|i| (i.device_name(), i.is_vdev(), &i.device, workers));
    for (name, vdev, device, queues) in data.chain(ccl) {
        if seen.contains(&name) {
            continue;
        }
        seen.push(name);
        args.push(if vdev { "--vdev".into() } else { "-a".into() });
        args.push(if vdev { sizing::vdev_arg(device, queues) } else { device.clone() });
    }
    args.extend(extra.iter().cloned());
    args
}

/// A data port: the DPDK port and the devices' name.
struct DataPort {
    /// The DPDK device name (`net_af_packet0`, `0000:03:00.0`).
    name: String,
    /// The device string with its arguments, as configured.
    device: String,
    /// The interfaces on this port (several with VLANs), comma-separated.
    interfaces: String,
    port: Port,
    /// RX queues configured (one per worker where the device has them).
    rx_queues: u16,
}

fn run(cfg: Config, extra: Vec<String>) -> Result<()> {
    let args = eal_args(&cfg, &extra);
    log::info!("EAL arguments: {}", args.join(" "));
    let eal = dpdk_sys::eal::init(&args).context("EAL init")?;

    // Mbufs hold the largest frame any port hands over (`sizing`).
    let data_room = sizing::mbuf_data_room(&cfg).map_err(anyhow::Error::msg)?;
    log::info!("packet pool: {} mbufs of {} bytes", cfg.dpdk.mbufs, data_room);
    let want = sizing::mbufs_wanted(&cfg, u64::from(shared::STEER_RING));
    if u64::from(cfg.dpdk.mbufs) < want {
        log::warn!(
            "dpdk.mbufs {} is less than the {want} that the ports' RX and TX rings{}{} can hold at once; \
             under load a port may find the pool empty (rx_nombuf)",
            cfg.dpdk.mbufs,
            if cfg.cluster.is_some() { ", the CCL hand-off" } else { "" },
            if cfg.dpdk.workers > 1 { " and the workers' steering and hand-off rings" } else { "" }
        );
    }
    let pool = Arc::new(
        Mempool::new_pktmbuf("cfw_pkts", cfg.dpdk.mbufs, 256, data_room, dpdk_sys::SOCKET_ID_ANY)
            .context("creating the packet pool")?,
    );

    // One DPDK port per distinct device; interfaces (VLANs) map onto them.
    // Each port gets one RX and one TX queue per worker where it has them
    // (RSS spreads the RX queues; the workers steer frames to their owner
    // whatever queue they arrive on, `steer`); a port with fewer RX queues
    // is polled by the first workers only, one with fewer TX queues cannot
    // serve every worker (an error).
    let workers = cfg.dpdk.workers;
    let mut ports: Vec<DataPort> = Vec::new();
    let mut specs = Vec::new();
    for i in &cfg.interfaces {
        let dev = i.device_name();
        let idx = match ports.iter().position(|p| p.name == dev) {
            Some(idx) => idx,
            None => {
                let port = Port::by_name(dev).with_context(|| format!("interface {}: device {dev}", i.name))?;
                let mtu = port_mtu(port, dev, i.mtu)?;
                let rxq = port_queues(port, dev, workers)?;
                port.configure(rxq, workers, cfg.dpdk.rx_descriptors, cfg.dpdk.tx_descriptors, &pool, mtu)
                    .with_context(|| format!("configuring port {dev} with {rxq} RX / {workers} TX queues"))?;
                port.start().with_context(|| format!("starting port {dev}"))?;
                ports.push(DataPort {
                    name: dev.to_string(),
                    device: i.device.clone(),
                    interfaces: String::new(),
                    port,
                    rx_queues: rxq,
                });
                ports.len() - 1
            }
        };
        let ifs = &mut ports[idx].interfaces;
        if !ifs.is_empty() {
            ifs.push(',');
        }
        ifs.push_str(&i.name);
        let mac = ports[idx].port.mac_addr().with_context(|| format!("MAC of {dev}"))?;
        log::info!(
            "interface {} on {} (port {}): {}/{} mac {} mtu {} security-level {}",
            i.name,
            dev,
            ports[idx].port.id(),
            i.address,
            i.prefix_len,
            fmt_mac(mac),
            i.mtu,
            i.security_level
        );
        specs.push(InterfaceSpec {
            name: i.name.clone(),
            port: PortId(idx as u16),
            mac,
            addr: i.address,
            prefix_len: i.prefix_len,
            security_level: i.security_level,
            vlan: i.vlan,
            mtu: i.mtu,
            reverse_path: match i.reverse_path {
                config::model::ReversePath::Strict => dataplane::pipeline::ReversePath::Strict,
                config::model::ReversePath::Loose => dataplane::pipeline::ReversePath::Loose,
                config::model::ReversePath::Off => dataplane::pipeline::ReversePath::Off,
            },
        });
    }

    // The CCL port (cluster mode): an extra interface `ccl`, a queue pair
    // per worker and one for the control lcore (queue `workers`) where the
    // device has them. One worker on a port with one queue pair: no
    // control queue, the worker sends the heartbeats. Several workers need
    // them all.
    let mut ccl_setup = None;
    if let Some(cl) = &cfg.cluster {
        let dev = cl.ccl.device_name();
        let port = Port::by_name(dev).with_context(|| format!("cluster.ccl: device {dev}"))?;
        let info = port.info().with_context(|| format!("cluster.ccl: device {dev}"))?;
        let want = workers + 1;
        let two = info.max_rx_queues >= want && info.max_tx_queues >= want;
        if !two && workers > 1 {
            bail!(
                "CCL device {dev} ({}) offers {} RX / {} TX queues; {workers} workers need {want} queue pairs \
                 (one each and the control lcore's; af_packet: qpairs={want}, which the node adds itself unless \
                 the device string sets qpairs)",
                info.driver_name,
                info.max_rx_queues,
                info.max_tx_queues
            );
        }
        let q = if two { want } else { 1 };
        let mtu = port_mtu(port, dev, cl.ccl.mtu)?;
        port.configure(q, q, cfg.dpdk.rx_descriptors, cfg.dpdk.tx_descriptors, &pool, mtu)
            .with_context(|| format!("configuring CCL port {dev} with {q} queue pair(s)"))?;
        port.start().with_context(|| format!("starting CCL port {dev}"))?;
        if !two {
            log::warn!(
                "CCL port {dev} ({}) offers {} RX / {} TX queues: no control queue, the worker receives \
                 everything and sends the heartbeats (af_packet: add qpairs=2 to the device)",
                info.driver_name,
                info.max_rx_queues,
                info.max_tx_queues
            );
        }
        let mac = port.mac_addr().with_context(|| format!("MAC of {dev}"))?;
        let idx = ports.len();
        log::info!(
            "interface {} on {dev} (port {}, {q} queue pair(s)): {}/{} mac {}; node-id {} of cluster {}",
            config::cluster::CCL_INTERFACE,
            port.id(),
            cl.ccl.address,
            cl.ccl.prefix_len,
            fmt_mac(mac),
            cl.node_id,
            cl.name
        );
        ports.push(DataPort {
            name: dev.to_string(),
            device: cl.ccl.device.clone(),
            interfaces: config::cluster::CCL_INTERFACE.into(),
            port,
            // Worker w polls queue w; queue `workers` is the control
            // lcore's.
            rx_queues: workers,
        });
        specs.push(InterfaceSpec {
            name: config::cluster::CCL_INTERFACE.into(),
            port: PortId(idx as u16),
            mac,
            addr: cl.ccl.address,
            prefix_len: cl.ccl.prefix_len,
            security_level: 0,
            vlan: None,
            mtu: cl.ccl.mtu,
            // Only CCL datagrams to this node are taken from it (they are
            // its own, not transit).
            reverse_path: dataplane::pipeline::ReversePath::Off,
        });
        ccl_setup = Some((idx, port, two, mac));
    }

    let incarnation = unix_seconds();
    let cluster = cfg.cluster.as_ref().map(|cl| cluster_spec(cl, incarnation)).transpose()?;
    let mut policies = policy::Policies::new(&cfg, specs.clone(), usize::from(cfg.dpdk.workers));
    let mut pcfg = pipeline_config(&cfg, specs);
    pcfg.cluster = cluster;
    // One pipeline per worker, each with its own tables (docs/workers.md);
    // the ICMP error rate is the node's, shared out.
    pcfg.icmp_errors.rate = pcfg.icmp_errors.rate.div_ceil(u32::from(workers));
    pcfg.icmp_errors.burst = pcfg.icmp_errors.burst.div_ceil(u32::from(workers)).max(1);
    let mut pipelines = Vec::with_capacity(usize::from(workers));
    // A syslog or IPFIX collector configured: the workers log flows for
    // the export thread.
    let exporting = export::wanted(&cfg);
    // NAT: one plan (rules, block maps over the workers) shared by the
    // workers and their steering; built by the first worker.
    let nat = policy::nat_spec(&cfg);
    let mut nat_plan = None;
    for w in 0..workers {
        let mut p = Pipeline::new(pcfg.clone()).map_err(|e| anyhow::anyhow!("pipeline: {e}"))?;
        p.set_worker(WorkerId(w), workers).map_err(|e| anyhow::anyhow!("pipeline: {e}"))?;
        p.set_limits(&policy::limit_spec(&cfg.policy()));
        p.set_ipv6(&ipv6_spec(&cfg)).map_err(|e| anyhow::anyhow!("ipv6: {e}"))?;
        match (&nat, &nat_plan) {
            (Some(spec), None) => {
                p.set_nat(spec).map_err(|e| anyhow::anyhow!("nat: {e}"))?;
                nat_plan = p.nat_plan();
                for (pool, idle) in nat_plan.as_ref().map(|n| n.idle_workers()).unwrap_or_default() {
                    let name = cfg.nat.pools.get(usize::from(pool)).map_or("?", |p| p.name.as_str());
                    log::warn!(
                        "nat pool {name}: fewer addresses than workers; {idle} worker(s) hold none and their \
                         hosts get no dynamic NAT from it (nat-exhausted; docs/nat.md)"
                    );
                }
            }
            (_, Some(plan)) => p.set_nat_plan(plan.clone()).map_err(|e| anyhow::anyhow!("nat: {e}"))?,
            (None, None) => {}
        }
        if exporting {
            // Active records only for flow export (syslog has no use for them).
            p.log_flows(cfg.flow_export.as_ref().map(|f| dataplane::Duration::from_secs(f.active_timeout.into())));
        }
        pipelines.push(p);
    }
    // A reload's NAT rules must keep this plan's pools (N6, N9).
    policies.nat_plan = nat_plan.clone();
    // Several workers: a steering ring into each (`shared::STEER_RING`).
    let mut producers = Vec::new();
    let mut consumers = Vec::new();
    for w in 0..workers {
        if workers == 1 {
            producers.push(None);
            consumers.push(None);
            continue;
        }
        let (p, c) = dpdk_sys::mbuf_ring(&format!("cfw_steer{w}"), shared::STEER_RING, dpdk_sys::SOCKET_ID_ANY)
            .with_context(|| format!("worker {w}'s steering ring"))?;
        producers.push(Some(p));
        consumers.push(Some(c));
    }
    let mut shared = Shared::new(producers);
    if exporting {
        for w in &mut shared.workers {
            w.flow_records = Some(crossbeam_queue::ArrayQueue::new(export::FLOW_RECORD_QUEUE));
        }
    }
    let shared = Arc::new(shared);
    let export_names = controlplane::syslog::Names {
        interfaces: pipelines.first().map_or_else(Vec::new, |p| p.interface_names().to_vec()),
        rules: policies.running.policy.access_rules.iter().map(|r| r.name.clone()).collect(),
        node: cfg.node.name.clone(),
    };
    let ccl_control = match (&cfg.cluster, ccl_setup) {
        (Some(cl), Some((ccl_idx, port, two, mac))) => Some(ccl::CclControl::new(ccl::CclControlConfig {
            port,
            control_queue: two.then_some(workers),
            pool: pool.clone(),
            shared: shared.ccl.clone(),
            link: control_link(cl, incarnation, mac)?,
            membership: membership(cl, workers, incarnation, ccl_idx as u16, policies.publish_bytes())?,
            links: links::Links::new(
                ports.iter().enumerate().map(|(i, p)| (p.port, i as u16, i == ccl_idx, p.device.as_str())),
            ),
            nat_pools: policy::nat_spec(&cfg).map_or_else(Vec::new, |s| {
                (0u16..).zip(s.pools).filter(|(_, p)| p.pat.is_none()).map(|(i, p)| (i, p.addresses)).collect()
            }),
            xlate_timeout: policy::nat_spec(&cfg).map_or(dataplane::Duration::from_secs(30), |s| s.xlate_timeout),
        })),
        _ => None,
    };
    // One clock for the worker and the control lcore: their timestamps
    // (flow ages, heartbeat ages, member-set changes) are comparable.
    let clock = Clock::new();
    // First SIGINT/SIGTERM: stop cleanly. A second one while stopping: exit now.
    let stop_signal = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register_conditional_shutdown(sig, 1, stop_signal.clone())
            .and_then(|_| signal_hook::flag::register(sig, stop_signal.clone()))
            .context("installing signal handlers")?;
    }

    let lcores = dpdk_sys::eal::worker_lcores();
    let mut launched = Vec::new();
    let mut threads = Vec::new();
    for (w, (mut pipeline, steered_in)) in pipelines.into_iter().zip(consumers).enumerate() {
        // SYN-proxy cookie periods on the system clock: members validate
        // each other's cookies (their clocks agreeing within 64 s).
        pipeline.set_wall_clock(clock.origin_unix_ns());
        let worker = worker::Worker {
            pipeline,
            ports: ports.iter().map(|p| p.port).collect(),
            pool: pool.clone(),
            shared: shared.clone(),
            clock,
            idle_sleep_us: cfg.dpdk.idle_sleep_us,
            ccl_port: ccl_setup.map(|(idx, ..)| idx),
            me: WorkerId(w as u16),
            workers,
            rx_queues: ports.iter().map(|p| (w < usize::from(p.rx_queues)).then_some(w as u16)).collect(),
            steered_in,
            nat: nat_plan.clone(),
        };
        match lcores.get(w) {
            Some(&lcore) => {
                log::info!("launching worker {w} on lcore {lcore}");
                dpdk_sys::eal::launch(lcore, move || worker.run()).context("launching a worker lcore")?;
                launched.push(lcore);
            }
            None => {
                log::warn!(
                    "worker {w}: no worker lcore left in the EAL core list ({} for {workers} workers); running it on a thread",
                    lcores.len()
                );
                threads.push(std::thread::Builder::new().name(format!("worker{w}")).spawn(move || worker.run())?);
            }
        }
    }

    // The exporters (syslog, IPFIX): a thread of their own, fed by the
    // workers' record queues and the control lcore's events.
    let (export_shared, exporter) = if exporting {
        let x = Arc::new(export::ExportShared::new());
        let node_id = cfg.cluster.as_ref().map_or(0, |c| u32::from(c.node_id));
        let e = export::Exporter::new(&cfg, shared.clone(), x.clone(), clock, export_names, node_id);
        (Some(x), Some(std::thread::Builder::new().name("export".into()).spawn(move || e.run())?))
    } else {
        (None, None)
    };
    let mut ctl = control::Control::new(
        &cfg,
        shared.clone(),
        ports.iter().map(|p| control::ControlPort::new(p.interfaces.clone(), p.name.clone(), p.port, &p.device)).collect(),
        ccl_control,
        policies,
        clock,
        export_shared,
    )?;
    log::info!("node {} up; control socket {}", cfg.node.name, cfg.control_socket.display());
    // Prometheus' endpoint: a thread of its own (at nice 0, made before
    // the control lcore's nice), a client of the control socket.
    let metrics = match cfg.metrics.listen {
        Some(addr) => Some(metrics_http::spawn(addr, cfg.control_socket.clone(), stop_signal.clone())?),
        None => None,
    };
    // The control lcore's heartbeats must not wait behind busy workers or
    // other programs where cores are shared. Real-time round-robin (as
    // corosync runs its totem thread), set after the worker threads were
    // made so they stay ordinary: a nice value only orders threads of one
    // session group (the kernel's autogroups), so nice -10 did not put the
    // control lcore ahead of another process's busy threads, and under a
    // CPU hog it went unscheduled for 300-1000 ms against a 300 ms hold
    // time. It sleeps between polls (50 µs busy, 5 ms idle) and never
    // spins, so the class costs the workers nothing. Without the
    // privilege, nice -10.
    match dpdk_sys::eal::set_thread_realtime(CONTROL_RT_PRIORITY) {
        Ok(()) => log::info!("control lcore: real-time round-robin, priority {CONTROL_RT_PRIORITY}"),
        Err(e) => match dpdk_sys::eal::set_thread_nice(CONTROL_NICE) {
            Ok(()) => log::warn!(
                "control lcore: no real-time class ({e}); at nice {}: heartbeats may be late on shared cores",
                dpdk_sys::eal::thread_nice()
            ),
            Err(e2) => log::warn!(
                "control lcore: no real-time class ({e}), cannot set nice {CONTROL_NICE} ({e2}); heartbeats may be late on shared cores"
            ),
        },
    }
    // The control lcore: socket, CCL control queue, heartbeats. It polls
    // quickly while the CCL control queue carries frames (the worker's
    // share of them waits here) and backs off to 5 ms when idle.
    let mut idle_rounds = 0u32;
    while !stop_signal.load(Ordering::Relaxed) {
        if ctl.poll() > 0 {
            idle_rounds = 0;
        } else {
            idle_rounds = idle_rounds.saturating_add(1);
        }
        let pause = if idle_rounds < 200 { 50 } else { 5_000 };
        std::thread::sleep(std::time::Duration::from_micros(pause));
    }
    log::info!("stopping");
    shared.stop.store(true, Ordering::Relaxed);
    for lcore in launched {
        dpdk_sys::eal::wait_lcore(lcore);
    }
    for t in threads {
        let _ = t.join();
    }
    if let Some(t) = metrics {
        let _ = t.join();
    }
    if let Some(t) = exporter {
        let _ = t.join();
    }
    shared.drain_frames();
    drop(ctl);
    for p in &ports {
        if let Err(e) = p.port.stop() {
            log::warn!("stopping port {}: {e}", p.name);
        }
        let _ = p.port.close();
    }
    drop(pool);
    drop(eal);
    Ok(())
}

/// RX queues for `workers` workers on `port`: one each where the device
/// has them, else as many as it has (logged). Every worker needs a TX queue
/// of its own: a port with fewer is an error.
fn port_queues(port: Port, dev: &str, workers: u16) -> Result<u16> {
    let info = port.info().with_context(|| format!("device {dev}"))?;
    if info.max_tx_queues < workers {
        bail!(
            "device {dev} ({}) offers {} TX queues, {workers} workers need one each (af_packet: qpairs={workers}, \
             which the node adds itself unless the device string sets qpairs)",
            info.driver_name,
            info.max_tx_queues
        );
    }
    let rx = workers.min(info.max_rx_queues.max(1));
    if rx < workers {
        log::warn!(
            "device {dev} ({}): {rx} RX queue(s) for {workers} workers: workers {rx}.. poll no RX queue of it and get its \
             frames from the others' steering",
            info.driver_name
        );
    }
    Ok(rx)
}

/// The MTU to configure `port` with: `want`, or the most the device
/// reports when that is less (af_packet says 1500 whatever its kernel
/// interface carries: there the kernel interface's MTU decides, and the
/// pipeline still fragments for `want`; logged).
fn port_mtu(port: Port, dev: &str, want: u16) -> Result<u16> {
    let info = port.info().with_context(|| format!("device {dev}"))?;
    if want <= info.max_mtu {
        return Ok(want);
    }
    log::warn!(
        "device {dev} ({}): MTU {want} is above the {} it reports; configured with {}: the link's own MTU decides \
         what it carries (set it on the kernel interface for af_packet)",
        info.driver_name,
        info.max_mtu,
        info.max_mtu
    );
    Ok(info.max_mtu)
}

/// Seconds since the Unix epoch, the CCL incarnation of this boot (it must
/// grow across restarts; one restart per second at most).
fn unix_seconds() -> u32 {
    ((clock::unix_ns() / 1_000_000_000) as u32).max(1)
}

/// 64 bits from the OS RNG, else from the clock.
fn random_seed() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    match std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)) {
        Ok(()) => u64::from_ne_bytes(b),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9_7f4a_7c15),
    }
}

/// The member set a cluster pipeline starts with: this node alone at
/// epoch 0, fenced (lease 0) until the membership machine admits it and
/// grants a lease; its first member set replaces this one.
fn initial_members(cl: &config::ClusterConfig) -> Result<MemberSet> {
    MemberSet::from_nodes(Epoch(0), [NodeId(cl.node_id)]).map_err(|e| anyhow::anyhow!("cluster.node-id: {e}"))
}

/// The control lcore's CCL endpoint: control channel, this boot's
/// incarnation, broadcasts from the CCL port's MAC and address.
fn control_link(cl: &config::ClusterConfig, incarnation: u32, mac: [u8; 6]) -> Result<ControlLink> {
    let key = CclKey::new(&cl.name, cl.key.expose()).map_err(|e| anyhow::anyhow!("cluster key: {e}"))?;
    let broadcast =
        FramePath { src_mac: mac, dst_mac: [0xff; 6], src_ip: cl.ccl.address, dst_ip: cl.ccl.subnet().broadcast() };
    ControlLink::new(&key, NodeId(cl.node_id), incarnation, broadcast)
        .map_err(|e| anyhow::anyhow!("CCL control endpoint: {e}"))
}

/// The membership machine: every configured member, the YAML's timers,
/// priority, site and chassis, split-brain mode; `ccl_port` is the CCL
/// port's index among the ports `links` reports; `publish` is the policy
/// document this node replicates if it forms the cluster (the worker
/// confirms each replicated configuration it runs: `crate::policy`).
fn membership(
    cl: &config::ClusterConfig,
    workers: u16,
    incarnation: u32,
    ccl_port: u16,
    publish: Vec<u8>,
) -> Result<Membership> {
    let nodes = cl
        .members
        .iter()
        .map(|m| membership::NodeConfig { id: NodeId(m.id), name: m.name.clone(), ccl_address: m.ccl_address })
        .collect();
    let mut c = membership::Config::new(NodeId(cl.node_id), incarnation, nodes);
    c.priority = cl.priority;
    c.place = Placement { site: cl.site_id, chassis: cl.chassis_id };
    // At most 32 (config): one CCL channel each.
    c.workers = u8::try_from(workers).context("dpdk.workers")?;
    c.heartbeat_interval = Duration::from_millis(cl.heartbeat_interval_ms);
    c.hold_time = Duration::from_millis(cl.hold_time_ms);
    c.split_brain = match cl.split_brain {
        config::SplitBrain::Elect => membership::SplitBrain::Elect,
        config::SplitBrain::Quorum => membership::SplitBrain::Quorum,
    };
    c.interface_debounce = Duration::from_millis(cl.interface_debounce_ms);
    c.sync_timeout = Duration::from_millis(cl.sync_timeout_ms);
    c.ccl_port = Some(ccl_port);
    c.publish = Some(publish);
    c.confirm_config = true;
    Membership::new(c).map_err(|e| anyhow::anyhow!("cluster membership: {e}"))
}

/// `cluster:` as the pipeline's `ClusterSpec`; the CCL port is the
/// interface `ccl`.
fn cluster_spec(cl: &config::ClusterConfig, incarnation: u32) -> Result<ClusterSpec> {
    Ok(ClusterSpec {
        node: NodeId(cl.node_id),
        members: initial_members(cl)?,
        cluster_name: cl.name.clone(),
        key: cl.key.expose().to_string(),
        incarnation,
        seq_randomization: cl.tcp_sequence_randomization,
        ccl_iface: config::cluster::CCL_INTERFACE.to_string(),
        peers: cl.peers().map(|m| (NodeId(m.id), m.ccl_address)).collect(),
        random_seed: random_seed(),
        // Fenced until the membership machine grants a lease (the worker
        // applies each `Action::Lease`).
        lease: dataplane::Timestamp::ZERO,
        backups: cl.backups,
        syn_guard: dataplane::pipeline::DEFAULT_SYN_GUARD,
        director_hold: dataplane::pipeline::DEFAULT_DIRECTOR_HOLD,
        director_localization: cl.director_localization,
        site_redundancy: cl.site_redundancy,
    })
}

/// The interfaces' IPv6 addresses and the IPv6 routes (docs/ipv6.md).
fn ipv6_spec(cfg: &Config) -> dataplane::pipeline::Ipv6Spec {
    dataplane::pipeline::Ipv6Spec {
        addresses: cfg.interfaces.iter().filter_map(|i| i.address6.map(|h| (i.name.clone(), h.addr, h.len))).collect(),
        routes: cfg
            .routes6
            .iter()
            .map(|r| dataplane::pipeline::Route6Spec { destination: r.destination.addr, prefix_len: r.destination.len, via: r.via })
            .collect(),
    }
}

fn pipeline_config(cfg: &Config, interfaces: Vec<InterfaceSpec>) -> PipelineConfig {
    PipelineConfig {
        interfaces,
        routes: cfg
            .routes
            .iter()
            .map(|r| RouteSpec { destination: r.destination.addr, prefix_len: r.destination.len, via: r.via })
            .collect(),
        rules: policy::rule_specs(&cfg.access_rules),
        timeouts: policy::timeouts(&cfg.timeouts),
        flow_capacity: cfg.flow_table.capacity as usize,
        arp_capacity: cfg.arp.capacity as usize,
        arp_timeout: Duration::from_secs(cfg.arp.timeout),
        arp_retry: Duration::from_secs(cfg.arp.retry),
        static_neighbors: cfg.neighbors.iter().map(|n| (n.address, n.mac.0)).collect(),
        icmp_errors: dataplane::pipeline::IcmpErrorConfig {
            rate: cfg.icmp_errors.rate,
            burst: cfg.icmp_errors.burst,
            admin_prohibited: cfg.icmp_errors.unreachable_on_deny,
        },
        cluster: None,
    }
}

pub fn fmt_mac(m: [u8; 6]) -> String {
    format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
}
