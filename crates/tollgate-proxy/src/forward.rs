//! Sends a prepared request to a channel and streams the answer back, watching it for
//! usage (SPEC P2, W5).

use crate::catalog::{Catalog, Route, dialect_index};
use crate::prepare::Facts;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName};
use http::{Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tollgate::BoxError;
use tollgate::core::homes::Home;
use tollgate_core::{
    Dialect, GatewayCode, LayerKind, Price, Rejection, UpstreamError, UpstreamFailure, Usage,
    UsageRecorder,
};
use tollgate_dialects::{Operation, UsageWatcher};
use tower::Service;

/// The pooled upstream client: HTTP/1 and HTTP/2, plain or TLS (rustls, webpki
/// roots). It never retries by itself (SPEC F7: one retry budget, in one place).
pub type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A new pooled client.
pub fn http_client() -> HttpClient {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(256)
        .build(https)
}

/// The innermost service of the proxy: forwards to a channel.
///
/// One `Arc` inside: the layers above clone their inner service for every request (the
/// router once, each layer whose future calls later once more), and the pooled
/// client alone holds several reference counts that both cores would bounce.
#[derive(Clone)]
pub struct Forward(Arc<Shared>);

struct Shared {
    client: HttpClient,
    catalog: Arc<Catalog>,
    homes: Arc<crate::homes::Homes>,
}

impl Forward {
    /// A forwarder on `client` and `catalog`, remembering in `homes` the channel of
    /// every provider-side object an answer creates (P6).
    pub fn new(client: HttpClient, catalog: Arc<Catalog>, homes: Arc<crate::homes::Homes>) -> Self {
        Self(Arc::new(Shared {
            client,
            catalog,
            homes,
        }))
    }
}

/// Whether a successful answer to a request for `operation` at `path` creates an
/// object the provider keeps for later requests: a Responses API response, a video job
/// (P6). Both are `POST`-only routes.
fn creates_object(operation: Operation, path: &str) -> bool {
    operation == Operation::Video
        || operation == Operation::Generate && path.ends_with("/responses")
}

/// The forwarder's failure, typed: the failover layer reads its kind (and makes the
/// client's answer, F10), the guards whether the provider saw the request (B4).
fn upstream_failed(failure: UpstreamFailure, why: &str) -> BoxError {
    tracing::warn!(failure = failure.as_str(), "upstream attempt failed: {why}");
    Box::new(UpstreamError::new(failure))
}

/// Hop-by-hop headers, and what the client library recomputes: never copied from a
/// provider's answer (nor, being outside every allow-list, from a client's request).
const STRIP: [HeaderName; 14] = [
    header::AUTHORIZATION,
    // The answer is read for its usage on the way through: ask for it uncompressed
    // (a compressed body would leave every SDK request unsettled).
    header::ACCEPT_ENCODING,
    HeaderName::from_static("x-api-key"),
    HeaderName::from_static("x-goog-api-key"),
    header::HOST,
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::CONTENT_LENGTH,
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
];

/// The request id header: the gateway's own on the way up (the client's is taken off
/// before the gateway makes one, see `crate::app`); the provider's, on the way back, is
/// kept for support as `x-upstream-request-id`.
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// Anthropic's name for its request id.
const REQUEST_ID: HeaderName = HeaderName::from_static("request-id");
const X_UPSTREAM_REQUEST_ID: HeaderName = HeaderName::from_static("x-upstream-request-id");

fn strip_hop_by_hop(h: &mut HeaderMap) {
    for name in STRIP.iter() {
        h.remove(name);
    }
}

/// Request headers every channel receives when the client sent them (besides the
/// vendor's own list in `[forwarding]`): nothing that carries a credential, picks an
/// account, or says who the client is.
const REQUEST_BUILT_IN: [HeaderName; 4] = [
    header::CONTENT_TYPE,
    header::ACCEPT,
    X_REQUEST_ID,
    HeaderName::from_static("idempotency-key"),
];

/// Response headers every client receives when the answer has them (besides
/// `[forwarding] response_headers`). Not among them: `set-cookie`, `server`, the
/// provider's organisation and project headers, and (unless
/// `provider_rate_limit_headers`) its rate-limit headers.
const RESPONSE_BUILT_IN: [HeaderName; 7] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::CONTENT_ENCODING,
    header::CACHE_CONTROL,
    header::RETRY_AFTER,
    X_REQUEST_ID,
    X_UPSTREAM_REQUEST_ID,
];

/// The gateway's own headers (`x-tollgate-queued-ms`, …): passed to the client, never
/// taken from a provider.
const GATEWAY_PREFIX: &str = "x-tollgate-";
/// The bundled fake upstream's control headers: forwarded only to channels on
/// `fake://` or a loopback address, where the fake runs (it binds loopback only).
const FAKE_PREFIX: &str = "x-fake-";
/// The providers' rate-limit headers: the operator's account, not the client's.
use tollgate_dialects::vendor::RATE_LIMIT_HEADER_PREFIXES as RATE_LIMIT_PREFIXES;

/// The Gemini methods the gateway prices and limits (SPEC P2, P6); any other
/// (`batchGenerateContent`, `predictLongRunning`, `generateAnswer`, …) is never
/// forwarded.
pub const GEMINI_METHODS: [&str; 5] = [
    "generateContent",
    "streamGenerateContent",
    "embedContent",
    "batchEmbedContents",
    "countTokens",
];

/// Whether a Gemini path names a served method: the last segment is
/// `{model}:{method}` with a method of [`GEMINI_METHODS`] (read as the dialect crate
/// reads the model: up to the last `:` after the last `/models/`).
pub fn gemini_method_served(path: &str) -> bool {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    path.rfind("/models/")
        .and_then(|at| path[at + "/models/".len()..].rsplit_once(':'))
        .is_some_and(|(model, method)| {
            !model.is_empty() && !model.contains(['/', ':']) && GEMINI_METHODS.contains(&method)
        })
}

/// The header allow-lists of both directions (SPEC P2), built once from the
/// configuration's `[forwarding]` section.
#[derive(Debug)]
pub struct AllowLists {
    /// Extra request headers per channel dialect (in `dialect_index` order).
    request: [Vec<HeaderName>; 4],
    /// Extra response headers.
    response: Vec<HeaderName>,
    /// Pass the providers' rate-limit headers.
    rate_limit_headers: bool,
}

impl AllowLists {
    /// The lists of `[forwarding]`.
    pub fn new(c: &crate::config::ForwardingConfig) -> Self {
        let names = |v: &[crate::config::ForwardedHeader]| -> Vec<HeaderName> {
            v.iter().map(|h| h.0.clone()).collect()
        };
        Self {
            request: [
                names(&c.openai_headers),
                names(&c.anthropic_headers),
                names(&c.gemini_headers),
                names(&c.openai_headers),
            ],
            response: names(&c.response_headers),
            rate_limit_headers: c.provider_rate_limit_headers,
        }
    }

    /// Whether a client's request header goes to `route`.
    pub fn request_allowed(&self, route: &Route, name: &HeaderName) -> bool {
        REQUEST_BUILT_IN.contains(name)
            || self.request[dialect_index(route.dialect)].contains(name)
            || (route.fake_controls && name.as_str().starts_with(FAKE_PREFIX))
    }

    /// Whether a response header reaches the client.
    pub fn response_allowed(&self, name: &HeaderName) -> bool {
        let n = name.as_str();
        RESPONSE_BUILT_IN.contains(name)
            || n.starts_with(GATEWAY_PREFIX)
            || self.response.contains(name)
            || (self.rate_limit_headers && RATE_LIMIT_PREFIXES.iter().any(|p| n.starts_with(p)))
    }
}

/// Keeps the headers (every value of each) whose name `keep` accepts.
fn retain(h: &mut HeaderMap, mut keep: impl FnMut(&HeaderName) -> bool) {
    if h.keys().all(&mut keep) {
        return;
    }
    let old = std::mem::take(h);
    let mut current: Option<(HeaderName, bool)> = None;
    for (name, value) in old {
        if let Some(name) = name {
            let k = keep(&name);
            current = Some((name, k));
        }
        if let Some((name, true)) = &current {
            h.append(name.clone(), value);
        }
    }
}

/// The upstream URI: the channel's base URL + the client's path, and of the client's
/// query only the parameters the vendor's API needs (Gemini `alt`, Anthropic `beta`):
/// never a `key=` or `access_token=` (Gemini client credentials), nor a parameter
/// that picks a project or quota user on the operator's account.
fn upstream_uri(route: &Route, uri: &Uri) -> Result<Uri, BoxError> {
    let mut s = String::with_capacity(route.base_url.len() + 64);
    s.push_str(&route.base_url);
    s.push_str(uri.path());
    if let Some(q) = uri.query() {
        let mut first = true;
        for kv in q.split('&') {
            let name = kv.split_once('=').map_or(kv, |(k, _)| k);
            if tollgate_dialects::vendor::upstream_query_allowed(route.dialect, name) {
                s.push(if first { '?' } else { '&' });
                s.push_str(kv);
                first = false;
            }
        }
    }
    s.parse()
        .map_err(|_| upstream_failed(UpstreamFailure::Unsendable, "invalid upstream URI"))
}

fn inject_credential(route: &Route, h: &mut HeaderMap) {
    let Some(cred) = route.credential.clone() else {
        return;
    };
    tollgate_dialects::vendor::inject_credential(route.dialect, cred, h);
}

impl Service<Request<Full<Bytes>>> for Forward {
    type Response = Response<ForwardBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ForwardBody>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // The pooled client is always ready; connections are made per request.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Full<Bytes>>) -> Self::Future {
        let shared = self.0.clone();
        // Taken here, inside the attempt span (the future runs in it too).
        let trace = crate::telemetry::AttemptTrace::of(&req);
        Box::pin(async move {
            let (client, catalog) = (&shared.client, &shared.catalog);
            let (mut parts, body) = req.into_parts();
            let facts = parts
                .extensions
                .get::<Facts>()
                .cloned()
                .ok_or("forwarder called without prepared facts")?;
            let dialect = parts
                .extensions
                .get::<Dialect>()
                .copied()
                .unwrap_or(Dialect::Native);
            let model = &facts.0.model;
            // The capacity queue chose the channel (Q2); without it, pick one here.
            let chosen = parts
                .extensions
                .get::<tollgate_core::capacity::Chosen>()
                .and_then(|c| catalog.route(model, &c.0.name));
            let Some(route) = chosen.or_else(|| catalog.pick(model, dialect)) else {
                return Err(Box::new(Rejection::new(
                    GatewayCode::NoUpstream,
                    LayerKind::UpstreamLimit,
                )) as BoxError);
            };
            let price = catalog.model(model).map(|m| m.price).unwrap_or_default();
            let recorder = parts.extensions.get::<UsageRecorder>().cloned();
            // The last guard of "only what is priced is sent" (the route table refuses
            // other Gemini methods first).
            if route.dialect == Dialect::Gemini && !gemini_method_served(parts.uri.path()) {
                return Err(Box::new(
                    Rejection::new(GatewayCode::NotFound, LayerKind::Request).with_message(
                        format!(
                            "Only these methods are served: {}.",
                            GEMINI_METHODS.join(", ")
                        ),
                    ),
                ) as BoxError);
            }
            let creates = creates_object(facts.0.operation, parts.uri.path());
            let mut up = upstream_request(catalog, &route, &mut parts, body)?;
            if let Some(t) = &trace {
                let uri = up.uri().clone();
                t.sending(&route, model, &uri, up.headers_mut());
            }
            if let Some(r) = &recorder {
                r.set_channel(route.name.clone());
                // From here on the provider may see the request (B4).
                r.mark_unknown();
            }
            // Not tower-http's timeout layer: a timed-out attempt must come back as the
            // typed `UpstreamFailure::Timeout` (failover classifies it, F2), not as a
            // 408 answer a provider could have sent.
            let res = match tokio::time::timeout(catalog.upstream_timeout, client.request(up)).await
            {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => return Err(not_answered(&e, &route, trace, recorder)),
                Err(_) => {
                    tracing::warn!(channel = %route.name, "upstream response head timed out");
                    route.responses.failed();
                    if let Some(t) = &trace {
                        t.failed("timeout");
                    }
                    return Err(upstream_failed(UpstreamFailure::Timeout, "timeout"));
                }
            };
            route.responses.answered(res.status().as_u16());
            let (mut rparts, incoming) = res.into_parts();
            answer_headers(&mut rparts.headers);
            let success = rparts.status.is_success();
            if let Some(t) = &trace {
                t.answered(
                    &route,
                    &Arc::from(model.as_str()),
                    rparts.status,
                    &mut rparts.extensions,
                );
            }
            let idle = catalog.upstream_idle_timeout;
            let mut body = ForwardBody {
                inner: incoming,
                idle,
                silence: tokio::time::sleep(idle),
                watch: recorder.map(|recorder| {
                    Box::new(Watch {
                        // A provider error answer is not billed and uses no tokens.
                        watcher: success.then(|| UsageWatcher::new(dialect, facts.0.stream)),
                        unreported: Unreported::of(&facts.0),
                        home: (success && creates).then(|| {
                            (
                                shared.homes.clone(),
                                Home {
                                    channel: route.name.clone(),
                                    model: Arc::from(model.as_str()),
                                },
                            )
                        }),
                        recorder,
                        price,
                        done: false,
                        trace,
                    })
                }),
            };
            // An empty answer is over before anyone polls it, and the layers outside
            // release at once: record now.
            if body.inner.is_end_stream() {
                if let Some(w) = body.watch.as_mut() {
                    w.record(true);
                }
            }
            Ok(Response::from_parts(rparts, body))
        })
    }
}

/// The request to the provider: the channel's URI, only the headers the allow-list
/// lets through (never a client credential) and the channel's credential.
fn upstream_request(
    catalog: &Catalog,
    route: &Route,
    parts: &mut http::request::Parts,
    body: Full<Bytes>,
) -> Result<Request<Full<Bytes>>, BoxError> {
    let uri = upstream_uri(route, &parts.uri)?;
    let mut headers = std::mem::take(&mut parts.headers);
    retain(&mut headers, |n| catalog.allow.request_allowed(route, n));
    inject_credential(route, &mut headers);
    let mut up = Request::builder()
        .method(parts.method.clone())
        .uri(uri)
        .body(body)
        .map_err(|_| upstream_failed(UpstreamFailure::Unsendable, "invalid upstream request"))?;
    *up.headers_mut() = headers;
    Ok(up)
}

/// The typed failure of a request that got no answer: a refused connection never
/// reached the provider (the error says so, and the recorder forgets its mark);
/// anything later may have (B4) and stays unknown.
fn not_answered(
    e: &hyper_util::client::legacy::Error,
    route: &Route,
    trace: Option<crate::telemetry::AttemptTrace>,
    recorder: Option<UsageRecorder>,
) -> BoxError {
    tracing::warn!(channel = %route.name, error = ?e, "upstream request failed");
    route.responses.failed();
    if let Some(t) = &trace {
        t.failed("connection");
    }
    if e.is_connect() {
        if let Some(r) = &recorder {
            r.clear();
        }
        return upstream_failed(UpstreamFailure::Connect, "connection");
    }
    upstream_failed(UpstreamFailure::Lost, "connection lost")
}

/// The provider's answer headers as the client gets them: no hop-by-hop headers, none
/// of the gateway's own (a provider cannot set them), and the provider's request id
/// (OpenAI's `x-request-id`, Anthropic's `request-id`) kept for support under its own
/// name, since the answer carries the gateway's (E3).
fn answer_headers(h: &mut HeaderMap) {
    strip_hop_by_hop(h);
    retain(h, |n| !n.as_str().starts_with(GATEWAY_PREFIX));
    let theirs = h.remove(X_REQUEST_ID);
    let anthropic = h.remove(REQUEST_ID);
    if let Some(theirs) = theirs.or(anthropic) {
        h.insert(X_UPSTREAM_REQUEST_ID, theirs);
    }
}

/// What an answer the provider reported no usage in is recorded at.
#[derive(Clone, Copy, Debug)]
enum Unreported {
    /// Unknown: pending reconciliation (B4).
    Unknown,
    /// Free whatever happened (token counting): nothing to reconcile.
    Free,
    /// The gateway's own estimate at the end of a successful answer: embeddings, whose
    /// only tokens are the input (Gemini's embeddings report no usage).
    Estimate(Usage),
}

impl Unreported {
    fn of(facts: &tollgate_dialects::RequestFacts) -> Self {
        match facts.operation {
            // A request about an object is free, whatever usage its answer shows (a
            // retrieved response repeats the usage it was billed for).
            Operation::CountTokens | Operation::Object => Unreported::Free,
            // A video job is billed its one video at creation (`per_video`).
            Operation::Video => Unreported::Estimate(Usage {
                videos: 1,
                ..Usage::default()
            }),
            Operation::Embed => Unreported::Estimate(Usage {
                input_tokens: facts.input_tokens,
                ..Usage::default()
            }),
            _ => Unreported::Unknown,
        }
    }
}

struct Watch {
    /// `None` for a provider error answer.
    watcher: Option<UsageWatcher>,
    unreported: Unreported,
    /// Where to remember the object the answer creates, and its home (P6).
    home: Option<(Arc<crate::homes::Homes>, Home)>,
    recorder: UsageRecorder,
    price: Price,
    done: bool,
    /// The attempt's span attributes (time to first chunk, tokens), when traced.
    trace: Option<crate::telemetry::AttemptTrace>,
}

impl Watch {
    /// Records what is known once, at the end of the body or when it is dropped
    /// before its end (client gone, stream cut).
    fn record(&mut self, at_end: bool) {
        if self.done {
            return;
        }
        self.done = true;
        if let (Some((homes, home)), Some(id)) = (
            self.home.take(),
            self.watcher.as_ref().and_then(UsageWatcher::object_id),
        ) {
            homes.remember(id, home);
        }
        if let Unreported::Free = self.unreported {
            self.recorder.record(Usage {
                cost: Some(0),
                ..Usage::default()
            });
            return;
        }
        let Some(w) = self.watcher.as_mut() else {
            if at_end {
                self.recorder.record(Usage {
                    cost: Some(0),
                    ..Usage::default()
                });
            } else {
                self.recorder.mark_unknown();
            }
            return;
        };
        let priced = |mut u: Usage| {
            u.cost = Some(self.price.cost(&u));
            u
        };
        let seen = match (at_end, at_end.then(|| w.finish()).flatten()) {
            (true, Some(u)) => {
                self.recorder.record(priced(u));
                Some(u)
            }
            // Ended, but the provider reported no usage: the gateway's estimate where
            // the operation has one, else the cost is unknown.
            (true, None) => match self.unreported {
                Unreported::Estimate(u) => {
                    self.recorder.record(priced(u));
                    Some(u)
                }
                _ => {
                    self.recorder.mark_unknown();
                    None
                }
            },
            (false, _) => match w.usage_so_far() {
                Some(u) => {
                    self.recorder.record_partial(priced(u));
                    Some(u)
                }
                None => {
                    self.recorder.mark_unknown();
                    None
                }
            },
        };
        if let (Some(t), Some(u)) = (self.trace.as_mut(), seen) {
            t.usage(&u);
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // A body dropped before its end (client gone, stream cut): what was seen.
        self.record(false);
    }
}

pin_project! {
    /// The upstream's response body, passed through frame by frame (backpressure is
    /// the client's), watched for usage which is recorded before the end is yielded.
    ///
    /// An upstream that sends nothing for `idle` ends the body with an error (the
    /// attempt's outcome becomes unknown): a stalled provider connection must not hold
    /// a slot, a capacity lease and a money reservation forever. Its errors are
    /// [`UpstreamError`]s: [`Idle`](UpstreamFailure::Idle), or
    /// [`Cut`](UpstreamFailure::Cut) when the provider's body broke off.
    pub struct ForwardBody {
        #[pin]
        inner: hyper::body::Incoming,
        // Boxed: the usage watcher is most of a kilobyte, and every layer above moves
        // the response (and this body in it) at least once.
        watch: Option<Box<Watch>>,
        idle: Duration,
        #[pin]
        silence: tokio::time::Sleep,
    }
}

impl Body for ForwardBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let mut inner = this.inner;
        let Poll::Ready(res) = inner.as_mut().poll_frame(cx) else {
            if this.silence.as_mut().poll(cx).is_ready() {
                if let Some(w) = this.watch.as_mut() {
                    w.record(false);
                }
                tracing::warn!(
                    idle_ms = this.idle.as_millis() as u64,
                    "upstream sent nothing for the idle timeout"
                );
                return Poll::Ready(Some(Err(Box::new(UpstreamError::new(
                    UpstreamFailure::Idle,
                )))));
            }
            return Poll::Pending;
        };
        this.silence
            .as_mut()
            .reset(tokio::time::Instant::now() + *this.idle);
        let res = res.map(|r| {
            r.map_err(|e| {
                tracing::debug!(error = %e, "upstream answer broke off");
                Box::new(UpstreamError::new(UpstreamFailure::Cut)) as BoxError
            })
        });
        if let Some(w) = this.watch.as_mut() {
            match &res {
                Some(Ok(frame)) => {
                    if let (Some(d), Some(watcher)) = (frame.data_ref(), w.watcher.as_mut()) {
                        watcher.observe(d);
                    }
                    if let (true, Some(t)) = (frame.is_data(), w.trace.as_mut()) {
                        t.chunk();
                    }
                    // Outer layers settle as soon as the end is visible: record first.
                    if inner.is_end_stream() {
                        w.record(true);
                    }
                }
                None => w.record(true),
                Some(Err(_)) => w.record(false),
            }
        }
        Poll::Ready(res)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Applies [`ResponseHeaders`].
#[derive(Clone)]
pub struct ResponseHeadersLayer {
    catalog: Arc<Catalog>,
}

impl ResponseHeadersLayer {
    /// The response allow-list of `catalog`.
    pub fn new(catalog: Arc<Catalog>) -> Self {
        Self { catalog }
    }
}

impl<S> tower::Layer<S> for ResponseHeadersLayer {
    type Service = ResponseHeaders<S>;
    fn layer(&self, inner: S) -> ResponseHeaders<S> {
        ResponseHeaders {
            inner,
            catalog: self.catalog.clone(),
        }
    }
}

/// Passes to the client only the response headers of the allow-list (SPEC P2):
/// placed right below the error mapping, so it sees every answer the layers below
/// return (a provider's, passed through) while those layers still read the provider's
/// `Retry-After` and rate-limit headers, and the gateway's own rejections (rendered
/// above it) keep theirs.
#[derive(Clone)]
pub struct ResponseHeaders<S> {
    inner: S,
    catalog: Arc<Catalog>,
}

impl<S, R, B> Service<R> for ResponseHeaders<S>
where
    S: Service<R, Response = Response<B>>,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = ResponseHeadersFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        ResponseHeadersFuture {
            inner: self.inner.call(req),
            catalog: self.catalog.clone(),
        }
    }
}

pin_project! {
    /// The future of [`ResponseHeaders`].
    pub struct ResponseHeadersFuture<F> {
        #[pin]
        inner: F,
        catalog: Arc<Catalog>,
    }
}

impl<F, B, E> Future for ResponseHeadersFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut res = std::task::ready!(this.inner.poll(cx))?;
        let allow = &this.catalog.allow;
        retain(res.headers_mut(), |n| allow.response_allowed(n));
        Poll::Ready(Ok(res))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn i14_1_retain_keeps_every_value_of_a_kept_header_and_nothing_else() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("set-cookie", "a=1"),
            ("cache-control", "no-cache"),
            ("set-cookie", "b=2"),
            ("x-keep", "1"),
            ("x-keep", "2"),
            ("server", "s"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        retain(&mut h, |n| {
            n.as_str() != "set-cookie" && n.as_str() != "server"
        });
        let kept: Vec<(&str, &str)> = h
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            kept,
            [
                ("cache-control", "no-cache"),
                ("x-keep", "1"),
                ("x-keep", "2")
            ]
        );
    }

    #[test]
    fn p2_only_priced_gemini_methods_are_served() {
        for ok in [
            "/v1beta/models/gemini-2.5-flash:generateContent",
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            "/v1/models/m:generateContent",
            "/v1/models/m:embedContent",
            "/v1beta/models/m:batchEmbedContents",
            "/v1beta/models/m:countTokens",
        ] {
            assert!(gemini_method_served(ok), "{ok}");
        }
        for no in [
            "/v1beta/models/m:batchGenerateContent",
            "/v1beta/models/m:generateAnswer",
            "/v1beta/models/m:predictLongRunning",
            "/v1beta/models/m:generateContent:embedContent",
            "/v1beta/models/:generateContent",
            "/v1beta/models/m",
            "/v1beta/models/a/b:generateContent/x",
            "/v1beta/tunedModels/m:generateContent",
        ] {
            assert!(!gemini_method_served(no), "{no}");
        }
    }

    #[test]
    fn p2_client_credentials_and_hop_by_hop_headers_never_reach_the_provider() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("authorization", "Bearer sk-client"),
            ("x-api-key", "sk-client"),
            ("x-goog-api-key", "sk-client"),
            ("proxy-authorization", "Basic Zm9v"),
            ("proxy-connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("connection", "keep-alive"),
            ("te", "trailers"),
            ("accept-encoding", "gzip"),
            ("content-length", "12"),
            ("host", "gateway.example"),
            ("content-type", "application/json"),
            ("anthropic-version", "2023-06-01"),
            ("x-request-id", "tg-1"),
        ] {
            h.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["anthropic-version", "content-type", "x-request-id"]);
    }
}
