use super::UpstreamGuard;
use super::admit::{After, Step, Walk};
use super::layer::ChannelFuture;
use crate::BoxError;
use crate::body::HoldBody;
use http::{Request, Response};
use pin_project_lite::pin_project;
use portcullis_core::{
    CallEnd, CapacityTake, Clock, JointAdmission, Rejection, UsageRecorder, WindowStore,
};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tower_service::Service;

/// A request whose admission is not decided yet.
pub(crate) struct Deferred<S, ReqB, St, C> {
    pub(crate) req: Option<Request<ReqB>>,
    pub(crate) svc: S,
    pub(crate) walk: Walk<St, C>,
    pub(crate) recorder: UsageRecorder,
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqB, St, C>
    where
        S: Service<Request<ReqB>>,
        St: WindowStore,
    {
        Rejected { rejection: Option<Rejection> },
        Asking { answer: St::Future<JointAdmission>, deferred: Option<Box<Deferred<S, ReqB, St, C>>> },
        Joining { answer: ChannelFuture, deferred: Option<Box<Deferred<S, ReqB, St, C>>> },
        Called { #[pin] fut: S::Future, guard: Option<UpstreamGuard<St>>, after: Option<After<St, C>> },
    }
}

pin_project! {
    /// Response future of [`UpstreamLimit`](super::UpstreamLimit).
    pub struct ResponseFuture<S, ReqB, St, C>
    where
        S: Service<Request<ReqB>>,
        St: WindowStore,
    {
        #[pin]
        state: State<S, ReqB, St, C>,
    }
}

impl<S, ReqB, St, C> ResponseFuture<S, ReqB, St, C>
where
    S: Service<Request<ReqB>>,
    St: WindowStore,
    C: Clock,
{
    pub(crate) fn rejected(r: Rejection) -> Self {
        Self {
            state: State::Rejected { rejection: Some(r) },
        }
    }
    pub(crate) fn called(
        fut: S::Future,
        guard: Option<UpstreamGuard<St>>,
        after: Option<After<St, C>>,
    ) -> Self {
        Self {
            state: State::Called { fut, guard, after },
        }
    }
    pub(crate) fn deferred(step: Step<St>, d: Box<Deferred<S, ReqB, St, C>>) -> Self {
        Self {
            state: transition(step, d),
        }
    }
}

/// The state a step leads to.
fn transition<S, ReqB, St, C>(
    step: Step<St>,
    d: Box<Deferred<S, ReqB, St, C>>,
) -> State<S, ReqB, St, C>
where
    S: Service<Request<ReqB>>,
    St: WindowStore,
    C: Clock,
{
    match step {
        Step::Ask(answer) => State::Asking {
            answer,
            deferred: Some(d),
        },
        Step::Join(answer) => State::Joining {
            answer,
            deferred: Some(d),
        },
        Step::Reject(r) => State::Rejected { rejection: Some(r) },
        Step::Done(plan) => {
            let Deferred {
                req,
                mut svc,
                walk,
                recorder,
            } = *d;
            let mut req = req.expect("request taken once");
            let (guard, after) = walk.go(plan, &mut req, recorder);
            State::Called {
                fut: svc.call(req),
                guard,
                after: Some(after),
            }
        }
    }
}

impl<S, ReqB, St, C, ResB> Future for ResponseFuture<S, ReqB, St, C>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    St: WindowStore,
    C: Clock,
    ResB: http_body::Body,
{
    type Output = Result<Response<HoldBody<ResB, UpstreamGuard<St>>>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut state = self.as_mut().project().state;
            let next = match state.as_mut().project() {
                StateProj::Rejected { rejection } => {
                    let r = rejection.take().expect("polled after completion");
                    return Poll::Ready(Err(r.into()));
                }
                StateProj::Asking { answer, deferred } => {
                    let answer = ready!(Pin::new(answer).poll(cx));
                    let mut d = deferred.take().expect("polled after completion");
                    let step = d
                        .walk
                        .on_answer(answer.map(|a| (a, CapacityTake::NotAsked)));
                    transition(step, d)
                }
                StateProj::Joining { answer, deferred } => {
                    let answer = ready!(answer.as_mut().poll(cx));
                    let mut d = deferred.take().expect("polled after completion");
                    let step = d.walk.on_answer(answer);
                    transition(step, d)
                }
                StateProj::Called { fut, guard, after } => {
                    let res = ready!(fut.poll(cx)).map_err(Into::into);
                    let mut guard = guard.take();
                    return Poll::Ready(match res {
                        Ok(res) => {
                            if let Some(a) = after.take() {
                                a.answered(&res, guard.as_mut());
                            }
                            Ok(res.map(|b| HoldBody::holding(b, guard)))
                        }
                        Err(e) => {
                            // L5: refused further in → nothing was sent, unless it may
                            // have reached the provider (B4).
                            if let Some(g) = guard.as_mut() {
                                g.end = CallEnd::of_error(&*e);
                            }
                            Err(e)
                        }
                    });
                }
            };
            state.set(next);
        }
    }
}
