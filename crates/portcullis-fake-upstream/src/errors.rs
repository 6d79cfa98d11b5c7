//! Provider error bodies and headers, per dialect, as the real providers send them.

use std::time::{Duration, SystemTime};

use http::{HeaderName, HeaderValue};
use serde_json::{Value, json};

use crate::Dialect;
use crate::behavior::{Behavior, ErrorKind};
use crate::time::{ceil_secs, first_of_next_month, openai_duration, rfc3339};

pub(crate) type Headers = Vec<(HeaderName, HeaderValue)>;

/// What an answer is about, for rendering.
pub(crate) struct Ctx<'a> {
    pub(crate) dialect: Dialect,
    pub(crate) model: &'a str,
    pub(crate) request_id: &'a str,
    pub(crate) behavior: &'a Behavior,
    pub(crate) now: SystemTime,
    /// The fake instance's number (in the ids it mints).
    pub(crate) instance: u64,
}

/// A rendered error answer.
pub(crate) struct Rendered {
    pub(crate) status: u16,
    pub(crate) content_type: &'static str,
    pub(crate) body: String,
    pub(crate) headers: Headers,
}

pub(crate) fn push(h: &mut Headers, name: &'static str, value: impl ToString) {
    if let Ok(v) = HeaderValue::try_from(value.to_string()) {
        h.push((HeaderName::from_static(name), v));
    }
}

/// Rate-limit numbers with defaults filled in.
struct Limits {
    limit_requests: u64,
    remaining_requests: u64,
    limit_tokens: u64,
    remaining_tokens: u64,
    reset: Duration,
}

fn limits(b: &Behavior, rate_limited: bool) -> Limits {
    let rl = &b.rate_limit;
    let limit_requests = rl.limit_requests.unwrap_or(60);
    let limit_tokens = rl.limit_tokens.unwrap_or(150_000);
    let (remaining_requests, remaining_tokens) =
        if rate_limited && rl.remaining_requests.is_none() && rl.remaining_tokens.is_none() {
            (0, limit_tokens)
        } else {
            (
                rl.remaining_requests.unwrap_or(limit_requests),
                rl.remaining_tokens.unwrap_or(limit_tokens),
            )
        };
    let reset = rl
        .reset
        .or(b.retry_after.map(Duration::from_secs))
        .unwrap_or(Duration::from_secs(1));
    Limits {
        limit_requests,
        remaining_requests,
        limit_tokens,
        remaining_tokens,
        reset,
    }
}

/// The provider's rate-limit headers (none for Gemini). On a success they are sent
/// only when the behaviour sets rate-limit numbers.
pub(crate) fn rate_limit_headers(ctx: &Ctx<'_>, rate_limited: bool, h: &mut Headers) {
    if !rate_limited && !ctx.behavior.rate_limit.is_set() {
        return;
    }
    let l = limits(ctx.behavior, rate_limited);
    match ctx.dialect {
        Dialect::OpenAi => {
            let reset = openai_duration(l.reset);
            push(h, "x-ratelimit-limit-requests", l.limit_requests);
            push(h, "x-ratelimit-limit-tokens", l.limit_tokens);
            push(h, "x-ratelimit-remaining-requests", l.remaining_requests);
            push(h, "x-ratelimit-remaining-tokens", l.remaining_tokens);
            push(h, "x-ratelimit-reset-requests", &reset);
            push(h, "x-ratelimit-reset-tokens", &reset);
        }
        Dialect::Anthropic => {
            let reset = rfc3339(ctx.now + l.reset);
            push(h, "anthropic-ratelimit-requests-limit", l.limit_requests);
            push(
                h,
                "anthropic-ratelimit-requests-remaining",
                l.remaining_requests,
            );
            push(h, "anthropic-ratelimit-requests-reset", &reset);
            push(h, "anthropic-ratelimit-tokens-limit", l.limit_tokens);
            push(
                h,
                "anthropic-ratelimit-tokens-remaining",
                l.remaining_tokens,
            );
            push(h, "anthropic-ratelimit-tokens-reset", &reset);
            push(h, "anthropic-ratelimit-input-tokens-limit", l.limit_tokens);
            push(
                h,
                "anthropic-ratelimit-input-tokens-remaining",
                l.remaining_tokens,
            );
            push(h, "anthropic-ratelimit-input-tokens-reset", &reset);
            push(h, "anthropic-ratelimit-output-tokens-limit", l.limit_tokens);
            push(
                h,
                "anthropic-ratelimit-output-tokens-remaining",
                l.remaining_tokens,
            );
            push(h, "anthropic-ratelimit-output-tokens-reset", &reset);
        }
        Dialect::Gemini => {}
    }
}

const CLOUDFLARE_502: &str = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>cloudflare</center>\r\n</body>\r\n</html>\r\n";

fn is_rate_limit(kind: &ErrorKind) -> bool {
    matches!(kind, ErrorKind::RateLimit | ErrorKind::SlowDown)
}

/// Renders a whole error answer: status, body, content type and headers.
pub(crate) fn render(ctx: &Ctx<'_>, kind: &ErrorKind, status: u16) -> Rendered {
    let mut headers = Headers::new();
    if matches!(kind, ErrorKind::RateLimit) {
        rate_limit_headers(ctx, true, &mut headers);
    } else {
        rate_limit_headers(ctx, false, &mut headers);
    }
    let retry_after = ctx.behavior.retry_after.or_else(|| {
        // Anthropic always tells how long to wait on a rate limit.
        (ctx.dialect == Dialect::Anthropic && is_rate_limit(kind))
            .then(|| ceil_secs(limits(ctx.behavior, true).reset))
    });
    if let Some(s) = retry_after {
        push(&mut headers, "retry-after", s);
    }
    if matches!(kind, ErrorKind::BadGateway) {
        return Rendered {
            status,
            content_type: "text/html",
            body: CLOUDFLARE_502.to_owned(),
            headers,
        };
    }
    Rendered {
        status,
        content_type: "application/json",
        body: error_json(ctx, kind, status),
        headers,
    }
}

/// The JSON error body of `kind` in the context's dialect (also used as the payload of
/// in-stream error events).
pub(crate) fn error_json(ctx: &Ctx<'_>, kind: &ErrorKind, status: u16) -> String {
    let v = match ctx.dialect {
        Dialect::OpenAi => openai(ctx, kind),
        Dialect::Anthropic => anthropic(ctx, kind, status),
        Dialect::Gemini => gemini(ctx, kind, status),
    };
    v.to_string()
}

/// The in-stream `error` event payload of the Responses API:
/// `{"type":"error","code":…,"message":…,"param":null,"sequence_number":…}` (the code
/// is the OpenAI error's `code`, else its `type`).
pub(crate) fn responses_stream_error(
    ctx: &Ctx<'_>,
    kind: &ErrorKind,
    sequence_number: u64,
) -> String {
    let v = openai(ctx, kind);
    let e = &v["error"];
    let code = match &e["code"] {
        Value::Null => e["type"].clone(),
        c => c.clone(),
    };
    json!({
        "type": "error",
        "code": code,
        "message": e["message"],
        "param": null,
        "sequence_number": sequence_number,
    })
    .to_string()
}

fn oai(message: String, ty: &str, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": ty, "param": null, "code": code}})
}

fn openai(ctx: &Ctx<'_>, kind: &ErrorKind) -> Value {
    let model = ctx.model;
    match kind {
        ErrorKind::RateLimit => {
            let l = limits(ctx.behavior, true);
            let tokens = ctx.behavior.rate_limit.remaining_tokens == Some(0)
                && ctx.behavior.rate_limit.remaining_requests != Some(0);
            let (what, unit, limit) = if tokens {
                ("tokens", "TPM", l.limit_tokens)
            } else {
                ("requests", "RPM", l.limit_requests)
            };
            oai(
                format!(
                    "Rate limit reached for {model} in organization org-fakeupstream on {what} per min ({unit}): Limit {limit}, Used {limit}, Requested 1. Please try again in {}. Visit https://platform.openai.com/account/rate-limits to learn more.",
                    openai_duration(l.reset)
                ),
                what,
                Some("rate_limit_exceeded"),
            )
        }
        ErrorKind::SlowDown => oai(
            "Please reduce your rate of requests: a sudden increase in your request rate is impacting service reliability.".into(),
            "slow_down",
            Some("slow_down"),
        ),
        ErrorKind::SpendLimit => oai(
            "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.".into(),
            "insufficient_quota",
            Some("insufficient_quota"),
        ),
        ErrorKind::Overloaded => oai(
            "The server is overloaded or not ready yet.".into(),
            "server_error",
            Some("server_is_overloaded"),
        ),
        ErrorKind::InvalidRequest => oai(
            "Invalid request (injected by the fake upstream).".into(),
            "invalid_request_error",
            None,
        ),
        ErrorKind::InvalidApiKey => oai(
            "Incorrect API key provided: sk-****. You can find your API key at https://platform.openai.com/account/api-keys.".into(),
            "invalid_request_error",
            Some("invalid_api_key"),
        ),
        ErrorKind::NotFound => oai(
            format!("The model `{model}` does not exist or you do not have access to it."),
            "invalid_request_error",
            Some("model_not_found"),
        ),
        ErrorKind::ServerError | ErrorKind::BadGateway => oai(
            format!(
                "The server had an error while processing your request. Sorry about that! You can retry your request, or contact us through our help center if the error persists. (Please include the request ID {} in your message.)",
                ctx.request_id
            ),
            "server_error",
            None,
        ),
        ErrorKind::Timeout => oai("Request timed out.".into(), "timeout", Some("timeout")),
        ErrorKind::Other(name) => oai(format!("Injected error {name}."), name, Some(name)),
    }
}

fn anth(ctx: &Ctx<'_>, ty: &str, message: String, details: Option<Value>) -> Value {
    let mut err = json!({"type": ty, "message": message});
    if let Some(d) = details {
        err["details"] = d;
    }
    json!({"type": "error", "error": err, "request_id": ctx.request_id})
}

fn anthropic(ctx: &Ctx<'_>, kind: &ErrorKind, status: u16) -> Value {
    match kind {
        ErrorKind::RateLimit => anth(
            ctx,
            "rate_limit_error",
            format!(
                "This request would exceed the rate limit for your organization (fake-upstream) of {} requests per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later.",
                limits(ctx.behavior, true).limit_requests
            ),
            None,
        ),
        ErrorKind::SlowDown => anth(
            ctx,
            "rate_limit_error",
            "This request would exceed your organization's rate limit: your usage increased too sharply. Please ramp up your traffic gradually.".into(),
            None,
        ),
        ErrorKind::SpendLimit => {
            let on = first_of_next_month(ctx.now);
            match status {
                400 => anth(
                    ctx,
                    "invalid_request_error",
                    format!("You have reached your specified API usage limits. You will regain access on {on} at 00:00 UTC."),
                    None,
                ),
                402 => anth(
                    ctx,
                    "billing_error",
                    "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.".into(),
                    None,
                ),
                _ => anth(
                    ctx,
                    "rate_limit_error",
                    format!(
                        "You have reached your API usage limits: your organization has crossed its monthly API usage threshold, set based on your organization's API tier. You will regain access on {on} at 00:00 UTC."
                    ),
                    Some(json!({"error_code": "enforced_spend_limit_reached"})),
                ),
            }
        }
        ErrorKind::Overloaded => anth(ctx, "overloaded_error", "Overloaded".into(), None),
        ErrorKind::InvalidRequest => anth(
            ctx,
            "invalid_request_error",
            "Invalid request (injected by the fake upstream).".into(),
            None,
        ),
        ErrorKind::InvalidApiKey => anth(ctx, "authentication_error", "invalid x-api-key".into(), None),
        ErrorKind::NotFound => anth(ctx, "not_found_error", format!("model: {}", ctx.model), None),
        ErrorKind::ServerError | ErrorKind::BadGateway => {
            anth(ctx, "api_error", "Internal server error".into(), None)
        }
        ErrorKind::Timeout => anth(ctx, "timeout_error", "Request timed out".into(), None),
        ErrorKind::Other(name) => anth(ctx, name, format!("Injected error {name}."), None),
    }
}

fn gem(status: u16, message: String, st: &str, details: Option<Value>) -> Value {
    let mut err = json!({"code": status, "message": message, "status": st});
    if let Some(d) = details {
        err["details"] = d;
    }
    json!({ "error": err })
}

fn gemini(ctx: &Ctx<'_>, kind: &ErrorKind, status: u16) -> Value {
    let model = ctx.model;
    match kind {
        ErrorKind::RateLimit | ErrorKind::SlowDown => {
            let l = limits(ctx.behavior, true);
            let delay = ctx.behavior.retry_after.unwrap_or_else(|| ceil_secs(l.reset));
            gem(
                status,
                "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.".into(),
                "RESOURCE_EXHAUSTED",
                Some(json!([
                    {
                        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                        "violations": [{
                            "quotaMetric": "generativelanguage.googleapis.com/generate_content_requests",
                            "quotaId": "GenerateRequestsPerMinutePerProjectPerModel",
                            "quotaDimensions": {"location": "global", "model": model},
                            "quotaValue": l.limit_requests.to_string()
                        }]
                    },
                    {"@type": "type.googleapis.com/google.rpc.Help", "links": [{"description": "Learn more about Gemini API quotas", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]},
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": format!("{delay}s")}
                ])),
            )
        }
        ErrorKind::SpendLimit => gem(
            status,
            "You exceeded your current quota, please check your plan and billing details. Your prepayment credits are depleted.".into(),
            "RESOURCE_EXHAUSTED",
            Some(json!([{
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [{
                    "quotaMetric": "generativelanguage.googleapis.com/billing_spend",
                    "quotaId": "BillingSpendLimitPerProject",
                    "quotaDimensions": {"location": "global"}
                }]
            }])),
        ),
        ErrorKind::Overloaded => gem(
            status,
            "The model is overloaded. Please try again later.".into(),
            "UNAVAILABLE",
            None,
        ),
        ErrorKind::InvalidRequest => gem(
            status,
            "Invalid request (injected by the fake upstream).".into(),
            "INVALID_ARGUMENT",
            None,
        ),
        ErrorKind::InvalidApiKey => gem(
            status,
            "API key not valid. Please pass a valid API key.".into(),
            "INVALID_ARGUMENT",
            Some(json!([{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"}
            }])),
        ),
        ErrorKind::NotFound => gem(
            status,
            format!("models/{model} is not found for API version v1beta, or is not supported for generateContent."),
            "NOT_FOUND",
            None,
        ),
        ErrorKind::ServerError | ErrorKind::BadGateway => gem(
            status,
            "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting".into(),
            "INTERNAL",
            None,
        ),
        ErrorKind::Timeout => gem(status, "Deadline expired before operation could complete.".into(), "DEADLINE_EXCEEDED", None),
        ErrorKind::Other(name) => gem(status, format!("Injected error {name}."), name, None),
    }
}
