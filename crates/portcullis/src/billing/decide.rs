//! The billing layer's decision on the store's answer, shared by the synchronous path
//! in `call` and the asynchronous one in the response future.

use super::layer::Shared;
use super::{CutStreams, Evidence, Settlement};
use portcullis_core::attempt::{CallEnd, Settle, settle};
use portcullis_core::{
    BillingDecision, BillingOutcome, BillingStore, Books, GatewayCode, LayerKind, Refusal,
    Rejection, StoreErrorKind, StoreResult, Usage, UsageReport,
};

/// How an attempt closes: the store's outcome, the figures its record carries, and the
/// evidence an automatic charge rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Closing {
    pub(crate) outcome: BillingOutcome,
    pub(crate) usage: Option<Usage>,
    pub(crate) evidence: Option<Evidence>,
}

/// How an attempt that ended as `end` with `report` recorded closes (B4, B7, L5):
/// refunded when it never left or never reached the provider; settled at the cost of a
/// complete priced report; a stream cut after its content went out charged what it
/// streamed at once (`cut`: [`CutStreams::Charge`]); anything else pending
/// reconciliation at its upper bound — never zero.
pub(crate) fn closing(end: CallEnd, report: Option<UsageReport>, cut: CutStreams) -> Closing {
    let close = |outcome, usage, evidence| Closing {
        outcome,
        usage,
        evidence,
    };
    if settle(end, report) == Settle::Refund {
        return close(BillingOutcome::Refund, None, None);
    }
    match report {
        Some(UsageReport::Complete(u)) => match u.cost {
            Some(cost) => close(BillingOutcome::Settled(cost), Some(u), None),
            // Figures without a price: the cost is not known (B4).
            None => close(BillingOutcome::Pending, Some(u), None),
        },
        Some(UsageReport::Streamed(u)) => match (u.cost, cut) {
            (Some(cost), CutStreams::Charge) => close(
                BillingOutcome::Settled(cost),
                Some(u),
                Some(Evidence::Streamed),
            ),
            _ => close(BillingOutcome::Pending, Some(u), None),
        },
        Some(UsageReport::Partial(u)) => close(BillingOutcome::Pending, Some(u), None),
        Some(UsageReport::Unknown) | None => close(BillingOutcome::Pending, None, None),
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

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_core::attempt::UpstreamFailure;

    fn seen(cost: Option<i64>) -> Usage {
        Usage {
            input_tokens: 10,
            output_tokens: 7,
            cost,
            ..Usage::default()
        }
    }

    #[test]
    fn b7_a_stream_cut_after_content_is_charged_what_it_streamed_at_once() {
        let u = seen(Some(17));
        // Cut by the client (the body dropped after an answer) or by the upstream.
        for end in [CallEnd::Answered, CallEnd::Upstream(UpstreamFailure::Cut)] {
            let c = closing(end, Some(UsageReport::Streamed(u)), CutStreams::Charge);
            assert_eq!(
                c,
                Closing {
                    outcome: BillingOutcome::Settled(17),
                    usage: Some(u),
                    evidence: Some(Evidence::Streamed),
                },
                "{end:?}"
            );
        }
    }

    #[test]
    fn b7_the_hold_policy_leaves_a_cut_stream_pending_with_its_figures() {
        let u = seen(Some(17));
        let c = closing(
            CallEnd::Answered,
            Some(UsageReport::Streamed(u)),
            CutStreams::Hold,
        );
        assert_eq!(
            (c.outcome, c.usage, c.evidence),
            (BillingOutcome::Pending, Some(u), None)
        );
    }

    #[test]
    fn b4_unpriced_partial_and_unknown_reports_stay_pending() {
        for (report, usage) in [
            (Some(UsageReport::Streamed(seen(None))), Some(seen(None))),
            (Some(UsageReport::Complete(seen(None))), Some(seen(None))),
            (
                Some(UsageReport::Partial(seen(Some(3)))),
                Some(seen(Some(3))),
            ),
            (Some(UsageReport::Unknown), None),
            (None, None),
        ] {
            let c = closing(CallEnd::Answered, report, CutStreams::Charge);
            assert_eq!(
                (c.outcome, c.usage, c.evidence),
                (BillingOutcome::Pending, usage, None),
                "{report:?}"
            );
        }
    }

    #[test]
    fn b4_a_complete_priced_report_settles_and_a_call_that_never_left_is_refunded() {
        let u = seen(Some(9));
        let c = closing(
            CallEnd::Answered,
            Some(UsageReport::Complete(u)),
            CutStreams::Hold,
        );
        assert_eq!((c.outcome, c.evidence), (BillingOutcome::Settled(9), None));
        let never = closing(
            CallEnd::Upstream(UpstreamFailure::Connect),
            Some(UsageReport::Streamed(u)),
            CutStreams::Charge,
        );
        assert_eq!((never.outcome, never.usage), (BillingOutcome::Refund, None));
        let dropped = closing(CallEnd::Unanswered, None, CutStreams::Charge);
        assert_eq!(dropped.outcome, BillingOutcome::Refund);
    }
}
