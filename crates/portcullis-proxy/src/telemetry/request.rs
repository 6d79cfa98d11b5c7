//! The request span: named by route and model, joined to a client's `traceparent`, and
//! filled with the request's facts, status and rejection.

#[cfg(feature = "otel")]
use super::export;
use super::{attr, operation_name};
use crate::config::KeyEntry;
use crate::prepare::Facts;
use http::{HeaderMap, Request, Response};
use pin_project_lite::pin_project;
use portcullis::BoxError;
use portcullis_core::Rejection;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tower::{Layer, Service};
use tracing::Span;

/// Called with the request span as it is made: names it for OpenTelemetry (a SERVER
/// span named by the method until a model route renames it) and, when
/// `accept_traceparent` (`[telemetry]`), makes it a child of the client's
/// `traceparent`.
pub(crate) fn open_request_span(
    span: &Span,
    method: &http::Method,
    headers: &HeaderMap,
    accept_traceparent: bool,
) {
    if span.is_disabled() {
        return;
    }
    #[cfg(feature = "otel")]
    {
        span.record("otel.kind", "server");
        span.record("otel.name", method.as_str());
        if accept_traceparent {
            export::join_client_trace(span, headers);
        }
    }
    #[cfg(not(feature = "otel"))]
    let _ = (method, headers, accept_traceparent);
}

/// The request span and when the request arrived, for the layers and the forwarder
/// below (a request extension; one `Arc`, cloned with every attempt's request).
#[derive(Clone)]
pub struct RequestTrace(pub(super) Arc<TraceInner>);

/// Shared with the attempts (`attempt.rs` records on the request span once).
pub(super) struct TraceInner {
    pub(super) span: Span,
    pub(super) start: Instant,
    pub(super) attempts: AtomicU32,
    pub(super) first_chunk: AtomicBool,
    pub(super) usage: AtomicBool,
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
            .is_some_and(|m| m.name() == "request" && m.target() == "portcullis_proxy::app")
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
pub(super) struct Served {
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

#[cfg(test)]
mod tests {
    use super::*;

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
            portcullis_core::GatewayCode::ConcurrencyLimit,
            portcullis_core::LayerKind::ConcurrencySlot,
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
