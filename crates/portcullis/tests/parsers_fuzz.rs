//! Untrusted bytes from providers never panic the parsers the upstream side uses:
//! rate-limit headers (U3) and error bodies (F5), for
//! every dialect and status, with arbitrary and near-valid input.

use http::{HeaderMap, HeaderName, HeaderValue};
use portcullis::core::Dialect;
use portcullis::core::failover::classify;
use portcullis::failover::error_facts;
use portcullis::upstream::{MAX_SIGNAL_MS, RateSignal};
use proptest::prelude::*;
use std::time::SystemTime;

const HEADERS: &[&str] = &[
    "retry-after",
    "retry-after-ms",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
    "request-id",
];

/// Values that look like what providers send, and garbage.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{0,25}",
        "-?[0-9]{1,6}(\\.[0-9]{0,4})?",
        "([0-9]{1,4}(h|m|s|ms|us|ns)){1,4}",
        "20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?Z",
        "(Mon|Sun), [0-9]{2} (Jan|Nov|Xyz) [0-9]{4} [0-9:]{8} GMT",
        "[ -~]{0,40}",
    ]
}

fn dialect() -> impl Strategy<Value = Dialect> {
    prop_oneof![
        Just(Dialect::OpenAi),
        Just(Dialect::Anthropic),
        Just(Dialect::Gemini),
        Just(Dialect::Native)
    ]
}

/// Error bodies: JSON shaped like the providers' (with random field types) and bytes.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| serde_json::json!(n)),
        "[ -~]{0,20}".prop_map(serde_json::Value::String),
    ];
    let json = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("error".to_owned()),
                        Just("type".to_owned()),
                        Just("code".to_owned()),
                        Just("status".to_owned()),
                        Just("message".to_owned()),
                        Just("details".to_owned()),
                        Just("@type".to_owned()),
                        Just("retryDelay".to_owned()),
                        "[a-z]{1,6}",
                    ],
                    inner
                ),
                0..5
            )
            .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect())),
        ]
    });
    prop_oneof![
        json.prop_map(|v| serde_json::to_vec(&v).unwrap()),
        prop::collection::vec(any::<u8>(), 0..200),
    ]
}

proptest! {
    #[test]
    fn rate_headers_never_panic_and_stay_bounded(
        status in 100u16..600,
        pairs in prop::collection::vec((0..HEADERS.len(), value()), 0..8),
    ) {
        let mut h = HeaderMap::new();
        for (i, v) in pairs {
            if let Ok(v) = HeaderValue::from_str(&v) {
                h.append(HeaderName::from_static(HEADERS[i]), v);
            }
        }
        let s = RateSignal::read(status, &h, SystemTime::now());
        prop_assert!(s.retry_after_ms.is_none_or(|m| m <= MAX_SIGNAL_MS));
        prop_assert!(s.exhausted_until_ms.is_none_or(|m| m <= MAX_SIGNAL_MS));
        if let Some(c) = s.cooldown_ms(1_000) {
            prop_assert!(c <= MAX_SIGNAL_MS);
        }
    }

    #[test]
    fn error_bodies_never_panic_the_classifier(
        d in dialect(),
        status in 100u16..600,
        b in body(),
        retry in prop::option::of(value()),
    ) {
        let mut h = HeaderMap::new();
        if let Some(Ok(v)) = retry.map(|r| HeaderValue::from_str(&r)) {
            h.insert("retry-after", v);
        }
        let f = error_facts(d, status, &h, &b);
        // Every provider-supplied wait (header or Gemini `retryDelay`) is capped (F6).
        prop_assert!(f.retry_after_ms.is_none_or(|m| m <= MAX_SIGNAL_MS));
        let v = classify(d, &f);
        // 400 / 404 / 413 / 422 are never failed over unless they name a spend cap or a
        // bad credential (F3, F5).
        if matches!(status, 404 | 413 | 422) && v.failover {
            prop_assert!(matches!(
                v.reason,
                portcullis::core::failover::Reason::SpendCap | portcullis::core::failover::Reason::BadCredential
            ));
        }
    }
}
