use super::{ConcurrencySlot, DEFAULT_LEASE_TTL, SlotLease, SlotRenew};
use crate::extract::FromExtensions;
use crate::failure::FailureCounters;
use crate::joint::{JoinFn, SlotSide};
use crate::spawn::{Renewals, detach};
use crate::subject::SubjectConfig;
use portcullis_core::SlotStore;
use portcullis_core::SystemClock;
use std::sync::Arc;
use std::time::Duration;
use tower_layer::Layer;

/// What the builder methods set: the slot layer's own settings beside those of every
/// subject-limiting layer (its `max_wait` is the longest wait for a free slot, C2).
pub(crate) type Config<St, X, C> = SubjectConfig<St, X, C, Leases>;

/// The slot layer's own settings.
#[derive(Clone)]
pub(crate) struct Leases {
    /// Lease TTL (C4).
    pub(crate) lease_ttl: Duration,
    /// Renewal period of a held lease; default TTL/3 (C4).
    pub(crate) renew_every: Duration,
    /// Set by [`ConcurrencySlotLayer::join_windows`]: the joint decision on the store.
    join: Option<Arc<JoinFn>>,
}

/// What every clone of one layer and every service it builds shares, made once by
/// [`ConcurrencySlotLayer::new`].
pub(crate) struct State<St> {
    pub(crate) failures: Arc<FailureCounters>,
    /// One renewal task for the leases of every route.
    pub(crate) renewals: Arc<Renewals<SlotRenew<St>, SlotLease>>,
}

/// What a service reads: the layer's config and state.
pub(crate) struct Shared<St, X, C> {
    pub(crate) config: Config<St, X, C>,
    pub(crate) state: Arc<State<St>>,
    /// Set with `join_windows`: what a window layer below needs to decide the slot
    /// with its windows.
    pub(crate) side: Option<Arc<SlotSide>>,
}

/// Applies [`ConcurrencySlot`] to a service: per-subject in-flight slots (C1–C5).
///
/// Built as every layer of this crate is (see the [crate docs](crate#how-a-layer-is-built)):
/// the builder methods set its config; its state (failure counters, the lease renewals)
/// is made once by [`new`](Self::new) and shared by every clone and every service it
/// builds — every route of an axum router. The slots themselves live in the store.
pub struct ConcurrencySlotLayer<St, X = FromExtensions, C = SystemClock> {
    config: Config<St, X, C>,
    state: Arc<State<St>>,
}

handle_clone!(impl<St: Clone, X: Clone, C: Clone> Clone for ConcurrencySlotLayer<St, X, C> { config, state });

impl<St: SlotStore> ConcurrencySlotLayer<St> {
    /// A slot layer on `store`, reading the [`Subject`](portcullis_core::Subject) from the
    /// request extensions, with the default settings (no wait, 60 s leases renewed every 20 s, failing open).
    pub fn new(store: St) -> Self {
        Self {
            state: Arc::new(State {
                failures: Arc::default(),
                renewals: Renewals::new(SlotRenew {
                    store: store.clone(),
                }),
            }),
            config: SubjectConfig::new(
                store,
                Leases {
                    lease_ttl: DEFAULT_LEASE_TTL,
                    renew_every: DEFAULT_LEASE_TTL / 3,
                    join: None,
                },
            ),
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
        let store = self.config.store.clone();
        self.config.own.join = Some(Arc::new(move |ask: &portcullis_core::SlotAsk, window| {
            Box::pin(store.acquire_and_admit(ask, window))
        }));
        self
    }
}

impl<St, X, C> ConcurrencySlotLayer<St, X, C> {
    /// Lease TTL (C4); also sets the renewal period to a third of it.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.config.own.lease_ttl = ttl;
        self.config.own.renew_every = ttl / 3;
        self
    }
    config_setters! {
        /// Longest wait for a free slot (C2); default zero (refuse at once).
        max_wait(d: Duration) => max_wait;
        /// Renewal period of a held lease (C4); default a third of the TTL.
        renew_every(d: Duration) => own.renew_every;
    }
    subject_builders!(ConcurrencySlotLayer);
}

impl<S, St: SlotStore, X: Clone, C: Clone> Layer<S> for ConcurrencySlotLayer<St, X, C> {
    type Service = ConcurrencySlot<S, St, X, C>;

    fn layer(&self, inner: S) -> Self::Service {
        let side = self.config.own.join.as_ref().map(|join| {
            let (failures, mode, store) = (
                self.state.failures.clone(),
                self.config.failure_mode,
                self.config.store.clone(),
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
                config: self.config.clone(),
                state: self.state.clone(),
                side,
            }),
        }
    }
}
