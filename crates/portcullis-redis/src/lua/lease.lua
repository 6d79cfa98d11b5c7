-- Leases (C1, C4, D5), shared by the scripts that take one: a lease ZSET holds one member
-- per lease, score = its expiry in ms; a lease whose expiry is at or before now no longer
-- counts. (Lua numbers passed to redis.call are sent as exact integers below 2^53.)

-- Purges the expired leases of `key`; returns how many are live.
local function live_leases(key, now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  return redis.call('ZCARD', key)
end

-- Adds lease `member` to `key`, which held `n` live leases, expiring at now + ttl. The key
-- outlives its longest lease by 1 s, so a crashed holder leaves nothing behind; a key with
-- leases already has an expiry: only ever extend it.
local function keep(key, ttl, n)
  if n == 0 then
    redis.call('PEXPIRE', key, ttl + 1000)
  else
    redis.call('PEXPIRE', key, ttl + 1000, 'GT')
  end
end

local function add_lease(key, now, ttl, member, n)
  redis.call('ZADD', key, now + ttl, member)
  keep(key, ttl, n)
end

-- How many leases a quota block (portcullis_core::blocks) of `want` may take of `key`'s
-- `limit` (0 = unlimited) with `n` live: the block where it fits, else 1 (one lease, as
-- without a block), 0 when every slot is taken.
local function grant(n, limit, want)
  if limit ~= 0 and n >= limit then return 0 end
  if want > 1 and (limit == 0 or n + want <= limit) then return want end
  return 1
end

-- Adds `count` leases to `key` (which held `n`), expiring at now + ttl: one lease
-- `member`, or a block of members `member:0` .. `member:<count - 1>`.
local function add_leases(key, now, ttl, member, n, count)
  if count <= 1 then return add_lease(key, now, ttl, member, n) end
  local args, at = {}, now + ttl
  for i = 0, count - 1 do
    args[2 * i + 1] = at
    args[2 * i + 2] = member .. ':' .. i
  end
  redis.call('ZADD', key, unpack(args))
  keep(key, ttl, n)
end

-- The leases a call with lease `member` already holds in `key` — the same call run
-- twice (sent again after the connection its first answer came on was lost): 1 for a
-- lease, `want` for a quota block's (granted whole), 0 for none. The run again grants
-- what the first granted and takes nothing more (D9).
local function held(key, member, want)
  if redis.call('ZSCORE', key, member) then return 1 end
  if want > 1 and redis.call('ZSCORE', key, member .. ':0') then return want end
  return 0
end
