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
pub(crate) use leg::{End, Leg, MALFORMED, TRUNCATED};
use serde::Deserialize;
use serde_json::{Value, json};

/// Largest single SSE event buffered.
const EVENT_CAP: usize = 4 << 20;
const TOO_LARGE: &str = "an upstream stream event exceeded 4 MiB";

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

mod a_to_o;
pub(crate) mod leg;
mod o_to_a;
#[cfg(test)]
pub(crate) mod tests;

use a_to_o::AToO;
use o_to_a::OToA;
