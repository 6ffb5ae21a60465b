//! The Lua scripts: each lock operation is one round trip, and keys and values travel only as
//! KEYS/ARGV, never spliced into script text. `redis::Script` sends EVALSHA and loads the script
//! once on NOSCRIPT (e.g. after `SCRIPT FLUSH` or a restart).

use std::sync::LazyLock;

use redis::Script;

/// Lua helpers for fences. Lua numbers are doubles, exact only up to 2^53, so fences travel as
/// the decimal strings Redis writes (`INCR` checks and bumps the counter, `GET` reads it back)
/// and are compared as such: `less(a, b)` for canonical integers (no leading zeros).
/// `now_us()`: the server clock in microseconds, as a decimal string.
macro_rules! fence_lua {
    () => {
        r#"
local function canonical(s)
  return s ~= nil and s ~= false and (s == '0' or string.match(s, '^%-?[1-9]%d*$') ~= nil)
end
local function less(a, b)
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if na ~= nb then return na end
  if na then a, b = string.sub(b, 2), string.sub(a, 2) end
  if #a ~= #b then return #a < #b end
  return a < b
end
local function now_us()
  local now = redis.call('TIME')
  return now[1] .. string.format('%06d', tonumber(now[2]))
end
"#
    };
}

/// KEYS: lock, fence[, success record]. ARGV: value, ttl ms, fence ttl ms.
/// → `{1, fence}` acquired (the fence as a decimal string); `{0, pttl, holder}` busy;
///   `{-1, type}` the key holds another type; `{-2, error}` the fence counter is unusable
///   (nothing is left held); `{2, record}` the success record of `--idempotency-key` exists
///   (nothing taken).
///
/// Everything is read before anything is written, so a held lock is reported busy whatever
/// state Redis is in: out of memory, a read-only replica (a script without flags runs there
/// until its first write fails).
///
/// Each new fence is `max(counter + 1, server time in µs)`: it keeps increasing across data
/// loss (an older snapshot, a failover that lost the last bump, an expired counter) as long as
/// the server clocks do not go back by more than the time between two acquisitions.
///
/// When the key already holds this run's own value, an earlier attempt succeeded but its reply
/// was lost: ownership is confirmed, the TTL restarted and the fence of that attempt returned.
pub static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        fence_lua!(),
        r#"
local function bump_fence()
  local bumped = redis.pcall('INCR', KEYS[2])
  if type(bumped) == 'table' then return nil, bumped['err'] end
  local fence = redis.call('GET', KEYS[2])
  local now = now_us()
  if less(fence, now) then
    redis.call('SET', KEYS[2], now, 'PX', ARGV[3])
    return now
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return fence
end
if KEYS[3] then
  local done = redis.call('GET', KEYS[3])
  if done then return {2, done} end
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  local fence, err = bump_fence()
  if not fence then return {-2, err} end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, fence}
end
if kind ~= 'string' then return {-1, kind} end
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then return {0, redis.call('PTTL', KEYS[1]), holder} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local fence = redis.call('GET', KEYS[2])
if not canonical(fence) then
  local err
  fence, err = bump_fence()
  if not fence then
    redis.call('DEL', KEYS[1])
    return {-2, err}
  end
end
return {1, fence}
"#
    ))
});

/// KEYS: lock. ARGV: value, ttl ms. → 1 extended, 0 not ours (never re-creates a missing key).
pub static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('TYPE', KEYS[1])['ok'] == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#,
    )
});

/// KEYS: lock[, success record]. ARGV: value, release channel, keep ms, announce always
/// ("1" for a Redlock quorum, whose waiters listen on one node only), record value, record ttl ms.
/// → `{1, recorded}` deleted (and waiters told); `{2, recorded}` kept for `keep ms` more
///   (`--min-hold`); `{0, recorded}` not ours, left untouched. The success record, when a key is
///   given, is written whoever holds the lock: the command did succeed. `recorded` is the error
///   writing it, or 0.
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local recorded = 0
if KEYS[2] then
  local ok = redis.pcall('SET', KEYS[2], ARGV[5], 'PX', ARGV[6])
  if type(ok) == 'table' and ok['err'] then recorded = ok['err'] end
end
if redis.call('TYPE', KEYS[1])['ok'] == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  if tonumber(ARGV[3]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return {2, recorded}
  end
  redis.call('DEL', KEYS[1])
  -- Announcing is a courtesy to waiters; an ACL without channel rights must not fail the release.
  redis.pcall('PUBLISH', ARGV[2], 'released')
  return {1, recorded}
end
if ARGV[4] == '1' then redis.pcall('PUBLISH', ARGV[2], 'released') end
return {0, recorded}
"#,
    )
});

/// KEYS: lock, fence. → `{type, value or false, pttl, fence or false}`, one consistent snapshot
/// for `status`.
pub static STATUS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local kind = redis.call('TYPE', KEYS[1])['ok']
local value = false
if kind == 'string' then value = redis.call('GET', KEYS[1]) end
local fence = false
if redis.call('TYPE', KEYS[2])['ok'] == 'string' then fence = redis.call('GET', KEYS[2]) end
return {kind, value, redis.call('PTTL', KEYS[1]), fence}
"#,
    )
});

/// KEYS: lock. ARGV: release channel. The operator's override: deletes the lock whatever its
/// value and tells waiters. → `{1, value}` deleted; `{0}` there was none; `{-1, type}` the key
/// holds another type and was left alone.
pub static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return {0} end
if kind ~= 'string' then return {-1, kind} end
local value = redis.call('GET', KEYS[1])
redis.call('DEL', KEYS[1])
redis.pcall('PUBLISH', ARGV[1], 'released')
return {1, value}
"#,
    )
});

/// KEYS: fence. ARGV: fence, fence ttl ms. Redlock: raises a node's fence counter to the fence
/// handed to the command (never lowers it; compared exactly, as decimal strings), so that any
/// later majority, which shares a node with this one, hands out a higher fence. → 1.
pub static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        fence_lua!(),
        r#"
local current = redis.call('GET', KEYS[1])
if not canonical(current) or less(current, ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
"#
    ))
});
