//! The proxy's configuration file (SPEC P3): TOML, read with serde.
//!
//! A bad file fails at start with the file, the line and the reason: syntax and type
//! errors come from the TOML parser with their position; references that do not
//! resolve (an unknown policy, tenant or model) are reported at the line of the
//! reference. See `examples/demo.toml` for a complete file and the README for the
//! reference.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tollgate_core::{Dialect, Money, Policy, Price, Tier};
use toml::Spanned;

/// A configuration error: where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, if the configuration came from one.
    pub file: Option<PathBuf>,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self
            .file
            .as_deref()
            .map_or_else(|| "<config>".to_owned(), |p| p.display().to_string());
        match self.line {
            Some(l) => write!(f, "{file}:{l}: {}", self.reason),
            None => write!(f, "{file}: {}", self.reason),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Duration written as `"1m"`, `"1h"`, `"24h"`, `"1d"`, `"90s"`, `"250ms"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span(pub Duration);

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s)
            .map(Span)
            .map_err(|e| serde::de::Error::custom(format!("invalid duration {s:?}: {e}")))
    }
}

/// One tier in the file: `{ window = "1m", limit = 60 }`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TierConfig {
    /// Window length.
    pub window: Span,
    /// Units per window.
    pub limit: u64,
}

/// A policy (SPEC §0, §2, §3).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// In-flight requests; 0 = unlimited.
    pub concurrency: u32,
    /// Request tiers.
    pub requests: Vec<TierConfig>,
    /// Token tiers.
    pub tokens: Vec<TierConfig>,
    /// Image tiers.
    pub images: Vec<TierConfig>,
    /// Video tiers.
    pub videos: Vec<TierConfig>,
    /// Cumulative spend cap in minor units.
    pub amount_cap: Option<Money>,
    /// Requests started in the last 60 s.
    pub rolling_rpm: Option<u32>,
}

impl PolicyConfig {
    fn to_policy(&self) -> Result<Policy, String> {
        let tiers = |v: &[TierConfig]| -> Vec<Tier> {
            v.iter().map(|t| Tier::new(t.window.0, t.limit)).collect()
        };
        let p = Policy {
            concurrency: self.concurrency,
            requests: tiers(&self.requests),
            tokens: tiers(&self.tokens),
            images: tiers(&self.images),
            videos: tiers(&self.videos),
            amount_cap: self.amount_cap,
            rolling_rpm: self.rolling_rpm,
        };
        p.validate()?;
        Ok(p)
    }
}

/// A subscription of a key.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionConfig {
    /// Name of the plan's policy.
    pub policy: Spanned<String>,
    /// RFC 3339 end of the subscription, e.g. `2027-01-01T00:00:00Z`.
    #[serde(default)]
    pub expires_at: Option<String>,
    /// Fall through to the key's own policy and bill the balance when the plan is used up.
    #[serde(default)]
    pub pay_as_you_go: bool,
}

/// An API key of a client.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// The key itself (demo files only)…
    #[serde(default)]
    pub key: Option<String>,
    /// …or the environment variable holding it.
    #[serde(default)]
    pub key_env: Option<String>,
    /// Tenant the key belongs to.
    #[serde(default)]
    pub tenant: Option<Spanned<String>>,
    /// The key's own policy.
    #[serde(default)]
    pub policy: Option<Spanned<String>>,
    /// A subscription.
    #[serde(default)]
    pub subscription: Option<SubscriptionConfig>,
    /// Spend cap in minor units.
    #[serde(default)]
    pub spend_cap: Option<Money>,
    /// Models the key may use; empty = all.
    #[serde(default)]
    pub models: Vec<String>,
    /// The dialect of the key's rejections: `"route"` (default: the dialect of the route
    /// it calls) or `"native"` (the native body and codes on every route, E1).
    #[serde(default)]
    pub errors: ErrorsConfig,
}

/// Whose dialect a key's rejections speak.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ErrorsConfig {
    /// The dialect of the route called.
    #[default]
    Route,
    /// The native body and codes, on every route.
    Native,
}

/// A money budget (B3).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    /// Name, unique within its tenant.
    pub name: String,
    /// Most money per period (minor units).
    pub limit: Money,
    /// Period, anchored at first use; absent = never resets.
    #[serde(default)]
    pub period: Option<Span>,
}

/// A tenant (account).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct TenantConfig {
    /// Starting balance in minor units (seeded once: a running balance is kept).
    pub balance: Money,
    /// Weight in the capacity queue's fair share.
    pub weight: Option<u32>,
    /// Money budgets every request of the tenant draws on.
    pub budgets: Vec<BudgetConfig>,
}

/// A task budget, chosen per request with the `x-tollgate-task` header (B3), and the
/// tenants it belongs to (issue 14, item 5).
///
/// A task names its tenant (`tenant = "acme"`) or tenants (`tenants = ["a", "b"]`): only
/// keys of those tenants may name it, and a key of another tenant gets the very answer an
/// unknown name gets (403 40301), so names cannot be probed. A task that names none is
/// shared: any key may name it (the behaviour before tasks had tenants; a warning is
/// logged at load). Budgets are kept per tenant (D3): a task of two tenants is two budgets
/// of the same limit, one in each tenant's books.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TaskConfig {
    /// Most money per period (minor units).
    pub budget: Money,
    /// Period, anchored at first use; absent = never resets.
    #[serde(default)]
    pub period: Option<Span>,
    /// The tenant the task belongs to.
    #[serde(default)]
    pub tenant: Option<Spanned<String>>,
    /// The tenants the task belongs to (with or instead of `tenant`).
    #[serde(default)]
    pub tenants: Vec<Spanned<String>>,
}

impl TaskConfig {
    /// The tenants whose keys may name the task; empty = any key (a shared task).
    pub fn owners(&self) -> impl Iterator<Item = &str> {
        self.tenant
            .iter()
            .chain(&self.tenants)
            .map(|t| t.get_ref().as_str())
    }
}

/// Upstream limits at one granularity (SPEC U1): `{ rpm, rph, rpd, tpm, itpm, otpm }`.
pub use tollgate_core::upstream::RateLimits as UpstreamLimits;

/// The provider family of a channel.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// OpenAI.
    Openai,
    /// Anthropic.
    Anthropic,
    /// Google Gemini.
    Gemini,
}

impl Vendor {
    /// The API format the vendor speaks.
    pub fn dialect(self) -> Dialect {
        match self {
            Vendor::Openai => Dialect::OpenAi,
            Vendor::Anthropic => Dialect::Anthropic,
            Vendor::Gemini => Dialect::Gemini,
        }
    }
}

/// One upstream link (SPEC §0 "channel").
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ChannelConfig {
    /// Provider family; also its API format.
    pub vendor: Vendor,
    /// Base URL, e.g. `https://api.openai.com`. The demo writes `fake://` for the
    /// bundled fake upstream.
    pub base_url: String,
    /// Environment variable holding the provider credential.
    #[serde(default)]
    pub credential_env: Option<String>,
    /// The credential itself (demo and tests only; prefer `credential_env`).
    #[serde(default)]
    pub credential: Option<String>,
    /// Models served.
    pub models: Vec<Spanned<String>>,
    /// Failover group.
    #[serde(default = "default_group")]
    pub group: String,
    /// Share of new conversations.
    #[serde(default = "one")]
    pub weight: u32,
    /// Most in-flight requests (0 = unlimited).
    #[serde(default)]
    pub capacity: u32,
    /// Limits of the credential.
    #[serde(default)]
    pub limits: UpstreamLimits,
    /// Limits per model on this credential.
    #[serde(default)]
    pub model_limits: BTreeMap<String, UpstreamLimits>,
    /// A non-secret name of the credential: channels with the same one share its
    /// limits. Default: a hash of the credential (channels holding the same secret
    /// share), or the channel name when it has none.
    #[serde(default)]
    pub credential_id: Option<String>,
}

fn default_group() -> String {
    "default".to_owned()
}
fn one() -> u32 {
    1
}

/// A model: price and capabilities.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// Price in minor units.
    pub price: Price,
    /// Default max output when the request names none.
    pub max_output_tokens: Option<u64>,
    /// Context window.
    pub context_window: Option<u64>,
    /// Capabilities: `tools`, `structured_output`, `vision`, `video`.
    pub capabilities: Vec<String>,
    /// Largest max output the model accepts (for the fallback contract, F11).
    pub output_limit: Option<u64>,
    /// Model to fall back to when every channel of this one failed (F11); used only
    /// if it meets the request's contract.
    pub fallback: Option<String>,
}

/// What a layer does when its store cannot answer (D4).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FailureModeConfig {
    /// Admit, log, count.
    Open,
    /// Refuse with 503 + Retry-After.
    Closed,
    /// Decide in this process with limits divided by `[store] instances` (slots and
    /// windows only).
    Local,
}

impl From<FailureModeConfig> for tollgate::FailureMode {
    fn from(m: FailureModeConfig) -> Self {
        match m {
            // With `local`, the store itself falls back and the layer sees no error;
            // should the local store ever fail, admit.
            FailureModeConfig::Open | FailureModeConfig::Local => tollgate::FailureMode::Open,
            FailureModeConfig::Closed => tollgate::FailureMode::Closed,
        }
    }
}

/// Where limit state lives.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `memory` (default) or a `redis://` URL.
    pub url: String,
    /// Most subjects kept in memory per kind of state.
    pub capacity: usize,
    /// Redis key prefix.
    pub prefix: String,
    /// Deadline of every store call (D4).
    pub deadline: Span,
    /// Slots when the store fails: `open` (default) or `closed`.
    pub slots_failure: FailureModeConfig,
    /// Windows when the store fails: `open` (default) or `closed`.
    pub windows_failure: FailureModeConfig,
    /// Billing when the store fails: `closed` only (the default, B5); `open` and
    /// `local` are configuration errors.
    pub billing_failure: FailureModeConfig,
    /// Gateway instances sharing the store: `local` mode divides limits by it.
    pub instances: u32,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: "memory".to_owned(),
            capacity: tollgate_core::store::memory::DEFAULT_CAPACITY,
            prefix: "tollgate".to_owned(),
            deadline: Span(Duration::from_millis(20)),
            slots_failure: FailureModeConfig::Open,
            windows_failure: FailureModeConfig::Open,
            billing_failure: FailureModeConfig::Closed,
            instances: 1,
        }
    }
}

/// Server settings.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Listen address.
    pub listen: SocketAddr,
    /// Largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Upstream response-head timeout.
    pub upstream_timeout: Span,
    /// Longest silence of an upstream answer's body before it is cut (the attempt's
    /// outcome becomes unknown).
    pub upstream_idle_timeout: Span,
    /// Longest time to receive a request body (slow clients get 408), default 30 s.
    pub body_read_timeout: Span,
    /// Longest time to receive a request head (slower connections are closed),
    /// default 10 s.
    pub header_read_timeout: Span,
    /// JSON-lines file every settled or pending attempt is appended to (B6).
    pub usage_log: Option<PathBuf>,
    /// Environment variable holding the admin token (the `/admin/*` endpoints are
    /// off without a token).
    pub admin_token_env: Option<String>,
    /// The admin token itself (demo and tests only; prefer `admin_token_env`).
    pub admin_token: Option<String>,
    /// Longest time a client may leave a response unread (the gateway has a frame
    /// for it and the client takes none): the response is then cut and everything
    /// held for it released or settled as for a client that went away (L3), default
    /// 60 s.
    pub stall_timeout: Span,
    /// Longest life of a response body, read or not, default 30 min.
    pub max_response_lifetime: Span,
    /// Most connections served at once; beyond it the gateway stops accepting (new
    /// connections wait in the listen backlog) until one closes, default 4096.
    pub max_connections: usize,
    /// An HTTP/2 connection with no open stream this long is closed (GOAWAY),
    /// default 120 s. (An idle HTTP/1 connection is closed by `header_read_timeout`.)
    pub h2_idle_timeout: Span,
    /// Environment variable holding the metrics token: with one, `GET /metrics` needs
    /// `Authorization: Bearer <token>` (401 otherwise); without, it is open.
    pub metrics_token_env: Option<String>,
    /// The metrics token itself (demo and tests only; prefer `metrics_token_env`).
    pub metrics_token: Option<String>,
    /// On a graceful shutdown (`SIGTERM` / `SIGINT` to the `tollgate` binary), how long
    /// requests in flight (streams included) may go on after the gateway stopped
    /// accepting; `"0s"` stops at once. Default 30 s.
    pub drain_timeout: Span,
}

impl ServerConfig {
    /// The stall and lifetime bounds of proxied responses.
    pub fn stall_limits(&self) -> crate::stall::StallLimits {
        crate::stall::StallLimits {
            stall: self.stall_timeout.0,
            lifetime: self.max_response_lifetime.0,
        }
    }

    /// The first bad serving bound: its key and why.
    fn check(&self) -> Option<(&'static str, String)> {
        let day = Duration::from_secs(24 * 3600);
        let spans = [
            ("stall_timeout", self.stall_timeout, day, "24h"),
            (
                "max_response_lifetime",
                self.max_response_lifetime,
                7 * day,
                "7d",
            ),
            ("h2_idle_timeout", self.h2_idle_timeout, day, "24h"),
        ];
        for (key, Span(d), most, written) in spans {
            if d.is_zero() || d > most {
                return Some((
                    key,
                    format!("server.{key} must be between 1ms and {written}"),
                ));
            }
        }
        if self.drain_timeout.0 > day {
            return Some((
                "drain_timeout",
                "server.drain_timeout must be at most 24h".into(),
            ));
        }
        if self.max_connections == 0 || self.max_connections > 1 << 24 {
            return Some((
                "max_connections",
                "server.max_connections must be between 1 and 16777216".into(),
            ));
        }
        None
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_body_bytes: 4 << 20,
            upstream_timeout: Span(Duration::from_secs(600)),
            upstream_idle_timeout: Span(Duration::from_secs(300)),
            body_read_timeout: Span(Duration::from_secs(30)),
            header_read_timeout: Span(Duration::from_secs(10)),
            usage_log: None,
            admin_token_env: None,
            admin_token: None,
            stall_timeout: Span(Duration::from_secs(60)),
            max_response_lifetime: Span(Duration::from_secs(30 * 60)),
            max_connections: 4096,
            h2_idle_timeout: Span(Duration::from_secs(120)),
            metrics_token_env: None,
            metrics_token: None,
            drain_timeout: Span(Duration::from_secs(30)),
        }
    }
}

/// The capacity queue (SPEC Q1–Q5).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct QueueConfig {
    /// Longest wait for channel capacity (Q3), default 10 s.
    pub max_wait: Span,
    /// Deadline when the request names none (`x-tollgate-deadline-ms`); absent = none.
    pub default_deadline: Option<Span>,
    /// Most waiters per channel queue.
    pub max_depth: usize,
    /// Most waiters of one tenant per channel queue.
    pub max_per_tenant: usize,
    /// How long a channel's capacity stays held after a client abandoned a request
    /// mid-answer (the provider works on until it notices), default 250 ms.
    pub abort_grace: Span,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            max_wait: Span(Duration::from_secs(10)),
            default_deadline: None,
            max_depth: 1024,
            max_per_tenant: 128,
            abort_grace: Span(tollgate::capacity::DEFAULT_ABORT_GRACE),
        }
    }
}

/// Failover settings (F1–F8).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FailoverSettings {
    /// Most attempts per request, default 3 (1 = no failover).
    pub max_attempts: u32,
    /// Longest wait for a stream's first content chunk, default 30 s.
    pub first_chunk_timeout: Span,
    /// Backoff between attempts without a Retry-After: base and cap.
    pub backoff_base: Span,
    /// See `backoff_base`.
    pub backoff_cap: Span,
    /// Longest wait for a channel to recover before a retry, default 10 s.
    pub max_wait: Span,
    /// Share of requests that may be retried over `budget_ttl` (F7), default 0.2.
    pub retry_ratio: f32,
    /// Retries always allowed per second, default 10.
    pub retry_min_per_sec: u32,
    /// How long a request counts toward the retry budget, default 10 s (1–60 s).
    pub budget_ttl: Span,
    /// How long an open circuit stays open before probes (F8), default 10 s.
    pub circuit_open: Span,
    /// Outcomes needed in a channel's 30 s window before its error ratio can open
    /// the circuit, default 10.
    pub circuit_min_requests: u32,
}

impl Eq for FailoverSettings {}

impl Default for FailoverSettings {
    fn default() -> Self {
        let d = tollgate::failover::FailoverConfig::default();
        Self {
            max_attempts: d.max_attempts,
            first_chunk_timeout: Span(d.first_chunk_timeout),
            backoff_base: Span(d.backoff_base),
            backoff_cap: Span(d.backoff_cap),
            max_wait: Span(d.max_wait),
            retry_ratio: d.budget_retry_ratio,
            retry_min_per_sec: d.budget_min_per_sec,
            budget_ttl: Span(d.budget_ttl),
            circuit_open: Span(Duration::from_millis(d.health.open_ms)),
            circuit_min_requests: d.health.min_requests,
        }
    }
}

impl FailoverSettings {
    /// As the layer's settings, with the queue's default deadline.
    pub fn to_layer(
        &self,
        default_deadline: Option<Duration>,
    ) -> tollgate::failover::FailoverConfig {
        let mut c = tollgate::failover::FailoverConfig {
            max_attempts: self.max_attempts,
            first_chunk_timeout: self.first_chunk_timeout.0,
            backoff_base: self.backoff_base.0,
            backoff_cap: self.backoff_cap.0,
            max_wait: self.max_wait.0,
            default_deadline,
            budget_ttl: self.budget_ttl.0,
            budget_min_per_sec: self.retry_min_per_sec,
            budget_retry_ratio: self.retry_ratio,
            ..Default::default()
        };
        c.health.open_ms = self.circuit_open.0.as_millis() as u64;
        c.health.min_requests = self.circuit_min_requests.max(1);
        c
    }
}

/// Settings of the user-policy layers.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Slot lease TTL (C4).
    pub lease_ttl: Span,
    /// Wait for a slot (C2); zero = refuse at once.
    pub slot_max_wait: Span,
    /// Wait for room in the rolling window (W10).
    pub rolling_max_wait: Span,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            lease_ttl: Span(Duration::from_secs(600)),
            slot_max_wait: Span(Duration::ZERO),
            rolling_max_wait: Span(Duration::ZERO),
        }
    }
}

/// What passes between clients and providers besides the body (SPEC P2, issue 14
/// item 1): request headers to each vendor's channels and response headers back to the
/// client, both from allow-lists. These lists extend the built-in ones (see
/// `crate::forward`); nothing else passes.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ForwardingConfig {
    /// Request headers forwarded to OpenAI channels besides the built-in ones (e.g.
    /// `openai-beta`); default none.
    pub openai_headers: Vec<ForwardedHeader>,
    /// Request headers forwarded to Anthropic channels besides the built-in ones;
    /// default `anthropic-version`, `anthropic-beta`.
    pub anthropic_headers: Vec<ForwardedHeader>,
    /// Request headers forwarded to Gemini channels besides the built-in ones; default
    /// none.
    pub gemini_headers: Vec<ForwardedHeader>,
    /// Response headers of a provider passed to the client besides the built-in ones;
    /// default none.
    pub response_headers: Vec<ForwardedHeader>,
    /// Pass the providers' rate-limit headers (`x-ratelimit-*`,
    /// `anthropic-ratelimit-*`) to clients. They describe the operator's account, not
    /// the client's limits (those are at `GET /usage` and on every 429): default off.
    pub provider_rate_limit_headers: bool,
}

impl Default for ForwardingConfig {
    fn default() -> Self {
        let h = |n: &'static str| ForwardedHeader(http::HeaderName::from_static(n));
        Self {
            openai_headers: Vec::new(),
            anthropic_headers: vec![h("anthropic-version"), h("anthropic-beta")],
            gemini_headers: Vec::new(),
            response_headers: Vec::new(),
            provider_rate_limit_headers: false,
        }
    }
}

/// A header name an operator allows through, checked when the file is read: a valid
/// name (stored lowercase), and none that may never pass (a credential location, a
/// cookie, an account selector, a forwarding header, a hop-by-hop header, or the
/// gateway's own `x-tollgate-*` controls).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardedHeader(pub http::HeaderName);

/// Header names no allow-list may name, with the reason given in the error.
pub const NEVER_FORWARDED: [(&str, &str); 22] = [
    ("authorization", "a credential location"),
    ("proxy-authorization", "a credential location"),
    ("x-api-key", "a credential location"),
    ("api-key", "a credential location"),
    ("x-goog-api-key", "a credential location"),
    ("cookie", "a cookie"),
    ("set-cookie", "a cookie"),
    (
        "openai-organization",
        "it selects an organisation on the operator's account",
    ),
    (
        "openai-project",
        "it selects a project on the operator's account",
    ),
    (
        "x-goog-user-project",
        "it selects a project on the operator's account",
    ),
    ("x-forwarded-for", "a forwarding header"),
    ("forwarded", "a forwarding header"),
    ("x-real-ip", "a forwarding header"),
    ("host", "set by the gateway's client"),
    ("content-length", "set by the gateway's client"),
    (
        "accept-encoding",
        "the gateway reads answers uncompressed for their usage",
    ),
    ("connection", "a hop-by-hop header"),
    ("keep-alive", "a hop-by-hop header"),
    ("proxy-connection", "a hop-by-hop header"),
    ("te", "a hop-by-hop header"),
    ("transfer-encoding", "a hop-by-hop header"),
    ("upgrade", "a hop-by-hop header"),
];

impl ForwardedHeader {
    /// Checks a name from the file.
    pub fn parse(name: &str) -> Result<Self, String> {
        let h = http::HeaderName::try_from(name.trim())
            .map_err(|_| format!("{name:?} is not a valid header name"))?;
        if let Some((_, why)) = NEVER_FORWARDED.iter().find(|(n, _)| *n == h.as_str()) {
            return Err(format!("the header {h} may never be forwarded: {why}"));
        }
        if h.as_str().starts_with("x-tollgate-") || h == http::header::TRAILER {
            return Err(format!(
                "the header {h} may never be forwarded: a gateway control or hop-by-hop header"
            ));
        }
        Ok(Self(h))
    }
}

impl<'de> Deserialize<'de> for ForwardedHeader {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The file as written.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct RawConfig {
    /// Server settings.
    pub server: ServerConfig,
    /// Store settings.
    pub store: StoreConfig,
    /// User-policy layer settings.
    pub limits: LimitsConfig,
    /// Capacity queue settings.
    pub queue: QueueConfig,
    /// Failover settings.
    pub failover: FailoverSettings,
    /// Policies by name.
    pub policies: BTreeMap<String, PolicyConfig>,
    /// Tenants by name.
    pub tenants: BTreeMap<String, TenantConfig>,
    /// API keys by a label.
    pub keys: BTreeMap<String, KeyConfig>,
    /// Channels by name.
    pub channels: BTreeMap<String, ChannelConfig>,
    /// Models by id.
    pub models: BTreeMap<String, ModelConfig>,
    /// Task budgets by name.
    pub tasks: BTreeMap<String, TaskConfig>,
    /// Account-wide upstream limits per vendor (`openai`, `anthropic`, `gemini`; U1).
    pub vendors: BTreeMap<String, UpstreamLimits>,
    /// Header allow-lists both ways (P2).
    pub forwarding: ForwardingConfig,
    /// Trace export (`crate::telemetry`).
    pub telemetry: crate::telemetry::TelemetryConfig,
}

/// A resolved API key.
#[derive(Clone, Debug)]
pub struct KeyEntry {
    /// The label in the file (never the secret): the subject key limits, usage
    /// records and logs use.
    pub label: Arc<str>,
    /// The subject the layers limit.
    pub subject: tollgate_core::Subject,
    /// Spend cap.
    pub spend_cap: Option<Money>,
    /// Spend cap and tenant budgets, for the billing layer.
    pub billing: tollgate::BillingProfile,
    /// The tenant's weight in the capacity queue (Q4).
    pub weight: u32,
    /// Allowed models; empty = all.
    pub models: Vec<String>,
    /// Rejections in the native body and codes on every route (E1).
    pub native_errors: bool,
}

/// A resolved channel.
#[derive(Clone)]
pub struct Channel {
    /// Name in the file.
    pub name: Arc<str>,
    /// The file's settings.
    pub config: ChannelConfig,
    /// The credential, read from the environment.
    pub credential: Option<String>,
}

/// The configuration, checked and resolved.
#[derive(Clone)]
pub struct Config {
    /// The file as written.
    pub raw: RawConfig,
    /// Keys by secret.
    pub keys: BTreeMap<String, KeyEntry>,
    /// Channels by name.
    pub channels: Vec<Channel>,
    /// Where it came from.
    pub source: Option<PathBuf>,
    /// The admin token, read from the environment (`None` = admin endpoints off).
    pub admin_token: Option<String>,
    /// The metrics token, read from the environment (`None` = `/metrics` open).
    pub metrics_token: Option<String>,
}

impl Config {
    /// Reads and checks a file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: Some(path.to_owned()),
            line: None,
            reason: format!("cannot read: {e}"),
        })?;
        let mut c = Self::parse(&text).map_err(|mut e| {
            e.file = Some(path.to_owned());
            e
        })?;
        c.source = Some(path.to_owned());
        Ok(c)
    }

    /// Parses and checks TOML text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError {
            file: None,
            line: e.span().map(|s| line_of(text, s.start)),
            reason: e.message().to_owned(),
        })?;
        resolve(raw, text)
    }

    /// The policy named `name`.
    pub fn policy(&self, name: &str) -> Option<Policy> {
        self.raw.policies.get(name).and_then(|p| p.to_policy().ok())
    }
}

/// How a secret appears in `Debug` output: present or not, never its value.
pub(crate) const REDACTED: &str = "<redacted>";

fn redact(secret: &Option<String>) -> Option<&'static str> {
    secret.as_ref().map(|_| REDACTED)
}

// `Debug` of everything holding a client key, a provider credential or the admin token
// shows the structure but never the secret (issue 14, item 9): a `{:?}` in a log line
// or a panic message must not leak one.

impl fmt::Debug for KeyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyConfig")
            .field("key", &redact(&self.key))
            .field("key_env", &self.key_env)
            .field("tenant", &self.tenant)
            .field("policy", &self.policy)
            .field("subscription", &self.subscription)
            .field("spend_cap", &self.spend_cap)
            .field("models", &self.models)
            .field("errors", &self.errors)
            .finish()
    }
}

impl fmt::Debug for ChannelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelConfig")
            .field("vendor", &self.vendor)
            .field("base_url", &self.base_url)
            .field("credential_env", &self.credential_env)
            .field("credential", &redact(&self.credential))
            .field("models", &self.models)
            .field("group", &self.group)
            .field("weight", &self.weight)
            .field("capacity", &self.capacity)
            .field("limits", &self.limits)
            .field("model_limits", &self.model_limits)
            .field("credential_id", &self.credential_id)
            .finish()
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("listen", &self.listen)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("upstream_timeout", &self.upstream_timeout)
            .field("upstream_idle_timeout", &self.upstream_idle_timeout)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("usage_log", &self.usage_log)
            .field("admin_token_env", &self.admin_token_env)
            .field("admin_token", &redact(&self.admin_token))
            .field("stall_timeout", &self.stall_timeout)
            .field("max_response_lifetime", &self.max_response_lifetime)
            .field("max_connections", &self.max_connections)
            .field("h2_idle_timeout", &self.h2_idle_timeout)
            .field("metrics_token_env", &self.metrics_token_env)
            .field("metrics_token", &redact(&self.metrics_token))
            .field("drain_timeout", &self.drain_timeout)
            .finish()
    }
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel")
            .field("name", &self.name)
            .field("config", &self.config)
            .field("credential", &redact(&self.credential))
            .finish()
    }
}

/// Keys by secret, shown by their entries only (the label names the key).
pub(crate) struct RedactedKeys<'a, I>(pub(crate) &'a I);

impl<'a, I, K, V> fmt::Debug for RedactedKeys<'a, I>
where
    &'a I: IntoIterator<Item = (K, V)>,
    V: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.into_iter().map(|(_, v)| v))
            .finish()
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("raw", &self.raw)
            .field("keys", &RedactedKeys(&self.keys))
            .field("channels", &self.channels)
            .field("source", &self.source)
            .field("admin_token", &redact(&self.admin_token))
            .field("metrics_token", &redact(&self.metrics_token))
            .finish()
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

fn resolve(raw: RawConfig, text: &str) -> Result<Config, ConfigError> {
    let spans = Spans::new(text);
    let err = |span: Option<std::ops::Range<usize>>, reason: String| ConfigError {
        file: None,
        line: span.map(|s| line_of(text, s.start)),
        reason,
    };
    let mut policies = BTreeMap::new();
    for (name, p) in &raw.policies {
        let policy = p.to_policy().map_err(|r| {
            err(
                spans.entry("policies", name),
                format!("policy {name:?}: {r}"),
            )
        })?;
        policies.insert(name.clone(), Arc::new(policy));
    }
    let policy_ref = |r: &Spanned<String>| {
        policies.get(r.get_ref()).cloned().ok_or_else(|| {
            err(
                Some(r.span()),
                format!(
                    "unknown policy {:?} (defined: {})",
                    r.get_ref(),
                    names(raw.policies.keys())
                ),
            )
        })
    };

    let too_long = Duration::from_secs(24 * 3600);
    let f = &raw.failover;
    let checks: [(&str, bool, &str); 9] = [
        (
            "failover.max_attempts",
            f.max_attempts == 0 || f.max_attempts > 10,
            "failover.max_attempts must be between 1 and 10",
        ),
        (
            "failover.retry_ratio",
            !(0.0..=1000.0).contains(&f.retry_ratio) || f.retry_ratio.is_nan(),
            "failover.retry_ratio must be between 0 and 1000",
        ),
        (
            "failover.budget_ttl",
            f.budget_ttl.0 < Duration::from_secs(1) || f.budget_ttl.0 > Duration::from_secs(60),
            "failover.budget_ttl must be between 1s and 60s",
        ),
        (
            "failover.first_chunk_timeout",
            f.first_chunk_timeout.0.is_zero() || f.first_chunk_timeout.0 > too_long,
            "failover.first_chunk_timeout must be between 1ms and 24h",
        ),
        (
            "limits.lease_ttl",
            raw.limits.lease_ttl.0 < Duration::from_secs(1),
            "limits.lease_ttl must be at least 1s",
        ),
        (
            "queue.max_wait",
            raw.queue.max_wait.0 > too_long,
            "queue.max_wait must be at most 24h",
        ),
        (
            "limits.slot_max_wait",
            raw.limits.slot_max_wait.0 > too_long,
            "limits.slot_max_wait must be at most 24h",
        ),
        (
            "limits.rolling_max_wait",
            raw.limits.rolling_max_wait.0 > too_long,
            "limits.rolling_max_wait must be at most 24h",
        ),
        (
            "store.deadline",
            raw.store.deadline.0.is_zero() || raw.store.deadline.0 > Duration::from_secs(60),
            "store.deadline must be between 1ms and 60s",
        ),
    ];
    for (path, bad, reason) in checks {
        if bad {
            return Err(err(spans.of(path), reason.into()));
        }
    }
    raw.telemetry.check().map_err(|(at, r)| err(at, r))?;
    if let Some((key, reason)) = raw.server.check() {
        return Err(err(spans.of(&format!("server.{key}")), reason));
    }
    if raw.queue.default_deadline.is_some_and(|d| d.0 > too_long) {
        return Err(err(
            spans.of("queue.default_deadline"),
            "queue.default_deadline must be at most 24h".into(),
        ));
    }
    // Billing is fail-closed only (B5): `open` would forward calls that are never
    // settled and leave no usage record; `local` would decide money per instance.
    match raw.store.billing_failure {
        FailureModeConfig::Closed => {}
        FailureModeConfig::Open => {
            return Err(err(
                spans.of("store.billing_failure"),
                "store.billing_failure cannot be `open`: billing is fail-closed only (B5); \
                 with the store down a request would be sent unbilled, with no settlement \
                 and no usage record. Remove the setting or write `closed`"
                    .into(),
            ));
        }
        FailureModeConfig::Local => {
            return Err(err(
                spans.of("store.billing_failure"),
                "store.billing_failure cannot be `local`: money must not be decided per \
                 instance (B5)"
                    .into(),
            ));
        }
    }
    for (name, task) in &raw.tasks {
        for t in task.tenant.iter().chain(&task.tenants) {
            if !raw.tenants.contains_key(t.get_ref()) {
                return Err(err(
                    Some(t.span()),
                    format!(
                        "task {name:?}: unknown tenant {:?} (defined: {})",
                        t.get_ref(),
                        names(raw.tenants.keys())
                    ),
                ));
            }
        }
        if task.owners().next().is_none() {
            tracing::warn!(
                task = %name,
                "task names no tenant: any key may name it in x-tollgate-task; give it \
                 `tenant = \"…\"` or `tenants = [\"…\"]`"
            );
        }
    }
    let mut keys = BTreeMap::new();
    for (label, k) in &raw.keys {
        let at = spans.entry("keys", label);
        let secret = match (&k.key, &k.key_env) {
            (Some(s), None) => s.clone(),
            // A value read from the environment is trimmed: a secret file or a shell
            // `export` often ends in a newline, and an untrimmed key never matches.
            (None, Some(var)) => {
                let v = std::env::var(var).map_err(|_| {
                    err(
                        at.clone(),
                        format!("key {label:?}: environment variable {var} is not set"),
                    )
                })?;
                let v = v.trim();
                if v.is_empty() {
                    return Err(err(
                        at,
                        format!(
                            "key {label:?}: environment variable {var} is empty (or only \
                             whitespace)"
                        ),
                    ));
                }
                v.to_owned()
            }
            _ => {
                return Err(err(
                    at,
                    format!("key {label:?}: set exactly one of `key` or `key_env`"),
                ));
            }
        };
        if secret.trim().is_empty() {
            return Err(err(at, format!("key {label:?}: the key is empty")));
        }
        // Limits are kept under the label, so no secret ever reaches a store key, a
        // usage record or a log line.
        let mut subject = tollgate_core::Subject::new(label.as_str());
        if let Some(t) = &k.tenant {
            if !raw.tenants.contains_key(t.get_ref()) {
                return Err(err(
                    Some(t.span()),
                    format!(
                        "unknown tenant {:?} (defined: {})",
                        t.get_ref(),
                        names(raw.tenants.keys())
                    ),
                ));
            }
            subject.tenant = Some(t.get_ref().as_str().into());
        }
        if let Some(p) = &k.policy {
            subject.policy = Some(policy_ref(p)?);
        }
        if let Some(s) = &k.subscription {
            let expires_at = match &s.expires_at {
                None => None,
                Some(t) => Some(
                    humantime::parse_rfc3339_weak(t)
                        .map_err(|e| {
                            err(
                                at.clone(),
                                format!("key {label:?}: subscription expires_at {t:?}: {e}"),
                            )
                        })?
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(tollgate_core::clock::millis)
                        .unwrap_or(0),
                ),
            };
            subject.subscription = Some(tollgate_core::Subscription {
                policy: policy_ref(&s.policy)?,
                expires_at,
                pay_as_you_go: s.pay_as_you_go,
            });
        }
        if keys.contains_key(&secret) {
            return Err(err(
                at,
                format!("key {label:?}: the same key is configured twice"),
            ));
        }
        let budgets: Vec<tollgate_core::Budget> = k
            .tenant
            .as_ref()
            .and_then(|t| raw.tenants.get(t.get_ref()).map(|tc| (t.get_ref(), tc)))
            .map(|(t, tc)| tenant_budgets(t, tc))
            .unwrap_or_default();
        keys.insert(
            secret,
            KeyEntry {
                label: label.as_str().into(),
                subject,
                spend_cap: k.spend_cap,
                billing: tollgate::BillingProfile {
                    spend_cap: k.spend_cap,
                    budgets: budgets.into(),
                    // A tenant of the configuration has a balance, hence a record: a
                    // missing one is data loss, a 503 (B7), never a zero balance.
                    tenant_expected: k
                        .tenant
                        .as_ref()
                        .is_some_and(|t| raw.tenants.contains_key(t.get_ref())),
                },
                weight: k
                    .tenant
                    .as_ref()
                    .and_then(|t| raw.tenants.get(t.get_ref()))
                    .and_then(|t| t.weight)
                    .unwrap_or(1),
                models: k.models.clone(),
                native_errors: k.errors == ErrorsConfig::Native,
            },
        );
    }

    for (vendor, l) in &raw.vendors {
        if !matches!(vendor.as_str(), "openai" | "anthropic" | "gemini") {
            return Err(err(
                spans.entry("vendors", vendor),
                format!("[vendors.{vendor}]: unknown vendor (openai, anthropic or gemini)"),
            ));
        }
        check_limits(l).map_err(|m| {
            err(
                spans.entry("vendors", vendor),
                format!("[vendors.{vendor}]: {m}"),
            )
        })?;
    }
    for (id, m) in &raw.models {
        if let Some(to) = &m.fallback {
            let at = spans.entry("models", id);
            if to == id || !raw.models.contains_key(to) {
                return Err(err(
                    at,
                    format!("[models.{id}]: fallback {to:?} must name another [models] entry"),
                ));
            }
        }
    }
    let mut channels = Vec::new();
    for (name, c) in &raw.channels {
        let at = spans.entry("channels", name);
        check_limits(&c.limits)
            .map_err(|m| err(at.clone(), format!("channel {name:?}: limits: {m}")))?;
        for (model, l) in &c.model_limits {
            if !c.models.iter().any(|m| m.get_ref() == model) {
                return Err(err(
                    at,
                    format!(
                        "channel {name:?}: model_limits names {model:?}, which the channel does not serve"
                    ),
                ));
            }
            check_limits(l).map_err(|m| {
                err(
                    at.clone(),
                    format!("channel {name:?}: model_limits.{model}: {m}"),
                )
            })?;
        }
        for m in &c.models {
            if !raw.models.contains_key(m.get_ref()) {
                return Err(err(
                    Some(m.span()),
                    format!(
                        "channel {name:?}: model {:?} has no [models] entry (price and capabilities)",
                        m.get_ref()
                    ),
                ));
            }
        }
        let ok_scheme = c.base_url.starts_with("http://")
            || c.base_url.starts_with("https://")
            || c.base_url.starts_with("fake://");
        if !ok_scheme {
            return Err(err(
                at,
                format!("channel {name:?}: base_url must be http(s)://…"),
            ));
        }
        let credential = match (&c.credential, &c.credential_env) {
            (Some(s), None) => Some(s.clone()),
            (None, Some(var)) => Some(std::env::var(var).map_err(|_| {
                err(
                    at.clone(),
                    format!("channel {name:?}: environment variable {var} is not set"),
                )
            })?),
            (None, None) => None,
            _ => {
                return Err(err(
                    at,
                    format!(
                        "channel {name:?}: set at most one of `credential` or `credential_env`"
                    ),
                ));
            }
        };
        channels.push(Channel {
            name: name.as_str().into(),
            config: c.clone(),
            credential,
        });
    }
    let server = &raw.server;
    let admin_token = match (&server.admin_token, &server.admin_token_env) {
        (Some(t), None) => Some(t.clone()),
        (None, Some(var)) => Some(std::env::var(var).map_err(|_| {
            err(
                spans.of("server.admin_token_env"),
                format!("server.admin_token_env: environment variable {var} is not set"),
            )
        })?),
        (None, None) => None,
        _ => {
            return Err(err(
                spans.of("server.admin_token"),
                "server: set at most one of `admin_token` or `admin_token_env`".into(),
            ));
        }
    };
    if admin_token.as_ref().is_some_and(|t| t.len() < 16) {
        return Err(err(
            spans.of("server.admin_token"),
            "server: the admin token must be at least 16 characters".into(),
        ));
    }
    let metrics_token = match (&server.metrics_token, &server.metrics_token_env) {
        (Some(t), None) => Some(t.clone()),
        (None, Some(var)) => Some(
            std::env::var(var)
                .map_err(|_| {
                    err(
                        spans.of("server.metrics_token_env"),
                        format!("server.metrics_token_env: environment variable {var} is not set"),
                    )
                })?
                .trim()
                .to_owned(),
        ),
        (None, None) => None,
        _ => {
            return Err(err(
                spans.of("server.metrics_token"),
                "server: set at most one of `metrics_token` or `metrics_token_env`".into(),
            ));
        }
    };
    if metrics_token.as_ref().is_some_and(|t| t.len() < 16) {
        return Err(err(
            spans.of("server.metrics_token"),
            "server: the metrics token must be at least 16 characters".into(),
        ));
    }
    Ok(Config {
        raw,
        keys,
        channels,
        source: None,
        admin_token,
        metrics_token,
    })
}

/// A limit of 0 would refuse every request: almost certainly a mistake.
fn check_limits(l: &UpstreamLimits) -> Result<(), String> {
    for (name, v) in [
        ("rpm", l.rpm),
        ("rph", l.rph),
        ("rpd", l.rpd),
        ("tpm", l.tpm),
        ("itpm", l.itpm),
        ("otpm", l.otpm),
    ] {
        if v == Some(0) {
            return Err(format!(
                "{name} = 0 would refuse every request; leave it out for no limit"
            ));
        }
    }
    Ok(())
}

impl Vendor {
    /// The vendor's name in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Vendor::Openai => "openai",
            Vendor::Anthropic => "anthropic",
            Vendor::Gemini => "gemini",
        }
    }
}

impl Channel {
    /// The non-secret credential id whose limits this channel shares.
    pub fn credential_id(&self) -> String {
        if let Some(id) = &self.config.credential_id {
            return id.clone();
        }
        match &self.credential {
            Some(secret) => {
                use std::hash::{Hash, Hasher};
                // SipHash with fixed keys: the same id on every instance, and a
                // 64-bit digest that does not reveal the secret.
                let mut h = std::hash::DefaultHasher::new();
                secret.hash(&mut h);
                format!("cred-{:016x}", h.finish())
            }
            None => format!("channel-{}", self.name),
        }
    }
}

/// The budgets of a tenant, with ids unique across tenants.
pub fn tenant_budgets(tenant: &str, t: &TenantConfig) -> Vec<tollgate_core::Budget> {
    t.budgets
        .iter()
        .map(|b| tollgate_core::Budget {
            id: format!("tenant:{tenant}:{}", b.name).into(),
            limit: b.limit,
            period_ms: b.period.map(|p| tollgate_core::clock::millis(p.0)),
        })
        .collect()
}

/// The budget of a task.
pub fn task_budget(name: &str, t: &TaskConfig) -> tollgate_core::Budget {
    tollgate_core::Budget {
        id: format!("task:{name}").into(),
        limit: t.budget,
        period_ms: t.period.map(|p| tollgate_core::clock::millis(p.0)),
    }
}

fn names<'a>(it: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<&str> = it.map(String::as_str).collect();
    if v.is_empty() {
        "none".to_owned()
    } else {
        v.join(", ")
    }
}

/// Where the keys of the configuration text are, from toml's own parser: an error
/// about a setting points at the line of that setting, not at the first place its
/// name appears in the text (`max_wait` is also in `slot_max_wait`).
struct Spans<'i>(Option<toml::de::DeTable<'i>>);

impl<'i> Spans<'i> {
    fn new(text: &'i str) -> Self {
        Self(toml::de::DeTable::parse(text).ok().map(|t| t.into_inner()))
    }

    /// The span of the key at `path` (`"queue.max_wait"`: the key `max_wait` of the
    /// table `queue`), if the text sets it.
    fn of(&self, path: &str) -> Option<std::ops::Range<usize>> {
        self.at(path.split('.'))
    }

    /// The span of entry `name` of the table `section` (`[section.name]`, or
    /// `name = { … }` inline), for errors about a whole entry.
    fn entry(&self, section: &str, name: &str) -> Option<std::ops::Range<usize>> {
        self.at([section, name])
    }

    fn at<'p>(&self, path: impl IntoIterator<Item = &'p str>) -> Option<std::ops::Range<usize>> {
        let mut table = self.0.as_ref();
        let mut span = None;
        for seg in path {
            let (k, v) = table?.get_key_value(seg)?;
            span = Some(k.span());
            table = v.get_ref().as_table();
        }
        span
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[policies.basic]
concurrency = 2
requests = [{ window = "1m", limit = 60 }, { window = "1d", limit = 5000 }]
tokens = [{ window = "1m", limit = 100000 }]

[tenants.acme]
balance = 1000

[keys.alice]
key = "sk-alice"
tenant = "acme"
policy = "basic"
subscription = { policy = "basic", expires_at = "2030-01-01T00:00:00Z", pay_as_you_go = true }

[channels.one]
vendor = "openai"
base_url = "http://127.0.0.1:9"
credential = "sk-upstream"
models = ["gpt-x"]

[models.gpt-x]
price = { input_per_mtok = 10, output_per_mtok = 20 }
"#;

    #[test]
    fn i14_8_metrics_token_is_checked_like_the_admin_token() {
        let c = Config::parse("[server]\nmetrics_token = \"metrics-0123456789\"\n").unwrap();
        assert_eq!(c.metrics_token.as_deref(), Some("metrics-0123456789"));
        assert!(!format!("{c:?}").contains("metrics-0123456789"), "redacted");
        assert_eq!(
            Config::parse("").unwrap().metrics_token,
            None,
            "open by default"
        );
        for (text, reason) in [
            ("[server]\nmetrics_token = \"short\"\n", "at least 16"),
            (
                "[server]\nmetrics_token = \"metrics-0123456789\"\nmetrics_token_env = \"X\"\n",
                "at most one",
            ),
            (
                "[server]\nmetrics_token_env = \"TOLLGATE_TEST_UNSET_METRICS_TOKEN\"\n",
                "is not set",
            ),
        ] {
            let e = Config::parse(text).expect_err(text);
            assert!(e.reason.contains(reason), "{text}: {e}");
            assert_eq!(e.line, Some(2), "{text}: {e}");
        }
    }

    #[test]
    fn p3_good_file_resolves() {
        let c = Config::parse(GOOD).unwrap();
        let k = &c.keys["sk-alice"];
        assert_eq!(&*k.label, "alice");
        assert_eq!(k.subject.policy.as_ref().unwrap().requests.len(), 2);
        let sub = k.subject.subscription.as_ref().unwrap();
        assert!(sub.pay_as_you_go);
        assert_eq!(sub.expires_at, Some(1_893_456_000_000));
        assert_eq!(c.channels[0].credential.as_deref(), Some("sk-upstream"));
    }

    #[test]
    fn p3_syntax_error_names_the_line() {
        let bad = GOOD.replace("concurrency = 2", "concurrency = \"two\"");
        let e = Config::parse(&bad).unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.to_string().contains("invalid type"), "{e}");
    }

    #[test]
    fn p3_unknown_policy_reference_names_its_line() {
        let bad = GOOD.replace("policy = \"basic\"\n", "policy = \"gold\"\n");
        let e = Config::parse(&bad).unwrap_err();
        assert_eq!(e.line, Some(13), "{e}");
        assert!(e.reason.contains("unknown policy \"gold\""), "{e}");
    }

    #[test]
    fn p3_unknown_field_and_bad_duration_are_refused() {
        let e = Config::parse(&GOOD.replace("concurrency = 2", "concurency = 2")).unwrap_err();
        assert!(e.reason.contains("unknown field"), "{e}");
        let e = Config::parse(&GOOD.replace("\"1d\"", "\"1 fortnight\"")).unwrap_err();
        assert!(e.reason.contains("invalid duration"), "{e}");
        assert_eq!(e.line, Some(4));
    }

    #[test]
    fn p3_channel_model_needs_a_price_entry() {
        let e = Config::parse(&GOOD.replace("models = [\"gpt-x\"]", "models = [\"gpt-y\"]"))
            .unwrap_err();
        assert!(e.reason.contains("gpt-y"), "{e}");
        assert_eq!(e.line, Some(20));
    }

    #[test]
    fn p3_missing_env_credential_is_reported() {
        let e = Config::parse(&GOOD.replace(
            "credential = \"sk-upstream\"",
            "credential_env = \"TOLLGATE_TEST_SURELY_UNSET\"",
        ))
        .unwrap_err();
        assert!(e.reason.contains("TOLLGATE_TEST_SURELY_UNSET"), "{e}");
        assert_eq!(e.line, Some(16));
    }

    #[test]
    fn p3_an_error_points_at_its_own_setting_not_at_a_name_it_shares() {
        // `max_wait` is also part of `slot_max_wait`, `deadline` of `default_deadline`,
        // `admin_token` of `admin_token_env`: each error names the line of the setting
        // that is wrong.
        let text = format!(
            "[limits]\nslot_max_wait = \"1s\"\n\n[queue]\ndefault_deadline = \"1s\"\nmax_wait = \"1000000h\"\n{GOOD}"
        );
        let e = Config::parse(&text).unwrap_err();
        assert!(e.reason.contains("queue.max_wait"), "{e}");
        assert_eq!(e.line, Some(6), "{e}");
        let text =
            format!("[queue]\ndefault_deadline = \"1s\"\n\n[store]\ndeadline = \"0s\"\n{GOOD}");
        let e = Config::parse(&text).unwrap_err();
        assert!(e.reason.contains("store.deadline"), "{e}");
        assert_eq!(e.line, Some(5), "{e}");
        let text = format!("# admin_token is set below\n[server]\nadmin_token = \"short\"\n{GOOD}");
        let e = Config::parse(&text).unwrap_err();
        assert!(e.reason.contains("at least 16"), "{e}");
        assert_eq!(e.line, Some(3), "{e}");
    }

    #[test]
    fn p3_values_that_would_break_limits_are_refused() {
        let e = Config::parse(&format!("[limits]\nlease_ttl = \"0s\"\n{GOOD}")).unwrap_err();
        assert!(e.reason.contains("lease_ttl"), "{e}");
        assert_eq!(e.line, Some(2));
        let e = Config::parse(&format!("[queue]\nmax_wait = \"1000000h\"\n{GOOD}")).unwrap_err();
        assert!(e.reason.contains("max_wait"), "{e}");
        let e =
            Config::parse(&format!("[store]\nbilling_failure = \"local\"\n{GOOD}")).unwrap_err();
        assert!(e.reason.contains("billing_failure"), "{e}");
    }

    /// E3 (never a credential) for `Debug`: `{:?}` of the configuration, a channel and
    /// the key table shows their structure but no client key, provider credential or
    /// admin token.
    #[test]
    fn e3_debug_of_config_channel_and_key_table_redacts_secrets() {
        let text = format!("[server]\nadmin_token = \"admin-secret-0123456789\"\n{GOOD}");
        let c = Config::parse(&text).unwrap();
        let secrets = ["sk-alice", "sk-upstream", "admin-secret-0123456789"];
        let table = crate::auth::KeyTable::new(c.keys.clone(), []);
        for (what, dbg) in [
            ("config", format!("{c:?}")),
            ("config (alternate)", format!("{c:#?}")),
            ("channel", format!("{:?}", c.channels[0])),
            ("channel config", format!("{:?}", c.raw.channels["one"])),
            ("key config", format!("{:?}", c.raw.keys["alice"])),
            ("server config", format!("{:?}", c.raw.server)),
            ("key table", format!("{table:?}")),
        ] {
            for s in secrets {
                assert!(!dbg.contains(s), "{what} Debug shows {s:?}: {dbg}");
            }
            assert!(
                dbg.contains(REDACTED) || what == "key table",
                "{what}: {dbg}"
            );
        }
        let dbg = format!("{c:?}");
        for part in [
            "Config",
            "KeyEntry",
            "label: \"alice\"",
            "ChannelConfig",
            "http://127.0.0.1:9",
            "admin_token: Some(\"<redacted>\")",
        ] {
            assert!(dbg.contains(part), "{part:?} missing: {dbg}");
        }
        let dbg = format!("{:?}", c.channels[0]);
        assert!(
            dbg.contains("name: \"one\"") && dbg.contains("credential: Some(\"<redacted>\")"),
            "{dbg}"
        );
        let dbg = format!("{table:?}");
        assert!(
            dbg.contains("KeyTable") && dbg.contains("label: \"alice\""),
            "{dbg}"
        );
    }

    /// A client key read from the environment is trimmed of surrounding whitespace (a
    /// trailing newline from a secret file would otherwise never match), and one that
    /// is empty after trimming is a config error naming the variable and the key's line.
    #[test]
    fn p3_client_key_from_env_is_trimmed_or_refused_when_blank() {
        let (set, blank) = (
            "TOLLGATE_TEST_KEY_ENV_TRIMMED",
            "TOLLGATE_TEST_KEY_ENV_BLANK",
        );
        // SAFETY: only this test sets these variables, and the other tests of this
        // binary read the environment only through `std::env`, which locks it.
        unsafe {
            std::env::set_var(set, "  sk-from-env \n");
            std::env::set_var(blank, " \t\n");
        }
        let with = |var: &str| GOOD.replace("key = \"sk-alice\"", &format!("key_env = \"{var}\""));
        let c = Config::parse(&with(set)).unwrap();
        assert_eq!(c.keys.keys().collect::<Vec<_>>(), ["sk-from-env"]);
        let table = crate::auth::KeyTable::new(c.keys.clone(), []);
        let mut h = http::HeaderMap::new();
        h.insert("authorization", "Bearer sk-from-env".parse().unwrap());
        let uri: http::Uri = "/v1/chat/completions".parse().unwrap();
        assert_eq!(&*table.identify(&h, &uri).unwrap().label, "alice");

        let e = Config::parse(&with(blank)).unwrap_err();
        assert!(
            e.reason.contains(blank) && e.reason.contains("empty"),
            "{e}"
        );
        assert_eq!(e.line, Some(10), "{e}");
    }

    /// Item 7 of issue 14: billing is fail-closed only; `billing_failure = "open"` is
    /// refused at start with the file, the line of the setting and the reason.
    #[test]
    fn b5_billing_failure_open_is_a_config_error() {
        let dir = std::env::temp_dir().join(format!("tollgate-cfg-b5-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("open.toml");
        std::fs::write(
            &f,
            format!("[store]\ndeadline = \"20ms\"\nbilling_failure = \"open\"\n{GOOD}"),
        )
        .unwrap();
        let e = Config::load(&f).unwrap_err();
        assert_eq!(e.file.as_deref(), Some(f.as_path()));
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.reason.contains("billing_failure"), "{e}");
        assert!(e.reason.contains("fail-closed"), "{e}");
        let s = e.to_string();
        assert!(s.starts_with(&format!("{}:3: ", f.display())), "{s}");
        // `closed`, written or by default, is accepted.
        Config::parse(&format!("[store]\nbilling_failure = \"closed\"\n{GOOD}")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn p3_error_display_has_file_line_reason() {
        let dir = std::env::temp_dir().join(format!("tollgate-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("bad.toml");
        std::fs::write(&f, "[server]\nlisten = 5\n").unwrap();
        let e = Config::load(&f).unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with(&format!("{}:2: ", f.display())), "{s}");
    }
}
