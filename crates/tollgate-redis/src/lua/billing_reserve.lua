-- BillingStore::check_and_reserve (B1, B3): Ledger::admit.
-- KEYS[1]  the attempt   KEYS[2] the tenant (KEYS[1] when none: never read)
-- KEYS[3]  the key's spend   KEYS[4..] the budgets, in request order
-- ARGV     [1] time (see time.lua), [2] bill the balance (0/1), [3] has a tenant (0/1),
--          [4] spend cap ('' = none), [5] money upper bound (>= 0), [6] budget ttl ms
--          (0 = none), [7] attempt memory ms, then per budget from [8]: limit, period ms
--          (-1 = none)
-- Reply    {1} admitted (or the attempt is already known: nothing is reserved twice)
--          {0, 1} balance <= 0   {0, 2} spend cap reached   {0, 3, i} budget i is short
local now = now_ms(ARGV[1])
local att = KEYS[1]
local known = redis.call('HMGET', att, 's', 'f')
if known[1] then
  if not forgotten(known[1], known[2], now, tonumber(ARGV[7])) then return {1} end
  redis.call('DEL', att)
end
local bill, has_tenant = ARGV[2] == '1', ARGV[3] == '1'
if bill then
  if has_tenant and (get(KEYS[2], 'bal') or 0) - (get(KEYS[2], 'pend') or 0) <= 0 then
    return {0, 1}
  end
  if ARGV[4] ~= '' and
      (get(KEYS[3], 'spent') or 0) + (get(KEYS[3], 'pend') or 0) >= tonumber(ARGV[4]) then
    return {0, 2}
  end
end
local money = tonumber(ARGV[5])
local nb = #KEYS - 3
for i = 1, nb do
  local bk = KEYS[3 + i]
  roll(bk, tonumber(ARGV[7 + 2 * i]), now)
  if (get(bk, 'spent') or 0) + (get(bk, 'res') or 0) + money > tonumber(ARGV[6 + 2 * i]) then
    -- A refusal changes nothing (the rolls above stay in the buffer).
    return {0, 3, i}
  end
end
local budgets = {}
for i = 1, nb do
  local bk = KEYS[3 + i]
  if not get(bk, 'start') then put(bk, 'start', now) end
  add(bk, 'res', money)
  budgets[#budgets + 1] = bk
  budgets[#budgets + 1] = ARGV[7 + 2 * i]
end
local err = commit()
if err then return err end
if ARGV[6] ~= '0' then
  for i = 1, nb do redis.call('PEXPIRE', KEYS[3 + i], ARGV[6]) end
end
local rec = {'s', 'o', 'm', ARGV[5]}
if bill then
  if has_tenant then
    rec[#rec + 1] = 'tk'
    rec[#rec + 1] = KEYS[2]
  end
  rec[#rec + 1] = 'kk'
  rec[#rec + 1] = KEYS[3]
end
if nb > 0 then
  rec[#rec + 1] = 'b'
  rec[#rec + 1] = cjson.encode(budgets)
end
-- Open: no expiry (its reservation stays until it is settled).
redis.call('HSET', att, unpack(rec))
return {1}
