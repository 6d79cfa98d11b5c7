//! The link to Redis: one node or a Cluster (D6), and the deadline that tells a busy
//! Redis from a stalled one (D4, D8).
//!
//! - [`Conn`]: a single node through redis-rs' [`ConnectionManager`] (one multiplexed
//!   connection, reconnected in the background) or a Cluster through redis-rs'
//!   [`ClusterConnection`], which follows `MOVED` / `ASK` and refreshes its slot map
//!   on topology changes. Both route every script call by its first key; the store
//!   keeps every script's keys on one hash slot (D3).
//! - [`Endpoint`]: what a store URL names — one node, a list of Cluster nodes, or one
//!   node to ask whether it belongs to a Cluster.
//! - [`Liveness`]: when the last reply came. A call is given up only when Redis has
//!   been *silent* for the deadline — no reply to any call — not merely when this call
//!   waited that long: a Redis that is slow because it is busy keeps answering others'
//!   calls, and its callers wait (up to the busy limit); one that is stalled or gone
//!   answers nobody, and every call waiting on it fails at its deadline.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// One node or a Cluster; cheap to clone (both are handles to a shared driver task).
#[derive(Clone)]
pub(crate) enum Conn {
    /// A single Redis node.
    Node(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl Conn {
    /// True for a Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Node(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Node(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Node(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// What a store URL names (`--store` / `[store] url`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// One node URL: a Cluster if that node says it is part of one, else a single node.
    Detect(String),
    /// A comma-separated list: the nodes of a Cluster (any reachable one is enough to
    /// learn the rest).
    Cluster(Vec<String>),
}

impl Endpoint {
    /// Splits a store URL: one `redis://` / `rediss://` URL, or several separated by
    /// commas (spaces around them allowed).
    pub(crate) fn parse(url: &str) -> Result<Self, String> {
        let nodes: Vec<String> = url
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if nodes.is_empty() {
            return Err("redis url: empty".to_owned());
        }
        for n in &nodes {
            if !(n.starts_with("redis://") || n.starts_with("rediss://")) {
                return Err(format!(
                    "redis url {n:?}: expected redis://host:port or rediss://host:port"
                ));
            }
        }
        Ok(if nodes.len() == 1 {
            Endpoint::Detect(nodes.into_iter().next().unwrap_or_default())
        } else {
            Endpoint::Cluster(nodes)
        })
    }
}

/// True when an `INFO cluster` reply says the node runs in Cluster mode.
pub(crate) fn says_cluster(info: &str) -> bool {
    info.lines()
        .any(|l| l.trim().strip_prefix("cluster_enabled:") == Some("1"))
}

/// When Redis last answered anything, shared by every call of a store.
#[derive(Debug)]
pub(crate) struct Liveness {
    origin: Instant,
    /// Microseconds since `origin` of the last reply (0: none yet).
    last_reply_us: AtomicU64,
}

/// How a bounded call ended without an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GaveUp {
    /// Redis answered nobody for the deadline: stalled or gone.
    Silent,
    /// Redis kept answering others, but not this call within the busy limit.
    Busy,
}

impl Liveness {
    pub(crate) fn new() -> Self {
        Self {
            origin: Instant::now(),
            last_reply_us: AtomicU64::new(0),
        }
    }

    /// Records that a reply arrived now.
    pub(crate) fn replied(&self) {
        let us = u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.last_reply_us.fetch_max(us.max(1), Ordering::Relaxed);
    }

    /// When the last reply arrived, if any.
    fn last_reply(&self) -> Option<Instant> {
        match self.last_reply_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(self.origin + Duration::from_micros(us)),
        }
    }

    /// Awaits `fut`, started at `start`, until it answers or Redis is judged stalled:
    /// silent for `deadline` (no reply to any call since `max(start, last reply)`), or
    /// `busy_limit` after `start` whatever else it answered. Every reply — an answer or
    /// a server error — counts as a sign of life; a connection error does not.
    pub(crate) async fn bounded<F, T>(
        &self,
        start: Instant,
        deadline: Duration,
        busy_limit: Duration,
        fut: F,
    ) -> Result<redis::RedisResult<T>, GaveUp>
    where
        F: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let hard = start + busy_limit.max(deadline);
        let mut until = start + deadline;
        tokio::pin!(fut);
        loop {
            match tokio::time::timeout_at(until.min(hard), &mut fut).await {
                Ok(r) => {
                    if r.as_ref().map_or_else(is_reply, |_| true) {
                        self.replied();
                    }
                    return Ok(r);
                }
                Err(_) => {
                    let now = Instant::now();
                    if now >= hard {
                        return Err(GaveUp::Busy);
                    }
                    // Alive if anything was answered since this call was made.
                    let heard = self.last_reply().filter(|&t| t > start);
                    match heard.map(|t| t + deadline) {
                        Some(next) if next > now => until = next,
                        _ => return Err(GaveUp::Silent),
                    }
                }
            }
        }
    }
}

/// True when the error is a reply from a live server (a script error, `NOSCRIPT`,
/// `MOVED` …), not a broken or refused connection.
fn is_reply(e: &redis::RedisError) -> bool {
    !(e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d6_one_url_is_detected_a_list_is_a_cluster() {
        assert_eq!(
            Endpoint::parse("redis://127.0.0.1:7001"),
            Ok(Endpoint::Detect("redis://127.0.0.1:7001".into()))
        );
        assert_eq!(
            Endpoint::parse("redis://a:1, redis://b:2,,rediss://c:3"),
            Ok(Endpoint::Cluster(vec![
                "redis://a:1".into(),
                "redis://b:2".into(),
                "rediss://c:3".into()
            ]))
        );
        assert!(Endpoint::parse("").is_err());
        assert!(Endpoint::parse("redis://a:1,http://b:2").is_err());
    }

    #[test]
    fn d6_info_cluster_reply_is_read() {
        assert!(says_cluster("# Cluster\r\ncluster_enabled:1\r\n"));
        assert!(!says_cluster("# Cluster\r\ncluster_enabled:0\r\n"));
        assert!(!says_cluster(""));
    }

    async fn never() -> redis::RedisResult<()> {
        std::future::pending().await
    }

    #[tokio::test(start_paused = true)]
    async fn d8_a_silent_redis_fails_the_call_at_its_deadline() {
        let l = Liveness::new();
        let start = Instant::now();
        let r = l
            .bounded(
                start,
                Duration::from_millis(20),
                Duration::from_secs(1),
                never(),
            )
            .await;
        assert_eq!(r.err(), Some(GaveUp::Silent));
        assert_eq!(start.elapsed(), Duration::from_millis(20));
    }

    #[tokio::test(start_paused = true)]
    async fn d8_a_busy_redis_that_answers_others_keeps_the_call_waiting() {
        let l = std::sync::Arc::new(Liveness::new());
        let start = Instant::now();
        // Others' calls are answered every 5 ms for 100 ms; then Redis falls silent.
        let beat = l.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(5)).await;
                beat.replied();
            }
        });
        let answered = async {
            tokio::time::sleep(Duration::from_millis(60)).await;
            Ok::<_, redis::RedisError>(7)
        };
        let r = l
            .bounded(
                start,
                Duration::from_millis(20),
                Duration::from_secs(1),
                answered,
            )
            .await;
        assert_eq!(
            r.map(|r| r.ok()),
            Ok(Some(7)),
            "answered at 60 ms, past the 20 ms deadline"
        );
        // A call that is never answered: waits while the others are, then the deadline
        // after the last reply (100 ms + 20 ms).
        let start = Instant::now();
        let r = l
            .bounded(
                start,
                Duration::from_millis(20),
                Duration::from_secs(1),
                never(),
            )
            .await;
        assert_eq!(r.err(), Some(GaveUp::Silent));
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(55) && waited <= Duration::from_millis(65),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn d8_the_busy_limit_bounds_every_call() {
        let l = std::sync::Arc::new(Liveness::new());
        let beat = l.clone();
        let pulse = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                beat.replied();
            }
        });
        let start = Instant::now();
        let r = l
            .bounded(
                start,
                Duration::from_millis(20),
                Duration::from_millis(300),
                never(),
            )
            .await;
        assert_eq!(r.err(), Some(GaveUp::Busy));
        assert_eq!(start.elapsed(), Duration::from_millis(300));
        pulse.abort();
    }
}
