//! Tool calls (`x-fake-tool-calls`, `x-fake-tool-name`), Anthropic and Gemini
//! thinking (`x-fake-thinking`) and the recorded request bodies.

mod common;

use common::*;
use portcullis_fake_upstream::{FakeUpstream, thinking_signature};
use serde_json::{Value, json};

const TWO: [(&str, &str); 1] = [("x-fake-tool-calls", "2")];

fn data_chunks(text: &str) -> Vec<Value> {
    parse_sse(text)
        .into_iter()
        .filter(|e| e.data != "[DONE]")
        .map(|e| e.json())
        .collect()
}

#[tokio::test]
async fn openai_tool_calls_non_stream() {
    let fake = FakeUpstream::start().await;
    let r = post(&fake, OPENAI, &TWO, &openai_body(false, false)).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    assert_eq!(
        choice["message"]["tool_calls"],
        json!([
            {"id":"call_fake_0","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"c0\"}"}},
            {"id":"call_fake_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"c1\"}"}}
        ])
    );
    // Usage as documented: tool calls do not change the output tokens.
    assert_eq!(v["usage"]["prompt_tokens"], 10);
    assert_eq!(v["usage"]["completion_tokens"], 16);

    // A custom name; text first when x-fake-chunks is set.
    let h = [
        ("x-fake-tool-calls", "1"),
        ("x-fake-tool-name", "lookup"),
        ("x-fake-chunks", "2"),
    ];
    let v = post(&fake, OPENAI, &h, &openai_body(false, false))
        .await
        .json();
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["content"], expected_text(2));
    assert_eq!(msg["tool_calls"][0]["function"]["name"], "lookup");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
}

fn expected_text(n: u32) -> String {
    portcullis_fake_upstream::expected_text(n)
}

#[tokio::test]
async fn openai_tool_calls_stream_interleaved() {
    let fake = FakeUpstream::start().await;
    let r = post(&fake, OPENAI, &TWO, &openai_body(true, true)).await;
    assert_eq!(r.status, 200);
    let text = r.text();
    assert!(text.ends_with("data: [DONE]\n\n"));
    let chunks = data_chunks(&text);
    let deltas: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0).map(|ch| &ch["delta"]))
        .collect();
    assert_eq!(
        deltas,
        [
            &json!({"role":"assistant","content":null,"refusal":null}),
            &json!({"tool_calls":[{"index":0,"id":"call_fake_0","type":"function","function":{"name":"get_weather","arguments":""}}]}),
            &json!({"tool_calls":[{"index":1,"id":"call_fake_1","type":"function","function":{"name":"get_weather","arguments":""}}]}),
            &json!({"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}),
            &json!({"tool_calls":[{"index":1,"function":{"arguments":"{\"city\":"}}]}),
            &json!({"tool_calls":[{"index":0,"function":{"arguments":"\"c0\"}"}}]}),
            &json!({"tool_calls":[{"index":1,"function":{"arguments":"\"c1\"}"}}]}),
            &json!({}),
        ]
    );
    let finishes: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0).map(|ch| &ch["finish_reason"]))
        .collect();
    assert_eq!(finishes.last().unwrap(), &&json!("tool_calls"));
    assert!(finishes[..finishes.len() - 1].iter().all(|f| f.is_null()));
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage["completion_tokens"], 16);
}

#[tokio::test]
async fn anthropic_tool_calls_non_stream_and_stream() {
    let fake = FakeUpstream::start().await;
    let v = post(&fake, ANTHROPIC, &TWO, &anthropic_body(false))
        .await
        .json();
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(
        v["content"],
        json!([
            {"type":"tool_use","id":"toolu_fake_0","name":"get_weather","input":{"city":"c0"}},
            {"type":"tool_use","id":"toolu_fake_1","name":"get_weather","input":{"city":"c1"}}
        ])
    );
    assert_eq!(v["usage"]["output_tokens"], 16);

    let r = post(&fake, ANTHROPIC, &TWO, &anthropic_body(true)).await;
    let events = parse_sse(&r.text());
    let got: Vec<(String, Value)> = events
        .iter()
        .map(|e| (e.event.clone().unwrap(), e.json()))
        .collect();
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let bodies: Vec<&Value> = got[2..10].iter().map(|(_, v)| v).collect();
    assert_eq!(
        bodies,
        [
            &json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_fake_0","name":"get_weather","input":{}}}),
            &json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}),
            &json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"c0\"}"}}),
            &json!({"type":"content_block_stop","index":0}),
            &json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_fake_1","name":"get_weather","input":{}}}),
            &json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}),
            &json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"c1\"}"}}),
            &json!({"type":"content_block_stop","index":1}),
        ]
    );
    assert_eq!(
        got[10].1,
        json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":16}})
    );
}

#[tokio::test]
async fn anthropic_thinking_block_with_signature() {
    let fake = FakeUpstream::start().await;
    let sig = thinking_signature("let me think");
    assert!(sig.starts_with("sig_fake_") && sig.len() == "sig_fake_".len() + 16);
    assert_eq!(sig, thinking_signature("let me think"));
    assert_ne!(sig, thinking_signature("let me think!"));

    let h = [("x-fake-thinking", "let me think")];
    let v = post(&fake, ANTHROPIC, &h, &anthropic_body(false))
        .await
        .json();
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(
        v["content"],
        json!([
            {"type":"thinking","thinking":"let me think","signature":sig},
            {"type":"text","text":expected_text(4)}
        ])
    );

    let r = post(&fake, ANTHROPIC, &h, &anthropic_body(true)).await;
    let events: Vec<Value> = parse_sse(&r.text()).iter().map(|e| e.json()).collect();
    assert_eq!(events[0]["type"], "message_start");
    assert_eq!(events[1]["type"], "ping");
    assert_eq!(
        events[2..7],
        [
            json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"let me think"}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":sig}}),
            json!({"type":"content_block_stop","index":0}),
            json!({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}),
        ]
    );
    let text: String = events
        .iter()
        .filter(|e| e["delta"]["type"] == "text_delta")
        .map(|e| {
            assert_eq!(e["index"], 1);
            e["delta"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(text, expected_text(4));
    assert_eq!(
        events[events.len() - 3],
        json!({"type":"content_block_stop","index":1})
    );

    // Thinking, text and a tool call: indices 0, 1, 2.
    let h = [
        ("x-fake-thinking", "hmm"),
        ("x-fake-tool-calls", "1"),
        ("x-fake-chunks", "1"),
    ];
    let v = post(&fake, ANTHROPIC, &h, &anthropic_body(false))
        .await
        .json();
    let types: Vec<&str> = v["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["thinking", "text", "tool_use"]);
    assert_eq!(v["stop_reason"], "tool_use");
    let r = post(&fake, ANTHROPIC, &h, &anthropic_body(true)).await;
    let events: Vec<Value> = parse_sse(&r.text()).iter().map(|e| e.json()).collect();
    let blocks: Vec<(u64, &str, &str)> = events
        .iter()
        .filter(|e| e["index"].is_u64())
        .map(|e| {
            let kind = e["content_block"]["type"]
                .as_str()
                .or(e["delta"]["type"].as_str())
                .unwrap_or("");
            (
                e["index"].as_u64().unwrap(),
                e["type"].as_str().unwrap(),
                kind,
            )
        })
        .collect();
    assert_eq!(
        blocks,
        [
            (0, "content_block_start", "thinking"),
            (0, "content_block_delta", "thinking_delta"),
            (0, "content_block_delta", "signature_delta"),
            (0, "content_block_stop", ""),
            (1, "content_block_start", "text"),
            (1, "content_block_delta", "text_delta"),
            (1, "content_block_stop", ""),
            (2, "content_block_start", "tool_use"),
            (2, "content_block_delta", "input_json_delta"),
            (2, "content_block_delta", "input_json_delta"),
            (2, "content_block_stop", ""),
        ]
    );

    // Other dialects ignore the thinking header.
    let plain = post(&fake, OPENAI, &[], &openai_body(false, false))
        .await
        .json();
    let with = post(
        &fake,
        OPENAI,
        &[("x-fake-thinking", "x")],
        &openai_body(false, false),
    )
    .await
    .json();
    assert_eq!(plain["choices"], with["choices"]);
}

#[tokio::test]
async fn gemini_function_calls_non_stream_and_stream() {
    let fake = FakeUpstream::start().await;
    let v = post(&fake, GEMINI, &TWO, &gemini_body()).await.json();
    let cand = &v["candidates"][0];
    assert_eq!(cand["finishReason"], "STOP");
    assert_eq!(
        cand["content"]["parts"],
        json!([
            {"functionCall":{"name":"get_weather","args":{"city":"c0"}}},
            {"functionCall":{"name":"get_weather","args":{"city":"c1"}}}
        ])
    );
    assert_eq!(v["usageMetadata"]["candidatesTokenCount"], 16);

    let r = post(&fake, GEMINI_SSE, &TWO, &gemini_body()).await;
    let chunks = data_chunks(&r.text());
    assert_eq!(chunks.len(), 3);
    for (i, c) in chunks[..2].iter().enumerate() {
        assert_eq!(
            c["candidates"][0]["content"]["parts"],
            json!([{"functionCall":{"name":"get_weather","args":{"city":format!("c{i}")}}}])
        );
        assert!(c["candidates"][0].get("finishReason").is_none());
    }
    assert_eq!(chunks[2]["candidates"][0]["finishReason"], "STOP");
    assert_eq!(chunks[2]["usageMetadata"]["candidatesTokenCount"], 16);

    // Without alt=sse: one JSON array of the same chunks.
    let path = "/v1beta/models/gemini-2.0-flash:streamGenerateContent";
    let arr = post(&fake, path, &TWO, &gemini_body()).await.json();
    let arr = arr.as_array().unwrap();
    assert_eq!(arr.len(), 3);
    assert_eq!(
        arr[1]["candidates"][0]["content"]["parts"][0]["functionCall"],
        json!({"name":"get_weather","args":{"city":"c1"}})
    );
}

#[tokio::test]
async fn gemini_thought_part_signed_function_call_and_thoughts_tokens() {
    let fake = FakeUpstream::start().await;
    let thinking = "let me think about it";
    let sig = thinking_signature(thinking);
    // 21 bytes of thinking text count as 21 / 4 = 5 tokens.
    let thoughts = 5;
    let h = [("x-fake-thinking", thinking), ("x-fake-tool-calls", "2")];
    let v = post(&fake, GEMINI, &h, &gemini_body()).await.json();
    let cand = &v["candidates"][0];
    assert_eq!(cand["finishReason"], "STOP");
    assert_eq!(
        cand["content"]["parts"],
        json!([
            {"text": thinking, "thought": true},
            {"functionCall": {"name": "get_weather", "args": {"city": "c0"}}, "thoughtSignature": sig},
            {"functionCall": {"name": "get_weather", "args": {"city": "c1"}}}
        ])
    );
    let u = &v["usageMetadata"];
    assert_eq!(u["promptTokenCount"], 10);
    assert_eq!(u["candidatesTokenCount"], 16);
    assert_eq!(u["thoughtsTokenCount"], thoughts);
    assert_eq!(u["totalTokenCount"], 10 + 16 + thoughts);

    // Streamed: the thought chunk, one chunk per call, the final chunk.
    let r = post(&fake, GEMINI_SSE, &h, &gemini_body()).await;
    let chunks = data_chunks(&r.text());
    let parts: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["candidates"][0]["content"]["parts"][0])
        .collect();
    assert_eq!(chunks.len(), 4);
    assert_eq!(parts[0], &json!({"text": thinking, "thought": true}));
    assert_eq!(parts[1]["thoughtSignature"], json!(sig));
    assert_eq!(parts[1]["functionCall"]["args"], json!({"city": "c0"}));
    assert!(parts[2].get("thoughtSignature").is_none());
    assert_eq!(parts[2]["functionCall"]["args"], json!({"city": "c1"}));
    assert!(
        chunks[..3]
            .iter()
            .all(|c| c["usageMetadata"].get("thoughtsTokenCount").is_none())
    );
    assert_eq!(chunks[3]["candidates"][0]["finishReason"], "STOP");
    assert_eq!(chunks[3]["usageMetadata"]["thoughtsTokenCount"], thoughts);
    assert_eq!(
        chunks[3]["usageMetadata"]["totalTokenCount"],
        10 + 16 + thoughts
    );

    // Thinking without calls: the thought part, then the text; no signature anywhere.
    let h = [("x-fake-thinking", "hmm")];
    let v = post(&fake, GEMINI, &h, &gemini_body()).await.json();
    assert_eq!(
        v["candidates"][0]["content"]["parts"],
        json!([{"text": "hmm", "thought": true}, {"text": expected_text(4)}])
    );
    // A text shorter than 4 bytes still counts one token.
    assert_eq!(v["usageMetadata"]["thoughtsTokenCount"], 1);
    let r = post(&fake, GEMINI_SSE, &h, &gemini_body()).await;
    let chunks = data_chunks(&r.text());
    assert_eq!(
        chunks[0]["candidates"][0]["content"]["parts"],
        json!([{"text": "hmm", "thought": true}])
    );
    let text: String = chunks[1..]
        .iter()
        .filter_map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(text, expected_text(4));
    assert!(!r.text().contains("thoughtSignature"));

    // Without the header nothing changes.
    let v = post(&fake, GEMINI, &TWO, &gemini_body()).await.json();
    assert!(v["usageMetadata"].get("thoughtsTokenCount").is_none());
    assert!(
        v["candidates"][0]["content"]["parts"][0]
            .get("thoughtSignature")
            .is_none()
    );
}

#[tokio::test]
async fn bad_tool_headers_are_400() {
    let fake = FakeUpstream::start().await;
    for h in [("x-fake-tool-calls", "9"), ("x-fake-tool-name", "")] {
        let r = post(&fake, OPENAI, &[h], &openai_body(false, false)).await;
        assert_eq!(r.status, 400, "{h:?}");
    }
}

#[tokio::test]
async fn last_bodies_show_the_second_turn() {
    let fake = FakeUpstream::start().await;
    post(&fake, ANTHROPIC, &TWO, &anthropic_body(false)).await;
    let second = json!({"model":"claude-sonnet-4-5","max_tokens":64,"messages":[
        {"role":"user","content":"weather?"},
        {"role":"assistant","content":[{"type":"tool_use","id":"toolu_fake_0","name":"get_weather","input":{"city":"c0"}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_fake_0","content":"sunny"}]}
    ]});
    post(&fake, ANTHROPIC, &[], &second.to_string()).await;
    post(&fake, OPENAI, &[], &openai_body(false, false)).await;
    let stats = fake.stats();
    assert_eq!(stats.last_bodies.len(), 3);
    assert_eq!(stats.last_json_for("/v1/messages"), Some(second));
    assert_eq!(
        stats.last_body_for("/v1/chat"),
        Some(openai_body(false, false).as_bytes())
    );
    assert_eq!(stats.last_body_for("/v1beta"), None);

    // Bounded: 16 bodies, each cut to 64 KiB.
    let big = format!(r#"{{"model":"m","input":"{}"}}"#, "x".repeat(70_000));
    for _ in 0..20 {
        post(&fake, "/v1/embeddings", &[], &big).await;
    }
    let stats = fake.stats();
    assert_eq!(
        stats.last_bodies.len(),
        portcullis_fake_upstream::RECENT_BODIES
    );
    let b = stats.last_body_for("/v1/embeddings").unwrap();
    assert_eq!(b.len(), portcullis_fake_upstream::BODY_CAP);
    assert_eq!(b, &big.as_bytes()[..64 * 1024]);
    assert_eq!(stats.last_body_for("/v1/messages"), None);
    fake.reset_stats();
    assert!(fake.stats().last_bodies.is_empty());
}

#[tokio::test]
async fn tool_frames_count_for_fail_after_chunks() {
    let fake = FakeUpstream::start().await;
    let h = [
        ("x-fake-tool-calls", "2"),
        ("x-fake-fail-after-chunks", "3"),
    ];
    let r = post(&fake, OPENAI, &h, &openai_body(true, false)).await;
    let chunks = data_chunks(&r.text());
    // Role chunk, two heads, one argument piece, then the error.
    assert_eq!(chunks.len(), 5);
    assert!(chunks[4].get("error").is_some(), "{:?}", chunks[4]);
}
