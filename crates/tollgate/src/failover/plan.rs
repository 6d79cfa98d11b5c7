//! The decisions of one request's attempts, apart from the plumbing that sends them:
//! the walk over its candidate channels before each attempt (F1, F6, F8, F9), the next
//! step after an attempt's outcome (F1, F6, F7, F11) and the final answer (F10).

use std::sync::Arc;
use std::time::Duration;
use tollgate_core::failover::{
    Admit, ChannelAction, ErrorFacts, HealthBook, HealthState, Reason, StickyMap, Transport,
    Verdict, backoff_ms, classify,
};
use tollgate_core::upstream::UpstreamRegistry;
use tollgate_core::{Candidates, ChannelRef, Dialect, GatewayCode, LayerKind, Millis, Rejection};

/// What failover reads and writes of the channels: shared by every request.
#[derive(Clone, Copy)]
pub(crate) struct Channels<'a> {
    /// Per-channel health (F8).
    pub(crate) health: &'a HealthBook,
    /// Sticky conversations (F9).
    pub(crate) sticky: &'a StickyMap,
    /// Channels, credentials and cooldowns (F5, F6).
    pub(crate) registry: &'a UpstreamRegistry,
}

/// One failed attempt, kept for the rest of the request.
#[derive(Clone, Debug)]
pub(crate) struct Tried {
    /// The channel that served it, when known.
    pub(crate) channel: Option<Arc<str>>,
    /// The model it was for (a fallback model may be served by the same channel).
    pub(crate) model: Option<Arc<str>>,
    /// The classifier's verdict.
    pub(crate) verdict: Verdict,
}

/// Where a request stands when its next attempt is planned.
pub(crate) struct Next<'a> {
    /// The current model's candidates.
    pub(crate) all: &'a Candidates,
    /// The failed attempts so far.
    pub(crate) tried: &'a [Tried],
    /// Credential keys of paying accounts ruled out by a spend cap.
    pub(crate) stopped: &'a [String],
    /// The conversation's id (F9).
    pub(crate) conversation: Option<&'a str>,
    /// The current model.
    pub(crate) model: Option<&'a str>,
    /// Whether channels already tried for this model may be tried again (F6).
    pub(crate) retry_tried: bool,
}

/// The answer of [`order`].
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Order {
    /// The candidates of the next attempt, in order; `None` for "all candidates as they
    /// are" (the usual first attempt), which allocates nothing.
    pub(crate) channels: Option<Vec<ChannelRef>>,
    /// The half-open channels a probe was taken on.
    pub(crate) probes: Vec<Arc<str>>,
}

impl Order {
    /// No channel is left for this model.
    pub(crate) fn is_empty(&self) -> bool {
        self.channels.as_ref().is_some_and(Vec::is_empty)
    }

    /// The candidates the attempt carries: `all` itself when the order is the same.
    pub(crate) fn candidates(&mut self, all: &Candidates) -> Candidates {
        match self.channels.take() {
            Some(order)
                if order.len() != all.channels().len()
                    || order
                        .iter()
                        .zip(all.channels())
                        .any(|(a, b)| a.name != b.name) =>
            {
                Candidates(order.into())
            }
            _ => all.clone(),
        }
    }
}

/// The candidates of the next attempt, in order: untried channels (or, when every one
/// was tried and `retry_tried`, those whose failure may pass — F6), none of a stopped
/// paying account, none with an open circuit; half-open channels first (their probes),
/// then the pinned channel of the conversation if healthy, degraded ones last except
/// one turn in [`DEGRADED_SHARE`](tollgate_core::failover::DEGRADED_SHARE) (F8, F9).
pub(crate) fn order(ch: Channels<'_>, next: &Next<'_>, now: Millis) -> Order {
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
            .all(|c| ch.health.state(&c.name, now) == HealthState::Healthy)
    {
        let pinned = conversation.and_then(|c| ch.sticky.get(c, now));
        let moves = pinned.is_some_and(|p| all.channels().iter().skip(1).any(|c| c.name == p));
        if !moves {
            return Order::default();
        }
    }
    // Builds the credential key only once an account has been stopped (rare).
    let account_ok = |c: &ChannelRef| {
        stopped.is_empty()
            || ch
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
        match ch.health.state(&c.name, now) {
            HealthState::Healthy => healthy.push(c.clone()),
            // Ahead of every healthy channel so far: moving it back takes its turn,
            // which it keeps one time in DEGRADED_SHARE.
            HealthState::Degraded
                if healthy.is_empty() && ch.health.degraded_keeps_turn(&c.name) =>
            {
                healthy.push(c.clone())
            }
            HealthState::Degraded => degraded.push(c.clone()),
            HealthState::Open { .. } => {}
            HealthState::HalfOpen => {
                // A recovering channel is tried first by the few requests allowed to
                // probe it (the others fail over if it still fails).
                if ch.health.admit(&c.name, now) == Admit::Probe {
                    probes.push(c.name.clone());
                    probing.push(c.clone());
                }
            }
        }
    }
    if let Some(pinned) = conversation.and_then(|c| ch.sticky.get(c, now)) {
        if let Some(i) = healthy.iter().position(|c| c.name == pinned) {
            let c = healthy.remove(i);
            healthy.insert(0, c);
        }
    }
    healthy.extend(degraded);
    probing.extend(healthy);
    Order {
        channels: Some(probing),
        probes,
    }
}

/// Gives back the probe slots of half-open channels the attempt did not use.
pub(crate) fn release_probes(health: &HealthBook, probes: &[Arc<str>], served: Option<&str>) {
    for p in probes {
        if served != Some(&**p) {
            health.release_probe(p);
        }
    }
}

/// The verdict on an attempt that got no answer (F5).
pub(crate) fn transport_verdict(dialect: Dialect, t: Transport) -> Verdict {
    let f = ErrorFacts {
        transport: Some(t),
        ..ErrorFacts::default()
    };
    classify(dialect, &f)
}

/// The bounds of the attempts (F1, F6).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RetryLimits {
    /// Most attempts per request.
    pub(crate) max_attempts: u32,
    /// Backoff between attempts without a Retry-After: base, doubling to the cap.
    pub(crate) backoff_base_ms: Millis,
    /// See `backoff_base_ms`.
    pub(crate) backoff_cap_ms: Millis,
    /// Longest single wait for a channel to recover.
    pub(crate) max_wait: Duration,
}

/// Time on the request's own axis, from when failover took it: now and the deadline
/// (`x-tollgate-deadline-ms`, or the configured default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Timeline {
    /// Since the request reached failover.
    pub(crate) now: Duration,
    /// When the client stops waiting.
    pub(crate) deadline: Option<Duration>,
}

impl Timeline {
    /// Whether a wait of `wait` ends by the deadline.
    pub(crate) fn allows(&self, wait: Duration) -> bool {
        self.deadline.is_none_or(|d| self.now + wait <= d)
    }
}

/// The retry budget (F7) as the decision sees it: a retry takes one withdrawal.
pub(crate) trait RetryBudget {
    /// Takes one retry; false when the budget has no room.
    fn withdraw(&self) -> bool;
}

impl<F: Fn() -> bool> RetryBudget for F {
    fn withdraw(&self) -> bool {
        self()
    }
}

/// Why the attempts stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// `max_attempts` were sent (F1).
    AttemptsSpent,
    /// No channel is left to try (F1, F8) and no fallback model either (F11).
    NoChannel,
    /// The retry budget has no room (F7).
    Budget,
    /// The backoff would pass the deadline (F6).
    Deadline,
}

/// The next step of a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RetryDecision {
    /// Send an attempt after `wait` (zero: at once) to the channels of `order`.
    Send {
        /// The backoff (F6).
        wait: Duration,
        /// The channels, and the probes taken.
        order: Order,
    },
    /// Every channel of this model was tried and a fallback model is on offer: switch
    /// to it ([`Attempts::switch`]) and decide again (F11).
    Switch,
    /// No further attempt: answer with [`Attempts::final_failure`].
    Stop(Stop),
}

/// What an error from further in (not an upstream failure) means for the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The forwarder's failure in the shape of a rejection (50202): an attempt that got
    /// no answer.
    Failed(Transport),
    /// No channel is usable now: wait this long, then decide again (not an attempt).
    Wait(Duration),
    /// Stop with the final failure.
    Stop,
    /// The request's own answer: it goes to the client as it is.
    PassOn,
}

/// One request's attempts: what was tried, what was ruled out, and the next step.
#[derive(Debug)]
pub(crate) struct Attempts {
    candidates: Candidates,
    model: Option<Arc<str>>,
    conversation: Option<Arc<str>>,
    /// A fallback model is on offer and not taken yet (F11).
    fallback: bool,
    /// The request was switched to its fallback model.
    switched: bool,
    tried: Vec<Tried>,
    /// Credential keys of paying accounts ruled out by a spend cap (scenario 6).
    stopped: Vec<String>,
    sent: u32,
    /// Bounded: at most `max_attempts` waits for a channel to recover.
    waits: u32,
}

impl Attempts {
    /// A request over `candidates` for `model`, in `conversation`, with a fallback
    /// model on offer or not.
    pub(crate) fn new(
        candidates: Candidates,
        model: Option<Arc<str>>,
        conversation: Option<Arc<str>>,
        fallback: bool,
    ) -> Self {
        Self {
            candidates,
            model,
            conversation,
            fallback,
            switched: false,
            tried: Vec::new(),
            stopped: Vec::new(),
            sent: 0,
            waits: 0,
        }
    }

    /// Attempts sent so far (those refused by a layer further in not included).
    pub(crate) fn sent(&self) -> u32 {
        self.sent
    }

    /// The current model's candidates.
    pub(crate) fn candidates(&self) -> &Candidates {
        &self.candidates
    }

    /// The current model.
    pub(crate) fn model(&self) -> Option<&Arc<str>> {
        self.model.as_ref()
    }

    /// The next step (the seed's `decide(failure, budget, deadline)`): at most
    /// `max_attempts`; the channels left in [`order`]; when none is left, the fallback
    /// model or stop; a retry takes one withdrawal from `budget` and, without a
    /// provider Retry-After (or after a refused connection), waits the backoff, unless
    /// it would pass the deadline. `seed` draws the jitter. Probes taken by the walk
    /// are given back when the step is a stop.
    pub(crate) fn decide(
        &mut self,
        ch: Channels<'_>,
        limits: &RetryLimits,
        budget: &impl RetryBudget,
        time: Timeline,
        seed: u64,
        now: Millis,
    ) -> RetryDecision {
        if self.sent >= limits.max_attempts.max(1) {
            return RetryDecision::Stop(Stop::AttemptsSpent);
        }
        let order = order(
            ch,
            &Next {
                all: &self.candidates,
                tried: &self.tried,
                stopped: &self.stopped,
                conversation: self.conversation.as_deref(),
                model: self.model.as_deref(),
                retry_tried: !self.fallback,
            },
            now,
        );
        if order.is_empty() {
            if self.fallback {
                self.fallback = false;
                return RetryDecision::Switch;
            }
            return RetryDecision::Stop(Stop::NoChannel);
        }
        let stop = |why| {
            release_probes(ch.health, &order.probes, None);
            RetryDecision::Stop(why)
        };
        let Some(last) = self.tried.last().filter(|_| self.sent > 0) else {
            return RetryDecision::Send {
                wait: Duration::ZERO,
                order,
            };
        };
        if !budget.withdraw() {
            return stop(Stop::Budget);
        }
        // F6: without a provider Retry-After, back off with jitter.
        let verdict = last.verdict;
        if verdict.retry_after_ms.is_none() && verdict.reason != Reason::Connect {
            let wait = Duration::from_millis(backoff_ms(
                self.sent - 1,
                limits.backoff_base_ms,
                limits.backoff_cap_ms,
                seed,
            ));
            if !time.allows(wait) {
                return stop(Stop::Deadline);
            }
            return RetryDecision::Send { wait, order };
        }
        RetryDecision::Send {
            wait: Duration::ZERO,
            order,
        }
    }

    /// Switches to the fallback model (F11): its candidates; channels of a stopped
    /// paying account stay excluded.
    pub(crate) fn switch(&mut self, model: Arc<str>, candidates: Candidates) {
        self.model = Some(model);
        self.candidates = candidates;
        self.switched = true;
        self.fallback = false;
    }

    /// An attempt was sent and answered or failed on the way (a refusal further in
    /// is not an attempt).
    pub(crate) fn count_sent(&mut self) {
        self.sent += 1;
    }

    /// The attempt on `channel` failed with `verdict`: the channel is not tried again
    /// for this model (unless its failure may pass, F6), its health and cooldowns
    /// learn of it (F5, F6, F8), and a spend cap rules out its paying account
    /// (scenario 6). Returns whether the channel's credential was disabled.
    pub(crate) fn failed(
        &mut self,
        ch: Channels<'_>,
        channel: Option<Arc<str>>,
        verdict: Verdict,
        latency_ms: Millis,
        now: Millis,
    ) -> bool {
        let mut disabled = false;
        if let Some(c) = channel.as_deref() {
            if verdict.stop_account {
                if let Some(k) = ch.registry.credential_cooldown_key(c) {
                    self.stopped.push(k);
                }
            }
            disabled = act_on(ch, c, self.model.as_deref(), &verdict, latency_ms, now);
        }
        self.tried.push(Tried {
            channel,
            model: self.model.clone(),
            verdict,
        });
        disabled
    }

    /// The attempt on `channel` committed: its health and the conversation's pin
    /// learn of it (F8, F9).
    pub(crate) fn committed(
        &self,
        ch: Channels<'_>,
        channel: Option<&Arc<str>>,
        latency_ms: Millis,
        now: Millis,
    ) {
        if let Some(c) = channel {
            ch.health.record(c, true, latency_ms, now);
            if let Some(conv) = &self.conversation {
                ch.sticky.pin(conv, c.clone(), now);
            }
        }
    }

    /// What a rejection from further in means (the layers below refuse on their own):
    /// an upstream failure in a rejection's shape is a failed attempt of unknown
    /// result; no channel usable now (42902–42905, 42907, 42908 from the upstream limits,
    /// 42909 from capacity) is the answer on a first attempt (U4) and a wait on a retry
    /// when the recovery is within `max_wait` and the deadline; any other refusal of
    /// the fallback model (its money upper bound does not fit, …) leaves the first
    /// model's failure standing (F11).
    pub(crate) fn refused(
        &mut self,
        code: GatewayCode,
        layer: LayerKind,
        retry_after: Option<Duration>,
        limits: &RetryLimits,
        time: Timeline,
    ) -> Refused {
        let no_channel_now =
            matches!(
                code,
                GatewayCode::RpmLimit
                    | GatewayCode::RphLimit
                    | GatewayCode::RpdLimit
                    | GatewayCode::TpmLimit
                    | GatewayCode::UpstreamCooling
                    | GatewayCode::CapacityBusy
            ) && matches!(layer, LayerKind::UpstreamLimit | LayerKind::CapacityQueue);
        if code == GatewayCode::UpstreamFailed {
            return Refused::Failed(Transport::Timeout);
        }
        if no_channel_now && !self.tried.is_empty() {
            return match retry_after.filter(|w| *w <= limits.max_wait) {
                Some(w) if self.waits < limits.max_attempts && time.allows(w) => {
                    self.waits += 1;
                    Refused::Wait(w)
                }
                _ => Refused::Stop,
            };
        }
        if self.switched && !self.tried.is_empty() {
            return Refused::Stop;
        }
        Refused::PassOn
    }

    /// The final failure (F10): every tried channel rate limited → 42911 with the
    /// earliest recovery of the candidates' scopes (1 s when none is known); otherwise
    /// 50202. With nothing sent (every circuit open, F8), 50202 with the time the first
    /// channel will be probed again.
    pub(crate) fn final_failure(&self, ch: Channels<'_>, now: Millis) -> (Rejection, bool) {
        if self.tried.is_empty() {
            let probe_at = self
                .candidates
                .channels()
                .iter()
                .filter_map(|c| match ch.health.state(&c.name, now) {
                    HealthState::Open { until } => Some(until.saturating_sub(now)),
                    _ => None,
                })
                .min()
                .map(Duration::from_millis);
            let r = Rejection::new(GatewayCode::UpstreamFailed, LayerKind::Failover)
                .with_retry_after(probe_at);
            return (r, false);
        }
        let all_rate_limited = self.tried.iter().all(|t| t.verdict.rate_limited);
        let r = if all_rate_limited {
            let recover = self
                .candidates
                .channels()
                .iter()
                .filter_map(|c| {
                    let scopes = ch.registry.scopes(&c.name, self.model.as_deref())?;
                    ch.registry
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
        (r, true)
    }
}

/// The channel action of a failed attempt (F5, F6, F8): its health record, and the
/// cooldown or disablement of its scope. Returns whether the credential was disabled.
fn act_on(
    ch: Channels<'_>,
    channel: &str,
    model: Option<&str>,
    verdict: &Verdict,
    latency_ms: Millis,
    now: Millis,
) -> bool {
    ch.health.record(channel, false, latency_ms, now);
    let cooldowns = ch.registry.cooldowns();
    match verdict.action {
        ChannelAction::None => false,
        ChannelAction::SlowDown(ms) | ChannelAction::CoolDown(ms) => {
            if let Some(k) = ch.registry.signal_key(channel, model) {
                cooldowns.cool(&k, now.saturating_add(ms), now);
            }
            false
        }
        ChannelAction::Disable => match ch.registry.credential_cooldown_key(channel) {
            Some(k) => {
                cooldowns.disable(&k, now);
                true
            }
            None => false,
        },
    }
}
