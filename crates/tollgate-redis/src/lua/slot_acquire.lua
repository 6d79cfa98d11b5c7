-- SlotStore::acquire (C1, C4, C5, D5): purge expired leases, take a slot if one is free.
-- KEYS[1]  the subject's lease ZSET (member = lease, score = expiry in ms)
-- ARGV     time (see time.lua), limit (0 = unlimited), ttl ms, lease member
-- Reply    {1, live leases after} when taken, {0, live leases} when full.
-- (Lua numbers passed to redis.call are sent as exact integers below 2^53.)
local now = now_ms(ARGV[1])
local key = KEYS[1]
-- A lease whose expiry is at or before now no longer counts (expires_at > now is live).
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local n = redis.call('ZCARD', key)
local limit = tonumber(ARGV[2])
if limit ~= 0 and n >= limit then
  return {0, n}
end
local ttl = tonumber(ARGV[3])
redis.call('ZADD', key, now + ttl, ARGV[4])
-- The key outlives its longest lease by 1 s, so a crashed holder leaves nothing behind.
-- A key with leases already has an expiry: only ever extend it.
if n == 0 then
  redis.call('PEXPIRE', key, ttl + 1000)
else
  redis.call('PEXPIRE', key, ttl + 1000, 'GT')
end
return {1, n + 1}
