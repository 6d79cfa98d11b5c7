//! The billed load of the fault runs (`fault_invariants.rs`, `cluster_recovery.rs`):
//! requests made as the layers make them — a joint slot and window decision, a billing
//! reservation, the settlements and the give-backs — with every answer of the store
//! kept in a [`Footprint`] for the invariants' checks (D9, D10).
//!
//! A call that fails is what the gateway answers 503; each run counts or logs those
//! its own way, through the `failed` it passes.

use portcullis_core::store::conformance::Footprint;
use portcullis_core::{
    AttemptRef, AttemptState, BillingDecision, BillingOutcome, BillingRequest, BillingStore,
    Budget, Demand, Dimension, JointDecision, JointStore, LeaseId, Millis, Outcome, Policy, Scope,
    SlotAsk, SlotStore, StoreError, SubjectKey, WindowAsk, WindowStore, WindowTicket,
};
use portcullis_redis::RedisStore;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a run's failed call is told to: what failed (`"acquire_and_admit"`,
/// `"check_and_reserve"`, `"settle"`), and how.
pub type Failed<'a> = &'a (dyn Fn(&'static str, StoreError) + Sync);

/// The footprint of a run: what the store answered every request, for the checks.
#[derive(Default)]
pub struct Kept(Mutex<Footprint>);

impl Kept {
    pub fn record(&self, f: impl FnOnce(&mut Footprint)) {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The footprint so far.
    pub fn footprint(&self) -> Footprint {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A request of tenant `tenant` on `key`, reserving `money` in the balance and `budget`.
pub fn billed(
    attempt: String,
    tenant: &str,
    key: &SubjectKey,
    budget: Budget,
    money: i64,
) -> BillingRequest {
    BillingRequest {
        attempt: attempt.into(),
        tenant: Some(tenant.into()),
        key: key.clone(),
        spend_cap: None,
        budgets: vec![budget].into(),
        money,
        bill_balance: true,
        lifetime_ms: portcullis_core::billing::DEFAULT_ATTEMPT_LIFETIME_MS,
        tenant_expected: true,
    }
}

/// What a request admitted and reserved holds until it ends.
pub struct Admitted {
    pub lease: LeaseId,
    pub ticket: WindowTicket,
    pub attempt: AttemptRef,
}

/// The joint slot and window decision on `req.key` (slots up to the policy's
/// concurrency, leases of `ttl` ms), then the reservation of `req`, as the layers make
/// them. A call that fails is told to `failed`, and what the request holds goes back as
/// the layers give it back — the attempt refunded until the refund lands, the window
/// unit, the slot —; then, after 5 ms (a client answered 503 comes back a little
/// later), `None`. A refusal panics: the load runs far from every limit.
pub async fn admit_and_reserve(
    s: &RedisStore,
    policy: &Arc<Policy>,
    demand: Demand,
    ttl: Millis,
    req: &BillingRequest,
    kept: &Kept,
    failed: Failed<'_>,
) -> Option<Admitted> {
    let slot = SlotAsk {
        key: req.key.clone(),
        limit: policy.concurrency,
        ttl,
    };
    let window = WindowAsk {
        scope: Scope::Key,
        policy,
        demand: &demand,
    };
    let (lease, ticket) = match s.acquire_and_admit(&slot, Some(window)).await {
        Ok(JointDecision::Admitted { lease, ticket }) => (lease, ticket.expect("windows")),
        Ok(other) => panic!("refused under limits far from exhausted: {other:?}"),
        Err(e) => {
            failed("acquire_and_admit", e);
            tokio::time::sleep(Duration::from_millis(5)).await;
            return None;
        }
    };
    let admitted = Admitted {
        lease,
        ticket,
        attempt: req.attempt_ref(),
    };
    let decision = s.check_and_reserve(req).await;
    if let Ok(d) = &decision {
        kept.record(|f| f.ledger_mut().reserved(req, d));
    }
    match decision {
        Ok(BillingDecision::Admitted) => Some(admitted),
        Ok(other) => panic!("billing refused: {other:?}"),
        Err(e) => {
            // Fail-closed billing: the layer refunds what it could not see reserved.
            failed("check_and_reserve", e);
            abandon(s, &req.key, &admitted, kept, failed).await;
            tokio::time::sleep(Duration::from_millis(5)).await;
            None
        }
    }
}

/// What a request that goes no further gives back: its attempt refunded (until the
/// refund lands), its window unit and its slot.
pub async fn abandon(
    s: &RedisStore,
    key: &SubjectKey,
    a: &Admitted,
    kept: &Kept,
    failed: Failed<'_>,
) {
    settle_until_landed(s, &a.attempt, BillingOutcome::Refund, kept, failed).await;
    give_back(s, key, a, Outcome::Refund);
}

/// The window settlement and the slot release of `a`, sent without waiting, as the
/// layers send them (a failed one is the store's to send again, D9).
pub fn give_back(s: &RedisStore, key: &SubjectKey, a: &Admitted, outcome: Outcome) {
    drop(WindowStore::settle(s, key, Scope::Key, a.ticket, outcome));
    drop(SlotStore::release(s, key, a.lease));
}

/// Settles `attempt` until the store answers, as the billing layer's retries do (every
/// 10 ms, 30 s at most); each failed try is told to `failed`.
pub async fn settle_until_landed(
    s: &RedisStore,
    attempt: &AttemptRef,
    outcome: BillingOutcome,
    kept: &Kept,
    failed: Failed<'_>,
) -> Option<AttemptState> {
    let start = Instant::now();
    loop {
        match s.settle_attempt(attempt, outcome).await {
            Ok(state) => {
                kept.record(|f| f.ledger_mut().settled(attempt, state));
                return state;
            }
            Err(e) => {
                failed("settle", e);
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "a settlement never landed"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Waits until no instance has a give-back waiting to be sent again, `limit` at most.
pub async fn give_backs_landed(instances: &[RedisStore], limit: Duration) {
    let start = Instant::now();
    while instances.iter().any(|s| s.give_backs().waiting > 0) {
        assert!(
            start.elapsed() < limit,
            "give-backs still waiting: {:?}",
            instances
                .iter()
                .map(RedisStore::give_backs)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `completed` requests of `tokens` each, counted in `key`'s hour windows: what the
/// footprint expects them to leave.
pub fn counted_in_the_hour(f: &mut Footprint, key: &SubjectKey, completed: u64, tokens: u64) {
    let hour = 3_600_000;
    f.counted(
        key,
        Scope::Key,
        &[
            (Dimension::Requests, hour, completed),
            (Dimension::Tokens, hour, completed * tokens),
        ],
    );
}
