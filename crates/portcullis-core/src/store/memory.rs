//! The in-memory store: the embedded default.
//!
//! State is split over a fixed number of shards, each a `HashMap` behind its own
//! `Mutex`, so a decision holds one uncontended lock for well under a microsecond.
//! Every entry knows whether it is idle — dropping it would change no decision (W2) —
//! and the map is bounded: a shard that reaches its share of the capacity first drops
//! its idle entries, and if that is not enough, the least recently touched eighth of
//! the shard (counted in [`MemoryStore::stats`], since that forgets live usage). A
//! flood of distinct keys therefore cannot grow memory without bound.
//!
//! Hand-written because no maintained crate offers a bounded concurrent map that
//! evicts by a caller-defined "idle" test first and mutates entries in place under
//! the same lock as the decision.

use super::{
    Admission, BillingStore, MAX_PENDING_PAGE, ReconcileStore, SlotDecision, SlotStore,
    StoreResult, WindowStore,
};
use crate::billing::{
    AccountView, AttemptRef, AttemptState, BillingDecision, BillingOutcome, BillingRequest, Books,
    Budget, Ledger, PendingAttempt, PendingTotal, Reconcile, Reconciled,
};
use crate::clock::{Clock, Millis, SystemClock};
use crate::demand::Demand;
use crate::money::Money;
use crate::policy::Policy;
use crate::slots::{LeaseId, LeaseSet};
use crate::subject::{Scope, SubjectKey};
use crate::window::{LimitView, Outcome, ScopeState, WindowTicket};
use std::collections::HashMap;
use std::future::{Ready, ready};
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Number of shards (power of two).
const SHARDS: usize = 64;

/// State that can tell whether forgetting it changes any decision.
pub(crate) trait Idle: Default {
    /// True when the entry may be dropped at `now` without changing a decision.
    fn is_idle(&self, now: Millis) -> bool;
}

impl Idle for LeaseSet {
    fn is_idle(&self, now: Millis) -> bool {
        LeaseSet::is_idle(self, now)
    }
}

/// Window state of one subject: one [`ScopeState`] per policy scope.
#[derive(Debug, Default)]
pub(crate) struct SubjectWindows {
    scopes: [Option<Box<ScopeState>>; 2],
}

impl SubjectWindows {
    fn scope_mut(&mut self, s: Scope) -> &mut ScopeState {
        self.scopes[s as usize].get_or_insert_with(Default::default)
    }
    fn scope(&self, s: Scope) -> Option<&ScopeState> {
        self.scopes[s as usize].as_deref()
    }
}

impl Idle for SubjectWindows {
    fn is_idle(&self, now: Millis) -> bool {
        self.scopes.iter().flatten().all(|s| s.is_idle(now))
    }
}

struct Entry<V> {
    value: V,
    touched: Millis,
}

type Shard<V> = HashMap<SubjectKey, Entry<V>, foldhash::fast::RandomState>;

/// A bounded, sharded map from subject key to state.
pub(crate) struct ShardedMap<V> {
    shards: Box<[Mutex<Shard<V>>]>,
    hasher: foldhash::fast::RandomState,
    cap_per_shard: usize,
    evicted_live: AtomicU64,
}

impl<V: Idle> ShardedMap<V> {
    /// A map holding at most about `capacity` entries.
    pub(crate) fn new(capacity: usize) -> Self {
        let shards = (0..SHARDS)
            .map(|_| Mutex::new(HashMap::with_hasher(Default::default())))
            .collect();
        Self {
            shards,
            hasher: Default::default(),
            cap_per_shard: capacity.div_ceil(SHARDS).max(8),
            evicted_live: AtomicU64::new(0),
        }
    }

    fn shard(
        &self,
        key: &str,
    ) -> &Mutex<HashMap<SubjectKey, Entry<V>, foldhash::fast::RandomState>> {
        let mut h = self.hasher.build_hasher();
        key.hash(&mut h);
        let i = (std::hash::Hasher::finish(&h) >> 58) as usize & (SHARDS - 1);
        &self.shards[i]
    }

    /// Runs `f` on the entry of `key` (created empty if absent). An entry left idle by
    /// `f` is removed at once, so rejected requests of unknown keys leave nothing.
    pub(crate) fn with<R>(&self, key: &SubjectKey, now: Millis, f: impl FnOnce(&mut V) -> R) -> R {
        let mut shard = self
            .shard(key.as_str())
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(e) = shard.get_mut(key.as_str()) {
            e.touched = now;
            let r = f(&mut e.value);
            if e.value.is_idle(now) {
                shard.remove(key.as_str());
            }
            return r;
        }
        let mut value = V::default();
        let r = f(&mut value);
        if !value.is_idle(now) {
            if shard.len() >= self.cap_per_shard {
                self.make_room(&mut shard, now);
            }
            shard.insert(
                key.clone(),
                Entry {
                    value,
                    touched: now,
                },
            );
        }
        r
    }

    /// Runs `f` on the entry of `key` if it exists.
    pub(crate) fn read<R>(&self, key: &str, f: impl FnOnce(&V) -> R) -> Option<R> {
        let shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        shard.get(key).map(|e| f(&e.value))
    }

    fn make_room(&self, shard: &mut Shard<V>, now: Millis) {
        shard.retain(|_, e| !e.value.is_idle(now));
        if shard.len() < self.cap_per_shard {
            return;
        }
        // Still full of live state: forget the least recently touched eighth.
        let mut touches: Vec<Millis> = shard.values().map(|e| e.touched).collect();
        let n = (touches.len() / 8).max(1);
        let (_, cut, _) = touches.select_nth_unstable(n - 1);
        let cut = *cut;
        let before = shard.len();
        let mut budget = n;
        shard.retain(|_, e| {
            if budget > 0 && e.touched <= cut {
                budget -= 1;
                false
            } else {
                true
            }
        });
        self.evicted_live
            .fetch_add((before - shard.len()) as u64, Ordering::Relaxed);
    }

    /// Entries held now.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    /// Drops every idle entry (a periodic sweep keeps memory low between floods).
    pub(crate) fn sweep(&self, now: Millis) {
        for s in self.shards.iter() {
            s.lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|_, e| !e.value.is_idle(now));
        }
    }
}

/// Counters of the in-memory store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Subjects with slot state.
    pub slot_entries: usize,
    /// Subjects with window state.
    pub window_entries: usize,
    /// Live entries dropped because the store was full.
    pub evicted_live: u64,
}

/// Most capacity channel keys [`MemoryStore`] caches.
const CHANNEL_KEYS: usize = 4096;

struct Inner<C> {
    clock: C,
    slots: ShardedMap<LeaseSet>,
    windows: ShardedMap<SubjectWindows>,
    next_lease: crate::id::Sequence,
    /// Lease-map keys of capacity channels, built once per channel name.
    channel_keys: std::sync::RwLock<HashMap<Box<str>, SubjectKey, foldhash::fast::RandomState>>,
    // One lock for the books: money decisions are rarer than limit decisions and
    // must see balances, spend and budgets together.
    ledger: Mutex<Ledger>,
}

/// The in-memory store: implements every store trait of this crate.
///
/// ```
/// use portcullis_core::{ManualClock, MemoryStore, SlotDecision, SlotStore, SubjectKey};
/// # futures_lite_block_on::run(async {
/// let store = MemoryStore::with_clock(ManualClock::new(0));
/// let key = SubjectKey::from("k");
/// let d = store.acquire(&key, 1, 600_000).await.unwrap();
/// assert!(matches!(d, SlotDecision::Acquired(_)));
/// assert!(matches!(store.acquire(&key, 1, 600_000).await.unwrap(), SlotDecision::Full { .. }));
/// # });
/// # mod futures_lite_block_on {
/// #     pub fn run<F: std::future::Future>(f: F) -> F::Output {
/// #         let mut f = std::pin::pin!(f);
/// #         let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
/// #         match f.as_mut().poll(&mut cx) { std::task::Poll::Ready(v) => v, _ => unreachable!() }
/// #     }
/// # }
/// ```
pub struct MemoryStore<C = SystemClock> {
    inner: Arc<Inner<C>>,
}

impl<C> Clone for MemoryStore<C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

/// Default bound on entries per map.
pub const DEFAULT_CAPACITY: usize = 1_000_000;

impl MemoryStore<SystemClock> {
    /// A store on the system clock with the default capacity.
    pub fn new() -> Self {
        Self::with_clock(SystemClock::new())
    }
}

impl Default for MemoryStore<SystemClock> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Clock> MemoryStore<C> {
    /// A store on `clock` with the default capacity.
    pub fn with_clock(clock: C) -> Self {
        Self::with_clock_and_capacity(clock, DEFAULT_CAPACITY)
    }

    /// A store on `clock` holding about `capacity` subjects per kind of state.
    pub fn with_clock_and_capacity(clock: C, capacity: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                clock,
                slots: ShardedMap::new(capacity),
                windows: ShardedMap::new(capacity),
                next_lease: crate::id::Sequence::starting_at(1),
                channel_keys: Default::default(),
                ledger: Mutex::default(),
            }),
        }
    }

    /// The store's clock.
    pub fn clock(&self) -> &C {
        &self.inner.clock
    }

    /// Sizes and eviction counts.
    pub fn stats(&self) -> MemoryStats {
        MemoryStats {
            slot_entries: self.inner.slots.len(),
            window_entries: self.inner.windows.len(),
            evicted_live: self.inner.slots.evicted_live.load(Ordering::Relaxed)
                + self.inner.windows.evicted_live.load(Ordering::Relaxed),
        }
    }

    /// Drops every idle entry now.
    pub fn sweep(&self) {
        let now = self.inner.clock.now();
        self.inner.slots.sweep(now);
        self.inner.windows.sweep(now);
    }

    // Synchronous forms, used by the trait impls and by callers that want no future.

    /// The key capacity channel `channel`'s leases live under in the lease map (the
    /// NUL bytes keep it apart from every subject key a header could carry), from a
    /// cache: building it is two allocations, and every request takes and gives back
    /// one channel lease. At most [`CHANNEL_KEYS`] names are kept (channels come from
    /// configuration).
    pub(crate) fn channel_key(&self, channel: &str) -> SubjectKey {
        let keys = &self.inner.channel_keys;
        if let Some(k) = keys.read().unwrap_or_else(|e| e.into_inner()).get(channel) {
            return k.clone();
        }
        let key = SubjectKey::from(format!("\0capacity\0{channel}"));
        let mut keys = keys.write().unwrap_or_else(|e| e.into_inner());
        if keys.len() < CHANNEL_KEYS {
            keys.insert(channel.into(), key.clone());
        }
        key
    }

    /// [`SlotStore::acquire`] without a future.
    pub(crate) fn acquire_now(&self, key: &SubjectKey, limit: u32, ttl: Millis) -> SlotDecision {
        let now = self.inner.clock.now();
        let id = self.inner.next_lease.next();
        self.inner
            .slots
            .with(key, now, |set| match set.try_acquire(id, limit, ttl, now) {
                Ok(()) => SlotDecision::Acquired(id),
                Err(full) => SlotDecision::Full {
                    in_flight: full.in_flight,
                },
            })
    }

    /// [`SlotStore::renew`] without a future.
    pub(crate) fn renew_now(&self, key: &SubjectKey, lease: LeaseId, ttl: Millis) -> bool {
        let now = self.inner.clock.now();
        self.inner
            .slots
            .with(key, now, |s| s.renew(lease, ttl, now))
    }

    /// [`SlotStore::release`] without a future.
    // Hidden, not crate-private: `portcullis`'s benches (benches/layers.rs) release
    // through it outside a runtime.
    #[doc(hidden)]
    pub fn release_now(&self, key: &SubjectKey, lease: LeaseId) {
        let now = self.inner.clock.now();
        self.inner.slots.with(key, now, |s| {
            s.release(lease);
        });
    }

    /// [`SlotStore::in_flight`] without a future.
    pub fn in_flight_now(&self, key: &SubjectKey) -> u32 {
        let now = self.inner.clock.now();
        self.inner
            .slots
            .read(key.as_str(), |s| s.in_flight(now))
            .unwrap_or(0)
    }

    /// [`WindowStore::admit`] without a future.
    pub(crate) fn admit_now(
        &self,
        key: &SubjectKey,
        scope: Scope,
        policy: &Policy,
        demand: &Demand,
    ) -> Admission {
        let now = self.inner.clock.now();
        self.inner.windows.with(key, now, |w| {
            match w.scope_mut(scope).admit(policy, demand, now) {
                Ok(t) => Admission::Admitted(t),
                Err(e) => Admission::Exceeded(e),
            }
        })
    }

    /// [`WindowStore::admit_all`], at once: each item in order; at the first refusal
    /// the items admitted before it are refunded, so nothing stays counted.
    pub(crate) fn admit_all_now(&self, items: &[super::JointItem]) -> super::JointAdmission {
        let mut tickets = Vec::with_capacity(items.len());
        for (index, it) in items.iter().enumerate() {
            match self.admit_now(&it.key, it.scope, &it.policy, &it.demand) {
                Admission::Admitted(t) => tickets.push(t),
                Admission::Exceeded(exceeded) => {
                    for (t, it) in tickets.iter().zip(items) {
                        self.settle_now(&it.key, it.scope, t, Outcome::Refund);
                    }
                    return super::JointAdmission::Exceeded { index, exceeded };
                }
            }
        }
        super::JointAdmission::Admitted(tickets)
    }

    /// [`JointStore::acquire_and_admit`] without a future: the slot is taken, then the
    /// windows asked; a refusal gives the slot back.
    ///
    /// [`JointStore::acquire_and_admit`]: super::JointStore::acquire_and_admit
    pub(crate) fn acquire_and_admit_now(
        &self,
        slot: &super::SlotAsk,
        window: Option<super::WindowAsk<'_>>,
    ) -> super::JointDecision {
        let lease = match self.acquire_now(&slot.key, slot.limit, slot.ttl) {
            SlotDecision::Acquired(lease) => lease,
            SlotDecision::Full { in_flight } => {
                return super::JointDecision::SlotFull { in_flight };
            }
        };
        let Some(w) = window else {
            return super::JointDecision::Admitted {
                lease,
                ticket: None,
            };
        };
        match self.admit_now(&slot.key, w.scope, w.policy, w.demand) {
            Admission::Admitted(t) => super::JointDecision::Admitted {
                lease,
                ticket: Some(t),
            },
            Admission::Exceeded(e) => {
                self.release_now(&slot.key, lease);
                super::JointDecision::Exceeded(e)
            }
        }
    }

    /// [`WindowStore::settle`] without a future.
    // Hidden, not crate-private: `portcullis`'s benches (benches/layers.rs) settle
    // through it outside a runtime.
    #[doc(hidden)]
    pub fn settle_now(
        &self,
        key: &SubjectKey,
        scope: Scope,
        ticket: &WindowTicket,
        outcome: Outcome,
    ) {
        let now = self.inner.clock.now();
        self.inner.windows.with(key, now, |w| {
            w.scope_mut(scope).settle(ticket, outcome, now)
        });
    }

    /// [`WindowStore::view`] without a future.
    pub fn view_now(&self, key: &SubjectKey, scope: Scope, policy: &Policy) -> Vec<LimitView> {
        let now = self.inner.clock.now();
        self.inner
            .windows
            .read(key.as_str(), |w| {
                w.scope(scope).map(|s| s.view(policy, now))
            })
            .flatten()
            .unwrap_or_else(|| ScopeState::default().view(policy, now))
    }
}

impl<C: Clock> MemoryStore<C> {
    /// Runs `f` on the books.
    pub fn with_ledger<R>(&self, f: impl FnOnce(&mut Ledger, Millis) -> R) -> R {
        let now = self.inner.clock.now();
        f(
            &mut self.inner.ledger.lock().unwrap_or_else(|e| e.into_inner()),
            now,
        )
    }
}

impl<C: Clock> BillingStore for MemoryStore<C> {
    type Future<T: Send + 'static> = Ready<StoreResult<T>>;

    fn check_and_reserve(&self, req: &BillingRequest) -> Self::Future<BillingDecision> {
        ready(Ok(self.with_ledger(|l, now| l.admit(req, now))))
    }
    fn settle_attempt(
        &self,
        attempt: &AttemptRef,
        outcome: BillingOutcome,
    ) -> Self::Future<Option<AttemptState>> {
        ready(Ok(
            self.with_ledger(|l, now| l.settle(attempt, outcome, now))
        ))
    }
    fn account(
        &self,
        tenant: Option<&str>,
        key: &SubjectKey,
        budgets: &[Budget],
    ) -> Self::Future<AccountView> {
        ready(Ok(
            self.with_ledger(|l, now| l.account(tenant, key, budgets, now))
        ))
    }
    fn seed_balance(&self, tenant: &str, amount: Money) -> Self::Future<bool> {
        ready(Ok(self.with_ledger(|l, _| l.seed_balance(tenant, amount))))
    }
    fn seed_key_spend(&self, books: &Books, key: &SubjectKey, spent: Money) -> Self::Future<bool> {
        ready(Ok(
            self.with_ledger(|l, _| l.seed_key_spend(books, key, spent))
        ))
    }
    fn set_balance(&self, tenant: &str, amount: Money) -> Self::Future<()> {
        self.with_ledger(|l, _| l.set_balance(tenant, amount));
        ready(Ok(()))
    }
    fn credit(&self, tenant: &str, amount: Money) -> Self::Future<Money> {
        ready(Ok(self.with_ledger(|l, _| l.credit(tenant, amount))))
    }
    fn pending(&self) -> Self::Future<Vec<(AttemptRef, Money)>> {
        ready(Ok(self.with_ledger(|l, _| l.pending())))
    }
    fn reconciler(&self) -> Option<Arc<dyn super::DynReconcile>> {
        Some(Arc::new(self.clone()))
    }
}

impl<C: Clock> ReconcileStore for MemoryStore<C> {
    fn pending_page(
        &self,
        after: Option<&AttemptRef>,
        limit: usize,
    ) -> Self::Future<Vec<PendingAttempt>> {
        let limit = limit.min(MAX_PENDING_PAGE);
        ready(Ok(self.with_ledger(|l, _| l.pending_page(after, limit))))
    }
    fn reconcile(&self, attempt: &AttemptRef, how: Reconcile) -> Self::Future<Reconciled> {
        ready(Ok(self.with_ledger(|l, now| l.reconcile(attempt, how, now))))
    }
    fn pending_totals(&self) -> Self::Future<Vec<(Books, PendingTotal)>> {
        ready(Ok(self.with_ledger(|l, _| l.pending_totals())))
    }
    fn correct(&self, correction: &crate::Correction) -> Self::Future<crate::Corrected> {
        ready(Ok(self.with_ledger(|l, now| l.correct(correction, now))))
    }
}

/// Channel leases share the store's lease map (and lease ids, clock and bounds) with
/// the slot leases, under keys no subject can have: each channel is one more entry in
/// [`MemoryStats::slot_entries`](MemoryStats) while it has live
/// leases.
impl<C: Clock> super::CapacityStore for MemoryStore<C> {
    type Future<T: Send + 'static> = Ready<StoreResult<T>>;

    fn try_acquire(
        &self,
        channel: &str,
        capacity: u32,
        ttl: Millis,
    ) -> Self::Future<Option<LeaseId>> {
        ready(Ok(
            match self.acquire_now(&self.channel_key(channel), capacity, ttl) {
                crate::SlotDecision::Acquired(id) => Some(id),
                crate::SlotDecision::Full { .. } => None,
            },
        ))
    }
    fn renew(&self, channel: &str, lease: LeaseId, ttl: Millis) -> Self::Future<bool> {
        ready(Ok(self.renew_now(&self.channel_key(channel), lease, ttl)))
    }
    fn release(&self, channel: &str, lease: LeaseId) -> Self::Future<()> {
        self.release_now(&self.channel_key(channel), lease);
        ready(Ok(()))
    }
    fn in_flight(&self, channel: &str) -> Self::Future<u32> {
        ready(Ok(self.in_flight_now(&self.channel_key(channel))))
    }
}

impl<C: Clock> SlotStore for MemoryStore<C> {
    type Future<T: Send + 'static> = Ready<StoreResult<T>>;

    fn acquire(&self, key: &SubjectKey, limit: u32, ttl: Millis) -> Self::Future<SlotDecision> {
        ready(Ok(self.acquire_now(key, limit, ttl)))
    }
    fn renew(&self, key: &SubjectKey, lease: LeaseId, ttl: Millis) -> Self::Future<bool> {
        ready(Ok(self.renew_now(key, lease, ttl)))
    }
    fn release(&self, key: &SubjectKey, lease: LeaseId) -> Self::Future<()> {
        self.release_now(key, lease);
        ready(Ok(()))
    }
    fn in_flight(&self, key: &SubjectKey) -> Self::Future<u32> {
        ready(Ok(self.in_flight_now(key)))
    }
}

impl<C: Clock> super::ChannelStore for MemoryStore<C> {
    const SAVES_ROUND_TRIPS: bool = false;

    fn admit_all_and_acquire(
        &self,
        items: &[super::JointItem],
        channel: &str,
        capacity: u32,
        ttl: Millis,
    ) -> Ready<StoreResult<(super::JointAdmission, super::CapacityTake)>> {
        let admission = self.admit_all_now(items);
        let take = match admission {
            super::JointAdmission::Admitted(_) => {
                match self.acquire_now(&self.channel_key(channel), capacity, ttl) {
                    SlotDecision::Acquired(lease) => super::CapacityTake::Taken(lease),
                    SlotDecision::Full { .. } => super::CapacityTake::Full,
                }
            }
            super::JointAdmission::Exceeded { .. } => super::CapacityTake::NotAsked,
        };
        ready(Ok((admission, take)))
    }
}

impl<C: Clock> super::JointStore for MemoryStore<C> {
    const SAVES_ROUND_TRIPS: bool = false;

    fn acquire_and_admit(
        &self,
        slot: &super::SlotAsk,
        window: Option<super::WindowAsk<'_>>,
    ) -> Ready<StoreResult<super::JointDecision>> {
        ready(Ok(self.acquire_and_admit_now(slot, window)))
    }
}

impl<C: Clock> WindowStore for MemoryStore<C> {
    type Future<T: Send + 'static> = Ready<StoreResult<T>>;

    fn admit(
        &self,
        key: &SubjectKey,
        scope: Scope,
        policy: &Arc<Policy>,
        demand: &Demand,
    ) -> Self::Future<Admission> {
        ready(Ok(self.admit_now(key, scope, policy, demand)))
    }
    fn settle(
        &self,
        key: &SubjectKey,
        scope: Scope,
        ticket: WindowTicket,
        outcome: Outcome,
    ) -> Self::Future<()> {
        self.settle_now(key, scope, &ticket, outcome);
        ready(Ok(()))
    }
    fn admit_all(&self, items: &[super::JointItem]) -> Self::Future<super::JointAdmission> {
        ready(Ok(self.admit_all_now(items)))
    }
    fn settle_all(&self, items: Vec<super::JointSettle>) -> Self::Future<()> {
        for it in items {
            self.settle_now(&it.key, it.scope, &it.ticket, it.outcome);
        }
        ready(Ok(()))
    }
    fn view(
        &self,
        key: &SubjectKey,
        scope: Scope,
        policy: &Arc<Policy>,
    ) -> Self::Future<Vec<LimitView>> {
        ready(Ok(self.view_now(key, scope, policy)))
    }
}
