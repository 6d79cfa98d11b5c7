use super::UpstreamLimit;
use super::calibrate::{RateReader, RateSignal};
use crate::failure::{FailureCounters, FailureMode, FailureStats};
use crate::spawn::detach;
use crate::time::TokioClock;
use http::Response;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use tollgate_core::upstream::UpstreamRegistry;
use tollgate_core::{CapacityTake, Clock, JointAdmission, JointItem, StoreError, WindowStore};
use tower_layer::Layer;

/// Settings of the upstream limit layer: start from `UpstreamConfig::default()` and set
/// the fields you need (the struct may gain fields).
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
    deviations: AtomicU64,
    cooldowns: AtomicU64,
    pub(crate) refused: AtomicU64,
}

/// What every request of one layer shares.
pub(crate) struct Shared<St, C> {
    pub(crate) store: St,
    pub(crate) registry: Arc<UpstreamRegistry>,
    pub(crate) clock: C,
    pub(crate) config: UpstreamConfig,
    pub(crate) failures: FailureCounters,
    pub(crate) counters: Counters,
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
pub(crate) struct CapacityJoin {
    pub(crate) join: Arc<ChannelJoinFn>,
    pub(crate) release: Arc<crate::joint::ReleaseChannel>,
}

/// Applies [`UpstreamLimit`] to a service. See the [module docs](super).
pub struct UpstreamLimitLayer<St, C = TokioClock> {
    shared: Arc<Shared<St, C>>,
}

impl<St, C> Clone for UpstreamLimitLayer<St, C> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<St: WindowStore> UpstreamLimitLayer<St, TokioClock> {
    /// Provider limits of the channels in `registry`, counted in `store`.
    pub fn new(store: St, registry: Arc<UpstreamRegistry>) -> Self {
        Self::with_clock(
            store,
            registry,
            TokioClock::default(),
            UpstreamConfig::default(),
        )
    }
}

impl<St: WindowStore, C: Clock> UpstreamLimitLayer<St, C> {
    /// With an explicit clock (for cooldowns) and settings.
    pub fn with_clock(
        store: St,
        registry: Arc<UpstreamRegistry>,
        clock: C,
        config: UpstreamConfig,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                store,
                registry,
                clock,
                config,
                failures: FailureCounters::default(),
                counters: Counters::default(),
                capacity: None,
                rate_reader: RateSignal::read,
            }),
        }
    }
    /// Changes the settings.
    pub fn config(self, config: UpstreamConfig) -> Self {
        let s = Arc::try_unwrap(self.shared).unwrap_or_else(|_| {
            panic!("UpstreamLimitLayer::config must be called before the layer is cloned")
        });
        Self {
            shared: Arc::new(Shared { config, ..s }),
        }
    }
    /// Reads provider answers' rate signals with `reader` instead of
    /// [`RateSignal::read`] (which knows OpenAI's and Anthropic's rate-limit headers and
    /// `retry-after`): for a provider of another vendor. Must be called before the layer
    /// is cloned.
    pub fn with_rate_reader(self, reader: RateReader) -> Self {
        let s = Arc::try_unwrap(self.shared).unwrap_or_else(|_| {
            panic!("UpstreamLimitLayer::with_rate_reader must be called before the layer is cloned")
        });
        Self {
            shared: Arc::new(Shared {
                rate_reader: reader,
                ..s
            }),
        }
    }
    /// Takes, with the provider windows of the channel a request is counted on, a
    /// capacity lease on that channel in the same store call (one Redis script where
    /// the keys share a slot), for a
    /// [`CapacityQueueLayer`](crate::CapacityQueueLayer) below on the same store to
    /// hold (D2, T3; see [`ChannelStore`](tollgate_core::ChannelStore)). `lease_ttl` is
    /// the capacity layer's lease TTL. Must be called before the layer is cloned.
    pub fn join_capacity(self, lease_ttl: std::time::Duration) -> Self
    where
        St: tollgate_core::ChannelStore,
    {
        let s = Arc::try_unwrap(self.shared).unwrap_or_else(|_| {
            panic!("UpstreamLimitLayer::join_capacity must be called before the layer is cloned")
        });
        let ttl = tollgate_core::clock::millis(lease_ttl);
        let (joiner, releaser) = (s.store.clone(), s.store.clone());
        let capacity = Some(CapacityJoin {
            join: Arc::new(move |items: &[JointItem], channel: &str, capacity: u32| {
                Box::pin(joiner.admit_all_and_acquire(items, channel, capacity, ttl))
            }),
            release: Arc::new(move |channel: &str, lease| {
                detach(
                    tollgate_core::CapacityStore::release(&releaser, channel, lease),
                    "capacity release",
                );
            }),
        });
        Self {
            shared: Arc::new(Shared { capacity, ..s }),
        }
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

impl<St, C: Clock> Shared<St, C> {
    /// U3: the provider's answer on `channel` updates the cooldown table.
    pub(crate) fn calibrate<B>(&self, channel: &str, model: Option<&str>, res: &Response<B>) {
        let shared = self;
        let signal = (shared.rate_reader)(res.status().as_u16(), res.headers(), SystemTime::now());
        let Some(cool_ms) = signal.cooldown_ms(shared.config.default_cooldown.as_millis() as u64)
        else {
            return;
        };
        let Some(key) = shared.registry.signal_key(channel, model) else {
            return;
        };
        let now = shared.clock.now();
        shared
            .registry
            .cooldowns()
            .cool(&key, now.saturating_add(cool_ms), now);
        shared.counters.cooldowns.fetch_add(1, Ordering::Relaxed);
        if signal.status == 429 {
            shared.counters.deviations.fetch_add(1, Ordering::Relaxed);
            #[cfg(feature = "metrics")]
        metrics::counter!("tollgate_upstream_deviations_total", "channel" => channel.to_owned())
            .increment(1);
        }
        tracing::info!(
            channel,
            status = signal.status,
            cool_ms,
            "provider rate signal: channel scope cools down"
        );
    }
}
