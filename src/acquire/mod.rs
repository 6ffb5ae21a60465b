//! Taking the lock (README § Waiting, outages and once-per-day): try once or wait for a
//! release, ride out a Redis outage with backoff, and fail closed — or open, when asked.

use std::time::Duration;

use tokio::time::{Instant, sleep, sleep_until};

use crate::backoff::full_jitter;
use crate::config::{Config, KILL_AHEAD};
use crate::exit::Error;
use crate::lock::{
    Acquired, Fault, Handover, Holder, Kind, Lease, Lock, QUEUE_KEEPALIVE, Wake, Wakeups, show_key,
};
use crate::signals::Signals;
use crate::sys::Guardian;

/// Even with `--wait 0`, an unreachable Redis is retried this long before giving up.
const OUTAGE_RETRY: Duration = Duration::from_secs(1);
/// A waiter retries at the holder's remaining TTL, but at least this often, in case a release
/// announcement is missed (a dropped subscription).
const BUSY_RETRY_CAP: Duration = Duration::from_secs(2);

/// How late after the end of `--wait` a waiter may still make its last attempt, or take a lock
/// handed over: one woken at the deadline (a timer, or the scheduler, a little late) tries once
/// more; one that was stopped (SIGSTOP, Ctrl-Z) past it gives up instead of taking the lock
/// after its wait, and hands on a lock handed to it meanwhile.
const LATE: Duration = Duration::from_millis(100);

/// Bound on taking back an abandoned attempt (so a signal still ends the run promptly).
const ABANDON_LIMIT: Duration = Duration::from_millis(300);

/// How the wait for the lock ended, when it did not end in an error.
pub enum Outcome {
    Acquired {
        /// The fence of each key, in the order given.
        fences: Vec<i64>,
        lease: Lease,
        /// This run's place in the queue when it joined (1 = next), if it had to queue.
        queue_position: Option<u64>,
        /// A release handed the lock over: the lease is short until the first renewal, which
        /// goes out soon after the command's start (`Handover::CONFIRM_AFTER`).
        handed_over: bool,
        /// The subscription of a run that waited, to be let go of once the command is under way
        /// (closing it is work for Redis and for the wrapper that would compete with the
        /// command's start-up).
        subscription: Option<Wakeups>,
    },
    /// `--idempotency-key`: a run with this ID already succeeded.
    AlreadyDone { record: Vec<u8> },
    /// `--fail-open`: Redis stayed unreachable; run without the lock.
    Unlocked { reason: String },
}

/// `guardian`: a run that has to wait and has no guardian yet execs it meanwhile, so that the
/// handoff, when it comes, does not wait for one (see `sys::Guardian`).
pub async fn acquire(
    lock: &mut Lock,
    config: &Config,
    signals: &mut Signals,
    guardian: &mut Option<Guardian>,
) -> Result<Outcome, Error> {
    let started = Instant::now();
    let wait_until = started + config.wait;
    let outage_until = started + config.wait.max(OUTAGE_RETRY);
    let mut releases: Option<Wakeups> = None;
    let mut outage_failures = 0u32;
    // Waiters queue in arrival order (one Redis); a Redlock quorum's waiters retry on every
    // announced release instead.
    let join = !config.wait.is_zero();
    let queued = join && lock.queues();
    let mut queue_position = None;
    // Whether Redis answered any attempt of the current outage (then it is not unreachable).
    let mut answered = false;
    // A nested run held off by a waiter that waits for the outer run's lock: why, once known.
    let mut nested: Option<Option<String>> = None;
    let mut said_unqueued = false;

    loop {
        let attempt_sent = Instant::now();
        let attempt = async {
            // Subscribed before the attempt, so a release right after it is not missed.
            if !config.wait.is_zero() && releases.is_none() {
                releases = Some(lock.watch_releases().await?);
            }
            lock.acquire(join).await
        };
        let mut interrupted = None;
        let attempt = tokio::select! {
            r = attempt => Some(r),
            sig = signals.recv_before_start() => {
                interrupted = Some(sig);
                None
            }
        };
        let Some(attempt) = attempt else {
            // The abandoned request may still take the lock: take back what it may have taken.
            abandon(lock).await;
            return Err(Error::interrupted(interrupted.expect("set with None")));
        };
        let now = Instant::now();
        let fault = match attempt {
            Ok(Acquired::Yes { fences, lease })
                if lease.remaining(now) > config.kill_grace.max(KILL_AHEAD) =>
            {
                return Ok(Outcome::Acquired {
                    fences,
                    lease,
                    queue_position,
                    handed_over: false,
                    subscription: releases,
                });
            }
            Ok(Acquired::Yes { .. }) => {
                let _ = lock.release(Duration::ZERO, false).await;
                Fault::Unavailable("Redis answered too slowly: too little of the lease was left".into())
            }
            Ok(Acquired::AlreadyDone { record }) => return Ok(Outcome::AlreadyDone { record }),
            Ok(busy_now @ (Acquired::Busy { .. } | Acquired::Queued { .. })) => {
                outage_failures = 0;
                answered = false;
                let (pttl, position, at) = match busy_now {
                    Acquired::Busy { pttl, position, key, .. } => (pttl, position, key),
                    Acquired::Queued { position, key, .. } => (None, position, key),
                    Acquired::Yes { .. } | Acquired::AlreadyDone { .. } => (None, None, 0),
                };
                if join && !queued && !said_unqueued {
                    said_unqueued = true;
                    tracing::info!(
                        "waiting without a place in a queue ({}): runs queued for these keys go first, and \
                         this run may wait until --wait runs out",
                        if lock.spans_slots() {
                            "keys in several Cluster slots; a common hash tag puts them in one"
                        } else {
                            "a Redlock quorum"
                        }
                    );
                }
                if queue_position.is_none() && position.is_some() {
                    queue_position = position;
                    // The place at the key that held the run off (of several, the first).
                    let key = config.keys.get(at).unwrap_or(&config.key);
                    tracing::info!(key = %key.escape_ascii(), position, "queued for the lock");
                }
                if let (Acquired::Queued { first, key, .. }, Some(outer), None) =
                    (&busy_now, &config.outer, &nested)
                {
                    let why = lock.waits_for(first, &outer.keys, &outer.value).await.then(|| {
                        let theirs: Vec<String> = outer.keys.iter().map(|k| show_key(k)).collect();
                        format!(
                            "the run queued first for {} also waits for {}, which the run this one is \
                             nested in holds, so it cannot go before that run ends; take the keys together \
                             in the outer run (--key once for each)",
                            show_key(config.keys.get(*key).unwrap_or(&config.key)),
                            theirs.join(", ")
                        )
                    });
                    if let Some(why) = &why {
                        tracing::warn!("this run waits until --wait runs out or that run gives up: {why}");
                    }
                    nested = Some(why);
                }
                if now >= wait_until {
                    leave(lock, queued).await;
                    return Err(busy(config, &busy_now, nested.flatten().as_deref()));
                }
                if guardian.is_none() {
                    // Failing here is not reported: the spawn forks one, or says why not.
                    *guardian = Guardian::exec().ok();
                }
                crate::sys::note_handlers();
                // A queued waiter tries again when told its turn has come, and at each
                // keep-alive (which also notices a lock that expired without a release).
                let retry_in = if queued {
                    QUEUE_KEEPALIVE
                } else {
                    pttl.unwrap_or(BUSY_RETRY_CAP).min(BUSY_RETRY_CAP)
                        + full_jitter(Duration::from_millis(25), 1, Duration::from_millis(50))
                };
                tracing::debug!(
                    retry_in_ms = retry_in.as_millis() as u64,
                    "lock busy; waiting for its release"
                );
                tokio::select! {
                    () = sleep_until((now + retry_in).min(wait_until)) => {}
                    wake = next_wake(&mut releases) => match wake {
                        // The subscription ended; subscribe again before the next attempt.
                        Wake::Ended => releases = None,
                        Wake::Turn => {}
                        Wake::HandedOver { fence, grant } => {
                            // Handed over after Redis answered this attempt "busy": a lease
                            // counted from before it is never too long.
                            let lease = Lease::handed(attempt_sent, grant, config.ttl);
                            let now = Instant::now();
                            if lock.handed_over_since_last_attempt(fence)
                                && Handover::usable(&lease, now, config.kill_grace)
                                && now <= wait_until + LATE
                            {
                                return Ok(Outcome::Acquired {
                                    fences: vec![fence],
                                    lease,
                                    queue_position,
                                    handed_over: true,
                                    subscription: releases,
                                });
                            }
                            // A handover older than that attempt, too little of it certainly
                            // left, or the wait over: the next attempt (if any) decides, and an
                            // attempt that finds this run's value confirms it for the full TTL.
                        }
                    },
                    sig = signals.recv_before_start() => {
                        leave(lock, queued).await;
                        return Err(Error::interrupted(sig));
                    }
                    // Releases are announced on the new master: listen and try there at once.
                    () = lock.master_changed() => releases = None,
                }
                if Instant::now() > wait_until + LATE {
                    // Stopped past the end of the wait: no new attempt (a lock handed over
                    // meanwhile goes back with the place in the queue).
                    leave(lock, queued).await;
                    return Err(busy(config, &busy_now, nested.flatten().as_deref()));
                }
                continue;
            }
            Err(fault) => fault,
        };

        // Unreachable, or answering "not now" (OOM, READONLY, LOADING, …): both are retried;
        // anything else is a mistake a retry cannot fix.
        let msg = match &fault {
            Fault::Unavailable(msg) => msg.clone(),
            Fault::Transient(msg) => {
                answered = true;
                msg.clone()
            }
            _ => return Err(fault.into_error("taking the lock")),
        };
        outage_failures += 1;
        // The last retry comes at the end of the budget, not before it: a long jitter drawn
        // early must not cut the outage wait short.
        let delay = full_jitter(Duration::from_millis(50), outage_failures, Duration::from_secs(1))
            .min(outage_until.saturating_duration_since(now));
        if now >= outage_until {
            // A request that timed out may still have taken the lock.
            abandon(lock).await;
            let target = lock.target();
            return Err(match fault {
                // Only a Redis that could not be reached at all fails open: one that answered
                // may hold the lock for someone else.
                Fault::Unavailable(_) if config.fail_open && !answered => {
                    return Ok(Outcome::Unlocked { reason: msg });
                }
                Fault::Unavailable(_) if config.fail_open && answered => fault.into_error(&format!(
                    "cannot reach Redis at {target} (it answered an earlier attempt, so --fail-open \
                     does not apply)"
                )),
                Fault::Unavailable(_) => {
                    fault.into_error(&format!("cannot reach Redis at {target}{}", config.redis.source_note()))
                }
                _ => fault.into_error(&format!("taking the lock at {target}{}", config.redis.source_note())),
            });
        }
        tracing::debug!("Redis unavailable, retrying in {delay:?}: {msg}");
        let interrupted = tokio::select! {
            () = sleep(delay) => None,
            sig = signals.recv_before_start() => Some(sig),
        };
        if let Some(sig) = interrupted {
            // The attempt that failed may still have taken the lock.
            abandon(lock).await;
            return Err(Error::interrupted(sig));
        }
    }
}

/// Best-effort, bounded compare-and-delete after giving up on an attempt whose outcome is
/// unknown (and the place in the queue it may have taken). On the same connection it is
/// processed after the abandoned request.
async fn abandon(lock: &mut Lock) {
    let _ = tokio::time::timeout(ABANDON_LIMIT, async {
        let _ = lock.release(Duration::ZERO, false).await;
        let _ = lock.leave_queue().await;
    })
    .await;
}

/// Gives up the place in the queue at once, so that the runs behind move up (bounded; an
/// entry left behind lapses by itself).
async fn leave(lock: &mut Lock, queued: bool) {
    if queued {
        let _ = tokio::time::timeout(ABANDON_LIMIT, lock.leave_queue()).await;
    }
}

/// Resolves with the next wake-up or the end of the subscription; never without one.
async fn next_wake(releases: &mut Option<Wakeups>) -> Wake {
    match releases {
        Some(wakeups) => wakeups.next().await,
        None => std::future::pending().await,
    }
}

/// "lock "k" is busy: held by host (pid 123) since …; it expires in 12s unless renewed", with
/// the holder and its time left also apart, for the JSON error line. A lock whose holders would
/// admit this run, with runs queued for it first, is busy too for those that did not queue.
/// `nested`: why the waiter first in the queue waits for the run this one is nested in.
fn busy(config: &Config, found: &Acquired, nested: Option<&str>) -> Error {
    let state = if config.wait.is_zero() { "busy" } else { "still busy at the end of --wait" };
    // The key that held the run off (one of several: the first that did).
    let at = match found {
        Acquired::Busy { key, .. } | Acquired::Queued { key, .. } => *key,
        _ => 0,
    };
    let busy = config.keys.get(at).unwrap_or(&config.key);
    let name = show_key(busy);
    let busy_key = busy.escape_ascii().to_string();
    let describe = |value: &[u8]| Holder::parse(value).map(|h| (h.describe(), h.kind));
    let (pttl, holder, holding, same_id) = match found {
        Acquired::Busy { pttl, holder, holding, same_id, .. } => (*pttl, holder, *holding, *same_id),
        Acquired::Queued { first, .. } => {
            let (who, kind) = describe(first).unwrap_or_else(|| ("another run".to_owned(), Kind::Exclusive));
            let message = match (config.kind, kind) {
                (Kind::Shared, Kind::Exclusive) => format!(
                    "lock {name} is {state}: an exclusive run is queued for it, {who}, and shared runs \
                     that come after it wait for it"
                ),
                (Kind::Limit(n), _) => format!(
                    "lock {name} is {state}: its free permits (--limit {n}) go to runs queued before \
                     this one, first {who}"
                ),
                _ => format!("lock {name} is {state}: free, but runs are queued for it, first {who}"),
            };
            let message = match nested {
                Some(why) => format!("{message}; {why}"),
                None => message,
            };
            return Error::Busy {
                message,
                key: busy_key,
                holder: format!("queued: {who}"),
                expires_in: None,
                code: config.busy_exit_code,
            };
        }
        _ => unreachable!("only a busy answer is reported busy"),
    };
    let (who, kind) = describe(holder)
        .unwrap_or_else(|| ("another client (not a redlock-run value)".to_owned(), Kind::Exclusive));
    let left = match pttl {
        Some(d) => format!(
            "it expires in {} unless renewed",
            humantime::format_duration(Duration::from_millis(d.as_millis() as u64))
        ),
        None => "the key has NO expiry and will never go away by itself; delete it if its holder is gone \
                 (redlock-run release --force)"
            .to_owned(),
    };
    let held = match kind {
        _ if same_id => format!("a run with the same --idempotency-key holds it, {who}"),
        Kind::Shared => {
            let runs = if holding == 1 { "1 run".to_owned() } else { format!("{holding} runs") };
            format!("held shared by {runs}, the last to end {who}")
        }
        Kind::Limit(n) => format!("all {n} permits are held (--limit {n}), the first to end by {who}"),
        Kind::Exclusive => format!("held by {who}"),
    };
    Error::Busy {
        message: format!("lock {name} is {state}: {held}; {left}"),
        key: busy_key,
        holder: who,
        expires_in: pttl,
        code: config.busy_exit_code,
    }
}
