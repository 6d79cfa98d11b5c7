//! The slot and window layers deciding together (D2, T3).
//!
//! A [`ConcurrencySlotLayer`](crate::ConcurrencySlotLayer) built with
//! [`join_windows`](crate::ConcurrencySlotLayer::join_windows) does not ask its store at
//! once: it puts a [`SlotClaim`] into the request's extensions and calls the service
//! below. An [`AnchoredWindowLayer`](crate::AnchoredWindowLayer) there that has windows
//! to admit for the request *claims* it, in its own `call`, and decides the slot and
//! the windows in one store call ([`JointStore::acquire_and_admit`]: one script on
//! Redis, both on the subject's hash slot) instead of two in a row. It hands the lease
//! back through the claim; the slot layer holds it to the end of the body as always.
//!
//! If nothing below claims the slot by the time the inner `call` returns (no window
//! layer, a subject with no windows, a window layer behind a buffer), the slot layer
//! keeps it and acquires it itself before it first polls the inner future — the
//! order of a layer used alone. Claiming and keeping are one compare-and-swap, so
//! exactly one of the two layers decides the slot.
//!
//! [`JointStore::acquire_and_admit`]: tollgate_core::JointStore::acquire_and_admit

// Each half is used by its own layer: with one of the two features, the other half
// has no caller.
#![cfg_attr(not(all(feature = "slots", feature = "windows")), allow(dead_code))]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use tollgate_core::{
    JointDecision, LeaseId, Rejection, SlotAsk, StoreError, StoreResult, SubjectKey, WindowAsk,
};

/// The answer of a joint decision.
pub(crate) type JointFuture = Pin<Box<dyn Future<Output = StoreResult<JointDecision>> + Send>>;

/// Makes a joint decision on the slot layer's store.
pub(crate) type JoinFn = dyn Fn(&SlotAsk, Option<WindowAsk<'_>>) -> JointFuture + Send + Sync;

/// The slot layer's failure mode on a store error: `None` = admit without a slot.
pub(crate) type OnError = dyn Fn(&StoreError) -> Option<Rejection> + Send + Sync;

/// Gives back a lease.
pub(crate) type Release = dyn Fn(&SubjectKey, LeaseId) + Send + Sync;

/// What the slot layer lends the window layer with a claim.
pub(crate) struct SlotSide {
    /// The joint decision on the slot layer's store.
    pub(crate) join: Arc<JoinFn>,
    /// The slot layer's failure mode applied to a store error: `None` = admit without
    /// a slot (open), `Some` = refuse.
    pub(crate) on_error: Arc<OnError>,
    /// Gives back a lease nobody took over.
    pub(crate) release: Arc<Release>,
    /// The rejection when every slot is taken (42901).
    pub(crate) full: fn() -> Rejection,
}

const OPEN: u8 = 0;
const CLAIMED: u8 = 1;
const KEPT: u8 = 2;

struct Claim {
    state: AtomicU8,
    ask: SlotAsk,
    side: Arc<SlotSide>,
    lease: Mutex<Option<LeaseId>>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let lease = self
            .lease
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(lease) = lease {
            (self.side.release)(&self.ask.key, lease);
        }
    }
}

/// A slot acquisition handed down by the slot layer (request extension).
#[derive(Clone)]
pub(crate) struct SlotClaim(Arc<Claim>);

impl SlotClaim {
    pub(crate) fn new(ask: SlotAsk, side: Arc<SlotSide>) -> Self {
        Self(Arc::new(Claim {
            state: AtomicU8::new(OPEN),
            ask,
            side,
            lease: Mutex::new(None),
        }))
    }

    /// The window layer takes the decision over; false if the slot layer kept it.
    pub(crate) fn claim(&self) -> bool {
        self.0
            .state
            .compare_exchange(OPEN, CLAIMED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The slot layer decides itself; false if the window layer claimed it.
    pub(crate) fn keep(&self) -> bool {
        self.0
            .state
            .compare_exchange(OPEN, KEPT, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The slot and `window` decided together.
    pub(crate) fn decide(&self, window: Option<WindowAsk<'_>>) -> JointFuture {
        (self.0.side.join)(&self.0.ask, window)
    }

    /// The slot layer's failure mode on `e`.
    pub(crate) fn on_error(&self, e: &StoreError) -> Option<Rejection> {
        (self.0.side.on_error)(e)
    }

    /// The slot layer's "every slot taken" rejection.
    pub(crate) fn full(&self) -> Rejection {
        (self.0.side.full)()
    }

    /// Hands the lease of an admitted joint decision to the slot layer.
    pub(crate) fn set_lease(&self, lease: LeaseId) {
        *self.0.lease.lock().unwrap_or_else(|e| e.into_inner()) = Some(lease);
    }

    /// The lease, once, for the slot layer's guard.
    pub(crate) fn take_lease(&self) -> Option<LeaseId> {
        self.0
            .lease
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// The subject whose slot this is.
    pub(crate) fn key(&self) -> &SubjectKey {
        &self.0.ask.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn side(released: Arc<AtomicUsize>) -> Arc<SlotSide> {
        Arc::new(SlotSide {
            join: Arc::new(|_, _| {
                Box::pin(std::future::ready(Ok(JointDecision::SlotFull {
                    in_flight: 0,
                })))
            }),
            on_error: Arc::new(|_| None),
            release: Arc::new(move |_, _| {
                released.fetch_add(1, Ordering::SeqCst);
            }),
            full: || {
                Rejection::new(
                    tollgate_core::GatewayCode::ConcurrencyLimit,
                    tollgate_core::LayerKind::ConcurrencySlot,
                )
            },
        })
    }

    fn ask() -> SlotAsk {
        SlotAsk {
            key: SubjectKey::from("k"),
            limit: 1,
            ttl: 1_000,
        }
    }

    #[test]
    fn d2_exactly_one_layer_decides_the_slot() {
        let c = SlotClaim::new(ask(), side(Arc::default()));
        assert!(c.claim());
        assert!(
            !c.keep(),
            "claimed by the window layer: the slot layer must not acquire too"
        );
        let c = SlotClaim::new(ask(), side(Arc::default()));
        assert!(c.keep());
        assert!(
            !c.claim(),
            "kept by the slot layer: the window layer must not acquire too"
        );
    }

    #[test]
    fn c3_a_lease_nobody_took_over_is_released_once_with_the_last_claim() {
        let released = Arc::new(AtomicUsize::new(0));
        let c = SlotClaim::new(ask(), side(released.clone()));
        let other = c.clone();
        c.set_lease(7);
        drop(c);
        assert_eq!(released.load(Ordering::SeqCst), 0, "still referenced");
        drop(other);
        assert_eq!(released.load(Ordering::SeqCst), 1);
        // Taken over by the slot guard: the claim releases nothing.
        let c = SlotClaim::new(ask(), side(released.clone()));
        c.set_lease(8);
        assert_eq!(c.take_lease(), Some(8));
        assert_eq!(c.take_lease(), None);
        drop(c);
        assert_eq!(released.load(Ordering::SeqCst), 1);
    }
}
