//! Usage from provider responses, buffered or streamed (W5, U2, B2), the first-chunk
//! commit point (F4) and in-stream errors (F3).
//!
//! Mapping into [`Usage`] (`input_tokens` = input **not** served from cache):
//!
//! | dialect | input_tokens | cached_input_tokens | cache_write_tokens | output_tokens |
//! |---|---|---|---|---|
//! | OpenAI | `prompt_tokens − prompt_tokens_details.cached_tokens` | `cached_tokens` | 0 | `completion_tokens` (reasoning included) |
//! | Anthropic | `input_tokens` | `cache_read_input_tokens` | `cache_creation_input_tokens` | `output_tokens` |
//! | Gemini | `promptTokenCount − cachedContentTokenCount + toolUsePromptTokenCount` | `cachedContentTokenCount` | 0 | `candidatesTokenCount + thoughtsTokenCount` |
//!
//! OpenAI's Responses and Images APIs (`usage.input_tokens`, `input_tokens_details`,
//! `output_tokens`, also under `response.usage` in Responses streams) map like
//! `prompt_tokens` / `completion_tokens`. The native format is read as OpenAI.
//!
//! Every usage field seen replaces the value seen before (field by field): Anthropic's
//! `message_delta.usage` (cumulative) replaces `message_start.message.usage`, Gemini's
//! last `usageMetadata` wins, OpenAI's final usage chunk (sent with
//! `stream_options.include_usage`) is the only one that is not `null`.
//!
//! [`Usage::images`] / [`Usage::videos`] count media the provider **generated** (OpenAI
//! Images `data[]` entries, Gemini `inlineData` parts with an `image/*` / `video/*`
//! MIME type in candidates); input images are billed as input tokens. Gemini also bills
//! generated images as output tokens, so price them in one place only.
//!
//! # Memory
//!
//! Nothing is buffered: a non-streamed body and each SSE event are read incrementally
//! and only small captures are kept — keys up to 32 bytes, string values up to 512
//! bytes (error messages), numbers up to 40 bytes, SSE event names up to 32 bytes,
//! nesting up to 128 levels (deeper documents are ignored). A watcher holds well under
//! 16 KiB whatever the size of the body or of one line, and never fails.

use crate::json::{self, Frame, Scalar, Scanner, Sink};
use crate::sse::{EventSink, SseParser};
use portcullis_core::{Dialect, Usage};

/// The usage in a complete, non-streamed response body of `dialect`; `None` when the
/// body reports none (an error body, or not JSON). Trailing bytes after the JSON
/// document are ignored. A JSON array of documents (Gemini's stream without `alt=sse`)
/// is read like a stream: the last usage wins.
///
/// ```
/// use portcullis_dialects::{usage_from_json, Dialect};
/// let body = br#"{"id":"chatcmpl-1","object":"chat.completion","choices":[],
///   "usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,
///   "prompt_tokens_details":{"cached_tokens":1920}}}"#;
/// let u = usage_from_json(Dialect::OpenAi, body).unwrap();
/// assert_eq!((u.input_tokens, u.cached_input_tokens, u.output_tokens), (86, 1920, 300));
/// ```
pub fn usage_from_json(dialect: Dialect, body: &[u8]) -> Option<Usage> {
    let mut w = UsageWatcher::new(dialect, false);
    w.observe(body);
    w.finish()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Streaming, before the first non-blank byte: `{` / `[` → JSON, else SSE.
    Detect,
    Json,
    Sse,
}

/// Watches a response body chunk by chunk as it streams through (SSE when `streaming`,
/// else a JSON body), with constant memory (see the [module docs](self)).
///
/// With `streaming`, a body that starts with `{` or `[` is read as JSON instead of SSE
/// (an upstream error answered as plain JSON; Gemini's JSON-array stream without
/// `alt=sse`).
///
/// ```
/// use portcullis_dialects::{UsageWatcher, Dialect};
/// let stream = "event: message_start\n\
///     data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"cache_read_input_tokens\":100,\"output_tokens\":1}}}\n\n\
///     event: content_block_delta\n\
///     data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n\
///     event: message_delta\n\
///     data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n";
/// let mut w = UsageWatcher::new(Dialect::Anthropic, true);
/// for chunk in stream.as_bytes().chunks(7) {
///     w.observe(chunk);
/// }
/// assert!(w.saw_content());
/// let u = w.finish().unwrap();
/// assert_eq!((u.input_tokens, u.cached_input_tokens, u.output_tokens), (25, 100, 15));
/// ```
pub struct UsageWatcher {
    mode: Mode,
    scanner: Scanner,
    sse: SseParser,
    ex: Extractor,
    finished: bool,
}

impl std::fmt::Debug for UsageWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsageWatcher")
            .field("dialect", &self.ex.dialect)
            .field("mode", &self.mode)
            .field("usage", &self.usage_so_far())
            .field("saw_content", &self.ex.content)
            .field("stream_error", &self.ex.error)
            .finish_non_exhaustive()
    }
}

impl UsageWatcher {
    /// A watcher of a response of `dialect`; `streaming` when the response is (meant to
    /// be) a stream.
    pub fn new(dialect: Dialect, streaming: bool) -> Self {
        UsageWatcher {
            mode: if streaming { Mode::Detect } else { Mode::Json },
            scanner: Scanner::new(!streaming),
            sse: SseParser::new(),
            ex: Extractor::new(dialect),
            finished: false,
        }
    }

    /// Reads the next chunk of the body: any split of the bytes, including mid-line and
    /// mid-UTF-8. Chunks after [`finish`](Self::finish) are ignored.
    pub fn observe(&mut self, chunk: &[u8]) {
        if self.finished {
            return;
        }
        let mut chunk = chunk;
        if self.mode == Mode::Detect {
            let start = chunk.iter().position(|c| !c.is_ascii_whitespace());
            let Some(start) = start else {
                return;
            };
            chunk = &chunk[start..];
            if matches!(chunk[0], b'{' | b'[') {
                self.mode = Mode::Json;
                self.scanner = Scanner::new(true);
            } else {
                self.mode = Mode::Sse;
            }
        }
        match self.mode {
            Mode::Json => self.scanner.feed(chunk, &mut self.ex),
            Mode::Sse => self.sse.feed(chunk, &mut self.scanner, &mut self.ex),
            Mode::Detect => {}
        }
    }

    /// The end of the body: completes a last event or number still pending and returns
    /// the usage. Idempotent.
    pub fn finish(&mut self) -> Option<Usage> {
        if !self.finished {
            self.finished = true;
            match self.mode {
                Mode::Json => self.scanner.end_input(&mut self.ex),
                Mode::Sse => self.sse.finish(&mut self.scanner, &mut self.ex),
                Mode::Detect => {}
            }
        }
        self.usage_so_far()
    }

    /// The usage reported by the complete events (documents) seen so far: for a stream
    /// cut short, what it had reported before it was cut (e.g. Anthropic's input
    /// tokens from `message_start`). `None` until some usage was seen.
    pub fn usage_so_far(&self) -> Option<Usage> {
        self.ex.usage()
    }

    /// Output tokens the gateway saw go out: counted from the output text of the
    /// complete documents read so far (content, reasoning and tool-call deltas, or a
    /// whole message's), by [`estimate::output_tokens`](crate::estimate::output_tokens).
    /// What a stream cut after content went out is charged (B7), never less than the
    /// provider's own count where it reported one.
    ///
    /// ```
    /// use portcullis_dialects::{UsageWatcher, Dialect};
    /// let mut w = UsageWatcher::new(Dialect::OpenAi, true);
    /// w.observe(b"data: {\"choices\":[{\"delta\":{\"content\":\"Hello there\"}}]}\n\n");
    /// w.observe(b"data: {\"choices\":[{\"delta\":{\"content\":\"!\"}}]}\n\n");
    /// assert_eq!(w.streamed_output_tokens(), 4); // 12 bytes at 3 a token
    /// ```
    pub fn streamed_output_tokens(&self) -> u64 {
        crate::estimate::output_tokens(self.ex.streamed_bytes, self.ex.content_chunks)
    }

    /// What a stream cut after its content went out streamed (B7): the input as the
    /// provider reported it — else `input_estimate`, the gateway's estimate
    /// ([`RequestFacts::input_tokens`](crate::RequestFacts::input_tokens)) — and the
    /// output counted from the deltas
    /// ([`streamed_output_tokens`](Self::streamed_output_tokens)), at most `most_output`
    /// ([`RequestFacts::output_upper_bound`](crate::RequestFacts::output_upper_bound))
    /// and never below the provider's own count so far; media as reported; no cost.
    ///
    /// ```
    /// use portcullis_dialects::{UsageWatcher, Dialect};
    /// let mut w = UsageWatcher::new(Dialect::Anthropic, true);
    /// w.observe(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n");
    /// w.observe(b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello, world\"}}\n\n");
    /// let u = w.streamed_usage(40, 100);
    /// assert_eq!((u.input_tokens, u.output_tokens), (25, 4)); // reported input, 12 bytes out
    /// assert_eq!(w.streamed_usage(40, 2).output_tokens, 2); // at most what it may produce
    /// ```
    pub fn streamed_usage(&self, input_estimate: u64, most_output: u64) -> Usage {
        let reported = self.usage_so_far().unwrap_or_default();
        let mut u = reported;
        if reported.input_tokens == 0
            && reported.cached_input_tokens == 0
            && reported.cache_write_tokens == 0
        {
            u.input_tokens = input_estimate;
        }
        let counted = self.streamed_output_tokens().min(most_output);
        u.output_tokens = reported.output_tokens.max(counted);
        u.cost = None;
        u
    }

    /// A first content chunk was seen — an OpenAI delta with content / refusal /
    /// reasoning / tool calls, an Anthropic `content_block_delta`, a Gemini candidate
    /// part (or, in a non-streamed body, a message / content block / part). This is the
    /// first-chunk commit point of F4.
    pub fn saw_content(&self) -> bool {
        self.ex.content
    }

    /// The id of what the answer created, as OpenAI names it: the top-level `id` of a
    /// JSON answer (a Responses API response, a video job), or `response.id` in a
    /// Responses stream's events. The first one seen; `None` if none was, or if it was
    /// longer than 128 bytes.
    ///
    /// ```
    /// use portcullis_dialects::{UsageWatcher, Dialect};
    /// let mut w = UsageWatcher::new(Dialect::OpenAi, true);
    /// w.observe(b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_67c\",\"status\":\"in_progress\"}}\n\n");
    /// assert_eq!(w.object_id(), Some("resp_67c"));
    /// ```
    pub fn object_id(&self) -> Option<&str> {
        let id = self.ex.object_id.get();
        (!id.is_empty())
            .then(|| std::str::from_utf8(id).ok())
            .flatten()
    }

    /// The first in-stream error seen, as `type: message` (Anthropic `event: error`,
    /// OpenAI `{"error":…}` data, Gemini `{"error":…}`; also an error body read as
    /// JSON). At most 512 bytes of the message are kept.
    pub fn stream_error(&self) -> Option<&str> {
        self.ex.error.as_deref()
    }

    /// The response's own end marker was seen: OpenAI `data: [DONE]` (or a Responses
    /// `response.completed` / `incomplete` / `failed` event), Anthropic `message_stop`,
    /// a Gemini `finishReason`, or the end of a JSON body's document. A stream that ends
    /// without it was cut short (F3: the partial output is marked).
    pub fn saw_end(&self) -> bool {
        match self.mode {
            Mode::Json => self.scanner.closed(),
            Mode::Sse => self.ex.end_marker,
            Mode::Detect => false,
        }
    }

    /// Heap bytes the watcher holds (bounded by the caps of the module docs, whatever
    /// it has read).
    pub fn heap_bytes(&self) -> usize {
        self.scanner.heap_bytes() + self.ex.heap_bytes()
    }
}

/// Usage fields as reported, before the dialect's mapping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Raw {
    /// OpenAI `prompt_tokens` / `input_tokens`, Gemini `promptTokenCount` (cache
    /// included).
    prompt: Option<u64>,
    /// Anthropic `input_tokens` (cache excluded).
    input: Option<u64>,
    cached: Option<u64>,
    cache_write: Option<u64>,
    output: Option<u64>,
    thoughts: Option<u64>,
    tool_prompt: Option<u64>,
}

impl Raw {
    fn merge(&mut self, newer: &Raw) {
        let pick = |old: &mut Option<u64>, new: Option<u64>| {
            if new.is_some() {
                *old = new;
            }
        };
        pick(&mut self.prompt, newer.prompt);
        pick(&mut self.input, newer.input);
        pick(&mut self.cached, newer.cached);
        pick(&mut self.cache_write, newer.cache_write);
        pick(&mut self.output, newer.output);
        pick(&mut self.thoughts, newer.thoughts);
        pick(&mut self.tool_prompt, newer.tool_prompt);
    }

    fn any(&self) -> bool {
        *self != Raw::default()
    }
}

/// A short inline byte string.
#[derive(Clone, Copy)]
struct Tiny<const N: usize> {
    len: usize,
    buf: [u8; N],
}

impl<const N: usize> Tiny<N> {
    fn new() -> Self {
        Tiny {
            len: 0,
            buf: [0; N],
        }
    }
    fn set(&mut self, b: &[u8]) {
        self.len = b.len().min(N);
        self.buf[..self.len].copy_from_slice(&b[..self.len]);
    }
    fn get(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// What one document (SSE event / JSON body / array element) said; committed only if
/// it parsed completely.
struct Doc {
    kind: Tiny<48>,
    raw: Raw,
    content: bool,
    error: bool,
    err_type: Tiny<64>,
    err_code: Tiny<64>,
    err_msg: Vec<u8>,
    root_msg: Vec<u8>,
    root_code: Tiny<64>,
    images: u64,
    videos: u64,
    finish: bool,
    /// The id the document names (OpenAI's top-level `id`, or `response.id`).
    id: Tiny<{ OBJECT_ID_CAP }>,
    /// Bytes of output text (content, reasoning, tool arguments) the document carries.
    out_bytes: u64,
    /// Bytes of a top-level `delta` string: output only in a Responses API text or
    /// arguments delta event, which the document's `type` (read in any order) says.
    delta_bytes: u64,
}

/// Longest object id kept ([`UsageWatcher::object_id`]): the longest a request may name
/// ([`MAX_OBJECT_ID_LEN`](crate::request::MAX_OBJECT_ID_LEN)); a longer one is not kept.
const OBJECT_ID_CAP: usize = crate::request::MAX_OBJECT_ID_LEN;

impl Doc {
    fn new() -> Self {
        Doc {
            id: Tiny::new(),
            kind: Tiny::new(),
            raw: Raw::default(),
            content: false,
            error: false,
            err_type: Tiny::new(),
            err_code: Tiny::new(),
            err_msg: Vec::new(),
            root_msg: Vec::new(),
            root_code: Tiny::new(),
            images: 0,
            videos: 0,
            finish: false,
            out_bytes: 0,
            delta_bytes: 0,
        }
    }

    /// Clears the document, keeping its buffers' capacity.
    fn reset(&mut self) {
        self.id.len = 0;
        self.kind.len = 0;
        self.raw = Raw::default();
        self.content = false;
        self.error = false;
        self.err_type.len = 0;
        self.err_code.len = 0;
        self.err_msg.clear();
        self.root_msg.clear();
        self.root_code.len = 0;
        self.images = 0;
        self.videos = 0;
        self.finish = false;
        self.out_bytes = 0;
        self.delta_bytes = 0;
    }
}

fn set_vec(v: &mut Vec<u8>, b: &[u8]) {
    v.clear();
    v.extend_from_slice(&b[..b.len().min(json::STR_CAP)]);
}

/// An OpenAI `usage` object's field (`rest` is the path below `usage`).
fn openai_usage(d: &mut Doc, rest: &[Frame], v: Scalar<'_>) {
    if let Scalar::Num(Some(n)) = v {
        if key1(rest, &["prompt_tokens", "input_tokens"]) {
            d.raw.prompt = Some(n);
        } else if key1(rest, &["completion_tokens", "output_tokens"]) {
            d.raw.output = Some(n);
        } else if at(rest, &["prompt_tokens_details", "cached_tokens"])
            || at(rest, &["input_tokens_details", "cached_tokens"])
        {
            d.raw.cached = Some(n);
        }
    }
}

/// What an OpenAI `choices` string below `choices` (`rest`) is, when it is output.
enum OpenAiOutput {
    /// Text the user sees (content, refusal, reasoning; a completion's text): the
    /// first-chunk commit point too.
    Text,
    /// A tool call's name or arguments.
    ToolCall,
}

fn openai_output(rest: &[Frame]) -> Option<OpenAiOutput> {
    let text = ["content", "refusal", "reasoning_content", "reasoning"];
    if rest.len() == 3 && at(&rest[..2], &["*", "delta"]) && text.iter().any(|k| rest[2].is_key(k))
        || at(rest, &["*", "text"])
        || at(rest, &["*", "message", "content"])
    {
        return Some(OpenAiOutput::Text);
    }
    let tool = |p: &[Frame]| at(p, &["function", "arguments"]) || at(p, &["function", "name"]);
    let call = under(rest, &["*", "delta", "tool_calls", "*"])
        .or_else(|| under(rest, &["*", "message", "tool_calls", "*"]))
        .is_some_and(tool)
        || under(rest, &["*", "delta", "function_call"])
            .is_some_and(|p| key1(p, &["arguments", "name"]));
    call.then_some(OpenAiOutput::ToolCall)
}

/// The document's object id, kept only when it is whole and not too long.
fn set_id(d: &mut Doc, s: &[u8], len: u64) {
    if (1..=OBJECT_ID_CAP as u64).contains(&len) && s.len() as u64 == len {
        d.id.set(s);
    }
}

/// `path` equals `pat`, where `"*"` matches an array element.
fn at(path: &[Frame], pat: &[&str]) -> bool {
    path.len() == pat.len()
        && path
            .iter()
            .zip(pat)
            .all(|(f, p)| if *p == "*" { f.is_index() } else { f.is_key(p) })
}

/// `path` without `prefix`, if it starts with it.
fn under<'a>(path: &'a [Frame], prefix: &[&str]) -> Option<&'a [Frame]> {
    (path.len() >= prefix.len() && at(&path[..prefix.len()], prefix)).then(|| &path[prefix.len()..])
}

/// A single key.
fn key1(path: &[Frame], keys: &[&str]) -> bool {
    path.len() == 1 && keys.iter().any(|k| path[0].is_key(k))
}

struct Extractor {
    dialect: Dialect,
    doc: Doc,
    event: Tiny<{ crate::sse::EVENT_CAP }>,
    raw: Raw,
    images: u64,
    videos: u64,
    content: bool,
    error: Option<String>,
    end_marker: bool,
    object_id: Tiny<{ OBJECT_ID_CAP }>,
    /// Output text bytes of the complete documents read so far.
    streamed_bytes: u64,
    /// Complete documents that carried content.
    content_chunks: u64,
}

impl Extractor {
    fn new(dialect: Dialect) -> Self {
        Extractor {
            object_id: Tiny::new(),
            dialect,
            doc: Doc::new(),
            event: Tiny::new(),
            raw: Raw::default(),
            images: 0,
            videos: 0,
            content: false,
            error: None,
            end_marker: false,
            streamed_bytes: 0,
            content_chunks: 0,
        }
    }

    fn heap_bytes(&self) -> usize {
        self.doc.err_msg.capacity()
            + self.doc.root_msg.capacity()
            + self.error.as_ref().map_or(0, String::capacity)
    }

    fn usage(&self) -> Option<Usage> {
        if !self.raw.any() && self.images == 0 && self.videos == 0 {
            return None;
        }
        let r = &self.raw;
        let n = |v: Option<u64>| v.unwrap_or(0);
        let mut u = match self.dialect {
            Dialect::OpenAi | Dialect::Native => Usage {
                input_tokens: n(r.prompt).saturating_sub(n(r.cached)),
                cached_input_tokens: n(r.cached),
                output_tokens: n(r.output),
                ..Usage::default()
            },
            Dialect::Anthropic => Usage {
                input_tokens: n(r.input),
                cached_input_tokens: n(r.cached),
                cache_write_tokens: n(r.cache_write),
                output_tokens: n(r.output),
                ..Usage::default()
            },
            Dialect::Gemini => Usage {
                input_tokens: n(r.prompt)
                    .saturating_sub(n(r.cached))
                    .saturating_add(n(r.tool_prompt)),
                cached_input_tokens: n(r.cached),
                output_tokens: n(r.output).saturating_add(n(r.thoughts)),
                ..Usage::default()
            },
        };
        u.images = self.images;
        u.videos = self.videos;
        Some(u)
    }

    fn record_error(&mut self, typ: &[u8], msg: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let typ = String::from_utf8_lossy(typ);
        let msg = String::from_utf8_lossy(msg);
        self.error = Some(match (typ.is_empty(), msg.is_empty()) {
            (false, false) => format!("{typ}: {msg}"),
            (false, true) => typ.into_owned(),
            (true, false) => msg.into_owned(),
            (true, true) => "upstream error".to_owned(),
        });
    }

    /// Dispatches on the first key once, so that the many scalars no rule reads (`object`,
    /// `created`, `model`, `finish_reason` …) cost one comparison, not a dozen.
    fn openai_scalar(&mut self, path: &[Frame], v: Scalar<'_>) {
        let d = &mut self.doc;
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        let first = first.key().unwrap_or_default();
        if first == b"usage" {
            return openai_usage(d, rest, v);
        }
        if first == b"response" && rest.first().is_some_and(|f| f.is_key("usage")) {
            return openai_usage(d, &rest[1..], v);
        }
        match v {
            Scalar::Str(s, len) => match first {
                b"choices" if len > 0 => match openai_output(rest) {
                    Some(OpenAiOutput::Text) => {
                        d.content = true;
                        d.out_bytes = d.out_bytes.saturating_add(len);
                    }
                    Some(OpenAiOutput::ToolCall) => {
                        d.out_bytes = d.out_bytes.saturating_add(len);
                    }
                    None => {}
                },
                b"delta" if rest.is_empty() => d.delta_bytes = len,
                b"error" => {
                    if rest.is_empty() {
                        d.error = true;
                        set_vec(&mut d.err_msg, s);
                    } else if at(rest, &["message"]) {
                        set_vec(&mut d.err_msg, s);
                    } else if at(rest, &["type"]) {
                        d.err_type.set(s);
                    } else if at(rest, &["code"]) {
                        d.err_code.set(s);
                    }
                }
                b"response" => {
                    if at(rest, &["error", "message"]) {
                        set_vec(&mut d.err_msg, s);
                    } else if at(rest, &["error", "code"]) {
                        d.err_code.set(s);
                    } else if at(rest, &["id"]) {
                        set_id(d, s, len);
                    }
                }
                b"message" if rest.is_empty() => set_vec(&mut d.root_msg, s),
                b"code" if rest.is_empty() => d.root_code.set(s),
                b"data" if at(rest, &["*", "b64_json"]) || at(rest, &["*", "url"]) => {
                    d.images = d.images.saturating_add(1);
                }
                b"id" if rest.is_empty() => set_id(d, s, len),
                _ => {}
            },
            Scalar::Num(Some(n)) if first == b"error" && at(rest, &["code"]) => {
                d.err_code.set(n.to_string().as_bytes());
            }
            _ => {}
        }
    }

    fn anthropic_scalar(&mut self, path: &[Frame], v: Scalar<'_>) {
        let d = &mut self.doc;
        let usage = under(path, &["usage"]).or_else(|| under(path, &["message", "usage"]));
        match (usage, v) {
            (Some(rest), Scalar::Num(Some(n))) => {
                if key1(rest, &["input_tokens"]) {
                    d.raw.input = Some(n);
                } else if key1(rest, &["cache_creation_input_tokens"]) {
                    d.raw.cache_write = Some(n);
                } else if key1(rest, &["cache_read_input_tokens"]) {
                    d.raw.cached = Some(n);
                } else if key1(rest, &["output_tokens"]) {
                    d.raw.output = Some(n);
                }
            }
            (None, Scalar::Str(s, len)) => {
                // A stream's `content_block_delta`, or a whole message's content.
                if path.len() == 2
                    && (path[0].is_key("delta")
                        && ["text", "thinking", "partial_json"]
                            .iter()
                            .any(|k| path[1].is_key(k)))
                    || path.len() == 3
                        && at(&path[..2], &["content", "*"])
                        && (path[2].is_key("text") || path[2].is_key("thinking"))
                {
                    d.out_bytes = d.out_bytes.saturating_add(len);
                } else if at(path, &["error", "type"]) {
                    d.err_type.set(s);
                } else if at(path, &["error", "message"]) {
                    set_vec(&mut d.err_msg, s);
                }
            }
            _ => {}
        }
    }

    fn gemini_scalar(&mut self, path: &[Frame], v: Scalar<'_>) {
        let d = &mut self.doc;
        match (under(path, &["usageMetadata"]), v) {
            (Some(rest), Scalar::Num(Some(n))) => {
                if key1(rest, &["promptTokenCount"]) {
                    d.raw.prompt = Some(n);
                } else if key1(rest, &["cachedContentTokenCount"]) {
                    d.raw.cached = Some(n);
                } else if key1(rest, &["candidatesTokenCount"]) {
                    d.raw.output = Some(n);
                } else if key1(rest, &["thoughtsTokenCount"]) {
                    d.raw.thoughts = Some(n);
                } else if key1(rest, &["toolUsePromptTokenCount"]) {
                    d.raw.tool_prompt = Some(n);
                }
            }
            (None, Scalar::Str(s, len)) => {
                let part = under(path, &["candidates", "*", "content", "parts", "*"]);
                if part.is_some_and(|p| {
                    at(p, &["text"]) || p.first().is_some_and(|f| f.is_key("functionCall"))
                }) {
                    d.out_bytes = d.out_bytes.saturating_add(len);
                } else if at(
                    path,
                    &[
                        "candidates",
                        "*",
                        "content",
                        "parts",
                        "*",
                        "inlineData",
                        "mimeType",
                    ],
                ) {
                    let lower =
                        |p: &[u8]| s.len() >= p.len() && s[..p.len()].eq_ignore_ascii_case(p);
                    if lower(b"image/") {
                        d.images = d.images.saturating_add(1);
                    } else if lower(b"video/") {
                        d.videos = d.videos.saturating_add(1);
                    }
                } else if at(path, &["candidates", "*", "finishReason"]) {
                    d.finish = true;
                } else if at(path, &["error", "message"]) {
                    set_vec(&mut d.err_msg, s);
                } else if at(path, &["error", "status"]) {
                    d.err_type.set(s);
                }
            }
            (None, Scalar::Num(Some(n))) if at(path, &["error", "code"]) => {
                d.err_code.set(n.to_string().as_bytes());
            }
            _ => {}
        }
    }
}

impl Sink for Extractor {
    fn begin(&mut self) {
        self.doc.reset();
    }

    fn open(&mut self, path: &[Frame], array: bool) {
        let d = &mut self.doc;
        match self.dialect {
            Dialect::OpenAi | Dialect::Native => {
                if !array && (at(path, &["error"]) || at(path, &["response", "error"])) {
                    d.error = true;
                } else if path.len() == 4
                    && at(&path[..3], &["choices", "*", "delta"])
                    && ["tool_calls", "function_call", "audio"]
                        .iter()
                        .any(|k| path[3].is_key(k))
                    || !array && at(path, &["choices", "*", "message"])
                {
                    d.content = true;
                }
            }
            Dialect::Anthropic => {
                if at(path, &["content", "*"]) {
                    d.content = true;
                }
            }
            Dialect::Gemini => {
                if at(path, &["candidates", "*", "content", "parts", "*"]) {
                    d.content = true;
                } else if !array && at(path, &["error"]) {
                    d.error = true;
                }
            }
        }
    }

    fn scalar(&mut self, path: &[Frame], v: Scalar<'_>) {
        if let (true, Scalar::Str(s, _)) = (key1(path, &["type"]), v) {
            self.doc.kind.set(s);
            return;
        }
        match self.dialect {
            Dialect::OpenAi | Dialect::Native => self.openai_scalar(path, v),
            Dialect::Anthropic => self.anthropic_scalar(path, v),
            Dialect::Gemini => self.gemini_scalar(path, v),
        }
    }

    fn end(&mut self, complete: bool) {
        if !complete {
            return;
        }
        let error_event = self.event.get() == b"error";
        let d = &self.doc;
        if self.object_id.len == 0 && d.id.len > 0 {
            self.object_id.set(d.id.get());
        }
        self.raw.merge(&d.raw);
        self.images = self.images.saturating_add(d.images);
        self.videos = self.videos.saturating_add(d.videos);
        let kind = d.kind.get();
        let content = d.content
            || match self.dialect {
                Dialect::Anthropic => kind == b"content_block_delta",
                Dialect::OpenAi | Dialect::Native => {
                    kind.starts_with(b"response.") && kind.ends_with(b".delta")
                }
                Dialect::Gemini => false,
            };
        self.content |= content;
        let responses_delta = matches!(self.dialect, Dialect::OpenAi | Dialect::Native)
            && kind.starts_with(b"response.")
            && kind.ends_with(b".delta")
            && !kind.windows(5).any(|w| w == b"audio");
        let out = d
            .out_bytes
            .saturating_add(if responses_delta { d.delta_bytes } else { 0 });
        self.streamed_bytes = self.streamed_bytes.saturating_add(out);
        if content {
            self.content_chunks = self.content_chunks.saturating_add(1);
        }
        let is_error = match self.dialect {
            Dialect::OpenAi | Dialect::Native => {
                d.error || kind == b"error" || kind == b"response.failed" || error_event
            }
            Dialect::Anthropic => kind == b"error" || error_event,
            Dialect::Gemini => d.error || error_event,
        };
        self.end_marker |= match self.dialect {
            Dialect::OpenAi | Dialect::Native => matches!(
                kind,
                b"response.completed" | b"response.incomplete" | b"response.failed"
            ),
            Dialect::Anthropic => kind == b"message_stop",
            Dialect::Gemini => d.finish,
        };
        if is_error && self.error.is_none() {
            let d = &self.doc;
            let typ = [d.err_type.get(), d.err_code.get(), d.root_code.get()]
                .into_iter()
                .find(|t| !t.is_empty())
                .unwrap_or_default();
            let msg = if d.err_msg.is_empty() {
                &d.root_msg
            } else {
                &d.err_msg
            };
            let (typ, msg) = (typ.to_vec(), msg.clone());
            self.record_error(&typ, &msg);
        }
    }
}

impl EventSink for Extractor {
    fn set_event(&mut self, name: &[u8]) {
        self.event.set(name);
    }

    fn done_marker(&mut self) {
        self.end_marker = true;
    }

    fn event_done(&mut self) {
        // An `event: error` whose data is not the JSON we know is still an error.
        if self.event.get() == b"error" {
            self.record_error(b"", b"");
        }
    }
}
