//! Choosing where the proxy's state lives: the in-memory store, or Redis.
//!
//! [`open`] opens the store a `[store]` section names — `memory`, or (with the `redis`
//! feature, on by default) a `redis://` / `rediss://` URL of one node or a
//! comma-separated list of Cluster nodes — and [`OpenedStore::build`] builds the
//! gateway's router on it. [`Split`] keeps slots, windows and channel capacity in one
//! store and money in another.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use portcullis_proxy::Config;
//! use portcullis_proxy::store::{BuildOptions, open};
//! let config = Config::load("portcullis.toml".as_ref())?;
//! let store = open(config.store()).await?;
//! println!("state in the {}", store.describe());
//! let app = store.build(config, BuildOptions::default()).await?;
//! # let _ = app;
//! # Ok(()) }
//! ```

use crate::config::{Config, StoreSettings};
use axum::Router;
use portcullis::core::{
    AccountView, Admission, AttemptRef, AttemptState, BillingDecision, BillingOutcome,
    BillingRequest, BillingStore, Budget, CapacityStore, Demand, LeaseId, LimitView, MemoryStore,
    Millis, Money, Outcome, Policy, Scope, SlotDecision, SlotStore, SubjectKey, SystemClock,
    WindowStore, WindowTicket,
};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Why a store could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenError(String);

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OpenError {}

/// The Redis store as the gateway uses it: limits through a [`LocalFallback`](portcullis::core::store::fallback::LocalFallback) (the
/// `local` failure modes, D4), money straight in Redis (billing is fail-closed, B5).
#[cfg(feature = "redis")]
pub type RedisSplit = Split<
    portcullis::core::store::fallback::LocalFallback<portcullis_redis::RedisStore>,
    portcullis_redis::RedisStore,
>;

/// A Redis store, opened, with what the gateway attaches to it.
#[cfg(feature = "redis")]
pub struct OpenedRedis {
    /// The store.
    pub store: RedisSplit,
    /// Shares provider cooldowns and disabled credentials with every instance (D1, F6).
    pub on_registry: crate::app::RegistryHook,
    /// Brings the count of `local` decisions into `/metrics`.
    pub on_scrape: crate::app::ScrapeHook,
    /// `Some(true)` for a Cluster, `Some(false)` for one node, `None` when Redis could
    /// not be reached at start (connected lazily).
    pub cluster: Option<bool>,
    /// The deadline of every store call.
    pub deadline: Duration,
}

/// The store a `[store]` section names, opened (see [`open`]).
pub enum OpenedStore {
    /// The in-memory store (`url = "memory"`).
    Memory(MemoryStore<SystemClock>),
    /// Redis, one node or a Cluster.
    #[cfg(feature = "redis")]
    Redis(OpenedRedis),
}

/// How [`OpenedStore::build`] builds the gateway.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// `false`: the bare forwarder ([`crate::Gateway::limits`]).
    pub limits: bool,
    /// Where `fake://` channels go ([`crate::Gateway::fake_upstream`]).
    pub fake_upstream: Option<String>,
    /// The records database's keys ([`crate::Gateway::directory`]).
    pub directory: Option<std::sync::Arc<crate::keys::Directory>>,
}

impl Default for BuildOptions {
    fn default() -> Self {
        Self {
            limits: true,
            fake_upstream: None,
            directory: None,
        }
    }
}

/// Opens the store `config` names: `memory`, or a `redis://` / `rediss://` URL (with
/// the `redis` feature). One node URL is asked whether it belongs to a Cluster; a
/// comma-separated list is a Cluster (D6). When Redis cannot be reached the gateway
/// still starts, lazily connected, and each layer applies its failure mode until it is
/// back (D4). An unknown URL, or a malformed Redis URL, is an error.
pub async fn open(config: &StoreSettings) -> Result<OpenedStore, OpenError> {
    match check(config)? {
        Kind::Memory => Ok(OpenedStore::Memory(MemoryStore::with_clock_and_capacity(
            SystemClock::new(),
            config.capacity,
        ))),
        #[cfg(feature = "redis")]
        Kind::Redis => open_redis(config.url.trim(), config)
            .await
            .map(OpenedStore::Redis),
    }
}

/// The kinds of store this build can open.
enum Kind {
    Memory,
    #[cfg(feature = "redis")]
    Redis,
}

/// Whether [`open`] knows the store `config` names, without connecting to it (what
/// `portcullis check` runs): `memory`, or a `redis://` / `rediss://` URL (every node of a
/// comma-separated list) when this build has the `redis` feature.
pub fn check_url(config: &StoreSettings) -> Result<(), OpenError> {
    check(config).map(drop)
}

fn check(config: &StoreSettings) -> Result<Kind, OpenError> {
    let url = config.url.trim();
    if url == "memory" {
        // Checked on the store's effective URL, so that `--store redis://…` (which
        // overrides `[store] url`) can serve a file that asks for acknowledgements.
        let defaults = StoreSettings::default();
        let needs_redis = [
            (
                "store.replica_acks",
                config.replica_acks != defaults.replica_acks,
            ),
            (
                "store.replica_ack_wait",
                config.replica_ack_wait != defaults.replica_ack_wait,
            ),
            (
                "store.unacknowledged",
                config.unacknowledged != defaults.unacknowledged,
            ),
        ];
        if let Some((setting, _)) = needs_redis.iter().find(|(_, set)| *set) {
            return Err(OpenError(format!(
                "{setting} needs a Redis store: set store.url (or --store) to a redis:// URL"
            )));
        }
        return Ok(Kind::Memory);
    }
    let redis = |u: &str| u.starts_with("redis://") || u.starts_with("rediss://");
    if redis(url) {
        if let Some(bad) = url.split(',').map(str::trim).find(|u| !redis(u)) {
            return Err(OpenError(format!(
                "store {url:?}: every node of a Cluster list is a redis:// URL, not {bad:?}"
            )));
        }
        #[cfg(feature = "redis")]
        return Ok(Kind::Redis);
        #[cfg(not(feature = "redis"))]
        return Err(OpenError(format!(
            "store {url:?}: this build has no Redis support (the `redis` feature of \
             portcullis-proxy)"
        )));
    }
    Err(OpenError(format!(
        "unknown store {url:?}: use `memory` or a redis:// URL"
    )))
}

/// The Redis store's options a `[store]` section sets: key prefix, deadline, quota
/// blocks (and billing blocks), replica acknowledgements (how many, how long they are
/// waited for, what a write without them does).
#[cfg(feature = "redis")]
pub fn redis_options(sc: &StoreSettings) -> portcullis_redis::RedisStoreOptions {
    let blocks = sc
        .blocks
        .then(|| portcullis::core::blocks::BlockSizing::default().with_money(sc.money_blocks_on()));
    portcullis_redis::RedisStoreOptions::default()
        .prefix(sc.prefix.clone())
        .deadline(sc.deadline)
        .blocks(blocks)
        .replica_acks(sc.replica_acks)
        .replica_ack_wait(sc.replica_ack_wait)
        .unacknowledged(match sc.unacknowledged {
            crate::config::UnacknowledgedConfig::Refuse => portcullis_redis::Unacknowledged::Refuse,
            crate::config::UnacknowledgedConfig::Accept => portcullis_redis::Unacknowledged::Accept,
        })
}

#[cfg(feature = "redis")]
async fn open_redis(url: &str, sc: &StoreSettings) -> Result<OpenedRedis, OpenError> {
    use crate::config::FailureModeConfig;
    use portcullis::core::store::fallback::LocalFallback;
    use portcullis_redis::{CooldownSync, RedisStore};

    let opts = redis_options(sc);
    let (limits, cluster) = match RedisStore::connect(url, opts.clone()).await {
        Ok(store) => {
            let cluster = store.is_cluster();
            let mode = if cluster {
                "Redis Cluster"
            } else {
                "single node"
            };
            tracing::info!(url = %url, mode, "connected to the Redis store");
            (store, Some(cluster))
        }
        Err(e) => {
            tracing::warn!(
                url = %url,
                error = %e,
                "Redis unreachable at start: connecting lazily (one URL is taken as a \
                 single node; list a Cluster's nodes comma-separated)"
            );
            let store = RedisStore::connect_lazy(url, opts)
                .map_err(|e| OpenError(format!("store {url:?}: {e}")))?;
            (store, None)
        }
    };
    // Provider cooldowns and disabled credentials reach every instance (D1, F6).
    let sync = Arc::new(
        CooldownSync::start_url(
            url,
            &sc.prefix,
            // The store's own instance id (one generator, portcullis_core::id): the
            // instance knows its own announcements by it.
            format!("gw-{}", limits.instance_id()),
        )
        .map_err(|e| OpenError(format!("store {url:?}: cooldown sync: {e}")))?,
    );
    let on_registry: crate::app::RegistryHook = Arc::new(move |r| sync.attach(r));
    let local_slots = sc.slots_failure == FailureModeConfig::Local;
    let local_windows = sc.windows_failure == FailureModeConfig::Local;
    let billing = limits.clone();
    let limits = LocalFallback::new(limits, sc.instances, local_slots, local_windows);
    // D4 `local` decisions are counted in the store; /metrics reports them with the
    // layers' fail-open / fail-closed counts.
    let counted = limits.clone();
    let on_scrape: crate::app::ScrapeHook = Arc::new(move || {
        metrics::counter!("portcullis_store_failures_total", "layer" => "store", "mode" => "local")
            .absolute(counted.local_decisions());
    });
    Ok(OpenedRedis {
        store: Split { limits, billing },
        on_registry,
        on_scrape,
        cluster,
        deadline: sc.deadline,
    })
}

impl OpenedStore {
    /// The books check ([`crate::books::check`]) of `config`'s records database against
    /// this store — from outside a gateway, so a Redis store only: an in-memory store
    /// lives in its gateway's process (check that one through `GET /admin/books`).
    pub async fn check_books(
        &self,
        records: &portcullis_records::Records,
        config: &Config,
    ) -> Result<crate::books::BooksReport, String> {
        match self {
            Self::Memory(_) => Err(
                "the store is in memory: its balances live in the gateway's \
                 process, so check a running gateway (portcullis books check --gateway URL, \
                 or GET /admin/books)"
                    .into(),
            ),
            #[cfg(feature = "redis")]
            Self::Redis(r) => crate::books::check(records, config, &r.store)
                .await
                .map_err(|e| e.to_string()),
        }
    }

    /// What it is, for a log line: `in-memory store` or `Redis store`.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::Memory(_) => "in-memory store",
            #[cfg(feature = "redis")]
            Self::Redis(_) => "Redis store",
        }
    }

    /// How long a store call left running after its request ended may take to land:
    /// nothing for the in-memory store (its calls finish in place), the store deadline
    /// for Redis. A graceful shutdown waits this long after the last connection closed,
    /// so releases and settlements sent on tasks reach the store.
    pub fn settle_grace(&self) -> Duration {
        match self {
            Self::Memory(_) => Duration::ZERO,
            #[cfg(feature = "redis")]
            Self::Redis(r) => r.deadline,
        }
    }

    /// Builds the gateway's router on this store ([`crate::Gateway::build`]: balances
    /// are seeded first), with the Redis store's cooldown sharing and metrics attached.
    pub async fn build(self, config: Config, options: BuildOptions) -> Result<Router, String> {
        fn with<St>(mut gateway: crate::Gateway<St>, options: BuildOptions) -> crate::Gateway<St>
        where
            St: portcullis::core::JointStore
                + portcullis::core::ChannelStore
                + BillingStore
                + CapacityStore,
        {
            gateway = gateway.limits(options.limits);
            if let Some(base) = options.fake_upstream {
                gateway = gateway.fake_upstream(base);
            }
            if let Some(d) = options.directory {
                gateway = gateway.directory(d);
            }
            gateway
        }
        match self {
            Self::Memory(store) => {
                with(crate::Gateway::new(config, store), options)
                    .build()
                    .await
            }
            #[cfg(feature = "redis")]
            Self::Redis(r) => {
                // Object homes in Redis: every instance finds the channel that created
                // a Responses API response or a video job (P6).
                let homes = Arc::new(r.store.billing.clone());
                with(crate::Gateway::new(config, r.store), options)
                    .homes(homes)
                    .on_registry(r.on_registry)
                    .on_scrape(r.on_scrape)
                    .build()
                    .await
            }
        }
    }
}

/// Limits in one store, money in another: every store trait, delegated. Lets a
/// deployment keep limits in Redis while billing stays in a store of its own.
#[derive(Clone)]
pub struct Split<L, B> {
    /// Slots and windows.
    pub limits: L,
    /// Balances, spend, budgets.
    pub billing: B,
}

impl<L: SlotStore, B: Clone + Send + Sync + 'static> SlotStore for Split<L, B> {
    type Future<T: Send + 'static> = L::Future<T>;
    fn acquire(&self, key: &SubjectKey, limit: u32, ttl: Millis) -> Self::Future<SlotDecision> {
        self.limits.acquire(key, limit, ttl)
    }
    fn renew(&self, key: &SubjectKey, lease: LeaseId, ttl: Millis) -> Self::Future<bool> {
        self.limits.renew(key, lease, ttl)
    }
    fn release(&self, key: &SubjectKey, lease: LeaseId) -> Self::Future<()> {
        self.limits.release(key, lease)
    }
    fn in_flight(&self, key: &SubjectKey) -> Self::Future<u32> {
        self.limits.in_flight(key)
    }
}

impl<L: portcullis::core::JointStore, B: Clone + Send + Sync + 'static> portcullis::core::JointStore
    for Split<L, B>
{
    const SAVES_ROUND_TRIPS: bool = L::SAVES_ROUND_TRIPS;

    fn acquire_and_admit(
        &self,
        slot: &portcullis::core::SlotAsk,
        window: Option<portcullis::core::WindowAsk<'_>>,
    ) -> <Self as WindowStore>::Future<portcullis::core::JointDecision> {
        self.limits.acquire_and_admit(slot, window)
    }
}

impl<L: portcullis::core::ChannelStore, B: Clone + Send + Sync + 'static>
    portcullis::core::ChannelStore for Split<L, B>
{
    const SAVES_ROUND_TRIPS: bool = <L as portcullis::core::ChannelStore>::SAVES_ROUND_TRIPS;

    fn admit_all_and_acquire(
        &self,
        items: &[portcullis::core::JointItem],
        channel: &str,
        capacity: u32,
        ttl: portcullis::core::Millis,
    ) -> <Self as WindowStore>::Future<(
        portcullis::core::JointAdmission,
        portcullis::core::CapacityTake,
    )> {
        self.limits
            .admit_all_and_acquire(items, channel, capacity, ttl)
    }
}

impl<L: WindowStore, B: Clone + Send + Sync + 'static> WindowStore for Split<L, B> {
    type Future<T: Send + 'static> = L::Future<T>;
    fn admit(
        &self,
        key: &SubjectKey,
        scope: Scope,
        policy: &Arc<Policy>,
        demand: &Demand,
    ) -> Self::Future<Admission> {
        self.limits.admit(key, scope, policy, demand)
    }
    fn settle(
        &self,
        key: &SubjectKey,
        scope: Scope,
        ticket: WindowTicket,
        outcome: Outcome,
    ) -> Self::Future<()> {
        self.limits.settle(key, scope, ticket, outcome)
    }
    fn view(
        &self,
        key: &SubjectKey,
        scope: Scope,
        policy: &Arc<Policy>,
    ) -> Self::Future<Vec<LimitView>> {
        self.limits.view(key, scope, policy)
    }
    fn admit_all(
        &self,
        items: &[portcullis::core::JointItem],
    ) -> Self::Future<portcullis::core::JointAdmission> {
        self.limits.admit_all(items)
    }
    fn settle_all(&self, items: Vec<portcullis::core::JointSettle>) -> Self::Future<()> {
        self.limits.settle_all(items)
    }
}

impl<L: Clone + Send + Sync + 'static, B: BillingStore> BillingStore for Split<L, B> {
    type Future<T: Send + 'static> = B::Future<T>;
    fn check_and_reserve(&self, req: &BillingRequest) -> Self::Future<BillingDecision> {
        self.billing.check_and_reserve(req)
    }
    fn settle_attempt(
        &self,
        attempt: &AttemptRef,
        outcome: BillingOutcome,
    ) -> Self::Future<Option<AttemptState>> {
        self.billing.settle_attempt(attempt, outcome)
    }
    fn account(
        &self,
        tenant: Option<&str>,
        key: &SubjectKey,
        budgets: &[Budget],
    ) -> Self::Future<AccountView> {
        self.billing.account(tenant, key, budgets)
    }
    fn seed_balance(&self, tenant: &str, amount: Money) -> Self::Future<bool> {
        self.billing.seed_balance(tenant, amount)
    }
    fn seed_key_spend(
        &self,
        books: &portcullis::core::Books,
        key: &SubjectKey,
        spent: Money,
    ) -> Self::Future<bool> {
        self.billing.seed_key_spend(books, key, spent)
    }
    fn set_balance(&self, tenant: &str, amount: Money) -> Self::Future<()> {
        self.billing.set_balance(tenant, amount)
    }
    fn credit(&self, tenant: &str, amount: Money) -> Self::Future<Money> {
        self.billing.credit(tenant, amount)
    }
    fn pending(&self) -> Self::Future<Vec<(AttemptRef, Money)>> {
        self.billing.pending()
    }
    fn reconciler(&self) -> Option<Arc<dyn portcullis::core::DynReconcile>> {
        self.billing.reconciler()
    }
}

impl<L: Clone + Send + Sync + 'static, B: portcullis::core::ReconcileStore>
    portcullis::core::ReconcileStore for Split<L, B>
{
    fn pending_page(
        &self,
        after: Option<&AttemptRef>,
        limit: usize,
    ) -> Self::Future<Vec<portcullis::core::PendingAttempt>> {
        self.billing.pending_page(after, limit)
    }
    fn reconcile(
        &self,
        attempt: &AttemptRef,
        how: portcullis::core::Reconcile,
    ) -> Self::Future<portcullis::core::Reconciled> {
        self.billing.reconcile(attempt, how)
    }
    fn pending_totals(
        &self,
    ) -> Self::Future<Vec<(portcullis::core::Books, portcullis::core::PendingTotal)>> {
        self.billing.pending_totals()
    }
    fn correct(
        &self,
        correction: &portcullis::core::Correction,
    ) -> Self::Future<portcullis::core::Corrected> {
        self.billing.correct(correction)
    }
}

impl<L: CapacityStore, B: Clone + Send + Sync + 'static> CapacityStore for Split<L, B> {
    type Future<T: Send + 'static> = L::Future<T>;
    fn try_acquire(
        &self,
        channel: &str,
        capacity: u32,
        ttl: Millis,
    ) -> Self::Future<Option<LeaseId>> {
        self.limits.try_acquire(channel, capacity, ttl)
    }
    fn renew(&self, channel: &str, lease: LeaseId, ttl: Millis) -> Self::Future<bool> {
        CapacityStore::renew(&self.limits, channel, lease, ttl)
    }
    fn release(&self, channel: &str, lease: LeaseId) -> Self::Future<()> {
        CapacityStore::release(&self.limits, channel, lease)
    }
    fn in_flight(&self, channel: &str) -> Self::Future<u32> {
        CapacityStore::in_flight(&self.limits, channel)
    }
}
