//! clusterfw configuration: the YAML schema of one node, its validation, and
//! errors that point at the offending line.
//!
//! The file format is fixed by `config/examples/node.yaml` and documented
//! field by field in `docs/config.md`; the testbed writes such files and the
//! node binary reads them with [`load`]. Keys are kebab-case and unknown keys
//! are rejected, so a typo is an error rather than a silently ignored
//! setting.
//!
//! Invariants this crate guarantees:
//!
//! * [`parse`] never panics, whatever the input (a property test feeds it
//!   every truncation and random byte flips of the example; `fuzz/` has a
//!   cargo-fuzz target for the same).
//! * A returned [`Config`] satisfies every rule listed in the [`model`]
//!   module essay: ranges, unique names, resolvable references. Consumers do
//!   not re-check.
//! * Every [`ConfigError`] from [`parse`] names the file, a 1-based line and
//!   column, and the field path (`interfaces[1].address`), and says what was
//!   expected and what was found. Errors of YAML shape come from `serde_yaml`
//!   with the path tracked by `serde_path_to_error`; errors found afterwards
//!   get their position from a second pass (module `locate`) over the YAML
//!   event stream.
//! * Defaults are applied here, once: the struct has no `Option` for a
//!   setting that has a default.
//!
//! Layers, each using only those before it (no import cycles; checked by
//! `layout-check`, see `docs/layout.md`): [`net`] (value types) → `error`,
//! `locate` (positions in the YAML) → [`model`] (the validated types; the
//! `cluster` and `neighbors` sections in `model/`) → `validate` (raw serde
//! types and every check, one file per section in `validate/`) → this file
//! ([`load`], [`parse`], and the public paths [`cluster`] and
//! [`neighbors`]).
//!
//! Errors are off the packet path, so they are rich `thiserror` types (house
//! style point 5), not counters.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod locate;
pub mod model;
pub mod net;
mod validate;

pub mod cluster {
    //! The `cluster:` section: bootstrap settings of a cluster member (SPEC M6:
    //! name, key, node ID, priority, site, chassis, CCL port and address) and,
    //! in this issue, the static member list.
    //!
    //! Invariants of a [`ClusterConfig`] returned by [`crate::parse`]: `name`
    //! is non-empty `[A-Za-z0-9_.-]+`; the key has at least [`MIN_KEY_LEN`]
    //! characters; `node_id` is 0-15; `priority` is 1-100; the CCL address is a
    //! unicast host address whose subnet overlaps no data interface, and the CCL
    //! device is none of theirs; `members` is non-empty, ids are unique and
    //! 0-15, names are unique, addresses are unique host addresses inside the
    //! CCL subnet; exactly one member has `id == node_id`, and it carries this
    //! node's CCL address and `node.name`. No data interface is called
    //! [`CCL_INTERFACE`].
    //!
    //! The key is a [`Secret`]: `Debug` and `Serialize` print `<redacted>`, and
    //! [`crate::Config::source_text`] has it blanked, so `show config` never
    //! prints it back.

    pub use crate::model::cluster::*;
}

pub mod policy {
    //! The replicated configuration (SPEC M6): the part of a node's file
    //! that a cluster runs as its control node has it.
    //!
    //! Replicated ([`Policy`]): every interface's `security-level` (by
    //! interface name), `access-rules`, `timeouts`, `nat`. Everything else stays
    //! local to the node: the bootstrap settings (`node`, `cluster`: name,
    //! key, id, priority, site, chassis, CCL, member list and timers), the
    //! hardware and addressing (`dpdk`, the interfaces' devices, addresses
    //! and VLANs, `routes` and `neighbors`, whose next hops differ per node
    //! in individual-interface mode), and the node's own resources
    //! (`flow-table`, `arp`, `logging`, `control-socket`).
    //!
    //! The replicated form is a YAML document of its own
    //! ([`Policy::to_yaml`], read back by [`crate::parse_policy`]): a person
    //! can read it in `show config`, the same checks apply as to a node
    //! file, and its errors name the document, line and field.
    //!
    //! Invariants: `to_yaml` is deterministic (equal policies give equal
    //! bytes, so the digest identifies a policy) and
    //! `parse_policy(p.to_yaml())` gives back `p` for every policy a
    //! validated configuration yields; a parsed policy names exactly the
    //! interfaces of the node it was checked against.

    pub use crate::model::policy::*;
}

pub mod nat {
    //! `nat`: address pools and translation rules (SPEC N1–N9), part of the
    //! replicated policy. Invariants after validation: pool and rule names
    //! are unique; a pool's addresses are distinct, ascending, at most
    //! 65 536, and in no other pool; each rule has exactly the keys of its
    //! kind (a pool for dynamic kinds, a mapped prefix of the source's
    //! length for static NAT, one mapped address, protocol and ports for
    //! static PAT); the rules sharing a pool agree on interfaces ("any" or
    //! specific, N1), kind, block size and reserved ports; nothing N8
    //! excludes is present.

    pub use crate::model::nat::*;
}

pub mod neighbors {
    //! `neighbors`: static ARP entries.
    //!
    //! Each entry binds an IPv4 address in a connected subnet to a MAC, so the
    //! node forwards to it without resolving it by ARP — for ports where nobody
    //! answers ARP (the `net_pcap` / `net_null` benchmark vdevs) and for next
    //! hops that must not depend on ARP. Invariants after validation: every
    //! address lies in exactly one interface subnet and is not an interface
    //! address, addresses are unique, and every MAC is a unicast, non-zero
    //! Ethernet address.

    pub use crate::model::neighbors::*;
}

use std::path::Path;

pub use cluster::{CclConfig, ClusterConfig, MemberConfig, Secret, SplitBrain};
pub use error::{ConfigError, ErrorKind};
pub use model::{
    AccessRule, Action, ArpConfig, Config, DpdkConfig, FlowTableConfig, IcmpErrorsConfig, InterfaceConfig,
    Limits, LogLevel, LoggingConfig, NodeConfig, ReversePath, Route6Config, RouteConfig, Timeouts,
};
pub use net::{IpNet, Ipv4Net, Ipv6Host, Ipv6Net, PortError, PortRange, Prefix6Error, PrefixError, Protocol, ProtocolError};

/// Reads and parses the configuration file at `path`.
///
/// The file name in errors (and [`Config::source_file`]) is `path` as given.
/// A file that cannot be read, or is not UTF-8, is an error naming the file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let file = path.display().to_string();
    let src = std::fs::read_to_string(path).map_err(|e| ConfigError::read(&file, e))?;
    parse(&src, &file)
}

/// Parses and validates configuration text; `file_name` is used in errors
/// and stored in [`Config::source_file`].
pub fn parse(src: &str, file_name: &str) -> Result<Config, ConfigError> {
    validate::parse(src, file_name)
}

/// Parses and validates a replicated policy document ([`policy`]) for a
/// node with `interfaces`: the same checks as a node file's sections, and
/// a security level for exactly these interfaces. `origin` names the
/// document in errors (e.g. `replicated configuration v3 from n1`).
pub fn parse_policy(src: &str, origin: &str, interfaces: &[InterfaceConfig]) -> Result<policy::Policy, ConfigError> {
    validate::parse_policy(src, origin, interfaces)
}
