//! Buffered OpenAI chat answers → Responses `response` objects (see the module docs).
use super::wire::{ChatChoice, ChatCompletion, OutputContent, OutputItem, Response, SummaryText};
use super::{finished, now, skeleton, usage};
use crate::translate::TranslateError;
use crate::translate::request::parse;

/// An OpenAI chat answer written as a Responses `response` under `public_model`.
pub(crate) fn response_from_chat(
    body: &[u8],
    public_model: &str,
) -> Result<Vec<u8>, TranslateError> {
    let r = to_response(parse(body)?, public_model, now())?;
    serde_json::to_vec(&r).map_err(|e| TranslateError::Malformed(e.to_string()))
}

/// The id of the `n`th (from 0) output item of a kind: `<prefix>_<chat id>`, then
/// `<prefix>_<chat id>_<n>` (a stream may have several messages).
pub(super) fn item_id(prefix: &str, chat_id: &str, n: usize) -> String {
    if n == 0 {
        format!("{prefix}_{chat_id}")
    } else {
        format!("{prefix}_{chat_id}_{n}")
    }
}

/// The id of the `k`th (from 0) function call item.
pub(super) fn call_item_id(chat_id: &str, k: usize) -> String {
    format!("fc_{chat_id}_{k}")
}

fn to_response(c: ChatCompletion, model: &str, now: u64) -> Result<Response, TranslateError> {
    let [choice] = <[ChatChoice; 1]>::try_from(c.choices).map_err(|v| {
        TranslateError::Malformed(format!("the answer has {} choices, not one", v.len()))
    })?;
    let mut r = skeleton(&c.id, c.created.unwrap_or(now), model, "completed");
    let m = choice.message;
    if let Some(text) = m.reasoning_content.filter(|t| !t.is_empty()) {
        r.output.push(OutputItem::Reasoning {
            id: item_id("rs", &c.id, 0),
            summary: vec![SummaryText::new(text)],
        });
    }
    let calls = m.tool_calls.unwrap_or_default();
    let mut content = Vec::new();
    let text = m.content.unwrap_or_default();
    let refusal = m.refusal.filter(|t| !t.is_empty());
    if !text.is_empty() || (calls.is_empty() && refusal.is_none()) {
        content.push(OutputContent::OutputText {
            text,
            annotations: Vec::new(),
        });
    }
    if let Some(refusal) = refusal {
        content.push(OutputContent::Refusal { refusal });
    }
    if !content.is_empty() {
        r.output.push(OutputItem::Message {
            id: item_id("msg", &c.id, 0),
            status: "completed",
            role: "assistant",
            content,
        });
    }
    for (k, call) in calls.into_iter().enumerate() {
        r.output.push(OutputItem::FunctionCall {
            id: call_item_id(&c.id, k),
            call_id: call.id,
            name: call.function.name,
            arguments: call.function.arguments,
            status: "completed",
        });
    }
    r.usage = c.usage.as_ref().map(usage);
    Ok(finished(r, choice.finish_reason.as_deref(), now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::{Wire, response};
    use serde_json::{Value, json};

    const NOW: u64 = 1_741_476_600;

    fn chat_to_resp(body: Value) -> Value {
        let c = serde_json::from_value(body).unwrap();
        serde_json::to_value(to_response(c, "pub", NOW).unwrap()).unwrap()
    }

    /// The response object every answer shares, with `output`, `status`,
    /// `incomplete_details`, `completed_at` and `usage` as given.
    fn response_with(id: &str, created: u64, status: &str, output: Value, usage: Value) -> Value {
        json!({
            "id": id, "object": "response", "created_at": created, "status": status,
            "background": false, "completed_at": if status == "completed" { json!(NOW) } else { json!(null) },
            "error": null, "incomplete_details": null, "instructions": null,
            "max_output_tokens": null, "max_tool_calls": null, "metadata": {}, "model": "pub",
            "output": output, "parallel_tool_calls": true, "previous_response_id": null,
            "reasoning": {"effort": null, "summary": null}, "store": false, "temperature": null,
            "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_p": null,
            "truncation": "disabled", "usage": usage, "user": null
        })
    }

    #[test]
    fn x2_chat_text_answer_becomes_a_completed_response_with_one_message() {
        // OpenAI's chat create example answer.
        let got = chat_to_resp(json!({
            "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "object": "chat.completion",
            "created": 1741569952, "model": "gpt-4.1-2025-04-14",
            "choices": [{"index": 0, "message": {"role": "assistant",
                "content": "Hello! How can I assist you today?", "refusal": null, "annotations": []},
                "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29,
                "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}},
            "service_tier": "default"
        }));
        let want = response_with(
            "resp_chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
            1741569952,
            "completed",
            json!([{"type": "message", "id": "msg_chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
                "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello! How can I assist you today?", "annotations": []}]}]),
            json!({"input_tokens": 19, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 29}),
        );
        assert_eq!(got, want);
    }

    #[test]
    fn x2_chat_tool_calls_become_function_call_items_keeping_the_call_id() {
        let enveloped = "toolu_01__pcx1_W3sidHlwZSI6InRoaW5raW5nIn1d";
        let got = chat_to_resp(json!({
            "id": "chatcmpl-abc", "object": "chat.completion", "created": 1, "model": "gpt",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Checking both.",
                "tool_calls": [
                    {"id": enveloped, "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Rome\"}"}}
                ]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99}
        }));
        assert_eq!(
            got["output"],
            json!([
                {"type": "message", "id": "msg_chatcmpl-abc", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": "Checking both.", "annotations": []}]},
                {"type": "function_call", "id": "fc_chatcmpl-abc_0", "call_id": enveloped,
                    "name": "get_weather", "arguments": "{\"location\":\"Paris\"}", "status": "completed"},
                {"type": "function_call", "id": "fc_chatcmpl-abc_1", "call_id": "call_2",
                    "name": "get_weather", "arguments": "{\"location\":\"Rome\"}", "status": "completed"}
            ])
        );
        assert_eq!(got["status"], "completed");
        // Tool calls only: no empty message item.
        let got = chat_to_resp(json!({
            "id": "c", "object": "chat.completion", "created": 1, "model": "gpt",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                "finish_reason": "tool_calls"}]
        }));
        let types: Vec<&Value> = got["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| &i["type"])
            .collect();
        assert_eq!(types, [&json!("function_call")]);
        assert_eq!(got["usage"], Value::Null);
    }

    #[test]
    fn x2_length_finish_becomes_an_incomplete_response_for_max_output_tokens() {
        let answer = |finish: &str| {
            json!({"id": "c1", "object": "chat.completion", "created": 5, "model": "gpt",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Once upon a"},
                    "finish_reason": finish}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}})
        };
        let got = chat_to_resp(answer("length"));
        assert_eq!(got["status"], "incomplete");
        assert_eq!(
            got["incomplete_details"],
            json!({"reason": "max_output_tokens"})
        );
        assert_eq!(got["completed_at"], Value::Null);
        assert_eq!(got["output"][0]["status"], "incomplete");
        assert_eq!(got["output"][0]["content"][0]["text"], "Once upon a");
        let got = chat_to_resp(answer("content_filter"));
        assert_eq!(got["status"], "incomplete");
        assert_eq!(
            got["incomplete_details"],
            json!({"reason": "content_filter"})
        );
        let got = chat_to_resp(answer("stop"));
        assert_eq!(
            (&got["status"], &got["incomplete_details"]),
            (&json!("completed"), &Value::Null)
        );
        assert_eq!(got["completed_at"], json!(NOW));
    }

    #[test]
    fn x2_reasoning_content_becomes_a_reasoning_item_with_one_summary() {
        let got = chat_to_resp(json!({
            "id": "c2", "object": "chat.completion", "created": 5, "model": "gpt",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "42",
                "reasoning_content": "Six times seven."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 30, "total_tokens": 40,
                "completion_tokens_details": {"reasoning_tokens": 25}}
        }));
        assert_eq!(
            got["output"][0],
            json!({"type": "reasoning", "id": "rs_c2", "summary": [{"type": "summary_text", "text": "Six times seven."}]})
        );
        assert_eq!(got["output"][1]["content"][0]["text"], "42");
        assert_eq!(
            got["usage"]["output_tokens_details"],
            json!({"reasoning_tokens": 25})
        );
    }

    #[test]
    fn x2_cached_prompt_tokens_become_input_token_details() {
        // Through the hub: an Anthropic answer's cache reads reach the Responses usage.
        let an = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 100, "cache_read_input_tokens": 900, "cache_creation_input_tokens": 50, "output_tokens": 7}});
        let out = response(
            Wire::Messages,
            Wire::Responses,
            an.to_string().as_bytes(),
            "pub",
        )
        .unwrap();
        let got: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            got["usage"],
            json!({"input_tokens": 1050, "input_tokens_details": {"cached_tokens": 900, "cache_write_tokens": 0},
                "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 1057})
        );
        assert_eq!(got["id"], "resp_chatcmpl-msg_1");
        assert_eq!(got["output"][0]["content"][0]["text"], "Hi");
        // Cache writes, when chat reports them.
        let got = chat_to_resp(
            json!({"id": "c", "object": "chat.completion", "created": 1, "model": "g",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11,
                "prompt_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 6}}}),
        );
        assert_eq!(
            got["usage"]["input_tokens_details"],
            json!({"cached_tokens": 4, "cache_write_tokens": 6})
        );
    }

    #[test]
    fn x2_a_refusal_becomes_a_refusal_content_part() {
        let got = chat_to_resp(json!({
            "id": "c3", "object": "chat.completion", "created": 5, "model": "gpt",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                "refusal": "I can't help with that."}, "finish_reason": "stop"}]
        }));
        assert_eq!(
            got["output"],
            json!([{"type": "message", "id": "msg_c3", "status": "completed", "role": "assistant",
                "content": [{"type": "refusal", "refusal": "I can't help with that."}]}])
        );
    }

    #[test]
    fn x3_answers_with_other_than_one_choice_are_malformed() {
        let body = |choices: Value| {
            json!({"id": "x", "object": "chat.completion", "created": 1, "model": "g", "choices": choices})
                .to_string()
        };
        let one = json!({"index": 0, "message": {"role": "assistant", "content": "a"}, "finish_reason": "stop"});
        for choices in [json!([]), json!([one.clone(), one.clone()])] {
            assert!(matches!(
                response_from_chat(body(choices).as_bytes(), "pub"),
                Err(TranslateError::Malformed(_))
            ));
        }
        assert!(response_from_chat(body(json!([one])).as_bytes(), "pub").is_ok());
        assert!(matches!(
            response_from_chat(b"{\"id\": 3}", "pub"),
            Err(TranslateError::Malformed(m)) if m.contains("id")
        ));
    }
}
