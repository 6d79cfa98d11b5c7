//! The client of the store: one node or a Cluster, the deadline and breaker of every
//! call, the scripts, the batch of settlements and releases, the give-backs sent again
//! until they land, and the key schema ([`Keys`]). It knows Redis and the keys, not
//! what slots, windows or money mean: the store's operations types do.

mod batching;
mod call;
mod connect;
mod retry;

pub(crate) use batching::Undo;
pub use retry::GiveBacks;

use crate::batch::Batcher;
use crate::conn::{
    Breaker, Conn, Health, Liveness, NODE_ENTRIES, Nodes, Unacked, hash_slot, unacked_total,
    watch_topology,
};
use crate::keys::Keys;
use crate::options::{RedisStoreOptions, TimeSource, Unacknowledged};
use crate::scripts::Script;
use portcullis_core::id;
use portcullis_core::{LeaseId, Millis, StoreError, StoreErrorKind, StoreResult};
use redis::{ErrorKind, RedisError, ServerErrorKind};
use std::sync::Arc;
use std::time::Duration;

/// The connection to Redis and what every call shares. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Conn,
    /// Every key name (see [`crate::keys`]).
    keys: Keys,
    instance: String,
    /// Ids of leases, admission records and billing blocks' attempts.
    next_id: id::Sequence,
    deadline: Duration,
    busy_limit: Duration,
    connect_timeout: Duration,
    amount_ttl_ms: Millis,
    /// Replicas that acknowledge every write (`WAIT`) before it is answered (D10), how
    /// long they are waited for, and what a write they did not acknowledge does.
    replica_acks: u32,
    replica_ack_wait: Duration,
    unacknowledged: Unacknowledged,
    /// Per node (entry 0 off a Cluster): what the log tells of it, and its replicas'
    /// shortfall.
    health: Box<[Health]>,
    /// The single node's address, for the log.
    node_label: String,
    time: TimeSource,
    breaker: Breaker,
    /// When a single node last answered.
    liveness: Liveness,
    /// On a Cluster: which node owns each slot, and when each node last answered.
    nodes: Option<Arc<Nodes>>,
    /// Settlements and releases waiting to go out together.
    batcher: Batcher,
    /// Give-backs whose call failed, sent again until they land.
    retries: retry::Retries,
    /// Tests: every command is sent twice and the second answer taken, as a client does
    /// that sends a command again after losing the connection the first answer was on.
    #[cfg(test)]
    sent_twice: std::sync::atomic::AtomicBool,
}

impl Client {
    /// A client on `conn`; `label`: the single node's address, for the log.
    fn new(conn: Conn, options: RedisStoreOptions, label: String) -> Self {
        let entries = if conn.is_cluster() { NODE_ENTRIES } else { 1 };
        let nodes = match &conn {
            Conn::Node(_) => None,
            Conn::Cluster(c) => {
                watch_topology(
                    Arc::downgrade(c.links()),
                    TOPOLOGY_EVERY,
                    options.connect_timeout,
                );
                Some(c.nodes().clone())
            }
        };
        let instance = options
            .instance_id
            .unwrap_or_else(|| format!("{:016x}", id::random_u64()));
        Self {
            inner: Arc::new(Inner {
                conn,
                keys: Keys::new(options.prefix, &options.billing_tag),
                instance,
                // A random start in [1, 2^61): two stores never hand out the same id, so
                // a lease released through the wrong store frees nothing; and no count
                // reaches bit 62, which marks a lease of a quota block.
                next_id: id::Sequence::starting_at((id::random_u64() >> 3).max(1)),
                deadline: options.deadline,
                busy_limit: options.busy_limit,
                connect_timeout: options.connect_timeout,
                amount_ttl_ms: portcullis_core::clock::millis(options.amount_ttl),
                replica_acks: options.replica_acks,
                replica_ack_wait: options.replica_ack_wait,
                unacknowledged: options.unacknowledged,
                health: (0..entries).map(|_| Health::default()).collect(),
                node_label: label,
                time: options.time,
                breaker: Breaker::new(options.deadline),
                liveness: Liveness::new(),
                nodes,
                batcher: Batcher::default(),
                retries: retry::Retries::default(),
                #[cfg(test)]
                sent_twice: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Writes the replicas did not acknowledge, over every node (D10).
    pub(crate) fn unacknowledged(&self) -> Unacked {
        unacked_total(self.inner.health.iter())
    }

    /// True when the client talks to a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        self.inner.conn.is_cluster()
    }

    /// The id of this instance in lease members.
    pub(crate) fn instance_id(&self) -> &str {
        &self.inner.instance
    }

    /// The per-call deadline.
    pub(crate) fn deadline(&self) -> Duration {
        self.inner.deadline
    }

    /// How long a busy Redis may delay a call.
    pub(crate) fn busy_limit(&self) -> Duration {
        self.inner.busy_limit
    }

    /// Replicas that acknowledge every write.
    pub(crate) fn replica_acks(&self) -> u32 {
        self.inner.replica_acks
    }

    /// The store's key names.
    pub(crate) fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// A fresh id: of a lease, an admission record, a billing block's attempt.
    pub(crate) fn next_id(&self) -> u64 {
        self.inner.next_id.next()
    }

    /// The lease member of `lease`: `<instance-id>:<lease>`.
    pub(crate) fn member(&self, lease: LeaseId) -> String {
        format!("{}:{lease}", self.inner.instance)
    }

    /// The member of the admission record of the call `id` (D9): the id alone, so any
    /// instance can settle what another admitted (ids start at random, 2^61 apart).
    pub(crate) fn record_member(id: u64) -> String {
        id.to_string()
    }

    /// The scripts' time argument (`ARGV[1]`).
    pub(crate) fn time(&self) -> String {
        self.inner.time.arg()
    }

    /// This process's clock, in ms since `origin` (see [`TimeSource::local_ms`]).
    pub(crate) fn local_ms(&self, origin: std::time::Instant) -> Millis {
        self.inner.time.local_ms(origin)
    }

    /// Life of amount-cap and budget state after its last change, in ms.
    pub(crate) fn amount_ttl_ms(&self) -> Millis {
        self.inner.amount_ttl_ms
    }

    /// True on a Cluster when the owner of `key`'s slot changed within `ttl_ms`.
    pub(crate) fn slot_moved_within(&self, key: &str, ttl_ms: Millis) -> bool {
        self.inner
            .nodes
            .as_ref()
            .is_some_and(|n| n.moved_within(key.as_bytes(), Duration::from_millis(ttl_ms)))
    }

    /// The hash slot of `key` on a Cluster; one slot for everything on a single node.
    pub(crate) fn slot_of(&self, key: &str) -> u16 {
        if self.is_cluster() {
            hash_slot(key.as_bytes())
        } else {
            0
        }
    }

    /// Give-backs that failed once (see [`GiveBacks`]).
    pub(crate) fn give_backs(&self) -> GiveBacks {
        self.inner.retries.counts()
    }

    /// Tests: sends every command twice (see `Inner::sent_twice`).
    #[cfg(test)]
    pub(crate) fn send_twice(&self, on: bool) {
        self.inner
            .sent_twice
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Loads every script into the server's script cache (`SCRIPT LOAD`; on a Cluster,
    /// on every master), bounded by the connect timeout.
    pub(crate) async fn load_scripts(&self) -> StoreResult<()> {
        let mut conn = self.inner.conn.clone();
        let cluster = conn.is_cluster();
        let limit = self.inner.connect_timeout.max(self.inner.deadline);
        let load = async {
            if cluster {
                // One command per script: the Cluster client sends `SCRIPT LOAD` to every
                // master (a pipeline would go to one node).
                let mut hashes = Vec::with_capacity(Script::ALL.len());
                for s in Script::ALL {
                    let h: String = redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(s.load_source(true))
                        .query_async(&mut conn)
                        .await?;
                    hashes.push(h);
                }
                Ok(hashes)
            } else {
                let mut pipe = redis::pipe();
                for s in Script::ALL {
                    pipe.cmd("SCRIPT").arg("LOAD").arg(s.load_source(false));
                }
                pipe.query_async::<Vec<String>>(&mut conn).await
            }
        };
        let hashes: Vec<String> = match tokio::time::timeout(limit, load).await {
            Err(_) => return Err(timeout(limit)),
            Ok(r) => r.map_err(map_err)?,
        };
        let expected = Script::ALL.map(|s| s.on(cluster).get_hash());
        if hashes.iter().map(String::as_str).ne(expected) {
            return Err(StoreError::new(
                StoreErrorKind::Protocol,
                format!("SCRIPT LOAD returned unexpected hashes {hashes:?}"),
            ));
        }
        Ok(())
    }
}

/// How often a Cluster store rereads the slot owners.
pub(crate) const TOPOLOGY_EVERY: Duration = Duration::from_secs(1);

pub(crate) fn in_runtime() -> StoreResult<()> {
    tokio::runtime::Handle::try_current()
        .map(drop)
        .map_err(|_| {
            StoreError::new(
                StoreErrorKind::Unavailable,
                "RedisStore must be created inside a Tokio runtime",
            )
        })
}

pub(crate) fn protocol(message: impl Into<String>) -> StoreError {
    StoreError::new(StoreErrorKind::Protocol, message)
}

pub(crate) fn timeout(limit: Duration) -> StoreError {
    StoreError::new(
        StoreErrorKind::Timeout,
        format!("no answer from redis within {} ms", limit.as_millis()),
    )
}

/// Classifies a client error: connection trouble is `Unavailable`, an I/O timeout is
/// `Timeout`, anything the server or a script answered wrongly is `Protocol`.
pub(crate) fn map_err(e: RedisError) -> StoreError {
    let kind = if e.is_timeout() {
        StoreErrorKind::Timeout
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        StoreErrorKind::Unavailable
    } else {
        match e.kind() {
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                | ServerErrorKind::MasterDown
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::ReadOnly,
            )
            | ErrorKind::ClusterConnectionNotFound
            | ErrorKind::AuthenticationFailed => StoreErrorKind::Unavailable,
            _ => StoreErrorKind::Protocol,
        }
    };
    StoreError::new(kind, format!("redis: {e}"))
}

pub(crate) fn count(v: i64, what: &str) -> StoreResult<u32> {
    u32::try_from(v).map_err(|_| {
        StoreError::new(
            StoreErrorKind::Protocol,
            format!("{what}: unexpected count {v}"),
        )
    })
}
