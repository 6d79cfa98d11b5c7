-- WindowStore::settle (W5, W6, L5): ScopeState::settle. Corrections go only to the windows
-- the request was counted in; a window that rolled (or a group that re-anchored) since is
-- left alone. Keyed (D9): with a member, only an admission whose record is found is
-- settled, once; the record goes with it.
-- ARGV[1]  time (see time.lua)
-- ARGV[2]  doubles: [1] amount ttl ms, [2] admitted_at, [3..5] anchors (-1 = none),
--          [6] tokens, [7] images, [8] videos (the reserved demand), [9] amount (0/1),
--          [10] money, [11] rolling (0/1), [12] refund (0/1), [13] actual tokens, [14] cost,
--          optionally [15] requests reserved (a quota block's; default 1), [16] requests
--          used of them, [17] a block's tokens, [18] requests handed over: a block given
--          back with that many of its requests still in flight (counted as used) leaves
--          a record for each, `<its record>:h0` ..., under which they settle later
--          An undo (a call whose answer never came) has [2] = -1, anchors -2 for a group
--          it would have counted, and the block it asked for in [15] and [17]: the
--          record says when it was admitted and whether as the block or alone.
-- ARGV[3]  the admission record's member; absent: settled unkeyed
-- Reply    1 settled, 0 no record (settled before, or never counted), -1 a handed
--          request's record not there yet: its block's hand-over has not landed (send
--          it again)
local now = now_ms(ARGV[1])
local B = doubles(ARGV[2])
local at, tok, img, vid = B[2], B[6], B[7], B[8]
local rq = B[15] or 1
local ru = B[16] or rq
local undo = at < 0
local refund = B[12] == 1
local m = ARGV[3]
if m then
  local sc = redis.call('ZSCORE', KEYS[3], m)
  if not sc and undo then
    m = m .. ':b'
    sc = redis.call('ZSCORE', KEYS[3], m)
    if sc then tok = B[17] or tok else rq = 1 end
  elseif undo then
    rq = 1
  end
  if not sc then
    local block = string.match(m, '^(.*):h%d+$')
    if block and redis.call('ZSCORE', KEYS[3], block) then return -1 end
    return 0
  end
  redis.call('ZREM', KEYS[3], m)
  for k = 0, (B[18] or 0) - 1 do
    redis.call('ZADD', KEYS[3], sc, m .. ':h' .. k)
  end
  if undo then at, ru = tonumber(sc), 0 end
elseif undo then
  return 0
end
local S = load_state(KEYS[1])
for so = 11, 10 + 4 * S[10], 4 do
  local d = S[so]
  local g, reserved = 1, rq
  if d == 2 then reserved = tok elseif d == 3 then g, reserved = 2, img
  elseif d == 4 then g, reserved = 3, vid end
  local a = B[2 + g]
  local counted = a >= 0 and S[6 + g] == a
  if a == -2 then
    -- An undo: counted in the group's anchor if it is not younger than the admission
    -- (a group re-anchors only once nothing of it is in a current window).
    a = S[6 + g]
    counted = a >= 0 and a <= at
  end
  if counted then
    local w = S[so + 1]
    local k, kn = 0, 0
    if at > a then k = floor((at - a) / w) end
    if now > a then kn = floor((now - a) / w) end
    if S[so + 2] == k and kn == k then
      local actual = reserved
      if refund then actual = 0 elseif d == 2 then actual = B[13] elseif d == 1 then actual = ru end
      local u = S[so + 3] - reserved
      if u < 0 then u = 0 end
      S[so + 3] = u + actual
    end
  end
end
if B[9] == 1 then
  local rs = S[4] - B[10]
  if rs < 0 then rs = 0 end
  S[4] = rs
  if not refund and B[14] > 0 then S[3] = S[3] + B[14] end
end
if S[2] > 0 then S[2] = S[2] - 1 end
if B[11] == 1 and refund and S[6] > now then
  -- The refunded request's start leaves the rolling log (one entry of that time).
  local m = redis.call('ZRANGEBYSCORE', KEYS[2], at, at, 'LIMIT', 0, 1)
  if m[1] then redis.call('ZREM', KEYS[2], m[1]) end
end
save(KEYS[1], S, now, B[1], false)
return 1
