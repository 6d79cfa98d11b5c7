//! Helpers for the black-box tests that go through a real TCP socket on 127.0.0.1.
//!
//! - [`TestApp`]: an axum app with the portcullis stack mounted by `Router::layer`
//!   (ErrorMappingLayer → [`Keys`] auth → ConcurrencySlotLayer → AnchoredWindowLayer),
//!   one shared [`MemoryStore`] on a [`ManualClock`], served on `127.0.0.1:0`.
//! - [`Conn`]: one HTTP/1.1 client connection (hyper), so a test decides when a
//!   connection is dropped; [`fetch`] for one-shot requests read to the end.
//! - [`Feeds`] / [`Feed`]: the `/stream` handler answers with `Body::from_stream` fed
//!   by a channel the test holds, one [`Feed`] per request.
//!
//! Every wait is bounded by [`WAIT`] (or the caller's bound); nothing blocks forever.
#![deny(unreachable_pub)]

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::header::{AUTHORIZATION, HOST};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{MethodRouter, get};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use portcullis::core::{
    Demand, GatewayCode, LayerKind, LimitView, ManualClock, MemoryStore, Policy, Rejection, Scope,
    Subject, SubjectKey,
};
use portcullis::{AnchoredWindowLayer, ConcurrencySlotLayer, ErrorMappingLayer};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::timeout;
use tower::ServiceBuilder;
use tower::filter::FilterLayer;

pub mod cluster;
pub mod example;
pub mod redis;

/// The longest any single step of a test may take.
pub const WAIT: Duration = Duration::from_secs(5);

/// The start of the manual clock the tests' stores run on (well away from 0).
pub const START_MS: u64 = 1_000_000_000;

/// Header the test auth step reads a token demand estimate from.
pub const DEMAND_TOKENS: &str = "x-demand-tokens";

/// Awaits `fut` for at most `within`, panicking with `what` if it takes longer.
pub async fn bounded<F: Future>(within: Duration, what: &str, fut: F) -> F::Output {
    match timeout(within, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {within:?}: {what}"),
    }
}

/// Polls `cond` every 10 ms until it holds or `within` has passed (a bounded number
/// of polls). Returns whether it held.
pub async fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let step = Duration::from_millis(10);
    let polls = (within.as_millis() / step.as_millis()).max(1);
    for _ in 0..polls {
        if cond() {
            return true;
        }
        tokio::time::sleep(step).await;
    }
    cond()
}

// ------------------------------------------------------------------ server

/// An app served on 127.0.0.1; the server task is aborted on drop.
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `app` on `127.0.0.1:0` and returns its address.
pub async fn serve(app: Router) -> TestServer {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.expect("axum::serve");
    });
    TestServer { addr, task }
}

// ------------------------------------------------------------------ auth

/// The test's API keys: `Authorization: Bearer <key>` → a [`Subject`] with that key's
/// policy, inserted into the request extensions, plus a [`Demand`] of
/// `x-demand-tokens` tokens when that header is set. A missing or unknown key is
/// refused with a 40101 [`Rejection`], which the ErrorMappingLayer renders.
#[derive(Clone, Default)]
pub struct Keys(Arc<HashMap<String, Arc<Policy>>>);

impl Keys {
    /// Keys with their policies.
    pub fn new<'a>(keys: impl IntoIterator<Item = (&'a str, Policy)>) -> Self {
        Self(Arc::new(
            keys.into_iter()
                .map(|(k, p)| (k.to_owned(), Arc::new(p)))
                .collect(),
        ))
    }

    /// The policy of `key`.
    pub fn policy(&self, key: &str) -> Arc<Policy> {
        self.0
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("no key {key}"))
    }

    /// The authentication step, as a `tower::filter` predicate.
    pub fn authenticate(&self, mut req: Request) -> Result<Request, Rejection> {
        let unauthenticated = || Rejection::new(GatewayCode::Unauthenticated, LayerKind::Identity);
        let key = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(unauthenticated)?;
        let policy = self.0.get(key).ok_or_else(unauthenticated)?.clone();
        let subject = Subject::new(key).with_policy(policy);
        let tokens = req
            .headers()
            .get(DEMAND_TOKENS)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        req.extensions_mut().insert(subject);
        if let Some(tokens) = tokens {
            req.extensions_mut().insert(Demand::tokens(tokens));
        }
        Ok(req)
    }
}

/// Mounts the whole stack on `router` with `Router::layer`, sharing one `store`:
/// ErrorMappingLayer (outermost) → auth → ConcurrencySlotLayer → AnchoredWindowLayer.
pub fn with_gateway(router: Router, store: MemoryStore<ManualClock>, keys: Keys) -> Router {
    router.layer(
        ServiceBuilder::new()
            .layer(ErrorMappingLayer::new())
            .layer(FilterLayer::new(move |req| keys.authenticate(req)))
            .layer(ConcurrencySlotLayer::new(store.clone()))
            .layer(AnchoredWindowLayer::new(store)),
    )
}

// ------------------------------------------------------------------ handlers

/// A handler that answers `{"path": …, "request_id": …}`: the request id is the one
/// the handler saw in the request headers.
pub async fn echo(req: Request) -> axum::Json<Value> {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    axum::Json(json!({ "path": req.uri().path(), "request_id": id }))
}

/// One streamed response body, fed by the test.
pub struct Feed {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
}

impl Feed {
    /// Sends one chunk of the body (bounded; panics if the body is gone).
    pub async fn send(&self, chunk: &'static str) {
        bounded(
            WAIT,
            "send a chunk",
            self.tx.send(Ok(Bytes::from_static(chunk.as_bytes()))),
        )
        .await
        .expect("the response body was dropped");
    }

    /// Ends the body with an error.
    pub async fn fail(self) {
        let err = std::io::Error::other("upstream cut the stream");
        bounded(WAIT, "send an error", self.tx.send(Err(err)))
            .await
            .expect("the response body was dropped");
    }

    /// Ends the body (end of stream once the queued chunks are read).
    pub fn finish(self) {}

    /// Whether the server dropped the body within `within`.
    pub async fn dropped_within(&self, within: Duration) -> bool {
        timeout(within, self.tx.closed()).await.is_ok()
    }
}

/// The test's end of the `/stream` handler: one [`Feed`] per request it received.
pub struct Feeds(mpsc::UnboundedReceiver<Feed>);

impl Feeds {
    /// The feed of the next request that reached the handler (bounded).
    pub async fn next(&mut self) -> Feed {
        bounded(WAIT, "a request to reach the stream handler", self.0.recv())
            .await
            .expect("the stream route is gone")
    }
}

/// A `GET` route whose response body is `Body::from_stream` over a channel; the sending
/// end of each request's channel is handed to the test through [`Feeds`].
pub fn streaming() -> (MethodRouter, Feeds) {
    let (feeds_tx, feeds_rx) = mpsc::unbounded_channel();
    let route = get(move || {
        let feeds_tx = feeds_tx.clone();
        async move {
            let (tx, mut rx) = mpsc::channel(16);
            let _ = feeds_tx.send(Feed { tx });
            Body::from_stream(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)))
        }
    });
    (route, Feeds(feeds_rx))
}

// ------------------------------------------------------------------ the app

/// The stack under test, served: routes `/a`, `/b` and `/v1/chat/completions` (echo)
/// and `/stream` (streamed), all behind one `Router::layer`.
pub struct TestApp {
    /// The one store every layer and every route shares.
    pub store: MemoryStore<ManualClock>,
    /// The store's clock.
    pub clock: ManualClock,
    /// The keys and their policies.
    pub keys: Keys,
    /// The `/stream` handler's feeds.
    pub feeds: Feeds,
    /// The server.
    pub server: TestServer,
}

impl TestApp {
    /// Starts the app with these keys.
    pub async fn start<'a>(keys: impl IntoIterator<Item = (&'a str, Policy)>) -> Self {
        let keys = Keys::new(keys);
        let clock = ManualClock::new(START_MS);
        let store = MemoryStore::with_clock(clock.clone());
        let (stream_route, feeds) = streaming();
        let router = Router::new()
            .route("/a", get(echo))
            .route("/b", get(echo).post(echo))
            .route("/v1/chat/completions", get(echo).post(echo))
            .route("/stream", stream_route);
        let app = with_gateway(router, store.clone(), keys.clone());
        let server = serve(app).await;
        Self {
            store,
            clock,
            keys,
            feeds,
            server,
        }
    }

    /// The address served.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    /// Slots `key` holds now.
    pub fn in_flight(&self, key: &str) -> u32 {
        self.store.in_flight_now(&SubjectKey::from(key))
    }

    /// The window counters of `key` (its own policy's scope).
    pub fn view(&self, key: &str) -> Vec<LimitView> {
        let policy = self.keys.policy(key);
        self.store
            .view_now(&SubjectKey::from(key), Scope::Key, &policy)
    }

    /// `GET path` with `key`, read to the end on a new connection.
    pub async fn get(&self, path: &str, key: &str) -> Reply {
        fetch(self.addr(), request(path).bearer(key).build()).await
    }

    /// `GET path` with `key` and a token demand of `tokens`.
    pub async fn get_tokens(&self, path: &str, key: &str, tokens: u64) -> Reply {
        fetch(
            self.addr(),
            request(path).bearer(key).tokens(tokens).build(),
        )
        .await
    }
}

/// The `used` of the view line for `dimension` with window `window_ms`.
pub fn used(view: &[LimitView], dimension: portcullis::core::Dimension, window_ms: u64) -> u64 {
    view.iter()
        .find(|l| l.dimension == dimension && l.tier.window_ms == window_ms)
        .unwrap_or_else(|| panic!("no {dimension:?} tier of {window_ms} ms in {view:?}"))
        .used
}

// ------------------------------------------------------------------ client

/// A request under construction (`GET`, with a `Host` header).
pub struct RequestBuilder(axum::http::request::Builder);

/// Starts a `GET path` request.
pub fn request(path: &str) -> RequestBuilder {
    RequestBuilder(hyper::Request::get(path).header(HOST, "127.0.0.1"))
}

impl RequestBuilder {
    /// `Authorization: Bearer key`.
    pub fn bearer(self, key: &str) -> Self {
        self.header("authorization", &format!("Bearer {key}"))
    }
    /// A token demand estimate (read by the test auth step).
    pub fn tokens(self, tokens: u64) -> Self {
        self.header(DEMAND_TOKENS, &tokens.to_string())
    }
    /// Any header.
    pub fn header(self, name: &str, value: &str) -> Self {
        Self(self.0.header(name, value))
    }
    /// Uses `method` instead of `GET`.
    pub fn method(self, method: hyper::Method) -> Self {
        Self(self.0.method(method))
    }
    /// The request, with an empty body.
    pub fn build(self) -> hyper::Request<Full<Bytes>> {
        self.0.body(Full::default()).expect("valid request")
    }
}

/// One HTTP/1.1 client connection. Dropping it closes the socket (the connection task
/// is aborted), which is how a test simulates a client that goes away.
pub struct Conn {
    sender: SendRequest<Full<Bytes>>,
    task: JoinHandle<()>,
}

impl Conn {
    /// Connects to `addr` (bounded).
    pub async fn open(addr: SocketAddr) -> Self {
        let stream = bounded(WAIT, "connect", TcpStream::connect(addr))
            .await
            .expect("connect to the test server");
        let (sender, conn) = bounded(
            WAIT,
            "handshake",
            hyper::client::conn::http1::handshake(TokioIo::new(stream)),
        )
        .await
        .expect("http1 handshake");
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        Self { sender, task }
    }

    /// Sends `req` and waits for the response head (bounded).
    pub async fn send(&mut self, req: hyper::Request<Full<Bytes>>) -> hyper::Response<Incoming> {
        bounded(WAIT, "connection ready", self.sender.ready())
            .await
            .expect("connection ready");
        bounded(WAIT, "response head", self.sender.send_request(req))
            .await
            .expect("response head")
    }

    /// Closes the connection now.
    pub fn close(self) {}
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A response read to the end.
#[derive(Debug)]
pub struct Reply {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON (panics with the body if it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
    /// The gateway code of a native-dialect error body (`{"code": 42901, …}`).
    pub fn code(&self) -> u64 {
        let json = self.json();
        json["code"]
            .as_u64()
            .unwrap_or_else(|| panic!("no numeric code in {json}"))
    }
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("visible ASCII header"))
    }
}

/// Sends `req` on a new connection and reads the whole response (bounded).
pub async fn fetch(addr: SocketAddr, req: hyper::Request<Full<Bytes>>) -> Reply {
    let mut conn = Conn::open(addr).await;
    let res = conn.send(req).await;
    read_reply(res).await
}

/// Reads `res` to the end (bounded).
pub async fn read_reply(res: hyper::Response<Incoming>) -> Reply {
    let (parts, mut body) = res.into_parts();
    let body = read_to_end(&mut body).await;
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// The next data chunk of `body`, or `None` at its end (bounded; trailers skipped).
pub async fn next_chunk(body: &mut Incoming) -> Option<Bytes> {
    loop {
        let frame = bounded(WAIT, "next body frame", body.frame()).await?;
        let frame = frame.expect("body frame");
        if let Ok(data) = frame.into_data() {
            return Some(data);
        }
    }
}

/// The rest of `body` (bounded).
pub async fn read_to_end(body: &mut Incoming) -> Bytes {
    let collected = bounded(WAIT, "body to end", body.collect())
        .await
        .expect("read the body to its end");
    collected.to_bytes()
}
