//! The per-dialect data path of portcullis as plain, I/O-free code: what a request asks
//! for before it is sent, and what it used once the answer streams back.
//!
//! - [`inspect_request`]: model, streaming, a cheap input-token [`estimate`], maximum
//!   output, media, tools and structured output of an OpenAI, Anthropic or Gemini
//!   request (W5 reservation, U2, F11), or a client-facing [`RequestError`] (E4).
//! - [`usage_from_json`] and [`UsageWatcher`]: the provider-reported [`Usage`] of a
//!   buffered or streamed (SSE) answer, the first-chunk commit point (F4) and in-stream
//!   errors (F3), in constant memory ([`usage`] documents the mapping and the caps).
//! - [`rate_count`] / [`rate_estimate`]: the vendors' rules for what counts toward
//!   TPM / ITPM / OTPM (U2).
//! - [`error_facts`], [`RateSignal`], [`chunk_kind`]: a provider's error body, its
//!   rate-limit headers and the first frames of its answer, for the `portcullis` layers
//!   (failover F4 / F5, upstream cooldowns U3), which take them as injected functions.
//! - [`providers`]: one module per vendor holding all of the above for its wire format,
//!   plus its credential headers and the request rewrite that asks for stream usage.
//!
//! The input estimate errs high for typical English and code and is only a
//! reservation: settlement corrects it with the usage the provider reports (W5).
//!
//! ```
//! use portcullis_dialects::{inspect_request, rate_count, Dialect, UsageWatcher};
//!
//! let body = br#"{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,
//!   "messages":[{"role":"user","content":"Hello, Claude"}]}"#;
//! let facts = inspect_request(Dialect::Anthropic, "/v1/messages", body, &|_| None).unwrap();
//! assert_eq!(facts.token_demand(), facts.input_tokens + 1024);
//!
//! let mut watcher = UsageWatcher::new(Dialect::Anthropic, facts.stream);
//! watcher.observe(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":");
//! watcher.observe(b"{\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":500,\"output_tokens\":1}}}\n\n");
//! watcher.observe(b"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":42}}\n\n");
//! let usage = watcher.finish().unwrap();
//! assert_eq!(rate_count(Dialect::Anthropic, &usage).itpm, 10); // cache reads excluded
//! ```
#![warn(missing_docs)]
#![deny(unreachable_pub)]

pub mod chunk;
pub mod errors;
pub mod estimate;
mod json;
pub mod multipart;
pub mod providers;
pub mod rate;
pub mod request;
pub mod signal;
mod sse;
pub mod translate;
pub mod usage;

pub use chunk::{ChunkKind, chunk_kind};
pub use errors::{ErrorReader, error_facts};
pub use portcullis_core::{Dialect, Usage};
pub use rate::{
    RateCount, RateEstimates, rate_count, rate_estimate, rate_estimate_tokens, rate_estimates,
};
pub use request::{Operation, RequestError, RequestFacts, inspect_request, object_path};
pub use signal::{MAX_SIGNAL_MS, RateReader, RateSignal};
pub use usage::{UsageWatcher, usage_from_json};

#[cfg(test)]
mod tests {
    #[test]
    fn the_data_path_types_can_cross_threads() {
        fn send_sync<T: Send + Sync + 'static>() {}
        send_sync::<crate::UsageWatcher>();
        send_sync::<crate::RequestFacts>();
        send_sync::<crate::RequestError>();
    }
}
