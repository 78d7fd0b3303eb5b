//! A simulated node's workers (issue 12; docs/workers.md): one pipeline
//! each, frames steered to them as the node's driver does — data frames by
//! `steer::steer`, CCL frames by their channel (`steer::steer_ccl`), ARP to
//! every worker — and fragments handed from the fragment worker to the
//! flow's at once (the node's handoff queue, without its delay).
//!
//! Invariant: with one worker every call is exactly the single pipeline's
//! (no steering, no handoff), so the runs of the earlier issues replay bit
//! for bit.

use super::net::CCL;
use dataplane::buf::VecBuf;
use dataplane::pipeline::{Pipeline, SyncProgress, Verdict};
use dataplane::steer::{steer, steer_ccl, worker_of_tuple, Steer};
use dataplane::types::{Epoch, FiveTuple, PortId, Timestamp, WorkerId};

pub struct NodeWorkers {
    pipelines: Vec<Pipeline>,
}

impl NodeWorkers {
    /// `pipelines[i]` becomes worker `i` of `pipelines.len()`.
    pub fn new(mut pipelines: Vec<Pipeline>) -> Result<Self, String> {
        let n = u16::try_from(pipelines.len()).map_err(|_| "too many workers".to_string())?;
        if n == 0 {
            return Err("no worker".into());
        }
        for (i, p) in pipelines.iter_mut().enumerate() {
            p.set_worker(WorkerId(i as u16), n).map_err(|e| e.to_string())?;
        }
        Ok(NodeWorkers { pipelines })
    }

    pub fn count(&self) -> u16 {
        self.pipelines.len() as u16
    }

    pub fn all(&self) -> &[Pipeline] {
        &self.pipelines
    }

    pub fn each(&mut self, mut f: impl FnMut(&mut Pipeline)) {
        for p in &mut self.pipelines {
            f(p);
        }
    }

    /// The worker that holds (or would hold) the connection of `t`.
    pub fn of_tuple(&self, t: &FiveTuple) -> &Pipeline {
        &self.pipelines[usize::from(worker_of_tuple(t, self.count()).0)]
    }

    /// Whether any worker holds the conntrack flow of `t`.
    pub fn holds(&self, t: &FiveTuple) -> bool {
        self.pipelines.iter().any(|p| super::cluster::is_owner(p, t))
    }

    /// Workers that hold `t` but are not its worker (must stay 0).
    pub fn misplaced(&self, t: &FiveTuple) -> usize {
        let mine = usize::from(worker_of_tuple(t, self.count()).0);
        self.pipelines.iter().enumerate().filter(|&(i, p)| i != mine && super::cluster::is_owner(p, t)).count()
    }

    /// One received frame, decided by its worker (and, for a fragment
    /// whose connection another worker owns, by that one).
    pub fn process(&mut self, now: Timestamp, port: PortId, buf: &mut VecBuf) -> Verdict {
        let n = self.count();
        if n == 1 {
            return self.pipelines[0].process(now, port, buf);
        }
        let data = dataplane::buf::PacketBuf::data(buf);
        let s = if port == CCL { steer_ccl(data, n) } else { steer(data, n) };
        let w = match s {
            Steer::Worker(w) => usize::from(w.0),
            // Received by worker 0, learnt by the others from a copy.
            Steer::All => {
                for p in self.pipelines.iter_mut().skip(1) {
                    p.arp_learn(now, port, data);
                }
                0
            }
            Steer::Any => 0,
        };
        let v = self.pipelines[w].process(now, port, buf);
        self.follow(now, w, port, buf, v)
    }

    /// A `Handoff` verdict of worker `w`: the frame to the worker named,
    /// with the note.
    fn follow(&mut self, now: Timestamp, w: usize, port: PortId, buf: &mut VecBuf, v: Verdict) -> Verdict {
        let Verdict::Handoff(to) = v else { return v };
        let Some(note) = self.pipelines[w].handoff_note() else { return v };
        match self.pipelines.get_mut(usize::from(to.0)) {
            Some(p) => p.process_handoff(now, port, buf, note),
            None => v,
        }
    }

    /// Fragments the workers queued for other workers (released from
    /// reassembly by a timer or a later fragment): decided by theirs; the
    /// frames to send.
    pub fn drain_handoffs(&mut self, now: Timestamp, out: &mut Vec<(PortId, Vec<u8>)>) {
        if self.count() == 1 {
            return;
        }
        let mut moved = Vec::new();
        for p in &mut self.pipelines {
            p.drain_handoffs(|w, in_port, note, bytes| moved.push((w, in_port, *note, bytes.to_vec())));
        }
        for (w, in_port, note, bytes) in moved {
            let Some(p) = self.pipelines.get_mut(usize::from(w.0)) else { continue };
            let mut buf = VecBuf::new(&bytes);
            if let Verdict::Forward(port) = p.process_handoff(now, in_port, &mut buf, note) {
                out.push((port, buf.to_vec()));
            }
        }
    }

    /// The frames every worker generated (ARP, CCL messages).
    pub fn drain_generated(&mut self, mut f: impl FnMut(PortId, &[u8])) {
        for p in &mut self.pipelines {
            p.drain_generated(&mut f);
        }
    }

    /// The node's re-registration progress (`SyncProgress::of_workers`).
    pub fn sync_progress(&self, epoch: Epoch) -> SyncProgress {
        SyncProgress::of_workers(self.pipelines.iter().map(|p| p.sync_progress(epoch))).unwrap_or_default()
    }
}
