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
//! every cent.
use super::{Admission, BillingStore, ReconcileStore, SlotDecision, SlotStore, WindowStore};
use crate::billing::{
    AccountView, AttemptId, AttemptRef, AttemptState, BillingDecision, BillingOutcome,
    BillingRequest, Books, Budget, DEFAULT_ATTEMPT_LIFETIME_MS, PendingAttempt, PendingTotal,
    Reconcile, Reconciled, Refusal,
};
use crate::clock::Millis;
use crate::demand::{Demand, Usage};
use crate::money::Money;
use crate::policy::{AnchorGroup, Dimension, Policy, Tier};
use crate::slots::LeaseId;
use crate::subject::{Scope, SubjectKey};
use crate::window::{Exceeded, LimitView, Outcome, ROLLING_WINDOW_MS, WindowTicket};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// What a store implementation provides to run the suite.
///
/// `async fn` in this trait is deliberate: the suite awaits the harness directly and
/// never needs its futures to be `Send`.
#[allow(async_fn_in_trait)]
pub trait Harness {
    /// The store under test.
    type Store: super::JointStore + super::ChannelStore + BillingStore + ReconcileStore;

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

/// Runs every check of the suite, in order, on stores from `h`.
pub async fn run_all<H: Harness>(h: &H) {
    c1_limit_enforced_zero_unlimited(h).await;
    c3_release_exactly_once(h).await;
    c4_expired_lease_purged_at_next_check(h).await;
    c4_renewal_keeps_lease(h).await;
    slots_are_per_key(h).await;
    w1_every_tier_enforced(h).await;
    w2_anchor_at_first_use_and_rolls_by_whole_windows(h).await;
    w2_reanchor_after_idle(h).await;
    w3_images_have_own_anchor(h).await;
    w4_all_or_nothing_rejected_changes_nothing(h).await;
    w5_settle_applies_delta_and_drops_after_roll(h).await;
    w6_amount_cap_counts_reservations(h).await;
    w9_retry_after_is_time_to_reset(h).await;
    w10_rolling_window(h).await;
    l5_refund_gives_everything_back(h).await;
    u1_admit_all_is_all_or_nothing_across_subjects(h).await;
    d2_slot_and_window_decided_together(h).await;
    u1_windows_and_capacity_lease_in_one_step(h).await;
    windows_are_per_key_and_scope(h).await;
    b1_balance_and_spend_cap(h).await;
    b2_settle_may_go_below_zero(h).await;
    b3_budgets_reserve_and_roll_by_period(h).await;
    b3_concurrent_reservations_never_exceed_budget(h).await;
    b3_a_zero_period_is_no_period(h).await;
    b4_settlement_idempotent_and_pending_reconciled(h).await;
    b7_final_attempts_forgotten_open_ones_swept(h).await;
    b7_missing_tenant_record_is_its_own_refusal(h).await;
    b7_pending_listed_in_pages_and_reconciled_once(h).await;
    b7_pending_counter_follows_attempts(h).await;
    d3_books_are_kept_per_tenant(h).await;
    w8_covered_requests_skip_balance_and_spend(h).await;
    seed_balance_keeps_running_balance(h).await;
}

// ---------------------------------------------------------------------------------
// Helpers

const LONG_TTL: Millis = 600_000;

fn key(s: &str) -> SubjectKey {
    SubjectKey::from(format!("conformance:{s}"))
}

fn secs(s: u64, limit: u64) -> Tier {
    Tier::new(Duration::from_secs(s), limit)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn demand(tokens: u64, images: u64, videos: u64, money: Money) -> Demand {
    Demand {
        tokens,
        images,
        videos,
        money,
    }
}

fn tokens_used(total: u64) -> Usage {
    // Split over the token kinds: the windows count all of them (W5).
    let cached = total / 4;
    let output = total / 3;
    Usage {
        input_tokens: total - cached - output,
        cached_input_tokens: cached,
        output_tokens: output,
        ..Usage::default()
    }
}

async fn acquire<S: SlotStore>(s: &S, k: &SubjectKey, limit: u32, ttl: Millis) -> SlotDecision {
    s.acquire(k, limit, ttl)
        .await
        .expect("acquire: store error")
}

async fn acquired<S: SlotStore>(s: &S, k: &SubjectKey, limit: u32, ttl: Millis) -> LeaseId {
    match acquire(s, k, limit, ttl).await {
        SlotDecision::Acquired(id) => id,
        d => panic!("{k:?}: expected a slot under limit {limit}, got {d:?}"),
    }
}

async fn in_flight<S: SlotStore>(s: &S, k: &SubjectKey) -> u32 {
    s.in_flight(k).await.expect("in_flight: store error")
}

async fn release<S: SlotStore>(s: &S, k: &SubjectKey, l: LeaseId) {
    s.release(k, l).await.expect("release: store error");
}

async fn renew<S: SlotStore>(s: &S, k: &SubjectKey, l: LeaseId, ttl: Millis) -> bool {
    s.renew(k, l, ttl).await.expect("renew: store error")
}

async fn admit<S: WindowStore>(
    s: &S,
    k: &SubjectKey,
    scope: Scope,
    p: &Arc<Policy>,
    d: Demand,
) -> Admission {
    s.admit(k, scope, p, &d).await.expect("admit: store error")
}

async fn admitted<S: WindowStore>(
    s: &S,
    k: &SubjectKey,
    p: &Arc<Policy>,
    d: Demand,
) -> WindowTicket {
    match admit(s, k, Scope::Key, p, d).await {
        Admission::Admitted(t) => t,
        Admission::Exceeded(e) => panic!("{k:?}: expected {d:?} to be admitted, got {e:?}"),
    }
}

async fn rejected<S: WindowStore>(s: &S, k: &SubjectKey, p: &Arc<Policy>, d: Demand) -> Exceeded {
    match admit(s, k, Scope::Key, p, d).await {
        Admission::Exceeded(e) => e,
        Admission::Admitted(t) => panic!("{k:?}: expected {d:?} to be rejected, admitted {t:?}"),
    }
}

async fn settle<S: WindowStore>(s: &S, k: &SubjectKey, t: WindowTicket, o: Outcome) {
    s.settle(k, Scope::Key, t, o)
        .await
        .expect("settle: store error");
}

async fn view<S: WindowStore>(
    s: &S,
    k: &SubjectKey,
    scope: Scope,
    p: &Arc<Policy>,
) -> Vec<LimitView> {
    s.view(k, scope, p).await.expect("view: store error")
}

/// The usage-view line of one tier (`window_ms` 0 for the amount cap).
fn line(v: &[LimitView], d: Dimension, window_ms: Millis) -> LimitView {
    *v.iter()
        .find(|l| l.dimension == d && l.tier.window_ms == window_ms)
        .unwrap_or_else(|| panic!("no {d} tier of {window_ms} ms in the view {v:?}"))
}

fn used(v: &[LimitView], d: Dimension, window_ms: Millis) -> u64 {
    line(v, d, window_ms).used
}

fn resets_at(v: &[LimitView], d: Dimension, window_ms: Millis) -> Millis {
    line(v, d, window_ms)
        .resets_at
        .unwrap_or_else(|| panic!("{d} tier of {window_ms} ms has no reset time: {v:?}"))
}

/// The exceeded limits as (dimension, window) pairs, sorted.
fn limits_of(e: &Exceeded) -> Vec<(Dimension, Millis)> {
    let mut v: Vec<_> = e
        .limits
        .iter()
        .map(|l| (l.dimension, l.tier.window_ms))
        .collect();
    v.sort();
    v
}

fn retry_of(e: &Exceeded, d: Dimension, window_ms: Millis) -> Option<Millis> {
    e.limits
        .iter()
        .find(|l| l.dimension == d && l.tier.window_ms == window_ms)
        .unwrap_or_else(|| panic!("{d} tier of {window_ms} ms is not exceeded: {e:?}"))
        .retry_after_ms
}

/// `actual` equals `expected` within the harness's slack.
#[track_caller]
fn assert_near<H: Harness>(actual: Millis, expected: Millis, what: &str) {
    assert!(
        actual.abs_diff(expected) <= H::SLACK_MS,
        "{what}: got {actual} ms, expected {expected} ms (slack {} ms)",
        H::SLACK_MS
    );
}

#[track_caller]
fn assert_retry<H: Harness>(actual: Option<Millis>, expected: Millis, what: &str) {
    let actual = actual.unwrap_or_else(|| panic!("{what}: no retry-after, expected {expected} ms"));
    assert_near::<H>(actual, expected, what);
}

fn exact<H: Harness>() -> bool {
    H::SLACK_MS == 0
}

// ---------------------------------------------------------------------------------
// Concurrency slots (C1–C5)

/// C1, C5: at most `limit` live leases per subject; 0 means unlimited; the in-flight
/// count is the number of live leases.
pub async fn c1_limit_enforced_zero_unlimited<H: Harness>(h: &H) {
    let s = h.store().await;
    let k = key("c1");
    assert_eq!(in_flight(&s, &k).await, 0);
    let a = acquired(&s, &k, 2, LONG_TTL).await;
    let b = acquired(&s, &k, 2, LONG_TTL).await;
    assert_ne!(a, b, "two live leases share an id");
    assert_eq!(in_flight(&s, &k).await, 2);
    assert_eq!(
        acquire(&s, &k, 2, LONG_TTL).await,
        SlotDecision::Full { in_flight: 2 }
    );
    // A lower limit (the policy changed) sees every live lease.
    assert_eq!(
        acquire(&s, &k, 1, LONG_TTL).await,
        SlotDecision::Full { in_flight: 2 }
    );
    // The refused attempts took nothing.
    assert_eq!(in_flight(&s, &k).await, 2);
    release(&s, &k, a).await;
    assert_eq!(in_flight(&s, &k).await, 1);
    let c = acquired(&s, &k, 2, LONG_TTL).await;
    assert_eq!(in_flight(&s, &k).await, 2);
    release(&s, &k, b).await;
    release(&s, &k, c).await;
    assert_eq!(in_flight(&s, &k).await, 0);

    // 0 = unlimited.
    let u = key("c1:unlimited");
    let mut ids = Vec::new();
    for _ in 0..50 {
        ids.push(acquired(&s, &u, 0, LONG_TTL).await);
    }
    assert_eq!(in_flight(&s, &u).await, 50);
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 50, "lease ids must be unique");
    for id in ids {
        release(&s, &u, id).await;
    }
    assert_eq!(in_flight(&s, &u).await, 0);
}

/// C3: a lease is released exactly once; a second (stale) release is harmless and
/// never frees a slot someone else holds.
pub async fn c3_release_exactly_once<H: Harness>(h: &H) {
    let s = h.store().await;
    let k = key("c3");
    let a = acquired(&s, &k, 1, LONG_TTL).await;
    release(&s, &k, a).await;
    assert_eq!(in_flight(&s, &k).await, 0);
    release(&s, &k, a).await;
    assert_eq!(in_flight(&s, &k).await, 0, "double release went below zero");
    let b = acquired(&s, &k, 1, LONG_TTL).await;
    // A late duplicate release of `a` must not free `b`'s slot.
    release(&s, &k, a).await;
    assert_eq!(in_flight(&s, &k).await, 1);
    assert_eq!(
        acquire(&s, &k, 1, LONG_TTL).await,
        SlotDecision::Full { in_flight: 1 }
    );
    assert!(
        !renew(&s, &k, a, LONG_TTL).await,
        "a released lease was renewed"
    );
    assert!(renew(&s, &k, b, LONG_TTL).await);
    release(&s, &k, b).await;
    assert_eq!(in_flight(&s, &k).await, 0);
    let c = acquired(&s, &k, 1, LONG_TTL).await;
    release(&s, &k, c).await;
    assert_eq!(in_flight(&s, &k).await, 0);
}

/// C4: a lease older than its TTL stops counting and is purged at the next admission
/// check, so a crashed holder's slot heals by itself.
pub async fn c4_expired_lease_purged_at_next_check<H: Harness>(h: &H) {
    const TTL: Millis = 2_000;
    let s = h.store().await;
    let k = key("c4:purge");
    let crashed = acquired(&s, &k, 1, TTL).await;
    h.advance(ms(1_500)).await;
    assert_eq!(
        acquire(&s, &k, 1, TTL).await,
        SlotDecision::Full { in_flight: 1 }
    );
    if exact::<H>() {
        h.advance(ms(499)).await; // 1 ms before the TTL
        assert_eq!(in_flight(&s, &k).await, 1);
        assert_eq!(
            acquire(&s, &k, 1, TTL).await,
            SlotDecision::Full { in_flight: 1 }
        );
        h.advance(ms(1)).await; // exactly at the TTL: expired
    } else {
        h.advance(ms(1_000)).await;
    }
    assert_eq!(in_flight(&s, &k).await, 0, "an expired lease still counts");
    let fresh = acquired(&s, &k, 1, TTL).await;
    assert_eq!(in_flight(&s, &k).await, 1);
    // The crashed holder's lease is gone: renewing fails, releasing is harmless.
    assert!(!renew(&s, &k, crashed, TTL).await);
    release(&s, &k, crashed).await;
    assert_eq!(in_flight(&s, &k).await, 1);
    assert_eq!(
        acquire(&s, &k, 1, TTL).await,
        SlotDecision::Full { in_flight: 1 }
    );
    release(&s, &k, fresh).await;
    assert_eq!(in_flight(&s, &k).await, 0);
}

/// C4: renewing a running request's lease keeps it counted past its first TTL; once
/// renewals stop it expires a TTL after the last one.
pub async fn c4_renewal_keeps_lease<H: Harness>(h: &H) {
    const TTL: Millis = 2_000;
    let s = h.store().await;
    let k = key("c4:renew");
    let a = acquired(&s, &k, 1, TTL).await;
    h.advance(ms(1_500)).await;
    assert!(renew(&s, &k, a, TTL).await); // now expires at 3.5 s
    h.advance(ms(1_500)).await; // 3.0 s: past the first TTL
    assert_eq!(in_flight(&s, &k).await, 1);
    assert_eq!(
        acquire(&s, &k, 1, TTL).await,
        SlotDecision::Full { in_flight: 1 }
    );
    assert!(renew(&s, &k, a, TTL).await); // now expires at 5.0 s
    h.advance(ms(1_500)).await; // 4.5 s
    assert_eq!(
        acquire(&s, &k, 1, TTL).await,
        SlotDecision::Full { in_flight: 1 }
    );
    h.advance(ms(1_000)).await; // 5.5 s: no renewal since 3.0 s
    assert!(!renew(&s, &k, a, TTL).await, "an expired lease was renewed");
    assert_eq!(in_flight(&s, &k).await, 0);
    let b = acquired(&s, &k, 1, TTL).await;
    release(&s, &k, b).await;
    assert_eq!(in_flight(&s, &k).await, 0);
}

/// C1: slots are counted per subject key; a release under the wrong key frees nothing.
pub async fn slots_are_per_key<H: Harness>(h: &H) {
    let s = h.store().await;
    let (k1, k2) = (key("slots:1"), key("slots:2"));
    let a = acquired(&s, &k1, 1, LONG_TTL).await;
    let b = acquired(&s, &k2, 1, LONG_TTL).await;
    assert_eq!(
        acquire(&s, &k1, 1, LONG_TTL).await,
        SlotDecision::Full { in_flight: 1 }
    );
    assert_eq!(
        acquire(&s, &k2, 1, LONG_TTL).await,
        SlotDecision::Full { in_flight: 1 }
    );
    release(&s, &k2, a).await;
    assert_eq!(in_flight(&s, &k1).await, 1);
    assert_eq!(in_flight(&s, &k2).await, 1);
    release(&s, &k1, a).await;
    assert_eq!(in_flight(&s, &k1).await, 0);
    assert_eq!(in_flight(&s, &k2).await, 1);
    release(&s, &k2, b).await;
    assert_eq!(in_flight(&s, &k2).await, 0);
}

// ---------------------------------------------------------------------------------
// Anchored windows (W1–W10)

/// W1: every tier of a dimension is enforced, each on its own window.
pub async fn w1_every_tier_enforced<H: Harness>(h: &H) {
    let s = h.store().await;
    let k = key("w1");
    let p = Arc::new(
        Policy::default()
            .with_requests(secs(2, 2))
            .with_requests(secs(10, 3)),
    );
    admitted(&s, &k, &p, Demand::tokens(1)).await;
    admitted(&s, &k, &p, Demand::tokens(1)).await;
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    assert_eq!(limits_of(&e), [(Dimension::Requests, 2_000)]);
    assert_eq!(e.limits[0].used, 2);
    assert_eq!(e.limits[0].tier.limit, 2);
    assert_retry::<H>(e.retry_after_ms(), 2_000, "W1 2 s tier");

    h.advance(ms(2_500)).await;
    admitted(&s, &k, &p, Demand::tokens(1)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(used(&v, Dimension::Requests, 2_000), 1);
    assert_eq!(used(&v, Dimension::Requests, 10_000), 3);
    // The 2 s tier has room; the 10 s tier does not.
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    assert_eq!(limits_of(&e), [(Dimension::Requests, 10_000)]);
    assert_eq!(e.limits[0].used, 3);
    assert_retry::<H>(e.retry_after_ms(), 7_500, "W1 10 s tier");
}

/// W2: a window starts at the first use and lasts the tier's length; afterwards it
/// moves on by whole window lengths from that anchor (not from calendar boundaries and
/// not from the later use).
pub async fn w2_anchor_at_first_use_and_rolls_by_whole_windows<H: Harness>(h: &H) {
    let s = h.store().await;
    let k = key("w2:anchor");
    // The 20 s tier keeps the group in use, so the 4 s windows roll on from the anchor.
    let p = Arc::new(
        Policy::default()
            .with_requests(secs(4, 2))
            .with_requests(secs(20, 10)),
    );
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(
        line(&v, Dimension::Requests, 4_000).resets_at,
        None,
        "no use, no window yet"
    );
    assert_eq!(used(&v, Dimension::Requests, 4_000), 0);

    let first_use = h.now();
    let t = admitted(&s, &k, &p, Demand::tokens(1)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    let r = resets_at(&v, Dimension::Requests, 4_000);
    let anchor = r - 4_000;
    assert_eq!(t.anchors[AnchorGroup::RequestsTokens.index()], Some(anchor));
    assert_eq!(resets_at(&v, Dimension::Requests, 20_000), anchor + 20_000);
    if let Some(now) = first_use {
        assert_eq!(anchor, now, "the anchor is the time of the first use");
    }

    h.advance(ms(1_000)).await;
    admitted(&s, &k, &p, Demand::tokens(1)).await;
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    assert_eq!(limits_of(&e), [(Dimension::Requests, 4_000)]);
    assert_retry::<H>(e.retry_after_ms(), 3_000, "W2 at 1 s");
    h.advance(ms(2_500)).await;
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    assert_retry::<H>(e.retry_after_ms(), 500, "W2 at 3.5 s");
    if exact::<H>() {
        h.advance(ms(499)).await;
        let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
        assert_eq!(e.retry_after_ms(), Some(1), "1 ms before the window ends");
        h.advance(ms(1)).await; // exactly anchor + 4 s: the next window
    } else {
        h.advance(ms(1_000)).await; // 4.5 s
    }
    let t = admitted(&s, &k, &p, Demand::tokens(1)).await;
    assert_eq!(t.anchors[AnchorGroup::RequestsTokens.index()], Some(anchor));
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(
        used(&v, Dimension::Requests, 4_000),
        1,
        "the 4 s count reset"
    );
    assert_eq!(used(&v, Dimension::Requests, 20_000), 3);
    assert_eq!(resets_at(&v, Dimension::Requests, 4_000), anchor + 8_000);
    assert_eq!(resets_at(&v, Dimension::Requests, 20_000), anchor + 20_000);

    // Skip the window [8 s, 12 s) entirely: the next one is still aligned at the anchor.
    h.advance(ms(8_000)).await; // 12.5 s (12 s with an exact clock)
    admitted(&s, &k, &p, Demand::tokens(1)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(used(&v, Dimension::Requests, 4_000), 1);
    assert_eq!(used(&v, Dimension::Requests, 20_000), 4);
    assert_eq!(resets_at(&v, Dimension::Requests, 4_000), anchor + 16_000);
    assert_eq!(resets_at(&v, Dimension::Requests, 20_000), anchor + 20_000);
}

/// W2: once every tier's current window is empty, the next use is a new first use and
/// re-anchors; while any tier still counts something, it does not.
pub async fn w2_reanchor_after_idle<H: Harness>(h: &H) {
    let s = h.store().await;
    let (a, b) = (key("w2:reanchor:single"), key("w2:reanchor:two-tiers"));
    let pa = Arc::new(Policy::default().with_requests(secs(2, 1)));
    let pb = Arc::new(
        Policy::default()
            .with_requests(secs(2, 1))
            .with_requests(secs(10, 5)),
    );
    admitted(&s, &a, &pa, Demand::tokens(1)).await;
    admitted(&s, &b, &pb, Demand::tokens(1)).await;
    let ra = resets_at(
        &view(&s, &a, Scope::Key, &pa).await,
        Dimension::Requests,
        2_000,
    );
    let rb = resets_at(
        &view(&s, &b, Scope::Key, &pb).await,
        Dimension::Requests,
        2_000,
    );

    h.advance(ms(7_300)).await;
    // a: idle since its window ended: re-anchored at 7.3 s, not aligned to 6 s.
    let va = view(&s, &a, Scope::Key, &pa).await;
    assert_eq!(line(&va, Dimension::Requests, 2_000).resets_at, None);
    admitted(&s, &a, &pa, Demand::tokens(1)).await;
    let ra2 = resets_at(
        &view(&s, &a, Scope::Key, &pa).await,
        Dimension::Requests,
        2_000,
    );
    assert_near::<H>(ra2 - ra, 7_300, "W2 re-anchor after idle");
    let e = rejected(&s, &a, &pa, Demand::tokens(1)).await;
    assert_retry::<H>(
        e.retry_after_ms(),
        2_000,
        "a whole window after the new anchor",
    );

    // b: its 10 s tier still counts the first request, so no re-anchor: the 2 s window
    // is [6 s, 8 s) of the first anchor.
    admitted(&s, &b, &pb, Demand::tokens(1)).await;
    let vb = view(&s, &b, Scope::Key, &pb).await;
    assert_eq!(resets_at(&vb, Dimension::Requests, 2_000), rb + 6_000);
    assert_eq!(resets_at(&vb, Dimension::Requests, 10_000), rb + 8_000);
    assert_eq!(used(&vb, Dimension::Requests, 10_000), 2);
    let e = rejected(&s, &b, &pb, Demand::tokens(1)).await;
    assert_retry::<H>(e.retry_after_ms(), 700, "b keeps the first anchor");

    // At 12.5 s both of b's current windows ([12, 14) and [10, 20)) are empty.
    h.advance(ms(5_200)).await;
    let vb = view(&s, &b, Scope::Key, &pb).await;
    assert_eq!(used(&vb, Dimension::Requests, 10_000), 0);
    assert_eq!(line(&vb, Dimension::Requests, 10_000).resets_at, None);
    admitted(&s, &b, &pb, Demand::tokens(1)).await;
    let vb = view(&s, &b, Scope::Key, &pb).await;
    assert_near::<H>(
        resets_at(&vb, Dimension::Requests, 2_000) - rb,
        12_500,
        "W2 re-anchor once every tier is empty",
    );
    assert_near::<H>(
        resets_at(&vb, Dimension::Requests, 10_000) - rb,
        20_500,
        "W2 re-anchor moves every tier",
    );
}

/// W3: requests and tokens share one anchor; images and videos each have their own,
/// set by their own first use.
pub async fn w3_images_have_own_anchor<H: Harness>(h: &H) {
    let s = h.store().await;
    let k = key("w3");
    let p = Arc::new(
        Policy::default()
            .with_requests(secs(4, 10))
            .with_tokens(secs(4, 1_000))
            .with_images(secs(4, 2))
            .with_videos(secs(4, 1)),
    );
    let t = admitted(&s, &k, &p, Demand::tokens(10)).await;
    assert!(t.anchors[AnchorGroup::RequestsTokens.index()].is_some());
    assert_eq!(t.anchors[AnchorGroup::Images.index()], None);
    assert_eq!(t.anchors[AnchorGroup::Videos.index()], None);
    let v = view(&s, &k, Scope::Key, &p).await;
    let rt = resets_at(&v, Dimension::Requests, 4_000);
    assert_eq!(
        resets_at(&v, Dimension::Tokens, 4_000),
        rt,
        "tokens share the requests anchor"
    );
    assert_eq!(line(&v, Dimension::Images, 4_000).resets_at, None);
    assert_eq!(line(&v, Dimension::Videos, 4_000).resets_at, None);

    h.advance(ms(1_500)).await;
    admitted(&s, &k, &p, demand(10, 2, 0, 0)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    let ri = resets_at(&v, Dimension::Images, 4_000);
    assert_near::<H>(ri - rt, 1_500, "images anchor at their own first use");
    assert_eq!(resets_at(&v, Dimension::Requests, 4_000), rt);
    assert_eq!(resets_at(&v, Dimension::Tokens, 4_000), rt);
    assert_eq!(used(&v, Dimension::Images, 4_000), 2);
    assert_eq!(used(&v, Dimension::Requests, 4_000), 2);
    assert_eq!(used(&v, Dimension::Tokens, 4_000), 20);

    h.advance(ms(1_500)).await; // 3 s
    admitted(&s, &k, &p, demand(10, 0, 1, 0)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    let rv = resets_at(&v, Dimension::Videos, 4_000);
    assert_near::<H>(rv - rt, 3_000, "videos anchor at their own first use");
    assert_eq!(resets_at(&v, Dimension::Images, 4_000), ri);

    h.advance(ms(1_500)).await; // 4.5 s: requests/tokens window over, images not
    let e = rejected(&s, &k, &p, demand(10, 1, 0, 0)).await;
    assert_eq!(limits_of(&e), [(Dimension::Images, 4_000)]);
    assert_eq!(e.limits[0].used, 2);
    assert_retry::<H>(
        e.retry_after_ms(),
        1_000,
        "images window of their own anchor",
    );
    let e = rejected(&s, &k, &p, demand(10, 0, 1, 0)).await;
    assert_eq!(limits_of(&e), [(Dimension::Videos, 4_000)]);
    assert_retry::<H>(
        e.retry_after_ms(),
        2_500,
        "videos window of their own anchor",
    );
    // The rejected requests counted nothing (W4): this is the first of the new window.
    admitted(&s, &k, &p, Demand::tokens(10)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(used(&v, Dimension::Requests, 4_000), 1);
    assert_eq!(used(&v, Dimension::Tokens, 4_000), 10);
    assert_near::<H>(
        resets_at(&v, Dimension::Requests, 4_000) - rt,
        4_500,
        "RT re-anchored",
    );
    assert_eq!(resets_at(&v, Dimension::Images, 4_000), ri);
    assert_eq!(resets_at(&v, Dimension::Videos, 4_000), rv);

    h.advance(ms(1_500)).await; // 6 s: the images window [1.5, 5.5) is over
    admitted(&s, &k, &p, demand(10, 2, 0, 0)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(used(&v, Dimension::Images, 4_000), 2);
    assert_near::<H>(
        resets_at(&v, Dimension::Images, 4_000) - ri,
        4_500,
        "images re-anchored",
    );
    assert_eq!(resets_at(&v, Dimension::Videos, 4_000), rv);
    assert_eq!(used(&v, Dimension::Requests, 4_000), 2);
}

/// W4: a request is admitted only if every tier of every dimension it touches has
/// room; a rejected request changes no counter (checked through the usage view).
pub async fn w4_all_or_nothing_rejected_changes_nothing<H: Harness>(h: &H) {
    let s = h.store().await;
    let k = key("w4");
    let p = Arc::new(
        Policy::default()
            .with_requests(secs(4, 5))
            .with_tokens(secs(4, 100))
            .with_images(secs(4, 2))
            .with_videos(secs(4, 1))
            .with_amount_cap(1_000)
            .with_rolling_rpm(10),
    );
    admitted(&s, &k, &p, demand(60, 1, 0, 100)).await;
    let before = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(line(&before, Dimension::Videos, 4_000).resets_at, None);

    // Tokens do not fit; requests, images, videos, amount and rolling would.
    let e = rejected(&s, &k, &p, demand(50, 1, 1, 100)).await;
    assert_eq!(limits_of(&e), [(Dimension::Tokens, 4_000)]);
    assert_eq!(e.limits[0].used, 60);
    assert_eq!(
        view(&s, &k, Scope::Key, &p).await,
        before,
        "a rejection changed state"
    );
    // Two dimensions at once: both are named.
    let e = rejected(&s, &k, &p, demand(50, 2, 1, 100)).await;
    assert_eq!(
        limits_of(&e),
        [(Dimension::Tokens, 4_000), (Dimension::Images, 4_000)]
    );
    assert_eq!(
        view(&s, &k, Scope::Key, &p).await,
        before,
        "a rejection changed state"
    );

    h.advance(ms(1_000)).await;
    admitted(&s, &k, &p, demand(40, 1, 1, 100)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(used(&v, Dimension::Requests, 4_000), 2);
    assert_eq!(used(&v, Dimension::Tokens, 4_000), 100);
    assert_eq!(used(&v, Dimension::Images, 4_000), 2);
    assert_eq!(used(&v, Dimension::Videos, 4_000), 1);
    assert_eq!(used(&v, Dimension::Amount, 0), 200);
    assert_eq!(used(&v, Dimension::RollingRequests, ROLLING_WINDOW_MS), 2);
    // Now full in tokens, images and videos: all three are named, nothing counted.
    let before = v;
    let e = rejected(&s, &k, &p, demand(1, 1, 1, 1)).await;
    assert_eq!(
        limits_of(&e),
        [
            (Dimension::Tokens, 4_000),
            (Dimension::Images, 4_000),
            (Dimension::Videos, 4_000)
        ]
    );
    assert_eq!(
        view(&s, &k, Scope::Key, &p).await,
        before,
        "a rejection changed state"
    );
}

/// W5: tokens reserved from the estimate are corrected by the delta to the actual
/// usage (which may push a window over its limit, rejecting the next request); a
/// settlement after a window rolled is dropped for that window, not charged to the
/// new one.
pub async fn w5_settle_applies_delta_and_drops_after_roll<H: Harness>(h: &H) {
    let s = h.store().await;
    let k = key("w5");
    let p = Arc::new(
        Policy::default()
            .with_requests(secs(4, 10))
            .with_requests(secs(20, 100))
            .with_tokens(secs(4, 100))
            .with_tokens(secs(20, 1_000)),
    );
    let tok = |v: &[LimitView], w| used(v, Dimension::Tokens, w);

    let t1 = admitted(&s, &k, &p, Demand::tokens(50)).await;
    assert_eq!(tok(&view(&s, &k, Scope::Key, &p).await, 4_000), 50);
    settle(&s, &k, t1, Outcome::Completed(Some(tokens_used(20)))).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!((tok(&v, 4_000), tok(&v, 20_000)), (20, 20));
    assert_eq!(
        used(&v, Dimension::Requests, 4_000),
        1,
        "a completed request still counts"
    );

    let in_flight = admitted(&s, &k, &p, Demand::tokens(30)).await; // 50
    let t2 = admitted(&s, &k, &p, Demand::tokens(30)).await; // 80
    settle(&s, &k, t2, Outcome::Completed(None)).await;
    assert_eq!(
        tok(&view(&s, &k, Scope::Key, &p).await, 4_000),
        80,
        "without usage the reservation stands"
    );
    let t3 = admitted(&s, &k, &p, Demand::tokens(20)).await; // exactly 100
    settle(&s, &k, t3, Outcome::Completed(Some(tokens_used(70)))).await; // 150
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!((tok(&v, 4_000), tok(&v, 20_000)), (150, 150));
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    assert_eq!(limits_of(&e), [(Dimension::Tokens, 4_000)]);
    assert_eq!(e.limits[0].used, 150);
    assert_retry::<H>(
        e.retry_after_ms(),
        4_000,
        "over the limit until the window ends",
    );

    h.advance(ms(4_500)).await; // the 4 s window rolled, the 20 s one did not
    let t5 = admitted(&s, &k, &p, Demand::tokens(10)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!((tok(&v, 4_000), tok(&v, 20_000)), (10, 160));
    // The request admitted in the old 4 s window ends now, using 90 instead of 30.
    settle(&s, &k, in_flight, Outcome::Completed(Some(tokens_used(90)))).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(
        tok(&v, 4_000),
        10,
        "a settlement after the roll was charged to the new window"
    );
    assert_eq!(
        tok(&v, 20_000),
        220,
        "the still-current 20 s window takes the delta"
    );
    settle(&s, &k, t5, Outcome::Refund).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!((tok(&v, 4_000), tok(&v, 20_000)), (0, 210));
    assert_eq!(used(&v, Dimension::Requests, 4_000), 0);
    assert_eq!(used(&v, Dimension::Requests, 20_000), 4);
}

/// W6: the amount cap admits while spend plus in-flight reservations is below the
/// cap, each admitted request reserves its money bound until it settles, and the cap
/// never resets by itself (no retry-after).
pub async fn w6_amount_cap_counts_reservations<H: Harness>(h: &H) {
    let s = h.store().await;
    let k = key("w6");
    let p = Arc::new(Policy::default().with_amount_cap(100));
    let amount = |v: &[LimitView]| used(v, Dimension::Amount, 0);
    let cost = |c: Money| Usage {
        cost: Some(c),
        ..tokens_used(10)
    };

    let r1 = admitted(&s, &k, &p, demand(10, 0, 0, 40)).await;
    let r2 = admitted(&s, &k, &p, demand(10, 0, 0, 40)).await;
    // 80 < 100: admitted, and it reserves its whole bound.
    let r3 = admitted(&s, &k, &p, demand(10, 0, 0, 40)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    assert_eq!(amount(&v), 120);
    assert_eq!(line(&v, Dimension::Amount, 0).tier.limit, 100);
    assert_eq!(line(&v, Dimension::Amount, 0).resets_at, None);
    let e = rejected(&s, &k, &p, demand(10, 0, 0, 1)).await;
    assert_eq!(limits_of(&e), [(Dimension::Amount, 0)]);
    assert_eq!(e.limits[0].used, 120);
    assert_eq!(e.limits[0].tier.limit, 100);
    assert_eq!(
        e.retry_after_ms(),
        None,
        "the amount cap has no retry-after"
    );

    settle(&s, &k, r1, Outcome::Completed(Some(cost(10)))).await; // 10 + 80
    settle(&s, &k, r3, Outcome::Refund).await; // 10 + 40
    assert_eq!(amount(&view(&s, &k, Scope::Key, &p).await), 50);
    settle(&s, &k, r2, Outcome::Completed(None)).await; // the bound is the charge: 50
    assert_eq!(amount(&view(&s, &k, Scope::Key, &p).await), 50);
    let r4 = admitted(&s, &k, &p, demand(10, 0, 0, 30)).await; // 80
    settle(&s, &k, r4, Outcome::Completed(Some(cost(50)))).await; // exactly 100
    assert_eq!(amount(&view(&s, &k, Scope::Key, &p).await), 100);
    let e = rejected(&s, &k, &p, demand(10, 0, 0, 0)).await;
    assert_eq!(
        limits_of(&e),
        [(Dimension::Amount, 0)],
        "spend == cap is not below it"
    );

    h.advance(ms(5_000)).await;
    let e = rejected(&s, &k, &p, demand(10, 0, 0, 0)).await;
    assert_eq!(e.limits[0].used, 100, "the amount never resets by itself");
    assert_eq!(e.retry_after_ms(), None);
}

/// W9: the retry-after of a window rejection is the time until every exceeded tier
/// has reset enough for this request (the latest of them); none when waiting cannot
/// help (a demand larger than the tier).
pub async fn w9_retry_after_is_time_to_reset<H: Harness>(h: &H) {
    let s = h.store().await;
    let (a, b, c) = (key("w9:a"), key("w9:b"), key("w9:c"));
    let pa = Arc::new(
        Policy::default()
            .with_requests(secs(3, 2))
            .with_requests(secs(8, 2))
            .with_tokens(secs(3, 100)),
    );
    let pb = Arc::new(
        Policy::default()
            .with_requests(secs(3, 2))
            .with_requests(secs(8, 3)),
    );
    let pc = Arc::new(Policy::default().with_tokens(secs(3, 100)));
    admitted(&s, &a, &pa, Demand::tokens(10)).await;
    admitted(&s, &b, &pb, Demand::tokens(10)).await;
    admitted(&s, &c, &pc, Demand::tokens(60)).await;

    h.advance(ms(1_000)).await;
    admitted(&s, &a, &pa, Demand::tokens(10)).await;
    admitted(&s, &b, &pb, Demand::tokens(10)).await;
    // a: both request tiers exceeded: the later reset decides.
    let e = rejected(&s, &a, &pa, Demand::tokens(10)).await;
    assert_eq!(
        limits_of(&e),
        [(Dimension::Requests, 3_000), (Dimension::Requests, 8_000)]
    );
    assert_retry::<H>(retry_of(&e, Dimension::Requests, 3_000), 2_000, "3 s tier");
    assert_retry::<H>(retry_of(&e, Dimension::Requests, 8_000), 7_000, "8 s tier");
    assert_retry::<H>(e.retry_after_ms(), 7_000, "every exceeded tier");
    assert_eq!(e.binding().tier.window_ms, 8_000);
    // A demand larger than a tier can never fit: no retry-after.
    let e = rejected(&s, &a, &pa, Demand::tokens(150)).await;
    assert_eq!(retry_of(&e, Dimension::Tokens, 3_000), None);
    assert_eq!(e.retry_after_ms(), None);
    assert_eq!(e.binding().dimension, Dimension::Tokens);
    // b: only the short tier is exceeded.
    let e = rejected(&s, &b, &pb, Demand::tokens(10)).await;
    assert_eq!(limits_of(&e), [(Dimension::Requests, 3_000)]);
    assert_retry::<H>(e.retry_after_ms(), 2_000, "b at 1 s");
    // c: "enough for this request": 60 used, 50 more do not fit, 40 do.
    let e = rejected(&s, &c, &pc, Demand::tokens(50)).await;
    assert_eq!(limits_of(&e), [(Dimension::Tokens, 3_000)]);
    assert_retry::<H>(e.retry_after_ms(), 2_000, "c at 1 s");
    admitted(&s, &c, &pc, Demand::tokens(40)).await;

    h.advance(ms(2_500)).await; // 3.5 s
    admitted(&s, &b, &pb, Demand::tokens(10)).await;
    let e = rejected(&s, &b, &pb, Demand::tokens(10)).await;
    assert_eq!(limits_of(&e), [(Dimension::Requests, 8_000)]);
    assert_retry::<H>(e.retry_after_ms(), 4_500, "b at 3.5 s");
    // a: the 3 s tier reset, the 8 s one did not.
    let e = rejected(&s, &a, &pa, Demand::tokens(10)).await;
    assert_eq!(limits_of(&e), [(Dimension::Requests, 8_000)]);
    assert_retry::<H>(e.retry_after_ms(), 4_500, "a at 3.5 s");
}

/// W10: the optional rolling window counts requests started in the last 60 s; room
/// appears when the oldest start leaves it, which the retry-after announces.
pub async fn w10_rolling_window<H: Harness>(h: &H) {
    let s = h.store().await;
    let k = key("w10");
    let p = Arc::new(Policy::default().with_rolling_rpm(3));
    let rolling = |v: &[LimitView]| used(v, Dimension::RollingRequests, ROLLING_WINDOW_MS);

    admitted(&s, &k, &p, Demand::tokens(1)).await; // 0 s
    h.advance(ms(20_000)).await;
    admitted(&s, &k, &p, Demand::tokens(1)).await; // 20 s
    h.advance(ms(20_000)).await;
    let last = admitted(&s, &k, &p, Demand::tokens(1)).await; // 40 s
    h.advance(ms(1_000)).await; // 41 s
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    assert_eq!(
        limits_of(&e),
        [(Dimension::RollingRequests, ROLLING_WINDOW_MS)]
    );
    assert!(e.only_rolling());
    assert_eq!(e.limits[0].used, 3);
    assert_eq!(e.limits[0].tier.limit, 3);
    assert_retry::<H>(e.retry_after_ms(), 19_000, "the 0 s start leaves at 60 s");
    assert_eq!(
        rolling(&view(&s, &k, Scope::Key, &p).await),
        3,
        "a rejection counted"
    );
    // A lowered limit (the policy changed): room appears only when enough starts have
    // left to go below it — the 20 s start for a limit of 2, the 40 s one for 1.
    for (limit, expected) in [(2, 39_000), (1, 59_000)] {
        let lower = Arc::new(Policy::default().with_rolling_rpm(limit));
        let e = rejected(&s, &k, &lower, Demand::tokens(1)).await;
        assert_eq!(e.limits[0].used, 3);
        assert_retry::<H>(e.retry_after_ms(), expected, "a lowered rolling limit");
    }

    // A refunded request gives its start back (L5).
    settle(&s, &k, last, Outcome::Refund).await;
    assert_eq!(rolling(&view(&s, &k, Scope::Key, &p).await), 2);
    admitted(&s, &k, &p, Demand::tokens(1)).await; // 41 s
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    assert_retry::<H>(e.retry_after_ms(), 19_000, "still the 0 s start");

    if exact::<H>() {
        h.advance(ms(18_999)).await;
        let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
        assert_eq!(e.retry_after_ms(), Some(1));
        h.advance(ms(1)).await; // exactly 60 s after the first start
    } else {
        h.advance(ms(19_500)).await; // 60.5 s
    }
    admitted(&s, &k, &p, Demand::tokens(1)).await;
    assert_eq!(rolling(&view(&s, &k, Scope::Key, &p).await), 3);
    let e = rejected(&s, &k, &p, Demand::tokens(1)).await;
    let expected = if exact::<H>() { 20_000 } else { 19_500 };
    assert_retry::<H>(e.retry_after_ms(), expected, "then the 20 s start");
}

/// L5: a refunded request gives back everything it reserved: request, token, image
/// and video counts, money and its rolling-window start.
pub async fn l5_refund_gives_everything_back<H: Harness>(h: &H) {
    let s = h.store().await;
    let k = key("l5");
    let p = Arc::new(
        Policy::default()
            .with_requests(secs(4, 1))
            .with_tokens(secs(4, 100))
            .with_images(secs(4, 1))
            .with_videos(secs(4, 1))
            .with_amount_cap(100)
            .with_rolling_rpm(1),
    );
    let full = demand(100, 1, 1, 100);
    let empty = view(&s, &k, Scope::Key, &p).await;
    let t = admitted(&s, &k, &p, full).await;
    let e = rejected(&s, &k, &p, demand(1, 1, 1, 1)).await;
    assert_eq!(
        limits_of(&e),
        [
            (Dimension::Requests, 4_000),
            (Dimension::Tokens, 4_000),
            (Dimension::Images, 4_000),
            (Dimension::Videos, 4_000),
            (Dimension::Amount, 0),
            (Dimension::RollingRequests, ROLLING_WINDOW_MS),
        ]
    );
    h.advance(ms(1_000)).await;
    settle(&s, &k, t, Outcome::Refund).await;
    assert_eq!(
        view(&s, &k, Scope::Key, &p).await,
        empty,
        "the refund left something counted"
    );
    // Everything is available again, to the last unit.
    let t = admitted(&s, &k, &p, full).await;
    settle(&s, &k, t, Outcome::Completed(None)).await;
    let v = view(&s, &k, Scope::Key, &p).await;
    for (d, w) in [
        (Dimension::Requests, 4_000),
        (Dimension::Images, 4_000),
        (Dimension::Videos, 4_000),
        (Dimension::RollingRequests, ROLLING_WINDOW_MS),
    ] {
        assert_eq!(used(&v, d, w), 1, "{d}");
    }
    assert_eq!(used(&v, Dimension::Tokens, 4_000), 100);
    assert_eq!(used(&v, Dimension::Amount, 0), 100);
}

/// U1, W4 across subjects: [`WindowStore::admit_all`] counts a request on every item
/// (one channel's credential, model and vendor windows) or on none — a refusal by the
/// third item leaves the first two exactly as they were, a state that existed before
/// included — and [`WindowStore::settle_all`] settles each item as
/// [`WindowStore::settle`] would.
pub async fn u1_admit_all_is_all_or_nothing_across_subjects<H: Harness>(h: &H) {
    use super::{JointAdmission, JointItem, JointSettle};
    let s = h.store().await;
    let (a, b, c) = (key("u1:credential"), key("u1:model"), key("u1:vendor"));
    let rpm = Arc::new(Policy::default().with_requests(secs(60, 3)));
    let tpm = Arc::new(Policy::default().with_tokens(secs(60, 100)));
    let tight = Arc::new(Policy::default().with_tokens(secs(60, 50)));
    let item = |k: &SubjectKey, p: &Arc<Policy>, tokens: u64| JointItem {
        key: k.clone(),
        scope: Scope::Key,
        policy: p.clone(),
        demand: Demand::tokens(tokens),
    };
    // The credential's window already holds one request: it must be kept as it is.
    let earlier = admitted(&s, &a, &rpm, Demand::tokens(0)).await;
    let before = (
        view(&s, &a, Scope::Key, &rpm).await,
        view(&s, &b, Scope::Key, &tpm).await,
        view(&s, &c, Scope::Key, &tight).await,
    );
    let items = vec![item(&a, &rpm, 0), item(&b, &tpm, 60), item(&c, &tight, 60)];
    match s.admit_all(&items).await.expect("admit_all") {
        JointAdmission::Exceeded { index, exceeded } => {
            assert_eq!(index, 2, "the vendor window is the one without room");
            assert_eq!(limits_of(&exceeded), [(Dimension::Tokens, 60_000)]);
        }
        other => panic!("60 tokens do not fit a 50-token window: {other:?}"),
    }
    let after = (
        view(&s, &a, Scope::Key, &rpm).await,
        view(&s, &b, Scope::Key, &tpm).await,
        view(&s, &c, Scope::Key, &tight).await,
    );
    assert_eq!(after, before, "a refusal changed a window");
    // The same with a rolling limit on the item admitted before the refusal: its
    // rolling log is put back too (the next starts still fit exactly up to the limit).
    let (r, full) = (key("u1:rolling"), key("u1:full"));
    let rolling = Arc::new(Policy::default().with_rolling_rpm(2));
    let none = Arc::new(Policy::default().with_tokens(secs(60, 1)));
    let rolling_item = |p: &Arc<Policy>, k: &SubjectKey, tokens| JointItem {
        key: k.clone(),
        scope: Scope::Key,
        policy: p.clone(),
        demand: Demand::tokens(tokens),
    };
    admitted(&s, &r, &rolling, Demand::tokens(0)).await;
    let before = view(&s, &r, Scope::Key, &rolling).await;
    for _ in 0..3 {
        let items = vec![rolling_item(&rolling, &r, 0), rolling_item(&none, &full, 5)];
        assert!(
            matches!(
                s.admit_all(&items).await.expect("admit_all"),
                JointAdmission::Exceeded { index: 1, .. }
            ),
            "5 tokens do not fit a 1-token window"
        );
    }
    assert_eq!(
        view(&s, &r, Scope::Key, &rolling).await,
        before,
        "a refusal changed a rolling window"
    );
    admitted(&s, &r, &rolling, Demand::tokens(0)).await;
    assert!(
        !matches!(
            s.admit(&r, Scope::Key, &rolling, &Demand::tokens(0))
                .await
                .expect("admit"),
            Admission::Admitted(_)
        ),
        "the rolling limit of 2 holds after the put-back starts"
    );
    // With room everywhere every item is counted, one ticket each, in order.
    let items = vec![item(&a, &rpm, 0), item(&b, &tpm, 60), item(&c, &tight, 40)];
    let tickets = match s.admit_all(&items).await.expect("admit_all") {
        JointAdmission::Admitted(t) => t,
        other => panic!("every window has room: {other:?}"),
    };
    assert_eq!(tickets.len(), 3);
    assert_eq!(
        used(
            &view(&s, &a, Scope::Key, &rpm).await,
            Dimension::Requests,
            60_000
        ),
        2
    );
    assert_eq!(
        used(
            &view(&s, &b, Scope::Key, &tpm).await,
            Dimension::Tokens,
            60_000
        ),
        60
    );
    assert_eq!(
        used(
            &view(&s, &c, Scope::Key, &tight).await,
            Dimension::Tokens,
            60_000
        ),
        40
    );
    // Settled together: the model window with the actual usage, the others refunded.
    let outcomes = [
        Outcome::Refund,
        Outcome::Completed(Some(crate::demand::Usage {
            input_tokens: 25,
            ..Default::default()
        })),
        Outcome::Refund,
    ];
    let settles = items
        .iter()
        .zip(tickets)
        .zip(outcomes)
        .map(|((it, ticket), outcome)| JointSettle {
            key: it.key.clone(),
            scope: it.scope,
            ticket,
            outcome,
        })
        .collect();
    s.settle_all(settles).await.expect("settle_all");
    assert_eq!(
        used(
            &view(&s, &a, Scope::Key, &rpm).await,
            Dimension::Requests,
            60_000
        ),
        1
    );
    assert_eq!(
        used(
            &view(&s, &b, Scope::Key, &tpm).await,
            Dimension::Tokens,
            60_000
        ),
        25
    );
    assert_eq!(
        used(
            &view(&s, &c, Scope::Key, &tight).await,
            Dimension::Tokens,
            60_000
        ),
        0
    );
    settle(&s, &a, earlier, Outcome::Refund).await;
}

/// D2, C1, W4: [`JointStore::acquire_and_admit`] takes a slot only if the windows
/// admit and counts the windows only if a slot is free — a refusal of either leaves both
/// as they were — and the lease and ticket it hands out are the store's own (released
/// and settled as any other).
///
/// [`JointStore::acquire_and_admit`]: super::JointStore::acquire_and_admit
pub async fn d2_slot_and_window_decided_together<H: Harness>(h: &H) {
    use super::{JointDecision, JointStore, SlotAsk, WindowAsk};
    let s = h.store().await;
    let k = key("d2-joint");
    let p = Arc::new(Policy::default().with_requests(secs(60, 2)));
    let d = Demand::default();
    let ask = SlotAsk {
        key: k.clone(),
        limit: 2,
        ttl: LONG_TTL,
    };
    let w = || {
        Some(WindowAsk {
            scope: Scope::Key,
            policy: &p,
            demand: &d,
        })
    };
    let joint = |window| s.acquire_and_admit(&ask, window);
    let JointDecision::Admitted {
        lease: first,
        ticket: Some(t1),
    } = joint(w()).await.expect("joint")
    else {
        panic!("a free slot and room in the window")
    };
    assert_eq!(s.in_flight(&k).await.unwrap(), 1);
    // The slot alone: a slot-only call counts no window.
    let JointDecision::Admitted {
        lease: second,
        ticket: None,
    } = joint(None).await.expect("slot only")
    else {
        panic!("a second free slot")
    };
    assert_eq!(
        used(
            &view(&s, &k, Scope::Key, &p).await,
            Dimension::Requests,
            60_000
        ),
        1
    );
    // Both slots taken: refused as full, the window untouched.
    assert_eq!(
        joint(w()).await.expect("joint"),
        JointDecision::SlotFull { in_flight: 2 }
    );
    assert_eq!(
        used(
            &view(&s, &k, Scope::Key, &p).await,
            Dimension::Requests,
            60_000
        ),
        1
    );
    s.release(&k, second).await.unwrap();
    // A free slot again, and the window's second request.
    let JointDecision::Admitted {
        lease: third,
        ticket: Some(t3),
    } = joint(w()).await.expect("joint")
    else {
        panic!("the released slot is free again")
    };
    s.release(&k, third).await.unwrap();
    // The window is full: refused as exceeded, and no slot is taken by the refusal.
    match joint(w()).await.expect("joint") {
        JointDecision::Exceeded(e) => {
            assert_eq!(limits_of(&e), [(Dimension::Requests, 60_000)]);
        }
        other => panic!("the 60 s window holds 2 requests: {other:?}"),
    }
    assert_eq!(
        s.in_flight(&k).await.unwrap(),
        1,
        "the refusal took no slot"
    );
    // Lease and tickets are ordinary: released and settled as any other.
    s.release(&k, first).await.unwrap();
    assert_eq!(s.in_flight(&k).await.unwrap(), 0);
    settle(&s, &k, t1, Outcome::Refund).await;
    settle(&s, &k, t3, Outcome::Refund).await;
    assert_eq!(
        used(
            &view(&s, &k, Scope::Key, &p).await,
            Dimension::Requests,
            60_000
        ),
        0
    );
}

/// U1, Q1, D2: [`ChannelStore::admit_all_and_acquire`] admits a channel's windows all
/// or nothing and, when they admit, takes a capacity lease if the channel has one free
/// — a full channel leaves the windows admitted and no lease; refused windows take no
/// lease — and the lease is an ordinary capacity lease.
///
/// [`ChannelStore::admit_all_and_acquire`]: super::ChannelStore::admit_all_and_acquire
pub async fn u1_windows_and_capacity_lease_in_one_step<H: Harness>(h: &H) {
    use super::{CapacityTake, ChannelStore, JointAdmission, JointItem};
    use crate::capacity::CapacityStore;
    let s = h.store().await;
    let (k, ch) = (key("u1-channel:credential"), "conformance-u1-channel");
    let p = Arc::new(Policy::default().with_requests(secs(60, 3)));
    let items = |tokens: u64| {
        vec![JointItem {
            key: k.clone(),
            scope: Scope::Key,
            policy: p.clone(),
            demand: Demand::tokens(tokens),
        }]
    };
    let tickets = |a: JointAdmission| match a {
        JointAdmission::Admitted(t) => t,
        other => panic!("the window has room: {other:?}"),
    };
    // Room in the window and on the channel: both.
    let (a, take) = s
        .admit_all_and_acquire(&items(0), ch, 1, LONG_TTL)
        .await
        .expect("joint");
    let first = tickets(a);
    let CapacityTake::Taken(lease) = take else {
        panic!("a free lease on the channel: {take:?}")
    };
    assert_eq!(CapacityStore::in_flight(&s, ch).await.unwrap(), 1);
    // The channel full: the window still admits, no lease.
    let (a, take) = s
        .admit_all_and_acquire(&items(0), ch, 1, LONG_TTL)
        .await
        .expect("joint");
    let second = tickets(a);
    assert_eq!(take, CapacityTake::Full);
    assert_eq!(CapacityStore::in_flight(&s, ch).await.unwrap(), 1);
    assert_eq!(
        used(
            &view(&s, &k, Scope::Key, &p).await,
            Dimension::Requests,
            60_000
        ),
        2
    );
    // The lease is ordinary: released, the channel has room again.
    CapacityStore::release(&s, ch, lease).await.unwrap();
    let (a, take) = s
        .admit_all_and_acquire(&items(0), ch, 1, LONG_TTL)
        .await
        .expect("joint");
    let third = tickets(a);
    let CapacityTake::Taken(lease) = take else {
        panic!("the released lease is free again: {take:?}")
    };
    // The window full: refused, and no lease taken.
    CapacityStore::release(&s, ch, lease).await.unwrap();
    let (a, take) = s
        .admit_all_and_acquire(&items(0), ch, 1, LONG_TTL)
        .await
        .expect("joint");
    assert!(
        matches!(a, JointAdmission::Exceeded { index: 0, .. }),
        "{a:?}"
    );
    assert_eq!(take, CapacityTake::NotAsked);
    assert_eq!(
        CapacityStore::in_flight(&s, ch).await.unwrap(),
        0,
        "a refusal took no lease"
    );
    for t in first.into_iter().chain(second).chain(third) {
        settle(&s, &k, t, Outcome::Refund).await;
    }
}

/// Windows are counted per subject key and per policy scope (subscription and key
/// counters are kept apart, W8).
pub async fn windows_are_per_key_and_scope<H: Harness>(h: &H) {
    let s = h.store().await;
    let (k1, k2) = (key("windows:1"), key("windows:2"));
    let p = Arc::new(Policy::default().with_requests(secs(4, 1)));
    admitted(&s, &k1, &p, Demand::tokens(1)).await;
    rejected(&s, &k1, &p, Demand::tokens(1)).await;
    admitted(&s, &k2, &p, Demand::tokens(1)).await;
    match admit(&s, &k1, Scope::Subscription, &p, Demand::tokens(1)).await {
        Admission::Admitted(_) => {}
        Admission::Exceeded(e) => panic!("the subscription scope shares the key scope: {e:?}"),
    }
    match admit(&s, &k1, Scope::Subscription, &p, Demand::tokens(1)).await {
        Admission::Exceeded(e) => assert_eq!(limits_of(&e), [(Dimension::Requests, 4_000)]),
        Admission::Admitted(t) => panic!("subscription scope over its limit: {t:?}"),
    }
    for (k, scope) in [
        (&k1, Scope::Key),
        (&k1, Scope::Subscription),
        (&k2, Scope::Key),
    ] {
        let v = view(&s, k, scope, &p).await;
        assert_eq!(used(&v, Dimension::Requests, 4_000), 1, "{k:?} {scope:?}");
    }
    let v = view(&s, &k2, Scope::Subscription, &p).await;
    assert_eq!(used(&v, Dimension::Requests, 4_000), 0);
}

// ---------------------------------------------------------------------------------
// Billing (B1–B7)

fn tenant(s: &str) -> String {
    format!("conformance:tenant:{s}")
}

fn attempt(a: &str) -> AttemptId {
    format!("conformance:{a}").into()
}

fn budget(id: &str, limit: Money, period_ms: Option<Millis>) -> Budget {
    Budget {
        id: format!("conformance:{id}").into(),
        limit,
        period_ms,
    }
}

fn budgets(b: &[&Budget]) -> Arc<[Budget]> {
    b.iter().map(|&b| b.clone()).collect()
}

/// A request of attempt `a`, billed to `tenant`'s balance, counted in `key`'s spend:
/// upper bound `money`, no spend cap, no budgets.
fn bill(a: &str, tenant: Option<&str>, key: &SubjectKey, money: Money) -> BillingRequest {
    BillingRequest {
        attempt: attempt(a),
        tenant: tenant.map(Into::into),
        key: key.clone(),
        spend_cap: None,
        budgets: Arc::from(Vec::new()),
        money,
        bill_balance: true,
        lifetime_ms: DEFAULT_ATTEMPT_LIFETIME_MS,
        tenant_expected: false,
    }
}

/// Attempt `a` in the books of tenant `t`.
fn in_tenant(t: &str, a: &str) -> AttemptRef {
    AttemptRef {
        attempt: attempt(a),
        books: Books::Tenant(t.into()),
    }
}

async fn reserve<S: BillingStore>(s: &S, r: &BillingRequest) -> BillingDecision {
    s.check_and_reserve(r)
        .await
        .expect("check_and_reserve: store error")
}

async fn bill_ok<S: BillingStore>(s: &S, r: &BillingRequest) {
    let d = reserve(s, r).await;
    assert_eq!(d, BillingDecision::Admitted, "{r:?}");
}

async fn bill_refused<S: BillingStore>(s: &S, r: &BillingRequest, why: Refusal) {
    let d = reserve(s, r).await;
    assert_eq!(d, BillingDecision::Refused(why), "{r:?}");
}

/// Settles attempt `a` of tenant `t`.
async fn settle_attempt<S: BillingStore>(
    s: &S,
    t: &str,
    a: &str,
    o: BillingOutcome,
) -> Option<AttemptState> {
    s.settle_attempt(&in_tenant(t, a), o)
        .await
        .expect("settle_attempt: store error")
}

async fn account<S: BillingStore>(
    s: &S,
    tenant: Option<&str>,
    k: &SubjectKey,
    b: &[&Budget],
) -> AccountView {
    let b: Vec<Budget> = b.iter().map(|&b| b.clone()).collect();
    s.account(tenant, k, &b)
        .await
        .expect("account: store error")
}

/// True if the balance was written, false if the tenant kept its record.
async fn seed<S: BillingStore>(s: &S, tenant: &str, amount: Money) -> bool {
    s.seed_balance(tenant, amount)
        .await
        .expect("seed_balance: store error")
}

async fn credit<S: BillingStore>(s: &S, tenant: &str, amount: Money) -> Money {
    s.credit(tenant, amount).await.expect("credit: store error")
}

/// The attempts pending reconciliation (ids and amounts), sorted.
async fn pending_list<S: BillingStore>(s: &S) -> Vec<(AttemptId, Money)> {
    let mut v: Vec<(AttemptId, Money)> = s
        .pending()
        .await
        .expect("pending: store error")
        .into_iter()
        .map(|(r, m)| (r.attempt, m))
        .collect();
    v.sort();
    v
}

/// (balance, tenant pending, key spent, key pending).
fn money_of(v: &AccountView) -> (Option<Money>, Money, Money, Money) {
    (v.balance, v.tenant_pending, v.key_spent, v.key_pending)
}

/// (spent, reserved) of the `i`-th budget of the view.
fn budget_of(v: &AccountView, i: usize) -> (Money, Money) {
    (v.budgets[i].spent, v.budgets[i].reserved)
}

/// Polls every future until all are done, on the current task: the calls are in flight
/// together (pipelined on a connection, interleaved in a store), as concurrent requests
/// of a gateway are.
async fn join_all<F: Future + Unpin>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Option<F>> = futures.into_iter().map(Some).collect();
    let mut out: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(move |cx| {
        let mut done = true;
        for (f, o) in futures.iter_mut().zip(out.iter_mut()) {
            if let Some(fut) = f {
                match Pin::new(fut).poll(cx) {
                    Poll::Ready(v) => {
                        *o = Some(v);
                        *f = None;
                    }
                    Poll::Pending => done = false,
                }
            }
        }
        if done {
            Poll::Ready(out.iter_mut().map(|o| o.take().expect("done")).collect())
        } else {
            Poll::Pending
        }
    })
    .await
}

/// B1: at request start a balance (less money pending reconciliation) ≤ 0 is refused,
/// and so is a key whose spend plus pending money has reached its cap. The balance is
/// checked first; any positive balance admits whatever the upper bound; caps are per
/// key; a request with no tenant has no balance check; a refusal reserves nothing and
/// starts no budget period.
pub async fn b1_balance_and_spend_cap<H: Harness>(h: &H) {
    let s = h.store().await;
    let (t, t2) = (tenant("b1"), tenant("b1:negative"));
    let (k0, k, k2, k3) = (
        key("b1:balance"),
        key("b1:capped"),
        key("b1:other"),
        key("b1:no-tenant"),
    );
    let x = budget("b1:x", 1_000, Some(4_000));
    let with_x = |a: &str, money| BillingRequest {
        budgets: budgets(&[&x]),
        ..bill(a, Some(&t), &k0, money)
    };

    // A tenant with no books has no balance.
    bill_refused(&s, &with_x("b1:a0", 5), Refusal::InsufficientBalance).await;
    let v = account(&s, Some(&t), &k0, &[&x]).await;
    assert_eq!(money_of(&v), (Some(0), 0, 0, 0));
    assert_eq!(
        (budget_of(&v, 0), v.budgets[0].resets_at),
        ((0, 0), None),
        "a refusal reserved money or started a budget period"
    );
    seed(&s, &t, 0).await;
    bill_refused(&s, &with_x("b1:a0", 5), Refusal::InsufficientBalance).await;
    // Any positive balance admits, whatever the upper bound (B2).
    assert_eq!(credit(&s, &t, 1).await, 1);
    bill_ok(&s, &with_x("b1:a1", 5)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b1:a1", BillingOutcome::Settled(1)).await,
        Some(AttemptState::Settled(1))
    );
    bill_refused(&s, &with_x("b1:a2", 5), Refusal::InsufficientBalance).await;
    let v = account(&s, Some(&t), &k0, &[&x]).await;
    assert_eq!(money_of(&v), (Some(0), 0, 1, 0));
    assert_eq!(budget_of(&v, 0), (1, 0));

    // The spend cap counts spend and pending money.
    assert_eq!(credit(&s, &t, 100).await, 100);
    let capped = |a: &str, k: &SubjectKey, cap| BillingRequest {
        spend_cap: Some(cap),
        ..bill(a, Some(&t), k, 30)
    };
    bill_ok(&s, &capped("b1:a3", &k, 50)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b1:a3", BillingOutcome::Pending).await,
        Some(AttemptState::Pending(30))
    );
    bill_ok(&s, &capped("b1:a4", &k, 50)).await; // 0 spent + 30 pending < 50
    assert_eq!(
        settle_attempt(&s, &t, "b1:a4", BillingOutcome::Settled(20)).await,
        Some(AttemptState::Settled(20))
    );
    let v = account(&s, Some(&t), &k, &[]).await;
    assert_eq!(money_of(&v), (Some(80), 30, 20, 30));
    // 20 spent + 30 pending = 50 = cap.
    bill_refused(&s, &capped("b1:a5", &k, 50), Refusal::SpendCap).await;
    bill_ok(&s, &capped("b1:a5", &k, 51)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b1:a5", BillingOutcome::Refund).await,
        Some(AttemptState::Refunded)
    );
    // Caps are per key: another key of the tenant has spent nothing; a cap of 0 allows
    // nothing.
    bill_ok(&s, &capped("b1:a6", &k2, 50)).await;
    settle_attempt(&s, &t, "b1:a6", BillingOutcome::Refund).await;
    bill_refused(&s, &capped("b1:a6b", &k2, 0), Refusal::SpendCap).await;
    // No cap: no cap check.
    bill_ok(&s, &bill("b1:a7", Some(&t), &k, 30)).await;
    settle_attempt(&s, &t, "b1:a7", BillingOutcome::Refund).await;

    // The balance counts pending money: 30 - 30 pending = 0; checked before the cap.
    assert_eq!(credit(&s, &t, -50).await, 30);
    bill_refused(
        &s,
        &bill("b1:a8", Some(&t), &k, 1),
        Refusal::InsufficientBalance,
    )
    .await;
    bill_refused(&s, &capped("b1:a8", &k, 50), Refusal::InsufficientBalance).await;
    // Reconciled below its upper bound: room again, under the balance and the cap.
    assert_eq!(
        settle_attempt(&s, &t, "b1:a3", BillingOutcome::Settled(25)).await,
        Some(AttemptState::Settled(25))
    );
    let v = account(&s, Some(&t), &k, &[]).await;
    assert_eq!(money_of(&v), (Some(5), 0, 45, 0));
    bill_ok(&s, &capped("b1:a8", &k, 50)).await; // 45 < 50
    settle_attempt(&s, &t, "b1:a8", BillingOutcome::Refund).await;
    assert_eq!(
        money_of(&account(&s, Some(&t), &k, &[]).await),
        (Some(5), 0, 45, 0),
        "a refund charged something"
    );

    // No tenant: no balance to check; the key's spend is still counted.
    bill_ok(&s, &bill("b1:a9", None, &k3, 1)).await;
    let in_k3 = AttemptRef {
        attempt: attempt("b1:a9"),
        books: Books::Key(k3.clone()),
    };
    assert_eq!(
        s.settle_attempt(&in_k3, BillingOutcome::Settled(1))
            .await
            .expect("settle_attempt: store error"),
        Some(AttemptState::Settled(1))
    );
    assert_eq!(
        money_of(&account(&s, None, &k3, &[]).await),
        (None, 0, 1, 0)
    );
    // A negative balance.
    seed(&s, &t2, -5).await;
    bill_refused(
        &s,
        &bill("b1:a10", Some(&t2), &k3, 1),
        Refusal::InsufficientBalance,
    )
    .await;
    // k3's spend without a tenant is kept in k3's own books (D3), not in t2's.
    assert_eq!(
        money_of(&account(&s, Some(&t2), &k3, &[]).await),
        (Some(-5), 0, 0, 0)
    );
}

/// B2: settlement deducts the real cost from the balance and adds it to the key's
/// spend; a request that started with a positive balance runs to completion, so the
/// balance may end below zero (and the next request is refused). The real cost is
/// charged in full even above the upper bound; a negative cost charges nothing.
pub async fn b2_settle_may_go_below_zero<H: Harness>(h: &H) {
    let s = h.store().await;
    let t = tenant("b2");
    let k = key("b2");
    seed(&s, &t, 10).await;
    bill_ok(&s, &bill("b2:a1", Some(&t), &k, 100)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b2:a1", BillingOutcome::Settled(37)).await,
        Some(AttemptState::Settled(37))
    );
    assert_eq!(
        money_of(&account(&s, Some(&t), &k, &[]).await),
        (Some(-27), 0, 37, 0)
    );
    bill_refused(
        &s,
        &bill("b2:a2", Some(&t), &k, 1),
        Refusal::InsufficientBalance,
    )
    .await;
    assert_eq!(credit(&s, &t, 30).await, 3);
    bill_ok(&s, &bill("b2:a3", Some(&t), &k, 10)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b2:a3", BillingOutcome::Settled(15)).await,
        Some(AttemptState::Settled(15)),
        "the real cost, above the upper bound, is charged in full"
    );
    assert_eq!(credit(&s, &t, 13).await, 1);
    bill_ok(&s, &bill("b2:a4", Some(&t), &k, 5)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b2:a4", BillingOutcome::Settled(-5)).await,
        Some(AttemptState::Settled(0)),
        "a negative cost charges nothing"
    );
    assert_eq!(
        money_of(&account(&s, Some(&t), &k, &[]).await),
        (Some(1), 0, 52, 0)
    );
}

/// B3: a budget reserves the upper bound atomically (all budgets of a request or
/// none), settles to the real cost and refuses a request that does not fit. A budget
/// period starts at the first use and rolls by whole periods from that anchor; spend
/// starts again, reservations of attempts still open carry over, and a cost is charged
/// to the period it settles in. A refund leaves no trace: a period only that attempt
/// had started, or that it leaves empty, has not started (whether or not a refused
/// request looked at the budget in between, L5). A budget with no period never resets.
pub async fn b3_budgets_reserve_and_roll_by_period<H: Harness>(h: &H) {
    let s = h.store().await;
    let t = tenant("b3");
    let k = key("b3");
    seed(&s, &t, 1_000_000).await;
    let x = budget("b3:x", 100, Some(4_000));
    let y = budget("b3:y", 1_000, None);
    let z = budget("b3:z", 50, None);
    let w = budget("b3:w", 100, Some(4_000));
    let req = |a: &str, money, b: &[&Budget]| BillingRequest {
        budgets: budgets(b),
        ..bill(a, Some(&t), &k, money)
    };
    let all = [&x, &y, &z];

    let v = account(&s, Some(&t), &k, &all).await;
    assert_eq!(
        (v.budgets[0].limit, budget_of(&v, 0), v.budgets[0].resets_at),
        (100, (0, 0), None),
        "no use, no period"
    );
    bill_ok(&s, &req("b3:a1", 60, &[&x, &y])).await;
    let v = account(&s, Some(&t), &k, &all).await;
    assert_eq!((budget_of(&v, 0), budget_of(&v, 1)), ((0, 60), (0, 60)));
    let anchor = v.budgets[0].resets_at.expect("the period started") - 4_000;
    if let Some(now) = h.now() {
        assert_eq!(anchor, now, "the period is anchored at its first use");
    }
    assert_eq!(v.budgets[1].resets_at, None, "no period, no reset");

    bill_refused(&s, &req("b3:a2", 60, &[&x]), Refusal::Budget(x.id.clone())).await;
    // All or nothing: y has room, x does not; y has room, z does not.
    bill_refused(
        &s,
        &req("b3:a2", 60, &[&y, &x]),
        Refusal::Budget(x.id.clone()),
    )
    .await;
    bill_refused(
        &s,
        &req("b3:a2", 60, &[&y, &z]),
        Refusal::Budget(z.id.clone()),
    )
    .await;
    let v = account(&s, Some(&t), &k, &all).await;
    assert_eq!(
        (budget_of(&v, 0), budget_of(&v, 1), budget_of(&v, 2)),
        ((0, 60), (0, 60), (0, 0)),
        "a refused request reserved money"
    );
    assert_eq!(v.budgets[2].resets_at, None);
    bill_ok(&s, &req("b3:a3", 40, &[&x])).await; // exactly the limit
    bill_refused(&s, &req("b3:a4", 1, &[&x]), Refusal::Budget(x.id.clone())).await;
    assert_eq!(
        settle_attempt(&s, &t, "b3:a1", BillingOutcome::Settled(10)).await,
        Some(AttemptState::Settled(10))
    );
    let v = account(&s, Some(&t), &k, &all).await;
    assert_eq!((budget_of(&v, 0), budget_of(&v, 1)), ((10, 40), (10, 0)));
    settle_attempt(&s, &t, "b3:a3", BillingOutcome::Refund).await;
    let v = account(&s, Some(&t), &k, &all).await;
    assert_eq!(budget_of(&v, 0), (10, 0));
    assert_eq!(
        v.budgets[0].resets_at,
        Some(anchor + 4_000),
        "spend keeps the period"
    );
    bill_ok(&s, &req("b3:a5", 90, &[&x])).await; // 10 + 90 = 100, open across the roll

    if exact::<H>() {
        h.advance(ms(3_999)).await;
        let v = account(&s, Some(&t), &k, &[&x]).await;
        assert_eq!(budget_of(&v, 0), (10, 90), "1 ms before the period ends");
        h.advance(ms(1)).await; // exactly anchor + 4 s: the next period
    } else {
        h.advance(ms(4_500)).await;
    }
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(
        budget_of(&v, 0),
        (0, 90),
        "spend starts again, open reservations carry over"
    );
    assert_eq!(v.budgets[0].resets_at, Some(anchor + 8_000));
    bill_ok(&s, &req("b3:a6", 10, &[&x])).await;
    bill_refused(&s, &req("b3:a7", 1, &[&x]), Refusal::Budget(x.id.clone())).await;
    settle_attempt(&s, &t, "b3:a5", BillingOutcome::Settled(70)).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(
        budget_of(&v, 0),
        (70, 10),
        "charged to the period it settles in"
    );
    settle_attempt(&s, &t, "b3:a6", BillingOutcome::Refund).await;
    let v = account(&s, Some(&t), &k, &all).await;
    assert_eq!(budget_of(&v, 0), (70, 0));
    assert_eq!(v.budgets[0].resets_at, Some(anchor + 8_000));
    assert_eq!(
        (budget_of(&v, 1), v.budgets[1].resets_at),
        ((10, 0), None),
        "no period: never resets"
    );

    // Skip the period [8 s, 12 s): the next one is still aligned at the anchor.
    h.advance(ms(8_000)).await; // 12.5 s (12 s with an exact clock)
    let v = account(&s, Some(&t), &k, &all).await;
    assert_eq!(budget_of(&v, 0), (0, 0));
    assert_eq!(v.budgets[0].resets_at, Some(anchor + 16_000));
    assert_eq!(budget_of(&v, 1), (10, 0));

    // A refund leaves no trace: the period only it had started has not started.
    bill_ok(&s, &req("b3:a8", 30, &[&w])).await;
    assert!(
        account(&s, Some(&t), &k, &[&w]).await.budgets[0]
            .resets_at
            .is_some()
    );
    settle_attempt(&s, &t, "b3:a8", BillingOutcome::Refund).await;
    let v = account(&s, Some(&t), &k, &[&w]).await;
    assert_eq!((budget_of(&v, 0), v.budgets[0].resets_at), ((0, 0), None));
    h.advance(ms(1_000)).await;
    bill_ok(&s, &req("b3:a9", 30, &[&w])).await;
    let r = account(&s, Some(&t), &k, &[&w]).await.budgets[0]
        .resets_at
        .expect("the period started");
    if let Some(now) = h.now() {
        assert_eq!(r, now + 4_000);
    }
    let expected = if exact::<H>() { 17_000 } else { 17_500 };
    assert_near::<H>(
        r - anchor,
        expected,
        "anchored at the first use that stayed",
    );
    settle_attempt(&s, &t, "b3:a9", BillingOutcome::Refund).await;

    // L5: a refused request changes nothing. A refund that leaves a rolled period empty
    // un-starts it, whether or not a refused request looked at the budget in between.
    let v1 = budget("b3:v1", 100, Some(4_000));
    let v2 = budget("b3:v2", 100, Some(4_000));
    for (i, v) in [&v1, &v2].into_iter().enumerate() {
        bill_ok(&s, &req(&format!("b3:v{i}:a"), 10, &[v])).await;
        settle_attempt(&s, &t, &format!("b3:v{i}:a"), BillingOutcome::Settled(10)).await;
        bill_ok(&s, &req(&format!("b3:v{i}:b"), 10, &[v])).await;
    }
    h.advance(ms(4_500)).await;
    bill_refused(
        &s,
        &req("b3:v0:c", 1_000, &[&v1]),
        Refusal::Budget(v1.id.clone()),
    )
    .await;
    for (i, v) in [&v1, &v2].into_iter().enumerate() {
        settle_attempt(&s, &t, &format!("b3:v{i}:b"), BillingOutcome::Refund).await;
        let view = account(&s, Some(&t), &k, &[v]).await;
        assert_eq!(
            (budget_of(&view, 0), view.budgets[0].resets_at),
            ((0, 0), None),
            "{}: the refund left an empty period started",
            v.id
        );
    }
}

/// B3: a budget whose period is zero is a budget with no period: it never resets, and
/// its view shows no reset time.
pub async fn b3_a_zero_period_is_no_period<H: Harness>(h: &H) {
    let s = h.store().await;
    let t = tenant("b3z");
    let k = key("b3z");
    seed(&s, &t, 1_000_000).await;
    let z = budget("b3z:zero", 100, Some(0));
    let req = |a: &str, money| BillingRequest {
        budgets: budgets(&[&z]),
        ..bill(a, Some(&t), &k, money)
    };
    bill_ok(&s, &req("b3z:a1", 60)).await;
    settle_attempt(&s, &t, "b3z:a1", BillingOutcome::Settled(60)).await;
    h.advance(ms(10_000)).await;
    let v = account(&s, Some(&t), &k, &[&z]).await;
    assert_eq!(
        (budget_of(&v, 0), v.budgets[0].resets_at),
        ((60, 0), None),
        "a zero period never resets"
    );
    bill_refused(&s, &req("b3z:a2", 41), Refusal::Budget(z.id.clone())).await;
}

/// B3, T4: many reservations on one small budget in flight at once never reserve more
/// than its limit, and none that fitted is refused; many settlements of one attempt in
/// flight at once settle it once.
pub async fn b3_concurrent_reservations_never_exceed_budget<H: Harness>(h: &H) {
    let s = h.store().await;
    let t = tenant("concurrent");
    seed(&s, &t, 1_000_000).await;
    let x = budget("concurrent:x", 100, None);
    let req = |i: usize, wave: usize, money: Money| BillingRequest {
        budgets: budgets(&[&x]),
        ..bill(
            &format!("concurrent:{wave}:{i}"),
            Some(&t),
            &key(&format!("concurrent:{}", i % 4)),
            money,
        )
    };

    // Wave 1: 64 reservations of 7 at once on a budget of 100: exactly 14 fit.
    let reqs: Vec<_> = (0..64).map(|i| req(i, 1, 7)).collect();
    let decisions = join_all(reqs.iter().map(|r| s.check_and_reserve(r)).collect()).await;
    let mut admitted = Vec::new();
    for (r, d) in reqs.iter().zip(decisions) {
        match d.expect("check_and_reserve: store error") {
            BillingDecision::Admitted => admitted.push(r.attempt_ref()),
            d => assert_eq!(d, BillingDecision::Refused(Refusal::Budget(x.id.clone()))),
        }
    }
    assert_eq!(admitted.len(), 14, "14 × 7 = 98 ≤ 100 < 15 × 7");
    let v = account(&s, Some(&t), &key("concurrent:0"), &[&x]).await;
    assert_eq!(budget_of(&v, 0), (0, 98));

    // Each admitted attempt settled twice at once (two instances racing): once.
    let outcome = |j: usize| {
        if j % 2 == 0 {
            BillingOutcome::Settled(5)
        } else {
            BillingOutcome::Refund
        }
    };
    let settles: Vec<_> = admitted
        .iter()
        .enumerate()
        .flat_map(|(j, a)| [(j, a), (j, a)])
        .map(|(j, a)| s.settle_attempt(a, outcome(j)))
        .collect();
    let results = join_all(settles).await;
    for (j, pair) in results.chunks_exact(2).enumerate() {
        let done: Vec<_> = pair
            .iter()
            .map(|r| r.clone().expect("settle_attempt: store error"))
            .filter(Option::is_some)
            .collect();
        let expected = match outcome(j) {
            BillingOutcome::Settled(c) => AttemptState::Settled(c),
            _ => AttemptState::Refunded,
        };
        assert_eq!(done, [Some(expected)], "attempt {j} settled {pair:?}");
    }
    let v = account(&s, Some(&t), &key("concurrent:0"), &[&x]).await;
    assert_eq!(budget_of(&v, 0), (35, 0), "7 settled at 5, 7 refunded");
    assert_eq!(v.balance, Some(1_000_000 - 35));

    // Wave 2: 48 mixed amounts at once on the 65 left: what is admitted fits, and every
    // refused request did not fit even beside what was admitted.
    let reqs: Vec<_> = (0..48)
        .map(|i| req(i, 2, 1 + (i as Money * 7) % 20))
        .collect();
    let decisions = join_all(reqs.iter().map(|r| s.check_and_reserve(r)).collect()).await;
    let (mut sum, mut refused) = (0, Vec::new());
    for (r, d) in reqs.iter().zip(decisions) {
        match d.expect("check_and_reserve: store error") {
            BillingDecision::Admitted => sum += r.money,
            _ => refused.push(r.money),
        }
    }
    assert!(sum <= 65, "{sum} reserved on the 65 left");
    assert!(
        sum > 0 && !refused.is_empty(),
        "a weak test: {sum} {refused:?}"
    );
    for m in &refused {
        assert!(sum + m > 65, "{m} was refused but fits beside {sum}");
    }
    let v = account(&s, Some(&t), &key("concurrent:0"), &[&x]).await;
    assert_eq!(budget_of(&v, 0), (35, sum));
    let refunds: Vec<_> = reqs
        .iter()
        .map(|r| s.settle_attempt(&r.attempt_ref(), BillingOutcome::Refund))
        .collect();
    join_all(refunds).await;
    let v = account(&s, Some(&t), &key("concurrent:0"), &[&x]).await;
    assert_eq!(budget_of(&v, 0), (35, 0));
}

/// B4: every attempt settles on its own, once, by its id: a second settlement, of any
/// outcome, changes nothing; an unknown attempt settles nothing; admitting a known
/// attempt again reserves nothing twice. An attempt whose result is unknown stays
/// pending with its upper bound — counted against balance, spend and budgets and
/// listed for reconciliation, never written as zero — until it is settled with its
/// real cost or refunded.
pub async fn b4_settlement_idempotent_and_pending_reconciled<H: Harness>(h: &H) {
    let s = h.store().await;
    let t = tenant("b4");
    let k = key("b4");
    seed(&s, &t, 100).await;
    let x = budget("b4:x", 100, None);
    let req = |a: &str, money| BillingRequest {
        budgets: budgets(&[&x]),
        ..bill(a, Some(&t), &k, money)
    };
    let figures = |v: &AccountView| (money_of(v), budget_of(v, 0));

    bill_ok(&s, &req("b4:a1", 10)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b4:a1", BillingOutcome::Settled(7)).await,
        Some(AttemptState::Settled(7))
    );
    for o in [
        BillingOutcome::Settled(7),
        BillingOutcome::Settled(9),
        BillingOutcome::Refund,
        BillingOutcome::Pending,
    ] {
        assert_eq!(
            settle_attempt(&s, &t, "b4:a1", o).await,
            None,
            "{o:?} again"
        );
    }
    assert_eq!(
        settle_attempt(&s, &t, "b4:never", BillingOutcome::Settled(7)).await,
        None
    );
    assert_eq!(
        settle_attempt(&s, &t, "b4:never", BillingOutcome::Pending).await,
        None
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(93), 0, 7, 0), (7, 0)));
    // An open attempt admitted again reserves nothing twice.
    bill_ok(&s, &req("b4:a1b", 10)).await;
    bill_ok(&s, &req("b4:a1b", 10)).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(93), 0, 7, 0), (7, 10)));
    settle_attempt(&s, &t, "b4:a1b", BillingOutcome::Refund).await;

    // Two attempts of one request, each settled on its own.
    bill_ok(&s, &req("b4:a2", 20)).await;
    bill_ok(&s, &req("b4:a3", 20)).await;
    settle_attempt(&s, &t, "b4:a2", BillingOutcome::Refund).await;
    settle_attempt(&s, &t, "b4:a3", BillingOutcome::Settled(12)).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(81), 0, 19, 0), (19, 0)));

    // Unknown result: pending with its upper bound.
    bill_ok(&s, &req("b4:a4", 40)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b4:a4", BillingOutcome::Pending).await,
        Some(AttemptState::Pending(40))
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(
        figures(&v),
        ((Some(81), 40, 19, 40), (19, 40)),
        "budgets keep the reservation"
    );
    assert_eq!(pending_list(&s).await, [(attempt("b4:a4"), 40)]);
    assert_eq!(
        settle_attempt(&s, &t, "b4:a4", BillingOutcome::Pending).await,
        None
    );
    bill_ok(&s, &req("b4:a4", 40)).await; // known: nothing reserved twice
    bill_refused(&s, &req("b4:a5", 50), Refusal::Budget(x.id.clone())).await; // 19 + 40 + 50
    // Pending money counts against the balance: 40 - 40 = 0.
    assert_eq!(credit(&s, &t, -41).await, 40);
    bill_refused(&s, &req("b4:a6", 1), Refusal::InsufficientBalance).await;
    assert_eq!(credit(&s, &t, 41).await, 81);
    bill_ok(&s, &req("b4:a7", 30)).await;
    settle_attempt(&s, &t, "b4:a7", BillingOutcome::Pending).await;
    assert_eq!(
        pending_list(&s).await,
        [(attempt("b4:a4"), 40), (attempt("b4:a7"), 30)]
    );

    // Reconciled with the real cost.
    assert_eq!(
        settle_attempt(&s, &t, "b4:a4", BillingOutcome::Settled(25)).await,
        Some(AttemptState::Settled(25))
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(56), 30, 44, 30), (44, 30)));
    assert_eq!(pending_list(&s).await, [(attempt("b4:a7"), 30)]);
    // Reconciled as never sent: everything released, nothing charged.
    assert_eq!(
        settle_attempt(&s, &t, "b4:a7", BillingOutcome::Refund).await,
        Some(AttemptState::Refunded)
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(56), 0, 44, 0), (44, 0)));
    assert!(pending_list(&s).await.is_empty());
    assert_eq!(
        settle_attempt(&s, &t, "b4:a7", BillingOutcome::Settled(1)).await,
        None
    );
    assert_eq!(
        settle_attempt(&s, &t, "b4:a4", BillingOutcome::Settled(1)).await,
        None
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(56), 0, 44, 0), (44, 0)));
}

/// B4, D7, B7: a settled or refunded attempt is forgotten at once — a duplicate
/// settlement finds nothing and changes nothing, and the same id admitted again is a
/// new attempt. An attempt still open after its lifetime (its instance died) is swept
/// into pending reconciliation at the next reservation in its books, its budget
/// reservation released; its upper bound then counts against the balance and the key's
/// spend as pending money until it is reconciled, and its budgets are not released
/// twice. A pending attempt is never swept.
pub async fn b7_final_attempts_forgotten_open_ones_swept<H: Harness>(h: &H) {
    let s = h.store().await;
    let t = tenant("b7");
    let k = key("b7");
    seed(&s, &t, 100).await;
    let x = budget("b7:x", 100, None);
    let req = |a: &str, money| BillingRequest {
        budgets: budgets(&[&x]),
        lifetime_ms: 2_000,
        ..bill(a, Some(&t), &k, money)
    };
    let figures = |v: &AccountView| (money_of(v), budget_of(v, 0));

    bill_ok(&s, &req("b7:a1", 10)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b7:a1", BillingOutcome::Settled(5)).await,
        Some(AttemptState::Settled(5))
    );
    for o in [BillingOutcome::Settled(5), BillingOutcome::Refund] {
        assert_eq!(
            settle_attempt(&s, &t, "b7:a1", o).await,
            None,
            "{o:?} again"
        );
    }
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(95), 0, 5, 0), (5, 0)));
    // Forgotten: the same id is a new attempt.
    bill_ok(&s, &req("b7:a1", 10)).await;
    assert_eq!(
        budget_of(&account(&s, Some(&t), &k, &[&x]).await, 0),
        (5, 10)
    );
    assert_eq!(
        settle_attempt(&s, &t, "b7:a1", BillingOutcome::Refund).await,
        Some(AttemptState::Refunded)
    );

    // An attempt whose instance died stays open; another one goes pending.
    bill_ok(&s, &req("b7:dead", 60)).await;
    bill_ok(&s, &req("b7:a2", 30)).await;
    assert_eq!(
        settle_attempt(&s, &t, "b7:a2", BillingOutcome::Pending).await,
        Some(AttemptState::Pending(30))
    );
    h.advance(ms(1_000)).await;
    // 5 + 60 + 30 + 40 > 100: the dead attempt still holds its reservation.
    bill_refused(&s, &req("b7:a3", 40), Refusal::Budget(x.id.clone())).await;
    h.advance(ms(1_500)).await;
    // Past its lifetime: swept at this reservation, before the decision.
    bill_ok(&s, &req("b7:a3", 40)).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(95), 90, 5, 90), (5, 70)));
    assert_eq!(
        pending_list(&s).await,
        [(attempt("b7:a2"), 30), (attempt("b7:dead"), 60)]
    );
    // Reconciled at its real cost; the budget is not released twice.
    assert_eq!(
        settle_attempt(&s, &t, "b7:dead", BillingOutcome::Settled(20)).await,
        Some(AttemptState::Settled(20))
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(75), 30, 25, 30), (25, 70)));
    assert_eq!(
        settle_attempt(&s, &t, "b7:dead", BillingOutcome::Settled(20)).await,
        None
    );
    assert_eq!(
        settle_attempt(&s, &t, "b7:a3", BillingOutcome::Refund).await,
        Some(AttemptState::Refunded)
    );
    assert_eq!(
        settle_attempt(&s, &t, "b7:a2", BillingOutcome::Settled(10)).await,
        Some(AttemptState::Settled(10))
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(65), 0, 35, 0), (35, 0)));
    assert!(pending_list(&s).await.is_empty());

    // A swept attempt refunded later gives nothing back to the budgets twice.
    bill_ok(&s, &req("b7:dead2", 50)).await;
    h.advance(ms(2_500)).await;
    bill_ok(&s, &req("b7:a4", 1)).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(65), 50, 35, 50), (35, 1)));
    assert_eq!(
        settle_attempt(&s, &t, "b7:dead2", BillingOutcome::Refund).await,
        Some(AttemptState::Refunded)
    );
    settle_attempt(&s, &t, "b7:a4", BillingOutcome::Refund).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(65), 0, 35, 0), (35, 0)));
}

async fn reconcile<S: ReconcileStore>(s: &S, a: &AttemptRef, how: Reconcile) -> Reconciled {
    s.reconcile(a, how).await.expect("reconcile: store error")
}

async fn totals<S: ReconcileStore>(s: &S) -> Vec<(Books, PendingTotal)> {
    s.pending_totals()
        .await
        .expect("pending_totals: store error")
}

/// Every page of the pending listing, `limit` at a time (at most 100 pages).
async fn all_pages<S: ReconcileStore>(s: &S, limit: usize) -> Vec<Vec<PendingAttempt>> {
    let mut pages = Vec::new();
    let mut after: Option<AttemptRef> = None;
    for _ in 0..100 {
        let page = s
            .pending_page(after.as_ref(), limit)
            .await
            .expect("pending_page: store error");
        if page.is_empty() {
            return pages;
        }
        assert!(page.len() <= limit, "a page of {} > {limit}", page.len());
        after = page.last().map(|p| p.attempt.clone());
        pages.push(page);
    }
    panic!("the pending listing did not end within 100 pages");
}

fn total(attempts: u64, amount: Money) -> PendingTotal {
    PendingTotal { attempts, amount }
}

/// B7: attempts pending reconciliation are listed page by page in a stable order
/// (books, then attempt id), each exactly once, with their amount, key and whether the
/// balance pays; an operator settles one at a cost or writes it off, which releases what
/// it held (pending money on the balance and the key's spend, budget reservations unless
/// the sweep released them) exactly once — a second reconciliation answers "not pending"
/// and changes nothing — and an open attempt is left to its request.
pub async fn b7_pending_listed_in_pages_and_reconciled_once<H: Harness>(h: &H) {
    let s = h.store().await;
    let (t1, t2) = (tenant("b7r:one"), tenant("b7r:two"));
    let (k1, k2, lone) = (key("b7r:k1"), key("b7r:k2"), key("b7r:lone"));
    seed(&s, &t1, 1_000).await;
    seed(&s, &t2, 1_000).await;
    let x = budget("b7r:x", 1_000, None);
    let req = |a: &str, t: Option<&str>, k: &SubjectKey, money| BillingRequest {
        budgets: budgets(&[&x]),
        lifetime_ms: 2_000,
        ..bill(a, t, k, money)
    };
    let mut expected: Vec<AttemptRef> = Vec::new();
    for i in [4, 1, 3, 2, 0] {
        let a = format!("b7r:one:{i}");
        bill_ok(&s, &req(&a, Some(&t1), &k1, 10 + i)).await;
        settle_attempt(&s, &t1, &a, BillingOutcome::Pending).await;
        expected.push(in_tenant(&t1, &a));
    }
    for i in [1, 0] {
        let a = format!("b7r:two:{i}");
        bill_ok(&s, &req(&a, Some(&t2), &k2, 20)).await;
        settle_attempt(&s, &t2, &a, BillingOutcome::Pending).await;
        expected.push(in_tenant(&t2, &a));
    }
    // A tenant-less key's books, and an attempt covered by a subscription.
    bill_ok(&s, &req("b7r:lone", None, &lone, 7)).await;
    let lone_ref = AttemptRef {
        attempt: attempt("b7r:lone"),
        books: Books::Key(lone.clone()),
    };
    s.settle_attempt(&lone_ref, BillingOutcome::Pending)
        .await
        .expect("settle_attempt: store error");
    expected.push(lone_ref.clone());
    let covered = BillingRequest {
        bill_balance: false,
        ..req("b7r:covered", Some(&t2), &k2, 5)
    };
    bill_ok(&s, &covered).await;
    settle_attempt(&s, &t2, "b7r:covered", BillingOutcome::Pending).await;
    expected.push(in_tenant(&t2, "b7r:covered"));
    // One open attempt dies (swept later), one stays open and in flight.
    bill_ok(&s, &req("b7r:dead", Some(&t1), &k1, 50)).await;
    expected.push(in_tenant(&t1, "b7r:dead"));
    h.advance(ms(2_500)).await;
    bill_ok(&s, &req("b7r:live", Some(&t1), &k1, 1)).await;
    expected.sort_by(|a, b| (&a.books, &a.attempt).cmp(&(&b.books, &b.attempt)));

    for limit in [1, 3, expected.len(), 100] {
        let pages = all_pages(&s, limit).await;
        let listed: Vec<AttemptRef> = pages.iter().flatten().map(|p| p.attempt.clone()).collect();
        assert_eq!(
            listed, expected,
            "pages of {limit}: each pending attempt once, in order"
        );
    }
    let listed: Vec<PendingAttempt> = all_pages(&s, 100).await.concat();
    let find = |a: &AttemptRef| listed.iter().find(|p| p.attempt == *a).cloned().unwrap();
    let one0 = find(&in_tenant(&t1, "b7r:one:0"));
    assert_eq!(
        (one0.amount, one0.key.clone(), one0.billed_to_balance),
        (10, Some(k1.clone()), true)
    );
    assert!(one0.since.is_some(), "{one0:?}");
    let cov = find(&in_tenant(&t2, "b7r:covered"));
    assert_eq!((cov.amount, cov.billed_to_balance), (5, false));
    assert_eq!(find(&lone_ref).key, Some(lone.clone()));
    assert_eq!(find(&in_tenant(&t1, "b7r:dead")).amount, 50);

    // The open attempt is its request's to settle.
    assert_eq!(
        reconcile(&s, &in_tenant(&t1, "b7r:live"), Reconcile::Settle(1)).await,
        Reconciled::InFlight
    );
    // Settled at its real cost (above its upper bound: the operator knows better).
    let v = account(&s, Some(&t1), &k1, &[&x]).await;
    // 10+11+12+13+14 pending + 50 swept = 110; the budget holds 60 + the live 1.
    assert_eq!(
        (money_of(&v), budget_of(&v, 0)),
        ((Some(1_000), 110, 0, 110), (0, 61))
    );
    let one3 = in_tenant(&t1, "b7r:one:3");
    let r = reconcile(&s, &one3, Reconcile::Settle(25)).await;
    assert_eq!(
        r,
        Reconciled::Settled {
            attempt: find(&one3),
            cost: 25
        }
    );
    for how in [
        Reconcile::Settle(25),
        Reconcile::Settle(1),
        Reconcile::WriteOff,
    ] {
        assert_eq!(
            reconcile(&s, &one3, how).await,
            Reconciled::NotPending,
            "{how:?} again changes nothing"
        );
    }
    let v = account(&s, Some(&t1), &k1, &[&x]).await;
    assert_eq!(
        (money_of(&v), budget_of(&v, 0)),
        ((Some(975), 97, 25, 97), (25, 48))
    );
    // Written off: released, nothing charged.
    let one4 = in_tenant(&t1, "b7r:one:4");
    assert_eq!(
        reconcile(&s, &one4, Reconcile::WriteOff).await,
        Reconciled::WrittenOff {
            attempt: find(&one4)
        }
    );
    assert_eq!(
        reconcile(&s, &one4, Reconcile::WriteOff).await,
        Reconciled::NotPending
    );
    assert_eq!(
        reconcile(&s, &one4, Reconcile::Settle(3)).await,
        Reconciled::NotPending
    );
    let v = account(&s, Some(&t1), &k1, &[&x]).await;
    assert_eq!(
        (money_of(&v), budget_of(&v, 0)),
        ((Some(975), 83, 25, 83), (25, 34))
    );
    // The swept attempt: its budget reservation went with the sweep, not again now.
    let dead = in_tenant(&t1, "b7r:dead");
    assert!(matches!(
        reconcile(&s, &dead, Reconcile::Settle(40)).await,
        Reconciled::Settled { cost: 40, .. }
    ));
    let v = account(&s, Some(&t1), &k1, &[&x]).await;
    assert_eq!(
        (money_of(&v), budget_of(&v, 0)),
        ((Some(935), 33, 65, 33), (65, 34))
    );
    // Unknown names change nothing.
    for unknown in [
        in_tenant(&t1, "b7r:never"),
        in_tenant(&tenant("b7r:nobody"), "b7r:one:0"),
    ] {
        assert_eq!(
            reconcile(&s, &unknown, Reconcile::WriteOff).await,
            Reconciled::NotPending
        );
    }
    // The tenant-less key's books, and the covered attempt (its balance untouched).
    assert!(matches!(
        reconcile(&s, &lone_ref, Reconcile::Settle(6)).await,
        Reconciled::Settled { cost: 6, .. }
    ));
    let v = account(&s, None, &lone, &[&x]).await;
    assert_eq!((money_of(&v), budget_of(&v, 0)), ((None, 0, 6, 0), (6, 0)));
    assert!(matches!(
        reconcile(&s, &in_tenant(&t2, "b7r:covered"), Reconcile::Settle(5)).await,
        Reconciled::Settled { cost: 5, .. }
    ));
    let v = account(&s, Some(&t2), &k2, &[&x]).await;
    assert_eq!(
        (money_of(&v), budget_of(&v, 0)),
        ((Some(1_000), 40, 0, 40), (5, 40))
    );

    let left: Vec<AttemptRef> = all_pages(&s, 2)
        .await
        .concat()
        .into_iter()
        .map(|p| p.attempt)
        .collect();
    let mut want: Vec<AttemptRef> = expected
        .into_iter()
        .filter(|a| {
            ![
                one3.clone(),
                one4.clone(),
                dead.clone(),
                lone_ref.clone(),
                in_tenant(&t2, "b7r:covered"),
            ]
            .contains(a)
        })
        .collect();
    want.sort_by(|a, b| (&a.books, &a.attempt).cmp(&(&b.books, &b.attempt)));
    assert_eq!(left, want);
    settle_attempt(&s, &t1, "b7r:live", BillingOutcome::Refund).await;
}

/// B7: every books keeps a counter of its attempts pending reconciliation and their
/// money, whoever pays: raised when an attempt goes pending (an unknown result, or the
/// sweep), lowered when it is settled, written off or refunded by any path, and gone
/// once nothing is pending; books with nothing pending are not listed.
pub async fn b7_pending_counter_follows_attempts<H: Harness>(h: &H) {
    let s = h.store().await;
    let (t1, t2) = (tenant("b7c:one"), tenant("b7c:two"));
    let (k, lone) = (key("b7c:k"), key("b7c:lone"));
    seed(&s, &t1, 1_000).await;
    seed(&s, &t2, 1_000).await;
    let req = |a: &str, t: Option<&str>, k: &SubjectKey, money| BillingRequest {
        lifetime_ms: 2_000,
        ..bill(a, t, k, money)
    };
    let (b1, b2, bl) = (
        Books::Tenant(t1.as_str().into()),
        Books::Tenant(t2.as_str().into()),
        Books::Key(lone.clone()),
    );
    assert!(totals(&s).await.is_empty());
    bill_ok(&s, &req("b7c:a1", Some(&t1), &k, 30)).await;
    bill_ok(&s, &req("b7c:a2", Some(&t1), &k, 12)).await;
    assert!(totals(&s).await.is_empty(), "open attempts are not pending");
    settle_attempt(&s, &t1, "b7c:a1", BillingOutcome::Pending).await;
    assert_eq!(totals(&s).await, [(b1.clone(), total(1, 30))]);
    // Pending again: not counted twice.
    settle_attempt(&s, &t1, "b7c:a1", BillingOutcome::Pending).await;
    settle_attempt(&s, &t1, "b7c:a2", BillingOutcome::Pending).await;
    let covered = BillingRequest {
        bill_balance: false,
        ..req("b7c:c", Some(&t2), &k, 8)
    };
    bill_ok(&s, &covered).await;
    settle_attempt(&s, &t2, "b7c:c", BillingOutcome::Pending).await;
    bill_ok(&s, &req("b7c:l", None, &lone, 4)).await;
    let l_ref = AttemptRef {
        attempt: attempt("b7c:l"),
        books: bl.clone(),
    };
    s.settle_attempt(&l_ref, BillingOutcome::Pending)
        .await
        .expect("settle_attempt: store error");
    let mut want = vec![
        (b1.clone(), total(2, 42)),
        (b2.clone(), total(1, 8)),
        (bl.clone(), total(1, 4)),
    ];
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(totals(&s).await, want);
    // A covered attempt is pending money of the books, not of the balance.
    assert_eq!(
        money_of(&account(&s, Some(&t2), &k, &[]).await),
        (Some(1_000), 0, 0, 0)
    );

    // Swept: counted when the sweep makes it pending.
    bill_ok(&s, &req("b7c:dead", Some(&t1), &k, 100)).await;
    h.advance(ms(2_500)).await;
    bill_ok(&s, &req("b7c:next", Some(&t1), &k, 1)).await;
    settle_attempt(&s, &t1, "b7c:next", BillingOutcome::Settled(1)).await;
    let t = totals(&s).await;
    assert_eq!(
        t.iter().find(|(b, _)| *b == b1).map(|x| x.1),
        Some(total(3, 142))
    );

    // Lowered by every way out: an ordinary settlement, a refund, an operator's.
    settle_attempt(&s, &t1, "b7c:a1", BillingOutcome::Settled(20)).await;
    settle_attempt(&s, &t1, "b7c:a2", BillingOutcome::Refund).await;
    let t = totals(&s).await;
    assert_eq!(
        t.iter().find(|(b, _)| *b == b1).map(|x| x.1),
        Some(total(1, 100))
    );
    reconcile(&s, &in_tenant(&t1, "b7c:dead"), Reconcile::WriteOff).await;
    reconcile(&s, &in_tenant(&t1, "b7c:dead"), Reconcile::WriteOff).await;
    reconcile(&s, &l_ref, Reconcile::Settle(4)).await;
    assert_eq!(
        totals(&s).await,
        [(b2.clone(), total(1, 8))],
        "books with nothing pending are gone"
    );
    reconcile(&s, &in_tenant(&t2, "b7c:c"), Reconcile::Settle(8)).await;
    assert!(totals(&s).await.is_empty());
    // The counter agrees with the listing.
    assert!(all_pages(&s, 10).await.is_empty());
}

/// B7: a tenant whose billing record is missing although the request expects one (the
/// configuration names it) is refused as [`Refusal::RecordMissing`], never as a zero
/// balance; an explicit balance brings it back, and seeding keeps a record that exists.
pub async fn b7_missing_tenant_record_is_its_own_refusal<H: Harness>(h: &H) {
    let s = h.store().await;
    let t = tenant("b7m");
    let k = key("b7m");
    let expected = |a: &str| BillingRequest {
        tenant_expected: true,
        ..bill(a, Some(&t), &k, 5)
    };
    bill_refused(&s, &expected("b7m:a1"), Refusal::RecordMissing).await;
    // Not expected: no record reads as no balance.
    bill_refused(
        &s,
        &bill("b7m:a1", Some(&t), &k, 5),
        Refusal::InsufficientBalance,
    )
    .await;
    // A request the balance does not pay for needs no record.
    let covered = BillingRequest {
        bill_balance: false,
        ..expected("b7m:a2")
    };
    bill_ok(&s, &covered).await;
    settle_attempt(&s, &t, "b7m:a2", BillingOutcome::Refund).await;
    bill_refused(&s, &expected("b7m:a3"), Refusal::RecordMissing).await;

    s.set_balance(&t, 50)
        .await
        .expect("set_balance: store error");
    bill_ok(&s, &expected("b7m:a3")).await;
    settle_attempt(&s, &t, "b7m:a3", BillingOutcome::Pending).await;
    assert!(!seed(&s, &t, 1_000).await, "seeding replaced a record");
    s.set_balance(&t, 7)
        .await
        .expect("set_balance: store error");
    assert_eq!(
        money_of(&account(&s, Some(&t), &k, &[]).await),
        (Some(7), 5, 0, 5),
        "an explicit balance keeps pending money"
    );
    settle_attempt(&s, &t, "b7m:a3", BillingOutcome::Settled(2)).await;
    assert_eq!(
        money_of(&account(&s, Some(&t), &k, &[]).await),
        (Some(5), 0, 2, 0)
    );
    assert!(
        seed(&s, &tenant("b7m:new"), 3).await,
        "a new tenant was not seeded"
    );
    let _ = h;
}

/// D3: the books are per tenant (or, with no tenant, per key): one attempt id in two
/// books is two attempts, a budget id named by requests of two tenants is two budgets,
/// and the pending list names each attempt's books.
pub async fn d3_books_are_kept_per_tenant<H: Harness>(h: &H) {
    let s = h.store().await;
    let (t1, t2) = (tenant("d3:one"), tenant("d3:two"));
    let k = key("d3");
    seed(&s, &t1, 100).await;
    seed(&s, &t2, 100).await;
    let x = budget("d3:x", 50, None);
    let req = |t: &str| BillingRequest {
        budgets: budgets(&[&x]),
        ..bill("d3:a", Some(t), &k, 40)
    };
    bill_ok(&s, &req(&t1)).await;
    bill_ok(&s, &req(&t2)).await; // its own budget x: 40 ≤ 50
    bill_ok(&s, &bill("d3:a", None, &k, 40)).await;
    assert_eq!(
        settle_attempt(&s, &t2, "d3:a", BillingOutcome::Settled(3)).await,
        Some(AttemptState::Settled(3))
    );
    assert_eq!(
        settle_attempt(&s, &t1, "d3:a", BillingOutcome::Pending).await,
        Some(AttemptState::Pending(40))
    );
    let in_key = AttemptRef {
        attempt: attempt("d3:a"),
        books: Books::Key(k.clone()),
    };
    assert_eq!(
        s.settle_attempt(&in_key, BillingOutcome::Pending)
            .await
            .expect("settle_attempt: store error"),
        Some(AttemptState::Pending(40))
    );
    let v1 = account(&s, Some(&t1), &k, &[&x]).await;
    let v2 = account(&s, Some(&t2), &k, &[&x]).await;
    let v0 = account(&s, None, &k, &[&x]).await;
    assert_eq!(
        (money_of(&v1), budget_of(&v1, 0)),
        ((Some(100), 40, 0, 40), (0, 40))
    );
    assert_eq!(
        (money_of(&v2), budget_of(&v2, 0)),
        ((Some(97), 0, 3, 0), (3, 0))
    );
    assert_eq!(
        (money_of(&v0), budget_of(&v0, 0)),
        ((None, 0, 0, 40), (0, 0))
    );
    let mut pending = s.pending().await.expect("pending: store error");
    pending.sort();
    let mut want = vec![(in_tenant(&t1, "d3:a"), 40), (in_key.clone(), 40)];
    want.sort();
    assert_eq!(pending, want);
    for r in [in_tenant(&t1, "d3:a"), in_key] {
        s.settle_attempt(&r, BillingOutcome::Refund)
            .await
            .expect("settle_attempt: store error");
    }
    assert!(pending_list(&s).await.is_empty());
    let _ = h;
}

/// W8, B1: a request covered by a subscription is neither checked against nor charged
/// to the balance or the key's spend (pending money included); budgets still are.
pub async fn w8_covered_requests_skip_balance_and_spend<H: Harness>(h: &H) {
    let s = h.store().await;
    let t = tenant("w8");
    let k = key("w8");
    seed(&s, &t, 0).await;
    let x = budget("w8:x", 100, None);
    let covered = |a: &str, money| BillingRequest {
        bill_balance: false,
        spend_cap: Some(0),
        budgets: budgets(&[&x]),
        ..bill(a, Some(&t), &k, money)
    };
    let figures = |v: &AccountView| (money_of(v), budget_of(v, 0));
    bill_refused(
        &s,
        &BillingRequest {
            bill_balance: true,
            ..covered("w8:a0", 10)
        },
        Refusal::InsufficientBalance,
    )
    .await;
    bill_ok(&s, &covered("w8:a1", 10)).await;
    assert_eq!(
        settle_attempt(&s, &t, "w8:a1", BillingOutcome::Settled(10)).await,
        Some(AttemptState::Settled(10))
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(0), 0, 0, 0), (10, 0)));
    bill_ok(&s, &covered("w8:a2", 10)).await;
    assert_eq!(
        settle_attempt(&s, &t, "w8:a2", BillingOutcome::Pending).await,
        Some(AttemptState::Pending(10))
    );
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(0), 0, 0, 0), (10, 10)));
    assert_eq!(pending_list(&s).await, [(attempt("w8:a2"), 10)]);
    settle_attempt(&s, &t, "w8:a2", BillingOutcome::Settled(4)).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(0), 0, 0, 0), (14, 0)));
    assert!(pending_list(&s).await.is_empty());
    // Budgets still bind a covered request.
    bill_refused(&s, &covered("w8:a3", 87), Refusal::Budget(x.id.clone())).await;
    bill_ok(&s, &covered("w8:a3", 86)).await;
    settle_attempt(&s, &t, "w8:a3", BillingOutcome::Refund).await;
    let v = account(&s, Some(&t), &k, &[&x]).await;
    assert_eq!(figures(&v), ((Some(0), 0, 0, 0), (14, 0)));
}

/// Seeding a balance from configuration sets it only for a tenant with no books: a
/// running balance is never reset. Credits add (or, negative, debit) and return the new
/// balance; a tenant first credited keeps that balance when seeded later.
pub async fn seed_balance_keeps_running_balance<H: Harness>(h: &H) {
    let s = h.store().await;
    let (t, t2, t3, t4) = (
        tenant("seed"),
        tenant("seed:credited"),
        tenant("seed:negative"),
        tenant("seed:unknown"),
    );
    let k = key("seed");
    let balance = |t: &str| {
        let t = t.to_owned();
        let (s, k) = (s.clone(), k.clone());
        async move { account(&s, Some(&t), &k, &[]).await.balance }
    };
    seed(&s, &t, 100).await;
    assert_eq!(balance(&t).await, Some(100));
    bill_ok(&s, &bill("seed:a1", Some(&t), &k, 50)).await;
    settle_attempt(&s, &t, "seed:a1", BillingOutcome::Settled(30)).await;
    assert_eq!(balance(&t).await, Some(70));
    seed(&s, &t, 100).await;
    assert_eq!(
        balance(&t).await,
        Some(70),
        "seeding reset a running balance"
    );
    seed(&s, &t, 0).await;
    assert_eq!(balance(&t).await, Some(70));
    assert_eq!(credit(&s, &t, 5).await, 75);
    assert_eq!(credit(&s, &t, -80).await, -5);
    assert_eq!(balance(&t).await, Some(-5));
    bill_refused(
        &s,
        &bill("seed:a2", Some(&t), &k, 1),
        Refusal::InsufficientBalance,
    )
    .await;

    assert_eq!(credit(&s, &t2, 5).await, 5);
    seed(&s, &t2, 100).await;
    assert_eq!(balance(&t2).await, Some(5));
    seed(&s, &t3, -5).await;
    assert_eq!(balance(&t3).await, Some(-5));
    assert_eq!(balance(&t4).await, Some(0));
}

// ---------------------------------------------------------------------------------
// The in-memory store against the suite.

#[cfg(test)]
mod memory {
    use super::Harness;
    use crate::clock::{Clock, ManualClock, Millis};
    use crate::store::memory::MemoryStore;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    /// A start time on no calendar boundary, so anchors are visibly the first use.
    const START: Millis = 1_700_000_000_123;

    struct MemoryHarness {
        clock: ManualClock,
    }

    impl MemoryHarness {
        fn new() -> Self {
            Self {
                clock: ManualClock::new(START),
            }
        }
    }

    impl Harness for MemoryHarness {
        type Store = MemoryStore<ManualClock>;

        async fn store(&self) -> Self::Store {
            MemoryStore::with_clock(self.clock.clone())
        }
        async fn advance(&self, d: Duration) {
            self.clock.advance(d);
        }
        fn now(&self) -> Option<Millis> {
            Some(self.clock.now())
        }
    }

    /// The in-memory store's futures are `Ready`: one poll finishes the whole check.
    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("an in-memory store future was not ready"),
        }
    }

    macro_rules! memory_conformance {
        ($($name:ident),* $(,)?) => {$(
            #[test]
            fn $name() {
                block_on(super::$name(&MemoryHarness::new()));
            }
        )*};
    }

    memory_conformance!(
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
        run_all,
    );

    /// The suite with a slack declared: the tolerant branches (used by stores on real
    /// time) must pass too on an exact store.
    struct SlackHarness(MemoryHarness);

    impl Harness for SlackHarness {
        type Store = MemoryStore<ManualClock>;
        const SLACK_MS: Millis = 250;

        async fn store(&self) -> Self::Store {
            self.0.store().await
        }
        async fn advance(&self, d: Duration) {
            // Real time overshoots a little: so does this clock.
            self.0.advance(d + Duration::from_millis(7)).await;
        }
    }

    #[test]
    fn run_all_with_slack() {
        block_on(super::run_all(&SlackHarness(MemoryHarness::new())));
    }
}
