//! Gemini error answers ↔ OpenAI error answers.
//!
//! The provider's message is kept; its status and type are mapped:
//!
//! | Gemini `status` (HTTP)                          | OpenAI status, `type`, `code`                      |
//! |-------------------------------------------------|----------------------------------------------------|
//! | INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE (400) | 400 invalid_request_error, null          |
//! | INVALID_ARGUMENT with reason API_KEY_INVALID (400), UNAUTHENTICATED (401) | 401 authentication_error, invalid_api_key |
//! | PERMISSION_DENIED (403)                         | 403 permission_error, null                         |
//! | NOT_FOUND (404)                                 | 404 invalid_request_error, null                    |
//! | RESOURCE_EXHAUSTED (429)                        | 429 rate_limit_exceeded, rate_limit_exceeded       |
//! | INTERNAL (500)                                  | 500 server_error, null                             |
//! | UNAVAILABLE (503)                               | 503 server_error, overloaded                       |
//! | DEADLINE_EXCEEDED (504)                         | 504 server_error, null                             |
//! | other                                           | by HTTP status as above; else the status, server_error (5xx) or invalid_request_error |
//!
//! OpenAI → Gemini by status: 400 / 422 INVALID_ARGUMENT (400); 401 UNAUTHENTICATED;
//! 403 PERMISSION_DENIED; 404 NOT_FOUND; 429 RESOURCE_EXHAUSTED; 500 INTERNAL;
//! 503 UNAVAILABLE; 504 DEADLINE_EXCEEDED; other 5xx INTERNAL and other 4xx
//! INVALID_ARGUMENT (same status). The body is `{"error": {"code", "message",
//! "status"}}` (no `details`).
//!
//! A body that does not parse becomes the target's generic error of the (mapped)
//! status, with the message "the provider answered <status>". An Anthropic client of
//! a Gemini channel goes through OpenAI: RESOURCE_EXHAUSTED ends as Anthropic's
//! `rate_limit_error`.
use super::wire::{ChatError, GError};
use crate::translate::TranslatedError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Serialize, Deserialize)]
struct GErrorBody {
    error: GError,
}

#[derive(Serialize, Deserialize)]
struct ChatErrorBody {
    error: ChatError,
}

fn generic(status: u16) -> String {
    format!("the provider answered {status}")
}

/// A Gemini error body (also the first element of a JSON array, as the non-SSE
/// stream sends it).
fn parse_gemini(body: &[u8]) -> Option<GError> {
    match serde_json::from_slice::<Value>(body).ok()? {
        Value::Array(mut a) if !a.is_empty() => serde_json::from_value::<GErrorBody>(a.remove(0)),
        v => serde_json::from_value::<GErrorBody>(v),
    }
    .ok()
    .map(|b| b.error)
}

/// OpenAI's status, type and code for a Gemini error (`status` the HTTP status).
pub(super) fn openai_kind(e: &GError, status: u16) -> (u16, &'static str, Option<&'static str>) {
    let key_invalid = e
        .details
        .iter()
        .flatten()
        .any(|d| d.get("reason").and_then(Value::as_str) == Some("API_KEY_INVALID"));
    if key_invalid {
        return (401, "authentication_error", Some("invalid_api_key"));
    }
    match e.status.as_str() {
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => {
            (400, "invalid_request_error", None)
        }
        "UNAUTHENTICATED" => (401, "authentication_error", Some("invalid_api_key")),
        "PERMISSION_DENIED" => (403, "permission_error", None),
        "NOT_FOUND" => (404, "invalid_request_error", None),
        "RESOURCE_EXHAUSTED" => (429, "rate_limit_exceeded", Some("rate_limit_exceeded")),
        "INTERNAL" => (500, "server_error", None),
        "UNAVAILABLE" => (503, "server_error", Some("overloaded")),
        "DEADLINE_EXCEEDED" => (504, "server_error", None),
        _ => by_status(status),
    }
}

fn by_status(status: u16) -> (u16, &'static str, Option<&'static str>) {
    match status {
        401 => (401, "authentication_error", Some("invalid_api_key")),
        403 => (403, "permission_error", None),
        429 => (429, "rate_limit_exceeded", Some("rate_limit_exceeded")),
        503 => (503, "server_error", Some("overloaded")),
        s if s >= 500 => (s, "server_error", None),
        s => (s, "invalid_request_error", None),
    }
}

/// The OpenAI error object (for a body or an in-stream error).
pub(super) fn openai_error(message: String, kind: &str, code: Option<&str>) -> Value {
    serde_json::json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

/// A Gemini error answer (`status`, `body`) written for an OpenAI client.
pub(crate) fn error_to_chat(status: u16, body: &[u8]) -> TranslatedError {
    let (status, kind, code, message) = match parse_gemini(body) {
        Some(e) => {
            let (s, kind, code) = openai_kind(&e, status);
            (s, kind, code, e.message)
        }
        None => {
            let (s, kind, code) = by_status(status);
            (s, kind, code, generic(status))
        }
    };
    TranslatedError {
        status,
        body: openai_error(message, kind, code).to_string().into_bytes(),
    }
}

/// Gemini's HTTP status and status name for an OpenAI error status.
pub(super) fn gemini_kind(status: u16) -> (u16, &'static str) {
    match status {
        400 | 422 => (400, "INVALID_ARGUMENT"),
        401 => (401, "UNAUTHENTICATED"),
        403 => (403, "PERMISSION_DENIED"),
        404 => (404, "NOT_FOUND"),
        429 => (429, "RESOURCE_EXHAUSTED"),
        500 => (500, "INTERNAL"),
        503 => (503, "UNAVAILABLE"),
        504 => (504, "DEADLINE_EXCEEDED"),
        s if s >= 500 => (s, "INTERNAL"),
        s => (s, "INVALID_ARGUMENT"),
    }
}

/// The HTTP status an OpenAI in-stream error stands for (it has none of its own).
pub(super) fn status_of_chat_error(e: &ChatError) -> u16 {
    let code = e.code.as_ref().and_then(Value::as_str).unwrap_or("");
    match (e.kind.as_deref().unwrap_or(""), code) {
        (_, "rate_limit_exceeded") | ("rate_limit_exceeded" | "requests" | "tokens", _) => 429,
        (_, "overloaded") => 503,
        (_, "invalid_api_key") | ("authentication_error", _) => 401,
        ("permission_error", _) => 403,
        ("invalid_request_error", _) => 400,
        _ => 500,
    }
}

/// The Gemini error object (for a body or an in-stream error).
pub(super) fn gemini_error(status: u16, message: String) -> Value {
    let (code, name) = gemini_kind(status);
    serde_json::json!({"error": {"code": code, "message": message, "status": name}})
}

/// An OpenAI error answer (`status`, `body`) written for a Gemini client.
pub(crate) fn error_from_chat(status: u16, body: &[u8]) -> TranslatedError {
    let message = serde_json::from_slice::<ChatErrorBody>(body)
        .map_or_else(|_| generic(status), |e| e.error.message);
    let (code, _) = gemini_kind(status);
    TranslatedError {
        status: code,
        body: gemini_error(status, message).to_string().into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::{Wire, error};
    use serde_json::json;

    fn body(e: &TranslatedError) -> Value {
        serde_json::from_slice(&e.body).unwrap()
    }

    fn gemini(code: u16, status: &str, message: &str) -> Vec<u8> {
        json!({"error": {"code": code, "message": message, "status": status}})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn x3_gemini_resource_exhausted_is_an_openai_rate_limit() {
        // Google's documented 429 body.
        let b = json!({"error": {"code": 429, "message": "You exceeded your current quota, please check your plan and billing details.", "status": "RESOURCE_EXHAUSTED", "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests", "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "41s"}
        ]}});
        let e = error_to_chat(429, b.to_string().as_bytes());
        assert_eq!(e.status, 429);
        assert_eq!(
            body(&e),
            json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "rate_limit_exceeded", "param": null, "code": "rate_limit_exceeded"}})
        );
    }

    #[test]
    fn x3_gemini_statuses_map_to_openai_statuses_types_and_codes() {
        let cases = [
            (
                400,
                "INVALID_ARGUMENT",
                400,
                "invalid_request_error",
                Value::Null,
            ),
            (
                400,
                "FAILED_PRECONDITION",
                400,
                "invalid_request_error",
                Value::Null,
            ),
            (
                401,
                "UNAUTHENTICATED",
                401,
                "authentication_error",
                json!("invalid_api_key"),
            ),
            (
                403,
                "PERMISSION_DENIED",
                403,
                "permission_error",
                Value::Null,
            ),
            (404, "NOT_FOUND", 404, "invalid_request_error", Value::Null),
            (500, "INTERNAL", 500, "server_error", Value::Null),
            (503, "UNAVAILABLE", 503, "server_error", json!("overloaded")),
            (504, "DEADLINE_EXCEEDED", 504, "server_error", Value::Null),
            (499, "CANCELLED", 499, "invalid_request_error", Value::Null),
            (502, "SOMETHING_NEW", 502, "server_error", Value::Null),
        ];
        for (code, status, want, kind, want_code) in cases {
            let e = error_to_chat(code, &gemini(code, status, "m"));
            assert_eq!(e.status, want, "{status}");
            assert_eq!(
                body(&e),
                json!({"error": {"message": "m", "type": kind, "param": null, "code": want_code}}),
                "{status}"
            );
        }
    }

    #[test]
    fn x3_gemini_api_key_invalid_is_an_openai_401() {
        // Google's answer to a bad key: 400 INVALID_ARGUMENT with reason API_KEY_INVALID.
        let b = json!({"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.", "status": "INVALID_ARGUMENT", "details": [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com", "metadata": {"service": "generativelanguage.googleapis.com"}}
        ]}});
        let e = error_to_chat(400, b.to_string().as_bytes());
        assert_eq!(e.status, 401);
        assert_eq!(body(&e)["error"]["code"], json!("invalid_api_key"));
        assert_eq!(
            body(&e)["error"]["message"],
            json!("API key not valid. Please pass a valid API key.")
        );
    }

    #[test]
    fn x3_openai_statuses_map_to_gemini_errors() {
        let cases = [
            (400, 400, "INVALID_ARGUMENT"),
            (422, 400, "INVALID_ARGUMENT"),
            (401, 401, "UNAUTHENTICATED"),
            (403, 403, "PERMISSION_DENIED"),
            (404, 404, "NOT_FOUND"),
            (429, 429, "RESOURCE_EXHAUSTED"),
            (500, 500, "INTERNAL"),
            (502, 502, "INTERNAL"),
            (503, 503, "UNAVAILABLE"),
            (504, 504, "DEADLINE_EXCEEDED"),
        ];
        for (status, want, name) in cases {
            let oa = json!({"error": {"message": "Rate limit reached", "type": "requests", "param": null, "code": "rate_limit_exceeded"}});
            let e = error_from_chat(status, oa.to_string().as_bytes());
            assert_eq!(e.status, want, "{status}");
            assert_eq!(
                body(&e),
                json!({"error": {"code": want, "message": "Rate limit reached", "status": name}})
            );
        }
    }

    #[test]
    fn x3_unparsable_bodies_become_generic_errors_of_the_status() {
        let e = error_to_chat(503, b"<html>Service Unavailable</html>");
        assert_eq!(e.status, 503);
        assert_eq!(
            body(&e),
            json!({"error": {"message": "the provider answered 503", "type": "server_error", "param": null, "code": "overloaded"}})
        );
        let e = error_from_chat(502, b"<html>Bad gateway</html>");
        assert_eq!(e.status, 502);
        assert_eq!(
            body(&e),
            json!({"error": {"code": 502, "message": "the provider answered 502", "status": "INTERNAL"}})
        );
        // The non-SSE stream's JSON array form is read too.
        let arr = format!(
            "[{}]",
            String::from_utf8(gemini(429, "RESOURCE_EXHAUSTED", "q")).unwrap()
        );
        assert_eq!(error_to_chat(429, arr.as_bytes()).status, 429);
    }

    #[test]
    fn x3_gemini_rate_limit_reaches_an_anthropic_client_as_rate_limit_error() {
        let e = error(
            Wire::Gemini,
            Wire::Messages,
            429,
            &gemini(429, "RESOURCE_EXHAUSTED", "Quota exceeded"),
        );
        assert_eq!(e.status, 429);
        assert_eq!(
            body(&e),
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Quota exceeded"}})
        );
        // And the reverse: an Anthropic overload reaches a Gemini client as UNAVAILABLE.
        let an = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        let e = error(Wire::Messages, Wire::Gemini, 529, an.to_string().as_bytes());
        assert_eq!(
            (e.status, body(&e)),
            (
                503,
                json!({"error": {"code": 503, "message": "Overloaded", "status": "UNAVAILABLE"}})
            )
        );
    }
}
