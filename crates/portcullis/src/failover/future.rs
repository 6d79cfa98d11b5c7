use super::attempt::{After, Landed, Planned, Run, passed_through};
use super::decide::Answered;
use super::gate::{Gate, Gated};
use super::{AnswerBody, FailoverBody, Inner};
use crate::BoxError;
use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use portcullis_core::{Clock, Dialect};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tower::{Service, ServiceExt};
use tracing::Instrument;
use tracing::instrument::Instrumented;

/// The rest of a request after an attempt that did not commit at once: an error
/// answer, a transport failure, a retry. Boxed: only a failed attempt takes this path,
/// and its timers and second attempt stay out of every request's future.
type SlowPath<B> =
    Pin<Box<dyn Future<Output = Result<Response<FailoverBody<B>>, BoxError>> + Send>>;

pin_project! {
    #[project = StateProj]
    enum State<S, C, ReqB, ResB>
    where
        S: Service<Request<ReqB>>,
        ResB: Body,
    {
        /// A request without candidates: one call, passed through.
        Direct { #[pin] fut: S::Future, dialect: Dialect, in_flight: Option<crate::gauge::InFlight> },
        /// The first attempt is under way.
        Called { #[pin] fut: Instrumented<S::Future>, run: Option<Box<Run<S, C, ReqB>>> },
        /// Its successful answer waits for its first content chunk (F4).
        Gating { gate: Gate<ResB>, landed: Option<Landed>, run: Option<Box<Run<S, C, ReqB>>> },
        /// Retries (see [`SlowPath`]).
        Slow { fut: SlowPath<ResB> },
        /// Decided without an attempt (every circuit open).
        Failed { error: Option<BoxError> },
    }
}

pin_project! {
    /// Response future of [`Failover`](super::Failover): the first attempt and its
    /// first-chunk gate in place; anything after a failed attempt in a boxed future.
    pub struct ResponseFuture<S, C, ReqB, ResB>
    where
        S: Service<Request<ReqB>>,
        ResB: Body,
    {
        #[pin]
        state: State<S, C, ReqB, ResB>,
    }
}

impl<S, C, ReqB, ResB> ResponseFuture<S, C, ReqB, ResB>
where
    S: Service<Request<ReqB>>,
    ResB: Body,
{
    pub(crate) fn direct(
        fut: S::Future,
        dialect: Dialect,
        in_flight: crate::gauge::InFlight,
    ) -> Self {
        Self {
            state: State::Direct {
                fut,
                dialect,
                in_flight: Some(in_flight),
            },
        }
    }
    pub(crate) fn called(fut: Instrumented<S::Future>, run: Box<Run<S, C, ReqB>>) -> Self {
        Self {
            state: State::Called {
                fut,
                run: Some(run),
            },
        }
    }
    pub(crate) fn failed(error: BoxError) -> Self {
        Self {
            state: State::Failed { error: Some(error) },
        }
    }
}

impl<S, C, ReqB, ResB> Future for ResponseFuture<S, C, ReqB, ResB>
where
    S: Inner<ReqB, ResB>,
    C: Clock,
    ReqB: Clone + Send + 'static,
    ResB: AnswerBody,
{
    type Output = Result<Response<FailoverBody<ResB>>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut state = self.as_mut().project().state;
            let next = match state.as_mut().project() {
                StateProj::Direct {
                    fut,
                    dialect,
                    in_flight,
                } => {
                    let res = ready!(fut.poll(cx)).map_err(Into::into);
                    return Poll::Ready(res.map(|r| passed_through(r, *dialect, in_flight.take())));
                }
                StateProj::Called { mut fut, run } => {
                    let res = ready!(fut.as_mut().poll(cx)).map_err(Into::into);
                    let span = fut.span().clone();
                    let mut run = run.take().expect("polled after completion");
                    let landed = run.landed(&res, &span);
                    match res {
                        Ok(r) => match run.answered(r.status()) {
                            Answered::Gate => {
                                let gate = Gate::new(&run.shared, r, run.dialect());
                                State::Gating {
                                    gate,
                                    landed: Some(landed),
                                    run: Some(run),
                                }
                            }
                            Answered::Classify => State::Slow {
                                fut: Box::pin(slow(run, Resume::Classify(r, landed))),
                            },
                        },
                        Err(e) => State::Slow {
                            fut: Box::pin(slow(run, Resume::Failed(e, landed))),
                        },
                    }
                }
                StateProj::Gating { gate, landed, run } => {
                    let shared = &run.as_ref().expect("polled after completion").shared;
                    let gated = ready!(gate.poll_gate(shared, cx));
                    let mut run = run.take().expect("polled after completion");
                    let landed = landed.take().expect("polled after completion");
                    match gated {
                        Gated::Committed(res) => {
                            return Poll::Ready(Ok(run.committed(res, &landed)));
                        }
                        Gated::Failed => {
                            run.gate_failed(landed);
                            State::Slow {
                                fut: Box::pin(slow(run, Resume::Next)),
                            }
                        }
                    }
                }
                StateProj::Slow { fut } => return fut.as_mut().poll(cx),
                StateProj::Failed { error } => {
                    return Poll::Ready(Err(error.take().expect("polled after completion")));
                }
            };
            state.set(next);
        }
    }
}

/// Where the slow path picks the request up.
enum Resume<B> {
    /// An attempt's answer, not counted yet.
    Answer(Response<B>, Landed),
    /// An error answer, counted: to read and classify (F5).
    Classify(Response<B>, Landed),
    /// The attempt's call failed.
    Failed(BoxError, Landed),
    /// Handled: decide the next step.
    Next,
}

/// The attempts after the first (see [`SlowPath`]): until one commits or the rules say
/// stop. Bounded: every turn either sends an attempt (≤ `max_attempts`) or waits once
/// for a recovery (≤ `max_attempts` waits).
async fn slow<S, C, ReqB, ResB>(
    mut run: Box<Run<S, C, ReqB>>,
    mut resume: Resume<ResB>,
) -> Result<Response<FailoverBody<ResB>>, BoxError>
where
    S: Inner<ReqB, ResB>,
    C: Clock,
    ReqB: Clone + Send + 'static,
    ResB: AnswerBody,
{
    loop {
        let after = match resume {
            Resume::Next => After::Next,
            Resume::Failed(e, landed) => run.on_error(e, landed),
            Resume::Classify(res, landed) => run.error_answer(res, landed).await,
            Resume::Answer(res, landed) => match run.answered(res.status()) {
                Answered::Gate => {
                    let mut gate = Gate::new(&run.shared, res, run.dialect());
                    let shared = run.shared.clone();
                    match std::future::poll_fn(|cx| gate.poll_gate(&shared, cx)).await {
                        Gated::Committed(res) => return Ok(run.committed(res, &landed)),
                        Gated::Failed => {
                            run.gate_failed(landed);
                            After::Next
                        }
                    }
                }
                Answered::Classify => run.error_answer(res, landed).await,
            },
        };
        match after {
            After::Next => {}
            After::Wait(w) => tokio::time::sleep(w).await,
            After::Stop => return Err(run.stop()),
            After::Done(res) => return res,
        }
        let (wait, candidates) = match run.plan() {
            Planned::Stop(e) => return Err(e),
            Planned::Send(wait, candidates) => (wait, candidates),
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let (attempt, span) = run.attempt(candidates);
        let res = match run.inner.ready().await.map_err(Into::into) {
            Ok(svc) => {
                let fut = span.in_scope(|| svc.call(attempt));
                fut.instrument(span.clone()).await.map_err(Into::into)
            }
            Err(e) => Err(e),
        };
        let landed = run.landed(&res, &span);
        resume = match res {
            Ok(r) => Resume::Answer(r, landed),
            Err(e) => Resume::Failed(e, landed),
        };
    }
}
