//! The operator's view of a lock: a snapshot for `status`, and the forced release.

use std::time::Duration;

use redis::Value;
use tokio::time::{Instant, sleep_until};

use super::{Conn, Fault, Keys, replies, scripts};
use crate::backoff::full_jitter;

/// Most success records `status` lists.
const MAX_RECORDS: usize = 100;
/// Bound on SCAN calls while looking for success records.
const MAX_SCANS: usize = 100;
/// How many queued waiters `status` lists (the first ones).
const MAX_WAITERS: usize = 10;
/// How many holders of a `--shared` or `--limit` lock `status` lists (the first to end).
const MAX_HOLDERS: usize = 100;

/// The lock key, its fence and success records, as one `status` call saw them.
#[derive(Debug)]
pub struct Snapshot {
    /// The key's type (`none` when free).
    pub kind: String,
    pub value: Option<Vec<u8>>,
    /// `None` when free, `Some(None)` when it exists without expiry.
    pub ttl: Option<Option<Duration>>,
    pub fence: Option<i64>,
    /// (ID, stored record), sorted by ID.
    pub records: Vec<(Vec<u8>, Vec<u8>)>,
    /// More records exist than are listed.
    pub more_records: bool,
    /// How many runs are queued for the lock (live entries).
    pub waiters: u64,
    /// The first of them, in order: their lock values (host, pid, start) and arrival numbers.
    pub first_waiters: Vec<(Vec<u8>, u64)>,
    /// `--shared` and `--limit`: how many hold (live leases).
    pub holding: u64,
    /// The first of them by lease end: value, time left, fence.
    pub holders: Vec<(Vec<u8>, Duration, Option<i64>)>,
    /// The key is a sorted set of holders of `--shared` or `--limit` (not some other set).
    pub several: bool,
}

/// What `status` reads. Redis answering "not now" (TRYAGAIN during a slot migration, LOADING,
/// …) is retried for up to one request timeout, then reported in the server's words.
pub async fn snapshot(conn: &mut Conn, keys: &Keys) -> Result<Snapshot, Fault> {
    let give_up = Instant::now() + conn.command_timeout();
    let mut failures = 0;
    loop {
        match snapshot_once(conn, keys).await {
            Err(Fault::Transient(_)) if Instant::now() < give_up => {
                failures += 1;
                let delay = full_jitter(Duration::from_millis(10), failures, Duration::from_millis(200));
                sleep_until((Instant::now() + delay).min(give_up)).await;
            }
            result => return result,
        }
    }
}

async fn snapshot_once(conn: &mut Conn, keys: &Keys) -> Result<Snapshot, Fault> {
    let mut script = scripts::STATUS.key(&keys.lock);
    script.key(&keys.fence).key(&keys.queue).key(&keys.queue_expiry).key(&keys.holders);
    script.arg(MAX_WAITERS).arg(MAX_HOLDERS);
    // Read-only, so that it answers while Redis's writes are paused (a failover); as any
    // script where Redis or the ACL does not know EVALSHA_RO.
    let reply: Vec<Value> = match conn.invoke_read_only(&script).await {
        Err(Fault::Unavailable(m)) => return Err(Fault::Unavailable(m)),
        Err(_) => conn.invoke(&script).await?,
        Ok(reply) => reply,
    };
    let [kind, value, pttl, fence, waiters, first, holding, holders, ours] = &reply[..] else {
        return Err(replies::unexpected("status", &reply));
    };
    let holding = replies::int(Some(holding)).and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
    let holders = match holders {
        Value::Array(items) => items
            .chunks(3)
            .filter_map(|entry| {
                let value = replies::bytes(entry.first())?;
                let left = replies::int(entry.get(1)).and_then(|ms| u64::try_from(ms).ok())?;
                Some((value, Duration::from_millis(left), replies::fence(entry.get(2))))
            })
            .collect(),
        _ => Vec::new(),
    };
    let waiters = replies::int(Some(waiters)).and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
    let first_waiters = match first {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|pair| {
                let value = replies::bytes(pair.first())?;
                let seq = replies::text(pair.get(1)).parse().ok()?;
                Some((value, seq))
            })
            .collect(),
        _ => Vec::new(),
    };
    let kind = replies::text(Some(kind));
    let several = kind == "zset" && replies::int(Some(ours)) == Some(1);
    let value = replies::bytes(Some(value));
    let ttl = match replies::int(Some(pttl)) {
        Some(-2) | None => None,
        Some(-1) => Some(None),
        Some(ms) => Some(Some(Duration::from_millis(ms as u64))),
    };
    let fence = replies::fence(Some(fence));
    let (records, more_records) = records(conn, keys).await?;
    Ok(Snapshot {
        kind,
        value,
        ttl,
        fence,
        records,
        more_records,
        waiters,
        first_waiters,
        holding,
        holders,
        several,
    })
}

/// Success records of `--idempotency-key`, found with SCAN (bounded).
async fn records(conn: &mut Conn, keys: &Keys) -> Result<(Vec<(Vec<u8>, Vec<u8>)>, bool), Fault> {
    let prefix = keys.record(b"");
    // In a Cluster, the records live on the node that serves the lock key's slot.
    let slot = super::keys::slot(&keys.lock);
    let mut pattern = glob_escape(&prefix);
    pattern.push(b'*');
    let mut found: Vec<Vec<u8>> = Vec::new();
    let mut cursor = 0u64;
    for _ in 0..MAX_SCANS {
        let (next, batch): (u64, Vec<Vec<u8>>) = conn
            .query(
                redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(1000),
                Some(slot),
            )
            .await?;
        found.extend(batch);
        cursor = next;
        if cursor == 0 || found.len() > MAX_RECORDS {
            break;
        }
    }
    found.sort();
    found.dedup();
    let more = found.len() > MAX_RECORDS || cursor != 0;
    found.truncate(MAX_RECORDS);
    if found.is_empty() {
        return Ok((Vec::new(), more));
    }
    let values: Vec<Option<Vec<u8>>> = conn.query(redis::cmd("MGET").arg(&found), None).await?;
    let records = found
        .into_iter()
        .zip(values)
        .filter_map(|(key, value)| Some((key[prefix.len()..].to_vec(), value?)))
        .collect();
    Ok((records, more))
}

/// What the forced release found.
#[derive(Debug)]
pub enum Forced {
    /// Deleted; the values of the holders dropped, saying whose they were.
    Deleted(Vec<Vec<u8>>),
    /// There was no lock.
    Free,
    /// No holder's token starts with the prefix given.
    NoMatch,
    /// This many holders' tokens start with the prefix given; none was dropped.
    Ambiguous(u64),
}

/// Drops every holder, or with `prefix` the one whose token starts with it.
pub async fn force_release(conn: &mut Conn, keys: &Keys, prefix: Option<&str>) -> Result<Forced, Fault> {
    let mut script = scripts::FORCE_RELEASE.key(&keys.lock);
    script.key(&keys.queue).key(&keys.queue_expiry).key(&keys.holders);
    script.arg(&keys.released_channel).arg(&keys.wake_prefix).arg(prefix.unwrap_or_default());
    let reply: Vec<Value> = conn.invoke(&script).await?;
    match &reply[..] {
        [Value::Int(1), values @ ..] if !values.is_empty() => {
            Ok(Forced::Deleted(values.iter().filter_map(|v| replies::bytes(Some(v))).collect()))
        }
        [Value::Int(0)] => Ok(Forced::Free),
        [Value::Int(2)] => Ok(Forced::NoMatch),
        [Value::Int(3), n] => Ok(Forced::Ambiguous(replies::int(Some(n)).unwrap_or(0).max(0) as u64)),
        [Value::Int(-1), kind] => Err(replies::not_a_lock(&keys.lock, Some(kind), None)),
        _ => Err(replies::unexpected("release", &reply)),
    }
}

/// Escapes Redis glob metacharacters so a key matches only itself.
fn glob_escape(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() + 4);
    for &b in raw {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn glob_metacharacters_are_escaped() {
        assert_eq!(super::glob_escape(b"{a*b?[c]\\}:done:"), b"{a\\*b\\?\\[c\\]\\\\}:done:");
    }
}
