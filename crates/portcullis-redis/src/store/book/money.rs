//! Billing quota blocks (see [`portcullis_core::blocks`]): a books' reservations taken
//! from money an instance reserved in one attempt, and settled as one.
//!
//! A block is an attempt of its own in Redis (`blk-<instance>-<n>`) whose upper bound —
//! up to 256 requests' worth, at most 1/64 of each budget — is reserved in the request's
//! budgets, granted only while the balance (less pending) and the key's spend cap have
//! 64 times the block's money to spare. Requests then reserve from it in memory and
//! settle here; the block settles once, at the sum of their costs, when its last
//! request has ended (retried until it lands: settlement is idempotent per attempt;
//! on a Cluster without replica acknowledgements sent again if its slot changes owner
//! soon after, in case the failover lost it — see `WATCH_FOR`). A
//! request whose result is unknown is moved to an attempt of its own in Redis and left
//! pending there for reconciliation, as without blocks. An instance that dies holding a
//! block leaves its attempt open: the sweep takes it into pending reconciliation after
//! its lifetime, as any attempt of a dead instance.

use super::BlockBook;
use crate::future::{RedisStoreFuture, spawn_quietly};
use crate::scripts::args::{BlockReserveArgs, ReserveMode, SettleArgs, SettleOutcome};
use crate::store::shared::SharedBilling;
use portcullis_core::blocks::{MoneyBack, MoneyLocal, MoneySettled, money_key};
use portcullis_core::{
    AttemptRef, AttemptState, BillingDecision, BillingOutcome, BillingRequest, StoreError,
    StoreErrorKind, StoreResult,
};
use std::sync::Arc;
use std::time::Duration;

/// Spacing of the retries of a block's settlement: doubling from the first to the
/// last, for about an hour in all; after that the sweep takes the block into pending.
const BACK_FIRST: Duration = Duration::from_millis(50);
const BACK_LAST: Duration = Duration::from_secs(30);
const BACK_RETRIES: u32 = 130;

/// On a Cluster without replica acknowledgements, how long after a block's settlement
/// landed the store watches the owner of its books' slot (D10): a failover may lose
/// what the old master acknowledged but had not yet replicated, and a retirement lost
/// so would leave the block's money reserved by nobody until the sweep, its request
/// lifetime later (an hour by default). Seen to change owner (the store rereads the
/// owners every second), the settlement is sent again and lands on the master that
/// took over; where it had landed, the attempt is gone and the resend, which is not
/// sent as a retry, does nothing. Long enough for a failover that waits out a dead
/// master's node timeout (15 s by default).
const WATCH_FOR: Duration = Duration::from_secs(30);
/// When, after the landing, the watch looks: soon for a forced failover, then less
/// often, so a retired block costs six timer wakeups rather than one a second.
const WATCH_AT: [Duration; 6] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(16),
    WATCH_FOR,
];

impl BlockBook {
    /// `req` decided from a billing block, or by borrowing one; `None`: the request
    /// reserves on its own.
    /// `may_wait`: while a block for it is being borrowed, wait for that once (single
    /// node) instead of reserving alone.
    pub(crate) fn reserve(
        self: &Arc<Self>,
        req: &BillingRequest,
        may_wait: bool,
    ) -> Option<RedisStoreFuture<BillingDecision>> {
        let key = money_key(req);
        let asked_at = self.now();
        let mut blocks = self.table();
        let ask = match blocks.decide_money(&key, req, asked_at) {
            MoneyLocal::Admitted => {
                return Some(RedisStoreFuture::ready(Ok(BillingDecision::Admitted)));
            }
            MoneyLocal::Wait if may_wait && !self.client.is_cluster() => {
                let seen = self.borrows_ended();
                drop(blocks);
                let (book, req) = (Arc::clone(self), req.clone());
                return Some(RedisStoreFuture::new(async move {
                    book.wait(seen).await?;
                    match book.reserve(&req, false) {
                        Some(answer) => answer.await,
                        None => book.billing.reserve_shared(&req).await,
                    }
                }));
            }
            MoneyLocal::Shared | MoneyLocal::Wait => return None,
            MoneyLocal::Borrow(ask) => ask,
        };
        let max_age = blocks.sizing().max_age_ms;
        drop(blocks);
        let block = portcullis_core::id::with_counter(
            &format!("blk-{}-", self.client.instance_id()),
            self.client.next_id(),
        );
        let lifetime = req.lifetime_ms.saturating_add(max_age);
        let call = match block_reserve_call(&self.billing, req, &block, ask, lifetime) {
            Ok(call) => call,
            Err(e) => {
                self.table().abandon_money(&key);
                return Some(RedisStoreFuture::ready(Err(e)));
            }
        };
        let (req, books, mine) = (req.clone(), req.books(), req.attempt_ref());
        let (book, undo_book) = (Arc::clone(self), Arc::clone(self));
        Some(self.borrowing(
            call,
            move |r: StoreResult<(bool, BillingDecision)>| {
                let mut blocks = book.table();
                match r {
                    Ok((true, BillingDecision::Admitted)) => {
                        let attempt = AttemptRef {
                            attempt: block,
                            books,
                        };
                        let retire = blocks.install_money(&key, &req, attempt, ask, asked_at);
                        drop(blocks);
                        book.schedule_retire(vec![retire]);
                        Ok(BillingDecision::Admitted)
                    }
                    Err(e) => {
                        blocks.abandon_money(&key);
                        drop(blocks);
                        // The call may still run in Redis (late, after a stall) and
                        // reserve the block for nobody: its attempt is refunded — after
                        // it on the same connection, idempotent per attempt, and sent
                        // again until it lands (D9).
                        let attempt = AttemptRef {
                            attempt: block,
                            books,
                        };
                        drop(book.billing.settle_shared(&attempt, BillingOutcome::Refund));
                        Err(e)
                    }
                    other => {
                        blocks.abandon_money(&key);
                        other.map(|(_, d)| d)
                    }
                }
            },
            // The request went away before its answer: whatever admitted it (the new
            // block, or Redis) gives it back.
            move |d| {
                if d == BillingDecision::Admitted {
                    spawn_quietly(undo_book.settle_attempt(&mine, BillingOutcome::Refund));
                }
            },
        ))
    }

    /// Settles `attempt`: from its billing block if it is an attempt of one, else in
    /// Redis.
    pub(crate) fn settle_attempt(
        self: &Arc<Self>,
        attempt: &AttemptRef,
        outcome: BillingOutcome,
    ) -> RedisStoreFuture<Option<AttemptState>> {
        self.settle(attempt, outcome)
            .unwrap_or_else(|| self.billing.settle_shared(attempt, outcome))
    }

    /// Settles an attempt admitted from a billing block; `None` if it is not one.
    pub(crate) fn settle(
        self: &Arc<Self>,
        attempt: &AttemptRef,
        outcome: BillingOutcome,
    ) -> Option<RedisStoreFuture<Option<AttemptState>>> {
        let settled = self.table().settle_money(attempt, outcome)?;
        match settled {
            MoneySettled::Done(state, back) => {
                if let Some(back) = back {
                    self.money_back(back);
                }
                Some(RedisStoreFuture::ready(Ok(state)))
            }
            MoneySettled::ToPending(req, back) => {
                // Its own attempt in Redis (its block already holds its money, so no
                // check), pending — retried until it lands; only then does the block
                // settle, so the budgets hold its money throughout. If it never lands the
                // block is not settled either: the sweep takes the block's whole money
                // into pending reconciliation, and nothing is charged as zero (B4).
                let book = Arc::clone(self);
                let moved = RedisStoreFuture::new(async move {
                    let mut wait = BACK_FIRST;
                    let mut last = None;
                    for _ in 0..BACK_RETRIES {
                        match book.move_to_pending(&req).await {
                            Ok(state) => {
                                if let Some(back) = back {
                                    book.money_back(back);
                                }
                                return Ok(state);
                            }
                            Err(e) => {
                                tracing::debug!(error = %e, attempt = %req.attempt,
                                    "billing: moving an attempt of a quota block to pending failed; retrying");
                                last = Some(e);
                            }
                        }
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(BACK_LAST);
                    }
                    tracing::error!(attempt = %req.attempt,
                        "billing: an attempt of a quota block never reached pending; its block is left to the sweep");
                    Err(last.unwrap_or_else(|| {
                        StoreError::new(StoreErrorKind::Unavailable, "never moved to pending")
                    }))
                });
                Some(self.borrowing(moved, |r| r, |_| {}))
            }
        }
    }

    /// An attempt of a block whose result is unknown, as its own attempt in Redis,
    /// pending (both steps are idempotent per attempt, so a retry is safe).
    async fn move_to_pending(&self, req: &BillingRequest) -> StoreResult<Option<AttemptState>> {
        let billing = &self.billing;
        let (keys, args) = billing.reserve_args(
            req,
            &req.attempt,
            req.money,
            req.lifetime_ms,
            ReserveMode::Force,
        )?;
        self.client
            .batched(keys, args, billing.reserve_decoder(req))
            .await?;
        billing
            .settle_shared(&req.attempt_ref(), BillingOutcome::Pending)
            .await
    }

    /// Charges a part of a billing block still in use: the costs of its ended requests
    /// so far (cumulative, so a part sent twice or late charges nothing twice), in the
    /// batch; keyed by the block's attempt and sent again until it lands (D9).
    pub(super) fn money_part(&self, part: MoneyBack) {
        self.money_in_batch(&part, SettleOutcome::Part);
    }

    /// Sends a block's settlement (`s`) or part (`c`) in the batch, sent again until it
    /// lands, never as a retry that would take a missing attempt for a lost one: an
    /// attempt already final, or gone, is left as it is.
    fn money_in_batch(&self, back: &MoneyBack, outcome: SettleOutcome) {
        let keys = self.billing.settle_keys(&back.attempt);
        let args = SettleArgs {
            time: self.client.time(),
            outcome,
            cost: back.cost.max(0),
            budget_ttl: self.billing.budget_ttl(),
            attempt: back.attempt.attempt.to_string(),
            reconcile: false,
            retry: false,
        };
        drop(self.client.batched(keys, args, |_: redis::Value| Ok(())));
    }

    /// Sends a block's landed settlement again if the owner of its slot changes within
    /// [`WATCH_FOR`]: see there.
    async fn resend_if_moved(&self, back: &MoneyBack) {
        let Some(attempt) = self.billing.settle_keys(&back.attempt).into_iter().next() else {
            return;
        };
        let landed = tokio::time::Instant::now();
        for at in WATCH_AT {
            tokio::time::sleep_until(landed + at).await;
            // Moved since it landed, or within a reread of the owners before (a change
            // is seen up to one reread late).
            let since = landed.elapsed() + crate::client::TOPOLOGY_EVERY;
            if self
                .client
                .slot_moved_within(&attempt, portcullis_core::clock::millis(since))
            {
                tracing::info!(attempt = %back.attempt.attempt,
                    "billing: a quota block's books changed master after its settlement; sending it again");
                self.money_in_batch(back, SettleOutcome::Settled);
                return;
            }
        }
    }

    /// Settles a spent billing block at its requests' costs, retrying until it lands.
    pub(super) fn money_back(self: &Arc<Self>, back: MoneyBack) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let book = Arc::clone(self);
        rt.spawn(async move {
            let mut wait = BACK_FIRST;
            for _ in 0..BACK_RETRIES {
                match book
                    .billing
                    .settle_shared(&back.attempt, BillingOutcome::Settled(back.cost))
                    .await
                {
                    Ok(_) => {
                        if book.client.replica_acks() == 0 && book.client.is_cluster() {
                            book.resend_if_moved(&back).await;
                        }
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, attempt = %back.attempt.attempt,
                            "billing: settling a quota block failed; retrying");
                    }
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(BACK_LAST);
            }
            tracing::error!(attempt = %back.attempt.attempt,
                "billing: a quota block never settled; the sweep takes it into pending reconciliation");
        });
    }
}

/// The batch op (`bb`) that reserves `ask` for `req` as block attempt `block` (for
/// `lifetime` ms) — or, when the block does not fit, `req` alone — and answers
/// whether the block was reserved, and the decision.
fn block_reserve_call(
    billing: &SharedBilling,
    req: &BillingRequest,
    block: &portcullis_core::AttemptId,
    ask: portcullis_core::blocks::MoneyAsk,
    lifetime: portcullis_core::Millis,
) -> StoreResult<RedisStoreFuture<(bool, BillingDecision)>> {
    let mode = ReserveMode::Block {
        headroom: ask.headroom,
    };
    let (kb, block) = billing.reserve_args(req, block, ask.money, lifetime, mode)?;
    let (ks, alone) = billing.reserve_args(
        req,
        &req.attempt,
        req.money,
        req.lifetime_ms,
        ReserveMode::Plain,
    )?;
    let args = BlockReserveArgs {
        block_keys: kb.len(),
        block,
        alone,
    };
    let keys = kb.into_iter().chain(ks).collect();
    let decode = billing.reserve_decoder(req);
    Ok(billing.client.batched(keys, args, move |r: redis::Value| {
        let bad = || {
            StoreError::new(
                StoreErrorKind::Protocol,
                format!("check_and_reserve (block): unexpected reply {r:?}"),
            )
        };
        let redis::Value::Array(parts) = &r else {
            return Err(bad());
        };
        let (Some(redis::Value::Int(took)), Some(inner)) = (parts.first(), parts.get(1)) else {
            return Err(bad());
        };
        let inner: Vec<i64> =
            redis::FromRedisValue::from_redis_value(inner.clone()).map_err(|_| bad())?;
        Ok((*took == 1, decode(inner)?))
    }))
}
