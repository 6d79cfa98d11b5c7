//! A Cluster's calls, each sent to its slot's master on a connection of that node's own
//! (T5: a fault fails only its own shard).
//!
//! redis-rs' [`ClusterConnection`] drives every node's requests from one task, and
//! while it refreshes its slot map or reconnects to a node (after a `MOVED`, a dropped
//! connection) it polls no request at all: every call on every node waits behind the
//! refresh — and a refresh that asks a stalled or dead node waits out its timeouts.
//! One master failing over then failed calls on the healthy masters, and kept the
//! failed-over shard's calls waiting well past the failover. So a call whose slot has a
//! known owner goes straight to that node's own multiplexed connection:
//!
//! - the owner comes from [`Nodes`] (read from `CLUSTER SLOTS`, see
//!   [`watch_topology`](super::watch_topology)); a `MOVED` reply updates it at once
//!   and the call is sent again to the node it names (twice at most);
//! - a node's connection that breaks is dropped and made anew on the next call (within
//!   the connect timeout), and the slot owners are read again at once: a killed
//!   master's slots move to its replica as soon as the Cluster promotes it;
//! - what has no single slot (`SCRIPT LOAD`, keyless commands), an `ASK` redirection
//!   (a slot being migrated) and any slot whose owner is not known yet go through
//!   redis-rs' `ClusterConnection`, as before. `SCRIPT LOAD` goes to every master this
//!   store knows, at once; it fails only if none loads it (a dead master does not keep
//!   the others' calls from loading it after a `NOSCRIPT`).

use super::Nodes;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo};
use redis::{ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OnceCell;

/// Redirections a call follows before it is handed to redis-rs' client.
const REDIRECTS: usize = 2;

/// A Redis Cluster: each call on its slot's master (see the module doc).
#[derive(Clone)]
pub(crate) struct Cluster {
    fallback: ClusterConnection,
    links: Arc<Links>,
}

/// Every node's connection, and what makes a new one.
pub(crate) struct Links {
    nodes: Arc<Nodes>,
    /// The first seed's connection settings (credentials, TLS, RESP version): every
    /// node is reached as it is, at its own address.
    template: ConnectionInfo,
    /// The seeds' `host:port`, asked for the slot owners before any is known.
    seeds: Vec<String>,
    config: AsyncConnectionConfig,
    conns: Mutex<HashMap<String, Arc<OnceCell<MultiplexedConnection>>>>,
    /// Read the slot owners again now (a node's connection broke, a `MOVED`).
    reread: tokio::sync::Notify,
}

/// One call: a command or a slice of a pipeline.
#[derive(Clone, Copy)]
enum Req<'a> {
    Cmd(&'a Cmd),
    Pipe(&'a Pipeline, usize, usize),
}

impl Req<'_> {
    async fn send(self, conn: &mut MultiplexedConnection) -> RedisResult<Vec<Value>> {
        match self {
            Req::Cmd(c) => conn.req_packed_command(c).await.map(|v| vec![v]),
            Req::Pipe(p, offset, count) => conn.req_packed_commands(p, offset, count).await,
        }
    }
    async fn fallback(self, conn: &mut ClusterConnection) -> RedisResult<Vec<Value>> {
        match self {
            Req::Cmd(c) => conn.req_packed_command(c).await.map(|v| vec![v]),
            Req::Pipe(p, offset, count) => conn.req_packed_commands(p, offset, count).await,
        }
    }
}

impl Cluster {
    /// A Cluster reached through `seeds` (URLs), with redis-rs' `fallback` connection
    /// to it, and `nodes` that a topology watch fills.
    pub(crate) fn new(
        fallback: ClusterConnection,
        seeds: &[String],
        nodes: Arc<Nodes>,
        connect_timeout: Duration,
    ) -> RedisResult<Self> {
        let first = seeds.first().ok_or_else(|| {
            RedisError::from((ErrorKind::InvalidClientConfig, "no cluster node url"))
        })?;
        let template = first.as_str().into_connection_info()?;
        let seeds = seeds
            .iter()
            .filter_map(|u| u.as_str().into_connection_info().ok())
            .filter_map(|i| match i.addr() {
                ConnectionAddr::Tcp(h, p)
                | ConnectionAddr::TcpTls {
                    host: h, port: p, ..
                } => Some(format!("{h}:{p}")),
                _ => None,
            })
            .collect();
        // No response timeout: each call's own deadline and the busy limit bound it.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(None);
        Ok(Self {
            fallback,
            links: Arc::new(Links {
                nodes,
                template,
                seeds,
                config,
                conns: Mutex::new(HashMap::new()),
                reread: tokio::sync::Notify::new(),
            }),
        })
    }

    /// The slot owners and the nodes' liveness and breakers.
    pub(crate) fn nodes(&self) -> &Arc<Nodes> {
        &self.links.nodes
    }

    pub(crate) fn links(&self) -> &Arc<Links> {
        &self.links
    }

    async fn call(&mut self, req: Req<'_>) -> RedisResult<Vec<Value>> {
        let first = match req {
            Req::Cmd(c) => c,
            Req::Pipe(p, ..) => match p.cmd_iter().find(|c| key_of(c).is_some()) {
                Some(c) => c,
                None => p.cmd_iter().next().ok_or_else(empty)?,
            },
        };
        if is_script_load(first) && matches!(req, Req::Cmd(_)) {
            return self.load_everywhere(req).await;
        }
        let Some(slot) = key_of(first).map(super::hash_slot) else {
            return req.fallback(&mut self.fallback).await;
        };
        let mut target = self.links.nodes.owner_addr(slot);
        for _ in 0..=REDIRECTS {
            let Some(addr) = target.take() else { break };
            let (cell, mut conn) = self.links.connection(&addr).await.inspect_err(|e| {
                if is_broken(e) {
                    self.links.reread.notify_one();
                }
            })?;
            let r = req.send(&mut conn).await;
            if let Err(e) = &r {
                if is_broken(e) {
                    self.links.forget(&addr, &cell);
                    self.links.reread.notify_one();
                }
                if let Some((to, slot)) = e.redirect_node() {
                    if e.kind() == ErrorKind::Server(ServerErrorKind::Moved) {
                        target = Some(self.links.moved(slot, to));
                        continue;
                    }
                    break;
                }
                return r;
            }
            match r.as_ref().ok().and_then(|v| redirect(v)) {
                None => return r,
                Some((ServerErrorKind::Moved, slot, to)) => {
                    target = Some(self.links.moved(slot, &to));
                }
                // ASK: a slot being migrated; redis-rs' client asks the node named.
                Some(_) => break,
            }
        }
        req.fallback(&mut self.fallback).await
    }

    /// `SCRIPT LOAD` on every master this store knows, at once: the first hash any
    /// answered, or the error if none did. Before any master is known, redis-rs' client
    /// sends it to the masters it knows.
    async fn load_everywhere(&mut self, req: Req<'_>) -> RedisResult<Vec<Value>> {
        let masters = self.links.nodes.masters();
        if masters.is_empty() {
            return req.fallback(&mut self.fallback).await;
        }
        let links = &self.links;
        let sends = masters.iter().map(|addr| async move {
            let (cell, mut conn) = links.connection(addr).await?;
            let r = req.send(&mut conn).await;
            if r.as_ref().is_err_and(is_broken) {
                links.forget(addr, &cell);
            }
            match r {
                Ok(v) if v.iter().any(|v| matches!(v, Value::ServerError(_))) => Err(
                    RedisError::from((ErrorKind::Client, "SCRIPT LOAD", format!("{v:?}"))),
                ),
                other => other,
            }
        });
        let mut last = Err(empty());
        for r in futures_util::future::join_all(sends).await {
            match r {
                Ok(v) => return Ok(v),
                Err(e) => last = Err(e),
            }
        }
        last
    }
}

impl Links {
    /// The slot owners and the nodes' liveness and breakers.
    pub(crate) fn nodes(&self) -> &Nodes {
        &self.nodes
    }

    /// The connection to the node at `addr` (`host:port`), made if there is none.
    async fn connection(
        &self,
        addr: &str,
    ) -> RedisResult<(Arc<OnceCell<MultiplexedConnection>>, MultiplexedConnection)> {
        let cell = {
            let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
            conns.entry(addr.to_owned()).or_default().clone()
        };
        let conn = cell
            .get_or_try_init(|| async {
                let client = redis::Client::open(self.info(addr)?)?;
                client
                    .get_multiplexed_async_connection_with_config(&self.config)
                    .await
            })
            .await?
            .clone();
        Ok((cell, conn))
    }

    /// Drops the connection in `cell` to `addr` (it broke): the next call makes another.
    fn forget(&self, addr: &str, cell: &Arc<OnceCell<MultiplexedConnection>>) {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        if conns.get(addr).is_some_and(|c| Arc::ptr_eq(c, cell)) {
            conns.remove(addr);
        }
    }

    /// A `MOVED` to `to` for `slot`: the owner changed; read every owner again soon.
    fn moved(&self, slot: u16, to: &str) -> String {
        self.nodes.set_owner(slot, to);
        self.reread.notify_one();
        to.to_owned()
    }

    /// How to reach the node at `addr` (`host:port`): the seed's settings, its address.
    fn info(&self, addr: &str) -> RedisResult<ConnectionInfo> {
        let (host, port) = addr
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_owned(), p.parse::<u16>().ok()?)))
            .ok_or_else(|| {
                RedisError::from((ErrorKind::Client, "cluster node address", addr.to_owned()))
            })?;
        let addr = match self.template.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        Ok(self.template.clone().set_addr(addr))
    }

    /// Reads `CLUSTER SLOTS` from every master known and every seed, at once, within
    /// `limit`; the first answer, if any.
    pub(crate) async fn read_slots(&self, limit: Duration) -> Option<Value> {
        let mut ask = self.nodes.masters();
        for s in &self.seeds {
            if !ask.contains(s) {
                ask.push(s.clone());
            }
        }
        let reads = ask.into_iter().map(|addr| {
            Box::pin(async move {
                let read = async {
                    let (cell, mut conn) = self.connection(&addr).await?;
                    let r = redis::cmd("CLUSTER")
                        .arg("SLOTS")
                        .query_async::<Value>(&mut conn)
                        .await;
                    if r.as_ref().is_err_and(is_broken) {
                        self.forget(&addr, &cell);
                    }
                    r
                };
                match tokio::time::timeout(limit, read).await {
                    Ok(Ok(v)) => Ok(v),
                    _ => Err(()),
                }
            })
        });
        futures_util::future::select_ok(reads)
            .await
            .ok()
            .map(|(v, _)| v)
    }

    /// Waits until the slot owners should be read again: `every` passed, or a call saw
    /// them change or a node's connection break.
    pub(crate) async fn until_reread(&self, every: Duration) {
        let _ = tokio::time::timeout(every, self.reread.notified()).await;
    }
}

impl ConnectionLike for Cluster {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut v = self.call(Req::Cmd(cmd)).await?;
            v.pop().ok_or_else(empty)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.call(Req::Pipe(cmd, offset, count)))
    }

    fn get_db(&self) -> i64 {
        0
    }
}

fn empty() -> RedisError {
    RedisError::from((ErrorKind::Client, "an empty request"))
}

/// The connection is gone (dropped, refused, reset): not a reply.
fn is_broken(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal()
}

fn is_script_load(cmd: &Cmd) -> bool {
    let mut args = cmd.args_iter();
    let word = |a: Option<redis::Arg<&[u8]>>, w: &str| matches!(a, Some(redis::Arg::Simple(b)) if b.eq_ignore_ascii_case(w.as_bytes()));
    word(args.next(), "SCRIPT") && word(args.next(), "LOAD")
}

/// The key a command is routed by: the first key of a script call, the first argument
/// of a keyed command; `None` for the keyless commands the store sends.
fn key_of(cmd: &Cmd) -> Option<&[u8]> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .take(4)
        .filter_map(|a| match a {
            redis::Arg::Simple(b) => Some(b),
            _ => None,
        })
        .collect();
    let name = args.first()?.to_ascii_uppercase();
    match name.as_slice() {
        b"EVALSHA" | b"EVAL" | b"EVALSHA_RO" | b"EVAL_RO" | b"FCALL" | b"FCALL_RO" => {
            let keys: usize = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
            (keys > 0).then(|| args.get(3).copied()).flatten()
        }
        b"SCRIPT" | b"CLUSTER" | b"INFO" | b"PING" | b"WAIT" | b"WAITAOF" | b"FUNCTION"
        | b"CONFIG" | b"KEYS" | b"SCAN" | b"FLUSHALL" | b"FLUSHDB" | b"DBSIZE" | b"TIME"
        | b"ECHO" | b"ROLE" | b"READONLY" | b"READWRITE" | b"ASKING" | b"MULTI" | b"EXEC" => None,
        _ => args.get(1).copied(),
    }
}

/// The first redirection among `replies`: its kind, slot and target `host:port`.
fn redirect(replies: &[Value]) -> Option<(ServerErrorKind, u16, String)> {
    replies.iter().find_map(|v| match v {
        Value::ServerError(e)
            if matches!(
                e.kind(),
                Some(ServerErrorKind::Moved) | Some(ServerErrorKind::Ask)
            ) =>
        {
            let kind = e.kind()?;
            let mut it = e.details()?.split_ascii_whitespace();
            let slot = it.next()?.parse().ok()?;
            Some((kind, slot, it.next()?.to_owned()))
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t5_calls_are_routed_by_their_first_key() {
        let mut c = redis::cmd("EVALSHA");
        c.arg("abc").arg(2).arg("k1").arg("k2").arg("x");
        assert_eq!(key_of(&c), Some(&b"k1"[..]));
        let mut c = redis::cmd("evalsha");
        c.arg("abc").arg(0).arg("x");
        assert_eq!(key_of(&c), None);
        let mut c = redis::cmd("HGET");
        c.arg("h").arg("f");
        assert_eq!(key_of(&c), Some(&b"h"[..]));
        let mut c = redis::cmd("WAIT");
        c.arg(1).arg(50);
        assert_eq!(key_of(&c), None);
        let mut c = redis::cmd("SCRIPT");
        c.arg("LOAD").arg("return 1");
        assert!(is_script_load(&c) && key_of(&c).is_none());
        let mut c = redis::cmd("CLUSTER");
        c.arg("SLOTS");
        assert!(!is_script_load(&c) && key_of(&c).is_none());
    }
}
