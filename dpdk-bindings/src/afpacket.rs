//! Receive-ring drops of this process's `AF_PACKET` sockets — what DPDK
//! 22.11's `net_af_packet` driver never asks the kernel for.
//!
//! The driver maps a `TPACKET_V2` ring per queue; when the ring is full the
//! kernel drops the frame and counts it in the socket's `PACKET_STATISTICS`
//! (`tp_drops`). The driver never reads that counter (its `imissed` stays
//! 0), so a node on af_packet ports lost frames nobody saw: the flood test
//! bed's "one handshake packet lost, uncounted by the nodes". Reading it
//! needs the socket's descriptor, which the driver keeps to itself — but it
//! is this process's: [`ring_totals`] walks `/proc/self/fd`, keeps the
//! sockets of the `AF_PACKET` domain, asks each for its interface
//! (`getsockname`) and statistics (`getsockopt(SOL_PACKET,
//! PACKET_STATISTICS)`).
//!
//! Reading the statistics resets them in the kernel; this module adds
//! every reading to a process-wide total per interface index, so callers
//! get counters that only grow. Not for the packet path: a directory walk
//! and three system calls per socket, under a mutex.
//!
//! Invariants: only descriptors that are `AF_PACKET` sockets at the time
//! of the call are queried (a descriptor closed and reused meanwhile fails
//! the domain check or the calls, and is skipped); nothing here panics.

use std::collections::BTreeMap;
use std::os::raw::{c_int, c_void};
use std::sync::Mutex;

const SOL_SOCKET: c_int = 1;
const SO_DOMAIN: c_int = 39;
const AF_PACKET: c_int = 17;
const SOL_PACKET: c_int = 263;
const PACKET_STATISTICS: c_int = 6;

extern "C" {
    fn getsockopt(fd: c_int, level: c_int, name: c_int, value: *mut c_void, len: *mut u32) -> c_int;
    fn getsockname(fd: c_int, addr: *mut c_void, len: *mut u32) -> c_int;
}

/// `struct sockaddr_ll` (linux/if_packet.h).
#[repr(C)]
#[derive(Default)]
struct SockaddrLl {
    family: u16,
    protocol: u16,
    ifindex: i32,
    hatype: u16,
    pkttype: u8,
    halen: u8,
    addr: [u8; 8],
}

/// `struct tpacket_stats_v3` (the first two fields are `tpacket_stats`,
/// which a `TPACKET_V2` socket returns).
#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    packets: u32,
    drops: u32,
    freeze_q_cnt: u32,
}

/// Totals per interface index since the process started.
static TOTALS: Mutex<BTreeMap<i32, (u64, u64)>> = Mutex::new(BTreeMap::new());

/// One socket's interface and its statistics since the last reading, if
/// `fd` is an `AF_PACKET` socket bound to an interface.
fn read_socket(fd: c_int) -> Option<(i32, u64, u64)> {
    let mut domain: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as u32;
    // SAFETY: domain and len are valid out-pointers of the sizes given;
    // any fd value is accepted by the kernel (EBADF/ENOTSOCK otherwise).
    let r = unsafe { getsockopt(fd, SOL_SOCKET, SO_DOMAIN, (&mut domain as *mut c_int).cast(), &mut len) };
    if r != 0 || domain != AF_PACKET {
        return None;
    }
    let mut sa = SockaddrLl::default();
    let mut len = std::mem::size_of::<SockaddrLl>() as u32;
    // SAFETY: sa is a writable sockaddr_ll of `len` bytes; the kernel
    // writes at most `len` and updates it.
    let r = unsafe { getsockname(fd, (&mut sa as *mut SockaddrLl).cast(), &mut len) };
    if r != 0 || sa.ifindex <= 0 {
        return None;
    }
    let mut st = TpacketStats::default();
    let mut len = std::mem::size_of::<TpacketStats>() as u32;
    // SAFETY: st is a writable tpacket_stats_v3 of `len` bytes; the kernel
    // copies at most `len` (8 bytes for a TPACKET_V2 socket).
    let r = unsafe { getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, (&mut st as *mut TpacketStats).cast(), &mut len) };
    if r != 0 {
        return None;
    }
    Some((sa.ifindex, u64::from(st.packets), u64::from(st.drops)))
}

/// Frames received and frames dropped for a full ring, per interface
/// index, by every `AF_PACKET` socket of this process since it started
/// (the kernel counts `packets` with the drops included).
pub fn ring_totals() -> BTreeMap<i32, (u64, u64)> {
    let mut totals = match TOTALS.lock() {
        Ok(t) => t,
        Err(p) => p.into_inner(),
    };
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        for e in dir.flatten() {
            let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<c_int>().ok()) else { continue };
            let is_socket = std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"));
            if !is_socket {
                continue;
            }
            if let Some((ifindex, packets, drops)) = read_socket(fd) {
                let t = totals.entry(ifindex).or_insert((0, 0));
                t.0 = t.0.saturating_add(packets);
                t.1 = t.1.saturating_add(drops);
            }
        }
    }
    totals.clone()
}

/// The interface index of `ifname` (`/sys/class/net/<ifname>/ifindex`).
pub fn ifindex(ifname: &str) -> Option<i32> {
    if ifname.is_empty() || ifname.contains('/') {
        return None;
    }
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/ifindex")).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" {
        fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int;
        fn setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_void, len: u32) -> c_int;
        fn bind(fd: c_int, addr: *const c_void, len: u32) -> c_int;
        fn close(fd: c_int) -> c_int;
    }

    #[test]
    fn a_packet_socket_that_is_not_read_counts_its_drops() {
        // A raw packet socket on lo with a tiny receive buffer, never read:
        // the kernel drops what does not fit and counts it (tp_drops), as
        // it does for a full af_packet ring. Needs root (CAP_NET_RAW).
        const SOCK_RAW: c_int = 3;
        const SO_RCVBUF: c_int = 8;
        let eth_p_all = 0x0003u16.to_be() as c_int;
        // SAFETY: plain system calls on a descriptor this test owns.
        let fd = unsafe { socket(AF_PACKET, SOCK_RAW, eth_p_all) };
        if fd < 0 {
            eprintln!("skipped: no CAP_NET_RAW (not root)");
            return;
        }
        let lo = ifindex("lo").unwrap();
        let small: c_int = 1;
        let sa = SockaddrLl { family: AF_PACKET as u16, protocol: 0x0003u16.to_be(), ifindex: lo, ..SockaddrLl::default() };
        // SAFETY: valid pointers and lengths for this socket.
        unsafe {
            assert_eq!(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, (&small as *const c_int).cast(), 4), 0);
            assert_eq!(bind(fd, (&sa as *const SockaddrLl).cast(), std::mem::size_of::<SockaddrLl>() as u32), 0);
        }
        let before = ring_totals().get(&lo).copied().unwrap_or((0, 0));
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..2000 {
            let _ = tx.send_to(&[0u8; 1000], rx.local_addr().unwrap());
        }
        let after = ring_totals().get(&lo).copied().unwrap_or((0, 0));
        // SAFETY: the descriptor is this test's and not used after.
        unsafe { close(fd) };
        assert!(after.1 > before.1, "drops counted: {before:?} -> {after:?}");
        assert!(after.0 - before.0 >= after.1 - before.1, "packets include the drops");
        // Read again: the kernel's counters were reset, the totals kept.
        assert!(ring_totals().get(&lo).copied().unwrap_or((0, 0)).1 >= after.1);
    }

    #[test]
    fn not_a_packet_socket_is_skipped() {
        // stdin / a pipe / a UDP socket: none is AF_PACKET.
        assert!(read_socket(0).is_none());
        assert!(read_socket(-1).is_none());
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        use std::os::fd::AsRawFd;
        assert!(read_socket(u.as_raw_fd()).is_none());
        assert_eq!(ifindex("lo"), Some(1));
        assert_eq!(ifindex("../x"), None);
        // A process without packet sockets has no totals.
        assert!(ring_totals().values().all(|t| t.0 >= t.1));
    }
}
