//! The policy a node runs — every interface's security level, the access
//! rules, the idle timeouts — where it came from, and the two ways a new
//! one arrives (SPEC M6; docs/config.md, "Replicated configuration"):
//!
//! - `clusterfw-ctl config reload`: the file is read and checked again.
//!   Its local sections must not have changed (they are read at start
//!   only). A single node runs the new policy at once; in a cluster only
//!   the control node takes a reload, and publishes the policy as the next
//!   replicated configuration version;
//! - the cluster's replicated configuration (the membership machine's
//!   `Action::Replica`): the policy document is parsed and checked against
//!   this node's interfaces. A node joining, or following a change, runs
//!   it whatever its own file says.
//!
//! Either way the control lcore builds the pipeline's `Policy` (it
//! allocates) and hands it to the worker as a command; the worker swaps it
//! in between bursts and reports the generation it applied. A joiner's
//! readiness gate waits for that report (`Membership::config_applied`), so
//! it never takes the cluster's traffic under its own file's policy.
//!
//! Invariant: the worker only ever gets a policy that parsed and built
//! against this node's interfaces. A replicated policy that does not is
//! rejected (`Membership::reject_config`): the node leaves the cluster
//! rather than forward under another policy than its peers.

use anyhow::{bail, Result};
use config::policy::Policy as FilePolicy;
use config::Config;
use controlplane::membership::ConfigBlob;
use dataplane::pipeline::{InterfaceSpec, NatPlan, NatSpec, PatSpec, Policy, PoolSpec, RuleSpec};
use dataplane::route::IfIndex;
use dataplane::Duration;
use std::path::Path;
use std::sync::Arc;

/// The policy running now, as `show config` reports it.
#[derive(Clone, Debug)]
pub struct Running {
    /// The replicated configuration version (0: this node's own file,
    /// never replicated: a single node, or before joining).
    pub version: u64,
    /// Where it came from: `file node.yaml`, `replicated v3`.
    pub source: String,
    pub policy: FilePolicy,
    /// The policy document (what the control node replicates).
    pub yaml: String,
}

/// What the worker should do about a replicated configuration.
pub enum Follow {
    /// Already running it (or none held).
    Unchanged,
    /// Swap these in, one per worker (command generation `generation`).
    Apply { generation: u64, policies: Vec<Box<Policy>> },
    /// This node cannot run version `version`: the reason.
    Reject { version: u64, why: String },
}

/// What a reload did.
pub enum Reload {
    /// A single node: swap these in, one per worker.
    Apply { generation: u64, policies: Vec<Box<Policy>> },
    /// A cluster's control node: publish these bytes (the replicated
    /// configuration); the membership machine's `Action::Replica` brings
    /// them back through [`Policies::follow`].
    Publish(Vec<u8>),
    /// Nothing in the policy changed.
    Unchanged,
}

pub struct Policies {
    /// The file as last read (at start or by a reload).
    file: Config,
    /// The pipeline's interfaces (data interfaces, then `ccl`), as built
    /// at start: the new policy's security levels replace theirs.
    specs: Vec<InterfaceSpec>,
    /// Workers of the node: each gets its own copy of a policy.
    workers: usize,
    pub running: Running,
    /// Policy commands sent to the worker (their generation).
    pub sent: u64,
    /// Replicated configurations applied, rejected; reloads done.
    pub applied: u64,
    pub rejected: u64,
    pub reloads: u64,
    /// Why the last replicated configuration was rejected.
    pub last_error: Option<String>,
    /// The NAT plan the workers run (`None` without NAT): a new policy's
    /// NAT rules must keep its pools (N6) to be swapped in (N9).
    pub nat_plan: Option<Arc<NatPlan>>,
}

impl Policies {
    pub fn new(file: &Config, specs: Vec<InterfaceSpec>, workers: usize) -> Policies {
        let policy = file.policy();
        Policies {
            running: Running {
                version: 0,
                source: format!("file {}", file.source_file.display()),
                yaml: policy.to_yaml(),
                policy,
            },
            file: file.clone(),
            specs,
            workers: workers.max(1),
            sent: 0,
            applied: 0,
            rejected: 0,
            reloads: 0,
            last_error: None,
            nat_plan: None,
        }
    }

    /// The configuration file as last read (at start or by a reload).
    pub fn file(&self) -> &Config {
        &self.file
    }

    /// The policy document this node publishes when it forms a cluster.
    pub fn publish_bytes(&self) -> Vec<u8> {
        self.file.policy().to_yaml().into_bytes()
    }

    /// Whether the running policy is the file's.
    pub fn same_as_file(&self) -> bool {
        self.running.policy == self.file.policy()
    }

    /// The pipeline's form of `p` for this node's interfaces, one per
    /// worker.
    fn build(&self, p: &FilePolicy) -> Result<Vec<Box<Policy>>, String> {
        let specs: Vec<InterfaceSpec> = self
            .specs
            .iter()
            .map(|s| InterfaceSpec { security_level: p.security_level(&s.name).unwrap_or(s.security_level), ..s.clone() })
            .collect();
        let (rules, t) = (rule_specs(&p.access_rules), timeouts(&p.timeouts));
        let nat = self.nat_rules(p)?;
        let limits = limit_spec(p);
        let capacity = self.file.flow_table.capacity as usize;
        (0..self.workers)
            .map(|_| {
                let built = Policy::build(&specs, &rules, t).map_err(|e| e.to_string())?.with_limits(&limits, capacity);
                Ok(Box::new(match &nat {
                    Some(plan) => built.with_nat(plan.clone()),
                    None => built,
                }))
            })
            .collect()
    }

    /// The NAT plan of `p`'s rules when they differ from the running ones
    /// (`None`: unchanged). They are compiled aside here, off the workers
    /// (N9), and must keep the running pools — addresses, kind, block
    /// size, reserved ports, blocks per host — since blocks and the
    /// translations on them cannot move while the node runs (N6); adding
    /// NAT to a node that started without it, or removing every rule,
    /// needs a restart too.
    fn nat_rules(&self, p: &FilePolicy) -> Result<Option<Arc<NatPlan>>, String> {
        if p.nat == self.running.policy.nat {
            return Ok(None);
        }
        let f = &self.file;
        let spec = nat_spec_of(&p.nat, &f.interfaces, &p.timeouts, f.flow_table.capacity);
        let (Some(running), Some(spec)) = (&self.nat_plan, spec) else {
            return Err("nat: rules added to a node that started without NAT, or every rule removed: restart the node \
                        to apply it"
                .into());
        };
        let plan = running.rebuilt(&spec, self.specs.len()).map_err(|e| format!("nat: {e}"))?;
        if !running.same_pools(&plan) {
            return Err("nat: the pools changed (addresses, kind or block settings): blocks and the translations on \
                        them cannot move while the node runs (SPEC N6); restart the node to apply it"
                .into());
        }
        Ok(Some(plan))
    }

    fn run(&mut self, version: u64, source: String, policy: FilePolicy, yaml: String) -> Result<(u64, Vec<Box<Policy>>), String> {
        let built = self.build(&policy)?;
        if let Some(plan) = built.first().and_then(|b| b.nat_plan()) {
            self.nat_plan = Some(plan);
        }
        self.running = Running { version, source, policy, yaml };
        self.sent += 1;
        Ok((self.sent, built))
    }

    /// The cluster's replicated configuration `blob` (the membership
    /// machine's copy) as this node should run it.
    pub fn follow(&mut self, blob: Option<&ConfigBlob>) -> Follow {
        let Some(blob) = blob else { return Follow::Unchanged };
        if blob.version == self.running.version && blob.bytes == self.running.yaml.as_bytes() {
            return Follow::Unchanged;
        }
        let origin = format!("replicated configuration v{}", blob.version);
        let parsed = std::str::from_utf8(&blob.bytes)
            .map_err(|e| format!("{origin}: not UTF-8: {e}"))
            .and_then(|text| {
                config::parse_policy(text, &origin, &self.file.interfaces)
                    .map(|p| (p, text.to_string()))
                    .map_err(|e| e.to_string())
            });
        let result = parsed.and_then(|(p, text)| self.run(blob.version, format!("replicated v{}", blob.version), p, text));
        match result {
            Ok((generation, policies)) => {
                self.applied += 1;
                self.last_error = None;
                Follow::Apply { generation, policies }
            }
            Err(why) => {
                self.rejected += 1;
                self.last_error = Some(why.clone());
                Follow::Reject { version: blob.version, why }
            }
        }
    }

    /// Read `path` again for a reload: the new file must change nothing
    /// but the policy. `publish`: in a cluster (the caller has checked
    /// that this is the control node), the policy is published rather
    /// than applied here.
    pub fn reload(&mut self, path: &Path, cluster: bool) -> Result<Reload> {
        let new = config::load(path)?;
        let local = self.file.local_changes(&new);
        if !local.is_empty() {
            bail!(
                "{}: {} changed; the node reads these at start only: restart it to apply them (nothing was applied)",
                path.display(),
                local.join(", ")
            );
        }
        let policy = new.policy();
        self.file = new;
        if policy == self.running.policy {
            return Ok(Reload::Unchanged);
        }
        self.reloads += 1;
        if cluster {
            return Ok(Reload::Publish(policy.to_yaml().into_bytes()));
        }
        let yaml = policy.to_yaml();
        let source = format!("file {} (reload {})", path.display(), self.reloads);
        let (generation, policies) = self.run(0, source, policy, yaml).map_err(anyhow::Error::msg)?;
        Ok(Reload::Apply { generation, policies })
    }
}

/// The pipeline's NAT configuration of `cfg` (`None` without rules): rule
/// interfaces by their position in `interfaces` (the pipeline's
/// interface indices), pools by their position in `nat.pools`, xlates
/// kept idle at least as long as any flow.
pub fn nat_spec(cfg: &Config) -> Option<NatSpec> {
    nat_spec_of(&cfg.nat, &cfg.interfaces, &cfg.timeouts, cfg.flow_table.capacity)
}

/// `nat_spec` of a `nat` section with the node's interfaces, the policy's
/// timeouts and the flow table's capacity.
fn nat_spec_of(
    nat: &config::nat::NatConfig,
    interfaces: &[config::InterfaceConfig],
    t: &config::Timeouts,
    capacity: u32,
) -> Option<NatSpec> {
    use config::nat::NatKind;
    use dataplane::nat::{PerSession, RuleKind, RuleSpec, UdpPerSession};
    if nat.rules.is_empty() {
        return None;
    }
    let iface = |n: &Option<String>| {
        n.as_ref().and_then(|n| interfaces.iter().position(|i| &i.name == n)).map(|i| IfIndex(i as u16))
    };
    let rules = nat
        .rules
        .iter()
        .map(|r| RuleSpec {
            kind: match r.kind {
                NatKind::StaticNat => RuleKind::StaticNat,
                NatKind::StaticPat => RuleKind::StaticPat,
                NatKind::DynamicNat => RuleKind::DynamicNat,
                NatKind::DynamicPat => RuleKind::DynamicPat,
            },
            real_iface: iface(&r.real_interface),
            mapped_iface: iface(&r.mapped_interface),
            source: (r.source.addr, r.source.len),
            mapped: r.mapped.map(|m| (m.addr, m.len)),
            ports: r.protocol.zip(r.real_port).zip(r.mapped_port).map(|((p, rp), mp)| (p, rp, mp)),
            pool: r.pool.as_ref().and_then(|p| nat.pools.iter().position(|q| &q.name == p)).map(|i| i as u16),
            per_session: PerSession {
                tcp: r.per_session_tcp,
                udp: match r.per_session_udp {
                    config::nat::UdpSessions::Dns => UdpPerSession::Dns,
                    config::nat::UdpSessions::All => UdpPerSession::All,
                    config::nat::UdpSessions::None => UdpPerSession::None,
                },
            },
        })
        .collect();
    let pools = nat
        .pools
        .iter()
        .map(|p| {
            // The first rule naming the pool gives its kind and blocks
            // (the configuration makes the others agree).
            let first = nat.rules.iter().find(|r| r.pool.as_deref() == Some(p.name.as_str()));
            PoolSpec {
                addresses: p.addresses.clone(),
                pat: first.filter(|r| r.kind == NatKind::DynamicPat).map(|r| PatSpec {
                    block_size: r.block_size,
                    reserved_ports: r.include_reserved_ports,
                    max_per_host: r.max_blocks_per_host,
                }),
            }
        })
        .collect();
    let longest = [t.tcp_syn, t.tcp_established, t.tcp_closing, t.tcp_closed, t.udp, t.icmp, t.other].into_iter().max();
    Some(NatSpec {
        rules,
        pools,
        xlate_capacity: capacity as usize,
        xlate_timeout: Duration::from_secs(longest.unwrap_or(0).saturating_add(30)),
        host_capacity: 65_536,
    })
}

/// The configuration's access rules as the pipeline's.
/// The connection limits of a policy (global and its rules'), as the
/// pipeline takes them.
pub fn limit_spec(p: &FilePolicy) -> dataplane::conntrack::LimitSpec {
    let set = |l: &config::Limits| dataplane::conntrack::LimitSet {
        max_conns: l.max_conns,
        max_embryonic: l.max_embryonic,
        per_client_max: l.per_client_max,
        per_client_embryonic_max: l.per_client_embryonic_max,
        syn_proxy: l.syn_proxy,
    };
    dataplane::conntrack::LimitSpec {
        global: set(&p.limits),
        rules: p.access_rules.iter().filter(|r| !r.limits.is_empty()).map(|r| (r.name.clone(), set(&r.limits))).collect(),
    }
}

pub fn rule_specs(rules: &[config::AccessRule]) -> Vec<RuleSpec> {
    rules
        .iter()
        .map(|r| RuleSpec {
            name: r.name.clone(),
            permit: matches!(r.action, config::Action::Permit),
            interface: r.interface.clone(),
            protocol: match r.protocol {
                config::Protocol::Any => None,
                config::Protocol::Number(n) => Some(n),
            },
            src: r.source.map(|n| (n.addr(), n.prefix_len())),
            dst: r.destination.map(|n| (n.addr(), n.prefix_len())),
            src_ports: (r.source_port.lo, r.source_port.hi),
            dst_ports: (r.destination_port.lo, r.destination_port.hi),
        })
        .collect()
}

/// The configuration's timeouts (seconds) as the pipeline's.
pub fn timeouts(t: &config::Timeouts) -> dataplane::conntrack::Timeouts {
    dataplane::conntrack::Timeouts {
        tcp_syn: Duration::from_secs(t.tcp_syn),
        tcp_established: Duration::from_secs(t.tcp_established),
        tcp_closing: Duration::from_secs(t.tcp_closing),
        tcp_closed: Duration::from_secs(t.tcp_closed),
        udp: Duration::from_secs(t.udp),
        icmp: Duration::from_secs(t.icmp),
        other: Duration::from_secs(t.other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::PortId;

    const FILE: &str = include_str!("../../config/examples/cluster-node.yaml");

    fn policies() -> Policies {
        let cfg = config::parse(FILE, "n1.yaml").unwrap();
        let specs = cfg
            .interfaces
            .iter()
            .chain(std::iter::once(&cfg.interfaces[0]))
            .enumerate()
            .map(|(i, c)| InterfaceSpec {
                name: if i == cfg.interfaces.len() { "ccl".into() } else { c.name.clone() },
                port: PortId(i as u16),
                mac: [2, 0, 0, 0, 0, i as u8 + 1],
                addr: std::net::Ipv4Addr::new(10, i as u8, 0, 1),
                prefix_len: 24,
                security_level: c.security_level,
                vlan: None,
                mtu: 1500,
                reverse_path: dataplane::pipeline::ReversePath::Strict,
            })
            .collect();
        Policies::new(&cfg, specs, 1)
    }

    #[test]
    fn a_replicated_policy_is_followed_once_and_a_foreign_one_rejected() {
        let mut p = policies();
        assert_eq!(p.running.version, 0);
        assert!(p.same_as_file());
        assert!(matches!(p.follow(None), Follow::Unchanged));
        // The cluster's: a rule more, outside's level raised.
        let mut theirs = p.running.policy.clone();
        theirs.access_rules.truncate(1);
        theirs.security_levels[1].1 = 40;
        let blob = ConfigBlob { version: 3, bytes: theirs.to_yaml().into_bytes() };
        match p.follow(Some(&blob)) {
            Follow::Apply { generation, .. } => assert_eq!(generation, 1),
            _ => panic!("must apply"),
        }
        assert_eq!((p.running.version, p.running.source.as_str()), (3, "replicated v3"));
        assert_eq!(p.running.policy, theirs);
        assert!(!p.same_as_file());
        assert!(matches!(p.follow(Some(&blob)), Follow::Unchanged), "already running");
        // A policy for a node with a `dmz` interface this node lacks.
        let mut foreign = theirs.clone();
        foreign.security_levels.push(("dmz".into(), 50));
        let blob = ConfigBlob { version: 4, bytes: foreign.to_yaml().into_bytes() };
        match p.follow(Some(&blob)) {
            Follow::Reject { version, why } => {
                assert_eq!(version, 4);
                assert!(why.starts_with("replicated configuration v4:") && why.contains("unknown interface \"dmz\""), "{why}");
            }
            _ => panic!("must reject"),
        }
        assert_eq!(p.running.version, 3, "still running v3");
        assert_eq!((p.applied, p.rejected, p.sent), (1, 1, 1));
        let garbage = ConfigBlob { version: 5, bytes: vec![0xff, 0xfe] };
        assert!(matches!(p.follow(Some(&garbage)), Follow::Reject { version: 5, .. }));
    }

    #[test]
    fn reload_applies_the_policy_and_refuses_local_changes() {
        let dir = std::env::temp_dir().join(format!("cfw-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("n1.yaml");
        let mut p = policies();
        // Unchanged.
        std::fs::write(&path, FILE).unwrap();
        assert!(matches!(p.reload(&path, false).unwrap(), Reload::Unchanged));
        // A policy change: applied on a single node, published by a control node.
        std::fs::write(&path, FILE.replacen("destination-port: 23", "destination-port: 2323", 1)).unwrap();
        match p.reload(&path, true).unwrap() {
            Reload::Publish(b) => assert!(String::from_utf8(b).unwrap().contains("destination-port: \"2323\"")),
            _ => panic!("a control node publishes"),
        }
        std::fs::write(&path, FILE.replacen("destination-port: 23", "destination-port: 2424", 1)).unwrap();
        assert!(matches!(p.reload(&path, false).unwrap(), Reload::Apply { generation: 1, .. }));
        assert!(p.running.source.ends_with("(reload 2)"), "{}", p.running.source);
        // A local change: refused, nothing applied.
        std::fs::write(&path, FILE.replacen("hold-time: 3000", "hold-time: 6000", 1)).unwrap();
        let e = p.reload(&path, false).err().unwrap().to_string();
        assert!(e.contains("cluster changed") && e.contains("restart"), "{e}");
        assert_eq!(p.sent, 1);
        // A broken file: its error, line and field.
        std::fs::write(&path, FILE.replacen("destination-port: 23", "destination-port: 99999", 1)).unwrap();
        let e = p.reload(&path, false).err().unwrap().to_string();
        assert!(e.contains("access-rules[1].destination-port"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    const NAT_FILE: &str = "node:\n  name: n\ninterfaces:\n  - name: inside\n    device: net_null0\n    \
        address: 198.18.1.1/24\n    security-level: 100\n  - name: outside\n    device: net_null1\n    \
        address: 198.51.100.1/24\n    security-level: 0\nnat:\n  pools:\n    - name: pat\n      \
        addresses: [198.51.100.7]\n  rules:\n    - name: r\n      kind: dynamic-pat\n      \
        source: 198.18.1.0/24\n      pool: pat\n";

    /// New NAT rules over the running pools are compiled aside and go to
    /// the workers with the policy (N9); a change of the pools (addresses
    /// or block settings) is refused while the node runs (N6), as are NAT
    /// added to a node without it and every rule removed.
    #[test]
    fn nat_rules_reload_over_the_same_pools_only() {
        let dir = std::env::temp_dir().join(format!("cfw-policy-nat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nat.yaml");
        let cfg = config::parse(NAT_FILE, "nat.yaml").unwrap();
        let specs: Vec<InterfaceSpec> = cfg
            .interfaces
            .iter()
            .enumerate()
            .map(|(i, c)| InterfaceSpec {
                name: c.name.clone(),
                port: PortId(i as u16),
                mac: [2, 0, 0, 0, 0, i as u8 + 1],
                addr: c.address,
                prefix_len: c.prefix_len,
                security_level: c.security_level,
                vlan: None,
                mtu: 1500,
                reverse_path: dataplane::pipeline::ReversePath::Strict,
            })
            .collect();
        let mut p = Policies::new(&cfg, specs.clone(), 2);
        let plan = NatPlan::new(&nat_spec(&cfg).unwrap(), specs.len(), 2).unwrap();
        p.nat_plan = Some(plan.clone());
        // Another source prefix, same pool: applied, each worker's policy
        // with the new plan over the same pools.
        std::fs::write(&path, NAT_FILE.replace("source: 198.18.1.0/24", "source: 198.18.0.0/16")).unwrap();
        let Reload::Apply { policies, .. } = p.reload(&path, false).unwrap() else { panic!("applied") };
        assert_eq!(policies.len(), 2);
        let new = policies[0].nat_plan().expect("the new rules");
        assert!(plan.same_pools(&new) && !Arc::ptr_eq(&plan, &new));
        assert!(Arc::ptr_eq(p.nat_plan.as_ref().unwrap(), &new), "the running plan");
        // The pools change: refused, nothing applied.
        for (what, text) in [
            ("an address", NAT_FILE.replace("[198.51.100.7]", "[198.51.100.8]")),
            ("the block size", NAT_FILE.replace("pool: pat\n", "pool: pat\n      block-size: 1024\n")),
        ] {
            std::fs::write(&path, &text).unwrap();
            let e = p.reload(&path, false).err().unwrap_or_else(|| panic!("{what}: refused")).to_string();
            assert!(e.contains("SPEC N6") && e.contains("restart"), "{what}: {e}");
        }
        std::fs::write(&path, NAT_FILE.split("nat:").next().unwrap()).unwrap();
        let e = p.reload(&path, false).err().unwrap().to_string();
        assert!(e.contains("every rule removed") && e.contains("restart"), "{e}");
        assert_eq!(p.sent, 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
