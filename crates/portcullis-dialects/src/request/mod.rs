//! Request inspection: what the gateway must know about a request before sending it
//! (W5 reservation, U2 upstream limits, F11 fallback contract, E4 invalid requests).
//!
//! The body is walked once with `serde_json`'s streaming deserializer, and a type error
//! names the offending field by its JSON path. Nesting is bounded by `serde_json`'s
//! recursion limit (128), so hostile bodies cannot exhaust the stack.
//!
//! - The small settings objects (`stream_options`, `response_format` /
//!   `output_format`, `output_config`, `generationConfig`) are derived structs;
//!   `serde_path_to_error` gives the path of a bad field inside them.
//! - The messages, their content blocks and parts, `tools` and the top-level object
//!   keep hand-written visitors, for constant memory over huge message arrays: each
//!   element is counted into the running `Tally` as it is read and nothing of it is
//!   kept (a derived `Vec<Message>` would hold the whole conversation); text is
//!   measured, not copied; base64 media and unknown fields are skipped without
//!   allocation. The lenient readers (`type`, `media_type`, `data`, `inlineData`, a
//!   modality) take any value and look only at strings, which a derive can express
//!   only with an untagged enum, and that buffers the value first (a 100 MB base64
//!   `data` would be copied).
//! - What the vendors' rules make of the values read (maximum output, choices, usage
//!   reporting, Gemini's model in the path) is in [`providers`].
//!
//! Here: what a request is ([`Operation`], [`RequestFacts`], [`RequestError`]) and
//! [`inspect_request`]. The walk over the body is in `walk`, what it read (the vendor
//! rules' input) in `read`, the readers of single values it shares (key classes,
//! lengths, counts, sizes) in `seeds`, the settings objects in `settings`, and why a
//! body cannot be inspected in `error`.

use crate::estimate;
use crate::providers;
use portcullis_core::{Demand, Dialect, Price};
use serde::de::DeserializeSeed;

/// What a request asks the provider to do, from its path: it decides what the request
/// is counted and billed for (P6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Generate content: OpenAI chat completions and Responses, Anthropic messages,
    /// Gemini `generateContent` / `streamGenerateContent`. Input and output tokens,
    /// media, money.
    #[default]
    Generate,
    /// Embeddings: OpenAI `/v1/embeddings`, Gemini `embedContent` /
    /// `batchEmbedContents`. Input tokens only: no output is reserved, the money bound
    /// is the input's price.
    Embed,
    /// Token counting: Anthropic `/v1/messages/count_tokens`, Gemini `countTokens`.
    /// Free: no tokens reserved against any tier or provider limit, no money; counted
    /// as a request only.
    CountTokens,
    /// A video generation job: OpenAI `POST /v1/videos`. One video against the video
    /// tiers and the `per_video` price; no tokens.
    Video,
    /// A request about an object the provider holds: OpenAI `/v1/responses/{id}` (read,
    /// delete, `cancel`, `input_items`) and `/v1/videos/{id}` (poll, `content`,
    /// delete). Counted as a request, never billed, sent to the object's creator. Not
    /// read by [`inspect_request`] (there may be no body to read): the caller knows
    /// the object's model from its home.
    Object,
}

impl Operation {
    /// The operation a request of `dialect` sent to `path` asks for (the query is
    /// ignored). Gemini's method is the part after the model's `:`.
    ///
    /// ```
    /// use portcullis_dialects::{Dialect, request::Operation};
    /// assert_eq!(Operation::of(Dialect::OpenAi, "/v1/embeddings"), Operation::Embed);
    /// assert_eq!(Operation::of(Dialect::Anthropic, "/v1/messages/count_tokens"), Operation::CountTokens);
    /// assert_eq!(Operation::of(Dialect::Gemini, "/v1/models/m:batchEmbedContents"), Operation::Embed);
    /// assert_eq!(Operation::of(Dialect::Gemini, "/v1beta/models/m:countTokens?x=1"), Operation::CountTokens);
    /// assert_eq!(Operation::of(Dialect::OpenAi, "/v1/chat/completions"), Operation::Generate);
    /// ```
    pub fn of(dialect: Dialect, path: &str) -> Self {
        let path = path.split(['?', '#']).next().unwrap_or_default();
        match dialect {
            Dialect::Gemini => match path.rsplit_once(':').map(|(_, m)| m) {
                Some("embedContent" | "batchEmbedContents") => Operation::Embed,
                Some("countTokens") => Operation::CountTokens,
                _ => Operation::Generate,
            },
            Dialect::Anthropic if path.ends_with("/messages/count_tokens") => {
                Operation::CountTokens
            }
            Dialect::OpenAi | Dialect::Native if path.ends_with("/embeddings") => Operation::Embed,
            Dialect::OpenAi | Dialect::Native if path.ends_with("/videos") => Operation::Video,
            Dialect::OpenAi | Dialect::Native if object_path(path).is_some() => Operation::Object,
            _ => Operation::Generate,
        }
    }
}

/// The id of the provider-side object an OpenAI path names: `/v1/responses/{id}`
/// (and its `/cancel`, `/input_items`), `/v1/videos/{id}` (and its `/content`); `None`
/// for any other path.
///
/// ```
/// use portcullis_dialects::request::object_path;
/// assert_eq!(object_path("/v1/responses/resp_1/input_items"), Some("resp_1"));
/// assert_eq!(object_path("/v1/videos/video_9/content?variant=video"), Some("video_9"));
/// assert_eq!(object_path("/v1/videos/video_9"), Some("video_9"));
/// assert_eq!(object_path("/v1/responses"), None);
/// assert_eq!(object_path("/v1/responses/resp_1/other"), None);
/// ```
pub fn object_path(path: &str) -> Option<&str> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let (rest, tails): (&str, &[&str]) = if let Some(r) = path.strip_prefix("/v1/responses/") {
        (r, &["cancel", "input_items"])
    } else {
        (path.strip_prefix("/v1/videos/")?, &["content"])
    };
    let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let id_ok = (1..=MAX_OBJECT_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    (id_ok && (tail.is_empty() || tails.contains(&tail))).then_some(id)
}

/// What the gateway must know about a request before sending it (from the body and
/// path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestFacts {
    /// What the request asks for ([`Operation::of`] its path).
    pub operation: Operation,
    /// The model asked for (Gemini: from the path).
    pub model: String,
    /// The provider-side object the request continues: the Responses API's
    /// `previous_response_id` (at most [`MAX_OBJECT_ID_LEN`] bytes). Such a request must
    /// go to the credential that holds the object.
    pub continues: Option<String>,
    /// Whether the client asked for a streamed answer (Gemini: `:streamGenerateContent`).
    pub stream: bool,
    /// Estimate of the rendered input: messages/contents, system, tools, media, an
    /// embedding's `input` / `content` / `requests` (see the [`estimate`] module). Errs
    /// high for typical English and code. 0 for [`Operation::CountTokens`], which is
    /// never counted against token tiers or provider token limits.
    pub input_tokens: u64,
    /// Maximum output tokens of one choice: `max_completion_tokens` / `max_tokens` /
    /// `max_output_tokens` (OpenAI), `max_tokens` (Anthropic),
    /// `generationConfig.maxOutputTokens` (Gemini); else the caller's per-model default;
    /// else [`FALLBACK_MAX_OUTPUT_TOKENS`](crate::estimate::FALLBACK_MAX_OUTPUT_TOKENS).
    /// 0 for embeddings and token counting, which produce no output tokens.
    pub max_output_tokens: u64,
    /// Choices generated in parallel, each up to `max_output_tokens`: OpenAI `n`, Gemini
    /// `candidateCount` (default 1, clamped to 1..=[`MAX_CHOICES`](crate::estimate::MAX_CHOICES)).
    pub choices: u64,
    /// Image parts in the request, plus images requested (`n` on
    /// `/v1/images/generations`, one per candidate when Gemini's `responseModalities`
    /// include `IMAGE`).
    pub images: u64,
    /// Video parts in the request (Gemini `inlineData` / `fileData` with a `video/*`
    /// MIME type).
    pub videos: u64,
    /// The request defines tools (`tools` / `functions`, non-empty).
    pub has_tools: bool,
    /// The request asks for structured output (`response_format` `json_schema` /
    /// `json_object`, Anthropic `output_format`, Gemini `responseSchema` /
    /// `responseJsonSchema` / `responseMimeType: application/json`).
    pub structured_output: bool,
    /// Whether the provider will report usage in its answer as the request stands:
    /// always for Anthropic and Gemini and for non-streamed OpenAI answers; for OpenAI
    /// streams only with `stream_options.include_usage: true` (a proxy may inject it).
    pub usage_reported: bool,
}

impl RequestFacts {
    /// The most output tokens the request can produce: `max_output_tokens × choices`.
    pub fn output_upper_bound(&self) -> u64 {
        self.max_output_tokens.saturating_mul(self.choices.max(1))
    }

    /// Tokens to reserve at admission (W5): the input estimate plus the output upper
    /// bound.
    pub fn token_demand(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_upper_bound())
    }

    /// The demand to reserve (W5, W6): tokens, images, videos and the money upper bound
    /// under `price`.
    pub fn demand(&self, price: &Price) -> Demand {
        Demand {
            tokens: self.token_demand(),
            images: self.images,
            videos: self.videos,
            money: price.upper_bound(
                self.input_tokens,
                self.output_upper_bound(),
                self.images,
                self.videos,
            ),
        }
    }
}

/// Inspects a request body of `dialect` sent to `path`.
///
/// - OpenAI (and the native format, which is read the same way): `model`, `stream`,
///   `stream_options`, `messages` (string content or parts: `text`, `image_url`,
///   `input_audio`, `file`, …), `tools` / `functions`, `max_completion_tokens` /
///   `max_tokens` / `max_output_tokens`, `n`, `response_format`, `prompt` / `input` /
///   `instructions`.
/// - Anthropic: `model`, `stream`, `system` (string or blocks), `messages` (text, image,
///   document, tool_use, tool_result, thinking … blocks), `tools`, `output_format`, and
///   `max_tokens`, which Anthropic requires ([`RequestError::MissingField`]).
/// - Gemini: model and streaming from the path
///   (`/v1beta/models/{model}:generateContent`, `:streamGenerateContent`, any query
///   such as `?alt=sse`); `contents[].parts[]` (`text`, `inlineData`, `fileData`,
///   function calls), `systemInstruction`, `tools`, `generationConfig`
///   (`maxOutputTokens`, `candidateCount`, `responseSchema`, `responseMimeType`,
///   `responseModalities`); camelCase and snake_case field names alike.
///
/// `default_max_output(model)` gives the per-model default when the request sets no
/// maximum output; when it returns `None`,
/// [`FALLBACK_MAX_OUTPUT_TOKENS`](crate::estimate::FALLBACK_MAX_OUTPUT_TOKENS) is used.
///
/// ```
/// use portcullis_dialects::{inspect_request, Dialect};
/// let body = br#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"Hi there"}]}"#;
/// let facts = inspect_request(Dialect::OpenAi, "/v1/chat/completions", body, &|_| Some(16_384)).unwrap();
/// assert_eq!(facts.model, "gpt-4o");
/// assert!(facts.stream && !facts.usage_reported);
/// assert_eq!(facts.max_output_tokens, 16_384);
/// // 3 per request + 4 per message + ceil(8 bytes / 3)
/// assert_eq!(facts.input_tokens, 3 + 4 + 3);
///
/// let err = inspect_request(Dialect::Anthropic, "/v1/messages", br#"{"model":"claude-sonnet-4-5","messages":[]}"#, &|_| None)
///     .unwrap_err();
/// assert_eq!(err.to_string(), "`max_tokens` is required");
/// ```
pub fn inspect_request(
    dialect: Dialect,
    path: &str,
    body: &[u8],
    default_max_output: &dyn Fn(&str) -> Option<u64>,
) -> Result<RequestFacts, RequestError> {
    let gemini = dialect == Dialect::Gemini;
    let target = if gemini {
        Some(providers::gemini::target(path)?)
    } else {
        None
    };
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(RequestError::Malformed {
            line: 1,
            column: 0,
            reason: "the body is empty".to_owned(),
        });
    }

    let mut ctx = Ctx::new(gemini);
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed = Top { ctx: &mut ctx }
        .deserialize(&mut de)
        .and_then(|()| de.end());
    if let Err(e) = parsed {
        return Err(ctx.error(&e));
    }

    let (model, stream) = match target {
        Some(target) => target,
        None => {
            if ctx.model_too_long {
                return Err(RequestError::InvalidModel {
                    reason: MODEL_TOO_LONG,
                });
            }
            let model = ctx.model.take().ok_or(RequestError::MissingModel)?;
            (model, ctx.stream.unwrap_or(false))
        }
    };
    if model.trim().is_empty() {
        return Err(RequestError::InvalidModel {
            reason: "must be a non-empty string",
        });
    }

    let operation = Operation::of(dialect, path);
    if operation != Operation::Generate {
        return Ok(RequestFacts {
            operation,
            model,
            continues: ctx.continues.take(),
            stream: false,
            input_tokens: match operation {
                Operation::Embed => ctx.tally.input_tokens(),
                _ => 0,
            },
            max_output_tokens: 0,
            choices: 1,
            // Media in a request to count tokens are counted, not generated or
            // embedded: nothing against the image and video tiers. A video job makes
            // one video.
            images: match operation {
                Operation::Embed => ctx.tally.images,
                _ => 0,
            },
            videos: match operation {
                Operation::Embed => ctx.tally.videos,
                Operation::Video => 1,
                _ => 0,
            },
            has_tools: ctx.tally.has_tools,
            structured_output: false,
            // OpenAI's embeddings answer with `usage`; Gemini's embeddings and both
            // token-counting answers report none.
            usage_reported: operation == Operation::Embed && dialect != Dialect::Gemini,
        });
    }
    let rules = providers::request_rules(dialect, &ctx, path, stream)?;
    let max_output_tokens = rules
        .max_output
        .or_else(|| default_max_output(&model))
        .unwrap_or(estimate::FALLBACK_MAX_OUTPUT_TOKENS);

    Ok(RequestFacts {
        operation,
        model,
        continues: ctx.continues.take(),
        stream,
        input_tokens: ctx.tally.input_tokens(),
        max_output_tokens,
        choices: rules.choices,
        images: ctx.tally.images.saturating_add(rules.requested_images),
        videos: ctx.tally.videos,
        has_tools: ctx.tally.has_tools,
        structured_output: ctx.structured,
        usage_reported: rules.usage_reported,
    })
}

pub(crate) mod error;
pub(crate) mod read;
#[macro_use]
mod seeds;
mod settings;
mod walk;

pub(crate) use error::MODEL_TOO_LONG;
pub use error::{MAX_OBJECT_ID_LEN, RequestError};
use read::Ctx;
use walk::Top;
