//! Money: balances, key spend, budgets and per-attempt settlement (SPEC B1–B5), as a
//! plain ledger that both stores run.
//!
//! Eligibility is decided at request start (B1): a tenant whose balance (less what is
//! pending reconciliation) is ≤ 0, or a key whose spend (plus pending) has reached its
//! cap, is refused. Budgets (B3) reserve the request's money upper bound atomically and
//! settle to the real cost. Every attempt settles once, by its id (B4): settling the
//! same attempt again changes nothing. An attempt whose result is unknown stays
//! *pending*: its upper bound counts against balance, spend and budgets until it is
//! reconciled, and it is never written as zero. A request that starts with a positive
//! balance runs to completion, so a balance may end below zero (B2).

use crate::clock::Millis;
use crate::money::Money;
use crate::subject::SubjectKey;
use std::collections::VecDeque;

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::Arc;

/// Identifies one attempt (one send to one channel).
pub type AttemptId = Arc<str>;

/// A money budget a request draws on (B3): per tenant, task or billing period.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Unique id, e.g. `tenant:acme:monthly` or `task:nightly-eval`.
    pub id: Arc<str>,
    /// Most money spent + reserved per period.
    pub limit: Money,
    /// Period length; anchored at first use like the windows of W2. `None` = never
    /// resets.
    pub period_ms: Option<Millis>,
}

/// What billing needs to decide on one attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BillingRequest {
    /// The attempt.
    pub attempt: AttemptId,
    /// Whose balance pays; `None` = no balance check.
    pub tenant: Option<Arc<str>>,
    /// The key whose spend is counted.
    pub key: SubjectKey,
    /// The key's spend cap.
    pub spend_cap: Option<Money>,
    /// Budgets to reserve the upper bound in.
    pub budgets: Arc<[Budget]>,
    /// Money upper bound of the attempt.
    pub money: Money,
    /// False when a subscription covers the request (W8): the balance and the key's
    /// spend are neither checked nor charged (budgets still are).
    pub bill_balance: bool,
}

/// Why billing refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Balance ≤ 0.
    InsufficientBalance,
    /// Key spend cap reached.
    SpendCap,
    /// A budget cannot hold the upper bound.
    Budget(Arc<str>),
}

/// Billing's answer at request start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BillingDecision {
    /// Go ahead; settle the attempt when it ends.
    Admitted,
    /// Refused; nothing was reserved.
    Refused(Refusal),
}

/// How an attempt ended, for billing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BillingOutcome {
    /// Known cost.
    Settled(Money),
    /// Unknown result: keep the reservation as pending reconciliation (B4).
    Pending,
    /// Never sent, or refused further in: release everything (L5).
    Refund,
}

/// The state an attempt ended in, as settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptState {
    /// Reserved, not settled yet.
    Open,
    /// Settled at this cost.
    Settled(Money),
    /// Pending reconciliation of this upper bound.
    Pending(Money),
    /// Released.
    Refunded,
}

/// A tenant's or key's money as the usage view shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccountView {
    /// Tenant balance (may be below zero, B2).
    pub balance: Option<Money>,
    /// Tenant money pending reconciliation.
    pub tenant_pending: Money,
    /// Key spend.
    pub key_spent: Money,
    /// Key money pending reconciliation.
    pub key_pending: Money,
    /// Budgets: (id, limit, spent, reserved, period end).
    pub budgets: Vec<BudgetView>,
}

/// One budget in the usage view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetView {
    /// Budget id.
    pub id: Arc<str>,
    /// Limit.
    pub limit: Money,
    /// Spent in the current period.
    pub spent: Money,
    /// Reserved by attempts in flight or pending.
    pub reserved: Money,
    /// End of the current period, if it has one and has started.
    pub resets_at: Option<Millis>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Acct {
    money: Money,
    pending: Money,
}

#[derive(Clone, Copy, Debug, Default)]
struct BudgetState {
    start: Option<Millis>,
    spent: Money,
    reserved: Money,
}

impl BudgetState {
    /// Rolls the period forward (by whole periods) when it has ended; reservations of
    /// attempts still open carry over.
    fn roll(&mut self, period: Option<Millis>, now: Millis) {
        let (Some(p), Some(start)) = (period.filter(|&p| p > 0), self.start) else {
            return;
        };
        if now >= start + p {
            self.start = Some(start + (now - start) / p * p);
            self.spent = 0;
        }
    }
}

#[derive(Clone, Debug)]
struct Attempt {
    tenant: Option<Arc<str>>,
    key: SubjectKey,
    budgets: Arc<[Budget]>,
    money: Money,
    bill_balance: bool,
    state: AttemptState,
}

/// How long a finished attempt is remembered, so a late duplicate settlement is
/// recognised and ignored.
pub const ATTEMPT_MEMORY_MS: Millis = 24 * 3600 * 1000;

/// Most finished attempts the in-memory ledger remembers: past it the oldest are
/// forgotten first, so memory stays bounded however busy the day (a duplicate
/// settlement of a forgotten attempt is then ignored as unknown, which is what an
/// idempotent settlement must do anyway).
pub const MAX_FINISHED_ATTEMPTS: usize = 250_000;

/// The books: balances, key spend, budgets, attempts.
#[derive(Debug, Default)]
pub struct Ledger {
    tenants: HashMap<Arc<str>, Acct>,
    keys: HashMap<SubjectKey, Acct>,
    budgets: HashMap<Arc<str>, BudgetState>,
    attempts: HashMap<AttemptId, Attempt>,
    finished: VecDeque<(Millis, AttemptId)>,
}

impl Ledger {
    /// Sets a tenant's balance if it has none yet (seeding from configuration must not
    /// reset a running balance).
    pub fn seed_balance(&mut self, tenant: &str, amount: Money) {
        self.tenants.entry(tenant.into()).or_insert(Acct {
            money: amount,
            pending: 0,
        });
    }

    /// Adds to a tenant's balance; returns the new balance.
    pub fn credit(&mut self, tenant: &str, amount: Money) -> Money {
        let a = self.tenants.entry(tenant.into()).or_default();
        a.money = a.money.saturating_add(amount);
        a.money
    }

    /// Eligibility and reservation at request start (B1, B3). Re-admitting an attempt
    /// that is already known reserves nothing twice.
    pub fn admit(&mut self, req: &BillingRequest, now: Millis) -> BillingDecision {
        if self.attempts.contains_key(&req.attempt) {
            return BillingDecision::Admitted;
        }
        if req.bill_balance {
            if let Some(t) = &req.tenant {
                let a = self.tenants.get(t).copied().unwrap_or_default();
                if a.money.saturating_sub(a.pending) <= 0 {
                    return BillingDecision::Refused(Refusal::InsufficientBalance);
                }
            }
            if let Some(cap) = req.spend_cap {
                let k = self.keys.get(&req.key).copied().unwrap_or_default();
                if k.money.saturating_add(k.pending) >= cap {
                    return BillingDecision::Refused(Refusal::SpendCap);
                }
            }
        }
        let money = req.money.max(0);
        for b in req.budgets.iter() {
            let s = self.budgets.entry(b.id.clone()).or_default();
            s.roll(b.period_ms, now);
            let committed = s.spent.saturating_add(s.reserved);
            if committed.saturating_add(money) > b.limit {
                return BillingDecision::Refused(Refusal::Budget(b.id.clone()));
            }
        }
        for b in req.budgets.iter() {
            let s = self.budgets.entry(b.id.clone()).or_default();
            s.start.get_or_insert(now);
            s.reserved = s.reserved.saturating_add(money);
        }
        self.attempts.insert(
            req.attempt.clone(),
            Attempt {
                tenant: req.tenant.clone(),
                key: req.key.clone(),
                budgets: req.budgets.clone(),
                money,
                bill_balance: req.bill_balance,
                state: AttemptState::Open,
            },
        );
        BillingDecision::Admitted
    }

    /// Settles an attempt. Idempotent: an attempt already settled or refunded, or
    /// unknown, is left alone and `None` is returned. A pending attempt may be settled
    /// later with its real cost (reconciliation).
    pub fn settle(
        &mut self,
        attempt: &str,
        outcome: BillingOutcome,
        now: Millis,
    ) -> Option<AttemptState> {
        self.forget_old(now);
        let a = self.attempts.get_mut(attempt)?;
        let was_pending = match a.state {
            AttemptState::Open => false,
            AttemptState::Pending(_) => true,
            AttemptState::Settled(_) | AttemptState::Refunded => return None,
        };
        if was_pending && outcome == BillingOutcome::Pending {
            return None;
        }
        let money = a.money;
        let bill = a.bill_balance;
        // Undo what "pending" counted.
        if was_pending {
            if let Some(t) = a.tenant.as_ref().filter(|_| bill) {
                let acct = self.tenants.entry(t.clone()).or_default();
                acct.pending = acct.pending.saturating_sub(money);
            }
            if bill {
                let k = self.keys.entry(a.key.clone()).or_default();
                k.pending = k.pending.saturating_sub(money);
            }
        }
        let state = match outcome {
            BillingOutcome::Settled(cost) => {
                let cost = cost.max(0);
                if let Some(t) = a.tenant.as_ref().filter(|_| bill) {
                    let acct = self.tenants.entry(t.clone()).or_default();
                    acct.money = acct.money.saturating_sub(cost);
                }
                if bill {
                    let k = self.keys.entry(a.key.clone()).or_default();
                    k.money = k.money.saturating_add(cost);
                }
                for b in a.budgets.iter() {
                    let s = self.budgets.entry(b.id.clone()).or_default();
                    s.reserved = s.reserved.saturating_sub(money).max(0);
                    s.roll(b.period_ms, now);
                    s.spent = s.spent.saturating_add(cost);
                }
                AttemptState::Settled(cost)
            }
            BillingOutcome::Pending => {
                if let Some(t) = a.tenant.as_ref().filter(|_| bill) {
                    let acct = self.tenants.entry(t.clone()).or_default();
                    acct.pending = acct.pending.saturating_add(money);
                }
                if bill {
                    let k = self.keys.entry(a.key.clone()).or_default();
                    k.pending = k.pending.saturating_add(money);
                }
                // Budgets keep the reservation.
                AttemptState::Pending(money)
            }
            BillingOutcome::Refund => {
                for b in a.budgets.iter() {
                    let s = self.budgets.entry(b.id.clone()).or_default();
                    s.reserved = s.reserved.saturating_sub(money).max(0);
                    // A refund leaves no trace: a period only this attempt had started
                    // has not started (L5). Judged on the current period (rolled first),
                    // so it never depends on whether a refused request rolled it.
                    s.roll(b.period_ms, now);
                    if s.spent == 0 && s.reserved == 0 {
                        s.start = None;
                    }
                }
                AttemptState::Refunded
            }
        };
        a.state = state;
        if matches!(state, AttemptState::Settled(_) | AttemptState::Refunded) {
            self.finished.push_back((now, attempt.into()));
        }
        Some(state)
    }

    fn forget_old(&mut self, now: Millis) {
        while let Some((at, _)) = self.finished.front() {
            let expired = at.saturating_add(ATTEMPT_MEMORY_MS) <= now;
            if !expired && self.finished.len() <= MAX_FINISHED_ATTEMPTS {
                break;
            }
            let (_, id) = self.finished.pop_front().expect("front exists");
            self.attempts.remove(&id);
        }
    }

    /// The state of an attempt, if remembered.
    pub fn attempt(&self, attempt: &str) -> Option<AttemptState> {
        self.attempts.get(attempt).map(|a| a.state)
    }

    /// Attempts pending reconciliation, with their amounts.
    pub fn pending(&self) -> Vec<(AttemptId, Money)> {
        self.attempts
            .iter()
            .filter_map(|(id, a)| match a.state {
                AttemptState::Pending(m) => Some((id.clone(), m)),
                _ => None,
            })
            .collect()
    }

    /// Money as the usage view shows it.
    pub fn account(
        &self,
        tenant: Option<&str>,
        key: &SubjectKey,
        budgets: &[Budget],
        now: Millis,
    ) -> AccountView {
        let t = tenant.and_then(|t| self.tenants.get(t)).copied();
        let k = self.keys.get(key).copied().unwrap_or_default();
        AccountView {
            balance: tenant.map(|_| t.unwrap_or_default().money),
            tenant_pending: t.map_or(0, |t| t.pending),
            key_spent: k.money,
            key_pending: k.pending,
            budgets: budgets
                .iter()
                .map(|b| {
                    let mut s = self.budgets.get(&b.id).copied().unwrap_or_default();
                    s.roll(b.period_ms, now);
                    BudgetView {
                        id: b.id.clone(),
                        limit: b.limit,
                        spent: s.spent,
                        reserved: s.reserved,
                        resets_at: b.period_ms.zip(s.start).map(|(p, st)| st + p),
                    }
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(attempt: &str, money: Money) -> BillingRequest {
        BillingRequest {
            attempt: attempt.into(),
            tenant: Some("acme".into()),
            key: "k".into(),
            spend_cap: None,
            budgets: Arc::from(vec![]),
            money,
            bill_balance: true,
        }
    }

    #[test]
    fn b1_balance_at_or_below_zero_is_refused() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 0);
        assert_eq!(
            l.admit(&req("a1", 5), 0),
            BillingDecision::Refused(Refusal::InsufficientBalance)
        );
        l.credit("acme", 1);
        assert_eq!(l.admit(&req("a1", 5), 0), BillingDecision::Admitted);
    }

    #[test]
    fn b2_positive_start_runs_to_completion_and_may_end_below_zero() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 10);
        assert_eq!(l.admit(&req("a1", 100), 0), BillingDecision::Admitted);
        assert_eq!(
            l.settle("a1", BillingOutcome::Settled(37), 1),
            Some(AttemptState::Settled(37))
        );
        let v = l.account(Some("acme"), &"k".into(), &[], 1);
        assert_eq!(v.balance, Some(-27));
        assert_eq!(v.key_spent, 37);
        assert_eq!(
            l.admit(&req("a2", 1), 2),
            BillingDecision::Refused(Refusal::InsufficientBalance)
        );
    }

    #[test]
    fn b1_spend_cap_counts_spend_and_pending() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 1000);
        let capped = |a: &str| BillingRequest {
            spend_cap: Some(50),
            ..req(a, 30)
        };
        assert_eq!(l.admit(&capped("a1"), 0), BillingDecision::Admitted);
        l.settle("a1", BillingOutcome::Pending, 0);
        assert_eq!(l.admit(&capped("a2"), 0), BillingDecision::Admitted);
        l.settle("a2", BillingOutcome::Settled(20), 0);
        // 20 spent + 30 pending = 50 = cap.
        assert_eq!(
            l.admit(&capped("a3"), 0),
            BillingDecision::Refused(Refusal::SpendCap)
        );
    }

    #[test]
    fn b4_settlement_is_idempotent_per_attempt() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 100);
        l.admit(&req("a1", 10), 0);
        assert!(l.settle("a1", BillingOutcome::Settled(7), 0).is_some());
        assert_eq!(l.settle("a1", BillingOutcome::Settled(7), 0), None);
        assert_eq!(l.settle("a1", BillingOutcome::Refund, 0), None);
        assert_eq!(l.settle("never", BillingOutcome::Settled(7), 0), None);
        // A re-admission of a known attempt reserves nothing twice.
        assert_eq!(l.admit(&req("a1", 10), 0), BillingDecision::Admitted);
        assert_eq!(
            l.account(Some("acme"), &"k".into(), &[], 0).balance,
            Some(93)
        );
    }

    #[test]
    fn b4_unknown_result_stays_pending_until_reconciled() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 100);
        l.admit(&req("a1", 40), 0);
        assert_eq!(
            l.settle("a1", BillingOutcome::Pending, 0),
            Some(AttemptState::Pending(40))
        );
        let v = l.account(Some("acme"), &"k".into(), &[], 0);
        assert_eq!(
            (v.balance, v.tenant_pending, v.key_pending),
            (Some(100), 40, 40)
        );
        assert_eq!(l.pending(), vec![("a1".into(), 40)]);
        // Reconciled with the real cost.
        assert_eq!(
            l.settle("a1", BillingOutcome::Settled(25), 0),
            Some(AttemptState::Settled(25))
        );
        let v = l.account(Some("acme"), &"k".into(), &[], 0);
        assert_eq!(
            (v.balance, v.tenant_pending, v.key_spent, v.key_pending),
            (Some(75), 0, 25, 0)
        );
        assert!(l.pending().is_empty());
    }

    #[test]
    fn b3_budget_reserves_upper_bound_and_settles_to_cost() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 1_000_000);
        let budget = Arc::from(vec![Budget {
            id: "task:x".into(),
            limit: 100,
            period_ms: Some(1000),
        }]);
        let b = |a: &str, m| BillingRequest {
            budgets: Arc::clone(&budget),
            ..req(a, m)
        };
        assert_eq!(l.admit(&b("a1", 60), 0), BillingDecision::Admitted);
        assert_eq!(
            l.admit(&b("a2", 60), 0),
            BillingDecision::Refused(Refusal::Budget("task:x".into())),
            "60 reserved + 60 > 100"
        );
        l.settle("a1", BillingOutcome::Settled(10), 0);
        assert_eq!(l.admit(&b("a2", 60), 0), BillingDecision::Admitted);
        l.settle("a2", BillingOutcome::Refund, 0);
        let v = l.account(None, &"k".into(), &budget, 0);
        assert_eq!((v.budgets[0].spent, v.budgets[0].reserved), (10, 0));
        // The period rolls: spend starts again.
        assert_eq!(
            l.account(None, &"k".into(), &budget, 1000).budgets[0].spent,
            0
        );
    }

    #[test]
    fn l5_refused_request_leaves_no_trace_on_a_later_refund() {
        // A refused request must change nothing (L5): whether one came in between or not,
        // the refund of the last reservation in a new, empty period behaves the same.
        let budget: Arc<[Budget]> = Arc::from(vec![Budget {
            id: "p".into(),
            limit: 100,
            period_ms: Some(4_000),
        }]);
        let b = |a: &str, m| BillingRequest {
            budgets: Arc::clone(&budget),
            ..req(a, m)
        };
        let run = |refused_in_between: bool| {
            let mut l = Ledger::default();
            l.seed_balance("acme", 1_000);
            l.admit(&b("a1", 10), 0);
            l.settle("a1", BillingOutcome::Settled(10), 0);
            l.admit(&b("a2", 10), 1_000);
            if refused_in_between {
                assert!(matches!(
                    l.admit(&b("a3", 1_000), 5_000),
                    BillingDecision::Refused(Refusal::Budget(_))
                ));
            }
            l.settle("a2", BillingOutcome::Refund, 6_000);
            l.account(None, &"k".into(), &budget, 7_000).budgets[0].resets_at
        };
        assert_eq!(run(true), run(false));
    }

    #[test]
    fn w8_subscription_covered_request_ignores_balance() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 0);
        let covered = BillingRequest {
            bill_balance: false,
            ..req("a1", 10)
        };
        assert_eq!(l.admit(&covered, 0), BillingDecision::Admitted);
        l.settle("a1", BillingOutcome::Settled(10), 0);
        assert_eq!(
            l.account(Some("acme"), &"k".into(), &[], 0).balance,
            Some(0)
        );
    }

    #[test]
    fn finished_attempts_memory_is_bounded() {
        let mut l = Ledger::default();
        l.seed_balance("acme", Money::MAX / 2);
        for i in 0..MAX_FINISHED_ATTEMPTS + 10 {
            let id = format!("a{i}");
            l.admit(&req(&id, 1), 0);
            l.settle(&id, BillingOutcome::Settled(1), 0);
        }
        assert!(
            l.attempts.len() <= MAX_FINISHED_ATTEMPTS + 1,
            "{}",
            l.attempts.len()
        );
        assert!(l.attempt("a0").is_none(), "the oldest went first");
        assert!(
            l.attempt(&format!("a{}", MAX_FINISHED_ATTEMPTS + 9))
                .is_some()
        );
    }

    #[test]
    fn finished_attempts_are_forgotten_after_a_day() {
        let mut l = Ledger::default();
        l.seed_balance("acme", 100);
        l.admit(&req("a1", 1), 0);
        l.settle("a1", BillingOutcome::Settled(1), 0);
        assert!(l.attempt("a1").is_some());
        l.admit(&req("a2", 1), ATTEMPT_MEMORY_MS);
        l.settle("a2", BillingOutcome::Settled(1), ATTEMPT_MEMORY_MS);
        assert!(l.attempt("a1").is_none());
    }
}
