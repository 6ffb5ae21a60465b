//! The Lua scripts: each lock operation is one round trip, and keys and values travel only as
//! KEYS/ARGV, never spliced into script text. `redis::Script` sends EVALSHA and loads the script
//! once on NOSCRIPT (e.g. after `SCRIPT FLUSH` or a restart).

use std::sync::LazyLock;

use redis::Script;

/// KEYS: lock, fence. ARGV: value, ttl ms, fence ttl ms.
/// → `{1, fence}` acquired; `{0, pttl, holder}` busy; `{-1, type}` the key holds another type;
///   `{-2, error}` the fence counter is unusable (nothing is left held).
///
/// The fence counter is initialised from the server clock in microseconds when it is missing,
/// so it keeps increasing across data loss and may expire instead of living forever.
///
/// When the key already holds this run's own value, an earlier attempt succeeded but its reply
/// was lost: ownership is confirmed, the TTL restarted and the fence of that attempt returned.
pub static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local function bump_fence()
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' then return nil, fence['err'] end
  if fence == 1 then
    local now = redis.call('TIME')
    fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
    redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[3])
  else
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  end
  return fence
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence, err = bump_fence()
  if not fence then
    redis.call('DEL', KEYS[1])
    return {-2, err}
  end
  return {1, fence}
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'string' then return {-1, kind} end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local fence = tonumber(redis.call('GET', KEYS[2]) or '')
  if not fence then
    local err
    fence, err = bump_fence()
    if not fence then
      redis.call('DEL', KEYS[1])
      return {-2, err}
    end
  end
  return {1, fence}
end
return {0, redis.call('PTTL', KEYS[1]), holder}
"#,
    )
});

/// KEYS: lock. ARGV: value, ttl ms. → 1 extended, 0 not ours (never re-creates a missing key).
pub static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('TYPE', KEYS[1])['ok'] == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#,
    )
});

/// KEYS: lock. ARGV: value, release channel.
/// → 1 deleted (and waiters told), 0 not ours (left untouched).
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('TYPE', KEYS[1])['ok'] == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
return 0
"#,
    )
});
