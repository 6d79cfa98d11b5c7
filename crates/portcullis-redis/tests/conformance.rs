//! The store conformance suite of portcullis-core, unchanged, against Redis (L4, D1): the
//! Redis store makes the same decisions as the in-memory store — slots, windows and
//! billing (balances, spend caps, budgets, per-attempt settlement), to the cent.
//!
//! Every suite function runs twice, each time on its own fresh `redis-server`:
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

macro_rules! redis_conformance {
    ($($name:ident),* $(,)?) => {
        mod server_time {
            $(
                #[tokio::test]
                async fn $name() {
                    portcullis_core::store::conformance::$name(&super::server_time()).await;
                }
            )*
        }
        mod manual_clock {
            $(
                #[tokio::test]
                async fn $name() {
                    portcullis_core::store::conformance::$name(&super::manual_clock()).await;
                }
            )*
        }
    };
}

redis_conformance!(
    c1_limit_enforced_zero_unlimited,
    c3_release_exactly_once,
    c4_expired_lease_purged_at_next_check,
    c4_renewal_keeps_lease,
    slots_are_per_key,
    w1_every_tier_enforced,
    w2_anchor_at_first_use_and_rolls_by_whole_windows,
    w2_reanchor_after_idle,
    w3_images_have_own_anchor,
    w4_all_or_nothing_rejected_changes_nothing,
    w5_settle_applies_delta_and_drops_after_roll,
    w6_amount_cap_counts_reservations,
    w9_retry_after_is_time_to_reset,
    w10_rolling_window,
    l5_refund_gives_everything_back,
    u1_admit_all_is_all_or_nothing_across_subjects,
    d2_slot_and_window_decided_together,
    u1_windows_and_capacity_lease_in_one_step,
    windows_are_per_key_and_scope,
    b1_balance_and_spend_cap,
    b2_settle_may_go_below_zero,
    b3_budgets_reserve_and_roll_by_period,
    b3_concurrent_reservations_never_exceed_budget,
    b3_a_zero_period_is_no_period,
    b4_settlement_idempotent_and_pending_reconciled,
    b7_final_attempts_forgotten_open_ones_swept,
    b7_missing_tenant_record_is_its_own_refusal,
    b7_pending_listed_in_pages_and_reconciled_once,
    b7_pending_counter_follows_attempts,
    d3_books_are_kept_per_tenant,
    w8_covered_requests_skip_balance_and_spend,
    seed_balance_keeps_running_balance,
    // The whole suite in order on one server, the database flushed before each
    // function (by `store()`), as a long-lived gateway would see it.
    run_all,
);

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
