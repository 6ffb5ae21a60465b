//! One run: acquire, spawn, supervise, release — in that order, with each step's failure
//! mapped to its exit status.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::time::Duration;

use tokio::time::Instant;

use crate::acquire::{Acquisition, acquire};
use crate::child::{Child, LockEnv};
use crate::config::{Config, OnLost};
use crate::exit;
use crate::exit::Error;
use crate::guard::{Guard, Ticket};
use crate::lock::{Conn, Handover, Holder, Lock, Success};
use crate::logging;
use crate::metrics::{self, Outcome, Report};
use crate::release::{Gave, Record, release};
use crate::renew::Renewer;
use crate::script::ScriptHolder;
use crate::signals::Signals;
use crate::supervise::{Held, StopReason, supervise};
use crate::sys;

/// What the lock is held for.
pub enum Target<'h> {
    /// The command the run starts (`config.command`).
    Command,
    /// The script that ran `redlock-run lock`, which this process holds the lock for.
    Script(&'h mut ScriptHolder),
}

/// `guard`: the run's guard, its guardian started already where that is cheap (see
/// [`Guard::before_parsing`]).
pub async fn run(config: Config, target: Target<'_>, guard: Guard) -> Result<u8, Error> {
    let mut report = Report::default();
    let result = run_with_report(&config, &mut report, target, guard).await;
    report.exit_status = match &result {
        Ok(code) => *code,
        Err(e) => e.code(),
    };
    if report.outcome.is_none() {
        report.outcome = Some(match &result {
            Ok(_) => Outcome::Error,
            Err(Error::Busy { .. }) => Outcome::Busy,
            Err(Error::Unavailable(_)) => Outcome::Unavailable,
            Err(Error::Interrupted { .. }) => Outcome::Interrupted,
            Err(Error::Spawn { .. }) => Outcome::NotRun,
            Err(_) => Outcome::Error,
        });
    }
    if let Some(path) = &config.metrics_file {
        metrics::write(path, &config.key, &report);
    }
    result
}

async fn run_with_report(
    config: &Config,
    report: &mut Report,
    mut target: Target<'_>,
    mut guard: Guard,
) -> Result<u8, Error> {
    let mut signals = Signals::install().map_err(|e| Error::Internal(e.into()))?;
    let nodes = config.redis.nodes().iter().map(Conn::new).collect::<Result<Vec<_>, _>>()?;
    let redlock_nodes = nodes.len();
    let idempotency = config.idempotency.as_ref();
    let mut lock =
        Lock::new(nodes, &config.keys, config.ttl, idempotency, config.kind, config.note.as_deref())
            .map_err(|f| f.into_error("preparing the lock"))?;
    if let Target::Script(holding) = &target {
        lock.on_behalf_of(holding.script_pid());
    }
    // From here on every line names this run's holder, as its value in Redis does.
    if let Some(holder) = Holder::parse(lock.value().as_bytes()) {
        logging::about_holder(&holder);
    }
    if redlock_nodes > 1 && (redlock_nodes < 3 || redlock_nodes % 2 == 0) {
        tracing::warn!(
            nodes = redlock_nodes,
            "Redlock over {redlock_nodes} nodes: use an odd number, at least 3, so that a majority survives \
             a failure"
        );
    }
    // After what can be refused without Redis (a mistyped URL fails at once, not DUR later), and
    // before the first connection and the guardian: a fleet that sleeps holds neither.
    if !config.jitter.is_zero() {
        spread_start(config.jitter, &mut signals).await?;
    }
    let grant = Handover::grant(config.kill_grace, config.ttl);
    lock.hand_over_for(grant);
    guard.ticket(&Ticket {
        redis: config.redis.clone(),
        keys: config.keys.clone(),
        ttl: config.ttl,
        kind: config.kind,
        value: lock.value().to_owned(),
        grant,
        min_hold: config.min_hold,
        output: config.output,
    });
    // After --jitter's sleep, if the run did not start it before (`guard.rs`).
    guard.start_early();
    // In JSON, the error line of a status the wrapper chose carries that status (text: as it was).
    let json_only = |code| config.output.format.json_only(code);

    let wait_started = Instant::now();
    let outcome = acquire(&mut lock, config, &mut signals, &mut guard, &mut report.queue_position).await;
    report.acquire_wait = Some(wait_started.elapsed());
    let (fences, lease, handed_over, subscription) = match outcome? {
        Acquisition::Acquired { fences, lease, handed_over, subscription } => {
            (fences, lease, handed_over, subscription)
        }
        Acquisition::AlreadyDone { record } => {
            let done = already_done(config, &record);
            tracing::warn!(reason = "already-succeeded", "skipped: {done}");
            report.outcome = Some(Outcome::Skipped);
            return Ok(0);
        }
        Acquisition::Unlocked { reason } => {
            report.outcome = Some(Outcome::Unlocked);
            return run_unlocked(config, &mut signals, &reason, report, guard, target).await;
        }
    };
    let fence = fences[0];
    let acquired = Instant::now();
    // Before the command starts: were the wrapper stopped from its first instruction on, the
    // guardian still stops the command by the lease deadline.
    guard.acquired(acquired);
    guard.lease_ends((config.on_lost == OnLost::Terminate).then(|| lease.deadline()));
    logging::about_fences(&fences);
    tracing::info!(
        kind = config.kind.name(),
        wait_ms = (acquired - wait_started).as_millis() as u64,
        handed_over = handed_over.then_some(true),
        "acquired"
    );

    let env = LockEnv {
        key: OsString::from_vec(config.key.clone()),
        keys: all_keys(config),
        token: Some(lock.value().to_owned()),
        fence: Some(fence.to_string()),
        fences: Some(fences.iter().map(i64::to_string).collect::<Vec<_>>().join(" ")),
        ttl_ms: config.ttl.as_millis() as u64,
        no_new_privs: config.no_new_privs,
    };
    let mut child = match start(&mut target, config, &env, guard, &mut signals).await {
        Ok(child) => child,
        Err(e) => {
            release(&mut lock, Duration::ZERO, false, acquired, None).await;
            report.held = Some(acquired.elapsed());
            return Err(e);
        }
    };

    if let Some(subscription) = subscription {
        // Let go of once the command is under way (see `Acquisition::Acquired`).
        tokio::spawn(async move {
            tokio::time::sleep(Handover::CONFIRM_AFTER).await;
            drop(subscription);
        });
    }
    let (renewer, mut events) = Renewer::start(lock, lease, acquired, config.renew_every, handed_over);
    let held = Held { lease, events: &mut events };
    let ended = supervise(&mut child, Some(held), &mut signals, config, acquired).await;
    let mut lock = renewer.stop().await;
    let unlocking = child.take_asked();
    if ended.let_go {
        child.keep_running();
    }
    // With the group dead the guardian has nothing left to do, but dismissed now it would wake
    // and exit on the CPU the release request is about to need: it goes once that is sent. A
    // script let go of runs on, so its guardian goes at once (with the child), as with survivors.
    let dismissal = (!ended.survivors && !ended.let_go).then(|| child.guard().dismiss_later());
    // Dropping the child kills anything left of its group and hands the terminal back.
    drop(child);
    let keep = config.min_hold.saturating_sub(acquired.elapsed());
    let mut unrecorded = false;
    if ended.survivors {
        // Releasing would let another run start beside processes that still run.
        let lock_state = if ended.lost {
            "the lock is already gone, so another run may start beside them".to_owned()
        } else {
            format!(
                "the lock was NOT released and expires by itself within --ttl ({}), after which \
                 another run may start beside them",
                humantime::format_duration(config.ttl)
            )
        };
        tracing::error!(
            exit_status = json_only(ended.code),
            "the command could not be stopped: processes of its group still run; {lock_state}"
        );
    } else {
        let command_status = ended.command_code.filter(|_| matches!(target, Target::Command));
        if lock.has_waiters() {
            sys::defer_on_wakeup();
        }
        let releasing = release(&mut lock, keep, ended.code == 0, acquired, command_status);
        let ((gave, record), ()) = tokio::join!(releasing, async {
            // Polled first, the release has handed its request to the connection's task, which
            // runs (and writes it) before this task again.
            tokio::task::yield_now().await;
            drop(dismissal);
        });
        let id = config.idempotency.as_ref().map(|i| String::from_utf8_lossy(&i.id)).unwrap_or_default();
        match &record {
            Record::Failed(why) => tracing::warn!(
                outcome = "unrecorded",
                "the success of --idempotency-key {id:?} could not be recorded ({why}): a later run \
                 with this --idempotency-key will run the command again"
            ),
            Record::Unconfirmed(why) => tracing::warn!(
                outcome = "unrecorded",
                "the success of --idempotency-key {id:?} could not be confirmed ({why}): a later run \
                 with this --idempotency-key may run the command again"
            ),
            Record::NotDue | Record::Written => {}
        }
        unrecorded = matches!(record, Record::Failed(_) | Record::Unconfirmed(_));
        let answer = match gave {
            Gave::Back => (0, String::new()),
            Gave::NotOurs => (
                exit::status::LEASE_LOST,
                "the lock was no longer this script's (expired or taken over)".to_owned(),
            ),
            Gave::Unknown => {
                (0, "could not confirm the release; the lock expires by itself within --ttl".to_owned())
            }
        };
        for asked in unlocking {
            asked.answer(&answer);
        }
    }

    // A status the wrapper chose gets one error line, even with -q.
    match ended.stopped {
        _ if ended.survivors => {}
        Some(StopReason::MaxRuntime) => tracing::error!(
            exit_status = json_only(ended.code),
            "the command was stopped after --max-runtime ({})",
            humantime::format_duration(config.max_runtime.unwrap_or_default())
        ),
        Some(StopReason::LeaseLost) => tracing::error!(
            exit_status = json_only(ended.code),
            "the command was stopped: the lock was lost or could not be confirmed before its deadline"
        ),
        _ => {}
    }
    report.held = Some(acquired.elapsed());
    // A script's status is its parent's to know.
    report.command_status = ended.command_code.filter(|_| matches!(target, Target::Command));
    report.renewals = ended.renewals;
    report.renewal_failures = ended.renewal_failures;
    report.lost = ended.lost;
    report.outcome = Some(match ended.stopped {
        Some(StopReason::LeaseLost) => Outcome::Lost,
        Some(StopReason::MaxRuntime) => Outcome::Timeout,
        _ if ended.code == 0 && unrecorded => Outcome::Unrecorded,
        _ if ended.code == 0 => Outcome::Success,
        _ => Outcome::Failed,
    });
    Ok(ended.code)
}

/// `--jitter`: sleeps a uniformly random part of `spread`, so that runs a cron starts at the
/// same second reach Redis spread over it. A signal ends the run as it ends a wait for the lock.
async fn spread_start(spread: Duration, signals: &mut Signals) -> Result<(), Error> {
    let delay = crate::backoff::below(spread);
    tracing::info!(
        jitter_ms = delay.as_millis() as u64,
        "sleeping {} (--jitter {}) before the first attempt",
        humantime::format_duration(Duration::from_millis(delay.as_millis() as u64)),
        humantime::format_duration(spread),
    );
    tokio::select! {
        () = tokio::time::sleep(delay) => Ok(()),
        sig = signals.recv_before_start(logging::clear_status) => Err(Error::interrupted(sig)),
    }
}

/// `--fail-open` after Redis stayed unreachable: the command runs, supervised, with no lock.
async fn run_unlocked(
    config: &Config,
    signals: &mut Signals,
    reason: &str,
    report: &mut Report,
    mut guard: Guard,
    mut target: Target<'_>,
) -> Result<u8, Error> {
    tracing::error!(
        "RUNNING WITHOUT A LOCK (--fail-open): Redis is unreachable ({reason}); \
         another host may run this command at the same time"
    );
    let env = LockEnv {
        key: OsString::from_vec(config.key.clone()),
        keys: all_keys(config),
        token: None,
        fence: None,
        fences: None,
        ttl_ms: config.ttl.as_millis() as u64,
        no_new_privs: config.no_new_privs,
    };
    guard.no_lock();
    let mut child = start(&mut target, config, &env, guard, signals).await?;
    let ended = supervise(&mut child, None, signals, config, Instant::now()).await;
    if ended.survivors {
        tracing::error!(
            exit_status = config.output.format.json_only(ended.code),
            "the command could not be stopped: processes of its group still run"
        );
    }
    report.command_status = ended.command_code;
    Ok(ended.code)
}

/// Starts the command, or takes over guarding the script, once its guardian runs.
async fn start(
    target: &mut Target<'_>,
    config: &Config,
    env: &LockEnv,
    mut guard: Guard,
    signals: &mut Signals,
) -> Result<Child, Error> {
    match target {
        Target::Command => {
            guard.ready(&config.command).await?;
            Child::spawn(&config.command, env, guard, signals.take_child_exits())
        }
        Target::Script(holding) => holding.take_over(env, guard).await,
    }
}

/// "a run with --idempotency-key ID already succeeded on HOST at TIME".
fn already_done(config: &Config, record: &[u8]) -> String {
    let id =
        config.idempotency.as_ref().map(|i| String::from_utf8_lossy(&i.id).into_owned()).unwrap_or_default();
    match Success::parse(record) {
        Some(s) => format!("a run with --idempotency-key {id:?} already succeeded on {}", s.describe()),
        None => format!("a run with --idempotency-key {id:?} already succeeded"),
    }
}

/// Every key, in the order given, separated by spaces (`REDLOCK_KEYS`).
fn all_keys(config: &Config) -> OsString {
    OsString::from_vec(config.keys.join(&b' '))
}
