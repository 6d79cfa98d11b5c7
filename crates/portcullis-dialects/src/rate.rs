//! Vendor counting rules for upstream rate limits (U1, U2): which tokens of a usage
//! count toward a provider's TPM, ITPM and OTPM. The rules live in the
//! [`providers`](crate::providers) modules; this is their dispatch.
//!
//! | dialect | itpm | otpm | tpm |
//! |---|---|---|---|
//! | OpenAI (and native) | input + cached + cache writes | output | itpm + otpm |
//! | Anthropic | input + cache writes (cache **reads** excluded) | output | itpm + otpm |
//! | Gemini | input + cached + cache writes | output | itpm (input only) |

use crate::providers::{anthropic, gemini, openai};
use crate::request::RequestFacts;
pub use portcullis_core::upstream::{RateCount, RateEstimates};
use portcullis_core::{Dialect, Usage};

/// What `usage` counts toward the limits of a `dialect` provider (settlement, U2).
///
/// ```
/// use portcullis_dialects::{Dialect, Usage, rate_count};
/// let u = Usage { input_tokens: 100, cached_input_tokens: 900, cache_write_tokens: 50, output_tokens: 10, ..Usage::default() };
/// assert_eq!(rate_count(Dialect::Anthropic, &u).itpm, 150);
/// assert_eq!(rate_count(Dialect::OpenAi, &u).tpm, 1060);
/// ```
pub fn rate_count(dialect: Dialect, usage: &Usage) -> RateCount {
    match dialect {
        Dialect::OpenAi | Dialect::Native => openai::rate_count(usage),
        Dialect::Anthropic => anthropic::rate_count(usage),
        Dialect::Gemini => gemini::rate_count(usage),
    }
}

/// What to reserve toward the limits of a `dialect` provider before sending (U2), from
/// the input estimate and the output upper bound: all input is reserved (cache reads
/// cannot be known in advance; settlement gives back what [`rate_count`] excludes),
/// and the output bound too (OpenAI and Anthropic's OTPM count `max_tokens` at request
/// start).
pub fn rate_estimate_tokens(dialect: Dialect, input: u64, output_bound: u64) -> RateCount {
    match dialect {
        Dialect::OpenAi | Dialect::Native => openai::rate_estimate(input, output_bound),
        Dialect::Anthropic => anthropic::rate_estimate(input, output_bound),
        Dialect::Gemini => gemini::rate_estimate(input, output_bound),
    }
}

/// [`rate_estimate_tokens`] of a request's input estimate and output upper bound.
pub fn rate_estimate(dialect: Dialect, facts: &RequestFacts) -> RateCount {
    rate_estimate_tokens(dialect, facts.input_tokens, facts.output_upper_bound())
}

/// [`rate_estimate`] under every vendor's rules, for a request whose candidates may
/// speak any of them (a translated request, X1).
pub fn rate_estimates(facts: &RequestFacts) -> RateEstimates {
    let (input, output) = (facts.input_tokens, facts.output_upper_bound());
    RateEstimates {
        openai: rate_estimate_tokens(Dialect::OpenAi, input, output),
        anthropic: rate_estimate_tokens(Dialect::Anthropic, input, output),
        gemini: rate_estimate_tokens(Dialect::Gemini, input, output),
    }
}
