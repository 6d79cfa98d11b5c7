//! The layer's shared state: one queue per channel, the lease guard and the hand-off
//! of a freed lease to the next waiter.

use super::CapacityConfig;
use crate::body::Hold;
use crate::failure::FailureCounters;
use crate::spawn::{Registration, Renew, Renewals, detach, poll_now};
use portcullis_core::capacity::Ticket;
use portcullis_core::{
    CapacityStore, ChannelRef, Clock, FairQueue, LeaseId, Millis, QueueFull, StoreResult,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::Context;
use tokio::sync::oneshot;

/// What waits in a channel's queue: the sending half of the waiter's hand-off.
type Waiter<St> = oneshot::Sender<CapacityGuard<St>>;

/// The layer's clock, behind a pointer: any [`Clock`] (a `ManualClock` in tests), while
/// the guard, ticket and future types stay free of a clock parameter.
pub(crate) type LayerClock = Arc<dyn Fn() -> Millis + Send + Sync>;

/// `clock` as the layer reads it.
pub(crate) fn layer_clock<C: Clock>(clock: C) -> LayerClock {
    Arc::new(move || clock.now())
}

/// What the builder methods set.
#[derive(Clone)]
pub(crate) struct Config<St> {
    pub(crate) store: St,
    /// "Now" for every time-dependent rule: waits, deadlines, service times.
    pub(crate) clock: LayerClock,
    pub(crate) settings: CapacityConfig,
}

/// What every clone of one layer and every service it builds shares — every route of
/// an axum router: made once, by [`CapacityQueueLayer::new`](super::CapacityQueueLayer::new).
pub(crate) struct State<St: CapacityStore> {
    pub(crate) failures: FailureCounters,
    pub(crate) counters: Counters,
    // Channels come from the operator's catalog: a bounded set, never evicted.
    channels: RwLock<HashMap<Arc<str>, Arc<Channel<St>>>>,
    renewals: Arc<Renewals<CapacityRenew<St>, ChannelLease>>,
}

/// What a service reads: the layer's config and state.
pub(crate) struct Shared<St: CapacityStore> {
    pub(crate) config: Config<St>,
    pub(crate) state: Arc<State<St>>,
}

/// Renews channel capacity leases (D5).
pub(crate) struct CapacityRenew<St> {
    store: St,
}

/// Names a channel lease for renewal, with the TTL it is renewed to.
pub(crate) type ChannelLease = (Arc<str>, LeaseId, Millis);

impl<St: CapacityStore> Renew for CapacityRenew<St> {
    type Id = ChannelLease;
    fn renew(
        &self,
        (name, lease, ttl): &Self::Id,
    ) -> impl std::future::Future<Output = StoreResult<bool>> + Send + 'static {
        self.store.renew(name, *lease, *ttl)
    }
}

impl<St: CapacityStore> State<St> {
    /// Waiters of channel `name` now.
    pub(crate) fn queued(&self, name: &str) -> usize {
        self.channels
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .map_or(0, |c| c.queued())
    }

    pub(crate) fn stats(&self) -> CapacityStats {
        let queued = self
            .channels
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|c| c.queued())
            .sum();
        self.counters.load(queued)
    }

    /// The state of a layer on `store`: no channel, no lease, every counter at zero.
    pub(crate) fn new(store: &St) -> Self {
        Self {
            failures: FailureCounters::default(),
            counters: Counters::default(),
            channels: RwLock::default(),
            renewals: Renewals::new(CapacityRenew {
                store: store.clone(),
            }),
        }
    }
}

impl<St: CapacityStore> Shared<St> {
    /// The lease TTL, in the store's milliseconds.
    pub(crate) fn ttl(&self) -> Millis {
        portcullis_core::clock::millis(self.config.settings.lease_ttl)
    }

    /// The layer's clock now.
    pub(crate) fn now(&self) -> Millis {
        (self.config.clock)()
    }

    /// The state of channel `c`, created at its first use; follows `c`'s capacity.
    pub(crate) fn channel(&self, c: &ChannelRef) -> Arc<Channel<St>> {
        let found = self
            .state
            .channels
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&c.name)
            .cloned();
        let ch = match found {
            Some(ch) => ch,
            None => self
                .state
                .channels
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .entry(c.name.clone())
                .or_insert_with(|| Arc::new(Channel::new(c, self.config.settings)))
                .clone(),
        };
        if ch.capacity() != c.capacity {
            ch.capacity.store(c.capacity, Ordering::Relaxed);
        }
        ch
    }
}

counted_stats! {
    /// What a [`CapacityQueueLayer`](super::CapacityQueueLayer) has done so far.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct CapacityStats counted by Counters {
        /// Requests admitted on a channel, with or without waiting.
        admitted: AtomicU64,
        /// Of those, requests admitted after queueing.
        admitted_after_wait: AtomicU64,
        /// 42910 after `max_wait` (or with `max_wait` zero).
        rejected_busy: AtomicU64,
        /// 42910 at once: a queue cap was reached (Q4).
        rejected_queue_full: AtomicU64,
        /// 50401: the request's deadline passed while queued.
        rejected_deadline: AtomicU64,
        /// Waiters whose request was dropped (client gone) while queued.
        cancelled: AtomicU64,
    } and {
        /// Waiters in all queues now.
        queued: usize,
    }
}

impl Counters {
    pub(crate) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// One channel: its capacity, its fair queue and its average service time.
pub(crate) struct Channel<St: CapacityStore> {
    pub(crate) name: Arc<str>,
    capacity: AtomicU32,
    queue: Mutex<FairQueue<Waiter<St>>>,
    /// `queue.len()`, written under the queue's lock, readable without it.
    queued: AtomicUsize,
    /// Moving average of how long a lease is held, µs; 0 = unknown yet.
    avg_service_us: AtomicU64,
}

impl<St: CapacityStore> Channel<St> {
    fn new(c: &ChannelRef, cfg: CapacityConfig) -> Self {
        Self {
            name: c.name.clone(),
            capacity: AtomicU32::new(c.capacity),
            queue: Mutex::new(FairQueue::new(cfg.limits)),
            queued: AtomicUsize::new(0),
            avg_service_us: AtomicU64::new(0),
        }
    }

    pub(crate) fn capacity(&self) -> u32 {
        self.capacity.load(Ordering::Relaxed)
    }

    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// Average lease hold time in µs, `None` before the first release.
    pub(crate) fn avg_service_us(&self) -> Option<u64> {
        Some(self.avg_service_us.load(Ordering::Relaxed)).filter(|&v| v > 0)
    }

    fn with_queue<R>(&self, f: impl FnOnce(&mut FairQueue<Waiter<St>>) -> R) -> R {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut q);
        self.queued.store(q.len(), Ordering::SeqCst);
        r
    }

    pub(crate) fn push(
        &self,
        tenant: &Arc<str>,
        weight: u32,
        waiter: Waiter<St>,
    ) -> Result<Ticket, QueueFull> {
        self.with_queue(|q| q.push(tenant.clone(), weight, waiter))
    }

    /// Takes a waiter out; false if it was not queued any more.
    pub(crate) fn remove(&self, ticket: &Ticket) -> bool {
        // The sender is dropped after the lock is released.
        let removed = self.with_queue(|q| q.remove(ticket));
        removed.is_some()
    }

    fn pop(&self) -> Option<Waiter<St>> {
        self.with_queue(|q| q.pop()).map(|(_, w)| w)
    }

    fn record_service(&self, held_ms: Millis) {
        let us = held_ms.saturating_mul(1000).max(1);
        let old = self.avg_service_us.load(Ordering::Relaxed);
        let new = if old == 0 { us } else { (old * 7 + us) / 8 };
        // A lost update under a race only loses one sample of an estimate.
        self.avg_service_us.store(new.max(1), Ordering::Relaxed);
    }
}

/// A place in a channel's queue. Dropping it (the request future dropped: the client
/// went away) takes the waiter out of the queue at once (Q3).
pub(crate) struct QueueTicket<St: CapacityStore> {
    pub(crate) channel: Arc<Channel<St>>,
    pub(crate) index: usize,
    ticket: Ticket,
    shared: Arc<Shared<St>>,
    armed: bool,
}

impl<St: CapacityStore> QueueTicket<St> {
    pub(crate) fn new(
        shared: Arc<Shared<St>>,
        channel: Arc<Channel<St>>,
        index: usize,
        ticket: Ticket,
    ) -> Self {
        Self {
            channel,
            index,
            ticket,
            shared,
            armed: true,
        }
    }

    /// The waiter was served: nothing to take out.
    pub(crate) fn served(&mut self) {
        self.armed = false;
    }

    /// Leaves the queue (wait over); false if a lease was already handed over.
    pub(crate) fn leave(&mut self) -> bool {
        self.armed = false;
        self.channel.remove(&self.ticket)
    }

    /// Asks the store for a lease for the queue's next waiter (a poll).
    pub(crate) fn nudge(&self) {
        dispatch(&self.shared, &self.channel);
    }
}

impl<St: CapacityStore> Drop for QueueTicket<St> {
    fn drop(&mut self) {
        if self.armed && self.channel.remove(&self.ticket) {
            Counters::bump(&self.shared.state.counters.cancelled);
        }
    }
}

/// A held capacity lease: released when dropped (end of the response body, an error,
/// a disconnect — L3), renewed while its request waits or streams (D5). Releasing hands the freed capacity to
/// the channel's next waiter.
pub struct CapacityGuard<St: CapacityStore> {
    shared: Arc<Shared<St>>,
    channel: Arc<Channel<St>>,
    lease: LeaseId,
    /// When (on the layer's clock) a request started using the lease; `None` while it is
    /// being handed over.
    started: Option<Millis>,
    registration: Option<Registration<CapacityRenew<St>, ChannelLease>>,
    /// The answer reached its end: release at once.
    finished: bool,
    _in_flight: crate::gauge::InFlight,
}

impl<St: CapacityStore> CapacityGuard<St> {
    pub(crate) fn new(shared: Arc<Shared<St>>, channel: Arc<Channel<St>>, lease: LeaseId) -> Self {
        Self {
            shared,
            channel,
            lease,
            started: None,
            registration: None,
            finished: false,
            _in_flight: crate::gauge::InFlight::enter(portcullis_core::LayerKind::CapacityQueue),
        }
    }

    /// Marks the lease as serving a request from now (for the service-time average).
    pub(crate) fn start(mut self) -> Self {
        self.started = Some(self.shared.now());
        self
    }

    /// The lease held.
    pub fn lease(&self) -> LeaseId {
        self.lease
    }

    /// The channel it is held on.
    pub fn channel(&self) -> &str {
        &self.channel.name
    }
}

impl<St: CapacityStore> Hold for CapacityGuard<St> {
    fn finished(&mut self) {
        self.finished = true;
    }
    fn keep_alive(&mut self, _cx: &mut Context<'_>) {
        if self.registration.is_none() {
            self.registration = self.shared.state.renewals.register(
                (self.channel.name.clone(), self.lease, self.shared.ttl()),
                self.shared.config.settings.renew_every,
            );
        }
    }
}

impl<St: CapacityStore> Drop for CapacityGuard<St> {
    fn drop(&mut self) {
        if let Some(t) = self.started {
            self.channel
                .record_service(self.shared.now().saturating_sub(t));
        }
        let grace = self.shared.config.settings.abort_grace;
        let abandoned = self.started.is_some() && !self.finished && !grace.is_zero();
        if abandoned {
            // The request was abandoned while the provider may still be working on
            // it: keep its place until the provider can have noticed.
            if let Ok(h) = tokio::runtime::Handle::try_current() {
                let (shared, channel, lease) =
                    (self.shared.clone(), self.channel.clone(), self.lease);
                h.spawn(async move {
                    tokio::time::sleep(grace).await;
                    release(&shared, &channel, lease);
                });
                return;
            }
        }
        release(&self.shared, &self.channel, self.lease);
    }
}

fn release<St: CapacityStore>(
    shared: &Arc<Shared<St>>,
    channel: &Arc<Channel<St>>,
    lease: LeaseId,
) {
    detach(
        shared.config.store.release(&channel.name, lease),
        "capacity release",
    );
    dispatch(shared, channel);
}

/// While `channel` has waiters, takes leases from the store and hands each to the
/// queue's next waiter in fair order, until the store says the channel is full.
///
/// Runs after every release, after every enqueue (so a release that slipped in between
/// a request's failed try and its enqueue is not lost) and on every waiter's poll. The
/// lease is acquired *before* a waiter is picked, so whoever runs this never takes
/// capacity for itself; a lease with nobody left to take it is released again (and
/// that release runs this once more, for a waiter that may have come meanwhile). With a
/// store that answers at once (in memory) all of it happens in place; otherwise the
/// rest runs on a spawned task.
pub(crate) fn dispatch<St: CapacityStore>(shared: &Arc<Shared<St>>, ch: &Arc<Channel<St>>) {
    loop {
        if ch.queued() == 0 {
            return;
        }
        let mut answer = shared
            .config
            .store
            .try_acquire(&ch.name, ch.capacity(), shared.ttl());
        match poll_now(&mut answer) {
            Some(a) => {
                if !grant(shared, ch, a) {
                    return;
                }
            }
            None => {
                if let Ok(h) = tokio::runtime::Handle::try_current() {
                    let (shared, ch) = (shared.clone(), ch.clone());
                    h.spawn(async move {
                        if grant(&shared, &ch, answer.await) {
                            dispatch(&shared, &ch);
                        }
                    });
                }
                // Without a runtime the waiters' own polls continue.
                return;
            }
        }
    }
}

/// Hands a freshly acquired lease over; true if another may be free.
fn grant<St: CapacityStore>(
    shared: &Arc<Shared<St>>,
    ch: &Arc<Channel<St>>,
    answer: StoreResult<Option<LeaseId>>,
) -> bool {
    match answer {
        Ok(Some(lease)) => {
            hand_off(ch, CapacityGuard::new(shared.clone(), ch.clone(), lease));
            true
        }
        Ok(None) => false,
        Err(e) => {
            // The waiters poll again, and time out by their own deadline (D4: no
            // request hangs on a dead store).
            tracing::warn!(error = %e, channel = %ch.name, "capacity store failed while serving the queue");
            false
        }
    }
}

fn hand_off<St: CapacityStore>(ch: &Channel<St>, mut guard: CapacityGuard<St>) {
    while let Some(waiter) = ch.pop() {
        match waiter.send(guard) {
            Ok(()) => return,
            // The waiter left between being popped and being served: the next one.
            Err(g) => guard = g,
        }
    }
    // Nobody left: `guard` is dropped here, outside every lock, and released.
}
