//! The domain core of portcullis: plain types and functions, no I/O, no async runtime.
//!
//! - [`clock`]: time as the limiters see it, with a [`ManualClock`] for tests.
//! - [`subject`] and [`policy`]: whom we limit and with what (the contract's vocabulary).
//! - [`window`]: anchored-window maths, the amount cap and the rolling window (W*).
//! - [`slots`]: timestamped slot leases (C*).
//! - [`capacity`]: per-channel capacity leases and the fair queue (Q*).
//! - [`demand`]: what a request asks for and what it used (W5, B2).
//! - [`rejection`]: the one typed rejection and the gateway code table (L2, E1).
//! - [`failover`]: classification of provider errors, backoff, health, sticky pins, the
//!   walk over a request's channels and the next step after each attempt (F*).
//! - [`attempt`]: the forwarder's typed failure and the one settle-or-refund rule of
//!   every guard (B4, L5).
//! - [`upstream`]: provider limits per credential, model and vendor, cooldowns (U*).
//! - [`store`]: the store traits and the in-memory store (L4).
//! - [`outage`]: what the log tells of an outage, with counts, never a line per failure.
//! - [`id`]: the one generator of unique ids (attempts, requests, instances, leases).
//!
//! # What is public, and why
//!
//! Public is what a user of the layers, or the author of a store, touches:
//! - the data a request carries and the rules it is held to: [`Subject`], [`Policy`],
//!   [`Tier`], [`Demand`], [`Usage`], [`Price`], [`Rejection`] and its code table;
//! - the store traits with their arguments and answers, the in-memory store and, behind
//!   the `conformance` feature, the suite every store implementation runs;
//! - the domain logic the `portcullis` layers are built from (the fair queue, failover's
//!   classification and walk, the one settle-or-refund rule, the upstream registry),
//!   plain functions a gateway of one's own can reuse;
//! - [`ManualClock`] and the memory store's synchronous reads (`in_flight_now`,
//!   `view_now`), for tests.
//!
//! Crate-private are the means: the memory store's sharded map and its idle test, the
//! window state it keeps (anchor groups, tier counts, the rolling log, window index
//! arithmetic), its synchronous acquire / admit / renew, and failover's tuning
//! constants. `MemoryStore::release_now` and `settle_now` are public but hidden: the
//! `portcullis` crate's benches call them outside a runtime.
#![warn(missing_docs)]
#![deny(unreachable_pub)]

pub mod attempt;
pub mod billing;
pub mod blocks;
pub mod capacity;
pub mod clock;
pub mod demand;
pub mod dialect;
pub mod failover;
pub mod homes;
pub mod id;
pub mod money;
pub mod outage;
pub mod policy;
pub mod price;
pub mod rejection;
pub mod slots;
pub mod store;
pub mod subject;
pub mod upstream;
pub mod window;

#[cfg(test)]
mod window_model_tests;
#[cfg(test)]
mod window_tests;

pub use attempt::{CallEnd, Settle, UpstreamError, UpstreamFailure};
pub use billing::{
    AccountView, AttemptId, AttemptRef, AttemptState, BillingDecision, BillingOutcome,
    BillingRequest, Books, Budget, Corrected, Correction, Ledger, PendingAttempt, PendingTotal,
    Reconcile, Reconciled, Refusal,
};
pub use capacity::{
    Candidates, CapacityStore, ChannelRef, Chosen, FairQueue, QueueFull, QueueLimits, TenantWeight,
};
pub use clock::{Clock, ManualClock, Millis, SystemClock};
pub use demand::{Demand, ModelId, Usage, UsageRecorder, UsageReport};
pub use dialect::{Dialect, ProviderError};
pub use money::{MAX_STORABLE_MONEY, Money};
pub use policy::{Dimension, Policy, Tier};
pub use price::Price;
pub use rejection::{
    GatewayCode, LayerKind, RateLimitInfo, Rejection, subscription_message, window_rejection,
};
pub use slots::{Lease, LeaseId, LeaseSet};
pub use store::memory::MemoryStore;
pub use store::{
    Admission, BillingStore, BoxStoreFuture, CapacityTake, ChannelStore, DynReconcile,
    JointAdmission, JointDecision, JointItem, JointSettle, JointStore, MAX_PENDING_PAGE,
    ReconcileStore, SlotAsk, SlotDecision, SlotStore, StoreError, StoreErrorKind, StoreResult,
    WindowAsk, WindowStore,
};
pub use subject::{AdmittedUnder, Fallback, Resolved, Scope, Subject, SubjectKey, Subscription};
pub use window::{Exceeded, ExceededLimit, LimitView, Outcome, WindowTicket};
