//! The OTLP/gRPC exporter (feature `otel`) and W3C trace-context propagation.

use super::{TelemetrySettings, check_endpoint};
use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
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
/// # fn run(config: &portcullis_proxy::Config) -> Result<(), String> {
/// use tracing_subscriber::layer::SubscriberExt;
/// use tracing_subscriber::util::SubscriberInitExt;
/// // Inside a Tokio runtime: the gRPC channel runs on it.
/// let exporter = portcullis_proxy::telemetry::Exporter::start(config.telemetry())?;
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
    "portcullis",
    "portcullis_proxy",
    "portcullis_core",
    "portcullis_redis",
    "portcullis_dialects",
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
    cfg: &TelemetrySettings,
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, String> {
    if let Some(e) = &cfg.otlp_endpoint {
        return Ok(Some(e.clone()));
    }
    let Some((name, value)) = ENDPOINT_VARS.iter().find_map(|n| var(n).map(|v| (*n, v))) else {
        return Ok(None);
    };
    check_endpoint(&value).map_err(|r| format!("{name}: {r}"))?;
    if let Some((pname, p)) = PROTOCOL_VARS.iter().find_map(|n| var(n).map(|v| (*n, v))) {
        if p != "grpc" {
            return Err(format!(
                "{pname}={p}: portcullis exports over OTLP/gRPC only (`grpc`)"
            ));
        }
    }
    Ok(Some(value))
}

impl Exporter {
    /// Starts exporting to the configured collector; `Ok(None)` when none is
    /// configured (nor in the environment) or `OTEL_SDK_DISABLED=true`. Call it
    /// inside a Tokio runtime, which then carries the gRPC connection.
    pub fn start(cfg: &TelemetrySettings) -> Result<Option<Self>, String> {
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let Some(endpoint) = endpoint(cfg, var)? else {
            return Ok(None);
        };
        let mut builder = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint.clone())
            .with_timeout(cfg.export_timeout);
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
            (None, None) => resource = resource.with_service_name("portcullis"),
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                cfg.sampling_ratio,
            ))))
            .with_resource(resource.build())
            .build();
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
        let tracer = self.provider.tracer("portcullis");
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
