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

use crate::estimate::{self, Tally};
use crate::providers;
use portcullis_core::{Demand, Dialect, Price};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::error::Category;
use std::fmt;
use std::marker::PhantomData;

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

/// Why a request body cannot be inspected; its `Display` is a client-facing reason
/// (E4: answered with 400 in the client's dialect).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// The body is not valid JSON (or not UTF-8, or empty).
    Malformed {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error (0 for an empty body).
        column: usize,
        /// The parser's reason.
        reason: String,
    },
    /// The body is valid JSON but not an object.
    NotAnObject,
    /// The body has no `model` (OpenAI, Anthropic).
    MissingModel,
    /// The model is empty or too long.
    InvalidModel {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A field has the wrong type.
    WrongType {
        /// JSON path of the field, e.g. `messages[1].content`.
        field: String,
        /// What it must be, e.g. `a boolean`.
        expected: &'static str,
        /// 1-based line where the bad value was detected.
        line: usize,
        /// 1-based column where the bad value was detected.
        column: usize,
    },
    /// A field the dialect requires is missing (Anthropic `max_tokens`).
    MissingField {
        /// The field.
        field: &'static str,
    },
    /// A multipart body (image edits) cannot be read.
    Multipart {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A Gemini path does not name a model and method.
    BadPath {
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl RequestError {
    /// The request field the error is about, for OpenAI's `error.param`.
    pub fn param(&self) -> Option<&str> {
        match self {
            RequestError::WrongType { field, .. } => Some(field),
            RequestError::MissingField { field } => Some(field),
            RequestError::MissingModel | RequestError::InvalidModel { .. } => Some("model"),
            _ => None,
        }
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Malformed {
                line,
                column,
                reason,
            } => write!(
                f,
                "the request body is not valid JSON: {reason} (line {line}, column {column})"
            ),
            RequestError::NotAnObject => f.write_str("the request body must be a JSON object"),
            RequestError::MissingModel => f.write_str("`model` is required"),
            RequestError::InvalidModel { reason } => write!(f, "`model` {reason}"),
            RequestError::WrongType {
                field,
                expected,
                line,
                column,
            } => write!(
                f,
                "`{field}` must be {expected} (line {line}, column {column})"
            ),
            RequestError::MissingField { field } => write!(f, "`{field}` is required"),
            RequestError::Multipart { reason } => write!(
                f,
                "the request body is not valid multipart/form-data: {reason}"
            ),
            RequestError::BadPath { reason } => write!(
                f,
                "the request path {reason}; expected /v1beta/models/{{model}}:generateContent \
                 or :streamGenerateContent"
            ),
        }
    }
}

impl std::error::Error for RequestError {}

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

pub(crate) const MODEL_TOO_LONG: &str = "must be at most 256 bytes long";

/// Longest provider object id kept ([`RequestFacts::continues`]).
pub const MAX_OBJECT_ID_LEN: usize = 128;

// ---------------------------------------------------------------------------------
// The walk.
// ---------------------------------------------------------------------------------

/// One step of the JSON path to the value being read, for error messages.
#[derive(Clone, Copy, Debug)]
enum Seg {
    Key(&'static str),
    Index(usize),
}

/// What the walk read, for the vendor rules ([`providers`]).
pub(crate) type Read = Ctx;

/// State shared by every visitor of one inspection.
#[derive(Default)]
pub(crate) struct Ctx {
    /// Path to the value being read; left as it is when a visitor fails.
    path: Vec<Seg>,
    /// The path inside a derived settings object (`generationConfig`, …) where it
    /// failed, after `path`.
    tail: Option<String>,
    /// What the value being read must be; for error messages.
    expect: &'static str,
    gemini: bool,
    tally: Tally,
    model: Option<String>,
    pub(crate) model_too_long: bool,
    continues: Option<String>,
    stream: Option<bool>,
    pub(crate) include_usage: Option<bool>,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) max_completion_tokens: Option<u64>,
    pub(crate) max_output_tokens: Option<u64>,
    pub(crate) gen_max_output: Option<u64>,
    pub(crate) n: Option<u64>,
    pub(crate) candidate_count: Option<u64>,
    structured: bool,
    pub(crate) image_output: bool,
}

impl Ctx {
    fn new(gemini: bool) -> Self {
        Ctx {
            expect: "a JSON object",
            gemini,
            ..Ctx::default()
        }
    }

    fn text(&mut self, bytes: u64) {
        self.tally.text_bytes = self.tally.text_bytes.saturating_add(bytes);
    }

    fn schema(&mut self, bytes: u64) {
        self.tally.schema_bytes = self.tally.schema_bytes.saturating_add(bytes);
    }

    fn message(&mut self) {
        self.tally.messages = self.tally.messages.saturating_add(1);
    }

    fn error(&self, e: &serde_json::Error) -> RequestError {
        let (line, column) = (e.line(), e.column());
        match e.classify() {
            Category::Data if self.path.is_empty() => RequestError::NotAnObject,
            Category::Data => RequestError::WrongType {
                field: match &self.tail {
                    Some(tail) => format!("{}.{tail}", render_path(&self.path)),
                    None => render_path(&self.path),
                },
                expected: self.expect,
                line,
                column,
            },
            Category::Syntax | Category::Eof | Category::Io => {
                let text = e.to_string();
                let suffix = format!(" at line {line} column {column}");
                RequestError::Malformed {
                    line,
                    column,
                    reason: text.strip_suffix(&suffix).unwrap_or(&text).to_owned(),
                }
            }
        }
    }
}

fn render_path(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => {
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
        }
    }
    out
}

/// Reads one value with `$seed`, with `$seg` pushed on the path and `$expect` as the
/// description used if it has the wrong type. On error the path is left in place.
macro_rules! field {
    ($ctx:ident, $access:ident . $method:ident, $seg:expr, $expect:expr, $seed:expr) => {{
        $ctx.path.push($seg);
        $ctx.expect = $expect;
        let value = $access.$method($seed)?;
        $ctx.path.pop();
        value
    }};
}

/// A seed that is its own visitor, reading any JSON value.
macro_rules! any_seed {
    ($t:ty) => {
        impl<'de> DeserializeSeed<'de> for $t {
            type Value = <Self as Visitor<'de>>::Value;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_any(self)
            }
        }
    };
}

/// Visitor methods that accept and ignore scalars.
macro_rules! ignore_scalars {
    ($value:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// Visitor methods that accept and skip arrays.
macro_rules! ignore_seq {
    ($value:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok($value)
        }
    };
}

/// Visitor methods that accept and skip objects.
macro_rules! ignore_map {
    ($value:expr) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($value)
        }
    };
}

/// Visitor method that accepts and ignores a string.
macro_rules! ignore_str {
    ($value:expr) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// Object keys classified without allocating.
trait FromKey: Sized {
    /// The key's class and its name as a static string (for error paths).
    fn from_key(key: &str) -> (Self, &'static str);
}

macro_rules! keys {
    ($name:ident { $($variant:ident = [$($lit:literal),+ $(,)?]),* $(,)? }) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        enum $name { $($variant,)* Other }
        impl FromKey for $name {
            fn from_key(key: &str) -> (Self, &'static str) {
                match key {
                    $($($lit => (Self::$variant, $lit),)+)*
                    _ => (Self::Other, "?"),
                }
            }
        }
    };
}

keys!(TopKey {
    Model = ["model"],
    PreviousResponse = ["previous_response_id"],
    Stream = ["stream"],
    StreamOptions = ["stream_options"],
    Messages = ["messages", "contents"],
    System = ["system"],
    SystemInstruction = ["systemInstruction", "system_instruction"],
    Tools = ["tools", "functions"],
    MaxTokens = ["max_tokens"],
    MaxCompletionTokens = ["max_completion_tokens"],
    MaxOutputTokens = ["max_output_tokens"],
    N = ["n"],
    Format = ["response_format", "output_format"],
    OutputConfig = ["output_config"],
    GenerationConfig = ["generationConfig", "generation_config"],
    // `content` and `requests`: Gemini's `embedContent` and `batchEmbedContents`.
    Text = ["prompt", "input", "instructions", "content", "requests"],
});

keys!(BlockKey {
    Type = ["type"],
    Content = ["content"],
    Parts = ["parts"],
    Text = ["text", "thinking", "refusal", "reasoning_content"],
    Json = [
        "tool_calls", "function_call", "input", "output", "arguments", "name", "title",
        "context", "functionCall", "functionResponse", "function_response",
        "executableCode", "executable_code", "codeExecutionResult", "code_execution_result",
    ],
    ImageUrl = ["image_url"],
    VideoUrl = ["video_url"],
    Audio = ["input_audio"],
    File = ["file"],
    Source = ["source"],
    Inline = ["inlineData", "inline_data", "fileData", "file_data"],
    Ignore = [
        "role", "id", "call_id", "tool_use_id", "tool_call_id", "signature", "data",
        "thoughtSignature", "thought_signature", "thought", "cache_control", "citations",
        "annotations", "is_error", "detail", "audio", "status", "format", "filename",
        "file_id", "videoMetadata", "video_metadata", "partMetadata", "part_metadata",
        "mediaResolution", "media_resolution",
    ],
});

keys!(SourceKey {
    Type = ["type"],
    MediaType = ["media_type"],
    Data = ["data"],
    Content = ["content"],
});

keys!(InlineKey {
    Mime = ["mimeType", "mime_type"],
});

struct KeySeed<K>(PhantomData<K>);

impl<K> KeySeed<K> {
    fn new() -> Self {
        KeySeed(PhantomData)
    }
}

impl<'de, K: FromKey> DeserializeSeed<'de> for KeySeed<K> {
    type Value = (K, &'static str);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, K: FromKey> Visitor<'de> for KeySeed<K> {
    type Value = (K, &'static str);
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(K::from_key(v))
    }
}

/// The byte length of a key.
struct KeyLen;

impl<'de> DeserializeSeed<'de> for KeyLen {
    type Value = u64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyLen {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        Ok(v.len() as u64)
    }
}

/// A non-negative integer (an integral float is accepted) or `null`. A visitor: serde's
/// `u64` rejects `1.0`, which clients (JavaScript ones) send.
struct OptU64;

impl<'de> DeserializeSeed<'de> for OptU64 {
    type Value = Option<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OptU64 {
    type Value = Option<u64>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a non-negative integer")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        u64::try_from(v)
            .map(Some)
            .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        if v >= 0.0 && v.fract() == 0.0 && v.is_finite() {
            // Saturating conversion: a value beyond u64 is as good as u64::MAX here.
            Ok(Some(v as u64))
        } else {
            Err(E::invalid_value(de::Unexpected::Float(v), &self))
        }
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// The byte length of a string (`null` = 0): measured, not copied (message text can be
/// megabytes; a `String` or an escaped `Cow` would copy it).
struct TextLen;

any_seed!(TextLen);

impl<'de> Visitor<'de> for TextLen {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        Ok(v.len() as u64)
    }
    fn visit_unit<E: de::Error>(self) -> Result<u64, E> {
        Ok(0)
    }
}

/// The byte length of a string; anything else is skipped as 0.
struct LenientLen;

any_seed!(LenientLen);

impl<'de> Visitor<'de> for LenientLen {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        Ok(v.len() as u64)
    }
    ignore_scalars!(0);
    ignore_seq!(0);
    ignore_map!(0);
}

/// Approximate compact-JSON size of any value (`null` = 0), for tool schemas, tool
/// calls and parts of unknown shape.
struct Generic;

any_seed!(Generic);

fn digits(v: u64) -> u64 {
    u64::from(v.checked_ilog10().unwrap_or(0)) + 1
}

impl<'de> Visitor<'de> for Generic {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<u64, E> {
        Ok(if v { 4 } else { 5 })
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        Ok(digits(v.unsigned_abs()) + u64::from(v < 0))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(digits(v))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<u64, E> {
        Ok(8)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        Ok(v.len() as u64 + 2)
    }
    fn visit_unit<E: de::Error>(self) -> Result<u64, E> {
        Ok(0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        let mut size: u64 = 2;
        while let Some(n) = seq.next_element_seed(Generic)? {
            size = size.saturating_add(n.max(4) + 1);
        }
        Ok(size)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let mut size: u64 = 2;
        while let Some(k) = map.next_key_seed(KeyLen)? {
            let v = map.next_value_seed(Generic)?;
            size = size.saturating_add(k + 3 + v.max(4) + 1);
        }
        Ok(size)
    }
}

/// The top-level object.
struct Top<'c> {
    ctx: &'c mut Ctx,
}

any_seed!(Top<'_>);

impl<'de> Visitor<'de> for Top<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let ctx = self.ctx;
        while let Some((key, name)) = map.next_key_seed(KeySeed::<TopKey>::new())? {
            match key {
                // Gemini names the model and the streaming mode in the path.
                TopKey::Model | TopKey::Stream if ctx.gemini => {
                    map.next_value::<IgnoredAny>()?;
                }
                TopKey::Model => {
                    let model: Option<String> = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "a string",
                        PhantomData
                    );
                    // `null` is absent; a name too long is flagged, not kept.
                    if let Some(m) = model {
                        ctx.model_too_long = m.len() > estimate::MAX_MODEL_LEN;
                        ctx.model = (!ctx.model_too_long).then_some(m);
                    }
                }
                TopKey::PreviousResponse => {
                    let id: Option<String> = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "a string",
                        PhantomData
                    );
                    // An id no provider makes (empty, or too long to be one) is not kept:
                    // the request then goes where any request of its model goes.
                    ctx.continues = id.filter(|i| (1..=MAX_OBJECT_ID_LEN).contains(&i.len()));
                }
                TopKey::Stream => {
                    ctx.stream = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "a boolean",
                        PhantomData::<Option<bool>>
                    );
                }
                TopKey::StreamOptions => {
                    let o: Option<StreamOptions> = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "an object",
                        Settings::new(&mut *ctx)
                    );
                    if let Some(v) = o.and_then(|o| o.include_usage) {
                        ctx.include_usage = Some(v);
                    }
                }
                TopKey::Messages => field!(
                    ctx,
                    map.next_value_seed,
                    Seg::Key(name),
                    "an array of messages",
                    Blocks {
                        ctx: &mut *ctx,
                        element: "a message object",
                        messages: true,
                    }
                ),
                TopKey::System => {
                    ctx.message();
                    field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "a string or an array of content blocks",
                        Content {
                            ctx: &mut *ctx,
                            strict: true,
                        }
                    )
                }
                TopKey::SystemInstruction => {
                    ctx.message();
                    field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "a Content object",
                        Block { ctx: &mut *ctx }
                    )
                }
                TopKey::Text => {
                    ctx.message();
                    field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "text",
                        Content {
                            ctx: &mut *ctx,
                            strict: false,
                        }
                    )
                }
                TopKey::Tools => field!(
                    ctx,
                    map.next_value_seed,
                    Seg::Key(name),
                    "an array of tools",
                    Tools { ctx: &mut *ctx }
                ),
                TopKey::MaxTokens
                | TopKey::MaxCompletionTokens
                | TopKey::MaxOutputTokens
                | TopKey::N => {
                    let v = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "a non-negative integer",
                        OptU64
                    );
                    *match key {
                        TopKey::MaxTokens => &mut ctx.max_tokens,
                        TopKey::MaxCompletionTokens => &mut ctx.max_completion_tokens,
                        TopKey::MaxOutputTokens => &mut ctx.max_output_tokens,
                        _ => &mut ctx.n,
                    } = v;
                }
                TopKey::Format => {
                    let f: Option<Format> = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "an object",
                        Settings::new(&mut *ctx)
                    );
                    f.inspect(|f| f.count(ctx));
                }
                TopKey::OutputConfig => {
                    let o: Option<OutputConfig> = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "an object",
                        Settings::new(&mut *ctx)
                    );
                    if let Some(Object(f)) = o.and_then(|o| o.format) {
                        f.count(ctx);
                    }
                }
                TopKey::GenerationConfig => {
                    let g: Option<GenerationConfig> = field!(
                        ctx,
                        map.next_value_seed,
                        Seg::Key(name),
                        "an object",
                        Settings::new(&mut *ctx)
                    );
                    g.inspect(|g| g.count(ctx));
                }
                TopKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// An array of messages (each adds the per-message overhead) or of parts; `null` is
/// absent.
struct Blocks<'c> {
    ctx: &'c mut Ctx,
    element: &'static str,
    messages: bool,
}

any_seed!(Blocks<'_>);

impl<'de> Visitor<'de> for Blocks<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let ctx = self.ctx;
        let mut i = 0;
        loop {
            let more = field!(
                ctx,
                seq.next_element_seed,
                Seg::Index(i),
                self.element,
                Block { ctx: &mut *ctx }
            );
            if more.is_none() {
                return Ok(());
            }
            if self.messages {
                ctx.message();
            }
            i += 1;
        }
    }
}

/// Message content: a string, an array of blocks, one block, or `null`. Strict content
/// rejects scalars and non-object array elements; lenient content (`prompt`, `input`,
/// document sources) takes anything and counts its text.
struct Content<'c> {
    ctx: &'c mut Ctx,
    strict: bool,
}

any_seed!(Content<'_>);

impl<'de> Visitor<'de> for Content<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or an array of content blocks")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.ctx.text(v.len() as u64);
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        if self.strict {
            return Err(E::invalid_type(de::Unexpected::Bool(v), &self));
        }
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        if self.strict {
            return Err(E::invalid_type(de::Unexpected::Unsigned(v), &self));
        }
        // A token id of a pre-tokenized prompt.
        self.ctx.text(estimate::BYTES_PER_TOKEN);
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        if self.strict {
            return Err(E::invalid_type(de::Unexpected::Signed(v), &self));
        }
        self.ctx.text(estimate::BYTES_PER_TOKEN);
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        if self.strict {
            return Err(E::invalid_type(de::Unexpected::Float(v), &self));
        }
        self.ctx.text(estimate::BYTES_PER_TOKEN);
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let ctx = self.ctx;
        let mut i = 0;
        loop {
            let more = if self.strict {
                field!(
                    ctx,
                    seq.next_element_seed,
                    Seg::Index(i),
                    "a content block object",
                    Block { ctx: &mut *ctx }
                )
            } else {
                field!(
                    ctx,
                    seq.next_element_seed,
                    Seg::Index(i),
                    "text",
                    Content {
                        ctx: &mut *ctx,
                        strict: false,
                    }
                )
            };
            if more.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        walk_block(self.ctx, map)
    }
}

/// One message, part or content block (an object).
struct Block<'c> {
    ctx: &'c mut Ctx,
}

any_seed!(Block<'_>);

impl<'de> Visitor<'de> for Block<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        walk_block(self.ctx, map)
    }
}

/// The media kind of a block, from its `type`, its keys and its MIME type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Media {
    None,
    Image,
    Audio,
    Video,
    Document,
}

impl Media {
    fn from_type(t: &str) -> Self {
        match t {
            "image" | "image_url" | "input_image" => Media::Image,
            "document" | "file" | "input_file" => Media::Document,
            "input_audio" | "audio" => Media::Audio,
            "video" | "video_url" | "input_video" => Media::Video,
            _ => Media::None,
        }
    }

    /// `None` when the MIME type is absent.
    fn from_mime(m: &str) -> Self {
        let m = m.trim_start().as_bytes();
        let starts = |p: &[u8]| m.len() >= p.len() && m[..p.len()].eq_ignore_ascii_case(p);
        if starts(b"image/") {
            Media::Image
        } else if starts(b"video/") {
            Media::Video
        } else if starts(b"audio/") {
            Media::Audio
        } else if m.is_empty() {
            Media::None
        } else {
            Media::Document
        }
    }
}

/// A string classified by `classify`; anything else is `Media::None`.
struct MediaTag {
    mime: bool,
}

any_seed!(MediaTag);

impl<'de> Visitor<'de> for MediaTag {
    type Value = Media;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Media, E> {
        Ok(if self.mime {
            Media::from_mime(v)
        } else {
            Media::from_type(v)
        })
    }
    ignore_scalars!(Media::None);
    ignore_seq!(Media::None);
    ignore_map!(Media::None);
}

/// Anthropic `source` of an image / document block: text sources are counted as text,
/// other sources are media.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum SourceKind {
    #[default]
    Other,
    Text,
    Content,
}

struct Source<'c> {
    ctx: &'c mut Ctx,
}

any_seed!(Source<'_>);

/// The kind of a source from its `type`.
struct SourceType;

any_seed!(SourceType);

impl<'de> Visitor<'de> for SourceType {
    type Value = SourceKind;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<SourceKind, E> {
        Ok(match v {
            "text" => SourceKind::Text,
            "content" => SourceKind::Content,
            _ => SourceKind::Other,
        })
    }
    ignore_scalars!(SourceKind::Other);
    ignore_seq!(SourceKind::Other);
    ignore_map!(SourceKind::Other);
}

impl<'de> Visitor<'de> for Source<'_> {
    type Value = (SourceKind, Media);
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    ignore_str!((SourceKind::Other, Media::None));
    ignore_scalars!((SourceKind::Other, Media::None));
    ignore_seq!((SourceKind::Other, Media::None));
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let ctx = self.ctx;
        let mut kind = SourceKind::Other;
        let mut media = Media::None;
        let mut data_len = 0;
        while let Some((key, name)) = map.next_key_seed(KeySeed::<SourceKey>::new())? {
            match key {
                SourceKey::Type => kind = map.next_value_seed(SourceType)?,
                SourceKey::MediaType => media = map.next_value_seed(MediaTag { mime: true })?,
                SourceKey::Data => data_len = map.next_value_seed(LenientLen)?,
                SourceKey::Content => field!(
                    ctx,
                    map.next_value_seed,
                    Seg::Key(name),
                    "text",
                    Content {
                        ctx: &mut *ctx,
                        strict: false,
                    }
                ),
                SourceKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if kind == SourceKind::Text {
            ctx.text(data_len);
        }
        Ok((kind, media))
    }
}

/// Gemini `inlineData` / `fileData`: only the MIME type matters.
struct Inline;

any_seed!(Inline);

impl<'de> Visitor<'de> for Inline {
    type Value = Media;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    ignore_str!(Media::None);
    ignore_scalars!(Media::None);
    ignore_seq!(Media::None);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Media, A::Error> {
        let mut media = Media::None;
        while let Some((key, _)) = map.next_key_seed(KeySeed::<InlineKey>::new())? {
            match key {
                InlineKey::Mime => media = map.next_value_seed(MediaTag { mime: true })?,
                InlineKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(media)
    }
}

/// Walks the keys of one message / part / block, then counts its media.
fn walk_block<'de, A: MapAccess<'de>>(ctx: &mut Ctx, mut map: A) -> Result<(), A::Error> {
    let mut by_type = Media::None;
    let mut by_key = Media::None;
    let mut by_mime = Media::None;
    let mut source = None;
    while let Some((key, name)) = map.next_key_seed(KeySeed::<BlockKey>::new())? {
        match key {
            BlockKey::Type => by_type = map.next_value_seed(MediaTag { mime: false })?,
            BlockKey::Content => field!(
                ctx,
                map.next_value_seed,
                Seg::Key(name),
                "a string or an array of content blocks",
                Content {
                    ctx: &mut *ctx,
                    strict: true,
                }
            ),
            BlockKey::Parts => field!(
                ctx,
                map.next_value_seed,
                Seg::Key(name),
                "an array of parts",
                Blocks {
                    ctx: &mut *ctx,
                    element: "a part object",
                    messages: false,
                }
            ),
            BlockKey::Text => {
                let n = field!(
                    ctx,
                    map.next_value_seed,
                    Seg::Key(name),
                    "a string",
                    TextLen
                );
                ctx.text(n);
            }
            BlockKey::Json | BlockKey::Other => {
                let n = map.next_value_seed(Generic)?;
                ctx.text(n);
            }
            BlockKey::ImageUrl => {
                map.next_value::<IgnoredAny>()?;
                by_key = Media::Image;
            }
            BlockKey::VideoUrl => {
                map.next_value::<IgnoredAny>()?;
                by_key = Media::Video;
            }
            BlockKey::Audio => {
                map.next_value::<IgnoredAny>()?;
                by_key = Media::Audio;
            }
            BlockKey::File => {
                map.next_value::<IgnoredAny>()?;
                by_key = Media::Document;
            }
            BlockKey::Source => {
                source = Some(field!(
                    ctx,
                    map.next_value_seed,
                    Seg::Key(name),
                    "a source",
                    Source { ctx: &mut *ctx }
                ));
            }
            BlockKey::Inline => {
                let m = map.next_value_seed(Inline)?;
                if m != Media::None {
                    by_mime = m;
                } else if by_key == Media::None {
                    // A Responses-API `file_data` string, or a part without a MIME type.
                    by_key = Media::Document;
                }
            }
            BlockKey::Ignore => {
                map.next_value::<IgnoredAny>()?;
            }
        }
    }
    let media = match source {
        // Plain-text and content documents were counted as text.
        Some((SourceKind::Text | SourceKind::Content, _)) => Media::None,
        Some((SourceKind::Other, mime)) if by_type == Media::None && by_key == Media::None => mime,
        _ if by_mime != Media::None => by_mime,
        _ if by_key != Media::None => by_key,
        _ => by_type,
    };
    let t = &mut ctx.tally;
    match media {
        Media::None => {}
        Media::Image => t.images = t.images.saturating_add(1),
        Media::Audio => t.audio = t.audio.saturating_add(1),
        Media::Video => t.videos = t.videos.saturating_add(1),
        Media::Document => t.documents = t.documents.saturating_add(1),
    }
    Ok(())
}

/// `tools` / `functions`: an array (or `null`); each element's JSON size counts.
struct Tools<'c> {
    ctx: &'c mut Ctx,
}

any_seed!(Tools<'_>);

impl<'de> Visitor<'de> for Tools<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of tools")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(n) = seq.next_element_seed(Generic)? {
            self.ctx.schema(n);
            self.ctx.tally.has_tools = true;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// Settings objects: small, read with derived structs.
// ---------------------------------------------------------------------------------

/// OpenAI `stream_options`.
#[derive(Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
}

/// OpenAI `response_format`, Anthropic `output_format` / `output_config.format`.
#[derive(Deserialize)]
struct Format {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    json_schema: JsonSize,
    #[serde(default)]
    schema: JsonSize,
}

impl Format {
    fn count(&self, ctx: &mut Ctx) {
        if matches!(self.kind.as_deref(), Some("json_schema" | "json_object")) {
            ctx.structured = true;
        }
        ctx.schema(self.json_schema.0);
        ctx.schema(self.schema.0);
    }
}

/// Anthropic `output_config` (its `format` is read like `output_format`).
#[derive(Deserialize)]
struct OutputConfig {
    format: Option<Object<Format>>,
}

/// Gemini `generationConfig`, in camelCase or snake_case.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig {
    #[serde(default, alias = "max_output_tokens")]
    max_output_tokens: Count,
    #[serde(default, alias = "candidate_count")]
    candidate_count: Count,
    #[serde(alias = "response_mime_type")]
    response_mime_type: Option<String>,
    #[serde(default, alias = "response_schema")]
    response_schema: JsonSize,
    #[serde(default, alias = "response_json_schema")]
    response_json_schema: JsonSize,
    #[serde(default, rename = "_responseJsonSchema")]
    underscore_response_json_schema: JsonSize,
    #[serde(default, alias = "response_modalities")]
    response_modalities: Modalities,
}

impl GenerationConfig {
    fn count(&self, ctx: &mut Ctx) {
        // A value read before (`generation_config` and `generationConfig` both sent)
        // stays unless this object gives one.
        ctx.gen_max_output = self.max_output_tokens.0.or(ctx.gen_max_output);
        ctx.candidate_count = self.candidate_count.0.or(ctx.candidate_count);
        if let Some(m) = &self.response_mime_type {
            let m = m.trim();
            if m.eq_ignore_ascii_case("application/json") || m.eq_ignore_ascii_case("text/x.enum") {
                ctx.structured = true;
            }
        }
        for schema in [
            &self.response_schema,
            &self.response_json_schema,
            &self.underscore_response_json_schema,
        ] {
            if schema.0 > 0 {
                ctx.structured = true;
                ctx.schema(schema.0);
            }
        }
        ctx.image_output |= self.response_modalities.0;
    }
}

/// What a field of a settings object must be, by its name; for error messages.
fn settings_expected(key: &str) -> &'static str {
    match key {
        "include_usage" => "a boolean",
        "format" => "an object",
        "maxOutputTokens" | "max_output_tokens" | "candidateCount" | "candidate_count" => {
            "a non-negative integer"
        }
        "responseModalities" | "response_modalities" => "an array of strings",
        _ => "a string",
    }
}

/// Reads a settings object `T` (or `null`); on failure, the path inside it and what
/// the failing field must be are left in the context for the error.
struct Settings<'c, T> {
    ctx: &'c mut Ctx,
    _t: PhantomData<T>,
}

impl<'c, T> Settings<'c, T> {
    fn new(ctx: &'c mut Ctx) -> Self {
        Settings {
            ctx,
            _t: PhantomData,
        }
    }
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Settings<'_, T> {
    type Value = Option<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for Settings<'_, T> {
    type Value = Option<T>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Option<T>, A::Error> {
        serde_path_to_error::deserialize(de::value::MapAccessDeserializer::new(map))
            .map(Some)
            .map_err(|e| {
                // A field sent twice (camelCase and snake_case alike): named as serde
                // names it.
                let text = e.inner().to_string();
                if let Some(dup) = text
                    .strip_prefix("duplicate field `")
                    .and_then(|t| t.split('`').next())
                {
                    self.ctx.expect = "given once";
                    self.ctx.tail = Some(dup.to_owned());
                    return e.into_inner();
                }
                let last = e.path().iter().rev().find_map(|s| match s {
                    serde_path_to_error::Segment::Map { key } => Some(key.as_str()),
                    _ => None,
                });
                if let Some(last) = last {
                    self.ctx.expect = settings_expected(last);
                    self.ctx.tail = Some(e.path().to_string());
                }
                e.into_inner()
            })
    }
}

/// A JSON object read as `T` (derived structs also take arrays, which no settings
/// object is).
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// [`OptU64`] as a field type.
#[derive(Default)]
struct Count(Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        OptU64.deserialize(d).map(Count)
    }
}

/// [`Generic`] (approximate JSON size) as a field type.
#[derive(Default)]
struct JsonSize(u64);

impl<'de> Deserialize<'de> for JsonSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Generic.deserialize(d).map(JsonSize)
    }
}

/// Whether Gemini `responseModalities` include `IMAGE` (`null` = no). A visitor, not a
/// `Vec`: the elements are compared, not kept, and any non-string element is skipped.
#[derive(Default)]
struct Modalities(bool);

impl<'de> Deserialize<'de> for Modalities {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ModalitiesVisitor).map(Modalities)
    }
}

struct ModalitiesVisitor;

impl<'de> Visitor<'de> for ModalitiesVisitor {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of strings")
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let mut image = false;
        while let Some(len) = seq.next_element_seed(ImageWord)? {
            image |= len;
        }
        Ok(image)
    }
}

/// Whether a modality string is `IMAGE` (any case); anything else is `false`.
struct ImageWord;

any_seed!(ImageWord);

impl<'de> Visitor<'de> for ImageWord {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        Ok(v.eq_ignore_ascii_case("image"))
    }
    ignore_scalars!(false);
    ignore_seq!(false);
    ignore_map!(false);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_like_json_paths() {
        let p = [
            Seg::Key("messages"),
            Seg::Index(2),
            Seg::Key("content"),
            Seg::Index(0),
        ];
        assert_eq!(render_path(&p), "messages[2].content[0]");
    }

    #[test]
    fn media_from_mime() {
        assert_eq!(Media::from_mime("IMAGE/png"), Media::Image);
        assert_eq!(Media::from_mime("video/mp4"), Media::Video);
        assert_eq!(Media::from_mime("audio/wav"), Media::Audio);
        assert_eq!(Media::from_mime("application/pdf"), Media::Document);
        assert_eq!(Media::from_mime(""), Media::None);
    }
}
