//! Each provider's wire knowledge in one module (first-party code, one file per
//! provider API): [`openai`] (which the native format
//! shares), [`anthropic`] and [`gemini`]. A module holds, for its vendor:
//!
//! | knowledge | used by |
//! |---|---|
//! | request inspection rules (maximum output, choices, whether usage is reported; Gemini: model and method from the path) | [`inspect_request`](crate::inspect_request) |
//! | the error body's fields | [`error_facts`](crate::error_facts) → the failover classifier (F5) |
//! | rate-limit headers and their reset formats | [`RateSignal::read`](crate::signal::RateSignal::read) → upstream cooldowns (U3) |
//! | first-chunk classification of a successful answer | [`chunk_kind`](crate::chunk_kind) → failover's first-chunk gate (F4) |
//! | the credential headers of the upstream request, and the query parameters it may keep | [`inject_credential`] / [`upstream_query_allowed`] → the proxy's forwarding |
//! | the request rewrite that makes a stream report its usage | [`ask_for_stream_usage`] → the proxy's preparation (B4) |
//! | what counts toward TPM / ITPM / OTPM | [`rate_count`](crate::rate_count) / [`rate_estimate`](crate::rate_estimate) → upstream settlement (U2) |
//!
//! This module only dispatches on [`Dialect`]; [`Dialect::Native`] is read as OpenAI.
//!
//! Where the knowledge is used: `portcullis-dialects` sits above `portcullis-core` next to
//! `portcullis` (the layers), and `portcullis` depends on it (no cycle: this crate depends
//! on core only). That way a user of the `portcullis` crate alone gets the vendors'
//! error bodies and rate headers by default, and the layers still take the functions
//! as injected values (`FailoverLayer::error_reader`,
//! `UpstreamLimitLayer::rate_reader`, the failover `ChunkClassifier`) so a
//! gateway for another vendor can plug in its own.
//!
//! The request walk itself ([`request`](crate::request)) is shared: every dialect's
//! body is read with one key table, because clients mix fields across the vendors'
//! formats (an OpenAI-compatible server sent `system`, a Gemini body in snake_case)
//! and the estimate must count them all; only the rules applied to what was read
//! differ per vendor, and those live here.

pub mod anthropic;
pub(crate) mod common;
pub mod gemini;
pub mod openai;

use crate::request::read::Read;
use common::Rules;
use http::{HeaderMap, HeaderValue};
use portcullis_core::Dialect;

/// Puts the channel's credential `cred` on the upstream request headers `h` the way
/// the `dialect` vendor expects it.
pub fn inject_credential(dialect: Dialect, cred: HeaderValue, h: &mut HeaderMap) {
    match dialect {
        Dialect::OpenAi | Dialect::Native => openai::inject_credential(cred, h),
        Dialect::Anthropic => anthropic::inject_credential(cred, h),
        Dialect::Gemini => gemini::inject_credential(cred, h),
    }
}

/// Prefixes of the vendors' rate-limit headers (OpenAI's `x-ratelimit-*`, Anthropic's
/// `anthropic-ratelimit-*`; Gemini sends none).
pub const RATE_LIMIT_HEADER_PREFIXES: [&str; 2] =
    [openai::RATE_HEADER_PREFIX, anthropic::RATE_HEADER_PREFIX];

/// Whether a query parameter `name` of the client's request is passed to a `dialect`
/// provider (only those its API needs: never a credential or an account selector).
pub fn upstream_query_allowed(dialect: Dialect, name: &str) -> bool {
    match dialect {
        Dialect::OpenAi | Dialect::Native => openai::QUERY_PARAMS.contains(&name),
        Dialect::Anthropic => anthropic::QUERY_PARAMS.contains(&name),
        Dialect::Gemini => gemini::QUERY_PARAMS.contains(&name),
    }
}

/// The request body rewritten so that the provider reports usage in a streamed answer,
/// when the `dialect` needs asking and the request does not ask yet (`usage_reported`
/// false); `None` when nothing is to change. Only OpenAI needs it: Anthropic and
/// Gemini always report usage.
pub fn ask_for_stream_usage(
    dialect: Dialect,
    stream: bool,
    usage_reported: bool,
    body: &[u8],
) -> Option<Vec<u8>> {
    // Only OpenAI proper: the native format is the gateway's own, whose servers
    // report usage without being asked.
    (dialect == Dialect::OpenAi && stream && !usage_reported)
        .then(|| openai::ask_for_stream_usage(body))
        .flatten()
}

/// The `dialect` vendor's rules applied to what the request walk read.
pub(crate) fn request_rules(
    dialect: Dialect,
    read: &Read,
    path: &str,
    stream: bool,
) -> Result<Rules, crate::request::error::RequestError> {
    match dialect {
        Dialect::OpenAi | Dialect::Native => Ok(openai::rules(read, path, stream)),
        Dialect::Anthropic => anthropic::rules(read),
        Dialect::Gemini => Ok(gemini::rules(read)),
    }
}
