use super::UpstreamLimit;
use crate::failure::{FailureCounters, FailureMode, FailureStats};
use crate::spawn::detach;
use crate::time::TokioClock;
use portcullis_core::upstream::UpstreamRegistry;
use portcullis_core::{CapacityTake, Clock, JointAdmission, JointItem, StoreError, WindowStore};
use portcullis_dialects::{RateReader, RateSignal};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tower_layer::Layer;

/// Settings of the upstream limit layer, set one by one with its builder methods
/// ([`failure_mode`](UpstreamLimitLayer::failure_mode),
/// [`default_cooldown`](UpstreamLimitLayer::default_cooldown)) or all at once with
/// [`config`](UpstreamLimitLayer::config): start from `UpstreamConfig::default()` and
/// set the fields you need (the struct may gain fields).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct UpstreamConfig {
    /// What to do when the store cannot answer (D4); default open.
    pub failure_mode: FailureMode,
    /// Cooldown after a provider 429 that names no Retry-After or reset.
    pub default_cooldown: Duration,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            failure_mode: FailureMode::Open,
            default_cooldown: Duration::from_secs(1),
        }
    }
}

/// Counters of the upstream limit layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UpstreamStats {
    /// Provider 429s while the local model had room (U3).
    pub deviations: u64,
    /// Cooldowns set from provider signals.
    pub cooldowns: u64,
    /// Requests refused because no candidate was usable (U4).
    pub refused: u64,
    /// Store failures.
    pub failures: FailureStats,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) deviations: AtomicU64,
    pub(crate) cooldowns: AtomicU64,
    pub(crate) refused: AtomicU64,
}

/// What every request of one layer shares. Copied only when a builder method changes a
/// layer whose settings are already shared (see [`UpstreamLimitLayer`]); the counters
/// are behind their own `Arc`s, so the copies still count together.
#[derive(Clone)]
pub(crate) struct Shared<St, C> {
    pub(crate) store: St,
    pub(crate) registry: Arc<UpstreamRegistry>,
    pub(crate) clock: C,
    pub(crate) config: UpstreamConfig,
    pub(crate) failures: Arc<FailureCounters>,
    pub(crate) counters: Arc<Counters>,
    /// Set by [`UpstreamLimitLayer::join_capacity`].
    pub(crate) capacity: Option<CapacityJoin>,
    /// Reads a provider answer's rate headers (U3); [`RateSignal::read`] by default.
    pub(crate) rate_reader: RateReader,
}

/// The answer of a windows-and-capacity decision.
pub(crate) type ChannelFuture =
    Pin<Box<dyn Future<Output = Result<(JointAdmission, CapacityTake), StoreError>> + Send>>;

/// Decides a channel's windows with a capacity lease on it (see `crate::joint`).
type ChannelJoinFn = dyn Fn(&[JointItem], &str, u32) -> ChannelFuture + Send + Sync;

/// What [`UpstreamLimitLayer::join_capacity`] sets.
#[derive(Clone)]
pub(crate) struct CapacityJoin {
    pub(crate) join: Arc<ChannelJoinFn>,
    pub(crate) release: Arc<crate::joint::ReleaseChannel>,
}

/// Applies [`UpstreamLimit`] to a service. See the [module docs](super).
///
/// Built with [`new`](Self::new) and the builder methods. Every clone of the layer and
/// every service it builds shares one set of settings and one set of counters. A
/// builder method is copy on write: called on a layer that was cloned or has built
/// services, it changes that layer alone, and services built before keep their
/// settings; all of them still count into the same [`stats`](Self::stats).
pub struct UpstreamLimitLayer<St, C = TokioClock> {
    shared: Arc<Shared<St, C>>,
}

handle_clone!(impl<St, C> Clone for UpstreamLimitLayer<St, C> { shared });

impl<St: WindowStore> UpstreamLimitLayer<St, TokioClock> {
    /// Provider limits of the channels in `registry`, counted in `store`, with the
    /// default [`UpstreamConfig`], tokio's clock for cooldowns and the vendors' rate
    /// headers read by [`RateSignal::read`].
    pub fn new(store: St, registry: Arc<UpstreamRegistry>) -> Self {
        Self {
            shared: Arc::new(Shared {
                store,
                registry,
                clock: TokioClock::default(),
                config: UpstreamConfig::default(),
                failures: Arc::default(),
                counters: Arc::default(),
                capacity: None,
                rate_reader: RateSignal::read,
            }),
        }
    }
}

impl<St: WindowStore, C: Clock> UpstreamLimitLayer<St, C> {
    /// This layer's own settings, copied first if they are shared (copy on write).
    fn settings(&mut self) -> &mut Shared<St, C> {
        Arc::make_mut(&mut self.shared)
    }

    /// Uses another clock for cooldowns (the store keeps its own time).
    pub fn clock<C2: Clock>(self, clock: C2) -> UpstreamLimitLayer<St, C2> {
        let s = Arc::unwrap_or_clone(self.shared);
        UpstreamLimitLayer {
            shared: Arc::new(Shared {
                store: s.store,
                registry: s.registry,
                clock,
                config: s.config,
                failures: s.failures,
                counters: s.counters,
                capacity: s.capacity,
                rate_reader: s.rate_reader,
            }),
        }
    }
    /// Failure mode when the store cannot answer (D4); default open.
    pub fn failure_mode(mut self, m: FailureMode) -> Self {
        self.settings().config.failure_mode = m;
        self
    }
    /// Cooldown after a provider 429 that names no Retry-After or reset (U3); default
    /// 1 s.
    pub fn default_cooldown(mut self, d: Duration) -> Self {
        self.settings().config.default_cooldown = d;
        self
    }
    /// Every setting of [`UpstreamConfig`] at once.
    pub fn config(mut self, config: UpstreamConfig) -> Self {
        self.settings().config = config;
        self
    }
    /// Reads provider answers' rate signals with `reader` instead of
    /// [`RateSignal::read`] (which knows OpenAI's and Anthropic's rate-limit headers and
    /// `retry-after`): for a provider of another vendor.
    pub fn rate_reader(mut self, reader: RateReader) -> Self {
        self.settings().rate_reader = reader;
        self
    }
    /// Takes, with the provider windows of the channel a request is counted on, a
    /// capacity lease on that channel in the same store call (one Redis script where
    /// the keys share a slot), for a
    /// [`CapacityQueueLayer`](crate::CapacityQueueLayer) below on the same store to
    /// hold (D2, T3; see [`ChannelStore`](portcullis_core::ChannelStore)). `lease_ttl` is
    /// the capacity layer's lease TTL.
    pub fn join_capacity(mut self, lease_ttl: Duration) -> Self
    where
        St: portcullis_core::ChannelStore,
    {
        let s = self.settings();
        let ttl = portcullis_core::clock::millis(lease_ttl);
        let (joiner, releaser) = (s.store.clone(), s.store.clone());
        s.capacity = Some(CapacityJoin {
            join: Arc::new(move |items: &[JointItem], channel: &str, capacity: u32| {
                Box::pin(joiner.admit_all_and_acquire(items, channel, capacity, ttl))
            }),
            release: Arc::new(move |channel: &str, lease| {
                detach(
                    portcullis_core::CapacityStore::release(&releaser, channel, lease),
                    "capacity release",
                );
            }),
        });
        self
    }
    /// The registry (channels, limits, cooldowns).
    pub fn registry(&self) -> &Arc<UpstreamRegistry> {
        &self.shared.registry
    }
    /// Counters so far.
    pub fn stats(&self) -> UpstreamStats {
        let c = &self.shared.counters;
        UpstreamStats {
            deviations: c.deviations.load(Ordering::Relaxed),
            cooldowns: c.cooldowns.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            failures: self.shared.failures.snapshot(),
        }
    }
}

impl<S, St, C> Layer<S> for UpstreamLimitLayer<St, C> {
    type Service = UpstreamLimit<S, St, C>;
    fn layer(&self, inner: S) -> Self::Service {
        UpstreamLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}
