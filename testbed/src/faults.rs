//! Faults on a running cluster bed: what an operator's bad day does to a
//! node, made on purpose (issue 10, SPEC O3).
//!
//! | command | what it does |
//! |---|---|
//! | `kill NODE` | SIGKILL the node; its router-side links go down |
//! | `pause NODE` / `resume NODE` | SIGSTOP / SIGCONT; router-side links down while paused |
//! | `stall` / `unstall` | every node SIGSTOPped / SIGCONTed together, links untouched: a stall of the whole host |
//! | `restart NODE` | kill, start the same config again (new incarnation), links up |
//! | `ccl-cut NODE` / `ccl-heal NODE` | the node's CCL port loses / regains carrier |
//! | `link-down NODE PORT` / `link-up NODE PORT` | one data link (`inside`, `outside`) loses / regains carrier |
//! | `partition A,B C` / `heal` | the CCL segment split into groups (no carrier change) / joined again |
//!
//! **Why the links go down on `kill` and `pause`.** A router learns that a
//! next hop died from the link (carrier loss, or BFD over it); a killed or
//! frozen process on a veth leaves the link up, so the router would keep
//! hashing flows to it forever. The harness plays BFD: it takes the
//! router-side ends (`rin-nK`, `rout-nK`) down, and the routers, which run
//! with `ignore_routes_with_linkdown` and drop dead next hops from their ECMP
//! routes, stop sending to the node. The survivors' next-hop order is the
//! routers' (hash-threshold): removing a next hop also moves flows between
//! survivors, which the cluster must cope with. A node that shuts its own
//! data ports (it left the cluster, `rte_eth_dev_set_link_down`) is
//! withdrawn the same way, from its side of the link.
//!
//! **Why `stall` leaves the links alone.** It plays a host (a hypervisor,
//! a shared VM) that stops every node at once for a few seconds: no node
//! is dead and nobody withdraws a route; the nodes must find, after it,
//! that none of them moved on and keep every flow (docs/membership.md,
//! "Pauses").
//!
//! Everything here is undone by `down` (it continues stopped processes
//! before terminating them, and removes the namespaces with the bridges).

use crate::bed;
use crate::state::{NodeRecord, State};
use crate::sys;
use crate::topology::{CCL_BRIDGE, CCL_NAMESPACE};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::time::Duration;

/// The router namespaces and the prefix of their node-facing veths.
const INSIDE_ROUTER: (&str, &str) = ("cfw-rin", "rin-n");
const OUTSIDE_ROUTER: (&str, &str) = ("cfw-rout", "rout-n");
/// Bridges made by `partition` for its second and later groups.
const PARTITION_BRIDGE: &str = "cfw-cclp";

/// A data link of a node.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Link {
    Inside,
    Outside,
}

impl Link {
    pub fn parse(s: &str) -> Result<Link> {
        match s {
            "inside" | "in" => Ok(Link::Inside),
            "outside" | "out" => Ok(Link::Outside),
            _ => bail!("unknown link {s:?}: expected inside or outside"),
        }
    }
    fn router_end(self, k: usize) -> (&'static str, String) {
        let (ns, prefix) = match self {
            Link::Inside => INSIDE_ROUTER,
            Link::Outside => OUTSIDE_ROUTER,
        };
        (ns, format!("{prefix}{k}"))
    }
}

/// One fault on one node.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    Kill,
    Pause,
    Resume,
    Restart,
    CclCut,
    CclHeal,
    LinkDown(Link),
    LinkUp(Link),
    /// Every node of the bed (the node named is ignored).
    Stall,
    Unstall,
}

/// The loaded state of a cluster bed and the record of node `name` (`n2`
/// or `2`), with its number K.
fn node<'a>(state: &'a State, name: &str) -> Result<(&'a NodeRecord, usize)> {
    let want = if name.starts_with('n') { name.to_string() } else { format!("n{name}") };
    let rec = state
        .nodes
        .iter()
        .find(|n| n.name == want)
        .with_context(|| format!("no node {name:?} in this bed (nodes: {})", names(state)))?;
    let k: usize = want[1..].parse().with_context(|| format!("node name {want:?} is not nK"))?;
    Ok((rec, k))
}

fn names(state: &State) -> String {
    state.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", ")
}

fn load(run_dir: &Path) -> Result<State> {
    let state = State::load(run_dir)?.context("the test bed is not up (no state file)")?;
    if state.nodes.len() < 2 {
        bail!("faults need a cluster bed (up --nodes 2 or more)");
    }
    Ok(state)
}

fn set_link(ns: &str, ifname: &str, up: bool) -> Result<()> {
    sys::ip(ns, &["link", "set", "dev", ifname, if up { "up" } else { "down" }]).map(|_| ())
}

/// Both router-side links of node K up or down.
fn router_links(k: usize, up: bool) -> Result<()> {
    for l in [Link::Inside, Link::Outside] {
        let (ns, ifname) = l.router_end(k);
        set_link(ns, &ifname, up)?;
    }
    Ok(())
}

/// The node's pid if its process is alive.
fn live_pid(rec: &NodeRecord) -> Option<u32> {
    rec.pid.filter(|&p| sys::alive(p))
}

/// Apply `fault` to node `name` of the bed in `run_dir`.
pub fn apply(run_dir: &Path, bin_dir: &Path, name: &str, fault: Fault) -> Result<()> {
    let mut state = load(run_dir)?;
    let (rec, k) = node(&state, name)?;
    let rec = rec.clone();
    match fault {
        Fault::Kill => {
            router_links(k, false)?;
            let pid = live_pid(&rec).with_context(|| format!("{} is not running", rec.name))?;
            sys::signal(pid, "KILL");
            sys::wait_exit(pid, Duration::from_secs(5))?;
        }
        Fault::Pause => {
            router_links(k, false)?;
            let pid = live_pid(&rec).with_context(|| format!("{} is not running", rec.name))?;
            sys::signal(pid, "STOP");
        }
        Fault::Resume => {
            let pid = live_pid(&rec).with_context(|| format!("{} is not running", rec.name))?;
            sys::signal(pid, "CONT");
            router_links(k, true)?;
        }
        Fault::Restart => {
            router_links(k, false)?;
            if let Some(pid) = live_pid(&rec) {
                sys::signal(pid, "KILL");
                sys::wait_exit(pid, Duration::from_secs(5))?;
            }
            // A killed EAL leaves its runtime directory behind, and a new
            // one with the same --file-prefix cannot initialise over it
            // without hugepages ("Cannot init memzone").
            if let Some(prefix) = &rec.dpdk_prefix {
                let dir = Path::new(bed::DPDK_RUNTIME_DIR).join(prefix);
                if dir.exists() {
                    std::fs::remove_dir_all(&dir).with_context(|| format!("cannot remove {}", dir.display()))?;
                }
            }
            let pid = bed::start_node(&rec, bin_dir)?;
            if let Some(n) = state.nodes.iter_mut().find(|n| n.name == rec.name) {
                n.pid = Some(pid);
            }
            state.save()?;
            bed::wait_node_ready(&rec, pid, bin_dir, Duration::from_secs(20))?;
            router_links(k, true)?;
        }
        Fault::CclCut | Fault::CclHeal => {
            set_link(CCL_NAMESPACE, &format!("ccl-n{k}"), fault == Fault::CclHeal)?;
        }
        Fault::LinkDown(l) | Fault::LinkUp(l) => {
            let (ns, ifname) = l.router_end(k);
            set_link(ns, &ifname, matches!(fault, Fault::LinkUp(_)))?;
        }
        Fault::Stall | Fault::Unstall => {
            let sig = if fault == Fault::Stall { "STOP" } else { "CONT" };
            for pid in state.nodes.iter().filter_map(live_pid) {
                sys::signal(pid, sig);
            }
        }
    }
    Ok(())
}

/// Split the CCL segment: the first group stays on the bridge, each other
/// group gets a bridge of its own; nodes named in no group stay with the
/// first. Carrier stays up: the nodes see silence, not a link failure.
pub fn partition(run_dir: &Path, groups: &[Vec<String>]) -> Result<()> {
    let state = load(run_dir)?;
    if groups.len() < 2 {
        bail!("partition needs at least two groups (e.g. `partition n1,n2 n3`)");
    }
    heal(run_dir)?;
    let mut seen = Vec::new();
    for (g, members) in groups.iter().enumerate() {
        let bridge = if g == 0 { CCL_BRIDGE.to_string() } else { format!("{PARTITION_BRIDGE}{g}") };
        if g > 0 {
            sys::ip(CCL_NAMESPACE, &["link", "add", &bridge, "type", "bridge"])?;
            sys::ip(CCL_NAMESPACE, &["link", "set", &bridge, "up"])?;
        }
        for m in members {
            let (_, k) = node(&state, m)?;
            if seen.contains(&k) {
                bail!("node {m} is in two groups");
            }
            seen.push(k);
            sys::ip(CCL_NAMESPACE, &["link", "set", "dev", &format!("ccl-n{k}"), "master", &bridge])?;
        }
    }
    Ok(())
}

/// Undo `partition`: every CCL port back on the one bridge, the extra
/// bridges deleted.
pub fn heal(run_dir: &Path) -> Result<()> {
    let state = load(run_dir)?;
    for n in &state.nodes {
        let (_, k) = node(&state, &n.name)?;
        sys::ip(CCL_NAMESPACE, &["link", "set", "dev", &format!("ccl-n{k}"), "master", CCL_BRIDGE])?;
    }
    for g in 1..=state.nodes.len() {
        let bridge = format!("{PARTITION_BRIDGE}{g}");
        if sys::ip(CCL_NAMESPACE, &["link", "show", "dev", &bridge]).is_ok() {
            sys::ip(CCL_NAMESPACE, &["link", "del", "dev", &bridge])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_name_the_router_ends() {
        assert_eq!(Link::parse("inside").unwrap().router_end(2), ("cfw-rin", "rin-n2".to_string()));
        assert_eq!(Link::parse("out").unwrap().router_end(3), ("cfw-rout", "rout-n3".to_string()));
        assert!(Link::parse("ccl").is_err());
    }
}
