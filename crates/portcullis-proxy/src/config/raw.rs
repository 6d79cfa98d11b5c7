//! The file as written: the serde structs of the sections that need resolving (keys and
//! their secrets, channels and their credentials, `[server]` and its tokens, policies,
//! tenants, tasks, `[failover]`, `[telemetry]`), with their defaults. Private to the
//! configuration: the rest of the crate reads the resolved settings (`settings.rs`),
//! never this shape.
//!
//! What holds a secret as written (a client key, a provider credential, the admin or
//! metrics token) has no `Debug`: nothing can print it, in a log line or a panic
//! message (E3); the resolved types that keep a secret show it redacted.

use super::settings::{
    ForwardingSettings, LimitSettings, ModelSettings, QueueSettings, StoreSettings, UpstreamLimits,
    Vendor,
};
use super::span::Span;
use portcullis_core::Money;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

/// One tier in the file: `{ window = "1m", limit = 60 }`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(super) struct TierConfig {
    /// Window length.
    pub(super) window: Span,
    /// Units per window.
    pub(super) limit: u64,
}

/// A policy (C1–C5, W1–W10).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub(super) struct PolicyConfig {
    /// In-flight requests; 0 = unlimited.
    pub(super) concurrency: u32,
    /// Request tiers.
    pub(super) requests: Vec<TierConfig>,
    /// Token tiers.
    pub(super) tokens: Vec<TierConfig>,
    /// Image tiers.
    pub(super) images: Vec<TierConfig>,
    /// Video tiers.
    pub(super) videos: Vec<TierConfig>,
    /// Cumulative spend cap in minor units.
    pub(super) amount_cap: Option<Money>,
    /// Requests started in the last 60 s.
    pub(super) rolling_rpm: Option<u32>,
}

/// A subscription of a key.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(super) struct SubscriptionConfig {
    /// Name of the plan's policy.
    pub(super) policy: Spanned<String>,
    /// RFC 3339 end of the subscription, e.g. `2027-01-01T00:00:00Z`.
    #[serde(default)]
    pub(super) expires_at: Option<String>,
    /// Fall through to the key's own policy and bill the balance when the plan is used up.
    #[serde(default)]
    pub(super) pay_as_you_go: bool,
}

/// An API key of a client.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(super) struct KeyConfig {
    /// The key itself (demo files only)…
    #[serde(default)]
    pub(super) key: Option<String>,
    /// …or the environment variable holding it.
    #[serde(default)]
    pub(super) key_env: Option<String>,
    /// Tenant the key belongs to.
    #[serde(default)]
    pub(super) tenant: Option<Spanned<String>>,
    /// The key's own policy.
    #[serde(default)]
    pub(super) policy: Option<Spanned<String>>,
    /// A subscription.
    #[serde(default)]
    pub(super) subscription: Option<SubscriptionConfig>,
    /// Spend cap in minor units.
    #[serde(default)]
    pub(super) spend_cap: Option<Money>,
    /// Models the key may use; empty = all.
    #[serde(default)]
    pub(super) models: Vec<String>,
    /// The data boundary (X4): the vendors the key's requests may be sent to; absent =
    /// every vendor (within its tenant's boundary).
    #[serde(default)]
    pub(super) allowed_vendors: Option<Vec<super::Vendor>>,
    /// The dialect of the key's rejections: `"route"` (default: the dialect of the route
    /// it calls) or `"native"` (the native body and codes on every route, E1).
    #[serde(default)]
    pub(super) errors: ErrorsConfig,
}

/// Whose dialect a key's rejections speak.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum ErrorsConfig {
    /// The dialect of the route called.
    #[default]
    Route,
    /// The native body and codes, on every route.
    Native,
}

/// A money budget (B3).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(super) struct BudgetConfig {
    /// Name, unique within its tenant.
    pub(super) name: String,
    /// Most money per period (minor units).
    pub(super) limit: Money,
    /// Period, anchored at first use; absent = never resets.
    #[serde(default)]
    pub(super) period: Option<Span>,
}

/// `[billing]`: what a request holds while it runs (B8). A value of the wrong type is
/// refused naming its setting (`billing.reserve_cap: invalid type …`), like the checks
/// of `check.rs`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(super) struct BillingConfig {
    /// What the hold is made of: `"upper_bound"` (default) or `"estimate"`.
    #[serde(deserialize_with = "billing_reserve")]
    pub(super) reserve: ReserveConfig,
    /// Under `"estimate"`: the share of the max output expected, 0 to 1 (default 0.25).
    #[serde(deserialize_with = "billing_expected_output_share")]
    pub(super) expected_output_share: Option<f64>,
    /// Under `"estimate"`: the output tokens per choice expected (instead of a share).
    #[serde(deserialize_with = "billing_expected_output_tokens")]
    pub(super) expected_output_tokens: Option<u64>,
    /// The most money one request holds (minor units, at least 1); absent = no cap.
    #[serde(deserialize_with = "billing_reserve_cap")]
    pub(super) reserve_cap: Option<Money>,
    /// What a stream cut after its content went out is charged (B7).
    pub(super) cut_streams: super::settings::CutStreamsConfig,
    /// How long an unknown outcome waits before its provider is asked (B7).
    #[serde(deserialize_with = "super::span::duration")]
    pub(super) unknown_grace: std::time::Duration,
    /// How much longer the provider is asked before `unknown_outcome` applies.
    #[serde(deserialize_with = "super::span::duration")]
    pub(super) unknown_give_up: std::time::Duration,
    /// What becomes of a pending attempt nothing answered for.
    pub(super) unknown_outcome: super::settings::UnknownOutcomeConfig,
    /// How often the ledger's pending attempts are looked at.
    #[serde(deserialize_with = "super::span::duration")]
    pub(super) resolve_interval: std::time::Duration,
    /// How long after an automatic charge its provider is still asked to correct it
    /// (0 = never).
    #[serde(deserialize_with = "super::span::duration")]
    pub(super) correct_within: std::time::Duration,
}

impl Default for BillingConfig {
    fn default() -> Self {
        use super::settings::{
            DEFAULT_CORRECT_WITHIN, DEFAULT_RESOLVE_INTERVAL, DEFAULT_UNKNOWN_GIVE_UP,
            DEFAULT_UNKNOWN_GRACE,
        };
        Self {
            reserve: ReserveConfig::default(),
            expected_output_share: None,
            expected_output_tokens: None,
            reserve_cap: None,
            cut_streams: Default::default(),
            unknown_grace: DEFAULT_UNKNOWN_GRACE,
            unknown_give_up: DEFAULT_UNKNOWN_GIVE_UP,
            unknown_outcome: Default::default(),
            resolve_interval: DEFAULT_RESOLVE_INTERVAL,
            correct_within: DEFAULT_CORRECT_WITHIN,
        }
    }
}

/// `[billing] reserve`.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(super) enum ReserveConfig {
    /// The money upper bound.
    #[default]
    UpperBound,
    /// The expected cost.
    Estimate,
}

/// The value of setting `name`, its errors prefixed with the name.
fn named<'de, D, T>(d: D, name: &str) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let v = toml::Value::deserialize(d)?;
    v.try_into()
        .map_err(|e: toml::de::Error| serde::de::Error::custom(format!("{name}: {}", e.message())))
}

fn billing_reserve<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ReserveConfig, D::Error> {
    named(d, "billing.reserve")
}

fn billing_expected_output_share<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<f64>, D::Error> {
    named(d, "billing.expected_output_share").map(Some)
}

fn billing_expected_output_tokens<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<u64>, D::Error> {
    named(d, "billing.expected_output_tokens").map(Some)
}

fn billing_reserve_cap<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Money>, D::Error> {
    named(d, "billing.reserve_cap").map(Some)
}

/// A tenant (account).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub(super) struct TenantConfig {
    /// Starting balance in minor units (seeded once: a running balance is kept).
    pub(super) balance: Money,
    /// Weight in the capacity queue's fair share.
    pub(super) weight: Option<u32>,
    /// Money budgets every request of the tenant draws on.
    pub(super) budgets: Vec<BudgetConfig>,
    /// The data boundary (X4): the vendors the tenant's requests may be sent to;
    /// absent = every vendor.
    pub(super) allowed_vendors: Option<Vec<super::Vendor>>,
}

/// A task budget, chosen per request with the `x-portcullis-task` header (B3), and the
/// tenants it belongs to (E4).
///
/// A task names its tenant (`tenant = "acme"`) or tenants (`tenants = ["a", "b"]`): only
/// keys of those tenants may name it, and a key of another tenant gets the very answer an
/// unknown name gets (403 40301), so names cannot be probed. A task that names none is
/// shared: any key may name it (the behaviour before tasks had tenants; a warning is
/// logged at load). Budgets are kept per tenant (D3): a task of two tenants is two budgets
/// of the same limit, one in each tenant's books.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(super) struct TaskConfig {
    /// Most money per period (minor units).
    pub(super) budget: Money,
    /// Period, anchored at first use; absent = never resets.
    #[serde(default)]
    pub(super) period: Option<Span>,
    /// The tenant the task belongs to.
    #[serde(default)]
    pub(super) tenant: Option<Spanned<String>>,
    /// The tenants the task belongs to (with or instead of `tenant`).
    #[serde(default)]
    pub(super) tenants: Vec<Spanned<String>>,
}

impl TaskConfig {
    /// The tenants whose keys may name the task; empty = any key (a shared task).
    pub(super) fn owners(&self) -> impl Iterator<Item = &str> {
        self.tenant
            .iter()
            .chain(&self.tenants)
            .map(|t| t.get_ref().as_str())
    }
}

/// One upstream link (a "channel").
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(super) struct ChannelConfig {
    /// Provider family; also its API format.
    pub(super) vendor: Vendor,
    /// Base URL, e.g. `https://api.openai.com`. The demo writes `fake://` for the
    /// bundled fake upstream.
    pub(super) base_url: String,
    /// Environment variable holding the provider credential.
    #[serde(default)]
    pub(super) credential_env: Option<String>,
    /// The credential itself (demo and tests only; prefer `credential_env`).
    #[serde(default)]
    pub(super) credential: Option<String>,
    /// Models served.
    pub(super) models: Vec<Spanned<String>>,
    /// The id this channel's provider knows a served model by, when it is not the
    /// public name (X1).
    #[serde(default)]
    pub(super) upstream_models: BTreeMap<String, String>,
    /// Failover group.
    #[serde(default = "default_group")]
    pub(super) group: String,
    /// Share of new conversations.
    #[serde(default = "one")]
    pub(super) weight: u32,
    /// Most in-flight requests (0 = unlimited).
    #[serde(default)]
    pub(super) capacity: u32,
    /// Limits of the credential.
    #[serde(default)]
    pub(super) limits: UpstreamLimits,
    /// Limits per model on this credential.
    #[serde(default)]
    pub(super) model_limits: BTreeMap<String, UpstreamLimits>,
    /// A non-secret name of the credential: channels with the same one share its
    /// limits. Default: a hash of the credential (channels holding the same secret
    /// share), or the channel name when it has none.
    #[serde(default)]
    pub(super) credential_id: Option<String>,
}

fn default_group() -> String {
    "default".to_owned()
}
fn one() -> u32 {
    1
}

/// Server settings.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub(super) struct ServerConfig {
    /// Listen address.
    pub(super) listen: SocketAddr,
    /// Largest request body accepted (413 beyond).
    pub(super) max_body_bytes: usize,
    /// Upstream response-head timeout.
    pub(super) upstream_timeout: Span,
    /// Longest silence of an upstream answer's body before it is cut (the attempt's
    /// outcome becomes unknown).
    pub(super) upstream_idle_timeout: Span,
    /// Longest time to receive a request body (slow clients get 408), default 30 s.
    pub(super) body_read_timeout: Span,
    /// Longest time to receive a request head (slower connections are closed),
    /// default 10 s.
    pub(super) header_read_timeout: Span,
    /// JSON-lines file every settled or pending attempt is appended to (B6).
    pub(super) usage_log: Option<PathBuf>,
    /// Environment variable holding the admin token (the `/admin/*` endpoints are
    /// off without a token).
    pub(super) admin_token_env: Option<String>,
    /// The admin token itself (demo and tests only; prefer `admin_token_env`).
    pub(super) admin_token: Option<String>,
    /// Longest time a client may leave a response unread (the gateway has a frame
    /// for it and the client takes none): the response is then cut and everything
    /// held for it released or settled as for a client that went away (L3), default
    /// 60 s.
    pub(super) stall_timeout: Span,
    /// Longest life of a response body, read or not, default 30 min.
    pub(super) max_response_lifetime: Span,
    /// Most connections served at once; beyond it the gateway stops accepting (new
    /// connections wait in the listen backlog) until one closes, default 4096.
    pub(super) max_connections: usize,
    /// An HTTP/2 connection with no open stream this long is closed (GOAWAY),
    /// default 120 s. (An idle HTTP/1 connection is closed by `header_read_timeout`.)
    pub(super) h2_idle_timeout: Span,
    /// Environment variable holding the metrics token: with one, `GET /metrics` needs
    /// `Authorization: Bearer <token>` (401 otherwise); without, it is open.
    pub(super) metrics_token_env: Option<String>,
    /// The metrics token itself (demo and tests only; prefer `metrics_token_env`).
    pub(super) metrics_token: Option<String>,
    /// On a graceful shutdown (`SIGTERM` / `SIGINT` to the `portcullis` binary), how long
    /// requests in flight (streams included) may go on after the gateway stopped
    /// accepting; `"0s"` stops at once. Default 30 s.
    pub(super) drain_timeout: Span,
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

/// Failover settings (F1–F8).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(super) struct FailoverConfig {
    /// Most attempts per request, default 3 (1 = no failover).
    pub(super) max_attempts: u32,
    /// Longest wait for a stream's first content chunk, default 30 s.
    pub(super) first_chunk_timeout: Span,
    /// Backoff between attempts without a Retry-After: base and cap.
    pub(super) backoff_base: Span,
    /// See `backoff_base`.
    pub(super) backoff_cap: Span,
    /// Longest wait for a channel to recover before a retry, default 10 s.
    pub(super) max_wait: Span,
    /// Share of requests that may be retried over `budget_ttl` (F7), default 0.2.
    pub(super) retry_ratio: f32,
    /// Retries always allowed per second, default 10.
    pub(super) retry_min_per_sec: u32,
    /// How long a request counts toward the retry budget, default 10 s (1–60 s).
    pub(super) budget_ttl: Span,
    /// How long an open circuit stays open before probes (F8), default 10 s.
    pub(super) circuit_open: Span,
    /// Outcomes needed in a channel's 30 s window before its error ratio can open
    /// the circuit, default 10.
    pub(super) circuit_min_requests: u32,
}

impl Default for FailoverConfig {
    fn default() -> Self {
        let d = portcullis::failover::FailoverConfig::default();
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

impl FailoverConfig {
    /// As the layer's settings, with the queue's default deadline.
    pub(super) fn to_layer(
        &self,
        default_deadline: Option<Duration>,
    ) -> portcullis::failover::FailoverConfig {
        let mut c = portcullis::failover::FailoverConfig::default();
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

/// The file as written.
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawConfig {
    /// Server settings.
    pub(super) server: ServerConfig,
    /// Store settings.
    pub(super) store: StoreSettings,
    /// The records database.
    pub(super) database: super::settings::DatabaseSettings,
    /// User-policy layer settings.
    pub(super) limits: LimitSettings,
    /// Capacity queue settings.
    pub(super) queue: QueueSettings,
    /// Failover settings.
    pub(super) failover: FailoverConfig,
    /// What a request holds while it runs (B8), and what a cut stream is charged (B7).
    pub(super) billing: BillingConfig,
    /// Policies by name.
    pub(super) policies: BTreeMap<String, PolicyConfig>,
    /// Tenants by name.
    pub(super) tenants: BTreeMap<String, TenantConfig>,
    /// API keys by a label.
    pub(super) keys: BTreeMap<String, KeyConfig>,
    /// Channels by name.
    pub(super) channels: BTreeMap<String, ChannelConfig>,
    /// Models by id.
    pub(super) models: BTreeMap<String, ModelSettings>,
    /// Task budgets by name.
    pub(super) tasks: BTreeMap<String, TaskConfig>,
    /// Account-wide upstream limits per vendor (`openai`, `anthropic`, `gemini`; U1).
    pub(super) vendors: BTreeMap<String, UpstreamLimits>,
    /// Header allow-lists both ways (P2).
    pub(super) forwarding: ForwardingSettings,
    /// Trace export (`crate::telemetry`).
    pub(super) telemetry: TelemetryConfig,
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

    #[test]
    fn b7_cut_streams_is_charge_by_default_and_a_bad_value_is_refused() {
        use crate::config::CutStreamsConfig;
        let c = Config::parse(GOOD).unwrap();
        assert_eq!(c.billing().cut_streams, CutStreamsConfig::Charge);
        let c = Config::parse(&format!("[billing]\ncut_streams = \"hold\"\n{GOOD}")).unwrap();
        assert_eq!(c.billing().cut_streams, CutStreamsConfig::Hold);
        let e = Config::parse(&format!("[billing]\ncut_streams = \"maybe\"\n{GOOD}")).unwrap_err();
        assert!(e.reason.contains("unknown variant `maybe`"), "{e}");
        assert_eq!(e.line, Some(2), "{e}");
    }

    #[test]
    fn b7_unknown_outcomes_are_held_after_two_minutes_and_an_hour_by_default_and_bad_values_are_refused()
     {
        use crate::config::UnknownOutcomeConfig;
        use std::time::Duration;
        let b = *Config::parse(GOOD).unwrap().billing();
        assert_eq!(
            (
                b.unknown_grace,
                b.unknown_give_up,
                b.unknown_outcome,
                b.resolve_interval
            ),
            (
                Duration::from_secs(120),
                Duration::from_secs(3600),
                UnknownOutcomeConfig::Hold,
                Duration::from_secs(15)
            )
        );
        let c = Config::parse(&format!(
            "[billing]\nunknown_grace = \"300ms\"\nunknown_give_up = \"0s\"\nunknown_outcome = \"upper_bound\"\nresolve_interval = \"50ms\"\n{GOOD}"
        ))
        .unwrap();
        let b = c.billing();
        assert_eq!(
            (
                b.unknown_grace,
                b.unknown_give_up,
                b.unknown_outcome,
                b.resolve_interval
            ),
            (
                Duration::from_millis(300),
                Duration::ZERO,
                UnknownOutcomeConfig::UpperBound,
                Duration::from_millis(50)
            )
        );
        let e =
            Config::parse(&format!("[billing]\nunknown_outcome = \"guess\"\n{GOOD}")).unwrap_err();
        assert!(e.reason.contains("unknown variant `guess`"), "{e}");
        let e = Config::parse(&format!("[billing]\nunknown_grace = \"soon\"\n{GOOD}")).unwrap_err();
        assert!(e.reason.contains("invalid duration"), "{e}");
        let e =
            Config::parse(&format!("[billing]\nresolve_interval = \"0s\"\n{GOOD}")).unwrap_err();
        assert!(e.reason.contains("billing.resolve_interval"), "{e}");
    }

    #[test]
    fn b7_corrections_are_asked_for_a_day_by_default_and_zero_turns_them_off() {
        use std::time::Duration;
        let b = *Config::parse(GOOD).unwrap().billing();
        assert_eq!(b.correct_within, Duration::from_secs(24 * 3600));
        let c = Config::parse(&format!("[billing]\ncorrect_within = \"0s\"\n{GOOD}")).unwrap();
        assert_eq!(c.billing().correct_within, Duration::ZERO);
        let c = Config::parse(&format!("[billing]\ncorrect_within = \"2h\"\n{GOOD}")).unwrap();
        assert_eq!(c.billing().correct_within, Duration::from_secs(7200));
        let e = Config::parse(&format!("[billing]\ncorrect_within = \"31d\"\n{GOOD}")).unwrap_err();
        assert!(e.reason.contains("billing.correct_within"), "{e}");
        let e =
            Config::parse(&format!("[billing]\ncorrect_within = \"later\"\n{GOOD}")).unwrap_err();
        assert!(e.reason.contains("invalid duration"), "{e}");
    }
}

/// `[telemetry]`: where and how the spans are exported (read at start; a reload keeps
/// the running exporter).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(super) struct TelemetryConfig {
    /// The OTLP/gRPC collector, e.g. `http://127.0.0.1:4317` (`https://` with the
    /// webpki roots). Unset: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`; with neither, nothing is exported.
    pub(super) otlp_endpoint: Option<Spanned<String>>,
    /// `service.name` of the exported spans. Unset: `OTEL_SERVICE_NAME`, else `portcullis`.
    pub(super) service_name: Option<String>,
    /// Share of traces kept, 0 to 1 (default 1), for requests without a parent; a
    /// request whose client sent a `traceparent` follows the client's decision.
    pub(super) sampling_ratio: Option<Spanned<f64>>,
    /// Longest wait for the collector per export (default 10 s, at most 60 s).
    pub(super) export_timeout: Option<Spanned<Span>>,
    /// Join the client's trace when a request carries a W3C `traceparent` (default
    /// true). With `false` every request starts a trace of its own.
    pub(super) accept_traceparent: bool,
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
