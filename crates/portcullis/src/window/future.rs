use super::WindowGuard;
use super::decide::{Admit, Step};
use crate::future::{Decided, Pending};
use crate::joint::JointFuture;
use http::Request;
use portcullis_core::{Admission, Clock, WindowStore};
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

/// What the decision waits for.
enum Wait<St: WindowStore> {
    Ask(St::Future<Admission>),
    /// `true`: the windows were asked too.
    Joint(JointFuture, bool),
    Sleep(Pin<Box<Sleep>>),
}

/// The decision still out: what it waits for, and the request.
pub(crate) struct Deciding<S, ReqB, St: WindowStore, X, C> {
    wait: Wait<St>,
    deferred: Box<Deferred<S, ReqB, St, X, C>>,
}

impl<S, ReqB, St: WindowStore, X, C> Deferred<S, ReqB, St, X, C>
where
    S: Service<Request<ReqB>>,
{
    /// Calls the inner service, admitted under the decided scope.
    fn call(&mut self) -> S::Future {
        let mut req = self.req.take().expect("request taken once");
        req.extensions_mut().insert(self.admit.admitted_under());
        self.svc.call(req)
    }
}

impl<S, ReqB, St, X, C> Pending<S::Future, WindowGuard<St>, ()> for Deciding<S, ReqB, St, X, C>
where
    S: Service<Request<ReqB>>,
    St: WindowStore,
    C: Clock,
{
    fn poll_decided(&mut self, cx: &mut Context<'_>) -> Decided<S::Future, WindowGuard<St>, ()> {
        loop {
            let admit = &mut self.deferred.admit;
            let step = match &mut self.wait {
                Wait::Ask(answer) => admit.on_answer(ready!(Pin::new(answer).poll(cx))),
                Wait::Joint(answer, windows) => {
                    admit.on_joint_answer(ready!(answer.as_mut().poll(cx)), *windows)
                }
                Wait::Sleep(sleep) => {
                    ready!(sleep.as_mut().poll(cx));
                    admit.ask_again()
                }
            };
            self.wait = match step {
                Step::Admitted(guard) => {
                    return Poll::Ready(Ok((self.deferred.call(), Some(guard), ())));
                }
                Step::Unlimited => return Poll::Ready(Ok((self.deferred.call(), None, ()))),
                Step::Reject(r) => return Poll::Ready(Err(r)),
                Step::Ask(answer) => Wait::Ask(answer),
                Step::Joint(answer, windows) => Wait::Joint(answer, windows),
                Step::Sleep(after) => Wait::Sleep(Box::pin(tokio::time::sleep(after))),
            };
        }
    }
}

gate_future! {
    /// Response future of [`AnchoredWindow`](super::AnchoredWindow).
    pub struct ResponseFuture<S, ReqB, St, X, C>
    holds WindowGuard, deciding Deciding<S, ReqB, St, X, C>, around ()
    where St: WindowStore, C: Clock;
}

impl<S, ReqB, St, X, C> ResponseFuture<S, ReqB, St, X, C>
where
    S: Service<Request<ReqB>>,
    St: WindowStore,
{
    /// Waits for what `step` asks (a store answer or a W10 sleep), then decides on.
    pub(crate) fn deferred(step: Step<St>, mut d: Box<Deferred<S, ReqB, St, X, C>>) -> Self {
        let wait = match step {
            Step::Ask(answer) => Wait::Ask(answer),
            Step::Joint(answer, windows) => Wait::Joint(answer, windows),
            Step::Sleep(after) => Wait::Sleep(Box::pin(tokio::time::sleep(after))),
            Step::Reject(r) => return Self::rejected(r),
            Step::Admitted(guard) => return Self::called(d.call(), Some(guard), ()),
            Step::Unlimited => return Self::called(d.call(), None, ()),
        };
        Self::deciding(Deciding { wait, deferred: d })
    }
}
