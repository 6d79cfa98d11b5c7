//! The link to Redis: one node or a Cluster (D6), and the deadline that tells a busy
//! Redis from a stalled one (D4, D8).
//!
//! - [`Conn`]: a single node through redis-rs' [`ConnectionManager`] (one multiplexed
//!   connection, reconnected in the background) or a Cluster through redis-rs'
//!   [`Cluster`]: each call on its slot's master over that node's own connection,
//!   following `MOVED` (and, through redis-rs' `ClusterConnection`, `ASK`). Both route every script call by its first key; the store
//!   keeps every script's keys on one hash slot (D3).
//! - [`Endpoint`]: what a store URL names — one node, a list of Cluster nodes, or one
//!   node to ask whether it belongs to a Cluster.
//! - [`Liveness`]: when the last reply came. A call is given up only when Redis has
//!   been *silent* for the deadline — no reply to any call — not merely when this call
//!   waited that long: a Redis that is slow because it is busy keeps answering others'
//!   calls, and its callers wait (up to the busy limit); one that is stalled or gone
//!   answers nobody, and every call waiting on it fails at its deadline.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// One node or a Cluster; cheap to clone (both are handles to a shared driver task).
#[derive(Clone)]
pub(crate) enum Conn {
    /// A single Redis node.
    Node(ConnectionManager),
    /// A Redis Cluster, each call on its slot's master ([`Cluster`]).
    Cluster(Cluster),
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

mod breaker;
mod health;
mod liveness;
mod nodes;
mod route;

pub(crate) use breaker::Breaker;
pub(crate) use health::{Health, unacked_total};
pub use health::{SHORTFALL_RECHECK, Unacked};
pub(crate) use liveness::{GaveUp, Liveness};
pub(crate) use nodes::{NODE_ENTRIES, Nodes, hash_slot, watch_topology};
pub(crate) use route::Cluster;

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
}
