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
