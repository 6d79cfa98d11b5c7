//! The ledger sink (B6): every usage record into the records database's ledger
//! (`portcullis_records::LedgerRow`), written in batches off the request path, never
//! lost while the database is down or slow.
//!
//! A record goes from [`UsageSink::record`] through a bounded queue to one writer task,
//! which appends each batch to this instance's **spool** file (and syncs it) before it
//! writes the batch to the database, then empties the spool. While the database does not
//! take a batch, the batches stay in the spool, new ones are appended behind them, and
//! the whole spool is replayed when the database answers again (tried every
//! [`RETRY`]); a gateway that starts with a non-empty spool (it crashed, or stopped with
//! the database away) replays it first. The database writes every attempt once however
//! often it is replayed (`Records::append_ledger` is idempotent by attempt id), so a crash
//! between the spool and the database, or a batch retried after its answer was lost,
//! records nothing twice.
//!
//! What can be lost: a record still in the in-process queue when the process is killed
//! (the writer takes what is queued at once, so that is the records of the last moment),
//! and, on a machine crash, what reached the spool in the last batch before it was
//! synced. If the queue is full (the writer far behind), a record is logged whole as not
//! written, never dropped silently.

use crate::config::Config;
use portcullis::UsageRecord;
use portcullis::billing::{Evidence, Reconciliation};
use portcullis::core::AttemptState;
use portcullis_records::{LedgerRow, LedgerUsage, Outcome, Records};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// Records the writer may fall behind by.
const BACKLOG: usize = 65_536;
/// Most records one database transaction writes.
const BATCH: usize = 1_000;
/// How often a database that refused a batch is tried again.
pub const RETRY: Duration = Duration::from_secs(1);

/// Sends usage records to the ledger.
#[derive(Debug)]
pub struct LedgerSink {
    tx: mpsc::Sender<LedgerRow>,
}

/// The spool of `config`'s ledger: `[database] spool` (relative to the configuration
/// file), else beside the SQLite database, else beside the configuration file. A
/// configuration given as text on PostgreSQL with no spool named gets one of its own in
/// the temporary directory, which a later process does not find: name one to keep the
/// records of a crash.
pub fn spool_path(config: &Config, url: &str) -> PathBuf {
    let dir = config
        .source
        .as_deref()
        .and_then(Path::parent)
        .map(Path::to_path_buf);
    if let Some(p) = &config.database().spool {
        return dir.unwrap_or_default().join(p);
    }
    match (url.strip_prefix("sqlite://"), dir) {
        // Beside the database, which a relative path puts beside the configuration
        // file (as it is opened): never in the process's current directory, where
        // gateways of other files would find — and replay — each other's spools.
        (Some(path), dir) if !path.starts_with(':') => {
            let path = path.split('?').next().unwrap_or(path);
            let db = match dir {
                Some(dir) if !path.starts_with('/') => dir.join(path),
                _ => PathBuf::from(path),
            };
            PathBuf::from(format!("{}.spool", db.display()))
        }
        (_, Some(dir)) => dir.join("portcullis-ledger.spool"),
        (_, None) => {
            static N: AtomicU64 = AtomicU64::new(0);
            std::env::temp_dir().join(format!(
                "portcullis-ledger-{}-{}.spool",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ))
        }
    }
}

impl LedgerSink {
    /// Starts the writer for `records`, spooling at `spool` (created if missing; a spool
    /// left by an earlier run is replayed first). Must be called within a tokio runtime.
    pub fn start(records: Arc<Records>, spool: PathBuf) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&spool)?;
        let (tx, rx) = mpsc::channel(BACKLOG);
        let writer = Writer {
            records,
            spool: Spool { path: spool, file },
        };
        tokio::spawn(writer.run(rx));
        Ok(Self { tx })
    }
}

impl portcullis::UsageSink for LedgerSink {
    fn record(&self, record: UsageRecord) {
        let row = row_of(&record);
        if let Err(e) = self.tx.try_send(row) {
            let row = match e {
                mpsc::error::TrySendError::Full(r) | mpsc::error::TrySendError::Closed(r) => r,
            };
            tracing::error!(
                attempt = %row.attempt,
                record = %serde_json::to_string(&row).unwrap_or_default(),
                "usage record not written to the ledger: its writer is behind"
            );
        }
    }
}

/// A usage record as the ledger keeps it.
pub fn row_of(r: &UsageRecord) -> LedgerRow {
    let (outcome, amount, resolved_by) = outcome_of(r.outcome, r.reconciliation, r.evidence);
    let text = |s: &Option<Arc<str>>| s.as_deref().map(str::to_owned);
    LedgerRow {
        attempt: r.attempt.to_string(),
        at: r.at,
        request_id: text(&r.idempotency_key),
        client_request_id: text(&r.client_request_id),
        key: r.key.as_str().to_owned(),
        tenant: text(&r.tenant),
        model: text(&r.model),
        upstream_model: text(&r.upstream_model),
        channel: text(&r.channel),
        usage: r.usage.map(|u| LedgerUsage {
            input_tokens: u.input_tokens,
            cached_input_tokens: u.cached_input_tokens,
            cache_write_tokens: u.cache_write_tokens,
            output_tokens: u.output_tokens,
            images: u.images,
            videos: u.videos,
        }),
        amount,
        outcome,
        resolved_by: resolved_by.map(str::to_owned),
        billed_to_balance: r.billed_to_balance,
        provider_object: text(&r.provider_object),
        correction: None,
    }
}

/// How an attempt ended, its money, and what resolved it — an operator, or the
/// evidence of an automatic charge or resolution (B7) — as the ledger keeps them.
fn outcome_of(
    state: AttemptState,
    reconciliation: Option<Reconciliation>,
    evidence: Option<Evidence>,
) -> (Outcome, i64, Option<&'static str>) {
    let by = || Some(evidence.map_or("operator", Evidence::as_str));
    match (state, reconciliation) {
        (_, Some(Reconciliation::WrittenOff { .. })) => (Outcome::WrittenOff, 0, by()),
        (AttemptState::Settled(c), Some(Reconciliation::Settled { .. })) => {
            (Outcome::Reconciled, c, by())
        }
        (AttemptState::Settled(c), None) => (Outcome::Settled, c, evidence.map(Evidence::as_str)),
        (AttemptState::Pending(m), _) => (Outcome::Pending, m, None),
        // Open: the settlement never ran (a record made before it); nothing was charged.
        (AttemptState::Refunded | AttemptState::Open, _) => (Outcome::Refunded, 0, None),
    }
}

/// This instance's spool: JSON lines of rows not yet known to be in the database.
struct Spool {
    path: PathBuf,
    file: std::fs::File,
}

impl Spool {
    /// Appends `rows` and syncs them to the disk.
    fn append(&mut self, rows: &[LedgerRow]) -> std::io::Result<()> {
        let mut text = Vec::with_capacity(rows.len() * 512);
        for r in rows {
            serde_json::to_writer(&mut text, r)?;
            text.push(b'\n');
        }
        self.file.write_all(&text)?;
        self.file.sync_data()
    }

    /// Every row in the spool. A line that does not parse (the last one, cut by a crash
    /// while it was written) is logged and skipped.
    fn read(&self) -> std::io::Result<Vec<LedgerRow>> {
        let f = std::fs::File::open(&self.path)?;
        let mut rows = Vec::new();
        for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str(&line) {
                Ok(r) => rows.push(r),
                Err(e) => tracing::warn!(
                    spool = %self.path.display(),
                    line = i + 1,
                    error = %e,
                    "a spooled ledger record cannot be read (cut by a crash?): skipped"
                ),
            }
        }
        Ok(rows)
    }

    /// Empties the spool: everything in it is in the database.
    fn clear(&mut self) -> std::io::Result<()> {
        self.file.set_len(0)?;
        self.file.sync_data()
    }

    fn is_empty(&self) -> bool {
        self.file.metadata().map(|m| m.len() == 0).unwrap_or(false)
    }
}

struct Writer {
    records: Arc<Records>,
    spool: Spool,
}

fn now_ms() -> u64 {
    crate::keys::now_ms()
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::Receiver<LedgerRow>) {
        // A spool left by an earlier run holds records the database may lack.
        let mut behind = !self.spool.is_empty();
        let mut next_try = tokio::time::Instant::now();
        loop {
            // A record, the queue closed (`Some(None)`), or — behind — time to try the
            // database again (`None`).
            let received = if behind {
                tokio::time::timeout_at(next_try, rx.recv()).await.ok()
            } else {
                Some(rx.recv().await)
            };
            let open = !matches!(received, Some(None));
            let mut batch: Vec<LedgerRow> = received.flatten().into_iter().collect();
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            if !batch.is_empty() {
                if let Err(e) = self.spool.append(&batch) {
                    // The database may still take it: the spool is the safety net.
                    tracing::error!(spool = %self.spool.path.display(), error = %e, "ledger spool write failed");
                }
            }
            if behind {
                if tokio::time::Instant::now() >= next_try || !open {
                    behind = !self.replay().await;
                    next_try = tokio::time::Instant::now() + RETRY;
                }
            } else if !batch.is_empty() {
                behind = !self.write(&batch).await;
                next_try = tokio::time::Instant::now() + RETRY;
            }
            if !open {
                if behind {
                    tracing::warn!(
                        spool = %self.spool.path.display(),
                        "ledger: the database did not take every record before the stop; they stay in the spool and are replayed at the next start"
                    );
                }
                return;
            }
        }
    }

    /// Writes a batch that is the whole spool; empties the spool if the database took
    /// it. Returns whether it did.
    async fn write(&mut self, batch: &[LedgerRow]) -> bool {
        match self.records.append_ledger(batch, now_ms()).await {
            Ok(()) => {
                self.cleared();
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, records = batch.len(), spool = %self.spool.path.display(),
                    "ledger: the database did not take a batch; it is kept in the spool and replayed when the database answers");
                false
            }
        }
    }

    /// Writes the whole spool to the database; empties it if every batch was taken.
    async fn replay(&mut self) -> bool {
        let rows = match self.spool.read() {
            Ok(rows) => rows,
            Err(e) => {
                tracing::error!(spool = %self.spool.path.display(), error = %e, "ledger spool read failed");
                return false;
            }
        };
        for chunk in rows.chunks(BATCH) {
            if let Err(e) = self.records.append_ledger(chunk, now_ms()).await {
                tracing::debug!(error = %e, "ledger: the database still does not take the spool");
                return false;
            }
        }
        tracing::info!(records = rows.len(), spool = %self.spool.path.display(), "ledger: the spool was written to the database");
        self.cleared();
        true
    }

    fn cleared(&mut self) {
        match self.spool.clear() {
            Ok(()) => {}
            // Left in the spool: replayed later, and written once all the same.
            Err(e) => {
                tracing::error!(spool = %self.spool.path.display(), error = %e, "ledger spool could not be emptied")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str, file: Option<&str>) -> Config {
        let mut c = Config::parse(text).unwrap();
        c.source = file.map(PathBuf::from);
        c
    }

    #[test]
    fn b6_the_spool_is_named_beside_the_database_or_the_file_and_never_shared() {
        let pg = "postgres://u@h/d";
        let named = config(
            "[database]\nspool = \"ledger/a.spool\"\n",
            Some("/etc/pcx/gw.toml"),
        );
        assert_eq!(
            spool_path(&named, pg),
            PathBuf::from("/etc/pcx/ledger/a.spool")
        );
        let filed = config("", Some("/etc/pcx/gw.toml"));
        assert_eq!(
            spool_path(&filed, "sqlite:///var/pcx/records.db?mode=rwc"),
            PathBuf::from("/var/pcx/records.db.spool")
        );
        assert_eq!(
            spool_path(&filed, pg),
            PathBuf::from("/etc/pcx/portcullis-ledger.spool")
        );
        // A relative database is beside the file, and so is its spool — not in the
        // current directory, where two gateways of two files would share one.
        assert_eq!(
            spool_path(&filed, "sqlite://records.db"),
            PathBuf::from("/etc/pcx/records.db.spool")
        );
        let other = config("", Some("/srv/other/gw.toml"));
        assert_ne!(
            spool_path(&other, "sqlite://records.db"),
            spool_path(&filed, "sqlite://records.db")
        );
        // Text on PostgreSQL: a spool of its own per gateway, never the current directory.
        let text = config("", None);
        let (a, b) = (spool_path(&text, pg), spool_path(&text, pg));
        assert_ne!(a, b);
        assert!(a.starts_with(std::env::temp_dir()), "{}", a.display());
    }

    #[test]
    fn b6_a_record_keeps_its_outcome_and_who_resolved_it() {
        let operator = Some("operator");
        assert_eq!(
            outcome_of(AttemptState::Settled(40), None, None),
            (Outcome::Settled, 40, None)
        );
        assert_eq!(
            outcome_of(AttemptState::Pending(155), None, None),
            (Outcome::Pending, 155, None)
        );
        assert_eq!(
            outcome_of(AttemptState::Refunded, None, None),
            (Outcome::Refunded, 0, None)
        );
        assert_eq!(
            outcome_of(AttemptState::Open, None, None),
            (Outcome::Refunded, 0, None)
        );
        assert_eq!(
            outcome_of(
                AttemptState::Settled(30),
                Some(Reconciliation::Settled { pending: 155 }),
                None
            ),
            (Outcome::Reconciled, 30, operator)
        );
        assert_eq!(
            outcome_of(
                AttemptState::Refunded,
                Some(Reconciliation::WrittenOff { pending: 155 }),
                None
            ),
            (Outcome::WrittenOff, 0, operator)
        );
        // B7: a cut stream charged what it streamed names its evidence.
        assert_eq!(
            outcome_of(AttemptState::Settled(12), None, Some(Evidence::Streamed)),
            (Outcome::Settled, 12, Some("streamed"))
        );
        // B7: a pending attempt the gateway resolved names what it rests on.
        let settled = Some(Reconciliation::Settled { pending: 155 });
        assert_eq!(
            outcome_of(AttemptState::Settled(31), settled, Some(Evidence::Provider)),
            (Outcome::Reconciled, 31, Some("provider"))
        );
        assert_eq!(
            outcome_of(
                AttemptState::Settled(155),
                settled,
                Some(Evidence::UpperBound)
            ),
            (Outcome::Reconciled, 155, Some("upper_bound"))
        );
    }
}
