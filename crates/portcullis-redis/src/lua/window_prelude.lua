-- portcullis anchored windows: portcullis_core::window::ScopeState in Lua (W1-W6, W9, W10).
-- Each window script is time.lua, this prelude and one operation. The decisions are
-- ScopeState's, rule for rule (the conformance suite and a differential test against the
-- in-memory store hold them to it). Written for server time: flat arrays of doubles
-- decoded in C (struct), a handful of tables per call, straight-line loops.
--
-- Where the storage differs from ScopeState, no decision does:
-- - a group with no state (no anchor) may carry its policy tiers at 0: it is never live;
-- - the rolling log is a ZSET ordered by start time (ScopeState: by insertion; the same
--   unless the server clock steps back), its expired starts are dropped every 16th
--   start rather than at each one (they are never counted), and it is "empty" for the
--   idle test only once its keep-until time has passed.
--
-- KEYS[1]  state of one (subject, scope): little-endian doubles
--            [1] format version (1)   [2] pending: admitted, not yet settled
--            [3] spent   [4] reserved (W6)
--            [5] sequence of rolling-log members
--            [6] time until which the rolling log is kept (-1 = none); from then on it
--                holds no start inside its 60 s window
--            [7..9] anchor of groups requests+tokens / images / videos (-1 = none, W3)
--            [10] n, then n tiers of 4: dimension, window_ms, window index, used
-- KEYS[2]  rolling log (W10): ZSET, score = start time (integer ms), member = sequence.
--          Starts leave the window by score; the expired ones are removed now and then.
--          A member is unique while any start in the window exists (the state, which
--          holds the sequence, lives at least as long); a later reuse can only hit an
--          expired start, which it then simply replaces.
-- KEYS[3]  admission records (D9): ZSET, member = the admitting call's member
--          (`<instance>:<id>`, `:b` appended for a quota block), score = admission
--          time. A settlement counts only if it finds (and removes) its record: settling
--          twice, or settling what Redis never counted, changes nothing.
-- Dimensions: 1 requests, 2 tokens (group 1), 3 images (group 2), 4 videos (group 3);
-- in replies also 5 amount, 7 rolling.
-- Doubles are exact up to 2^53: ms timestamps, counts and minor units stay far below.
-- Window index: floor((now - anchor) / len) is exact in doubles while now - anchor < 2^52.

local floor = math.floor
local ROLL = 60000      -- ROLLING_WINDOW_MS
local MARGIN = 5000     -- extra life of a key past the last moment it can matter

local function doubles(s)
  local t = {struct.unpack('<' .. string.rep('d', #s / 8), s)}
  t[#t] = nil -- struct.unpack also returns the next position
  return t
end

local function load_state(key)
  local raw = redis.call('GET', key)
  if raw and #raw >= 80 and #raw % 8 == 0 then
    local S = doubles(raw)
    if S[1] == 1 then return S end
  end
  return {1, 0, 0, 0, 0, -1, -1, -1, -1, 0}
end

-- Per group: does any tier count something in its current window? A group with nothing
-- in any current window starts fresh at its next use (W2), and may be forgotten.
local function live_groups(S, now)
  local live = {false, false, false}
  for o = 11, 10 + 4 * S[10], 4 do
    if S[o + 3] ~= 0 then
      local g = S[o] - 1
      if g < 1 then g = 1 end
      local a = S[6 + g]
      if a >= 0 then
        local k = 0
        if now > a then k = floor((now - a) / S[o + 1]) end
        if k == S[o + 2] then live[g] = true end
      end
    end
  end
  return live
end

-- Longest life of an admission record: a request settled later than this is not
-- corrected (its reservation stands as its charge).
local RECORD_LIFE = 86400000

-- Records admission `member` (a block's when `nreq` > 1) in `key` at `now`; drops the
-- records past their life (their instance died or their reply was lost for good).
local function record(key, member, nreq, now, amount_ttl)
  if not key or not member then return end
  if nreq > 1 then member = member .. ':b' end
  local life = RECORD_LIFE
  if amount_ttl < life then life = amount_ttl end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - life)
  redis.call('ZADD', key, now, member)
  redis.call('PEXPIRE', key, life)
end

-- Writes the state back, or deletes it when dropping it changes no decision (pending,
-- spend, reservations, the rolling log and current windows all empty; `busy` = known
-- not to be idle). Expiry: the longest window it counts in (each current window ends
-- within one length of now), the life of the rolling log, and, while any money is spent
-- or reserved, amount_ttl: the amount never resets by itself, so it lives amount_ttl
-- after its last change.
local function save(key, S, now, amount_ttl, busy)
  local money = S[3] ~= 0 or S[4] ~= 0
  if not (busy or money or S[2] > 0 or S[6] > now) then
    local live = live_groups(S, now)
    if not (live[1] or live[2] or live[3]) then
      redis.call('DEL', key)
      return
    end
  end
  local ttl = 0
  if S[6] > now then ttl = S[6] - now end
  for o = 12, 10 + 4 * S[10], 4 do
    if S[o] > ttl then ttl = S[o] end
  end
  ttl = ttl + MARGIN
  if money and amount_ttl > ttl then ttl = amount_ttl end
  redis.call('SET', key, struct.pack('<' .. string.rep('d', #S), unpack(S)), 'PX', ttl)
end

