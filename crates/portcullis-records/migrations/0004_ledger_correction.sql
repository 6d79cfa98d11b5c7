-- A later provider report corrects an automatic charge exactly once (B7).
--
-- An attempt charged by the gateway on its own evidence — what a stream cut by the client
-- or the upstream had streamed (`resolved_by = 'streamed'`), or its upper bound when
-- nothing answered in time (`'upper_bound'`) — may later be priced by its provider's own
-- report. The row keeps its first charge (`amount`) and gains the correction beside it:
-- `correction` the signed difference (new cost − amount), `corrected_by` its evidence
-- (`provider`), `corrected_at` when (ms). Written once (`WHERE correction IS NULL`); the
-- money an attempt cost is `amount + COALESCE(correction, 0)` in every sum.
--
-- The rows a resolver may still correct are read by time: automatic, naming a provider
-- object, not corrected yet. The partial index keeps that read small.

ALTER TABLE pcx_ledger ADD COLUMN correction BIGINT;
ALTER TABLE pcx_ledger ADD COLUMN corrected_by TEXT;
ALTER TABLE pcx_ledger ADD COLUMN corrected_at BIGINT;
CREATE INDEX pcx_ledger_correctable ON pcx_ledger (at, attempt)
    WHERE correction IS NULL AND provider_object IS NOT NULL
        AND resolved_by IN ('streamed', 'upper_bound');
