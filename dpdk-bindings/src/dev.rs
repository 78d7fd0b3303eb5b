//! Device hot-plug after EAL init. The usual way to create virtual devices
//! is the EAL argument `--vdev <devargs>` (see [`crate::eal`]); this module
//! covers adding one later, e.g. from the control plane.

use std::ffi::CString;

use crate::eal;
use crate::error::{ok, Error, Result};
use crate::ffi;

/// Probes (creates) a device from devargs (`rte_dev_probe`), e.g.
/// `"net_null1"` or `"net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap"`; find the
/// resulting port with [`crate::Port::by_name`] and the name before the
/// first comma.
pub fn probe(devargs: &str) -> Result<()> {
    const F: &str = "rte_dev_probe";
    eal::require(F)?;
    let c = CString::new(devargs).map_err(|_| {
        Error::new(F, 22).with_detail(format!("devargs {devargs:?} contain a NUL byte"))
    })?;
    // SAFETY: EAL is up; c is a valid C string that DPDK parses and copies.
    ok(F, unsafe { ffi::rte_dev_probe(c.as_ptr()) })
        .map_err(|e| e.with_detail(format!("devargs {devargs:?}")))
}

/// The device name a devargs string yields: the part before the first comma.
pub fn devargs_name(devargs: &str) -> &str {
    devargs.split(',').next().unwrap_or(devargs)
}
