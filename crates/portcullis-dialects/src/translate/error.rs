//! Provider error answers in the client's dialect (X3): the status and error type the
//! client's SDK expects for the same failure, the provider's message kept.
//!
//! | Anthropic | OpenAI |
//! |---|---|
//! | 400 `invalid_request_error` | 400 `invalid_request_error` |
//! | 401 `authentication_error` | 401 `invalid_request_error`, code `invalid_api_key` |
//! | 403 `permission_error` | 403 `permission_error` |
//! | 404 `not_found_error` | 404 `invalid_request_error`, code `model_not_found` |
//! | 413 `request_too_large` | 413 `invalid_request_error` |
//! | 429 `rate_limit_error` | 429 `rate_limit_exceeded` (type and code) |
//! | 500 `api_error` | 500 `server_error` |
//! | 529 `overloaded_error` | 503 `server_error`, code `overloaded` |
//!
//! and back by status (OpenAI 429 → `rate_limit_error`, 503 → 529 `overloaded_error`,
//! 400 / 422 → 400 `invalid_request_error`, other 5xx → `api_error`). A body that is not
//! the provider's error shape becomes an error of its status saying so.
use portcullis_core::Dialect;
use serde::Deserialize;
use serde_json::json;

/// An error answer written for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranslatedError {
    /// The client's status.
    pub status: u16,
    /// The client's body (JSON).
    pub body: Vec<u8>,
}

#[derive(Deserialize)]
struct Envelope {
    error: Inner,
}

#[derive(Deserialize)]
struct Inner {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    code: Option<serde_json::Value>,
}

/// The provider's error answer (`status`, `body` in dialect `from`) written in `to`.
pub fn error(from: Dialect, to: Dialect, status: u16, body: &[u8]) -> TranslatedError {
    let read = serde_json::from_slice::<Envelope>(body)
        .ok()
        .map(|e| e.error);
    let message = read
        .as_ref()
        .and_then(|e| e.message.clone())
        .unwrap_or_else(|| format!("the provider answered {status}"));
    let kind = read.as_ref().and_then(|e| e.kind.clone());
    let code = read.as_ref().and_then(|e| e.code.clone());
    match (from, to) {
        (Dialect::Anthropic, Dialect::OpenAi) => {
            let (status, kind, code) = match kind.as_deref() {
                Some("invalid_request_error") => (400, "invalid_request_error", None),
                Some("authentication_error") => {
                    (401, "invalid_request_error", Some("invalid_api_key"))
                }
                Some("permission_error") => (403, "permission_error", None),
                Some("not_found_error") => (404, "invalid_request_error", Some("model_not_found")),
                Some("request_too_large") => (413, "invalid_request_error", None),
                Some("rate_limit_error") => {
                    (429, "rate_limit_exceeded", Some("rate_limit_exceeded"))
                }
                Some("overloaded_error") => (503, "server_error", Some("overloaded")),
                Some("api_error") => (500, "server_error", None),
                _ if status == 529 => (503, "server_error", Some("overloaded")),
                _ if status == 429 => (429, "rate_limit_exceeded", Some("rate_limit_exceeded")),
                _ if status >= 500 => (status, "server_error", None),
                _ => (status, "invalid_request_error", None),
            };
            let body =
                json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
            TranslatedError {
                status,
                body: body.to_string().into_bytes(),
            }
        }
        (Dialect::OpenAi, Dialect::Anthropic) => {
            let quota = code.as_ref().and_then(|c| c.as_str()) == Some("insufficient_quota");
            let (status, kind) = match status {
                400 | 422 => (400, "invalid_request_error"),
                401 => (401, "authentication_error"),
                403 => (403, "permission_error"),
                404 => (404, "not_found_error"),
                413 => (413, "request_too_large"),
                // An exhausted quota is the account's, not a rate: Anthropic's billing
                // refusal is a permission error.
                429 if quota => (403, "permission_error"),
                429 => (429, "rate_limit_error"),
                503 => (529, "overloaded_error"),
                s if s >= 500 => (s, "api_error"),
                s => (s, "invalid_request_error"),
            };
            let body = json!({"type": "error", "error": {"type": kind, "message": message}});
            TranslatedError {
                status,
                body: body.to_string().into_bytes(),
            }
        }
        _ => TranslatedError {
            status,
            body: body.to_vec(),
        },
    }
}
