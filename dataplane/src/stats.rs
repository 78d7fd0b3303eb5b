//! One way to read any set of counters: every counter struct implements
//! `Stats`, which walks its counters and gauges in a fixed order and hands
//! each to a `Visitor`. `show stats` and `show cluster` (JSON,
//! `controlplane::stats`), the simulator's reports, the tests' flat maps
//! (`flatten`) and a metrics exporter are visitors; none of them knows a
//! struct's fields.
//!
//! The vocabulary, chosen to map onto JSON and onto Prometheus' text
//! format alike:
//! - `counter`: a count since start (Prometheus `_total`);
//! - `gauge`: a level that goes up and down (table occupancy, frames held);
//! - `family`: one counter per value of a label, all values every time in
//!   the same order (drops by reason, CCL messages by kind);
//! - `group`: a nested set under a name (`arp_hold`), or, with an index,
//!   one of a list (per-port counters under `ports`, label `port`).
//!
//! Names are snake_case and stable: they are the JSON keys operators'
//! scripts read. Visiting is off the packet path (it may allocate).

use std::collections::BTreeMap;

/// A set of counters that can be read without knowing its fields.
pub trait Stats {
    fn visit(&self, v: &mut dyn Visitor);
}

/// What a reader of `Stats` is told, in order.
pub trait Visitor {
    fn counter(&mut self, name: &'static str, value: u64);
    fn gauge(&mut self, name: &'static str, value: u64);
    /// `name{label=key}` for each entry.
    fn family(&mut self, name: &'static str, label: &'static str, entries: &mut dyn Iterator<Item = (&'static str, u64)>);
    /// A nested set; `index` is `(label, position)` for one of a list.
    fn group(&mut self, name: &'static str, index: Option<(&'static str, usize)>, stats: &dyn Stats);
}

/// `impl Stats` for a struct of plain `u64` fields, each a `counter` or a
/// `gauge`, visited in the order listed:
/// `impl_stats!(ArpHoldCounters { counter held, counter released })`.
#[macro_export]
macro_rules! impl_stats {
    ($ty:ty { $($kind:ident $field:ident),* $(,)? }) => {
        impl $crate::stats::Stats for $ty {
            fn visit(&self, v: &mut dyn $crate::stats::Visitor) {
                $( v.$kind(stringify!($field), self.$field); )*
            }
        }
    };
}

/// Every counter and gauge by a dotted name: `name`, `group.name`,
/// `group.N.name` for listed groups, `family.key` for families.
pub fn flatten(s: &dyn Stats) -> BTreeMap<String, u64> {
    struct Flat {
        prefix: String,
        out: BTreeMap<String, u64>,
    }
    impl Flat {
        fn put(&mut self, name: &str, v: u64) {
            self.out.insert(format!("{}{name}", self.prefix), v);
        }
    }
    impl Visitor for Flat {
        fn counter(&mut self, name: &'static str, value: u64) {
            self.put(name, value);
        }
        fn gauge(&mut self, name: &'static str, value: u64) {
            self.put(name, value);
        }
        fn family(&mut self, name: &'static str, _: &'static str, entries: &mut dyn Iterator<Item = (&'static str, u64)>) {
            for (k, v) in entries {
                self.put(&format!("{name}.{k}"), v);
            }
        }
        fn group(&mut self, name: &'static str, index: Option<(&'static str, usize)>, stats: &dyn Stats) {
            let saved = self.prefix.clone();
            self.prefix = match index {
                None => format!("{saved}{name}."),
                Some((_, i)) => format!("{saved}{name}.{i}."),
            };
            stats.visit(self);
            self.prefix = saved;
        }
    }
    let mut f = Flat { prefix: String::new(), out: BTreeMap::new() };
    s.visit(&mut f);
    f.out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Inner(u64);
    impl Stats for Inner {
        fn visit(&self, v: &mut dyn Visitor) {
            v.counter("held", self.0);
        }
    }
    struct Outer;
    impl Stats for Outer {
        fn visit(&self, v: &mut dyn Visitor) {
            v.counter("packets", 3);
            v.gauge("flows", 2);
            v.family("drops", "reason", &mut [("a", 1), ("b", 0)].into_iter());
            v.group("hold", None, &Inner(7));
            for i in 0..2 {
                v.group("ports", Some(("port", i)), &Inner(10 + i as u64));
            }
        }
    }

    #[test]
    fn flatten_names_every_value() {
        let f = flatten(&Outer);
        let want: BTreeMap<String, u64> = [
            ("packets", 3),
            ("flows", 2),
            ("drops.a", 1),
            ("drops.b", 0),
            ("hold.held", 7),
            ("ports.0.held", 10),
            ("ports.1.held", 11),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(f, want);
    }
}
