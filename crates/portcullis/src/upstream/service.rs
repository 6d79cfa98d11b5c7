use super::UpstreamGuard;
use super::decide::{Step, Walk};
use super::future::{Deferred, ResponseFuture};
use super::layer::Shared;
use crate::BoxError;
use crate::body::HoldBody;
use crate::spawn::poll_now;
use http::{Request, Response};
use portcullis_core::upstream::{RateCount, RateEstimates};
use portcullis_core::{Candidates, CapacityTake, Clock, ModelId, UsageRecorder, WindowStore};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// Provider limits around a service (U1–U4). Built by
/// [`UpstreamLimitLayer`](super::UpstreamLimitLayer).
pub struct UpstreamLimit<S, St, C> {
    pub(crate) inner: S,
    pub(crate) shared: Arc<Shared<St, C>>,
}

layer_service!(impl<S, St, C> UpstreamLimit<S, St, C>);

impl<S, St, C, ReqB, ResB> Service<Request<ReqB>> for UpstreamLimit<S, St, C>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    St: WindowStore,
    C: Clock,
    ResB: http_body::Body,
{
    type Response = Response<HoldBody<ResB, UpstreamGuard<St>>>;
    type Error = BoxError;
    type Future = ResponseFuture<S, ReqB, St, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Decided in `call`; readiness is the inner service's (L1).
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let Some(candidates) = req.extensions().get::<Candidates>().cloned() else {
            // Nothing to choose from: not this layer's request.
            return ResponseFuture::called(self.inner.call(req), None, None);
        };
        let model = req.extensions().get::<ModelId>().map(|m| m.0.clone());
        let x = req.extensions();
        let estimate = x.get::<RateEstimates>().copied().unwrap_or_else(|| {
            RateEstimates::same(
                x.get::<RateCount>()
                    .copied()
                    .unwrap_or_else(|| RateCount::all(crate::extensions::demand(&req).tokens)),
            )
        });
        let recorder = crate::extensions::usage_recorder(&mut req);
        let (mut walk, mut step) = Walk::start(self.shared.clone(), candidates, model, estimate);
        // The in-memory store answers at once: decide here. A pending answer (Redis)
        // continues in the future.
        loop {
            step = match step {
                Step::Ask(mut fut) => match poll_now(&mut fut) {
                    Some(answer) => walk.on_answer(answer.map(|a| (a, CapacityTake::NotAsked))),
                    None => {
                        let d = self.defer(req, walk, recorder);
                        return ResponseFuture::deferred(Step::Ask(fut), d);
                    }
                },
                Step::Join(mut fut) => match poll_now(&mut fut) {
                    Some(answer) => walk.on_answer(answer),
                    None => {
                        let d = self.defer(req, walk, recorder);
                        return ResponseFuture::deferred(Step::Join(fut), d);
                    }
                },
                Step::Reject(r) => return ResponseFuture::rejected(r),
                Step::Done(plan) => {
                    let (guard, after) = walk.go(plan, &mut req, recorder);
                    return ResponseFuture::called(self.inner.call(req), guard, Some(after));
                }
            };
        }
    }
}

impl<S: Clone, St, C> UpstreamLimit<S, St, C> {
    fn defer<ReqB>(
        &mut self,
        req: Request<ReqB>,
        walk: Walk<St, C>,
        recorder: UsageRecorder,
    ) -> Box<Deferred<S, ReqB, St, C>> {
        let svc = crate::future::take_ready(&mut self.inner);
        Box::new(Deferred {
            req: Some(req),
            svc,
            walk,
            recorder,
        })
    }
}
