//! Failover as plain types and functions (F1–F11): the classifier of provider
//! answers, backoff, per-channel health with a circuit breaker, sticky conversations,
//! the walk over a request's candidate channels ([`order`](order())) and the next step
//! after each attempt ([`Attempts::decide`]). No I/O; time is passed in.

mod order;
#[cfg(test)]
mod plan_tests;
mod retry;

pub use order::{Channels, Next, Order, Tried, order, release_probes};
pub use retry::{
    Attempts, Refused, RetryBudget, RetryDecision, RetryLimits, Stop, Timeline, transport_verdict,
};

use crate::clock::Millis;
use crate::dialect::Dialect;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How an attempt failed before any answer arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// The connection was refused: the provider never saw the request.
    Connect,
    /// No answer within the deadline, or the connection was lost after the request
    /// left: the provider may have run it (result unknown).
    Timeout,
    /// A stream failed (cut, error event, silence) before its first content chunk.
    StreamBeforeFirstChunk,
}

/// What is known of one failed attempt: the answer's status, the error fields of its
/// body, and its headers' retry hints; or a transport failure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorFacts {
    /// HTTP status (0 for a transport failure).
    pub status: u16,
    /// The error's type (OpenAI `error.type`, Anthropic `error.type`, Gemini
    /// `error.status`).
    pub error_type: Option<String>,
    /// The error's code (OpenAI `error.code`, Anthropic `error.details.error_code`,
    /// Gemini `details[].reason` or the quota id).
    pub error_code: Option<String>,
    /// The error's message.
    pub message: Option<String>,
    /// The provider's retry hint: `retry-after` (or Gemini's `RetryInfo`), in ms.
    pub retry_after_ms: Option<Millis>,
    /// Gemini sent a `RetryInfo` detail (its rate limits do; its spend cap does not).
    pub retry_info: bool,
    /// The provider's request id, kept for support.
    pub request_id: Option<String>,
    /// A transport failure instead of an answer.
    pub transport: Option<Transport>,
}

/// Why an attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A rate limit (OpenAI `rate_limit_exceeded`, Anthropic `rate_limit_error`,
    /// Gemini `RESOURCE_EXHAUSTED` with RetryInfo).
    RateLimited,
    /// OpenAI 429 `slow_down`: the request rate rose too fast.
    SlowDown,
    /// The paying account's spend cap (OpenAI `insufficient_quota`, Anthropic
    /// `enforced_spend_limit_reached` / usage limits / `billing_error`, Gemini
    /// `RESOURCE_EXHAUSTED` without RetryInfo).
    SpendCap,
    /// The provider is overloaded (OpenAI 503 `server_is_overloaded`, Anthropic 529
    /// `overloaded_error`, Gemini 503 `UNAVAILABLE`).
    Overloaded,
    /// Another 5xx, or 408 / 409 / 425.
    ServerError,
    /// The provider refused the channel's credential.
    BadCredential,
    /// Connection refused.
    Connect,
    /// Timeout or connection lost: the result is unknown.
    Timeout,
    /// A stream failed before its first content chunk.
    StreamFailed,
    /// 400 / 413 / 422: the request itself is wrong; never retried.
    InvalidRequest,
    /// 404: unknown model or resource; never retried.
    NotFound,
    /// Anything else: handled conservatively (no failover).
    Unknown,
}

impl Reason {
    /// A stable name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::RateLimited => "rate_limited",
            Reason::SlowDown => "slow_down",
            Reason::SpendCap => "spend_cap",
            Reason::Overloaded => "overloaded",
            Reason::ServerError => "server_error",
            Reason::BadCredential => "bad_credential",
            Reason::Connect => "connect",
            Reason::Timeout => "timeout",
            Reason::StreamFailed => "stream_failed",
            Reason::InvalidRequest => "invalid_request",
            Reason::NotFound => "not_found",
            Reason::Unknown => "unknown",
        }
    }
}

/// What to do with the channel after a failure (F5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelAction {
    /// Nothing beyond the health record.
    None,
    /// Send less for a while: cooldown of the (credential, model) scope for this long.
    SlowDown(Millis),
    /// No new request on the (credential, model) scope for this long.
    CoolDown(Millis),
    /// Out of rotation until an operator re-enables the credential (bad credential,
    /// spend cap).
    Disable,
}

/// The classifier's answer (F5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Why.
    pub reason: Reason,
    /// Try another channel (F2); false = answer the client now (F3).
    pub failover: bool,
    /// The same scope may succeed later (after `retry_after_ms`).
    pub retryable: bool,
    /// The provider's minimum wait for this scope (F6).
    pub retry_after_ms: Option<Millis>,
    /// What happens to the channel.
    pub action: ChannelAction,
    /// The provider may have run the request: its result is unknown (B4).
    pub result_unknown: bool,
    /// Counts as "rate limited" for the final answer (F10).
    pub rate_limited: bool,
    /// Other channels of the same paying account must not be tried (F5 spend cap,
    /// S6).
    pub stop_account: bool,
}

/// Cooldown after a 429 / overload that names no wait.
pub(crate) const DEFAULT_COOLDOWN_MS: Millis = 1_000;
/// Cooldown after `slow_down` when no wait is named.
pub(crate) const SLOW_DOWN_MS: Millis = 5_000;

fn is(v: &Option<String>, s: &str) -> bool {
    v.as_deref().is_some_and(|x| x.eq_ignore_ascii_case(s))
}

fn mentions(v: &Option<String>, s: &str) -> bool {
    v.as_deref()
        .is_some_and(|x| x.to_ascii_lowercase().contains(s))
}

/// Classifies a failed attempt (F5). Table-driven: the first matching row wins.
///
/// | condition | reason | failover | channel action |
/// |---|---|---|---|
/// | connection refused | Connect | yes | none |
/// | timeout / lost after sending | Timeout (result unknown) | yes | none |
/// | stream failed before its first content chunk | StreamFailed (result unknown) | yes | none |
/// | spend cap: OpenAI `insufficient_quota`; Anthropic `enforced_spend_limit_reached`, "usage limits" (400) or `billing_error` (402); Gemini `RESOURCE_EXHAUSTED` without RetryInfo | SpendCap | yes, never on the same paying account | disable |
/// | 401 / 403, OpenAI `invalid_api_key`, Anthropic `authentication_error` / `permission_error`, Gemini `API_KEY_INVALID` | BadCredential | yes | disable |
/// | 429 `slow_down` | SlowDown | yes | slow down (Retry-After or 5 s) |
/// | 429 (any other) | RateLimited | yes | cool down (Retry-After or 1 s) |
/// | 503 `server_is_overloaded`, 529, `overloaded_error`, `UNAVAILABLE` | Overloaded | yes | cool down for Retry-After, if given |
/// | 408, 409, 425, other 5xx | ServerError | yes | none |
/// | 400, 413, 422 | InvalidRequest | **no** | none |
/// | 404 | NotFound | **no** | none |
/// | anything else | Unknown | no | none |
pub fn classify(dialect: Dialect, f: &ErrorFacts) -> Verdict {
    let v = |reason, failover, action| Verdict {
        reason,
        failover,
        retryable: failover,
        retry_after_ms: f.retry_after_ms,
        action,
        result_unknown: false,
        rate_limited: false,
        stop_account: false,
    };
    if let Some(t) = f.transport {
        let mut out = match t {
            Transport::Connect => v(Reason::Connect, true, ChannelAction::None),
            Transport::Timeout => v(Reason::Timeout, true, ChannelAction::None),
            Transport::StreamBeforeFirstChunk => v(Reason::StreamFailed, true, ChannelAction::None),
        };
        out.result_unknown = t != Transport::Connect;
        return out;
    }
    let s = f.status;
    let spend_cap = match dialect {
        Dialect::OpenAi | Dialect::Native => {
            is(&f.error_code, "insufficient_quota") || is(&f.error_type, "insufficient_quota")
        }
        Dialect::Anthropic => {
            is(&f.error_code, "enforced_spend_limit_reached")
                || is(&f.error_type, "billing_error")
                || (s == 400 && mentions(&f.message, "usage limits"))
        }
        // Gemini's rate limits carry a RetryInfo; its spend cap ("prepayment credits
        // are depleted", quota `BillingSpendLimitPerProject`) does not.
        Dialect::Gemini => {
            s == 429
                && is(&f.error_type, "RESOURCE_EXHAUSTED")
                && !f.retry_info
                && (mentions(&f.error_code, "billing") || mentions(&f.message, "credits"))
        }
    };
    if spend_cap {
        let mut out = v(Reason::SpendCap, true, ChannelAction::Disable);
        out.retryable = false;
        out.stop_account = true;
        return out;
    }
    let bad_credential = s == 401
        || s == 403
        || is(&f.error_code, "invalid_api_key")
        || is(&f.error_type, "authentication_error")
        || is(&f.error_type, "permission_error")
        || is(&f.error_code, "API_KEY_INVALID");
    if bad_credential {
        let mut out = v(Reason::BadCredential, true, ChannelAction::Disable);
        out.retryable = false;
        return out;
    }
    if s == 429 {
        if is(&f.error_code, "slow_down") || is(&f.error_type, "slow_down") {
            let mut out = v(
                Reason::SlowDown,
                true,
                ChannelAction::SlowDown(f.retry_after_ms.unwrap_or(SLOW_DOWN_MS)),
            );
            out.rate_limited = true;
            return out;
        }
        let mut out = v(
            Reason::RateLimited,
            true,
            ChannelAction::CoolDown(f.retry_after_ms.unwrap_or(DEFAULT_COOLDOWN_MS)),
        );
        out.rate_limited = true;
        return out;
    }
    let overloaded = s == 529
        || is(&f.error_code, "server_is_overloaded")
        || is(&f.error_type, "overloaded_error")
        || (s == 503 && is(&f.error_type, "UNAVAILABLE"));
    if overloaded {
        let action = f
            .retry_after_ms
            .map_or(ChannelAction::None, ChannelAction::CoolDown);
        return v(Reason::Overloaded, true, action);
    }
    if matches!(s, 408 | 409 | 425) || (500..=599).contains(&s) {
        return v(Reason::ServerError, true, ChannelAction::None);
    }
    if matches!(s, 400 | 413 | 422) {
        return v(Reason::InvalidRequest, false, ChannelAction::None);
    }
    if s == 404 {
        return v(Reason::NotFound, false, ChannelAction::None);
    }
    v(Reason::Unknown, false, ChannelAction::None)
}

/// Exponential backoff with full jitter (F6): a wait in `[0, min(cap, base × 2^retry)]`
/// drawn from `seed`, at least 1 ms. `retry` counts from 0.
pub(crate) fn backoff_ms(retry: u32, base_ms: Millis, cap_ms: Millis, seed: u64) -> Millis {
    let ceiling = base_ms
        .saturating_mul(1u64.checked_shl(retry.min(32)).unwrap_or(u64::MAX))
        .min(cap_ms)
        .max(1);
    // splitmix64: a well-mixed draw from any seed, no dependency.
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % ceiling).max(1)
}

/// Health settings (F8): start from `HealthConfig::default()` and set the fields you need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealthConfig {
    /// Length of the rolling window the error ratio is computed over.
    pub window_ms: Millis,
    /// Outcomes needed in the window before the ratio means anything.
    pub min_requests: u32,
    /// Error ratio (per mille) at or above which the channel is degraded.
    pub degraded_permille: u32,
    /// Error ratio (per mille) at or above which the circuit opens.
    pub open_permille: u32,
    /// How long an open circuit stays open before probes are let through; doubles
    /// on each failed probe round, up to 16×.
    pub open_ms: Millis,
    /// Probes let through while half open; all must succeed to close.
    pub probes: u32,
    /// Recent latency above this multiple of the channel's usual counts as degraded…
    pub slow_factor: u32,
    /// …when it is also at least this much above the usual: a channel answering in
    /// 1 ms is not slow at 4 ms.
    pub slow_floor_ms: Millis,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            window_ms: 30_000,
            min_requests: 10,
            degraded_permille: 200,
            open_permille: 500,
            open_ms: 10_000,
            probes: 3,
            slow_factor: 3,
            slow_floor_ms: 100,
        }
    }
}

/// How a channel stands (F8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthState {
    /// Serving normally.
    Healthy,
    /// Serving, but errors or latency are high: gets fewer new conversations (one
    /// turn in [`DEGRADED_SHARE`] of those it would get), so it is still seen to
    /// recover.
    Degraded,
    /// Circuit open: out of rotation until `until`.
    Open {
        /// When probes may start.
        until: Millis,
    },
    /// Probing: a few requests are let through to test recovery.
    HalfOpen,
}

const BUCKETS: usize = 6;

/// A degraded channel keeps one in this many of the turns it is first in line for.
pub const DEGRADED_SHARE: u32 = 4;

#[derive(Clone, Debug, Default)]
struct Bucket {
    index: u64,
    ok: u32,
    failed: u32,
}

/// The rolling record of one channel.
#[derive(Clone, Debug, Default)]
struct ChannelHealth {
    buckets: [Bucket; BUCKETS],
    /// The channel's usual latency: slow EWMA (α = 1/16) of successful answers, ms ×16
    /// fixed point; 0 = none yet.
    usual_latency_x16: u64,
    /// Its recent latency: fast EWMA (α = 1/2), same units. A single slow answer moves
    /// it half way; two fast ones bring it most of the way back.
    recent_latency_x16: u64,
    /// Turns given away while degraded, since the last one it kept.
    passed_over: u32,
    circuit: Circuit,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Circuit {
    #[default]
    Closed,
    Open {
        until: Millis,
        backoff: u32,
    },
    HalfOpen {
        in_flight: u32,
        passed: u32,
        backoff: u32,
    },
}

impl ChannelHealth {
    fn bucket_len(cfg: &HealthConfig) -> Millis {
        (cfg.window_ms / BUCKETS as u64).max(1)
    }
    fn counts(&self, cfg: &HealthConfig, now: Millis) -> (u32, u32) {
        let cur = now / Self::bucket_len(cfg);
        self.buckets
            .iter()
            .filter(|b| b.index + (BUCKETS as u64) > cur && b.index <= cur)
            .fold((0, 0), |(o, f), b| (o + b.ok, f + b.failed))
    }
    fn bucket(&mut self, cfg: &HealthConfig, now: Millis) -> &mut Bucket {
        let cur = now / Self::bucket_len(cfg);
        let b = &mut self.buckets[(cur % BUCKETS as u64) as usize];
        if b.index != cur {
            *b = Bucket {
                index: cur,
                ..Bucket::default()
            };
        }
        b
    }
    fn error_permille(&self, cfg: &HealthConfig, now: Millis) -> Option<u32> {
        let (ok, failed) = self.counts(cfg, now);
        let n = ok + failed;
        (n >= cfg.min_requests && n > 0).then(|| failed * 1000 / n)
    }
    fn state(&mut self, cfg: &HealthConfig, now: Millis) -> HealthState {
        if let Circuit::Open { until, backoff } = self.circuit {
            if now < until {
                return HealthState::Open { until };
            }
            self.circuit = Circuit::HalfOpen {
                in_flight: 0,
                passed: 0,
                backoff,
            };
        }
        if let Circuit::HalfOpen { .. } = self.circuit {
            return HealthState::HalfOpen;
        }
        let (usual, recent) = (self.usual_latency_x16, self.recent_latency_x16);
        let slow = usual > 0
            && recent > usual * u64::from(cfg.slow_factor)
            && recent - usual >= cfg.slow_floor_ms * 16;
        match self.error_permille(cfg, now) {
            Some(p) if p >= cfg.degraded_permille => HealthState::Degraded,
            _ if slow => HealthState::Degraded,
            _ => HealthState::Healthy,
        }
    }
}

/// Per-channel health of every channel (F8): rolling error ratio and latency against
/// the channel's own usual, and a circuit breaker with half-open probes.
#[derive(Debug, Default)]
pub struct HealthBook {
    config: HealthConfig,
    channels: Mutex<HashMap<Arc<str>, ChannelHealth, foldhash::fast::RandomState>>,
}

/// Whether a channel may take a new attempt now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Yes, normally.
    Yes,
    /// Yes, but it is degraded: prefer others.
    Degraded,
    /// Yes, as one of the half-open probes.
    Probe,
    /// No: circuit open, or all probes out.
    No,
}

impl HealthBook {
    /// A book with `config`.
    pub fn new(config: HealthConfig) -> Self {
        Self {
            config,
            channels: Mutex::default(),
        }
    }
    fn with<R>(&self, ch: &str, f: impl FnOnce(&mut ChannelHealth, &HealthConfig) -> R) -> R {
        let mut map = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let h = match map.get_mut(ch) {
            Some(h) => h,
            None => map.entry(Arc::from(ch)).or_default(),
        };
        f(h, &self.config)
    }
    /// The channel's state at `now`.
    pub fn state(&self, ch: &str, now: Millis) -> HealthState {
        self.with(ch, |h, cfg| h.state(cfg, now))
    }
    /// Asks to send one attempt on `ch`; a probe slot is taken when half open (give it
    /// back with [`record`](Self::record)).
    pub fn admit(&self, ch: &str, now: Millis) -> Admit {
        self.with(ch, |h, cfg| match h.state(cfg, now) {
            HealthState::Healthy => Admit::Yes,
            HealthState::Degraded => Admit::Degraded,
            HealthState::Open { .. } => Admit::No,
            HealthState::HalfOpen => match &mut h.circuit {
                Circuit::HalfOpen {
                    in_flight, passed, ..
                } if *in_flight + *passed < cfg.probes => {
                    *in_flight += 1;
                    Admit::Probe
                }
                _ => Admit::No,
            },
        })
    }
    /// Records an attempt's outcome on `ch`.
    pub fn record(&self, ch: &str, ok: bool, latency_ms: Millis, now: Millis) {
        self.with(ch, |h, cfg| {
            let b = h.bucket(cfg, now);
            if ok {
                b.ok += 1;
            } else {
                b.failed += 1;
            }
            if ok {
                let x16 = latency_ms.saturating_mul(16);
                if h.usual_latency_x16 == 0 {
                    h.usual_latency_x16 = x16;
                    h.recent_latency_x16 = x16;
                } else {
                    h.usual_latency_x16 = (h.usual_latency_x16 * 15 + x16) / 16;
                    h.recent_latency_x16 = (h.recent_latency_x16 + x16) / 2;
                }
            }
            match h.circuit {
                Circuit::HalfOpen {
                    in_flight,
                    passed,
                    backoff,
                } => {
                    if !ok {
                        let backoff = (backoff + 1).min(4);
                        h.circuit = Circuit::Open {
                            until: now + (cfg.open_ms << backoff),
                            backoff,
                        };
                    } else if passed + 1 >= cfg.probes {
                        h.circuit = Circuit::Closed;
                        h.buckets = Default::default();
                    } else {
                        h.circuit = Circuit::HalfOpen {
                            in_flight: in_flight.saturating_sub(1),
                            passed: passed + 1,
                            backoff,
                        };
                    }
                }
                Circuit::Closed
                    if !ok
                        && h.error_permille(cfg, now)
                            .is_some_and(|p| p >= cfg.open_permille) =>
                {
                    h.circuit = Circuit::Open {
                        until: now + cfg.open_ms,
                        backoff: 0,
                    };
                }
                _ => {}
            }
        })
    }
    /// Whether a degraded channel that is first in line keeps this turn: one in
    /// [`DEGRADED_SHARE`] (F8: fewer new conversations, not none — a channel that got
    /// none would never be seen to recover from slowness).
    pub(crate) fn degraded_keeps_turn(&self, ch: &str) -> bool {
        self.with(ch, |h, _| {
            h.passed_over += 1;
            if h.passed_over >= DEGRADED_SHARE {
                h.passed_over = 0;
                true
            } else {
                false
            }
        })
    }
    /// Gives back a probe slot taken by [`admit`](Self::admit) that was not used.
    pub(crate) fn release_probe(&self, ch: &str) {
        self.with(ch, |h, _| {
            if let Circuit::HalfOpen { in_flight, .. } = &mut h.circuit {
                *in_flight = in_flight.saturating_sub(1);
            }
        })
    }
    /// Puts a channel back into rotation (operator re-enable).
    pub fn reset(&self, ch: &str) {
        self.with(ch, |h, _| *h = ChannelHealth::default());
    }
    /// (ok, failed) outcomes in the rolling window.
    pub fn counts(&self, ch: &str, now: Millis) -> (u32, u32) {
        self.with(ch, |h, cfg| h.counts(cfg, now))
    }
}

/// Conversation → (channel, last use).
type PinTable = HashMap<Arc<str>, (Arc<str>, Millis), foldhash::fast::RandomState>;

/// Sticky conversations (F9): a conversation id pinned to a channel, bounded, with an
/// idle expiry.
#[derive(Debug)]
pub struct StickyMap {
    ttl_ms: Millis,
    max: usize,
    pins: Mutex<PinTable>,
}

impl StickyMap {
    /// Pins kept for `ttl_ms` since last use, at most `max` of them.
    pub fn new(ttl_ms: Millis, max: usize) -> Self {
        Self {
            ttl_ms,
            max: max.max(1),
            pins: Mutex::default(),
        }
    }
    /// The channel `conversation` is pinned to.
    pub fn get(&self, conversation: &str, now: Millis) -> Option<Arc<str>> {
        let map = self.pins.lock().unwrap_or_else(|e| e.into_inner());
        map.get(conversation)
            .filter(|(_, at)| now.saturating_sub(*at) < self.ttl_ms)
            .map(|(ch, _)| ch.clone())
    }
    /// Pins (or re-pins) `conversation` to `channel`.
    pub fn pin(&self, conversation: &str, channel: Arc<str>, now: Millis) {
        let mut map = self.pins.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= self.max && !map.contains_key(conversation) {
            let ttl = self.ttl_ms;
            map.retain(|_, (_, at)| now.saturating_sub(*at) < ttl);
            if map.len() >= self.max {
                // Still full of live pins: drop the oldest.
                if let Some(oldest) = map
                    .iter()
                    .min_by_key(|(_, (_, at))| *at)
                    .map(|(k, _)| k.clone())
                {
                    map.remove(&oldest);
                }
            }
        }
        map.insert(Arc::from(conversation), (channel, now));
    }
    /// Pins held.
    pub fn len(&self) -> usize {
        self.pins.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
    /// True when no pin is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f6_backoff_grows_capped_and_jittered() {
        for retry in 0..40 {
            let w = backoff_ms(retry, 100, 2_000, retry as u64);
            assert!((1..=2_000).contains(&w));
            assert!(w <= 100u64 << retry.min(5));
        }
        let draws: std::collections::HashSet<_> =
            (0..100).map(|s| backoff_ms(3, 100, 2_000, s)).collect();
        assert!(draws.len() > 50, "jitter spreads the waits");
    }

    #[test]
    fn f8_circuit_opens_on_persistent_failure_and_closes_through_probes() {
        let cfg = HealthConfig::default();
        let book = HealthBook::new(cfg);
        let mut now = 1_000_000;
        // Below the minimum count nothing opens.
        for _ in 0..9 {
            book.record("c", false, 10, now);
        }
        assert_eq!(book.admit("c", now), Admit::Yes);
        book.record("c", false, 10, now);
        assert!(matches!(book.state("c", now), HealthState::Open { .. }));
        assert_eq!(book.admit("c", now), Admit::No);
        now += cfg.open_ms;
        // Half open: exactly `probes` attempts are let through.
        let admitted: Vec<_> = (0..5).map(|_| book.admit("c", now)).collect();
        assert_eq!(admitted.iter().filter(|a| **a == Admit::Probe).count(), 3);
        // A failed probe reopens for twice as long.
        book.record("c", false, 10, now);
        assert_eq!(
            book.state("c", now),
            HealthState::Open {
                until: now + 2 * cfg.open_ms
            }
        );
        now += 2 * cfg.open_ms;
        for _ in 0..3 {
            assert_eq!(book.admit("c", now), Admit::Probe);
            book.record("c", true, 10, now);
        }
        assert_eq!(book.state("c", now), HealthState::Healthy);
    }

    #[test]
    fn f8_degraded_by_error_ratio_or_by_latency_against_its_usual() {
        let book = HealthBook::new(HealthConfig::default());
        let now = 5_000_000;
        for i in 0..20 {
            book.record("e", i % 4 != 0, 10, now);
        }
        assert_eq!(book.state("e", now), HealthState::Degraded);
        for _ in 0..20 {
            book.record("s", true, 100, now);
        }
        assert_eq!(book.state("s", now), HealthState::Healthy);
        book.record("s", true, 1_000, now);
        assert_eq!(book.state("s", now), HealthState::Degraded);
        // The window rolls: old errors are forgotten.
        assert_eq!(book.state("e", now + 60_000), HealthState::Healthy);
    }

    #[test]
    fn f8_latency_noise_on_a_fast_channel_is_not_slowness() {
        let book = HealthBook::new(HealthConfig::default());
        let now = 5_000_000;
        for _ in 0..50 {
            book.record("fast", true, 1, now);
        }
        // 4× its usual, twice in a row, but a few ms: loopback jitter, not a sick channel.
        book.record("fast", true, 4, now);
        book.record("fast", true, 6, now);
        assert_eq!(book.state("fast", now), HealthState::Healthy);
    }

    #[test]
    fn f8_a_slow_channel_recovers_once_its_answers_are_fast_again() {
        let book = HealthBook::new(HealthConfig::default());
        let now = 5_000_000;
        for _ in 0..30 {
            book.record("s", true, 200, now);
        }
        book.record("s", true, 2_000, now);
        assert_eq!(book.state("s", now), HealthState::Degraded);
        // Judged on recent answers, not only the last: a few usual ones bring it back.
        for _ in 0..4 {
            book.record("s", true, 200, now);
        }
        assert_eq!(book.state("s", now), HealthState::Healthy);
    }

    #[test]
    fn f8_a_degraded_channel_keeps_one_turn_in_four() {
        let book = HealthBook::new(HealthConfig::default());
        let kept = (0..40).filter(|_| book.degraded_keeps_turn("d")).count();
        assert_eq!(kept, 40 / DEGRADED_SHARE as usize);
        // Fewer, not none, and not most either.
        assert!(kept > 0 && kept < 20);
    }

    #[test]
    fn f9_sticky_pins_expire_and_stay_bounded() {
        let m = StickyMap::new(1_000, 3);
        m.pin("conv", "a".into(), 0);
        assert_eq!(m.get("conv", 999).as_deref(), Some("a"));
        assert_eq!(m.get("conv", 1_000), None);
        for i in 0..10 {
            m.pin(&format!("c{i}"), "b".into(), 500 + i);
        }
        assert!(m.len() <= 3);
        assert_eq!(m.get("c9", 600).as_deref(), Some("b"));
    }
}
