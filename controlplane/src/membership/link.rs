//! The byte side of membership: sealing its messages and opening the
//! control-channel frames it receives, with the one CCL codec
//! (`dataplane::ccl`). No transport: the driver moves the bytes.
//!
//! Why a layer of its own and not the driver's: the node and the simulator
//! must put the same messages on their CCLs (same channel, same replay
//! windows, same counters), and keeping that in one place is what makes
//! the simulator's run of membership mean something. Why not inside
//! [`Membership`]: the state machine is tested on decoded messages, and
//! the sealer's sequence numbers are the driver's business (a frame that
//! never reached the wire still used one).
//!
//! Invariants: one `Sealer` on `CONTROL_CHANNEL` (its own sequence space)
//! and one `Opener` (the control lcore's own replay windows, separate from
//! the workers'); every frame given to [`ControlLink::receive`] is counted
//! by the opener (a drop reason or an rx kind) and, if it opens, by the
//! membership machine; nothing here panics on any input. When the machine
//! refuses a message as coming from a second holder of a node id
//! (`DuplicateId`, `IdInUse`), the link forgets that id's replay windows:
//! the impostor's higher incarnation would otherwise keep the genuine
//! node's messages out as `ccl-stale-incarnation`.

use super::{Action, Envelope, Membership, Received};
use dataplane::ccl::{
    CclCounters, CclDrop, CclError, CclKey, ControlMessage, FramePath, Opener, Sealer, CONTROL_CHANNEL,
};
use dataplane::{Epoch, NodeId, Timestamp};
use std::net::Ipv4Addr;

/// Room for any frame membership sends: a full-size chunk (1500-byte IPv4
/// packet, 14 bytes of Ethernet).
pub const MAX_CONTROL_FRAME: usize = 1514;

/// The control lcore's CCL endpoint, as bytes.
#[derive(Clone, Debug)]
pub struct ControlLink {
    sealer: Sealer,
    opener: Opener,
    /// Outer addresses of broadcasts: this node's CCL MAC and address to
    /// the Ethernet broadcast and the CCL subnet's broadcast address.
    broadcast: FramePath,
}

impl ControlLink {
    /// `incarnation` as for every `Sealer` of this boot (it must grow
    /// across restarts).
    pub fn new(key: &CclKey, me: NodeId, incarnation: u32, broadcast: FramePath) -> Result<ControlLink, CclError> {
        Ok(ControlLink {
            sealer: Sealer::new(key, me, CONTROL_CHANNEL, incarnation)?,
            opener: Opener::new(key, me),
            broadcast,
        })
    }

    /// Seal `msg` as a broadcast frame into `out`; returns the frame length.
    pub fn seal_broadcast(&mut self, epoch: Epoch, msg: &ControlMessage<'_>, out: &mut [u8]) -> Result<usize, CclError> {
        self.sealer.seal_control_frame(&self.broadcast, epoch, msg, out)
    }

    /// Seal `msg` to one peer (its CCL MAC and address); a driver without
    /// the peer's MAC may `seal_broadcast` instead (unicast kinds name
    /// their addressee).
    pub fn seal_to(
        &mut self,
        epoch: Epoch,
        msg: &ControlMessage<'_>,
        dst_mac: [u8; 6],
        dst_ip: Ipv4Addr,
        out: &mut [u8],
    ) -> Result<usize, CclError> {
        let path = FramePath { dst_mac, dst_ip, ..self.broadcast };
        self.sealer.seal_control_frame(&path, epoch, msg, out)
    }

    /// Seal what a `Broadcast` or `Send` action asks for, as a broadcast
    /// frame; `None` for other actions.
    pub fn seal_action(&mut self, a: &Action, out: &mut [u8]) -> Option<Result<usize, CclError>> {
        match a {
            Action::Broadcast { epoch, msg } | Action::Send { epoch, msg, .. } => {
                Some(self.seal_broadcast(*epoch, &msg.message(), out))
            }
            _ => None,
        }
    }

    /// Open a control-channel frame received at `now` and give it to `m`.
    /// `Err`: the opener dropped it (and counted why).
    pub fn receive(&mut self, m: &mut Membership, now: Timestamp, frame: &[u8]) -> Result<Received, CclDrop> {
        let o = self.opener.open_control_frame(frame)?;
        let r = m.on_message(now, Envelope::from(&o), &o.msg);
        if matches!(r, Received::DuplicateId | Received::IdInUse) {
            self.opener.forget(o.sender);
        }
        Ok(r)
    }

    /// Control-channel CCL counters: messages out (sealer) and in, drops
    /// by reason (opener).
    pub fn counters(&self) -> CclCounters {
        let mut c = *self.opener.counters();
        c.add(self.sealer.counters());
        c
    }
}
