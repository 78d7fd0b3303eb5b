//! IPv4 fragments on the packet path (SPEC R10; docs/fragments.md,
//! "On the packet path").
//!
//! Every worker owns one `FragPath`: a shallow `frag::Reassembler` and a
//! small pool of frame slots for the fragments it releases. A transit
//! fragment goes through `Pipeline::ipv4_in` like any packet (checks, TTL,
//! route), then:
//!
//! 1. **cluster, received on a port**: if another member is the datagram's
//!    fragment owner (`frag::fragment_owner(src, dst, ident)`), the frame
//!    becomes a `ForwardedPacket` to it in place. A fragment that comes
//!    over the CCL is never sent on to a fragment owner: if this node is
//!    its fragment owner it is collected here, otherwise the fragment
//!    owner sent it here as the flow owner (`Rx::hinted`) — so no loop;
//! 2. otherwise it is inserted into the reassembler: a fragment that
//!    arrives before the first one is held (a copy; `Verdict::Consumed`);
//!    the first fragment (`FirstSeen`) reveals the L4 header, hence the
//!    5-tuple; later fragments come back as `Forward` with that header;
//! 3. a fragment whose tuple is known is decided like an unfragmented
//!    packet of its datagram's connection — the cluster plan (owner,
//!    forward to the owner, ask the director; a relay becomes a query, as
//!    a relayed later fragment carries no ports for the director to read)
//!    and, where this node owns it, conntrack and the ACL — and leaves on
//!    its own, unchanged apart from TTL, MACs and VLAN (and the owner's
//!    sequence translation in the first fragment);
//! 4. after the first fragment has been decided, the fragments held for
//!    its datagram are released (`take_held`): each is rebuilt as a frame
//!    (the first fragment's L2 header and 20-byte IPv4 header, with its own
//!    offset, MF flag, length and checksum) in a pool slot and decided the
//!    same way (`Rx::frag` marks it as accounted for, so it is not inserted
//!    twice); what passes is queued for `drain_generated`. `FragPath` builds
//!    each frame (`next_released`) and files its outcome
//!    (`finish_released`); `Pipeline` decides it in between.
//!
//! Per-fragment policy: the first fragment is tracked with its real L4
//! header; every other fragment with the part of the datagram it carries
//! (TCP: the sequence range `seq + offset − header length`, its length,
//! ACK and, on the last fragment, FIN; UDP/ICMP/other: the tuple). So a
//! denied datagram's fragments are all dropped (`AclDenied` for each), a
//! permitted one's all pass, and TCP windows see every byte. Fragmented
//! ICMP errors are dropped (`NoFlow`): an error quotes at most 576 bytes
//! (RFC 1812 §4.3.2.3) and is never fragmented by a sane sender.
//!
//! Fragments addressed to the node itself are not reassembled (dropped,
//! `Ipv4Fragment`, counted in `FragCounters::local`).
//!
//! Invariants: all memory (reassembler, slots) is reserved by
//! `FragPath::new`; nothing here allocates or panics per packet; every
//! fragment `process` sees still ends in exactly one pipeline counter
//! (held ones in `consumed`), and a held fragment released later ends in
//! `FragCounters::{released, released_parked, release_drops}` or in the
//! reassembler's drop counters (`ReasmCounters`).

use super::context::{FragNote, HandoffNote, Outcome, Rx};
use crate::ccl::{FRAME_OVERHEAD, TAG_LEN};
use crate::conntrack::{tcp_flags, L4Info, TcpSeg};
use crate::frag::{
    FragInfo, FragKey, FragResult, L4Head, ReasmConfig, ReasmConfigError, ReasmCounters, ReasmMode, Reassembler,
};
use crate::frag::split::{self, Split};
use crate::slots::{FramePool, SlotMem, SLOT_HEADROOM};
use crate::stats::{Stats, Visitor};
use crate::types::{ip_proto, DropReason, PortId, Timestamp, WorkerId};
use crate::wire::icmp::msg_type;
use crate::wire::icmpv6;
use crate::wire::ipv4::{Ipv4Packet, FLAG_MF, MIN_HEADER_LEN};
use crate::wire::tcp::{TcpOptions, TcpPacket};

/// Reassembly contexts inspected per `poll_timers` call.
pub const FRAG_EXPIRE_BUDGET: usize = 256;
/// Longest L2 header of a template (Ethernet and one VLAN tag).
const MAX_L2: usize = 18;

/// Fragment handling limits of one worker, reserved by `Pipeline::new`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FragConfig {
    /// The reassembler's limits (contexts, fragments per datagram, arena,
    /// timeout). The packet path uses it in shallow mode whatever `mode`
    /// says: nothing on it rewrites L4 beyond the first fragment's header.
    pub reasm: ReasmConfig,
    /// Frame slots (2 KiB each) for released held fragments between two
    /// `drain_generated` calls.
    pub out_slots: usize,
}

impl Default for FragConfig {
    /// `ReasmConfig::default()` (1024 datagrams, 64 fragments each, 4 MiB
    /// arena, 2 s) in shallow mode, and 128 out slots (256 KiB): about
    /// 5.1 MiB per worker.
    fn default() -> Self {
        FragConfig { reasm: ReasmConfig::default().shallow(), out_slots: 128 }
    }
}

/// Fragment counters of one worker (`Pipeline::frag_counters`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct FragCounters {
    /// Transit fragments given to the reassembler by `process`.
    pub inserted: u64,
    /// Of those, held until their first fragment (`Verdict::Consumed`).
    pub held: u64,
    /// Held fragments released and sent on (egress port or CCL).
    pub released: u64,
    /// Held fragments released into the cluster's pending table (waiting
    /// for an owner reply, with their datagram's first fragment) or into
    /// the ARP hold queue (waiting for the next hop's MAC, `arphold`).
    pub released_parked: u64,
    /// Held fragments released and then dropped (policy, ARP, no slot);
    /// by reason in `FragSnapshot::release_drops`.
    pub release_drops: u64,
    /// Cluster: fragments sent to their fragment owner over the CCL.
    pub to_fragment_owner: u64,
    /// Cluster: fragments the fragment owner sent on to the flow owner
    /// (with the flow hint).
    pub to_flow_owner: u64,
    /// Cluster: fragments received with a flow hint (this node is the
    /// flow owner; never sent back to the fragment owner).
    pub from_fragment_owner: u64,
    /// Fragments addressed to this node: not reassembled, dropped
    /// (`ipv4-fragment`).
    pub local: u64,
    /// Fragments (held, released or split back) handed to the worker that
    /// owns their connection (several workers, `steer`).
    pub handed_off: u64,
    /// Datagrams larger than their ingress interface's MTU, as a port
    /// hands them over after the kernel reassembled them (af_packet), split
    /// back into fragments; and the fragments made (the first included;
    /// the others are decided like released fragments and counted in
    /// `released`, `released_parked`, `release_drops`).
    pub split_datagrams: u64,
    pub split_fragments: u64,
}

crate::impl_stats!(FragCounters {
    counter inserted,
    counter held,
    counter released,
    counter released_parked,
    counter release_drops,
    counter to_fragment_owner,
    counter to_flow_owner,
    counter from_fragment_owner,
    counter local,
    counter handed_off,
    counter split_datagrams,
    counter split_fragments,
});

/// `show stats` for fragments (a copy, off the packet path): the path's
/// counters, the reassembler's, and drops by reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FragSnapshot {
    pub counters: FragCounters,
    /// The reassembler's counters; its drops are the fragments it dropped
    /// (the offending fragment and the held fragments of a discarded
    /// datagram).
    pub reasm: ReasmCounters,
    /// Released held fragments dropped, by `DropReason::index()`.
    pub release_drops: [u64; DropReason::COUNT],
    /// Datagrams in reassembly now, fragments held now.
    pub contexts: u64,
    pub held_now: u64,
    /// Bytes reserved for fragments (reassembler and slots).
    pub memory_bytes: u64,
}

impl Stats for FragSnapshot {
    fn visit(&self, v: &mut dyn Visitor) {
        self.counters.visit(v);
        v.gauge("contexts", self.contexts);
        v.gauge("held_now", self.held_now);
        let r = &self.reasm;
        v.counter("datagrams", r.datagrams);
        v.counter("first_seen", r.first_seen);
        v.counter("forwarded_datagrams", r.forwarded_datagrams);
        v.counter("datagrams_dropped", r.datagrams_dropped);
        v.family("reasm_drops", "reason", &mut DropReason::ALL.iter().map(|&d| (d.as_str(), r.dropped(d))));
        let rel = &self.release_drops;
        v.family(
            "release_drops",
            "reason",
            &mut DropReason::ALL.iter().map(|&d| (d.as_str(), rel.get(d.index()).copied().unwrap_or(0))),
        );
        v.gauge("memory_bytes", self.memory_bytes);
    }
}

/// How a fragment is tracked (`frag_track`).
#[derive(Copy, Clone, Debug)]
pub(crate) enum FragTrack {
    /// Conntrack (and the ACL on creation) with this L4 summary.
    Track(L4Info),
    /// A later piece of a TCP segment without ACK (a SYN or RST carrying
    /// data): passes if the flow exists, nothing to track.
    Lookup(L4Info),
}

impl FragTrack {
    pub(crate) fn l4(&self) -> &L4Info {
        match self {
            FragTrack::Track(l) | FragTrack::Lookup(l) => l,
        }
    }
}

/// A fragment in a slot that goes to another worker (`Step::Handoff`):
/// where, received on which port, with what its reassembler learnt.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Handed {
    pub worker: WorkerId,
    pub in_port: PortId,
    pub note: HandoffNote,
}

/// One worker's fragment path (`Pipeline`'s fragment stage).
pub(crate) struct FragPath {
    reasm: Reassembler,
    /// Released held fragments waiting for `drain`; fragments handed to
    /// another worker are parked (with where they go) until
    /// `drain_handoffs`.
    pool: FramePool<Handed>,
    /// The parked slots in the order they were handed off.
    handoffs: Vec<u16>,
    pub counters: FragCounters,
    release_drops: [u64; DropReason::COUNT],
    /// Slots of a split datagram's later fragments, waiting to be decided
    /// (`stage_split`, `next_staged`); capacity reserved for every slot.
    staged: Vec<u16>,
}

/// What the reassembler made of a fragment (`FragPath::admit`).
pub(crate) enum Admit {
    /// Held until its datagram's first fragment arrives.
    Held,
    /// The first fragment: its datagram is now known, and fragments held
    /// for it are to be released once it is decided.
    First(FragNote),
    /// A later fragment of a datagram whose first fragment was seen.
    Later(FragNote),
}

impl FragPath {
    /// `slot_len`: bytes per released fragment's slot.
    pub fn new(cfg: &FragConfig, slot_len: usize) -> Result<Self, ReasmConfigError> {
        let reasm = Reassembler::new(ReasmConfig { mode: ReasmMode::Shallow, ..cfg.reasm })?;
        Ok(FragPath {
            reasm,
            pool: FramePool::new(cfg.out_slots.max(1), slot_len),
            counters: FragCounters::default(),
            release_drops: [0; DropReason::COUNT],
            staged: Vec::with_capacity(cfg.out_slots.max(1)),
            handoffs: Vec::with_capacity(cfg.out_slots.max(1)),
        })
    }

    fn release_drop(&mut self, r: DropReason) {
        self.counters.release_drops += 1;
        if let Some(c) = self.release_drops.get_mut(r.index()) {
            *c += 1;
        }
    }

    /// Give a transit fragment to the reassembler (`hinted`: it came from
    /// its fragment owner, this node being the flow owner).
    pub fn admit(&mut self, now: Timestamp, info: &FragInfo, payload: &[u8], hinted: bool) -> Result<Admit, DropReason> {
        self.counters.inserted += 1;
        if hinted {
            self.counters.from_fragment_owner += 1;
        }
        let note = |l4: L4Head| FragNote { l4, tuple: l4.five_tuple(&info.key) };
        match self.reasm.insert(now, info, payload) {
            FragResult::Pending => {
                self.counters.held += 1;
                Ok(Admit::Held)
            }
            FragResult::FirstSeen { l4 } => Ok(Admit::First(note(l4))),
            FragResult::Forward { l4 } => Ok(Admit::Later(note(l4))),
            // Shallow mode never completes a datagram, and an IPv4
            // fragment is never atomic.
            FragResult::Complete { .. } | FragResult::Unfragmented => Err(DropReason::Ipv4Fragment),
            FragResult::Drop(r) => Err(r),
        }
    }

    /// A fragment addressed to this node: not reassembled.
    pub fn local(&mut self) -> DropReason {
        self.counters.local += 1;
        DropReason::Ipv4Fragment
    }
}

/// Longest L3 header of a template: IPv6's and a Fragment header (an
/// IPv4 template uses the first 20 bytes).
const MAX_L3_TMPL: usize = crate::wire::ipv6::HEADER_LEN + crate::wire::ipv6::FRAGMENT_HEADER_LEN;

/// The first fragment of a datagram, whose held fragments are released
/// once it has been decided (`FragPath::next_released`).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Release {
    pub key: FragKey,
    pub note: FragNote,
    pub in_port: PortId,
    pub rx: Rx,
    /// The first fragment's L2 header and its 20-byte IPv4 header as
    /// received; or (`v6`) its IPv6 header, then a Fragment header of the
    /// datagram (the unfragmentable extension headers are not repeated).
    pub tmpl: [u8; MAX_L2 + MAX_L3_TMPL],
    pub l2: usize,
    pub v6: bool,
}

impl Release {
    /// `None` when the L2 header is longer than one VLAN tag (never
    /// reached: QinQ frames are dropped earlier).
    pub fn new(key: FragKey, note: FragNote, in_port: PortId, rx: Rx, frame: &[u8], l2: usize) -> Option<Self> {
        let mut tmpl = [0u8; MAX_L2 + MAX_L3_TMPL];
        let src = frame.get(..l2 + MIN_HEADER_LEN).filter(|_| l2 <= MAX_L2)?;
        tmpl.get_mut(..src.len())?.copy_from_slice(src);
        Some(Release { key, note, in_port, rx, tmpl, l2, v6: false })
    }

    /// The same for an IPv6 datagram: its first fragment's L2 and IPv6
    /// headers, and a Fragment header naming the datagram (`key`).
    pub fn new_v6(key: FragKey, note: FragNote, in_port: PortId, rx: Rx, frame: &[u8], l2: usize) -> Option<Self> {
        use crate::wire::ipv6::{self, Ipv6Packet};
        let mut tmpl = [0u8; MAX_L2 + MAX_L3_TMPL];
        let src = frame.get(..l2 + ipv6::HEADER_LEN).filter(|_| l2 <= MAX_L2)?;
        tmpl.get_mut(..src.len())?.copy_from_slice(src);
        Ipv6Packet::new_unchecked(tmpl.get_mut(l2..l2 + ipv6::HEADER_LEN)?).set_next_header(ipv6::next_header::FRAGMENT);
        let fh = tmpl.get_mut(l2 + ipv6::HEADER_LEN..l2 + MAX_L3_TMPL)?;
        ipv6::emit_fragment_header(fh, key.proto, 0, false, key.ident);
        Some(Release { key, note, in_port, rx, tmpl, l2, v6: true })
    }

    /// The template's length: L2 and L3 headers.
    fn header_len(&self) -> usize {
        self.l2 + if self.v6 { MAX_L3_TMPL } else { MIN_HEADER_LEN }
    }
}

/// What conntrack sees of one fragment of the datagram whose L4 header is
/// `l4`: the fragment carries `len` bytes at `offset`; `more` is its MF
/// flag. See the module doc.
pub(crate) fn frag_track(l4: &L4Head, offset: u16, len: usize, more: bool) -> Result<FragTrack, DropReason> {
    Ok(match l4.proto {
        ip_proto::TCP => {
            let t = TcpPacket::new_checked(l4.bytes()).map_err(|_| DropReason::FragTinyFirst)?;
            let hl = t.header_len() as u32;
            let flags = t.flags();
            let fin = tcp_flags::FIN;
            let (seq, payload_len, flags, opts) = if offset == 0 {
                // The first fragment: its own share; FIN belongs to the end.
                let opts =
                    if flags & tcp_flags::SYN != 0 { TcpOptions::parse(t.options()) } else { TcpOptions::default() };
                (t.seq(), (len as u32).saturating_sub(hl), flags & !fin, opts)
            } else {
                let keep = if more { !(tcp_flags::SYN | tcp_flags::RST | fin) } else { !(tcp_flags::SYN | tcp_flags::RST) };
                let seq = t.seq().wrapping_add(u32::from(offset)).wrapping_sub(hl);
                (seq, len as u32, flags & keep, TcpOptions::default())
            };
            let seg = TcpSeg {
                flags,
                seq,
                ack: t.ack(),
                window: t.window(),
                payload_len,
                wscale: opts.wscale,
                sack_permitted: opts.sack_permitted,
            };
            if offset != 0 && flags & tcp_flags::ACK == 0 {
                FragTrack::Lookup(L4Info::Tcp(seg))
            } else {
                FragTrack::Track(L4Info::Tcp(seg))
            }
        }
        ip_proto::UDP => FragTrack::Track(L4Info::Udp),
        ip_proto::ICMP => match l4.bytes().first().copied() {
            Some(msg_type::ECHO_REQUEST) => FragTrack::Track(L4Info::IcmpEchoRequest),
            Some(msg_type::ECHO_REPLY) => FragTrack::Track(L4Info::IcmpEchoReply),
            Some(msg_type::DEST_UNREACHABLE | msg_type::TIME_EXCEEDED | msg_type::PARAMETER_PROBLEM) => {
                return Err(DropReason::NoFlow)
            }
            _ => FragTrack::Track(L4Info::Other),
        },
        ip_proto::ICMPV6 => match l4.bytes().first().copied() {
            Some(icmpv6::msg_type::ECHO_REQUEST) => FragTrack::Track(L4Info::IcmpEchoRequest),
            Some(icmpv6::msg_type::ECHO_REPLY) => FragTrack::Track(L4Info::IcmpEchoReply),
            Some(t) if icmpv6::is_error(t) => return Err(DropReason::NoFlow),
            _ => FragTrack::Track(L4Info::Other),
        },
        _ => FragTrack::Track(L4Info::Other),
    })
}

impl FragPath {
    /// The next fragment held for the datagram of `r` (its first fragment
    /// has just been decided), rebuilt as a frame in a slot whose buffer is
    /// handed out for the pipeline to decide it; `finish_released` takes it
    /// back. Fragments that cannot be rebuilt are counted and skipped;
    /// `None` when none is left.
    pub fn next_released(&mut self, r: &Release) -> Option<(u16, SlotMem, usize, usize)> {
        let hl = r.header_len();
        loop {
            let FragPath { reasm, pool, .. } = self;
            let h = reasm.take_held(&r.key)?;
            if h.offset == 0 {
                continue; // the first fragment: it is the one in hand
            }
            let n = hl + h.data.len();
            let room = SLOT_HEADROOM + n + TAG_LEN <= pool.slot_len() && SLOT_HEADROOM >= FRAME_OVERHEAD - TAG_LEN;
            let slot = if room { pool.alloc() } else { None };
            let Some(i) = slot else {
                self.release_drop(DropReason::FragNoBuffer);
                continue;
            };
            let built = pool
                .mem_mut(i)
                .and_then(|b| b.get_mut(SLOT_HEADROOM..SLOT_HEADROOM + n))
                .map(|f| {
                    f[..hl].copy_from_slice(&r.tmpl[..hl]);
                    f[hl..].copy_from_slice(h.data);
                    if r.v6 {
                        use crate::wire::ipv6::{self, Ipv6Packet};
                        let (ip, fh) = f[r.l2..hl].split_at_mut(ipv6::HEADER_LEN);
                        Ipv6Packet::new_unchecked(ip).set_payload_len((MAX_L3_TMPL - ipv6::HEADER_LEN + h.data.len()) as u16);
                        ipv6::emit_fragment_header(fh, r.key.proto, h.offset, h.more, r.key.ident);
                    } else {
                        let mut ip = Ipv4Packet::new_unchecked(&mut f[r.l2..hl]);
                        ip.set_version_ihl(MIN_HEADER_LEN);
                        ip.set_total_len((MIN_HEADER_LEN + h.data.len()) as u16);
                        ip.set_flags_frag(if h.more { FLAG_MF } else { 0 }, h.offset);
                        ip.fill_checksum();
                    }
                })
                .is_some();
            if !built {
                pool.give_back(i);
                self.release_drop(DropReason::FragNoBuffer);
                continue;
            }
            pool.set_frame(i, SLOT_HEADROOM, n);
            // Decided by the pipeline; the slot's box is out meanwhile.
            match self.pool.take(i) {
                Some((b, start, end)) => return Some((i, b, start, end)),
                None => self.pool.give_back(i),
            }
        }
    }

    /// Stage the later fragments (2.. of `s`) of the datagram in `frame`
    /// in slots, to be decided as received (`next_staged`), leaving
    /// `frame` as it is; `false` (nothing staged) when the slots do not
    /// hold them.
    pub fn stage_split(&mut self, frame: &[u8], s: &Split) -> bool {
        self.staged.clear();
        for k in 1..s.count {
            let slot = self.pool.alloc();
            let written = slot.and_then(|i| {
                let mem = self.pool.mem_mut(i)?.get_mut(SLOT_HEADROOM..)?;
                split::write_fragment(frame, s, k, mem)
            });
            match (slot, written) {
                (Some(i), Some(n)) if SLOT_HEADROOM + n + TAG_LEN <= self.pool.slot_len() => {
                    self.pool.set_frame(i, SLOT_HEADROOM, n);
                    self.staged.push(i);
                }
                (slot, _) => {
                    if let Some(i) = slot {
                        self.pool.give_back(i);
                    }
                    for &i in &self.staged {
                        self.pool.give_back(i);
                    }
                    self.staged.clear();
                    return false;
                }
            }
        }
        self.counters.split_datagrams += 1;
        self.counters.split_fragments += s.count as u64;
        // Handed out first to last.
        self.staged.reverse();
        true
    }

    /// The next staged fragment of a split datagram, its buffer handed out
    /// for the pipeline to decide it (`finish_released` takes it back).
    pub fn next_staged(&mut self) -> Option<(u16, SlotMem, usize, usize)> {
        loop {
            let i = self.staged.pop()?;
            match self.pool.take(i) {
                Some((b, start, end)) => return Some((i, b, start, end)),
                None => self.pool.give_back(i),
            }
        }
    }

    /// File the outcome of a fragment from `next_released` or
    /// `next_staged`, its frame now at `start..end` of `mem`: queued for
    /// output, parked for another worker (`handed`: its port and note,
    /// with `Outcome::Handoff`), or its slot freed.
    pub fn finish_released(
        &mut self,
        i: u16,
        mem: SlotMem,
        start: usize,
        end: usize,
        outcome: Outcome,
        handed: Option<(PortId, HandoffNote)>,
    ) {
        self.pool.put_back(i, mem, start, end);
        match outcome {
            Outcome::Handoff(worker) => match handed {
                Some((in_port, note)) => {
                    self.counters.handed_off += 1;
                    self.pool.park(i, Handed { worker, in_port, note });
                    self.handoffs.push(i);
                }
                None => {
                    self.release_drop(DropReason::FragNoBuffer);
                    self.pool.give_back(i);
                }
            },
            Outcome::Forward(p) | Outcome::ArpReply(p) | Outcome::EchoReply(p) => {
                self.counters.released += 1;
                self.pool.push_out(i, p);
            }
            Outcome::Consumed => {
                self.counters.released_parked += 1;
                self.pool.give_back(i);
            }
            Outcome::Drop(reason) => {
                self.release_drop(reason);
                self.pool.give_back(i);
            }
        }
    }

    /// Hand the released fragments to `f` (from `drain_generated`).
    pub fn drain(&mut self, f: &mut impl FnMut(PortId, &[u8])) {
        self.pool.drain(f);
    }

    /// Hand the fragments parked for other workers to `f`, in order, and
    /// free their slots.
    pub fn drain_handoffs(&mut self, f: &mut impl FnMut(&Handed, &[u8])) {
        for k in 0..self.handoffs.len() {
            let Some(&i) = self.handoffs.get(k) else { continue };
            if let (Some(h), Some(frame)) = (self.pool.parked_meta(i), self.pool.frame_mut(i)) {
                f(&h, frame);
            }
            self.pool.release(i);
        }
        self.handoffs.clear();
    }

    /// Housekeeping: expire reassembly contexts (bounded).
    pub fn timers(&mut self, now: Timestamp) {
        self.reasm.expire(now, FRAG_EXPIRE_BUDGET);
    }

    /// The reassembler's counters (drops by reason, conservation).
    pub fn reasm_counters(&self) -> &ReasmCounters {
        self.reasm.counters()
    }
    /// Datagrams in reassembly and fragments held now.
    pub fn in_progress(&self) -> (usize, usize) {
        (self.reasm.len(), self.reasm.held_fragments())
    }
    /// Released held fragments dropped for `r`.
    pub fn release_drops(&self, r: DropReason) -> u64 {
        self.release_drops.get(r.index()).copied().unwrap_or(0)
    }
    /// Bytes reserved for fragment handling: constant after `new`.
    pub fn memory_bytes(&self) -> usize {
        self.reasm.memory_bytes() + self.pool.memory_bytes()
    }

    /// `show stats` (off the packet path).
    pub fn snapshot(&self) -> FragSnapshot {
        FragSnapshot {
            counters: self.counters,
            reasm: *self.reasm.counters(),
            release_drops: self.release_drops,
            contexts: self.reasm.len() as u64,
            held_now: self.reasm.held_fragments() as u64,
            memory_bytes: self.memory_bytes() as u64,
        }
    }
}
