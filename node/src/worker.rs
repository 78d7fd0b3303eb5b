//! The worker lcore: run-to-completion poll loop over the data ports.
//!
//! Shape (DPDK `l3fwd`): for each port, receive a burst, run every packet
//! through the sans-IO [`Pipeline`], queue it on the egress port's TX burst,
//! then flush all TX bursts. Dropped mbufs are collected and freed in one
//! batch. The loop takes no lock and allocates nothing per packet; the only
//! shared state is the stop flag and the bounded lock-free query queues that
//! the control thread uses to ask for snapshots and to send commands (a new
//! member set), both taken between bursts by [`between_bursts`].
//!
//! Cluster mode: the CCL port is one more port; the worker polls its
//! queue 0, runs the frames through `Pipeline::process` like any other
//! (forwarded packets, queries, flow records come out as `Forward` or
//! `Consumed`), takes the CCL frames the control lcore received on its
//! queue from a lock-free queue, hands control-channel frames (heartbeats)
//! the other way (`crate::ccl`), and calls `Pipeline::flush` once per loop
//! so flow records go out batched per burst.
//!
//! Idle back-off (SPEC P4): after a few empty polls the worker sleeps, with
//! the sleep doubling up to `idle_sleep_us`, and up to 1 ms once the node has
//! been silent for about two seconds, so several nodes can share two cores;
//! one packet of data-plane work resets it to busy polling (a heartbeat
//! passed on to the control lcore does not).

use crate::clock::Clock;
use crate::shared::{Handoff, Query, Reply, Shared, WorkerShared};
use dataplane::buf::PacketBuf;
use dataplane::pipeline::{NatPlan, Pipeline, Verdict};
use dataplane::steer::{steer_ccl, steer_nat, Steer};
use dataplane::{PortId, Timestamp, WorkerId};
use dpdk_sys::{Mbuf, MbufBurst, Mempool, Port, RingConsumer};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Empty polls before the first sleep.
const SPIN_POLLS: u32 = 64;
/// Empty polls (each ≥ 1 sleep) after which the node counts as deeply idle
/// and sleeps up to `DEEP_IDLE_SLEEP_US` (about 2 s of silence at 200 µs).
const DEEP_IDLE_POLLS: u32 = 10_000;
const DEEP_IDLE_SLEEP_US: u32 = 1_000;
/// The second gratuitous ARP after the data ports came up.
const ANNOUNCE_AGAIN_NS: u64 = 20_000_000;
/// How often timers (flow expiry, ARP aging) run.
const TIMER_PERIOD_NS: u64 = 1_000_000;

/// Clients a worker lists for `show limits` at most (its largest counts).
pub const SHOW_LIMIT_CLIENTS: usize = 64;

/// The pipeline's view of one mbuf.
struct MbufBuf<'a>(&'a mut Mbuf);

impl PacketBuf for MbufBuf<'_> {
    fn data(&self) -> &[u8] {
        self.0.data()
    }
    fn data_mut(&mut self) -> &mut [u8] {
        self.0.data_mut()
    }
    fn prepend(&mut self, n: usize) -> bool {
        u16::try_from(n).ok().and_then(|n| self.0.prepend(n)).is_some()
    }
    fn trim_front(&mut self, n: usize) -> bool {
        u16::try_from(n).map(|n| self.0.adj(n)).unwrap_or(false)
    }
    fn append(&mut self, n: usize) -> bool {
        u16::try_from(n).ok().and_then(|n| self.0.append(n)).is_some()
    }
    fn trim_back(&mut self, n: usize) -> bool {
        u16::try_from(n).map(|n| self.0.trim(n)).unwrap_or(false)
    }
}

pub struct Worker {
    pub pipeline: Pipeline,
    pub ports: Vec<Port>,
    pub pool: Arc<Mempool>,
    pub shared: Arc<Shared>,
    pub clock: Clock,
    pub idle_sleep_us: u32,
    /// Index in `ports` of the CCL port (cluster mode). The worker polls
    /// its queue 0; control-channel frames go to the control lcore, and
    /// the control lcore passes on what it received for the worker
    /// (`crate::ccl`).
    pub ccl_port: Option<usize>,
    /// This worker, of `workers` (`dpdk.workers`).
    pub me: WorkerId,
    pub workers: u16,
    /// Per port: the RX queue this worker polls (`None`: the port has
    /// fewer RX queues than workers; frames reach this worker through the
    /// others' steering). The TX queue of this worker is `me` on every
    /// port.
    pub rx_queues: Vec<Option<u16>>,
    /// The consuming end of this worker's steering ring (`None` with one
    /// worker): what the others received for it.
    pub steered_in: Option<RingConsumer>,
    /// The NAT plan the workers share: frames to mapped addresses are
    /// steered where their translation is (`steer_nat`).
    pub nat: Option<Arc<NatPlan>>,
}

/// TX bursts per port, the batch of mbufs to free, and the drop and
/// handoff counts (published in `WorkerShared` once per timer tick, not
/// per frame): what handling one received frame may touch.
struct Out {
    tx: Vec<MbufBurst>,
    dead: MbufBurst,
    tx_full_drops: u64,
    /// Frames steered to their worker on receipt, handed on by the
    /// pipeline (fragments), lost because the other's ring was full.
    steered_out: u64,
    handed_out: u64,
    handoff_drops: u64,
    /// This worker's TX queue on every port.
    txq: u16,
    /// Per worker: the frames received here that it decides, sent in one
    /// enqueue per burst (`flush_steered`).
    steer: Vec<MbufBurst<STEER_BURST>>,
}

/// Frames steered to one worker per ring enqueue at most.
const STEER_BURST: usize = 32;

impl Out {
    /// Queue `m` on port `out`'s TX burst (flushing a full burst first).
    fn send(&mut self, ports: &[Port], out: usize, m: Mbuf) {
        let txq = self.txq;
        let Some(q) = self.tx.get_mut(out) else {
            push_dead(&mut self.dead, m);
            return;
        };
        if let Err(m) = q.push(m) {
            // Flush a full TX burst and retry once.
            flush(&ports[out], txq, q, &mut self.tx_full_drops);
            if let Err(m) = q.push(m) {
                self.tx_full_drops += 1;
                push_dead(&mut self.dead, m);
            }
        }
    }
}

impl Worker {
    pub fn run(mut self) -> i32 {
        let nports = self.ports.len();
        let mut rx = MbufBurst::new();
        let mut out = Out {
            tx: (0..nports).map(|_| MbufBurst::new()).collect(),
            dead: MbufBurst::new(),
            tx_full_drops: 0,
            steered_out: 0,
            handed_out: 0,
            handoff_drops: 0,
            txq: self.me.0,
            steer: (0..self.workers).map(|_| MbufBurst::empty()).collect(),
        };
        let mut steered_in = self.steered_in.take();
        let mut empty_polls = 0u32;
        let mut sleep_us = 1u32;
        let mut next_timer = 0u64;
        let mut next_limit_report = 0u64;
        let mut burst_times = crate::shared::BurstTimes::default();
        let ccl = self.shared.ccl.clone();
        let shared = self.shared.clone();
        let mine = &shared.workers[usize::from(self.me.0)];
        // The lease applied (cluster mode; the pipeline starts fenced at 0)
        // and the epoch of the member set applied (its sync progress is
        // published for the membership machine).
        let mut lease = 0u64;
        let mut epoch = dataplane::Epoch(0);
        // Gratuitous ARPs when the data ports came up, once at once and
        // once `ANNOUNCE_AGAIN_NS` later: on af_packet the first frame sent
        // after the kernel interface came back up waits in the TX ring
        // until the next send, so the second announcement pushes it out.
        let mut announced = 0u64;
        let mut announce_again = None;
        let lcore = dpdk_sys::eal::lcore_id();
        log::info!(
            "worker {} of {} started on {} with {} ports{}",
            self.me.0,
            self.workers,
            if lcore == u32::MAX { "a thread".to_string() } else { format!("lcore {lcore}") },
            nports,
            match self.ccl_port {
                Some(p) => format!(" (CCL: port index {p})"),
                None => String::new(),
            }
        );
        while !self.shared.stop.load(Ordering::Relaxed) {
            let now = self.clock.now();
            let mut received = 0;
            if self.ccl_port.is_some() {
                mine.loop_ns.store(now.nanos(), Ordering::Relaxed);
                let l = ccl.lease_ns.load(Ordering::Relaxed);
                if l != lease {
                    lease = l;
                    self.pipeline.set_lease(Timestamp(l));
                }
            }
            // What the other workers passed to this one first: they
            // received it before this poll, and a flow whose frames come
            // both ways (af_packet's fanout rolls over to another queue
            // when one is full) stays in order more often.
            if let Some(ring) = steered_in.as_mut() {
                if ring.dequeue_burst(&mut rx) > 0 {
                    received += rx.len();
                    self.pipeline.prefetch_burst(rx.as_slice().iter().map(|m| m.data()));
                    for m in rx.drain() {
                        let in_port = PortId(m.port());
                        self.handle(now, in_port, m, &mut out);
                    }
                }
                for _ in 0..dpdk_sys::BURST_SIZE {
                    let Some(h) = mine.handoff.pop() else { break };
                    received += 1;
                    match h {
                        Handoff::Fragment { mut m, in_port, note } => {
                            let v = self.pipeline.process_handoff(now, in_port, &mut MbufBuf(&mut m), note);
                            self.verdict(v, m, in_port, &mut out);
                        }
                        Handoff::Learn { m, in_port } => {
                            self.pipeline.arp_learn(now, in_port, m.data());
                            push_dead(&mut out.dead, m);
                        }
                    }
                }
            }
            for pi in 0..nports {
                let Some(q) = self.rx_queues.get(pi).copied().flatten() else { continue };
                let port = self.ports[pi];
                let n = port.rx_burst(q, &mut rx);
                received += n;
                let in_port = PortId(pi as u16);
                let is_ccl = self.ccl_port == Some(pi);
                // Start the flow-table loads of the whole burst first.
                self.pipeline.prefetch_burst(rx.as_slice().iter().map(|m| m.data()));
                for m in rx.drain() {
                    if is_ccl && crate::ccl::is_control_frame(m.data()) {
                        // The control lcore's (heartbeats): hand over. Not
                        // work for this worker: a heartbeat every interval
                        // must not keep an idle worker from backing off.
                        received -= 1;
                        match ccl.to_control.push(m) {
                            Ok(()) => {
                                ccl.to_control_frames.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(m) => {
                                ccl.to_control_drops.fetch_add(1, Ordering::Relaxed);
                                push_dead(&mut out.dead, m);
                            }
                        }
                        continue;
                    }
                    self.steer_or_handle(now, in_port, is_ccl, m, &mut out);
                }
                if self.workers > 1 {
                    self.flush_steered(&mut out);
                }
            }
            if let Some(pi) = self.ccl_port.filter(|_| self.me.0 == 0) {
                // CCL frames the control lcore received on its queue
                // (worker 0 takes them, and passes on the others' as if
                // received on its own queue). All of them
                // (`HANDOFF_DRAIN`): the control lcore hands over up to
                // its ring's worth a round, and the fanout's hash may put
                // a busy peer's stream on that queue.
                for _ in 0..crate::ccl::HANDOFF_DRAIN {
                    let Some(m) = ccl.to_worker.pop() else { break };
                    received += 1;
                    self.steer_or_handle(now, PortId(pi as u16), true, m, &mut out);
                }
                if self.workers > 1 {
                    self.flush_steered(&mut out);
                }
                // Heartbeats of a single-queue CCL port (one worker only).
                while let Some(m) = ccl.tx_via_worker.pop() {
                    out.send(&self.ports, pi, m);
                }
            }
            // Flow records batched during the burst (cluster mode), then the
            // frames the pipeline made (ARP requests, CCL messages), then
            // the fragments it passes to other workers.
            self.pipeline.flush(now);
            let pool = &self.pool;
            let ports = &self.ports;
            self.pipeline.drain_generated(|port, bytes| {
                let Some(m) = pool.alloc_from_slice(bytes) else { return };
                out.send(ports, port.0 as usize, m);
            });
            if self.workers > 1 {
                let workers = &shared.workers;
                self.pipeline.drain_handoffs(|w, in_port, note, bytes| {
                    let Some(m) = pool.alloc_from_slice(bytes) else { return };
                    out.handed_out += 1;
                    pass_to(workers, w, Handoff::Fragment { m, in_port, note: *note }, &mut out);
                });
            }
            for (pi, q) in out.tx.iter_mut().enumerate() {
                if !q.is_empty() {
                    flush(&self.ports[pi], out.txq, q, &mut out.tx_full_drops);
                }
            }
            out.dead.clear();
            // A loop that found work: its duration, for the histogram
            // (one clock read per busy loop, none when idle).
            if received > 0 {
                burst_times.record(self.clock.now().nanos().saturating_sub(now.nanos()));
            }

            if now.nanos() >= next_timer {
                self.pipeline.poll_timers(now);
                next_timer = now.nanos() + TIMER_PERIOD_NS;
                mine.tx_full_drops.store(out.tx_full_drops, Ordering::Relaxed);
                mine.steered_out.store(out.steered_out, Ordering::Relaxed);
                mine.handed_out.store(out.handed_out, Ordering::Relaxed);
                mine.handoff_drops.store(out.handoff_drops, Ordering::Relaxed);
                burst_times.publish(mine);
                // Connection limits: this worker's counts for the
                // estimate (`controlplane::limits`).
                if now.nanos() >= next_limit_report {
                    next_limit_report = now.nanos() + controlplane::limits::REPORT_INTERVAL.0;
                    if let Some(l) = self.pipeline.limits() {
                        if let Err(r) = mine.limit_reports.push(l.report()) {
                            let _ = mine.limit_reports.pop();
                            let _ = mine.limit_reports.push(r);
                        }
                    }
                }
                if self.ccl_port.is_some() {
                    if let Some(s) = ccl.sync.get(usize::from(self.me.0)) {
                        s.store(crate::ccl::pack_sync(&self.pipeline.sync_progress(epoch)), Ordering::Relaxed);
                    }
                    let a = ccl.announce.load(Ordering::Relaxed);
                    if a != announced {
                        announced = a;
                        self.pipeline.announce(now);
                        announce_again = Some(now.nanos() + ANNOUNCE_AGAIN_NS);
                    } else if announce_again.is_some_and(|t| now.nanos() >= t) {
                        announce_again = None;
                        self.pipeline.announce(now);
                    }
                }
            }
            // Dynamic NAT on a cluster member: the requests for the
            // control node, to the control lcore.
            self.pipeline.take_xlate_requests(|r| {
                if mine.xlate_requests.push(r).is_err() {
                    mine.xlate_request_drops.fetch_add(1, Ordering::Relaxed);
                }
            });
            // The flow log (an exporter is configured): its records to
            // the export thread.
            if let Some(q) = mine.flow_records.as_ref().filter(|_| self.pipeline.flow_log_pending() > 0) {
                let mut lost = 0;
                self.pipeline.drain_flow_log(|r| {
                    if q.push(*r).is_err() {
                        lost += 1;
                    }
                });
                if lost > 0 {
                    mine.flow_record_drops.fetch_add(lost, Ordering::Relaxed);
                }
            }
            if let Some(q) = mine.queries.pop() {
                if let Query::SetMembers(m) = &q {
                    epoch = m.epoch();
                }
                let set_policy = matches!(q, Query::SetPolicy { .. });
                let reply = between_bursts(&mut self.pipeline, now, q, mine);
                if set_policy {
                    // New NAT rules: the steering follows this worker's
                    // plan (the pools, hence the block map, are the same).
                    self.nat = self.pipeline.nat_plan();
                }
                if let Some(reply) = reply {
                    // The control thread waits for exactly one reply per
                    // query; a full reply queue means it gave up, so drop
                    // the answer.
                    let _ = mine.replies.push(reply);
                }
            }

            if received == 0 {
                empty_polls = empty_polls.saturating_add(1);
                if empty_polls > SPIN_POLLS {
                    std::thread::sleep(std::time::Duration::from_micros(sleep_us as u64));
                    let cap = if empty_polls > DEEP_IDLE_POLLS {
                        self.idle_sleep_us.max(DEEP_IDLE_SLEEP_US)
                    } else {
                        self.idle_sleep_us
                    };
                    sleep_us = (sleep_us * 2).min(cap.max(1));
                }
            } else {
                empty_polls = 0;
                sleep_us = 1;
            }
        }
        log::info!("worker {} stopping", self.me.0);
        0
    }

    /// Runs one received frame through the pipeline and acts on the verdict.
    #[inline]
    fn handle(&mut self, now: Timestamp, in_port: PortId, mut m: Mbuf, out: &mut Out) {
        let v = self.pipeline.process(now, in_port, &mut MbufBuf(&mut m));
        self.verdict(v, m, in_port, out);
    }

    #[inline]
    fn verdict(&mut self, v: Verdict, m: Mbuf, in_port: PortId, out: &mut Out) {
        match v {
            Verdict::Forward(p) => out.send(&self.ports, p.0 as usize, m),
            Verdict::Drop(_) | Verdict::Consumed => push_dead(&mut out.dead, m),
            Verdict::Handoff(w) => {
                out.handed_out += 1;
                match self.pipeline.handoff_note() {
                    Some(note) => self.pass(w, Handoff::Fragment { m, in_port, note }, out),
                    // Without its note the frame is decided from scratch.
                    None => {
                        self.steer_to(w, in_port, m, out);
                        self.flush_steered(out);
                    }
                }
            }
        }
    }

    /// Stage `m` (received on `in_port`) for worker `w`'s steering ring;
    /// a full stage goes at once.
    #[inline]
    /// A received frame: decided here, or (several workers) staged for the
    /// worker that owns it — on the CCL port by its channel
    /// (`steer_ccl`), elsewhere by its connection or its translation
    /// (`steer_nat`); ARP is also
    /// copied to the others.
    fn steer_or_handle(&mut self, now: Timestamp, in_port: PortId, is_ccl: bool, m: Mbuf, out: &mut Out) {
        if self.workers > 1 {
            let s = if is_ccl {
                steer_ccl(m.data(), self.workers)
            } else {
                steer_nat(m.data(), self.workers, self.nat.as_deref(), |a| self.pipeline.shared_real_of(a))
            };
            match s {
                Steer::Worker(w) if w != self.me => {
                    self.steer_to(w, in_port, m, out);
                    return;
                }
                Steer::All => self.copy_to_others(in_port, &m, out),
                _ => {}
            }
        }
        self.handle(now, in_port, m, out);
    }

    fn steer_to(&self, w: WorkerId, in_port: PortId, mut m: Mbuf, out: &mut Out) {
        out.steered_out += 1;
        m.set_port(in_port.0);
        let Some(stage) = out.steer.get_mut(usize::from(w.0)) else {
            out.handoff_drops += 1;
            push_dead(&mut out.dead, m);
            return;
        };
        if let Err(m) = stage.push(m) {
            self.flush_steered(out);
            if let Some(Err(m)) = out.steer.get_mut(usize::from(w.0)).map(|s| s.push(m)) {
                out.handoff_drops += 1;
                push_dead(&mut out.dead, m);
            }
        }
    }

    /// Enqueue every worker's staged frames on its ring, one burst each;
    /// what does not fit is freed and counted (`handoff_drops`).
    fn flush_steered(&self, out: &mut Out) {
        for (w, stage) in out.steer.iter_mut().enumerate() {
            if stage.is_empty() {
                continue;
            }
            if let Some(ring) = self.shared.workers.get(w).and_then(|x| x.steer.as_ref()) {
                ring.enqueue_burst(stage);
            }
            out.handoff_drops += stage.len() as u64;
            for m in stage.drain() {
                push_dead(&mut out.dead, m);
            }
        }
    }

    /// Put `h` on worker `w`'s ring (full: freed and counted).
    fn pass(&self, w: WorkerId, h: Handoff, out: &mut Out) {
        pass_to(&self.shared.workers, w, h, out);
    }

    /// An ARP frame: every other worker learns from a copy.
    fn copy_to_others(&self, in_port: PortId, m: &Mbuf, out: &mut Out) {
        for w in (0..self.workers).map(WorkerId).filter(|&w| w != self.me) {
            if let Some(c) = self.pool.alloc_from_slice(m.data()) {
                self.pass(w, Handoff::Learn { m: c, in_port }, out);
            }
        }
    }
}

/// Put `h` on worker `w`'s ring; a full ring (or no such worker) frees the
/// frame and counts it on the sender (`handoff_drops`).
fn pass_to(workers: &[WorkerShared], w: WorkerId, h: Handoff, out: &mut Out) {
    let h = match workers.get(usize::from(w.0)) {
        Some(to) => match to.handoff.push(h) {
            Ok(()) => return,
            Err(h) => h,
        },
        None => h,
    };
    out.handoff_drops += 1;
    drop_handoff(h, &mut out.dead);
}

fn drop_handoff(h: Handoff, dead: &mut MbufBurst) {
    match h {
        Handoff::Fragment { m, .. } | Handoff::Learn { m, .. } => push_dead(dead, m),
    }
}

/// What the worker does between bursts with one item of its query queue:
/// apply a command (no reply) or answer a query (one reply). Off the packet
/// path; the pipeline is the worker's own, so nothing is locked.
pub(crate) fn between_bursts(pipeline: &mut Pipeline, now: Timestamp, q: Query, shared: &WorkerShared) -> Option<Reply> {
    Some(match q {
        Query::SetPolicy { generation, policy } => {
            match pipeline.set_policy(policy) {
                // The old policy is freed here, between bursts.
                Ok(old) => drop(old),
                // Built from the node's own interface list: never; the
                // old policy stays and the control lcore waits in vain.
                Err(_) => {
                    log::error!("policy {generation} was built for other interfaces: not applied");
                    return None;
                }
            }
            shared.policy_applied.store(generation, Ordering::Relaxed);
            return None;
        }
        Query::SetMembers(members) => {
            pipeline.set_members(now, members);
            return None;
        }
        Query::Reset => {
            pipeline.reset(now);
            return None;
        }
        Query::SharedXlate { pool, real, mapped } => {
            pipeline.set_shared_xlate(now, pool, real, mapped);
            return None;
        }
        Query::Counters => {
            Reply::Counters(Box::new(pipeline.counters()), Box::new(pipeline.frag_snapshot()))
        }
        Query::Conns { max } => Reply::Conns(pipeline.conns(now, max), pipeline.flow_count()),
        Query::Routes => Reply::Routes(pipeline.routes()),
        Query::Arp => Reply::Arp(pipeline.arp_entries(now)),
        Query::Nd => Reply::Nd(pipeline.nd_entries(now)),
        Query::Rules => Reply::Rules(pipeline.rules()),
        Query::Cluster => Reply::Cluster(pipeline.cluster_counters().map(Box::new)),
        Query::Xlates { max } => Reply::Xlates(pipeline.xlates(now, max), pipeline.nat_counters()),
        Query::NatPools => Reply::NatPools(pipeline.nat_pools()),
        Query::TraceStart { filter, until } => {
            pipeline.trace_start(filter, until);
            Reply::Traced(None)
        }
        Query::Trace => Reply::Traced(pipeline.trace_events().map(Box::new)),
        Query::RemoteLimits(remote) => {
            pipeline.set_remote_limits(&remote);
            return None;
        }
        Query::Limits => Reply::Limits(pipeline.limits().map(|l| {
            // Largest counts first; at most what `show limits` lists.
            let mut clients: Vec<_> = l.clients().collect();
            clients.sort_unstable_by(|a, b| (b.2.conns, b.2.embryonic).cmp(&(a.2.conns, a.2.embryonic)));
            clients.truncate(SHOW_LIMIT_CLIENTS);
            Box::new((l.classes(), clients, l.clients_untracked))
        })),
    })
}

fn push_dead(dead: &mut MbufBurst, m: Mbuf) {
    if let Err(m) = dead.push(m) {
        drop(m); // frees it on its own; the batch was full
    }
}

/// Send a TX burst on queue `txq`; what the port does not take is freed
/// and counted.
fn flush(port: &Port, txq: u16, q: &mut MbufBurst, tx_full_drops: &mut u64) {
    let want = q.len();
    let sent = port.tx_burst(txq, q);
    if sent < want {
        *tx_full_drops += (want - sent) as u64;
        q.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::cluster::MemberSet;
    use dataplane::conntrack::Timeouts;
    use dataplane::pipeline::{ClusterSpec, InterfaceSpec, PipelineConfig};
    use dataplane::{Duration, Epoch, NodeId};
    use std::net::Ipv4Addr;

    fn ws() -> WorkerShared {
        Shared::new(vec![None]).workers.remove(0)
    }

    fn iface(name: &str, port: u16, net: u8) -> InterfaceSpec {
        InterfaceSpec {
            name: name.into(),
            port: PortId(port),
            mac: [0x02, 0, 0, 0, net, 1],
            addr: Ipv4Addr::new(10, net, 0, 1),
            prefix_len: 24,
            security_level: 100,
            vlan: None,
            mtu: 1500,
            reverse_path: dataplane::pipeline::ReversePath::Strict,
        }
    }

    /// A pipeline of node 0 of a `nodes`-node cluster (`cluster: false`: a
    /// single-node one), built as `main` builds it, without DPDK.
    fn pipeline(nodes: u8, cluster: bool) -> Pipeline {
        let members = MemberSet::from_nodes(Epoch(1), (0..nodes).map(NodeId)).unwrap();
        Pipeline::new(PipelineConfig {
            interfaces: vec![iface("inside", 0, 1), iface("outside", 1, 2), iface("ccl", 2, 99)],
            routes: vec![],
            rules: vec![],
            timeouts: Timeouts::default(),
            flow_capacity: 64,
            arp_capacity: 16,
            arp_timeout: Duration::from_secs(300),
            arp_retry: Duration::from_secs(1),
            static_neighbors: vec![],
            icmp_errors: Default::default(),
            cluster: cluster.then(|| ClusterSpec {
                node: NodeId(0),
                members,
                cluster_name: "lab".into(),
                key: "lab-secret".into(),
                incarnation: 1000,
                seq_randomization: true,
                ccl_iface: "ccl".into(),
                peers: (1..nodes).map(|m| (NodeId(m), Ipv4Addr::new(10, 99, 0, 1 + m))).collect(),
                random_seed: 7,
                lease: Timestamp::MAX,
                backups: 1,
                syn_guard: dataplane::pipeline::DEFAULT_SYN_GUARD,
                director_hold: dataplane::pipeline::DEFAULT_DIRECTOR_HOLD,
                director_localization: false,
                site_redundancy: false,
            }),
        })
        .unwrap()
    }

    /// `(epoch, members)` as `show cluster` gets them from the worker.
    fn cluster_view(p: &mut Pipeline, now: Timestamp) -> Option<(u64, Vec<NodeId>)> {
        match between_bursts(p, now, Query::Cluster, &ws()) {
            Some(Reply::Cluster(s)) => s.map(|s| (s.epoch, s.members.clone())),
            _ => panic!("Query::Cluster must get a Reply::Cluster"),
        }
    }

    #[test]
    fn set_members_changes_what_the_pipeline_reports() {
        let mut p = pipeline(3, true);
        let now = Timestamp::from_secs(1);
        let all = vec![NodeId(0), NodeId(1), NodeId(2)];
        assert_eq!(cluster_view(&mut p, now), Some((1, all.clone())));
        let set = MemberSet::from_nodes(Epoch(1), (0..3).map(NodeId)).unwrap();
        // Node 2 left: a command, so no reply (the control thread waits
        // for exactly one reply per query and none per command).
        assert!(between_bursts(&mut p, now, Query::SetMembers(set.without(NodeId(2))), &ws()).is_none());
        assert_eq!(cluster_view(&mut p, now), Some((2, vec![NodeId(0), NodeId(1)])));
        // It came back.
        let back = set.without(NodeId(2)).with(NodeId(2)).unwrap();
        assert!(between_bursts(&mut p, now, Query::SetMembers(back), &ws()).is_none());
        assert_eq!(cluster_view(&mut p, now), Some((3, all)));
        // An empty set cannot build a director table: the pipeline keeps
        // the one it has.
        let empty = MemberSet::from_nodes(Epoch(9), []).unwrap();
        assert!(between_bursts(&mut p, now, Query::SetMembers(empty), &ws()).is_none());
        assert_eq!(cluster_view(&mut p, now).map(|v| v.0), Some(3));
    }

    #[test]
    fn a_policy_command_is_applied_and_its_generation_published() {
        use dataplane::pipeline::{Policy, RuleSpec};
        let mut p = pipeline(1, false);
        let shared = ws();
        let now = Timestamp::from_secs(1);
        let rule = RuleSpec {
            name: "ssh".into(),
            permit: true,
            interface: None,
            protocol: Some(6),
            src: None,
            dst: None,
            src_ports: (0, 65535),
            dst_ports: (22, 22),
        };
        let ifaces = [iface("inside", 0, 1), iface("outside", 1, 2), iface("ccl", 2, 99)];
        let policy = Box::new(Policy::build(&ifaces, &[rule], Timeouts::default()).unwrap());
        assert!(between_bursts(&mut p, now, Query::SetPolicy { generation: 7, policy }, &shared).is_none(), "a command");
        assert_eq!(shared.policy_applied.load(Ordering::Relaxed), 7);
        let names: Vec<String> = p.rules().into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["ssh"]);
        // Built for other interfaces: not applied, not published.
        let policy = Box::new(Policy::build(&ifaces[..2], &[], Timeouts::default()).unwrap());
        assert!(between_bursts(&mut p, now, Query::SetPolicy { generation: 8, policy }, &shared).is_none());
        assert_eq!(shared.policy_applied.load(Ordering::Relaxed), 7);
        assert_eq!(p.rules().len(), 1);
    }

    #[test]
    fn set_members_on_a_single_node_pipeline_is_harmless() {
        let mut p = pipeline(1, false);
        let now = Timestamp::from_secs(1);
        let set = MemberSet::from_nodes(Epoch(5), [NodeId(0), NodeId(1)]).unwrap();
        assert!(between_bursts(&mut p, now, Query::SetMembers(set), &ws()).is_none());
        assert_eq!(cluster_view(&mut p, now), None);
        assert!(matches!(between_bursts(&mut p, now, Query::Routes, &ws()), Some(Reply::Routes(_))));
    }
}
