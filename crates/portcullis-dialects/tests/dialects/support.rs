//! Fixtures and helpers shared by the tests.

use portcullis_dialects::{Dialect, Usage, UsageWatcher};

macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/dialects/fixtures/",
            $name
        ))
    };
}

pub const OPENAI_CHAT_STREAM: &[u8] = fixture!("openai_chat_stream.sse");
pub const OPENAI_TOOL_CALL_STREAM: &[u8] = fixture!("openai_tool_call_stream.sse");
pub const OPENAI_STREAM_ERROR: &[u8] = fixture!("openai_stream_error.sse");
pub const OPENAI_CHAT_COMPLETION: &[u8] = fixture!("openai_chat_completion.json");
pub const OPENAI_ERROR: &[u8] = fixture!("openai_error.json");
pub const OPENAI_IMAGE_GENERATION: &[u8] = fixture!("openai_image_generation.json");
pub const OPENAI_RESPONSES_STREAM: &[u8] = fixture!("openai_responses_stream.sse");
pub const ANTHROPIC_TOOL_STREAM: &[u8] = fixture!("anthropic_tool_stream.sse");
pub const ANTHROPIC_OVERLOADED_STREAM: &[u8] = fixture!("anthropic_overloaded_stream.sse");
pub const ANTHROPIC_MESSAGE: &[u8] = fixture!("anthropic_message.json");
pub const ANTHROPIC_ERROR: &[u8] = fixture!("anthropic_error.json");
pub const GEMINI_STREAM: &[u8] = fixture!("gemini_stream.sse");
pub const GEMINI_STREAM_ARRAY: &[u8] = fixture!("gemini_stream_array.json");
pub const GEMINI_GENERATE_CONTENT: &[u8] = fixture!("gemini_generate_content.json");
pub const GEMINI_IMAGE: &[u8] = fixture!("gemini_image.json");
pub const GEMINI_ERROR: &[u8] = fixture!("gemini_error.json");
pub const OPENAI_REQUEST: &[u8] = fixture!("openai_request.json");
pub const ANTHROPIC_REQUEST: &[u8] = fixture!("anthropic_request.json");
pub const GEMINI_REQUEST: &[u8] = fixture!("gemini_request.json");

/// Every streamed fixture: (name, dialect, bytes).
pub const STREAMS: &[(&str, Dialect, &[u8])] = &[
    ("openai_chat_stream", Dialect::OpenAi, OPENAI_CHAT_STREAM),
    (
        "openai_tool_call_stream",
        Dialect::OpenAi,
        OPENAI_TOOL_CALL_STREAM,
    ),
    ("openai_stream_error", Dialect::OpenAi, OPENAI_STREAM_ERROR),
    (
        "openai_responses_stream",
        Dialect::OpenAi,
        OPENAI_RESPONSES_STREAM,
    ),
    (
        "anthropic_tool_stream",
        Dialect::Anthropic,
        ANTHROPIC_TOOL_STREAM,
    ),
    (
        "anthropic_overloaded_stream",
        Dialect::Anthropic,
        ANTHROPIC_OVERLOADED_STREAM,
    ),
    ("gemini_stream", Dialect::Gemini, GEMINI_STREAM),
    ("gemini_stream_array", Dialect::Gemini, GEMINI_STREAM_ARRAY),
];

/// Every non-streamed fixture: (name, dialect, bytes).
pub const BODIES: &[(&str, Dialect, &[u8])] = &[
    (
        "openai_chat_completion",
        Dialect::OpenAi,
        OPENAI_CHAT_COMPLETION,
    ),
    ("openai_error", Dialect::OpenAi, OPENAI_ERROR),
    (
        "openai_image_generation",
        Dialect::OpenAi,
        OPENAI_IMAGE_GENERATION,
    ),
    ("anthropic_message", Dialect::Anthropic, ANTHROPIC_MESSAGE),
    ("anthropic_error", Dialect::Anthropic, ANTHROPIC_ERROR),
    (
        "gemini_generate_content",
        Dialect::Gemini,
        GEMINI_GENERATE_CONTENT,
    ),
    ("gemini_image", Dialect::Gemini, GEMINI_IMAGE),
    ("gemini_error", Dialect::Gemini, GEMINI_ERROR),
];

/// A request fixture with its `@BASE64@` placeholders replaced by `len` bytes of base64.
pub fn with_base64(template: &[u8], len: usize) -> Vec<u8> {
    let b64: String = "iVBORw0KGgoAAAANSUhEUgAA/+"
        .chars()
        .cycle()
        .take(len)
        .collect();
    String::from_utf8(template.to_vec())
        .unwrap()
        .replace("@BASE64@", &b64)
        .into_bytes()
}

/// Everything a watcher reports at the end of a body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub usage: Option<Usage>,
    pub content: bool,
    pub error: Option<String>,
    pub end: bool,
}

pub fn seen(w: &mut UsageWatcher) -> Seen {
    let usage = w.finish();
    Seen {
        usage,
        content: w.saw_content(),
        error: w.stream_error().map(str::to_owned),
        end: w.saw_end(),
    }
}

/// Watches `chunks` in order.
pub fn watch<'a>(
    dialect: Dialect,
    streaming: bool,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Seen {
    let mut w = UsageWatcher::new(dialect, streaming);
    for c in chunks {
        w.observe(c);
    }
    seen(&mut w)
}

/// Asserts that every split of `bytes` in two, and one-byte chunks, give `expected`.
pub fn assert_every_split(dialect: Dialect, streaming: bool, bytes: &[u8], expected: &Seen) {
    for cut in 0..=bytes.len() {
        let got = watch(dialect, streaming, [&bytes[..cut], &bytes[cut..]]);
        assert_eq!(&got, expected, "split at byte {cut}");
    }
    let got = watch(dialect, streaming, bytes.chunks(1));
    assert_eq!(&got, expected, "one-byte chunks");
}
