//! Fragmented datagrams in the simulator (issue 4, SPEC R10): UDP flows
//! whose datagrams exceed the hosts' 1500-byte MTU, fragmented by the
//! sending host, spread over the nodes by the routers, and reassembled by
//! the receiving host.
//!
//! - **Hosts.** A datagram larger than `HOST_MTU` is cut into fragments of
//!   at most `HOST_MTU` bytes (IPv4: 1480 data bytes, a multiple of 8),
//!   each with the datagram's identification (a per (source, destination)
//!   counter), its offset, MF on all but the last and a fresh header
//!   checksum; an IPv6 datagram (`SimConfig::ipv6_share` of the fragmented
//!   flows) gets a Fragment header (RFC 8200 §4.5: 1448 data bytes per
//!   fragment, a 32-bit identification, the M flag). The
//!   receiving host collects the fragments of a datagram, rebuilds it once
//!   it has every byte, and hands it to the UDP model, which verifies the
//!   UDP checksum and every payload byte.
//! - **Routers.** Fragments are hashed on (src, dst, proto) by default
//!   (`Router::pick_fragment`); `SimConfig::spread_fragments` hashes the
//!   identification and offset too, so the fragments of one datagram land
//!   on different nodes on purpose.
//! - **Attribution.** The simulator remembers which flow each datagram it
//!   fragmented belongs to, so a fragment a node sends towards a host
//!   (which has no ports) counts for its connection in `single-transmitter`
//!   and `transmitter-is-owner` like any frame.
//! - **Invariants** (only when the scenario has fragmented flows):
//!   `fragments-valid` (no fragment over the MTU, duplicated, overlapping,
//!   of an unknown datagram or left unreassembled at a host),
//!   `fragments-from-owner` (every fragment reaching a host comes from the
//!   flow's one owner), `fragment-owner-owns-new-flow` (a connection whose
//!   first datagram was fragmented is owned by that datagram's fragment
//!   owner, `docs/fragments.md` "New connection").

use super::host::{UdpClient, UdpServer};
use super::net::{self, FragHeader, Side};
use super::report::Invariant;
use super::{cluster, Flow, FlowKind, Sim, SimConfig, WARMUP_NS};
use dataplane::cluster::DirectorTable;
use dataplane::frag::fragment_owner;
use dataplane::types::{ip_proto, FiveTuple};
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::wire::ipv6::{self, Ipv6Packet};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// The hosts' IP MTU.
pub const HOST_MTU: usize = 1500;
/// Ethernet header of host frames (untagged).
const ETH_HDR: usize = 14;
/// A host frame longer than this is fragmented.
pub const FRAME_MTU: usize = ETH_HDR + HOST_MTU;
/// Server ports of the fragmented flows (no other flow uses them).
pub const FRAG_PORT_BASE: u16 = 7000;
/// IPv4 fragment bit.
const FLAG_MF: u16 = 0x2000;
/// IPv6 header and Fragment header.
const IPV6_FRAG_HDRS: usize = ipv6::HEADER_LEN + ipv6::FRAGMENT_HEADER_LEN;

/// The fragmented flows of a scenario.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct FragScenario {
    /// UDP flows with the exchanges below.
    pub flows: usize,
    /// (request, response) payload bytes of each exchange, in order; a
    /// datagram over the MTU is fragmented (e.g. 4000 and 8000 bytes).
    pub exchanges: Vec<(u32, u32)>,
    /// Routers hash each fragment on its identification and offset too.
    pub spread_fragments: bool,
}

impl SimConfig {
    /// Add `flows` UDP flows doing `exchanges` (see `FragScenario`).
    pub fn fragmented(mut self, flows: usize, exchanges: &[(u32, u32)]) -> Self {
        self.frag.flows = flows;
        self.frag.exchanges = exchanges.to_vec();
        self
    }
    /// Spread the fragments of a datagram over the nodes.
    pub fn spread_fragments(mut self, on: bool) -> Self {
        self.frag.spread_fragments = on;
        self
    }
}

/// What the fragmented flows did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FragReport {
    pub flows: usize,
    /// Datagrams the hosts fragmented, and their fragments.
    pub datagrams_sent: u64,
    pub fragments_sent: u64,
    /// Datagrams whose fragments entered the cluster at two nodes or more.
    pub datagrams_spread: u64,
    /// Fragments that reached a host.
    pub fragments_delivered: u64,
    /// Datagrams the hosts rebuilt from fragments.
    pub datagrams_reassembled: u64,
    /// Of `datagrams_sent` and `datagrams_reassembled`, IPv6 ones
    /// (Fragment header).
    pub ipv6_datagrams_sent: u64,
    pub ipv6_datagrams_reassembled: u64,
    /// Fragments over the MTU, duplicated, overlapping or of no datagram.
    pub bad_fragments: u64,
    /// Datagrams a host still had in pieces at the end.
    pub partial_at_end: u64,
    /// Flows whose first datagram was fragmented and whose owner was
    /// compared with its fragment owner.
    pub new_flows_checked: u64,
}

/// (src, dst, proto, ident): one datagram.
type DgKey = (IpAddr, IpAddr, u8, u32);

fn dg_key(h: &FragHeader) -> DgKey {
    (h.src, h.dst, h.proto, h.ident)
}

struct Datagram {
    flow: u32,
    /// Nodes its fragments entered (bit per node).
    entry: u16,
}

#[derive(Default)]
struct Partial {
    /// Ethernet + IP header of the first fragment (IPv6: without its
    /// Fragment header).
    header: Option<Vec<u8>>,
    pieces: BTreeMap<u16, Vec<u8>>,
    /// Payload length, once the last fragment arrived.
    total: Option<usize>,
}

/// The simulator's fragment bookkeeping.
#[derive(Default)]
pub(super) struct FragState {
    next_ident: HashMap<(IpAddr, IpAddr), u32>,
    datagrams: HashMap<DgKey, Datagram>,
    /// Flow → the client's datagrams of its first exchange (the first
    /// try and any retries), when that exchange is fragmented.
    first: BTreeMap<u32, Vec<DgKey>>,
    /// Flow → nodes that sent its fragments to hosts.
    frag_tx: BTreeMap<u32, u16>,
    partial: HashMap<DgKey, Partial>,
    flows: Vec<u32>,
    examples: Vec<String>,
    report: FragReport,
}

impl FragState {
    fn bad(&mut self, now: u64, what: String) {
        self.report.bad_fragments += 1;
        if self.examples.len() < 10 {
            self.examples.push(format!("t={}µs {what}", now / 1000));
        }
    }
}

impl Sim {
    /// Create the scenario's fragmented UDP flows (own RNG stream: the
    /// other flows are the same with or without them).
    pub(super) fn make_frag_flows(&mut self) {
        let sc = self.cfg.frag.clone();
        if sc.flows == 0 || sc.exchanges.is_empty() {
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(net::mix64(self.cfg.seed ^ 0xf7a9));
        for i in 0..sc.flows {
            let (ci, si) = (rng.random_range(0..net::CLIENT_HOSTS), rng.random_range(0..net::SERVER_HOSTS));
            let (client, server) = if super::ipv6_flow(i, self.cfg.ipv6_share) {
                (IpAddr::V6(net::client_addr6(ci)), IpAddr::V6(net::server_addr6(si)))
            } else {
                (IpAddr::V4(net::client_addr(ci)), IpAddr::V4(net::server_addr(si)))
            };
            let dport = FRAG_PORT_BASE + (i % 10) as u16;
            let tuple = loop {
                let t = FiveTuple {
                    src: client,
                    dst: server,
                    proto: ip_proto::UDP,
                    src_port: rng.random_range(1024..=65535u16),
                    dst_port: dport,
                };
                if !self.by_tuple.contains_key(&t) {
                    break t;
                }
            };
            let id = self.flows.len() as u32;
            let (cl, sv) = ((client, tuple.src_port), (server, dport));
            let (req, resp) = sc.exchanges[0];
            let mut c = Box::new(UdpClient::new(
                id,
                cl,
                sv,
                sc.exchanges.len() as u16,
                req,
                resp,
            ));
            c.sizes = sc.exchanges.clone();
            let s = Box::new(UdpServer {
                flow: id,
                response_len: resp,
                request_len: req,
                requests: 0,
                failures: Vec::new(),
                sizes: sc.exchanges.clone(),
            });
            let start_ns = WARMUP_NS + rng.random_range(0..self.cfg.start_window_ns.max(1));
            let entry = [
                self.routers[0].pick(&tuple, self.cfg.nodes),
                self.routers[1].pick(&tuple.reversed(), self.cfg.nodes),
            ];
            self.by_tuple.insert(tuple, id);
            self.flows.push(Flow {
                tuple,
                kind: FlowKind::Udp { c, s },
                dns: false,
                icmp: false,
                after: None,
                planned_idle_ns: 0,
                start_ns,
                first_start: start_ns,
                tx_nodes: 0,
                delivered: [0; 2],
                owner_seen: None,
                end_checked: false,
                started: false,
                entry,
            });
            self.frag.flows.push(id);
            self.schedule(start_ns, super::Ev::FlowStart(id));
            self.open_flows += 1;
        }
        self.frag.report.flows = sc.flows;
    }

    /// A host on `side` sends a frame over the MTU: cut it into fragments
    /// (empty if it is not an IPv4 datagram of a known flow).
    pub(super) fn fragment_datagram(&mut self, side: Side, frame: &[u8]) -> Vec<Vec<u8>> {
        let Some(t) = net::frame_tuple(frame) else {
            return Vec::new();
        };
        let key = if side == Side::Inside {
            t
        } else {
            t.reversed()
        };
        let Some(&flow) = self.by_tuple.get(&key) else {
            return Vec::new();
        };
        let Some(ip) = net::frame_ip(frame) else {
            return Vec::new();
        };
        let (l2, src, dst, proto, data, ip_v6) = (ip.l3_at, ip.src, ip.dst, ip.proto, ip.l4, ip.is_v6());
        // The UDP model's exchange number (after the UDP header and the
        // 4-byte flow number).
        let xchg = data.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]]));
        let ctr = self.frag.next_ident.entry((src, dst)).or_insert(0x4000);
        *ctr = ctr.wrapping_add(1);
        let ident = *ctr;
        let mut out = Vec::new();
        let mut off = 0usize;
        if ip.is_v6() {
            let (IpAddr::V6(s6), IpAddr::V6(d6)) = (src, dst) else {
                return Vec::new();
            };
            let step = (HOST_MTU - IPV6_FRAG_HDRS) & !7;
            while off < data.len() {
                let end = (off + step).min(data.len());
                let mut body = vec![0u8; ipv6::FRAGMENT_HEADER_LEN];
                ipv6::emit_fragment_header(&mut body, proto, off as u16, end < data.len(), ident);
                body.extend_from_slice(&data[off..end]);
                out.push(net::ipv6_frame(s6, d6, ipv6::next_header::FRAGMENT, net::HOST_HOP_LIMIT, &body));
                off = end;
            }
        } else {
            let hl = ip.l4_at - l2;
            let step = (HOST_MTU - hl) & !7;
            while off < data.len() {
                let end = (off + step).min(data.len());
                let mut f = Vec::with_capacity(l2 + hl + end - off);
                f.extend_from_slice(&frame[..l2 + hl]);
                f.extend_from_slice(&data[off..end]);
                {
                    let mut p = Ipv4Packet::new_unchecked(&mut f[l2..]);
                    p.set_total_len((hl + end - off) as u16);
                    p.set_ident(ident as u16);
                    let more = if end < data.len() { FLAG_MF } else { 0 };
                    p.set_flags_frag(more, off as u16);
                    p.fill_checksum();
                }
                out.push(f);
                off = end;
            }
        }
        // IPv4's identification is 16 bits (the counter's low ones).
        let ident = if ip_v6 { ident } else { u32::from(ident as u16) };
        let k = (src, dst, proto, ident);
        self.frag.datagrams.insert(k, Datagram { flow, entry: 0 });
        if side == Side::Inside && xchg == Some(0) {
            // A client datagram of the first exchange: if that exchange is
            // fragmented, the connection opens with a fragmented datagram
            // and its fragment owner must become the owner.
            let first_big = self
                .cfg
                .frag
                .exchanges
                .first()
                .is_some_and(|&(r, _)| r as usize + super::host::UDP_HDR + 8 + if ip_v6 { 40 } else { 20 } > HOST_MTU);
            if first_big {
                self.frag.first.entry(flow).or_default().push(k);
            }
        }
        self.frag.report.datagrams_sent += 1;
        self.frag.report.ipv6_datagrams_sent += u64::from(ip_v6);
        self.frag.report.fragments_sent += out.len() as u64;
        out
    }

    /// The node a fragment a host sends enters (None: not a fragment).
    pub(super) fn fragment_entry(&mut self, side: Side, frame: &[u8]) -> Option<usize> {
        let h = net::frame_fragment(frame)?;
        let node = self.routers[side as usize].pick_fragment(&h, self.cfg.nodes);
        if let Some(d) = self.frag.datagrams.get_mut(&dg_key(&h)) {
            d.entry |= 1 << node;
        }
        Some(node)
    }

    /// Node `node` sent a frame without a five-tuple towards a host:
    /// attribute a fragment to its datagram's flow.
    pub(super) fn note_fragment_tx(&mut self, node: usize, frame: &[u8]) {
        let Some(h) = net::frame_fragment(frame) else {
            return;
        };
        if let Some(d) = self.frag.datagrams.get(&dg_key(&h)) {
            let f = d.flow;
            self.flows[f as usize].tx_nodes |= 1 << node;
            *self.frag.frag_tx.entry(f).or_default() |= 1 << node;
        }
    }

    /// A fragment reached a host: keep it; the whole datagram (one frame)
    /// once every byte is there.
    pub(super) fn host_reassemble(&mut self, from: usize, frame: &[u8]) -> Option<Vec<u8>> {
        let now = self.now;
        let ip = net::frame_ip(frame)?;
        let h = ip.fragment?;
        // The IP header alone (IPv6: without the Fragment header, which
        // the rebuilt datagram does not keep).
        let l3 = ip.l3_at;
        let hl = if ip.is_v6() { ipv6::HEADER_LEN } else { ip.l4_at - l3 };
        let key = dg_key(&h);
        if !self.frag.datagrams.contains_key(&key) {
            self.frag.bad(
                now,
                format!("node{from}: fragment {key:?} of no datagram reached a host"),
            );
            return None;
        }
        self.frag.report.fragments_delivered += 1;
        if ip.ip_len > HOST_MTU {
            self.frag.bad(
                now,
                format!(
                    "node{from}: fragment of {} bytes (MTU {HOST_MTU})",
                    ip.ip_len
                ),
            );
        }
        let data = ip.l4.to_vec();
        let p = self.frag.partial.entry(key).or_default();
        if h.offset == 0 {
            p.header = Some(frame[..l3 + hl].to_vec());
        }
        if !h.more {
            p.total = Some(usize::from(h.offset) + data.len());
        }
        if p.pieces.insert(h.offset, data).is_some() {
            self.frag.bad(
                now,
                format!(
                    "node{from}: fragment {key:?} at offset {} delivered twice",
                    h.offset
                ),
            );
            return None;
        }
        // Complete? Pieces must tile [0, total) exactly.
        let p = self.frag.partial.get(&key)?;
        let total = p.total?;
        p.header.as_ref()?;
        let mut next = 0usize;
        let mut overlap = false;
        for (&o, d) in &p.pieces {
            let o = usize::from(o);
            if o > next {
                return None; // a gap: more to come
            }
            if o < next {
                overlap = true;
            }
            next = next.max(o + d.len());
        }
        if next < total {
            return None;
        }
        let p = self.frag.partial.remove(&key)?;
        if overlap || next != total {
            self.frag.bad(
                now,
                format!("node{from}: fragments of {key:?} overlap or pass the last one's end"),
            );
            return None;
        }
        let mut whole = p.header.unwrap_or_default();
        for d in p.pieces.values() {
            whole.extend_from_slice(d);
        }
        if h.src.is_ipv6() {
            let mut ip = Ipv6Packet::new_unchecked(&mut whole[l3..]);
            ip.set_payload_len(total as u16);
            ip.set_next_header(h.proto);
        } else {
            let mut ip = Ipv4Packet::new_unchecked(&mut whole[l3..]);
            ip.set_total_len((hl + total) as u16);
            ip.set_flags_frag(0, 0);
            ip.fill_checksum();
        }
        self.frag.report.datagrams_reassembled += 1;
        self.frag.report.ipv6_datagrams_reassembled += u64::from(h.src.is_ipv6());
        Some(whole)
    }

    /// The fragment statistics and invariants (nothing without fragmented
    /// flows).
    pub(super) fn frag_finish(
        &mut self,
        owners: &[Vec<usize>],
        invariants: &mut Vec<Invariant>,
        failures: &mut Vec<String>,
    ) -> FragReport {
        let mut rep = self.frag.report.clone();
        if self.frag.flows.is_empty() {
            return rep;
        }
        rep.datagrams_spread = self
            .frag
            .datagrams
            .values()
            .filter(|d| d.entry.count_ones() > 1)
            .count() as u64;
        rep.partial_at_end = self.frag.partial.len() as u64;
        let mut partial: Vec<&DgKey> = self.frag.partial.keys().collect();
        partial.sort();
        for k in partial.iter().take(5) {
            failures.push(format!(
                "datagram {k:?} still in pieces at a host at the end"
            ));
        }
        failures.extend(self.frag.examples.iter().cloned());
        let lossy = self.cfg.ccl.loss > 0.0;
        invariants.push(Invariant {
            name: "fragments-valid",
            ok: Some(rep.bad_fragments == 0 && (rep.partial_at_end == 0 || lossy)),
            detail: format!(
                "{} datagrams in {} fragments sent ({} spread over nodes), {} fragments delivered, {} datagrams reassembled by hosts, {} bad fragments, {} datagrams in pieces at the end",
                rep.datagrams_sent,
                rep.fragments_sent,
                rep.datagrams_spread,
                rep.fragments_delivered,
                rep.datagrams_reassembled,
                rep.bad_fragments,
                rep.partial_at_end
            ),
        });

        // Every fragment that reached a host came from the flow's owner.
        let mut wrong = 0;
        for (&f, &tx) in &self.frag.frag_tx {
            let o = &owners[f as usize];
            if o.len() != 1 || tx != 1 << o[0] {
                wrong += 1;
                if wrong <= 5 {
                    failures.push(format!(
                        "{}: fragments reached hosts from nodes {tx:#06b}, owners {o:?}",
                        self.flow_desc(f as usize)
                    ));
                }
            }
        }
        invariants.push(Invariant {
            name: "fragments-from-owner",
            ok: Some(wrong == 0),
            detail: format!(
                "{} of {} flows with fragments delivered had them from a node other than their one owner",
                wrong,
                self.frag.frag_tx.len()
            ),
        });

        // New connections: the first datagram's fragment owner owns them.
        if self.cfg.cluster && cluster::AVAILABLE {
            let table = cluster::members(self.cfg.nodes)
                .ok()
                .and_then(|m| DirectorTable::new(&m).ok());
            let mut bad = 0;
            if let Some(table) = table {
                for (&f, keys) in &self.frag.first {
                    // The first datagram's fragment owner; if the CCL lost
                    // some of it, a retry's (each retry is a new datagram).
                    let fos: Vec<usize> = keys
                        .iter()
                        .map(|k| {
                            fragment_owner(k.0, k.1, k.3, &table)
                                .index()
                        })
                        .collect();
                    rep.new_flows_checked += 1;
                    let o = &owners[f as usize];
                    let ok = match o.as_slice() {
                        [x] if lossy => fos.contains(x),
                        [x] => fos.first() == Some(x),
                        _ => false,
                    };
                    if !ok {
                        bad += 1;
                        if bad <= 5 {
                            failures.push(format!(
                                "{}: first-exchange datagrams {keys:?} have fragment owners {fos:?}, but owners are {o:?}",
                                self.flow_desc(f as usize)
                            ));
                        }
                    }
                }
            }
            invariants.push(Invariant {
                name: "fragment-owner-owns-new-flow",
                ok: Some(bad == 0),
                detail: format!(
                    "{bad} of {} flows opened by a fragmented datagram not owned by its fragment owner",
                    rep.new_flows_checked
                ),
            });
        }
        rep
    }
}

impl Sim {
    /// Whether `frame` is a fragment of a datagram of flow `f` (flow
    /// traces).
    pub(super) fn frag_traced(&self, f: u32, frame: &[u8]) -> bool {
        net::frame_fragment(frame)
            .and_then(|h| self.frag.datagrams.get(&dg_key(&h)))
            .is_some_and(|d| d.flow == f)
    }
    /// Whether a CCL frame carries a fragment of the traced flow (a
    /// forwarded packet: the inner frame follows the CCL header).
    pub(super) fn frag_traced_ccl(&self, frame: &[u8]) -> bool {
        let Some(f) = self.cfg.trace_flow else {
            return false;
        };
        if self.frag.flows.is_empty() {
            return false;
        }
        // Look for an inner Ethernet/IPv4 or IPv6 fragment at any offset
        // past the outer headers (cheap enough for traces only).
        (42..frame.len().saturating_sub(34)).any(|at| {
            let (et, v) = (&frame[at + 12..at + 14], frame[at + 14]);
            ((et == [0x08, 0x00] && v == 0x45) || (et == [0x86, 0xdd] && v >> 4 == 6)) && self.frag_traced(f, &frame[at..])
        })
    }
}
