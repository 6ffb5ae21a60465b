-- uses: fence.lua
-- KEYS: the fence counter of each key. ARGV: fence ttl ms, then each key's fence. Redlock:
-- raises a node's fence counters to the fences handed to the command (never lowers one;
-- compared exactly, as decimal strings), so that any later majority, which shares a node with
-- this one, hands out higher fences. → 1.
for i, counter in ipairs(KEYS) do
  local current = redis.call('GET', counter)
  if not canonical(current) or less(current, ARGV[i + 1]) then
    redis.call('SET', counter, ARGV[i + 1], 'PX', ARGV[1])
  end
end
return 1
