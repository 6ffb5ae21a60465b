//! The machine driven by generated event orders on tokio's paused clock, against a model of
//! the command's process group, checking the supervisor's invariants after every step:
//!
//! 1. with `--on-lost terminate`, every process of the group is dead (SIGKILLed) by
//!    `deadline − KILL_AHEAD` of the last confirmed lease, and gets SIGTERM as soon as the
//!    lock is reported lost — unless it cannot be signalled, and then the run ends as soon as
//!    the lease is gone;
//! 2. the wrapper never suspends itself while a member of the group can run;
//! 3. a SIGTERM or SIGINT to the wrapper always ends the run within `grace + KILL_WAIT`
//!    (plus one poll);
//! 4. a renewal reported after the lease lapsed never revives it;
//! 5. the run ends normally only when nothing of the group is left, with the status the
//!    command and the stop reason call for;
//! 6. a stop request sent to the group reaches the command, even one a suspension had stopped;
//! 7. once the command has exited, what it left behind gets SIGTERM, then SIGKILL after the
//!    grace: the run ends within `grace + KILL_WAIT` (plus polls);
//! 8. the machine's deadline is never later than the key's expiry as Redis last set it, minus
//!    the drift of that write, whether the run started on a lock handed over for longer or
//!    shorter than its TTL, and whether a renewal was confirmed, carried out with its reply
//!    lost, or lost on the way (a renewal in flight counts as carried out as it went out).
//!
//! Invariant 1 is checked against that expiry too (a model of Redis), not against the lease the
//! code under test computes.

use std::time::Duration;

use proptest::prelude::*;
use tokio::time::{Instant, advance};

use super::*;
use crate::lock::drift;
use crate::renew::{LeaseEvent, Revealed};

/// Something that happens in the world, after a pause.
#[derive(Debug, Clone)]
enum Ev {
    /// The renewer sends a renewal (if none is in flight).
    RenewSend,
    /// The renewal in flight has this fate.
    RenewReply(Fate),
    /// The renewer finds the key not ours: at a renewal, or by a notice from Redis between
    /// renewals (an invalidation, a connection that ended, the watch's first check).
    Lost(Revealed),
    Signal(Signal),
    /// The command exits by itself (its leftovers stay).
    CommandExits(u8),
    LeftoverExits,
    /// Ctrl-Z on the terminal: SIGTSTP to the whole group, from the kernel.
    CtrlZ,
    /// SIGCONT to the wrapper from outside (`fg`, `kill -CONT`).
    Continue,
    /// A script asks to be let go of (`unlock`).
    LetGo,
}

/// What becomes of a renewal: Redis carries it out or not, its reply arrives or not.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Confirmed,
    ReplyLost,
    RequestLost,
}

#[derive(Debug, Clone)]
struct Case {
    ttl_ms: u64,
    /// The run started on a lock a release handed over for this long, counted from this much
    /// before the start.
    handover: Option<(u64, u64)>,
    grace_ms: u64,
    terminate: bool,
    foreground: bool,
    max_runtime_ms: Option<u64>,
    /// Whether the command and its leftovers ignore SIGTERM, SIGINT/QUIT and SIGTSTP.
    ignores_term: bool,
    ignores_int: bool,
    ignores_tstp: bool,
    leftovers: usize,
    /// The group runs as another user: every signal fails with EPERM.
    unkillable: bool,
    events: Vec<(u64, Ev)>,
}

impl Case {
    /// A command with one background job, both well behaved, under `--on-lost terminate`.
    fn one_leftover() -> Self {
        Case {
            ttl_ms: 3000,
            handover: None,
            grace_ms: 500,
            terminate: true,
            foreground: false,
            max_runtime_ms: None,
            ignores_term: false,
            ignores_int: false,
            ignores_tstp: false,
            leftovers: 1,
            unkillable: false,
            events: Vec::new(),
        }
    }
}

fn signal() -> impl Strategy<Value = Signal> {
    prop_oneof![
        Just(Signal::SIGTERM),
        Just(Signal::SIGINT),
        Just(Signal::SIGQUIT),
        Just(Signal::SIGHUP),
        Just(Signal::SIGUSR1),
        Just(Signal::SIGTSTP),
        Just(Signal::SIGWINCH),
        Just(Signal::SIGTTIN),
    ]
}

fn event() -> impl Strategy<Value = Ev> {
    prop_oneof![
        3 => Just(Ev::RenewSend),
        3 => prop_oneof![4 => Just(Fate::Confirmed), 1 => Just(Fate::ReplyLost), 1 => Just(Fate::RequestLost)]
            .prop_map(Ev::RenewReply),
        1 => prop_oneof![
            Just(Revealed::Renewal),
            Just(Revealed::Watch),
            Just(Revealed::Invalidation),
            Just(Revealed::Disconnect)
        ]
        .prop_map(Ev::Lost),
        2 => signal().prop_map(Ev::Signal),
        1 => prop_oneof![Just(0u8), Just(3), Just(130)].prop_map(Ev::CommandExits),
        1 => Just(Ev::LeftoverExits),
        1 => Just(Ev::CtrlZ),
        1 => Just(Ev::Continue),
        1 => Just(Ev::LetGo),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        (
            prop_oneof![Just(1000u64), Just(3000)],
            proptest::option::weighted(0.4, (prop_oneof![Just(500u64), Just(2000), Just(6000)], 0u64..500)),
        ),
        (prop_oneof![Just(5u64), Just(200), Just(500)], any::<bool>(), any::<bool>()),
        proptest::option::weighted(0.2, 100u64..4000),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        (0usize..3, proptest::bool::weighted(0.15)),
        proptest::collection::vec((0u64..1500, event()), 0..24),
    )
        .prop_map(
            |(
                (ttl_ms, handover),
                (grace_ms, terminate, foreground),
                max_runtime_ms,
                (ignores_term, ignores_int, ignores_tstp),
                (leftovers, unkillable),
                events,
            )| Case {
                ttl_ms,
                handover,
                grace_ms,
                terminate,
                foreground,
                max_runtime_ms,
                ignores_term,
                ignores_int,
                ignores_tstp,
                leftovers,
                unkillable,
                events,
            },
        )
}

/// One process of the group.
#[derive(Debug, Clone)]
struct Proc {
    alive: bool,
    stopped: bool,
    /// Signals that reached it while stopped: it acts on them once continued.
    pending: Vec<Signal>,
}

/// The world around the machine: the command, its leftovers, the renewer, the wrapper.
struct World {
    case: Case,
    command: Proc,
    exit: Option<u8>,
    /// When the command exited (by itself or by a signal).
    exited_at: Option<Instant>,
    exit_reported: bool,
    leftovers: Vec<Proc>,
    /// The renewer's own lease (`None` once it has reported its end).
    renewer: Option<Lease>,
    /// When the renewal in flight went out.
    in_flight: Option<Instant>,
    /// Redis's key: its expiry as last written by a write this run knows was carried out,
    /// minus the drift of that write.
    valid_until: Instant,
    /// The same for the renewal in flight, were it carried out as it went out.
    valid_if_sent: Option<Instant>,
    lost_at: Option<Instant>,
    suspended: bool,
    /// What the shell still has queued when the wrapper stops itself: carried out once it runs
    /// again, before what the machine answers to its resumption (as the real shell does).
    queued: Vec<Action>,
    /// Signals that reached the wrapper while it was suspended: handled when it runs again.
    pending: Vec<Signal>,
    /// The first stop request (TERM, INT, QUIT) the live command's group was sent, and when.
    forwarded: Option<(Signal, Instant)>,
    /// The first SIGTERM/SIGINT the wrapper handled.
    asked_to_stop: Option<Instant>,
    term_seen: bool,
    machine: Machine,
}

impl World {
    fn new(case: Case) -> Self {
        let now = Instant::now();
        let ttl = Duration::from_millis(case.ttl_ms);
        let (lease, valid_until) = match case.handover {
            Some((grant_ms, before_ms)) => {
                let grant = Duration::from_millis(grant_ms);
                let sent = now.checked_sub(Duration::from_millis(before_ms)).unwrap_or(now);
                // The release ran after that attempt: at the earliest, as it went out.
                (Lease::handed(sent, grant, ttl), sent + grant - drift(grant))
            }
            None => (Lease::new(now, ttl), now + ttl - drift(ttl)),
        };
        let rules = Rules {
            grace: Duration::from_millis(case.grace_ms),
            on_lost: if case.terminate { OnLost::Terminate } else { OnLost::Ignore },
            max_runtime_at: case.max_runtime_ms.map(|ms| now + Duration::from_millis(ms)),
            foreground: case.foreground,
        };
        let leftovers = vec![Proc { alive: true, stopped: false, pending: Vec::new() }; case.leftovers];
        World {
            command: Proc { alive: true, stopped: false, pending: Vec::new() },
            exit: None,
            exited_at: None,
            exit_reported: false,
            leftovers,
            renewer: Some(lease),
            in_flight: None,
            valid_until,
            valid_if_sent: None,
            lost_at: None,
            suspended: false,
            queued: Vec::new(),
            pending: Vec::new(),
            forwarded: None,
            asked_to_stop: None,
            term_seen: false,
            machine: Machine::new(rules, Some(lease), now),
            case,
        }
    }

    fn live(&self) -> impl Iterator<Item = &Proc> {
        std::iter::once(&self.command).chain(&self.leftovers).filter(|p| p.alive)
    }

    fn group(&self) -> Group {
        if self.live().next().is_none() {
            Group::Empty
        } else if self.live().all(|p| p.stopped) {
            Group::Stopped
        } else {
            Group::Running
        }
    }

    fn input(&mut self, input: Input) {
        let mut out = Vec::new();
        self.machine.handle(input, Instant::now(), &mut out);
        self.carry_out(out);
    }

    /// What the real shell does: carry out actions, report back, tick, until quiet.
    fn carry_out(&mut self, mut out: Vec<Action>) {
        for _ in 0..256 {
            self.report_exit(&mut out);
            if out.is_empty() {
                self.machine.tick(Instant::now(), &mut out);
                self.report_exit(&mut out);
                if out.is_empty() {
                    return;
                }
            }
            let action = out.remove(0);
            let now = Instant::now();
            match action {
                Action::Signal(sig) => {
                    if matches!(sig, Signal::SIGTERM | Signal::SIGINT | Signal::SIGQUIT) && self.command.alive
                    {
                        self.forwarded.get_or_insert((sig, now));
                    }
                    if self.case.unkillable {
                        self.machine.handle(Input::Unkillable, now, &mut out);
                    } else {
                        self.deliver(sig);
                    }
                }
                Action::Inspect => {
                    let group = self.group();
                    self.machine.handle(Input::Group(group), now, &mut out);
                }
                Action::SuspendSelf => {
                    assert_eq!(self.group(), Group::Stopped, "suspended itself while the group runs");
                    assert!(!out.contains(&Action::SuspendSelf), "asked to suspend itself twice: {out:?}");
                    self.suspended = true;
                    // Nothing more happens until the wrapper is continued.
                    self.queued = out;
                    return;
                }
                Action::Resume => self.deliver(Signal::SIGCONT),
            }
        }
        panic!("the machine does not settle");
    }

    /// SIGCHLD: the command's exit reaches the machine as soon as it happens.
    fn report_exit(&mut self, out: &mut Vec<Action>) {
        if let (Some(code), false, false) = (self.exit, self.exit_reported, self.suspended) {
            self.exit_reported = true;
            self.machine.handle(Input::Exited(code), Instant::now(), out);
        }
    }

    fn deliver(&mut self, sig: Signal) {
        let case = self.case.clone();
        let was_running = self.command.alive && !self.command.stopped;
        let act = |p: &mut Proc, is_command: bool| -> Option<u8> {
            if !p.alive {
                return None;
            }
            Self::act(&case, p, is_command, sig)
        };
        if let Some(code) = act(&mut self.command, true) {
            self.exit = Some(code);
            self.exited_at = Some(Instant::now());
        }
        for p in &mut self.leftovers {
            act(p, false);
        }
        if was_running && self.command.alive && self.command.stopped && self.case.foreground {
            // waitpid(WUNTRACED) reports the stop of a foreground job.
            let mut out = Vec::new();
            self.machine.handle(Input::Stopped, Instant::now(), &mut out);
            self.carry_out(out);
        }
    }

    /// What `sig` does to one live process; its exit status if it ends it.
    fn act(case: &Case, p: &mut Proc, is_command: bool, sig: Signal) -> Option<u8> {
        {
            match sig {
                Signal::SIGKILL => {
                    p.alive = false;
                    Some(137)
                }
                Signal::SIGSTOP => {
                    p.stopped = true;
                    None
                }
                Signal::SIGCONT => {
                    p.stopped = false;
                    std::mem::take(&mut p.pending)
                        .into_iter()
                        .find_map(|pending| Self::act(case, p, is_command, pending).filter(|_| !p.alive))
                }
                Signal::SIGTSTP if !case.ignores_tstp => {
                    p.stopped = true;
                    None
                }
                // A stopped process acts on these once continued.
                _ if p.stopped => {
                    p.pending.push(sig);
                    None
                }
                Signal::SIGTERM if !case.ignores_term => {
                    p.alive = false;
                    Some(143)
                }
                // `sh` starts background jobs with INT and QUIT ignored.
                Signal::SIGINT | Signal::SIGQUIT if is_command && !case.ignores_int => {
                    p.alive = false;
                    Some(128 + sig as u8)
                }
                _ => None,
            }
        }
    }

    fn happen(&mut self, ev: Ev) {
        let now = Instant::now();
        if self.suspended {
            match ev {
                Ev::Signal(sig) => self.pending.push(sig),
                Ev::Continue => {
                    self.suspended = false;
                    let mut out = std::mem::take(&mut self.queued);
                    self.machine.handle(Input::Resumed, now, &mut out);
                    self.carry_out(out);
                    // Pending signals are handled in order, until one suspends the wrapper again.
                    let mut pending = std::mem::take(&mut self.pending).into_iter();
                    for sig in pending.by_ref() {
                        self.signal(sig);
                        if self.suspended {
                            break;
                        }
                    }
                    self.pending.extend(pending);
                }
                // The renewer is stopped with the process, and so is everything else here.
                _ => {}
            }
            return;
        }
        match ev {
            // As `renew::renew_loop` does.
            Ev::RenewSend => {
                let Some(mut lease) = self.renewer.filter(|_| self.in_flight.is_none()) else { return };
                if lease.expired(now) {
                    self.renewer = None;
                    self.input(Input::Lease(LeaseEvent::Expired));
                    return;
                }
                self.in_flight = Some(now);
                let ttl = Duration::from_millis(self.case.ttl_ms);
                self.valid_if_sent = Some(now + ttl - drift(ttl));
                if lease.sending(now) {
                    self.input(Input::Lease(LeaseEvent::Renewing(lease)));
                }
                self.renewer = Some(lease);
            }
            Ev::RenewReply(fate) => {
                let (Some(mut lease), Some(sent)) = (self.renewer, self.in_flight.take()) else { return };
                let carried_out = self.valid_if_sent.take();
                if !matches!(fate, Fate::RequestLost) && self.lost_at.is_none() {
                    self.valid_until = carried_out.expect("set as it went out");
                }
                if !matches!(fate, Fate::Confirmed) {
                    let left = lease.remaining(now);
                    self.input(Input::Lease(LeaseEvent::Failing { error: "timed out".into(), left }));
                } else if lease.renewed(sent, now) {
                    self.renewer = Some(lease);
                    self.input(Input::Lease(LeaseEvent::Renewed(lease)));
                } else {
                    self.renewer = None;
                    self.input(Input::Lease(LeaseEvent::Expired));
                }
            }
            Ev::Lost(by) => {
                if self.renewer.take().is_some() {
                    self.lost_at.get_or_insert(now);
                    self.input(Input::Lease(LeaseEvent::Lost(by)));
                    if self.case.terminate && !self.case.unkillable && self.machine.finished().is_none() {
                        assert!(
                            self.machine.term_sent || self.machine.killed_at.is_some(),
                            "a lost lock stops the command at once"
                        );
                    }
                }
            }
            Ev::Signal(sig) => self.signal(sig),
            Ev::CommandExits(code) => {
                if self.command.alive && !self.command.stopped {
                    self.command.alive = false;
                    self.exit = Some(code);
                    self.exited_at = Some(now);
                    self.carry_out(Vec::new());
                }
            }
            Ev::LeftoverExits => {
                if let Some(p) = self.leftovers.iter_mut().find(|p| p.alive && !p.stopped) {
                    p.alive = false;
                    self.carry_out(Vec::new());
                }
            }
            Ev::CtrlZ => {
                if self.case.foreground {
                    self.deliver(Signal::SIGTSTP);
                }
            }
            // The kernel's continue does nothing to a running wrapper; its handler sees it.
            Ev::Continue => self.input(Input::Signal(Signal::SIGCONT)),
            Ev::LetGo => {
                let stopping = self.machine.stop_began.is_some();
                let (lost, exited) = (self.machine.lost(), self.machine.exited().is_some());
                self.input(Input::LetGo);
                let granted = self.machine.let_go();
                assert_eq!(
                    granted,
                    !stopping && !lost && !exited,
                    "let go of exactly when nothing ends the run"
                );
                if granted {
                    assert_eq!(self.machine.finished(), Some(Finish { code: 0, survivors: false }));
                }
            }
        }
    }

    fn signal(&mut self, sig: Signal) {
        if matches!(sig, Signal::SIGTERM | Signal::SIGINT) && self.machine.finished().is_none() {
            self.asked_to_stop.get_or_insert(Instant::now());
        }
        self.term_seen |= sig == Signal::SIGTERM;
        self.input(Input::Signal(sig));
    }

    /// The last moment the key is certainly this run's, whatever became of a renewal in flight.
    fn valid(&self) -> Instant {
        self.valid_if_sent.map_or(self.valid_until, |v| v.min(self.valid_until))
    }

    fn check(&self) {
        let now = Instant::now();
        let valid = self.valid();
        let grace = Duration::from_millis(self.case.grace_ms);
        let m = &self.machine;
        if let Some(finish) = m.finished() {
            if m.let_go() {
                // The script runs on without the lock, which it still held.
                assert!(
                    !m.lost() && m.stop_began.is_none() && m.killed_at.is_none(),
                    "let go of while stopping"
                );
                assert!(self.lost_at.is_none() || now < valid, "let go of a lock already lost");
                return;
            }
            if finish.survivors {
                assert!(self.case.unkillable, "survivors only when the group cannot be signalled");
                assert_eq!(finish.code, status::LEASE_LOST, "a run that could not stop its command");
            } else {
                assert_eq!(self.group(), Group::Empty, "finished with members left");
                let code = self.exit.expect("finished before the command exited");
                let expected = match m.reason() {
                    Some(StopReason::LeaseLost) => status::LEASE_LOST,
                    Some(StopReason::MaxRuntime) => status::MAX_RUNTIME,
                    _ => code,
                };
                assert_eq!(finish.code, expected);
                // A stop request reaches the command even if a suspension had stopped it: a
                // command that acts on it is not still there to be killed a grace later.
                if let (Some((sig, at)), 137, Some(killed)) = (self.forwarded, code, m.killed_at) {
                    let acts =
                        if sig == Signal::SIGTERM { !self.case.ignores_term } else { !self.case.ignores_int };
                    assert!(!acts || killed < at + grace, "the command never acted on the {sig} it was sent");
                }
            }
            return;
        }
        if self.suspended {
            return;
        }
        if self.case.terminate {
            // Ownership lost: SIGKILL follows SIGTERM after the grace at the latest.
            let kill_by = match self.lost_at {
                Some(at) => (at + grace).min(valid - KILL_AHEAD),
                None => valid - KILL_AHEAD,
            };
            if self.case.unkillable {
                assert!(
                    now < valid && self.lost_at.is_none(),
                    "an unkillable command's run outlived the lease"
                );
            } else if now >= kill_by {
                assert_eq!(self.group(), Group::Empty, "the group outlived the lease's kill point");
            }
        }
        if let Some(exited) = self.exited_at {
            assert!(
                now <= exited + grace + KILL_WAIT + 2 * POLL_EVERY,
                "the run did not end in time after the command exited"
            );
        }
        if let Some(asked) = self.asked_to_stop {
            assert!(
                now <= asked + grace + KILL_WAIT + POLL_EVERY,
                "a SIGTERM/SIGINT did not end the run in time"
            );
        }
        if let Some(lease) = m.lease.filter(|_| !m.lost()) {
            assert!(lease.deadline() <= valid, "the deadline is later than the key's expiry");
        }
        if self.lost_at.is_some() || now >= valid {
            assert!(m.lost(), "a lapsed lease was revived");
        }
    }
}

async fn simulate(case: Case) {
    let mut world = World::new(case.clone());
    world.carry_out(Vec::new());
    world.check();
    // After the generated events, the world keeps going on its own: time passes and the
    // wrapper, if suspended, is continued, until the run ends.
    let tail = (0..64).map(|_| (250, Ev::Continue));
    for (delay_ms, ev) in case.events.into_iter().chain(tail) {
        let until = Instant::now() + Duration::from_millis(delay_ms);
        // Time passes in steps: to each moment the machine wants to act, then to the event.
        for _ in 0..1000 {
            let now = Instant::now();
            if now >= until || world.machine.finished().is_some() {
                break;
            }
            let wake =
                if world.suspended { until } else { world.machine.next_wake().unwrap_or(until).min(until) };
            advance(wake.saturating_duration_since(now).max(Duration::from_millis(1))).await;
            if !world.suspended {
                world.carry_out(Vec::new());
            }
            world.check();
        }
        if world.machine.finished().is_some() {
            break;
        }
        world.happen(ev);
        world.check();
    }
    if !world.suspended {
        // Nothing more happens on its own: the command runs until it is stopped or the lease
        // allows; with nothing to stop it, ending unfinished is fine.
        world.check();
    }
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_for_any_order_of_events(case in case()) {
        paused_runtime().block_on(simulate(case));
    }
}

/// A command that ignores SIGTSTP: the wrapper keeps renewing, then stops the group with
/// SIGSTOP after the grace, and only then suspends itself.
#[test]
fn a_command_that_ignores_sigtstp_is_stopped_before_the_wrapper_suspends() {
    paused_runtime().block_on(async {
        let case = Case { grace_ms: 200, ignores_tstp: true, ..Case::one_leftover() };
        let mut world = World::new(case);
        world.happen(Ev::Signal(Signal::SIGTSTP));
        advance(Duration::from_millis(100)).await;
        world.carry_out(Vec::new());
        assert!(!world.suspended && world.group() == Group::Running, "still renewing, not suspended");
        world.happen(Ev::RenewSend);
        advance(Duration::from_millis(1)).await;
        world.happen(Ev::RenewReply(Fate::Confirmed));
        advance(Duration::from_millis(110)).await;
        world.carry_out(Vec::new());
        assert!(world.suspended, "suspended once SIGSTOP stopped the group");
        assert_eq!(world.group(), Group::Stopped);
    });
}

/// Leftovers that ignore SIGINT (sh's `&` jobs) get SIGTERM as soon as the command has exited.
#[test]
fn leftovers_get_sigterm_when_the_command_exits_whatever_ended_it() {
    paused_runtime().block_on(async {
        let case = Case { grace_ms: 5000, ..Case::one_leftover() };
        let mut world = World::new(case);
        world.happen(Ev::Signal(Signal::SIGINT));
        assert_eq!(world.exit, Some(130));
        assert!(world.leftovers.iter().all(|p| !p.alive), "SIGTERM reached the leftovers at once");
        advance(POLL_EVERY).await;
        world.carry_out(Vec::new());
        assert_eq!(world.machine.finished(), Some(Finish { code: 130, survivors: false }));
    });
}

/// SIGCONT to the wrapper before its group has stopped calls the suspension off: the wrapper
/// never stops itself afterwards, and what the suspension stopped runs again.
#[test]
fn sigcont_before_the_group_has_stopped_calls_the_suspension_off() {
    paused_runtime().block_on(async {
        let case = Case { grace_ms: 200, ignores_tstp: true, ..Case::one_leftover() };
        let mut world = World::new(case);
        world.happen(Ev::Signal(Signal::SIGTSTP));
        advance(Duration::from_millis(50)).await;
        world.happen(Ev::Continue);
        for _ in 0..10 {
            advance(Duration::from_millis(50)).await;
            world.carry_out(Vec::new());
        }
        assert!(!world.suspended, "suspended after SIGCONT called it off");
        assert_eq!(world.group(), Group::Running);
    });
}

/// SIGTERM right after SIGTSTP: the group the suspension stopped is continued, so that the
/// command's own handler runs instead of SIGKILL a grace later.
#[test]
fn a_stop_request_during_a_suspension_reaches_the_stopped_command() {
    paused_runtime().block_on(async {
        let case = Case { leftovers: 0, ..Case::one_leftover() };
        let mut world = World::new(case);
        world.happen(Ev::Signal(Signal::SIGTSTP));
        assert!(world.command.stopped && !world.suspended, "stopped; the wrapper not yet");
        world.happen(Ev::Signal(Signal::SIGTERM));
        assert_eq!(world.exit, Some(143), "the command acted on SIGTERM");
    });
}

/// Two looks at the stopped group reported before the shell got to the first one's answer
/// (two inspections in flight) suspend the wrapper once: a second stop would leave it stopped
/// after SIGCONT.
#[test]
fn two_looks_at_a_stopped_group_suspend_the_wrapper_once() {
    paused_runtime().block_on(async {
        let mut world = World::new(Case::one_leftover());
        let now = Instant::now();
        let mut out = Vec::new();
        world.machine.handle(Input::Stopped, now, &mut out);
        for p in world.leftovers.iter_mut().chain([&mut world.command]) {
            p.stopped = true;
        }
        let mut out = Vec::new();
        world.machine.handle(Input::Group(Group::Stopped), now, &mut out);
        world.machine.handle(Input::Group(Group::Stopped), now, &mut out);
        assert_eq!(out.iter().filter(|a| **a == Action::SuspendSelf).count(), 1, "{out:?}");
    });
}
