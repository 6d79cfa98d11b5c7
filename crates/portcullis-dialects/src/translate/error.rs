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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn body(t: &TranslatedError) -> Value {
        serde_json::from_slice(&t.body).unwrap()
    }

    fn anthropic(kind: &str, message: &str) -> Vec<u8> {
        json!({"type": "error", "error": {"type": kind, "message": message}})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn x3_anthropic_errors_become_openai_errors_with_the_right_status_and_type() {
        for (status, kind, want_status, want_type, want_code) in [
            (
                429,
                "rate_limit_error",
                429,
                "rate_limit_exceeded",
                json!("rate_limit_exceeded"),
            ),
            (
                529,
                "overloaded_error",
                503,
                "server_error",
                json!("overloaded"),
            ),
            (
                400,
                "invalid_request_error",
                400,
                "invalid_request_error",
                Value::Null,
            ),
            (
                401,
                "authentication_error",
                401,
                "invalid_request_error",
                json!("invalid_api_key"),
            ),
            (
                404,
                "not_found_error",
                404,
                "invalid_request_error",
                json!("model_not_found"),
            ),
            (500, "api_error", 500, "server_error", Value::Null),
        ] {
            let t = error(
                Dialect::Anthropic,
                Dialect::OpenAi,
                status,
                &anthropic(kind, "the message"),
            );
            assert_eq!(t.status, want_status, "{kind}");
            let b = body(&t);
            assert_eq!(b["error"]["type"], want_type, "{kind}");
            assert_eq!(b["error"]["code"], want_code, "{kind}");
            assert_eq!(
                b["error"]["message"], "the message",
                "{kind}: the message is kept"
            );
        }
    }

    #[test]
    fn x3_openai_errors_become_anthropic_errors_with_the_right_status_and_type() {
        let openai = |code: &str| {
            json!({"error": {"message": "m", "type": "requests", "param": null, "code": code}})
                .to_string()
                .into_bytes()
        };
        for (status, code, want_status, want_type) in [
            (429, "rate_limit_exceeded", 429, "rate_limit_error"),
            (429, "insufficient_quota", 403, "permission_error"),
            (503, "server_is_overloaded", 529, "overloaded_error"),
            (400, "invalid_value", 400, "invalid_request_error"),
            (401, "invalid_api_key", 401, "authentication_error"),
            (404, "model_not_found", 404, "not_found_error"),
            (500, "server_error", 500, "api_error"),
        ] {
            let t = error(Dialect::OpenAi, Dialect::Anthropic, status, &openai(code));
            assert_eq!(t.status, want_status, "{code}");
            let b = body(&t);
            assert_eq!(
                (&b["type"], &b["error"]["type"]),
                (&json!("error"), &json!(want_type)),
                "{code}"
            );
            assert_eq!(b["error"]["message"], "m");
        }
    }

    #[test]
    fn x3_an_unreadable_error_body_still_reaches_the_client_in_its_dialect() {
        let t = error(
            Dialect::Anthropic,
            Dialect::OpenAi,
            502,
            b"<html>bad gateway</html>",
        );
        assert_eq!(t.status, 502);
        assert_eq!(body(&t)["error"]["message"], "the provider answered 502");
        let t = error(Dialect::OpenAi, Dialect::Anthropic, 503, b"");
        assert_eq!(
            (t.status, body(&t)["error"]["type"].clone()),
            (529, json!("overloaded_error"))
        );
        // Not a translated pair: passed as it was.
        let t = error(Dialect::Gemini, Dialect::Gemini, 400, b"{}");
        assert_eq!((t.status, t.body), (400, b"{}".to_vec()));
    }
}
