//! The driver's clock: monotonic nanoseconds since start, as the sans-IO
//! core's `Timestamp`.

use dataplane::Timestamp;
use std::time::Instant;

#[derive(Copy, Clone)]
pub struct Clock {
    origin: Instant,
}

impl Clock {
    pub fn new() -> Clock {
        Clock { origin: Instant::now() }
    }
    pub fn now(&self) -> Timestamp {
        Timestamp(self.origin.elapsed().as_nanos() as u64)
    }

    /// The Unix time, ns, of this clock's origin (`Pipeline::set_wall_clock`).
    pub fn origin_unix_ns(&self) -> u64 {
        unix_ns().saturating_sub(self.now().0)
    }
}

/// Nanoseconds since the Unix epoch (0 if the system clock is before it).
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}
