-- The ledger: one row per billed attempt, every instance's in one table (B6, B7).
--
-- An attempt's row is written when its settlement is known (settled, refunded, or
-- pending reconciliation at its upper bound) and replaced once when a pending attempt is
-- resolved (settled or written off, and by what). The attempt id is the key: a record
-- written twice (a replay after a crash, a retried batch) changes nothing, and a
-- resolved row is never set back to pending.
--
-- Money is in minor units; times are milliseconds since the Unix epoch. `seq` orders
-- rows for paging (the time, then the attempt).

CREATE TABLE pcx_ledger (
    attempt TEXT PRIMARY KEY,
    at BIGINT NOT NULL,
    request_id TEXT,
    client_request_id TEXT,
    key_id TEXT NOT NULL,
    tenant TEXT,
    model TEXT,
    upstream_model TEXT,
    channel TEXT,
    input_tokens BIGINT,
    cached_input_tokens BIGINT,
    cache_write_tokens BIGINT,
    output_tokens BIGINT,
    images BIGINT,
    videos BIGINT,
    amount BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    resolved_by TEXT,
    billed_to_balance INTEGER NOT NULL,
    recorded_at BIGINT NOT NULL
);
CREATE INDEX pcx_ledger_at ON pcx_ledger (at, attempt);
CREATE INDEX pcx_ledger_tenant ON pcx_ledger (tenant, at, attempt);
CREATE INDEX pcx_ledger_key ON pcx_ledger (key_id, at, attempt);
