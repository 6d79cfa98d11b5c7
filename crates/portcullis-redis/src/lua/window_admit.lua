-- WindowStore::admit (W4): ScopeState::admit, one all-or-nothing check-and-reserve.
-- ARGV[1]  time (see time.lua)
-- ARGV[2]  doubles: [1] amount ttl ms, [2] tokens, [3] images, [4] videos, [5] money,
--          [6] has cap (0/1), [7] cap, [8] rolling rpm (0 = off), [9] n, then n policy
--          tiers of 3 from [10]: dimension, window_ms, limit — in the order groups,
--          dimensions, tiers (requests, tokens, images, videos)
--          then, optionally, a quota block to borrow (portcullis_core::blocks): [+1]
--          requests (the request itself among them), [+2] tokens
-- ARGV[3]  the admission record's member (see the prelude's KEYS[3]); absent: none
-- Reply    {1, now, anchor1, anchor2, anchor3, requests} admitted (-1 = group not
--          counted); requests: the block's when it fits under every limit, else 1 (the
--          request alone, decided as without a block)
--          {0, now, (dimension, tier position in ARGV[2], used, retry_after ms or -1)...}
local now = now_ms(ARGV[1])
local A = doubles(ARGV[2])
local tok, img, vid, cap, roll, np = A[2], A[3], A[4], A[7], A[8], A[9]
local breq, btok = A[10 + 3 * np], A[11 + 3 * np]
local nreq = 1
local has_cap = A[6] == 1
local last = 7 + 3 * np
local S = load_state(KEYS[1])
local n = S[10]
local live = live_groups(S, now)
-- The same call run twice (a client that sent it again after losing the connection
-- the first answer came on) finds its record: it was counted once and is answered as
-- admitted, counting nothing more (D9). A block's record carries ':b'; it was granted
-- whole, so it is the block asked for again.
if KEYS[3] and ARGV[3] then
  local again = 0
  if breq and breq > 1 and redis.call('ZSCORE', KEYS[3], ARGV[3] .. ':b') then
    again = breq
  elseif redis.call('ZSCORE', KEYS[3], ARGV[3]) then
    again = 1
  end
  if again > 0 then
    local touched = {true, img > 0, vid > 0}
    local has = {false, false, false}
    for o = 10, last, 3 do
      local d = A[o]
      local g = 1
      if d == 3 then g = 2 elseif d == 4 then g = 3 end
      has[g] = true
    end
    local anchors = {-1, -1, -1}
    for g = 1, 3 do
      if touched[g] and has[g] and live[g] then anchors[g] = S[6 + g] end
    end
    return {1, now, anchors[1], anchors[2], anchors[3], again}
  end
end
-- The common case: the state's tiers are the policy's tiers in the same order (every
-- apply below leaves them so unless a policy change left tiers of an untouched group).
-- Then tier j of the policy is tier j of the state: no search, updates in place.
local aligned = n == np
if aligned then
  for j = 0, np - 1 do
    local o, so = 10 + 3 * j, 11 + 4 * j
    if S[so] ~= A[o] or S[so + 1] ~= A[o + 1] then
      aligned = false
      break
    end
  end
end

-- ScopeState::check: every limit a demand of `nr` requests and `tk` tokens does not fit
-- under.
local has1, has2, has3 = false, false, false
local function check(nr, tk)
local out = nil
for o = 10, last, 3 do
  local d, w, lim = A[o], A[o + 1], A[o + 2]
  local g, need = 1, nr
  if d == 2 then need = tk elseif d == 3 then g, need = 2, img elseif d == 4 then g, need = 3, vid end
  if g == 1 then has1 = true elseif g == 2 then has2 = true else has3 = true end
  -- Requests and tokens are touched by every request; images and videos when asked for.
  if g == 1 or need > 0 then
    local used, ends = 0, now + w
    if live[g] then
      local a = S[6 + g]
      local k = 0
      if now > a then k = floor((now - a) / w) end
      ends = a + w * (k + 1)
      if aligned then
        local so = 11 + 4 * (o - 10) / 3
        if S[so + 2] == k then used = S[so + 3] end
      else
        for so = 11, 10 + 4 * n, 4 do
          if S[so] == d and S[so + 1] == w then
            if S[so + 2] == k then used = S[so + 3] end
            break
          end
        end
      end
    end
    if used + need > lim then
      -- After the reset the count is 0: the request fits then unless it is larger than
      -- the tier itself (W9).
      local retry = -1
      if need <= lim then retry = ends - now end
      out = out or {0, now}
      out[#out + 1] = d
      out[#out + 1] = (o - 7) / 3
      out[#out + 1] = used
      out[#out + 1] = retry
    end
  end
end
if has_cap and S[3] + S[4] >= cap then
  out = out or {0, now}
  out[#out + 1] = 5
  out[#out + 1] = 0
  out[#out + 1] = S[3] + S[4]
  out[#out + 1] = -1
end
-- Starts in the window: score > now - 60 s, i.e. >= now - 59 999 (integer ms).
if roll > 0 and S[6] > now then
  local count = redis.call('ZCOUNT', KEYS[2], now - ROLL + 1, '+inf')
  if count >= roll then
    -- Room appears when the oldest start that keeps us at the limit leaves the window.
    local leaving = redis.call('ZRANGEBYSCORE', KEYS[2], now - ROLL + 1, '+inf',
      'WITHSCORES', 'LIMIT', count - roll, 1)
    out = out or {0, now}
    out[#out + 1] = 7
    out[#out + 1] = 0
    out[#out + 1] = count
    out[#out + 1] = tonumber(leaving[2]) + ROLL - now
  end
end
return out
end
-- A block only where it fits under every limit; else the request alone.
local out = nil
if breq and breq > 1 and not check(breq, btok) then
  nreq, tok = breq, btok
else
  out = check(1, tok)
end
if out then
  -- A rejection changes nothing.
  return out
end

-- ScopeState::apply: reserve the demand in every tier, the amount and the rolling log.
-- A group is counted when the request touches it and the policy has tiers in it; a
-- counted group with nothing in any current window re-anchors now (W2).
local counted = {has1, has2 and img > 0, has3 and vid > 0}
local anchors = {-1, -1, -1}
for g = 1, 3 do
  if counted[g] then
    if not live[g] then S[6 + g] = now end
    anchors[g] = S[6 + g]
  end
end
local NS
if aligned then
  NS = S
  for j = 0, np - 1 do
    local o, so = 10 + 3 * j, 11 + 4 * j
    local d = A[o]
    local g, units = 1, nreq
    if d == 2 then units = tok elseif d == 3 then g, units = 2, img
    elseif d == 4 then g, units = 3, vid end
    if counted[g] then
      local a, w = S[6 + g], A[o + 1]
      local k = 0
      if now > a then k = floor((now - a) / w) end
      -- Kept while its window is current (and the group did not re-anchor), else reset.
      if live[g] and S[so + 2] == k then
        S[so + 3] = S[so + 3] + units
      else
        S[so + 2], S[so + 3] = k, units
      end
    end
  end
else
  -- Rebuild the tier list in policy order: a counted group takes the policy's current
  -- tiers (counts of tiers that still exist are kept unless their window rolled, removed
  -- tiers are forgotten, added ones start at 0); a group with no state takes them empty
  -- (no anchor: never live, so nothing changes); any other group keeps its tiers.
  NS = {1, S[2], S[3], S[4], S[5], S[6], S[7], S[8], S[9], 0}
  local cnt = 0
  for g = 1, 3 do
    if counted[g] or S[6 + g] < 0 then
      local a = S[6 + g]
      for o = 10, last, 3 do
        local d = A[o]
        local dg, units = 1, nreq
        if d == 2 then units = tok elseif d == 3 then dg, units = 2, img
        elseif d == 4 then dg, units = 3, vid end
        if dg == g then
          local w = A[o + 1]
          local k, used = 0, 0
          if counted[g] then
            if now > a then k = floor((now - a) / w) end
            if live[g] then
              for so = 11, 10 + 4 * n, 4 do
                if S[so] == d and S[so + 1] == w then
                  if S[so + 2] == k then used = S[so + 3] end
                  break
                end
              end
            end
            used = used + units
          end
          local p = 11 + 4 * cnt
          NS[p], NS[p + 1], NS[p + 2], NS[p + 3] = d, w, k, used
          cnt = cnt + 1
        end
      end
    else
      for so = 11, 10 + 4 * n, 4 do
        local sg = S[so] - 1
        if sg < 1 then sg = 1 end
        if sg == g then
          local p = 11 + 4 * cnt
          NS[p], NS[p + 1], NS[p + 2], NS[p + 3] = S[so], S[so + 1], S[so + 2], S[so + 3]
          cnt = cnt + 1
        end
      end
    end
  end
  NS[10] = cnt
end
NS[2] = S[2] + 1
if has_cap and A[5] > 0 then NS[4] = S[4] + A[5] end
if roll > 0 then
  local seq = S[5]
  -- Expired starts are never counted; clearing them now and then bounds the log.
  if seq % 16 == 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ROLL) end
  redis.call('ZADD', KEYS[2], now, seq)
  NS[5] = seq + 1
  -- The log lives at least 65 s past its newest start: renewed (to 120 s) about once a
  -- minute rather than at every start.
  if S[6] - now < ROLL + MARGIN then
    redis.call('PEXPIRE', KEYS[2], 2 * ROLL)
    NS[6] = now + 2 * ROLL
  end
end
-- Never idle: the request just admitted is pending.
save(KEYS[1], NS, now, A[1], true)
record(KEYS[3], ARGV[3], nreq, now, A[1])
return {1, now, anchors[1], anchors[2], anchors[3], nreq}
