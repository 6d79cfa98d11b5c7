-- Leases (C1, C4, D5), shared by the scripts that take one: a lease ZSET holds one member
-- per lease, score = its expiry in ms; a lease whose expiry is at or before now no longer
-- counts. (Lua numbers passed to redis.call are sent as exact integers below 2^53.)

-- Purges the expired leases of `key`; returns how many are live.
local function live_leases(key, now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  return redis.call('ZCARD', key)
end

-- Adds lease `member` to `key`, which held `n` live leases, expiring at now + ttl. The key
-- outlives its longest lease by 1 s, so a crashed holder leaves nothing behind; a key with
-- leases already has an expiry: only ever extend it.
local function add_lease(key, now, ttl, member, n)
  redis.call('ZADD', key, now + ttl, member)
  if n == 0 then
    redis.call('PEXPIRE', key, ttl + 1000)
  else
    redis.call('PEXPIRE', key, ttl + 1000, 'GT')
  end
end
