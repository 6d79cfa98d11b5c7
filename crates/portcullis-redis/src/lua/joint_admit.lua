-- JointStore::acquire_and_admit (C1, C4, W4, D2): one subject's slot and its window
-- admission in one step, all or nothing: the slot is taken only if the windows admit
-- (window_admit.lua, run as `admit` above), the windows are asked only if a slot is free;
-- the lease as slot_acquire.lua takes it (lease.lua).
-- Every key carries the subject's hash tag: one Cluster slot.
-- KEYS[1]  the subject's lease ZSET (as slot_acquire.lua)
-- KEYS[2]  window state, KEYS[3] rolling log, KEYS[4] admission records (as
--          window_admit.lua); absent: slot only
-- ARGV     [1] time (see time.lua), [2] slot limit (0 = unlimited), [3] lease ttl ms,
--          [4] lease member, [5] leases of a quota block to borrow (1 = none; see
--          lease.lua's grant), [6] window doubles (as window_admit.lua's ARGV[2], maybe
--          with a block; absent: slot only), [7] the admission record's member
-- Reply    {1, admit reply or {}, leases taken} slot taken (and windows admitted)
--          {0, live leases} every slot taken, nothing counted
--          {2, admit reply} the windows have no room, no slot taken, nothing counted
local now = now_ms(ARGV[1])
local slots = KEYS[1]
local n = live_leases(slots, now)
-- Run twice, the first run's leases stand (and its window admission, found by its
-- record): nothing more is taken.
local again = held(slots, ARGV[4], tonumber(ARGV[5]))
local take = again
if take == 0 then take = grant(n, tonumber(ARGV[2]), tonumber(ARGV[5])) end
if take == 0 then
  return {0, n}
end
local w = {}
if #KEYS >= 4 then
  w = admit({KEYS[2], KEYS[3], KEYS[4]}, {ARGV[1], ARGV[6], ARGV[7]})
  if w[1] ~= 1 then
    return {2, w}
  end
end
if again == 0 then add_leases(slots, now, tonumber(ARGV[3]), ARGV[4], n, take) end
return {1, w, take}
