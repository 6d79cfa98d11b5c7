//! Black-box tests of the portcullis stack mounted in axum with `Router::layer`, driven
//! through a real TCP socket on 127.0.0.1 (L2, L3, L5, W4, C2, E1–E4).
//!
//! The stack (see `portcullis_tests::with_gateway`): ErrorMappingLayer (outermost) →
//! auth (`Authorization: Bearer`, unknown key → 40101) → ConcurrencySlotLayer →
//! AnchoredWindowLayer → the route's handler, one `MemoryStore` shared by everything.
//! Routes use the native error dialect except `/v1/chat/completions` (OpenAI).

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use portcullis::core::{
    Dimension, ManualClock, MemoryStore, Policy, Scope, SubjectKey, Tier, Usage, UsageRecorder,
};
use portcullis::{AnchoredWindowLayer, ConcurrencySlotLayer, ErrorMappingLayer};
use portcullis_tests::{
    Conn, Keys, Reply, TestApp, echo, fetch, next_chunk, read_reply, read_to_end, request, serve,
    used,
};
use std::collections::HashSet;
use std::convert::Infallible;
use tower::filter::FilterLayer;
use tower::{Service, ServiceBuilder};

const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 3_600_000;

/// A rendered native-dialect rejection: status, exact code, message and headers.
#[track_caller]
fn assert_rejected(reply: &Reply, status: u16, code: u64) {
    assert_eq!(reply.status.as_u16(), status, "reply: {reply:?}");
    assert_eq!(reply.code(), code, "reply: {reply:?}");
    let json = reply.json();
    assert_eq!(json["error"]["type"], "gateway_error");
    assert_eq!(json["error"]["code"], code.to_string());
    assert!(json["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert!(
        reply
            .header("x-request-id")
            .is_some_and(|id| !id.is_empty())
    );
}

#[track_caller]
fn assert_ok(reply: &Reply, path: &str) {
    assert_eq!(reply.status, StatusCode::OK, "reply: {reply:?}");
    assert_eq!(reply.json()["path"], path);
}

/// Opens `GET /stream` for `key` on its own connection and reads the first chunk:
/// from then on the request holds its slot until the body ends.
async fn open_stream(
    app: &mut TestApp,
    key: &str,
    tokens: Option<u64>,
) -> (Conn, hyper::body::Incoming, portcullis_tests::Feed) {
    let mut conn = Conn::open(app.addr()).await;
    let mut req = request("/stream").bearer(key);
    if let Some(t) = tokens {
        req = req.tokens(t);
    }
    let res = conn.send(req.build()).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.headers().contains_key("x-request-id"));
    let feed = app.feeds.next().await;
    feed.send("data: one\n\n").await;
    let mut body = res.into_body();
    assert_eq!(
        next_chunk(&mut body).await.as_deref(),
        Some(&b"data: one\n\n"[..])
    );
    (conn, body, feed)
}

// ------------------------------------------------------------------ (a) L2, rule 2

/// The stack with ErrorMappingLayer outermost is `Infallible` (checked by the type
/// system below) and mounts with `Router::layer` on several routes; every route
/// answers through it, and a refusal on any route is a rendered response.
#[tokio::test]
async fn l2_error_mapping_outermost_is_infallible_and_mounts_with_router_layer() {
    // Type-level: over an Infallible handler service, the whole stack's error is
    // Infallible (no HandleErrorLayer needed).
    fn assert_infallible<S: Service<Request<Body>, Error = Infallible>>(_: &S) {}
    let store = MemoryStore::with_clock(ManualClock::new(portcullis_tests::START_MS));
    let keys = Keys::new([("k", Policy::default())]);
    let stack = ServiceBuilder::new()
        .layer(ErrorMappingLayer::new())
        .layer(FilterLayer::new(move |req| keys.authenticate(req)))
        .layer(ConcurrencySlotLayer::new(store.clone()))
        .layer(AnchoredWindowLayer::new(store.clone()));
    let handler = tower::service_fn(|_req: Request<Body>| async {
        Ok::<_, Infallible>(axum::http::Response::new(Body::empty()))
    });
    assert_infallible(&stack.service(handler));

    // Mounted with Router::layer on three routes (and several methods).
    let keys = Keys::new([(
        "k",
        Policy::default()
            .with_concurrency(4)
            .with_requests(Tier::per_minute(4)),
    )]);
    let app = Router::new()
        .route("/a", get(echo))
        .route("/b", get(echo).post(echo))
        .route("/v1/chat/completions", get(echo).post(echo))
        .layer(
            ServiceBuilder::new()
                .layer(ErrorMappingLayer::new())
                .layer(FilterLayer::new(move |req| keys.authenticate(req)))
                .layer(ConcurrencySlotLayer::new(store.clone()))
                .layer(AnchoredWindowLayer::new(store)),
        );
    let server = serve(app).await;

    let a = fetch(server.addr, request("/a").bearer("k").build()).await;
    assert_ok(&a, "/a");
    let b = fetch(
        server.addr,
        request("/b")
            .bearer("k")
            .method(hyper::Method::POST)
            .build(),
    )
    .await;
    assert_ok(&b, "/b");
    let c = fetch(
        server.addr,
        request("/v1/chat/completions").bearer("k").build(),
    )
    .await;
    assert_ok(&c, "/v1/chat/completions");
    let d = fetch(server.addr, request("/b").bearer("k").build()).await;
    assert_ok(&d, "/b");

    // The fifth request (requests/min = 4) is refused and rendered, in the dialect of
    // its route: OpenAI on /v1/chat/completions, native elsewhere.
    let openai = fetch(
        server.addr,
        request("/v1/chat/completions").bearer("k").build(),
    )
    .await;
    assert_eq!(openai.status.as_u16(), 429, "{openai:?}");
    let json = openai.json();
    assert_eq!(json["error"]["type"], "rate_limit_exceeded");
    assert_eq!(json["error"]["code"], "42902");
    assert_eq!(json["error"]["param"], serde_json::Value::Null);
    assert_eq!(openai.header("x-ratelimit-limit-requests"), Some("4"));
    assert_eq!(openai.header("x-ratelimit-remaining-requests"), Some("0"));
    // The store's clock stands still: the minute window resets 60 s from now.
    assert_eq!(openai.header("retry-after"), Some("60"));
    assert_eq!(openai.header("x-should-retry"), None);

    let native = fetch(server.addr, request("/a").bearer("k").build()).await;
    assert_rejected(&native, 429, 42902);
}

/// `layer()` runs once per route in axum; the limit state lives in the one store the
/// layers were built with, so a concurrency limit of 1 and a requests-per-minute limit
/// of 3 hold across routes: what route A uses up, route B does not get (rule 2,
/// axum#2582).
#[tokio::test]
async fn one_limiter_is_shared_by_all_routes() {
    let mut app = TestApp::start([
        ("conc", Policy::default().with_concurrency(1)),
        ("rpm", Policy::default().with_requests(Tier::per_minute(3))),
    ])
    .await;

    // Concurrency 1: a stream open on /stream holds the key's only slot for /a and /b.
    let (conn, mut body, feed) = open_stream(&mut app, "conc", None).await;
    assert_eq!(app.in_flight("conc"), 1);
    assert_rejected(&app.get("/a", "conc").await, 429, 42901);
    assert_rejected(&app.get("/b", "conc").await, 429, 42901);
    assert_rejected(&app.get("/stream", "conc").await, 429, 42901);
    feed.finish();
    assert_eq!(read_to_end(&mut body).await, "");
    drop(conn);
    assert_eq!(app.in_flight("conc"), 0);
    assert_ok(&app.get("/b", "conc").await, "/b");

    // Requests per minute 3: /a, /b, /a use the quota; /b and /a are refused.
    assert_ok(&app.get("/a", "rpm").await, "/a");
    assert_ok(&app.get("/b", "rpm").await, "/b");
    assert_ok(&app.get("/a", "rpm").await, "/a");
    let refused = app.get("/b", "rpm").await;
    assert_rejected(&refused, 429, 42902);
    assert_eq!(refused.header("x-ratelimit-limit-requests"), Some("3"));
    assert_rejected(&app.get("/a", "rpm").await, 429, 42902);
    assert_eq!(used(&app.view("rpm"), Dimension::Requests, MINUTE_MS), 3);

    // The other key was never touched by either.
    assert_eq!(app.in_flight("rpm"), 0);
}

// ------------------------------------------------------------------ (b) L3

/// A streamed answer keeps its slot until the last chunk: while the stream is open a
/// second request for the key is refused with 42901; once the last chunk is sent and
/// the client has read to EOF the slot is free at once (no polling needed: the layer
/// releases when it sees the end, before the final chunk is written).
#[tokio::test]
async fn l3_streamed_response_keeps_slot_until_last_chunk() {
    let mut app = TestApp::start([("k", Policy::default().with_concurrency(1))]).await;

    let (conn, mut body, feed) = open_stream(&mut app, "k", None).await;
    assert_eq!(app.in_flight("k"), 1);

    let second = app.get("/a", "k").await;
    assert_rejected(&second, 429, 42901);
    assert_eq!(second.json()["message"], "concurrency limit exceeded");
    assert_eq!(second.header("retry-after"), Some("1"));
    assert_eq!(app.in_flight("k"), 1);

    // More chunks: still held.
    feed.send("data: two\n\n").await;
    assert_eq!(
        next_chunk(&mut body).await.as_deref(),
        Some(&b"data: two\n\n"[..])
    );
    assert_eq!(app.in_flight("k"), 1);
    assert_rejected(&app.get("/stream", "k").await, 429, 42901);

    // The last chunk, then the end of the stream.
    feed.send("data: [DONE]\n\n").await;
    feed.finish();
    assert_eq!(read_to_end(&mut body).await, "data: [DONE]\n\n");
    assert_eq!(app.in_flight("k"), 0);

    // The connection is still open (keep-alive): the slot did not wait for it.
    let mut conn = conn;
    let again = read_reply(conn.send(request("/a").bearer("k").build()).await).await;
    assert_ok(&again, "/a");
    assert_eq!(app.in_flight("k"), 0);
}

/// The client reads the first chunk and goes away: the server drops the response
/// body, which releases the slot within a bounded time; a new request is admitted.
#[tokio::test]
async fn l3_client_disconnect_mid_stream_frees_slot() {
    let mut app = TestApp::start([("k", Policy::default().with_concurrency(1))]).await;

    let (conn, body, feed) = open_stream(&mut app, "k", None).await;
    assert_eq!(app.in_flight("k"), 1);
    drop(body);
    conn.close();

    // The handler's stream is dropped (the sender sees its receiver closed) …
    assert!(
        feed.dropped_within(portcullis_tests::WAIT).await,
        "the server kept the response body of a closed connection"
    );
    // … and with it the slot.
    assert!(
        portcullis_tests::eventually(portcullis_tests::WAIT, || app.in_flight("k") == 0).await,
        "slot still held 5 s after the client left: {}",
        app.in_flight("k")
    );
    assert_ok(&app.get("/a", "k").await, "/a");
    assert_eq!(app.in_flight("k"), 0);
}

/// A stream that ends with an error (an upstream cut) frees its slot too.
#[tokio::test]
async fn l3_stream_error_frees_slot() {
    let mut app = TestApp::start([("k", Policy::default().with_concurrency(1))]).await;

    let (conn, mut body, feed) = open_stream(&mut app, "k", None).await;
    assert_eq!(app.in_flight("k"), 1);
    feed.fail().await;
    // The server aborts the chunked body; the client sees an error or a cut, never a
    // clean end.
    let end = portcullis_tests::bounded(portcullis_tests::WAIT, "body end", async {
        use http_body_util::BodyExt;
        loop {
            match body.frame().await {
                Some(Ok(_)) => continue,
                Some(Err(_)) => return Err(()),
                None => return Ok(()),
            }
        }
    })
    .await;
    assert!(end.is_err(), "a failed stream ended like a complete one");
    drop(conn);
    assert!(
        portcullis_tests::eventually(portcullis_tests::WAIT, || app.in_flight("k") == 0).await,
        "slot still held after the stream failed"
    );
    assert_ok(&app.get("/a", "k").await, "/a");
}

// ------------------------------------------------------------------ (c) L5, W4

/// A request refused by the slot layer (42901) changes no window counter; a request
/// refused by the window layer (42905, 42902) holds no slot afterwards and changes no
/// counter either (LiteLLM#39309).
#[tokio::test]
async fn l5_rejected_request_changes_no_counter() {
    let policy = Policy::default()
        .with_concurrency(1)
        .with_requests(Tier::per_minute(3))
        .with_tokens(Tier::per_minute(1_000));
    let mut app = TestApp::start([("k", policy)]).await;

    // One admitted stream: 1 request, 100 tokens reserved, the only slot held.
    let (conn, mut body, feed) = open_stream(&mut app, "k", Some(100)).await;
    assert_eq!(app.in_flight("k"), 1);
    let before = app.view("k");
    assert_eq!(used(&before, Dimension::Requests, MINUTE_MS), 1);
    assert_eq!(used(&before, Dimension::Tokens, MINUTE_MS), 100);

    // Refused by the slot layer, on several routes: nothing counted.
    for path in ["/a", "/b", "/stream", "/a", "/b"] {
        assert_rejected(&app.get_tokens(path, "k", 100).await, 429, 42901);
    }
    assert_eq!(app.view("k"), before);
    assert_eq!(app.in_flight("k"), 1);

    feed.finish();
    assert_eq!(read_to_end(&mut body).await, "");
    drop(conn);
    assert_eq!(app.in_flight("k"), 0);
    // No usage recorded: the reservation stands as the charge (W5).
    let settled = app.view("k");
    assert_eq!(settled, before);

    // Refused by the window layer for tokens: the slot taken on the way in is given
    // back, and the request counter (which had room) is not bumped (W4).
    let tpm = app.get_tokens("/a", "k", 5_000).await;
    assert_rejected(&tpm, 429, 42905);
    assert_eq!(tpm.json()["message"], "tpm limit exceeded");
    assert_eq!(tpm.header("x-ratelimit-limit-tokens"), Some("1000"));
    assert_eq!(tpm.header("x-ratelimit-remaining-tokens"), Some("0"));
    assert_eq!(app.in_flight("k"), 0);
    assert_eq!(app.view("k"), settled);

    // Use up the requests (2 more), then be refused for requests.
    assert_ok(&app.get_tokens("/a", "k", 10).await, "/a");
    assert_ok(&app.get_tokens("/b", "k", 10).await, "/b");
    let full = app.view("k");
    assert_eq!(used(&full, Dimension::Requests, MINUTE_MS), 3);
    assert_eq!(used(&full, Dimension::Tokens, MINUTE_MS), 120);
    for path in ["/a", "/b", "/stream"] {
        let rpm = app.get_tokens(path, "k", 10).await;
        assert_rejected(&rpm, 429, 42902);
        assert_eq!(app.in_flight("k"), 0);
    }
    assert_eq!(app.view("k"), full);
}

/// All-or-nothing across tiers and dimensions: a request refused by one tier (the
/// hourly request tier, or the token tier) is counted in no other tier (W4).
#[tokio::test]
async fn w4_rejected_by_one_tier_counts_in_none() {
    let policy = Policy::default()
        .with_requests(Tier::per_minute(10))
        .with_requests(Tier::per_hour(3))
        .with_tokens(Tier::per_minute(1_000));
    let app = TestApp::start([("hour", policy.clone()), ("tokens", policy)]).await;

    // The hourly request tier fills first.
    for path in ["/a", "/b", "/a"] {
        assert_ok(&app.get_tokens(path, "hour", 100).await, path);
    }
    let before = app.view("hour");
    assert_eq!(used(&before, Dimension::Requests, MINUTE_MS), 3);
    assert_eq!(used(&before, Dimension::Requests, HOUR_MS), 3);
    assert_eq!(used(&before, Dimension::Tokens, MINUTE_MS), 300);
    for _ in 0..3 {
        let refused = app.get_tokens("/b", "hour", 100).await;
        assert_rejected(&refused, 429, 42902);
        assert_eq!(refused.header("x-ratelimit-limit-requests"), Some("3"));
        // The store's clock stands still: the hour tier resets exactly 3600 s from
        // now, too far for an SDK's automatic retry (E2).
        assert_eq!(refused.header("retry-after"), Some("3600"));
        assert_eq!(refused.header("x-should-retry"), Some("false"));
    }
    // The minute request tier (room: 7) and the token tier (room: 700) are unchanged.
    assert_eq!(app.view("hour"), before);

    // The token tier fills first.
    assert_ok(&app.get_tokens("/a", "tokens", 900).await, "/a");
    let before = app.view("tokens");
    for _ in 0..3 {
        assert_rejected(&app.get_tokens("/a", "tokens", 200).await, 429, 42905);
    }
    let after = app.view("tokens");
    assert_eq!(after, before);
    assert_eq!(used(&after, Dimension::Requests, MINUTE_MS), 1);
    assert_eq!(used(&after, Dimension::Requests, HOUR_MS), 1);
    assert_eq!(used(&after, Dimension::Tokens, MINUTE_MS), 900);
    // A request that fits is still admitted.
    assert_ok(&app.get_tokens("/b", "tokens", 100).await, "/b");
}

/// The handler records the actual usage into the request's `UsageRecorder` (which the
/// layers put there); when the body ends the window settles to it: 100 tokens
/// reserved, 30 used, 30 counted (W5).
#[tokio::test]
async fn w5_usage_recorded_by_the_handler_is_what_the_window_counts() {
    let policy = Policy::default()
        .with_requests(Tier::per_minute(10))
        .with_tokens(Tier::per_minute(1_000));
    let store = MemoryStore::with_clock(ManualClock::new(portcullis_tests::START_MS));
    let router = Router::new().route(
        "/chat",
        get(|req: Request<Body>| async move {
            let recorder = req.extensions().get::<UsageRecorder>().cloned();
            let recorder = recorder.expect("the window layer inserts a UsageRecorder");
            recorder.record(Usage {
                input_tokens: 10,
                output_tokens: 20,
                ..Usage::default()
            });
            "done"
        }),
    );
    let keys = Keys::new([("k", policy.clone())]);
    let server = serve(portcullis_tests::with_gateway(router, store.clone(), keys)).await;

    let reply = fetch(
        server.addr,
        request("/chat").bearer("k").tokens(100).build(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, "done");
    let view = store.view_now(&SubjectKey::from("k"), Scope::Key, &policy);
    assert_eq!(used(&view, Dimension::Requests, MINUTE_MS), 1);
    assert_eq!(used(&view, Dimension::Tokens, MINUTE_MS), 30);
}

// ------------------------------------------------------------------ (d) E3, E4

/// Every response through the socket carries `x-request-id`: handler answers (with
/// the id the handler saw), a client-supplied id echoed, 429s, 401s and 404s; the
/// generated ids are distinct.
#[tokio::test]
async fn e3_request_id_on_every_response() {
    let app = TestApp::start([
        ("k", Policy::default().with_requests(Tier::per_minute(2))),
        ("free", Policy::default()),
    ])
    .await;
    let mut ids = Vec::new();

    // A handler's answer: the id is the one inserted into the request.
    let ok = app.get("/a", "k").await;
    assert_ok(&ok, "/a");
    let id = ok.header("x-request-id").expect("x-request-id").to_owned();
    assert_eq!(ok.json()["request_id"], id.as_str());
    ids.push(id);

    // A client's own id is kept, end to end.
    let own = fetch(
        app.addr(),
        request("/b")
            .bearer("k")
            .header("x-request-id", "client-id-1")
            .build(),
    )
    .await;
    assert_ok(&own, "/b");
    assert_eq!(own.header("x-request-id"), Some("client-id-1"));
    assert_eq!(own.json()["request_id"], "client-id-1");

    // A refusal by the window layer.
    let limited = app.get("/a", "k").await;
    assert_rejected(&limited, 429, 42902);
    ids.push(limited.header("x-request-id").unwrap().to_owned());
    let limited_own = fetch(
        app.addr(),
        request("/a")
            .bearer("k")
            .header("x-request-id", "client-id-2")
            .build(),
    )
    .await;
    assert_rejected(&limited_own, 429, 42902);
    assert_eq!(limited_own.header("x-request-id"), Some("client-id-2"));

    // A refusal by the auth step.
    let unauth = fetch(app.addr(), request("/a").build()).await;
    assert_rejected(&unauth, 401, 40101);
    ids.push(unauth.header("x-request-id").unwrap().to_owned());

    // An unknown route: axum's fallback answers inside the layered router (so it is
    // authenticated and counted like any route; "free" has no limits).
    let missing = app.get("/nope", "free").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{missing:?}");
    ids.push(
        missing
            .header("x-request-id")
            .expect("x-request-id on the fallback's 404")
            .to_owned(),
    );

    let distinct: HashSet<_> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "request ids repeat: {ids:?}");
}

/// A request with no key, an unknown key or a malformed `Authorization` is answered
/// 401 with a rendered body (40101) in the route's dialect — never a panic, never a
/// dropped connection — and consumes nothing.
#[tokio::test]
async fn e4_missing_or_unknown_key_is_401_rendered() {
    let app = TestApp::start([(
        "k",
        Policy::default()
            .with_concurrency(1)
            .with_requests(Tier::per_minute(1)),
    )])
    .await;

    let cases = [
        request("/a").build(),
        request("/a").bearer("sk-unknown").build(),
        request("/a").header("authorization", "Basic azpr").build(),
        request("/a").header("authorization", "Bearer ").build(),
        request("/stream").bearer("sk-unknown").build(),
    ];
    for req in cases {
        let reply = fetch(app.addr(), req).await;
        assert_rejected(&reply, 401, 40101);
        assert_eq!(reply.json()["message"], "Missing or invalid API key.");
        assert_eq!(reply.header("retry-after"), None);
        assert_eq!(reply.header("x-ratelimit-limit-requests"), None);
    }

    // OpenAI dialect on its route.
    let openai = fetch(
        app.addr(),
        request("/v1/chat/completions").bearer("sk-nope").build(),
    )
    .await;
    assert_eq!(openai.status.as_u16(), 401, "{openai:?}");
    let json = openai.json();
    assert_eq!(json["error"]["type"], "authentication_error");
    assert_eq!(json["error"]["code"], "40101");
    assert!(openai.header("x-request-id").is_some());

    // The server is unharmed and the real key's quota untouched.
    assert_eq!(app.in_flight("k"), 0);
    assert_eq!(used(&app.view("k"), Dimension::Requests, MINUTE_MS), 0);
    assert_ok(&app.get("/a", "k").await, "/a");
}
