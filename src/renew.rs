//! The renewal loop: keeps the lease alive while the command runs and reports what happens to
//! the supervisor, which owns the decision to stop the command. Its retry schedule sits beside
//! those of `acquire/` and `release.rs`; `lock/` makes single attempts.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::backoff::full_jitter;
use crate::lock::{Fault, Handover, Lease, Lock};

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
    Lost,
    /// The deadline passed without a confirmed renewal.
    Expired,
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
        let task = tokio::spawn(renew_loop(lock, lease, first, every, events, stopped));
        (Renewer { stop, task }, rx)
    }

    /// Stops renewing — abandoning a renewal in flight — and waits until the loop has ended, so
    /// that no renewal can run after the release that follows.
    pub async fn stop(self) -> Lock {
        let _ = self.stop.send(());
        self.task.await.expect("the renewal loop does not panic")
    }
}

async fn renew_loop(
    mut lock: Lock,
    mut lease: Lease,
    mut next: Instant,
    every: Duration,
    events: mpsc::UnboundedSender<LeaseEvent>,
    mut stop: oneshot::Receiver<()>,
) -> Lock {
    let mut failures: u32 = 0;
    let last = loop {
        tokio::select! {
            biased;
            _ = &mut stop => return lock,
            () = sleep_until(next) => {}
            // The lease was confirmed on a node that is no longer the master: confirm it on
            // the new one now, before the key can expire there.
            () = lock.master_changed() => tracing::info!("renewing on the new master"),
        }
        let sent = Instant::now();
        if lease.expired(sent) {
            break LeaseEvent::Expired;
        }
        if lease.sending(sent) {
            let _ = events.send(LeaseEvent::Renewing(lease));
        }
        let result = tokio::select! {
            biased;
            _ = &mut stop => return lock,
            r = lock.renew() => r,
        };
        let now = Instant::now();
        match result {
            Ok(true) if lease.renewed(sent, now) => {
                tracing::debug!(left_ms = lease.remaining(now).as_millis() as u64, "renewed");
                failures = 0;
                next = sent + every;
                let _ = events.send(LeaseEvent::Renewed(lease));
            }
            Ok(true) => break LeaseEvent::Expired,
            Ok(false) | Err(Fault::WrongType(_)) => break LeaseEvent::Lost,
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

/// A short, jittered pause before retrying a renewal.
fn retry_delay(failures: u32) -> Duration {
    Duration::from_millis(5) + full_jitter(Duration::from_millis(25), failures, Duration::from_secs(1))
}
