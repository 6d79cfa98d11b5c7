//! The database: SQLite (the embedded default) or PostgreSQL, through sqlx's `Any`
//! driver and one set of portable statements.
//!
//! Every write is one transaction that takes the next revision first (see the migration's
//! header), writes its rows stamped with it, writes its audit row, and — on PostgreSQL —
//! sends a notification on [`CHANNEL`] that is delivered when it commits. Reads for
//! serving go through [`Records::changes_since`] only; the admin API's reads (one key, a
//! page of keys) read the database itself, so they show what is written.

use crate::replica::Changes;
use crate::secret::{Digest, Hasher, Secret, new_id};
use crate::spec::{
    Invalid, KeyRecord, KeySpec, KeyState, Millis, SecretRecord, TenantRecord, TenantSpec,
    TokenRecord, check_key, check_tenant,
};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{Any, AnyPool, Row, Transaction};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The PostgreSQL notification channel changes are announced on (the payload is the
/// revision).
pub const CHANNEL: &str = "portcullis_records";

/// The migrations this build knows, applied at open.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Which database a URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite://PATH`.
    Sqlite,
    /// `postgres://…` or `postgresql://…`.
    Postgres,
}

impl Backend {
    /// The backend of `url`, or why it names none.
    pub fn of(url: &str) -> Result<Self, String> {
        if url.starts_with("sqlite:") {
            Ok(Self::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres)
        } else {
            Err(format!(
                "database url {:?}: expected sqlite://PATH or postgres://…",
                redact_url(url)
            ))
        }
    }
}

/// A URL as logs and errors show it: without its password.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:<redacted>{}", &url[..s + 3], &creds[..c], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Why a records call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordsError {
    /// The database does not answer (down, unreachable, out of connections): a 503 —
    /// retry later. Nothing was written.
    Unavailable(String),
    /// No such record (or one of another tenant, seen through a tenant's token).
    NotFound,
    /// A record of that name exists already.
    Conflict(String),
    /// A field breaks a rule: a 400 naming it.
    Invalid(Invalid),
    /// The database cannot be used by this build (a newer schema, a failed migration,
    /// a file that is not a database).
    Schema(String),
}

impl fmt::Display for RecordsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unavailable(m) => write!(f, "the database is unavailable: {m}"),
            Self::NotFound => f.write_str("not found"),
            Self::Conflict(m) => f.write_str(m),
            Self::Invalid(i) => write!(f, "{}: {}", i.field, i.reason),
            Self::Schema(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for RecordsError {}

impl From<Invalid> for RecordsError {
    fn from(i: Invalid) -> Self {
        Self::Invalid(i)
    }
}

pub(crate) fn db_err(e: sqlx::Error) -> RecordsError {
    match &e {
        sqlx::Error::Database(d) if d.is_unique_violation() => {
            RecordsError::Conflict("a record of that name exists already".into())
        }
        sqlx::Error::Database(_) | sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
            RecordsError::Schema(format!("the database answered an error: {e}"))
        }
        _ => RecordsError::Unavailable(e.to_string()),
    }
}

/// A key to create.
#[derive(Clone, Debug, Default)]
pub struct NewKey {
    /// A name for people.
    pub label: String,
    /// Its tenant.
    pub tenant: Option<String>,
    /// Its settings.
    pub spec: KeySpec,
    /// When it stops working (ms).
    pub expires_at: Option<Millis>,
}

/// One change, as the audit trail keeps it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AuditRow {
    /// The revision of the change.
    pub revision: u64,
    /// When (ms).
    pub at: Millis,
    /// Which token: `admin`, `token:<id>` or `cli`.
    pub actor: String,
    /// What was done (`key.create`, `key.rotate`, …).
    pub action: String,
    /// To what (a key id, a tenant name).
    pub target: String,
    /// The fields written, as JSON (never a secret).
    pub detail: String,
}

/// Most keys a page holds.
pub const PAGE_MAX: u32 = 500;

/// The records of one database.
pub struct Records {
    pool: AnyPool,
    backend: Backend,
    url: String,
    hasher: Hasher,
    calls: AtomicU64,
}

impl fmt::Debug for Records {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Records")
            .field("url", &redact_url(&self.url))
            .field("backend", &self.backend)
            .finish()
    }
}

pub(crate) fn ms(v: i64) -> Millis {
    u64::try_from(v).unwrap_or(0)
}

pub(crate) fn sql_ms(v: Millis) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn key_row(r: &AnyRow) -> Result<KeyRecord, sqlx::Error> {
    let spec: String = r.try_get("spec")?;
    Ok(KeyRecord {
        id: r.try_get("id")?,
        tenant: r.try_get("tenant")?,
        label: r.try_get("label")?,
        spec: serde_json::from_str(&spec).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        expires_at: r.try_get::<Option<i64>, _>("expires_at")?.map(ms),
        state: KeyState::parse(&r.try_get::<String, _>("state")?),
        created_at: ms(r.try_get("created_at")?),
        updated_at: ms(r.try_get("updated_at")?),
        revision: ms(r.try_get("revision")?),
    })
}

fn tenant_row(r: &AnyRow) -> Result<TenantRecord, sqlx::Error> {
    let spec: String = r.try_get("spec")?;
    Ok(TenantRecord {
        name: r.try_get("name")?,
        spec: serde_json::from_str(&spec).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        created_at: ms(r.try_get("created_at")?),
        updated_at: ms(r.try_get("updated_at")?),
        revision: ms(r.try_get("revision")?),
    })
}

fn audit_row(r: &AnyRow) -> Result<AuditRow, sqlx::Error> {
    Ok(AuditRow {
        revision: ms(r.try_get("revision")?),
        at: ms(r.try_get("at")?),
        actor: r.try_get("actor")?,
        action: r.try_get("action")?,
        target: r.try_get("target")?,
        detail: r.try_get("detail")?,
    })
}

fn digest_of(hex: &str) -> Result<Digest, sqlx::Error> {
    Digest::from_hex(hex)
        .ok_or_else(|| sqlx::Error::Decode("a stored hash that is not 64 hex digits".into()))
}

const KEY_COLUMNS: &str =
    "id, tenant, label, spec, state, expires_at, created_at, updated_at, revision";

impl Records {
    /// Opens the database at `url` (an SQLite file is created if it does not exist),
    /// applies the migrations this build has that it lacks, and refuses a database whose
    /// schema is newer than this build knows.
    pub async fn open(url: &str, hasher: Hasher) -> Result<Self, RecordsError> {
        sqlx::any::install_default_drivers();
        let backend = Backend::of(url).map_err(RecordsError::Schema)?;
        let connect = match backend {
            Backend::Sqlite if !url.contains('?') => format!("{url}?mode=rwc"),
            _ => url.to_owned(),
        };
        let shown = redact_url(url);
        let pool = AnyPoolOptions::new()
            // A request to the admin API that finds the database away answers 503 within
            // this, instead of waiting for it.
            .acquire_timeout(Duration::from_secs(2))
            .max_connections(match backend {
                Backend::Sqlite => 1,
                Backend::Postgres => 8,
            })
            .connect(&connect)
            .await
            .map_err(|e| RecordsError::Unavailable(format!("opening {shown}: {e}")))?;
        MIGRATOR.run(&pool).await.map_err(|e| match e {
            sqlx::migrate::MigrateError::VersionMissing(v) => RecordsError::Schema(format!(
                "the database {shown} has schema version {v}, newer than this gateway knows \
                 (up to {}): run a newer portcullis against it",
                MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
            )),
            other => RecordsError::Schema(format!("migrating the database {shown}: {other}")),
        })?;
        Ok(Self {
            pool,
            backend,
            url: url.to_owned(),
            hasher,
            calls: AtomicU64::new(0),
        })
    }

    /// The database kind.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The URL, without its password.
    pub fn url(&self) -> String {
        redact_url(&self.url)
    }

    /// The URL as given (the change listener connects with it).
    pub(crate) fn raw_url(&self) -> &str {
        &self.url
    }

    /// The keyed hash secrets are stored under.
    pub fn hasher(&self) -> &Hasher {
        &self.hasher
    }

    /// How many calls reached the database so far (each read or write is one).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    pub(crate) fn count(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// The connection pool (the ledger's statements share it).
    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The latest revision written.
    pub async fn revision(&self) -> Result<u64, RecordsError> {
        self.count();
        let r: i64 = sqlx::query_scalar("SELECT revision FROM pcx_revision WHERE id = 1")
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(ms(r))
    }

    /// Every row written after revision `after`, up to the revision it returns.
    pub async fn changes_since(&self, after: u64) -> Result<Changes, RecordsError> {
        self.count();
        let after = sql_ms(after);
        let mut tx = self.pool.begin().await.map_err(db_err)?;
        let revision: i64 = sqlx::query_scalar("SELECT revision FROM pcx_revision WHERE id = 1")
            .fetch_one(&mut *tx)
            .await
            .map_err(db_err)?;
        let keys = sqlx::query(&format!(
            "SELECT {KEY_COLUMNS} FROM pcx_keys WHERE revision > $1 AND revision <= $2"
        ))
        .bind(after)
        .bind(revision)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
        let secrets = sqlx::query(
            "SELECT hash, key_id, valid_until, revision FROM pcx_key_secrets \
             WHERE revision > $1 AND revision <= $2",
        )
        .bind(after)
        .bind(revision)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
        let tenants = sqlx::query(
            "SELECT name, spec, created_at, updated_at, revision FROM pcx_tenants \
             WHERE revision > $1 AND revision <= $2",
        )
        .bind(after)
        .bind(revision)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
        let tokens = sqlx::query(
            "SELECT hash, id, tenant, state, revision FROM pcx_tokens \
             WHERE revision > $1 AND revision <= $2",
        )
        .bind(after)
        .bind(revision)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        let decode = || -> Result<Changes, sqlx::Error> {
            Ok(Changes {
                revision: ms(revision),
                keys: keys.iter().map(key_row).collect::<Result<_, _>>()?,
                secrets: secrets
                    .iter()
                    .map(|r| {
                        Ok(SecretRecord {
                            hash: digest_of(&r.try_get::<String, _>("hash")?)?,
                            key_id: r.try_get("key_id")?,
                            valid_until: r.try_get::<Option<i64>, _>("valid_until")?.map(ms),
                            revision: ms(r.try_get("revision")?),
                        })
                    })
                    .collect::<Result<_, sqlx::Error>>()?,
                tenants: tenants.iter().map(tenant_row).collect::<Result<_, _>>()?,
                tokens: tokens
                    .iter()
                    .map(|r| {
                        Ok(TokenRecord {
                            hash: digest_of(&r.try_get::<String, _>("hash")?)?,
                            id: r.try_get("id")?,
                            tenant: r.try_get("tenant")?,
                            state: KeyState::parse(&r.try_get::<String, _>("state")?),
                            revision: ms(r.try_get("revision")?),
                        })
                    })
                    .collect::<Result<_, sqlx::Error>>()?,
            })
        };
        decode().map_err(db_err)
    }

    /// Begins a change: a transaction holding the next revision.
    async fn begin(&self) -> Result<(Transaction<'static, Any>, i64), RecordsError> {
        self.count();
        let mut tx = self.pool.begin().await.map_err(db_err)?;
        let rev: i64 = sqlx::query_scalar(
            "UPDATE pcx_revision SET revision = revision + 1 WHERE id = 1 RETURNING revision",
        )
        .fetch_one(&mut *tx)
        .await
        .map_err(db_err)?;
        Ok((tx, rev))
    }

    /// Ends a change: its audit row, the notification (PostgreSQL), the commit.
    async fn finish(
        &self,
        mut tx: Transaction<'static, Any>,
        rev: i64,
        now: Millis,
        audit: (&str, &str, &str, String),
    ) -> Result<(), RecordsError> {
        let (actor, action, target, detail) = audit;
        sqlx::query(
            "INSERT INTO pcx_audit (revision, at, actor, action, target, detail) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(rev)
        .bind(sql_ms(now))
        .bind(actor)
        .bind(action)
        .bind(target)
        .bind(detail)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        if self.backend == Backend::Postgres {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(rev.to_string())
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)
    }

    /// Creates a key with a fresh secret; the secret is returned this once and only its
    /// hash is stored.
    pub async fn create_key(
        &self,
        actor: &str,
        new: NewKey,
        now: Millis,
    ) -> Result<(KeyRecord, Secret), RecordsError> {
        check_key(&new.label, new.tenant.as_deref(), &new.spec)?;
        let secret = Secret::new_key();
        let (mut tx, rev) = self.begin().await?;
        let record = KeyRecord {
            id: new_id("key_"),
            tenant: new.tenant,
            label: new.label,
            spec: new.spec,
            expires_at: new.expires_at,
            state: KeyState::Active,
            created_at: now,
            updated_at: now,
            revision: ms(rev),
        };
        write_key(&mut tx, &record, true).await?;
        write_secret(
            &mut tx,
            &self.hasher.digest(secret.expose()),
            &record.id,
            None,
            rev,
        )
        .await?;
        let detail = detail(&record);
        self.finish(tx, rev, now, (actor, "key.create", &record.id, detail))
            .await?;
        Ok((record, secret))
    }

    /// A key by id; with `scope`, only a key of that tenant (another's is `NotFound`).
    pub async fn key(&self, id: &str, scope: Option<&str>) -> Result<KeyRecord, RecordsError> {
        self.count();
        let row = sqlx::query(&format!("SELECT {KEY_COLUMNS} FROM pcx_keys WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?
            .ok_or(RecordsError::NotFound)?;
        let k = key_row(&row).map_err(db_err)?;
        in_scope(k, scope)
    }

    /// A page of keys in id order, after the id `after`; of one tenant with `tenant`.
    pub async fn keys(
        &self,
        tenant: Option<&str>,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<KeyRecord>, RecordsError> {
        self.count();
        let limit = i64::from(limit.clamp(1, PAGE_MAX));
        let after = after.unwrap_or("");
        let by_tenant = format!(
            "SELECT {KEY_COLUMNS} FROM pcx_keys WHERE tenant = $1 AND id > $2 ORDER BY id LIMIT $3"
        );
        let all = format!("SELECT {KEY_COLUMNS} FROM pcx_keys WHERE id > $1 ORDER BY id LIMIT $2");
        let rows = match tenant {
            Some(t) => sqlx::query(&by_tenant).bind(t).bind(after).bind(limit),
            None => sqlx::query(&all).bind(after).bind(limit),
        }
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(key_row)
            .collect::<Result<_, _>>()
            .map_err(db_err)
    }

    /// Changes a key: `patch` gets the record as stored (inside the change, so two
    /// changes never lose one another) and may refuse.
    pub async fn update_key(
        &self,
        actor: &str,
        id: &str,
        scope: Option<&str>,
        now: Millis,
        patch: impl FnOnce(&mut KeyRecord) -> Result<(), Invalid>,
    ) -> Result<KeyRecord, RecordsError> {
        let (mut tx, rev) = self.begin().await?;
        let mut k = in_scope(read_key(&mut tx, id).await?, scope)?;
        if k.state == KeyState::Revoked {
            return Err(RecordsError::Conflict(format!("key {id} is revoked")));
        }
        patch(&mut k)?;
        check_key(&k.label, k.tenant.as_deref(), &k.spec)?;
        k.updated_at = now;
        k.revision = ms(rev);
        write_key(&mut tx, &k, false).await?;
        let detail = detail(&k);
        self.finish(tx, rev, now, (actor, "key.update", id, detail))
            .await?;
        Ok(k)
    }

    /// Gives a key a new secret; the secrets it had open it until `now + grace`.
    pub async fn rotate_key(
        &self,
        actor: &str,
        id: &str,
        scope: Option<&str>,
        grace: Millis,
        now: Millis,
    ) -> Result<Secret, RecordsError> {
        let (mut tx, rev) = self.begin().await?;
        let mut k = in_scope(read_key(&mut tx, id).await?, scope)?;
        if k.state == KeyState::Revoked {
            return Err(RecordsError::Conflict(format!("key {id} is revoked")));
        }
        let until = sql_ms(now.saturating_add(grace));
        sqlx::query(
            "UPDATE pcx_key_secrets SET valid_until = $1, revision = $2 \
             WHERE key_id = $3 AND (valid_until IS NULL OR valid_until > $1)",
        )
        .bind(until)
        .bind(rev)
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        let secret = Secret::new_key();
        write_secret(&mut tx, &self.hasher.digest(secret.expose()), id, None, rev).await?;
        k.updated_at = now;
        k.revision = ms(rev);
        write_key(&mut tx, &k, false).await?;
        let detail = format!("{{\"grace_ms\":{grace}}}");
        self.finish(tx, rev, now, (actor, "key.rotate", id, detail))
            .await?;
        Ok(secret)
    }

    /// Revokes a key: refused from now on, on every instance once it has caught up.
    pub async fn revoke_key(
        &self,
        actor: &str,
        id: &str,
        scope: Option<&str>,
        now: Millis,
    ) -> Result<KeyRecord, RecordsError> {
        let (mut tx, rev) = self.begin().await?;
        let mut k = in_scope(read_key(&mut tx, id).await?, scope)?;
        k.state = KeyState::Revoked;
        k.updated_at = now;
        k.revision = ms(rev);
        write_key(&mut tx, &k, false).await?;
        self.finish(tx, rev, now, (actor, "key.revoke", id, "{}".into()))
            .await?;
        Ok(k)
    }

    /// Creates a tenant.
    pub async fn create_tenant(
        &self,
        actor: &str,
        name: &str,
        spec: TenantSpec,
        now: Millis,
    ) -> Result<TenantRecord, RecordsError> {
        check_tenant(name, &spec)?;
        let (mut tx, rev) = self.begin().await?;
        let t = TenantRecord {
            name: name.to_owned(),
            spec,
            created_at: now,
            updated_at: now,
            revision: ms(rev),
        };
        sqlx::query(
            "INSERT INTO pcx_tenants (name, spec, created_at, updated_at, revision) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&t.name)
        .bind(spec_json(&t.spec))
        .bind(sql_ms(now))
        .bind(sql_ms(now))
        .bind(rev)
        .execute(&mut *tx)
        .await
        .map_err(|e| match db_err(e) {
            RecordsError::Conflict(_) => {
                RecordsError::Conflict(format!("tenant {name:?} exists already"))
            }
            other => other,
        })?;
        let detail = spec_json(&t.spec);
        self.finish(tx, rev, now, (actor, "tenant.create", name, detail))
            .await?;
        Ok(t)
    }

    /// Changes a tenant's settings.
    pub async fn update_tenant(
        &self,
        actor: &str,
        name: &str,
        now: Millis,
        patch: impl FnOnce(&mut TenantSpec) -> Result<(), Invalid>,
    ) -> Result<TenantRecord, RecordsError> {
        let (mut tx, rev) = self.begin().await?;
        let row = sqlx::query(
            "SELECT name, spec, created_at, updated_at, revision FROM pcx_tenants WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_err)?
        .ok_or(RecordsError::NotFound)?;
        let mut t = tenant_row(&row).map_err(db_err)?;
        patch(&mut t.spec)?;
        check_tenant(name, &t.spec)?;
        t.updated_at = now;
        t.revision = ms(rev);
        sqlx::query(
            "UPDATE pcx_tenants SET spec = $1, updated_at = $2, revision = $3 WHERE name = $4",
        )
        .bind(spec_json(&t.spec))
        .bind(sql_ms(now))
        .bind(rev)
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        let detail = spec_json(&t.spec);
        self.finish(tx, rev, now, (actor, "tenant.update", name, detail))
            .await?;
        Ok(t)
    }

    /// Every tenant of the database, by name.
    pub async fn tenants(&self) -> Result<Vec<TenantRecord>, RecordsError> {
        self.count();
        let rows = sqlx::query(
            "SELECT name, spec, created_at, updated_at, revision FROM pcx_tenants ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(tenant_row)
            .collect::<Result<_, _>>()
            .map_err(db_err)
    }

    /// A new management token for `tenant`'s keys; the token is returned this once.
    pub async fn create_token(
        &self,
        actor: &str,
        tenant: &str,
        now: Millis,
    ) -> Result<(String, Secret), RecordsError> {
        let secret = Secret::new_token();
        let id = new_id("tok_");
        let (mut tx, rev) = self.begin().await?;
        sqlx::query(
            "INSERT INTO pcx_tokens (hash, id, tenant, state, created_at, revision) \
             VALUES ($1, $2, $3, 'active', $4, $5)",
        )
        .bind(self.hasher.digest(secret.expose()).to_hex())
        .bind(&id)
        .bind(tenant)
        .bind(sql_ms(now))
        .bind(rev)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        let target = format!("tenant:{tenant}");
        let detail = format!("{{\"token\":{:?}}}", id);
        self.finish(tx, rev, now, (actor, "token.create", &target, detail))
            .await?;
        Ok((id, secret))
    }

    /// Writes an audit row for a change kept elsewhere (a top-up of a balance in the
    /// store), as its own revision.
    pub async fn note(
        &self,
        actor: &str,
        action: &str,
        target: &str,
        detail: String,
        now: Millis,
    ) -> Result<(), RecordsError> {
        let (tx, rev) = self.begin().await?;
        self.finish(tx, rev, now, (actor, action, target, detail))
            .await
    }

    /// The latest `limit` audit rows, newest first.
    pub async fn audit(&self, limit: u32) -> Result<Vec<AuditRow>, RecordsError> {
        self.count();
        let rows = sqlx::query(
            "SELECT revision, at, actor, action, target, detail FROM pcx_audit \
             ORDER BY revision DESC LIMIT $1",
        )
        .bind(i64::from(limit.clamp(1, PAGE_MAX)))
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(audit_row)
            .collect::<Result<_, sqlx::Error>>()
            .map_err(db_err)
    }

    /// A tenant's money changes the audit trail holds (`tenant.open` with its opening
    /// balance, `tenant.top-up`), oldest first: what the books start from.
    pub async fn money_events(&self, tenant: &str) -> Result<Vec<AuditRow>, RecordsError> {
        self.count();
        let rows = sqlx::query(
            "SELECT revision, at, actor, action, target, detail FROM pcx_audit \
             WHERE target = $1 AND action IN ('tenant.open', 'tenant.top-up') \
             ORDER BY revision",
        )
        .bind(tenant)
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(audit_row)
            .collect::<Result<_, sqlx::Error>>()
            .map_err(db_err)
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

fn in_scope(k: KeyRecord, scope: Option<&str>) -> Result<KeyRecord, RecordsError> {
    match scope {
        Some(t) if k.tenant.as_deref() != Some(t) => Err(RecordsError::NotFound),
        _ => Ok(k),
    }
}

fn spec_json<T: serde::Serialize>(spec: &T) -> String {
    serde_json::to_string(spec).expect("specs serialize")
}

/// What the audit row of a key change keeps: every field but the secret (which no
/// record holds).
fn detail(k: &KeyRecord) -> String {
    serde_json::json!({
        "label": k.label,
        "tenant": k.tenant,
        "spec": k.spec,
        "expires_at": k.expires_at,
    })
    .to_string()
}

async fn read_key(tx: &mut Transaction<'static, Any>, id: &str) -> Result<KeyRecord, RecordsError> {
    let row = sqlx::query(&format!("SELECT {KEY_COLUMNS} FROM pcx_keys WHERE id = $1"))
        .bind(id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_err)?
        .ok_or(RecordsError::NotFound)?;
    key_row(&row).map_err(db_err)
}

async fn write_key(
    tx: &mut Transaction<'static, Any>,
    k: &KeyRecord,
    insert: bool,
) -> Result<(), RecordsError> {
    let sql = if insert {
        "INSERT INTO pcx_keys (tenant, label, spec, state, expires_at, created_at, updated_at, revision, id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
    } else {
        "UPDATE pcx_keys SET tenant = $1, label = $2, spec = $3, state = $4, expires_at = $5, \
         created_at = $6, updated_at = $7, revision = $8 WHERE id = $9"
    };
    sqlx::query(sql)
        .bind(k.tenant.clone())
        .bind(&k.label)
        .bind(spec_json(&k.spec))
        .bind(k.state.as_str())
        .bind(k.expires_at.map(sql_ms))
        .bind(sql_ms(k.created_at))
        .bind(sql_ms(k.updated_at))
        .bind(sql_ms(k.revision))
        .bind(&k.id)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    Ok(())
}

async fn write_secret(
    tx: &mut Transaction<'static, Any>,
    hash: &Digest,
    key_id: &str,
    valid_until: Option<Millis>,
    rev: i64,
) -> Result<(), RecordsError> {
    sqlx::query(
        "INSERT INTO pcx_key_secrets (hash, key_id, valid_until, revision) VALUES ($1, $2, $3, $4)",
    )
    .bind(hash.to_hex())
    .bind(key_id)
    .bind(valid_until.map(sql_ms))
    .bind(rev)
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k1_urls_name_their_backend_and_never_show_a_password() {
        assert_eq!(Backend::of("sqlite://x.db"), Ok(Backend::Sqlite));
        assert_eq!(Backend::of("postgres://u@h/d"), Ok(Backend::Postgres));
        assert_eq!(Backend::of("postgresql://u@h/d"), Ok(Backend::Postgres));
        let e = Backend::of("mysql://u:hunter2@h/d").unwrap_err();
        assert!(
            e.contains("expected sqlite") && !e.contains("hunter2"),
            "{e}"
        );
        assert_eq!(
            redact_url("postgres://u:pw@h:5/d"),
            "postgres://u:<redacted>@h:5/d"
        );
        assert_eq!(redact_url("postgres://u@h/d"), "postgres://u@h/d");
        assert_eq!(redact_url("sqlite://a@b.db"), "sqlite://a@b.db");
    }
}
