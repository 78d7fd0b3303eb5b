//! `neighbors`: static ARP entries.
//!
//! Each entry binds an IPv4 address in a connected subnet to a MAC, so the
//! node forwards to it without resolving it by ARP — for ports where nobody
//! answers ARP (the `net_pcap` / `net_null` benchmark vdevs) and for next
//! hops that must not depend on ARP. Invariants after validation: every
//! address lies in exactly one interface subnet and is not an interface
//! address, addresses are unique, and every MAC is a unicast, non-zero
//! Ethernet address.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use serde::{Deserialize, Serialize, Serializer};

use crate::error::{ErrorKind, FieldPath};
use crate::model::InterfaceConfig;
use crate::validate::Checker;

/// A 48-bit Ethernet address, written `aa:bb:cc:dd:ee:ff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl Serialize for MacAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl FromStr for MacAddr {
    type Err = &'static str;
    /// Six two-digit hex groups separated by `:` (or all by `-`).
    fn from_str(s: &str) -> Result<MacAddr, &'static str> {
        let sep = if s.contains('-') { '-' } else { ':' };
        let parts: Vec<&str> = s.split(sep).collect();
        if parts.len() != 6 {
            return Err("expected six hex bytes like 02:00:00:00:00:01");
        }
        let mut m = [0u8; 6];
        for (i, p) in parts.iter().enumerate() {
            if p.len() != 2 {
                return Err("each byte needs two hex digits");
            }
            m[i] = u8::from_str_radix(p, 16).map_err(|_| "not a hex digit")?;
        }
        if m == [0; 6] {
            return Err("the all-zero address is not a host");
        }
        if m[0] & 1 != 0 {
            return Err("a multicast/broadcast address is not a host");
        }
        Ok(MacAddr(m))
    }
}

/// One static ARP entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NeighborConfig {
    /// `address`: an IPv4 address in a connected subnet.
    pub address: Ipv4Addr,
    /// `mac`: its Ethernet address.
    pub mac: MacAddr,
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_parse_and_display() {
        let m: MacAddr = "02:70:63:61:70:0A".parse().unwrap();
        assert_eq!(m.0, [2, 0x70, 0x63, 0x61, 0x70, 0x0a]);
        assert_eq!(m.to_string(), "02:70:63:61:70:0a");
        assert_eq!("02-00-00-00-00-01".parse::<MacAddr>().unwrap().0[5], 1);
        for bad in ["", "02:00:00:00:00", "02:00:00:00:00:0g", "2:0:0:0:0:1", "00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff", "01:00:5e:00:00:01", "02:00:00:00:00:00:01"] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
    }
}
