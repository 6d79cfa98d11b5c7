//! Anthropic (Messages API): everything the gateway knows of its wire format.

use super::common::Rules;
use super::common::text;
use super::common::{ChunkKind, has, line_starts_with};
use crate::request::error::RequestError;
use crate::request::read::Read;
use http::{HeaderMap, HeaderName, HeaderValue};
use memchr::memmem::Finder;
use portcullis_core::Usage;
use portcullis_core::failover::ErrorFacts;
use portcullis_core::upstream::RateCount;
use serde_json::Value;
use std::sync::LazyLock;
use std::time::SystemTime;

// --- Request inspection --------------------------------------------------------------

/// `max_tokens` is required; one choice; usage is always reported.
pub(crate) fn rules(read: &Read) -> Result<Rules, RequestError> {
    Ok(Rules {
        max_output: Some(read.max_tokens.ok_or(RequestError::MissingField {
            field: "max_tokens",
        })?),
        choices: 1,
        requested_images: 0,
        usage_reported: true,
    })
}

// --- Upstream request ------------------------------------------------------------------

/// The API version sent when the client names none.
const API_VERSION: &str = "2023-06-01";

/// `x-api-key`, and `anthropic-version` unless the client sent one.
pub(crate) fn inject_credential(cred: HeaderValue, h: &mut HeaderMap) {
    h.insert("x-api-key", cred);
    h.entry("anthropic-version")
        .or_insert(HeaderValue::from_static(API_VERSION));
}

/// Query parameters passed upstream: `beta`.
pub(crate) const QUERY_PARAMS: [&str; 1] = ["beta"];

// --- Error bodies --------------------------------------------------------------------

/// `error.type`, `error.details.error_code`, and the body's `request_id` when no
/// header named one.
pub(crate) fn error_fields(body: &Value, err: &Value, f: &mut ErrorFacts) {
    f.error_type = text(err.get("type"));
    f.error_code = text(err.get("details").and_then(|d| d.get("error_code")));
    if f.request_id.is_none() {
        f.request_id = text(body.get("request_id"));
    }
}

// --- Rate-limit headers ----------------------------------------------------------------

/// What every rate-limit header's name starts with.
pub(crate) const RATE_HEADER_PREFIX: &str = "anthropic-ratelimit-";

/// (remaining, reset) header pairs, built once.
pub(crate) const RATE_HEADERS: [(HeaderName, HeaderName); 4] = [
    (
        HeaderName::from_static("anthropic-ratelimit-requests-remaining"),
        HeaderName::from_static("anthropic-ratelimit-requests-reset"),
    ),
    (
        HeaderName::from_static("anthropic-ratelimit-tokens-remaining"),
        HeaderName::from_static("anthropic-ratelimit-tokens-reset"),
    ),
    (
        HeaderName::from_static("anthropic-ratelimit-input-tokens-remaining"),
        HeaderName::from_static("anthropic-ratelimit-input-tokens-reset"),
    ),
    (
        HeaderName::from_static("anthropic-ratelimit-output-tokens-remaining"),
        HeaderName::from_static("anthropic-ratelimit-output-tokens-reset"),
    ),
];

/// A reset value in ms from `now`: an RFC 3339 instant (0 once past).
pub(crate) fn reset_ms(v: &str, now: SystemTime) -> Option<u64> {
    let at = humantime::parse_rfc3339_weak(v).ok()?;
    Some(at.duration_since(now).map_or(0, |d| d.as_millis() as u64))
}

// --- First-chunk classification --------------------------------------------------------

static EVENT_ERROR: LazyLock<Finder> = LazyLock::new(|| Finder::new(b"event: error"));
static CONTENT_BLOCK: LazyLock<Finder> = LazyLock::new(|| Finder::new(b"content_block"));
static MESSAGE_START: LazyLock<Finder> = LazyLock::new(|| Finder::new(b"message_start"));
static EVENT_PING: LazyLock<Finder> = LazyLock::new(|| Finder::new(b"event: ping"));

/// Whether a JSON answer is Anthropic's error object.
pub(crate) fn json_error(frame: &[u8]) -> bool {
    frame.starts_with(b"{\"type\":\"error\"")
}

/// Streams open with `message_start` (and `ping`): preamble; an `event: error` before
/// `content_block_*` is a failure (overload mid-stream is sent so).
pub(crate) fn chunk_kind(frame: &[u8]) -> ChunkKind {
    if line_starts_with(frame, &EVENT_ERROR) || json_error(frame) {
        ChunkKind::Error
    } else if has(frame, &CONTENT_BLOCK) {
        ChunkKind::Content
    } else if has(frame, &MESSAGE_START) || has(frame, &EVENT_PING) {
        ChunkKind::Preamble
    } else {
        ChunkKind::Content
    }
}

// --- Token counting (U2) ---------------------------------------------------------------

/// `cache_read_input_tokens` do not count toward ITPM; `input_tokens` and
/// `cache_creation_input_tokens` do. (A few older models, marked in Anthropic's
/// rate-limit table, do count cache reads; configure those channels with a lower
/// ITPM.) Anthropic has no combined limit; `tpm` is given for channels configured with
/// one.
pub(crate) fn rate_count(usage: &Usage) -> RateCount {
    let itpm = usage.input_tokens.saturating_add(usage.cache_write_tokens);
    RateCount {
        tpm: itpm.saturating_add(usage.output_tokens),
        itpm,
        otpm: usage.output_tokens,
    }
}

/// Reserved: like OpenAI (OTPM counts `max_tokens` at request start).
pub(crate) fn rate_estimate(input: u64, output_bound: u64) -> RateCount {
    super::openai::rate_estimate(input, output_bound)
}
