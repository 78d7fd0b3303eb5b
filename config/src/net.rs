//! Small value types for addresses, ports and protocols used by the schema.
//!
//! Invariants: an [`Ipv4Net`] always has `len <= 32`; one built by
//! [`Ipv4Net::new`] or parsed with `FromStr` also has every host bit of
//! `addr` clear, so two equal prefixes compare equal. A [`PortRange`] always
//! has `lo <= hi`. Parsers accept only the canonical text forms (decimal
//! digits, no sign, no leading zeros in addresses) so that what is printed
//! parses back to the same value.
//!
//! The IPv6 types follow the same rules: an [`Ipv6Net`] has `len <= 128`
//! and, built by [`Ipv6Net::new`] or parsed, no host bit set; an
//! [`Ipv6Host`] has `len <= 128`. IPv6 addresses are read by std's
//! `Ipv6Addr::from_str` (any of the RFC 4291 §2.2 forms, either case; no
//! zone index) and printed in the RFC 5952 form std's `Display` gives, which
//! parses back to the same value.
//!
//! An [`IpNet`] is either family's prefix, as an access rule's `source` and
//! `destination` take them: the text decides the family (a `:` makes it
//! IPv6), and the family decides which packets it can match.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a string is not a valid `a.b.c.d/len` prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PrefixError {
    /// No `/` separating address and length.
    #[error("expected \"a.b.c.d/len\"")]
    MissingLength,
    /// The part before `/` is not a dotted-quad IPv4 address.
    #[error("invalid IPv4 address \"{0}\"")]
    BadAddress(String),
    /// The part after `/` is not a decimal number.
    #[error("prefix length \"{0}\" is not a number")]
    BadLength(String),
    /// The length is larger than 32.
    #[error("prefix length must be 0-32")]
    LengthTooLong,
    /// Bits beyond the prefix length are set (only where a network is
    /// expected, not for interface addresses).
    #[error("host bits are set (did you mean {0}?)")]
    HostBitsSet(Ipv4Net),
}

/// An IPv4 prefix (network address and length), e.g. `198.18.1.0/24`.
///
/// Serialized as its text form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Net {
    /// The network address; host bits are zero.
    pub addr: Ipv4Addr,
    /// The prefix length, 0-32.
    pub len: u8,
}

impl Ipv4Net {
    /// `0.0.0.0/0`, matching every address.
    pub const ANY: Ipv4Net = Ipv4Net {
        addr: Ipv4Addr::UNSPECIFIED,
        len: 0,
    };

    /// A prefix from a network address and length; `Err` if `len > 32` or a
    /// host bit is set.
    pub fn new(addr: Ipv4Addr, len: u8) -> Result<Ipv4Net, PrefixError> {
        if len > 32 {
            return Err(PrefixError::LengthTooLong);
        }
        let net = Ipv4Net::containing(addr, len);
        if net.addr != addr {
            return Err(PrefixError::HostBitsSet(net));
        }
        Ok(net)
    }

    /// The prefix of length `len` (clamped to 32) that contains `addr`:
    /// host bits are cleared.
    pub fn containing(addr: Ipv4Addr, len: u8) -> Ipv4Net {
        let len = len.min(32);
        Ipv4Net {
            addr: Ipv4Addr::from(u32::from(addr) & mask(len)),
            len,
        }
    }

    /// The netmask as an integer (`/24` gives `0xffff_ff00`).
    pub fn mask(&self) -> u32 {
        mask(self.len)
    }

    /// The netmask in dotted form.
    pub fn netmask(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.mask())
    }

    /// The directed broadcast address (last address) of the prefix.
    pub fn broadcast(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr) | !self.mask())
    }

    /// Whether `ip` lies in this prefix.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        (u32::from(ip) & self.mask()) == (u32::from(self.addr) & self.mask())
    }

    /// Whether the two prefixes share at least one address.
    pub fn overlaps(&self, other: &Ipv4Net) -> bool {
        let m = mask(self.len.min(other.len));
        (u32::from(self.addr) & m) == (u32::from(other.addr) & m)
    }

    /// Parses `a.b.c.d/len` without requiring host bits to be zero, as
    /// written for interface addresses; returns the address and length.
    pub fn parse_host(s: &str) -> Result<(Ipv4Addr, u8), PrefixError> {
        let (a, l) = s.split_once('/').ok_or(PrefixError::MissingLength)?;
        let addr = Ipv4Addr::from_str(a).map_err(|_| PrefixError::BadAddress(a.to_string()))?;
        if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
            return Err(PrefixError::BadLength(l.to_string()));
        }
        let len: u32 = l
            .parse()
            .map_err(|_| PrefixError::BadLength(l.to_string()))?;
        if len > 32 {
            return Err(PrefixError::LengthTooLong);
        }
        Ok((addr, len as u8))
    }
}

fn mask(len: u8) -> u32 {
    match len {
        0 => 0,
        l if l >= 32 => u32::MAX,
        l => u32::MAX << (32 - u32::from(l)),
    }
}

impl FromStr for Ipv4Net {
    type Err = PrefixError;

    /// Parses `a.b.c.d/len`; host bits must be zero.
    fn from_str(s: &str) -> Result<Ipv4Net, PrefixError> {
        let (addr, len) = Ipv4Net::parse_host(s)?;
        Ipv4Net::new(addr, len)
    }
}

impl fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl Serialize for Ipv4Net {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ipv4Net {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Ipv4Net, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map_err(|e| serde::de::Error::custom(format!("invalid IPv4 prefix \"{s}\": {e}")))
    }
}

/// Why a string is not a valid `address/len` IPv6 prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Prefix6Error {
    /// No `/` separating address and length.
    #[error("expected \"address/len\", like 2001:db8::/32")]
    MissingLength,
    /// The part before `/` is not an IPv6 address.
    #[error("invalid IPv6 address \"{0}\"")]
    BadAddress(String),
    /// The part after `/` is not a decimal number.
    #[error("prefix length \"{0}\" is not a number")]
    BadLength(String),
    /// The length is larger than 128.
    #[error("prefix length must be 0-128")]
    LengthTooLong,
    /// Bits beyond the prefix length are set (only where a network is
    /// expected, not for interface addresses).
    #[error("host bits are set (did you mean {0}?)")]
    HostBitsSet(Ipv6Net),
}

/// An IPv6 prefix (network address and length), e.g. `2001:db8:9::/48`.
///
/// Serialized as its text form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv6Net {
    /// The network address; host bits are zero.
    pub addr: Ipv6Addr,
    /// The prefix length, 0-128.
    pub len: u8,
}

impl Ipv6Net {
    /// `::/0`, matching every address.
    pub const ANY: Ipv6Net = Ipv6Net {
        addr: Ipv6Addr::UNSPECIFIED,
        len: 0,
    };

    /// A prefix from a network address and length; `Err` if `len > 128` or
    /// a host bit is set.
    pub fn new(addr: Ipv6Addr, len: u8) -> Result<Ipv6Net, Prefix6Error> {
        if len > 128 {
            return Err(Prefix6Error::LengthTooLong);
        }
        let net = Ipv6Net::containing(addr, len);
        if net.addr != addr {
            return Err(Prefix6Error::HostBitsSet(net));
        }
        Ok(net)
    }

    /// The prefix of length `len` (clamped to 128) that contains `addr`:
    /// host bits are cleared.
    pub fn containing(addr: Ipv6Addr, len: u8) -> Ipv6Net {
        let len = len.min(128);
        Ipv6Net {
            addr: Ipv6Addr::from(u128::from(addr) & mask6(len)),
            len,
        }
    }

    /// The netmask as an integer (`/64` gives the upper 64 bits set).
    pub fn mask(&self) -> u128 {
        mask6(self.len)
    }

    /// Whether `ip` lies in this prefix.
    pub fn contains(&self, ip: Ipv6Addr) -> bool {
        (u128::from(ip) & self.mask()) == (u128::from(self.addr) & self.mask())
    }

    /// Whether the two prefixes share at least one address.
    pub fn overlaps(&self, other: &Ipv6Net) -> bool {
        let m = mask6(self.len.min(other.len));
        (u128::from(self.addr) & m) == (u128::from(other.addr) & m)
    }

    /// Parses `address/len` without requiring host bits to be zero, as
    /// written for interface addresses; returns the address and length.
    pub fn parse_host(s: &str) -> Result<(Ipv6Addr, u8), Prefix6Error> {
        let (a, l) = s.split_once('/').ok_or(Prefix6Error::MissingLength)?;
        let addr = Ipv6Addr::from_str(a).map_err(|_| Prefix6Error::BadAddress(a.to_string()))?;
        if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Prefix6Error::BadLength(l.to_string()));
        }
        let len: u32 = l
            .parse()
            .map_err(|_| Prefix6Error::BadLength(l.to_string()))?;
        if len > 128 {
            return Err(Prefix6Error::LengthTooLong);
        }
        Ok((addr, len as u8))
    }
}

fn mask6(len: u8) -> u128 {
    match len {
        0 => 0,
        l if l >= 128 => u128::MAX,
        l => u128::MAX << (128 - u32::from(l)),
    }
}

impl FromStr for Ipv6Net {
    type Err = Prefix6Error;

    /// Parses `address/len`; host bits must be zero.
    fn from_str(s: &str) -> Result<Ipv6Net, Prefix6Error> {
        let (addr, len) = Ipv6Net::parse_host(s)?;
        Ipv6Net::new(addr, len)
    }
}

impl fmt::Display for Ipv6Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl Serialize for Ipv6Net {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ipv6Net {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Ipv6Net, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map_err(|e| serde::de::Error::custom(format!("invalid IPv6 prefix \"{s}\": {e}")))
    }
}

/// An IPv6 interface address: the host address and the length of its
/// on-link prefix, written `2001:db8:1::1/64` (host bits expected).
///
/// Serialized as its text form. Parsing (`FromStr`) checks only the form
/// and `len <= 128`; whether the address is a usable unicast host address
/// is checked by the configuration's validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv6Host {
    /// The host address.
    pub addr: Ipv6Addr,
    /// The on-link prefix length, 0-128 (1-128 in a validated
    /// configuration).
    pub len: u8,
}

impl Ipv6Host {
    /// The on-link prefix (the address with host bits cleared).
    pub fn subnet(&self) -> Ipv6Net {
        Ipv6Net::containing(self.addr, self.len)
    }
}

impl FromStr for Ipv6Host {
    type Err = Prefix6Error;

    /// Parses `address/len`; host bits may be set.
    fn from_str(s: &str) -> Result<Ipv6Host, Prefix6Error> {
        Ipv6Net::parse_host(s).map(|(addr, len)| Ipv6Host { addr, len })
    }
}

impl fmt::Display for Ipv6Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl Serialize for Ipv6Host {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ipv6Host {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Ipv6Host, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map_err(|e| serde::de::Error::custom(format!("invalid IPv6 address \"{s}\": {e}")))
    }
}

/// An IPv4 or an IPv6 prefix (an access rule's `source` or
/// `destination`). Serialized as its text form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpNet {
    /// `a.b.c.d/len`.
    V4(Ipv4Net),
    /// `address/len` with a `:` in the address.
    V6(Ipv6Net),
}

impl IpNet {
    /// `"IPv4"` or `"IPv6"`, as messages name the family.
    pub fn family(&self) -> &'static str {
        match self {
            IpNet::V4(_) => "IPv4",
            IpNet::V6(_) => "IPv6",
        }
    }

    /// The network address (host bits zero).
    pub fn addr(&self) -> IpAddr {
        match self {
            IpNet::V4(n) => IpAddr::V4(n.addr),
            IpNet::V6(n) => IpAddr::V6(n.addr),
        }
    }

    /// The prefix length (0-32 or 0-128).
    pub fn prefix_len(&self) -> u8 {
        match self {
            IpNet::V4(n) => n.len,
            IpNet::V6(n) => n.len,
        }
    }

    /// Whether `ip` lies in this prefix: never for an address of the other
    /// family (`::/0` holds no IPv4 address, `0.0.0.0/0` no IPv6 one).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self, ip) {
            (IpNet::V4(n), IpAddr::V4(a)) => n.contains(a),
            (IpNet::V6(n), IpAddr::V6(a)) => n.contains(a),
            _ => false,
        }
    }
}

impl From<Ipv4Net> for IpNet {
    fn from(n: Ipv4Net) -> IpNet {
        IpNet::V4(n)
    }
}

impl From<Ipv6Net> for IpNet {
    fn from(n: Ipv6Net) -> IpNet {
        IpNet::V6(n)
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpNet::V4(n) => n.fmt(f),
            IpNet::V6(n) => n.fmt(f),
        }
    }
}

impl Serialize for IpNet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Why a string is not a valid port or port range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PortError {
    /// Not a number 0-65535 or two such numbers joined by `-`.
    #[error("expected a port 0-65535 or a range \"lo-hi\"")]
    Syntax,
    /// `lo > hi`.
    #[error("low port {lo} is above high port {hi}")]
    Reversed {
        /// The first number.
        lo: u16,
        /// The second number.
        hi: u16,
    },
}

/// An inclusive range of TCP/UDP ports, `lo <= hi`.
///
/// Written as `"80"` or `"1024-65535"`; serialized the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortRange {
    /// First port of the range.
    pub lo: u16,
    /// Last port of the range (inclusive).
    pub hi: u16,
}

impl PortRange {
    /// Every port, `0-65535`.
    pub const ANY: PortRange = PortRange { lo: 0, hi: 65535 };

    /// The range `lo..=hi`, or `None` if `lo > hi`.
    pub fn new(lo: u16, hi: u16) -> Option<PortRange> {
        (lo <= hi).then_some(PortRange { lo, hi })
    }

    /// The range holding the single port `p`.
    pub fn single(p: u16) -> PortRange {
        PortRange { lo: p, hi: p }
    }

    /// Whether `port` is in the range.
    pub fn contains(&self, port: u16) -> bool {
        self.lo <= port && port <= self.hi
    }

    /// Whether the range is [`PortRange::ANY`].
    pub fn is_any(&self) -> bool {
        *self == PortRange::ANY
    }
}

impl Default for PortRange {
    fn default() -> PortRange {
        PortRange::ANY
    }
}

fn parse_port(s: &str) -> Result<u16, PortError> {
    let s = s.trim();
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PortError::Syntax);
    }
    s.parse().map_err(|_| PortError::Syntax)
}

impl FromStr for PortRange {
    type Err = PortError;

    fn from_str(s: &str) -> Result<PortRange, PortError> {
        match s.split_once('-') {
            None => parse_port(s).map(PortRange::single),
            Some((a, b)) => {
                let (lo, hi) = (parse_port(a)?, parse_port(b)?);
                PortRange::new(lo, hi).ok_or(PortError::Reversed { lo, hi })
            }
        }
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

impl Serialize for PortRange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The IP protocol an access rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Protocol {
    /// Every protocol.
    #[default]
    Any,
    /// One IP protocol number (RFC 790 / IANA "Assigned Internet Protocol
    /// Numbers").
    Number(u8),
}

/// Why a string is not a valid protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected tcp, udp, icmp, icmp6, any or a number 0-255")]
pub struct ProtocolError;

impl Protocol {
    /// ICMP, protocol 1 (RFC 792).
    pub const ICMP: Protocol = Protocol::Number(1);
    /// TCP, protocol 6 (RFC 9293).
    pub const TCP: Protocol = Protocol::Number(6);
    /// UDP, protocol 17 (RFC 768).
    pub const UDP: Protocol = Protocol::Number(17);
    /// ICMPv6, next header 58 (RFC 4443).
    pub const ICMP6: Protocol = Protocol::Number(58);

    /// Whether a packet of IP protocol `proto` matches.
    pub fn matches(&self, proto: u8) -> bool {
        match self {
            Protocol::Any => true,
            Protocol::Number(n) => *n == proto,
        }
    }

    /// Whether the protocol has ports (TCP or UDP).
    pub fn has_ports(&self) -> bool {
        *self == Protocol::TCP || *self == Protocol::UDP
    }
}

impl FromStr for Protocol {
    type Err = ProtocolError;

    fn from_str(s: &str) -> Result<Protocol, ProtocolError> {
        match s {
            "any" => Ok(Protocol::Any),
            "tcp" => Ok(Protocol::TCP),
            "udp" => Ok(Protocol::UDP),
            "icmp" => Ok(Protocol::ICMP),
            "icmp6" => Ok(Protocol::ICMP6),
            n if !n.is_empty() && n.len() <= 3 && n.bytes().all(|b| b.is_ascii_digit()) => {
                n.parse().map(Protocol::Number).map_err(|_| ProtocolError)
            }
            _ => Err(ProtocolError),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Protocol::Any => f.write_str("any"),
            Protocol::TCP => f.write_str("tcp"),
            Protocol::UDP => f.write_str("udp"),
            Protocol::ICMP => f.write_str("icmp"),
            Protocol::ICMP6 => f.write_str("icmp6"),
            Protocol::Number(n) => write!(f, "{n}"),
        }
    }
}

/// Serialized as `"any"`, `"tcp"`, `"udp"`, `"icmp"`, `"icmp6"` or an
/// integer.
impl Serialize for Protocol {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Protocol::Number(n) if !self.has_ports() && *self != Protocol::ICMP && *self != Protocol::ICMP6 => {
                s.serialize_u8(n)
            }
            _ => s.collect_str(self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn prefix_parse_and_display() {
        let n: Ipv4Net = "198.18.1.0/24".parse().unwrap();
        assert_eq!(
            n,
            Ipv4Net {
                addr: ip("198.18.1.0"),
                len: 24
            }
        );
        assert_eq!(n.to_string(), "198.18.1.0/24");
        assert_eq!(n.netmask(), ip("255.255.255.0"));
        assert_eq!(n.broadcast(), ip("198.18.1.255"));
        assert_eq!("0.0.0.0/0".parse::<Ipv4Net>().unwrap(), Ipv4Net::ANY);
        assert_eq!("1.2.3.4/32".parse::<Ipv4Net>().unwrap().len, 32);
    }

    #[test]
    fn prefix_errors() {
        assert_eq!(
            "1.2.3.4".parse::<Ipv4Net>(),
            Err(PrefixError::MissingLength)
        );
        assert_eq!(
            "1.2.3/8".parse::<Ipv4Net>(),
            Err(PrefixError::BadAddress("1.2.3".into()))
        );
        assert_eq!(
            "1.2.3.4/x".parse::<Ipv4Net>(),
            Err(PrefixError::BadLength("x".into()))
        );
        assert_eq!(
            "1.2.3.4/+8".parse::<Ipv4Net>(),
            Err(PrefixError::BadLength("+8".into()))
        );
        assert_eq!(
            "1.2.3.4/".parse::<Ipv4Net>(),
            Err(PrefixError::BadLength("".into()))
        );
        assert_eq!(
            "1.2.3.4/33".parse::<Ipv4Net>(),
            Err(PrefixError::LengthTooLong)
        );
        assert_eq!(
            "1.2.3.4/99999".parse::<Ipv4Net>(),
            Err(PrefixError::BadLength("99999".into()))
        );
        let e = "198.18.1.1/24".parse::<Ipv4Net>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "host bits are set (did you mean 198.18.1.0/24?)"
        );
        assert_eq!(
            Ipv4Net::parse_host("198.18.1.1/24"),
            Ok((ip("198.18.1.1"), 24))
        );
    }

    #[test]
    fn prefix_contains_and_overlaps() {
        let n: Ipv4Net = "10.1.0.0/16".parse().unwrap();
        assert!(n.contains(ip("10.1.255.255")));
        assert!(!n.contains(ip("10.2.0.0")));
        assert!(Ipv4Net::ANY.contains(ip("255.255.255.255")));
        let m: Ipv4Net = "10.1.2.0/24".parse().unwrap();
        assert!(n.overlaps(&m) && m.overlaps(&n));
        assert!(!m.overlaps(&"10.1.3.0/24".parse().unwrap()));
        assert_eq!(
            Ipv4Net::containing(ip("10.1.2.3"), 8).to_string(),
            "10.0.0.0/8"
        );
    }

    fn ip6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn prefix6_parse_and_display() {
        let n: Ipv6Net = "2001:db8:9::/48".parse().unwrap();
        assert_eq!(n, Ipv6Net { addr: ip6("2001:db8:9::"), len: 48 });
        assert_eq!(n.to_string(), "2001:db8:9::/48");
        assert_eq!("::/0".parse::<Ipv6Net>().unwrap(), Ipv6Net::ANY);
        assert_eq!("2001:db8::1/128".parse::<Ipv6Net>().unwrap().len, 128);
        // Non-canonical forms are read; the canonical one is printed and
        // parses back to the same value.
        let m: Ipv6Net = "2001:0DB8:0009:0:0::/48".parse().unwrap();
        assert_eq!(m, n);
        assert_eq!(m.to_string().parse::<Ipv6Net>().unwrap(), m);
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"2001:db8:9::/48\"");
        let back: Ipv6Net = serde_json::from_str("\"2001:db8:9::/48\"").unwrap();
        assert_eq!(back, n);
    }

    #[test]
    fn prefix6_errors() {
        assert_eq!("2001:db8::".parse::<Ipv6Net>(), Err(Prefix6Error::MissingLength));
        assert_eq!("2001:db8::g/64".parse::<Ipv6Net>(), Err(Prefix6Error::BadAddress("2001:db8::g".into())));
        assert_eq!("10.0.0.0/8".parse::<Ipv6Net>(), Err(Prefix6Error::BadAddress("10.0.0.0".into())));
        assert_eq!("fe80::1%eth0/64".parse::<Ipv6Net>(), Err(Prefix6Error::BadAddress("fe80::1%eth0".into())));
        assert_eq!("::/x".parse::<Ipv6Net>(), Err(Prefix6Error::BadLength("x".into())));
        assert_eq!("::/+8".parse::<Ipv6Net>(), Err(Prefix6Error::BadLength("+8".into())));
        assert_eq!("::/".parse::<Ipv6Net>(), Err(Prefix6Error::BadLength("".into())));
        assert_eq!("::/1280".parse::<Ipv6Net>(), Err(Prefix6Error::BadLength("1280".into())));
        assert_eq!("::/129".parse::<Ipv6Net>(), Err(Prefix6Error::LengthTooLong));
        assert_eq!(Ipv6Net::new(ip6("::"), 129), Err(Prefix6Error::LengthTooLong));
        let e = "2001:db8:9::1/48".parse::<Ipv6Net>().unwrap_err();
        assert_eq!(e.to_string(), "host bits are set (did you mean 2001:db8:9::/48?)");
        assert_eq!(Ipv6Net::parse_host("2001:db8:1::1/64"), Ok((ip6("2001:db8:1::1"), 64)));
    }

    #[test]
    fn prefix6_contains_and_overlaps() {
        let n: Ipv6Net = "2001:db8::/32".parse().unwrap();
        assert!(n.contains(ip6("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")));
        assert!(!n.contains(ip6("2001:db9::")));
        assert!(Ipv6Net::ANY.contains(ip6("ffff::1")));
        let m: Ipv6Net = "2001:db8:1::/48".parse().unwrap();
        assert!(n.overlaps(&m) && m.overlaps(&n));
        assert!(!m.overlaps(&"2001:db8:2::/48".parse().unwrap()));
        assert_eq!(Ipv6Net::containing(ip6("2001:db8:1:2:3:4:5:6"), 64).to_string(), "2001:db8:1:2::/64");
        assert_eq!(Ipv6Net::containing(ip6("2001:db8::1"), 200).len, 128);
        assert_eq!(Ipv6Net::containing(ip6("2001:db8::1"), 0), Ipv6Net::ANY);
    }

    #[test]
    fn ipv6_host() {
        let h: Ipv6Host = "2001:db8:1::1/64".parse().unwrap();
        assert_eq!(h, Ipv6Host { addr: ip6("2001:db8:1::1"), len: 64 });
        assert_eq!(h.to_string(), "2001:db8:1::1/64");
        assert_eq!(h.subnet().to_string(), "2001:db8:1::/64");
        assert_eq!(serde_json::to_string(&h).unwrap(), "\"2001:db8:1::1/64\"");
        assert_eq!("2001:db8::1/129".parse::<Ipv6Host>(), Err(Prefix6Error::LengthTooLong));
    }

    #[test]
    fn either_family() {
        let v4 = IpNet::from("10.0.0.0/8".parse::<Ipv4Net>().unwrap());
        let v6 = IpNet::from("2001:db8::/32".parse::<Ipv6Net>().unwrap());
        assert_eq!((v4.family(), v4.prefix_len(), v4.to_string()), ("IPv4", 8, "10.0.0.0/8".to_string()));
        assert_eq!((v6.family(), v6.prefix_len(), v6.to_string()), ("IPv6", 32, "2001:db8::/32".to_string()));
        assert!(v4.contains(IpAddr::V4(ip("10.9.9.9"))) && !v4.contains(IpAddr::V4(ip("11.0.0.0"))));
        assert!(v6.contains(IpAddr::V6(ip6("2001:db8::1"))) && !v6.contains(IpAddr::V6(ip6("2001:db9::"))));
        // Never across families, not even the "every address" prefixes.
        let any4 = IpNet::V4(Ipv4Net::ANY);
        let any6 = IpNet::V6(Ipv6Net::ANY);
        assert!(!any4.contains(IpAddr::V6(ip6("::"))) && !any6.contains(IpAddr::V4(ip("0.0.0.0"))));
        assert!(!v6.contains(IpAddr::V4(ip("32.1.13.184"))), "2001:db8:: is 32.1.13.184 in its first word");
        assert_eq!(serde_json::to_string(&v6).unwrap(), "\"2001:db8::/32\"");
        assert_eq!(v6.addr(), IpAddr::V6(ip6("2001:db8::")));
    }

    #[test]
    fn ports() {
        assert_eq!("80".parse::<PortRange>(), Ok(PortRange::single(80)));
        assert_eq!(
            "1024-65535".parse::<PortRange>(),
            Ok(PortRange {
                lo: 1024,
                hi: 65535
            })
        );
        assert_eq!("0-65535".parse::<PortRange>(), Ok(PortRange::ANY));
        assert_eq!(
            "90-80".parse::<PortRange>(),
            Err(PortError::Reversed { lo: 90, hi: 80 })
        );
        for bad in ["", "-", "65536", "1-", "-5", "+5", "a", "1-2-3", "99999999"] {
            assert_eq!(bad.parse::<PortRange>(), Err(PortError::Syntax), "{bad}");
        }
        let r = PortRange { lo: 10, hi: 20 };
        assert!(r.contains(10) && r.contains(20) && !r.contains(21) && !r.contains(9));
        assert_eq!(r.to_string(), "10-20");
        assert_eq!(PortRange::single(7).to_string(), "7");
    }

    #[test]
    fn protocols() {
        assert_eq!("tcp".parse(), Ok(Protocol::TCP));
        assert_eq!("udp".parse(), Ok(Protocol::UDP));
        assert_eq!("icmp".parse(), Ok(Protocol::ICMP));
        assert_eq!("icmp6".parse(), Ok(Protocol::ICMP6));
        assert_eq!("58".parse(), Ok(Protocol::ICMP6));
        assert_eq!(Protocol::ICMP6.to_string(), "icmp6");
        assert_eq!(serde_json::to_string(&Protocol::ICMP6).unwrap(), "\"icmp6\"");
        assert_eq!("any".parse(), Ok(Protocol::Any));
        assert_eq!("47".parse(), Ok(Protocol::Number(47)));
        assert_eq!("6".parse(), Ok(Protocol::TCP));
        assert_eq!("256".parse::<Protocol>(), Err(ProtocolError));
        assert_eq!("TCP".parse::<Protocol>(), Err(ProtocolError));
        assert!(Protocol::Any.matches(3) && Protocol::TCP.matches(6) && !Protocol::TCP.matches(17));
        assert_eq!(serde_json::to_string(&Protocol::Number(47)).unwrap(), "47");
        assert_eq!(serde_json::to_string(&Protocol::TCP).unwrap(), "\"tcp\"");
    }
}
