//! The stop path: watches the command, the lease and the wrapper's signals, and stops the
//! command's process group before the lock could expire under it (docs/ARCHITECTURE.md § The lease,
//! the deadline and the stop path).
//!
//! The decisions live in [`machine`], which never touches a real process; this module feeds it
//! what happens and carries out what it asks for.

mod machine;

use std::time::Duration;

use nix::errno::Errno;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

use crate::child::{Child, Event as ChildEvent};
use crate::config::Config;
use crate::lock::Lease;
use crate::renew::LeaseEvent;
use crate::signals::Signals;
pub use machine::StopReason;
use machine::{Action, Input, Machine, Rules};

pub struct Ended {
    /// The exit status to leave with.
    pub code: u8,
    /// The command's own status, when it exited.
    pub command_code: Option<u8>,
    pub stopped: Option<StopReason>,
    /// Renewals confirmed and renewal attempts that failed while the command ran.
    pub renewals: u64,
    pub renewal_failures: u64,
    /// Whether the lock was lost (or its deadline passed) while the command ran.
    pub lost: bool,
    /// Processes of the command's group could not be stopped: the lock must be left to expire.
    pub survivors: bool,
    /// A script asked to release its lock and runs on (`unlock`).
    pub let_go: bool,
}

/// The lock while the command runs: the current lease and the renewer's reports.
pub struct Held<'a> {
    pub lease: Lease,
    pub events: &'a mut mpsc::UnboundedReceiver<LeaseEvent>,
}

/// Runs until the command has exited and every other process of its group is gone (or could
/// not be stopped). `held` is `None` for a run without a lock (`--fail-open`).
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
    let rules = Rules {
        grace: config.kill_grace,
        on_lost: config.on_lost,
        max_runtime_at: config.max_runtime.and_then(|d| started.checked_add(d)),
        foreground: child.owns_terminal(),
    };
    let (lease, mut events) = match held {
        Some(h) => (Some(h.lease), Some(h.events)),
        None => (None, None),
    };
    let mut machine = Machine::new(rules, lease, Instant::now());
    let mut shell = Supervisor { child, signals, reported_exit: false, actions: Vec::new() };

    let mut guardian_gone = shell.child.guard().gone();
    let mut stop_watch = tokio::time::interval(STOP_WATCH_EVERY);
    stop_watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The command's exit, seen and not yet given to the machine.
    let mut seen_exit = None;
    let finish = loop {
        if let Some(events) = events.as_deref_mut() {
            // Reports already queued come first: a stale lease must not trigger a stop.
            while let Ok(event) = events.try_recv() {
                shell.feed(&mut machine, Input::Lease(event));
            }
        }
        machine.tick(Instant::now(), &mut shell.actions);
        shell.carry_out(&mut machine);
        // An exit comes after the reports and the rules that fell due by the time it was seen:
        // one seen late (the wrapper was stopped, its guardian killed the group at the
        // deadline) never overtakes the deadline.
        if let Some(code) = seen_exit.take()
            && !shell.reported_exit
        {
            shell.reported_exit = true;
            shell.feed(&mut machine, Input::Exited(code));
        }
        if let Some(finish) = machine.finished() {
            break finish;
        }
        let wake = machine.next_wake().unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));

        let input = tokio::select! {
            biased;
            event = shell.child.wait(), if !shell.reported_exit => match event {
                ChildEvent::Exited(code) => {
                    seen_exit = Some(code);
                    None
                }
                ChildEvent::Stopped(_) => Some(Input::Stopped),
                ChildEvent::LetGo => Some(Input::LetGo),
            },
            event = next_event(&mut events) => match event {
                Some(event) => Some(Input::Lease(event)),
                None => {
                    // The renewer has finished; its last report was read.
                    events = None;
                    None
                }
            },
            sig = shell.signals.recv() => Some(Input::Signal(sig)),
            // On a terminal, Ctrl-Z may stop the group while the command itself waits in
            // vfork() and so never reports a stop: looked for now and then.
            _ = stop_watch.tick(), if shell.child.owns_terminal() => {
                shell.child.stop_pending_in_d().then_some(Input::Stopped)
            }
            () = sleep_until(wake) => None,
            // Someone killed the guardian while the command runs: another takes its place.
            () = &mut guardian_gone, if !shell.reported_exit => {
                shell.child.guard().replace();
                guardian_gone = shell.child.guard().gone();
                None
            }
        };
        if let Some(input) = input {
            let let_go = matches!(input, Input::LetGo);
            shell.feed(&mut machine, input);
            if let_go && !machine.let_go() {
                // At once: the script may be asking from the trap of the SIGTERM it is being
                // stopped with.
                for asked in shell.child.take_asked() {
                    asked.answer(&refusal(&machine));
                }
            }
        }
    };

    let (renewals, renewal_failures, lost) = (machine.renewals, machine.renewal_failures, machine.lost());
    Ended {
        code: finish.code,
        command_code: machine.exited(),
        stopped: machine.reason(),
        renewals,
        renewal_failures,
        lost,
        survivors: finish.survivors,
        let_go: machine.let_go(),
    }
}

/// `unlock`'s answer when the script cannot be let go of.
fn refusal(machine: &Machine) -> crate::script::Answer {
    use crate::exit::status;
    match machine.reason() {
        Some(StopReason::MaxRuntime) => {
            (status::MAX_RUNTIME, "--max-runtime elapsed: the script is being stopped".to_owned())
        }
        Some(StopReason::Signal(sig)) => (
            crate::exit::signal_status(sig as i32),
            format!("the holder got {sig}: the script is being stopped"),
        ),
        None if machine.lost() => (
            status::LEASE_LOST,
            "the lock was lost; the script runs on without it (--on-lost ignore)".to_owned(),
        ),
        Some(StopReason::LeaseLost) => (
            status::LEASE_LOST,
            "the lock was lost or could not be confirmed: the script is being stopped".to_owned(),
        ),
        None => (0, "the script has ended: the lock is being released".to_owned()),
    }
}

/// How often a command on a terminal is checked for a stop it cannot report (see
/// `Child::stop_pending_in_d`).
const STOP_WATCH_EVERY: Duration = Duration::from_millis(200);

/// The real world around the machine: the command's process group and the wrapper itself.
struct Supervisor<'c> {
    child: &'c mut Child,
    signals: &'c mut Signals,
    /// The command's exit was given to the machine.
    reported_exit: bool,
    /// Actions asked for and not yet carried out.
    actions: Vec<Action>,
}

impl Supervisor<'_> {
    fn feed(&mut self, machine: &mut Machine, input: Input) {
        machine.handle(input, Instant::now(), &mut self.actions);
        self.carry_out(machine);
        // The guardian keeps the deadline too, for a wrapper that cannot act by then.
        self.child.guard().lease_ends(machine.kill_deadline());
    }

    /// Carries out the actions asked for, feeding back what they found, until none is left.
    fn carry_out(&mut self, machine: &mut Machine) {
        while !self.actions.is_empty() {
            let action = self.actions.remove(0);
            let now = Instant::now();
            let mut out = std::mem::take(&mut self.actions);
            match action {
                Action::Signal(sig) => match self.child.signal_group(sig) {
                    Ok(()) => {}
                    Err(Errno::EPERM) => machine.handle(Input::Unkillable, now, &mut out),
                    Err(e) => tracing::warn!("cannot send {sig} to the command's process group: {e}"),
                },
                Action::Inspect => {
                    self.child.reap_orphans();
                    match (self.child.exit_code(), self.reported_exit) {
                        // The machine asks for another look once it knows.
                        (Some(code), false) => {
                            self.reported_exit = true;
                            machine.handle(Input::Exited(code), now, &mut out);
                        }
                        _ => machine.handle(Input::Group(self.child.group_state()), now, &mut out),
                    }
                }
                Action::SuspendSelf => {
                    if self.signals.take_continued() {
                        // SIGCONT came while the group was being stopped: nothing to wait for.
                        tracing::info!(
                            "continued (SIGCONT) before the wrapper stopped; resuming the command"
                        );
                    } else if std::process::id() == 1 {
                        // The kernel does not stop PID 1 on a signal from its own namespace.
                        tracing::info!("the wrapper is PID 1 and cannot be suspended; resuming the command");
                    } else {
                        self.child.suspend_with_command();
                    }
                    machine.handle(Input::Resumed, Instant::now(), &mut out);
                }
                Action::Resume => self.child.resume_group(),
            }
            self.actions = out;
            machine.tick(Instant::now(), &mut self.actions);
        }
    }
}

/// The renewer's next report (`None` once it has finished); never, when there is no lease.
async fn next_event(events: &mut Option<&mut mpsc::UnboundedReceiver<LeaseEvent>>) -> Option<LeaseEvent> {
    match events {
        Some(events) => events.recv().await,
        None => std::future::pending().await,
    }
}
