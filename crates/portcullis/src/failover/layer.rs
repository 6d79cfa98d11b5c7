use super::{ChunkClassifier, ChunkKind, ErrorReader, Failover, error_facts};
use crate::time::TokioClock;
use portcullis_core::failover::{Channels, HealthBook, HealthConfig, RetryLimits, StickyMap};
use portcullis_core::upstream::UpstreamRegistry;
use portcullis_core::{Clock, Dialect};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tower::retry::budget::TpsBudget;

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

counted_stats! {
    /// Counters of the failover layer.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct FailoverStats counted by Counters {
        /// Requests handled.
        requests: AtomicU64,
        /// Attempts sent (first attempts included).
        attempts: AtomicU64,
        /// Retries refused by the budget (F7).
        budget_refused: AtomicU64,
        /// Requests that ended in a final failure (F10).
        failed: AtomicU64,
        /// Streams committed and then failed (in-stream error event, F3); shared with
        /// the bodies of event streams.
        broken_streams: Arc<AtomicU64>,
    }
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

/// What the builder methods set.
#[derive(Clone)]
pub(crate) struct Config<C> {
    pub(crate) registry: Arc<UpstreamRegistry>,
    pub(crate) clock: C,
    pub(crate) settings: FailoverConfig,
    pub(crate) limits: RetryLimits,
    pub(crate) chunks: Option<ChunkClassifier>,
    /// Reads an error answer for the classifier (F5); [`error_facts`] by default.
    pub(crate) error_reader: ErrorReader,
}

/// What a service reads: the layer's config and state.
pub(crate) struct Shared<C> {
    pub(crate) config: Config<C>,
    pub(crate) state: Arc<State>,
}

impl<C> Shared<C> {
    /// What the decisions read and write of the channels.
    pub(crate) fn channels(&self) -> Channels<'_> {
        Channels {
            health: &self.state.health,
            sticky: &self.state.sticky,
            registry: &self.config.registry,
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
/// Built as every layer of this crate is (see the [crate docs](crate#how-a-layer-is-built)):
/// [`new`](Self::new) and the builder methods set its config; its state — the
/// [`health`](Self::health) book, sticky map, retry budget and [`stats`](Self::stats) —
/// is made by `new` and shared by every clone and every service it builds. A builder
/// method changes the layer it is called on alone: services built before keep what
/// they had. [`config`](Self::config) also makes the health book, pins, budget and
/// counters afresh (they are built from its settings); the other builder methods keep
/// them shared.
pub struct FailoverLayer<C = TokioClock> {
    config: Config<C>,
    state: Arc<State>,
}

layer_parts!(FailoverLayer<C> => Failover, Shared);

impl FailoverLayer<TokioClock> {
    /// Failover over the channels of `registry` (shared with the upstream limit layer,
    /// whose cooldowns it writes), with the default [`FailoverConfig`], tokio's clock,
    /// every data frame taken for content and the vendors' error bodies read by
    /// [`error_facts`].
    pub fn new(registry: Arc<UpstreamRegistry>) -> Self {
        let settings = FailoverConfig::default();
        Self {
            state: State::new(&settings),
            config: Config {
                registry,
                clock: TokioClock::default(),
                limits: retry_limits(&settings),
                settings,
                chunks: None,
                error_reader: error_facts,
            },
        }
    }
}

impl<C: Clock> FailoverLayer<C> {
    swap_config! {
        /// Uses another clock for health, cooldowns, pins and deadlines.
        fn clock<C2: Clock>(clock) -> FailoverLayer<C2>
        keeps { registry, settings, limits, chunks, error_reader }
    }
    /// The settings (attempts, timeouts, backoff, retry budget, health, pins). The
    /// health book, pins, retry budget and counters are built afresh from them.
    pub fn config(mut self, config: FailoverConfig) -> Self {
        self.config.limits = retry_limits(&config);
        self.state = State::new(&config);
        self.config.settings = config;
        self
    }
    /// Tells what the first frames of a successful answer are (F4); by default every
    /// data frame is content. The proxy uses [`portcullis_dialects::chunk_kind`], which
    /// knows each vendor's event-stream events.
    pub fn chunk_classifier(
        mut self,
        classify: impl Fn(Dialect, &[u8]) -> ChunkKind + Send + Sync + 'static,
    ) -> Self {
        self.config.chunks = Some(Arc::new(classify));
        self
    }
    config_setters! {
        /// Reads error answers with `reader` instead of [`error_facts`] (which knows the
        /// OpenAI, Anthropic and Gemini error bodies): for a provider of another vendor.
        error_reader(reader: ErrorReader) => error_reader;
    }
    /// Per-channel health (F8).
    pub fn health(&self) -> &HealthBook {
        &self.state.health
    }
    /// The registry (cooldowns, disabled credentials).
    pub fn registry(&self) -> &Arc<UpstreamRegistry> {
        &self.config.registry
    }
    /// Puts a channel back into rotation: clears its health record and the cooldowns
    /// or disablement of its credential and its credential + model scopes (operator
    /// action).
    pub fn reenable(&self, channel: &str) {
        self.state.health.reset(channel);
        self.config.registry.clear_credential(channel);
    }
    /// Counters so far.
    pub fn stats(&self) -> FailoverStats {
        self.state.counters.load()
    }
}
