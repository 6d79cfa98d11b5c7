//! From the file as written to the configuration the gateway runs: policies, keys and
//! their secrets, channels and their credentials, the admin and metrics tokens, and the
//! settings of `settings.rs`, with the value checks of [`super::check`] in between. Every
//! error points at the line of the setting it is about, found with toml's own spans
//! ([`Spans`]).

use super::check::{self, At, Bad, names};
use super::raw::{
    BillingConfig, ChannelConfig, ErrorsConfig, PolicyConfig, RawConfig, ReserveConfig,
    ServerConfig, TaskConfig, TelemetryConfig, TenantConfig, TierConfig,
};
use super::settings::{
    BillingSettings, DEFAULT_EXPORT_TIMEOUT, ServerSettings, Settings, TaskEntry, TelemetrySettings,
};
use super::{Channel, Config, ConfigError, KeyEntry};
use portcullis_core::{Policy, Tier};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use toml::Spanned;

impl PolicyConfig {
    pub(super) fn to_policy(&self) -> Result<Policy, String> {
        let tiers = |v: &[TierConfig]| -> Vec<Tier> {
            v.iter().map(|t| Tier::new(t.window.0, t.limit)).collect()
        };
        let mut p = Policy::default().with_concurrency(self.concurrency);
        p.requests = tiers(&self.requests);
        p.tokens = tiers(&self.tokens);
        p.images = tiers(&self.images);
        p.videos = tiers(&self.videos);
        p.amount_cap = self.amount_cap;
        p.rolling_rpm = self.rolling_rpm;
        p.validate()?;
        Ok(p)
    }
}

/// The 1-based line of byte `offset` of `text`.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// The text of the file and where its keys are: turns a place into an error at its line.
struct Source<'t> {
    text: &'t str,
    spans: Spans<'t>,
}

impl Source<'_> {
    fn err(&self, span: Option<Range<usize>>, reason: String) -> ConfigError {
        ConfigError {
            file: None,
            line: span.map(|s| line_of(self.text, s.start)),
            reason,
        }
    }

    /// A failed check, at the line of the setting it names.
    fn bad(&self, b: Bad) -> ConfigError {
        let span = match b.at {
            At::Setting(path) => self.spans.of(&path),
            At::Entry(section, name) => self.spans.entry(section, &name),
            At::Text(span) => span,
        };
        self.err(span, b.reason)
    }
}

/// Checks `raw` (parsed from `text`) and resolves it; the first error found wins, in the
/// order of the file's sections as the gateway reads them.
pub(super) fn resolve(raw: RawConfig, text: &str) -> Result<Config, ConfigError> {
    let src = Source {
        text,
        spans: Spans::new(text),
    };
    let policies = policies(&raw, &src)?;
    check::settings(&raw).map_err(|b| src.bad(b))?;
    check::tasks(&raw).map_err(|b| src.bad(b))?;
    let mut keys = BTreeMap::new();
    for (label, k) in &raw.keys {
        let (secret, entry) = key(&raw, &policies, &src, label, k)?;
        if keys.contains_key(&secret) {
            return Err(src.err(
                src.spans.entry("keys", label),
                format!("key {label:?}: the same key is configured twice"),
            ));
        }
        keys.insert(secret, entry);
    }
    check::vendors(&raw).map_err(|b| src.bad(b))?;
    check::fallbacks(&raw).map_err(|b| src.bad(b))?;
    let mut channels = Vec::new();
    for (name, c) in &raw.channels {
        check::channel(name, c, &raw.models).map_err(|b| src.bad(b))?;
        channels.push(channel(&src, name, c)?);
    }
    let (admin_token, metrics_token) = tokens(&raw.server, &src)?;
    Ok(Config {
        keys,
        channels,
        source: None,
        admin_token,
        metrics_token,
        settings: settings(raw, policies),
    })
}

/// Everything else the gateway runs with, from the checked file.
fn settings(raw: RawConfig, policies: BTreeMap<String, Arc<Policy>>) -> Settings {
    Settings {
        server: server(&raw.server),
        failover: raw.failover.to_layer(raw.queue.default_deadline),
        billing: billing(&raw.billing),
        telemetry: telemetry(&raw.telemetry),
        tenants: raw
            .tenants
            .iter()
            .map(|(name, t)| (name.clone(), t.balance))
            .collect(),
        tasks: raw
            .tasks
            .iter()
            .map(|(name, t)| (name.clone(), task(name, t)))
            .collect(),
        tenant_profiles: raw
            .tenants
            .iter()
            .map(|(name, t)| {
                let profile = super::TenantProfile {
                    weight: t.weight.unwrap_or(1),
                    budgets: tenant_budgets(name, t),
                    allowed_vendors: data_boundary(None, t.allowed_vendors.as_deref()),
                };
                (name.clone(), profile)
            })
            .collect(),
        policies,
        store: raw.store,
        database: raw.database,
        limits: raw.limits,
        queue: raw.queue,
        forwarding: raw.forwarding,
        models: raw.models,
        vendors: raw.vendors,
    }
}

impl Default for ServerSettings {
    /// The settings of a file without `[server]`.
    fn default() -> Self {
        server(&ServerConfig::default())
    }
}

impl Default for TelemetrySettings {
    /// The settings of a file without `[telemetry]`.
    fn default() -> Self {
        telemetry(&TelemetryConfig::default())
    }
}

/// `[server]` as the gateway serves with it (the tokens are resolved by [`tokens`]).
pub(super) fn server(s: &ServerConfig) -> ServerSettings {
    ServerSettings {
        listen: s.listen,
        max_body_bytes: s.max_body_bytes,
        upstream_timeout: s.upstream_timeout.0,
        upstream_idle_timeout: s.upstream_idle_timeout.0,
        body_read_timeout: s.body_read_timeout.0,
        header_read_timeout: s.header_read_timeout.0,
        usage_log: s.usage_log.clone(),
        stall_timeout: s.stall_timeout.0,
        max_response_lifetime: s.max_response_lifetime.0,
        max_connections: s.max_connections,
        h2_idle_timeout: s.h2_idle_timeout.0,
        drain_timeout: s.drain_timeout.0,
    }
}

/// `[billing]` as the gateway holds money with it (checked by [`check::settings`]): the
/// policy, its expected output (a share in parts per million, default
/// [`DEFAULT_EXPECTED_OUTPUT_SHARE`](crate::reserve::DEFAULT_EXPECTED_OUTPUT_SHARE)) and
/// the cap.
pub(super) fn billing(b: &BillingConfig) -> BillingSettings {
    use crate::reserve::{DEFAULT_EXPECTED_OUTPUT_SHARE, ExpectedOutput, PER_MILLION, Reserve};
    let expected = match (b.expected_output_tokens, b.expected_output_share) {
        (Some(t), _) => ExpectedOutput::Tokens(t),
        (None, Some(share)) => {
            let ppm = (share.clamp(0.0, 1.0) * f64::from(PER_MILLION)).round();
            ExpectedOutput::Share(ppm as u32)
        }
        (None, None) => DEFAULT_EXPECTED_OUTPUT_SHARE,
    };
    BillingSettings {
        reservation: crate::reserve::Reservation {
            reserve: match b.reserve {
                ReserveConfig::UpperBound => Reserve::UpperBound,
                ReserveConfig::Estimate => Reserve::Estimate(expected),
            },
            cap: b.reserve_cap,
        },
        cut_streams: b.cut_streams,
        unknown_grace: b.unknown_grace,
        unknown_give_up: b.unknown_give_up,
        unknown_outcome: b.unknown_outcome,
        resolve_interval: b.resolve_interval,
        correct_within: b.correct_within,
    }
}

/// `[telemetry]` with its defaults taken: a ratio of 1, [`DEFAULT_EXPORT_TIMEOUT`].
pub(super) fn telemetry(t: &TelemetryConfig) -> TelemetrySettings {
    TelemetrySettings {
        otlp_endpoint: t.otlp_endpoint.as_ref().map(|e| e.get_ref().clone()),
        service_name: t.service_name.clone(),
        sampling_ratio: t.sampling_ratio.as_ref().map_or(1.0, |r| *r.get_ref()),
        export_timeout: t
            .export_timeout
            .as_ref()
            .map_or(DEFAULT_EXPORT_TIMEOUT, |e| e.get_ref().0),
        accept_traceparent: t.accept_traceparent,
    }
}

/// One channel of `[channels]`, its credential written or read from the environment.
fn channel(src: &Source<'_>, name: &str, c: &ChannelConfig) -> Result<Channel, ConfigError> {
    let at = src.spans.entry("channels", name);
    let credential = match (&c.credential, &c.credential_env) {
        (Some(s), None) => Some(s.clone()),
        (None, Some(var)) => Some(std::env::var(var).map_err(|_| {
            src.err(
                at.clone(),
                format!("channel {name:?}: environment variable {var} is not set"),
            )
        })?),
        (None, None) => None,
        _ => {
            return Err(src.err(
                at,
                format!("channel {name:?}: set at most one of `credential` or `credential_env`"),
            ));
        }
    };
    for (public, upstream) in &c.upstream_models {
        if !c.models.iter().any(|m| m.get_ref() == public) {
            return Err(src.err(
                at,
                format!(
                    "channel {name:?}: upstream_models names {public:?}, which is not among \
                     its models"
                ),
            ));
        }
        if !valid_model_id(upstream) {
            return Err(src.err(
                at,
                format!(
                    "channel {name:?}: upstream_models.{public} = {upstream:?} is not a model \
                     id (1–128 of ASCII letters, digits and `.-_@`)"
                ),
            ));
        }
    }
    Ok(Channel {
        name: name.into(),
        vendor: c.vendor,
        base_url: c.base_url.clone(),
        models: c.models.iter().map(|m| m.get_ref().clone()).collect(),
        upstream_models: c.upstream_models.clone(),
        group: c.group.clone(),
        weight: c.weight,
        capacity: c.capacity,
        limits: c.limits,
        model_limits: c.model_limits.clone(),
        credential_id: credential_id(name, c.credential_id.as_ref(), credential.as_ref()),
        credential,
    })
}

/// Whether `id` can name a model upstream: it goes into a Gemini path segment and a
/// JSON string as written, so only characters every vendor's ids use.
fn valid_model_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'@'))
}

/// The non-secret credential id whose limits a channel shares: written, else a digest
/// of the credential, else the channel's own.
fn credential_id(channel: &str, written: Option<&String>, secret: Option<&String>) -> String {
    if let Some(id) = written {
        return id.clone();
    }
    match secret {
        Some(secret) => {
            use std::hash::{Hash, Hasher};
            // SipHash with fixed keys: the same id on every instance, and a
            // 64-bit digest that does not reveal the secret.
            let mut h = std::hash::DefaultHasher::new();
            secret.hash(&mut h);
            format!("cred-{:016x}", h.finish())
        }
        None => format!("channel-{channel}"),
    }
}

/// The policies by name, each checked.
fn policies(
    raw: &RawConfig,
    src: &Source<'_>,
) -> Result<BTreeMap<String, Arc<Policy>>, ConfigError> {
    let mut policies = BTreeMap::new();
    for (name, p) in &raw.policies {
        let policy = p.to_policy().map_err(|r| {
            src.err(
                src.spans.entry("policies", name),
                format!("policy {name:?}: {r}"),
            )
        })?;
        policies.insert(name.clone(), Arc::new(policy));
    }
    Ok(policies)
}

/// One key of `[keys]`: its secret and what the gateway knows of it.
fn key(
    raw: &RawConfig,
    policies: &BTreeMap<String, Arc<Policy>>,
    src: &Source<'_>,
    label: &str,
    k: &super::raw::KeyConfig,
) -> Result<(String, KeyEntry), ConfigError> {
    let policy_ref = |r: &Spanned<String>| {
        policies.get(r.get_ref()).cloned().ok_or_else(|| {
            src.err(
                Some(r.span()),
                format!(
                    "unknown policy {:?} (defined: {})",
                    r.get_ref(),
                    names(raw.policies.keys())
                ),
            )
        })
    };
    let at = src.spans.entry("keys", label);
    let secret = secret(src, label, k, at.clone())?;
    // Limits are kept under the label, so no secret ever reaches a store key, a
    // usage record or a log line.
    let mut subject = portcullis_core::Subject::new(label);
    if let Some(t) = &k.tenant {
        if !raw.tenants.contains_key(t.get_ref()) {
            return Err(src.err(
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
                        src.err(
                            at.clone(),
                            format!("key {label:?}: subscription expires_at {t:?}: {e}"),
                        )
                    })?
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(portcullis_core::clock::millis)
                    .unwrap_or(0),
            ),
        };
        subject.subscription = Some(
            portcullis_core::Subscription::new(policy_ref(&s.policy)?)
                .with_expiry(expires_at)
                .with_pay_as_you_go(s.pay_as_you_go),
        );
    }
    let budgets: Vec<portcullis_core::Budget> = k
        .tenant
        .as_ref()
        .and_then(|t| raw.tenants.get(t.get_ref()).map(|tc| (t.get_ref(), tc)))
        .map(|(t, tc)| tenant_budgets(t, tc))
        .unwrap_or_default();
    let entry = KeyEntry {
        label: label.into(),
        subject,
        spend_cap: k.spend_cap,
        billing: portcullis::BillingProfile::new()
            .with_spend_cap(k.spend_cap)
            .with_budgets(budgets)
            // A tenant of the configuration has a balance, hence a record: a
            // missing one is data loss, a 503 (B7), never a zero balance.
            .with_tenant_expected(
                k.tenant
                    .as_ref()
                    .is_some_and(|t| raw.tenants.contains_key(t.get_ref())),
            ),
        weight: k
            .tenant
            .as_ref()
            .and_then(|t| raw.tenants.get(t.get_ref()))
            .and_then(|t| t.weight)
            .unwrap_or(1),
        models: k.models.clone(),
        native_errors: k.errors == ErrorsConfig::Native,
        allowed_vendors: data_boundary(
            k.allowed_vendors.as_deref(),
            k.tenant
                .as_ref()
                .and_then(|t| raw.tenants.get(t.get_ref()))
                .and_then(|t| t.allowed_vendors.as_deref()),
        ),
    };
    Ok((secret, entry))
}

/// The secret of key `label`: written (`key`), or read from the environment (`key_env`,
/// trimmed); never empty.
fn secret(
    src: &Source<'_>,
    label: &str,
    k: &super::raw::KeyConfig,
    at: Option<Range<usize>>,
) -> Result<String, ConfigError> {
    let secret = match (&k.key, &k.key_env) {
        (Some(s), None) => s.clone(),
        // A value read from the environment is trimmed: a secret file or a shell
        // `export` often ends in a newline, and an untrimmed key never matches.
        (None, Some(var)) => {
            let v = std::env::var(var).map_err(|_| {
                src.err(
                    at.clone(),
                    format!("key {label:?}: environment variable {var} is not set"),
                )
            })?;
            let v = v.trim();
            if v.is_empty() {
                return Err(src.err(
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
            return Err(src.err(
                at,
                format!("key {label:?}: set exactly one of `key` or `key_env`"),
            ));
        }
    };
    if secret.trim().is_empty() {
        return Err(src.err(at, format!("key {label:?}: the key is empty")));
    }
    Ok(secret)
}

/// The admin and metrics tokens, written or read from the environment.
fn tokens(
    server: &ServerConfig,
    src: &Source<'_>,
) -> Result<(Option<String>, Option<String>), ConfigError> {
    let admin = token(
        src,
        ("admin_token", "admin token"),
        (&server.admin_token, &server.admin_token_env),
    )?;
    let metrics = token(
        src,
        ("metrics_token", "metrics token"),
        (&server.metrics_token, &server.metrics_token_env),
    )?;
    Ok((admin, metrics))
}

/// One token of `[server]`: the setting `key` written, or `key_env` naming the variable
/// that holds it — taken without surrounding whitespace, as a client key is (a secret
/// file's trailing newline would otherwise lock the operator out); at least 16
/// characters.
fn token(
    src: &Source<'_>,
    (key, what): (&str, &str),
    (written, env): (&Option<String>, &Option<String>),
) -> Result<Option<String>, ConfigError> {
    let at = |setting: &str| src.spans.of(&format!("server.{setting}"));
    let token = match (written, env) {
        (Some(t), None) => Some(t.clone()),
        (None, Some(var)) => {
            let v = std::env::var(var).map_err(|_| {
                src.err(
                    at(&format!("{key}_env")),
                    format!("server.{key}_env: environment variable {var} is not set"),
                )
            })?;
            Some(v.trim().to_owned())
        }
        (None, None) => None,
        _ => {
            return Err(src.err(
                at(key),
                format!("server: set at most one of `{key}` or `{key}_env`"),
            ));
        }
    };
    if token.as_ref().is_some_and(|t| t.len() < 16) {
        return Err(src.err(
            at(key),
            format!("server: the {what} must be at least 16 characters"),
        ));
    }
    Ok(token)
}

/// The budgets of a tenant, with ids unique across tenants.
fn tenant_budgets(tenant: &str, t: &TenantConfig) -> Vec<portcullis_core::Budget> {
    t.budgets
        .iter()
        .map(|b| {
            portcullis_core::Budget::new(
                format!("tenant:{tenant}:{}", b.name),
                b.limit,
                b.period.map(|p| portcullis_core::clock::millis(p.0)),
            )
        })
        .collect()
}

/// A task of `[tasks]`: its budget and the tenants whose keys may name it.
fn task(name: &str, t: &TaskConfig) -> TaskEntry {
    TaskEntry {
        budget: portcullis_core::Budget::new(
            format!("task:{name}"),
            t.budget,
            t.period.map(|p| portcullis_core::clock::millis(p.0)),
        ),
        owners: t.owners().map(Into::into).collect(),
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
    fn of(&self, path: &str) -> Option<Range<usize>> {
        self.at(path.split('.'))
    }

    /// The span of entry `name` of the table `section` (`[section.name]`, or
    /// `name = { … }` inline), for errors about a whole entry.
    fn entry(&self, section: &str, name: &str) -> Option<Range<usize>> {
        self.at([section, name])
    }

    fn at<'p>(&self, path: impl IntoIterator<Item = &'p str>) -> Option<Range<usize>> {
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

/// A key's data boundary (X4): the vendors both its own list and its tenant's allow
/// (either absent: the other; both absent: every vendor).
fn data_boundary(
    key: Option<&[super::Vendor]>,
    tenant: Option<&[super::Vendor]>,
) -> Option<Vec<portcullis_core::Dialect>> {
    let dialects = |v: &[super::Vendor]| v.iter().map(|v| v.dialect()).collect::<Vec<_>>();
    match (key, tenant) {
        (None, None) => None,
        (Some(k), None) => Some(dialects(k)),
        (None, Some(t)) => Some(dialects(t)),
        (Some(k), Some(t)) => Some(
            dialects(k)
                .into_iter()
                .filter(|d| dialects(t).contains(d))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::config::tests::GOOD;

    #[test]
    fn x4_a_keys_data_boundary_is_its_own_and_its_tenants_intersected() {
        use portcullis_core::Dialect::{Anthropic, OpenAi};
        let text = r#"
[tenants.eu]
balance = 1
allowed_vendors = ["openai", "anthropic"]

[tenants.any]
balance = 1

[keys.both]
key = "sk-both"
tenant = "eu"
allowed_vendors = ["anthropic", "gemini"]

[keys.tenant-only]
key = "sk-tenant-only"
tenant = "eu"

[keys.own-only]
key = "sk-own-only"
tenant = "any"
allowed_vendors = ["openai"]

[keys.none]
key = "sk-none"
tenant = "any"
"#;
        let c = Config::parse(text).expect("config");
        let boundary = |s: &str| c.keys[s].allowed_vendors.clone();
        assert_eq!(boundary("sk-both"), Some(vec![Anthropic]));
        assert_eq!(boundary("sk-tenant-only"), Some(vec![OpenAi, Anthropic]));
        assert_eq!(boundary("sk-own-only"), Some(vec![OpenAi]));
        assert_eq!(boundary("sk-none"), None);
        assert!(
            Config::parse("[keys.k]\nkey = \"sk-k\"\nallowed_vendors = [\"mistral\"]\n").is_err(),
            "an unknown vendor is a configuration error"
        );
    }

    #[test]
    fn x1_upstream_models_name_served_models_by_valid_ids() {
        let channel = |ids: &str| {
            format!(
                "[channels.a]\nvendor = \"gemini\"\nbase_url = \"fake://\"\n\
                 models = [\"smart\"]\nupstream_models = {ids}\n\
                 [models.smart]\nprice = {{ input_per_mtok = 1 }}\n"
            )
        };
        let c = Config::parse(&channel(r#"{ smart = "gemini-2.5-flash@001" }"#)).expect("valid");
        assert_eq!(
            c.channels[0].upstream_models["smart"],
            "gemini-2.5-flash@001"
        );
        for (ids, reason) in [
            (r#"{ other = "x" }"#, "not among"),
            (r#"{ smart = "" }"#, "is not a model id"),
            (r#"{ smart = "a/b" }"#, "is not a model id"),
            (r#"{ smart = "m:generateContent" }"#, "is not a model id"),
            (r#"{ smart = "a b" }"#, "is not a model id"),
        ] {
            let e = Config::parse(&channel(ids)).expect_err(ids).to_string();
            assert!(e.contains(reason), "{ids}: {e}");
        }
    }

    #[test]
    fn p4_metrics_token_is_checked_like_the_admin_token() {
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
                "[server]\nmetrics_token_env = \"PORTCULLIS_TEST_UNSET_METRICS_TOKEN\"\n",
                "is not set",
            ),
        ] {
            let e = Config::parse(text).expect_err(text);
            assert!(e.reason.contains(reason), "{text}: {e}");
            assert_eq!(e.line, Some(2), "{text}: {e}");
        }
    }

    #[test]
    fn p3_unknown_policy_reference_names_its_line() {
        let bad = GOOD.replace("policy = \"basic\"\n", "policy = \"gold\"\n");
        let e = Config::parse(&bad).unwrap_err();
        assert_eq!(e.line, Some(13), "{e}");
        assert!(e.reason.contains("unknown policy \"gold\""), "{e}");
    }

    #[test]
    fn p3_missing_env_credential_is_reported() {
        let e = Config::parse(&GOOD.replace(
            "credential = \"sk-upstream\"",
            "credential_env = \"PORTCULLIS_TEST_SURELY_UNSET\"",
        ))
        .unwrap_err();
        assert!(e.reason.contains("PORTCULLIS_TEST_SURELY_UNSET"), "{e}");
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

    /// The admin and metrics tokens read from the environment are trimmed like a
    /// client key: a secret file's trailing newline does not lock the operator out.
    #[test]
    fn p3_admin_and_metrics_tokens_from_env_are_trimmed() {
        let (admin, metrics) = (
            "PORTCULLIS_TEST_ADMIN_TOKEN_TRIMMED",
            "PORTCULLIS_TEST_METRICS_TOKEN_TRIMMED",
        );
        // SAFETY: only this test sets these variables (see the client key test).
        unsafe {
            std::env::set_var(admin, " admin-secret-0123456789\n");
            std::env::set_var(metrics, "metrics-secret-0123456789\n");
        }
        let text = format!(
            "[server]\nadmin_token_env = \"{admin}\"\nmetrics_token_env = \"{metrics}\"\n{GOOD}"
        );
        let c = Config::parse(&text).unwrap();
        assert_eq!(c.admin_token.as_deref(), Some("admin-secret-0123456789"));
        assert_eq!(
            c.metrics_token.as_deref(),
            Some("metrics-secret-0123456789")
        );
    }

    /// A client key read from the environment is trimmed of surrounding whitespace (a
    /// trailing newline from a secret file would otherwise never match), and one that
    /// is empty after trimming is a config error naming the variable and the key's line.
    #[test]
    fn p3_client_key_from_env_is_trimmed_or_refused_when_blank() {
        let (set, blank) = (
            "PORTCULLIS_TEST_KEY_ENV_TRIMMED",
            "PORTCULLIS_TEST_KEY_ENV_BLANK",
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
}
