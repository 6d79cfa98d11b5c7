//! Traces: the request and attempt spans carry OpenTelemetry's GenAI attributes, and
//! with the `otel` feature they are exported over OTLP/gRPC ([`Exporter`]).
//!
//! The gateway's spans are `tracing` spans (debug level): the request span
//! (`tollgate_proxy::app`, one per HTTP request, a SERVER span) and one attempt span
//! per upstream attempt (`tollgate::failover`). What this module records on them:
//!
//! | attribute | on | value |
//! | --- | --- | --- |
//! | span name | request | `chat {model}` (`generate_content {model}` on Gemini routes); the method elsewhere |
//! | `gen_ai.operation.name` | request, attempt | `chat` / `generate_content` |
//! | `gen_ai.provider.name` | request (the channel that answered), attempt | `openai`, `anthropic`, `gcp.gemini` |
//! | `gen_ai.request.model`, `gen_ai.request.stream` | request, attempt | the model asked for (the attempt: the model sent, a fallback's after a switch) |
//! | `gen_ai.response.model` | request, attempt | the model sent in the attempt that answered with a success |
//! | `gen_ai.usage.input_tokens` | request, attempt | every input token: not cached + cache read + cache write, as the usage record counts them |
//! | `gen_ai.usage.cache_read.input_tokens`, `gen_ai.usage.cache_creation.input_tokens` | request, attempt | the usage record's `cached_input_tokens`, `cache_write_tokens` |
//! | `gen_ai.usage.output_tokens` | request, attempt | the usage record's `output_tokens` |
//! | `gen_ai.response.time_to_first_chunk` | request (from the request's arrival), attempt (from the attempt's send) | seconds to the provider's first body chunk; streams only |
//! | `http.response.status_code` | request, attempt | the status answered (the attempt: the provider's) |
//! | `error.type` | request, attempt | the gateway code of a rejection (`"42901"`), or the status of an error answer (`"503"`), or `timeout` / `connection` (attempt) |
//! | `tollgate.key`, `tollgate.tenant` | request | the key's label in the file (never the key) and its tenant |
//! | `tollgate.channel`, `tollgate.attempts` | request | the channel that answered; how many attempts were sent upstream |
//! | `tollgate.rejection.code`, `tollgate.rejection.layer` | request | when the gateway refused the request |
//! | `server.address`, `server.port` | attempt | the channel's host |
//!
//! A client's W3C `traceparent` (and `tracestate`) makes the request span a child of
//! the client's span (`[telemetry] accept_traceparent`); every upstream request carries
//! a `traceparent` naming its attempt span.
//!
//! Nothing here runs when the spans are disabled (no subscriber asks for debug spans
//! of the gateway): the request span is then `Span::none()` and every step below
//! checks that first.

use crate::config::KeyEntry;
use crate::prepare::Facts;
use http::{HeaderMap, Request, Response};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tollgate::BoxError;
use tollgate_core::{Dialect, Rejection, Usage};
use tower::{Layer, Service};
use tracing::Span;

// ------------------------------------------------------------------ configuration

pub use crate::config::TelemetryConfig;

/// The default export timeout.
pub const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

impl TelemetryConfig {
    /// The sampling ratio (1 when unset).
    pub fn ratio(&self) -> f64 {
        self.sampling_ratio.as_ref().map_or(1.0, |r| *r.get_ref())
    }

    /// The export timeout.
    pub fn timeout(&self) -> Duration {
        self.export_timeout
            .as_ref()
            .map_or(DEFAULT_EXPORT_TIMEOUT, |t| t.get_ref().0)
    }

    /// Checks the table: the offending value's place in the file and the reason.
    pub(crate) fn check(&self) -> Result<(), (Option<std::ops::Range<usize>>, String)> {
        if let Some(r) = &self.sampling_ratio {
            let v = *r.get_ref();
            if !(0.0..=1.0).contains(&v) {
                return Err((
                    Some(r.span()),
                    format!("telemetry.sampling_ratio must be between 0 and 1, not {v}"),
                ));
            }
        }
        if let Some(t) = &self.export_timeout {
            let d = t.get_ref().0;
            if d.is_zero() || d > Duration::from_secs(60) {
                return Err((
                    Some(t.span()),
                    "telemetry.export_timeout must be between 1ms and 60s".into(),
                ));
            }
        }
        if let Some(e) = &self.otlp_endpoint {
            check_endpoint(e.get_ref())
                .map_err(|r| (Some(e.span()), format!("telemetry.otlp_endpoint: {r}")))?;
            if !cfg!(feature = "otel") {
                return Err((
                    Some(e.span()),
                    "telemetry.otlp_endpoint is set, but this build exports no traces: \
                     build tollgate with the `otel` feature"
                        .into(),
                ));
            }
        }
        if self.service_name.as_deref().is_some_and(str::is_empty) {
            return Err((None, "telemetry.service_name must not be empty".into()));
        }
        Ok(())
    }
}

/// An OTLP/gRPC endpoint: `http://` or `https://`, a host, no path, query or fragment
/// (gRPC names the service in the path itself).
pub fn check_endpoint(e: &str) -> Result<(), String> {
    let uri: http::Uri = e
        .parse()
        .map_err(|err| format!("{e:?} is not a URL ({err})"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(format!("{e:?} must start with http:// or https://")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{e:?} names no host"));
    }
    if !uri.path().trim_matches('/').is_empty() || uri.query().is_some() {
        return Err(format!(
            "{e:?} must be the collector's address only (no path or query)"
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------ attribute names

/// The attribute names this module records (the request span declares each one as a
/// field; an attempt span gets them as OpenTelemetry attributes).
pub mod attr {
    /// `chat` or `generate_content`.
    pub const OPERATION: &str = "gen_ai.operation.name";
    /// `openai`, `anthropic`, `gcp.gemini`.
    pub const PROVIDER: &str = "gen_ai.provider.name";
    /// The model asked for.
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    /// Whether the answer is streamed.
    pub const REQUEST_STREAM: &str = "gen_ai.request.stream";
    /// The model that answered.
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    /// Every input token.
    pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    /// Input tokens read from the provider's cache.
    pub const CACHE_READ_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
    /// Input tokens written to the provider's cache.
    pub const CACHE_CREATION_TOKENS: &str = "gen_ai.usage.cache_creation.input_tokens";
    /// Output tokens.
    pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    /// Seconds to the first chunk of a stream.
    pub const TIME_TO_FIRST_CHUNK: &str = "gen_ai.response.time_to_first_chunk";
    /// The HTTP status answered.
    pub const STATUS_CODE: &str = "http.response.status_code";
    /// A low-cardinality name of the error.
    pub const ERROR_TYPE: &str = "error.type";
    /// The key's label.
    pub const KEY: &str = "tollgate.key";
    /// The key's tenant.
    pub const TENANT: &str = "tollgate.tenant";
    /// The channel that answered.
    pub const CHANNEL: &str = "tollgate.channel";
    /// Attempts sent upstream.
    pub const ATTEMPTS: &str = "tollgate.attempts";
    /// The gateway code of a rejection.
    pub const REJECTION_CODE: &str = "tollgate.rejection.code";
    /// The layer that rejected.
    pub const REJECTION_LAYER: &str = "tollgate.rejection.layer";
    /// The upstream host.
    pub const SERVER_ADDRESS: &str = "server.address";
    /// The upstream port.
    pub const SERVER_PORT: &str = "server.port";
}

/// `gen_ai.provider.name` of a channel's dialect.
pub fn provider_name(d: Dialect) -> &'static str {
    match d {
        Dialect::OpenAi => "openai",
        Dialect::Anthropic => "anthropic",
        Dialect::Gemini => "gcp.gemini",
        Dialect::Native => "tollgate",
    }
}

/// `gen_ai.operation.name` of a model route: Gemini's `generateContent` methods are
/// `generate_content`, the chat routes `chat`.
pub fn operation_name(path: &str) -> &'static str {
    match Dialect::from_path(path) {
        Dialect::Gemini => "generate_content",
        _ => "chat",
    }
}

// ------------------------------------------------------------------ the request span

/// Called with the request span as it is made: names it for OpenTelemetry (a SERVER
/// span named by the method until a model route renames it) and, when allowed, makes
/// it a child of the client's `traceparent`.
pub(crate) fn open_request_span(span: &Span, method: &http::Method, headers: &HeaderMap) {
    if span.is_disabled() {
        return;
    }
    #[cfg(feature = "otel")]
    {
        span.record("otel.kind", "server");
        span.record("otel.name", method.as_str());
        if ACCEPT_TRACEPARENT.load(Ordering::Relaxed) {
            export::join_client_trace(span, headers);
        }
    }
    #[cfg(not(feature = "otel"))]
    let _ = (method, headers);
}

/// `[telemetry] accept_traceparent` of the running exporter.
#[cfg(feature = "otel")]
static ACCEPT_TRACEPARENT: AtomicBool = AtomicBool::new(true);

/// The request span and when the request arrived, for the layers and the forwarder
/// below (a request extension; one `Arc`, cloned with every attempt's request).
#[derive(Clone)]
pub struct RequestTrace(Arc<TraceInner>);

struct TraceInner {
    span: Span,
    start: Instant,
    attempts: AtomicU32,
    first_chunk: AtomicBool,
    usage: AtomicBool,
}

impl RequestTrace {
    fn new(span: Span) -> Self {
        Self(Arc::new(TraceInner {
            span,
            start: Instant::now(),
            attempts: AtomicU32::new(0),
            first_chunk: AtomicBool::new(false),
            usage: AtomicBool::new(false),
        }))
    }

    /// The request span.
    pub fn span(&self) -> &Span {
        &self.0.span
    }

    fn record_attempts(&self) {
        let n = self.0.attempts.load(Ordering::Relaxed);
        if n > 0 {
            self.0.span.record(attr::ATTEMPTS, i64::from(n));
        }
    }

    fn rejected(&self, e: &(dyn std::error::Error + 'static)) {
        let span = &self.0.span;
        match find_rejection(e) {
            Some(r) => {
                let code = r.code().code();
                span.record(attr::REJECTION_CODE, i64::from(code));
                span.record(attr::REJECTION_LAYER, r.layer().as_str());
                span.record(attr::ERROR_TYPE, code.to_string().as_str());
            }
            None => {
                span.record(attr::ERROR_TYPE, "_OTHER");
            }
        }
        self.record_attempts();
    }

    fn answered<B>(&self, res: &Response<B>) {
        let span = &self.0.span;
        if let Some(s) = res.extensions().get::<Served>() {
            span.record(attr::PROVIDER, s.provider);
            span.record(attr::CHANNEL, &*s.channel);
            if res.status().is_success() {
                span.record(attr::RESPONSE_MODEL, &*s.model);
            }
        }
        if res.status().as_u16() >= 400 {
            span.record(attr::ERROR_TYPE, res.status().as_str());
        }
        self.record_attempts();
    }
}

/// The rejection in an error or its `source()` chain.
fn find_rejection<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a Rejection> {
    let mut at = Some(e);
    for _ in 0..16 {
        let e = at?;
        if let Some(r) = e.downcast_ref::<Rejection>() {
            return Some(r);
        }
        at = e.source();
    }
    None
}

/// Puts a [`RequestTrace`] on each request of the model routes and records, on the
/// request span, the rejection a layer below answered with (its code and layer) or
/// the channel and model that answered. Placed right below the error mapping.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestTraceLayer;

impl<S> Layer<S> for RequestTraceLayer {
    type Service = RequestTraced<S>;
    fn layer(&self, inner: S) -> RequestTraced<S> {
        RequestTraced { inner }
    }
}

/// The service of [`RequestTraceLayer`].
#[derive(Clone, Debug)]
pub struct RequestTraced<S> {
    inner: S,
}

impl<S, B, R> Service<Request<B>> for RequestTraced<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Error: Into<BoxError>,
{
    type Response = Response<R>;
    type Error = BoxError;
    type Future = RequestTracedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        // Called inside the request span (tower-http's trace layer enters it); a span
        // of someone else's (an application wrapping the router) is left alone.
        let current = Span::current();
        let trace = current
            .metadata()
            .is_some_and(|m| m.name() == "request" && m.target() == "tollgate_proxy::app")
            .then(|| RequestTrace::new(current));
        if let Some(t) = &trace {
            req.extensions_mut().insert(t.clone());
        }
        RequestTracedFuture {
            inner: self.inner.call(req),
            trace,
        }
    }
}

pin_project! {
    /// The future of [`RequestTraced`].
    pub struct RequestTracedFuture<F> {
        #[pin]
        inner: F,
        trace: Option<RequestTrace>,
    }
}

impl<F, R, E> Future for RequestTracedFuture<F>
where
    F: Future<Output = Result<Response<R>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<R>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let out = ready!(this.inner.poll(cx)).map_err(Into::into);
        if let Some(t) = this.trace.take() {
            match &out {
                Ok(res) => t.answered(res),
                Err(e) => t.rejected(&**e),
            }
        }
        Poll::Ready(out)
    }
}

/// After the body is read and the key known: names the request span `chat {model}`
/// and records the model, the stream flag, the key's label and its tenant.
pub(crate) fn record_request<B>(req: Request<B>) -> Request<B> {
    let Some(t) = req.extensions().get::<RequestTrace>() else {
        return req;
    };
    let span = t.span();
    let op = operation_name(req.uri().path());
    span.record(attr::OPERATION, op);
    if let Some(Facts(f)) = req.extensions().get::<Facts>() {
        #[cfg(feature = "otel")]
        span.record("otel.name", format!("{op} {}", f.model).as_str());
        span.record(attr::REQUEST_MODEL, f.model.as_str());
        span.record(attr::REQUEST_STREAM, f.stream);
    }
    if let Some(entry) = req.extensions().get::<Arc<KeyEntry>>() {
        span.record(attr::KEY, &*entry.label);
        if let Some(tenant) = entry.subject.tenant.as_deref() {
            span.record(attr::TENANT, tenant);
        }
    }
    req
}

/// The channel that answered an attempt (a response extension the forwarder sets
/// while tracing), read by [`RequestTraceLayer`] from the answer that reaches it.
#[derive(Clone, Debug)]
pub(crate) struct Served {
    pub(crate) channel: Arc<str>,
    pub(crate) provider: &'static str,
    pub(crate) model: Arc<str>,
}

/// Records `http.response.status_code` on the request span (and marks a 5xx answer
/// an error, as OpenTelemetry does for SERVER spans), then logs as tower-http does.
#[derive(Clone, Debug, Default)]
pub struct RecordStatus(tower_http::trace::DefaultOnResponse);

impl<B> tower_http::trace::OnResponse<B> for RecordStatus {
    fn on_response(self, response: &Response<B>, latency: Duration, span: &Span) {
        if !span.is_disabled() {
            let status = response.status().as_u16();
            span.record(attr::STATUS_CODE, i64::from(status));
            #[cfg(feature = "otel")]
            if status >= 500 {
                span.record("otel.status_code", "error");
            }
        }
        self.0.on_response(response, latency, span);
    }
}

// ------------------------------------------------------------------ one attempt

/// What the forwarder records about one attempt: on the attempt span (as OpenTelemetry
/// attributes) and, once per request, on the request span.
pub(crate) struct AttemptTrace {
    request: RequestTrace,
    /// The attempt span, when it is not the request span itself (a gateway without
    /// failover has none).
    #[cfg_attr(not(feature = "otel"), allow(dead_code))]
    attempt: Option<Span>,
    #[cfg_attr(not(feature = "otel"), allow(dead_code))]
    sent: Instant,
    stream: bool,
    first_chunk: bool,
    usage: bool,
}

impl AttemptTrace {
    /// The attempt of the request that `req` carries, made in the current span (the
    /// attempt span); `None` when the request is not traced.
    pub(crate) fn of<B>(req: &Request<B>) -> Option<Self> {
        let request = req.extensions().get::<RequestTrace>()?.clone();
        let current = Span::current();
        let attempt =
            (!current.is_disabled() && current.id() != request.span().id()).then_some(current);
        let stream = req
            .extensions()
            .get::<Facts>()
            .is_some_and(|Facts(f)| f.stream);
        Some(Self {
            request,
            attempt,
            sent: Instant::now(),
            stream,
            first_chunk: false,
            usage: false,
        })
    }

    /// The attempt goes to `route` with `model`: the attempt's attributes, and its
    /// `traceparent` in the upstream request's headers.
    pub(crate) fn sending(
        &self,
        route: &crate::catalog::Route,
        model: &str,
        uri: &http::Uri,
        headers: &mut HeaderMap,
    ) {
        self.request.0.attempts.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "otel")]
        {
            use tracing_opentelemetry::OpenTelemetrySpanExt;
            let span = self.attempt.as_ref().unwrap_or(self.request.span());
            if let Some(a) = &self.attempt {
                // Named like the request span, as the client side of the provider call.
                let op = operation_name(uri.path());
                a.record("otel.kind", "client");
                a.record("otel.name", format!("{op} {model}").as_str());
                a.set_attribute(attr::OPERATION, op);
                a.set_attribute(attr::PROVIDER, provider_name(route.dialect));
                a.set_attribute(attr::REQUEST_MODEL, model.to_owned());
                a.set_attribute(attr::REQUEST_STREAM, self.stream);
                if let Some(host) = uri.host() {
                    a.set_attribute(attr::SERVER_ADDRESS, host.to_owned());
                }
                if let Some(port) = uri.port_u16().or(match uri.scheme_str() {
                    Some("https") => Some(443),
                    Some("http") => Some(80),
                    _ => None,
                }) {
                    a.set_attribute(attr::SERVER_PORT, i64::from(port));
                }
            }
            export::inject(span, headers);
        }
        #[cfg(not(feature = "otel"))]
        let _ = (route, model, uri, headers);
    }

    /// The provider answered with `status`: the attempt's status, and what the request
    /// span reads from the answer that reaches it.
    pub(crate) fn answered(
        &self,
        route: &crate::catalog::Route,
        model: &Arc<str>,
        status: http::StatusCode,
        extensions: &mut http::Extensions,
    ) {
        #[cfg(feature = "otel")]
        if let Some(a) = &self.attempt {
            use tracing_opentelemetry::OpenTelemetrySpanExt;
            a.set_attribute(attr::STATUS_CODE, i64::from(status.as_u16()));
            if status.is_success() {
                a.set_attribute(attr::RESPONSE_MODEL, model.to_string());
            } else if status.as_u16() >= 400 {
                a.set_attribute(attr::ERROR_TYPE, status.as_str().to_owned());
            }
        }
        #[cfg(not(feature = "otel"))]
        let _ = status;
        extensions.insert(Served {
            channel: route.name.clone(),
            provider: provider_name(route.dialect),
            model: model.clone(),
        });
    }

    /// The attempt got no answer: `why` is `timeout` or `connection`.
    pub(crate) fn failed(&self, why: &'static str) {
        #[cfg(feature = "otel")]
        if let Some(a) = &self.attempt {
            use tracing_opentelemetry::OpenTelemetrySpanExt;
            a.set_attribute(attr::ERROR_TYPE, why);
        }
        #[cfg(not(feature = "otel"))]
        let _ = why;
    }

    /// A body chunk arrived: the first one of a stream sets the time to first chunk
    /// (on the request span, once per request: a failover replays only before it).
    pub(crate) fn chunk(&mut self) {
        if self.first_chunk || !self.stream {
            return;
        }
        self.first_chunk = true;
        #[cfg(feature = "otel")]
        if let Some(a) = &self.attempt {
            use tracing_opentelemetry::OpenTelemetrySpanExt;
            a.set_attribute(attr::TIME_TO_FIRST_CHUNK, self.sent.elapsed().as_secs_f64());
        }
        let r = &self.request.0;
        if !r.first_chunk.swap(true, Ordering::Relaxed) {
            r.span
                .record(attr::TIME_TO_FIRST_CHUNK, r.start.elapsed().as_secs_f64());
        }
    }

    /// The usage the attempt's answer reported (the figures its usage record holds).
    pub(crate) fn usage(&mut self, u: &Usage) {
        if self.usage {
            return;
        }
        self.usage = true;
        let input = u
            .input_tokens
            .saturating_add(u.cached_input_tokens)
            .saturating_add(u.cache_write_tokens);
        #[cfg(feature = "otel")]
        if let Some(a) = &self.attempt {
            use tracing_opentelemetry::OpenTelemetrySpanExt;
            a.set_attribute(attr::INPUT_TOKENS, clamp(input));
            a.set_attribute(attr::CACHE_READ_TOKENS, clamp(u.cached_input_tokens));
            a.set_attribute(attr::CACHE_CREATION_TOKENS, clamp(u.cache_write_tokens));
            a.set_attribute(attr::OUTPUT_TOKENS, clamp(u.output_tokens));
        }
        let r = &self.request.0;
        if !r.usage.swap(true, Ordering::Relaxed) {
            r.span.record(attr::INPUT_TOKENS, clamp(input));
            r.span
                .record(attr::CACHE_READ_TOKENS, clamp(u.cached_input_tokens));
            r.span
                .record(attr::CACHE_CREATION_TOKENS, clamp(u.cache_write_tokens));
            r.span.record(attr::OUTPUT_TOKENS, clamp(u.output_tokens));
        }
    }
}

/// A count as an OpenTelemetry integer (signed: tracing-opentelemetry exports
/// unsigned values as strings).
fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

// ------------------------------------------------------------------ the exporter

#[cfg(feature = "otel")]
pub use export::Exporter;

#[cfg(feature = "otel")]
mod export {
    use super::{ACCEPT_TRACEPARENT, TelemetryConfig, check_endpoint};
    use http::{HeaderMap, HeaderName, HeaderValue};
    use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
    use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
    use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    use tracing::{Level, Span, Subscriber};
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::{FilterFn, LevelFilter};
    use tracing_subscriber::registry::LookupSpan;

    /// The OTLP trace exporter: a batch of finished spans goes to the collector from a
    /// thread of its own, so no request waits on it; a collector that is down costs
    /// the spans of that batch, never a request.
    ///
    /// ```no_run
    /// # fn run(config: &tollgate_proxy::Config) -> Result<(), String> {
    /// use tracing_subscriber::layer::SubscriberExt;
    /// use tracing_subscriber::util::SubscriberInitExt;
    /// // Inside a Tokio runtime: the gRPC channel runs on it.
    /// let exporter = tollgate_proxy::telemetry::Exporter::start(&config.raw.telemetry)?;
    /// tracing_subscriber::registry()
    ///     .with(exporter.as_ref().map(|e| e.layer()))
    ///     .init();
    /// // … serve; at the end:
    /// if let Some(e) = exporter {
    ///     e.shutdown(std::time::Duration::from_secs(5))?;
    /// }
    /// # Ok(()) }
    /// ```
    pub struct Exporter {
        provider: SdkTracerProvider,
        endpoint: String,
    }

    impl std::fmt::Debug for Exporter {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Exporter")
                .field("endpoint", &self.endpoint)
                .finish_non_exhaustive()
        }
    }

    /// The crates whose spans and events are exported (not the bundled fake upstream's).
    const OURS: [&str; 5] = [
        "tollgate",
        "tollgate_proxy",
        "tollgate_core",
        "tollgate_redis",
        "tollgate_dialects",
    ];

    /// The standard variables, in the order they are read.
    const ENDPOINT_VARS: [&str; 2] = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ];
    const PROTOCOL_VARS: [&str; 2] = [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ];

    fn var(name: &str) -> Option<String> {
        std::env::var(name)
            .ok()
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    /// The collector: the file's, else the standard variables' as `var` reads them
    /// (`None`: no export).
    pub(super) fn endpoint(
        cfg: &TelemetryConfig,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<String>, String> {
        if let Some(e) = &cfg.otlp_endpoint {
            return Ok(Some(e.get_ref().clone()));
        }
        let Some((name, value)) = ENDPOINT_VARS.iter().find_map(|n| var(n).map(|v| (*n, v))) else {
            return Ok(None);
        };
        check_endpoint(&value).map_err(|r| format!("{name}: {r}"))?;
        if let Some((pname, p)) = PROTOCOL_VARS.iter().find_map(|n| var(n).map(|v| (*n, v))) {
            if p != "grpc" {
                return Err(format!(
                    "{pname}={p}: tollgate exports over OTLP/gRPC only (`grpc`)"
                ));
            }
        }
        Ok(Some(value))
    }

    impl Exporter {
        /// Starts exporting to the configured collector; `Ok(None)` when none is
        /// configured (nor in the environment) or `OTEL_SDK_DISABLED=true`. Call it
        /// inside a Tokio runtime, which then carries the gRPC connection.
        pub fn start(cfg: &TelemetryConfig) -> Result<Option<Self>, String> {
            if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
                return Ok(None);
            }
            let Some(endpoint) = endpoint(cfg, var)? else {
                return Ok(None);
            };
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.clone())
                .with_timeout(cfg.timeout());
            if endpoint.starts_with("https://") {
                builder = builder.with_tls_config(
                    opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new()
                        .with_webpki_roots(),
                );
            }
            let exporter = builder
                .build()
                .map_err(|e| format!("OTLP exporter for {endpoint}: {e}"))?;
            let mut resource = opentelemetry_sdk::Resource::builder().with_attribute(
                opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            );
            match (&cfg.service_name, var("OTEL_SERVICE_NAME")) {
                (Some(name), _) => resource = resource.with_service_name(name.clone()),
                // The resource builder reads `OTEL_SERVICE_NAME` itself.
                (None, Some(_)) => {}
                (None, None) => resource = resource.with_service_name("tollgate"),
            }
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                    cfg.ratio(),
                ))))
                .with_resource(resource.build())
                .build();
            ACCEPT_TRACEPARENT.store(cfg.accept_traceparent, Ordering::Relaxed);
            Ok(Some(Self { provider, endpoint }))
        }

        /// The collector's address.
        pub fn endpoint(&self) -> &str {
            &self.endpoint
        }

        /// The `tracing` layer that turns the gateway's spans into OpenTelemetry
        /// spans: the request and attempt spans (debug level, the gateway's crates) and,
        /// as span events, the gateway's log events of info level and above within
        /// them. Nothing else (not other crates' spans, not debug events).
        pub fn layer<S>(&self) -> Box<dyn Layer<S> + Send + Sync + 'static>
        where
            S: Subscriber + Send + Sync + for<'a> LookupSpan<'a>,
        {
            let tracer = self.provider.tracer("tollgate");
            let filter = FilterFn::new(|m| {
                let krate = m.target().split("::").next().unwrap_or_default();
                OURS.contains(&krate)
                    && if m.is_span() {
                        *m.level() <= Level::DEBUG
                    } else {
                        *m.level() <= Level::INFO
                    }
            })
            .with_max_level_hint(LevelFilter::DEBUG);
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_location(false)
                .with_threads(false)
                .with_tracked_inactivity(false)
                .with_filter(filter)
                .boxed()
        }

        /// Sends every finished span now; returns when the collector has them (or the
        /// export failed or timed out). Blocks: call it outside the runtime's threads
        /// (`spawn_blocking`).
        pub fn flush(&self) -> Result<(), String> {
            self.provider
                .force_flush()
                .map_err(|e| format!("flushing spans to {}: {e}", self.endpoint))
        }

        /// Sends what is left and stops, waiting at most `timeout`. Blocks like
        /// [`flush`](Self::flush).
        pub fn shutdown(self, timeout: Duration) -> Result<(), String> {
            self.provider
                .shutdown_with_timeout(timeout)
                .map_err(|e| format!("stopping the span export to {}: {e}", self.endpoint))
        }
    }

    struct Headers<'a>(&'a HeaderMap);

    impl Extractor for Headers<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(|v| v.to_str().ok())
        }
        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(HeaderName::as_str).collect()
        }
    }

    struct HeadersMut<'a>(&'a mut HeaderMap);

    impl Injector for HeadersMut<'_> {
        fn set(&mut self, key: &str, value: String) {
            if let (Ok(k), Ok(v)) = (
                HeaderName::try_from(key),
                HeaderValue::try_from(value.as_str()),
            ) {
                self.0.insert(k, v);
            }
        }
    }

    /// Makes `span` a child of the span a valid `traceparent` in `headers` names.
    pub(super) fn join_client_trace(span: &Span, headers: &HeaderMap) {
        if !headers.contains_key("traceparent") {
            return;
        }
        let cx = TraceContextPropagator::new().extract(&Headers(headers));
        if cx.span().span_context().is_valid() {
            span.set_parent(cx);
        }
    }

    /// Puts `span`'s `traceparent` (and the trace's `tracestate`) in `headers`,
    /// replacing any the client sent.
    pub(super) fn inject(span: &Span, headers: &mut HeaderMap) {
        let cx = span.context();
        if cx.span().span_context().is_valid() {
            headers.remove("tracestate");
            TraceContextPropagator::new().inject_context(&cx, &mut HeadersMut(headers));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "otel")]
    #[test]
    fn the_file_endpoint_wins_else_the_standard_variables_are_read() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let file: TelemetryConfig =
            toml::from_str("otlp_endpoint = \"http://127.0.0.1:4317\"").unwrap();
        let none = TelemetryConfig::default();
        let all = env(&[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://127.0.0.1:14317",
            ),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:24317"),
        ]);
        assert_eq!(
            export::endpoint(&file, all).unwrap().as_deref(),
            Some("http://127.0.0.1:4317")
        );
        assert_eq!(
            export::endpoint(&none, all).unwrap().as_deref(),
            Some("http://127.0.0.1:14317"),
            "the traces variable before the general one"
        );
        let general = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:24317")]);
        assert_eq!(
            export::endpoint(&none, general).unwrap().as_deref(),
            Some("http://127.0.0.1:24317")
        );
        assert_eq!(
            export::endpoint(&none, env(&[])).unwrap(),
            None,
            "no export"
        );
        let bad = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4317")]);
        let e = export::endpoint(&none, bad).unwrap_err();
        assert!(e.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT: "), "{e}");
        let http = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ]);
        let e = export::endpoint(&none, http).unwrap_err();
        assert!(e.contains("OTLP/gRPC only"), "{e}");
        let grpc = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
        ]);
        assert!(export::endpoint(&none, grpc).unwrap().is_some());
    }

    #[test]
    fn otlp_endpoint_must_be_an_http_address_without_a_path() {
        for ok in [
            "http://127.0.0.1:4317",
            "https://collector.example:4317",
            "http://[::1]:4317/",
        ] {
            assert_eq!(check_endpoint(ok), Ok(()), "{ok}");
        }
        for bad in [
            "127.0.0.1:4317",
            "grpc://127.0.0.1:4317",
            "http://",
            "http://127.0.0.1:4318/v1/traces",
            "http://127.0.0.1:4317?x=1",
            "not a url",
        ] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn provider_names_follow_the_genai_registry() {
        assert_eq!(provider_name(Dialect::OpenAi), "openai");
        assert_eq!(provider_name(Dialect::Anthropic), "anthropic");
        assert_eq!(provider_name(Dialect::Gemini), "gcp.gemini");
        assert_eq!(operation_name("/v1/chat/completions"), "chat");
        assert_eq!(operation_name("/v1/messages"), "chat");
        assert_eq!(
            operation_name("/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
            "generate_content"
        );
    }

    #[test]
    fn a_rejection_is_found_behind_a_wrapping_error() {
        #[derive(Debug)]
        struct Wrap(Rejection);
        impl std::fmt::Display for Wrap {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("wrapped")
            }
        }
        impl std::error::Error for Wrap {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let r = Rejection::new(
            tollgate_core::GatewayCode::ConcurrencyLimit,
            tollgate_core::LayerKind::ConcurrencySlot,
        );
        let w = Wrap(r);
        assert_eq!(
            find_rejection(&w).map(|r| r.code().code()),
            Some(42901),
            "the rejection behind the wrapper"
        );
        let plain = std::io::Error::other("no rejection");
        assert!(find_rejection(&plain).is_none());
    }
}
