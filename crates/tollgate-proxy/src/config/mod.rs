//! The proxy's configuration file (SPEC P3): TOML, read with serde.
//!
//! A bad file fails at start with the file, the line and the reason: syntax and type
//! errors come from the TOML parser with their position; references that do not
//! resolve (an unknown policy, tenant or model) are reported at the line of the
//! reference. See `examples/demo.toml` for a complete file and the README for the
//! reference.
//!
//! The file as written is [`RawConfig`] (the serde structs, `raw.rs`); the value checks
//! are in `check.rs`; `resolve.rs` turns the raw file into the [`Config`] the gateway
//! runs, with every error at the line of its setting.

mod check;
mod raw;
mod resolve;

pub use raw::{
    BudgetConfig, ChannelConfig, ErrorsConfig, FailoverSettings, FailureModeConfig,
    ForwardedHeader, ForwardingConfig, KeyConfig, LimitsConfig, ModelConfig, NEVER_FORWARDED,
    PolicyConfig, QueueConfig, RawConfig, ServerConfig, Span, StoreConfig, SubscriptionConfig,
    TaskConfig, TelemetryConfig, TenantConfig, TierConfig, UpstreamLimits, Vendor,
};
pub use resolve::{task_budget, tenant_budgets};

use raw::redact;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tollgate_core::{Money, Policy};

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
            line: e.span().map(|s| resolve::line_of(text, s.start)),
            reason: e.message().to_owned(),
        })?;
        resolve::resolve(raw, text)
    }

    /// The policy named `name`.
    pub fn policy(&self, name: &str) -> Option<Policy> {
        self.raw.policies.get(name).and_then(|p| p.to_policy().ok())
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

#[cfg(test)]
mod tests {
    use super::raw::REDACTED;
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
        let dir = std::env::temp_dir().join(format!("tollgate-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("bad.toml");
        std::fs::write(&f, "[server]\nlisten = 5\n").unwrap();
        let e = Config::load(&f).unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with(&format!("{}:2: ", f.display())), "{s}");
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
}
