//! The proxy's configuration file (P3): TOML, read with serde.
//!
//! A bad file fails at start with the file, the line and the reason: syntax and type
//! errors come from the TOML parser with their position; references that do not
//! resolve (an unknown policy, tenant or model) are reported at the line of the
//! reference. See `examples/demo.toml` for a complete file and the configuration reference
//! ([`crate::docs::configuration`]) for every setting.
//!
//! The file as written is `raw.rs` (the serde structs, private to this module); the
//! value checks are in `check.rs`; `resolve.rs` turns the raw file into the [`Config`]
//! the gateway runs, with every error at the line of its setting; `settings.rs` holds
//! the resolved settings the rest of the crate reads, through [`Config`]'s accessors
//! ([`Config::server`], [`Config::store`], …).
//!
//! Imports go one way: every other module of the crate may read the configuration, and
//! the configuration reads none of them.

mod check;
mod raw;
mod resolve;
mod settings;
mod span;

pub use check::check_endpoint;
pub use settings::{
    BillingSettings, CutStreamsConfig, DEFAULT_CORRECT_WITHIN, DEFAULT_DATABASE,
    DEFAULT_EXPORT_TIMEOUT, DEFAULT_RESOLVE_INTERVAL, DEFAULT_UNKNOWN_GIVE_UP,
    DEFAULT_UNKNOWN_GRACE, DatabaseSettings, FailureModeConfig, ForwardedHeader,
    ForwardingSettings, LimitSettings, ModelSettings, NEVER_FORWARDED, QueueSettings,
    ServerSettings, StoreSettings, TaskEntry, TelemetrySettings, UnacknowledgedConfig,
    UnknownOutcomeConfig, UpstreamLimits, Vendor,
};

use portcullis_core::Money;
use settings::Settings;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// A resolved API key.
#[derive(Clone, Debug)]
pub struct KeyEntry {
    /// The label in the file (never the secret): the subject key limits, usage
    /// records and logs use.
    pub label: Arc<str>,
    /// The subject the layers limit.
    pub subject: portcullis_core::Subject,
    /// Spend cap.
    pub spend_cap: Option<Money>,
    /// Spend cap and tenant budgets, for the billing layer.
    pub billing: portcullis::BillingProfile,
    /// The tenant's weight in the capacity queue (Q4).
    pub weight: u32,
    /// Allowed models; empty = all.
    pub models: Vec<String>,
    /// Rejections in the native body and codes on every route (E1).
    pub native_errors: bool,
    /// The data boundary (X4): the only vendors (as their dialects) the key's requests
    /// may go to, its own and its tenant's lists intersected; `None` = every vendor.
    pub allowed_vendors: Option<Vec<portcullis_core::Dialect>>,
}

/// What a tenant of the file gives the keys that name it.
#[derive(Clone, Debug)]
pub struct TenantProfile {
    /// Weight in the capacity queue (Q4).
    pub weight: u32,
    /// Its money budgets.
    pub budgets: Vec<portcullis_core::Budget>,
    /// Its data boundary (X4).
    pub allowed_vendors: Option<Vec<portcullis_core::Dialect>>,
}

/// A resolved channel.
#[derive(Clone)]
pub struct Channel {
    /// Name in the file.
    pub name: Arc<str>,
    /// Provider family; also its API format.
    pub vendor: Vendor,
    /// Base URL as written, e.g. `https://api.openai.com`; `fake://` for the bundled
    /// fake upstream.
    pub base_url: String,
    /// Models served.
    pub models: Vec<String>,
    /// Per served model, the id the provider knows it by when it is not the public
    /// name (`upstream_models`).
    pub upstream_models: BTreeMap<String, String>,
    /// Failover group.
    pub group: String,
    /// Share of new conversations.
    pub weight: u32,
    /// Most in-flight requests (0 = unlimited).
    pub capacity: u32,
    /// Limits of the credential.
    pub limits: UpstreamLimits,
    /// Limits per model on this credential.
    pub model_limits: BTreeMap<String, UpstreamLimits>,
    /// The credential, written or read from the environment.
    pub credential: Option<String>,
    /// The non-secret credential id whose limits this channel shares: the file's
    /// `credential_id`, else a hash of the credential (channels holding the same secret
    /// share), else `channel-{name}`.
    pub credential_id: String,
}

/// The configuration, checked and resolved.
#[derive(Clone)]
pub struct Config {
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
    /// The other settings, read through the accessors (`settings.rs`).
    settings: Settings,
}

impl Config {
    /// Reads and checks a file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: Some(path.to_owned()),
            line: None,
            reason: format!("cannot read: {e}"),
        })?;
        let mut c = Self::read(&text).map_err(|mut e| {
            e.file = Some(path.to_owned());
            e
        })?;
        c.source = Some(path.to_owned());
        // A file that names no records database gets the embedded one beside it (K1).
        c.settle_database_url(Some(settings::DEFAULT_DATABASE));
        Ok(c)
    }

    /// Parses and checks TOML text. Text has no place for a database file: without
    /// `[database] url` it has no records database.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut c = Self::read(text)?;
        c.settle_database_url(None);
        Ok(c)
    }

    fn read(text: &str) -> Result<Self, ConfigError> {
        let raw: raw::RawConfig = toml::from_str(text).map_err(|e| ConfigError {
            file: None,
            line: e.span().map(|s| resolve::line_of(text, s.start)),
            reason: e.message().to_owned(),
        })?;
        resolve::resolve(raw, text)
    }
}

impl Channel {
    /// Whether the channel is the bundled fake upstream (`fake://`).
    pub fn is_fake(&self) -> bool {
        self.base_url.starts_with("fake://")
    }
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel")
            .field("name", &self.name)
            .field("vendor", &self.vendor)
            .field("base_url", &self.base_url)
            .field("models", &self.models)
            .field("group", &self.group)
            .field("weight", &self.weight)
            .field("capacity", &self.capacity)
            .field("limits", &self.limits)
            .field("model_limits", &self.model_limits)
            .field("credential", &redact(&self.credential))
            .field("credential_id", &self.credential_id)
            .finish()
    }
}

/// How a secret appears in `Debug` output: present or not, never its value.
const REDACTED: &str = "<redacted>";

fn redact(secret: &Option<String>) -> Option<&'static str> {
    secret.as_ref().map(|_| REDACTED)
}

// `Debug` of everything holding a client key, a provider credential or the admin token
// shows the structure but never the secret (E3): a `{:?}` in a log line or a panic
// message must not leak one.

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
            .field("keys", &RedactedKeys(&self.keys))
            .field("channels", &self.channels)
            .field("source", &self.source)
            .field("admin_token", &redact(&self.admin_token))
            .field("metrics_token", &redact(&self.metrics_token))
            .field("settings", &self.settings)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small file every setting of which resolves: the tests change one line of it.
    pub(crate) const GOOD: &str = r#"
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
    fn p3_error_display_has_file_line_reason() {
        let dir = std::env::temp_dir().join(format!("portcullis-cfg-{}", std::process::id()));
        // A process of the same id may have left it (ids are reused): start empty.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("bad.toml");
        std::fs::write(&f, "[server]\nlisten = 5\n").unwrap();
        let e = Config::load(&f).unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with(&format!("{}:2: ", f.display())), "{s}");
    }

    /// K1: a file that names no records database gets the embedded SQLite one beside
    /// it; text (no place for a file) gets none; `"none"`, in the file or as an
    /// override, turns it off; a url named is kept.
    #[test]
    fn k1_a_file_without_a_database_gets_the_embedded_sqlite_one() {
        let dir = std::env::temp_dir().join(format!("portcullis-db-{}", std::process::id()));
        // A process of the same id may have left it (ids are reused): start empty.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let url = |text: &str| {
            let f = dir.join("gateway.toml");
            std::fs::write(&f, text).unwrap();
            Config::load(&f).unwrap().database().url.clone()
        };
        assert_eq!(url(GOOD).as_deref(), Some(DEFAULT_DATABASE));
        assert_eq!(
            url(&format!("[database]\nurl = \"none\"\n{GOOD}")),
            None,
            "\"none\" in a file"
        );
        let named = format!("[database]\nurl = \"sqlite://keys.db\"\n{GOOD}");
        assert_eq!(url(&named).as_deref(), Some("sqlite://keys.db"));
        assert_eq!(Config::parse(GOOD).unwrap().database().url, None, "text");
        assert_eq!(
            Config::parse(&named).unwrap().database().url.as_deref(),
            Some("sqlite://keys.db")
        );
        let mut c = Config::parse(&named).unwrap();
        c.set_database_url("none");
        assert_eq!(c.database().url, None, "--database none");
        c.set_database_url("postgres://h/d");
        assert_eq!(c.database().url.as_deref(), Some("postgres://h/d"));
        let _ = std::fs::remove_dir_all(&dir);
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
            "Channel {",
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
}
