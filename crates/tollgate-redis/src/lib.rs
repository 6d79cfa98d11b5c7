//! The Redis store of tollgate: slot leases (C*) and anchored windows (W*) kept in
//! Redis, so every gateway instance behind a load balancer enforces one set of limits
//! (D1–D5).
//!
//! [`RedisStore`] implements [`SlotStore`](tollgate_core::SlotStore) and
//! [`WindowStore`](tollgate_core::WindowStore): plug it into the layers wherever the
//! in-memory store goes. It passes the same conformance suite as the in-memory store.
//!
//! - **One decision, one round trip** (D2, T3): acquire, renew, in-flight, admit,
//!   settle and view each run one Lua script by SHA (`EVALSHA`); a release is one
//!   `ZREM`. A `NOSCRIPT` after a restart or `SCRIPT FLUSH` is answered by loading the
//!   script and calling it again, within the same deadline.
//! - **Server time**: the scripts read `TIME`, so instances never disagree about
//!   windows or lease expiry.
//! - **Bounded calls** (D4): every call has its own deadline (default 20 ms) and fails
//!   with a [`StoreError`](tollgate_core::StoreError) instead of hanging; the layers
//!   decide what a failure means (open, closed, local).
//! - **Cluster-ready keys** (D3): `<prefix>:{<subject>}:…`, one hash slot per subject.
//!
//! The window scripts make the decisions of
//! [`ScopeState`](tollgate_core::ScopeState), rule for rule (see `src/lua/`); the
//! tests hold them to it with the conformance suite of tollgate-core and a
//! decision-by-decision comparison with the in-memory store.
//!
//! A call that times out may still have been carried out by Redis (the answer came
//! late): an admission's reservation then stays until its windows roll, and its money
//! reservation under an amount cap until [`amount_ttl`](RedisStoreOptions::amount_ttl);
//! a slot lease until its TTL.
#![warn(missing_docs)]
#![deny(unreachable_pub)]

mod codec;
mod options;
mod scripts;
mod store;

pub use options::{
    DEFAULT_AMOUNT_TTL, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DEADLINE, DEFAULT_PREFIX,
    DEFAULT_RECONNECT_MAX_DELAY, RedisStoreOptions,
};
pub use redis;
pub use store::{RedisStore, RedisStoreFuture};
