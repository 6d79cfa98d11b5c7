//! BillingGateLayer: B1–B7, W8 pay-as-you-go, L5, S4.

mod common;

use common::*;
use http::{Request, Response};
use portcullis::billing::{Attempt, UsageRecord};
use portcullis::core::{
    AttemptState, BillingStore, Budget, Demand, GatewayCode, LayerKind, MemoryStore, Policy,
    Rejection, Subject, Subscription, Tier, Usage, UsageRecorder,
};
use portcullis::time::TokioClock;
use portcullis::{AnchoredWindowLayer, BillingGateLayer, BillingProfile, FailureMode};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tower::{ServiceBuilder, ServiceExt};

type Store = MemoryStore<TokioClock>;
type Records = Arc<Mutex<Vec<UsageRecord>>>;

fn store(balance: i64) -> Store {
    let s = MemoryStore::with_clock(TokioClock::new(1_000_000));
    s.with_ledger(|l, _| l.seed_balance("acme", balance));
    s
}

fn tenant_subject() -> Subject {
    Subject::new("key-1").with_tenant("acme")
}

fn layer(st: &Store, records: &Records) -> BillingGateLayer<Store, TokioClock> {
    let r = records.clone();
    BillingGateLayer::new(st.clone())
        .clock(st.clock().clone())
        .sink(move |rec: UsageRecord| r.lock().unwrap().push(rec))
}

/// An inner service that records `cost` as the complete usage and counts its calls.
fn costing(
    cost: i64,
    calls: Arc<AtomicUsize>,
) -> impl tower::Service<
    Request<()>,
    Response = Response<http_body_util::Full<bytes::Bytes>>,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |r: Request<()>| {
        calls.fetch_add(1, Ordering::SeqCst);
        let rec = r.extensions().get::<UsageRecorder>().cloned().unwrap();
        async move {
            rec.record(Usage {
                input_tokens: 10,
                output_tokens: 5,
                cost: Some(cost),
                ..Usage::default()
            });
            ok_response()
        }
    })
}

fn money(m: i64) -> Option<Demand> {
    Some(Demand {
        money: m,
        ..Demand::default()
    })
}

fn balance(st: &Store) -> i64 {
    st.with_ledger(|l, now| l.account(Some("acme"), &"key-1".into(), &[], now))
        .balance
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn b1_balance_at_or_below_zero_is_402_and_not_retryable() {
    let st = store(0);
    let records = Records::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = ServiceBuilder::new()
        .layer(layer(&st, &records))
        .service(costing(1, calls.clone()));
    let e = svc
        .oneshot(req(&tenant_subject(), money(10)))
        .await
        .unwrap_err();
    let r = rejection(&e);
    assert_eq!(r.code(), GatewayCode::InsufficientBalance);
    assert_eq!(r.http_status(), 402);
    assert_eq!(
        r.message(),
        "Insufficient balance. Top up at the dashboard."
    );
    assert!(!r.should_retry());
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no provider call");
    assert!(records.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn b1_key_spend_cap_is_402() {
    let st = store(1_000);
    let records = Records::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = ServiceBuilder::new()
        .layer(layer(&st, &records))
        .service(costing(30, calls.clone()));
    let request = || {
        let mut r = req(&tenant_subject(), money(10));
        r.extensions_mut()
            .insert(BillingProfile::new().with_spend_cap(Some(50)));
        r
    };
    for _ in 0..2 {
        let res = svc.clone().oneshot(request()).await.unwrap();
        drain(res.into_body()).await.unwrap();
    }
    let e = svc.clone().oneshot(request()).await.unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::SpendCapReached);
    assert_eq!(
        rejection(&e).message(),
        "This API key has reached its spend limit."
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn b2_settled_from_usage_once_per_attempt_and_balance_may_go_negative() {
    let st = store(25);
    let records = Records::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = ServiceBuilder::new()
        .layer(layer(&st, &records))
        .service(costing(40, calls));
    let res = svc
        .clone()
        .oneshot(req(&tenant_subject(), money(100)))
        .await
        .unwrap();
    assert_eq!(balance(&st), 25, "settled only when the body ends");
    drain(res.into_body()).await.unwrap();
    assert_eq!(
        balance(&st),
        -15,
        "started positive, ran to completion (B2)"
    );
    let recs = records.lock().unwrap().clone();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].outcome, AttemptState::Settled(40));
    assert_eq!(recs[0].usage.unwrap().output_tokens, 5);
    assert_eq!(recs[0].tenant.as_deref(), Some("acme"));
    assert!(recs[0].billed_to_balance);
    // Idempotent: settling the same attempt again changes nothing.
    let again = st.settle_attempt(
        &recs[0].attempt_ref(),
        portcullis::core::BillingOutcome::Settled(40),
    );
    assert_eq!(again.await.unwrap(), None);
    assert_eq!(balance(&st), -15);
    // Now ≤ 0: refused.
    let e = svc
        .oneshot(req(&tenant_subject(), money(1)))
        .await
        .unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::InsufficientBalance);
}

#[tokio::test(start_paused = true)]
async fn b3_scenario_4_budget_short_means_no_provider_call() {
    let st = store(1_000_000);
    let records = Records::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = ServiceBuilder::new()
        .layer(layer(&st, &records))
        .service(costing(1, calls.clone()));
    let budget: Arc<[Budget]> = Arc::from(vec![Budget::new("task:eval", 100, None)]);
    let mut r = req(&tenant_subject(), money(101));
    r.extensions_mut()
        .insert(BillingProfile::new().with_budgets(budget.clone()));
    let e = svc.oneshot(r).await.unwrap_err();
    let rej = rejection(&e);
    assert_eq!(rej.code(), GatewayCode::BudgetExhausted);
    assert_eq!(rej.message(), "BUDGET_EXHAUSTED");
    assert_eq!(rej.http_status(), 402);
    assert!(!rej.should_retry());
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the provider saw 0 calls");
    let v = st.with_ledger(|l, now| l.account(None, &"key-1".into(), &budget, now));
    assert_eq!(
        (v.budgets[0].spent, v.budgets[0].reserved),
        (0, 0),
        "a refusal reserves nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn b4_unknown_result_stays_pending_never_zero() {
    let st = store(1_000);
    let records = Records::default();
    // The inner service reaches the provider, then loses the answer.
    let svc = ServiceBuilder::new()
        .layer(layer(&st, &records))
        .service_fn(|r: Request<()>| {
            let rec = r.extensions().get::<UsageRecorder>().cloned().unwrap();
            async move {
                rec.mark_unknown();
                ok_response()
            }
        });
    let res = svc
        .clone()
        .oneshot(req(&tenant_subject(), money(70)))
        .await
        .unwrap();
    drain(res.into_body()).await.unwrap();
    let pending = st.pending().await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].1, 70, "the upper bound, not zero");
    let recs = records.lock().unwrap().clone();
    assert_eq!(recs[0].outcome, AttemptState::Pending(70));
    let v = st.with_ledger(|l, now| l.account(Some("acme"), &"key-1".into(), &[], now));
    assert_eq!(
        (v.balance, v.tenant_pending, v.key_pending),
        (Some(1_000), 70, 70)
    );
    // A response dropped before its body ended with no report: also pending.
    let svc2 = ServiceBuilder::new()
        .layer(layer(&st, &records))
        .service(stream_service());
    let res = svc2
        .oneshot(req(&tenant_subject(), money(5)))
        .await
        .unwrap();
    drop(res);
    assert_eq!(st.pending().await.unwrap().len(), 2);
}

fn stream_service() -> impl tower::Service<
    Request<()>,
    Response = Response<TestBody>,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(|_r: Request<()>| {
        let (tx, body) = stream_body();
        std::mem::forget(tx);
        async move { Ok(Response::new(body)) }
    })
}

#[tokio::test(start_paused = true)]
async fn b5_store_down_fails_closed_with_503() {
    let calls = Arc::new(AtomicUsize::new(0));
    let l = BillingGateLayer::new(DeadStore);
    let svc = ServiceBuilder::new()
        .layer(l.clone())
        .service(costing(1, calls.clone()));
    let e = svc
        .oneshot(req(&tenant_subject(), money(1)))
        .await
        .unwrap_err();
    let r = rejection(&e);
    assert_eq!(r.http_status(), 503);
    assert_eq!(r.retry_after_secs(), Some(1));
    assert_eq!(r.layer(), LayerKind::BillingGate);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "no unbillable call is sent"
    );
    assert_eq!(l.failure_stats().failed_closed, 1);
    // Open only when the operator asks for it.
    let open = BillingGateLayer::new(DeadStore).failure_mode(FailureMode::Open);
    let svc = ServiceBuilder::new()
        .layer(open)
        .service(costing(1, calls.clone()));
    assert!(svc.oneshot(req(&tenant_subject(), money(1))).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn b6_l5_rejection_further_in_is_refunded_and_emits_no_record() {
    let st = store(1_000);
    let records = Records::default();
    let budget: Arc<[Budget]> = Arc::from(vec![Budget::new("b", 1000, None)]);
    let svc = ServiceBuilder::new()
        .layer(layer(&st, &records))
        .service_fn(|r: Request<()>| async move {
            assert!(
                r.extensions().get::<Attempt>().is_some(),
                "the attempt id travels with the request"
            );
            Err::<Response<http_body_util::Empty<bytes::Bytes>>, portcullis::BoxError>(Box::new(
                Rejection::new(GatewayCode::CapacityBusy, LayerKind::CapacityQueue),
            ))
        });
    let mut r = req(&tenant_subject(), money(300));
    r.extensions_mut()
        .insert(BillingProfile::new().with_budgets(budget.clone()));
    assert!(svc.oneshot(r).await.is_err());
    let v = st.with_ledger(|l, now| l.account(Some("acme"), &"key-1".into(), &budget, now));
    assert_eq!(
        (v.balance, v.budgets[0].reserved, v.budgets[0].spent),
        (Some(1_000), 0, 0)
    );
    assert!(records.lock().unwrap().is_empty());
}

fn sub_subject(payg: bool) -> Subject {
    let mut s = tenant_subject().with_subscription(
        Subscription::new(Arc::new(Policy::default().with_requests(Tier::per_hour(1))))
            .with_pay_as_you_go(payg),
    );
    s.policy = Some(Arc::new(Policy::default()));
    s
}

#[tokio::test(start_paused = true)]
async fn w8_subscription_covers_its_quota_pay_as_you_go_bills_the_balance() {
    let st = store(1_000);
    let records = Records::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = ServiceBuilder::new()
        .layer(AnchoredWindowLayer::new(st.clone()).clock(st.clock().clone()))
        .layer(layer(&st, &records))
        .service(costing(30, calls));
    let s = sub_subject(true);
    for _ in 0..2 {
        let res = svc.clone().oneshot(req(&s, money(50))).await.unwrap();
        drain(res.into_body()).await.unwrap();
    }
    let recs = records.lock().unwrap().clone();
    assert!(!recs[0].billed_to_balance, "within the plan");
    assert!(recs[1].billed_to_balance, "fell through to pay-as-you-go");
    assert_eq!(
        balance(&st),
        970,
        "only the pay-as-you-go request is charged"
    );
    // Zero balance: the plan still works, pay-as-you-go does not.
    let st2 = store(0);
    let svc2 = ServiceBuilder::new()
        .layer(AnchoredWindowLayer::new(st2.clone()).clock(st2.clock().clone()))
        .layer(layer(&st2, &records))
        .service(costing(30, Arc::default()));
    let res = svc2.clone().oneshot(req(&s, money(50))).await.unwrap();
    drain(res.into_body()).await.unwrap();
    let e = svc2.oneshot(req(&s, money(50))).await.unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::InsufficientBalance);
}

/// Many parallel requests against a small budget never reserve more than exists, and
/// afterwards balance + every usage record = the starting balance, exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b3_parallel_requests_never_overdraw_and_books_balance() {
    const START: i64 = 1_000_000;
    let st = MemoryStore::with_clock(TokioClock::new(1_000_000));
    st.with_ledger(|l, _| l.seed_balance("acme", START));
    let records = Records::default();
    let r = records.clone();
    let budget: Arc<[Budget]> = Arc::from(vec![Budget::new("tenant:acme", 5_000, None)]);
    let in_flight_money = Arc::new(AtomicUsize::new(0));
    let max_seen = Arc::new(AtomicUsize::new(0));
    let (f, m) = (in_flight_money.clone(), max_seen.clone());
    let svc = ServiceBuilder::new()
        .layer(
            BillingGateLayer::new(st.clone())
                .clock(st.clock().clone())
                .sink(move |rec: UsageRecord| r.lock().unwrap().push(rec)),
        )
        .service_fn(move |req: Request<()>| {
            let (f, m) = (f.clone(), m.clone());
            let rec = req.extensions().get::<UsageRecorder>().cloned().unwrap();
            let ub = req.extensions().get::<Demand>().unwrap().money as usize;
            async move {
                let now = f.fetch_add(ub, Ordering::SeqCst) + ub;
                m.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                f.fetch_sub(ub, Ordering::SeqCst);
                rec.record(Usage {
                    output_tokens: 3,
                    cost: Some((ub / 3) as i64),
                    ..Usage::default()
                });
                ok_response()
            }
        });
    let mut tasks = Vec::new();
    for i in 0..400 {
        let svc = svc.clone();
        let budget = budget.clone();
        tasks.push(tokio::spawn(async move {
            let mut r = req(&tenant_subject(), money(100 + (i % 7) * 50));
            r.extensions_mut()
                .insert(BillingProfile::new().with_budgets(budget));
            match svc.oneshot(r).await {
                Ok(res) => {
                    drain(res.into_body()).await.unwrap();
                    true
                }
                Err(e) => {
                    assert_eq!(rejection(&e).code(), GatewayCode::BudgetExhausted);
                    false
                }
            }
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.unwrap());
    }
    assert!(
        max_seen.load(Ordering::SeqCst) <= 5_000,
        "reserved more than the budget holds"
    );
    assert!(
        admitted > 0 && admitted < 400,
        "some fit, some did not: {admitted}"
    );
    let recs = records.lock().unwrap().clone();
    assert_eq!(recs.len(), admitted);
    let spent: i64 = recs.iter().map(UsageRecord::amount).sum();
    let v = st.with_ledger(|l, now| l.account(Some("acme"), &"key-1".into(), &budget, now));
    assert_eq!(
        v.balance.unwrap() + spent,
        START,
        "balance + records = start, exactly"
    );
    assert_eq!(v.budgets[0].spent, spent);
    assert_eq!(v.budgets[0].reserved, 0);
    assert!(v.budgets[0].spent <= 5_000);
}

/// A store that does the reservation and then loses the answer (a Redis timeout after
/// the script ran).
#[derive(Clone)]
struct LostAnswer(Store);

impl portcullis::core::BillingStore for LostAnswer {
    type Future<T: Send + 'static> = std::future::Ready<portcullis::core::StoreResult<T>>;
    fn check_and_reserve(
        &self,
        req: &portcullis::core::BillingRequest,
    ) -> Self::Future<portcullis::core::BillingDecision> {
        let _ = self.0.with_ledger(|l, now| l.admit(req, now));
        std::future::ready(Err(portcullis::core::StoreError::new(
            portcullis::core::StoreErrorKind::Timeout,
            "deadline passed",
        )))
    }
    fn settle_attempt(
        &self,
        a: &portcullis::core::AttemptRef,
        o: portcullis::core::BillingOutcome,
    ) -> Self::Future<Option<AttemptState>> {
        self.0.settle_attempt(a, o)
    }
    fn account(
        &self,
        t: Option<&str>,
        k: &portcullis::core::SubjectKey,
        b: &[Budget],
    ) -> Self::Future<portcullis::core::AccountView> {
        self.0.account(t, k, b)
    }
    fn seed_balance(&self, t: &str, m: i64) -> Self::Future<bool> {
        self.0.seed_balance(t, m)
    }
    fn seed_key_spend(
        &self,
        b: &portcullis::core::Books,
        k: &portcullis::core::SubjectKey,
        m: i64,
    ) -> Self::Future<bool> {
        self.0.seed_key_spend(b, k, m)
    }
    fn set_balance(&self, t: &str, m: i64) -> Self::Future<()> {
        self.0.set_balance(t, m)
    }
    fn credit(&self, t: &str, m: i64) -> Self::Future<i64> {
        self.0.credit(t, m)
    }
    fn pending(&self) -> Self::Future<Vec<(portcullis::core::AttemptRef, i64)>> {
        self.0.pending()
    }
}

#[tokio::test(start_paused = true)]
async fn b5_a_lost_reservation_answer_is_refunded() {
    let st = store(1_000);
    let budget: Arc<[Budget]> = Arc::from(vec![Budget::new("b", 1000, None)]);
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = ServiceBuilder::new()
        .layer(BillingGateLayer::new(LostAnswer(st.clone())))
        .service(costing(1, calls.clone()));
    let mut r = req(&tenant_subject(), money(300));
    r.extensions_mut()
        .insert(BillingProfile::new().with_budgets(budget.clone()));
    let e = svc.oneshot(r).await.unwrap_err();
    assert_eq!(rejection(&e).http_status(), 503, "fails closed");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let v = st.with_ledger(|l, now| l.account(Some("acme"), &"key-1".into(), &budget, now));
    assert_eq!(
        v.budgets[0].reserved, 0,
        "the reservation the answer lost is given back"
    );
}

/// A store whose first `fail` settlements fail (a store deadline, a breaker open), then
/// work; it counts every settlement call. `lost`: a failing settlement is carried out
/// and only its answer lost.
#[derive(Clone)]
struct FlakySettle {
    inner: Store,
    fail: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
    lost: bool,
}

impl portcullis::core::BillingStore for FlakySettle {
    type Future<T: Send + 'static> = std::future::Ready<portcullis::core::StoreResult<T>>;
    fn check_and_reserve(
        &self,
        req: &portcullis::core::BillingRequest,
    ) -> Self::Future<portcullis::core::BillingDecision> {
        self.inner.check_and_reserve(req)
    }
    fn settle_attempt(
        &self,
        a: &portcullis::core::AttemptRef,
        o: portcullis::core::BillingOutcome,
    ) -> Self::Future<Option<AttemptState>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let failing = self
            .fail
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            if self.lost {
                drop(self.inner.settle_attempt(a, o));
            }
            return std::future::ready(Err(portcullis::core::StoreError::new(
                portcullis::core::StoreErrorKind::Timeout,
                "deadline passed",
            )));
        }
        self.inner.settle_attempt(a, o)
    }
    fn account(
        &self,
        t: Option<&str>,
        k: &portcullis::core::SubjectKey,
        b: &[Budget],
    ) -> Self::Future<portcullis::core::AccountView> {
        self.inner.account(t, k, b)
    }
    fn seed_balance(&self, t: &str, m: i64) -> Self::Future<bool> {
        self.inner.seed_balance(t, m)
    }
    fn seed_key_spend(
        &self,
        b: &portcullis::core::Books,
        k: &portcullis::core::SubjectKey,
        m: i64,
    ) -> Self::Future<bool> {
        self.inner.seed_key_spend(b, k, m)
    }
    fn set_balance(&self, t: &str, m: i64) -> Self::Future<()> {
        self.inner.set_balance(t, m)
    }
    fn credit(&self, t: &str, m: i64) -> Self::Future<i64> {
        self.inner.credit(t, m)
    }
    fn pending(&self) -> Self::Future<Vec<(portcullis::core::AttemptRef, i64)>> {
        self.inner.pending()
    }
}

/// D10: a settlement whose answer was lost (carried out, reported failed) and whose
/// retry then finds no attempt is an unknown outcome: its record says pending — never
/// "settled" on the strength of a retry that found nothing.
#[tokio::test(start_paused = true)]
async fn d10_a_retry_that_finds_no_attempt_is_recorded_as_unknown_not_settled() {
    let st = store(1_000);
    let flaky = FlakySettle {
        inner: st.clone(),
        fail: Arc::new(AtomicUsize::new(1)),
        calls: Arc::default(),
        lost: true,
    };
    let records = Records::default();
    let r = records.clone();
    let layer = BillingGateLayer::new(flaky.clone())
        .clock(st.clock().clone())
        .sink(move |rec: UsageRecord| r.lock().unwrap().push(rec));
    let svc = ServiceBuilder::new()
        .layer(layer.clone())
        .service(costing(40, Arc::default()));
    let mut rq = req(&tenant_subject(), money(100));
    rq.extensions_mut()
        .insert(BillingProfile::new().with_tenant_expected(true));
    let res = svc.clone().oneshot(rq).await.unwrap();
    drain(res.into_body()).await.unwrap();
    for _ in 0..200 {
        if layer.settlement_stats().waiting == 0 && !records.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let recs = records.lock().unwrap().clone();
    assert_eq!(recs.len(), 1, "one usage record");
    assert_eq!(
        recs[0].outcome,
        AttemptState::Pending(40),
        "an unknown outcome, not \"settled\""
    );
    assert_eq!(
        flaky.calls.load(Ordering::SeqCst),
        2,
        "the try and one retry"
    );
}

/// B7: settlements that fail (here the first 7 calls) are retried with backoff until
/// they land; each attempt is charged once and has exactly one usage record; nothing is
/// left reserved; the retries are counted.
#[tokio::test(start_paused = true)]
async fn b7_failed_settlement_is_retried_until_it_lands() {
    const N: usize = 5;
    let st = store(1_000);
    let flaky = FlakySettle {
        inner: st.clone(),
        fail: Arc::new(AtomicUsize::new(7)),
        calls: Arc::default(),
        lost: false,
    };
    let budget: Arc<[Budget]> = Arc::from(vec![Budget::new("b7", 10_000, None)]);
    let records = Records::default();
    let r = records.clone();
    let layer = BillingGateLayer::new(flaky.clone())
        .clock(st.clock().clone())
        .sink(move |rec: UsageRecord| r.lock().unwrap().push(rec));
    let svc = ServiceBuilder::new()
        .layer(layer.clone())
        .service(costing(40, Arc::default()));
    for _ in 0..N {
        let mut rq = req(&tenant_subject(), money(100));
        rq.extensions_mut().insert(
            BillingProfile::new()
                .with_budgets(budget.clone())
                .with_tenant_expected(true),
        );
        let res = svc.clone().oneshot(rq).await.unwrap();
        drain(res.into_body()).await.unwrap();
    }
    assert!(records.lock().unwrap().len() < N, "some settlements failed");
    assert!(layer.settlement_stats().waiting > 0);
    for _ in 0..200 {
        if records.lock().unwrap().len() == N && layer.settlement_stats().waiting == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let recs = records.lock().unwrap().clone();
    assert_eq!(recs.len(), N, "one usage record per attempt");
    let mut ids: Vec<_> = recs.iter().map(|r| r.attempt.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), N, "no record twice");
    assert!(recs.iter().all(|r| r.outcome == AttemptState::Settled(40)));
    let v = st.with_ledger(|l, now| l.account(Some("acme"), &"key-1".into(), &budget, now));
    assert_eq!(v.balance, Some(1_000 - 40 * N as i64), "each charged once");
    assert_eq!((v.budgets[0].spent, v.budgets[0].reserved), (200, 0));
    assert!(st.with_ledger(|l, _| l.pending()).is_empty());
    let stats = layer.settlement_stats();
    // Every first try failed; 2 retries failed too; every attempt landed late.
    assert_eq!(
        (stats.failed, stats.landed_late),
        (N as u64, N as u64),
        "{stats:?}"
    );
    assert_eq!(stats.retried, 7, "{stats:?}");
    assert_eq!((stats.waiting, stats.dropped), (0, 0), "{stats:?}");
    assert_eq!(flaky.calls.load(Ordering::SeqCst), 7 + N);
}

/// B7: a tenant the configuration names (its record expected) whose record is missing
/// from the store gets a fail-closed 503 with its own code and a Retry-After — never a
/// 402 — and no provider call; once an operator sets its balance, requests pass again.
#[tokio::test(start_paused = true)]
async fn b7_missing_tenant_record_is_503_not_402() {
    let st = MemoryStore::with_clock(TokioClock::new(1_000_000)); // acme never seeded
    let records = Records::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = ServiceBuilder::new()
        .layer(layer(&st, &records))
        .service(costing(3, calls.clone()));
    let expected = || {
        let mut r = req(&tenant_subject(), money(10));
        r.extensions_mut()
            .insert(BillingProfile::new().with_tenant_expected(true));
        r
    };
    let e = svc.clone().oneshot(expected()).await.unwrap_err();
    let rej = rejection(&e);
    assert_eq!(rej.code(), GatewayCode::BillingRecordMissing);
    assert_eq!(rej.code().code(), 50303);
    assert_eq!(rej.http_status(), 503);
    assert!(rej.retry_after().is_some());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // Without the expectation the missing record reads as no balance (402), as before.
    let e = svc
        .clone()
        .oneshot(req(&tenant_subject(), money(10)))
        .await
        .unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::InsufficientBalance);

    st.set_balance("acme", 100).await.unwrap();
    let res = svc.clone().oneshot(expected()).await.unwrap();
    drain(res.into_body()).await.unwrap();
    assert_eq!(balance(&st), 97);
    assert_eq!(records.lock().unwrap().len(), 1);
}

/// P6: a request marked `NotBilled` (token counting) passes an empty balance with
/// nothing reserved, settled or recorded; without the mark the same request is 402.
#[tokio::test(start_paused = true)]
async fn p6_not_billed_request_passes_with_nothing_reserved_or_recorded() {
    let st = store(0);
    let records = Records::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let svc = ServiceBuilder::new()
        .layer(layer(&st, &records))
        .service(tower::service_fn(move |_: Request<()>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { ok_response() }
        }));
    let mut free = req(&tenant_subject(), money(0));
    free.extensions_mut().insert(portcullis::NotBilled);
    let res = svc.clone().oneshot(free).await.unwrap();
    drop(res);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the free request was sent");
    assert_eq!(balance(&st), 0, "nothing charged");
    assert!(records.lock().unwrap().is_empty(), "no usage record");
    let e = svc
        .oneshot(req(&tenant_subject(), money(0)))
        .await
        .unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::InsufficientBalance);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let pending = st.with_ledger(|l, now| l.account(Some("acme"), &"key-1".into(), &[], now));
    assert_eq!(pending.balance, Some(0));
}
