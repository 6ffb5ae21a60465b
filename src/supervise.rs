//! The stop path: watches the command, the lease and the wrapper's signals, and stops the
//! command's process group before the lock could expire under it (SPEC §4, §5).

use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

use crate::child::{Child, Event as ChildEvent};
use crate::config::{Config, OnLost};
use crate::exit::status;
use crate::lock::Lease;
use crate::lock::renewer::LeaseEvent;
use crate::signals::{Signals, is_stop_request};

/// Why the wrapper stopped the command, when it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Ownership was lost or could not be confirmed in time.
    LeaseLost,
    /// `--max-runtime` elapsed.
    MaxRuntime,
    /// The wrapper was asked to stop by a signal, which was passed on.
    Signal(Signal),
}

pub struct Ended {
    /// The exit status to leave with.
    pub code: u8,
    /// The command's own status.
    pub command_code: u8,
    pub stopped: Option<StopReason>,
}

/// Runs until the command has exited and every other process of its group is gone.
pub async fn supervise(
    child: &mut Child,
    mut lease: Lease,
    events: &mut mpsc::UnboundedReceiver<LeaseEvent>,
    signals: &mut Signals,
    config: &Config,
    started: Instant,
) -> Ended {
    let grace = config.kill_grace;
    let max_runtime_at = config.max_runtime.map(|d| started + d);
    let mut stopped: Option<StopReason> = None;
    // When SIGTERM went to the group; SIGKILL follows `grace` later.
    let mut termed_at: Option<Instant> = None;
    let mut killed = false;
    // Once the lease is gone it stays gone: nothing revives it.
    let mut lease_gone = false;
    let mut events_open = true;

    let command_code = loop {
        let now = Instant::now();
        let expired = lease.expired(now);
        if expired && !lease_gone {
            lease_gone = true;
            lease_lost(
                config,
                "the lease deadline passed without a confirmed renewal",
            );
        }
        if config.on_lost == OnLost::Terminate {
            if termed_at.is_none() && (lease_gone || now + grace >= lease.deadline()) {
                if !lease_gone {
                    tracing::warn!(
                        left_ms = lease.remaining(now).as_millis() as u64,
                        "ownership cannot be confirmed; stopping the command before the lease deadline"
                    );
                }
                stopped.get_or_insert(StopReason::LeaseLost);
                termed_at = Some(now);
                child.signal_group(Signal::SIGTERM);
            }
            // Whatever else is going on, nothing of the command may outlive the lease.
            if now >= kill_by(&lease) && !killed {
                killed = true;
                child.signal_group(Signal::SIGKILL);
            }
        }
        if let Some(at) = max_runtime_at
            && now >= at
            && termed_at.is_none()
        {
            tracing::warn!("--max-runtime reached; stopping the command");
            stopped.get_or_insert(StopReason::MaxRuntime);
            termed_at = Some(now);
            child.signal_group(Signal::SIGTERM);
        }
        if let Some(t) = termed_at
            && now >= t + grace
            && !killed
        {
            tracing::warn!("the command did not stop within --kill-grace; sending SIGKILL");
            killed = true;
            child.signal_group(Signal::SIGKILL);
        }

        // The next moment something must happen without an outside event.
        let mut wake = now + Duration::from_secs(3600);
        if !lease_gone {
            wake = wake.min(lease.deadline());
        }
        if config.on_lost == OnLost::Terminate && !killed {
            wake = wake.min(kill_by(&lease));
        }
        if config.on_lost == OnLost::Terminate && termed_at.is_none() {
            wake = wake.min(lease.deadline() - grace);
        }
        if let (Some(at), None) = (max_runtime_at, termed_at) {
            wake = wake.min(at);
        }
        if let (Some(t), false) = (termed_at, killed) {
            wake = wake.min(t + grace);
        }

        tokio::select! {
            biased;
            event = child.wait() => match event {
                ChildEvent::Exited(code) => break code,
                ChildEvent::Stopped(sig) => {
                    tracing::info!("the command was suspended ({sig}); suspending the wrapper too");
                    child.suspend_with_command();
                    if lease.expired(Instant::now()) && config.on_lost == OnLost::Terminate {
                        // Resumed after the lease lapsed: the top of the loop kills the group,
                        // which SIGKILL does even while it is stopped.
                        continue;
                    }
                    child.signal_group(Signal::SIGCONT);
                }
            },
            event = events.recv(), if events_open => match event {
                Some(LeaseEvent::Renewed(l)) if !lease_gone => lease = l,
                Some(LeaseEvent::Renewed(_)) => {}
                Some(LeaseEvent::Failing { error, left }) => tracing::warn!(
                    left_ms = left.as_millis() as u64,
                    "renewal failing, retrying: {error}"
                ),
                Some(LeaseEvent::Lost) => {
                    if !lease_gone {
                        lease_gone = true;
                        lease_lost(config, "the key no longer holds this run's value (deleted, replaced or expired)");
                    }
                }
                Some(LeaseEvent::Expired) => {}
                None => events_open = false,
            },
            sig = signals.recv() => {
                if sig == Signal::SIGWINCH && child.owns_terminal() {
                    // The kernel already delivered it to the command's (foreground) group.
                    continue;
                }
                if is_stop_request(sig) && termed_at.is_some() && matches!(sig, Signal::SIGTERM | Signal::SIGINT) {
                    tracing::warn!("second {sig} while stopping; sending SIGKILL");
                    killed = true;
                    child.signal_group(Signal::SIGKILL);
                } else {
                    tracing::info!("passing {sig} to the command");
                    child.signal_group(sig);
                    if is_stop_request(sig) && termed_at.is_none() {
                        stopped.get_or_insert(StopReason::Signal(sig));
                        termed_at = Some(Instant::now());
                    }
                }
            },
            () = sleep_until(wake) => {}
        }
    };

    finish_group(child, grace).await;

    let code = match stopped {
        Some(StopReason::LeaseLost) => status::LEASE_LOST,
        Some(StopReason::MaxRuntime) => status::MAX_RUNTIME,
        Some(StopReason::Signal(_)) | None => command_code,
    };
    Ended {
        code,
        command_code,
        stopped,
    }
}

/// SIGKILL goes out this much before the deadline, so that timer granularity and scheduling
/// delay cannot make the command outlive it.
const KILL_AHEAD: Duration = Duration::from_millis(10);

fn kill_by(lease: &Lease) -> Instant {
    lease.deadline() - KILL_AHEAD
}

fn lease_lost(config: &Config, why: &str) {
    match config.on_lost {
        OnLost::Terminate => tracing::error!("lock lost: {why}; stopping the command"),
        OnLost::Ignore => tracing::error!(
            "lock lost: {why}; the command keeps running WITHOUT the lock (--on-lost ignore)"
        ),
    }
}

/// After the command itself has exited, stops what is left of its process group (background
/// jobs it started): SIGTERM, then SIGKILL after `grace`.
async fn finish_group(child: &mut Child, grace: Duration) {
    if !child.group_alive() {
        return;
    }
    tracing::info!("the command exited but left processes in its group; stopping them");
    child.signal_group(Signal::SIGTERM);
    let kill_at = Instant::now() + grace;
    while child.group_alive() {
        if Instant::now() >= kill_at {
            child.signal_group(Signal::SIGKILL);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        child.reap_orphans();
    }
}
