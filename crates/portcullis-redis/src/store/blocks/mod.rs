//! Quota blocks on Redis (see [`portcullis_core::blocks`]): the joint decisions ask for a
//! block where the core's table says so, install what the script granted, decide later
//! requests from it in memory, and give back what was not used.
//!
//! A borrowing call runs as its own task: once Redis has counted a block, the block is
//! installed even if the request that asked went away meanwhile (its own unit is then
//! handed back locally), so no borrowed share is lost with a dropped future.

mod money;

use super::*;
use crate::codec;
use crate::scripts::args::{
    BlockLeasesArgs, LeaseReleaseArgs, SlotRenewArgs, SlotRenewBlockArgs, SomeBlockLeasesArgs,
};
use portcullis_core::blocks::{
    BlockKind, Blocks, GiveBack, MONEY_PART_EVERY_MS, MoneyTick, ReleaseLocal, RenewLocal, Retire,
    SettleLocal,
};
use portcullis_core::{LeaseId, Millis, Outcome, Scope, SubjectKey, WindowStore, WindowTicket};
use portcullis_core::{StoreError, StoreErrorKind, StoreResult};
use std::sync::MutexGuard;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl RedisStore {
    /// The block table, when blocks are on.
    pub(crate) fn blocks(&self) -> Option<MutexGuard<'_, Blocks>> {
        self.inner
            .blocks
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A fresh id for a billing block's attempt.
    pub(crate) fn next_block_attempt(&self) -> u64 {
        self.client().next_id()
    }

    /// This process's block clock, in ms (see [`TimeSource::local_ms`]).
    pub(crate) fn local_now(&self) -> Millis {
        self.client().local_ms(self.inner.origin)
    }

    /// Sends what a spent block gives back, in the batch with the settlements ending
    /// now; a call that fails is sent again until it lands (D9).
    pub(crate) fn give_back(&self, back: GiveBack) {
        let sent = match back {
            GiveBack::Window {
                key,
                ticket,
                requests,
                used,
                outcome,
            } => {
                let blob = codec::settle_block_args(
                    self.client().amount_ttl_ms(),
                    &ticket,
                    outcome,
                    requests,
                    used,
                );
                self.settle_window(Keys::window_script(key), blob, ticket.id, requests > 1)
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
                    base: self.client().member(shared),
                    indices,
                };
                self.client().batched(vec![key], args, |_: i64| Ok(()))
            }
            GiveBack::Slots { key, shared, size } => {
                let args = BlockLeasesArgs {
                    base: self.client().member(shared),
                    size,
                };
                self.client().batched(vec![key], args, |_: i64| Ok(()))
            }
        };
        // Queued: it goes out with the next batch and, if that call fails, is sent
        // again until it lands (see `retry`); nobody waits for its answer.
        drop(sent);
    }

    /// Starts the timers that retire new blocks when they stop admitting.
    pub(crate) fn schedule_retire(&self, retire: Vec<Retire>) {
        if retire.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let now = self.local_now();
        for r in retire {
            let store = self.clone();
            let wait = Duration::from_millis(r.at.saturating_sub(now));
            rt.spawn(async move {
                tokio::time::sleep(wait).await;
                if r.kind == BlockKind::Money {
                    // Then every few seconds while its requests run: their costs reach
                    // the shared books as parts, not only when the last one ends.
                    loop {
                        let Some(tick) =
                            store.blocks().map(|mut b| b.retire_money(&r.key, r.block))
                        else {
                            return;
                        };
                        match tick {
                            MoneyTick::Gone => return,
                            MoneyTick::Spent(back) => return store.money_back(back),
                            MoneyTick::Part(part) => store.money_part(part),
                            MoneyTick::Wait => {}
                        }
                        tokio::time::sleep(Duration::from_millis(MONEY_PART_EVERY_MS)).await;
                    }
                }
                let back = store
                    .blocks()
                    .and_then(|mut b| b.retire(&r.key, r.block, r.kind));
                if let Some(back) = back {
                    store.give_back(back);
                }
            });
        }
    }

    /// Settles a ticket handed out from a block: in memory, giving the block back if
    /// that was its last request — or, its block given back while it was in flight, in
    /// Redis as an ordinary ticket.
    pub(crate) fn settle_borrowed(
        &self,
        key: &SubjectKey,
        scope: Scope,
        ticket: &WindowTicket,
        outcome: Outcome,
    ) -> RedisStoreFuture<()> {
        let state = self.window_key(key, scope);
        let Some(answer) = self.blocks().map(|mut b| b.settle(&state, ticket, outcome)) else {
            return RedisStoreFuture::ready(Ok(()));
        };
        match answer {
            SettleLocal::Done(back) => {
                if let Some(back) = back {
                    self.give_back(back);
                }
                RedisStoreFuture::ready(Ok(()))
            }
            SettleLocal::Shared => {
                let ordinary = WindowTicket {
                    borrowed: 0,
                    // Its block was given back, record and all: corrected unkeyed.
                    id: 0,
                    ..*ticket
                };
                WindowStore::settle(self, key, scope, ordinary, outcome)
            }
        }
    }

    /// Releases a lease handed out from a block of `slots`.
    pub(crate) fn release_borrowed(&self, slots: &str, lease: LeaseId) -> RedisStoreFuture<()> {
        let Some(answer) = self.blocks().map(|mut b| b.release(slots, lease)) else {
            return RedisStoreFuture::ready(Ok(()));
        };
        match answer {
            ReleaseLocal::Done(back) => {
                if let Some(back) = back {
                    self.give_back(back);
                }
                RedisStoreFuture::ready(Ok(()))
            }
            ReleaseLocal::Member { shared, index } => self.client().batched(
                vec![slots.to_owned()],
                LeaseReleaseArgs {
                    member: format!("{}:{index}", self.client().member(shared)),
                },
                |_: i64| Ok(()),
            ),
        }
    }

    /// Renews a lease handed out from a block of `slots`: in memory while the block's
    /// shared leases live long enough, else all of them in one call (or, its block given
    /// back while it was held, that one lease).
    pub(crate) fn renew_borrowed(
        &self,
        slots: String,
        lease: LeaseId,
        ttl: Millis,
    ) -> RedisStoreFuture<bool> {
        let now = self.local_now();
        // As for a plain lease (see `SlotStore::renew`): leases a failover may have lost
        // are put back by their renewal (D10).
        let restore = self.client().slot_moved_within(&slots, ttl);
        let Some(answer) = self.blocks().map(|mut b| b.renew(&slots, lease, ttl, now)) else {
            return RedisStoreFuture::ready(Ok(false));
        };
        match answer {
            RenewLocal::Gone => RedisStoreFuture::ready(Ok(false)),
            RenewLocal::Alive => RedisStoreFuture::ready(Ok(true)),
            RenewLocal::Member { shared, index } => {
                let args = SlotRenewArgs {
                    time: self.client().time(),
                    ttl,
                    member: format!("{}:{index}", self.client().member(shared)),
                    restore,
                };
                self.client().eval(vec![slots], args, |r: i64| Ok(r == 1))
            }
            RenewLocal::Renew {
                block,
                shared,
                size,
            } => {
                let args = SlotRenewBlockArgs {
                    time: self.client().time(),
                    ttl,
                    base: self.client().member(shared),
                    count: size,
                    restore,
                };
                let call = self
                    .client()
                    .eval(vec![slots.clone()], args, |r: i64| Ok(r == 1));
                let store = self.clone();
                RedisStoreFuture::new(async move {
                    let r = call.await;
                    if let Some(mut b) = store.blocks() {
                        b.renewed(&slots, block, now, ttl, r.as_ref().ok().copied());
                    }
                    r
                })
            }
        }
    }

    /// Borrowing calls ended so far: read while deciding, for
    /// [`wait_for_borrow`](Self::wait_for_borrow).
    pub(crate) fn borrows_ended(&self) -> u64 {
        self.inner.borrow_gen.load(Ordering::Acquire)
    }

    /// Waits for the borrow under way for a part this request needs (it would serve the
    /// request), once: until a borrowing call ends after `seen` ([`borrows_ended`] when
    /// the request was decided), which is as long as that call takes. Fails as that
    /// borrow did (any borrow that failed meanwhile: on a single node they share one
    /// Redis), so a request never waits a deadline for a failed borrow and then another
    /// for its own call (T5). Many requests then share one round trip instead of each
    /// making its own while a block is on its way.
    ///
    /// [`borrows_ended`]: Self::borrows_ended
    pub(crate) async fn wait_for_borrow(&self, seen: u64) -> StoreResult<()> {
        let woken = self.inner.borrows.clone().notified_owned();
        // The borrowing call ends by itself — answered, or failed as the store judges a
        // silent Redis (busy is not dead, D8) — and wakes its waiters; this bound is
        // only a safety net, past the longest such call.
        let limit =
            self.client().busy_limit().max(self.client().deadline()) + self.client().deadline();
        if self.borrows_ended() == seen && tokio::time::timeout(limit, woken).await.is_err() {
            return Err(StoreError::new(
                StoreErrorKind::Timeout,
                format!("no quota block arrived within {} ms", limit.as_millis()),
            ));
        }
        if self.inner.borrow_failed.load(Ordering::Acquire) > seen {
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
        &self,
        call: RedisStoreFuture<R>,
        install: impl FnOnce(&RedisStore, StoreResult<R>) -> StoreResult<T> + Send + 'static,
        undo: impl FnOnce(&RedisStore, T) + Send + 'static,
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
            return RedisStoreFuture::ready(install(self, Err(e)));
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<StoreResult<Handover<T>>>();
        let store = self.clone();
        rt.spawn(async move {
            let r = install(&store, call.await);
            // Requests waiting for this borrow decide again (or fail with it).
            let ended = store.inner.borrow_gen.fetch_add(1, Ordering::AcqRel) + 1;
            if r.is_err() {
                store.inner.borrow_failed.fetch_max(ended, Ordering::AcqRel);
            }
            store.inner.borrows.notify_waiters();
            let r = r.map(|value| Handover {
                value: Some(value),
                undo: Some(Box::new(move |v| undo(&store, v))),
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
