-- The common shape of RELEASE, kept lean: one exclusive key, nothing kept (`--min-hold`), no
-- success record to write, one Redis. What it does not handle itself it leaves untouched and
-- hands back to RELEASE.
--
-- KEYS: lock, queue.
-- ARGV: value, and in a Cluster the release channel (where waiters for keys in several slots
-- listen; elsewhere no one listens there who is not queued).
--
-- → `{0, 1}` deleted (and the release announced on the channel given); `{0, 0}` not this
--   run's value, left untouched (the shape of RELEASE's replies); `{4}` waiters are queued
--   (one may be handed the lock) or the key holds another type: nothing done, ask RELEASE.
local held = redis.pcall('GET', KEYS[1])
if type(held) == 'table' or redis.call('EXISTS', KEYS[2]) == 1 then return {4} end
if held ~= ARGV[1] then return {0, 0} end
redis.call('DEL', KEYS[1])
if ARGV[2] then redis.pcall('PUBLISH', ARGV[2], 'released') end
return {0, 1}
