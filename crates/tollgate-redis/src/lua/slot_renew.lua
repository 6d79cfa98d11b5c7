-- SlotStore::renew (C4, D5): extend a live lease to now + ttl (never shorten it).
-- KEYS[1]  the subject's lease ZSET
-- ARGV     time (see time.lua), ttl ms, lease member
-- Reply    1 when the lease is live (and now extended), 0 when it is gone or expired.
local now = now_ms(ARGV[1])
local key = KEYS[1]
local score = redis.call('ZSCORE', key, ARGV[3])
if not score or tonumber(score) <= now then
  return 0
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', key, 'XX', 'GT', now + ttl, ARGV[3])
redis.call('PEXPIRE', key, ttl + 1000, 'GT')
return 1
