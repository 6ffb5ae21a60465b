-- Lua helpers for the holders of `--shared` and `--limit` (uses queue.lua).
-- `extend(k, h, value, ends, now)`: this holder's lease now ends at `ends`; the set and the
-- fences live as long as the last lease. Its first write is a PEXPIRE, which Redis allows
-- when out of memory, and a script that has written may go on (ZADD alone would be refused):
-- so a holder renews under OOM as an exclusive one does. `holds(h, value, fence, record)`:
-- records a new holder's fence and the success record it will write.
-- Not every script uses every helper here:
-- luacheck: push ignore 211
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
-- luacheck: pop
