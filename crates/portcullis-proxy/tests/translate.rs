//! X1–X3 through a real socket: clients of one vendor's API served by channels of
//! another, with the bundled fake upstream speaking each vendor's own format.

mod common;

use common::*;
use portcullis_fake_upstream::{Behavior, ErrorKind, expected_text};
use serde_json::{Value, json};

const CONFIG: &str = r#"
[policies.open]

[tenants.t]
balance = 1_000_000_000_000

[keys.a]
key = "sk-a"
policy = "open"
tenant = "t"

[keys.eu]
key = "sk-openai-only"
policy = "open"
tenant = "t"
allowed_vendors = ["openai"]

[channels.openai-a]
vendor = "openai"
base_url = "fake://"
credential = "cred-openai"
models = ["gpt-4o-mini", "smart"]
group = "smart"
# `smart`'s first choice is (all but always) this channel: the failover test starts here.
weight = 1000

[channels.anthropic-a]
vendor = "anthropic"
base_url = "fake://"
credential = "cred-anthropic"
models = ["claude-sonnet-4-5", "smart"]
group = "smart"

[models.gpt-4o-mini]
price = { input_per_mtok = 150_000, output_per_mtok = 600_000 }
max_output_tokens = 256
fallback = "claude-sonnet-4-5"

[models.claude-sonnet-4-5]
price = { input_per_mtok = 3_000_000, cached_input_per_mtok = 300_000, output_per_mtok = 15_000_000 }
max_output_tokens = 256

[models.smart]
price = { input_per_mtok = 1_000_000, output_per_mtok = 1_000_000 }
max_output_tokens = 64
"#;

fn openai_chat(model: &str, stream: bool) -> Req {
    gen_for(Dialect::OpenAi, model, stream, None).key(KeyAt::Bearer, "sk-a")
}

fn anthropic_messages(model: &str, stream: bool) -> Req {
    gen_for(Dialect::Anthropic, model, stream, Some(64)).key(KeyAt::XApiKey, "sk-a")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x1_an_openai_client_is_served_by_an_anthropic_channel() {
    let p = Proxy::start(CONFIG).await;
    let r = send(
        p.addr,
        &openai_chat("claude-sonnet-4-5", false)
            .header("x-fake-input-tokens", 20)
            .header("x-fake-cached-tokens", 5),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "chat.completion", "{v}");
    assert_eq!(v["model"], "claude-sonnet-4-5");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], expected_text(4));
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // X2: Anthropic's input_tokens (15) excludes the 5 cache reads; OpenAI's
    // prompt_tokens includes them.
    assert_eq!(v["usage"]["prompt_tokens"], 20, "{v}");
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 5);
    assert_eq!(v["usage"]["completion_tokens"], 16);
    let s = p.fake.stats();
    assert_eq!(
        (s.calls_for("cred-anthropic"), s.calls_for("cred-openai")),
        (1, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x2_an_openai_stream_from_an_anthropic_channel_ends_with_usage_and_done() {
    let p = Proxy::start(CONFIG).await;
    let r = send(
        p.addr,
        &openai_chat("claude-sonnet-4-5", true)
            .header("x-fake-input-tokens", 20)
            .header("x-fake-cached-tokens", 5),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let data = sse_data(&r.text());
    assert_eq!(data.last(), Some(&json!("[DONE]")), "{}", r.text());
    let chunks = &data[..data.len() - 1];
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, expected_text(4));
    let finish: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, [&json!("stop")], "{}", r.text());
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage["prompt_tokens"], 20, "{}", r.text());
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 5);
    assert_eq!(usage["completion_tokens"], 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x1_an_anthropic_client_is_served_by_an_openai_channel() {
    let p = Proxy::start(CONFIG).await;
    let r = send(
        p.addr,
        &anthropic_messages("gpt-4o-mini", false)
            .header("x-fake-input-tokens", 20)
            .header("x-fake-cached-tokens", 5),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["type"], "message", "{v}");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["model"], "gpt-4o-mini");
    assert_eq!(v["content"][0]["type"], "text");
    assert_eq!(v["content"][0]["text"], expected_text(4));
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["usage"]["input_tokens"], 15, "{v}");
    assert_eq!(v["usage"]["cache_read_input_tokens"], 5);
    assert_eq!(v["usage"]["output_tokens"], 16);
    assert_eq!(p.fake.stats().calls_for("cred-openai"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x2_an_anthropic_stream_from_an_openai_channel_has_every_event() {
    let p = Proxy::start(CONFIG).await;
    let r = send(p.addr, &anthropic_messages("gpt-4o-mini", true)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.text();
    let events = sse_events(&body);
    assert_eq!(
        events.first().map(String::as_str),
        Some("message_start"),
        "{body}"
    );
    assert_eq!(
        events.last().map(String::as_str),
        Some("message_stop"),
        "{body}"
    );
    for e in [
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
    ] {
        assert!(events.iter().any(|x| x == e), "{e} missing: {body}");
    }
    let data = sse_data(&body);
    let text: String = data
        .iter()
        .filter(|d| d["type"] == "content_block_delta")
        .filter_map(|d| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, expected_text(4));
    let delta = data.iter().find(|d| d["type"] == "message_delta").unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "end_turn", "{body}");
    assert_eq!(delta["usage"]["output_tokens"], 16, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x3_a_provider_error_reaches_the_client_in_its_own_dialect() {
    let p = Proxy::start(CONFIG).await;
    let r = send(
        p.addr,
        &openai_chat("claude-sonnet-4-5", false).header("x-fake-error", "invalid_request_error"),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert!(v["error"]["message"].is_string(), "{v}");
    let r = send(
        p.addr,
        &anthropic_messages("gpt-4o-mini", false).header("x-fake-error", "invalid_request_error"),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (&v["type"], &v["error"]["type"]),
        (&json!("error"), &json!("invalid_request_error")),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x3_a_stream_cut_upstream_is_an_error_never_a_clean_finish() {
    let p = Proxy::start(CONFIG).await;
    let o = open(
        p.addr,
        &openai_chat("claude-sonnet-4-5", true)
            .header("x-fake-fail-after-chunks", 2)
            .header("x-fake-cut", "true"),
    )
    .await;
    assert_eq!(o.status, 200);
    let body: Vec<u8> = o
        .frames()
        .await
        .into_iter()
        .flat_map(|(_, b)| b.to_vec())
        .collect();
    let body = String::from_utf8_lossy(&body);
    assert!(
        !body.contains("[DONE]"),
        "a cut stream ended cleanly: {body}"
    );
    assert!(body.contains("\"error\""), "no error event: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x4_f1_failover_crosses_from_an_openai_to_an_anthropic_channel() {
    let p = Proxy::start(CONFIG).await;
    p.fake
        .set_default_for("cred-openai", Behavior::error(ErrorKind::Overloaded));
    for _ in 0..4 {
        let r = send(p.addr, &openai_chat("smart", false)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(v["object"], "chat.completion", "{v}");
        assert_eq!(v["model"], "smart");
        assert_eq!(v["choices"][0]["message"]["content"], expected_text(4));
    }
    let s = p.fake.stats();
    // The first request tried OpenAI first (its weighted pick) and failed over; later
    // ones may skip the overloaded channel while it cools down (F6, F8).
    assert!(s.calls_for("cred-openai") >= 1, "OpenAI was never tried");
    assert_eq!(
        s.calls_for("cred-anthropic"),
        4,
        "every request served by Anthropic"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x1_requests_that_do_not_translate_stay_with_their_own_vendor() {
    let p = Proxy::start(CONFIG).await;
    // Embeddings are not generation: only an OpenAI channel may serve them.
    let r = send(
        p.addr,
        &Req::post(
            "/v1/embeddings",
            json!({"model": "claude-sonnet-4-5", "input": "hi"}).to_string(),
        )
        .key(KeyAt::Bearer, "sk-a"),
    )
    .await;
    rejection(&r, Dialect::OpenAi, 50201);
    assert_eq!(p.fake.stats().total_calls, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x4_f11_a_fallback_crosses_vendors_unless_the_data_boundary_forbids_it() {
    let p = Proxy::start(CONFIG).await;
    p.fake
        .set_default_for("cred-openai", Behavior::error(ErrorKind::Overloaded));
    // gpt-4o-mini's only channel is overloaded: its fallback is served by Anthropic.
    let r = send(p.addr, &openai_chat("gpt-4o-mini", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model"], "claude-sonnet-4-5", "{}", r.text());
    assert_eq!(p.fake.stats().calls_for("cred-anthropic"), 1);
    // A key whose data may go to OpenAI only never reaches Anthropic, not even as a
    // fallback.
    let r = send(
        p.addr,
        &gen_for(Dialect::OpenAi, "gpt-4o-mini", false, None).key(KeyAt::Bearer, "sk-openai-only"),
    )
    .await;
    assert_ne!(r.status, 200, "{}", r.text());
    assert_eq!(
        p.fake.stats().calls_for("cred-anthropic"),
        1,
        "the boundary was crossed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x4_the_data_boundary_keeps_every_attempt_inside_its_vendors() {
    let p = Proxy::start(CONFIG).await;
    // A model served only outside the boundary: refused before anything is sent.
    let r = send(
        p.addr,
        &gen_for(Dialect::OpenAi, "claude-sonnet-4-5", false, None)
            .key(KeyAt::Bearer, "sk-openai-only"),
    )
    .await;
    let msg = rejection(&r, Dialect::OpenAi, 40301);
    assert!(msg.contains("vendors"), "{msg}");
    // A group that spans both vendors: with OpenAI failing, no attempt goes to
    // Anthropic.
    p.fake
        .set_default_for("cred-openai", Behavior::error(ErrorKind::Overloaded));
    for _ in 0..4 {
        let r = send(
            p.addr,
            &gen_for(Dialect::OpenAi, "smart", false, None).key(KeyAt::Bearer, "sk-openai-only"),
        )
        .await;
        assert_ne!(r.status, 200, "{}", r.text());
    }
    let s = p.fake.stats();
    assert_eq!(s.calls_for("cred-anthropic"), 0, "the boundary was crossed");
    assert!(s.calls_for("cred-openai") >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x2_streamed_parallel_tool_calls_reach_an_openai_client_each_with_its_index_and_id() {
    let p = Proxy::start(CONFIG).await;
    let r = send(
        p.addr,
        &openai_chat("claude-sonnet-4-5", true).header("x-fake-tool-calls", 2),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let data = sse_data(&r.text());
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for c in data.iter().filter(|d| d.is_object()) {
        for tc in c["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = tc["index"].as_u64().unwrap() as usize;
            if calls.len() <= i {
                calls.resize(i + 1, Default::default());
            }
            if let Some(id) = tc["id"].as_str() {
                calls[i].0 = id.to_owned();
                calls[i].1 = tc["function"]["name"].as_str().unwrap().to_owned();
            }
            calls[i].2 += tc["function"]["arguments"].as_str().unwrap_or_default();
        }
    }
    assert_eq!(
        calls,
        [
            (
                "toolu_fake_0".into(),
                "get_weather".into(),
                r#"{"city":"c0"}"#.into()
            ),
            (
                "toolu_fake_1".into(),
                "get_weather".into(),
                r#"{"city":"c1"}"#.into()
            ),
        ],
        "{}",
        r.text()
    );
    let finish: Vec<&Value> = data
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| f.is_string())
        .collect();
    assert_eq!(finish, [&json!("tool_calls")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x2_a_reasoning_conversations_second_turn_carries_its_signature_back() {
    let p = Proxy::start(CONFIG).await;
    let first = json!({
        "model": "claude-sonnet-4-5",
        "messages": [{"role": "user", "content": "Weather in c0?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
        "reasoning_effort": "low"
    });
    let r = send(
        p.addr,
        &Req::post("/v1/chat/completions", first.to_string())
            .key(KeyAt::Bearer, "sk-a")
            .header("x-fake-tool-calls", 1)
            .header("x-fake-thinking", "I should call get_weather."),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let answer = r.json();
    let message = answer["choices"][0]["message"].clone();
    assert_eq!(message["reasoning_content"], "I should call get_weather.");
    let id = message["tool_calls"][0]["id"].as_str().unwrap().to_owned();
    // The client's next turn, as the OpenAI SDK sends it: the assistant message echoed,
    // the tool's result under the same id.
    let second = json!({
        "model": "claude-sonnet-4-5",
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
        .last_json_for("/v1/messages")
        .expect("the second turn");
    let assistant = &sent["messages"][1];
    assert_eq!(assistant["role"], "assistant", "{sent}");
    assert_eq!(
        assistant["content"][0],
        json!({
            "type": "thinking",
            "thinking": "I should call get_weather.",
            "signature": portcullis_fake_upstream::thinking_signature("I should call get_weather.")
        }),
        "{sent}"
    );
    assert_eq!(assistant["content"][1]["id"], "toolu_fake_0", "{sent}");
    assert_eq!(
        sent["messages"][2]["content"][0]["tool_use_id"], "toolu_fake_0",
        "{sent}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x3_an_anthropic_429_reaches_an_openai_client_as_its_429_with_retry_after() {
    let p = Proxy::start(CONFIG).await;
    let r = send(
        p.addr,
        &openai_chat("claude-sonnet-4-5", false)
            .header("x-fake-error", "rate_limit_error")
            .header("x-fake-retry-after", 1),
    )
    .await;
    // The provider's 429 is one to fail over on (F2, F6): after the attempts its
    // Retry-After allows, the client gets the gateway's final 429 — in its own
    // dialect, with the type its SDK retries on and a Retry-After.
    assert_eq!(r.status, 429, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["type"], "rate_limit_exceeded", "{v}");
    let after: u64 = r
        .header("retry-after")
        .expect("retry-after")
        .parse()
        .unwrap();
    assert!(after >= 1, "{after}");
    assert!(p.fake.stats().calls_for("cred-anthropic") >= 1);
}
