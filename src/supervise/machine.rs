//! The supervisor's decisions, apart from any real process or clock: what to do when the
//! command exits or stops, when the renewer reports, when a signal arrives, and when a timed
//! rule falls due. The caller ([`super::supervise`]) feeds it [`Input`]s, carries out the
//! [`Action`]s it asks for and sleeps until [`Machine::next_wake`]; tests drive it the same way
//! on a paused clock.
//!
//! Each timed rule is one [`Timer`]: [`Machine::timers`] says when each is due, and the same
//! list decides both what fires in [`Machine::tick`] and when to wake up next, so acting and
//! waking cannot drift apart.

use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::time::Instant;

use crate::child::Group;
use crate::config::OnLost;
use crate::exit::status;
use crate::lock::KILL_AHEAD;
use crate::lock::Lease;
use crate::renew::{LeaseEvent, Revealed};
use crate::signals::is_stop_request;

/// How long processes get to die after SIGKILL before the wrapper stops waiting for them (they
/// are unkillable: another user's, or stuck in the kernel).
pub const KILL_WAIT: Duration = Duration::from_millis(500);
/// How often the command's group is looked at while it must be watched without SIGCHLD:
/// leftovers after the command exited (they need not be the wrapper's children), and a
/// suspension waiting for every member to stop.
pub const POLL_EVERY: Duration = Duration::from_millis(10);

/// What the machine is told about its world.
#[derive(Debug)]
pub enum Input {
    /// The command itself exited with this status (128+N for signal N).
    Exited(u8),
    /// The command was stopped by job control on its terminal (Ctrl-Z).
    Stopped,
    /// What the command's process group looks like now (answers [`Action::Inspect`]).
    Group(Group),
    /// The renewer's report.
    Lease(LeaseEvent),
    /// A signal the wrapper received.
    Signal(Signal),
    /// A signal to the command's group failed with EPERM: it runs as another user.
    Unkillable,
    /// The wrapper runs again after [`Action::SuspendSelf`].
    Resumed,
    /// A script asks to release its lock and run on without it (`unlock`): granted unless
    /// the script is being stopped, has exited, or the lock is lost.
    LetGo,
}

/// What the machine asks its caller to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Send this signal to the command's process group.
    Signal(Signal),
    /// Reap what has ended and report the group's state ([`Input::Group`]).
    Inspect,
    /// Stop the wrapper itself (job control); report [`Input::Resumed`] when continued.
    SuspendSelf,
    /// Continue the command's group after a suspension.
    Resume,
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

impl StopReason {
    fn as_str(self) -> &'static str {
        match self {
            StopReason::LeaseLost => "lease lost or unconfirmed",
            StopReason::MaxRuntime => "--max-runtime",
            StopReason::Signal(_) => "signal",
        }
    }
}

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finish {
    /// The exit status to leave with.
    pub code: u8,
    /// Processes of the group outlived SIGKILL (or could not be signalled): the lock must not
    /// be released under them; it expires by itself.
    pub survivors: bool,
}

/// The fixed rules of one run.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// `--kill-grace`: SIGTERM → SIGKILL, and TSTP → STOP.
    pub grace: Duration,
    pub on_lost: OnLost,
    pub max_runtime_at: Option<Instant>,
    /// The command's group is the terminal's foreground group: the kernel already delivers
    /// SIGWINCH to it.
    pub foreground: bool,
}

/// A suspension asked for (SIGTSTP to the wrapper, or the command stopped on its terminal),
/// waiting for every member of the group to stop.
#[derive(Debug, Clone, Copy)]
struct Suspension {
    asked_at: Instant,
    /// SIGSTOP went to the group because SIGTSTP did not stop it within the grace.
    forced: bool,
    /// The wrapper was asked to stop itself ([`Action::SuspendSelf`]); it is, until
    /// [`Input::Resumed`]. Another look at the stopped group meanwhile asks nothing more.
    self_stopped: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// The lease deadline: from here on ownership is gone.
    Deadline,
    /// SIGTERM `grace` before the deadline (at once when ownership is lost).
    LeaseTerm,
    /// SIGKILL just before the deadline.
    LeaseKill,
    MaxRuntime,
    /// SIGKILL `grace` after the stop began.
    Escalate,
    /// SIGSTOP to a group that did not stop on SIGTSTP within `grace`.
    ForceStop,
    /// Look at the group again.
    Poll,
    /// Stop waiting for processes that outlived SIGKILL.
    GiveUp,
}

/// One timed rule: when it is due and what it does.
#[derive(Debug, Clone, Copy)]
struct Timer {
    at: Instant,
    due: Due,
}

pub struct Machine {
    rules: Rules,
    /// The current lease; `None` for a run without a lock (`--fail-open`).
    lease: Option<Lease>,
    /// When ownership was lost or its deadline passed. Once lost, it stays lost: a renewal
    /// reported later never revives it.
    lost_at: Option<Instant>,
    pub renewals: u64,
    pub renewal_failures: u64,
    /// The first reason to stop the command; later ones do not replace it.
    reason: Option<StopReason>,
    /// When stopping the group began (SIGTERM, or a forwarded INT/QUIT): SIGKILL follows
    /// `grace` later.
    stop_began: Option<Instant>,
    /// SIGTERM itself went to the group.
    term_sent: bool,
    killed_at: Option<Instant>,
    /// The command's own status, once it has exited.
    exited: Option<u8>,
    suspension: Option<Suspension>,
    /// When the group was last looked at (or asked to be).
    inspected_at: Instant,
    unkillable: bool,
    giving_up: bool,
    /// The script was let go of: it runs on, and nothing of it is stopped.
    let_go: bool,
    finished: Option<Finish>,
}

impl Machine {
    pub fn new(rules: Rules, lease: Option<Lease>, now: Instant) -> Self {
        Machine {
            rules,
            lease,
            lost_at: None,
            renewals: 0,
            renewal_failures: 0,
            reason: None,
            stop_began: None,
            term_sent: false,
            killed_at: None,
            exited: None,
            suspension: None,
            inspected_at: now,
            unkillable: false,
            giving_up: false,
            let_go: false,
            finished: None,
        }
    }

    pub fn finished(&self) -> Option<Finish> {
        self.finished
    }

    pub fn reason(&self) -> Option<StopReason> {
        self.reason
    }

    /// The lease deadline by which nothing of the command may run (`None`: no lease, or
    /// `--on-lost ignore`, which lets it run on without one).
    pub fn kill_deadline(&self) -> Option<Instant> {
        self.lease.filter(|_| self.rules.on_lost == OnLost::Terminate).map(|l| l.deadline())
    }

    /// Whether the script was let go of ([`Input::LetGo`]).
    pub fn let_go(&self) -> bool {
        self.let_go
    }

    /// Whether ownership was lost (or its deadline passed) while the command ran.
    pub fn lost(&self) -> bool {
        self.lost_at.is_some()
    }

    /// The command's own status, once it has exited.
    pub fn exited(&self) -> Option<u8> {
        self.exited
    }

    /// The moment something must happen without an outside event.
    pub fn next_wake(&self) -> Option<Instant> {
        self.timers().map(|t| t.at).min()
    }

    /// Takes in one event. Call [`Machine::tick`] after a batch of inputs: reports already
    /// queued come first, so that a stale lease cannot trigger a stop.
    pub fn handle(&mut self, input: Input, now: Instant, out: &mut Vec<Action>) {
        if self.finished.is_some() {
            return;
        }
        match input {
            Input::Exited(code) => {
                self.exited = Some(code);
                self.suspension = None;
                self.inspect(now, out);
            }
            Input::Stopped => {
                if self.exited.is_none() && self.stop_began.is_none() && self.suspension.is_none() {
                    tracing::info!(
                        "the command was suspended; suspending the wrapper once its group has stopped"
                    );
                    self.suspension = Some(Suspension { asked_at: now, forced: false, self_stopped: false });
                    self.inspect(now, out);
                }
            }
            Input::Group(group) => self.group(group, now, out),
            Input::Lease(event) => self.lease_event(event, now),
            Input::Signal(sig) => self.signal(sig, now, out),
            Input::Unkillable => {
                if !self.unkillable {
                    self.unkillable = true;
                    // The moment it happened; the run's one error line comes at its end.
                    tracing::warn!(
                        "cannot signal the command's process group (EPERM): it runs as another user \
                         (sudo, a setuid program); it cannot be stopped, and the lock will expire under it \
                         (--no-new-privs prevents this)"
                    );
                }
                self.finish_if_hopeless();
            }
            Input::LetGo => {
                if self.exited.is_none() && self.stop_began.is_none() && self.lost_at.is_none() {
                    self.let_go = true;
                    self.suspension = None;
                    self.finished = Some(Finish { code: 0, survivors: false });
                }
            }
            Input::Resumed => {
                self.suspension = None;
                let lapsed = self.lease.is_some_and(|l| l.expired(now));
                // A lapsed lease is the timers' business: the group is killed stopped as it is.
                if !(lapsed && self.rules.on_lost == OnLost::Terminate) {
                    out.push(Action::Resume);
                }
            }
        }
    }

    /// Carries out every timed rule that is due at `now`.
    pub fn tick(&mut self, now: Instant, out: &mut Vec<Action>) {
        // Each rule changes the state it is due on, so this ends; the bound is a safeguard.
        for _ in 0..32 {
            if self.finished.is_some() {
                return;
            }
            let Some(timer) = self.timers().filter(|t| t.at <= now).min_by_key(|t| t.at) else {
                return;
            };
            self.fire(timer.due, now, out);
        }
    }

    fn timers(&self) -> impl Iterator<Item = Timer> + '_ {
        let terminate = self.rules.on_lost == OnLost::Terminate;
        let grace = self.rules.grace;
        let live = self.finished.is_none();
        let lease = self.lease.filter(|_| live);
        let timer = |at: Option<Instant>, due| at.map(|at| Timer { at, due });
        [
            timer(lease.filter(|_| self.lost_at.is_none()).map(|l| l.deadline()), Due::Deadline),
            timer(
                lease.filter(|_| terminate && !self.term_sent).map(|l| match self.lost_at {
                    Some(at) => at,
                    None => l.deadline().checked_sub(grace).unwrap_or(l.deadline()),
                }),
                Due::LeaseTerm,
            ),
            timer(
                lease
                    .filter(|_| terminate && self.killed_at.is_none())
                    .map(|l| l.deadline().checked_sub(KILL_AHEAD).unwrap_or(l.deadline())),
                Due::LeaseKill,
            ),
            timer(self.rules.max_runtime_at.filter(|_| live && self.stop_began.is_none()), Due::MaxRuntime),
            timer(
                self.stop_began.filter(|_| live && self.killed_at.is_none()).map(|t| t + grace),
                Due::Escalate,
            ),
            timer(
                self.suspension
                    .filter(|s| live && !s.forced && self.killed_at.is_none())
                    .map(|s| s.asked_at + grace),
                Due::ForceStop,
            ),
            timer(
                (live && (self.suspension.is_some() || self.exited.is_some()))
                    .then(|| self.inspected_at + POLL_EVERY),
                Due::Poll,
            ),
            timer(self.killed_at.filter(|_| live && !self.giving_up).map(|t| t + KILL_WAIT), Due::GiveUp),
        ]
        .into_iter()
        .flatten()
    }

    fn fire(&mut self, due: Due, now: Instant, out: &mut Vec<Action>) {
        match due {
            Due::Deadline => {
                self.lose(now, "the lease deadline passed without a confirmed renewal", None);
                self.finish_if_hopeless();
            }
            Due::LeaseTerm => {
                if self.lost_at.is_none() {
                    let left = self.lease.map_or(Duration::ZERO, |l| l.remaining(now));
                    tracing::warn!(
                        left_ms = left.as_millis() as u64,
                        "ownership cannot be confirmed; stopping the command before the lease deadline"
                    );
                }
                self.term(StopReason::LeaseLost, now, out);
            }
            Due::LeaseKill => {
                self.reason.get_or_insert(StopReason::LeaseLost);
                self.kill("the lease deadline", now, out);
            }
            Due::MaxRuntime => self.term(StopReason::MaxRuntime, now, out),
            Due::Escalate => self.kill("--kill-grace elapsed", now, out),
            Due::ForceStop => {
                if let Some(s) = self.suspension.as_mut() {
                    s.forced = true;
                }
                tracing::warn!(
                    signal = "SIGSTOP",
                    "the command's group did not stop on SIGTSTP within --kill-grace; stopping it"
                );
                out.push(Action::Signal(Signal::SIGSTOP));
                self.inspect(now, out);
            }
            Due::Poll => self.inspect(now, out),
            Due::GiveUp => {
                // One last look (the group may have just emptied) decides.
                self.giving_up = true;
                self.inspect(now, out);
            }
        }
    }

    fn inspect(&mut self, now: Instant, out: &mut Vec<Action>) {
        self.inspected_at = now;
        out.push(Action::Inspect);
    }

    fn group(&mut self, group: Group, now: Instant, out: &mut Vec<Action>) {
        self.inspected_at = now;
        match (self.exited, group) {
            (Some(code), Group::Empty) => {
                self.finished = Some(Finish { code: self.code(code), survivors: false });
                return;
            }
            (Some(_), _) if !self.term_sent => {
                // Whatever ended the command, what it left behind gets SIGTERM now.
                self.term_sent = true;
                self.stop_began.get_or_insert(now);
                tracing::info!(
                    signal = "SIGTERM",
                    reason = "the command exited, leaving processes in its group",
                    "stopping the command"
                );
                out.push(Action::Signal(Signal::SIGTERM));
            }
            (None, Group::Stopped)
                if self.suspension.is_some_and(|s| !s.self_stopped) && self.killed_at.is_none() =>
            {
                tracing::info!("the command's group has stopped; suspending the wrapper");
                if let Some(s) = self.suspension.as_mut() {
                    s.self_stopped = true;
                }
                out.push(Action::SuspendSelf);
                return;
            }
            (None, Group::Stopped) if self.suspension.is_some_and(|s| s.self_stopped) => return,
            _ => {}
        }
        if self.giving_up {
            self.survive();
        }
    }

    fn lease_event(&mut self, event: LeaseEvent, now: Instant) {
        match event {
            LeaseEvent::Renewed(lease) => {
                self.renewals += 1;
                if self.lost_at.is_none() {
                    self.lease = Some(lease);
                }
            }
            LeaseEvent::Renewing(lease) => {
                if self.lost_at.is_none() {
                    self.lease = Some(lease);
                }
            }
            LeaseEvent::Failing { error, left } => {
                self.renewal_failures += 1;
                let left_ms = left.as_millis() as u64;
                tracing::warn!(left_ms, error = %error, "renewal failing, retrying");
            }
            LeaseEvent::Lost(by) => {
                self.lose(
                    now,
                    "the key no longer holds this run's value (deleted, replaced or expired)",
                    Some(by),
                );
                self.finish_if_hopeless();
            }
            // The deadline is the machine's own timer.
            LeaseEvent::Expired => {}
        }
    }

    fn signal(&mut self, sig: Signal, now: Instant, out: &mut Vec<Action>) {
        match sig {
            Signal::SIGTTIN | Signal::SIGTTOU => {}
            // Continued before the group had stopped: the suspension is called off.
            Signal::SIGCONT => {
                if self.suspension.take().is_some() {
                    tracing::info!(
                        "continued (SIGCONT) before the suspension took effect; resuming the command"
                    );
                    out.push(Action::Resume);
                }
            }
            Signal::SIGWINCH if self.rules.foreground => {}
            Signal::SIGTSTP => {
                if self.exited.is_none() && self.stop_began.is_none() && self.suspension.is_none() {
                    tracing::info!("suspending the command, then the wrapper (SIGTSTP)");
                    out.push(Action::Signal(Signal::SIGTSTP));
                    self.suspension = Some(Suspension { asked_at: now, forced: false, self_stopped: false });
                    self.inspected_at = now;
                }
            }
            Signal::SIGTERM | Signal::SIGINT if self.stop_began.is_some() => {
                self.kill("second signal while stopping", now, out);
            }
            sig => {
                tracing::info!(signal = sig.as_str(), "passing the signal to the command");
                out.push(Action::Signal(sig));
                if is_stop_request(sig) {
                    self.reason.get_or_insert(StopReason::Signal(sig));
                    self.stop_began.get_or_insert(now);
                    self.term_sent |= sig == Signal::SIGTERM;
                    self.call_off_suspension(out);
                }
            }
        }
    }

    /// `by`: what found the key not ours, when something did (not the deadline).
    fn lose(&mut self, now: Instant, why: &str, by: Option<Revealed>) {
        if self.lost_at.is_some() || self.lease.is_none() {
            return;
        }
        self.lost_at = Some(now);
        let revealed_by = by.map(Revealed::name);
        match self.rules.on_lost {
            // The run's one error line comes at its end (exit 125); this is the moment it happened.
            OnLost::Terminate => tracing::warn!(reason = why, revealed_by, "lock lost; stopping the command"),
            OnLost::Ignore => tracing::error!(
                reason = why,
                revealed_by,
                "lock lost; the command keeps running WITHOUT the lock (--on-lost ignore)"
            ),
        }
    }

    /// A command that cannot be signalled keeps running after the lease is gone: waiting for
    /// it would only hide that. The run ends at once, without releasing.
    fn finish_if_hopeless(&mut self) {
        if self.unkillable && self.lost_at.is_some() && self.rules.on_lost == OnLost::Terminate {
            self.reason.get_or_insert(StopReason::LeaseLost);
            self.survive();
        }
    }

    /// Processes of the group could not be stopped: whatever the command's own status, the run
    /// did not end cleanly, and says so with 125.
    fn survive(&mut self) {
        self.finished = Some(Finish { code: status::LEASE_LOST, survivors: true });
    }

    fn term(&mut self, reason: StopReason, now: Instant, out: &mut Vec<Action>) {
        self.reason.get_or_insert(reason);
        self.stop_began.get_or_insert(now);
        if !self.term_sent {
            self.term_sent = true;
            tracing::warn!(signal = "SIGTERM", reason = reason.as_str(), "stopping the command");
            out.push(Action::Signal(Signal::SIGTERM));
        }
        self.call_off_suspension(out);
    }

    /// A stop while a suspension is under way: members the suspension stopped are continued, so
    /// that they can act on the signal that asks them to stop.
    fn call_off_suspension(&mut self, out: &mut Vec<Action>) {
        if self.suspension.take().is_some() {
            out.push(Action::Resume);
        }
    }

    fn kill(&mut self, why: &str, now: Instant, out: &mut Vec<Action>) {
        if self.killed_at.is_none() {
            self.killed_at = Some(now);
            self.stop_began.get_or_insert(now);
            self.suspension = None;
            tracing::warn!(signal = "SIGKILL", reason = why, "stopping the command");
            out.push(Action::Signal(Signal::SIGKILL));
        }
    }

    /// The status for a command that exited with `code`: the wrapper's own when it stopped
    /// the command for the lease or the runtime limit.
    fn code(&self, code: u8) -> u8 {
        match self.reason {
            Some(StopReason::LeaseLost) => status::LEASE_LOST,
            Some(StopReason::MaxRuntime) => status::MAX_RUNTIME,
            Some(StopReason::Signal(_)) | None => code,
        }
    }
}

#[cfg(test)]
mod tests;
