//! Vendor counting rules for upstream rate limits (U1, U2): which tokens of a usage
//! count toward a provider's TPM, ITPM and OTPM.
//!
//! | dialect | itpm | otpm | tpm |
//! |---|---|---|---|
//! | OpenAI (and native) | input + cached + cache writes | output | itpm + otpm |
//! | Anthropic | input + cache writes (cache **reads** excluded) | output | itpm + otpm |
//! | Gemini | input + cached + cache writes | output | itpm (input only) |
//!
//! - OpenAI: cached input counts toward TPM like any other input token.
//! - Anthropic: `cache_read_input_tokens` do not count toward ITPM; `input_tokens` and
//!   `cache_creation_input_tokens` do. (A few older models, marked in Anthropic's
//!   rate-limit table, do count cache reads; configure those channels with a lower
//!   ITPM.) Anthropic has no combined limit; `tpm` is given for channels configured
//!   with one.
//! - Gemini: Google documents TPM as *input* tokens per minute and documents no cache
//!   exemption, so every prompt token (cached included) counts toward `tpm` and
//!   `itpm`; output counts only toward `otpm`.

use crate::request::RequestFacts;
use tollgate_core::{Dialect, Usage};

/// Tokens counted toward a provider's per-minute token limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateCount {
    /// Toward a combined tokens-per-minute limit.
    pub tpm: u64,
    /// Toward an input-tokens-per-minute limit.
    pub itpm: u64,
    /// Toward an output-tokens-per-minute limit.
    pub otpm: u64,
}

/// What `usage` counts toward the limits of a `dialect` provider (settlement, U2).
///
/// ```
/// use tollgate_dialects::{rate_count, Dialect, Usage};
/// let u = Usage { input_tokens: 100, cached_input_tokens: 900, cache_write_tokens: 50, output_tokens: 10, ..Usage::default() };
/// assert_eq!(rate_count(Dialect::Anthropic, &u).itpm, 150);
/// assert_eq!(rate_count(Dialect::OpenAi, &u).tpm, 1060);
/// ```
pub fn rate_count(dialect: Dialect, usage: &Usage) -> RateCount {
    let all_input = usage
        .input_tokens
        .saturating_add(usage.cached_input_tokens)
        .saturating_add(usage.cache_write_tokens);
    let out = usage.output_tokens;
    match dialect {
        Dialect::OpenAi | Dialect::Native => RateCount {
            tpm: all_input.saturating_add(out),
            itpm: all_input,
            otpm: out,
        },
        Dialect::Anthropic => {
            let itpm = usage.input_tokens.saturating_add(usage.cache_write_tokens);
            RateCount {
                tpm: itpm.saturating_add(out),
                itpm,
                otpm: out,
            }
        }
        Dialect::Gemini => RateCount {
            tpm: all_input,
            itpm: all_input,
            otpm: out,
        },
    }
}

/// What to reserve toward the limits of a `dialect` provider before sending (U2): the
/// input estimate (cache reads cannot be known in advance, so all input is reserved and
/// settlement gives back what [`rate_count`] excludes) and the output upper bound
/// (providers, like OpenAI and Anthropic's OTPM, count `max_tokens` at request start).
pub fn rate_estimate(dialect: Dialect, facts: &RequestFacts) -> RateCount {
    let input = facts.input_tokens;
    let out = facts.output_upper_bound();
    match dialect {
        Dialect::Gemini => RateCount {
            tpm: input,
            itpm: input,
            otpm: out,
        },
        Dialect::OpenAi | Dialect::Native | Dialect::Anthropic => RateCount {
            tpm: input.saturating_add(out),
            itpm: input,
            otpm: out,
        },
    }
}
