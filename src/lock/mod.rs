//! The Redis side: the stored value, acquire / renew / release, and the lease deadline.

pub mod admin;
mod conn;
pub mod keys;
mod lease;
pub mod renewer;
mod scripts;
mod values;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::TryRng;
use redis::Value;

use crate::config::Idempotency;

pub use conn::{Conn, Fault};
pub use keys::Keys;
pub use lease::Lease;
pub use values::{Holder, Success, rfc3339_ms};

/// How long the fence counter outlives the last acquisition (it is re-initialised from the
/// server clock when it is gone, so expiring it is safe).
const FENCE_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// What one acquisition attempt found.
#[derive(Debug)]
pub enum Acquired {
    /// The lock is ours: its fence and the lease measured from just before the request.
    Yes { fence: i64, lease: Lease },
    /// Someone else holds it: their remaining TTL (`None`: the key never expires) and value.
    Busy { pttl: Option<Duration>, holder: Vec<u8> },
    /// The success record of `--idempotency-key` exists: the work is done. Nothing was taken.
    AlreadyDone { record: Vec<u8> },
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// Deleted, and waiters told.
    Deleted,
    /// Kept until the end of `--min-hold`.
    Kept,
    /// The key did not hold our value (expired or taken over) and was left untouched.
    NotOurs,
}

/// One lock owner: the connection, the key names and the value that proves ownership.
pub struct Lock {
    conn: Conn,
    keys: Keys,
    value: String,
    ttl: Duration,
    /// The success record's key and lifetime, with `--idempotency-key`.
    record: Option<(Vec<u8>, Duration)>,
}

impl Lock {
    pub fn new(
        conn: Conn,
        key: &[u8],
        ttl: Duration,
        idempotency: Option<&Idempotency>,
    ) -> Result<Self, Fault> {
        let keys = Keys::new(key);
        let record = idempotency.map(|i| (keys.record(&i.id), i.ttl));
        Ok(Lock { conn, keys, value: owner_value()?, ttl, record })
    }

    /// Subscribes to the announcement of this lock's release (for waiters).
    pub async fn watch_releases(&mut self) -> Result<redis::aio::PubSubStream, Fault> {
        self.conn.subscribe(&self.keys.released_channel).await
    }

    /// The value stored at the key: `<token> <host> <pid> <start unix ms>`.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// A short prefix of the token, safe to log.
    pub fn token_prefix(&self) -> &str {
        &self.value[..8]
    }

    pub fn target(&self) -> &str {
        &self.conn.target
    }

    pub async fn acquire(&mut self) -> Result<Acquired, Fault> {
        let mut script = scripts::ACQUIRE.key(&self.keys.lock);
        script.key(&self.keys.fence);
        if let Some((record, _)) = &self.record {
            script.key(record);
        }
        script.arg(&self.value).arg(millis(self.ttl)).arg(millis(FENCE_TTL.max(self.ttl * 2)));
        let sent = tokio::time::Instant::now();
        let reply: Vec<Value> = self.conn.invoke(&script).await?;
        let unexpected =
            || Fault::Internal(format!("unexpected reply to acquire ({} elements)", reply.len()));
        match reply.first() {
            Some(Value::Int(1)) => {
                let fence = as_int(reply.get(1)).ok_or_else(unexpected)?;
                Ok(Acquired::Yes { fence, lease: Lease::new(sent, self.ttl) })
            }
            Some(Value::Int(0)) => {
                let pttl = as_int(reply.get(1)).ok_or_else(unexpected)?;
                let holder = as_bytes(reply.get(2));
                let pttl = u64::try_from(pttl).ok().map(Duration::from_millis);
                Ok(Acquired::Busy { pttl, holder })
            }
            Some(Value::Int(2)) => Ok(Acquired::AlreadyDone { record: as_bytes(reply.get(1)) }),
            Some(Value::Int(-1)) => Err(Fault::WrongType(format!(
                "key {} holds a value of type {}, not a lock; it was left untouched",
                show_key(&self.keys.lock),
                as_text(reply.get(1))
            ))),
            Some(Value::Int(-2)) => Err(Fault::WrongType(format!(
                "fence counter {} is not an integer ({}); it was left untouched and the lock not taken",
                show_key(&self.keys.fence),
                as_text(reply.get(1))
            ))),
            _ => Err(unexpected()),
        }
    }

    /// Extends the lease if the key still holds our value. `Ok(false)`: it does not (lost).
    pub async fn renew(&mut self) -> Result<bool, Fault> {
        let n: i64 = self
            .conn
            .invoke(scripts::RENEW.key(&self.keys.lock).arg(&self.value).arg(millis(self.ttl)))
            .await?;
        Ok(n == 1)
    }

    /// Deletes the key if it still holds our value and tells waiters — or, with `keep`, lets it
    /// live that much longer (`--min-hold`). With `succeeded` and `--idempotency-key`, records
    /// the success in the same round trip.
    pub async fn release(&mut self, keep: Duration, succeeded: bool) -> Result<Released, Fault> {
        let mut script = scripts::RELEASE.key(&self.keys.lock);
        let record = self.record.as_ref().filter(|_| succeeded);
        if let Some((key, _)) = record {
            script.key(key);
        }
        script.arg(&self.value).arg(&self.keys.released_channel).arg(millis(keep));
        if let Some((_, ttl)) = record {
            script.arg(success_value()).arg(millis(*ttl));
        }
        let reply: Vec<Value> = self.conn.invoke(&script).await?;
        match reply.get(1) {
            Some(Value::Int(0)) | None => {}
            error => tracing::warn!("could not record the success of --idempotency-key: {}", as_text(error)),
        }
        match reply.first() {
            Some(Value::Int(1)) => Ok(Released::Deleted),
            Some(Value::Int(2)) => Ok(Released::Kept),
            Some(Value::Int(0)) => Ok(Released::NotOurs),
            _ => Err(Fault::Internal(format!("unexpected reply to release ({} elements)", reply.len()))),
        }
    }
}

/// A fresh owner value: 128 random bits from the OS, then who holds it (for `status`).
fn owner_value() -> Result<String, Fault> {
    let mut token = [0u8; 16];
    rand::rngs::SysRng
        .try_fill_bytes(&mut token)
        .map_err(|e| Fault::Internal(format!("cannot read the OS random source: {e}")))?;
    let hex: String = token.iter().map(|b| format!("{b:02x}")).collect();
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty() && !h.contains(char::is_whitespace))
        .unwrap_or_else(|| "unknown".to_owned());
    let started = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
    Ok(format!("{hex} {host} {} {started}", std::process::id()))
}

/// What a success record holds: `<host> <pid> <finished unix ms>`.
fn success_value() -> String {
    format!("{} {} {}", hostname(), std::process::id(), unix_ms())
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty() && !h.contains(char::is_whitespace))
        .unwrap_or_else(|| "unknown".to_owned())
}

fn unix_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis()
}

fn as_bytes(v: Option<&Value>) -> Vec<u8> {
    match v {
        Some(Value::BulkString(b)) => b.clone(),
        _ => Vec::new(),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn as_int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

fn as_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        Some(Value::Okay) => "OK".to_owned(),
        other => format!("{other:?}"),
    }
}

/// A key for messages: text when it is printable UTF-8, escaped bytes otherwise.
pub fn show_key(key: &[u8]) -> String {
    format!("\"{}\"", key.escape_ascii())
}
