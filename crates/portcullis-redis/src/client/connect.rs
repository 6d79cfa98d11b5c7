//! Connecting: one node, a Cluster, or one node asked whether it belongs to one (D6).

use super::call::WAIT_TICK;
use super::{Client, in_runtime, map_err, protocol, timeout};
use crate::conn::{Cluster, Conn, Endpoint, Nodes, says_cluster};
use crate::options::RedisStoreOptions;
use portcullis_core::StoreResult;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::Arc;
use std::time::Duration;

impl Client {
    /// Connects to `url`, loads the scripts and returns the store. Fails if Redis cannot
    /// be reached within the options' connect timeout; use
    /// [`connect_lazy`](Self::connect_lazy) to start while Redis is down.
    ///
    /// `url` is one node (`redis://host:port/db`, `rediss://…` for TLS) or a
    /// comma-separated list of the nodes of a Redis Cluster (D6). One node that belongs
    /// to a Cluster (`INFO cluster` says `cluster_enabled:1`) is used as the Cluster's
    /// seed: the store learns the other nodes from it.
    pub(crate) async fn connect(url: &str, options: RedisStoreOptions) -> StoreResult<Self> {
        let nodes = match Endpoint::parse(url).map_err(protocol)? {
            Endpoint::Cluster(nodes) => nodes,
            Endpoint::Detect(url) if Self::is_cluster_node(&url, &options).await? => vec![url],
            Endpoint::Detect(url) => {
                let store = Self::connect_lazy(&url, options)?;
                store.load_scripts().await?;
                return Ok(store);
            }
        };
        let store = Self::cluster_lazy(&nodes, options)?;
        store.load_scripts().await?;
        Ok(store)
    }

    /// Asks the node at `url` whether it runs in Cluster mode, within the connect
    /// timeout.
    async fn is_cluster_node(url: &str, options: &RedisStoreOptions) -> StoreResult<bool> {
        let client =
            redis::Client::open(url).map_err(|e| protocol(format!("redis url {url:?}: {e}")))?;
        let limit = options.connect_timeout.max(options.deadline);
        let ask = async {
            let mut c = client.get_multiplexed_async_connection().await?;
            redis::cmd("INFO")
                .arg("cluster")
                .query_async::<String>(&mut c)
                .await
        };
        match tokio::time::timeout(limit, ask).await {
            Err(_) => Err(timeout(limit)),
            Ok(r) => Ok(says_cluster(&r.map_err(map_err)?)),
        }
    }

    /// A store that connects on first use and reconnects by itself; no I/O here. Calls
    /// fail with [`StoreError`](portcullis_core::StoreError) until Redis answers. Must be called inside a Tokio
    /// runtime.
    ///
    /// A comma-separated list of URLs is a Redis Cluster; one URL is a single node here
    /// (telling a Cluster node apart needs I/O: use [`connect`](Self::connect), or
    /// [`cluster_lazy`](Self::cluster_lazy) with that one URL).
    pub(crate) fn connect_lazy(url: &str, options: RedisStoreOptions) -> StoreResult<Self> {
        match Endpoint::parse(url).map_err(protocol)? {
            Endpoint::Cluster(nodes) => Self::cluster_lazy(&nodes, options),
            Endpoint::Detect(url) => {
                let client = redis::Client::open(url.as_str())
                    .map_err(|e| protocol(format!("redis url: {e}")))?;
                Self::from_client(client, options)
            }
        }
    }

    /// A store on the Redis Cluster that `nodes` belong to (any reachable one is enough
    /// to find the rest), connecting in the background; no I/O here. Each call goes to
    /// its slot's master on that node's own connection ([`Cluster`]); `MOVED` / `ASK`
    /// redirections and topology changes (a failover, a resharded slot) are followed; a
    /// call in flight during one fails at its deadline at worst, and only calls on the
    /// slots that changed. Must be called inside a Tokio runtime.
    pub(crate) fn cluster_lazy(nodes: &[String], options: RedisStoreOptions) -> StoreResult<Self> {
        in_runtime()?;
        let seeds = nodes;
        let client = redis::cluster::ClusterClientBuilder::new(nodes.iter().map(String::as_str))
            .connection_timeout(options.connect_timeout)
            // Our own deadline bounds each call; the client's retries follow redirections
            // and reconnect, each wait short so a call can still land within it.
            .retries(4)
            .min_retry_wait(2)
            .max_retry_wait(options.reconnect_max_delay.as_millis().max(2) as u64)
            .build()
            .map_err(|e| protocol(format!("redis cluster urls: {e}")))?;
        // redis-rs' client carries only what has no single slot and `ASK` redirections
        // (see `Cluster`). While it refreshes its slot map it holds all it carries, and
        // the refresh checks every node: a response timeout keeps a stalled node from
        // holding it for the whole stall (without one it waits until the node answers).
        let config = redis::cluster::ClusterConfig::new()
            .set_connection_timeout(options.connect_timeout)
            .set_response_timeout(options.connect_timeout.max(options.busy_limit));
        let fallback = client.get_pending_async_connection_with_config(config);
        let nodes = Arc::new(Nodes::new(options.deadline));
        let conn = Cluster::new(fallback, seeds, nodes, options.connect_timeout)
            .map_err(|e| protocol(format!("redis cluster urls: {e}")))?;
        Ok(Self::new(
            Conn::Cluster(conn),
            options,
            "cluster".to_owned(),
        ))
    }

    /// [`connect_lazy`](Self::connect_lazy) with a single-node client configured by the
    /// caller (TLS, credentials, RESP version). Must be called inside a Tokio runtime.
    pub(crate) fn from_client(
        client: redis::Client,
        options: RedisStoreOptions,
    ) -> StoreResult<Self> {
        in_runtime()?;
        let label = client.get_connection_info().addr().to_string();
        let config = ConnectionManagerConfig::new()
            .set_min_delay(Duration::from_millis(10))
            .set_exponent_base(2.0)
            .set_max_delay(options.reconnect_max_delay)
            .set_number_of_retries(8)
            .set_connection_timeout(Some(options.connect_timeout))
            // The crate's own bound on a reply (500 ms unless set) only backs ours up:
            // it must not cut a call that ours still allows — a write's wait for its
            // replicas, a longer deadline — into "timed out", as if Redis were down.
            .set_response_timeout(Some(longest_call(&options)))
            .set_pipeline_buffer_size(options.pipeline_buffer);
        let conn = ConnectionManager::new_lazy_with_config(client, config).map_err(map_err)?;
        Ok(Self::new(Conn::Node(conn), options, label))
    }
}

/// The longest one call may wait for its reply under `options`: the busy limit, or a
/// silent Redis' deadline plus the replicas' wait and Redis' `WAIT` tick, whichever is
/// longer (see `Liveness::bounded`), and never less than the connect timeout.
fn longest_call(options: &RedisStoreOptions) -> Duration {
    options
        .connect_timeout
        .max(options.busy_limit)
        .max(options.deadline + options.replica_ack_wait + WAIT_TICK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d10_the_redis_crates_bound_on_a_reply_does_not_cut_a_wait_for_replicas() {
        let defaults = RedisStoreOptions::default();
        assert_eq!(
            longest_call(&defaults),
            defaults.connect_timeout.max(defaults.busy_limit)
        );
        let patient = RedisStoreOptions::default()
            .deadline(Duration::from_secs(2))
            .replica_ack_wait(Duration::from_secs(1));
        assert_eq!(longest_call(&patient), Duration::from_secs(3) + WAIT_TICK);
        let busy = RedisStoreOptions::default().busy_limit(Duration::from_secs(9));
        assert_eq!(longest_call(&busy), Duration::from_secs(9));
    }
}
