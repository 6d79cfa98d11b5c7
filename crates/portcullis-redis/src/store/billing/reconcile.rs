//! [`ReconcileStore`](portcullis_core::ReconcileStore) for an operator's
//! reconciliation (B7), and the listing of pending attempts.

use super::{BillingOps, PENDING_COUNT_FIELD, PENDING_MONEY_FIELD, is_attempt_field};
use crate::client::protocol;
use crate::future::RedisStoreFuture;
use crate::scripts::args::{CorrectArgs, SettleArgs, SettleOutcome};
use crate::store::shared::{SettleReply, exact, failed, period, registry_books, reply_err};
use portcullis_core::{
    AttemptId, AttemptRef, Books, Corrected, Correction, MAX_PENDING_PAGE, Money, PendingAttempt,
    PendingTotal, Reconcile, Reconciled, StoreResult, SubjectKey,
};

impl BillingOps {
    /// The books named in the pending registry, in books order.
    fn pending_books(&self) -> RedisStoreFuture<Vec<Books>> {
        let mut cmd = redis::cmd("SMEMBERS");
        cmd.arg(self.client.keys().pending_registry());
        self.client.command(cmd, |m: Vec<String>| {
            let mut books: Vec<Books> = m.iter().filter_map(|m| registry_books(m)).collect();
            books.sort();
            Ok(books)
        })
    }

    /// What an operator sees of a pending attempt of `amount`, from its record's
    /// fields `k`, `kk`, `ps`.
    fn pending_of(
        &self,
        attempt: AttemptRef,
        amount: Money,
    ) -> RedisStoreFuture<Option<(String, PendingAttempt)>> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.client.keys().attempt(&attempt))
            .arg(&["s", "k", "kk", "ps"]);
        self.client.command(cmd, move |f: Vec<Option<String>>| {
            let [s, k, kk, ps] = <[Option<String>; 4]>::try_from(f)
                .map_err(|f| protocol(format!("attempt record: unexpected reply {f:?}")))?;
            let Some(s) = s else { return Ok(None) };
            let key = k.map(SubjectKey::from).or_else(|| match &attempt.books {
                Books::Key(k) => Some(k.clone()),
                Books::Tenant(_) => None,
            });
            Ok(Some((
                s,
                PendingAttempt {
                    attempt,
                    amount,
                    key,
                    billed_to_balance: kk.is_some(),
                    since: ps.and_then(|v| v.parse().ok()),
                },
            )))
        })
    }

    pub(crate) fn pending_page(
        &self,
        after: Option<&AttemptRef>,
        limit: usize,
    ) -> RedisStoreFuture<Vec<PendingAttempt>> {
        // The registry's books in order, from the cursor's; each one's pending list read
        // (and sorted) until the page is full; then each listed attempt's record, all in
        // flight at once. Operator work: a few round trips, bounded by the page.
        let limit = limit.min(MAX_PENDING_PAGE);
        let after = after.cloned();
        let books = self.pending_books();
        let store = self.clone();
        RedisStoreFuture::new(async move {
            let mut page: Vec<(AttemptRef, Money)> = Vec::new();
            for b in books.await? {
                if page.len() >= limit {
                    break;
                }
                if after.as_ref().is_some_and(|c| b < c.books) {
                    continue;
                }
                let mut cmd = redis::cmd("HGETALL");
                cmd.arg(store.client.keys().pending(&b));
                let mut list: Vec<(String, Money)> = store
                    .client
                    .command(cmd, |r: Vec<(String, Money)>| Ok(r))
                    .await?;
                list.retain(|(id, _)| is_attempt_field(id));
                list.sort();
                for (id, m) in list {
                    let a = AttemptRef {
                        attempt: AttemptId::from(id),
                        books: b.clone(),
                    };
                    if !portcullis_core::billing::listed_after(&a, after.as_ref()) {
                        continue;
                    }
                    page.push((a, m));
                    if page.len() >= limit {
                        break;
                    }
                }
            }
            let records: Vec<_> = page
                .into_iter()
                .map(|(a, m)| store.pending_of(a, m))
                .collect();
            let mut out = Vec::with_capacity(records.len());
            for r in futures_util::future::join_all(records).await {
                // Listed but its record gone: reconciled meanwhile.
                if let Some((_, p)) = r? {
                    out.push(p);
                }
            }
            Ok(out)
        })
    }

    pub(crate) fn reconcile(
        &self,
        attempt: &AttemptRef,
        how: Reconcile,
    ) -> RedisStoreFuture<Reconciled> {
        let (outcome, cost) = match how {
            Reconcile::Settle(c) => (SettleOutcome::Settled, c.max(0)),
            Reconcile::WriteOff => (SettleOutcome::Refund, 0),
        };
        let cost = match exact(cost, "cost") {
            Ok(c) => c,
            Err(e) => return failed(e),
        };
        // Its record first (what the usage record names), then the settle script for a
        // pending attempt only: one reconciled meanwhile answers "nothing done".
        let mut amount = redis::cmd("HGET");
        amount
            .arg(self.client.keys().pending(&attempt.books))
            .arg(&*attempt.attempt);
        let amount = self.client.command(amount, |m: Option<Money>| Ok(m));
        let store = self.clone();
        let attempt = attempt.clone();
        RedisStoreFuture::new(async move {
            let amount = amount.await?;
            let Some((state, was)) = store
                .pending_of(attempt.clone(), amount.unwrap_or(0))
                .await?
            else {
                return Ok(Reconciled::NotPending);
            };
            match (RecordState::of(&state), amount) {
                (RecordState::Pending, Some(_)) => {}
                (RecordState::Open, _) => return Ok(Reconciled::InFlight),
                _ => return Ok(Reconciled::NotPending),
            }
            let args = SettleArgs {
                time: store.client.time(),
                outcome,
                cost,
                budget_ttl: store.shared.budget_ttl(),
                attempt: attempt.attempt.to_string(),
                reconcile: true,
                retry: false,
            };
            let keys = store.shared.settle_keys(&attempt);
            store
                .client
                .eval(keys, args, move |r: Vec<i64>| {
                    match SettleReply::read(&r).ok_or_else(|| reply_err("reconcile", &r))? {
                        SettleReply::Settled(cost) => {
                            Ok(Reconciled::Settled { attempt: was, cost })
                        }
                        SettleReply::Refunded => Ok(Reconciled::WrittenOff { attempt: was }),
                        SettleReply::InFlight => Ok(Reconciled::InFlight),
                        SettleReply::Nothing => Ok(Reconciled::NotPending),
                        SettleReply::Pending(_) => Err(reply_err("reconcile", &r)),
                    }
                })
                .await
        })
    }

    /// A closed attempt's charge corrected once (B7): `billing_correct.lua`, one script
    /// on the books' slot; the marker it leaves expires with the correction's keep.
    pub(crate) fn correct(&self, c: &Correction) -> RedisStoreFuture<Corrected> {
        let difference = match exact(c.difference, "correction") {
            Ok(d) => d,
            Err(e) => return failed(e),
        };
        let periods = match c.budgets.iter().map(period).collect::<StoreResult<_>>() {
            Ok(p) => p,
            Err(e) => return failed(e),
        };
        let has_tenant = matches!(c.attempt.books, Books::Tenant(_));
        let keys = self.client.keys().correct(
            &c.attempt,
            &c.key,
            has_tenant && c.bill_balance,
            c.budgets.iter().map(|b| &*b.id),
        );
        let args = CorrectArgs {
            time: self.client.time(),
            difference,
            bill_balance: c.bill_balance,
            has_tenant,
            charged_at: c.charged_at,
            keep: c
                .keep_ms
                .clamp(1, portcullis_core::MAX_STORABLE_MONEY.unsigned_abs()),
            budget_ttl: self.shared.budget_ttl(),
            periods,
        };
        self.client.eval(keys, args, |r: Vec<i64>| match r[..] {
            [1] => Ok(Corrected::Applied),
            [0] => Ok(Corrected::AlreadyCorrected),
            [2] => Ok(Corrected::NotClosed),
            _ => Err(reply_err("correct", &r)),
        })
    }

    pub(crate) fn pending_totals(&self) -> RedisStoreFuture<Vec<(Books, PendingTotal)>> {
        let books = self.pending_books();
        let store = self.clone();
        RedisStoreFuture::new(async move {
            let books = books.await?;
            let reads: Vec<_> = books
                .iter()
                .map(|b| {
                    let mut cmd = redis::cmd("HMGET");
                    cmd.arg(store.client.keys().pending(b))
                        .arg(&[PENDING_COUNT_FIELD, PENDING_MONEY_FIELD]);
                    store
                        .client
                        .command(cmd, |v: (Option<u64>, Option<Money>)| Ok(v))
                })
                .collect();
            let mut out = Vec::new();
            for (b, r) in books
                .into_iter()
                .zip(futures_util::future::join_all(reads).await)
            {
                let (n, m) = r?;
                let t = PendingTotal {
                    attempts: n.unwrap_or(0),
                    amount: m.unwrap_or(0),
                };
                if t != PendingTotal::default() {
                    out.push((b, t));
                }
            }
            Ok(out)
        })
    }

    pub(crate) fn pending(&self) -> RedisStoreFuture<Vec<(AttemptRef, Money)>> {
        // The registry names the books with pending work; one HGETALL per books, all in
        // flight at once (each on its own slot).
        let mut cmd = redis::cmd("SMEMBERS");
        cmd.arg(self.client.keys().pending_registry());
        let members = self.client.command(cmd, |m: Vec<String>| Ok(m));
        let store = self.clone();
        RedisStoreFuture::new(async move {
            let books: Vec<Books> = members
                .await?
                .iter()
                .filter_map(|m| registry_books(m))
                .collect();
            let lists: Vec<_> = books
                .iter()
                .map(|b| {
                    let mut cmd = redis::cmd("HGETALL");
                    cmd.arg(store.client.keys().pending(b));
                    store.client.command(cmd, |r: Vec<(String, Money)>| Ok(r))
                })
                .collect();
            let mut v = Vec::new();
            for (b, list) in books
                .into_iter()
                .zip(futures_util::future::join_all(lists).await)
            {
                for (id, m) in list?.into_iter().filter(|(id, _)| is_attempt_field(id)) {
                    v.push((
                        AttemptRef {
                            attempt: AttemptId::from(id),
                            books: b.clone(),
                        },
                        m,
                    ));
                }
            }
            v.sort();
            Ok(v)
        })
    }
}

/// The state an attempt's record keeps (its field `s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecordState {
    Open,
    Pending,
    Other,
}

impl RecordState {
    fn of(s: &str) -> Self {
        match s {
            "o" => RecordState::Open,
            "p" => RecordState::Pending,
            _ => RecordState::Other,
        }
    }
}
