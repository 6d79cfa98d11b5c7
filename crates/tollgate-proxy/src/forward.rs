//! Sends a prepared request to a channel and streams the answer back, watching it for
//! usage (SPEC P2, W5).

use crate::catalog::{Catalog, Route};
use crate::prepare::Facts;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
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
use tollgate_core::{Dialect, GatewayCode, LayerKind, Price, Rejection, Usage, UsageRecorder};
use tollgate_dialects::UsageWatcher;
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
}

impl Forward {
    /// A forwarder on `client` and `catalog`.
    pub fn new(client: HttpClient, catalog: Arc<Catalog>) -> Self {
        Self(Arc::new(Shared { client, catalog }))
    }
}

fn upstream_failed(why: &str) -> BoxError {
    tracing::warn!("upstream attempt failed: {why}");
    Box::new(Rejection::new(
        GatewayCode::UpstreamFailed,
        LayerKind::Failover,
    ))
}

/// Headers a client must not pass to a provider: its own credentials, hop-by-hop
/// headers, and what the client library recomputes.
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

/// The provider's request id, kept for support as `x-upstream-request-id`.
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

fn strip_hop_by_hop(h: &mut HeaderMap) {
    for name in STRIP.iter() {
        h.remove(name);
    }
}

/// The upstream URI: the channel's base URL + the client's path and query, without a
/// `key=` query parameter (a Gemini client credential).
fn upstream_uri(route: &Route, uri: &Uri) -> Result<Uri, BoxError> {
    let mut s = String::with_capacity(route.base_url.len() + 64);
    s.push_str(&route.base_url);
    s.push_str(uri.path());
    if let Some(q) = uri.query() {
        let kept: Vec<&str> = q.split('&').filter(|kv| !kv.starts_with("key=")).collect();
        if !kept.is_empty() {
            s.push('?');
            s.push_str(&kept.join("&"));
        }
    }
    s.parse()
        .map_err(|_| upstream_failed("invalid upstream URI"))
}

fn inject_credential(route: &Route, h: &mut HeaderMap) {
    let Some(cred) = route.credential.clone() else {
        return;
    };
    match route.dialect {
        Dialect::OpenAi | Dialect::Native => {
            h.insert(header::AUTHORIZATION, cred);
        }
        Dialect::Anthropic => {
            h.insert("x-api-key", cred);
            h.entry("anthropic-version")
                .or_insert(HeaderValue::from_static("2023-06-01"));
        }
        Dialect::Gemini => {
            h.insert("x-goog-api-key", cred);
        }
    }
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
            let uri = upstream_uri(&route, &parts.uri)?;
            let mut headers = std::mem::take(&mut parts.headers);
            strip_hop_by_hop(&mut headers);
            inject_credential(&route, &mut headers);
            let mut up = Request::builder()
                .method(parts.method.clone())
                .uri(uri)
                .body(body)
                .map_err(|_| upstream_failed("invalid upstream request"))?;
            *up.headers_mut() = headers;
            if let Some(r) = &recorder {
                r.set_channel(route.name.clone());
                // From here on the provider may see the request (B4).
                r.mark_unknown();
            }
            let res = match tokio::time::timeout(catalog.upstream_timeout, client.request(up)).await
            {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    tracing::warn!(channel = %route.name, error = ?e, "upstream request failed");
                    route.responses.failed();
                    // A refused connection never reached the provider; anything later
                    // may have (B4) and stays unknown.
                    if e.is_connect() {
                        if let Some(r) = &recorder {
                            r.clear();
                        }
                    }
                    return Err(upstream_failed("connection"));
                }
                Err(_) => {
                    tracing::warn!(channel = %route.name, "upstream response head timed out");
                    route.responses.failed();
                    return Err(upstream_failed("timeout"));
                }
            };
            route.responses.answered(res.status().as_u16());
            let (mut rparts, incoming) = res.into_parts();
            strip_hop_by_hop(&mut rparts.headers);
            // The answer carries the gateway's request id (E3); the provider's is kept
            // for support under its own name.
            if let Some(theirs) = rparts.headers.remove(X_REQUEST_ID) {
                rparts.headers.insert("x-upstream-request-id", theirs);
            }
            let success = rparts.status.is_success();
            let idle = catalog.upstream_idle_timeout;
            let mut body = ForwardBody {
                inner: incoming,
                idle,
                silence: tokio::time::sleep(idle),
                watch: recorder.map(|recorder| {
                    Box::new(Watch {
                        // A provider error answer is not billed and uses no tokens.
                        watcher: success.then(|| UsageWatcher::new(dialect, facts.0.stream)),
                        recorder,
                        price,
                        done: false,
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

struct Watch {
    /// `None` for a provider error answer.
    watcher: Option<UsageWatcher>,
    recorder: UsageRecorder,
    price: Price,
    done: bool,
}

impl Watch {
    /// Records what is known once, at the end of the body or when it is dropped
    /// before its end (client gone, stream cut).
    fn record(&mut self, at_end: bool) {
        if self.done {
            return;
        }
        self.done = true;
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
        match (at_end, at_end.then(|| w.finish()).flatten()) {
            (true, Some(u)) => self.recorder.record(priced(u)),
            // Ended, but the provider reported no usage: the cost is unknown.
            (true, None) => self.recorder.mark_unknown(),
            (false, _) => match w.usage_so_far() {
                Some(u) => self.recorder.record_partial(priced(u)),
                None => self.recorder.mark_unknown(),
            },
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
    /// a slot, a capacity lease and a money reservation forever.
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

/// The upstream sent nothing for too long.
#[derive(Debug)]
pub struct UpstreamIdle(Duration);

impl std::fmt::Display for UpstreamIdle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "upstream sent nothing for {} ms", self.0.as_millis())
    }
}

impl std::error::Error for UpstreamIdle {}

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
                return Poll::Ready(Some(Err(Box::new(UpstreamIdle(*this.idle)))));
            }
            return Poll::Pending;
        };
        this.silence
            .as_mut()
            .reset(tokio::time::Instant::now() + *this.idle);
        let res = res.map(|r| r.map_err(BoxError::from));
        if let Some(w) = this.watch.as_mut() {
            match &res {
                Some(Ok(frame)) => {
                    if let (Some(d), Some(watcher)) = (frame.data_ref(), w.watcher.as_mut()) {
                        watcher.observe(d);
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

#[cfg(test)]
mod tests {
    use super::*;

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
