//! OpenAI (and the gateway's native format, which shares it): everything the gateway
//! knows of its wire format.

use super::common::text;
use super::common::{ChunkKind, has, line_starts_with};
use super::common::{Rules, clamp_choices};
use crate::request::read::Read;
use http::{HeaderMap, HeaderName, HeaderValue, header};
use memchr::memmem::Finder;
use portcullis_core::Usage;
use portcullis_core::failover::ErrorFacts;
use portcullis_core::upstream::RateCount;
use serde_json::Value;
use std::sync::LazyLock;
use std::time::Duration;

// --- Request inspection --------------------------------------------------------------

/// Maximum output: `max_completion_tokens`, else `max_tokens`, else `max_output_tokens`
/// (Responses API). Choices: `n`, except on `/images/generations`, where `n` is the
/// images asked for. Usage is reported in a stream only with
/// `stream_options.include_usage: true`.
pub(crate) fn rules(read: &Read, path: &str, stream: bool) -> Rules {
    let image_generation = path.contains("/images/generations");
    let (choices, requested_images) = if image_generation {
        (1, clamp_choices(read.n))
    } else {
        (clamp_choices(read.n), 0)
    };
    Rules {
        max_output: read
            .max_completion_tokens
            .or(read.max_tokens)
            .or(read.max_output_tokens),
        choices,
        requested_images,
        // The Responses API reports usage in every answer, streams included (in
        // `response.completed`), and takes no `stream_options.include_usage`.
        usage_reported: !stream || read.include_usage == Some(true) || responses(path),
    }
}

/// Whether `path` is the Responses API's create route.
fn responses(path: &str) -> bool {
    path.split(['?', '#'])
        .next()
        .is_some_and(|p| p.ends_with("/responses"))
}

/// The body with `stream_options.include_usage = true`; `None` if it is not a JSON
/// object (inspection already accepted it, so this does not happen in practice).
pub fn ask_for_stream_usage(body: &[u8]) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(body).ok()?;
    let obj = v.as_object_mut()?;
    let opts = obj
        .entry("stream_options")
        .or_insert_with(|| Value::Object(Default::default()));
    opts.as_object_mut()?
        .insert("include_usage".into(), Value::Bool(true));
    serde_json::to_vec(&v).ok()
}

// --- Upstream request ------------------------------------------------------------------

/// The credential as a bearer token (the channel's credential value is the whole
/// `Authorization` value).
pub(crate) fn inject_credential(cred: HeaderValue, h: &mut HeaderMap) {
    h.insert(header::AUTHORIZATION, cred);
}

/// Query parameters passed upstream: none.
pub(crate) const QUERY_PARAMS: [&str; 0] = [];

// --- Error bodies --------------------------------------------------------------------

/// `error.type` and `error.code`.
pub(crate) fn error_fields(err: &Value, f: &mut ErrorFacts) {
    f.error_type = text(err.get("type"));
    f.error_code = text(err.get("code"));
}

// --- Rate-limit headers ----------------------------------------------------------------

/// What every rate-limit header's name starts with.
pub(crate) const RATE_HEADER_PREFIX: &str = "x-ratelimit-";

/// (remaining, reset) header pairs. Names built once: every answer is read, and a
/// lookup by `&str` parses the name each time.
pub(crate) const RATE_HEADERS: [(HeaderName, HeaderName); 2] = [
    (
        HeaderName::from_static("x-ratelimit-remaining-requests"),
        HeaderName::from_static("x-ratelimit-reset-requests"),
    ),
    (
        HeaderName::from_static("x-ratelimit-remaining-tokens"),
        HeaderName::from_static("x-ratelimit-reset-tokens"),
    ),
];

/// The millisecond retry hint.
pub(crate) const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");

/// `retry-after-ms`: milliseconds, fractions rounded up.
pub(crate) fn retry_after_ms(v: &str) -> Option<u64> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| v.ceil() as u64)
}

/// A reset value in ms: Go's `time.Duration` text (`1s`, `6m0s`, `250ms`, `1h2m3.5s`).
pub(crate) fn reset_ms(v: &str) -> Option<u64> {
    go_duration(v).map(|d| d.as_millis() as u64)
}

/// Go's `time.Duration` text as OpenAI sends it. Parsed by hand: humantime reads
/// `6m0s` but not fractions such as `1.5s`, and no crate reads Go's format whole.
fn go_duration(v: &str) -> Option<Duration> {
    if v.is_empty() {
        return None;
    }
    let mut total = 0f64;
    let mut rest = v;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let n: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3_600_000.0,
            "m" => 60_000.0,
            "s" => 1_000.0,
            "ms" => 1.0,
            "us" | "µs" => 0.001,
            "ns" => 0.000_001,
            _ => return None,
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    (total.is_finite() && total >= 0.0).then(|| Duration::from_micros((total * 1000.0) as u64))
}

// --- First-chunk classification --------------------------------------------------------

// The searchers are built once: building one costs more than searching a frame.
static DATA_ERROR: LazyLock<Finder> = LazyLock::new(|| Finder::new(b"data: {\"error\""));
static TOOL_CALLS: LazyLock<Finder> = LazyLock::new(|| Finder::new(b"\"tool_calls\""));
static DONE: LazyLock<Finder> = LazyLock::new(|| Finder::new(b"[DONE]"));
static REFUSAL: LazyLock<Finder> = LazyLock::new(|| Finder::new(b"\"refusal\":\""));
static CONTENT: LazyLock<Finder> = LazyLock::new(|| Finder::new(b"\"content\":\""));

/// Responses API events (`event: response.…` / `data: {"type":"response.…`).
static RESPONSES_EVENT: LazyLock<Finder> = LazyLock::new(|| Finder::new(b"\"type\":\"response."));
/// The Responses API's error event, and its failed response.
static EVENT_ERROR: LazyLock<Finder> = LazyLock::new(|| Finder::new(b"event: error"));
static RESPONSE_FAILED: LazyLock<Finder> =
    LazyLock::new(|| Finder::new(b"\"type\":\"response.failed\""));
static TYPE_ERROR: LazyLock<Finder> = LazyLock::new(|| Finder::new(b"data: {\"type\":\"error\""));
/// Responses API events that carry output: any `….delta`, a finished output item
/// (a function call arrives whole), and the end of the response.
static DELTA_EVENT: LazyLock<Finder> = LazyLock::new(|| Finder::new(b".delta\""));
static ITEM_DONE: LazyLock<Finder> =
    LazyLock::new(|| Finder::new(b"\"type\":\"response.output_item.done\""));
static RESPONSE_END: LazyLock<Finder> =
    LazyLock::new(|| Finder::new(b"\"type\":\"response.completed\""));
static RESPONSE_INCOMPLETE: LazyLock<Finder> =
    LazyLock::new(|| Finder::new(b"\"type\":\"response.incomplete\""));

/// Chat completions: a `data:` event holding an error object is a failure; a chunk
/// with content is content; the first chunk of a stream carries only the role
/// (`"content":""`): preamble.
///
/// Responses API streams: an `error` event or `response.failed` is a failure; output
/// (`response.*.delta`, `response.output_item.done`, `response.completed` /
/// `response.incomplete`) is content; `response.created`, `response.in_progress` and
/// the announcements of items and parts are preamble.
pub(crate) fn chunk_kind(frame: &[u8]) -> ChunkKind {
    if line_starts_with(frame, &DATA_ERROR)
        || frame.starts_with(b"{\"error\"")
        || line_starts_with(frame, &EVENT_ERROR)
        || line_starts_with(frame, &TYPE_ERROR)
        || has(frame, &RESPONSE_FAILED)
    {
        ChunkKind::Error
    } else if has(frame, &RESPONSES_EVENT) {
        let output = has(frame, &DELTA_EVENT)
            || has(frame, &ITEM_DONE)
            || has(frame, &RESPONSE_END)
            || has(frame, &RESPONSE_INCOMPLETE);
        if output {
            ChunkKind::Content
        } else {
            ChunkKind::Preamble
        }
    } else if content(frame) {
        ChunkKind::Content
    } else {
        ChunkKind::Preamble
    }
}

/// Whether a frame carries content: non-empty text, a tool call, a refusal, or the end
/// of the stream.
fn content(frame: &[u8]) -> bool {
    if has(frame, &TOOL_CALLS) || has(frame, &DONE) || has(frame, &REFUSAL) {
        return true;
    }
    let after = CONTENT.needle().len();
    CONTENT
        .find_iter(frame)
        .any(|at| frame.get(at + after).is_some_and(|c| *c != b'"'))
}

// --- Token counting (U2) ---------------------------------------------------------------

/// Cached input counts toward TPM like any other input token: itpm = input + cached +
/// cache writes, otpm = output, tpm = both.
pub(crate) fn rate_count(usage: &Usage) -> RateCount {
    let all_input = super::common::all_input(usage);
    RateCount {
        tpm: all_input.saturating_add(usage.output_tokens),
        itpm: all_input,
        otpm: usage.output_tokens,
    }
}

/// Reserved: the input estimate and the output bound (`max_tokens` counts at request
/// start), toward TPM both.
pub(crate) fn rate_estimate(input: u64, output_bound: u64) -> RateCount {
    RateCount {
        tpm: input.saturating_add(output_bound),
        itpm: input,
        otpm: output_bound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u3_openai_durations() {
        assert_eq!(go_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(
            go_duration("1h2m3.5s"),
            Some(Duration::from_millis(3_723_500))
        );
        assert_eq!(go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(go_duration(""), None);
        assert_eq!(go_duration("5x"), None);
        assert_eq!(go_duration("s"), None);
    }

    #[test]
    fn openai_stream_is_asked_for_usage() {
        let b = ask_for_stream_usage(br#"{"model":"m","stream":true,"stream_options":{"x":1}}"#)
            .unwrap();
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["stream_options"]["x"], 1);
        assert_eq!(v["model"], "m");
        assert!(ask_for_stream_usage(b"[1]").is_none());
    }
}
