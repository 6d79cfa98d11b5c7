-- SlotStore::in_flight (C5): live leases (expiry after now). Read only.
-- KEYS[1]  the subject's lease ZSET
-- ARGV     time (see time.lua)
local now = now_ms(ARGV[1])
return redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%.0f', now), '+inf')
