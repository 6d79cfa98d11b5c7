//! One call to Redis: the deadline that tells a stalled Redis from a busy one (D4,
//! D8), the breaker of the node it goes to, `NOSCRIPT` recovery, and the replica
//! acknowledgements of a write (D10). Every store call goes through here.

use super::{Client, Inner, map_err, protocol, timeout};
use crate::conn::{Breaker, Conn, GaveUp, Liveness};
use crate::future::RedisStoreFuture;
use crate::scripts::Script;
use crate::scripts::args::ScriptCall;
use portcullis_core::{StoreError, StoreErrorKind, StoreResult};
use redis::{ErrorKind, FromRedisValue, RedisError, ServerErrorKind};
use std::future::Future;
use tokio::time::Instant;

impl Inner {
    /// The breaker of the node `key` lives on (the one node's, off a Cluster).
    fn breaker(&self, key: &[u8]) -> &Breaker {
        self.nodes
            .as_ref()
            .map_or(&self.breaker, |n| n.breaker_of(key))
    }

    /// [`bounded`](Self::bounded), behind the breaker of `key`'s node: fails at once
    /// while it is open, and tells it how the call went.
    async fn guarded<T>(
        &self,
        start: Instant,
        key: &[u8],
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> StoreResult<T> {
        let breaker = self.breaker(key);
        let pass = breaker.check()?;
        let r = self.bounded(start, key, fut).await;
        breaker.record(&r, self.live(key).silent_for(start));
        drop(pass);
        r
    }

    /// Runs `cmd`, an `EVALSHA` of `script` on `key`, under the store's deadline —
    /// behind the breaker when `guarded` (a retried give-back goes around it). On
    /// `NOSCRIPT` (a restart, `SCRIPT FLUSH`, a failover to a node that never saw it) it
    /// loads the script and runs it again, within the same deadline. With replica acks
    /// (D10) `WAIT <replica_acks> <deadline / 2>` follows in one pipeline on the same
    /// connection (`key`'s master): the reply counts only once that many replicas hold
    /// its writes, else the call fails as `Unavailable`.
    async fn script_call(
        &self,
        start: Instant,
        key: &[u8],
        script: Script,
        cmd: redis::Cmd,
        conn: &mut Conn,
        guarded: bool,
    ) -> StoreResult<redis::Value> {
        let call = async {
            for loaded in [false, true] {
                let reply = match self.send_acked(conn, &cmd).await {
                    Err(e) if !loaded && e.kind() == NO_SCRIPT => {
                        load(conn, script).await?;
                        continue;
                    }
                    Ok(Ok(redis::Value::ServerError(e)))
                        if !loaded && e.kind() == Some(ServerErrorKind::NoScript) =>
                    {
                        load(conn, script).await?;
                        continue;
                    }
                    other => other?,
                };
                if let Ok(redis::Value::ServerError(e)) = &reply {
                    return Err(RedisError::from(e.clone()));
                }
                return Ok(reply);
            }
            Ok(Err(protocol("NOSCRIPT after SCRIPT LOAD")))
        };
        let r = if guarded {
            self.guarded(start, key, call).await
        } else {
            self.bounded(start, key, call).await
        };
        r?
    }

    /// Sends `cmd` on `conn` and, with replica acks (D10), `WAIT <replica_acks>
    /// <deadline / 2>` behind it in the same pipeline: the reply counts only once that
    /// many replicas hold its writes (else `Unavailable`). A server error reply comes
    /// back as an error (`Err`, or `Ok(Ok(ServerError))` from the pipeline).
    async fn send_acked(
        &self,
        conn: &mut Conn,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<StoreResult<redis::Value>> {
        let n = self.replica_acks;
        #[cfg(test)]
        if self.sent_twice.load(std::sync::atomic::Ordering::Relaxed) {
            let _: redis::RedisResult<redis::Value> = cmd.query_async(conn).await;
        }
        if n == 0 {
            return cmd.query_async::<redis::Value>(conn).await.map(Ok);
        }
        // Half the deadline: WAIT answers (with the count it got) before the call
        // would be given up as silent — where Redis checks it in time: it checks WAIT
        // timeouts on its cron tick (every 100 ms at the default `hz 10`), so without
        // the replicas the call often fails at its deadline instead (`Timeout`).
        let wait_ms = u64::try_from((self.deadline / 2).as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone())
            .cmd("WAIT")
            .arg(n)
            .arg(wait_ms)
            .ignore_errors();
        let mut replies: Vec<redis::Value> = pipe.query_async(conn).await?;
        let acks = match replies.pop() {
            Some(redis::Value::Int(a)) => a,
            other => return Ok(Err(protocol(format!("WAIT: unexpected reply {other:?}")))),
        };
        let reply = replies.pop().unwrap_or(redis::Value::Nil);
        if matches!(reply, redis::Value::ServerError(_)) {
            return Ok(Ok(reply));
        }
        if acks < i64::from(n) {
            return Ok(Err(StoreError::new(
                StoreErrorKind::Unavailable,
                format!("{acks} of {n} replicas acknowledged the write within {wait_ms} ms"),
            )));
        }
        Ok(Ok(reply))
    }

    /// The liveness of the node `key` lives on (the one node's, off a Cluster).
    fn live(&self, key: &[u8]) -> &Liveness {
        self.nodes.as_ref().map_or(&self.liveness, |n| n.of(key))
    }

    /// Awaits one Redis call on `key` made at `start` under the store's deadline (see
    /// [`Liveness::bounded`]; on a Cluster, the liveness of the node owning `key`) and
    /// classifies its failure.
    async fn bounded<T>(
        &self,
        start: Instant,
        key: &[u8],
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> StoreResult<T> {
        let live = self.live(key);
        let r = live
            .bounded(start, self.deadline, self.busy_limit, fut)
            .await;
        // Redis answers again after a silence: the give-backs kept for it go now, not
        // at the end of a gap that grew while it was silent (up to 2 s of leases and
        // quota held by nobody).
        if live.take_recovered() {
            self.retries.wake();
        }
        match r {
            Ok(r) => r.map_err(map_err),
            Err(GaveUp::Silent) => Err(timeout(self.deadline)),
            Err(GaveUp::Busy) => Err(StoreError::new(
                StoreErrorKind::Timeout,
                format!(
                    "redis answered other calls but not this one within {} ms",
                    self.busy_limit.as_millis()
                ),
            )),
        }
    }
}

impl Client {
    /// Runs one plain command under the deadline and decodes its reply.
    pub(crate) fn command<R, T>(
        &self,
        cmd: redis::Cmd,
        decode: impl FnOnce(R) -> StoreResult<T> + Send + 'static,
    ) -> RedisStoreFuture<T>
    where
        R: FromRedisValue + Send + 'static,
        T: Send + 'static,
    {
        self.plain(cmd, false, decode)
    }

    /// Runs a write that holds money or state other calls rely on (a balance set, a
    /// pending registration, an object's home) and answers once it landed: with
    /// replica acks, only once that many replicas hold it (D10).
    pub(crate) fn write_command(&self, cmd: redis::Cmd) -> RedisStoreFuture<()> {
        self.write_command_with(cmd, |_: redis::Value| Ok(()))
    }

    /// [`write_command`](Self::write_command), its reply decoded.
    pub(crate) fn write_command_with<R, T>(
        &self,
        cmd: redis::Cmd,
        decode: impl FnOnce(R) -> StoreResult<T> + Send + 'static,
    ) -> RedisStoreFuture<T>
    where
        R: FromRedisValue + Send + 'static,
        T: Send + 'static,
    {
        self.plain(cmd, true, decode)
    }

    fn plain<R, T>(
        &self,
        cmd: redis::Cmd,
        write: bool,
        decode: impl FnOnce(R) -> StoreResult<T> + Send + 'static,
    ) -> RedisStoreFuture<T>
    where
        R: FromRedisValue + Send + 'static,
        T: Send + 'static,
    {
        self.flush_batch();
        let start = Instant::now();
        let mut conn = self.inner.conn.clone();
        let inner = self.inner.clone();
        RedisStoreFuture::new(async move {
            let key = first_key(&cmd);
            let sent = async {
                if write {
                    inner.send_acked(&mut conn, &cmd).await
                } else {
                    cmd.query_async::<redis::Value>(&mut conn).await.map(Ok)
                }
            };
            let v = inner.guarded(start, &key, sent).await??;
            if let redis::Value::ServerError(e) = &v {
                return Err(map_err(RedisError::from(e.clone())));
            }
            read_reply(v, decode)
        })
    }

    /// Runs the script of `args` on `keys` under the deadline and decodes its reply.
    pub(crate) fn eval<A, R, T>(
        &self,
        keys: Vec<String>,
        args: A,
        decode: impl FnOnce(R) -> StoreResult<T> + Send + 'static,
    ) -> RedisStoreFuture<T>
    where
        A: ScriptCall,
        R: FromRedisValue + Send + 'static,
        T: Send + 'static,
    {
        self.flush_batch();
        let call = self.run_script(A::SCRIPT, keys, args.argv(), true);
        RedisStoreFuture::new(async move { read_reply(call.await?, decode) })
    }

    /// One call of `script` on `keys` with `argv`, its deadline running from now (see
    /// [`Inner::script_call`]), routed by the first key; `guarded`: behind the breaker
    /// of that key's node.
    pub(super) fn run_script(
        &self,
        script: Script,
        keys: Vec<String>,
        argv: Vec<Vec<u8>>,
        guarded: bool,
    ) -> impl Future<Output = StoreResult<redis::Value>> + Send + 'static {
        let start = Instant::now();
        let mut conn = self.inner.conn.clone();
        let inner = self.inner.clone();
        async move {
            let key = keys.first().map_or(&[][..], |k| k.as_bytes());
            let cmd = evalsha(script, conn.is_cluster(), &keys, &argv);
            inner
                .script_call(start, key, script, cmd, &mut conn, guarded)
                .await
        }
    }
}

/// `EVALSHA` of `script` (as a Cluster runs it, on one) with `keys` and `argv`.
fn evalsha(script: Script, cluster: bool, keys: &[String], argv: &[Vec<u8>]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.on(cluster).get_hash()).arg(keys.len());
    for k in keys {
        cmd.arg(k.as_str());
    }
    for a in argv {
        cmd.arg(&a[..]);
    }
    cmd
}

/// `NOSCRIPT`: the script is not in the server's cache.
const NO_SCRIPT: ErrorKind = ErrorKind::Server(ServerErrorKind::NoScript);

/// Loads `script` into the cache of the node `conn` reaches (`SCRIPT LOAD`; on a
/// Cluster, every master).
async fn load(conn: &mut Conn, script: Script) -> redis::RedisResult<()> {
    let source = script.load_source(conn.is_cluster());
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(source)
        .query_async(conn)
        .await?;
    Ok(())
}

/// A reply read as `R`, then decoded: the one way every call's answer is read.
pub(super) fn read_reply<R: FromRedisValue, T>(
    v: redis::Value,
    decode: impl FnOnce(R) -> StoreResult<T>,
) -> StoreResult<T> {
    decode(R::from_redis_value(v).map_err(|e| protocol(format!("redis reply: {e}")))?)
}

/// The key a plain command works on (its first argument), for routing its liveness.
fn first_key(cmd: &redis::Cmd) -> Vec<u8> {
    match cmd.args_iter().nth(1) {
        Some(redis::Arg::Simple(b)) => b.to_vec(),
        _ => Vec::new(),
    }
}
