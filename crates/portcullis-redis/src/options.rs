//! Settings of a [`RedisStore`](crate::RedisStore).

use portcullis_core::ManualClock;
use portcullis_core::blocks::BlockSizing;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "portcullis";
/// Default hash tag of the billing registry, the one billing key shared by every tenant
/// (`<prefix>:{billing}:pending-books`).
pub const DEFAULT_BILLING_TAG: &str = "billing";
/// Default deadline of one store call (D4; Envoy's rate-limit filter uses the same).
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(20);
/// Default life of amount-cap state after its last change (W6): 400 days.
pub const DEFAULT_AMOUNT_TTL: Duration = Duration::from_secs(400 * 86_400);
/// Default longest wait of one store call on a Redis that keeps answering other calls
/// (D8): a busy Redis delays a decision this long at most before it counts as failed.
pub const DEFAULT_BUSY_LIMIT: Duration = Duration::from_millis(500);
/// Default timeout of one connection attempt.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Default longest pause between two reconnection attempts.
pub const DEFAULT_RECONNECT_MAX_DELAY: Duration = Duration::from_millis(100);
/// Default longest wait for the replicas' acknowledgement of a write (D10), on top of
/// the deadline: a replica on a loaded host is scheduled late by a few to a few tens
/// of ms, and is not a failure for that.
pub const DEFAULT_REPLICA_ACK_WAIT: Duration = Duration::from_millis(100);

/// What a write that fewer replicas than [`replica_acks`](RedisStoreOptions::replica_acks)
/// acknowledged in time does (D10). The write is on the master either way; what
/// differs is whether the gateway relies on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unacknowledged {
    /// Admissions (a decision, a reservation, a top-up, a balance set) fail as
    /// [`Unacknowledged`](portcullis_core::StoreErrorKind::Unacknowledged) — the layers
    /// treat them as a store failure — until the replicas acknowledge again (default:
    /// a failover would lose them). Give-backs (settlements, releases, refunds) are
    /// taken: refusing what is already on the master makes nothing more durable.
    #[default]
    Refuse,
    /// Every write is taken, and counted as not acknowledged.
    Accept,
}

/// How a [`RedisStore`](crate::RedisStore) names its keys, bounds its calls and
/// reconnects.
///
/// ```
/// use std::time::Duration;
/// use portcullis_redis::RedisStoreOptions;
/// let options = RedisStoreOptions::default()
///     .prefix("gw")
///     .deadline(Duration::from_millis(30))
///     .instance_id("gateway-1");
/// assert_eq!(options.get_prefix(), "gw");
/// ```
#[derive(Clone, Debug)]
pub struct RedisStoreOptions {
    pub(crate) prefix: String,
    pub(crate) billing_tag: String,
    pub(crate) deadline: Duration,
    pub(crate) busy_limit: Duration,
    pub(crate) instance_id: Option<String>,
    pub(crate) amount_ttl: Duration,
    pub(crate) time: TimeSource,
    pub(crate) connect_timeout: Duration,
    pub(crate) reconnect_max_delay: Duration,
    pub(crate) pipeline_buffer: usize,
    pub(crate) blocks: Option<BlockSizing>,
    pub(crate) replica_acks: u32,
    pub(crate) replica_ack_wait: Duration,
    pub(crate) unacknowledged: Unacknowledged,
}

/// Where the scripts take the time of a decision from.
#[derive(Clone, Debug)]
pub(crate) enum TimeSource {
    /// The server's `TIME` (production).
    Server,
    /// The server's `TIME` plus an offset in ms (tests).
    Offset(Arc<AtomicU64>),
    /// A manual clock (tests).
    Manual(ManualClock),
}

impl TimeSource {
    /// This process's time for quota blocks, in ms, in step with the scripts' time:
    /// a monotonic count from `origin` (plus the offset), or the manual clock.
    pub(crate) fn local_ms(&self, origin: std::time::Instant) -> portcullis_core::Millis {
        use portcullis_core::Clock;
        use std::sync::atomic::Ordering;
        let mono = u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        match self {
            TimeSource::Server => mono,
            TimeSource::Offset(o) => mono.saturating_add(o.load(Ordering::SeqCst)),
            TimeSource::Manual(c) => c.now(),
        }
    }

    /// The scripts' time argument: an offset, or `=<ms>` for an absolute time.
    pub(crate) fn arg(&self) -> String {
        use portcullis_core::Clock;
        use std::sync::atomic::Ordering;
        match self {
            TimeSource::Server => "0".to_owned(),
            TimeSource::Offset(o) => o.load(Ordering::SeqCst).to_string(),
            TimeSource::Manual(c) => format!("={}", c.now()),
        }
    }
}

impl Default for RedisStoreOptions {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
            billing_tag: DEFAULT_BILLING_TAG.to_owned(),
            deadline: DEFAULT_DEADLINE,
            busy_limit: DEFAULT_BUSY_LIMIT,
            instance_id: None,
            amount_ttl: DEFAULT_AMOUNT_TTL,
            time: TimeSource::Server,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            reconnect_max_delay: DEFAULT_RECONNECT_MAX_DELAY,
            pipeline_buffer: 1024,
            blocks: Some(BlockSizing::default()),
            replica_acks: 0,
            replica_ack_wait: DEFAULT_REPLICA_ACK_WAIT,
            unacknowledged: Unacknowledged::Refuse,
        }
    }
}

impl RedisStoreOptions {
    /// Key prefix (default `portcullis`): keys are `<prefix>:{<subject>}:…`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Hash tag of the billing registry (default `billing`):
    /// `<prefix>:{<tag>}:pending-books`, the set of books with attempts pending
    /// reconciliation, the one billing key shared by every tenant and written only when
    /// an attempt becomes pending. Every other billing key carries its tenant's tag (see
    /// [`RedisStore`](crate::RedisStore#billing)); before per-tenant books this tag was
    /// on every billing key. Must not contain `{` or `}` (they are removed).
    pub fn billing_tag(mut self, tag: impl Into<String>) -> Self {
        let tag: String = tag
            .into()
            .chars()
            .filter(|c| !matches!(c, '{' | '}'))
            .collect();
        self.billing_tag = if tag.is_empty() {
            DEFAULT_BILLING_TAG.to_owned()
        } else {
            tag
        };
        self
    }

    /// Deadline of every store call (default 20 ms, D4): a call fails with
    /// [`StoreErrorKind::Timeout`](portcullis_core::StoreErrorKind::Timeout) once Redis
    /// has been *silent* that long — no reply to any call of this store since the call
    /// was made, or since the last reply. A stalled or vanished Redis thus costs each
    /// call at most the deadline (T5), while a Redis that is slow because it is busy,
    /// and keeps answering, delays calls instead of failing them (D8), up to
    /// [`busy_limit`](Self::busy_limit).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Longest wait of one call while Redis keeps answering other calls (default
    /// 500 ms; never below the deadline). Past it the call fails as a timeout even
    /// though Redis is alive (on a Cluster: one node stalled while the others answer).
    pub fn busy_limit(mut self, limit: Duration) -> Self {
        self.busy_limit = limit;
        self
    }

    /// Identifies this gateway instance in lease members (`<instance-id>:<n>`). Must be
    /// unique among the instances sharing the Redis; default: random.
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// How long amount-cap state (W6: spend and in-flight reservations, which never
    /// reset by themselves) is kept after its last change (default 400 days). A subject
    /// idle for longer starts again from zero spend; keep the durable record of spend in
    /// the billing ledger.
    ///
    /// Money budgets (B3) are kept as long after their last change (0: forever); a
    /// budget idle for longer starts again from zero with a new period anchor. Balances
    /// and key spend never expire.
    pub fn amount_ttl(mut self, ttl: Duration) -> Self {
        self.amount_ttl = ttl;
        self
    }

    /// **Tests only.** Milliseconds added to the Redis server's `TIME` in every script,
    /// read at each call, so a test can move the store's time forward instantly. Stores
    /// sharing one Redis must share one offset.
    pub fn time_offset(mut self, offset: Arc<AtomicU64>) -> Self {
        self.time = TimeSource::Offset(offset);
        self
    }

    /// **Tests only.** Decide at the time of `clock` instead of the server's `TIME`, so a
    /// test can land exactly on a window or lease boundary and compare decisions with the
    /// in-memory store. Key expiries still run on the server's real time: a test must
    /// not let more real time pass than the windows and leases it relies on last.
    pub fn manual_clock(mut self, clock: ManualClock) -> Self {
        self.time = TimeSource::Manual(clock);
        self
    }

    /// Timeout of one connection attempt (default 500 ms).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Longest pause between reconnection attempts (default 100 ms), which bounds how
    /// long after Redis comes back decisions resume (T5).
    pub fn reconnect_max_delay(mut self, delay: Duration) -> Self {
        self.reconnect_max_delay = delay;
        self
    }

    /// Commands that may be queued on the connection at once (default 1024).
    pub fn pipeline_buffer(mut self, size: usize) -> Self {
        self.pipeline_buffer = size.max(1);
        self
    }

    /// Quota blocks (default on, [`BlockSizing::default`]): where a limit is far from
    /// exhausted, the store borrows a share of it in one call and decides the next
    /// requests in memory, giving back what it did not use (see
    /// [`portcullis_core::blocks`]); `None`: every decision is a round trip. Blocks never
    /// let instances together admit more than a limit; they may refuse a request on
    /// one instance while another holds unused units (at most one block per subject and
    /// instance, 1/64 of the limit by default), and a usage view counts units other
    /// instances borrowed as used.
    pub fn blocks(mut self, sizing: Option<BlockSizing>) -> Self {
        self.blocks = sizing;
        self
    }

    /// Replicas that must acknowledge every write before the store answers it (D10;
    /// default 0): each write is followed, in the same pipeline on the same
    /// connection, by `WAIT n <replica_ack_wait>`, so a decision, reservation, settlement
    /// or release is answered only once `n` replicas hold it — a forced failover or a
    /// killed master then loses none of them. Such a call's silence is judged after
    /// the deadline plus that wait. Fewer acknowledgements are a durability shortfall
    /// ([`Unacknowledged`](portcullis_core::StoreErrorKind::Unacknowledged)), not an
    /// outage; what the store then does is [`unacknowledged`](Self::unacknowledged).
    /// With quota blocks the wait is paid per block, not per request.
    pub fn replica_acks(mut self, n: u32) -> Self {
        self.replica_acks = n;
        self
    }

    /// Longest wait for the replicas' acknowledgement of a write, on top of the
    /// deadline (default [`DEFAULT_REPLICA_ACK_WAIT`]; at least 1 ms). It bounds what a
    /// billed decision costs when a shard has lost its replicas; a healthy replica
    /// acknowledges in well under a millisecond on an idle host.
    pub fn replica_ack_wait(mut self, wait: Duration) -> Self {
        self.replica_ack_wait = wait.max(Duration::from_millis(1));
        self
    }

    /// What a write fewer replicas acknowledged does (default
    /// [`Unacknowledged::Refuse`]). After a shortfall on a node, its next writes for
    /// [`SHORTFALL_RECHECK`](crate::SHORTFALL_RECHECK) do not wait for the replicas
    /// again (refused at once, or taken unacknowledged); the first write after it asks
    /// again.
    pub fn unacknowledged(mut self, what: Unacknowledged) -> Self {
        self.unacknowledged = what;
        self
    }

    /// The key prefix.
    pub fn get_prefix(&self) -> &str {
        &self.prefix
    }

    /// The per-call deadline.
    pub fn get_deadline(&self) -> Duration {
        self.deadline
    }

    /// Replicas that must acknowledge every write (see
    /// [`replica_acks`](Self::replica_acks)).
    pub fn get_replica_acks(&self) -> u32 {
        self.replica_acks
    }

    /// The longest wait for the replicas (see
    /// [`replica_ack_wait`](Self::replica_ack_wait)).
    pub fn get_replica_ack_wait(&self) -> Duration {
        self.replica_ack_wait
    }

    /// What a write the replicas did not acknowledge does (see
    /// [`unacknowledged`](Self::unacknowledged)).
    pub fn get_unacknowledged(&self) -> Unacknowledged {
        self.unacknowledged
    }
}
