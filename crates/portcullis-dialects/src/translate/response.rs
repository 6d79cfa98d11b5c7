//! Buffered (non-streamed) answers between Anthropic messages and OpenAI chat
//! completions.
//!
//! **Anthropic → OpenAI** (`chat.completion`): the id becomes `chatcmpl-<id>`,
//! `created` is the current time, text blocks are joined into `content` (null when
//! none), thinking text is joined into `reasoning_content`, and the turn's thinking and
//! redacted thinking blocks ride in the *first* tool call's id (the `__pcx1_` envelope
//! of [`super::request`]) so the next request can give them back with their
//! signatures; a turn without tool calls needs none back. `stop_reason`: end_turn,
//! stop_sequence, pause_turn → stop; max_tokens → length; tool_use → tool_calls;
//! refusal → content_filter. Usage: Anthropic's `input_tokens` excludes cache reads and
//! writes, so `prompt_tokens` adds both and `cached_tokens` is the cache reads.
//! Text citations are dropped (approximated); other block types (server tools,
//! documents) are refused.
//!
//! **OpenAI → Anthropic** (`message`): the id becomes `msg_<id>`; `reasoning_content`
//! is dropped (an Anthropic client requires a signature on every thinking block, which
//! OpenAI does not give); a `refusal` without content becomes the text; tool call
//! arguments are parsed into `input` (arguments that are not a JSON object are a
//! `Malformed` answer). `finish_reason`: stop → end_turn, length → max_tokens,
//! tool_calls / function_call → tool_use, content_filter → refusal. Usage:
//! `input_tokens` is `prompt_tokens` less the cached tokens, which become
//! `cache_read_input_tokens`. More or less than one choice is `Malformed`.
use super::TranslateError;
use super::request::{
    AnBlock, JSON_TOOL, OaFunctionCall, OaToolCall, parse, unsupported, wrap_tool_id,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Serialize, Deserialize)]
struct AnResponse {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    role: String,
    #[serde(default)]
    model: String,
    content: Vec<AnBlock>,
    stop_reason: Option<String>,
    #[serde(default)]
    stop_sequence: Option<String>,
    usage: AnUsage,
}

#[derive(Serialize, Deserialize)]
struct AnUsage {
    input_tokens: u64,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    output_tokens: u64,
}

#[derive(Serialize, Deserialize)]
struct OaResponse {
    id: String,
    object: String,
    #[serde(default)]
    created: u64,
    #[serde(default)]
    model: String,
    choices: Vec<OaChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    usage: Option<OaUsage>,
}

#[derive(Serialize, Deserialize)]
struct OaChoice {
    #[serde(default)]
    index: u32,
    message: OaAnswer,
    finish_reason: Option<String>,
    #[serde(default)]
    logprobs: Option<Value>,
}

#[derive(Serialize, Deserialize)]
struct OaAnswer {
    role: String,
    content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<OaToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct OaUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prompt_tokens_details: Option<OaPromptDetails>,
}

#[derive(Serialize, Deserialize)]
struct OaPromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// An Anthropic messages answer written as an OpenAI chat answer under
/// `public_model`.
pub(crate) fn messages_to_chat(body: &[u8], public_model: &str) -> Result<Vec<u8>, TranslateError> {
    serde_json::to_vec(&to_openai(parse(body)?, public_model, now())?)
        .map_err(|e| TranslateError::Malformed(e.to_string()))
}

/// An OpenAI chat answer written as an Anthropic messages answer under
/// `public_model`.
pub(crate) fn chat_to_messages(body: &[u8], public_model: &str) -> Result<Vec<u8>, TranslateError> {
    serde_json::to_vec(&to_anthropic(parse(body)?, public_model)?)
        .map_err(|e| TranslateError::Malformed(e.to_string()))
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn to_openai(r: AnResponse, model: &str, created: u64) -> Result<OaResponse, TranslateError> {
    let mut text = String::new();
    let mut has_text = false;
    let mut reasoning = String::new();
    let mut has_reasoning = false;
    let mut thinking = Vec::new();
    let mut calls = Vec::new();
    let mut structured = false;
    for (j, b) in r.content.into_iter().enumerate() {
        match b {
            AnBlock::Text { text: t, .. } => {
                text.push_str(&t);
                has_text = true;
            }
            // The structured answer of a `response_format` request (its forced tool).
            AnBlock::ToolUse { name, input, .. } if name == JSON_TOOL => {
                text.push_str(&input.to_string());
                has_text = true;
                structured = true;
            }
            AnBlock::ToolUse {
                id, name, input, ..
            } => calls.push(OaToolCall {
                id,
                kind: "function".into(),
                function: OaFunctionCall {
                    name,
                    arguments: input.to_string(),
                },
            }),
            b @ AnBlock::Thinking { .. } => {
                if let AnBlock::Thinking { thinking: t, .. } = &b {
                    reasoning.push_str(t);
                    has_reasoning = true;
                }
                thinking.push(serde_json::to_value(&b).unwrap_or(Value::Null));
            }
            b @ AnBlock::RedactedThinking { .. } => {
                thinking.push(serde_json::to_value(&b).unwrap_or(Value::Null));
            }
            _ => {
                return Err(unsupported(
                    format!("content[{j}].type"),
                    "this block type is not expressible in OpenAI chat completions",
                ));
            }
        }
    }
    if let Some(first) = calls.first_mut() {
        first.id = wrap_tool_id(&first.id, &thinking);
    }
    let finish = match r.stop_reason.as_deref() {
        Some("max_tokens") => "length",
        Some("tool_use") if structured && calls.is_empty() => "stop",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        _ => "stop",
    };
    let u = r.usage;
    let cached = u.cache_read_input_tokens.unwrap_or(0);
    let prompt = u.input_tokens + cached + u.cache_creation_input_tokens.unwrap_or(0);
    Ok(OaResponse {
        id: format!("chatcmpl-{}", r.id),
        object: "chat.completion".into(),
        created,
        model: model.into(),
        choices: vec![OaChoice {
            index: 0,
            message: OaAnswer {
                role: "assistant".into(),
                content: has_text.then_some(text),
                tool_calls: (!calls.is_empty()).then_some(calls),
                reasoning_content: has_reasoning.then_some(reasoning),
                refusal: None,
            },
            finish_reason: Some(finish.into()),
            logprobs: None,
        }],
        usage: Some(OaUsage {
            prompt_tokens: prompt,
            completion_tokens: u.output_tokens,
            total_tokens: prompt + u.output_tokens,
            prompt_tokens_details: Some(OaPromptDetails {
                cached_tokens: Some(cached),
            }),
        }),
    })
}

fn to_anthropic(r: OaResponse, model: &str) -> Result<AnResponse, TranslateError> {
    let [choice] = <[OaChoice; 1]>::try_from(r.choices).map_err(|v| {
        TranslateError::Malformed(format!("the answer has {} choices, not one", v.len()))
    })?;
    let m = choice.message;
    let mut content = Vec::new();
    match (m.content, m.refusal) {
        (Some(t), _) if !t.is_empty() => content.push(AnBlock::text(t)),
        (_, Some(refusal)) if !refusal.is_empty() => content.push(AnBlock::text(refusal)),
        _ => {}
    }
    for (k, call) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
        let args = call.function.arguments.trim();
        let input: Value = if args.is_empty() {
            Value::Object(serde_json::Map::new())
        } else {
            serde_json::from_str(args).map_err(|e| {
                TranslateError::Malformed(format!(
                    "choices[0].message.tool_calls[{k}].function.arguments is not JSON: {e}"
                ))
            })?
        };
        if !input.is_object() {
            return Err(TranslateError::Malformed(format!(
                "choices[0].message.tool_calls[{k}].function.arguments is not a JSON object"
            )));
        }
        content.push(AnBlock::ToolUse {
            id: call.id,
            name: call.function.name,
            input,
            extra: serde_json::Map::new(),
        });
    }
    let stop = match choice.finish_reason.as_deref() {
        Some("length") => "max_tokens",
        Some("tool_calls" | "function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    };
    let (prompt, completion, cached) = r.usage.map_or((0, 0, 0), |u| {
        let cached = u
            .prompt_tokens_details
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0);
        (u.prompt_tokens, u.completion_tokens, cached)
    });
    Ok(AnResponse {
        id: format!("msg_{}", r.id),
        kind: "message".into(),
        role: "assistant".into(),
        model: model.into(),
        content,
        stop_reason: Some(stop.into()),
        stop_sequence: None,
        usage: AnUsage {
            input_tokens: prompt.saturating_sub(cached),
            cache_creation_input_tokens: Some(0),
            cache_read_input_tokens: Some(cached),
            output_tokens: completion,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::request::unwrap_tool_id;
    use crate::translate::{Wire, response};
    use serde_json::json;

    fn an_to_oa(body: Value) -> Value {
        serde_json::to_value(
            to_openai(serde_json::from_value(body).unwrap(), "pub", 1_700_000_000).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn x2_the_forced_tools_input_is_the_structured_answers_text() {
        let v = an_to_oa(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": JSON_TOOL,
                "input": {"city": "Paris"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5}
        }));
        let m = &v["choices"][0]["message"];
        assert_eq!(m["content"], json!(r#"{"city":"Paris"}"#), "{v}");
        assert!(m.get("tool_calls").is_none_or(Value::is_null), "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
    }

    fn oa_to_an(body: Value) -> Result<Value, TranslateError> {
        let out = response(
            Wire::Chat,
            Wire::Messages,
            body.to_string().as_bytes(),
            "pub",
        )?;
        Ok(serde_json::from_slice(&out).unwrap())
    }

    #[test]
    fn x2_anthropic_tool_use_answer_becomes_an_openai_completion() {
        // Anthropic's tool use example answer.
        let got = an_to_oa(json!({
            "id": "msg_01Aq9w938a90dw8q", "type": "message", "role": "assistant", "model": "claude-opus-4-1",
            "content": [
                {"type": "text", "text": "<thinking>I need to call the get_weather function.</thinking>"},
                {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather", "input": {"location": "San Francisco, CA", "unit": "celsius"}}
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 20}
        }));
        assert_eq!(
            got,
            json!({
                "id": "chatcmpl-msg_01Aq9w938a90dw8q",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": "pub",
                "choices": [{
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "<thinking>I need to call the get_weather function.</thinking>",
                        "tool_calls": [{"id": "toolu_01A09q90qw90lq917835lq9", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"San Francisco, CA\",\"unit\":\"celsius\"}"}}],
                        "refusal": null
                    },
                    "finish_reason": "tool_calls",
                    "logprobs": null
                }],
                "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30, "prompt_tokens_details": {"cached_tokens": 0}}
            })
        );
    }

    #[test]
    fn x2_cached_tokens_map_not_copy() {
        let got = an_to_oa(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": "Hi"}], "stop_reason": "max_tokens",
            "usage": {"input_tokens": 100, "cache_read_input_tokens": 900, "cache_creation_input_tokens": 50, "output_tokens": 7}
        }));
        assert_eq!(
            got["usage"],
            json!({"prompt_tokens": 1050, "completion_tokens": 7, "total_tokens": 1057, "prompt_tokens_details": {"cached_tokens": 900}})
        );
        assert_eq!(got["choices"][0]["finish_reason"], json!("length"));
        let back = oa_to_an(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1050, "completion_tokens": 7, "total_tokens": 1057, "prompt_tokens_details": {"cached_tokens": 900}}
        }))
        .unwrap();
        assert_eq!(
            back,
            json!({
                "id": "msg_chatcmpl-1", "type": "message", "role": "assistant", "model": "pub",
                "content": [{"type": "text", "text": "Hi"}],
                "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": 150, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 900, "output_tokens": 7}
            })
        );
    }

    #[test]
    fn x2_thinking_signature_round_trips_through_the_tool_call_id() {
        let thinking = json!({"type": "thinking", "thinking": "Check the weather.", "signature": "EqQBCgIYAhIM"});
        let redacted = json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy"});
        let got = an_to_oa(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [thinking, redacted, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
                        {"type": "tool_use", "id": "toolu_2", "name": "f", "input": {}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}
        }));
        let msg = &got["choices"][0]["message"];
        assert_eq!(msg["reasoning_content"], json!("Check the weather."));
        assert_eq!(msg["content"], Value::Null);
        let id = msg["tool_calls"][0]["id"].as_str().unwrap();
        assert_eq!(
            unwrap_tool_id(id),
            ("toolu_1".into(), Some(vec![thinking, redacted]))
        );
        assert_eq!(msg["tool_calls"][1]["id"], json!("toolu_2"));
    }

    #[test]
    fn x2_openai_tool_calls_become_anthropic_tool_use() {
        let got = oa_to_an(json!({
            "id": "chatcmpl-abc", "object": "chat.completion", "created": 1, "model": "gpt-4.1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "reasoning_content": "hmm",
                "tool_calls": [{"id": "call_abc", "type": "function", "function": {"name": "get_current_weather", "arguments": "{\"location\": \"Boston, MA\"}"}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99}
        }))
        .unwrap();
        assert_eq!(
            got["content"],
            json!([{"type": "tool_use", "id": "call_abc", "name": "get_current_weather", "input": {"location": "Boston, MA"}}])
        );
        assert_eq!(got["stop_reason"], json!("tool_use"));
        assert_eq!(got["usage"]["input_tokens"], json!(82));
    }

    #[test]
    fn x2_choices_other_than_one_and_bad_arguments_are_malformed() {
        let two = json!({"id": "x", "object": "chat.completion", "created": 1, "model": "g", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "a"}, "finish_reason": "stop"},
            {"index": 1, "message": {"role": "assistant", "content": "b"}, "finish_reason": "stop"}]});
        assert!(matches!(oa_to_an(two), Err(TranslateError::Malformed(_))));
        let bad = json!({"id": "x", "object": "chat.completion", "created": 1, "model": "g", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}, "finish_reason": "tool_calls"}]});
        assert!(matches!(oa_to_an(bad), Err(TranslateError::Malformed(_))));
        assert!(matches!(
            response(Wire::Responses, Wire::Chat, b"{}", "pub"),
            Err(TranslateError::Unsupported { field, .. }) if field == "model"
        ));
    }
}
