//! A node's worker loop without DPDK, for the tests that compare several
//! workers with one pipeline (`workers.rs`, `nat_workers.rs`): each
//! received frame is steered (`dataplane::steer`, with the node's NAT plan
//! when it translates) to its worker, a frame steered to nobody in
//! particular is decided by the worker whose queue received it (the
//! caller says which: RSS may put it anywhere), ARP is answered by the
//! receiving worker and learnt by the others, and the frames a worker
//! hands off (`Verdict::Handoff`, `drain_handoffs`) are decided by their
//! worker with their note, as `node/src/worker.rs` does through its rings.

#![allow(dead_code)]

use dataplane::buf::VecBuf;
use dataplane::pipeline::{HandoffNote, NatPlan, NatSpec, Pipeline, PipelineConfig, Verdict};
use dataplane::steer::{steer_nat, Steer};
use dataplane::{PortId, Timestamp, WorkerId};
use std::collections::VecDeque;
use std::sync::Arc;

/// Frames out: (port, bytes).
pub type Out = Vec<(PortId, Vec<u8>)>;

/// A node's workers, in one thread.
pub struct Workers {
    pub w: Vec<Pipeline>,
    nat: Option<Arc<NatPlan>>,
}

impl Workers {
    pub fn new(n: u16, cfg: &PipelineConfig) -> Self {
        let w = (0..n)
            .map(|i| {
                let mut p = Pipeline::new(cfg.clone()).unwrap();
                p.set_worker(WorkerId(i), n).unwrap();
                p
            })
            .collect();
        Workers { w, nat: None }
    }

    /// Workers translating with `spec`: one plan, shared by the workers and
    /// the steering (as the node builds it).
    pub fn with_nat(n: u16, cfg: &PipelineConfig, spec: &NatSpec) -> Self {
        let mut me = Workers::new(n, cfg);
        me.w[0].set_nat(spec).unwrap();
        let plan = me.w[0].nat_plan().unwrap();
        for p in &mut me.w[1..] {
            p.set_nat_plan(plan.clone()).unwrap();
        }
        me.nat = Some(plan);
        me
    }

    /// A node of the pipelines `w` (one per worker, worker `i` at `w[i]`)
    /// steering with `nat`, the plan they share.
    pub fn of(w: Vec<Pipeline>, nat: Option<Arc<NatPlan>>) -> Self {
        Workers { w, nat }
    }

    pub fn n(&self) -> u16 {
        self.w.len() as u16
    }

    /// `frame` received on `port` by the queue of worker `rx`.
    pub fn receive(&mut self, now: Timestamp, port: PortId, frame: &[u8], rx: usize) -> Out {
        let rx = rx % self.w.len();
        let mut queue: VecDeque<(usize, PortId, Vec<u8>, Option<HandoffNote>)> = VecDeque::new();
        let mut learners = vec![];
        let rxw = &self.w[rx];
        match steer_nat(frame, self.n(), self.nat.as_deref(), |a| rxw.shared_real_of(a)) {
            Steer::Worker(w) => queue.push_back((usize::from(w.0), port, frame.to_vec(), None)),
            Steer::All => {
                queue.push_back((rx, port, frame.to_vec(), None));
                learners.extend((0..self.w.len()).filter(|&i| i != rx));
            }
            Steer::Any => queue.push_back((rx, port, frame.to_vec(), None)),
        }
        let mut out = vec![];
        loop {
            while let Some((w, port, bytes, note)) = queue.pop_front() {
                let mut buf = VecBuf::new(&bytes);
                let p = &mut self.w[w];
                let v = match note {
                    Some(note) => p.process_handoff(now, port, &mut buf, note),
                    None => p.process(now, port, &mut buf),
                };
                match v {
                    Verdict::Forward(o) => out.push((o, buf.to_vec())),
                    Verdict::Drop(_) | Verdict::Consumed => {}
                    Verdict::Handoff(t) => {
                        assert_ne!(usize::from(t.0), w, "a worker hands a frame to itself");
                        let note = p.handoff_note();
                        assert!(note.is_some(), "a handoff without its note");
                        queue.push_back((usize::from(t.0), port, buf.to_vec(), note));
                    }
                }
            }
            for &i in &learners {
                self.w[i].arp_learn(now, port, frame);
            }
            learners.clear();
            for p in &mut self.w {
                p.flush(now);
                p.drain_generated(|o, f| out.push((o, f.to_vec())));
                p.drain_handoffs(|t, port, note, f| queue.push_back((usize::from(t.0), port, f.to_vec(), Some(*note))));
            }
            if queue.is_empty() {
                break;
            }
        }
        out
    }

    pub fn tick(&mut self, now: Timestamp) -> Out {
        let mut out = vec![];
        for p in &mut self.w {
            p.poll_timers(now);
            p.drain_generated(|o, f| out.push((o, f.to_vec())));
        }
        out
    }
}

/// `frame` through one pipeline (a node with one worker).
pub fn single(p: &mut Pipeline, now: Timestamp, port: PortId, frame: &[u8]) -> Out {
    let mut buf = VecBuf::new(frame);
    let mut out = vec![];
    match p.process(now, port, &mut buf) {
        Verdict::Forward(o) => out.push((o, buf.to_vec())),
        Verdict::Handoff(w) => panic!("a single worker handed a frame to {w:?}"),
        _ => {}
    }
    p.flush(now);
    p.drain_generated(|o, f| out.push((o, f.to_vec())));
    out
}
