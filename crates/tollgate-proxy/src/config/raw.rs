//! The file as written: the serde structs of every section, with their defaults, and
//! `Debug` that never shows a secret.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tollgate_core::{Dialect, Money, Price};
use toml::Spanned;

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

    /// The vendor's name in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Vendor::Openai => "openai",
            Vendor::Anthropic => "anthropic",
            Vendor::Gemini => "gemini",
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
    /// Channel capacity when the store fails (D11): `open` (default: admit without a
    /// capacity lease) or `closed` (503 + Retry-After); `local` is a configuration
    /// error (capacity leases have no in-process fallback).
    pub capacity_failure: FailureModeConfig,
    /// Gateway instances sharing the store: `local` mode divides limits by it.
    pub instances: u32,
    /// Redis: quota blocks for slots, windows, provider windows and capacity (default
    /// on; `tollgate_core::blocks`).
    pub blocks: bool,
    /// Redis: billing quota blocks too (default: on wherever `blocks` is; `true` with
    /// `blocks = false` is a configuration error). See [`StoreConfig::money_blocks_on`].
    pub money_blocks: Option<bool>,
    /// Redis: replicas that must acknowledge every write (`WAIT`) before the gateway
    /// relies on it (D10; default 0).
    pub replica_acks: u32,
}

impl StoreConfig {
    /// Whether billing quota blocks are on: with quota blocks, unless turned off.
    pub fn money_blocks_on(&self) -> bool {
        self.blocks && self.money_blocks.unwrap_or(true)
    }
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
            capacity_failure: FailureModeConfig::Open,
            instances: 1,
            blocks: true,
            money_blocks: None,
            replica_acks: 0,
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
        let mut c = tollgate::failover::FailoverConfig::default();
        c.max_attempts = self.max_attempts;
        c.first_chunk_timeout = self.first_chunk_timeout.0;
        c.backoff_base = self.backoff_base.0;
        c.backoff_cap = self.backoff_cap.0;
        c.max_wait = self.max_wait.0;
        c.default_deadline = default_deadline;
        c.budget_ttl = self.budget_ttl.0;
        c.budget_min_per_sec = self.retry_min_per_sec;
        c.budget_retry_ratio = self.retry_ratio;
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
            lease_ttl: Span(tollgate::slot::DEFAULT_LEASE_TTL),
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
    pub telemetry: TelemetryConfig,
}

/// How a secret appears in `Debug` output: present or not, never its value.
pub(crate) const REDACTED: &str = "<redacted>";

pub(super) fn redact(secret: &Option<String>) -> Option<&'static str> {
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

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::config::tests::GOOD;

    #[test]
    fn p3_unknown_field_and_bad_duration_are_refused() {
        let e = Config::parse(&GOOD.replace("concurrency = 2", "concurency = 2")).unwrap_err();
        assert!(e.reason.contains("unknown field"), "{e}");
        let e = Config::parse(&GOOD.replace("\"1d\"", "\"1 fortnight\"")).unwrap_err();
        assert!(e.reason.contains("invalid duration"), "{e}");
        assert_eq!(e.line, Some(4));
    }
}

/// `[telemetry]`: where and how the spans are exported (read at start; a reload keeps
/// the running exporter).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The OTLP/gRPC collector, e.g. `http://127.0.0.1:4317` (`https://` with the
    /// webpki roots). Unset: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`; with neither, nothing is exported.
    pub otlp_endpoint: Option<Spanned<String>>,
    /// `service.name` of the exported spans. Unset: `OTEL_SERVICE_NAME`, else `tollgate`.
    pub service_name: Option<String>,
    /// Share of traces kept, 0 to 1 (default 1), for requests without a parent; a
    /// request whose client sent a `traceparent` follows the client's decision.
    pub sampling_ratio: Option<Spanned<f64>>,
    /// Longest wait for the collector per export (default 10 s, at most 60 s).
    pub export_timeout: Option<Spanned<Span>>,
    /// Join the client's trace when a request carries a W3C `traceparent` (default
    /// true). With `false` every request starts a trace of its own.
    pub accept_traceparent: bool,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: None,
            sampling_ratio: None,
            export_timeout: None,
            accept_traceparent: true,
        }
    }
}

// The ratio is checked to be a number (never NaN) before a configuration is built.
impl Eq for TelemetryConfig {}
