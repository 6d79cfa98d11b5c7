use super::WindowGuard;
use super::decide::{Admit, Step};
use super::future::{Deferred, ResponseFuture};
use super::layer::Shared;
use crate::BoxError;
use crate::body::HoldBody;
use crate::extract::SubjectExtractor;
use crate::spawn::poll_now;
use http::{Request, Response};
use portcullis_core::{Clock, WindowStore};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// Anchored-window quotas around a service (W1–W10). Built by
/// [`AnchoredWindowLayer`](super::AnchoredWindowLayer).
pub struct AnchoredWindow<S, St, X, C> {
    pub(crate) inner: S,
    pub(crate) shared: Arc<Shared<St, X, C>>,
}

layer_service!(impl<S, St, X, C> AnchoredWindow<S, St, X, C>);

impl<S, St, X, C, ReqB, ResB> Service<Request<ReqB>> for AnchoredWindow<S, St, X, C>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    St: WindowStore,
    X: SubjectExtractor<ReqB>,
    C: Clock,
    ResB: http_body::Body,
{
    type Response = Response<HoldBody<ResB, WindowGuard<St>>>;
    type Error = BoxError;
    type Future = ResponseFuture<S, ReqB, St, X, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Decided in `call`; readiness is the inner service's (L1).
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let subject = match self.shared.config.extractor.extract(&req) {
            Ok(s) => s,
            Err(r) => return ResponseFuture::rejected(r),
        };
        let demand = crate::extensions::demand(&req);
        let recorder = crate::extensions::usage_recorder(&mut req);
        let claim = req
            .extensions()
            .get::<crate::extensions::SlotClaim>()
            .cloned();
        let Some((mut admit, mut step)) =
            Admit::start(&self.shared, subject, demand, recorder, claim)
        else {
            return ResponseFuture::called(self.inner.call(req), None, ());
        };
        if admit.has_claim() {
            req.extensions_mut()
                .remove::<crate::extensions::SlotClaim>();
        }
        // The in-memory store answers at once: decide here. Anything that must wait
        // (a Redis answer, a W10 sleep) continues in the future.
        loop {
            step = match step {
                Step::Ask(mut fut) => match poll_now(&mut fut) {
                    Some(answer) => admit.on_answer(answer),
                    None => {
                        return ResponseFuture::deferred(Step::Ask(fut), self.defer(req, admit));
                    }
                },
                Step::Admitted(guard) => {
                    req.extensions_mut().insert(admit.admitted_under());
                    return ResponseFuture::called(self.inner.call(req), Some(guard), ());
                }
                Step::Unlimited => {
                    req.extensions_mut().insert(admit.admitted_under());
                    return ResponseFuture::called(self.inner.call(req), None, ());
                }
                Step::Joint(mut fut, windows) => match poll_now(&mut fut) {
                    Some(answer) => admit.on_joint_answer(answer, windows),
                    None => {
                        let step = Step::Joint(fut, windows);
                        return ResponseFuture::deferred(step, self.defer(req, admit));
                    }
                },
                Step::Reject(r) => return ResponseFuture::rejected(r),
                sleep @ Step::Sleep(_) => {
                    return ResponseFuture::deferred(sleep, self.defer(req, admit));
                }
            };
        }
    }
}

impl<S: Clone, St, X, C> AnchoredWindow<S, St, X, C> {
    fn defer<ReqB>(
        &mut self,
        req: Request<ReqB>,
        admit: Admit<St, X, C>,
    ) -> Box<Deferred<S, ReqB, St, X, C>> {
        let svc = crate::future::take_ready(&mut self.inner);
        Box::new(Deferred {
            req: Some(req),
            svc,
            admit,
        })
    }
}
