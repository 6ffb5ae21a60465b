//! The lease deadline: the last moment at which the lock is still certainly ours, on the local
//! monotonic clock. One rule: the deadline is never later than what the writes of this run's
//! expiry to Redis guarantee — `t_sent + ttl − drift` for the last one confirmed, and no later
//! than that for one sent and not yet confirmed (it may have cut a longer expiry short).

use std::time::Duration;

use tokio::time::Instant;

/// The lease arithmetic's allowance for clock drift and request latency (the Redlock
/// algorithm's): `ttl/100 + 2ms`. Validation (`config/lease.rs`) counts it in too.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// SIGKILL goes to the command this long before the lease deadline, whatever `--kill-grace` is
/// (timer granularity and scheduling delay must not let it outlive the lease).
pub const KILL_AHEAD: Duration = Duration::from_millis(10);

/// The guardian kills the command's group this long before the lease deadline if the wrapper
/// has not stopped it by then (a wrapper that cannot act: stopped, starved): after the
/// wrapper's own SIGKILL, still before the key can expire.
pub const GUARDIAN_KILL_AHEAD: Duration = Duration::from_millis(5);

/// The timing of a lock that a release hands over to the first waiter (ARCHITECTURE.md §
/// Handing the lock over): the release takes the lock for the waiter for [`Handover::grant`],
/// the waiter starts its command only if [`Handover::usable`], and confirms the lock for its
/// own TTL [`Handover::CONFIRM_AFTER`] after the start.
pub struct Handover;

impl Handover {
    /// Added to the holder's kill-grace for the grant: room for the waiter's last attempt
    /// having gone out up to a keep-alive (0.5 s) before, and for the confirmation. A waiter
    /// that cannot use the lock (frozen, its host gone) holds up the queue no longer than that.
    pub const SLACK: Duration = Duration::from_secs(1);
    /// The confirmation waits this long after the command's start, so that Redis's work for it
    /// does not compete with the command's start-up; the subscription is let go of then too.
    pub const CONFIRM_AFTER: Duration = Duration::from_millis(5);
    /// What a lock handed over must leave beyond the waiter's kill-grace for the confirmation
    /// to arrive before the command would have to be stopped; with less, the waiter confirms
    /// it before its command starts.
    pub const CONFIRM_ROOM: Duration = Duration::from_millis(250);
    /// How late after the end of `--wait` a waiter may still make its last attempt, or take a
    /// lock handed over: one woken at the deadline (a timer, or the scheduler, a little late)
    /// tries once more; one that was stopped (SIGSTOP, Ctrl-Z) past it gives up instead of
    /// taking the lock after its wait, and hands on a lock handed to it meanwhile.
    pub const LATE: Duration = Duration::from_millis(100);

    /// How long a release by a run with this kill-grace and TTL takes the lock for a waiter.
    pub fn grant(kill_grace: Duration, ttl: Duration) -> Duration {
        (kill_grace.max(KILL_AHEAD) + Handover::SLACK).min(ttl)
    }

    /// Whether a lease handed over leaves the waiter room to start its command at `now`.
    pub fn usable(lease: &Lease, now: Instant, kill_grace: Duration) -> bool {
        lease.remaining(now) > kill_grace.max(KILL_AHEAD) + Handover::CONFIRM_ROOM
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Lease {
    deadline: Instant,
    ttl: Duration,
}

impl Lease {
    /// The lease of a request sent at `sent` that set the key's expiry to `ttl`.
    pub fn new(sent: Instant, ttl: Duration) -> Self {
        Lease { deadline: sent + ttl - drift(ttl), ttl }
    }

    /// The lease of a lock a release handed over for `grant`, counted from `sent`, before a
    /// request of this run that Redis answered before it handed over. The renewals that follow
    /// set the key's expiry to `ttl`, shorter or longer than `grant`.
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

    /// A renewal goes out at `sent`. Redis may carry it out whatever becomes of its reply, and
    /// then the key expires `ttl` after it: until it is confirmed the lease ends no later than
    /// that. Returns whether the deadline moved (a lock handed over for longer than the TTL).
    pub fn sending(&mut self, sent: Instant) -> bool {
        let bound = Lease::new(sent, self.ttl).deadline;
        let moved = bound < self.deadline;
        self.deadline = self.deadline.min(bound);
        moved
    }

    /// A renewal sent at `sent` succeeded and its reply arrived at `now`: the key now expires
    /// `ttl` after it, earlier or later than before. A reply that arrives after the deadline
    /// never revives the lease: the lock may have expired in between. Returns whether the
    /// lease is (still) valid.
    pub fn renewed(&mut self, sent: Instant, now: Instant) -> bool {
        if self.expired(now) {
            return false;
        }
        self.deadline = Lease::new(sent, self.ttl).deadline;
        !self.expired(now)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

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
        assert!(!lease.sending(t0 + 5 * MS), "a longer TTL does not cut the grant short");
        assert!(lease.renewed(t0 + 5 * MS, t0 + 6 * MS));
        assert_eq!(lease.deadline(), t0 + Duration::from_millis(5 + 30_000 - 300 - 2));
    }

    /// The hole of a waiter with `--ttl 1s` handed the lock for 6 s: its first renewal cuts
    /// the key to 1 s, and so does its deadline, from the moment the renewal goes out.
    #[test]
    fn a_renewal_cuts_a_longer_handover_down_to_the_ttl_as_it_goes_out() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(1);
        let mut lease = Lease::handed(t0, Duration::from_secs(6), ttl);
        assert!(lease.sending(t0 + 5 * MS), "moved");
        assert_eq!(lease.deadline(), t0 + Duration::from_millis(5 + 1000 - 12));
        // Its reply lost: the deadline stays there. Confirmed: there too.
        let mut confirmed = lease;
        assert!(confirmed.renewed(t0 + 5 * MS, t0 + 7 * MS));
        assert_eq!(confirmed.deadline(), lease.deadline());
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

    /// What happens to one renewal: Redis carries it out or not, its reply arrives or not.
    #[derive(Debug, Clone, Copy)]
    enum Fate {
        Confirmed,
        ReplyLost,
        RequestLost,
    }

    proptest! {
        /// Over any mix of a hand-over (shorter or longer than the TTL), renewals confirmed,
        /// carried out with their reply lost, or lost on the way, with any delays: the local
        /// deadline is never later than the key's expiry as Redis last set it, minus the drift
        /// of that write — counting a renewal carried out at the earliest (as it went out).
        #[test]
        fn the_deadline_never_outlives_the_expiry_last_written(
            ttl_ms in prop_oneof![Just(300u64), Just(1000), Just(30_000)],
            grant_ms in proptest::option::of(prop_oneof![Just(500u64), Just(2000), Just(6000), Just(60_000)]),
            renewals in proptest::collection::vec(
                (0u64..2000, 0u64..500, prop_oneof![Just(Fate::Confirmed), Just(Fate::ReplyLost), Just(Fate::RequestLost)]),
                0..12,
            ),
        ) {
            let ttl = Duration::from_millis(ttl_ms);
            let t0 = Instant::now();
            let (mut lease, mut expiry, mut written) = match grant_ms {
                Some(g) => {
                    let grant = Duration::from_millis(g);
                    (Lease::handed(t0, grant, ttl), t0 + grant, grant)
                }
                None => (Lease::new(t0, ttl), t0 + ttl, ttl),
            };
            let mut now = t0;
            for (pause_ms, rtt_ms, fate) in renewals {
                let sent = now + Duration::from_millis(pause_ms);
                if lease.expired(sent) {
                    break;
                }
                lease.sending(sent);
                if !matches!(fate, Fate::RequestLost) && sent < expiry {
                    (expiry, written) = (sent + ttl, ttl);
                }
                prop_assert!(lease.deadline() + drift(written) <= expiry, "in flight");
                now = sent + Duration::from_millis(rtt_ms);
                if matches!(fate, Fate::Confirmed) && !lease.renewed(sent, now) {
                    break;
                }
                prop_assert!(lease.deadline() + drift(written) <= expiry, "after the reply");
            }
        }
    }
}
