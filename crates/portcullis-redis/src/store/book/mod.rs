//! The block book: the quota blocks this instance borrowed (see
//! [`portcullis_core::blocks`]) and everything that touches them. The joint decisions
//! ask the book first ([`BlockBook::decide`]); where it says to borrow, their call asks
//! Redis for a block too and runs through [`BlockBook::borrowing`], which installs what
//! Redis granted (or clears the marks); later requests are decided from the block in
//! memory, and what a block did not use is given back when it retires.
//!
//! A borrowing call runs as its own task: once Redis has counted a block, the block is
//! installed even if the request that asked went away meanwhile (its own unit is then
//! handed back locally), so no borrowed share is lost with a dropped future.
//!
//! The book sits beneath the operations it serves (slots, windows, joint decisions,
//! billing): what it sends to Redis for its blocks — a window's settlement, billing's
//! reservations and settlements — comes from the shared calls ([`super::shared`]).

mod borrowed;
mod money;

pub(crate) use borrowed::{release, renew, settle};

use super::shared::{SharedBilling, settle_window};
use crate::client::Client;
use crate::codec;
use crate::future::RedisStoreFuture;
use crate::keys::Keys;
use crate::scripts::args::{BlockLeasesArgs, SomeBlockLeasesArgs};
use portcullis_core::blocks::{
    BlockKind, BlockSizing, Blocks, Borrow, GiveBack, Local, LocalGrant, MONEY_PART_EVERY_MS,
    MoneyTick, Retire, SlotPart, WindowPart,
};
use portcullis_core::{LeaseId, Millis, StoreError, StoreErrorKind, StoreResult, WindowTicket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The quota blocks of this instance, with the client that borrows and gives them back.
pub(crate) struct BlockBook {
    client: Client,
    /// Billing's calls without blocks, for the money blocks' reservations and
    /// settlements (and the requests no block decides).
    billing: SharedBilling,
    table: Mutex<Blocks>,
    /// Origin of this process's block clock.
    origin: std::time::Instant,
    /// Woken when a borrowing call ends (see [`wait`](Self::wait)).
    borrows: Arc<tokio::sync::Notify>,
    /// Borrowing calls ended so far, and the count at the last one that failed.
    borrow_gen: AtomicU64,
    borrow_failed: AtomicU64,
}

/// What the book says of a request.
pub(crate) enum Decided {
    /// Decided from blocks in memory.
    Granted(LocalGrant),
    /// Ask Redis for the blocks `Borrow` names too.
    Borrow(Borrow),
    /// A block it needs is on its way: wait for that borrow (see
    /// [`BlockBook::wait`]) from `seen`, then decide again.
    Wait(u64),
    /// Decide it in Redis, as without blocks.
    Shared,
}

impl BlockBook {
    pub(crate) fn new(client: Client, sizing: BlockSizing, billing: SharedBilling) -> Self {
        Self {
            client,
            billing,
            table: Mutex::new(Blocks::new(sizing)),
            origin: std::time::Instant::now(),
            borrows: Arc::new(tokio::sync::Notify::new()),
            borrow_gen: AtomicU64::new(0),
            borrow_failed: AtomicU64::new(0),
        }
    }

    fn table(&self) -> MutexGuard<'_, Blocks> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This process's block clock, in ms (see `TimeSource::local_ms`).
    pub(crate) fn now(&self) -> Millis {
        self.client.local_ms(self.origin)
    }

    /// Decides a request of `slot` and `windows` asked at `asked_at` from the blocks;
    /// `may_wait`: a request that finds a block it needs being borrowed waits for it
    /// (on a single node) instead of deciding alone.
    pub(crate) fn decide(
        &self,
        slot: Option<SlotPart<'_>>,
        windows: &[WindowPart<'_>],
        asked_at: Millis,
        may_wait: bool,
    ) -> Decided {
        let mut table = self.table();
        match table.decide(slot, windows, asked_at) {
            Local::Granted(g) => Decided::Granted(g),
            Local::Ask(b) if !b.is_single() => Decided::Borrow(b),
            Local::Ask(_) if may_wait && !self.client.is_cluster() => {
                Decided::Wait(self.borrows_ended())
            }
            Local::Ask(_) | Local::Shared => Decided::Shared,
        }
    }

    /// Installs the blocks a borrowing call got — `slot`: its part, the leases taken
    /// and the lease; `windows`: each part, its ticket and the requests it counted —
    /// and answers the request's lease and tickets. `no_slot`: the slot key whose block
    /// was asked and not got (its marks are cleared first, in the same step).
    pub(crate) fn install(
        self: &Arc<Self>,
        slot: Option<(SlotPart<'_>, u32, LeaseId)>,
        no_slot: Option<&str>,
        windows: &[(WindowPart<'_>, WindowTicket, u64)],
        borrow: &Borrow,
        asked_at: Millis,
    ) -> (Option<LeaseId>, Vec<WindowTicket>) {
        let mut table = self.table();
        if no_slot.is_some() {
            table.abandon(no_slot, &[], borrow);
        }
        let (lease, tickets, retire) = table.install(slot, windows, borrow, asked_at);
        drop(table);
        self.schedule_retire(retire);
        (lease, tickets)
    }

    /// Clears the borrowing marks of a call that got no block.
    pub(crate) fn abandon(&self, slot: Option<&str>, windows: &[&str], borrow: &Borrow) {
        self.table().abandon(slot, windows, borrow);
    }

    /// `view`, an account's usage, with the costs settled in this instance's billing
    /// blocks and not in Redis yet.
    pub(crate) fn correct_account(
        &self,
        tenant: Option<&str>,
        key: &portcullis_core::SubjectKey,
        view: &mut portcullis_core::AccountView,
    ) {
        self.table().correct_account(tenant, key, view);
    }

    /// Leases of `key` this instance borrowed and did not hand out.
    pub(crate) fn unused_slots(&self, key: &str) -> u32 {
        self.table().unused_slots(key)
    }

    /// Requests and tokens of window state `key` borrowed and not used.
    pub(crate) fn unused_window(&self, key: &str) -> (u64, u64) {
        let now = self.now();
        self.table().unused_window(key, now)
    }

    /// Sends what a spent block gives back, in the batch with the settlements ending
    /// now; a call that fails is sent again until it lands (D9).
    pub(crate) fn give_back(&self, back: GiveBack) {
        let c = &self.client;
        let sent = match back {
            GiveBack::Window {
                key,
                ticket,
                requests,
                used,
                outcome,
                handed,
            } => {
                let blob = codec::settle_block_args(
                    c.amount_ttl_ms(),
                    &ticket,
                    outcome,
                    requests,
                    used,
                    handed,
                );
                settle_window(c, Keys::window_script(key), blob, ticket.id, requests > 1)
            }
            GiveBack::SlotMembers {
                key,
                shared,
                indices,
            } => {
                if indices.is_empty() {
                    return;
                }
                let args = SomeBlockLeasesArgs {
                    base: c.member(shared),
                    indices,
                };
                c.batched(vec![key], args, |_: i64| Ok(()))
            }
            GiveBack::Slots { key, shared, size } => {
                let args = BlockLeasesArgs {
                    base: c.member(shared),
                    size,
                };
                c.batched(vec![key], args, |_: i64| Ok(()))
            }
        };
        // Queued: it goes out with the next batch and, if that call fails, is sent
        // again until it lands (see `client::retry`); nobody waits for its answer.
        drop(sent);
    }

    /// Starts the timers that retire new blocks when they stop admitting.
    fn schedule_retire(self: &Arc<Self>, retire: Vec<Retire>) {
        if retire.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let now = self.now();
        for r in retire {
            let book = Arc::clone(self);
            let wait = Duration::from_millis(r.at.saturating_sub(now));
            rt.spawn(async move {
                tokio::time::sleep(wait).await;
                if r.kind == BlockKind::Money {
                    // Then every few seconds while its requests run: their costs reach
                    // the shared books as parts, not only when the last one ends.
                    loop {
                        let tick = book.table().retire_money(&r.key, r.block);
                        match tick {
                            MoneyTick::Gone => return,
                            MoneyTick::Spent(back) => return book.money_back(back),
                            MoneyTick::Part(part) => book.money_part(part),
                            MoneyTick::Wait => {}
                        }
                        tokio::time::sleep(Duration::from_millis(MONEY_PART_EVERY_MS)).await;
                    }
                }
                let back = book.table().retire(&r.key, r.block, r.kind);
                if let Some(back) = back {
                    book.give_back(back);
                }
            });
        }
    }

    /// Borrowing calls ended so far: read while deciding, for [`wait`](Self::wait).
    fn borrows_ended(&self) -> u64 {
        self.borrow_gen.load(Ordering::Acquire)
    }

    /// Waits for the borrow under way for a part this request needs (it would serve the
    /// request), once: until a borrowing call ends after `seen` (as [`Decided::Wait`]
    /// says), which is as long as that call takes. Fails as that borrow did (any borrow
    /// that failed meanwhile: on a single node they share one Redis), so a request
    /// never waits a deadline for a failed borrow and then another for its own call
    /// (T5). Many requests then share one round trip instead of each making its own
    /// while a block is on its way.
    pub(crate) async fn wait(&self, seen: u64) -> StoreResult<()> {
        let woken = self.borrows.clone().notified_owned();
        // The borrowing call ends by itself — answered, or failed as the store judges a
        // silent Redis (busy is not dead, D8) — and wakes its waiters; this bound is
        // only a safety net, past the longest such call.
        let deadline = self.client.deadline();
        let limit = self.client.busy_limit().max(deadline) + deadline;
        if self.borrows_ended() == seen && tokio::time::timeout(limit, woken).await.is_err() {
            return Err(StoreError::new(
                StoreErrorKind::Timeout,
                format!("no quota block arrived within {} ms", limit.as_millis()),
            ));
        }
        if self.borrow_failed.load(Ordering::Acquire) > seen {
            return Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "the quota block this request waited for could not be borrowed",
            ));
        }
        Ok(())
    }

    /// Runs a borrowing call to its end on its own task (see the module docs) and
    /// hands its answer to the caller; `install` turns the reply into the caller's
    /// answer (installing blocks), `undo` gives back what the answer holds when the
    /// caller has gone.
    pub(crate) fn borrowing<R, T>(
        self: &Arc<Self>,
        call: RedisStoreFuture<R>,
        install: impl FnOnce(StoreResult<R>) -> StoreResult<T> + Send + 'static,
        undo: impl FnOnce(T) + Send + 'static,
    ) -> RedisStoreFuture<T>
    where
        R: Send + 'static,
        T: Send + 'static,
    {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            let e = StoreError::new(
                StoreErrorKind::Unavailable,
                "no tokio runtime to borrow a quota block on",
            );
            // Clears the borrowing marks; the call never ran.
            return RedisStoreFuture::ready(install(Err(e)));
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<StoreResult<Handover<T>>>();
        let book = Arc::clone(self);
        rt.spawn(async move {
            let r = install(call.await);
            // Requests waiting for this borrow decide again (or fail with it).
            let ended = book.borrow_gen.fetch_add(1, Ordering::AcqRel) + 1;
            if r.is_err() {
                book.borrow_failed.fetch_max(ended, Ordering::AcqRel);
            }
            book.borrows.notify_waiters();
            let r = r.map(|value| Handover {
                value: Some(value),
                undo: Some(Box::new(undo)),
            });
            // Not received (the caller went away, before or after the answer came):
            // dropping the handover undoes what it holds.
            drop(tx.send(r));
        });
        RedisStoreFuture::new(async move {
            let mut held = rx.await.map_err(|_| {
                StoreError::new(StoreErrorKind::Unavailable, "quota block call dropped")
            })??;
            Ok(held.value.take().expect("a handover is taken once"))
        })
    }
}

/// The answer of a borrowing call on its way to the caller: undone when dropped untaken
/// (the caller went away), so what it admitted is given back.
struct Handover<T> {
    value: Option<T>,
    undo: Option<Box<dyn FnOnce(T) + Send>>,
}

impl<T> Drop for Handover<T> {
    fn drop(&mut self) {
        if let (Some(v), Some(undo)) = (self.value.take(), self.undo.take()) {
            undo(v);
        }
    }
}
