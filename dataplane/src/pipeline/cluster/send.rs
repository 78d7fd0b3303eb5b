//! What the cluster stage puts on the CCL: a frame wrapped in place for its
//! owner or director, small frames batched per owner, sealed control
//! messages, and the burst's flow records (`flush`). Every datagram is
//! addressed to the peer's CCL MAC, resolved through the egress stage
//! (`Link`); a peer that is not resolved yet gets an ARP request and the
//! message fails (counted).

use super::{ClusterPath, Link, OpenBatch, Update, BATCH_FRAME_MAX, BATCH_PAYLOAD_MAX};
use crate::buf::PacketBuf;
use crate::ccl::{
    BatchWriter, FlowBatch, FlowKey, ForwardedBatch, ForwardedPacket, FramePath, Message, MessageKind, RelayToOwner,
    FRAME_OVERHEAD, TAG_LEN,
};
use crate::types::{DropReason, FiveTuple, NodeId, PortId, Timestamp};

/// Which message a frame is wrapped in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Wrap {
    /// `ForwardedPacket`, to the owner.
    Forward,
    /// `RelayToOwner`, to the director (R7).
    Relay,
    /// `ToControl`, to the control node (N3).
    ToControl,
}

impl ClusterPath {
    /// The frame path to `node`'s CCL address (its MAC resolved).
    fn path_to(&mut self, now: Timestamp, link: &mut Link<'_>, node: NodeId) -> Result<FramePath, DropReason> {
        let ip = self.peers.get(node.index()).copied().flatten().ok_or(DropReason::ClusterOwnerUnknown)?;
        let mac = link.egress.peer_mac(now, link.ifaces, ip, self.ccl_ifx)?;
        Ok(FramePath { src_mac: self.ccl_mac, dst_mac: mac, src_ip: self.ccl_addr, dst_ip: ip })
    }

    /// Turn the frame in `buf` into a CCL datagram to `to`, in place: outer
    /// Ethernet/IPv4/UDP and CCL header in front, the tag behind. Returns
    /// the CCL port. On error the frame is unchanged.
    #[allow(clippy::too_many_arguments)]
    pub fn wrap<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        link: &mut Link<'_>,
        buf: &mut B,
        kind: Wrap,
        iface: u8,
        to: NodeId,
        hint: Option<FiveTuple>,
    ) -> Result<PortId, DropReason> {
        let path = self.path_to(now, link, to)?;
        let len = buf.data().len();
        // The frame stays where it is: the headers go in front of it (into
        // the headroom), the tag behind it, and the MAC covers it in place.
        let key = hint.and_then(|t| FlowKey::new(t).ok());
        let (kind, head_len) = match kind {
            Wrap::Forward => (MessageKind::ForwardedPacket, ForwardedPacket::head_len(key.as_ref())),
            Wrap::Relay => (MessageKind::RelayToOwner, RelayToOwner::HEAD_LEN),
            Wrap::ToControl => (MessageKind::ToControl, RelayToOwner::HEAD_LEN),
        };
        let front = FRAME_OVERHEAD - TAG_LEN + head_len;
        if !buf.prepend(front) {
            return Err(DropReason::NoHeadroom);
        }
        if !buf.append(TAG_LEN) {
            buf.trim_front(front);
            return Err(DropReason::NoHeadroom);
        }
        let head = |out: &mut [u8]| match kind {
            MessageKind::ForwardedPacket => ForwardedPacket::emit_head(iface, key.as_ref(), out),
            _ => RelayToOwner::emit_head(iface, out),
        };
        match self.sealer.seal_frame_in_place(&path, self.members.epoch(), kind, head_len, len, head, buf.data_mut()) {
            Ok(_) => {
                self.trace_to = Some(to);
                Ok(self.ccl_port)
            }
            Err(_) => {
                buf.trim_front(front);
                buf.trim_back(TAG_LEN);
                Err(DropReason::CclMalformed)
            }
        }
    }

    /// Copy `frame` into the `ForwardedBatch` being filled for `to` (a new
    /// one in a pool slot if none is open or it is full). `false`: the frame
    /// is to be wrapped alone, in place — it is longer than
    /// `BATCH_FRAME_MAX` and no batch to `to` is open (one that is open
    /// takes every frame to `to`, so that they leave in order), or there is
    /// no slot, or the peer is unresolved (`wrap` then says so).
    pub(super) fn batch_forward(
        &mut self,
        now: Timestamp,
        link: &mut Link<'_>,
        iface: u8,
        to: NodeId,
        frame: &[u8],
    ) -> bool {
        let Some(open) = self.fwd_batches.get(to.index()).copied() else {
            return false;
        };
        // Too long to open a batch, or for any batch at all.
        if (open.is_none() && frame.len() > BATCH_FRAME_MAX)
            || 1 + ForwardedBatch::ENTRY_HEAD + frame.len() > BATCH_PAYLOAD_MAX
        {
            return false;
        }
        let path = match open {
            Some(b) => b.path,
            None => match self.path_to(now, link, to) {
                Ok(p) => p,
                Err(_) => return false,
            },
        };
        let at = FRAME_OVERHEAD - TAG_LEN;
        // The open batch, or, when it is full, a new one: a frame that fits
        // `BATCH_PAYLOAD_MAX` always fits an empty batch.
        for _ in 0..2 {
            let b = match self.fwd_batches[to.index()] {
                Some(b) => b,
                None => {
                    let Some(slot) = self.pool.alloc() else {
                        self.counters.pool_full += 1;
                        return false;
                    };
                    OpenBatch { slot, used: 0, frames: 0, path }
                }
            };
            let pushed = self
                .pool
                .mem_mut(b.slot)
                .and_then(|m| m.get_mut(at..at + BATCH_PAYLOAD_MAX))
                .and_then(|p| ForwardedBatch::push(p, b.used, iface, frame).ok());
            match pushed {
                Some(used) => {
                    self.fwd_batches[to.index()] = Some(OpenBatch { used, frames: b.frames + 1, ..b });
                    self.counters.batched_frames += 1;
                    self.trace_to = Some(to);
                    return true;
                }
                // Full (bytes or frames): send it and start another.
                None if b.used > 0 => {
                    self.fwd_batches[to.index()] = None;
                    self.seal_batch(b);
                }
                None => {
                    self.pool.give_back(b.slot);
                    return false;
                }
            }
        }
        false
    }

    /// Seal the batch `b` in its slot and queue it for the CCL port; a batch
    /// that cannot be sealed (never: `batch_forward` built it) is counted
    /// lost.
    fn seal_batch(&mut self, b: OpenBatch) {
        let epoch = self.members.epoch();
        let sealed = self
            .pool
            .mem_mut(b.slot)
            .and_then(|m| self.sealer.seal_batch_in_place(&b.path, epoch, b.used, m).ok());
        match sealed {
            Some(n) => {
                self.pool.set_frame(b.slot, 0, n);
                self.counters.batches_sent += 1;
                self.pool.push_out(b.slot, self.ccl_port);
            }
            None => {
                self.counters.batch_frame_drops += u64::from(b.frames);
                self.pool.give_back(b.slot);
            }
        }
    }

    /// Seal the batches still open (end of a burst, before the pool drains).
    pub(super) fn seal_open_batches(&mut self) {
        for n in 0..self.fwd_batches.len() {
            if let Some(b) = self.fwd_batches.get_mut(n).and_then(Option::take) {
                self.seal_batch(b);
            }
        }
    }

    /// Seal `msg` to `to` into a pool slot queued for the CCL port. `false`
    /// (counted) when the peer is unresolved or the pool is full.
    pub(super) fn send_ccl(&mut self, now: Timestamp, link: &mut Link<'_>, to: NodeId, msg: &Message<'_>) -> bool {
        let path = match self.path_to(now, link, to) {
            Ok(p) => p,
            Err(_) => {
                self.counters.ccl_unresolved += 1;
                return false;
            }
        };
        let Some(i) = self.pool.alloc() else {
            self.counters.pool_full += 1;
            return false;
        };
        let epoch = self.members.epoch();
        let sealed = self.pool.mem_mut(i).and_then(|b| self.sealer.seal_frame(&path, epoch, msg, &mut b[..]).ok());
        match sealed {
            Some(n) => {
                self.pool.set_frame(i, 0, n);
                self.pool.push_out(i, self.ccl_port);
                true
            }
            None => {
                self.pool.give_back(i);
                false
            }
        }
    }

    /// End of a burst: seal the queued flow records, one `FlowRegister` and
    /// one `StateUpdate` batch per destination (more if a batch fills a
    /// datagram), into generated frames.
    pub fn flush(&mut self, now: Timestamp, link: &mut Link<'_>) {
        if self.updates.is_empty() {
            return;
        }
        let Some(mut payload) = self.batch.take() else {
            return;
        };
        for to in 0..NodeId::MAX_NODES as u8 {
            for register in [true, false] {
                let wanted = |u: &Update| u.to == NodeId(to) && u.register == register;
                if !self.updates.iter().any(wanted) {
                    continue;
                }
                let Ok(mut w) = BatchWriter::new(&mut payload[..]) else {
                    continue;
                };
                for k in 0..self.updates.len() {
                    let Some(u) = self.updates.get(k).copied() else {
                        break;
                    };
                    if !wanted(&u) {
                        continue;
                    }
                    if w.push(&u.record).is_err() {
                        self.send_batch(now, link, NodeId(to), register, w.as_batch());
                        w.reset();
                        let _ = w.push(&u.record);
                    }
                }
                if !w.is_empty() {
                    self.send_batch(now, link, NodeId(to), register, w.as_batch());
                }
            }
        }
        self.updates.clear();
        self.batch = Some(payload);
    }

    fn send_batch(&mut self, now: Timestamp, link: &mut Link<'_>, to: NodeId, register: bool, b: FlowBatch<'_>) {
        let m = if register { Message::FlowRegister(b) } else { Message::StateUpdate(b) };
        if self.send_ccl(now, link, to, &m) {
            self.count_sent(to, b.len());
        }
    }
}
