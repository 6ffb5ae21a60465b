-- uses: queue.lua holders.lua
-- KEYS: two for each lock key (lock, holders). ARGV: value, ttl ms. → `{1}` every key
-- extended; `{0, key}` that key (its index, from 1) no longer holds our value (never
-- re-creates a missing key or a lapsed holder): the lock is lost, whatever the others say.
-- Each key is read after its write, which arms a holder's tracking of it again (RENEW_ONE).
local now = nil
for i = 1, #KEYS / 2 do
  local lock, h = KEYS[2 * i - 1], KEYS[2 * i]
  local t = redis.call('TYPE', lock)['ok']
  if t == 'string' and redis.call('GET', lock) == ARGV[1] then
    redis.call('PEXPIRE', lock, ARGV[2])
  elseif t == 'zset' then
    now = now or now_ms()
    local own = redis.call('ZSCORE', lock, ARGV[1])
    if not (own and tonumber(own) > now) then return {0, i} end
    extend(lock, h, ARGV[1], now + tonumber(ARGV[2]), now)
  else
    return {0, i}
  end
  redis.call('PTTL', lock)
end
return {1}
