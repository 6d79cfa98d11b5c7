//! The billing layer's decision on the store's answer, shared by the synchronous path
//! in `call` and the asynchronous one in the response future.

use super::Settlement;
use super::layer::Shared;
use portcullis_core::{
    BillingDecision, BillingStore, Books, GatewayCode, LayerKind, Refusal, Rejection,
    StoreErrorKind, StoreResult,
};

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
            metrics::counter!("portcullis_billing_record_missing_total").increment(1);
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
    shared
        .state
        .failures
        .answered(LayerKind::BillingGate, &answer);
    match answer {
        Ok(BillingDecision::Admitted) => Ok(true),
        Ok(BillingDecision::Refused(r)) => Err(refusal(&r, settlement)),
        Err(e) => match shared.state.failures.on_error(
            shared.config.failure_mode,
            LayerKind::BillingGate,
            &e,
        ) {
            None => Ok(false),
            Some(r) => Err(r),
        },
    }
}
