-- uses: fence.lua queue.lua holders.lua
-- KEYS: five for each lock key (lock, fence, queue, queue expiry, holders), then the success
-- record if any. ARGV: value, keep ms, announce always ("1" for a Redlock quorum, whose
-- waiters listen on one node only), record value, record ttl ms, grant ms ("0": never hand
-- over), fence ttl ms, then each key's release channel and wake prefix.
-- → `{recorded, outcome, …}`, one outcome per key: 1 deleted (and the lock handed over; or
--   the waiters that can now hold woken, and the release announced); 2 kept for `keep ms` more
--   (`--min-hold`); 0 not ours, left untouched. The success record, when a key is given, is
--   written whoever holds the lock: the command did succeed. `recorded` is the error writing
--   it, or 0.
--
-- **Handing over.** When the deleted key is free and its first live waiter is an exclusive
-- one, the script takes the lock for that waiter (its value, `PX grant ms`, a new fence) and
-- publishes `<fence> <grant ms>` on the waiter's grant channel (`<wake prefix><token>:grant`).
-- Only a waiter that can use the lock as it is (one key, exclusive, no success record to
-- check first) listens there, and only one listening on this node counts (`PUBSUB NUMSUB`:
-- not a pattern subscriber, and not a subscriber on another node of a Cluster, where the
-- message would arrive all the same); with no such listener (that kind of waiter, one that
-- died and whose connection closed, one listening on another Cluster node) nothing is
-- published and the waiters are woken as before. The waiter starts
-- its command counting its lease from before its last attempt (which Redis answered before
-- this script ran) and extends it to its TTL at once. `grant ms` is short (the holder's
-- kill-grace and a second): a waiter that was handed the lock but cannot use it (a frozen
-- process, a host gone without closing its connection) holds up the queue no longer than that.
local n = (#ARGV - 7) / 2
local value, keep, grant_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[6])
-- Takes the lock, if free (`freed`: known to be), for its first live waiter, if that one
-- listens for it; → whether it did.
local function hand_over(freed, lock, fence, q, e, h, prefix)
  if grant_ms <= 0 or not (freed or redis.call('TYPE', lock)['ok'] == 'none') or not queue_ok(q, e) then
    return false
  end
  local t = redis.call('TYPE', h)['ok']
  if t ~= 'none' and t ~= 'hash' then return false end
  local first = first_live(q, e, now_ms())
  if not first or kind_of(first) ~= nil then return false end
  -- Only a waiter listening on this very node: a message published here also reaches the
  -- other nodes of a Cluster, where no one could tell that the lock was not handed over.
  -- (Pattern subscribers, such as a monitor's PSUBSCRIBE *, are not listeners.)
  local channel = prefix .. string.match(first, '^%S+') .. ':grant'
  local listening = redis.pcall('PUBSUB', 'NUMSUB', channel)
  if refused(listening) or (tonumber(listening[2]) or 0) < 1 then return false end
  local f = bump(fence, ARGV[7])
  if not f then return false end
  if refused(redis.pcall('SET', lock, first, 'PX', grant_ms)) then return false end
  local told = redis.pcall('PUBLISH', channel, f .. ' ' .. grant_ms)
  if type(told) ~= 'number' or told == 0 then
    redis.call('DEL', lock)
    return false
  end
  redis.pcall('ZREM', q, first)
  redis.pcall('ZREM', e, first)
  return true
end
local recorded = 0
if KEYS[5 * n + 1] then
  local ok = redis.pcall('SET', KEYS[5 * n + 1], ARGV[4], 'PX', ARGV[5])
  if refused(ok) then recorded = ok['err'] end
end
local outcomes = {recorded}
for i = 1, n do
  local lock, fence, q, e, h = KEYS[5 * i - 4], KEYS[5 * i - 3], KEYS[5 * i - 2], KEYS[5 * i - 1], KEYS[5 * i]
  local channel, prefix = ARGV[6 + 2 * i], ARGV[7 + 2 * i]
  local t = redis.call('TYPE', lock)['ok']
  local outcome = 0
  if t == 'string' and redis.call('GET', lock) == value then
    if keep > 0 then
      redis.call('PEXPIRE', lock, keep)
      outcome = 2
    else
      redis.call('DEL', lock)
      outcome = 1
    end
  elseif t == 'zset' then
    local now = now_ms()
    local own = redis.call('ZSCORE', lock, value)
    if own and tonumber(own) > now then
      if keep > 0 then
        extend(lock, h, value, now + keep, now)
        outcome = 2
      else
        redis.call('ZREM', lock, value)
        redis.call('HDEL', h, value)
        outcome = 1
      end
    end
    prune(lock, h, now)
  end
  if outcome == 1 then
    -- Announcing is a courtesy to waiters; an ACL without channel rights must not fail the release.
    -- (With no queue there is no one to hand the lock to or to wake: both would find no one.)
    -- Handed over, the lock is held again: no one is told it is free.
    local queued = redis.call('EXISTS', q) == 1
    if not (queued and hand_over(t == 'string', lock, fence, q, e, h, prefix)) then
      if queued then wake_ready(lock, q, e, prefix) end
      redis.pcall('PUBLISH', channel, 'released')
    end
  elseif outcome == 0 and ARGV[3] == '1' then
    redis.pcall('PUBLISH', channel, 'released')
  end
  table.insert(outcomes, outcome)
end
return outcomes
