use super::AnchoredWindow;
use crate::extract::FromExtensions;
use crate::failure::{FailureCounters, FailureMode, FailureStats};
use portcullis_core::SystemClock;
use std::sync::Arc;
use std::time::Duration;
use tower_layer::Layer;

/// Window settings, set by the layer's builder methods.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WindowConfig {
    /// Longest wait for room in the rolling 60 s window (W10); zero = refuse at once.
    pub(crate) max_wait: Duration,
    /// Failure mode when the store cannot answer (D4).
    pub(crate) failure_mode: FailureMode,
}

/// What every service built by one layer shares.
pub(crate) struct Shared<St, X, C> {
    pub(crate) store: St,
    pub(crate) extractor: X,
    pub(crate) clock: C,
    pub(crate) config: WindowConfig,
    pub(crate) failures: Arc<FailureCounters>,
}

/// Applies [`AnchoredWindow`] to a service: anchored-window quotas, amount cap and the
/// rolling window (W1–W10). The state lives in the store: one limiter for every route
/// the layer is applied to.
#[derive(Clone)]
pub struct AnchoredWindowLayer<St, X = FromExtensions, C = SystemClock> {
    store: St,
    extractor: X,
    clock: C,
    config: WindowConfig,
    failures: Arc<FailureCounters>,
}

impl<St> AnchoredWindowLayer<St> {
    /// A window layer on `store`, reading the [`Subject`](portcullis_core::Subject) from
    /// the request extensions.
    pub fn new(store: St) -> Self {
        Self {
            store,
            extractor: FromExtensions,
            clock: SystemClock::new(),
            config: WindowConfig::default(),
            failures: Arc::default(),
        }
    }
}

impl<St, X, C> AnchoredWindowLayer<St, X, C> {
    /// Longest wait for room in the rolling window (W10).
    pub fn max_wait(mut self, d: Duration) -> Self {
        self.config.max_wait = d;
        self
    }
    /// Failure mode when the store cannot answer (D4); default open.
    pub fn failure_mode(mut self, m: FailureMode) -> Self {
        self.config.failure_mode = m;
        self
    }
    /// Uses another subject extractor (L6).
    pub fn extractor<X2>(self, extractor: X2) -> AnchoredWindowLayer<St, X2, C> {
        AnchoredWindowLayer {
            store: self.store,
            extractor,
            clock: self.clock,
            config: self.config,
            failures: self.failures,
        }
    }
    /// Uses another clock for subscription expiry (the store keeps its own time).
    pub fn clock<C2>(self, clock: C2) -> AnchoredWindowLayer<St, X, C2> {
        AnchoredWindowLayer {
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

impl<S, St: Clone, X: Clone, C: Clone> Layer<S> for AnchoredWindowLayer<St, X, C> {
    type Service = AnchoredWindow<S, St, X, C>;

    fn layer(&self, inner: S) -> Self::Service {
        AnchoredWindow {
            inner,
            shared: Arc::new(Shared {
                store: self.store.clone(),
                extractor: self.extractor.clone(),
                clock: self.clock.clone(),
                config: self.config,
                failures: self.failures.clone(),
            }),
        }
    }
}
