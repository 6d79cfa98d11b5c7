//! What a layer does when its store cannot answer (D4).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tollgate_core::{GatewayCode, LayerKind, Rejection, StoreError};

/// A layer's behaviour when its store fails or times out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailureMode {
    /// Admit, log a warning and count it (the default for slots and windows, D4).
    #[default]
    Open,
    /// Refuse with 503 + Retry-After (the only sane choice for billing, B5).
    Closed,
}

/// Counts of decisions a layer could not take with its store.
#[derive(Debug, Default)]
pub struct FailureCounters {
    open: AtomicU64,
    closed: AtomicU64,
}

/// A snapshot of [`FailureCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FailureStats {
    /// Requests admitted because the store failed.
    pub failed_open: u64,
    /// Requests refused because the store failed.
    pub failed_closed: u64,
}

impl FailureCounters {
    /// Applies `mode` to a store failure: `None` = admit unchecked, `Some` = refuse.
    pub(crate) fn on_error(
        &self,
        mode: FailureMode,
        layer: LayerKind,
        err: &StoreError,
    ) -> Option<Rejection> {
        match mode {
            FailureMode::Open => {
                self.open.fetch_add(1, Ordering::Relaxed);
                #[cfg(feature = "metrics")]
                metrics::counter!("tollgate_store_failures_total", "layer" => layer.as_str(), "mode" => "open")
                    .increment(1);
                tracing::warn!(layer = layer.as_str(), error = %err, "limit store failed; admitting (fail-open)");
                None
            }
            FailureMode::Closed => {
                self.closed.fetch_add(1, Ordering::Relaxed);
                #[cfg(feature = "metrics")]
                metrics::counter!("tollgate_store_failures_total", "layer" => layer.as_str(), "mode" => "closed")
                    .increment(1);
                tracing::warn!(layer = layer.as_str(), error = %err, "limit store failed; refusing (fail-closed)");
                Some(
                    Rejection::new(GatewayCode::StoreUnavailable, layer)
                        .with_retry_after(Some(Duration::from_secs(1))),
                )
            }
        }
    }

    /// The counts so far.
    pub fn snapshot(&self) -> FailureStats {
        FailureStats {
            failed_open: self.open.load(Ordering::Relaxed),
            failed_closed: self.closed.load(Ordering::Relaxed),
        }
    }
}
