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
use tollgate_core::Dialect;
pub use tollgate_core::upstream::{RateCount, rate_count};

/// What to reserve toward the limits of a `dialect` provider before sending (U2): the
/// input estimate (cache reads cannot be known in advance, so all input is reserved and
/// settlement gives back what [`rate_count`] excludes) and the output upper bound
/// (providers, like OpenAI and Anthropic's OTPM, count `max_tokens` at request start).
pub fn rate_estimate(dialect: Dialect, facts: &RequestFacts) -> RateCount {
    tollgate_core::upstream::rate_estimate(dialect, facts.input_tokens, facts.output_upper_bound())
}
