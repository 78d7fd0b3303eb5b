//! The vocabulary every stage of the packet path shares: how a frame
//! arrived (`Rx`), what a stage decided (`Outcome`), what the driver is told
//! (`Verdict`), and the two small facts that travel between stages — a
//! fragment's datagram (`FragNote`) and an owner's sequence translation
//! (`Xlate`). Plain `Copy` data, no behaviour: stages import it from here,
//! never from each other, so the stages form no cycle.

use crate::cluster::SeqDelta;
use crate::frag::L4Head;
use crate::route::IfIndex;
use crate::types::{Direction, DropReason, FiveTuple, PortId, WorkerId};

/// What to do with the buffer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Transmit the (rewritten) buffer on this port.
    Forward(PortId),
    Drop(DropReason),
    /// The pipeline is done with the buffer and keeps nothing pointing to
    /// it: free it. A routed frame was copied to wait for its next hop's
    /// ARP reply (the ARP hold); a fragment was copied into the reassembler
    /// to wait for its datagram's first fragment; or (cluster mode) a CCL
    /// control message was handled, or the frame was copied into the
    /// pending table to wait for an owner reply (counted in
    /// `Counters::consumed`).
    Consumed,
    /// Another worker of this node decides the frame (a fragment whose
    /// connection it owns, `steer`): pass the buffer to that worker with
    /// `Pipeline::handoff_note`, where `Pipeline::process_handoff` takes it.
    Handoff(WorkerId),
}

/// What a stage made of a frame; `Pipeline::account` maps it to counters
/// and a `Verdict`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Forward(PortId),
    Consumed,
    ArpReply(PortId),
    EchoReply(PortId),
    Drop(DropReason),
    Handoff(WorkerId),
}

impl From<DropReason> for Outcome {
    fn from(r: DropReason) -> Self {
        Outcome::Drop(r)
    }
}

impl Outcome {
    /// The port a frame leaves on, if it leaves.
    pub fn port(self) -> Option<PortId> {
        match self {
            Outcome::Forward(p) | Outcome::ArpReply(p) | Outcome::EchoReply(p) => Some(p),
            Outcome::Consumed | Outcome::Drop(_) | Outcome::Handoff(_) => None,
        }
    }
}

/// How a frame reached the IPv4 stage.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    /// Received on a port.
    Port,
    /// Unwrapped from a CCL `ForwardedPacket`/`RelayToOwner`: process as
    /// received on this interface.
    Ccl(IfIndex),
}

/// The per-frame context of one pass through the stages.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Rx {
    pub via: Via,
    /// The owner question is settled (an owner reply named this node):
    /// run conntrack here.
    pub force_own: bool,
    /// A fragment the reassembler has already accounted for, with its
    /// datagram's L4 header and 5-tuple (a held fragment released after
    /// the first one arrived, or a parked fragment released by an owner
    /// reply): it is not inserted again.
    pub frag: Option<FragNote>,
    /// A fragment the fragment owner sent to this node as the flow owner
    /// (R10): it came over the CCL and this node is not its fragment owner,
    /// or its `ForwardedPacket` carried a flow hint. It is decided as at
    /// the owner (a local flow or a drop), never sent back.
    pub hinted: bool,
    /// NAT inbound translated the frame's destination back when it
    /// arrived (`nat.rs`). A frame handed on to another worker or released
    /// by the reassembler keeps it: it is neither translated again nor
    /// source-translated on its way out.
    pub nat_in: bool,
    /// Unwrapped from a `ToControl` (N3): a data node sent the frame of a
    /// new multi-session PAT connection to this node as the control node.
    /// The cluster decides it as received on a port; it is never sent to
    /// the control node again.
    pub to_control: bool,
}

impl Rx {
    pub const PORT: Rx = Rx { via: Via::Port, force_own: false, frag: None, hinted: false, nat_in: false, to_control: false };
    pub const fn ccl(ifx: IfIndex) -> Rx {
        Rx { via: Via::Ccl(ifx), force_own: false, frag: None, hinted: false, nat_in: false, to_control: false }
    }
}

/// A fragment whose datagram's L4 header is known.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FragNote {
    pub l4: L4Head,
    pub tuple: FiveTuple,
}

/// What a frame handed to another worker of the node carries
/// (`Pipeline::handoff_note`, `drain_handoffs`, `process_handoff`): its
/// datagram's five-tuple and L4 header as the handing worker's reassembler
/// learnt them, and how the frame reached the node (a frame unwrapped from
/// the CCL is decided as received on its original interface, a hinted
/// fragment as at the owner).
#[derive(Copy, Clone, Debug)]
pub struct HandoffNote {
    /// `rx.frag` holds the note.
    pub(crate) rx: Rx,
}

impl HandoffNote {
    /// The connection of the handed frame (its worker is
    /// `steer::worker_of_tuple` of it).
    pub fn tuple(&self) -> Option<FiveTuple> {
        self.rx.frag.map(|n| n.tuple)
    }
}

/// Sequence translation for one owner packet (R6), applied by egress.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Xlate {
    pub dir: Direction,
    pub delta: SeqDelta,
    /// The segment is quoted in an ICMP error (translated back towards its
    /// sender, `cluster::translate_quoted`), not carried.
    pub quoted: bool,
    /// The SYN proxy's server-side delta (`conntrack::Splice`; ZERO:
    /// none): the server's sequence space, translated as `delta` is with
    /// the directions' roles swapped (a reply's `seq` grows by it, an
    /// original packet's `ack` and SACK edges shrink by it).
    pub server: SeqDelta,
}

impl Xlate {
    /// The translation of a packet travelling `dir` with the cluster's
    /// delta `delta` (0: none) and a proxied connection's `splice`; `None`
    /// when neither applies.
    #[inline]
    pub fn of(dir: Direction, delta: u32, splice: crate::conntrack::Splice) -> Option<Xlate> {
        let server = match splice {
            crate::conntrack::Splice::Xlate(d) => d,
            _ => 0,
        };
        (delta != 0 || server != 0).then_some(Xlate { dir, delta: SeqDelta(delta), quoted: false, server: SeqDelta(server) })
    }
}
