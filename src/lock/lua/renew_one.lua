-- The common shape of RENEW, kept lean: one exclusive key. What it does not handle itself it
-- leaves untouched and hands back to RENEW.
--
-- KEYS: lock.
-- ARGV: value, ttl ms.
--
-- → `{1}` extended; `{0, 1}` the key no longer holds this run's value (never re-created);
--   `{4}` the key holds another type: nothing done, ask RENEW. The key is read after the write
--   too: a write of its own ends a client's tracking of the key, a read after it arms it again.
local held = redis.pcall('GET', KEYS[1])
if type(held) == 'table' then return {4} end
if held ~= ARGV[1] then return {0, 1} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PTTL', KEYS[1])
return {1}
