use super::AnchoredWindow;
use crate::extract::FromExtensions;
use crate::failure::FailureCounters;
use crate::subject::SubjectConfig;
use portcullis_core::SystemClock;
use std::sync::Arc;
use std::time::Duration;

/// What the builder methods set: the window layer has no settings of its own; its
/// `max_wait` is the longest wait for room in the rolling 60 s window (W10).
pub(crate) type Config<St, X, C> = SubjectConfig<St, X, C>;

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
            config: SubjectConfig::new(store, ()),
            state: Arc::default(),
        }
    }
}

impl<St, X, C> AnchoredWindowLayer<St, X, C> {
    config_setters! {
        /// Longest wait for room in the rolling window (W10).
        max_wait(d: Duration) => max_wait;
    }
    subject_builders!(AnchoredWindowLayer);
}
