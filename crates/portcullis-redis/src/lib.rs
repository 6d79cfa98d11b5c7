//! The Redis store of portcullis: slot leases (C*), anchored windows (W*) and billing
//! (B*) kept in Redis, so every gateway instance behind a load balancer enforces one set
//! of limits and one set of books (D1–D5).
//!
//! [`RedisStore`] implements [`SlotStore`](portcullis_core::SlotStore),
//! [`WindowStore`](portcullis_core::WindowStore),
//! [`BillingStore`](portcullis_core::BillingStore),
//! [`CapacityStore`](portcullis_core::CapacityStore) and the joint decisions
//! [`JointStore`](portcullis_core::JointStore) and
//! [`ChannelStore`](portcullis_core::ChannelStore): plug it into the layers wherever the
//! in-memory store goes. It passes the same conformance suite as the in-memory store,
//! on one node and on a Redis Cluster.
//!
//! - **One node or a Cluster** (D6): [`RedisStore::connect`] takes one node URL (a
//!   Cluster member is detected) or a comma-separated list of a Cluster's nodes.
//! - **One decision, one round trip** (D2, T3): acquire, renew, in-flight, admit, view
//!   and every billing reservation each run one Lua script by SHA (`EVALSHA`); so do the
//!   joint decisions (a subject's slot with its windows, a channel's provider windows
//!   with a capacity lease). Settlements and releases of requests that end together go
//!   out as one batch script (one per Cluster slot). A `NOSCRIPT` after a restart,
//!   `SCRIPT FLUSH` or a failover is answered by sending the call again as `EVAL` with
//!   the script's text (on the node that lacked it, which caches it), within the same
//!   deadline.
//! - **Server time**: the scripts read `TIME`, so instances never disagree about
//!   windows, lease expiry or budget periods.
//! - **Bounded calls, busy is not dead** (D4, D8): a call fails with a
//!   [`StoreError`](portcullis_core::StoreError) once Redis (on a Cluster, the node it
//!   went to) has answered nothing for the deadline (default 20 ms) — a stalled or
//!   vanished Redis — while a busy Redis that keeps answering delays calls instead (up
//!   to [`busy_limit`](RedisStoreOptions::busy_limit)); the layers decide what a failure
//!   means (open, closed, local).
//! - **Cluster-ready keys** (D3): `<prefix>:{<subject>}:…`, one hash slot per subject;
//!   every key of one tenant's books (balance, its keys' spend, budgets, attempts)
//!   shares the tenant's tag, `<prefix>:{tenant:<t>}:billing:…`, because one billing
//!   decision spans them all (see [`RedisStore`'s billing section](RedisStore#billing)).
//! - **Exact money**: integers up to 2^53 − 1 ([`MAX_EXACT_MONEY`]); beyond, a call
//!   fails instead of rounding.
//!
//! The window scripts make the decisions of the in-memory store's window state
//! (`portcullis_core::window`) and the billing scripts those of
//! [`Ledger`](portcullis_core::Ledger), rule for rule (see `src/lua/`); the tests hold
//! them to it with the conformance suite of portcullis-core and a decision-by-decision
//! comparison with the in-memory store.
//!
//! **Nothing outlives its caller (D9).** A call that times out may still be carried out
//! by Redis (late, after a stall): what it may have counted — its lease, its quota
//! block's leases, its window admission, a billing block's attempt — is given back by
//! key after it, on the same ordered connection. Every give-back is keyed (a lease
//! member, a window admission's record, an attempt id), so running it twice or for
//! something never counted changes nothing, and one whose call fails is sent again
//! until it lands ([`RedisStore::give_backs`] counts them). A billing reservation the
//! caller gave up on is refunded by the caller (settling is idempotent per attempt id).
//!
//! **The books never lie (D10).** A settlement retried after a failed call learns from
//! the books' tombstones that it landed, or — finding the attempt lost — records an
//! unknown outcome, pending reconciliation. With
//! [`replica_acks`](RedisStoreOptions::replica_acks) every write is answered only once
//! that many replicas hold it.
#![warn(missing_docs)]
#![deny(unreachable_pub)]

pub mod docs;

// The test helpers shared with the integration tests (`tests/common`) name this crate
// as they see it from outside.
#[cfg(test)]
extern crate self as portcullis_redis;

mod batch;
mod client;
mod codec;
mod conn;
mod cooldowns;
mod future;
mod keys;
mod options;
mod scripts;
mod store;

pub use conn::{SHORTFALL_RECHECK, Unacked};
pub use cooldowns::CooldownSync;
pub use options::{
    DEFAULT_AMOUNT_TTL, DEFAULT_BILLING_TAG, DEFAULT_BUSY_LIMIT, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_DEADLINE, DEFAULT_PREFIX, DEFAULT_RECONNECT_MAX_DELAY, DEFAULT_REPLICA_ACK_WAIT,
    RedisStoreOptions, Unacknowledged,
};
pub use redis;
pub use store::MAX_EXACT_MONEY;
pub use store::{GiveBacks, RedisStore, RedisStoreFuture};
