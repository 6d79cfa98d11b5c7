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
use std::sync::atomic::AtomicU64;
use std::time::Duration;

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

counted_stats! {
    /// Counters of the upstream limit layer.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct UpstreamStats counted by Counters {
        /// Provider 429s while the local model had room (U3).
        deviations: AtomicU64,
        /// Cooldowns set from provider signals.
        cooldowns: AtomicU64,
        /// Requests refused because no candidate was usable (U4).
        refused: AtomicU64,
    } and {
        /// Store failures.
        failures: FailureStats,
    }
}

/// What the builder methods set.
#[derive(Clone)]
pub(crate) struct Config<St, C> {
    pub(crate) store: St,
    pub(crate) registry: Arc<UpstreamRegistry>,
    pub(crate) clock: C,
    pub(crate) settings: UpstreamConfig,
    /// Set by [`UpstreamLimitLayer::join_capacity`].
    pub(crate) capacity: Option<CapacityJoin>,
    /// Reads a provider answer's rate headers (U3); [`RateSignal::read`] by default.
    pub(crate) rate_reader: RateReader,
}

/// What every clone of one layer and every service it builds shares, made once by
/// [`UpstreamLimitLayer::new`].
#[derive(Default)]
pub(crate) struct State {
    pub(crate) failures: FailureCounters,
    pub(crate) counters: Counters,
}

/// What a service reads: the layer's config and state.
pub(crate) struct Shared<St, C> {
    pub(crate) config: Config<St, C>,
    pub(crate) state: Arc<State>,
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
/// Built as every layer of this crate is (see the [crate docs](crate#how-a-layer-is-built)):
/// [`new`](Self::new) and the builder methods set its config; its state (the counters
/// behind [`stats`](Self::stats), failure counters) is made once by `new` and shared by
/// every clone and every service it builds. A builder method changes the layer it is
/// called on alone: services built before keep their config, and all of them still
/// count into the same [`stats`](Self::stats).
pub struct UpstreamLimitLayer<St, C = TokioClock> {
    config: Config<St, C>,
    state: Arc<State>,
}

layer_parts!(UpstreamLimitLayer<St, C> => UpstreamLimit, Shared);

impl<St: WindowStore> UpstreamLimitLayer<St, TokioClock> {
    /// Provider limits of the channels in `registry`, counted in `store`, with the
    /// default [`UpstreamConfig`], tokio's clock for cooldowns and the vendors' rate
    /// headers read by [`RateSignal::read`].
    pub fn new(store: St, registry: Arc<UpstreamRegistry>) -> Self {
        Self {
            config: Config {
                store,
                registry,
                clock: TokioClock::default(),
                settings: UpstreamConfig::default(),
                capacity: None,
                rate_reader: RateSignal::read,
            },
            state: Arc::default(),
        }
    }
}

impl<St: WindowStore, C: Clock> UpstreamLimitLayer<St, C> {
    swap_config! {
        /// Uses another clock for cooldowns (the store keeps its own time).
        fn clock<C2: Clock>(clock) -> UpstreamLimitLayer<St, C2>
        keeps { store, registry, settings, capacity, rate_reader }
    }
    config_setters! {
        /// Failure mode when the store cannot answer (D4); default open.
        failure_mode(m: FailureMode) => settings.failure_mode;
        /// Cooldown after a provider 429 that names no Retry-After or reset (U3); default
        /// 1 s.
        default_cooldown(d: Duration) => settings.default_cooldown;
        /// Every setting of [`UpstreamConfig`] at once.
        config(config: UpstreamConfig) => settings;
        /// Reads provider answers' rate signals with `reader` instead of
        /// [`RateSignal::read`] (which knows OpenAI's and Anthropic's rate-limit headers and
        /// `retry-after`): for a provider of another vendor.
        rate_reader(reader: RateReader) => rate_reader;
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
        let ttl = portcullis_core::clock::millis(lease_ttl);
        let (joiner, releaser) = (self.config.store.clone(), self.config.store.clone());
        self.config.capacity = Some(CapacityJoin {
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
        &self.config.registry
    }
    /// Counters so far.
    pub fn stats(&self) -> UpstreamStats {
        self.state.counters.load(self.state.failures.snapshot())
    }
}
