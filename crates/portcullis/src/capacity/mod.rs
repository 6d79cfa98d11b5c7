//! Per-channel in-flight capacity with a bounded, tenant-fair queue (Q1–Q5).
//!
//! The request carries its [`Candidates`] (channels in order of preference) in its
//! extensions. In `call` the layer tries them in order and takes a capacity lease on
//! the first channel with room (Q1, Q2); the inner service then finds the channel in
//! the [`Chosen`] extension. When every candidate is full, the request waits in the
//! queue of the candidate expected to free first (Q2, [`expected_wait_us`]): that
//! channel's queue serves its waiters per tenant by deficit round-robin with the
//! weights of [`TenantWeight`] ([`FairQueue`], Q4). A released lease is handed to the
//! next waiter in that order, in-process, at the moment of release.
//!
//! A wait lasts at most `max_wait` (default 10 s) and at most the request's deadline
//! (header `x-portcullis-deadline-ms`: the milliseconds the client is still willing to
//! wait, or [`CapacityConfig::default_deadline`]) (Q3):
//!
//! | outcome | answer |
//! |---|---|
//! | admitted after queueing | the response carries `x-portcullis-queued-ms: <ms>` |
//! | `max_wait` spent, or a queue cap reached | 42910 (429) `All upstream capacity for this model is busy. Retry shortly.` + Retry-After |
//! | the deadline (shorter than `max_wait`) passed | 50401 `QUEUE_DEADLINE_EXCEEDED` (504) |
//! | the request future dropped (client gone) | it leaves the queue at once and never gets a lease |
//! | no candidate at all | 50201 `no available upstream for this model` (502) |
//!
//! The lease is held until the response **body** ends, errors or is dropped (L3),
//! renewed every `renew_every` while held (D5); a crashed instance's leases expire by
//! their TTL.
//!
//! # Where it sits in a stack (Q5, L5)
//!
//! A queued request holds nothing of this layer and has not reached the inner service,
//! so put the layer **outside** `BillingGateLayer` (billing reserves money only once the
//! request is admitted on a channel: queued requests are not charged, B3) and inside
//! the user-policy layers (slots, windows): its 42910 / 50401 are typed [`Rejection`]s
//! in the `BoxError`, so the outer layers give back what they reserved (L5).
//!
//! # Several gateway instances
//!
//! The leases live in the [`CapacityStore`], so with a shared store all instances
//! respect one capacity per channel. The queue and its hand-off are in-process: a
//! lease released by another instance wakes nobody here, so every waiter also polls
//! its queue with exponential backoff (10 ms doubling up to
//! [`CapacityConfig::poll_interval`]); a poll asks the store for a lease on behalf of
//! the queue's **next** waiter in fair order, not for itself, so polling keeps the fair
//! order. Fairness is therefore per instance; capacity is global.
//!
//! ```
//! use std::convert::Infallible;
//! use portcullis::CapacityQueueLayer;
//! use portcullis::core::{Candidates, ChannelRef, Chosen, MemoryStore};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let svc = ServiceBuilder::new()
//!     .layer(CapacityQueueLayer::new(MemoryStore::new()))
//!     .service_fn(|req: http::Request<()>| async move {
//!         // The forwarder sends to the chosen channel.
//!         let ch = req.extensions().get::<Chosen>().unwrap().0.name.clone();
//!         Ok::<_, Infallible>(http::Response::new(http_body_util::Full::new(
//!             bytes::Bytes::from(ch.to_string()),
//!         )))
//!     });
//! let mut req = http::Request::new(());
//! req.extensions_mut().insert(Candidates::new([
//!     ChannelRef::new("openai-1", 8),
//!     ChannelRef::new("openai-2", 4),
//! ]));
//! let res = svc.oneshot(req).await.unwrap();
//! assert_eq!(res.status(), 200);
//! # }
//! ```
//!
//! [`Candidates`]: portcullis_core::Candidates
//! [`Chosen`]: portcullis_core::Chosen
//! [`TenantWeight`]: portcullis_core::TenantWeight
//! [`FairQueue`]: portcullis_core::FairQueue
//! [`CapacityStore`]: portcullis_core::CapacityStore
//! [`Rejection`]: portcullis_core::Rejection
//! [`expected_wait_us`]: portcullis_core::capacity::expected_wait_us

#[cfg(test)]
mod clock_tests;
mod decide;
mod future;
mod layer;
mod queue;
mod service;

pub use future::ResponseFuture;
pub use layer::CapacityQueueLayer;
pub use queue::{CapacityGuard, CapacityStats};
pub use service::CapacityQueue;

use portcullis_core::{GatewayCode, LayerKind, QueueLimits, Rejection};
use std::time::Duration;

pub use crate::DEADLINE_HEADER;
/// Response header on a request admitted after queueing: the milliseconds it waited.
pub const QUEUED_MS_HEADER: &str = "x-portcullis-queued-ms";
/// Default longest wait in the queue (Q3).
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(10);
/// Default capacity lease TTL (D5); renewed every third of it while held.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(60);

/// Default [`CapacityConfig::abort_grace`].
pub const DEFAULT_ABORT_GRACE: Duration = Duration::from_millis(250);

/// Capacity queue settings, as [`CapacityQueueLayer::settings`] reports them; set
/// them with the layer's builder methods.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CapacityConfig {
    /// Longest wait in the queue; zero = never queue, refuse at once (Q3).
    pub max_wait: Duration,
    /// Deadline of a request without a valid [`DEADLINE_HEADER`]; `None` = only
    /// `max_wait` bounds the wait.
    pub default_deadline: Option<Duration>,
    /// Caps of each channel's queue: total waiters and waiters per tenant (Q4).
    pub limits: QueueLimits,
    /// Lease TTL (D5).
    pub lease_ttl: Duration,
    /// Renewal period of a held lease; default TTL/3.
    pub renew_every: Duration,
    /// Longest pause between two polls of its queue by a waiter (for leases released
    /// by other instances); zero = no polling, in-process hand-off only.
    pub poll_interval: Duration,
    /// Retry-After of a 42910.
    pub retry_after: Duration,
    /// How long a lease stays held after its request was abandoned before its answer
    /// ended (a client that hung up mid-stream or gave up while the provider was
    /// working): the provider only stops when it notices the closed connection, and
    /// until then it still counts the request against the channel. Default 250 ms.
    pub abort_grace: Duration,
    /// Failure mode when the store cannot answer (D4); default open.
    pub failure_mode: crate::FailureMode,
}

impl Default for CapacityConfig {
    fn default() -> Self {
        Self {
            max_wait: DEFAULT_MAX_WAIT,
            default_deadline: None,
            limits: QueueLimits::default(),
            lease_ttl: DEFAULT_LEASE_TTL,
            renew_every: DEFAULT_LEASE_TTL / 3,
            poll_interval: Duration::from_millis(250),
            retry_after: Duration::from_secs(1),
            abort_grace: DEFAULT_ABORT_GRACE,
            failure_mode: crate::FailureMode::Open,
        }
    }
}

/// 42910: no capacity within `max_wait`, or the queue is full (Q3, Q4).
pub(crate) fn busy(retry_after: Duration) -> Rejection {
    Rejection::new(GatewayCode::CapacityBusy, LayerKind::CapacityQueue)
        .with_retry_after(Some(retry_after))
}

/// 50401: the request's deadline passed while it was queued (Q3).
pub(crate) fn deadline_exceeded() -> Rejection {
    Rejection::new(GatewayCode::QueueDeadlineExceeded, LayerKind::CapacityQueue)
}

/// 50201: the request named no candidate channel (U4).
pub(crate) fn no_upstream() -> Rejection {
    Rejection::new(GatewayCode::NoUpstream, LayerKind::CapacityQueue)
}
