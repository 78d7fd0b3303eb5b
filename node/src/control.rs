//! The control thread: serves the control socket and asks the worker for
//! snapshots through the lock-free query queue.
//!
//! Invariant: the control thread never touches the worker's state directly;
//! it sends a [`Query`] and waits (bounded) for the [`Reply`]. Port counters
//! are read from DPDK (`rte_eth_stats_get`), which is safe beside a polling
//! worker.

use crate::shared::{Query, Reply, Shared};
use anyhow::{Context, Result};
use config::Config;
use controlplane::mgmt::{Request, Server, Topic};
use dpdk_sys::Port;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the control thread waits for the worker to answer a query.
const WORKER_ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// Most connections `show conn` returns.
const SHOW_CONN_MAX: usize = 10_000;

pub struct Control {
    server: Server,
    shared: Arc<Shared>,
    /// (interface names, device name, port) per data port.
    ports: Vec<(String, String, Port)>,
    node_name: String,
    config_yaml: String,
    config_json: Value,
    started: Instant,
}

impl Control {
    pub fn new(cfg: &Config, shared: Arc<Shared>, ports: Vec<(String, String, Port)>) -> Result<Control> {
        let server = Server::bind(&cfg.control_socket)
            .with_context(|| format!("binding the control socket {}", cfg.control_socket.display()))?;
        Ok(Control {
            server,
            shared,
            ports,
            node_name: cfg.node.name.clone(),
            config_yaml: cfg.source_text.clone(),
            config_json: serde_json::to_value(cfg).unwrap_or(Value::Null),
            started: Instant::now(),
        })
    }

    pub fn poll(&mut self) {
        let server = &self.server;
        let this = &*self;
        server.poll(|req| match req {
            Request::Show { topic } => this.show(*topic),
        });
    }

    fn ask(&self, q: Query) -> Result<Reply, String> {
        while self.shared.replies.pop().is_some() {} // stale answers of timed-out queries
        self.shared.queries.push(q).map_err(|_| "worker query queue full".to_string())?;
        let deadline = Instant::now() + WORKER_ANSWER_TIMEOUT;
        loop {
            if let Some(r) = self.shared.replies.pop() {
                return Ok(r);
            }
            if Instant::now() > deadline {
                return Err("the worker did not answer in time".into());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn show(&self, topic: Topic) -> Result<Value, String> {
        let enc = |v: serde_json::Result<Value>| v.map_err(|e| e.to_string());
        match topic {
            Topic::Stats => {
                let Reply::Counters(c) = self.ask(Query::Counters)? else { return Err("unexpected reply".into()) };
                let mut counters = enc(serde_json::to_value(&*c))?;
                let ports: Vec<Value> = self
                    .ports
                    .iter()
                    .enumerate()
                    .map(|(i, (name, dev, p))| (name, dev, p, c.ports.get(i).copied().unwrap_or_default()))
                    .map(|(name, dev, p, fw)| match p.stats() {
                        Ok(s) => json!({
                            "name": name, "device": dev, "port": p.id(),
                            "rx_packets": s.ipackets, "tx_packets": s.opackets,
                            "rx_bytes": s.ibytes, "tx_bytes": s.obytes,
                            "rx_missed": s.imissed, "rx_errors": s.ierrors, "tx_errors": s.oerrors,
                            "rx_nombuf": s.rx_nombuf,
                            "pipeline_rx_packets": fw.rx_packets, "pipeline_tx_packets": fw.tx_packets,
                        }),
                        Err(e) => json!({ "name": name, "device": dev, "port": p.id(), "error": e.to_string() }),
                    })
                    .collect();
                if let Value::Object(m) = &mut counters {
                    // Drops by reason as an object: {"acl-denied": 3, ...}.
                    let drops: serde_json::Map<String, Value> =
                        c.drops.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
                    m.insert("drops".into(), Value::Object(drops));
                    m.insert("node".into(), json!(self.node_name));
                    m.insert("uptime_s".into(), json!(self.started.elapsed().as_secs()));
                    m.insert("tx_full_drops".into(), json!(self.shared.tx_full_drops.load(Ordering::Relaxed)));
                    m.insert("ports".into(), Value::Array(ports));
                }
                Ok(counters)
            }
            Topic::Conn => {
                let Reply::Conns(conns, total) = self.ask(Query::Conns { max: SHOW_CONN_MAX })? else {
                    return Err("unexpected reply".into());
                };
                Ok(json!({ "total": total, "shown": conns.len(), "connections": enc(serde_json::to_value(conns))? }))
            }
            Topic::Route => {
                let Reply::Routes(r) = self.ask(Query::Routes)? else { return Err("unexpected reply".into()) };
                Ok(json!({ "routes": enc(serde_json::to_value(r))? }))
            }
            Topic::Arp => {
                let Reply::Arp(a) = self.ask(Query::Arp)? else { return Err("unexpected reply".into()) };
                Ok(json!({ "arp": enc(serde_json::to_value(a))? }))
            }
            Topic::Rules => {
                let Reply::Rules(r) = self.ask(Query::Rules)? else { return Err("unexpected reply".into()) };
                Ok(json!({ "rules": enc(serde_json::to_value(r))? }))
            }
            Topic::Config => Ok(json!({ "yaml": self.config_yaml, "parsed": self.config_json })),
            Topic::Cluster => Err("no cluster configured: this node runs alone (no `cluster:` section)".into()),
        }
    }
}
