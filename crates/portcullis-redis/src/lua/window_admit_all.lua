-- WindowStore::admit_all (U1, W4): one all-or-nothing admission over several subjects'
-- windows (one channel's provider windows: credential, credential + model, vendor).
-- Each item is WindowStore::admit (window_admit.lua, run as `admit` below); when an item
-- is refused, the items before it are put back exactly as they were, with their
-- expiries, so a refusal changes nothing anywhere: the state (a string) by GET / SET,
-- and a rolling log (a ZSET, written only by an item with a rolling limit) by DUMP /
-- RESTORE — DUMP serializes and compresses, so it is kept to the keys that need it.
-- KEYS     per item: its state, its rolling log, its admission records (3 keys an item)
-- ARGV     [1] time (see time.lua), [2] the admission records' member, then per item its
--          doubles (as window_admit.lua's ARGV[2]; [8] is its rolling limit)
-- Reply    {1, {item reply}...} every item admitted
--          {0, i, item i's reply} item i refused (1-based), nothing changed
local n = #KEYS / 3
local saved = {}
-- What put_back needs to restore `key`: its value (GET, or DUMP for a ZSET) and PTTL.
local function snapshot(key, zset)
  if zset then
    return {redis.call('DUMP', key), redis.call('PTTL', key), true}
  end
  return {redis.call('GET', key), redis.call('PTTL', key), false}
end
local function put_back(key, s)
  if not s[1] then
    redis.call('DEL', key)
  elseif s[3] then
    local ttl = tonumber(s[2])
    if ttl < 0 then ttl = 0 end
    redis.call('RESTORE', key, ttl, s[1], 'REPLACE')
  elseif tonumber(s[2]) == -1 then
    redis.call('SET', key, s[1])
  else
    -- PTTL 0: it was expiring this very millisecond.
    redis.call('SET', key, s[1], 'PX', math.max(tonumber(s[2]), 1))
  end
end
-- The item's rolling limit: the 8th double of its arguments.
local function rolling(a)
  return #a >= 64 and struct.unpack('<d', a, 57) > 0
end
local replies = {}
for i = 1, n do
  local ks = {KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]}
  local roll = rolling(ARGV[2 + i])
  saved[i] = {snapshot(ks[1], false), roll and snapshot(ks[2], true)}
  local r = admit(ks, {ARGV[1], ARGV[2 + i], ARGV[2]})
  if r[1] ~= 1 then
    -- A refused item changed nothing itself; undo the ones admitted before it.
    for j = i - 1, 1, -1 do
      put_back(KEYS[3 * j - 2], saved[j][1])
      if saved[j][2] then put_back(KEYS[3 * j - 1], saved[j][2]) end
      local m = ARGV[2]
      if replies[j][6] and replies[j][6] > 1 then m = m .. ':b' end
      redis.call('ZREM', KEYS[3 * j], m)
    end
    return {0, i, r}
  end
  replies[i] = r
end
return {1, replies}
