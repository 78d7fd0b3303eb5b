//! The pipeline's own accounting (every frame `process` is given ends in
//! exactly one of these counters) and `Counters`, the per-worker view that
//! gathers it with the stages' counters for `show stats`.
//!
//! Invariant: `packets == forwarded + consumed + arp_replies +
//! icmp_echo_replies + Σ drops`.

use super::arphold::ArpHoldCounters;
use super::icmperr::IcmpErrorCounters;
use crate::stats::{Stats, Visitor};
use crate::types::{DropReason, PortId};

/// Per-port packet and byte counts.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
}

crate::impl_stats!(PortCounters { counter rx_packets, counter rx_bytes, counter tx_packets, counter tx_bytes });

/// IPv6 classification counts, and the IPv6 stage's (`set_ipv6`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Ipv6Counters {
    pub packets: u64,
    pub tcp: u64,
    pub udp: u64,
    pub icmpv6: u64,
    pub fragments: u64,
    pub other: u64,
    pub path: super::ipv6::Ipv6PathCounters,
}

impl Stats for Ipv6Counters {
    fn visit(&self, v: &mut dyn Visitor) {
        for (name, n) in [
            ("packets", self.packets),
            ("tcp", self.tcp),
            ("udp", self.udp),
            ("icmpv6", self.icmpv6),
            ("fragments", self.fragments),
            ("other", self.other),
        ] {
            v.counter(name, n);
        }
        self.path.visit(v);
    }
}

/// What `Pipeline::process` counts itself: frames in and how each ended.
pub(crate) struct Accounting {
    pub packets: u64,
    pub drops: [u64; DropReason::COUNT],
    pub forwarded: u64,
    pub consumed: u64,
    pub arp_replies: u64,
    pub icmp_echo_replies: u64,
    pub icmp_errors_forwarded: u64,
    /// Frames handed to another worker (`Verdict::Handoff`), and frames
    /// other workers handed to this one (`process_handoff`, also in
    /// `packets`).
    pub handed_off: u64,
    pub handoffs_in: u64,
    pub ports: Vec<PortCounters>,
    pub rx_unknown_port: u64,
}

impl Accounting {
    pub fn new(max_port: usize) -> Self {
        Accounting {
            packets: 0,
            drops: [0; DropReason::COUNT],
            forwarded: 0,
            consumed: 0,
            arp_replies: 0,
            icmp_echo_replies: 0,
            icmp_errors_forwarded: 0,
            handed_off: 0,
            handoffs_in: 0,
            ports: vec![PortCounters::default(); max_port + 1],
            rx_unknown_port: 0,
        }
    }

    /// A frame received on `port`.
    #[inline(always)]
    pub fn rx(&mut self, port: PortId, len: usize) {
        self.packets += 1;
        match self.ports.get_mut(usize::from(port.0)) {
            Some(p) => {
                p.rx_packets += 1;
                p.rx_bytes += len as u64;
            }
            None => self.rx_unknown_port += 1,
        }
    }

    /// A frame leaving on `port`.
    #[inline(always)]
    pub fn tx(&mut self, port: PortId, len: usize) {
        if let Some(pc) = self.ports.get_mut(usize::from(port.0)) {
            pc.tx_packets += 1;
            pc.tx_bytes += len as u64;
        }
    }
}

/// One worker's counters (`Pipeline::counters`, a copy). Invariant:
/// `packets == forwarded + consumed + arp_replies + icmp_echo_replies +
/// drops.iter().sum()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counters {
    /// Frames passed to `process`.
    pub packets: u64,
    /// Per `DropReason::index()`.
    pub drops: [u64; DropReason::COUNT],
    /// Routed to an egress port.
    pub forwarded: u64,
    /// `Verdict::Consumed` (frames held for ARP resolution, fragments held
    /// for their first fragment, a proxied connection's client segments
    /// held for its splice; cluster mode: CCL control messages handled,
    /// frames parked in the pending table).
    pub consumed: u64,
    /// ARP requests answered.
    pub arp_replies: u64,
    /// ICMP echo requests answered.
    pub icmp_echo_replies: u64,
    /// ICMP errors passed because they quote a live flow (also in `forwarded`).
    pub icmp_errors_forwarded: u64,
    /// Frames handed to another worker of the node (`Verdict::Handoff`:
    /// fragments whose connection it owns), and frames taken from other
    /// workers (`process_handoff`, also in `packets`).
    pub handed_off: u64,
    pub handoffs_in: u64,
    /// Flows created by `process` (conntrack has its own stats too).
    pub flows_created: u64,
    /// Embryonic flows evicted for new ones in a full table (early drop).
    pub flows_evicted_embryonic: u64,
    /// Gauges: flows in the table now, and the most it holds.
    pub flows: u64,
    pub flow_capacity: u64,
    /// ARP requests queued for transmission.
    pub arp_requests: u64,
    /// Generated frames not queued because the queue was full.
    pub generated_dropped: u64,
    /// Frames received with an 802.1Q tag.
    pub vlan_tagged: u64,
    /// Frames `process` was given that the fast path handled
    /// (`pipeline::fast`; also in `forwarded`, `consumed` or `drops`; a CCL
    /// datagram counts once, whatever it carried).
    pub fast_path: u64,
    /// Frames held for an unresolved next hop (the ARP hold; `held` is
    /// also in `consumed`).
    pub arp_hold: ArpHoldCounters,
    /// Datagrams split for a smaller egress MTU, and the fragments made
    /// of them (each datagram's first included; the others leave as
    /// generated frames).
    pub fragmented: u64,
    pub fragments_out: u64,
    /// ICMP errors sent by kind, and why others were not sent.
    pub icmp_errors: IcmpErrorCounters,
    pub ipv6: Ipv6Counters,
    /// The flow log's records (zero while it is off).
    pub flow_log: crate::conntrack::FlowLogCounters,
    /// The SYN proxy (`pipeline::synproxy`).
    pub syn_proxy: super::synproxy::SynProxyCounters,
    /// Indexed by `PortId.0`, for every port up to the highest configured.
    pub ports: Vec<PortCounters>,
    /// Frames received on a port beyond the configured ones.
    pub rx_unknown_port: u64,
}

impl Counters {
    pub fn drop_count(&self, r: DropReason) -> u64 {
        self.drops.get(r.index()).copied().unwrap_or(0)
    }
    pub fn dropped(&self) -> u64 {
        self.drops.iter().sum()
    }
    /// Frames whose fate was decided here: every packet but those handed
    /// to another worker.
    pub fn decided(&self) -> u64 {
        self.packets - self.handed_off
    }
    /// Frames that left `process` with a `Forward` verdict.
    pub fn emitted(&self) -> u64 {
        self.forwarded + self.arp_replies + self.icmp_echo_replies
    }
}

impl Stats for Counters {
    /// `show stats`' order: the accounting, the stages' counters, drops by
    /// reason (every reason), per-port counters (label `port`).
    fn visit(&self, v: &mut dyn Visitor) {
        for (name, n) in [
            ("packets", self.packets),
            ("forwarded", self.forwarded),
            ("consumed", self.consumed),
            ("arp_replies", self.arp_replies),
            ("icmp_echo_replies", self.icmp_echo_replies),
            ("icmp_errors_forwarded", self.icmp_errors_forwarded),
            ("handed_off", self.handed_off),
            ("handoffs_in", self.handoffs_in),
            ("flows_created", self.flows_created),
            ("flows_evicted_embryonic", self.flows_evicted_embryonic),
            ("arp_requests", self.arp_requests),
            ("generated_dropped", self.generated_dropped),
            ("vlan_tagged", self.vlan_tagged),
            ("fast_path", self.fast_path),
            ("fragmented", self.fragmented),
            ("fragments_out", self.fragments_out),
        ] {
            v.counter(name, n);
        }
        v.gauge("flows", self.flows);
        v.gauge("flow_capacity", self.flow_capacity);
        v.group("arp_hold", None, &self.arp_hold);
        v.group("icmp_errors", None, &self.icmp_errors);
        v.group("ipv6", None, &self.ipv6);
        v.group("flow_log", None, &self.flow_log);
        v.group("syn_proxy", None, &self.syn_proxy);
        v.counter("dropped", self.dropped());
        v.family("drops", "reason", &mut DropReason::ALL.iter().map(|&r| (r.as_str(), self.drop_count(r))));
        for (i, p) in self.ports.iter().enumerate() {
            v.group("ports", Some(("port", i)), p);
        }
        v.counter("rx_unknown_port", self.rx_unknown_port);
    }
}
