//! ErrorMappingLayer, black-box (the error rules E1–E4, L1, L2).

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use portcullis::BoxError;
use portcullis::core::{
    Dialect, Dimension, GatewayCode, LayerKind, RateLimitInfo, Rejection, Tier,
    subscription_message,
};
use portcullis::error_map::{MappedBody, render, render_internal};
use portcullis::{ErrorMapping, ErrorMappingLayer};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service, ServiceBuilder, ServiceExt, service_fn};

type Body = Full<Bytes>;

// ---------------------------------------------------------------- helpers

fn req(path: &str) -> Request<Body> {
    Request::post(path).body(Body::default()).unwrap()
}

fn req_with_id(path: &str, id: &str) -> Request<Body> {
    Request::post(path)
        .header("x-request-id", id)
        .body(Body::default())
        .unwrap()
}

/// An inner service that refuses every request with `err()`.
fn failing<F>(
    err: F,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = BoxError, Future: Send>
+ Clone
+ Send
+ Sync
where
    F: Fn() -> BoxError + Clone + Send + Sync + 'static,
{
    service_fn(move |_req: Request<Body>| {
        let err = err.clone();
        async move { Err::<Response<Body>, BoxError>(err()) }
    })
}

fn rejecting(r: Rejection) -> impl Fn() -> BoxError + Clone + Send + Sync + 'static {
    move || Box::new(r.clone())
}

/// Sends `req` through `ErrorMappingLayer::new()` over an inner that rejects with `r`.
async fn through(r: Rejection, req: Request<Body>) -> (http::response::Parts, Bytes) {
    let svc = ErrorMappingLayer::new().layer(failing(rejecting(r)));
    split(svc.oneshot(req).await).await
}

async fn split<B>(
    res: Result<Response<MappedBody<B>>, Infallible>,
) -> (http::response::Parts, Bytes)
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let Ok(res) = res;
    let (parts, body) = res.into_parts();
    (parts, body.collect().await.unwrap().to_bytes())
}

fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap()
}

fn hdr<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).map(|v| v.to_str().unwrap())
}

fn rendered_json(r: &Rejection, d: Dialect) -> (Response<()>, Value) {
    let res = render(r, d, "rid");
    let (parts, body) = res.into_parts();
    let bytes = futures_util::FutureExt::now_or_never(body.collect())
        .unwrap()
        .unwrap()
        .to_bytes();
    (Response::from_parts(parts, ()), json_of(&bytes))
}

// ---------------------------------------------------------------- E1

#[tokio::test]
async fn e1_openai_body_for_42906() {
    let msg = subscription_message(Dimension::Requests, Tier::per_hour(500), Some(1_832_000));
    let r = Rejection::new(GatewayCode::SubscriptionQuota, LayerKind::AnchoredWindow)
        .with_message(msg.clone())
        .with_retry_after(Some(Duration::from_millis(1_832_000)));
    let (parts, body) = through(r, req("/v1/chat/completions")).await;

    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        hdr(&parts.headers, "content-type"),
        Some("application/json")
    );
    assert_eq!(
        json_of(&body),
        json!({"error": {
            "message": msg,
            "type": "rate_limit_exceeded",
            "code": "42906",
            "param": null,
        }})
    );
    // The Chinese text arrives as UTF-8, not mangled.
    assert!(
        std::str::from_utf8(&body)
            .unwrap()
            .contains("已达套餐请求次数上限")
    );

    // A message with quotes, backslashes and newlines stays valid JSON.
    let tricky = "model \"gpt-x\" \\ not allowed\n第二行";
    let r = Rejection::new(GatewayCode::Forbidden, LayerKind::Request).with_message(tricky);
    let (parts, body) = through(r, req("/v1/chat/completions")).await;
    assert_eq!(parts.status, StatusCode::FORBIDDEN);
    assert_eq!(
        json_of(&body),
        json!({"error": {
            "message": tricky,
            "type": "permission_error",
            "code": "40301",
            "param": null,
        }})
    );
}

#[test]
fn e1_openai_types_per_status() {
    for &code in GatewayCode::ALL {
        let status = code.http_status();
        let want = match status {
            429 => "rate_limit_exceeded",
            402 => "insufficient_quota",
            400 | 404 | 408 | 413 | 422 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            500..=599 => "server_error",
            s => panic!("no OpenAI type specified for status {s} ({code:?})"),
        };
        let r = Rejection::new(code, LayerKind::Gateway);
        let (res, body) = rendered_json(&r, Dialect::OpenAi);
        assert_eq!(res.status(), status);
        assert_eq!(
            body,
            json!({"error": {
                "message": code.default_message(),
                "type": want,
                "code": code.code().to_string(),
                "param": null,
            }}),
            "{code:?}"
        );
    }
}

#[test]
fn e1_anthropic_types_per_status() {
    for &code in GatewayCode::ALL {
        let status = code.http_status();
        let want = match status {
            429 => "rate_limit_error",
            402 => "billing_error",
            400 | 408 | 422 => "invalid_request_error",
            413 => "request_too_large",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            500 | 502 | 503 | 504 => "api_error",
            s => panic!("no Anthropic type specified for status {s} ({code:?})"),
        };
        let r = Rejection::new(code, LayerKind::Gateway);
        let (res, body) = rendered_json(&r, Dialect::Anthropic);
        assert_eq!(res.status(), status);
        assert_eq!(hdr(res.headers(), "content-type"), Some("application/json"));
        assert_eq!(
            body,
            json!({"type": "error", "error": {"type": want, "message": code.default_message()}}),
            "{code:?}"
        );
    }
}

#[test]
fn e1_gemini_status_strings() {
    for &code in GatewayCode::ALL {
        let status = code.http_status();
        let want = match status {
            429 | 402 => "RESOURCE_EXHAUSTED",
            502 | 503 => "UNAVAILABLE",
            400 | 408 | 413 | 422 => "INVALID_ARGUMENT",
            401 => "UNAUTHENTICATED",
            403 => "PERMISSION_DENIED",
            404 => "NOT_FOUND",
            500 => "INTERNAL",
            504 => "DEADLINE_EXCEEDED",
            s => panic!("no Gemini status specified for status {s} ({code:?})"),
        };
        let r = Rejection::new(code, LayerKind::Gateway);
        let (res, body) = rendered_json(&r, Dialect::Gemini);
        assert_eq!(res.status(), status);
        assert_eq!(
            body,
            json!({"error": {"code": status, "message": code.default_message(), "status": want}}),
            "{code:?}"
        );
        // `code` is the HTTP status as a JSON number, not a string.
        assert!(body["error"]["code"].is_u64());
    }
}

#[test]
fn e1_native_body_shape() {
    for &code in GatewayCode::ALL {
        let r = Rejection::new(code, LayerKind::Gateway);
        let (res, body) = rendered_json(&r, Dialect::Native);
        assert_eq!(res.status(), code.http_status());
        assert_eq!(
            body,
            json!({
                "code": code.code(),
                "message": code.default_message(),
                "error": {"type": "gateway_error", "code": code.code().to_string()},
            }),
            "{code:?}"
        );
    }
    // The native example of E1, literally.
    let r = Rejection::new(GatewayCode::SubscriptionQuota, LayerKind::AnchoredWindow);
    let (_, body) = rendered_json(&r, Dialect::Native);
    assert_eq!(body["code"], 42906);
    assert_eq!(body["error"]["code"], "42906");
}

#[tokio::test]
async fn e1_dialect_from_route_and_extension_override() {
    let r = Rejection::new(GatewayCode::RpmLimit, LayerKind::AnchoredWindow);
    let shape = |v: &Value| -> Dialect {
        if v["type"] == "error" {
            Dialect::Anthropic
        } else if v["error"]["param"].is_null() && v["error"].get("param").is_some() {
            Dialect::OpenAi
        } else if v["error"]["status"].is_string() {
            Dialect::Gemini
        } else if v["error"]["type"] == "gateway_error" {
            Dialect::Native
        } else {
            panic!("unknown shape {v}")
        }
    };

    // By route.
    for (path, want) in [
        ("/v1/chat/completions", Dialect::OpenAi),
        ("/v1/messages", Dialect::Anthropic),
        (
            "/v1beta/models/gemini-2.5-pro:generateContent",
            Dialect::Gemini,
        ),
        ("/usage", Dialect::Native),
        ("/", Dialect::Native),
    ] {
        let (_, body) = through(r.clone(), req(path)).await;
        assert_eq!(shape(&json_of(&body)), want, "{path}");
    }

    // A Dialect extension beats the route.
    let mut q = req("/v1/chat/completions");
    q.extensions_mut().insert(Dialect::Anthropic);
    let (_, body) = through(r.clone(), q).await;
    assert_eq!(shape(&json_of(&body)), Dialect::Anthropic);

    // A forced dialect beats the route …
    let forced = ErrorMappingLayer::new().dialect(Dialect::Gemini);
    assert_eq!(forced.forced_dialect(), Some(Dialect::Gemini));
    let svc = forced.layer(failing(rejecting(r.clone())));
    let (_, body) = split(svc.clone().oneshot(req("/v1/messages")).await).await;
    assert_eq!(shape(&json_of(&body)), Dialect::Gemini);

    // … and the extension beats the forced dialect.
    let mut q = req("/v1/messages");
    q.extensions_mut().insert(Dialect::OpenAi);
    let (_, body) = split(svc.oneshot(q).await).await;
    assert_eq!(shape(&json_of(&body)), Dialect::OpenAi);
}

// ---------------------------------------------------------------- E2

#[tokio::test]
async fn e2_retry_after_rounded_up_never_zero() {
    let with = |ms: Option<u64>| {
        Rejection::new(GatewayCode::RpmLimit, LayerKind::AnchoredWindow)
            .with_retry_after(ms.map(Duration::from_millis))
    };
    for (ms, want) in [
        (Some(0), Some("1")),
        (Some(1), Some("1")),
        (Some(999), Some("1")),
        (Some(1_000), Some("1")),
        (Some(1_001), Some("2")),
        (Some(1_500), Some("2")),
        (Some(59_999), Some("60")),
        (Some(3_600_000), Some("3600")),
        (None, None),
    ] {
        let (parts, _) = through(with(ms), req("/v1/chat/completions")).await;
        assert_eq!(hdr(&parts.headers, "retry-after"), want, "{ms:?} ms");
    }

    // Any rejection that knows its recovery says so, not only 429s.
    let r = Rejection::new(GatewayCode::StoreUnavailable, LayerKind::AnchoredWindow)
        .with_retry_after(Some(Duration::from_millis(200)));
    let (parts, _) = through(r, req("/")).await;
    assert_eq!(parts.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(hdr(&parts.headers, "retry-after"), Some("1"));
}

#[tokio::test]
async fn e2_ratelimit_headers_only_on_429_rejections() {
    const NAMES: [&str; 4] = [
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
    ];
    let both = RateLimitInfo {
        requests: Some(60),
        tokens: Some(100_000),
    };

    // 429 with both limits: all four.
    let r = Rejection::new(GatewayCode::TpmLimit, LayerKind::AnchoredWindow)
        .with_retry_after(Some(Duration::from_secs(5)))
        .with_rate_limits(both);
    let (parts, _) = through(r, req("/v1/messages")).await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    let h = &parts.headers;
    assert_eq!(hdr(h, "x-ratelimit-limit-requests"), Some("60"));
    assert_eq!(hdr(h, "x-ratelimit-remaining-requests"), Some("0"));
    assert_eq!(hdr(h, "x-ratelimit-limit-tokens"), Some("100000"));
    assert_eq!(hdr(h, "x-ratelimit-remaining-tokens"), Some("0"));

    // 429 with only a request limit: only that pair.
    let r = Rejection::new(GatewayCode::RpmLimit, LayerKind::AnchoredWindow).with_rate_limits(
        RateLimitInfo {
            requests: Some(60),
            tokens: None,
        },
    );
    let (parts, _) = through(r, req("/v1/messages")).await;
    assert_eq!(
        hdr(&parts.headers, "x-ratelimit-limit-requests"),
        Some("60")
    );
    assert_eq!(
        hdr(&parts.headers, "x-ratelimit-remaining-requests"),
        Some("0")
    );
    assert!(!parts.headers.contains_key("x-ratelimit-limit-tokens"));
    assert!(!parts.headers.contains_key("x-ratelimit-remaining-tokens"));

    // 429 with no limits known: none.
    let r = Rejection::new(GatewayCode::ConcurrencyLimit, LayerKind::ConcurrencySlot);
    let (parts, _) = through(r, req("/v1/messages")).await;
    for n in NAMES {
        assert!(
            !parts.headers.contains_key(n),
            "{n} on a 429 without limits"
        );
    }

    // Not a 429, even with limits attached: none.
    for code in [
        GatewayCode::InsufficientBalance,
        GatewayCode::StoreUnavailable,
        GatewayCode::Forbidden,
    ] {
        let r = Rejection::new(code, LayerKind::BillingGate).with_rate_limits(both);
        let (parts, _) = through(r, req("/v1/messages")).await;
        assert_ne!(parts.status, StatusCode::TOO_MANY_REQUESTS);
        for n in NAMES {
            assert!(!parts.headers.contains_key(n), "{n} on {code:?}");
        }
    }

    // A successful response: none added, and no Retry-After or x-should-retry either.
    let ok = service_fn(|_req: Request<Body>| async {
        Ok::<_, BoxError>(Response::new(Body::from("fine")))
    });
    let (parts, _) = split(
        ErrorMappingLayer::new()
            .layer(ok)
            .oneshot(req("/v1/messages"))
            .await,
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    for n in NAMES.iter().chain(&["retry-after", "x-should-retry"]) {
        assert!(!parts.headers.contains_key(*n), "{n} on a success");
    }
}

#[tokio::test]
async fn e2_should_retry_false_over_60s_and_unknown() {
    let rpm = |secs: Option<u64>| {
        Rejection::new(GatewayCode::RpmLimit, LayerKind::AnchoredWindow)
            .with_retry_after(secs.map(Duration::from_secs))
    };
    let cases = [
        ("429 in 60 s", rpm(Some(60)), None),
        ("429 in 1 s", rpm(Some(1)), None),
        ("429 in 61 s", rpm(Some(61)), Some("false")),
        ("429 in 1 h", rpm(Some(3600)), Some("false")),
        ("429 unknown", rpm(None), Some("false")),
        (
            "amount cap 42906",
            Rejection::new(GatewayCode::SubscriptionQuota, LayerKind::AnchoredWindow),
            Some("false"),
        ),
        (
            "balance 402",
            Rejection::new(GatewayCode::InsufficientBalance, LayerKind::BillingGate),
            Some("false"),
        ),
        (
            "spend cap 402",
            Rejection::new(GatewayCode::SpendCapReached, LayerKind::BillingGate),
            Some("false"),
        ),
        (
            "client error 400",
            Rejection::new(GatewayCode::InvalidRequest, LayerKind::Request),
            Some("false"),
        ),
        (
            "store 503",
            Rejection::new(GatewayCode::StoreUnavailable, LayerKind::AnchoredWindow),
            None,
        ),
    ];
    for (what, r, want) in cases {
        let (parts, _) = through(r, req("/v1/chat/completions")).await;
        assert_eq!(hdr(&parts.headers, "x-should-retry"), want, "{what}");
    }
    // Retry-After still tells the long wait even when the SDK must not retry.
    let (parts, _) = through(rpm(Some(3600)), req("/v1/messages")).await;
    assert_eq!(hdr(&parts.headers, "retry-after"), Some("3600"));
}

// ---------------------------------------------------------------- E3

/// An inner service that records the request ids it saw and answers 200 or an error.
#[derive(Clone, Default)]
struct Recorder {
    seen: Arc<Mutex<Vec<Option<String>>>>,
}

impl Service<Request<Body>> for Recorder {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let id = hdr(req.headers(), "x-request-id").map(str::to_owned);
        self.seen.lock().unwrap().push(id);
        let fail = req.uri().path() == "/fail";
        Box::pin(async move {
            if fail {
                Err(Rejection::new(GatewayCode::RpmLimit, LayerKind::AnchoredWindow).into())
            } else {
                Ok(Response::builder()
                    .header("x-app", "kept")
                    .body(Body::from("hello"))
                    .unwrap())
            }
        })
    }
}

#[tokio::test]
async fn e3_request_id_on_every_response_and_propagated() {
    let rec = Recorder::default();
    let svc = ErrorMappingLayer::new().layer(rec.clone());
    let last_seen = || rec.seen.lock().unwrap().last().cloned().flatten();

    // The client's id: seen by the app, echoed on success and on rejection.
    let (parts, body) = split(svc.clone().oneshot(req_with_id("/ok", "client-42")).await).await;
    assert_eq!(last_seen().as_deref(), Some("client-42"));
    assert_eq!(hdr(&parts.headers, "x-request-id"), Some("client-42"));
    // Success passes through untouched otherwise.
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(hdr(&parts.headers, "x-app"), Some("kept"));
    assert_eq!(&body[..], b"hello");

    let (parts, _) = split(svc.clone().oneshot(req_with_id("/fail", "client-43")).await).await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(hdr(&parts.headers, "x-request-id"), Some("client-43"));

    // No id: one is generated, inserted before the app runs, and the same one returned.
    let mut ids = Vec::new();
    for path in ["/ok", "/fail", "/ok"] {
        let (parts, _) = split(svc.clone().oneshot(req(path)).await).await;
        let id = hdr(&parts.headers, "x-request-id")
            .expect("generated id")
            .to_owned();
        assert!(!id.is_empty());
        assert_eq!(last_seen().as_deref(), Some(id.as_str()), "{path}");
        ids.push(id);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "generated ids are unique");

    // An id set by an outer layer (as tower-http's SetRequestIdLayer does) is the one
    // used throughout.
    let stack = ServiceBuilder::new()
        .map_request(|mut r: Request<Body>| {
            r.headers_mut()
                .insert("x-request-id", "outer-7".parse().unwrap());
            r
        })
        .layer(ErrorMappingLayer::new())
        .service(rec.clone());
    let (parts, _) = split(stack.oneshot(req("/fail")).await).await;
    assert_eq!(hdr(&parts.headers, "x-request-id"), Some("outer-7"));
    assert_eq!(last_seen().as_deref(), Some("outer-7"));

    // An id the app set on its own response is kept (as tower-http's
    // PropagateRequestId does).
    let app = service_fn(|_req: Request<Body>| async {
        Ok::<_, BoxError>(
            Response::builder()
                .header("x-request-id", "from-app")
                .body(Body::default())
                .unwrap(),
        )
    });
    let (parts, _) = split(ErrorMappingLayer::new().layer(app).oneshot(req("/")).await).await;
    assert_eq!(hdr(&parts.headers, "x-request-id"), Some("from-app"));
}

#[tokio::test]
async fn e3_500_hides_internals() {
    let secret = || -> BoxError {
        Box::new(std::io::Error::other(
            "upstream auth failed for key sk-live-SECRET at redis://admin:pw@10.0.0.3",
        ))
    };
    for (path, dialect) in [
        ("/usage", Dialect::Native),
        ("/v1/chat/completions", Dialect::OpenAi),
        ("/v1/messages", Dialect::Anthropic),
        ("/v1beta/models/g:generateContent", Dialect::Gemini),
    ] {
        let svc = ErrorMappingLayer::new().layer(failing(secret));
        let (parts, body) = split(svc.oneshot(req_with_id(path, "rid-500")).await).await;
        assert_eq!(
            parts.status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{dialect:?}"
        );
        let text = std::str::from_utf8(&body).unwrap();
        assert!(!text.contains("sk-live-SECRET"), "{dialect:?}: {text}");
        assert!(!text.contains("redis://"), "{dialect:?}: {text}");
        for (name, v) in &parts.headers {
            assert!(
                !v.as_bytes().windows(6).any(|w| w == b"SECRET"),
                "{dialect:?}: header {name}"
            );
        }
        assert_eq!(hdr(&parts.headers, "x-request-id"), Some("rid-500"));

        let want = "unexpected gateway error (request id rid-500)";
        let v = json_of(&body);
        let msg = match dialect {
            Dialect::Native => &v["message"],
            Dialect::Anthropic => &v["error"]["message"],
            _ => &v["error"]["message"],
        };
        assert_eq!(msg, want, "{dialect:?}");
        match dialect {
            Dialect::Native => assert_eq!(
                v,
                json!({"code": 50001, "message": want,
                       "error": {"type": "gateway_error", "code": "50001"}})
            ),
            Dialect::OpenAi => assert_eq!(
                v,
                json!({"error": {"message": want, "type": "server_error",
                                 "code": "50001", "param": null}})
            ),
            Dialect::Anthropic => assert_eq!(
                v,
                json!({"type": "error", "error": {"type": "api_error", "message": want}})
            ),
            Dialect::Gemini => assert_eq!(
                v,
                json!({"error": {"code": 500, "message": want, "status": "INTERNAL"}})
            ),
        }
    }

    // With a generated id, the message names that id.
    let svc = ErrorMappingLayer::new().layer(failing(secret));
    let (parts, body) = split(svc.oneshot(req("/usage")).await).await;
    let id = hdr(&parts.headers, "x-request-id").unwrap();
    assert_eq!(
        json_of(&body)["message"],
        format!("unexpected gateway error (request id {id})")
    );

    // The pure renderer agrees.
    let res = render_internal("abc", Dialect::Native);
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(hdr(res.headers(), "x-request-id"), Some("abc"));
    assert_eq!(hdr(res.headers(), "content-type"), Some("application/json"));
}

// ---------------------------------------------------------------- L1, L2

fn assert_infallible<S, R>(_: &S)
where
    S: Service<R, Error = Infallible>,
{
}

fn assert_axum_ready<S, R>(_: &S)
where
    S: Service<R> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
}

#[test]
fn l2_stack_is_infallible() {
    // Whatever the inner error type, with ErrorMappingLayer outermost the error type is
    // Infallible and the service is what axum's Router::layer needs.
    let inner = service_fn(|_req: Request<Body>| async {
        Err::<Response<Body>, std::io::Error>(std::io::Error::other("x"))
    });
    let stack = ServiceBuilder::new()
        .layer(ErrorMappingLayer::new())
        .service(inner);
    assert_infallible::<_, Request<Body>>(&stack);
    assert_axum_ready::<_, Request<Body>>(&stack);

    let boxed = ServiceBuilder::new()
        .layer(ErrorMappingLayer::new().dialect(Dialect::OpenAi))
        .service(failing(rejecting(Rejection::new(
            GatewayCode::RpmLimit,
            LayerKind::AnchoredWindow,
        ))));
    assert_infallible::<_, Request<Body>>(&boxed);
    assert_axum_ready::<_, Request<Body>>(&boxed);

    // get_ref / get_mut / into_inner reach the inner service.
    let mut svc: ErrorMapping<Recorder> = ErrorMappingLayer::new().layer(Recorder::default());
    let _: &Recorder = svc.get_ref();
    let _: &mut Recorder = svc.get_mut();
    let _: Recorder = svc.into_inner();
}

type MockSvc = tower_test::mock::Mock<Request<Body>, Response<Body>>;

#[tokio::test]
async fn l1_poll_ready_delegates_and_pending_passes_through() {
    let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let mut svc = tower_test::mock::Spawn::new(ErrorMappingLayer::new().layer(mock));

    handle.allow(0);
    assert!(
        svc.poll_ready::<Request<Body>>().is_pending(),
        "inner back-pressure reaches the caller"
    );
    handle.allow(1);
    assert!(svc.is_woken());
    assert!(matches!(
        svc.poll_ready::<Request<Body>>(),
        Poll::Ready(Ok(()))
    ));

    let fut = svc.call(req_with_id("/v1/messages", "m-1"));
    let (got, send) = handle.next_request().await.unwrap();
    assert_eq!(hdr(got.headers(), "x-request-id"), Some("m-1"));
    send.send_response(Response::new(Body::from("ok")));
    let (parts, body) = split(fut.await).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(&body[..], b"ok");
    assert_eq!(hdr(&parts.headers, "x-request-id"), Some("m-1"));
}

#[tokio::test]
async fn l1_failed_poll_ready_is_rendered_in_call_and_sticky() {
    let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let mut svc: tower_test::mock::Spawn<ErrorMapping<MockSvc>> =
        tower_test::mock::Spawn::new(ErrorMappingLayer::new().layer(mock));

    handle.send_error(
        Rejection::new(GatewayCode::StoreUnavailable, LayerKind::ConcurrencySlot)
            .with_retry_after(Some(Duration::from_millis(300))),
    );
    // The failure does not escape poll_ready …
    assert!(matches!(
        svc.poll_ready::<Request<Body>>(),
        Poll::Ready(Ok(()))
    ));
    // … it is the response of the next call, which never reaches the failed inner.
    let fut = svc.call(req_with_id("/v1/messages", "p-1"));
    assert!(
        handle.poll_request().is_pending(),
        "inner was called although not ready"
    );
    let (parts, body) = split(fut.await).await;
    assert_eq!(parts.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(hdr(&parts.headers, "retry-after"), Some("1"));
    assert_eq!(hdr(&parts.headers, "x-request-id"), Some("p-1"));
    assert_eq!(json_of(&body)["error"]["type"], "api_error");

    // Sticky: tower says a failed service must be discarded; this instance keeps
    // answering with the error and never polls the failed inner again.
    handle.allow(1);
    assert!(matches!(
        svc.poll_ready::<Request<Body>>(),
        Poll::Ready(Ok(()))
    ));
    let fut = svc.call(req("/"));
    assert!(
        handle.poll_request().is_pending(),
        "the failed inner was polled and called again"
    );
    let (parts, _) = split(fut.await).await;
    assert_eq!(parts.status, StatusCode::SERVICE_UNAVAILABLE);

    // A clone starts fresh and asks its own inner clone.
    let mut fresh = tower_test::mock::Spawn::new(svc.get_ref().clone());
    assert!(matches!(
        fresh.poll_ready::<Request<Body>>(),
        Poll::Ready(Ok(()))
    ));
    let fut = fresh.call(req("/"));
    let (_, send) = handle.next_request().await.unwrap();
    send.send_response(Response::new(Body::default()));
    let (parts, _) = split(fut.await).await;
    assert_eq!(parts.status, StatusCode::OK);
}

#[tokio::test]
async fn l1_failed_poll_ready_that_is_not_a_rejection_is_a_500() {
    let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let mut svc = tower_test::mock::Spawn::new(ErrorMappingLayer::new().layer(mock));
    handle.send_error(std::io::Error::other("pool for sk-live-SECRET exhausted"));
    assert!(matches!(
        svc.poll_ready::<Request<Body>>(),
        Poll::Ready(Ok(()))
    ));
    let (parts, body) = split(svc.call(req_with_id("/", "p-2")).await).await;
    assert_eq!(parts.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        json_of(&body)["message"],
        "unexpected gateway error (request id p-2)"
    );
    assert!(!std::str::from_utf8(&body).unwrap().contains("SECRET"));
}

/// A service whose poll_ready fails with a rejection.
#[derive(Clone)]
struct NotReady;

impl Service<Request<Body>> for NotReady {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = std::future::Ready<Result<Response<Body>, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Err(Rejection::new(
            GatewayCode::StoreUnavailable,
            LayerKind::AnchoredWindow,
        )
        .into()))
    }

    fn call(&mut self, _: Request<Body>) -> Self::Future {
        unreachable!("never ready")
    }
}

#[tokio::test]
async fn l1_rejection_found_through_buffer_service_error() {
    // tower::buffer wraps a failed poll_ready in its ServiceError; the rejection is
    // still found through the source chain.
    let svc = ServiceBuilder::new()
        .layer(ErrorMappingLayer::new())
        .buffer(4)
        .service(NotReady);
    let (parts, body) = split(svc.oneshot(req("/v1/chat/completions")).await).await;
    assert_eq!(parts.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(json_of(&body)["error"]["code"], "50301");

    // A rejection returned by a call behind the buffer passes as it is.
    let svc = ServiceBuilder::new()
        .layer(ErrorMappingLayer::new())
        .buffer(4)
        .service(failing(rejecting(Rejection::new(
            GatewayCode::ConcurrencyLimit,
            LayerKind::ConcurrencySlot,
        ))));
    let (parts, body) = split(svc.oneshot(req("/v1/messages")).await).await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(json_of(&body)["error"]["type"], "rate_limit_error");
}
