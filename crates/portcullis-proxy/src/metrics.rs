//! Prometheus metrics (P4) through the `metrics` facade.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `portcullis_rejections_total` | counter | `code`, `layer` |
//! | `portcullis_store_failures_total` | counter | `layer`, `mode` (open / closed) |
//! | `portcullis_queue_wait_seconds` | histogram (buckets: [`HISTOGRAM_BUCKETS`]) | — |
//! | `portcullis_upstream_responses_total` | counter | `channel`, `class` (2xx, 4xx, 429, 5xx, 503, 529, error) |
//! | `portcullis_attempts_per_request` | histogram (buckets) | — (1 until failover lands) |
//! | `portcullis_settlements_total` | counter | `outcome` (settled / pending_reconciliation) |
//! | `portcullis_request_cost` | histogram (buckets) | — (minor units, settled requests) |
//! | `portcullis_pending_reconciliation_amount` | gauge | — (set at each scrape from the store's pending counters, B7) |
//! | `portcullis_pending_reconciliation_attempts` | gauge | — (likewise: attempts pending) |
//! | `portcullis_tenant_pending_reconciliation_amount` | gauge | `tenant` (each tenant's pending counter; 0 once it has none) |
//! | `portcullis_reconciliations_total` | counter | `outcome` (settled / written_off / in_flight / not_pending: the admin routes' answers) |
//! | `portcullis_billing_settlement_failures_total` | counter | — (settlements or refunds the store could not take, queued for retries, B7) |
//! | `portcullis_billing_settlement_retries_total` | counter | — (retries sent) |
//! | `portcullis_billing_record_missing_total` | counter | — (requests refused with 50303: a configured tenant's record is missing, B7) |
//! | `portcullis_connections_open` | gauge | `listener` (connections served now, at most `server.max_connections`; see [`crate::serve`]) |
//! | `portcullis_connections_waited_total` | counter | `listener` (connections that found the cap reached and waited to be served) |
//! | `portcullis_responses_cut_total` | counter | `reason` (stalled / lifetime: responses cut by [`crate::stall`]) |
//!
//! One recorder per process: the first gateway installs it, later ones share it.

use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use portcullis::core::{AttemptState, BillingStore, Books};
use portcullis::{UsageRecord, UsageSink};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, OnceLock};

/// The process's Prometheus handle, installing the recorder on first use (and binding
/// the layers' per-request metric handles to it). `None` if another recorder was
/// installed by the application.
pub fn handle() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = builder().build_recorder();
            let handle = recorder.handle();
            let installed = metrics::set_global_recorder(recorder).ok().map(|()| handle);
            portcullis::bind_metrics();
            if let Some(h) = &installed {
                start_upkeep(h.clone());
            }
            installed
        })
        .as_ref()
}

/// The upper bounds (`le`) of each histogram's buckets. Exported as Prometheus
/// histograms, not the exporter's default summaries: bucket counts add up across
/// gateway instances (a fleet's p99 is `histogram_quantile` over their sum, where
/// per-instance quantiles cannot be combined), and folding a sample into a bucket is a
/// comparison where a summary's sketch takes a logarithm and a map update.
pub const HISTOGRAM_BUCKETS: [(&str, &[f64]); 3] = [
    (
        "portcullis_queue_wait_seconds",
        &[
            0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        ],
    ),
    (
        "portcullis_attempts_per_request",
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0],
    ),
    // Minor units (micro-dollars in the bundled prices): from a hundredth of a cent
    // to 100 dollars a request.
    (
        "portcullis_request_cost",
        &[
            100.0,
            1_000.0,
            10_000.0,
            100_000.0,
            1_000_000.0,
            10_000_000.0,
            100_000_000.0,
        ],
    ),
];

/// The recorder's settings: [`HISTOGRAM_BUCKETS`].
fn builder() -> PrometheusBuilder {
    HISTOGRAM_BUCKETS
        .iter()
        .fold(PrometheusBuilder::new(), |b, (name, buckets)| {
            // Refuses only an empty bucket list, which the table above never has (the
            // builder is consumed either way: on that error the histograms named
            // before it would be left as the exporter's default summaries).
            match b.set_buckets_for_metric(Matcher::Full((*name).to_string()), buckets) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(metric = name, error = %e, "histogram buckets not set");
                    PrometheusBuilder::new()
                }
            }
        })
}

/// How often the recorder's histogram samples are folded into their buckets.
pub const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Folds the recorder's raw histogram samples into their buckets every
/// [`UPKEEP_EVERY`]. A recorder made with `build_recorder` (rather than `install`, which
/// needs a runtime at start and would own the HTTP listener) keeps every sample
/// recorded since the last scrape: three histograms are recorded per request, so an
/// unscraped gateway grew by about 45 bytes a request, for good (D7). A plain thread
/// rather than a tokio task: the recorder is process-wide and may be installed before
/// (or outside) any runtime, and one sleeping thread costs nothing per request.
fn start_upkeep(handle: PrometheusHandle) {
    let started = std::thread::Builder::new()
        .name("portcullis-metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_EVERY);
                handle.run_upkeep();
            }
        });
    if let Err(e) = started {
        tracing::error!(error = %e, "metrics upkeep thread not started: histogram samples are kept until each scrape");
    }
}

/// The status classes of `portcullis_upstream_responses_total`, in [`status_class`]
/// order, then `error` (no answer).
const CLASSES: [&str; 7] = ["2xx", "4xx", "429", "5xx", "503", "529", "error"];

/// One channel's `portcullis_upstream_responses_total` counters, looked up in the
/// recorder once when the channel is built instead of on every answer.
pub struct ResponseCounters([Counter; 7]);

impl ResponseCounters {
    /// The counters of `channel`.
    pub fn new(channel: &str) -> Self {
        Self(CLASSES.map(|class| {
            metrics::counter!(
                "portcullis_upstream_responses_total",
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

/// The class of an upstream status for `portcullis_upstream_responses_total`.
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
            settled: metrics::counter!("portcullis_settlements_total", "outcome" => "settled"),
            pending: metrics::counter!("portcullis_settlements_total", "outcome" => "pending_reconciliation"),
            cost: metrics::histogram!("portcullis_request_cost"),
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

/// Sets the pending-reconciliation gauges from the store's pending counters (one read
/// per books with pending work, never a scan of the attempts, B7); a store without them
/// is read through its pending list instead. A store error leaves the gauges as they were.
pub async fn record_pending<St: BillingStore>(store: &St) {
    /// Tenants given a gauge so far: set to 0 once their counter is gone.
    static TENANTS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let (attempts, amount) = match store.reconciler() {
        Some(r) => match r.pending_totals().await {
            Ok(totals) => {
                let mut seen = TENANTS.lock().unwrap_or_else(|e| e.into_inner());
                let mut now = BTreeSet::new();
                for (books, t) in &totals {
                    if let Books::Tenant(name) = books {
                        metrics::gauge!("portcullis_tenant_pending_reconciliation_amount", "tenant" => name.to_string())
                            .set(t.amount as f64);
                        now.insert(name.to_string());
                    }
                }
                for gone in seen.difference(&now) {
                    metrics::gauge!("portcullis_tenant_pending_reconciliation_amount", "tenant" => gone.clone())
                        .set(0.0);
                }
                seen.extend(now);
                totals.iter().fold((0u64, 0i64), |(n, m), (_, t)| {
                    (n.saturating_add(t.attempts), m.saturating_add(t.amount))
                })
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics: reading the pending counters failed");
                return;
            }
        },
        None => match store.pending().await {
            Ok(p) => (
                p.len() as u64,
                p.iter().fold(0i64, |m, (_, a)| m.saturating_add(*a)),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "metrics: reading the pending list failed");
                return;
            }
        },
    };
    metrics::gauge!("portcullis_pending_reconciliation_amount").set(amount as f64);
    metrics::gauge!("portcullis_pending_reconciliation_attempts").set(attempts as f64);
}
