//! `logging.syslog`, `logging.deny-rate` and `flow-export` from their raw
//! form: addresses `a.b.c.d:port`, enums by name (serde names the field and
//! the accepted values of a misspelt one), numbers in range.

use serde::Deserialize;

use super::Checker;
use crate::error::FieldPath;
use crate::model::export::*;

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a syslog collector mapping (server, transport, facility, severity, device-id)"
)]
pub(crate) struct RawSyslog {
    server: String,
    #[serde(default)]
    transport: Option<SyslogTransport>,
    #[serde(default)]
    facility: Option<Facility>,
    #[serde(default)]
    severity: Option<Severity>,
    #[serde(default)]
    device_id: Option<DeviceId>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a flow-export mapping (collector, template-refresh, active-timeout)"
)]
pub(crate) struct RawFlowExport {
    collector: String,
    template_refresh: Option<u64>,
    active_timeout: Option<u64>,
}

impl Checker<'_> {
    pub(crate) fn syslog(&self, p: &FieldPath, raw: Vec<RawSyslog>) -> Result<Vec<SyslogConfig>, crate::ConfigError> {
        let mut out = Vec::with_capacity(raw.len());
        for (i, r) in raw.into_iter().enumerate() {
            let e = p.index(i);
            out.push(SyslogConfig {
                server: self.socket_address(&e.key("server"), r.server)?,
                transport: r.transport.unwrap_or(SyslogTransport::Udp),
                facility: r.facility.unwrap_or(Facility::Local4),
                severity: r.severity.unwrap_or(Severity::Informational),
                device_id: r.device_id.unwrap_or(DeviceId::Node),
            });
        }
        Ok(out)
    }

    pub(crate) fn flow_export(
        &self,
        p: &FieldPath,
        raw: Option<RawFlowExport>,
    ) -> Result<Option<FlowExportConfig>, crate::ConfigError> {
        let Some(r) = raw else { return Ok(None) };
        Ok(Some(FlowExportConfig {
            collector: self.socket_address(&p.key("collector"), r.collector)?,
            template_refresh: self.range(
                &p.key("template-refresh"),
                r.template_refresh,
                DEFAULT_TEMPLATE_REFRESH.into(),
                1,
                3600,
            )? as u32,
            active_timeout: self.range(
                &p.key("active-timeout"),
                r.active_timeout,
                DEFAULT_ACTIVE_TIMEOUT.into(),
                1,
                86_400,
            )? as u32,
        }))
    }
}
