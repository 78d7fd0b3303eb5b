//! The control thread: drives the CCL control endpoint (membership),
//! serves the control socket and asks the worker for snapshots through the
//! lock-free query queue.
//!
//! Invariant: the control thread never touches the worker's state directly;
//! it sends a [`Query`] and waits (bounded) for the [`Reply`], or sends a
//! command (`Query::SetMembers`) and waits for nothing. Its time is the
//! node's [`Clock`], the worker's time base. Port counters are read from
//! DPDK (`rte_eth_stats_get`), which is safe beside a polling worker.
//!
//! The connection-limit estimate and its views are in `limits`, the
//! Prometheus exposition in `metrics`.

use crate::ccl::CclControl;
use crate::clock::Clock;
use crate::policy::{Follow, Policies, Reload};
use crate::shared::{fan_out, offer_commands, push_command, Query, Reply, Shared};
use dataplane::ccl::MessageKind;
use anyhow::{Context, Result};
use config::Config;
use controlplane::membership::State;
use controlplane::clusterview::{self, Answer, CLUSTER_CONN_MAX};
use controlplane::mgmt::{Request, Responder, Server, Topic, CLUSTER_ANSWER_TIMEOUT};
use controlplane::stats;
use dpdk_sys::Port;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod limits;
mod metrics;

/// How long the control thread waits for the worker to answer a query.
const WORKER_ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// Most connections `show conn` returns.
const SHOW_CONN_MAX: usize = 10_000;

pub struct Control {
    /// The control socket (`None` only while it is being served).
    server: Option<Server>,
    shared: Arc<Shared>,
    ports: Vec<ControlPort>,
    node_name: String,
    started: Instant,
    /// Cluster mode: the CCL control endpoint (membership) and the
    /// cluster's name.
    ccl: Option<CclControl>,
    cluster_name: Option<String>,
    clock: Clock,
    /// The running policy and where it came from (`crate::policy`).
    policies: Policies,
    /// The configuration file, read again by `config reload`.
    config_path: PathBuf,
    /// Policy commands each worker's queue has not taken yet.
    pending: Vec<VecDeque<Query>>,
    /// The replicated configuration version last confirmed to the
    /// membership machine as running.
    confirmed: Option<u64>,
    /// The export thread's queue (`None`: no exporter configured).
    export: Option<Arc<crate::export::ExportShared>>,
    /// Since when this node's replicated state is behind its control
    /// node's (`Membership::replica_lag` > 0; `None`: caught up).
    behind_since: Option<Instant>,
    /// `cluster show`: the request being asked of the members, and those
    /// waiting their turn (at most `CLUSTER_QUEUE`).
    asking: Option<ClusterAsk>,
    cluster_queue: VecDeque<(ClusterReq, Responder)>,
    /// Cluster-wide connection limits by estimate (L1): the workers' and
    /// the members' counts.
    limits: controlplane::limits::Estimator,
    /// The class ids of each worker's last limit report (what its remote
    /// counts are aligned with; empty: no limits there).
    limit_ids: Vec<Vec<u32>>,
}

/// What a cluster-wide request asks of every member.
#[derive(Clone, Debug)]
enum ClusterReq {
    /// `cluster show TOPIC`.
    Show(Topic),
    /// Start a trace (`clusterview::trace_arg`).
    TraceStart(String),
}

impl ClusterReq {
    /// Its wire topic code and argument.
    fn code(&self) -> Option<(u8, &[u8])> {
        match self {
            ClusterReq::Show(t) => clusterview::topic_code(*t).map(|c| (c, &[][..])),
            ClusterReq::TraceStart(arg) => Some((clusterview::TRACE_START, arg.as_bytes())),
        }
    }
}

/// A cluster-wide request in progress: what it asks, this node's own
/// answer (made when the members were asked), the client.
struct ClusterAsk {
    req: ClusterReq,
    local: Result<Value, String>,
    responder: Responder,
}

/// `cluster show` requests waiting behind the one being asked (each may
/// wait `CLUSTER_ANSWER_TIMEOUT`; more would pass the client's timeout).
const CLUSTER_QUEUE: usize = 1;

impl Control {
    pub fn new(
        cfg: &Config,
        shared: Arc<Shared>,
        ports: Vec<ControlPort>,
        ccl: Option<CclControl>,
        policies: Policies,
        clock: Clock,
        export: Option<Arc<crate::export::ExportShared>>,
    ) -> Result<Control> {
        let server = Server::bind(&cfg.control_socket)
            .with_context(|| format!("binding the control socket {}", cfg.control_socket.display()))?;
        Ok(Control {
            server: Some(server),
            shared: shared.clone(),
            ports,
            node_name: cfg.node.name.clone(),
            started: Instant::now(),
            ccl,
            cluster_name: cfg.cluster.as_ref().map(|c| c.name.clone()),
            clock,
            policies,
            config_path: cfg.source_file.clone(),
            pending: shared.workers.iter().map(|_| VecDeque::new()).collect(),
            confirmed: None,
            export,
            behind_since: None,
            asking: None,
            cluster_queue: VecDeque::new(),
            limits: controlplane::limits::Estimator::new(shared.workers.len()),
            limit_ids: vec![Vec::new(); shared.workers.len()],
        })
    }

    /// One round of the control lcore: the CCL control queue and the
    /// membership machine (cluster mode), a new member set to the worker,
    /// then the control socket. Returns the CCL frames passed on to the
    /// worker (the caller polls faster while there are some).
    pub fn poll(&mut self) -> usize {
        let now = self.clock.now();
        let handled = match &mut self.ccl {
            Some(c) => {
                // Dynamic NAT: the workers' requests for the control node.
                let reqs = self.shared.workers.iter().flat_map(|w| std::iter::from_fn(|| w.xlate_requests.pop()));
                c.request_xlates(now, reqs.collect::<Vec<_>>());
                let ran = self.shared.workers.iter().map(|w| w.loop_ns.load(Ordering::Relaxed)).min().unwrap_or(0);
                c.poll(now, dataplane::Timestamp(ran))
            }
            None => 0,
        };
        self.follow_policy(now);
        // Replication lag: since when this node is behind.
        if let Some(c) = &self.ccl {
            let behind = c.membership.replica_lag().is_some_and(|l| l > 0);
            match (behind, self.behind_since) {
                (true, None) => self.behind_since = Some(Instant::now()),
                (false, Some(_)) => self.behind_since = None,
                _ => {}
            }
        }
        // Membership events to the syslog exporter.
        if let (Some(c), Some(x)) = (&mut self.ccl, &self.export) {
            for e in c.take_events() {
                let (severity, msgid) = controlplane::syslog::cluster_event(&e.kind);
                x.push(crate::export::ExportEvent::Syslog { severity, msgid, text: e.text });
            }
        }
        // Member sets and resets: to every worker, in order, behind what
        // each has pending (`fan_out`).
        if let Some(c) = &mut self.ccl {
            fan_out(&mut c.pending, &mut self.pending);
        }
        for (w, pending) in self.shared.workers.iter().zip(&mut self.pending) {
            offer_commands(&w.queries, pending);
        }
        self.estimate_limits(now);
        // Members' cluster-wide queries: this node's answers.
        self.answer_queries(now);
        if let Some(mut server) = self.server.take() {
            let (mut asks, mut later) = (Vec::new(), Vec::new());
            server.poll_deferred(
                now,
                |req| match req {
                    Request::Show { topic } => Some(self.show(*topic)),
                    Request::ConfigReload => Some(self.reload()),
                    Request::ClusterShow { topic } => match (&self.ccl, clusterview::topic_code(*topic)) {
                        (None, _) => Some(Err("no cluster configured: this node runs alone (no `cluster:` section)".into())),
                        (_, None) => Some(Err(format!("{} is not asked across the cluster", topic.as_str()))),
                        _ => {
                            asks.push(ClusterReq::Show(*topic));
                            None
                        }
                    },
                    Request::TraceStart { filter, secs } => {
                        let arg = clusterview::trace_arg(*secs, filter);
                        match clusterview::parse_trace_arg(arg.as_bytes()) {
                            Err(e) => Some(Err(e)),
                            // Alone: started here, answered now.
                            Ok(_) if self.ccl.is_none() => Some(self.trace_start(arg.as_bytes())),
                            Ok(_) if arg.len() > dataplane::ccl::QUERY_ARG_MAX => {
                                Some(Err(format!("trace filter {filter:?}: too long for the CCL (at most {} bytes with the seconds)", dataplane::ccl::QUERY_ARG_MAX)))
                            }
                            Ok(_) => {
                                asks.push(ClusterReq::TraceStart(arg));
                                None
                            }
                        }
                    }
                },
                &mut later,
            );
            self.server = Some(server);
            for (req, r) in asks.into_iter().zip(later) {
                if self.cluster_queue.len() > CLUSTER_QUEUE {
                    r.answer(Err("busy: other cluster-wide requests are waiting; try again".into()));
                } else {
                    self.cluster_queue.push_back((req, r));
                }
            }
        }
        self.cluster_show_round();
        handled
    }

    /// Render this node's answers to the members' cluster-wide queries.
    fn answer_queries(&mut self, now: dataplane::Timestamp) {
        let Some(c) = &mut self.ccl else { return };
        for q in c.take_queries() {
            let r = match clusterview::topic_of(q.topic) {
                Some(t) => self.show_max(t, CLUSTER_CONN_MAX),
                None if q.topic == clusterview::TRACE_START => self.trace_start(&q.arg),
                None => Err(format!("query topic {} unknown to this node", q.topic)),
            };
            let bytes = clusterview::encode_answer(r);
            if let Some(c) = &mut self.ccl {
                c.answer_query(now, q, bytes);
            }
        }
    }

    /// `cluster show`: answer the request being asked once the members
    /// answered (or the deadline passed), then ask the next one.
    fn cluster_show_round(&mut self) {
        let Some(c) = &mut self.ccl else { return };
        let now = self.clock.now();
        let timeout = dataplane::Duration::from_millis(CLUSTER_ANSWER_TIMEOUT.as_millis() as u64);
        if self.asking.is_some() {
            let Some(got) = c.membership.poll_answers(now, timeout) else { return };
            let Some(a) = self.asking.take() else { return };
            let members: Vec<clusterview::Member> = c
                .membership
                .snapshot(now)
                .into_iter()
                .map(|v| {
                    let answer = if v.this_node {
                        Answer::of(&a.local)
                    } else if let Some((_, b)) = got.answers.iter().find(|(n, _)| *n == v.id) {
                        Answer::decode(b)
                    } else if got.aborted.contains(&v.id) {
                        Answer::Bad
                    } else {
                        Answer::Missing
                    };
                    clusterview::Member { id: v.id, name: v.name, this_node: v.this_node, answer }
                })
                .collect();
            let merged = match a.req {
                ClusterReq::Show(topic) => clusterview::merge(topic, &members),
                ClusterReq::TraceStart(_) => clusterview::merge_trace_start(&members),
            };
            a.responder.answer(Ok(merged));
        }
        if let Some((req, responder)) = self.cluster_queue.pop_front() {
            // This node's own answer first: the members answer as of now too.
            let local = match &req {
                ClusterReq::Show(topic) => self.show_max(*topic, CLUSTER_CONN_MAX),
                ClusterReq::TraceStart(arg) => self.trace_start(arg.as_bytes()),
            };
            let asked = match (&mut self.ccl, req.code()) {
                (Some(c), Some((code, arg))) => c.ask(now, code, arg).is_some(),
                _ => false,
            };
            if asked {
                self.asking = Some(ClusterAsk { req, local, responder });
            } else {
                responder.answer(Err(format!("{req:?} cannot be asked across the cluster")));
            }
        }
    }

    /// Start a trace on every worker (`clusterview::trace_arg`'s
    /// argument): its filter and end.
    fn trace_start(&self, arg: &[u8]) -> Result<Value, String> {
        let (secs, filter) = clusterview::parse_trace_arg(arg)?;
        let until = dataplane::Timestamp(self.clock.now().0 + secs * 1_000_000_000);
        self.ask_all(|| Query::TraceStart { filter, until })?;
        Ok(json!({ "node": self.node_name, "filter": filter.to_string(), "secs": secs, "workers": self.shared.workers.len() }))
    }

    /// `show trace`: every worker's events in time order, times as Unix
    /// nanoseconds (comparable across the members as their clocks are).
    fn show_trace(&self) -> Result<Value, String> {
        use dataplane::pipeline::trace::{TraceFrom, TraceVerdict};
        let now = self.clock.now();
        let unix_at_zero = self.clock.origin_unix_ns();
        let port_name = |p: dataplane::PortId| -> String {
            match self.ports.iter().find(|x| x.port.id() == p.0) {
                Some(c) => c.interfaces.clone(),
                None => "ccl".into(),
            }
        };
        let names: HashMap<u8, String> =
            self.ccl.as_ref().map(|c| c.membership.snapshot(now)).unwrap_or_default().into_iter().map(|v| (v.id.0, v.name)).collect();
        let node_name = |n: dataplane::NodeId| -> String { names.get(&n.0).cloned().unwrap_or_else(|| format!("node {}", n.0)) };
        let (mut filter, mut until, mut lost, mut events) = (None, None, 0, Vec::new());
        for r in self.ask_all(|| Query::Trace)? {
            let Reply::Traced(t) = r else { return Err("unexpected reply".into()) };
            if let Some(t) = t {
                let (f, u, ev, l) = *t;
                (filter, until, lost) = (Some(f), Some(u), lost + l);
                events.extend(ev);
            }
        }
        events.sort_by_key(|e| e.at);
        let rows: Vec<Value> = events
            .iter()
            .map(|e| {
                let from = match e.from {
                    TraceFrom::Port(p) => format!("port {}", port_name(p)),
                    TraceFrom::Member(n) => node_name(n),
                    TraceFrom::Parked => "parked here".into(),
                    TraceFrom::Handoff(p) => format!("port {} via another worker", port_name(p)),
                };
                let verdict = match e.verdict {
                    TraceVerdict::Port(p) => format!("out {}", port_name(p)),
                    TraceVerdict::Member(n) => format!("to {}", node_name(n)),
                    TraceVerdict::Drop(r) => format!("drop {}", r.as_str()),
                    TraceVerdict::Kept => "kept".into(),
                    TraceVerdict::Worker(w) => format!("worker {}", w.0),
                };
                json!({
                    "unix_ns": e.at.0 + unix_at_zero,
                    "worker": e.worker.0,
                    "tuple": e.tuple,
                    "flags": dataplane::pipeline::trace::flag_letters(e.tcp_flags),
                    "len": e.len,
                    "from": from,
                    "role": e.role.map(|(r, _)| r),
                    "owner": e.role.map(|(_, o)| node_name(o)),
                    "verdict": verdict,
                })
            })
            .collect();
        Ok(json!({
            "filter": filter.map(|f| f.to_string()),
            "active": until.is_some_and(|u| now < u),
            "ends_in_ms": until.map(|u| u.0.saturating_sub(now.0) / 1_000_000),
            "lost": lost,
            "events": rows,
        }))
    }

    /// Cluster mode: run the replicated configuration the membership
    /// machine holds (or leave the cluster if this node cannot), and
    /// confirm to the machine the version the worker runs.
    fn follow_policy(&mut self, now: dataplane::Timestamp) {
        let Some(c) = &mut self.ccl else { return };
        if c.take_replica_change() {
            match self.policies.follow(c.membership.config()) {
                Follow::Unchanged => {}
                Follow::Apply { generation, policies } => {
                    let r = &self.policies.running;
                    log::info!(
                        "policy: running the {} ({} rules{})",
                        r.source.replace("replicated", "replicated configuration"),
                        r.policy.access_rules.len(),
                        if self.policies.same_as_file() { ", as in this node's file" } else { ", not this node's file's" }
                    );
                    send_policies(&mut self.pending, generation, policies);
                    export_rules(&self.export, &self.policies);
                }
                Follow::Reject { version, why } => {
                    log::error!("policy: cannot run the replicated configuration v{version}: {why}; leaving the cluster");
                    export_config_error(&self.export, format!(
                        "cannot run the replicated configuration v{version}: {why}; leaving the cluster"
                    ));
                    c.reject_config(now, version);
                }
            }
        }
        let version = self.policies.running.version;
        if policy_applied(&self.shared) == self.policies.sent && self.confirmed != Some(version) {
            self.confirmed = Some(version);
            c.config_applied(now, version);
        }
    }

    /// `config reload`: read the file again and run its policy (a single
    /// node), or publish it to the cluster (the control node only).
    fn reload(&mut self) -> Result<Value, String> {
        let cluster = match &self.ccl {
            None => false,
            Some(c) => {
                let st = c.membership.status();
                if st.state != State::Control {
                    let control = st.control.map_or("none".to_string(), |n| format!("n{}", n.0));
                    return Err(format!(
                        "{} is {} in cluster {}: the cluster's policy (security levels, access rules, timeouts) \
                         comes from the control node ({control}; this node runs {}); reload there",
                        self.node_name,
                        st.state.as_str(),
                        self.cluster_name.as_deref().unwrap_or(""),
                        self.policies.running.source
                    ));
                }
                true
            }
        };
        let path = self.config_path.clone();
        let outcome = match self.policies.reload(&path, cluster) {
            Ok(o) => o,
            Err(e) => {
                let e = format!("{e:#}");
                export_config_error(&self.export, format!("config reload refused: {e}"));
                return Err(e);
            }
        };
        let now = self.clock.now();
        let message = match outcome {
            Reload::Unchanged => format!("{}: the policy is unchanged ({})", path.display(), self.policies.running.source),
            Reload::Apply { generation, policies } => {
                send_policies(&mut self.pending, generation, policies);
                export_rules(&self.export, &self.policies);
                log::info!("policy: reloaded from {}", path.display());
                format!("{}: new policy applied ({} rules)", path.display(), self.policies.running.policy.access_rules.len())
            }
            Reload::Publish(bytes) => {
                let Some(c) = &mut self.ccl else { return Err("no cluster".into()) };
                let v = c.publish_config(now, bytes).map_err(|e| format!("not published: {e}"))?;
                log::info!("policy: {} published as replicated configuration v{v}", path.display());
                self.follow_policy(now);
                format!("{}: published as replicated configuration v{v}; every member runs it within a few heartbeat intervals", path.display())
            }
        };
        Ok(json!({ "message": message, "running": self.running_json() }))
    }

    /// The running policy for `show config` and `config reload`.
    fn running_json(&self) -> Value {
        let p = &self.policies;
        json!({
            "version": p.running.version,
            "source": p.running.source,
            "same_as_file": p.same_as_file(),
            "rules": p.running.policy.access_rules.len(),
            "generation_sent": p.sent,
            "generation_applied": policy_applied(&self.shared),
            "replicated_applied": p.applied,
            "replicated_rejected": p.rejected,
            "reloads": p.reloads,
            "last_error": p.last_error,
            "yaml": p.running.yaml,
        })
    }

    /// How long this node's replicated state has been behind its control
    /// node's (0: caught up).
    fn behind_secs(&self) -> f64 {
        self.behind_since.map_or(0.0, |t| t.elapsed().as_secs_f64())
    }

    /// Every worker's cluster counters (a worker without a cluster stage
    /// has none).
    fn cluster_snapshots(&self) -> Result<Vec<dataplane::pipeline::ClusterCountersSnapshot>, String> {
        let mut snaps = Vec::new();
        for r in self.ask_all(|| Query::Cluster)? {
            let Reply::Cluster(snap) = r else { return Err("unexpected reply".into()) };
            snaps.extend(snap.map(|b| *b));
        }
        Ok(snaps)
    }

    /// `show cluster`: identity, this node's membership state (role,
    /// control node, epoch, readiness, lease), every configured node as
    /// this node sees it (state, priority, last heartbeat, epoch, control
    /// node it follows, readiness), the membership counters, the
    /// pipeline's cluster counters, CCL messages by kind and drops by
    /// reason (worker and control lcore added up), hand-off counters.
    fn show_cluster(&self) -> Result<Value, String> {
        let Some(ccl) = &self.ccl else {
            return Err("no cluster configured: this node runs alone (no `cluster:` section)".into());
        };
        let snaps = self.cluster_snapshots()?;
        let now = self.clock.now();
        let m = &ccl.membership;
        let st = m.status();
        let members: Vec<Value> = m
            .snapshot(now)
            .iter()
            .map(|v| {
                json!({
                    "id": v.id.0,
                    "name": v.name,
                    "ccl_address": v.ccl_address.to_string(),
                    "this_node": v.this_node,
                    "state": v.state.map(|s| s.as_str()),
                    "priority": v.priority,
                    "member": v.member,
                    "ready": v.ready,
                    "epoch": v.epoch.map(|e| e.0),
                    "control_node": v.control.map(|c| c.0),
                    "last_heard_ms": if v.this_node { None } else { v.last_heard_ms() },
                    "heartbeats_rx": v.heartbeats,
                    "longest_gap_ms": v.longest_gap.map(|d| d.0 / 1_000_000),
                    "incarnation": v.incarnation,
                    "site": v.site,
                    "chassis": v.chassis,
                })
            })
            .collect();
        // The CCL messages of the workers and of the control lcore, and
        // the workers' cluster counters, added up; the oldest member set a
        // worker runs (they all get every set, between bursts).
        let mut ccl_counters = ccl.counters();
        let mut counters = Value::Null;
        for s in &snaps {
            ccl_counters.add(&s.ccl);
            stats::add_json(&mut counters, &stats::to_json(&s.counters));
        }
        let worker_epoch = snaps.iter().map(|s| s.epoch).min().unwrap_or(0);
        let worker_epochs: Vec<u64> = snaps.iter().map(|s| s.epoch).collect();
        let kinds: Vec<Value> = MessageKind::ALL
            .iter()
            .map(|&k| json!({ "kind": k.as_str(), "rx": ccl_counters.rx(k), "tx": ccl_counters.tx(k) }))
            .collect();
        let drops = stats::to_json(&ccl_counters)["drops"].take();
        // Frames the workers dropped that `show stats` drops do not count
        // (their datagram or their parking was counted `consumed`), by
        // reason, added up.
        let by_reason = |f: fn(&dataplane::pipeline::ClusterCountersSnapshot) -> &[u64; dataplane::DropReason::COUNT]| {
            let m: serde_json::Map<String, Value> = dataplane::DropReason::ALL
                .iter()
                .map(|d| (d.as_str().to_string(), json!(snaps.iter().map(|s| f(s)[d.index()]).sum::<u64>())))
                .collect();
            Value::Object(m)
        };
        let (batch_drops, release_drops) = (by_reason(|s| &s.batch_drops), by_reason(|s| &s.release_drops));
        let sh = &self.shared.ccl;
        let lease_left_ms = st.lease.nanos().saturating_sub(now.nanos()) / 1_000_000;
        let mut v = json!({
            "cluster": self.cluster_name,
            "node": self.node_name,
            "node_id": m.me().0,
            "state": st.state.as_str(),
            "role": st.state.as_str(),
            "control_node": st.control.map(|c| c.0),
            "control_node_name": st.control.and_then(|c| m.snapshot(now).into_iter().find(|v| v.id == c).map(|v| v.name)),
            "epoch": st.members.epoch().0,
            "member_ids": st.members.iter().map(|n| n.0).collect::<Vec<_>>(),
            "ready": st.ready,
            "data_ports_open": st.ports_open,
            "lease_left_ms": lease_left_ms,
            "data_ports_held_down": ccl.data_ports_held(),
            "rejoin_failures": st.failures,
            "disabled": st.disabled,
            "config_version": st.config_version,
            "state_version": st.state_version,
            // Versions behind the control node's replicated state, and
            // for how long (null on the control node).
            "replica_lag": m.replica_lag().map(|l| json!({
                "versions_behind": l,
                "seconds": self.behind_secs(),
            })),
            "worker_epoch": worker_epoch,
            "worker_epochs": worker_epochs,
            "ccl_queues": ccl.queues(),
            "heartbeat_interval_ms": m.heartbeat_interval().0 / 1_000_000,
            "hold_time_ms": m.hold_time().0 / 1_000_000,
            "members": members,
            "membership": stats::to_json(m.counters()),
            "counters": counters,
            "nat_share": {
                "entries": m.table_iter(controlplane::natshare::NAT_TABLE).count(),
                "counters": ccl.natshare.counters,
                "requests_dropped": self.shared.workers.iter().map(|w| w.xlate_request_drops.load(Ordering::Relaxed)).sum::<u64>(),
            },
            "ccl": kinds,
            "ccl_drops": drops,
            "driver": {
                "control_frames_sent": ccl.frames_sent,
                "control_send_failures": ccl.send_failures,
                "commands_pending": ccl.pending.len(),
                "data_ports_shut": ccl.ports_shut,
                "data_ports_opened": ccl.ports_opened,
                "to_worker_frames": sh.to_worker_frames.load(Ordering::Relaxed),
                "to_worker_drops": sh.to_worker_drops.load(Ordering::Relaxed),
                "to_control_frames": sh.to_control_frames.load(Ordering::Relaxed),
                "to_control_drops": sh.to_control_drops.load(Ordering::Relaxed),
                "tx_via_worker_drops": sh.tx_via_worker_drops.load(Ordering::Relaxed),
            },
        });
        v["batch_drops"] = batch_drops;
        v["release_drops"] = release_drops;
        Ok(v)
    }

    /// `show cluster-history`: every membership transition this node saw,
    /// oldest first, with its time (ms since this node started, and ago).
    fn show_cluster_history(&self) -> Result<Value, String> {
        let Some(ccl) = &self.ccl else {
            return Err("no cluster configured: this node runs alone (no `cluster:` section)".into());
        };
        let now = self.clock.now();
        let events: Vec<Value> = ccl
            .membership
            .history()
            .map(|e| {
                json!({
                    "at_ms": e.at.nanos() / 1_000_000,
                    "ago_ms": now.nanos().saturating_sub(e.at.nanos()) / 1_000_000,
                    "event": e.text,
                })
            })
            .collect();
        Ok(json!({ "node": self.node_name, "now_ms": now.nanos() / 1_000_000, "events": events }))
    }

    /// Ask worker 0 (what every worker knows alike: routes, the cluster
    /// of a one-worker cluster node).
    fn ask(&self, q: Query) -> Result<Reply, String> {
        self.ask_worker(0, q)
    }

    /// Ask every worker, in worker order.
    fn ask_all(&self, q: impl Fn() -> Query) -> Result<Vec<Reply>, String> {
        (0..self.shared.workers.len()).map(|w| self.ask_worker(w, q())).collect()
    }

    fn ask_worker(&self, w: usize, q: Query) -> Result<Reply, String> {
        let ws = self.shared.workers.get(w).ok_or("no such worker")?;
        while ws.replies.pop().is_some() {} // stale answers of timed-out queries
        ws.queries.push(q).map_err(|_| format!("worker {w}: query queue full"))?;
        let deadline = Instant::now() + WORKER_ANSWER_TIMEOUT;
        loop {
            if let Some(r) = ws.replies.pop() {
                return Ok(r);
            }
            if Instant::now() > deadline {
                return Err(format!("worker {w} did not answer in time"));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn show(&self, topic: Topic) -> Result<Value, String> {
        self.show_max(topic, SHOW_CONN_MAX)
    }

    /// `show topic`, at most `conn_max` connections.
    fn show_max(&self, topic: Topic, conn_max: usize) -> Result<Value, String> {
        let enc = |v: serde_json::Result<Value>| v.map_err(|e| e.to_string());
        match topic {
            Topic::Trace => self.show_trace(),
            Topic::Stats => {
                // Every worker's counters, added up (a gauge too: flows,
                // memory), and each worker's own under "workers".
                let mut counters = Value::Null;
                let mut per_worker = Vec::new();
                for (w, r) in self.ask_all(|| Query::Counters)?.into_iter().enumerate() {
                    let Reply::Counters(c, frag) = r else { return Err("unexpected reply".into()) };
                    let mut v = stats::to_json(&*c);
                    if let Value::Object(m) = &mut v {
                        m.insert("fragments".into(), stats::to_json(&*frag));
                    }
                    stats::add_json(&mut counters, &v);
                    if let (Value::Object(m), Value::Object(d)) =
                        (&mut v, stats::to_json(&self.shared.workers[w].driver_counters()))
                    {
                        m.insert("worker".into(), json!(w));
                        m.extend(d);
                    }
                    per_worker.push(v);
                }
                let port_counter = |i: usize, k: &str| -> u64 {
                    counters["ports"][i][k].as_u64().unwrap_or(0)
                };
                let rings = dpdk_sys::afpacket::ring_totals();
                let ports: Vec<Value> = self
                    .ports
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (p, (port_counter(i, "rx_packets"), port_counter(i, "tx_packets"))))
                    .map(|(c, fw)| match c.port.stats() {
                        Ok(s) => {
                            let mut row = json!({ "name": c.interfaces, "device": c.device, "port": c.port.id() });
                            if let (Value::Object(m), Value::Object(n)) = (&mut row, stats::to_json(&NicStats(s, c.ring_drops(&rings)))) {
                                m.extend(n);
                                m.insert("pipeline_rx_packets".into(), json!(fw.0));
                                m.insert("pipeline_tx_packets".into(), json!(fw.1));
                                if let Some(i) = &c.ring_iface {
                                    m.insert("kernel_interface".into(), json!(i));
                                }
                            }
                            row
                        }
                        Err(e) => json!({ "name": c.interfaces, "device": c.device, "port": c.port.id(), "error": e.to_string() }),
                    })
                    .collect();
                let sum = |f: fn(&crate::shared::WorkerShared) -> u64| -> u64 { self.shared.workers.iter().map(f).sum() };
                if let Value::Object(m) = &mut counters {
                    m.insert("node".into(), json!(self.node_name));
                    m.insert("uptime_s".into(), json!(self.started.elapsed().as_secs()));
                    m.insert("tx_full_drops".into(), json!(sum(|w| w.tx_full_drops.load(Ordering::Relaxed))));
                    m.insert("steered_out".into(), json!(sum(|w| w.steered_out.load(Ordering::Relaxed))));
                    m.insert("handoff_drops".into(), json!(sum(|w| w.handoff_drops.load(Ordering::Relaxed))));
                    m.insert("ports".into(), Value::Array(ports));
                    if let Some(x) = &self.export {
                        m.insert("export".into(), stats::to_json(&x.stats(&self.shared)));
                    }
                    m.insert("workers".into(), Value::Array(per_worker));
                }
                Ok(counters)
            }
            Topic::Conn => {
                // Each worker's connections, marked with the worker.
                let (mut all, mut total) = (Vec::new(), 0);
                for (w, r) in self.ask_all(|| Query::Conns { max: conn_max })?.into_iter().enumerate() {
                    let Reply::Conns(conns, n) = r else { return Err("unexpected reply".into()) };
                    total += n;
                    for c in conns.into_iter().take(conn_max.saturating_sub(all.len())) {
                        let mut v = enc(serde_json::to_value(c))?;
                        if let Value::Object(m) = &mut v {
                            m.insert("worker".into(), json!(w));
                        }
                        all.push(v);
                    }
                }
                Ok(json!({ "total": total, "shown": all.len(), "connections": all }))
            }
            Topic::Route => {
                let Reply::Routes(r) = self.ask(Query::Routes)? else { return Err("unexpected reply".into()) };
                Ok(json!({ "routes": enc(serde_json::to_value(r))? }))
            }
            Topic::Arp => {
                // Each worker keeps its own cache: one row per address, a
                // resolved one first.
                let mut rows = Vec::new();
                for r in self.ask_all(|| Query::Arp)? {
                    let Reply::Arp(a) = r else { return Err("unexpected reply".into()) };
                    merge_neighbours(&mut rows, a);
                }
                Ok(json!({ "arp": enc(serde_json::to_value(rows))? }))
            }
            Topic::Nd => {
                // As `arp`: one row per address, a resolved one first.
                let mut rows = Vec::new();
                for r in self.ask_all(|| Query::Nd)? {
                    let Reply::Nd(a) = r else { return Err("unexpected reply".into()) };
                    merge_neighbours(&mut rows, a);
                }
                Ok(json!({ "nd": enc(serde_json::to_value(rows))? }))
            }
            Topic::Rules => {
                // The same rules on every worker: hits added up.
                let mut rules: Vec<dataplane::acl::RuleInfo> = Vec::new();
                for r in self.ask_all(|| Query::Rules)? {
                    let Reply::Rules(r) = r else { return Err("unexpected reply".into()) };
                    if rules.is_empty() {
                        rules = r;
                    } else {
                        for (a, b) in rules.iter_mut().zip(r) {
                            a.hits += b.hits;
                        }
                    }
                }
                Ok(json!({ "rules": enc(serde_json::to_value(rules))? }))
            }
            Topic::Config => {
                let file = self.policies.file();
                let parsed = serde_json::to_value(file).unwrap_or(Value::Null);
                Ok(json!({ "yaml": file.source_text, "parsed": parsed, "policy": self.running_json() }))
            }
            Topic::Cluster => self.show_cluster(),
            Topic::Metrics => self.metrics().map(Value::String),
            Topic::NatPool => {
                // Each worker's share of each pool, named as in the file.
                let names: Vec<String> = self.policies.file().nat.pools.iter().map(|p| p.name.clone()).collect();
                let mut rows = Vec::new();
                for (w, r) in self.ask_all(|| Query::NatPools)?.into_iter().enumerate() {
                    let Reply::NatPools(pools) = r else { return Err("unexpected reply".into()) };
                    for p in pools {
                        let name = names.get(usize::from(p.pool)).cloned().unwrap_or_default();
                        let mut v = enc(serde_json::to_value(p))?;
                        if let Value::Object(m) = &mut v {
                            m.insert("name".into(), json!(name));
                            m.insert("worker".into(), json!(w));
                        }
                        rows.push(v);
                    }
                }
                Ok(json!({ "pools": rows }))
            }
            Topic::Xlate => {
                let (mut all, mut counters) = (Vec::new(), None);
                for (w, r) in self.ask_all(|| Query::Xlates { max: SHOW_CONN_MAX })?.into_iter().enumerate() {
                    let Reply::Xlates(x, c) = r else { return Err("unexpected reply".into()) };
                    for e in x.into_iter().take(SHOW_CONN_MAX.saturating_sub(all.len())) {
                        let mut v = enc(serde_json::to_value(e))?;
                        if let Value::Object(m) = &mut v {
                            m.insert("worker".into(), json!(w));
                        }
                        all.push(v);
                    }
                    // The node's counters: its workers' summed.
                    counters = match (counters, c) {
                        (Some(mut a), Some(b)) => {
                            a += b;
                            Some(a)
                        }
                        (a, b) => a.or(b),
                    };
                }
                Ok(json!({ "nat": counters.is_some(), "xlates": merge_replicas(all), "counters": enc(serde_json::to_value(counters))? }))
            }
            Topic::ClusterHistory => self.show_cluster_history(),
            Topic::Limits => self.show_limits(),
            Topic::ConnCount => self.show_conn_count(),
        }
    }

}

/// A port's own counters (DPDK `rte_eth_stats`) as `show stats` names
/// them (`rx_missed`: no receive descriptor free, `rx_nombuf`: no mbuf),
/// for its JSON and the metrics (`clusterfw_nic_*`), and on an af_packet
/// port `rx_ring_drops`: frames the kernel dropped because the port's
/// receive ring was full (its sockets' `PACKET_STATISTICS`, which the
/// driver does not report; `dpdk_sys::afpacket`).
struct NicStats(dpdk_sys::PortStats, u64);

/// A data port as the control lcore reports it.
pub struct ControlPort {
    /// The names of the interfaces on it, comma-separated.
    pub interfaces: String,
    /// Its DPDK device name (`net_af_packet0`).
    pub device: String,
    pub port: Port,
    /// The kernel interface of an af_packet device (its `iface=`).
    pub ring_iface: Option<String>,
}

impl ControlPort {
    /// `device` (as configured, with its arguments) on `port`.
    pub fn new(interfaces: String, name: String, port: Port, device: &str) -> ControlPort {
        let ring_iface = crate::sizing::is_af_packet(device)
            .then(|| crate::sizing::arg(device, "iface").map(str::to_string))
            .flatten();
        ControlPort { interfaces, device: name, port, ring_iface }
    }

    /// The receive-ring drops of its af_packet interface (0 otherwise).
    fn ring_drops(&self, rings: &std::collections::BTreeMap<i32, (u64, u64)>) -> u64 {
        self.ring_iface
            .as_deref()
            .and_then(dpdk_sys::afpacket::ifindex)
            .and_then(|i| rings.get(&i))
            .map_or(0, |t| t.1)
    }
}

impl dataplane::stats::Stats for NicStats {
    fn visit(&self, v: &mut dyn dataplane::stats::Visitor) {
        let s = &self.0;
        for (name, n) in [
            ("rx_packets", s.ipackets),
            ("tx_packets", s.opackets),
            ("rx_bytes", s.ibytes),
            ("tx_bytes", s.obytes),
            ("rx_missed", s.imissed),
            ("rx_errors", s.ierrors),
            ("tx_errors", s.oerrors),
            ("rx_nombuf", s.rx_nombuf),
            ("rx_ring_drops", self.1),
        ] {
            v.counter(name, n);
        }
    }
}

/// The running policy's rule names to the export thread (its records name
/// rules by index).
fn export_rules(export: &Option<Arc<crate::export::ExportShared>>, policies: &Policies) {
    if let Some(x) = export {
        let names = policies.running.policy.access_rules.iter().map(|r| r.name.clone()).collect();
        x.push(crate::export::ExportEvent::Rules(names));
    }
}

/// A refused configuration, to syslog (`config-error`).
fn export_config_error(export: &Option<Arc<crate::export::ExportShared>>, text: String) {
    if let Some(x) = export {
        x.push(crate::export::ExportEvent::Syslog { severity: controlplane::syslog::severity::ERROR, msgid: "config-error", text });
    }
}

/// `show xlate`'s rows with the replicas of the control node's dynamic-NAT
/// table (`sessions: cluster`: every worker of a member holds the whole
/// table, N4) as one row per translation, its `worker` the list of those
/// holding it (`clusterfw-ctl` prints `0/1`):
/// its connections counted over them (`refcnt`), idle since the latest use,
/// as old as the oldest copy, stale only when every copy is. Other rows
/// (each in one worker's table) as they are.
fn merge_replicas(rows: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(rows.len());
    let mut at: HashMap<(Value, Value, Value), usize> = HashMap::new();
    for mut r in rows {
        if r["sessions"] != "cluster" {
            out.push(r);
            continue;
        }
        let key = (r["proto"].clone(), r["real"].clone(), r["mapped"].clone());
        let worker = r["worker"].take();
        match at.get(&key) {
            None => {
                r["worker"] = json!([worker]);
                at.insert(key, out.len());
                out.push(r);
            }
            Some(&i) => {
                let m = &mut out[i];
                let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
                m["refcnt"] = json!(n(m, "refcnt") + n(&r, "refcnt"));
                m["idle_ms"] = json!(n(m, "idle_ms").min(n(&r, "idle_ms")));
                m["age_ms"] = json!(n(m, "age_ms").max(n(&r, "age_ms")));
                m["stale"] = json!(m["stale"] == true && r["stale"] == true);
                if let Some(ws) = m["worker"].as_array_mut() {
                    ws.push(worker);
                }
            }
        }
    }
    out
}

/// One policy to each worker.
fn send_policies(pending: &mut [VecDeque<Query>], generation: u64, policies: Vec<Box<dataplane::pipeline::Policy>>) {
    for (pending, policy) in pending.iter_mut().zip(policies) {
        push_command(pending, Query::SetPolicy { generation, policy });
    }
}

/// The policy generation every worker has applied.
fn policy_applied(shared: &Shared) -> u64 {
    shared.workers.iter().map(|w| w.policy_applied.load(Ordering::Relaxed)).min().unwrap_or(0)
}

/// One worker's neighbour-cache rows into the node's: one row per address
/// and interface, a resolved one over a pending one (`show arp`, `show
/// nd`).
fn merge_neighbours<A: PartialEq>(rows: &mut Vec<dataplane::arp::ArpInfo<A>>, worker: Vec<dataplane::arp::ArpInfo<A>>) {
    for e in worker {
        match rows.iter_mut().find(|x| x.ip == e.ip && x.interface == e.interface) {
            Some(x) if x.mac.is_none() && e.mac.is_some() => *x = e,
            Some(_) => {}
            None => rows.push(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(w: u16, sessions: &str, real: &str, refcnt: u64, idle: u64, age: u64, stale: bool) -> Value {
        json!({ "proto": "any", "real": real, "mapped": "198.51.100.7", "sessions": sessions,
                "refcnt": refcnt, "idle_ms": idle, "age_ms": age, "stale": stale, "worker": w })
    }

    #[test]
    fn replicas_of_the_cluster_table_are_one_row_and_other_rows_stay() {
        let rows = vec![
            row(0, "cluster", "10.0.0.2", 1, 50, 900, true),
            row(0, "per-session", "10.0.0.9", 1, 5, 5, false),
            row(1, "cluster", "10.0.0.2", 2, 20, 800, false),
            row(1, "cluster", "10.0.0.3", 0, 70, 70, true),
            row(1, "per-session", "10.0.0.9", 1, 6, 6, false),
        ];
        let out = merge_replicas(rows);
        assert_eq!(out.len(), 4, "{out:?}");
        let a = &out[0];
        assert_eq!((a["real"].as_str(), a["worker"].clone()), (Some("10.0.0.2"), json!([0, 1])));
        assert_eq!((a["refcnt"].as_u64(), a["idle_ms"].as_u64(), a["age_ms"].as_u64()), (Some(3), Some(20), Some(900)));
        assert_eq!(a["stale"], json!(false));
        assert_eq!(out[2]["worker"], json!([1]));
        assert_eq!(out[2]["stale"], json!(true));
        // Each worker's own translations keep their worker.
        assert_eq!((out[1]["worker"].clone(), out[3]["worker"].clone()), (json!(0), json!(1)));
    }
}
