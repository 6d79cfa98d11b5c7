//! The walk over a request's candidate channels before each attempt (F1, F6, F8, F9):
//! which channels the next attempt may go to, and in which order. No I/O; the health
//! book, the sticky pins and the registry are read (and their probes and turns taken)
//! at the time passed in.

use super::{Admit, HealthBook, HealthState, StickyMap, Verdict};
use crate::capacity::{Candidates, ChannelRef};
use crate::clock::Millis;
use crate::upstream::UpstreamRegistry;
use std::sync::Arc;

/// What failover reads and writes of the channels: shared by every request.
#[derive(Clone, Copy)]
pub struct Channels<'a> {
    /// Per-channel health (F8).
    pub health: &'a HealthBook,
    /// Sticky conversations (F9).
    pub sticky: &'a StickyMap,
    /// Channels, credentials and cooldowns (F5, F6).
    pub registry: &'a UpstreamRegistry,
}

/// One failed attempt, kept for the rest of the request.
#[derive(Clone, Debug)]
pub struct Tried {
    /// The channel that served it, when known.
    pub channel: Option<Arc<str>>,
    /// The model it was for (a fallback model may be served by the same channel).
    pub model: Option<Arc<str>>,
    /// The classifier's verdict.
    pub verdict: Verdict,
}

/// Where a request stands when its next attempt is planned.
pub struct Next<'a> {
    /// The current model's candidates.
    pub all: &'a Candidates,
    /// The failed attempts so far.
    pub tried: &'a [Tried],
    /// Credential keys of paying accounts ruled out by a spend cap.
    pub stopped: &'a [String],
    /// The conversation's id (F9).
    pub conversation: Option<&'a str>,
    /// The current model.
    pub model: Option<&'a str>,
    /// Whether channels already tried for this model may be tried again (F6).
    pub retry_tried: bool,
}

/// The answer of [`order`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Order {
    /// The candidates of the next attempt, in order; `None` for "all candidates as they
    /// are" (the usual first attempt), which allocates nothing.
    pub channels: Option<Vec<ChannelRef>>,
    /// The half-open channels a probe was taken on.
    pub probes: Vec<Arc<str>>,
}

impl Order {
    /// No channel is left for this model.
    pub fn is_empty(&self) -> bool {
        self.channels.as_ref().is_some_and(Vec::is_empty)
    }

    /// The candidates the attempt carries: `all` itself when the order is the same.
    pub fn candidates(&mut self, all: &Candidates) -> Candidates {
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
/// one turn in [`DEGRADED_SHARE`](super::DEGRADED_SHARE) (F8, F9).
pub fn order(ch: Channels<'_>, next: &Next<'_>, now: Millis) -> Order {
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
pub fn release_probes(health: &HealthBook, probes: &[Arc<str>], served: Option<&str>) {
    for p in probes {
        if served != Some(&**p) {
            health.release_probe(p);
        }
    }
}
