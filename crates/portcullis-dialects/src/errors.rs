//! Reading a provider's error answer into [`ErrorFacts`] for the failover classifier
//! (F5): the request id and retry hints of the headers here, the type / code / message
//! fields of each vendor's error body in its [`providers`](crate::providers) module.

use crate::providers::common::text;
use crate::providers::{anthropic, gemini, openai};
use crate::signal::RateSignal;
use http::HeaderMap;
use portcullis_core::Dialect;
use portcullis_core::failover::ErrorFacts;
use serde_json::Value;
use std::time::SystemTime;

/// Reads an error answer: the injection point's type (the failover layer's
/// `error_reader`); [`error_facts`] is the default.
pub type ErrorReader = fn(Dialect, u16, &HeaderMap, &[u8]) -> ErrorFacts;

/// Where the vendors put their request id (Anthropic's is `request-id`; the gateway's
/// fake upstream and relays send `x-upstream-request-id`).
const REQUEST_ID_HEADERS: [&str; 3] = ["x-request-id", "request-id", "x-upstream-request-id"];

/// The facts of an error answer with `status`, `headers` and (the first bytes of) its
/// `body`. Unreadable bodies (HTML from a provider's edge, truncated JSON) leave the
/// body fields empty: the status decides.
pub fn error_facts(dialect: Dialect, status: u16, headers: &HeaderMap, body: &[u8]) -> ErrorFacts {
    let signal = RateSignal::read(status, headers, SystemTime::now());
    let mut f = ErrorFacts {
        status,
        retry_after_ms: signal.retry_after_ms,
        request_id: REQUEST_ID_HEADERS
            .iter()
            .find_map(|h| headers.get(*h)?.to_str().ok().map(str::to_owned)),
        ..ErrorFacts::default()
    };
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return f;
    };
    // Gemini sometimes wraps the error in a one-element array.
    let v = match v {
        Value::Array(mut a) if a.len() == 1 => a.remove(0),
        v => v,
    };
    let Some(err) = v.get("error") else {
        return f;
    };
    f.message = text(err.get("message"));
    match dialect {
        Dialect::OpenAi | Dialect::Native => openai::error_fields(err, &mut f),
        Dialect::Anthropic => anthropic::error_fields(&v, err, &mut f),
        Dialect::Gemini => gemini::error_fields(err, &mut f),
    }
    f
}
