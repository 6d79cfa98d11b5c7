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
//! The upstream limit and capacity layers join the same way, the other way round: an
//! [`UpstreamLimitLayer`](crate::UpstreamLimitLayer) built with
//! [`join_capacity`](crate::UpstreamLimitLayer::join_capacity) takes, with the provider
//! windows of the channel it counts the request on, a capacity lease on that channel
//! ([`ChannelStore::admit_all_and_acquire`]) and leaves it in the request as a
//! [`Prefetched`] lease; the [`CapacityQueueLayer`](crate::CapacityQueueLayer) below
//! holds it as if it had taken it itself (unless the channel has waiters: a newcomer
//! never jumps the queue), and a lease nobody used is given back.
//!
//! [`JointStore::acquire_and_admit`]: tollgate_core::JointStore::acquire_and_admit
//! [`ChannelStore::admit_all_and_acquire`]: tollgate_core::ChannelStore::admit_all_and_acquire

// Each half is used by its own layer: without both layers of a pair, the other half
// has no caller.
#![cfg_attr(
    not(all(
        feature = "slots",
        feature = "windows",
        feature = "upstream",
        feature = "capacity"
    )),
    allow(dead_code)
)]

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
    /// Notes that the store answered the joint decision (ends the slot layer's outage).
    pub(crate) answered: Arc<dyn Fn() + Send + Sync>,
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

    /// Tells the slot layer its store answered.
    pub(crate) fn answered(&self) {
        (self.0.side.answered)()
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

/// Gives back a channel's capacity lease.
pub(crate) type ReleaseChannel = dyn Fn(&str, LeaseId) + Send + Sync;

struct Prefetch {
    channel: Arc<str>,
    lease: Mutex<Option<LeaseId>>,
    release: Arc<ReleaseChannel>,
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        let lease = self
            .lease
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(lease) = lease {
            (self.release)(&self.channel, lease);
        }
    }
}

/// What the upstream limit layer learnt of a channel's capacity with its windows
/// (request extension): a lease it took there, or that the channel was full.
#[derive(Clone)]
pub(crate) struct Prefetched(Arc<Prefetch>, bool);

impl Prefetched {
    /// What a windows-and-capacity decision on `channel` learnt: `None` when the
    /// capacity was not asked.
    pub(crate) fn of(
        channel: Arc<str>,
        take: tollgate_core::CapacityTake,
        release: Arc<ReleaseChannel>,
    ) -> Option<Self> {
        match take {
            tollgate_core::CapacityTake::Taken(lease) => Some(Self::taken(channel, lease, release)),
            tollgate_core::CapacityTake::Full => Some(Self::full(channel, release)),
            tollgate_core::CapacityTake::NotAsked => None,
        }
    }

    /// A lease taken on `channel`.
    pub(crate) fn taken(channel: Arc<str>, lease: LeaseId, release: Arc<ReleaseChannel>) -> Self {
        Self(
            Arc::new(Prefetch {
                channel,
                lease: Mutex::new(Some(lease)),
                release,
            }),
            false,
        )
    }

    /// `channel` had no free lease.
    pub(crate) fn full(channel: Arc<str>, release: Arc<ReleaseChannel>) -> Self {
        Self(
            Arc::new(Prefetch {
                channel,
                lease: Mutex::new(None),
                release,
            }),
            true,
        )
    }

    /// The channel it is about.
    pub(crate) fn channel(&self) -> &str {
        &self.0.channel
    }

    /// The lease, once.
    pub(crate) fn take_lease(&self) -> Option<LeaseId> {
        self.0
            .lease
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// True when the channel was full.
    pub(crate) fn was_full(&self) -> bool {
        self.1
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
            answered: Arc::new(|| {}),
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
    fn q1_a_prefetched_lease_nobody_used_is_given_back() {
        let released = Arc::new(AtomicUsize::new(0));
        let r = released.clone();
        let release: Arc<ReleaseChannel> = Arc::new(move |ch, lease| {
            assert_eq!((ch, lease), ("ch", 5));
            r.fetch_add(1, Ordering::SeqCst);
        });
        drop(Prefetched::taken("ch".into(), 5, release.clone()));
        assert_eq!(released.load(Ordering::SeqCst), 1);
        let p = Prefetched::taken("ch".into(), 5, release.clone());
        assert_eq!(p.take_lease(), Some(5));
        drop(p);
        assert_eq!(
            released.load(Ordering::SeqCst),
            1,
            "taken over: not given back"
        );
        let full = Prefetched::full("ch".into(), release);
        assert!(full.was_full());
        assert_eq!(full.take_lease(), None);
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
