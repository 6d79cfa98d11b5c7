use super::{ChunkClassifier, ErrorReader, Failover, error_facts};
use crate::time::TokioClock;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tollgate_core::Clock;
use tollgate_core::failover::{Channels, HealthBook, HealthConfig, RetryLimits, StickyMap};
use tollgate_core::upstream::UpstreamRegistry;
use tower::retry::budget::TpsBudget;
use tower_layer::Layer;

/// Failover settings: start from `FailoverConfig::default()` and set the fields you
/// need (the struct may gain fields; it cannot be built by a literal outside this crate).
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
    /// Deadline when the request sends no `x-tollgate-deadline-ms`.
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

/// What every request of one layer shares.
pub(crate) struct Shared<C> {
    pub(crate) registry: Arc<UpstreamRegistry>,
    pub(crate) health: HealthBook,
    pub(crate) sticky: StickyMap,
    pub(crate) budget: TpsBudget,
    pub(crate) clock: C,
    pub(crate) config: FailoverConfig,
    pub(crate) limits: RetryLimits,
    pub(crate) chunks: Option<ChunkClassifier>,
    /// Reads an error answer for the classifier (F5); [`error_facts`] by default.
    pub(crate) error_reader: ErrorReader,
    pub(crate) counters: Counters,
}

impl<C> Shared<C> {
    /// What the decisions read and write of the channels.
    pub(crate) fn channels(&self) -> Channels<'_> {
        Channels {
            health: &self.health,
            sticky: &self.sticky,
            registry: &self.registry,
        }
    }
}

/// Applies [`Failover`] to a service. See the [module docs](super).
pub struct FailoverLayer<C = TokioClock> {
    shared: Arc<Shared<C>>,
}

impl<C> Clone for FailoverLayer<C> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl FailoverLayer<TokioClock> {
    /// Failover over the channels of `registry` (shared with the upstream limit layer,
    /// whose cooldowns it writes).
    pub fn new(registry: Arc<UpstreamRegistry>) -> Self {
        Self::with_clock(
            registry,
            TokioClock::default(),
            FailoverConfig::default(),
            None,
        )
    }
}

impl<C: Clock> FailoverLayer<C> {
    /// With a clock (health, cooldowns, pins), settings and a first-chunk classifier.
    pub fn with_clock(
        registry: Arc<UpstreamRegistry>,
        clock: C,
        config: FailoverConfig,
        chunks: Option<ChunkClassifier>,
    ) -> Self {
        let budget = TpsBudget::new(
            config
                .budget_ttl
                .clamp(Duration::from_secs(1), Duration::from_secs(60)),
            config.budget_min_per_sec,
            config.budget_retry_ratio.clamp(0.0, 1000.0),
        );
        let limits = RetryLimits {
            max_attempts: config.max_attempts,
            backoff_base_ms: config.backoff_base.as_millis() as u64,
            backoff_cap_ms: config.backoff_cap.as_millis() as u64,
            max_wait: config.max_wait,
        };
        Self {
            shared: Arc::new(Shared {
                registry,
                health: HealthBook::new(config.health),
                sticky: StickyMap::new(config.sticky_ttl.as_millis() as u64, config.sticky_max),
                budget,
                clock,
                config,
                limits,
                chunks,
                error_reader: error_facts,
                counters: Counters::default(),
            }),
        }
    }
    /// Reads error answers with `reader` instead of [`error_facts`] (which knows the
    /// OpenAI, Anthropic and Gemini error bodies): for a provider of another vendor.
    /// Must be called before the layer is cloned.
    pub fn with_error_reader(self, reader: ErrorReader) -> Self {
        let s = Arc::try_unwrap(self.shared).unwrap_or_else(|_| {
            panic!("FailoverLayer::with_error_reader must be called before the layer is cloned")
        });
        Self {
            shared: Arc::new(Shared {
                error_reader: reader,
                ..s
            }),
        }
    }
    /// Per-channel health (F8).
    pub fn health(&self) -> &HealthBook {
        &self.shared.health
    }
    /// The registry (cooldowns, disabled credentials).
    pub fn registry(&self) -> &Arc<UpstreamRegistry> {
        &self.shared.registry
    }
    /// Puts a channel back into rotation: clears its health record and the cooldowns
    /// or disablement of its credential and its credential + model scopes (operator
    /// action).
    pub fn reenable(&self, channel: &str) {
        self.shared.health.reset(channel);
        self.shared.registry.clear_credential(channel);
    }
    /// Counters so far.
    pub fn stats(&self) -> FailoverStats {
        let c = &self.shared.counters;
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
