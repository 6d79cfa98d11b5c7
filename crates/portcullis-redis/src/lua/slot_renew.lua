-- SlotStore::renew (C4, D5): extend a live lease to now + ttl (never shorten it).
-- KEYS[1]  the subject's lease ZSET
-- ARGV     time (see time.lua), ttl ms, lease member, [4] '1': restore a lease that is
--          gone (its slot changed owner within a lease TTL: the write may have been lost
--          with the old owner, D10)
-- Reply    1 when the lease is live (and now extended, or restored), 0 when it is gone
--          or expired.
local now = now_ms(ARGV[1])
local key = KEYS[1]
local score = redis.call('ZSCORE', key, ARGV[3])
local ttl = tonumber(ARGV[2])
if not score and ARGV[4] == '1' then
  local n = live_leases(key, now)
  add_lease(key, now, ttl, ARGV[3], n)
  return 1
end
if not score or tonumber(score) <= now then
  return 0
end
redis.call('ZADD', key, 'XX', 'GT', now + ttl, ARGV[3])
redis.call('PEXPIRE', key, ttl + 1000, 'GT')
return 1
