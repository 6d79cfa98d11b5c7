-- BillingStore::seed_balance: Ledger::seed_balance. A tenant that already has a record (a
-- balance or pending money) keeps it: seeding from configuration never resets a running
-- balance.
-- KEYS[1]  the tenant   ARGV[1] amount (an exact integer, checked by the caller)
-- Reply    1 written, 0 kept
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'bal', ARGV[1])
  return 1
end
return 0
