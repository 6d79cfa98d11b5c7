//! The store conformance suite of portcullis-core, unchanged, against Redis (L4, D1): the
//! Redis store makes the same decisions as the in-memory store — slots, windows and
//! billing (balances, spend caps, budgets, per-attempt settlement), to the cent.
//!
//! Every case runs twice, each time on its own fresh `redis-server`, and ends with the
//! invariants of D9 and D10 (`assert_nothing_held`, `assert_books_exact`):
//! - `server_time::*`: time is the server's `TIME` plus an offset shared by the
//!   harness's stores (the production path; `advance` is instant, real time adds a
//!   little drift, declared as `SLACK_MS`);
//! - `manual_clock::*`: time is a manual clock sent with each call (`SLACK_MS = 0`), so
//!   the suite also runs its checks placed exactly on window and lease boundaries.

mod common;

use common::RedisServer;
use portcullis_core::store::conformance::Harness;
use portcullis_core::{Clock, ManualClock, Millis};
use portcullis_redis::{RedisStore, RedisStoreOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

async fn fresh_store(server: &RedisServer, options: RedisStoreOptions) -> RedisStore {
    let store = RedisStore::connect(&server.url(), options)
        .await
        .expect("connect to the test redis-server");
    // "A store with no state": the suite's functions never share a store.
    server.cli(&["FLUSHDB"]);
    store
}

/// Server `TIME` + a shared offset.
struct ServerTimeHarness {
    server: RedisServer,
    offset: Arc<AtomicU64>,
}

impl Harness for ServerTimeHarness {
    type Store = RedisStore;

    /// Real time passing between the suite's calls: a few ms, well under this.
    const SLACK_MS: Millis = 250;

    async fn store(&self) -> RedisStore {
        fresh_store(
            &self.server,
            common::patient().time_offset(self.offset.clone()),
        )
        .await
    }

    async fn advance(&self, d: Duration) {
        self.offset
            .fetch_add(portcullis_core::clock::millis(d), Ordering::SeqCst);
    }
}

/// A manual clock: exact.
struct ManualClockHarness {
    server: RedisServer,
    clock: ManualClock,
}

impl Harness for ManualClockHarness {
    type Store = RedisStore;

    async fn store(&self) -> RedisStore {
        fresh_store(
            &self.server,
            common::patient().manual_clock(self.clock.clone()),
        )
        .await
    }

    async fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    fn now(&self) -> Option<Millis> {
        Some(self.clock.now())
    }
}

fn server_time() -> ServerTimeHarness {
    ServerTimeHarness {
        server: RedisServer::start(),
        offset: Arc::new(AtomicU64::new(0)),
    }
}

fn manual_clock() -> ManualClockHarness {
    ManualClockHarness {
        server: RedisServer::start(),
        // A start on no calendar boundary, as the in-memory suite uses.
        clock: ManualClock::new(1_700_000_000_123),
    }
}

// Every case of the suite (the one list, in portcullis-core), each ending with the
// invariants (nothing held by nobody, books exact: D9, D10), and `run_all`: the whole
// suite in order on one server, the database flushed before each case (by `store()`),
// as a long-lived gateway would see it.
mod server_time {
    portcullis_core::conformance_cases!(#[tokio::test] async super::server_time());
}

mod manual_clock {
    portcullis_core::conformance_cases!(#[tokio::test] async super::manual_clock());
}

/// The channel-capacity suite (Q1, D5) on Redis, with exact time.
mod capacity {
    use super::*;
    use portcullis_core::capacity::conformance::{Harness as CapacityHarness, run_all};

    impl CapacityHarness for ManualClockHarness {
        type Store = RedisStore;
        async fn store(&self) -> RedisStore {
            fresh_store(
                &self.server,
                common::patient().manual_clock(self.clock.clone()),
            )
            .await
        }
        async fn advance(&self, d: Duration) {
            self.clock.advance(d);
        }
    }

    #[tokio::test]
    async fn capacity_conformance_suite_runs_unchanged_on_redis() {
        run_all(&super::manual_clock()).await;
    }
}
