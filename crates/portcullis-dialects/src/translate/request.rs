//! Generation requests from one dialect to another (X1, X2): OpenAI chat completions
//! as Anthropic messages and the reverse, parsed once into typed structures.
//!
//! Translated both ways: system and developer prompts, multi-turn history, text and
//! image parts (URL and base64), tools with their schemas, `tool_choice`,
//! `parallel_tool_calls` ↔ `disable_parallel_tool_use`, tool calls and tool results,
//! `max_tokens` / `max_completion_tokens` (an Anthropic request always gets one),
//! `temperature`, `top_p`, `stop` ↔ `stop_sequences`, `stream`, `user` ↔
//! `metadata.user_id`, `reasoning_effort` ↔ `thinking` (low 1,024, medium 4,096, high
//! 16,384 budget tokens; a budget maps back to the nearest effort).
//!
//! Refused with the field named (never dropped) — to Anthropic: `n` above 1,
//! `logprobs`, `top_logprobs`, `logit_bias`, non-zero penalties, `seed`, `audio`,
//! non-text `modalities`, `response_format` other than text, `prediction`, `functions`,
//! content parts other than text and images, roles other than system, developer, user,
//! assistant and tool; to OpenAI: `top_k`, `cache_control`, document and other block
//! types, `container`, `mcp_servers`. Ignored because they change nothing a provider
//! computes: OpenAI `store`, `metadata`, `service_tier`, `stream_options` (the gateway
//! asks for stream usage itself); Anthropic `service_tier`.
//!
//! Approximated: an OpenAI turn with empty content is left out (Anthropic refuses
//! empty turns; its neighbours of the same role merge); an OpenAI assistant message's
//! `reasoning_content` is not sent back (Anthropic takes thinking only with its
//! signature, which comes back through the tool-call id); thinking blocks of an earlier
//! Anthropic turn sent to OpenAI are left out (they mean nothing to another model).
//!
//! Thinking blocks of an Anthropic answer come back inside the client's first tool-call
//! id ([`wrap_tool_id`]) and are restored in front of that assistant turn.
use super::TranslateError;
use portcullis_core::Dialect;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// Marks the envelope of thinking blocks inside a tool-call id (characters Anthropic's
/// id pattern `[a-zA-Z0-9_-]` allows, so the id stays valid everywhere).
const ENVELOPE: &str = "__pcx1_";

/// `id` carrying the thinking `blocks` of the answer it came in (base64url of their
/// JSON), for the client to echo back.
pub(crate) fn wrap_tool_id(id: &str, blocks: &[Value]) -> String {
    use base64::Engine;
    let json = Value::Array(blocks.to_vec()).to_string();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json);
    format!("{id}{ENVELOPE}{b64}")
}

/// The provider's own id and the thinking blocks an id carries, if any.
pub(crate) fn unwrap_tool_id(id: &str) -> (String, Option<Vec<Value>>) {
    use base64::Engine;
    let Some((own, b64)) = id.split_once(ENVELOPE) else {
        return (id.to_owned(), None);
    };
    let blocks = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(b64)
        .ok()
        .and_then(|b| serde_json::from_slice::<Vec<Value>>(&b).ok());
    (own.to_owned(), blocks)
}

/// `body`, a generation request of dialect `from`, written in dialect `to` for model
/// `upstream_model`; `default_max_tokens` where `to` requires a maximum the client
/// did not give.
pub fn request(
    from: Dialect,
    to: Dialect,
    body: &[u8],
    upstream_model: &str,
    default_max_tokens: u64,
) -> Result<Vec<u8>, TranslateError> {
    let v = match (from, to) {
        (Dialect::OpenAi, Dialect::Anthropic) => {
            openai_to_anthropic(parse(body)?, upstream_model, default_max_tokens)?
        }
        (Dialect::Anthropic, Dialect::OpenAi) => anthropic_to_openai(parse(body)?, upstream_model)?,
        _ => {
            return Err(TranslateError::Unsupported {
                field: "model".into(),
                why: format!("requests of {from:?} are not translated for {to:?} channels"),
            });
        }
    };
    Ok(v.to_string().into_bytes())
}

fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, TranslateError> {
    serde_json::from_slice(body).map_err(|e| TranslateError::Malformed(format!("{e}")))
}

fn refuse(field: impl Into<String>, why: impl Into<String>) -> TranslateError {
    TranslateError::Unsupported {
        field: field.into(),
        why: why.into(),
    }
}

// --- OpenAI chat completions → Anthropic messages ------------------------------------

#[derive(Deserialize)]
struct OpenAiRequest {
    messages: Vec<OMessage>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    stop: Option<Stop>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    tools: Option<Vec<OTool>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    reasoning_effort: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    n: Option<u64>,
    #[serde(default)]
    response_format: Option<Value>,
    #[serde(default)]
    presence_penalty: Option<f64>,
    #[serde(default)]
    frequency_penalty: Option<f64>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct OMessage {
    role: String,
    #[serde(default)]
    content: Option<OContent>,
    #[serde(default)]
    tool_calls: Vec<OToolCall>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OContent {
    Text(String),
    Parts(Vec<Value>),
}

#[derive(Deserialize)]
struct OToolCall {
    id: String,
    function: OFunctionCall,
}

#[derive(Deserialize)]
struct OFunctionCall {
    name: String,
    #[serde(default)]
    arguments: String,
}

#[derive(Deserialize)]
struct OTool {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    function: OFunction,
}

#[derive(Deserialize)]
struct OFunction {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
}

/// OpenAI fields that change nothing a provider computes: ignored.
const OPENAI_IGNORED: [&str; 5] = [
    "model",
    "store",
    "metadata",
    "service_tier",
    "stream_options",
];

/// Thinking budget per reasoning effort.
fn budget_of(effort: &str) -> Option<u64> {
    match effort {
        "minimal" | "low" => Some(1024),
        "medium" => Some(4096),
        "high" => Some(16384),
        _ => None,
    }
}

fn openai_to_anthropic(
    r: OpenAiRequest,
    model: &str,
    default_max: u64,
) -> Result<Value, TranslateError> {
    if let Some(field) = r
        .rest
        .keys()
        .find(|k| !OPENAI_IGNORED.contains(&k.as_str()))
    {
        return Err(refuse(
            field.clone(),
            "Anthropic's messages API has no equivalent",
        ));
    }
    if r.n.is_some_and(|n| n > 1) {
        return Err(refuse("n", "Anthropic answers one choice per request"));
    }
    if r.presence_penalty.is_some_and(|p| p != 0.0) {
        return Err(refuse("presence_penalty", "Anthropic has no penalties"));
    }
    if r.frequency_penalty.is_some_and(|p| p != 0.0) {
        return Err(refuse("frequency_penalty", "Anthropic has no penalties"));
    }
    if let Some(f) = &r.response_format {
        if f.get("type").and_then(Value::as_str) != Some("text") {
            return Err(refuse(
                "response_format",
                "structured output is not translated to Anthropic",
            ));
        }
    }
    let mut system: Vec<Value> = Vec::new();
    let mut messages: Vec<(String, Vec<Value>)> = Vec::new();
    // An empty turn carries nothing and Anthropic refuses it: it is left out (its
    // neighbours of the same role then merge).
    let mut push = |role: &str, blocks: Vec<Value>| match messages.last_mut() {
        _ if blocks.is_empty() => {}
        Some((r, b)) if r == role => b.extend(blocks),
        _ => messages.push((role.to_owned(), blocks)),
    };
    for (i, m) in r.messages.into_iter().enumerate() {
        let at = |j: usize| format!("messages[{i}].content[{j}]");
        match m.role.as_str() {
            "system" | "developer" => {
                for (j, b) in content_blocks(m.content, &at)?.into_iter().enumerate() {
                    if b["type"] != "text" {
                        return Err(refuse(at(j), "a system prompt is text only"));
                    }
                    system.push(b);
                }
            }
            "user" => push("user", content_blocks(m.content, &at)?),
            "assistant" => {
                let mut blocks = Vec::new();
                let mut text = content_blocks(m.content, &at)?;
                for (j, call) in m.tool_calls.into_iter().enumerate() {
                    let (id, thinking) = unwrap_tool_id(&call.id);
                    if let Some(t) = thinking {
                        blocks.extend(t);
                    }
                    let input: Value = if call.function.arguments.trim().is_empty() {
                        json!({})
                    } else {
                        serde_json::from_str(&call.function.arguments).map_err(|e| {
                            TranslateError::Malformed(format!(
                                "messages[{i}].tool_calls[{j}].function.arguments is not JSON: {e}"
                            ))
                        })?
                    };
                    text.push(json!({"type": "tool_use", "id": id, "name": call.function.name, "input": input}));
                }
                blocks.append(&mut text);
                push("assistant", blocks);
            }
            "tool" => {
                let id = m.tool_call_id.ok_or_else(|| {
                    TranslateError::Malformed(format!("messages[{i}].tool_call_id is missing"))
                })?;
                let (id, _) = unwrap_tool_id(&id);
                let content = content_blocks(m.content, &at)?;
                push(
                    "user",
                    vec![json!({"type": "tool_result", "tool_use_id": id, "content": content})],
                );
            }
            other => {
                return Err(refuse(
                    format!("messages[{i}].role"),
                    format!("the role `{other}` has no Anthropic equivalent"),
                ));
            }
        }
    }
    if messages.is_empty() {
        return Err(refuse(
            "messages",
            "Anthropic needs at least one turn with content",
        ));
    }
    if messages.first().is_some_and(|(role, _)| role != "user") {
        return Err(refuse(
            "messages[0].role",
            "Anthropic requires the conversation to start with a user message",
        ));
    }
    let mut out = Map::new();
    out.insert("model".into(), json!(model));
    let mut max = r
        .max_completion_tokens
        .or(r.max_tokens)
        .unwrap_or(default_max)
        .max(1);
    if let Some(effort) = &r.reasoning_effort {
        let budget = budget_of(effort)
            .ok_or_else(|| refuse("reasoning_effort", format!("unknown effort `{effort}`")))?;
        // Anthropic's output bound includes the thinking budget.
        if max <= budget {
            max = budget + default_max.max(1);
        }
        out.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    out.insert("max_tokens".into(), json!(max));
    out.insert(
        "messages".into(),
        Value::Array(
            messages
                .into_iter()
                .map(|(role, content)| json!({"role": role, "content": content}))
                .collect(),
        ),
    );
    if !system.is_empty() {
        out.insert("system".into(), Value::Array(system));
    }
    if let Some(t) = r.temperature {
        out.insert("temperature".into(), json!(t));
    }
    if let Some(p) = r.top_p {
        out.insert("top_p".into(), json!(p));
    }
    match r.stop {
        Some(Stop::One(s)) => {
            out.insert("stop_sequences".into(), json!([s]));
        }
        Some(Stop::Many(v)) if !v.is_empty() => {
            out.insert("stop_sequences".into(), json!(v));
        }
        _ => {}
    }
    if let Some(s) = r.stream {
        out.insert("stream".into(), json!(s));
    }
    if let Some(u) = r.user {
        out.insert("metadata".into(), json!({"user_id": u}));
    }
    if let Some(tools) = r.tools {
        let mut list = Vec::new();
        for (i, t) in tools.into_iter().enumerate() {
            if t.kind.as_deref().is_some_and(|k| k != "function") {
                return Err(refuse(
                    format!("tools[{i}].type"),
                    "only function tools translate",
                ));
            }
            let mut tool = Map::new();
            tool.insert("name".into(), json!(t.function.name));
            if let Some(d) = t.function.description {
                tool.insert("description".into(), json!(d));
            }
            tool.insert(
                "input_schema".into(),
                t.function
                    .parameters
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            );
            list.push(Value::Object(tool));
        }
        out.insert("tools".into(), Value::Array(list));
    }
    let mut choice = match r.tool_choice {
        None => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "auto" => json!({"type": "auto"}),
            "none" => json!({"type": "none"}),
            "required" => json!({"type": "any"}),
            other => return Err(refuse("tool_choice", format!("unknown choice `{other}`"))),
        }),
        Some(v) => {
            let name = v["function"]["name"].as_str().ok_or_else(|| {
                TranslateError::Malformed("tool_choice.function.name is missing".into())
            })?;
            Some(json!({"type": "tool", "name": name}))
        }
    };
    if r.parallel_tool_calls == Some(false) {
        let c = choice.get_or_insert_with(|| json!({"type": "auto"}));
        if c["type"] != "none" {
            c["disable_parallel_tool_use"] = json!(true);
        }
    }
    if let Some(c) = choice {
        out.insert("tool_choice".into(), c);
    }
    Ok(Value::Object(out))
}

/// An OpenAI message content as Anthropic blocks.
fn content_blocks(
    content: Option<OContent>,
    at: &dyn Fn(usize) -> String,
) -> Result<Vec<Value>, TranslateError> {
    let parts = match content {
        None => return Ok(Vec::new()),
        Some(OContent::Text(t)) if t.is_empty() => return Ok(Vec::new()),
        Some(OContent::Text(t)) => return Ok(vec![json!({"type": "text", "text": t})]),
        Some(OContent::Parts(p)) => p,
    };
    let mut blocks = Vec::new();
    for (j, p) in parts.into_iter().enumerate() {
        match p.get("type").and_then(Value::as_str) {
            Some("text") => blocks.push(json!({"type": "text", "text": p["text"]})),
            Some("image_url") => {
                let url = p["image_url"]["url"].as_str().ok_or_else(|| {
                    TranslateError::Malformed(format!("{}.image_url.url is missing", at(j)))
                })?;
                blocks.push(image_block(url));
            }
            other => {
                return Err(refuse(
                    format!("{}.type", at(j)),
                    format!(
                        "a `{}` part has no Anthropic equivalent",
                        other.unwrap_or("?")
                    ),
                ));
            }
        }
    }
    Ok(blocks)
}

/// An image URL (http(s) or `data:<mime>;base64,…`) as an Anthropic image block.
fn image_block(url: &str) -> Value {
    if let Some(rest) = url.strip_prefix("data:") {
        if let Some((mime, data)) = rest.split_once(";base64,") {
            return json!({"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}});
        }
    }
    json!({"type": "image", "source": {"type": "url", "url": url}})
}

// --- Anthropic messages → OpenAI chat completions ------------------------------------

#[derive(Deserialize)]
struct AnthropicRequest {
    messages: Vec<AMessage>,
    max_tokens: u64,
    #[serde(default)]
    system: Option<ASystem>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    thinking: Option<Value>,
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ASystem {
    Text(String),
    Blocks(Vec<Value>),
}

#[derive(Deserialize)]
struct AMessage {
    role: String,
    content: AContent,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum AContent {
    Text(String),
    Blocks(Vec<Value>),
}

const ANTHROPIC_IGNORED: [&str; 2] = ["model", "service_tier"];

fn anthropic_to_openai(r: AnthropicRequest, model: &str) -> Result<Value, TranslateError> {
    if let Some(field) = r
        .rest
        .keys()
        .find(|k| !ANTHROPIC_IGNORED.contains(&k.as_str()))
    {
        return Err(refuse(
            field.clone(),
            "OpenAI chat completions have no equivalent",
        ));
    }
    let mut messages: Vec<Value> = Vec::new();
    match r.system {
        Some(ASystem::Text(t)) => messages.push(json!({"role": "system", "content": t})),
        Some(ASystem::Blocks(bs)) => {
            let mut text = String::new();
            for (j, b) in bs.iter().enumerate() {
                no_cache_control(b, &format!("system[{j}]"))?;
                if b["type"] != "text" {
                    return Err(refuse(
                        format!("system[{j}].type"),
                        "a system prompt is text only",
                    ));
                }
                text.push_str(b["text"].as_str().unwrap_or_default());
            }
            messages.push(json!({"role": "system", "content": text}));
        }
        None => {}
    }
    for (i, m) in r.messages.into_iter().enumerate() {
        let blocks = match m.content {
            AContent::Text(t) => vec![json!({"type": "text", "text": t})],
            AContent::Blocks(b) => b,
        };
        let mut parts = Vec::new();
        let mut calls = Vec::new();
        for (j, b) in blocks.into_iter().enumerate() {
            let at = format!("messages[{i}].content[{j}]");
            no_cache_control(&b, &at)?;
            match b.get("type").and_then(Value::as_str) {
                Some("text") => parts.push(json!({"type": "text", "text": b["text"]})),
                Some("image") => parts.push(image_part(&b["source"], &at)?),
                Some("tool_use") => calls.push(json!({
                    "id": b["id"],
                    "type": "function",
                    "function": {"name": b["name"], "arguments": b.get("input").map_or_else(|| "{}".to_owned(), Value::to_string)},
                })),
                Some("tool_result") => {
                    // A tool result is its own OpenAI message.
                    let content = match &b["content"] {
                        Value::String(s) => s.clone(),
                        Value::Array(items) => items
                            .iter()
                            .filter_map(|x| x["text"].as_str())
                            .collect::<Vec<_>>()
                            .join(""),
                        _ => String::new(),
                    };
                    messages.push(json!({"role": "tool", "tool_call_id": b["tool_use_id"], "content": content}));
                }
                // Thinking an earlier Anthropic turn made means nothing to OpenAI.
                Some("thinking") | Some("redacted_thinking") => {}
                other => {
                    return Err(refuse(
                        format!("{at}.type"),
                        format!("a `{}` block has no OpenAI equivalent", other.unwrap_or("?")),
                    ));
                }
            }
        }
        match m.role.as_str() {
            "user" if !parts.is_empty() => messages.push(json!({"role": "user", "content": parts})),
            "user" => {}
            "assistant" => {
                let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
                let mut msg = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) }});
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                }
                messages.push(msg);
            }
            other => {
                return Err(refuse(
                    format!("messages[{i}].role"),
                    format!("the role `{other}` is not an Anthropic role"),
                ));
            }
        }
    }
    let mut out = Map::new();
    out.insert("model".into(), json!(model));
    out.insert("messages".into(), Value::Array(messages));
    out.insert("max_completion_tokens".into(), json!(r.max_tokens));
    if let Some(t) = r.temperature {
        out.insert("temperature".into(), json!(t));
    }
    if let Some(p) = r.top_p {
        out.insert("top_p".into(), json!(p));
    }
    if let Some(s) = r.stop_sequences.filter(|s| !s.is_empty()) {
        out.insert("stop".into(), json!(s));
    }
    if r.stream == Some(true) {
        out.insert("stream".into(), json!(true));
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(u) = r.metadata.as_ref().and_then(|m| m["user_id"].as_str()) {
        out.insert("user".into(), json!(u));
    }
    if let Some(t) = &r.thinking {
        if t["type"] == "enabled" {
            let budget = t["budget_tokens"].as_u64().unwrap_or(0);
            let effort = match budget {
                0..=2047 => "low",
                2048..=8191 => "medium",
                _ => "high",
            };
            out.insert("reasoning_effort".into(), json!(effort));
        }
    }
    if let Some(tools) = r.tools {
        let mut list = Vec::new();
        for (i, t) in tools.into_iter().enumerate() {
            no_cache_control(&t, &format!("tools[{i}]"))?;
            if t.get("type")
                .and_then(Value::as_str)
                .is_some_and(|k| k != "custom")
            {
                return Err(refuse(
                    format!("tools[{i}].type"),
                    "only client tools translate to OpenAI",
                ));
            }
            let mut f = Map::new();
            f.insert("name".into(), t["name"].clone());
            if let Some(d) = t.get("description") {
                f.insert("description".into(), d.clone());
            }
            f.insert("parameters".into(), t["input_schema"].clone());
            list.push(json!({"type": "function", "function": f}));
        }
        out.insert("tools".into(), Value::Array(list));
    }
    if let Some(c) = r.tool_choice {
        let choice = match c["type"].as_str() {
            Some("auto") => json!("auto"),
            Some("none") => json!("none"),
            Some("any") => json!("required"),
            Some("tool") => json!({"type": "function", "function": {"name": c["name"]}}),
            _ => return Err(refuse("tool_choice.type", "unknown tool choice")),
        };
        if c["disable_parallel_tool_use"] == true {
            out.insert("parallel_tool_calls".into(), json!(false));
        }
        out.insert("tool_choice".into(), choice);
    }
    Ok(Value::Object(out))
}

fn no_cache_control(block: &Value, at: &str) -> Result<(), TranslateError> {
    if block.get("cache_control").is_some() {
        return Err(refuse(
            format!("{at}.cache_control"),
            "OpenAI caches prompts by itself and takes no cache breakpoints",
        ));
    }
    Ok(())
}

/// An Anthropic image source as an OpenAI `image_url` part.
fn image_part(source: &Value, at: &str) -> Result<Value, TranslateError> {
    let url = match source["type"].as_str() {
        Some("url") => source["url"].as_str().unwrap_or_default().to_owned(),
        Some("base64") => format!(
            "data:{};base64,{}",
            source["media_type"].as_str().unwrap_or("image/png"),
            source["data"].as_str().unwrap_or_default()
        ),
        _ => {
            return Err(refuse(
                format!("{at}.source.type"),
                "only url and base64 images translate",
            ));
        }
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn to_anthropic(body: Value) -> Result<Value, TranslateError> {
        request(
            Dialect::OpenAi,
            Dialect::Anthropic,
            body.to_string().as_bytes(),
            "claude-x",
            256,
        )
        .map(|b| serde_json::from_slice(&b).unwrap())
    }

    fn to_openai(body: Value) -> Result<Value, TranslateError> {
        request(
            Dialect::Anthropic,
            Dialect::OpenAi,
            body.to_string().as_bytes(),
            "gpt-x",
            256,
        )
        .map(|b| serde_json::from_slice(&b).unwrap())
    }

    /// OpenAI's function-calling example (chat create with tools), a second turn with
    /// the tool's result.
    #[test]
    fn x2_openai_tools_calls_and_results_become_anthropic_blocks() {
        let got = to_anthropic(json!({
            "model": "gpt-4.1",
            "messages": [
                {"role": "developer", "content": "You are terse."},
                {"role": "user", "content": "What's the weather like in Boston and Paris today?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Boston\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "12C"},
                {"role": "tool", "tool_call_id": "call_2", "content": "18C"}
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_weather", "description": "Get the current weather",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
            }}],
            "tool_choice": "auto",
            "parallel_tool_calls": false,
            "temperature": 0.2,
            "stop": "END",
            "user": "u-1"
        }))
        .unwrap();
        assert_eq!(
            got,
            json!({
                "model": "claude-x",
                "max_tokens": 256,
                "system": [{"type": "text", "text": "You are terse."}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "What's the weather like in Boston and Paris today?"}]},
                    {"role": "assistant", "content": [
                        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"location": "Boston"}},
                        {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"location": "Paris"}}
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "call_1", "content": [{"type": "text", "text": "12C"}]},
                        {"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "18C"}]}
                    ]}
                ],
                "tools": [{"name": "get_weather", "description": "Get the current weather",
                    "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}],
                "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
                "temperature": 0.2,
                "stop_sequences": ["END"],
                "metadata": {"user_id": "u-1"}
            })
        );
    }

    #[test]
    fn x2_images_by_url_and_base64_cross_both_ways() {
        let got = to_anthropic(json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is in these?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
        ]}]}))
        .unwrap();
        let content = &got["messages"][0]["content"];
        assert_eq!(
            content[1],
            json!({"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}})
        );
        assert_eq!(
            content[2],
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}})
        );
        let back = to_openai(
            json!({"max_tokens": 10, "messages": [{"role": "user", "content": content.clone()}]}),
        )
        .unwrap();
        assert_eq!(
            back["messages"][0]["content"][1]["image_url"]["url"],
            "https://example.com/a.jpg"
        );
        assert_eq!(
            back["messages"][0]["content"][2]["image_url"]["url"],
            "data:image/png;base64,iVBORw0KGgo="
        );
    }

    /// Anthropic's tool-use example, its second turn, thinking and the system prompt.
    #[test]
    fn x2_anthropic_tools_and_results_become_openai_messages() {
        let got = to_openai(json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": "Be brief.",
            "thinking": {"type": "enabled", "budget_tokens": 4000},
            "tools": [{"name": "get_weather", "description": "Get the weather", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "stop_sequences": ["\n\nHuman:"],
            "stream": true,
            "messages": [
                {"role": "user", "content": "Weather in SF?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "I should call the tool.", "signature": "sig"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"location": "SF"}}
                ]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "15 degrees"}]}
            ]
        }))
        .unwrap();
        assert_eq!(
            got,
            json!({
                "model": "gpt-x",
                "max_completion_tokens": 1024,
                "reasoning_effort": "medium",
                "stop": ["\n\nHuman:"],
                "stream": true,
                "stream_options": {"include_usage": true},
                "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather", "parameters": {"type": "object"}}}],
                "tool_choice": "required",
                "parallel_tool_calls": false,
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": [{"type": "text", "text": "Weather in SF?"}]},
                    {"role": "assistant", "content": "Checking.", "tool_calls": [
                        {"id": "toolu_01", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"SF\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "toolu_01", "content": "15 degrees"}
                ]
            })
        );
    }

    #[test]
    fn x2_thinking_signature_round_trips_through_the_tool_call_id() {
        let blocks = vec![
            json!({"type": "thinking", "thinking": "Let me look it up.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA"}),
            json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}),
        ];
        let id = wrap_tool_id("toolu_01", &blocks);
        assert!(
            id.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{id}"
        );
        assert_eq!(
            unwrap_tool_id(&id),
            ("toolu_01".to_owned(), Some(blocks.clone()))
        );
        assert_eq!(unwrap_tool_id("call_9"), ("call_9".to_owned(), None));
        // The OpenAI client's next turn echoes the id: the blocks are restored in front
        // of the assistant turn, and every id is the provider's own again.
        let got = to_anthropic(json!({"messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": id, "type": "function", "function": {"name": "w", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": id, "content": "sunny"}
        ]}))
        .unwrap();
        assert_eq!(
            got["messages"][1]["content"],
            json!([blocks[0], blocks[1], {"type": "tool_use", "id": "toolu_01", "name": "w", "input": {}}])
        );
        assert_eq!(got["messages"][2]["content"][0]["tool_use_id"], "toolu_01");
    }

    #[test]
    fn x2_max_tokens_and_reasoning_effort_map_to_anthropics_bounds() {
        let got = to_anthropic(json!({"messages": [{"role": "user", "content": "hi"}]})).unwrap();
        assert_eq!(got["max_tokens"], 256, "Anthropic always gets a maximum");
        let got = to_anthropic(json!({"max_completion_tokens": 100, "max_tokens": 7, "messages": [{"role": "user", "content": "hi"}]})).unwrap();
        assert_eq!(got["max_tokens"], 100);
        let got = to_anthropic(json!({"max_tokens": 100, "reasoning_effort": "high", "messages": [{"role": "user", "content": "hi"}]})).unwrap();
        assert_eq!(
            got["thinking"],
            json!({"type": "enabled", "budget_tokens": 16384})
        );
        assert!(got["max_tokens"].as_u64().unwrap() > 16384, "{got}");
    }

    #[test]
    fn x2_what_cannot_be_expressed_is_refused_naming_the_field() {
        let base = |extra: Value| {
            let mut v = json!({"messages": [{"role": "user", "content": "hi"}]});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            v
        };
        for (extra, field) in [
            (json!({"n": 2}), "n"),
            (json!({"logprobs": true}), "logprobs"),
            (json!({"logit_bias": {"1": 2}}), "logit_bias"),
            (json!({"seed": 1}), "seed"),
            (json!({"presence_penalty": 0.5}), "presence_penalty"),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}),
                "response_format",
            ),
        ] {
            match to_anthropic(base(extra.clone())) {
                Err(TranslateError::Unsupported { field: f, .. }) => {
                    assert_eq!(f, field, "{extra}")
                }
                other => panic!("{extra}: {other:?}"),
            }
        }
        // Harmless settings pass.
        assert!(
            to_anthropic(base(
                json!({"n": 1, "store": false, "stream_options": {"include_usage": true}})
            ))
            .is_ok()
        );
        let audio = json!({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]});
        assert!(
            matches!(to_anthropic(audio), Err(TranslateError::Unsupported { field, .. }) if field == "messages[0].content[0].type")
        );
        let cached = json!({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}]});
        assert!(
            matches!(to_openai(cached), Err(TranslateError::Unsupported { field, .. }) if field == "messages[0].content[0].cache_control")
        );
        assert!(
            matches!(to_openai(json!({"max_tokens": 5, "top_k": 3, "messages": []})), Err(TranslateError::Unsupported { field, .. }) if field == "top_k")
        );
        assert!(matches!(
            request(Dialect::OpenAi, Dialect::Anthropic, b"{not json", "m", 1),
            Err(TranslateError::Malformed(_))
        ));
        assert!(matches!(
            request(Dialect::Gemini, Dialect::Anthropic, b"{}", "m", 1),
            Err(TranslateError::Unsupported { .. })
        ));
    }

    fn role() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            Just("system"),
            Just("developer"),
            Just("user"),
            Just("assistant"),
            Just("tool"),
            Just("critic")
        ]
    }

    proptest! {
        /// Any OpenAI request of random turns either translates to a request the
        /// Anthropic schema accepts (alternating turns that start with the user, a
        /// maximum of at least 1) or is refused — never a panic.
        #[test]
        fn x2_any_openai_request_translates_to_a_valid_anthropic_one_or_is_refused(
            turns in proptest::collection::vec((role(), "[a-z ]{0,12}"), 0..8),
            max in proptest::option::of(0u64..5000),
            temperature in proptest::option::of(0.0f64..2.0),
        ) {
            let messages: Vec<Value> = turns
                .iter()
                .map(|(r, t)| if *r == "tool" {
                    json!({"role": r, "content": t, "tool_call_id": "call_x"})
                } else {
                    json!({"role": r, "content": t})
                })
                .collect();
            let mut body = json!({"model": "gpt", "messages": messages});
            if let Some(m) = max { body["max_tokens"] = json!(m); }
            if let Some(t) = temperature { body["temperature"] = json!(t); }
            if let Ok(v) = to_anthropic(body) {
                prop_assert!(v["max_tokens"].as_u64().unwrap() >= 1);
                let roles: Vec<&str> = v["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
                prop_assert!(roles.first().is_none_or(|r| *r == "user"), "{roles:?}");
                prop_assert!(roles.windows(2).all(|w| w[0] != w[1]), "{roles:?}");
                prop_assert!(roles.iter().all(|r| *r == "user" || *r == "assistant"));
                let empty = v["messages"].as_array().unwrap().iter().any(|m| m["content"].as_array().is_none_or(Vec::is_empty));
                prop_assert!(!empty, "a turn without content: {v}");
            }
        }
    }
}
