//! Provider rate signals (U3): the rate-limit headers the vendors send (their names and
//! reset formats live in [`providers::openai`](crate::providers::openai) and
//! [`providers::anthropic`](crate::providers::anthropic); Gemini sends none) and
//! `retry-after`, read into one [`RateSignal`]; and the cooldown they call for.
//!
//! Every vendor's headers are read on every answer: a header a vendor does not send is
//! simply absent, and OpenAI-compatible servers of other vendors send OpenAI's.

use crate::providers::{anthropic, openai};
use http::{HeaderMap, HeaderName};
use std::time::SystemTime;

/// What a provider answer says about its limits. Times are milliseconds from now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateSignal {
    /// The HTTP status.
    pub status: u16,
    /// `retry-after` (seconds or HTTP date), or OpenAI's `retry-after-ms`.
    pub retry_after_ms: Option<u64>,
    /// A limit the provider reports as exhausted (remaining 0), with its reset: the
    /// latest such reset.
    pub exhausted_until_ms: Option<u64>,
}

pub use crate::providers::common::MAX_SIGNAL_MS;

/// Reads a provider answer's rate signal: the injection point's type (the upstream
/// limit layer's `rate_reader`); [`RateSignal::read`] is the default.
pub type RateReader = fn(u16, &HeaderMap, SystemTime) -> RateSignal;

impl RateSignal {
    /// Reads `status` and `headers` of a provider answer received at wall time `now`.
    pub fn read(status: u16, headers: &HeaderMap, now: SystemTime) -> Self {
        // Most answers carry no signal at all: one pass over the names (no hashing)
        // spares the eight lookups below.
        if !headers.keys().any(|n| may_signal(n.as_str())) {
            return Self {
                status,
                ..Self::default()
            };
        }
        let text = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
        let retry_after_ms = text(&openai::RETRY_AFTER_MS)
            .and_then(openai::retry_after_ms)
            .or_else(|| text(&http::header::RETRY_AFTER).and_then(|v| retry_after(v, now)))
            .map(|v| v.min(MAX_SIGNAL_MS));
        let mut exhausted_until_ms = None;
        for (remaining, reset) in openai::RATE_HEADERS.iter().chain(&anthropic::RATE_HEADERS) {
            let Some(left) = text(remaining).and_then(|v| v.trim().parse::<u64>().ok()) else {
                continue;
            };
            if left > 0 {
                continue;
            }
            // Remaining 0 with an unreadable reset: wait a second rather than not at all.
            let until = text(reset)
                .and_then(|v| reset_in(v, now))
                .unwrap_or(1_000)
                .min(MAX_SIGNAL_MS);
            exhausted_until_ms = Some(exhausted_until_ms.map_or(until, |u: u64| u.max(until)));
        }
        Self {
            status,
            retry_after_ms,
            exhausted_until_ms,
        }
    }

    /// The cooldown this answer calls for on its scope (U3), in ms from now:
    /// - a 429: the provider wins over the local model; cool for its `retry-after`,
    ///   else until the exhausted limit resets, else `default_ms`;
    /// - any other answer reporting a limit exhausted: stop sending until it resets;
    /// - otherwise none.
    pub fn cooldown_ms(&self, default_ms: u64) -> Option<u64> {
        if self.status == 429 {
            return Some(
                self.retry_after_ms
                    .or(self.exhausted_until_ms)
                    .unwrap_or(default_ms)
                    .max(1),
            );
        }
        self.exhausted_until_ms.filter(|ms| *ms > 0)
    }
}

/// Whether a header named `name` may be one [`RateSignal::read`] reads (a superset:
/// every `Retry-After*`, OpenAI `x-ratelimit-remaining-*` and Anthropic
/// `anthropic-ratelimit-*` name).
fn may_signal(name: &str) -> bool {
    name.starts_with("retry-after")
        || name.starts_with("x-ratelimit-remaining-")
        || name.starts_with("anthropic-ratelimit-")
}

/// `retry-after` (RFC 9110): delta seconds (fractions accepted) or an HTTP date.
fn retry_after(v: &str, now: SystemTime) -> Option<u64> {
    let v = v.trim();
    if let Ok(s) = v.parse::<f64>() {
        return (s.is_finite() && s >= 0.0).then(|| (s * 1000.0).ceil() as u64);
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).map_or(0, |d| d.as_millis() as u64))
}

/// A reset value in ms from `now`: an OpenAI duration or an Anthropic RFC 3339 instant
/// (either is accepted on any vendor's header).
fn reset_in(v: &str, now: SystemTime) -> Option<u64> {
    let v = v.trim();
    openai::reset_ms(v).or_else(|| anthropic::reset_ms(v, now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    /// The first pass that skips answers without a signal lets every header the
    /// reading uses through.
    #[test]
    fn u3_every_signal_header_passes_the_first_pass() {
        let read = openai::RATE_HEADERS
            .into_iter()
            .chain(anthropic::RATE_HEADERS)
            .map(|(remaining, _)| remaining)
            .chain([openai::RETRY_AFTER_MS, http::header::RETRY_AFTER]);
        for name in read {
            assert!(may_signal(name.as_str()), "{name}");
        }
        assert!(!may_signal("x-request-id"));
        assert!(!may_signal("x-ratelimit-limit-requests"));
        // An answer with other headers only has no signal.
        let quiet = headers(&[("x-request-id", "r1"), ("content-type", "text/plain")]);
        assert_eq!(
            RateSignal::read(200, &quiet, SystemTime::now()),
            RateSignal {
                status: 200,
                ..RateSignal::default()
            }
        );
        assert_eq!(
            RateSignal::read(429, &headers(&[("retry-after", "2")]), SystemTime::now())
                .retry_after_ms,
            Some(2_000)
        );
    }

    #[test]
    fn u3_remaining_zero_cools_until_reset() {
        let now = SystemTime::now();
        let h = headers(&[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "6m0s"),
            ("x-ratelimit-remaining-tokens", "5000"),
            ("x-ratelimit-reset-tokens", "1s"),
        ]);
        let s = RateSignal::read(200, &h, now);
        assert_eq!(s.exhausted_until_ms, Some(360_000));
        assert_eq!(s.cooldown_ms(1000), Some(360_000));
        let fine = RateSignal::read(
            200,
            &headers(&[("x-ratelimit-remaining-requests", "3")]),
            now,
        );
        assert_eq!(fine.cooldown_ms(1000), None);
    }

    #[test]
    fn u3_anthropic_rfc3339_reset() {
        let now = humantime::parse_rfc3339("2026-11-29T12:00:00Z").unwrap();
        let h = headers(&[
            ("anthropic-ratelimit-input-tokens-remaining", "0"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2026-11-29T12:00:42Z",
            ),
        ]);
        assert_eq!(RateSignal::read(200, &h, now).cooldown_ms(1), Some(42_000));
    }

    #[test]
    fn u3_provider_429_wins_with_retry_after_seconds_date_or_default() {
        let now = humantime::parse_rfc3339("2026-11-29T12:00:00Z").unwrap();
        let s = RateSignal::read(429, &headers(&[("retry-after", "7")]), now);
        assert_eq!(s.cooldown_ms(1000), Some(7_000));
        let s = RateSignal::read(
            429,
            &headers(&[("retry-after", "Sun, 29 Nov 2026 12:00:30 GMT")]),
            now,
        );
        assert_eq!(s.cooldown_ms(1000), Some(30_000));
        let s = RateSignal::read(429, &headers(&[("retry-after-ms", "1500")]), now);
        assert_eq!(s.cooldown_ms(1000), Some(1_500));
        assert_eq!(
            RateSignal::read(429, &HeaderMap::new(), now).cooldown_ms(1000),
            Some(1000)
        );
        // A 503 with a retry-after is not a rate signal on its own (F5 decides).
        assert_eq!(
            RateSignal::read(503, &headers(&[("retry-after", "7")]), now).cooldown_ms(1000),
            None
        );
    }

    #[test]
    fn u3_garbage_headers_never_panic_and_are_bounded() {
        let now = SystemTime::now();
        let h = headers(&[
            ("retry-after", "99999999999999999999"),
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "garbage"),
        ]);
        let s = RateSignal::read(429, &h, now);
        assert_eq!(s.retry_after_ms, Some(MAX_SIGNAL_MS));
        assert_eq!(s.exhausted_until_ms, Some(1_000));
        let s = RateSignal::read(429, &headers(&[("retry-after", "-3")]), now);
        assert_eq!(s.retry_after_ms, None);
    }
}
