//! Connection limits on the control lcore (L1, `controlplane::limits`):
//! the workers' and the members' counts put together, the remote share
//! handed back to each worker, limit hits to syslog and IPFIX, and
//! `show limits` / `show conn count`.

use super::Control;
use crate::shared::{Query, Reply};
use serde_json::{json, Value};

impl Control {
    /// Connection limits (L1, `controlplane::limits`): take the workers'
    /// and the members' reports; every report interval, broadcast this
    /// node's counts and give each worker the rest of the cluster's.
    pub(super) fn estimate_limits(&mut self, now: dataplane::Timestamp) {
        for (w, ws) in self.shared.workers.iter().enumerate() {
            while let Some(r) = ws.limit_reports.pop() {
                if let Some(ids) = self.limit_ids.get_mut(w) {
                    *ids = r.classes.iter().map(|c| c.0).collect();
                }
                self.limits.on_worker(w, r);
            }
        }
        if let Some(c) = &mut self.ccl {
            let (reports, members) = c.take_limit_reports();
            self.limits.members(members);
            for (from, seq, classes, clients) in reports {
                self.limits.on_peer(now, from, seq, classes, clients);
            }
        }
        // Limit hits: one syslog event per class a second at most.
        for (id, refused) in self.limits.take_events(now) {
            let text = limit_event_text(&self.class_name(id), &refused);
            log::warn!("{text}");
            if let Some(x) = &self.export {
                x.push(crate::export::ExportEvent::Syslog { severity: controlplane::syslog::severity::WARNING, msgid: "conn-limit", text });
                let events = limit_events(&self.class_limits(id), &refused, crate::clock::unix_ns() / 1_000_000);
                x.push(crate::export::ExportEvent::Limits(events));
            }
        }
        if !self.limits.due(now) {
            return;
        }
        if self.limit_ids.iter().all(Vec::is_empty) {
            // No limits configured here: nothing to report or enforce.
            return;
        }
        if let Some(c) = &mut self.ccl {
            let report = self.limits.node_report();
            c.broadcast_limits(now, report);
        }
        for (w, ids) in self.limit_ids.iter().enumerate() {
            if ids.is_empty() {
                continue;
            }
            let remote = self.limits.remote_for(w, ids);
            if let Some(pending) = self.pending.get_mut(w) {
                // Only the latest view matters: replace one still queued.
                pending.retain(|q| !matches!(q, Query::RemoteLimits(_)));
                pending.push_back(Query::RemoteLimits(Box::new(remote)));
            }
        }
    }

    /// The configured limits of class `id` (0: the global ones).
    pub(super) fn class_limits(&self, id: u32) -> config::Limits {
        let p = &self.policies.running.policy;
        if id == 0 {
            return p.limits;
        }
        p.access_rules.iter().find(|r| dataplane::conntrack::limits::class_id(Some(&r.name)) == id).map(|r| r.limits).unwrap_or_default()
    }

    /// The name of limit class `id` in the running policy ("global", a
    /// rule's name, or the id when no rule has it any more).
    pub(super) fn class_name(&self, id: u32) -> String {
        if id == 0 {
            return "global".into();
        }
        let rules = &self.policies.running.policy.access_rules;
        rules.iter().find(|r| dataplane::conntrack::limits::class_id(Some(&r.name)) == id).map_or_else(|| format!("{id:#x}"), |r| r.name.clone())
    }

    /// `show limits`: per class (global, each limited rule) the limits,
    /// this node's count now (per worker too), each member's last report,
    /// the cluster-wide estimate (this node now + the members) and the
    /// connections refused by each limit; the clients with the largest
    /// counts here or in the members' reports, with their estimate.
    pub(super) fn show_limits(&self) -> Result<Value, String> {
        use dataplane::conntrack::limits::{ClassInfo, Count};
        let mut classes: Vec<(ClassInfo, Vec<Count>)> = Vec::new();
        let mut clients: std::collections::BTreeMap<(u32, std::net::IpAddr), Count> = Default::default();
        let mut untracked = 0;
        for r in self.ask_all(|| Query::Limits)? {
            let Reply::Limits(l) = r else { return Err("unexpected reply".into()) };
            let Some(l) = l else { continue };
            let (cls, cl, u) = *l;
            untracked += u;
            for c in &cls {
                match classes.iter_mut().find(|(x, _)| x.id == c.id) {
                    Some((x, w)) => {
                        x.local = x.local.add(c.local);
                        for (a, b) in x.refused.iter_mut().zip(c.refused) {
                            *a += b;
                        }
                        for (a, b) in x.syn_proxy.iter_mut().zip(c.syn_proxy) {
                            *a += b;
                        }
                        w.push(c.local);
                    }
                    None => classes.push((c.clone(), vec![c.local])),
                }
            }
            for (class, addr, n) in cl {
                if let Some(c) = cls.get(usize::from(class)) {
                    let e = clients.entry((c.id, addr)).or_default();
                    *e = e.add(n);
                }
            }
        }
        if classes.is_empty() {
            return Ok(json!({ "limits": false, "classes": [], "clients": [] }));
        }
        let estimates = self.limits.classes();
        let peer_clients = self.limits.member_clients();
        let name_of = |id: u32| classes.iter().find(|(c, _)| c.id == id).map(|(c, _)| c.name.clone()).unwrap_or_else(|| format!("{id:#x}"));
        let rows: Vec<Value> = classes
            .iter()
            .map(|(c, workers)| {
                let members = estimates.iter().find(|e| e.id == c.id).map(|e| e.members.clone()).unwrap_or_default();
                let estimate = members.values().fold(c.local, |a, &b| a.add(b));
                let refused: serde_json::Map<String, Value> = dataplane::conntrack::limits::Hit::ALL
                    .iter()
                    .map(|h| (h.as_str().to_string(), json!(c.refused[*h as usize])))
                    .collect();
                json!({
                    "name": c.name,
                    "limits": c.limits,
                    "local": c.local,
                    "workers": workers,
                    "members": members.iter().map(|(n, v)| (format!("n{n}"), json!(v))).collect::<serde_json::Map<_, _>>(),
                    "estimate": estimate,
                    "refused": refused,
                    "syn_proxy": { "cookies_sent": c.syn_proxy[0], "opened": c.syn_proxy[1] },
                })
            })
            .collect();
        let mut ids: std::collections::BTreeSet<(u32, std::net::IpAddr)> = clients.keys().copied().collect();
        ids.extend(peer_clients.keys().copied());
        let mut crow: Vec<(Count, Value)> = ids
            .into_iter()
            .map(|k| {
                let local = clients.get(&k).copied().unwrap_or_default();
                let estimate = local.add(peer_clients.get(&k).copied().unwrap_or_default());
                let limits = classes.iter().find(|(c, _)| c.id == k.0).map(|(c, _)| c.limits).unwrap_or_default();
                (estimate, json!({
                    "class": name_of(k.0),
                    "client": k.1.to_string(),
                    "local": local,
                    "estimate": estimate,
                    "per_client_max": limits.per_client_max,
                    "per_client_embryonic_max": limits.per_client_embryonic_max,
                }))
            })
            .collect();
        crow.sort_by(|a, b| (b.0.conns, b.0.embryonic).cmp(&(a.0.conns, a.0.embryonic)));
        crow.truncate(crate::worker::SHOW_LIMIT_CLIENTS);
        Ok(json!({
            "limits": true,
            "report_interval_ms": controlplane::limits::REPORT_INTERVAL.0 / 1_000_000,
            "members_reporting": self.limits.reporting().iter().map(|n| format!("n{}", n.0)).collect::<Vec<_>>(),
            "classes": rows,
            "clients": crow.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
            "clients_untracked": untracked,
            "estimate_counters": self.limits.counters,
        }))
    }

    /// `show conn count`: this node's connections (per worker) and, where
    /// the global limits count them, the cluster-wide estimate.
    pub(super) fn show_conn_count(&self) -> Result<Value, String> {
        let mut workers = Vec::new();
        for r in self.ask_all(|| Query::Conns { max: 0 })? {
            let Reply::Conns(_, n) = r else { return Err("unexpected reply".into()) };
            workers.push(n);
        }
        let local: usize = workers.iter().sum();
        let global = self.limits.classes().into_iter().find(|c| c.id == 0);
        let members: u64 = global.as_ref().map_or(0, |g| g.members.values().map(|c| u64::from(c.conns)).sum());
        Ok(json!({
            "local": local,
            "workers": workers,
            // The members' last reports: counted only under global limits.
            "cluster_estimate": global.as_ref().map(|_| local as u64 + members),
            "members": global.map(|g| g.members.iter().map(|(n, c)| (format!("n{n}"), json!(c.conns))).collect::<serde_json::Map<_, _>>()),
        }))
    }
}

/// A limit event as IPFIX records (controlplane::ipfix::LimitEvent, RFC
/// 8158's quota exceeded): one per limit of the class that refused some,
/// with its configured value, at Unix time `time_ms`.
pub(super) fn limit_events(limits: &config::Limits, refused: &[u64; 4], time_ms: u64) -> Vec<controlplane::ipfix::LimitEvent> {
    use dataplane::conntrack::limits::Hit;
    let value = |h: Hit| match h {
        Hit::Conns => limits.max_conns,
        Hit::Embryonic => limits.max_embryonic,
        Hit::Client => limits.per_client_max,
        Hit::ClientEmbryonic => limits.per_client_embryonic_max,
    };
    Hit::ALL
        .iter()
        .filter(|h| refused[**h as usize] > 0)
        .map(|&h| controlplane::ipfix::LimitEvent {
            time_ms,
            per_client: matches!(h, Hit::Client | Hit::ClientEmbryonic),
            limit: value(h).unwrap_or(0),
            refused: refused[h as usize],
        })
        .collect()
}

/// A limit event's text: "limits global: 145 new connections refused in the
/// last second (per-client-embryonic-max 145)".
pub(super) fn limit_event_text(class: &str, refused: &[u64; 4]) -> String {
    let total: u64 = refused.iter().sum();
    let by: Vec<String> = dataplane::conntrack::limits::Hit::ALL
        .iter()
        .filter(|h| refused[**h as usize] > 0)
        .map(|h| format!("{} {}", h.as_str(), refused[*h as usize]))
        .collect();
    format!("limits {class}: {total} new connections refused in the last second ({})", by.join(", "))
}

#[cfg(test)]
mod limit_event_tests {
    #[test]
    fn a_limit_event_is_one_ipfix_record_per_limit_that_refused() {
        let l = config::Limits { max_embryonic: Some(3), per_client_embryonic_max: Some(145), ..config::Limits::default() };
        let e = super::limit_events(&l, &[0, 3, 0, 145], 7);
        assert_eq!(
            e,
            [
                controlplane::ipfix::LimitEvent { time_ms: 7, per_client: false, limit: 3, refused: 3 },
                controlplane::ipfix::LimitEvent { time_ms: 7, per_client: true, limit: 145, refused: 145 },
            ]
        );
        assert!(super::limit_events(&l, &[0; 4], 7).is_empty());
    }

    #[test]
    fn a_limit_event_names_the_class_and_each_limit_that_refused() {
        assert_eq!(
            super::limit_event_text("web-in", &[0, 3, 0, 145]),
            "limits web-in: 148 new connections refused in the last second (max-embryonic 3, per-client-embryonic-max 145)"
        );
    }
}
