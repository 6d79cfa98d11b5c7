-- BillingStore::check_and_reserve (B1, B3, B7): Ledger::admit, on one books.
-- KEYS[1]  the attempt   KEYS[2] the tenant (KEYS[1] when none: never read)
-- KEYS[3]  the key's spend   KEYS[4] the books' open attempts   KEYS[5] the books' pending
-- KEYS[6..] the budgets, in request order
-- ARGV     [1] time (see time.lua), [2] bill the balance (0/1), [3] has a tenant (0/1),
--          [4] spend cap ('' = none), [5] money upper bound (>= 0), [6] budget ttl ms
--          (0 = none), [7] attempt lifetime ms, [8] tenant record expected (0/1), [9] the
--          books' key base, [10] attempt id, then per budget from [11]: limit, period ms
--          (-1 = none), then the subject key (kept with the attempt for reconciliation),
--          then optionally a mode: 'f' reserve without checks (an attempt admitted from a
--          quota block, whose block already holds its money, going pending), or
--          'h<money>' a quota block (portcullis_core::blocks): admitted only with that much
--          room left beyond it on the balance (less pending) and under the spend cap, both
--          also less what other blocks still hold (field `blk` of the tenant and of the
--          key's spend, raised here, lowered when the block's attempt leaves `open`)
-- Reply    {swept, 1} admitted (or the attempt is open or pending: nothing is reserved
--          twice)   {swept, 0, 1} balance <= 0   {swept, 0, 2} spend cap reached
--          {swept, 0, 3, i} budget i is short   {swept, 0, 4} tenant record missing
--          (swept: open attempts swept into pending reconciliation first)
local now = now_ms(ARGV[1])
local att = KEYS[1]
local swept = sweep(ARGV[9], KEYS[4], KEYS[5], now, ARGV[6])
if type(swept) ~= 'number' then return swept end
if redis.call('EXISTS', att) == 1 then return {swept, 1} end
local bill, has_tenant = ARGV[2] == '1', ARGV[3] == '1'
local nb = #KEYS - 5
local mode = ARGV[12 + 2 * nb] or ''
local force, head = mode == 'f', 0
if mode:sub(1, 1) == 'h' then head = tonumber(mode:sub(2)) end
local block = mode:sub(1, 1) == 'h'
if bill and not force then
  if has_tenant then
    if ARGV[8] == '1' and redis.call('EXISTS', KEYS[2]) == 0 then return {swept, 0, 4} end
    local held = 0
    if block then held = get(KEYS[2], 'blk') or 0 end
    if (get(KEYS[2], 'bal') or 0) - (get(KEYS[2], 'pend') or 0) - held <= head then
      return {swept, 0, 1}
    end
  end
  if ARGV[4] ~= '' then
    local held = 0
    if block then held = get(KEYS[3], 'blk') or 0 end
    if (get(KEYS[3], 'spent') or 0) + (get(KEYS[3], 'pend') or 0) + held + head
        >= tonumber(ARGV[4]) then
      return {swept, 0, 2}
    end
  end
end
local money = tonumber(ARGV[5])
for i = 1, nb do
  local bk = KEYS[5 + i]
  roll(bk, tonumber(ARGV[10 + 2 * i]), now)
  if not force and (get(bk, 'spent') or 0) + (get(bk, 'res') or 0) + money
      > tonumber(ARGV[9 + 2 * i]) then
    -- A refusal changes nothing (the rolls above stay in the buffer).
    return {swept, 0, 3, i}
  end
end
-- A block's money counts against the checks of later blocks until it leaves `open`.
if block and bill then
  if has_tenant then add(KEYS[2], 'blk', money) end
  add(KEYS[3], 'blk', money)
end
local budgets = {}
for i = 1, nb do
  local bk = KEYS[5 + i]
  if not get(bk, 'start') then put(bk, 'start', now) end
  add(bk, 'res', money)
  budgets[#budgets + 1] = bk
  budgets[#budgets + 1] = ARGV[10 + 2 * i]
end
local err = commit()
if err then return err end
if ARGV[6] ~= '0' then
  for i = 1, nb do redis.call('PEXPIRE', KEYS[5 + i], ARGV[6]) end
end
local life = tonumber(ARGV[7])
local deadline = now + life
local rec = {'s', 'o', 'm', ARGV[5], 'd', deadline}
local subject = ARGV[11 + 2 * nb]
if subject then
  rec[#rec + 1] = 'k'
  rec[#rec + 1] = subject
end
if bill then
  if has_tenant then
    rec[#rec + 1] = 'tk'
    rec[#rec + 1] = KEYS[2]
  end
  rec[#rec + 1] = 'kk'
  rec[#rec + 1] = KEYS[3]
end
if block and bill then
  rec[#rec + 1] = 'h'
  rec[#rec + 1] = '1'
end
if nb > 0 then
  rec[#rec + 1] = 'b'
  rec[#rec + 1] = cjson.encode(budgets)
end
-- Open: kept two lifetimes, so the sweep finds it for one lifetime after its deadline
-- (on real time; the sweep judges the deadline on the scripts' time).
local keep = 2 * life
if keep < 1000 then keep = 1000 end
redis.call('HSET', att, unpack(rec))
redis.call('PEXPIRE', att, keep)
redis.call('ZADD', KEYS[4], deadline, ARGV[10])
local ttl = redis.call('PTTL', KEYS[4])
if ttl < keep then redis.call('PEXPIRE', KEYS[4], keep) end
return {swept, 1}
