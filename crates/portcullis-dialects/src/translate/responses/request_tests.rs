//! Tests of Responses requests → chat (and on to Anthropic through the hub).
use super::request_to_chat;
use crate::translate::request::wrap_tool_id;
use crate::translate::{TranslateError, Wire, request};
use proptest::prelude::*;
use serde_json::{Value, json};

fn to_chat(req: Value) -> Result<Value, TranslateError> {
    let out = request_to_chat(req.to_string().as_bytes(), "gpt-up")?;
    Ok(serde_json::from_slice(&out).unwrap())
}

fn refused(req: Value) -> String {
    match to_chat(req) {
        Err(TranslateError::Unsupported { field, .. }) => field,
        other => panic!("not refused: {other:?}"),
    }
}

fn weather_params() -> Value {
    json!({"type": "object", "properties": {"location": {"type": "string", "description": "City and country e.g. Bogotá, Colombia"}}, "required": ["location"], "additionalProperties": false})
}

#[test]
fn x1_responses_string_input_becomes_one_user_message() {
    // The Responses API reference's text input example.
    let got = to_chat(
        json!({"model": "gpt-4.1", "input": "Tell me a three sentence bedtime story about a unicorn."}),
    );
    assert_eq!(
        got.unwrap(),
        json!({"model": "gpt-up", "messages": [
            {"role": "user", "content": "Tell me a three sentence bedtime story about a unicorn."}
        ]})
    );
}

#[test]
fn x1_responses_instructions_become_a_leading_system_message() {
    // The text generation guide's instructions example.
    let got = to_chat(json!({"model": "gpt-4.1", "reasoning": {"effort": "low"},
        "instructions": "Talk like a pirate.", "input": "Are semicolons optional in JavaScript?"}));
    assert_eq!(
        got.unwrap(),
        json!({"model": "gpt-up", "messages": [
            {"role": "system", "content": "Talk like a pirate."},
            {"role": "user", "content": "Are semicolons optional in JavaScript?"}
        ], "reasoning_effort": "low"})
    );
}

#[test]
fn x1_responses_multi_turn_items_keep_roles_and_order() {
    // The conversation state guide's example, an earlier output message given back
    // as it was returned (id, status, annotations).
    let got = to_chat(json!({"model": "gpt-4o-mini", "input": [
        {"role": "developer", "content": "Answer in one line."},
        {"role": "user", "content": "knock knock."},
        {"type": "message", "id": "msg_67b73f697ba4819183a15cc17d011509", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": "Who's there?", "annotations": [], "logprobs": []}]},
        {"role": "user", "content": [{"type": "input_text", "text": "Orange."}]}
    ], "store": false}));
    assert_eq!(
        got.unwrap(),
        json!({"model": "gpt-up", "messages": [
            {"role": "developer", "content": "Answer in one line."},
            {"role": "user", "content": "knock knock."},
            {"role": "assistant", "content": [{"type": "text", "text": "Who's there?"}]},
            {"role": "user", "content": [{"type": "text", "text": "Orange."}]}
        ]})
    );
}

#[test]
fn x1_responses_function_tools_and_a_function_call_output_second_turn() {
    // The function calling guide: tools, then the second turn with the model's
    // reasoning and function call given back and the call's output.
    let tool = json!({"type": "function", "name": "get_weather", "description": "Get current temperature for a given location.", "parameters": weather_params(), "strict": true});
    let got = to_chat(
        json!({"model": "o4-mini", "tools": [tool], "tool_choice": "auto", "input": [
        {"role": "user", "content": "What is the weather like in Paris today?"},
        {"type": "reasoning", "id": "rs_68af4030baa48193b0b43b4c2a176a1a", "summary": [], "encrypted_content": "gAAAAABo"},
        {"type": "function_call", "id": "fc_12345xyz", "call_id": "call_12345xyz", "name": "get_weather", "arguments": "{\"location\":\"Paris, France\"}", "status": "completed"},
        {"type": "function_call_output", "call_id": "call_12345xyz", "output": "{\"temperature\": 14}"}
    ], "include": ["reasoning.encrypted_content"]}),
    );
    assert_eq!(
        got.unwrap(),
        json!({"model": "gpt-up", "messages": [
            {"role": "user", "content": "What is the weather like in Paris today?"},
            {"role": "assistant", "tool_calls": [{"id": "call_12345xyz", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris, France\"}"}}]},
            {"role": "tool", "content": "{\"temperature\": 14}", "tool_call_id": "call_12345xyz"}
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get current temperature for a given location.", "parameters": weather_params(), "strict": true}}],
        "tool_choice": "auto"})
    );
}

#[test]
fn x2_responses_function_call_items_become_one_assistant_turn_with_tool_calls() {
    let id = wrap_tool_id(
        "toolu_1",
        &[json!({"type": "thinking", "thinking": "t", "signature": "s"})],
    );
    let got = to_chat(json!({"input": [
        {"role": "user", "content": "Paris and Rome?"},
        {"role": "assistant", "content": "Checking both."},
        {"type": "function_call", "call_id": id, "name": "w", "arguments": "{\"c\":\"Paris\"}"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "and Rome"}]},
        {"type": "function_call", "call_id": "call_2", "name": "w", "arguments": "{\"c\":\"Rome\"}"},
        {"type": "function_call_output", "call_id": id, "output": [{"type": "input_text", "text": "18C"}]},
        {"type": "function_call_output", "call_id": "call_2", "output": "24C"},
        {"type": "function_call", "call_id": "call_3", "name": "w", "arguments": "{}"}
    ]}))
    .unwrap();
    let call = |id: &str, args: &str| json!({"id": id, "type": "function", "function": {"name": "w", "arguments": args}});
    assert_eq!(
        got["messages"],
        json!([
            {"role": "user", "content": "Paris and Rome?"},
            {"role": "assistant", "content": "Checking both.", "tool_calls": [
                call(&id, "{\"c\":\"Paris\"}"), call("call_2", "{\"c\":\"Rome\"}")]},
            {"role": "tool", "content": [{"type": "text", "text": "18C"}], "tool_call_id": id},
            {"role": "tool", "content": "24C", "tool_call_id": "call_2"},
            {"role": "assistant", "tool_calls": [call("call_3", "{}")]}
        ])
    );
}

#[test]
fn x1_responses_images_become_image_url_parts() {
    // The images guide's example, plus a data URL with a detail.
    let got = to_chat(
        json!({"model": "gpt-4.1-mini", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "what's in this image?"},
            {"type": "input_image", "image_url": "https://upload.wikimedia.org/wikipedia/commons/thumb/d/dd/Gfp-wisconsin-madison-the-nature-boardwalk.jpg/2560px-Gfp-wisconsin-madison-the-nature-boardwalk.jpg"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high", "file_id": null}
        ]}]}),
    );
    assert_eq!(
        got.unwrap()["messages"][0]["content"],
        json!([
            {"type": "text", "text": "what's in this image?"},
            {"type": "image_url", "image_url": {"url": "https://upload.wikimedia.org/wikipedia/commons/thumb/d/dd/Gfp-wisconsin-madison-the-nature-boardwalk.jpg/2560px-Gfp-wisconsin-madison-the-nature-boardwalk.jpg"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"}}
        ])
    );
}

#[test]
fn x1_responses_json_schema_text_format_becomes_response_format() {
    // The structured outputs guide's calendar event example.
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}, "date": {"type": "string"}, "participants": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "date", "participants"], "additionalProperties": false});
    let got = to_chat(json!({"model": "gpt-4o-2024-08-06", "input": [
        {"role": "system", "content": "Extract the event information."},
        {"role": "user", "content": "Alice and Bob are going to a science fair on Friday."}
    ], "text": {"format": {"type": "json_schema", "name": "calendar_event", "schema": schema, "strict": true, "description": "An event"}, "verbosity": "low"}}))
    .unwrap();
    assert_eq!(
        got["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "calendar_event", "description": "An event", "schema": schema, "strict": true}})
    );
    assert_eq!(
        got["messages"][0],
        json!({"role": "system", "content": "Extract the event information."})
    );
    for kind in ["text", "json_object"] {
        let got = to_chat(json!({"input": "x", "text": {"format": {"type": kind}}})).unwrap();
        assert_eq!(got["response_format"], json!({"type": kind}));
    }
}

#[test]
fn x1_responses_settings_map_to_their_chat_fields() {
    // The reasoning guide's example, with the other settings that carry over.
    let got = to_chat(
        json!({"model": "o4-mini", "reasoning": {"effort": "medium", "summary": "auto"},
        "input": [{"role": "user", "content": "Write a bash script."}],
        "max_output_tokens": 300, "temperature": 0.7, "top_p": 0.9, "user": "u-1",
        "metadata": {"job": "42"}, "stream": true, "store": false, "parallel_tool_calls": false,
        "tools": [{"type": "function", "name": "run", "parameters": null, "strict": null}],
        "tool_choice": {"type": "function", "name": "run"}, "service_tier": "flex",
        "truncation": "disabled", "prompt_cache_key": "k", "max_tool_calls": 3,
        "stream_options": {"include_obfuscation": false}, "previous_response_id": null}),
    );
    assert_eq!(
        got.unwrap(),
        json!({"model": "gpt-up", "messages": [{"role": "user", "content": "Write a bash script."}],
            "max_completion_tokens": 300, "temperature": 0.7, "top_p": 0.9, "stream": true,
            "stream_options": {"include_usage": true},
            "tools": [{"type": "function", "function": {"name": "run"}}],
            "tool_choice": {"type": "function", "function": {"name": "run"}},
            "parallel_tool_calls": false, "reasoning_effort": "medium", "user": "u-1",
            "metadata": {"job": "42"}})
    );
    let got = to_chat(json!({"input": "x", "safety_identifier": "hash-1"})).unwrap();
    assert_eq!(got["user"], "hash-1");
}

#[test]
fn x2_state_held_by_openai_is_refused_naming_the_field() {
    let with = |k: &str, v: Value| {
        let mut r = json!({"model": "m", "input": "hi"});
        r[k] = v;
        r
    };
    for (k, v) in [
        ("previous_response_id", json!("resp_123")),
        ("store", json!(true)),
        ("conversation", json!("conv_1")),
        ("background", json!(true)),
        ("prompt", json!({"id": "pmpt_1", "version": "2"})),
        ("truncation", json!("auto")),
        ("top_logprobs", json!(5)),
        ("frobnicate", json!(1)),
        ("context_management", json!([{"type": "compaction"}])),
    ] {
        assert_eq!(refused(with(k, v)), k);
    }
    match to_chat(with("previous_response_id", json!("resp_123"))) {
        Err(TranslateError::Unsupported { why, .. }) => assert!(why.contains("OpenAI"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        refused(with(
            "include",
            json!([
                "reasoning.encrypted_content",
                "message.output_text.logprobs"
            ])
        )),
        "include[1]"
    );
    for (k, v) in [
        ("store", json!(false)),
        ("background", json!(false)),
        ("top_logprobs", json!(0)),
        ("include", json!([])),
    ] {
        assert!(to_chat(with(k, v)).is_ok(), "{k}");
    }
}

#[test]
fn x2_built_in_tools_and_tool_choices_are_refused_naming_the_path() {
    let f = json!({"type": "function", "name": "f", "parameters": {}, "strict": false});
    for kind in [
        "web_search",
        "file_search",
        "computer_use_preview",
        "code_interpreter",
        "image_generation",
        "mcp",
        "custom",
    ] {
        let r = json!({"input": "hi", "tools": [f, {"type": kind, "server_label": "x"}]});
        assert_eq!(refused(r), "tools[1].type", "{kind}");
    }
    let r = json!({"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {}, "strict": false, "defer_loading": true}]});
    assert_eq!(refused(r), "tools[0].defer_loading");
    assert_eq!(
        refused(json!({"input": "hi", "tool_choice": {"type": "web_search_preview"}})),
        "tool_choice.type"
    );
    assert_eq!(
        refused(json!({"input": "hi", "tool_choice": "sometimes"})),
        "tool_choice"
    );
    assert_eq!(
        refused(json!({"input": "hi", "text": {"format": {"type": "json_object", "x": 1}}})),
        "text.format.x"
    );
    assert_eq!(
        refused(json!({"input": "hi", "reasoning": {"effort": "low", "mode": "pro"}})),
        "reasoning.mode"
    );
}

#[test]
fn x2_unexpressible_items_and_parts_are_refused_naming_the_path() {
    let input = |items: Value| json!({"model": "m", "input": items});
    let user = |parts: Value| {
        input(json!([{"role": "user", "content": "a"}, {"role": "user", "content": parts}]))
    };
    assert_eq!(
        refused(input(json!([{"type": "item_reference", "id": "msg_1"}]))),
        "input[0].type"
    );
    assert_eq!(
        refused(input(
            json!([{"role": "user", "content": "a"}, {"type": "web_search_call", "id": "ws_1", "status": "completed"}])
        )),
        "input[1].type"
    );
    assert_eq!(
        refused(user(
            json!([{"type": "input_text", "text": "a"}, {"type": "input_image", "file_id": "file-123", "detail": "auto"}])
        )),
        "input[1].content[1].file_id"
    );
    assert_eq!(
        refused(user(json!([{"type": "input_file", "file_id": "file-1"}]))),
        "input[1].content[0].file_id"
    );
    assert_eq!(
        refused(user(
            json!([{"type": "input_file", "file_url": "https://x/y.pdf"}])
        )),
        "input[1].content[0].file_url"
    );
    assert_eq!(
        refused(user(
            json!([{"type": "input_image", "image_url": "https://a/b.png", "detail": "original"}])
        )),
        "input[1].content[0].detail"
    );
    assert_eq!(
        refused(user(
            json!([{"type": "input_text", "text": "a", "prompt_cache_breakpoint": {"mode": "explicit"}}])
        )),
        "input[1].content[0].prompt_cache_breakpoint"
    );
    assert_eq!(
        refused(user(json!([{"type": "output_text", "text": "a"}]))),
        "input[1].content[0].type"
    );
    assert_eq!(
        refused(input(
            json!([{"role": "system", "content": [{"type": "input_image", "image_url": "https://a/b.png"}]}])
        )),
        "input[0].content[0].type"
    );
    assert_eq!(
        refused(input(json!([{"role": "critic", "content": "x"}]))),
        "input[0].role"
    );
    assert_eq!(
        refused(input(
            json!([{"role": "user", "content": "x", "name": "bob"}])
        )),
        "input[0].name"
    );
    assert_eq!(
        refused(input(
            json!([{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image", "image_url": "https://a/b.png"}]}])
        )),
        "input[0].output[0].type"
    );
    assert_eq!(
        refused(input(
            json!([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "namespace": "ns"}])
        )),
        "input[0].namespace"
    );
    // A refusal given back by the assistant is kept as its text.
    let got = to_chat(input(json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}]))).unwrap();
    assert_eq!(
        got["messages"][1],
        json!({"role": "assistant", "content": [{"type": "text", "text": "No."}]})
    );
}

#[test]
fn x3_malformed_requests_name_the_wrong_value() {
    let malformed = |body: &[u8]| match request_to_chat(body, "m") {
        Err(TranslateError::Malformed(m)) => m,
        other => panic!("not malformed: {other:?}"),
    };
    malformed(b"{not json");
    assert!(malformed(br#"{"input": 3}"#).contains("`input`"));
    assert!(malformed(br#"{"model": "m"}"#).contains("input"));
    let m = malformed(br#"{"input": [{"role": "user", "content": "a"}, {"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]}"#);
    assert!(m.contains("`input[1].arguments`"), "{m}");
    let m = malformed(
        br#"{"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]}"#,
    );
    assert!(m.contains("input[0].content[0]"), "{m}");
    assert!(
        malformed(br#"{"input": "x", "max_output_tokens": "many"}"#).contains("max_output_tokens")
    );
}

#[test]
fn x1_responses_request_reaches_anthropic_through_the_hub() {
    let thinking =
        json!({"type": "thinking", "thinking": "Check it.", "signature": "EqQBCgIYAhIM"});
    let id = wrap_tool_id("toolu_01A", std::slice::from_ref(&thinking));
    let body = json!({"model": "gpt-4.1", "instructions": "Be brief.", "store": false, "stream": true,
    "tools": [{"type": "function", "name": "get_weather", "description": "Weather", "parameters": weather_params(), "strict": true}],
    "reasoning": {"effort": "low"},
    "input": [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "reasoning", "id": "rs_chatcmpl-msg_1", "summary": [{"type": "summary_text", "text": "Check it."}]},
        {"type": "function_call", "id": "fc_chatcmpl-msg_1_0", "call_id": id, "name": "get_weather", "arguments": "{\"location\":\"Paris\"}", "status": "completed"},
        {"type": "function_call_output", "call_id": id, "output": "14C"}
    ]});
    let out = request(
        Wire::Responses,
        Wire::Messages,
        body.to_string().as_bytes(),
        "claude-up",
        1000,
        true,
    )
    .unwrap();
    let got: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        got,
        json!({
            "model": "claude-up", "system": "Be brief.", "max_tokens": 2024, "stream": true,
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [thinking,
                    {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"location": "Paris"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": "14C"}]}
            ],
            "tools": [{"name": "get_weather", "description": "Weather", "input_schema": weather_params()}],
            "thinking": {"type": "enabled", "budget_tokens": 1024}
        })
    );
    // A default maximum is given when the client sets none.
    let out = request(
        Wire::Responses,
        Wire::Messages,
        br#"{"input": "hi"}"#,
        "c",
        777,
        false,
    )
    .unwrap();
    let got: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(got["max_tokens"], 777);
    assert_eq!(got["messages"], json!([{"role": "user", "content": "hi"}]));
}

fn item_strategy() -> impl Strategy<Value = Value> {
    let text = ".{0,6}";
    prop_oneof![
        (0..5usize, text).prop_map(|(r, t)| {
            let role = ["user", "assistant", "system", "developer", "tool"][r];
            json!({"role": role, "content": t})
        }),
        (text, any::<bool>()).prop_map(|(t, image)| {
            let second = if image {
                json!({"type": "input_image", "image_url": "https://a/b.png"})
            } else {
                json!({"type": "input_file", "file_id": "f"})
            };
            json!({"role": "user", "content": [{"type": "input_text", "text": t}, second]})
        }),
        (0..3u8, text).prop_map(|(c, a)| json!({"type": "function_call", "call_id": format!("call_{c}"), "name": "f", "arguments": a})),
        (0..3u8, text).prop_map(|(c, o)| json!({"type": "function_call_output", "call_id": format!("call_{c}"), "output": o})),
        Just(json!({"type": "reasoning", "id": "rs_1", "summary": []})),
        Just(json!({"type": "web_search_call", "id": "ws", "status": "completed"})),
        Just(json!({"type": "message", "role": "user"})),
    ]
}

proptest! {
    #[test]
    fn x2_any_responses_input_becomes_a_non_empty_chat_request_or_is_refused(
        items in proptest::collection::vec(item_strategy(), 0..6),
        as_text in proptest::option::of(".{0,6}"),
        instructions in proptest::option::of(".{0,6}"),
        max in proptest::option::of(0..5000u64),
        store in proptest::option::of(any::<bool>()),
    ) {
        let mut req = json!({"model": "m"});
        req["input"] = match as_text { Some(t) => json!(t), None => json!(items) };
        if let Some(i) = instructions { req["instructions"] = json!(i); }
        if let Some(m) = max { req["max_output_tokens"] = json!(m); }
        if let Some(s) = store { req["store"] = json!(s); }
        match to_chat(req) {
            Err(TranslateError::Unsupported { field, .. }) => prop_assert!(!field.is_empty()),
            Err(TranslateError::Malformed(m)) => prop_assert!(!m.is_empty()),
            Ok(out) => {
                let msgs = out["messages"].as_array().unwrap();
                prop_assert!(!msgs.is_empty());
                prop_assert_eq!(&out["model"], "gpt-up");
                prop_assert_ne!(store, Some(true));
                for m in msgs {
                    prop_assert!(matches!(m["role"].as_str(), Some("user" | "assistant" | "system" | "developer" | "tool")));
                    prop_assert_eq!(m["role"] == "tool", m.get("tool_call_id").is_some());
                }
                prop_assert_eq!(out["max_completion_tokens"].as_u64(), max);
            }
        }
    }
}

#[test]
fn x2_an_inline_input_file_becomes_a_chat_file_part_and_an_anthropic_document() {
    let pdf = "JVBERi0xLjQK";
    let body = json!({"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "Summarise."},
        {"type": "input_file", "filename": "r.pdf",
            "file_data": format!("data:application/pdf;base64,{pdf}")}]}]});
    let chat = crate::translate::request(
        Wire::Responses,
        Wire::Chat,
        body.to_string().as_bytes(),
        "c",
        64,
        false,
    )
    .unwrap();
    let chat: Value = serde_json::from_slice(&chat).unwrap();
    assert_eq!(
        chat["messages"][0]["content"][1],
        json!({"type": "file", "file": {"file_data": format!("data:application/pdf;base64,{pdf}"),
            "filename": "r.pdf"}})
    );
    let an = crate::translate::request(
        Wire::Responses,
        Wire::Messages,
        body.to_string().as_bytes(),
        "claude",
        64,
        false,
    )
    .unwrap();
    let an: Value = serde_json::from_slice(&an).unwrap();
    assert_eq!(an["messages"][0]["content"][1]["type"], "document", "{an}");
    assert_eq!(an["messages"][0]["content"][1]["title"], "r.pdf");
}
