use super::future::{Deferred, ResponseFuture};

/// The request id header (the usage record's idempotency key), as a header name built
/// at compile time.
const X_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");
use super::layer::Shared;
use super::{Attempt, BillingGuard, BillingProfile, Settlement, UsageRecord, next_attempt_id};
use crate::BoxError;
use crate::body::HoldBody;
use crate::spawn::poll_now;
use http::{Request, Response};
use std::sync::Arc;
use std::task::{Context, Poll};
use tollgate_core::{
    AdmittedUnder, AttemptState, BillingDecision, BillingRequest, BillingStore, Books, Clock,
    Demand, GatewayCode, LayerKind, ModelId, Refusal, Rejection, Scope, StoreErrorKind,
    StoreResult, Subject, UsageRecorder,
};
use tower_service::Service;

/// Billing around a service (B1–B6). Built by
/// [`BillingGateLayer`](super::BillingGateLayer).
pub struct BillingGate<S, St, C> {
    pub(crate) inner: S,
    pub(crate) shared: Arc<Shared<St, C>>,
}

impl<S: Clone, St, C> Clone for BillingGate<S, St, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S, St, C> BillingGate<S, St, C> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }
    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// How long a client is told to wait when its tenant's billing record is missing: an
/// operator has to act (B7).
const RECORD_MISSING_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// The rejection for a refusal: 402, never retried (B1, B3); a missing tenant record is
/// a fail-closed 503 of its own (B7).
fn refusal<St>(r: &Refusal, s: &Settlement<St>) -> Rejection {
    let code = match r {
        Refusal::InsufficientBalance => GatewayCode::InsufficientBalance,
        Refusal::SpendCap => GatewayCode::SpendCapReached,
        Refusal::Budget(_) => GatewayCode::BudgetExhausted,
        Refusal::RecordMissing => {
            let tenant = match &s.attempt.books {
                Books::Tenant(t) => &**t,
                Books::Key(_) => "",
            };
            tracing::error!(
                tenant,
                "billing record of a configured tenant is missing from the store (was its \
                 data lost?); refusing with 503 until an operator sets its balance \
                 (PUT /admin/tenants/{{tenant}}/balance)"
            );
            #[cfg(feature = "metrics")]
            metrics::counter!("tollgate_billing_record_missing_total").increment(1);
            return Rejection::new(GatewayCode::BillingRecordMissing, LayerKind::BillingGate)
                .with_retry_after(Some(RECORD_MISSING_RETRY_AFTER));
        }
    };
    Rejection::new(code, LayerKind::BillingGate)
}

/// What to do with the store's answer: `Ok(true)` admitted, `Ok(false)` admitted
/// unchecked (store failed open), `Err` refuse.
///
/// A store error may hide a reservation the store did make (the answer was lost, not
/// the work): a refund of the attempt is sent off the response path; refunding an
/// attempt that was never reserved changes nothing.
pub(crate) fn decide<St: BillingStore, C>(
    shared: &Shared<St, C>,
    settlement: &Settlement<St>,
    answer: StoreResult<BillingDecision>,
) -> Result<bool, Rejection> {
    if let Err(e) = &answer {
        // A deadline passed: the reservation may have been made, so its refund must
        // land (retried, B7). Unreachable (breaker open, connection refused): it was
        // not sent; one refund is enough — retrying those would queue one job per
        // request refused during an outage.
        if e.kind() == StoreErrorKind::Unavailable {
            settlement.refund_once("refund of an attempt whose reservation was not sent");
        } else {
            settlement.refund("refund of an attempt whose reservation answer was lost");
        }
    }
    shared.failures.answered(LayerKind::BillingGate, &answer);
    match answer {
        Ok(BillingDecision::Admitted) => Ok(true),
        Ok(BillingDecision::Refused(r)) => Err(refusal(&r, settlement)),
        Err(e) => match shared
            .failures
            .on_error(shared.failure_mode, LayerKind::BillingGate, &e)
        {
            None => Ok(false),
            Some(r) => Err(r),
        },
    }
}

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
        // Decided in `call` (ENGINEERING rule 1).
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
            return ResponseFuture::called(self.inner.call(req), None);
        }
        let now = shared.clock.now();
        // W8: a request the active subscription admitted is not charged to the
        // balance; one that fell through to pay-as-you-go is.
        let fell_through =
            req.extensions().get::<AdmittedUnder>() == Some(&AdmittedUnder(Scope::Key));
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
        let demand = req
            .extensions()
            .get::<Demand>()
            .copied()
            .unwrap_or_default();
        let attempt = next_attempt_id();
        // Inside failover's `attempt` span this names the attempt in every line of it.
        tracing::Span::current().record("attempt_id", &*attempt);
        tracing::debug!(attempt_id = &*attempt, "billing attempt opened");
        req.extensions_mut().insert(Attempt(attempt.clone()));
        let recorder = req
            .extensions_mut()
            .get_or_insert_with(UsageRecorder::new)
            .clone();
        let billing = BillingRequest {
            attempt: attempt.clone(),
            tenant: subject.tenant.clone(),
            key: subject.key.clone(),
            spend_cap: profile.spend_cap,
            budgets: profile.budgets,
            money: demand.money,
            bill_balance: !covered,
            lifetime_ms: shared.lifetime_ms,
            tenant_expected: profile.tenant_expected,
        };
        let template = UsageRecord {
            at: now,
            key: subject.key,
            tenant: subject.tenant,
            model: req.extensions().get::<ModelId>().map(|m| m.0.clone()),
            channel: None,
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
            reconciliation: None,
        };
        let settlement = Settlement {
            settler: shared.settler.clone(),
            attempt: billing.attempt_ref(),
            money: billing.money.max(0),
            sink: shared.sink.clone(),
            recorder,
            template,
        };
        let mut answer = shared.store.check_and_reserve(&billing);
        match poll_now(&mut answer) {
            Some(a) => match decide(shared, &settlement, a) {
                Ok(true) => {
                    ResponseFuture::called(self.inner.call(req), Some(settlement.admitted()))
                }
                // Failed open: nothing was reserved, nothing to settle.
                Ok(false) => ResponseFuture::called(self.inner.call(req), None),
                Err(r) => ResponseFuture::rejected(r),
            },
            None => {
                let clone = self.inner.clone();
                let svc = std::mem::replace(&mut self.inner, clone);
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
