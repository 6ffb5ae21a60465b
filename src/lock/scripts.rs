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

/// Lua helpers for the fair queue (KEYS[q] the queue, KEYS[e] the entries' expiries).
/// `now_ms()`: the server clock in ms. `first_live(q, e, now)`: the first waiter whose entry has
/// not lapsed, removing lapsed ones on the way (with `pcall`: a read-only or full Redis still
/// answers; then they are stepped over). `wake(q, e, prefix)`: tells that waiter its turn has
/// come, on `prefix .. its token`.
macro_rules! queue_lua {
    () => {
        r#"
local function now_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end
local function first_live(q, e, now)
  local offset = 0
  while true do
    local batch = redis.call('ZRANGE', q, offset, offset + 15)
    if #batch == 0 then return nil end
    for _, member in ipairs(batch) do
      local expires = redis.call('ZSCORE', e, member)
      if expires and tonumber(expires) > now then return member end
      local removed = redis.pcall('ZREM', q, member)
      redis.pcall('ZREM', e, member)
      if type(removed) == 'table' then offset = offset + 1 end
    end
  end
end
local function wake(q, e, prefix)
  local head = first_live(q, e, now_ms())
  if head then redis.pcall('PUBLISH', prefix .. string.match(head, '^%S+'), 'turn') end
end
"#
    };
}

/// KEYS: lock, fence, queue, queue expiry, queue seq[, success record]. ARGV: value, ttl ms,
/// fence ttl ms, join ("1": queue up when busy), entry ms (how long a queue entry lives without
/// a keep-alive), wake prefix, arrival number this run had before its entry lapsed ("0": none).
/// → `{1, fence}` acquired (the fence as a decimal string); `{0, pttl, holder, position,
///   arrival}` busy; `{3, first waiter, position, arrival}` free, but other waiters are queued
///   ahead; `{-1, type}` the
///   key holds another type; `{-2, error}` the fence counter is unusable (nothing is left held);
///   `{2, record}` the success record of `--idempotency-key` exists (nothing taken; a queued
///   run leaves the queue, and the next waiter is woken if the lock is free).
///   `position` is this run's place in the queue (1 = next) after joining, or false; `arrival`
///   its arrival number. A run whose entry lapsed (Redis out of memory, the run stopped) joins
///   again with the arrival number it had, so it gets its place back; the counter is raised to
///   it, so that later arrivals still come after it (also when Redis lost the queue).
///
/// The queue: a free lock goes to the first live waiter, so that waiters run in the order they
/// joined, and a run that does not queue is busy while anyone is queued. Each call of a queued
/// waiter also keeps its entry alive. Queue writes use `pcall`: a Redis that cannot take them
/// (out of memory, read-only) still answers busy, without a position.
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
        queue_lua!(),
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
local function leave()
  redis.pcall('ZREM', KEYS[3], ARGV[1])
  redis.pcall('ZREM', KEYS[4], ARGV[1])
end
local function join(now)
  if ARGV[4] ~= '1' then return false, false end
  local entry = tonumber(ARGV[5])
  local seq = redis.call('ZSCORE', KEYS[3], ARGV[1])
  if seq then
    seq = tonumber(seq)
  else
    local before = tonumber(ARGV[7])
    if before > 0 then
      seq = before
      if tonumber(redis.call('GET', KEYS[5]) or '0') < before then
        if type(redis.pcall('SET', KEYS[5], before)) == 'table' then return false, false end
      end
    else
      seq = redis.pcall('INCR', KEYS[5])
      if type(seq) == 'table' then return false, false end
    end
    if type(redis.pcall('ZADD', KEYS[3], seq, ARGV[1])) == 'table' then return false, false end
  end
  if type(redis.pcall('ZADD', KEYS[4], now + entry, ARGV[1])) == 'table' then return false, seq end
  -- The queue lives while someone keeps an entry alive; the arrival counter as long as the
  -- fence counter, so that a waiter whose entry lapsed never shares its number with a newer one.
  for i = 3, 4 do redis.pcall('PEXPIRE', KEYS[i], 2 * entry) end
  redis.pcall('PEXPIRE', KEYS[5], ARGV[3])
  return redis.call('ZRANK', KEYS[3], ARGV[1]) + 1, seq
end
if KEYS[6] then
  local done = redis.call('GET', KEYS[6])
  if done then
    if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
      leave()
      if redis.call('EXISTS', KEYS[1]) == 0 then wake(KEYS[3], KEYS[4], ARGV[6]) end
    end
    return {2, done}
  end
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then return {-1, kind} end
local holder = false
if kind == 'string' then holder = redis.call('GET', KEYS[1]) end
if holder ~= ARGV[1] then
  local now = now_ms()
  local first = first_live(KEYS[3], KEYS[4], now)
  if not holder and (not first or first == ARGV[1]) then
    local fence, err = bump_fence()
    if not fence then return {-2, err} end
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    leave()
    return {1, fence}
  end
  local position, arrival = join(now)
  if holder then return {0, redis.call('PTTL', KEYS[1]), holder, position, arrival} end
  return {3, first, position, arrival}
end
leave()
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

/// KEYS: lock, queue, queue expiry[, success record]. ARGV: value, release channel, keep ms,
/// announce always ("1" for a Redlock quorum, whose waiters listen on one node only), record
/// value, record ttl ms, wake prefix.
/// → `{1, recorded}` deleted (and the first queued waiter woken, and the release announced);
///   `{2, recorded}` kept for `keep ms` more
///   (`--min-hold`); `{0, recorded}` not ours, left untouched. The success record, when a key is
///   given, is written whoever holds the lock: the command did succeed. `recorded` is the error
///   writing it, or 0.
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        queue_lua!(),
        r#"
local recorded = 0
if KEYS[4] then
  local ok = redis.pcall('SET', KEYS[4], ARGV[5], 'PX', ARGV[6])
  if type(ok) == 'table' and ok['err'] then recorded = ok['err'] end
end
if redis.call('TYPE', KEYS[1])['ok'] == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  if tonumber(ARGV[3]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return {2, recorded}
  end
  redis.call('DEL', KEYS[1])
  -- Announcing is a courtesy to waiters; an ACL without channel rights must not fail the release.
  wake(KEYS[2], KEYS[3], ARGV[7])
  redis.pcall('PUBLISH', ARGV[2], 'released')
  return {1, recorded}
end
if ARGV[4] == '1' then redis.pcall('PUBLISH', ARGV[2], 'released') end
return {0, recorded}
"#
    ))
});

/// KEYS: lock, queue, queue expiry. ARGV: value, wake prefix. A waiter gives up its place (its
/// `--wait` ran out, or it was signalled); when the lock is free, the next waiter is woken, in
/// case this one had been told its turn had come. → 1.
pub static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        queue_lua!(),
        r#"
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then wake(KEYS[2], KEYS[3], ARGV[2]) end
return 1
"#
    ))
});

/// KEYS: lock, fence, queue, queue expiry. ARGV: how many waiters to list.
/// → `{type, value or false, pttl, fence or false, waiters, {value, seq, …}}`, one consistent
/// snapshot for `status`: `waiters` counts the live entries of the queue, and the list holds
/// the first of them, in order, with their arrival numbers. Read only.
pub static STATUS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        queue_lua!(),
        r#"
local kind = redis.call('TYPE', KEYS[1])['ok']
local value = false
if kind == 'string' then value = redis.call('GET', KEYS[1]) end
local fence = false
if redis.call('TYPE', KEYS[2])['ok'] == 'string' then fence = redis.call('GET', KEYS[2]) end
local now = now_ms()
local waiters, first = 0, {}
if redis.call('TYPE', KEYS[3])['ok'] == 'zset' and redis.call('TYPE', KEYS[4])['ok'] == 'zset' then
  waiters = redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf')
  local offset = 0
  while #first < 2 * tonumber(ARGV[1]) do
    local batch = redis.call('ZRANGE', KEYS[3], offset, offset + 15, 'WITHSCORES')
    if #batch == 0 then break end
    for i = 1, #batch, 2 do
      local expires = redis.call('ZSCORE', KEYS[4], batch[i])
      if expires and tonumber(expires) > now and #first < 2 * tonumber(ARGV[1]) then
        table.insert(first, batch[i])
        table.insert(first, batch[i + 1])
      end
    end
    offset = offset + 16
  end
end
return {kind, value, redis.call('PTTL', KEYS[1]), fence, waiters, first}
"#
    ))
});

/// KEYS: lock, queue, queue expiry. ARGV: release channel, wake prefix. The operator's
/// override: deletes the lock whatever its value and tells waiters (the first queued one, and
/// those that do not queue). → `{1, value}` deleted; `{0}` there was none; `{-1, type}` the
/// key holds another type and was left alone.
pub static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        queue_lua!(),
        r#"
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return {0} end
if kind ~= 'string' then return {-1, kind} end
local value = redis.call('GET', KEYS[1])
redis.call('DEL', KEYS[1])
wake(KEYS[2], KEYS[3], ARGV[2])
redis.pcall('PUBLISH', ARGV[1], 'released')
return {1, value}
"#
    ))
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
