//! What the first frames of a provider's successful answer are, for the failover
//! layer's first-chunk gate (F4): content commits the stream to its channel, a
//! preamble is held, an error event before any content is a failover. Each vendor's
//! events are told apart in its [`providers`](crate::providers) module.

pub use crate::providers::common::ChunkKind;

use crate::providers::{anthropic, gemini, openai};
use portcullis_core::Dialect;

/// Classifies one frame of a successful answer in `dialect`.
///
/// - Anthropic streams open with `message_start` (and `ping`): preamble; an `event:
///   error` before `content_block_*` is a failure (overload mid-stream is sent so).
/// - OpenAI and Gemini streams: a `data:` event holding an `"error"` object is a
///   failure; OpenAI's role-only first chunk is preamble; anything else is content.
/// - A JSON (non-stream) answer's first frame is content, or an error object.
pub fn chunk_kind(dialect: Dialect, frame: &[u8]) -> ChunkKind {
    // A JSON answer (not an event stream) opens with its document: an error object or
    // the answer itself, which nothing follows but its own rest. No search needed.
    if frame.first() == Some(&b'{') {
        let error = frame.starts_with(b"{\"error\"")
            || (dialect == Dialect::Anthropic && anthropic::json_error(frame));
        return if error {
            ChunkKind::Error
        } else {
            ChunkKind::Content
        };
    }
    match dialect {
        Dialect::Anthropic => anthropic::chunk_kind(frame),
        Dialect::OpenAi | Dialect::Native => openai::chunk_kind(frame),
        Dialect::Gemini => gemini::chunk_kind(frame),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f4_anthropic_preamble_content_and_early_error() {
        let start = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n";
        assert_eq!(chunk_kind(Dialect::Anthropic, start), ChunkKind::Preamble);
        let ping = b"event: ping\ndata: {\"type\": \"ping\"}\n\n";
        assert_eq!(chunk_kind(Dialect::Anthropic, ping), ChunkKind::Preamble);
        let delta = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\n";
        assert_eq!(chunk_kind(Dialect::Anthropic, delta), ChunkKind::Content);
        let err = b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        assert_eq!(chunk_kind(Dialect::Anthropic, err), ChunkKind::Error);
    }

    #[test]
    fn f4_a_json_answer_is_content_or_an_error_object_in_every_dialect() {
        let answer = br#"{"id":"x","choices":[{"message":{"role":"assistant","content":""}}]}"#;
        let error = br#"{"error":{"message":"overloaded","type":"server_error"}}"#;
        for d in [
            Dialect::OpenAi,
            Dialect::Anthropic,
            Dialect::Gemini,
            Dialect::Native,
        ] {
            assert_eq!(chunk_kind(d, answer), ChunkKind::Content, "{d:?}");
            assert_eq!(chunk_kind(d, error), ChunkKind::Error, "{d:?}");
        }
        let anthropic = br#"{"type":"error","error":{"type":"overloaded_error"}}"#;
        assert_eq!(chunk_kind(Dialect::Anthropic, anthropic), ChunkKind::Error);
        // Text that mentions an error inside a JSON answer is still the answer.
        let text = br#"{"content":[{"type":"text","text":"data: {"error"}"}]}"#;
        assert_eq!(chunk_kind(Dialect::Anthropic, text), ChunkKind::Content);
    }

    #[test]
    fn f4_generated_text_cannot_fake_an_error_event() {
        let text = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"event: error data: {\\\"error\\\"\"}}\n\n";
        assert_eq!(chunk_kind(Dialect::Anthropic, text), ChunkKind::Content);
        let oai = b"data: {\"choices\":[{\"delta\":{\"content\":\"data: {\\\"error\\\"\"}}]}\n\n";
        assert_eq!(chunk_kind(Dialect::OpenAi, oai), ChunkKind::Content);
    }

    #[test]
    fn f4_openai_and_gemini_error_events() {
        let err = b"data: {\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\"}}\n\n";
        assert_eq!(chunk_kind(Dialect::OpenAi, err), ChunkKind::Error);
        assert_eq!(chunk_kind(Dialect::Gemini, err), ChunkKind::Error);
        let ok = b"data: {\"id\":\"x\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n";
        assert_eq!(chunk_kind(Dialect::OpenAi, ok), ChunkKind::Content);
        let role = b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null}}]}\n\n";
        assert_eq!(chunk_kind(Dialect::OpenAi, role), ChunkKind::Preamble);
        let tool = b"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}\n\n";
        assert_eq!(chunk_kind(Dialect::OpenAi, tool), ChunkKind::Content);
        assert_eq!(
            chunk_kind(Dialect::OpenAi, b"data: [DONE]\n\n"),
            ChunkKind::Content
        );
        assert_eq!(
            chunk_kind(Dialect::Gemini, b"data: {\"candidates\":[]}"),
            ChunkKind::Content
        );
    }

    proptest::proptest! {
        #[test]
        fn f4_arbitrary_frames_never_panic(
            frame in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            tail in "(\"content\":\"|data: \\{\"error\"|event: error|content_block|message_start)?",
        ) {
            let mut f = frame;
            f.extend_from_slice(tail.as_bytes());
            for d in [Dialect::OpenAi, Dialect::Anthropic, Dialect::Gemini, Dialect::Native] {
                let _ = chunk_kind(d, &f);
            }
        }
    }

    #[test]
    fn f4_responses_stream_preamble_output_and_errors() {
        let ev = |t: &str, data: &str| format!("event: {t}\ndata: {data}\n\n").into_bytes();
        for (t, want) in [
            ("response.created", ChunkKind::Preamble),
            ("response.in_progress", ChunkKind::Preamble),
            ("response.output_item.added", ChunkKind::Preamble),
            ("response.content_part.added", ChunkKind::Preamble),
            ("response.output_text.delta", ChunkKind::Content),
            ("response.function_call_arguments.delta", ChunkKind::Content),
            ("response.output_item.done", ChunkKind::Content),
            ("response.completed", ChunkKind::Content),
            ("response.incomplete", ChunkKind::Content),
            ("response.failed", ChunkKind::Error),
        ] {
            let data =
                format!(r#"{{"type":"{t}","sequence_number":1,"response":{{"id":"resp_1"}}}}"#);
            assert_eq!(chunk_kind(Dialect::OpenAi, &ev(t, &data)), want, "{t}");
        }
        let error = ev(
            "error",
            r#"{"type":"error","code":"server_error","message":"boom"}"#,
        );
        assert_eq!(chunk_kind(Dialect::OpenAi, &error), ChunkKind::Error);
        // Text that quotes an error event inside a delta is content, not an error.
        let quoted = ev(
            "response.output_text.delta",
            r#"{"type":"response.output_text.delta","delta":"event: error \"type\":\"response.failed\""}"#,
        );
        assert_eq!(chunk_kind(Dialect::OpenAi, &quoted), ChunkKind::Content);
    }
}
