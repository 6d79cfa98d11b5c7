//! The hyper 1 HTTP/1.1 server and the per-request handler.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use crate::behavior::{Behavior, ErrorKind};
use crate::body::{End, FakeBody};
use crate::errors::{self, Ctx, Headers, push};
use crate::render::{self, StreamPlan, js};
use crate::request::{self, Usage};
use crate::stats::{Counters, Credentials, InFlightGuard, Route};
use crate::{Dialect, apis};

#[derive(Default)]
struct Control {
    default: Behavior,
    per_credential_default: HashMap<String, Behavior>,
    script: VecDeque<Behavior>,
    per_credential_script: HashMap<String, VecDeque<Behavior>>,
}

pub(crate) struct Shared {
    pub(crate) counters: Arc<Counters>,
    /// The responses and chat completions generated, answered by id.
    stored: crate::stored::Stored,
    control: Mutex<Control>,
    models: Vec<String>,
    /// This fake's number in the process (from 1), in the ids it mints.
    pub(crate) instance: u64,
}

/// The number of the next fake started in this process.
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub(crate) fn new(recent_capacity: usize, default: Behavior, models: Vec<String>) -> Self {
        Shared {
            counters: Arc::new(Counters::new(recent_capacity)),
            stored: crate::stored::Stored::default(),
            control: Mutex::new(Control {
                default,
                ..Control::default()
            }),
            models,
            instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
        }
    }

    pub(crate) fn set_default(&self, b: Behavior) {
        lock(&self.control).default = b;
    }

    pub(crate) fn set_default_for(&self, credential: &str, b: Behavior) {
        lock(&self.control)
            .per_credential_default
            .insert(credential.to_owned(), b);
    }

    pub(crate) fn push_script(&self, b: Behavior) {
        lock(&self.control).script.push_back(b);
    }

    pub(crate) fn push_script_for(&self, credential: &str, b: Behavior) {
        lock(&self.control)
            .per_credential_script
            .entry(credential.to_owned())
            .or_default()
            .push_back(b);
    }

    pub(crate) fn clear_scripts(&self) {
        let mut c = lock(&self.control);
        c.script.clear();
        c.per_credential_script.clear();
    }

    pub(crate) fn clear_behaviors(&self) {
        *lock(&self.control) = Control::default();
    }

    pub(crate) fn scripts_remaining(&self) -> usize {
        let c = lock(&self.control);
        c.script.len()
            + c.per_credential_script
                .values()
                .map(VecDeque::len)
                .sum::<usize>()
    }

    /// Default, then the credential's default, then (when `consume`) one scripted entry
    /// (the credential's queue first, else the global queue).
    fn behavior_for(&self, credential: Option<&str>, consume: bool) -> Behavior {
        let mut c = lock(&self.control);
        let mut b = c.default.clone();
        if let Some(cred) = credential {
            if let Some(d) = c.per_credential_default.get(cred) {
                b = b.overlay(d);
            }
            if !consume {
                return b;
            }
            if let Some(s) = c
                .per_credential_script
                .get_mut(cred)
                .and_then(VecDeque::pop_front)
            {
                return b.overlay(&s);
            }
        }
        if !consume {
            return b;
        }
        if let Some(s) = c.script.pop_front() {
            b = b.overlay(&s);
        }
        b
    }
}

/// Accepts connections until `shutdown` fires (or its sender is dropped); then aborts
/// every open connection.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: oneshot::Receiver<()>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let shared = shared.clone();
                    conns.spawn(async move {
                        let svc = service_fn(move |req| handle(shared.clone(), req));
                        let _ = http1::Builder::new()
                            .timer(TokioTimer::new())
                            .keep_alive(true)
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    });
                }
                // Out of file descriptors and the like: back off briefly.
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

/// `/{prefix}{id}` or `/{prefix}{id}/{tail}`: the id and the tail.
fn resource<'a>(path: &'a str, prefix: &str) -> Option<(&'a str, Option<&'a str>)> {
    let rest = path.strip_prefix(prefix)?;
    let (id, tail) = match rest.split_once('/') {
        Some((id, tail)) => (id, Some(tail)),
        None => (rest, None),
    };
    (!id.is_empty()).then_some((id, tail))
}

/// The route, the dialect of its errors, and the path parameter (the model of a Gemini
/// method, the id of a response or a video).
fn classify(
    method: &Method,
    path: &str,
    headers: &http::HeaderMap,
) -> (Route, Dialect, Option<String>) {
    let openai = |r: Route| (r, Dialect::OpenAi, None);
    match (method, path) {
        (&Method::POST, "/v1/chat/completions") => return openai(Route::ChatCompletions),
        (&Method::POST, "/v1/messages") => return (Route::Messages, Dialect::Anthropic, None),
        (&Method::POST, "/v1/messages/count_tokens") => {
            return (Route::MessagesCountTokens, Dialect::Anthropic, None);
        }
        (&Method::POST, "/v1/responses") => return openai(Route::Responses),
        (&Method::POST, "/v1/embeddings") => return openai(Route::Embeddings),
        (&Method::POST, "/v1/images/generations") => return openai(Route::ImageGenerations),
        (&Method::POST, "/v1/images/edits") => return openai(Route::ImageEdits),
        (&Method::POST, "/v1/videos") => return openai(Route::VideoCreate),
        (&Method::GET, "/v1/models") => {
            let d = if headers.contains_key("anthropic-version") {
                Dialect::Anthropic
            } else {
                Dialect::OpenAi
            };
            return (Route::ListModels, d, None);
        }
        (&Method::GET, "/v1beta/models") => return (Route::ListModels, Dialect::Gemini, None),
        _ => {}
    }
    if let Some((id, tail)) = resource(path, "/v1/chat/completions/") {
        let route = match (method, tail) {
            (&Method::GET, None) => Route::ChatCompletionRetrieve,
            _ => Route::Other,
        };
        return (route, Dialect::OpenAi, Some(id.to_owned()));
    }
    if let Some((id, tail)) = resource(path, "/v1/responses/") {
        let route = match (method, tail) {
            (&Method::GET, None) => Route::ResponseRetrieve,
            (&Method::DELETE, None) => Route::ResponseDelete,
            (&Method::POST, Some("cancel")) => Route::ResponseCancel,
            (&Method::GET, Some("input_items")) => Route::ResponseInputItems,
            _ => Route::Other,
        };
        return (route, Dialect::OpenAi, Some(id.to_owned()));
    }
    if let Some((id, tail)) = resource(path, "/v1/videos/") {
        let route = match (method, tail) {
            (&Method::GET, None) => Route::VideoRetrieve,
            (&Method::DELETE, None) => Route::VideoDelete,
            (&Method::GET, Some("content")) => Route::VideoContent,
            _ => Route::Other,
        };
        return (route, Dialect::OpenAi, Some(id.to_owned()));
    }
    if method == Method::POST {
        // Every Gemini method under both API versions.
        let rest = path
            .strip_prefix("/v1beta/models/")
            .or_else(|| path.strip_prefix("/v1/models/"));
        if let Some((model, verb)) = rest.and_then(|r| r.split_once(':')) {
            let route = match verb {
                "generateContent" => Route::GenerateContent,
                "streamGenerateContent" => Route::StreamGenerateContent,
                "embedContent" => Route::EmbedContent,
                "batchEmbedContents" => Route::BatchEmbedContents,
                "countTokens" => Route::CountTokens,
                _ => Route::Other,
            };
            if route != Route::Other && !model.is_empty() && !model.contains('/') {
                return (route, Dialect::Gemini, Some(model.to_owned()));
            }
        }
    }
    openai(Route::Other)
}

fn respond(
    status: u16,
    content_type: &'static str,
    headers: Headers,
    body: FakeBody,
) -> Response<FakeBody> {
    let mut res = Response::new(body);
    *res.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // As the providers' front ends send them (a gateway must not pass them on).
    h.insert(header::SERVER, HeaderValue::from_static(SERVER));
    h.insert(header::SET_COOKIE, HeaderValue::from_static(SET_COOKIE));
    for (k, v) in headers {
        h.append(k, v);
    }
    res
}

/// A one-piece answer; counts its status.
fn full(
    guard: InFlightGuard,
    status: u16,
    content_type: &'static str,
    headers: Headers,
    body: String,
) -> Response<FakeBody> {
    guard.counters().count_status(status);
    respond(
        status,
        content_type,
        headers,
        FakeBody::full(Bytes::from(body), guard),
    )
}

/// The `server` header of every answer.
pub(crate) const SERVER: &str = "portcullis-fake-upstream";
/// The `set-cookie` header of every answer (as a CDN in front of a provider sets one).
pub(crate) const SET_COOKIE: &str = "__fake_bm=fake-session; Path=/; HttpOnly; Secure";
/// The account the fake answers for, in OpenAI's `openai-organization` and
/// Anthropic's `anthropic-organization-id` headers.
pub(crate) const ORGANIZATION: &str = "org-fake-operator";

/// The provider's request id and account headers, per dialect.
fn request_id_header(dialect: Dialect, rid: &str, h: &mut Headers) {
    match dialect {
        Dialect::OpenAi => {
            push(h, "x-request-id", rid);
            push(h, "openai-organization", ORGANIZATION);
        }
        Dialect::Anthropic => {
            push(h, "request-id", rid);
            push(h, "anthropic-organization-id", ORGANIZATION);
        }
        Dialect::Gemini => {}
    }
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<FakeBody>, Infallible> {
    let (route, dialect, param) = classify(req.method(), req.uri().path(), req.headers());
    let query = req.uri().query();
    let gemini_sse = query.is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
    let creds = Credentials::of(req.headers(), query);
    let path_and_query = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let path = req.uri().path().to_owned();
    let (seq, guard) =
        shared
            .counters
            .begin(route, req.method(), path_and_query, req.headers(), &creds);
    let primary = creds.primary.map(str::to_owned);
    let rid = format!("req_fake{seq:08}");

    match route {
        Route::ListModels => {
            let body = render::list_models(dialect, &shared.models);
            let mut h = Headers::new();
            request_id_header(dialect, &rid, &mut h);
            return Ok(full(guard, 200, "application/json", h, body));
        }
        Route::Other => return Ok(no_route(guard, req.method(), req.uri().path())),
        _ => {}
    }

    let from_headers = Behavior::from_headers(req.headers());
    let base = shared.behavior_for(primary.as_deref(), route.is_model_call());
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = match req.into_body().collect().await {
        Ok(c) => c.to_bytes(),
        // The client went away mid-body; nobody reads this answer.
        Err(_) => {
            return Ok(full(
                guard,
                400,
                "application/json",
                Headers::new(),
                String::new(),
            ));
        }
    };
    shared.counters.record_body(&path, &body);
    let b = match from_headers {
        Ok(h) => base.overlay(&h),
        Err(e) => return Ok(bad_request(guard, dialect, &rid, &e.to_string())),
    };
    let parsed = match request::parse(
        route,
        dialect,
        &body,
        content_type.as_deref(),
        param.as_deref(),
    ) {
        Ok(p) => p,
        Err(msg) => return Ok(bad_request(guard, dialect, &rid, &msg)),
    };
    let usage = Usage::compute(&parsed, &b);

    let guard = wait_as_told(&b, parsed.stream, guard).await;
    let hang = b.hang == Some(true);

    let ctx = Ctx {
        dialect,
        model: &parsed.model,
        request_id: &rid,
        behavior: &b,
        now: SystemTime::now(),
        instance: shared.instance,
    };
    let mut h = Headers::new();
    request_id_header(dialect, &rid, &mut h);

    let failure = b.failure(dialect);
    let fail_in_stream = parsed.stream && b.fail_after_chunks.is_some();
    if let (Some((kind, status)), false, false) = (&failure, fail_in_stream, hang) {
        let r = errors::render(&ctx, kind, *status);
        h.extend(r.headers);
        return Ok(full(guard, r.status, r.content_type, h, r.body));
    }

    errors::rate_limit_headers(&ctx, false, &mut h);
    if let Some(s) = b.retry_after {
        push(&mut h, "retry-after", s);
    }
    let cut = b.cut == Some(true);
    // A provider keeps what it generated; not an answer that failed.
    if failure.is_none() && !fail_in_stream {
        store(&shared, route, &ctx, seq, &usage, &parsed, &b);
    }
    if let Some(kind) = stored_kind(route) {
        let id = param.as_deref().unwrap_or_default();
        let found = shared.stored.get(kind, id, Instant::now());
        // A job's content is there once the job completed.
        let found = match route {
            Route::VideoContent => found.filter(|j| j.contains(r#""status":"completed""#)),
            Route::VideoDelete => shared.stored.remove(kind, id).then(String::new),
            _ => found,
        };
        let Some(body) = found else {
            let body = crate::stored::not_found(kind, id);
            return Ok(full(guard, 404, "application/json", h, body));
        };
        if matches!(route, Route::VideoContent | Route::VideoDelete) {
            let (content_type, body) = apis::answer(route, &ctx, seq, &usage, &parsed);
            return Ok(buffered(&shared, content_type, body, h, cut, guard));
        }
        return Ok(buffered(
            &shared,
            "application/json",
            Bytes::from(body),
            h,
            cut,
            guard,
        ));
    }
    if route == Route::ResponseDelete {
        let id = param.as_deref().unwrap_or_default();
        shared.stored.remove(crate::stored::Kind::Response, id);
    }

    if !parsed.stream {
        let (content_type, body) = match route {
            Route::ChatCompletions
            | Route::Messages
            | Route::GenerateContent
            | Route::StreamGenerateContent => (
                "application/json",
                Bytes::from(render::non_stream(&ctx, seq, &usage)),
            ),
            _ => apis::answer(route, &ctx, seq, &usage, &parsed),
        };
        return Ok(buffered(&shared, content_type, body, h, cut, guard));
    }
    let plan = StreamPlan {
        ttfb: b.ttfb.unwrap_or_default(),
        interval: b.chunk_interval.unwrap_or_default(),
        hang,
        cut,
        fail: b.fail_after_chunks.map(|k| {
            let (kind, status) = failure.clone().unwrap_or((ErrorKind::ServerError, 500));
            (k, kind, status)
        }),
        include_usage: parsed.include_usage,
        gemini_json_array: dialect == Dialect::Gemini && !gemini_sse,
        responses: route == Route::Responses,
        max_tokens: parsed.max_tokens,
    };
    Ok(streamed(&shared, &ctx, seq, &usage, &plan, h, guard))
}

/// The kind of stored object a retrieval route reads.
fn stored_kind(route: Route) -> Option<crate::stored::Kind> {
    match route {
        Route::ResponseRetrieve => Some(crate::stored::Kind::Response),
        Route::ChatCompletionRetrieve => Some(crate::stored::Kind::ChatCompletion),
        Route::VideoRetrieve | Route::VideoContent | Route::VideoDelete => {
            Some(crate::stored::Kind::Video)
        }
        _ => None,
    }
}

/// Keeps a response or chat completion the fake is about to answer, whole, as the
/// provider stores it: answered by id once its stream would have ended (time to first
/// byte + the chunk interval for each chunk and the end), whatever becomes of the
/// stream; and a video job at its creation, answered `in_progress` for its run time
/// (`x-fake-job-ms`), then at its end.
fn store(
    shared: &Shared,
    route: Route,
    ctx: &Ctx<'_>,
    seq: u64,
    usage: &Usage,
    parsed: &request::Parsed,
    b: &Behavior,
) {
    if route == Route::VideoCreate {
        let (id, done, running) = apis::stored_video(ctx, seq, parsed, b.job_fails == Some(true));
        let ready = Instant::now() + b.job_time.unwrap_or_default();
        shared
            .stored
            .put(crate::stored::Kind::Video, id, done, Some(running), ready);
        return;
    }
    if !parsed.store {
        return;
    }
    let ready = Instant::now()
        + if parsed.stream {
            b.ttfb.unwrap_or_default() + b.chunk_interval.unwrap_or_default() * usage.chunks.max(1)
        } else {
            Duration::ZERO
        };
    match route {
        Route::Responses => {
            let (id, done, pending) = apis::stored_response(ctx, seq, usage, parsed.max_tokens);
            shared.stored.put(
                crate::stored::Kind::Response,
                id,
                done,
                Some(pending),
                ready,
            );
        }
        Route::ChatCompletions => {
            let done = render::non_stream(ctx, seq, usage);
            shared.stored.put(
                crate::stored::Kind::ChatCompletion,
                render::openai_id(seq),
                done,
                None,
                ready,
            );
        }
        _ => {}
    }
}

/// Waits the latency the behaviour asks for (and, unstreamed, the time to first byte);
/// a hanging unstreamed answer never comes (its guard is released when the client goes
/// away).
async fn wait_as_told(b: &Behavior, stream: bool, guard: InFlightGuard) -> InFlightGuard {
    let mut delay = b.latency.unwrap_or_default();
    if !stream {
        delay += b.ttfb.unwrap_or_default();
    }
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if b.hang == Some(true) && !stream {
        let _guard = guard;
        std::future::pending::<()>().await;
        unreachable!("pending never resolves");
    }
    guard
}

/// 404 for a path the fake does not serve, in OpenAI's error shape.
fn no_route(guard: InFlightGuard, method: &http::Method, path: &str) -> Response<FakeBody> {
    let body = format!(
        r#"{{"error":{{"message":{},"type":"invalid_request_error","param":null,"code":"unknown_url"}}}}"#,
        js(&format!("fake-upstream: no route for {method} {path}"))
    );
    full(guard, 404, "application/json", Headers::new(), body)
}

/// A whole (non-streamed) answer; `cut`: only its first half, then the connection drops.
fn buffered(
    shared: &Shared,
    content_type: &'static str,
    body: Bytes,
    h: Headers,
    cut: bool,
    guard: InFlightGuard,
) -> Response<FakeBody> {
    shared.counters.count_status(200);
    if !cut {
        return respond(200, content_type, h, FakeBody::full(body, guard));
    }
    let total = body.len() as u64;
    let half = body.slice(..(total as usize / 2));
    let steps = VecDeque::from([(Duration::ZERO, half)]);
    let body = FakeBody::new(steps, End::Cut, Some(total), guard);
    respond(200, content_type, h, body)
}

/// A streamed answer as `plan` says: SSE, or Gemini's JSON array.
fn streamed(
    shared: &Shared,
    ctx: &Ctx<'_>,
    seq: u64,
    usage: &Usage,
    plan: &StreamPlan,
    mut h: Headers,
    guard: InFlightGuard,
) -> Response<FakeBody> {
    let (steps, end) = if plan.responses {
        apis::stream(ctx, seq, usage, plan)
    } else {
        render::stream(ctx, seq, usage, plan)
    };
    let content_type = if plan.gemini_json_array {
        "application/json"
    } else {
        "text/event-stream"
    };
    push(&mut h, "cache-control", "no-cache");
    shared.counters.count_status(200);
    let body = FakeBody::new(steps, end, None, guard);
    respond(200, content_type, h, body)
}

fn bad_request(
    guard: InFlightGuard,
    dialect: Dialect,
    rid: &str,
    message: &str,
) -> Response<FakeBody> {
    let body = match dialect {
        Dialect::OpenAi => format!(
            r#"{{"error":{{"message":{},"type":"invalid_request_error","param":null,"code":null}}}}"#,
            js(message)
        ),
        Dialect::Anthropic => format!(
            r#"{{"type":"error","error":{{"type":"invalid_request_error","message":{}}},"request_id":"{rid}"}}"#,
            js(message)
        ),
        Dialect::Gemini => format!(
            r#"{{"error":{{"code":400,"message":{},"status":"INVALID_ARGUMENT"}}}}"#,
            js(message)
        ),
    };
    let mut h = Headers::new();
    request_id_header(dialect, rid, &mut h);
    full(guard, 400, "application/json", h, body)
}
