-- The common shape of ACQUIRE, kept lean: one exclusive key, a run that does not queue, no
-- success record to check. Everything is read before anything is written, as in ACQUIRE, so
-- a held lock is busy whatever state Redis is in; whatever this script does not handle
-- itself it leaves untouched and hands back to ACQUIRE.
--
-- KEYS: lock, fence counter, queue.
-- ARGV: value, ttl ms, fence ttl ms.
--
-- → `{1, fence}` taken, with a new fence `max(counter + 1, server time in µs)` (a decimal
--   string); or the key already held this run's value (an attempt whose reply was lost):
--   confirmed for the TTL, with the fence it had;
--   `{0, pttl, holder, false, false, 1, 0, 1, false}` another run's value is there (the
--   shape of ACQUIRE's busy reply: no place in a queue, one holder, at the first key);
--   `{4}` anything else (waiters queued, a lock of another kind or type, a counter that
--   cannot be bumped, Redis refusing a write): nothing done, ask ACQUIRE.
local lock, counter = KEYS[1], KEYS[2]
local value = ARGV[1]
local function refused_write(reply) return type(reply) == 'table' and reply['err'] ~= nil end
-- Free, with no one queued: the common case, with nothing more to read.
local present = redis.call('EXISTS', lock, KEYS[3])
if present > 0 then
  local holder = redis.pcall('GET', lock)
  if present > 1 or type(holder) ~= 'string' then return {4} end
  if holder ~= value then return {0, redis.call('PTTL', lock), holder, false, false, 1, 0, 1, false} end
  local fence = redis.pcall('GET', counter)
  if type(fence) ~= 'string' or not string.match(fence, '^[1-9]%d*$') then return {4} end
  redis.call('PEXPIRE', lock, ARGV[2])
  return {1, fence}
end
-- The next fence, max(counter + 1, server time in µs), as ACQUIRE bumps it (INCR first: an
-- ACL without it fails here as there). Counters past 2^53 are above any time in µs.
local bumped = redis.pcall('INCR', counter)
if refused_write(bumped) then return {4} end
local time = redis.call('TIME')
local now = time[1] .. string.format('%06d', tonumber(time[2]))
local fence = now
if bumped < tonumber(now) then
  redis.call('SET', counter, now, 'PX', ARGV[3])
else
  fence = redis.call('GET', counter)
  redis.call('PEXPIRE', counter, ARGV[3])
end
redis.call('SET', lock, value, 'PX', ARGV[2])
return {1, fence}
