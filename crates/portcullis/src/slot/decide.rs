//! The slot layer's decision, sans I/O, with the interface of every layer's `decide`
//! module: [`Shared::ask`] is the first store question, [`Shared::answer`] the step
//! after its answer (go holding a guard, full, or refused); a full answer waits
//! [`backoff`] and asks again while `max_wait` allows. Shared by `call`, which
//! decides at once when the store answers at once, and the response future. A slot
//! decided with the windows is decided by the window layer's `decide` (see
//! `crate::joint`).

use super::SlotGuard;
use super::layer::Shared;
use crate::time::ms;
use portcullis_core::{LayerKind, Rejection, SlotDecision, SlotStore, StoreResult, SubjectKey};
use std::time::Duration;

/// What a store's slot answer means for the request.
pub(crate) enum Answer<St: SlotStore> {
    /// Go on, holding this guard (`None`: the store failed and the layer fails open).
    Go(Option<SlotGuard<St>>),
    /// Every slot is taken (refuse, or wait when `max_wait` allows).
    Full,
    /// Refused: the store failed and the layer fails closed.
    Refuse(Rejection),
}

impl<St: SlotStore, X, C> Shared<St, X, C> {
    /// The first step: ask the store for a slot of `key` among `limit`.
    pub(crate) fn ask(&self, key: &SubjectKey, limit: u32) -> St::Future<SlotDecision> {
        let ttl = portcullis_core::clock::millis(self.config.own.lease_ttl);
        self.config.store.acquire(key, limit, ttl)
    }

    /// The step after the store's `answer` for a slot of `key`.
    pub(crate) fn answer(&self, key: SubjectKey, answer: StoreResult<SlotDecision>) -> Answer<St> {
        self.state
            .failures
            .answered(LayerKind::ConcurrencySlot, &answer);
        match answer {
            Ok(SlotDecision::Acquired(lease)) => Answer::Go(Some(SlotGuard::new(self, key, lease))),
            Ok(SlotDecision::Full { .. }) => Answer::Full,
            Err(e) => match self.state.failures.on_error(
                self.config.failure_mode,
                LayerKind::ConcurrencySlot,
                &e,
            ) {
                None => Answer::Go(None),
                Some(r) => Answer::Refuse(r),
            },
        }
    }
}

/// How long to sleep before asking the store again while waiting for a slot:
/// 1, 2, 4 … 32 ms, never past the end of the wait.
pub(crate) fn backoff(attempt: u32, remaining: Duration) -> Duration {
    ms(1u64 << attempt.min(5)).min(remaining)
}
