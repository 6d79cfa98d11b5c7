-- ChannelStore::admit_all_and_acquire (U1, Q1, D2): a channel's provider windows admitted
-- all or nothing (window_admit_all.lua, run as `admit_all` above) and, when they admit,
-- a capacity lease on the channel if one is free (as slot_acquire.lua) — one step.
-- KEYS     the items' keys (3 an item, as window_admit_all.lua), then the channel's lease
--          ZSET
-- ARGV     [1] time (see time.lua), [2] capacity, [3] lease ttl ms, [4] lease member,
--          [5] leases of a quota block to borrow (1 = none; see lease.lua's grant), then
--          [6] the admission records' member, then the items' doubles (as
--          window_admit_all.lua)
-- Reply    {windows reply (as window_admit_all.lua), 1 lease taken | 0 channel full |
--          -1 not asked (the windows refused), leases taken}
local ks, as = {}, {ARGV[1], ARGV[6]}
for i = 1, #KEYS - 1 do ks[i] = KEYS[i] end
for i = 7, #ARGV do as[#as + 1] = ARGV[i] end
local r = admit_all(ks, as)
if r[1] ~= 1 then return {r, -1, 0} end
local now = now_ms(ARGV[1])
local key = KEYS[#KEYS]
local n = live_leases(key, now)
-- Run twice, the first run's leases stand (see lease.lua's held).
local take = held(key, ARGV[4], tonumber(ARGV[5]))
if take > 0 then return {r, 1, take} end
take = grant(n, tonumber(ARGV[2]), tonumber(ARGV[5]))
if take == 0 then return {r, 0, 0} end
add_leases(key, now, tonumber(ARGV[3]), ARGV[4], n, take)
return {r, 1, take}
