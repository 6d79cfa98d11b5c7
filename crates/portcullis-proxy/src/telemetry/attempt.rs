//! One upstream attempt's span: what the forwarder records on it, and once per request
//! on the request span.

#[cfg(feature = "otel")]
use super::export;
use super::request::{RequestTrace, Served};
use super::{attr, provider_name};
use crate::prepare::Facts;
use http::{HeaderMap, Request};
use portcullis_core::Usage;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tracing::Span;

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
                let op = super::operation_name(uri.path());
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
