//! X1–X3 through a real socket for the pairs beyond OpenAI chat ↔ Anthropic: Gemini
//! channels and clients, Responses API clients, and channels that know a public model
//! by their own id — with the bundled fake upstream speaking each vendor's format.

mod common;

use common::*;
use portcullis_fake_upstream::expected_text;
use serde_json::{Value, json};

const CONFIG: &str = r#"
[policies.open]

[tenants.t]
balance = 1_000_000_000_000

[keys.a]
key = "sk-a"
policy = "open"
tenant = "t"

[channels.openai-a]
vendor = "openai"
base_url = "fake://"
credential = "cred-openai"
models = ["gpt-4o-mini", "smart"]
upstream_models = { smart = "gpt-4.1" }

[channels.anthropic-a]
vendor = "anthropic"
base_url = "fake://"
credential = "cred-anthropic"
models = ["claude-sonnet-4-5", "sonnet", "cheap"]
upstream_models = { sonnet = "claude-sonnet-4-5-20250929", cheap = "claude-sonnet-4-5" }

[channels.gemini-a]
vendor = "gemini"
base_url = "fake://"
credential = "cred-gemini"
models = ["gemini-2.5-flash", "flash"]
upstream_models = { flash = "gemini-2.5-flash-001" }

[models.gpt-4o-mini]
price = { input_per_mtok = 150_000, output_per_mtok = 600_000 }
max_output_tokens = 256

[models.smart]
price = { input_per_mtok = 1_000_000, output_per_mtok = 1_000_000 }
max_output_tokens = 64

[models.claude-sonnet-4-5]
price = { input_per_mtok = 3_000_000, cached_input_per_mtok = 300_000, output_per_mtok = 15_000_000 }
max_output_tokens = 256

# Served by the Anthropic channel as `claude-sonnet-4-5`, a configured model: priced as
# that model when it serves it.
[models.cheap]
price = { input_per_mtok = 1, output_per_mtok = 1 }
max_output_tokens = 256

[models.sonnet]
price = { input_per_mtok = 3_000_000, output_per_mtok = 15_000_000 }
max_output_tokens = 256

[models."gemini-2.5-flash"]
price = { input_per_mtok = 300_000, cached_input_per_mtok = 75_000, output_per_mtok = 2_500_000 }
max_output_tokens = 256

[models.flash]
price = { input_per_mtok = 300_000, output_per_mtok = 2_500_000 }
max_output_tokens = 256
"#;

fn openai_chat(model: &str, stream: bool) -> Req {
    gen_for(Dialect::OpenAi, model, stream, None).key(KeyAt::Bearer, "sk-a")
}

fn anthropic_messages(model: &str, stream: bool) -> Req {
    gen_for(Dialect::Anthropic, model, stream, Some(64)).key(KeyAt::XApiKey, "sk-a")
}

fn gemini(model: &str, stream: bool) -> Req {
    gen_for(Dialect::Gemini, model, stream, Some(64)).key(KeyAt::XGoogApiKey, "sk-a")
}

fn responses(body: Value) -> Req {
    Req::post("/v1/responses", body.to_string()).key(KeyAt::Bearer, "sk-a")
}

/// The records of a usage log written so far.
fn usage_log(log: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect()
}

fn calls(p: &Proxy) -> (u64, u64, u64) {
    let s = p.fake.stats();
    (
        s.calls_for("cred-openai"),
        s.calls_for("cred-anthropic"),
        s.calls_for("cred-gemini"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x1_an_openai_client_is_served_by_a_gemini_channel() {
    let p = Proxy::start(CONFIG).await;
    let r = send(
        p.addr,
        &openai_chat("gemini-2.5-flash", false)
            .header("x-fake-input-tokens", 20)
            .header("x-fake-cached-tokens", 5),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "chat.completion", "{v}");
    assert_eq!(v["model"], "gemini-2.5-flash");
    assert_eq!(v["choices"][0]["message"]["content"], expected_text(4));
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // X2: Gemini's promptTokenCount already includes the cached tokens, as OpenAI's
    // prompt_tokens does: copied, not added to.
    assert_eq!(v["usage"]["prompt_tokens"], 20, "{v}");
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 5);
    assert_eq!(v["usage"]["completion_tokens"], 16);
    assert_eq!(calls(&p), (0, 0, 1));
    let sent = p
        .fake
        .stats()
        .last_json_for("/v1beta/models/gemini-2.5-flash:generateContent")
        .expect("a Gemini generateContent request");
    assert_eq!(sent["contents"][0]["role"], "user", "{sent}");
    assert_eq!(sent["contents"][0]["parts"][0]["text"], "hi", "{sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x2_an_openai_stream_from_a_gemini_channel_ends_with_usage_and_done() {
    let p = Proxy::start(CONFIG).await;
    let r = send(
        p.addr,
        &openai_chat("gemini-2.5-flash", true).header("x-fake-input-tokens", 20),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let data = sse_data(&r.text());
    assert_eq!(data.last(), Some(&json!("[DONE]")), "{}", r.text());
    let chunks = &data[..data.len() - 1];
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, expected_text(4));
    let finish: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0].get("finish_reason"))
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, [&json!("stop")], "{}", r.text());
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage["prompt_tokens"], 20, "{}", r.text());
    assert_eq!(usage["completion_tokens"], 16);
    assert!(
        p.fake
            .stats()
            .last_body_for("/v1beta/models/gemini-2.5-flash:streamGenerateContent")
            .is_some(),
        "the channel was asked for a stream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x2_parallel_function_calls_from_a_gemini_channel_reach_an_openai_client_each_with_its_id()
{
    let p = Proxy::start(CONFIG).await;
    let r = send(
        p.addr,
        &openai_chat("gemini-2.5-flash", true).header("x-fake-tool-calls", 3),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let data = sse_data(&r.text());
    assert_eq!(data.last(), Some(&json!("[DONE]")), "{}", r.text());
    let mut calls: Vec<(u64, String, String, String)> = Vec::new();
    for c in &data[..data.len() - 1] {
        for tc in c["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = tc["index"].as_u64().unwrap();
            if let Some(id) = tc["id"].as_str() {
                calls.push((
                    i,
                    id.to_owned(),
                    tc["function"]["name"].as_str().unwrap_or("").to_owned(),
                    String::new(),
                ));
            }
            let args = tc["function"]["arguments"].as_str().unwrap_or("");
            let at = calls
                .iter_mut()
                .rfind(|c| c.0 == i)
                .expect("an opened call");
            at.3.push_str(args);
        }
    }
    assert_eq!(calls.len(), 3, "{}", r.text());
    for (k, (i, _, name, args)) in calls.iter().enumerate() {
        assert_eq!(*i, k as u64);
        assert_eq!(name, "get_weather", "the fake's default tool name");
        let v: Value = serde_json::from_str(args).unwrap();
        assert_eq!(v, json!({"city": format!("c{k}")}));
    }
    let mut ids: Vec<&String> = calls.iter().map(|c| &c.1).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3, "every call has its own id: {calls:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x1_a_gemini_client_is_served_by_an_openai_and_by_an_anthropic_channel() {
    let p = Proxy::start(CONFIG).await;
    for (model, want) in [("gpt-4o-mini", (1, 0, 0)), ("claude-sonnet-4-5", (1, 1, 0))] {
        let r = send(
            p.addr,
            &gemini(model, false)
                .header("x-fake-input-tokens", 20)
                .header("x-fake-cached-tokens", 5),
        )
        .await;
        assert_eq!(r.status, 200, "{model}: {}", r.text());
        let v = r.json();
        let c = &v["candidates"][0];
        assert_eq!(c["content"]["role"], "model", "{v}");
        assert_eq!(c["content"]["parts"][0]["text"], expected_text(4), "{v}");
        assert_eq!(c["finishReason"], "STOP", "{v}");
        // Gemini's promptTokenCount includes the cached tokens (Anthropic's
        // input_tokens does not: 15 + 5 read back as 20).
        assert_eq!(v["usageMetadata"]["promptTokenCount"], 20, "{model}: {v}");
        assert_eq!(v["usageMetadata"]["cachedContentTokenCount"], 5, "{v}");
        assert_eq!(v["usageMetadata"]["candidatesTokenCount"], 16, "{v}");
        assert_eq!(calls(&p), want, "{model}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x2_a_gemini_stream_from_an_anthropic_channel_goes_through_both_legs() {
    let p = Proxy::start(CONFIG).await;
    let r = send(p.addr, &gemini("claude-sonnet-4-5", true)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let data = sse_data(&r.text());
    assert!(!data.is_empty(), "{}", r.text());
    let text: String = data
        .iter()
        .flat_map(|c| c["candidates"][0]["content"]["parts"].as_array().cloned())
        .flatten()
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, expected_text(4), "{}", r.text());
    let last = data.last().unwrap();
    assert_eq!(
        last["candidates"][0]["finishReason"],
        "STOP",
        "{}",
        r.text()
    );
    assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 16);
    assert_eq!(calls(&p), (0, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x1_a_gemini_stream_without_sse_is_served_as_one_json_array() {
    let p = Proxy::start(CONFIG).await;
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let r = send(
        p.addr,
        &Req::post(
            "/v1beta/models/gpt-4o-mini:streamGenerateContent",
            body.to_string(),
        )
        .key(KeyAt::XGoogApiKey, "sk-a"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let chunks: Vec<Value> = serde_json::from_str(&r.text())
        .unwrap_or_else(|e| panic!("not one JSON array ({e}): {}", r.text()));
    assert!(chunks.len() > 1, "{}", r.text());
    let text: String = chunks
        .iter()
        .flat_map(|c| c["candidates"][0]["content"]["parts"].as_array().cloned())
        .flatten()
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, expected_text(4));
    let last = chunks.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP", "{last}");
    assert_eq!(calls(&p), (1, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x1_an_anthropic_client_is_served_by_a_gemini_channel() {
    let p = Proxy::start(CONFIG).await;
    let r = send(p.addr, &anthropic_messages("gemini-2.5-flash", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["type"], "message", "{v}");
    assert_eq!(v["model"], "gemini-2.5-flash");
    assert_eq!(v["content"][0]["text"], expected_text(4));
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["usage"]["output_tokens"], 16);

    let r = send(p.addr, &anthropic_messages("gemini-2.5-flash", true)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let events = sse_events(&r.text());
    assert_eq!(events.first().map(String::as_str), Some("message_start"));
    assert_eq!(
        events.last().map(String::as_str),
        Some("message_stop"),
        "{}",
        r.text()
    );
    assert_eq!(calls(&p), (0, 0, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x1_a_responses_client_is_served_by_an_anthropic_channel() {
    let p = Proxy::start(CONFIG).await;
    let r = send(
        p.addr,
        &responses(
            json!({"model": "claude-sonnet-4-5", "input": "hi", "instructions": "Be brief."}),
        )
        .header("x-fake-input-tokens", 20)
        .header("x-fake-cached-tokens", 5),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "response", "{v}");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["model"], "claude-sonnet-4-5");
    let message = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["type"] == "message")
        .expect("a message item");
    assert_eq!(message["content"][0]["type"], "output_text");
    assert_eq!(message["content"][0]["text"], expected_text(4));
    assert_eq!(v["usage"]["input_tokens"], 20, "{v}");
    assert_eq!(v["usage"]["input_tokens_details"]["cached_tokens"], 5);
    assert_eq!(v["usage"]["output_tokens"], 16);
    let sent = p.fake.stats().last_json_for("/v1/messages").unwrap();
    assert_eq!(sent["system"], json!("Be brief."), "{sent}");
    assert_eq!(
        sent["max_tokens"], 256,
        "the model's max_output_tokens: {sent}"
    );

    let r = send(
        p.addr,
        &responses(json!({"model": "claude-sonnet-4-5", "input": "hi", "stream": true})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let events = sse_events(&r.text());
    assert_eq!(events.first().map(String::as_str), Some("response.created"));
    assert_eq!(
        events.last().map(String::as_str),
        Some("response.completed"),
        "{}",
        r.text()
    );
    let text: String = sse_data(&r.text())
        .iter()
        .filter(|d| d["type"] == "response.output_text.delta")
        .filter_map(|d| d["delta"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, expected_text(4));
    assert_eq!(calls(&p), (0, 2, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x1_a_continued_response_without_an_openai_channel_is_a_400_naming_the_field() {
    let p = Proxy::start(CONFIG).await;
    let r = send(
        p.addr,
        &responses(json!({
            "model": "claude-sonnet-4-5", "input": "and then?",
            "previous_response_id": "resp_abc"
        })),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("previous_response_id"), "{}", r.text());
    assert_eq!(calls(&p), (0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x3_a_gemini_429_reaches_an_anthropic_client_as_its_rate_limit_error() {
    let p = Proxy::start(CONFIG).await;
    let r = send(
        p.addr,
        &anthropic_messages("gemini-2.5-flash", false)
            .header("x-fake-error", "rate_limit_error")
            .header("x-fake-retry-after", 1),
    )
    .await;
    // As from an Anthropic channel (X3): after the attempts the provider's retry
    // delay allows, the gateway's final 429 in the client's dialect.
    assert_eq!(r.status, 429, "{}", r.text());
    let v = r.json();
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(
        v["error"]["type"], "rate_limit_error",
        "Gemini's RESOURCE_EXHAUSTED in Anthropic's words: {v}"
    );
    assert!(r.header("retry-after").is_some(), "{v}");
    assert!(p.fake.stats().calls_for("cred-gemini") >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x3_a_gemini_invalid_argument_reaches_an_openai_client_with_its_message() {
    let p = Proxy::start(CONFIG).await;
    let r = send(
        p.addr,
        &openai_chat("gemini-2.5-flash", false).header("x-fake-error", "invalid_request_error"),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x2_a_gemini_thought_signature_comes_back_on_the_next_turn() {
    let p = Proxy::start(CONFIG).await;
    let first = json!({
        "model": "gemini-2.5-flash",
        "messages": [{"role": "user", "content": "Weather in c0?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
        "reasoning_effort": "low"
    });
    let r = send(
        p.addr,
        &Req::post("/v1/chat/completions", first.to_string())
            .key(KeyAt::Bearer, "sk-a")
            .header("x-fake-tool-calls", 1)
            .header("x-fake-tool-name", "get_weather")
            .header("x-fake-thinking", "I should call get_weather."),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let message = r.json()["choices"][0]["message"].clone();
    let id = message["tool_calls"][0]["id"]
        .as_str()
        .expect("a tool call")
        .to_owned();
    let second = json!({
        "model": "gemini-2.5-flash",
        "messages": [
            {"role": "user", "content": "Weather in c0?"},
            {"role": "assistant", "content": null, "tool_calls": message["tool_calls"]},
            {"role": "tool", "tool_call_id": id, "content": "sunny"}
        ],
        "tools": first["tools"],
        "reasoning_effort": "low"
    });
    let r = send(
        p.addr,
        &Req::post("/v1/chat/completions", second.to_string()).key(KeyAt::Bearer, "sk-a"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = p
        .fake
        .stats()
        .last_json_for("/v1beta/models/gemini-2.5-flash:generateContent")
        .expect("the second turn");
    let model_turn = &sent["contents"][1];
    assert_eq!(model_turn["role"], "model", "{sent}");
    let call = model_turn["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p.get("functionCall").is_some())
        .expect("the function call part");
    assert_eq!(
        call["thoughtSignature"],
        json!(portcullis_fake_upstream::thinking_signature(
            "I should call get_weather."
        )),
        "{sent}"
    );
    assert_eq!(call["functionCall"]["name"], "get_weather");
    let answer = &sent["contents"][2]["parts"][0]["functionResponse"];
    assert_eq!(answer["name"], "get_weather", "{sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x1_a_channel_serves_a_public_model_under_its_own_id() {
    let dir = std::env::temp_dir().join(format!("portcullis-x1-ids-{}", std::process::id()));
    // A process of the same id may have left it (ids are reused): start empty.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("usage.jsonl");
    let _ = std::fs::remove_file(&log);
    let toml = format!(
        "[server]\nusage_log = {:?}\n{CONFIG}",
        log.display().to_string()
    );
    let p = Proxy::start(&toml).await;
    // Same dialect: only the model's name changes in the body (or the Gemini path).
    let r = send(p.addr, &openai_chat("smart", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = p
        .fake
        .stats()
        .last_json_for("/v1/chat/completions")
        .unwrap();
    assert_eq!(sent["model"], "gpt-4.1", "{sent}");
    assert_eq!(sent["messages"], json!([{"role": "user", "content": "hi"}]));
    let r = send(p.addr, &gemini("flash", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        p.fake
            .stats()
            .last_body_for("/v1beta/models/gemini-2.5-flash-001:generateContent")
            .is_some(),
        "the Gemini path names the channel's id"
    );
    // Translated: the channel's id in the channel's dialect, the public name back.
    let r = send(p.addr, &openai_chat("sonnet", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model"], "sonnet");
    let sent = p.fake.stats().last_json_for("/v1/messages").unwrap();
    assert_eq!(sent["model"], "claude-sonnet-4-5-20250929", "{sent}");
    // The usage records name both.
    let lines = || usage_log(&log);
    assert!(
        eventually(WAIT, || async { lines().len() == 3 }).await,
        "{:?}",
        lines()
    );
    let named: Vec<(String, String)> = lines()
        .iter()
        .map(|r| {
            (
                r["model"].as_str().unwrap().to_owned(),
                r["upstream_model"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    for want in [
        ("smart", "gpt-4.1"),
        ("flash", "gemini-2.5-flash-001"),
        ("sonnet", "claude-sonnet-4-5-20250929"),
    ] {
        assert!(
            named.contains(&(want.0.to_owned(), want.1.to_owned())),
            "{want:?} in {named:?}"
        );
    }
    // A model served under its public name records none.
    let r = send(p.addr, &openai_chat("gpt-4o-mini", false)).await;
    assert_eq!(r.status, 200);
    assert!(eventually(WAIT, || async { lines().len() == 4 }).await);
    let last = lines()
        .into_iter()
        .find(|r| r["model"] == "gpt-4o-mini")
        .unwrap();
    assert!(last["upstream_model"].is_null(), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x3_a_mid_stream_error_reaches_an_openai_client_as_its_error_never_done() {
    let p = Proxy::start(CONFIG).await;
    for model in ["gemini-2.5-flash", "claude-sonnet-4-5"] {
        let o = open(
            p.addr,
            &openai_chat(model, true).header("x-fake-fail-after-chunks", 2),
        )
        .await;
        assert_eq!(o.status, 200, "{model}");
        let body: Vec<u8> = o
            .frames()
            .await
            .into_iter()
            .flat_map(|(_, b)| b.to_vec())
            .collect();
        let body = String::from_utf8_lossy(&body);
        let data = sse_data(&body);
        assert!(
            !data.contains(&json!("[DONE]")),
            "{model}: an errored stream ended cleanly: {body}"
        );
        let last = data.last().expect("events");
        assert!(
            last["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{model}: the stream does not end with the client's error event: {body}"
        );
        let text: String = data
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert!(
            !text.is_empty(),
            "{model}: the chunks before the error: {body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x2_an_image_reaches_anthropic_and_gemini_channels_inline() {
    let p = Proxy::start(CONFIG).await;
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    let body = |model: &str| {
        json!({"model": model, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}}
        ]}]})
        .to_string()
    };
    for model in ["claude-sonnet-4-5", "gemini-2.5-flash"] {
        let r = send(
            p.addr,
            &Req::post("/v1/chat/completions", body(model)).key(KeyAt::Bearer, "sk-a"),
        )
        .await;
        assert_eq!(r.status, 200, "{model}: {}", r.text());
    }
    let s = p.fake.stats();
    let anthropic = s.last_json_for("/v1/messages").unwrap();
    assert_eq!(
        anthropic["messages"][0]["content"][1],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}),
        "{anthropic}"
    );
    let gemini = s
        .last_json_for("/v1beta/models/gemini-2.5-flash:generateContent")
        .unwrap();
    assert_eq!(
        gemini["contents"][0]["parts"][1],
        json!({"inlineData": {"mimeType": "image/png", "data": png}}),
        "{gemini}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x3_a_gemini_429_reaches_an_openai_client_as_its_429_with_retry_after() {
    let p = Proxy::start(CONFIG).await;
    let r = send(
        p.addr,
        &openai_chat("gemini-2.5-flash", false)
            .header("x-fake-error", "rate_limit_error")
            .header("x-fake-retry-after", 1),
    )
    .await;
    assert_eq!(r.status, 429, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["type"], "rate_limit_exceeded", "{v}");
    let after: u64 = r
        .header("retry-after")
        .expect("retry-after")
        .parse()
        .unwrap();
    assert!(after >= 1, "{after}");
    assert!(p.fake.stats().calls_for("cred-gemini") >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x1_an_attempt_is_priced_as_the_model_its_channel_served() {
    let dir = std::env::temp_dir().join(format!("portcullis-x1-price-{}", std::process::id()));
    // A process of the same id may have left it (ids are reused): start empty.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("usage.jsonl");
    let _ = std::fs::remove_file(&log);
    let toml = format!(
        "[server]\nusage_log = {:?}\n{CONFIG}",
        log.display().to_string()
    );
    let p = Proxy::start(&toml).await;
    for model in ["cheap", "claude-sonnet-4-5"] {
        let r = send(
            p.addr,
            &openai_chat(model, false).header("x-fake-input-tokens", 1_000),
        )
        .await;
        assert_eq!(r.status, 200, "{model}: {}", r.text());
    }
    let lines = || usage_log(&log);
    assert!(
        eventually(WAIT, || async { lines().len() == 2 }).await,
        "{:?}",
        lines()
    );
    let recs = lines();
    let amount = |m: &str| {
        recs.iter()
            .find(|r| r["model"] == m)
            .and_then(|r| r["amount"].as_i64())
            .unwrap_or_else(|| panic!("{m}: {recs:?}"))
    };
    // 1,000 input and 16 output tokens at claude-sonnet-4-5's rates (3 and 15 per
    // token, in micro-units per million): the price of what served it, not `cheap`'s.
    assert_eq!(amount("cheap"), amount("claude-sonnet-4-5"), "{recs:?}");
    assert_eq!(amount("cheap"), 3_240, "{recs:?}");
    let cheap = recs.iter().find(|r| r["model"] == "cheap").unwrap();
    assert_eq!(
        cheap["outcome"], "settled",
        "reserved at the dearest, settled within it"
    );
    assert_eq!(cheap["upstream_model"], "claude-sonnet-4-5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x1_a_responses_client_is_served_by_a_gemini_channel_streamed() {
    let p = Proxy::start(CONFIG).await;
    let r = send(
        p.addr,
        &responses(json!({"model": "gemini-2.5-flash", "input": "hi", "stream": true}))
            .header("x-fake-tool-calls", 2),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let data = sse_data(&r.text());
    let done = data
        .iter()
        .find(|d| d["type"] == "response.completed")
        .unwrap_or_else(|| panic!("no response.completed: {}", r.text()));
    let items: Vec<&Value> = done["response"]["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["type"] == "function_call")
        .collect();
    assert_eq!(items.len(), 2, "{done}");
    assert_ne!(items[0]["call_id"], items[1]["call_id"], "{done}");
    let args: Value = serde_json::from_str(items[1]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "c1"}));
    // The sequence numbers of the client's events count from 0, one by one.
    let seq: Vec<u64> = data
        .iter()
        .filter_map(|d| d["sequence_number"].as_u64())
        .collect();
    assert_eq!(seq, (0..seq.len() as u64).collect::<Vec<_>>());
    assert_eq!(calls(&p), (0, 0, 1));
}
