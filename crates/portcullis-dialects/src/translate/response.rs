//! Buffered (non-streamed) answers from one dialect to another (X2): an Anthropic
//! message as an OpenAI `chat.completion`, and the reverse, under the public model name.
//!
//! Usage is mapped by meaning: Anthropic `input_tokens` excludes cache reads and writes,
//! OpenAI `prompt_tokens` includes them (`cached_tokens` = cache reads). Thinking text
//! goes to the OpenAI message's `reasoning_content`, and the thinking blocks with their
//! signatures ride in the first tool call's id ([`super::request::wrap_tool_id`]). An
//! OpenAI answer's `reasoning_content` gives no Anthropic thinking block (Anthropic
//! clients need a signature OpenAI does not give); only a single choice translates.
use super::TranslateError;
use portcullis_core::Dialect;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// `body`, a successful non-streamed answer in dialect `from`, written in dialect `to`
/// under the public model name `public_model`.
pub fn response(
    from: Dialect,
    to: Dialect,
    body: &[u8],
    public_model: &str,
) -> Result<Vec<u8>, TranslateError> {
    let v = match (from, to) {
        (Dialect::Anthropic, Dialect::OpenAi) => anthropic_to_openai(parse(body)?, public_model),
        (Dialect::OpenAi, Dialect::Anthropic) => openai_to_anthropic(parse(body)?, public_model)?,
        _ => {
            return Err(TranslateError::Unsupported {
                field: "model".into(),
                why: format!("answers of {from:?} are not translated for {to:?} clients"),
            });
        }
    };
    Ok(v.to_string().into_bytes())
}

fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, TranslateError> {
    serde_json::from_slice(body)
        .map_err(|e| TranslateError::Malformed(format!("the provider's answer: {e}")))
}

#[derive(Deserialize)]
struct AMessage {
    #[serde(default)]
    id: String,
    #[serde(default)]
    content: Vec<Value>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: AUsage,
}

#[derive(Deserialize, Default)]
struct AUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: u64,
    #[serde(default)]
    cache_creation_input_tokens: u64,
}

/// An Anthropic stop reason as OpenAI's finish reason.
pub(super) fn finish_reason(stop: Option<&str>) -> &'static str {
    match stop {
        Some("max_tokens") | Some("model_context_window_exceeded") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        _ => "stop",
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn anthropic_to_openai(m: AMessage, model: &str) -> Value {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut thinking: Vec<Value> = Vec::new();
    let mut calls: Vec<Value> = Vec::new();
    for block in &m.content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("thinking") => {
                reasoning.push_str(block["thinking"].as_str().unwrap_or_default());
                thinking.push(block.clone());
            }
            Some("redacted_thinking") => thinking.push(block.clone()),
            Some("tool_use") => {
                let id = block["id"].as_str().unwrap_or_default();
                let id = if calls.is_empty() && !thinking.is_empty() {
                    super::request::wrap_tool_id(id, &thinking)
                } else {
                    id.to_owned()
                };
                calls.push(json!({
                    "id": id,
                    "type": "function",
                    "function": {
                        "name": block["name"],
                        "arguments": block.get("input").map_or_else(|| "{}".to_owned(), Value::to_string),
                    }
                }));
            }
            _ => {}
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert(
        "content".into(),
        if text.is_empty() && !calls.is_empty() {
            Value::Null
        } else {
            json!(text)
        },
    );
    if !reasoning.is_empty() {
        message.insert("reasoning_content".into(), json!(reasoning));
    }
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    let u = &m.usage;
    let prompt = u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;
    json!({
        "id": format!("chatcmpl-{}", m.id),
        "object": "chat.completion",
        "created": unix_now(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": finish_reason(m.stop_reason.as_deref()),
            "logprobs": null,
        }],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": u.output_tokens,
            "total_tokens": prompt + u.output_tokens,
            "prompt_tokens_details": {"cached_tokens": u.cache_read_input_tokens},
        },
    })
}

#[derive(Deserialize)]
struct OCompletion {
    #[serde(default)]
    id: String,
    choices: Vec<OChoice>,
    #[serde(default)]
    usage: Option<OUsage>,
}

#[derive(Deserialize)]
struct OChoice {
    message: OMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct OMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Vec<OToolCall>,
}

#[derive(Deserialize)]
struct OToolCall {
    id: String,
    function: OFunction,
}

#[derive(Deserialize)]
struct OFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

#[derive(Deserialize, Default)]
struct OUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<ODetails>,
}

#[derive(Deserialize, Default)]
struct ODetails {
    #[serde(default)]
    cached_tokens: u64,
}

/// An OpenAI finish reason as Anthropic's stop reason.
pub(super) fn stop_reason(finish: Option<&str>) -> &'static str {
    match finish {
        Some("length") => "max_tokens",
        Some("tool_calls") | Some("function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

fn openai_to_anthropic(c: OCompletion, model: &str) -> Result<Value, TranslateError> {
    let [choice] = <[OChoice; 1]>::try_from(c.choices).map_err(|v| {
        TranslateError::Malformed(format!(
            "the provider answered {} choices, not one",
            v.len()
        ))
    })?;
    let mut content = Vec::new();
    let text = choice.message.content.or(choice.message.refusal);
    if let Some(t) = text.filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": t}));
    }
    for call in choice.message.tool_calls {
        let input: Value = if call.function.arguments.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str(&call.function.arguments).map_err(|e| {
                TranslateError::Malformed(format!("a tool call's arguments are not JSON: {e}"))
            })?
        };
        content.push(
            json!({"type": "tool_use", "id": call.id, "name": call.function.name, "input": input}),
        );
    }
    let u = c.usage.unwrap_or_default();
    let cached = u.prompt_tokens_details.map_or(0, |d| d.cached_tokens);
    Ok(json!({
        "id": if c.id.starts_with("msg_") { c.id } else { format!("msg_{}", c.id) },
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(choice.finish_reason.as_deref()),
        "stop_sequence": null,
        "usage": {
            "input_tokens": u.prompt_tokens.saturating_sub(cached),
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
            "output_tokens": u.completion_tokens,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn translate(from: Dialect, to: Dialect, v: Value) -> Value {
        let out = response(from, to, v.to_string().as_bytes(), "public").unwrap();
        let mut got: Value = serde_json::from_slice(&out).unwrap();
        got.as_object_mut().unwrap().remove("created");
        got
    }

    /// Anthropic's documented tool-use answer with thinking and cache reads.
    #[test]
    fn x2_an_anthropic_answer_becomes_a_chat_completion() {
        let got = translate(
            Dialect::Anthropic,
            Dialect::OpenAi,
            json!({
                "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                "content": [
                    {"type": "thinking", "thinking": "Need the tool.", "signature": "sig1"},
                    {"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"location": "SF"}},
                    {"type": "tool_use", "id": "toolu_02", "name": "get_time", "input": {}}
                ],
                "stop_reason": "tool_use", "stop_sequence": null,
                "usage": {"input_tokens": 10, "cache_read_input_tokens": 500, "cache_creation_input_tokens": 20, "output_tokens": 42}
            }),
        );
        let first_id = super::super::request::wrap_tool_id(
            "toolu_01",
            &[json!({"type": "thinking", "thinking": "Need the tool.", "signature": "sig1"})],
        );
        assert_eq!(
            got,
            json!({
                "id": "chatcmpl-msg_01",
                "object": "chat.completion",
                "model": "public",
                "choices": [{
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "Let me check.",
                        "reasoning_content": "Need the tool.",
                        "tool_calls": [
                            {"id": first_id, "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"SF\"}"}},
                            {"id": "toolu_02", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
                        ]
                    },
                    "finish_reason": "tool_calls",
                    "logprobs": null
                }],
                // X2: prompt_tokens includes the cache reads and writes Anthropic's
                // input_tokens leaves out.
                "usage": {"prompt_tokens": 530, "completion_tokens": 42, "total_tokens": 572,
                          "prompt_tokens_details": {"cached_tokens": 500}}
            })
        );
    }

    #[test]
    fn x2_stop_reasons_map_both_ways() {
        for (anthropic, openai) in [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("max_tokens", "length"),
            ("tool_use", "tool_calls"),
            ("refusal", "content_filter"),
        ] {
            assert_eq!(finish_reason(Some(anthropic)), openai);
        }
        for (openai, anthropic) in [
            ("stop", "end_turn"),
            ("length", "max_tokens"),
            ("tool_calls", "tool_use"),
            ("content_filter", "refusal"),
        ] {
            assert_eq!(stop_reason(Some(openai)), anthropic);
        }
    }

    /// OpenAI's documented chat completion with a tool call and cached prompt tokens.
    #[test]
    fn x2_a_chat_completion_becomes_an_anthropic_message() {
        let got = translate(
            Dialect::OpenAi,
            Dialect::Anthropic,
            json!({
                "id": "chatcmpl-abc", "object": "chat.completion", "created": 1, "model": "gpt-4.1",
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": "Sure.",
                    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Boston\"}"}}]
                }}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 9, "total_tokens": 109, "prompt_tokens_details": {"cached_tokens": 64}}
            }),
        );
        assert_eq!(
            got,
            json!({
                "id": "msg_chatcmpl-abc", "type": "message", "role": "assistant", "model": "public",
                "content": [
                    {"type": "text", "text": "Sure."},
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"location": "Boston"}}
                ],
                "stop_reason": "tool_use", "stop_sequence": null,
                "usage": {"input_tokens": 36, "cache_read_input_tokens": 64, "cache_creation_input_tokens": 0, "output_tokens": 9}
            })
        );
    }

    #[test]
    fn x2_an_answer_that_cannot_be_read_is_an_error_not_a_guess() {
        let two = json!({"choices": [
            {"message": {"content": "a"}, "finish_reason": "stop"},
            {"message": {"content": "b"}, "finish_reason": "stop"}
        ]});
        assert!(matches!(
            response(
                Dialect::OpenAi,
                Dialect::Anthropic,
                two.to_string().as_bytes(),
                "m"
            ),
            Err(TranslateError::Malformed(_))
        ));
        let bad_args = json!({"choices": [{"message": {"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{oops"}}]}}]});
        assert!(
            response(
                Dialect::OpenAi,
                Dialect::Anthropic,
                bad_args.to_string().as_bytes(),
                "m"
            )
            .is_err()
        );
        assert!(response(Dialect::Anthropic, Dialect::OpenAi, b"<html>", "m").is_err());
    }
}
