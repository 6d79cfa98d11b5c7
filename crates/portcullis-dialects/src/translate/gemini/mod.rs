//! Gemini `generateContent` / `streamGenerateContent` ↔ OpenAI chat completions (the
//! hub of [`super::Wire`]): requests, buffered answers, SSE streams and errors.
//!
//! The wire types ([`wire`]) are written by hand: the community Gemini crates model a
//! *client's* view — they drop unknown fields and pull in an HTTP client — where a
//! gateway must see every field it cannot translate (to refuse it). Gemini's camelCase
//! field names are read (the REST API also takes snake_case; those are unknown here
//! and refused by name).
//!
//! # What maps to what
//!
//! | Gemini | OpenAI chat |
//! |---|---|
//! | `systemInstruction.parts[].text` | system / developer messages (hoisted to the front, joined — approximated) |
//! | `contents[]` role `user` / `model` (consecutive turns of one role kept) | `user` / `assistant` messages |
//! | `text` part, `thought: true` text part | content text, `reasoning_content` (answers; thoughts of earlier turns are not sent back) |
//! | `inlineData {mimeType: image/*, data}` | `image_url` with a `data:` URL |
//! | `inlineData {mimeType: application/pdf, data}` | a `file` part with a base64 `data:` URL (`file_data`; an uploaded `file_id` is refused) |
//! | `fileData {mimeType: image/*, fileUri}` (from a Gemini client) | `image_url` with the file URI |
//! | `functionCall {id?, name, args}` parts (several in parallel) | assistant `tool_calls`, each with its own id: Gemini's `id`, else `call_<n>` (`n` counts the calls of the request or of the answer) |
//! | `functionResponse {id?, name, response}` | a `tool` message; its `tool_call_id` is the matching earlier call's (by id, else by name in order); chat → Gemini takes the name from the earlier assistant turn's call of that id, puts consecutive tool messages in one user turn, and a content that is a JSON object is the `response`, otherwise `{"result": text}` (and back: `{"result": "<string>"}` is the string, any other response its JSON text) |
//! | `tools[].functionDeclarations[]` (`parametersJsonSchema`, or `parameters` converted from the OpenAPI subset: lower-case types, `nullable` → a `null` type, `propertyOrdering` dropped) | `tools[].function {name, description, parameters}` (to Gemini always as `parametersJsonSchema`) |
//! | `toolConfig.functionCallingConfig.mode` AUTO / ANY / NONE, ANY with one `allowedFunctionNames` | `tool_choice` auto / required / none / `{type: function, function: {name}}`; ANY with several names offers only those tools with `required` |
//! | `generationConfig.maxOutputTokens` | `max_completion_tokens` (or `max_tokens`) |
//! | `temperature`, `topP`, `stopSequences`, `seed`, `presencePenalty`, `frequencyPenalty` | `temperature`, `top_p`, `stop`, `seed`, `presence_penalty`, `frequency_penalty` |
//! | `responseMimeType: application/json` + `responseJsonSchema` (or `responseSchema`, converted) / alone | `response_format` json_schema (`name: "response"` from Gemini; the schema's name, description and `strict` are not sent to Gemini) / json_object |
//! | `thinkingConfig.thinkingBudget` 0 / 1–4607 / 4608–16383 / ≥ 16384 / −1 (dynamic) | `reasoning_effort` none / low / medium / high / medium |
//! | `thinkingConfig {thinkingBudget: 1024 / 8192 / 24576, includeThoughts: true}`, `{thinkingBudget: 0}` | `reasoning_effort` low / medium / high, none or minimal |
//! | `thinkingConfig.thinkingLevel` minimal / low / medium / high | `reasoning_effort` of the same name |
//! | `finishReason` STOP (with calls: `tool_calls`), MAX_TOKENS, SAFETY / RECITATION / BLOCKLIST / PROHIBITED_CONTENT / SPII / IMAGE_SAFETY; a blocked prompt | `finish_reason` stop / tool_calls, length, content_filter (→ SAFETY), content_filter |
//! | `usageMetadata` | `usage`: `prompt_tokens` = `promptTokenCount` (+ `toolUsePromptTokenCount`; cached tokens are already in it), `completion_tokens` = `candidatesTokenCount + thoughtsTokenCount`, `cached_tokens` = `cachedContentTokenCount`, `reasoning_tokens` = `thoughtsTokenCount`, `total_tokens` their sum; back: `candidatesTokenCount` = completion − reasoning |
//! | error `status` / `code` | error status, `type`, `code` (table in [`error`]) |
//!
//! **Thought signatures.** A `functionCall` part's `thoughtSignature` rides in that
//! tool call's id (the `__pcx1_` envelope of `request::wrap_tool_id`, one
//! `{"type":"gemini_signature","signature":…}` block) so that the client's next turn
//! gives it back: chat → Gemini unwraps every assistant tool call id and `tool_call_id`,
//! puts the signature back on its `functionCall` part and sends the plain id. Envelope
//! blocks of other types (Anthropic thinking) are not sent to Gemini. Towards a Gemini
//! *client*, a `functionCall` part's `id` is the chat tool call id whole, envelope
//! included, so that another vendor's thinking blocks come back with the client's next
//! turn (which echoes the id on the call and its `functionResponse`; a response without
//! an id is matched to its call by name). A signature on a text part of an answer is
//! dropped (Gemini requires only the function-call ones back), as are the signatures a
//! Gemini client's own history carries towards chat.
//!
//! **Refused** (`Unsupported`, naming the field in the client's naming and JSON path):
//! from a Gemini client, `safetySettings`, `cachedContent`, `generationConfig.topK`,
//! `candidateCount` > 1, `responseLogprobs`, `logprobs`, non-TEXT `responseModalities`,
//! other response MIME types, a schema without the JSON MIME type, thinking budgets
//! below −1 and unknown thinking levels, `fileData` / `inlineData` that are not
//! images (`contents[2].parts[0].fileData`), images in model turns, function calls in
//! user turns, non-function tools (`tools[0].googleSearch`), mode VALIDATED,
//! `allowedFunctionNames` without ANY, roles other than user / model, and any unknown
//! field (`functionDeclarations[].response` / `responseJsonSchema` are dropped, and a
//! body's `model` is ignored: the path's wins). From a chat client, `n` > 1,
//! `logprobs`, `top_logprobs`, `logit_bias`, `audio`, non-text `modalities`,
//! `prediction`, `parallel_tool_calls: false` (Gemini cannot forbid parallel calls),
//! image URLs that are not base64 `data:` URLs (Gemini does not fetch them), image
//! `detail` other than auto, content parts other than text / image_url, a message
//! `name`, unknown roles and `reasoning_effort` values, non-function tools and tool
//! choices, and any unknown field. Ignored: `user`, `store`, `metadata`,
//! `service_tier`, `stream_options`, a tool's `strict`, an assistant's `refusal`,
//! `annotations` and `reasoning_content`.
//!
//! **Answers.** Only the first candidate is translated. MALFORMED_FUNCTION_CALL and
//! UNEXPECTED_TOOL_CALL are not a stop without calls: a buffered answer is `Malformed`
//! (the client's 502) and a stream ends with the client's in-stream error. Generated
//! images in an answer are refused; other unknown parts are ignored. Thought parts are
//! returned whenever the provider reasons, even if the Gemini client did not ask for
//! `includeThoughts` (approximated). Empty text parts are dropped.
//!
//! **Streams.** Gemini's `?alt=sse` chunks have no terminal event: the chunk with a
//! `finishReason` ends the stream (its usage is read from the same chunk; anything
//! after it is ignored), and a body ending without one is a truncation. Towards a
//! Gemini client, text and reasoning deltas stream as they come; a tool call is
//! accumulated per index and sent as one `functionCall` part once its arguments form a
//! JSON object and a later call starts (in index order), or at the end. The last chunk
//! carries `finishReason` and `usageMetadata` (intermediate chunks carry none). An
//! in-stream error (Gemini's `{"error": …}` chunk, OpenAI's `{"error": …}` data) ends
//! the stream with the client's in-stream error, mapped as in [`error`].
mod error;
mod request_config;
mod request_from_chat;
mod request_to_chat;
mod response;
mod schema;
mod stream_from_chat;
mod stream_to_chat;
#[cfg(test)]
mod tests;
mod wire;

pub(crate) use error::{error_from_chat, error_to_chat};
pub(crate) use request_from_chat::request_from_chat;
pub(crate) use request_to_chat::request_to_chat;
pub(crate) use response::{response_from_chat, response_to_chat};
pub(crate) use stream_from_chat::ChatToGemini;
pub(crate) use stream_to_chat::GeminiToChat;

use super::TranslateError;
use super::request::{
    Extra, OaFunctionCall, OaToolCall, unsupported, unwrap_tool_id, wrap_tool_id,
};
use serde::Serialize;
use serde_json::{Value, json};
use wire::{ChatUsage, GFunctionCall, GPart, GUsage};

const CHAT: &str = "OpenAI chat completions";
const GEMINI: &str = "Gemini";
/// The envelope block type carrying a Gemini thought signature.
const SIGNATURE_BLOCK: &str = "gemini_signature";

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Refuses the first field of `extra` (fields the typed structures do not know).
fn refuse_extra(path: &str, extra: &Extra, target: &str) -> Result<(), TranslateError> {
    match extra.keys().next() {
        None => Ok(()),
        Some(k) => Err(unsupported(
            join(path, k),
            format!("this field has no equivalent in {target}"),
        )),
    }
}

fn ser<T: Serialize>(v: &T) -> Result<Vec<u8>, TranslateError> {
    serde_json::to_vec(v).map_err(|e| TranslateError::Malformed(e.to_string()))
}

fn malformed(m: impl Into<String>) -> TranslateError {
    TranslateError::Malformed(m.into())
}

/// A value that asks for something (not absent, null, false, 0 or empty).
fn asks(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null | Value::Bool(false)) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(_) => true,
    }
}

/// `id` carrying a Gemini thought signature (unchanged without one).
fn wrap_signature(id: &str, signature: Option<&str>) -> String {
    match signature {
        Some(s) => wrap_tool_id(id, &[json!({"type": SIGNATURE_BLOCK, "signature": s})]),
        None => id.to_owned(),
    }
}

/// The plain id and the Gemini thought signature a tool call id carries (other
/// envelope blocks are ignored).
fn unwrap_signature(id: &str) -> (String, Option<String>) {
    let (id, blocks) = unwrap_tool_id(id);
    let signature = blocks.into_iter().flatten().find_map(|b| {
        (b.get("type").and_then(Value::as_str) == Some(SIGNATURE_BLOCK))
            .then(|| {
                b.get("signature")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .flatten()
    });
    (id, signature)
}

/// A Gemini function call as chat tool call number `n` of its answer or request.
fn call_to_chat(call: GFunctionCall, signature: Option<&str>, n: usize) -> OaToolCall {
    let id = call.id.unwrap_or_else(|| format!("call_{n}"));
    let args = match call.args {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(a) => a.to_string(),
    };
    OaToolCall {
        id: wrap_signature(&id, signature),
        kind: "function".into(),
        function: OaFunctionCall {
            name: call.name,
            arguments: args,
        },
    }
}

/// Which id a `functionCall` part gets from its chat tool call.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CallId {
    /// The plain id (a request to a Gemini channel: the envelope is Gemini's
    /// `thoughtSignature` there, other vendors' blocks mean nothing to it).
    Plain,
    /// The chat id whole, envelope included (an answer to a Gemini client: another
    /// vendor's thinking blocks come back with the client's next turn, which echoes
    /// the id on the call and on its `functionResponse`).
    Whole,
}

/// A chat tool call (at `path`, for errors) as a Gemini `functionCall` part, its
/// thought signature restored.
fn call_from_chat(path: &str, call: OaToolCall, ids: CallId) -> Result<GPart, TranslateError> {
    let (plain, signature) = unwrap_signature(&call.id);
    let id = match ids {
        CallId::Plain => plain,
        CallId::Whole => call.id,
    };
    let args = function_args(path, &call.function.arguments)?;
    Ok(GPart {
        thought_signature: signature,
        function_call: Some(GFunctionCall {
            id: (!id.is_empty()).then_some(id),
            name: call.function.name,
            args: Some(args),
        }),
        ..GPart::default()
    })
}

/// Tool call arguments as a JSON object (empty: `{}`).
fn function_args(path: &str, args: &str) -> Result<Value, TranslateError> {
    let args = args.trim();
    if args.is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    match serde_json::from_str::<Value>(args) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(malformed(format!(
            "{path}.function.arguments is not a JSON object"
        ))),
        Err(e) => Err(malformed(format!(
            "{path}.function.arguments is not JSON: {e}"
        ))),
    }
}

/// The chat finish reason of a Gemini one; `Err` for a malformed function call (never
/// a stop without calls).
fn finish_to_chat(reason: &str, has_calls: bool) -> Result<&'static str, String> {
    Ok(match reason {
        "MAX_TOKENS" => "length",
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => "content_filter",
        "MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL" => {
            return Err(format!(
                "the provider ended its answer with {reason}: it produced an invalid function call"
            ));
        }
        _ if has_calls => "tool_calls",
        _ => "stop",
    })
}

/// The Gemini finish reason of a chat one.
fn finish_from_chat(reason: Option<&str>) -> &'static str {
    match reason {
        Some("length") => "MAX_TOKENS",
        Some("content_filter") => "SAFETY",
        _ => "STOP",
    }
}

/// Gemini usage as OpenAI's, by meaning (cached tokens are part of the prompt on both
/// sides; reasoning is part of the completion in OpenAI only).
fn usage_to_chat(u: &GUsage) -> ChatUsage {
    let thoughts = u.thoughts_token_count.unwrap_or(0);
    let prompt = u.prompt_token_count + u.tool_use_prompt_token_count.unwrap_or(0);
    let completion = u.candidates_token_count + thoughts;
    ChatUsage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
        prompt_tokens_details: Some(wire::ChatPromptDetails {
            cached_tokens: Some(u.cached_content_token_count.unwrap_or(0)),
        }),
        completion_tokens_details: Some(wire::ChatCompletionDetails {
            reasoning_tokens: Some(thoughts),
        }),
    }
}

/// OpenAI usage as Gemini's (zero counts omitted, as Gemini does).
fn usage_from_chat(u: &ChatUsage) -> GUsage {
    let cached = u
        .prompt_tokens_details
        .and_then(|d| d.cached_tokens)
        .unwrap_or(0);
    let reasoning = u
        .completion_tokens_details
        .and_then(|d| d.reasoning_tokens)
        .unwrap_or(0)
        .min(u.completion_tokens);
    GUsage {
        prompt_token_count: u.prompt_tokens,
        cached_content_token_count: (cached > 0).then_some(cached),
        candidates_token_count: u.completion_tokens - reasoning,
        tool_use_prompt_token_count: None,
        thoughts_token_count: (reasoning > 0).then_some(reasoning),
        total_token_count: u.prompt_tokens + u.completion_tokens,
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

use super::stream::leg::{MALFORMED as MALFORMED_EVENT, TRUNCATED};
