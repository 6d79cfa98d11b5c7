-- portcullis billing: portcullis_core::billing::Ledger in Lua (B1-B4). Each billing script is
-- time.lua, this prelude and one operation. The decisions are the Ledger's, rule for rule
-- (the conformance suite and a differential test against the in-memory store hold them to
-- it).
--
-- Keys are kept per books (D3): a tenant's books, or a tenant-less key's, all under one hash
-- tag, so each script stays on one Cluster slot and tenants spread over the nodes
-- (see RedisStore's docs). Under the books' base <prefix>:{tenant:<t>}:billing: (or
-- <prefix>:{<key>}:keybilling:):
--   tenant       HASH  bal (balance), pend (pending reconciliation)         no expiry
--   key:<k>      HASH  spent (key spend), pend (pending reconciliation)     no expiry
--   budget:<id>  HASH  start (period anchor, absent = no period started), spent (in the
--                      current period), res (reserved by open and pending attempts)
--                                                            budget ttl after its last change
--   attempt:<id> HASH  s (o open, p pending), m (money upper bound), d (deadline, ms), rel
--                      (1: budgets released by the sweep), tk / kk (tenant / key-spend key,
--                      only when billed to the balance), b (JSON list: budget key, period ms
--                      or -1, ...), k (the subject key), ps (when it went pending, ms)
--                      open: expires two lifetimes after its reservation; pending: never;
--                      settled or refunded: deleted
--   open         ZSET  attempt id -> deadline (the sweep's work list)  as long as its newest
--                                                                       attempt record
--   pending      HASH  attempt id -> amount pending reconciliation (the work list), and the
--                      books' pending counter (B7, whoever pays) in two fields no attempt id
--                      is named: "\0n" attempts, "\0m" their money (read by the metrics
--                      instead of the list)   no expiry; empty = gone
--
-- Money: decimal integer strings (readable with redis-cli, HINCRBY-compatible). Arithmetic
-- runs on Lua numbers (doubles), exact for integers within +-(2^53 - 1); a script that would
-- store a value outside that range stores nothing and fails (the caller fails closed).
-- Limits (spend caps, budget limits) are only compared, never stored: any i64 works.
--
-- Reads go through a per-call cache (one HMGET per hash), writes through a buffer that is
-- checked as a whole and then written (HSET / HDEL per hash), so a failing script changes
-- nothing and a hash named twice (a budget listed twice) behaves as in the Ledger.

local floor = math.floor
local EXACT = 9007199254740991 -- 2^53 - 1
local FIELDS = {'bal', 'pend', 'spent', 'res', 'start', 'blk'}
local cache, dirty, order = {}, {}, {}

local function cached(key)
  local c = cache[key]
  if not c then
    c = {}
    local v = redis.call('HMGET', key, unpack(FIELDS))
    for i = 1, #FIELDS do
      if v[i] then c[FIELDS[i]] = tonumber(v[i]) end
    end
    cache[key] = c
  end
  return c
end

-- A field's value, nil when absent.
local function get(key, field)
  return cached(key)[field]
end

-- Sets a field (nil removes it).
local function put(key, field, v)
  cached(key)[field] = v
  local d = dirty[key]
  if not d then
    d = {}
    dirty[key] = d
    order[#order + 1] = key
  end
  d[field] = true
end

local function add(key, field, v)
  put(key, field, (get(key, field) or 0) + v)
end

-- Writes every buffered change; writes nothing and returns an error reply when a value
-- would leave the exact range.
local function commit()
  for _, key in ipairs(order) do
    local c = cache[key]
    for f in pairs(dirty[key]) do
      local v = c[f]
      if v and not (v >= -EXACT and v <= EXACT) then
        return redis.error_reply('portcullis billing: ' .. f .. ' of ' .. key ..
          ' would leave the exact integer range (|x| <= 2^53 - 1); nothing was changed')
      end
    end
  end
  for _, key in ipairs(order) do
    local c = cache[key]
    local set, del = {}, {}
    for f in pairs(dirty[key]) do
      local v = c[f]
      if v then
        -- A Lua number given to redis.call is sent as its exact integer text (below 2^53).
        set[#set + 1] = f
        set[#set + 1] = v
      else
        del[#del + 1] = f
      end
    end
    if #set > 0 then redis.call('HSET', key, unpack(set)) end
    if #del > 0 then redis.call('HDEL', key, unpack(del)) end
  end
  dirty, order = {}, {}
  return nil
end

-- BudgetState::roll: a period that has ended moves on by whole periods from its anchor;
-- spend starts again, reservations carry over. A period <= 0 (or none, -1) never rolls.
local function roll(key, period, now)
  if period <= 0 then return end
  local start = get(key, 'start')
  if start and now >= start + period then
    put(key, 'start', start + floor((now - start) / period) * period)
    put(key, 'spent', 0)
  end
end

-- BudgetState::release: gives back a reservation; a period only it had started has not
-- started (L5), judged on the current period (rolled first).
local function release(key, period, money, now)
  local r = (get(key, 'res') or 0) - money
  if r < 0 then r = 0 end
  put(key, 'res', r)
  roll(key, period, now)
  if r == 0 and (get(key, 'spent') or 0) == 0 then put(key, 'start', nil) end
end

-- PendingTotal::add / remove (B7): the books' pending counter, kept in the pending list's
-- fields "\0n" (attempts) and "\0m" (money), moves by `n` attempts and `money`; never below
-- zero (an attempt gone pending before the counter existed is not in it), its fields removed
-- when nothing is pending (so an empty list is gone). Written at once (outside the buffer):
-- call it after commit().
local PEND_N, PEND_M = '\0n', '\0m'
local function count_pending(key, n, money)
  local v = redis.call('HMGET', key, PEND_N, PEND_M)
  local cn = (tonumber(v[1]) or 0) + n
  if cn <= 0 then
    redis.call('HDEL', key, PEND_N, PEND_M)
    return
  end
  local cm = (tonumber(v[2]) or 0) + money
  if cm < 0 then cm = 0 end
  redis.call('HSET', key, PEND_N, cn, PEND_M, cm)
end

-- Book::sweep (B7): up to SWEEP_BATCH open attempts past their deadline (deadline <= now,
-- oldest first, ties by id) become pending reconciliation with their budget reservations
-- released. Committed at once (a refusal after it keeps it, as in the Ledger). Returns how
-- many, or an error reply.
local SWEEP_BATCH = 16
local function sweep(base, openk, pendk, now, budget_ttl)
  local ids = redis.call('ZRANGEBYSCORE', openk, '-inf', now, 'LIMIT', 0, SWEEP_BATCH)
  if #ids == 0 then return 0 end
  local swept, touched = {}, {}
  for _, id in ipairs(ids) do
    local ak = base .. 'attempt:' .. id
    local A = redis.call('HMGET', ak, 's', 'm', 'tk', 'kk', 'b', 'h')
    if A[1] == 'o' then
      local money = tonumber(A[2])
      if A[3] then add(A[3], 'pend', money) end
      if A[4] then add(A[4], 'pend', money) end
      if A[6] == '1' then
        -- A quota block's money: pending now, no longer held against later blocks.
        if A[3] then add(A[3], 'blk', -money) end
        if A[4] then add(A[4], 'blk', -money) end
      end
      if A[5] then
        local B = cjson.decode(A[5])
        for i = 1, #B, 2 do
          release(B[i], tonumber(B[i + 1]), money, now)
          touched[#touched + 1] = B[i]
        end
      end
      swept[#swept + 1] = {id, ak, A[2]}
    end
  end
  local err = commit()
  if err then return err end
  redis.call('ZREM', openk, unpack(ids))
  if budget_ttl ~= '0' then
    for _, bk in ipairs(touched) do redis.call('PEXPIRE', bk, budget_ttl) end
  end
  for _, s in ipairs(swept) do
    redis.call('HSET', s[2], 's', 'p', 'rel', '1', 'ps', now)
    redis.call('PERSIST', s[2])
    redis.call('HSET', pendk, s[1], s[3])
    count_pending(pendk, 1, tonumber(s[3]))
  end
  return #swept
end
