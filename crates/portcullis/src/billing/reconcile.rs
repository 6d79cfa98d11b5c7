//! The reconciliation of an attempt left pending (B7) — by an operator, or by the
//! gateway on evidence ([`resolve`]): settle it at its real cost or write it off, and
//! leave a usage record through the same sink as every other record.

use super::{Evidence, UsageRecord, UsageSink};
use portcullis_core::{
    AttemptRef, AttemptState, Books, DynReconcile, Millis, Money, PendingAttempt, Reconcile,
    Reconciled, StoreResult, Usage,
};

/// How a pending attempt was closed, on its usage record: by an operator, or — when the
/// record names its [`Evidence`] — by the gateway itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reconciliation {
    /// Settled at the record's cost (its `outcome` is [`AttemptState::Settled`]).
    Settled {
        /// The upper bound that was pending.
        pending: Money,
    },
    /// Written off: nothing charged (its `outcome` is [`AttemptState::Refunded`]).
    WrittenOff {
        /// The upper bound that was pending and is released.
        pending: Money,
    },
}

/// Reconciles `attempt` in `store` (a [`ReconcileStore`], or what
/// [`BillingStore::reconciler`] hands out) as `how` (B7) and, when it was pending, passes
/// one usage record to `sink`: the settlement at its cost with the `usage` the operator
/// reports, or the write-off. Answers as [`ReconcileStore::reconcile`]: reconciling an
/// attempt twice changes nothing and records nothing the second time.
///
/// [`ReconcileStore`]: portcullis_core::ReconcileStore
/// [`ReconcileStore::reconcile`]: portcullis_core::ReconcileStore::reconcile
/// [`BillingStore::reconciler`]: portcullis_core::BillingStore::reconciler
///
/// `now` stamps the record (ms, the same clock as the billing layer's records).
pub async fn reconcile<St: DynReconcile + ?Sized>(
    store: &St,
    sink: &dyn UsageSink,
    attempt: &AttemptRef,
    how: Reconcile,
    usage: Option<Usage>,
    now: Millis,
) -> StoreResult<Reconciled> {
    close(store, sink, attempt, how, usage, now, None).await
}

/// Reconciles `attempt` as [`reconcile`] does, on the gateway's own `evidence` instead
/// of an operator's word (B7): a pending attempt settled at the usage its provider
/// reported when asked later ([`Evidence::Provider`]), or at its upper bound when
/// nothing answered in time ([`Evidence::UpperBound`]). Its usage record names the
/// evidence. Idempotent like [`reconcile`]: of several instances resolving the same
/// attempt, or an operator who came first, one closes it and the others change and
/// record nothing.
pub async fn resolve<St: DynReconcile + ?Sized>(
    store: &St,
    sink: &dyn UsageSink,
    attempt: &AttemptRef,
    how: Reconcile,
    usage: Option<Usage>,
    now: Millis,
    evidence: Evidence,
) -> StoreResult<Reconciled> {
    close(store, sink, attempt, how, usage, now, Some(evidence)).await
}

async fn close<St: DynReconcile + ?Sized>(
    store: &St,
    sink: &dyn UsageSink,
    attempt: &AttemptRef,
    how: Reconcile,
    usage: Option<Usage>,
    now: Millis,
    evidence: Option<Evidence>,
) -> StoreResult<Reconciled> {
    let answer = DynReconcile::reconcile(store, attempt, how).await?;
    let by = evidence.map_or("an operator", |e| match e {
        Evidence::Provider => "the provider's answer",
        Evidence::UpperBound => "its upper bound (nothing answered in time)",
        Evidence::Streamed => "what was streamed",
    });
    let record = |p: &PendingAttempt, outcome, reconciliation| UsageRecord {
        at: now,
        key: p.key.clone().unwrap_or_else(|| match &p.attempt.books {
            Books::Key(k) => k.clone(),
            Books::Tenant(_) => "".into(),
        }),
        tenant: match &p.attempt.books {
            Books::Tenant(t) => Some(t.clone()),
            Books::Key(_) => None,
        },
        model: None,
        channel: None,
        upstream_model: None,
        attempt: p.attempt.attempt.clone(),
        idempotency_key: None,
        client_request_id: None,
        usage,
        outcome,
        billed_to_balance: p.billed_to_balance,
        evidence,
        reconciliation: Some(reconciliation),
        provider_object: None,
    };
    match &answer {
        Reconciled::Settled { attempt: p, cost } => {
            tracing::info!(
                attempt_id = &*p.attempt.attempt,
                cost,
                pending = p.amount,
                "pending attempt settled by {by} (B7)"
            );
            sink.record(record(
                p,
                AttemptState::Settled(*cost),
                Reconciliation::Settled { pending: p.amount },
            ));
        }
        Reconciled::WrittenOff { attempt: p } => {
            tracing::warn!(
                attempt_id = &*p.attempt.attempt,
                pending = p.amount,
                "pending attempt written off by {by} (B7)"
            );
            sink.record(record(
                p,
                AttemptState::Refunded,
                Reconciliation::WrittenOff { pending: p.amount },
            ));
        }
        Reconciled::InFlight | Reconciled::NotPending => {}
    }
    Ok(answer)
}
