use super::future::ResponseFuture;
use super::{ErrorMappingLayer, MappedBody, X_REQUEST_ID, request_id};
use crate::BoxError;
use http::{Request, Response};
use std::convert::Infallible;
use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// Maps every error of the inner service to a response in the client's dialect, and
/// stamps `x-request-id` on every request and response (E1–E3). Its error type is
/// [`Infallible`], so a stack with it outermost mounts in axum's `Router::layer`
/// without `HandleErrorLayer` (L2).
///
/// Built by [`ErrorMappingLayer`]; see the [module docs](super).
///
/// # Readiness
///
/// `poll_ready` delegates to the inner service, so back-pressure (`Pending`) reaches
/// the caller unchanged. When the inner `poll_ready` fails, the error cannot be
/// returned (the error type is `Infallible`), so it is kept and `poll_ready` answers
/// `Ready(Ok(()))`; `call` then renders it as the response **without calling the inner
/// service**, which never reported itself ready. tower says a service whose
/// `poll_ready` failed must be discarded, and the caller cannot know it should: the
/// failure is therefore sticky — this instance answers every later request with the
/// same rendered error and never polls the failed inner service again. A clone starts
/// fresh (tower clones carry no readiness) and asks its own inner clone.
///
/// axum's `HandleError` takes the other route: it reports ready at once and drives a
/// clone of the inner service with `oneshot` inside the response future. That needs
/// `S: Clone + Send + 'static`, a boxed future, and hides the inner back-pressure from
/// the caller (a `Buffer` or concurrency limit below it then queues in the future
/// instead of in `poll_ready`). Delegating keeps readiness honest and costs nothing.
pub struct ErrorMapping<S> {
    inner: S,
    config: ErrorMappingLayer,
    /// The error of a failed inner `poll_ready` (sticky, see above).
    failed: Option<Arc<dyn Error + Send + Sync>>,
}

impl<S> ErrorMapping<S> {
    pub(super) fn with_config(inner: S, config: ErrorMappingLayer) -> Self {
        Self {
            inner,
            config,
            failed: None,
        }
    }
}

inner_service!(impl<S> ErrorMapping<S>);

impl<S: Clone> Clone for ErrorMapping<S> {
    fn clone(&self) -> Self {
        // A clone is a fresh service: it carries neither readiness nor the failure of
        // this instance's `poll_ready`; its own inner clone will tell.
        Self::with_config(self.inner.clone(), self.config)
    }
}

impl<S: fmt::Debug> fmt::Debug for ErrorMapping<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ErrorMapping")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .field("failed", &self.failed.is_some())
            .finish()
    }
}

impl<S, ReqB, B> Service<Request<ReqB>> for ErrorMapping<S>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: Into<BoxError>,
{
    type Response = Response<MappedBody<B>>;
    type Error = Infallible;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.failed.is_some() {
            return Poll::Ready(Ok(()));
        }
        match self.inner.poll_ready(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Ready(Err(e)) => {
                let e: BoxError = e.into();
                self.failed = Some(Arc::from(e));
                Poll::Ready(Ok(()))
            }
        }
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let form = self.config.form_for(&req);
        let id = request_id::ensure(req.headers_mut());
        debug_assert!(req.headers().contains_key(X_REQUEST_ID));
        match &self.failed {
            Some(err) => ResponseFuture::ready(super::error_response(&**err, form, &id)),
            None => ResponseFuture::inner(self.inner.call(req), form, id),
        }
    }
}
