use super::AnchoredWindow;
use crate::extract::FromExtensions;
use crate::failure::{FailureCounters, FailureMode, FailureStats};
use portcullis_core::SystemClock;
use std::sync::Arc;
use std::time::Duration;

/// What the builder methods set.
#[derive(Clone)]
pub(crate) struct Config<St, X, C> {
    pub(crate) store: St,
    pub(crate) extractor: X,
    pub(crate) clock: C,
    /// Longest wait for room in the rolling 60 s window (W10); zero = refuse at once.
    pub(crate) max_wait: Duration,
    /// Failure mode when the store cannot answer (D4).
    pub(crate) failure_mode: FailureMode,
}

/// What every clone of one layer and every service it builds shares, made once by
/// [`AnchoredWindowLayer::new`].
#[derive(Default)]
pub(crate) struct State {
    pub(crate) failures: FailureCounters,
}

/// What a service reads: the layer's config and state.
pub(crate) struct Shared<St, X, C> {
    pub(crate) config: Config<St, X, C>,
    pub(crate) state: Arc<State>,
}

/// Applies [`AnchoredWindow`] to a service: anchored-window quotas, amount cap and the
/// rolling window (W1–W10).
///
/// Built as every layer of this crate is (see the [crate docs](crate#how-a-layer-is-built)):
/// the builder methods set its config; its state (failure counters) is made once by
/// [`new`](Self::new) and shared by every clone and every service it builds. The
/// windows themselves live in the store: one limiter for every route the layer is
/// applied to.
pub struct AnchoredWindowLayer<St, X = FromExtensions, C = SystemClock> {
    config: Config<St, X, C>,
    state: Arc<State>,
}

layer_parts!(AnchoredWindowLayer<St, X, C> => AnchoredWindow, Shared);

impl<St> AnchoredWindowLayer<St> {
    /// A window layer on `store`, reading the [`Subject`](portcullis_core::Subject) from
    /// the request extensions.
    pub fn new(store: St) -> Self {
        Self {
            config: Config {
                store,
                extractor: FromExtensions,
                clock: SystemClock::new(),
                max_wait: Duration::ZERO,
                failure_mode: FailureMode::default(),
            },
            state: Arc::default(),
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
        let c = self.config;
        AnchoredWindowLayer {
            config: Config {
                store: c.store,
                extractor,
                clock: c.clock,
                max_wait: c.max_wait,
                failure_mode: c.failure_mode,
            },
            state: self.state,
        }
    }
    /// Uses another clock for subscription expiry (the store keeps its own time).
    pub fn clock<C2>(self, clock: C2) -> AnchoredWindowLayer<St, X, C2> {
        let c = self.config;
        AnchoredWindowLayer {
            config: Config {
                store: c.store,
                extractor: c.extractor,
                clock,
                max_wait: c.max_wait,
                failure_mode: c.failure_mode,
            },
            state: self.state,
        }
    }
    /// Store failures so far.
    pub fn failure_stats(&self) -> FailureStats {
        self.state.failures.snapshot()
    }
    /// The store.
    pub fn store(&self) -> &St {
        &self.config.store
    }
}
