//! A [`Rejection`] as a gRPC status (feature `grpc`): what a tonic (or any gRPC)
//! client reads as `RESOURCE_EXHAUSTED`, `UNAVAILABLE`, … instead of an unknown error.
//!
//! gRPC carries errors in `grpc-status` / `grpc-message` with HTTP status 200; a
//! response that fails before any message is *trailers-only*: one `HEADERS` frame with
//! the status and no body. The structured details travel in
//! `grpc-status-details-bin`, a base64 `google.rpc.Status` built here with
//! [`tonic_types`] (never hand-encoded protobuf).

use super::X_REQUEST_ID;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response};
use http_body_util::Full;
use portcullis_core::{GatewayCode, Rejection};
use std::collections::HashMap;
use tonic::Code;
use tonic_types::{ErrorDetails, StatusExt};

/// `ErrorInfo.domain` of every gateway error.
pub const ERROR_DOMAIN: &str = "portcullis";

/// Whether `headers` are those of a gRPC request: a `content-type` of
/// `application/grpc`, alone or with a `+format` suffix (`application/grpc+proto`) or
/// parameters. gRPC-Web (`application/grpc-web…`) is not gRPC here: put tonic-web's
/// layer outside [`ErrorMappingLayer`](super::ErrorMappingLayer), where it turns the
/// request into gRPC and the answer back into gRPC-Web.
///
/// ```
/// use http::{HeaderMap, HeaderValue, header::CONTENT_TYPE};
/// use portcullis::error_map::is_grpc;
///
/// let mut h = HeaderMap::new();
/// h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc+proto"));
/// assert!(is_grpc(&h));
/// h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
/// assert!(!is_grpc(&h));
/// ```
pub fn is_grpc(headers: &HeaderMap) -> bool {
    let Some(ct) = headers.get(http::header::CONTENT_TYPE) else {
        return false;
    };
    let ct = ct.as_bytes();
    let prefix = b"application/grpc";
    ct.len() >= prefix.len()
        && ct[..prefix.len()].eq_ignore_ascii_case(prefix)
        && matches!(ct.get(prefix.len()), None | Some(b'+' | b';'))
}

/// The gRPC code of an HTTP status: the google.rpc code the Gemini dialect names
/// for it (E1), so every client of the gateway reads the same class of error.
///
/// | HTTP | gRPC |
/// |---|---|
/// | 429, 402 | `RESOURCE_EXHAUSTED` |
/// | 401 | `UNAUTHENTICATED` |
/// | 403 | `PERMISSION_DENIED` |
/// | 404 | `NOT_FOUND` |
/// | 400, 408, 413, 422, other 4xx | `INVALID_ARGUMENT` |
/// | 502, 503 | `UNAVAILABLE` |
/// | 504 | `DEADLINE_EXCEEDED` |
/// | 500, other 5xx | `INTERNAL` |
pub fn grpc_code(http_status: u16) -> Code {
    match http_status {
        429 | 402 => Code::ResourceExhausted,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::NotFound,
        502 | 503 => Code::Unavailable,
        504 => Code::DeadlineExceeded,
        500..=599 => Code::Internal,
        _ => Code::InvalidArgument,
    }
}

/// Renders `rejection` as a trailers-only gRPC response (E1–E3 the gRPC way).
///
/// - HTTP status 200, `content-type: application/grpc`, no body;
/// - `grpc-status`: [`grpc_code`] of the rejection's HTTP status;
/// - `grpc-message`: [`Rejection::message`] (percent-encoded, so the Chinese text of
///   42906 arrives intact);
/// - `grpc-status-details-bin`, a `google.rpc.Status` whose details are
///   - `google.rpc.ErrorInfo`: reason = the code's name (`CONCURRENCY_LIMIT`, `RPM_LIMIT`,
///     …), domain [`ERROR_DOMAIN`], metadata `code` (the gateway code, e.g. `42901`),
///     `layer`, `should_retry` (`true` / `false`, as `x-should-retry` in E2) and, on a
///     429, `limit_requests` / `limit_tokens` where those limits exist (the
///     `X-RateLimit-*` of E2);
///   - `google.rpc.RetryInfo` with the exact delay until recovery, whenever it is known
///     (the HTTP form's `Retry-After`);
///   - `google.rpc.QuotaFailure` naming the dimension and tier that was hit, if one was;
///   - `google.rpc.RequestInfo` with the request id (E3);
/// - `x-request-id: <request_id>` (omitted if empty or not a valid header value).
///
/// ```
/// use std::time::Duration;
/// use portcullis::error_map::render_grpc;
/// use portcullis::core::{GatewayCode, LayerKind, Rejection};
///
/// let r = Rejection::new(GatewayCode::ConcurrencyLimit, LayerKind::ConcurrencySlot)
///     .with_retry_after(Some(Duration::from_secs(1)));
/// let res = render_grpc(&r, "req-1");
/// assert_eq!(res.status(), 200);
/// assert_eq!(res.headers()["content-type"], "application/grpc");
/// assert_eq!(res.headers()["grpc-status"], "8"); // RESOURCE_EXHAUSTED
/// assert_eq!(res.headers()["grpc-message"], "concurrency%20limit%20exceeded");
/// assert!(res.headers().contains_key("grpc-status-details-bin"));
/// ```
pub fn render_grpc(rejection: &Rejection, request_id: &str) -> Response<Full<Bytes>> {
    let status = rejection.http_status();
    let mut details = ErrorDetails::new();

    let mut metadata = HashMap::from([
        ("code".to_owned(), rejection.code().code().to_string()),
        ("layer".to_owned(), rejection.layer().as_str().to_owned()),
        (
            "should_retry".to_owned(),
            rejection.should_retry().to_string(),
        ),
    ]);
    if status == 429 {
        let limits = rejection.rate_limits();
        if let Some(l) = limits.requests {
            metadata.insert("limit_requests".to_owned(), l.to_string());
        }
        if let Some(l) = limits.tokens {
            metadata.insert("limit_tokens".to_owned(), l.to_string());
        }
    }
    details.set_error_info(reason(rejection.code()), ERROR_DOMAIN, metadata);
    if let Some(delay) = rejection.retry_after() {
        details.set_retry_info(Some(delay));
    }
    if let Some((dimension, tier)) = rejection.limit() {
        details.add_quota_failure_violation(
            dimension.as_str(),
            format!("{} {dimension} per {} ms", tier.limit, tier.window_ms),
        );
    }
    if !request_id.is_empty() {
        details.set_request_info(request_id, "");
    }

    let grpc = tonic::Status::with_error_details(grpc_code(status), rejection.message(), details);
    let mut res = into_http(grpc);
    if let Some(id) = Some(request_id)
        .filter(|id| !id.is_empty())
        .and_then(|id| HeaderValue::from_str(id).ok())
    {
        res.headers_mut().insert(X_REQUEST_ID, id);
    }
    res
}

/// `status` as a trailers-only response. tonic's own `Status::into_http` only fails on
/// header values it cannot write, which a status built from a `String` message and
/// protobuf details never has; should it ever, the answer is still a well-formed
/// `INTERNAL` status rather than a panic.
fn into_http(status: tonic::Status) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::default());
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    if status.add_header(res.headers_mut()).is_err() {
        let h = res.headers_mut();
        h.clear();
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        h.insert("grpc-status", HeaderValue::from(Code::Internal as i32));
    }
    res
}

/// `ErrorInfo.reason`: the code's name in UPPER_SNAKE_CASE (`RpmLimit` → `RPM_LIMIT`),
/// as google.rpc asks (`[A-Z][A-Z0-9_]+[A-Z0-9]`).
fn reason(code: GatewayCode) -> String {
    let name = format!("{code:?}");
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_core::{Dimension, LayerKind, RateLimitInfo, Tier};
    use std::time::Duration;

    fn status_of(res: &Response<Full<Bytes>>) -> tonic::Status {
        tonic::Status::from_header_map(res.headers()).expect("a grpc-status header")
    }

    #[test]
    fn e1_grpc_code_agrees_with_the_gemini_status_names() {
        for c in GatewayCode::ALL {
            let s = c.http_status();
            let name = match grpc_code(s) {
                Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
                Code::Unauthenticated => "UNAUTHENTICATED",
                Code::PermissionDenied => "PERMISSION_DENIED",
                Code::NotFound => "NOT_FOUND",
                Code::Unavailable => "UNAVAILABLE",
                Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
                Code::Internal => "INTERNAL",
                Code::InvalidArgument => "INVALID_ARGUMENT",
                other => panic!("unexpected {other:?} for {c}"),
            };
            assert_eq!(name, super::super::render::gemini_status(s), "{c}");
        }
    }

    #[test]
    fn e1_reasons_are_upper_snake_case() {
        assert_eq!(reason(GatewayCode::RpmLimit), "RPM_LIMIT");
        assert_eq!(reason(GatewayCode::ConcurrencyLimit), "CONCURRENCY_LIMIT");
        assert_eq!(reason(GatewayCode::Internal), "INTERNAL");
        for c in GatewayCode::ALL {
            let r = reason(*c);
            assert!(r.starts_with(|c: char| c.is_ascii_uppercase()), "{r}");
            assert!(r.chars().all(|c| c.is_ascii_uppercase() || c == '_'), "{r}");
            assert!(!r.ends_with('_'), "{r}");
        }
    }

    #[test]
    fn e2_window_rejection_carries_retry_info_quota_and_limits() {
        let r = Rejection::new(GatewayCode::TpmLimit, LayerKind::AnchoredWindow)
            .with_retry_after(Some(Duration::from_millis(2_500)))
            .with_limit(Dimension::Tokens, Tier::per_minute(1000))
            .with_rate_limits(RateLimitInfo {
                requests: Some(60),
                tokens: Some(1000),
            });
        let res = render_grpc(&r, "req-9");
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["x-request-id"], "req-9");
        let st = status_of(&res);
        assert_eq!(st.code(), Code::ResourceExhausted);
        assert_eq!(st.message(), "tpm limit exceeded");
        let d = st.get_error_details();
        assert_eq!(
            d.retry_info().unwrap().retry_delay,
            Some(Duration::from_millis(2_500))
        );
        let info = d.error_info().unwrap();
        assert_eq!(info.reason, "TPM_LIMIT");
        assert_eq!(info.domain, ERROR_DOMAIN);
        assert_eq!(info.metadata["code"], "42905");
        assert_eq!(info.metadata["layer"], "anchored_window");
        assert_eq!(info.metadata["should_retry"], "true");
        assert_eq!(info.metadata["limit_requests"], "60");
        assert_eq!(info.metadata["limit_tokens"], "1000");
        let q = d.quota_failure().unwrap();
        assert_eq!(q.violations[0].subject, "tokens");
        assert_eq!(q.violations[0].description, "1000 tokens per 60000 ms");
        assert_eq!(d.request_info().unwrap().request_id, "req-9");
    }

    #[test]
    fn e2_unknown_recovery_has_no_retry_info_and_says_do_not_retry() {
        let r = Rejection::new(GatewayCode::InsufficientBalance, LayerKind::BillingGate);
        let st = status_of(&render_grpc(&r, "x"));
        assert_eq!(st.code(), Code::ResourceExhausted);
        let d = st.get_error_details();
        assert!(d.retry_info().is_none());
        assert!(d.quota_failure().is_none());
        assert_eq!(d.error_info().unwrap().metadata["should_retry"], "false");
        assert!(
            !d.error_info()
                .unwrap()
                .metadata
                .contains_key("limit_requests")
        );
    }

    #[test]
    fn w8_chinese_message_survives_percent_encoding() {
        let r = Rejection::new(GatewayCode::SubscriptionQuota, LayerKind::AnchoredWindow);
        let res = render_grpc(&r, "");
        assert!(res.headers()["grpc-message"].to_str().is_ok());
        assert!(!res.headers().contains_key("x-request-id"));
        let st = status_of(&res);
        assert_eq!(
            st.message(),
            GatewayCode::SubscriptionQuota.default_message()
        );
        assert!(st.get_error_details().request_info().is_none());
    }

    #[test]
    fn grpc_content_types() {
        let h = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(v));
            h
        };
        assert!(is_grpc(&h("application/grpc")));
        assert!(is_grpc(&h("application/grpc+proto")));
        assert!(is_grpc(&h("Application/GRPC;charset=utf-8")));
        assert!(!is_grpc(&h("application/grpc-web")));
        assert!(!is_grpc(&h("application/grpcx")));
        assert!(!is_grpc(&h("application/json")));
        assert!(!is_grpc(&HeaderMap::new()));
    }
}
