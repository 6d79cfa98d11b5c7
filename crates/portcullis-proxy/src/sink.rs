//! The proxy's usage sinks: one JSON object per line, appended to a file (B6), and a
//! tee to several (the ledger and the file).

use portcullis::UsageRecord;
use portcullis::billing::Reconciliation;
use portcullis::core::AttemptState;
use serde_json::json;
use std::fs::OpenOptions;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};

/// Appends every usage record to a JSON-lines file. Records go through a bounded
/// channel to a writer thread that flushes after every batch, so no file I/O happens on
/// a request's path; if the writer falls behind by more than the channel holds, the
/// record is logged as lost (never silently).
pub struct JsonLines {
    tx: SyncSender<String>,
    // Declared after `tx`, so dropped after it: the channel is closed, then the writer
    // is waited for, and the records sent before the last request ended reach the file
    // before the process exits.
    _writer: Joined,
}

/// Waits on drop for the writer thread to write what was queued and stop.
struct Joined(Option<std::thread::JoinHandle<()>>);

impl Drop for Joined {
    fn drop(&mut self) {
        if let Some(writer) = self.0.take() {
            let _ = writer.join();
        }
    }
}

/// Records the writer may fall behind by.
const BACKLOG: usize = 65_536;

impl JsonLines {
    /// Opens (creates, appends to) `path` and starts its writer thread.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let f = OpenOptions::new().create(true).append(true).open(path)?;
        let (tx, rx) = sync_channel::<String>(BACKLOG);
        let writer = std::thread::Builder::new()
            .name("portcullis-usage-log".into())
            .spawn(move || {
                let mut w = BufWriter::new(f);
                while let Ok(line) = rx.recv() {
                    let mut r = writeln!(w, "{line}");
                    // Drain what is queued, then flush once for the batch.
                    while let Ok(line) = rx.try_recv() {
                        r = r.and_then(|()| writeln!(w, "{line}"));
                    }
                    if let Err(e) = r.and_then(|()| w.flush()) {
                        tracing::error!(error = %e, "usage log write failed");
                    }
                }
            })?;
        Ok(Self {
            tx,
            _writer: Joined(Some(writer)),
        })
    }
}

/// A record as one JSON object.
pub fn record_json(r: &UsageRecord) -> serde_json::Value {
    let (outcome, amount) = match (r.outcome, r.reconciliation) {
        (_, Some(Reconciliation::WrittenOff { .. })) => ("written_off", 0),
        (AttemptState::Settled(c), _) => ("settled", c),
        (AttemptState::Pending(m), _) => ("pending_reconciliation", m),
        (AttemptState::Refunded, _) => ("refunded", 0),
        (AttemptState::Open, _) => ("open", 0),
    };
    // The reconciliation of a pending attempt (B7) — by an operator, or by the gateway on
    // its evidence — and the upper bound it released.
    let by = r.evidence.map_or("operator", |e| e.as_str());
    let reconciled = r.reconciliation.map(|x| match x {
        Reconciliation::Settled { pending } | Reconciliation::WrittenOff { pending } => {
            json!({"by": by, "pending": pending})
        }
    });
    json!({
        "at_ms": r.at,
        "key": r.key.as_str(),
        "tenant": r.tenant.as_deref(),
        "model": r.model.as_deref(),
        "channel": r.channel.as_deref(),
        "upstream_model": r.upstream_model.as_deref(),
        "attempt": &*r.attempt,
        "idempotency_key": r.idempotency_key.as_deref(),
        "client_request_id": r.client_request_id.as_deref(),
        "input_tokens": r.usage.map(|u| u.input_tokens),
        "cached_input_tokens": r.usage.map(|u| u.cached_input_tokens),
        "cache_write_tokens": r.usage.map(|u| u.cache_write_tokens),
        "output_tokens": r.usage.map(|u| u.output_tokens),
        "images": r.usage.map(|u| u.images),
        "videos": r.usage.map(|u| u.videos),
        "outcome": outcome,
        "amount": amount,
        "billed_to_balance": r.billed_to_balance,
        "reconciled": reconciled,
        "evidence": r.evidence.map(|e| e.as_str()),
        "provider_object": r.provider_object.as_deref(),
    })
}

impl portcullis::UsageSink for JsonLines {
    fn record(&self, record: UsageRecord) {
        let line = record_json(&record).to_string();
        match self.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(line)) | Err(TrySendError::Disconnected(line)) => {
                tracing::error!(attempt = %record.attempt, record = %line, "usage record not written: log writer behind");
            }
        }
    }
}

/// Every record to each of several sinks.
pub struct Tee(pub Vec<std::sync::Arc<dyn portcullis::UsageSink>>);

impl portcullis::UsageSink for Tee {
    fn record(&self, record: UsageRecord) {
        if let Some((last, rest)) = self.0.split_last() {
            for s in rest {
                s.record(record.clone());
            }
            last.record(record);
        }
    }
}
