use super::decide::decide;
use super::future::{Deferred, ResponseFuture};
use super::layer::Shared;
use super::{Attempt, BillingGuard, BillingProfile, Settlement, UsageRecord, next_attempt_id};
use crate::BoxError;
use crate::body::HoldBody;
use crate::spawn::poll_now;
use http::{Request, Response};
use portcullis_core::{
    AdmittedUnder, AttemptState, BillingRequest, BillingStore, Clock, GatewayCode, LayerKind,
    ModelId, Rejection, Scope, Subject,
};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// The request id header (the usage record's idempotency key), as a header name built
/// at compile time.
const X_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");

/// Billing around a service (B1–B7). Built by
/// [`BillingGateLayer`](super::BillingGateLayer).
pub struct BillingGate<S, St, C> {
    pub(crate) inner: S,
    pub(crate) shared: Arc<Shared<St, C>>,
}

layer_service!(impl<S, St, C> BillingGate<S, St, C>);

impl<S, St, C, ReqB, ResB> Service<Request<ReqB>> for BillingGate<S, St, C>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    St: BillingStore,
    C: Clock,
    ResB: http_body::Body,
{
    type Response = Response<HoldBody<ResB, BillingGuard<St>>>;
    type Error = BoxError;
    type Future = ResponseFuture<S, ReqB, St, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Decided in `call` (L1).
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let shared = &self.shared;
        let Some(subject) = req.extensions().get::<Subject>().cloned() else {
            return ResponseFuture::rejected(Rejection::new(
                GatewayCode::Unauthenticated,
                LayerKind::BillingGate,
            ));
        };
        if req.extensions().get::<super::NotBilled>().is_some() {
            return ResponseFuture::called(self.inner.call(req), None, ());
        }
        let (billing, settlement) = open_attempt(shared, &mut req, subject);
        let mut answer = shared.config.store.check_and_reserve(&billing);
        match poll_now(&mut answer) {
            Some(a) => match decide(shared, &settlement, a) {
                Ok(true) => {
                    ResponseFuture::called(self.inner.call(req), Some(settlement.admitted()), ())
                }
                // Failed open: nothing was reserved, nothing to settle.
                Ok(false) => ResponseFuture::called(self.inner.call(req), None, ()),
                Err(r) => ResponseFuture::rejected(r),
            },
            None => {
                let svc = crate::future::take_ready(&mut self.inner);
                ResponseFuture::checking(
                    answer,
                    Box::new(Deferred {
                        req: Some(req),
                        svc,
                        settlement: Some(settlement),
                        shared: self.shared.clone(),
                    }),
                )
            }
        }
    }
}

/// Opens the attempt `req` is billed as (B4): its id (also put in the request as an
/// [`Attempt`]), what the store is asked to reserve, and what settling it will need.
fn open_attempt<St: BillingStore, C: Clock, B>(
    shared: &Shared<St, C>,
    req: &mut Request<B>,
    subject: Subject,
) -> (BillingRequest, Settlement<St>) {
    let now = shared.config.clock.now();
    // W8: a request the active subscription admitted is not charged to the
    // balance; one that fell through to pay-as-you-go is.
    let fell_through = req.extensions().get::<AdmittedUnder>() == Some(&AdmittedUnder(Scope::Key));
    let covered = subject
        .subscription
        .as_ref()
        .is_some_and(|s| s.is_active(now))
        && !fell_through;
    let profile = req
        .extensions()
        .get::<BillingProfile>()
        .cloned()
        .unwrap_or_default();
    let demand = crate::extensions::demand(req);
    let attempt = next_attempt_id();
    // Inside failover's `attempt` span this names the attempt in every line of it.
    tracing::Span::current().record("attempt_id", &*attempt);
    tracing::debug!(attempt_id = &*attempt, "billing attempt opened");
    req.extensions_mut().insert(Attempt(attempt.clone()));
    let recorder = crate::extensions::usage_recorder(req);
    let billing = BillingRequest {
        attempt: attempt.clone(),
        tenant: subject.tenant.clone(),
        key: subject.key.clone(),
        spend_cap: profile.spend_cap,
        budgets: profile.budgets,
        money: demand.money,
        bill_balance: !covered,
        lifetime_ms: shared.config.lifetime_ms,
        tenant_expected: profile.tenant_expected,
    };
    let template = UsageRecord {
        at: now,
        key: subject.key,
        tenant: subject.tenant,
        model: req.extensions().get::<ModelId>().map(|m| m.0.clone()),
        channel: None,
        upstream_model: None,
        attempt,
        idempotency_key: req
            .headers()
            .get(X_REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .map(Into::into),
        client_request_id: req
            .extensions()
            .get::<super::ClientRequestId>()
            .map(|c| c.0.clone()),
        usage: None,
        outcome: AttemptState::Open,
        billed_to_balance: !covered,
        evidence: None,
        reconciliation: None,
        provider_object: None,
    };
    let settlement = Settlement {
        settler: shared.state.settler.clone(),
        attempt: billing.attempt_ref(),
        money: billing.money.max(0),
        sink: shared.config.sink.clone(),
        recorder,
        template,
        cut_streams: shared.config.cut_streams,
    };
    (billing, settlement)
}
