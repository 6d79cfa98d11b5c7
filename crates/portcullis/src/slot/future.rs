use super::decide::{Answer, backoff};
use super::layer::Shared;
use super::{SlotGuard, busy};
use crate::extensions::SlotClaim;
use crate::future::{Around, Decided, Pending};
use http::Request;
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

/// What the decision waits for.
enum Wait<St: SlotStore> {
    Acquire(St::Future<SlotDecision>),
    Sleep(Pin<Box<Sleep>>),
}

/// The slot still undecided: what it waits for, and the request.
pub(crate) struct Acquiring<S, ReqB, St: SlotStore, X, C> {
    wait: Wait<St>,
    deferred: Box<Deferred<S, ReqB, St, X, C>>,
}

/// After a "full" answer: sleep and ask again, or refuse once `max_wait` is spent.
fn wait_or_reject<S, ReqB, St: SlotStore, X, C>(
    d: &mut Deferred<S, ReqB, St, X, C>,
) -> Result<Wait<St>, Rejection> {
    let waited = d.started.elapsed();
    let max = d.shared.config.max_wait;
    if waited >= max {
        return Err(busy());
    }
    let pause = backoff(d.attempt, max - waited);
    d.attempt += 1;
    Ok(Wait::Sleep(Box::pin(tokio::time::sleep(pause))))
}

impl<S, ReqB, St, X, C> Pending<S::Future, SlotGuard<St>, Option<Box<Joint<St, X, C>>>>
    for Acquiring<S, ReqB, St, X, C>
where
    S: Service<Request<ReqB>>,
    St: SlotStore,
{
    fn poll_decided(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Decided<S::Future, SlotGuard<St>, Option<Box<Joint<St, X, C>>>> {
        loop {
            let d = &mut self.deferred;
            self.wait = match &mut self.wait {
                Wait::Acquire(acquire) => {
                    let answer = ready!(Pin::new(acquire).poll(cx));
                    match d.shared.answer(d.key.clone(), answer) {
                        Answer::Go(guard) => {
                            let req = d.req.take().expect("request taken once");
                            return Poll::Ready(Ok((d.svc.call(req), guard, None)));
                        }
                        Answer::Full => match wait_or_reject(d) {
                            Ok(wait) => wait,
                            Err(r) => return Poll::Ready(Err(r)),
                        },
                        Answer::Refuse(r) => return Poll::Ready(Err(r)),
                    }
                }
                Wait::Sleep(sleep) => {
                    ready!(sleep.as_mut().poll(cx));
                    Wait::Acquire(d.shared.ask(&d.key, d.limit))
                }
            };
        }
    }
}

impl<St: SlotStore, X, C> Around<SlotGuard<St>> for Option<Box<Joint<St, X, C>>> {
    /// A slot decided by this layer while the inner future waits: the decision first.
    fn before(
        &mut self,
        guard: &mut Option<SlotGuard<St>>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), Rejection>> {
        if let Some(j) = self.as_mut() {
            if let Some((_, acquire)) = j.gate.as_mut() {
                let answer = ready!(Pin::new(acquire).poll(cx));
                let (key, _) = j.gate.take().expect("gate taken once");
                match j.shared.answer(key, answer) {
                    Answer::Go(g) => *guard = g,
                    Answer::Full => return Poll::Ready(Err(busy())),
                    Answer::Refuse(r) => return Poll::Ready(Err(r)),
                }
            }
        }
        Poll::Ready(Ok(()))
    }

    /// A window layer below may have taken the slot meanwhile.
    fn after_poll(&mut self, guard: &mut Option<SlotGuard<St>>) {
        if guard.is_none() {
            if let Some(j) = self.as_ref() {
                if let Some(c) = &j.claim {
                    if let Some(lease) = c.take_lease() {
                        *guard = Some(j.guard(c.key().clone(), lease));
                    }
                }
            }
        }
    }
}

gate_future! {
    /// Response future of [`ConcurrencySlot`](super::ConcurrencySlot).
    pub struct ResponseFuture<S, ReqB, St, X, C>
    holds SlotGuard, deciding Acquiring<S, ReqB, St, X, C>, around Option<Box<Joint<St, X, C>>>
    where St: SlotStore;
}

impl<S, ReqB, St, X, C> ResponseFuture<S, ReqB, St, X, C>
where
    S: Service<Request<ReqB>>,
    St: SlotStore,
{
    pub(crate) fn joined(fut: S::Future, joint: Box<Joint<St, X, C>>) -> Self {
        Self::called(fut, None, Some(joint))
    }
    pub(crate) fn acquiring(
        acquire: St::Future<SlotDecision>,
        deferred: Box<Deferred<S, ReqB, St, X, C>>,
    ) -> Self {
        Self::deciding(Acquiring {
            wait: Wait::Acquire(acquire),
            deferred,
        })
    }
    pub(crate) fn waiting(mut deferred: Box<Deferred<S, ReqB, St, X, C>>) -> Self {
        match wait_or_reject(&mut deferred) {
            Ok(wait) => Self::deciding(Acquiring { wait, deferred }),
            Err(r) => Self::rejected(r),
        }
    }
}
