//! Taking the lock (docs/GUIDE.md § Waiting, outages and once-per-day): try once or wait for a
//! release, ride out a Redis outage with backoff, and fail closed — or open, when asked.
//!
//! The decisions live in [`machine`], which never touches Redis or a clock; this module feeds
//! it what happens and carries out what it asks for.

mod machine;
mod progress;

use std::time::Duration;

use tokio::time::{Instant, sleep, sleep_until};

use crate::backoff::full_jitter;
use crate::config::Config;
use crate::exit::Error;
use crate::guard::Guard;
use crate::lock::{Acquired, Holder, Kind, Lease, Lock, Wake, Wakeups, hostname, show_key};
use crate::signals::Signals;
use machine::{Action, Context, End, Input, Machine, Rules, Wait};
use progress::{Progress, REDRAW_EVERY};

/// Bound on taking back an abandoned attempt (so a signal still ends the run promptly).
const ABANDON_LIMIT: Duration = Duration::from_millis(300);

/// How the wait for the lock ended, when it did not end in an error.
pub enum Acquisition {
    Acquired {
        /// The fence of each key, in the order given.
        fences: Vec<i64>,
        lease: Lease,
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

/// `guard`: a run that has to wait starts its guardian meanwhile, so that the handoff, when it
/// comes, does not wait for one (see [`Guard::start`]). `queued_at`: the run's place
/// in the queue when it joined (1 = next), whatever the outcome, if it queued.
pub async fn acquire(
    lock: &mut Lock,
    config: &Config,
    signals: &mut Signals,
    guard: &mut Guard,
    queued_at: &mut Option<u64>,
) -> Result<Acquisition, Error> {
    let rules = Rules {
        wait: config.wait,
        kill_grace: config.kill_grace,
        ttl: config.ttl,
        fail_open: config.fail_open,
        queues: lock.queues(),
        spans_slots: lock.spans_slots(),
        key: config.key.clone(),
        keys: config.keys.clone(),
        outer_keys: config.outer.as_ref().map(|o| o.keys.clone()),
    };
    let started = Instant::now();
    let mut machine = Machine::new(rules, Box::new(full_jitter), started);
    let progress = Progress::new(config, started);
    let mut shell = Acquirer { lock, config, signals, guard, releases: None, progress };
    let mut actions = Vec::new();
    machine.start(Instant::now(), &mut actions);
    while !actions.is_empty() {
        let action = actions.remove(0);
        if let Some(input) = shell.carry_out(action).await {
            machine.handle(input, Instant::now(), &mut actions);
        }
    }
    // Whatever ended the wait (the lock, its end, a signal), what follows starts on a clean line.
    shell.progress.clear();
    *queued_at = machine.queue_position();
    let end = machine.take_end().expect("the machine asks for something until it has ended");
    shell.finish(end)
}

/// The real world around the machine: Redis, the subscription, signals, the guardian.
struct Acquirer<'a> {
    lock: &'a mut Lock,
    config: &'a Config,
    signals: &'a mut Signals,
    guard: &'a mut Guard,
    releases: Option<Wakeups>,
    /// Where the wait stands, for the status line.
    progress: Progress,
}

impl Acquirer<'_> {
    /// Carries out one action; what answers it, if it has an answer.
    async fn carry_out(&mut self, action: Action) -> Option<Input> {
        let Acquirer { lock, config, signals, guard, releases, progress } = self;
        match action {
            Action::Subscribe => Some(tokio::select! {
                r = lock.watch_releases() => Input::Subscribed(r.map(|wakeups| *releases = Some(wakeups))),
                sig = signals.recv_before_start(progress::before_stop) => Input::Signal(sig),
            }),
            Action::Unsubscribe => {
                *releases = None;
                None
            }
            Action::Attempt { join } => Some(tokio::select! {
                r = lock.acquire(join) => {
                    progress.observe(&r);
                    Input::Answer(r.map(mark_ended))
                }
                sig = signals.recv_before_start(progress::before_stop) => Input::Signal(sig),
            }),
            Action::CheckNested { waiter } => {
                let waits = match &config.outer {
                    Some(outer) => lock.waits_for(&waiter, &outer.keys, &outer.value).await,
                    None => false,
                };
                Some(Input::Nested(waits))
            }
            Action::PrepareToWait => {
                guard.start();
                None
            }
            Action::Sleep(Wait { until, wakeups }) => {
                let wait = async {
                    tokio::select! {
                        () = sleep_until(until) => Input::Timer,
                        wake = next_wake(releases), if wakeups => match wake {
                            Wake::Ended => Input::SubscriptionEnded,
                            Wake::Turn => Input::Turn,
                            Wake::HandedOver { fence, grant } => Input::HandedOver {
                                fence,
                                grant,
                                since_last_attempt: lock.handed_over_since_last_attempt(fence),
                            },
                        },
                        sig = signals.recv_before_start(progress::before_stop) => Input::Signal(sig),
                        () = lock.master_changed(), if wakeups => Input::MasterChanged,
                    }
                };
                // The wait goes on across redraws, never started again: nothing it listens to
                // is dropped half-way.
                tokio::pin!(wait);
                progress.waits(Instant::now());
                loop {
                    tokio::select! {
                        input = &mut wait => break Some(input),
                        () = sleep(REDRAW_EVERY), if progress.draws() => progress.draw(Instant::now()),
                    }
                }
            }
            Action::Leave => {
                let _ = tokio::time::timeout(ABANDON_LIMIT, lock.leave_queue()).await;
                None
            }
            Action::Abandon => {
                abandon(lock).await;
                None
            }
            Action::ReleaseShort => {
                let _ = lock.release(Duration::ZERO, false).await;
                None
            }
            Action::Log(note) => {
                note.log();
                None
            }
        }
    }

    fn finish(&mut self, end: End) -> Result<Acquisition, Error> {
        let config = self.config;
        let at = |what: &str| match self.lock.nodes() {
            1 => format!("{what} at {}{}", self.lock.target(), config.redis.source_note()),
            // The fault names the nodes that failed.
            n => format!("{what}: not a majority of the {n} nodes"),
        };
        match end {
            End::Acquired { fences, lease, handed_over, .. } => {
                Ok(Acquisition::Acquired { fences, lease, handed_over, subscription: self.releases.take() })
            }
            End::AlreadyDone { record } => Ok(Acquisition::AlreadyDone { record }),
            End::Unlocked { reason } => Ok(Acquisition::Unlocked { reason }),
            End::Busy { found, nested } => Err(busy(config, &found, nested.as_deref())),
            End::Interrupted(sig) => Err(Error::interrupted(sig)),
            End::Failed { fault, context } => Err(match context {
                Context::TakingTheLock => fault.into_error("taking the lock"),
                Context::Unreachable => fault.into_error(&at("cannot reach Redis")),
                Context::AnsweredEarlier => fault.into_error(&format!(
                    "cannot reach Redis at {} (it answered an earlier attempt, so --fail-open \
                     does not apply)",
                    self.lock.target()
                )),
                Context::Answering => fault.into_error(&at("taking the lock")),
            }),
        }
    }
}

/// A busy answer whose holder is a process of this host that has ended (a script that took
/// the lock, whose holder releases just after; a killed wrapper, whose guardian releases):
/// marked, so that the machine waits the few milliseconds that takes (`ENDED_GRACE`).
fn mark_ended(found: Acquired) -> Acquired {
    match found {
        Acquired::Busy { key, pttl, holder, holding, same_id, position, .. } => {
            let ended = Holder::parse(&holder).is_some_and(|h| h.host == hostname() && !runs(h.pid));
            Acquired::Busy { key, pttl, holder, holding, same_id, position, ended }
        }
        other => other,
    }
}

/// Whether process `pid` of this host runs (a zombie has ended). A pid taken over by another
/// process counts as running: the grace is then not given.
fn runs(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return true };
    if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH) {
        return false;
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').and_then(|at| s[at + 1..].split_whitespace().next().map(str::to_owned)))
        .is_none_or(|state| state != "Z" && state != "X")
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
    // Without a limit, a run gives up only on a nested run's wait that cannot end (`Machine::nested`).
    let state = match config.wait {
        Some(wait) if !wait.is_zero() => "still busy at the end of --wait",
        _ => "busy",
    };
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
                holder: first.clone(),
                queued: true,
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
        holder: holder.clone(),
        queued: false,
        expires_in: pttl,
        code: config.busy_exit_code,
    }
}
