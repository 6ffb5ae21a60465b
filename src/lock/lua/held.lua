-- uses: queue.lua
-- KEYS: each lock key followed by its queue. ARGV: value. → `{1, left, queued}` every key holds
-- this run's value (for `--shared` and `--limit`: its lease in the set has not ended), the
-- soonest of them ending in `left` ms (-1: none ends), and `queued` 1 when a queue exists
-- (waiters, whom the release hands over to); `{0, key}` that key (its index among the lock
-- keys, from 1) does not. Writes nothing: a holder runs it when Redis told it that a key
-- changed, and its reads arm that notice again (client tracking), for the queues too.
local now, left, queued = nil, -1, 0
for i = 1, #KEYS, 2 do
  local lock = KEYS[i]
  local t = redis.call('TYPE', lock)['ok']
  local ends
  if t == 'zset' then
    now = now or now_ms()
    local own = redis.call('ZSCORE', lock, ARGV[1])
    if not (own and tonumber(own) > now) then return {0, (i + 1) / 2} end
    ends = math.floor(tonumber(own) - now)
  elseif t == 'string' and redis.call('GET', lock) == ARGV[1] then
    ends = redis.call('PTTL', lock)
  else
    return {0, (i + 1) / 2}
  end
  if ends >= 0 and (left < 0 or ends < left) then left = ends end
  if redis.call('EXISTS', KEYS[i + 1]) == 1 then queued = 1 end
end
return {1, left, queued}
