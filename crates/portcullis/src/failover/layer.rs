use super::{ChunkClassifier, ChunkKind, ErrorReader, Failover, error_facts};
use crate::time::TokioClock;
use portcullis_core::failover::{Channels, HealthBook, HealthConfig, RetryLimits, StickyMap};
use portcullis_core::upstream::UpstreamRegistry;
use portcullis_core::{Clock, Dialect};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tower::retry::budget::TpsBudget;
use tower_layer::Layer;

/// Failover settings, given to the layer by [`FailoverLayer::config`]: start from
/// `FailoverConfig::default()` and set the fields you need (the struct may gain fields;
/// it cannot be built by a literal outside this crate).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FailoverConfig {
    /// Most attempts per request (F1), default 3.
    pub max_attempts: u32,
    /// Longest wait for a successful answer's first content chunk (F4), default 30 s.
    pub first_chunk_timeout: Duration,
    /// Most bytes of an error answer read to classify it, default 64 KiB.
    pub error_body_limit: usize,
    /// Backoff between attempts without a Retry-After: base, doubling to the cap.
    pub backoff_base: Duration,
    /// See `backoff_base`.
    pub backoff_cap: Duration,
    /// Longest single wait for a channel to recover before a retry, default 10 s.
    pub max_wait: Duration,
    /// Deadline when the request sends no `x-portcullis-deadline-ms`.
    pub default_deadline: Option<Duration>,
    /// Retry budget (F7): how long a deposit counts (1–60 s), the retries always
    /// allowed per second, and the share of requests that may be retried.
    pub budget_ttl: Duration,
    /// See `budget_ttl`.
    pub budget_min_per_sec: u32,
    /// See `budget_ttl`.
    pub budget_retry_ratio: f32,
    /// Health (F8).
    pub health: HealthConfig,
    /// Sticky pins: idle expiry and most pins kept (F9).
    pub sticky_ttl: Duration,
    /// See `sticky_ttl`.
    pub sticky_max: usize,
}

impl Default for FailoverConfig {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            first_chunk_timeout: Duration::from_secs(30),
            error_body_limit: 64 * 1024,
            backoff_base: Duration::from_millis(100),
            backoff_cap: Duration::from_secs(2),
            max_wait: Duration::from_secs(10),
            default_deadline: None,
            budget_ttl: Duration::from_secs(10),
            budget_min_per_sec: 10,
            budget_retry_ratio: 0.2,
            health: HealthConfig::default(),
            sticky_ttl: Duration::from_secs(3_600),
            sticky_max: 100_000,
        }
    }
}

/// Counters of the failover layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailoverStats {
    /// Requests handled.
    pub requests: u64,
    /// Attempts sent (first attempts included).
    pub attempts: u64,
    /// Retries refused by the budget (F7).
    pub budget_refused: u64,
    /// Requests that ended in a final failure (F10).
    pub failed: u64,
    /// Streams committed and then failed (in-stream error event, F3).
    pub broken_streams: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) requests: AtomicU64,
    pub(crate) attempts: AtomicU64,
    pub(crate) budget_refused: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) broken_streams: Arc<AtomicU64>,
}

/// What one layer learns across its requests: channel health (F8), conversation pins
/// (F9), the retry budget (F7) and the counters. Built from the settings' health, pin
/// and budget parts.
pub(crate) struct State {
    pub(crate) health: HealthBook,
    pub(crate) sticky: StickyMap,
    pub(crate) budget: TpsBudget,
    pub(crate) counters: Counters,
}

impl State {
    fn new(config: &FailoverConfig) -> Arc<Self> {
        let budget = TpsBudget::new(
            config
                .budget_ttl
                .clamp(Duration::from_secs(1), Duration::from_secs(60)),
            config.budget_min_per_sec,
            config.budget_retry_ratio.clamp(0.0, 1000.0),
        );
        Arc::new(Self {
            health: HealthBook::new(config.health),
            sticky: StickyMap::new(config.sticky_ttl.as_millis() as u64, config.sticky_max),
            budget,
            counters: Counters::default(),
        })
    }
}

/// What every request of one layer shares: the settings, and the [`State`] behind its
/// own `Arc`. Copied only when a builder method changes a layer whose settings are
/// already shared (see [`FailoverLayer`]).
#[derive(Clone)]
pub(crate) struct Shared<C> {
    pub(crate) registry: Arc<UpstreamRegistry>,
    pub(crate) clock: C,
    pub(crate) config: FailoverConfig,
    pub(crate) limits: RetryLimits,
    pub(crate) chunks: Option<ChunkClassifier>,
    /// Reads an error answer for the classifier (F5); [`error_facts`] by default.
    pub(crate) error_reader: ErrorReader,
    pub(crate) state: Arc<State>,
}

impl<C> Shared<C> {
    /// What the decisions read and write of the channels.
    pub(crate) fn channels(&self) -> Channels<'_> {
        Channels {
            health: &self.state.health,
            sticky: &self.state.sticky,
            registry: &self.registry,
        }
    }
}

/// The attempt limits `config` sets (F1, F6).
fn retry_limits(config: &FailoverConfig) -> RetryLimits {
    RetryLimits {
        max_attempts: config.max_attempts,
        backoff_base_ms: config.backoff_base.as_millis() as u64,
        backoff_cap_ms: config.backoff_cap.as_millis() as u64,
        max_wait: config.max_wait,
    }
}

/// Applies [`Failover`] to a service. See the [module docs](super).
///
/// Built with [`new`](Self::new) and the builder methods. Every clone of the layer and
/// every service it builds shares one set of settings and one [`health`](Self::health)
/// book, sticky map, retry budget and [`stats`](Self::stats). A builder method is copy
/// on write: called on a layer that was cloned or has built services, it changes that
/// layer alone, and services built before keep what they had. [`config`](Self::config)
/// also starts the health book, pins, budget and counters afresh (they are built from
/// it); the other builder methods keep them shared.
pub struct FailoverLayer<C = TokioClock> {
    shared: Arc<Shared<C>>,
}

handle_clone!(impl<C> Clone for FailoverLayer<C> { shared });

impl FailoverLayer<TokioClock> {
    /// Failover over the channels of `registry` (shared with the upstream limit layer,
    /// whose cooldowns it writes), with the default [`FailoverConfig`], tokio's clock,
    /// every data frame taken for content and the vendors' error bodies read by
    /// [`error_facts`].
    pub fn new(registry: Arc<UpstreamRegistry>) -> Self {
        let config = FailoverConfig::default();
        Self {
            shared: Arc::new(Shared {
                registry,
                clock: TokioClock::default(),
                limits: retry_limits(&config),
                state: State::new(&config),
                config,
                chunks: None,
                error_reader: error_facts,
            }),
        }
    }
}

impl<C: Clock> FailoverLayer<C> {
    /// This layer's own settings, copied first if they are shared (copy on write).
    fn settings(&mut self) -> &mut Shared<C> {
        Arc::make_mut(&mut self.shared)
    }

    /// Uses another clock for health, cooldowns, pins and deadlines.
    pub fn clock<C2: Clock>(self, clock: C2) -> FailoverLayer<C2> {
        let s = Arc::unwrap_or_clone(self.shared);
        FailoverLayer {
            shared: Arc::new(Shared {
                registry: s.registry,
                clock,
                config: s.config,
                limits: s.limits,
                chunks: s.chunks,
                error_reader: s.error_reader,
                state: s.state,
            }),
        }
    }
    /// The settings (attempts, timeouts, backoff, retry budget, health, pins). The
    /// health book, pins, retry budget and counters are built afresh from them.
    pub fn config(mut self, config: FailoverConfig) -> Self {
        let s = self.settings();
        s.limits = retry_limits(&config);
        s.state = State::new(&config);
        s.config = config;
        self
    }
    /// Tells what the first frames of a successful answer are (F4); by default every
    /// data frame is content. The proxy uses [`portcullis_dialects::chunk_kind`], which
    /// knows each vendor's event-stream events.
    pub fn chunk_classifier(
        mut self,
        classify: impl Fn(Dialect, &[u8]) -> ChunkKind + Send + Sync + 'static,
    ) -> Self {
        self.settings().chunks = Some(Arc::new(classify));
        self
    }
    /// Reads error answers with `reader` instead of [`error_facts`] (which knows the
    /// OpenAI, Anthropic and Gemini error bodies): for a provider of another vendor.
    pub fn error_reader(mut self, reader: ErrorReader) -> Self {
        self.settings().error_reader = reader;
        self
    }
    /// Per-channel health (F8).
    pub fn health(&self) -> &HealthBook {
        &self.shared.state.health
    }
    /// The registry (cooldowns, disabled credentials).
    pub fn registry(&self) -> &Arc<UpstreamRegistry> {
        &self.shared.registry
    }
    /// Puts a channel back into rotation: clears its health record and the cooldowns
    /// or disablement of its credential and its credential + model scopes (operator
    /// action).
    pub fn reenable(&self, channel: &str) {
        self.shared.state.health.reset(channel);
        self.shared.registry.clear_credential(channel);
    }
    /// Counters so far.
    pub fn stats(&self) -> FailoverStats {
        let c = &self.shared.state.counters;
        FailoverStats {
            requests: c.requests.load(Ordering::Relaxed),
            attempts: c.attempts.load(Ordering::Relaxed),
            budget_refused: c.budget_refused.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            broken_streams: c.broken_streams.load(Ordering::Relaxed),
        }
    }
}

impl<S, C> Layer<S> for FailoverLayer<C> {
    type Service = Failover<S, C>;
    fn layer(&self, inner: S) -> Self::Service {
        Failover {
            inner,
            shared: self.shared.clone(),
        }
    }
}
