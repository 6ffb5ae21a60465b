//! The acquisition's decisions, apart from Redis, signals and the clock: what an attempt's
//! answer means, how long to wait and for what, when to give up, and what to give back on the
//! way out. The caller ([`super::acquire`]) feeds it [`Input`]s with the time they happened,
//! carries out the [`Action`]s it asks for in order, and feeds back their answers; tests drive
//! it the same way on a simulated clock.
//!
//! At any moment the machine waits for one thing: the answer to the last action it asked for
//! (an attempt, a subscription, the nested-run check, or the end of a [`Wait`]), or nothing,
//! once it has ended ([`Machine::end`]).
//!
//! What it keeps to, whatever the order of events (checked by the generated tests):
//!
//! 1. **No lock after the wait.** Once Redis has answered "busy", a lock handed over is taken
//!    only until `--wait` + [`Handover::LATE`], and a busy wait that ends after that ends the
//!    run busy, without another attempt. (A holder that has ended on this host stretches
//!    `--wait` to [`ENDED_GRACE`] from the start: its release is under way.) (An attempt that follows an outage wait belongs to the outage
//!    budget, 4.) `--wait forever` has no end; such a run gives up only when a nested run's
//!    wait could never end.
//! 2. **Only a confirmed lock.** A handover is taken only when it came after the last attempt
//!    (Redis answered that attempt before handing over) and [`Handover::usable`] holds when it
//!    is read; a lock an attempt took, only with more than `max(--kill-grace, KILL_AHEAD)`
//!    left of its lease. Nothing is given back on the way to that end.
//! 3. **No place left behind.** A run that may have joined the queue leaves it on every end
//!    but these three: the lock taken, the work found done (the script left the queue), and a
//!    fault no retry can fix (the entry lapses by itself). An end while an attempt's outcome
//!    is unknown (a signal during it, an outage that outlasted the budget) abandons it:
//!    release and leave, bounded.
//! 4. **The outage budget.** An outage ends the run (an error, or `--fail-open`) only once
//!    `start + max(--wait, OUTAGE_RETRY)` has passed, and no outage wait ends later than that;
//!    with `--wait forever`, never.
//! 5. **Fail open only when unreachable.** `--fail-open` applies only when the last attempt
//!    could not reach Redis and no attempt since the last "busy" was answered "not now".
//! 6. **Every wait is bounded.** After every input the machine has ended, or awaits the
//!    answer to one request (bounded by the lock's own timeouts), or sleeps with a timer due
//!    no later than the end of the outage budget — a busy wait's, of `--wait` — and, without
//!    a limit, within a retry period ([`BUSY_RETRY_CAP`], `QUEUE_KEEPALIVE`, an outage's backoff).

use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::time::Instant;

use crate::lock::KILL_AHEAD;
use crate::lock::{Acquired, Fault, Handover, Lease, QUEUE_KEEPALIVE, show_key};

/// Even with `--wait 0`, an unreachable Redis is retried this long before giving up.
pub const OUTAGE_RETRY: Duration = Duration::from_secs(1);
/// A waiter retries at the holder's remaining TTL, but at least this often, in case a release
/// announcement is missed (a dropped subscription).
pub const BUSY_RETRY_CAP: Duration = Duration::from_secs(2);

/// A busy answer naming a holder that has ended on this host (its release is under way: a
/// script's holder releases within 100 ms of the script's exit, a killed wrapper's guardian at
/// once) stretches `--wait` to this long from the start, retrying every [`ENDED_RETRY`]: the
/// next run on the host does not find the lock busy for the few milliseconds that takes.
pub const ENDED_GRACE: Duration = Duration::from_millis(500);
pub const ENDED_RETRY: Duration = Duration::from_millis(10);

/// The fault of an attempt that took the lock with too little of its lease left to start the
/// command: it is given back and retried like an outage.
const TOO_SLOW: &str = "Redis answered too slowly: too little of the lease was left";

/// A random delay in `[0, min(cap, base·2^failures)]` (`backoff::full_jitter`): given to the
/// machine so that tests can choose it.
pub type Jitter = Box<dyn FnMut(Duration, u32, Duration) -> Duration + Send>;

/// What the machine is told.
#[derive(Debug)]
pub enum Input {
    /// The subscription asked for ([`Action::Subscribe`]) is in place, or could not be made.
    Subscribed(Result<(), Fault>),
    /// Redis's answer to [`Action::Attempt`].
    Answer(Result<Acquired, Fault>),
    /// The answer to [`Action::CheckNested`]: the waiter first in the queue waits for the lock
    /// of the run this one is nested in.
    Nested(bool),
    /// A release was announced, or this run's turn in the queue came.
    Turn,
    /// A release handed the lock over to this run, with this fence, for `grant`;
    /// `since_last_attempt`: `Lock::handed_over_since_last_attempt(fence)`.
    HandedOver { fence: i64, grant: Duration, since_last_attempt: bool },
    /// The subscription ended.
    SubscriptionEnded,
    /// The Sentinels switched the master: releases are announced on the new one.
    MasterChanged,
    /// The timer of the current [`Wait`] fired.
    Timer,
    /// A signal that ends a run before its command has started.
    Signal(Signal),
}

/// What the machine asks its caller to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Subscribe to what wakes a waiter; answered by [`Input::Subscribed`].
    Subscribe,
    /// Let go of the subscription (it ended, or the master changed).
    Unsubscribe,
    /// One attempt, joining the queue or not; answered by [`Input::Answer`].
    Attempt { join: bool },
    /// Whether `waiter`, first in the queue, waits for the outer run's lock (a nested run);
    /// answered by [`Input::Nested`].
    CheckNested { waiter: Vec<u8> },
    /// What a run does once before each busy wait: exec the guardian if there is none yet,
    /// and note the signal handlers.
    PrepareToWait,
    /// Wait for the end of the wait, or for what it listens to; answered by the input that
    /// ended it.
    Sleep(Wait),
    /// Give up the place in the queue (bounded).
    Leave,
    /// Take back what an attempt of unknown outcome may have taken: release, then leave the
    /// queue (bounded).
    Abandon,
    /// Give back a lock taken with too little of its lease left.
    ReleaseShort,
    /// Log this line.
    Log(Note),
}

/// A wait, as data: until when, and what else ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    pub until: Instant,
    /// A busy wait: a wake-up, the end of the subscription or a change of master ends it too.
    /// Any wait ends on a signal.
    pub wakeups: bool,
}

/// A log line the machine asks for ([`Note::log`] says it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// A waiter that cannot queue (keys in several Cluster slots, or a Redlock quorum).
    Unqueued { spans_slots: bool },
    /// This run's place in the queue of `key`.
    Queued { key: Vec<u8>, position: Option<u64> },
    /// A nested run waits behind a waiter for the outer run's lock.
    NestedWait { why: String },
    /// The lock is busy; the next attempt comes in `retry_in` at the latest.
    Busy { retry_in: Duration },
    /// Redis cannot serve the attempt now; the next one comes in `delay`.
    Outage { delay: Duration, msg: String },
}

impl Note {
    pub fn log(&self) {
        match self {
            Note::Unqueued { spans_slots } => tracing::info!(
                "waiting without a place in a queue ({}): runs queued for these keys go first, for as \
                 long as this run waits",
                if *spans_slots {
                    "keys in several Cluster slots; a common hash tag puts them in one"
                } else {
                    "a Redlock quorum"
                }
            ),
            Note::Queued { key, position } => {
                let position = *position;
                tracing::info!(key = %key.escape_ascii(), position, "queued for the lock");
            }
            Note::NestedWait { why } => {
                tracing::warn!("this run waits until --wait runs out or that run gives up: {why}");
            }
            Note::Busy { retry_in } => tracing::debug!(
                retry_in_ms = retry_in.as_millis() as u64,
                "lock busy; waiting for its release"
            ),
            Note::Outage { delay, msg } => tracing::debug!("Redis unavailable, retrying in {delay:?}: {msg}"),
        }
    }
}

/// How the acquisition ended.
#[derive(Debug)]
pub enum End {
    Acquired {
        fences: Vec<i64>,
        lease: Lease,
        handed_over: bool,
    },
    /// `--idempotency-key`: a run with this ID already succeeded.
    AlreadyDone {
        record: Vec<u8>,
    },
    /// `--fail-open`: Redis stayed unreachable.
    Unlocked {
        reason: String,
    },
    /// Still busy at the end of `--wait`: what the last attempt found, and why the waiter
    /// first in the queue cannot go before the run this one is nested in, when it cannot.
    Busy {
        found: Acquired,
        nested: Option<String>,
    },
    Interrupted(Signal),
    /// A fault ended the run; `context` says what the message puts in front of it.
    Failed {
        fault: Fault,
        context: Context,
    },
}

/// What the error of a fault that ended the run says it was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// A fault no retry can fix.
    TakingTheLock,
    /// The outage outlasted the budget: Redis could not be reached.
    Unreachable,
    /// As `Unreachable`, with `--fail-open`, but Redis answered an earlier attempt.
    AnsweredEarlier,
    /// The outage outlasted the budget: Redis answered "not now".
    Answering,
}

/// The fixed rules of one acquisition.
#[derive(Debug, Clone)]
pub struct Rules {
    /// `--wait`; `None`: without a limit.
    pub wait: Option<Duration>,
    pub kill_grace: Duration,
    pub ttl: Duration,
    pub fail_open: bool,
    /// Waiters queue in arrival order (`Lock::queues`).
    pub queues: bool,
    /// The keys are in several Cluster slots (`Lock::spans_slots`).
    pub spans_slots: bool,
    /// The first key, and every key in the order given.
    pub key: Vec<u8>,
    pub keys: Vec<Vec<u8>>,
    /// The keys of the run this one is nested in, if any.
    pub outer_keys: Option<Vec<Vec<u8>>>,
}

impl Rules {
    /// Whether the run waits at all (not `--wait 0`).
    fn waits(&self) -> bool {
        self.wait != Some(Duration::ZERO)
    }

    /// Key `at` (its index), for messages.
    fn key_at(&self, at: usize) -> &Vec<u8> {
        self.keys.get(at).unwrap_or(&self.key)
    }
}

/// What the machine waits for.
#[derive(Debug)]
enum Phase {
    Subscribing,
    Attempting,
    /// The nested-run check, asked after this answer, which came `at`.
    CheckingNested {
        found: Acquired,
        at: Instant,
    },
    /// A busy wait after this answer.
    Waiting {
        found: Acquired,
    },
    /// An outage wait.
    Retrying,
    Ended,
}

pub struct Machine {
    rules: Rules,
    jitter: Jitter,
    /// The end of `--wait` (at least [`ENDED_GRACE`] from the start once a holder that ended
    /// was found), and of the outage budget; `None`: `--wait forever`.
    wait_until: Option<Instant>,
    started: Instant,
    outage_until: Option<Instant>,
    /// Waiters queue in arrival order (one Redis); a Redlock quorum's waiters retry on every
    /// announced release instead.
    join: bool,
    queued: bool,
    subscribed: bool,
    /// When the current (or last) attempt began, subscription included.
    attempt_sent: Instant,
    outage_failures: u32,
    /// Whether Redis answered any attempt of the current outage (then it is not unreachable).
    answered: bool,
    queue_position: Option<u64>,
    /// A nested run held off by a waiter that waits for the outer run's lock: why, once known.
    nested: Option<Option<String>>,
    said_unqueued: bool,
    phase: Phase,
    end: Option<End>,
}

impl Machine {
    /// A machine for an acquisition that starts at `now`; [`Machine::start`] asks for the
    /// first attempt.
    pub fn new(rules: Rules, jitter: Jitter, now: Instant) -> Self {
        let join = rules.waits();
        Machine {
            wait_until: rules.wait.map(|wait| now + wait),
            started: now,
            outage_until: rules.wait.map(|wait| now + wait.max(OUTAGE_RETRY)),
            join,
            queued: join && rules.queues,
            subscribed: false,
            attempt_sent: now,
            outage_failures: 0,
            answered: false,
            queue_position: None,
            nested: None,
            said_unqueued: false,
            phase: Phase::Ended,
            end: None,
            rules,
            jitter,
        }
    }

    pub fn start(&mut self, now: Instant, out: &mut Vec<Action>) {
        self.attempt(now, out);
    }

    /// How it ended, once it has.
    #[cfg(test)]
    pub fn end(&self) -> Option<&End> {
        self.end.as_ref()
    }

    /// This run's place in the queue when it joined (1 = next), if it queued: kept whatever
    /// the end, for the metrics of a run that gave up too.
    pub fn queue_position(&self) -> Option<u64> {
        self.queue_position
    }

    pub fn take_end(&mut self) -> Option<End> {
        self.end.take()
    }

    /// The end of `--wait`, if it has one.
    #[cfg(test)]
    pub fn wait_until(&self) -> Option<Instant> {
        self.wait_until
    }

    /// The end of the outage budget, if it has one.
    #[cfg(test)]
    pub fn outage_until(&self) -> Option<Instant> {
        self.outage_until
    }

    /// Takes in what happened at `now`. An input the machine does not wait for changes nothing.
    pub fn handle(&mut self, input: Input, now: Instant, out: &mut Vec<Action>) {
        if self.end.is_some() {
            return;
        }
        match (std::mem::replace(&mut self.phase, Phase::Ended), input) {
            (phase, Input::Signal(sig)) => self.interrupted(&phase, sig, out),
            (Phase::Subscribing, Input::Subscribed(Ok(()))) => {
                self.subscribed = true;
                self.phase = Phase::Attempting;
                out.push(Action::Attempt { join: self.join });
            }
            (Phase::Subscribing, Input::Subscribed(Err(fault))) => self.fault(fault, now, out),
            (Phase::Attempting, Input::Answer(answer)) => self.answer(answer, now, out),
            (Phase::CheckingNested { found, at }, Input::Nested(waits)) => self.nested(found, at, waits, out),
            (Phase::Waiting { found, .. }, Input::Timer | Input::Turn) => self.woken(found, now, out),
            // Releases are announced on the new master: listen and try there at once.
            (Phase::Waiting { found, .. }, Input::SubscriptionEnded | Input::MasterChanged) => {
                self.subscribed = false;
                out.push(Action::Unsubscribe);
                self.woken(found, now, out);
            }
            (Phase::Waiting { found, .. }, Input::HandedOver { fence, grant, since_last_attempt }) => {
                // Handed over after Redis answered this attempt "busy": a lease counted from
                // before it is never too long.
                let lease = Lease::handed(self.attempt_sent, grant, self.rules.ttl);
                if since_last_attempt
                    && Handover::usable(&lease, now, self.rules.kill_grace)
                    && self.wait_until.is_none_or(|until| now <= until + Handover::LATE)
                {
                    self.end = Some(End::Acquired { fences: vec![fence], lease, handed_over: true });
                    return;
                }
                // A handover older than that attempt, too little of it certainly left, or the
                // wait over: the next attempt (if any) decides, and an attempt that finds this
                // run's value confirms it for the full TTL.
                self.woken(found, now, out);
            }
            (Phase::Retrying, Input::Timer) => self.attempt(now, out),
            (phase, _) => self.phase = phase,
        }
    }

    fn attempt(&mut self, now: Instant, out: &mut Vec<Action>) {
        self.attempt_sent = now;
        // Subscribed before the attempt, so a release right after it is not missed.
        if self.rules.waits() && !self.subscribed {
            self.phase = Phase::Subscribing;
            out.push(Action::Subscribe);
        } else {
            self.phase = Phase::Attempting;
            out.push(Action::Attempt { join: self.join });
        }
    }

    fn interrupted(&mut self, phase: &Phase, sig: Signal, out: &mut Vec<Action>) {
        match phase {
            // The abandoned request, or the one that failed, may still have taken the lock:
            // take back what it may have taken.
            Phase::Subscribing | Phase::Attempting | Phase::Retrying => out.push(Action::Abandon),
            Phase::CheckingNested { .. } | Phase::Waiting { .. } => self.leave(out),
            Phase::Ended => {}
        }
        self.end = Some(End::Interrupted(sig));
    }

    fn answer(&mut self, answer: Result<Acquired, Fault>, now: Instant, out: &mut Vec<Action>) {
        match answer {
            Ok(Acquired::Yes { fences, lease })
                if lease.remaining(now) > self.rules.kill_grace.max(KILL_AHEAD) =>
            {
                self.end = Some(End::Acquired { fences, lease, handed_over: false });
            }
            Ok(Acquired::Yes { .. }) => {
                out.push(Action::ReleaseShort);
                self.fault(Fault::Unavailable(TOO_SLOW.into()), now, out);
            }
            Ok(Acquired::AlreadyDone { record }) => self.end = Some(End::AlreadyDone { record }),
            Ok(found) => self.busy(found, now, out),
            Err(fault) => self.fault(fault, now, out),
        }
    }

    /// Redis answered busy (or queued): the outage, if any, is over.
    fn busy(&mut self, found: Acquired, now: Instant, out: &mut Vec<Action>) {
        self.outage_failures = 0;
        self.answered = false;
        let (position, at) = match &found {
            Acquired::Busy { position, key, .. } | Acquired::Queued { position, key, .. } => {
                (*position, *key)
            }
            Acquired::Yes { .. } | Acquired::AlreadyDone { .. } => (None, 0),
        };
        if self.join && !self.queued && !self.said_unqueued {
            self.said_unqueued = true;
            out.push(Action::Log(Note::Unqueued { spans_slots: self.rules.spans_slots }));
        }
        if self.queue_position.is_none() && position.is_some() {
            self.queue_position = position;
            // The place at the key that held the run off (of several, the first).
            let key = self.rules.key_at(at).clone();
            out.push(Action::Log(Note::Queued { key, position }));
        }
        if let (Acquired::Queued { first, .. }, Some(_), None) =
            (&found, &self.rules.outer_keys, &self.nested)
        {
            out.push(Action::CheckNested { waiter: first.clone() });
            self.phase = Phase::CheckingNested { found, at: now };
            return;
        }
        self.wait_for_release(found, now, out);
    }

    fn nested(&mut self, found: Acquired, at: Instant, waits: bool, out: &mut Vec<Action>) {
        let why = match (&found, &self.rules.outer_keys) {
            (Acquired::Queued { key, .. }, Some(outer)) if waits => {
                let theirs: Vec<String> = outer.iter().map(|k| show_key(k)).collect();
                Some(format!(
                    "the run queued first for {} also waits for {}, which the run this one is \
                     nested in holds, so it cannot go before that run ends; take the keys together \
                     in the outer run (--key once for each)",
                    show_key(self.rules.key_at(*key)),
                    theirs.join(", ")
                ))
            }
            _ => None,
        };
        let forever = self.wait_until.is_none();
        if let Some(why) = &why
            && !forever
        {
            out.push(Action::Log(Note::NestedWait { why: why.clone() }));
        }
        // Without a limit, this wait could end only when that waiter gives up, which may be never
        // (it may wait forever too): busy at once, saying why.
        let hopeless = forever && why.is_some();
        self.nested = Some(why);
        if hopeless {
            self.give_up_busy(found, out);
            return;
        }
        self.wait_for_release(found, at, out);
    }

    /// After a busy answer that came at `now`: give up at the end of `--wait`, or wait.
    fn wait_for_release(&mut self, found: Acquired, now: Instant, out: &mut Vec<Action>) {
        let ended = matches!(found, Acquired::Busy { ended: true, .. });
        if ended {
            self.wait_until = self.wait_until.map(|until| until.max(self.started + ENDED_GRACE));
        }
        if self.wait_until.is_some_and(|until| now >= until) {
            self.give_up_busy(found, out);
            return;
        }
        out.push(Action::PrepareToWait);
        // A queued waiter tries again when told its turn has come, and at each keep-alive
        // (which also notices a lock that expired without a release).
        let retry_in = if self.queued {
            QUEUE_KEEPALIVE
        } else {
            let pttl = match &found {
                Acquired::Busy { pttl, .. } => *pttl,
                _ => None,
            };
            pttl.unwrap_or(BUSY_RETRY_CAP).min(BUSY_RETRY_CAP)
                + (self.jitter)(Duration::from_millis(25), 1, Duration::from_millis(50))
        };
        let retry_in = if ended { retry_in.min(ENDED_RETRY) } else { retry_in };
        out.push(Action::Log(Note::Busy { retry_in }));
        let until = self.wait_until.map_or(now + retry_in, |until| until.min(now + retry_in));
        out.push(Action::Sleep(Wait { until, wakeups: true }));
        self.phase = Phase::Waiting { found };
    }

    /// A busy wait ended at `now` without the lock.
    fn woken(&mut self, found: Acquired, now: Instant, out: &mut Vec<Action>) {
        if self.wait_until.is_some_and(|until| now > until + Handover::LATE) {
            // Stopped past the end of the wait: no new attempt (a lock handed over meanwhile
            // goes back with the place in the queue).
            self.give_up_busy(found, out);
        } else {
            self.attempt(now, out);
        }
    }

    fn give_up_busy(&mut self, found: Acquired, out: &mut Vec<Action>) {
        self.leave(out);
        self.end = Some(End::Busy { found, nested: self.nested.clone().flatten() });
    }

    /// Gives up the place in the queue at once, so that the runs behind move up.
    fn leave(&self, out: &mut Vec<Action>) {
        if self.queued {
            out.push(Action::Leave);
        }
    }

    /// Unreachable, or answering "not now" (OOM, READONLY, LOADING, …): both are retried;
    /// anything else is a mistake a retry cannot fix.
    fn fault(&mut self, fault: Fault, now: Instant, out: &mut Vec<Action>) {
        let msg = match &fault {
            Fault::Unavailable(msg) => msg.clone(),
            Fault::Transient(msg) => {
                self.answered = true;
                msg.clone()
            }
            _ => {
                self.end = Some(End::Failed { fault, context: Context::TakingTheLock });
                return;
            }
        };
        self.outage_failures += 1;
        // The last retry comes at the end of the budget, not before it: a long jitter drawn
        // early must not cut the outage wait short.
        let left = self.outage_until.map_or(Duration::MAX, |until| until.saturating_duration_since(now));
        let delay =
            (self.jitter)(Duration::from_millis(50), self.outage_failures, Duration::from_secs(1)).min(left);
        if left.is_zero() {
            // A request that timed out may still have taken the lock.
            out.push(Action::Abandon);
            let fail_open = self.rules.fail_open;
            self.end = Some(match fault {
                // Only a Redis that could not be reached at all fails open: one that answered
                // may hold the lock for someone else.
                Fault::Unavailable(_) if fail_open && !self.answered => End::Unlocked { reason: msg },
                Fault::Unavailable(_) if fail_open => {
                    End::Failed { fault, context: Context::AnsweredEarlier }
                }
                Fault::Unavailable(_) => End::Failed { fault, context: Context::Unreachable },
                _ => End::Failed { fault, context: Context::Answering },
            });
            return;
        }
        out.push(Action::Log(Note::Outage { delay, msg }));
        let until = now + delay;
        out.push(Action::Sleep(Wait { until, wakeups: false }));
        self.phase = Phase::Retrying;
    }
}

#[cfg(test)]
mod tests;
