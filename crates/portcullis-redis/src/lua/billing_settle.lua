-- BillingStore::settle_attempt (B2, B4, L5, D10): Ledger::settle. Each attempt settles
-- once. A settled or refunded attempt is deleted and leaves a tombstone in the books'
-- `done` set for TOMBSTONE_MS (D7: what the set holds is bounded by the settlements of
-- that time): settling it again does nothing, and a retry (ARGV[7]) learns it is final.
-- KEYS[1]  the attempt   KEYS[2] the books' pending list (and counter)
-- KEYS[3]  the books' open attempts
-- KEYS[4]  the books' tombstones: ZSET, attempt id -> when it became final (ms)
-- ARGV     [1] time (see time.lua), [2] outcome: s settled, p pending, r refund, c a part
--          of a billing block still in use, [3] cost (>= 0; settled and parts only; a
--          block's is cumulative: what its parts charged already is not charged again), [4] budget ttl ms (0 = none), [5] attempt id, [6] '1': an
--          operator's reconciliation, for a pending attempt only (optional), [7] '1': a
--          retry after a try whose answer never came (optional)
-- Reply    {0} nothing done (unknown: never reserved, already final; pending again)
--          {1, cost} settled   {2, amount} pending   {3} refunded   {4} nothing done: open,
--          and only a pending attempt was to be reconciled
--          A retry answers an attempt already final as the outcome it repeats ({1, cost}
--          or {3}: the try that was carried out sent the same); one that finds nothing — the attempt was lost (a failover took
--          it before it was replicated), or its tombstone expired — is an unknown
--          outcome (D10): a settlement becomes pending reconciliation of its cost ({2,
--          cost}, listed, counted, marked `u`), never "settled"; a refund of nothing
--          holds nothing ({3}).
-- The tenant, key-spend and budget keys come from the attempt's record: they carry the same
-- hash tag as KEYS[1], hence the same slot.
local TOMBSTONE_MS = 120000
local now = now_ms(ARGV[1])
local att = KEYS[1]
local A = redis.call('HMGET', att, 's', 'm', 'tk', 'kk', 'b', 'rel', 'h', 'ch', 'u')
local st = A[1]
local retry = ARGV[7] == '1'
if not st then
  if not retry then return {0} end
  if redis.call('ZSCORE', KEYS[4], ARGV[5]) then
    if ARGV[2] == 's' then return {1, tonumber(ARGV[3])} end
    if ARGV[2] == 'r' then return {3} end
    return {0}
  end
  if ARGV[2] == 'r' then return {3} end
  local amount = tonumber(ARGV[3])
  redis.call('HSET', att, 's', 'p', 'm', amount, 'ps', now, 'u', '1')
  -- A tenant's books: pending against the tenant's balance, as any pending attempt,
  -- and charged there when an operator reconciles it (the key it was for is lost).
  local base = string.sub(att, 1, #att - #('attempt:' .. ARGV[5]))
  if string.sub(base, -9) == ':billing:' then
    local tk = base .. 'tenant'
    add(tk, 'pend', amount)
    local err = commit()
    if err then return err end
    redis.call('HSET', att, 'tk', tk)
  end
  redis.call('HSET', KEYS[2], ARGV[5], amount)
  count_pending(KEYS[2], 1, amount)
  return {2, amount}
end
local outcome = ARGV[2]
local was_pending = st == 'p'
if was_pending and outcome == 'p' then return {0} end
-- An unknown outcome (recorded by a retry that found nothing) is an operator's to
-- reconcile: a settlement sent again later (a first try's, kept for retries) must not
-- take it off the list without the charge it stands for.
if A[9] == '1' and ARGV[6] ~= '1' then return {2, tonumber(A[2])} end
if ARGV[6] == '1' and not was_pending then return {4} end
local money, tk, kk, released = tonumber(A[2]), A[3], A[4], A[6] == '1'
local B = {}
if A[5] then B = cjson.decode(A[5]) end
-- Charged by parts already (a billing block's).
local charged = tonumber(A[8]) or 0
if outcome == 'c' then
  -- A part of a block still in use: the costs of its ended requests so far (cumulative)
  -- are charged and released from the block's money, which stays open for the rest.
  if st ~= 'o' then return {0} end
  local part = tonumber(ARGV[3]) - charged
  if part <= 0 then return {0} end
  if part > money then part = money end
  if tk then add(tk, 'bal', -part) end
  if kk then add(kk, 'spent', part) end
  if A[7] == '1' then
    if tk then add(tk, 'blk', -part) end
    if kk then add(kk, 'blk', -part) end
  end
  for i = 1, #B, 2 do
    local bk = B[i]
    if not released then
      local r = (get(bk, 'res') or 0) - part
      if r < 0 then r = 0 end
      put(bk, 'res', r)
    end
    roll(bk, tonumber(B[i + 1]), now)
    if not get(bk, 'start') then put(bk, 'start', now) end
    add(bk, 'spent', part)
  end
  local err = commit()
  if err then return err end
  if ARGV[4] ~= '0' then
    for i = 1, #B, 2 do redis.call('PEXPIRE', B[i], ARGV[4]) end
  end
  redis.call('HSET', att, 'm', money - part, 'ch', charged + part)
  return {1, part}
end
-- A quota block leaving `open` no longer holds its money against later blocks.
if st == 'o' and A[7] == '1' then
  if tk then add(tk, 'blk', -money) end
  if kk then add(kk, 'blk', -money) end
end
-- Undo what "pending" counted.
if was_pending then
  if tk then add(tk, 'pend', -money) end
  if kk then add(kk, 'pend', -money) end
end
local reply, state
if outcome == 's' then
  local cost = tonumber(ARGV[3]) - charged
  if cost < 0 then cost = 0 end
  if tk then add(tk, 'bal', -cost) end
  if kk then add(kk, 'spent', cost) end
  for i = 1, #B, 2 do
    local bk = B[i]
    if not released then
      local r = (get(bk, 'res') or 0) - money
      if r < 0 then r = 0 end
      put(bk, 'res', r)
    end
    -- Charged to the period it settles in.
    roll(bk, tonumber(B[i + 1]), now)
    if not get(bk, 'start') then put(bk, 'start', now) end
    add(bk, 'spent', cost)
  end
  reply, state = {1, cost}, 'd'
elseif outcome == 'p' then
  if tk then add(tk, 'pend', money) end
  if kk then add(kk, 'pend', money) end
  -- Budgets keep the reservation.
  reply, state = {2, money}, 'p'
else
  if not released then
    for i = 1, #B, 2 do release(B[i], tonumber(B[i + 1]), money, now) end
  end
  reply, state = {3}, 'r'
end
local err = commit()
if err then return err end
if ARGV[4] ~= '0' then
  for i = 1, #B, 2 do redis.call('PEXPIRE', B[i], ARGV[4]) end
end
if was_pending then
  redis.call('HDEL', KEYS[2], ARGV[5])
  count_pending(KEYS[2], -1, -money)
end
redis.call('ZREM', KEYS[3], ARGV[5])
if state == 'p' then
  -- Reconciliation work: listed, never expires.
  redis.call('HSET', att, 's', 'p', 'ps', now)
  redis.call('PERSIST', att)
  redis.call('HSET', KEYS[2], ARGV[5], A[2])
  count_pending(KEYS[2], 1, money)
else
  -- Final: a tombstone, for retries of this settlement; the expired ones go.
  redis.call('DEL', att)
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - TOMBSTONE_MS)
  redis.call('ZADD', KEYS[4], now, ARGV[5])
  redis.call('PEXPIRE', KEYS[4], TOMBSTONE_MS)
end
return reply
