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
//! | `tollgate_billing_settlement_failures_total` | counter | — (settlements or refunds the store could not take, queued for retries, B7) |
//! | `tollgate_billing_settlement_retries_total` | counter | — (retries sent) |
//! | `tollgate_billing_record_missing_total` | counter | — (requests refused with 50303: a configured tenant's record is missing, B7) |
//! | `tollgate_connections_open` | gauge | `listener` (connections served now, at most `server.max_connections`; see [`crate::serve`]) |
//! | `tollgate_connections_waited_total` | counter | `listener` (connections that found the cap reached and waited to be served) |
//! | `tollgate_responses_cut_total` | counter | `reason` (stalled / lifetime: responses cut by [`crate::stall`]) |
//!
//! One recorder per process: the first gateway installs it, later ones share it.

use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::{Arc, OnceLock};
use tollgate::core::AttemptState;
use tollgate::{UsageRecord, UsageSink};

/// The process's Prometheus handle, installing the recorder on first use (and binding
/// the layers' per-request metric handles to it). `None` if another recorder was
/// installed by the application.
pub fn handle() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            let installed = metrics::set_global_recorder(recorder).ok().map(|()| handle);
            tollgate::bind_metrics();
            installed
        })
        .as_ref()
}

/// The status classes of `tollgate_upstream_responses_total`, in [`status_class`]
/// order, then `error` (no answer).
const CLASSES: [&str; 7] = ["2xx", "4xx", "429", "5xx", "503", "529", "error"];

/// One channel's `tollgate_upstream_responses_total` counters, looked up in the
/// recorder once when the channel is built instead of on every answer.
pub struct ResponseCounters([Counter; 7]);

impl ResponseCounters {
    /// The counters of `channel`.
    pub fn new(channel: &str) -> Self {
        Self(CLASSES.map(|class| {
            metrics::counter!(
                "tollgate_upstream_responses_total",
                "channel" => channel.to_owned(),
                "class" => class
            )
        }))
    }

    /// Counts an answer with `status`.
    pub fn answered(&self, status: u16) {
        self.0[class_index(status)].increment(1);
    }

    /// Counts an attempt that got no answer (connection failure or timeout).
    pub fn failed(&self) {
        self.0[6].increment(1);
    }
}

impl std::fmt::Debug for ResponseCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseCounters")
    }
}

/// The class of an upstream status for `tollgate_upstream_responses_total`.
pub fn status_class(status: u16) -> &'static str {
    CLASSES[class_index(status)]
}

fn class_index(status: u16) -> usize {
    match status {
        429 => 2,
        503 => 4,
        529 => 5,
        200..=299 => 0,
        500..=599 => 3,
        _ => 1,
    }
}

/// A usage sink that counts settlements and costs, then passes records on.
pub struct Counting {
    inner: Arc<dyn UsageSink>,
    settled: Counter,
    pending: Counter,
    cost: Histogram,
}

impl Counting {
    /// Counts in the recorder installed now, then passes records to `inner`.
    pub fn new(inner: Arc<dyn UsageSink>) -> Self {
        Self {
            inner,
            settled: metrics::counter!("tollgate_settlements_total", "outcome" => "settled"),
            pending: metrics::counter!("tollgate_settlements_total", "outcome" => "pending_reconciliation"),
            cost: metrics::histogram!("tollgate_request_cost"),
        }
    }
}

impl UsageSink for Counting {
    fn record(&self, record: UsageRecord) {
        match record.outcome {
            AttemptState::Settled(cost) => {
                self.settled.increment(1);
                self.cost.record(cost as f64);
            }
            AttemptState::Pending(_) => self.pending.increment(1),
            AttemptState::Open | AttemptState::Refunded => {}
        }
        self.inner.record(record);
    }
}
