use super::decide::Answer;
use super::future::{Deferred, Joint, ResponseFuture};
use super::layer::Shared;
use super::{SlotGuard, busy};
use crate::BoxError;
use crate::body::HoldBody;
use crate::extensions::SlotClaim;
use crate::extract::SubjectExtractor;
use crate::spawn::poll_now;
use http::{Request, Response};
use portcullis_core::{Clock, SlotStore};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// Per-subject in-flight slots around a service (C1–C5). Built by
/// [`ConcurrencySlotLayer`](super::ConcurrencySlotLayer).
pub struct ConcurrencySlot<S, St, X, C> {
    pub(crate) inner: S,
    pub(crate) shared: Arc<Shared<St, X, C>>,
}

layer_service!(impl<S, St, X, C> ConcurrencySlot<S, St, X, C>);

impl<S, St, X, C, ReqB, ResB> Service<Request<ReqB>> for ConcurrencySlot<S, St, X, C>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    St: SlotStore,
    X: SubjectExtractor<ReqB>,
    C: Clock,
    ResB: http_body::Body,
{
    type Response = Response<HoldBody<ResB, SlotGuard<St>>>;
    type Error = BoxError;
    type Future = ResponseFuture<S, ReqB, St, X, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is the inner service's alone: the slot is decided in `call`, so an
        // idle connection polled for readiness holds nothing (L1).
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let shared = &self.shared;
        let subject = match shared.config.extractor.extract(&req) {
            Ok(s) => s,
            Err(r) => return ResponseFuture::rejected(r),
        };
        let limit = subject.concurrency_limit(shared.config.clock.now());
        if limit == 0 {
            return ResponseFuture::called(self.inner.call(req), None, None);
        }
        let ttl = portcullis_core::clock::millis(shared.config.own.lease_ttl);
        if let Some(side) = shared
            .side
            .as_ref()
            .filter(|_| shared.config.max_wait.is_zero())
        {
            // Offer the decision to a window layer below (see `crate::joint`).
            let ask = portcullis_core::SlotAsk {
                key: subject.key.clone(),
                limit,
                ttl,
            };
            let claim = SlotClaim::new(ask, side.clone());
            req.extensions_mut().insert(claim.clone());
            let fut = self.inner.call(req);
            if !claim.keep() {
                return ResponseFuture::joined(fut, Joint::claimed(shared.clone(), claim));
            }
            // Nobody took it: acquire here, before the inner future is first polled.
            let mut acquire = shared.ask(&subject.key, limit);
            return match poll_now(&mut acquire) {
                Some(answer) => match shared.answer(subject.key, answer) {
                    Answer::Go(guard) => ResponseFuture::called(fut, guard, None),
                    Answer::Full => ResponseFuture::rejected(busy()),
                    Answer::Refuse(r) => ResponseFuture::rejected(r),
                },
                None => {
                    ResponseFuture::joined(fut, Joint::gated(shared.clone(), subject.key, acquire))
                }
            };
        }
        let mut acquire = shared.ask(&subject.key, limit);
        // The in-memory store answers at once: decide here, with no state machine and
        // no service clone. A pending answer (Redis) continues in the future.
        let answered = match poll_now(&mut acquire) {
            Some(answer) => match shared.answer(subject.key.clone(), answer) {
                Answer::Go(guard) => {
                    return ResponseFuture::called(self.inner.call(req), guard, None);
                }
                Answer::Refuse(r) => return ResponseFuture::rejected(r),
                Answer::Full if shared.config.max_wait.is_zero() => {
                    return ResponseFuture::rejected(busy());
                }
                Answer::Full => true,
            },
            None => false,
        };
        let svc = crate::future::take_ready(&mut self.inner);
        let deferred = Deferred::new(req, svc, subject.key, limit, shared.clone());
        if answered {
            ResponseFuture::waiting(deferred)
        } else {
            ResponseFuture::acquiring(acquire, deferred)
        }
    }
}
