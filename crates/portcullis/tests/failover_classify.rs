//! F5: the classifier over a table of the providers' real error answers (bodies and
//! headers as OpenAI, Anthropic and Gemini send them), read by `error_facts`.

use http::HeaderMap;
use portcullis::core::Dialect;
use portcullis::core::failover::{ChannelAction, ErrorFacts, Reason, Transport, classify};
use portcullis::failover::error_facts;
use portcullis::upstream::MAX_SIGNAL_MS;

struct Row {
    name: &'static str,
    dialect: Dialect,
    status: u16,
    headers: &'static [(&'static str, &'static str)],
    body: &'static str,
    reason: Reason,
    failover: bool,
    action: fn(ChannelAction) -> bool,
    rate_limited: bool,
    stop_account: bool,
}

fn none(a: ChannelAction) -> bool {
    a == ChannelAction::None
}
fn disable(a: ChannelAction) -> bool {
    a == ChannelAction::Disable
}
fn cool_20s(a: ChannelAction) -> bool {
    a == ChannelAction::CoolDown(20_000)
}
fn cool_default(a: ChannelAction) -> bool {
    a == ChannelAction::CoolDown(1_000)
}
fn slow(a: ChannelAction) -> bool {
    matches!(a, ChannelAction::SlowDown(_))
}

const ROWS: &[Row] = &[
    Row {
        name: "openai 429 rate_limit_exceeded with retry-after",
        dialect: Dialect::OpenAi,
        status: 429,
        headers: &[
            ("retry-after", "20"),
            ("x-ratelimit-remaining-requests", "0"),
        ],
        body: r#"{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-x on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
        reason: Reason::RateLimited,
        failover: true,
        action: cool_20s,
        rate_limited: true,
        stop_account: false,
    },
    Row {
        name: "openai 429 slow_down",
        dialect: Dialect::OpenAi,
        status: 429,
        headers: &[],
        body: r#"{"error":{"message":"Please reduce your rate of requests: a sudden increase in your request rate is impacting service reliability.","type":"slow_down","param":null,"code":"slow_down"}}"#,
        reason: Reason::SlowDown,
        failover: true,
        action: slow,
        rate_limited: true,
        stop_account: false,
    },
    Row {
        name: "openai 429 insufficient_quota (spend cap)",
        dialect: Dialect::OpenAi,
        status: 429,
        headers: &[],
        body: r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
        reason: Reason::SpendCap,
        failover: true,
        action: disable,
        rate_limited: false,
        stop_account: true,
    },
    Row {
        name: "openai 503 server_is_overloaded",
        dialect: Dialect::OpenAi,
        status: 503,
        headers: &[],
        body: r#"{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error","param":null,"code":"server_is_overloaded"}}"#,
        reason: Reason::Overloaded,
        failover: true,
        action: none,
        rate_limited: false,
        stop_account: false,
    },
    Row {
        name: "openai 401 invalid_api_key",
        dialect: Dialect::OpenAi,
        status: 401,
        headers: &[],
        body: r#"{"error":{"message":"Incorrect API key provided: sk-****.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
        reason: Reason::BadCredential,
        failover: true,
        action: disable,
        rate_limited: false,
        stop_account: false,
    },
    Row {
        name: "openai 400 invalid request: never retried",
        dialect: Dialect::OpenAi,
        status: 400,
        headers: &[],
        body: r#"{"error":{"message":"Invalid 'messages': empty array.","type":"invalid_request_error","param":"messages","code":"empty_array"}}"#,
        reason: Reason::InvalidRequest,
        failover: false,
        action: none,
        rate_limited: false,
        stop_account: false,
    },
    Row {
        name: "openai 404 model_not_found",
        dialect: Dialect::OpenAi,
        status: 404,
        headers: &[],
        body: r#"{"error":{"message":"The model `gpt-9` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}"#,
        reason: Reason::NotFound,
        failover: false,
        action: none,
        rate_limited: false,
        stop_account: false,
    },
    Row {
        name: "openai 500 server_error",
        dialect: Dialect::OpenAi,
        status: 500,
        headers: &[],
        body: r#"{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}"#,
        reason: Reason::ServerError,
        failover: true,
        action: none,
        rate_limited: false,
        stop_account: false,
    },
    Row {
        name: "edge 502 html page",
        dialect: Dialect::OpenAi,
        status: 502,
        headers: &[],
        body: "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>cloudflare</body></html>",
        reason: Reason::ServerError,
        failover: true,
        action: none,
        rate_limited: false,
        stop_account: false,
    },
    Row {
        name: "anthropic 429 rate_limit_error",
        dialect: Dialect::Anthropic,
        status: 429,
        headers: &[
            ("retry-after", "20"),
            ("anthropic-ratelimit-requests-remaining", "0"),
        ],
        body: r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 50 requests per minute."},"request_id":"req_011CS"}"#,
        reason: Reason::RateLimited,
        failover: true,
        action: cool_20s,
        rate_limited: true,
        stop_account: false,
    },
    Row {
        name: "anthropic 429 enforced_spend_limit_reached",
        dialect: Dialect::Anthropic,
        status: 429,
        headers: &[],
        body: r#"{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your API usage limits.","details":{"error_code":"enforced_spend_limit_reached"}},"request_id":"req_1"}"#,
        reason: Reason::SpendCap,
        failover: true,
        action: disable,
        rate_limited: false,
        stop_account: true,
    },
    Row {
        name: "anthropic 400 usage limits (spend cap)",
        dialect: Dialect::Anthropic,
        status: 400,
        headers: &[],
        body: r#"{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2026-12-01 at 00:00 UTC."},"request_id":"req_2"}"#,
        reason: Reason::SpendCap,
        failover: true,
        action: disable,
        rate_limited: false,
        stop_account: true,
    },
    Row {
        name: "anthropic 402 billing_error",
        dialect: Dialect::Anthropic,
        status: 402,
        headers: &[],
        body: r#"{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low to access the Anthropic API."},"request_id":"req_3"}"#,
        reason: Reason::SpendCap,
        failover: true,
        action: disable,
        rate_limited: false,
        stop_account: true,
    },
    Row {
        name: "anthropic 529 overloaded_error",
        dialect: Dialect::Anthropic,
        status: 529,
        headers: &[],
        body: r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_4"}"#,
        reason: Reason::Overloaded,
        failover: true,
        action: none,
        rate_limited: false,
        stop_account: false,
    },
    Row {
        name: "anthropic 401 authentication_error",
        dialect: Dialect::Anthropic,
        status: 401,
        headers: &[],
        body: r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"req_5"}"#,
        reason: Reason::BadCredential,
        failover: true,
        action: disable,
        rate_limited: false,
        stop_account: false,
    },
    Row {
        name: "anthropic 413 request_too_large",
        dialect: Dialect::Anthropic,
        status: 413,
        headers: &[],
        body: r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#,
        reason: Reason::InvalidRequest,
        failover: false,
        action: none,
        rate_limited: false,
        stop_account: false,
    },
    Row {
        name: "gemini 429 RESOURCE_EXHAUSTED with RetryInfo (rate limit)",
        dialect: Dialect::Gemini,
        status: 429,
        headers: &[],
        body: r#"{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"20s"}]}}"#,
        reason: Reason::RateLimited,
        failover: true,
        action: cool_20s,
        rate_limited: true,
        stop_account: false,
    },
    Row {
        name: "gemini 429 RESOURCE_EXHAUSTED, credits depleted (spend cap)",
        dialect: Dialect::Gemini,
        status: 429,
        headers: &[],
        body: r#"{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. Your prepayment credits are depleted.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/billing_spend","quotaId":"BillingSpendLimitPerProject"}]}]}}"#,
        reason: Reason::SpendCap,
        failover: true,
        action: disable,
        rate_limited: false,
        stop_account: true,
    },
    Row {
        name: "gemini 429 RESOURCE_EXHAUSTED without any detail: a rate limit",
        dialect: Dialect::Gemini,
        status: 429,
        headers: &[],
        body: r#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}"#,
        reason: Reason::RateLimited,
        failover: true,
        action: cool_default,
        rate_limited: true,
        stop_account: false,
    },
    Row {
        name: "gemini 503 UNAVAILABLE",
        dialect: Dialect::Gemini,
        status: 503,
        headers: &[],
        body: r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#,
        reason: Reason::Overloaded,
        failover: true,
        action: none,
        rate_limited: false,
        stop_account: false,
    },
    Row {
        name: "gemini 400 API_KEY_INVALID",
        dialect: Dialect::Gemini,
        status: 400,
        headers: &[],
        body: r#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}"#,
        reason: Reason::BadCredential,
        failover: true,
        action: disable,
        rate_limited: false,
        stop_account: false,
    },
    Row {
        name: "gemini 400 INVALID_ARGUMENT: never retried",
        dialect: Dialect::Gemini,
        status: 400,
        headers: &[],
        body: r#"{"error":{"code":400,"message":"Invalid JSON payload received.","status":"INVALID_ARGUMENT"}}"#,
        reason: Reason::InvalidRequest,
        failover: false,
        action: none,
        rate_limited: false,
        stop_account: false,
    },
    Row {
        name: "408, 409, 425 fail over",
        dialect: Dialect::OpenAi,
        status: 409,
        headers: &[],
        body: "",
        reason: Reason::ServerError,
        failover: true,
        action: none,
        rate_limited: false,
        stop_account: false,
    },
    Row {
        name: "an unknown 418 is handled conservatively",
        dialect: Dialect::Anthropic,
        status: 418,
        headers: &[("request-id", "req_teapot")],
        body: r#"{"type":"error","error":{"type":"teapot_error","message":"short and stout"}}"#,
        reason: Reason::Unknown,
        failover: false,
        action: none,
        rate_limited: false,
        stop_account: false,
    },
];

#[test]
fn f5_classifier_over_real_provider_error_answers() {
    for row in ROWS {
        let mut h = HeaderMap::new();
        for (k, v) in row.headers {
            h.insert(*k, v.parse().unwrap());
        }
        let facts = error_facts(row.dialect, row.status, &h, row.body.as_bytes());
        let v = classify(row.dialect, &facts);
        assert_eq!(v.reason, row.reason, "{}: {facts:?}", row.name);
        assert_eq!(v.failover, row.failover, "{}", row.name);
        assert!((row.action)(v.action), "{}: {:?}", row.name, v.action);
        assert_eq!(v.rate_limited, row.rate_limited, "{}", row.name);
        assert_eq!(v.stop_account, row.stop_account, "{}", row.name);
        assert!(
            !v.result_unknown,
            "{}: an answer is a known result",
            row.name
        );
    }
}

#[test]
fn f5_provider_request_id_and_retry_hints_are_kept() {
    let mut h = HeaderMap::new();
    h.insert("request-id", "req_teapot".parse().unwrap());
    let f = error_facts(Dialect::Anthropic, 418, &h, b"not json at all");
    assert_eq!(f.request_id.as_deref(), Some("req_teapot"));
    let gemini = ROWS
        .iter()
        .find(|r| r.name.starts_with("gemini 429 RESOURCE_EXHAUSTED with"))
        .unwrap();
    let f = error_facts(
        Dialect::Gemini,
        429,
        &HeaderMap::new(),
        gemini.body.as_bytes(),
    );
    assert_eq!(f.retry_after_ms, Some(20_000), "RetryInfo.retryDelay");
    assert!(f.retry_info);
    let anth = ROWS
        .iter()
        .find(|r| r.name == "anthropic 429 enforced_spend_limit_reached")
        .unwrap();
    let f = error_facts(
        Dialect::Anthropic,
        429,
        &HeaderMap::new(),
        anth.body.as_bytes(),
    );
    assert_eq!(f.request_id.as_deref(), Some("req_1"));
}

#[test]
fn f5_transport_failures_connect_is_known_timeout_and_stream_are_unknown() {
    for (t, reason, unknown) in [
        (Transport::Connect, Reason::Connect, false),
        (Transport::Timeout, Reason::Timeout, true),
        (
            Transport::StreamBeforeFirstChunk,
            Reason::StreamFailed,
            true,
        ),
    ] {
        let f = ErrorFacts {
            transport: Some(t),
            ..ErrorFacts::default()
        };
        let v = classify(Dialect::OpenAi, &f);
        assert_eq!(
            (v.reason, v.failover, v.result_unknown),
            (reason, true, unknown)
        );
    }
}

#[test]
fn f5_garbage_bodies_never_panic() {
    let bodies: [&[u8]; 6] = [
        b"",
        b"{",
        b"[]",
        b"{\"error\":5}",
        b"{\"error\":{\"details\":\"x\",\"message\":[1]}}",
        &[0xff, 0xfe, 0x00],
    ];
    for d in [Dialect::OpenAi, Dialect::Anthropic, Dialect::Gemini] {
        for b in bodies {
            for s in [200, 400, 429, 500, 529] {
                let _ = classify(d, &error_facts(d, s, &HeaderMap::new(), b));
            }
        }
    }
}

/// F6: every provider-supplied wait is capped like `Retry-After`
/// (`MAX_SIGNAL_MS`, 24 h): Gemini's `RetryInfo.retryDelay` from an error body too, so a
/// garbled or hostile delay cannot park a channel for years.
#[test]
fn f6_gemini_retry_delay_is_capped_like_retry_after() {
    let body = |delay: &str| {
        format!(
            r#"{{"error":{{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED","details":[{{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"{delay}"}}]}}}}"#
        )
    };
    for delay in ["864000000s", "1e300s", "9999999999999999999s"] {
        let f = error_facts(
            Dialect::Gemini,
            429,
            &HeaderMap::new(),
            body(delay).as_bytes(),
        );
        assert_eq!(f.retry_after_ms, Some(MAX_SIGNAL_MS), "retryDelay {delay}");
        assert!(f.retry_info);
    }
    // The header's cap is the same one.
    let mut h = HeaderMap::new();
    h.insert("retry-after", "864000000".parse().unwrap());
    let f = error_facts(Dialect::Gemini, 429, &h, b"");
    assert_eq!(f.retry_after_ms, Some(MAX_SIGNAL_MS));
    // A delay under the cap is kept as sent.
    let f = error_facts(
        Dialect::Gemini,
        429,
        &HeaderMap::new(),
        body("1.5s").as_bytes(),
    );
    assert_eq!(f.retry_after_ms, Some(1_500));
}
