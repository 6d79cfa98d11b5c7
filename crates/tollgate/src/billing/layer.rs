use super::{BillingGate, UsageSink};
use crate::failure::{FailureCounters, FailureMode, FailureStats};
use std::sync::Arc;
use tollgate_core::SystemClock;
use tower_layer::Layer;

/// What every service built by one layer shares.
pub(crate) struct Shared<St, C> {
    pub(crate) store: St,
    pub(crate) sink: Arc<dyn UsageSink>,
    pub(crate) clock: C,
    pub(crate) failure_mode: FailureMode,
    pub(crate) failures: Arc<FailureCounters>,
}

/// Applies [`BillingGate`]: eligibility, budget reservation and per-attempt
/// settlement (B1–B6). Fails closed by default (B5).
#[derive(Clone)]
pub struct BillingGateLayer<St, C = SystemClock> {
    store: St,
    sink: Arc<dyn UsageSink>,
    clock: C,
    failure_mode: FailureMode,
    failures: Arc<FailureCounters>,
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
        }
    }
}

impl<St, C> BillingGateLayer<St, C> {
    /// Where usage records go (B6).
    pub fn sink(mut self, sink: impl UsageSink) -> Self {
        self.sink = Arc::new(sink);
        self
    }
    /// Where usage records go, as a shared sink.
    pub fn shared_sink(mut self, sink: Arc<dyn UsageSink>) -> Self {
        self.sink = sink;
        self
    }
    /// Failure mode; closed by default and for good reason (B5).
    pub fn failure_mode(mut self, m: FailureMode) -> Self {
        self.failure_mode = m;
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
        }
    }
    /// Store failures so far.
    pub fn failure_stats(&self) -> FailureStats {
        self.failures.snapshot()
    }
}

impl<S, St: Clone, C: Clone> Layer<S> for BillingGateLayer<St, C> {
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
            }),
        }
    }
}
