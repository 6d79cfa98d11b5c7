//! Settlements and releases queued and sent together as one batch script, and the
//! clean-up of a lease whose acquisition was not seen through.

use super::*;
use crate::batch::{self, Code, Op};
use crate::conn::hash_slot;
use crate::scripts::args::{
    BatchArgs, BatchCallArgs, BlockLeasesArgs, LeaseReleaseArgs, QueuedOp, ScriptArgs,
};
use portcullis_core::{LeaseId, StoreError, StoreErrorKind, StoreResult, SubjectKey};
use redis::FromRedisValue;
use std::future::Future;
use tokio::time::Instant;

impl RedisStore {
    /// Removes `lease` of `key` in the batch; `now`: send the batch at once instead of
    /// letting it wait for company.
    pub(super) fn release_lease(
        &self,
        key: &SubjectKey,
        lease: LeaseId,
        now: bool,
    ) -> RedisStoreFuture<()> {
        if portcullis_core::blocks::borrowed_lease(lease).is_some() {
            return self.release_borrowed(&self.slots_key(key), lease);
        }
        // One ZREM, atomic by itself, sent in the batch with the settlements ending at
        // the same moment. A release is never dropped for a passing outage: if its call
        // fails it is sent again until it lands (see `retry`); the lease's TTL is the
        // last resort.
        let sent = self.batched(
            vec![self.slots_key(key)],
            LeaseReleaseArgs {
                member: self.member(lease),
            },
            |_: i64| Ok(()),
        );
        if now {
            self.flush_batch();
        }
        sent
    }

    /// Queues one op of the batch script (see [`batch`]) and returns its answer's
    /// future; the first op into an empty queue schedules a flush.
    pub(crate) fn batched<A, R, T>(
        &self,
        keys: Vec<String>,
        args: A,
        decode: impl FnOnce(R) -> StoreResult<T> + Send + 'static,
    ) -> RedisStoreFuture<T>
    where
        A: BatchArgs,
        R: FromRedisValue + Send + 'static,
        T: Send + 'static,
    {
        self.queue_op(args.code(), keys, args.argv(), decode, false)
    }

    /// [`batched`](Self::batched), sending the batch at once: the op's answer is
    /// awaited on the request path, and whatever was queued before it rides along.
    pub(crate) fn batched_now<A, R, T>(
        &self,
        keys: Vec<String>,
        args: A,
        decode: impl FnOnce(R) -> StoreResult<T> + Send + 'static,
    ) -> RedisStoreFuture<T>
    where
        A: BatchArgs,
        R: FromRedisValue + Send + 'static,
        T: Send + 'static,
    {
        self.queue_op(args.code(), keys, args.argv(), decode, true)
    }

    fn queue_op<R, T>(
        &self,
        code: Code,
        keys: Vec<String>,
        args: Vec<Vec<u8>>,
        decode: impl FnOnce(R) -> StoreResult<T> + Send + 'static,
        now: bool,
    ) -> RedisStoreFuture<T>
    where
        R: FromRedisValue + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let op = Op {
            code,
            keys,
            args,
            until: code.retried_for().map(|d| std::time::Instant::now() + d),
            done: Box::new(move |r| {
                let _ = tx.send(r);
            }),
        };
        let first = self.inner.batcher.push(op);
        if now {
            self.flush_batch();
        } else if let Some(batch) = first {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    let store = self.clone();
                    rt.spawn(async move {
                        // Long enough for the rest of the request's guards (dropped one
                        // after the other, maybe across a few polls) and for other
                        // requests ending now to join. A call made meanwhile flushes
                        // first, so nothing waits behind this; then this timer sends
                        // nothing (its batch is gone, the next one has its own).
                        tokio::time::sleep(batch::FLUSH_AFTER).await;
                        let ops = store.inner.batcher.take_if(batch);
                        store.send_ops(ops);
                    });
                }
                Err(_) => self.flush_batch(),
            }
        }
        RedisStoreFuture::new(async move {
            let v = rx.await.map_err(|_| {
                StoreError::new(StoreErrorKind::Unavailable, "batched call dropped unsent")
            })??;
            if let redis::Value::ServerError(e) = &v {
                return Err(protocol(format!("redis: {e:?}")));
            }
            super::call::read_reply(v, decode)
        })
    }

    /// Sends everything queued: one script call per slot run (see [`batch::calls`]),
    /// each handed to the connection before this returns.
    pub(super) fn flush_batch(&self) {
        if self.inner.batcher.is_empty() {
            return;
        }
        self.send_ops(self.inner.batcher.take());
    }

    /// Sends `ops` (taken from the queue, in order): one script call per slot run, each
    /// handed to the connection before this returns.
    pub(super) fn send_ops(&self, ops: Vec<Op>) {
        if ops.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            for op in ops {
                (op.done)(Err(StoreError::new(
                    StoreErrorKind::Unavailable,
                    "no tokio runtime to send the batch on",
                )));
            }
            return;
        };
        let cluster = self.is_cluster();
        let slot_of = |k: &str| if cluster { hash_slot(k.as_bytes()) } else { 0 };
        for call in batch::calls(ops, slot_of) {
            let mut fut = Box::pin(self.send_batch(call, true));
            // Polled once here: the command is queued on the connection now, ahead of
            // any call made after this one.
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            if fut.as_mut().poll(&mut cx).is_pending() {
                rt.spawn(fut);
            }
        }
    }

    /// One call of the batch script for `ops` (all on one slot); every op is answered,
    /// and the give-backs among them are kept to send again if the call fails (D9).
    /// `guarded`: behind the breaker (the first try; a retry goes around it). Resolves
    /// to whether the call was answered.
    pub(super) fn send_batch(
        &self,
        ops: Vec<Op>,
        guarded: bool,
    ) -> impl Future<Output = bool> + Send + 'static {
        let store = self.clone();
        let start = Instant::now();
        let mut conn = self.inner.conn.clone();
        let inner = self.inner.clone();
        async move {
            let key = ops
                .first()
                .and_then(|o| o.keys.first())
                .map_or(&[][..], |k| k.as_bytes());
            let keys: Vec<String> = ops.iter().flat_map(|o| o.keys.iter().cloned()).collect();
            let args = BatchCallArgs {
                ops: ops
                    .iter()
                    .map(|o| QueuedOp {
                        code: o.code,
                        keys: o.keys.len(),
                        args: &o.args,
                    })
                    .collect(),
            };
            let cmd = super::call::evalsha(Script::Batch, conn.is_cluster(), &keys, &args.argv());
            let r = inner
                .script_call(start, key, Script::Batch, cmd, &mut conn, guarded)
                .await;
            match r {
                Ok(redis::Value::Array(replies)) if replies.len() == ops.len() => {
                    for (op, v) in ops.into_iter().zip(replies) {
                        (op.done)(Ok(v));
                    }
                    true
                }
                Ok(other) => {
                    let e = protocol(format!("batch: unexpected reply {other:?}"));
                    for op in ops {
                        (op.done)(Err(e.clone()));
                    }
                    true
                }
                Err(e) => {
                    store.keep_for_retry(&ops);
                    for op in ops {
                        (op.done)(Err(e.clone()));
                    }
                    false
                }
            }
        }
    }
}

/// What a call that may count something gives back if its answer never comes (D9): it
/// may still run in Redis — late, after a stall, or answered into a lost reply — and
/// count for a caller that is gone. Each give-back is keyed by the call's own member
/// or record, so one for something never counted changes nothing.
pub(crate) enum Undo {
    /// Lease `member` of `slots` (the one a call takes without a block).
    Lease { slots: String, member: String },
    /// The `size` leases `member:0` .. of a quota block of `slots`.
    Block {
        slots: String,
        member: String,
        size: u32,
    },
    /// The admission recorded under `id` on the window script keys `keys`, undone by
    /// the settle script with `blob` ([`codec::undo_args`](crate::codec::undo_args)).
    Window {
        keys: Vec<String>,
        blob: crate::codec::Doubles,
        id: u64,
    },
}

impl RedisStore {
    /// `decided`, a call that may count what `undo` lists: if it fails (a missed
    /// deadline, a lost answer) or its caller goes away before the answer, everything
    /// in `undo` is given back — after the call on the same ordered connection, and
    /// sent again until it lands — so nothing it counted is held by nobody.
    pub(crate) fn undoing<T: Send + 'static>(
        &self,
        undo: Vec<Undo>,
        decided: RedisStoreFuture<T>,
    ) -> RedisStoreFuture<T> {
        let cleanup = Unseen {
            undo,
            store: self.clone(),
        };
        RedisStoreFuture::new(async move {
            // Owned by the future: dropped with it, armed until the answer is in.
            let mut cleanup = cleanup;
            let r = decided.await;
            if r.is_ok() {
                cleanup.undo.clear();
            }
            r
        })
    }

    /// [`undoing`](Self::undoing) a plain lease `member` of `slots`.
    pub(super) fn removing_late_lease<T: Send + 'static>(
        &self,
        slots: String,
        member: String,
        decided: RedisStoreFuture<T>,
    ) -> RedisStoreFuture<T> {
        self.undoing(vec![Undo::Lease { slots, member }], decided)
    }

    /// Gives back `undo` (see [`Undo`]).
    pub(crate) fn give_back_unseen(&self, undo: Vec<Undo>) {
        for u in undo {
            let sent = match u {
                Undo::Lease { slots, member } => {
                    self.batched(vec![slots], LeaseReleaseArgs { member }, |_: i64| Ok(()))
                }
                Undo::Block {
                    slots,
                    member,
                    size,
                } => self.batched(
                    vec![slots],
                    BlockLeasesArgs { base: member, size },
                    |_: i64| Ok(()),
                ),
                Undo::Window { keys, blob, id } => self.settle_window(keys, blob, id, false),
            };
            drop(sent);
        }
    }
}

/// Gives back what a call whose answer was not seen may have counted (see `undoing`).
struct Unseen {
    undo: Vec<Undo>,
    store: RedisStore,
}

impl Drop for Unseen {
    fn drop(&mut self) {
        if self.undo.is_empty() || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        self.store.give_back_unseen(std::mem::take(&mut self.undo));
    }
}
