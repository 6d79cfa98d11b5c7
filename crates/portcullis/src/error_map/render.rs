//! Pure rendering of a [`Rejection`] as an HTTP response (E1–E3): no tower, no I/O.

use super::X_REQUEST_ID;
use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderName, HeaderValue, Response, StatusCode};
use http_body_util::Full;
use portcullis_core::{Dialect, GatewayCode, LayerKind, Rejection};
use serde_json::{Value, json};

const X_RATELIMIT_LIMIT_REQUESTS: HeaderName =
    HeaderName::from_static("x-ratelimit-limit-requests");
const X_RATELIMIT_REMAINING_REQUESTS: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining-requests");
const X_RATELIMIT_LIMIT_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-limit-tokens");
const X_RATELIMIT_REMAINING_TOKENS: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining-tokens");
const X_SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");

/// Renders `rejection` in `dialect` (E1) with its headers (E2) and `x-request-id`
/// (E3).
///
/// - status: [`Rejection::http_status`]; `content-type: application/json`;
/// - body: the dialect's error object with [`Rejection::message`] and the gateway code;
/// - `Retry-After` (whole seconds, rounded up, ≥ 1) whenever the recovery is known;
/// - on a 429 only, `X-RateLimit-Limit-Requests` / `X-RateLimit-Remaining-Requests: 0`
///   and `X-RateLimit-Limit-Tokens` / `X-RateLimit-Remaining-Tokens: 0` for the limits
///   in [`Rejection::rate_limits`];
/// - `x-should-retry: false` whenever [`Rejection::should_retry`] is false;
/// - `x-request-id: <request_id>` (omitted if `request_id` is not a valid header
///   value).
///
/// ```
/// use std::time::Duration;
/// use portcullis::error_map::render;
/// use portcullis::core::{Dialect, GatewayCode, LayerKind, Rejection};
///
/// let r = Rejection::new(GatewayCode::RpmLimit, LayerKind::AnchoredWindow)
///     .with_retry_after(Some(Duration::from_millis(1_200)));
/// let res = render(&r, Dialect::Anthropic, "req-1");
/// assert_eq!(res.status(), 429);
/// assert_eq!(res.headers()["retry-after"], "2");
/// assert_eq!(res.headers()["x-request-id"], "req-1");
/// ```
pub fn render(rejection: &Rejection, dialect: Dialect, request_id: &str) -> Response<Full<Bytes>> {
    let status = rejection.http_status();
    let body = body(rejection, status, dialect);
    let mut res = Response::new(Full::new(Bytes::from(body.to_string())));
    // Every code's first three digits are a valid status (portcullis-core tests it).
    *res.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);

    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(secs) = rejection.retry_after_secs() {
        h.insert(RETRY_AFTER, HeaderValue::from(secs.max(1)));
    }
    if status == 429 {
        let limits = rejection.rate_limits();
        if let Some(limit) = limits.requests {
            h.insert(X_RATELIMIT_LIMIT_REQUESTS, HeaderValue::from(limit));
            h.insert(
                X_RATELIMIT_REMAINING_REQUESTS,
                HeaderValue::from_static("0"),
            );
        }
        if let Some(limit) = limits.tokens {
            h.insert(X_RATELIMIT_LIMIT_TOKENS, HeaderValue::from(limit));
            h.insert(X_RATELIMIT_REMAINING_TOKENS, HeaderValue::from_static("0"));
        }
    }
    if !rejection.should_retry() {
        h.insert(X_SHOULD_RETRY, HeaderValue::from_static("false"));
    }
    // An empty id leaves the header to an outer request-id layer.
    if let Some(id) = Some(request_id)
        .filter(|id| !id.is_empty())
        .and_then(|id| HeaderValue::from_str(id).ok())
    {
        h.insert(X_REQUEST_ID, id);
    }
    res
}

/// `rejection` as one server-sent event in `dialect`, for a stream that fails after its
/// first chunk reached the client (F3): Anthropic's `event: error`, and for OpenAI and
/// Gemini a `data:` line holding the dialect's error object.
///
/// ```
/// use portcullis::error_map::stream_error_event;
/// use portcullis::core::{Dialect, GatewayCode, LayerKind, Rejection};
/// let r = Rejection::new(GatewayCode::UpstreamFailed, LayerKind::Failover);
/// let e = stream_error_event(&r, Dialect::Anthropic);
/// assert!(e.starts_with(b"event: error\ndata: {"));
/// assert!(e.ends_with(b"\n\n"));
/// ```
pub fn stream_error_event(rejection: &Rejection, dialect: Dialect) -> Bytes {
    let json = body(rejection, rejection.http_status(), dialect).to_string();
    let event = match dialect {
        Dialect::Anthropic => format!("event: error\ndata: {json}\n\n"),
        _ => format!("data: {json}\n\n"),
    };
    Bytes::from(event)
}

/// The 500 for an error that is not a [`Rejection`] (E3): code 50001 in `dialect`,
/// whose message is exactly `unexpected gateway error (request id <request_id>)` —
/// never the error's own text, which may hold internals or credentials.
///
/// ```
/// use portcullis::error_map::render_internal;
/// use portcullis::core::Dialect;
///
/// let res = render_internal("req-7", Dialect::Native);
/// assert_eq!(res.status(), 500);
/// assert_eq!(res.headers()["x-request-id"], "req-7");
/// ```
pub fn render_internal(request_id: &str, dialect: Dialect) -> Response<Full<Bytes>> {
    render(&internal_rejection(request_id), dialect, request_id)
}

/// The 50001 rejection that stands for an error that is not a [`Rejection`] (E3).
pub(super) fn internal_rejection(request_id: &str) -> Rejection {
    Rejection::new(GatewayCode::Internal, LayerKind::Gateway)
        .with_message(internal_message(request_id))
}

/// `unexpected gateway error (request id <id>)`.
fn internal_message(request_id: &str) -> String {
    format!(
        "{} (request id {request_id})",
        GatewayCode::Internal.default_message()
    )
}

fn body(r: &Rejection, status: u16, dialect: Dialect) -> Value {
    let code = r.code().code();
    match dialect {
        Dialect::OpenAi => json!({
            "error": {
                "message": r.message(),
                "type": openai_type(status),
                "code": code.to_string(),
                "param": null,
            }
        }),
        Dialect::Anthropic => json!({
            "type": "error",
            "error": {
                "type": anthropic_type(status),
                "message": r.message(),
            }
        }),
        Dialect::Gemini => json!({
            "error": {
                "code": status,
                "message": r.message(),
                "status": gemini_status(status),
            }
        }),
        Dialect::Native => json!({
            "code": code,
            "message": r.message(),
            "error": {
                "type": "gateway_error",
                "code": code.to_string(),
            }
        }),
    }
}

/// OpenAI's `error.type` for a status.
fn openai_type(status: u16) -> &'static str {
    match status {
        429 => "rate_limit_exceeded",
        402 => "insufficient_quota",
        401 => "authentication_error",
        403 => "permission_error",
        500..=599 => "server_error",
        // 400, 404, 408 (a body that did not arrive in time), 413, 422 and any other
        // client error.
        _ => "invalid_request_error",
    }
}

/// Anthropic's `error.type` for a status.
fn anthropic_type(status: u16) -> &'static str {
    match status {
        429 => "rate_limit_error",
        402 => "billing_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        500..=599 => "api_error",
        // 400, 408, 422 and any other client error.
        _ => "invalid_request_error",
    }
}

/// Gemini's (google.rpc) `error.status` for a status.
pub(super) fn gemini_status(status: u16) -> &'static str {
    match status {
        429 | 402 => "RESOURCE_EXHAUSTED",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        502 | 503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        500..=599 => "INTERNAL",
        // 400, 408, 413, 422 and any other client error.
        _ => "INVALID_ARGUMENT",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e1_every_code_has_a_type_in_every_dialect() {
        for c in GatewayCode::ALL {
            let s = c.http_status();
            assert!(!openai_type(s).is_empty());
            assert!(!anthropic_type(s).is_empty());
            assert!(!gemini_status(s).is_empty());
        }
    }

    #[test]
    fn e3_internal_message_is_exact() {
        assert_eq!(
            internal_message("abc"),
            "unexpected gateway error (request id abc)"
        );
    }
}
