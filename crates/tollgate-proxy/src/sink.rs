//! The proxy's usage sink: one JSON object per line, appended to a file (B6).

use serde_json::json;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use tollgate::UsageRecord;
use tollgate::core::AttemptState;

/// Appends every usage record to a JSON-lines file, flushed per record so a crash
/// loses nothing already settled.
pub struct JsonLines {
    file: Mutex<BufWriter<File>>,
}

impl JsonLines {
    /// Opens (creates, appends to) `path`.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let f = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            file: Mutex::new(BufWriter::new(f)),
        })
    }
}

/// A record as one JSON object.
pub fn record_json(r: &UsageRecord) -> serde_json::Value {
    let (outcome, amount) = match r.outcome {
        AttemptState::Settled(c) => ("settled", c),
        AttemptState::Pending(m) => ("pending_reconciliation", m),
        AttemptState::Refunded => ("refunded", 0),
        AttemptState::Open => ("open", 0),
    };
    json!({
        "at_ms": r.at,
        "key": r.key.as_str(),
        "tenant": r.tenant.as_deref(),
        "model": r.model.as_deref(),
        "channel": r.channel.as_deref(),
        "attempt": &*r.attempt,
        "idempotency_key": r.idempotency_key.as_deref(),
        "input_tokens": r.usage.map(|u| u.input_tokens),
        "cached_input_tokens": r.usage.map(|u| u.cached_input_tokens),
        "cache_write_tokens": r.usage.map(|u| u.cache_write_tokens),
        "output_tokens": r.usage.map(|u| u.output_tokens),
        "images": r.usage.map(|u| u.images),
        "videos": r.usage.map(|u| u.videos),
        "outcome": outcome,
        "amount": amount,
        "billed_to_balance": r.billed_to_balance,
    })
}

impl tollgate::UsageSink for JsonLines {
    fn record(&self, record: UsageRecord) {
        let line = record_json(&record).to_string();
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = writeln!(f, "{line}").and_then(|()| f.flush()) {
            tracing::error!(error = %e, attempt = %record.attempt, "usage record not written");
        }
    }
}
