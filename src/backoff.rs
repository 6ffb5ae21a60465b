//! Retry delays: exponential backoff with full jitter, from the OS random source.

use std::time::Duration;

use rand::TryRng;

/// Uniformly random in [0, min(cap, base·2^failures)].
pub fn full_jitter(base: Duration, failures: u32, cap: Duration) -> Duration {
    let ceiling = base.saturating_mul(1 << failures.min(16)).min(cap);
    let unit = rand::rngs::SysRng.try_next_u32().unwrap_or(u32::MAX / 2);
    ceiling.mul_f64(f64::from(unit) / f64::from(u32::MAX))
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
}
