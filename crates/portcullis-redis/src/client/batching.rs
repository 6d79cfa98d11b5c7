//! Settlements and releases queued and sent together as one batch script, and the
//! give-backs of a call whose answer was not seen (D9).

use super::call::Sent;
use super::{Client, protocol};
use crate::batch::{self, Code, Op};
use crate::codec::Doubles;
use crate::future::RedisStoreFuture;
use crate::scripts::args::{BatchArgs, BatchCallArgs, QueuedOp, ScriptArgs, WindowSettleArgs};
use crate::scripts::{Effect, Script};
use portcullis_core::{StoreError, StoreErrorKind, StoreResult};
use redis::FromRedisValue;
use std::future::Future;

impl Client {
    /// Queues one op of the batch script (see [`batch`]) and returns its answer's
    /// future; the first op into an empty queue schedules a flush, and a reservation
    /// ([`Code::sent_at_once`]) sends the batch at once: its answer is awaited on the
    /// request path, and whatever was queued before it rides along.
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
        self.queue_op(args.code(), keys, args.argv(), decode)
    }

    fn queue_op<R, T>(
        &self,
        code: Code,
        keys: Vec<String>,
        args: Vec<Vec<u8>>,
        decode: impl FnOnce(R) -> StoreResult<T> + Send + 'static,
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
        if code.sent_at_once() {
            self.flush_batch();
        } else if let Some(batch) = first {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    let client = self.clone();
                    rt.spawn(async move {
                        // Long enough for the rest of the request's guards (dropped one
                        // after the other, maybe across a few polls) and for other
                        // requests ending now to join. A call made meanwhile flushes
                        // first, so nothing waits behind this; then this timer sends
                        // nothing (its batch is gone, the next one has its own).
                        tokio::time::sleep(batch::FLUSH_AFTER).await;
                        let ops = client.inner.batcher.take_if(batch);
                        client.send_ops(ops);
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
    pub(crate) fn flush_batch(&self) {
        if self.inner.batcher.is_empty() {
            return;
        }
        self.send_ops(self.inner.batcher.take());
    }

    /// Sends `ops` (taken from the queue, in order): one script call per slot run, each
    /// handed to the connection before this returns.
    fn send_ops(&self, ops: Vec<Op>) {
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
        for call in batch::calls(ops, |k| self.slot_of(k)) {
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
    /// to whether the call was answered — and acknowledged by the replicas where the
    /// store asks for that: a give-back answered unacknowledged is kept to send again
    /// too (D10, see `retry.rs`).
    pub(super) fn send_batch(
        &self,
        ops: Vec<Op>,
        guarded: bool,
    ) -> impl Future<Output = bool> + Send + 'static {
        let client = self.clone();
        // Every op has keys, all on one slot: the call is routed by the first.
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
        // A batch with a reservation admits: short of the replicas' acknowledgement it
        // fails whole under `Refuse`, and its give-backs are sent again alone (D10).
        let effect = if ops.iter().any(|o| o.code.sent_at_once()) {
            Effect::Admits
        } else {
            Script::Batch.effect()
        };
        let call = self.run_script(Script::Batch, effect, keys, args.argv(), guarded);
        async move {
            match call.await {
                Ok(Sent {
                    reply: redis::Value::Array(replies),
                    acknowledged,
                }) if replies.len() == ops.len() => {
                    if !acknowledged {
                        client.keep_unacknowledged(&ops);
                    }
                    // A handed request's settlement that came before its block's
                    // hand-over (kept to send again after a failure): again, later.
                    let early: Vec<&Op> = ops
                        .iter()
                        .zip(&replies)
                        .filter(|(o, v)| {
                            o.code == Code::WindowSettle && **v == redis::Value::Int(-1)
                        })
                        .map(|(o, _)| o)
                        .collect();
                    if !early.is_empty() {
                        client.keep_for_retry(early);
                    }
                    for (op, v) in ops.into_iter().zip(replies) {
                        (op.done)(Ok(v));
                    }
                    acknowledged
                }
                Ok(Sent { reply: other, .. }) => {
                    let e = protocol(format!("batch: unexpected reply {other:?}"));
                    for op in ops {
                        (op.done)(Err(e.clone()));
                    }
                    true
                }
                Err(e) => {
                    client.keep_for_retry(&ops);
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
    /// A batch op as it is (a lease's release, a quota block's leases').
    Op {
        code: Code,
        keys: Vec<String>,
        args: Vec<Vec<u8>>,
    },
    /// The admission recorded under `record` on the window script keys `keys`, undone
    /// by the settle script with `doubles`
    /// ([`codec::undo_args`](crate::codec::undo_args)), at the time it is sent.
    Window {
        keys: Vec<String>,
        doubles: Doubles,
        record: String,
    },
}

impl Undo {
    /// The batch op `args` on `keys`.
    pub(crate) fn op(keys: Vec<String>, args: impl BatchArgs) -> Self {
        Undo::Op {
            code: args.code(),
            keys,
            args: args.argv(),
        }
    }
}

impl Client {
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
            client: self.clone(),
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

    /// Gives back `undo` (see [`Undo`]).
    fn give_back_unseen(&self, undo: Vec<Undo>) {
        for u in undo {
            let sent = match u {
                Undo::Op { code, keys, args } => {
                    self.queue_op(code, keys, args, |_: redis::Value| Ok(()))
                }
                Undo::Window {
                    keys,
                    doubles,
                    record,
                } => {
                    let args = WindowSettleArgs {
                        time: self.time(),
                        doubles,
                        record: Some(record),
                    };
                    self.batched(keys, args, |_: i64| Ok(()))
                }
            };
            drop(sent);
        }
    }
}

/// Gives back what a call whose answer was not seen may have counted (see `undoing`).
struct Unseen {
    undo: Vec<Undo>,
    client: Client,
}

impl Drop for Unseen {
    fn drop(&mut self) {
        if self.undo.is_empty() || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        self.client.give_back_unseen(std::mem::take(&mut self.undo));
    }
}
