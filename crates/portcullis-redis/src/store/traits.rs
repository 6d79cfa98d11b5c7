//! The store traits of portcullis-core on [`RedisStore`], each method handed to the
//! operations type of its concern.

use super::RedisStore;
use crate::future::RedisStoreFuture;
use portcullis_core::homes::{Home, HomeBook, HomeFuture};
use portcullis_core::{
    AccountView, Admission, AttemptRef, AttemptState, BillingDecision, BillingOutcome,
    BillingRequest, BillingStore, Books, Budget, CapacityStore, CapacityTake, ChannelStore,
    Corrected, Correction, Demand, JointAdmission, JointDecision, JointItem, JointSettle,
    JointStore, LeaseId, LimitView, Millis, Money, Outcome, PendingAttempt, PendingTotal, Policy,
    Reconcile, ReconcileStore, Reconciled, Scope, SlotAsk, SlotDecision, SlotStore, SubjectKey,
    WindowAsk, WindowStore, WindowTicket,
};
use std::sync::Arc;

impl SlotStore for RedisStore {
    type Future<T: Send + 'static> = RedisStoreFuture<T>;

    fn acquire(&self, key: &SubjectKey, limit: u32, ttl: Millis) -> Self::Future<SlotDecision> {
        self.inner.slots.acquire(key, limit, ttl)
    }
    fn renew(&self, key: &SubjectKey, lease: LeaseId, ttl: Millis) -> Self::Future<bool> {
        self.inner.slots.renew(key, lease, ttl)
    }
    fn release(&self, key: &SubjectKey, lease: LeaseId) -> Self::Future<()> {
        // The next request of this subject — maybe on another instance, which cannot
        // flush this one's batch — waits for this release: it goes out at once, with
        // whatever the request queued before it (its settlements, its capacity lease).
        self.inner.slots.release(key, lease, true)
    }
    fn in_flight(&self, key: &SubjectKey) -> Self::Future<u32> {
        self.inner.slots.in_flight(key)
    }
}

impl CapacityStore for RedisStore {
    type Future<T: Send + 'static> = RedisStoreFuture<T>;

    fn try_acquire(
        &self,
        channel: &str,
        capacity: u32,
        ttl: Millis,
    ) -> Self::Future<Option<LeaseId>> {
        self.inner.capacity.try_acquire(channel, capacity, ttl)
    }
    fn renew(&self, channel: &str, lease: LeaseId, ttl: Millis) -> Self::Future<bool> {
        self.inner.capacity.renew(channel, lease, ttl)
    }
    fn release(&self, channel: &str, lease: LeaseId) -> Self::Future<()> {
        self.inner.capacity.release(channel, lease)
    }
    fn in_flight(&self, channel: &str) -> Self::Future<u32> {
        self.inner.capacity.in_flight(channel)
    }
}

impl WindowStore for RedisStore {
    type Future<T: Send + 'static> = RedisStoreFuture<T>;

    fn admit(
        &self,
        key: &SubjectKey,
        scope: Scope,
        policy: &Arc<Policy>,
        demand: &Demand,
    ) -> Self::Future<Admission> {
        self.inner.windows.admit(key, scope, policy, demand)
    }
    fn settle(
        &self,
        key: &SubjectKey,
        scope: Scope,
        ticket: WindowTicket,
        outcome: Outcome,
    ) -> Self::Future<()> {
        self.inner.windows.settle(key, scope, ticket, outcome)
    }
    fn view(
        &self,
        key: &SubjectKey,
        scope: Scope,
        policy: &Arc<Policy>,
    ) -> Self::Future<Vec<LimitView>> {
        self.inner.windows.view(key, scope, policy)
    }
    fn admit_all(&self, items: &[JointItem]) -> Self::Future<JointAdmission> {
        self.inner.windows.admit_all(items)
    }
    fn settle_all(&self, items: Vec<JointSettle>) -> Self::Future<()> {
        self.inner.windows.settle_all(items)
    }
}

impl JointStore for RedisStore {
    fn acquire_and_admit(
        &self,
        slot: &SlotAsk,
        window: Option<WindowAsk<'_>>,
    ) -> RedisStoreFuture<JointDecision> {
        self.inner.joint.acquire_and_admit(slot, window, true)
    }
}

impl ChannelStore for RedisStore {
    fn admit_all_and_acquire(
        &self,
        items: &[JointItem],
        channel: &str,
        capacity: u32,
        ttl: Millis,
    ) -> RedisStoreFuture<(JointAdmission, CapacityTake)> {
        self.inner
            .joint
            .admit_all_and_acquire(items, channel, capacity, ttl, true)
    }
}

impl BillingStore for RedisStore {
    type Future<T: Send + 'static> = RedisStoreFuture<T>;

    fn check_and_reserve(&self, req: &BillingRequest) -> Self::Future<BillingDecision> {
        self.inner.billing.check_and_reserve(req)
    }
    fn settle_attempt(
        &self,
        attempt: &AttemptRef,
        outcome: BillingOutcome,
    ) -> Self::Future<Option<AttemptState>> {
        self.inner.billing.settle_attempt(attempt, outcome)
    }
    fn account(
        &self,
        tenant: Option<&str>,
        key: &SubjectKey,
        budgets: &[Budget],
    ) -> Self::Future<AccountView> {
        self.inner.billing.account(tenant, key, budgets)
    }
    fn seed_balance(&self, tenant: &str, amount: Money) -> Self::Future<bool> {
        self.inner.billing.seed_balance(tenant, amount)
    }
    fn seed_key_spend(&self, books: &Books, key: &SubjectKey, spent: Money) -> Self::Future<bool> {
        self.inner.billing.seed_key_spend(books, key, spent)
    }
    fn set_balance(&self, tenant: &str, amount: Money) -> Self::Future<()> {
        self.inner.billing.set_balance(tenant, amount)
    }
    fn credit(&self, tenant: &str, amount: Money) -> Self::Future<Money> {
        self.inner.billing.credit(tenant, amount)
    }
    fn reconciler(&self) -> Option<Arc<dyn portcullis_core::DynReconcile>> {
        Some(Arc::new(self.clone()))
    }
    fn pending(&self) -> Self::Future<Vec<(AttemptRef, Money)>> {
        self.inner.billing.pending()
    }
}

impl ReconcileStore for RedisStore {
    fn pending_page(
        &self,
        after: Option<&AttemptRef>,
        limit: usize,
    ) -> Self::Future<Vec<PendingAttempt>> {
        self.inner.billing.pending_page(after, limit)
    }
    fn reconcile(&self, attempt: &AttemptRef, how: Reconcile) -> Self::Future<Reconciled> {
        self.inner.billing.reconcile(attempt, how)
    }
    fn pending_totals(&self) -> Self::Future<Vec<(Books, PendingTotal)>> {
        self.inner.billing.pending_totals()
    }
    fn correct(&self, correction: &Correction) -> Self::Future<Corrected> {
        self.inner.billing.correct(correction)
    }
}

impl HomeBook for RedisStore {
    fn remember(&self, id: &str, home: Home, ttl_ms: Millis) -> HomeFuture<()> {
        self.inner.homes.remember(id, home, ttl_ms)
    }
    fn find(&self, id: &str) -> HomeFuture<Option<Home>> {
        self.inner.homes.find(id)
    }
}
