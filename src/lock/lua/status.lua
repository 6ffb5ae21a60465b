-- uses: queue.lua
-- KEYS: lock, fence, queue, queue expiry, holders. ARGV: how many waiters to list, how many
-- holders to list.
-- → `{type, value or false, pttl, fence or false, waiters, {value, seq, …}, holding,
--   {value, ms left, fence or false, …}, ours}`, one consistent snapshot for `status`:
--   `waiters` counts the live entries of the queue, and the list holds the first of them, in
--   order, with their arrival numbers; for `--shared` and `--limit` (a sorted set that is
--   `ours`, 1), `holding` counts the live holders, the list holds the first of them by lease
--   end, and `pttl` is the time until the last lease ends (-2: none is left). Read only.
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
