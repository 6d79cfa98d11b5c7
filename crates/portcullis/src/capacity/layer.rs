use super::queue::{Config, Shared, State, layer_clock};
use super::{CapacityConfig, CapacityQueue, CapacityStats};
use crate::failure::{FailureMode, FailureStats};
use crate::time::TokioClock;
use portcullis_core::{CapacityStore, Clock, QueueLimits};
use std::sync::Arc;
use std::time::Duration;

/// Applies [`CapacityQueue`] to a service: per-channel in-flight capacity and a
/// bounded, tenant-fair queue (Q1–Q5).
///
/// Built as every layer of this crate is (see the [crate docs](crate#how-a-layer-is-built)):
/// the builder methods set its config; its state — the queues, the lease renewals and
/// the counters — is made once by [`new`](Self::new), and every clone of the layer and
/// every service it builds (every route of an axum router, which calls `layer()` once
/// per route) shares it.
pub struct CapacityQueueLayer<St: CapacityStore> {
    config: Config<St>,
    state: Arc<State<St>>,
}

layer_parts!(CapacityQueueLayer<St: CapacityStore> => CapacityQueue, Shared);

impl<St: CapacityStore> CapacityQueueLayer<St> {
    /// A capacity layer on `store` with the default [`CapacityConfig`].
    pub fn new(store: St) -> Self {
        Self {
            state: Arc::new(State::new(&store)),
            config: Config {
                store,
                clock: layer_clock(TokioClock::default()),
                settings: CapacityConfig::default(),
            },
        }
    }

    fn with(mut self, f: impl FnOnce(&mut CapacityConfig)) -> Self {
        f(&mut self.config.settings);
        self
    }

    /// Uses another clock for the queue's time rules: how long a request waited, when
    /// its wait or deadline is over (Q3) and how long each lease is held (the service
    /// time behind Q2's choice of queue). Default: [`TokioClock`], which follows
    /// `tokio::time::pause` / `advance`. The queue's timers still wake on tokio's time;
    /// what they find is decided by this clock.
    pub fn clock<C: Clock>(mut self, clock: C) -> Self {
        self.config.clock = layer_clock(clock);
        self
    }

    /// Longest wait in the queue (Q3); default 10 s; zero = refuse at once.
    pub fn max_wait(self, d: Duration) -> Self {
        self.with(|c| c.max_wait = d)
    }
    /// Deadline of requests without an `x-portcullis-deadline-ms` header (Q3).
    pub fn default_deadline(self, d: Option<Duration>) -> Self {
        self.with(|c| c.default_deadline = d)
    }
    /// Caps of each channel's queue (Q4).
    pub fn queue_limits(self, limits: QueueLimits) -> Self {
        self.with(|c| c.limits = limits)
    }
    /// Lease TTL (D5); also sets the renewal period to a third of it.
    pub fn lease_ttl(self, ttl: Duration) -> Self {
        self.with(|c| {
            c.lease_ttl = ttl;
            c.renew_every = ttl / 3;
        })
    }
    /// Renewal period of a held lease (D5); default a third of the TTL.
    pub fn renew_every(self, d: Duration) -> Self {
        self.with(|c| c.renew_every = d)
    }
    /// Longest pause between a waiter's polls of its queue; zero = no polling.
    pub fn poll_interval(self, d: Duration) -> Self {
        self.with(|c| c.poll_interval = d)
    }
    /// How long a lease outlives a request abandoned mid-answer (the provider is
    /// still working until it notices); default 250 ms.
    pub fn abort_grace(self, d: Duration) -> Self {
        self.with(|c| c.abort_grace = d)
    }
    /// Retry-After of a 42910; default 1 s.
    pub fn retry_after(self, d: Duration) -> Self {
        self.with(|c| c.retry_after = d)
    }
    /// Failure mode when the store cannot answer (D4); default open.
    pub fn failure_mode(self, m: FailureMode) -> Self {
        self.with(|c| c.failure_mode = m)
    }

    /// The settings.
    pub fn settings(&self) -> &CapacityConfig {
        &self.config.settings
    }
    /// The store.
    pub fn store(&self) -> &St {
        &self.config.store
    }
    /// Requests waiting in channel `name`'s queue now.
    pub fn queued(&self, name: &str) -> usize {
        self.state.queued(name)
    }
    /// Counters of admissions, rejections and cancellations.
    pub fn stats(&self) -> CapacityStats {
        self.state.stats()
    }
    /// Store failures so far.
    pub fn failure_stats(&self) -> FailureStats {
        self.state.failures.snapshot()
    }
}
