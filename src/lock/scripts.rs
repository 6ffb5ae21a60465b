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

/// Lua helpers for the fair queue (KEYS[q] the queue, KEYS[e] the entries' expiries) and the
/// kinds of lock.
/// - `now_ms()`: the server clock in ms.
/// - `kind_of(value)`: `nil` for an exclusive run's value (or any other), else its fifth word
///   when the value is one redlock-run writes (`shared`, `limit=N` with N ≥ 2 written as
///   Rust's `Kind` writes it); `family(kind)`: which kinds go together (exclusive with shared;
///   a limit only with itself); `limit_of(kind)`: how many may hold (`nil`: any number of
///   shared holders). `ours(k)`: the set at `k` holds redlock-run values (its first member).
/// - `queue_ok(q, e)`: the queue's keys are sorted sets or absent; waking and leaving do
///   nothing to keys that hold something else (the acquisition reports them).
/// - `each_live(q, e, now, visit)`: calls `visit` on each waiter whose entry has not lapsed, in
///   order, until it returns true (→ that waiter; `nil` at the end), removing lapsed ones on
///   the way (with `pcall`: a read-only or full Redis still answers; then they are stepped
///   over). `first_live`: the first live waiter.
/// - Holders of `--shared` and `--limit` are a sorted set at the lock key, scored by when each
///   lease ends (server ms): a lapsed one is ignored at once (`live`, `soonest`, `latest`),
///   and removed with its fence when a script writes anyway (`prune`).
/// - `wake_ready(k, q, e, prefix)`: tells the waiters at the head of the queue that can hold
///   now that their turn has come, on `prefix .. their token`: the first exclusive one when
///   no one holds, the shared ones before the first exclusive one, as many `--limit` ones as
///   permits are free.
macro_rules! queue_lua {
    () => {
        r#"
local function now_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end
local function kind_of(value)
  local kind = string.match(value, '^%S+ %S+ %d+ %d+ (%S+)$')
  if kind == 'shared' then return kind end
  local n = kind and string.match(kind, '^limit=([1-9]%d*)$')
  if n and #n <= 10 and tonumber(n) >= 2 then return kind end
  return nil
end
local function queue_ok(q, e)
  for _, k in ipairs({q, e}) do
    local t = redis.call('TYPE', k)['ok']
    if t ~= 'none' and t ~= 'zset' then return false end
  end
  return true
end
local function family(kind)
  if kind == nil or kind == 'shared' then return 'rw' end
  return kind
end
local function limit_of(kind)
  if kind == nil then return 1 end
  if kind == 'shared' then return nil end
  return tonumber(string.match(kind, '^limit=(%d+)$'))
end
local function each_live(q, e, now, visit)
  local offset = 0
  while true do
    local batch = redis.call('ZRANGE', q, offset, offset + 15)
    if #batch == 0 then return nil end
    for _, member in ipairs(batch) do
      local expires = redis.call('ZSCORE', e, member)
      if expires and tonumber(expires) > now then
        if visit(member) then return member end
        offset = offset + 1
      else
        local removed = redis.pcall('ZREM', q, member)
        redis.pcall('ZREM', e, member)
        if type(removed) == 'table' then offset = offset + 1 end
      end
    end
  end
end
local function first_live(q, e, now)
  return each_live(q, e, now, function() return true end)
end
local function live(k, now)
  return redis.call('ZCOUNT', k, '(' .. now, '+inf')
end
local function soonest(k, now)
  local r = redis.call('ZRANGEBYSCORE', k, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return r[1], tonumber(r[2])
end
local function latest(k)
  local r = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
  return r[1], tonumber(r[2])
end
local function ours(k)
  local first = redis.call('ZRANGE', k, 0, 0)[1]
  return first ~= nil and kind_of(first) ~= nil
end
local function prune(k, h, now)
  local lapsed = redis.call('ZRANGEBYSCORE', k, '-inf', now, 'LIMIT', 0, 100)
  for _, member in ipairs(lapsed) do
    redis.pcall('ZREM', k, member)
    redis.pcall('HDEL', h, member)
  end
  local _, last = latest(k)
  if not last then
    redis.pcall('DEL', h)
  elseif last > now then
    redis.pcall('PEXPIRE', k, last - now)
    redis.pcall('PEXPIRE', h, last - now)
  end
end
local function wake_ready(k, q, e, prefix)
  if not queue_ok(q, e) then return end
  local now = now_ms()
  local t = redis.call('TYPE', k)['ok']
  if t ~= 'none' and t ~= 'zset' then return end
  local holding = 0
  if t == 'zset' then holding = live(k, now) end
  local woken = 0
  each_live(q, e, now, function(member)
    local kind = kind_of(member)
    local limit = limit_of(kind)
    if kind == nil and (holding > 0 or woken > 0) then return true end
    if limit and holding + woken >= limit then return true end
    redis.pcall('PUBLISH', prefix .. string.match(member, '^%S+'), 'turn')
    woken = woken + 1
    return kind == nil or woken >= 1000
  end)
end
"#
    };
}

/// Lua helpers for the holders of `--shared` and `--limit` (uses [`queue_lua`]).
/// `extend(k, h, value, ends, now)`: this holder's lease now ends at `ends`; the set and the
/// fences live as long as the last lease. Its first write is a PEXPIRE, which Redis allows
/// when out of memory, and a script that has written may go on (ZADD alone would be refused):
/// so a holder renews under OOM as an exclusive one does. `holds(h, value, fence, record)`:
/// records a new holder's fence and the success record it will write.
macro_rules! holders_lua {
    () => {
        r#"
local function extend(k, h, value, ends, now)
  local _, last = latest(k)
  local left = math.max(ends, last or 0) - now
  redis.call('PEXPIRE', k, left)
  redis.call('ZADD', k, 'XX', ends, value)
  redis.pcall('PEXPIRE', h, left)
end
local function holds(h, value, fence, record)
  if record then fence = fence .. ' ' .. record end
  redis.call('HSET', h, value, fence)
end
"#
    };
}

/// KEYS: lock, fence, queue, queue expiry, queue seq, holders[, success record]. ARGV: value,
/// ttl ms, fence ttl ms, join ("1": queue up when busy), entry ms (how long a queue entry lives
/// without a keep-alive), wake prefix, arrival number this run had before its entry lapsed
/// ("0": none). The value's kind (see [`queue_lua`]) says which lock the run takes.
/// → `{1, fence}` acquired (the fence as a decimal string);
///   `{0, pttl, holder, position, arrival, holding, same}` busy: `holder` is the holder this
///   run waits for (an exclusive run held off by shared holders: the last to end; a `--limit`
///   run: the first to end), `holding` how many hold, `same` 1 when that holder runs the same
///   `--idempotency-key` (then the run waits for it even with permits free);
///   `{3, first, position, arrival}` the holders would admit this run, but waiters that come
///   first are queued (`first`: the one it waits for);
///   `{-1, type[, name]}` the key (or the name next to it that is given) holds another type,
///   or a sorted set not written by redlock-run;
///   `{-2, error}` the fence counter is unusable (nothing is left held);
///   `{-3, value, held}` a holder (`held` 1) or a queued waiter (0), its value given, uses
///   another kind of lock;
///   `{2, record}` the success record of `--idempotency-key` exists (nothing taken; a queued
///   run leaves the queue, and waits that can now hold are woken).
///   `position` is this run's place in the queue (1 = next) after joining, or false; `arrival`
///   its arrival number. A run whose entry lapsed (Redis out of memory, the run stopped) joins
///   again with the arrival number it had, so it gets its place back; the counter is raised to
///   it, so that later arrivals still come after it (also when Redis lost the queue).
///
/// Who is granted, on top of the holders admitting the run: an exclusive run when no live
/// waiter comes before it; a shared one when no live exclusive waiter does (it runs beside
/// shared runs queued ahead, never ahead of an exclusive one); a `--limit N` one when fewer
/// live waiters come before it than permits are free. A run that does not queue comes after
/// every live waiter. Each call of a queued waiter also keeps its entry alive. Queue writes use
/// `pcall`: a Redis that cannot take them (out of memory, read-only) still answers busy,
/// without a position.
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
        holders_lua!(),
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
-- The names next to the lock must hold what the lock keeps there, or be absent.
for i, expected in pairs({[3] = 'zset', [4] = 'zset', [6] = 'hash'}) do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'none' and t ~= expected then return {-1, t, KEYS[i]} end
end
local record = KEYS[7]
if record then
  local done = redis.call('GET', record)
  if done then
    if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
      leave()
      wake_ready(KEYS[1], KEYS[3], KEYS[4], ARGV[6])
    end
    return {2, done}
  end
end
local mine = kind_of(ARGV[1])
local now = now_ms()
local t = redis.call('TYPE', KEYS[1])['ok']
-- The holder this run waits for, when someone holds: its value, kind and time left.
local holder, held, pttl, holding = false, nil, 0, 0
if t == 'string' then
  holder = redis.call('GET', KEYS[1])
  if holder == ARGV[1] then
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
  end
  pttl, holding = redis.call('PTTL', KEYS[1]), 1
elseif t == 'zset' then
  if not ours(KEYS[1]) then return {-1, t} end
  local own = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if own and tonumber(own) > now then
    leave()
    extend(KEYS[1], KEYS[6], ARGV[1], now + tonumber(ARGV[2]), now)
    local fence = string.match(redis.call('HGET', KEYS[6], ARGV[1]) or '', '^%S+')
    if not canonical(fence) then
      local err
      fence, err = bump_fence()
      if not fence then
        redis.call('ZREM', KEYS[1], ARGV[1])
        return {-2, err}
      end
      holds(KEYS[6], ARGV[1], fence, record)
    end
    return {1, fence}
  end
  holding = live(KEYS[1], now)
  if holding > 0 then
    local ends
    if mine == nil then holder, ends = latest(KEYS[1]) else holder, ends = soonest(KEYS[1], now) end
    held, pttl = kind_of(holder), ends - now
  end
elseif t ~= 'none' then
  return {-1, t}
end
if holder and family(held) ~= family(mine) then
  leave()
  return {-3, holder, 1}
end
local first = first_live(KEYS[3], KEYS[4], now)
if first and first ~= ARGV[1] and family(kind_of(first)) ~= family(mine) then
  leave()
  return {-3, first, 0}
end
-- The first live waiter that comes before this run and for which `visit` is true.
local function ahead(visit)
  local found = each_live(KEYS[3], KEYS[4], now, function(member)
    return member == ARGV[1] or visit(member)
  end)
  if found == ARGV[1] then return nil end
  return found
end
local limit = limit_of(mine)
local admitted = t ~= 'string' and (limit == nil or holding < limit)
local blocker = nil
if admitted then
  if mine == 'shared' then
    blocker = ahead(function(member) return kind_of(member) == nil end)
  else
    local before = 0
    blocker = ahead(function()
      before = before + 1
      return before >= limit - holding
    end)
  end
end
-- A holder running the same --idempotency-key: wait for it (then its record says it is done).
local same = nil
if admitted and not blocker and record and holding > 0 then
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')) do
    local entry = redis.call('HGET', KEYS[6], member)
    if entry and string.sub(entry, (string.find(entry, ' ', 1, true) or #entry) + 1) == record then
      same = member
      break
    end
  end
end
if admitted and not blocker and not same then
  local fence, err = bump_fence()
  if not fence then return {-2, err} end
  if mine == nil then
    if t == 'zset' then redis.call('DEL', KEYS[1], KEYS[6]) end
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  else
    prune(KEYS[1], KEYS[6], now)
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
    holds(KEYS[6], ARGV[1], fence, record)
    extend(KEYS[1], KEYS[6], ARGV[1], now + tonumber(ARGV[2]), now)
  end
  leave()
  return {1, fence}
end
local position, arrival = join(now)
if same then
  return {0, tonumber(redis.call('ZSCORE', KEYS[1], same)) - now, same, position, arrival, holding, 1}
end
if not admitted then return {0, pttl, holder, position, arrival, holding, 0} end
return {3, blocker, position, arrival}
"#
    ))
});

/// KEYS: lock, holders. ARGV: value, ttl ms. → 1 extended, 0 not ours (never re-creates a
/// missing key or a lapsed holder).
pub static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        queue_lua!(),
        holders_lua!(),
        r#"
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if t == 'zset' then
  local now = now_ms()
  local own = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if own and tonumber(own) > now then
    extend(KEYS[1], KEYS[2], ARGV[1], now + tonumber(ARGV[2]), now)
    return 1
  end
end
return 0
"#
    ))
});

/// KEYS: lock, queue, queue expiry, holders[, success record]. ARGV: value, release channel,
/// keep ms, announce always ("1" for a Redlock quorum, whose waiters listen on one node only),
/// record value, record ttl ms, wake prefix.
/// → `{1, recorded}` deleted (and the waiters that can now hold woken, and the release
///   announced); `{2, recorded}` kept for `keep ms` more (`--min-hold`); `{0, recorded}` not
///   ours, left untouched. The success record, when a key is given, is written whoever holds
///   the lock: the command did succeed. `recorded` is the error writing it, or 0.
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        queue_lua!(),
        holders_lua!(),
        r#"
local recorded = 0
if KEYS[5] then
  local ok = redis.pcall('SET', KEYS[5], ARGV[5], 'PX', ARGV[6])
  if type(ok) == 'table' and ok['err'] then recorded = ok['err'] end
end
local keep = tonumber(ARGV[3])
local t = redis.call('TYPE', KEYS[1])['ok']
local released = false
if t == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  if keep > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return {2, recorded}
  end
  redis.call('DEL', KEYS[1])
  released = true
elseif t == 'zset' then
  local now = now_ms()
  local own = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if own and tonumber(own) > now then
    if keep > 0 then
      extend(KEYS[1], KEYS[4], ARGV[1], now + keep, now)
      return {2, recorded}
    end
    redis.call('ZREM', KEYS[1], ARGV[1])
    redis.call('HDEL', KEYS[4], ARGV[1])
    released = true
  end
  prune(KEYS[1], KEYS[4], now)
end
if released then
  -- Announcing is a courtesy to waiters; an ACL without channel rights must not fail the release.
  wake_ready(KEYS[1], KEYS[2], KEYS[3], ARGV[7])
  redis.pcall('PUBLISH', ARGV[2], 'released')
  return {1, recorded}
end
if ARGV[4] == '1' then redis.pcall('PUBLISH', ARGV[2], 'released') end
return {0, recorded}
"#
    ))
});

/// KEYS: lock, queue, queue expiry. ARGV: value, wake prefix. A waiter gives up its place (its
/// `--wait` ran out, or it was signalled); the waiters that can now hold are woken, in case
/// this one had been told its turn had come. → 1.
pub static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        queue_lua!(),
        r#"
redis.pcall('ZREM', KEYS[2], ARGV[1])
redis.pcall('ZREM', KEYS[3], ARGV[1])
wake_ready(KEYS[1], KEYS[2], KEYS[3], ARGV[2])
return 1
"#
    ))
});

/// KEYS: lock, fence, queue, queue expiry, holders. ARGV: how many waiters to list, how many
/// holders to list.
/// → `{type, value or false, pttl, fence or false, waiters, {value, seq, …}, holding,
///   {value, ms left, fence or false, …}, ours}`, one consistent snapshot for `status`:
///   `waiters` counts the live entries of the queue, and the list holds the first of them, in
///   order, with their arrival numbers; for `--shared` and `--limit` (a sorted set that is
///   `ours`, 1), `holding` counts the live holders, the list holds the first of them by lease
///   end, and `pttl` is the time until the last lease ends (-2: none is left). Read only.
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
local holding, holders, ok = 0, {}, true
local pttl = redis.call('PTTL', KEYS[1])
if kind == 'zset' then ok = ours(KEYS[1]) end
if ok and kind == 'zset' then
  -- The lock lives until the last lease ends (the set itself may outlive it a little).
  local _, last = latest(KEYS[1])
  pttl = -2
  if last and last > now then pttl = last - now end
  holding = live(KEYS[1], now)
  local found = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, ARGV[2])
  local has_fences = redis.call('TYPE', KEYS[5])['ok'] == 'hash'
  for i = 1, #found, 2 do
    table.insert(holders, found[i])
    table.insert(holders, tonumber(found[i + 1]) - now)
    local entry = has_fences and redis.call('HGET', KEYS[5], found[i])
    table.insert(holders, entry and string.match(entry, '^%S+') or false)
  end
end
if ok then ok = 1 else ok = 0 end
return {kind, value, pttl, fence, waiters, first, holding, holders, ok}
"#
    ))
});

/// KEYS: lock, queue, queue expiry, holders. ARGV: release channel, wake prefix, token prefix
/// (empty: every holder). The operator's override: deletes the lock (or, with a prefix, the
/// one holder whose token starts with it) whatever its value, and tells waiters.
/// → `{1, value, …}` deleted, the values of the holders dropped; `{0}` there was none; `{2}`
/// no holder's token starts with the prefix; `{3, n}` n holders' tokens do (nothing dropped);
/// `{-1, type}` the key holds another type and was left alone.
pub static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        queue_lua!(),
        holders_lua!(),
        r#"
local prefix = ARGV[3]
local function matches(value) return string.sub(value, 1, #prefix) == prefix end
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'none' then return {0} end
local dropped = {}
if t == 'string' then
  local value = redis.call('GET', KEYS[1])
  if not matches(value) then return {2} end
  redis.call('DEL', KEYS[1])
  dropped = {value}
elseif t == 'zset' and ours(KEYS[1]) then
  local now = now_ms()
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')) do
    if matches(member) then table.insert(dropped, member) end
  end
  if #dropped > 1 and prefix ~= '' then return {3, #dropped} end
  if prefix == '' then
    redis.call('DEL', KEYS[1], KEYS[4])
    if #dropped == 0 then return {0} end
  else
    if #dropped == 0 then return {2} end
    redis.call('ZREM', KEYS[1], dropped[1])
    redis.call('HDEL', KEYS[4], dropped[1])
    prune(KEYS[1], KEYS[4], now)
  end
else
  return {-1, t}
end
wake_ready(KEYS[1], KEYS[2], KEYS[3], ARGV[2])
redis.pcall('PUBLISH', ARGV[1], 'released')
table.insert(dropped, 1, 1)
return dropped
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
