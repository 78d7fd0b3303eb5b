//! The export thread: syslog (RFC 5424 over UDP, or TCP with RFC 6587
//! octet counting) and IPFIX (over UDP) to the collectors of
//! `logging.syslog` and `flow-export`.
//!
//! Who feeds it:
//! - every worker, through its bounded `WorkerShared::flow_records` queue:
//!   the flow log's records (`dataplane::conntrack::flowlog`: built,
//!   ended, denied), copied there between bursts; a full queue drops the
//!   record and counts it (`flow_record_drops`), the worker never waits;
//! - the control lcore, through `ExportShared::events`: membership events,
//!   refused configurations, the running policy's rule names.
//!
//! Why a thread of its own and not the control lcore: formatting and
//! socket I/O take time the heartbeats must not wait for (a slow or dead
//! TCP collector costs this thread a connect timeout, never a missed
//! heartbeat), and it sleeps when there is nothing to send, so idle it
//! costs nothing.
//!
//! Invariants: nothing here blocks a worker or the control lcore (both only
//! push on bounded queues); a message that cannot be sent (socket error,
//! a TCP collector's backlog above `TCP_BACKLOG` bytes) is dropped and
//! counted, never retried forever; a TCP collector that goes away is
//! reconnected every `RECONNECT` and the message it was in the middle of
//! is sent again whole on the new connection (its framing stays intact).

use crate::clock::Clock;
use crate::shared::Shared;
use config::model::export::{DeviceId, SyslogTransport};
use config::Config;
use controlplane::syslog::{self, Header, Message, Names};
use crossbeam_queue::ArrayQueue;
use dataplane::conntrack::{FlowEvent, FlowRecord};
use std::collections::VecDeque;
use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Records a worker's queue holds for the export thread.
pub const FLOW_RECORD_QUEUE: usize = 16_384;
/// Events the control lcore's queue holds.
const EVENT_QUEUE: usize = 1024;
/// Bytes a TCP collector may fall behind before messages are dropped.
const TCP_BACKLOG: usize = 1 << 20;
/// Between two connection attempts to a TCP collector.
const RECONNECT: Duration = Duration::from_secs(2);
/// The longest a connection attempt may take (the thread waits for it).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(200);
/// How long the thread sleeps when it found nothing to do.
const IDLE_SLEEP: Duration = Duration::from_millis(20);
/// Records taken from one worker per round.
const ROUND: usize = 4096;
/// IPFIX data records that make the thread send without waiting for its
/// once-a-second flush.
const IPFIX_BATCH: usize = 512;

/// What the control lcore tells the export thread.
pub enum ExportEvent {
    /// A message to every syslog collector.
    Syslog { severity: u8, msgid: &'static str, text: String },
    /// The rule names of the policy the workers run now (denied and built
    /// records name their rule by index).
    Rules(Vec<String>),
    /// Connection-limit hits, to the IPFIX collector (template 259).
    Limits(Vec<controlplane::ipfix::LimitEvent>),
}

/// The export thread's counters (`show stats` → `export`, the metrics).
#[derive(Default)]
pub struct ExportCounters {
    pub records: AtomicU64,
    pub syslog_messages: AtomicU64,
    pub syslog_dropped: AtomicU64,
    pub syslog_connects: AtomicU64,
    pub denied_suppressed: AtomicU64,
    pub ipfix_messages: AtomicU64,
    pub ipfix_records: AtomicU64,
    /// Messages not sent (socket error), records the encoder could not
    /// take.
    pub ipfix_dropped: AtomicU64,
    pub ipfix_records_dropped: AtomicU64,
    pub event_drops: AtomicU64,
}

/// A snapshot of [`ExportCounters`] with the workers' queue drops.
pub struct ExportStats {
    values: [(&'static str, u64); 11],
}

impl dataplane::stats::Stats for ExportStats {
    fn visit(&self, v: &mut dyn dataplane::stats::Visitor) {
        for &(name, n) in &self.values {
            v.counter(name, n);
        }
    }
}

/// What the control lcore and the export thread share.
pub struct ExportShared {
    pub events: ArrayQueue<ExportEvent>,
    pub counters: ExportCounters,
}

impl ExportShared {
    pub fn new() -> ExportShared {
        ExportShared { events: ArrayQueue::new(EVENT_QUEUE), counters: ExportCounters::default() }
    }

    /// Queue `e`; full: dropped and counted.
    pub fn push(&self, e: ExportEvent) {
        if self.events.push(e).is_err() {
            self.counters.event_drops.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn stats(&self, shared: &Shared) -> ExportStats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let drops = shared.workers.iter().map(|w| l(&w.flow_record_drops)).sum();
        ExportStats {
            values: [
                ("records", l(&c.records)),
                ("record_drops", drops),
                ("syslog_messages", l(&c.syslog_messages)),
                ("syslog_dropped", l(&c.syslog_dropped)),
                ("syslog_connects", l(&c.syslog_connects)),
                ("denied_suppressed", l(&c.denied_suppressed)),
                ("ipfix_messages", l(&c.ipfix_messages)),
                ("ipfix_records", l(&c.ipfix_records)),
                ("ipfix_dropped", l(&c.ipfix_dropped)),
                ("ipfix_records_dropped", l(&c.ipfix_records_dropped)),
                ("event_drops", l(&c.event_drops)),
            ],
        }
    }
}

/// Any exporter configured: the workers log flows, the thread runs.
pub fn wanted(cfg: &Config) -> bool {
    !cfg.logging.syslog.is_empty() || cfg.flow_export.is_some()
}

enum Transport {
    Udp(Option<UdpSocket>),
    Tcp {
        stream: Option<TcpStream>,
        /// Framed messages not yet written, and how much of the first was.
        queue: VecDeque<Vec<u8>>,
        queued: usize,
        written: usize,
        next_try: Instant,
    },
}

/// One syslog collector.
struct SyslogSink {
    server: SocketAddr,
    header: Header,
    /// The least severe severity sent (numerically the largest).
    severity: u8,
    transport: Transport,
}

impl SyslogSink {
    /// Send or queue `m` at `unix_ms` (unless it is less severe than the
    /// collector wants); a message that cannot be is dropped and counted.
    fn send(&mut self, unix_ms: u64, m: &Message, c: &ExportCounters) {
        if m.severity > self.severity {
            return;
        }
        let bytes = syslog::render(&self.header, unix_ms, m);
        let ok = match &mut self.transport {
            Transport::Udp(sock) => sock.as_ref().is_some_and(|s| s.send_to(&bytes, self.server).is_ok()),
            Transport::Tcp { queue, queued, .. } => {
                let framed = syslog::frame_octet_counted(&bytes);
                if *queued + framed.len() > TCP_BACKLOG {
                    false
                } else {
                    *queued += framed.len();
                    queue.push_back(framed);
                    true
                }
            }
        };
        if ok {
            c.syslog_messages.fetch_add(1, Ordering::Relaxed);
        } else {
            c.syslog_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// TCP: connect when due, write what the socket takes.
    fn pump(&mut self, c: &ExportCounters) {
        let Transport::Tcp { stream, queue, queued, written, next_try } = &mut self.transport else { return };
        if stream.is_none() && Instant::now() >= *next_try {
            *next_try = Instant::now() + RECONNECT;
            match TcpStream::connect_timeout(&self.server, CONNECT_TIMEOUT) {
                Ok(s) if s.set_nonblocking(true).is_ok() => {
                    let _ = s.set_nodelay(true);
                    c.syslog_connects.fetch_add(1, Ordering::Relaxed);
                    log::info!("syslog: connected to {} (tcp)", self.server);
                    *stream = Some(s);
                    *written = 0;
                }
                Ok(_) => {}
                Err(e) => log::debug!("syslog: {} (tcp): {e}", self.server),
            }
        }
        let Some(s) = stream else { return };
        while let Some(head) = queue.front() {
            match s.write(&head[*written..]) {
                Ok(n) => {
                    *written += n;
                    if *written == head.len() {
                        *queued -= head.len();
                        *written = 0;
                        queue.pop_front();
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    log::warn!("syslog: {} (tcp): {e}; reconnecting", self.server);
                    *stream = None;
                    *written = 0;
                    break;
                }
            }
        }
    }
}

/// The IPFIX collector.
struct IpfixSink {
    collector: SocketAddr,
    socket: Option<UdpSocket>,
    encoder: controlplane::ipfix::IpfixEncoder,
}

/// The export thread's state.
pub struct Exporter {
    shared: Arc<Shared>,
    export: Arc<ExportShared>,
    clock: Clock,
    names: Names,
    syslog: Vec<SyslogSink>,
    ipfix: Option<IpfixSink>,
    deny: syslog::DenyLimiter,
    /// Unix time (ns) of the node clock's zero.
    unix_ns_at_zero: u64,
    /// Workers' queue drops last reported.
    reported_drops: u64,
    out: Vec<Vec<u8>>,
}

/// An unconnected UDP socket for `addr`'s messages (`send_to`): a
/// connected one would fail the send after a collector's port-unreachable
/// (the kernel reports the ICMP error on the next call), losing a message
/// that a collector started since would have taken.
fn udp_to(addr: SocketAddr, what: &str) -> Option<UdpSocket> {
    let s = UdpSocket::bind("0.0.0.0:0").and_then(|s| s.set_nonblocking(true).map(|_| s));
    match s {
        Ok(s) => Some(s),
        Err(e) => {
            log::warn!("{what}: no socket to {addr}: {e}; its messages are dropped");
            None
        }
    }
}

impl Exporter {
    pub fn new(cfg: &Config, shared: Arc<Shared>, export: Arc<ExportShared>, clock: Clock, names: Names, node_id: u32) -> Exporter {
        let host = |d: DeviceId| match (d, &cfg.cluster) {
            (DeviceId::Cluster, Some(c)) => c.name.clone(),
            _ => cfg.node.name.clone(),
        };
        let syslog = cfg
            .logging
            .syslog
            .iter()
            .map(|s| SyslogSink {
                server: SocketAddr::V4(s.server),
                header: Header { facility: s.facility.code(), hostname: host(s.device_id), procid: std::process::id() },
                severity: s.severity.code(),
                transport: match s.transport {
                    SyslogTransport::Udp => Transport::Udp(udp_to(SocketAddr::V4(s.server), "syslog")),
                    SyslogTransport::Tcp => Transport::Tcp {
                        stream: None,
                        queue: VecDeque::new(),
                        queued: 0,
                        written: 0,
                        next_try: Instant::now(),
                    },
                },
            })
            .collect();
        let ipfix = cfg.flow_export.as_ref().map(|f| IpfixSink {
            collector: SocketAddr::V4(f.collector),
            socket: udp_to(SocketAddr::V4(f.collector), "flow-export"),
            encoder: controlplane::ipfix::IpfixEncoder::new(node_id, f.template_refresh, 1400),
        });
        let unix_ns_at_zero = clock.origin_unix_ns();
        Exporter {
            shared,
            export,
            clock,
            names,
            syslog,
            ipfix,
            deny: syslog::DenyLimiter::new(cfg.logging.deny_rate),
            unix_ns_at_zero,
            reported_drops: 0,
            out: Vec::new(),
        }
    }

    fn unix_ms(&self) -> u64 {
        (self.clock.now().0 + self.unix_ns_at_zero) / 1_000_000
    }

    fn syslog_all(&mut self, m: &Message) {
        let ms = self.unix_ms();
        for s in &mut self.syslog {
            s.send(ms, m, &self.export.counters);
        }
    }

    fn record(&mut self, r: &FlowRecord) {
        self.export.counters.records.fetch_add(1, Ordering::Relaxed);
        if !self.syslog.is_empty() {
            let pass = r.event != FlowEvent::Denied || self.deny.allow(r.rule, self.unix_ms());
            if pass {
                if let Some(m) = syslog::flow_message(r, &self.names) {
                    self.syslog_all(&m);
                }
            }
        }
        if let Some(x) = &mut self.ipfix {
            x.encoder.push(r, self.unix_ns_at_zero);
            if x.encoder.pending() >= IPFIX_BATCH {
                self.flush_ipfix(self.unix_ms());
            }
        }
    }

    /// Once a second: the deny summaries, lost records, the IPFIX flush.
    fn tick(&mut self) {
        let now_ms = self.unix_ms();
        for (rule, n) in self.deny.tick(now_ms) {
            self.export.counters.denied_suppressed.fetch_add(n, Ordering::Relaxed);
            let m = syslog::suppressed_message(rule, n, self.deny.rate(), &self.names);
            self.syslog_all(&m);
        }
        let drops: u64 = self.shared.workers.iter().map(|w| w.flow_record_drops.load(Ordering::Relaxed)).sum();
        if drops > self.reported_drops {
            let m = syslog::event_message(
                syslog::severity::WARNING,
                "export-lost",
                &self.names.node,
                format!("{} flow records lost: the workers' export queues were full", drops - self.reported_drops),
            );
            self.reported_drops = drops;
            self.syslog_all(&m);
        }
        self.flush_ipfix(now_ms);
    }

    /// Connection-limit events: one IPFIX message (they are rare).
    fn limit_events(&mut self, events: &[controlplane::ipfix::LimitEvent]) {
        let now_s = (self.unix_ms() / 1000) as u32;
        let Some(x) = &mut self.ipfix else { return };
        let Some(m) = x.encoder.limit_message(now_s, events) else { return };
        let c = &self.export.counters;
        match x.socket.as_ref().map(|s| s.send_to(&m, x.collector)) {
            Some(Ok(_)) => c.ipfix_messages.fetch_add(1, Ordering::Relaxed),
            _ => c.ipfix_dropped.fetch_add(1, Ordering::Relaxed),
        };
    }

    fn flush_ipfix(&mut self, now_ms: u64) {
        let Some(x) = &mut self.ipfix else { return };
        self.out.clear();
        x.encoder.flush((now_ms / 1000) as u32, &mut self.out);
        let c = &self.export.counters;
        for m in self.out.drain(..) {
            match x.socket.as_ref().map(|s| s.send_to(&m, x.collector)) {
                Some(Ok(_)) => c.ipfix_messages.fetch_add(1, Ordering::Relaxed),
                _ => c.ipfix_dropped.fetch_add(1, Ordering::Relaxed),
            };
        }
        let e = &x.encoder.counters;
        c.ipfix_records.store(e.records, Ordering::Relaxed);
        c.ipfix_records_dropped.store(e.dropped + e.invalid, Ordering::Relaxed);
    }

    /// Until the node stops.
    pub fn run(mut self) {
        let mut next_tick = Instant::now();
        while !self.shared.stop.load(Ordering::Relaxed) {
            let mut work = 0;
            while let Some(e) = self.export.events.pop() {
                work += 1;
                match e {
                    ExportEvent::Syslog { severity, msgid, text } => {
                        let m = syslog::event_message(severity, msgid, &self.names.node, text);
                        self.syslog_all(&m);
                    }
                    ExportEvent::Rules(r) => self.names.rules = r,
                    ExportEvent::Limits(events) => self.limit_events(&events),
                }
            }
            let shared = self.shared.clone();
            for w in &shared.workers {
                let Some(q) = &w.flow_records else { continue };
                for _ in 0..ROUND {
                    let Some(r) = q.pop() else { break };
                    work += 1;
                    self.record(&r);
                }
            }
            for s in &mut self.syslog {
                s.pump(&self.export.counters);
            }
            if Instant::now() >= next_tick {
                next_tick = Instant::now() + Duration::from_secs(1);
                self.tick();
            }
            if work == 0 {
                std::thread::sleep(IDLE_SLEEP);
            }
        }
        // Last words: what is queued goes out.
        self.tick();
        for s in &mut self.syslog {
            s.pump(&self.export.counters);
        }
    }
}
