//! An OpenAI chat chunk stream written as Gemini `?alt=sse` chunks
//! (`data: {GenerateContentResponse}\r\n\r\n`, as Gemini frames them).
use super::error::{gemini_error, status_of_chat_error};
use super::wire::{ChatChunk, ChatUsage, GCandidate, GContent, GPart, GResponse, GUsage};
use super::{
    CallId, MALFORMED_EVENT, TRUNCATED, call_from_chat, finish_from_chat, usage_from_chat,
};
use crate::translate::TranslateError;
use crate::translate::request::{Extra, OaFunctionCall, OaToolCall};
use crate::translate::stream::leg::{End, Leg};
use serde_json::Value;

/// A tool call being streamed: its arguments accumulate until it is sent whole.
#[derive(Debug)]
struct Pending {
    index: u64,
    id: String,
    name: String,
    args: String,
}

impl Pending {
    /// Its arguments are a whole JSON object: no later delta can belong to it.
    fn complete(&self) -> bool {
        serde_json::from_str::<Value>(&self.args).is_ok_and(|v| v.is_object())
    }

    fn part(self) -> Result<GPart, TranslateError> {
        let path = format!("tool_calls[{}]", self.index);
        call_from_chat(
            &path,
            OaToolCall {
                id: self.id,
                kind: "function".into(),
                function: OaFunctionCall {
                    name: self.name,
                    arguments: self.args,
                },
            },
            CallId::Whole,
        )
    }
}

/// OpenAI chat chunks in, Gemini stream chunks out.
#[derive(Debug)]
pub(crate) struct ChatToGemini {
    model: String,
    response_id: Option<String>,
    /// Tool calls not sent yet, in the order they started.
    pending: Vec<Pending>,
    finish: Option<String>,
    usage: Option<ChatUsage>,
    end: End,
}

fn sse_data(out: &mut Vec<u8>, v: &impl serde::Serialize) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&serde_json::to_vec(v).unwrap_or_default());
    out.extend_from_slice(b"\r\n\r\n");
}

impl ChatToGemini {
    /// A leg for a Gemini client of `public_model`.
    pub(crate) fn new(public_model: &str) -> Self {
        Self {
            model: public_model.to_owned(),
            response_id: None,
            pending: Vec::new(),
            finish: None,
            usage: None,
            end: End::Open,
        }
    }

    fn send(
        &self,
        parts: Vec<GPart>,
        finish: Option<&str>,
        usage: Option<GUsage>,
        out: &mut Vec<u8>,
    ) {
        let r = GResponse {
            candidates: vec![GCandidate {
                content: Some(GContent {
                    role: Some("model".into()),
                    parts,
                    extra: Extra::new(),
                }),
                finish_reason: finish.map(str::to_owned),
                index: 0,
            }],
            usage_metadata: usage,
            model_version: Some(self.model.clone()),
            response_id: self.response_id.clone(),
            ..GResponse::default()
        };
        sse_data(out, &r);
    }

    /// Sends the leading calls that are complete; `all`: even the last one started.
    fn flush(&mut self, all: bool, out: &mut Vec<u8>) {
        let keep = usize::from(!all);
        let mut ready = Vec::new();
        while self.pending.len() > keep && self.pending[0].complete() {
            ready.push(self.pending.remove(0));
        }
        for call in ready {
            match call.part() {
                Ok(part) => self.send(vec![part], None, None, out),
                Err(_) => return self.fail(MALFORMED_EVENT, "malformed_event", out),
            }
        }
    }

    fn tool_call(&mut self, tc: super::wire::ChunkToolCall, out: &mut Vec<u8>) {
        let (name, args) = tc.function.map_or((None, None), |f| (f.name, f.arguments));
        let at = match self.pending.iter().position(|p| p.index == tc.index) {
            Some(at) => at,
            None => {
                self.pending.push(Pending {
                    index: tc.index,
                    id: String::new(),
                    name: String::new(),
                    args: String::new(),
                });
                // A new call: the earlier ones are done once their arguments are whole.
                self.flush(false, out);
                self.pending.len() - 1
            }
        };
        let p = &mut self.pending[at];
        if let Some(id) = tc.id.filter(|id| !id.is_empty()) {
            p.id = id;
        }
        if let Some(name) = name {
            p.name.push_str(&name);
        }
        if let Some(args) = args {
            p.args.push_str(&args);
        }
    }

    fn on_chunk(&mut self, chunk: ChatChunk, out: &mut Vec<u8>) {
        if let Some(e) = chunk.error {
            let status = status_of_chat_error(&e);
            sse_data(out, &gemini_error(status, e.message));
            self.end = End::Failed;
            return;
        }
        if self.response_id.is_none() && !chunk.id.is_empty() {
            self.response_id = Some(chunk.id);
        }
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            let delta = choice.delta.unwrap_or_default();
            if let Some(r) = delta.reasoning_content.filter(|r| !r.is_empty()) {
                let part = GPart {
                    thought: Some(true),
                    ..GPart::text(r)
                };
                self.send(vec![part], None, None, out);
            }
            if let Some(t) = delta.content.or(delta.refusal).filter(|t| !t.is_empty()) {
                self.flush(true, out);
                self.send(vec![GPart::text(t)], None, None, out);
            }
            for tc in delta.tool_calls.into_iter().flatten() {
                self.tool_call(tc, out);
            }
            if let Some(f) = choice.finish_reason {
                self.finish = Some(f);
            }
        }
        if let Some(u) = chunk.usage {
            self.usage = Some(u);
        }
        if self.finish.is_some() && self.usage.is_some() {
            self.close(out);
        }
    }

    /// The last chunk: the calls not sent yet, the finish reason and the usage.
    fn close(&mut self, out: &mut Vec<u8>) {
        let mut parts = Vec::new();
        for call in std::mem::take(&mut self.pending) {
            match call.part() {
                Ok(p) => parts.push(p),
                Err(_) => {
                    let message =
                        "the upstream stream sent tool call arguments that are not a JSON object";
                    return self.fail(message, "malformed_event", out);
                }
            }
        }
        if parts.is_empty() {
            parts.push(GPart::text(""));
        }
        let finish = finish_from_chat(self.finish.as_deref());
        let usage = self.usage.as_ref().map(usage_from_chat);
        self.send(parts, Some(finish), usage, out);
        self.end = End::Clean;
    }
}

impl Leg for ChatToGemini {
    fn event(&mut self, _name: &str, data: &[u8], at_eof: bool, out: &mut Vec<u8>) -> bool {
        if self.end != End::Open {
            return false;
        }
        if data.trim_ascii() == b"[DONE]" {
            self.close(out);
            return false;
        }
        match serde_json::from_slice::<ChatChunk>(data) {
            Ok(c) => self.on_chunk(c, out),
            Err(_) if at_eof => {}
            Err(_) => self.fail(MALFORMED_EVENT, "malformed_event", out),
        }
        self.end == End::Open
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> bool {
        if self.end == End::Open {
            if self.finish.is_some() {
                self.close(out);
            } else {
                self.fail(TRUNCATED, "stream_truncated", out);
            }
        }
        self.end == End::Clean
    }

    fn fail(&mut self, message: &str, _code: &str, out: &mut Vec<u8>) {
        sse_data(out, &gemini_error(500, message.into()));
        self.end = End::Failed;
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::tests::{data_only, events, run, split_anywhere};
    use super::*;
    use crate::translate::Wire;
    use crate::translate::request::wrap_tool_id;
    use serde_json::json;

    const G: Wire = Wire::Gemini;
    const O: Wire = Wire::Chat;

    fn openai_chunk(delta: &str, finish: &str) -> String {
        format!(
            "data: {{\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o\",\"system_fingerprint\":\"fp_1\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}],\"usage\":null}}\n\n"
        )
    }

    const OPENAI_USAGE: &str = "data: {\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":20,\"total_tokens\":120,\"prompt_tokens_details\":{\"cached_tokens\":64},\"completion_tokens_details\":{\"reasoning_tokens\":8}}}\n\n";

    fn openai_text() -> String {
        [
            openai_chunk(
                r#"{"role":"assistant","content":"","refusal":null}"#,
                "null",
            ),
            openai_chunk(r#"{"reasoning_content":"Think."}"#, "null"),
            openai_chunk(r#"{"content":"Hello"}"#, "null"),
            openai_chunk(r#"{"content":" wörld ✓"}"#, "null"),
            openai_chunk("{}", r#""stop""#),
            OPENAI_USAGE.into(),
            "data: [DONE]\n\n".into(),
        ]
        .concat()
    }

    fn openai_tools(interleaved: bool, first_id: &str) -> String {
        let call = |i: u32, id: &str| {
            openai_chunk(
                &format!(
                    r#"{{"tool_calls":[{{"index":{i},"id":{},"type":"function","function":{{"name":"get_weather","arguments":""}}}}]}}"#,
                    json!(id)
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
        let mut v = vec![openai_chunk(
            r#"{"role":"assistant","content":null}"#,
            "null",
        )];
        if interleaved {
            v.extend([
                call(0, first_id),
                call(1, "call_b"),
                args(0, "{\"location\":"),
                args(1, "{\"location\": \"Bogotá\"}"),
                args(0, " \"Paris\"}"),
            ]);
        } else {
            v.extend([
                call(0, first_id),
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

    fn gemini(parts: Value, finish: Option<&str>, usage: Option<Value>) -> Value {
        let mut cand = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let Some(f) = finish {
            cand["finishReason"] = json!(f);
        }
        let mut v =
            json!({"candidates": [cand], "modelVersion": "public", "responseId": "chatcmpl-abc"});
        if let Some(u) = usage {
            v["usageMetadata"] = u;
        }
        v
    }

    fn usage() -> Value {
        json!({"promptTokenCount": 100, "cachedContentTokenCount": 64, "candidatesTokenCount": 12, "thoughtsTokenCount": 8, "totalTokenCount": 120})
    }

    #[test]
    fn x2_chat_stream_becomes_gemini_chunks_split_anywhere() {
        let (ev, ok) = split_anywhere(O, G, &openai_text(), true);
        assert!(ok);
        assert_eq!(
            data_only(&ev),
            vec![
                gemini(json!([{"text": "Think.", "thought": true}]), None, None),
                gemini(json!([{"text": "Hello"}]), None, None),
                gemini(json!([{"text": " wörld ✓"}]), None, None),
                gemini(json!([{"text": ""}]), Some("STOP"), Some(usage())),
            ]
        );
        // Gemini frames its events with CRLF.
        let (out, _) = run(O, G, &[openai_text().as_bytes()], true);
        assert!(out.ends_with(b"}\r\n\r\n"));
    }

    #[test]
    fn x2_chat_streamed_tool_calls_become_whole_function_call_parts() {
        let signed = wrap_tool_id(
            "call_a",
            &[json!({"type": "gemini_signature", "signature": "sig-A"})],
        );
        for interleaved in [false, true] {
            let (ev, ok) = split_anywhere(O, G, &openai_tools(interleaved, &signed), true);
            assert!(ok);
            let a = json!({"thoughtSignature": "sig-A", "functionCall": {"id": signed, "name": "get_weather", "args": {"location": "Paris"}}});
            let b = json!({"functionCall": {"id": "call_b", "name": "get_weather", "args": {"location": "Bogotá"}}});
            let want = if interleaved {
                // Call 0 was still open when call 1 started: both go at the end.
                vec![gemini(json!([a, b]), Some("STOP"), Some(usage()))]
            } else {
                vec![
                    gemini(json!([a]), None, None),
                    gemini(json!([b]), Some("STOP"), Some(usage())),
                ]
            };
            assert_eq!(data_only(&ev), want, "interleaved: {interleaved}");
        }
    }

    #[test]
    fn x3_chat_stream_cut_before_its_finish_is_a_gemini_error() {
        let s = openai_text();
        let end = s.find(r#""finish_reason":"stop""#).unwrap();
        let want = json!({"error": {"code": 500, "message": TRUNCATED, "status": "INTERNAL"}});
        for cut in [0, 30, end] {
            let (out, ok) = run(O, G, &[&s.as_bytes()[..cut]], true);
            assert!(!ok, "cut at {cut}");
            let ev = data_only(&events(&out));
            assert_eq!(ev.last(), Some(&want), "cut at {cut}");
            assert!(
                ev.iter()
                    .all(|v| v["candidates"][0].get("finishReason").is_none())
            );
        }
        // A finish_reason then the end of the body (no usage, no [DONE]) ends cleanly.
        let after = s.find(OPENAI_USAGE).unwrap();
        let (ev, ok) = split_anywhere(O, G, &s[..after], true);
        assert!(ok);
        assert_eq!(
            ev.last().unwrap().1,
            gemini(json!([{"text": ""}]), Some("STOP"), None)
        );
    }

    #[test]
    fn x3_chat_in_stream_error_becomes_a_gemini_error_chunk() {
        let s = openai_text();
        let cut = s.find(r#"{"content":" w"#).unwrap();
        let cut = s[..cut].rfind("data: ").unwrap();
        let err = "data: {\"error\":{\"message\":\"Rate limit reached\",\"type\":\"requests\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}\n\n";
        let (ev, ok) = split_anywhere(O, G, &format!("{}{err}{s}", &s[..cut]), true);
        assert!(!ok);
        assert_eq!(
            ev.last().unwrap().1,
            json!({"error": {"code": 429, "message": "Rate limit reached", "status": "RESOURCE_EXHAUSTED"}})
        );
        assert_eq!(ev.len(), 3);
    }
}
