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
    let mut push = |role: &str, blocks: Vec<Value>| match messages.last_mut() {
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
