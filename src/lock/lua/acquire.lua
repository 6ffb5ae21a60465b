-- uses: fence.lua queue.lua holders.lua
-- KEYS: six for each lock key, in the order given (lock, fence, queue, queue expiry, queue
-- seq, holders), then the success record if any (it belongs to the first key). ARGV: value,
-- ttl ms, fence ttl ms, join ("1": queue up when busy), entry ms (how long a queue entry lives
-- without a keep-alive), arrival number this run had before its entry lapsed ("0": none), then
-- the wake prefix of each key. The value's kind (see `queue.lua`) says which lock the run
-- takes, on every key.
--
-- All or nothing: every key is read first; the run is granted only if every key would grant
-- it, and then every key is taken in the same call (a fence that cannot be bumped takes back
-- what this call took). Otherwise nothing is taken, and a run that queues joins the queue of
-- every key with one arrival number, the same in each: two runs that share keys are in the
-- same order in every queue they share, so no two wait for each other.
--
-- → `{1, fence, …}` acquired, one fence per key (decimal strings);
--   `{0, pttl, holder, position, arrival, holding, same, key, seen}` busy: the first key (its index,
--   from 1) held so that it does not admit the run, `holder` the holder this run waits for
--   there (an exclusive run held off by shared holders: the last to end; a `--limit` run: the
--   first to end), `holding` how many hold, `same` 1 when that holder runs the same
--   `--idempotency-key` (then the run waits for it even with permits free);
--   `{3, first, position, arrival, key, seen}` every holder would admit this run, but at that
--   key waiters that come first are queued (`first`: the one it waits for); `seen`: the first
--   key's fence counter (false: none), which tells a lock handed over before this call from
--   one handed over after it (see `RELEASE`);
--   `{-1, type[, name]}` a lock key (or the name next to it that is given) holds another
--   type, or a sorted set not written by redlock-run;
--   `{-2, error, key}` that key's fence counter is unusable (nothing is left held);
--   `{-3, value, held, key}` at that key a holder (`held` 1) or a queued waiter (0), its value
--   given, uses another kind of lock;
--   `{2, record}` the success record of `--idempotency-key` exists (nothing taken; a queued
--   run leaves the queues, and waiters that can now hold are woken).
--   `position` is this run's place in that key's queue (1 = next) after joining, or false;
--   `arrival` its arrival number. A run whose entry lapsed (Redis out of memory, the run
--   stopped) joins again with the arrival number it had, so it gets its place back; each
--   counter is raised to it, so that later arrivals still come after it (also when Redis lost
--   the queue).
--
-- Who is granted at one key, on top of the holders admitting the run: an exclusive run when
-- no live waiter comes before it; a shared one when no live exclusive waiter does (it runs
-- beside shared runs queued ahead, never ahead of an exclusive one); a `--limit N` one when
-- fewer live waiters come before it than permits are free. A run that does not queue comes
-- after every live waiter. Each call of a queued waiter also keeps its entries alive. Queue
-- writes use `pcall`: a Redis that cannot take them (out of memory, read-only) still answers
-- busy, without a position.
--
-- Everything is read before anything is written, so a held lock is reported busy whatever
-- state Redis is in: out of memory, a read-only replica (a script without flags runs there
-- until its first write fails).
--
-- Each new fence is `max(counter + 1, server time in µs)`: it keeps increasing across data
-- loss (an older snapshot, a failover that lost the last bump, an expired counter) as long as
-- the server clocks do not go back by more than the time between two acquisitions.
--
-- When a key already holds this run's own value, an earlier attempt succeeded but its reply
-- was lost: ownership is confirmed, the TTL restarted and the fence of that attempt returned.
local value = ARGV[1]
local n = #ARGV - 6
local function k(i, j) return KEYS[(i - 1) * 6 + j] end
local record = KEYS[n * 6 + 1]
local mine = kind_of(value)
local limit = limit_of(mine)
local function bump_fence(i) return bump(k(i, 2), ARGV[3]) end
-- Which of each key's queue (3) and its expiries (4) exist: where there is none, there is no
-- one to look at and nothing to leave (set by the type checks below, and by join_all).
local present = {}
local function leave_all()
  for i = 1, n do
    if present[i][3] then redis.pcall('ZREM', k(i, 3), value) end
    if present[i][4] then redis.pcall('ZREM', k(i, 4), value) end
  end
end
local function counter(i)
  local c = redis.pcall('GET', k(i, 5))
  if type(c) ~= 'string' then return 0 end
  return tonumber(c) or 0
end
-- Joins (or keeps alive) this run's entry in every key's queue, with one arrival number.
-- → whether every entry is alive, and the arrival number (false: the queues refused it).
local function join_all(now)
  if ARGV[4] ~= '1' then return false, false end
  local entry = tonumber(ARGV[5])
  local seq = nil
  for i = 1, n do
    local s = redis.call('ZSCORE', k(i, 3), value)
    if s then
      seq = tonumber(s)
      break
    end
  end
  if not seq then
    seq = tonumber(ARGV[6])
    if seq == 0 then
      for i = 1, n do seq = math.max(seq, counter(i)) end
      seq = seq + 1
    end
  end
  local alive = true
  for i = 1, n do
    if counter(i) < seq and refused(redis.pcall('SET', k(i, 5), seq)) then return false, false end
    present[i][3], present[i][4] = true, true
    if refused(redis.pcall('ZADD', k(i, 3), seq, value)) then return false, false end
    if refused(redis.pcall('ZADD', k(i, 4), now + entry, value)) then alive = false end
    -- The queue lives while someone keeps an entry alive; the arrival counter as long as the
    -- fence counter, so that a waiter whose entry lapsed never shares its number with a newer one.
    redis.pcall('PEXPIRE', k(i, 3), 2 * entry)
    redis.pcall('PEXPIRE', k(i, 4), 2 * entry)
    redis.pcall('PEXPIRE', k(i, 5), ARGV[3])
  end
  return alive, seq
end
-- What key i says about this run, reading only (lapsed queue entries aside). → the state, or
-- nil and the reply that ends the call.
local function inspect(i, now)
  local lock = k(i, 1)
  -- A fence counter that cannot be bumped fails the run before any key is touched.
  local counter_type = redis.call('TYPE', k(i, 2))['ok']
  if counter_type ~= 'none' and counter_type ~= 'string' then
    return nil, {-2, 'WRONGTYPE the counter holds a ' .. counter_type, i}
  end
  if counter_type == 'string' then
    local current = redis.call('GET', k(i, 2))
    if not canonical(current) then return nil, {-2, 'ERR value is not an integer or out of range', i} end
    if current == '9223372036854775807' then return nil, {-2, 'ERR increment or decrement would overflow', i} end
  end
  local s = {t = redis.call('TYPE', lock)['ok'], holding = 0, pttl = 0}
  if s.t == 'string' then
    s.holder = redis.call('GET', lock)
    if s.holder == value then
      s.own = true
      return s
    end
    s.pttl, s.holding = redis.call('PTTL', lock), 1
  elseif s.t == 'zset' then
    if not ours(lock) then return nil, {-1, s.t, lock} end
    local own = redis.call('ZSCORE', lock, value)
    if own and tonumber(own) > now then
      s.own = true
      return s
    end
    s.holding = live(lock, now)
    if s.holding > 0 then
      local ends
      if mine == nil then s.holder, ends = latest(lock) else s.holder, ends = soonest(lock, now) end
      s.held, s.pttl = kind_of(s.holder), ends - now
    end
  elseif s.t ~= 'none' then
    return nil, {-1, s.t, lock}
  end
  if s.holder and family(s.held) ~= family(mine) then return nil, {-3, s.holder, 1, i} end
  local first = present[i][3] and first_live(k(i, 3), k(i, 4), now)
  if first and first ~= value and family(kind_of(first)) ~= family(mine) then
    return nil, {-3, first, 0, i}
  end
  s.admitted = s.t ~= 'string' and (limit == nil or s.holding < limit)
  if not s.admitted then return s end
  -- The first live waiter that comes before this run and for which `visit` is true.
  local function ahead(visit)
    if not present[i][3] then return nil end
    local found = each_live(k(i, 3), k(i, 4), now, function(member)
      return member == value or visit(member)
    end)
    if found == value then return nil end
    return found
  end
  if mine == 'shared' then
    s.blocker = ahead(function(member) return kind_of(member) == nil end)
  else
    local before = 0
    s.blocker = ahead(function()
      before = before + 1
      return before >= limit - s.holding
    end)
  end
  -- A holder running the same --idempotency-key (it belongs to the first key): wait for it
  -- (then its record says it is done).
  if not s.blocker and record and i == 1 and s.holding > 0 then
    for _, member in ipairs(redis.call('ZRANGEBYSCORE', lock, '(' .. now, '+inf')) do
      local entry = redis.call('HGET', k(i, 6), member)
      if entry and string.sub(entry, (string.find(entry, ' ', 1, true) or #entry) + 1) == record then
        s.same = member
        break
      end
    end
  end
  return s
end
-- Takes back what this call may have taken at key i (when a later fence cannot be bumped).
local function untake(i)
  local lock = k(i, 1)
  local t = redis.call('TYPE', lock)['ok']
  if t == 'string' and redis.call('GET', lock) == value then redis.call('DEL', lock) end
  if t == 'zset' then
    redis.pcall('ZREM', lock, value)
    redis.pcall('HDEL', k(i, 6), value)
  end
end

-- The names next to each lock must hold what the lock keeps there, or be absent.
for i = 1, n do
  present[i] = {}
  for j, expected in pairs({[3] = 'zset', [4] = 'zset', [6] = 'hash'}) do
    local t = redis.call('TYPE', k(i, j))['ok']
    if t ~= 'none' and t ~= expected then return {-1, t, k(i, j)} end
    present[i][j] = t ~= 'none'
  end
end
if record then
  local done = redis.call('GET', record)
  if done then
    if redis.call('ZSCORE', k(1, 3), value) then
      leave_all()
      for i = 1, n do wake_ready(k(i, 1), k(i, 3), k(i, 4), ARGV[6 + i]) end
    end
    return {2, done}
  end
end
local now = now_ms()
local ttl = tonumber(ARGV[2])
local st = {}
local granted = true
for i = 1, n do
  local s, reply = inspect(i, now)
  if not s then
    if reply[1] == -3 then leave_all() end
    -- An earlier attempt whose reply was lost may hold some keys: nothing is left held.
    if reply[1] == -2 then for j = 1, n do untake(j) end end
    return reply
  end
  st[i] = s
  granted = granted and (s.own or (s.admitted and not s.blocker and not s.same))
end
if granted then
  local fences = {1}
  for i = 1, n do
    local s, lock = st[i], k(i, 1)
    local fence, err
    if s.own and s.t == 'string' then
      redis.call('PEXPIRE', lock, ttl)
      fence = redis.call('GET', k(i, 2))
      if not canonical(fence) then fence, err = bump_fence(i) end
    elseif s.own then
      extend(lock, k(i, 6), value, now + ttl, now)
      fence = string.match(redis.call('HGET', k(i, 6), value) or '', '^%S+')
      if not canonical(fence) then
        fence, err = bump_fence(i)
        if fence then holds(k(i, 6), value, fence, i == 1 and record) end
      end
    else
      fence, err = bump_fence(i)
      if fence and mine == nil then
        if s.t == 'zset' then redis.call('DEL', lock, k(i, 6)) end
        redis.call('SET', lock, value, 'PX', ttl)
      elseif fence then
        prune(lock, k(i, 6), now)
        redis.call('ZADD', lock, now + ttl, value)
        holds(k(i, 6), value, fence, i == 1 and record)
        extend(lock, k(i, 6), value, now + ttl, now)
      end
    end
    if not fence then
      -- Nothing is left half-taken.
      for j = 1, i do untake(j) end
      return {-2, err, i}
    end
    table.insert(fences, fence)
  end
  leave_all()
  return fences
end
-- Not now: queue up at every key, and name the first key that holds the run off (a held one
-- before one where waiters come first).
local alive, arrival = join_all(now)
local function holds_off(s, why)
  if s.own then return false end
  if why == 'held' then return not s.admitted end
  if why == 'same' then return s.same ~= nil end
  return s.blocker ~= nil
end
local at = nil
for _, why in ipairs({'held', 'same', 'blocker'}) do
  for i = 1, n do
    if not at and holds_off(st[i], why) then at = i end
  end
end
local s = st[at]
local position = false
if arrival and alive then position = redis.call('ZRANK', k(at, 3), value) + 1 end
-- The first key's fence counter as this call found it: a lock handed over to this run later
-- has a higher fence (see RELEASE).
local seen = redis.call('GET', k(1, 2))
if s.same then
  return {0, tonumber(redis.call('ZSCORE', k(at, 1), s.same)) - now, s.same, position, arrival, s.holding, 1, at, seen}
end
if not s.admitted then return {0, s.pttl, s.holder, position, arrival, s.holding, 0, at, seen} end
return {3, s.blocker, position, arrival, at, seen}
