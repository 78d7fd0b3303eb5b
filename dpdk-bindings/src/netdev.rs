//! A kernel interface's state asked without the kernel's RTNL lock.
//!
//! The node watches the carrier of the kernel interfaces behind its
//! af_packet ports from its control lcore, between heartbeats. Reading
//! `/sys/class/net/<if>/carrier` takes RTNL in the kernel (with a trylock
//! that restarts the read while another task holds it), so the read waits
//! for whoever holds RTNL: an `ip link`, a namespace or veth torn down, a
//! route change — hundreds of milliseconds on a busy host, longer than a
//! hold time. `SIOCGIFFLAGS` reads the flags under RCU and never waits.
//!
//! The flags' `IFF_RUNNING` is the operational state, which the kernel
//! updates from the carrier through its link watcher: at once for a veth
//! (its events are urgent), within a second for a NIC's.
//!
//! Invariant: nothing here blocks or panics; an interface that is gone or
//! a name that is not one reads as not up.

use std::os::raw::{c_int, c_ulong};

const AF_INET: c_int = 2;
const SOCK_DGRAM: c_int = 2;
const SOCK_CLOEXEC: c_int = 0o2_000_000;
const SIOCGIFFLAGS: c_ulong = 0x8913;
const IFNAMSIZ: usize = 16;
/// Administratively up.
const IFF_UP: i16 = 0x1;
/// Operationally up: for a veth or a NIC, up with a carrier.
const IFF_RUNNING: i16 = 0x40;

extern "C" {
    fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int;
    fn ioctl(fd: c_int, request: c_ulong, ...) -> c_int;
    fn close(fd: c_int) -> c_int;
}

/// `struct ifreq` as `SIOCGIFFLAGS` uses it: the name, then the flags in
/// a union of 24 bytes.
#[repr(C)]
struct IfreqFlags {
    name: [u8; IFNAMSIZ],
    flags: i16,
    _pad: [u8; 22],
}

/// True when kernel interface `ifname` (in this process's network
/// namespace) is up with a carrier.
pub fn oper_up(ifname: &str) -> bool {
    let bytes = ifname.as_bytes();
    if bytes.is_empty() || bytes.len() >= IFNAMSIZ || bytes.contains(&0) {
        return false;
    }
    let mut req = IfreqFlags { name: [0; IFNAMSIZ], flags: 0, _pad: [0; 22] };
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: a plain system call; the descriptor is closed below.
    let fd = unsafe { socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: `req` is a valid, NUL-terminated `struct ifreq` that the
    // kernel fills in; it outlives the call.
    let r = unsafe { ioctl(fd, SIOCGIFFLAGS, &mut req as *mut IfreqFlags) };
    // SAFETY: `fd` is ours and closed once.
    unsafe { close(fd) };
    r == 0 && req.flags & IFF_UP != 0 && req.flags & IFF_RUNNING != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_up_and_a_missing_interface_is_not() {
        assert_eq!(std::mem::size_of::<IfreqFlags>(), 40, "struct ifreq");
        assert!(oper_up("lo"));
        assert!(!oper_up("cfw-no-such-if"));
        assert!(!oper_up(""));
        assert!(!oper_up("a-name-far-too-long-for-linux"));
        assert!(!oper_up("lo\0x"));
    }

    /// A veth pair made here (needs root; removed by name on every exit).
    struct Veth;
    impl Drop for Veth {
        fn drop(&mut self) {
            let _ = ip(&["link", "del", "cfwnd-a"]);
        }
    }
    fn ip(args: &[&str]) -> bool {
        std::process::Command::new("ip").args(args).status().is_ok_and(|s| s.success())
    }

    #[test]
    fn a_veth_is_running_only_while_its_peer_is_up() {
        let _ = ip(&["link", "del", "cfwnd-a"]);
        if !ip(&["link", "add", "cfwnd-a", "type", "veth", "peer", "name", "cfwnd-b"]) {
            eprintln!("skipped: cannot make a veth pair (not root)");
            return;
        }
        let _guard = Veth;
        let settled = |want: bool| (0..200).any(|_| oper_up("cfwnd-a") == want || { std::thread::sleep(std::time::Duration::from_millis(10)); false });
        assert!(!oper_up("cfwnd-a"), "down");
        assert!(ip(&["link", "set", "cfwnd-a", "up"]));
        assert!(settled(false) && !oper_up("cfwnd-a"), "up, but its peer down: no carrier");
        assert!(ip(&["link", "set", "cfwnd-b", "up"]));
        assert!(settled(true), "both up: running");
        assert!(ip(&["link", "set", "cfwnd-b", "down"]));
        assert!(settled(false), "the peer down again: carrier lost");
    }
}
