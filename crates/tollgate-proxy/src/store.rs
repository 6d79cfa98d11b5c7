//! Choosing where the proxy's state lives: the in-memory store, or Redis.
//!
//! [`Split`] keeps slots, windows and channel capacity in one store and money in another.

use std::sync::Arc;
use tollgate::core::{
    AccountView, Admission, AttemptRef, AttemptState, BillingDecision, BillingOutcome,
    BillingRequest, BillingStore, Budget, CapacityStore, Demand, LeaseId, LimitView, Millis, Money,
    Outcome, Policy, Scope, SlotDecision, SlotStore, SubjectKey, WindowStore, WindowTicket,
};

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

impl<L: tollgate::core::JointStore, B: Clone + Send + Sync + 'static> tollgate::core::JointStore
    for Split<L, B>
{
    const SAVES_ROUND_TRIPS: bool = L::SAVES_ROUND_TRIPS;

    fn acquire_and_admit(
        &self,
        slot: &tollgate::core::SlotAsk,
        window: Option<tollgate::core::WindowAsk<'_>>,
    ) -> <Self as WindowStore>::Future<tollgate::core::JointDecision> {
        self.limits.acquire_and_admit(slot, window)
    }
}

impl<L: tollgate::core::ChannelStore, B: Clone + Send + Sync + 'static> tollgate::core::ChannelStore
    for Split<L, B>
{
    const SAVES_ROUND_TRIPS: bool = <L as tollgate::core::ChannelStore>::SAVES_ROUND_TRIPS;

    fn admit_all_and_acquire(
        &self,
        items: &[tollgate::core::JointItem],
        channel: &str,
        capacity: u32,
        ttl: tollgate::core::Millis,
    ) -> <Self as WindowStore>::Future<(tollgate::core::JointAdmission, tollgate::core::CapacityTake)>
    {
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
        items: &[tollgate::core::JointItem],
    ) -> Self::Future<tollgate::core::JointAdmission> {
        self.limits.admit_all(items)
    }
    fn settle_all(&self, items: Vec<tollgate::core::JointSettle>) -> Self::Future<()> {
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
    fn set_balance(&self, tenant: &str, amount: Money) -> Self::Future<()> {
        self.billing.set_balance(tenant, amount)
    }
    fn credit(&self, tenant: &str, amount: Money) -> Self::Future<Money> {
        self.billing.credit(tenant, amount)
    }
    fn pending(&self) -> Self::Future<Vec<(AttemptRef, Money)>> {
        self.billing.pending()
    }
    fn reconciler(&self) -> Option<Arc<dyn tollgate::core::DynReconcile>> {
        self.billing.reconciler()
    }
}

impl<L: Clone + Send + Sync + 'static, B: tollgate::core::ReconcileStore>
    tollgate::core::ReconcileStore for Split<L, B>
{
    fn pending_page(
        &self,
        after: Option<&AttemptRef>,
        limit: usize,
    ) -> Self::Future<Vec<tollgate::core::PendingAttempt>> {
        self.billing.pending_page(after, limit)
    }
    fn reconcile(
        &self,
        attempt: &AttemptRef,
        how: tollgate::core::Reconcile,
    ) -> Self::Future<tollgate::core::Reconciled> {
        self.billing.reconcile(attempt, how)
    }
    fn pending_totals(
        &self,
    ) -> Self::Future<Vec<(tollgate::core::Books, tollgate::core::PendingTotal)>> {
        self.billing.pending_totals()
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
