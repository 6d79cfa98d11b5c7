-- Renewal of a quota block's leases (portcullis_core::blocks, C4): extend every lease of
-- the block to now + ttl (never shorten one), if they are still live. They were taken
-- together and are renewed together, so the first one speaks for all.
-- KEYS[1]  the subject's lease ZSET
-- ARGV     time (see time.lua), ttl ms, the block's member base, its lease count, [5]
--          '1': restore the block's leases if they are gone (their slot changed owner
--          within a lease TTL: the old owner may have lost them unreplicated, D10; a
--          block renewed whole still holds every lease it borrowed)
-- Reply    1 when the block's leases are live (and now extended, or restored), 0 when
--          they are gone.
local now = now_ms(ARGV[1])
local key = KEYS[1]
local base, count = ARGV[3], tonumber(ARGV[4])
local ttl = tonumber(ARGV[2])
local score = redis.call('ZSCORE', key, base .. ':0')
if not score and ARGV[5] == '1' then
  add_leases(key, now, ttl, base, live_leases(key, now), count)
  return 1
end
if not score or tonumber(score) <= now then
  return 0
end
local args, at = {}, now + ttl
for i = 0, count - 1 do
  args[2 * i + 1] = at
  args[2 * i + 2] = base .. ':' .. i
end
redis.call('ZADD', key, 'XX', 'GT', unpack(args))
redis.call('PEXPIRE', key, ttl + 1000, 'GT')
return 1
