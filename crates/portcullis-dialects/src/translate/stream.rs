//! Streamed answers from one dialect to another: an OpenAI chat-completions stream
//! for an Anthropic messages client, and the reverse, event by event.
//!
//! Input arrives in arbitrary chunks; only the current incomplete SSE event is
//! buffered (at most [`EVENT_CAP`] bytes: a larger event ends the stream with the
//! client's error). Each event's JSON is read into typed structures (unknown fields
//! ignored) and written as the client's events. A stream that ends before its final
//! event (Anthropic `message_stop`; OpenAI `[DONE]` or a `finish_reason`) ends with
//! the client's in-stream error, never with `[DONE]` / `message_stop`. A malformed
//! event ends the stream the same way rather than being skipped.
//!
//! What is approximated:
//! - Anthropic → OpenAI: the thinking blocks (text and signature, and redacted
//!   thinking) are kept until the first tool call, whose id is meant to carry them
//!   (`request::wrap_tool_id`) so the client can send them back; this memory is
//!   bounded by the answer. Thinking text is also streamed as `reasoning_content`.
//!   Block kinds other than text, thinking and tool use (server tools, citations)
//!   are not translated.
//! - OpenAI → Anthropic: `reasoning_content` is skipped (an Anthropic thinking block
//!   needs a signature OpenAI does not give). Only choice 0 is translated. Anthropic
//!   blocks cannot interleave, so a tool call is streamed while its block is open and
//!   the deltas of any other call are buffered until its block opens: the open call's
//!   block closes once its arguments form a complete JSON value and another call is
//!   waiting (or at the end). Sequential calls (the usual case) stream live;
//!   interleaved ones are delivered whole, in order. Argument deltas that arrive for a
//!   call whose block was closed by text in between are dropped. The provider's
//!   input tokens are only known at the end, so `message_start` reports 0 and
//!   `message_delta` carries the real counts.
use super::Wire;
use super::request::{JSON_TOOL, wrap_tool_id};
use serde::Deserialize;
use serde_json::{Value, json};

/// Largest single SSE event buffered.
const EVENT_CAP: usize = 4 << 20;
const TRUNCATED: &str = "the upstream stream ended before its final event";
const TOO_LARGE: &str = "an upstream stream event exceeded 4 MiB";
const MALFORMED: &str = "the upstream stream sent an event that could not be read";

/// One leg of a stream's translation: the events of one dialect in, the bytes of
/// another out. A translation between two dialects neither of which is OpenAI chat
/// runs two legs through it (see [`super::Wire`]).
pub(crate) trait Leg: std::fmt::Debug + Send {
    /// One complete event: `name` from its `event:` line (empty when none), `data`
    /// its joined `data:` lines. Returns whether to go on: false once the stream has
    /// ended, cleanly or with the client's error. `at_eof`: the event is the body's
    /// last, unterminated one; if it does not parse it was cut, and the leg returns
    /// true without failing (its `finish` then reports the truncation).
    fn event(&mut self, name: &str, data: &[u8], at_eof: bool, out: &mut Vec<u8>) -> bool;
    /// The body ended after every event: true when the stream had ended with its
    /// final event (or, for a dialect without one, with a complete answer); otherwise
    /// the leg writes the client's in-stream error and returns false.
    fn finish(&mut self, out: &mut Vec<u8>) -> bool;
    /// Ends the stream with the client's in-stream error (`code`: a short machine
    /// name for an OpenAI client).
    fn fail(&mut self, message: &str, code: &str, out: &mut Vec<u8>);
}

/// A leg with its SSE splitter.
#[derive(Debug)]
struct Stage {
    sse: Sse,
    leg: Box<dyn Leg>,
    over: bool,
}

impl Stage {
    fn new(leg: Box<dyn Leg>) -> Self {
        Self {
            sse: Sse::default(),
            leg,
            over: false,
        }
    }

    fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        if self.over {
            return;
        }
        let Self { sse, leg, over } = self;
        let fed = sse.feed(chunk, &mut |name, data| {
            let go = leg.event(name, data, false, out);
            *over |= !go;
            go
        });
        if fed.is_err() {
            leg.fail(TOO_LARGE, "event_too_large", out);
            *over = true;
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> bool {
        if !self.over {
            // A last event not closed by a blank line is still read; if it does not
            // parse, it was cut (the leg reports the truncation).
            let Self { sse, leg, over } = self;
            sse.flush(&mut |name, data| {
                let go = leg.event(name, data, true, out);
                *over |= !go;
                go
            });
        }
        self.over = true;
        self.leg.finish(out)
    }
}

/// Translates a streamed (SSE) answer event by event.
#[derive(Debug)]
pub struct StreamTranslator {
    stages: Stages,
}

#[derive(Debug)]
enum Stages {
    /// The same dialect: the bytes pass unchanged.
    Pass,
    One(Stage),
    /// Through OpenAI chat: the first leg's output is the second's input.
    Two(Stage, Stage, Vec<u8>),
}

impl StreamTranslator {
    /// A translator of a `from` stream for a `to` client, under `public_model`; an
    /// OpenAI chat client gets its final usage chunk when `include_usage`.
    pub fn new(from: Wire, to: Wire, public_model: &str, include_usage: bool) -> Self {
        let stages = if from == to {
            Stages::Pass
        } else if from == Wire::Chat || to == Wire::Chat {
            Stages::One(Stage::new(leg(from, to, public_model, include_usage)))
        } else {
            Stages::Two(
                Stage::new(leg(from, Wire::Chat, public_model, true)),
                Stage::new(leg(Wire::Chat, to, public_model, include_usage)),
                Vec::new(),
            )
        };
        Self { stages }
    }

    /// Feeds the next bytes of the provider's stream; the client's bytes go to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        match &mut self.stages {
            Stages::Pass => out.extend_from_slice(chunk),
            Stages::One(s) => s.push(chunk, out),
            Stages::Two(a, b, mid) => {
                mid.clear();
                a.push(chunk, mid);
                b.push(mid, out);
            }
        }
    }

    /// The provider's stream ended: true when it ended with its final event;
    /// otherwise the client's in-stream error goes to `out`.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> bool {
        match &mut self.stages {
            Stages::Pass => true,
            Stages::One(s) => s.finish(out),
            Stages::Two(a, b, mid) => {
                mid.clear();
                a.finish(mid);
                b.push(mid, out);
                b.finish(out)
            }
        }
    }
}

/// The leg from `from` to `to`, one of which is OpenAI chat.
fn leg(from: Wire, to: Wire, model: &str, include_usage: bool) -> Box<dyn Leg> {
    let mode = match (from, to) {
        (Wire::Messages, Wire::Chat) => Mode::AToO(AToO::default()),
        (Wire::Chat, Wire::Messages) => Mode::OToA(OToA::default()),
        (Wire::Gemini, Wire::Chat) => {
            return Box::new(super::gemini::GeminiToChat::new(model, include_usage));
        }
        (Wire::Chat, Wire::Gemini) => {
            return Box::new(super::gemini::ChatToGemini::new(model));
        }
        (Wire::Chat, Wire::Responses) => {
            return Box::new(super::responses::ChatToResponses::new(model));
        }
        _ => Mode::Pass,
    };
    Box::new(Translator {
        mode,
        model: model.to_owned(),
        include_usage,
        end: End::Open,
        at_eof: false,
    })
}

impl Leg for Translator {
    fn event(&mut self, name: &str, data: &[u8], at_eof: bool, out: &mut Vec<u8>) -> bool {
        self.at_eof = at_eof;
        Translator::event(self, name, data, out)
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> bool {
        if self.end == End::Open {
            if matches!(&self.mode, Mode::OToA(o) if o.finish.is_some()) {
                self.end_o_to_a(out);
            } else {
                self.fail(TRUNCATED, "stream_truncated", out);
            }
        }
        self.end == End::Clean
    }

    fn fail(&mut self, message: &str, code: &str, out: &mut Vec<u8>) {
        Translator::fail(self, message, code, out);
    }
}

/// The SSE splitter: the current line and the current event's data only.
#[derive(Debug, Default)]
struct Sse {
    line: Vec<u8>,
    /// The last line ended with `\r`: a leading `\n` belongs to it.
    cr: bool,
    event: String,
    data: Vec<u8>,
    has_data: bool,
}

/// The event callback: `false` stops the stream.
type OnEvent<'a> = dyn FnMut(&str, &[u8]) -> bool + 'a;

impl Sse {
    fn feed(&mut self, mut b: &[u8], on: &mut OnEvent<'_>) -> Result<(), ()> {
        while !b.is_empty() {
            if std::mem::take(&mut self.cr) && b[0] == b'\n' {
                b = &b[1..];
                continue;
            }
            let Some(at) = memchr::memchr2(b'\n', b'\r', b) else {
                self.line.extend_from_slice(b);
                return self.check();
            };
            self.cr = b[at] == b'\r';
            let go = if self.line.is_empty() {
                self.on_line(&b[..at], on)
            } else {
                self.line.extend_from_slice(&b[..at]);
                let line = std::mem::take(&mut self.line);
                let go = self.on_line(&line, on);
                self.line = line;
                self.line.clear();
                go
            };
            self.check()?;
            if !go {
                return Ok(());
            }
            b = &b[at + 1..];
        }
        Ok(())
    }

    fn check(&self) -> Result<(), ()> {
        if self.line.len() + self.data.len() > EVENT_CAP {
            Err(())
        } else {
            Ok(())
        }
    }

    /// The end of the body: a pending line and event are dispatched.
    fn flush(&mut self, on: &mut OnEvent<'_>) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() || self.on_line(&line, on) {
            self.on_line(b"", on);
        }
    }

    /// One line; returns whether to go on.
    fn on_line(&mut self, line: &[u8], on: &mut OnEvent<'_>) -> bool {
        if line.is_empty() {
            let go = !self.has_data || on(&self.event, &self.data);
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            return go;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(0) => return true,
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if std::mem::replace(&mut self.has_data, true) {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
            }
            b"event" => self.event = String::from_utf8_lossy(value).into_owned(),
            _ => {}
        }
        true
    }
}

#[derive(Debug)]
struct Translator {
    mode: Mode,
    model: String,
    include_usage: bool,
    end: End,
    /// The body ended: an unreadable last event is a cut one.
    at_eof: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Open,
    Clean,
    Failed,
}

#[derive(Debug)]
enum Mode {
    Pass,
    AToO(AToO),
    OToA(OToA),
}

fn sse_data(out: &mut Vec<u8>, v: &Value) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(v.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

fn sse_event(out: &mut Vec<u8>, name: &str, v: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\n");
    sse_data(out, v);
}

fn openai_error(out: &mut Vec<u8>, message: &str, kind: &str, code: Option<&str>) {
    let e = json!({"error": {"message": message, "type": kind, "code": code, "param": null}});
    sse_data(out, &e);
}

fn anthropic_error(out: &mut Vec<u8>, kind: &str, message: &str) {
    let e = json!({"type": "error", "error": {"type": kind, "message": message}});
    sse_event(out, "error", &e);
}

impl Translator {
    /// The stream ends with the client's error (`code` for an OpenAI client).
    fn fail(&mut self, message: &str, code: &str, out: &mut Vec<u8>) {
        match self.mode {
            Mode::AToO(_) => openai_error(out, message, "server_error", Some(code)),
            Mode::OToA(_) => anthropic_error(out, "api_error", message),
            Mode::Pass => {}
        }
        self.end = End::Failed;
    }

    /// One complete event; returns whether to go on.
    fn event(&mut self, name: &str, data: &[u8], out: &mut Vec<u8>) -> bool {
        let ok = match self.mode {
            Mode::AToO(_) => self.a_to_o(name, data, out),
            Mode::OToA(_) => self.o_to_a(data, out),
            Mode::Pass => Ok(()),
        };
        if ok.is_err() && !self.at_eof {
            self.fail(MALFORMED, "malformed_event", out);
        }
        self.end == End::Open
    }
}

// ---- Anthropic provider → OpenAI client ----

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum AEvent {
    MessageStart {
        message: AMessage,
    },
    ContentBlockStart {
        index: u64,
        content_block: ABlock,
    },
    ContentBlockDelta {
        index: u64,
        delta: ADelta,
    },
    ContentBlockStop {},
    MessageDelta {
        #[serde(default)]
        delta: AMessageDelta,
        #[serde(default)]
        usage: Option<AUsage>,
    },
    MessageStop {},
    Error {
        error: AError,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AMessage {
    id: String,
    usage: Option<AUsage>,
}

#[derive(Deserialize, Default)]
struct AUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
struct AMessageDelta {
    stop_reason: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AError {
    #[serde(rename = "type")]
    kind: String,
    message: String,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ABlock {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ADelta {
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Default)]
struct AToO {
    id: String,
    created: u64,
    input: u64,
    cache_read: u64,
    cache_creation: u64,
    output: u64,
    /// The open block: its Anthropic index and kind.
    block: Option<(u64, Block)>,
    /// Thinking blocks seen so far, for the first tool call's id.
    thinking: Vec<Value>,
    tools: usize,
    /// The answer is a structured one (its text is the forced tool's input).
    structured: bool,
}

#[derive(Debug, Clone, Copy)]
enum Block {
    Text,
    /// Position in `thinking`.
    Thinking(usize),
    /// The OpenAI tool-call index.
    Tool(usize),
    /// The forced tool of a structured answer (`request::JSON_TOOL`).
    Structured,
    Other,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl AToO {
    fn chunk(&self, model: &str, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    }

    fn usage(&mut self, u: &AUsage) {
        let set = |slot: &mut u64, v: Option<u64>| *slot = v.unwrap_or(*slot);
        set(&mut self.input, u.input_tokens);
        set(&mut self.cache_read, u.cache_read_input_tokens);
        set(&mut self.cache_creation, u.cache_creation_input_tokens);
        set(&mut self.output, u.output_tokens);
    }
}

fn finish_reason(stop: &str) -> &'static str {
    match stop {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    }
}

impl Translator {
    fn a_to_o(&mut self, _name: &str, data: &[u8], out: &mut Vec<u8>) -> Result<(), ()> {
        let ev: AEvent = serde_json::from_slice(data).map_err(|_| ())?;
        let Mode::AToO(a) = &mut self.mode else {
            return Ok(());
        };
        let model = self.model.as_str();
        match ev {
            AEvent::MessageStart { message } => {
                a.id = format!("chatcmpl-{}", message.id);
                a.created = unix_now();
                if let Some(u) = &message.usage {
                    a.usage(u);
                }
                sse_data(
                    out,
                    &a.chunk(model, json!({"role": "assistant", "content": ""}), None),
                );
            }
            AEvent::ContentBlockStart {
                index,
                content_block,
            } => {
                let kind = match content_block {
                    ABlock::Text { text } => {
                        if !text.is_empty() {
                            sse_data(out, &a.chunk(model, json!({"content": text}), None));
                        }
                        Block::Text
                    }
                    ABlock::Thinking {
                        thinking,
                        signature,
                    } => {
                        if !thinking.is_empty() {
                            let d = json!({"reasoning_content": thinking});
                            sse_data(out, &a.chunk(model, d, None));
                        }
                        a.thinking.push(json!({
                            "type": "thinking", "thinking": thinking, "signature": signature,
                        }));
                        Block::Thinking(a.thinking.len() - 1)
                    }
                    ABlock::RedactedThinking { data } => {
                        a.thinking
                            .push(json!({"type": "redacted_thinking", "data": data}));
                        Block::Other
                    }
                    // The structured answer of a `response_format` request: its
                    // input is the answer's text.
                    ABlock::ToolUse { name, .. } if name == JSON_TOOL => {
                        a.structured = true;
                        Block::Structured
                    }
                    ABlock::ToolUse { id, name, input } => {
                        let k = a.tools;
                        a.tools += 1;
                        let id = if k == 0 && !a.thinking.is_empty() {
                            wrap_tool_id(&id, &a.thinking)
                        } else {
                            id
                        };
                        let args = match &input {
                            Value::Object(m) if !m.is_empty() => input.to_string(),
                            _ => String::new(),
                        };
                        let d = json!({"tool_calls": [{
                            "index": k, "id": id, "type": "function",
                            "function": {"name": name, "arguments": args},
                        }]});
                        sse_data(out, &a.chunk(model, d, None));
                        Block::Tool(k)
                    }
                    ABlock::Other => Block::Other,
                };
                a.block = Some((index, kind));
            }
            AEvent::ContentBlockDelta { index, delta } => {
                let kind = match a.block {
                    Some((i, k)) if i == index => k,
                    _ => return Err(()),
                };
                let d = match (delta, kind) {
                    (ADelta::TextDelta { text }, _) => json!({"content": text}),
                    (ADelta::ThinkingDelta { thinking }, k) => {
                        if let Block::Thinking(t) = k {
                            if let Some(Value::String(s)) = a.thinking[t].get_mut("thinking") {
                                s.push_str(&thinking);
                            }
                        }
                        json!({"reasoning_content": thinking})
                    }
                    (ADelta::SignatureDelta { signature }, Block::Thinking(t)) => {
                        if let Some(Value::String(s)) = a.thinking[t].get_mut("signature") {
                            s.push_str(&signature);
                        }
                        return Ok(());
                    }
                    (ADelta::InputJsonDelta { partial_json }, Block::Structured) => {
                        json!({"content": partial_json})
                    }
                    (ADelta::InputJsonDelta { partial_json }, Block::Tool(k)) => {
                        json!({"tool_calls": [{"index": k, "function": {"arguments": partial_json}}]})
                    }
                    _ => return Ok(()),
                };
                sse_data(out, &a.chunk(model, d, None));
            }
            AEvent::ContentBlockStop {} => a.block = None,
            AEvent::MessageDelta { delta, usage } => {
                if let Some(u) = &usage {
                    a.usage(u);
                }
                let reason = match delta.stop_reason.as_deref() {
                    Some("tool_use") if a.structured && a.tools == 0 => Some("stop"),
                    r => r.map(finish_reason),
                };
                sse_data(
                    out,
                    &a.chunk(model, json!({}), Some(reason.unwrap_or("stop"))),
                );
            }
            AEvent::MessageStop {} => {
                if self.include_usage {
                    let prompt = a.input + a.cache_read + a.cache_creation;
                    let u = json!({
                        "prompt_tokens": prompt, "completion_tokens": a.output,
                        "total_tokens": prompt + a.output,
                        "prompt_tokens_details": {"cached_tokens": a.cache_read},
                    });
                    let c = json!({
                        "id": a.id, "object": "chat.completion.chunk", "created": a.created,
                        "model": model, "choices": [], "usage": u,
                    });
                    sse_data(out, &c);
                }
                out.extend_from_slice(b"data: [DONE]\n\n");
                self.end = End::Clean;
            }
            AEvent::Error { error } => {
                let (kind, code) = match error.kind.as_str() {
                    "overloaded_error" => ("server_error", Some("overloaded")),
                    "rate_limit_error" => ("rate_limit_exceeded", Some("rate_limit_exceeded")),
                    "api_error" => ("server_error", None),
                    k => (k, None),
                };
                openai_error(out, &error.message, kind, code);
                self.end = End::Failed;
            }
            AEvent::Other => {}
        }
        Ok(())
    }
}

// ---- OpenAI provider → Anthropic client ----

#[derive(Deserialize, Default)]
#[serde(default)]
struct OChunk {
    id: String,
    choices: Vec<OChoice>,
    usage: Option<OUsage>,
    error: Option<OError>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct OChoice {
    index: u64,
    delta: Option<ODelta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ODelta {
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<Vec<OToolCall>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct OToolCall {
    index: u64,
    id: Option<String>,
    function: Option<OFunction>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct OFunction {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct OUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    prompt_tokens_details: Option<ODetails>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ODetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct OError {
    message: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    code: Option<Value>,
}

#[derive(Debug, Default)]
struct OToA {
    started: bool,
    /// The next Anthropic block index.
    next: u64,
    open: Open,
    tools: Vec<Tool>,
    finish: Option<String>,
    /// Prompt, completion and cached tokens.
    usage: Option<(u64, u64, u64)>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Open {
    #[default]
    None,
    Text(u64),
    /// Position in `tools` and the block index.
    Tool(usize, u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolState {
    Queued,
    Open,
    Closed,
}

#[derive(Debug)]
struct Tool {
    oai: u64,
    id: String,
    name: String,
    state: ToolState,
    /// Argument bytes waiting for the block to open.
    args: String,
    json: JsonEnd,
}

/// Whether a streamed JSON value has ended, byte by byte in constant memory.
#[derive(Debug, Default, Clone, Copy)]
struct JsonEnd {
    depth: u32,
    in_str: bool,
    esc: bool,
    started: bool,
}

impl JsonEnd {
    fn feed(&mut self, s: &str) {
        for b in s.bytes() {
            if self.in_str {
                if self.esc {
                    self.esc = false;
                } else if b == b'\\' {
                    self.esc = true;
                } else if b == b'"' {
                    self.in_str = false;
                }
            } else {
                match b {
                    b'"' => self.in_str = true,
                    b'{' | b'[' => {
                        self.depth += 1;
                        self.started = true;
                    }
                    b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                    _ => {}
                }
            }
        }
    }

    fn complete(&self) -> bool {
        self.started && self.depth == 0 && !self.in_str
    }
}

fn stop_reason(finish: &str) -> &'static str {
    match finish {
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" => "refusal",
        _ => "end_turn",
    }
}

impl OToA {
    fn close(&mut self, out: &mut Vec<u8>) {
        let index = match self.open {
            Open::None => return,
            Open::Text(i) => i,
            Open::Tool(t, i) => {
                self.tools[t].state = ToolState::Closed;
                i
            }
        };
        sse_event(
            out,
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        );
        self.open = Open::None;
    }

    fn text(&mut self, text: &str, out: &mut Vec<u8>) {
        if text.is_empty() {
            return;
        }
        let index = match self.open {
            Open::Text(i) => i,
            _ => {
                self.close(out);
                let i = self.next;
                self.next += 1;
                let s = json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "text", "text": ""}});
                sse_event(out, "content_block_start", &s);
                self.open = Open::Text(i);
                i
            }
        };
        let d = json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "text_delta", "text": text}});
        sse_event(out, "content_block_delta", &d);
    }

    fn args(out: &mut Vec<u8>, index: u64, partial: &str) {
        let d = json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "input_json_delta", "partial_json": partial}});
        sse_event(out, "content_block_delta", &d);
    }

    fn open_tool(&mut self, t: usize, out: &mut Vec<u8>) {
        self.close(out);
        let i = self.next;
        self.next += 1;
        let tool = &mut self.tools[t];
        let s = json!({"type": "content_block_start", "index": i, "content_block":
            {"type": "tool_use", "id": tool.id, "name": tool.name, "input": {}}});
        sse_event(out, "content_block_start", &s);
        if !tool.args.is_empty() {
            Self::args(out, i, &std::mem::take(&mut tool.args));
        }
        tool.state = ToolState::Open;
        self.open = Open::Tool(t, i);
    }

    fn tool_call(&mut self, tc: OToolCall, out: &mut Vec<u8>) {
        let (name, arguments) = match tc.function {
            Some(f) => (f.name, f.arguments),
            None => (None, None),
        };
        let t = match self.tools.iter().position(|t| t.oai == tc.index) {
            Some(t) => t,
            None => {
                self.tools.push(Tool {
                    oai: tc.index,
                    id: String::new(),
                    name: String::new(),
                    state: ToolState::Queued,
                    args: String::new(),
                    json: JsonEnd::default(),
                });
                self.tools.len() - 1
            }
        };
        let tool = &mut self.tools[t];
        if tool.state == ToolState::Queued {
            if let Some(id) = tc.id {
                tool.id = id;
            }
            if let Some(name) = name {
                tool.name.push_str(&name);
            }
        }
        if let Some(a) = arguments.filter(|a| !a.is_empty()) {
            tool.json.feed(&a);
            match (tool.state, self.open) {
                (ToolState::Open, Open::Tool(_, i)) => Self::args(out, i, &a),
                (ToolState::Queued, _) => tool.args.push_str(&a),
                _ => {}
            }
        }
        self.switch(out);
    }

    /// Opens the first waiting tool call when the open block is done with.
    fn switch(&mut self, out: &mut Vec<u8>) {
        loop {
            let Some(next) = self
                .tools
                .iter()
                .position(|t| t.state == ToolState::Queued && !t.name.is_empty())
            else {
                return;
            };
            match self.open {
                Open::Tool(t, _) if !self.tools[t].json.complete() => return,
                _ => self.open_tool(next, out),
            }
        }
    }
}

impl Translator {
    fn o_to_a(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), ()> {
        if data.trim_ascii() == b"[DONE]" {
            self.end_o_to_a(out);
            return Ok(());
        }
        let chunk: OChunk = serde_json::from_slice(data).map_err(|_| ())?;
        if let Some(e) = chunk.error {
            let code = e.code.as_ref().and_then(Value::as_str).unwrap_or("");
            let kind = e.kind.as_deref().unwrap_or("");
            let kind = match (kind, code) {
                (_, "rate_limit_exceeded") | ("rate_limit_exceeded", _) => "rate_limit_error",
                (_, "overloaded") => "overloaded_error",
                ("invalid_request_error", _) => "invalid_request_error",
                _ => "api_error",
            };
            anthropic_error(out, kind, &e.message);
            self.end = End::Failed;
            return Ok(());
        }
        let Mode::OToA(o) = &mut self.mode else {
            return Ok(());
        };
        if !o.started {
            o.started = true;
            let m = json!({"type": "message_start", "message": {
                "id": format!("msg_{}", chunk.id), "type": "message", "role": "assistant",
                "model": self.model, "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": {"input_tokens": 0, "output_tokens": 0},
            }});
            sse_event(out, "message_start", &m);
        }
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            let delta = choice.delta.unwrap_or_default();
            if let Some(text) = delta.content.as_deref().or(delta.refusal.as_deref()) {
                o.text(text, out);
            }
            for tc in delta.tool_calls.into_iter().flatten() {
                o.tool_call(tc, out);
            }
            if let Some(f) = choice.finish_reason {
                o.finish = Some(f);
            }
        }
        if let Some(u) = chunk.usage {
            let cached = u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0);
            o.usage = Some((u.prompt_tokens, u.completion_tokens, cached));
        }
        if o.finish.is_some() && o.usage.is_some() {
            self.end_o_to_a(out);
        }
        Ok(())
    }

    /// The Anthropic client's last events: open and waiting blocks, the stop reason and
    /// usage, `message_stop`.
    fn end_o_to_a(&mut self, out: &mut Vec<u8>) {
        let Mode::OToA(o) = &mut self.mode else {
            return;
        };
        if !o.started {
            o.started = true;
            let m = json!({"type": "message_start", "message": {
                "id": "msg_", "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            }});
            sse_event(out, "message_start", &m);
        }
        o.close(out);
        while let Some(t) = o.tools.iter().position(|t| t.state == ToolState::Queued) {
            o.open_tool(t, out);
            o.close(out);
        }
        let usage = match o.usage {
            Some((prompt, completion, cached)) => json!({
                "output_tokens": completion, "input_tokens": prompt.saturating_sub(cached),
                "cache_read_input_tokens": cached,
            }),
            None => json!({"output_tokens": 0}),
        };
        let reason = stop_reason(o.finish.as_deref().unwrap_or("stop"));
        let d = json!({"type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": null}, "usage": usage});
        sse_event(out, "message_delta", &d);
        sse_event(out, "message_stop", &json!({"type": "message_stop"}));
        self.end = End::Clean;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Wire = Wire::Messages;
    const O: Wire = Wire::Chat;

    fn run(from: Wire, to: Wire, parts: &[&[u8]], usage: bool) -> (Vec<u8>, bool) {
        let mut t = StreamTranslator::new(from, to, "public", usage);
        let mut out = Vec::new();
        for p in parts {
            t.push(p, &mut out);
        }
        let ok = t.finish(&mut out);
        (out, ok)
    }

    /// The client's events: (event name, data JSON; `[DONE]` as a string), with
    /// `created` zeroed.
    fn parse(out: &[u8]) -> Vec<(String, Value)> {
        let s = std::str::from_utf8(out).expect("utf-8 output");
        assert!(s.is_empty() || s.ends_with("\n\n"), "{s}");
        s.split_terminator("\n\n")
            .map(|ev| {
                let mut name = String::new();
                let mut data = None;
                for line in ev.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = n.to_owned();
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        assert!(data.is_none(), "one data line per event");
                        data = Some(d.to_owned());
                    } else {
                        panic!("unexpected line {line:?}");
                    }
                }
                let data = data.expect("data line");
                let mut v = if data == "[DONE]" {
                    Value::String(data)
                } else {
                    serde_json::from_str(&data).expect("valid JSON")
                };
                if let Some(c) = v.get_mut("created") {
                    *c = json!(0);
                }
                (name, v)
            })
            .collect()
    }

    /// Translates `input` whole, split at every byte and one byte at a time; all
    /// must agree. Returns the parsed events and `finish`.
    fn split_anywhere(
        from: Wire,
        to: Wire,
        input: &str,
        usage: bool,
    ) -> (Vec<(String, Value)>, bool) {
        let b = input.as_bytes();
        let (whole, ok) = run(from, to, &[b], usage);
        let want = parse(&whole);
        for i in 0..=b.len() {
            let (o, k) = run(from, to, &[&b[..i], &b[i..]], usage);
            assert_eq!((parse(&o), k), (want.clone(), ok), "split at {i}");
        }
        let bytes: Vec<&[u8]> = b.chunks(1).collect();
        let (o, k) = run(from, to, &bytes, usage);
        assert_eq!((parse(&o), k), (want.clone(), ok), "byte by byte");
        (want, ok)
    }

    fn data_only(events: &[(String, Value)]) -> Vec<Value> {
        events.iter().map(|(_, v)| v.clone()).collect()
    }

    fn chunk(id: &str, delta: Value, finish: Value) -> Value {
        json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": "public",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    }

    const ANTHROPIC_TEXT: &str = "event: message_start\n\
data: {\"type\": \"message_start\", \"message\": {\"id\": \"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY\", \"type\": \"message\", \"role\": \"assistant\", \"content\": [], \"model\": \"claude-opus-4-20250514\", \"stop_reason\": null, \"stop_sequence\": null, \"usage\": {\"input_tokens\": 25, \"output_tokens\": 1}}}\n\n\
event: content_block_start\n\
data: {\"type\": \"content_block_start\", \"index\": 0, \"content_block\": {\"type\": \"text\", \"text\": \"\"}}\n\n\
event: ping\n\
data: {\"type\": \"ping\"}\n\n\
event: content_block_delta\n\
data: {\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": \"Hello\"}}\n\n\
event: content_block_delta\n\
data: {\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": \" wörld ✓\"}}\n\n\
event: content_block_stop\n\
data: {\"type\": \"content_block_stop\", \"index\": 0}\n\n\
event: message_delta\n\
data: {\"type\": \"message_delta\", \"delta\": {\"stop_reason\": \"end_turn\", \"stop_sequence\":null}, \"usage\": {\"output_tokens\": 15}}\n\n\
event: message_stop\n\
data: {\"type\": \"message_stop\"}\n\n";

    const ANTHROPIC_THINKING_TOOLS: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01T\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_read_input_tokens\":1000,\"cache_creation_input_tokens\":28,\"output_tokens\":2}}}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"I need the weather \"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"in two cities.\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCgIYAhIM1gbcDa9GJwZA2b3h\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"EmwKAhgBEgy3va\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
event: ping\n\
data: {\"type\": \"ping\"}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"get_weather\",\"input\":{}}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"location\\\":\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\" \\\"San Francisco, CA\\\"}\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":2}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":3,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_02\",\"name\":\"get_weather\",\"input\":{}}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"location\\\": \\\"Bogotá\\\"}\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":3}\n\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}\n\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\n";

    fn openai_chunk(delta: &str, finish: &str) -> String {
        format!(
            "data: {{\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o\",\"system_fingerprint\":\"fp_1\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}],\"usage\":null}}\n\n"
        )
    }

    const OPENAI_USAGE: &str = "data: {\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":20,\"total_tokens\":120,\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\n";

    fn openai_text() -> String {
        [
            openai_chunk(
                r#"{"role":"assistant","content":"","refusal":null}"#,
                "null",
            ),
            openai_chunk(r#"{"content":"Hello"}"#, "null"),
            openai_chunk(r#"{"reasoning_content":"hidden"}"#, "null"),
            openai_chunk(r#"{"content":" wörld ✓"}"#, "null"),
            openai_chunk("{}", r#""stop""#),
            OPENAI_USAGE.into(),
            "data: [DONE]\n\n".into(),
        ]
        .concat()
    }

    fn openai_tools(interleaved: bool) -> String {
        let call = |i: u32, id: &str| {
            openai_chunk(
                &format!(
                    r#"{{"tool_calls":[{{"index":{i},"id":"{id}","type":"function","function":{{"name":"get_weather","arguments":""}}}}]}}"#
                ),
                "null",
            )
        };
        let args = |i: u32, a: &str| {
            openai_chunk(
                &format!(
                    r#"{{"tool_calls":[{{"index":{i},"function":{{"arguments":{}}}}}]}}"#,
                    json!(a)
                ),
                "null",
            )
        };
        let mut v = vec![
            openai_chunk(r#"{"role":"assistant","content":null}"#, "null"),
            openai_chunk(r#"{"content":"Checking."}"#, "null"),
        ];
        if interleaved {
            v.extend([
                call(0, "call_a"),
                call(1, "call_b"),
                args(0, "{\"location\":"),
                args(1, "{\"location\": \"Bogotá\"}"),
                args(0, " \"Paris\"}"),
            ]);
        } else {
            v.extend([
                call(0, "call_a"),
                args(0, "{\"location\":"),
                args(0, " \"Paris\"}"),
                call(1, "call_b"),
                args(1, "{\"location\": \"Bogotá\"}"),
            ]);
        }
        v.extend([
            openai_chunk("{}", r#""tool_calls""#),
            OPENAI_USAGE.into(),
            "data: [DONE]\n\n".into(),
        ]);
        v.concat()
    }

    #[test]
    fn x2_anthropic_stream_becomes_openai_chunks_split_anywhere() {
        let (ev, ok) = split_anywhere(A, O, ANTHROPIC_TEXT, false);
        assert!(ok);
        assert!(ev.iter().all(|(name, _)| name.is_empty()));
        let id = "chatcmpl-msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY";
        assert_eq!(
            data_only(&ev),
            vec![
                chunk(id, json!({"role": "assistant", "content": ""}), json!(null)),
                chunk(id, json!({"content": "Hello"}), json!(null)),
                chunk(id, json!({"content": " wörld ✓"}), json!(null)),
                chunk(id, json!({}), json!("stop")),
                json!("[DONE]"),
            ]
        );
        // CRLF line ends, split anywhere, read the same.
        let crlf = ANTHROPIC_TEXT.replace('\n', "\r\n");
        assert_eq!(split_anywhere(A, O, &crlf, false), (ev, true));
    }

    #[test]
    fn x2_openai_stream_becomes_anthropic_events_split_anywhere() {
        let (ev, ok) = split_anywhere(O, A, &openai_text(), true);
        assert!(ok);
        let text_delta = |t: &str| {
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": t}})
        };
        let want = vec![
            (
                "message_start",
                json!({"type": "message_start", "message": {
                "id": "msg_chatcmpl-abc", "type": "message", "role": "assistant",
                "model": "public", "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0}}}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
            ),
            ("content_block_delta", text_delta("Hello")),
            ("content_block_delta", text_delta(" wörld ✓")),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                "message_delta",
                json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                "usage": {"output_tokens": 20, "input_tokens": 36, "cache_read_input_tokens": 64}}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ];
        let want: Vec<(String, Value)> = want.into_iter().map(|(n, v)| (n.into(), v)).collect();
        assert_eq!(ev, want);
    }

    #[test]
    fn x2_stream_usage_maps_cached_tokens() {
        let (ev, _) = split_anywhere(A, O, ANTHROPIC_THINKING_TOOLS, true);
        let (last, usage) = (&ev[ev.len() - 1].1, &ev[ev.len() - 2].1);
        assert_eq!(last, &json!("[DONE]"));
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(
            usage["usage"],
            json!({"prompt_tokens": 1500, "completion_tokens": 89, "total_tokens": 1589,
                "prompt_tokens_details": {"cached_tokens": 1000}})
        );
        // Without include_usage there is no usage chunk.
        let (ev, _) = split_anywhere(A, O, ANTHROPIC_TEXT, false);
        assert!(ev.iter().all(|(_, v)| v.get("usage").is_none()));
        // OpenAI → Anthropic: input excludes the cached part (see the text test).
        let (ev, _) = split_anywhere(O, A, &openai_text(), false);
        let delta = &ev
            .iter()
            .find(|(n, _)| n == "message_delta")
            .expect("delta")
            .1;
        assert_eq!(delta["usage"]["input_tokens"], 36);
        assert_eq!(delta["usage"]["cache_read_input_tokens"], 64);
    }

    #[test]
    fn x2_thinking_signature_rides_in_the_first_tool_call_id() {
        let (ev, ok) = split_anywhere(A, O, ANTHROPIC_THINKING_TOOLS, false);
        assert!(ok);
        let blocks = vec![
            json!({"type": "thinking", "thinking": "I need the weather in two cities.",
                "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"}),
            json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"}),
        ];
        let first = wrap_tool_id("toolu_01T1x1fJ34qAmk2tNTrN7Up6", &blocks);
        let id = "chatcmpl-msg_01T";
        let tc = |v: Value| json!({"tool_calls": [v]});
        assert_eq!(
            data_only(&ev),
            vec![
                chunk(id, json!({"role": "assistant", "content": ""}), json!(null)),
                chunk(
                    id,
                    json!({"reasoning_content": "I need the weather "}),
                    json!(null)
                ),
                chunk(
                    id,
                    json!({"reasoning_content": "in two cities."}),
                    json!(null)
                ),
                chunk(
                    id,
                    tc(json!({"index": 0, "id": first, "type": "function",
                    "function": {"name": "get_weather", "arguments": ""}})),
                    json!(null)
                ),
                chunk(
                    id,
                    tc(json!({"index": 0, "function": {"arguments": "{\"location\":"}})),
                    json!(null)
                ),
                chunk(
                    id,
                    tc(json!({"index": 0, "function": {"arguments": " \"San Francisco, CA\"}"}})),
                    json!(null)
                ),
                chunk(
                    id,
                    tc(json!({"index": 1, "id": "toolu_02", "type": "function",
                    "function": {"name": "get_weather", "arguments": ""}})),
                    json!(null)
                ),
                chunk(
                    id,
                    tc(
                        json!({"index": 1, "function": {"arguments": "{\"location\": \"Bogotá\"}"}})
                    ),
                    json!(null)
                ),
                chunk(id, json!({}), json!("tool_calls")),
                json!("[DONE]"),
            ]
        );
    }

    #[test]
    fn x2_streamed_parallel_tool_calls_keep_their_own_index_and_id() {
        for interleaved in [false, true] {
            let (ev, ok) = split_anywhere(O, A, &openai_tools(interleaved), true);
            assert!(ok);
            let ev: Vec<Value> = data_only(&ev)[1..].to_vec();
            let start = |i: u32, id: &str| {
                json!({"type": "content_block_start", "index": i, "content_block":
                    {"type": "tool_use", "id": id, "name": "get_weather", "input": {}}})
            };
            let delta =
                |i: u32, d: Value| json!({"type": "content_block_delta", "index": i, "delta": d});
            let args =
                |i: u32, a: &str| delta(i, json!({"type": "input_json_delta", "partial_json": a}));
            let stop = |i: u32| json!({"type": "content_block_stop", "index": i});
            let mut want = vec![
                json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}),
                delta(0, json!({"type": "text_delta", "text": "Checking."})),
                stop(0),
                start(1, "call_a"),
                args(1, "{\"location\":"),
                args(1, " \"Paris\"}"),
                stop(1),
                start(2, "call_b"),
                args(2, "{\"location\": \"Bogotá\"}"),
                stop(2),
            ];
            want.extend([
                json!({"type": "message_delta",
                    "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                    "usage": {"output_tokens": 20, "input_tokens": 36,
                        "cache_read_input_tokens": 64}}),
                json!({"type": "message_stop"}),
            ]);
            assert_eq!(ev, want, "interleaved: {interleaved}");
        }
    }

    #[test]
    fn x3_cut_stream_ends_with_an_error_never_a_clean_finish() {
        // Anthropic → OpenAI: cut anywhere before message_stop.
        let b = ANTHROPIC_TEXT.as_bytes();
        let end = ANTHROPIC_TEXT.find("event: message_stop").expect("stop");
        for cut in [0, 10, end / 2, end] {
            let (out, ok) = run(A, O, &[&b[..cut]], true);
            assert!(!ok, "cut at {cut}");
            let ev = data_only(&parse(&out));
            assert!(!ev.contains(&json!("[DONE]")));
            assert_eq!(
                ev.last(),
                Some(
                    &json!({"error": {"message": TRUNCATED, "type": "server_error",
                    "code": "stream_truncated", "param": null}})
                )
            );
        }
        // OpenAI → Anthropic: cut before the finish_reason chunk.
        let s = openai_text();
        let end = s.find(r#""finish_reason":"stop""#).expect("finish");
        for cut in [0, 30, end] {
            let (out, ok) = run(O, A, &[&s.as_bytes()[..cut]], true);
            assert!(!ok, "cut at {cut}");
            let ev = parse(&out);
            assert!(ev.iter().all(|(n, _)| n != "message_stop"));
            assert_eq!(
                ev.last(),
                Some(&(
                    "error".to_owned(),
                    json!({"type": "error",
                    "error": {"type": "api_error", "message": TRUNCATED}})
                ))
            );
        }
        // A finish_reason followed by the end of the body is a proper end.
        let after = s.find("data: [DONE]").expect("done");
        let (out, ok) = run(O, A, &[&s.as_bytes()[..after - OPENAI_USAGE.len()]], true);
        assert!(ok);
        assert_eq!(parse(&out).last().expect("event").0, "message_stop");
    }

    #[test]
    fn x3_in_stream_error_becomes_the_clients_error_event() {
        let cut = ANTHROPIC_TEXT
            .find("event: content_block_stop")
            .expect("stop");
        let err = "event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n";
        let input = format!("{}{err}", &ANTHROPIC_TEXT[..cut]);
        let (ev, ok) = split_anywhere(A, O, &input, true);
        assert!(!ok);
        assert_eq!(
            ev.last().expect("event").1,
            json!({"error": {"message": "Overloaded", "type": "server_error",
                "code": "overloaded", "param": null}})
        );
        // Nothing after the error, even if the provider goes on.
        let (out, ok) = run(A, O, &[input.as_bytes(), ANTHROPIC_TEXT.as_bytes()], true);
        assert!(!ok);
        assert_eq!(parse(&out), ev);

        let s = openai_text();
        let cut = s.find(r#""finish_reason":"stop""#).expect("finish");
        let cut = s[..cut].rfind("data: ").expect("chunk");
        let err = "data: {\"error\":{\"message\":\"Rate limit reached\",\"type\":\"requests\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}\n\n";
        let (ev, ok) = split_anywhere(O, A, &format!("{}{err}", &s[..cut]), true);
        assert!(!ok);
        assert_eq!(
            ev.last().expect("event"),
            &(
                "error".to_owned(),
                json!({"type": "error",
                "error": {"type": "rate_limit_error", "message": "Rate limit reached"}})
            )
        );
        assert!(ev.iter().all(|(n, _)| n != "message_stop"));
    }

    #[test]
    fn x3_an_oversized_event_ends_the_stream_with_an_error() {
        let mut t = StreamTranslator::new(O, A, "public", true);
        let mut out = Vec::new();
        t.push(b"data: {\"content\":\"", &mut out);
        let big = vec![b'a'; 1 << 20];
        for _ in 0..5 {
            t.push(&big, &mut out);
        }
        assert!(!t.finish(&mut out));
        let ev = parse(&out);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].1["error"]["message"], TOO_LARGE);
    }

    #[test]
    fn x2_a_streamed_structured_answer_arrives_as_text() {
        let input = format!(
            "event: message_start\n\
data: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_s\",\"usage\":{{\"input_tokens\":9,\"output_tokens\":1}}}}}}\n\n\
event: content_block_start\n\
data: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"tool_use\",\"id\":\"toolu_s\",\"name\":\"{JSON_TOOL}\",\"input\":{{}}}}}}\n\n\
event: content_block_delta\n\
data: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":\"{{\\\"city\\\": \"}}}}\n\n\
event: content_block_delta\n\
data: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"Paris\\\"}}\"}}}}\n\n\
event: content_block_stop\n\
data: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
event: message_delta\n\
data: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"tool_use\"}},\"usage\":{{\"output_tokens\":7}}}}\n\n\
event: message_stop\n\
data: {{\"type\":\"message_stop\"}}\n\n"
        );
        let (ev, ok) = split_anywhere(A, O, &input, false);
        assert!(ok);
        let text: String = ev
            .iter()
            .filter_map(|(_, v)| v["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, r#"{"city": "Paris"}"#);
        assert!(
            ev.iter()
                .all(|(_, v)| v["choices"][0]["delta"].get("tool_calls").is_none()),
            "{ev:?}"
        );
        let finish: Vec<&Value> = ev
            .iter()
            .map(|(_, v)| &v["choices"][0]["finish_reason"])
            .filter(|f| !f.is_null())
            .collect();
        assert_eq!(finish, [&json!("stop")]);
    }

    #[test]
    fn x1_same_dialect_streams_pass_through() {
        let (out, ok) = run(A, A, &[ANTHROPIC_TEXT.as_bytes()], true);
        assert!(ok);
        assert_eq!(out, ANTHROPIC_TEXT.as_bytes());
        let (out, ok) = run(O, O, &[b"data: x"], true);
        assert!(ok);
        assert_eq!(out, b"data: x");
    }
}
