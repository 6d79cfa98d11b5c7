//! AnchoredWindowLayer: W1–W10, L5, D4.

mod common;

use common::*;
use http::{Request, Response};
use portcullis::core::{
    Demand, Dimension, GatewayCode, LayerKind, MemoryStore, Policy, Rejection, Scope, Subject,
    Subscription, Tier, Usage, UsageRecorder,
};
use portcullis::time::TokioClock;
use portcullis::{AnchoredWindowLayer, FailureMode};
use std::sync::Arc;
use std::time::Duration;
use tower::{ServiceBuilder, ServiceExt};

type Store = MemoryStore<TokioClock>;

/// 10:17:32 on some day, in ms: the clock of the W2 example.
const T0: u64 =
    1_700_000_000_000 - 1_700_000_000_000 % 86_400_000 + (10 * 3600 + 17 * 60 + 32) * 1000;

fn store() -> Store {
    MemoryStore::with_clock(TokioClock::new(T0))
}

/// An inner service that records `usage_tokens` output tokens as the actual usage.
fn reporting(
    usage_tokens: u64,
) -> impl tower::Service<
    Request<()>,
    Response = Response<http_body_util::Full<bytes::Bytes>>,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |r: Request<()>| {
        let rec = r.extensions().get::<UsageRecorder>().cloned();
        async move {
            if let Some(rec) = rec {
                rec.record(Usage {
                    output_tokens: usage_tokens,
                    ..Usage::default()
                });
            }
            ok_response()
        }
    })
}

fn layer(st: &Store) -> AnchoredWindowLayer<Store, portcullis::FromExtensions, TokioClock> {
    AnchoredWindowLayer::new(st.clone()).clock(st.clock().clone())
}

async fn call(
    st: &Store,
    s: &Subject,
    d: Option<Demand>,
) -> Result<Response<impl http_body::Body>, portcullis::BoxError> {
    // Records no usage: the reservation stands as the charge.
    let svc = ServiceBuilder::new()
        .layer(layer(st))
        .service_fn(|_r: Request<()>| async { ok_response() });
    let res = svc.oneshot(req(s, d)).await?;
    Ok(res)
}

async fn run(st: &Store, s: &Subject, d: Option<Demand>) -> Result<(), Rejection> {
    match call(st, s, d).await {
        Ok(r) => {
            drain(r.into_body()).await.ok();
            Ok(())
        }
        Err(e) => Err(rejection(&e).clone()),
    }
}

fn used(st: &Store, key: &str, scope: Scope, p: &Policy, d: Dimension, window_ms: u64) -> u64 {
    st.view_now(&key.into(), scope, p)
        .into_iter()
        .find(|v| v.dimension == d && v.tier.window_ms == window_ms)
        .map(|v| v.used)
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn w1_every_tier_is_enforced() {
    let st = store();
    let p = Policy::default()
        .with_requests(Tier::per_minute(3))
        .with_requests(Tier::per_hour(5));
    let s = subject("k", p.clone());
    for _ in 0..3 {
        run(&st, &s, None).await.unwrap();
    }
    let r = run(&st, &s, None).await.unwrap_err();
    assert_eq!(r.limit(), Some((Dimension::Requests, Tier::per_minute(3))));
    tokio::time::advance(Duration::from_secs(60)).await;
    run(&st, &s, None).await.unwrap();
    run(&st, &s, None).await.unwrap();
    let r = run(&st, &s, None).await.unwrap_err();
    assert_eq!(
        r.limit(),
        Some((Dimension::Requests, Tier::per_hour(5))),
        "the hour tier binds now"
    );
}

#[tokio::test(start_paused = true)]
async fn w2_window_is_anchored_at_first_use_not_the_clock_hour() {
    let st = store();
    let p = Policy::default().with_requests(Tier::per_hour(2));
    let s = subject("k", p.clone());
    run(&st, &s, None).await.unwrap(); // 10:17:32 = anchor
    tokio::time::advance(Duration::from_secs(42 * 60 + 27)).await; // 10:59:59
    run(&st, &s, None).await.unwrap();
    tokio::time::advance(Duration::from_secs(1)).await; // 11:00:00: a calendar hour would reset here
    let r = run(&st, &s, None).await.unwrap_err();
    assert_eq!(
        r.retry_after(),
        Some(Duration::from_secs(17 * 60 + 32)),
        "resets at 11:17:32"
    );
    tokio::time::advance(Duration::from_secs(17 * 60 + 31)).await; // 11:17:31
    assert!(run(&st, &s, None).await.is_err());
    tokio::time::advance(Duration::from_secs(1)).await; // 11:17:32
    run(&st, &s, None).await.unwrap();
    let view = st.view_now(&"k".into(), Scope::Key, &p);
    assert_eq!(
        view[0].resets_at,
        Some(T0 + 2 * 3_600_000),
        "anchor moved on by whole windows"
    );
}

#[tokio::test(start_paused = true)]
async fn w2_idle_group_reanchors_at_next_use() {
    let st = store();
    let p = Policy::default().with_requests(Tier::per_hour(1));
    let s = subject("k", p.clone());
    run(&st, &s, None).await.unwrap();
    tokio::time::advance(Duration::from_secs(5 * 3600 + 123)).await;
    run(&st, &s, None).await.unwrap();
    let view = st.view_now(&"k".into(), Scope::Key, &p);
    let now = T0 + (5 * 3600 + 123) * 1000;
    assert_eq!(
        view[0].resets_at,
        Some(now + 3_600_000),
        "new first use, new anchor"
    );
}

#[tokio::test(start_paused = true)]
async fn w3_requests_and_tokens_share_an_anchor_images_have_their_own() {
    let st = store();
    let p = Policy::default()
        .with_requests(Tier::per_hour(100))
        .with_tokens(Tier::per_hour(1000))
        .with_images(Tier::per_hour(1));
    let s = subject("k", p.clone());
    run(&st, &s, Some(Demand::tokens(10))).await.unwrap(); // anchor for requests+tokens at T0
    tokio::time::advance(Duration::from_secs(600)).await;
    let img = Demand {
        images: 1,
        ..Demand::default()
    };
    run(&st, &s, Some(img)).await.unwrap(); // images anchor at T0+600 s
    let v = st.view_now(&"k".into(), Scope::Key, &p);
    let at = |d| {
        v.iter()
            .find(|x| x.dimension == d)
            .unwrap()
            .resets_at
            .unwrap()
    };
    assert_eq!(at(Dimension::Requests), T0 + 3_600_000);
    assert_eq!(at(Dimension::Tokens), T0 + 3_600_000);
    assert_eq!(at(Dimension::Images), T0 + 600_000 + 3_600_000);
    // Images exhausted, but a text request still passes: only touched groups count.
    let e = run(&st, &s, Some(img)).await.unwrap_err();
    assert_eq!(e.limit().unwrap().0, Dimension::Images);
    run(&st, &s, None).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn w4_all_or_nothing_a_rejected_request_counts_nowhere() {
    let st = store();
    let p = Policy::default()
        .with_requests(Tier::per_minute(10))
        .with_tokens(Tier::per_minute(100));
    let s = subject("k", p.clone());
    run(&st, &s, Some(Demand::tokens(60)))
        .await
        .unwrap_err_free();
    let before = st.view_now(&"k".into(), Scope::Key, &p);
    let e = run(&st, &s, Some(Demand::tokens(60))).await.unwrap_err();
    assert_eq!(e.code(), GatewayCode::TpmLimit);
    assert_eq!(
        st.view_now(&"k".into(), Scope::Key, &p),
        before,
        "requests tier untouched"
    );
}

trait OkFree {
    fn unwrap_err_free(self);
}
impl OkFree for Result<(), Rejection> {
    fn unwrap_err_free(self) {
        if let Err(e) = self {
            panic!("unexpected rejection {e}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn w5_tokens_reserved_then_settled_from_usage_at_body_end() {
    let st = store();
    let p = Policy::default().with_tokens(Tier::per_minute(1000));
    let s = subject("k", p.clone());
    let (tx, body) = stream_body();
    let tx = Arc::new(std::sync::Mutex::new(Some(tx)));
    let rec_slot = Arc::new(std::sync::Mutex::new(None::<UsageRecorder>));
    let (tx2, rec2) = (tx.clone(), rec_slot.clone());
    let body = Arc::new(std::sync::Mutex::new(Some(body)));
    let svc = ServiceBuilder::new()
        .layer(layer(&st))
        .service_fn(move |r: Request<()>| {
            *rec2.lock().unwrap() = r.extensions().get::<UsageRecorder>().cloned();
            let b = body.lock().unwrap().take().unwrap();
            let _ = &tx2;
            async move { Ok::<_, std::convert::Infallible>(Response::new(b)) }
        });
    let res = svc
        .oneshot(req(&s, Some(Demand::tokens(700))))
        .await
        .unwrap();
    assert_eq!(
        used(&st, "k", Scope::Key, &p, Dimension::Tokens, 60_000),
        700,
        "reserved at admission"
    );
    // The stream ends with a usage report of 250 tokens.
    rec_slot.lock().unwrap().as_ref().unwrap().record(Usage {
        input_tokens: 50,
        output_tokens: 200,
        ..Usage::default()
    });
    assert_eq!(
        used(&st, "k", Scope::Key, &p, Dimension::Tokens, 60_000),
        700,
        "held until the body ends"
    );
    tx.lock().unwrap().take();
    drain(res.into_body()).await.unwrap();
    assert_eq!(
        used(&st, "k", Scope::Key, &p, Dimension::Tokens, 60_000),
        250,
        "settled to actual"
    );
}

#[tokio::test(start_paused = true)]
async fn w5_actual_over_limit_rejects_the_next_and_late_settlement_is_dropped() {
    let st = store();
    let p = Policy::default().with_tokens(Tier::per_minute(1000));
    let s = subject("k", p.clone());
    // Estimated 100, actually 1500: the window goes over, the next request is refused.
    let svc = ServiceBuilder::new()
        .layer(layer(&st))
        .service(reporting(1500));
    let r = svc
        .clone()
        .oneshot(req(&s, Some(Demand::tokens(100))))
        .await
        .unwrap();
    drain(r.into_body()).await.unwrap();
    assert_eq!(
        used(&st, "k", Scope::Key, &p, Dimension::Tokens, 60_000),
        1500
    );
    let e = run(&st, &s, Some(Demand::tokens(1))).await.unwrap_err();
    assert_eq!(e.code(), GatewayCode::TpmLimit);
    assert_eq!(e.message(), "tpm limit exceeded");
    // A request admitted in one window and settled after it rolled: dropped.
    tokio::time::advance(Duration::from_secs(60)).await;
    let r = svc
        .clone()
        .oneshot(req(&s, Some(Demand::tokens(100))))
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(60)).await;
    drain(r.into_body()).await.unwrap();
    assert_eq!(
        used(&st, "k", Scope::Key, &p, Dimension::Tokens, 60_000),
        0,
        "not charged to the new window"
    );
}

#[tokio::test(start_paused = true)]
async fn w6_amount_cap_counts_in_flight_reservations() {
    let st = store();
    let p = Policy::default().with_amount_cap(1000);
    let s = subject("k", p.clone());
    let money = Demand {
        money: 400,
        ..Demand::default()
    };
    // Three parallel requests of up to 400 each: the third would slip under the cap if
    // only settled spend counted.
    let a = call(&st, &s, Some(money)).await.unwrap();
    let b = call(&st, &s, Some(money)).await.unwrap();
    let c = call(&st, &s, Some(money)).await.unwrap();
    let e = run(&st, &s, Some(money)).await.unwrap_err();
    assert_eq!(e.code(), GatewayCode::RpmLimit);
    assert_eq!(
        e.retry_after(),
        None,
        "no recovery time for the amount cap (W9)"
    );
    assert!(!e.should_retry());
    drop((a, b, c));
    // No cost recorded: the reservation stands as the spend (never zero).
    assert_eq!(used(&st, "k", Scope::Key, &p, Dimension::Amount, 0), 1200);
}

#[tokio::test(start_paused = true)]
async fn w6_amount_settles_to_the_recorded_cost() {
    let st = store();
    let p = Policy::default().with_amount_cap(1000);
    let s = subject("k", p.clone());
    let svc = ServiceBuilder::new()
        .layer(layer(&st))
        .service_fn(|r: Request<()>| {
            let rec = r.extensions().get::<UsageRecorder>().cloned().unwrap();
            async move {
                rec.record(Usage {
                    cost: Some(30),
                    ..Usage::default()
                });
                ok_response()
            }
        });
    let r = svc
        .oneshot(req(
            &s,
            Some(Demand {
                money: 400,
                ..Demand::default()
            }),
        ))
        .await
        .unwrap();
    drain(r.into_body()).await.unwrap();
    assert_eq!(used(&st, "k", Scope::Key, &p, Dimension::Amount, 0), 30);
}

#[tokio::test(start_paused = true)]
async fn w7_codes_per_dimension() {
    let st = store();
    let p = Policy::default()
        .with_images(Tier::per_day(1))
        .with_videos(Tier::per_day(1))
        .with_requests(Tier::per_day(100));
    let s = subject("k", p);
    let img = Demand {
        images: 1,
        ..Demand::default()
    };
    let vid = Demand {
        videos: 1,
        ..Demand::default()
    };
    run(&st, &s, Some(img)).await.unwrap();
    run(&st, &s, Some(vid)).await.unwrap();
    for (d, dim) in [(img, Dimension::Images), (vid, Dimension::Videos)] {
        let e = run(&st, &s, Some(d)).await.unwrap_err();
        assert_eq!(e.code().code(), 42902);
        assert_eq!(e.message(), "rpm limit exceeded", "says rpm even for {dim}");
        assert_eq!(e.limit().unwrap().0, dim);
        assert_eq!(e.layer(), LayerKind::AnchoredWindow);
    }
}

fn subscribed(payg: bool, key_policy: Option<Policy>) -> Subject {
    let mut s = Subject::new("k").with_subscription(
        Subscription::new(Arc::new(Policy::default().with_requests(Tier::per_hour(2))))
            .with_pay_as_you_go(payg),
    );
    s.policy = key_policy.map(Arc::new);
    s
}

#[tokio::test(start_paused = true)]
async fn w8_subscription_rejection_names_tier_in_chinese() {
    let st = store();
    let s = subscribed(false, Some(Policy::default()));
    run(&st, &s, None).await.unwrap();
    tokio::time::advance(Duration::from_secs(1768)).await;
    run(&st, &s, None).await.unwrap();
    let e = run(&st, &s, None).await.unwrap_err();
    assert_eq!(e.code().code(), 42906);
    assert_eq!(e.http_status(), 429);
    assert_eq!(
        e.message(),
        "已达套餐请求次数上限（每 1 小时 2 次），约 1832 秒后自动恢复；如需立即继续可开启API扣费访问"
    );
    assert_eq!(e.retry_after_secs(), Some(1832));
}

#[tokio::test(start_paused = true)]
async fn w8_pay_as_you_go_falls_through_to_the_key_policy() {
    let st = store();
    let key_policy = Policy::default().with_requests(Tier::per_hour(1));
    let s = subscribed(true, Some(key_policy.clone()));
    run(&st, &s, None).await.unwrap();
    run(&st, &s, None).await.unwrap();
    // Subscription spent: the third runs under the key's own policy…
    run(&st, &s, None).await.unwrap();
    assert_eq!(
        used(
            &st,
            "k",
            Scope::Key,
            &key_policy,
            Dimension::Requests,
            3_600_000
        ),
        1
    );
    // …which then rejects with its own code, not 42906.
    let e = run(&st, &s, None).await.unwrap_err();
    assert_eq!(e.code(), GatewayCode::RpmLimit);
    // With no key policy at all, pay-as-you-go is unlimited by the policy layer.
    let st2 = store();
    let bare = subscribed(true, None);
    for _ in 0..5 {
        run(&st2, &bare, None).await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn w8_amount_subscription_message() {
    let st = store();
    let s = Subject::new("k").with_subscription(Subscription::new(Arc::new(
        Policy::default().with_amount_cap(10),
    )));
    run(
        &st,
        &s,
        Some(Demand {
            money: 10,
            ..Demand::default()
        }),
    )
    .await
    .unwrap();
    let e = run(&st, &s, None).await.unwrap_err();
    assert_eq!(e.code().code(), 42906);
    assert_eq!(e.message(), "订阅额度已用完，可开启API扣费访问继续使用");
    assert_eq!(e.retry_after(), None);
}

#[tokio::test(start_paused = true)]
async fn w8_expired_subscription_no_longer_applies() {
    let st = store();
    let mut s = subscribed(
        false,
        Some(Policy::default().with_requests(Tier::per_hour(100))),
    );
    s.subscription.as_mut().unwrap().expires_at = Some(T0 + 1000);
    run(&st, &s, None).await.unwrap();
    run(&st, &s, None).await.unwrap();
    assert!(run(&st, &s, None).await.is_err());
    tokio::time::advance(Duration::from_secs(1)).await;
    run(&st, &s, None).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn w9_retry_after_waits_for_every_exceeded_tier() {
    let st = store();
    let p = Policy::default()
        .with_requests(Tier::per_minute(1))
        .with_tokens(Tier::per_hour(100));
    let s = subject("k", p);
    run(&st, &s, Some(Demand::tokens(100))).await.unwrap();
    tokio::time::advance(Duration::from_millis(10_500)).await;
    // Both the minute requests tier and the hour token tier are exceeded: the later wins.
    let e = run(&st, &s, Some(Demand::tokens(1))).await.unwrap_err();
    assert_eq!(
        e.retry_after(),
        Some(Duration::from_millis(3_600_000 - 10_500))
    );
    assert_eq!(e.retry_after_secs(), Some(3590), "rounded up");
    assert_eq!(
        e.code(),
        GatewayCode::TpmLimit,
        "named after the binding tier"
    );
    assert_eq!(e.rate_limits().requests, Some(1));
    assert_eq!(e.rate_limits().tokens, Some(100));
    // A demand larger than the tier can never fit: no retry time.
    let st2 = store();
    let big = subject("b", Policy::default().with_tokens(Tier::per_minute(10)));
    let e = run(&st2, &big, Some(Demand::tokens(11))).await.unwrap_err();
    assert_eq!(e.retry_after(), None);
}

#[tokio::test(start_paused = true)]
async fn w10_rolling_window_waits_only_if_room_appears_within_max_wait() {
    let st = store();
    let p = Policy::default().with_rolling_rpm(2);
    let s = subject("k", p);
    let svc = ServiceBuilder::new()
        .layer(layer(&st).max_wait(Duration::from_secs(2)))
        .service(reporting(0));
    svc.clone().oneshot(req(&s, None)).await.unwrap();
    tokio::time::advance(Duration::from_millis(59_000)).await;
    svc.clone().oneshot(req(&s, None)).await.unwrap();
    // Full; the first start leaves the window in 1 s ≤ max_wait: wait, then admit.
    let started = tokio::time::Instant::now();
    svc.clone().oneshot(req(&s, None)).await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    // Full again; room appears only in 59 s > max_wait: refuse at once.
    let started = tokio::time::Instant::now();
    let e = svc.clone().oneshot(req(&s, None)).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::ZERO);
    let r = rejection(&e);
    assert_eq!(r.code(), GatewayCode::RpmLimit);
    assert_eq!(
        r.retry_after_secs(),
        Some(59),
        "the 59 s start leaves at 119 s"
    );
    assert_eq!(r.rate_limits().requests, Some(2));
}

#[tokio::test(start_paused = true)]
async fn l5_rejection_further_in_refunds_everything() {
    let st = store();
    let p = Policy::default()
        .with_requests(Tier::per_minute(5))
        .with_tokens(Tier::per_minute(1000))
        .with_amount_cap(1000)
        .with_rolling_rpm(3);
    let s = subject("k", p.clone());
    run(&st, &s, Some(Demand::tokens(10))).await.unwrap();
    let before = st.view_now(&"k".into(), Scope::Key, &p);
    let svc = ServiceBuilder::new()
        .layer(layer(&st))
        .service_fn(|_r: Request<()>| async {
            Err::<Response<http_body_util::Empty<bytes::Bytes>>, portcullis::BoxError>(Box::new(
                Rejection::new(GatewayCode::ConcurrencyLimit, LayerKind::ConcurrencySlot),
            ))
        });
    for _ in 0..5 {
        let e = svc
            .clone()
            .oneshot(req(
                &s,
                Some(Demand {
                    tokens: 100,
                    money: 50,
                    ..Demand::default()
                }),
            ))
            .await
            .unwrap_err();
        assert_eq!(rejection(&e).code(), GatewayCode::ConcurrencyLimit);
    }
    assert_eq!(
        st.view_now(&"k".into(), Scope::Key, &p),
        before,
        "nothing consumed"
    );
}

#[tokio::test(start_paused = true)]
async fn d4_window_failure_modes() {
    let s = subject("k", Policy::default().with_requests(Tier::per_minute(1)));
    let open = AnchoredWindowLayer::new(DeadStore);
    let svc = ServiceBuilder::new()
        .layer(open.clone())
        .service(reporting(0));
    assert!(svc.oneshot(req(&s, None)).await.is_ok());
    assert_eq!(open.failure_stats().failed_open, 1);
    let closed = AnchoredWindowLayer::new(DeadStore).failure_mode(FailureMode::Closed);
    let svc = ServiceBuilder::new()
        .layer(closed.clone())
        .service(reporting(0));
    let e = svc.oneshot(req(&s, None)).await.unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::StoreUnavailable);
}

#[tokio::test(start_paused = true)]
async fn no_policy_passes_and_no_subject_is_40101() {
    let st = store();
    run(&st, &Subject::new("free"), None).await.unwrap();
    assert_eq!(
        st.stats().window_entries,
        0,
        "nothing is kept for an unlimited subject"
    );
    let svc = ServiceBuilder::new()
        .layer(layer(&st))
        .service(reporting(0));
    let e = svc.oneshot(Request::new(())).await.unwrap_err();
    assert_eq!(rejection(&e).http_status(), 401);
}

#[tokio::test(start_paused = true)]
async fn l3_request_dropped_before_any_answer_with_nothing_sent_consumes_nothing() {
    let st = store();
    let p = Policy::default()
        .with_requests(Tier::per_minute(5))
        .with_tokens(Tier::per_minute(1000))
        .with_amount_cap(1000);
    let s = subject("k", p.clone());
    let before = st.view_now(&"k".into(), Scope::Key, &p);
    // The inner service never answers (a request waiting in a queue further in).
    let svc = ServiceBuilder::new()
        .layer(layer(&st))
        .service_fn(|_r: Request<()>| async {
            std::future::pending::<()>().await;
            ok_response()
        });
    let fut = tokio::spawn(svc.oneshot(req(
        &s,
        Some(Demand {
            tokens: 100,
            money: 50,
            ..Demand::default()
        }),
    )));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_ne!(
        st.view_now(&"k".into(), Scope::Key, &p),
        before,
        "reserved while waiting"
    );
    fut.abort();
    let _ = fut.await;
    assert_eq!(
        st.view_now(&"k".into(), Scope::Key, &p),
        before,
        "the client left: refunded"
    );
}

#[tokio::test(start_paused = true)]
async fn b4_request_dropped_after_it_was_sent_is_counted() {
    let st = store();
    let p = Policy::default().with_requests(Tier::per_minute(5));
    let s = subject("k", p.clone());
    // The inner service marks the request as sent, then never answers.
    let svc = ServiceBuilder::new()
        .layer(layer(&st))
        .service_fn(|r: Request<()>| {
            let rec = r.extensions().get::<UsageRecorder>().cloned().unwrap();
            async move {
                rec.mark_unknown();
                std::future::pending::<()>().await;
                ok_response()
            }
        });
    let fut = tokio::spawn(svc.oneshot(req(&s, None)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    fut.abort();
    let _ = fut.await;
    assert_eq!(
        used(&st, "k", Scope::Key, &p, Dimension::Requests, 60_000),
        1,
        "it may have reached the provider"
    );
}
