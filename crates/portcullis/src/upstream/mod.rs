//! Provider limits per channel: RPM, RPH, RPD, TPM, ITPM, OTPM at credential,
//! credential + model and vendor granularity (U1–U4).
//!
//! The request carries its [`Candidates`] (channels in order of preference), and
//! optionally its [`ModelId`], [`Demand`] and a [`RateCount`] estimate. In `call` the
//! layer walks the candidates in order:
//!
//! - an unregistered channel, or one without limits, is unconstrained: kept;
//! - a channel whose credential + model, credential or vendor scope cools down (a
//!   provider 429, a provider header saying a limit is exhausted) is skipped;
//! - on the first channel with limits, the request is counted on every window of its
//!   scopes at once — all or nothing (U1, U2): one request, and the token estimate
//!   (per window as TPM, ITPM or OTPM); a channel without room is skipped;
//! - further channels with limits are dropped: they hold no reservation.
//!
//! The kept channels go on as the request's [`Candidates`] (with [`Chosen`] set to the
//! first, for a stack without a capacity layer). When nothing is kept, the request is
//! refused by U4: every candidate skipped by one window kind → that kind's code
//! (42902 minute requests, 42903 hour requests, 42904 day requests, 42905 minute
//! tokens), otherwise 42908; Retry-After = the earliest recovery. No candidate at all
//! → 50201.
//!
//! When the response ends, tokens are settled from the actual usage under the
//! provider's counting rules ([`rate_count`]); a request refused further in, or
//! dropped before it was sent, is given back; a request served by another channel
//! than the reserved one (a capacity spill to an unconstrained channel) gives the
//! reservation back at once. The response head calibrates the local model (U3):
//! remaining 0 in the provider's rate headers stops sends on that scope until the
//! reset; a provider 429 cools the scope for its Retry-After even though the local
//! model had room, and the deviation is counted ([`UpstreamStats::deviations`]).
//!
//! # Where it sits in a stack
//!
//! Outside [`CapacityQueueLayer`](crate::CapacityQueueLayer): capacity then queues
//! only on channels whose provider limits have room. Inside the user-policy layers:
//! its rejections are typed [`Rejection`]s, so outer layers give back what they
//! reserved (L5).
//!
//! ```
//! use std::convert::Infallible;
//! use std::sync::Arc;
//! use portcullis::UpstreamLimitLayer;
//! use portcullis::core::upstream::{RateLimits, UpstreamChannel, UpstreamRegistry};
//! use portcullis::core::{Candidates, ChannelRef, Chosen, Dialect, MemoryStore};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let registry = UpstreamRegistry::new().with_channel(UpstreamChannel {
//!     name: "openai-1".into(),
//!     dialect: Dialect::OpenAi,
//!     vendor: "openai".into(),
//!     credential: "org-1".into(),
//!     limits: RateLimits { rpm: Some(1), ..RateLimits::default() },
//!     model_limits: vec![],
//! });
//! let svc = ServiceBuilder::new()
//!     .layer(UpstreamLimitLayer::new(MemoryStore::new(), Arc::new(registry)))
//!     .service_fn(|req: http::Request<()>| async move {
//!         let ch = req.extensions().get::<Chosen>().unwrap().0.name.clone();
//!         Ok::<_, Infallible>(http::Response::new(http_body_util::Full::new(
//!             bytes::Bytes::from(ch.to_string()),
//!         )))
//!     });
//! let request = || {
//!     let mut req = http::Request::new(());
//!     req.extensions_mut().insert(Candidates::new([ChannelRef::new("openai-1", 0)]));
//!     req
//! };
//! assert_eq!(svc.clone().oneshot(request()).await.unwrap().status(), 200);
//! // The channel's one request per minute is used: 42902.
//! assert!(svc.oneshot(request()).await.is_err());
//! # }
//! ```
//!
//! [`Candidates`]: portcullis_core::Candidates
//! [`Chosen`]: portcullis_core::Chosen
//! [`ModelId`]: portcullis_core::ModelId
//! [`Demand`]: portcullis_core::Demand
//! [`RateCount`]: portcullis_core::upstream::RateCount
//! [`rate_count`]: portcullis_dialects::rate_count
//! [`Rejection`]: portcullis_core::Rejection

mod calibrate;
mod decide;
mod future;
mod layer;
mod service;

pub use calibrate::{MAX_SIGNAL_MS, RateReader, RateSignal};
pub use future::ResponseFuture;
pub use layer::{UpstreamConfig, UpstreamLimitLayer, UpstreamStats};
pub use service::UpstreamLimit;

use crate::spawn::detach;
use portcullis_core::attempt::{CallEnd, Settle, settle};
use portcullis_core::upstream::TokenMeasure;
use portcullis_core::{
    Dialect, JointSettle, Outcome, Scope, SubjectKey, Usage, UsageRecorder, UsageReport,
    WindowStore, WindowTicket,
};
use portcullis_dialects::rate_count;
use std::sync::Arc;

/// One reservation on one window key.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) key: SubjectKey,
    pub(crate) ticket: WindowTicket,
    pub(crate) measure: TokenMeasure,
}

/// What the upstream limit layer holds for a request until its response body ends:
/// the reservations on one channel's windows.
pub struct UpstreamGuard<St: WindowStore> {
    pub(crate) store: St,
    pub(crate) channel: Arc<str>,
    pub(crate) held: Vec<Held>,
    pub(crate) dialect: Dialect,
    pub(crate) recorder: UsageRecorder,
    /// How the inner call ended (so far).
    pub(crate) end: CallEnd,
    /// Served by another channel than the reserved one (a capacity spill to an
    /// unconstrained channel): the reservation was not used.
    pub(crate) moved: bool,
    pub(crate) _in_flight: crate::gauge::InFlight,
}

hold_call_end!(impl<St: WindowStore> Hold for UpstreamGuard<St>);

impl<St: WindowStore> UpstreamGuard<St> {
    /// The channel the reservation is on.
    pub fn channel(&self) -> &str {
        &self.channel
    }
}

impl<St: WindowStore> Drop for UpstreamGuard<St> {
    fn drop(&mut self) {
        let report = self.recorder.report();
        let refund = self.moved || settle(self.end, report) == Settle::Refund;
        let mut settles = Vec::with_capacity(self.held.len());
        for h in self.held.drain(..) {
            let outcome = if refund {
                Outcome::Refund
            } else {
                match report {
                    // U2: settle with what the provider counts under its own rules.
                    Some(UsageReport::Complete(u)) => Outcome::Completed(Some(Usage {
                        input_tokens: rate_count(self.dialect, &u).of(h.measure),
                        ..Usage::default()
                    })),
                    // Cut short or unknown: the reservation stands.
                    _ => Outcome::Completed(None),
                }
            };
            settles.push(JointSettle {
                key: h.key,
                scope: Scope::Key,
                ticket: h.ticket,
                outcome,
            });
        }
        if !settles.is_empty() {
            // Every window of the channel in one store call.
            detach(self.store.settle_all(settles), "upstream window settlement");
        }
    }
}
