//! Counter sets as JSON, the shape `show stats` and `show cluster` answer
//! with: every `dataplane::stats::Stats` renders the same way, so a new
//! counter appears in the management protocol (and, through another
//! visitor, in metrics) without anyone writing its name twice.
//!
//! Mapping: a counter or gauge is a number under its name; a family is an
//! object `{label value: count}` (every value, in order); a group is a
//! nested object; a listed group (with an index) is the next element of an
//! array under its name.

use dataplane::stats::{Stats, Visitor};
use serde_json::{Map, Value};

/// `s` as a JSON object.
pub fn to_json(s: &dyn Stats) -> Value {
    let mut j = Json { obj: Map::new() };
    s.visit(&mut j);
    Value::Object(j.obj)
}

struct Json {
    obj: Map<String, Value>,
}

impl Visitor for Json {
    fn counter(&mut self, name: &'static str, value: u64) {
        self.obj.insert(name.into(), value.into());
    }
    fn gauge(&mut self, name: &'static str, value: u64) {
        self.obj.insert(name.into(), value.into());
    }
    fn family(&mut self, name: &'static str, _label: &'static str, entries: &mut dyn Iterator<Item = (&'static str, u64)>) {
        let m: Map<String, Value> = entries.map(|(k, v)| (k.to_string(), Value::from(v))).collect();
        self.obj.insert(name.into(), Value::Object(m));
    }
    fn group(&mut self, name: &'static str, index: Option<(&'static str, usize)>, stats: &dyn Stats) {
        let v = to_json(stats);
        match index {
            None => {
                self.obj.insert(name.into(), v);
            }
            Some(_) => match self.obj.entry(name).or_insert_with(|| Value::Array(Vec::new())) {
                Value::Array(a) => a.push(v),
                other => *other = Value::Array(vec![v]),
            },
        }
    }
}

/// Adds `v` into `acc`, the way `show stats` adds up the workers of one
/// node: numbers add, objects merge key by key (a key only one side has
/// is kept), arrays add element by element (the longer one's tail kept).
/// Anything else (a string) keeps the first value seen. `Null` is the
/// empty sum.
pub fn add_json(acc: &mut Value, v: &Value) {
    match (acc, v) {
        (acc @ Value::Null, v) => *acc = v.clone(),
        (Value::Number(a), Value::Number(b)) => {
            if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
                *a = x.saturating_add(y).into();
            } else if let Some(n) = serde_json::Number::from_f64(a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0)) {
                *a = n;
            }
        }
        (Value::Object(a), Value::Object(b)) => {
            for (k, bv) in b {
                add_json(a.entry(k.clone()).or_insert(Value::Null), bv);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, bv) in b.iter().enumerate() {
                match a.get_mut(i) {
                    Some(av) => add_json(av, bv),
                    None => a.push(bv.clone()),
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::pipeline::{Counters, PortCounters};
    use dataplane::DropReason;

    fn counters() -> Counters {
        let mut drops = [0; DropReason::COUNT];
        drops[DropReason::AclDenied.index()] = 2;
        Counters {
            packets: 5,
            drops,
            forwarded: 3,
            consumed: 0,
            arp_replies: 0,
            icmp_echo_replies: 0,
            icmp_errors_forwarded: 0,
            flows_created: 1,
            flows_evicted_embryonic: 0,
            flows: 1,
            flow_capacity: 16,
            arp_requests: 0,
            generated_dropped: 0,
            vlan_tagged: 0,
            fast_path: 2,
            arp_hold: Default::default(),
            fragmented: 0,
            fragments_out: 0,
            icmp_errors: Default::default(),
            ipv6: Default::default(),
            flow_log: Default::default(),
            syn_proxy: Default::default(),
            ports: vec![PortCounters { rx_packets: 5, ..Default::default() }, PortCounters::default()],
            rx_unknown_port: 0,
            handed_off: 0,
            handoffs_in: 0,
        }
    }

    #[test]
    fn show_stats_shape() {
        let v = to_json(&counters());
        assert_eq!(v["packets"], 5);
        assert_eq!(v["fast_path"], 2);
        assert_eq!(v["dropped"], 2);
        assert_eq!(v["drops"]["acl-denied"], 2, "drops by reason as an object");
        assert_eq!(v["drops"].as_object().map(|m| m.len()), Some(DropReason::COUNT), "every reason");
        assert_eq!(v["arp_hold"]["held"], 0, "a group is a nested object");
        assert_eq!(v["ports"][0]["rx_packets"], 5, "listed groups are an array");
        assert_eq!(v["ports"].as_array().map(Vec::len), Some(2));
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys.first().map(|k| k.as_str()), Some("packets"), "visit order kept");
    }

    #[test]
    fn workers_add_up() {
        let one = to_json(&counters());
        let mut sum = Value::Null;
        for _ in 0..3 {
            add_json(&mut sum, &one);
        }
        assert_eq!(sum["packets"], 15);
        assert_eq!(sum["drops"]["acl-denied"], 6, "families add by label");
        assert_eq!(sum["drops"]["no-route"], 0);
        assert_eq!(sum["ports"][0]["rx_packets"], 15, "arrays add element by element");
        assert_eq!(sum["ports"].as_array().map(Vec::len), Some(2));
        let mut s = serde_json::json!({"node": "a", "x": [1], "y": 1.5});
        add_json(&mut s, &serde_json::json!({"node": "b", "x": [2, 7], "z": 4, "y": 1}));
        assert_eq!(s, serde_json::json!({"node": "a", "x": [3, 7], "y": 2.5, "z": 4}), "strings keep the first; a tail and a new key are kept");
    }
}
