//! The soak's phases (what each runs and injects) and the tests that run them. The tests share
//! one module because libtest starts them in name order, and RELIABILITY.md § Running it
//! times the phases in this order.

use std::time::Duration;

use super::harness::{Deployment, Disruption, Phase, Runs, Timing, soak};
use crate::support::oracle::Kind;

const KEY: &str = "lock:soak";
pub(super) const TTL: Duration = Duration::from_secs(2);
pub(super) const RENEW_EVERY: Duration = Duration::from_millis(400);
const KILL_GRACE: Duration = Duration::from_millis(300);
const WRAPPERS: usize = 5;
/// The keys of the kinds phase: a semaphore, and readers with writers.
const LIMIT_KEY: &str = "lock:soak:limit";
const PERMITS: usize = 3;
const RW_KEY: &str = "lock:soak:rw";

/// The phases through the fault proxy.
const PROXIED: Timing = Timing { ttl: TTL, renew_every: RENEW_EVERY, kill_grace: KILL_GRACE };

/// The Sentinel phase: a longer TTL. A forced failover is clean only if the promoted replica's
/// copy of the key (renewed at most `renew_every` before the promotion) outlives the time until
/// the wrappers hear of the switch, during which their renewals reach the old master only
/// (docs/GUIDE.md § Redis deployments, Sentinel: an overlap is possible if a failover takes
/// "longer than about `--ttl` minus `--renew-every`"). Here every Sentinel named the promoted replica 0.1–1.1 s after it
/// answered as a master (they see it in its INFO, asked every second during a failover): with
/// 3 s − 400 ms that leaves 1.5 s of margin on a loaded machine, against 0.5 s with 2 s.
const FAILOVER_TIMING: Timing =
    Timing { ttl: Duration::from_secs(3), renew_every: RENEW_EVERY, kill_grace: KILL_GRACE };

const SAFE_FAULTS: [Disruption; 11] = [
    Disruption::RedisPauseShort,
    Disruption::LatencyLow,
    Disruption::ClientKill,
    Disruption::BlackholeShort,
    Disruption::ReplyLossShort,
    Disruption::ConnectionReset,
    Disruption::WrapperPauseShort,
    Disruption::RedisPauseLong,
    Disruption::LatencyHigh,
    Disruption::BlackholeLong,
    Disruption::ReplyLossLong,
];

const DATA_LOSS_FAULTS: [Disruption; 5] = [
    Disruption::RedisRestart,
    Disruption::KeyDeleted,
    Disruption::WrapperPauseLong,
    Disruption::KeyExpired,
    Disruption::KeyForceReleased,
];

/// The kinds phase: faults that must stop every holder, hide replies or lose wake-ups, then
/// faults that lose the state of all the holders of a key, or the lease of one of them.
const KIND_FAULTS: [Disruption; 5] = [
    Disruption::RedisPauseLong,
    Disruption::ReplyLossShort,
    Disruption::RedisRestart,
    Disruption::KeyForceReleased,
    Disruption::WrapperPauseLong,
];

/// The Sentinel phase: a forced failover, one by agreement, a lossy one, in turn; the lossy
/// ones alternate between the two ways of losing the lock's last write. A default run has the
/// first three (each failover takes about 11 s, most of it the Sentinels' wait before they
/// make the demoted master a replica).
const FAILOVERS: [Disruption; 6] = [
    Disruption::FailoverForced,
    Disruption::FailoverFrozen,
    Disruption::FailoverLossyDel,
    Disruption::FailoverForced,
    Disruption::FailoverFrozen,
    Disruption::FailoverLossyExpire,
];

const ONE_KEY: [Runs; WRAPPERS] = [Runs::Exclusive(KEY); WRAPPERS];

/// Four loops on one key for the Sentinel phase: fewer than five, as the failovers come far
/// apart and each wrapper's discovery asks the Sentinels.
pub(super) const SENTINEL_LOOPS: [Runs; 4] = [Runs::Exclusive(KEY); 4];

const KIND_LOOPS: [Runs; 8] = [
    Runs::Limit(LIMIT_KEY, PERMITS),
    Runs::Limit(LIMIT_KEY, PERMITS),
    Runs::Limit(LIMIT_KEY, PERMITS),
    Runs::Limit(LIMIT_KEY, PERMITS),
    Runs::SharedOrExclusive(RW_KEY),
    Runs::SharedOrExclusive(RW_KEY),
    Runs::SharedOrExclusive(RW_KEY),
    Runs::SharedOrExclusive(RW_KEY),
];

/// (1) Faults that lose no lock state — Redis paused shorter and longer than the TTL, killed
/// connections, latency below and above the request timeout, a blackholed network, lost
/// replies, reset connections, a wrapper paused within its lease: never two holders at once,
/// so never a stale write; and (3) every wrapper exits with a status of the exit-status table,
/// leaving nothing behind.
#[test]
fn soak_without_data_loss_faults_never_overlaps() {
    let outcome = soak(&Phase {
        name: "no data-loss faults",
        deployment: Deployment::Proxied,
        timing: PROXIED,
        faults: &SAFE_FAULTS,
        at_least: SAFE_FAULTS.len(),
        loops: &ONE_KEY,
    });
    let ctx = outcome.context();
    let r = &outcome.report;
    assert!(r.overlaps.is_empty(), "overlapping holders: {:?}; {ctx}", r.overlaps);
    assert_eq!(r.peak_holders, 1, "{ctx}");
    assert_eq!(r.stale_rejected, 0, "stale writes without an overlap; {ctx}");
    assert!(!outcome.runs.iter().any(|r| r.status == Ok(3)), "a command saw a stale write; {ctx}");
}

/// (2) Faults that lose the lock's state — Redis restarted empty, the key deleted, force-
/// released or expired by hand, the holder's wrapper paused past its TTL: holders may
/// overlap, but each overlap is bounded (the old holder hears of the loss at once, or as soon
/// as Redis or its wrapper runs again), the newer holder always has the higher fence, and the
/// fence check rejects every write of the older one; and (3) as above.
#[test]
fn soak_with_data_loss_faults_bounds_overlaps_and_rejects_stale_writers() {
    let outcome = soak(&Phase {
        name: "data-loss faults",
        deployment: Deployment::Proxied,
        timing: PROXIED,
        faults: &DATA_LOSS_FAULTS,
        at_least: DATA_LOSS_FAULTS.len(),
        loops: &ONE_KEY,
    });
    let ctx = outcome.context();
    outcome.check_overlaps_after_data_loss(true);
    assert!(
        outcome.runs.iter().any(|r| r.status == Ok(125)),
        "no data-loss fault stopped a holder, so nothing was tried; {ctx}"
    );
}

/// (6) The kinds of lock, under faults of both sorts: four wrappers loop on a `--limit 3` key,
/// four on a key of `--shared` runs with one in three exclusive. The oracle plays a fenced
/// resource per key that knows the kind (tests/support/oracle.rs): never more than three
/// holders of the semaphore, never an exclusive holder beside another of the other key, except
/// after a fault that loses the holders' state (Redis restarted empty, the keys force-released,
/// a holder's wrapper paused past its lease), and then bounded as the exclusive lock's
/// overlaps are, with the fresher holders' fences higher and the older holders' writes refused;
/// no fence used twice on a key; and (3) as above.
#[test]
fn soak_with_lock_kinds_never_exceeds_their_holders_outside_data_loss() {
    let outcome = soak(&Phase {
        name: "lock kinds",
        deployment: Deployment::Proxied,
        timing: PROXIED,
        faults: &KIND_FAULTS,
        at_least: KIND_FAULTS.len(),
        loops: &KIND_LOOPS,
    });
    let ctx = outcome.context();
    let r = &outcome.report;
    // The checks meant something: the semaphore was full, readers held together, and writers
    // held between them.
    let semaphore = &r.resources[LIMIT_KEY];
    assert!(semaphore.peak >= PERMITS, "the {PERMITS} permits were never all taken: {semaphore:?}; {ctx}");
    let rw = &r.resources[RW_KEY];
    assert!(rw.peak_shared >= 2, "shared holders never held together: {rw:?}; {ctx}");
    assert!(
        rw.kinds.get(&Kind::Exclusive).is_some_and(|&n| n >= 2),
        "too few exclusive holders: {rw:?}; {ctx}"
    );
    // More holders than the kind allows only in an overlap, and overlaps only after data loss.
    let beyond = |key: &str| r.overlaps.iter().any(|o| o.resource == key);
    assert!(
        semaphore.peak <= PERMITS || beyond(LIMIT_KEY),
        "{} holders of --limit {PERMITS} at once and no overlap recorded: {semaphore:?}; {ctx}",
        semaphore.peak
    );
    outcome.check_overlaps_after_data_loss(false);
}

/// (7) Sentinel failovers (issue 21): four loops of exclusive runs find the master through three
/// Sentinels that require a password, and log in to the data nodes as an ACL user, while the
/// master is failed over again and again — forced (`SENTINEL FAILOVER`), by the Sentinels'
/// agreement while it is frozen, or forced just after the lock's copy on every replica was
/// deleted or expired, which loses the lock's last write — each failover waited for until the
/// demoted master is a replica again. Holders overlap only after a failover whose promoted
/// replica lacked the lock, and each overlap is bounded by renew-every + kill-grace + 500 ms,
/// the bound of docs/GUIDE.md § What the lock does not guarantee for a lock lost in Redis (the holder
/// notices at its next renewal at the latest, then its command gets up to kill-grace): with
/// Sentinel the holder renews on the new master as soon as it hears of the switch, which any
/// waiter that took the lock there needed too (or a Sentinel naming the new master), so
/// the bound holds with room. The newer holder's fence is higher, the older one's writes are
/// refused, every failover happened with runs completed between them, and a lossy failover
/// stopped its holder (125) or was followed by an overlap; and (3) as above.
#[test]
fn soak_with_sentinel_failovers_bounds_overlaps_to_lost_writes() {
    let outcome = soak(&Phase {
        name: "sentinel failovers",
        deployment: Deployment::Sentinels,
        timing: FAILOVER_TIMING,
        faults: &FAILOVERS,
        at_least: 3,
        loops: &SENTINEL_LOOPS,
    });
    outcome.check_failovers();
    outcome.check_overlaps_after_data_loss(true);
}
