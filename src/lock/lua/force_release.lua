-- uses: queue.lua holders.lua
-- KEYS: lock, queue, queue expiry, holders. ARGV: release channel, wake prefix, token prefix
-- (empty: every holder). The operator's override: deletes the lock (or, with a prefix, the
-- one holder whose token starts with it) whatever its value, and tells waiters.
-- → `{1, value, …}` deleted, the values of the holders dropped; `{0}` there was none; `{2}`
-- no holder's token starts with the prefix; `{3, n}` n holders' tokens do (nothing dropped);
-- `{-1, type}` the key holds another type and was left alone.
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
