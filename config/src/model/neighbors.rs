//! The types of the `neighbors:` section, public as [`crate::neighbors`]
//! (whose module essay lists their invariants); the checks that build them
//! are in `validate/neighbors.rs`.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use serde::{Serialize, Serializer};

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
