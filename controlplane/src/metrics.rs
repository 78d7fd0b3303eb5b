//! Prometheus' text exposition format 0.0.4 (issue 14, SPEC O1) of any
//! counter set: a `dataplane::stats::Stats` visitor, so every counter that
//! `show stats` and `show cluster` give appears here under a derived name
//! without anyone writing it twice (`dataplane::stats`'s essay).
//!
//! Naming (the conventions of prometheus.io's "Metric and label naming"):
//! - every metric is `clusterfw_` + the path of groups + the counter's
//!   name, joined by `_` (`arp_hold` group, `held` counter:
//!   `clusterfw_arp_hold_held_total`);
//! - a `counter` gets the suffix `_total`; a `gauge` is the level as it is;
//! - a `family` is one metric with its label (`clusterfw_drops_total
//!   {reason="no-route"}`); a listed group adds its index label
//!   (`port="0"`); labels given by the caller come first;
//! - values of the same name and labels added by several calls are summed
//!   (a node's workers: the node's figure, as `show stats` adds them).
//!
//! Chosen over the `prometheus-client` crate: its registry holds live metric
//! objects updated in place, where the node's counters are snapshots the
//! workers hand to the control lcore, and it writes OpenMetrics text; this
//! writer is the visitor that walks those snapshots (a page of code, no
//! allocation on the packet path: it runs on the control lcore when
//! scraped).
//!
//! Invariants: a name appears with one `# TYPE` (the first kind seen; a
//! later value of another kind under the same name is counted in
//! `conflicts` and dropped, never a second type line); metric and label
//! names match `[a-zA-Z_][a-zA-Z0-9_]*` (other characters become `_`);
//! label values are escaped (`\\`, `\"`, `\n`); output is in the order
//! names were first seen, samples in the order their labels were.

use dataplane::stats::{Stats, Visitor};
use std::collections::HashMap;
use std::fmt::Write;

/// Every metric's prefix.
pub const PREFIX: &str = "clusterfw";

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A sample's value: counts exact as integers, a histogram's sum (in
/// seconds) as a float.
#[derive(Copy, Clone, Debug, PartialEq)]
enum Num {
    U(u64),
    F(f64),
}

impl Num {
    fn add(self, o: Num) -> Num {
        match (self, o) {
            (Num::U(a), Num::U(b)) => Num::U(a.saturating_add(b)),
            (a, b) => Num::F(a.as_f64() + b.as_f64()),
        }
    }
    fn as_f64(self) -> f64 {
        match self {
            Num::U(v) => v as f64,
            Num::F(v) => v,
        }
    }
}

impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Num::U(v) => write!(f, "{v}"),
            Num::F(v) => write!(f, "{v}"),
        }
    }
}

struct Metric {
    name: String,
    kind: Kind,
    help: String,
    /// (rendered label set, value), in first-seen order; a histogram's
    /// label sets start with their series' suffix (`_bucket{…}`).
    samples: Vec<(String, Num)>,
    at: HashMap<String, usize>,
}

/// One scrape's metrics, being built (module essay).
#[derive(Default)]
pub struct Exposition {
    metrics: Vec<Metric>,
    at: HashMap<String, usize>,
    /// Values dropped because their name had been seen with another kind.
    pub conflicts: u64,
}

impl Exposition {
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Every counter and gauge of `s`, under `clusterfw_<prefix>_…`
    /// (`prefix` may be empty), with `labels` on each.
    pub fn stats(&mut self, prefix: &str, labels: &[(&str, &str)], s: &dyn Stats) {
        let mut v = Walk {
            out: self,
            path: prefix.to_string(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        s.visit(&mut v);
    }

    /// One counter value: `clusterfw_<name>_total` (`_total` is added
    /// unless `name` has it).
    pub fn counter(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: u64) {
        self.add(&total(name), Kind::Counter, help, &render_labels(labels.iter().map(|(k, v)| (*k, *v))), Num::U(value));
    }

    /// One gauge value: `clusterfw_<name>`.
    pub fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: u64) {
        self.add(name, Kind::Gauge, help, &render_labels(labels.iter().map(|(k, v)| (*k, *v))), Num::U(value));
    }

    /// One gauge with a fractional value (seconds): `clusterfw_<name>`.
    pub fn gauge_f64(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: f64) {
        self.add(name, Kind::Gauge, help, &render_labels(labels.iter().map(|(k, v)| (*k, *v))), Num::F(value));
    }

    /// One histogram: `clusterfw_<name>_bucket{…,le="b"}` (cumulative),
    /// `_sum` and `_count`. `bounds` are the buckets' upper bounds in
    /// increasing order; `counts` the observations per bucket, one more
    /// than `bounds` (the last: beyond every bound); `sum` their total.
    pub fn histogram(&mut self, name: &str, help: &str, labels: &[(&str, &str)], bounds: &[f64], counts: &[u64], sum: f64) {
        let base = labels.iter().map(|(k, v)| (*k, *v));
        let mut total = 0u64;
        let les: Vec<String> = bounds.iter().map(|b| b.to_string()).chain(["+Inf".to_string()]).collect();
        for (le, &c) in les.iter().zip(counts.iter().chain(std::iter::repeat(&0))) {
            total = total.saturating_add(c);
            let l = render_labels(base.clone().chain([("le", le.as_str())]));
            self.add(name, Kind::Histogram, help, &format!("_bucket{l}"), Num::U(total));
        }
        let l = render_labels(base);
        self.add(name, Kind::Histogram, help, &format!("_sum{l}"), Num::F(sum));
        self.add(name, Kind::Histogram, help, &format!("_count{l}"), Num::U(total));
    }

    fn add(&mut self, name: &str, kind: Kind, help: &str, labels: &str, value: Num) {
        let full = sanitize(&format!("{PREFIX}_{name}"));
        let i = match self.at.get(&full) {
            Some(&i) => i,
            None => {
                self.at.insert(full.clone(), self.metrics.len());
                self.metrics.push(Metric {
                    name: full,
                    kind,
                    help: help.to_string(),
                    samples: Vec::new(),
                    at: HashMap::new(),
                });
                self.metrics.len() - 1
            }
        };
        let Some(m) = self.metrics.get_mut(i) else { return };
        if m.kind != kind {
            self.conflicts += 1;
            return;
        }
        match m.at.get(labels) {
            Some(&j) => {
                if let Some(s) = m.samples.get_mut(j) {
                    s.1 = s.1.add(value);
                }
            }
            None => {
                m.at.insert(labels.to_string(), m.samples.len());
                m.samples.push((labels.to_string(), value));
            }
        }
    }

    /// The text exposition (format 0.0.4): `# HELP`, `# TYPE`, then the
    /// samples of each metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for m in &self.metrics {
            let _ = writeln!(out, "# HELP {} {}", m.name, escape_help(&m.help));
            let _ = writeln!(out, "# TYPE {} {}", m.name, m.kind.as_str());
            for (labels, v) in &m.samples {
                let _ = writeln!(out, "{}{labels} {v}", m.name);
            }
        }
        out
    }
}

/// Walks a `Stats` into an exposition, keeping the group path and labels.
struct Walk<'a> {
    out: &'a mut Exposition,
    path: String,
    labels: Vec<(String, String)>,
}

impl Walk<'_> {
    fn name(&self, leaf: &str) -> String {
        if self.path.is_empty() {
            leaf.to_string()
        } else {
            format!("{}_{leaf}", self.path)
        }
    }

    fn help(&self, kind: &str, leaf: &str) -> String {
        let path = self.name(leaf).replace('_', " ");
        format!("{kind} {path} (as in show stats / show cluster)")
    }

    fn put(&mut self, leaf: &str, kind: Kind, extra: Option<(&str, &str)>, value: u64) {
        let name = match kind {
            Kind::Counter => total(&self.name(leaf)),
            _ => self.name(leaf),
        };
        let labels = render_labels(self.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).chain(extra));
        let help = self.help(kind.as_str(), leaf);
        self.out.add(&name, kind, &help, &labels, Num::U(value));
    }
}

impl Visitor for Walk<'_> {
    fn counter(&mut self, name: &'static str, value: u64) {
        self.put(name, Kind::Counter, None, value);
    }

    fn gauge(&mut self, name: &'static str, value: u64) {
        self.put(name, Kind::Gauge, None, value);
    }

    fn family(&mut self, name: &'static str, label: &'static str, entries: &mut dyn Iterator<Item = (&'static str, u64)>) {
        for (k, v) in entries {
            self.put(name, Kind::Counter, Some((label, k)), v);
        }
    }

    fn group(&mut self, name: &'static str, index: Option<(&'static str, usize)>, stats: &dyn Stats) {
        let saved = (self.path.clone(), self.labels.len());
        self.path = self.name(name);
        if let Some((label, i)) = index {
            self.labels.push((label.to_string(), i.to_string()));
        }
        stats.visit(self);
        self.path = saved.0;
        self.labels.truncate(saved.1);
    }
}

/// A counter's name: `name` with the suffix `_total` (once).
fn total(name: &str) -> String {
    if name.ends_with("_total") {
        name.to_string()
    } else {
        format!("{name}_total")
    }
}

/// `{k="v",…}`, or nothing for no labels.
fn render_labels<'a>(labels: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut s = String::new();
    for (k, v) in labels {
        s.push(if s.is_empty() { '{' } else { ',' });
        s.push_str(&sanitize(k));
        s.push_str("=\"");
        for c in v.chars() {
            match c {
                '\\' => s.push_str("\\\\"),
                '"' => s.push_str("\\\""),
                '\n' => s.push_str("\\n"),
                c => s.push(c),
            }
        }
        s.push('"');
    }
    if !s.is_empty() {
        s.push('}');
    }
    s
}

/// A metric or label name: `[a-zA-Z_][a-zA-Z0-9_]*` (anything else `_`).
fn sanitize(name: &str) -> String {
    let mut s: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// HELP text escapes `\` and newlines (format 0.0.4).
fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    struct Hold(u64);
    impl Stats for Hold {
        fn visit(&self, v: &mut dyn Visitor) {
            v.counter("held", self.0);
            v.gauge("queued", 1);
        }
    }
    struct Node(u64);
    impl Stats for Node {
        fn visit(&self, v: &mut dyn Visitor) {
            v.counter("rx_packets", self.0);
            v.gauge("flows", 2);
            v.family("drops", "reason", &mut [("no-route", 1), ("acl", 0)].into_iter());
            v.group("arp_hold", None, &Hold(7));
            for i in 0..2 {
                v.group("ports", Some(("port", i)), &Hold(10 + i as u64));
            }
        }
    }

    /// The exposition of two workers' counters, summed, exactly.
    #[test]
    fn golden_two_workers_summed() {
        let mut e = Exposition::new();
        e.stats("", &[], &Node(3));
        e.stats("", &[], &Node(4));
        e.gauge("cluster_epoch", "the member set's epoch", &[], 9);
        e.counter("nic_rx_packets", "packets the NIC received", &[("port", "in\"side")], 5);
        let want = "\
# HELP clusterfw_rx_packets_total counter rx packets (as in show stats / show cluster)
# TYPE clusterfw_rx_packets_total counter
clusterfw_rx_packets_total 7
# HELP clusterfw_flows gauge flows (as in show stats / show cluster)
# TYPE clusterfw_flows gauge
clusterfw_flows 4
# HELP clusterfw_drops_total counter drops (as in show stats / show cluster)
# TYPE clusterfw_drops_total counter
clusterfw_drops_total{reason=\"no-route\"} 2
clusterfw_drops_total{reason=\"acl\"} 0
# HELP clusterfw_arp_hold_held_total counter arp hold held (as in show stats / show cluster)
# TYPE clusterfw_arp_hold_held_total counter
clusterfw_arp_hold_held_total 14
# HELP clusterfw_arp_hold_queued gauge arp hold queued (as in show stats / show cluster)
# TYPE clusterfw_arp_hold_queued gauge
clusterfw_arp_hold_queued 2
# HELP clusterfw_ports_held_total counter ports held (as in show stats / show cluster)
# TYPE clusterfw_ports_held_total counter
clusterfw_ports_held_total{port=\"0\"} 20
clusterfw_ports_held_total{port=\"1\"} 22
# HELP clusterfw_ports_queued gauge ports queued (as in show stats / show cluster)
# TYPE clusterfw_ports_queued gauge
clusterfw_ports_queued{port=\"0\"} 2
clusterfw_ports_queued{port=\"1\"} 2
# HELP clusterfw_cluster_epoch the member set's epoch
# TYPE clusterfw_cluster_epoch gauge
clusterfw_cluster_epoch 9
# HELP clusterfw_nic_rx_packets_total packets the NIC received
# TYPE clusterfw_nic_rx_packets_total counter
clusterfw_nic_rx_packets_total{port=\"in\\\"side\"} 5
";
        assert_eq!(e.render(), want);
        assert_eq!(e.conflicts, 0);
    }

    #[test]
    fn histogram_buckets_are_cumulative_with_sum_and_count() {
        let mut e = Exposition::new();
        let bounds = [0.001, 0.01];
        e.histogram("loop_seconds", "loops", &[("worker", "0")], &bounds, &[2, 1, 1], 0.5);
        e.histogram("loop_seconds", "loops", &[("worker", "0")], &bounds, &[1, 0, 0], 0.25);
        let want = "\
# HELP clusterfw_loop_seconds loops
# TYPE clusterfw_loop_seconds histogram
clusterfw_loop_seconds_bucket{worker=\"0\",le=\"0.001\"} 3
clusterfw_loop_seconds_bucket{worker=\"0\",le=\"0.01\"} 4
clusterfw_loop_seconds_bucket{worker=\"0\",le=\"+Inf\"} 5
clusterfw_loop_seconds_sum{worker=\"0\"} 0.75
clusterfw_loop_seconds_count{worker=\"0\"} 5
";
        assert_eq!(e.render(), want);
    }

    #[test]
    fn a_second_kind_under_one_name_is_dropped_and_counted() {
        let mut e = Exposition::new();
        e.gauge("x_total", "", &[], 1);
        e.counter("x", "", &[], 2);
        assert_eq!(e.conflicts, 1);
        assert_eq!(e.render().matches("# TYPE").count(), 1);
    }

    #[test]
    fn prefix_and_caller_labels_come_first() {
        let mut e = Exposition::new();
        e.stats("cluster", &[("worker", "1")], &Node(1));
        let r = e.render();
        assert!(r.contains("clusterfw_cluster_ports_held_total{worker=\"1\",port=\"0\"} 10\n"), "{r}");
        assert!(r.contains("clusterfw_cluster_drops_total{worker=\"1\",reason=\"no-route\"} 1\n"), "{r}");
    }

    proptest! {
        /// Whatever the names and label values, every sample line is
        /// `name{k="v",…} value` with a valid name and escaped values.
        #[test]
        fn lines_stay_well_formed(name in ".{0,12}", label in ".{0,8}", value in ".{0,16}", n in any::<u64>()) {
            let mut e = Exposition::new();
            e.counter(&name, "h\nelp", &[(&label, &value)], n);
            let r = e.render();
            let lines: Vec<&str> = r.lines().collect();
            prop_assert_eq!(lines.len(), 3);
            let sample = lines[2];
            let (metric, rest) = sample.split_once('{').unwrap();
            prop_assert!(metric.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
            prop_assert!(!metric.starts_with(|c: char| c.is_ascii_digit()));
            let tail = format!("\"}} {n}");
            prop_assert!(rest.ends_with(&tail));
            // The label value: no raw quote, backslash or newline unescaped.
            let inner = &rest[rest.find("=\"").unwrap() + 2..rest.len() - tail.len()];
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                prop_assert!(c != '"' && c != '\n');
                if c == '\\' {
                    prop_assert!(matches!(chars.next(), Some('\\' | '"' | 'n')));
                }
            }
        }
    }
}
