//! The failover layer's decision, sans I/O, shared by the first attempt (in the
//! response future itself) and the retries (in its boxed slow path): where a request's
//! attempts go and what each attempt's outcome means.
//!
//! [`Decide::start`] reads what the request's head says for its attempts (its deadline,
//! its conversation); [`Decide::next`] is the next attempt — the first at once — a
//! switch to the fallback model, or the stop; on an attempt's outcome,
//! [`Decide::on_answer`], [`Decide::on_verdict`], [`Decide::before_first_chunk`] and
//! [`Decide::on_error`] say whether to gate the answer (F4), classify it (F5), fail over
//! (F2), wait for a channel to recover (F6), stop with the final failure (F10) or hand
//! the outcome to the client as it is (F3). The rules themselves are portcullis-core's
//! ([`Attempts`], [`classify`](portcullis_core::failover::classify),
//! [`transport_verdict`]); this module routes a request through them. `attempt.rs` and
//! the future carry out what it says: requests, spans, counters, timers and bodies.

use super::{CONVERSATION, DEADLINE};
use http::{HeaderMap, StatusCode};
use portcullis_core::failover::{
    Attempts, Channels, Refused, RetryBudget, RetryDecision, RetryLimits, Timeline, Transport,
    Verdict, transport_verdict,
};
use portcullis_core::{Candidates, Clock, Dialect, Millis, Rejection, UpstreamError};
use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

/// A conversation id longer than this is not a pin (F9).
const MAX_CONVERSATION: usize = 256;

/// What to do with a 2xx or an error answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answered {
    /// A 2xx: hold it until its first content chunk (F4); then it commits, or it failed
    /// before ([`Decide::before_first_chunk`]).
    Gate,
    /// An error answer: read its body and classify it (F5), then
    /// [`Decide::on_verdict`].
    Classify,
}

/// What to do after an attempt's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The attempt failed with this verdict: record it on the channel that served it
    /// (health, cooldowns), then [`Decide::next`] (F2, F5).
    Failover(Verdict),
    /// No channel is usable now: wait this long, then [`Decide::next`] (F6).
    Wait(Duration),
    /// No further attempt: the final failure (F10).
    Stop,
    /// The client gets the outcome as it is: an error answer that is the request's own
    /// fault (F3), or a refusal from further in that is the request's own answer.
    PassOn,
}

/// One request's decision in progress: portcullis-core's [`Attempts`] with what the
/// layer adds to it — the client's dialect (the verdict on an attempt that got no
/// answer is read in it) and the request's deadline.
#[derive(Debug)]
pub(crate) struct Decide {
    /// What was tried and ruled out, and the rules of the next step.
    pub(crate) attempts: Attempts,
    /// The dialect the client speaks.
    pub(crate) dialect: Dialect,
    /// When failover took the request (the origin of its timeline, on the layer's
    /// clock) and the deadline from then; `None` without a deadline (the clock is then
    /// not read for it).
    deadline: Option<(Millis, Duration)>,
}

impl Decide {
    /// A request over `candidates` for `model`, with a fallback model on offer or not:
    /// its deadline is the `x-portcullis-deadline-ms` header's, else `default_deadline`
    /// (F6); its conversation, the `x-portcullis-conversation` header's when it is not
    /// empty and at most 256 bytes long (F9).
    pub(crate) fn start(
        headers: &HeaderMap,
        dialect: Dialect,
        model: Option<Arc<str>>,
        candidates: Candidates,
        fallback: bool,
        default_deadline: Option<Duration>,
        clock: &impl Clock,
    ) -> Self {
        let conversation: Option<Arc<str>> = headers
            .get(CONVERSATION)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty() && v.len() <= MAX_CONVERSATION)
            .map(Arc::from);
        let deadline = headers
            .get(DEADLINE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_millis)
            .or(default_deadline)
            .map(|d| (clock.now(), d));
        Self {
            attempts: Attempts::new(candidates, model, conversation, fallback),
            dialect,
            deadline,
        }
    }

    /// The request's time now: since failover took it, against its deadline.
    pub(crate) fn timeline(&self, clock: &impl Clock) -> Timeline {
        match self.deadline {
            Some((start, deadline)) => Timeline {
                now: Duration::from_millis(clock.now().saturating_sub(start)),
                deadline: Some(deadline),
            },
            None => Timeline::default(),
        }
    }

    /// The next step ([`Attempts::decide`]): an attempt — the first at once, a retry
    /// after its backoff, paid from `budget` (F6, F7) — a switch to the fallback model
    /// (F11), or the stop (F1, F10). The backoff's jitter is `draw`n only once something
    /// was sent (random bits, so that requests failing together do not come back
    /// together): the first attempt never backs off and draws nothing.
    pub(crate) fn next(
        &mut self,
        ch: Channels<'_>,
        limits: &RetryLimits,
        budget: &impl RetryBudget,
        clock: &impl Clock,
        draw: impl FnOnce() -> u64,
    ) -> RetryDecision {
        let sent = u64::from(self.attempts.sent());
        let seed = if sent == 0 { 0 } else { draw() ^ sent };
        let time = self.timeline(clock);
        self.attempts
            .decide(ch, limits, budget, time, seed, clock.now())
    }

    /// An answer came with `status`: an attempt sent (F1). A 2xx is gated (F4), any
    /// other answer classified (F5).
    pub(crate) fn on_answer(&mut self, status: StatusCode) -> Answered {
        self.attempts.count_sent();
        if status.is_success() {
            Answered::Gate
        } else {
            Answered::Classify
        }
    }

    /// An error answer's verdict (F5): fail over on it (F2), or — the request's own
    /// fault, or an error not known — the client gets it as the provider sent it (F3).
    /// Nothing else.
    pub(crate) fn on_verdict(&self, verdict: Verdict) -> Step {
        if verdict.failover {
            Step::Failover(verdict)
        } else {
            Step::PassOn
        }
    }

    /// A 2xx answer failed, or stayed silent, before its first content chunk (F4): a
    /// failover, of unknown result.
    pub(crate) fn before_first_chunk(&self) -> Verdict {
        transport_verdict(self.dialect, Transport::StreamBeforeFirstChunk)
    }

    /// The attempt's call failed with `error` instead of an answer. The forwarder's
    /// failure (an [`UpstreamError`]) is an attempt sent that got no answer: fail over
    /// (F2, F5). A refusal from further in ([`Attempts::refused`]): an upstream failure
    /// in a rejection's shape likewise; no channel usable now, on a retry, a wait within
    /// `max_wait` and the deadline (F6) or the stop; otherwise — on a first attempt
    /// (U4, F10) — the request's own answer. Any other error passes on.
    pub(crate) fn on_error(
        &mut self,
        error: &(dyn Error + 'static),
        limits: &RetryLimits,
        clock: &impl Clock,
    ) -> Step {
        if let Some(u) = UpstreamError::find(error) {
            return self.failed_unanswered(u.failure().transport());
        }
        let Some(r) = error.downcast_ref::<Rejection>() else {
            return Step::PassOn;
        };
        let time = self.timeline(clock);
        match self
            .attempts
            .refused(r.code(), r.layer(), r.retry_after(), limits, time)
        {
            Refused::Failed(transport) => self.failed_unanswered(transport),
            Refused::Wait(w) => Step::Wait(w),
            Refused::Stop => Step::Stop,
            Refused::PassOn => Step::PassOn,
        }
    }

    /// An attempt sent that got no answer, failed in `transport`.
    fn failed_unanswered(&mut self, transport: Transport) -> Step {
        self.attempts.count_sent();
        Step::Failover(transport_verdict(self.dialect, transport))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_core::failover::{
        ErrorFacts, HealthBook, HealthConfig, Reason, StickyMap, Stop, classify,
    };
    use portcullis_core::upstream::UpstreamRegistry;
    use portcullis_core::{ChannelRef, GatewayCode, LayerKind, ManualClock, UpstreamFailure};

    const NOW: Millis = 1_000_000;

    const LIMITS: RetryLimits = RetryLimits {
        max_attempts: 3,
        backoff_base_ms: 100,
        backoff_cap_ms: 2_000,
        max_wait: Duration::from_secs(10),
    };

    /// The channels `a` and `b` (the layer tests' registry), each on its own
    /// credential, with health, pins and a clock of their own.
    struct World {
        health: HealthBook,
        sticky: StickyMap,
        registry: Arc<UpstreamRegistry>,
        clock: ManualClock,
    }

    impl World {
        fn new() -> Self {
            Self {
                health: HealthBook::new(HealthConfig::default()),
                sticky: StickyMap::new(60_000, 100),
                registry: super::super::tests::registry(),
                clock: ManualClock::new(NOW),
            }
        }
        fn ch(&self) -> Channels<'_> {
            Channels {
                health: &self.health,
                sticky: &self.sticky,
                registry: &self.registry,
            }
        }
        /// A request over `a` and `b` with these headers.
        fn start(&self, headers: &[(&str, &str)], default_deadline: Option<Duration>) -> Decide {
            let mut map = HeaderMap::new();
            for (name, value) in headers {
                map.insert(
                    http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    value.parse().unwrap(),
                );
            }
            let candidates = Candidates::new([ChannelRef::new("a", 0), ChannelRef::new("b", 0)]);
            Decide::start(
                &map,
                Dialect::OpenAi,
                Some("m".into()),
                candidates,
                false,
                default_deadline,
                &self.clock,
            )
        }
        /// The next step with room in the budget and `draw` for the jitter.
        fn next(&self, d: &mut Decide, draw: impl FnOnce() -> u64) -> RetryDecision {
            d.next(self.ch(), &LIMITS, &|| true, &self.clock, draw)
        }
        /// The channel of the next attempt.
        fn send(&self, d: &mut Decide) -> String {
            match self.next(d, || 7) {
                RetryDecision::Send { mut order, .. } => {
                    let c = order.candidates(d.attempts.candidates());
                    c.channels()[0].name.to_string()
                }
                other => panic!("no attempt: {other:?}"),
            }
        }
        /// The attempt on `channel` failed with `verdict`.
        fn failed(&self, d: &mut Decide, channel: &str, verdict: Verdict) {
            d.attempts.failed(
                self.ch(),
                Some(channel.into()),
                verdict,
                10,
                self.clock.now(),
            );
        }
    }

    fn status(code: u16) -> Verdict {
        classify(
            Dialect::OpenAi,
            &ErrorFacts {
                status: code,
                ..ErrorFacts::default()
            },
        )
    }

    fn rejection(code: GatewayCode, layer: LayerKind, retry_after: Option<Duration>) -> Rejection {
        Rejection::new(code, layer).with_retry_after(retry_after)
    }

    #[test]
    fn f1_the_first_attempt_goes_at_once_and_draws_no_jitter() {
        let w = World::new();
        let mut d = w.start(&[], None);
        let step = w.next(&mut d, || panic!("the first attempt draws no jitter"));
        let RetryDecision::Send { wait, mut order } = step else {
            panic!("no first attempt: {step:?}");
        };
        assert_eq!(wait, Duration::ZERO);
        let names: Vec<_> = order
            .candidates(d.attempts.candidates())
            .channels()
            .iter()
            .map(|c| c.name.to_string())
            .collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn f1_answers_and_unanswered_failures_are_attempts_and_bound_them() {
        let w = World::new();
        let mut d = w.start(&[], None);
        assert_eq!(w.send(&mut d), "a");
        // A 5xx answer: counted, classified, failed over.
        assert_eq!(d.on_answer(StatusCode::BAD_GATEWAY), Answered::Classify);
        let verdict = status(502);
        assert_eq!(d.on_verdict(verdict), Step::Failover(verdict));
        w.failed(&mut d, "a", verdict);
        assert_eq!(w.send(&mut d), "b");
        // The forwarder's failure: counted too.
        let e = UpstreamError::new(UpstreamFailure::Timeout);
        assert!(matches!(
            d.on_error(&e, &LIMITS, &w.clock),
            Step::Failover(_)
        ));
        assert_eq!(d.attempts.sent(), 2);
        // A refusal from further in is not an attempt.
        let r = rejection(GatewayCode::RpmLimit, LayerKind::UpstreamLimit, None);
        d.on_error(&r, &LIMITS, &w.clock);
        assert_eq!(d.attempts.sent(), 2);
    }

    #[test]
    fn f2_a_transport_failure_fails_over_with_its_verdict_in_the_clients_dialect() {
        let w = World::new();
        let mut d = w.start(&[], None);
        for (failure, reason) in [
            (UpstreamFailure::Connect, Reason::Connect),
            (UpstreamFailure::Timeout, Reason::Timeout),
        ] {
            let e = UpstreamError::new(failure);
            let Step::Failover(v) = d.on_error(&e, &LIMITS, &w.clock) else {
                panic!("{failure:?} does not fail over");
            };
            assert_eq!(v, transport_verdict(Dialect::OpenAi, failure.transport()));
            assert_eq!(v.reason, reason);
            assert!(v.failover);
        }
    }

    #[test]
    fn f3_an_error_answer_that_is_the_requests_own_fault_goes_to_the_client() {
        let w = World::new();
        let mut d = w.start(&[], None);
        for code in [400, 404, 413, 422] {
            assert_eq!(
                d.on_answer(StatusCode::from_u16(code).unwrap()),
                Answered::Classify
            );
            assert_eq!(d.on_verdict(status(code)), Step::PassOn, "{code}");
        }
        // Any other error from further in is not failover's to judge either.
        let other = std::io::Error::other("not a rejection");
        assert_eq!(d.on_error(&other, &LIMITS, &w.clock), Step::PassOn);
    }

    #[test]
    fn f4_a_success_is_gated_and_a_failure_before_its_first_chunk_fails_over() {
        let w = World::new();
        let mut d = w.start(&[], None);
        assert_eq!(d.on_answer(StatusCode::OK), Answered::Gate);
        let v = d.before_first_chunk();
        assert_eq!(v.reason, Reason::StreamFailed);
        assert!(v.failover && v.result_unknown);
        // The answer was counted once, when it came.
        assert_eq!(d.attempts.sent(), 1);
    }

    #[test]
    fn f5_an_upstream_failure_in_a_rejections_shape_is_a_failed_attempt() {
        let w = World::new();
        let mut d = w.start(&[], None);
        let r = rejection(GatewayCode::UpstreamFailed, LayerKind::UpstreamLimit, None);
        let Step::Failover(v) = d.on_error(&r, &LIMITS, &w.clock) else {
            panic!("not a failover");
        };
        assert!(v.result_unknown);
        assert_eq!(d.attempts.sent(), 1);
    }

    #[test]
    fn f6_the_deadline_is_the_headers_else_the_default_from_when_failover_took_it() {
        let w = World::new();
        let d = w.start(
            &[("x-portcullis-deadline-ms", " 1500 ")],
            Some(Duration::from_secs(9)),
        );
        w.clock.advance(Duration::from_millis(400));
        let t = d.timeline(&w.clock);
        assert_eq!(t.now, Duration::from_millis(400));
        assert_eq!(t.deadline, Some(Duration::from_millis(1500)));
        let d = w.start(
            &[("x-portcullis-deadline-ms", "soon")],
            Some(Duration::from_secs(9)),
        );
        assert_eq!(d.timeline(&w.clock).deadline, Some(Duration::from_secs(9)));
        let d = w.start(&[], None);
        assert_eq!(d.timeline(&w.clock), Timeline::default());
    }

    #[test]
    fn f6_no_channel_usable_on_a_retry_waits_within_max_wait_and_the_deadline() {
        let w = World::new();
        let mut d = w.start(&[("x-portcullis-deadline-ms", "3000")], None);
        w.send(&mut d);
        w.failed(&mut d, "a", status(503));
        let busy = |s| rejection(GatewayCode::RpmLimit, LayerKind::UpstreamLimit, Some(s));
        let wait = Duration::from_secs(2);
        assert_eq!(d.on_error(&busy(wait), &LIMITS, &w.clock), Step::Wait(wait));
        // Past the deadline, or past `max_wait`: the stop.
        let late = Duration::from_secs(4);
        assert_eq!(d.on_error(&busy(late), &LIMITS, &w.clock), Step::Stop);
        let long = Duration::from_secs(11);
        assert_eq!(d.on_error(&busy(long), &LIMITS, &w.clock), Step::Stop);
    }

    #[test]
    fn f6_a_retry_draws_its_jitter_and_backs_off_within_the_cap() {
        let w = World::new();
        let mut d = w.start(&[], None);
        w.send(&mut d);
        d.on_answer(StatusCode::INTERNAL_SERVER_ERROR);
        w.failed(&mut d, "a", status(500));
        let drawn = std::cell::Cell::new(false);
        let step = w.next(&mut d, || {
            drawn.set(true);
            u64::MAX
        });
        assert!(drawn.get(), "a retry draws its jitter");
        let RetryDecision::Send { wait, .. } = step else {
            panic!("no retry: {step:?}");
        };
        assert!(wait <= Duration::from_millis(LIMITS.backoff_base_ms));
    }

    #[test]
    fn f9_the_conversation_header_names_a_pin_only_when_short_and_not_empty() {
        let w = World::new();
        w.sticky.pin("conv", "b".into(), NOW);
        let mut d = w.start(&[("x-portcullis-conversation", "conv")], None);
        assert_eq!(w.send(&mut d), "b", "the pinned channel goes first");
        for header in [String::new(), "c".repeat(MAX_CONVERSATION + 1)] {
            w.sticky.pin(&header, "b".into(), NOW);
            let mut d = w.start(&[("x-portcullis-conversation", &header)], None);
            assert_eq!(w.send(&mut d), "a", "{} bytes: no pin", header.len());
        }
    }

    #[test]
    fn f10_a_refusal_of_the_first_attempt_is_the_clients_answer() {
        let w = World::new();
        let mut d = w.start(&[], None);
        w.send(&mut d);
        let r = rejection(
            GatewayCode::CapacityBusy,
            LayerKind::CapacityQueue,
            Some(Duration::from_secs(1)),
        );
        assert_eq!(d.on_error(&r, &LIMITS, &w.clock), Step::PassOn);
    }

    #[test]
    fn f10_with_no_channel_left_the_next_step_is_the_final_failure() {
        let w = World::new();
        let mut d = w.start(&[], None);
        for channel in ["a", "b"] {
            assert_eq!(w.send(&mut d), channel);
            d.on_answer(StatusCode::UNAUTHORIZED);
            w.failed(&mut d, channel, status(401));
        }
        assert_eq!(w.next(&mut d, || 0), RetryDecision::Stop(Stop::NoChannel));
        let (r, after_attempts) = d.attempts.final_failure(w.ch(), w.clock.now());
        assert_eq!(r.code(), GatewayCode::UpstreamFailed);
        assert!(after_attempts);
    }
}
