//! Random delays, from the OS random source: exponential backoff with full jitter, and a
//! run's start spread over `--jitter`.

use std::time::Duration;

use rand::rand_core::UnwrapErr;
use rand::{RngExt, TryRng};

/// Uniformly random in [0, min(cap, base·2^failures)].
pub fn full_jitter(base: Duration, failures: u32, cap: Duration) -> Duration {
    let ceiling = base.saturating_mul(1 << failures.min(16)).min(cap);
    let unit = rand::rngs::SysRng.try_next_u32().unwrap_or(u32::MAX / 2);
    ceiling.mul_f64(f64::from(unit) / f64::from(u32::MAX))
}

/// Uniformly random in [0, spread), to the nanosecond; zero for a zero spread.
pub fn below(spread: Duration) -> Duration {
    let nanos = u64::try_from(spread.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(UnwrapErr(rand::rngs::SysRng).random_range(0..nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_the_cap() {
        for n in 0..40 {
            let d = full_jitter(Duration::from_millis(50), n, Duration::from_secs(1));
            assert!(d <= Duration::from_secs(1));
            assert!(d <= Duration::from_millis(50).saturating_mul(1 << n.min(16)));
        }
    }

    #[test]
    fn below_stays_below_the_spread() {
        assert_eq!(below(Duration::ZERO), Duration::ZERO);
        assert_eq!(below(Duration::from_nanos(1)), Duration::ZERO);
        for _ in 0..1000 {
            assert!(below(Duration::from_micros(3)) < Duration::from_micros(3));
        }
        let ten_years = Duration::from_secs(10 * 366 * 24 * 3600);
        assert!(below(ten_years) < ten_years);
    }
}
