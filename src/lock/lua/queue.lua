-- Lua helpers for the fair queue (KEYS[q] the queue, KEYS[e] the entries' expiries) and the
-- kinds of lock.
-- - `refused(reply)`: a `pcall`'ed command failed (its error is a table with `err`; a status
--   reply such as SET's OK is a table too, without it).
-- - `now_ms()`: the server clock in ms.
-- - `kind_of(value)`: `nil` for an exclusive run's value (or any other), else its fifth word
--   when the value is one redlock-run writes (`shared`, `limit=N` with N ≥ 2 written as
--   Rust's `Kind` writes it); `family(kind)`: which kinds go together (exclusive with shared;
--   a limit only with itself); `limit_of(kind)`: how many may hold (`nil`: any number of
--   shared holders). `ours(k)`: the set at `k` holds redlock-run values (its first member).
-- - `queue_ok(q, e)`: the queue's keys are sorted sets or absent; waking and leaving do
--   nothing to keys that hold something else (the acquisition reports them).
-- - `each_live(q, e, now, visit)`: calls `visit` on each waiter whose entry has not lapsed, in
--   order, until it returns true (→ that waiter; `nil` at the end), removing lapsed ones on
--   the way (with `pcall`: a read-only or full Redis still answers; then they are stepped
--   over), at most 100 in one call. `first_live`: the first live waiter.
-- - Holders of `--shared` and `--limit` are a sorted set at the lock key, scored by when each
--   lease ends (server ms): a lapsed one is ignored at once (`live`, `soonest`, `latest`),
--   and removed with its fence when a script writes anyway (`prune`).
-- - `wake_ready(k, q, e, prefix)`: tells the waiters at the head of the queue that can hold
--   now that their turn has come, on `prefix .. their token`: the first exclusive one when
--   no one holds, the shared ones before the first exclusive one, as many `--limit` ones as
--   permits are free.
-- Not every script uses every helper here:
-- luacheck: push ignore 211
local function refused(reply)
  return type(reply) == 'table' and reply['err'] ~= nil
end
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
-- Lapsed entries removed in this call: past SWEEP, the rest count as live, which only holds
-- runs back until later calls remove them, so that one call's work stays bounded.
local swept, SWEEP = 0, 100
local function each_live(q, e, now, visit)
  local offset = 0
  while true do
    local batch = redis.call('ZRANGE', q, offset, offset + 15)
    if #batch == 0 then return nil end
    for _, member in ipairs(batch) do
      local expires = redis.call('ZSCORE', e, member)
      if (expires and tonumber(expires) > now) or swept >= SWEEP then
        if visit(member) then return member end
        offset = offset + 1
      else
        swept = swept + 1
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
-- luacheck: pop
