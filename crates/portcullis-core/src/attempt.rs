//! How one attempt at the provider ended, as the forwarder tells it, and what the
//! layers that reserved something for it do then (B4, L5, F2, F5).
//!
//! The forwarder (the innermost service) fails with an [`UpstreamError`] that names
//! its [`UpstreamFailure`]: the failover layer reads the kind instead of guessing it,
//! and every guard that holds a reservation for the attempt — window quotas, money,
//! provider windows — decides settle-or-refund with the one function [`settle`].
//!
//! ```
//! use portcullis_core::attempt::{CallEnd, Settle, UpstreamError, UpstreamFailure, settle};
//! use portcullis_core::UsageReport;
//!
//! // A refused connection: the provider never saw the request, whatever was marked.
//! let err: Box<dyn std::error::Error + Send + Sync> =
//!     Box::new(UpstreamError::new(UpstreamFailure::Connect));
//! let end = CallEnd::of_error(&*err);
//! assert_eq!(settle(end, Some(UsageReport::Unknown)), Settle::Refund);
//! // No answer in time: the provider may have run it (B4), the reservation stands.
//! let end = CallEnd::Upstream(UpstreamFailure::Timeout);
//! assert_eq!(settle(end, Some(UsageReport::Unknown)), Settle::AsReported);
//! ```

use crate::demand::UsageReport;
use crate::failover::Transport;
use crate::rejection::{GatewayCode, LayerKind, Rejection};
use std::error::Error;
use std::fmt;

/// How an attempt failed on its way to the provider or back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UpstreamFailure {
    /// The request could not be built for the channel (its URI or head): never sent.
    Unsendable,
    /// No connection could be made: the provider never saw the request.
    Connect,
    /// The connection broke after the request left, before an answer: the provider
    /// may have run it.
    Lost,
    /// No response head within the upstream timeout: the provider may have run it.
    Timeout,
    /// The answer's body went silent for the idle timeout.
    Idle,
    /// The answer's body broke off with an error.
    Cut,
}

impl UpstreamFailure {
    /// Whether the provider may have seen the request (B4): then its result is
    /// unknown and what was reserved for it stays.
    pub fn reached_provider(self) -> bool {
        !matches!(self, UpstreamFailure::Unsendable | UpstreamFailure::Connect)
    }

    /// The failure as the classifier reads it (F5): never sent → a connect failure,
    /// no answer → a timeout (result unknown), a body that failed → a stream that
    /// failed (before its first content chunk, if the gate is still waiting).
    pub fn transport(self) -> Transport {
        match self {
            UpstreamFailure::Unsendable | UpstreamFailure::Connect => Transport::Connect,
            UpstreamFailure::Lost | UpstreamFailure::Timeout => Transport::Timeout,
            UpstreamFailure::Idle | UpstreamFailure::Cut => Transport::StreamBeforeFirstChunk,
        }
    }

    /// A stable name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamFailure::Unsendable => "unsendable",
            UpstreamFailure::Connect => "connect",
            UpstreamFailure::Lost => "lost",
            UpstreamFailure::Timeout => "timeout",
            UpstreamFailure::Idle => "idle",
            UpstreamFailure::Cut => "cut",
        }
    }
}

/// The forwarder's failure: its [`UpstreamFailure`], for the layers between it and
/// the failover layer (which makes the client's answer, F10).
///
/// Its [`source`](Error::source) is a 50202 [`Rejection`] of the gateway: a stack with
/// no failover layer still answers the client with it (the error mapping walks the
/// source chain).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamError {
    failure: UpstreamFailure,
    rejection: Rejection,
}

impl UpstreamError {
    /// A failure of this kind.
    pub fn new(failure: UpstreamFailure) -> Self {
        Self {
            failure,
            rejection: Rejection::new(GatewayCode::UpstreamFailed, LayerKind::Gateway),
        }
    }

    /// What happened.
    pub fn failure(&self) -> UpstreamFailure {
        self.failure
    }

    /// The client's answer where no failover layer makes one: 50202.
    pub fn rejection(&self) -> &Rejection {
        &self.rejection
    }

    /// The upstream error in `err` or its source chain.
    pub fn find<'a>(err: &'a (dyn Error + 'static)) -> Option<&'a UpstreamError> {
        let mut cur = Some(err);
        while let Some(e) = cur {
            if let Some(u) = e.downcast_ref::<UpstreamError>() {
                return Some(u);
            }
            cur = e.source();
        }
        None
    }
}

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.failure {
            UpstreamFailure::Unsendable => "the request could not be built for the channel",
            UpstreamFailure::Connect => "no connection to the provider",
            UpstreamFailure::Lost => "the connection broke before an answer",
            UpstreamFailure::Timeout => "no answer in time",
            UpstreamFailure::Idle => "the answer went silent",
            UpstreamFailure::Cut => "the answer broke off",
        };
        write!(f, "upstream attempt failed: {what}")
    }
}

impl Error for UpstreamError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.rejection)
    }
}

/// How a guarded call ended, as the guard sees it when it lets go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CallEnd {
    /// No answer: an error from further in that is no upstream failure (a refusal, a
    /// fault), or the guard was dropped before any answer (a client gone while
    /// queued).
    #[default]
    Unanswered,
    /// The inner service answered: a response head exists (its body may since have
    /// ended, failed or been dropped).
    Answered,
    /// The forwarder's typed failure.
    Upstream(UpstreamFailure),
}

impl CallEnd {
    /// How an inner service's error ends the call.
    pub fn of_error(err: &(dyn Error + 'static)) -> Self {
        match UpstreamError::find(err) {
            Some(u) => CallEnd::Upstream(u.failure()),
            None => CallEnd::Unanswered,
        }
    }
}

/// What a guard does with what it reserved for an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settle {
    /// Give it all back: the attempt cost nothing (L5).
    Refund,
    /// Settle from the usage recorded ([`UsageReport`]); with nothing complete
    /// recorded, the reservation stands or stays pending (B4).
    AsReported,
}

/// Settle or refund (B4, L5): an answered call settles from what was recorded; a call
/// that failed upstream is refunded only when the request never reached the provider;
/// a call without an answer is refunded only when nothing was recorded (code that
/// hands the request to someone who may bill for it marks the recorder first, see
/// [`UsageRecorder::mark_unknown`](crate::UsageRecorder::mark_unknown)).
pub fn settle(end: CallEnd, report: Option<UsageReport>) -> Settle {
    let refund = match end {
        CallEnd::Answered => false,
        CallEnd::Upstream(f) => !f.reached_provider(),
        CallEnd::Unanswered => report.is_none(),
    };
    if refund {
        Settle::Refund
    } else {
        Settle::AsReported
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demand::Usage;

    /// Nothing recorded, marked unknown, partial figures, a complete priced report.
    fn reports() -> [Option<UsageReport>; 4] {
        let seen = Usage {
            input_tokens: 1,
            output_tokens: 1,
            ..Usage::default()
        };
        [
            None,
            Some(UsageReport::Unknown),
            Some(UsageReport::Partial(seen)),
            Some(UsageReport::Complete(Usage {
                cost: Some(3),
                ..seen
            })),
        ]
    }

    #[test]
    fn l5_a_call_refused_further_in_or_dropped_before_sending_is_refunded() {
        assert_eq!(settle(CallEnd::Unanswered, None), Settle::Refund);
        for r in &reports()[1..] {
            // Marked before it left: it may have reached the provider (B4).
            assert_eq!(settle(CallEnd::Unanswered, *r), Settle::AsReported, "{r:?}");
        }
    }

    #[test]
    fn b4_an_answered_call_settles_from_what_was_recorded() {
        for r in reports() {
            assert_eq!(settle(CallEnd::Answered, r), Settle::AsReported, "{r:?}");
        }
    }

    #[test]
    fn b4_an_upstream_failure_is_refunded_only_when_the_provider_never_saw_the_request() {
        use UpstreamFailure::*;
        for f in [Unsendable, Connect, Lost, Timeout, Idle, Cut] {
            let want = if f.reached_provider() {
                Settle::AsReported
            } else {
                Settle::Refund
            };
            for r in reports() {
                assert_eq!(settle(CallEnd::Upstream(f), r), want, "{f:?} {r:?}");
            }
        }
        assert!(!Connect.reached_provider() && !Unsendable.reached_provider());
        assert!(Timeout.reached_provider() && Lost.reached_provider());
    }

    #[test]
    fn f5_upstream_failures_read_as_the_classifiers_transport_failures() {
        use UpstreamFailure::*;
        assert_eq!(Connect.transport(), Transport::Connect);
        assert_eq!(Unsendable.transport(), Transport::Connect);
        assert_eq!(Timeout.transport(), Transport::Timeout);
        assert_eq!(Lost.transport(), Transport::Timeout);
        assert_eq!(Idle.transport(), Transport::StreamBeforeFirstChunk);
        assert_eq!(Cut.transport(), Transport::StreamBeforeFirstChunk);
    }

    #[test]
    fn e1_an_upstream_error_is_found_through_a_source_chain_and_carries_a_50202() {
        #[derive(Debug)]
        struct Wrapper(UpstreamError);
        impl fmt::Display for Wrapper {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "wrapped")
            }
        }
        impl Error for Wrapper {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Wrapper(UpstreamError::new(UpstreamFailure::Timeout));
        assert_eq!(
            CallEnd::of_error(&e),
            CallEnd::Upstream(UpstreamFailure::Timeout)
        );
        let u = UpstreamError::find(&e).unwrap();
        let r = u.source().unwrap().downcast_ref::<Rejection>().unwrap();
        assert_eq!(r.code(), GatewayCode::UpstreamFailed);
        assert_eq!(r.layer(), LayerKind::Gateway);
        let plain = Rejection::new(GatewayCode::RpmLimit, LayerKind::UpstreamLimit);
        assert_eq!(CallEnd::of_error(&plain), CallEnd::Unanswered);
    }
}
