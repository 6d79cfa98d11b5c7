//! Successful answers, streamed and not, in each dialect's real shape.
//!
//! Built with `format!` over pre-escaped pieces: no JSON tree per request.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;

use crate::Dialect;
use crate::behavior::{DEFAULT_TOOL_NAME, ErrorKind, MAX_TOOL_CALLS};
use crate::body::End;
use crate::errors::{Ctx, error_json};
use crate::request::{Usage, chunk_text};
use crate::time::unix_secs;

/// A JSON string literal (with quotes).
pub(crate) fn js(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

pub(crate) fn openai_id(seq: u64) -> String {
    format!("chatcmpl-fake{seq:08}")
}

pub(crate) fn anthropic_id(seq: u64) -> String {
    format!("msg_fake{seq:08}")
}

pub(crate) fn full_text(n: u32) -> String {
    (0..n as usize).map(chunk_text).collect()
}

/// The signature of a thinking block with `text`: `sig_fake_` and the 64-bit FNV-1a
/// hash of the text's UTF-8 bytes in 16 lowercase hex digits.
pub fn thinking_signature(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("sig_fake_{h:016x}")
}

/// The tool calls and thinking of one chat answer, as its behaviour asks.
struct Extras {
    /// Tool calls.
    calls: u32,
    /// The function's name, a JSON string literal.
    name: String,
    /// Anthropic and Gemini: the thinking text.
    thinking: Option<String>,
    /// Text chunks (0 with tool calls unless `chunks` is set).
    text_chunks: u32,
    /// The answer has text (a content string, a text block, a text part).
    text: bool,
}

impl Extras {
    fn of(ctx: &Ctx<'_>, u: &Usage) -> Extras {
        let b = ctx.behavior;
        let calls = b.tool_calls.unwrap_or(0).min(MAX_TOOL_CALLS);
        let text_chunks = if calls > 0 && b.chunks.is_none() {
            0
        } else {
            u.chunks
        };
        Extras {
            calls,
            name: js(b.tool_name.as_deref().unwrap_or(DEFAULT_TOOL_NAME)),
            thinking: match ctx.dialect {
                Dialect::Anthropic | Dialect::Gemini => b.thinking.clone(),
                Dialect::OpenAi => None,
            },
            text_chunks,
            text: calls == 0 || text_chunks > 0,
        }
    }

    /// Neither tool calls nor thinking: the plain answer.
    fn plain(&self) -> bool {
        self.calls == 0 && self.thinking.is_none()
    }

    /// Gemini's `thoughtsTokenCount`: the thinking text's tokens as the fake counts
    /// prompt text (`max(1, bytes / 4)`), 0 without thinking.
    fn thought_tokens(&self) -> u64 {
        self.thinking
            .as_ref()
            .map_or(0, |t| (t.len() as u64 / 4).max(1))
    }
}

/// The arguments of tool call `i`, as JSON text.
fn tool_args(i: u32) -> String {
    format!(r#"{{"city":"c{i}"}}"#)
}

/// The two pieces tool call `i`'s arguments are streamed in.
fn tool_args_part(i: u32, part: u8) -> String {
    if part == 0 {
        r#"{"city":"#.to_owned()
    } else {
        format!(r#""c{i}"}}"#)
    }
}

fn openai_tool_calls(x: &Extras) -> String {
    let calls: Vec<String> = (0..x.calls)
        .map(|i| {
            format!(
                r#"{{"id":"call_fake_{i}","type":"function","function":{{"name":{name},"arguments":{args}}}}}"#,
                name = x.name,
                args = js(&tool_args(i)),
            )
        })
        .collect();
    format!("[{}]", calls.join(","))
}

fn anthropic_thinking_block(text: &str) -> String {
    format!(
        r#"{{"type":"thinking","thinking":{},"signature":"{}"}}"#,
        js(text),
        thinking_signature(text)
    )
}

fn anthropic_tool_block(x: &Extras, i: u32) -> String {
    format!(
        r#"{{"type":"tool_use","id":"toolu_fake_{i}","name":{name},"input":{args}}}"#,
        name = x.name,
        args = tool_args(i),
    )
}

/// Gemini function call `i`; with thinking, the first carries the thought signature.
fn gemini_call_part(x: &Extras, i: u32) -> String {
    let signature = match &x.thinking {
        Some(t) if i == 0 => format!(r#","thoughtSignature":"{}""#, thinking_signature(t)),
        _ => String::new(),
    };
    format!(
        r#"{{"functionCall":{{"name":{name},"args":{args}}}{signature}}}"#,
        name = x.name,
        args = tool_args(i),
    )
}

/// Gemini's thought part with the thinking text.
fn gemini_thought_part(text: &str) -> String {
    format!(r#"{{"text":{},"thought":true}}"#, js(text))
}

fn openai_usage(u: &Usage) -> String {
    format!(
        r#"{{"prompt_tokens":{p},"completion_tokens":{o},"total_tokens":{t},"prompt_tokens_details":{{"cached_tokens":{c},"audio_tokens":0}},"completion_tokens_details":{{"reasoning_tokens":{r},"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}}"#,
        p = u.prompt,
        o = u.output,
        t = u.prompt + u.output,
        c = u.cached,
        r = u.reasoning,
    )
}

fn anthropic_usage(u: &Usage, output: u64) -> String {
    format!(
        r#"{{"input_tokens":{i},"cache_creation_input_tokens":{cc},"cache_read_input_tokens":{cr},"output_tokens":{output},"service_tier":"standard"}}"#,
        i = u.uncached(),
        cc = u.cache_creation,
        cr = u.cached,
    )
}

/// `thoughts`: the final chunk's `thoughtsTokenCount` (omitted when 0).
fn gemini_usage(u: &Usage, final_chunk: bool, thoughts: u64) -> String {
    let mut s = format!(r#"{{"promptTokenCount":{}"#, u.prompt);
    if final_chunk {
        let _ = write!(s, r#","candidatesTokenCount":{}"#, u.output);
        if thoughts > 0 {
            let _ = write!(s, r#","thoughtsTokenCount":{thoughts}"#);
        }
    }
    let total = if final_chunk {
        u.prompt + u.output + thoughts
    } else {
        u.prompt
    };
    let _ = write!(s, r#","totalTokenCount":{total}"#);
    if u.cached > 0 {
        let _ = write!(s, r#","cachedContentTokenCount":{}"#, u.cached);
    }
    let _ = write!(
        s,
        r#","promptTokensDetails":[{{"modality":"TEXT","tokenCount":{}}}]}}"#,
        u.prompt
    );
    s
}

fn openai_finish(u: &Usage, x: &Extras) -> &'static str {
    if u.truncated {
        "length"
    } else if x.calls > 0 {
        "tool_calls"
    } else {
        "stop"
    }
}

fn anthropic_stop(u: &Usage, x: &Extras) -> &'static str {
    if u.truncated {
        "max_tokens"
    } else if x.calls > 0 {
        "tool_use"
    } else {
        "end_turn"
    }
}

fn gemini_finish(u: &Usage) -> &'static str {
    if u.truncated { "MAX_TOKENS" } else { "STOP" }
}

/// The non-streamed answer body.
pub(crate) fn non_stream(ctx: &Ctx<'_>, seq: u64, u: &Usage) -> String {
    let model = js(ctx.model);
    let x = Extras::of(ctx, u);
    let text = js(&full_text(x.text_chunks));
    match ctx.dialect {
        Dialect::OpenAi => {
            let message = if x.calls == 0 {
                format!(
                    r#"{{"role":"assistant","content":{text},"refusal":null,"annotations":[]}}"#
                )
            } else {
                format!(
                    r#"{{"role":"assistant","content":{content},"tool_calls":{calls},"refusal":null,"annotations":[]}}"#,
                    content = if x.text { text.as_str() } else { "null" },
                    calls = openai_tool_calls(&x),
                )
            };
            format!(
                r#"{{"id":"{id}","object":"chat.completion","created":{created},"model":{model},"choices":[{{"index":0,"message":{message},"logprobs":null,"finish_reason":"{fin}"}}],"usage":{usage},"service_tier":"default","system_fingerprint":"fp_fake"}}"#,
                id = openai_id(seq),
                created = unix_secs(ctx.now),
                fin = openai_finish(u, &x),
                usage = openai_usage(u),
            )
        }
        Dialect::Anthropic => {
            let mut blocks = Vec::new();
            if let Some(t) = &x.thinking {
                blocks.push(anthropic_thinking_block(t));
            }
            if x.text {
                blocks.push(format!(r#"{{"type":"text","text":{text}}}"#));
            }
            blocks.extend((0..x.calls).map(|i| anthropic_tool_block(&x, i)));
            format!(
                r#"{{"id":"{id}","type":"message","role":"assistant","model":{model},"content":[{content}],"stop_reason":"{stop}","stop_sequence":null,"usage":{usage}}}"#,
                id = anthropic_id(seq),
                content = blocks.join(","),
                stop = anthropic_stop(u, &x),
                usage = anthropic_usage(u, u.output),
            )
        }
        Dialect::Gemini => format!(
            r#"{{"candidates":[{{"content":{{"parts":[{parts}],"role":"model"}},"finishReason":"{fin}","index":0}}],"usageMetadata":{usage},"modelVersion":{model},"responseId":"fake{seq:08}"}}"#,
            parts = {
                let mut parts = Vec::new();
                if let Some(t) = &x.thinking {
                    parts.push(gemini_thought_part(t));
                }
                if x.text {
                    parts.push(format!(r#"{{"text":{text}}}"#));
                }
                parts.extend((0..x.calls).map(|i| gemini_call_part(&x, i)));
                parts.join(",")
            },
            fin = gemini_finish(u),
            usage = gemini_usage(u, true, x.thought_tokens()),
        ),
    }
}

/// How a stream should go.
pub(crate) struct StreamPlan {
    pub(crate) ttfb: Duration,
    pub(crate) interval: Duration,
    pub(crate) hang: bool,
    pub(crate) cut: bool,
    /// `Some((k, error, status))`: fail after `k` content chunks.
    pub(crate) fail: Option<(u32, ErrorKind, u16)>,
    pub(crate) include_usage: bool,
    /// Gemini without `alt=sse`: a streamed JSON array instead of SSE.
    pub(crate) gemini_json_array: bool,
    /// The OpenAI Responses API's events instead of chat completion chunks.
    pub(crate) responses: bool,
    /// The request's max output tokens (echoed by the Responses API).
    pub(crate) max_tokens: Option<u64>,
}

/// The frames of one streamed answer in one API's framing.
pub(crate) trait Framer {
    /// Sent with the head, before the first content chunk.
    fn preamble(&mut self) -> Option<String>;
    /// How many content frames to send: all of them, or the `fail_after` asked for.
    fn content_len(&self, fail_after: Option<u32>) -> usize;
    /// Content chunk `i`.
    fn content(&mut self, i: usize) -> String;
    /// An in-stream error event (the stream's last frame).
    fn error(&mut self, kind: &ErrorKind, status: u16) -> String;
    /// The finish, the usage and the end marker of a stream that completes.
    fn trailer(&mut self) -> String;
}

/// The frames of one streamed answer, in its dialect's framing: OpenAI and Anthropic
/// SSE, Gemini SSE or the pieces of one JSON array.
struct Frames<'a> {
    x: Extras,
    /// The content frames, in order.
    steps: Vec<Step>,
    ctx: &'a Ctx<'a>,
    seq: u64,
    u: &'a Usage,
    plan: &'a StreamPlan,
    model: String,
    oid: String,
    created: u64,
    /// Gemini frames made so far (the first opens the JSON array).
    gemini_frames: usize,
}

/// One content frame of a chat stream.
#[derive(Clone, Copy)]
enum Step {
    /// Text chunk `i`.
    Text(usize),
    /// Anthropic: the whole thinking block; Gemini: the thought part.
    Thinking,
    /// The start of tool call `i` (Gemini: the whole call).
    ToolHead(u32),
    /// Piece `part` (0 or 1) of tool call `i`'s arguments.
    ToolArgs(u32, u8),
    /// Anthropic: the end of tool call `i`'s block.
    ToolStop(u32),
}

impl<'a> Frames<'a> {
    fn new(ctx: &'a Ctx<'a>, seq: u64, u: &'a Usage, plan: &'a StreamPlan) -> Self {
        let x = Extras::of(ctx, u);
        let mut steps = Vec::new();
        if x.thinking.is_some() {
            steps.push(Step::Thinking);
        }
        steps.extend((0..x.text_chunks as usize).map(Step::Text));
        match ctx.dialect {
            Dialect::OpenAi => {
                steps.extend((0..x.calls).map(Step::ToolHead));
                for part in 0..2 {
                    steps.extend((0..x.calls).map(|i| Step::ToolArgs(i, part)));
                }
            }
            Dialect::Anthropic => {
                for i in 0..x.calls {
                    steps.extend([
                        Step::ToolHead(i),
                        Step::ToolArgs(i, 0),
                        Step::ToolArgs(i, 1),
                        Step::ToolStop(i),
                    ]);
                }
            }
            Dialect::Gemini => steps.extend((0..x.calls).map(Step::ToolHead)),
        }
        Self {
            x,
            steps,
            ctx,
            seq,
            u,
            plan,
            model: js(ctx.model),
            oid: openai_id(seq),
            created: unix_secs(ctx.now),
            gemini_frames: 0,
        }
    }

    fn openai_chunk(&self, delta: &str, finish: &str) -> String {
        let (oid, created, model) = (&self.oid, self.created, &self.model);
        let usage_null = if self.plan.include_usage {
            r#","usage":null"#
        } else {
            ""
        };
        format!(
            "data: {{\"id\":\"{oid}\",\"object\":\"chat.completion.chunk\",\"created\":{created},\"model\":{model},\"system_fingerprint\":\"fp_fake\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}]{usage_null}}}\n\n"
        )
    }

    fn gemini_chunk(&self, text: &str, finish: Option<&str>) -> String {
        self.gemini_chunk_of(&format!(r#"{{"text":{}}}"#, js(text)), finish)
    }

    /// A Gemini chunk with one part (a JSON object).
    fn gemini_chunk_of(&self, part: &str, finish: Option<&str>) -> String {
        let fin = finish
            .map(|f| format!(r#","finishReason":"{f}""#))
            .unwrap_or_default();
        format!(
            r#"{{"candidates":[{{"content":{{"parts":[{part}],"role":"model"}}{fin},"index":0}}],"usageMetadata":{usage},"modelVersion":{model},"responseId":"fake{seq:08}"}}"#,
            usage = gemini_usage(self.u, finish.is_some(), self.x.thought_tokens()),
            model = self.model,
            seq = self.seq,
        )
    }

    /// Gemini framing of one JSON object; `last` closes a JSON array.
    fn gemini_frame(&mut self, json: String, last: bool) -> String {
        self.gemini_frames += 1;
        if !self.plan.gemini_json_array {
            return format!("data: {json}\r\n\r\n");
        }
        let open = if self.gemini_frames == 1 {
            "["
        } else {
            "\r\n,"
        };
        let close = if last { "]" } else { "" };
        format!("{open}{json}{close}")
    }

    /// Anthropic: the index of the text block.
    fn text_index(&self) -> usize {
        usize::from(self.x.thinking.is_some())
    }

    /// Anthropic: the index of tool call `i`'s block.
    fn tool_index(&self, i: u32) -> usize {
        self.text_index() + usize::from(self.x.text) + i as usize
    }

    fn anthropic_event(ty: &str, fields: &str) -> String {
        format!("event: {ty}\ndata: {{\"type\":\"{ty}\",{fields}}}\n\n")
    }

    fn anthropic_block_start(index: usize, block: &str) -> String {
        Self::anthropic_event(
            "content_block_start",
            &format!(r#""index":{index},"content_block":{block}"#),
        )
    }

    fn anthropic_block_delta(index: usize, delta: &str) -> String {
        Self::anthropic_event(
            "content_block_delta",
            &format!(r#""index":{index},"delta":{delta}"#),
        )
    }

    fn anthropic_block_stop(index: usize) -> String {
        Self::anthropic_event("content_block_stop", &format!(r#""index":{index}"#))
    }

    /// The frame of a step other than a text chunk.
    fn extra(&mut self, step: Step) -> String {
        if self.ctx.dialect == Dialect::Gemini {
            let part = match step {
                Step::ToolHead(i) => gemini_call_part(&self.x, i),
                Step::Thinking => {
                    gemini_thought_part(self.x.thinking.as_deref().unwrap_or_default())
                }
                // Not made: Gemini's steps are listed in `new`.
                _ => return String::new(),
            };
            let chunk = self.gemini_chunk_of(&part, None);
            return self.gemini_frame(chunk, false);
        }
        let x = &self.x;
        match (self.ctx.dialect, step) {
            (Dialect::Anthropic, Step::Thinking) => {
                let t = x.thinking.as_deref().unwrap_or_default();
                let mut s = Self::anthropic_block_start(0, r#"{"type":"thinking","thinking":""}"#);
                s += &Self::anthropic_block_delta(
                    0,
                    &format!(r#"{{"type":"thinking_delta","thinking":{}}}"#, js(t)),
                );
                s += &Self::anthropic_block_delta(
                    0,
                    &format!(
                        r#"{{"type":"signature_delta","signature":"{}"}}"#,
                        thinking_signature(t)
                    ),
                );
                s += &Self::anthropic_block_stop(0);
                if x.text {
                    s += &Self::anthropic_block_start(1, r#"{"type":"text","text":""}"#);
                }
                s
            }
            (Dialect::Anthropic, Step::ToolHead(i)) => {
                let mut s = String::new();
                if i == 0 && x.text {
                    s += &Self::anthropic_block_stop(self.text_index());
                }
                s += &Self::anthropic_block_start(
                    self.tool_index(i),
                    &format!(
                        r#"{{"type":"tool_use","id":"toolu_fake_{i}","name":{},"input":{{}}}}"#,
                        x.name
                    ),
                );
                s
            }
            (Dialect::Anthropic, Step::ToolArgs(i, part)) => Self::anthropic_block_delta(
                self.tool_index(i),
                &format!(
                    r#"{{"type":"input_json_delta","partial_json":{}}}"#,
                    js(&tool_args_part(i, part))
                ),
            ),
            (Dialect::Anthropic, Step::ToolStop(i)) => {
                Self::anthropic_block_stop(self.tool_index(i))
            }
            (Dialect::OpenAi, Step::ToolHead(i)) => self.openai_chunk(
                &format!(
                    r#"{{"tool_calls":[{{"index":{i},"id":"call_fake_{i}","type":"function","function":{{"name":{},"arguments":""}}}}]}}"#,
                    x.name
                ),
                "null",
            ),
            (Dialect::OpenAi, Step::ToolArgs(i, part)) => self.openai_chunk(
                &format!(
                    r#"{{"tool_calls":[{{"index":{i},"function":{{"arguments":{}}}}}]}}"#,
                    js(&tool_args_part(i, part))
                ),
                "null",
            ),
            // Not made: each dialect's steps are listed in `new` (Gemini's above).
            _ => String::new(),
        }
    }
}

impl Framer for Frames<'_> {
    fn preamble(&mut self) -> Option<String> {
        match self.ctx.dialect {
            Dialect::OpenAi => Some(self.openai_chunk(
                if self.x.text {
                    r#"{"role":"assistant","content":"","refusal":null}"#
                } else {
                    r#"{"role":"assistant","content":null,"refusal":null}"#
                },
                "null",
            )),
            // The text block opens here unless a thinking block comes first (it then
            // opens after the thinking block) or the answer has no text.
            Dialect::Anthropic => Some(format!(
                "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"{id}\",\"type\":\"message\",\"role\":\"assistant\",\"model\":{model},\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{usage}}}}}\n\n\
                 {text_start}\
                 event: ping\ndata: {{\"type\":\"ping\"}}\n\n",
                id = anthropic_id(self.seq),
                model = self.model,
                usage = anthropic_usage(self.u, 1),
                text_start = if self.x.text && self.x.thinking.is_none() {
                    Self::anthropic_block_start(0, r#"{"type":"text","text":""}"#)
                } else {
                    String::new()
                },
            )),
            Dialect::Gemini => None,
        }
    }

    fn content_len(&self, fail_after: Option<u32>) -> usize {
        match fail_after {
            // A plain answer sends as many text chunks as asked for.
            Some(k) if self.x.plain() => k as usize,
            Some(k) => (k as usize).min(self.steps.len()),
            None => self.steps.len(),
        }
    }

    fn content(&mut self, i: usize) -> String {
        let step = self.steps.get(i).copied().unwrap_or(Step::Text(i));
        let Step::Text(i) = step else {
            return self.extra(step);
        };
        let text = chunk_text(i);
        match self.ctx.dialect {
            Dialect::OpenAi => self.openai_chunk(&format!(r#"{{"content":{}}}"#, js(text)), "null"),
            Dialect::Anthropic => Self::anthropic_block_delta(
                self.text_index(),
                &format!(r#"{{"type":"text_delta","text":{}}}"#, js(text)),
            ),
            Dialect::Gemini => {
                let chunk = self.gemini_chunk(text, None);
                self.gemini_frame(chunk, false)
            }
        }
    }

    fn error(&mut self, kind: &ErrorKind, status: u16) -> String {
        let err = error_json(self.ctx, kind, status);
        match self.ctx.dialect {
            Dialect::OpenAi => format!("data: {err}\n\n"),
            Dialect::Anthropic => format!("event: error\ndata: {err}\n\n"),
            Dialect::Gemini => self.gemini_frame(err, true),
        }
    }

    fn trailer(&mut self) -> String {
        let u = self.u;
        match self.ctx.dialect {
            Dialect::OpenAi => {
                let mut t = self.openai_chunk("{}", &format!("\"{}\"", openai_finish(u, &self.x)));
                if self.plan.include_usage {
                    let (oid, created, model) = (&self.oid, self.created, &self.model);
                    let _ = write!(
                        t,
                        "data: {{\"id\":\"{oid}\",\"object\":\"chat.completion.chunk\",\"created\":{created},\"model\":{model},\"system_fingerprint\":\"fp_fake\",\"choices\":[],\"usage\":{}}}\n\n",
                        openai_usage(u)
                    );
                }
                t.push_str("data: [DONE]\n\n");
                t
            }
            Dialect::Anthropic => format!(
                "{text_stop}\
                 event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"{stop}\",\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":{out}}}}}\n\n\
                 event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n",
                // With tool calls the text block closed before the first one.
                text_stop = if self.x.text && self.x.calls == 0 {
                    Self::anthropic_block_stop(self.text_index())
                } else {
                    String::new()
                },
                stop = anthropic_stop(u, &self.x),
                out = u.output,
            ),
            Dialect::Gemini => {
                let chunk = self.gemini_chunk("", Some(gemini_finish(u)));
                self.gemini_frame(chunk, true)
            }
        }
    }
}

/// The frames of a streamed chat answer in its dialect's framing, each with the delay
/// before it, and how it ends (the Responses API's are [`apis::stream`](crate::apis::stream)).
pub(crate) fn stream(
    ctx: &Ctx<'_>,
    seq: u64,
    u: &Usage,
    plan: &StreamPlan,
) -> (VecDeque<(Duration, Bytes)>, End) {
    run(&mut Frames::new(ctx, seq, u, plan), plan)
}

/// The frames `frames` makes, each with the delay `plan` sets before it, and how the
/// stream ends.
pub(crate) fn run(
    frames: &mut dyn Framer,
    plan: &StreamPlan,
) -> (VecDeque<(Duration, Bytes)>, End) {
    let content = frames.content_len(plan.fail.as_ref().map(|(k, _, _)| *k));
    let mut steps: VecDeque<(Duration, Bytes)> = VecDeque::with_capacity(content + 3);
    if let Some(preamble) = frames.preamble() {
        steps.push_back((Duration::ZERO, preamble.into()));
    }
    if plan.hang {
        return (steps, End::Hang);
    }
    for i in 0..content {
        let delay = if i == 0 { plan.ttfb } else { plan.interval };
        steps.push_back((delay, frames.content(i).into()));
    }
    let next_delay = if content == 0 {
        plan.ttfb
    } else {
        plan.interval
    };
    if plan.cut {
        return (steps, End::Cut);
    }
    let last = match &plan.fail {
        Some((_, kind, status)) => frames.error(kind, *status),
        None => frames.trailer(),
    };
    steps.push_back((next_delay, last.into()));
    (steps, End::Clean)
}

/// `GET /v1/models` (OpenAI or Anthropic shape) and `GET /v1beta/models` (Gemini).
pub(crate) fn list_models(dialect: Dialect, models: &[String]) -> String {
    let mut s = String::new();
    match dialect {
        Dialect::OpenAi => {
            s.push_str(r#"{"object":"list","data":["#);
            for (i, m) in models.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                let _ = write!(
                    s,
                    r#"{{"id":{},"object":"model","created":1700000000,"owned_by":"fake-upstream"}}"#,
                    js(m)
                );
            }
            s.push_str("]}");
        }
        Dialect::Anthropic => {
            s.push_str(r#"{"data":["#);
            for (i, m) in models.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                let _ = write!(
                    s,
                    r#"{{"type":"model","id":{id},"display_name":{id},"created_at":"2025-01-01T00:00:00Z"}}"#,
                    id = js(m)
                );
            }
            let first = models.first().map_or("null".into(), |m| js(m));
            let last = models.last().map_or("null".into(), |m| js(m));
            let _ = write!(
                s,
                r#"],"has_more":false,"first_id":{first},"last_id":{last}}}"#
            );
        }
        Dialect::Gemini => {
            s.push_str(r#"{"models":["#);
            for (i, m) in models.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                let _ = write!(
                    s,
                    r#"{{"name":{name},"displayName":{id},"inputTokenLimit":1048576,"outputTokenLimit":8192,"supportedGenerationMethods":["generateContent","streamGenerateContent","countTokens"]}}"#,
                    name = js(&format!("models/{m}")),
                    id = js(m)
                );
            }
            s.push_str("]}");
        }
    }
    s
}
