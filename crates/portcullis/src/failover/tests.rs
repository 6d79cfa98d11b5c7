//! The forwarder's typed answer through failover and the provider limits (F2, F5, B4,
//! L5), on paused tokio time with a scripted forwarder.

use crate::failover::FailoverLayer;
use crate::time::TokioClock;
use crate::{BoxError, ErrorMappingLayer, UpstreamLimitLayer};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use portcullis_core::upstream::{RateLimits, UpstreamChannel, UpstreamRegistry};
use portcullis_core::{
    Candidates, ChannelRef, Chosen, Dialect, GatewayCode, MemoryStore, ModelId, Rejection,
    UpstreamError, UpstreamFailure, UsageRecorder,
};
use std::sync::{Arc, Mutex};
use tokio::time::Instant;
use tower::{Service, ServiceBuilder, ServiceExt};

/// Channels `a` and `b`, one request per minute each.
pub(super) fn registry() -> Arc<UpstreamRegistry> {
    let mut r = UpstreamRegistry::new();
    for c in ["a", "b"] {
        r = r.with_channel(UpstreamChannel {
            name: c.into(),
            dialect: Dialect::OpenAi,
            vendor: "openai".into(),
            credential: format!("k-{c}").into(),
            limits: RateLimits {
                rpm: Some(1),
                ..RateLimits::default()
            },
            model_limits: vec![],
        });
    }
    Arc::new(r)
}

fn request(channels: &[&str]) -> Request<()> {
    let mut r = Request::new(());
    r.extensions_mut().insert(Candidates::new(
        channels.iter().map(|c| ChannelRef::new(*c, 0)),
    ));
    r.extensions_mut().insert(ModelId("m".into()));
    r.extensions_mut().insert(Dialect::OpenAi);
    r
}

/// A forwarder that fails on channel `a` with `failure` — after marking the attempt's
/// recorder, as a real one does before the request leaves — and answers elsewhere.
/// Records the channels it was called for.
fn forwarder(
    failure: UpstreamFailure,
    seen: Arc<Mutex<Vec<String>>>,
) -> impl Service<Request<()>, Response = Response<Full<Bytes>>, Error = BoxError, Future = impl Send>
+ Clone
+ Send {
    tower::service_fn(move |r: Request<()>| {
        let ch = r.extensions().get::<Chosen>().unwrap().0.name.to_string();
        let rec = r.extensions().get::<UsageRecorder>().unwrap().clone();
        rec.set_channel(ch.clone().into());
        rec.mark_unknown();
        seen.lock().unwrap().push(ch.clone());
        async move {
            if ch == "a" {
                return Err(Box::new(UpstreamError::new(failure)) as BoxError);
            }
            rec.record(Default::default());
            Ok(Response::new(Full::new(Bytes::from_static(b"{}"))))
        }
    })
}

fn stack(
    reg: &Arc<UpstreamRegistry>,
    failure: UpstreamFailure,
    seen: &Arc<Mutex<Vec<String>>>,
) -> impl Service<
    Request<()>,
    Response = Response<impl http_body::Body>,
    Error = BoxError,
    Future = impl Send,
> + Clone {
    let clock = TokioClock::new(1_700_000_000_000);
    let store = MemoryStore::with_clock(clock.clone());
    ServiceBuilder::new()
        .layer(FailoverLayer::new(reg.clone()).clock(clock.clone()))
        .layer(UpstreamLimitLayer::new(store, reg.clone()).clock(clock))
        .service(forwarder(failure, seen.clone()))
}

#[tokio::test(start_paused = true)]
async fn f2_b4_a_refused_connection_fails_over_at_once_and_gives_its_windows_back() {
    let reg = registry();
    let seen = Arc::default();
    let svc = stack(&reg, UpstreamFailure::Connect, &seen);
    let t0 = Instant::now();
    let res = svc.clone().oneshot(request(&["a", "b"])).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        Instant::now(),
        t0,
        "no backoff after a refused connection (F6)"
    );
    drop(res);
    assert_eq!(*seen.lock().unwrap(), ["a", "b"]);
    // `a` never saw the request although its recorder was marked: its one request per
    // minute is back (L5), so the next request is counted there and sent.
    seen.lock().unwrap().clear();
    let again = svc.oneshot(request(&["a"])).await;
    assert!(again.is_err(), "a still refuses the connection");
    assert_eq!(
        seen.lock().unwrap().first().map(String::as_str),
        Some("a"),
        "admitted on a's windows again"
    );
}

#[tokio::test(start_paused = true)]
async fn f5_b4_a_timeout_fails_over_after_a_backoff_and_keeps_its_windows() {
    let reg = registry();
    let seen = Arc::default();
    let svc = stack(&reg, UpstreamFailure::Timeout, &seen);
    let t0 = Instant::now();
    let res = svc.clone().oneshot(request(&["a", "b"])).await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(
        Instant::now() > t0,
        "a result-unknown failure backs off (F6)"
    );
    drop(res);
    // The provider may have run it: `a`'s request stays counted (B4).
    seen.lock().unwrap().clear();
    let Err(e) = svc.oneshot(request(&["a"])).await else {
        panic!("admitted")
    };
    let r = e.downcast_ref::<Rejection>().expect("a rejection");
    assert_eq!(r.code(), GatewayCode::RpmLimit);
    assert!(seen.lock().unwrap().is_empty(), "nothing sent");
}

#[tokio::test(start_paused = true)]
async fn f10_every_channel_failing_upstream_is_failovers_own_50202() {
    let reg = registry();
    let seen = Arc::default();
    let svc = stack(&reg, UpstreamFailure::Lost, &seen);
    let Err(e) = svc.oneshot(request(&["a"])).await else {
        panic!("answered")
    };
    let r = e.downcast_ref::<Rejection>().expect("a rejection");
    assert_eq!(r.code(), GatewayCode::UpstreamFailed);
    assert_eq!(r.layer(), portcullis_core::LayerKind::Failover);
}

#[tokio::test]
async fn e1_without_failover_the_forwarders_failure_is_rendered_as_50202() {
    let svc = ServiceBuilder::new()
        .layer(ErrorMappingLayer::new())
        .service(tower::service_fn(|_req: Request<Full<Bytes>>| async {
            Err::<Response<Full<Bytes>>, BoxError>(Box::new(UpstreamError::new(
                UpstreamFailure::Timeout,
            )))
        }));
    let res = svc
        .oneshot(Request::new(Full::new(Bytes::new())))
        .await
        .unwrap();
    assert_eq!(res.status(), 502);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("50202"), "{text}");
}

/// A vendor whose 400 with `{"fault":"busy"}` means "overloaded, try elsewhere".
fn other_vendor(
    _: Dialect,
    status: u16,
    _: &http::HeaderMap,
    body: &[u8],
) -> portcullis_core::failover::ErrorFacts {
    let busy = body == br#"{"fault":"busy"}"#;
    portcullis_core::failover::ErrorFacts {
        status: if busy { 503 } else { status },
        ..Default::default()
    }
}

/// A failover layer over channels `a` and `b`, with the default error reader.
fn failover_over_a_and_b() -> FailoverLayer {
    FailoverLayer::new(registry()).clock(TokioClock::new(1_700_000_000_000))
}

/// The status the client gets through `failover` when channel `a` answers 400
/// `{"fault":"busy"}` and `b` answers 200.
async fn status_with(failover: FailoverLayer) -> u16 {
    let reg = failover.registry().clone();
    let clock = TokioClock::new(1_700_000_000_000);
    let forwarder = tower::service_fn(|r: Request<()>| async move {
        let ch = r.extensions().get::<Chosen>().unwrap().0.name.to_string();
        let rec = r.extensions().get::<UsageRecorder>().unwrap().clone();
        rec.set_channel(ch.clone().into());
        let (status, body): (u16, &'static [u8]) = if ch == "a" {
            (400, br#"{"fault":"busy"}"#)
        } else {
            rec.record(Default::default());
            (200, b"{}")
        };
        let mut res = Response::new(Full::new(Bytes::from_static(body)));
        *res.status_mut() = http::StatusCode::from_u16(status).unwrap();
        Ok::<_, BoxError>(res)
    });
    let svc = ServiceBuilder::new()
        .layer(failover)
        .layer(UpstreamLimitLayer::new(MemoryStore::with_clock(clock.clone()), reg).clock(clock))
        .service(forwarder);
    svc.oneshot(request(&["a", "b"]))
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(start_paused = true)]
async fn f5_the_error_reader_is_injected_and_defaults_to_the_vendors_bodies() {
    // By default the body is read as OpenAI's: a 400 goes to the client as it is.
    assert_eq!(status_with(failover_over_a_and_b()).await, 400);
    // An injected reader knows the other vendor's overload: failed over to `b`.
    let injected = failover_over_a_and_b().error_reader(other_vendor);
    assert_eq!(status_with(injected).await, 200);
}

#[tokio::test(start_paused = true)]
async fn l1_a_builder_method_on_a_shared_layer_changes_that_copy_alone() {
    let base = failover_over_a_and_b();
    let cloned_before = base.clone();
    // No panic on a layer already cloned: the builder method changes its own copy …
    let other = base.clone().error_reader(other_vendor);
    assert_eq!(status_with(other.clone()).await, 200);
    // … and the layer it came from, and its earlier clone, read as before.
    assert_eq!(status_with(base.clone()).await, 400);
    assert_eq!(status_with(cloned_before).await, 400);
    // The copies still share one health book and one set of counters …
    assert!(std::ptr::eq(base.health(), other.health()));
    assert_eq!(base.stats().requests, 3);
    assert_eq!(other.stats().requests, 3);
    // … except after `config`, which builds them afresh for the copy it changes.
    let fresh = base.clone().config(super::FailoverConfig::default());
    assert!(!std::ptr::eq(base.health(), fresh.health()));
    assert_eq!(fresh.stats().requests, 0);
    assert_eq!(base.stats().requests, 3);
}
