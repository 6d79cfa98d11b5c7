//! What the gateway runs with, resolved from the file: the types the rest of the crate
//! reads, through the accessors of [`Config`] (`config.server()`, `config.store()`, …),
//! so that each part of the gateway sees the settings it uses and nothing of the file's
//! layout (`raw.rs`).
//!
//! Sections that need no resolution (`[store]`, `[limits]`, `[queue]`, `[forwarding]`,
//! `[models]`, `[vendors]`) are read straight into their type here, durations as
//! [`Duration`]s; `[server]` and `[telemetry]` are resolved from the file's shape (its
//! secrets, environment variables and places left behind), `[failover]` into the
//! layer's own [`FailoverConfig`](portcullis::failover::FailoverConfig).

use super::span::{duration, optional_duration};
use super::{Config, TenantProfile};
use portcullis_core::{Budget, Dialect, Money, Policy, Price};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Everything resolved besides keys, channels and tokens, read through the accessors
/// of [`Config`].
#[derive(Clone, Debug)]
pub(super) struct Settings {
    pub(super) server: ServerSettings,
    pub(super) store: StoreSettings,
    pub(super) database: DatabaseSettings,
    pub(super) limits: LimitSettings,
    pub(super) queue: QueueSettings,
    pub(super) failover: portcullis::failover::FailoverConfig,
    pub(super) billing: BillingSettings,
    pub(super) forwarding: ForwardingSettings,
    pub(super) telemetry: TelemetrySettings,
    pub(super) policies: BTreeMap<String, Arc<Policy>>,
    pub(super) tenants: BTreeMap<String, Money>,
    pub(super) tasks: BTreeMap<String, TaskEntry>,
    pub(super) tenant_profiles: BTreeMap<String, TenantProfile>,
    pub(super) models: BTreeMap<String, ModelSettings>,
    pub(super) vendors: BTreeMap<String, UpstreamLimits>,
}

impl Config {
    /// `[server]`: the listen address and the bounds of serving and forwarding.
    pub fn server(&self) -> &ServerSettings {
        &self.settings.server
    }

    /// `[store]`: where limit state lives.
    pub fn store(&self) -> &StoreSettings {
        &self.settings.store
    }

    /// Points `[store] url` elsewhere (a `--store` given on the command line); the URL
    /// is checked when the store is opened.
    pub fn set_store_url(&mut self, url: impl Into<String>) {
        self.settings.store.url = url.into();
    }

    /// `[database]`: the records database.
    pub fn database(&self) -> &DatabaseSettings {
        &self.settings.database
    }

    /// Points `[database] url` elsewhere (a `--database` given on the command line;
    /// `"none"`: no database).
    pub fn set_database_url(&mut self, url: impl Into<String>) {
        let url: String = url.into();
        self.settings.database.url = (url.trim() != "none").then_some(url);
    }

    /// `[limits]`: the user-policy layers' settings.
    pub fn limits(&self) -> &LimitSettings {
        &self.settings.limits
    }

    /// `[queue]`: the capacity queue's settings.
    pub fn queue(&self) -> &QueueSettings {
        &self.settings.queue
    }

    /// `[failover]` as the failover layer takes it, with `[queue] default_deadline`.
    pub fn failover(&self) -> &portcullis::failover::FailoverConfig {
        &self.settings.failover
    }

    /// `[billing]`: what a request holds while it runs (B8), and what a stream cut after
    /// its content went out is charged (B7).
    pub fn billing(&self) -> &BillingSettings {
        &self.settings.billing
    }

    /// `[forwarding]`: the header allow-lists the file adds to the built-in ones.
    pub fn forwarding(&self) -> &ForwardingSettings {
        &self.settings.forwarding
    }

    /// `[telemetry]`: the trace export.
    pub fn telemetry(&self) -> &TelemetrySettings {
        &self.settings.telemetry
    }

    /// The policies by name, each checked.
    pub fn policies(&self) -> &BTreeMap<String, Arc<Policy>> {
        &self.settings.policies
    }

    /// The policy named `name`.
    pub fn policy(&self, name: &str) -> Option<Policy> {
        self.settings.policies.get(name).map(|p| Policy::clone(p))
    }

    /// The tenants by name, each with the balance it is seeded with (once: a running
    /// balance is kept).
    pub fn tenants(&self) -> &BTreeMap<String, Money> {
        &self.settings.tenants
    }

    /// `[tenants]`: what a tenant of the file gives the keys that name it (also keys
    /// of the records database).
    pub fn tenant_profiles(&self) -> &BTreeMap<String, TenantProfile> {
        &self.settings.tenant_profiles
    }

    /// The task budgets by name (B3, E4).
    pub fn tasks(&self) -> &BTreeMap<String, TaskEntry> {
        &self.settings.tasks
    }

    /// The models by id.
    pub fn models(&self) -> &BTreeMap<String, ModelSettings> {
        &self.settings.models
    }

    /// Account-wide upstream limits per vendor (`openai`, `anthropic`, `gemini`; U1).
    pub fn vendors(&self) -> &BTreeMap<String, UpstreamLimits> {
        &self.settings.vendors
    }

    /// Whether a channel uses the bundled fake upstream (`fake://`), which the binary
    /// and the demo then start.
    pub fn uses_fake_upstream(&self) -> bool {
        self.channels.iter().any(super::Channel::is_fake)
    }
}

/// `[server]`, resolved: the listen address and the bounds of serving and forwarding
/// (the admin and metrics tokens are [`Config::admin_token`] and
/// [`Config::metrics_token`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSettings {
    /// Listen address.
    pub listen: SocketAddr,
    /// Largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Upstream response-head timeout.
    pub upstream_timeout: Duration,
    /// Longest silence of an upstream answer's body before it is cut.
    pub upstream_idle_timeout: Duration,
    /// Longest time to receive a request body (slow clients get 408).
    pub body_read_timeout: Duration,
    /// Longest time to receive a request head (slower connections are closed).
    pub header_read_timeout: Duration,
    /// JSON-lines file every settled or pending attempt is appended to (B6).
    pub usage_log: Option<PathBuf>,
    /// Longest time a client may leave a response unread before it is cut (L3).
    pub stall_timeout: Duration,
    /// Longest life of a response body, read or not.
    pub max_response_lifetime: Duration,
    /// Most connections served at once.
    pub max_connections: usize,
    /// An HTTP/2 connection with no open stream this long is closed.
    pub h2_idle_timeout: Duration,
    /// How long requests in flight may go on after a graceful shutdown began.
    pub drain_timeout: Duration,
}

/// `[billing]`, resolved: what a request holds in its budgets (and a policy's amount
/// cap) while it runs (B8), and what a stream cut after its content went out is charged
/// (B7). Settings of the gateway, not of a tenant or a budget: one request's hold is one
/// amount, reserved in every budget it draws on in one store call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BillingSettings {
    /// The hold policy and its cap (default: the upper bound, no cap).
    pub reservation: crate::reserve::Reservation,
    /// A stream cut after its content went out — the client's stop button, or the
    /// upstream cutting it — whose provider reported no final usage: `"charge"` (the
    /// default) charges what the gateway saw streamed at once (the input as reported,
    /// else estimated, and the output counted from the deltas); `"hold"` keeps its hold
    /// pending reconciliation by an operator.
    pub cut_streams: CutStreamsConfig,
    /// How long an attempt stays pending with an unknown outcome before the gateway asks
    /// its provider for the object the answer named (a stored OpenAI response or chat
    /// completion). Default 2 minutes.
    pub unknown_grace: Duration,
    /// How much longer, after the grace, the provider is asked; then the
    /// [`unknown_outcome`](Self::unknown_outcome) policy applies. Default 1 hour.
    pub unknown_give_up: Duration,
    /// What becomes of a pending attempt nothing answered for by the end of the give-up
    /// period: `"hold"` (the default) leaves it for an operator; `"upper_bound"` settles
    /// it at its upper bound.
    pub unknown_outcome: UnknownOutcomeConfig,
    /// How often the ledger's pending attempts are looked at. Default 15 seconds.
    pub resolve_interval: Duration,
    /// How long after an automatic charge — what a cut stream streamed, or an upper
    /// bound — its provider is still asked for the attempt's object, to correct the
    /// charge once by its reported usage (B7). Default 24 hours; `0s` turns corrections
    /// off.
    pub correct_within: Duration,
}

/// `[billing] unknown_grace` unless the file says otherwise.
pub const DEFAULT_UNKNOWN_GRACE: Duration = Duration::from_secs(120);
/// `[billing] unknown_give_up` unless the file says otherwise.
pub const DEFAULT_UNKNOWN_GIVE_UP: Duration = Duration::from_secs(3600);
/// `[billing] resolve_interval` unless the file says otherwise.
pub const DEFAULT_RESOLVE_INTERVAL: Duration = Duration::from_secs(15);
/// `[billing] correct_within` unless the file says otherwise.
pub const DEFAULT_CORRECT_WITHIN: Duration = Duration::from_secs(24 * 3600);

impl Default for BillingSettings {
    fn default() -> Self {
        Self {
            reservation: crate::reserve::Reservation::default(),
            cut_streams: CutStreamsConfig::default(),
            unknown_grace: DEFAULT_UNKNOWN_GRACE,
            unknown_give_up: DEFAULT_UNKNOWN_GIVE_UP,
            unknown_outcome: UnknownOutcomeConfig::default(),
            resolve_interval: DEFAULT_RESOLVE_INTERVAL,
            correct_within: DEFAULT_CORRECT_WITHIN,
        }
    }
}

/// `[billing] unknown_outcome`: the end of a pending attempt nothing answered for (B7).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum UnknownOutcomeConfig {
    /// Leave it pending for an operator (logged once).
    #[default]
    Hold,
    /// Settle it at its upper bound.
    UpperBound,
}

/// `[billing] cut_streams`.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CutStreamsConfig {
    /// Charge what was streamed.
    #[default]
    Charge,
    /// Hold the upper bound for an operator.
    Hold,
}

impl From<CutStreamsConfig> for portcullis::billing::CutStreams {
    fn from(c: CutStreamsConfig) -> Self {
        match c {
            CutStreamsConfig::Charge => portcullis::billing::CutStreams::Charge,
            CutStreamsConfig::Hold => portcullis::billing::CutStreams::Hold,
        }
    }
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

impl From<FailureModeConfig> for portcullis::FailureMode {
    fn from(m: FailureModeConfig) -> Self {
        match m {
            // With `local`, the store itself falls back and the layer sees no error;
            // should the local store ever fail, admit.
            FailureModeConfig::Open | FailureModeConfig::Local => portcullis::FailureMode::Open,
            FailureModeConfig::Closed => portcullis::FailureMode::Closed,
        }
    }
}

/// `[database]`: where client keys, tenants and management tokens are kept (beside the
/// file's own keys), and how fast every instance follows their changes.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// `sqlite://PATH` (relative to the configuration file) or `postgres://…`. Absent in
    /// a file ([`crate::Config::load`]): [`DEFAULT_DATABASE`], the embedded SQLite file
    /// beside it; absent in text ([`crate::Config::parse`], which has no place to put a
    /// file): no database. `"none"`: no database (the file's keys only, no key routes).
    /// Read through [`crate::Config::database`], where `"none"` is `None`.
    pub url: Option<String>,
    /// The environment variable holding the secret keys are hashed with (at least 16
    /// bytes). Unset on SQLite: a secret file beside the database (`PATH.hash-secret`,
    /// created on first start); PostgreSQL requires it (every instance must hash alike).
    pub hash_secret_env: String,
    /// The safety-net poll of the database's revision (changes also arrive by
    /// notification on PostgreSQL); at most 1 s.
    #[serde(deserialize_with = "duration")]
    pub poll: Duration,
    /// Whether every billed attempt is written to the ledger in this database (B6).
    pub ledger: bool,
    /// This instance's ledger spool: records are appended here before they are written to
    /// the database and kept while it is down, then replayed. Relative to the
    /// configuration file. Default: on SQLite `PATH.spool` beside the database; on
    /// PostgreSQL `portcullis-ledger.spool` beside the configuration file. Every instance
    /// needs its own.
    pub spool: Option<PathBuf>,
}

/// The records database of a configuration file that names none: SQLite, created on
/// first start beside the file.
pub const DEFAULT_DATABASE: &str = "sqlite://portcullis-records.db";

impl Config {
    /// `[database] url` as the gateway uses it: `"none"` is no database, and so is an
    /// absent url unless `default` names the database of a file that names none.
    pub(super) fn settle_database_url(&mut self, default: Option<&str>) {
        let url = &mut self.settings.database.url;
        *url = match url.as_deref().map(str::trim) {
            None => default.map(str::to_owned),
            Some("none") => None,
            Some(_) => url.take(),
        };
    }
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            url: None,
            hash_secret_env: "PORTCULLIS_KEY_HASH_SECRET".into(),
            poll: Duration::from_millis(250),
            ledger: true,
            spool: None,
        }
    }
}

/// `[store]`: where limit state lives.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSettings {
    /// `memory` (default) or a `redis://` URL.
    pub url: String,
    /// Most subjects kept in memory per kind of state.
    pub capacity: usize,
    /// Redis key prefix.
    pub prefix: String,
    /// Deadline of every store call (D4).
    #[serde(deserialize_with = "duration")]
    pub deadline: Duration,
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
    /// on; `portcullis_core::blocks`).
    pub blocks: bool,
    /// Redis: billing quota blocks too (default: on wherever `blocks` is; `true` with
    /// `blocks = false` is a configuration error). See [`StoreSettings::money_blocks_on`].
    pub money_blocks: Option<bool>,
    /// Redis: replicas that must acknowledge every write (`WAIT`) before the gateway
    /// relies on it (D10; default 0).
    pub replica_acks: u32,
    /// Redis: the longest wait for those acknowledgements, on top of `deadline`
    /// (default 100 ms; D10).
    #[serde(deserialize_with = "duration")]
    pub replica_ack_wait: Duration,
    /// Redis: what a write the replicas did not acknowledge does: `refuse` (default:
    /// admissions fail as a store failure, follow-ups are taken) or `accept` (taken,
    /// and counted).
    pub unacknowledged: UnacknowledgedConfig,
}

/// `[store] unacknowledged`: what a write fewer replicas than `replica_acks`
/// acknowledged does (D10).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UnacknowledgedConfig {
    /// Admissions are refused (a store failure: billing refuses the request with 503),
    /// settlements and releases taken.
    #[default]
    Refuse,
    /// Every write is taken and counted
    /// (`portcullis_store_unacknowledged_writes_total`).
    Accept,
}

impl StoreSettings {
    /// Whether billing quota blocks are on: with quota blocks, unless turned off.
    pub fn money_blocks_on(&self) -> bool {
        self.blocks && self.money_blocks.unwrap_or(true)
    }
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            url: "memory".to_owned(),
            capacity: portcullis_core::store::memory::DEFAULT_CAPACITY,
            prefix: "portcullis".to_owned(),
            deadline: Duration::from_millis(20),
            slots_failure: FailureModeConfig::Open,
            windows_failure: FailureModeConfig::Open,
            billing_failure: FailureModeConfig::Closed,
            capacity_failure: FailureModeConfig::Open,
            instances: 1,
            blocks: true,
            money_blocks: None,
            replica_acks: 0,
            replica_ack_wait: Duration::from_millis(100),
            unacknowledged: UnacknowledgedConfig::Refuse,
        }
    }
}

/// `[limits]`: settings of the user-policy layers.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct LimitSettings {
    /// Slot lease TTL (C4); channel capacity leases live as long.
    #[serde(deserialize_with = "duration")]
    pub lease_ttl: Duration,
    /// Wait for a slot (C2); zero = refuse at once.
    #[serde(deserialize_with = "duration")]
    pub slot_max_wait: Duration,
    /// Wait for room in the rolling window (W10).
    #[serde(deserialize_with = "duration")]
    pub rolling_max_wait: Duration,
}

impl Default for LimitSettings {
    fn default() -> Self {
        Self {
            lease_ttl: portcullis::slot::DEFAULT_LEASE_TTL,
            slot_max_wait: Duration::ZERO,
            rolling_max_wait: Duration::ZERO,
        }
    }
}

/// `[queue]`: the capacity queue (Q1–Q5).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct QueueSettings {
    /// Longest wait for channel capacity (Q3), default 10 s.
    #[serde(deserialize_with = "duration")]
    pub max_wait: Duration,
    /// Deadline when the request names none (`x-portcullis-deadline-ms`); absent = none.
    #[serde(deserialize_with = "optional_duration")]
    pub default_deadline: Option<Duration>,
    /// Most waiters per channel queue.
    pub max_depth: usize,
    /// Most waiters of one tenant per channel queue.
    pub max_per_tenant: usize,
    /// How long a channel's capacity stays held after a client abandoned a request
    /// mid-answer (the provider works on until it notices), default 250 ms.
    #[serde(deserialize_with = "duration")]
    pub abort_grace: Duration,
}

impl Default for QueueSettings {
    /// The capacity layer's own defaults.
    fn default() -> Self {
        let limits = portcullis_core::capacity::QueueLimits::default();
        Self {
            max_wait: portcullis::capacity::DEFAULT_MAX_WAIT,
            default_deadline: None,
            max_depth: limits.max_depth,
            max_per_tenant: limits.max_per_tenant,
            abort_grace: portcullis::capacity::DEFAULT_ABORT_GRACE,
        }
    }
}

/// `[forwarding]`: what passes between clients and providers besides the body (P2):
/// request headers to each vendor's channels and response headers back to the client,
/// both from allow-lists. These lists extend the built-in ones (see `crate::forward`);
/// nothing else passes.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ForwardingSettings {
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

impl Default for ForwardingSettings {
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
/// gateway's own `x-portcullis-*` controls).
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
        if h.as_str().starts_with("x-portcullis-") || h == http::header::TRAILER {
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

/// The default of `[telemetry] export_timeout`.
pub const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// `[telemetry]`, resolved: where and how the spans are exported (read at start; a
/// reload keeps the running exporter and the router's trace context).
#[derive(Clone, Debug, PartialEq)]
pub struct TelemetrySettings {
    /// The OTLP/gRPC collector the file names (else the standard variables are read).
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported spans (else `OTEL_SERVICE_NAME`, else `portcullis`).
    pub service_name: Option<String>,
    /// Share of traces kept, 0 to 1, for requests without a parent.
    pub sampling_ratio: f64,
    /// Longest wait for the collector per export.
    pub export_timeout: Duration,
    /// Join the client's trace when a request carries a W3C `traceparent`.
    pub accept_traceparent: bool,
}

/// A task budget (B3) and the tenants whose keys may name it (E4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskEntry {
    /// The budget, kept per tenant (D3).
    pub budget: Budget,
    /// The tenants whose keys may name the task; empty = any key (a shared task).
    pub owners: Vec<Arc<str>>,
}

/// Upstream limits at one granularity (U1): `{ rpm, rph, rpd, tpm, itpm, otpm }`.
pub use portcullis_core::upstream::RateLimits as UpstreamLimits;

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

/// A model: price and capabilities.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ModelSettings {
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
