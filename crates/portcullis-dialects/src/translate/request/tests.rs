use super::*;
use crate::translate::{Wire, request};
use proptest::prelude::*;
use serde_json::json;

fn oa_to_an(req: Value) -> Result<Value, TranslateError> {
    let out = request(
        Wire::Chat,
        Wire::Messages,
        req.to_string().as_bytes(),
        "claude-up",
        1000,
        false,
    )?;
    Ok(serde_json::from_slice(&out).unwrap())
}

fn an_to_oa(req: Value) -> Result<Value, TranslateError> {
    let out = request(
        Wire::Messages,
        Wire::Chat,
        req.to_string().as_bytes(),
        "gpt-up",
        1000,
        false,
    )?;
    Ok(serde_json::from_slice(&out).unwrap())
}

fn refused(r: Result<Value, TranslateError>) -> String {
    match r {
        Err(TranslateError::Unsupported { field, .. }) => field,
        other => panic!("not refused: {other:?}"),
    }
}

fn weather_schema() -> Value {
    json!({"type": "object", "properties": {"location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["location"]})
}

#[test]
fn x1_openai_tools_become_anthropic_tools() {
    // OpenAI's chat create example with functions.
    let got = oa_to_an(json!({
        "model": "gpt-4.1",
        "messages": [{"role": "user", "content": "What is the weather like in Boston today?"}],
        "tools": [{"type": "function", "function": {"name": "get_current_weather", "description": "Get the current weather in a given location", "parameters": weather_schema()}}],
        "tool_choice": "auto",
        "parallel_tool_calls": false
    }))
    .unwrap();
    assert_eq!(
        got,
        json!({
            "model": "claude-up",
            "messages": [{"role": "user", "content": "What is the weather like in Boston today?"}],
            "max_tokens": 1000,
            "tools": [{"name": "get_current_weather", "description": "Get the current weather in a given location", "input_schema": weather_schema()}],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": true}
        })
    );
}

#[test]
fn x1_anthropic_tools_become_openai_tools() {
    // Anthropic's messages create example with tools.
    let got = an_to_oa(json!({
        "model": "claude-opus-4-1",
        "max_tokens": 1024,
        "system": "You are a weather bot.",
        "tools": [{"name": "get_weather", "description": "Get the current weather in a given location", "input_schema": weather_schema()}],
        "tool_choice": {"type": "any"},
        "messages": [{"role": "user", "content": "What is the weather like in San Francisco?"}],
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u-1"},
        "stream": true
    }))
    .unwrap();
    assert_eq!(
        got,
        json!({
            "model": "gpt-up",
            "messages": [
                {"role": "system", "content": "You are a weather bot."},
                {"role": "user", "content": "What is the weather like in San Francisco?"}
            ],
            "max_completion_tokens": 1024,
            "stop": ["END"],
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a given location", "parameters": weather_schema()}}],
            "tool_choice": "required",
            "user": "u-1"
        })
    );
}

#[test]
fn x1_openai_tool_results_merge_into_one_anthropic_user_message() {
    let got = oa_to_an(json!({
        "model": "gpt-4.1",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Rome\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "24C"}]}
        ],
        "max_completion_tokens": 200,
        "stop": "STOP",
        "temperature": 0.5,
        "user": "u-2"
    }))
    .unwrap();
    assert_eq!(
        got,
        json!({
            "model": "claude-up",
            "system": "Be brief.",
            "messages": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"location": "Paris"}},
                    {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"location": "Rome"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "24C"}]}
                ]}
            ],
            "max_tokens": 200,
            "temperature": 0.5,
            "stop_sequences": ["STOP"],
            "metadata": {"user_id": "u-2"}
        })
    );
}

#[test]
fn x1_anthropic_tool_use_second_turn_becomes_openai_tool_messages() {
    // Anthropic's tool use example, second turn.
    let got = an_to_oa(json!({
        "model": "claude-opus-4-1",
        "max_tokens": 1024,
        "messages": [
            {"role": "user", "content": "What's the weather like in San Francisco?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "call the tool", "signature": "sig"},
                {"type": "text", "text": "<thinking>I need to use get_weather</thinking>"},
                {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather", "input": {"location": "San Francisco, CA", "unit": "celsius"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "15 degrees"},
                {"type": "text", "text": "Thanks"}
            ]}
        ],
        "thinking": {"type": "enabled", "budget_tokens": 5000},
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true}
    }))
    .unwrap();
    assert_eq!(
        got,
        json!({
            "model": "gpt-up",
            "messages": [
                {"role": "user", "content": "What's the weather like in San Francisco?"},
                {"role": "assistant", "content": "<thinking>I need to use get_weather</thinking>", "tool_calls": [
                    {"id": "toolu_01A09q90qw90lq917835lq9", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"San Francisco, CA\",\"unit\":\"celsius\"}"}}
                ]},
                {"role": "tool", "content": "15 degrees", "tool_call_id": "toolu_01A09q90qw90lq917835lq9"},
                {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}
            ],
            "max_completion_tokens": 1024,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": false,
            "reasoning_effort": "medium"
        })
    );
}

#[test]
fn x1_images_by_url_and_base64_cross_both_ways() {
    let oa = json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is in these images?"},
        {"type": "image_url", "image_url": {"url": "https://upload.wikimedia.org/a.jpg"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"}}
    ]}]});
    let an = oa_to_an(oa).unwrap();
    let blocks = json!([
        {"type": "text", "text": "What is in these images?"},
        {"type": "image", "source": {"type": "url", "url": "https://upload.wikimedia.org/a.jpg"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    ]);
    assert_eq!(an["messages"][0]["content"], blocks);
    let back = an_to_oa(an).unwrap();
    assert_eq!(
        back["messages"][0]["content"],
        json!([
            {"type": "text", "text": "What is in these images?"},
            {"type": "image_url", "image_url": {"url": "https://upload.wikimedia.org/a.jpg"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
        ])
    );
}

#[test]
fn x2_thinking_signature_round_trips_through_the_tool_call_id() {
    let blocks = vec![
        json!({"type": "thinking", "thinking": "Let me check.", "signature": "EqQBCgIYAhIM"}),
        json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy"}),
    ];
    let id = wrap_tool_id("toolu_1", &blocks);
    assert!(id.starts_with("toolu_1__pcx1_"));
    assert_eq!(
        unwrap_tool_id(&id),
        ("toolu_1".to_owned(), Some(blocks.clone()))
    );
    let got = oa_to_an(json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": id, "content": "ok"}
    ], "reasoning_effort": "low", "max_tokens": 500}))
    .unwrap();
    assert_eq!(
        got["messages"][1]["content"],
        json!([
            blocks[0], blocks[1],
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
        ])
    );
    assert_eq!(
        got["messages"][2]["content"][0]["tool_use_id"],
        json!("toolu_1")
    );
    // 500 cannot hold a budget of 1024: raised to budget + default.
    assert_eq!(
        got["thinking"],
        json!({"type": "enabled", "budget_tokens": 1024})
    );
    assert_eq!(got["max_tokens"], json!(2024));
}

#[test]
fn x2_n_above_one_is_refused_naming_n() {
    let base = |k: &str, v: Value| {
        let mut r = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        r[k] = v;
        r
    };
    assert_eq!(refused(oa_to_an(base("n", json!(2)))), "n");
    assert!(oa_to_an(base("n", json!(1))).is_ok());
    for (k, v) in [
        ("logprobs", json!(true)),
        ("logit_bias", json!({"50256": -100})),
        ("presence_penalty", json!(0.5)),
        ("seed", json!(7)),
        ("modalities", json!(["text", "audio"])),
        ("response_format", json!({"type": "grammar"})),
        ("prediction", json!({"type": "content", "content": "x"})),
        ("frobnicate", json!(1)),
    ] {
        assert_eq!(refused(oa_to_an(base(k, v))), k);
    }
    assert!(oa_to_an(base("store", json!(true))).is_ok());
    assert!(oa_to_an(base("presence_penalty", json!(0))).is_ok());
}

#[test]
fn x2_structured_output_becomes_a_forced_tool_towards_anthropic() {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
        "required": ["city"]});
    let req = json!({"model": "m", "messages": [{"role": "user", "content": "Where?"}],
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "place", "description": "The place.", "schema": schema, "strict": true}}});
    let got = oa_to_an(req.clone()).unwrap();
    assert_eq!(
        got["tools"],
        json!([{"name": JSON_TOOL, "description": "The place.", "input_schema": schema}])
    );
    assert_eq!(
        got["tool_choice"],
        json!({"type": "tool", "name": JSON_TOOL, "disable_parallel_tool_use": true})
    );
    // json_object: any object.
    let mut obj = req.clone();
    obj["response_format"] = json!({"type": "json_object"});
    let got = oa_to_an(obj).unwrap();
    assert_eq!(got["tools"][0]["input_schema"], json!({"type": "object"}));
    assert_eq!(got["tool_choice"]["name"], JSON_TOOL);
    // Where a forced call cannot stand in for a format: refused, never dropped.
    let with = |k: &str, v: Value| {
        let mut r = req.clone();
        r[k] = v;
        r
    };
    let tools = json!([{"type": "function", "function": {"name": "f"}}]);
    for r in [
        with("tools", tools.clone()),
        with("tool_choice", json!("none")),
        with("reasoning_effort", json!("low")),
    ] {
        assert_eq!(refused(oa_to_an(r)), "response_format");
    }
    let mut array = req.clone();
    array["response_format"]["json_schema"]["schema"] = json!({"type": "array"});
    assert_eq!(
        refused(oa_to_an(array)),
        "response_format.json_schema.schema.type"
    );
    let reserved = json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": JSON_TOOL}}]});
    assert_eq!(refused(oa_to_an(reserved)), "tools[0].function.name");
    // A text format is no format.
    assert!(
        oa_to_an(with("response_format", json!({"type": "text"})))
            .unwrap()
            .get("tools")
            .is_none()
    );
}

#[test]
fn x2_unexpressible_openai_messages_are_refused_naming_the_path() {
    let msgs = |m: Value| json!({"model": "m", "messages": m});
    assert_eq!(
        refused(oa_to_an(msgs(json!([{"role": "critic", "content": "x"}])))),
        "messages[0].role"
    );
    assert_eq!(
        refused(oa_to_an(msgs(
            json!([{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}])
        ))),
        "messages[0].content[0].type"
    );
    assert_eq!(
        refused(oa_to_an(msgs(
            json!([{"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}])
        ))),
        "messages[0].role"
    );
}

#[test]
fn x2_anthropic_only_fields_are_refused_towards_openai() {
    let base =
        json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let mut r = base.clone();
    r["top_k"] = json!(5);
    assert_eq!(refused(an_to_oa(r)), "top_k");
    let mut r = base.clone();
    r["messages"][0]["content"] =
        json!([{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]);
    assert_eq!(refused(an_to_oa(r)), "messages[0].content[0].cache_control");
    let mut r = base.clone();
    r["system"] = json!([{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}]);
    assert_eq!(refused(an_to_oa(r)), "system[0].cache_control");
    let mut r = base.clone();
    // A document is read only as a base64 PDF: a text one is refused by its source.
    r["messages"][0]["content"] = json!([{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]);
    assert_eq!(refused(an_to_oa(r)), "messages[0].content[0].source.type");
    let mut r = base;
    r["tools"] = json!([{"type": "web_search_20250305", "name": "web_search"}]);
    assert_eq!(refused(an_to_oa(r)), "tools[0].type");
}

#[test]
fn x2_malformed_bodies_and_untranslated_pairs() {
    assert!(matches!(
        request(Wire::Chat, Wire::Messages, b"{not json", "m", 1, false),
        Err(TranslateError::Malformed(_))
    ));
    assert!(matches!(
        request(Wire::Chat, Wire::Messages, br#"{"messages": 3}"#, "m", 1, false),
        Err(TranslateError::Malformed(m)) if m.contains("messages")
    ));
    assert_eq!(
        refused(request(Wire::Chat, Wire::Responses, b"{}", "m", 1, false).map(|_| Value::Null)),
        "model"
    );
}

proptest! {
    #[test]
    fn x2_any_openai_text_conversation_becomes_alternating_anthropic_messages(
        msgs in proptest::collection::vec((0..3usize, ".{0,8}"), 0..8),
        temperature in proptest::option::of(0.0..2.0f64),
        max in proptest::option::of(0..5000u64),
    ) {
        let roles = ["system", "user", "assistant"];
        let messages: Vec<Value> = msgs.iter().map(|(r, t)| json!({"role": roles[*r], "content": t})).collect();
        let mut req = json!({"model": "m", "messages": messages});
        if let Some(t) = temperature { req["temperature"] = json!(t); }
        if let Some(m) = max { req["max_tokens"] = json!(m); }
        match oa_to_an(req) {
            Err(TranslateError::Unsupported { .. }) => {}
            Err(e) => prop_assert!(false, "not refused as unsupported: {e:?}"),
            Ok(out) => {
                let out_msgs = out["messages"].as_array().unwrap();
                prop_assert!(!out_msgs.is_empty());
                prop_assert_eq!(&out_msgs[0]["role"], "user");
                for w in out_msgs.windows(2) {
                    prop_assert_ne!(&w[0]["role"], &w[1]["role"]);
                }
                prop_assert!(out["max_tokens"].as_u64().unwrap() >= 1);
            }
        }
    }
}

#[test]
fn x2_pdf_files_cross_as_anthropic_documents_and_back() {
    let pdf = "JVBERi0xLjQK";
    let req = json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Summarise."},
        {"type": "file", "file": {"file_data": format!("data:application/pdf;base64,{pdf}"),
            "filename": "report.pdf"}}
    ]}]});
    let got = oa_to_an(req).unwrap();
    assert_eq!(
        got["messages"][0]["content"][1],
        json!({"type": "document", "title": "report.pdf",
            "source": {"type": "base64", "media_type": "application/pdf", "data": pdf}})
    );
    // And an Anthropic client's document reaches OpenAI as a file part.
    let back = an_to_oa(
        json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user",
        "content": [{"type": "document", "source": {"type": "base64",
            "media_type": "application/pdf", "data": pdf}}]}]}),
    )
    .unwrap();
    assert_eq!(
        back["messages"][0]["content"][0],
        json!({"type": "file", "file": {"file_data": format!("data:application/pdf;base64,{pdf}"),
            "filename": "document.pdf"}})
    );
    // What the other side cannot read is refused, naming it.
    let file = |f: Value| json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "file", "file": f}]}]});
    assert_eq!(
        refused(oa_to_an(file(json!({"file_id": "file-abc"})))),
        "messages[0].content[0].file.file_id"
    );
    assert_eq!(
        refused(oa_to_an(file(
            json!({"file_data": "data:text/csv;base64,YQ=="})
        ))),
        "messages[0].content[0].file.file_data"
    );
    let url_doc = json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user",
        "content": [{"type": "document", "source": {"type": "url", "url": "https://x/y.pdf"}}]}]});
    assert_eq!(
        refused(an_to_oa(url_doc)),
        "messages[0].content[0].source.type"
    );
}
