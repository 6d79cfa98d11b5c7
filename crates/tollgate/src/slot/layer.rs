use super::{ConcurrencySlot, SlotConfig, SlotLease, SlotRenew};
use crate::extract::FromExtensions;
use crate::failure::{FailureCounters, FailureMode, FailureStats};
use crate::spawn::Renewals;
use std::sync::Arc;
use std::time::Duration;
use tollgate_core::SlotStore;
use tollgate_core::SystemClock;
use tower_layer::Layer;

/// What every service built by one layer shares.
pub(crate) struct Shared<St, X, C> {
    pub(crate) store: St,
    pub(crate) extractor: X,
    pub(crate) clock: C,
    pub(crate) config: SlotConfig,
    pub(crate) failures: Arc<FailureCounters>,
    pub(crate) renewals: Arc<Renewals<SlotRenew<St>, SlotLease>>,
}

/// Applies [`ConcurrencySlot`] to a service: per-subject in-flight slots (C1–C5).
///
/// The limit state lives in the store, which every clone of the layer and every
/// service it builds — every route of an axum router — shares: one limiter, however
/// many times `layer()` runs (ENGINEERING rule 2).
#[derive(Clone)]
pub struct ConcurrencySlotLayer<St, X = FromExtensions, C = SystemClock> {
    store: St,
    extractor: X,
    clock: C,
    config: SlotConfig,
    failures: Arc<FailureCounters>,
}

impl<St> ConcurrencySlotLayer<St> {
    /// A slot layer on `store`, reading the [`Subject`](tollgate_core::Subject) from the
    /// request extensions, with the default [`SlotConfig`].
    pub fn new(store: St) -> Self {
        Self {
            store,
            extractor: FromExtensions,
            clock: SystemClock::new(),
            config: SlotConfig::default(),
            failures: Arc::default(),
        }
    }
}

impl<St, X, C> ConcurrencySlotLayer<St, X, C> {
    /// Sets every setting at once.
    pub fn config(mut self, config: SlotConfig) -> Self {
        self.config = config;
        self
    }
    /// Longest wait for a free slot (C2); default zero (refuse at once).
    pub fn max_wait(mut self, d: Duration) -> Self {
        self.config.max_wait = d;
        self
    }
    /// Lease TTL (C4); also sets the renewal period to a third of it.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.config.lease_ttl = ttl;
        self.config.renew_every = ttl / 3;
        self
    }
    /// Failure mode when the store cannot answer (D4); default open.
    pub fn failure_mode(mut self, m: FailureMode) -> Self {
        self.config.failure_mode = m;
        self
    }
    /// Uses another subject extractor (L6).
    pub fn extractor<X2>(self, extractor: X2) -> ConcurrencySlotLayer<St, X2, C> {
        ConcurrencySlotLayer {
            store: self.store,
            extractor,
            clock: self.clock,
            config: self.config,
            failures: self.failures,
        }
    }
    /// Uses another clock for subscription expiry (the store keeps its own time).
    pub fn clock<C2>(self, clock: C2) -> ConcurrencySlotLayer<St, X, C2> {
        ConcurrencySlotLayer {
            store: self.store,
            extractor: self.extractor,
            clock,
            config: self.config,
            failures: self.failures,
        }
    }

    /// Store failures so far.
    pub fn failure_stats(&self) -> FailureStats {
        self.failures.snapshot()
    }
    /// The store.
    pub fn store(&self) -> &St {
        &self.store
    }
}

impl<S, St: SlotStore, X: Clone, C: Clone> Layer<S> for ConcurrencySlotLayer<St, X, C> {
    type Service = ConcurrencySlot<S, St, X, C>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencySlot {
            inner,
            shared: Arc::new(Shared {
                store: self.store.clone(),
                extractor: self.extractor.clone(),
                clock: self.clock.clone(),
                config: self.config,
                failures: self.failures.clone(),
                renewals: Renewals::new(
                    SlotRenew {
                        store: self.store.clone(),
                        ttl: tollgate_core::clock::millis(self.config.lease_ttl),
                    },
                    self.config.renew_every,
                ),
            }),
        }
    }
}
