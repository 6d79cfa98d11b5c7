use super::decide::decide;
use super::layer::Shared;
use super::{BillingGuard, Settlement};
use crate::BoxError;
use crate::body::HoldBody;
use http::{Request, Response};
use pin_project_lite::pin_project;
use portcullis_core::{BillingDecision, BillingStore, Rejection};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tower_service::Service;

/// A request whose billing decision is not in yet.
pub(crate) struct Deferred<S, ReqB, St: BillingStore, C> {
    pub(crate) req: Option<Request<ReqB>>,
    pub(crate) svc: S,
    pub(crate) settlement: Option<Settlement<St>>,
    pub(crate) shared: Arc<Shared<St, C>>,
}

impl<S, ReqB, St: BillingStore, C> Drop for Deferred<S, ReqB, St, C> {
    fn drop(&mut self) {
        // Dropped while the store's answer was still out (a client gone mid-decision):
        // the store may have reserved; a refund of the attempt undoes it, and changes
        // nothing if it had not.
        if let Some(s) = self.settlement.take() {
            s.refund("refund of an abandoned billing decision");
        }
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqB, St, C>
    where
        S: Service<Request<ReqB>>,
        St: BillingStore,
    {
        Rejected { rejection: Option<Rejection> },
        Checking { answer: St::Future<BillingDecision>, deferred: Option<Box<Deferred<S, ReqB, St, C>>> },
        Called { #[pin] fut: S::Future, guard: Option<BillingGuard<St>> },
    }
}

pin_project! {
    /// Response future of [`BillingGate`](super::BillingGate).
    pub struct ResponseFuture<S, ReqB, St, C = portcullis_core::SystemClock>
    where
        S: Service<Request<ReqB>>,
        St: BillingStore,
    {
        #[pin]
        state: State<S, ReqB, St, C>,
    }
}

impl<S, ReqB, St, C> ResponseFuture<S, ReqB, St, C>
where
    S: Service<Request<ReqB>>,
    St: BillingStore,
{
    pub(crate) fn rejected(r: Rejection) -> Self {
        Self {
            state: State::Rejected { rejection: Some(r) },
        }
    }
    pub(crate) fn called(fut: S::Future, guard: Option<BillingGuard<St>>) -> Self {
        Self {
            state: State::Called { fut, guard },
        }
    }
    pub(crate) fn checking(
        answer: St::Future<BillingDecision>,
        deferred: Box<Deferred<S, ReqB, St, C>>,
    ) -> Self {
        Self {
            state: State::Checking {
                answer,
                deferred: Some(deferred),
            },
        }
    }
}

impl<S, ReqB, St, C, ResB> Future for ResponseFuture<S, ReqB, St, C>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    St: BillingStore,
    ResB: http_body::Body,
{
    type Output = Result<Response<HoldBody<ResB, BillingGuard<St>>>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut state = self.as_mut().project().state;
            let next = match state.as_mut().project() {
                StateProj::Rejected { rejection } => {
                    let r = rejection.take().expect("polled after completion");
                    return Poll::Ready(Err(r.into()));
                }
                StateProj::Checking { answer, deferred } => {
                    let answer = ready!(Pin::new(answer).poll(cx));
                    let mut d = deferred.take().expect("polled after completion");
                    match decide(
                        &d.shared,
                        d.settlement.as_ref().expect("taken once"),
                        answer,
                    ) {
                        Ok(admitted) => {
                            let req = d.req.take().expect("request taken once");
                            let settlement = d.settlement.take().expect("taken once");
                            State::Called {
                                fut: d.svc.call(req),
                                guard: admitted.then(|| settlement.admitted()),
                            }
                        }
                        Err(r) => {
                            // Decided: nothing to undo (a store error has sent its own
                            // refund).
                            d.settlement.take();
                            State::Rejected { rejection: Some(r) }
                        }
                    }
                }
                StateProj::Called { fut, guard } => {
                    let res = ready!(fut.poll(cx)).map_err(Into::into);
                    let mut guard = guard.take();
                    return Poll::Ready(match res {
                        Ok(r) => {
                            if let Some(g) = guard.as_mut() {
                                g.end = portcullis_core::CallEnd::Answered;
                            }
                            Ok(r.map(|b| HoldBody::holding(b, guard)))
                        }
                        Err(e) => {
                            // L5: refused further in → the attempt costs nothing,
                            // unless it may have reached the provider: then it stays
                            // pending reconciliation (B4).
                            if let Some(g) = guard.as_mut() {
                                g.end = portcullis_core::CallEnd::of_error(&*e);
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
