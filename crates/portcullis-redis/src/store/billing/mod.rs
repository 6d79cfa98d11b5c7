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

mod reconcile;

use super::book::BlockBook;
use super::shared::{SharedBilling, exact, failed, period, reply_err};
use crate::client::Client;
use crate::future::RedisStoreFuture;
use crate::scripts::Effect;
use crate::scripts::args::{AccountArgs, CreditArgs, SeedArgs};
use portcullis_core::billing::BudgetView;
use portcullis_core::{
    AccountView, AttemptRef, AttemptState, BillingDecision, BillingOutcome, BillingRequest, Books,
    Budget, Millis, Money, StoreResult, SubjectKey,
};
use std::sync::Arc;

/// The field of a books' pending list (`<books>pending`) holding how many attempts are
/// pending: a NUL-led name, never an attempt id the layers make.
pub(crate) const PENDING_COUNT_FIELD: &str = "\0n";
/// The field of a books' pending list holding the money pending.
pub(crate) const PENDING_MONEY_FIELD: &str = "\0m";

/// True for a field of a pending list that names an attempt (not the counter).
pub(super) fn is_attempt_field(field: &str) -> bool {
    field != PENDING_COUNT_FIELD && field != PENDING_MONEY_FIELD
}

/// Billing: reservations, settlements, account views and an operator's reconciliation.
/// A request is decided from a quota block where the book has one (or borrows one),
/// else by the shared calls ([`SharedBilling`]).
#[derive(Clone)]
pub(crate) struct BillingOps {
    client: Client,
    shared: SharedBilling,
    book: Option<Arc<BlockBook>>,
}

impl BillingOps {
    pub(crate) fn new(shared: SharedBilling, book: Option<Arc<BlockBook>>) -> Self {
        Self {
            client: shared.client.clone(),
            shared,
            book,
        }
    }

    pub(crate) fn check_and_reserve(
        &self,
        req: &BillingRequest,
    ) -> RedisStoreFuture<BillingDecision> {
        if let Some(answer) = self.book.as_ref().and_then(|b| b.reserve(req, true)) {
            return answer;
        }
        self.shared.reserve_shared(req)
    }

    pub(crate) fn settle_attempt(
        &self,
        attempt: &AttemptRef,
        outcome: BillingOutcome,
    ) -> RedisStoreFuture<Option<AttemptState>> {
        match &self.book {
            Some(book) => book.settle_attempt(attempt, outcome),
            None => self.shared.settle_shared(attempt, outcome),
        }
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

    /// Writes `key`'s spend in `books` unless its record holds one (`HSETNX`): a key
    /// settled in a billing block still in use has its spend field already.
    pub(crate) fn seed_key_spend(
        &self,
        books: &Books,
        key: &SubjectKey,
        spent: Money,
    ) -> RedisStoreFuture<bool> {
        let spent = match exact(spent, "seed key spend") {
            Ok(a) => a,
            Err(e) => return failed(e),
        };
        let mut cmd = redis::cmd("HSETNX");
        cmd.arg(self.client.keys().spend(books, key))
            .arg("spent")
            .arg(spent);
        self.client
            .write_command_with(cmd, Effect::Admits, |r: i64| Ok(r == 1))
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
        self.client.write_command(cmd, Effect::Admits)
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
