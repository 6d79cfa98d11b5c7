//! [`BillingStore`] for [`RedisStore`]: the decisions of
//! [`Ledger`](tollgate_core::Ledger) in Lua (B1–B4, D1–D3). The design — keys, the one
//! hash tag, expiries, number handling — is documented on
//! [`RedisStore`](crate::RedisStore#billing).

use crate::scripts::SCRIPTS;
use crate::store::{RedisStore, RedisStoreFuture};
use tollgate_core::billing::{ATTEMPT_MEMORY_MS, BudgetView};
use tollgate_core::{
    AccountView, AttemptId, AttemptState, BillingDecision, BillingOutcome, BillingRequest,
    BillingStore, Budget, Millis, Money, Refusal, StoreError, StoreErrorKind, StoreResult,
    SubjectKey,
};

/// Largest amount, in minor units, that the Redis store keeps exactly: 2^53 − 1
/// (9 007 199 254 740 991; about 9 billion currency units at micro-unit resolution).
///
/// The billing scripts compute on Lua numbers (doubles), which hold every integer up to
/// 2^53 exactly. An amount given to the store beyond ±`MAX_EXACT_MONEY` (a money upper
/// bound, a cost, a credit, a seed) is refused with a [`StoreError`] before anything is
/// sent, and a script whose result would leave the range (a balance, spend or budget
/// total) changes nothing and fails: the billing layer then fails closed (B5) instead
/// of keeping a rounded amount. Limits (spend caps, budget limits) are only compared
/// and may be any `i64`.
pub const MAX_EXACT_MONEY: Money = (1 << 53) - 1;

fn protocol(what: impl Into<String>) -> StoreError {
    StoreError::new(StoreErrorKind::Protocol, what)
}

fn exact(v: Money, what: &str) -> StoreResult<String> {
    if v.unsigned_abs() <= MAX_EXACT_MONEY.unsigned_abs() {
        Ok(v.to_string())
    } else {
        Err(protocol(format!(
            "{what} {v} is beyond the exact range of the Redis store (|x| <= 2^53 - 1)"
        )))
    }
}

/// A budget's period as the scripts take it: ms, or -1 for none.
fn period(b: &Budget) -> StoreResult<String> {
    match b.period_ms {
        None => Ok("-1".to_owned()),
        Some(p) if p <= MAX_EXACT_MONEY.unsigned_abs() => Ok(p.to_string()),
        Some(p) => Err(protocol(format!(
            "budget {}: period {p} ms is beyond 2^53 - 1",
            b.id
        ))),
    }
}

fn flag(b: bool) -> String {
    if b { "1" } else { "0" }.to_owned()
}

fn failed<T: Send + 'static>(e: StoreError) -> RedisStoreFuture<T> {
    RedisStoreFuture::new(std::future::ready(Err(e)))
}

impl RedisStore {
    /// The key of a tenant's balance: `<prefix>:{<billing tag>}:tenant:<tenant>` (HASH:
    /// `bal`, `pend`).
    pub fn tenant_key(&self, tenant: &str) -> String {
        format!("{}tenant:{tenant}", self.billing_base())
    }

    /// The key of an API key's spend: `<prefix>:{<billing tag>}:key:<subject>` (HASH:
    /// `spent`, `pend`).
    pub fn spend_key(&self, key: &SubjectKey) -> String {
        format!("{}key:{}", self.billing_base(), key.as_str())
    }

    /// The key of a money budget: `<prefix>:{<billing tag>}:budget:<id>` (HASH: `start`,
    /// `spent`, `res`).
    pub fn budget_key(&self, id: &str) -> String {
        format!("{}budget:{id}", self.billing_base())
    }

    /// The key of an attempt's record: `<prefix>:{<billing tag>}:attempt:<id>`.
    pub fn attempt_key(&self, id: &str) -> String {
        format!("{}attempt:{id}", self.billing_base())
    }

    /// The key of the list of attempts pending reconciliation:
    /// `<prefix>:{<billing tag>}:pending` (HASH: attempt id → amount).
    pub fn pending_key(&self) -> String {
        format!("{}pending", self.billing_base())
    }

    fn budget_ttl(&self) -> String {
        self.amount_ttl_ms().to_string()
    }
}

fn reply_err(what: &str, r: &[i64]) -> StoreError {
    protocol(format!("{what}: unexpected reply {r:?}"))
}

impl BillingStore for RedisStore {
    type Future<T: Send + 'static> = RedisStoreFuture<T>;

    fn check_and_reserve(&self, req: &BillingRequest) -> Self::Future<BillingDecision> {
        let money = match exact(req.money.max(0), "money upper bound") {
            Ok(m) => m,
            Err(e) => return failed(e),
        };
        let attempt = self.attempt_key(&req.attempt);
        let spend = self.spend_key(&req.key);
        let tenant = req.tenant.as_deref().map(|t| self.tenant_key(t));
        let mut keys = Vec::with_capacity(3 + req.budgets.len());
        keys.push(attempt.clone());
        keys.push(tenant.unwrap_or(attempt));
        keys.push(spend);
        let mut args = Vec::with_capacity(7 + 2 * req.budgets.len());
        args.extend([
            self.time(),
            flag(req.bill_balance),
            flag(req.tenant.is_some()),
            req.spend_cap.map_or_else(String::new, |c| c.to_string()),
            money,
            self.budget_ttl(),
            ATTEMPT_MEMORY_MS.to_string(),
        ]);
        for b in req.budgets.iter() {
            keys.push(self.budget_key(&b.id));
            args.push(b.limit.to_string());
            match period(b) {
                Ok(p) => args.push(p),
                Err(e) => return failed(e),
            }
        }
        let budgets = req.budgets.clone();
        self.eval(
            &SCRIPTS.reserve,
            keys,
            args,
            None,
            move |r: Vec<i64>| match r.as_slice() {
                [1] => Ok(BillingDecision::Admitted),
                [0, 1] => Ok(BillingDecision::Refused(Refusal::InsufficientBalance)),
                [0, 2] => Ok(BillingDecision::Refused(Refusal::SpendCap)),
                [0, 3, i] => usize::try_from(*i - 1)
                    .ok()
                    .and_then(|i| budgets.get(i))
                    .map(|b| BillingDecision::Refused(Refusal::Budget(b.id.clone())))
                    .ok_or_else(|| reply_err("check_and_reserve", &r)),
                _ => Err(reply_err("check_and_reserve", &r)),
            },
        )
    }

    fn settle_attempt(
        &self,
        attempt: &AttemptId,
        outcome: BillingOutcome,
    ) -> Self::Future<Option<AttemptState>> {
        let (code, cost) = match outcome {
            BillingOutcome::Settled(c) => ("s", c.max(0)),
            BillingOutcome::Pending => ("p", 0),
            BillingOutcome::Refund => ("r", 0),
        };
        let cost = match exact(cost, "cost") {
            Ok(c) => c,
            Err(e) => return failed(e),
        };
        let args = vec![
            self.time(),
            code.to_owned(),
            cost,
            self.budget_ttl(),
            ATTEMPT_MEMORY_MS.to_string(),
            attempt.to_string(),
        ];
        self.eval(
            &SCRIPTS.settle_attempt,
            vec![self.attempt_key(attempt), self.pending_key()],
            args,
            None,
            |r: Vec<i64>| match r.as_slice() {
                [0] => Ok(None),
                [1, c] => Ok(Some(AttemptState::Settled(*c))),
                [2, m] => Ok(Some(AttemptState::Pending(*m))),
                [3] => Ok(Some(AttemptState::Refunded)),
                _ => Err(reply_err("settle_attempt", &r)),
            },
        )
    }

    fn account(
        &self,
        tenant: Option<&str>,
        key: &SubjectKey,
        budgets: &[Budget],
    ) -> Self::Future<AccountView> {
        let spend = self.spend_key(key);
        let mut keys = Vec::with_capacity(2 + budgets.len());
        keys.push(tenant.map_or_else(|| spend.clone(), |t| self.tenant_key(t)));
        keys.push(spend);
        let mut args = Vec::with_capacity(2 + budgets.len());
        args.extend([self.time(), flag(tenant.is_some())]);
        for b in budgets {
            keys.push(self.budget_key(&b.id));
            match period(b) {
                Ok(p) => args.push(p),
                Err(e) => return failed(e),
            }
        }
        let has_tenant = tenant.is_some();
        let budgets: Vec<Budget> = budgets.to_vec();
        self.eval(&SCRIPTS.account, keys, args, None, move |r: Vec<i64>| {
            if r.len() != 4 + 3 * budgets.len() {
                return Err(reply_err("account", &r));
            }
            Ok(AccountView {
                balance: has_tenant.then_some(r[0]),
                tenant_pending: r[1],
                key_spent: r[2],
                key_pending: r[3],
                budgets: budgets
                    .into_iter()
                    .zip(r[4..].chunks_exact(3))
                    .map(|(b, v)| BudgetView {
                        id: b.id,
                        limit: b.limit,
                        spent: v[0],
                        reserved: v[1],
                        resets_at: Millis::try_from(v[2]).ok(),
                    })
                    .collect(),
            })
        })
    }

    fn seed_balance(&self, tenant: &str, amount: Money) -> Self::Future<()> {
        let amount = match exact(amount, "seed balance") {
            Ok(a) => a,
            Err(e) => return failed(e),
        };
        self.eval(
            &SCRIPTS.seed,
            vec![self.tenant_key(tenant)],
            vec![amount],
            None,
            |_: i64| Ok(()),
        )
    }

    fn credit(&self, tenant: &str, amount: Money) -> Self::Future<Money> {
        let amount = match exact(amount, "credit") {
            Ok(a) => a,
            Err(e) => return failed(e),
        };
        self.eval(
            &SCRIPTS.credit,
            vec![self.tenant_key(tenant)],
            vec![amount],
            None,
            Ok,
        )
    }

    fn pending(&self) -> Self::Future<Vec<(AttemptId, Money)>> {
        // One HGETALL: the list needs no script and no time.
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(self.pending_key());
        self.command(cmd, |r: Vec<(String, Money)>| {
            let mut v: Vec<(AttemptId, Money)> = r
                .into_iter()
                .map(|(id, m)| (AttemptId::from(id), m))
                .collect();
            v.sort();
            Ok(v)
        })
    }
}
