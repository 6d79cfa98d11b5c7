//! FailoverLayer with paused tokio time (a manual clock) and a scripted upstream:
//! F1, F6, F7 and S5.

mod common;

use bytes::Bytes;
use common::*;
use http::{Request, Response};
use http_body_util::Full;
use portcullis::core::upstream::{RateLimits, UpstreamChannel, UpstreamRegistry};
use portcullis::core::{
    Candidates, ChannelRef, Chosen, Dialect, GatewayCode, MemoryStore, ModelId, UsageRecorder,
};
use portcullis::failover::{FailoverConfig, FailoverLayer};
use portcullis::time::TokioClock;
use portcullis::{DEADLINE_HEADER, UpstreamLimitLayer};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt};

/// What the scripted upstream saw: (time, channel, the attempt's recorder).
type Seen = Arc<Mutex<Vec<(Instant, String, UsageRecorder)>>>;

/// Answers from a script (status, retry-after seconds), then 200s.
fn upstream(
    script: Vec<(u16, Option<u64>)>,
    seen: Seen,
) -> impl tower::Service<
    Request<()>,
    Response = Response<Full<Bytes>>,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone
+ Send {
    let script = Arc::new(Mutex::new(VecDeque::from(script)));
    tower::service_fn(move |r: Request<()>| {
        let ch = r.extensions().get::<Chosen>().unwrap().0.name.to_string();
        let rec = r.extensions().get::<UsageRecorder>().unwrap().clone();
        rec.set_channel(ch.clone().into());
        rec.mark_unknown();
        seen.lock().unwrap().push((Instant::now(), ch, rec.clone()));
        let (status, retry_after) = script.lock().unwrap().pop_front().unwrap_or((200, None));
        async move {
            let mut res = Response::new(Full::new(Bytes::from_static(b"{}")));
            *res.status_mut() = http::StatusCode::from_u16(status).unwrap();
            if let Some(s) = retry_after {
                res.headers_mut().insert("retry-after", s.into());
            }
            rec.record(Default::default());
            Ok(res)
        }
    })
}

fn registry(channels: &[&str]) -> Arc<UpstreamRegistry> {
    let mut r = UpstreamRegistry::new();
    for c in channels {
        r = r.with_channel(UpstreamChannel {
            name: (*c).into(),
            dialect: Dialect::OpenAi,
            vendor: "openai".into(),
            credential: format!("k-{c}").into(),
            limits: RateLimits::default(),
            model_limits: vec![],
        });
    }
    Arc::new(r)
}

fn request(channels: &[&str], deadline_ms: Option<u64>) -> Request<()> {
    let mut r = Request::new(());
    r.extensions_mut().insert(Candidates::new(
        channels.iter().map(|c| ChannelRef::new(*c, 0)),
    ));
    r.extensions_mut().insert(ModelId("m".into()));
    r.extensions_mut().insert(Dialect::OpenAi);
    if let Some(d) = deadline_ms {
        r.headers_mut().insert(DEADLINE_HEADER, d.into());
    }
    r
}

fn stack(
    reg: &Arc<UpstreamRegistry>,
    config: FailoverConfig,
    script: Vec<(u16, Option<u64>)>,
    seen: &Seen,
) -> impl tower::Service<
    Request<()>,
    Response = Response<impl http_body::Body>,
    Error = portcullis::BoxError,
    Future = impl Send,
> + Clone {
    let clock = TokioClock::new(1_700_000_000_000);
    let store = MemoryStore::with_clock(clock.clone());
    ServiceBuilder::new()
        .layer(
            FailoverLayer::new(reg.clone())
                .clock(clock.clone())
                .config(config),
        )
        .layer(UpstreamLimitLayer::new(store, reg.clone()).clock(clock))
        .service(upstream(script, seen.clone()))
}

#[tokio::test(start_paused = true)]
async fn s5_nothing_is_sent_before_the_providers_retry_after() {
    let reg = registry(&["a"]);
    let seen: Seen = Arc::default();
    let svc = stack(&reg, FailoverConfig::default(), vec![(429, Some(7))], &seen);
    let t0 = Instant::now();
    let res = svc
        .clone()
        .oneshot(request(&["a"], Some(60_000)))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let calls = seen.lock().unwrap().clone();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].0, t0);
    assert!(
        calls[1].0 >= t0 + Duration::from_secs(7),
        "re-sent after {:?}",
        calls[1].0 - t0
    );
    assert!(calls[1].0 <= t0 + Duration::from_millis(7_100));
}

#[tokio::test(start_paused = true)]
async fn s5_a_wait_past_the_deadline_stops() {
    let reg = registry(&["a"]);
    let seen: Seen = Arc::default();
    let svc = stack(
        &reg,
        FailoverConfig::default(),
        vec![(429, Some(30))],
        &seen,
    );
    let t0 = Instant::now();
    let Err(e) = svc.oneshot(request(&["a"], Some(10_000))).await else {
        panic!("admitted")
    };
    let r = rejection(&e);
    assert_eq!(r.code(), GatewayCode::UpstreamRateLimited);
    assert_eq!(r.retry_after_secs(), Some(30));
    assert_eq!(Instant::now(), t0, "answered at once, no wait");
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn f1_each_attempt_on_another_channel_with_its_own_recorder_and_bounded() {
    let reg = registry(&["a", "b", "c", "d"]);
    let seen: Seen = Arc::default();
    let script = vec![(500, None), (503, None), (502, None), (500, None)];
    let svc = stack(&reg, FailoverConfig::default(), script, &seen);
    let Err(e) = svc.oneshot(request(&["a", "b", "c", "d"], None)).await else {
        panic!("admitted")
    };
    assert_eq!(rejection(&e).code(), GatewayCode::UpstreamFailed);
    let calls = seen.lock().unwrap().clone();
    let channels: Vec<_> = calls.iter().map(|c| c.1.as_str()).collect();
    assert_eq!(
        channels,
        ["a", "b", "c"],
        "max_attempts = 3, each on a new channel"
    );
    for w in calls.windows(2) {
        assert!(w[1].0 > w[0].0, "backoff between attempts");
        // A shared recorder would name the last attempt's channel for both.
        assert_ne!(
            w[0].2.channel(),
            w[1].2.channel(),
            "each attempt has its own recorder"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn f7_retries_are_capped_by_the_budget_during_an_outage() {
    let reg = registry(&["a", "b"]);
    let seen: Seen = Arc::default();
    // Every answer fails; the health circuit is held off so only the budget limits.
    let mut config = FailoverConfig::default();
    config.budget_min_per_sec = 1;
    config.budget_retry_ratio = 0.2;
    config.health.min_requests = u32::MAX;
    let script = vec![(500, None); 10_000];
    let svc = stack(&reg, config, script, &seen);
    const REQUESTS: usize = 200;
    for _ in 0..REQUESTS {
        let _ = svc.clone().oneshot(request(&["a", "b"], None)).await;
    }
    let calls = seen.lock().unwrap().len();
    // 200 first attempts + 20 % + the 1/s reserve over the 10 s window.
    println!("{REQUESTS} requests → {calls} upstream calls");
    assert!(calls > REQUESTS, "some retries happen");
    assert!(calls <= REQUESTS + REQUESTS / 5 + 10 + 1, "{calls}");
}
