//! The OpenAI Responses API (`POST /v1/responses`) as a *client's* API, served through
//! OpenAI chat completions (and from there by any channel the hub reaches). An OpenAI
//! channel serves the Responses API as itself, so only three translators exist:
//! requests Responses → chat ([`request_to_chat`]), buffered answers chat → Responses
//! ([`response_from_chat`]) and streams chat → Responses ([`ChatToResponses`]).
//!
//! **Requests.** `instructions` becomes a leading system message; `input` as a string
//! one user message; `input` items, in order:
//! - a `message` (its `type` may be absent) of role user, system, developer or
//!   assistant keeps its role; string content stays a string, parts become chat parts:
//!   `input_text` / `output_text` → text, `input_image` with an `image_url` → an
//!   `image_url` part (its `detail` auto / low / high kept), `refusal` (assistant) →
//!   text (approximated: chat cannot be given a refusal back as such). `id`, `status`,
//!   `phase`, and an output text's `annotations` / `logprobs` are ignored.
//! - `function_call` items become the `tool_calls` of an assistant message: consecutive
//!   calls join one message, which is the assistant text message directly before them
//!   when there is one (a dropped reasoning item in between does not separate them). The `call_id` is the chat tool call id, byte for byte (it may
//!   carry the hub's `__pcx1_` envelope of thinking signatures, given back unchanged).
//! - `function_call_output` → a tool message (`output` as a string, or `input_text`
//!   parts as text parts).
//! - `reasoning` items of earlier turns are **dropped**, whatever they carry: chat
//!   completions cannot take reasoning back. The summaries the gateway itself wrote
//!   carry nothing a provider needs (a thinking signature rides in the tool call id
//!   instead), and `encrypted_content` only OpenAI's own Responses API can read.
//!
//! `tools` of type `function` become chat function tools (`strict` kept);
//! `tool_choice` auto / none / required / `{type: function, name}` and
//! `parallel_tool_calls` map as themselves; `text.format` text / json_object /
//! json_schema → `response_format`; `reasoning.effort` → `reasoning_effort`;
//! `max_output_tokens` → `max_completion_tokens`; `temperature`, `top_p`, `metadata`
//! and `user` are kept (`safety_identifier` becomes `user` when there is none);
//! `stream: true` also asks for usage (`stream_options.include_usage`).
//!
//! **Refused** (`Unsupported`, naming the field by its JSON path in the client's
//! request): `previous_response_id` and `conversation` (they continue state held by
//! OpenAI, and this model is not served by OpenAI's Responses API), `store: true` (the
//! response cannot be stored), `background: true`, `prompt` (stored prompts),
//! `truncation: "auto"`, `top_logprobs` above 0, `include` values other than
//! `reasoning.encrypted_content` (accepted: the answer's reasoning items simply carry
//! none), built-in tools (`web_search`, `file_search`, `computer_use_preview`,
//! `code_interpreter`, `image_generation`, `mcp`, `custom`, …) named `tools[i].type`,
//! tool choices other than the above, input items other than the four above (e.g.
//! `item_reference`, built-in tool calls), an image or `input_file` by `file_id`
//! (files live at OpenAI) or an `input_file` by `file_url`, an image `detail` of
//! `original`, images and files outside user messages, and any unknown field
//! anywhere. An `input_file` given inline (`file_data`) becomes a chat `file` part
//! (which the next leg takes as a PDF).
//!
//! A request with neither `input` nor `instructions` is `Malformed`.
//!
//! A refusal by the *next* leg (chat → Anthropic or Gemini) names the chat request's
//! field (`response_format`, `messages[3].content[0].type`); `client_field` (in
//! `field.rs`) maps such a path back to the client's (`text.format`,
//! `input[5].content[0].type`) for the hub to report.
//!
//! **Ignored on purpose:** `service_tier`, `reasoning.summary` (and the deprecated
//! `generate_summary`; the provider's reasoning text, when it gives one, is returned
//! as a summary anyway), `text.verbosity`, `prompt_cache_key`,
//! `prompt_cache_retention`, `stream_options` (obfuscation is never added),
//! `max_tool_calls` (it limits built-in tools, which are refused), and `model` (the
//! channel's model is written).
//!
//! **Answers.** A `chat.completion` becomes a `response`: id `resp_<chat id>`,
//! `created_at` the chat's `created`; output items in order: a `reasoning` item
//! (`rs_<chat id>`) whose one summary is the message's `reasoning_content`, a
//! `message` (`msg_<chat id>`) with an `output_text` part and / or a `refusal` part,
//! and one `function_call` (`fc_<chat id>_<k>`) per tool call with the tool call id as
//! its `call_id`. `finish_reason` length → status `incomplete` with reason
//! `max_output_tokens`, content_filter → `incomplete` with reason `content_filter`
//! (the last output item is then `incomplete` too); otherwise `completed`. Usage:
//! `prompt_tokens` → `input_tokens` (cached and cache-write details kept, 0 when not
//! given), `completion_tokens` → `output_tokens` (reasoning tokens kept). The fields
//! echoing the request (`tools`, `tool_choice`, `parallel_tool_calls`, `temperature`,
//! `top_p`, `text`, `reasoning`, `metadata`, `instructions`, …) are present, as the
//! SDKs expect, with defaults or null: the answer translator does not see the request
//! (approximated). `store` is false. More or less than one choice is `Malformed`.
//!
//! **Streams.** Chat chunks become the Responses events (`event: <type>` plus data,
//! `sequence_number` from 0): `response.created` and `response.in_progress` at the
//! first chunk; per output item `response.output_item.added` … `.done`; text as
//! `response.content_part.added` / `response.output_text.delta` / `.done` /
//! `response.content_part.done` (a refusal as a refusal part with
//! `response.refusal.delta` / `.done`); `reasoning_content` as a reasoning item with
//! one summary part (`response.reasoning_summary_part.added`,
//! `response.reasoning_summary_text.delta` / `.done`, `…part.done`), as in buffered
//! answers; each tool call as a `function_call` item with
//! `response.function_call_arguments.delta` / `.done`, parallel calls each under their
//! own `output_index`, interleaved or not. An item stays open until an item of another
//! kind starts (tool calls stay open together until text or reasoning follows, or the
//! end; argument deltas for a call closed that way are dropped). The stream ends at
//! `[DONE]`, or once both a `finish_reason` and the usage chunk have been seen (or at
//! the end of the body after a `finish_reason`), with `response.completed` (or
//! `response.incomplete`) carrying the whole response and its usage. A stream cut
//! before its `finish_reason`, a malformed chunk, or an in-stream `{"error": …}` chunk
//! ends with an `error` event (`code` `stream_truncated`, `malformed_event`, or the
//! provider's code) and nothing after it. Memory per event is bounded; the output items
//! are accumulated for `response.completed`, bounded by the answer.
//!
//! The wire types (`wire.rs`) are written by hand rather than taken from a crate: the
//! maintained client crates (`async-openai` and the like) model a client's view — they
//! drop unknown fields, change optionality across releases and pull in an HTTP client
//! — where a gateway must see every field it cannot translate, to refuse it.

mod field;
mod request;
mod response;
mod stream;
mod wire;

// For the hub, to name a refusal of the next leg by the client's path (`field.rs`).
pub(crate) use field::client_field;
pub(crate) use request::request_to_chat;
pub(crate) use response::response_from_chat;
pub(crate) use stream::ChatToResponses;

use wire::{ChatUsage, Incomplete, InputDetails, OutputDetails, Response, Usage};

/// The Responses usage of a chat usage.
fn usage(u: &ChatUsage) -> Usage {
    let prompt = u.prompt_tokens_details.unwrap_or_default();
    let completion = u.completion_tokens_details.unwrap_or_default();
    Usage {
        input_tokens: u.prompt_tokens,
        input_tokens_details: InputDetails {
            cached_tokens: prompt.cached_tokens.unwrap_or(0),
            cache_write_tokens: prompt.cache_write_tokens.unwrap_or(0),
        },
        output_tokens: u.completion_tokens,
        output_tokens_details: OutputDetails {
            reasoning_tokens: completion.reasoning_tokens.unwrap_or(0),
        },
        total_tokens: u
            .total_tokens
            .unwrap_or(u.prompt_tokens + u.completion_tokens),
    }
}

/// The status and incomplete details of a chat `finish_reason`.
fn status_of(finish: Option<&str>) -> (&'static str, Option<Incomplete>) {
    match finish {
        Some("length") => (
            "incomplete",
            Some(Incomplete {
                reason: "max_output_tokens",
            }),
        ),
        Some("content_filter") => (
            "incomplete",
            Some(Incomplete {
                reason: "content_filter",
            }),
        ),
        _ => ("completed", None),
    }
}

/// A response object with no output yet, `status` as given.
fn skeleton(chat_id: &str, created_at: u64, model: &str, status: &'static str) -> Response {
    Response {
        id: format!("resp_{chat_id}"),
        object: "response",
        created_at,
        status,
        background: false,
        completed_at: None,
        error: None,
        incomplete_details: None,
        instructions: None,
        max_output_tokens: None,
        max_tool_calls: None,
        metadata: serde_json::Map::new(),
        model: model.to_owned(),
        output: Vec::new(),
        parallel_tool_calls: true,
        previous_response_id: None,
        reasoning: serde_json::json!({"effort": null, "summary": null}),
        store: false,
        temperature: None,
        text: serde_json::json!({"format": {"type": "text"}}),
        tool_choice: "auto",
        tools: Vec::new(),
        top_p: None,
        truncation: "disabled",
        usage: None,
        user: None,
    }
}

/// A finished response: status and details from `finish`, the last item marked
/// incomplete when the answer was cut short.
fn finished(mut r: Response, finish: Option<&str>, now: u64) -> Response {
    let (status, incomplete) = status_of(finish);
    r.status = status;
    if incomplete.is_some() {
        if let Some(last) = r.output.last_mut() {
            last.set_status("incomplete");
        }
    } else {
        r.completed_at = Some(now);
    }
    r.incomplete_details = incomplete;
    r
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod request_tests;
#[cfg(test)]
mod stream_tests;
