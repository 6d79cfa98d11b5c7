-- WindowStore::view: ScopeState::view. Read only.
-- ARGV[1]  time (see time.lua)
-- ARGV[2]  doubles, as for admit (the demand is ignored)
-- Reply    per policy tier in ARGV[2] order: used, resets_at (-1 = none); then the amount
--          (spent + reserved) if capped; then the rolling count if on.
local now = now_ms(ARGV[1])
local A = doubles(ARGV[2])
local S = load_state(KEYS[1])
local n = S[10]
local live = live_groups(S, now)
local out = {}
for o = 10, 7 + 3 * A[9], 3 do
  local d, w = A[o], A[o + 1]
  local g = d - 1
  if g < 1 then g = 1 end
  if live[g] then
    local a = S[6 + g]
    local k = 0
    if now > a then k = floor((now - a) / w) end
    local used = 0
    for so = 11, 10 + 4 * n, 4 do
      if S[so] == d and S[so + 1] == w then
        if S[so + 2] == k then used = S[so + 3] end
        break
      end
    end
    out[#out + 1] = used
    out[#out + 1] = a + w * (k + 1)
  else
    out[#out + 1] = 0
    out[#out + 1] = -1
  end
end
if A[6] == 1 then out[#out + 1] = S[3] + S[4] end
if A[8] > 0 then
  local count = 0
  if S[6] > now then count = redis.call('ZCOUNT', KEYS[2], now - ROLL + 1, '+inf') end
  out[#out + 1] = count
end
return out
