//! The byte side of membership: sealing its broadcasts and opening the
//! control-channel frames it receives, with the one CCL codec
//! (`dataplane::ccl`). No transport: the driver moves the bytes.
//!
//! Why a layer of its own and not the driver's: the node and the simulator
//! must put the same heartbeats on their CCLs (same channel, same replay
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
//! membership machine; nothing here panics on any input.

use super::{Envelope, Membership, Received};
use dataplane::ccl::{CclCounters, CclDrop, CclError, CclKey, FramePath, Message, Opener, Sealer, CONTROL_CHANNEL};
use dataplane::{Epoch, NodeId, Timestamp};

/// Room for any frame membership sends today (a heartbeat frame is
/// `FRAME_OVERHEAD` + 4 = 96 bytes).
pub const MAX_CONTROL_FRAME: usize = 256;

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

    /// Seal `msg` (an `Action::Broadcast`) as a broadcast frame into
    /// `out`; returns the frame length.
    pub fn seal_broadcast(&mut self, epoch: Epoch, msg: &Message<'_>, out: &mut [u8]) -> Result<usize, CclError> {
        self.sealer.seal_frame(&self.broadcast, epoch, msg, out)
    }

    /// Open a control-channel frame received at `now` and give it to `m`.
    /// `Err`: the opener dropped it (and counted why).
    pub fn receive(&mut self, m: &mut Membership, now: Timestamp, frame: &[u8]) -> Result<Received, CclDrop> {
        let o = self.opener.open_frame(frame)?;
        Ok(m.on_message(now, Envelope::from(&o), &o.msg))
    }

    /// Control-channel CCL counters: heartbeats out (sealer) and in,
    /// drops by reason (opener).
    pub fn counters(&self) -> CclCounters {
        let mut c = *self.opener.counters();
        c.add(self.sealer.counters());
        c
    }
}
