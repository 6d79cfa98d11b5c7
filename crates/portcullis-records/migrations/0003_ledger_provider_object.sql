-- The evidence an attempt left pending with an unknown outcome can be resolved from
-- (B7): the provider's object the answer named before it was cut — its path under the
-- channel's base URL, e.g. `/v1/responses/resp_…` or `/v1/chat/completions/chatcmpl-…`
-- — kept with the pending row so that any instance can ask the provider for it later.
-- Written with the pending row and never changed by its resolution.
--
-- The pending rows are read by the time they reached the ledger (`recorded_at`, which a
-- pending row keeps until it is resolved); the partial index keeps that read small
-- however long the ledger grows.

ALTER TABLE pcx_ledger ADD COLUMN provider_object TEXT;
CREATE INDEX pcx_ledger_pending ON pcx_ledger (recorded_at, attempt) WHERE outcome = 'pending';
