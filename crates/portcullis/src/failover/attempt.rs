//! One request's attempts as the layer drives them: building each attempt, reading its
//! outcome, and the side effects (counters, logs, metrics) of the decisions, which
//! are [`Decide`]'s (and through it portcullis-core's).

use super::FailoverBody;
use super::ModelFallback;
use super::decide::{Answered, Decide, Step};
use super::gate::read_prefix;
use super::layer::Shared;
use crate::BoxError;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use portcullis_core::failover::{Reason, RetryDecision, Stop, Verdict, classify, release_probes};
use portcullis_core::{
    Candidates, Chosen, Clock, Dialect, Millis, ModelId, ProviderError, Rejection, UpstreamError,
    UsageRecorder,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tower::retry::budget::Budget;
use tracing::Span;

/// The request's state across its attempts.
pub(crate) struct Run<S, C, ReqB> {
    pub(crate) shared: Arc<Shared<C>>,
    /// The inner stack, driven to readiness before each retry.
    pub(crate) inner: S,
    parts: http::request::Parts,
    body: ReqB,
    fallback: Option<ModelFallback<ReqB>>,
    /// The request's own recorder; each attempt records into a child of it.
    outer: UsageRecorder,
    /// Where the attempts go and what their outcomes mean.
    decide: Decide,
    /// When the last attempt was sent, on the layer's clock (its latency).
    sent_at: Option<Millis>,
    /// The attempt under way.
    current: Option<Current>,
    in_flight: Option<crate::gauge::InFlight>,
}

/// The attempt under way.
struct Current {
    recorder: UsageRecorder,
    probes: Vec<Arc<str>>,
}

/// What is known of an attempt as soon as its answer (or failure) is in.
#[derive(Clone, Debug)]
pub(crate) struct Landed {
    /// The channel that served it.
    pub(crate) served: Option<Arc<str>>,
    pub(crate) latency_ms: u64,
}

/// Where the request goes after an attempt's outcome.
pub(crate) enum After<B: Body> {
    /// Decide the next step.
    Next,
    /// Wait this long for a channel to recover, then decide again.
    Wait(Duration),
    /// The final failure.
    Stop,
    /// Done: this is the client's answer.
    Done(Result<Response<FailoverBody<B>>, BoxError>),
}

/// The next step, with its plumbing done.
pub(crate) enum Planned {
    /// Send an attempt to these candidates after the wait.
    Send(Duration, Candidates),
    /// The final failure.
    Stop(BoxError),
}

impl<S, C: Clock, ReqB: Clone + Send + 'static> Run<S, C, ReqB> {
    /// Takes a request and the candidates [`take_candidates`] took out of it.
    pub(crate) fn start(
        shared: Arc<Shared<C>>,
        inner: S,
        req: Request<ReqB>,
        candidates: Candidates,
        in_flight: crate::gauge::InFlight,
    ) -> Box<Self> {
        let (mut parts, body) = req.into_parts();
        let dialect = request_dialect(&parts.extensions);
        let fallback = parts.extensions.remove::<ModelFallback<ReqB>>();
        // The request's usage recorder and a channel chosen above are taken out of the
        // head that every attempt clones (as the candidates were): each attempt gets
        // its own.
        shared
            .state
            .counters
            .requests
            .fetch_add(1, Ordering::Relaxed);
        shared.state.budget.deposit();
        let outer = parts
            .extensions
            .remove::<UsageRecorder>()
            .unwrap_or_default();
        parts.extensions.remove::<Chosen>();
        let model = parts.extensions.get::<ModelId>().map(|m| m.0.clone());
        let decide = Decide::start(
            &parts.headers,
            dialect,
            model,
            candidates,
            fallback.is_some(),
            shared.config.settings.default_deadline,
            &shared.config.clock,
        );
        Box::new(Self {
            shared,
            inner,
            parts,
            body,
            fallback,
            outer,
            decide,
            sent_at: None,
            current: None,
            in_flight: Some(in_flight),
        })
    }

    /// The dialect the client speaks.
    pub(crate) fn dialect(&self) -> Dialect {
        self.decide.dialect
    }

    /// The next step: an attempt to send, or the final failure.
    pub(crate) fn plan(&mut self) -> Planned {
        loop {
            let shared = &*self.shared;
            let decision = self.decide.next(
                shared.channels(),
                &shared.config.limits,
                &|| shared.state.budget.withdraw(),
                &shared.config.clock,
                portcullis_core::id::random_u64,
            );
            match decision {
                RetryDecision::Send { wait, mut order } => {
                    let candidates = order.candidates(self.decide.attempts.candidates());
                    self.current = Some(Current {
                        recorder: UsageRecorder::child_of(&self.outer),
                        probes: order.probes,
                    });
                    return Planned::Send(wait, candidates);
                }
                RetryDecision::Switch => {
                    if !self.switch() {
                        return Planned::Stop(self.stop());
                    }
                }
                RetryDecision::Stop(why) => {
                    if why == Stop::Budget {
                        shared
                            .state
                            .counters
                            .budget_refused
                            .fetch_add(1, Ordering::Relaxed);
                        #[cfg(feature = "metrics")]
                        metrics::counter!("portcullis_retry_budget_refused_total").increment(1);
                    }
                    return Planned::Stop(self.stop());
                }
            }
        }
    }

    /// F11: every channel of this model tried; switch to the fallback model. False
    /// when the request cannot be rewritten for it after all.
    fn switch(&mut self) -> bool {
        let Some((fb, next)) = self.fallback.take().and_then(|fb| {
            let next = fb.build()?;
            Some((fb, next))
        }) else {
            return false;
        };
        tracing::info!(
            from = self.decide.attempts.model().map_or("?", |m| &**m),
            to = %fb.model,
            "failover switches to the fallback model"
        );
        #[cfg(feature = "metrics")]
        metrics::counter!("portcullis_model_fallbacks_total").increment(1);
        self.parts.uri = next.uri;
        self.body = next.body;
        self.parts.extensions.extend(next.extensions);
        let candidates = self
            .parts
            .extensions
            .remove::<Candidates>()
            .unwrap_or_else(|| Candidates::new([]));
        self.parts.extensions.remove::<Chosen>();
        self.decide.attempts.switch(fb.model, candidates);
        true
    }

    /// The attempt's request (its own recorder and candidates) and its span: its
    /// number, the channel that served it, the billing attempt id (recorded by the
    /// billing layer inside it) and the outcome.
    pub(crate) fn attempt(&mut self, candidates: Candidates) -> (Request<ReqB>, Span) {
        let mut attempt = Request::from_parts(self.parts.clone(), self.body.clone());
        if let Some(c) = &self.current {
            attempt.extensions_mut().insert(c.recorder.clone());
        }
        attempt.extensions_mut().insert(candidates);
        self.sent_at = Some(self.shared.config.clock.now());
        // Signed numbers: the OpenTelemetry bridge exports unsigned ones as text. An
        // exporter may name the span and give its kind (`otel.name`, e.g.
        // `chat {model}`, and `otel.kind`: the client side of the provider call); left
        // empty, they are not logged.
        let span = tracing::debug_span!(
            "attempt",
            n = i64::from(self.decide.attempts.sent()) + 1,
            channel = tracing::field::Empty,
            attempt_id = tracing::field::Empty,
            outcome = tracing::field::Empty,
            otel.name = tracing::field::Empty,
            otel.kind = tracing::field::Empty,
        );
        (attempt, span)
    }

    /// The attempt's answer (or failure) is in: probes it did not use go back, its
    /// span learns the channel and the outcome.
    pub(crate) fn landed<B>(&mut self, res: &Result<Response<B>, BoxError>, span: &Span) -> Landed {
        let current = self.current.take();
        let served = match res {
            Ok(r) => r.extensions().get::<Chosen>().map(|c| c.0.name.clone()),
            Err(_) => None,
        }
        .or_else(|| current.as_ref().and_then(|c| c.recorder.channel()));
        if let Some(c) = &current {
            release_probes(&self.shared.state.health, &c.probes, served.as_deref());
        }
        let latency_ms = self
            .sent_at
            .map_or(0, |t| self.shared.config.clock.now().saturating_sub(t));
        if !span.is_disabled() {
            if let Some(ch) = served.as_deref() {
                span.record("channel", ch);
            }
            let outcome = match res {
                // The provider's status, or the gateway code that refused the attempt.
                Ok(r) => i64::from(r.status().as_u16()),
                Err(e) => e
                    .downcast_ref::<Rejection>()
                    .or_else(|| UpstreamError::find(&**e).map(UpstreamError::rejection))
                    .map_or(0, |r| i64::from(r.code().code())),
            };
            span.record("outcome", outcome);
        }
        Landed { served, latency_ms }
    }

    /// The attempt failed with `verdict` on the channel that served it.
    pub(crate) fn failed(&mut self, landed: Landed, verdict: Verdict) {
        #[cfg(feature = "metrics")]
        metrics::counter!("portcullis_failover_attempt_failures_total", "reason" => verdict.reason.as_str())
            .increment(1);
        let shared = &*self.shared;
        let channel = landed.served.clone();
        let disabled = self.decide.attempts.failed(
            shared.channels(),
            landed.served,
            verdict,
            landed.latency_ms,
            shared.config.clock.now(),
        );
        if disabled {
            tracing::warn!(
                channel = channel.as_deref().unwrap_or("?"),
                reason = verdict.reason.as_str(),
                "credential disabled until an operator re-enables it"
            );
        }
    }

    /// The attempt's call failed: the forwarder could not get an answer (it says how:
    /// connect, timeout, …), or a layer further in refused it.
    pub(crate) fn on_error<B: Body>(&mut self, e: BoxError, landed: Landed) -> After<B> {
        let shared = &*self.shared;
        match self
            .decide
            .on_error(&*e, &shared.config.limits, &shared.config.clock)
        {
            Step::Failover(verdict) => {
                self.failed(landed, verdict);
                After::Next
            }
            Step::Wait(w) => {
                tracing::debug!(
                    wait_ms = w.as_millis() as u64,
                    "failover waits for a channel to recover"
                );
                After::Wait(w)
            }
            Step::Stop => After::Stop,
            Step::PassOn => After::Done(Err(e)),
        }
    }

    /// An answer arrived with `status`: counted as an attempt; gated or classified.
    pub(crate) fn answered(&mut self, status: StatusCode) -> Answered {
        self.shared
            .state
            .counters
            .attempts
            .fetch_add(1, Ordering::Relaxed);
        self.decide.on_answer(status)
    }

    /// The successful answer committed (F4): the client's answer.
    pub(crate) fn committed<B: Body>(
        &mut self,
        res: Response<FailoverBody<B>>,
        landed: &Landed,
    ) -> Response<FailoverBody<B>> {
        let shared = &*self.shared;
        self.decide.attempts.committed(
            shared.channels(),
            landed.served.as_ref(),
            landed.latency_ms,
            shared.config.clock.now(),
        );
        self.finish(res)
    }

    /// The successful answer failed before its first content chunk (F4).
    pub(crate) fn gate_failed(&mut self, landed: Landed) {
        let verdict = self.decide.before_first_chunk();
        self.failed(landed, verdict);
    }

    /// An error answer: read and classified (F5); the client gets it when it is not
    /// one to fail over on (F3).
    pub(crate) async fn error_answer<B>(&mut self, res: Response<B>, landed: Landed) -> After<B>
    where
        B: Body,
        B::Data: From<Bytes>,
    {
        let config = &self.shared.config.settings;
        let status = res.status().as_u16();
        let (rparts, rbody) = res.into_parts();
        let (head, rest) =
            read_prefix(rbody, config.error_body_limit, config.first_chunk_timeout).await;
        // X3: an answer translated into the client's dialect is read as the provider
        // wrote it (F5).
        let f = match rparts.extensions.get::<ProviderError>() {
            Some(p) => {
                (self.shared.config.error_reader)(p.dialect, p.status, &rparts.headers, &p.body)
            }
            None => {
                (self.shared.config.error_reader)(self.dialect(), status, &rparts.headers, &head)
            }
        };
        let read_in = rparts
            .extensions
            .get::<ProviderError>()
            .map_or(self.dialect(), |p| p.dialect);
        let verdict = classify(read_in, &f);
        tracing::info!(
            channel = landed.served.as_deref().unwrap_or("?"),
            status,
            reason = verdict.reason.as_str(),
            failover = verdict.failover,
            provider_request_id = f.request_id.as_deref().unwrap_or(""),
            "upstream attempt failed"
        );
        if let Step::Failover(verdict) = self.decide.on_verdict(verdict) {
            drop(rest);
            self.failed(landed, verdict);
            return After::Next;
        }
        // F3: the request itself is at fault (or the error is unknown): the provider's
        // answer goes to the client as it was.
        if verdict.reason == Reason::Unknown {
            tracing::warn!(
                status,
                body = %String::from_utf8_lossy(&head[..head.len().min(2048)]),
                "unclassified provider error; not retried"
            );
        }
        let mut prefix = VecDeque::new();
        if !head.is_empty() {
            prefix.push_back(Frame::data(B::Data::from(head)));
        }
        let dialect = self.dialect();
        let res = Response::from_parts(rparts, FailoverBody::new(prefix, rest, dialect, None));
        After::Done(Ok(self.finish(res)))
    }

    /// The client's answer: the attempts it took are recorded, and the layer counts
    /// the request in flight until its body ends.
    pub(crate) fn finish<B: Body>(
        &mut self,
        res: Response<FailoverBody<B>>,
    ) -> Response<FailoverBody<B>> {
        record_attempts(self.decide.attempts.sent());
        match self.in_flight.take() {
            Some(t) => res.map(|b| b.counting(t)),
            None => res,
        }
    }

    /// The final failure (F10), counted.
    pub(crate) fn stop(&mut self) -> BoxError {
        record_attempts(self.decide.attempts.sent());
        let shared = &*self.shared;
        shared.state.counters.failed.fetch_add(1, Ordering::Relaxed);
        let (rejection, _after_attempts) = self
            .decide
            .attempts
            .final_failure(shared.channels(), shared.config.clock.now());
        #[cfg(feature = "metrics")]
        if _after_attempts {
            metrics::counter!("portcullis_failover_final_total", "code" => rejection.code().code().to_string())
                .increment(1);
        }
        rejection.into()
    }
}

/// Retry amplification: the attempts one request took.
fn record_attempts(_attempts: u32) {
    #[cfg(feature = "metrics")]
    if _attempts > 0 {
        crate::gauge::record_attempts(_attempts);
    }
}

/// The dialect the client speaks (error events are written in it).
fn request_dialect(extensions: &http::Extensions) -> Dialect {
    extensions
        .get::<Dialect>()
        .copied()
        .unwrap_or(Dialect::Native)
}

/// Takes the request's candidates out of it. A request without any has nothing to fail
/// over between: it gets one call, without the fallback offer (only failover reads
/// it), and its dialect is returned instead.
pub(crate) fn take_candidates<ReqB: Send + 'static>(
    req: &mut Request<ReqB>,
) -> Result<Candidates, Dialect> {
    match req.extensions_mut().remove::<Candidates>() {
        Some(c) => Ok(c),
        None => {
            req.extensions_mut().remove::<ModelFallback<ReqB>>();
            Err(request_dialect(req.extensions()))
        }
    }
}

/// The answer of a passed-through call.
pub(crate) fn passed_through<B: Body>(
    res: Response<B>,
    dialect: Dialect,
    in_flight: Option<crate::gauge::InFlight>,
) -> Response<FailoverBody<B>> {
    res.map(|b| {
        let body = FailoverBody::new(VecDeque::new(), Box::pin(b), dialect, None);
        match in_flight {
            Some(t) => body.counting(t),
            None => body,
        }
    })
}
