//! Who runs conntrack on a transit packet (docs/cluster-design.md, "Packet
//! path"), and carrying out a plan other than owning it.

use super::send::Wrap;
use super::{canonical, live, ClusterPath, Link, Record, Role, MAX_HELD, SYN_GUARD_PENDING};
use crate::buf::PacketBuf;
use crate::conntrack::{tcp_flags, ConnTable, L4Info, TcpState, Timeouts};
use crate::pipeline::context::{Outcome, Rx, Via};
use crate::route::IfIndex;
use crate::types::{DropReason, FiveTuple, NodeId, PortId, Timestamp};

/// What the cluster makes of a transit packet.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Plan {
    /// Run conntrack here (owner, or no cluster question).
    Own,
    /// Wrap in a `ForwardedPacket` to this owner.
    Forward(NodeId),
    /// Wrap in a `RelayToOwner` to this director (R7).
    Relay(NodeId),
    /// Ask this director and park the frame.
    Query { director: NodeId, elect: bool },
    /// This node is the director holding the state of a flow whose owner
    /// left: install it (`ClusterPath::take_over`), then run conntrack
    /// here as owner (R11).
    TakeOver,
    /// This node is the director holding the state of a translated flow
    /// whose owner left, and another member holds its binding's block:
    /// hand the flow there (`grant_to`, unasked) and forward the frame
    /// to it (NAT, R11).
    HandTo(NodeId),
    /// Wrap in a `ToControl` to the control node: a new connection under
    /// multi-session PAT, which the control node owns (N3).
    ToControl(NodeId),
    Drop(DropReason),
}

/// Could this packet open a flow at its owner? A TCP SYN, an echo request,
/// UDP other than a DNS answer, another IP protocol.
fn may_open(tuple: &FiveTuple, l4: Option<&L4Info>) -> bool {
    match l4 {
        Some(L4Info::Tcp(seg)) => seg.flags & (tcp_flags::SYN | tcp_flags::ACK) == tcp_flags::SYN,
        Some(L4Info::Udp) => tuple.src_port != 53,
        Some(L4Info::IcmpEchoRequest | L4Info::Other) => true,
        Some(L4Info::IcmpEchoReply) | None => false,
    }
}

impl ClusterPath {
    /// Decide who runs conntrack on a transit packet of a connection this
    /// node knows — its flow here, a record naming its owner, or a frame
    /// from the CCL, which a member sent here as to the owner. `None`: not
    /// known here; `plan_new` decides, after the caller's anti-spoofing
    /// check of a frame from a port (made of a connection's first packets
    /// only, docs/flood.md). `l4` is `None` for an ICMP error quoting
    /// `tuple`.
    pub fn plan_known(
        &mut self,
        now: Timestamp,
        conn: &ConnTable,
        tuple: &FiveTuple,
        l4: Option<&L4Info>,
        rx: Rx,
    ) -> Option<Plan> {
        // 1. We own it.
        if conn.lookup(tuple).is_some() {
            return Some(Plan::Own);
        }
        // Frames unwrapped from the CCL were sent here as to the owner. If
        // the packet may open a flow, adopt it: the director named us owner
        // (R8) but its reply to us was lost, so the sender learnt the owner
        // and we did not. Owning it goes through the ACL and registers with
        // the director like any new flow. Anything else is dropped.
        let me = self.me;
        let key = canonical(tuple);
        if rx.via != Via::Port {
            if may_open(tuple, l4) {
                return Some(Plan::Own);
            }
            // NAT: translated flows change owner while the old one lives
            // (handed to the node their block went back to), so a member
            // may still hold a record naming the old owner and send a
            // frame here. The flow's director knows better: its record
            // decides, as for a frame from a port (takeover or hand-over
            // of an orphan, else its owner); a node that is not the
            // director and holds a record asks the director, whose answer
            // is the owner (no loop: the director never asks).
            let held = self.records.get(&key).is_some_and(|r| live(r, now) && r.owner != me);
            if self.nat.is_none() || !held {
                return Some(Plan::Drop(DropReason::ClusterNoOwnerFlow));
            }
            let director = self.director_of(tuple);
            if director != me {
                return Some(Plan::Query { director, elect: false });
            }
        }
        // 2. A record names another owner: follow it if that owner is a
        //    member. If it left (R11), the flow's director takes the flow
        //    over when it holds the state; anyone else asks the director
        //    (no record from here on).
        let mut orphan = false;
        if let Some(r) = self.records.get_mut(&key) {
            // A record naming this node is an orphan of its previous
            // incarnation (a hand-off, `owner_left`) or not ours to follow.
            if live(r, now) && (r.owner != me || r.owner_left) {
                // `members.contains`, without its range check: a record's
                // owner is a validated node id (< 16).
                if self.members.bits() >> (r.owner.0 & 15) & 1 != 0 && !r.owner_left {
                    if r.role == Role::Forwarder {
                        r.last_seen = now;
                    }
                    return Some(Plan::Forward(r.owner));
                }
                orphan = true;
            }
        }
        if orphan {
            self.counters.dead_owner_records += 1;
            if self.orphan_here(tuple, now) {
                // A translated flow goes to the member holding its
                // binding's block (its return traffic arrives there), which
                // asks this director for it.
                let holder = self.records.get(&key).and_then(|r| self.binding_holder(r.binding));
                if let Some(h) = holder.filter(|&h| h != me) {
                    // Not before the holder applied the member set (it
                    // would refuse the flow): this packet is lost, the
                    // regrant follows (`nat_regrant_step`).
                    if !self.synced(h) {
                        return Some(Plan::Drop(DropReason::ClusterOwnerUnknown));
                    }
                    self.counters.nat_takeovers_redirected += 1;
                    return Some(Plan::HandTo(h));
                }
                return Some(Plan::TakeOver);
            }
        }
        // 3. No record.
        None
    }

    /// `plan_known` found nothing: who runs conntrack on this packet, the
    /// first of its connection here (R1, R7, R8).
    pub fn plan_new(&mut self, now: Timestamp, conn: &ConnTable, tuple: &FiveTuple, l4: Option<&L4Info>) -> Plan {
        let timeouts: Timeouts = *conn.timeouts();
        let me = self.me;
        let key = canonical(tuple);
        let director = self.director_of(tuple);
        let local = director == me;
        let Some(l4) = l4 else {
            // An ICMP error about a flow we know nothing of: the director
            // knows its owner (R7).
            return if local { Plan::Drop(DropReason::NoFlow) } else { Plan::Relay(director) };
        };
        match l4 {
            L4Info::Tcp(seg) => {
                // A flag combination no connection sends (FIN without ACK,
                // NULL, XMAS, SYN with FIN or RST) is dropped here as the
                // owner's conntrack would: a flood of them asks no director
                // (issue 15, flood_kinds).
                if !crate::conntrack::tcp::flags_valid(seg.flags) {
                    return Plan::Drop(DropReason::TcpBadFlags);
                }
                let (syn, ack) = (seg.flags & tcp_flags::SYN != 0, seg.flags & tcp_flags::ACK != 0);
                if syn && !ack {
                    if !local && self.syn_guarded(now) {
                        // The SYN guard (docs/failover.md): after a member
                        // change ECMP may have moved a handshake from its
                        // owner; the director says who owns it (or elects
                        // us, R8) before any cookie ISN leaves — while the
                        // pending table has room for it (a flood).
                        if self.pool.parked() >= SYN_GUARD_PENDING {
                            self.counters.syn_guard_skipped += 1;
                            return Plan::Own;
                        }
                        self.counters.syn_guard_queries += 1;
                        return Plan::Query { director, elect: true };
                    }
                    if local && self.settling(now, conn) {
                        // The director, while owners re-register: the
                        // handshake may be owned elsewhere (`settling`).
                        if self.held.len() >= MAX_HELD / 2 {
                            self.counters.syn_guard_skipped += 1;
                            return Plan::Own;
                        }
                        self.counters.syn_guard_queries += 1;
                        return Plan::Query { director: me, elect: true };
                    }
                    return Plan::Own; // R1: the SYN's receiver owns the connection.
                }
                if ack && !syn && seg.flags & tcp_flags::RST != 0 && seg.payload_len == 0 && self.seq_randomization {
                    // A RST|ACK refusing a SYN acknowledges the cookie ISN
                    // + 1, as a SYN-ACK does (R6): go to the owner without
                    // waiting for its registration to reach the director.
                    if let Some(o) = self.cookies.owner_from_synack_ack(seg.ack) {
                        if o != me && self.members.contains(o) {
                            self.counters.rst_cookie_decoded += 1;
                            return Plan::Forward(o);
                        }
                    }
                }
                if syn && ack && self.seq_randomization {
                    if let Some(o) = self.cookies.owner_from_synack_ack(seg.ack) {
                        if o == me {
                            return Plan::Drop(DropReason::ClusterNoOwnerFlow);
                        }
                        if self.members.contains(o) {
                            // Idle as a half-open connection (`tcp-syn`),
                            // not an established one: SYN-ACKs to spoofed
                            // sources (a SYN flood at a permitted server)
                            // left an hour of records behind, which filled
                            // the table against legitimate connections
                            // (issue 15, flood_kinds). The connection's
                            // packets keep it alive; after a longer silence
                            // the director's record answers a query here.
                            let rec = Record::stateless(
                                Role::Forwarder,
                                o,
                                tuple.reversed(),
                                TcpState::SynReceived as u8,
                                now,
                                timeouts.tcp_syn,
                            );
                            // A table full of grown-up records: the
                            // SYN-ACK still goes to the owner its cookie
                            // names (the record only spares later packets
                            // a query); dropping it cost the connection a
                            // SYN-ACK retransmission (1-3 s, flood_kinds).
                            if !self.upsert(key, rec) {
                                self.counters.record_table_full += 1;
                            }
                            self.counters.synack_cookie_decoded += 1;
                            return Plan::Forward(o);
                        }
                    }
                }
                if !local {
                    Plan::Query { director, elect: false }
                } else if self.local_hold(now) {
                    // The director without a record, while owners may be
                    // registering: wait here for the record (`failover.rs`).
                    Plan::Query { director: me, elect: false }
                } else {
                    Plan::Own
                }
            }
            // Short-lived replies (R7): DNS answers and echo replies go to
            // the director, which relays them to the owner.
            L4Info::Udp if tuple.src_port == 53 => {
                if local {
                    Plan::Own
                } else {
                    Plan::Relay(director)
                }
            }
            L4Info::IcmpEchoReply => {
                if local {
                    Plan::Own
                } else {
                    Plan::Relay(director)
                }
            }
            // May open a flow (R8): the director decides, electing the
            // querier if nobody owns it.
            L4Info::Udp | L4Info::IcmpEchoRequest | L4Info::Other => self.plan_opening(now, conn, tuple),
        }
    }

    /// A packet nobody here knows that may open its connection here (R8):
    /// the director decides, electing this node if nobody owns it — a new
    /// UDP or ICMP flow, or a client's ACK returning a valid SYN-proxy
    /// cookie (any member's: the cookie left no state behind).
    pub fn plan_opening(&mut self, now: Timestamp, conn: &ConnTable, tuple: &FiveTuple) -> Plan {
        let director = self.director_of(tuple);
        if director != self.me {
            Plan::Query { director, elect: true }
        } else if self.settling(now, conn) {
            // The director, while owners re-register: wait for a record
            // before owning it (`settling`).
            Plan::Query { director: self.me, elect: true }
        } else {
            Plan::Own
        }
    }

    /// Carry out a plan other than `Own`. The caller counts a fragment
    /// forwarded to its flow owner (`FragCounters::to_flow_owner`) when this
    /// succeeds with `rx.frag` set.
    #[allow(clippy::too_many_arguments)]
    pub fn act<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        link: &mut Link<'_>,
        in_port: PortId,
        ifx: IfIndex,
        rx: Rx,
        plan: Plan,
        tuple: &FiveTuple,
        buf: &mut B,
    ) -> Result<Outcome, DropReason> {
        let iface = u8::try_from(ifx.0).map_err(|_| DropReason::CclMalformed)?;
        match plan {
            Plan::HandTo(owner) => {
                if !self.grant_to(now, link, owner, 0, &canonical(tuple)) {
                    return Err(DropReason::ClusterOwnerUnknown);
                }
                // Behind the transfer (queued first), in this burst's batch
                // to the new owner: it arrives once the flow is there.
                if !self.batch_forward(now, link, iface, owner, buf.data()) {
                    return Err(DropReason::ClusterOwnerUnknown);
                }
                self.counters.forwarded_to_owner += 1;
                Ok(Outcome::Consumed)
            }
            Plan::Forward(owner) => {
                // A fragment from its fragment owner to the flow owner goes
                // without the flow hint (13 bytes would push a full-size
                // fragment past a 1600-byte CCL MTU): the owner tells it
                // from `fragment_owner` and never sends it back. Fragments
                // go alone; other frames join the burst's batch to the
                // owner (`batch_forward`).
                let outcome = if rx.frag.is_none() && self.batch_forward(now, link, iface, owner, buf.data()) {
                    Outcome::Consumed
                } else {
                    Outcome::Forward(self.wrap(now, link, buf, Wrap::Forward, iface, owner, None)?)
                };
                self.counters.forwarded_to_owner += 1;
                Ok(outcome)
            }
            Plan::Relay(director) => {
                let port = self.wrap(now, link, buf, Wrap::Relay, iface, director, None)?;
                self.counters.relays_sent += 1;
                Ok(Outcome::Forward(port))
            }
            Plan::ToControl(control) => {
                let port = self.wrap(now, link, buf, Wrap::ToControl, iface, control, None)?;
                self.counters.to_control_sent += 1;
                Ok(Outcome::Forward(port))
            }
            Plan::Query { director, elect } => self.park(now, link, in_port, ifx, rx, tuple, buf, director, elect),
            Plan::Drop(r) => Err(r),
            Plan::Own | Plan::TakeOver => Err(DropReason::ClusterNoOwnerFlow),
        }
    }
}
