//! The typed rejection every layer returns (L2) and the gateway code table (E1).

use crate::clock::Millis;
use crate::policy::{Dimension, Tier};
use crate::window::{Exceeded, ExceededLimit};
use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

/// Which layer produced a rejection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerKind {
    /// Identification (no or unknown subject).
    Identity,
    /// `ConcurrencySlotLayer`.
    ConcurrencySlot,
    /// `AnchoredWindowLayer`.
    AnchoredWindow,
    /// `BillingGateLayer`.
    BillingGate,
    /// `UpstreamLimitLayer`.
    UpstreamLimit,
    /// `CapacityQueueLayer`.
    CapacityQueue,
    /// `FailoverLayer`.
    Failover,
    /// The request itself (invalid, too large, unknown model).
    Request,
    /// Anything else inside the gateway.
    Gateway,
}

impl LayerKind {
    /// Stable name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            LayerKind::Identity => "identity",
            LayerKind::ConcurrencySlot => "concurrency_slot",
            LayerKind::AnchoredWindow => "anchored_window",
            LayerKind::BillingGate => "billing_gate",
            LayerKind::UpstreamLimit => "upstream_limit",
            LayerKind::CapacityQueue => "capacity_queue",
            LayerKind::Failover => "failover",
            LayerKind::Request => "request",
            LayerKind::Gateway => "gateway",
        }
    }
}

macro_rules! gateway_codes {
    ($( $(#[$doc:meta])* $name:ident = $code:literal, $msg:literal; )*) => {
        /// Gateway error codes. The first three digits are the HTTP status (E1); the
        /// gateway codes guide (`portcullis::docs::guides::codes`) lists them all.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum GatewayCode {
            $( $(#[$doc])* $name, )*
        }

        impl GatewayCode {
            /// Every code, in table order.
            pub const ALL: &'static [GatewayCode] = &[$(GatewayCode::$name,)*];

            /// The numeric code, e.g. 42906.
            pub fn code(self) -> u32 {
                match self { $(GatewayCode::$name => $code,)* }
            }

            /// The default client-facing message.
            pub fn default_message(self) -> &'static str {
                match self { $(GatewayCode::$name => $msg,)* }
            }
        }
    };
}

gateway_codes! {
    /// Malformed or invalid request.
    InvalidRequest = 40001, "The request is invalid.";
    /// No API key, or an unknown one.
    Unauthenticated = 40101, "Missing or invalid API key.";
    /// Balance ≤ 0 (B1).
    InsufficientBalance = 40201, "Insufficient balance. Top up at the dashboard.";
    /// Key spend cap reached (B1).
    SpendCapReached = 40202, "This API key has reached its spend limit.";
    /// Money budget short (B3).
    BudgetExhausted = 40203, "BUDGET_EXHAUSTED";
    /// Key revoked or expired, or model not allowed.
    Forbidden = 40301, "This API key may not be used for this request.";
    /// Unknown model or route.
    NotFound = 40401, "The requested model or resource does not exist.";
    /// The request body did not arrive in time (a slow or stalled client).
    RequestTimeout = 40801, "The request body was not received in time.";
    /// Body over the configured limit.
    PayloadTooLarge = 41301, "The request body is too large.";
    /// Semantically invalid request.
    Unprocessable = 42201, "The request could not be processed.";
    /// Concurrency slots full (C2).
    ConcurrencyLimit = 42901, "concurrency limit exceeded";
    /// Requests / images / videos / amount, or minute requests upstream (W7, U4).
    RpmLimit = 42902, "rpm limit exceeded";
    /// Hour requests upstream (U4).
    RphLimit = 42903, "rph limit exceeded";
    /// Day requests upstream (U4).
    RpdLimit = 42904, "rpd limit exceeded";
    /// Tokens (W7, U4).
    TpmLimit = 42905, "tpm limit exceeded";
    /// Subscription quota used up without pay-as-you-go (W8).
    SubscriptionQuota = 42906, "订阅额度已用完，可开启API扣费访问继续使用";
    /// Every upstream is limited or cooling down (U4).
    UpstreamCooling = 42908, "all upstreams are rate limited or cooling down";
    /// Capacity queue: not admitted within max_wait (Q3).
    CapacityBusy = 42910, "All upstream capacity for this model is busy. Retry shortly.";
    /// Every tried channel reported rate limiting (F10).
    UpstreamRateLimited = 42911, "Upstream capacity for this model is busy. Retry shortly.";
    /// Unexpected gateway error (E3).
    Internal = 50001, "unexpected gateway error";
    /// No channel configured for the model (U4).
    NoUpstream = 50201, "no available upstream for this model";
    /// Every tried channel failed (F10).
    UpstreamFailed = 50202, "The model provider returned an error. Please retry.";
    /// A limit store could not decide and the layer fails closed (B5, D4).
    StoreUnavailable = 50301, "The gateway cannot check limits right now. Retry shortly.";
    /// The tenant's billing record is missing from the store although the
    /// configuration names it (B7): fail closed until an operator sets the balance.
    BillingRecordMissing = 50303, "The gateway cannot bill this account right now. Retry later.";
    /// Deadline passed while queued (Q3).
    QueueDeadlineExceeded = 50401, "QUEUE_DEADLINE_EXCEEDED";
}

impl GatewayCode {
    /// The HTTP status: the first three digits.
    pub fn http_status(self) -> u16 {
        (self.code() / 100) as u16
    }
}

impl fmt::Display for GatewayCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code())
    }
}

/// The limits to announce in `X-RateLimit-*` headers on a 429 (E2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateLimitInfo {
    /// `X-RateLimit-Limit-Requests`.
    pub requests: Option<u64>,
    /// `X-RateLimit-Limit-Tokens`.
    pub tokens: Option<u64>,
}

/// Why a request was refused: one typed value for every layer (L2).
///
/// Layers return it inside their `BoxError`; downcast to read it:
///
/// ```
/// use portcullis_core::{GatewayCode, LayerKind, Rejection};
/// let err: Box<dyn std::error::Error + Send + Sync> =
///     Box::new(Rejection::new(GatewayCode::ConcurrencyLimit, LayerKind::ConcurrencySlot));
/// let r = err.downcast_ref::<Rejection>().unwrap();
/// assert_eq!(r.code().code(), 42901);
/// assert_eq!(r.http_status(), 429);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    code: GatewayCode,
    message: Cow<'static, str>,
    retry_after: Option<Duration>,
    layer: LayerKind,
    limit: Option<(Dimension, Tier)>,
    rate_limits: RateLimitInfo,
}

impl Rejection {
    /// A rejection with the code's default message.
    pub fn new(code: GatewayCode, layer: LayerKind) -> Self {
        Self {
            code,
            message: Cow::Borrowed(code.default_message()),
            retry_after: None,
            layer,
            limit: None,
            rate_limits: RateLimitInfo::default(),
        }
    }
    /// Replaces the message.
    pub fn with_message(mut self, m: impl Into<Cow<'static, str>>) -> Self {
        self.message = m.into();
        self
    }
    /// Sets the time until recovery.
    pub fn with_retry_after(mut self, d: Option<Duration>) -> Self {
        self.retry_after = d;
        self
    }
    /// Names the dimension and tier that was hit.
    pub fn with_limit(mut self, d: Dimension, t: Tier) -> Self {
        self.limit = Some((d, t));
        self
    }
    /// Sets the limits announced in `X-RateLimit-*` headers.
    pub fn with_rate_limits(mut self, r: RateLimitInfo) -> Self {
        self.rate_limits = r;
        self
    }

    /// The gateway code.
    pub fn code(&self) -> GatewayCode {
        self.code
    }
    /// The HTTP status.
    pub fn http_status(&self) -> u16 {
        self.code.http_status()
    }
    /// The client-facing message.
    pub fn message(&self) -> &str {
        &self.message
    }
    /// Time until recovery, when known.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
    /// `Retry-After` in whole seconds: rounded up, at least 1 (E2).
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(ceil_secs)
    }
    /// The layer that refused.
    pub fn layer(&self) -> LayerKind {
        self.layer
    }
    /// The dimension and tier that was hit, if a limit was.
    pub fn limit(&self) -> Option<(Dimension, Tier)> {
        self.limit
    }
    /// The limits to announce in `X-RateLimit-*` headers.
    pub fn rate_limits(&self) -> RateLimitInfo {
        self.rate_limits
    }
    /// Whether a client should retry by itself: false for 402s, for recovery that is
    /// unknown or more than 60 s away (E2), and for client errors.
    pub fn should_retry(&self) -> bool {
        match self.http_status() {
            429 => self
                .retry_after
                .is_some_and(|d| d <= Duration::from_secs(60)),
            500 | 502 | 503 | 504 => true,
            _ => false,
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} ({})",
            self.code,
            self.message,
            self.layer.as_str()
        )
    }
}

impl std::error::Error for Rejection {}

/// Whole seconds, rounded up, at least 1 (W9, E2).
pub fn ceil_secs(d: Duration) -> u64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    s.max(1)
}

/// The 42906 text of W8 for a subscription limit.
///
/// ```
/// use portcullis_core::{Dimension, Tier, subscription_message};
/// assert_eq!(
///     subscription_message(Dimension::Requests, Tier::per_hour(500), Some(1_832_000)),
///     "已达套餐请求次数上限（每 1 小时 500 次），约 1832 秒后自动恢复；如需立即继续可开启API扣费访问"
/// );
/// ```
pub fn subscription_message(d: Dimension, tier: Tier, retry_after_ms: Option<Millis>) -> String {
    let (word, unit) = match d {
        Dimension::Requests | Dimension::RollingRequests => ("请求次数", "次"),
        Dimension::Tokens => ("Token 用量", "Token"),
        Dimension::Images => ("图片张数", "张"),
        Dimension::Videos => ("视频数量", "个"),
        _ => return GatewayCode::SubscriptionQuota.default_message().to_owned(),
    };
    let window = window_words(tier.window_ms);
    match retry_after_ms {
        Some(ms) => format!(
            "已达套餐{word}上限（每 {window} {} {unit}），约 {} 秒后自动恢复；如需立即继续可开启API扣费访问",
            tier.limit,
            ceil_secs(Duration::from_millis(ms))
        ),
        // A single request larger than the tier: waiting does not help.
        None => format!(
            "已达套餐{word}上限（每 {window} {} {unit}）；如需立即继续可开启API扣费访问",
            tier.limit
        ),
    }
}

/// "N 秒 / N 分钟 / N 小时 / N 天" with the largest unit that divides evenly (W8).
pub(crate) fn window_words(window_ms: Millis) -> String {
    let secs = window_ms / 1000;
    if window_ms % 1000 != 0 || secs == 0 {
        return format!("{} 毫秒", window_ms);
    }
    for (size, word) in [(86_400, "天"), (3600, "小时"), (60, "分钟")] {
        if secs % size == 0 {
            return format!("{} {word}", secs / size);
        }
    }
    format!("{secs} 秒")
}

/// Builds the window layer's rejection from what was exceeded (W7, W8, W9, E2).
///
/// `subscription` is true when the exceeded policy is the subject's subscription and
/// pay-as-you-go is off: the answer is then 42906 in Chinese.
pub fn window_rejection(ex: &Exceeded, subscription: bool, rates: RateLimitInfo) -> Rejection {
    let b: &ExceededLimit = ex.binding();
    let retry = ex.retry_after_ms().map(Duration::from_millis);
    let r = if subscription {
        Rejection::new(GatewayCode::SubscriptionQuota, LayerKind::AnchoredWindow).with_message(
            subscription_message(b.dimension, b.tier, ex.retry_after_ms()),
        )
    } else {
        let code = if b.dimension == Dimension::Tokens {
            GatewayCode::TpmLimit
        } else {
            GatewayCode::RpmLimit
        };
        Rejection::new(code, LayerKind::AnchoredWindow)
    };
    r.with_retry_after(retry)
        .with_limit(b.dimension, b.tier)
        .with_rate_limits(rates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e1_codes_start_with_their_http_status_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for c in GatewayCode::ALL {
            assert!(seen.insert(c.code()), "duplicate {c}");
            assert!((100..600).contains(&c.http_status()));
            assert_eq!(c.code() / 100, u32::from(c.http_status()));
        }
        assert_eq!(GatewayCode::SubscriptionQuota.code(), 42906);
        assert_eq!(GatewayCode::NoUpstream.http_status(), 502);
    }

    #[test]
    fn e2_retry_after_rounds_up_and_is_never_zero() {
        assert_eq!(ceil_secs(Duration::from_millis(1)), 1);
        assert_eq!(ceil_secs(Duration::ZERO), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1000)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
    }

    #[test]
    fn e2_should_retry_false_past_60s_unknown_and_402() {
        let r = |d: Option<u64>| {
            Rejection::new(GatewayCode::RpmLimit, LayerKind::AnchoredWindow)
                .with_retry_after(d.map(Duration::from_secs))
        };
        assert!(r(Some(60)).should_retry());
        assert!(!r(Some(61)).should_retry());
        assert!(!r(None).should_retry());
        assert!(
            !Rejection::new(GatewayCode::InsufficientBalance, LayerKind::BillingGate)
                .should_retry()
        );
    }

    #[test]
    fn w8_window_words_use_largest_even_unit() {
        assert_eq!(window_words(3_600_000), "1 小时");
        assert_eq!(window_words(60_000), "1 分钟");
        assert_eq!(window_words(90_000), "90 秒");
        assert_eq!(window_words(86_400_000 * 7), "7 天");
        assert_eq!(window_words(7_200_000), "2 小时");
    }

    #[test]
    fn w8_messages_per_dimension() {
        assert_eq!(
            subscription_message(Dimension::Tokens, Tier::per_minute(100_000), Some(1500)),
            "已达套餐Token 用量上限（每 1 分钟 100000 Token），约 2 秒后自动恢复；如需立即继续可开启API扣费访问"
        );
        assert_eq!(
            subscription_message(Dimension::Images, Tier::per_day(20), Some(86_400_000)),
            "已达套餐图片张数上限（每 1 天 20 张），约 86400 秒后自动恢复；如需立即继续可开启API扣费访问"
        );
        assert_eq!(
            subscription_message(Dimension::Videos, Tier::per_hour(2), Some(10)),
            "已达套餐视频数量上限（每 1 小时 2 个），约 1 秒后自动恢复；如需立即继续可开启API扣费访问"
        );
        assert_eq!(
            subscription_message(
                Dimension::Amount,
                Tier {
                    window_ms: 0,
                    limit: 5
                },
                None
            ),
            "订阅额度已用完，可开启API扣费访问继续使用"
        );
    }
}
