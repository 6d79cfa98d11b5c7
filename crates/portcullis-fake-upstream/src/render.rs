//! Successful answers, streamed and not, in each dialect's real shape.
//!
//! Built with `format!` over pre-escaped pieces: no JSON tree per request.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;

use crate::Dialect;
use crate::apis::ResponsesFrames;
use crate::behavior::ErrorKind;
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

fn gemini_usage(u: &Usage, final_chunk: bool) -> String {
    let mut s = format!(r#"{{"promptTokenCount":{}"#, u.prompt);
    if final_chunk {
        let _ = write!(s, r#","candidatesTokenCount":{}"#, u.output);
    }
    let total = if final_chunk {
        u.prompt + u.output
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

fn openai_finish(u: &Usage) -> &'static str {
    if u.truncated { "length" } else { "stop" }
}

fn anthropic_stop(u: &Usage) -> &'static str {
    if u.truncated {
        "max_tokens"
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
    let text = js(&full_text(u.chunks));
    match ctx.dialect {
        Dialect::OpenAi => format!(
            r#"{{"id":"{id}","object":"chat.completion","created":{created},"model":{model},"choices":[{{"index":0,"message":{{"role":"assistant","content":{text},"refusal":null,"annotations":[]}},"logprobs":null,"finish_reason":"{fin}"}}],"usage":{usage},"service_tier":"default","system_fingerprint":"fp_fake"}}"#,
            id = openai_id(seq),
            created = unix_secs(ctx.now),
            fin = openai_finish(u),
            usage = openai_usage(u),
        ),
        Dialect::Anthropic => format!(
            r#"{{"id":"{id}","type":"message","role":"assistant","model":{model},"content":[{{"type":"text","text":{text}}}],"stop_reason":"{stop}","stop_sequence":null,"usage":{usage}}}"#,
            id = anthropic_id(seq),
            stop = anthropic_stop(u),
            usage = anthropic_usage(u, u.output),
        ),
        Dialect::Gemini => format!(
            r#"{{"candidates":[{{"content":{{"parts":[{{"text":{text}}}],"role":"model"}},"finishReason":"{fin}","index":0}}],"usageMetadata":{usage},"modelVersion":{model},"responseId":"fake{seq:08}"}}"#,
            fin = gemini_finish(u),
            usage = gemini_usage(u, true),
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

impl<'a> Frames<'a> {
    fn new(ctx: &'a Ctx<'a>, seq: u64, u: &'a Usage, plan: &'a StreamPlan) -> Self {
        Self {
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
        let fin = finish
            .map(|f| format!(r#","finishReason":"{f}""#))
            .unwrap_or_default();
        format!(
            r#"{{"candidates":[{{"content":{{"parts":[{{"text":{text}}}],"role":"model"}}{fin},"index":0}}],"usageMetadata":{usage},"modelVersion":{model},"responseId":"fake{seq:08}"}}"#,
            text = js(text),
            usage = gemini_usage(self.u, finish.is_some()),
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
}

impl Framer for Frames<'_> {
    fn preamble(&mut self) -> Option<String> {
        match self.ctx.dialect {
            Dialect::OpenAi => Some(self.openai_chunk(
                r#"{"role":"assistant","content":"","refusal":null}"#,
                "null",
            )),
            Dialect::Anthropic => Some(format!(
                "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"{id}\",\"type\":\"message\",\"role\":\"assistant\",\"model\":{model},\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{usage}}}}}\n\n\
                 event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n\
                 event: ping\ndata: {{\"type\":\"ping\"}}\n\n",
                id = anthropic_id(self.seq),
                model = self.model,
                usage = anthropic_usage(self.u, 1),
            )),
            Dialect::Gemini => None,
        }
    }

    fn content(&mut self, i: usize) -> String {
        let text = chunk_text(i);
        match self.ctx.dialect {
            Dialect::OpenAi => self.openai_chunk(&format!(r#"{{"content":{}}}"#, js(text)), "null"),
            Dialect::Anthropic => format!(
                "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{}}}}}\n\n",
                js(text)
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
                let mut t = self.openai_chunk("{}", &format!("\"{}\"", openai_finish(u)));
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
                "event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
                 event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"{stop}\",\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":{out}}}}}\n\n\
                 event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n",
                stop = anthropic_stop(u),
                out = u.output,
            ),
            Dialect::Gemini => {
                let chunk = self.gemini_chunk("", Some(gemini_finish(u)));
                self.gemini_frame(chunk, true)
            }
        }
    }
}

/// The frames of a streamed answer, each with the delay before it, and how it ends.
pub(crate) fn stream(
    ctx: &Ctx<'_>,
    seq: u64,
    u: &Usage,
    plan: &StreamPlan,
) -> (VecDeque<(Duration, Bytes)>, End) {
    if plan.responses {
        run(
            &mut ResponsesFrames::new(ctx, seq, u, plan.max_tokens),
            u,
            plan,
        )
    } else {
        run(&mut Frames::new(ctx, seq, u, plan), u, plan)
    }
}

fn run(
    frames: &mut dyn Framer,
    u: &Usage,
    plan: &StreamPlan,
) -> (VecDeque<(Duration, Bytes)>, End) {
    let mut steps: VecDeque<(Duration, Bytes)> = VecDeque::with_capacity(u.chunks as usize + 3);
    if let Some(preamble) = frames.preamble() {
        steps.push_back((Duration::ZERO, preamble.into()));
    }
    if plan.hang {
        return (steps, End::Hang);
    }
    let content = plan.fail.as_ref().map_or(u.chunks, |(k, _, _)| *k);
    for i in 0..content as usize {
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
