//! tower layers that give any hyper, axum or tonic service the admission control of an
//! LLM / model-API gateway.
//!
//! | layer | feature | concern |
//! |---|---|---|
//! | [`ConcurrencySlotLayer`] | `slots` | per-subject in-flight slots, leases that heal (C1–C5) |
//! | [`AnchoredWindowLayer`] | `windows` | anchored multi-tier quotas, amount cap, rolling RPM (W1–W10) |
//! | [`BillingGateLayer`] | `billing` | balance / spend cap gate, budgets, per-attempt settlement, usage records (B1–B7) |
//! | [`UpstreamLimitLayer`] | `upstream` | channel choice under provider RPM/RPH/RPD/TPM per credential, model, vendor (U1–U4) |
//! | [`FailoverLayer`] | `failover` | attempts across channels, provider-error classification, first-chunk gate, retry budget, health, sticky conversations (F1–F11) |
//! | [`CapacityQueueLayer`] | `capacity` | per-channel in-flight capacity, bounded tenant-fair queue (Q1–Q5) |
//! | [`ErrorMappingLayer`] | `errors` | every rejection in the client's dialect (E1–E4) |
//!
//! # How a layer is built
//!
//! Every layer with state is built one way, as tower's own are configured:
//!
//! - `XLayer { config, state: Arc<…> }`. `new` takes what the layer cannot work
//!   without (a store, a registry), makes the **state** — failure counters, counters,
//!   queues, lease renewals, the settlement retry queue, health — and sets a default
//!   **config**. The builder methods change the config only, and only of the layer
//!   they are called on (it is owned, so a clone configured apart keeps the clone's
//!   own; services built before keep theirs).
//! - The state is made once: every clone of the layer and every service it builds —
//!   every route of an axum router, which calls `layer()` once per route — shares it,
//!   so stats, queues and renewals are the layer's, not the route's. The one builder
//!   that makes it afresh is [`FailoverLayer::config`], whose health book, pins and
//!   retry budget are built from its settings.
//! - `layer()` clones the config and the state's `Arc` into the service, which reads
//!   both through one `Arc`; a service is as cheap to clone as its inner service.
//! - Each layer decides in its `decide` module, sans I/O: a first step (a store
//!   question; for failover, the first attempt), then the next step on each answer
//!   (the window layer's `Step` machine is the model).
//!   It is shared by the synchronous path in `call` (the in-memory store answers at
//!   once: no state machine, no boxing) and the response future, which awaits what
//!   is pending.
//! - Every response future is one skeleton (refused, deciding, called and holding the
//!   guard in the body); a layer adds only what it waits for and what it does around
//!   the call.
//!
//! # What the layers read from a request
//!
//! Every request extension the layers read or write — who puts it there, who reads it,
//! and when — is tabled in [`extensions`]. The ones an application supplies:
//!
//! - [`Subject`] (request extension): whom to limit and their policies. Put it there
//!   in an authentication layer of your own, or configure the layer with a
//!   [`SubjectExtractor`] (for example [`HeaderKey`]) to build it from the request (L6).
//!   A request with no subject is refused with 40101 (401), never a panic.
//! - [`Demand`] (request extension, optional): estimated tokens, images, videos and
//!   money. Without one, a request counts as one request and nothing else.
//! - [`UsageRecorder`] (request extension): the layers insert one if absent. Whatever
//!   produces the response records the actual [`Usage`] into it before the response
//!   body ends; the window layer settles tokens and money from it at the end of the
//!   body (W5). With no usage recorded, the reservation stands as the charge — except
//!   for a request dropped before any answer with nothing recorded, which never left
//!   (a client that gave up while queued) and is refunded. Code that hands the request
//!   to someone who may bill for it calls `UsageRecorder::mark_unknown` just before.
//!   A forwarder that fails with an [`UpstreamError`] says how; a request the provider
//!   never saw (no connection) is refunded whatever was marked. Every layer decides
//!   settle-or-refund with the one rule [`settle`].
//! - [`Dialect`] (request extension, optional): the error format; otherwise the
//!   [`ErrorMappingLayer`] picks it from the path.
//!
//! Everything a layer holds for a request — a slot, window reservations — is held until
//! the response **body** ends, errors or is dropped (L3).
//!
//! [`Subject`]: portcullis_core::Subject
//! [`Demand`]: portcullis_core::Demand
//! [`UsageRecorder`]: portcullis_core::UsageRecorder
//! [`Usage`]: portcullis_core::Usage
//! [`Dialect`]: portcullis_core::Dialect
//! [`UpstreamError`]: portcullis_core::UpstreamError
//! [`settle`]: portcullis_core::attempt::settle
#![warn(missing_docs)]
#![deny(unreachable_pub)]

// First: the macros in it are used by the modules below.
#[macro_use]
mod macros;

pub mod body;
pub mod docs;
pub mod extensions;
pub mod extract;

// What the layers share, compiled with the layers that use it.
cfg_any! {
    ["slots", "windows", "billing", "capacity", "upstream", "failover"]
    pub mod failure;
    mod gauge;
    mod spawn;
    pub use failure::{FailureMode, FailureStats};
    #[cfg(feature = "metrics")]
    pub use gauge::bind_metrics;
}
cfg_any! {
    ["slots", "windows", "billing", "capacity", "upstream"]
    mod future;
}
cfg_any! {
    ["slots", "windows", "upstream", "capacity"]
    mod joint;
}
cfg_any! {
    ["slots", "windows", "upstream", "failover", "capacity"]
    pub mod time;
}
cfg_any! {
    ["slots", "windows"]
    mod subject;
}

#[cfg(feature = "billing")]
pub mod billing;
#[cfg(feature = "capacity")]
pub mod capacity;
#[cfg(feature = "errors")]
pub mod error_map;
#[cfg(feature = "failover")]
pub mod failover;
#[cfg(feature = "slots")]
pub mod slot;
#[cfg(feature = "upstream")]
pub mod upstream;
#[cfg(feature = "windows")]
pub mod window;

pub use extract::{FromExtensions, HeaderKey, SubjectExtractor};
pub use portcullis_core as core;

#[cfg(feature = "billing")]
pub use billing::{
    BillingGate, BillingGateLayer, BillingProfile, NotBilled, UsageRecord, UsageSink,
};
#[cfg(feature = "capacity")]
pub use capacity::{CapacityQueue, CapacityQueueLayer};
#[cfg(feature = "errors")]
pub use error_map::{ErrorMapping, ErrorMappingLayer};
#[cfg(feature = "failover")]
pub use failover::{Failover, FailoverLayer};
#[cfg(feature = "slots")]
pub use slot::{ConcurrencySlot, ConcurrencySlotLayer};
#[cfg(feature = "upstream")]
pub use upstream::{UpstreamLimit, UpstreamLimitLayer};
#[cfg(feature = "windows")]
pub use window::{AnchoredWindow, AnchoredWindowLayer};

/// Request header: how many more milliseconds the client is willing to wait, for
/// the capacity queue (Q3) and failover's waits (F6).
pub const DEADLINE_HEADER: &str = "x-portcullis-deadline-ms";

/// The error type of the layers: a boxed error that is a
/// [`Rejection`](portcullis_core::Rejection) when a layer refused.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
