-- Settlements and releases of many requests in one call (D2, T3): each op runs as the
-- script it stands for would, in the order given, each with its own keys and arguments
-- (every op's keys on one Cluster slot with the others', see the store's batcher).
-- An op that fails is answered with its error; the others still run.
-- KEYS     every op's keys, in op order
-- ARGV     [1] number of ops, then per op: its code (ws: WindowStore::settle as
--          window_settle.lua, bs: BillingStore::settle_attempt as billing_settle.lua,
--          br: BillingStore::check_and_reserve as billing_reserve.lua, sent with the
--          settlements queued before it; zr: a lease release, ZREM key member; zm: a quota block's leases released,
--          ZREM key member:0 .. member:<n - 1>; zl: some of a quota block's leases,
--          ZREM key member:i for the indices given), its key count, its argument count,
--          its arguments
-- Reply    one reply per op, in order: what that op's own script would answer, or an
--          error reply
local ops = {
  ws = window_settle,
  bs = billing_settle,
  br = billing_reserve,
  -- A billing quota block, else the request alone: A[1], A[2] the block's key and
  -- argument counts, then the block's keys and arguments, then the request's.
  -- Reply {1, block reply} or {0, the request's reply}.
  bb = function(K, A)
    local nk, na = tonumber(A[1]), tonumber(A[2])
    local kb, ab, ks, as = {}, {}, {}, {}
    for j = 1, #K do if j <= nk then kb[j] = K[j] else ks[j - nk] = K[j] end end
    for j = 3, #A do if j - 2 <= na then ab[j - 2] = A[j] else as[j - 2 - na] = A[j] end end
    local r = billing_reserve(kb, ab)
    if type(r) == 'table' and r[2] == 1 then return {1, r} end
    local r2 = billing_reserve(ks, as)
    -- What the first call swept is counted with the second's (the registry is told).
    if type(r) == 'table' and type(r[1]) == 'number' and type(r2) == 'table'
        and type(r2[1]) == 'number' then
      r2[1] = r2[1] + r[1]
    end
    return {0, r2}
  end,
  zr = function(K, A) return redis.call('ZREM', K[1], A[1]) end,
  zl = function(K, A)
    local m = {}
    for i = 2, #A do m[i - 1] = A[1] .. ':' .. A[i] end
    return redis.call('ZREM', K[1], unpack(m))
  end,
  zm = function(K, A)
    local m = {}
    for i = 0, tonumber(A[2]) - 1 do m[i + 1] = A[1] .. ':' .. i end
    return redis.call('ZREM', K[1], unpack(m))
  end,
}
local out = {}
local ai, ki = 2, 1
for i = 1, tonumber(ARGV[1]) do
  local code, nk, na = ARGV[ai], tonumber(ARGV[ai + 1]), tonumber(ARGV[ai + 2])
  ai = ai + 3
  local K, A = {}, {}
  for j = 1, nk do
    K[j] = KEYS[ki]
    ki = ki + 1
  end
  for j = 1, na do
    A[j] = ARGV[ai]
    ai = ai + 1
  end
  local op = ops[code]
  if not op then
    out[i] = redis.error_reply('portcullis batch: unknown op ' .. tostring(code))
  else
    local ok, r = pcall(op, K, A)
    if not ok then
      out[i] = redis.error_reply('portcullis batch: ' .. tostring(r))
    else
      out[i] = r
    end
  end
end
return out
