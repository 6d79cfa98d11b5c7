//! What a layer does when its store cannot answer (D4).

use portcullis_core::{GatewayCode, LayerKind, Rejection, StoreError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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
    outage: Outage,
}

pub use portcullis_core::outage::OUTAGE_REPORT_EVERY;
use portcullis_core::outage::{Outage as Counts, OutageReport, mono_ms};

/// One layer's store outage as the log tells it (D11; the counts are
/// [`portcullis_core::outage`]'s): never a line per request (the per-request facts are
/// the `portcullis_store_failures_total` counter's).
#[derive(Debug, Default)]
pub(crate) struct Outage(Counts);

impl Outage {
    /// Logs a failure of `subject`, which goes on `doing` meanwhile: a WARN when the
    /// failures begin and every [`OUTAGE_REPORT_EVERY`], else at debug. `op` names
    /// what failed (a layer, a release).
    pub(crate) fn log_failure(&self, subject: &str, doing: &str, op: &str, err: &StoreError) {
        match self.0.failed(mono_ms()) {
            Some(OutageReport::Began) => tracing::warn!(
                op,
                error = %err,
                "{subject} failing; {doing} until it answers"
            ),
            Some(OutageReport::Continues { failures, for_ms }) => tracing::warn!(
                op,
                error = %err,
                failures,
                for_ms,
                "{subject} still failing; {doing}: {failures} failures over {for_ms} ms"
            ),
            _ => tracing::debug!(op, error = %err, "{subject} failed; {doing}"),
        }
    }

    /// Logs, once, that `subject` answers again after an outage.
    pub(crate) fn log_answer(&self, subject: &str, op: &str) {
        if let Some(OutageReport::Ended { failures, for_ms }) = self.0.answered(mono_ms) {
            tracing::info!(
                op,
                failures,
                for_ms,
                "{subject} answers again: {failures} failures over {for_ms} ms"
            );
        }
    }
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
    /// Notes a store answer: one after failures ends the outage, logged once with its
    /// counts. Call it with every answer a decision got from the store.
    pub(crate) fn answered<T>(&self, layer: LayerKind, r: &portcullis_core::StoreResult<T>) {
        if r.is_ok() {
            self.outage.log_answer("limit store", layer.as_str());
        }
    }

    /// Applies `mode` to a store failure: `None` = admit unchecked, `Some` = refuse.
    /// Logged when the failures begin and every [`OUTAGE_REPORT_EVERY`] while they go
    /// on, never per request.
    pub(crate) fn on_error(
        &self,
        mode: FailureMode,
        layer: LayerKind,
        err: &StoreError,
    ) -> Option<Rejection> {
        let how = match mode {
            FailureMode::Open => "admitting (fail-open)",
            FailureMode::Closed => "refusing (fail-closed)",
        };
        self.outage
            .log_failure("limit store", how, layer.as_str(), err);
        match mode {
            FailureMode::Open => {
                self.open.fetch_add(1, Ordering::Relaxed);
                #[cfg(feature = "metrics")]
                metrics::counter!("portcullis_store_failures_total", "layer" => layer.as_str(), "mode" => "open")
                    .increment(1);
                None
            }
            FailureMode::Closed => {
                self.closed.fetch_add(1, Ordering::Relaxed);
                #[cfg(feature = "metrics")]
                metrics::counter!("portcullis_store_failures_total", "layer" => layer.as_str(), "mode" => "closed")
                    .increment(1);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d11_counters_count_every_failure_whatever_is_logged() {
        let c = FailureCounters::default();
        let e = StoreError::new(portcullis_core::store::StoreErrorKind::Timeout, "slow");
        for _ in 0..100 {
            assert!(
                c.on_error(FailureMode::Open, LayerKind::AnchoredWindow, &e)
                    .is_none()
            );
        }
        assert!(
            c.on_error(FailureMode::Closed, LayerKind::BillingGate, &e)
                .is_some()
        );
        assert_eq!(
            c.snapshot(),
            FailureStats {
                failed_open: 100,
                failed_closed: 1
            }
        );
        assert!(c.outage.0.is_on(), "an outage under way");
    }
}
