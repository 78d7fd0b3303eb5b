//! `clusterfw-ctl`: ask a running node what it is doing.
//!
//! ```text
//! clusterfw-ctl [--socket PATH] show {stats|conn|conn count|limits|route|arp|rules|config|cluster|cluster history|xlate|nat pool|metrics} [--json]
//! clusterfw-ctl [--socket PATH] config reload [--json]
//! clusterfw-ctl [--socket PATH] cluster show {conn|stats|cluster|xlate|nat pool|arp|route|rules|cluster history} [--json]
//! ```
//! `cluster show` asks the node, which asks every other configured node
//! over the CCL and merges the answers (`controlplane::clusterview`):
//! `conn` lists each connection once with its owner, director, backups
//! and forwarders; members that did not answer within 2 s are named.
//!
//! ```text
//! clusterfw-ctl [--socket PATH] trace HOST [PEER] [port N] [proto P] [--secs N] [--json]
//! clusterfw-ctl [--socket PATH] trace start HOST [PEER] [port N] [proto P] [--secs N]
//! clusterfw-ctl [--socket PATH] trace show [--json]
//! ```
//! `trace` records, on every member, what the pipeline did with each frame
//! the filter matches (where it came from, the node's role, out of which
//! port or to which member, or dropped why) for `--secs` seconds
//! (default 10), then prints the merged timeline; `trace start` only
//! starts it, `trace show` prints what was recorded so far.
//! `config reload` reads the node's configuration file again and runs its
//! policy (security levels, access rules, timeouts); in a cluster only the
//! control node takes it, and replicates it to every member.
//! The socket defaults to `$CLUSTERFW_SOCKET`, else `/run/clusterfw/clusterfw.sock`.
//! `--json` prints the node's answer as it is (stable for scripts); without
//! it the answer is laid out as tables.
#![deny(unsafe_code)]

use anyhow::{bail, Context, Result};
use controlplane::mgmt::{self, Request, Topic};
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;

/// `println!` that ends the program quietly when stdout is closed
/// (`clusterfw-ctl show cluster | head`): `println!` panics on the broken
/// pipe (Rust ignores SIGPIPE).
macro_rules! say {
    ($($t:tt)*) => { write_out(format_args!($($t)*), true) };
}

fn write_out(args: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let r = out.write_fmt(args).and_then(|()| if newline { out.write_all(b"\n") } else { Ok(()) });
    match r {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("clusterfw-ctl: stdout: {e}");
            std::process::exit(1);
        }
    }
}

const USAGE: &str = "usage: clusterfw-ctl [--socket PATH] show {stats|conn|conn count|limits|route|arp|rules|config|cluster|cluster history|xlate|nat pool|metrics} [--json]\n       clusterfw-ctl [--socket PATH] config reload [--json]\n       clusterfw-ctl [--socket PATH] cluster show {conn|stats|cluster|xlate|nat pool|arp|route|rules|cluster history|trace} [--json]\n       clusterfw-ctl [--socket PATH] trace [start|show] HOST [PEER] [port N] [proto P] [--secs N] [--json]";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("clusterfw-ctl: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<()> {
    let mut socket = std::env::var_os("CLUSTERFW_SOCKET")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/clusterfw/clusterfw.sock"));
    let mut json = false;
    let mut secs: u64 = 10;
    let mut words = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--socket" | "-s" => socket = args.next().context("--socket needs a path")?.into(),
            "--json" | "-j" => json = true,
            "--secs" => secs = args.next().and_then(|v| v.parse().ok()).context("--secs needs a number of seconds")?,
            "--help" | "-h" => {
                say!("{USAGE}");
                return Ok(());
            }
            _ => words.push(a),
        }
    }
    if let [verb, what] = words.as_slice() {
        if verb == "config" && what == "reload" {
            let data = mgmt::request(&socket, &Request::ConfigReload)?;
            if json {
                say!("{}", serde_json::to_string_pretty(&data)?);
            } else {
                say!("{}", data["message"].as_str().unwrap_or("done"));
            }
            return Ok(());
        }
    }
    if let Some((_, rest)) = words.split_first().filter(|(w, _)| *w == "trace") {
        return trace(&socket, rest, secs, json);
    }
    // `cluster show TOPIC`: the same topic words after `cluster`.
    let (cluster, words) = match words.split_first() {
        Some((first, rest)) if first == "cluster" && rest.first().is_some_and(|w| w == "show") => (true, rest),
        _ => (false, &words[..]),
    };
    let topic = match words {
        [verb, what] if verb == "show" => Topic::parse(what).with_context(|| format!("unknown topic {what:?}\n{USAGE}"))?,
        [verb, what, sub] if verb == "show" && what == "cluster" && sub == "history" => Topic::ClusterHistory,
        [verb, what, sub] if verb == "show" && what == "nat" && sub == "pool" => Topic::NatPool,
        [verb, what, sub] if verb == "show" && what == "conn" && sub == "count" => Topic::ConnCount,
        _ => bail!("{USAGE}"),
    };
    if cluster {
        let data = mgmt::request(&socket, &Request::ClusterShow { topic })?;
        if json {
            say!("{}", serde_json::to_string_pretty(&data)?);
        } else {
            print_cluster_wide(topic, &data);
        }
        return Ok(());
    }
    let data = mgmt::request(&socket, &Request::Show { topic })?;
    if json {
        say!("{}", serde_json::to_string_pretty(&data)?);
    } else {
        print_human(topic, &data);
    }
    Ok(())
}

/// A `show stats` section: its non-zero numbers and non-empty lists.
fn print_nonzero(title: &str, section: &serde_json::Map<String, Value>) {
    say!("\n{title} (non-zero):");
    let mut any = false;
    for (k, v) in section {
        match v {
            Value::Number(n) if n.as_u64() != Some(0) => {
                say!("  {k:<28} {v}");
                any = true;
            }
            Value::Array(a) if !a.is_empty() => {
                say!("  {k:<28} {}", fmt_cell(v));
                any = true;
            }
            // A family (drops by reason): its non-zero members.
            Value::Object(m) => {
                for (sub, n) in m.iter().filter(|(_, n)| n.as_u64().is_some_and(|n| n != 0)) {
                    say!("  {:<28} {n}", format!("{k}.{sub}"));
                    any = true;
                }
            }
            _ => {}
        }
    }
    if !any {
        say!("  (none)");
    }
}

fn print_human(topic: Topic, data: &Value) {
    match topic {
        Topic::Stats => {
            if let Some(ports) = data.get("ports") {
                say!("Ports:");
                print_table(ports);
            }
            if let Some(Value::Object(drops)) = data.get("drops") {
                say!("\nDrops by reason (non-zero):");
                let mut any = false;
                for (k, v) in drops {
                    if v.as_u64().unwrap_or(0) > 0 {
                        say!("  {k:<28} {v}");
                        any = true;
                    }
                }
                if !any {
                    say!("  (none)");
                }
            }
            for (key, title) in [("fragments", "Fragments"), ("arp_hold", "Held for ARP resolution")] {
                if let Some(Value::Object(section)) = data.get(key) {
                    print_nonzero(title, section);
                }
            }
            if let Value::Object(m) = data {
                say!("");
                for (k, v) in m {
                    if !matches!(v, Value::Object(_) | Value::Array(_)) {
                        say!("{k:<30} {v}");
                    }
                }
            }
        }
        Topic::Cluster => print_cluster(data),
        Topic::Limits => print_limits(data),
        Topic::ConnCount => {
            say!("connections here: {} (workers: {})", data["local"], fmt_cell(&data["workers"]));
            match data["cluster_estimate"].as_u64() {
                Some(n) => say!("cluster-wide estimate: {n} (members' last reports: {})", data["members"]),
                None => say!("cluster-wide estimate: - (counted only under global limits)"),
            }
        }
        // The Prometheus text as the node serves it on `/metrics`.
        Topic::Trace => print_trace(data),
        Topic::Metrics => write_out(format_args!("{}", data.as_str().unwrap_or("")), false),
        Topic::ClusterHistory => {
            let events = data.get("events").and_then(Value::as_array).cloned().unwrap_or_default();
            if events.is_empty() {
                say!("(no membership events)");
            }
            for e in events {
                let at = e.get("at_ms").and_then(Value::as_u64).unwrap_or(0);
                let ago = e.get("ago_ms").and_then(Value::as_u64).unwrap_or(0);
                say!("{:>10.3} s ({:>8.1} s ago)  {}", at as f64 / 1000.0, ago as f64 / 1000.0, e.get("event").and_then(Value::as_str).unwrap_or("?"));
            }
        }
        Topic::Config => match data.get("yaml").and_then(Value::as_str) {
            Some(text) => {
                write_out(format_args!("{text}"), false);
                let p = &data["policy"];
                let source = p["source"].as_str().unwrap_or("?");
                if p["same_as_file"].as_bool() == Some(false) {
                    say!("\n# The policy running is not this file's: {source}");
                    write_out(format_args!("{}", p["yaml"].as_str().unwrap_or("")), false);
                } else {
                    say!("\n# The policy running is this file's ({source}).");
                }
                if let Some(e) = p["last_error"].as_str() {
                    say!("# Last replicated configuration rejected: {e}");
                }
            }
            None => say!("{}", serde_json::to_string_pretty(data).unwrap_or_default()),
        },
        _ => {
            // Every other topic is `{ "<name>": [rows...], ...scalars }`.
            if let Value::Object(m) = data {
                for (k, v) in m {
                    match v {
                        Value::Array(_) => {
                            say!("{k}:");
                            print_table(v);
                        }
                        _ => say!("{k}: {v}"),
                    }
                }
            } else {
                print_table(data);
            }
        }
    }
}

/// `trace …`: start a trace (on every member), wait, print the merged
/// timeline; or only start, or only show.
fn trace(socket: &std::path::Path, words: &[String], secs: u64, json: bool) -> Result<()> {
    let (start, show, filter) = match words.split_first() {
        Some((w, rest)) if w == "start" => (true, false, rest),
        Some((w, rest)) if w == "show" => (false, true, rest),
        _ => (true, true, words),
    };
    if start {
        if filter.is_empty() {
            bail!("trace needs a filter: HOST [PEER] [port N] [proto P]\n{USAGE}");
        }
        let data = mgmt::request(socket, &Request::TraceStart { filter: filter.join(" "), secs })?;
        if !show || !json {
            if json {
                say!("{}", serde_json::to_string_pretty(&data)?);
            } else {
                let who = data["members"].as_array().map_or_else(
                    || data["node"].as_str().unwrap_or("this node").to_string(),
                    |m| m.iter().map(|m| format!("{} {}", fmt_cell(&m["name"]), fmt_cell(&m["status"]))).collect::<Vec<_>>().join(", "),
                );
                say!("tracing {} for {secs} s: {who}", filter.join(" "));
            }
        }
        if !show {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(secs * 1000 + 300));
    }
    // The cluster's timeline, or this node's alone.
    let data = match mgmt::request(socket, &Request::ClusterShow { topic: Topic::Trace }) {
        Err(mgmt::MgmtError::Refused(e)) if e.starts_with("no cluster configured") => mgmt::request(socket, &Request::Show { topic: Topic::Trace })?,
        r => r?,
    };
    if json {
        say!("{}", serde_json::to_string_pretty(&data)?);
        return Ok(());
    }
    print_trace(&data);
    Ok(())
}

/// A trace's timeline, one frame decision per row.
fn print_trace(data: &Value) {
    if let Some(silent) = data["not_answering"].as_array().filter(|a| !a.is_empty()) {
        say!("NOT ANSWERING: {}", silent.iter().map(fmt_cell).collect::<Vec<_>>().join(", "));
    }
    let clock = |ns: u64| {
        let s = ns / 1_000_000_000 % 86_400;
        format!("{:02}:{:02}:{:02}.{:06}", s / 3600, s / 60 % 60, s % 60, ns / 1000 % 1_000_000)
    };
    let rows: Vec<Value> = data["events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            serde_json::json!({
                "time (UTC)": clock(e["unix_ns"].as_u64().unwrap_or(0)),
                "node": e.get("node").cloned().unwrap_or(Value::Null),
                "w": e["worker"], "connection": e["tuple"], "flags": e["flags"], "len": e["len"],
                "from": e["from"], "role": e["role"], "owner": e["owner"], "verdict": e["verdict"],
            })
        })
        .collect();
    say!("{} frame decisions:", rows.len());
    print_table(&Value::Array(rows));
}

/// `cluster show`: who answered, then the merged connections (one per
/// row, with every role's node), the totals, or each node's own answer.
fn print_cluster_wide(topic: Topic, data: &Value) {
    if let Some(m) = data.get("members") {
        say!("Members asked:");
        print_table(m);
    }
    if let Some(silent) = data["not_answering"].as_array().filter(|a| !a.is_empty()) {
        say!("NOT ANSWERING: {}", silent.iter().map(fmt_cell).collect::<Vec<_>>().join(", "));
    }
    match topic {
        Topic::Conn => {
            say!("\n{} connections ({} rows reported by the members):", fmt_cell(&data["connections"]), fmt_cell(&data["reported_rows"]));
            let rows: Vec<Value> = data["rows"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| {
                    let none_if_empty = |v: &Value| if v.as_array().is_some_and(|a| a.is_empty()) { Value::Null } else { v.clone() };
                    serde_json::json!({
                        "connection": r["tuple"], "state": r["state"], "owner": r["owner"],
                        "director": r["director"], "backups": none_if_empty(&r["backups"]), "forwarders": none_if_empty(&r["forwarders"]),
                        "packets": r["packets"], "bytes": r["bytes"],
                    })
                })
                .collect();
            print_table(&Value::Array(rows));
        }
        Topic::Trace => print_trace(data),
        Topic::Xlate => {
            say!("\n{} translations ({} rows reported by the members):", fmt_cell(&data["translations"]), fmt_cell(&data["reported_rows"]));
            print_table(&data["xlates"]);
            if let Value::Object(c) = &data["counters"] {
                print_nonzero("NAT counters, cluster total", c);
            }
        }
        Topic::NatPool => {
            say!("\nPools, the members' shares added up:");
            let rows: Vec<Value> = data["pools"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    let mut r = p.clone();
                    if let Value::Object(o) = &mut r {
                        o.remove("nodes");
                    }
                    r
                })
                .collect();
            print_table(&Value::Array(rows));
            for p in data["pools"].as_array().into_iter().flatten() {
                say!("\n== pool {} by member ==", fmt_cell(&p["name"]));
                let rows: Vec<Value> = p["nodes"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(n, v)| {
                        let mut r = serde_json::json!({ "node": n });
                        if let (Value::Object(o), Value::Object(x)) = (&mut r, v) {
                            o.extend(x.clone());
                        }
                        r
                    })
                    .collect();
                print_table(&Value::Array(rows));
            }
        }
        Topic::Cluster => {
            say!("\nAgreement among the members that answered: {}", data["agree"]);
            for (name, d) in data["nodes"].as_object().into_iter().flatten() {
                say!("\n== {name} ==");
                print_cluster(d);
            }
        }
        _ => {
            if let Some(total) = data.get("total") {
                say!("\n== cluster total ==");
                print_human(topic, total);
            }
            for (name, d) in data["nodes"].as_object().into_iter().flatten() {
                say!("\n== {name} ==");
                print_human(topic, d);
            }
        }
    }
}

/// `show cluster`: identity line, members table, counters, CCL messages by
/// kind, CCL drops (non-zero).
fn print_cluster(data: &Value) {
    let s = |k: &str| data.get(k).map(fmt_cell).unwrap_or_else(|| "?".into());
    say!(
        "cluster {}: this node {} (node-id {}), state {}, control node {}, epoch {}, ready {}, data ports open {}, lease left {} ms, CCL queues {}",
        s("cluster"),
        s("node"),
        s("node_id"),
        s("state"),
        s("control_node_name"),
        s("epoch"),
        s("ready"),
        s("data_ports_open"),
        s("lease_left_ms"),
        s("ccl_queues")
    );
    if let Some(m) = data.get("members") {
        say!("\nMembers:");
        print_table(m);
    }
    if let Some(Value::Object(c)) = data.get("counters") {
        say!("\nCluster counters:");
        for (k, v) in c {
            say!("  {k:<28} {}", fmt_cell(v));
        }
    }
    if let Some(k) = data.get("ccl") {
        say!("\nCCL messages by kind:");
        print_table(k);
    }
    if let Some(Value::Object(d)) = data.get("ccl_drops") {
        say!("\nCCL drops by reason (non-zero):");
        let mut any = false;
        for (k, v) in d {
            if v.as_u64().unwrap_or(0) > 0 {
                say!("  {k:<28} {v}");
                any = true;
            }
        }
        if !any {
            say!("  (none)");
        }
    }
    if let Some(Value::Object(h)) = data.get("driver") {
        say!("\nDriver (queues between worker and control lcore):");
        for (k, v) in h {
            say!("  {k:<28} {}", fmt_cell(v));
        }
    }
}

/// `show limits`: one row per class, then the busiest clients.
fn print_limits(data: &Value) {
    if data["limits"].as_bool() != Some(true) {
        say!("no connection limits configured");
        return;
    }
    let count = |v: &Value| format!("{}/{}", v["conns"], v["embryonic"]);
    let lim = |v: &Value| v.as_u64().map_or("-".to_string(), |n| n.to_string());
    let rows: Vec<Value> = data["classes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let l = &c["limits"];
            serde_json::json!({
                "class": c["name"],
                "max-conns": lim(&l["max_conns"]),
                "max-embryonic": lim(&l["max_embryonic"]),
                "per-client": format!("{}/{}", lim(&l["per_client_max"]), lim(&l["per_client_embryonic_max"])),
                "local conns/emb": count(&c["local"]),
                "estimate conns/emb": count(&c["estimate"]),
                "refused": c["refused"].as_object().map(|m| m.iter().filter(|(_, v)| v.as_u64() != Some(0)).map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")).unwrap_or_default(),
                "syn proxy cookies/opened": if l["syn_proxy"].as_bool() == Some(false) {
                    "off".to_string()
                } else {
                    format!("{}/{}", c["syn_proxy"]["cookies_sent"], c["syn_proxy"]["opened"])
                },
            })
        })
        .collect();
    say!("Connection limits (cluster-wide by estimate; members reporting: {}):", fmt_cell(&data["members_reporting"]));
    print_table(&Value::Array(rows));
    let clients: Vec<Value> = data["clients"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            serde_json::json!({
                "class": c["class"],
                "client": c["client"],
                "local conns/emb": count(&c["local"]),
                "estimate conns/emb": count(&c["estimate"]),
                "limit conns/emb": format!("{}/{}", lim(&c["per_client_max"]), lim(&c["per_client_embryonic_max"])),
            })
        })
        .collect();
    say!("\nClients with the largest counts:");
    print_table(&Value::Array(clients));
}

/// Print an array of flat objects as an aligned table (columns = keys of the
/// first row).
fn print_table(rows: &Value) {
    let Some(rows) = rows.as_array() else {
        say!("  {rows}");
        return;
    };
    if rows.is_empty() {
        say!("  (none)");
        return;
    }
    let cols: Vec<String> = match &rows[0] {
        Value::Object(m) => m.keys().cloned().collect(),
        _ => {
            for r in rows {
                say!("  {r}");
            }
            return;
        }
    };
    let cell = |v: Option<&Value>| v.map(fmt_cell).unwrap_or_default();
    let table: Vec<Vec<String>> = rows.iter().map(|r| cols.iter().map(|c| cell(r.get(c))).collect()).collect();
    let widths: Vec<usize> =
        cols.iter().enumerate().map(|(i, c)| table.iter().map(|r| r[i].len()).chain([c.len()]).max().unwrap_or(0)).collect();
    let line = |cells: &[String]| {
        let parts: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        say!("  {}", parts.join("  ").trim_end());
    };
    line(&cols);
    for r in &table {
        line(r);
    }
}

/// One table cell: strings bare, five-tuples as `proto src:port -> dst:port`,
/// pairs (original/reply counters) as `a/b`, null as `-`.
fn fmt_cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        Value::Array(items) => items.iter().map(fmt_cell).collect::<Vec<_>>().join("/"),
        Value::Object(m) if m.contains_key("src") && m.contains_key("dst") => {
            let proto = match m.get("proto").and_then(Value::as_u64) {
                Some(6) => "tcp".to_string(),
                Some(17) => "udp".to_string(),
                Some(1) => "icmp".to_string(),
                Some(58) => "icmpv6".to_string(),
                Some(n) => n.to_string(),
                None => "?".to_string(),
            };
            let part = |a: &str, p: &str| format!("{}:{}", fmt_cell(&m[a]), m.get(p).map(fmt_cell).unwrap_or_default());
            format!("{proto} {} -> {}", part("src", "src_port"), part("dst", "dst_port"))
        }
        v => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::fmt_cell;
    use serde_json::json;

    #[test]
    fn cells() {
        let t = json!({"src":"198.18.1.2","dst":"198.18.2.2","proto":6,"src_port":40000,"dst_port":80});
        assert_eq!(fmt_cell(&t), "tcp 198.18.1.2:40000 -> 198.18.2.2:80");
        assert_eq!(fmt_cell(&json!([2, 1])), "2/1");
        assert_eq!(fmt_cell(&json!(null)), "-");
        assert_eq!(fmt_cell(&json!("x")), "x");
    }
}
