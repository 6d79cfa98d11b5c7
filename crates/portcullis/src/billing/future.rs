use super::decide::decide;
use super::layer::Shared;
use super::{BillingGuard, Settlement};
use crate::future::{Decided, Pending};
use http::Request;
use portcullis_core::{BillingDecision, BillingStore};
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

/// The store's answer still out, and the request.
pub(crate) struct Checking<S, ReqB, St: BillingStore, C> {
    answer: St::Future<BillingDecision>,
    deferred: Box<Deferred<S, ReqB, St, C>>,
}

impl<S, ReqB, St, C> Pending<S::Future, BillingGuard<St>, ()> for Checking<S, ReqB, St, C>
where
    S: Service<Request<ReqB>>,
    St: BillingStore,
{
    fn poll_decided(&mut self, cx: &mut Context<'_>) -> Decided<S::Future, BillingGuard<St>, ()> {
        let answer = ready!(Pin::new(&mut self.answer).poll(cx));
        let d = &mut self.deferred;
        let settlement = d.settlement.take().expect("decided once");
        Poll::Ready(match decide(&d.shared, &settlement, answer) {
            Ok(admitted) => {
                let req = d.req.take().expect("request taken once");
                Ok((d.svc.call(req), admitted.then(|| settlement.admitted()), ()))
            }
            // Decided: nothing to undo (a store error has sent its own refund).
            Err(r) => Err(r),
        })
    }
}

gate_future! {
    /// Response future of [`BillingGate`](super::BillingGate).
    pub struct ResponseFuture<S, ReqB, St, C = portcullis_core::SystemClock>
    holds BillingGuard, deciding Checking<S, ReqB, St, C>, around ()
    where St: BillingStore;
}

impl<S, ReqB, St, C> ResponseFuture<S, ReqB, St, C>
where
    S: Service<Request<ReqB>>,
    St: BillingStore,
{
    pub(crate) fn checking(
        answer: St::Future<BillingDecision>,
        deferred: Box<Deferred<S, ReqB, St, C>>,
    ) -> Self {
        Self::deciding(Checking { answer, deferred })
    }
}
