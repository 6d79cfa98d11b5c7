//! The other APIs clients call (SPEC P6), through real sockets and every layer:
//! embeddings (OpenAI and Gemini), token counting (Anthropic and Gemini), and Gemini's
//! methods under both `/v1beta/models/…` and `/v1/models/…`.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;
use tollgate_fake_upstream::Route;

const KEY: &str = "sk-apis";
const GEMINI_KEY: &str = "g-apis";

/// One key with request and token tiers and a tenant balance, an OpenAI embedding
/// model and the Gemini models on the fake upstream.
fn config(balance: i64) -> String {
    format!(
        r#"
[policies.p]
concurrency = 8
requests = [{{ window = "1h", limit = 1000 }}]
tokens = [{{ window = "1h", limit = 10000000 }}]

[tenants.acme]
balance = {balance}

[keys.k]
key = "{KEY}"
tenant = "acme"
policy = "p"

[keys.g]
key = "{GEMINI_KEY}"
tenant = "acme"
policy = "p"

[channels.openai-a]
vendor = "openai"
base_url = "fake://"
credential = "sk-upstream-openai"
models = ["gpt-4o-mini", "text-embedding-3-small"]

[channels.anthropic-a]
vendor = "anthropic"
base_url = "fake://"
credential = "sk-upstream-anthropic"
models = ["claude-sonnet-4-5"]

[channels.gemini-a]
vendor = "gemini"
base_url = "fake://"
credential = "upstream-gemini"
models = ["gemini-2.5-flash", "text-embedding-004"]

[models.gpt-4o-mini]
price = {{ input_per_mtok = 150_000, output_per_mtok = 600_000 }}
max_output_tokens = 64

[models.text-embedding-3-small]
price = {{ input_per_mtok = 20_000_000 }}

[models.claude-sonnet-4-5]
price = {{ input_per_mtok = 3_000_000, output_per_mtok = 15_000_000 }}
max_output_tokens = 64

[models."gemini-2.5-flash"]
price = {{ input_per_mtok = 300_000, output_per_mtok = 2_500_000 }}
max_output_tokens = 64

[models.text-embedding-004]
price = {{ input_per_mtok = 10_000_000 }}
"#
    )
}

fn balance(view: &Value) -> i64 {
    view["money"]["balance"].as_i64().expect("balance")
}

fn gemini(path: &str, body: &str) -> Req {
    Req::post(path, body.to_owned()).header("x-goog-api-key", GEMINI_KEY)
}

/// Waits (bounded) until the key's request tier counts `n` requests and returns the view.
async fn after_requests(p: &Proxy, key: &str, n: u64) -> Value {
    let (ok, view) = usage_until(p.addr, key, Duration::from_secs(2), |v| {
        used(v, "key", "requests", 3600) == n && in_flight(v) == 0
    })
    .await;
    assert!(ok, "{n} requests never counted: {view}");
    view
}

/// P6: an OpenAI embeddings request (string and list input) is answered, counted in
/// the token tier at the input tokens the provider reported (no output reserved or
/// counted), and billed at the input price.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_openai_embeddings_count_input_tokens_in_the_token_tier_and_bill_them() {
    let p = Proxy::start(&config(1_000_000_000)).await;
    let before = balance(&usage(p.addr, KEY).await);
    let mut reported = 0;
    for input in [
        r#""The food was delicious and the waiter was kind.""#,
        r#"["first passage to embed", "second passage to embed", "third"]"#,
    ] {
        let body = format!(
            r#"{{"model":"text-embedding-3-small","input":{input},"encoding_format":"float"}}"#
        );
        let r = send(
            p.addr,
            &Req::post("/v1/embeddings", body).key(KeyAt::Bearer, KEY),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(v["object"], "list", "{v}");
        assert!(!v["data"].as_array().expect("data").is_empty(), "{v}");
        let tokens = v["usage"]["prompt_tokens"].as_u64().expect("prompt_tokens");
        assert!(tokens > 0);
        reported += tokens;
    }
    assert_eq!(p.fake.stats().calls(Route::Embeddings), 2);
    let view = after_requests(&p, KEY, 2).await;
    assert_eq!(used(&view, "key", "tokens", 3600), reported, "{view}");
    // 20 minor units per input token (20,000,000 per million), rounded up per request.
    let charged = before - balance(&view);
    assert!(
        charged >= (reported * 20) as i64 && charged <= (reported * 20 + 2) as i64,
        "charged {charged} for {reported} input tokens"
    );
}

/// P6: Gemini embeddings under the stable `/v1/models/…` and `/v1beta/models/…` paths;
/// Gemini reports no usage for them, so the gateway settles at its own input estimate
/// (never pending) and counts it in the token tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_gemini_embeddings_under_both_versions_settle_at_the_input_estimate() {
    let p = Proxy::start(&config(1_000_000_000)).await;
    let before = balance(&usage(p.addr, GEMINI_KEY).await);
    let text = "a passage of some length to embed ".repeat(10);
    let single = format!(r#"{{"content":{{"parts":[{{"text":"{text}"}}]}}}}"#);
    let r = send(
        p.addr,
        &gemini("/v1/models/text-embedding-004:embedContent", &single),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["embedding"]["values"].is_array(), "{}", r.text());
    let batch = format!(
        r#"{{"requests":[{{"model":"models/text-embedding-004","content":{{"parts":[{{"text":"{text}"}}]}}}},
            {{"model":"models/text-embedding-004","content":{{"parts":[{{"text":"{text}"}}]}}}}]}}"#
    );
    let r = send(
        p.addr,
        &gemini(
            "/v1beta/models/text-embedding-004:batchEmbedContents",
            &batch,
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["embeddings"].as_array().map(Vec::len), Some(2));
    let view = after_requests(&p, GEMINI_KEY, 2).await;
    let tokens = used(&view, "key", "tokens", 3600);
    // The text is 340 bytes a copy: at least 340 / 4 tokens each, three copies in all.
    assert!(tokens >= 3 * 85, "{tokens} tokens counted: {view}");
    assert_eq!(
        view["money"]["key_pending_reconciliation"].as_i64(),
        Some(0),
        "{view}"
    );
    assert_eq!(before - balance(&view), tokens as i64 * 10, "{view}");
}

/// P6: token counting is free and counted as a request only: no token in any tier, no
/// money — it is answered even with an empty balance, where generation is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_count_tokens_is_counted_as_a_request_never_billed_nor_in_token_tiers() {
    let p = Proxy::start(&config(0)).await;
    let r = send(
        p.addr,
        &Req::post(
            "/v1/messages/count_tokens",
            r#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"Count me, please."}]}"#,
        )
        .key(KeyAt::XApiKey, KEY),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.json()["input_tokens"].as_u64().is_some_and(|n| n > 0),
        "{}",
        r.text()
    );
    for path in [
        "/v1beta/models/gemini-2.5-flash:countTokens",
        "/v1/models/gemini-2.5-flash:countTokens",
    ] {
        let r = send(
            p.addr,
            &gemini(
                path,
                r#"{"contents":[{"parts":[{"text":"Count me, please."}]}]}"#,
            ),
        )
        .await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert!(
            r.json()["totalTokens"].as_u64().is_some_and(|n| n > 0),
            "{}",
            r.text()
        );
    }
    for (key, n) in [(KEY, 1), (GEMINI_KEY, 2)] {
        let view = after_requests(&p, key, n).await;
        assert_eq!(used(&view, "key", "tokens", 3600), 0, "{view}");
        assert_eq!(balance(&view), 0, "{view}");
        assert_eq!(
            view["money"]["key_pending_reconciliation"].as_i64(),
            Some(0),
            "{view}"
        );
    }
    // Generation with the same empty balance is refused (402, B1), unsent.
    let calls = p.fake.stats().total_calls;
    let r = send(p.addr, &ask(Dialect::Anthropic, KEY, false)).await;
    rejection(&r, Dialect::Anthropic, 40201);
    assert_eq!(p.fake.stats().total_calls, calls);
}

/// P6 / P2: Gemini's generation is served under the stable `/v1/models/…` path the
/// official SDK calls by default, as under `/v1beta`; methods the gateway does not
/// price stay 404 under both, and are never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_gemini_v1_path_is_served_and_unpriced_methods_stay_404_unsent() {
    let p = Proxy::start(&config(1_000_000_000)).await;
    let body = r#"{"contents":[{"role":"user","parts":[{"text":"Hello"}]}]}"#;
    for path in [
        "/v1/models/gemini-2.5-flash:generateContent",
        "/v1beta/models/gemini-2.5-flash:generateContent",
    ] {
        let r = send(p.addr, &gemini(path, body)).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert!(r.json()["usageMetadata"].is_object(), "{}", r.text());
    }
    let calls = p.fake.stats().total_calls;
    for path in [
        "/v1/models/gemini-2.5-flash:batchGenerateContent",
        "/v1beta/models/gemini-2.5-flash:predictLongRunning",
        "/v1/models/gemini-2.5-flash:generateAnswer",
        "/v1/images/variations",
        "/v1/audio/speech",
        "/v1/completions",
        "/v1/responses/resp_1/unknown",
    ] {
        let r = send(p.addr, &gemini(path, body).key(KeyAt::Bearer, KEY)).await;
        assert_eq!(r.status, 404, "{path}: {}", r.text());
    }
    assert_eq!(
        p.fake.stats().total_calls,
        calls,
        "an unpriced method was sent"
    );
}
