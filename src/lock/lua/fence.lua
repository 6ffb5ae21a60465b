-- Lua helpers for fences. Lua numbers are doubles, exact only up to 2^53, so fences travel as
-- the decimal strings Redis writes (`INCR` checks and bumps the counter, `GET` reads it back
-- when it is past the time) and are compared as such: `less(a, b)` for canonical integers (no
-- leading zeros).
-- `now_us()`: the server clock in microseconds, as a decimal string. `bump(counter, ttl)`: the
-- next fence, `max(counter + 1, server time in µs)`, stored with that TTL (→ `nil` and the
-- error when the counter cannot be bumped).
-- Not every script uses every helper here:
-- luacheck: push ignore 211
local function canonical(s)
  return s ~= nil and s ~= false and (s == '0' or string.match(s, '^%-?[1-9]%d*$') ~= nil)
end
local function less(a, b)
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if na ~= nb then return na end
  if na then a, b = string.sub(b, 2), string.sub(a, 2) end
  if #a ~= #b then return #a < #b end
  return a < b
end
local function now_us()
  local now = redis.call('TIME')
  return now[1] .. string.format('%06d', tonumber(now[2]))
end
local function bump(counter, ttl)
  local bumped = redis.pcall('INCR', counter)
  if type(bumped) == 'table' then return nil, bumped['err'] end
  local now = now_us()
  -- Exact below 2^53, and counters past it are above any time in µs: only those are read back.
  if bumped < tonumber(now) then
    redis.call('SET', counter, now, 'PX', ttl)
    return now
  end
  redis.call('PEXPIRE', counter, ttl)
  return redis.call('GET', counter)
end
-- luacheck: pop
