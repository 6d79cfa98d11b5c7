use super::WindowGuard;
use super::decide::{Admit, Step};
use crate::BoxError;
use crate::body::HoldBody;
use crate::joint::JointFuture;
use http::{Request, Response};
use pin_project_lite::pin_project;
use portcullis_core::{Admission, CallEnd, Clock, Rejection, WindowStore};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::time::Sleep;
use tower_service::Service;

/// A request whose admission is not decided yet.
pub(crate) struct Deferred<S, ReqB, St, X, C> {
    pub(crate) req: Option<Request<ReqB>>,
    pub(crate) svc: S,
    pub(crate) admit: Admit<St, X, C>,
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqB, St, X, C>
    where
        S: Service<Request<ReqB>>,
        St: WindowStore,
    {
        Rejected { rejection: Option<Rejection> },
        Asking { answer: St::Future<Admission>, deferred: Option<Box<Deferred<S, ReqB, St, X, C>>> },
        Joining { answer: JointFuture, windows: bool, deferred: Option<Box<Deferred<S, ReqB, St, X, C>>> },
        Sleeping { sleep: Pin<Box<Sleep>>, deferred: Option<Box<Deferred<S, ReqB, St, X, C>>> },
        Called { #[pin] fut: S::Future, guard: Option<WindowGuard<St>> },
    }
}

pin_project! {
    /// Response future of [`AnchoredWindow`](super::AnchoredWindow).
    pub struct ResponseFuture<S, ReqB, St, X, C>
    where
        S: Service<Request<ReqB>>,
        St: WindowStore,
    {
        #[pin]
        state: State<S, ReqB, St, X, C>,
    }
}

impl<S, ReqB, St, X, C> ResponseFuture<S, ReqB, St, X, C>
where
    S: Service<Request<ReqB>>,
    St: WindowStore,
{
    pub(crate) fn rejected(r: Rejection) -> Self {
        Self {
            state: State::Rejected { rejection: Some(r) },
        }
    }
    pub(crate) fn called(fut: S::Future, guard: Option<WindowGuard<St>>) -> Self {
        Self {
            state: State::Called { fut, guard },
        }
    }
    pub(crate) fn deferred(step: Step<St>, d: Box<Deferred<S, ReqB, St, X, C>>) -> Self {
        Self {
            state: transition(step, d),
        }
    }
}

/// The state a step leads to.
fn transition<S, ReqB, St, X, C>(
    step: Step<St>,
    mut d: Box<Deferred<S, ReqB, St, X, C>>,
) -> State<S, ReqB, St, X, C>
where
    S: Service<Request<ReqB>>,
    St: WindowStore,
{
    match step {
        Step::Ask(answer) => State::Asking {
            answer,
            deferred: Some(d),
        },
        Step::Joint(answer, windows) => State::Joining {
            answer,
            windows,
            deferred: Some(d),
        },
        Step::Sleep(after) => State::Sleeping {
            sleep: Box::pin(tokio::time::sleep(after)),
            deferred: Some(d),
        },
        Step::Reject(r) => State::Rejected { rejection: Some(r) },
        Step::Admitted(guard) => {
            let mut req = d.req.take().expect("request taken once");
            req.extensions_mut().insert(d.admit.admitted_under());
            State::Called {
                fut: d.svc.call(req),
                guard: Some(guard),
            }
        }
        Step::Unlimited => {
            let mut req = d.req.take().expect("request taken once");
            req.extensions_mut().insert(d.admit.admitted_under());
            State::Called {
                fut: d.svc.call(req),
                guard: None,
            }
        }
    }
}

impl<S, ReqB, St, X, C, ResB> Future for ResponseFuture<S, ReqB, St, X, C>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    St: WindowStore,
    C: Clock,
    ResB: http_body::Body,
{
    type Output = Result<Response<HoldBody<ResB, WindowGuard<St>>>, BoxError>;

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
                    let step = d.admit.on_answer(answer);
                    transition(step, d)
                }
                StateProj::Joining {
                    answer,
                    windows,
                    deferred,
                } => {
                    let answer = ready!(answer.as_mut().poll(cx));
                    let mut d = deferred.take().expect("polled after completion");
                    let step = d.admit.on_joint_answer(answer, *windows);
                    transition(step, d)
                }
                StateProj::Sleeping { sleep, deferred } => {
                    ready!(sleep.as_mut().poll(cx));
                    let d = deferred.take().expect("polled after completion");
                    let step = d.admit.ask_again();
                    transition(step, d)
                }
                StateProj::Called { fut, guard } => {
                    let res = ready!(fut.poll(cx)).map_err(Into::into);
                    let mut guard = guard.take();
                    return Poll::Ready(match res {
                        Ok(r) => {
                            if let Some(g) = guard.as_mut() {
                                g.end = CallEnd::Answered;
                            }
                            Ok(r.map(|b| HoldBody::holding(b, guard)))
                        }
                        Err(e) => {
                            // L5: refused further in → this request consumed nothing,
                            // unless it may have reached the provider (B4).
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
