-- BillingStore::credit: Ledger::credit. Adds to the tenant's balance (a negative amount
-- debits it); returns the new balance.
-- KEYS[1]  the tenant   ARGV[1] amount
add(KEYS[1], 'bal', tonumber(ARGV[1]))
local err = commit()
if err then return err end
return get(KEYS[1], 'bal')
