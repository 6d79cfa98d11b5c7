use super::{ConcurrencySlot, SlotConfig, SlotLease, SlotRenew};
use crate::extract::FromExtensions;
use crate::failure::{FailureCounters, FailureMode, FailureStats};
use crate::joint::{JoinFn, SlotSide};
use crate::spawn::{Renewals, detach};
use portcullis_core::SlotStore;
use portcullis_core::SystemClock;
use std::sync::Arc;
use std::time::Duration;
use tower_layer::Layer;

/// What every service built by one layer shares.
pub(crate) struct Shared<St, X, C> {
    pub(crate) store: St,
    pub(crate) extractor: X,
    pub(crate) clock: C,
    pub(crate) config: SlotConfig,
    pub(crate) failures: Arc<FailureCounters>,
    pub(crate) renewals: Arc<Renewals<SlotRenew<St>, SlotLease>>,
    /// Set by [`ConcurrencySlotLayer::join_windows`]: what a window layer below needs
    /// to decide the slot with its windows.
    pub(crate) side: Option<Arc<SlotSide>>,
}

/// Applies [`ConcurrencySlot`] to a service: per-subject in-flight slots (C1–C5).
///
/// The limit state lives in the store, which every clone of the layer and every
/// service it builds — every route of an axum router — shares: one limiter, however
/// many times `layer()` runs (axum calls it once per route).
#[derive(Clone)]
pub struct ConcurrencySlotLayer<St, X = FromExtensions, C = SystemClock> {
    store: St,
    extractor: X,
    clock: C,
    config: SlotConfig,
    failures: Arc<FailureCounters>,
    join: Option<Arc<JoinFn>>,
}

impl<St> ConcurrencySlotLayer<St> {
    /// A slot layer on `store`, reading the [`Subject`](portcullis_core::Subject) from the
    /// request extensions, with the default settings (no wait, 60 s leases renewed every 20 s, failing open).
    pub fn new(store: St) -> Self {
        Self {
            store,
            extractor: FromExtensions,
            clock: SystemClock::new(),
            config: SlotConfig::default(),
            failures: Arc::default(),
            join: None,
        }
    }
}

impl<St: portcullis_core::JointStore, X, C> ConcurrencySlotLayer<St, X, C> {
    /// Decides the slot together with the windows of an
    /// [`AnchoredWindowLayer`](crate::AnchoredWindowLayer) directly below (on the same
    /// store): one store call for both — one Redis script — instead of two in a row
    /// (D2, T3; see [`JointStore`](portcullis_core::JointStore)). A request the window
    /// layer does not take it for (no windows to admit, or no window layer below) has
    /// its slot acquired by this layer as usual, before the inner service's future is
    /// first polled. Takes effect with `max_wait` zero only (a slot wait is this
    /// layer's own).
    ///
    /// The inner service's `call` runs before the slot is decided (that is how the
    /// window layer below gets the claim); its future runs only once the slot is held.
    /// tower services do their work in their future, but one that acts in `call`
    /// itself would see a request this layer then refuses: do not join above such a
    /// service.
    pub fn join_windows(mut self) -> Self {
        let store = self.store.clone();
        self.join = Some(Arc::new(move |ask: &portcullis_core::SlotAsk, window| {
            Box::pin(store.acquire_and_admit(ask, window))
        }));
        self
    }
}

impl<St, X, C> ConcurrencySlotLayer<St, X, C> {
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
    /// Renewal period of a held lease (C4); default a third of the TTL.
    pub fn renew_every(mut self, d: Duration) -> Self {
        self.config.renew_every = d;
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
            join: self.join,
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
            join: self.join,
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
        let side = self.join.as_ref().map(|join| {
            let (failures, mode, store) = (
                self.failures.clone(),
                self.config.failure_mode,
                self.store.clone(),
            );
            let answered = failures.clone();
            Arc::new(SlotSide {
                join: join.clone(),
                on_error: Arc::new(move |e| {
                    failures.on_error(mode, portcullis_core::LayerKind::ConcurrencySlot, e)
                }),
                answered: Arc::new(move || {
                    answered.answered(portcullis_core::LayerKind::ConcurrencySlot, &Ok(()))
                }),
                release: Arc::new(move |key, lease| {
                    detach(store.release(key, lease), "slot release");
                }),
                full: super::busy,
            })
        });
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
                        ttl: portcullis_core::clock::millis(self.config.lease_ttl),
                    },
                    self.config.renew_every,
                ),
                side,
            }),
        }
    }
}
