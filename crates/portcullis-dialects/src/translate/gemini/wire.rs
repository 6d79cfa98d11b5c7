//! The typed wire structures of both sides, written by hand (see the module docs of
//! [`super`]): Gemini `generateContent` requests, answers and stream chunks in their
//! camelCase JSON, and the OpenAI chat-completions shapes this translator reads and
//! writes. A client request's fields these types do not know land in an `extra` map
//! and are refused; an answer's unknown fields are ignored.
use crate::translate::request::{Extra, OaToolCall};
use serde::{Deserialize, Serialize};
use serde_json::Value;

// ---- Gemini ----

/// A `generateContent` request body (the model is in the URL path).
#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct GRequest {
    #[serde(default)]
    pub(super) contents: Vec<GContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) system_instruction: Option<GContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tools: Option<Vec<GTool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tool_config: Option<GToolConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) generation_config: Option<GGenerationConfig>,
    /// Refused unless empty.
    #[serde(default, skip_serializing)]
    pub(super) safety_settings: Option<Value>,
    /// Refused: a cache name means something to Gemini only.
    #[serde(default, skip_serializing)]
    pub(super) cached_content: Option<Value>,
    /// Ignored: the path's model wins.
    #[serde(default, rename = "model", skip_serializing)]
    pub(super) _model: Option<Value>,
    #[serde(flatten)]
    pub(super) extra: Extra,
}

/// One turn (or the system instruction).
#[derive(Serialize, Deserialize, Default, Clone, Debug, PartialEq)]
pub(super) struct GContent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) role: Option<String>,
    #[serde(default)]
    pub(super) parts: Vec<GPart>,
    #[serde(flatten)]
    pub(super) extra: Extra,
}

/// A part: text (maybe a thought), inline data, a file, a function call or response.
/// Other kinds (`executableCode`, `codeExecutionResult`, `videoMetadata`, …) land in
/// `extra`.
#[derive(Serialize, Deserialize, Default, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(super) struct GPart {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) thought: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) thought_signature: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) inline_data: Option<GBlob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) file_data: Option<GFileData>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) function_call: Option<GFunctionCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) function_response: Option<GFunctionResponse>,
    #[serde(flatten)]
    pub(super) extra: Extra,
}

impl GPart {
    pub(super) fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(super) struct GBlob {
    pub(super) mime_type: String,
    pub(super) data: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(super) struct GFileData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) mime_type: Option<String>,
    pub(super) file_uri: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(super) struct GFunctionCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) id: Option<String>,
    pub(super) name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) args: Option<Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(super) struct GFunctionResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) id: Option<String>,
    pub(super) name: String,
    #[serde(default)]
    pub(super) response: Value,
    /// `willContinue`, `scheduling`, `parts`: refused.
    #[serde(flatten)]
    pub(super) extra: Extra,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct GTool {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) function_declarations: Option<Vec<GFunctionDeclaration>>,
    /// `googleSearch`, `codeExecution`, `urlContext`, …: refused.
    #[serde(flatten)]
    pub(super) extra: Extra,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct GFunctionDeclaration {
    pub(super) name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) description: Option<String>,
    /// An OpenAPI-subset schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) parameters: Option<Value>,
    /// A JSON schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) parameters_json_schema: Option<Value>,
    /// The result's schema: dropped (chat has none).
    #[serde(default, rename = "response", skip_serializing)]
    pub(super) _response: Option<Value>,
    #[serde(default, rename = "responseJsonSchema", skip_serializing)]
    pub(super) _response_json_schema: Option<Value>,
    /// `behavior`, …: refused.
    #[serde(flatten)]
    pub(super) extra: Extra,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct GToolConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) function_calling_config: Option<GFunctionCallingConfig>,
    /// `retrievalConfig`: refused.
    #[serde(flatten)]
    pub(super) extra: Extra,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct GFunctionCallingConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) allowed_function_names: Option<Vec<String>>,
    #[serde(flatten)]
    pub(super) extra: Extra,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct GGenerationConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) stop_sequences: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) response_mime_type: Option<String>,
    /// An OpenAPI-subset schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) response_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) response_json_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) response_modalities: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) candidate_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) max_output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) top_p: Option<f64>,
    /// Refused (chat has no top-k).
    #[serde(default, skip_serializing)]
    pub(super) top_k: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) frequency_penalty: Option<f64>,
    /// Refused when true.
    #[serde(default, skip_serializing)]
    pub(super) response_logprobs: Option<bool>,
    /// Refused.
    #[serde(default, skip_serializing)]
    pub(super) logprobs: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) thinking_config: Option<GThinkingConfig>,
    /// `speechConfig`, `mediaResolution`, …: refused.
    #[serde(flatten)]
    pub(super) extra: Extra,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct GThinkingConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) include_thoughts: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) thinking_budget: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) thinking_level: Option<String>,
    #[serde(flatten)]
    pub(super) extra: Extra,
}

/// A `GenerateContentResponse`: a buffered answer or one stream chunk (which may be
/// an `error` instead).
#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct GResponse {
    #[serde(default)]
    pub(super) candidates: Vec<GCandidate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) prompt_feedback: Option<GPromptFeedback>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) usage_metadata: Option<GUsage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) model_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) response_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<GError>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct GCandidate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) content: Option<GContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) finish_reason: Option<String>,
    #[serde(default)]
    pub(super) index: u32,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct GPromptFeedback {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) block_reason: Option<String>,
}

/// `usageMetadata`. `promptTokenCount` includes `cachedContentTokenCount`;
/// `candidatesTokenCount` excludes `thoughtsTokenCount`.
#[derive(Serialize, Deserialize, Default, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(super) struct GUsage {
    #[serde(default)]
    pub(super) prompt_token_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) cached_content_token_count: Option<u64>,
    #[serde(default)]
    pub(super) candidates_token_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tool_use_prompt_token_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) thoughts_token_count: Option<u64>,
    #[serde(default)]
    pub(super) total_token_count: u64,
}

/// A Gemini error's inner object (`{"error": {...}}`).
#[derive(Serialize, Deserialize, Default, Clone, Debug)]
pub(super) struct GError {
    #[serde(default)]
    pub(super) code: u16,
    #[serde(default)]
    pub(super) message: String,
    #[serde(default)]
    pub(super) status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) details: Option<Vec<Value>>,
}

// ---- OpenAI chat completions ----

/// A chat request. Fields Gemini cannot express are read to be refused.
#[derive(Serialize, Deserialize, Default)]
pub(super) struct ChatRequest {
    #[serde(default)]
    pub(super) model: String,
    pub(super) messages: Vec<ChatMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) max_completion_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) stop: Option<ChatStop>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) frequency_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) response_format: Option<ChatResponseFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) stream_options: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tools: Option<Vec<ChatTool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tool_choice: Option<ChatToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) parallel_tool_calls: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) reasoning_effort: Option<String>,
    // Refused when they ask for something.
    #[serde(default, skip_serializing)]
    pub(super) n: Option<u64>,
    #[serde(default, skip_serializing)]
    pub(super) logprobs: Option<bool>,
    #[serde(default, skip_serializing)]
    pub(super) top_logprobs: Option<Value>,
    #[serde(default, skip_serializing)]
    pub(super) logit_bias: Option<Value>,
    #[serde(default, skip_serializing)]
    pub(super) audio: Option<Value>,
    #[serde(default, skip_serializing)]
    pub(super) modalities: Option<Vec<String>>,
    #[serde(default, skip_serializing)]
    pub(super) prediction: Option<Value>,
    // Ignored: they do not change the answer.
    #[serde(default, rename = "user", skip_serializing)]
    pub(super) _user: Option<Value>,
    #[serde(default, rename = "store", skip_serializing)]
    pub(super) _store: Option<Value>,
    #[serde(default, rename = "metadata", skip_serializing)]
    pub(super) _metadata: Option<Value>,
    #[serde(default, rename = "service_tier", skip_serializing)]
    pub(super) _service_tier: Option<Value>,
    #[serde(flatten)]
    pub(super) extra: Extra,
}

#[derive(Serialize, Deserialize, Default)]
pub(super) struct ChatMessage {
    pub(super) role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) content: Option<ChatContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tool_calls: Option<Vec<OaToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tool_call_id: Option<String>,
    // Ignored: earlier turns' reasoning is not sent back to Gemini.
    #[serde(default, rename = "reasoning_content", skip_serializing)]
    pub(super) _reasoning_content: Option<Value>,
    #[serde(default, rename = "refusal", skip_serializing)]
    pub(super) _refusal: Option<Value>,
    #[serde(default, rename = "annotations", skip_serializing)]
    pub(super) _annotations: Option<Value>,
    #[serde(flatten)]
    pub(super) extra: Extra,
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum ChatContent {
    Text(String),
    Parts(Vec<ChatPart>),
}

#[derive(Serialize, Deserialize)]
pub(super) struct ChatPart {
    #[serde(rename = "type")]
    pub(super) kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) image_url: Option<ChatImageUrl>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) file: Option<ChatFile>,
    #[serde(flatten)]
    pub(super) extra: Extra,
}

/// A chat `file` part: inline as a data URL, or the id of a file uploaded to OpenAI.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ChatFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) file_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) file_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) filename: Option<String>,
}

/// The file type chat and Gemini both take inline besides images.
pub(super) const PDF: &str = "application/pdf";

impl ChatPart {
    pub(super) fn text(text: String) -> Self {
        Self {
            kind: "text".into(),
            text: Some(text),
            image_url: None,
            file: None,
            extra: Extra::new(),
        }
    }

    /// A PDF given inline (base64).
    pub(super) fn pdf(data: String) -> Self {
        Self {
            kind: "file".into(),
            text: None,
            image_url: None,
            file: Some(ChatFile {
                file_data: Some(format!("data:{PDF};base64,{data}")),
                file_id: None,
                filename: Some("document.pdf".into()),
            }),
            extra: Extra::new(),
        }
    }

    pub(super) fn image(url: String) -> Self {
        Self {
            kind: "image_url".into(),
            text: None,
            image_url: Some(ChatImageUrl { url, detail: None }),
            file: None,
            extra: Extra::new(),
        }
    }
}

#[derive(Serialize, Deserialize)]
pub(super) struct ChatImageUrl {
    pub(super) url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) detail: Option<String>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct ChatTool {
    #[serde(rename = "type")]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) function: Option<ChatFunction>,
    #[serde(flatten)]
    pub(super) extra: Extra,
}

#[derive(Serialize, Deserialize)]
pub(super) struct ChatFunction {
    pub(super) name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) parameters: Option<Value>,
    /// Ignored (Gemini validates calls against the schema in its own way).
    #[serde(default, rename = "strict", skip_serializing)]
    pub(super) _strict: Option<Value>,
    #[serde(flatten)]
    pub(super) extra: Extra,
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum ChatToolChoice {
    Mode(String),
    Named {
        #[serde(rename = "type")]
        kind: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        function: Option<ChatName>,
    },
}

#[derive(Serialize, Deserialize)]
pub(super) struct ChatName {
    pub(super) name: String,
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum ChatStop {
    One(String),
    Many(Vec<String>),
}

#[derive(Serialize, Deserialize)]
pub(super) struct ChatResponseFormat {
    #[serde(rename = "type")]
    pub(super) kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) json_schema: Option<ChatJsonSchema>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct ChatJsonSchema {
    pub(super) name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) strict: Option<bool>,
}

/// A `chat.completion` answer.
#[derive(Serialize, Deserialize)]
pub(super) struct ChatCompletion {
    pub(super) id: String,
    pub(super) object: String,
    #[serde(default)]
    pub(super) created: u64,
    #[serde(default)]
    pub(super) model: String,
    pub(super) choices: Vec<ChatChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) usage: Option<ChatUsage>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct ChatChoice {
    #[serde(default)]
    pub(super) index: u32,
    pub(super) message: ChatAnswer,
    pub(super) finish_reason: Option<String>,
    #[serde(default)]
    pub(super) logprobs: Option<Value>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct ChatAnswer {
    pub(super) role: String,
    pub(super) content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tool_calls: Option<Vec<OaToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) reasoning_content: Option<String>,
    #[serde(default)]
    pub(super) refusal: Option<String>,
}

/// OpenAI usage: `prompt_tokens` includes the cached ones, `completion_tokens` the
/// reasoning ones.
#[derive(Serialize, Deserialize, Default, Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ChatUsage {
    #[serde(default)]
    pub(super) prompt_tokens: u64,
    #[serde(default)]
    pub(super) completion_tokens: u64,
    #[serde(default)]
    pub(super) total_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) prompt_tokens_details: Option<ChatPromptDetails>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) completion_tokens_details: Option<ChatCompletionDetails>,
}

#[derive(Serialize, Deserialize, Default, Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ChatPromptDetails {
    #[serde(default)]
    pub(super) cached_tokens: Option<u64>,
}

#[derive(Serialize, Deserialize, Default, Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ChatCompletionDetails {
    #[serde(default)]
    pub(super) reasoning_tokens: Option<u64>,
}

/// A `chat.completion.chunk` (or an in-stream `{"error": …}`); unknown fields ignored.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ChatChunk {
    pub(super) id: String,
    pub(super) choices: Vec<ChunkChoice>,
    pub(super) usage: Option<ChatUsage>,
    pub(super) error: Option<ChatError>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ChunkChoice {
    pub(super) index: u64,
    pub(super) delta: Option<ChunkDelta>,
    pub(super) finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ChunkDelta {
    pub(super) content: Option<String>,
    pub(super) reasoning_content: Option<String>,
    pub(super) refusal: Option<String>,
    pub(super) tool_calls: Option<Vec<ChunkToolCall>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ChunkToolCall {
    pub(super) index: u64,
    pub(super) id: Option<String>,
    pub(super) function: Option<ChunkFunction>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ChunkFunction {
    pub(super) name: Option<String>,
    pub(super) arguments: Option<String>,
}

/// An OpenAI error's inner object.
#[derive(Serialize, Deserialize, Default, Debug)]
pub(super) struct ChatError {
    #[serde(default)]
    pub(super) message: String,
    #[serde(rename = "type", default)]
    pub(super) kind: Option<String>,
    #[serde(default)]
    pub(super) param: Option<Value>,
    #[serde(default)]
    pub(super) code: Option<Value>,
}
