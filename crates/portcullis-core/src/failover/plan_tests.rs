//! The walk over the candidates and the next step after an attempt, with time passed
//! in by hand: no runtime, no clock but the numbers below.

use super::*;
use crate::capacity::{Candidates, ChannelRef};
use crate::dialect::Dialect;
use crate::rejection::{GatewayCode, LayerKind};
use crate::upstream::{DISABLED, RateLimits, UpstreamChannel, UpstreamRegistry};
use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

const NOW: Millis = 1_000_000;

/// Channels `(name, credential)` of one vendor.
struct World {
    health: HealthBook,
    sticky: StickyMap,
    registry: UpstreamRegistry,
}

impl World {
    fn new(channels: &[(&str, &str)]) -> Self {
        let mut registry = UpstreamRegistry::new();
        for (name, credential) in channels {
            registry = registry.with_channel(UpstreamChannel {
                name: (*name).into(),
                dialect: Dialect::OpenAi,
                vendor: "openai".into(),
                credential: (*credential).into(),
                limits: RateLimits::default(),
                model_limits: vec![],
            });
        }
        Self {
            health: HealthBook::new(HealthConfig::default()),
            sticky: StickyMap::new(60_000, 100),
            registry,
        }
    }
    /// One channel per credential.
    fn of(names: &[&str]) -> Self {
        let pairs: Vec<(&str, &str)> = names.iter().map(|n| (*n, *n)).collect();
        Self::new(&pairs)
    }
    fn ch(&self) -> Channels<'_> {
        Channels {
            health: &self.health,
            sticky: &self.sticky,
            registry: &self.registry,
        }
    }
    /// Ten failures at `at`: the circuit opens until `at + open_ms`.
    fn open(&self, name: &str, at: Millis) {
        for _ in 0..10 {
            self.health.record(name, false, 10, at);
        }
    }
    /// Eight answers and two failures at `at`: 20 % errors, degraded, not open.
    fn degrade(&self, name: &str, at: Millis) {
        for i in 0..10 {
            self.health.record(name, i < 8, 10, at);
        }
    }
}

fn candidates(names: &[&str]) -> Candidates {
    Candidates::new(names.iter().map(|n| ChannelRef::new(*n, 0)))
}

fn names(order: &Order) -> Vec<String> {
    order
        .channels
        .as_ref()
        .map(|c| c.iter().map(|c| c.name.to_string()).collect())
        .unwrap_or_default()
}

fn status(code: u16) -> Verdict {
    classify(
        Dialect::OpenAi,
        &ErrorFacts {
            status: code,
            ..ErrorFacts::default()
        },
    )
}

fn rate_limited(retry_after_ms: Millis) -> Verdict {
    classify(
        Dialect::OpenAi,
        &ErrorFacts {
            status: 429,
            retry_after_ms: Some(retry_after_ms),
            ..ErrorFacts::default()
        },
    )
}

fn spend_cap() -> Verdict {
    classify(
        Dialect::OpenAi,
        &ErrorFacts {
            status: 429,
            error_code: Some("insufficient_quota".into()),
            ..ErrorFacts::default()
        },
    )
}

fn tried(channel: &str, model: &str, verdict: Verdict) -> Tried {
    Tried {
        channel: Some(channel.into()),
        model: Some(model.into()),
        verdict,
    }
}

fn next<'a>(all: &'a Candidates, tried: &'a [Tried], retry_tried: bool) -> Next<'a> {
    Next {
        all,
        tried,
        stopped: &[],
        conversation: None,
        model: Some("m"),
        retry_tried,
    }
}

const LIMITS: RetryLimits = RetryLimits {
    max_attempts: 3,
    backoff_base_ms: 100,
    backoff_cap_ms: 2_000,
    max_wait: Duration::from_secs(10),
};

/// A budget with `n` retries in it.
fn budget(n: u32) -> impl Fn() -> bool {
    let left = Cell::new(n);
    move || {
        let n = left.get();
        left.set(n.saturating_sub(1));
        n > 0
    }
}

const NO_DEADLINE: Timeline = Timeline {
    now: Duration::ZERO,
    deadline: None,
};

/// The first channel the step sends to.
fn first_of(at: &Attempts, decision: RetryDecision) -> String {
    match decision {
        RetryDecision::Send { mut order, .. } => order.candidates(at.candidates()).channels()[0]
            .name
            .to_string(),
        other => panic!("expected a send, got {other:?}"),
    }
}

fn wait_of(decision: &RetryDecision) -> Duration {
    match decision {
        RetryDecision::Send { wait, .. } => *wait,
        other => panic!("expected a send, got {other:?}"),
    }
}

#[test]
fn f1_first_attempt_on_healthy_channels_keeps_the_candidates_as_they_are() {
    let w = World::of(&["a", "b"]);
    let all = candidates(&["a", "b"]);
    let mut o = order(w.ch(), &next(&all, &[], false), NOW);
    assert_eq!(o, Order::default(), "nothing allocated");
    let sent = o.candidates(&all);
    assert!(Arc::ptr_eq(&sent.0, &all.0), "the same list, not a copy");
}

#[test]
fn f1_channels_tried_for_this_model_are_left_out_but_not_for_another_model() {
    let w = World::of(&["a", "b", "c"]);
    let all = candidates(&["a", "b", "c"]);
    let t = [tried("a", "m", status(500))];
    assert_eq!(
        names(&order(w.ch(), &next(&all, &t, false), NOW)),
        ["b", "c"]
    );
    // The fallback model may go to the channel that failed the first one.
    let fallback = Next {
        model: Some("n"),
        ..next(&all, &t, false)
    };
    assert_eq!(names(&order(w.ch(), &fallback, NOW)), ["a", "b", "c"]);
}

#[test]
fn f6_every_channel_tried_retries_only_those_whose_failure_may_pass() {
    let w = World::of(&["a", "b"]);
    let all = candidates(&["a", "b"]);
    let t = [
        tried("a", "m", rate_limited(1_000)),
        tried("b", "m", status(401)),
    ];
    assert_eq!(names(&order(w.ch(), &next(&all, &t, true), NOW)), ["a"]);
    // While a fallback model is on offer, the tried channels are not tried again.
    assert!(order(w.ch(), &next(&all, &t, false), NOW).is_empty());
}

#[test]
fn f8_half_open_probes_go_first_open_circuits_are_left_out_degraded_go_last() {
    let w = World::of(&["deg", "ok", "open", "half"]);
    let open_ms = HealthConfig::default().open_ms;
    w.open("half", NOW - open_ms);
    w.open("open", NOW);
    w.degrade("deg", NOW);
    let all = candidates(&["deg", "ok", "open", "half"]);
    let o = order(w.ch(), &next(&all, &[], false), NOW);
    assert_eq!(names(&o), ["half", "ok", "deg"]);
    assert_eq!(o.probes, [Arc::<str>::from("half")]);
    // A probe the attempt did not use goes back: all three are there again.
    release_probes(&w.health, &o.probes, Some("ok"));
    for _ in 0..HealthConfig::default().probes {
        assert_eq!(w.health.admit("half", NOW), Admit::Probe);
    }
}

#[test]
fn f8_a_degraded_channel_first_in_line_keeps_one_turn_in_degraded_share() {
    let w = World::of(&["deg", "ok"]);
    w.degrade("deg", NOW);
    let all = candidates(&["deg", "ok"]);
    let turns = 8 * DEGRADED_SHARE as usize;
    let kept = (0..turns)
        .filter(|_| names(&order(w.ch(), &next(&all, &[], false), NOW))[0] == "deg")
        .count();
    assert_eq!(kept, turns / DEGRADED_SHARE as usize);
}

#[test]
fn f9_the_pinned_channel_goes_first_while_healthy_and_falls_back_when_degraded() {
    let w = World::of(&["a", "b"]);
    w.sticky.pin("conv", "b".into(), NOW);
    let all = candidates(&["a", "b"]);
    let pinned = Next {
        conversation: Some("conv"),
        ..next(&all, &[], false)
    };
    assert_eq!(names(&order(w.ch(), &pinned, NOW)), ["b", "a"]);
    w.degrade("b", NOW);
    assert_eq!(names(&order(w.ch(), &pinned, NOW)), ["a", "b"]);
}

#[test]
fn f5_scenario6_a_stopped_paying_account_is_left_out() {
    let w = World::new(&[("a", "org-1"), ("b", "org-1"), ("c", "org-2")]);
    let all = candidates(&["a", "b", "c"]);
    let stopped = [w.registry.credential_cooldown_key("a").unwrap()];
    let n = Next {
        stopped: &stopped,
        ..next(&all, &[], false)
    };
    assert_eq!(names(&order(w.ch(), &n, NOW)), ["c"]);
}

#[test]
fn f1_at_most_max_attempts_each_on_another_channel() {
    let w = World::of(&["a", "b", "c", "d"]);
    let mut at = Attempts::new(
        candidates(&["a", "b", "c", "d"]),
        Some("m".into()),
        None,
        false,
    );
    let b = budget(10);
    let mut sent = Vec::new();
    loop {
        let d = at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 7, NOW);
        if let RetryDecision::Stop(why) = d {
            assert_eq!(why, Stop::AttemptsSpent);
            break;
        }
        let ch = first_of(&at, d);
        sent.push(ch.clone());
        at.count_sent();
        at.failed(w.ch(), Some(ch.into()), status(500), 10, NOW);
        assert!(sent.len() <= 3, "bounded");
    }
    assert_eq!(sent, ["a", "b", "c"]);
    assert_eq!(at.sent(), 3);
}

#[test]
fn f6_without_a_retry_after_a_retry_backs_off_with_jitter_up_to_the_doubling_cap() {
    let w = World::of(&["a", "b", "c"]);
    let mut at = Attempts::new(candidates(&["a", "b", "c"]), None, None, false);
    let b = budget(10);
    assert_eq!(
        wait_of(&at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW)),
        Duration::ZERO
    );
    at.count_sent();
    at.failed(w.ch(), Some("a".into()), status(503), 10, NOW);
    let first = wait_of(&at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW));
    assert!(first >= Duration::from_millis(1) && first <= Duration::from_millis(100));
    at.count_sent();
    at.failed(w.ch(), Some("b".into()), status(503), 10, NOW);
    let waits: std::collections::HashSet<_> = (0..50)
        .map(|seed| wait_of(&at.decide(w.ch(), &LIMITS, &budget(1), NO_DEADLINE, seed, NOW)))
        .collect();
    assert!(waits.iter().all(|w| *w <= Duration::from_millis(200)));
    assert!(waits.len() > 10, "jittered: {waits:?}");
}

#[test]
fn f6_after_a_provider_retry_after_or_a_refused_connection_the_retry_goes_at_once() {
    let w = World::of(&["a", "b", "c"]);
    let mut at = Attempts::new(candidates(&["a", "b", "c"]), None, None, false);
    let b = budget(10);
    at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW);
    at.count_sent();
    // The Retry-After is the scope's floor (the channel cools); another channel goes now.
    at.failed(w.ch(), Some("a".into()), rate_limited(7_000), 10, NOW);
    assert_eq!(
        wait_of(&at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW)),
        Duration::ZERO
    );
    at.count_sent();
    at.failed(
        w.ch(),
        Some("b".into()),
        transport_verdict(Dialect::OpenAi, Transport::Connect),
        1,
        NOW,
    );
    assert_eq!(
        wait_of(&at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW)),
        Duration::ZERO
    );
}

#[test]
fn f6_a_backoff_past_the_deadline_stops_and_gives_its_probes_back() {
    let w = World::of(&["a", "half"]);
    w.open("half", NOW - HealthConfig::default().open_ms);
    let mut at = Attempts::new(candidates(&["a", "half"]), None, None, false);
    let b = budget(10);
    // (The first walk takes a probe on the half-open channel and sends to it.)
    let first = at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW);
    assert_eq!(first_of(&at, first), "half");
    // (It went to `a` after all: the probe goes back.)
    release_probes(&w.health, &["half".into()], Some("a"));
    at.count_sent();
    at.failed(w.ch(), Some("a".into()), status(500), 10, NOW);
    let late = Timeline {
        now: Duration::from_secs(5),
        deadline: Some(Duration::from_secs(5)),
    };
    assert_eq!(
        at.decide(w.ch(), &LIMITS, &b, late, 1, NOW),
        RetryDecision::Stop(Stop::Deadline)
    );
    for _ in 0..HealthConfig::default().probes {
        assert_eq!(
            w.health.admit("half", NOW),
            Admit::Probe,
            "probe given back"
        );
    }
}

#[test]
fn f7_each_retry_takes_one_withdrawal_and_an_empty_budget_stops() {
    let w = World::of(&["a", "b", "c"]);
    let mut at = Attempts::new(candidates(&["a", "b", "c"]), None, None, false);
    let left = Cell::new(1u32);
    let b = || {
        let n = left.get();
        left.set(n.saturating_sub(1));
        n > 0
    };
    at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW);
    assert_eq!(left.get(), 1, "a first attempt takes nothing");
    at.count_sent();
    at.failed(w.ch(), Some("a".into()), status(500), 10, NOW);
    assert_eq!(
        {
            let d = at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW);
            first_of(&at, d)
        },
        "b"
    );
    assert_eq!(left.get(), 0);
    at.count_sent();
    at.failed(w.ch(), Some("b".into()), status(500), 10, NOW);
    assert_eq!(
        at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW),
        RetryDecision::Stop(Stop::Budget)
    );
}

#[test]
fn f11_every_channel_tried_switches_once_to_the_fallback_model() {
    let w = World::of(&["a", "b"]);
    let mut at = Attempts::new(candidates(&["a"]), Some("m".into()), None, true);
    let b = budget(10);
    at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW);
    at.count_sent();
    at.failed(w.ch(), Some("a".into()), status(500), 10, NOW);
    assert_eq!(
        at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW),
        RetryDecision::Switch
    );
    at.switch("n".into(), candidates(&["a", "b"]));
    assert_eq!(at.model().map(|m| &**m), Some("n"));
    // The channel that failed model m may serve model n.
    assert_eq!(
        {
            let d = at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW);
            first_of(&at, d)
        },
        "a"
    );
    at.count_sent();
    at.failed(w.ch(), Some("a".into()), status(401), 10, NOW);
    at.count_sent();
    at.failed(w.ch(), Some("b".into()), status(401), 10, NOW);
    // No second switch, and a bad credential is not tried again.
    assert_eq!(
        at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW),
        RetryDecision::Stop(Stop::AttemptsSpent)
    );
}

#[test]
fn f1_without_a_channel_left_nor_a_fallback_the_attempts_stop() {
    let w = World::of(&["a"]);
    let mut at = Attempts::new(candidates(&["a"]), None, None, false);
    let b = budget(10);
    at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW);
    at.count_sent();
    at.failed(w.ch(), Some("a".into()), status(403), 10, NOW);
    assert_eq!(
        at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW),
        RetryDecision::Stop(Stop::NoChannel)
    );
}

#[test]
fn u4_f6_no_channel_now_is_the_answer_first_and_a_bounded_wait_on_a_retry() {
    let w = World::of(&["a", "b"]);
    let mut at = Attempts::new(candidates(&["a", "b"]), None, None, false);
    let two = Some(Duration::from_secs(2));
    let refused = |at: &mut Attempts, wait, time| {
        at.refused(
            GatewayCode::RpmLimit,
            LayerKind::UpstreamLimit,
            wait,
            &LIMITS,
            time,
        )
    };
    assert_eq!(refused(&mut at, two, NO_DEADLINE), Refused::PassOn, "U4");
    at.count_sent();
    at.failed(w.ch(), Some("a".into()), status(500), 10, NOW);
    assert_eq!(
        refused(&mut at, Some(Duration::from_secs(11)), NO_DEADLINE),
        Refused::Stop,
        "over max_wait"
    );
    let near = Timeline {
        now: Duration::from_secs(9),
        deadline: Some(Duration::from_secs(10)),
    };
    assert_eq!(
        refused(&mut at, two, near),
        Refused::Stop,
        "past the deadline"
    );
    for _ in 0..LIMITS.max_attempts {
        assert_eq!(
            refused(&mut at, two, NO_DEADLINE),
            Refused::Wait(Duration::from_secs(2))
        );
    }
    assert_eq!(
        refused(&mut at, two, NO_DEADLINE),
        Refused::Stop,
        "waits are bounded"
    );
    // Capacity's refusal counts the same; another layer's refusal is the request's own.
    let mut fresh = Attempts::new(candidates(&["a", "b"]), None, None, false);
    fresh.count_sent();
    fresh.failed(w.ch(), Some("a".into()), status(500), 10, NOW);
    let busy = fresh.refused(
        GatewayCode::CapacityBusy,
        LayerKind::CapacityQueue,
        two,
        &LIMITS,
        NO_DEADLINE,
    );
    assert_eq!(busy, Refused::Wait(Duration::from_secs(2)));
    let slot = fresh.refused(
        GatewayCode::ConcurrencyLimit,
        LayerKind::ConcurrencySlot,
        two,
        &LIMITS,
        NO_DEADLINE,
    );
    assert_eq!(slot, Refused::PassOn);
}

#[test]
fn f11_a_refusal_of_the_fallback_models_own_admission_leaves_the_first_failure() {
    let w = World::of(&["a", "b"]);
    let mut at = Attempts::new(candidates(&["a"]), Some("m".into()), None, true);
    at.count_sent();
    at.failed(w.ch(), Some("a".into()), status(500), 10, NOW);
    let budget_refusal = |at: &mut Attempts| {
        at.refused(
            GatewayCode::BudgetExhausted,
            LayerKind::BillingGate,
            None,
            &LIMITS,
            NO_DEADLINE,
        )
    };
    assert_eq!(budget_refusal(&mut at), Refused::PassOn, "not switched yet");
    at.switch("n".into(), candidates(&["b"]));
    assert_eq!(budget_refusal(&mut at), Refused::Stop);
}

#[test]
fn f10_every_tried_channel_rate_limited_is_42911_with_the_earliest_recovery() {
    let w = World::of(&["a", "b"]);
    let mut at = Attempts::new(candidates(&["a", "b"]), Some("m".into()), None, false);
    at.count_sent();
    at.failed(w.ch(), Some("a".into()), rate_limited(7_000), 10, NOW);
    at.count_sent();
    at.failed(w.ch(), Some("b".into()), rate_limited(3_000), 10, NOW);
    let (r, after_attempts) = at.final_failure(w.ch(), NOW);
    assert!(after_attempts);
    assert_eq!(r.code(), GatewayCode::UpstreamRateLimited);
    assert_eq!(r.layer(), LayerKind::Failover);
    assert_eq!(r.retry_after(), Some(Duration::from_secs(3)));
    // One failure of another kind: 50202.
    at.count_sent();
    at.failed(w.ch(), Some("a".into()), status(500), 10, NOW);
    assert_eq!(
        at.final_failure(w.ch(), NOW).0.code(),
        GatewayCode::UpstreamFailed
    );
}

#[test]
fn f10_f8_with_nothing_sent_the_final_answer_names_the_first_probe() {
    let w = World::of(&["a", "b"]);
    w.open("a", NOW - 4_000);
    w.open("b", NOW - 1_000);
    let mut at = Attempts::new(candidates(&["a", "b"]), None, None, false);
    assert_eq!(
        at.decide(w.ch(), &LIMITS, &budget(10), NO_DEADLINE, 1, NOW),
        RetryDecision::Stop(Stop::NoChannel)
    );
    let (r, after_attempts) = at.final_failure(w.ch(), NOW);
    assert!(!after_attempts);
    assert_eq!(r.code(), GatewayCode::UpstreamFailed);
    let open_ms = HealthConfig::default().open_ms;
    assert_eq!(
        r.retry_after(),
        Some(Duration::from_millis(open_ms - 4_000))
    );
}

#[test]
fn f5_scenario6_a_spend_cap_disables_the_credential_and_rules_out_its_account() {
    let w = World::new(&[("a", "org-1"), ("b", "org-1"), ("c", "org-2")]);
    let mut at = Attempts::new(candidates(&["a", "b", "c"]), Some("m".into()), None, false);
    let b = budget(10);
    at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW);
    at.count_sent();
    assert!(
        at.failed(w.ch(), Some("a".into()), spend_cap(), 10, NOW),
        "disabled"
    );
    let key = w.registry.credential_cooldown_key("a").unwrap();
    assert_eq!(w.registry.cooldowns().until(&key, NOW), Some(DISABLED));
    assert_eq!(
        {
            let d = at.decide(w.ch(), &LIMITS, &b, NO_DEADLINE, 1, NOW);
            first_of(&at, d)
        },
        "c"
    );
    // A rate limit cools the (credential, model) scope for its Retry-After instead.
    assert!(!at.failed(w.ch(), Some("c".into()), rate_limited(5_000), 10, NOW));
    let scope = w.registry.signal_key("c", Some("m")).unwrap();
    assert_eq!(w.registry.cooldowns().until(&scope, NOW), Some(NOW + 5_000));
}

#[test]
fn f8_f9_a_committed_attempt_counts_as_healthy_and_pins_the_conversation() {
    let w = World::of(&["a", "b"]);
    let at = Attempts::new(candidates(&["a", "b"]), None, Some("conv".into()), false);
    at.committed(w.ch(), Some(&"b".into()), 20, NOW);
    assert_eq!(w.sticky.get("conv", NOW).as_deref(), Some("b"));
    assert_eq!(w.health.counts("b", NOW), (1, 0));
}

#[test]
fn f5_an_upstream_failure_in_a_rejections_shape_is_an_attempt_of_unknown_result() {
    let mut at = Attempts::new(candidates(&["a"]), None, None, false);
    let r = at.refused(
        GatewayCode::UpstreamFailed,
        LayerKind::Failover,
        None,
        &LIMITS,
        NO_DEADLINE,
    );
    assert_eq!(r, Refused::Failed(Transport::Timeout));
}
