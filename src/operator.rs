//! The operator's subcommands: `status` (who holds the lock) and `release --force`.
//! Their answer goes to stdout; diagnostics to stderr as everywhere.

use std::io::Write;

use crate::exit::{self, Error};
use crate::lock::admin::{self, Forced};
use crate::lock::settings::RedisConfig;
use crate::lock::{self, Conn, Fault, Holder, Keys, Kind, Success, rfc3339_ms, show_key};

/// The version of the JSON that `status --json` and `release --force --json` print; it changes
/// only when a field changes meaning or goes away.
const JSON_VERSION: u32 = 1;

/// `status` of one key or several: 0 when every key is held, 1 when one is free.
pub async fn status(keys: &[Vec<u8>], json: bool, redis: &RedisConfig) -> Result<u8, Error> {
    let mut outs = Vec::new();
    let mut unknown = None;
    let mut all_held = true;
    // Every key is read (at once), whatever happens to another.
    let results = futures_util::future::join_all(keys.iter().map(|k| status_of(k, json, redis))).await;
    for (key, result) in keys.iter().zip(results) {
        let (state, out, unreachable) = match result {
            Ok(answer) => answer,
            Err(e) if keys.len() > 1 => {
                outs.push(failed_key(key, &e, json));
                all_held = false;
                unknown.get_or_insert(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        all_held &= state == Some(true);
        if state.is_none() {
            unknown.get_or_insert_with(|| {
                Error::Unavailable(format!(
                    "lock {}: whether a majority holds it is unknown ({unreachable} node(s) unreachable)",
                    show_key(key)
                ))
            });
        }
        outs.push(out);
    }
    print_keys(outs, json)?;
    if let Some(e) = unknown {
        return Err(e);
    }
    Ok(if all_held { exit::status::SUCCESS } else { exit::status::NOT_HELD })
}

/// One key's status: whether it is held (`None`: unknown, with nodes unreachable), what to
/// print (the JSON object, or the text as a JSON string), and how many nodes did not answer.
async fn status_of(
    key: &[u8],
    json: bool,
    redis: &RedisConfig,
) -> Result<(Option<bool>, serde_json::Value, usize), Error> {
    let keys = Keys::new(key);
    let nodes = redis.nodes();
    let mut unreachable = 0;
    let mut holders: std::collections::HashMap<Vec<u8>, usize> = std::collections::HashMap::new();
    let mut texts = Vec::new();
    let mut values = Vec::new();
    for node in &nodes {
        let mut conn = Conn::new(node)?;
        let context = format!("reading lock {} at {}{}", show_key(key), conn.target, redis.source_note());
        let snap = match admin::snapshot(&mut conn, &keys).await {
            Ok(snap) => snap,
            // With a quorum, one unreachable node is part of the picture, not the end of it.
            Err(f @ (Fault::Unavailable(_) | Fault::Transient(_))) if nodes.len() > 1 => {
                let state = if matches!(f, Fault::Transient(_)) { "unavailable" } else { "unreachable" };
                let e = f.to_string();
                texts.push(format!("on {}:\n  {state}: {e}\n", conn.target));
                values.push((conn.target.clone(), serde_json::json!({ "error": e })));
                unreachable += 1;
                continue;
            }
            Err(f) => return Err(f.into_error(&context)),
        };
        let (text, value, held) = describe(key, &snap, json);
        if held {
            // Who holds it on this node: the stored value (the first holder of several), or the
            // key's type for a non-lock.
            let who = snap.value.clone().or_else(|| snap.holders.first().map(|(v, ..)| v.clone()));
            *holders.entry(who.unwrap_or_else(|| snap.kind.clone().into_bytes())).or_insert(0) += 1;
        }
        if nodes.len() > 1 {
            texts.push(format!("on {}:\n{}", conn.target, indent(&text)));
        } else {
            texts.push(text);
        }
        values.push((conn.target.clone(), value));
    }
    if unreachable == nodes.len() {
        return Err(Error::Unavailable(format!("reading lock {}: no node answered", show_key(key))));
    }
    // With a Redlock quorum the lock is held when a majority of nodes hold the same value.
    let quorum = lock::quorum(nodes.len());
    let held_on = holders.values().copied().max().unwrap_or(0);
    // Unknown when the unreachable nodes could make up the difference either way.
    let state = if held_on >= quorum {
        Some(true)
    } else if held_on + unreachable >= quorum {
        None
    } else {
        Some(false)
    };
    let out = match (json, values.len()) {
        (true, 1) => values.remove(0).1,
        (true, _) => {
            let nodes: Vec<_> = values
                .into_iter()
                .map(|(target, mut v)| {
                    v["target"] = serde_json::Value::String(target);
                    v
                })
                .collect();
            serde_json::json!({
                "version": JSON_VERSION,
                "key": String::from_utf8_lossy(key),
                "held": state,
                "held_on": held_on,
                "quorum": quorum,
                "unreachable": unreachable,
                "nodes": nodes,
            })
        }
        (false, 1) => serde_json::Value::String(texts.remove(0)),
        (false, n) => serde_json::Value::String(format!(
            "lock {}: {} ({held_on} of {n} nodes hold it, {quorum} needed{})\n{}",
            show_key(key),
            match state {
                Some(true) => "held",
                Some(false) => "free",
                None => "UNKNOWN",
            },
            if unreachable > 0 { format!(", {unreachable} unreachable") } else { String::new() },
            texts.concat()
        )),
    };
    Ok((state, out, unreachable))
}

/// A holder as both subcommands' JSON shows it.
fn holder_json(h: &Holder) -> serde_json::Value {
    serde_json::json!({
        "host": h.host,
        "pid": h.pid,
        "since": rfc3339_ms(h.since_ms),
        "since_unix_ms": h.since_ms,
        "token_prefix": h.token_prefix(),
        "note": h.note,
        "kind": h.kind.name(),
        "limit": match h.kind {
            Kind::Limit(n) => Some(n),
            _ => None,
        },
    })
}

/// "exclusive", "shared", "--limit 3".
fn kind_text(kind: Kind) -> String {
    match kind {
        Kind::Limit(n) => format!("--limit {n}"),
        other => other.name().to_owned(),
    }
}

fn humane(d: std::time::Duration) -> humantime::FormattedDuration {
    humantime::format_duration(std::time::Duration::from_millis(d.as_millis() as u64))
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// One node's view: text, JSON, and whether the key exists there.
fn describe(key: &[u8], snap: &admin::Snapshot, json: bool) -> (String, serde_json::Value, bool) {
    // A set of holders whose leases have all ended is free (Redis removes it a moment later).
    let several = snap.several;
    let held = snap.kind != "none" && !(several && snap.holding == 0);
    // Every holder, with its time left and fence: the one of an exclusive lock, or those of a
    // `--shared` or `--limit` lock that `status` lists.
    let holders: Vec<(Holder, std::time::Duration, Option<i64>)> = if several {
        snap.holders.iter().filter_map(|(v, left, fence)| Some((Holder::parse(v)?, *left, *fence))).collect()
    } else {
        snap.value
            .as_deref()
            .and_then(Holder::parse)
            .map(|h| (h, snap.ttl.flatten().unwrap_or_default(), snap.fence))
            .into_iter()
            .collect()
    };
    let holder = holders.first().map(|(h, ..)| h.clone());
    let kind = holder.as_ref().map(|h| h.kind);
    let records: Vec<(String, Option<Success>)> = snap
        .records
        .iter()
        .map(|(id, value)| (String::from_utf8_lossy(id).into_owned(), Success::parse(value)))
        .collect();

    // The first queued waiters, in order (values that do not parse are skipped).
    let waiters: Vec<Holder> =
        snap.first_waiters.iter().filter_map(|(value, _)| Holder::parse(value)).collect();

    if json {
        let first_json: Vec<_> = waiters.iter().map(holder_json).collect();
        let holders_json: Vec<_> = holders
            .iter()
            .map(|(h, left, fence)| {
                let mut j = holder_json(h);
                j["ttl_ms"] = serde_json::json!(left.as_millis() as u64);
                j["fence"] = serde_json::json!(fence);
                j
            })
            .collect();
        let holder_json = holder.as_ref().map(holder_json);
        let records_json: Vec<_> = records
            .iter()
            .map(|(id, s)| {
                serde_json::json!({
                    "id": id,
                    "host": s.as_ref().map(|s| s.host.clone()),
                    "pid": s.as_ref().map(|s| s.pid),
                    "at": s.as_ref().map(|s| rfc3339_ms(s.at_ms)),
                })
            })
            .collect();
        let out = serde_json::json!({
            "version": JSON_VERSION,
            "key": String::from_utf8_lossy(key),
            "held": held,
            "type": snap.kind,
            "holder": holder_json,
            "kind": kind.map(Kind::name),
            "limit": kind.and_then(Kind::limit),
            "holding": if held { snap.holding.max(1) } else { 0 },
            "holders": holders_json,
            "foreign_value": held && holder.is_none(),
            "ttl_ms": snap.ttl.flatten().map(|d| d.as_millis() as u64),
            // Whether the key expires by itself: meaningless for a free lock.
            "expires": held.then_some(!matches!(snap.ttl, Some(None))),
            "fence": snap.fence,
            "idempotency_records": records_json,
            "more_idempotency_records": snap.more_records,
            "queue": { "waiters": snap.waiters, "first": first_json },
        });
        return (String::new(), out, held);
    }
    let text = {
        let mut t = String::new();
        let name = show_key(key);
        match (&holder, held) {
            (_, false) => t.push_str(&format!("lock {name}: free\n")),
            (Some(h), true) if several => {
                let count = snap.holding;
                match h.kind {
                    Kind::Limit(n) => {
                        t.push_str(&format!("lock {name}: {count} of {n} permits held (--limit {n})\n"))
                    }
                    _ => t.push_str(&format!("lock {name}: held shared by {count}\n")),
                }
                for (i, (h, left, fence)) in holders.iter().enumerate() {
                    let fence = fence.map(|f| f.to_string()).unwrap_or_else(|| "?".to_owned());
                    t.push_str(&format!(
                        "  {}. {}, token {}…, {} left, fence {fence}\n",
                        i + 1,
                        h.describe(),
                        h.token_shown(),
                        humane(*left)
                    ));
                }
                if count > holders.len() as u64 {
                    t.push_str("  … (more not listed)\n");
                }
            }
            (Some(h), true) => {
                t.push_str(&format!("lock {name}: held by {}\n", h.describe()));
                t.push_str(&format!("  token:  {}… (prefix)\n", h.token_shown()));
            }
            (None, true) if snap.kind == "string" => {
                t.push_str(&format!("lock {name}: held, but not by redlock-run (foreign value)\n"))
            }
            (None, true) => t.push_str(&format!("lock {name}: the key holds a {}, not a lock\n", snap.kind)),
        }
        match snap.ttl {
            _ if several => {}
            Some(Some(d)) => t.push_str(&format!("  ttl:    {} left\n", humane(d))),
            Some(None) => t.push_str("  ttl:    NONE: the key never expires by itself\n"),
            None => {}
        }
        match snap.fence {
            Some(f) => t.push_str(&format!("  fence:  {f} (the last acquisition's)\n")),
            None => t.push_str("  fence:  none yet\n"),
        }
        if snap.waiters > 0 {
            t.push_str(&format!("  queue:  {} waiting\n", snap.waiters));
            // Each waiter's kind, where kinds can differ (shared and exclusive runs).
            let kinds = several || waiters.iter().any(|w| w.kind != Kind::Exclusive);
            for (i, w) in waiters.iter().enumerate() {
                let kind = if kinds { format!(", {}", kind_text(w.kind)) } else { String::new() };
                t.push_str(&format!("    {}. {}{kind}\n", i + 1, w.describe()));
            }
            if snap.waiters > waiters.len() as u64 {
                t.push_str("    … (more not listed)\n");
            }
        }
        if !records.is_empty() {
            t.push_str("  idempotency records:\n");
            for (id, s) in &records {
                match s {
                    Some(s) => t.push_str(&format!("    {id}: succeeded on {}\n", s.describe())),
                    None => t.push_str(&format!("    {id}\n")),
                }
            }
            if snap.more_records {
                t.push_str("    … (more not listed)\n");
            }
        }
        t
    };
    (text, serde_json::Value::Null, held)
}

/// `release --force` of one key or several: 0 when something was released, 1 when nothing
/// was held (or matched `--holder`).
pub async fn release(
    keys: &[Vec<u8>],
    prefix: Option<&str>,
    json: bool,
    redis: &RedisConfig,
) -> Result<u8, Error> {
    let mut outs = Vec::new();
    let mut any = false;
    let mut failure = None;
    // Every key is tried (at once), whatever happens to another; each is reported.
    let results =
        futures_util::future::join_all(keys.iter().map(|k| release_of(k, prefix, json, redis))).await;
    for (key, result) in keys.iter().zip(results) {
        match result {
            Ok((released, out)) => {
                any |= released;
                outs.push(out);
            }
            Err(e) if keys.len() > 1 => {
                outs.push(failed_key(key, &e, json));
                failure.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    print_keys(outs, json)?;
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(if any { exit::status::SUCCESS } else { exit::status::NOT_HELD })
}

/// Prints what `status` or `release` found for each key: one key as before, several as their
/// texts one after the other, or one JSON object `{"version":1,"keys":[…]}`.
fn print_keys(mut outs: Vec<serde_json::Value>, json: bool) -> Result<(), Error> {
    let out = match outs.len() {
        1 if json => format!("{}\n", outs.remove(0)),
        1 => outs.remove(0).as_str().unwrap_or_default().to_owned(),
        _ if json => format!("{}\n", serde_json::json!({ "version": JSON_VERSION, "keys": outs })),
        _ => outs.iter().filter_map(|o| o.as_str()).collect::<Vec<_>>().concat(),
    };
    print_out(&out)
}

/// What `status` or `release` prints for a key of several that failed (the run's exit status
/// is then that failure's).
fn failed_key(key: &[u8], e: &Error, json: bool) -> serde_json::Value {
    if json {
        serde_json::json!({ "version": JSON_VERSION, "key": String::from_utf8_lossy(key), "error": e.to_string() })
    } else {
        serde_json::Value::String(format!("lock {}: error: {e}\n", show_key(key)))
    }
}

/// One key's forced release: whether something was released, and what to print (the JSON
/// object, or the text as a JSON string).
async fn release_of(
    key: &[u8],
    prefix: Option<&str>,
    json: bool,
    redis: &RedisConfig,
) -> Result<(bool, serde_json::Value), Error> {
    let keys = Keys::new(key);
    let name = show_key(key);
    let mut released: Vec<Vec<u8>> = Vec::new();
    let mut failed = Vec::new();
    let mut ambiguous = 0;
    let nodes = redis.nodes();
    for node in &nodes {
        let mut conn = Conn::new(node)?;
        match admin::force_release(&mut conn, &keys, prefix).await {
            Ok(Forced::Deleted(values)) => {
                for value in values {
                    // A Redlock quorum holds the same value on several nodes: one holder.
                    if !released.contains(&value) {
                        released.push(value);
                    }
                }
            }
            Ok(Forced::Free | Forced::NoMatch) => {}
            Ok(Forced::Ambiguous(n)) => ambiguous = ambiguous.max(n),
            // Every node is tried; the first failure is reported at the end.
            Err(f) => failed.push(f.into_error(&format!(
                "releasing lock {name} at {}{}",
                conn.target,
                redis.source_note()
            ))),
        }
    }
    if failed.len() == nodes.len() || (released.is_empty() && !failed.is_empty()) {
        return Err(failed.remove(0));
    }
    for e in &failed {
        tracing::error!("{e}");
    }
    if ambiguous > 0 && released.is_empty() {
        return Err(Error::Usage(format!(
            "--holder {} matches {ambiguous} holders of lock {name}; nothing was released: give more of \
             the token (`redlock-run status --key ...` lists them)",
            prefix.unwrap_or_default()
        )));
    }
    let holders: Vec<Option<Holder>> = released.iter().map(|value| Holder::parse(value)).collect();
    if !holders.is_empty() {
        tracing::warn!(key = %key.escape_ascii(), holders = holders.len(), "released by force");
    }
    if json {
        let all: Vec<_> = holders.iter().flatten().map(holder_json).collect();
        let out = serde_json::json!({
            "version": JSON_VERSION,
            "key": String::from_utf8_lossy(key),
            "released": !holders.is_empty(),
            "holder": holders.first().and_then(|h| h.as_ref()).map(holder_json),
            "holders": all,
            "foreign_value": holders.iter().any(Option::is_none),
            "nodes_failed": failed.len(),
        });
        return Ok((!holders.is_empty(), out));
    }
    let text = if holders.is_empty() {
        match prefix {
            Some(p) => format!("lock {name} has no holder whose token starts with {p}; nothing released\n"),
            None => format!("lock {name} was not held; nothing to release\n"),
        }
    } else {
        let whose: Vec<String> = holders
            .iter()
            .map(|h| match h {
                Some(h) => format!("held by {}", h.describe()),
                None => "held by a value not written by redlock-run".to_owned(),
            })
            .collect();
        format!("released lock {name}, {}; waiters were told\n", whose.join("; "))
    };
    Ok((!holders.is_empty(), serde_json::Value::String(text)))
}

/// Writes the answer to stdout. A reader that has gone away (`status | head -0`) is not an
/// error: the answer is dropped quietly and the exit status still tells the state.
fn print_out(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::Internal(e.into())),
        _ => Ok(()),
    }
}
