//! Store traits: where limit state lives (L4, D1, D2).
//!
//! One decision is one call: [`SlotStore::acquire`] and [`WindowStore::admit`] each
//! check and reserve everything a layer needs in a single step, which the Redis store
//! runs as one Lua script. Futures are associated types so a layer's response future
//! can be named (no boxing on the in-memory hot path, where they are
//! [`std::future::Ready`]); they own what they need (`'static`) and are `Unpin` so
//! releases and settlements can be polled in place and, if not done at once, spawned
//! off the response path.
//!
//! Time belongs to the store: the in-memory store reads its injected [`Clock`], the
//! Redis store the server's `TIME`.
//!
//! [`Clock`]: crate::Clock

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod fallback;
pub mod memory;
#[cfg(test)]
mod memory_bounds_tests;

use crate::billing::{
    AccountView, AttemptRef, AttemptState, BillingDecision, BillingOutcome, BillingRequest, Books,
    Budget, Corrected, Correction, PendingAttempt, PendingTotal, Reconcile, Reconciled,
};
use crate::demand::Demand;
use crate::money::Money;
use crate::policy::Policy;
use crate::slots::LeaseId;
use crate::subject::{Scope, SubjectKey};
use crate::window::{Exceeded, LimitView, Outcome, WindowTicket};
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::clock::Millis;

/// A store could not answer (connection lost, deadline passed, script error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
}

/// Broad class of a [`StoreError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// The store did not answer within its deadline.
    Timeout,
    /// The store is unreachable.
    Unavailable,
    /// The store answered something unusable.
    Protocol,
    /// The write was made, but fewer replicas than the store requires acknowledged it
    /// in time (D10): a durability shortfall, not an outage — the store answers, and a
    /// failover before the replicas catch up could lose the write.
    Unacknowledged,
}

impl StoreError {
    /// A new error.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
    /// Its class.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "limit store {:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for StoreError {}

/// Result of a store call.
pub type StoreResult<T> = Result<T, StoreError>;

/// Outcome of a slot acquisition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotDecision {
    /// A slot was taken under this lease.
    Acquired(LeaseId),
    /// Every slot is taken.
    Full {
        /// Live leases at the decision.
        in_flight: u32,
    },
}

/// Per-subject concurrency leases (C*, D5).
pub trait SlotStore: Clone + Send + Sync + 'static {
    /// The future every call returns.
    type Future<T: Send + 'static>: Future<Output = StoreResult<T>> + Send + Unpin + 'static;

    /// Purges expired leases of `key`, then takes a slot if fewer than `limit` are
    /// live. One round trip.
    fn acquire(&self, key: &SubjectKey, limit: u32, ttl: Millis) -> Self::Future<SlotDecision>;
    /// Extends a lease to now + `ttl`; false if it no longer exists.
    fn renew(&self, key: &SubjectKey, lease: LeaseId, ttl: Millis) -> Self::Future<bool>;
    /// Releases a lease; releasing twice is harmless.
    fn release(&self, key: &SubjectKey, lease: LeaseId) -> Self::Future<()>;
    /// Live leases of `key`.
    fn in_flight(&self, key: &SubjectKey) -> Self::Future<u32>;
}

/// Outcome of a window admission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Admitted; settle the ticket when the request ends.
    Admitted(WindowTicket),
    /// Not admitted; nothing was counted.
    Exceeded(Exceeded),
}

/// One subject's part of an all-or-nothing admission over several subjects
/// ([`WindowStore::admit_all`]).
#[derive(Clone, Debug)]
pub struct JointItem {
    /// The subject.
    pub key: SubjectKey,
    /// Its scope.
    pub scope: Scope,
    /// Its limits.
    pub policy: Arc<Policy>,
    /// What the request needs of it.
    pub demand: Demand,
}

/// Outcome of [`WindowStore::admit_all`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JointAdmission {
    /// Every item admitted; one ticket per item, in order.
    Admitted(Vec<WindowTicket>),
    /// Item `index` has no room; nothing was counted anywhere.
    Exceeded {
        /// Position of the refusing item.
        index: usize,
        /// Its refusal.
        exceeded: Exceeded,
    },
}

/// One settlement of [`WindowStore::settle_all`].
#[derive(Clone, Debug)]
pub struct JointSettle {
    /// The subject.
    pub key: SubjectKey,
    /// Its scope.
    pub scope: Scope,
    /// What it was admitted with.
    pub ticket: WindowTicket,
    /// How the request ended.
    pub outcome: Outcome,
}

/// Per-subject anchored windows, amount cap and rolling window (W*).
pub trait WindowStore: Clone + Send + Sync + 'static {
    /// The future every call returns.
    type Future<T: Send + 'static>: Future<Output = StoreResult<T>> + Send + Unpin + 'static;

    /// One all-or-nothing check-and-reserve of `demand` against every limit of
    /// `policy` for (`key`, `scope`). One round trip.
    fn admit(
        &self,
        key: &SubjectKey,
        scope: Scope,
        policy: &Arc<Policy>,
        demand: &Demand,
    ) -> Self::Future<Admission>;
    /// Settles or refunds an admitted request (W5, L5).
    fn settle(
        &self,
        key: &SubjectKey,
        scope: Scope,
        ticket: WindowTicket,
        outcome: Outcome,
    ) -> Self::Future<()>;
    /// Every limit of `policy` with its current use (the usage view).
    fn view(
        &self,
        key: &SubjectKey,
        scope: Scope,
        policy: &Arc<Policy>,
    ) -> Self::Future<Vec<LimitView>>;
    /// [`admit`](Self::admit) of every item, all or nothing (U1: one channel's
    /// provider windows at credential, model and vendor level): every item admits, or
    /// none changes. One round trip where the store can (Redis: one script, per
    /// Cluster slot).
    fn admit_all(&self, items: &[JointItem]) -> Self::Future<JointAdmission>;
    /// [`settle`](Self::settle) of every item, in one round trip where the store can.
    fn settle_all(&self, items: Vec<JointSettle>) -> Self::Future<()>;
}

/// The slot half of a joint decision ([`JointStore::acquire_and_admit`]): take one of
/// `limit` slots of `key` (C1) under a lease of `ttl` ms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotAsk {
    /// The subject.
    pub key: SubjectKey,
    /// Most live leases (> 0).
    pub limit: u32,
    /// Lease TTL in ms (C4).
    pub ttl: Millis,
}

/// One window admission as the window half of a joint decision.
#[derive(Clone, Copy, Debug)]
pub struct WindowAsk<'a> {
    /// The policy's scope.
    pub scope: Scope,
    /// Its limits.
    pub policy: &'a Arc<Policy>,
    /// What the request needs.
    pub demand: &'a Demand,
}

/// Outcome of [`JointStore::acquire_and_admit`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JointDecision {
    /// A slot is taken under `lease`, and the windows (when asked) admitted.
    Admitted {
        /// The slot's lease.
        lease: LeaseId,
        /// The window ticket, when windows were asked.
        ticket: Option<WindowTicket>,
    },
    /// Every slot is taken; no window counted anything.
    SlotFull {
        /// Live leases at the decision.
        in_flight: u32,
    },
    /// A slot was free but the windows have no room: no slot taken, nothing counted.
    Exceeded(Exceeded),
}

/// A store that decides a subject's slot and its window admission in one step (D2,
/// T3): the slot is taken only if the windows admit, the windows count only if a slot
/// is free. The slot and window layers join their decisions through it (the slot layer
/// hands its acquisition to the window layer below it), so a request pays one round
/// trip for both instead of one each; on Redis both live on the subject's hash slot,
/// so it is one script on a Cluster too.
pub trait JointStore: SlotStore + WindowStore {
    /// Whether joining saves anything: true for a store across a network (each
    /// decision is a round trip), false for one that decides in the process (the
    /// in-memory store answers at once either way). Stacks use it to join the layers'
    /// decisions only where it pays.
    const SAVES_ROUND_TRIPS: bool = true;

    /// Both decisions at once; `window: None` is a slot acquisition alone.
    fn acquire_and_admit(
        &self,
        slot: &SlotAsk,
        window: Option<WindowAsk<'_>>,
    ) -> <Self as WindowStore>::Future<JointDecision>;
}

/// Per-channel in-flight leases (Q1, D1, D5).
///
/// Shaped like [`SlotStore`]: one call per decision, time from the
/// store, expired leases purged at the next acquisition for that channel, so leases of
/// a crashed instance heal after their TTL.
pub trait CapacityStore: Clone + Send + Sync + 'static {
    /// The future every call returns.
    type Future<T: Send + 'static>: Future<Output = StoreResult<T>> + Send + Unpin + 'static;

    /// Purges expired leases of `channel`, then takes one if fewer than `capacity` are
    /// live (0 = unlimited). `None` = the channel is full. One round trip.
    fn try_acquire(
        &self,
        channel: &str,
        capacity: u32,
        ttl: Millis,
    ) -> Self::Future<Option<LeaseId>>;
    /// Extends a lease to now + `ttl`; false if it no longer exists.
    fn renew(&self, channel: &str, lease: LeaseId, ttl: Millis) -> Self::Future<bool>;
    /// Releases a lease; releasing twice is harmless.
    fn release(&self, channel: &str, lease: LeaseId) -> Self::Future<()>;
    /// Live leases of `channel`.
    fn in_flight(&self, channel: &str) -> Self::Future<u32>;
}

/// Whether a channel's capacity lease was taken with its provider windows
/// ([`ChannelStore::admit_all_and_acquire`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapacityTake {
    /// Taken under this lease.
    Taken(LeaseId),
    /// The channel was full: no lease (the windows still admitted).
    Full,
    /// Not asked (the windows refused, or the store could not ask it with them).
    NotAsked,
}

/// A store that admits a channel's provider windows and takes a capacity lease on that
/// channel in one step (D2, T3): the upstream limit layer hands the lease to the
/// capacity layer below, which then needs no call of its own for the channel the
/// request was counted on.
pub trait ChannelStore: WindowStore + CapacityStore {
    /// As [`JointStore::SAVES_ROUND_TRIPS`].
    const SAVES_ROUND_TRIPS: bool = true;

    /// [`WindowStore::admit_all`] of `items`; when they admit, a lease of `channel`'s
    /// `capacity` (> 0) under `ttl` ms, if one is free.
    fn admit_all_and_acquire(
        &self,
        items: &[JointItem],
        channel: &str,
        capacity: u32,
        ttl: Millis,
    ) -> <Self as WindowStore>::Future<(JointAdmission, CapacityTake)>;
}

/// Balances, key spend, budgets and per-attempt settlement (B*).
pub trait BillingStore: Clone + Send + Sync + 'static {
    /// The future every call returns.
    type Future<T: Send + 'static>: Future<Output = StoreResult<T>> + Send + Unpin + 'static;

    /// Eligibility and budget reservation at request start (B1, B3). One round trip.
    fn check_and_reserve(&self, req: &BillingRequest) -> Self::Future<BillingDecision>;
    /// Settles an attempt once (B2, B4); `None` if it is unknown (never reserved, or
    /// already settled or refunded) or pending and settled as pending again. The
    /// attempt is named with the books it was reserved in (D3), which the caller that
    /// settles knows from its [`BillingRequest::attempt_ref`].
    fn settle_attempt(
        &self,
        attempt: &AttemptRef,
        outcome: BillingOutcome,
    ) -> Self::Future<Option<AttemptState>>;
    /// Money of a tenant and key, and the given budgets (the usage view).
    fn account(
        &self,
        tenant: Option<&str>,
        key: &SubjectKey,
        budgets: &[Budget],
    ) -> Self::Future<AccountView>;
    /// Sets a tenant's balance unless it already has a record; true if it was written,
    /// false if the tenant kept its record.
    fn seed_balance(&self, tenant: &str, amount: Money) -> Self::Future<bool>;
    /// Sets `key`'s spend in `books` to `spent` unless the store has a record of its
    /// spend (seeding from the books at start must not reset a running spend, B6); true
    /// if it was written. A restarted in-memory store, or a Redis that lost the key's
    /// record, so keeps the spend caps it had.
    fn seed_key_spend(&self, books: &Books, key: &SubjectKey, spent: Money) -> Self::Future<bool>;
    /// Sets a tenant's balance explicitly (an operator's decision, B7), creating its
    /// record if it is missing; money pending reconciliation is kept.
    fn set_balance(&self, tenant: &str, amount: Money) -> Self::Future<()>;
    /// Adds to a tenant's balance; returns the new balance.
    fn credit(&self, tenant: &str, amount: Money) -> Self::Future<Money>;
    /// Attempts pending reconciliation, with their amounts.
    fn pending(&self) -> Self::Future<Vec<(AttemptRef, Money)>>;
    /// The store's [`ReconcileStore`] side, for code that knows it only as a
    /// `BillingStore` (the proxy's admin routes and metrics); `None` (the default) when
    /// it has none. Stores that implement [`ReconcileStore`] return
    /// `Some(Arc::new(self.clone()))`.
    fn reconciler(&self) -> Option<Arc<dyn DynReconcile>> {
        None
    }
}

/// Most attempts one [`ReconcileStore::pending_page`] call returns.
pub const MAX_PENDING_PAGE: usize = 1000;

/// An operator's way out of pending reconciliation (B7), and the pending counters the
/// metrics read. Apart from [`BillingStore`] so a store that only bills (a test double,
/// an application's own) need not implement it.
pub trait ReconcileStore: BillingStore {
    /// Up to `limit` (at most [`MAX_PENDING_PAGE`]) attempts pending reconciliation
    /// after `after`, in the listing order: books, then attempt id
    /// ([`PendingAttempt::order`]). The last attempt of a page is the cursor of the next;
    /// an empty page is the end. An attempt pending for the whole listing is on exactly
    /// one page.
    fn pending_page(
        &self,
        after: Option<&AttemptRef>,
        limit: usize,
    ) -> Self::Future<Vec<PendingAttempt>>;
    /// Settles a pending attempt at a cost or writes it off, releasing what it held
    /// exactly once (see [`Ledger::reconcile`](crate::Ledger::reconcile)); a second
    /// call answers [`Reconciled::NotPending`] and changes nothing.
    fn reconcile(&self, attempt: &AttemptRef, how: Reconcile) -> Self::Future<Reconciled>;
    /// The pending counter of every books with attempts pending, in books order: one
    /// read per books, never a scan of the attempts.
    fn pending_totals(&self) -> Self::Future<Vec<(Books, PendingTotal)>>;
    /// Corrects a closed attempt's charge by a signed difference, exactly once per
    /// attempt (B7; see [`Ledger::correct`](crate::Ledger::correct)): a second call —
    /// another instance's, a retry after a lost reply, one after a restart within the
    /// marker's time — answers [`Corrected::AlreadyCorrected`] and changes nothing.
    fn correct(&self, correction: &Correction) -> Self::Future<Corrected>;
}

/// A boxed future of [`DynReconcile`].
pub type BoxStoreFuture<T> = std::pin::Pin<Box<dyn Future<Output = StoreResult<T>> + Send>>;

/// [`ReconcileStore`] behind a pointer (boxed futures): what
/// [`BillingStore::reconciler`] hands out. Every `ReconcileStore` is one.
pub trait DynReconcile: Send + Sync {
    /// [`ReconcileStore::pending_page`].
    fn pending_page(
        &self,
        after: Option<&AttemptRef>,
        limit: usize,
    ) -> BoxStoreFuture<Vec<PendingAttempt>>;
    /// [`ReconcileStore::reconcile`].
    fn reconcile(&self, attempt: &AttemptRef, how: Reconcile) -> BoxStoreFuture<Reconciled>;
    /// [`ReconcileStore::pending_totals`].
    fn pending_totals(&self) -> BoxStoreFuture<Vec<(Books, PendingTotal)>>;
    /// [`ReconcileStore::correct`].
    fn correct(&self, correction: &Correction) -> BoxStoreFuture<Corrected>;
}

impl<S: ReconcileStore> DynReconcile for S {
    fn pending_page(
        &self,
        after: Option<&AttemptRef>,
        limit: usize,
    ) -> BoxStoreFuture<Vec<PendingAttempt>> {
        Box::pin(ReconcileStore::pending_page(self, after, limit))
    }
    fn reconcile(&self, attempt: &AttemptRef, how: Reconcile) -> BoxStoreFuture<Reconciled> {
        Box::pin(ReconcileStore::reconcile(self, attempt, how))
    }
    fn pending_totals(&self) -> BoxStoreFuture<Vec<(Books, PendingTotal)>> {
        Box::pin(ReconcileStore::pending_totals(self))
    }
    fn correct(&self, correction: &Correction) -> BoxStoreFuture<Corrected> {
        Box::pin(ReconcileStore::correct(self, correction))
    }
}
