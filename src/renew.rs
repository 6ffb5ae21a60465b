//! The renewal loop: keeps the lease alive while the command runs and reports what happens to
//! the supervisor, which owns the decision to stop the command. Its retry schedule sits beside
//! those of `acquire/` and `release.rs`; `lock/` makes single attempts. It also owns the
//! watch: from [`WATCH_AFTER`] on, Redis tells the lock's connections when a key changes or a
//! connection ends (`lock/watch.rs`), and each such notice is checked at once, so that a lost
//! lock is found then rather than at the next renewal.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::backoff::full_jitter;
use crate::lock::{Fault, Handover, Holding, Lease, Lock, Notice};

/// How long the command runs before the holder asks Redis to watch its keys: a run that ends
/// sooner costs Redis nothing more. A loss before then is found then.
pub const WATCH_AFTER: Duration = Duration::from_millis(25);

/// The longest pause between two checks of a notice Redis could not answer (its connection
/// ended): a restarted Redis is asked again within this, at a random point of its second half
/// so that a fleet's holders do not all arrive at once.
pub const RECHECK_WITHIN: Duration = Duration::from_millis(250);

/// After a check that found the lock held, the next notice is checked this much later, not at
/// once: other holders of a `--shared` or `--limit` key renewing, or a client writing the key in a
/// loop, would otherwise cost Redis a check for every change.
pub const CHECK_GAP: Duration = Duration::from_millis(100);

/// The longest one check may take before it is given up and made again on new links: a link
/// that hangs (here, one Redis closed while it was being made) must not keep the holder deaf
/// for the connect or command timeout.
pub const CHECK_WITHIN: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub enum LeaseEvent {
    /// A renewal succeeded before the deadline; this is the new lease.
    Renewed(Lease),
    /// A renewal went out that may cut the key's expiry short (a lock handed over for longer
    /// than the TTL): until it is confirmed, this is the lease.
    Renewing(Lease),
    /// A renewal could not be confirmed (timeout, connection loss, READONLY, …); retrying.
    Failing { error: String, left: Duration },
    /// The key no longer holds our value: someone deleted or replaced it, or it expired.
    Lost(Revealed),
    /// The deadline passed without a confirmed renewal.
    Expired,
}

/// What found the lock lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revealed {
    /// A renewal.
    Renewal,
    /// The check when the watch began.
    Watch,
    /// Redis said a lock key changed (deleted, replaced, expired, flushed).
    Invalidation,
    /// A connection ended, and the first check that could reach Redis again.
    Disconnect,
}

impl Revealed {
    pub fn name(self) -> &'static str {
        match self {
            Revealed::Renewal => "renewal",
            Revealed::Watch => "watch",
            Revealed::Invalidation => "invalidation",
            Revealed::Disconnect => "disconnect",
        }
    }
}

impl From<Notice> for Revealed {
    fn from(notice: Notice) -> Self {
        match notice {
            Notice::Invalidated => Revealed::Invalidation,
            Notice::Disconnected => Revealed::Disconnect,
        }
    }
}

/// What the loop does next.
enum Step {
    Renew,
    Check(Revealed),
}

/// The running renewal loop. [`Renewer::stop`] ends it and gives the lock back for release.
pub struct Renewer {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Lock>,
}

impl Renewer {
    /// `confirm_soon`: the first renewal goes out [`Handover::CONFIRM_AFTER`] after `acquired`
    /// (a lock handed over by a release, whose lease lasts only the grant until then), else
    /// `every` after it.
    pub fn start(
        lock: Lock,
        lease: Lease,
        acquired: Instant,
        every: Duration,
        confirm_soon: bool,
    ) -> (Renewer, mpsc::UnboundedReceiver<LeaseEvent>) {
        let (events, rx) = mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel();
        let first = if confirm_soon { acquired + Handover::CONFIRM_AFTER } else { acquired + every };
        let watch = acquired + WATCH_AFTER;
        let task = tokio::spawn(renew_loop(lock, lease, first, every, watch, events, stopped));
        (Renewer { stop, task }, rx)
    }

    /// Stops renewing — abandoning a renewal in flight — and waits until the loop has ended, so
    /// that no renewal can run after the release that follows.
    pub async fn stop(self) -> Lock {
        let _ = self.stop.send(());
        let mut lock = self.task.await.expect("the renewal loop does not panic");
        lock.unwatch();
        lock
    }
}

async fn renew_loop(
    mut lock: Lock,
    mut lease: Lease,
    mut next: Instant,
    every: Duration,
    watch: Instant,
    events: mpsc::UnboundedSender<LeaseEvent>,
    mut stop: oneshot::Receiver<()>,
) -> Lock {
    let mut failures: u32 = 0;
    let mut watch = Some(watch);
    // A notice not checked yet (Redis did not answer, or it came within CHECK_GAP of the last
    // check), and when to check it.
    let mut unanswered: Option<(Revealed, Instant)> = None;
    // Until when a notice waits (CHECK_GAP after the last check that found the lock held).
    let mut quiet_until = Instant::now();
    // The notice whose check called for the renewal that is next, if one did.
    let mut prompted: Option<Revealed> = None;
    let last = loop {
        let step = tokio::select! {
            biased;
            _ = &mut stop => return lock,
            () = sleep_until(next) => Step::Renew,
            // The lease was confirmed on a node that is no longer the master: confirm it on
            // the new one now, before the key can expire there.
            () = lock.master_changed() => {
                tracing::info!("renewing on the new master");
                Step::Renew
            }
            () = at(watch) => {
                watch = None;
                lock.watch();
                Step::Check(Revealed::Watch)
            }
            () = at(unanswered.map(|(_, when)| when)) => Step::Check(unanswered.take().expect("armed").0),
            notice = lock.notice() => {
                let now = Instant::now();
                if now >= quiet_until {
                    Step::Check(notice.into())
                } else {
                    unanswered.get_or_insert((notice.into(), quiet_until));
                    continue;
                }
            }
        };
        if let Step::Check(by) = step {
            // This check answers for every notice heard so far.
            lock.drain_notices();
            // A switch of the master meanwhile leaves the old one's answer unwanted.
            let switching = lock.master_switching();
            let result = tokio::select! {
                biased;
                _ = &mut stop => return lock,
                r = tokio::time::timeout(CHECK_WITHIN, lock.check()) => Some(r.unwrap_or_else(|_| {
                    lock.reconnect();
                    Err(Fault::Unavailable(format!("no answer within {CHECK_WITHIN:?}")))
                })),
                () = switching => None,
            };
            match result {
                Some(Ok(Holding::Ours { expires_in })) => {
                    unanswered = None;
                    quiet_until = Instant::now() + CHECK_GAP;
                    tracing::debug!(notice = by.name(), "checked: the lock is still this run's");
                    // Someone cut the key's expiry short of this run's lease (a PEXPIRE): the
                    // lease is kept by renewing now, or the renewal finds the key gone.
                    let now = Instant::now();
                    if expires_in.is_some_and(|left| left < lease.remaining(now)) {
                        tracing::info!("the key expires before this run's lease ends; renewing now");
                        next = now;
                        prompted = Some(by);
                    }
                }
                Some(Ok(Holding::Lost)) => break LeaseEvent::Lost(by),
                Some(Err(fault)) => {
                    tracing::debug!(notice = by.name(), error = %fault, "the lock could not be checked; trying again");
                    unanswered = Some((by, Instant::now() + recheck_delay()));
                }
                None => next = Instant::now(),
            }
            continue;
        }
        let sent = Instant::now();
        if lease.expired(sent) {
            break LeaseEvent::Expired;
        }
        if lease.sending(sent) {
            let _ = events.send(LeaseEvent::Renewing(lease));
        }
        let switching = lock.master_switching();
        let result = tokio::select! {
            biased;
            _ = &mut stop => return lock,
            r = lock.renew() => r,
            // The old master may be stopped: its answer would come at the command timeout,
            // if at all, and would not count. Renew on the new one now.
            () = switching => {
                tracing::info!("the Sentinels switched the master during a renewal; renewing on the new one");
                next = Instant::now();
                continue;
            }
        };
        let now = Instant::now();
        let prompted_by = prompted.take();
        match result {
            Ok(true) if lease.renewed(sent, now) => {
                tracing::debug!(left_ms = lease.remaining(now).as_millis() as u64, "renewed");
                failures = 0;
                next = sent + every;
                let _ = events.send(LeaseEvent::Renewed(lease));
            }
            Ok(true) => break LeaseEvent::Expired,
            Ok(false) | Err(Fault::WrongType(_)) => {
                break LeaseEvent::Lost(prompted_by.unwrap_or(Revealed::Renewal));
            }
            Err(fault) => {
                failures += 1;
                let left = lease.remaining(now);
                next = now + retry_delay(failures).min(left);
                let _ = events.send(LeaseEvent::Failing { error: fault.to_string(), left });
            }
        }
    };
    let _ = events.send(last);
    let _ = stop.await;
    lock
}

/// Resolves at `when`; never without one.
async fn at(when: Option<Instant>) {
    match when {
        Some(when) => sleep_until(when).await,
        None => std::future::pending().await,
    }
}

/// Within [`RECHECK_WITHIN`], in its second half.
fn recheck_delay() -> Duration {
    RECHECK_WITHIN / 2 + full_jitter(RECHECK_WITHIN / 2, 0, RECHECK_WITHIN / 2)
}

/// A short, jittered pause before retrying a renewal.
fn retry_delay(failures: u32) -> Duration {
    Duration::from_millis(5) + full_jitter(Duration::from_millis(25), failures, Duration::from_secs(1))
}
