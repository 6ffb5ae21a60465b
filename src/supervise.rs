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

/// SIGKILL goes out this much before the deadline, so that timer granularity and scheduling
/// delay cannot make the command outlive it.
const KILL_AHEAD: Duration = Duration::from_millis(10);

impl StopReason {
    fn as_str(self) -> &'static str {
        match self {
            StopReason::LeaseLost => "lease lost or unconfirmed",
            StopReason::MaxRuntime => "--max-runtime",
            StopReason::Signal(_) => "signal",
        }
    }
}

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
    /// Renewals confirmed and renewal attempts that failed while the command ran.
    pub renewals: u64,
    pub renewal_failures: u64,
    /// Whether the lock was lost (or its deadline passed) while the command ran.
    pub lost: bool,
}

/// The lock while the command runs: the current lease and the renewer's reports.
pub struct Held<'a> {
    pub lease: Lease,
    pub events: &'a mut mpsc::UnboundedReceiver<LeaseEvent>,
}

/// Runs until the command has exited and every other process of its group is gone. `held` is
/// `None` for a run without a lock (`--fail-open`).
///
/// Processes the command leaves behind in its group (background jobs) get SIGTERM when it
/// exits, then SIGKILL after `--kill-grace` — and, like the command, never outlive the lease.
pub async fn supervise(
    child: &mut Child,
    held: Option<Held<'_>>,
    signals: &mut Signals,
    config: &Config,
    started: Instant,
) -> Ended {
    let mut stop = Stopper { child, grace: config.kill_grace, reason: None, termed_at: None, killed: false };
    let mut watch = held.map(|h| LeaseWatch {
        lease: h.lease,
        events: h.events,
        gone: false,
        open: true,
        renewals: 0,
        renewal_failures: 0,
    });
    let max_runtime_at = config.max_runtime.and_then(|d| started.checked_add(d));
    // The command's own status, once it has exited.
    let mut exited: Option<u8> = None;

    let command_code = loop {
        let now = Instant::now();
        if let Some(w) = watch.as_mut() {
            // Reports already queued come first: a stale lease must not trigger a stop.
            while let Ok(event) = w.events.try_recv() {
                w.handle(Some(event), config.on_lost);
            }
            w.enforce(now, config.on_lost, &mut stop);
        }
        if let Some(code) = exited {
            stop.child.reap_orphans();
            if !stop.child.group_alive() {
                break code;
            }
        }
        if let Some(at) = max_runtime_at
            && now >= at
            && stop.termed_at.is_none()
        {
            stop.term(StopReason::MaxRuntime, now);
        }
        if let Some(t) = stop.termed_at
            && now >= t + stop.grace
            && !stop.killed
        {
            stop.kill("--kill-grace elapsed");
        }

        // The next moment something must happen without an outside event.
        let mut wake = now + Duration::from_secs(3600);
        if let Some(w) = &watch {
            wake = wake.min(w.next_action(config.on_lost, &stop));
        }
        if let (Some(at), None) = (max_runtime_at, stop.termed_at) {
            wake = wake.min(at);
        }
        if let (Some(t), false) = (stop.termed_at, stop.killed) {
            wake = wake.min(t + stop.grace);
        }
        if exited.is_some() {
            // Leftovers need not be our children, so their end may come without SIGCHLD.
            wake = wake.min(now + LEFTOVER_POLL);
        }

        tokio::select! {
            biased;
            event = stop.child.wait(), if exited.is_none() => match event {
                ChildEvent::Exited(code) => {
                    exited = Some(code);
                    if stop.child.group_alive() {
                        stop.term_leftovers(Instant::now());
                    }
                }
                ChildEvent::Stopped(sig) => {
                    tracing::info!("the command was suspended ({sig}); suspending the wrapper too");
                    suspend(&mut stop, watch.as_ref(), config.on_lost);
                }
            },
            event = next_event(&mut watch) => {
                if let Some(w) = watch.as_mut() {
                    w.handle(event, config.on_lost);
                }
            }
            sig = signals.recv() => match sig {
                Signal::SIGTTIN | Signal::SIGTTOU => {}
                Signal::SIGTSTP => {
                    tracing::info!("suspending the command and the wrapper (SIGTSTP)");
                    stop.child.signal_group(Signal::SIGTSTP);
                    suspend(&mut stop, watch.as_ref(), config.on_lost);
                }
                sig => stop.on_signal(sig),
            },
            () = sleep_until(wake) => {}
        }
    };

    let code = match stop.reason {
        Some(StopReason::LeaseLost) => status::LEASE_LOST,
        Some(StopReason::MaxRuntime) => status::MAX_RUNTIME,
        Some(StopReason::Signal(_)) | None => command_code,
    };
    let (renewals, renewal_failures, lost) =
        watch.as_ref().map_or((0, 0, false), |w| (w.renewals, w.renewal_failures, w.gone));
    Ended { code, command_code, stopped: stop.reason, renewals, renewal_failures, lost }
}

/// Job control: the wrapper stops itself along with the command, so the shell regains control.
/// Nothing renews the lock meanwhile: on resume the command continues only if the lease has
/// not lapsed; otherwise the top of the loop kills the group, stopped or not.
fn suspend(stop: &mut Stopper<'_>, watch: Option<&LeaseWatch<'_>>, on_lost: OnLost) {
    stop.child.suspend_with_command();
    let lapsed = watch.is_some_and(|w| w.lease.expired(Instant::now()));
    if !(lapsed && on_lost == OnLost::Terminate) {
        stop.child.resume_group();
    }
}

/// How often the group is checked for leftovers after the command itself has exited.
const LEFTOVER_POLL: Duration = Duration::from_millis(10);

/// Signals the command's group on the way to stopping it, once per step.
struct Stopper<'c> {
    child: &'c mut Child,
    grace: Duration,
    /// The first reason to stop; later ones do not replace it.
    reason: Option<StopReason>,
    /// When SIGTERM went to the group; SIGKILL follows `grace` later.
    termed_at: Option<Instant>,
    killed: bool,
}

impl Stopper<'_> {
    fn term(&mut self, reason: StopReason, now: Instant) {
        self.reason.get_or_insert(reason);
        if self.termed_at.is_none() {
            self.termed_at = Some(now);
            tracing::warn!(signal = "SIGTERM", reason = reason.as_str(), "stopping the command");
            self.child.signal_group(Signal::SIGTERM);
        }
    }

    /// SIGTERM to what the command left behind; no reason to stop is recorded, as the command
    /// itself ended on its own.
    fn term_leftovers(&mut self, now: Instant) {
        if self.termed_at.is_none() {
            self.termed_at = Some(now);
            tracing::info!(
                signal = "SIGTERM",
                reason = "the command exited, leaving processes in its group",
                "stopping the command"
            );
            self.child.signal_group(Signal::SIGTERM);
        }
    }

    fn kill(&mut self, reason: &str) {
        if !self.killed {
            self.killed = true;
            tracing::warn!(signal = "SIGKILL", reason, "stopping the command");
            self.child.signal_group(Signal::SIGKILL);
        }
    }

    fn on_signal(&mut self, sig: Signal) {
        if sig == Signal::SIGWINCH && self.child.owns_terminal() {
            // The kernel already delivered it to the command's (foreground) group.
            return;
        }
        if matches!(sig, Signal::SIGTERM | Signal::SIGINT) && self.termed_at.is_some() {
            self.kill("second signal while stopping");
            return;
        }
        tracing::info!(signal = sig.as_str(), "passing the signal to the command");
        if is_stop_request(sig) && self.termed_at.is_none() {
            self.reason.get_or_insert(StopReason::Signal(sig));
            self.termed_at = Some(Instant::now());
        }
        self.child.signal_group(sig);
    }
}

/// The lease as the supervisor sees it. Once gone it stays gone: nothing revives it.
struct LeaseWatch<'a> {
    lease: Lease,
    events: &'a mut mpsc::UnboundedReceiver<LeaseEvent>,
    gone: bool,
    open: bool,
    renewals: u64,
    renewal_failures: u64,
}

impl LeaseWatch<'_> {
    /// SIGTERM when ownership is lost or cannot be confirmed `kill-grace` before the deadline;
    /// SIGKILL just before the deadline, whatever else is going on.
    fn enforce(&mut self, now: Instant, on_lost: OnLost, stop: &mut Stopper<'_>) {
        if self.lease.expired(now) && !self.gone {
            self.gone = true;
            lease_lost(on_lost, "the lease deadline passed without a confirmed renewal");
        }
        if on_lost == OnLost::Ignore {
            return;
        }
        if stop.termed_at.is_none() && (self.gone || now + stop.grace >= self.lease.deadline()) {
            if !self.gone {
                tracing::warn!(
                    left_ms = self.lease.remaining(now).as_millis() as u64,
                    "ownership cannot be confirmed; stopping the command before the lease deadline"
                );
            }
            stop.term(StopReason::LeaseLost, now);
        }
        if now >= self.kill_by() {
            stop.reason.get_or_insert(StopReason::LeaseLost);
            stop.kill("the lease deadline");
        }
    }

    fn next_action(&self, on_lost: OnLost, stop: &Stopper<'_>) -> Instant {
        let mut at = self.lease.deadline();
        if on_lost == OnLost::Terminate {
            if !stop.killed {
                at = at.min(self.kill_by());
            }
            if stop.termed_at.is_none() {
                at = at.min(self.lease.deadline() - stop.grace);
            }
        }
        at
    }

    fn kill_by(&self) -> Instant {
        self.lease.deadline() - KILL_AHEAD
    }

    fn handle(&mut self, event: Option<LeaseEvent>, on_lost: OnLost) {
        match event {
            Some(LeaseEvent::Renewed(lease)) => {
                self.renewals += 1;
                if !self.gone {
                    self.lease = lease;
                }
            }
            Some(LeaseEvent::Expired) => {}
            Some(LeaseEvent::Failing { error, left }) => {
                self.renewal_failures += 1;
                tracing::warn!(left_ms = left.as_millis() as u64, error = %error, "renewal failing, retrying")
            }
            Some(LeaseEvent::Lost) => {
                if !self.gone {
                    self.gone = true;
                    lease_lost(
                        on_lost,
                        "the key no longer holds this run's value (deleted, replaced or expired)",
                    );
                }
            }
            None => self.open = false,
        }
    }
}

/// The renewer's next report; never, when there is no lease or the renewer has finished.
async fn next_event(watch: &mut Option<LeaseWatch<'_>>) -> Option<LeaseEvent> {
    match watch {
        Some(w) if w.open => w.events.recv().await,
        _ => std::future::pending().await,
    }
}

fn lease_lost(on_lost: OnLost, why: &str) {
    match on_lost {
        // The run's one error line comes at its end (exit 125); this is the moment it happened.
        OnLost::Terminate => tracing::warn!(reason = why, "lock lost; stopping the command"),
        OnLost::Ignore => {
            tracing::error!(
                reason = why,
                "lock lost; the command keeps running WITHOUT the lock (--on-lost ignore)"
            )
        }
    }
}
