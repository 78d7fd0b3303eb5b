//! One view of the whole cluster from any node (SPEC L5; issue 14, item
//! 4): `clusterfw-ctl cluster show conn|stats|cluster|xlate|…`.
//!
//! The node that is asked renders its own `show TOPIC` answer, asks every
//! other configured node for theirs over the CCL's control channel
//! (`membership::Membership::ask`: authenticated, chunked, retransmitted)
//! and merges them here. This module is the part that needs no I/O: the
//! topics' wire codes, the encoding of one member's answer, and the merge.
//!
//! What the merge promises:
//! - every configured node appears in `members`, with `answered`, `error`
//!   (it answered with an error, e.g. "no NAT configured"), `not
//!   answering` (nothing whole by the deadline: down, cut off, or an older
//!   node that does not know the query) or `bad answer` (undecodable);
//!   `not_answering` lists the names of the silent ones, so a script can
//!   test one field;
//! - `conn`: each connection once (whichever direction a member's record
//!   holds; the row shows the owner's original direction), with the node of every role any member reported — owner,
//!   director, backups, forwarders — and the owner's state and counters
//!   when the owner answered (`owner_answered`); a row whose owner is
//!   silent still names the owner the other members' records point at;
//! - `stats`: every node's answer under its name, and `total`, the
//!   counters added up (per-node fields such as the name, uptime, the
//!   ports' DPDK numbers and the per-worker breakdown are left out of the
//!   total);
//! - `cluster`: every node's answer and `agree`: whether the answering
//!   members run the same epoch, control node and replicated
//!   configuration version — the first thing to check in a split-brain;
//! - other topics: every node's answer under its name.

use crate::mgmt::{Response, Topic};
use dataplane::pipeline::trace::{TraceFilter, TRACE_MAX_SECS};
use dataplane::NodeId;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Connections one member puts in its answer to `cluster show conn` (its
/// own `show conn` allows more): 4096 rows of about 250 bytes are about
/// 700 CCL chunks, well within `membership::QUERY_MAX_BYTES`.
pub const CLUSTER_CONN_MAX: usize = 4096;

/// The topics a cluster-wide query carries, with their wire codes
/// (`QueryRequest::topic`, 1..=15). `metrics` and `config` are not asked
/// across the cluster (the first is every node's scrape, the second its
/// file).
const TOPICS: [(Topic, u8); 10] = [
    (Topic::Stats, 1),
    (Topic::Conn, 2),
    (Topic::Cluster, 3),
    (Topic::Xlate, 4),
    (Topic::NatPool, 5),
    (Topic::Arp, 6),
    (Topic::Route, 7),
    (Topic::Rules, 8),
    (Topic::ClusterHistory, 9),
    (Topic::Trace, 10),
];

/// The wire code of "start a trace" (`mgmt::Request::TraceStart`), whose
/// argument is [`trace_arg`].
pub const TRACE_START: u8 = 11;

/// The argument of a trace start: `SECS FILTER`.
pub fn trace_arg(secs: u64, filter: &str) -> String {
    format!("{secs} {filter}")
}

/// A trace start's seconds and filter (`trace_arg`), checked.
pub fn parse_trace_arg(arg: &[u8]) -> Result<(u64, TraceFilter), String> {
    let text = std::str::from_utf8(arg).map_err(|_| "trace argument is not text".to_string())?;
    let (secs, filter) = text.split_once(' ').ok_or_else(|| format!("trace argument {text:?}: SECS FILTER"))?;
    let secs: u64 = secs.parse().map_err(|_| format!("trace seconds {secs:?}"))?;
    if secs == 0 || secs > TRACE_MAX_SECS {
        return Err(format!("a trace runs 1 to {TRACE_MAX_SECS} s, not {secs}"));
    }
    let f = TraceFilter::parse(filter).map_err(|e| format!("trace filter {filter:?}: {e}"))?;
    Ok((secs, f))
}

/// The wire code of a topic a cluster-wide query may ask (`None`: not
/// asked across the cluster).
pub fn topic_code(t: Topic) -> Option<u8> {
    TOPICS.iter().find(|(x, _)| *x == t).map(|(_, c)| *c)
}

/// The topic of a wire code.
pub fn topic_of(code: u8) -> Option<Topic> {
    TOPICS.iter().find(|(_, c)| *c == code).map(|(t, _)| *t)
}

/// One member's answer as it travels: the management protocol's response
/// object (`{"ok":true,"data":…}` or `{"ok":false,"error":…}`).
pub fn encode_answer(r: Result<Value, String>) -> Vec<u8> {
    let resp = match r {
        Ok(data) => Response { ok: true, error: None, data },
        Err(e) => Response { ok: false, error: Some(e), data: Value::Null },
    };
    serde_json::to_vec(&resp).unwrap_or_else(|_| br#"{"ok":false,"error":"answer not encoded"}"#.to_vec())
}

/// What one configured node made of the query.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// Its `show` data.
    Data(Value),
    /// It answered with an error.
    Error(String),
    /// Nothing whole by the deadline.
    Missing,
    /// Its bytes are not an answer (or its transfer was aborted).
    Bad,
}

impl Answer {
    /// Decode an answer's bytes.
    pub fn decode(bytes: &[u8]) -> Answer {
        match serde_json::from_slice::<Response>(bytes) {
            Ok(r) if r.ok => Answer::Data(r.data),
            Ok(r) => Answer::Error(r.error.unwrap_or_else(|| "unknown error".into())),
            Err(_) => Answer::Bad,
        }
    }

    /// This node's own answer, as it would travel.
    pub fn of(r: &Result<Value, String>) -> Answer {
        match r {
            Ok(d) => Answer::Data(d.clone()),
            Err(e) => Answer::Error(e.clone()),
        }
    }

    fn status(&self) -> &'static str {
        match self {
            Answer::Data(_) => "answered",
            Answer::Error(_) => "error",
            Answer::Missing => "not answering",
            Answer::Bad => "bad answer",
        }
    }
}

/// A configured node and its answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub id: NodeId,
    pub name: String,
    pub this_node: bool,
    pub answer: Answer,
}

/// Merge the members' answers on `topic` (see the module documentation).
pub fn merge(topic: Topic, members: &[Member]) -> Value {
    let list: Vec<Value> = members.iter().map(member_row).collect();
    let silent = silent(members);
    let answered = || members.iter().filter_map(|m| if let Answer::Data(d) = &m.answer { Some((m, d)) } else { None });
    let nodes: Map<String, Value> = answered().map(|(m, d)| (m.name.clone(), d.clone())).collect();
    let mut out = json!({
        "topic": topic.as_str(),
        "members": list,
        "not_answering": silent,
    });
    match topic {
        Topic::Conn => {
            let (rows, reported) = merge_conns(members);
            out["connections"] = json!(rows.len());
            out["reported_rows"] = json!(reported);
            out["rows"] = Value::Array(rows);
        }
        Topic::Stats => {
            let mut total = Value::Null;
            for (_, d) in answered() {
                let mut d = d.clone();
                if let Value::Object(m) = &mut d {
                    for k in ["node", "uptime_s", "workers"] {
                        m.remove(k);
                    }
                    // A port's DPDK number is no counter.
                    for p in m.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
                        if let Value::Object(p) = p {
                            p.remove("port");
                        }
                    }
                }
                crate::stats::add_json(&mut total, &d);
            }
            out["total"] = total;
            out["nodes"] = Value::Object(nodes);
        }
        Topic::Cluster => {
            let same = |k: &str| {
                let mut vals = answered().map(|(_, d)| d[k].clone());
                let first = vals.next();
                first.is_some() && vals.all(|v| Some(&v) == first.as_ref())
            };
            out["agree"] = json!({
                "epoch": same("epoch"),
                "control_node": same("control_node"),
                "config_version": same("config_version"),
            });
            out["nodes"] = Value::Object(nodes);
        }
        Topic::Xlate => {
            let (rows, reported) = merge_xlates(members);
            out["translations"] = json!(rows.len());
            out["reported_rows"] = json!(reported);
            out["xlates"] = Value::Array(rows);
            // Per member: its NAT counters (its rows are in `xlates`), and
            // their sum.
            let mut total = Value::Null;
            let mut per = Map::new();
            for (m, d) in answered() {
                crate::stats::add_json(&mut total, &d["counters"]);
                per.insert(m.name.clone(), json!({ "nat": d["nat"], "counters": d["counters"] }));
            }
            out["counters"] = total;
            out["nodes"] = Value::Object(per);
        }
        Topic::NatPool => {
            out["pools"] = Value::Array(merge_pools(members));
            out["nodes"] = Value::Object(nodes);
        }
        Topic::Trace => {
            // One timeline: every node's events, each named with its
            // node, in the order of their (Unix) times.
            let mut events: Vec<Value> = Vec::new();
            for (m, d) in answered() {
                for e in d["events"].as_array().into_iter().flatten() {
                    let mut e = e.clone();
                    e["node"] = json!(m.name);
                    events.push(e);
                }
            }
            events.sort_by_key(|e| e["unix_ns"].as_u64().unwrap_or(0));
            let summary: Map<String, Value> = answered()
                .map(|(m, d)| {
                    let mut d = d.clone();
                    if let Value::Object(o) = &mut d {
                        o.remove("events");
                    }
                    (m.name.clone(), d)
                })
                .collect();
            out["nodes"] = Value::Object(summary);
            out["events"] = Value::Array(events);
        }
        _ => out["nodes"] = Value::Object(nodes),
    }
    out
}

/// Merge the members' answers to a trace start: who runs it.
pub fn merge_trace_start(members: &[Member]) -> Value {
    let list: Vec<Value> = members
        .iter()
        .map(|m| {
            let mut v = member_row(m);
            if let Answer::Data(d) = &m.answer {
                v["trace"] = d.clone();
            }
            v
        })
        .collect();
    json!({ "topic": "trace-start", "members": list, "not_answering": silent(members) })
}

/// A member's row in `members`: who, and what it made of the query.
fn member_row(m: &Member) -> Value {
    let mut v = json!({ "id": m.id.0, "name": m.name, "this_node": m.this_node, "status": m.answer.status() });
    if let Answer::Error(e) = &m.answer {
        v["error"] = json!(e);
    }
    v
}

/// The names of the members that did not answer.
fn silent(members: &[Member]) -> Vec<&str> {
    members.iter().filter(|m| m.answer == Answer::Missing).map(|m| m.name.as_str()).collect()
}

/// `show xlate` of every member as one row per translation (protocol,
/// real and mapped endpoint), naming the members that hold it: a PAT
/// translation lives on its connection's owner, a dynamic-NAT one on the
/// control node and as a replica on every member (N4). References add
/// up, idle is the least, age the most, stale only if stale everywhere.
/// Also the number of member rows read.
fn merge_xlates(members: &[Member]) -> (Vec<Value>, usize) {
    let mut by_key: BTreeMap<(String, String, String), Value> = BTreeMap::new();
    let mut reported = 0;
    for m in members {
        let Answer::Data(d) = &m.answer else { continue };
        for x in d["xlates"].as_array().into_iter().flatten() {
            reported += 1;
            let text = |k: &str| x[k].as_str().unwrap_or_default().to_string();
            let e = by_key.entry((text("proto"), text("real"), text("mapped"))).or_insert_with(|| {
                json!({
                    "proto": x["proto"], "real": x["real"], "mapped": x["mapped"], "sessions": x["sessions"],
                    "nodes": [], "refcnt": 0, "idle_ms": x["idle_ms"], "age_ms": 0, "stale": true,
                })
            });
            let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
            e["refcnt"] = json!(n(e, "refcnt") + n(x, "refcnt"));
            e["idle_ms"] = json!(n(e, "idle_ms").min(n(x, "idle_ms")));
            e["age_ms"] = json!(n(e, "age_ms").max(n(x, "age_ms")));
            e["stale"] = json!(e["stale"] == true && x["stale"] == true);
            if let Some(nodes) = e["nodes"].as_array_mut() {
                if !nodes.iter().any(|v| v == &json!(m.name)) {
                    nodes.push(json!(m.name));
                }
            }
        }
    }
    (by_key.into_values().collect(), reported)
}

/// `show nat pool` of every member as one row per pool: the blocks the
/// members hold, those free and the ports in use added up over every
/// member and worker (a PAT pool's blocks are dealt over the members, so
/// with every member answering `blocks` is the pool's whole count), and
/// each member's share under `nodes`. A dynamic-NAT pool's addresses are
/// handed out by the control node (N4): its members' free lists are not
/// added up, each is under `nodes`.
fn merge_pools(members: &[Member]) -> Vec<Value> {
    let mut by_pool: BTreeMap<u64, Value> = BTreeMap::new();
    for m in members {
        let Answer::Data(d) = &m.answer else { continue };
        for p in d["pools"].as_array().into_iter().flatten() {
            let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
            let e = by_pool.entry(n(p, "pool")).or_insert_with(|| {
                json!({ "pool": p["pool"], "name": p["name"], "kind": p["kind"], "addresses": p["addresses"],
                        "blocks": 0, "free_blocks": 0, "ports_in_use": 0, "nodes": {} })
            });
            for k in ["blocks", "free_blocks", "ports_in_use"] {
                e[k] = json!(n(e, k) + n(p, k));
            }
            let mine = &mut e["nodes"][m.name.as_str()];
            if mine.is_null() {
                *mine = json!({ "blocks": 0, "free_blocks": 0, "ports_in_use": 0, "free_addresses": 0 });
            }
            for k in ["blocks", "free_blocks", "ports_in_use", "free_addresses"] {
                mine[k] = json!(n(mine, k) + n(p, k));
            }
        }
    }
    by_pool.into_values().collect()
}

/// `show conn` of every member as one row per connection; also the number
/// of member rows read.
fn merge_conns(members: &[Member]) -> (Vec<Value>, usize) {
    let name_of = |id: u64| -> Value {
        members.iter().find(|m| u64::from(m.id.0) == id).map_or_else(|| json!(format!("node {id}")), |m| json!(m.name))
    };
    // Key: the connection whichever way a member saw it first (a
    // forwarder's record holds the direction it saw first, which may be
    // the reply's): protocol and the two endpoints in order.
    let key = |t: &Value| {
        let end = |a: &str, p: &str| format!("{}:{}", t[a].as_str().unwrap_or(""), t[p]);
        let (x, y) = (end("src", "src_port"), end("dst", "dst_port"));
        let (lo, hi) = if x <= y { (x, y) } else { (y, x) };
        format!("{} {lo} {hi}", t["proto"])
    };
    let mut by_tuple: BTreeMap<String, Value> = BTreeMap::new();
    let mut reported = 0;
    for m in members {
        let Answer::Data(d) = &m.answer else { continue };
        let Some(rows) = d["connections"].as_array() else { continue };
        for r in rows {
            let Some(t) = r.get("tuple").filter(|t| t.is_object()) else { continue };
            reported += 1;
            let e = by_tuple.entry(key(t)).or_insert_with(|| {
                json!({
                    "tuple": t,
                    "owner": Value::Null,
                    "owner_answered": false,
                    "director": Value::Null,
                    "backups": [],
                    "forwarders": [],
                })
            });
            let me = json!(m.name);
            if let Some(o) = r["owner"].as_u64() {
                if e["owner"].is_null() {
                    e["owner"] = name_of(o);
                }
            }
            match r["role"].as_str() {
                Some("owner") | None => {
                    // The owner's original direction names the row.
                    e["tuple"] = t.clone();
                    e["owner"] = me;
                    e["owner_answered"] = json!(true);
                    for k in ["state", "packets", "bytes", "idle_ms", "expires_in_ms", "worker"] {
                        if let Some(v) = r.get(k) {
                            e[k] = v.clone();
                        }
                    }
                }
                Some("director") => e["director"] = me,
                Some(role @ ("backup" | "forwarder")) => {
                    let list = if role == "backup" { "backups" } else { "forwarders" };
                    if let Some(a) = e[list].as_array_mut() {
                        if !a.contains(&me) {
                            a.push(me);
                        }
                    }
                    if e.get("state").is_none() {
                        if let Some(s) = r.get("state") {
                            e["state"] = s.clone();
                        }
                    }
                }
                Some(_) => {}
            }
        }
    }
    (by_tuple.into_values().collect(), reported)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(sport: u16) -> Value {
        json!({ "src": "198.18.10.2", "dst": "198.18.20.2", "proto": 6, "src_port": sport, "dst_port": 8080 })
    }

    fn row(sport: u16, role: &str, owner: u8) -> Value {
        json!({ "tuple": tuple(sport), "state": "ESTABLISHED", "idle_ms": 1, "expires_in_ms": 2,
                "packets": [3, 4], "bytes": [5, 6], "role": role, "owner": owner, "worker": 0 })
    }

    fn member(id: u8, answer: Answer) -> Member {
        Member { id: NodeId(id), name: format!("n{}", id + 1), this_node: id == 0, answer }
    }

    fn conns(rows: Vec<Value>) -> Answer {
        Answer::Data(json!({ "total": rows.len(), "shown": rows.len(), "connections": rows }))
    }

    #[test]
    fn topic_codes_round_trip_and_stay_in_the_wire_range() {
        for (t, c) in TOPICS {
            assert_eq!(topic_code(t), Some(c));
            assert_eq!(topic_of(c), Some(t));
            assert!((1..=dataplane::ccl::QUERY_TOPIC_MAX).contains(&c));
        }
        assert_eq!(topic_code(Topic::Metrics), None);
        assert!(topic_of(TRACE_START).is_none() && TRACE_START <= dataplane::ccl::QUERY_TOPIC_MAX);
        assert_eq!(topic_code(Topic::Config), None);
        assert_eq!(topic_of(0), None);
    }

    #[test]
    fn answers_round_trip_and_garbage_is_a_bad_answer() {
        assert_eq!(Answer::decode(&encode_answer(Ok(json!({"a": 1})))), Answer::Data(json!({"a": 1})));
        assert_eq!(Answer::decode(&encode_answer(Err("no NAT".into()))), Answer::Error("no NAT".into()));
        assert_eq!(Answer::decode(b"\xff{not json"), Answer::Bad);
        assert_eq!(Answer::decode(b""), Answer::Bad);
    }

    #[test]
    fn each_connection_once_with_every_role_and_silent_members_named() {
        // Connection 1000: owner n2 (id 1), director n1, backup n3,
        // forwarder n1. Connection 2000: owned by n3, which is silent; n1
        // directs it and says so.
        let ms = vec![
            member(0, conns(vec![row(1000, "director", 1), row(1000, "forwarder", 1), row(2000, "director", 2)])),
            member(1, conns(vec![row(1000, "owner", 1)])),
            member(2, Answer::Missing),
            member(3, Answer::Error("disabled".into())),
            // n5's forwarder record saw the server's half first.
            member(4, conns(vec![json!({ "tuple": { "src": "198.18.20.2", "dst": "198.18.10.2", "proto": 6, "src_port": 8080, "dst_port": 1000 },
                                          "state": "ESTABLISHED", "role": "forwarder", "owner": 1 })])),
        ];
        let v = merge(Topic::Conn, &ms);
        assert_eq!(v["not_answering"], json!(["n3"]));
        assert_eq!(v["members"][3]["status"], "error");
        assert_eq!(v["members"][3]["error"], "disabled");
        assert_eq!((v["connections"].as_u64(), v["reported_rows"].as_u64()), (Some(2), Some(5)));
        let rows = v["rows"].as_array().unwrap();
        let r = rows.iter().find(|r| r["tuple"]["src_port"] == 1000).unwrap();
        assert_eq!((&r["owner"], &r["owner_answered"], &r["director"]), (&json!("n2"), &json!(true), &json!("n1")));
        assert_eq!((&r["backups"], &r["forwarders"]), (&json!([]), &json!(["n1", "n5"])));
        assert_eq!(r["tuple"], tuple(1000), "the owner's direction");
        assert_eq!((&r["packets"], &r["state"]), (&json!([3, 4]), &json!("ESTABLISHED")));
        let r = rows.iter().find(|r| r["tuple"]["src_port"] == 2000).unwrap();
        assert_eq!((&r["owner"], &r["owner_answered"], &r["director"]), (&json!("n3"), &json!(false), &json!("n1")));
        assert!(r.get("packets").is_none(), "no counters without the owner");
    }

    #[test]
    fn trace_timelines_merge_in_time_order_and_arguments_are_checked() {
        let ev = |t: u64, what: &str| json!({ "unix_ns": t, "verdict": what });
        let d = |evs: Vec<Value>| Answer::Data(json!({ "filter": "10.0.0.1", "lost": 0, "events": evs }));
        let v = merge(Topic::Trace, &[member(0, d(vec![ev(1, "a"), ev(5, "c")])), member(1, d(vec![ev(3, "b")])), member(2, Answer::Missing)]);
        let order: Vec<(&str, &str)> =
            v["events"].as_array().unwrap().iter().map(|e| (e["node"].as_str().unwrap(), e["verdict"].as_str().unwrap())).collect();
        assert_eq!(order, [("n1", "a"), ("n2", "b"), ("n1", "c")]);
        assert_eq!(v["nodes"]["n2"], json!({ "filter": "10.0.0.1", "lost": 0 }));
        assert_eq!(v["not_answering"], json!(["n3"]));
        let (secs, f) = parse_trace_arg(trace_arg(10, "198.18.10.2 port 80").as_bytes()).unwrap();
        assert_eq!((secs, f.to_string()), (10, "198.18.10.2 port 80".to_string()));
        for bad in ["", "10", "0 1.2.3.4", "301 1.2.3.4", "x 1.2.3.4", "10 nothing"] {
            assert!(parse_trace_arg(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert!(parse_trace_arg(b"\xff 1.2.3.4").is_err());
        let s = merge_trace_start(&[member(0, Answer::Data(json!({"until": 1}))), member(1, Answer::Error("bad".into()))]);
        assert_eq!((s["topic"].as_str(), s["members"][0]["trace"]["until"].as_u64(), s["members"][1]["error"].as_str()), (Some("trace-start"), Some(1), Some("bad")));
    }

    #[test]
    fn xlates_merge_into_one_row_per_translation() {
        let x = |proto: &str, real: &str, mapped: &str, sessions: &str, refcnt: u64, idle: u64, stale: bool| {
            json!({ "proto": proto, "real": real, "mapped": mapped, "sessions": sessions, "refcnt": refcnt,
                    "idle_ms": idle, "age_ms": idle * 2, "stale": stale, "worker": 0 })
        };
        let d = |xs: Vec<Value>, created: u64| Answer::Data(json!({ "nat": true, "xlates": xs, "counters": { "xlates_created": created } }));
        // A PAT xlate on its owner n1; a dynamic-NAT one on every member
        // (control node n2, replicas elsewhere), stale on one only.
        let dnat = |refcnt, idle, stale| x("tcp", "10.0.0.9:0", "192.0.2.9:0", "cluster", refcnt, idle, stale);
        let v = merge(
            Topic::Xlate,
            &[
                member(0, d(vec![x("tcp", "10.0.0.1:40000", "192.0.2.7:1024", "per-session", 1, 5, false), dnat(2, 50, true)], 1)),
                member(1, d(vec![dnat(0, 900, false)], 4)),
                member(2, Answer::Missing),
            ],
        );
        assert_eq!((v["translations"].as_u64(), v["reported_rows"].as_u64()), (Some(2), Some(3)));
        let rows = v["xlates"].as_array().unwrap();
        let pat = rows.iter().find(|r| r["sessions"] == "per-session").unwrap();
        assert_eq!((&pat["nodes"], &pat["refcnt"], &pat["mapped"]), (&json!(["n1"]), &json!(1), &json!("192.0.2.7:1024")));
        let shared = rows.iter().find(|r| r["sessions"] == "cluster").unwrap();
        assert_eq!(
            (&shared["nodes"], &shared["refcnt"], &shared["idle_ms"], &shared["age_ms"], &shared["stale"]),
            (&json!(["n1", "n2"]), &json!(2), &json!(50), &json!(1800), &json!(false))
        );
        assert_eq!(v["counters"], json!({ "xlates_created": 5 }));
        assert_eq!(v["nodes"]["n2"], json!({ "nat": true, "counters": { "xlates_created": 4 } }));
        assert_eq!(v["not_answering"], json!(["n3"]));
    }

    #[test]
    fn nat_pools_merge_into_one_row_per_pool_with_each_members_share() {
        // Rows as a node gives them: one per worker and pool.
        let row = |pool: u64, name: &str, kind: &str, blocks: u64, free: u64, ports: u64, worker: u64| {
            json!({ "pool": pool, "name": name, "kind": kind, "addresses": 2, "blocks": blocks, "free_blocks": free,
                    "ports_in_use": ports, "free_addresses": 0, "worker": worker })
        };
        let d = |rows: Vec<Value>| Answer::Data(json!({ "pools": rows }));
        let v = merge(
            Topic::NatPool,
            &[
                member(0, d(vec![row(0, "pat", "dynamic-pat", 21, 20, 3, 0), row(0, "pat", "dynamic-pat", 21, 21, 0, 1), row(1, "dyn", "dynamic-nat", 0, 0, 0, 0)])),
                member(1, d(vec![row(0, "pat", "dynamic-pat", 42, 40, 7, 0), row(1, "dyn", "dynamic-nat", 0, 0, 0, 0)])),
                member(2, Answer::Error("no NAT configured".into())),
            ],
        );
        let pools = v["pools"].as_array().unwrap();
        assert_eq!(pools.len(), 2);
        let pat = &pools[0];
        assert_eq!(
            (&pat["name"], &pat["blocks"], &pat["free_blocks"], &pat["ports_in_use"]),
            (&json!("pat"), &json!(84), &json!(81), &json!(10))
        );
        assert_eq!(pat["nodes"]["n1"], json!({ "blocks": 42, "free_blocks": 41, "ports_in_use": 3, "free_addresses": 0 }));
        assert_eq!(pat["nodes"]["n2"]["blocks"], json!(42));
        assert!(pat["nodes"].get("n3").is_none(), "an error is no share");
        assert_eq!((&pools[1]["kind"], &pools[1]["blocks"]), (&json!("dynamic-nat"), &json!(0)));
        assert_eq!(v["members"][2]["status"], json!("error"));
    }

    #[test]
    fn stats_add_up_and_cluster_agreement_is_checked() {
        let s = |n: u64| json!({ "node": "x", "uptime_s": 5, "rx": n, "ports": [{"port": 3, "rx_packets": n}], "workers": [{"rx": n}] });
        let ms = vec![member(0, Answer::Data(s(1))), member(1, Answer::Data(s(10))), member(2, Answer::Bad)];
        let v = merge(Topic::Stats, &ms);
        assert_eq!(v["total"], json!({ "rx": 11, "ports": [{"rx_packets": 11}] }));
        assert_eq!(v["nodes"]["n2"]["rx"], 10);
        assert_eq!(v["members"][2]["status"], "bad answer");
        assert_eq!(v["not_answering"], json!([]));
        let c = |epoch: u64| Answer::Data(json!({ "epoch": epoch, "control_node": 0, "config_version": 1 }));
        let agree = merge(Topic::Cluster, &[member(0, c(3)), member(1, c(3))]);
        assert_eq!(agree["agree"], json!({ "epoch": true, "control_node": true, "config_version": true }));
        let split = merge(Topic::Cluster, &[member(0, c(3)), member(1, c(4))]);
        assert_eq!(split["agree"]["epoch"], false);
        assert_eq!(merge(Topic::Cluster, &[member(0, Answer::Missing)])["agree"]["epoch"], false);
    }
}
