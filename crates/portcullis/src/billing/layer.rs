use super::durable::Settler;
use super::{BillingGate, SettlementStats, UsageSink};
use crate::failure::{FailureCounters, FailureMode, FailureStats};
use portcullis_core::billing::DEFAULT_ATTEMPT_LIFETIME_MS;
use portcullis_core::{BillingStore, Millis, SystemClock};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tower_layer::Layer;

/// What every service built by one layer shares.
pub(crate) struct Shared<St, C> {
    pub(crate) store: St,
    pub(crate) sink: Arc<dyn UsageSink>,
    pub(crate) clock: C,
    pub(crate) failure_mode: FailureMode,
    pub(crate) failures: Arc<FailureCounters>,
    pub(crate) settler: Arc<Settler<St>>,
    pub(crate) lifetime_ms: Millis,
}

/// Applies [`BillingGate`]: eligibility, budget reservation and per-attempt
/// settlement (B1–B7). Fails closed by default (B5).
#[derive(Clone)]
pub struct BillingGateLayer<St, C = SystemClock> {
    store: St,
    sink: Arc<dyn UsageSink>,
    clock: C,
    failure_mode: FailureMode,
    failures: Arc<FailureCounters>,
    /// One settlement retry queue for every service this layer builds.
    settler: Arc<OnceLock<Arc<Settler<St>>>>,
    lifetime_ms: Millis,
}

impl<St> BillingGateLayer<St> {
    /// A billing layer on `store`, discarding usage records (set a sink with
    /// [`BillingGateLayer::sink`]).
    pub fn new(store: St) -> Self {
        Self {
            store,
            sink: Arc::new(()),
            clock: SystemClock::new(),
            failure_mode: FailureMode::Closed,
            failures: Arc::default(),
            settler: Arc::default(),
            lifetime_ms: DEFAULT_ATTEMPT_LIFETIME_MS,
        }
    }
}

impl<St, C> BillingGateLayer<St, C> {
    /// Where usage records go (B6): a [`UsageSink`], or a closure taking each
    /// [`UsageRecord`](super::UsageRecord).
    pub fn sink(mut self, sink: impl UsageSink) -> Self {
        self.sink = Arc::new(sink);
        self
    }
    /// Failure mode; closed by default and for good reason (B5).
    pub fn failure_mode(mut self, m: FailureMode) -> Self {
        self.failure_mode = m;
        self
    }
    /// The longest a request may live (default one hour): an attempt still open after
    /// it is taken for lost (its instance died) and the store sweeps it into pending
    /// reconciliation, releasing its budget reservations (B7). Set it above the longest
    /// stream the gateway serves.
    pub fn max_request_lifetime(mut self, d: Duration) -> Self {
        self.lifetime_ms = portcullis_core::clock::millis(d).max(1);
        self
    }
    /// The clock stamped on usage records and used for subscription expiry.
    pub fn clock<C2>(self, clock: C2) -> BillingGateLayer<St, C2> {
        BillingGateLayer {
            store: self.store,
            sink: self.sink,
            clock,
            failure_mode: self.failure_mode,
            failures: self.failures,
            settler: self.settler,
            lifetime_ms: self.lifetime_ms,
        }
    }
    /// Store failures so far.
    pub fn failure_stats(&self) -> FailureStats {
        self.failures.snapshot()
    }
    /// Settlement retries so far (B7).
    pub fn settlement_stats(&self) -> SettlementStats {
        self.settler.get().map(|s| s.stats()).unwrap_or_default()
    }
}

impl<S, St: BillingStore, C: Clone> Layer<S> for BillingGateLayer<St, C> {
    type Service = BillingGate<S, St, C>;

    fn layer(&self, inner: S) -> Self::Service {
        BillingGate {
            inner,
            shared: Arc::new(Shared {
                store: self.store.clone(),
                sink: self.sink.clone(),
                clock: self.clock.clone(),
                failure_mode: self.failure_mode,
                failures: self.failures.clone(),
                settler: self
                    .settler
                    .get_or_init(|| Settler::new(self.store.clone()))
                    .clone(),
                lifetime_ms: self.lifetime_ms,
            }),
        }
    }
}
