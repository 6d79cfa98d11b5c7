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

/// The model a request is for (request extension), for usage records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelId(pub Arc<str>);

/// How much is known about what a request used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsageReport {
    /// The provider's final usage figures: settle with them.
    Complete(Usage),
    /// Only part of the answer was seen (a stream cut short, an in-stream error):
    /// the figures are a lower bound; billing leaves the attempt for reconciliation
    /// (B4, F3).
    Partial(Usage),
    /// A stream cut after its content went out (by the client or the upstream): what
    /// the gateway saw streamed — the input as the provider reported it, else as
    /// estimated, and the output counted from the deltas, never below the provider's
    /// own count so far. Billing charges it at once, with its price (B7).
    Streamed(Usage),
    /// The request may have reached the provider but its outcome is unknown (timeout,
    /// connection lost): never written as zero (B4).
    Unknown,
}

impl UsageReport {
    /// The usage figures, complete or partial.
    pub fn usage(&self) -> Option<Usage> {
        match self {
            UsageReport::Complete(u) | UsageReport::Partial(u) | UsageReport::Streamed(u) => {
                Some(*u)
            }
            UsageReport::Unknown => None,
        }
    }
}

#[derive(Debug, Default)]
struct Recorded {
    report: Option<UsageReport>,
    channel: Option<Arc<str>>,
    /// The provider's id of the model, when the channel knows it by another name.
    upstream_model: Option<Arc<str>>,
    /// The provider's object the answer named (B7).
    provider_object: Option<Arc<str>>,
    /// The request's recorder when this one serves one attempt of it.
    parent: Option<UsageRecorder>,
}

/// A shared slot for the actual usage of one request.
///
/// Layers that settle put one in the request's extensions (reusing an existing one);
/// the code that produces the response calls [`record`](Self::record) once the usage is
/// known — at the latest before the response body yields its end — or
/// [`record_partial`](Self::record_partial) / [`mark_unknown`](Self::mark_unknown)
/// when the answer was cut short.
#[derive(Clone, Debug, Default)]
pub struct UsageRecorder(Arc<Mutex<Recorded>>);

impl UsageRecorder {
    /// A recorder holding nothing yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// A recorder for one attempt of a request (failover, F1): the attempt's layers
    /// settle from its own figures, and every report is passed on to `parent` too, so
    /// the request's layers see the last attempt's usage. [`clear`](Self::clear) is not
    /// passed on: an earlier attempt may have reached the provider.
    pub fn child_of(parent: &UsageRecorder) -> Self {
        Self(Arc::new(Mutex::new(Recorded {
            parent: Some(parent.clone()),
            ..Recorded::default()
        })))
    }
    fn with<R>(&self, f: impl FnOnce(&mut Recorded) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
    fn report_as(&self, report: UsageReport) {
        let parent = self.with(|r| {
            r.report = Some(report);
            r.parent.clone()
        });
        if let Some(p) = parent {
            p.report_as(report);
        }
    }
    /// Records the provider's final usage (replaces anything recorded before).
    pub fn record(&self, usage: Usage) {
        self.report_as(UsageReport::Complete(usage));
    }
    /// Records what was seen of a usage that did not complete.
    pub fn record_partial(&self, usage: Usage) {
        self.report_as(UsageReport::Partial(usage));
    }
    /// Records what a stream cut after its content went out streamed (see
    /// [`UsageReport::Streamed`]).
    pub fn record_streamed(&self, usage: Usage) {
        self.report_as(UsageReport::Streamed(usage));
    }
    /// The outcome is unknown: keep everything reserved. Call it just before the
    /// request leaves for the provider, so a request dropped from then on is never
    /// taken for one that was not sent.
    pub fn mark_unknown(&self) {
        self.report_as(UsageReport::Unknown);
    }
    /// Nothing reached the provider after all (a refused connection): forget any mark.
    pub fn clear(&self) {
        self.with(|r| r.report = None);
    }
    /// Names the channel that served the request (for usage records).
    pub fn set_channel(&self, channel: Arc<str>) {
        let parent = self.with(|r| {
            r.channel = Some(channel.clone());
            r.parent.clone()
        });
        if let Some(p) = parent {
            p.set_channel(channel);
        }
    }
    /// Names the provider's id of the model the channel served it under, or `None`
    /// when that is the public name (for usage records).
    pub fn set_upstream_model(&self, model: Option<Arc<str>>) {
        let parent = self.with(|r| {
            r.upstream_model = model.clone();
            r.parent.clone()
        });
        if let Some(p) = parent {
            p.set_upstream_model(model);
        }
    }
    /// Names the provider's object the answer created, as the path it is retrieved at
    /// under the channel's base URL (e.g. `/v1/responses/resp_…`): what an attempt whose
    /// outcome stays unknown can later be resolved from (B7).
    pub fn set_provider_object(&self, object: Option<Arc<str>>) {
        let parent = self.with(|r| {
            r.provider_object = object.clone();
            r.parent.clone()
        });
        if let Some(p) = parent {
            p.set_provider_object(object);
        }
    }
    /// The provider's object the answer named, if any.
    pub fn provider_object(&self) -> Option<Arc<str>> {
        self.with(|r| r.provider_object.clone())
    }
    /// The provider's id of the model, when it differs from the public name.
    pub fn upstream_model(&self) -> Option<Arc<str>> {
        self.with(|r| r.upstream_model.clone())
    }
    /// The usage figures recorded so far (complete or partial), if any.
    pub fn get(&self) -> Option<Usage> {
        self.with(|r| r.report.and_then(|x| x.usage()))
    }
    /// Everything known about the outcome; `None` if nothing was recorded.
    pub fn report(&self) -> Option<UsageReport> {
        self.with(|r| r.report)
    }
    /// The channel, if one was named.
    pub fn channel(&self) -> Option<Arc<str>> {
        self.with(|r| r.channel.clone())
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
        r.record_partial(Usage::default());
        assert!(matches!(r2.report(), Some(UsageReport::Partial(_))));
        r.record_streamed(Usage {
            output_tokens: 5,
            ..Usage::default()
        });
        assert_eq!(r2.report(), Some(UsageReport::Streamed(r.get().unwrap())));
        assert_eq!(r2.get().unwrap().output_tokens, 5);
        r.mark_unknown();
        assert_eq!(r2.get(), None);
    }

    #[test]
    fn f1_an_attempt_recorder_passes_its_reports_and_channel_to_the_request() {
        let request = UsageRecorder::new();
        let first = UsageRecorder::child_of(&request);
        first.set_channel("a".into());
        first.mark_unknown();
        assert_eq!(request.report(), Some(UsageReport::Unknown));
        assert_eq!(request.channel().as_deref(), Some("a"));
        // The next attempt starts with nothing of its own; the request sees the last
        // attempt's figures and channel, each attempt keeps its own.
        let second = UsageRecorder::child_of(&request);
        assert_eq!((second.report(), second.channel()), (None, None));
        second.set_channel("b".into());
        second.record(Usage {
            output_tokens: 7,
            ..Usage::default()
        });
        assert_eq!(request.get().map(|u| u.output_tokens), Some(7));
        assert_eq!(request.channel().as_deref(), Some("b"));
        assert_eq!(first.report(), Some(UsageReport::Unknown));
        assert_eq!(first.channel().as_deref(), Some("a"));
    }

    #[test]
    fn b4_an_attempt_that_never_left_is_cleared_but_the_request_keeps_its_mark() {
        let request = UsageRecorder::new();
        UsageRecorder::child_of(&request).mark_unknown();
        // The second attempt is marked before it leaves, then its connection is
        // refused: nothing of it reached the provider, but the first attempt may have.
        let second = UsageRecorder::child_of(&request);
        second.mark_unknown();
        second.clear();
        assert_eq!(second.report(), None);
        assert_eq!(request.report(), Some(UsageReport::Unknown));
    }
}
