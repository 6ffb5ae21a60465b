//! Reading Redis replies, the same way in every caller: the values the scripts return (their
//! shapes are documented with the scripts), and the answers several scripts share.

use redis::Value;

use super::{Fault, show_key};

/// A string the script returned; `None` for anything else (`false` becomes nil).
pub fn bytes(v: Option<&Value>) -> Option<Vec<u8>> {
    match v? {
        Value::BulkString(b) => Some(b.clone()),
        _ => None,
    }
}

pub fn int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

/// A fence: the decimal string the script returns (exact; a Lua number is not).
pub fn fence(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// A string or status for messages, whatever it holds.
pub fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        Some(Value::Okay) => "OK".to_owned(),
        other => format!("{other:?}"),
    }
}

/// `{-1, type[, name]}`: the lock key (or the name next to it that is given) holds a value of
/// another type, left untouched.
pub fn not_a_lock(key: &[u8], kind: Option<&Value>, name: Option<&Value>) -> Fault {
    let kind = text(kind);
    if let Some(name) = bytes(name).filter(|n| n != key) {
        return Fault::WrongType(format!(
            "{} next to lock {} holds a value of type {kind}, not what the lock keeps there; it was \
             left untouched (delete it if nothing else uses it)",
            show_key(&name),
            show_key(key)
        ));
    }
    let what = if kind == "zset" {
        // A lock of --shared or --limit is a sorted set of redlock-run values.
        "a sorted set not written by redlock-run".to_owned()
    } else {
        format!("a value of type {kind}")
    };
    Fault::WrongType(format!("key {} holds {what}, not a lock; it was left untouched", show_key(key)))
}

/// A reply of a shape the script never produces.
pub fn unexpected(operation: &str, reply: &[Value]) -> Fault {
    Fault::Internal(format!("unexpected reply to {operation} ({} elements)", reply.len()))
}
