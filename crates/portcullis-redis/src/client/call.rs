//! One call to Redis: the deadline that tells a stalled Redis from a busy one (D4,
//! D8), the breaker of the node it goes to, `NOSCRIPT` recovery, and the replica
//! acknowledgements of a write (D10). Every store call goes through here.

use super::{Client, Inner, map_err, protocol, timeout};
use crate::conn::{Breaker, Conn, GaveUp, Health, Liveness};
use crate::future::RedisStoreFuture;
use crate::options::Unacknowledged;
use crate::scripts::args::ScriptCall;
use crate::scripts::{Effect, Script};
use portcullis_core::outage::mono_ms;
use portcullis_core::{StoreError, StoreErrorKind, StoreResult};
use redis::{ErrorKind, FromRedisValue, RedisError, ServerErrorKind};
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// How late Redis may answer a `WAIT` past its timeout: it checks those timeouts on
/// its cron tick, every 100 ms at the default `hz 10` (an idle server sleeps until
/// then), so `WAIT 1 100` without a replica answers after 100–200 ms.
pub(super) const WAIT_TICK: Duration = Duration::from_millis(100);

/// A reply, and whether the replicas acknowledged the write that produced it (true
/// too for a call that asked for no acknowledgement). A write taken unacknowledged
/// may be on a master that is no longer one — stalled, then replaced — and lost
/// with it: its give-backs are sent again ([`Client::send_batch`]).
pub(super) struct Sent {
    pub(super) reply: redis::Value,
    pub(super) acknowledged: bool,
}

impl Sent {
    fn acknowledged(reply: redis::Value) -> Self {
        Self {
            reply,
            acknowledged: true,
        }
    }

    fn unacknowledged(reply: redis::Value) -> Self {
        Self {
            reply,
            acknowledged: false,
        }
    }
}

impl Inner {
    /// The index of the node `key` lives on (0 off a Cluster, and for an unknown
    /// owner). Read once per call: its breaker, liveness and log are then one node's
    /// even when the slot changes owner while it runs.
    fn node(&self, key: &[u8]) -> usize {
        self.nodes.as_ref().map_or(0, |n| n.node_of(key))
    }

    /// The breaker of node `node` (the one node's, off a Cluster).
    fn breaker(&self, node: usize) -> &Breaker {
        self.nodes
            .as_ref()
            .map_or(&self.breaker, |n| n.breaker(node))
    }

    /// The log and shortfall state of node `node`.
    fn health(&self, node: usize) -> &Health {
        &self.health[node.min(self.health.len() - 1)]
    }

    /// The name (`host:port`) of node `node`, for the log.
    fn node_name(&self, node: usize) -> String {
        match &self.nodes {
            None => self.node_label.clone(),
            Some(n) => n
                .name(node)
                .unwrap_or_else(|| "(slot owner unknown)".to_owned()),
        }
    }

    /// [`bounded`](Self::bounded), behind the breaker of `key`'s node: fails at once
    /// while it is open, and tells it how the call went. The node's log (D11) hears of
    /// it: down when a call fails fast or trips the breaker, up at its next answer.
    async fn guarded<T>(
        &self,
        start: Instant,
        node: usize,
        limit: Duration,
        fut: impl Future<Output = redis::RedisResult<StoreResult<T>>>,
    ) -> StoreResult<T> {
        let breaker = self.breaker(node);
        let health = self.health(node);
        let pass = match breaker.check() {
            Ok(p) => p,
            Err(e) => {
                health.down(&self.node_name(node), &e);
                return Err(e);
            }
        };
        let r = self.bounded(start, node, limit, fut).await;
        breaker.record(&r, self.live(node).silent_for(start));
        drop(pass);
        match &r {
            Err(e) if e.kind() == StoreErrorKind::Unavailable || breaker.is_open() => {
                health.down(&self.node_name(node), e)
            }
            Err(e) if e.kind() != StoreErrorKind::Unacknowledged => {}
            _ => health.up(|| self.node_name(node)),
        }
        r
    }

    /// How long a call may go unanswered before Redis counts as silent: the deadline,
    /// plus the replicas' wait and Redis' `WAIT` tick for a write that waits for them.
    fn limit(&self, acked: bool) -> Duration {
        if acked {
            self.deadline + self.replica_ack_wait + WAIT_TICK
        } else {
            self.deadline
        }
    }

    /// The longest a call bounded by `limit` (see [`limit`](Self::limit)) may take
    /// while Redis answers: the busy limit, or the call's silence limit, and for a write
    /// that waits for its replicas room for its second wait (see
    /// [`send_acked`](Self::send_acked)).
    fn busy(&self, limit: Duration) -> Duration {
        // The replicas' wait and Redis' tick for a write that waits for them, else 0.
        let second_wait = limit.saturating_sub(self.deadline);
        self.busy_limit.max(limit + second_wait)
    }

    /// Whether a write of `effect` waits for the replicas' acknowledgement.
    fn acked(&self, effect: Effect) -> bool {
        self.replica_acks > 0 && effect != Effect::Read
    }

    /// Runs `cmd`, an `EVALSHA` of `script` on `key`, under the store's deadline —
    /// behind the breaker when `guarded` (a retried give-back goes around it). On
    /// `NOSCRIPT` (a restart, `SCRIPT FLUSH`, a failover to a replica whose cache never
    /// had it: Redis 7 does not replicate `SCRIPT LOAD`) it sends the call again as
    /// `EVAL` with the whole source, within the same deadline: routed by its key like
    /// the `EVALSHA`, it runs on the very node that lacked the script and leaves it in
    /// that node's cache — a `SCRIPT LOAD` would go wherever this store believes the
    /// masters are, which just after a failover may not be that node. A write of
    /// `effect` waits for the replicas' acknowledgement ([`send_acked`](Self::send_acked)).
    #[allow(clippy::too_many_arguments)]
    async fn script_call(
        &self,
        start: Instant,
        key: &[u8],
        script: Script,
        effect: Effect,
        cmd: redis::Cmd,
        conn: &mut Conn,
        guarded: bool,
    ) -> StoreResult<Sent> {
        let acked = self.acked(effect);
        let node = self.node(key);
        let call = async {
            let mut cmd = cmd;
            for sent_whole in [false, true] {
                let reply = match self.send_acked(conn, &cmd, node, effect).await {
                    Err(e) if !sent_whole && e.kind() == NO_SCRIPT => {
                        cmd = as_eval(&cmd, script, conn.is_cluster());
                        continue;
                    }
                    Ok(Ok(Sent {
                        reply: redis::Value::ServerError(e),
                        ..
                    })) if !sent_whole && e.kind() == Some(ServerErrorKind::NoScript) => {
                        cmd = as_eval(&cmd, script, conn.is_cluster());
                        continue;
                    }
                    other => other?,
                };
                if let Ok(Sent {
                    reply: redis::Value::ServerError(e),
                    ..
                }) = &reply
                {
                    return Err(RedisError::from(e.clone()));
                }
                return Ok(reply);
            }
            Ok(Err(protocol("NOSCRIPT in answer to EVAL")))
        };
        let limit = self.limit(acked);
        if guarded {
            self.guarded(start, node, limit, call).await
        } else {
            self.bounded(start, node, limit, call).await
        }
    }

    /// Sends `cmd` on `conn` and, for a write with replica acks (D10), `WAIT
    /// <replica_acks> <replica_ack_wait>` behind it in the same pipeline (so on `key`'s
    /// master): the reply counts only once that many replicas hold its writes. Fewer is
    /// a durability shortfall, told apart from an outage (its own error kind, counter
    /// and log line): an admission fails as `Unacknowledged` under
    /// [`Unacknowledged::Refuse`], anything else is taken and counted. Replicas that
    /// acknowledged until now get a second `WAIT` before their shortfall counts. After
    /// a shortfall the node's writes skip the wait for
    /// [`SHORTFALL_RECHECK`](crate::SHORTFALL_RECHECK) — an admission refused unsent,
    /// the rest sent without the `WAIT`. A server error
    /// reply comes back as an error (`Err`, or `Ok(Ok(ServerError))` from the pipeline).
    async fn send_acked(
        &self,
        conn: &mut Conn,
        cmd: &redis::Cmd,
        node: usize,
        effect: Effect,
    ) -> redis::RedisResult<StoreResult<Sent>> {
        let n = self.replica_acks;
        #[cfg(test)]
        if self.sent_twice.load(std::sync::atomic::Ordering::Relaxed) {
            let _: redis::RedisResult<redis::Value> = cmd.query_async(conn).await;
        }
        if !self.acked(effect) {
            return cmd
                .query_async::<redis::Value>(conn)
                .await
                .map(|v| Ok(Sent::acknowledged(v)));
        }
        let health = self.health(node);
        let wait_ms = u64::try_from(self.replica_ack_wait.as_millis()).unwrap_or(u64::MAX);
        let refuse = effect == Effect::Admits && self.unacknowledged == Unacknowledged::Refuse;
        let now = mono_ms();
        if health.known_short(now) {
            let name = self.node_name(node);
            health.fell_short(now, &name, None, n, wait_ms, !refuse);
            if refuse {
                return Ok(Err(unacknowledged(&name, None, n, wait_ms)));
            }
            return cmd
                .query_async::<redis::Value>(conn)
                .await
                .map(|v| Ok(Sent::unacknowledged(v)));
        }
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone())
            .cmd("WAIT")
            .arg(n)
            .arg(wait_ms)
            .ignore_errors();
        let mut replies: Vec<redis::Value> = pipe.query_async(conn).await?;
        let mut acks = match replies.pop() {
            Some(redis::Value::Int(a)) => a,
            other => return Ok(Err(protocol(format!("WAIT: unexpected reply {other:?}")))),
        };
        let reply = replies.pop().unwrap_or(redis::Value::Nil);
        if matches!(reply, redis::Value::ServerError(_)) {
            return Ok(Ok(Sent::acknowledged(reply)));
        }
        if acks < i64::from(n) && !health.in_shortfall() {
            // Replicas that acknowledged until now get a second wait before their
            // shortfall counts: on a busy host one wait can be missed at a moment the
            // whole host is held up (seen at a Cluster failover beside two busy loops),
            // and a shortfall refuses the node's admissions for SHORTFALL_RECHECK. The
            // `WAIT` waits for this connection's last write, so it asks about the same
            // write again. Its reply is a sign of life: the silence the call is bounded
            // by starts again.
            self.live(node).replied();
            acks = match redis::cmd("WAIT")
                .arg(n)
                .arg(wait_ms)
                .query_async(conn)
                .await?
            {
                redis::Value::Int(a) => a,
                other => return Ok(Err(protocol(format!("WAIT: unexpected reply {other:?}")))),
            };
        }
        if acks >= i64::from(n) {
            health.acknowledged(|| self.node_name(node));
            return Ok(Ok(Sent::acknowledged(reply)));
        }
        let name = self.node_name(node);
        health.fell_short(mono_ms(), &name, Some(acks), n, wait_ms, !refuse);
        if refuse {
            return Ok(Err(unacknowledged(&name, Some(acks), n, wait_ms)));
        }
        Ok(Ok(Sent::unacknowledged(reply)))
    }

    /// The liveness of node `node` (the one node's, off a Cluster).
    fn live(&self, node: usize) -> &Liveness {
        self.nodes.as_ref().map_or(&self.liveness, |n| n.live(node))
    }

    /// Awaits one Redis call on node `node` made at `start`, given up once that node
    /// (off a Cluster, Redis) has been silent for `limit` (see [`Liveness::bounded`]),
    /// and classifies its failure.
    async fn bounded<T>(
        &self,
        start: Instant,
        node: usize,
        limit: Duration,
        fut: impl Future<Output = redis::RedisResult<StoreResult<T>>>,
    ) -> StoreResult<T> {
        let live = self.live(node);
        let busy = self.busy(limit);
        let r = live.bounded(start, limit, busy, fut).await;
        // Redis answers again after a silence: the give-backs kept for it go now, not
        // at the end of a gap that grew while it was silent (up to 2 s of leases and
        // quota held by nobody).
        if live.take_recovered() {
            self.retries.wake();
        }
        match r {
            Ok(r) => r.map_err(map_err)?,
            Err(GaveUp::Silent) => Err(timeout(limit)),
            Err(GaveUp::Busy) => Err(StoreError::new(
                StoreErrorKind::Timeout,
                format!(
                    "redis answered other calls but not this one within {} ms",
                    busy.as_millis()
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
        self.plain(cmd, Effect::Read, decode)
    }

    /// Runs a write that holds money or state other calls rely on (a balance set, a
    /// pending registration, an object's home) and answers once it landed: with
    /// replica acks, only once that many replicas hold it (D10) — or, short of them,
    /// as `effect` says.
    pub(crate) fn write_command(&self, cmd: redis::Cmd, effect: Effect) -> RedisStoreFuture<()> {
        self.write_command_with(cmd, effect, |_: redis::Value| Ok(()))
    }

    /// [`write_command`](Self::write_command), its reply decoded.
    pub(crate) fn write_command_with<R, T>(
        &self,
        cmd: redis::Cmd,
        effect: Effect,
        decode: impl FnOnce(R) -> StoreResult<T> + Send + 'static,
    ) -> RedisStoreFuture<T>
    where
        R: FromRedisValue + Send + 'static,
        T: Send + 'static,
    {
        self.plain(cmd, effect, decode)
    }

    fn plain<R, T>(
        &self,
        cmd: redis::Cmd,
        effect: Effect,
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
            let node = inner.node(&first_key(&cmd));
            let sent = inner.send_acked(&mut conn, &cmd, node, effect);
            let limit = inner.limit(inner.acked(effect));
            let v = inner.guarded(start, node, limit, sent).await?.reply;
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
        let call = self.run_script(A::SCRIPT, A::SCRIPT.effect(), keys, args.argv(), true);
        RedisStoreFuture::new(async move { read_reply(call.await?.reply, decode) })
    }

    /// One call of `script` (doing `effect`) on `keys` with `argv`, its deadline running
    /// from now (see [`Inner::script_call`]), routed by the first key; `guarded`: behind
    /// the breaker of that key's node.
    pub(super) fn run_script(
        &self,
        script: Script,
        effect: Effect,
        keys: Vec<String>,
        argv: Vec<Vec<u8>>,
        guarded: bool,
    ) -> impl Future<Output = StoreResult<Sent>> + Send + 'static {
        let start = Instant::now();
        let mut conn = self.inner.conn.clone();
        let inner = self.inner.clone();
        async move {
            let key = keys.first().map_or(&[][..], |k| k.as_bytes());
            let cmd = evalsha(script, conn.is_cluster(), &keys, &argv);
            inner
                .script_call(start, key, script, effect, cmd, &mut conn, guarded)
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

/// The error of an admission refused for want of the replicas' acknowledgement: `acks`
/// of `wanted` within `wait_ms`, or (`None`) not asked again, the shortfall being known.
fn unacknowledged(node: &str, acks: Option<i64>, wanted: u32, wait_ms: u64) -> StoreError {
    let seen = match acks {
        Some(a) => format!("{a} of {wanted} replicas acknowledged the write within {wait_ms} ms"),
        None => format!("fewer than {wanted} replicas acknowledge writes"),
    };
    StoreError::new(
        StoreErrorKind::Unacknowledged,
        format!(
            "redis node {node}: {seen} (store.replica_acks = {wanted}; admissions are \
             refused until they acknowledge again: store.unacknowledged = \"refuse\")"
        ),
    )
}

/// `NOSCRIPT`: the script is not in the server's cache.
const NO_SCRIPT: ErrorKind = ErrorKind::Server(ServerErrorKind::NoScript);

/// `cmd`, an `EVALSHA` of `script`, as `EVAL` of its whole source (as a Cluster runs
/// it, on one) with the same keys and arguments.
fn as_eval(cmd: &redis::Cmd, script: Script, cluster: bool) -> redis::Cmd {
    let mut eval = redis::cmd("EVAL");
    eval.arg(script.load_source(cluster));
    for a in cmd.args_iter().skip(2) {
        if let redis::Arg::Simple(b) = a {
            eval.arg(b);
        }
    }
    eval
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
