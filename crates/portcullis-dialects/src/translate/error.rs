//! Provider error answers in the client's dialect.
//!
//! The provider's message is kept; its type and status are mapped:
//!
//! | Anthropic (status)          | OpenAI status, `type`, `code`                        |
//! |-----------------------------|------------------------------------------------------|
//! | invalid_request_error       | 400 invalid_request_error, null                      |
//! | authentication_error        | 401 authentication_error, invalid_api_key            |
//! | permission_error            | 403 permission_error, null                           |
//! | not_found_error             | 404 invalid_request_error, null                      |
//! | rate_limit_error            | 429 rate_limit_exceeded, rate_limit_exceeded         |
//! | overloaded_error (529)      | 503 server_error, overloaded                         |
//! | api_error                   | 500 server_error, null                               |
//! | other                       | provider status, server_error (5xx) or invalid_request_error |
//!
//! OpenAI → Anthropic by status: 429 rate_limit_error; 401 authentication_error;
//! 403 permission_error; 404 not_found_error; 400 / 422 invalid_request_error (400);
//! 413 request_too_large; 503 overloaded_error (529); other 5xx api_error (same
//! status); other 4xx invalid_request_error (same status).
//!
//! A body that does not parse becomes the target's generic error of the (mapped)
//! status, with the message "the provider answered <status>". Pairs not translated
//! keep the body and the status.
use portcullis_core::Dialect;
use serde::{Deserialize, Serialize};

/// An error answer written for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranslatedError {
    /// The client's status.
    pub status: u16,
    /// The client's body (JSON).
    pub body: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
struct AnError {
    #[serde(rename = "type")]
    kind: String,
    error: AnErrorInner,
}

#[derive(Serialize, Deserialize)]
struct AnErrorInner {
    #[serde(rename = "type")]
    kind: String,
    message: String,
}

#[derive(Serialize, Deserialize)]
struct OaError {
    error: OaErrorInner,
}

#[derive(Serialize, Deserialize)]
struct OaErrorInner {
    message: String,
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    param: Option<String>,
    #[serde(default)]
    code: Option<serde_json::Value>,
}

/// The provider's error answer (`status`, `body` in dialect `from`) written in `to`.
pub(crate) fn error(from: Dialect, to: Dialect, status: u16, body: &[u8]) -> TranslatedError {
    match (from, to) {
        (Dialect::Anthropic, Dialect::OpenAi) => {
            let parsed = serde_json::from_slice::<AnError>(body).ok();
            let (kind, message) = match parsed {
                Some(e) => (e.error.kind, e.error.message),
                None => (String::new(), generic(status)),
            };
            let (status, kind, code) = openai_kind(&kind, status);
            openai_body(status, kind, code, message)
        }
        (Dialect::OpenAi, Dialect::Anthropic) => {
            let message = serde_json::from_slice::<OaError>(body)
                .map_or_else(|_| generic(status), |e| e.error.message);
            let (status, kind) = anthropic_kind(status);
            let body = AnError {
                kind: "error".into(),
                error: AnErrorInner {
                    kind: kind.into(),
                    message,
                },
            };
            TranslatedError {
                status,
                body: serde_json::to_vec(&body).unwrap_or_default(),
            }
        }
        _ => TranslatedError {
            status,
            body: body.to_vec(),
        },
    }
}

fn generic(status: u16) -> String {
    format!("the provider answered {status}")
}

/// OpenAI's status, type and code for an Anthropic error type (empty: unknown).
fn openai_kind(kind: &str, status: u16) -> (u16, &'static str, Option<&'static str>) {
    match kind {
        "invalid_request_error" => (400, "invalid_request_error", None),
        "authentication_error" => (401, "authentication_error", Some("invalid_api_key")),
        "permission_error" => (403, "permission_error", None),
        "not_found_error" => (404, "invalid_request_error", None),
        "rate_limit_error" => (429, "rate_limit_exceeded", Some("rate_limit_exceeded")),
        "overloaded_error" => (503, "server_error", Some("overloaded")),
        "api_error" => (500, "server_error", None),
        _ => match status {
            529 => (503, "server_error", Some("overloaded")),
            401 => (401, "authentication_error", Some("invalid_api_key")),
            403 => (403, "permission_error", None),
            429 => (429, "rate_limit_exceeded", Some("rate_limit_exceeded")),
            s if s >= 500 => (s, "server_error", None),
            s => (s, "invalid_request_error", None),
        },
    }
}

fn openai_body(status: u16, kind: &str, code: Option<&str>, message: String) -> TranslatedError {
    let body = OaError {
        error: OaErrorInner {
            message,
            kind: Some(kind.into()),
            param: None,
            code: Some(code.map_or(serde_json::Value::Null, Into::into)),
        },
    };
    TranslatedError {
        status,
        body: serde_json::to_vec(&body).unwrap_or_default(),
    }
}

/// Anthropic's status and type for an OpenAI error status.
fn anthropic_kind(status: u16) -> (u16, &'static str) {
    match status {
        429 => (429, "rate_limit_error"),
        401 => (401, "authentication_error"),
        403 => (403, "permission_error"),
        404 => (404, "not_found_error"),
        400 | 422 => (400, "invalid_request_error"),
        413 => (413, "request_too_large"),
        503 => (529, "overloaded_error"),
        s if s >= 500 => (s, "api_error"),
        s => (s, "invalid_request_error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn body(e: &TranslatedError) -> Value {
        serde_json::from_slice(&e.body).unwrap()
    }

    fn an(kind: &str, msg: &str) -> Vec<u8> {
        json!({"type": "error", "error": {"type": kind, "message": msg}})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn x3_anthropic_overloaded_is_an_openai_503() {
        let e = error(
            Dialect::Anthropic,
            Dialect::OpenAi,
            529,
            &an("overloaded_error", "Overloaded"),
        );
        assert_eq!(e.status, 503);
        assert_eq!(
            body(&e),
            json!({"error": {"message": "Overloaded", "type": "server_error", "param": null, "code": "overloaded"}})
        );
    }

    #[test]
    fn x3_anthropic_types_map_to_openai_statuses_and_codes() {
        let cases = [
            (
                "invalid_request_error",
                400,
                400,
                "invalid_request_error",
                Value::Null,
            ),
            (
                "authentication_error",
                401,
                401,
                "authentication_error",
                json!("invalid_api_key"),
            ),
            (
                "permission_error",
                403,
                403,
                "permission_error",
                Value::Null,
            ),
            (
                "not_found_error",
                404,
                404,
                "invalid_request_error",
                Value::Null,
            ),
            (
                "rate_limit_error",
                429,
                429,
                "rate_limit_exceeded",
                json!("rate_limit_exceeded"),
            ),
            ("api_error", 500, 500, "server_error", Value::Null),
        ];
        for (kind, status, want, want_kind, code) in cases {
            let e = error(Dialect::Anthropic, Dialect::OpenAi, status, &an(kind, "m"));
            assert_eq!(e.status, want, "{kind}");
            assert_eq!(
                body(&e),
                json!({"error": {"message": "m", "type": want_kind, "param": null, "code": code}}),
                "{kind}"
            );
        }
    }

    #[test]
    fn x3_openai_rate_limit_is_an_anthropic_rate_limit_error() {
        let oa = json!({"error": {"message": "Rate limit reached for gpt-4o", "type": "requests", "param": null, "code": "rate_limit_exceeded"}});
        let e = error(
            Dialect::OpenAi,
            Dialect::Anthropic,
            429,
            oa.to_string().as_bytes(),
        );
        assert_eq!(e.status, 429);
        assert_eq!(
            body(&e),
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Rate limit reached for gpt-4o"}})
        );
    }

    #[test]
    fn x3_openai_statuses_map_to_anthropic_types() {
        let cases = [
            (401, 401, "authentication_error"),
            (403, 403, "permission_error"),
            (404, 404, "not_found_error"),
            (422, 400, "invalid_request_error"),
            (503, 529, "overloaded_error"),
            (502, 502, "api_error"),
        ];
        for (status, want, kind) in cases {
            let oa = json!({"error": {"message": "m", "type": "x", "param": null, "code": null}});
            let e = error(
                Dialect::OpenAi,
                Dialect::Anthropic,
                status,
                oa.to_string().as_bytes(),
            );
            assert_eq!(
                (e.status, body(&e)["error"]["type"].clone()),
                (want, json!(kind))
            );
        }
    }

    #[test]
    fn x3_unparsable_body_becomes_a_generic_error_of_the_status() {
        let e = error(
            Dialect::OpenAi,
            Dialect::Anthropic,
            502,
            b"<html>Bad gateway</html>",
        );
        assert_eq!(e.status, 502);
        assert_eq!(
            body(&e),
            json!({"type": "error", "error": {"type": "api_error", "message": "the provider answered 502"}})
        );
        let e = error(Dialect::Anthropic, Dialect::OpenAi, 529, b"overloaded");
        assert_eq!(e.status, 503);
        assert_eq!(
            body(&e)["error"]["message"],
            json!("the provider answered 529")
        );
    }

    #[test]
    fn x3_untranslated_pairs_keep_body_and_status() {
        let e = error(Dialect::OpenAi, Dialect::OpenAi, 418, b"teapot");
        assert_eq!(
            e,
            TranslatedError {
                status: 418,
                body: b"teapot".to_vec()
            }
        );
    }
}
