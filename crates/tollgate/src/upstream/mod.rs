//! Provider limits per channel: RPM, RPH, RPD, TPM, ITPM, OTPM at credential,
//! credential + model and vendor granularity (SPEC U1–U4).
//!
//! The request carries its [`Candidates`] (channels in order of preference), and
//! optionally its [`ModelId`], [`Demand`] and a [`RateCount`] estimate. In `call` the
//! layer walks the candidates in order:
//!
//! - an unregistered channel, or one without limits, is unconstrained: kept;
//! - a channel whose credential + model, credential or vendor scope cools down (a
//!   provider 429, a provider header saying a limit is exhausted) is skipped;
//! - on the first channel with limits, the request is counted on every window of its
//!   scopes at once — all or nothing (U1, U2): one request, and the token estimate
//!   (per window as TPM, ITPM or OTPM); a channel without room is skipped;
//! - further channels with limits are dropped: they hold no reservation.
//!
//! The kept channels go on as the request's [`Candidates`] (with [`Chosen`] set to the
//! first, for a stack without a capacity layer). When nothing is kept, the request is
//! refused by U4: every candidate skipped by one window kind → that kind's code
//! (42902 minute requests, 42903 hour requests, 42904 day requests, 42905 minute
//! tokens), otherwise 42908; Retry-After = the earliest recovery. No candidate at all
//! → 50201.
//!
//! When the response ends, tokens are settled from the actual usage under the
//! provider's counting rules ([`rate_count`]); a request refused further in, or
//! dropped before it was sent, is given back; a request served by another channel
//! than the reserved one (a capacity spill to an unconstrained channel) gives the
//! reservation back at once. The response head calibrates the local model (U3):
//! remaining 0 in the provider's rate headers stops sends on that scope until the
//! reset; a provider 429 cools the scope for its Retry-After even though the local
//! model had room, and the deviation is counted ([`UpstreamStats::deviations`]).
//!
//! # Where it sits in a stack
//!
//! Outside [`CapacityQueueLayer`](crate::CapacityQueueLayer): capacity then queues
//! only on channels whose provider limits have room. Inside the user-policy layers:
//! its rejections are typed [`Rejection`]s, so outer layers give back what they
//! reserved (L5).
//!
//! ```
//! use std::convert::Infallible;
//! use std::sync::Arc;
//! use tollgate::UpstreamLimitLayer;
//! use tollgate::core::upstream::{RateLimits, UpstreamChannel, UpstreamRegistry};
//! use tollgate::core::{Candidates, ChannelRef, Chosen, Dialect, MemoryStore};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let registry = UpstreamRegistry::new().with_channel(UpstreamChannel {
//!     name: "openai-1".into(),
//!     dialect: Dialect::OpenAi,
//!     vendor: "openai".into(),
//!     credential: "org-1".into(),
//!     limits: RateLimits { rpm: Some(1), ..RateLimits::default() },
//!     model_limits: vec![],
//! });
//! let svc = ServiceBuilder::new()
//!     .layer(UpstreamLimitLayer::new(MemoryStore::new(), Arc::new(registry)))
//!     .service_fn(|req: http::Request<()>| async move {
//!         let ch = req.extensions().get::<Chosen>().unwrap().0.name.clone();
//!         Ok::<_, Infallible>(http::Response::new(http_body_util::Full::new(
//!             bytes::Bytes::from(ch.to_string()),
//!         )))
//!     });
//! let request = || {
//!     let mut req = http::Request::new(());
//!     req.extensions_mut().insert(Candidates::new([ChannelRef::new("openai-1", 0)]));
//!     req
//! };
//! assert_eq!(svc.clone().oneshot(request()).await.unwrap().status(), 200);
//! // The channel's one request per minute is used: 42902.
//! assert!(svc.oneshot(request()).await.is_err());
//! # }
//! ```
//!
//! [`Candidates`]: tollgate_core::Candidates
//! [`Chosen`]: tollgate_core::Chosen
//! [`ModelId`]: tollgate_core::ModelId
//! [`Demand`]: tollgate_core::Demand
//! [`RateCount`]: tollgate_core::upstream::RateCount
//! [`rate_count`]: tollgate_core::upstream::rate_count
//! [`Rejection`]: tollgate_core::Rejection

mod calibrate;

pub use calibrate::{MAX_SIGNAL_MS, RateSignal};

use crate::BoxError;
use crate::body::{Hold, HoldBody};
use crate::failure::{FailureCounters, FailureMode, FailureStats};
use crate::spawn::detach;
use crate::time::{TokioClock, ms};
use http::{Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};
use tollgate_core::upstream::{
    RateCount, Skip, TokenMeasure, UpstreamRegistry, no_channel_left, rate_count,
};
use tollgate_core::{
    Candidates, CapacityTake, ChannelRef, Chosen, Clock, Demand, Dialect, JointAdmission,
    JointItem, JointSettle, LayerKind, ModelId, Outcome, Rejection, Scope, StoreError, SubjectKey,
    Usage, UsageRecorder, UsageReport, WindowStore, WindowTicket,
};
use tower_layer::Layer;
use tower_service::Service;

/// Settings of the upstream limit layer.
#[derive(Clone, Copy, Debug)]
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
struct Counters {
    deviations: AtomicU64,
    cooldowns: AtomicU64,
    refused: AtomicU64,
}

struct Shared<St, C> {
    store: St,
    registry: Arc<UpstreamRegistry>,
    clock: C,
    config: UpstreamConfig,
    failures: FailureCounters,
    counters: Counters,
    /// Set by [`UpstreamLimitLayer::join_capacity`].
    capacity: Option<CapacityJoin>,
}

/// The answer of a windows-and-capacity decision.
type ChannelFuture =
    Pin<Box<dyn Future<Output = Result<(JointAdmission, CapacityTake), StoreError>> + Send>>;

/// Decides a channel's windows with a capacity lease on it (see `crate::joint`).
type ChannelJoinFn = dyn Fn(&[JointItem], &str, u32) -> ChannelFuture + Send + Sync;

/// What [`UpstreamLimitLayer::join_capacity`] sets.
struct CapacityJoin {
    join: Arc<ChannelJoinFn>,
    release: Arc<crate::joint::ReleaseChannel>,
}

/// Applies [`UpstreamLimit`] to a service. See the [module docs](self).
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

/// Provider limits around a service (U1–U4). Built by [`UpstreamLimitLayer`].
pub struct UpstreamLimit<S, St, C> {
    inner: S,
    shared: Arc<Shared<St, C>>,
}

impl<S: Clone, St, C> Clone for UpstreamLimit<S, St, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

/// Response future of [`UpstreamLimit`]: the admission takes one store call per
/// window of the channel tried, so it is an `async` block, boxed.
pub type ResponseFuture<B> = Pin<Box<dyn Future<Output = Result<B, BoxError>> + Send>>;

impl<S, St, C, ReqB, ResB> Service<Request<ReqB>> for UpstreamLimit<S, St, C>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
    St: WindowStore,
    C: Clock,
    ReqB: Send + 'static,
    ResB: http_body::Body + Send + 'static,
{
    type Response = Response<HoldBody<ResB, UpstreamGuard<St>>>;
    type Error = BoxError;
    type Future = ResponseFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Decided in `call`; readiness is the inner service's.
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        let Some(candidates) = req.extensions().get::<Candidates>().cloned() else {
            // Nothing to choose from: not this layer's request.
            return Box::pin(async move {
                let res = inner.call(req).await.map_err(Into::into)?;
                Ok(res.map(|b| HoldBody::holding(b, None)))
            });
        };
        let model = req.extensions().get::<ModelId>().map(|m| m.0.clone());
        let estimate = req
            .extensions()
            .get::<RateCount>()
            .copied()
            .unwrap_or_else(|| {
                RateCount::all(req.extensions().get::<Demand>().map_or(0, |d| d.tokens))
            });
        let recorder = req
            .extensions_mut()
            .get_or_insert_with(UsageRecorder::new)
            .clone();
        Box::pin(async move {
            let plan = admit(&shared, candidates.channels(), model.as_deref(), estimate).await;
            let plan = match plan {
                Ok(p) => p,
                Err(r) => {
                    if r.layer() == LayerKind::UpstreamLimit {
                        shared.counters.refused.fetch_add(1, Ordering::Relaxed);
                    }
                    return Err(r.into());
                }
            };
            let mut guard = plan.reserved.map(|(channel, held, dialect)| UpstreamGuard {
                store: shared.store.clone(),
                channel,
                held,
                dialect,
                recorder: recorder.clone(),
                refund: false,
                answered: false,
                _in_flight: crate::gauge::InFlight::enter(LayerKind::UpstreamLimit),
            });
            let left = plan.kept.as_deref().unwrap_or(candidates.channels());
            let first = left.first().map(|c| c.name.clone());
            if let Some(first) = left.first() {
                req.extensions_mut().insert(Chosen(first.clone()));
            }
            if let Some(p) = plan.prefetched {
                req.extensions_mut().insert(p);
            }
            // Nothing dropped: the request keeps its candidate list as it was.
            if let Some(kept) = plan.kept {
                req.extensions_mut().insert(Candidates(kept.into()));
            }
            let res = inner.call(req).await.map_err(Into::into);
            match res {
                Ok(res) => {
                    let served = res
                        .extensions()
                        .get::<Chosen>()
                        .map(|c| c.0.name.clone())
                        .or_else(|| recorder.channel())
                        .or(first);
                    if let Some(ch) = &served {
                        calibrate(&shared, ch, model.as_deref(), &res);
                    }
                    if let Some(g) = guard.as_mut() {
                        g.answered = true;
                        if served.as_ref().is_some_and(|s| *s != g.channel) {
                            g.refund = true;
                        }
                    }
                    Ok(res.map(|b| HoldBody::holding(b, guard)))
                }
                Err(e) => {
                    // L5: refused further in → nothing was sent, unless it may have
                    // reached the provider (B4).
                    if let Some(g) = guard.as_mut() {
                        if e.downcast_ref::<Rejection>().is_some() && recorder.report().is_none() {
                            g.refund = true;
                        }
                    }
                    Err(e)
                }
            }
        })
    }
}

/// One reservation on one window key.
#[derive(Debug)]
struct Held {
    key: SubjectKey,
    ticket: WindowTicket,
    measure: TokenMeasure,
}

/// The outcome of the admission walk.
struct Plan {
    /// The candidates left; `None` for all of them.
    kept: Option<Vec<ChannelRef>>,
    reserved: Option<(Arc<str>, Vec<Held>, Dialect)>,
    /// What the reservation learnt of the reserved channel's capacity.
    prefetched: Option<crate::joint::Prefetched>,
}

async fn admit<St: WindowStore, C: Clock>(
    shared: &Shared<St, C>,
    candidates: &[ChannelRef],
    model: Option<&str>,
    estimate: RateCount,
) -> Result<Plan, Rejection> {
    // `None` while every candidate so far is kept (the usual case: the request keeps
    // its list, nothing is allocated); the kept prefix is copied at the first drop.
    let mut kept: Option<Vec<ChannelRef>> = None;
    let drop_from = |kept: &mut Option<Vec<ChannelRef>>, i: usize| {
        kept.get_or_insert_with(|| candidates[..i].to_vec());
    };
    let keep = |kept: &mut Option<Vec<ChannelRef>>, c: &ChannelRef| {
        if let Some(k) = kept.as_mut() {
            k.push(c.clone());
        }
    };
    let mut skips = Vec::new();
    let mut reserved = None;
    let mut prefetched = None;
    for (i, c) in candidates.iter().enumerate() {
        let Some(scopes) = shared.registry.scopes(&c.name, model) else {
            keep(&mut kept, c);
            continue;
        };
        let now = shared.clock.now();
        let cooldowns = shared.registry.cooldowns();
        // An empty table (the usual case) is one atomic load, no key built.
        let cooling = if cooldowns.is_empty() {
            None
        } else {
            cooldowns.any_until(&scopes.cooldown_keys(), now)
        };
        if let Some(until) = cooling {
            drop_from(&mut kept, i);
            skips.push(if until == tollgate_core::upstream::DISABLED {
                Skip::Disabled
            } else {
                Skip::Cooling {
                    remaining_ms: until - now,
                }
            });
            continue;
        }
        if scopes.window_count() == 0 {
            keep(&mut kept, c);
            continue;
        }
        if reserved.is_some() {
            drop_from(&mut kept, i);
            continue;
        }
        let join = shared.capacity.as_ref().filter(|_| !c.is_unlimited());
        let with_capacity = join.map(|j| (&*j.join, &*c.name, c.capacity));
        match reserve(&shared.store, &scopes, estimate, with_capacity).await {
            Ok(Ok((held, take))) => {
                prefetched = join.and_then(|j| {
                    crate::joint::Prefetched::of(c.name.clone(), take, j.release.clone())
                });
                reserved = Some((c.name.clone(), held, scopes.dialect));
                keep(&mut kept, c);
            }
            Ok(Err(skip)) => {
                drop_from(&mut kept, i);
                skips.push(skip);
            }
            Err(e) => {
                match shared.failures.on_error(
                    shared.config.failure_mode,
                    LayerKind::UpstreamLimit,
                    &e,
                ) {
                    None => keep(&mut kept, c),
                    Some(r) => return Err(r),
                }
            }
        }
    }
    if kept.as_ref().is_some_and(Vec::is_empty) || candidates.is_empty() {
        let (code, retry) = no_channel_left(&skips);
        tracing::debug!(code = code.code(), ?skips, "no upstream channel usable");
        return Err(Rejection::new(code, LayerKind::UpstreamLimit).with_retry_after(retry.map(ms)));
    }
    Ok(Plan {
        kept,
        reserved,
        prefetched,
    })
}

/// Counts the request on every window of one channel (credential, credential +
/// model, vendor), all or nothing, in one store call (U1): a window without room
/// leaves every other one as it was.
async fn reserve<St: WindowStore>(
    store: &St,
    scopes: &tollgate_core::upstream::ChannelScopes<'_>,
    estimate: RateCount,
    with_capacity: Option<(&ChannelJoinFn, &str, u32)>,
) -> Result<Result<(Vec<Held>, CapacityTake), Skip>, StoreError> {
    let windows: Vec<_> = scopes.windows().collect();
    let items: Vec<JointItem> = windows
        .iter()
        .map(|w| JointItem {
            key: w.key.clone(),
            scope: Scope::Key,
            policy: w.policy.clone(),
            demand: Demand::tokens(estimate.of(w.measure)),
        })
        .collect();
    let (admission, take) = match with_capacity {
        Some((join, channel, capacity)) => join(&items, channel, capacity).await?,
        None => (store.admit_all(&items).await?, CapacityTake::NotAsked),
    };
    match admission {
        JointAdmission::Admitted(tickets) => Ok(Ok((
            items
                .into_iter()
                .zip(tickets)
                .zip(&windows)
                .map(|((it, ticket), w)| Held {
                    key: it.key,
                    ticket,
                    measure: w.measure,
                })
                .collect(),
            take,
        ))),
        JointAdmission::Exceeded { index, exceeded } => {
            let w = windows.get(index).unwrap_or(&windows[0]);
            Ok(Err(Skip::Limit {
                kind: w.kind_of(exceeded.binding()),
                retry_after_ms: exceeded.retry_after_ms(),
            }))
        }
    }
}

/// U3: the provider's answer on `channel` updates the cooldown table.
fn calibrate<St, C: Clock, B>(
    shared: &Shared<St, C>,
    channel: &str,
    model: Option<&str>,
    res: &Response<B>,
) {
    let signal = RateSignal::read(res.status().as_u16(), res.headers(), SystemTime::now());
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

/// What the upstream limit layer holds for a request until its response body ends:
/// the reservations on one channel's windows.
pub struct UpstreamGuard<St: WindowStore> {
    store: St,
    channel: Arc<str>,
    held: Vec<Held>,
    dialect: Dialect,
    recorder: UsageRecorder,
    refund: bool,
    answered: bool,
    _in_flight: crate::gauge::InFlight,
}

impl<St: WindowStore> UpstreamGuard<St> {
    /// The channel the reservation is on.
    pub fn channel(&self) -> &str {
        &self.channel
    }
}

impl<St: WindowStore> Hold for UpstreamGuard<St> {}

impl<St: WindowStore> Drop for UpstreamGuard<St> {
    fn drop(&mut self) {
        let never_sent = !self.answered && self.recorder.report().is_none();
        let report = self.recorder.report();
        let mut settles = Vec::with_capacity(self.held.len());
        for h in self.held.drain(..) {
            let outcome = if self.refund || never_sent {
                Outcome::Refund
            } else {
                match report {
                    // U2: settle with what the provider counts under its own rules.
                    Some(UsageReport::Complete(u)) => Outcome::Completed(Some(Usage {
                        input_tokens: rate_count(self.dialect, &u).of(h.measure),
                        ..Usage::default()
                    })),
                    // Cut short or unknown: the reservation stands.
                    _ => Outcome::Completed(None),
                }
            };
            settles.push(JointSettle {
                key: h.key,
                scope: Scope::Key,
                ticket: h.ticket,
                outcome,
            });
        }
        if !settles.is_empty() {
            // Every window of the channel in one store call.
            detach(self.store.settle_all(settles), "upstream window settlement");
        }
    }
}
