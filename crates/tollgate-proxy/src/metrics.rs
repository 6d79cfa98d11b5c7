//! Prometheus metrics (SPEC P4) through the `metrics` facade.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `tollgate_rejections_total` | counter | `code`, `layer` |
//! | `tollgate_store_failures_total` | counter | `layer`, `mode` (open / closed) |
//! | `tollgate_queue_wait_seconds` | histogram | — |
//! | `tollgate_upstream_responses_total` | counter | `channel`, `class` (2xx, 4xx, 429, 5xx, 503, 529, error) |
//! | `tollgate_attempts_per_request` | histogram | — (1 until failover lands) |
//! | `tollgate_settlements_total` | counter | `outcome` (settled / pending_reconciliation) |
//! | `tollgate_request_cost` | histogram | — (minor units, settled requests) |
//! | `tollgate_pending_reconciliation_amount` | gauge | — (set at each scrape) |
//!
//! One recorder per process: the first gateway installs it, later ones share it.

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::{Arc, OnceLock};
use tollgate::core::AttemptState;
use tollgate::{UsageRecord, UsageSink};

/// The process's Prometheus handle, installing the recorder on first use. `None` if
/// another recorder was installed by the application.
pub fn handle() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok().map(|()| handle)
        })
        .as_ref()
}

/// The class of an upstream status for `tollgate_upstream_responses_total`.
pub fn status_class(status: u16) -> &'static str {
    match status {
        429 => "429",
        503 => "503",
        529 => "529",
        200..=299 => "2xx",
        500..=599 => "5xx",
        _ => "4xx",
    }
}

/// A usage sink that counts settlements and costs, then passes records on.
pub struct Counting(pub Arc<dyn UsageSink>);

impl UsageSink for Counting {
    fn record(&self, record: UsageRecord) {
        match record.outcome {
            AttemptState::Settled(cost) => {
                metrics::counter!("tollgate_settlements_total", "outcome" => "settled")
                    .increment(1);
                metrics::histogram!("tollgate_request_cost").record(cost as f64);
            }
            AttemptState::Pending(_) => {
                metrics::counter!("tollgate_settlements_total", "outcome" => "pending_reconciliation")
                    .increment(1);
            }
            AttemptState::Open | AttemptState::Refunded => {}
        }
        self.0.record(record);
    }
}
