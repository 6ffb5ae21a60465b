//! Giving the lock back after the command has ended: compare-and-delete (or, with
//! `--min-hold`, shortening the lease to what is left of it), retried within a small budget.
//! The run's three retry schedules sit side by side: `acquire/`, `renew.rs` and this one;
//! `lock/` makes single attempts.

use std::time::Duration;

use tokio::time::{Instant, sleep};

use crate::backoff::full_jitter;
use crate::lock::{Fault, Lock, Recorded, Released};

/// How long the release after the command has ended is retried. A Redis that answers that it
/// cannot serve it now (TRYAGAIN while a Cluster slot moves) gets tries until then; one that
/// cannot be reached gets `RELEASE_TRIES`, so that a node that is down (one of a Redlock's)
/// does not hold up every run's exit.
const RELEASE_BUDGET: Duration = Duration::from_secs(3);
const RELEASE_TRIES: u32 = 3;

/// How a release went, for `unlock`'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gave {
    /// Deleted, or shortened to the rest of `--min-hold`.
    Back,
    /// The key no longer held this run's value.
    NotOurs,
    /// Not confirmed: the key expires by itself within the TTL.
    Unknown,
}

/// What became of the success record of `--idempotency-key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// None was due: no `--idempotency-key`, or the command did not succeed.
    NotDue,
    Written,
    /// Redis answered, and no node wrote it (why).
    Failed(String),
    /// The release was not confirmed, so neither was the record (why).
    Unconfirmed(String),
}

/// Releases the lock (or, with `keep`, shortens it to the rest of `--min-hold`), bounded in
/// time and tries, and reports it as one `released` event; with `succeeded`, writes the
/// success record in the same request. Failure is a warning, never a change of exit status:
/// the key then expires by itself within the TTL.
pub async fn release(
    lock: &mut Lock,
    keep: Duration,
    succeeded: bool,
    acquired: Instant,
    command_status: Option<u8>,
) -> (Gave, Record) {
    let due = succeeded && lock.records();
    let record = |recorded: Recorded| match recorded {
        _ if !due => Record::NotDue,
        Ok(()) => Record::Written,
        Err(why) => Record::Failed(why),
    };
    let give_up = Instant::now() + RELEASE_BUDGET;
    let mut failure = String::from("timed out");
    let mut unreachable = 0;
    for attempt in 1.. {
        let held_ms = acquired.elapsed().as_millis() as u64;
        match tokio::time::timeout_at(give_up, lock.release(keep, succeeded)).await {
            Ok(Ok((Released::Deleted, recorded))) => {
                tracing::info!(outcome = "released", held_ms, command_status, "released");
                return (Gave::Back, record(recorded));
            }
            Ok(Ok((Released::Kept, recorded))) => {
                let keep_ms = keep.as_millis() as u64;
                tracing::info!(outcome = "kept", held_ms, keep_ms, command_status, "released");
                return (Gave::Back, record(recorded));
            }
            Ok(Ok((Released::NotOurs, recorded))) => {
                tracing::warn!(
                    outcome = "not-owner",
                    held_ms,
                    command_status,
                    "released: the lock was no longer this run's (already released, expired or taken over); left untouched"
                );
                return (Gave::NotOurs, record(recorded));
            }
            Ok(Err(fault @ (Fault::Unavailable(_) | Fault::Transient(_)))) => {
                unreachable += u32::from(matches!(fault, Fault::Unavailable(_)));
                failure = fault.to_string();
                if unreachable == RELEASE_TRIES {
                    break;
                }
                tracing::debug!("release failed, retrying: {failure}");
                let pause = full_jitter(Duration::from_millis(50), attempt, Duration::from_secs(1));
                if Instant::now() + pause >= give_up {
                    break;
                }
                sleep(pause).await;
            }
            Ok(Err(fault)) => {
                failure = fault.to_string();
                break;
            }
            Err(_) => break,
        }
    }
    tracing::warn!(
        outcome = "unknown",
        held_ms = acquired.elapsed().as_millis() as u64,
        command_status,
        "released: could not confirm the release ({failure}); the lock expires by itself within the TTL"
    );
    (Gave::Unknown, if due { Record::Unconfirmed(failure) } else { Record::NotDue })
}
