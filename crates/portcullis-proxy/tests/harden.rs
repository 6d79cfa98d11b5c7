//! Hardening rules through real sockets: reservations that match the
//! request (W5 × choices, a money upper bound no store can hold is a 400).

mod common;

use common::*;
use serde_json::json;

const TIER: &str = r#"
[policies.small]
tokens = [{ window = "1m", limit = 1000 }]

[tenants.t]
balance = 1_000_000_000

[keys.small]
key = "sk-small"
tenant = "t"
policy = "small"
"#;

/// A request of `dialect` asking for `choices` choices of `max_tokens` each (OpenAI
/// `n`, Gemini `candidateCount`; Anthropic has no such field).
fn choices_req(dialect: Dialect, max_tokens: u64, choices: u64) -> Req {
    let messages = json!([{"role": "user", "content": "hi"}]);
    let req = match dialect {
        Dialect::OpenAi => Req::post(
            "/v1/chat/completions",
            json!({"model": dialect.model(), "messages": messages, "max_tokens": max_tokens, "n": choices})
                .to_string(),
        ),
        Dialect::Anthropic => Req::post(
            "/v1/messages",
            json!({"model": dialect.model(), "messages": messages, "max_tokens": max_tokens})
                .to_string(),
        ),
        Dialect::Gemini => Req::post(
            format!("/v1beta/models/{}:generateContent", dialect.model()),
            json!({
                "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                "generationConfig": {"maxOutputTokens": max_tokens, "candidateCount": choices},
            })
            .to_string(),
        ),
    };
    req.key(dialect.key_at(), "sk-small")
}

/// W5: a 4-choice request of 300 tokens each (1 200 output tokens) is refused by a
/// 1 000-token tier that one choice fits, with 42905 and before any upstream call; the
/// same request with one choice passes. In every dialect that has choices (OpenAI `n`,
/// Gemini `candidateCount`); Anthropic has none, so its request is one choice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w5_reservation_multiplies_output_by_the_choices_asked_for() {
    let p = Proxy::start(TIER).await;
    for d in [Dialect::OpenAi, Dialect::Gemini] {
        let calls = p.fake.stats().total_calls;
        let r = send(p.addr, &choices_req(d, 300, 4)).await;
        assert_eq!(rejection(&r, d, 42905), "tpm limit exceeded", "{d:?}");
        assert_eq!(r.header("x-ratelimit-limit-tokens"), Some("1000"));
        assert_eq!(
            p.fake.stats().total_calls,
            calls,
            "{d:?}: a refused request reached the upstream"
        );
        let ok = send(p.addr, &choices_req(d, 300, 1)).await;
        assert_eq!(ok.status, 200, "{d:?}: {}", ok.text());
    }
    let ok = send(p.addr, &choices_req(Dialect::Anthropic, 300, 4)).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
}

/// W6: a money upper bound above what any store can hold (2^53 − 1 minor units) is
/// a 400 with a clear message before any store is asked; `max_tokens` near u64::MAX
/// times 128 choices saturates instead of overflowing. Nothing is counted or sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w6_money_upper_bound_beyond_any_store_is_a_400() {
    let p = Proxy::start(TIER).await;
    let money = || async { usage(p.addr, "sk-small").await["money"].clone() };
    let before = money().await;
    for d in DIALECTS {
        for (max_tokens, choices) in [(u64::MAX, 1), (u64::MAX - 1, 128), (1 << 60, 4)] {
            let r = send(p.addr, &choices_req(d, max_tokens, choices)).await;
            let msg = rejection(&r, d, 40001);
            assert!(
                msg.contains("more than the gateway can reserve"),
                "{d:?}: {msg}"
            );
        }
    }
    assert_eq!(
        p.fake.stats().total_calls,
        0,
        "an oversized request was sent"
    );
    assert_eq!(money().await, before, "an oversized request cost money");
    assert_eq!(
        used(&usage(p.addr, "sk-small").await, "key", "tokens", 60),
        0
    );
}
