-- BillingStore::seed_balance: Ledger::seed_balance. A tenant that already has books (a
-- balance or pending money) keeps them: seeding from configuration never resets a running
-- balance.
-- KEYS[1]  the tenant   ARGV[1] amount (an exact integer, checked by the caller)
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'bal', ARGV[1])
end
return 1
