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
//! image_url / file (images only as http(s) or base64 data URLs, `detail` other than
//! `auto`; files only as a PDF's base64 data URL, which becomes a `document` block —
//! an uploaded file's `file_id` lives at OpenAI),
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
//! `top_k`, `cache_control` anywhere, documents other than a base64 PDF (which
//! becomes a `file` part, its title the file name) and unknown block types, images and
//! documents outside user messages, server tools, and any unknown field
//! (`service_tier` ignored).
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
    Document {
        source: AnSource,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<OaFile>,
    #[serde(flatten)]
    extra: Extra,
}

impl OaPart {
    fn text(text: String) -> Self {
        Self {
            kind: "text".into(),
            text: Some(text),
            image_url: None,
            file: None,
            extra: Extra::new(),
        }
    }
}

/// A chat `file` part: inline as a data URL, or an id of a file uploaded to OpenAI.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OaFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    file_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    file_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    filename: Option<String>,
}

/// The one file type both sides take inline: a PDF (Anthropic's base64 document).
const PDF: &str = "application/pdf";

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

#[cfg(test)]
mod tests;
mod to_chat;
mod to_messages;

use to_chat::to_openai;
use to_messages::to_anthropic;
