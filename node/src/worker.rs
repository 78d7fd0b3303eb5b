//! The worker lcore: run-to-completion poll loop over the data ports.
//!
//! Shape (DPDK `l3fwd`): for each port, receive a burst, run every packet
//! through the sans-IO [`Pipeline`], queue it on the egress port's TX burst,
//! then flush all TX bursts. Dropped mbufs are collected and freed in one
//! batch. The loop takes no lock and allocates nothing per packet; the only
//! shared state is the stop flag and the bounded lock-free query queues that
//! the control thread uses to ask for snapshots (answered between bursts).
//!
//! Idle back-off (SPEC P4): after a few empty polls the worker sleeps, with
//! the sleep doubling up to `idle_sleep_us`, and up to 1 ms once the node has
//! been silent for about two seconds, so several nodes can share two cores;
//! one packet resets it to busy polling.

use crate::clock::Clock;
use crate::shared::{Query, Reply, Shared};
use dataplane::buf::PacketBuf;
use dataplane::pipeline::{Pipeline, Verdict};
use dataplane::{PortId, Timestamp};
use dpdk_sys::{Mbuf, MbufBurst, Mempool, Port};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Empty polls before the first sleep.
const SPIN_POLLS: u32 = 64;
/// Empty polls (each ≥ 1 sleep) after which the node counts as deeply idle
/// and sleeps up to `DEEP_IDLE_SLEEP_US` (about 2 s of silence at 200 µs).
const DEEP_IDLE_POLLS: u32 = 10_000;
const DEEP_IDLE_SLEEP_US: u32 = 1_000;
/// How often timers (flow expiry, ARP aging) run.
const TIMER_PERIOD_NS: u64 = 1_000_000;

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
}

impl Worker {
    pub fn run(mut self) -> i32 {
        let nports = self.ports.len();
        let mut rx = MbufBurst::new();
        let mut tx: Vec<MbufBurst> = (0..nports).map(|_| MbufBurst::new()).collect();
        let mut dead = MbufBurst::new();
        let mut tx_full_drops = 0u64;
        let mut empty_polls = 0u32;
        let mut sleep_us = 1u32;
        let mut next_timer = 0u64;
        log::info!("worker started on lcore {} with {} ports", dpdk_sys::eal::lcore_id(), nports);
        while !self.shared.stop.load(Ordering::Relaxed) {
            let now = self.clock.now();
            let mut received = 0;
            for (pi, port) in self.ports.iter().enumerate() {
                let n = port.rx_burst(0, &mut rx);
                received += n;
                let in_port = PortId(pi as u16);
                for mut m in rx.drain() {
                    match self.pipeline.process(now, in_port, &mut MbufBuf(&mut m)) {
                        Verdict::Forward(out) => {
                            let Some(q) = tx.get_mut(out.0 as usize) else {
                                push_dead(&mut dead, m);
                                continue;
                            };
                            if let Err(m) = q.push(m) {
                                // Flush a full TX burst and retry once.
                                flush(&self.ports[out.0 as usize], q, &mut tx_full_drops);
                                if let Err(m) = q.push(m) {
                                    tx_full_drops += 1;
                                    push_dead(&mut dead, m);
                                }
                            }
                        }
                        Verdict::Drop(_) | Verdict::Consumed => push_dead(&mut dead, m),
                    }
                }
            }
            // Frames the pipeline made (ARP requests).
            let pool = &self.pool;
            self.pipeline.drain_generated(|port, bytes| {
                let Some(q) = tx.get_mut(port.0 as usize) else { return };
                let Some(mut m) = pool.alloc() else { return };
                let Ok(len) = u16::try_from(bytes.len()) else { return };
                match m.append(len) {
                    Some(buf) => buf.copy_from_slice(bytes),
                    None => return,
                }
                let _ = q.push(m);
            });
            for (pi, q) in tx.iter_mut().enumerate() {
                if q.len() > 0 {
                    flush(&self.ports[pi], q, &mut tx_full_drops);
                }
            }
            dead.clear();

            if now.nanos() >= next_timer {
                self.pipeline.poll_timers(now);
                next_timer = now.nanos() + TIMER_PERIOD_NS;
                self.shared.tx_full_drops.store(tx_full_drops, Ordering::Relaxed);
            }
            if let Some(q) = self.shared.queries.pop() {
                let reply = self.answer(q, now);
                // The control thread waits for exactly one reply per query;
                // a full reply queue means it gave up, so drop the answer.
                let _ = self.shared.replies.push(reply);
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
        log::info!("worker stopping");
        0
    }

    fn answer(&self, q: Query, now: Timestamp) -> Reply {
        match q {
            Query::Counters => Reply::Counters(Box::new(self.pipeline.counters().snapshot())),
            Query::Conns { max } => Reply::Conns(self.pipeline.conns(now, max), self.pipeline.flow_count()),
            Query::Routes => Reply::Routes(self.pipeline.routes()),
            Query::Arp => Reply::Arp(self.pipeline.arp_entries(now)),
            Query::Rules => Reply::Rules(self.pipeline.rules()),
        }
    }
}

fn push_dead(dead: &mut MbufBurst, m: Mbuf) {
    if let Err(m) = dead.push(m) {
        drop(m); // frees it on its own; the batch was full
    }
}

/// Send a TX burst; what the port does not take is freed and counted.
fn flush(port: &Port, q: &mut MbufBurst, tx_full_drops: &mut u64) {
    let want = q.len();
    let sent = port.tx_burst(0, q);
    if sent < want {
        *tx_full_drops += (want - sent) as u64;
        q.clear();
    }
}
