//! Tests across the pieces: stream helpers, the thought-signature round trip, the
//! two-leg paths through chat (an Anthropic client of a Gemini channel and the
//! reverse), and the property that any chat conversation becomes valid Gemini
//! contents or is refused.
use super::stream_to_chat::tests as to_chat;
use crate::translate::request::unwrap_tool_id;
use crate::translate::{TranslateError, Wire, request, response};
use proptest::prelude::*;
use serde_json::{Value, json};

pub(super) use crate::translate::stream::tests::{data_only, run};

/// The client's events: (event name, data JSON; `[DONE]` as a string), `created`
/// zeroed. Events may end with CRLF (Gemini) or LF.
pub(super) fn events(out: &[u8]) -> Vec<(String, Value)> {
    let s = std::str::from_utf8(out).expect("utf-8 output");
    crate::translate::stream::tests::parse(s.replace("\r\n", "\n").as_bytes())
}

/// Translates `input` whole, split at every byte and one byte at a time; all must
/// agree. Returns the parsed events and `finish`.
pub(super) fn split_anywhere(
    from: Wire,
    to: Wire,
    input: &str,
    usage: bool,
) -> (Vec<(String, Value)>, bool) {
    crate::translate::stream::tests::split_anywhere_read(events, from, to, input, usage)
}

fn body(v: &Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

#[test]
fn x2_thought_signature_of_a_function_call_comes_back_on_the_next_gemini_request() {
    // Turn 1: Gemini answers a chat client with a signed function call (Google's
    // thought signatures example).
    let answer = json!({
        "candidates": [{"content": {"role": "model", "parts": [
            {"text": "Checking the weather first.", "thought": true},
            {"functionCall": {"name": "get_weather", "args": {"location": "Lisbon"}}, "thoughtSignature": "CiwBVKhc7nGsig=="}
        ]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 5, "thoughtsTokenCount": 40, "totalTokenCount": 65},
        "responseId": "r1"
    });
    let chat: Value =
        serde_json::from_slice(&response(Wire::Gemini, Wire::Chat, &body(&answer), "pub").unwrap())
            .unwrap();
    let msg = chat["choices"][0]["message"].clone();
    let id = msg["tool_calls"][0]["id"].as_str().unwrap().to_owned();
    // Turn 2: the client sends the assistant message back as it got it, with the result.
    let next = json!({"model": "pub", "messages": [
        {"role": "user", "content": "Weather in Lisbon?"},
        msg,
        {"role": "tool", "tool_call_id": id, "content": "22C and sunny"}
    ]});
    let g: Value = serde_json::from_slice(
        &request(
            Wire::Chat,
            Wire::Gemini,
            &body(&next),
            "gemini-up",
            1000,
            false,
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        g["contents"],
        json!([
            {"role": "user", "parts": [{"text": "Weather in Lisbon?"}]},
            {"role": "model", "parts": [{"thoughtSignature": "CiwBVKhc7nGsig==", "functionCall": {"id": "call_0", "name": "get_weather", "args": {"location": "Lisbon"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"id": "call_0", "name": "get_weather", "response": {"result": "22C and sunny"}}}]}
        ])
    );
}

#[test]
fn x2_anthropic_thinking_comes_back_through_a_gemini_clients_next_turn() {
    // A Gemini client of an Anthropic channel: the answer's thinking rides in the call id.
    let thinking =
        json!({"type": "thinking", "thinking": "Need the weather.", "signature": "EqQBCgIYAhIM"});
    let an = json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude",
        "content": [thinking, {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Oslo"}}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 20}
    });
    let g: Value =
        serde_json::from_slice(&response(Wire::Messages, Wire::Gemini, &body(&an), "pub").unwrap())
            .unwrap();
    let parts = g["candidates"][0]["content"]["parts"].clone();
    assert_eq!(
        parts[0],
        json!({"text": "Need the weather.", "thought": true})
    );
    let id = parts[1]["functionCall"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        unwrap_tool_id(&id),
        ("toolu_01".to_owned(), Some(vec![thinking.clone()]))
    );
    // The client's next turn echoes the model content and answers the call by id.
    let next = json!({"contents": [
        {"role": "user", "parts": [{"text": "Weather in Oslo?"}]},
        {"role": "model", "parts": parts},
        {"role": "user", "parts": [{"functionResponse": {"id": id, "name": "get_weather", "response": {"result": "cold"}}}]}
    ]});
    let an: Value = serde_json::from_slice(
        &request(
            Wire::Gemini,
            Wire::Messages,
            &body(&next),
            "claude-up",
            1000,
            false,
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        an["messages"],
        json!([
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": [thinking, {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "cold"}]}
        ])
    );
}

#[test]
fn x2_anthropic_client_request_reaches_a_gemini_channel_through_chat() {
    // Anthropic's tool use example, second turn, for a Gemini channel.
    let an = json!({
        "model": "claude-opus-4-1", "max_tokens": 1024,
        "system": "You are a weather bot.",
        "tools": [{"name": "get_weather", "description": "Get the weather", "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}}}],
        "messages": [
            {"role": "user", "content": "What's the weather like in San Francisco?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"location": "San Francisco, CA"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": "15 degrees"}]}
        ],
        "thinking": {"type": "enabled", "budget_tokens": 10000}
    });
    let g: Value = serde_json::from_slice(
        &request(
            Wire::Messages,
            Wire::Gemini,
            &body(&an),
            "gemini-2.5-pro",
            1000,
            false,
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        g,
        json!({
            "contents": [
                {"role": "user", "parts": [{"text": "What's the weather like in San Francisco?"}]},
                {"role": "model", "parts": [{"functionCall": {"id": "toolu_01A", "name": "get_weather", "args": {"location": "San Francisco, CA"}}}]},
                {"role": "user", "parts": [{"functionResponse": {"id": "toolu_01A", "name": "get_weather", "response": {"result": "15 degrees"}}}]}
            ],
            "systemInstruction": {"parts": [{"text": "You are a weather bot."}]},
            "tools": [{"functionDeclarations": [{"name": "get_weather", "description": "Get the weather", "parametersJsonSchema": {"type": "object", "properties": {"location": {"type": "string"}}}}]}],
            "generationConfig": {"maxOutputTokens": 1024, "thinkingConfig": {"includeThoughts": true, "thinkingBudget": 8192}}
        })
    );
    // Anthropic's top_k has no way through chat.
    let mut r = an.clone();
    r["top_k"] = json!(5);
    assert!(matches!(
        request(Wire::Messages, Wire::Gemini, &body(&r), "g", 1000, false),
        Err(TranslateError::Unsupported { field, .. }) if field == "top_k"
    ));
}

#[test]
fn x2_anthropic_client_reads_a_gemini_stream_through_chat_split_anywhere() {
    let (ev, ok) = split_anywhere(
        Wire::Gemini,
        Wire::Messages,
        to_chat::GEMINI_THOUGHT_CALLS,
        true,
    );
    assert!(ok);
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let start = &ev[1].1["content_block"];
    assert_eq!(start["type"], json!("tool_use"));
    assert_eq!(start["name"], json!("get_weather"));
    assert_eq!(unwrap_tool_id(start["id"].as_str().unwrap()).0, "call_0");
    assert_eq!(
        ev[2].1["delta"],
        json!({"type": "input_json_delta", "partial_json": "{\"location\":\"Paris\"}"})
    );
    assert_eq!(ev[4].1["content_block"]["id"], json!("call_1"));
    assert_eq!(
        ev[7].1,
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
            "usage": {"output_tokens": 50, "input_tokens": 50, "cache_read_input_tokens": 0}})
    );
    // Cut before the finishReason: the Anthropic client gets an error, no message_stop.
    let cut = to_chat::GEMINI_THOUGHT_CALLS
        .find("\"finishReason\"")
        .unwrap();
    let (out, ok) = run(
        Wire::Gemini,
        Wire::Messages,
        &[&to_chat::GEMINI_THOUGHT_CALLS.as_bytes()[..cut]],
        true,
    );
    assert!(!ok);
    let ev = events(&out);
    assert!(ev.iter().all(|(n, _)| n != "message_stop"));
    assert_eq!(ev.last().unwrap().0, "error");
}

#[test]
fn x2_gemini_client_reads_an_anthropic_stream_through_chat() {
    let anthropic = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\n";
    let (ev, ok) = split_anywhere(Wire::Messages, Wire::Gemini, anthropic, false);
    assert!(ok);
    let ev = data_only(&ev);
    assert_eq!(
        ev[0]["candidates"][0]["content"]["parts"],
        json!([{"text": "Hi"}])
    );
    let last = ev.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], json!("MAX_TOKENS"));
    assert_eq!(
        last["usageMetadata"],
        json!({"promptTokenCount": 30, "cachedContentTokenCount": 5, "candidatesTokenCount": 15, "totalTokenCount": 45})
    );
}

fn message() -> impl Strategy<Value = Value> {
    let text = ".{0,8}";
    prop_oneof![
        (0..3usize, text).prop_map(|(r, t)| {
            let role = ["system", "developer", "user"][r];
            json!({"role": role, "content": t})
        }),
        text.prop_map(|t| json!({"role": "user", "content": [{"type": "text", "text": t}]})),
        (text, 0..3usize).prop_map(|(t, calls)| {
            let calls: Vec<Value> = (0..calls)
                .map(|k| json!({"id": format!("call_{k}"), "type": "function", "function": {"name": format!("f{k}"), "arguments": "{}"}}))
                .collect();
            let mut m = json!({"role": "assistant", "content": t});
            if !calls.is_empty() {
                m["tool_calls"] = json!(calls);
            }
            m
        }),
        (0..3usize, text).prop_map(|(k, t)| json!({"role": "tool", "tool_call_id": format!("call_{k}"), "content": t})),
    ]
}

proptest! {
    #[test]
    fn x2_any_chat_conversation_becomes_gemini_user_and_model_turns_or_is_refused(
        messages in proptest::collection::vec(message(), 0..8),
        effort in proptest::option::of(0..6usize),
        max in proptest::option::of(0..5000u64),
    ) {
        let mut req = json!({"model": "m", "messages": messages});
        if let Some(e) = effort {
            let effort = ["none", "minimal", "low", "medium", "high", "max"][e];
            req["reasoning_effort"] = json!(effort);
        }
        if let Some(m) = max {
            req["max_completion_tokens"] = json!(m);
        }
        match request(Wire::Chat, Wire::Gemini, &body(&req), "g", 1000, false) {
            Err(TranslateError::Unsupported { .. } | TranslateError::Malformed(_)) => {}
            Ok(out) => {
                let g: Value = serde_json::from_slice(&out).unwrap();
                let contents = g["contents"].as_array().unwrap();
                prop_assert!(!contents.is_empty());
                for c in contents {
                    prop_assert!(c["role"] == "user" || c["role"] == "model", "{c}");
                    prop_assert!(!c["parts"].as_array().unwrap().is_empty());
                }
                // Every function response names a function called before it.
                let mut called = Vec::new();
                for part in contents.iter().flat_map(|c| c["parts"].as_array().unwrap()) {
                    if let Some(name) = part["functionCall"]["name"].as_str() {
                        called.push(name.to_owned());
                    }
                    if let Some(name) = part["functionResponse"]["name"].as_str() {
                        prop_assert!(called.iter().any(|c| c == name));
                    }
                }
            }
        }
    }
}

#[test]
fn x2_pdf_files_cross_between_chat_anthropic_and_gemini_inline() {
    let pdf = "JVBERi0xLjQK";
    let url = format!("data:application/pdf;base64,{pdf}");
    let to_gemini = |from: Wire, body: Value| -> Value {
        let out = request(
            from,
            Wire::Gemini,
            body.to_string().as_bytes(),
            "g",
            64,
            false,
        )
        .expect("translated");
        serde_json::from_slice(&out).unwrap()
    };
    let inline = json!({"inlineData": {"mimeType": "application/pdf", "data": pdf}});
    // An OpenAI chat file part, and an Anthropic document through the hub.
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Summarise."},
        {"type": "file", "file": {"file_data": url, "filename": "r.pdf"}}]}]});
    assert_eq!(
        to_gemini(Wire::Chat, chat)["contents"][0]["parts"][1],
        inline
    );
    let anthropic = json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user",
        "content": [{"type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": pdf}}]}]});
    assert_eq!(
        to_gemini(Wire::Messages, anthropic)["contents"][0]["parts"][0],
        inline
    );
    // A Gemini client's inline PDF reaches chat as a file part.
    let gemini = json!({"contents": [{"role": "user", "parts": [inline]}]});
    let out = request(
        Wire::Gemini,
        Wire::Chat,
        gemini.to_string().as_bytes(),
        "c",
        64,
        false,
    )
    .expect("translated");
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["messages"][0]["content"][0]["type"], "file", "{v}");
    assert_eq!(
        v["messages"][0]["content"][0]["file"]["file_data"],
        json!(url)
    );
    // What Gemini cannot read is refused, naming it.
    let refused = |f: Value| {
        let body = json!({"model": "m", "messages": [{"role": "user",
            "content": [{"type": "file", "file": f}]}]});
        match request(
            Wire::Chat,
            Wire::Gemini,
            body.to_string().as_bytes(),
            "g",
            64,
            false,
        ) {
            Err(TranslateError::Unsupported { field, .. }) => field,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        refused(json!({"file_id": "file-1"})),
        "messages[0].content[0].file.file_id"
    );
    assert_eq!(
        refused(json!({"file_data": "data:text/csv;base64,YQ=="})),
        "messages[0].content[0].file.file_data"
    );
}
