//! The ledger: every billed attempt of every instance in one table (`pcx_ledger`,
//! migration `0002_ledger.sql`), written in batches off the request path and read by the
//! usage queries and the books check.
//!
//! Writing is idempotent by attempt id: [`Records::append_ledger`] inserts an attempt's
//! row, and replaces it only to resolve a pending one (settled or written off, by the
//! operator or by the gateway itself). So a batch retried after a timeout, or a spool
//! replayed after a crash, records every attempt exactly once, and a late replay of the
//! pending record never undoes its resolution.

use crate::db::{Records, RecordsError, db_err, ms, sql_ms};
use crate::spec::Millis;
use serde::{Deserialize, Serialize};
use sqlx::Row;
use sqlx::any::AnyRow;

/// How an attempt ended, as the ledger keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Charged its cost.
    Settled,
    /// Its result is unknown: held at its upper bound until it is resolved (B7).
    Pending,
    /// Nothing charged (the provider refused it before any work).
    Refunded,
    /// A pending attempt written off: its hold released, nothing charged.
    WrittenOff,
    /// A pending attempt settled at its real cost (by [`LedgerRow::resolved_by`]).
    Reconciled,
}

impl Outcome {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Settled => "settled",
            Self::Pending => "pending",
            Self::Refunded => "refunded",
            Self::WrittenOff => "written_off",
            Self::Reconciled => "reconciled",
        }
    }

    /// The outcome a stored name stands for.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Settled,
            Self::Pending,
            Self::Refunded,
            Self::WrittenOff,
            Self::Reconciled,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
    }

    /// Whether the attempt's money is final (anything but pending).
    pub fn is_final(self) -> bool {
        self != Self::Pending
    }
}

/// Token and media figures of an attempt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerUsage {
    /// Input tokens not served from cache.
    pub input_tokens: u64,
    /// Input tokens read from the provider's cache.
    pub cached_input_tokens: u64,
    /// Input tokens written to the provider's cache.
    pub cache_write_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Images generated.
    pub images: u64,
    /// Videos generated.
    pub videos: u64,
}

/// One attempt's record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerRow {
    /// The attempt (unique across instances).
    pub attempt: String,
    /// When it was settled (ms).
    pub at: Millis,
    /// The gateway's request id (`x-request-id`).
    pub request_id: Option<String>,
    /// The client's own request id, when it sent one.
    pub client_request_id: Option<String>,
    /// The key it ran under: a database key's id, a file key's label.
    pub key: String,
    /// Its tenant.
    pub tenant: Option<String>,
    /// The public model.
    pub model: Option<String>,
    /// The id the channel's provider knows the model by, when it differs.
    pub upstream_model: Option<String>,
    /// The channel that served it.
    pub channel: Option<String>,
    /// Tokens and media, when known.
    pub usage: Option<LedgerUsage>,
    /// The money: the cost, the pending upper bound, or 0 (refunded, written off).
    pub amount: i64,
    /// How it ended.
    pub outcome: Outcome,
    /// What resolved a pending attempt (`operator`, `provider`, `upper_bound`) or what
    /// an automatic charge rests on (`streamed`).
    pub resolved_by: Option<String>,
    /// Whether the tenant's (or key's) balance pays (false when a subscription covers
    /// it).
    pub billed_to_balance: bool,
    /// The provider's object the answer named (B7): its path under the channel's base
    /// URL (`/v1/responses/resp_…`, `/v1/chat/completions/chatcmpl-…`), what a pending
    /// attempt can be resolved from. Written with the attempt's first row and kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_object: Option<String>,
    /// A later report's correction of an automatic charge (B7), kept beside the first
    /// charge: the attempt cost `amount + correction.amount`. Written once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correction: Option<LedgerCorrection>,
}

/// The correction of an automatic charge by a later report (B7).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerCorrection {
    /// New cost − the first charge (minor units; negative gives money back).
    pub amount: i64,
    /// Its evidence (`provider`: the provider's own report of the attempt's usage).
    pub by: String,
    /// When it was corrected (ms).
    pub at: Millis,
}

impl LedgerRow {
    /// What the attempt cost: its amount, corrected.
    pub fn cost(&self) -> i64 {
        self.amount
            .saturating_add(self.correction.as_ref().map_or(0, |c| c.amount))
    }
}

/// Which automatic charges [`Records::correctable_ledger`] reads (B7): rows settled on
/// the gateway's own evidence (`streamed`, `upper_bound`) that name a provider object
/// and are not corrected yet, charged in `[from, before)`, after a cursor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CorrectableQuery {
    /// Charged at or after (ms).
    pub from: Millis,
    /// Charged before (ms).
    pub before: Millis,
    /// After this row (its `at` and attempt), in the order read.
    pub after: Option<(Millis, String)>,
}

/// A pending row as the resolver reads it (B7): the row, and when it reached the
/// ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingRow {
    /// The row.
    pub row: LedgerRow,
    /// When the pending record reached the ledger (ms): the start of its grace.
    pub since: Millis,
}

/// Which pending rows [`Records::pending_ledger`] reads: those that reached the ledger
/// in `[from, before)`, with or without a provider object, after a cursor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PendingQuery {
    /// At or after (ms); `None`: from the first.
    pub from: Option<Millis>,
    /// Before (ms).
    pub before: Millis,
    /// `Some(true)`: only rows with a provider object; `Some(false)`: only rows
    /// without; `None`: both.
    pub with_object: Option<bool>,
    /// After this row (its `since` and attempt), in the order read.
    pub after: Option<(Millis, String)>,
    /// Only the rows naming this provider object (a video job's `/v1/videos/{id}`).
    pub object: Option<String>,
}

/// What a usage query selects; every filter given must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageQuery {
    /// A key, by id or (a database key's) label.
    pub key: Option<String>,
    /// A tenant.
    pub tenant: Option<String>,
    /// A model.
    pub model: Option<String>,
    /// A channel.
    pub channel: Option<String>,
    /// An outcome.
    pub outcome: Option<Outcome>,
    /// At or after (ms).
    pub from: Option<Millis>,
    /// Before (ms).
    pub to: Option<Millis>,
    /// Exactly this key id (a database key's id, a file key's label), never looked up
    /// as a label: what a key's holder is kept to, so that a key labelled like another
    /// key's id (or a database key labelled like a file key) shows nothing of it.
    pub key_id: Option<String>,
    /// Newest first (the cursor then leads to older rows); oldest first otherwise.
    pub newest_first: bool,
}

/// The sums over every row a query selects (not just one page).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UsageTotals {
    /// Rows.
    pub attempts: u64,
    /// Money of settled and reconciled rows.
    pub settled: i64,
    /// Money held by pending rows.
    pub pending: i64,
    /// Input tokens (not from cache).
    pub input_tokens: u64,
    /// Input tokens from cache.
    pub cached_input_tokens: u64,
    /// Input tokens written to cache.
    pub cache_write_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Images.
    pub images: u64,
    /// Videos.
    pub videos: u64,
}

/// A page of rows, in the query's order (oldest first unless
/// [`UsageQuery::newest_first`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsagePage {
    /// The rows.
    pub rows: Vec<LedgerRow>,
    /// Where the next page starts (`None` on the last).
    pub next_cursor: Option<String>,
    /// The sums over every row the query selects.
    pub totals: UsageTotals,
}

/// One tenant's (or, for keys with no tenant, one key's) money in the ledger: what it
/// was charged and what is held, counting only what its balance pays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LedgerMoney {
    /// Settled and reconciled.
    pub settled: i64,
    /// Pending upper bounds.
    pub pending: i64,
}

/// Most rows a page holds.
pub const USAGE_PAGE_MAX: u32 = 1000;

const COLUMNS: &str = "attempt, at, request_id, client_request_id, key_id, tenant, model, \
     upstream_model, channel, input_tokens, cached_input_tokens, cache_write_tokens, \
     output_tokens, images, videos, amount, outcome, resolved_by, billed_to_balance, \
     provider_object, correction, corrected_by, corrected_at";

/// The upsert: a new attempt is inserted; an existing one changes only from pending to
/// a final outcome (a resolution), so a replay is a no-op.
const INSERT: &str = "INSERT INTO pcx_ledger (attempt, at, request_id, client_request_id, \
     key_id, tenant, model, upstream_model, channel, input_tokens, cached_input_tokens, \
     cache_write_tokens, output_tokens, images, videos, amount, outcome, resolved_by, \
     billed_to_balance, recorded_at, provider_object) VALUES ";
const ON_CONFLICT: &str = " ON CONFLICT (attempt) DO UPDATE SET at = excluded.at, \
     input_tokens = excluded.input_tokens, cached_input_tokens = excluded.cached_input_tokens, \
     cache_write_tokens = excluded.cache_write_tokens, output_tokens = excluded.output_tokens, \
     images = excluded.images, videos = excluded.videos, amount = excluded.amount, \
     outcome = excluded.outcome, resolved_by = excluded.resolved_by, \
     recorded_at = excluded.recorded_at \
     WHERE pcx_ledger.outcome = 'pending' AND excluded.outcome <> 'pending'";
/// The values one row binds.
const ROW_VALUES: usize = 21;
/// Most rows one statement writes on PostgreSQL: one round trip for many rows (a row
/// a statement was a round trip each: 7,700 rows/s, below a gateway's peak; 200 a
/// statement: 38,000), its parameters far inside the limit. SQLite, in process, has no
/// round trip to save and takes single-row statements faster (29,000 rows/s against
/// 6,400 with 200 a statement: `examples/ledger_writer.rs`).
const ROWS_PER_STATEMENT: usize = 200;

/// The upsert of `n` rows: a new attempt is inserted; an existing one changes only
/// from pending to a final outcome (a resolution), so a replay is a no-op.
fn upsert(n: usize) -> String {
    let mut sql = String::with_capacity(INSERT.len() + ON_CONFLICT.len() + n * 120);
    sql.push_str(INSERT);
    for row in 0..n {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for v in 0..ROW_VALUES {
            if v > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("${}", row * ROW_VALUES + v + 1));
        }
        sql.push(')');
    }
    sql.push_str(ON_CONFLICT);
    sql
}

/// `rows` cut into statements in order: at most `most` each, and an attempt at most
/// once in one (a statement may not touch a row twice: the pending record and its
/// resolution in one batch go in two, in their order).
fn statements(rows: &[LedgerRow], most: usize) -> Vec<&[LedgerRow]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut seen = std::collections::HashSet::new();
    for (i, r) in rows.iter().enumerate() {
        if i - start == most || !seen.insert(r.attempt.as_str()) {
            out.push(&rows[start..i]);
            start = i;
            seen.clear();
            seen.insert(r.attempt.as_str());
        }
    }
    if start < rows.len() {
        out.push(&rows[start..]);
    }
    out
}

/// The money of settled and reconciled rows (their corrections counted, B7), and of
/// pending ones.
const SETTLED: &str = "CASE WHEN outcome IN ('settled', 'reconciled') \
     THEN amount + COALESCE(correction, 0) ELSE 0 END";
const PENDING: &str = "CASE WHEN outcome = 'pending' THEN amount ELSE 0 END";

/// `SUM(expr)` as a BIGINT on both databases (PostgreSQL sums BIGINTs as NUMERIC, which
/// the `Any` driver does not read), 0 over no rows.
fn sum_of(expr: &str) -> String {
    format!("CAST(COALESCE(SUM({expr}), 0) AS BIGINT)")
}

fn count(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn row(r: &AnyRow) -> Result<LedgerRow, sqlx::Error> {
    let n = |c: &str| -> Result<Option<u64>, sqlx::Error> {
        Ok(r.try_get::<Option<i64>, _>(c)?.map(ms))
    };
    let usage = match n("input_tokens")? {
        None => None,
        Some(input_tokens) => Some(LedgerUsage {
            input_tokens,
            cached_input_tokens: n("cached_input_tokens")?.unwrap_or(0),
            cache_write_tokens: n("cache_write_tokens")?.unwrap_or(0),
            output_tokens: n("output_tokens")?.unwrap_or(0),
            images: n("images")?.unwrap_or(0),
            videos: n("videos")?.unwrap_or(0),
        }),
    };
    let outcome: String = r.try_get("outcome")?;
    Ok(LedgerRow {
        attempt: r.try_get("attempt")?,
        at: ms(r.try_get("at")?),
        request_id: r.try_get("request_id")?,
        client_request_id: r.try_get("client_request_id")?,
        key: r.try_get("key_id")?,
        tenant: r.try_get("tenant")?,
        model: r.try_get("model")?,
        upstream_model: r.try_get("upstream_model")?,
        channel: r.try_get("channel")?,
        usage,
        amount: r.try_get("amount")?,
        outcome: Outcome::parse(&outcome)
            .ok_or_else(|| sqlx::Error::Decode(format!("unknown outcome {outcome:?}").into()))?,
        resolved_by: r.try_get("resolved_by")?,
        billed_to_balance: r.try_get::<i32, _>("billed_to_balance")? != 0,
        provider_object: r.try_get("provider_object")?,
        correction: match r.try_get::<Option<i64>, _>("correction")? {
            None => None,
            Some(amount) => Some(LedgerCorrection {
                amount,
                by: r
                    .try_get::<Option<String>, _>("corrected_by")?
                    .unwrap_or_default(),
                at: r
                    .try_get::<Option<i64>, _>("corrected_at")?
                    .map(ms)
                    .unwrap_or(0),
            }),
        },
    })
}

/// `at:attempt`, the position after which the next page starts.
fn cursor_of(r: &LedgerRow) -> String {
    format!("{}:{}", r.at, r.attempt)
}

fn parse_cursor(c: &str) -> Result<(i64, String), RecordsError> {
    c.split_once(':')
        .and_then(|(at, attempt)| Some((at.parse().ok()?, attempt.to_owned())))
        .ok_or_else(|| {
            RecordsError::Invalid(crate::spec::Invalid {
                field: "cursor",
                reason: "not a cursor this gateway gave".into(),
            })
        })
}

/// A `WHERE` clause for `q` (and a cursor) with its values, numbered from `$1`.
struct Filter {
    clause: String,
    values: Vec<Value>,
}

enum Value {
    Text(String),
    Int(i64),
}

impl Filter {
    fn of(q: &UsageQuery, after: Option<(i64, String)>) -> Self {
        let mut f = Filter {
            clause: String::new(),
            values: Vec::new(),
        };
        if let Some(k) = &q.key {
            f.values.push(Value::Text(k.clone()));
            let n = f.values.len();
            // A key by its id (or a file key's label), or a database key by its label.
            f.and(&format!(
                "(key_id = ${n} OR key_id IN (SELECT id FROM pcx_keys WHERE label = ${n}))"
            ));
        }
        for (column, v) in [
            ("key_id", &q.key_id),
            ("tenant", &q.tenant),
            ("model", &q.model),
            ("channel", &q.channel),
        ] {
            if let Some(v) = v {
                f.values.push(Value::Text(v.clone()));
                let n = f.values.len();
                f.and(&format!("{column} = ${n}"));
            }
        }
        if let Some(o) = q.outcome {
            f.values.push(Value::Text(o.as_str().into()));
            let n = f.values.len();
            f.and(&format!("outcome = ${n}"));
        }
        if let Some(t) = q.from {
            f.values.push(Value::Int(sql_ms(t)));
            let n = f.values.len();
            f.and(&format!("at >= ${n}"));
        }
        if let Some(t) = q.to {
            f.values.push(Value::Int(sql_ms(t)));
            let n = f.values.len();
            f.and(&format!("at < ${n}"));
        }
        if let Some((at, attempt)) = after {
            f.values.push(Value::Int(at));
            f.values.push(Value::Text(attempt));
            let (a, b) = (f.values.len() - 1, f.values.len());
            // After the cursor in the query's order.
            let next = if q.newest_first { '<' } else { '>' };
            f.and(&format!(
                "(at {next} ${a} OR (at = ${a} AND attempt {next} ${b}))"
            ));
        }
        f
    }

    fn and(&mut self, condition: &str) {
        self.clause.push_str(if self.clause.is_empty() {
            " WHERE "
        } else {
            " AND "
        });
        self.clause.push_str(condition);
    }

    fn bind<'q>(
        &'q self,
        mut query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    ) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
        for v in &self.values {
            query = match v {
                Value::Text(s) => query.bind(s.as_str()),
                Value::Int(i) => query.bind(*i),
            };
        }
        query
    }
}

impl Records {
    /// Writes `rows` in one transaction: a new attempt is inserted, a pending one may be
    /// resolved, anything else is left as it is (so writing a row twice changes
    /// nothing). Nothing is written if it fails.
    pub async fn append_ledger(&self, rows: &[LedgerRow], now: Millis) -> Result<(), RecordsError> {
        if rows.is_empty() {
            return Ok(());
        }
        self.count();
        let mut tx = self.pool().begin().await.map_err(db_err)?;
        let most = match self.backend() {
            crate::db::Backend::Postgres => ROWS_PER_STATEMENT,
            crate::db::Backend::Sqlite => 1,
        };
        for chunk in statements(rows, most) {
            let sql = upsert(chunk.len());
            let mut q = sqlx::query(&sql);
            for r in chunk {
                let u = r.usage;
                let figure = |f: fn(&LedgerUsage) -> u64| u.as_ref().map(|u| count(f(u)));
                q = q
                    .bind(r.attempt.as_str())
                    .bind(sql_ms(r.at))
                    .bind(r.request_id.as_deref())
                    .bind(r.client_request_id.as_deref())
                    .bind(r.key.as_str())
                    .bind(r.tenant.as_deref())
                    .bind(r.model.as_deref())
                    .bind(r.upstream_model.as_deref())
                    .bind(r.channel.as_deref())
                    .bind(figure(|u| u.input_tokens))
                    .bind(figure(|u| u.cached_input_tokens))
                    .bind(figure(|u| u.cache_write_tokens))
                    .bind(figure(|u| u.output_tokens))
                    .bind(figure(|u| u.images))
                    .bind(figure(|u| u.videos))
                    .bind(r.amount)
                    .bind(r.outcome.as_str())
                    .bind(r.resolved_by.as_deref())
                    .bind(i32::from(r.billed_to_balance))
                    .bind(sql_ms(now))
                    .bind(r.provider_object.as_deref());
            }
            q.execute(&mut *tx).await.map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)
    }

    /// One attempt's row.
    pub async fn ledger_row(&self, attempt: &str) -> Result<LedgerRow, RecordsError> {
        self.count();
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM pcx_ledger WHERE attempt = $1"
        ))
        .bind(attempt)
        .fetch_optional(self.pool())
        .await
        .map_err(db_err)?
        .ok_or(RecordsError::NotFound)?;
        row(&r).map_err(db_err)
    }

    /// A page of the rows `q` selects, oldest first (newest first with
    /// [`UsageQuery::newest_first`]), after `cursor`, with the sums over every row it
    /// selects.
    pub async fn usage(
        &self,
        q: &UsageQuery,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<UsagePage, RecordsError> {
        self.count();
        let limit = limit.clamp(1, USAGE_PAGE_MAX);
        let after = cursor.map(parse_cursor).transpose()?;
        // The page and its totals read one snapshot: rows written between the two reads
        // would otherwise be summed but not shown.
        let mut tx = self.pool().begin().await.map_err(db_err)?;
        if self.backend() == crate::db::Backend::Postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        let page = Filter::of(q, after);
        let order = if q.newest_first {
            "at DESC, attempt DESC"
        } else {
            "at, attempt"
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM pcx_ledger{} ORDER BY {order} LIMIT {limit}",
            page.clause
        );
        let rows = page
            .bind(sqlx::query(&sql))
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(row)
            .collect::<Result<Vec<_>, _>>()
            .map_err(db_err)?;
        let all = Filter::of(q, None);
        let sums = format!(
            "SELECT CAST(COUNT(*) AS BIGINT) AS attempts, \
             {settled} AS settled, {pending} AS pending, \
             {input} AS input_tokens, {cached} AS cached_input_tokens, \
             {cache_write} AS cache_write_tokens, {output} AS output_tokens, \
             {images} AS images, {videos} AS videos \
             FROM pcx_ledger{}",
            all.clause,
            settled = sum_of(SETTLED),
            pending = sum_of(PENDING),
            input = sum_of("input_tokens"),
            cached = sum_of("cached_input_tokens"),
            cache_write = sum_of("cache_write_tokens"),
            output = sum_of("output_tokens"),
            images = sum_of("images"),
            videos = sum_of("videos"),
        );
        let s = all
            .bind(sqlx::query(&sums))
            .fetch_one(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        let sum = |c: &str| -> Result<i64, RecordsError> { s.try_get::<i64, _>(c).map_err(db_err) };
        let totals = UsageTotals {
            attempts: ms(sum("attempts")?),
            settled: sum("settled")?,
            pending: sum("pending")?,
            input_tokens: ms(sum("input_tokens")?),
            cached_input_tokens: ms(sum("cached_input_tokens")?),
            cache_write_tokens: ms(sum("cache_write_tokens")?),
            output_tokens: ms(sum("output_tokens")?),
            images: ms(sum("images")?),
            videos: ms(sum("videos")?),
        };
        let next_cursor = (rows.len() == limit as usize)
            .then(|| rows.last().map(cursor_of))
            .flatten();
        Ok(UsagePage {
            rows,
            next_cursor,
            totals,
        })
    }

    /// At most `limit` pending rows `q` selects, in the order they reached the ledger
    /// (then by attempt): what the resolver of unknown outcomes reads (B7). Continue
    /// after the last with [`PendingQuery::after`].
    pub async fn pending_ledger(
        &self,
        q: &PendingQuery,
        limit: u32,
    ) -> Result<Vec<PendingRow>, RecordsError> {
        self.count();
        let limit = limit.clamp(1, USAGE_PAGE_MAX);
        let mut clause = String::from(" WHERE outcome = 'pending' AND recorded_at < $1");
        let mut n = 1;
        let mut ints = vec![sql_ms(q.before)];
        if let Some(from) = q.from {
            n += 1;
            clause.push_str(&format!(" AND recorded_at >= ${n}"));
            ints.push(sql_ms(from));
        }
        match q.with_object {
            Some(true) => clause.push_str(" AND provider_object IS NOT NULL"),
            Some(false) => clause.push_str(" AND provider_object IS NULL"),
            None => {}
        }
        if let Some((since, _)) = &q.after {
            let (a, b) = (n + 1, n + 2);
            clause.push_str(&format!(
                " AND (recorded_at > ${a} OR (recorded_at = ${a} AND attempt > ${b}))"
            ));
            ints.push(sql_ms(*since));
            n += 2;
        }
        // Bound last, after the cursor's attempt.
        if q.object.is_some() {
            clause.push_str(&format!(" AND provider_object = ${}", n + 1));
        }
        let sql = format!(
            "SELECT {COLUMNS}, recorded_at FROM pcx_ledger{clause} \
             ORDER BY recorded_at, attempt LIMIT {limit}"
        );
        let mut query = sqlx::query(&sql);
        for i in &ints {
            query = query.bind(*i);
        }
        if let Some((_, attempt)) = &q.after {
            query = query.bind(attempt.as_str());
        }
        if let Some(object) = &q.object {
            query = query.bind(object.as_str());
        }
        let rows = query.fetch_all(self.pool()).await.map_err(db_err)?;
        rows.iter()
            .map(|r| {
                Ok(PendingRow {
                    row: row(r)?,
                    since: ms(r.try_get("recorded_at")?),
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(db_err)
    }

    /// Records the correction of an automatic charge (B7) on `attempt`'s row: `amount`
    /// (new cost − its first charge) by `by` at `at`. Written once: true if it was
    /// written, false if the row was corrected already, is not a final charge, or is
    /// missing. The store's correction comes first; this records it, and writing it
    /// again changes nothing.
    pub async fn correct_ledger(
        &self,
        attempt: &str,
        amount: i64,
        by: &str,
        at: Millis,
    ) -> Result<bool, RecordsError> {
        self.count();
        let done = sqlx::query(
            "UPDATE pcx_ledger SET correction = $1, corrected_by = $2, corrected_at = $3 \
             WHERE attempt = $4 AND correction IS NULL \
             AND outcome IN ('settled', 'reconciled')",
        )
        .bind(amount)
        .bind(by)
        .bind(sql_ms(at))
        .bind(attempt)
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        Ok(done.rows_affected() == 1)
    }

    /// At most `limit` automatic charges `q` selects (B7), by when they were charged
    /// (then by attempt): what the resolver asks providers about to correct. Continue
    /// after the last with [`CorrectableQuery::after`].
    pub async fn correctable_ledger(
        &self,
        q: &CorrectableQuery,
        limit: u32,
    ) -> Result<Vec<LedgerRow>, RecordsError> {
        self.count();
        let limit = limit.clamp(1, USAGE_PAGE_MAX);
        let mut clause = String::from(
            " WHERE correction IS NULL AND provider_object IS NOT NULL \
             AND resolved_by IN ('streamed', 'upper_bound') \
             AND outcome IN ('settled', 'reconciled') AND at >= $1 AND at < $2",
        );
        if q.after.is_some() {
            clause.push_str(" AND (at > $3 OR (at = $3 AND attempt > $4))");
        }
        let sql =
            format!("SELECT {COLUMNS} FROM pcx_ledger{clause} ORDER BY at, attempt LIMIT {limit}");
        let mut query = sqlx::query(&sql)
            .bind(sql_ms(q.from))
            .bind(sql_ms(q.before));
        if let Some((at, attempt)) = &q.after {
            query = query.bind(sql_ms(*at)).bind(attempt.as_str());
        }
        let rows = query.fetch_all(self.pool()).await.map_err(db_err)?;
        rows.iter()
            .map(row)
            .collect::<Result<Vec<_>, _>>()
            .map_err(db_err)
    }

    /// The ledger's money per key, counting what the balance pays: `(tenant, key id)`
    /// (the tenant `None` for a key with no tenant), in that order. What a key's spend in
    /// the store is held against, and seeded from at start (B6).
    pub async fn key_money(
        &self,
    ) -> Result<Vec<((Option<String>, String), LedgerMoney)>, RecordsError> {
        self.money_by("key_id").await
    }

    /// The ledger's money per book, counting what the balance pays: `(tenant, key)` with
    /// `key` set only for the books of a key with no tenant; tenant-less keys first, then
    /// tenants, each in name order.
    pub async fn ledger_money(
        &self,
    ) -> Result<Vec<((Option<String>, Option<String>), LedgerMoney)>, RecordsError> {
        self.money_by("CASE WHEN tenant IS NULL THEN key_id ELSE NULL END")
            .await
    }

    /// Settled and pending money the balance pays, grouped by tenant and `key` (an
    /// expression of the row), sorted by both.
    async fn money_by<K>(
        &self,
        key: &str,
    ) -> Result<Vec<((Option<String>, K), LedgerMoney)>, RecordsError>
    where
        K: Ord + for<'r> sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any>,
    {
        self.count();
        let sql = format!(
            "SELECT tenant, {key} AS book_key, {} AS settled, {} AS pending \
             FROM pcx_ledger WHERE billed_to_balance = 1 GROUP BY tenant, {key}",
            sum_of(SETTLED),
            sum_of(PENDING)
        );
        let rows = sqlx::query(&sql)
            .fetch_all(self.pool())
            .await
            .map_err(db_err)?;
        let mut books = rows
            .iter()
            .map(|r| {
                Ok((
                    (r.try_get("tenant")?, r.try_get("book_key")?),
                    LedgerMoney {
                        settled: r.try_get("settled")?,
                        pending: r.try_get("pending")?,
                    },
                ))
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(db_err)?;
        // Sorted here: the databases order NULLs differently.
        books.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(books)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn b6_statements_hold_an_attempt_once_and_keep_the_order() {
        let row = |a: &str| LedgerRow {
            attempt: a.into(),
            at: 0,
            request_id: None,
            client_request_id: None,
            key: "k".into(),
            tenant: None,
            model: None,
            upstream_model: None,
            channel: None,
            usage: None,
            amount: 0,
            outcome: Outcome::Settled,
            resolved_by: None,
            billed_to_balance: true,
            provider_object: None,
            correction: None,
        };
        let names = |rows: &[LedgerRow]| -> Vec<Vec<String>> {
            statements(rows, ROWS_PER_STATEMENT)
                .iter()
                .map(|s| s.iter().map(|r| r.attempt.clone()).collect())
                .collect()
        };
        let rows: Vec<_> = ["a", "b", "a", "c", "b"].into_iter().map(row).collect();
        assert_eq!(names(&rows), vec![vec!["a", "b"], vec!["a", "c", "b"]]);
        assert!(statements(&[], ROWS_PER_STATEMENT).is_empty());
        assert_eq!(statements(&rows, 1).len(), 5);
        let many: Vec<_> = (0..450).map(|i| row(&i.to_string())).collect();
        let sizes: Vec<usize> = statements(&many, ROWS_PER_STATEMENT)
            .iter()
            .map(|s| s.len())
            .collect();
        assert_eq!(sizes, vec![200, 200, 50]);
        assert_eq!(upsert(2).matches('$').count(), 2 * ROW_VALUES);
        assert!(upsert(2).contains("$42)") && !upsert(2).contains("$43"));
    }

    #[test]
    fn b6_outcomes_round_trip_through_their_names() {
        for o in [
            Outcome::Settled,
            Outcome::Pending,
            Outcome::Refunded,
            Outcome::WrittenOff,
            Outcome::Reconciled,
        ] {
            assert_eq!(Outcome::parse(o.as_str()), Some(o));
            assert_eq!(o.is_final(), o != Outcome::Pending);
        }
        assert_eq!(Outcome::parse("lost"), None);
    }

    #[test]
    fn b6_a_cursor_is_the_time_and_attempt_of_the_last_row() {
        let r = LedgerRow {
            attempt: "att-1:x".into(),
            at: 42,
            request_id: None,
            client_request_id: None,
            key: "k".into(),
            tenant: None,
            model: None,
            upstream_model: None,
            channel: None,
            usage: None,
            amount: 0,
            outcome: Outcome::Settled,
            resolved_by: None,
            billed_to_balance: true,
            provider_object: None,
            correction: None,
        };
        assert_eq!(
            parse_cursor(&cursor_of(&r)).unwrap(),
            (42, "att-1:x".into())
        );
        assert!(
            matches!(parse_cursor("nope"), Err(RecordsError::Invalid(i)) if i.field == "cursor")
        );
    }
}
