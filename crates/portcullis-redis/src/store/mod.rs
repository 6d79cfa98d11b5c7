//! [`RedisStore`]: the store traits of portcullis-core on Redis.
//!
//! The store is a thin front ([`traits`]) over one operations type per concern, each
//! holding the [`Client`] (the connection, deadlines, breaker, scripts, batching and
//! give-back retries, and the key schema — nothing of slots, windows or money):
//! [`slots`] (slot and capacity leases), [`windows`], [`joint`] (the slot with its
//! windows, a channel's windows with a capacity lease), [`billing`] and [`homes`].
//! The quota blocks this instance borrowed are owned by the block book ([`book`]);
//! the two joint decisions ask it first, and the leases, tickets and money it handed
//! out are settled through it. Beneath the book, [`shared`] holds the calls decided in
//! Redis alone (billing's reservations and settlements, a window's settlement) that
//! both the book and the operations above it send; the book imports none of the
//! operations it serves.

mod billing;
mod book;
#[cfg(test)]
mod handed_early_tests;
mod homes;
mod joint;
#[cfg(test)]
mod sent_twice_tests;
mod shared;
/// The helpers of the crate's tests (`tests/common`), for the unit tests here.
#[cfg(test)]
#[path = "../../tests/common/mod.rs"]
#[allow(unreachable_pub)]
mod test_common;
pub use shared::MAX_EXACT_MONEY;
mod slots;
mod traits;
mod windows;

use crate::client::Client;
use crate::options::RedisStoreOptions;
use billing::BillingOps;
use book::BlockBook;
use homes::HomeOps;
use joint::JointOps;
use portcullis_core::blocks::BlockSizing;
use portcullis_core::{Scope, StoreResult, SubjectKey};
use shared::SharedBilling;
use slots::{CapacityOps, SlotOps};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use windows::WindowOps;

pub use crate::client::GiveBacks;
pub use crate::future::RedisStoreFuture;

/// The store's parts: the client, and one operations type per concern, each holding
/// the client (and, where quota blocks matter, the block book).
struct Inner {
    client: Client,
    slots: SlotOps,
    capacity: CapacityOps,
    windows: WindowOps,
    joint: JointOps,
    billing: BillingOps,
    homes: HomeOps,
}

/// Slot leases, anchored windows and billing in Redis, shared by every gateway instance
/// that uses the same server (D1–D5). Cheap to clone.
///
/// Every decision is one round trip: one Lua script called by SHA (`EVALSHA`), reloaded
/// transparently after `NOSCRIPT`, reading the time from the server (`TIME`).
/// Settlements and releases are queued and sent together as one batch script (see the
/// `batch` module): at a slot release at once, otherwise at the store's next call or
/// within a millisecond. Every call fails with a [`StoreError`](portcullis_core::StoreError) —
/// [`Timeout`](portcullis_core::StoreErrorKind::Timeout) or
/// [`Unavailable`](portcullis_core::StoreErrorKind::Unavailable)
/// — once the server (on a Cluster, the node the call went to) has been silent for the
/// deadline, instead of waiting on a dead or stalled server; the connection is
/// re-established in the background.
///
/// Keys, hash-tagged per subject so each script touches one Cluster slot:
///
/// | key | type | holds | expires |
/// |---|---|---|---|
/// | `<prefix>:{<subject>}:slots` | ZSET | one member `<instance-id>:<lease>` per slot, score = expiry (ms) | 1 s after its longest lease |
/// | `<prefix>:{<subject>}:win:<scope>` | string (little-endian doubles) | window state of the `key` or `sub` (subscription) policy: anchors, per-tier window index and count, spend, reservations, pending count | see below |
/// | `<prefix>:{<subject>}:win:<scope>:roll` | ZSET | rolling-window starts (W10), score = start time | at least 65 s after the last start (renewed to 120 s about once a minute) |
///
/// Window state is deleted as soon as it is idle (dropping it changes no decision) and
/// otherwise expires 5 s after the longest window it counts in (at least 5 s after its
/// last rolling start leaves the 60 s window); while any money is spent or reserved
/// under an amount cap it lives [`amount_ttl`](RedisStoreOptions::amount_ttl) after its
/// last change instead.
///
/// The subject key appears in Redis key names as given: have the extractor use a key
/// id rather than a secret.
///
/// # Billing
///
/// [`BillingStore`](portcullis_core::BillingStore) makes the decisions of
/// [`Ledger`](portcullis_core::Ledger), rule for rule (B1–B7): each call — reserve,
/// settle, account, seed, credit — is one Lua script by SHA, on the server's `TIME`
/// (budget periods, attempt deadlines); setting a balance is one `HSET`.
///
/// **One hash tag per tenant's books (D3).** One decision reads and writes the tenant's
/// balance, the key's spend, every budget of the request and the attempt. They are the
/// tenant's *books* ([`Books`](portcullis_core::Books)) and all carry the tenant's tag,
/// `{tenant:<tenant>}`, so every script touches one Cluster slot and tenants spread over
/// the nodes; a request with no tenant keeps its books under its key's own tag
/// (`{<subject>}`, the slot of its slots and windows). Settling names the attempt with
/// its books ([`AttemptRef`](portcullis_core::AttemptRef)), which the billing layer has
/// from the request, so a settlement is one round trip too. A budget is kept in the
/// books of the request that draws on it: a budget id named by requests of two tenants
/// is two budgets, one per tenant, in both stores (give budgets ids unique across
/// tenants, as the proxy does). The settlement script finds the tenant, key and budget
/// keys in the attempt's record; they share the declared key's tag, hence its slot.
///
/// | key | type | holds | expires |
/// |---|---|---|---|
/// | `<prefix>:{tenant:<t>}:billing:tenant` | HASH | `bal` balance, `pend` pending reconciliation, `blk` money of open billing blocks | never |
/// | `<books>key:<subject>` | HASH | `spent` key spend, `pend` pending, `blk` money of open billing blocks | never |
/// | `<books>budget:<id>` | HASH | `start` period anchor, `spent` in the period, `res` reserved | [`amount_ttl`](RedisStoreOptions::amount_ttl) after its last change |
/// | `<books>attempt:<id>` | HASH | state, money upper bound, deadline, the keys it charges, its subject key (`k`), when it went pending (`ps`) | open: two lifetimes after its reservation; pending: never; settled or refunded: deleted |
/// | `<books>open` | ZSET | open attempt id → deadline | with its newest attempt |
/// | `<books>done` | ZSET | attempt id → when it was settled or refunded: tombstones that let a retried settlement tell "already final" from "lost" (D10) | two minutes after the newest; older members are dropped as new ones come |
/// | `<books>pending` | HASH | attempt id → amount pending reconciliation; two reserved fields `"\0n"` / `"\0m"` hold the books' pending counter (attempts, amount), which `/metrics` reads instead of the list | never (gone with the last pending attempt) |
/// | `<prefix>:{billing}:pending-books` | SET | books that have had pending attempts | never (one member per books) |
/// | `<books>corrected:<id>` | STRING | until when a closed attempt's charge counts as corrected (B7, `billing_correct.lua`): a second correction changes nothing | the correction's keep (the proxy: `[billing] correct_within` + 1 h) |
///
/// `<books>` is `<prefix>:{tenant:<t>}:billing:` for a tenant and
/// `<prefix>:{<subject>}:keybilling:` for a key with no tenant.
///
/// **Bounded memory (D7, B7).** A settled or refunded attempt is deleted: settling it
/// again finds no attempt and does nothing, which is the idempotent answer (the
/// reservation it would release is gone with it). Its id stays two minutes in the
/// books' tombstones, so a settlement retried after a call whose answer never came
/// learns that it landed; a retry that finds neither the attempt nor its tombstone —
/// the attempt was lost, say with writes a failover did not replicate — records an
/// unknown outcome: pending reconciliation of its cost, listed, never "settled" (D10). An open attempt carries a deadline,
/// its request's longest life ([`BillingRequest::lifetime_ms`](portcullis_core::BillingRequest));
/// a reservation in the same books first sweeps up to
/// [`SWEEP_BATCH`](portcullis_core::billing::SWEEP_BATCH) open attempts past their deadline
/// (their instance died) into pending reconciliation and releases their budget
/// reservations — inside the same script, no extra round trip. The record is kept for
/// a second lifetime so the sweep finds it; books that see no reservation in that time
/// lose the record (the budget reservation then lapses with the budget's expiry). A
/// pending attempt stays until it is reconciled: what the store keeps is proportional
/// to tenants, keys and attempts in flight or pending, not to requests served.
///
/// **Listing pending work.** [`pending`](portcullis_core::BillingStore::pending) reads the
/// registry `<prefix>:{billing}:pending-books` (the tag is
/// [`billing_tag`](RedisStoreOptions::billing_tag)) and then each listed books' pending
/// hash — no `KEYS` or `SCAN`. The registry is the only cross-tenant key and is written
/// only on the rare path: before an attempt is settled as pending (its own `SADD`, then
/// the settlement) and after a sweep moved attempts to pending.
///
/// **Missing records (B7).** A request that expects its tenant's record
/// ([`tenant_expected`](portcullis_core::BillingRequest)) and finds no tenant hash (a
/// Redis restarted without its data) is refused as
/// [`Refusal::RecordMissing`](portcullis_core::Refusal) — the billing layer answers 503,
/// never 402 — and nothing re-seeds it silently: an operator sets the balance
/// ([`set_balance`](portcullis_core::BillingStore::set_balance)). Billing needs a
/// persistent Redis (AOF, `appendonly yes`, `appendfsync everysec`).
///
/// **Numbers.** Money is stored as decimal integer strings (readable, `HINCRBY`-able)
/// and computed on Lua numbers, which are doubles: exact up to 2^53 − 1
/// ([`MAX_EXACT_MONEY`](crate::MAX_EXACT_MONEY)). Amounts beyond that are refused with a
/// [`StoreError`](portcullis_core::StoreError) and a script whose result would leave the range changes nothing and
/// fails, so money is never rounded; the billing layer fails closed instead (B5).
///
/// A billing call that times out may still have been carried out: settlement is
/// idempotent per attempt, so repeating it is safe; a repeated reservation of an
/// attempt still open or pending reserves nothing twice.
///
/// Must be created and used inside a Tokio runtime.
///
/// ```no_run
/// use portcullis_core::{SlotDecision, SlotStore, SubjectKey};
/// use portcullis_redis::{RedisStore, RedisStoreOptions};
/// # async fn run() -> Result<(), portcullis_core::StoreError> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379", RedisStoreOptions::default()).await?;
/// let key = SubjectKey::from("api-key-1");
/// if let SlotDecision::Acquired(lease) = store.acquire(&key, 3, 600_000).await? {
///     store.release(&key, lease).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.client().keys().prefix())
            .field("instance", &self.client().instance_id())
            .field("deadline", &self.client().deadline())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to `url`, loads the scripts and returns the store. Fails if Redis cannot
    /// be reached within the options' connect timeout; use
    /// [`connect_lazy`](Self::connect_lazy) to start while Redis is down.
    ///
    /// `url` is one node (`redis://host:port/db`, `rediss://…` for TLS) or a
    /// comma-separated list of the nodes of a Redis Cluster (D6). One node that belongs
    /// to a Cluster (`INFO cluster` says `cluster_enabled:1`) is used as the Cluster's
    /// seed: the store learns the other nodes from it.
    pub async fn connect(url: &str, options: RedisStoreOptions) -> StoreResult<Self> {
        let blocks = options.blocks;
        Ok(Self::on(Client::connect(url, options).await?, blocks))
    }

    /// A store that connects on first use and reconnects by itself; no I/O here. Calls
    /// fail with [`StoreError`](portcullis_core::StoreError) until Redis answers. Must
    /// be called inside a Tokio runtime.
    ///
    /// A comma-separated list of URLs is a Redis Cluster; one URL is a single node here
    /// (telling a Cluster node apart needs I/O: use [`connect`](Self::connect), or
    /// [`cluster_lazy`](Self::cluster_lazy) with that one URL).
    pub fn connect_lazy(url: &str, options: RedisStoreOptions) -> StoreResult<Self> {
        let blocks = options.blocks;
        Ok(Self::on(Client::connect_lazy(url, options)?, blocks))
    }

    /// A store on the Redis Cluster that `nodes` belong to (any reachable one is enough
    /// to find the rest), connecting in the background; no I/O here. `MOVED` / `ASK`
    /// redirections and topology changes (a failover, a resharded slot) are followed by
    /// the client; a call in flight during one fails at its deadline at worst. Must be
    /// called inside a Tokio runtime.
    pub fn cluster_lazy(nodes: &[String], options: RedisStoreOptions) -> StoreResult<Self> {
        let blocks = options.blocks;
        Ok(Self::on(Client::cluster_lazy(nodes, options)?, blocks))
    }

    /// [`connect_lazy`](Self::connect_lazy) with a single-node client configured by the
    /// caller (TLS, credentials, RESP version). Must be called inside a Tokio runtime.
    pub fn from_client(client: redis::Client, options: RedisStoreOptions) -> StoreResult<Self> {
        let blocks = options.blocks;
        Ok(Self::on(Client::from_client(client, options)?, blocks))
    }

    fn on(client: Client, blocks: Option<BlockSizing>) -> Self {
        let shared = SharedBilling::new(client.clone());
        let book =
            blocks.map(|sizing| Arc::new(BlockBook::new(client.clone(), sizing, shared.clone())));
        let slots = SlotOps::new(client.clone(), book.clone());
        let capacity = CapacityOps::new(slots.clone());
        let windows = WindowOps::new(client.clone(), book.clone());
        let joint = JointOps::new(
            client.clone(),
            book.clone(),
            slots.clone(),
            windows.clone(),
            capacity.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                billing: BillingOps::new(shared, book),
                homes: HomeOps::new(client.clone()),
                client,
                slots,
                capacity,
                windows,
                joint,
            }),
        }
    }

    fn client(&self) -> &Client {
        &self.inner.client
    }

    /// Tests: slot leases and window requests of `key` this instance borrowed in
    /// blocks and holds unused (none once its blocks retired).
    #[cfg(test)]
    fn unused_borrowed(&self, key: &SubjectKey) -> (u32, u64) {
        let book = self.inner.windows.book().expect("a store with blocks");
        let slots = book.unused_slots(&self.slots_key(key));
        let (requests, _) = book.unused_window(&self.window_key(key, Scope::Key));
        (slots, requests)
    }

    /// True when the store talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.client().is_cluster()
    }

    /// Loads every script into the server's script cache (`SCRIPT LOAD`; on a Cluster,
    /// on every master), bounded by the connect timeout. [`connect`](Self::connect)
    /// does it; a call that finds its script missing (after a restart, `SCRIPT FLUSH`
    /// or a failover to a replica that never saw it) sends its text with it once.
    pub async fn load_scripts(&self) -> StoreResult<()> {
        self.client().load_scripts().await
    }

    /// The id of this instance in lease members.
    pub fn instance_id(&self) -> &str {
        self.client().instance_id()
    }

    /// The per-call deadline.
    pub fn deadline(&self) -> Duration {
        self.client().deadline()
    }

    /// Give-backs (releases, settlements, refunds) that failed once: how many wait to
    /// be sent again, how many landed since, how many expired unsent.
    pub fn give_backs(&self) -> GiveBacks {
        self.client().give_backs()
    }

    /// Writes the replicas did not acknowledge (D10, with
    /// [`replica_acks`](crate::RedisStoreOptions::replica_acks)): taken anyway, and
    /// admissions refused for the lack of it, since the store started.
    pub fn unacknowledged(&self) -> crate::Unacked {
        self.client().unacknowledged()
    }

    /// The key of `key`'s slot leases: `<prefix>:{<subject>}:slots`.
    pub fn slots_key(&self, key: &SubjectKey) -> String {
        self.client().keys().slots(key)
    }

    /// The key of `key`'s window state under `scope`: `<prefix>:{<subject>}:win:<scope>`
    /// (`key` or `sub`).
    pub fn window_key(&self, key: &SubjectKey, scope: Scope) -> String {
        self.client().keys().window(key, scope)
    }

    /// The key of the rolling log (W10) of `key` under `scope`:
    /// `<prefix>:{<subject>}:win:<scope>:roll`.
    pub fn rolling_key(&self, key: &SubjectKey, scope: Scope) -> String {
        let mut k = self.window_key(key, scope);
        k.push_str(":roll");
        k
    }

    /// The start of every key of `books` (D3): `<prefix>:{tenant:<tenant>}:billing:` for a
    /// tenant's books, `<prefix>:{<subject>}:keybilling:` for a key with no tenant (its
    /// slot is its own slots' and windows').
    pub fn books_base(&self, books: &portcullis_core::Books) -> String {
        self.client().keys().books(books)
    }

    /// The key of a tenant's balance: `<tenant base>tenant` (HASH: `bal`, `pend`).
    pub fn tenant_key(&self, tenant: &str) -> String {
        self.client().keys().tenant(tenant)
    }

    /// The key of an API key's spend in `books`: `<books base>key:<subject>` (HASH:
    /// `spent`, `pend`).
    pub fn spend_key(&self, books: &portcullis_core::Books, key: &SubjectKey) -> String {
        self.client().keys().spend(books, key)
    }

    /// The key of a money budget in `books`: `<books base>budget:<id>` (HASH: `start`,
    /// `spent`, `res`).
    pub fn budget_key(&self, books: &portcullis_core::Books, id: &str) -> String {
        self.client().keys().budget(books, id)
    }

    /// The key of an attempt's record: `<books base>attempt:<id>`.
    pub fn attempt_key(&self, attempt: &portcullis_core::AttemptRef) -> String {
        self.client().keys().attempt(attempt)
    }

    /// The key of a books' open attempts by deadline: `<books base>open` (ZSET).
    pub fn open_key(&self, books: &portcullis_core::Books) -> String {
        self.client().keys().open(books)
    }

    /// The key of a books' attempts pending reconciliation: `<books base>pending` (HASH:
    /// attempt id → amount).
    pub fn pending_key(&self, books: &portcullis_core::Books) -> String {
        self.client().keys().pending(books)
    }

    /// The key of the registry of books that have had attempts pending reconciliation:
    /// `<prefix>:{<billing tag>}:pending-books` (SET of `t:<tenant>` / `k:<key>`). The one
    /// billing key shared by every tenant, written only when an attempt becomes pending;
    /// it holds one member per such books (bounded by tenants and keys, like balances).
    pub fn pending_registry_key(&self) -> String {
        self.client().keys().pending_registry()
    }

    /// The key of object `id`'s home.
    pub fn home_key(&self, id: &str) -> String {
        self.inner.homes.home_key(id)
    }
}
