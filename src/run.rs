//! One run: acquire, spawn, supervise, release — in that order, with each step's failure
//! mapped to its exit status.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::time::Duration;

use tokio::time::{Instant, sleep};

use crate::backoff::full_jitter;
use crate::child::{Child, LockEnv};
use crate::config::Config;
use crate::exit::Error;
use crate::lock::renewer::Renewer;
use crate::lock::{Acquired, Conn, Fault, Lease, Lock, show_key};
use crate::signals::Signals;
use crate::supervise::supervise;

/// How long to keep retrying when Redis cannot be reached at start.
const UNAVAILABLE_RETRY_BUDGET: Duration = Duration::from_secs(1);
/// Bounds on the release after the command has ended.
const RELEASE_TRIES: u32 = 3;
const RELEASE_BUDGET: Duration = Duration::from_secs(3);

pub async fn run(config: Config) -> Result<u8, Error> {
    let mut signals = Signals::install().map_err(|e| Error::Internal(e.into()))?;
    let conn = Conn::new(
        &config.redis_url,
        config.connect_timeout,
        config.command_timeout,
    )?;
    let mut lock =
        Lock::new(conn, &config.key, config.ttl).map_err(|f| f.into_error("preparing the lock"))?;

    let wait_started = Instant::now();
    let (fence, lease) = acquire(&mut lock, &config, &mut signals).await?;
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
        token: lock.value().to_owned(),
        fence: fence.to_string(),
        ttl_ms: config.ttl.as_millis() as u64,
    };
    let mut child = match Child::spawn(&config.command, &env) {
        Ok(child) => child,
        Err(e) => {
            release(&mut lock).await;
            return Err(e);
        }
    };

    let (renewer, mut events) = Renewer::start(lock, lease, acquired, config.renew_every);
    let ended = supervise(
        &mut child,
        lease,
        &mut events,
        &mut signals,
        &config,
        acquired,
    )
    .await;
    let mut lock = renewer.stop().await;
    // Dropping the child kills anything left of its group and hands the terminal back.
    drop(child);
    release(&mut lock).await;
    tracing::info!(
        held_ms = acquired.elapsed().as_millis() as u64,
        command_status = ended.command_code,
        stopped = ?ended.stopped,
        "done"
    );
    Ok(ended.code)
}

/// Takes the lock, or says why not. Retries briefly when Redis cannot be reached; a signal
/// aborts the attempt with nothing held.
async fn acquire(
    lock: &mut Lock,
    config: &Config,
    signals: &mut Signals,
) -> Result<(i64, Lease), Error> {
    let give_up = Instant::now() + UNAVAILABLE_RETRY_BUDGET;
    let mut failures = 0u32;
    loop {
        let attempt = tokio::select! {
            r = lock.acquire() => r,
            sig = signals.recv() => return Err(Error::Interrupted { name: sig.as_str(), signal: sig as i32 }),
        };
        match attempt {
            Ok(Acquired::Yes { fence, lease }) => {
                if lease.remaining(Instant::now()) <= config.kill_grace {
                    release(lock).await;
                    return Err(Error::Unavailable(format!(
                        "Redis at {} answered too slowly: too little of the lease was left to start the command",
                        lock.target()
                    )));
                }
                return Ok((fence, lease));
            }
            Ok(Acquired::Busy { pttl, holder }) => {
                return Err(Error::Busy {
                    message: busy_message(&config.key, pttl, &holder),
                    code: config.busy_exit_code,
                });
            }
            Err(Fault::Unavailable(msg)) => {
                failures += 1;
                let delay = backoff(failures);
                if Instant::now() + delay >= give_up {
                    return Err(Fault::Unavailable(msg)
                        .into_error(&format!("cannot reach Redis at {}", lock.target())));
                }
                tracing::debug!("Redis unavailable, retrying in {delay:?}: {msg}");
                tokio::select! {
                    () = sleep(delay) => {}
                    sig = signals.recv() => return Err(Error::Interrupted { name: sig.as_str(), signal: sig as i32 }),
                }
            }
            Err(fault) => return Err(fault.into_error("taking the lock")),
        }
    }
}

/// Releases the lock, bounded in time and tries. Failure is a warning, never a change of exit
/// status: the key then expires by itself within the TTL.
async fn release(lock: &mut Lock) {
    let give_up = Instant::now() + RELEASE_BUDGET;
    for attempt in 1..=RELEASE_TRIES {
        match tokio::time::timeout_at(give_up, lock.release()).await {
            Ok(Ok(true)) => {
                tracing::info!("released");
                return;
            }
            Ok(Ok(false)) => {
                tracing::warn!(
                    "the lock was no longer this run's at release (expired or taken over); left untouched"
                );
                return;
            }
            Ok(Err(Fault::Unavailable(msg))) if attempt < RELEASE_TRIES => {
                tracing::debug!("release failed, retrying: {msg}");
                sleep(backoff(attempt)).await;
            }
            Ok(Err(fault)) => {
                tracing::warn!(
                    "could not release the lock; it expires by itself within the TTL: {fault}"
                );
                return;
            }
            Err(_) => break,
        }
    }
    tracing::warn!("could not release the lock in time; it expires by itself within the TTL");
}

fn backoff(failures: u32) -> Duration {
    full_jitter(Duration::from_millis(50), failures, Duration::from_secs(1))
}

/// "lock "k" is held by host pid 123 since …, for 12s more".
fn busy_message(key: &[u8], pttl: Option<Duration>, holder: &[u8]) -> String {
    let holder = String::from_utf8_lossy(holder);
    let mut parts = holder.split(' ');
    let who = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(_token), Some(host), Some(pid), Some(since)) => {
            let since = since
                .parse::<u64>()
                .ok()
                .map(|ms| {
                    humantime::format_rfc3339_seconds(
                        std::time::UNIX_EPOCH + Duration::from_millis(ms),
                    )
                    .to_string()
                })
                .unwrap_or_else(|| since.to_owned());
            format!("{host} (pid {pid}) since {since}")
        }
        _ => "another client (not a redlock-run value)".to_owned(),
    };
    let left = match pttl {
        Some(d) => format!("it expires in {} unless renewed", humantime::format_duration(Duration::from_millis(d.as_millis() as u64))),
        None => "the key has NO expiry and will never go away by itself; delete it if its holder is gone".to_owned(),
    };
    format!("lock {} is busy: held by {who}; {left}", show_key(key))
}
