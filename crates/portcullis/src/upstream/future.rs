use super::UpstreamGuard;
use super::decide::{After, Step, Walk};
use super::layer::ChannelFuture;
use crate::future::{Around, Called, Decided, Pending};
use http::{Request, Response};
use portcullis_core::{CapacityTake, Clock, JointAdmission, UsageRecorder, WindowStore};
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

/// What the walk waits for.
enum Wait<St: WindowStore> {
    Ask(St::Future<JointAdmission>),
    Join(ChannelFuture),
}

/// The walk still out: what it waits for, and the request.
pub(crate) struct Walking<S, ReqB, St: WindowStore, C> {
    wait: Wait<St>,
    deferred: Option<Box<Deferred<S, ReqB, St, C>>>,
}

/// Calls the inner service with what the walk decided.
fn go<S, ReqB, St, C>(
    d: Deferred<S, ReqB, St, C>,
    plan: super::decide::Plan,
) -> Called<S::Future, UpstreamGuard<St>, Option<After<St, C>>>
where
    S: Service<Request<ReqB>>,
    St: WindowStore,
    C: Clock,
{
    let Deferred {
        req,
        mut svc,
        walk,
        recorder,
    } = d;
    let mut req = req.expect("request taken once");
    let (guard, after) = walk.go(plan, &mut req, recorder);
    (svc.call(req), guard, Some(after))
}

impl<S, ReqB, St, C> Pending<S::Future, UpstreamGuard<St>, Option<After<St, C>>>
    for Walking<S, ReqB, St, C>
where
    S: Service<Request<ReqB>>,
    St: WindowStore,
    C: Clock,
{
    fn poll_decided(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Decided<S::Future, UpstreamGuard<St>, Option<After<St, C>>> {
        loop {
            let d = self.deferred.as_mut().expect("polled after completion");
            let step = match &mut self.wait {
                Wait::Ask(answer) => {
                    let answer = ready!(Pin::new(answer).poll(cx));
                    d.walk
                        .on_answer(answer.map(|a| (a, CapacityTake::NotAsked)))
                }
                Wait::Join(answer) => d.walk.on_answer(ready!(answer.as_mut().poll(cx))),
            };
            self.wait = match step {
                Step::Ask(answer) => Wait::Ask(answer),
                Step::Join(answer) => Wait::Join(answer),
                Step::Reject(r) => return Poll::Ready(Err(r)),
                Step::Done(plan) => {
                    let d = self.deferred.take().expect("polled after completion");
                    return Poll::Ready(Ok(go(*d, plan)));
                }
            };
        }
    }
}

impl<St: WindowStore, C: Clock> Around<UpstreamGuard<St>> for Option<After<St, C>> {
    fn answered<B>(&mut self, res: &mut Response<B>, guard: Option<&mut UpstreamGuard<St>>) {
        if let Some(a) = self.take() {
            a.answered(res, guard);
        }
    }
}

gate_future! {
    /// Response future of [`UpstreamLimit`](super::UpstreamLimit).
    pub struct ResponseFuture<S, ReqB, St, C>
    holds UpstreamGuard, deciding Walking<S, ReqB, St, C>, around Option<After<St, C>>
    where St: WindowStore, C: Clock;
}

impl<S, ReqB, St, C> ResponseFuture<S, ReqB, St, C>
where
    S: Service<Request<ReqB>>,
    St: WindowStore,
    C: Clock,
{
    /// Waits for what `step` asks, then walks on.
    pub(crate) fn deferred(step: Step<St>, d: Box<Deferred<S, ReqB, St, C>>) -> Self {
        let wait = match step {
            Step::Ask(answer) => Wait::Ask(answer),
            Step::Join(answer) => Wait::Join(answer),
            Step::Reject(r) => return Self::rejected(r),
            Step::Done(plan) => {
                let (fut, guard, after) = go(*d, plan);
                return Self::called(fut, guard, after);
            }
        };
        Self::deciding(Walking {
            wait,
            deferred: Some(d),
        })
    }
}
