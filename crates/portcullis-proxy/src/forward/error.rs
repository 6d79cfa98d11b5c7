//! The forwarder's failures, typed: the failover layer reads their kind (and makes the
//! client's answer, F10), the guards whether the provider saw the request (B4).

use crate::catalog::Route;
use crate::telemetry::AttemptTrace;
use portcullis::BoxError;
use portcullis_core::{UpstreamError, UpstreamFailure, UsageRecorder};

/// A failed attempt as the layers above read it, logged once here.
pub(super) fn upstream_failed(failure: UpstreamFailure, why: &str) -> BoxError {
    tracing::warn!(failure = failure.as_str(), "upstream attempt failed: {why}");
    Box::new(UpstreamError::new(failure))
}

/// The typed failure of a request whose answer's head did not come within
/// `upstream_timeout`.
pub(super) fn timed_out(route: &Route, trace: Option<AttemptTrace>) -> BoxError {
    tracing::warn!(channel = %route.name, "upstream response head timed out");
    route.responses.failed();
    if let Some(t) = &trace {
        t.failed("timeout");
    }
    upstream_failed(UpstreamFailure::Timeout, "timeout")
}

/// The typed failure of a request that got no answer: a refused connection never
/// reached the provider (the error says so, and the recorder forgets its mark);
/// anything later may have (B4) and stays unknown.
pub(super) fn not_answered(
    e: &hyper_util::client::legacy::Error,
    route: &Route,
    trace: Option<AttemptTrace>,
    recorder: Option<UsageRecorder>,
) -> BoxError {
    tracing::warn!(channel = %route.name, error = ?e, "upstream request failed");
    route.responses.failed();
    if let Some(t) = &trace {
        t.failed("connection");
    }
    if e.is_connect() {
        if let Some(r) = &recorder {
            r.clear();
        }
        return upstream_failed(UpstreamFailure::Connect, "connection");
    }
    upstream_failed(UpstreamFailure::Lost, "connection lost")
}
