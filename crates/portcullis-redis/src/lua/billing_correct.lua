-- ReconcileStore::correct (B7): Ledger::correct. A closed attempt's charge corrected by a
-- later, better report, by a signed difference (new cost - charged), exactly once: the
-- tenant's balance down by it (when the balance paid), the key's spend up by it, each
-- budget's spend up by it (never below zero) while the period the charge fell in is still
-- current; then a marker of the correction, kept `keep` ms (on the store's time, and as
-- the key's own expiry, so what markers hold is bounded by the corrections of that time).
-- KEYS[1]  the marker   KEYS[2] the attempt's record (exists: open or pending)
-- KEYS[3]  the tenant (KEYS[4] again when no tenant pays: never read)
-- KEYS[4]  the key's spend   KEYS[5..] the budgets
-- ARGV     [1] time (see time.lua), [2] difference, [3] billed to the balance (0/1),
--          [4] has a tenant (0/1), [5] charged at (ms, store time), [6] keep (ms, > 0),
--          [7] budget ttl ms (0 = none), then per budget: period ms (-1 = none)
-- Reply    {1} applied   {0} already corrected: nothing done   {2} the attempt is still
--          open or pending: nothing done
local now = now_ms(ARGV[1])
local marked = tonumber(redis.call('GET', KEYS[1]))
if marked and marked > now then return {0} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {2} end
local d = tonumber(ARGV[2])
if ARGV[3] == '1' then
  if ARGV[4] == '1' then add(KEYS[3], 'bal', -d) end
  add(KEYS[4], 'spent', d)
end
local charged = tonumber(ARGV[5])
local touched = {}
for i = 1, #KEYS - 4 do
  local bk, p = KEYS[4 + i], tonumber(ARGV[7 + i])
  if redis.call('EXISTS', bk) == 1 then
    roll(bk, p, now)
    local start = get(bk, 'start')
    if start and start <= charged then
      local s = (get(bk, 'spent') or 0) + d
      if s < 0 then s = 0 end
      put(bk, 'spent', s)
      touched[#touched + 1] = bk
    end
  end
end
local err = commit()
if err then return err end
if ARGV[7] ~= '0' then
  for _, bk in ipairs(touched) do redis.call('PEXPIRE', bk, ARGV[7]) end
end
local keep = tonumber(ARGV[6])
redis.call('SET', KEYS[1], now + keep, 'PX', keep)
return {1}
