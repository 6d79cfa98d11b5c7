//! Per-channel capacity and the fair queue (Q1–Q5), as plain types.
//!
//! - [`ChannelRef`], [`Candidates`], [`Chosen`], [`TenantWeight`]: what the capacity
//!   layer reads from and writes into a request's extensions.
//! - [`CapacityStore`]: per-channel in-flight leases (Q1, D5), one call per decision,
//!   defined with the other store traits in [`store`](crate::store) and re-exported
//!   here.
//! - [`FairQueue`]: waiters grouped per tenant and served by deficit round-robin with
//!   per-tenant weights, with caps on total depth and per-tenant depth (Q4). It knows
//!   nothing about tokio: a waiter is any value `T` (the layer stores a oneshot sender).
//! - [`expected_wait_us`]: the estimate used to pick the queue "expected to free first"
//!   when every candidate is full (Q2).

pub use crate::store::CapacityStore;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

/// One upstream channel as the capacity layer sees it: a name (unique in the
/// catalog) and its maximum number of in-flight requests (Q1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ChannelRef {
    /// The channel's name, the key its leases are kept under.
    pub name: Arc<str>,
    /// Maximum in-flight requests; 0 = unlimited (no lease is taken).
    pub capacity: u32,
}

impl ChannelRef {
    /// A channel named `name` with room for `capacity` in-flight requests (0 = unlimited).
    pub fn new(name: impl Into<Arc<str>>, capacity: u32) -> Self {
        Self {
            name: name.into(),
            capacity,
        }
    }
    /// True when the channel has no capacity limit.
    pub fn is_unlimited(&self) -> bool {
        self.capacity == 0
    }
}

/// Request extension: the channels that may serve this request, most preferred first
/// (the proxy fills it from its catalog, after routing / upstream limits). The capacity
/// layer tries them in order (Q2). A request without it passes through untouched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidates(pub Arc<[ChannelRef]>);

impl Candidates {
    /// Candidates in preference order.
    pub fn new(channels: impl IntoIterator<Item = ChannelRef>) -> Self {
        channels.into_iter().collect()
    }
    /// The candidates, most preferred first.
    pub fn channels(&self) -> &[ChannelRef] {
        &self.0
    }
}

impl FromIterator<ChannelRef> for Candidates {
    fn from_iter<I: IntoIterator<Item = ChannelRef>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

/// Request extension written by the capacity layer: the channel the request was
/// admitted on. The inner service (the forwarder) sends to this channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen(pub ChannelRef);

/// Request extension: the weight of the request's tenant in the fair queue (Q4), for
/// example from its plan. Default 1; 0 counts as 1 (no tenant starves) and weights
/// above [`MAX_WEIGHT`] count as [`MAX_WEIGHT`] (so one tenant's turn stays bounded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TenantWeight(pub u32);

impl Default for TenantWeight {
    fn default() -> Self {
        Self(1)
    }
}

/// Largest effective [`TenantWeight`].
pub const MAX_WEIGHT: u32 = 1000;

impl TenantWeight {
    /// The weight the queue uses: clamped to `1..=MAX_WEIGHT`.
    pub fn effective(self) -> u32 {
        self.0.clamp(1, MAX_WEIGHT)
    }
}

/// Expected wait, in µs, for a request joining a channel's queue behind `queued`
/// waiters: `(queued + 1) × avg_service_us / capacity` (Q2).
///
/// Each of the `capacity` in-flight requests frees its lease after about one average
/// service time, so the queue drains at `capacity / avg_service` requests per unit of
/// time. The capacity layer joins the candidate queue with the smallest estimate,
/// earliest candidate first on ties. `capacity` 0 (unlimited) never waits.
pub fn expected_wait_us(queued: usize, capacity: u32, avg_service_us: u64) -> u64 {
    if capacity == 0 {
        return 0;
    }
    (queued as u64 + 1).saturating_mul(avg_service_us.max(1)) / u64::from(capacity)
}

/// Caps of a [`FairQueue`] (Q4). Over a cap the request is refused at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueLimits {
    /// Most waiters in the queue in total.
    pub max_depth: usize,
    /// Most waiters of one tenant.
    pub max_per_tenant: usize,
}

impl QueueLimits {
    /// At most `max_depth` waiters in a queue, `max_per_tenant` of one tenant.
    pub fn new(max_depth: usize, max_per_tenant: usize) -> Self {
        Self {
            max_depth,
            max_per_tenant,
        }
    }
}

impl Default for QueueLimits {
    /// 1024 waiters per queue, 128 per tenant.
    fn default() -> Self {
        Self {
            max_depth: 1024,
            max_per_tenant: 128,
        }
    }
}

/// Why a waiter was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueFull {
    /// The queue holds `max_depth` waiters.
    Depth,
    /// The tenant holds `max_per_tenant` waiters.
    Tenant,
}

impl fmt::Display for QueueFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QueueFull::Depth => "queue depth cap reached",
            QueueFull::Tenant => "per-tenant queue cap reached",
        })
    }
}

impl std::error::Error for QueueFull {}

/// A place in a [`FairQueue`]: what [`FairQueue::remove`] needs to take a waiter out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ticket {
    id: u64,
    tenant: Arc<str>,
}

impl Ticket {
    /// The waiter's tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
}

struct TenantQueue<T> {
    waiters: VecDeque<(u64, T)>,
    weight: u32,
    /// Requests the tenant may still take in its current turn.
    deficit: u32,
}

/// Waiters grouped per tenant and served by deficit round-robin (Q4).
///
/// Every tenant with waiters is in a ring. The tenant at the front gets a turn of
/// `weight` requests (its quantum; every request costs 1); after its turn, or when it
/// has no more waiters, the next tenant's turn begins. A tenant that empties its queue
/// leaves the ring and forfeits what was left of its turn (DRR), so idle time is not
/// banked. While several tenants wait, each is served `weight / Σ weights` of the
/// admissions, within one turn; a tenant waits at most one round (`Σ weights` of the
/// others) between two of its admissions, so no tenant starves. Within a tenant,
/// waiters are first in, first out.
///
/// All operations are O(1) except [`remove`](Self::remove), which is O(waiters of the
/// tenant) plus O(waiting tenants) when the tenant leaves the ring; both are bounded by
/// the [`QueueLimits`].
///
/// ```
/// use portcullis_core::capacity::{FairQueue, QueueLimits};
/// let mut q = FairQueue::new(QueueLimits::default());
/// for i in 0..4 {
///     q.push("a", 3, ("a", i)).unwrap();
///     q.push("b", 1, ("b", i)).unwrap();
/// }
/// let order: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(_, (t, _))| t).collect();
/// assert_eq!(order, ["a", "a", "a", "b", "a", "b", "b", "b"]);
/// ```
pub struct FairQueue<T> {
    tenants: HashMap<Arc<str>, TenantQueue<T>, foldhash::fast::RandomState>,
    ring: VecDeque<Arc<str>>,
    len: usize,
    next_id: u64,
    limits: QueueLimits,
}

impl<T> fmt::Debug for FairQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairQueue")
            .field("len", &self.len)
            .field("tenants", &self.ring)
            .field("limits", &self.limits)
            .finish()
    }
}

impl<T> FairQueue<T> {
    /// An empty queue with these caps.
    pub fn new(limits: QueueLimits) -> Self {
        Self {
            tenants: HashMap::default(),
            ring: VecDeque::new(),
            len: 0,
            next_id: 0,
            limits,
        }
    }

    /// The caps.
    pub fn limits(&self) -> QueueLimits {
        self.limits
    }

    /// Waiters in the queue.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nobody waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Waiters of `tenant`.
    pub fn tenant_len(&self, tenant: &str) -> usize {
        self.tenants.get(tenant).map_or(0, |t| t.waiters.len())
    }

    /// Tenants with waiters.
    pub fn tenants(&self) -> usize {
        self.ring.len()
    }

    /// Queues `item` for `tenant` with `weight` (clamped to `1..=MAX_WEIGHT`; the
    /// latest weight of a tenant wins). Refused without queuing when a cap is reached.
    pub fn push(
        &mut self,
        tenant: impl Into<Arc<str>> + AsRef<str>,
        weight: u32,
        item: T,
    ) -> Result<Ticket, QueueFull> {
        if self.len >= self.limits.max_depth {
            return Err(QueueFull::Depth);
        }
        let weight = TenantWeight(weight).effective();
        let id = self.next_id;
        let tenant: Arc<str> = match self.tenants.get_key_value(tenant.as_ref()) {
            Some((k, q)) => {
                if q.waiters.len() >= self.limits.max_per_tenant {
                    return Err(QueueFull::Tenant);
                }
                k.clone()
            }
            None => {
                if self.limits.max_per_tenant == 0 {
                    return Err(QueueFull::Tenant);
                }
                let k: Arc<str> = tenant.into();
                self.ring.push_back(k.clone());
                self.tenants.insert(
                    k.clone(),
                    TenantQueue {
                        waiters: VecDeque::new(),
                        weight,
                        deficit: 0,
                    },
                );
                k
            }
        };
        let q = self.tenants.get_mut(&tenant).expect("tenant just found");
        q.weight = weight;
        q.waiters.push_back((id, item));
        self.next_id += 1;
        self.len += 1;
        Ok(Ticket { id, tenant })
    }

    /// Takes the next waiter in fair order.
    pub fn pop(&mut self) -> Option<(Ticket, T)> {
        let tenant = self.ring.front()?.clone();
        let q = self
            .tenants
            .get_mut(&tenant)
            .expect("every tenant in the ring has a queue");
        if q.deficit == 0 {
            q.deficit = q.weight;
        }
        let (id, item) = q
            .waiters
            .pop_front()
            .expect("a tenant in the ring has waiters");
        q.deficit -= 1;
        self.len -= 1;
        if q.waiters.is_empty() {
            self.ring.pop_front();
            self.tenants.remove(&tenant);
        } else if q.deficit == 0 {
            self.ring.rotate_left(1);
        }
        Some((Ticket { id, tenant }, item))
    }

    /// Takes a waiter out (its request was dropped or timed out). `None` if it is not
    /// queued any more (already popped or removed).
    pub fn remove(&mut self, ticket: &Ticket) -> Option<T> {
        let q = self.tenants.get_mut(&ticket.tenant)?;
        let i = q.waiters.iter().position(|(id, _)| *id == ticket.id)?;
        let (_, item) = q.waiters.remove(i).expect("position just found");
        self.len -= 1;
        if q.waiters.is_empty() {
            self.tenants.remove(&ticket.tenant);
            if let Some(p) = self.ring.iter().position(|t| *t == ticket.tenant) {
                self.ring.remove(p);
            }
        }
        Some(item)
    }

    /// Whether the waiter is still queued.
    pub fn contains(&self, ticket: &Ticket) -> bool {
        self.tenants
            .get(&ticket.tenant)
            .is_some_and(|q| q.waiters.iter().any(|(id, _)| *id == ticket.id))
    }
}

/// The capacity-store conformance suite: what every [`CapacityStore`] must decide the
/// same way (Q1, D5). A store proves itself by implementing [`Harness`](conformance::Harness)
/// and calling [`run_all`](conformance::run_all) (or each check) from its own tests.
#[cfg(any(test, feature = "conformance"))]
pub mod conformance {
    use super::CapacityStore;
    use std::time::Duration;

    /// What a store implementation provides to run the suite. Lease TTLs are 2 s and
    /// time moves in steps of at least 500 ms, so a store on real time can run it.
    #[allow(async_fn_in_trait)]
    pub trait Harness {
        /// The store under test.
        type Store: CapacityStore;
        /// A store with no state.
        async fn store(&self) -> Self::Store;
        /// Moves the stores' time forward by `d`.
        async fn advance(&self, d: Duration);
    }

    const TTL: u64 = 2_000;

    /// Runs every check.
    pub async fn run_all<H: Harness>(h: &H) {
        q1_capacity_enforced_zero_unlimited(h).await;
        q1_release_exactly_once_and_per_channel(h).await;
        d5_expired_lease_reclaimed_renewed_lease_kept(h).await;
    }

    /// Q1: at most `capacity` live leases per channel; capacity 0 = unlimited.
    pub async fn q1_capacity_enforced_zero_unlimited<H: Harness>(h: &H) {
        let s = h.store().await;
        let a = s.try_acquire("q1-a", 2, TTL).await.unwrap();
        let b = s.try_acquire("q1-a", 2, TTL).await.unwrap();
        assert!(a.is_some() && b.is_some() && a != b);
        assert_eq!(s.try_acquire("q1-a", 2, TTL).await.unwrap(), None);
        assert_eq!(s.in_flight("q1-a").await.unwrap(), 2);
        for _ in 0..50 {
            assert!(s.try_acquire("q1-u", 0, TTL).await.unwrap().is_some());
        }
    }

    /// Q1 / L3: a release frees one lease exactly once; channels are independent.
    pub async fn q1_release_exactly_once_and_per_channel<H: Harness>(h: &H) {
        let s = h.store().await;
        let a = s.try_acquire("r-a", 1, TTL).await.unwrap().unwrap();
        assert!(s.try_acquire("r-b", 1, TTL).await.unwrap().is_some());
        assert_eq!(s.try_acquire("r-a", 1, TTL).await.unwrap(), None);
        s.release("r-a", a).await.unwrap();
        assert_eq!(s.in_flight("r-a").await.unwrap(), 0);
        let c = s.try_acquire("r-a", 1, TTL).await.unwrap().unwrap();
        // A stale second release of `a` must not free `c`.
        s.release("r-a", a).await.unwrap();
        assert_eq!(s.in_flight("r-a").await.unwrap(), 1);
        assert_eq!(s.try_acquire("r-a", 1, TTL).await.unwrap(), None);
        s.release("r-a", c).await.unwrap();
        assert_eq!(s.in_flight("r-a").await.unwrap(), 0);
        assert_eq!(s.in_flight("r-b").await.unwrap(), 1);
    }

    /// D5: a lease not renewed expires after its TTL and is reclaimed at the next
    /// acquisition; a renewed one is kept.
    pub async fn d5_expired_lease_reclaimed_renewed_lease_kept<H: Harness>(h: &H) {
        let s = h.store().await;
        let crashed = s.try_acquire("ttl-a", 1, TTL).await.unwrap().unwrap();
        let live = s.try_acquire("ttl-b", 1, TTL).await.unwrap().unwrap();
        h.advance(Duration::from_millis(1_000)).await;
        assert!(s.renew("ttl-b", live, TTL).await.unwrap());
        h.advance(Duration::from_millis(1_500)).await;
        assert!(s.try_acquire("ttl-a", 1, TTL).await.unwrap().is_some());
        assert!(!s.renew("ttl-a", crashed, TTL).await.unwrap());
        assert_eq!(s.try_acquire("ttl-b", 1, TTL).await.unwrap(), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::memory::MemoryStore;
    use crate::subject::SubjectKey;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = pin!(f);
        match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("an in-memory store future was not ready"),
        }
    }

    struct MemoryHarness(ManualClock);

    impl conformance::Harness for MemoryHarness {
        type Store = MemoryStore<ManualClock>;
        async fn store(&self) -> Self::Store {
            MemoryStore::with_clock(self.0.clone())
        }
        async fn advance(&self, d: Duration) {
            self.0.advance(d);
        }
    }

    #[test]
    fn q1_memory_store_conformance() {
        block_on(conformance::run_all(&MemoryHarness(ManualClock::new(0))));
    }

    #[test]
    fn q1_channel_leases_do_not_collide_with_subject_slots() {
        use crate::SlotStore;
        let s = MemoryStore::with_clock(ManualClock::new(0));
        assert!(
            block_on(CapacityStore::try_acquire(&s, "k", 1, 1000))
                .unwrap()
                .is_some()
        );
        let slot = block_on(SlotStore::acquire(&s, &SubjectKey::from("k"), 1, 1000)).unwrap();
        assert!(matches!(slot, crate::SlotDecision::Acquired(_)));
    }

    fn drain<T>(q: &mut FairQueue<T>) -> Vec<T> {
        std::iter::from_fn(|| q.pop()).map(|(_, t)| t).collect()
    }

    #[test]
    fn q4_drr_serves_by_weight_and_fifo_within_tenant() {
        let mut q = FairQueue::new(QueueLimits::default());
        for i in 0..30 {
            q.push("a", 3, ('a', i)).unwrap();
            q.push("b", 1, ('b', i)).unwrap();
        }
        let order = drain(&mut q);
        // While both wait: 3 of a, then 1 of b.
        let first: String = order[..40].iter().map(|(t, _)| *t).collect();
        assert_eq!(first, "aaab".repeat(10));
        for t in ['a', 'b'] {
            let seq: Vec<_> = order
                .iter()
                .filter(|(x, _)| *x == t)
                .map(|(_, i)| *i)
                .collect();
            assert_eq!(seq, (0..30).collect::<Vec<_>>(), "FIFO within {t}");
        }
        assert!(q.is_empty() && q.tenants() == 0);
    }

    #[test]
    fn q4_no_starvation_bound() {
        // A tenant of weight 1 against one of MAX_WEIGHT waits at most one turn.
        let mut q = FairQueue::new(QueueLimits {
            max_depth: 10_000,
            max_per_tenant: 5_000,
        });
        for i in 0..5_000 {
            q.push("big", u32::MAX, i).unwrap();
        }
        q.push("small", 1, usize::MAX).unwrap();
        let pos = drain(&mut q).iter().position(|&i| i == usize::MAX).unwrap();
        assert_eq!(pos, MAX_WEIGHT as usize);
    }

    #[test]
    fn q4_zero_weight_counts_as_one() {
        let mut q = FairQueue::new(QueueLimits::default());
        for i in 0..3 {
            q.push("a", 0, ('a', i)).unwrap();
            q.push("b", 0, ('b', i)).unwrap();
        }
        let order: String = drain(&mut q).iter().map(|(t, _)| *t).collect();
        assert_eq!(order, "ababab");
    }

    #[test]
    fn q4_caps_refuse_without_queuing() {
        let mut q = FairQueue::new(QueueLimits {
            max_depth: 3,
            max_per_tenant: 2,
        });
        q.push("a", 1, 1).unwrap();
        q.push("a", 1, 2).unwrap();
        assert_eq!(q.push("a", 1, 3), Err(QueueFull::Tenant));
        q.push("b", 1, 4).unwrap();
        assert_eq!(q.push("c", 1, 5), Err(QueueFull::Depth));
        assert_eq!(q.len(), 3);
        q.pop();
        q.push("c", 1, 6).unwrap();
    }

    #[test]
    fn q3_removed_waiter_leaves_at_once_and_tenant_leaves_ring() {
        let mut q = FairQueue::new(QueueLimits::default());
        let a1 = q.push("a", 1, 1).unwrap();
        let b1 = q.push("b", 1, 2).unwrap();
        let a2 = q.push("a", 1, 3).unwrap();
        assert_eq!(q.remove(&b1), Some(2));
        assert_eq!(q.len(), 2);
        assert_eq!(q.tenants(), 1);
        assert_eq!(q.remove(&b1), None, "removing twice is harmless");
        assert!(q.contains(&a2));
        assert_eq!(q.remove(&a1), Some(1));
        assert_eq!(drain(&mut q), [3]);
        assert_eq!(q.remove(&a2), None, "popped waiters are gone");
    }

    #[test]
    fn q4_tenant_emptying_forfeits_its_turn() {
        let mut q = FairQueue::new(QueueLimits::default());
        q.push("a", 3, 'a').unwrap();
        q.push("b", 1, 'b').unwrap();
        assert_eq!(q.pop().unwrap().1, 'a');
        // `a` left the ring; coming back it queues behind `b`.
        q.push("a", 3, 'A').unwrap();
        assert_eq!(drain(&mut q), ['b', 'A']);
    }

    #[test]
    fn q2_expected_wait_prefers_short_queue_per_capacity() {
        assert_eq!(expected_wait_us(0, 0, 1_000), 0);
        assert_eq!(expected_wait_us(0, 2, 1_000), 500);
        assert!(expected_wait_us(3, 4, 1_000) < expected_wait_us(3, 2, 1_000));
        assert!(expected_wait_us(1, 1, 100) < expected_wait_us(0, 1, 1_000));
    }
}
