//! UpstreamLimitLayer: U1–U4, S1, with paused tokio time.

mod common;

use common::*;
use http::{Request, Response, StatusCode};
use portcullis::core::upstream::{
    RateCount, RateEstimates, RateLimits, UpstreamChannel, UpstreamRegistry, credential_key,
    model_key, scope_windows,
};
use portcullis::core::{
    Candidates, ChannelRef, Chosen, Demand, Dialect, GatewayCode, LayerKind, MemoryStore, ModelId,
    Scope, Usage, UsageRecorder, WindowStore,
};
use portcullis::time::TokioClock;
use portcullis::{CapacityQueueLayer, FailureMode, UpstreamLimitLayer};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tower::{ServiceBuilder, ServiceExt};

type Store = MemoryStore<TokioClock>;
const T0: u64 = 1_700_000_000_000;

fn store() -> Store {
    MemoryStore::with_clock(TokioClock::new(T0))
}

fn limits(f: impl FnOnce(&mut RateLimits)) -> RateLimits {
    let mut l = RateLimits::default();
    f(&mut l);
    l
}

fn channel(name: &str, dialect: Dialect, credential: &str, l: RateLimits) -> UpstreamChannel {
    UpstreamChannel {
        name: name.into(),
        dialect,
        vendor: format!("{dialect:?}").to_lowercase().into(),
        credential: credential.into(),
        limits: l,
        model_limits: vec![],
    }
}

fn layer(st: &Store, reg: UpstreamRegistry) -> UpstreamLimitLayer<Store, TokioClock> {
    UpstreamLimitLayer::new(st.clone(), Arc::new(reg)).clock(st.clock().clone())
}

fn request(channels: &[&str], tokens: u64) -> Request<()> {
    let mut r = Request::new(());
    r.extensions_mut().insert(Candidates::new(
        channels.iter().map(|c| ChannelRef::new(*c, 0)),
    ));
    r.extensions_mut().insert(Demand::tokens(tokens));
    r.extensions_mut().insert(ModelId("m".into()));
    r
}

/// An inner service that counts its calls, records `usage`, answers `status` with
/// `headers`, and puts the channel it was sent to in the body.
#[derive(Clone)]
struct Upstream {
    calls: Arc<AtomicUsize>,
    usage: Option<Usage>,
    status: u16,
    headers: Vec<(&'static str, &'static str)>,
}

impl Upstream {
    fn ok() -> Self {
        Self {
            calls: Arc::new(AtomicUsize::new(0)),
            usage: None,
            status: 200,
            headers: vec![],
        }
    }
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl tower::Service<Request<()>> for Upstream {
    type Response = Response<http_body_util::Full<bytes::Bytes>>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;
    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn call(&mut self, r: Request<()>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let ch = r.extensions().get::<Chosen>().unwrap().0.name.to_string();
        if let (Some(u), Some(rec)) = (self.usage, r.extensions().get::<UsageRecorder>()) {
            rec.record(u);
        }
        let mut res = Response::new(http_body_util::Full::new(bytes::Bytes::from(ch)));
        *res.status_mut() = StatusCode::from_u16(self.status).unwrap();
        for (k, v) in &self.headers {
            res.headers_mut().insert(*k, v.parse().unwrap());
        }
        std::future::ready(Ok(res))
    }
}

async fn send(
    l: &UpstreamLimitLayer<Store, TokioClock>,
    up: &Upstream,
    r: Request<()>,
) -> Result<String, portcullis::BoxError> {
    let res = ServiceBuilder::new()
        .layer(l.clone())
        .service(up.clone())
        .oneshot(r)
        .await?;
    Ok(String::from_utf8(drain(res.into_body()).await.unwrap().to_vec()).unwrap())
}

async fn used(st: &Store, key: &str, l: &RateLimits) -> Vec<u64> {
    let mut out = vec![];
    for w in scope_windows(key, l) {
        for v in st.view(&w.key, Scope::Key, &w.policy).await.unwrap() {
            out.push(v.used);
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn u1_channel_over_rpm_is_skipped_for_the_next_one() {
    let st = store();
    let rpm2 = limits(|l| l.rpm = Some(2));
    let reg = UpstreamRegistry::new()
        .with_channel(channel("a", Dialect::OpenAi, "ka", rpm2))
        .with_channel(channel("b", Dialect::OpenAi, "kb", rpm2));
    let l = layer(&st, reg);
    let up = Upstream::ok();
    let mut served = vec![];
    for _ in 0..4 {
        served.push(send(&l, &up, request(&["a", "b"], 0)).await.unwrap());
    }
    assert_eq!(served, ["a", "a", "b", "b"]);
    let e = send(&l, &up, request(&["a", "b"], 0)).await.unwrap_err();
    let r = rejection(&e);
    assert_eq!(r.code(), GatewayCode::RpmLimit);
    assert_eq!(r.layer(), LayerKind::UpstreamLimit);
    assert!(r.retry_after_secs().unwrap() <= 60);
    assert_eq!(up.calls(), 4);
    // The minute passes: room again.
    tokio::time::advance(Duration::from_secs(61)).await;
    assert_eq!(send(&l, &up, request(&["a", "b"], 0)).await.unwrap(), "a");
}

#[tokio::test(start_paused = true)]
async fn u1_credential_model_and_vendor_limits_each_skip_a_channel() {
    let st = store();
    // Two channels share credential "k": its RPM 1 covers both.
    let reg = UpstreamRegistry::new()
        .with_channel(channel(
            "a",
            Dialect::OpenAi,
            "k",
            limits(|l| l.rpm = Some(1)),
        ))
        .with_channel(channel(
            "b",
            Dialect::OpenAi,
            "k",
            limits(|l| l.rpm = Some(1)),
        ));
    let l = layer(&st, reg);
    let up = Upstream::ok();
    assert_eq!(send(&l, &up, request(&["a", "b"], 0)).await.unwrap(), "a");
    assert!(send(&l, &up, request(&["a", "b"], 0)).await.is_err());

    // Per model: model "m" has RPM 1 on this credential, other models are free.
    let st = store();
    let mut c = channel("a", Dialect::OpenAi, "k", RateLimits::default());
    c.model_limits = vec![("m".into(), limits(|l| l.rpm = Some(1)))];
    let l = layer(&st, UpstreamRegistry::new().with_channel(c));
    assert!(send(&l, &up, request(&["a"], 0)).await.is_ok());
    assert!(send(&l, &up, request(&["a"], 0)).await.is_err());
    let mut other = request(&["a"], 0);
    other.extensions_mut().insert(ModelId("other".into()));
    assert!(send(&l, &up, other).await.is_ok());

    // Per vendor: one account-wide RPD across two credentials.
    let st = store();
    let reg = UpstreamRegistry::new()
        .with_channel(channel("a", Dialect::OpenAi, "k1", RateLimits::default()))
        .with_channel(channel("b", Dialect::OpenAi, "k2", RateLimits::default()))
        .with_vendor("openai", limits(|l| l.rpd = Some(1)));
    let l = layer(&st, reg);
    assert!(send(&l, &up, request(&["a", "b"], 0)).await.is_ok());
    let e = send(&l, &up, request(&["a", "b"], 0)).await.unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::RpdLimit);
}

#[tokio::test(start_paused = true)]
async fn s1_rpm_room_but_no_tpm_is_refused_and_provider_sees_zero_calls() {
    let st = store();
    let l = limits(|l| {
        l.rpm = Some(100);
        l.tpm = Some(1_000);
    });
    let reg = UpstreamRegistry::new().with_channel(channel("a", Dialect::OpenAi, "k", l));
    let layer = layer(&st, reg);
    let up = Upstream::ok();
    let e = send(&layer, &up, request(&["a"], 1_001)).await.unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::TpmLimit);
    assert_eq!(up.calls(), 0, "the provider saw a call");
    // Nothing was counted: the requests tier is still empty.
    assert_eq!(used(&st, &credential_key("k"), &l).await, [0, 0]);
}

#[tokio::test(start_paused = true)]
async fn u2_tokens_settled_with_the_vendors_counting_rules() {
    let st = store();
    // Anthropic: cache reads do not count toward ITPM, cache writes do.
    let l = limits(|l| {
        l.itpm = Some(10_000);
        l.otpm = Some(10_000);
    });
    let reg = UpstreamRegistry::new().with_channel(channel("a", Dialect::Anthropic, "k", l));
    let layer = layer(&st, reg);
    let mut up = Upstream::ok();
    up.usage = Some(Usage {
        input_tokens: 100,
        cached_input_tokens: 900,
        cache_write_tokens: 50,
        output_tokens: 7,
        ..Usage::default()
    });
    let mut r = request(&["a"], 0);
    r.extensions_mut().insert(RateCount {
        tpm: 2_000,
        itpm: 1_500,
        otpm: 500,
    });
    send(&layer, &up, r).await.unwrap();
    assert_eq!(used(&st, &credential_key("k"), &l).await, [150, 7]);

    // OpenAI: cached input counts toward TPM.
    let st = store();
    let l = limits(|l| l.tpm = Some(10_000));
    let reg = UpstreamRegistry::new().with_channel(channel("a", Dialect::OpenAi, "k", l));
    let layer2 = self::layer(&st, reg);
    send(&layer2, &up, request(&["a"], 3_000)).await.unwrap();
    assert_eq!(used(&st, &credential_key("k"), &l).await, [1_057]);
}

#[tokio::test(start_paused = true)]
async fn u2_each_candidate_is_charged_the_estimate_of_its_own_vendors_rules() {
    // An OpenAI and a Gemini channel, each with a TPM of 100, for one request whose
    // candidates speak both (a translated request): OpenAI's TPM counts the output
    // bound, Gemini's only the input.
    let st = store();
    let tpm = limits(|l| l.tpm = Some(100));
    let reg = UpstreamRegistry::new()
        .with_channel(channel("a", Dialect::OpenAi, "ka", tpm))
        .with_channel(channel("g", Dialect::Gemini, "kg", tpm));
    let layer = layer(&st, reg);
    let up = Upstream::ok();
    let estimates = RateEstimates {
        openai: RateCount {
            tpm: 150,
            itpm: 60,
            otpm: 90,
        },
        anthropic: RateCount {
            tpm: 150,
            itpm: 60,
            otpm: 90,
        },
        gemini: RateCount {
            tpm: 60,
            itpm: 60,
            otpm: 90,
        },
    };
    let mut r = request(&["a", "g"], 0);
    r.extensions_mut().insert(estimates);
    // Too much for the OpenAI channel under its rules; within the Gemini channel's.
    assert_eq!(send(&layer, &up, r).await.unwrap(), "g");
    assert_eq!(used(&st, &credential_key("kg"), &tpm).await, [60]);
    assert_eq!(used(&st, &credential_key("ka"), &tpm).await, [0]);
    // One count for every channel (a request of one dialect): 150 fits neither.
    let mut r = request(&["a", "g"], 0);
    r.extensions_mut().insert(estimates.openai);
    let e = send(&layer, &up, r).await.unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::TpmLimit);
    assert_eq!(up.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn u2_estimate_reserved_while_in_flight_and_refunded_when_refused_further_in() {
    let st = store();
    let l = limits(|l| {
        l.rpm = Some(10);
        l.tpm = Some(1_000);
    });
    let reg = UpstreamRegistry::new().with_channel(channel("a", Dialect::OpenAi, "k", l));
    let layer = layer(&st, reg);
    // Refused further in (a typed rejection, nothing recorded): given back.
    let svc = ServiceBuilder::new()
        .layer(layer.clone())
        .service_fn(|_r: Request<()>| async {
            Err::<Response<http_body_util::Full<bytes::Bytes>>, _>(portcullis::BoxError::from(
                portcullis::core::Rejection::new(
                    GatewayCode::CapacityBusy,
                    LayerKind::CapacityQueue,
                ),
            ))
        });
    assert!(svc.oneshot(request(&["a"], 400)).await.is_err());
    assert_eq!(used(&st, &credential_key("k"), &l).await, [0, 0]);

    // Held while the body streams, settled at its end with no usage: the estimate
    // stands (never zero).
    let (tx, body) = stream_body();
    let body = Arc::new(std::sync::Mutex::new(Some(body)));
    let svc = ServiceBuilder::new()
        .layer(layer.clone())
        .service_fn(move |_r: Request<()>| {
            let b = body.lock().unwrap().take().unwrap();
            async move { Ok::<_, std::convert::Infallible>(Response::new(b)) }
        });
    let res = svc.oneshot(request(&["a"], 400)).await.unwrap();
    assert_eq!(used(&st, &credential_key("k"), &l).await, [1, 400]);
    drop(tx);
    drain(res.into_body()).await.unwrap();
    tokio::task::yield_now().await;
    assert_eq!(used(&st, &credential_key("k"), &l).await, [1, 400]);
}

#[tokio::test(start_paused = true)]
async fn u2_parallel_requests_never_exceed_the_limit() {
    let st = store();
    let l = limits(|l| l.rpm = Some(50));
    let reg = UpstreamRegistry::new().with_channel(channel("a", Dialect::OpenAi, "k", l));
    let layer = layer(&st, reg);
    let up = Upstream::ok();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let (layer, up) = (layer.clone(), up.clone());
        set.spawn(async move { send(&layer, &up, request(&["a"], 0)).await.is_ok() });
    }
    let ok = set.join_all().await.into_iter().filter(|ok| *ok).count();
    assert_eq!(ok, 50);
    assert_eq!(up.calls(), 50);
}

#[tokio::test(start_paused = true)]
async fn u3_remaining_zero_stops_sends_on_that_scope_until_reset() {
    let st = store();
    let reg = UpstreamRegistry::new()
        .with_channel(channel("a", Dialect::OpenAi, "ka", RateLimits::default()))
        .with_channel(channel("b", Dialect::OpenAi, "kb", RateLimits::default()));
    let layer = layer(&st, reg);
    let mut up = Upstream::ok();
    up.headers = vec![
        ("x-ratelimit-remaining-requests", "0"),
        ("x-ratelimit-reset-requests", "20s"),
    ];
    assert_eq!(
        send(&layer, &up, request(&["a", "b"], 0)).await.unwrap(),
        "a"
    );
    let quiet = Upstream::ok();
    // "a" reported its limit exhausted: "b" takes the traffic for 20 s.
    for _ in 0..3 {
        assert_eq!(
            send(&layer, &quiet, request(&["a", "b"], 0)).await.unwrap(),
            "b"
        );
    }
    let e = send(&layer, &quiet, request(&["a"], 0)).await.unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::UpstreamCooling);
    assert_eq!(rejection(&e).retry_after_secs(), Some(20));
    // Only that model's scope cools: another model on "a" is sent.
    let mut other = request(&["a"], 0);
    other.extensions_mut().insert(ModelId("other".into()));
    assert_eq!(send(&layer, &quiet, other).await.unwrap(), "a");
    tokio::time::advance(Duration::from_secs(20)).await;
    assert_eq!(
        send(&layer, &quiet, request(&["a", "b"], 0)).await.unwrap(),
        "a"
    );
    assert_eq!(layer.stats().deviations, 0);
}

#[tokio::test(start_paused = true)]
async fn u3_provider_429_while_local_model_had_room_cools_the_scope_and_counts() {
    let st = store();
    let reg = UpstreamRegistry::new().with_channel(channel(
        "a",
        Dialect::OpenAi,
        "k",
        limits(|l| l.rpm = Some(1_000)),
    ));
    let layer = layer(&st, reg);
    let mut up = Upstream::ok();
    up.status = 429;
    up.headers = vec![("retry-after", "5")];
    // The provider's 429 is passed on (the failover layer decides what to do with it).
    send(&layer, &up, request(&["a"], 0)).await.unwrap();
    assert_eq!(layer.stats().deviations, 1);
    let cooled = layer
        .registry()
        .cooldowns()
        .until(&model_key("k", "m"), T0 + 1)
        .unwrap();
    assert_eq!(cooled, T0 + 5_000);
    let e = send(&layer, &Upstream::ok(), request(&["a"], 0))
        .await
        .unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::UpstreamCooling);
    assert_eq!(rejection(&e).retry_after_secs(), Some(5));
    tokio::time::advance(Duration::from_secs(5)).await;
    assert!(
        send(&layer, &Upstream::ok(), request(&["a"], 0))
            .await
            .is_ok()
    );
}

#[tokio::test(start_paused = true)]
async fn u4_codes_by_window_kind_mixed_gives_42908_with_earliest_recovery() {
    let up = Upstream::ok();
    for (l, code) in [
        (limits(|l| l.rph = Some(1)), GatewayCode::RphLimit),
        (limits(|l| l.rpd = Some(1)), GatewayCode::RpdLimit),
        (limits(|l| l.rpm = Some(1)), GatewayCode::RpmLimit),
    ] {
        let st = store();
        let reg = UpstreamRegistry::new()
            .with_channel(channel("a", Dialect::OpenAi, "ka", l))
            .with_channel(channel("b", Dialect::OpenAi, "kb", l));
        let layer = layer(&st, reg);
        send(&layer, &up, request(&["a"], 0)).await.unwrap();
        send(&layer, &up, request(&["b"], 0)).await.unwrap();
        let e = send(&layer, &up, request(&["a", "b"], 0))
            .await
            .unwrap_err();
        assert_eq!(rejection(&e).code(), code);
    }
    // TPM on one channel, RPH on the other: mixed → 42908, Retry-After = the
    // earlier recovery (the minute).
    let st = store();
    let reg = UpstreamRegistry::new()
        .with_channel(channel(
            "a",
            Dialect::OpenAi,
            "ka",
            limits(|l| l.tpm = Some(100)),
        ))
        .with_channel(channel(
            "b",
            Dialect::OpenAi,
            "kb",
            limits(|l| l.rph = Some(1)),
        ));
    let layer = layer(&st, reg);
    send(&layer, &up, request(&["a"], 60)).await.unwrap();
    send(&layer, &up, request(&["b"], 0)).await.unwrap();
    let e = send(&layer, &up, request(&["a", "b"], 50))
        .await
        .unwrap_err();
    let r = rejection(&e);
    assert_eq!(r.code(), GatewayCode::UpstreamCooling);
    assert!(r.retry_after_secs().unwrap() <= 60, "{:?}", r.retry_after());
    // No candidate at all: 50201, a configuration problem.
    let e = send(&layer, &up, request(&[], 0)).await.unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::NoUpstream);
    assert_eq!(rejection(&e).http_status(), 502);
}

#[tokio::test(start_paused = true)]
async fn u1_only_one_limited_channel_is_reserved_and_a_spill_gives_it_back() {
    // "a" has limits and no capacity room; "free" is unconstrained. The capacity
    // layer spills to "free"; the reservation on "a" is given back.
    let st = store();
    let l = limits(|l| l.rpm = Some(5));
    let reg = UpstreamRegistry::new().with_channel(channel("a", Dialect::OpenAi, "k", l));
    let layer = layer(&st, reg);
    let up = Upstream::ok();
    let cap = CapacityQueueLayer::new(st.clone());
    let svc = ServiceBuilder::new()
        .layer(layer.clone())
        .layer(cap)
        .service(up.clone());
    // Occupy "a"'s only capacity slot with a request that streams.
    let mut r = Request::new(());
    r.extensions_mut().insert(Candidates::new([
        ChannelRef::new("a", 1),
        ChannelRef::new("free", 0),
    ]));
    r.extensions_mut().insert(ModelId("m".into()));
    let first = svc.clone().oneshot(r).await.unwrap();
    assert_eq!(used(&st, &credential_key("k"), &l).await, [1]);
    let mut r = Request::new(());
    r.extensions_mut().insert(Candidates::new([
        ChannelRef::new("a", 1),
        ChannelRef::new("free", 0),
    ]));
    r.extensions_mut().insert(ModelId("m".into()));
    let second = svc.oneshot(r).await.unwrap();
    assert_eq!(drain(second.into_body()).await.unwrap(), "free");
    tokio::task::yield_now().await;
    assert_eq!(used(&st, &credential_key("k"), &l).await, [1]);
    drop(first);
}

#[tokio::test(start_paused = true)]
async fn d4_store_failure_follows_the_layers_mode() {
    let reg = || {
        Arc::new(UpstreamRegistry::new().with_channel(channel(
            "a",
            Dialect::OpenAi,
            "k",
            limits(|l| l.rpm = Some(1)),
        )))
    };
    let up = Upstream::ok();
    let open = UpstreamLimitLayer::new(DeadStore, reg());
    let res = ServiceBuilder::new()
        .layer(open.clone())
        .service(up.clone())
        .oneshot(request(&["a"], 0))
        .await;
    assert!(res.is_ok());
    assert_eq!(open.stats().failures.failed_open, 1);
    let closed = UpstreamLimitLayer::new(DeadStore, reg()).failure_mode(FailureMode::Closed);
    let e = ServiceBuilder::new()
        .layer(closed)
        .service(up.clone())
        .oneshot(request(&["a"], 0))
        .await
        .unwrap_err();
    assert_eq!(rejection(&e).http_status(), 503);
}

#[tokio::test(start_paused = true)]
async fn l1_a_builder_method_on_a_shared_layer_changes_that_copy_alone() {
    let reg = Arc::new(UpstreamRegistry::new().with_channel(channel(
        "a",
        Dialect::OpenAi,
        "k",
        limits(|l| l.rpm = Some(1)),
    )));
    let up = Upstream::ok();
    let open = UpstreamLimitLayer::new(DeadStore, reg);
    // A service built before, and the layer it came from, keep failing open …
    let built = ServiceBuilder::new()
        .layer(open.clone())
        .service(up.clone());
    // … while the copy the builder method changed fails closed: no panic, no surprise.
    let closed = open.clone().failure_mode(FailureMode::Closed);
    let refused = ServiceBuilder::new()
        .layer(closed.clone())
        .service(up.clone())
        .oneshot(request(&["a"], 0))
        .await
        .unwrap_err();
    assert_eq!(rejection(&refused).http_status(), 503);
    assert!(built.oneshot(request(&["a"], 0)).await.is_ok());
    let later = ServiceBuilder::new().layer(open.clone()).service(up);
    assert!(later.oneshot(request(&["a"], 0)).await.is_ok());
    // Every copy counts into one set of counters.
    for layer in [&open, &closed] {
        assert_eq!(layer.stats().failures.failed_open, 2);
        assert_eq!(layer.stats().failures.failed_closed, 1);
    }
}
