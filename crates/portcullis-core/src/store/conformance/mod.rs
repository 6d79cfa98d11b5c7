//! The store conformance suite: every slot (C*), window (W*) and billing (B*) rule that
//! a store decides, written once against the store traits so every store
//! implementation is held to the same contract (L4, D1).
//!
//! A store proves itself by implementing [`Harness`] and calling each public function
//! of this module from its own test (so a failure names the rule), or [`run_all`].
//! Functions are named after the rule they check.
//!
//! Time: the suite only moves time with [`Harness::advance`], in steps of at least
//! 500 ms, on windows and budget periods of at least 2 s and lease TTLs of 2 s, so a
//! harness whose store reads real time (a Redis server's `TIME`, moved by sleeping or by
//! shifting it) can run it. Such a harness declares how far its store's time may drift
//! from the nominal schedule in [`Harness::SLACK_MS`] (it must stay below 500 ms); times
//! and retry-afters are then compared within that slack, and the checks placed exactly
//! on a window, period or TTL boundary run only for exact clocks (`SLACK_MS == 0`). Only
//! the W10 check needs more than 15 s of advanced time (a rolling window is 60 s long).
//!
//! Billing figures are exact: money is integer minor units and every store must keep
//!
//! Every case ends with the invariants of [`invariants`]: nothing held by nobody and
//! books exact (D9, D10), checked on the store the case used ([`assert_case_invariants`]).
//! A case returns its [`Case`] for that: the store and what the case touched, which the
//! suite's helpers record as the case goes.
//!
//! The cases are listed once, in [`conformance_cases!`](crate::conformance_cases): it
//! generates one test per case for a store's test file, and [`run_all`].

mod billing;
mod books;
mod corrections;
mod helpers;
pub mod invariants;
mod joint;
#[cfg(test)]
mod memory_tests;
mod slots;
mod windows;

pub use billing::*;
pub use books::*;
pub use corrections::*;
pub use invariants::{
    Case, Footprint, Ledger, Store, assert_books_exact, assert_case_invariants, assert_nothing_held,
};
pub use joint::*;
pub use slots::*;
pub use windows::*;

use crate::clock::Millis;
use std::time::Duration;

/// What a store implementation provides to run the suite.
///
/// `async fn` in this trait is deliberate: the suite awaits the harness directly and
/// never needs its futures to be `Send`.
#[allow(async_fn_in_trait)]
pub trait Harness {
    /// The store under test.
    type Store: Store;

    /// Largest difference, in ms, between the store's notion of elapsed time and the
    /// sum of [`advance`](Self::advance) calls (0 for a manual clock). Must be < 500.
    const SLACK_MS: Millis = 0;

    /// A store with no state (every key unknown). Stores from one harness share its
    /// time.
    async fn store(&self) -> Self::Store;

    /// Moves the time of the harness's stores forward by `d`.
    async fn advance(&self, d: Duration);

    /// The stores' current time, when the harness knows it exactly (a manual clock);
    /// enables the checks of absolute anchor positions.
    fn now(&self) -> Option<Millis> {
        None
    }
}

/// The suite's cases, listed once; generates a store's tests or [`run_all`].
///
/// In a store's test file, one test per case (named after it, each on a harness of its
/// own from the expression), each ending with [`assert_case_invariants`], and a
/// `run_all` test (the whole suite in order on one harness):
///
/// ```ignore
/// // async tests (any test attribute):
/// portcullis_core::conformance_cases!(#[tokio::test] async super::fresh_harness());
/// // a store whose futures are ready at once, run by a `block_on` of the test file's:
/// portcullis_core::conformance_cases!(#[test] block_on(super::block_on) MemoryHarness::new());
/// ```
///
/// A new case is one more name in the list below (and its `pub async fn`).
#[macro_export]
macro_rules! conformance_cases {
    // The list: every case, in `run_all`'s order, handed to the arm `$($then)*` names.
    (@list $($then:tt)*) => {
        $crate::conformance_cases! { $($then)* ;
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
            b8_a_cost_above_its_hold_is_charged_in_full_and_refuses_the_next,
            b4_settlement_idempotent_and_pending_reconciled,
            b7_final_attempts_forgotten_open_ones_swept,
            b7_missing_tenant_record_is_its_own_refusal,
            b7_pending_listed_in_pages_and_reconciled_once,
            b7_pending_counter_follows_attempts,
            b7_a_correction_applies_once_and_moves_balance_spend_and_budgets,
            d3_books_are_kept_per_tenant,
            w8_covered_requests_skip_balance_and_spend,
            seed_balance_keeps_running_balance,
            seed_key_spend_writes_only_a_missing_record,
        }
    };
    (@run_all ; $($case:ident),* $(,)?) => {
        /// Runs every case of the suite, in order, on stores from `h`, each followed by
        /// its invariants ([`assert_case_invariants`]).
        pub async fn run_all<H: Harness>(h: &H) {
            $(
                // Captured, and shown with a failure: which case it was.
                eprintln!("conformance case {}", stringify!($case));
                assert_case_invariants(&$case(h).await).await;
            )*
        }
    };
    (@async [$attr:meta] [$harness:expr] ; $($case:ident),* $(,)?) => {
        $(
            #[$attr]
            async fn $case() {
                let h = $harness;
                let case = $crate::store::conformance::$case(&h).await;
                $crate::store::conformance::assert_case_invariants(&case).await;
            }
        )*
        /// The whole suite in order on one harness, each store fresh from it, as a
        /// long-lived gateway would see it.
        #[$attr]
        async fn run_all() {
            $crate::store::conformance::run_all(&$harness).await;
        }
    };
    (@sync [$attr:meta] [$block_on:path] [$harness:expr] ; $($case:ident),* $(,)?) => {
        $(
            #[$attr]
            fn $case() {
                $block_on(async {
                    let h = $harness;
                    let case = $crate::store::conformance::$case(&h).await;
                    $crate::store::conformance::assert_case_invariants(&case).await;
                })
            }
        )*
        #[$attr]
        fn run_all() {
            $block_on($crate::store::conformance::run_all(&$harness))
        }
    };
    (#[$attr:meta] async $harness:expr) => {
        $crate::conformance_cases!(@list @async [$attr] [$harness]);
    };
    (#[$attr:meta] block_on($block_on:path) $harness:expr) => {
        $crate::conformance_cases!(@list @sync [$attr] [$block_on] [$harness]);
    };
}

crate::conformance_cases!(@list @run_all);
