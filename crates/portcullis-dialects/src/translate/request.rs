//! Generation requests between OpenAI chat completions and Anthropic messages.
//!
//! The body is parsed once into the typed wire structures below (shared with the
//! answer translator) and written in the target dialect under the channel's model id.
//!
//! **OpenAI → Anthropic.** System and developer messages become the top-level
//! `system` (hoisted to the front wherever they stood — approximated); tool messages
//! become `tool_result` blocks of a user message; consecutive messages of one role are
//! merged (Anthropic requires alternation); `max_tokens` is the client's
//! `max_completion_tokens` / `max_tokens` or the channel default, raised to
//! `budget + default` when a thinking budget would not fit; `reasoning_effort`
//! low / medium / high becomes a thinking budget of 1024 / 4096 / 16384 (`none`: no
//! thinking). A tool call id carrying the `__pcx1_` envelope (see [`wrap_tool_id`])
//! gives back the thinking blocks of that assistant turn and is stripped everywhere.
//! Refused (`Unsupported`): `n` > 1, `logprobs`, `top_logprobs`, `logit_bias`,
//! non-zero `presence_penalty` / `frequency_penalty`, `seed`, `audio`, non-text
//! `modalities`, a `response_format` a forced tool cannot stand in for (below),
//! `prediction`,
//! `temperature` > 1, a message `name`, unknown roles, content parts other than text /
//! image_url (images only as http(s) or base64 data URLs, `detail` other than `auto`),
//! non-function tools, a conversation whose first message is not the user's, and any
//! unknown field. Ignored on purpose: `store`, `metadata`, `service_tier`,
//! `stream_options` (the stream translator is told separately), a tool's `strict`, an
//! assistant message's `refusal` / `annotations`, and `reasoning_content` (it carries no
//! signature; only the envelope restores thinking).
//!
//! Structured output (`response_format` json_schema / json_object) becomes a tool
//! whose input is the answer ([`JSON_TOOL`], with the schema as its input schema, an
//! object for json_object) and a `tool_choice` forcing it; the answer and stream
//! translators give its input back as the message's text, with `finish_reason` stop.
//! Refused beside the request's own tools or tool choice, with a thinking budget
//! (Anthropic does not force a tool while thinking), and for a schema whose root is
//! not an object.
//!
//! **Anthropic → OpenAI.** `system` becomes a leading system message; `tool_result`
//! blocks become tool messages placed before the rest of their user message;
//! `max_tokens` becomes `max_completion_tokens`; a thinking budget maps to the nearest
//! `reasoning_effort`; `metadata.user_id` becomes `user`; a stream asks for usage.
//! Thinking blocks of earlier turns are dropped (OpenAI cannot take them back) and a
//! `tool_result`'s `is_error` is not expressible (its content is kept). Refused:
//! `top_k`, `cache_control` anywhere, document and other unknown block types, images
//! outside user messages, server tools, and any unknown field (`service_tier` ignored).
use super::TranslateError;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub(super) type Extra = Map<String, Value>;

/// A field the target cannot express.
pub(super) fn unsupported(field: impl Into<String>, why: impl Into<String>) -> TranslateError {
    TranslateError::Unsupported {
        field: field.into(),
        why: why.into(),
    }
}

/// `body` parsed as a `T`, the error naming the JSON path of the first wrong value.
pub(super) fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, TranslateError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        TranslateError::Malformed(format!("invalid body at `{}`: {}", e.path(), e.inner()))
    })?;
    de.end()
        .map_err(|e| TranslateError::Malformed(format!("invalid body: {e}")))?;
    Ok(value)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Refuses the first field of `extra` (fields the typed structures do not know).
pub(super) fn refuse_extra(path: &str, extra: &Extra, target: &str) -> Result<(), TranslateError> {
    match extra.keys().next() {
        None => Ok(()),
        Some(k) if k == "cache_control" => Err(unsupported(
            join(path, k),
            format!("prompt cache breakpoints are not expressible in {target}"),
        )),
        Some(k) => Err(unsupported(
            join(path, k),
            format!("{target} has no such field"),
        )),
    }
}

const ENVELOPE: &str = "__pcx1_";

/// `id` carrying `blocks` (an Anthropic turn's thinking blocks) for the next turn.
pub(crate) fn wrap_tool_id(id: &str, blocks: &[Value]) -> String {
    if blocks.is_empty() {
        return id.to_owned();
    }
    let json = serde_json::to_vec(blocks).unwrap_or_default();
    format!("{id}{ENVELOPE}{}", URL_SAFE_NO_PAD.encode(json))
}

/// The original id and the blocks a [`wrap_tool_id`] id carries (none when it has no
/// valid envelope; the id is then returned unchanged).
pub(crate) fn unwrap_tool_id(id: &str) -> (String, Option<Vec<Value>>) {
    let Some((orig, b64)) = id.split_once(ENVELOPE) else {
        return (id.to_owned(), None);
    };
    let blocks = URL_SAFE_NO_PAD
        .decode(b64)
        .ok()
        .and_then(|b| serde_json::from_slice::<Vec<Value>>(&b).ok());
    match blocks {
        Some(b) => (orig.to_owned(), Some(b)),
        None => (id.to_owned(), None),
    }
}

// ---- Anthropic wire types ----

#[derive(Serialize, Deserialize, Default)]
struct AnRequest {
    #[serde(default)]
    model: String,
    messages: Vec<AnMessage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<AnContent>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_sequences: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<AnTool>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<AnToolChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<AnThinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<AnMetadata>,
    #[serde(rename = "service_tier", skip_serializing)]
    _service_tier: Option<Value>,
    #[serde(flatten)]
    extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
enum AnRole {
    User,
    Assistant,
}

#[derive(Serialize, Deserialize)]
struct AnMessage {
    role: AnRole,
    content: AnContent,
    #[serde(flatten)]
    extra: Extra,
}

/// A string or content blocks (message content, system, tool result content).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub(super) enum AnContent {
    Text(String),
    Blocks(Vec<AnBlock>),
}

impl AnContent {
    fn into_blocks(self) -> Vec<AnBlock> {
        match self {
            Self::Text(text) => vec![AnBlock::text(text)],
            Self::Blocks(b) => b,
        }
    }
}

/// An Anthropic content block; unknown types parse as `Other` (refused).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum AnBlock {
    Text {
        text: String,
        #[serde(flatten)]
        extra: Extra,
    },
    Image {
        source: AnSource,
        #[serde(flatten)]
        extra: Extra,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
        #[serde(flatten)]
        extra: Extra,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<AnContent>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
        #[serde(flatten)]
        extra: Extra,
    },
    Thinking {
        thinking: String,
        signature: String,
        #[serde(flatten)]
        extra: Extra,
    },
    RedactedThinking {
        data: String,
        #[serde(flatten)]
        extra: Extra,
    },
    #[serde(other)]
    Other,
}

impl AnBlock {
    pub(super) fn text(text: String) -> Self {
        Self::Text {
            text,
            extra: Extra::new(),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum AnSource {
    Base64 {
        media_type: String,
        data: String,
    },
    Url {
        url: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Serialize, Deserialize)]
struct AnTool {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    input_schema: Option<Value>,
    #[serde(flatten)]
    extra: Extra,
}

#[derive(Serialize, Deserialize)]
struct AnToolChoice {
    #[serde(rename = "type")]
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disable_parallel_tool_use: Option<bool>,
}

#[derive(Serialize, Deserialize)]
struct AnThinking {
    #[serde(rename = "type")]
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    budget_tokens: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct AnMetadata {
    #[serde(skip_serializing_if = "Option::is_none")]
    user_id: Option<String>,
}

// ---- OpenAI wire types ----

#[derive(Serialize, Deserialize, Default)]
struct OaRequest {
    #[serde(default)]
    model: String,
    messages: Vec<OaMessage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop: Option<OaStop>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<OaTool>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<OaToolChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<String>,
    // Refused when they ask for something.
    #[serde(skip_serializing)]
    n: Option<u64>,
    #[serde(skip_serializing)]
    logprobs: Option<bool>,
    #[serde(skip_serializing)]
    top_logprobs: Option<Value>,
    #[serde(skip_serializing)]
    logit_bias: Option<Value>,
    #[serde(skip_serializing)]
    presence_penalty: Option<f64>,
    #[serde(skip_serializing)]
    frequency_penalty: Option<f64>,
    #[serde(skip_serializing)]
    seed: Option<Value>,
    #[serde(skip_serializing)]
    audio: Option<Value>,
    #[serde(skip_serializing)]
    modalities: Option<Vec<String>>,
    #[serde(skip_serializing)]
    response_format: Option<OaResponseFormat>,
    #[serde(skip_serializing)]
    prediction: Option<Value>,
    // Ignored.
    #[serde(rename = "store", skip_serializing)]
    _store: Option<Value>,
    #[serde(rename = "metadata", skip_serializing)]
    _metadata: Option<Value>,
    #[serde(rename = "service_tier", skip_serializing)]
    _service_tier: Option<Value>,
    #[serde(flatten)]
    extra: Extra,
}

#[derive(Deserialize)]
struct OaResponseFormat {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    json_schema: Option<OaJsonSchema>,
}

#[derive(Deserialize)]
struct OaJsonSchema {
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    schema: Option<Value>,
}

/// The tool an OpenAI `response_format` becomes towards Anthropic, which has no
/// response format: a tool whose input is the answer, and the model made to call it.
/// Its name is reserved (a client's own tool cannot be named so); the answer and
/// stream translators turn its call back into the answer's text.
pub(crate) const JSON_TOOL: &str = "__pcx_structured_output";

#[derive(Serialize, Deserialize, Default)]
struct OaMessage {
    role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content: Option<OaContent>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<OaToolCall>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
    #[serde(rename = "reasoning_content", skip_serializing)]
    _reasoning_content: Option<Value>,
    #[serde(rename = "refusal", skip_serializing)]
    _refusal: Option<Value>,
    #[serde(rename = "annotations", skip_serializing)]
    _annotations: Option<Value>,
    #[serde(flatten)]
    extra: Extra,
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum OaContent {
    Text(String),
    Parts(Vec<OaPart>),
}

#[derive(Serialize, Deserialize)]
struct OaPart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    image_url: Option<OaImageUrl>,
    #[serde(flatten)]
    extra: Extra,
}

impl OaPart {
    fn text(text: String) -> Self {
        Self {
            kind: "text".into(),
            text: Some(text),
            image_url: None,
            extra: Extra::new(),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct OaImageUrl {
    url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

/// An OpenAI assistant tool call.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(super) struct OaToolCall {
    pub(super) id: String,
    #[serde(rename = "type", default = "function")]
    pub(super) kind: String,
    pub(super) function: OaFunctionCall,
}

fn function() -> String {
    "function".into()
}

/// The function of an OpenAI tool call (its arguments as a JSON string).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(super) struct OaFunctionCall {
    pub(super) name: String,
    #[serde(default)]
    pub(super) arguments: String,
}

#[derive(Serialize, Deserialize)]
struct OaTool {
    #[serde(rename = "type")]
    kind: String,
    function: OaFunction,
}

#[derive(Serialize, Deserialize)]
struct OaFunction {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Value>,
    #[serde(rename = "strict", skip_serializing)]
    _strict: Option<bool>,
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum OaToolChoice {
    Mode(String),
    Named {
        #[serde(rename = "type")]
        kind: String,
        function: OaName,
    },
}

#[derive(Serialize, Deserialize)]
struct OaName {
    name: String,
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum OaStop {
    One(String),
    Many(Vec<String>),
}

/// An OpenAI chat request written as an Anthropic messages request for model
/// `upstream_model`, with `default_max_tokens` when the client gave no maximum.
pub(crate) fn chat_to_messages(
    body: &[u8],
    upstream_model: &str,
    default_max_tokens: u64,
) -> Result<Vec<u8>, TranslateError> {
    to_anthropic(parse(body)?, upstream_model, default_max_tokens)
}

/// An Anthropic messages request written as an OpenAI chat request for model
/// `upstream_model`.
pub(crate) fn messages_to_chat(
    body: &[u8],
    upstream_model: &str,
) -> Result<Vec<u8>, TranslateError> {
    to_openai(parse(body)?, upstream_model)
}

const AN: &str = "Anthropic messages";
const OA: &str = "OpenAI chat completions";

fn budget_of(effort: &str) -> Result<Option<u64>, TranslateError> {
    match effort {
        "none" => Ok(None),
        "low" => Ok(Some(1024)),
        "medium" => Ok(Some(4096)),
        "high" => Ok(Some(16384)),
        other => Err(unsupported(
            "reasoning_effort",
            format!("`{other}` has no Anthropic thinking budget (use none, low, medium or high)"),
        )),
    }
}

fn ser<T: Serialize>(v: &T) -> Result<Vec<u8>, TranslateError> {
    serde_json::to_vec(v).map_err(|e| TranslateError::Malformed(e.to_string()))
}

/// Appends a message, merging it into the previous one of the same role.
fn push(msgs: &mut Vec<AnMessage>, role: AnRole, content: AnContent) {
    if let Some(last) = msgs.last_mut().filter(|m| m.role == role) {
        let prev = std::mem::replace(&mut last.content, AnContent::Blocks(Vec::new()));
        let mut blocks = prev.into_blocks();
        blocks.extend(content.into_blocks());
        last.content = AnContent::Blocks(blocks);
    } else {
        msgs.push(AnMessage {
            role,
            content,
            extra: Extra::new(),
        });
    }
}

/// Text-only content (system, tool and assistant messages) as text blocks.
fn text_blocks(path: &str, content: Option<OaContent>) -> Result<Vec<AnBlock>, TranslateError> {
    match content {
        None => Ok(Vec::new()),
        Some(OaContent::Text(s)) => Ok(vec![AnBlock::text(s)]),
        Some(OaContent::Parts(parts)) => parts
            .into_iter()
            .enumerate()
            .map(|(j, p)| {
                let pp = format!("{path}.content[{j}]");
                if p.kind == "text" {
                    refuse_extra(&pp, &p.extra, AN)?;
                }
                match (p.kind.as_str(), p.text) {
                    ("text", Some(t)) => Ok(AnBlock::text(t)),
                    ("text", None) => {
                        Err(TranslateError::Malformed(format!("{pp}.text is missing")))
                    }
                    _ => Err(unsupported(
                        format!("{pp}.type"),
                        "only text parts are translated here",
                    )),
                }
            })
            .collect(),
    }
}

fn image_block(path: &str, image: Option<OaImageUrl>) -> Result<AnBlock, TranslateError> {
    let image =
        image.ok_or_else(|| TranslateError::Malformed(format!("{path}.image_url is missing")))?;
    if image.detail.as_deref().is_some_and(|d| d != "auto") {
        return Err(unsupported(
            format!("{path}.image_url.detail"),
            "Anthropic has no image detail level",
        ));
    }
    let source = if let Some(rest) = image.url.strip_prefix("data:") {
        match rest.split_once(";base64,") {
            Some((mime, data)) => AnSource::Base64 {
                media_type: mime.into(),
                data: data.into(),
            },
            None => {
                return Err(unsupported(
                    format!("{path}.image_url.url"),
                    "only base64 data URLs are translated",
                ));
            }
        }
    } else if image.url.starts_with("https://") || image.url.starts_with("http://") {
        AnSource::Url { url: image.url }
    } else {
        return Err(unsupported(
            format!("{path}.image_url.url"),
            "only http(s) and data URLs are translated",
        ));
    };
    Ok(AnBlock::Image {
        source,
        extra: Extra::new(),
    })
}

fn user_content(path: &str, content: Option<OaContent>) -> Result<AnContent, TranslateError> {
    match content {
        None => Err(TranslateError::Malformed(format!(
            "{path}.content is missing"
        ))),
        Some(OaContent::Text(s)) => Ok(AnContent::Text(s)),
        Some(OaContent::Parts(parts)) => {
            let mut blocks = Vec::with_capacity(parts.len());
            for (j, p) in parts.into_iter().enumerate() {
                let pp = format!("{path}.content[{j}]");
                if p.kind == "text" || p.kind == "image_url" {
                    refuse_extra(&pp, &p.extra, AN)?;
                }
                blocks.push(match p.kind.as_str() {
                    "text" => AnBlock::text(p.text.ok_or_else(|| {
                        TranslateError::Malformed(format!("{pp}.text is missing"))
                    })?),
                    "image_url" => image_block(&pp, p.image_url)?,
                    other => {
                        return Err(unsupported(
                            format!("{pp}.type"),
                            format!("`{other}` parts cannot be sent to Anthropic"),
                        ));
                    }
                });
            }
            Ok(AnContent::Blocks(blocks))
        }
    }
}

fn assistant_blocks(path: &str, m: OaMessage) -> Result<Vec<AnBlock>, TranslateError> {
    let mut blocks = Vec::new();
    let mut calls = Vec::new();
    for (k, call) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
        let cp = format!("{path}.tool_calls[{k}]");
        if call.kind != "function" {
            return Err(unsupported(
                format!("{cp}.type"),
                "only function tool calls are translated",
            ));
        }
        let (id, restored) = unwrap_tool_id(&call.id);
        if let Some(restored) = restored.filter(|_| blocks.is_empty()) {
            // Another vendor's envelope (a Gemini thought signature, after a failover
            // mid-conversation) means nothing to Anthropic.
            for b in restored
                .into_iter()
                .filter(|b| b["type"] != "gemini_signature")
            {
                match serde_json::from_value::<AnBlock>(b) {
                    Ok(b @ (AnBlock::Thinking { .. } | AnBlock::RedactedThinking { .. })) => {
                        blocks.push(b)
                    }
                    _ => {
                        return Err(TranslateError::Malformed(format!(
                            "{cp}.id carries an invalid thinking envelope"
                        )));
                    }
                }
            }
        }
        let args = call.function.arguments.trim();
        let input: Value = if args.is_empty() {
            Value::Object(Map::new())
        } else {
            serde_json::from_str(args).map_err(|e| {
                TranslateError::Malformed(format!("{cp}.function.arguments is not JSON: {e}"))
            })?
        };
        if !input.is_object() {
            return Err(TranslateError::Malformed(format!(
                "{cp}.function.arguments is not a JSON object"
            )));
        }
        calls.push(AnBlock::ToolUse {
            id,
            name: call.function.name,
            input,
            extra: Extra::new(),
        });
    }
    let text = text_blocks(path, m.content)?;
    blocks.extend(
        text.into_iter()
            .filter(|b| !matches!(b, AnBlock::Text { text, .. } if text.is_empty())),
    );
    blocks.extend(calls);
    Ok(blocks)
}

fn to_anthropic(r: OaRequest, model: &str, default_max: u64) -> Result<Vec<u8>, TranslateError> {
    refuse_extra("", &r.extra, AN)?;
    let refuse = |field: &str, why: &str| Err(unsupported(field, why));
    if r.n.is_some_and(|n| n > 1) {
        return refuse("n", "Anthropic returns a single choice");
    }
    if r.logprobs == Some(true) {
        return refuse("logprobs", "Anthropic returns no log probabilities");
    }
    if r.top_logprobs.as_ref().is_some_and(|v| !v.is_null()) {
        return refuse("top_logprobs", "Anthropic returns no log probabilities");
    }
    if r.logit_bias
        .as_ref()
        .is_some_and(|v| !v.is_null() && v.as_object().is_none_or(|o| !o.is_empty()))
    {
        return refuse("logit_bias", "Anthropic has no logit bias");
    }
    if r.presence_penalty.is_some_and(|p| p != 0.0) {
        return refuse("presence_penalty", "Anthropic has no presence penalty");
    }
    if r.frequency_penalty.is_some_and(|p| p != 0.0) {
        return refuse("frequency_penalty", "Anthropic has no frequency penalty");
    }
    if r.seed.as_ref().is_some_and(|v| !v.is_null()) {
        return refuse("seed", "Anthropic has no sampling seed");
    }
    if r.audio.as_ref().is_some_and(|v| !v.is_null()) {
        return refuse("audio", "Anthropic produces no audio");
    }
    if r.modalities
        .as_ref()
        .is_some_and(|m| m.iter().any(|m| m != "text"))
    {
        return refuse("modalities", "Anthropic produces text only");
    }
    if r.prediction.as_ref().is_some_and(|v| !v.is_null()) {
        return refuse("prediction", "Anthropic has no predicted outputs");
    }
    if r.temperature.is_some_and(|t| t > 1.0) {
        return refuse("temperature", "Anthropic accepts a temperature from 0 to 1");
    }
    let mut system = Vec::new();
    let mut messages: Vec<AnMessage> = Vec::new();
    for (i, m) in r.messages.into_iter().enumerate() {
        let p = format!("messages[{i}]");
        refuse_extra(&p, &m.extra, AN)?;
        if m.name.is_some() {
            return Err(unsupported(
                format!("{p}.name"),
                "Anthropic messages have no participant name",
            ));
        }
        match m.role.as_str() {
            "system" | "developer" => system.extend(text_blocks(&p, m.content)?),
            "user" => {
                let content = user_content(&p, m.content)?;
                push(&mut messages, AnRole::User, content);
            }
            "assistant" => {
                let blocks = assistant_blocks(&p, m)?;
                if messages.is_empty() && !blocks.is_empty() {
                    return Err(unsupported(
                        format!("{p}.role"),
                        "Anthropic conversations must start with a user message",
                    ));
                }
                match <[AnBlock; 1]>::try_from(blocks) {
                    Ok([AnBlock::Text { text, extra }]) if extra.is_empty() => {
                        push(&mut messages, AnRole::Assistant, AnContent::Text(text));
                    }
                    Ok([b]) => push(&mut messages, AnRole::Assistant, AnContent::Blocks(vec![b])),
                    Err(v) if v.is_empty() => {}
                    Err(v) => push(&mut messages, AnRole::Assistant, AnContent::Blocks(v)),
                }
            }
            "tool" => {
                let id = m.tool_call_id.clone().ok_or_else(|| {
                    TranslateError::Malformed(format!("{p}.tool_call_id is missing"))
                })?;
                let content = match m.content {
                    Some(OaContent::Text(s)) => Some(AnContent::Text(s)),
                    other => Some(AnContent::Blocks(text_blocks(&p, other)?)),
                };
                let block = AnBlock::ToolResult {
                    tool_use_id: unwrap_tool_id(&id).0,
                    content,
                    is_error: None,
                    extra: Extra::new(),
                };
                push(&mut messages, AnRole::User, AnContent::Blocks(vec![block]));
            }
            other => {
                return Err(unsupported(
                    format!("{p}.role"),
                    format!("`{other}` messages cannot be sent to Anthropic"),
                ));
            }
        }
    }
    if messages.is_empty() {
        return refuse("messages", "Anthropic needs at least one user message");
    }
    let client_max = r.max_completion_tokens.or(r.max_tokens);
    if client_max == Some(0) {
        return refuse("max_tokens", "Anthropic needs a maximum of at least 1");
    }
    let mut max_tokens = client_max.unwrap_or(default_max).max(1);
    let budget = r
        .reasoning_effort
        .as_deref()
        .map(budget_of)
        .transpose()?
        .flatten();
    if let Some(b) = budget.filter(|b| max_tokens <= *b) {
        max_tokens = b + default_max.max(1);
    }
    let tools = r
        .tools
        .map(|tools| {
            tools
                .into_iter()
                .enumerate()
                .map(|(i, t)| {
                    if t.kind != "function" {
                        return Err(unsupported(
                            format!("tools[{i}].type"),
                            "only function tools are translated",
                        ));
                    }
                    Ok(AnTool {
                        kind: None,
                        name: t.function.name,
                        description: t.function.description,
                        input_schema: Some(t.function.parameters.unwrap_or_else(
                            || serde_json::json!({"type": "object", "properties": {}}),
                        )),
                        extra: Extra::new(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let json_tool = json_tool(r.response_format, &tools, budget, r.tool_choice.is_some())?;
    let mut tools = tools;
    if let Some(t) = &tools {
        if let Some(i) = t.iter().position(|t| t.name == JSON_TOOL) {
            return refuse(&format!("tools[{i}].function.name"), "this tool name is reserved");
        }
    }
    let mut tool_choice = match r.tool_choice {
        _ if json_tool.is_some() => Some(AnToolChoice {
            kind: "tool".into(),
            name: Some(JSON_TOOL.into()),
            disable_parallel_tool_use: Some(true),
        }),
        None => None,
        Some(OaToolChoice::Mode(m)) => Some(AnToolChoice {
            kind: match m.as_str() {
                "auto" => "auto",
                "none" => "none",
                "required" => "any",
                _ => {
                    return refuse(
                        "tool_choice",
                        "only auto, none, required or a named function are translated",
                    );
                }
            }
            .into(),
            name: None,
            disable_parallel_tool_use: None,
        }),
        Some(OaToolChoice::Named { kind, function }) if kind == "function" => Some(AnToolChoice {
            kind: "tool".into(),
            name: Some(function.name),
            disable_parallel_tool_use: None,
        }),
        Some(OaToolChoice::Named { .. }) => {
            return refuse(
                "tool_choice.type",
                "only function tool choices are translated",
            );
        }
    };
    if r.parallel_tool_calls == Some(false) {
        let choice = tool_choice.get_or_insert_with(|| AnToolChoice {
            kind: "auto".into(),
            name: None,
            disable_parallel_tool_use: None,
        });
        if choice.kind != "none" {
            choice.disable_parallel_tool_use = Some(true);
        }
    }
    if let Some(t) = json_tool {
        tools = Some(vec![t]);
    }
    let system = match <[AnBlock; 1]>::try_from(system) {
        Ok([AnBlock::Text { text, .. }]) => Some(AnContent::Text(text)),
        Ok([b]) => Some(AnContent::Blocks(vec![b])),
        Err(v) if v.is_empty() => None,
        Err(v) => Some(AnContent::Blocks(v)),
    };
    ser(&AnRequest {
        model: model.into(),
        messages,
        system,
        max_tokens: Some(max_tokens),
        temperature: r.temperature,
        top_p: r.top_p,
        stop_sequences: r.stop.map(|s| match s {
            OaStop::One(s) => vec![s],
            OaStop::Many(v) => v,
        }),
        stream: r.stream,
        tools,
        tool_choice,
        thinking: budget.map(|b| AnThinking {
            kind: "enabled".into(),
            budget_tokens: Some(b),
        }),
        metadata: r.user.map(|u| AnMetadata { user_id: Some(u) }),
        ..AnRequest::default()
    })
}

/// The forced tool of a structured-output request (see [`JSON_TOOL`]), or none for
/// a text answer. Refused where a forced call cannot stand in for it: beside the
/// client's own tools or tool choice, with thinking (Anthropic does not force a tool
/// while thinking), or for a schema whose root is not an object (a tool's input is).
fn json_tool(
    format: Option<OaResponseFormat>,
    tools: &Option<Vec<AnTool>>,
    thinking: Option<u64>,
    tool_choice: bool,
) -> Result<Option<AnTool>, TranslateError> {
    let Some(f) = format.filter(|f| f.kind != "text") else {
        return Ok(None);
    };
    let why = match f.kind.as_str() {
        "json_object" | "json_schema" => None,
        _ => Some("only text, json_object and json_schema formats are translated"),
    };
    let why = why.or_else(|| {
        if tools.as_ref().is_some_and(|t| !t.is_empty()) || tool_choice {
            Some("Anthropic answers in a format by a forced tool call, which cannot stand beside the request's own tools")
        } else if thinking.is_some() {
            Some("Anthropic answers in a format by a forced tool call, which it does not make while thinking")
        } else {
            None
        }
    });
    if let Some(why) = why {
        return Err(unsupported("response_format", why));
    }
    let (description, schema) = match f.json_schema {
        Some(j) => (j.description, j.schema),
        None => (None, None),
    };
    let schema = schema.unwrap_or_else(|| serde_json::json!({"type": "object"}));
    if schema.get("type").is_some_and(|t| t != "object") {
        return Err(unsupported(
            "response_format.json_schema.schema.type",
            "Anthropic's structured answer is a tool's input, which must be an object",
        ));
    }
    Ok(Some(AnTool {
        kind: None,
        name: JSON_TOOL.into(),
        description: Some(
            description.unwrap_or_else(|| "Give the answer as this tool's input.".into()),
        ),
        input_schema: Some(schema),
        extra: Extra::new(),
    }))
}

fn oa_message(role: &str, content: Option<OaContent>) -> OaMessage {
    OaMessage {
        role: role.into(),
        content,
        ..OaMessage::default()
    }
}

fn to_openai(r: AnRequest, model: &str) -> Result<Vec<u8>, TranslateError> {
    refuse_extra("", &r.extra, OA)?;
    if r.top_k.is_some() {
        return Err(unsupported("top_k", "OpenAI has no top-k sampling"));
    }
    let max_tokens = r.max_tokens.ok_or_else(|| {
        TranslateError::Malformed("invalid body: missing field `max_tokens`".into())
    })?;
    let mut out = Vec::new();
    match r.system {
        None => {}
        Some(AnContent::Text(s)) => out.push(oa_message("system", Some(OaContent::Text(s)))),
        Some(AnContent::Blocks(blocks)) => {
            let parts = text_parts(blocks, "system", "system blocks must be text")?;
            out.push(oa_message("system", Some(OaContent::Parts(parts))));
        }
    }
    for (i, m) in r.messages.into_iter().enumerate() {
        let p = format!("messages[{i}]");
        refuse_extra(&p, &m.extra, OA)?;
        let blocks = match (m.role, m.content) {
            (AnRole::User, AnContent::Text(s)) => {
                out.push(oa_message("user", Some(OaContent::Text(s))));
                continue;
            }
            (AnRole::Assistant, AnContent::Text(s)) => {
                out.push(oa_message("assistant", Some(OaContent::Text(s))));
                continue;
            }
            (_, AnContent::Blocks(b)) => b,
        };
        let mut parts = Vec::new();
        let mut calls = Vec::new();
        for (j, b) in blocks.into_iter().enumerate() {
            let bp = format!("{p}.content[{j}]");
            match (m.role, b) {
                (_, AnBlock::Text { text, extra }) => {
                    refuse_extra(&bp, &extra, OA)?;
                    parts.push(OaPart::text(text));
                }
                (AnRole::User, AnBlock::Image { source, extra }) => {
                    refuse_extra(&bp, &extra, OA)?;
                    let url = match source {
                        AnSource::Base64 { media_type, data } => {
                            format!("data:{media_type};base64,{data}")
                        }
                        AnSource::Url { url } => url,
                        AnSource::Other => {
                            return Err(unsupported(
                                format!("{bp}.source.type"),
                                "only base64 and url images are translated",
                            ));
                        }
                    };
                    parts.push(OaPart {
                        kind: "image_url".into(),
                        text: None,
                        image_url: Some(OaImageUrl { url, detail: None }),
                        extra: Extra::new(),
                    });
                }
                (
                    AnRole::User,
                    AnBlock::ToolResult {
                        tool_use_id,
                        content,
                        extra,
                        ..
                    },
                ) => {
                    refuse_extra(&bp, &extra, OA)?;
                    let content = match content {
                        None => OaContent::Text(String::new()),
                        Some(AnContent::Text(s)) => OaContent::Text(s),
                        Some(AnContent::Blocks(bs)) => OaContent::Parts(text_parts(
                            bs,
                            &format!("{bp}.content"),
                            "OpenAI tool results hold text only",
                        )?),
                    };
                    out.push(OaMessage {
                        tool_call_id: Some(tool_use_id),
                        ..oa_message("tool", Some(content))
                    });
                }
                (
                    AnRole::Assistant,
                    AnBlock::ToolUse {
                        id,
                        name,
                        input,
                        extra,
                    },
                ) => {
                    refuse_extra(&bp, &extra, OA)?;
                    calls.push(OaToolCall {
                        id,
                        kind: function(),
                        function: OaFunctionCall {
                            name,
                            arguments: input.to_string(),
                        },
                    });
                }
                (
                    AnRole::Assistant,
                    AnBlock::Thinking { .. } | AnBlock::RedactedThinking { .. },
                ) => {}
                _ => {
                    return Err(unsupported(
                        format!("{bp}.type"),
                        "this block type is not expressible in OpenAI chat completions",
                    ));
                }
            }
        }
        match m.role {
            AnRole::User if !parts.is_empty() => {
                out.push(oa_message("user", Some(OaContent::Parts(parts))))
            }
            AnRole::User => {}
            AnRole::Assistant => {
                let content = match <[OaPart; 1]>::try_from(parts) {
                    Ok([p]) => p.text.map(OaContent::Text),
                    Err(v) if v.is_empty() => None,
                    Err(v) => Some(OaContent::Parts(v)),
                };
                let tool_calls = (!calls.is_empty()).then_some(calls);
                out.push(OaMessage {
                    tool_calls,
                    ..oa_message("assistant", content)
                });
            }
        }
    }
    let tools = r
        .tools
        .map(|tools| {
            tools
                .into_iter()
                .enumerate()
                .map(|(i, t)| {
                    if t.kind.as_deref().is_some_and(|k| k != "custom") {
                        return Err(unsupported(
                            format!("tools[{i}].type"),
                            "server tools are not expressible in OpenAI chat completions",
                        ));
                    }
                    refuse_extra(&format!("tools[{i}]"), &t.extra, OA)?;
                    Ok(OaTool {
                        kind: function(),
                        function: OaFunction {
                            name: t.name,
                            description: t.description,
                            parameters: t.input_schema,
                            _strict: None,
                        },
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let mut parallel_tool_calls = None;
    let tool_choice = match r.tool_choice {
        None => None,
        Some(c) => {
            if c.disable_parallel_tool_use == Some(true) {
                parallel_tool_calls = Some(false);
            }
            Some(match (c.kind.as_str(), c.name) {
                ("auto", _) => OaToolChoice::Mode("auto".into()),
                ("any", _) => OaToolChoice::Mode("required".into()),
                ("none", _) => OaToolChoice::Mode("none".into()),
                ("tool", Some(name)) => OaToolChoice::Named {
                    kind: function(),
                    function: OaName { name },
                },
                _ => {
                    return Err(unsupported(
                        "tool_choice.type",
                        "only auto, any, none and tool are translated",
                    ));
                }
            })
        }
    };
    let reasoning_effort = match r.thinking {
        None => None,
        Some(t) if t.kind == "disabled" => None,
        Some(t) if t.kind == "enabled" => Some(
            match t.budget_tokens.unwrap_or(0) {
                0..2560 => "low",
                2560..10240 => "medium",
                _ => "high",
            }
            .to_owned(),
        ),
        Some(_) => {
            return Err(unsupported(
                "thinking.type",
                "only enabled and disabled thinking are translated",
            ));
        }
    };
    let stream_options =
        (r.stream == Some(true)).then(|| serde_json::json!({"include_usage": true}));
    ser(&OaRequest {
        model: model.into(),
        messages: out,
        max_completion_tokens: Some(max_tokens),
        temperature: r.temperature,
        top_p: r.top_p,
        stop: r.stop_sequences.map(OaStop::Many),
        stream: r.stream,
        stream_options,
        tools,
        tool_choice,
        parallel_tool_calls,
        user: r.metadata.and_then(|m| m.user_id),
        reasoning_effort,
        ..OaRequest::default()
    })
}

/// Anthropic blocks at `path` that must all be text, as OpenAI text parts; any other
/// block is refused with `why`.
fn text_parts(blocks: Vec<AnBlock>, path: &str, why: &str) -> Result<Vec<OaPart>, TranslateError> {
    let mut parts = Vec::new();
    for (k, b) in blocks.into_iter().enumerate() {
        match b {
            AnBlock::Text { text, extra } => {
                refuse_extra(&format!("{path}[{k}]"), &extra, OA)?;
                parts.push(OaPart::text(text));
            }
            _ => return Err(unsupported(format!("{path}[{k}].type"), why)),
        }
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
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
        assert!(oa_to_an(with("response_format", json!({"type": "text"})))
            .unwrap()
            .get("tools")
            .is_none());
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
        let base = json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
        let mut r = base.clone();
        r["top_k"] = json!(5);
        assert_eq!(refused(an_to_oa(r)), "top_k");
        let mut r = base.clone();
        r["messages"][0]["content"] =
            json!([{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]);
        assert_eq!(refused(an_to_oa(r)), "messages[0].content[0].cache_control");
        let mut r = base.clone();
        r["system"] =
            json!([{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}]);
        assert_eq!(refused(an_to_oa(r)), "system[0].cache_control");
        let mut r = base.clone();
        r["messages"][0]["content"] = json!([{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]);
        assert_eq!(refused(an_to_oa(r)), "messages[0].content[0].type");
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
            refused(
                request(Wire::Chat, Wire::Responses, b"{}", "m", 1, false).map(|_| Value::Null)
            ),
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
}
