//! Attempts across channels (F1–F11): provider-error classification, bounded
//! attempts with a retry budget, the first-chunk gate for streams, per-channel health
//! and sticky conversations.
//!
//! The request carries its [`Candidates`]; its body must be `Clone` (buffered: the
//! proxy reads it within `max_body_bytes`, 413 beyond, F1). For each attempt the
//! layer clones the request, narrows its candidates to channels not tried yet (F1),
//! healthy ones first and the conversation's pinned channel before all (F8, F9), gives
//! it its own [`UsageRecorder`] (each attempt is settled on its own, B4; the last
//! attempt's usage also reaches the request's recorder) and calls the inner stack —
//! upstream limits, capacity, billing, the forwarder — so every attempt has its own
//! admission.
//!
//! An attempt's outcome:
//!
//! | outcome | what happens |
//! |---|---|
//! | 2xx whose first content chunk arrives within `first_chunk_timeout` | committed: the client gets it (frames held before content included); a later failure becomes an in-stream error event in the client's dialect, never a replay (F3, F4) |
//! | 2xx whose stream fails or stays silent before content | failover (result unknown) |
//! | error answer | its body (up to `error_body_limit`) is read and classified ([`classify`]); F3 reasons (400, 404, 413, 422, unknown) go to the client as the provider sent them; F2 reasons fail over |
//! | transport failure from the forwarder (an [`UpstreamError`]) | never sent (connect, unsendable) → failover at once; timeout or connection lost → failover after a backoff, result unknown |
//! | no channel usable now (42902–42908 from the upstream limits) on a retry | wait for the earliest recovery if it is within the deadline and `max_wait`, else stop |
//!
//! Channel actions of the classifier go to the [`UpstreamRegistry`]'s cooldowns: a
//! provider's Retry-After cools the (credential, model) scope and nothing is sent there
//! before it ends (F6); a bad credential or a spend cap disables the credential until
//! an operator re-enables it, and a spend cap also rules out every other channel of the
//! same paying account for the request (S6). Between attempts without a
//! Retry-After the layer backs off exponentially with jitter; a wait that would pass
//! the request's deadline (`x-portcullis-deadline-ms`) stops (F6). Retries are allowed
//! only while tower's [`TpsBudget`] has room (F7): every request deposits, every retry
//! withdraws.
//!
//! Final failure (F10): every tried channel rate limited → 42911 (429) `Upstream
//! capacity for this model is busy. Retry shortly.`; otherwise → 50202 (502) `The
//! model provider returned an error. Please retry.`
//!
//! The decisions are plain types of the core, testable without a runtime: the walk
//! over the candidates ([`order`]) and the next step after each attempt
//! ([`Attempts::decide`]). The layer routes a request through them in its `decide`
//! module, sans I/O like the other layers' (start; then, on each attempt's outcome,
//! gate, classify, fail over, wait, stop or pass on). This module sends the attempts:
//! the first one and its first-chunk gate in the response future itself, anything
//! after a failed attempt in one boxed future.
//!
//! ```
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use std::{convert::Infallible, sync::Arc};
//! use portcullis::core::upstream::{RateLimits, UpstreamChannel, UpstreamRegistry};
//! use portcullis::core::{Candidates, ChannelRef, Chosen, Dialect, MemoryStore, ModelId, UsageRecorder};
//! use portcullis::{FailoverLayer, UpstreamLimitLayer};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let channel = |name: &str| UpstreamChannel {
//!     name: name.into(),
//!     dialect: Dialect::OpenAi,
//!     vendor: "openai".into(),
//!     credential: format!("org-{name}").into(),
//!     limits: RateLimits::default(),
//!     model_limits: vec![],
//! };
//! let registry = Arc::new(
//!     UpstreamRegistry::new().with_channel(channel("busy")).with_channel(channel("calm")),
//! );
//! let svc = ServiceBuilder::new()
//!     .layer(FailoverLayer::new(registry.clone()))
//!     .layer(UpstreamLimitLayer::new(MemoryStore::new(), registry))
//!     .service_fn(|req: http::Request<()>| async move {
//!         // A forwarder whose `busy` channel is overloaded (an F2 reason: fail over).
//!         // It sends to the channel the layers chose and names it on the attempt's
//!         // recorder, so failover knows which channel answered.
//!         let channel = req.extensions().get::<Chosen>().unwrap().0.name.clone();
//!         req.extensions().get::<UsageRecorder>().unwrap().set_channel(channel.clone());
//!         let (status, body) = match &*channel {
//!             "busy" => (503, r#"{"error":{"type":"server_error","code":"server_is_overloaded"}}"#),
//!             _ => (200, r#"{"object":"chat.completion"}"#),
//!         };
//!         let mut res = http::Response::new(Full::new(Bytes::from_static(body.as_bytes())));
//!         *res.status_mut() = http::StatusCode::from_u16(status).unwrap();
//!         res.headers_mut().insert("x-served-by", channel.parse().unwrap());
//!         Ok::<_, Infallible>(res)
//!     });
//! let mut req = http::Request::new(());
//! req.extensions_mut().insert(Candidates::new([ChannelRef::new("busy", 0), ChannelRef::new("calm", 0)]));
//! req.extensions_mut().insert(ModelId("gpt-4o-mini".into()));
//! req.extensions_mut().insert(Dialect::OpenAi);
//! let res = svc.oneshot(req).await.unwrap();
//! assert_eq!(res.status(), 200);
//! assert_eq!(res.headers()["x-served-by"], "calm");
//! # }
//! ```
//!
//! [`Candidates`]: portcullis_core::Candidates
//! [`UsageRecorder`]: portcullis_core::UsageRecorder
//! [`classify`]: portcullis_core::failover::classify
//! [`UpstreamRegistry`]: portcullis_core::upstream::UpstreamRegistry
//! [`TpsBudget`]: tower::retry::budget::TpsBudget
//! [`UpstreamError`]: portcullis_core::UpstreamError
//! [`order`]: portcullis_core::failover::order()
//! [`Attempts::decide`]: portcullis_core::failover::Attempts::decide

mod attempt;
mod body;
mod decide;
mod future;
mod gate;
mod layer;
mod service;
#[cfg(test)]
mod tests;

pub use body::FailoverBody;
// The request extension failover reads (defined with the others).
pub use crate::extensions::{FallbackRequest, ModelFallback};
pub use future::ResponseFuture;
pub use layer::{FailoverConfig, FailoverLayer, FailoverStats};
pub use service::Failover;

use crate::BoxError;
use bytes::Bytes;
use http::{HeaderName, Request, Response};
use http_body::Body;
use portcullis_core::Dialect;
use std::sync::Arc;
use tower::Service;

/// What failover needs of the service it wraps: a clone of it, driven to readiness,
/// takes each retry, and its futures run in the boxed slow path, which may move between
/// threads.
pub(crate) trait Inner<ReqB, ResB>:
    Service<Request<ReqB>, Response = Response<ResB>, Error: Into<BoxError>, Future: Send>
    + Clone
    + Send
    + 'static
{
}

impl<S, ReqB, ResB> Inner<ReqB, ResB> for S where
    S: Service<Request<ReqB>, Response = Response<ResB>, Error: Into<BoxError>, Future: Send>
        + Clone
        + Send
        + 'static
{
}

/// What failover needs of an answer's body: the frames it holds back and the error
/// events it writes are built from bytes, and it may move between threads.
pub(crate) trait AnswerBody:
    Body<Data: From<Bytes> + Send, Error: Into<BoxError>> + Send + 'static
{
}

impl<B> AnswerBody for B where
    B: Body<Data: From<Bytes> + Send, Error: Into<BoxError>> + Send + 'static
{
}

/// Request header naming a conversation, pinned to one channel (F9).
pub const CONVERSATION_HEADER: &str = "x-portcullis-conversation";

// The same names as header names, built at compile time (a lookup by `&str` parses the
// name on every request).
const CONVERSATION: HeaderName = HeaderName::from_static(CONVERSATION_HEADER);
const DEADLINE: HeaderName = HeaderName::from_static(crate::DEADLINE_HEADER);

/// What a frame held before the first content chunk is (F4).
pub use portcullis_dialects::ChunkKind;

/// Reading a provider's error answer into
/// [`ErrorFacts`](portcullis_core::failover::ErrorFacts) for the classifier (F5). The
/// vendors' error bodies are known in `portcullis-dialects` (its `providers` modules):
/// a user of `portcullis` alone gets them by default, and
/// [`FailoverLayer::error_reader`] injects another reader.
pub use portcullis_dialects::{ErrorReader, error_facts};

/// Tells what the first frames of a successful answer are; by default every data
/// frame is content. The proxy plugs in [`portcullis_dialects::chunk_kind`], which knows
/// each vendor's SSE events.
pub type ChunkClassifier = Arc<dyn Fn(Dialect, &[u8]) -> ChunkKind + Send + Sync>;
