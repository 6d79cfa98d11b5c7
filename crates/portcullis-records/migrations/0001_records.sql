-- The gateway's records: tenants, client keys and their secrets (hashes only),
-- tenant-scoped management tokens (hashes only), and the audit trail.
--
-- Portable SQL: the same text runs on SQLite and PostgreSQL. Times are milliseconds
-- since the Unix epoch (BIGINT); the settings a key or tenant carries are a JSON text
-- (`spec`), validated by the gateway before it is written.
--
-- Every change takes the next number of `pcx_revision` in its transaction and stamps the
-- rows it writes with it. Taking the number locks that one row, so changes commit in the
-- order of their numbers, and an instance that has read everything up to revision N
-- catches up by reading the rows stamped above N.

CREATE TABLE pcx_revision (
    id INTEGER PRIMARY KEY,
    revision BIGINT NOT NULL
);
INSERT INTO pcx_revision (id, revision) VALUES (1, 0);

CREATE TABLE pcx_tenants (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    revision BIGINT NOT NULL
);
CREATE INDEX pcx_tenants_revision ON pcx_tenants (revision);

CREATE TABLE pcx_keys (
    id TEXT PRIMARY KEY,
    tenant TEXT,
    label TEXT NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    expires_at BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    revision BIGINT NOT NULL
);
CREATE INDEX pcx_keys_tenant ON pcx_keys (tenant, id);
CREATE INDEX pcx_keys_revision ON pcx_keys (revision);

-- A key's secrets: the current one (valid_until NULL) and, after a rotation, the old one
-- until its grace ends.
CREATE TABLE pcx_key_secrets (
    hash TEXT PRIMARY KEY,
    key_id TEXT NOT NULL,
    valid_until BIGINT,
    revision BIGINT NOT NULL
);
CREATE INDEX pcx_key_secrets_key ON pcx_key_secrets (key_id);
CREATE INDEX pcx_key_secrets_revision ON pcx_key_secrets (revision);

CREATE TABLE pcx_tokens (
    hash TEXT PRIMARY KEY,
    id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    revision BIGINT NOT NULL
);
CREATE INDEX pcx_tokens_revision ON pcx_tokens (revision);

-- One row per change: its revision, when, which token (by its name, never its secret),
-- what was done to what, and the fields written.
CREATE TABLE pcx_audit (
    revision BIGINT PRIMARY KEY,
    at BIGINT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail TEXT NOT NULL
);
