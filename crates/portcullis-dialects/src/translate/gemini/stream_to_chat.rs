//! A Gemini `?alt=sse` stream written as OpenAI `chat.completion.chunk` events.
use super::error::{openai_error, openai_kind};
use super::response::read_parts;
use super::wire::{GResponse, GUsage};
use super::{MALFORMED_EVENT, TRUNCATED, finish_to_chat, unix_now, usage_to_chat};
use crate::translate::stream::leg::{End, Leg};
use serde_json::{Value, json};

/// Gemini stream chunks in, OpenAI chat chunks out. Gemini has no terminal event: the
/// chunk carrying a `finishReason` (and the final usage) ends the stream.
#[derive(Debug)]
pub(crate) struct GeminiToChat {
    model: String,
    include_usage: bool,
    id: String,
    created: u64,
    started: bool,
    /// Tool calls sent so far (the next one's index).
    calls: usize,
    usage: GUsage,
    end: End,
}

fn sse_data(out: &mut Vec<u8>, v: &Value) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(v.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

impl GeminiToChat {
    /// A leg for an OpenAI client of `public_model`; its usage chunk is sent when
    /// `include_usage`.
    pub(crate) fn new(public_model: &str, include_usage: bool) -> Self {
        Self {
            model: public_model.to_owned(),
            include_usage,
            id: String::new(),
            created: 0,
            started: false,
            calls: 0,
            usage: GUsage::default(),
            end: End::Open,
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    }

    fn on_chunk(&mut self, r: GResponse, out: &mut Vec<u8>) {
        if let Some(e) = r.error {
            let (_, kind, code) = openai_kind(&e, e.code);
            sse_data(out, &openai_error(e.message, kind, code));
            self.end = End::Failed;
            return;
        }
        if !self.started {
            self.started = true;
            self.id = format!("chatcmpl-{}", r.response_id.as_deref().unwrap_or("gemini"));
            self.created = unix_now();
            let role = self.chunk(json!({"role": "assistant", "content": ""}), None);
            sse_data(out, &role);
        }
        if let Some(u) = r.usage_metadata {
            self.usage = u;
        }
        let Some(c) = r.candidates.into_iter().find(|c| c.index == 0) else {
            if r.prompt_feedback.is_some_and(|f| f.block_reason.is_some()) {
                self.close("SAFETY", out);
            }
            return;
        };
        let parts = c.content.map(|c| c.parts).unwrap_or_default();
        let said = match read_parts("candidates[0].content", parts, self.calls) {
            Ok(said) => said,
            Err(e) => {
                let message = format!("the provider's answer cannot be translated: {e}");
                self.fail(&message, "untranslatable_content", out);
                return;
            }
        };
        if let Some(r) = said.reasoning {
            sse_data(out, &self.chunk(json!({"reasoning_content": r}), None));
        }
        if let Some(t) = said.text {
            sse_data(out, &self.chunk(json!({"content": t}), None));
        }
        for call in said.calls {
            let d = json!({"tool_calls": [{
                "index": self.calls, "id": call.id, "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }]});
            self.calls += 1;
            sse_data(out, &self.chunk(d, None));
        }
        if let Some(reason) = c.finish_reason {
            self.close(&reason, out);
        }
    }

    /// The last chunks: the finish reason, the usage when asked for, `[DONE]`.
    fn close(&mut self, reason: &str, out: &mut Vec<u8>) {
        let finish = match finish_to_chat(reason, self.calls > 0) {
            Ok(f) => f,
            Err(message) => return self.fail(&message, "malformed_function_call", out),
        };
        sse_data(out, &self.chunk(json!({}), Some(finish)));
        if self.include_usage {
            let c = json!({
                "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [], "usage": usage_to_chat(&self.usage),
            });
            sse_data(out, &c);
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
        self.end = End::Clean;
    }
}

impl Leg for GeminiToChat {
    fn event(&mut self, _name: &str, data: &[u8], at_eof: bool, out: &mut Vec<u8>) -> bool {
        if self.end != End::Open {
            return false;
        }
        match serde_json::from_slice::<GResponse>(data) {
            Ok(r) => self.on_chunk(r, out),
            // Cut at the end of the body: `finish` reports the truncation.
            Err(_) if at_eof => {}
            Err(_) => self.fail(MALFORMED_EVENT, "malformed_event", out),
        }
        self.end == End::Open
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> bool {
        if self.end == End::Open {
            self.fail(TRUNCATED, "stream_truncated", out);
        }
        self.end == End::Clean
    }

    fn fail(&mut self, message: &str, code: &str, out: &mut Vec<u8>) {
        sse_data(
            out,
            &openai_error(message.into(), "server_error", Some(code)),
        );
        self.end = End::Failed;
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::tests::{data_only, run, split_anywhere};
    use super::*;
    use crate::translate::Wire;
    use crate::translate::request::unwrap_tool_id;

    const G: Wire = Wire::Gemini;
    const O: Wire = Wire::Chat;

    /// Google's streamed answer shape: text chunks, the last with finishReason and
    /// the final usage (every chunk carries usage so far).
    pub(in super::super) const GEMINI_TEXT: &str = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hello\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"totalTokenCount\": 9},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"resp-1\"}\r\n\r\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" wörld ✓\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"totalTokenCount\": 9},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"resp-1\"}\r\n\r\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"cachedContentTokenCount\": 4,\"candidatesTokenCount\": 3,\"thoughtsTokenCount\": 5,\"totalTokenCount\": 17},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"resp-1\"}\r\n\r\n";

    /// Thoughts, then two parallel calls whole in one chunk, the first signed, the
    /// finish and usage in the same chunk.
    pub(in super::super) const GEMINI_THOUGHT_CALLS: &str = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"I need two lookups.\", \"thought\": true}],\"role\": \"model\"},\"index\": 0}],\"responseId\": \"resp-2\"}\n\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"functionCall\": {\"name\": \"get_weather\",\"args\": {\"location\": \"Paris\"}},\"thoughtSignature\": \"CiQBVKhc7sig\"},{\"functionCall\": {\"name\": \"get_weather\",\"args\": {\"location\": \"Bogotá\"}}}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 50,\"candidatesTokenCount\": 20,\"thoughtsTokenCount\": 30,\"totalTokenCount\": 100},\"responseId\": \"resp-2\"}\n\n";

    fn chunk(id: &str, delta: Value, finish: Value) -> Value {
        json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": "public",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    }

    #[test]
    fn x2_gemini_stream_becomes_chat_chunks_split_anywhere() {
        let (ev, ok) = split_anywhere(G, O, GEMINI_TEXT, true);
        assert!(ok);
        let id = "chatcmpl-resp-1";
        assert_eq!(
            data_only(&ev),
            vec![
                chunk(id, json!({"role": "assistant", "content": ""}), json!(null)),
                chunk(id, json!({"content": "Hello"}), json!(null)),
                chunk(id, json!({"content": " wörld ✓"}), json!(null)),
                chunk(id, json!({}), json!("stop")),
                json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": "public", "choices": [],
                    "usage": {"prompt_tokens": 9, "completion_tokens": 8, "total_tokens": 17,
                        "prompt_tokens_details": {"cached_tokens": 4}, "completion_tokens_details": {"reasoning_tokens": 5}}}),
                json!("[DONE]"),
            ]
        );
        // No usage chunk unless asked for.
        let (ev, ok) = split_anywhere(G, O, GEMINI_TEXT, false);
        assert!(ok);
        assert_eq!(ev.len(), 5);
        assert!(ev.iter().all(|(_, v)| v.get("usage").is_none()));
    }

    #[test]
    fn x2_gemini_streamed_parallel_calls_get_their_own_index_and_id() {
        let (ev, ok) = split_anywhere(G, O, GEMINI_THOUGHT_CALLS, false);
        assert!(ok);
        let ev = data_only(&ev);
        let id = "chatcmpl-resp-2";
        assert_eq!(
            ev[1],
            chunk(
                id,
                json!({"reasoning_content": "I need two lookups."}),
                json!(null)
            )
        );
        let call = |v: &Value| v["choices"][0]["delta"]["tool_calls"][0].clone();
        let first = call(&ev[2]);
        assert_eq!(first["index"], json!(0));
        assert_eq!(
            unwrap_tool_id(first["id"].as_str().unwrap()),
            (
                "call_0".into(),
                Some(vec![
                    json!({"type": "gemini_signature", "signature": "CiQBVKhc7sig"})
                ])
            )
        );
        assert_eq!(
            first["function"],
            json!({"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"})
        );
        assert_eq!(
            call(&ev[3]),
            json!({"index": 1, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Bogotá\"}"}})
        );
        assert_eq!(ev[4], chunk(id, json!({}), json!("tool_calls")));
        assert_eq!(ev[5], json!("[DONE]"));
        assert_eq!(ev.len(), 6);
    }

    #[test]
    fn x3_gemini_stream_cut_before_its_finish_reason_is_an_error() {
        let end = GEMINI_TEXT.find("\"finishReason\"").unwrap();
        let truncated = json!({"error": {"message": TRUNCATED, "type": "server_error", "code": "stream_truncated", "param": null}});
        for cut in [
            0,
            20,
            GEMINI_TEXT
                .find("data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" w")
                .unwrap(),
            end,
        ] {
            let (out, ok) = run(G, O, &[&GEMINI_TEXT.as_bytes()[..cut]], true);
            assert!(!ok, "cut at {cut}");
            let ev = data_only(&super::super::tests::events(&out));
            assert!(!ev.contains(&json!("[DONE]")), "cut at {cut}");
            assert_eq!(ev.last(), Some(&truncated), "cut at {cut}");
        }
        // Cut anywhere (even inside the last event) and split anywhere: still an error.
        let (ev, ok) = split_anywhere(G, O, &GEMINI_TEXT[..end], true);
        assert!(!ok);
        assert_eq!(ev.last().unwrap().1, truncated);
    }

    #[test]
    fn x3_gemini_in_stream_error_and_malformed_call_end_with_the_clients_error() {
        let first = &GEMINI_TEXT[..GEMINI_TEXT.find("\r\n\r\n").unwrap() + 4];
        let err = "data: {\"error\": {\"code\": 503, \"message\": \"The model is overloaded. Please try again later.\", \"status\": \"UNAVAILABLE\"}}\r\n\r\n";
        let (ev, ok) = split_anywhere(G, O, &format!("{first}{err}{GEMINI_TEXT}"), true);
        assert!(!ok);
        assert_eq!(ev.len(), 3);
        assert_eq!(
            ev[2].1,
            json!({"error": {"message": "The model is overloaded. Please try again later.", "type": "server_error", "code": "overloaded", "param": null}})
        );
        let bad = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"\"}]}, \"finishReason\": \"MALFORMED_FUNCTION_CALL\", \"index\": 0}]}\n\n";
        let (ev, ok) = split_anywhere(G, O, &format!("{first}{bad}"), true);
        assert!(!ok);
        let last = &ev.last().unwrap().1;
        assert_eq!(last["error"]["code"], json!("malformed_function_call"));
        assert!(
            ev.iter()
                .all(|(_, v)| v != "[DONE]" && v["choices"][0]["finish_reason"].is_null())
        );
        // An event that is not JSON mid-stream ends it too.
        let (ev, ok) = split_anywhere(G, O, &format!("{first}data: {{oops\n\n{GEMINI_TEXT}"), true);
        assert!(!ok);
        assert_eq!(
            ev.last().unwrap().1["error"]["message"],
            json!(MALFORMED_EVENT)
        );
    }
}
