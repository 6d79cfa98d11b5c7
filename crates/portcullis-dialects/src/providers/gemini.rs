//! Gemini (`generateContent`): everything the gateway knows of its wire format.
//!
//! Gemini sends no rate-limit headers (its 429 carries a `RetryInfo` detail in the
//! error body instead, read by `error_fields`).

use super::common::MAX_SIGNAL_MS;
use super::common::text;
use super::common::{ChunkKind, line_starts_with};
use super::common::{Rules, clamp_choices};
use crate::estimate;
use crate::request::error::MODEL_TOO_LONG;
use crate::request::error::RequestError;
use crate::request::read::Read;
use http::{HeaderMap, HeaderValue};
use memchr::memmem::Finder;
use portcullis_core::Usage;
use portcullis_core::failover::ErrorFacts;
use portcullis_core::upstream::RateCount;
use serde_json::Value;
use std::sync::LazyLock;

// --- Request inspection --------------------------------------------------------------

/// Model and streaming flag from a Gemini path: the segment after the last `/models/`
/// up to the last `:`, percent-decoded; streaming iff the method is
/// `streamGenerateContent`. (The body's `model` and `stream`, if any, are ignored.)
pub(crate) fn target(path: &str) -> Result<(String, bool), RequestError> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let Some(at) = path.rfind("/models/") else {
        return Err(RequestError::BadPath {
            reason: "does not contain /models/{model}",
        });
    };
    let Some((model, method)) = path[at + "/models/".len()..].rsplit_once(':') else {
        return Err(RequestError::BadPath {
            reason: "does not name a method after the model",
        });
    };
    let model = percent_decode(model);
    if model.trim().is_empty() {
        return Err(RequestError::BadPath {
            reason: "does not name a model",
        });
    }
    if model.len() > estimate::MAX_MODEL_LEN {
        return Err(RequestError::InvalidModel {
            reason: MODEL_TOO_LONG,
        });
    }
    Ok((model, method == "streamGenerateContent"))
}

/// Percent-decoding of a path segment, lenient (a malformed escape stays as it is).
/// By hand: a dozen lines, where a crate would be a dependency for this one call.
fn percent_decode(s: &str) -> String {
    if !s.contains('%') {
        return s.to_owned();
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `generationConfig.maxOutputTokens`; `candidateCount` choices, each an image when
/// `responseModalities` include `IMAGE`; usage is always reported.
pub(crate) fn rules(read: &Read) -> Rules {
    let choices = clamp_choices(read.candidate_count);
    Rules {
        max_output: read.gen_max_output,
        choices,
        requested_images: if read.image_output { choices } else { 0 },
        usage_reported: true,
    }
}

// --- Upstream request ------------------------------------------------------------------

/// `x-goog-api-key` (never the `key=` query parameter, which would land in logs).
pub(crate) fn inject_credential(cred: HeaderValue, h: &mut HeaderMap) {
    h.insert("x-goog-api-key", cred);
}

/// Query parameters passed upstream: `alt` (`alt=sse`).
pub(crate) const QUERY_PARAMS: [&str; 1] = ["alt"];

// --- Error bodies --------------------------------------------------------------------

/// `error.status`, and the `details`: `RetryInfo` (its delay when no header gave
/// one), `ErrorInfo.reason` or `QuotaFailure`'s first quota id as the code.
pub(crate) fn error_fields(err: &Value, f: &mut ErrorFacts) {
    f.error_type = text(err.get("status"));
    for d in err
        .get("details")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let ty = d.get("@type").and_then(Value::as_str).unwrap_or("");
        if ty.ends_with("RetryInfo") {
            f.retry_info = true;
            if f.retry_after_ms.is_none() {
                f.retry_after_ms = d
                    .get("retryDelay")
                    .and_then(Value::as_str)
                    .and_then(|s| s.strip_suffix('s'))
                    .and_then(|s| s.parse::<f64>().ok())
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    // Capped like the `Retry-After` header (F6): a garbled or hostile
                    // delay must not park a scope for days.
                    .map(|s| ((s * 1000.0).ceil() as u64).min(MAX_SIGNAL_MS));
            }
        } else if ty.ends_with("ErrorInfo") {
            f.error_code = f.error_code.take().or(text(d.get("reason")));
        } else if ty.ends_with("QuotaFailure") {
            f.error_code = f.error_code.take().or(text(
                d.get("violations")
                    .and_then(|v| v.get(0))
                    .and_then(|v| v.get("quotaId")),
            ));
        }
    }
}

// --- First-chunk classification --------------------------------------------------------

static DATA_ERROR: LazyLock<Finder> = LazyLock::new(|| Finder::new(b"data: {\"error\""));

/// A `data:` event (or a JSON array stream's element) holding an error object is a
/// failure; anything else is content (Gemini sends no preamble).
pub(crate) fn chunk_kind(frame: &[u8]) -> ChunkKind {
    if line_starts_with(frame, &DATA_ERROR)
        || frame.starts_with(b"{\"error\"")
        || frame.starts_with(b"[{\"error\"")
    {
        ChunkKind::Error
    } else {
        ChunkKind::Content
    }
}

// --- Token counting (U2) ---------------------------------------------------------------

/// Google documents TPM as *input* tokens per minute and documents no cache exemption,
/// so every prompt token (cached included) counts toward `tpm` and `itpm`; output
/// counts only toward `otpm`.
pub(crate) fn rate_count(usage: &Usage) -> RateCount {
    let all_input = super::common::all_input(usage);
    RateCount {
        tpm: all_input,
        itpm: all_input,
        otpm: usage.output_tokens,
    }
}

/// Reserved: the input toward TPM and ITPM, the output bound toward OTPM.
pub(crate) fn rate_estimate(input: u64, output_bound: u64) -> RateCount {
    RateCount {
        tpm: input,
        itpm: input,
        otpm: output_bound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_is_lenient() {
        assert_eq!(percent_decode("gemini-2.5-flash"), "gemini-2.5-flash");
        assert_eq!(percent_decode("a%2Fb"), "a/b");
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz%"), "%zz%");
    }
}
