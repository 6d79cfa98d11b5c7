//! Settlements and releases queued and sent together as one batch script, and the
//! clean-up of a lease whose acquisition was not seen through.

use super::*;
use crate::batch::{self, Op};
use crate::conn::{Conn, hash_slot};
use redis::FromRedisValue;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tollgate_core::{LeaseId, StoreError, StoreErrorKind, StoreResult, SubjectKey};

impl RedisStore {
    /// Removes `lease` of `key` in the batch; `now`: send the batch at once instead of
    /// letting it wait for company.
    pub(super) fn release_lease(
        &self,
        key: &SubjectKey,
        lease: LeaseId,
        now: bool,
    ) -> RedisStoreFuture<()> {
        if tollgate_core::blocks::borrowed_lease(lease).is_some() {
            return self.release_borrowed(&self.slots_key(key), lease);
        }
        // One ZREM, atomic by itself, sent in the batch with the settlements ending at
        // the same moment. A release is never dropped for a passing outage: if it fails
        // it is retried alone, off the caller's path and not held by the breaker, for a
        // few seconds (the lease's TTL is the last resort).
        let mut conn = self.inner.conn.clone();
        let (slots, member) = (self.slots_key(key), self.member(lease));
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(&slots).arg(&member);
        let sent = self.batched(
            "zr",
            vec![slots],
            vec![member.into_bytes()],
            |_: i64| Ok(()),
        );
        if now {
            self.flush_batch();
        }
        RedisStoreFuture::new(async move {
            let r = sent.await;
            if r.is_err() {
                tokio::spawn(async move {
                    for _ in 0..RELEASE_RETRIES {
                        tokio::time::sleep(RELEASE_RETRY_EVERY).await;
                        let attempt = tokio::time::timeout(
                            Duration::from_secs(1),
                            cmd.query_async::<i64>(&mut conn),
                        );
                        if matches!(attempt.await, Ok(Ok(_))) {
                            return;
                        }
                    }
                });
            }
            r
        })
    }

    /// Queues one op of the batch script (see [`batch`]) and returns its answer's
    /// future; the first op into an empty queue schedules a flush.
    pub(crate) fn batched<R, T>(
        &self,
        code: &'static str,
        keys: Vec<String>,
        args: Vec<Vec<u8>>,
        decode: impl FnOnce(R) -> StoreResult<T> + Send + 'static,
    ) -> RedisStoreFuture<T>
    where
        R: FromRedisValue + Send + 'static,
        T: Send + 'static,
    {
        self.queue_op(code, keys, args, decode, false)
    }

    /// [`batched`](Self::batched), sending the batch at once: the op's answer is
    /// awaited on the request path, and whatever was queued before it rides along.
    pub(crate) fn batched_now<R, T>(
        &self,
        code: &'static str,
        keys: Vec<String>,
        args: Vec<Vec<u8>>,
        decode: impl FnOnce(R) -> StoreResult<T> + Send + 'static,
    ) -> RedisStoreFuture<T>
    where
        R: FromRedisValue + Send + 'static,
        T: Send + 'static,
    {
        self.queue_op(code, keys, args, decode, true)
    }

    fn queue_op<R, T>(
        &self,
        code: &'static str,
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
            decode(R::from_redis_value(v).map_err(|e| protocol(format!("redis reply: {e}")))?)
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
            let mut fut = Box::pin(self.send_batch(call));
            // Polled once here: the command is queued on the connection now, ahead of
            // any call made after this one.
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            if fut.as_mut().poll(&mut cx).is_pending() {
                rt.spawn(fut);
            }
        }
    }

    /// One call of the batch script for `ops` (all on one slot); every op is answered.
    pub(super) fn send_batch(&self, ops: Vec<Op>) -> impl Future<Output = ()> + Send + 'static {
        let start = Instant::now();
        let mut conn = self.inner.conn.clone();
        let inner = self.inner.clone();
        let script = self.inner.script(&scripts().batch);
        async move {
            let mut call = script.prepare_invoke();
            call.arg(ops.len());
            for op in &ops {
                for k in &op.keys {
                    call.key(k.as_str());
                }
                call.arg(op.code).arg(op.keys.len()).arg(op.args.len());
                for a in &op.args {
                    call.arg(&a[..]);
                }
            }
            let key = ops
                .first()
                .and_then(|o| o.keys.first())
                .map_or(&[][..], |k| k.as_bytes());
            let r = inner
                .guarded(start, key, call.invoke_async::<redis::Value>(&mut conn))
                .await;
            match r {
                Ok(redis::Value::Array(replies)) if replies.len() == ops.len() => {
                    for (op, v) in ops.into_iter().zip(replies) {
                        (op.done)(Ok(v));
                    }
                }
                Ok(other) => {
                    let e = protocol(format!("batch: unexpected reply {other:?}"));
                    for op in ops {
                        (op.done)(Err(e.clone()));
                    }
                }
                Err(e) => {
                    for op in ops {
                        (op.done)(Err(e.clone()));
                    }
                }
            }
        }
    }
}

impl RedisStore {
    /// `decided`, a call that may take lease `member` of `slots`: if it fails (a missed
    /// deadline, a lost answer) or its caller goes away before the answer, it may still
    /// run in Redis and take a lease nobody holds. The member name is known: it is
    /// removed on the same (ordered) connection, off the caller's path, so such a lease
    /// does not count until its TTL.
    pub(super) fn removing_late_lease<T: Send + 'static>(
        &self,
        slots: String,
        member: String,
        decided: RedisStoreFuture<T>,
    ) -> RedisStoreFuture<T> {
        let cleanup = LateLease {
            armed: true,
            slots,
            member,
            conn: self.inner.conn.clone(),
        };
        RedisStoreFuture::new(async move {
            // Owned by the future: dropped with it, armed until the answer is in.
            let mut cleanup = cleanup;
            let r = decided.await;
            cleanup.armed = r.is_err();
            r
        })
    }
}

/// Removes a lease whose acquisition was not seen through (see `removing_late_lease`).
struct LateLease {
    armed: bool,
    slots: String,
    member: String,
    conn: Conn,
}

impl Drop for LateLease {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(std::mem::take(&mut self.slots))
            .arg(std::mem::take(&mut self.member));
        let mut conn = self.conn.clone();
        rt.spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(5), cmd.query_async::<i64>(&mut conn))
                .await;
        });
    }
}
