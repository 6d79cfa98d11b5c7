use super::attempt::{Planned, Run, take_candidates};
use super::future::ResponseFuture;
use super::layer::Shared;
use super::{AnswerBody, FailoverBody, Inner};
use crate::BoxError;
use http::{Request, Response};
use portcullis_core::{Clock, LayerKind};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::Service;
use tracing::Instrument;

/// Attempts across channels around a service (F1–F11). Built by
/// [`FailoverLayer`](super::FailoverLayer).
pub struct Failover<S, C> {
    pub(crate) inner: S,
    pub(crate) shared: Arc<Shared<C>>,
}

layer_service!(impl<S, C> Failover<S, C>);

impl<S, C, ReqB, ResB> Service<Request<ReqB>> for Failover<S, C>
where
    // (The `Response` bound names the answer's body for the impl.)
    S: Service<Request<ReqB>, Response = Response<ResB>> + Inner<ReqB, ResB>,
    C: Clock,
    ReqB: Clone + Send + 'static,
    ResB: AnswerBody,
{
    type Response = Response<FailoverBody<ResB>>;
    type Error = BoxError;
    type Future = ResponseFuture<S, C, ReqB, ResB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Decided in `call`; readiness is the inner service's (L1).
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let in_flight = crate::gauge::InFlight::enter(LayerKind::Failover);
        let candidates = match take_candidates(&mut req) {
            Ok(c) => c,
            // Nothing to fail over between: one call, passed through.
            Err(dialect) => {
                return ResponseFuture::direct(self.inner.call(req), dialect, in_flight);
            }
        };
        let shared = self.shared.clone();
        let mut run = Run::start(shared, self.inner.clone(), req, candidates, in_flight);
        match run.plan() {
            Planned::Stop(e) => ResponseFuture::failed(e),
            // The first attempt goes to the service that was driven to readiness (later
            // ones drive a clone of it), and never waits: a backoff follows a failure.
            Planned::Send(wait, candidates) => {
                debug_assert!(wait.is_zero(), "nothing was sent yet");
                let (attempt, span) = run.attempt(candidates);
                let fut = span.in_scope(|| self.inner.call(attempt));
                ResponseFuture::called(fut.instrument(span), run)
            }
        }
    }
}
