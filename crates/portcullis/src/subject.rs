//! What the two layers that limit a subject — the slot layer and the window layer — are
//! configured with alike, and the builder methods that change it (see
//! `subject_builders!` in the macros).

use crate::extract::FromExtensions;
use crate::failure::FailureMode;
use portcullis_core::SystemClock;
use std::time::Duration;

/// A subject-limiting layer's config: its store, how the subject is found (L6), the
/// clock its subscription expiry is read on, the longest wait, what a store failure
/// means (D4), and the layer's own settings (`own`).
#[derive(Clone)]
pub(crate) struct SubjectConfig<St, X, C, E = ()> {
    pub(crate) store: St,
    pub(crate) extractor: X,
    pub(crate) clock: C,
    /// Longest wait — for a free slot (C2), for room in the rolling window (W10); zero
    /// = refuse at once.
    pub(crate) max_wait: Duration,
    /// Failure mode when the store cannot answer (D4).
    pub(crate) failure_mode: FailureMode,
    /// The layer's own settings.
    pub(crate) own: E,
}

impl<St, E> SubjectConfig<St, FromExtensions, SystemClock, E> {
    /// The defaults on `store`: the [`Subject`](portcullis_core::Subject) read from the
    /// request extensions, the system clock, no wait, failing open.
    pub(crate) fn new(store: St, own: E) -> Self {
        Self {
            store,
            extractor: FromExtensions,
            clock: SystemClock::new(),
            max_wait: Duration::ZERO,
            failure_mode: FailureMode::Open,
            own,
        }
    }
}

impl<St, X, C, E> SubjectConfig<St, X, C, E> {
    /// The same config with another subject extractor.
    pub(crate) fn with_extractor<X2>(self, extractor: X2) -> SubjectConfig<St, X2, C, E> {
        SubjectConfig {
            store: self.store,
            extractor,
            clock: self.clock,
            max_wait: self.max_wait,
            failure_mode: self.failure_mode,
            own: self.own,
        }
    }

    /// The same config with another clock.
    pub(crate) fn with_clock<C2>(self, clock: C2) -> SubjectConfig<St, X, C2, E> {
        SubjectConfig {
            store: self.store,
            extractor: self.extractor,
            clock,
            max_wait: self.max_wait,
            failure_mode: self.failure_mode,
            own: self.own,
        }
    }
}
