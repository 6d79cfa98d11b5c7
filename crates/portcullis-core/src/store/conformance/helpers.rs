//! The suite's vocabulary: names, policies and demands, and store calls that expect an
//! answer and record in the case's [`Footprint`](super::Footprint) what they touched
//! (slots, windows) and what the store answered (billing).
#![allow(unreachable_pub)]

pub(super) use super::Harness;
pub(super) use super::invariants::{Case, Store};
pub(super) use crate::billing::{
    AccountView, AttemptId, AttemptRef, AttemptState, BillingDecision, BillingOutcome,
    BillingRequest, Books, Budget, DEFAULT_ATTEMPT_LIFETIME_MS, PendingAttempt, PendingTotal,
    Reconcile, Reconciled, Refusal,
};
pub(super) use crate::clock::Millis;
pub(super) use crate::demand::{Demand, Usage};
pub(super) use crate::money::Money;
pub(super) use crate::policy::{AnchorGroup, Dimension, Policy, Tier};
pub(super) use crate::slots::LeaseId;
pub(super) use crate::store::{
    Admission, BillingStore, ReconcileStore, SlotDecision, SlotStore, WindowStore,
};
pub(super) use crate::subject::{Scope, SubjectKey};
pub(super) use crate::window::{Exceeded, LimitView, Outcome, ROLLING_WINDOW_MS, WindowTicket};
pub(super) use std::future::Future;
pub(super) use std::pin::Pin;
pub(super) use std::sync::Arc;
pub(super) use std::task::Poll;
pub(super) use std::time::Duration;

/// A fresh store from `h`, as a case: the helpers record what the case does with it.
pub(super) async fn case<H: Harness>(h: &H) -> Case<H::Store> {
    Case::new(h.store().await)
}

pub(super) const LONG_TTL: Millis = 600_000;

pub(super) fn key(s: &str) -> SubjectKey {
    SubjectKey::from(format!("conformance:{s}"))
}

pub(super) fn secs(s: u64, limit: u64) -> Tier {
    Tier::new(Duration::from_secs(s), limit)
}

pub(super) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(super) fn demand(tokens: u64, images: u64, videos: u64, money: Money) -> Demand {
    Demand {
        tokens,
        images,
        videos,
        money,
    }
}

pub(super) fn tokens_used(total: u64) -> Usage {
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

pub(super) async fn acquire<S: Store>(
    s: &Case<S>,
    k: &SubjectKey,
    limit: u32,
    ttl: Millis,
) -> SlotDecision {
    s.touch(|f| {
        f.slot(k);
    });
    SlotStore::acquire(s.store(), k, limit, ttl)
        .await
        .expect("acquire: store error")
}

pub(super) async fn acquired<S: Store>(
    s: &Case<S>,
    k: &SubjectKey,
    limit: u32,
    ttl: Millis,
) -> LeaseId {
    match acquire(s, k, limit, ttl).await {
        SlotDecision::Acquired(id) => id,
        d => panic!("{k:?}: expected a slot under limit {limit}, got {d:?}"),
    }
}

pub(super) async fn in_flight<S: Store>(s: &Case<S>, k: &SubjectKey) -> u32 {
    s.touch(|f| {
        f.slot(k);
    });
    SlotStore::in_flight(s.store(), k)
        .await
        .expect("in_flight: store error")
}

pub(super) async fn release<S: Store>(s: &Case<S>, k: &SubjectKey, l: LeaseId) {
    s.touch(|f| {
        f.slot(k);
    });
    SlotStore::release(s.store(), k, l)
        .await
        .expect("release: store error");
}

pub(super) async fn renew<S: Store>(s: &Case<S>, k: &SubjectKey, l: LeaseId, ttl: Millis) -> bool {
    s.touch(|f| {
        f.slot(k);
    });
    SlotStore::renew(s.store(), k, l, ttl)
        .await
        .expect("renew: store error")
}

pub(super) async fn admit<S: Store>(
    s: &Case<S>,
    k: &SubjectKey,
    scope: Scope,
    p: &Arc<Policy>,
    d: Demand,
) -> Admission {
    s.touch(|f| {
        f.window(k, scope, p);
    });
    WindowStore::admit(s.store(), k, scope, p, &d)
        .await
        .expect("admit: store error")
}

pub(super) async fn admitted<S: Store>(
    s: &Case<S>,
    k: &SubjectKey,
    p: &Arc<Policy>,
    d: Demand,
) -> WindowTicket {
    match admit(s, k, Scope::Key, p, d).await {
        Admission::Admitted(t) => t,
        Admission::Exceeded(e) => panic!("{k:?}: expected {d:?} to be admitted, got {e:?}"),
    }
}

pub(super) async fn rejected<S: Store>(
    s: &Case<S>,
    k: &SubjectKey,
    p: &Arc<Policy>,
    d: Demand,
) -> Exceeded {
    match admit(s, k, Scope::Key, p, d).await {
        Admission::Exceeded(e) => e,
        Admission::Admitted(t) => panic!("{k:?}: expected {d:?} to be rejected, admitted {t:?}"),
    }
}

pub(super) async fn settle<S: Store>(s: &Case<S>, k: &SubjectKey, t: WindowTicket, o: Outcome) {
    WindowStore::settle(s.store(), k, Scope::Key, t, o)
        .await
        .expect("settle: store error");
}

pub(super) async fn view<S: Store>(
    s: &Case<S>,
    k: &SubjectKey,
    scope: Scope,
    p: &Arc<Policy>,
) -> Vec<LimitView> {
    s.touch(|f| {
        f.window(k, scope, p);
    });
    WindowStore::view(s.store(), k, scope, p)
        .await
        .expect("view: store error")
}

/// The usage-view line of one tier (`window_ms` 0 for the amount cap).
pub(super) fn line(v: &[LimitView], d: Dimension, window_ms: Millis) -> LimitView {
    *v.iter()
        .find(|l| l.dimension == d && l.tier.window_ms == window_ms)
        .unwrap_or_else(|| panic!("no {d} tier of {window_ms} ms in the view {v:?}"))
}

pub(super) fn used(v: &[LimitView], d: Dimension, window_ms: Millis) -> u64 {
    line(v, d, window_ms).used
}

pub(super) fn resets_at(v: &[LimitView], d: Dimension, window_ms: Millis) -> Millis {
    line(v, d, window_ms)
        .resets_at
        .unwrap_or_else(|| panic!("{d} tier of {window_ms} ms has no reset time: {v:?}"))
}

/// The exceeded limits as (dimension, window) pairs, sorted.
pub(super) fn limits_of(e: &Exceeded) -> Vec<(Dimension, Millis)> {
    let mut v: Vec<_> = e
        .limits
        .iter()
        .map(|l| (l.dimension, l.tier.window_ms))
        .collect();
    v.sort();
    v
}

pub(super) fn retry_of(e: &Exceeded, d: Dimension, window_ms: Millis) -> Option<Millis> {
    e.limits
        .iter()
        .find(|l| l.dimension == d && l.tier.window_ms == window_ms)
        .unwrap_or_else(|| panic!("{d} tier of {window_ms} ms is not exceeded: {e:?}"))
        .retry_after_ms
}

/// `actual` equals `expected` within the harness's slack.
#[track_caller]
pub(super) fn assert_near<H: Harness>(actual: Millis, expected: Millis, what: &str) {
    assert!(
        actual.abs_diff(expected) <= H::SLACK_MS,
        "{what}: got {actual} ms, expected {expected} ms (slack {} ms)",
        H::SLACK_MS
    );
}

#[track_caller]
pub(super) fn assert_retry<H: Harness>(actual: Option<Millis>, expected: Millis, what: &str) {
    let actual = actual.unwrap_or_else(|| panic!("{what}: no retry-after, expected {expected} ms"));
    assert_near::<H>(actual, expected, what);
}

pub(super) fn exact<H: Harness>() -> bool {
    H::SLACK_MS == 0
}

// ---------------------------------------------------------------------------------
// Billing (B1–B7)

pub(super) fn tenant(s: &str) -> String {
    format!("conformance:tenant:{s}")
}

pub(super) fn attempt(a: &str) -> AttemptId {
    format!("conformance:{a}").into()
}

pub(super) fn budget(id: &str, limit: Money, period_ms: Option<Millis>) -> Budget {
    Budget {
        id: format!("conformance:{id}").into(),
        limit,
        period_ms,
    }
}

pub(super) fn budgets(b: &[&Budget]) -> Arc<[Budget]> {
    b.iter().map(|&b| b.clone()).collect()
}

/// A request of attempt `a`, billed to `tenant`'s balance, counted in `key`'s spend:
/// upper bound `money`, no spend cap, no budgets.
pub(super) fn bill(
    a: &str,
    tenant: Option<&str>,
    key: &SubjectKey,
    money: Money,
) -> BillingRequest {
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
pub(super) fn in_tenant(t: &str, a: &str) -> AttemptRef {
    AttemptRef {
        attempt: attempt(a),
        books: Books::Tenant(t.into()),
    }
}

pub(super) async fn reserve<S: Store>(s: &Case<S>, r: &BillingRequest) -> BillingDecision {
    let d = BillingStore::check_and_reserve(s.store(), r)
        .await
        .expect("check_and_reserve: store error");
    s.touch(|f| f.ledger_mut().reserved(r, &d));
    d
}

pub(super) async fn bill_ok<S: Store>(s: &Case<S>, r: &BillingRequest) {
    let d = reserve(s, r).await;
    assert_eq!(d, BillingDecision::Admitted, "{r:?}");
}

pub(super) async fn bill_refused<S: Store>(s: &Case<S>, r: &BillingRequest, why: Refusal) {
    let d = reserve(s, r).await;
    assert_eq!(d, BillingDecision::Refused(why), "{r:?}");
}

/// Settles attempt `a` of tenant `t`.
pub(super) async fn settle_attempt<S: Store>(
    s: &Case<S>,
    t: &str,
    a: &str,
    o: BillingOutcome,
) -> Option<AttemptState> {
    settle_ref(s, &in_tenant(t, a), o).await
}

/// Settles the attempt `r`.
pub(super) async fn settle_ref<S: Store>(
    s: &Case<S>,
    r: &AttemptRef,
    o: BillingOutcome,
) -> Option<AttemptState> {
    let answer = BillingStore::settle_attempt(s.store(), r, o)
        .await
        .expect("settle_attempt: store error");
    s.touch(|f| f.ledger_mut().settled(r, answer));
    answer
}

pub(super) async fn account<S: Store>(
    s: &Case<S>,
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
pub(super) async fn seed<S: Store>(s: &Case<S>, tenant: &str, amount: Money) -> bool {
    let written = BillingStore::seed_balance(s.store(), tenant, amount)
        .await
        .expect("seed_balance: store error");
    s.touch(|f| f.ledger_mut().seeded(tenant, amount, written));
    written
}

/// Seeds `key`'s spend in `books`; true if it was written, false if the key kept its
/// record.
pub(super) async fn seed_key<S: Store>(
    s: &Case<S>,
    books: &Books,
    key: &SubjectKey,
    spent: Money,
) -> bool {
    let written = BillingStore::seed_key_spend(s.store(), books, key, spent)
        .await
        .expect("seed_key_spend: store error");
    s.touch(|f| f.ledger_mut().key_spend_seeded(books, key, spent, written));
    written
}

/// Sets `tenant`'s balance explicitly.
pub(super) async fn set_balance<S: Store>(s: &Case<S>, tenant: &str, amount: Money) {
    BillingStore::set_balance(s.store(), tenant, amount)
        .await
        .expect("set_balance: store error");
    s.touch(|f| f.ledger_mut().balance_set(tenant, amount));
}

pub(super) async fn credit<S: Store>(s: &Case<S>, tenant: &str, amount: Money) -> Money {
    let balance = BillingStore::credit(s.store(), tenant, amount)
        .await
        .expect("credit: store error");
    s.touch(|f| f.ledger_mut().credited(tenant, amount));
    balance
}

/// The attempts pending reconciliation (ids and amounts), sorted.
pub(super) async fn pending_list<S: Store>(s: &Case<S>) -> Vec<(AttemptId, Money)> {
    let mut v: Vec<(AttemptId, Money)> = BillingStore::pending(s.store())
        .await
        .expect("pending: store error")
        .into_iter()
        .map(|(r, m)| (r.attempt, m))
        .collect();
    v.sort();
    v
}

/// (balance, tenant pending, key spent, key pending).
pub(super) fn money_of(v: &AccountView) -> (Option<Money>, Money, Money, Money) {
    (v.balance, v.tenant_pending, v.key_spent, v.key_pending)
}

/// (spent, reserved) of the `i`-th budget of the view.
pub(super) fn budget_of(v: &AccountView, i: usize) -> (Money, Money) {
    (v.budgets[i].spent, v.budgets[i].reserved)
}

/// Polls every future until all are done, on the current task: the calls are in flight
/// together (pipelined on a connection, interleaved in a store), as concurrent requests
/// of a gateway are.
pub(super) async fn join_all<F: Future + Unpin>(futures: Vec<F>) -> Vec<F::Output> {
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

pub(super) async fn reconcile<S: Store>(s: &Case<S>, a: &AttemptRef, how: Reconcile) -> Reconciled {
    let answer = ReconcileStore::reconcile(s.store(), a, how)
        .await
        .expect("reconcile: store error");
    s.touch(|f| f.ledger_mut().reconciled(a, &answer));
    answer
}

pub(super) async fn totals<S: Store>(s: &Case<S>) -> Vec<(Books, PendingTotal)> {
    s.pending_totals()
        .await
        .expect("pending_totals: store error")
}

/// Every page of the pending listing, `limit` at a time (at most 100 pages).
pub(super) async fn all_pages<S: Store>(s: &Case<S>, limit: usize) -> Vec<Vec<PendingAttempt>> {
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

pub(super) fn total(attempts: u64, amount: Money) -> PendingTotal {
    PendingTotal { attempts, amount }
}

/// Corrects a closed attempt's charge (B7) and records the answer.
pub(super) async fn correct<S: Store>(s: &Case<S>, c: &crate::Correction) -> crate::Corrected {
    let answer = ReconcileStore::correct(s.store(), c)
        .await
        .expect("correct: store error");
    s.touch(|f| f.ledger_mut().corrected(c, answer));
    answer
}
