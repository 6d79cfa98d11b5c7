//! What a request asks for (demand) and what it turned out to use (usage).
//!
//! The demand is estimated before the call (rendered input + max output, images,
//! videos, a money upper bound) and reserved; the actual [`Usage`] reaches the layers
//! through a [`UsageRecorder`] that the request carries in its extensions: whatever
//! produces the response (the proxy's usage adapters, or the application's handler)
//! records into it before the response body ends, and each layer settles from it when
//! the body ends (W5, B2).

use crate::money::Money;
use std::sync::{Arc, Mutex};

/// The estimated need of one request, reserved at admission.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Demand {
    /// Input tokens of the rendered request plus the maximum output.
    pub tokens: u64,
    /// Images the request may produce or send.
    pub images: u64,
    /// Videos the request may produce.
    pub videos: u64,
    /// Upper bound of the request's cost in minor units.
    pub money: Money,
}

impl Demand {
    /// A demand of `tokens` tokens and nothing else.
    pub fn tokens(tokens: u64) -> Self {
        Self {
            tokens,
            ..Self::default()
        }
    }
}

/// What a request actually used, as reported by the provider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens not served from cache.
    pub input_tokens: u64,
    /// Input tokens read from the provider's prompt cache.
    pub cached_input_tokens: u64,
    /// Input tokens written to the provider's prompt cache.
    pub cache_write_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Images.
    pub images: u64,
    /// Videos.
    pub videos: u64,
    /// Cost in minor units, when the price table is known.
    pub cost: Option<Money>,
}

impl Usage {
    /// Every token the request consumed: this is what the user-policy token windows
    /// count.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cached_input_tokens)
            .saturating_add(self.cache_write_tokens)
            .saturating_add(self.output_tokens)
    }
}

/// A shared slot for the actual usage of one request.
///
/// Layers that settle put one in the request's extensions (reusing an existing one);
/// the code that produces the response calls [`record`](Self::record) once the usage is
/// known — at the latest before the response body yields its end.
#[derive(Clone, Debug, Default)]
pub struct UsageRecorder(Arc<Mutex<Option<Usage>>>);

impl UsageRecorder {
    /// A recorder holding nothing yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// Records (replaces) the usage.
    pub fn record(&self, usage: Usage) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(usage);
    }
    /// The usage recorded so far, if any.
    pub fn get(&self) -> Option<Usage> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_is_shared_between_clones() {
        let r = UsageRecorder::new();
        assert_eq!(r.get(), None);
        let r2 = r.clone();
        r2.record(Usage {
            input_tokens: 3,
            output_tokens: 4,
            cached_input_tokens: 2,
            ..Usage::default()
        });
        assert_eq!(r.get().unwrap().total_tokens(), 9);
    }
}
