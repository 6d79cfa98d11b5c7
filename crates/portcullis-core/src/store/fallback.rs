//! The `local` failure mode of D4: when the shared store fails, decide in this
//! process instead, with every limit divided by the number of gateway instances, so an
//! outage degrades limits instead of removing them.
//!
//! Leases and tickets issued locally are marked (the lease id's top bit, the ticket's
//! `fallback` flag) and always go back to the local store; those of the shared store
//! always go back to it.

use super::memory::MemoryStore;
use super::{Admission, BoxStoreFuture, SlotDecision, SlotStore, WindowStore};
use crate::clock::{Clock, Millis, SystemClock};
use crate::demand::Demand;
use crate::policy::{Policy, Tier};
use crate::slots::LeaseId;
use crate::subject::{Scope, SubjectKey};
use crate::window::{LimitView, Outcome, WindowTicket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Marks a lease issued by the local store.
const LOCAL_LEASE: LeaseId = 1 << 63;

/// A store that falls back to an in-memory one, with limits divided by
/// `instances`, for the kinds of state it is told to (slots, windows). Errors of the
/// other kinds pass through, so those layers apply their own `open` / `closed` mode.
pub struct LocalFallback<P, C = SystemClock> {
    primary: P,
    local: MemoryStore<C>,
    instances: u32,
    slots: bool,
    windows: bool,
    decisions: Arc<AtomicU64>,
}

impl<P: Clone, C> Clone for LocalFallback<P, C> {
    fn clone(&self) -> Self {
        Self {
            primary: self.primary.clone(),
            local: self.local.clone(),
            instances: self.instances,
            slots: self.slots,
            windows: self.windows,
            decisions: self.decisions.clone(),
        }
    }
}

impl<P> LocalFallback<P> {
    /// Falls back for slots and/or windows, sharing limits among `instances`.
    pub fn new(primary: P, instances: u32, slots: bool, windows: bool) -> Self {
        Self::with_local(primary, MemoryStore::new(), instances, slots, windows)
    }
}

impl<P, C> LocalFallback<P, C> {
    /// Like [`LocalFallback::new`] with a given local store.
    pub fn with_local(
        primary: P,
        local: MemoryStore<C>,
        instances: u32,
        slots: bool,
        windows: bool,
    ) -> Self {
        Self {
            primary,
            local,
            instances: instances.max(1),
            slots,
            windows,
            decisions: Arc::default(),
        }
    }
    /// Decisions taken locally so far (D4's "local" counter).
    pub fn local_decisions(&self) -> u64 {
        self.decisions.load(Ordering::Relaxed)
    }
    /// The shared store.
    pub fn primary(&self) -> &P {
        &self.primary
    }
}

fn share(limit: u64, n: u32) -> u64 {
    (limit / u64::from(n)).max(1)
}

/// `policy` with every limit divided by `n` (never below 1; 0 = unlimited stays 0).
pub(crate) fn divide(policy: &Policy, n: u32) -> Policy {
    let tiers = |v: &[Tier]| -> Vec<Tier> {
        v.iter()
            .map(|t| Tier {
                window_ms: t.window_ms,
                limit: share(t.limit, n),
            })
            .collect()
    };
    Policy {
        concurrency: if policy.concurrency == 0 {
            0
        } else {
            share(u64::from(policy.concurrency), n) as u32
        },
        requests: tiers(&policy.requests),
        tokens: tiers(&policy.tokens),
        images: tiers(&policy.images),
        videos: tiers(&policy.videos),
        amount_cap: policy.amount_cap.map(|c| c / i64::from(n)),
        rolling_rpm: policy.rolling_rpm.map(|r| share(u64::from(r), n) as u32),
    }
}

impl<P: SlotStore, C: Clock> SlotStore for LocalFallback<P, C> {
    type Future<T: Send + 'static> = BoxStoreFuture<T>;

    fn acquire(&self, key: &SubjectKey, limit: u32, ttl: Millis) -> Self::Future<SlotDecision> {
        let primary = self.primary.acquire(key, limit, ttl);
        let (local, key, n, on, count) = (
            self.local.clone(),
            key.clone(),
            self.instances,
            self.slots,
            self.decisions.clone(),
        );
        Box::pin(async move {
            match primary.await {
                Err(_) if on => {
                    count.fetch_add(1, Ordering::Relaxed);
                    let shared = if limit == 0 {
                        0
                    } else {
                        share(u64::from(limit), n) as u32
                    };
                    Ok(match local.acquire_now(&key, shared, ttl) {
                        SlotDecision::Acquired(id) => SlotDecision::Acquired(id | LOCAL_LEASE),
                        full => full,
                    })
                }
                other => other,
            }
        })
    }

    fn renew(&self, key: &SubjectKey, lease: LeaseId, ttl: Millis) -> Self::Future<bool> {
        if lease & LOCAL_LEASE != 0 {
            let r = self.local.renew_now(key, lease & !LOCAL_LEASE, ttl);
            return Box::pin(std::future::ready(Ok(r)));
        }
        Box::pin(self.primary.renew(key, lease, ttl))
    }

    fn release(&self, key: &SubjectKey, lease: LeaseId) -> Self::Future<()> {
        if lease & LOCAL_LEASE != 0 {
            self.local.release_now(key, lease & !LOCAL_LEASE);
            return Box::pin(std::future::ready(Ok(())));
        }
        Box::pin(self.primary.release(key, lease))
    }

    fn in_flight(&self, key: &SubjectKey) -> Self::Future<u32> {
        let primary = self.primary.in_flight(key);
        let local = self.local.in_flight_now(key);
        Box::pin(async move { primary.await.map(|n| n + local) })
    }
}

/// [`WindowStore::admit_all`] here, on limits divided by `n`; tickets marked local.
fn local_admit_all<C: Clock>(
    local: &MemoryStore<C>,
    mut items: Vec<super::JointItem>,
    n: u32,
) -> super::JointAdmission {
    for it in &mut items {
        it.policy = Arc::new(divide(&it.policy, n));
    }
    match local.admit_all_now(&items) {
        super::JointAdmission::Admitted(mut tickets) => {
            for t in &mut tickets {
                t.fallback = true;
            }
            super::JointAdmission::Admitted(tickets)
        }
        exceeded => exceeded,
    }
}

impl<P: WindowStore, C: Clock> WindowStore for LocalFallback<P, C> {
    type Future<T: Send + 'static> = BoxStoreFuture<T>;

    fn admit(
        &self,
        key: &SubjectKey,
        scope: Scope,
        policy: &Arc<Policy>,
        demand: &Demand,
    ) -> Self::Future<Admission> {
        let primary = self.primary.admit(key, scope, policy, demand);
        let (local, key, policy, demand, n, on, count) = (
            self.local.clone(),
            key.clone(),
            policy.clone(),
            *demand,
            self.instances,
            self.windows,
            self.decisions.clone(),
        );
        Box::pin(async move {
            match primary.await {
                Err(_) if on => {
                    count.fetch_add(1, Ordering::Relaxed);
                    Ok(
                        match local.admit_now(&key, scope, &divide(&policy, n), &demand) {
                            Admission::Admitted(mut t) => {
                                t.fallback = true;
                                Admission::Admitted(t)
                            }
                            exceeded => exceeded,
                        },
                    )
                }
                other => other,
            }
        })
    }

    fn settle(
        &self,
        key: &SubjectKey,
        scope: Scope,
        ticket: WindowTicket,
        outcome: Outcome,
    ) -> Self::Future<()> {
        if ticket.fallback {
            self.local.settle_now(key, scope, &ticket, outcome);
            return Box::pin(std::future::ready(Ok(())));
        }
        Box::pin(self.primary.settle(key, scope, ticket, outcome))
    }

    fn view(
        &self,
        key: &SubjectKey,
        scope: Scope,
        policy: &Arc<Policy>,
    ) -> Self::Future<Vec<LimitView>> {
        Box::pin(self.primary.view(key, scope, policy))
    }

    fn admit_all(&self, items: &[super::JointItem]) -> Self::Future<super::JointAdmission> {
        let primary = self.primary.admit_all(items);
        let (local, n, on, count) = (
            self.local.clone(),
            self.instances,
            self.windows,
            self.decisions.clone(),
        );
        let items = on.then(|| items.to_vec());
        Box::pin(async move {
            match (primary.await, items) {
                (Err(_), Some(items)) => {
                    count.fetch_add(1, Ordering::Relaxed);
                    Ok(local_admit_all(&local, items, n))
                }
                (other, _) => other,
            }
        })
    }

    fn settle_all(&self, items: Vec<super::JointSettle>) -> Self::Future<()> {
        let (local, shared): (Vec<_>, Vec<_>) = items.into_iter().partition(|i| i.ticket.fallback);
        for it in local {
            self.local
                .settle_now(&it.key, it.scope, &it.ticket, it.outcome);
        }
        if shared.is_empty() {
            return Box::pin(std::future::ready(Ok(())));
        }
        Box::pin(self.primary.settle_all(shared))
    }
}

/// Both decisions on the shared store; when it fails and both slots and windows are in
/// `local` mode, both are decided here with the limits divided by the instance count;
/// otherwise the error reaches the layers, which apply their own failure modes.
impl<P: super::JointStore, C: Clock> super::JointStore for LocalFallback<P, C> {
    const SAVES_ROUND_TRIPS: bool = P::SAVES_ROUND_TRIPS;

    fn acquire_and_admit(
        &self,
        slot: &super::SlotAsk,
        window: Option<super::WindowAsk<'_>>,
    ) -> BoxStoreFuture<super::JointDecision> {
        let primary = self.primary.acquire_and_admit(slot, window);
        let local = (self.slots && self.windows).then(|| {
            (
                self.local.clone(),
                slot.clone(),
                window.map(|w| (w.scope, w.policy.clone(), *w.demand)),
                self.instances,
                self.decisions.clone(),
            )
        });
        Box::pin(async move {
            match (primary.await, local) {
                (Err(_), Some((local, mut slot, window, n, count))) => {
                    count.fetch_add(1, Ordering::Relaxed);
                    slot.limit = share(u64::from(slot.limit), n) as u32;
                    // Divided only now: the usual case (the shared store answers) pays
                    // nothing for the fallback.
                    let window = window.map(|(scope, policy, demand)| {
                        (scope, Arc::new(divide(&policy, n)), demand)
                    });
                    let w = window
                        .as_ref()
                        .map(|(scope, policy, demand)| super::WindowAsk {
                            scope: *scope,
                            policy,
                            demand,
                        });
                    Ok(match local.acquire_and_admit_now(&slot, w) {
                        super::JointDecision::Admitted { lease, ticket } => {
                            super::JointDecision::Admitted {
                                lease: lease | LOCAL_LEASE,
                                ticket: ticket.map(|mut t| {
                                    t.fallback = true;
                                    t
                                }),
                            }
                        }
                        other => other,
                    })
                }
                (other, _) => other,
            }
        })
    }
}

/// On the shared store; when it fails, the windows as [`WindowStore::admit_all`] does
/// here (locally in `local` mode) and the capacity lease not asked: the capacity layer
/// asks for it itself, and applies its own failure mode.
impl<P: super::ChannelStore, C: Clock> super::ChannelStore for LocalFallback<P, C> {
    const SAVES_ROUND_TRIPS: bool = <P as super::ChannelStore>::SAVES_ROUND_TRIPS;

    fn admit_all_and_acquire(
        &self,
        items: &[super::JointItem],
        channel: &str,
        capacity: u32,
        ttl: Millis,
    ) -> BoxStoreFuture<(super::JointAdmission, super::CapacityTake)> {
        let primary = self
            .primary
            .admit_all_and_acquire(items, channel, capacity, ttl);
        let (local, n, count) = (self.local.clone(), self.instances, self.decisions.clone());
        let items = self.windows.then(|| items.to_vec());
        Box::pin(async move {
            match (primary.await, items) {
                (Err(_), Some(items)) => {
                    count.fetch_add(1, Ordering::Relaxed);
                    Ok((
                        local_admit_all(&local, items, n),
                        super::CapacityTake::NotAsked,
                    ))
                }
                (other, _) => other,
            }
        })
    }
}

/// Channel capacity has no local mode: it is delegated to the shared store, and its
/// errors reach the capacity layer, which applies its own failure mode.
impl<P: crate::capacity::CapacityStore, C: Clock> crate::capacity::CapacityStore
    for LocalFallback<P, C>
{
    type Future<T: Send + 'static> = P::Future<T>;
    fn try_acquire(
        &self,
        channel: &str,
        capacity: u32,
        ttl: Millis,
    ) -> Self::Future<Option<LeaseId>> {
        self.primary.try_acquire(channel, capacity, ttl)
    }
    fn renew(&self, channel: &str, lease: LeaseId, ttl: Millis) -> Self::Future<bool> {
        self.primary.renew(channel, lease, ttl)
    }
    fn release(&self, channel: &str, lease: LeaseId) -> Self::Future<()> {
        self.primary.release(channel, lease)
    }
    fn in_flight(&self, channel: &str) -> Self::Future<u32> {
        self.primary.in_flight(channel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::{StoreError, StoreErrorKind, StoreResult};
    use std::future::Future;
    use std::future::Ready;
    use std::pin::Pin;
    use std::sync::atomic::AtomicBool;
    use std::task::{Context, Poll, Waker};

    /// A store that answers like the in-memory one until it is switched off.
    #[derive(Clone)]
    struct Flaky {
        inner: MemoryStore<ManualClock>,
        down: Arc<AtomicBool>,
    }

    impl Flaky {
        fn r<T>(&self, v: T) -> Ready<StoreResult<T>> {
            std::future::ready(if self.down.load(Ordering::SeqCst) {
                Err(StoreError::new(StoreErrorKind::Unavailable, "down"))
            } else {
                Ok(v)
            })
        }
    }

    impl SlotStore for Flaky {
        type Future<T: Send + 'static> = Ready<StoreResult<T>>;
        fn acquire(&self, k: &SubjectKey, l: u32, t: Millis) -> Self::Future<SlotDecision> {
            if self.down.load(Ordering::SeqCst) {
                return self.r(SlotDecision::Full { in_flight: 0 });
            }
            self.r(self.inner.acquire_now(k, l, t))
        }
        fn renew(&self, k: &SubjectKey, l: LeaseId, t: Millis) -> Self::Future<bool> {
            self.r(self.inner.renew_now(k, l, t))
        }
        fn release(&self, k: &SubjectKey, l: LeaseId) -> Self::Future<()> {
            self.inner.release_now(k, l);
            self.r(())
        }
        fn in_flight(&self, k: &SubjectKey) -> Self::Future<u32> {
            self.r(self.inner.in_flight_now(k))
        }
    }

    impl WindowStore for Flaky {
        type Future<T: Send + 'static> = Ready<StoreResult<T>>;
        fn admit(
            &self,
            k: &SubjectKey,
            s: Scope,
            p: &Arc<Policy>,
            d: &Demand,
        ) -> Self::Future<Admission> {
            if self.down.load(Ordering::SeqCst) {
                return self.r(Admission::Exceeded(crate::window::Exceeded {
                    limits: vec![],
                }));
            }
            self.r(self.inner.admit_now(k, s, p, d))
        }
        fn settle(
            &self,
            k: &SubjectKey,
            s: Scope,
            t: WindowTicket,
            o: Outcome,
        ) -> Self::Future<()> {
            self.inner.settle_now(k, s, &t, o);
            self.r(())
        }
        fn admit_all(
            &self,
            items: &[crate::store::JointItem],
        ) -> Self::Future<crate::store::JointAdmission> {
            if self.down.load(Ordering::SeqCst) {
                return self.r(crate::store::JointAdmission::Exceeded {
                    index: 0,
                    exceeded: crate::window::Exceeded { limits: vec![] },
                });
            }
            self.r(self.inner.admit_all_now(items))
        }
        fn settle_all(&self, items: Vec<crate::store::JointSettle>) -> Self::Future<()> {
            for it in items {
                self.inner
                    .settle_now(&it.key, it.scope, &it.ticket, it.outcome);
            }
            self.r(())
        }
        fn view(&self, k: &SubjectKey, s: Scope, p: &Arc<Policy>) -> Self::Future<Vec<LimitView>> {
            self.r(self.inner.view_now(k, s, p))
        }
    }

    fn now<F: Future + Unpin>(mut f: F) -> F::Output {
        match Pin::new(&mut f).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("pending"),
        }
    }

    fn setup() -> (LocalFallback<Flaky, ManualClock>, Arc<AtomicBool>) {
        let clock = ManualClock::new(1_000_000);
        let down = Arc::new(AtomicBool::new(false));
        let flaky = Flaky {
            inner: MemoryStore::with_clock(clock.clone()),
            down: down.clone(),
        };
        (
            LocalFallback::with_local(flaky, MemoryStore::with_clock(clock), 2, true, true),
            down,
        )
    }

    #[test]
    fn d4_local_mode_divides_limits_by_instances() {
        let (s, down) = setup();
        let k = SubjectKey::from("k");
        down.store(true, Ordering::SeqCst);
        // Concurrency 4 over 2 instances: 2 here.
        let a = now(s.acquire(&k, 4, 60_000)).unwrap();
        let b = now(s.acquire(&k, 4, 60_000)).unwrap();
        assert!(matches!(
            now(s.acquire(&k, 4, 60_000)).unwrap(),
            SlotDecision::Full { .. }
        ));
        assert_eq!(s.local_decisions(), 3);
        // Local leases go back to the local store even once the shared one is up.
        down.store(false, Ordering::SeqCst);
        for l in [a, b] {
            let SlotDecision::Acquired(id) = l else {
                panic!()
            };
            now(s.release(&k, id)).unwrap();
        }
        down.store(true, Ordering::SeqCst);
        assert!(matches!(
            now(s.acquire(&k, 4, 60_000)).unwrap(),
            SlotDecision::Acquired(_)
        ));

        // 10 requests a minute over 2 instances: 5 here.
        let p = Arc::new(Policy::default().with_requests(Tier::per_minute(10)));
        let mut admitted = Vec::new();
        for _ in 0..6 {
            if let Admission::Admitted(t) =
                now(s.admit(&k, Scope::Key, &p, &Demand::default())).unwrap()
            {
                assert!(t.fallback);
                admitted.push(t);
            }
        }
        assert_eq!(admitted.len(), 5);
        now(s.settle(&k, Scope::Key, admitted[0], Outcome::Refund)).unwrap();
        assert!(matches!(
            now(s.admit(&k, Scope::Key, &p, &Demand::default())).unwrap(),
            Admission::Admitted(_)
        ));
    }

    #[test]
    fn d4_shared_store_decides_while_up_and_other_kinds_pass_errors_through() {
        let clock = ManualClock::new(0);
        let down = Arc::new(AtomicBool::new(false));
        let flaky = Flaky {
            inner: MemoryStore::with_clock(clock.clone()),
            down: down.clone(),
        };
        let s = LocalFallback::with_local(flaky, MemoryStore::with_clock(clock), 2, false, true);
        let k = SubjectKey::from("k");
        assert!(
            matches!(now(s.acquire(&k, 1, 1000)).unwrap(), SlotDecision::Acquired(id) if id & LOCAL_LEASE == 0)
        );
        down.store(true, Ordering::SeqCst);
        assert!(
            now(s.acquire(&k, 1, 1000)).is_err(),
            "slots are not in local mode"
        );
        assert_eq!(s.local_decisions(), 0);
    }

    #[test]
    fn divide_never_below_one_and_keeps_unlimited() {
        let p = Policy::default()
            .with_concurrency(3)
            .with_requests(Tier::per_minute(1))
            .with_amount_cap(100)
            .with_rolling_rpm(7);
        let d = divide(&p, 4);
        assert_eq!(d.concurrency, 1);
        assert_eq!(d.requests[0].limit, 1);
        assert_eq!(d.amount_cap, Some(25));
        assert_eq!(d.rolling_rpm, Some(1));
        assert_eq!(divide(&Policy::default(), 4).concurrency, 0);
    }
}
