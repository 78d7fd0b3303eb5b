//! The `neighbors:` section from its raw form: [`RawNeighbor`] mirrors the
//! YAML, [`Checker::neighbors`] checks each entry against the rules listed
//! in [`crate::neighbors`] and builds the [`NeighborConfig`]s.

use std::net::Ipv4Addr;
use std::str::FromStr;

use serde::Deserialize;

use super::Checker;
use crate::error::{ErrorKind, FieldPath};
use crate::model::neighbors::{MacAddr, NeighborConfig};
use crate::model::InterfaceConfig;

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a neighbor mapping (address, mac)"
)]
pub(crate) struct RawNeighbor {
    address: String,
    mac: String,
}

impl Checker<'_> {
    pub(crate) fn neighbors(
        &self,
        p: &FieldPath,
        raw: Vec<RawNeighbor>,
        ifaces: &[InterfaceConfig],
    ) -> Result<Vec<NeighborConfig>, crate::ConfigError> {
        let mut out: Vec<NeighborConfig> = Vec::with_capacity(raw.len());
        for (i, r) in raw.into_iter().enumerate() {
            let ap = p.index(i).key("address");
            let address = Ipv4Addr::from_str(&r.address)
                .map_err(|_| self.err(&ap, ErrorKind::InvalidAddress { found: r.address.clone() }))?;
            if let Some(j) = out.iter().position(|o| o.address == address) {
                return Err(self.err(
                    &ap,
                    ErrorKind::Duplicate {
                        what: "neighbor address",
                        name: address.to_string(),
                        first_line: self.line_of(&p.index(j).key("address")),
                    },
                ));
            }
            if let Some(o) = ifaces.iter().find(|o| o.address == address) {
                return Err(self.err(
                    &ap,
                    ErrorKind::NextHopIsLocal { via: address, interface: o.name.clone() },
                ));
            }
            if !ifaces.iter().any(|o| o.subnet().contains(address)) {
                let connected =
                    ifaces.iter().map(|o| o.subnet().to_string()).collect::<Vec<_>>().join(", ");
                return Err(self.err(&ap, ErrorKind::NotConnected { via: address, connected }));
            }
            let mp = p.index(i).key("mac");
            let mac = MacAddr::from_str(r.mac.trim())
                .map_err(|reason| self.err(&mp, ErrorKind::InvalidMac { found: r.mac.clone(), reason }))?;
            out.push(NeighborConfig { address, mac });
        }
        Ok(out)
    }
}
