//! The token estimate of a request's input, and its constants (W5, U2).
//!
//! Running a real BPE tokenizer on every request is too slow for the hot path, and only
//! OpenAI's tokenizers are public. [`inspect_request`](crate::inspect_request) instead
//! computes a cheap estimate while it parses the body it must parse anyway:
//!
//! ```text
//! input_tokens = REQUEST_OVERHEAD_TOKENS
//!              + MESSAGE_OVERHEAD_TOKENS × (messages + system/instructions fields)
//!              + ceil(text_bytes / BYTES_PER_TOKEN)
//!              + ceil(schema_bytes / BYTES_PER_TOKEN)
//!              + TOOLS_OVERHEAD_TOKENS                 (once, if the request has tools)
//!              + IMAGE_TOKENS × images + AUDIO_TOKENS × audio parts
//!              + VIDEO_TOKENS × videos + DOCUMENT_TOKENS × binary documents
//! ```
//!
//! - `text_bytes` is the UTF-8 length of every text the model reads: message contents
//!   (strings and text parts), the system prompt / `systemInstruction`, tool calls and
//!   tool results (their JSON size), thinking blocks, `prompt` / `input` /
//!   `instructions`, and the JSON size of any part of an unknown shape (so that
//!   unknown fields err high rather than vanish).
//! - `schema_bytes` is the compact JSON size of tool definitions (`tools`,
//!   `functions`) and of structured-output schemas (`response_format.json_schema`,
//!   `output_format`, `generationConfig.responseSchema`).
//! - Media are **not** counted by their bytes: a base64 image of 1 MB is
//!   [`IMAGE_TOKENS`], not 350 000 tokens. Media kinds come from the part's shape and
//!   MIME type (`image_url`, `input_audio`, `file`, Anthropic `image` / `document`
//!   blocks, Gemini `inlineData` / `fileData`).
//!
//! **This is an estimate.** At ~4 bytes per token for typical English and code, one
//! token per 3 bytes errs high by about a third; for CJK text (3 bytes per character,
//! roughly one token per character) it is close; text that tokenizes worse than 3
//! bytes per token (some scripts, emoji runs) and multi-page documents can be
//! underestimated. It only sizes the *reservation*: settlement replaces it with the
//! usage the provider reports (W5, U2), so an error here shifts a window briefly,
//! it is never billed.

/// The output tokens of `bytes` of output text seen in `chunks` content chunks: one
/// token per [`BYTES_PER_TOKEN`] bytes, and at least one per chunk (a provider streams
/// a token or more per delta). What a stream cut after content went out is charged
/// (B7): like the input estimate it errs high for English and code and is close for
/// CJK text; it is never charged below the provider's own count where the stream
/// reported one.
///
/// ```
/// use portcullis_dialects::estimate::output_tokens;
/// assert_eq!(output_tokens(10, 2), 4);
/// assert_eq!(output_tokens(3, 5), 5);
/// assert_eq!(output_tokens(0, 0), 0);
/// ```
pub fn output_tokens(bytes: u64, chunks: u64) -> u64 {
    bytes.div_ceil(BYTES_PER_TOKEN).max(chunks)
}

/// UTF-8 bytes of text per estimated token (a typical English token is ~4 bytes, so
/// this errs high).
pub const BYTES_PER_TOKEN: u64 = 3;

/// Fixed tokens added once per request (OpenAI primes every reply with 3 tokens).
pub const REQUEST_OVERHEAD_TOKENS: u64 = 3;

/// Fixed tokens per message, and per system prompt / instructions field (role and
/// separators; OpenAI documents 3–4).
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 4;

/// Fixed tokens added once when the request defines tools (Anthropic documents a tool-use
/// system prompt of up to 346 tokens; OpenAI wraps tool definitions similarly).
pub const TOOLS_OVERHEAD_TOKENS: u64 = 350;

/// Tokens per input image: the upper end of the providers' rules (Anthropic ≈ 1 600
/// for a 1.15-megapixel image; OpenAI 765 for a high-detail 1024×1024 image; Gemini 258
/// per 768-pixel tile).
pub const IMAGE_TOKENS: u64 = 1_600;

/// Tokens per input audio part (about one minute at Gemini's 32 tokens per second).
pub const AUDIO_TOKENS: u64 = 2_000;

/// Tokens per input video (about one minute at Gemini's ~263 tokens per second).
pub const VIDEO_TOKENS: u64 = 16_000;

/// Tokens per binary document (PDF or file part): one page at the upper end of
/// Anthropic's 1 500–3 000 tokens per page. Long documents are underestimated; plain-text
/// documents are counted as text instead.
pub const DOCUMENT_TOKENS: u64 = 3_000;

/// The maximum output used when the request sets none and the caller's per-model
/// default returns `None`.
pub const FALLBACK_MAX_OUTPUT_TOKENS: u64 = 4_096;

/// Upper bound of the number of choices / candidates a request may ask for (OpenAI's
/// `n` is at most 128); larger values are clamped.
pub const MAX_CHOICES: u64 = 128;

/// Longest accepted model name, in bytes; longer names are rejected.
pub const MAX_MODEL_LEN: usize = 256;

/// What the body walk counted; turned into tokens by [`Tally::input_tokens`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tally {
    pub(crate) text_bytes: u64,
    pub(crate) schema_bytes: u64,
    pub(crate) messages: u64,
    pub(crate) images: u64,
    pub(crate) audio: u64,
    pub(crate) videos: u64,
    pub(crate) documents: u64,
    pub(crate) has_tools: bool,
}

impl Tally {
    /// The estimate rule of the module documentation.
    pub(crate) fn input_tokens(&self) -> u64 {
        let per_token = |bytes: u64| bytes.div_ceil(BYTES_PER_TOKEN);
        REQUEST_OVERHEAD_TOKENS
            .saturating_add(MESSAGE_OVERHEAD_TOKENS.saturating_mul(self.messages))
            .saturating_add(per_token(self.text_bytes))
            .saturating_add(per_token(self.schema_bytes))
            .saturating_add(if self.has_tools {
                TOOLS_OVERHEAD_TOKENS
            } else {
                0
            })
            .saturating_add(IMAGE_TOKENS.saturating_mul(self.images))
            .saturating_add(AUDIO_TOKENS.saturating_mul(self.audio))
            .saturating_add(VIDEO_TOKENS.saturating_mul(self.videos))
            .saturating_add(DOCUMENT_TOKENS.saturating_mul(self.documents))
    }
}
