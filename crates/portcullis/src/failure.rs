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

/// How often an outage that goes on is reported again.
pub const OUTAGE_REPORT_EVERY: Duration = Duration::from_secs(30);

/// One layer's store outage as the log tells it (D11): a line when the failures begin,
/// one every [`OUTAGE_REPORT_EVERY`] while they go on, one when an answer ends them —
/// with counts — never a line per request (the per-request facts are the
/// `portcullis_store_failures_total` counter's). Plain atomics and a caller's clock, so
/// a decision costs one relaxed load when the store is healthy.
#[derive(Debug, Default)]
pub(crate) struct Outage {
    /// Failures in the outage under way; 0 = none.
    failures: AtomicU64,
    /// When it began, in ms of the caller's clock.
    began_ms: AtomicU64,
    /// When it was last reported.
    reported_ms: AtomicU64,
}

/// What the log says of an outage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OutageReport {
    /// The first failure after answers.
    Began,
    /// Still failing: failures so far, over how long.
    Continues { failures: u64, for_ms: u64 },
    /// An answer after failures: how many, over how long.
    Ended { failures: u64, for_ms: u64 },
}

impl Outage {
    /// A failure at `now_ms`: what to report, if anything.
    pub(crate) fn failed(&self, now_ms: u64) -> Option<OutageReport> {
        let before = self.failures.fetch_add(1, Ordering::AcqRel);
        if before == 0 {
            self.began_ms.store(now_ms, Ordering::Relaxed);
            self.reported_ms.store(now_ms, Ordering::Relaxed);
            return Some(OutageReport::Began);
        }
        let last = self.reported_ms.load(Ordering::Relaxed);
        let due = now_ms.saturating_sub(last) >= OUTAGE_REPORT_EVERY.as_millis() as u64;
        // One reporter per period: the one whose exchange succeeds.
        (due && self
            .reported_ms
            .compare_exchange(last, now_ms, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok())
        .then(|| OutageReport::Continues {
            failures: before + 1,
            for_ms: now_ms.saturating_sub(self.began_ms.load(Ordering::Relaxed)),
        })
    }

    /// An answer at `now()`: the end of the outage under way, if there is one. The
    /// clock is read only then: with no outage an answer costs one relaxed load.
    pub(crate) fn answered(&self, now: impl FnOnce() -> u64) -> Option<OutageReport> {
        if self.failures.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let failures = self.failures.swap(0, Ordering::AcqRel);
        (failures > 0).then(|| OutageReport::Ended {
            failures,
            for_ms: now().saturating_sub(self.began_ms.load(Ordering::Relaxed)),
        })
    }

    /// Logs a failure of `subject`, which goes on `doing` meanwhile: a WARN when the
    /// failures begin and every [`OUTAGE_REPORT_EVERY`], else at debug. `op` names
    /// what failed (a layer, a release).
    pub(crate) fn log_failure(&self, subject: &str, doing: &str, op: &str, err: &StoreError) {
        match self.failed(mono_ms()) {
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
        if let Some(OutageReport::Ended { failures, for_ms }) = self.answered(mono_ms) {
            tracing::info!(
                op,
                failures,
                for_ms,
                "{subject} answers again: {failures} failures over {for_ms} ms"
            );
        }
    }
}

/// Milliseconds on a process-wide monotonic clock (for outage reports only).
fn mono_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
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
    fn d11_an_outage_is_reported_when_it_begins_every_period_and_when_it_ends() {
        let o = Outage::default();
        assert_eq!(o.answered(|| 0), None, "no outage, nothing to say");
        assert_eq!(o.failed(1_000), Some(OutageReport::Began));
        let period = OUTAGE_REPORT_EVERY.as_millis() as u64;
        // A thousand failures within the period: silent.
        for i in 0..1_000 {
            assert_eq!(o.failed(1_000 + i % period), None, "failure {i}");
        }
        assert_eq!(
            o.failed(1_000 + period),
            Some(OutageReport::Continues {
                failures: 1_002,
                for_ms: period
            })
        );
        assert_eq!(
            o.failed(1_000 + period + 1),
            None,
            "reported once per period"
        );
        assert_eq!(
            o.answered(|| 5_000 + period),
            Some(OutageReport::Ended {
                failures: 1_003,
                for_ms: 4_000 + period
            })
        );
        assert_eq!(o.answered(|| 6_000 + period), None, "ended once");
        assert_eq!(
            o.failed(7_000 + period),
            Some(OutageReport::Began),
            "a new outage"
        );
    }

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
        c.answered(LayerKind::AnchoredWindow, &Ok(()));
        assert_eq!(
            c.outage.failures.load(Ordering::Relaxed),
            0,
            "the outage ended"
        );
    }
}
