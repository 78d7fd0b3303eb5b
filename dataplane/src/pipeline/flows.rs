//! The connection-tracking stage: the worker's flow table and the access
//! rules that admit a new flow (SPEC B2), and `track`, the one place a
//! packet this node processes as owner (or alone) meets conntrack — with
//! the cluster's owner bookkeeping around it in cluster mode (sequence
//! translation R6, flow records R2/R9).
//!
//! Invariant: the ACL is consulted only when conntrack creates a flow;
//! return traffic and later packets of a permitted flow never see it.

use super::cluster::records::Pre;
use super::cluster::{ClusterPath, Link};
use super::context::Xlate;
use crate::acl::{Acl, RuleInfo};
use super::synproxy::SynProxy;
use crate::conntrack::{Admission, ConnTable, L4Info, Tracked};
use crate::route::IfIndex;
use crate::types::{DropReason, FiveTuple, Timestamp};

pub(crate) struct Flows {
    pub table: ConnTable,
    acl: Acl,
    /// Flows created by `track` (conntrack has its own stats too).
    pub created: u64,
    /// The SYN proxy's cookies (`synproxy`).
    pub proxy: SynProxy,
}

/// The admission checks of a new flow: anti-spoofing (`reverse_path`:
/// does the source pass its ingress interface's check; `spoofed` says it
/// did not), then the ACL.
fn admission(acl: &mut Acl, ifx: IfIndex, egress: IfIndex, tuple: &FiveTuple, reverse_path: &impl Fn() -> bool, spoofed: &mut bool) -> Admission {
    *spoofed = !reverse_path();
    let permit = !*spoofed && acl.check(ifx, egress, tuple);
    Admission { permit, rule: acl.last_index() }
}

impl Flows {
    /// `slot_len`: bytes per slot of the SYN proxy's hold.
    pub fn new(table: ConnTable, acl: Acl, slot_len: usize) -> Self {
        Flows { table, acl, created: 0, proxy: SynProxy::new(slot_len) }
    }

    /// Free the SYN proxy's held segments whose connection is no longer
    /// connecting or that waited too long (`poll_timers`).
    pub fn expire_held(&mut self, now: Timestamp) {
        if self.proxy.hold.len() > 0 {
            let table = &self.table;
            self.proxy.expire_held(now, |t| table.proxy_connecting(now, t));
        }
    }

    /// Run conntrack for a packet this node owns, with anti-spoofing
    /// (`reverse_path`: does the source pass its ingress interface's
    /// check) and the ACL as the admission checks of a new flow; in
    /// cluster mode with the owner's sequence translation and flow records
    /// around it.
    #[allow(clippy::too_many_arguments)]
    pub fn track(
        &mut self,
        cluster: Option<&mut ClusterPath>,
        link: &mut Link<'_>,
        now: Timestamp,
        tuple: &FiveTuple,
        l4: L4Info,
        len: u32,
        ifx: IfIndex,
        egress: IfIndex,
        reverse_path: impl Fn() -> bool,
    ) -> Result<(Option<Xlate>, Tracked), DropReason> {
        let mut seen = l4;
        let mut l4 = l4;
        let pre: Option<Pre> = cluster.as_deref().and_then(|cl| cl.owner_pre(&self.table, tuple, &mut seen));
        let acl = &mut self.acl;
        let mut spoofed = false;
        let admit = || admission(acl, ifx, egress, tuple, &reverse_path, &mut spoofed);
        let tracked = match self.table.track(now, tuple, &seen, len, admit) {
            Ok(t) => t,
            Err(DropReason::AclDenied) if spoofed => return Err(DropReason::ReversePath),
            // No flow: the client's ACK of a SYN-proxy cookie opens one.
            Err(DropReason::TcpNoFlow) => {
                let (t, syn) = self.open_proxied(now, tuple, &seen, len, ifx, egress, &reverse_path)?;
                // The cluster's owner sees the SYN the server gets.
                l4 = syn;
                t
            }
            Err(e) => return Err(self.refused(now, tuple, len, ifx, egress, e)),
        };
        if tracked.created {
            self.made(now, tracked.handle, ifx, egress);
        }
        let xlate = match cluster {
            Some(cl) => cl.owner_post(now, link, &self.table, tuple, &l4, tracked, pre),
            None => Xlate::of(tracked.dir, 0, tracked.splice),
        };
        Ok((xlate, tracked))
    }

    /// A TCP segment without a flow: if it is a client's ACK returning a
    /// valid SYN-proxy cookie, open its connection (`ConnTable::open_proxied`,
    /// admitted as a SYN would be: reverse path, ACL, limits but the
    /// embryonic one) and return it with the SYN the server gets; else
    /// `TcpNoFlow`, as without the proxy.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn open_proxied(
        &mut self,
        now: Timestamp,
        tuple: &FiveTuple,
        seen: &L4Info,
        len: u32,
        ifx: IfIndex,
        egress: IfIndex,
        reverse_path: &impl Fn() -> bool,
    ) -> Result<(Tracked, L4Info), DropReason> {
        let (Some(mss), L4Info::Tcp(ack)) = (self.proxy.check(now, tuple, seen), seen) else {
            return Err(DropReason::TcpNoFlow);
        };
        let acl = &mut self.acl;
        let mut spoofed = false;
        let admit = || admission(acl, ifx, egress, tuple, reverse_path, &mut spoofed);
        match self.table.open_proxied(now, tuple, ack, mss, len, admit) {
            Ok(t) => {
                self.proxy.counters.opened += 1;
                Ok((t, L4Info::Tcp(crate::conntrack::proxy_syn(ack))))
            }
            Err(DropReason::AclDenied) if spoofed => Err(DropReason::ReversePath),
            Err(e) => Err(self.refused(now, tuple, len, ifx, egress, e)),
        }
    }

    /// A new flow: counted, and logged for the exporters (out of line:
    /// established packets never come here).
    #[cold]
    #[inline(never)]
    fn made(&mut self, now: Timestamp, h: crate::conntrack::FlowHandle, ifx: IfIndex, egress: IfIndex) {
        self.created += 1;
        self.table.log_built(now, h, ifx, egress, self.acl.last_rule());
    }

    /// A packet conntrack refused: a denied connection is logged for the
    /// exporters. Returns `e`.
    #[cold]
    #[inline(never)]
    fn refused(&mut self, now: Timestamp, tuple: &FiveTuple, len: u32, ifx: IfIndex, egress: IfIndex, e: DropReason) -> DropReason {
        if e == DropReason::AclDenied {
            self.table.log_denied(now, tuple, len, ifx, egress, self.acl.last_rule());
        }
        e
    }

    /// Put `acl` in place of the current rules (which end up in `acl`);
    /// rules present in both keep their hit counts.
    pub fn swap_acl(&mut self, acl: &mut Acl) {
        acl.carry_hits(&self.acl);
        std::mem::swap(&mut self.acl, acl);
    }

    pub fn rule_names(&self) -> Vec<String> {
        self.acl.rule_names()
    }

    pub fn rules(&self, names: &[String]) -> Vec<RuleInfo> {
        self.acl.rules(names)
    }
    /// (default permits, default denies) of the security-level rule.
    pub fn default_rule_hits(&self) -> (u64, u64) {
        self.acl.default_hits()
    }
}
