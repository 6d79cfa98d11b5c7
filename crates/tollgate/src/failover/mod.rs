//! Attempts across channels (SPEC F1–F10): provider-error classification, bounded
//! attempts with a retry budget, the first-chunk gate for streams, per-channel health
//! and sticky conversations.
//!
//! The request carries its [`Candidates`]; its body must be `Clone` (buffered: the
//! proxy reads it within `max_body_bytes`, 413 beyond, F1). For each attempt the
//! layer clones the request, narrows its candidates to channels not tried yet (F1),
//! healthy ones first and the conversation's pinned channel before all (F8, F9), gives
//! it its own [`UsageRecorder`] (each attempt is settled on its own, B4; the last
//! attempt's usage also reaches the request's recorder) and calls the inner stack —
//! upstream limits, capacity, billing, the forwarder — so every attempt has its own
//! admission.
//!
//! An attempt's outcome:
//!
//! | outcome | what happens |
//! |---|---|
//! | 2xx whose first content chunk arrives within `first_chunk_timeout` | committed: the client gets it (frames held before content included); a later failure becomes an in-stream error event in the client's dialect, never a replay (F3, F4) |
//! | 2xx whose stream fails or stays silent before content | failover (result unknown) |
//! | error answer | its body (up to `error_body_limit`) is read and classified ([`classify`]); F3 reasons (400, 404, 413, 422, unknown) go to the client as the provider sent them; F2 reasons fail over |
//! | transport failure from the forwarder (a `Rejection` 50202) | connect → failover; timeout → failover, result unknown |
//! | no channel usable now (42902–42908 from the upstream limits) on a retry | wait for the earliest recovery if it is within the deadline and `max_wait`, else stop |
//!
//! Channel actions of the classifier go to the [`UpstreamRegistry`]'s cooldowns: a
//! provider's Retry-After cools the (credential, model) scope and nothing is sent there
//! before it ends (F6); a bad credential or a spend cap disables the credential until
//! an operator re-enables it, and a spend cap also rules out every other channel of the
//! same paying account for the request (scenario 6). Between attempts without a
//! Retry-After the layer backs off exponentially with jitter; a wait that would pass
//! the request's deadline (`x-tollgate-deadline-ms`) stops (F6). Retries are allowed
//! only while tower's [`TpsBudget`] has room (F7): every request deposits, every retry
//! withdraws.
//!
//! Final failure (F10): every tried channel rate limited → 42911 (429) `Upstream
//! capacity for this model is busy. Retry shortly.`; otherwise → 50202 (502) `The
//! model provider returned an error. Please retry.`
//!
//! [`Candidates`]: tollgate_core::Candidates
//! [`UsageRecorder`]: tollgate_core::UsageRecorder
//! [`classify`]: tollgate_core::failover::classify
//! [`UpstreamRegistry`]: tollgate_core::upstream::UpstreamRegistry
//! [`TpsBudget`]: tower::retry::budget::TpsBudget

mod body;
mod facts;

pub use body::FailoverBody;
pub use facts::error_facts;

use crate::BoxError;
use crate::time::TokioClock;
use bytes::{Buf, Bytes};
use http::{HeaderName, Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tollgate_core::failover::{
    Admit, ChannelAction, ErrorFacts, HealthBook, HealthConfig, HealthState, Reason, StickyMap,
    Transport, Verdict, backoff_ms, classify,
};
use tollgate_core::upstream::UpstreamRegistry;
use tollgate_core::{
    Candidates, ChannelRef, Chosen, Clock, Dialect, GatewayCode, LayerKind, ModelId, Rejection,
    UsageRecorder,
};
use tower::retry::budget::{Budget, TpsBudget};
use tower::{Service, ServiceExt};
use tower_layer::Layer;

/// Request extension: the same request for a fallback model (F11), offered by whoever
/// knows the request's contract. The proxy offers one only when the fallback model
/// meets it: tools, structured output, context window, modality, max output, a channel
/// speaking the client's dialect. Failover switches to it when every channel of the
/// first model has been tried, nothing has been streamed, attempts remain, and the
/// fallback's own admission passes (its channels' limits have room; its money upper
/// bound fits the remaining budget — a refusal there ends the request with the first
/// model's failure). Channels of a paying account stopped by a spend cap stay excluded
/// after the switch (scenario 6).
///
/// The request is rewritten for the fallback model only when failover switches to it,
/// so requests that never fall back pay nothing for the offer.
#[derive(Clone)]
pub struct ModelFallback<B> {
    /// The fallback model.
    pub model: Arc<str>,
    build: Arc<dyn Fn() -> Option<FallbackRequest<B>> + Send + Sync>,
}

impl<B> ModelFallback<B> {
    /// Offers `model`; `build` rewrites the request for it when failover switches
    /// (`None`: it cannot be rewritten after all, and the first model's failure stands).
    pub fn new(
        model: impl Into<Arc<str>>,
        build: impl Fn() -> Option<FallbackRequest<B>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            model: model.into(),
            build: Arc::new(build),
        }
    }
    /// The request rewritten for the fallback model.
    pub fn build(&self) -> Option<FallbackRequest<B>> {
        (self.build)()
    }
}

impl<B> std::fmt::Debug for ModelFallback<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelFallback")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// A request rewritten for a fallback model (F11).
#[derive(Debug)]
pub struct FallbackRequest<B> {
    /// The request's URI for it (Gemini names the model in the path).
    pub uri: http::Uri,
    /// The request's body for it.
    pub body: B,
    /// Extensions replacing the first model's: its `ModelId`, `Candidates`, `Demand`,
    /// `RateCount` and whatever the inner stack reads.
    pub extensions: http::Extensions,
}

/// Request header naming a conversation, pinned to one channel (F9).
pub const CONVERSATION_HEADER: &str = "x-tollgate-conversation";

// The same names as header names, built at compile time (a lookup by `&str` parses the
// name on every request).
const CONVERSATION: HeaderName = HeaderName::from_static(CONVERSATION_HEADER);
const DEADLINE: HeaderName = HeaderName::from_static(crate::DEADLINE_HEADER);

/// What a frame held before the first content chunk is (F4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkKind {
    /// Content: the stream is committed to its channel.
    Content,
    /// Preamble (Anthropic `message_start`, `ping`): held until content arrives.
    Preamble,
    /// An error event: the stream failed before its first content chunk.
    Error,
}

/// Tells what the first frames of a successful answer are; by default every data
/// frame is content. The proxy plugs in one that knows each dialect's SSE events.
pub type ChunkClassifier = Arc<dyn Fn(Dialect, &[u8]) -> ChunkKind + Send + Sync>;

/// Failover settings.
#[derive(Clone, Debug)]
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
struct Counters {
    requests: AtomicU64,
    attempts: AtomicU64,
    budget_refused: AtomicU64,
    failed: AtomicU64,
    broken_streams: Arc<AtomicU64>,
}

struct Shared<C> {
    registry: Arc<UpstreamRegistry>,
    health: HealthBook,
    sticky: StickyMap,
    budget: TpsBudget,
    clock: C,
    config: FailoverConfig,
    chunks: Option<ChunkClassifier>,
    counters: Counters,
}

/// Applies [`Failover`] to a service. See the [module docs](self).
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
        Self {
            shared: Arc::new(Shared {
                registry,
                health: HealthBook::new(config.health),
                sticky: StickyMap::new(config.sticky_ttl.as_millis() as u64, config.sticky_max),
                budget,
                clock,
                config,
                chunks,
                counters: Counters::default(),
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

/// Attempts across channels around a service (F1–F10). Built by [`FailoverLayer`].
pub struct Failover<S, C> {
    inner: S,
    shared: Arc<Shared<C>>,
}

impl<S: Clone, C> Clone for Failover<S, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

/// Response future of [`Failover`]: several attempts, each awaiting the inner stack.
pub type ResponseFuture<B> = Pin<Box<dyn Future<Output = Result<B, BoxError>> + Send>>;

impl<S, C, ReqB, ResB> Service<Request<ReqB>> for Failover<S, C>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
    C: Clock,
    ReqB: Clone + Send + 'static,
    ResB: Body + Send + 'static,
    ResB::Data: From<Bytes> + Send,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<FailoverBody<ResB>>;
    type Error = BoxError;
    type Future = ResponseFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        Box::pin(run(shared, inner, req))
    }
}

/// One failed attempt.
struct Tried {
    channel: Option<Arc<str>>,
    /// The model it was for (a fallback model may be served by the same channel).
    model: Option<Arc<str>>,
    verdict: Verdict,
}

/// The whole request: attempts until one commits or the rules say stop.
async fn run<S, C, ReqB, ResB>(
    shared: Arc<Shared<C>>,
    mut inner: S,
    req: Request<ReqB>,
) -> Result<Response<FailoverBody<ResB>>, BoxError>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
    C: Clock,
    ReqB: Clone + Send + 'static,
    ResB: Body + Send + 'static,
    ResB::Data: From<Bytes> + Send,
    ResB::Error: Into<BoxError>,
{
    let in_flight = crate::gauge::InFlight::enter(LayerKind::Failover);
    let (mut parts, mut body) = req.into_parts();
    let dialect = parts
        .extensions
        .get::<Dialect>()
        .copied()
        .unwrap_or(Dialect::Native);
    let mut fallback = parts.extensions.remove::<ModelFallback<ReqB>>();
    // The candidates, the request's usage recorder and a channel chosen above are
    // taken out of the head that every attempt clones: each attempt gets its own.
    let Some(mut candidates) = parts.extensions.remove::<Candidates>() else {
        // Nothing to fail over between: one call, passed through.
        let res = inner
            .call(Request::from_parts(parts, body))
            .await
            .map_err(Into::into)?;
        return Ok(res.map(|b| {
            FailoverBody::new(VecDeque::new(), Box::pin(b), dialect, None).counting(in_flight)
        }));
    };
    shared.counters.requests.fetch_add(1, Ordering::Relaxed);
    shared.budget.deposit();
    let outer = parts
        .extensions
        .remove::<UsageRecorder>()
        .unwrap_or_default();
    parts.extensions.remove::<Chosen>();
    let mut model = parts.extensions.get::<ModelId>().map(|m| m.0.clone());
    let mut switched = false;
    let conversation: Option<Arc<str>> = parts
        .headers
        .get(CONVERSATION)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 256)
        .map(Arc::from);
    let deadline = parts
        .headers
        .get(DEADLINE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_millis)
        .or(shared.config.default_deadline)
        .map(|d| Instant::now() + d);
    let config = &shared.config;
    let mut tried: Vec<Tried> = Vec::new();
    let mut stopped_accounts: Vec<String> = Vec::new();
    let mut attempts = 0u32;
    // Bounded: every turn either sends an attempt (≤ max_attempts) or waits once for
    // a recovery (≤ max_attempts waits).
    let mut waits = 0u32;
    // When the last attempt was sent (its latency, and the jitter's seed).
    let mut sent_at: Option<Instant> = None;
    let result = loop {
        if attempts >= config.max_attempts.max(1) {
            break None;
        }
        let now = shared.clock.now();
        let retry_tried = fallback.is_none();
        let (order, probes) = order(
            &shared,
            &Next {
                all: &candidates,
                tried: &tried,
                stopped: &stopped_accounts,
                conversation: conversation.as_deref(),
                model: model.as_deref(),
                retry_tried,
            },
            now,
        );
        if order.as_ref().is_some_and(Vec::is_empty) {
            // F11: every channel of this model tried; switch to the fallback model.
            if let Some((fb, next)) = fallback.take().and_then(|fb| {
                let next = fb.build()?;
                Some((fb, next))
            }) {
                tracing::info!(from = model.as_deref().unwrap_or("?"), to = %fb.model, "failover switches to the fallback model");
                #[cfg(feature = "metrics")]
                metrics::counter!("tollgate_model_fallbacks_total").increment(1);
                parts.uri = next.uri;
                body = next.body;
                parts.extensions.extend(next.extensions);
                candidates = parts
                    .extensions
                    .remove::<Candidates>()
                    .unwrap_or_else(|| Candidates::new([]));
                parts.extensions.remove::<Chosen>();
                model = Some(fb.model);
                switched = true;
                continue;
            }
            break None;
        }
        if attempts > 0 {
            if !shared.budget.withdraw() {
                shared
                    .counters
                    .budget_refused
                    .fetch_add(1, Ordering::Relaxed);
                #[cfg(feature = "metrics")]
                metrics::counter!("tollgate_retry_budget_refused_total").increment(1);
                release_probes(&shared, &probes, None);
                break None;
            }
            // F6: without a provider Retry-After, back off with jitter.
            let last = &tried[tried.len() - 1].verdict;
            if last.retry_after_ms.is_none() && last.reason != Reason::Connect {
                let wait = Duration::from_millis(backoff_ms(
                    attempts - 1,
                    config.backoff_base.as_millis() as u64,
                    config.backoff_cap.as_millis() as u64,
                    sent_at.map_or(0, |t| t.elapsed().as_nanos() as u64) ^ u64::from(attempts),
                ));
                if deadline.is_some_and(|d| Instant::now() + wait > d) {
                    release_probes(&shared, &probes, None);
                    break None;
                }
                // (Boxed here and below: the paths taken only on a failure keep their
                // timers out of every request's future.)
                Box::pin(tokio::time::sleep(wait)).await;
            }
        }
        let recorder = UsageRecorder::child_of(&outer);
        let mut attempt = Request::from_parts(parts.clone(), body.clone());
        attempt.extensions_mut().insert(recorder.clone());
        let narrowed = match order {
            Some(order)
                if order.len() != candidates.channels().len()
                    || order
                        .iter()
                        .zip(candidates.channels())
                        .any(|(a, b)| a.name != b.name) =>
            {
                Candidates(order.into())
            }
            _ => candidates.clone(),
        };
        attempt.extensions_mut().insert(narrowed);
        let sent = Instant::now();
        sent_at = Some(sent);
        // One span per attempt: its number, the channel that served it, the billing
        // attempt id (recorded by the billing layer inside it) and the outcome.
        let span = tracing::debug_span!(
            "attempt",
            n = attempts + 1,
            channel = tracing::field::Empty,
            attempt_id = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let call: Result<S::Future, BoxError> = match inner.ready().await.map_err(Into::into) {
            Ok(svc) => Ok(span.in_scope(|| svc.call(attempt))),
            Err(e) => Err(e),
        };
        let res = match call {
            Ok(fut) => {
                use tracing::Instrument;
                fut.instrument(span.clone()).await.map_err(Into::into)
            }
            Err(e) => Err(e),
        };
        let served = match &res {
            Ok(r) => r.extensions().get::<Chosen>().map(|c| c.0.name.clone()),
            Err(_) => None,
        }
        .or_else(|| recorder.channel());
        release_probes(&shared, &probes, served.as_deref());
        let latency = sent.elapsed().as_millis() as u64;
        if !span.is_disabled() {
            if let Some(ch) = served.as_deref() {
                span.record("channel", ch);
            }
            let outcome = match &res {
                // The provider's status, or the gateway code that refused the attempt.
                Ok(r) => u64::from(r.status().as_u16()),
                Err(e) => e
                    .downcast_ref::<Rejection>()
                    .map_or(0, |r| u64::from(r.code().code())),
            };
            span.record("outcome", outcome);
        }
        match res {
            Err(e) => {
                let Some(r) = e.downcast_ref::<Rejection>() else {
                    return Err(e);
                };
                match (r.code(), r.layer()) {
                    // The forwarder could not get an answer.
                    (GatewayCode::UpstreamFailed, _) => {
                        attempts += 1;
                        let transport = if recorder.report().is_none() {
                            Transport::Connect
                        } else {
                            Transport::Timeout
                        };
                        let verdict = transport_verdict(dialect, transport);
                        tried.push(failed(&shared, served, &model, verdict, latency));
                    }
                    // No channel usable now. First attempt: that is the answer (U4).
                    // On a retry: wait for the earliest recovery when it fits.
                    (
                        GatewayCode::RpmLimit
                        | GatewayCode::RphLimit
                        | GatewayCode::RpdLimit
                        | GatewayCode::TpmLimit
                        | GatewayCode::UpstreamCooling
                        | GatewayCode::CapacityBusy,
                        LayerKind::UpstreamLimit | LayerKind::CapacityQueue,
                    ) if !tried.is_empty() => {
                        let wait = r.retry_after().filter(|w| *w <= config.max_wait);
                        match wait {
                            Some(w)
                                if waits < config.max_attempts
                                    && deadline.is_none_or(|d| Instant::now() + w <= d) =>
                            {
                                waits += 1;
                                tracing::debug!(
                                    wait_ms = w.as_millis() as u64,
                                    "failover waits for a channel to recover"
                                );
                                Box::pin(tokio::time::sleep(w)).await;
                            }
                            _ => break None,
                        }
                    }
                    // The fallback model's own admission refused it (its money upper
                    // bound does not fit the budget, ...): the first model's failure
                    // stands (F11).
                    _ if switched && !tried.is_empty() => break None,
                    _ => return Err(e),
                }
            }
            Ok(res) => {
                attempts += 1;
                shared.counters.attempts.fetch_add(1, Ordering::Relaxed);
                let status = res.status().as_u16();
                if (200..300).contains(&status) {
                    match gate(&shared, res, dialect).await {
                        Gate::Committed(res) => {
                            if let Some(ch) = &served {
                                shared.health.record(ch, true, latency, shared.clock.now());
                                if let Some(conv) = &conversation {
                                    shared.sticky.pin(conv, ch.clone(), shared.clock.now());
                                }
                            }
                            break Some(res);
                        }
                        Gate::Failed => {
                            let verdict =
                                transport_verdict(dialect, Transport::StreamBeforeFirstChunk);
                            tried.push(failed(&shared, served, &model, verdict, latency));
                        }
                    }
                    continue;
                }
                let (rparts, rbody) = res.into_parts();
                let (head, rest) = Box::pin(read_prefix(
                    rbody,
                    config.error_body_limit,
                    config.first_chunk_timeout,
                ))
                .await;
                let f = error_facts(dialect, status, &rparts.headers, &head);
                let verdict = classify(dialect, &f);
                tracing::info!(
                    channel = served.as_deref().unwrap_or("?"),
                    status,
                    reason = verdict.reason.as_str(),
                    failover = verdict.failover,
                    provider_request_id = f.request_id.as_deref().unwrap_or(""),
                    "upstream attempt failed"
                );
                if !verdict.failover {
                    // F3: the request itself is at fault (or the error is unknown):
                    // the provider's answer goes to the client as it was.
                    if verdict.reason == Reason::Unknown {
                        tracing::warn!(
                            status,
                            body = %String::from_utf8_lossy(&head[..head.len().min(2048)]),
                            "unclassified provider error; not retried"
                        );
                    }
                    let mut prefix = VecDeque::new();
                    if !head.is_empty() {
                        prefix.push_back(Frame::data(ResB::Data::from(head)));
                    }
                    record_attempts(attempts);
                    return Ok(Response::from_parts(
                        rparts,
                        FailoverBody::new(prefix, rest, dialect, None).counting(in_flight),
                    ));
                }
                drop(rest);
                if verdict.stop_account {
                    if let Some(k) = served
                        .as_deref()
                        .and_then(|c| shared.registry.credential_cooldown_key(c))
                    {
                        stopped_accounts.push(k);
                    }
                }
                tried.push(failed(&shared, served, &model, verdict, latency));
            }
        }
    };
    record_attempts(attempts);
    if let Some(res) = result {
        return Ok(res.map(|b| b.counting(in_flight)));
    }
    shared.counters.failed.fetch_add(1, Ordering::Relaxed);
    if tried.is_empty() {
        // Nothing was sent: every candidate's circuit is open (F8). The providers have
        // been failing; say when the first one will be probed again.
        let now = shared.clock.now();
        let probe_at = candidates
            .channels()
            .iter()
            .filter_map(|c| match shared.health.state(&c.name, now) {
                HealthState::Open { until } => Some(until.saturating_sub(now)),
                _ => None,
            })
            .min()
            .map(Duration::from_millis);
        return Err(
            Rejection::new(GatewayCode::UpstreamFailed, LayerKind::Failover)
                .with_retry_after(probe_at)
                .into(),
        );
    }
    let now = shared.clock.now();
    let all_rate_limited = tried.iter().all(|t| t.verdict.rate_limited);
    let rejection = if all_rate_limited {
        let recover = candidates
            .channels()
            .iter()
            .filter_map(|c| {
                let scopes = shared.registry.scopes(&c.name, model.as_deref())?;
                shared
                    .registry
                    .cooldowns()
                    .any_until(&scopes.cooldown_keys(), now)
            })
            .min()
            .map(|u| Duration::from_millis(u.saturating_sub(now)))
            .or(Some(Duration::from_secs(1)));
        Rejection::new(GatewayCode::UpstreamRateLimited, LayerKind::Failover)
            .with_retry_after(recover)
    } else {
        Rejection::new(GatewayCode::UpstreamFailed, LayerKind::Failover)
    };
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_failover_final_total", "code" => rejection.code().code().to_string())
        .increment(1);
    Err(rejection.into())
}

/// Retry amplification: the attempts one request took.
fn record_attempts(_attempts: u32) {
    #[cfg(feature = "metrics")]
    if _attempts > 0 {
        crate::gauge::record_attempts(_attempts);
    }
}

/// The verdict on an attempt that got no answer (F5).
fn transport_verdict(dialect: Dialect, t: Transport) -> Verdict {
    let f = ErrorFacts {
        transport: Some(t),
        ..ErrorFacts::default()
    };
    classify(dialect, &f)
}

/// A failed attempt on `channel` for `model`: health record, channel action (F5, F6,
/// F8), metrics; returns it for the request's record of tried channels.
fn failed<C: Clock>(
    shared: &Shared<C>,
    channel: Option<Arc<str>>,
    model: &Option<Arc<str>>,
    verdict: Verdict,
    latency_ms: u64,
) -> Tried {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_failover_attempt_failures_total", "reason" => verdict.reason.as_str())
        .increment(1);
    if let Some(ch) = channel.as_deref() {
        act_on(shared, ch, model.as_deref(), &verdict, latency_ms);
    }
    Tried {
        channel,
        model: model.clone(),
        verdict,
    }
}

fn act_on<C: Clock>(
    shared: &Shared<C>,
    ch: &str,
    model: Option<&str>,
    verdict: &Verdict,
    latency_ms: u64,
) {
    let now = shared.clock.now();
    shared.health.record(ch, false, latency_ms, now);
    let cooldowns = shared.registry.cooldowns();
    match verdict.action {
        ChannelAction::None => {}
        ChannelAction::SlowDown(ms) | ChannelAction::CoolDown(ms) => {
            if let Some(k) = shared.registry.signal_key(ch, model) {
                cooldowns.cool(&k, now.saturating_add(ms), now);
            }
        }
        ChannelAction::Disable => {
            if let Some(k) = shared.registry.credential_cooldown_key(ch) {
                tracing::warn!(
                    channel = ch,
                    reason = verdict.reason.as_str(),
                    "credential disabled until an operator re-enables it"
                );
                cooldowns.disable(&k, now);
            }
        }
    }
}

/// Where a request stands when its next attempt is planned.
struct Next<'a> {
    /// The current model's candidates.
    all: &'a Candidates,
    tried: &'a [Tried],
    /// Credential keys of paying accounts ruled out by a spend cap.
    stopped: &'a [String],
    conversation: Option<&'a str>,
    model: Option<&'a str>,
    /// Whether channels already tried for this model may be tried again (F6).
    retry_tried: bool,
}

/// The candidates of the next attempt, in order: untried channels (or, when every one
/// was tried and `retry_tried`, those whose failure may pass — F6), none of a stopped
/// paying account, none with an open circuit; half-open channels first (their probes),
/// then the pinned channel of the conversation if healthy, degraded ones last except
/// one turn in [`DEGRADED_SHARE`](tollgate_core::failover::DEGRADED_SHARE) (F8, F9). Returns the half-open channels a probe was taken on; `None` for "all
/// candidates as they are" (the usual first attempt: nothing tried, every channel
/// healthy, no pin to move forward), which allocates nothing.
fn order<C: Clock>(
    shared: &Shared<C>,
    next: &Next<'_>,
    now: u64,
) -> (Option<Vec<ChannelRef>>, Vec<Arc<str>>) {
    let Next {
        all,
        tried,
        stopped,
        conversation,
        model,
        retry_tried,
    } = *next;
    if tried.is_empty()
        && stopped.is_empty()
        && all
            .channels()
            .iter()
            .all(|c| shared.health.state(&c.name, now) == HealthState::Healthy)
    {
        let pinned = conversation.and_then(|c| shared.sticky.get(c, now));
        let moves = pinned.is_some_and(|p| all.channels().iter().skip(1).any(|c| c.name == p));
        if !moves {
            return (None, Vec::new());
        }
    }
    // Builds the credential key only once an account has been stopped (rare).
    let account_ok = |c: &ChannelRef| {
        stopped.is_empty()
            || shared
                .registry
                .credential_cooldown_key(&c.name)
                .is_none_or(|k| !stopped.contains(&k))
    };
    let this_model = |t: &&Tried| t.model.as_deref() == model;
    let was_tried = |c: &ChannelRef| {
        tried
            .iter()
            .filter(this_model)
            .any(|t| t.channel.as_deref() == Some(&*c.name))
    };
    let mut pool: Vec<&ChannelRef> = all
        .channels()
        .iter()
        .filter(|c| !was_tried(c) && account_ok(c))
        .collect();
    if pool.is_empty() && retry_tried {
        pool = all
            .channels()
            .iter()
            .filter(|c| {
                account_ok(c)
                    && tried
                        .iter()
                        .filter(this_model)
                        .filter(|t| t.channel.as_deref() == Some(&*c.name))
                        .all(|t| t.verdict.retryable)
            })
            .collect();
    }
    let mut healthy = Vec::with_capacity(pool.len());
    let mut degraded = Vec::new();
    let mut probing = Vec::new();
    let mut probes = Vec::new();
    for c in pool {
        match shared.health.state(&c.name, now) {
            HealthState::Healthy => healthy.push(c.clone()),
            // Ahead of every healthy channel so far: moving it back takes its turn,
            // which it keeps one time in DEGRADED_SHARE.
            HealthState::Degraded
                if healthy.is_empty() && shared.health.degraded_keeps_turn(&c.name) =>
            {
                healthy.push(c.clone())
            }
            HealthState::Degraded => degraded.push(c.clone()),
            HealthState::Open { .. } => {}
            HealthState::HalfOpen => {
                // A recovering channel is tried first by the few requests allowed to
                // probe it (the others fail over if it still fails).
                if shared.health.admit(&c.name, now) == Admit::Probe {
                    probes.push(c.name.clone());
                    probing.push(c.clone());
                }
            }
        }
    }
    if let Some(pinned) = conversation.and_then(|c| shared.sticky.get(c, now)) {
        if let Some(i) = healthy.iter().position(|c| c.name == pinned) {
            let c = healthy.remove(i);
            healthy.insert(0, c);
        }
    }
    healthy.extend(degraded);
    probing.extend(healthy);
    (Some(probing), probes)
}

/// Gives back the probe slots of half-open channels the attempt did not use.
fn release_probes<C>(shared: &Shared<C>, probes: &[Arc<str>], served: Option<&str>) {
    for p in probes {
        if served != Some(&**p) {
            shared.health.release_probe(p);
        }
    }
}

enum Gate<B: Body> {
    Committed(Response<FailoverBody<B>>),
    Failed,
}

/// F4: holds a successful answer until its first content chunk (bounded by
/// `first_chunk_timeout`). Preamble frames are kept and sent ahead of it.
async fn gate<C, B>(shared: &Arc<Shared<C>>, res: Response<B>, dialect: Dialect) -> Gate<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    let (parts, body) = res.into_parts();
    let mut body = Box::pin(body);
    let mut held: VecDeque<Frame<B::Data>> = VecDeque::new();
    let mut held_bytes = 0usize;
    // Armed at the first frame that is not ready at once: a small answer is usually
    // whole by the time its head is, and needs no timer.
    let mut until = None;
    // Only an event stream can carry an error event after content.
    let sse = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let broken = sse.then(|| shared.counters.broken_streams.clone());
    loop {
        if body.is_end_stream() {
            break;
        }
        // (The body's error is dropped here: a failed read is all the gate needs.)
        let ready = std::future::poll_fn(|cx| {
            Poll::Ready(
                body.as_mut()
                    .poll_frame(cx)
                    .map(|n| n.map(|r| r.map_err(drop))),
            )
        })
        .await;
        let next = match ready {
            Poll::Ready(next) => next,
            Poll::Pending => {
                let until = *until
                    .get_or_insert_with(|| Instant::now() + shared.config.first_chunk_timeout);
                match Box::pin(tokio::time::timeout_at(until, body.frame())).await {
                    Err(_) => return Gate::Failed,
                    Ok(next) => next.map(|r| r.map_err(drop)),
                }
            }
        };
        let frame = match next {
            None => break,
            Some(Err(_)) => return Gate::Failed,
            Some(Ok(f)) => f,
        };
        let Some(data) = frame.data_ref() else {
            held.push_back(frame);
            continue;
        };
        if !data.has_remaining() {
            continue;
        }
        let kind = match &shared.chunks {
            Some(classify) => {
                let bytes = data.chunk();
                classify(dialect, bytes)
            }
            None => ChunkKind::Content,
        };
        held_bytes += data.remaining();
        held.push_back(frame);
        match kind {
            ChunkKind::Content => break,
            ChunkKind::Error => return Gate::Failed,
            // A preamble that never ends is content by another name: commit past 64 KiB.
            ChunkKind::Preamble if held_bytes > 64 * 1024 => break,
            ChunkKind::Preamble => {}
        }
    }
    Gate::Committed(Response::from_parts(
        parts,
        FailoverBody::new(held, body, dialect, broken),
    ))
}

/// Reads up to `limit` bytes of an error answer (bounded in time); returns them and
/// the rest of the body.
async fn read_prefix<B>(body: B, limit: usize, within: Duration) -> (Bytes, Pin<Box<B>>)
where
    B: Body,
{
    let mut body = Box::pin(body);
    let mut buf = bytes::BytesMut::new();
    let until = Instant::now() + within;
    while buf.len() < limit && !body.is_end_stream() {
        match tokio::time::timeout_at(until, body.frame()).await {
            Ok(Some(Ok(f))) => {
                if let Ok(mut d) = f.into_data() {
                    let take = d.remaining().min(limit - buf.len());
                    buf.extend_from_slice(&d.copy_to_bytes(take));
                }
            }
            _ => break,
        }
    }
    (buf.freeze(), body)
}
