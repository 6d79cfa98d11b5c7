//! Buffered (non-streamed) answers: a Gemini `GenerateContentResponse` ↔ a
//! `chat.completion`.
use super::wire::{
    ChatAnswer, ChatChoice, ChatCompletion, GCandidate, GContent, GPart, GResponse, GUsage,
};
use super::{
    CallId, call_from_chat, call_to_chat, finish_from_chat, finish_to_chat, malformed, ser,
    unix_now, usage_from_chat, usage_to_chat,
};
use crate::translate::TranslateError;
use crate::translate::request::{Extra, OaToolCall, parse, unsupported};

/// A Gemini answer as a `chat.completion` under `public_model`.
pub(crate) fn response_to_chat(body: &[u8], public_model: &str) -> Result<Vec<u8>, TranslateError> {
    ser(&to_chat(parse(body)?, public_model, unix_now())?)
}

/// A `chat.completion` as a Gemini answer under `public_model`.
pub(crate) fn response_from_chat(
    body: &[u8],
    public_model: &str,
) -> Result<Vec<u8>, TranslateError> {
    ser(&from_chat(parse(body)?, public_model)?)
}

/// What the parts of one candidate say, for a chat message.
#[derive(Default)]
pub(super) struct Said {
    pub(super) text: Option<String>,
    pub(super) reasoning: Option<String>,
    pub(super) calls: Vec<OaToolCall>,
}

/// Reads `parts` (at `path`, for errors); `first_call` numbers the calls without an id.
pub(super) fn read_parts(
    path: &str,
    parts: Vec<GPart>,
    first_call: usize,
) -> Result<Said, TranslateError> {
    let mut said = Said::default();
    for (j, part) in parts.into_iter().enumerate() {
        if let Some(t) = part.text {
            let slot = if part.thought == Some(true) {
                &mut said.reasoning
            } else {
                &mut said.text
            };
            if !t.is_empty() {
                slot.get_or_insert_with(String::new).push_str(&t);
            }
        } else if let Some(call) = part.function_call {
            let n = first_call + said.calls.len();
            said.calls
                .push(call_to_chat(call, part.thought_signature.as_deref(), n));
        } else if part.inline_data.is_some() || part.file_data.is_some() {
            let field = if part.inline_data.is_some() {
                "inlineData"
            } else {
                "fileData"
            };
            return Err(unsupported(
                format!("{path}.parts[{j}].{field}"),
                "generated media is not expressible in OpenAI chat completions",
            ));
        }
        // Other parts (executable code and its result) are not translated.
    }
    Ok(said)
}

fn to_chat(r: GResponse, model: &str, created: u64) -> Result<ChatCompletion, TranslateError> {
    let id = format!("chatcmpl-{}", r.response_id.as_deref().unwrap_or("gemini"));
    let (said, finish) = match r.candidates.into_iter().next() {
        Some(c) => {
            let parts = c.content.map(|c| c.parts).unwrap_or_default();
            let said = read_parts("candidates[0].content", parts, 0)?;
            let finish = finish_to_chat(
                c.finish_reason.as_deref().unwrap_or("STOP"),
                !said.calls.is_empty(),
            )
            .map_err(TranslateError::Malformed)?;
            (said, finish)
        }
        // The prompt itself was blocked.
        None if r
            .prompt_feedback
            .as_ref()
            .is_some_and(|f| f.block_reason.is_some()) =>
        {
            (Said::default(), "content_filter")
        }
        None => return Err(malformed("the answer has no candidates")),
    };
    Ok(ChatCompletion {
        id,
        object: "chat.completion".into(),
        created,
        model: model.into(),
        choices: vec![ChatChoice {
            index: 0,
            message: ChatAnswer {
                role: "assistant".into(),
                content: said.text,
                tool_calls: (!said.calls.is_empty()).then_some(said.calls),
                reasoning_content: said.reasoning,
                refusal: None,
            },
            finish_reason: Some(finish.into()),
            logprobs: None,
        }],
        usage: Some(usage_to_chat(&r.usage_metadata.unwrap_or_default())),
    })
}

fn from_chat(r: ChatCompletion, model: &str) -> Result<GResponse, TranslateError> {
    let [choice] = <[ChatChoice; 1]>::try_from(r.choices)
        .map_err(|v| malformed(format!("the answer has {} choices, not one", v.len())))?;
    let m = choice.message;
    let mut parts = Vec::new();
    if let Some(r) = m.reasoning_content.filter(|r| !r.is_empty()) {
        parts.push(GPart {
            thought: Some(true),
            ..GPart::text(r)
        });
    }
    match (m.content, m.refusal) {
        (Some(t), _) if !t.is_empty() => parts.push(GPart::text(t)),
        (_, Some(refusal)) if !refusal.is_empty() => parts.push(GPart::text(refusal)),
        _ => {}
    }
    for (k, call) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
        parts.push(call_from_chat(
            &format!("choices[0].message.tool_calls[{k}]"),
            call,
            CallId::Whole,
        )?);
    }
    Ok(GResponse {
        candidates: vec![GCandidate {
            content: Some(GContent {
                role: Some("model".into()),
                parts,
                extra: Extra::new(),
            }),
            finish_reason: Some(finish_from_chat(choice.finish_reason.as_deref()).into()),
            index: 0,
        }],
        prompt_feedback: None,
        usage_metadata: Some(r.usage.as_ref().map_or(GUsage::default(), usage_from_chat)),
        model_version: Some(model.into()),
        response_id: Some(r.id),
        error: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::request::unwrap_tool_id;
    use crate::translate::{Wire, response};
    use serde_json::{Value, json};

    fn g_to_oa(body: Value) -> Result<Value, TranslateError> {
        let r = to_chat(serde_json::from_value(body).unwrap(), "pub", 1_700_000_000)?;
        Ok(serde_json::to_value(r).unwrap())
    }

    fn oa_to_g(body: Value) -> Result<Value, TranslateError> {
        let out = response(Wire::Chat, Wire::Gemini, body.to_string().as_bytes(), "pub")?;
        Ok(serde_json::from_slice(&out).unwrap())
    }

    #[test]
    fn x2_gemini_text_answer_becomes_a_chat_completion() {
        // Google's generateContent response example.
        let got = g_to_oa(json!({
            "candidates": [{"content": {"parts": [{"text": "AI learns patterns from data."}], "role": "model"}, "finishReason": "STOP", "avgLogprobs": -0.1, "index": 0}],
            "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": 7, "totalTokenCount": 15, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 8}]},
            "modelVersion": "gemini-2.5-flash", "responseId": "mAitaLmkHPPlz7IPvtfUqQ4"
        }))
        .unwrap();
        assert_eq!(
            got,
            json!({
                "id": "chatcmpl-mAitaLmkHPPlz7IPvtfUqQ4", "object": "chat.completion", "created": 1_700_000_000, "model": "pub",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "AI learns patterns from data.", "refusal": null}, "finish_reason": "stop", "logprobs": null}],
                "usage": {"prompt_tokens": 8, "completion_tokens": 7, "total_tokens": 15, "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}}
            })
        );
    }

    #[test]
    fn x2_gemini_parallel_function_calls_become_tool_calls_with_their_own_ids() {
        // Google's parallel function calling answer; the first call is signed.
        let got = g_to_oa(json!({
            "candidates": [{"content": {"role": "model", "parts": [
                {"functionCall": {"name": "power_disco_ball", "args": {"power": true}}, "thoughtSignature": "CiIBVKhc7oDPpCaX"},
                {"functionCall": {"name": "start_music", "args": {"energetic": true, "loud": true}}},
                {"functionCall": {"id": "fc_3", "name": "dim_lights", "args": {"brightness": 0.5}}}
            ]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 30, "thoughtsTokenCount": 50, "totalTokenCount": 180}
        }))
        .unwrap();
        let msg = &got["choices"][0]["message"];
        assert_eq!(got["choices"][0]["finish_reason"], json!("tool_calls"));
        assert_eq!(msg["content"], Value::Null);
        let calls = msg["tool_calls"].as_array().unwrap();
        let (id0, blocks) = unwrap_tool_id(calls[0]["id"].as_str().unwrap());
        assert_eq!(id0, "call_0");
        assert_eq!(
            blocks,
            Some(vec![
                json!({"type": "gemini_signature", "signature": "CiIBVKhc7oDPpCaX"})
            ])
        );
        assert_eq!(calls[1]["id"], json!("call_1"));
        assert_eq!(calls[2]["id"], json!("fc_3"));
        assert_eq!(
            calls[1]["function"],
            json!({"name": "start_music", "arguments": "{\"energetic\":true,\"loud\":true}"})
        );
        assert_eq!(got["usage"]["completion_tokens"], json!(80));
        assert_eq!(
            got["usage"]["completion_tokens_details"]["reasoning_tokens"],
            json!(50)
        );
    }

    #[test]
    fn x2_gemini_thoughts_become_reasoning_content_and_usage_keeps_cached_tokens_once() {
        // A thinking answer (includeThoughts) that read an implicit cache.
        let got = g_to_oa(json!({
            "candidates": [{"content": {"role": "model", "parts": [
                {"text": "**Counting paws** Two dogs, four paws each.", "thought": true},
                {"text": "There are 8 paws.", "thoughtSignature": "Ctext-sig"}
            ]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 2048, "cachedContentTokenCount": 1024, "candidatesTokenCount": 6, "thoughtsTokenCount": 120, "totalTokenCount": 2174}
        }))
        .unwrap();
        let msg = &got["choices"][0]["message"];
        assert_eq!(msg["content"], json!("There are 8 paws."));
        assert_eq!(
            msg["reasoning_content"],
            json!("**Counting paws** Two dogs, four paws each.")
        );
        assert_eq!(
            got["usage"],
            json!({"prompt_tokens": 2048, "completion_tokens": 126, "total_tokens": 2174,
                "prompt_tokens_details": {"cached_tokens": 1024}, "completion_tokens_details": {"reasoning_tokens": 120}})
        );
        // And back: candidates exclude the reasoning, the prompt keeps the cached part.
        let back = oa_to_g(json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "There are 8 paws.", "reasoning_content": "Two dogs."}, "finish_reason": "stop"}],
            "usage": got["usage"].clone()}))
        .unwrap();
        assert_eq!(
            back,
            json!({
                "candidates": [{"content": {"role": "model", "parts": [{"text": "Two dogs.", "thought": true}, {"text": "There are 8 paws."}]}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 2048, "cachedContentTokenCount": 1024, "candidatesTokenCount": 6, "thoughtsTokenCount": 120, "totalTokenCount": 2174},
                "modelVersion": "pub", "responseId": "chatcmpl-1"
            })
        );
    }

    #[test]
    fn x2_chat_tool_calls_become_function_calls_with_their_signature() {
        let id = crate::translate::request::wrap_tool_id(
            "call_a",
            &[
                json!({"type": "thinking", "thinking": "x", "signature": "anthropic"}),
                json!({"type": "gemini_signature", "signature": "g-sig"}),
            ],
        );
        let got = oa_to_g(json!({"id": "chatcmpl-abc", "object": "chat.completion", "created": 1, "model": "gpt-4.1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": id, "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Boston, MA\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": ""}}
            ]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99}}))
        .unwrap();
        // The id goes whole (another vendor's thinking comes back with the client's
        // next turn); the Gemini signature is restored on its part.
        assert_eq!(
            got["candidates"][0],
            json!({"content": {"role": "model", "parts": [
                {"thoughtSignature": "g-sig", "functionCall": {"id": id, "name": "get_weather", "args": {"location": "Boston, MA"}}},
                {"functionCall": {"id": "call_b", "name": "get_time", "args": {}}}
            ]}, "finishReason": "STOP", "index": 0})
        );
        assert_eq!(
            got["usageMetadata"],
            json!({"promptTokenCount": 82, "candidatesTokenCount": 17, "totalTokenCount": 99})
        );
    }

    #[test]
    fn x3_gemini_finish_reasons_map_and_malformed_calls_are_errors() {
        let answer = |reason: &str| json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "x"}]}, "finishReason": reason}]});
        for (reason, want) in [
            ("STOP", "stop"),
            ("MAX_TOKENS", "length"),
            ("SAFETY", "content_filter"),
            ("RECITATION", "content_filter"),
            ("BLOCKLIST", "content_filter"),
            ("PROHIBITED_CONTENT", "content_filter"),
            ("SPII", "content_filter"),
            ("IMAGE_SAFETY", "content_filter"),
            ("OTHER", "stop"),
        ] {
            let got = g_to_oa(answer(reason)).unwrap();
            assert_eq!(got["choices"][0]["finish_reason"], json!(want), "{reason}");
        }
        assert!(matches!(
            g_to_oa(answer("MALFORMED_FUNCTION_CALL")),
            Err(TranslateError::Malformed(m)) if m.contains("MALFORMED_FUNCTION_CALL")
        ));
        // A blocked prompt has no candidates.
        let blocked = g_to_oa(json!({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 5, "totalTokenCount": 5}})).unwrap();
        assert_eq!(
            blocked["choices"][0]["finish_reason"],
            json!("content_filter")
        );
        assert_eq!(blocked["choices"][0]["message"]["content"], Value::Null);
        assert!(matches!(
            g_to_oa(json!({"candidates": []})),
            Err(TranslateError::Malformed(_))
        ));
        // Generated images cannot be put in a chat message.
        let image = json!({"candidates": [{"content": {"parts": [{"inlineData": {"mimeType": "image/png", "data": "AA=="}}]}, "finishReason": "STOP"}]});
        assert!(
            matches!(g_to_oa(image), Err(TranslateError::Unsupported { field, .. }) if field == "candidates[0].content.parts[0].inlineData")
        );
        // Chat → Gemini.
        for (reason, want) in [
            ("stop", "STOP"),
            ("length", "MAX_TOKENS"),
            ("tool_calls", "STOP"),
            ("content_filter", "SAFETY"),
        ] {
            let got = oa_to_g(json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": reason}]}))
            .unwrap();
            assert_eq!(
                got["candidates"][0]["finishReason"],
                json!(want),
                "{reason}"
            );
        }
        let two = json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "a"}, "finish_reason": "stop"},
            {"index": 1, "message": {"role": "assistant", "content": "b"}, "finish_reason": "stop"}]});
        assert!(matches!(oa_to_g(two), Err(TranslateError::Malformed(_))));
    }
}
