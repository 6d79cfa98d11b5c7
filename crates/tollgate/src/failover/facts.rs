//! Reading a provider's error answer into [`ErrorFacts`] for the classifier (F5): the
//! type / code / message fields of each dialect's error body, Gemini's `RetryInfo`,
//! and the headers' retry hints and request id.

use super::super::upstream::{MAX_SIGNAL_MS, RateSignal};
use http::HeaderMap;
use serde_json::Value;
use std::time::SystemTime;
use tollgate_core::Dialect;
use tollgate_core::failover::ErrorFacts;

/// The facts of an error answer with `status`, `headers` and (the first bytes of) its
/// `body`. Unreadable bodies (HTML from a provider's edge, truncated JSON) leave the
/// body fields empty: the status decides.
pub fn error_facts(dialect: Dialect, status: u16, headers: &HeaderMap, body: &[u8]) -> ErrorFacts {
    let signal = RateSignal::read(status, headers, SystemTime::now());
    let mut f = ErrorFacts {
        status,
        retry_after_ms: signal.retry_after_ms,
        request_id: ["x-request-id", "request-id", "x-upstream-request-id"]
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
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    f.message = text(err.get("message"));
    match dialect {
        Dialect::OpenAi | Dialect::Native => {
            f.error_type = text(err.get("type"));
            f.error_code = text(err.get("code"));
        }
        Dialect::Anthropic => {
            f.error_type = text(err.get("type"));
            f.error_code = text(err.get("details").and_then(|d| d.get("error_code")));
            if f.request_id.is_none() {
                f.request_id = text(v.get("request_id"));
            }
        }
        Dialect::Gemini => {
            f.error_type = text(err.get("status"));
            for d in err
                .get("details")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let ty = d.get("@type").and_then(Value::as_str).unwrap_or("");
                if ty.ends_with("RetryInfo") {
                    f.retry_info = true;
                    if f.retry_after_ms.is_none() {
                        f.retry_after_ms = d
                            .get("retryDelay")
                            .and_then(Value::as_str)
                            .and_then(|s| s.strip_suffix('s'))
                            .and_then(|s| s.parse::<f64>().ok())
                            .filter(|s| s.is_finite() && *s >= 0.0)
                            // Capped like the `Retry-After` header (F6): a garbled or
                            // hostile delay must not park a scope for days.
                            .map(|s| ((s * 1000.0).ceil() as u64).min(MAX_SIGNAL_MS));
                    }
                } else if ty.ends_with("ErrorInfo") {
                    f.error_code = f.error_code.take().or(text(d.get("reason")));
                } else if ty.ends_with("QuotaFailure") {
                    f.error_code = f.error_code.take().or(text(
                        d.get("violations")
                            .and_then(|v| v.get(0))
                            .and_then(|v| v.get("quotaId")),
                    ));
                }
            }
        }
    }
    f
}
