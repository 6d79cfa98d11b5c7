-- WindowStore::settle_all (U2, W5): settles several subjects' windows in one call, each
-- as WindowStore::settle (window_settle.lua, run as `settle` below).
-- KEYS     per item: its state, its rolling log (2 keys an item)
-- ARGV     [1] time (see time.lua), then per item its doubles (as window_settle.lua's
--          ARGV[2])
-- Reply    the number of items settled
local n = #KEYS / 2
for i = 1, n do
  settle({KEYS[2 * i - 1], KEYS[2 * i]}, {ARGV[1], ARGV[1 + i]})
end
return n
