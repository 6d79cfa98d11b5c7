-- SlotStore::acquire (C1, C4, C5, D5): purge expired leases, take a slot if one is free.
-- KEYS[1]  the subject's lease ZSET (member = lease, score = expiry in ms)
-- ARGV     time (see time.lua), limit (0 = unlimited), ttl ms, lease member
-- Reply    {1, live leases after} when taken, {0, live leases} when full.
local now = now_ms(ARGV[1])
local key = KEYS[1]
local n = live_leases(key, now)
if held(key, ARGV[4], 1) > 0 then return {1, n} end
local limit = tonumber(ARGV[2])
if limit ~= 0 and n >= limit then
  return {0, n}
end
add_lease(key, now, tonumber(ARGV[3]), ARGV[4], n)
return {1, n + 1}
