//! Provider rate signals (U3): the rate-limit headers OpenAI and Anthropic send, and
//! `retry-after`, read into one [`RateSignal`]; and the cooldown they call for.
//!
//! Parsed by hand: the formats are small and vendor-specific (OpenAI's Go-style
//! durations such as `6m0s` or `1.5s`, Anthropic's RFC 3339 instants, HTTP-date or
//! seconds in `retry-after`), and no crate parses the first.

use http::{HeaderMap, HeaderName};
use std::time::{Duration, SystemTime};

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

/// Header pairs (remaining, reset) of the limits the providers report. Names built
/// once: every answer is read, and a lookup by `&str` parses the name each time.
const PAIRS: [(HeaderName, HeaderName); 6] = [
    (
        HeaderName::from_static("x-ratelimit-remaining-requests"),
        HeaderName::from_static("x-ratelimit-reset-requests"),
    ),
    (
        HeaderName::from_static("x-ratelimit-remaining-tokens"),
        HeaderName::from_static("x-ratelimit-reset-tokens"),
    ),
    (
        HeaderName::from_static("anthropic-ratelimit-requests-remaining"),
        HeaderName::from_static("anthropic-ratelimit-requests-reset"),
    ),
    (
        HeaderName::from_static("anthropic-ratelimit-tokens-remaining"),
        HeaderName::from_static("anthropic-ratelimit-tokens-reset"),
    ),
    (
        HeaderName::from_static("anthropic-ratelimit-input-tokens-remaining"),
        HeaderName::from_static("anthropic-ratelimit-input-tokens-reset"),
    ),
    (
        HeaderName::from_static("anthropic-ratelimit-output-tokens-remaining"),
        HeaderName::from_static("anthropic-ratelimit-output-tokens-reset"),
    ),
];

/// OpenAI's millisecond retry hint.
const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");

/// Longest cooldown a provider header may impose (a garbled reset must not park a
/// channel for days).
pub const MAX_SIGNAL_MS: u64 = 24 * 3_600_000;

impl RateSignal {
    /// Reads `status` and `headers` of a provider answer received at wall time `now`.
    pub fn read(status: u16, headers: &HeaderMap, now: SystemTime) -> Self {
        let text = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
        let retry_after_ms = text(&RETRY_AFTER_MS)
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| v.ceil() as u64)
            .or_else(|| text(&http::header::RETRY_AFTER).and_then(|v| retry_after(v, now)))
            .map(|v| v.min(MAX_SIGNAL_MS));
        let mut exhausted_until_ms = None;
        for (remaining, reset) in &PAIRS {
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

/// `retry-after`: delta seconds or an HTTP date.
fn retry_after(v: &str, now: SystemTime) -> Option<u64> {
    let v = v.trim();
    if let Ok(s) = v.parse::<f64>() {
        return (s.is_finite() && s >= 0.0).then(|| (s * 1000.0).ceil() as u64);
    }
    let at = httpdate_parse(v)?;
    Some(at.duration_since(now).map_or(0, |d| d.as_millis() as u64))
}

/// A reset value: an OpenAI duration (`1s`, `6m0s`, `250ms`, `1h2m3.5s`) or an
/// Anthropic RFC 3339 instant.
fn reset_in(v: &str, now: SystemTime) -> Option<u64> {
    let v = v.trim();
    if let Some(d) = go_duration(v) {
        return Some(d.as_millis() as u64);
    }
    let at = humantime::parse_rfc3339_weak(v).ok()?;
    Some(at.duration_since(now).map_or(0, |d| d.as_millis() as u64))
}

/// Go's `time.Duration` text as OpenAI sends it.
fn go_duration(v: &str) -> Option<Duration> {
    if v.is_empty() {
        return None;
    }
    let mut total = 0f64;
    let mut rest = v;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let n: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3_600_000.0,
            "m" => 60_000.0,
            "s" => 1_000.0,
            "ms" => 1.0,
            "us" | "µs" => 0.001,
            "ns" => 0.000_001,
            _ => return None,
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    (total.is_finite() && total >= 0.0).then(|| Duration::from_micros((total * 1000.0) as u64))
}

/// An HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn httpdate_parse(v: &str) -> Option<SystemTime> {
    // RFC 9110's preferred format is RFC 1123 in GMT; humantime reads RFC 3339, so
    // rewrite "Sun, 06 Nov 1994 08:49:37 GMT" into "1994-11-06T08:49:37Z".
    let mut parts = v.split_whitespace();
    let _weekday = parts.next()?;
    let day: u32 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: u32 = parts.next()?.parse().ok()?;
    let time = parts.next()?;
    if parts.next()? != "GMT" {
        return None;
    }
    humantime::parse_rfc3339(&format!("{year:04}-{month:02}-{day:02}T{time}Z")).ok()
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

    #[test]
    fn u3_openai_durations() {
        assert_eq!(go_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(
            go_duration("1h2m3.5s"),
            Some(Duration::from_millis(3_723_500))
        );
        assert_eq!(go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(go_duration(""), None);
        assert_eq!(go_duration("5x"), None);
        assert_eq!(go_duration("s"), None);
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
