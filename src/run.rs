//! One run: acquire, spawn, supervise, release — in that order, with each step's failure
//! mapped to its exit status.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::time::Duration;

use tokio::time::{Instant, sleep};

use crate::acquire::{Outcome, acquire, unix_ms_text};
use crate::backoff::full_jitter;
use crate::child::{Child, LockEnv};
use crate::config::Config;
use crate::exit::Error;
use crate::lock::renewer::Renewer;
use crate::lock::{Conn, Fault, Lock, Released, show_key};
use crate::signals::Signals;
use crate::supervise::{Held, supervise};

/// Bounds on the release after the command has ended.
const RELEASE_TRIES: u32 = 3;
const RELEASE_BUDGET: Duration = Duration::from_secs(3);

pub async fn run(config: Config) -> Result<u8, Error> {
    let mut signals = Signals::install().map_err(|e| Error::Internal(e.into()))?;
    let conn = Conn::new(&config.redis_url, config.connect_timeout, config.command_timeout)?;
    let mut lock = Lock::new(conn, &config.key, config.ttl, config.idempotency.as_ref())
        .map_err(|f| f.into_error("preparing the lock"))?;

    let wait_started = Instant::now();
    let (fence, lease) = match acquire(&mut lock, &config, &mut signals).await? {
        Outcome::Acquired { fence, lease } => (fence, lease),
        Outcome::AlreadyDone { record } => {
            tracing::warn!("skipped: {}", already_done(&config, &record));
            return Ok(0);
        }
        Outcome::Unlocked { reason } => return run_unlocked(&config, &mut signals, &reason).await,
    };
    let acquired = Instant::now();
    tracing::info!(
        key = %show_key(&config.key),
        fence,
        token = lock.token_prefix(),
        wait_ms = (acquired - wait_started).as_millis() as u64,
        "acquired"
    );

    let env = LockEnv {
        key: OsString::from_vec(config.key.clone()),
        token: Some(lock.value().to_owned()),
        fence: Some(fence.to_string()),
        ttl_ms: config.ttl.as_millis() as u64,
    };
    let mut child = match Child::spawn(&config.command, &env) {
        Ok(child) => child,
        Err(e) => {
            release(&mut lock, Duration::ZERO, false).await;
            return Err(e);
        }
    };

    let (renewer, mut events) = Renewer::start(lock, lease, acquired, config.renew_every);
    let held = Held { lease, events: &mut events };
    let ended = supervise(&mut child, Some(held), &mut signals, &config, acquired).await;
    let mut lock = renewer.stop().await;
    // Dropping the child kills anything left of its group and hands the terminal back.
    drop(child);
    let keep = config.min_hold.saturating_sub(acquired.elapsed());
    release(&mut lock, keep, ended.code == 0).await;
    tracing::info!(
        held_ms = acquired.elapsed().as_millis() as u64,
        command_status = ended.command_code,
        stopped = ?ended.stopped,
        "done"
    );
    Ok(ended.code)
}

/// `--fail-open` after Redis stayed unreachable: the command runs, supervised, with no lock.
async fn run_unlocked(config: &Config, signals: &mut Signals, reason: &str) -> Result<u8, Error> {
    tracing::error!(
        "RUNNING WITHOUT A LOCK (--fail-open): Redis is unreachable ({reason}); \
         another host may run this command at the same time"
    );
    let env = LockEnv {
        key: OsString::from_vec(config.key.clone()),
        token: None,
        fence: None,
        ttl_ms: config.ttl.as_millis() as u64,
    };
    let mut child = Child::spawn(&config.command, &env)?;
    let ended = supervise(&mut child, None, signals, config, Instant::now()).await;
    Ok(ended.code)
}

/// Releases the lock (or, with `keep`, shortens it to the rest of `--min-hold`), bounded in
/// time and tries. Failure is a warning, never a change of exit status: the key then expires by
/// itself within the TTL.
async fn release(lock: &mut Lock, keep: Duration, succeeded: bool) {
    let give_up = Instant::now() + RELEASE_BUDGET;
    for attempt in 1..=RELEASE_TRIES {
        match tokio::time::timeout_at(give_up, lock.release(keep, succeeded)).await {
            Ok(Ok(Released::Deleted)) => return tracing::info!("released"),
            Ok(Ok(Released::Kept)) => {
                return tracing::info!(keep_ms = keep.as_millis() as u64, "kept for the rest of --min-hold");
            }
            Ok(Ok(Released::NotOurs)) => {
                return tracing::warn!(
                    "the lock was no longer this run's at release (expired or taken over); left untouched"
                );
            }
            Ok(Err(Fault::Unavailable(msg))) if attempt < RELEASE_TRIES => {
                tracing::debug!("release failed, retrying: {msg}");
                sleep(full_jitter(Duration::from_millis(50), attempt, Duration::from_secs(1))).await;
            }
            Ok(Err(fault)) => {
                return tracing::warn!(
                    "could not release the lock; it expires by itself within the TTL: {fault}"
                );
            }
            Err(_) => break,
        }
    }
    tracing::warn!("could not release the lock in time; it expires by itself within the TTL");
}

/// "a run with --idempotency-key ID already succeeded on HOST at TIME".
fn already_done(config: &Config, record: &[u8]) -> String {
    let id =
        config.idempotency.as_ref().map(|i| String::from_utf8_lossy(&i.id).into_owned()).unwrap_or_default();
    let record = String::from_utf8_lossy(record);
    match record.split(' ').collect::<Vec<_>>()[..] {
        [host, pid, at] => format!(
            "a run with --idempotency-key {id:?} already succeeded on {host} (pid {pid}) at {}",
            unix_ms_text(at)
        ),
        _ => format!("a run with --idempotency-key {id:?} already succeeded ({record})"),
    }
}
