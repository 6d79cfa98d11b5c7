//! The window layer's decision, shared by the synchronous path in `call` and the
//! asynchronous one in the response future.

use super::WindowGuard;
use super::layer::Shared;
use crate::extensions::SlotClaim;
use crate::joint::JointFuture;
use crate::time::ms;
use portcullis_core::{
    Admission, AdmittedUnder, Clock, Demand, Dimension, Exceeded, Fallback, GatewayCode,
    JointDecision, LayerKind, Policy, RateLimitInfo, Rejection, Scope, StoreResult, Subject,
    UsageRecorder, WindowAsk, WindowStore, window_rejection,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What to do next with a request.
pub(crate) enum Step<St: WindowStore> {
    /// Admitted: call the inner service holding the guard.
    Admitted(WindowGuard<St>),
    /// Not limited (no policy, pay-as-you-go onto no policy, or store failed open).
    Unlimited,
    /// Refuse.
    Reject(Rejection),
    /// Await this store answer.
    Ask(St::Future<Admission>),
    /// Sleep, then ask again (W10 `max_wait`).
    Sleep(Duration),
    /// Await the slot and the windows decided together (`true`: windows asked too; see
    /// `crate::joint`).
    Joint(JointFuture, bool),
}

/// One request's admission in progress.
pub(crate) struct Admit<St, X, C> {
    pub(crate) shared: Arc<Shared<St, X, C>>,
    subject: Subject,
    scope: Scope,
    policy: Arc<Policy>,
    /// `Some` while a pay-as-you-go fall-through is still available (W8).
    fallback: Option<Option<Arc<Policy>>>,
    demand: Demand,
    recorder: UsageRecorder,
    wait_started: Option<Instant>,
    /// The slot layer's acquisition, while this layer has it to decide.
    claim: Option<SlotClaim>,
}

impl<St, X, C> Admit<St, X, C> {
    /// The scope the request is being admitted under (recorded for billing, W8).
    pub(crate) fn admitted_under(&self) -> AdmittedUnder {
        AdmittedUnder(self.scope)
    }

    /// True while this layer decides the slot layer's acquisition too.
    pub(crate) fn has_claim(&self) -> bool {
        self.claim.is_some()
    }
}

impl<St: WindowStore, X, C: Clock> Admit<St, X, C> {
    /// The first step for `subject`, or `None` when no policy limits it. A slot `claim`
    /// offered by the slot layer above is taken when there are windows to admit (the
    /// slot is then decided with them); otherwise the slot layer keeps it.
    pub(crate) fn start(
        shared: &Arc<Shared<St, X, C>>,
        subject: Subject,
        demand: Demand,
        recorder: UsageRecorder,
        claim: Option<SlotClaim>,
    ) -> Option<(Self, Step<St>)> {
        let resolved = subject.resolve(shared.config.clock.now());
        let (scope, policy) = resolved.primary?;
        let (scope, policy) = (scope, policy.clone());
        let fallback = match resolved.fallback {
            Fallback::Reject => None,
            Fallback::KeyPolicy(p) => Some(p.cloned()),
        };
        if !policy.has_window_limits() {
            return None;
        }
        let admit = Self {
            shared: shared.clone(),
            subject,
            scope,
            policy,
            fallback,
            demand,
            recorder,
            wait_started: None,
            claim: claim.filter(SlotClaim::claim),
        };
        let first = admit.ask();
        Some((admit, first))
    }

    /// The next store question: the windows, with the slot while it is undecided.
    fn ask(&self) -> Step<St> {
        match &self.claim {
            Some(c) => Step::Joint(
                c.decide(Some(WindowAsk {
                    scope: self.scope,
                    policy: &self.policy,
                    demand: &self.demand,
                })),
                true,
            ),
            None => Step::Ask(self.shared.config.store.admit(
                &self.subject.key,
                self.scope,
                &self.policy,
                &self.demand,
            )),
        }
    }

    /// No window limits the request: the slot alone, while it is undecided.
    fn unlimited(&self) -> Step<St> {
        match &self.claim {
            Some(c) => Step::Joint(c.decide(None), false),
            None => Step::Unlimited,
        }
    }

    /// The step after a joint answer (`windows`: the windows were asked too).
    pub(crate) fn on_joint_answer(
        &mut self,
        answer: StoreResult<JointDecision>,
        windows: bool,
    ) -> Step<St> {
        if let (Ok(_), Some(c)) = (&answer, &self.claim) {
            c.answered();
        }
        match answer {
            Ok(JointDecision::Admitted { lease, ticket }) => {
                if let Some(c) = self.claim.take() {
                    c.set_lease(lease);
                }
                match ticket {
                    Some(t) => self.on_answer(Ok(Admission::Admitted(t))),
                    None => Step::Unlimited,
                }
            }
            Ok(JointDecision::SlotFull { .. }) => Step::Reject(match self.claim.take() {
                Some(c) => c.full(),
                None => Rejection::new(GatewayCode::ConcurrencyLimit, LayerKind::ConcurrencySlot),
            }),
            // No room: the slot stays undecided for the next question (W8, W10).
            Ok(JointDecision::Exceeded(ex)) => self.on_answer(Ok(Admission::Exceeded(ex))),
            Err(e) => {
                // Each layer's failure mode on its own decision.
                let slot = self.claim.take().and_then(|c| c.on_error(&e));
                let window = if windows {
                    self.on_answer(Err(e))
                } else {
                    Step::Unlimited
                };
                match (window, slot) {
                    (Step::Reject(r), _) | (_, Some(r)) => Step::Reject(r),
                    (w, None) => w,
                }
            }
        }
    }

    /// The step after a store answer.
    pub(crate) fn on_answer(&mut self, answer: StoreResult<Admission>) -> Step<St> {
        self.shared
            .state
            .failures
            .answered(LayerKind::AnchoredWindow, &answer);
        let ex = match answer {
            Ok(Admission::Admitted(ticket)) => {
                return Step::Admitted(WindowGuard {
                    store: self.shared.config.store.clone(),
                    key: self.subject.key.clone(),
                    scope: self.scope,
                    ticket,
                    recorder: self.recorder.clone(),
                    end: portcullis_core::CallEnd::Unanswered,
                    _in_flight: crate::gauge::InFlight::enter(LayerKind::AnchoredWindow),
                });
            }
            Ok(Admission::Exceeded(ex)) => ex,
            Err(e) => {
                return match self.shared.state.failures.on_error(
                    self.shared.config.failure_mode,
                    LayerKind::AnchoredWindow,
                    &e,
                ) {
                    None => Step::Unlimited,
                    Some(r) => Step::Reject(r),
                };
            }
        };
        // W10: wait only if the rolling window alone is full and room appears in time.
        let max_wait = self.shared.config.max_wait;
        if ex.only_rolling() && !max_wait.is_zero() {
            if let Some(after) = ex.retry_after_ms().map(ms) {
                let started = *self.wait_started.get_or_insert_with(Instant::now);
                if started.elapsed() + after <= max_wait {
                    return Step::Sleep(after);
                }
            }
        }
        // W8: an exhausted subscription with pay-as-you-go falls through to the key's
        // own policy (or to none).
        if self.scope == Scope::Subscription {
            if let Some(fallback) = self.fallback.take() {
                return match fallback {
                    Some(p) if p.has_window_limits() => {
                        self.scope = Scope::Key;
                        self.policy = p;
                        self.wait_started = None;
                        self.ask()
                    }
                    _ => {
                        self.scope = Scope::Key;
                        self.unlimited()
                    }
                };
            }
        }
        Step::Reject(window_rejection(
            &ex,
            self.scope == Scope::Subscription,
            rate_info(&self.policy, &ex),
        ))
    }

    /// Asks again after a sleep.
    pub(crate) fn ask_again(&self) -> Step<St> {
        self.ask()
    }
}

/// The limits announced in `X-RateLimit-*` (E2): the exceeded tier of a dimension if
/// it was hit, else its shortest tier.
fn rate_info(policy: &Policy, ex: &Exceeded) -> RateLimitInfo {
    let pick = |d: Dimension| {
        ex.limits
            .iter()
            .filter(|l| l.dimension == d)
            .map(|l| l.tier)
            .max_by_key(|t| t.window_ms)
            .or_else(|| policy.tiers(d).iter().copied().min_by_key(|t| t.window_ms))
            .map(|t| t.limit)
    };
    let rolling = ex
        .limits
        .iter()
        .find(|l| l.dimension == Dimension::RollingRequests)
        .map(|l| l.tier.limit);
    RateLimitInfo {
        requests: rolling.or_else(|| pick(Dimension::Requests)),
        tokens: pick(Dimension::Tokens),
    }
}
