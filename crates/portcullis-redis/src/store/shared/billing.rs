//! Billing's calls decided in Redis alone, without a quota block: a request's
//! reservation and an attempt's settlement as scripts of their own (or ops of the
//! batch), with the arguments, keys and reply readers the money blocks build on. The
//! block book sends these for its blocks, and billing's operations (`BillingOps`)
//! for what no block decides.

use super::failed::FailedSettles;
use crate::client::Client;
use crate::future::RedisStoreFuture;
use crate::scripts::Effect;
use crate::scripts::args::{BudgetArg, ReserveArgs, ReserveMode, SettleArgs, SettleOutcome};
use portcullis_core::{
    AttemptId, AttemptRef, AttemptState, BillingDecision, BillingOutcome, BillingRequest, Books,
    Budget, Millis, Money, Refusal, StoreError, StoreErrorKind, StoreResult,
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

fn protocol(what: impl Into<String>) -> StoreError {
    StoreError::new(StoreErrorKind::Protocol, what)
}

pub(crate) fn exact(v: Money, what: &str) -> StoreResult<Money> {
    if v.unsigned_abs() <= MAX_EXACT_MONEY.unsigned_abs() {
        Ok(v)
    } else {
        Err(protocol(format!(
            "{what} {v} is beyond the exact range of the Redis store (|x| <= 2^53 - 1)"
        )))
    }
}

/// A budget's period as the scripts take it: ms, or none.
pub(crate) fn period(b: &Budget) -> StoreResult<Option<Millis>> {
    match b.period_ms {
        None => Ok(None),
        Some(p) if p <= MAX_EXACT_MONEY.unsigned_abs() => Ok(Some(p)),
        Some(p) => Err(protocol(format!(
            "budget {}: period {p} ms is beyond 2^53 - 1",
            b.id
        ))),
    }
}

pub(crate) fn failed<T: Send + 'static>(e: StoreError) -> RedisStoreFuture<T> {
    RedisStoreFuture::new(std::future::ready(Err(e)))
}

/// Billing's calls without blocks: reservations and settlements in Redis.
#[derive(Clone)]
pub(crate) struct SharedBilling {
    pub(crate) client: Client,
    /// Attempts whose settlement call failed: their next settlement is a retry (D10).
    failed: Arc<FailedSettles>,
}

impl SharedBilling {
    pub(crate) fn new(client: Client) -> Self {
        Self {
            client,
            failed: Arc::default(),
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
        self.client.write_command(cmd, Effect::FollowsUp)
    }

    /// The keys of the settle script for `attempt`: its record, its books' pending list
    /// (and counter), open attempts and tombstones.
    pub(crate) fn settle_keys(&self, attempt: &AttemptRef) -> Vec<String> {
        self.client.keys().settle(attempt)
    }
}

/// What `billing_settle.lua` answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SettleReply {
    /// Nothing done: never reserved, already final, or pending again.
    Nothing,
    Settled(Money),
    Pending(Money),
    Refunded,
    /// Nothing done: open, and only a pending attempt was to be reconciled.
    InFlight,
}

impl SettleReply {
    pub(crate) fn read(r: &[i64]) -> Option<Self> {
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

pub(crate) fn reply_err(what: &str, r: &[i64]) -> StoreError {
    protocol(format!("{what}: unexpected reply {r:?}"))
}

impl SharedBilling {
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
        self.client.batched(keys, args, decode)
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

pub(crate) fn registry_member(books: &Books) -> String {
    match books {
        Books::Tenant(t) => format!("t:{t}"),
        Books::Key(k) => format!("k:{}", k.as_str()),
    }
}

pub(crate) fn registry_books(member: &str) -> Option<Books> {
    if let Some(t) = member.strip_prefix("t:") {
        Some(Books::Tenant(t.into()))
    } else {
        member.strip_prefix("k:").map(|k| Books::Key(k.into()))
    }
}
