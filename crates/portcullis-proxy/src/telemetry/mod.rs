//! Traces: the request and attempt spans carry OpenTelemetry's GenAI attributes, and
//! with the `otel` feature they are exported over OTLP/gRPC ([`Exporter`]).
//!
//! The gateway's spans are `tracing` spans (debug level): the request span
//! (`portcullis_proxy::app`, one per HTTP request, a SERVER span) and one attempt span
//! per upstream attempt (`portcullis::failover`). What this module records on them:
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
//! | `portcullis.key`, `portcullis.tenant` | request | the key's label in the file (never the key) and its tenant |
//! | `portcullis.channel`, `portcullis.attempts` | request | the channel that answered; how many attempts were sent upstream |
//! | `portcullis.rejection.code`, `portcullis.rejection.layer` | request | when the gateway refused the request |
//! | `server.address`, `server.port` | attempt | the channel's host |
//!
//! A client's W3C `traceparent` (and `tracestate`) makes the request span a child of
//! the client's span (`[telemetry] accept_traceparent` of the configuration the router
//! was built with); every upstream request carries a `traceparent` naming its attempt
//! span.
//!
//! Nothing here runs when the spans are disabled (no subscriber asks for debug spans
//! of the gateway): the request span is then `Span::none()` and every step below
//! checks that first.

mod attempt;
#[cfg(feature = "otel")]
mod export;
mod request;

pub(crate) use attempt::AttemptTrace;
pub use request::{RecordStatus, RequestTrace, RequestTraceLayer, RequestTraced};
pub(crate) use request::{open_request_span, record_request};

use portcullis_core::Dialect;

// ------------------------------------------------------------------ configuration

/// `[telemetry]` is read by the configuration (`crate::config`), which also checks the
/// file's collector address; the exporter reads the environment's with the same check.
pub use crate::config::{DEFAULT_EXPORT_TIMEOUT, TelemetrySettings, check_endpoint};

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
    pub const KEY: &str = "portcullis.key";
    /// The key's tenant.
    pub const TENANT: &str = "portcullis.tenant";
    /// The channel that answered.
    pub const CHANNEL: &str = "portcullis.channel";
    /// Attempts sent upstream.
    pub const ATTEMPTS: &str = "portcullis.attempts";
    /// The gateway code of a rejection.
    pub const REJECTION_CODE: &str = "portcullis.rejection.code";
    /// The layer that rejected.
    pub const REJECTION_LAYER: &str = "portcullis.rejection.layer";
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
        Dialect::Native => "portcullis",
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

// ------------------------------------------------------------------ the exporter

#[cfg(feature = "otel")]
pub use export::Exporter;

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
        let file = TelemetrySettings {
            otlp_endpoint: Some("http://127.0.0.1:4317".to_owned()),
            ..TelemetrySettings::default()
        };
        let none = TelemetrySettings::default();
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
}
