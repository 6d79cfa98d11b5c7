//! The wire structures of this module, written by hand (see the module docs): the
//! client's Responses request, the OpenAI chat request written from it, the chat
//! answer read back, and the Responses objects written for the client.
//!
//! Request structures keep every field they do not know in `extra` (refused); answer
//! structures read only what they translate (a provider may add fields).
use crate::translate::TranslateError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub(super) type Extra = Map<String, Value>;

/// `value` (found at `path` in the client's body) parsed as a `T`, the error naming
/// the JSON path of the first wrong value.
pub(super) fn from_value<T: DeserializeOwned>(
    path: &str,
    value: Value,
) -> Result<T, TranslateError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.path().to_string();
        let at = match inner.as_str() {
            "." | "" => path.to_owned(),
            i if i.starts_with('[') || path.is_empty() => format!("{path}{i}"),
            i => format!("{path}.{i}"),
        };
        TranslateError::Malformed(format!("invalid body at `{at}`: {}", e.inner()))
    })
}

// ---- The client's Responses request ----

/// `POST /v1/responses`. Items, tools and the tool choice are read as JSON values and
/// dispatched on their `type` (an item's `type` may be absent, meaning a message).
#[derive(Deserialize)]
pub(super) struct Request {
    /// Replaced by the channel's model.
    #[serde(rename = "model")]
    pub _model: Option<Value>,
    pub input: Option<Value>,
    pub instructions: Option<String>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub text: Option<TextConfig>,
    pub reasoning: Option<ReasoningConfig>,
    pub max_output_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub user: Option<String>,
    pub safety_identifier: Option<String>,
    pub metadata: Option<Map<String, Value>>,
    pub stream: Option<bool>,
    // Refused when they ask for something.
    pub store: Option<bool>,
    pub previous_response_id: Option<String>,
    pub conversation: Option<Value>,
    pub background: Option<bool>,
    pub include: Option<Vec<String>>,
    pub prompt: Option<Value>,
    pub truncation: Option<String>,
    pub top_logprobs: Option<u64>,
    // Ignored (see the module docs).
    #[serde(rename = "service_tier")]
    pub _service_tier: Option<Value>,
    #[serde(rename = "max_tool_calls")]
    pub _max_tool_calls: Option<Value>,
    #[serde(rename = "prompt_cache_key")]
    pub _prompt_cache_key: Option<Value>,
    #[serde(rename = "prompt_cache_retention")]
    pub _prompt_cache_retention: Option<Value>,
    #[serde(rename = "stream_options")]
    pub _stream_options: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Deserialize)]
pub(super) struct TextConfig {
    pub format: Option<Value>,
    #[serde(rename = "verbosity")]
    pub _verbosity: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `text.format` of type `json_schema`.
#[derive(Deserialize)]
pub(super) struct JsonSchemaFormat {
    #[serde(rename = "type")]
    pub _kind: String,
    pub name: String,
    pub schema: Value,
    pub strict: Option<bool>,
    pub description: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Deserialize)]
pub(super) struct ReasoningConfig {
    pub effort: Option<String>,
    #[serde(rename = "summary")]
    pub _summary: Option<Value>,
    #[serde(rename = "generate_summary")]
    pub _generate_summary: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A `function` tool.
#[derive(Deserialize)]
pub(super) struct FunctionTool {
    #[serde(rename = "type")]
    pub _kind: String,
    pub name: String,
    pub description: Option<String>,
    pub parameters: Option<Value>,
    pub strict: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A `message` input item (an easy input message, an input message or an earlier
/// output message given back).
#[derive(Deserialize)]
pub(super) struct MessageItem {
    #[serde(rename = "type")]
    pub _kind: Option<String>,
    pub role: String,
    pub content: Value,
    #[serde(rename = "id")]
    pub _id: Option<Value>,
    #[serde(rename = "status")]
    pub _status: Option<Value>,
    #[serde(rename = "phase")]
    pub _phase: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A content part of a message, or of a function call's output.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Part {
    InputText {
        text: String,
        #[serde(flatten)]
        extra: Extra,
    },
    InputImage {
        image_url: Option<String>,
        file_id: Option<String>,
        detail: Option<String>,
        #[serde(flatten)]
        extra: Extra,
    },
    OutputText {
        text: String,
        #[serde(rename = "annotations")]
        _annotations: Option<Value>,
        #[serde(rename = "logprobs")]
        _logprobs: Option<Value>,
        #[serde(flatten)]
        extra: Extra,
    },
    Refusal {
        refusal: String,
        #[serde(flatten)]
        extra: Extra,
    },
    InputFile {
        file_data: Option<String>,
        file_id: Option<String>,
        file_url: Option<String>,
        filename: Option<String>,
        #[serde(flatten)]
        extra: Extra,
    },
    /// Refused by `type` (anything unknown).
    #[serde(other)]
    Other,
}

/// A `function_call` item of an earlier turn.
#[derive(Deserialize)]
pub(super) struct FunctionCallItem {
    #[serde(rename = "type")]
    pub _kind: String,
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    #[serde(rename = "id")]
    pub _id: Option<Value>,
    #[serde(rename = "status")]
    pub _status: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A `function_call_output` item.
#[derive(Deserialize)]
pub(super) struct FunctionOutputItem {
    #[serde(rename = "type")]
    pub _kind: String,
    pub call_id: String,
    /// A string or content parts.
    pub output: Value,
    #[serde(rename = "id")]
    pub _id: Option<Value>,
    #[serde(rename = "status")]
    pub _status: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A `reasoning` item of an earlier turn (dropped; read to check its shape).
#[derive(Deserialize)]
pub(super) struct ReasoningItem {
    #[serde(rename = "type")]
    pub _kind: String,
    #[serde(rename = "id")]
    pub _id: Option<Value>,
    #[serde(rename = "summary")]
    pub _summary: Option<Vec<Value>>,
    #[serde(rename = "encrypted_content")]
    pub _encrypted_content: Option<Value>,
    #[serde(rename = "content")]
    pub _content: Option<Value>,
    #[serde(rename = "status")]
    pub _status: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

// ---- The OpenAI chat request written ----

#[derive(Serialize, Default)]
pub(super) struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ChatTool>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Serialize, Default)]
pub(super) struct ChatMessage {
    pub role: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<ChatContent>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ChatToolCall>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum ChatContent {
    Text(String),
    Parts(Vec<ChatPart>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum ChatPart {
    Text { text: String },
    ImageUrl { image_url: ChatImage },
    File { file: ChatFile },
}

/// A chat `file` part given inline.
#[derive(Serialize)]
pub(super) struct ChatFile {
    pub file_data: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
}

#[derive(Serialize)]
pub(super) struct ChatImage {
    pub url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(super) struct ChatToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function")]
    pub kind: String,
    pub function: ChatFunctionCall,
}

fn function() -> String {
    "function".into()
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(super) struct ChatFunctionCall {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

#[derive(Serialize)]
pub(super) struct ChatTool {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: ChatFunction,
}

#[derive(Serialize)]
pub(super) struct ChatFunction {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

// ---- The chat answer read (buffered and streamed) ----

#[derive(Deserialize)]
pub(super) struct ChatCompletion {
    pub id: String,
    #[serde(default)]
    pub created: Option<u64>,
    pub choices: Vec<ChatChoice>,
    #[serde(default)]
    pub usage: Option<ChatUsage>,
}

#[derive(Deserialize)]
pub(super) struct ChatChoice {
    pub message: ChatAnswer,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct ChatAnswer {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub refusal: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<ChatToolCall>>,
    #[serde(default)]
    pub reasoning_content: Option<String>,
}

#[derive(Deserialize, Default, Clone, Copy, Debug)]
#[serde(default)]
pub(super) struct ChatUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: Option<u64>,
    pub prompt_tokens_details: Option<PromptDetails>,
    pub completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize, Default, Clone, Copy, Debug)]
#[serde(default)]
pub(super) struct PromptDetails {
    pub cached_tokens: Option<u64>,
    pub cache_write_tokens: Option<u64>,
}

#[derive(Deserialize, Default, Clone, Copy, Debug)]
#[serde(default)]
pub(super) struct CompletionDetails {
    pub reasoning_tokens: Option<u64>,
}

// ---- The Responses objects written for the client ----

/// A `response` object. The fields echoing the request (tools, tool choice,
/// sampling) hold defaults: the answer translator does not see the request.
#[derive(Serialize, Clone, Debug)]
pub(super) struct Response {
    pub id: String,
    pub object: &'static str,
    pub created_at: u64,
    pub status: &'static str,
    pub background: bool,
    pub completed_at: Option<u64>,
    pub error: Option<Value>,
    pub incomplete_details: Option<Incomplete>,
    pub instructions: Option<Value>,
    pub max_output_tokens: Option<u64>,
    pub max_tool_calls: Option<u64>,
    pub metadata: Map<String, Value>,
    pub model: String,
    pub output: Vec<OutputItem>,
    pub parallel_tool_calls: bool,
    pub previous_response_id: Option<String>,
    pub reasoning: Value,
    pub store: bool,
    pub temperature: Option<f64>,
    pub text: Value,
    pub tool_choice: &'static str,
    pub tools: Vec<Value>,
    pub top_p: Option<f64>,
    pub truncation: &'static str,
    pub usage: Option<Usage>,
    pub user: Option<String>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub(super) struct Incomplete {
    pub reason: &'static str,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum OutputItem {
    Reasoning {
        id: String,
        summary: Vec<SummaryText>,
    },
    Message {
        id: String,
        status: &'static str,
        role: &'static str,
        content: Vec<OutputContent>,
    },
    FunctionCall {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
        status: &'static str,
    },
}

impl OutputItem {
    /// Marks the item as cut short (reasoning items have no status).
    pub(super) fn set_status(&mut self, to: &'static str) {
        match self {
            Self::Message { status, .. } | Self::FunctionCall { status, .. } => *status = to,
            Self::Reasoning { .. } => {}
        }
    }
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub(super) struct SummaryText {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
}

impl SummaryText {
    pub(super) fn new(text: String) -> Self {
        Self {
            kind: "summary_text",
            text,
        }
    }
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum OutputContent {
    OutputText {
        text: String,
        annotations: Vec<Value>,
    },
    Refusal {
        refusal: String,
    },
}

#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Usage {
    pub input_tokens: u64,
    pub input_tokens_details: InputDetails,
    pub output_tokens: u64,
    pub output_tokens_details: OutputDetails,
    pub total_tokens: u64,
}

#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct InputDetails {
    pub cached_tokens: u64,
    pub cache_write_tokens: u64,
}

#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct OutputDetails {
    pub reasoning_tokens: u64,
}
