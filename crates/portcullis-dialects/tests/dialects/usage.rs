//! Usage from provider responses and streams (W5, U2, B2), the first-chunk commit point
//! (F4) and in-stream errors (F3). Streams are checked at every byte boundary.

use crate::support::*;
use portcullis_dialects::{Dialect, Usage, UsageWatcher, rate_count, usage_from_json};

fn usage(input: u64, cached: u64, write: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        cached_input_tokens: cached,
        cache_write_tokens: write,
        output_tokens: output,
        ..Usage::default()
    }
}

fn ok(usage: Usage) -> Seen {
    Seen {
        usage: Some(usage),
        content: true,
        error: None,
        end: true,
    }
}

// ---- OpenAI -------------------------------------------------------------------------

#[test]
fn w5_openai_non_stream_usage_splits_cached_input() {
    let u = usage_from_json(Dialect::OpenAi, OPENAI_CHAT_COMPLETION).unwrap();
    // prompt_tokens 1117 include cached_tokens 1024.
    assert_eq!(u, usage(93, 1024, 0, 46));
    assert_eq!(u.total_tokens(), 1163);
    let expected = ok(u);
    assert_every_split(Dialect::OpenAi, false, OPENAI_CHAT_COMPLETION, &expected);
}

#[test]
fn w5_openai_stream_final_usage_chunk() {
    // completion_tokens (300) include the 192 reasoning tokens.
    let expected = ok(usage(86, 1920, 0, 300));
    assert_every_split(Dialect::OpenAi, true, OPENAI_CHAT_STREAM, &expected);
}

#[test]
fn w5_openai_stream_without_include_usage_reports_none() {
    let text = std::str::from_utf8(OPENAI_CHAT_STREAM).unwrap();
    let without: String = text
        .split_inclusive("\n\n")
        .filter(|event| !event.contains("\"usage\":{"))
        .collect();
    let seen = watch(Dialect::OpenAi, true, [without.as_bytes()]);
    assert_eq!(
        seen,
        Seen {
            usage: None,
            content: true,
            error: None,
            end: true
        }
    );
}

#[test]
fn f4_openai_tool_call_delta_is_first_content() {
    let expected = ok(usage(82, 0, 0, 17));
    assert_every_split(Dialect::OpenAi, true, OPENAI_TOOL_CALL_STREAM, &expected);
}

/// Feeds `stream` up to each event boundary and returns `saw_content` after each.
fn content_after_each_event(dialect: Dialect, stream: &[u8]) -> Vec<bool> {
    let text = std::str::from_utf8(stream).unwrap().replace("\r\n", "\n");
    let mut w = UsageWatcher::new(dialect, true);
    text.split_inclusive("\n\n")
        .map(|event| {
            // Until the blank line ends the event, it is not seen.
            let (body, blank) = event.split_at(event.len() - 1);
            w.observe(body.as_bytes());
            let before = w.saw_content();
            w.observe(blank.as_bytes());
            assert!(!before || w.saw_content());
            w.saw_content()
        })
        .collect()
}

#[test]
fn f4_first_content_chunk_is_the_commit_point() {
    // OpenAI: the role-only first chunk (content "") is not content; the second is.
    assert_eq!(
        content_after_each_event(Dialect::OpenAi, OPENAI_CHAT_STREAM),
        [false, true, true, true, true, true]
    );
    // Anthropic: message_start, content_block_start and ping are not content.
    assert_eq!(
        content_after_each_event(Dialect::Anthropic, ANTHROPIC_TOOL_STREAM)[..5],
        [false, false, false, true, true]
    );
    // Gemini: the first candidate part.
    assert_eq!(
        content_after_each_event(Dialect::Gemini, GEMINI_STREAM),
        [true, true, true]
    );
    // A stream that fails before any content was never committed (F2 failover).
    assert_eq!(
        content_after_each_event(Dialect::OpenAi, OPENAI_STREAM_ERROR),
        [false, false]
    );
}

#[test]
fn f3_openai_in_stream_error_is_reported() {
    let expected = Seen {
        usage: None,
        content: false,
        error: Some(
            "server_error: The server had an error while processing your request. Sorry about that!"
                .into(),
        ),
        end: false,
    };
    assert_every_split(Dialect::OpenAi, true, OPENAI_STREAM_ERROR, &expected);
}

#[test]
fn f5_openai_error_body_has_no_usage_and_reports_the_error() {
    assert_eq!(usage_from_json(Dialect::OpenAi, OPENAI_ERROR), None);
    // A streamed request answered with a plain JSON error is read as JSON.
    for streaming in [false, true] {
        let seen = watch(Dialect::OpenAi, streaming, [OPENAI_ERROR]);
        assert_eq!(
            seen.error.as_deref(),
            Some(
                "insufficient_quota: You exceeded your current quota, please check your plan and billing details."
            )
        );
        assert!(!seen.content && seen.usage.is_none());
    }
}

#[test]
fn b2_openai_image_generation_counts_generated_images() {
    let u = usage_from_json(Dialect::OpenAi, OPENAI_IMAGE_GENERATION).unwrap();
    assert_eq!(
        u,
        Usage {
            images: 2,
            ..usage(50, 0, 0, 4160)
        }
    );
}

#[test]
fn w5_openai_responses_stream_usage() {
    let expected = ok(usage(25, 12, 0, 11));
    assert_every_split(Dialect::OpenAi, true, OPENAI_RESPONSES_STREAM, &expected);
}

#[test]
fn u2_openai_cached_input_counts_toward_tpm() {
    let u = usage_from_json(Dialect::OpenAi, OPENAI_CHAT_COMPLETION).unwrap();
    let r = rate_count(Dialect::OpenAi, &u);
    // What OpenAI itself counts: total_tokens of the body.
    assert_eq!((r.tpm, r.itpm, r.otpm), (1163, 1117, 46));
}

// ---- Anthropic ----------------------------------------------------------------------

#[test]
fn w5_anthropic_stream_message_delta_replaces_message_start() {
    let expected = ok(usage(472, 30_000, 1024, 89));
    assert_every_split(Dialect::Anthropic, true, ANTHROPIC_TOOL_STREAM, &expected);
}

#[test]
fn u2_anthropic_cache_reads_do_not_count_toward_itpm() {
    let u = watch(Dialect::Anthropic, true, [ANTHROPIC_TOOL_STREAM])
        .usage
        .unwrap();
    let r = rate_count(Dialect::Anthropic, &u);
    // input 472 + cache writes 1024; the 30 000 cache reads are excluded.
    assert_eq!((r.itpm, r.otpm, r.tpm), (1496, 89, 1585));
    // Everything still counts for the user's own token windows (W5).
    assert_eq!(u.total_tokens(), 472 + 30_000 + 1024 + 89);
}

#[test]
fn f3_anthropic_error_event_is_reported_and_usage_so_far_is_kept() {
    let expected = Seen {
        usage: Some(usage(25, 0, 0, 1)),
        content: true,
        error: Some("overloaded_error: Overloaded".into()),
        end: false,
    };
    assert_every_split(
        Dialect::Anthropic,
        true,
        ANTHROPIC_OVERLOADED_STREAM,
        &expected,
    );
}

#[test]
fn f3_anthropic_error_event_without_json_is_still_an_error() {
    let seen = watch(
        Dialect::Anthropic,
        true,
        [&b"event: error\ndata: upstream connect error\n\n"[..]],
    );
    assert_eq!(seen.error.as_deref(), Some("upstream error"));
}

#[test]
fn w5_anthropic_non_stream_message() {
    let u = usage_from_json(Dialect::Anthropic, ANTHROPIC_MESSAGE).unwrap();
    assert_eq!(u, usage(2095, 0, 2048, 503));
    assert_every_split(Dialect::Anthropic, false, ANTHROPIC_MESSAGE, &ok(u));
}

#[test]
fn f5_anthropic_error_body() {
    assert_eq!(usage_from_json(Dialect::Anthropic, ANTHROPIC_ERROR), None);
    let seen = watch(Dialect::Anthropic, false, [ANTHROPIC_ERROR]);
    assert_eq!(
        seen.error.as_deref(),
        Some(
            "rate_limit_error: This request would exceed the rate limit for your organization of 50,000 input tokens per minute."
        )
    );
}

// ---- Gemini -------------------------------------------------------------------------

#[test]
fn w5_gemini_stream_last_usage_wins_and_thoughts_count_as_output() {
    // promptTokenCount 1254 includes cachedContentTokenCount 1024; output = 25 + 300.
    let expected = ok(usage(230, 1024, 0, 325));
    assert_every_split(Dialect::Gemini, true, GEMINI_STREAM, &expected);
}

#[test]
fn w5_gemini_json_array_stream() {
    let expected = ok(usage(230, 1024, 0, 325));
    assert_every_split(Dialect::Gemini, true, GEMINI_STREAM_ARRAY, &expected);
    assert_eq!(
        usage_from_json(Dialect::Gemini, GEMINI_STREAM_ARRAY),
        expected.usage
    );
}

#[test]
fn w5_gemini_non_stream_usage() {
    let u = usage_from_json(Dialect::Gemini, GEMINI_GENERATE_CONTENT).unwrap();
    assert_eq!(u, usage(8, 0, 0, 12 + 1025));
    assert_every_split(Dialect::Gemini, false, GEMINI_GENERATE_CONTENT, &ok(u));
}

#[test]
fn b2_gemini_generated_images_are_counted() {
    let u = usage_from_json(Dialect::Gemini, GEMINI_IMAGE).unwrap();
    assert_eq!(
        u,
        Usage {
            images: 1,
            ..usage(14, 0, 0, 1300)
        }
    );
}

#[test]
fn w5_gemini_tool_use_prompt_tokens_are_input() {
    let body =
        br#"{"candidates":[],"usageMetadata":{"promptTokenCount":100,"cachedContentTokenCount":40,
        "toolUsePromptTokenCount":500,"candidatesTokenCount":7,"totalTokenCount":607}}"#;
    assert_eq!(
        usage_from_json(Dialect::Gemini, body),
        Some(usage(560, 40, 0, 7))
    );
}

#[test]
fn f5_gemini_error_body() {
    assert_eq!(usage_from_json(Dialect::Gemini, GEMINI_ERROR), None);
    let seen = watch(Dialect::Gemini, true, [GEMINI_ERROR]);
    assert_eq!(
        seen.error.as_deref(),
        Some("RESOURCE_EXHAUSTED: Resource has been exhausted (e.g. check quota).")
    );
}

#[test]
fn u2_gemini_counts_the_whole_prompt_toward_tpm() {
    let u = watch(Dialect::Gemini, true, [GEMINI_STREAM]).usage.unwrap();
    let r = rate_count(Dialect::Gemini, &u);
    assert_eq!((r.tpm, r.itpm, r.otpm), (1254, 1254, 325));
}

// ---- Every dialect ------------------------------------------------------------------

#[test]
fn w5_every_body_reads_the_same_at_every_split() {
    for (name, dialect, body) in BODIES {
        let expected = watch(*dialect, false, [*body]);
        assert!(expected.end, "{name}");
        for cut in 0..=body.len() {
            assert_eq!(
                watch(*dialect, false, [&body[..cut], &body[cut..]]),
                expected,
                "{name} split at {cut}"
            );
        }
    }
}

#[test]
fn w5_usage_so_far_for_a_stream_cut_short() {
    let text = std::str::from_utf8(ANTHROPIC_TOOL_STREAM).unwrap();
    let cut = text.find("event: content_block_stop").unwrap();
    let mut w = UsageWatcher::new(Dialect::Anthropic, true);
    w.observe(&ANTHROPIC_TOOL_STREAM[..cut]);
    assert_eq!(w.usage_so_far(), Some(usage(472, 30_000, 1024, 2)));
    assert!(w.saw_content() && !w.saw_end());
    assert_eq!(w.finish(), Some(usage(472, 30_000, 1024, 2)));

    // OpenAI reports nothing before its final chunk.
    let text = std::str::from_utf8(OPENAI_CHAT_STREAM).unwrap();
    let cut = text.find("\"usage\":{").unwrap();
    let mut w = UsageWatcher::new(Dialect::OpenAi, true);
    w.observe(&OPENAI_CHAT_STREAM[..cut]);
    assert_eq!(w.finish(), None);
    assert!(!w.saw_end());
}

#[test]
fn w5_a_truncated_final_event_does_not_count() {
    let text = std::str::from_utf8(OPENAI_CHAT_STREAM).unwrap();
    let cut = text.find("\"completion_tokens_details\"").unwrap();
    assert_eq!(
        watch(Dialect::OpenAi, true, [&OPENAI_CHAT_STREAM[..cut]]).usage,
        None
    );
    // But a complete last event without its blank line does.
    let end = text.find("\n\ndata: [DONE]").unwrap();
    assert_eq!(
        watch(Dialect::OpenAi, true, [&OPENAI_CHAT_STREAM[..end]]).usage,
        Some(usage(86, 1920, 0, 300))
    );
}

#[test]
fn w5_sse_line_endings_comments_and_multiline_data() {
    let stream = b": keep-alive\r\rid: 7\rretry: 1000\revent: chunk\rdata: {\"usage\":\r\ndata:{\"prompt_tokens\": 5,\n\
        data: \"completion_tokens\": 2}}\n\ndata\n\n";
    let expected = watch(Dialect::OpenAi, true, [&stream[..]]);
    assert_eq!(expected.usage, Some(usage(5, 0, 0, 2)));
    for cut in 0..=stream.len() {
        assert_eq!(
            watch(Dialect::OpenAi, true, [&stream[..cut], &stream[cut..]]),
            expected
        );
    }
}

#[test]
fn w5_garbage_after_an_events_json_voids_the_event() {
    let stream = b"data: {\"usage\":{\"prompt_tokens\":5}} x\n\n";
    assert_eq!(watch(Dialect::OpenAi, true, [&stream[..]]).usage, None);
}

#[test]
fn w5_usage_keys_inside_content_are_not_usage() {
    let body = br#"{"choices":[{"message":{"role":"assistant",
        "content":"{\"usage\":{\"prompt_tokens\":999}}",
        "tool_calls":[{"function":{"name":"f","arguments":"{}"}}],
        "usage":{"prompt_tokens":777}}}],
        "metadata":{"usage":{"prompt_tokens":888}},
        "usage":{"prompt_tokens":5,"completion_tokens":1}}"#;
    assert_eq!(
        usage_from_json(Dialect::OpenAi, body),
        Some(usage(5, 0, 0, 1))
    );
}

#[test]
fn w5_non_json_bodies_have_no_usage() {
    for body in [
        &b""[..],
        b"<html>502 Bad Gateway</html>",
        b"data: [DONE]\n\n",
        b"\xff\xfe",
    ] {
        for d in [
            Dialect::OpenAi,
            Dialect::Anthropic,
            Dialect::Gemini,
            Dialect::Native,
        ] {
            assert_eq!(usage_from_json(d, body), None);
        }
    }
}

#[test]
fn w5_every_stream_reads_the_same_in_any_chunking_after_finish_is_idempotent() {
    for (name, dialect, stream) in STREAMS {
        let mut w = UsageWatcher::new(*dialect, true);
        w.observe(stream);
        let first = w.finish();
        assert_eq!(w.finish(), first, "{name}");
        w.observe(b"data: {\"usage\":{\"prompt_tokens\":1}}\n\n");
        assert_eq!(w.finish(), first, "{name}: observe after finish is ignored");
        assert!(w.heap_bytes() < 16 * 1024, "{name}");
    }
}

// ---- What the scanner's caps keep from matching ---------------------------------------

/// A key longer than the scanner keeps (32 bytes) matches no rule, even when its first
/// chunk alone spelled one (`usage` here): its usage object is not the usage.
#[test]
fn w5_a_long_key_that_starts_like_usage_is_not_usage() {
    let body = br#"{"usage_of_a_field_whose_name_is_much_too_long":{"prompt_tokens":5,"completion_tokens":2},"choices":[{"message":{"content":"x"}}]}"#;
    let expected = Seen {
        usage: None,
        content: true,
        error: None,
        end: true,
    };
    assert_every_split(Dialect::OpenAi, false, body, &expected);
}

/// A token count longer than the scanner keeps (40 bytes) has no value: it is not read
/// as a truncated or saturated number.
#[test]
fn w5_a_number_longer_than_the_cap_counts_nothing() {
    let digits = "9".repeat(45);
    let body = format!(r#"{{"usage":{{"prompt_tokens":{digits},"completion_tokens":2}}}}"#);
    let u = usage_from_json(Dialect::OpenAi, body.as_bytes()).unwrap();
    assert_eq!(u, usage(0, 0, 0, 2));
    let expected = Seen {
        usage: Some(usage(0, 0, 0, 2)),
        content: false,
        error: None,
        end: true,
    };
    assert_every_split(Dialect::OpenAi, false, body.as_bytes(), &expected);
}

/// The id of the object an answer created (a Responses response, a video job) is kept
/// only whole: one longer than a request may name is not kept cut short.
#[test]
fn p6_an_object_id_longer_than_a_request_may_name_is_not_kept() {
    let id = |n: usize| "r".repeat(n);
    for (len, kept) in [(128, true), (129, false), (300, false)] {
        let body = format!(
            r#"{{"id":"{}","object":"response","status":"queued"}}"#,
            id(len)
        );
        let mut w = UsageWatcher::new(Dialect::OpenAi, false);
        w.observe(body.as_bytes());
        w.finish();
        let want = id(len);
        assert_eq!(
            w.object_id(),
            kept.then_some(want.as_str()),
            "id of {len} bytes"
        );
    }
}

/// OpenAI error bodies may give `code` as a number; it names the error when `type` is
/// missing — and only `error.code` does, not another number in the body.
#[test]
fn f5_openai_numeric_error_code_names_the_error() {
    let body = br#"{"error":{"message":"slow down","code":429,"param":7},"retry":3}"#;
    let seen = watch(Dialect::OpenAi, false, [&body[..]]);
    assert_eq!(seen.error.as_deref(), Some("429: slow down"));
}

/// Some error bodies put `code` and `message` at the top level (`{"type":"error", …}`):
/// those name the error, a `code` or `message` nested deeper does not.
#[test]
fn f5_top_level_code_and_message_name_the_error_nested_ones_do_not() {
    let body = br#"{"type":"error","code":"overloaded","message":"try later","details":{"code":"inner","message":"not this"}}"#;
    let seen = watch(Dialect::OpenAi, false, [&body[..]]);
    assert_eq!(seen.error.as_deref(), Some("overloaded: try later"));
    let body = br#"{"type":"error","message":{"text":"not this"},"code":{"value":"nor this"}}"#;
    let seen = watch(Dialect::OpenAi, false, [&body[..]]);
    assert_eq!(seen.error.as_deref(), Some("upstream error"));
}

/// Only a top-level string `id` names the object; an `id` object does not lend it its
/// fields.
#[test]
fn p6_only_a_top_level_string_id_names_the_object() {
    let mut w = UsageWatcher::new(Dialect::OpenAi, false);
    w.observe(br#"{"id":{"value":"resp_inner"},"object":"response"}"#);
    w.finish();
    assert_eq!(w.object_id(), None);
    let mut w = UsageWatcher::new(Dialect::OpenAi, false);
    w.observe(br#"{"object":"response","id":"resp_1","output":[{"id":"msg_1"}]}"#);
    w.finish();
    assert_eq!(w.object_id(), Some("resp_1"));
}

/// An image is counted once per generated entry (its `b64_json` or `url`), not once per
/// string the entry carries (`revised_prompt`) nor for strings elsewhere under `data`.
#[test]
fn b2_an_image_counts_once_whatever_else_its_entry_says() {
    let body = br#"{"created":1,"data":[{"b64_json":"AAAA","revised_prompt":"a cat"},{"url":"https://img/2","revised_prompt":"a dog"}],"usage":{"input_tokens":5,"output_tokens":10}}"#;
    let u = usage_from_json(Dialect::OpenAi, body).unwrap();
    assert_eq!(
        u,
        Usage {
            images: 2,
            ..usage(5, 0, 0, 10)
        }
    );
}

// ---- What a cut stream streamed (B7) --------------------------------------------------

/// Output tokens counted from `stream` read in chunks of `step` bytes.
fn streamed(dialect: Dialect, stream: &[u8], step: usize) -> u64 {
    let mut w = UsageWatcher::new(dialect, true);
    for c in stream.chunks(step) {
        w.observe(c);
    }
    w.streamed_output_tokens()
}

#[test]
fn b7_openai_chat_output_is_counted_from_text_and_tool_call_deltas() {
    // A role-only first chunk (no output), 5 + 6 bytes of text, then a tool call whose
    // name (3) and arguments (7 decoded bytes) are output too: 21 bytes, 7 tokens.
    let s = b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\" world\"}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"a\\\":1}\"}}]}}]}\n\n";
    for step in [1, 7, s.len()] {
        assert_eq!(streamed(Dialect::OpenAi, s, step), 7, "step {step}");
    }
}

#[test]
fn b7_a_cut_stream_counts_only_the_events_that_arrived_whole() {
    let s = b"data: {\"choices\":[{\"delta\":{\"content\":\"abcdefghi\"}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\"jklmnopqrstuvwxyz\"}}]}\n\n";
    let first = s.iter().position(|&b| b == b'\n').unwrap() + 2;
    // Cut anywhere inside the second event: only the first one's 9 bytes went out.
    for cut in first..s.len() - 1 {
        assert_eq!(streamed(Dialect::OpenAi, &s[..cut], 5), 3, "cut at {cut}");
    }
    assert_eq!(streamed(Dialect::OpenAi, s, 5), 9);
}

#[test]
fn b7_responses_text_deltas_count_and_audio_deltas_do_not() {
    // 9 bytes of text; the audio delta's 30 bytes of base64 are not text tokens.
    let s = b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\"}}\n\n\
event: response.output_text.delta\ndata: {\"delta\":\"abcdefghi\",\"type\":\"response.output_text.delta\"}\n\n\
event: response.audio.delta\ndata: {\"type\":\"response.audio.delta\",\"delta\":\"QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB\"}\n\n";
    assert_eq!(streamed(Dialect::OpenAi, s, 3), 3);
}

#[test]
fn b7_anthropic_output_is_counted_from_text_thinking_and_tool_input_deltas() {
    // 8 + 3 + 5 bytes: 6 tokens; the reported `output_tokens: 1` of message_start is
    // the provider's count so far, kept apart.
    let s = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"content\":[],\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi there\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hmm\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"x\\\":\"}}\n\n";
    assert_eq!(streamed(Dialect::Anthropic, s, 4), 6);
    let mut w = UsageWatcher::new(Dialect::Anthropic, true);
    w.observe(s);
    assert_eq!(w.usage_so_far().unwrap().output_tokens, 1);
}

#[test]
fn b7_gemini_output_is_counted_from_text_and_function_call_parts() {
    // 6 + 6 bytes of text and a function call's name (1) and string argument (3): 16
    // bytes, 6 tokens.
    let s = b"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"abcdef\"}]}}]}\n\n\
data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"ghijkl\"}]}}]}\n\n\
data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"f\",\"args\":{\"q\":\"abc\"}}}]}}]}\n\n";
    assert_eq!(streamed(Dialect::Gemini, s, 6), 6);
}

#[test]
fn b7_at_least_one_token_per_content_chunk() {
    // Five one-byte deltas: 5 bytes would be 2 tokens, but each delta is a token.
    let one = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
    let s: Vec<u8> = one.iter().copied().cycle().take(one.len() * 5).collect();
    assert_eq!(streamed(Dialect::OpenAi, &s, 11), 5);
}

#[test]
fn b7_a_cut_stream_without_reported_usage_takes_the_input_estimate() {
    // OpenAI reports usage only in its last chunk: a cut stream has none, so the
    // input is the gateway's estimate; 6 bytes of output are 2 tokens.
    let mut w = UsageWatcher::new(Dialect::OpenAi, true);
    w.observe(b"data: {\"choices\":[{\"delta\":{\"content\":\"abcdef\"}}]}\n\n");
    assert_eq!(w.usage_so_far(), None);
    let u = w.streamed_usage(120, 4096);
    assert_eq!((u.input_tokens, u.output_tokens, u.cost), (120, 2, None));
}
