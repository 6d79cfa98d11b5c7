//! Per-subject in-flight slots (C1–C5).
//!
//! A slot is taken when the request is called (not in `poll_ready`), from the
//! [`SlotStore`], as a timestamped lease. The lease is held
//! until the response body ends, errors or is dropped (L3), renewed every
//! `renew_every` while held (C4), and released exactly once (C3). With no free slot
//! the request is refused with 42901 at once, or after waiting up to `max_wait` (C2).
//!
//! ```
//! use std::convert::Infallible;
//! use portcullis::{ConcurrencySlotLayer, core::{MemoryStore, Policy, Subject}};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let svc = ServiceBuilder::new()
//!     .layer(ConcurrencySlotLayer::new(MemoryStore::new()))
//!     .service_fn(|_req: http::Request<()>| async {
//!         Ok::<_, Infallible>(http::Response::new(http_body_util::Empty::<bytes::Bytes>::new()))
//!     });
//! let mut req = http::Request::new(());
//! req.extensions_mut().insert(Subject::new("key-1").with_policy(Policy::default().with_concurrency(2)));
//! let res = svc.oneshot(req).await.unwrap();
//! assert_eq!(res.status(), 200);
//! # }
//! ```

mod decide;
mod future;
mod layer;
mod service;

pub use future::ResponseFuture;
pub use layer::ConcurrencySlotLayer;
pub use service::ConcurrencySlot;

use crate::body::Hold;
use crate::spawn::{Registration, Renew, Renewals, detach};
use portcullis_core::{GatewayCode, LayerKind, LeaseId, Millis, Rejection, SlotStore, SubjectKey};
use std::future::Future;
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;

/// Default lease TTL (C4): 60 s. A lease in use is renewed every third of it, so a
/// crashed instance's slots come back within a minute (600 s, with no
/// renewal, stays a valid setting).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(60);

/// Renews slot leases (C4).
pub(crate) struct SlotRenew<St> {
    pub(crate) store: St,
}

/// Names a slot lease for renewal, with the TTL it is renewed to.
pub(crate) type SlotLease = (SubjectKey, LeaseId, Millis);

impl<St: SlotStore> Renew for SlotRenew<St> {
    type Id = SlotLease;
    fn renew(
        &self,
        (key, lease, ttl): &Self::Id,
    ) -> impl Future<Output = portcullis_core::StoreResult<bool>> + Send + 'static {
        self.store.renew(key, *lease, *ttl)
    }
}

/// A held slot: released when dropped, renewed while its request waits or streams.
pub struct SlotGuard<St: SlotStore> {
    store: St,
    key: SubjectKey,
    lease: LeaseId,
    renewals: Arc<Renewals<SlotRenew<St>, SlotLease>>,
    /// The TTL a renewal extends the lease to, and how often.
    ttl: Millis,
    every: Duration,
    registration: Option<Registration<SlotRenew<St>, SlotLease>>,
    _in_flight: crate::gauge::InFlight,
}

impl<St: SlotStore> SlotGuard<St> {
    pub(crate) fn new<X, C>(
        shared: &layer::Shared<St, X, C>,
        key: SubjectKey,
        lease: LeaseId,
    ) -> Self {
        Self {
            store: shared.config.store.clone(),
            key,
            lease,
            renewals: shared.state.renewals.clone(),
            ttl: portcullis_core::clock::millis(shared.config.own.lease_ttl),
            every: shared.config.own.renew_every,
            registration: None,
            _in_flight: crate::gauge::InFlight::enter(portcullis_core::LayerKind::ConcurrencySlot),
        }
    }

    /// The lease held.
    pub fn lease(&self) -> LeaseId {
        self.lease
    }
}

impl<St: SlotStore> Hold for SlotGuard<St> {
    fn keep_alive(&mut self, _cx: &mut Context<'_>) {
        if self.registration.is_none() {
            self.registration = self
                .renewals
                .register((self.key.clone(), self.lease, self.ttl), self.every);
        }
    }
}

impl<St: SlotStore> Drop for SlotGuard<St> {
    fn drop(&mut self) {
        detach(self.store.release(&self.key, self.lease), "slot release");
    }
}

/// The 42901 rejection (C2). Retry-After 1 s: a slot frees when any request ends.
pub(crate) fn busy() -> Rejection {
    Rejection::new(GatewayCode::ConcurrencyLimit, LayerKind::ConcurrencySlot)
        .with_retry_after(Some(Duration::from_secs(1)))
}
