-- WindowStore::admit_all (U1, W4): one all-or-nothing admission over several subjects'
-- windows (one channel's provider windows: credential, credential + model, vendor).
-- Each item is WindowStore::admit (window_admit.lua, run as `admit` below); when an item
-- is refused, the items before it are put back exactly as they were (DUMP / RESTORE of
-- their keys, with their expiries), so a refusal changes nothing anywhere.
-- KEYS     per item: its state, its rolling log (2 keys an item)
-- ARGV     [1] time (see time.lua), then per item its doubles (as window_admit.lua's
--          ARGV[2])
-- Reply    {1, {item reply}...} every item admitted
--          {0, i, item i's reply} item i refused (1-based), nothing changed
local n = #KEYS / 2
local saved = {}
local function snapshot(key)
  return {redis.call('DUMP', key), redis.call('PTTL', key)}
end
local function put_back(key, s)
  if not s[1] then
    redis.call('DEL', key)
  else
    local ttl = tonumber(s[2])
    if ttl < 0 then ttl = 0 end
    redis.call('RESTORE', key, ttl, s[1], 'REPLACE')
  end
end
local replies = {}
for i = 1, n do
  local ks = {KEYS[2 * i - 1], KEYS[2 * i]}
  saved[i] = {snapshot(ks[1]), snapshot(ks[2])}
  local r = admit(ks, {ARGV[1], ARGV[1 + i]})
  if r[1] ~= 1 then
    -- A refused item changed nothing itself; undo the ones admitted before it.
    for j = i - 1, 1, -1 do
      put_back(KEYS[2 * j - 1], saved[j][1])
      put_back(KEYS[2 * j], saved[j][2])
    end
    return {0, i, r}
  end
  replies[i] = r
end
return {1, replies}
