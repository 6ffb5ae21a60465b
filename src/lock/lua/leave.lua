-- uses: queue.lua
-- KEYS: three for each lock key (lock, queue, queue expiry). ARGV: value, then each key's wake
-- prefix. A waiter gives up its places (its `--wait` ran out, or it was signalled), and the
-- lock if a release handed it over meanwhile (see `RELEASE`); the waiters that can now hold
-- are woken, in case this one had been told its turn had come. → 1.
for i = 1, #KEYS / 3 do
  local lock, q, e = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  if redis.call('TYPE', lock)['ok'] == 'string' and redis.call('GET', lock) == ARGV[1] then
    redis.call('DEL', lock)
  end
  redis.pcall('ZREM', q, ARGV[1])
  redis.pcall('ZREM', e, ARGV[1])
  wake_ready(lock, q, e, ARGV[1 + i])
end
return 1
