//! The error type of every fallible call in this crate: which DPDK function
//! failed, with which errno (`rte_errno` or the negated return code), and
//! DPDK's text for it (`rte_strerror`). Off the packet path only: burst
//! calls return counts, never `Error`.

use std::ffi::CStr;
use std::fmt;

use crate::ffi;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failed DPDK call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    func: &'static str,
    errno: i32,
    detail: Option<Box<str>>,
}

impl Error {
    /// An error from `func` with a positive errno value (`libc` or
    /// DPDK's own `E_RTE_*` range).
    pub fn new(func: &'static str, errno: i32) -> Self {
        Error {
            func,
            errno: errno.wrapping_abs(),
            detail: None,
        }
    }

    /// From a negative DPDK return code (`-errno`).
    pub(crate) fn from_ret(func: &'static str, ret: i32) -> Self {
        Error::new(func, ret)
    }

    /// From the calling thread's `rte_errno`, for calls that signal failure
    /// with NULL or -1.
    pub(crate) fn from_rte_errno(func: &'static str) -> Self {
        Error::new(func, rte_errno())
    }

    /// Adds a human-readable detail (the argument that was rejected, ...).
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into().into_boxed_str());
        self
    }

    /// The DPDK function that failed (e.g. `"rte_eth_dev_configure"`).
    pub fn func(&self) -> &'static str {
        self.func
    }

    /// The positive errno value.
    pub fn errno(&self) -> i32 {
        self.errno
    }

    /// The detail given with [`Error::with_detail`], if any.
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }

    /// DPDK's description of the errno (`rte_strerror`), which covers both
    /// libc errnos and DPDK's `E_RTE_*` codes. Does not need EAL.
    pub fn message(&self) -> String {
        strerror(self.errno)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed: {} (errno {})",
            self.func,
            self.message(),
            self.errno
        )?;
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// `rte_strerror(errno)`, copied out of DPDK's per-thread buffer.
pub(crate) fn strerror(errno: i32) -> String {
    // SAFETY: rte_strerror accepts any int and returns a pointer to a
    // NUL-terminated string (a static or this thread's buffer) that stays
    // valid until the next call on this thread; it is copied before returning.
    // It needs no EAL state.
    unsafe {
        let p = ffi::rte_strerror(errno);
        if p.is_null() {
            return format!("unknown error {errno}");
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// The calling thread's `rte_errno`.
pub(crate) fn rte_errno() -> i32 {
    // SAFETY: the shim only reads a thread-local int.
    unsafe { ffi::rte_shim_errno() }
}

/// `Ok(ret)` for `ret >= 0`, else the error for `-ret`.
pub(crate) fn check(func: &'static str, ret: i32) -> Result<i32> {
    if ret < 0 {
        Err(Error::from_ret(func, ret))
    } else {
        Ok(ret)
    }
}

/// `Ok(())` for `ret >= 0`, else the error for `-ret`.
pub(crate) fn ok(func: &'static str, ret: i32) -> Result<()> {
    check(func, ret).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_function_errno_and_text() {
        let e = Error::new("rte_eth_dev_configure", 22);
        assert_eq!(e.func(), "rte_eth_dev_configure");
        assert_eq!(e.errno(), 22);
        assert_eq!(
            e.to_string(),
            "rte_eth_dev_configure failed: Invalid argument (errno 22)"
        );
    }

    #[test]
    fn negative_return_codes_become_positive_errno() {
        let e = Error::from_ret("rte_eth_dev_start", -19);
        assert_eq!(e.errno(), 19);
        assert_eq!(e.message(), "No such device");
    }

    #[test]
    fn detail_is_appended() {
        let e = Error::new("rte_eth_dev_get_port_by_name", 19).with_detail("port \"nope0\"");
        assert_eq!(e.detail(), Some("port \"nope0\""));
        assert_eq!(
            e.to_string(),
            "rte_eth_dev_get_port_by_name failed: No such device (errno 19): port \"nope0\""
        );
    }

    #[test]
    fn dpdk_specific_errnos_have_dpdk_text() {
        // E_RTE_NO_CONFIG: DPDK's own range above RTE_MIN_ERRNO.
        let e = Error::new("rte_eal_init", ffi::E_RTE_NO_CONFIG as i32);
        assert!(e.message().contains("config"), "{}", e.message());
    }

    #[test]
    fn is_std_error() {
        fn takes(_: &dyn std::error::Error) {}
        takes(&Error::new("x", 1));
    }
}
