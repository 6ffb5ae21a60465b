//! The operator's subcommands: `status` (who holds the lock) and `release --force`.
//! Their answer goes to stdout; diagnostics to stderr as everywhere.

use std::io::Write;

use crate::config::RedisConfig;
use crate::exit::Error;
use crate::lock::admin::{self, Forced};
use crate::lock::{self, Conn, Fault, Holder, Keys, Success, rfc3339_ms, show_key};

/// Exit status of `status` when the lock is free (0 when held).
const FREE: u8 = 1;

/// The version of the JSON that `status --json` and `release --force --json` print; it changes
/// only when a field changes meaning or goes away.
const JSON_VERSION: u32 = 1;

pub async fn status(key: &[u8], json: bool, redis: &RedisConfig) -> Result<u8, Error> {
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
            // Who holds it on this node: the stored value, or the key's type for a non-lock.
            *holders
                .entry(snap.value.clone().unwrap_or_else(|| snap.kind.clone().into_bytes()))
                .or_insert(0) += 1;
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
    let held = state == Some(true);
    let out = match (json, values.len()) {
        (true, 1) => format!("{}\n", values.remove(0).1),
        (true, _) => {
            let nodes: Vec<_> = values
                .into_iter()
                .map(|(target, mut v)| {
                    v["target"] = serde_json::Value::String(target);
                    v
                })
                .collect();
            let all = serde_json::json!({
                "version": JSON_VERSION,
                "key": String::from_utf8_lossy(key),
                "held": state,
                "held_on": held_on,
                "quorum": quorum,
                "unreachable": unreachable,
                "nodes": nodes,
            });
            format!("{all}\n")
        }
        (false, 1) => texts.remove(0),
        (false, n) => format!(
            "lock {}: {} ({held_on} of {n} nodes hold it, {quorum} needed{})\n{}",
            show_key(key),
            match state {
                Some(true) => "held",
                Some(false) => "free",
                None => "UNKNOWN",
            },
            if unreachable > 0 { format!(", {unreachable} unreachable") } else { String::new() },
            texts.concat()
        ),
    };
    print_out(&out)?;
    if state.is_none() {
        return Err(Error::Unavailable(format!(
            "lock {}: whether a majority holds it is unknown ({unreachable} node(s) unreachable)",
            show_key(key)
        )));
    }
    Ok(if held { 0 } else { FREE })
}

/// A holder as both subcommands' JSON shows it.
fn holder_json(h: &Holder) -> serde_json::Value {
    serde_json::json!({
        "host": h.host,
        "pid": h.pid,
        "since": rfc3339_ms(h.since_ms),
        "since_unix_ms": h.since_ms,
        "token_prefix": h.token_prefix(),
    })
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// One node's view: text, JSON, and whether the key exists there.
fn describe(key: &[u8], snap: &admin::Snapshot, json: bool) -> (String, serde_json::Value, bool) {
    let held = snap.kind != "none";
    let holder = snap.value.as_deref().and_then(Holder::parse);
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
            (Some(h), true) => {
                t.push_str(&format!("lock {name}: held by {}\n", h.describe()));
                t.push_str(&format!("  token:  {}… (prefix)\n", h.token_prefix()));
            }
            (None, true) if snap.kind == "string" => {
                t.push_str(&format!("lock {name}: held, but not by redlock-run (foreign value)\n"))
            }
            (None, true) => t.push_str(&format!("lock {name}: the key holds a {}, not a lock\n", snap.kind)),
        }
        match snap.ttl {
            Some(Some(d)) => t.push_str(&format!(
                "  ttl:    {} left\n",
                humantime::format_duration(std::time::Duration::from_millis(d.as_millis() as u64))
            )),
            Some(None) => t.push_str("  ttl:    NONE: the key never expires by itself\n"),
            None => {}
        }
        match snap.fence {
            Some(f) => t.push_str(&format!("  fence:  {f} (the last acquisition's)\n")),
            None => t.push_str("  fence:  none yet\n"),
        }
        if snap.waiters > 0 {
            t.push_str(&format!("  queue:  {} waiting\n", snap.waiters));
            for (i, w) in waiters.iter().enumerate() {
                t.push_str(&format!("    {}. {}\n", i + 1, w.describe()));
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

pub async fn release(key: &[u8], json: bool, redis: &RedisConfig) -> Result<u8, Error> {
    let keys = Keys::new(key);
    let name = show_key(key);
    let mut released = Vec::new();
    let mut failed = Vec::new();
    let nodes = redis.nodes();
    for node in &nodes {
        let mut conn = Conn::new(node)?;
        match admin::force_release(&mut conn, &keys).await {
            Ok(Forced::Deleted(value)) => released.push(value),
            Ok(Forced::Free) => {}
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
    let holder = released.first().map(|value| Holder::parse(value));
    if json {
        let holder_json = holder.as_ref().and_then(|h| h.as_ref()).map(holder_json);
        let out = serde_json::json!({
            "version": JSON_VERSION,
            "key": String::from_utf8_lossy(key),
            "released": holder.is_some(),
            "holder": holder_json,
            "foreign_value": matches!(holder, Some(None)),
            "nodes_failed": failed.len(),
        });
        print_out(&format!("{out}\n"))?;
    }
    let Some(holder) = holder else {
        if !json {
            print_out(&format!("lock {name} was not held; nothing to release\n"))?;
        }
        return Ok(FREE);
    };
    let whose = match holder {
        Some(h) => format!("held by {}", h.describe()),
        None => "held by a value not written by redlock-run".to_owned(),
    };
    tracing::warn!(key = %key.escape_ascii(), "released by force");
    if !json {
        print_out(&format!("released lock {name}, {whose}; waiters were told\n"))?;
    }
    Ok(0)
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
