//! Per-subject anchored-window quotas, the cumulative amount cap and the rolling
//! 60 s window (W1–W10).
//!
//! At `call` the layer resolves the subject's policy (an active subscription beats
//! the key's own policy, W8), reads the request's [`Demand`] and makes one
//! all-or-nothing check-and-reserve in the [`WindowStore`] (W4). Reservations are held
//! in the response body and settled when it ends: tokens and money are corrected from
//! the [`Usage`] recorded in the request's [`UsageRecorder`] (W5, W6); a request that an
//! inner layer rejects gets everything back (L5).
//!
//! Refusals: 42905 for tokens, 42902 for requests, images, videos and amount (W7);
//! 42906 with the Chinese text of W8 when the limit belongs to a subscription without
//! pay-as-you-go; with pay-as-you-go, the key's own policy applies instead. The
//! rolling window of W10 waits up to `max_wait` when room will appear in time.
//!
//! ```
//! use std::convert::Infallible;
//! use portcullis::{AnchoredWindowLayer, core::{MemoryStore, Policy, Subject, Tier}};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let policy = Policy::default().with_requests(Tier::per_minute(1));
//! let svc = ServiceBuilder::new()
//!     .layer(AnchoredWindowLayer::new(MemoryStore::new()))
//!     .service_fn(|_req: http::Request<()>| async {
//!         Ok::<_, Infallible>(http::Response::new(http_body_util::Empty::<bytes::Bytes>::new()))
//!     });
//! let req = || {
//!     let mut r = http::Request::new(());
//!     r.extensions_mut().insert(Subject::new("key-1").with_policy(policy.clone()));
//!     r
//! };
//! assert!(svc.clone().oneshot(req()).await.is_ok());
//! let err = svc.oneshot(req()).await.unwrap_err();
//! let rejection = err.downcast_ref::<portcullis::core::Rejection>().unwrap();
//! assert_eq!(rejection.code().code(), 42902);
//! # }
//! ```
//!
//! [`Demand`]: portcullis_core::Demand
//! [`Usage`]: portcullis_core::Usage
//! [`UsageRecorder`]: portcullis_core::UsageRecorder
//! [`WindowStore`]: portcullis_core::WindowStore

mod decide;
mod future;
mod layer;
mod service;

pub use future::ResponseFuture;
pub use layer::AnchoredWindowLayer;
pub use service::AnchoredWindow;

use crate::spawn::detach;
use portcullis_core::attempt::{CallEnd, Settle, settle};
use portcullis_core::{Outcome, Scope, SubjectKey, UsageRecorder, WindowStore, WindowTicket};

/// Reservations of one admitted request: settled when dropped (W5), or refunded if
/// an inner layer rejected the request (L5).
pub struct WindowGuard<St: WindowStore> {
    store: St,
    key: SubjectKey,
    scope: Scope,
    ticket: WindowTicket,
    recorder: UsageRecorder,
    /// How the inner call ended (so far).
    end: CallEnd,
    _in_flight: crate::gauge::InFlight,
}

hold_call_end!(impl<St: WindowStore> Hold for WindowGuard<St>);

impl<St: WindowStore> WindowGuard<St> {
    /// The reservation.
    pub fn ticket(&self) -> &WindowTicket {
        &self.ticket
    }
}

impl<St: WindowStore> Drop for WindowGuard<St> {
    fn drop(&mut self) {
        // Refused further in, or dropped before any answer, with nothing recorded: the
        // request never left (L5); so too a request the provider never saw (B4).
        let outcome = match settle(self.end, self.recorder.report()) {
            Settle::Refund => Outcome::Refund,
            Settle::AsReported => Outcome::Completed(self.recorder.get()),
        };
        detach(
            self.store
                .settle(&self.key, self.scope, self.ticket, outcome),
            "window settlement",
        );
    }
}
