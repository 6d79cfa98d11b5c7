-- BillingStore::account: Ledger::account (the usage view). Read only.
-- KEYS[1]  the tenant (KEYS[2] when none: never read)   KEYS[2] the key's spend
-- KEYS[3..] the budgets
-- ARGV     [1] time (see time.lua), [2] has a tenant (0/1), then per budget: period ms
--          (-1 = none; 0 is none too: a zero period never rolls)
-- Reply    {balance, tenant pending, key spent, key pending, then per budget: spent in the
--          current period, reserved, period end (-1 = none)}
local now = now_ms(ARGV[1])
local out = {0, 0, 0, 0}
if ARGV[2] == '1' then
  out[1] = get(KEYS[1], 'bal') or 0
  out[2] = get(KEYS[1], 'pend') or 0
end
out[3] = get(KEYS[2], 'spent') or 0
out[4] = get(KEYS[2], 'pend') or 0
for i = 1, #KEYS - 2 do
  local bk, p = KEYS[2 + i], tonumber(ARGV[2 + i])
  -- Rolled in the cache only: a view writes nothing.
  roll(bk, p, now)
  out[#out + 1] = get(bk, 'spent') or 0
  out[#out + 1] = get(bk, 'res') or 0
  local start = get(bk, 'start')
  if p > 0 and start then out[#out + 1] = start + p else out[#out + 1] = -1 end
end
return out
