//! Where a flood's frames were lost on the cluster bed, and which flows
//! those losses could have touched.
//!
//! The bed's nodes read their ports through af_packet rings of the
//! kernel, and a flood, the flood tool and every node share the host's
//! two cores. When a flood offers a member more frames than it reads,
//! its ring overflows and the kernel drops whatever arrives while it is
//! full — a legitimate handshake's or an established transfer's frame
//! as well as the flood's — as a NIC drops what finds its receive ring
//! full. The nodes count those losses (`rx_ring_drops`, `rx_missed`,
//! `rx_nombuf` per port; with several workers `handoff_drops` at the
//! steering rings; `tx_full_drops` where the kernel did not empty a
//! port's transmit ring in time), and the flood tests judge a timing
//! bound only where
//! nothing was lost on the path of the traffic it bounds: what the host
//! is too slow to carry is the bed's limit, not the firewall's. A waived
//! bound always says so in the step's text, with the losses that waived
//! it.
//!
//! The path of a flow is asked of the network itself: each bed router's
//! kernel says which node its ECMP hash sends a 5-tuple to (`ip route get
//! … iif eth0 ipproto tcp sport … dport …`, the same hash as for the
//! frames it forwards).

use crate::sys;
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::fmt;

/// A receive loss that grew on one member between two `show stats`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// The member, 1-based.
    pub node: usize,
    /// The port (`inside`, `outside`, `ccl`), or `None` for the member's
    /// steering rings.
    pub port: Option<String>,
    pub counter: &'static str,
    pub grown: u64,
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.port {
            Some(p) => write!(f, "n{} {p} {} +{}", self.node, self.counter, self.grown),
            None => write!(f, "n{} {} +{}", self.node, self.counter, self.grown),
        }
    }
}

/// The per-port counters of a frame lost before the node's pipeline.
const PORT_LOSSES: [&str; 3] = ["rx_ring_drops", "rx_missed", "rx_nombuf"];
/// The node-wide counters of a frame lost outside the pipeline: at a
/// full steering ring (several workers), or after it at a full transmit
/// ring the kernel did not empty in time (per node, not per port).
const NODE_LOSSES: [&str; 2] = ["handoff_drops", "tx_full_drops"];

/// The receive losses that grew between `before` and `after`, every
/// member's `show stats --json` in member order.
pub fn grown(before: &[Value], after: &[Value]) -> Vec<Loss> {
    let mut out = Vec::new();
    for (k, (b, a)) in before.iter().zip(after).enumerate() {
        for counter in NODE_LOSSES {
            let d = count(a, counter).saturating_sub(count(b, counter));
            if d > 0 {
                out.push(Loss { node: k + 1, port: None, counter, grown: d });
            }
        }
        for (i, p) in a["ports"].as_array().into_iter().flatten().enumerate() {
            for counter in PORT_LOSSES {
                let d = count(p, counter).saturating_sub(count(&b["ports"][i], counter));
                if d > 0 {
                    let port = p["name"].as_str().unwrap_or("?").to_string();
                    out.push(Loss { node: k + 1, port: Some(port), counter, grown: d });
                }
            }
        }
    }
    out
}

fn count(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

/// `losses` as a list for a step's text, or "none".
pub fn listed(losses: &[Loss]) -> String {
    if losses.is_empty() {
        "none".into()
    } else {
        losses.iter().map(Loss::to_string).collect::<Vec<_>>().join(", ")
    }
}

/// Frames the kernel dropped because a CPU's input backlog was full
/// (`/proc/net/softnet_stat`, second column, every CPU; machine-wide): a
/// veth hands each frame to the receiving side's backlog, so a flood
/// through the bed's routers and veths can lose frames there, before any
/// node's ring.
pub fn softnet_dropped() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).and_then(|v| u64::from_str_radix(v, 16).ok()))
        .sum()
}

/// Frames the kernel's interfaces dropped in namespace `ns`: the sum of
/// `rx_dropped` and `tx_dropped` of every link (`ip -s -j link`), a veth
/// whose peer's queue was full, a router's interface.
pub fn link_drops(ns: &str) -> u64 {
    let Ok(text) = sys::ns_run(ns, "ip", &["-s", "-j", "link", "show"]) else {
        return 0;
    };
    let Ok(Value::Array(links)) = serde_json::from_str::<Value>(&text) else {
        return 0;
    };
    links
        .iter()
        .map(|l| {
            let s = &l["stats64"];
            count(&s["rx"], "dropped") + count(&s["tx"], "dropped")
        })
        .sum()
}

/// `link_drops` summed over every namespace of the test bed.
pub fn bed_link_drops() -> u64 {
    sys::namespaces()
        .unwrap_or_default()
        .iter()
        .filter(|n| n.starts_with(crate::topology::NS_PREFIX))
        .map(|n| link_drops(n))
        .sum()
}

/// One counter of `/proc/net/snmp` as namespace `ns`'s kernel keeps it
/// (`group` "Udp", "Ip", ...; `field` "RcvbufErrors", ...), 0 when absent:
/// where a host of the bed lost what the firewall had delivered (a UDP
/// receiver's full socket buffer, a datagram the host could not
/// reassemble).
pub fn snmp(ns: &str, group: &str, field: &str) -> u64 {
    sys::ns_run(ns, "cat", &["/proc/net/snmp"]).map(|t| snmp_field(&t, group, field)).unwrap_or(0)
}

/// `field` of `group` in the text of `/proc/net/snmp` (a header line of
/// names, then a line of values, both prefixed `Group:`).
fn snmp_field(text: &str, group: &str, field: &str) -> u64 {
    let prefix = format!("{group}:");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else { return 0 };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == field)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// The members one TCP connection's frames reach on the cluster bed:
/// the inside router sends the client's side to `inside`'s inside port,
/// the outside router the server's side to `outside`'s outside port.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlowPath {
    pub inside: usize,
    pub outside: usize,
}

impl FlowPath {
    /// The path of the TCP connection from `client:cport` (inside) to
    /// `server:sport` (outside), as the routers' ECMP hash picks it.
    pub fn of_tcp(client: &str, cport: u16, server: &str, sport: u16) -> Result<FlowPath> {
        Ok(FlowPath {
            inside: next_node("cfw-rin", "rin-n", client, cport, server, sport)?,
            outside: next_node("cfw-rout", "rout-n", server, sport, client, cport)?,
        })
    }

    /// The losses in `losses` this connection's frames could have met:
    /// its two ingress ports, the CCL ports of those members (a frame
    /// forwarded to its owner, a query to its director), their steering
    /// rings.
    pub fn met<'a>(&self, losses: &'a [Loss]) -> Vec<&'a Loss> {
        losses
            .iter()
            .filter(|l| {
                let mine = l.node == self.inside || l.node == self.outside;
                match l.port.as_deref() {
                    Some("inside") => l.node == self.inside,
                    Some("outside") => l.node == self.outside,
                    _ => mine,
                }
            })
            .collect()
    }
}

impl fmt::Display for FlowPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in at n{}, out at n{}", self.inside, self.outside)
    }
}

/// The node router `ns` forwards a TCP segment `src:sport` → `dst:dport`
/// to, arriving on its host side (`eth0`): the K of the `PREFIX`K
/// interface its route lookup names.
fn next_node(ns: &str, prefix: &str, src: &str, sport: u16, dst: &str, dport: u16) -> Result<usize> {
    let (sport, dport) = (sport.to_string(), dport.to_string());
    let out = sys::ip(ns, &["route", "get", dst, "from", src, "iif", "eth0", "ipproto", "tcp", "sport", &sport, "dport", &dport])?;
    node_of_route(&out, prefix).with_context(|| format!("{ns}: route to {dst} from {src}: {}", out.trim()))
}

/// The K of `dev PREFIXK` in an `ip route get` answer.
fn node_of_route(out: &str, prefix: &str) -> Result<usize> {
    let mut words = out.split_whitespace();
    while let Some(w) = words.next() {
        if w == "dev" {
            if let Some(k) = words.next().and_then(|d| d.strip_prefix(prefix)).and_then(|k| k.parse().ok()) {
                return Ok(k);
            }
        }
    }
    bail!("no {prefix}K interface in the answer")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn member(handoff: u64, ring: [u64; 3]) -> Value {
        json!({
            "handoff_drops": handoff,
            "ports": [
                {"name": "inside", "rx_ring_drops": ring[0]},
                {"name": "outside", "rx_ring_drops": ring[1], "rx_missed": 0},
                {"name": "ccl", "rx_ring_drops": ring[2]},
            ]
        })
    }

    #[test]
    fn snmp_field_reads_the_value_under_its_name() {
        let text = "Ip: Forwarding DefaultTTL ReasmFails\nIp: 1 64 3\nUdp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\nUdp: 10 0 2 9 7\n";
        assert_eq!(snmp_field(text, "Udp", "RcvbufErrors"), 7);
        assert_eq!(snmp_field(text, "Ip", "ReasmFails"), 3);
        assert_eq!(snmp_field(text, "Udp", "Missing"), 0);
        assert_eq!(snmp_field(text, "Tcp", "RtoMin"), 0);
    }

    #[test]
    fn grown_lists_each_counter_that_rose() {
        let before = [member(0, [0, 5, 0]), member(3, [0, 0, 0])];
        let after = [member(0, [0, 9, 0]), member(4, [7, 0, 1])];
        let l = grown(&before, &after);
        assert_eq!(listed(&l), "n1 outside rx_ring_drops +4, n2 handoff_drops +1, n2 inside rx_ring_drops +7, n2 ccl rx_ring_drops +1");
        assert_eq!(listed(&grown(&before, &before)), "none");
        // A transmit ring the kernel did not empty: node-wide.
        let mut tx = member(4, [7, 0, 1]);
        tx["tx_full_drops"] = json!(5);
        assert_eq!(listed(&grown(&[after[1].clone()], &[tx])), "n1 tx_full_drops +5");
    }

    #[test]
    fn a_path_meets_its_ingress_ports_and_its_members_ccl_and_steering() {
        let before = [member(0, [0, 0, 0]), member(0, [0, 0, 0]), member(0, [0, 0, 0])];
        let after = [member(2, [1, 1, 1]), member(2, [1, 1, 1]), member(2, [1, 1, 1])];
        let l = grown(&before, &after);
        let path = FlowPath { inside: 1, outside: 2 };
        let met: Vec<String> = path.met(&l).iter().map(|l| l.to_string()).collect();
        assert_eq!(
            met,
            [
                "n1 handoff_drops +2",
                "n1 inside rx_ring_drops +1",
                "n1 ccl rx_ring_drops +1",
                "n2 handoff_drops +2",
                "n2 outside rx_ring_drops +1",
                "n2 ccl rx_ring_drops +1"
            ]
        );
        let same = FlowPath { inside: 3, outside: 3 };
        assert_eq!(same.met(&l).len(), 4);
    }

    #[test]
    fn the_node_is_read_from_the_route_answer() {
        let out = "198.18.10.5 from 198.18.20.2 via 198.18.22.2 dev rout-n2 \n    cache iif eth0 \n";
        assert_eq!(node_of_route(out, "rout-n").unwrap(), 2);
        assert!(node_of_route("198.18.10.5 dev eth0", "rout-n").is_err());
    }
}
