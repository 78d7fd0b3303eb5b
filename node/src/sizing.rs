//! How large the node's frames can be, and what that asks of DPDK (issue
//! 11): the mbuf data room, and the af_packet PMD's ring frames.
//!
//! The packet path works on one contiguous frame per mbuf (the wire views
//! read headers in place; af_packet's RX copies a frame into a single
//! mbuf), so jumbo frames get larger mbufs rather than chains: the data
//! room holds the largest frame any port can hand over.
//!
//! af_packet: DPDK's PMD joins its fanout group with
//! `PACKET_FANOUT_FLAG_DEFRAG`, so the kernel hands it reassembled
//! datagrams, larger than any link's MTU; a ring frame (`framesz`, 2 KiB by
//! default) truncates them. Unless the device string says otherwise the
//! node gives every af_packet port `AF_PACKET_FRAME`-byte ring frames
//! (`framesz`, and `blocksz` to hold one), so datagrams the kernel
//! reassembled up to about 16 KB arrive whole (the packet path splits them
//! back into fragments, docs/fragments.md); larger ones arrive truncated
//! and are dropped as `ipv4-bad-total-length`.
//!
//! Invariant: the data room is at least every port's largest frame, and at
//! most what an mbuf can describe (`u16`).

use config::Config;

/// Ring frame size the node gives af_packet ports that do not set
/// `framesz` (bytes, header included).
pub const AF_PACKET_FRAME: u32 = 16 << 10;
/// Bytes of an af_packet ring frame before the packet (`TPACKET2_HDRLEN` −
/// `sizeof(sockaddr_ll)`: the PMD's own accounting).
const AF_PACKET_FRAME_HEADER: u32 = 32;
/// Ethernet header and one VLAN tag.
const L2_MAX: u32 = 18;
/// `RTE_PKTMBUF_HEADROOM`.
pub const MBUF_HEADROOM: u32 = 128;

/// Whether `device` is an af_packet vdev.
pub fn is_af_packet(device: &str) -> bool {
    device.starts_with("net_af_packet") || device.starts_with("eth_af_packet")
}

/// The value of `key=` in a device string's arguments.
pub fn arg<'a>(device: &'a str, key: &str) -> Option<&'a str> {
    device.split(',').skip(1).find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// `device` as given to EAL: an af_packet device without `framesz` gets
/// `AF_PACKET_FRAME`-byte frames (and blocks of at least that), and one
/// without `qpairs` `queues` queue pairs when that is more than one (a data
/// port: one per worker; the CCL: one per worker and the control lcore's).
pub fn vdev_arg(device: &str, queues: u16) -> String {
    if !is_af_packet(device) {
        return device.to_string();
    }
    let mut d = device.to_string();
    if arg(device, "framesz").is_none() {
        d.push_str(&format!(",framesz={AF_PACKET_FRAME}"));
        if arg(device, "blocksz").is_none() {
            d.push_str(&format!(",blocksz={AF_PACKET_FRAME}"));
        }
    }
    if queues > 1 && arg(device, "qpairs").is_none() {
        d.push_str(&format!(",qpairs={queues}"));
    }
    d
}

/// The largest frame `device` can hand over with MTU `mtu`.
fn largest_frame(device: &str, mtu: u16) -> u32 {
    let by_mtu = u32::from(mtu) + L2_MAX;
    if !is_af_packet(device) {
        return by_mtu;
    }
    let frame = arg(&vdev_arg(device, 1), "framesz").and_then(|v| v.parse::<u32>().ok()).unwrap_or(AF_PACKET_FRAME);
    by_mtu.max(frame.saturating_sub(AF_PACKET_FRAME_HEADER))
}

/// The mbuf data room (headroom included) for `cfg`'s ports: every data
/// interface at its MTU, the CCL at its; at least 2048 + headroom.
pub fn mbuf_data_room(cfg: &Config) -> Result<u16, String> {
    let data = cfg.interfaces.iter().map(|i| largest_frame(&i.device, i.mtu));
    let ccl = cfg.cluster.iter().map(|c| largest_frame(&c.ccl.device, c.ccl.mtu));
    let frame = data.chain(ccl).max().unwrap_or(0).max(2048);
    let room = frame + MBUF_HEADROOM;
    u16::try_from(room).map_err(|_| {
        format!("frames of {frame} bytes do not fit an mbuf (at most {} bytes): lower framesz or the MTU", u16::MAX as u32 - MBUF_HEADROOM)
    })
}

/// Mbufs that can be held at once: every data port's RX and TX
/// descriptors for every worker; in cluster mode the CCL port's (a queue
/// pair per worker and the control lcore's) and its hand-off queues
/// between the control lcore and the workers (`ccl::HANDOFF_CAPACITY`
/// each way, and `ccl::TX_VIA_WORKER_CAPACITY` frames the control lcore
/// sends through a worker);
/// with several workers their steering rings (`steer_ring` slots each)
/// and fragment hand-off queues (`shared::HANDOFF_RING`); and the pool's
/// per-lcore caches (256 each). An af_packet port's descriptors hold no
/// mbufs: its driver copies each frame out of (into) the kernel's ring
/// into a new mbuf (and frees the mbuf it sent).
pub fn mbufs_wanted(cfg: &Config, steer_ring: u64) -> u64 {
    let workers = u64::from(cfg.dpdk.workers.max(1));
    let mut devices: Vec<&str> = cfg.interfaces.iter().map(|i| i.device.as_str()).collect();
    devices.sort_unstable();
    devices.dedup();
    let per_queue = |device: &str| {
        if is_af_packet(device) {
            0
        } else {
            u64::from(cfg.dpdk.rx_descriptors) + u64::from(cfg.dpdk.tx_descriptors)
        }
    };
    let data: u64 = devices.iter().map(|d| workers * per_queue(d)).sum();
    let rings = if workers > 1 { workers * (steer_ring + crate::shared::HANDOFF_RING as u64) } else { 0 };
    let ccl = match &cfg.cluster {
        Some(c) => {
            (workers + 1) * per_queue(&c.ccl.device)
                + 2 * crate::ccl::HANDOFF_CAPACITY as u64
                + crate::ccl::TX_VIA_WORKER_CAPACITY as u64
        }
        None => 0,
    };
    data + ccl + rings + (workers + 1) * 256
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn af_packet_devices_get_large_frames_unless_they_say() {
        assert_eq!(vdev_arg("net_af_packet0,iface=n1-in", 1), "net_af_packet0,iface=n1-in,framesz=16384,blocksz=16384");
        assert_eq!(vdev_arg("net_af_packet0,iface=x,framesz=4096", 1), "net_af_packet0,iface=x,framesz=4096");
        assert_eq!(vdev_arg("net_af_packet0,iface=x,blocksz=65536", 1), "net_af_packet0,iface=x,blocksz=65536,framesz=16384");
        assert_eq!(vdev_arg("net_pcap0,iface=x", 2), "net_pcap0,iface=x");
        assert_eq!(vdev_arg("0000:03:00.0", 2), "0000:03:00.0");
        assert_eq!(vdev_arg("net_af_packet0,iface=x,framesz=4096", 2), "net_af_packet0,iface=x,framesz=4096,qpairs=2");
        assert_eq!(vdev_arg("net_af_packet0,iface=x,framesz=4096,qpairs=4", 2), "net_af_packet0,iface=x,framesz=4096,qpairs=4");
    }

    /// `cfg` on NICs: every data interface on its own PCI device, the
    /// CCL on another (descriptors that hold mbufs).
    fn on_nics(mut cfg: Config) -> Config {
        for (k, i) in cfg.interfaces.iter_mut().enumerate() {
            i.device = format!("0000:0{k}:00.0");
        }
        if let Some(c) = &mut cfg.cluster {
            c.ccl.device = "0000:09:00.0".into();
        }
        cfg
    }

    #[test]
    fn mbufs_wanted_counts_queues_rings_and_caches() {
        let base = include_str!("../../config/examples/node.yaml");
        let one = on_nics(config::parse(base, "n.yaml").unwrap());
        let ports = one.interfaces.len() as u64;
        let per_queue = u64::from(one.dpdk.rx_descriptors) + u64::from(one.dpdk.tx_descriptors);
        // One worker: no steering ring, the worker's and the control lcore's caches.
        assert_eq!(mbufs_wanted(&one, 4096), ports * per_queue + 2 * 256);
        let two = on_nics(config::parse(&base.replace("  burst: 32\n", "  burst: 32\n  workers: 2\n"), "n.yaml").unwrap());
        assert_eq!(two.dpdk.workers, 2);
        // Two workers: queues per worker, a steering ring and a fragment
        // hand-off queue each, three caches.
        assert_eq!(mbufs_wanted(&two, 4096), 2 * ports * per_queue + 2 * (4096 + 1024) + 3 * 256);
        assert!(mbufs_wanted(&two, 4096) > u64::from(two.dpdk.mbufs), "the example's pool is too small for two workers: the node warns");
        // On af_packet (the example's devices) the descriptors hold none.
        let afp = config::parse(base, "n.yaml").unwrap();
        assert!(afp.interfaces.iter().all(|i| is_af_packet(&i.device)));
        assert_eq!(mbufs_wanted(&afp, 4096), 2 * 256);
    }

    #[test]
    fn mbufs_wanted_counts_the_ccl_port_and_its_hand_off() {
        let afp = config::parse(include_str!("../../config/examples/cluster-node.yaml"), "n.yaml").unwrap();
        let cfg = on_nics(afp.clone());
        let mut plain = cfg.clone();
        plain.cluster = None;
        let per_queue = u64::from(cfg.dpdk.rx_descriptors) + u64::from(cfg.dpdk.tx_descriptors);
        let workers = u64::from(cfg.dpdk.workers.max(1));
        // The CCL's queue pairs (each worker's and the control lcore's),
        // both hand-off queues and the frames sent through a worker.
        assert_eq!(mbufs_wanted(&cfg, 4096) - mbufs_wanted(&plain, 4096), (workers + 1) * per_queue + 2 * 2048 + 64);
        // All on af_packet (the example, the test bed): the hand-off only.
        assert_eq!(mbufs_wanted(&afp, 4096), 2 * 2048 + 64 + (workers + 1) * 256);
    }

    #[test]
    fn the_data_room_holds_the_largest_frame() {
        let base = include_str!("../../config/examples/cluster-node.yaml");
        let cfg = config::parse(base, "n.yaml").unwrap();
        // af_packet everywhere: 16 KiB ring frames.
        assert_eq!(mbuf_data_room(&cfg), Ok((16384 - 32 + 128) as u16));
        // PCI ports: the MTU decides; 2 KiB at least.
        let pci = base.replace("\"net_af_packet0,iface=n1-in,framecnt=2048\"", "\"0000:03:00.0\"")
            .replace("\"net_af_packet1,iface=n1-out,framecnt=2048\"", "\"0000:03:00.1\"")
            .replace("\"net_af_packet2,iface=n1-ccl,framecnt=2048,qpairs=2\"", "\"0000:04:00.0\"");
        let cfg = config::parse(&pci, "n.yaml").unwrap();
        assert_eq!(mbuf_data_room(&cfg), Ok(2048 + 128));
        let jumbo = pci.replace("    security-level: 0\n", "    security-level: 0\n    mtu: 9000\n");
        let cfg = config::parse(&jumbo, "n.yaml").unwrap();
        assert_eq!(mbuf_data_room(&cfg), Ok((9096 + 18 + 128) as u16), "the CCL's 9096 + L2");
        let huge = base.replace("framecnt=2048\"", "framecnt=64,framesz=65536,blocksz=65536\"");
        let cfg = config::parse(&huge, "n.yaml").unwrap();
        assert!(mbuf_data_room(&cfg).unwrap_err().contains("do not fit an mbuf"));
    }
}
