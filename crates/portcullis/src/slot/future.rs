use super::layer::Shared;
use super::{Answer, SlotGuard, backoff, busy};
use crate::BoxError;
use crate::body::{Hold, HoldBody};
use crate::extensions::SlotClaim;
use http::{Request, Response};
use pin_project_lite::pin_project;
use portcullis_core::{Rejection, SlotDecision, SlotStore, SubjectKey};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tokio::time::{Instant, Sleep};
use tower_service::Service;

/// A slot decided apart from the usual path (see `crate::joint`): by a window layer
/// below (`claim`), or by this layer while the inner future waits to be polled
/// (`gate`).
pub(crate) struct Joint<St: SlotStore, X, C> {
    shared: Arc<Shared<St, X, C>>,
    claim: Option<SlotClaim>,
    gate: Option<(SubjectKey, St::Future<SlotDecision>)>,
}

impl<St: SlotStore, X, C> Joint<St, X, C> {
    pub(crate) fn claimed(shared: Arc<Shared<St, X, C>>, claim: SlotClaim) -> Box<Self> {
        Box::new(Self {
            shared,
            claim: Some(claim),
            gate: None,
        })
    }
    pub(crate) fn gated(
        shared: Arc<Shared<St, X, C>>,
        key: SubjectKey,
        acquire: St::Future<SlotDecision>,
    ) -> Box<Self> {
        Box::new(Self {
            shared,
            claim: None,
            gate: Some((key, acquire)),
        })
    }

    fn guard(&self, key: SubjectKey, lease: portcullis_core::LeaseId) -> SlotGuard<St> {
        SlotGuard::new(&self.shared, key, lease)
    }
}
/// A request whose slot is not decided yet.
pub(crate) struct Deferred<S, ReqB, St, X, C> {
    req: Option<Request<ReqB>>,
    svc: S,
    key: SubjectKey,
    limit: u32,
    started: Instant,
    attempt: u32,
    shared: Arc<Shared<St, X, C>>,
}

impl<S, ReqB, St, X, C> Deferred<S, ReqB, St, X, C> {
    pub(crate) fn new(
        req: Request<ReqB>,
        svc: S,
        key: SubjectKey,
        limit: u32,
        shared: Arc<Shared<St, X, C>>,
    ) -> Box<Self> {
        Box::new(Self {
            req: Some(req),
            svc,
            key,
            limit,
            started: Instant::now(),
            attempt: 0,
            shared,
        })
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqB, St, X, C>
    where
        S: Service<Request<ReqB>>,
        St: SlotStore,
    {
        Rejected { rejection: Option<Rejection> },
        Acquiring { acquire: St::Future<SlotDecision>, deferred: Option<Box<Deferred<S, ReqB, St, X, C>>> },
        Waiting { sleep: Pin<Box<Sleep>>, deferred: Option<Box<Deferred<S, ReqB, St, X, C>>> },
        Called { #[pin] fut: S::Future, guard: Option<SlotGuard<St>>, joint: Option<Box<Joint<St, X, C>>> },
    }
}

pin_project! {
    /// Response future of [`ConcurrencySlot`](super::ConcurrencySlot).
    pub struct ResponseFuture<S, ReqB, St, X, C>
    where
        S: Service<Request<ReqB>>,
        St: SlotStore,
    {
        #[pin]
        state: State<S, ReqB, St, X, C>,
    }
}

impl<S, ReqB, St, X, C> ResponseFuture<S, ReqB, St, X, C>
where
    S: Service<Request<ReqB>>,
    St: SlotStore,
{
    pub(crate) fn rejected(r: Rejection) -> Self {
        Self {
            state: State::Rejected { rejection: Some(r) },
        }
    }
    pub(crate) fn called(fut: S::Future, guard: Option<SlotGuard<St>>) -> Self {
        Self {
            state: State::Called {
                fut,
                guard,
                joint: None,
            },
        }
    }
    pub(crate) fn joined(fut: S::Future, joint: Box<Joint<St, X, C>>) -> Self {
        Self {
            state: State::Called {
                fut,
                guard: None,
                joint: Some(joint),
            },
        }
    }
    pub(crate) fn acquiring(
        acquire: St::Future<SlotDecision>,
        deferred: Box<Deferred<S, ReqB, St, X, C>>,
    ) -> Self {
        Self {
            state: State::Acquiring {
                acquire,
                deferred: Some(deferred),
            },
        }
    }
    pub(crate) fn waiting(deferred: Box<Deferred<S, ReqB, St, X, C>>) -> Self {
        let mut f = Self {
            state: State::Rejected { rejection: None },
        };
        f.state = wait_or_reject(deferred);
        f
    }
}

/// After a "full" answer: sleep and ask again, or refuse once `max_wait` is spent.
fn wait_or_reject<S, ReqB, St, X, C>(
    mut d: Box<Deferred<S, ReqB, St, X, C>>,
) -> State<S, ReqB, St, X, C>
where
    S: Service<Request<ReqB>>,
    St: SlotStore,
{
    let waited = d.started.elapsed();
    let max = d.shared.config.max_wait;
    if waited >= max {
        return State::Rejected {
            rejection: Some(busy()),
        };
    }
    let pause = backoff(d.attempt, max - waited);
    d.attempt += 1;
    State::Waiting {
        sleep: Box::pin(tokio::time::sleep(pause)),
        deferred: Some(d),
    }
}

impl<S, ReqB, St, X, C, ResB> Future for ResponseFuture<S, ReqB, St, X, C>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    St: SlotStore,
    ResB: http_body::Body,
{
    type Output = Result<Response<HoldBody<ResB, SlotGuard<St>>>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut state = self.as_mut().project().state;
            let next = match state.as_mut().project() {
                StateProj::Rejected { rejection } => {
                    let r = rejection.take().expect("polled after completion");
                    return Poll::Ready(Err(r.into()));
                }
                StateProj::Acquiring { acquire, deferred } => {
                    let answer = ready!(Pin::new(acquire).poll(cx));
                    let mut d = deferred.take().expect("polled after completion");
                    match d.shared.answer(d.key.clone(), answer) {
                        Answer::Go(guard) => {
                            let req = d.req.take().expect("request taken once");
                            State::Called {
                                fut: d.svc.call(req),
                                guard,
                                joint: None,
                            }
                        }
                        Answer::Full => wait_or_reject(d),
                        Answer::Refuse(r) => State::Rejected { rejection: Some(r) },
                    }
                }
                StateProj::Waiting { sleep, deferred } => {
                    ready!(sleep.as_mut().poll(cx));
                    let d = deferred.take().expect("polled after completion");
                    let ttl = portcullis_core::clock::millis(d.shared.config.lease_ttl);
                    State::Acquiring {
                        acquire: d.shared.config.store.acquire(&d.key, d.limit, ttl),
                        deferred: Some(d),
                    }
                }
                StateProj::Called { fut, guard, joint } => {
                    if let Some(j) = joint.as_mut() {
                        if let Some((_, acquire)) = j.gate.as_mut() {
                            let answer = ready!(Pin::new(acquire).poll(cx));
                            let (key, _) = j.gate.take().expect("gate taken once");
                            match j.shared.answer(key, answer) {
                                Answer::Go(g) => *guard = g,
                                Answer::Full => return Poll::Ready(Err(busy().into())),
                                Answer::Refuse(r) => return Poll::Ready(Err(r.into())),
                            }
                        }
                    }
                    let polled = fut.poll(cx);
                    // A window layer below may have taken the slot meanwhile.
                    if guard.is_none() {
                        if let Some(j) = joint.as_ref() {
                            if let Some(c) = &j.claim {
                                if let Some(lease) = c.take_lease() {
                                    *guard = Some(j.guard(c.key().clone(), lease));
                                }
                            }
                        }
                    }
                    let Poll::Ready(res) = polled else {
                        if let Some(g) = guard.as_mut() {
                            g.keep_alive(cx);
                        }
                        return Poll::Pending;
                    };
                    let res = res.map_err(Into::into);
                    let guard = guard.take();
                    return Poll::Ready(res.map(|r| r.map(|b| HoldBody::holding(b, guard))));
                }
            };
            state.set(next);
        }
    }
}
