//! The types of the exporters: `logging.syslog` (RFC 5424 syslog to
//! collectors) and `flow-export` (IPFIX), node-local like `metrics`; the
//! checks that build them are in `validate/export.rs`.

use serde::{Deserialize, Serialize};
use std::net::SocketAddrV4;

/// Default `logging.deny-rate`: denied-connection messages per rule per
/// second (the rest are counted and summarised).
pub const DEFAULT_DENY_RATE: u32 = 10;
/// Default `flow-export.template-refresh`, seconds (RFC 7011 §8.4: a UDP
/// exporter re-sends its templates periodically).
pub const DEFAULT_TEMPLATE_REFRESH: u32 = 60;
/// Default `flow-export.active-timeout`, seconds: a connection that lives
/// longer is exported in intervals of this length.
pub const DEFAULT_ACTIVE_TIMEOUT: u32 = 60;

/// How a syslog collector is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyslogTransport {
    /// One message per datagram (RFC 5426).
    Udp,
    /// A stream, each message framed by its length (RFC 6587 §3.4.1
    /// octet counting).
    Tcp,
}

/// The syslog facility (RFC 5424 §6.2.1), by its usual name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum Facility {
    Kern, User, Mail, Daemon, Auth, Syslog, Lpr, News, Uucp, Cron, Authpriv, Ftp,
    Local0, Local1, Local2, Local3, Local4, Local5, Local6, Local7,
}

impl Facility {
    /// The facility's number (0-23).
    pub fn code(self) -> u8 {
        use Facility::*;
        match self {
            Kern => 0, User => 1, Mail => 2, Daemon => 3, Auth => 4, Syslog => 5, Lpr => 6, News => 7,
            Uucp => 8, Cron => 9, Authpriv => 10, Ftp => 11,
            Local0 => 16, Local1 => 17, Local2 => 18, Local3 => 19, Local4 => 20, Local5 => 21, Local6 => 22,
            Local7 => 23,
        }
    }
}

/// A syslog severity (RFC 5424 §6.2.1), most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum Severity {
    Emergency, Alert, Critical, Error, Warning, Notice, Informational, Debug,
}

impl Severity {
    /// The severity's number (0-7).
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// Which name a message's HOSTNAME field carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceId {
    /// The node's own name (`node.name`).
    Node,
    /// The cluster's name (`cluster.name`, the same on every member); a
    /// single node uses its own name.
    Cluster,
}

/// One `logging.syslog[]` collector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct SyslogConfig {
    /// `server`: `a.b.c.d:port` (required).
    pub server: SocketAddrV4,
    /// `transport`: `udp` (default) or `tcp`.
    pub transport: SyslogTransport,
    /// `facility`: default `local4`.
    pub facility: Facility,
    /// `severity`: the least severe level sent (default `informational`:
    /// everything but debug).
    pub severity: Severity,
    /// `device-id`: `node` (default) or `cluster`.
    pub device_id: DeviceId,
}

/// `flow-export`: the IPFIX collector (none: no export).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct FlowExportConfig {
    /// `collector`: `a.b.c.d:port` (required), over UDP.
    pub collector: SocketAddrV4,
    /// `template-refresh`: seconds between template re-sends (1-3600,
    /// default 60).
    pub template_refresh: u32,
    /// `active-timeout`: seconds (1-86400, default 60).
    pub active_timeout: u32,
}
