//! The next step of a request after each attempt's outcome (F1, F6, F7, F11) and its
//! final answer (F10): a `decide(failure, budget, deadline)` step with what the
//! gateway adds to it — the channels left ([`order`]), the fallback model, the waits
//! for a channel to recover. Plain types: time is passed in (the shared clock's
//! milliseconds for health and cooldowns, the request's own
//! [`Timeline`] for its deadline), the retry budget is a trait.

use super::order::{Channels, Next, Order, Tried, order, release_probes};
use super::{
    ChannelAction, ErrorFacts, HealthState, Reason, Transport, Verdict, backoff_ms, classify,
};
use crate::capacity::Candidates;
use crate::clock::Millis;
use crate::dialect::Dialect;
use crate::rejection::{GatewayCode, LayerKind, Rejection};
use std::sync::Arc;
use std::time::Duration;

/// The verdict on an attempt that got no answer (F5).
pub fn transport_verdict(dialect: Dialect, t: Transport) -> Verdict {
    let f = ErrorFacts {
        transport: Some(t),
        ..ErrorFacts::default()
    };
    classify(dialect, &f)
}

/// The bounds of the attempts (F1, F6).
#[derive(Clone, Copy, Debug)]
pub struct RetryLimits {
    /// Most attempts per request.
    pub max_attempts: u32,
    /// Backoff between attempts without a Retry-After: base, doubling to the cap.
    pub backoff_base_ms: Millis,
    /// See `backoff_base_ms`.
    pub backoff_cap_ms: Millis,
    /// Longest single wait for a channel to recover.
    pub max_wait: Duration,
}

/// Time on the request's own axis, from when failover took it: now and the deadline
/// (`x-portcullis-deadline-ms`, or the configured default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// Since the request reached failover.
    pub now: Duration,
    /// When the client stops waiting.
    pub deadline: Option<Duration>,
}

impl Timeline {
    /// Whether a wait of `wait` ends by the deadline.
    pub fn allows(&self, wait: Duration) -> bool {
        self.deadline.is_none_or(|d| self.now + wait <= d)
    }
}

/// The retry budget (F7) as the decision sees it: a retry takes one withdrawal.
pub trait RetryBudget {
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
pub enum Stop {
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
pub enum RetryDecision {
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
pub enum Refused {
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
pub struct Attempts {
    candidates: Candidates,
    model: Option<Arc<str>>,
    conversation: Option<Arc<str>>,
    /// A fallback model is on offer and not taken yet (F11).
    fallback: bool,
    /// The request was switched to its fallback model.
    switched: bool,
    tried: Vec<Tried>,
    /// Credential keys of paying accounts ruled out by a spend cap (S6).
    stopped: Vec<String>,
    sent: u32,
    /// Bounded: at most `max_attempts` waits for a channel to recover.
    waits: u32,
}

impl Attempts {
    /// A request over `candidates` for `model`, in `conversation`, with a fallback
    /// model on offer or not.
    pub fn new(
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
    pub fn sent(&self) -> u32 {
        self.sent
    }

    /// The current model's candidates.
    pub fn candidates(&self) -> &Candidates {
        &self.candidates
    }

    /// The current model.
    pub fn model(&self) -> Option<&Arc<str>> {
        self.model.as_ref()
    }

    /// The next step (`decide(failure, budget, deadline)`): at most
    /// `max_attempts`; the channels left in [`order`]; when none is left, the fallback
    /// model or stop; a retry takes one withdrawal from `budget` and, without a
    /// provider Retry-After (or after a refused connection), waits the backoff, unless
    /// it would pass the deadline. `seed` draws the jitter. Probes taken by the walk
    /// are given back when the step is a stop.
    pub fn decide(
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
    pub fn switch(&mut self, model: Arc<str>, candidates: Candidates) {
        self.model = Some(model);
        self.candidates = candidates;
        self.switched = true;
        self.fallback = false;
    }

    /// An attempt was sent and answered or failed on the way (a refusal further in
    /// is not an attempt).
    pub fn count_sent(&mut self) {
        self.sent += 1;
    }

    /// The attempt on `channel` failed with `verdict`: the channel is not tried again
    /// for this model (unless its failure may pass, F6), its health and cooldowns
    /// learn of it (F5, F6, F8), and a spend cap rules out its paying account
    /// (S6). Returns whether the channel's credential was disabled.
    pub fn failed(
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
    pub fn committed(
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
    /// result; no channel usable now (42902–42905 and 42908 from the upstream limits,
    /// 42910 from capacity) is the answer on a first attempt (U4) and a wait on a retry
    /// when the recovery is within `max_wait` and the deadline; any other refusal of
    /// the fallback model (its money upper bound does not fit, …) leaves the first
    /// model's failure standing (F11).
    pub fn refused(
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
    pub fn final_failure(&self, ch: Channels<'_>, now: Millis) -> (Rejection, bool) {
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
