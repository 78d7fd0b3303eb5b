//! The node's ports as the membership machine sees them (SPEC M4, M5): the
//! control lcore polls every port's link state (`rte_eth_link_get_nowait`,
//! safe beside a polling worker) and reports changes, and it carries out
//! the machine's orders to shut or open the data ports
//! (`rte_eth_dev_set_link_down` / `_up`; on `net_af_packet` that takes the
//! kernel interface down, so the router's end of the link loses carrier and
//! its ECMP route drops this node — no silent black hole).
//!
//! `net_af_packet` (DPDK 22.11) neither reports carrier (its link is "up"
//! from start to stop) nor implements `set_link_down`; for its ports the
//! kernel interface it is bound to (`iface=`) is read and set instead:
//! carrier from `/sys/class/net/IFACE/carrier`, shut and open with
//! `ip link set dev IFACE down|up` (the node runs in that interface's
//! network namespace). The effect is the one a NIC's link-down has: the
//! peer's end of the veth loses carrier.
//!
//! Debouncing is the membership machine's (`interface-debounce`); this
//! module only says what the link is now. A port the node shut itself is
//! not read (its "down" is the node's own doing, and an admin-down port
//! cannot tell whether its peer is back). So a shut leaves a port that has
//! no carrier anyway (the failed one) open and watched: when its carrier
//! returns, that is reported — and the port is shut at once, so the
//! upstream does not send to a node that is out of the cluster; the
//! machine decides (rejoin, after which every port is opened again).
//!
//! Invariant: a port's reported state changes only when the link state
//! read from DPDK changes: no repeats, nothing reported for a port the node
//! holds down.

use dpdk_sys::Port;

/// How often the links are read.
pub const POLL_NS: u64 = 10_000_000;

/// One port the node watches.
pub struct Watched {
    pub port: Port,
    /// Index in the pipeline's port list (the membership machine's port
    /// number).
    pub index: u16,
    /// The CCL port (not shut with the data ports).
    pub ccl: bool,
    /// The kernel interface of an af_packet port: read and set through
    /// the kernel (see the module essay).
    pub kernel: Option<String>,
    /// Last state read; `None` before the first read.
    up: Option<bool>,
    /// Shut by the node (`set_data_ports(false)`): not read.
    held: bool,
}

pub struct Links {
    ports: Vec<Watched>,
    next_poll: u64,
    /// The node ordered its data ports down: a failed port that gets its
    /// carrier back meanwhile is reported, then shut too.
    down_wanted: bool,
}

/// A change to report: port `index` is now `up`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub index: u16,
    pub ccl: bool,
    pub up: bool,
}

impl Links {
    /// `(port, index, is the CCL port, DPDK device string)` per port.
    pub fn new<'a>(ports: impl IntoIterator<Item = (Port, u16, bool, &'a str)>) -> Links {
        Links {
            ports: ports
                .into_iter()
                .map(|(port, index, ccl, device)| Watched {
                    port,
                    index,
                    ccl,
                    kernel: af_packet_iface(device),
                    up: None,
                    held: false,
                })
                .collect(),
            next_poll: 0,
            down_wanted: false,
        }
    }

    /// Read every link if the poll period has come (`now` in ns of the
    /// node's clock); the changes since the last read. A port the node
    /// holds down reports nothing until the node opens it again.
    pub fn poll(&mut self, now: u64, out: &mut Vec<Change>) {
        if now < self.next_poll {
            return;
        }
        self.next_poll = now + POLL_NS;
        for w in &mut self.ports {
            if w.held {
                continue;
            }
            let up = match &w.kernel {
                Some(k) => kernel_carrier(k),
                None => match w.port.link() {
                    Ok(l) => l.up,
                    Err(_) => continue,
                },
            };
            if w.up != Some(up) {
                if w.up.is_some() {
                    out.push(Change { index: w.index, ccl: w.ccl, up });
                }
                w.up = Some(up);
                if up && self.down_wanted && !w.ccl {
                    // Back while the node keeps out of traffic: shut it,
                    // or the upstream sends to a node that drops.
                    if let Err(e) = set_link(w, false) {
                        log::warn!("port {}: link down: {e}", w.index);
                    }
                }
            }
        }
    }

    /// Shut (`false`) or open (`true`) the data ports; errors are logged,
    /// the rest still done. Shutting skips a port whose link is already
    /// down (it stays watched, see the module essay); opening opens what
    /// was shut and takes it as up until a read says otherwise. Returns how
    /// many ports took the order.
    pub fn set_data_ports(&mut self, up: bool) -> usize {
        self.down_wanted = !up;
        let mut done = 0;
        for w in self.ports.iter_mut().filter(|w| !w.ccl) {
            if up != w.held || (!up && w.up == Some(false)) {
                continue;
            }
            match set_link(w, up) {
                Ok(()) => done += 1,
                Err(e) => log::warn!("port {}: link {}: {e}", w.index, if up { "up" } else { "down" }),
            }
        }
        done
    }

    /// Whether the node holds any data port down.
    pub fn data_held_down(&self) -> bool {
        self.ports.iter().any(|w| w.held)
    }
}

/// Open or shut one port, through its kernel interface on af_packet; a
/// shut port is held (not read until opened again), an opened one taken
/// as up until a read says otherwise.
fn set_link(w: &mut Watched, up: bool) -> Result<(), String> {
    let r = match &w.kernel {
        Some(k) => kernel_set_link(k, up),
        None if up => w.port.set_link_up().map_err(|e| e.to_string()),
        None => w.port.set_link_down().map_err(|e| e.to_string()),
    };
    w.held = !up;
    w.up = Some(up);
    r
}

/// The kernel interface of a `net_af_packet` device string
/// (`net_af_packet0,iface=eth1,framecnt=2048` gives `eth1`).
pub fn af_packet_iface(device: &str) -> Option<String> {
    let mut parts = device.split(',');
    if !parts.next()?.starts_with("net_af_packet") {
        return None;
    }
    parts.find_map(|p| p.strip_prefix("iface=")).filter(|i| !i.is_empty()).map(str::to_string)
}

/// Carrier of a kernel interface: `carrier` reads `1`. An interface that
/// is administratively down (the file cannot be read) or gone has none.
fn kernel_carrier(iface: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/carrier")).is_ok_and(|s| s.trim() == "1")
}

/// `ip link set dev IFACE up|down`.
fn kernel_set_link(iface: &str, up: bool) -> Result<(), String> {
    let st = std::process::Command::new("ip")
        .args(["link", "set", "dev", iface, if up { "up" } else { "down" }])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("ip link set dev {iface}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("ip link set dev {iface} {}: {st}", if up { "up" } else { "down" }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_interface_of_an_af_packet_device() {
        assert_eq!(af_packet_iface("net_af_packet0,iface=n1-in,framecnt=2048").as_deref(), Some("n1-in"));
        assert_eq!(af_packet_iface("net_af_packet3,framecnt=2048,iface=ccl0,qpairs=2").as_deref(), Some("ccl0"));
        assert_eq!(af_packet_iface("net_af_packet0").as_deref(), None);
        assert_eq!(af_packet_iface("net_af_packet0,iface=").as_deref(), None);
        assert_eq!(af_packet_iface("net_pcap0,iface=eth0").as_deref(), None);
        assert_eq!(af_packet_iface("0000:03:00.0").as_deref(), None);
        assert_eq!(af_packet_iface(""), None);
    }

    #[test]
    fn a_missing_interface_has_no_carrier() {
        assert!(!kernel_carrier("cfw-no-such-interface"));
        assert!(kernel_carrier("lo") || !std::path::Path::new("/sys/class/net/lo/carrier").exists());
    }
}
