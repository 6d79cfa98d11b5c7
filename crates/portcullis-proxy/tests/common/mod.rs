//! Helpers for the proxy's black-box tests: a real client on a real socket → the
//! proxy (`Gateway::router()` served by `axum::serve` on `127.0.0.1:0`) → the bundled
//! [`FakeUpstream`].
//!
//! - [`Proxy::start`]: a fake upstream and a gateway on a TOML text written by the test;
//! - [`Req`] / [`Dialect`] / [`KeyAt`]: requests as each SDK sends them;
//! - [`send`]: one request read to the end; [`open`]: one request whose body the test
//!   reads frame by frame, or drops mid-stream ([`Open::disconnect`]);
//! - [`rejection`]: checks an error body's dialect shape and returns its message;
//! - [`usage`] / [`used`] / [`in_flight`]: `GET /usage`, the gateway's own view.
//!
//! One HTTP/1.1 connection per request (hyper's low-level client), so a test decides
//! exactly when a connection goes away. Every wait is bounded by [`WAIT`] or by the
//! caller's bound; every loop by a count.
#![allow(dead_code)] // each test binary uses a different subset

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{HeaderMap, Method, StatusCode};
use hyper_util::rt::TokioIo;
use portcullis::core::MemoryStore;
use portcullis_fake_upstream::FakeUpstream;
use portcullis_proxy::{Config, Gateway};
use serde_json::{Value, json};
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The longest any single step of a test may take.
pub const WAIT: Duration = Duration::from_secs(5);

/// Channel credentials of [`CHANNELS`]: what the fake upstream must see, and only that.
pub const CRED_OPENAI: &str = "sk-upstream-openai-e2e";
/// See [`CRED_OPENAI`].
pub const CRED_ANTHROPIC: &str = "sk-upstream-anthropic-e2e";
/// See [`CRED_OPENAI`].
pub const CRED_GEMINI: &str = "upstream-gemini-e2e";

/// One channel per vendor on the fake upstream, the three models they serve, and
/// `orphan-model`, which has a price but no channel (50201). Tests append it to their
/// own policies and keys.
pub const CHANNELS: &str = r#"
[channels.openai-a]
vendor = "openai"
base_url = "fake://"
credential = "sk-upstream-openai-e2e"
models = ["gpt-4o-mini"]

[channels.anthropic-a]
vendor = "anthropic"
base_url = "fake://"
credential = "sk-upstream-anthropic-e2e"
models = ["claude-sonnet-4-5"]

[channels.gemini-a]
vendor = "gemini"
base_url = "fake://"
credential = "upstream-gemini-e2e"
models = ["gemini-2.5-flash"]

[models.gpt-4o-mini]
price = { input_per_mtok = 150_000, cached_input_per_mtok = 75_000, output_per_mtok = 600_000 }
max_output_tokens = 256

[models.claude-sonnet-4-5]
price = { input_per_mtok = 3_000_000, cached_input_per_mtok = 300_000, cache_write_per_mtok = 3_750_000, output_per_mtok = 15_000_000 }
max_output_tokens = 256

[models."gemini-2.5-flash"]
price = { input_per_mtok = 300_000, cached_input_per_mtok = 75_000, output_per_mtok = 2_500_000 }
max_output_tokens = 256

[models.orphan-model]
price = { input_per_mtok = 1, output_per_mtok = 1 }
"#;

/// Awaits `fut` for at most `within`, panicking with `what` if it takes longer.
pub async fn bounded<F: Future>(within: Duration, what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(within, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {within:?}: {what}"),
    }
}

/// Polls `cond` every 10 ms until it holds or `within` has passed (a bounded number of
/// polls). Returns whether it held.
pub async fn eventually<F, Fut>(within: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let step = Duration::from_millis(10);
    let polls = (within.as_millis() / step.as_millis()).max(1);
    for _ in 0..polls {
        if cond().await {
            return true;
        }
        tokio::time::sleep(step).await;
    }
    cond().await
}

// ------------------------------------------------------------------ the system

/// A fake upstream and a gateway in front of it; the server task is aborted on drop.
pub struct Proxy {
    /// Where the gateway listens.
    pub addr: SocketAddr,
    /// The upstream every `fake://` channel points at.
    pub fake: FakeUpstream,
    /// The gateway's store (shared with the gateway).
    pub store: MemoryStore,
    server: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Proxy {
    /// Starts a fake upstream and a gateway on `toml` (+ [`CHANNELS`] when the text
    /// has no `[channels.` of its own), serving on `127.0.0.1:0`.
    pub async fn start(toml: &str) -> Proxy {
        let text = if toml.contains("[channels.") {
            toml.to_owned()
        } else {
            format!("{toml}\n{CHANNELS}")
        };
        let config = Config::parse(&text).unwrap_or_else(|e| panic!("test config: {e}\n{text}"));
        Self::start_config(config).await
    }

    /// Starts a fake upstream and a gateway on a loaded configuration (e.g. from a
    /// file, for reload tests).
    pub async fn start_config(config: Config) -> Proxy {
        let fake = FakeUpstream::start().await;
        let store = MemoryStore::new();
        let app = Gateway::new(config, store.clone())
            .fake_upstream(fake.base_url())
            .router()
            .expect("the gateway's router");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy {
            addr,
            fake,
            store,
            server,
        }
    }
}

/// Opens the store `config` names, as the `portcullis` binary does (a Redis URL gets the
/// Redis store with cooldown sharing and object homes), builds the gateway on it with
/// every layer and `fake_base` for `fake://` channels, and serves it on `127.0.0.1:0`.
pub async fn serve_opened(config: Config, fake_base: String) -> (SocketAddr, JoinHandle<()>) {
    serve_with_directory(config, fake_base, None).await
}

/// [`serve_opened`] with the keys (and ledger) of a records database.
#[allow(dead_code)] // not every test binary has a records database
pub async fn serve_with_directory(
    config: Config,
    fake_base: String,
    directory: Option<std::sync::Arc<portcullis_proxy::keys::Directory>>,
) -> (SocketAddr, JoinHandle<()>) {
    use portcullis_proxy::store::{BuildOptions, open};
    let app = open(config.store())
        .await
        .expect("the configured store")
        .build(
            config,
            BuildOptions {
                limits: true,
                fake_upstream: Some(fake_base),
                directory,
            },
        )
        .await
        .expect("the gateway");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, server)
}

// ------------------------------------------------------------------ requests

/// The client's API format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// `POST /v1/chat/completions`.
    OpenAi,
    /// `POST /v1/messages`.
    Anthropic,
    /// `POST /v1beta/models/{model}:generateContent` / `:streamGenerateContent?alt=sse`.
    Gemini,
}

/// Every dialect.
pub const DIALECTS: [Dialect; 3] = [Dialect::OpenAi, Dialect::Anthropic, Dialect::Gemini];

impl Dialect {
    /// The model of [`CHANNELS`] served in this dialect.
    pub fn model(self) -> &'static str {
        match self {
            Dialect::OpenAi => "gpt-4o-mini",
            Dialect::Anthropic => "claude-sonnet-4-5",
            Dialect::Gemini => "gemini-2.5-flash",
        }
    }

    /// The channel credential of [`CHANNELS`] for this dialect.
    pub fn channel_credential(self) -> &'static str {
        match self {
            Dialect::OpenAi => CRED_OPENAI,
            Dialect::Anthropic => CRED_ANTHROPIC,
            Dialect::Gemini => CRED_GEMINI,
        }
    }

    /// Where this dialect's SDK puts the key.
    pub fn key_at(self) -> KeyAt {
        match self {
            Dialect::OpenAi => KeyAt::Bearer,
            Dialect::Anthropic => KeyAt::XApiKey,
            Dialect::Gemini => KeyAt::XGoogApiKey,
        }
    }
}

/// Where a client puts its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyAt {
    /// `Authorization: Bearer <key>`.
    Bearer,
    /// `x-api-key: <key>`.
    XApiKey,
    /// `x-goog-api-key: <key>`.
    XGoogApiKey,
    /// `?key=<key>`.
    Query,
}

/// Every key location.
pub const KEY_PLACES: [KeyAt; 4] = [
    KeyAt::Bearer,
    KeyAt::XApiKey,
    KeyAt::XGoogApiKey,
    KeyAt::Query,
];

/// One request as a client sends it.
#[derive(Clone, Debug)]
pub struct Req {
    /// Method.
    pub method: Method,
    /// Path and query.
    pub path: String,
    /// Headers, in order.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl Req {
    /// `POST path` with `body`.
    pub fn post(path: impl Into<String>, body: impl Into<Vec<u8>>) -> Req {
        Req {
            method: Method::POST,
            path: path.into(),
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.into(),
        }
    }

    /// `GET path`.
    pub fn get(path: impl Into<String>) -> Req {
        Req {
            method: Method::GET,
            path: path.into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: impl ToString) -> Req {
        self.headers.push((name.to_owned(), value.to_string()));
        self
    }

    /// Puts `key` where `at` says.
    pub fn key(self, at: KeyAt, key: &str) -> Req {
        match at {
            KeyAt::Bearer => self.header("authorization", format!("Bearer {key}")),
            KeyAt::XApiKey => self.header("x-api-key", key),
            KeyAt::XGoogApiKey => self.header("x-goog-api-key", key),
            KeyAt::Query => {
                let mut r = self;
                let sep = if r.path.contains('?') { '&' } else { '?' };
                r.path = format!("{}{sep}key={key}", r.path);
                r
            }
        }
    }

    /// The same request with the body replaced.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Req {
        self.body = body.into();
        self
    }
}

/// A generation request of `dialect` for `model` without a key: "hi", streamed or not,
/// with `max_tokens` (Anthropic requires one: 64 when `None`). OpenAI streams ask for
/// the usage chunk (`stream_options.include_usage`).
pub fn gen_for(dialect: Dialect, model: &str, stream: bool, max_tokens: Option<u64>) -> Req {
    let messages = json!([{"role": "user", "content": "hi"}]);
    match dialect {
        Dialect::OpenAi => {
            let mut b = json!({"model": model, "messages": messages});
            if stream {
                b["stream"] = json!(true);
                b["stream_options"] = json!({"include_usage": true});
            }
            if let Some(m) = max_tokens {
                b["max_tokens"] = json!(m);
            }
            Req::post("/v1/chat/completions", b.to_string())
        }
        Dialect::Anthropic => {
            let mut b = json!({"model": model, "max_tokens": max_tokens.unwrap_or(64), "messages": messages});
            if stream {
                b["stream"] = json!(true);
            }
            Req::post("/v1/messages", b.to_string())
        }
        Dialect::Gemini => {
            let mut b = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
            if let Some(m) = max_tokens {
                b["generationConfig"] = json!({"maxOutputTokens": m});
            }
            let path = if stream {
                format!("/v1beta/models/{model}:streamGenerateContent?alt=sse")
            } else {
                format!("/v1beta/models/{model}:generateContent")
            };
            Req::post(path, b.to_string())
        }
    }
}

/// [`gen_for`] on the dialect's own model with `key` where its SDK puts it.
pub fn ask(dialect: Dialect, key: &str, stream: bool) -> Req {
    gen_for(dialect, dialect.model(), stream, None).key(dialect.key_at(), key)
}

// ------------------------------------------------------------------ the client

/// A response read to its end.
#[derive(Debug)]
pub struct Resp {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl Resp {
    /// The body as JSON (panics with the body if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A response whose head has arrived; its body is read by the test.
pub struct Open {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    body: Incoming,
    conn: JoinHandle<()>,
}

impl Open {
    /// The next data chunk (trailers skipped); `None` at the end. Bounded by [`WAIT`].
    pub async fn next_data(&mut self) -> Option<Bytes> {
        for _ in 0..10_000 {
            let frame = bounded(WAIT, "next body frame", self.body.frame()).await?;
            let frame = frame.expect("body frame");
            if let Ok(d) = frame.into_data() {
                return Some(d);
            }
        }
        panic!("too many non-data frames")
    }

    /// Every data chunk to the end, each with its arrival time (a bounded number).
    pub async fn frames(mut self) -> Vec<(Instant, Bytes)> {
        let mut v = Vec::new();
        for _ in 0..100_000 {
            match self.next_data().await {
                Some(d) => v.push((Instant::now(), d)),
                None => return v,
            }
        }
        panic!("more than 100000 frames")
    }

    /// The rest of the body, concatenated.
    pub async fn rest(self) -> Bytes {
        concat(&self.frames().await)
    }

    /// Goes away like a client that closes its socket mid-body.
    pub fn disconnect(self) {
        self.conn.abort();
        drop(self.body);
    }
}

/// The chunks of `frames` concatenated.
pub fn concat(frames: &[(Instant, Bytes)]) -> Bytes {
    let mut v = Vec::new();
    for (_, b) in frames {
        v.extend_from_slice(b);
    }
    v.into()
}

/// Sends `req` on a new connection to `addr`; returns once the response head is in.
pub async fn open(addr: SocketAddr, req: &Req) -> Open {
    bounded(WAIT, "response head", async {
        let stream = TcpStream::connect(addr).await.expect("connect");
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut b = hyper::Request::builder()
            .method(req.method.clone())
            .uri(&req.path)
            .header("host", addr.to_string());
        for (k, v) in &req.headers {
            b = b.header(k.as_str(), v.as_str());
        }
        let request = b
            .body(Full::new(Bytes::from(req.body.clone())))
            .expect("request");
        let res = sender.send_request(request).await.expect("send request");
        let (parts, body) = res.into_parts();
        Open {
            status: parts.status,
            headers: parts.headers,
            body,
            conn,
        }
    })
    .await
}

/// Sends `req` and reads the whole answer.
pub async fn send(addr: SocketAddr, req: &Req) -> Resp {
    let o = open(addr, req).await;
    let (status, headers) = (o.status, o.headers.clone());
    let body = o.rest().await;
    Resp {
        status,
        headers,
        body,
    }
}

// ------------------------------------------------------------------ checks

/// `"created":<digits>` → `"created":0`: the one field of the fake's answers that
/// depends on the wall clock (ids depend only on the call's order on its fake).
pub fn mask_created(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let mut out = String::with_capacity(s.len());
    let mut rest: &str = &s;
    const PAT: &str = "\"created\":";
    while let Some(i) = rest.find(PAT) {
        out.push_str(&rest[..i + PAT.len()]);
        rest = &rest[i + PAT.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        out.push('0');
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

/// OpenAI `error.type` by status (E1 and OpenAI's own names).
fn openai_type(status: u16) -> &'static str {
    match status {
        429 => "rate_limit_exceeded",
        402 => "insufficient_quota",
        401 => "authentication_error",
        403 => "permission_error",
        500..=599 => "server_error",
        _ => "invalid_request_error",
    }
}

/// Anthropic `error.type` by status (E1 and Anthropic's own names).
fn anthropic_type(status: u16) -> &'static str {
    match status {
        429 => "rate_limit_error",
        402 => "billing_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

/// Gemini `error.status` by status (E1 and google.rpc codes).
fn gemini_status(status: u16) -> &'static str {
    match status {
        429 | 402 => "RESOURCE_EXHAUSTED",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        502 | 503 => "UNAVAILABLE",
        _ => "INVALID_ARGUMENT",
    }
}

/// Checks that `r` is the gateway's rejection with `code` in `dialect`'s shape (E1,
/// E3): HTTP status = the code's first three digits, JSON, an `x-request-id`, the
/// dialect's error type, and — where the dialect has a place for it (OpenAI) — the code.
/// Returns the message.
pub fn rejection(r: &Resp, dialect: Dialect, code: u32) -> String {
    let status = (code / 100) as u16;
    assert_eq!(r.status.as_u16(), status, "{dialect:?}: {}", r.text());
    assert!(
        r.header("x-request-id").is_some_and(|v| !v.is_empty()),
        "x-request-id on a rejection: {:?}",
        r.headers
    );
    assert!(
        r.header("content-type")
            .is_some_and(|v| v.starts_with("application/json")),
        "{:?}",
        r.headers
    );
    let v = r.json();
    let msg = match dialect {
        Dialect::OpenAi => {
            let e = &v["error"];
            assert_eq!(e["code"], json!(code.to_string()), "{v}");
            assert_eq!(e["type"], json!(openai_type(status)), "{v}");
            assert_eq!(e["param"], Value::Null, "{v}");
            e["message"].as_str()
        }
        Dialect::Anthropic => {
            assert_eq!(v["type"], json!("error"), "{v}");
            assert_eq!(v["error"]["type"], json!(anthropic_type(status)), "{v}");
            v["error"]["message"].as_str()
        }
        Dialect::Gemini => {
            let e = &v["error"];
            assert_eq!(e["code"], json!(status), "{v}");
            assert_eq!(e["status"], json!(gemini_status(status)), "{v}");
            e["message"].as_str()
        }
    };
    msg.unwrap_or_else(|| panic!("no message in {v}"))
        .to_owned()
}

// ------------------------------------------------------------------ the gateway's view

/// `GET /usage` for `key` (200 expected).
pub async fn usage(addr: SocketAddr, key: &str) -> Value {
    let r = send(addr, &Req::get("/usage").key(KeyAt::Bearer, key)).await;
    assert_eq!(r.status, 200, "/usage: {}", r.text());
    r.json()
}

/// `used` of the tier (`dimension`, `window_secs`) of the `scope` policy
/// (`"key"` / `"subscription"`) in a `/usage` answer.
pub fn used(view: &Value, scope: &str, dimension: &str, window_secs: u64) -> u64 {
    let policies = view["policies"].as_array().expect("policies");
    let p = policies
        .iter()
        .find(|p| p["scope"] == scope)
        .unwrap_or_else(|| panic!("no {scope} policy in {view}"));
    let l = p["limits"]
        .as_array()
        .expect("limits")
        .iter()
        .find(|l| l["dimension"] == dimension && l["window_secs"] == json!(window_secs))
        .unwrap_or_else(|| panic!("no {dimension}/{window_secs}s tier in {view}"));
    l["used"].as_u64().expect("used")
}

/// Polls `GET /usage` for `key` every 10 ms until `pred` holds of the view or `within`
/// has passed (a bounded number of polls); returns whether it held and the last view.
pub async fn usage_until(
    addr: SocketAddr,
    key: &str,
    within: Duration,
    pred: impl Fn(&Value) -> bool,
) -> (bool, Value) {
    let step = Duration::from_millis(10);
    let polls = (within.as_millis() / step.as_millis()).max(1);
    let mut view = usage(addr, key).await;
    for _ in 0..polls {
        if pred(&view) {
            return (true, view);
        }
        tokio::time::sleep(step).await;
        view = usage(addr, key).await;
    }
    (pred(&view), view)
}

/// In-flight slots in a `/usage` answer.
pub fn in_flight(view: &Value) -> u64 {
    view["in_flight"].as_u64().expect("in_flight")
}

/// The token total an upstream answer reports (input incl. cache reads and writes +
/// output), read from the body the client received: a JSON body, or SSE events (the
/// last report of each field wins, as providers send them), or Gemini's JSON array.
pub fn reported_tokens(dialect: Dialect, body: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(body);
    let docs: Vec<Value> = if text.trim_start().starts_with('{') {
        vec![serde_json::from_str(&text).expect("JSON body")]
    } else if text.trim_start().starts_with('[') {
        serde_json::from_str::<Vec<Value>>(&text).expect("JSON array body")
    } else {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .filter(|d| d.starts_with('{'))
            .map(|d| serde_json::from_str(d).expect("SSE data JSON"))
            .collect()
    };
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    match dialect {
        Dialect::OpenAi => {
            let u = docs
                .iter()
                .rev()
                .map(|d| &d["usage"])
                .find(|u| u.is_object())
                .expect("an OpenAI usage block");
            n(&u["prompt_tokens"]) + n(&u["completion_tokens"])
        }
        Dialect::Anthropic => {
            let (mut input, mut read, mut write, mut out) = (0, 0, 0, 0);
            for d in &docs {
                let u = if d["type"] == "message_start" {
                    &d["message"]["usage"]
                } else {
                    &d["usage"]
                };
                if !u.is_object() {
                    continue;
                }
                let set = |field: &str, slot: &mut u64| {
                    if let Some(x) = u[field].as_u64() {
                        *slot = x;
                    }
                };
                set("input_tokens", &mut input);
                set("cache_read_input_tokens", &mut read);
                set("cache_creation_input_tokens", &mut write);
                set("output_tokens", &mut out);
            }
            input + read + write + out
        }
        Dialect::Gemini => {
            let u = docs
                .iter()
                .rev()
                .map(|d| &d["usageMetadata"])
                .find(|u| u.is_object())
                .expect("a Gemini usageMetadata");
            n(&u["promptTokenCount"]) + n(&u["candidatesTokenCount"])
        }
    }
}

// ------------------------------------------------------------------ SSE bodies

/// The JSON of every `data:` line of an SSE body (`[DONE]` as the string "[DONE]").
pub fn sse_data(body: &str) -> Vec<serde_json::Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.trim())
        .map(|d| {
            if d == "[DONE]" {
                serde_json::json!("[DONE]")
            } else {
                serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}"))
            }
        })
        .collect()
}

/// The `event:` names of an SSE body, in order.
pub fn sse_events(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("event:"))
        .map(|e| e.trim().to_owned())
        .collect()
}
