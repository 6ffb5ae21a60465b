//! The lease deadline: the last moment at which the lock is still certainly ours, on the local
//! monotonic clock: `deadline = t_sent + ttl − drift` for the latest acquire or renewal that
//! succeeded, `t_sent` taken just before that request was sent.

use std::time::Duration;

use tokio::time::Instant;

/// The lease arithmetic's allowance for clock drift and request latency (the Redlock
/// algorithm's): `ttl/100 + 2ms`. Validation (`config.rs`) counts it in too.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

#[derive(Debug, Clone, Copy)]
pub struct Lease {
    deadline: Instant,
    ttl: Duration,
}

impl Lease {
    /// The lease of a request sent at `sent` that the server granted.
    pub fn new(sent: Instant, ttl: Duration) -> Self {
        Lease { deadline: sent + ttl - drift(ttl), ttl }
    }

    /// The lease of a lock a release handed over for `grant`, counted from `sent`, before a
    /// request of this run that Redis answered before it handed over; renewals extend it to
    /// `ttl`.
    pub fn handed(sent: Instant, grant: Duration, ttl: Duration) -> Self {
        Lease { deadline: sent + grant - drift(grant), ttl }
    }

    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left at `now` (zero once the deadline has passed).
    pub fn remaining(&self, now: Instant) -> Duration {
        self.deadline.saturating_duration_since(now)
    }

    pub fn expired(&self, now: Instant) -> bool {
        now >= self.deadline
    }

    /// A renewal sent at `sent` succeeded and its reply arrived at `now`. A reply that arrives
    /// after the deadline never revives the lease: the lock may have expired in between.
    /// Returns whether the lease is (still) valid.
    pub fn renewed(&mut self, sent: Instant, now: Instant) -> bool {
        if self.expired(now) {
            return false;
        }
        self.deadline = self.deadline.max(Lease::new(sent, self.ttl).deadline);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_counts_from_the_send_time_minus_drift() {
        let t0 = Instant::now();
        let lease = Lease::new(t0, Duration::from_secs(1));
        assert_eq!(lease.deadline(), t0 + Duration::from_millis(1000 - 10 - 2));
    }

    #[test]
    fn a_handed_over_lease_ends_with_the_grant_and_renews_to_the_ttl() {
        let t0 = Instant::now();
        let mut lease = Lease::handed(t0, Duration::from_secs(2), Duration::from_secs(30));
        assert_eq!(lease.deadline(), t0 + Duration::from_millis(2000 - 20 - 2));
        assert!(lease.renewed(t0 + Duration::from_millis(5), t0 + Duration::from_millis(6)));
        assert_eq!(lease.deadline(), t0 + Duration::from_millis(5 + 30_000 - 300 - 2));
    }

    #[test]
    fn a_late_reply_never_revives_the_lease() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(1);
        let mut lease = Lease::new(t0, ttl);
        let old = lease.deadline();
        assert!(!lease.renewed(t0 + Duration::from_millis(500), old));
        assert_eq!(lease.deadline(), old);
        assert!(lease.renewed(t0 + Duration::from_millis(500), t0 + Duration::from_millis(600)));
        assert_eq!(lease.deadline(), t0 + Duration::from_millis(1488));
    }
}
