//! Ethernet ports (`rte_ethdev`): lookup, configuration, start/stop,
//! link/stats queries and the RX/TX burst calls.
//!
//! Invariants:
//! - A [`Port`] is only a valid port id (checked when it is made, which
//!   needs EAL). It is `Copy + Send + Sync`; it does not own the device.
//! - Thread safety of queues is the caller's: each RX queue and each TX
//!   queue must be polled by one thread at a time (DPDK queues are
//!   lock-free single-user). Control calls (`configure`, `start`, `stop`,
//!   `close`) belong to the main thread while no worker polls the port.
//! - `rx_burst`/`tx_burst` go through the C shim, which returns 0 for a
//!   queue that was never set up instead of letting the PMD dereference
//!   NULL; a stopped port's queues are DPDK dummies that also return 0
//!   (but log an error with a stack dump: stop workers before ports).
//! - `tx_burst` hands the sent mbufs to the PMD (which frees them after
//!   transmission); unsent ones stay owned by the burst.

use std::ffi::CStr;
use std::os::raw::c_char;

use crate::eal;
use crate::error::{ok, Error, Result};
use crate::ffi;
use crate::mbuf::MbufBurst;
use crate::mempool::{c_name, Mempool};

/// An Ethernet device by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Port {
    id: u16,
}

/// Link state from [`Port::link`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// Whether the link is up.
    pub up: bool,
    /// Speed in Mbit/s; `u32::MAX` if unknown (`RTE_ETH_SPEED_NUM_UNKNOWN`),
    /// 0 if none.
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
}

/// Basic port counters (`rte_eth_stats`), cumulative since start or
/// [`Port::reset_stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// RX packets dropped by the hardware (RX queues full).
    pub imissed: u64,
    /// Erroneous received packets.
    pub ierrors: u64,
    /// Failed transmissions.
    pub oerrors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// Static facts about a port (`rte_eth_dev_info_get`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// PMD name, e.g. `net_ring`, `net_null`, `net_ice`.
    pub driver_name: String,
    /// Most RX queues the port supports.
    pub max_rx_queues: u16,
    /// Most TX queues the port supports.
    pub max_tx_queues: u16,
    /// RSS hash types the port supports (`RTE_ETH_RSS_*` bits).
    pub rss_offloads: u64,
    /// The largest MTU `configure` accepts: the device's maximum frame
    /// (`max_rx_pktlen`) less its L2 overhead, capped by its `max_mtu`.
    pub max_mtu: u16,
}

/// RSS hash types requested when a port is configured with more than one
/// RX queue: IPv4/IPv6 addresses plus TCP/UDP ports (DPDK's
/// `RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP`), masked by what the
/// port supports.
pub const RSS_IP_TCP_UDP: u64 = {
    const fn bit(n: u32) -> u64 {
        1u64 << n
    }
    // rte_ethdev.h: IPV4 2, FRAG_IPV4 3, NONFRAG_IPV4_TCP 4, _UDP 5, _OTHER 7,
    // IPV6 8, FRAG_IPV6 9, NONFRAG_IPV6_TCP 10, _UDP 11, _OTHER 13,
    // IPV6_EX 15, IPV6_TCP_EX 16, IPV6_UDP_EX 17.
    bit(2)
        | bit(3)
        | bit(4)
        | bit(5)
        | bit(7)
        | bit(8)
        | bit(9)
        | bit(10)
        | bit(11)
        | bit(13)
        | bit(15)
        | bit(16)
        | bit(17)
};

impl Port {
    /// The port with id `id`, if it exists (`rte_eth_dev_is_valid_port`).
    pub fn from_id(id: u16) -> Result<Port> {
        const F: &str = "rte_eth_dev_is_valid_port";
        eal::require(F)?;
        // SAFETY: EAL is up; any id is accepted and bounds-checked.
        if unsafe { ffi::rte_eth_dev_is_valid_port(id) } == 1 {
            Ok(Port { id })
        } else {
            Err(Error::new(F, 19).with_detail(format!("port id {id}")))
        }
    }

    /// The port named `name` (`rte_eth_dev_get_port_by_name`): a vdev's name
    /// is its devargs up to the first comma (`net_af_packet0`), a PCI
    /// device's is its address (`0000:3b:00.0`).
    pub fn by_name(name: &str) -> Result<Port> {
        const F: &str = "rte_eth_dev_get_port_by_name";
        eal::require(F)?;
        let cname = c_name(F, name)?;
        let mut id = 0u16;
        // SAFETY: EAL is up; cname is a valid C string, id a valid out-pointer.
        let ret = unsafe { ffi::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
        ok(F, ret).map_err(|e| e.with_detail(format!("port {name:?}")))?;
        Ok(Port { id })
    }

    /// Number of usable ports (`rte_eth_dev_count_avail`); 0 before EAL init.
    pub fn count_avail() -> u16 {
        if !eal::is_initialized() {
            return 0;
        }
        // SAFETY: EAL is up; reads the port table.
        unsafe { ffi::rte_eth_dev_count_avail() }
    }

    /// All usable ports, by ascending id; empty before EAL init.
    pub fn all() -> Vec<Port> {
        let mut out = Vec::new();
        if !eal::is_initialized() {
            return out;
        }
        let mut id = 0u16;
        loop {
            // SAFETY: EAL is up; rte_eth_find_next bounds-checks its argument
            // and returns RTE_MAX_ETHPORTS when there is no further port.
            let next = unsafe { ffi::rte_eth_find_next(id) };
            if u32::from(next) >= ffi::RTE_MAX_ETHPORTS {
                return out;
            }
            out.push(Port { id: next });
            id = next + 1;
        }
    }

    /// A `Port` without validation, for tests that need no EAL.
    #[cfg(test)]
    pub(crate) fn unchecked(id: u16) -> Port {
        Port { id }
    }

    /// The port id.
    #[inline]
    pub fn id(self) -> u16 {
        self.id
    }

    /// The device name (`rte_eth_dev_get_name_by_port`).
    pub fn name(self) -> Result<String> {
        const F: &str = "rte_eth_dev_get_name_by_port";
        let mut buf = [0 as c_char; ffi::RTE_ETH_NAME_MAX_LEN as usize];
        // SAFETY: valid port; buf has the RTE_ETH_NAME_MAX_LEN bytes DPDK
        // writes at most (NUL included).
        ok(F, unsafe {
            ffi::rte_eth_dev_get_name_by_port(self.id, buf.as_mut_ptr())
        })?;
        // SAFETY: DPDK wrote a NUL-terminated string into buf.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// NUMA socket the device is attached to, or `SOCKET_ID_ANY` (-1).
    pub fn socket_id(self) -> i32 {
        // SAFETY: valid port.
        unsafe { ffi::rte_eth_dev_socket_id(self.id) }
    }

    fn raw_info(self) -> Result<ffi::rte_eth_dev_info> {
        const F: &str = "rte_eth_dev_info_get";
        let mut info = ffi::rte_eth_dev_info::default();
        // SAFETY: valid port; info is a valid out-pointer.
        ok(F, unsafe { ffi::rte_eth_dev_info_get(self.id, &mut info) })?;
        Ok(info)
    }

    /// Driver and queue limits.
    pub fn info(self) -> Result<PortInfo> {
        let info = self.raw_info()?;
        let driver_name = if info.driver_name.is_null() {
            String::new()
        } else {
            // SAFETY: a non-NULL driver_name is the PMD's static C string.
            unsafe { CStr::from_ptr(info.driver_name) }
                .to_string_lossy()
                .into_owned()
        };
        // DPDK's own rule (ethdev `eth_dev_get_overhead_len`): the overhead
        // is max_rx_pktlen - max_mtu when the device reports both, else
        // an Ethernet header and CRC.
        let overhead = if info.max_mtu != u16::MAX && info.max_rx_pktlen > u32::from(info.max_mtu) {
            info.max_rx_pktlen - u32::from(info.max_mtu)
        } else {
            18
        };
        let max_mtu = info.max_rx_pktlen.saturating_sub(overhead).min(u32::from(info.max_mtu)) as u16;
        Ok(PortInfo {
            driver_name,
            max_rx_queues: info.max_rx_queues,
            max_tx_queues: info.max_tx_queues,
            rss_offloads: info.flow_type_rss_offloads,
            max_mtu,
        })
    }

    /// Configures `nb_rxq` RX and `nb_txq` TX queues
    /// (`rte_eth_dev_configure` with DPDK's defaults; RSS over
    /// [`RSS_IP_TCP_UDP`] when `nb_rxq > 1` and the port supports it), then
    /// sets up each queue on the port's NUMA socket with `rx_desc`/`tx_desc`
    /// descriptors (clamped to the device's limits by
    /// `rte_eth_dev_adjust_nb_rx_tx_desc`), RX queues filling from `pool`,
    /// with MTU `mtu` (0: DPDK's default, 1500; at most `PortInfo::max_mtu`).
    /// The port must be stopped.
    pub fn configure(
        self,
        nb_rxq: u16,
        nb_txq: u16,
        rx_desc: u16,
        tx_desc: u16,
        pool: &Mempool,
        mtu: u16,
    ) -> Result<()> {
        let info = self.raw_info()?;
        let mut conf = ffi::rte_eth_conf::default();
        conf.rxmode.mtu = u32::from(mtu);
        if nb_rxq > 1 {
            let hf = RSS_IP_TCP_UDP & info.flow_type_rss_offloads;
            if hf != 0 {
                conf.rxmode.mq_mode = ffi::RTE_ETH_MQ_RX_RSS;
                conf.rx_adv_conf.rss_conf.rss_hf = hf;
            }
        }
        // SAFETY: valid port; conf is a fully initialised rte_eth_conf that
        // DPDK copies.
        let ret = unsafe { ffi::rte_eth_dev_configure(self.id, nb_rxq, nb_txq, &conf) };
        ok("rte_eth_dev_configure", ret).map_err(|e| {
            e.with_detail(format!(
                "port {} with {nb_rxq} rx / {nb_txq} tx queues",
                self.id
            ))
        })?;

        let (mut nrx, mut ntx) = (rx_desc, tx_desc);
        // SAFETY: valid, configured port; both are valid in/out pointers.
        let ret = unsafe { ffi::rte_eth_dev_adjust_nb_rx_tx_desc(self.id, &mut nrx, &mut ntx) };
        ok("rte_eth_dev_adjust_nb_rx_tx_desc", ret)?;

        // The socket as an unsigned int, with -1 (any) wrapping to
        // SOCKET_ID_ANY as DPDK expects.
        let socket = self.socket_id() as u32;
        for q in 0..nb_rxq {
            // SAFETY: valid port configured with nb_rxq queues; NULL rx_conf
            // selects the PMD defaults; the pool is live for the process.
            let ret = unsafe {
                ffi::rte_eth_rx_queue_setup(
                    self.id,
                    q,
                    nrx,
                    socket,
                    std::ptr::null(),
                    pool.as_ptr(),
                )
            };
            ok("rte_eth_rx_queue_setup", ret).map_err(|e| {
                e.with_detail(format!("port {} queue {q}, {nrx} descriptors", self.id))
            })?;
        }
        for q in 0..nb_txq {
            // SAFETY: valid port configured with nb_txq queues; NULL tx_conf
            // selects the PMD defaults.
            let ret =
                unsafe { ffi::rte_eth_tx_queue_setup(self.id, q, ntx, socket, std::ptr::null()) };
            ok("rte_eth_tx_queue_setup", ret).map_err(|e| {
                e.with_detail(format!("port {} queue {q}, {ntx} descriptors", self.id))
            })?;
        }
        Ok(())
    }

    /// Starts the port (`rte_eth_dev_start`).
    pub fn start(self) -> Result<()> {
        // SAFETY: valid port.
        ok("rte_eth_dev_start", unsafe {
            ffi::rte_eth_dev_start(self.id)
        })
    }

    /// Stops the port (`rte_eth_dev_stop`); RX/TX then return 0.
    pub fn stop(self) -> Result<()> {
        // SAFETY: valid port.
        ok("rte_eth_dev_stop", unsafe {
            ffi::rte_eth_dev_stop(self.id)
        })
    }

    /// Closes the port (`rte_eth_dev_close`), releasing its queues; stop it
    /// first. The id must not be used afterwards.
    pub fn close(self) -> Result<()> {
        // SAFETY: valid port.
        ok("rte_eth_dev_close", unsafe {
            ffi::rte_eth_dev_close(self.id)
        })
    }

    /// Enables or disables promiscuous mode.
    pub fn set_promiscuous(self, on: bool) -> Result<()> {
        if on {
            // SAFETY: valid port.
            ok("rte_eth_promiscuous_enable", unsafe {
                ffi::rte_eth_promiscuous_enable(self.id)
            })
        } else {
            // SAFETY: valid port.
            ok("rte_eth_promiscuous_disable", unsafe {
                ffi::rte_eth_promiscuous_disable(self.id)
            })
        }
    }

    /// The port's MAC address.
    pub fn mac_addr(self) -> Result<[u8; 6]> {
        let mut a = ffi::rte_ether_addr::default();
        // SAFETY: valid port; a is a valid out-pointer.
        ok("rte_eth_macaddr_get", unsafe {
            ffi::rte_eth_macaddr_get(self.id, &mut a)
        })?;
        Ok(a.addr_bytes)
    }

    /// Takes the link down (`rte_eth_dev_set_link_down`): a NIC drops its
    /// carrier; `net_af_packet` takes its kernel interface down, so a veth
    /// peer sees no carrier. Queues keep working, the peer stops sending.
    pub fn set_link_down(self) -> Result<()> {
        // SAFETY: valid port.
        ok("rte_eth_dev_set_link_down", unsafe { ffi::rte_eth_dev_set_link_down(self.id) })
    }

    /// Brings the link up again (`rte_eth_dev_set_link_up`).
    pub fn set_link_up(self) -> Result<()> {
        // SAFETY: valid port.
        ok("rte_eth_dev_set_link_up", unsafe { ffi::rte_eth_dev_set_link_up(self.id) })
    }

    /// Current link state, without waiting (`rte_eth_link_get_nowait`).
    pub fn link(self) -> Result<Link> {
        let mut l = ffi::rte_eth_link::default();
        // SAFETY: valid port; l is a valid out-pointer.
        ok("rte_eth_link_get_nowait", unsafe {
            ffi::rte_eth_link_get_nowait(self.id, &mut l)
        })?;
        Ok(Link {
            up: u32::from(l.link_status()) == ffi::RTE_ETH_LINK_UP,
            speed_mbps: l.link_speed,
            full_duplex: u32::from(l.link_duplex()) == ffi::RTE_ETH_LINK_FULL_DUPLEX,
        })
    }

    /// Basic counters (`rte_eth_stats_get`).
    pub fn stats(self) -> Result<PortStats> {
        let mut s = ffi::rte_eth_stats::default();
        // SAFETY: valid port; s is a valid out-pointer.
        ok("rte_eth_stats_get", unsafe {
            ffi::rte_eth_stats_get(self.id, &mut s)
        })?;
        Ok(PortStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// Zeroes the basic counters (`rte_eth_stats_reset`).
    pub fn reset_stats(self) -> Result<()> {
        // SAFETY: valid port.
        ok("rte_eth_stats_reset", unsafe {
            ffi::rte_eth_stats_reset(self.id)
        })
    }

    /// Receives up to `burst.free_slots()` packets from RX queue `queue`
    /// into the free tail of `burst`; returns how many arrived. 0 for a
    /// stopped port or a queue that was not set up.
    #[inline]
    pub fn rx_burst<const N: usize>(self, queue: u16, burst: &mut MbufBurst<N>) -> usize {
        let (tail, free) = burst.free_tail_raw();
        if free == 0 {
            return 0;
        }
        // SAFETY: valid port id; tail has `free` writable slots (free <= N <=
        // u16::MAX, enforced by MbufBurst::new); the shim checks the queue.
        // The caller polls this queue from one thread only (module doc).
        let n = unsafe { ffi::rte_shim_rx_burst(self.id, queue, tail, free as u16) };
        let n = usize::from(n).min(free);
        // SAFETY: the PMD wrote n owned, valid mbufs into those slots.
        unsafe { burst.commit_tail(n) };
        n
    }

    /// Transmits from the front of `burst` on TX queue `queue`; returns how
    /// many the PMD accepted. Those are no longer in the burst (the PMD
    /// frees them after sending); the unsent ones stay, moved to the
    /// front, to retry or [`MbufBurst::clear`].
    #[inline]
    pub fn tx_burst<const N: usize>(self, queue: u16, burst: &mut MbufBurst<N>) -> usize {
        let len = burst.len();
        if len == 0 {
            return 0;
        }
        let head = burst.head_raw();
        // SAFETY: valid port id; head points at len owned mbufs (len <= N <=
        // u16::MAX); the shim checks the queue. One thread per queue (module doc).
        let n = unsafe { ffi::rte_shim_tx_burst(self.id, queue, head, len as u16) };
        let n = usize::from(n).min(len);
        // SAFETY: the PMD took ownership of the first n mbufs.
        unsafe { burst.consume_front(n) };
        n
    }
}

impl std::fmt::Display for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "port{}", self.id)
    }
}
