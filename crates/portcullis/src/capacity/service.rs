use super::decide::{Probe, start};
use super::future::{Pending, ResponseFuture, Served};
use super::no_upstream;
use super::queue::{CapacityGuard, Counters, Shared};
use crate::BoxError;
use crate::body::HoldBody;
use http::{Request, Response};
use portcullis_core::{Candidates, CapacityStore, Chosen};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// Per-channel capacity with a fair queue around a service (Q1–Q5). Built by
/// [`CapacityQueueLayer`](super::CapacityQueueLayer).
pub struct CapacityQueue<S, St: CapacityStore> {
    pub(crate) inner: S,
    pub(crate) shared: Arc<Shared<St>>,
}

layer_service!(impl<S, St: CapacityStore> CapacityQueue<S, St>);

impl<S, St, ReqB, ResB> Service<Request<ReqB>> for CapacityQueue<S, St>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    St: CapacityStore,
    ResB: http_body::Body,
{
    type Response = Response<HoldBody<ResB, CapacityGuard<St>>>;
    type Error = BoxError;
    type Future = ResponseFuture<S, ReqB, St>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Capacity is decided in `call`: readiness reserves nothing (L1).
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let Some(candidates) = req.extensions().get::<Candidates>().cloned() else {
            return ResponseFuture::called(self.inner.call(req), None, Served::at_once(None));
        };
        if candidates.0.is_empty() {
            return ResponseFuture::rejected(no_upstream());
        }
        // The in-memory store answers at once: a channel with room is decided here,
        // with no state machine and no service clone.
        let prefetched = req
            .extensions_mut()
            .remove::<crate::extensions::Prefetched>();
        match start(&self.shared, &candidates.0, prefetched.as_ref()) {
            Probe::Admit { index, guard } => {
                Counters::bump(&self.shared.state.counters.admitted);
                let chosen = candidates.0[index].clone();
                req.extensions_mut().insert(Chosen(chosen.clone()));
                ResponseFuture::called(self.inner.call(req), guard, Served::at_once(Some(chosen)))
            }
            Probe::Refuse(r) => ResponseFuture::rejected(r),
            next => {
                let svc = crate::future::take_ready(&mut self.inner);
                let pending = Pending::new(req, svc, candidates, self.shared.clone());
                ResponseFuture::pending(next, pending)
            }
        }
    }
}
