//! Latency histogram: log-linear buckets (HdrHistogram's idea, fixed size).
//!
//! Values are nanoseconds. Bucket index = (exponent, 16 sub-buckets), so
//! every recorded value lands in a bucket whose width is at most 1/16 of its
//! lower bound: a percentile is reported to within 6.25 %, always as the
//! bucket's upper bound (a reported p99 is never below the true p99). Values
//! below 16 ns are exact. Recording is two shifts and an increment; the
//! histogram is a fixed array (no allocation after construction), so the
//! generator's poll loop can record every timestamped packet.

/// Sub-buckets per power of two (precision 1/16).
const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// Powers of two covered: up to 2^(EXPS+SUB_BITS-1) ns, far beyond any run.
const EXPS: usize = 60;

/// Fixed-size log-linear histogram of nanosecond values.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64; SUB * EXPS]>,
    total: u64,
    min: u64,
    max: u64,
    sum: u128,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.total)
            .field("min", &self.min())
            .field("max", &self.max)
            .finish()
    }
}

fn index(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    // Position of the highest set bit, >= SUB_BITS here.
    let msb = 63 - v.leading_zeros();
    let exp = (msb - SUB_BITS + 1) as usize;
    let sub = ((v >> (msb - SUB_BITS)) as usize) & (SUB - 1);
    let i = exp * SUB + sub;
    i.min(SUB * EXPS - 1)
}

/// Largest value that lands in bucket `i` (inclusive).
fn upper_bound(i: usize) -> u64 {
    let exp = i / SUB;
    let sub = (i % SUB) as u64;
    if exp == 0 {
        return sub;
    }
    let shift = (exp - 1) as u32;
    // Bucket covers [(SUB + sub) << shift, (SUB + sub + 1) << shift).
    ((SUB as u64 + sub + 1) << shift) - 1
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Histogram {
            counts: Box::new([0; SUB * EXPS]),
            total: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
        }
    }

    /// Records one value.
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.counts[index(v)] += 1;
        self.total += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += u128::from(v);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Smallest value recorded (0 when empty).
    pub fn min(&self) -> u64 {
        if self.total == 0 {
            0
        } else {
            self.min
        }
    }

    /// Largest value recorded (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Mean of the recorded values (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    /// The value at quantile `q` (0.0..=1.0): the upper bound of the bucket
    /// holding the ceil(q * count)-th smallest value, clamped to the real
    /// max. 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return upper_bound(i).min(self.max).max(self.min());
            }
        }
        self.max
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_reports_zero() {
        let h = Histogram::new();
        assert_eq!((h.count(), h.quantile(0.5), h.min(), h.max()), (0, 0, 0, 0));
        assert_eq!(h.mean(), 0.0);
    }

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::new();
        for v in 0..16 {
            h.record(v);
        }
        assert_eq!(h.quantile(0.0), 0);
        assert_eq!(h.quantile(0.5), 7);
        assert_eq!(h.quantile(1.0), 15);
    }

    #[test]
    fn every_value_is_within_its_bucket_and_precision() {
        for v in (0u64..5000).chain([1 << 20, (1 << 33) + 12345, u64::MAX >> 8]) {
            let i = index(v);
            let ub = upper_bound(i);
            assert!(ub >= v, "v {v} bucket {i} ub {ub}");
            if i > 0 {
                assert!(upper_bound(i - 1) < v, "v {v} also fits bucket {}", i - 1);
            }
            // Width at most 1/16 of the value.
            assert!((ub - v) as f64 <= v as f64 / 16.0 + 1.0, "v {v} ub {ub}");
        }
    }

    #[test]
    fn percentiles_of_a_uniform_range() {
        let mut h = Histogram::new();
        for v in 1..=100_000u64 {
            h.record(v);
        }
        let within = |got: u64, want: u64| {
            assert!(
                got >= want && (got - want) as f64 <= want as f64 / 16.0,
                "got {got}, want ~{want}"
            )
        };
        within(h.quantile(0.5), 50_000);
        within(h.quantile(0.99), 99_000);
        within(h.quantile(0.999), 99_900);
        assert_eq!(h.quantile(1.0), 100_000);
        assert_eq!(h.min(), 1);
        assert!((h.mean() - 50_000.5).abs() < 1e-6);
    }

    #[test]
    fn a_tail_shows_in_p999_not_p50() {
        let mut h = Histogram::new();
        for _ in 0..9_990 {
            h.record(1_000);
        }
        for _ in 0..10 {
            h.record(1_000_000);
        }
        assert!(h.quantile(0.5) < 1_100);
        assert!(h.quantile(0.99) < 1_100);
        assert!(h.quantile(0.9995) >= 1_000_000);
    }

    #[test]
    fn merge_adds_counts() {
        let (mut a, mut b) = (Histogram::new(), Histogram::new());
        a.record(10);
        b.record(1_000);
        b.record(2_000);
        a.merge(&b);
        assert_eq!((a.count(), a.min(), a.max()), (3, 10, 2_000));
    }
}
