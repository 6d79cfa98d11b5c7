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
//! Both hand-offs are request extensions, defined with the others in
//! [`extensions`](crate::extensions).
//!
//! [`SlotClaim`]: crate::extensions::SlotClaim
//! [`Prefetched`]: crate::extensions::Prefetched
//! [`JointStore::acquire_and_admit`]: portcullis_core::JointStore::acquire_and_admit
//! [`ChannelStore::admit_all_and_acquire`]: portcullis_core::ChannelStore::admit_all_and_acquire

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

use portcullis_core::{
    JointDecision, LeaseId, Rejection, SlotAsk, StoreError, StoreResult, SubjectKey, WindowAsk,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

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

/// Gives back a channel's capacity lease.
pub(crate) type ReleaseChannel = dyn Fn(&str, LeaseId) + Send + Sync;
