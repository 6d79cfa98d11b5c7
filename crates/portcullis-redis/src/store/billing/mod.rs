//! [`BillingStore`](portcullis_core::BillingStore) for [`RedisStore`](crate::RedisStore):
//! the decisions of
//! [`Ledger`](portcullis_core::Ledger) in Lua (B1–B7, D1–D3, D7). The design — keys, one
//! hash tag per tenant's books, expiries, number handling — is documented on
//! [`RedisStore`](crate::RedisStore#billing).
//!
//! [`ReconcileStore`](portcullis_core::ReconcileStore) for an operator's reconciliation (B7): each books keeps a pending
//! counter in two fields of its pending list (`<books>pending`) that no attempt id is
//! named, `"\0n"` (attempts) and `"\0m"` (money), removed when nothing is pending,
//! moved by the settle script and the sweep in the same script as the attempt it counts,
//! so [`pending_totals`](portcullis_core::ReconcileStore::pending_totals) reads two fields per books named
//! in the pending registry instead of every pending attempt. An attempt record
//! also keeps its subject key (`k`) and, once pending, when it went pending (`ps`).

mod failed;
mod reconcile;

pub(crate) use failed::FailedSettles;
use reconcile::registry_member;

use super::book::BlockBook;
use crate::client::Client;
use crate::future::RedisStoreFuture;
use crate::scripts::args::{
    AccountArgs, BudgetArg, CreditArgs, ReserveArgs, ReserveMode, SeedArgs, SettleArgs,
    SettleOutcome,
};
use portcullis_core::billing::BudgetView;
use portcullis_core::{
    AccountView, AttemptId, AttemptRef, AttemptState, BillingDecision, BillingOutcome,
    BillingRequest, Books, Budget, Millis, Money, Refusal, StoreError, StoreErrorKind, StoreResult,
    SubjectKey,
};
use std::sync::Arc;

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
pub const MAX_EXACT_MONEY: Money = portcullis_core::MAX_STORABLE_MONEY;

/// The field of a books' pending list (`<books>pending`) holding how many attempts are
/// pending: a NUL-led name, never an attempt id the layers make.
pub(crate) const PENDING_COUNT_FIELD: &str = "\0n";
/// The field of a books' pending list holding the money pending.
pub(crate) const PENDING_MONEY_FIELD: &str = "\0m";

/// True for a field of a pending list that names an attempt (not the counter).
pub(super) fn is_attempt_field(field: &str) -> bool {
    field != PENDING_COUNT_FIELD && field != PENDING_MONEY_FIELD
}

fn protocol(what: impl Into<String>) -> StoreError {
    StoreError::new(StoreErrorKind::Protocol, what)
}

pub(super) fn exact(v: Money, what: &str) -> StoreResult<Money> {
    if v.unsigned_abs() <= MAX_EXACT_MONEY.unsigned_abs() {
        Ok(v)
    } else {
        Err(protocol(format!(
            "{what} {v} is beyond the exact range of the Redis store (|x| <= 2^53 - 1)"
        )))
    }
}

/// A budget's period as the scripts take it: ms, or none.
fn period(b: &Budget) -> StoreResult<Option<Millis>> {
    match b.period_ms {
        None => Ok(None),
        Some(p) if p <= MAX_EXACT_MONEY.unsigned_abs() => Ok(Some(p)),
        Some(p) => Err(protocol(format!(
            "budget {}: period {p} ms is beyond 2^53 - 1",
            b.id
        ))),
    }
}

pub(super) fn failed<T: Send + 'static>(e: StoreError) -> RedisStoreFuture<T> {
    RedisStoreFuture::new(std::future::ready(Err(e)))
}

/// Billing: reservations, settlements, account views and an operator's reconciliation.
#[derive(Clone)]
pub(crate) struct BillingOps {
    pub(crate) client: Client,
    /// Attempts whose settlement call failed: their next settlement is a retry (D10).
    failed: Arc<FailedSettles>,
    book: Option<Arc<BlockBook>>,
}

impl BillingOps {
    pub(crate) fn new(
        client: Client,
        failed: Arc<FailedSettles>,
        book: Option<Arc<BlockBook>>,
    ) -> Self {
        Self {
            client,
            failed,
            book,
        }
    }

    pub(crate) fn budget_ttl(&self) -> Millis {
        self.client.amount_ttl_ms()
    }

    /// Registers `books` as having pending work (before the attempt becomes pending, so
    /// a listing never misses it).
    fn register_pending(&self, books: &Books) -> RedisStoreFuture<()> {
        let mut cmd = redis::cmd("SADD");
        cmd.arg(self.client.keys().pending_registry())
            .arg(registry_member(books));
        self.client.write_command(cmd, |_: i64| Ok(()))
    }
}

impl BillingOps {
    /// The keys of the settle script for `attempt`: its record, its books' pending list
    /// (and counter), open attempts and tombstones.
    pub(crate) fn settle_keys(&self, attempt: &AttemptRef) -> Vec<String> {
        self.client.keys().settle(attempt)
    }
}

/// What `billing_settle.lua` answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SettleReply {
    /// Nothing done: never reserved, already final, or pending again.
    Nothing,
    Settled(Money),
    Pending(Money),
    Refunded,
    /// Nothing done: open, and only a pending attempt was to be reconciled.
    InFlight,
}

impl SettleReply {
    pub(super) fn read(r: &[i64]) -> Option<Self> {
        Some(match r {
            [0] => SettleReply::Nothing,
            [1, c] => SettleReply::Settled(*c),
            [2, m] => SettleReply::Pending(*m),
            [3] => SettleReply::Refunded,
            [4] => SettleReply::InFlight,
            _ => return None,
        })
    }
}

pub(super) fn reply_err(what: &str, r: &[i64]) -> StoreError {
    protocol(format!("{what}: unexpected reply {r:?}"))
}

impl BillingOps {
    /// Keys and arguments of `billing_reserve.lua` for `req`, reserving `money` under
    /// attempt `attempt` for `lifetime_ms`, checked as `mode` says.
    pub(crate) fn reserve_args(
        &self,
        req: &BillingRequest,
        attempt: &AttemptId,
        money: Money,
        lifetime_ms: Millis,
        mode: ReserveMode,
    ) -> StoreResult<(Vec<String>, ReserveArgs)> {
        let money = exact(money.max(0), "money upper bound")?;
        let books = req.books();
        let keys = self.client.keys().reserve(
            &books,
            attempt,
            &req.key,
            req.tenant.is_some(),
            req.budgets.iter().map(|b| &*b.id),
        );
        let budgets = req
            .budgets
            .iter()
            .map(|b| {
                Ok(BudgetArg {
                    limit: b.limit,
                    period: period(b)?,
                })
            })
            .collect::<StoreResult<_>>()?;
        let args = ReserveArgs {
            time: self.client.time(),
            bill_balance: req.bill_balance,
            has_tenant: req.tenant.is_some(),
            spend_cap: req.spend_cap,
            money,
            budget_ttl: self.budget_ttl(),
            lifetime: lifetime_ms.max(1),
            tenant_expected: req.tenant_expected,
            books_base: self.client.keys().books(&books),
            attempt: attempt.to_string(),
            budgets,
            // Kept with the attempt: an operator's reconciliation names the key in its
            // record.
            subject: req.key.as_str().to_owned(),
            mode,
        };
        Ok((keys, args))
    }

    /// `req` reserved on its own in Redis, in the batch.
    pub(crate) fn reserve_shared(&self, req: &BillingRequest) -> RedisStoreFuture<BillingDecision> {
        let (keys, args) = match self.reserve_args(
            req,
            &req.attempt,
            req.money,
            req.lifetime_ms,
            ReserveMode::Plain,
        ) {
            Ok(call) => call,
            Err(e) => return failed(e),
        };
        let decode = self.reserve_decoder(req);
        // In the batch, sent at once: the settlements and releases queued before it ride
        // in the same call instead of one of their own.
        self.client.batched_now(keys, args, decode)
    }

    /// Reads `billing_reserve.lua`'s reply for `req`.
    pub(crate) fn reserve_decoder(
        &self,
        req: &BillingRequest,
    ) -> impl FnOnce(Vec<i64>) -> StoreResult<BillingDecision> + Send + 'static {
        let budgets = req.budgets.clone();
        let books = req.books();
        let store = self.clone();
        move |r: Vec<i64>| {
            let (swept, d) = r
                .split_first()
                .ok_or_else(|| reply_err("check_and_reserve", &r))?;
            if *swept > 0 {
                // Open attempts of a dead instance went pending: list them (B7). Off
                // the decision; rare.
                tracing::warn!(
                    swept,
                    "billing: open attempts past their lifetime swept into pending reconciliation"
                );
                let reg = store.register_pending(&books);
                tokio::spawn(async move {
                    if let Err(e) = reg.await {
                        tracing::error!(error = %e, "billing: registering swept pending attempts failed");
                    }
                });
            }
            match d {
                [1] => Ok(BillingDecision::Admitted),
                [0, 1] => Ok(BillingDecision::Refused(Refusal::InsufficientBalance)),
                [0, 2] => Ok(BillingDecision::Refused(Refusal::SpendCap)),
                [0, 4] => Ok(BillingDecision::Refused(Refusal::RecordMissing)),
                [0, 3, i] => usize::try_from(*i - 1)
                    .ok()
                    .and_then(|i| budgets.get(i))
                    .map(|b| BillingDecision::Refused(Refusal::Budget(b.id.clone())))
                    .ok_or_else(|| reply_err("check_and_reserve", &r)),
                _ => Err(reply_err("check_and_reserve", &r)),
            }
        }
    }

    /// Settles `attempt` in Redis (the store's own path, not a block's).
    pub(crate) fn settle_shared(
        &self,
        attempt: &AttemptRef,
        outcome: BillingOutcome,
    ) -> RedisStoreFuture<Option<AttemptState>> {
        let (code, cost) = match outcome {
            BillingOutcome::Settled(c) => (SettleOutcome::Settled, c.max(0)),
            BillingOutcome::Pending => (SettleOutcome::Pending, 0),
            BillingOutcome::Refund => (SettleOutcome::Refund, 0),
        };
        let cost = match exact(cost, "cost") {
            Ok(c) => c,
            Err(e) => return failed(e),
        };
        let keys = self.settle_keys(attempt);
        // A settlement of this attempt failed before (its answer never came): this is a
        // retry, which must tell "already final" from "lost" (D10).
        let retry = self.failed.was_failed(&keys[0]);
        let args = SettleArgs {
            time: self.client.time(),
            outcome: code,
            cost,
            budget_ttl: self.budget_ttl(),
            attempt: attempt.attempt.to_string(),
            reconcile: false,
            retry,
        };
        let decode = |r: Vec<i64>| match SettleReply::read(&r) {
            Some(SettleReply::Nothing) => Ok(None),
            Some(SettleReply::Settled(c)) => Ok(Some(AttemptState::Settled(c))),
            Some(SettleReply::Pending(m)) => Ok(Some(AttemptState::Pending(m))),
            Some(SettleReply::Refunded) => Ok(Some(AttemptState::Refunded)),
            Some(SettleReply::InFlight) | None => Err(reply_err("settle_attempt", &r)),
        };
        let attempt_key = keys[0].clone();
        let sent = if outcome != BillingOutcome::Pending && !retry {
            // In the batch, with the request's other settlements and releases.
            self.client.batched(keys, args, decode)
        } else {
            // Becoming pending (or maybe, on a retry): registered first (its own slot,
            // so its own command), then settled; each under its own deadline. Off the
            // response path, and rare.
            let reg = self.register_pending(&attempt.books);
            let store = self.clone();
            RedisStoreFuture::new(async move {
                reg.await?;
                store.client.eval(keys, args, decode).await
            })
        };
        let store = self.clone();
        RedisStoreFuture::new(async move {
            let r = sent.await;
            store.failed.note(attempt_key, r.is_ok());
            r
        })
    }
}

impl BillingOps {
    pub(crate) fn check_and_reserve(
        &self,
        req: &BillingRequest,
    ) -> RedisStoreFuture<BillingDecision> {
        if let Some(answer) = self.book.as_ref().and_then(|b| b.reserve(self, req, true)) {
            return answer;
        }
        self.reserve_shared(req)
    }

    pub(crate) fn settle_attempt(
        &self,
        attempt: &AttemptRef,
        outcome: BillingOutcome,
    ) -> RedisStoreFuture<Option<AttemptState>> {
        if let Some(answer) = self.book.as_ref().and_then(|b| b.settle(attempt, outcome)) {
            return answer;
        }
        self.settle_shared(attempt, outcome)
    }

    pub(crate) fn account(
        &self,
        tenant: Option<&str>,
        key: &SubjectKey,
        budgets: &[Budget],
    ) -> RedisStoreFuture<AccountView> {
        let keys = self.client.keys().account(
            &Books::of(tenant, key),
            key,
            tenant.is_some(),
            budgets.iter().map(|b| &*b.id),
        );
        let periods = match budgets.iter().map(period).collect::<StoreResult<_>>() {
            Ok(p) => p,
            Err(e) => return failed(e),
        };
        let args = AccountArgs {
            time: self.client.time(),
            has_tenant: tenant.is_some(),
            periods,
        };
        let has_tenant = tenant.is_some();
        let budgets: Vec<Budget> = budgets.to_vec();
        let (book, owner, subject) = (self.book.clone(), tenant.map(str::to_owned), key.clone());
        self.client.eval(keys, args, move |r: Vec<i64>| {
            if r.len() != 4 + 3 * budgets.len() {
                return Err(reply_err("account", &r));
            }
            let mut view = AccountView {
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
            };
            // Costs settled in this instance's billing blocks are not in Redis yet.
            if let Some(b) = &book {
                b.correct_account(owner.as_deref(), &subject, &mut view);
            }
            Ok(view)
        })
    }

    pub(crate) fn seed_balance(&self, tenant: &str, amount: Money) -> RedisStoreFuture<bool> {
        let amount = match exact(amount, "seed balance") {
            Ok(a) => a,
            Err(e) => return failed(e),
        };
        self.client.eval(
            vec![self.client.keys().tenant(tenant)],
            SeedArgs { amount },
            |r: i64| Ok(r == 1),
        )
    }

    pub(crate) fn set_balance(&self, tenant: &str, amount: Money) -> RedisStoreFuture<()> {
        let amount = match exact(amount, "balance") {
            Ok(a) => a,
            Err(e) => return failed(e),
        };
        // One field of one hash: no script needed.
        let mut cmd = redis::cmd("HSET");
        cmd.arg(self.client.keys().tenant(tenant))
            .arg("bal")
            .arg(amount);
        self.client.write_command(cmd, |_: i64| Ok(()))
    }

    pub(crate) fn credit(&self, tenant: &str, amount: Money) -> RedisStoreFuture<Money> {
        let amount = match exact(amount, "credit") {
            Ok(a) => a,
            Err(e) => return failed(e),
        };
        self.client.eval(
            vec![self.client.keys().tenant(tenant)],
            CreditArgs { amount },
            Ok,
        )
    }
}
