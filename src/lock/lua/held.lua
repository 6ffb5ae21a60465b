-- uses: queue.lua
-- KEYS: the lock keys. ARGV: value. → `{1, left}` every key holds this run's value (for
-- `--shared` and `--limit`: its lease in the set has not ended), the soonest of them ending in
-- `left` ms (-1: none ends); `{0, key}` that key (its index, from 1) does not. Writes nothing:
-- a holder runs it when Redis told it that a key changed, and its reads arm that notice again
-- (client tracking).
local now, left = nil, -1
for i, lock in ipairs(KEYS) do
  local t = redis.call('TYPE', lock)['ok']
  local ends
  if t == 'zset' then
    now = now or now_ms()
    local own = redis.call('ZSCORE', lock, ARGV[1])
    if not (own and tonumber(own) > now) then return {0, i} end
    ends = math.floor(tonumber(own) - now)
  elseif t == 'string' and redis.call('GET', lock) == ARGV[1] then
    ends = redis.call('PTTL', lock)
  else
    return {0, i}
  end
  if ends >= 0 and (left < 0 or ends < left) then left = ends end
end
return {1, left}
