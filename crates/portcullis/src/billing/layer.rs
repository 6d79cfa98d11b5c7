use super::durable::Settler;
use super::{BillingGate, CutStreams, SettlementStats, UsageSink};
use crate::failure::{FailureCounters, FailureMode, FailureStats};
use portcullis_core::billing::DEFAULT_ATTEMPT_LIFETIME_MS;
use portcullis_core::{BillingStore, Millis, SystemClock};
use std::sync::Arc;
use std::time::Duration;

/// What the builder methods set.
#[derive(Clone)]
pub(crate) struct Config<St, C> {
    pub(crate) store: St,
    pub(crate) sink: Arc<dyn UsageSink>,
    pub(crate) clock: C,
    pub(crate) failure_mode: FailureMode,
    pub(crate) lifetime_ms: Millis,
    pub(crate) cut_streams: CutStreams,
}

/// What every clone of one layer and every service it builds shares, made once by
/// [`BillingGateLayer::new`].
pub(crate) struct State<St> {
    pub(crate) failures: FailureCounters,
    /// One settlement retry queue for every route (B7).
    pub(crate) settler: Arc<Settler<St>>,
}

/// What a service reads: the layer's config and state.
pub(crate) struct Shared<St, C> {
    pub(crate) config: Config<St, C>,
    pub(crate) state: Arc<State<St>>,
}

/// Applies [`BillingGate`]: eligibility, budget reservation and per-attempt
/// settlement (B1–B7). Fails closed by default (B5).
///
/// Built as every layer of this crate is (see the [crate docs](crate#how-a-layer-is-built)):
/// the builder methods set its config; its state (failure counters, the settlement
/// retry queue) is made once by [`new`](Self::new) and shared by every clone and
/// every service it builds.
pub struct BillingGateLayer<St, C = SystemClock> {
    config: Config<St, C>,
    state: Arc<State<St>>,
}

layer_parts!(BillingGateLayer<St: BillingStore, C> => BillingGate, Shared);

impl<St: BillingStore> BillingGateLayer<St> {
    /// A billing layer on `store`, discarding usage records (set a sink with
    /// [`BillingGateLayer::sink`]).
    pub fn new(store: St) -> Self {
        Self {
            state: Arc::new(State {
                failures: FailureCounters::default(),
                settler: Settler::new(store.clone()),
            }),
            config: Config {
                store,
                sink: Arc::new(()),
                clock: SystemClock::new(),
                failure_mode: FailureMode::Closed,
                lifetime_ms: DEFAULT_ATTEMPT_LIFETIME_MS,
                cut_streams: CutStreams::default(),
            },
        }
    }
}

impl<St, C> BillingGateLayer<St, C> {
    /// Where usage records go (B6): a [`UsageSink`], or a closure taking each
    /// [`UsageRecord`](super::UsageRecord).
    pub fn sink(mut self, sink: impl UsageSink) -> Self {
        self.config.sink = Arc::new(sink);
        self
    }
    /// Failure mode; closed by default and for good reason (B5).
    pub fn failure_mode(mut self, m: FailureMode) -> Self {
        self.config.failure_mode = m;
        self
    }
    /// The longest a request may live (default one hour): an attempt still open after
    /// it is taken for lost (its instance died) and the store sweeps it into pending
    /// reconciliation, releasing its budget reservations (B7). Set it above the longest
    /// stream the gateway serves.
    pub fn max_request_lifetime(mut self, d: Duration) -> Self {
        self.config.lifetime_ms = portcullis_core::clock::millis(d).max(1);
        self
    }
    /// What a stream cut after its content went out is charged (B7): by default what
    /// the gateway saw streamed, at once ([`CutStreams`]).
    pub fn cut_streams(mut self, policy: CutStreams) -> Self {
        self.config.cut_streams = policy;
        self
    }
    /// The clock stamped on usage records and used for subscription expiry.
    pub fn clock<C2>(self, clock: C2) -> BillingGateLayer<St, C2> {
        let c = self.config;
        BillingGateLayer {
            config: Config {
                store: c.store,
                sink: c.sink,
                clock,
                failure_mode: c.failure_mode,
                lifetime_ms: c.lifetime_ms,
                cut_streams: c.cut_streams,
            },
            state: self.state,
        }
    }
    /// Store failures so far.
    pub fn failure_stats(&self) -> FailureStats {
        self.state.failures.snapshot()
    }
    /// Settlement retries so far (B7).
    pub fn settlement_stats(&self) -> SettlementStats {
        self.state.settler.stats()
    }
}
