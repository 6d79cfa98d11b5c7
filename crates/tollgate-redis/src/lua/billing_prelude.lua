-- tollgate billing: tollgate_core::billing::Ledger in Lua (B1-B4). Each billing script is
-- time.lua, this prelude and one operation. The decisions are the Ledger's, rule for rule
-- (the conformance suite and a differential test against the in-memory store hold them to
-- it).
--
-- Every billing key carries the same hash tag, so each script stays on one Cluster slot
-- (see RedisStore's docs):
--   tenant   HASH  bal (balance), pend (pending reconciliation)           no expiry
--   key      HASH  spent (key spend), pend (pending reconciliation)       no expiry
--   budget   HASH  start (period anchor, absent = no period started), spent (in the current
--                  period), res (reserved by open and pending attempts)   budget ttl after
--                                                                          its last change
--   attempt  HASH  s (o open, p pending, d settled, r refunded), m (money upper bound),
--                  c (cost), f (finished at, ms), tk / kk (tenant / key-spend key, only when
--                  billed to the balance), b (JSON list: budget key, period ms or -1, ...)
--                  expires the attempt memory after it is final; open or pending: never
--   pending  HASH  attempt id -> amount pending reconciliation (the reconciliation work list)
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
local FIELDS = {'bal', 'pend', 'spent', 'res', 'start'}
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
        return redis.error_reply('tollgate billing: ' .. f .. ' of ' .. key ..
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

-- Ledger::forget_old: a final attempt is forgotten once the attempt memory has passed since
-- it finished (on the scripts' time; the key's expiry, on the server's clock, collects it).
local function forgotten(state, finished, now, memory)
  return (state == 'd' or state == 'r') and tonumber(finished) + memory <= now
end

