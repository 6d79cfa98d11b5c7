//! What the vendors' modules share, and nothing else of the crate: the kinds of answer
//! frames (F4) and the scans that find them, a JSON text field, the bound on a rate
//! signal, and what the vendors' request rules answer. The dispatchers — [`chunk`],
//! [`errors`], [`signal`], [`rate`] and the request walk — call the vendors' modules;
//! the vendors' modules call only here, so knowledge flows one way.
//!
//! [`chunk`]: crate::chunk
//! [`errors`]: crate::errors
//! [`signal`]: crate::signal
//! [`rate`]: crate::rate

use memchr::memmem::Finder;
use serde_json::Value;

/// What one frame of a successful answer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkKind {
    /// Content: the stream is committed to its channel.
    Content,
    /// Preamble (Anthropic `message_start`, `ping`): held until content arrives.
    Preamble,
    /// An error event: the stream failed before its first content chunk.
    Error,
}

/// Whether a line of `frame` starts with the needle of `prefix`. At a line start only:
/// generated text inside a JSON string cannot hold a raw newline, so it cannot fake an
/// event line.
pub(crate) fn line_starts_with(frame: &[u8], prefix: &Finder) -> bool {
    frame.starts_with(prefix.needle())
        || prefix
            .find_iter(frame)
            .any(|at| at > 0 && frame[at - 1] == b'\n')
}

/// Whether `needle` occurs in `frame`.
pub(crate) fn has(frame: &[u8], needle: &Finder) -> bool {
    needle.find(frame).is_some()
}

/// A string field, copied.
pub(crate) fn text(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_owned)
}

/// Longest cooldown a provider header may impose (a garbled reset must not park a
/// channel for days).
pub const MAX_SIGNAL_MS: u64 = 24 * 3_600_000;

/// What a vendor's rules make of what the request walk read.
pub(crate) struct Rules {
    /// The maximum output the request sets, if any.
    pub(crate) max_output: Option<u64>,
    /// Choices generated in parallel (1..=`MAX_CHOICES`).
    pub(crate) choices: u64,
    /// Images the request asks to generate.
    pub(crate) requested_images: u64,
    /// Whether the provider will report usage as the request stands.
    pub(crate) usage_reported: bool,
}

/// Choices from an optional count: default 1, clamped to 1..=`MAX_CHOICES`.
pub(crate) fn clamp_choices(n: Option<u64>) -> u64 {
    n.unwrap_or(1).clamp(1, crate::estimate::MAX_CHOICES)
}

/// Every input token: fresh, cached and cache writes.
pub(crate) fn all_input(usage: &portcullis_core::Usage) -> u64 {
    usage
        .input_tokens
        .saturating_add(usage.cached_input_tokens)
        .saturating_add(usage.cache_write_tokens)
}
