//! The Environment Abstraction Layer: process-wide init/cleanup, lcores
//! (DPDK's pinned worker threads), launching work on them, and the TSC.
//!
//! Invariants:
//! - [`init`] runs `rte_eal_init` at most once per process, successful or
//!   not (DPDK cannot be re-initialised, not even after cleanup).
//! - The returned [`Eal`] guard calls `rte_eal_cleanup` on drop, after
//!   waiting for all workers. It is neither `Send` nor `Sync`: it stays on
//!   the main lcore, the thread that called [`init`].
//! - [`launch`] hands a boxed closure to a worker lcore through a C
//!   trampoline; the box is freed exactly once, by the trampoline after the
//!   closure ran, or by [`launch`] if DPDK refused it. Launches are
//!   serialised by a lock because `rte_eal_remote_launch` is not safe to
//!   call concurrently for the same worker.
//!
//! Virtual devices are created with EAL arguments, e.g.
//! `--vdev net_ring0`, `--vdev net_null0`, `--vdev net_af_packet0,iface=eth0`,
//! `--vdev net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap`; their port names
//! (for [`crate::Port::by_name`]) are the devargs up to the first comma.
//! On Debian the PMD shared objects are loaded by EAL from its plugin
//! directory (`/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0`); `-d <path>` adds
//! more. See also [`crate::dev::probe`] for hot-plugging after init.

use std::ffi::{c_int, c_void, CString};
use std::marker::PhantomData;
use std::os::raw::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::ffi;

/// Set once `rte_eal_init` has been attempted; never cleared.
static INIT_ATTEMPTED: AtomicBool = AtomicBool::new(false);
/// True between a successful `rte_eal_init` and `rte_eal_cleanup`.
static READY: AtomicBool = AtomicBool::new(false);
/// Serialises `rte_eal_remote_launch`.
static LAUNCH_LOCK: Mutex<()> = Mutex::new(());

/// What a launched closure's lcore reports if the closure panicked.
pub const LAUNCH_PANICKED: i32 = -1000;

/// Guard for an initialised EAL. Dropping it waits for all worker lcores
/// and calls `rte_eal_cleanup`; drop every [`crate::Mempool`],
/// [`crate::Mbuf`] and port use before that.
#[derive(Debug)]
pub struct Eal {
    /// Not `Send`/`Sync`: cleanup must run on the main lcore.
    _main_lcore_only: PhantomData<*mut ()>,
}

/// Initialises DPDK's EAL with command-line style arguments; `args[0]` is
/// the program name, e.g.
/// `["clusterfw", "--no-huge", "-m", "256", "--no-pci", "--file-prefix", "x",
/// "--vdev", "net_ring0", "-l", "0,1"]`.
///
/// The calling thread becomes the main lcore. Fails with `EALREADY` on a
/// second call in the same process, whether or not the first succeeded.
/// The argument strings are leaked on purpose: EAL may keep pointers into
/// `argv` for the life of the process.
pub fn init<S: AsRef<str>>(args: &[S]) -> Result<Eal> {
    let cargs = args
        .iter()
        .map(|a| {
            CString::new(a.as_ref()).map_err(|_| {
                Error::new("rte_eal_init", libc_einval())
                    .with_detail(format!("argument {:?} contains a NUL byte", a.as_ref()))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if cargs.is_empty() {
        return Err(
            Error::new("rte_eal_init", libc_einval()).with_detail("args[0] (program name) missing")
        );
    }
    if INIT_ATTEMPTED.swap(true, Ordering::SeqCst) {
        return Err(Error::new("rte_eal_init", EALREADY)
            .with_detail("EAL can be initialised only once per process"));
    }
    let mut argv: Vec<*mut c_char> = cargs.into_iter().map(CString::into_raw).collect();
    argv.push(std::ptr::null_mut());
    let argv: &'static mut [*mut c_char] = argv.leak();
    let argc = c_int::try_from(argv.len() - 1)
        .map_err(|_| Error::new("rte_eal_init", libc_einval()).with_detail("too many arguments"))?;
    // SAFETY: argv is a NULL-terminated array of argc valid, NUL-terminated,
    // leaked (hence 'static and mutable, as getopt wants) strings; the
    // INIT_ATTEMPTED swap above guarantees this is the only call.
    let ret = unsafe { ffi::rte_eal_init(argc, argv.as_mut_ptr()) };
    if ret < 0 {
        return Err(Error::from_rte_errno("rte_eal_init").with_detail(args_text(args)));
    }
    READY.store(true, Ordering::SeqCst);
    Ok(Eal {
        _main_lcore_only: PhantomData,
    })
}

fn args_text<S: AsRef<str>>(args: &[S]) -> String {
    let v: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    format!("args {v:?}")
}

const EALREADY: i32 = 114;
const fn libc_einval() -> i32 {
    22
}
const ENODEV: i32 = 19;

/// Whether EAL is initialised and not yet cleaned up.
pub fn is_initialized() -> bool {
    READY.load(Ordering::SeqCst)
}

/// `Err(ENODEV)` naming `func` unless EAL is up; guards every constructor
/// that would otherwise dereference EAL's not-yet-mapped shared state.
pub(crate) fn require(func: &'static str) -> Result<()> {
    if is_initialized() {
        Ok(())
    } else {
        Err(Error::new(func, ENODEV).with_detail("EAL is not initialised (call eal::init first)"))
    }
}

impl Drop for Eal {
    fn drop(&mut self) {
        // SAFETY: EAL is initialised (an Eal exists only after a successful
        // init) and this is the main lcore (Eal is !Send). Waiting first
        // means no launched closure still runs when memory is released.
        unsafe { ffi::rte_eal_mp_wait_lcore() };
        READY.store(false, Ordering::SeqCst);
        // SAFETY: as above; called once, since Eal is created once.
        let ret = unsafe { ffi::rte_eal_cleanup() };
        if ret < 0 {
            eprintln!("{}", Error::from_ret("rte_eal_cleanup", ret));
        }
    }
}

/// The calling thread's lcore id, or [`LCORE_ID_ANY`] for a thread that is
/// not an EAL lcore.
pub fn lcore_id() -> u32 {
    // SAFETY: reads a thread-local variable; valid before and after init.
    unsafe { ffi::rte_lcore_id() }
}

/// Lcore id of non-EAL threads.
pub const LCORE_ID_ANY: u32 = ffi::LCORE_ID_ANY;
/// Upper bound (exclusive) on lcore ids.
pub const MAX_LCORE: u32 = ffi::RTE_MAX_LCORE;

/// The main lcore's id (the thread that called [`init`]).
pub fn main_lcore() -> u32 {
    // SAFETY: reads a field of EAL's static config; 0 before init.
    unsafe { ffi::rte_get_main_lcore() }
}

/// Ids of the enabled worker lcores (every `-l` lcore except the main one),
/// ascending; empty before [`init`].
pub fn worker_lcores() -> Vec<u32> {
    let mut out = Vec::new();
    if !is_initialized() {
        // EAL's zeroed lcore table reads as "all enabled" before init.
        return out;
    }
    let mut i = u32::MAX; // "-1": rte_get_next_lcore starts at i + 1.
    loop {
        // SAFETY: rte_get_next_lcore only reads EAL's static lcore table and
        // bounds-checks i against RTE_MAX_LCORE.
        i = unsafe { ffi::rte_get_next_lcore(i, 1, 0) };
        if i >= MAX_LCORE {
            return out;
        }
        out.push(i);
    }
}

/// Number of enabled lcores, main included.
pub fn lcore_count() -> u32 {
    // SAFETY: reads EAL's static config.
    unsafe { ffi::rte_lcore_count() }
}

/// NUMA socket of the calling lcore (`SOCKET_ID_ANY`, -1, off-lcore).
pub fn socket_id() -> i32 {
    // SAFETY: reads a thread-local variable.
    let s = unsafe { ffi::rte_socket_id() };
    i32::try_from(s).unwrap_or(ffi::SOCKET_ID_ANY)
}

type LaunchFn = Box<dyn FnOnce() -> i32 + Send + 'static>;

unsafe extern "C" fn trampoline(arg: *mut c_void) -> c_int {
    // SAFETY: arg is the Box<LaunchFn> leaked by `launch`, and DPDK calls
    // the lcore function exactly once per successful remote launch.
    let f: Box<LaunchFn> = unsafe { Box::from_raw(arg.cast::<LaunchFn>()) };
    // Unwinding into C is undefined; report the panic as a return code.
    match catch_unwind(AssertUnwindSafe(move || (*f)())) {
        Ok(v) => v,
        Err(_) => LAUNCH_PANICKED,
    }
}

/// Runs `f` on worker lcore `lcore` (`rte_eal_remote_launch`); its return
/// value is collected with [`wait_lcore`]. A panic in `f` is caught and
/// reported as [`LAUNCH_PANICKED`]. Fails with `EINVAL` for an lcore that
/// is not an enabled worker and `EBUSY` if the worker is still running.
/// Call it from the main lcore.
pub fn launch<F>(lcore: u32, f: F) -> Result<()>
where
    F: FnOnce() -> i32 + Send + 'static,
{
    require("rte_eal_remote_launch")?;
    if lcore == main_lcore() || !worker_lcores().contains(&lcore) {
        return Err(Error::new("rte_eal_remote_launch", libc_einval())
            .with_detail(format!("lcore {lcore} is not an enabled worker lcore")));
    }
    let boxed: Box<LaunchFn> = Box::new(Box::new(f));
    let arg = Box::into_raw(boxed).cast::<c_void>();
    let _serial = LAUNCH_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: EAL is up and lcore is an enabled worker (checked above);
    // the lock keeps launches from racing on one worker; the trampoline
    // matches lcore_function_t and takes ownership of arg if the launch
    // succeeds.
    let ret = unsafe { ffi::rte_eal_remote_launch(Some(trampoline), arg, lcore) };
    if ret < 0 {
        // SAFETY: the launch failed, so DPDK did not take arg; reclaim it.
        drop(unsafe { Box::from_raw(arg.cast::<LaunchFn>()) });
        return Err(
            Error::from_ret("rte_eal_remote_launch", ret).with_detail(format!("lcore {lcore}"))
        );
    }
    Ok(())
}

/// Waits for worker `lcore` to finish what [`launch`] gave it and returns
/// the closure's value; returns 0 at once if nothing was launched or
/// `lcore` is not a worker.
pub fn wait_lcore(lcore: u32) -> i32 {
    if !is_initialized() || lcore == main_lcore() || !worker_lcores().contains(&lcore) {
        return 0;
    }
    // SAFETY: lcore is an enabled worker (so within lcore_config's bounds)
    // and EAL is up.
    unsafe { ffi::rte_eal_wait_lcore(lcore) }
}

/// Waits for all worker lcores (`rte_eal_mp_wait_lcore`).
pub fn wait_all() {
    if is_initialized() {
        // SAFETY: EAL is up; only reads lcore states and blocks.
        unsafe { ffi::rte_eal_mp_wait_lcore() };
    }
}

/// TSC ticks per second (calibrated by EAL; 0 before init).
pub fn tsc_hz() -> u64 {
    // SAFETY: reads a calibrated value from EAL's static state.
    unsafe { ffi::rte_get_tsc_hz() }
}

/// The CPU's time-stamp counter (`rte_rdtsc`).
#[inline]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86_64 CPU and has no memory effects.
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // SAFETY: reads the cycle counter; no memory effects.
        unsafe { ffi::rte_rdtsc() }
    }
}

mod sched {
    /// `struct sched_param` (Linux: one int).
    #[repr(C)]
    pub struct Param {
        pub sched_priority: i32,
    }
    extern "C" {
        pub fn setpriority(which: i32, who: u32, prio: i32) -> i32;
        pub fn getpriority(which: i32, who: u32) -> i32;
        pub fn gettid() -> i32;
        pub fn sched_setscheduler(pid: i32, policy: i32, param: *const Param) -> i32;
    }
    /// `PRIO_PROCESS`: with a thread id, Linux applies it to that thread.
    pub const PRIO_PROCESS: i32 = 0;
    pub const SCHED_RR: i32 = 2;
    /// Threads the caller creates afterwards start as ordinary ones.
    pub const SCHED_RESET_ON_FORK: i32 = 0x4000_0000;
}

/// Puts the calling thread in the real-time round-robin class at
/// `priority` (1-99): it runs ahead of every ordinary thread, whatever
/// their nice values or session groups (`sched_setscheduler(0, SCHED_RR)`:
/// pid 0 is the calling thread); threads it creates afterwards are
/// ordinary (`SCHED_RESET_ON_FORK`). Needs `CAP_SYS_NICE` and an
/// `RLIMIT_RTPRIO` or root; a thread that never sleeps would take its core (the kernel's
/// real-time throttling leaves others 5 %).
pub fn set_thread_realtime(priority: i32) -> std::io::Result<()> {
    let p = sched::Param { sched_priority: priority };
    // SAFETY: `p` lives across the call, which only reads it.
    let r = unsafe { sched::sched_setscheduler(0, sched::SCHED_RR | sched::SCHED_RESET_ON_FORK, &p) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Sets the calling thread's nice value (`setpriority(PRIO_PROCESS, gettid(),
/// nice)`; on Linux it applies to this thread only, and threads it creates
/// afterwards inherit it). Below 0 needs `CAP_SYS_NICE` (root).
pub fn set_thread_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: gettid has no preconditions; setpriority takes plain integers
    // and touches no memory of ours.
    let r = unsafe { sched::setpriority(sched::PRIO_PROCESS, sched::gettid() as u32, nice) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The calling thread's nice value.
pub fn thread_nice() -> i32 {
    // SAFETY: as in set_thread_nice. getpriority's -1 is also a valid
    // value; errno is not checked: for the calling thread it cannot fail.
    unsafe { sched::getpriority(sched::PRIO_PROCESS, sched::gettid() as u32) }
}
