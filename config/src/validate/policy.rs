//! A replicated policy document (the YAML [`Policy::to_yaml`] writes) from
//! its raw form, checked against the interfaces of the node that is to run
//! it: [`RawPolicy`] mirrors the document, [`Checker::policy`] applies the
//! same checks as to a node file's `access-rules` and `timeouts`, and
//! requires a security level for exactly this node's interfaces (members of
//! a cluster have the same interface names).

use std::cell::OnceCell;

use serde::Deserialize;

use super::{null_default, serde_error, Checker, RawLimits, RawRule, RawTimeouts};
use crate::error::{ErrorKind, FieldPath};
use crate::model::policy::Policy;
use crate::model::{InterfaceConfig, MAX_SECURITY_LEVEL};
use crate::ConfigError;

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a policy mapping (interfaces, access-rules, timeouts, limits, nat)"
)]
struct RawPolicy {
    #[serde(default, deserialize_with = "null_default")]
    interfaces: Vec<RawLevel>,
    #[serde(default, deserialize_with = "null_default")]
    access_rules: Vec<RawRule>,
    #[serde(default, deserialize_with = "null_default")]
    timeouts: RawTimeouts,
    #[serde(default, deserialize_with = "null_default")]
    limits: RawLimits,
    #[serde(default, deserialize_with = "null_default")]
    nat: super::nat::RawNat,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "an interface mapping (name, security-level)"
)]
struct RawLevel {
    name: String,
    security_level: u64,
}

impl Checker<'_> {
    fn policy(&self, raw: RawPolicy, ifaces: &[InterfaceConfig]) -> Result<Policy, ConfigError> {
        let root = FieldPath::root();
        let ip = root.key("interfaces");
        let known = || ifaces.iter().map(|o| o.name.as_str()).collect::<Vec<_>>().join(", ");
        let mut security_levels: Vec<(String, u8)> = Vec::with_capacity(raw.interfaces.len());
        for (i, r) in raw.interfaces.into_iter().enumerate() {
            let np = ip.index(i).key("name");
            if !ifaces.iter().any(|o| o.name == r.name) {
                return Err(self.err(&np, ErrorKind::UnknownInterface { found: r.name, known: known() }));
            }
            if let Some(j) = security_levels.iter().position(|(n, _)| *n == r.name) {
                return Err(self.err(
                    &np,
                    ErrorKind::Duplicate {
                        what: "interface name",
                        name: r.name,
                        first_line: self.line_of(&ip.index(j).key("name")),
                    },
                ));
            }
            let level = self.range(
                &ip.index(i).key("security-level"),
                Some(r.security_level),
                0,
                0,
                MAX_SECURITY_LEVEL.into(),
            )? as u8;
            security_levels.push((r.name, level));
        }
        if let Some(missing) = ifaces.iter().find(|o| !security_levels.iter().any(|(n, _)| *n == o.name)) {
            return Err(self.err(&ip, ErrorKind::MissingInterface { name: missing.name.clone() }));
        }
        let access_rules = self.rules(&root.key("access-rules"), raw.access_rules, ifaces)?;
        let timeouts = self.timeouts(&root.key("timeouts"), raw.timeouts)?;
        let limits = self.limits(&root.key("limits"), raw.limits)?;
        // A replicated policy runs in a cluster: N8's exclusions apply.
        let nat = self.nat(&root.key("nat"), raw.nat, ifaces, true)?;
        Ok(Policy { security_levels, access_rules, timeouts, limits, nat })
    }
}

/// See [`crate::parse_policy`].
pub(crate) fn parse_policy(src: &str, origin: &str, ifaces: &[InterfaceConfig]) -> Result<Policy, ConfigError> {
    let de = serde_yaml::Deserializer::from_str(src);
    let raw: RawPolicy = serde_path_to_error::deserialize(de).map_err(|e| serde_error(src, origin, e))?;
    Checker { src, file: origin, locator: OnceCell::new() }.policy(raw, ifaces)
}
