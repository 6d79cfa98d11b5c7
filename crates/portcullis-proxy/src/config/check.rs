//! The value checks of the file as written: bounds a layer could not run with, settings
//! that may not be set, references between sections that do not resolve. Each check
//! names the setting at fault ([`At`]) and says why; the resolution turns the place into
//! the line of the file (`super::resolve`), so the checks read no text.

use super::raw::{
    BillingConfig, ChannelConfig, RawConfig, ReserveConfig, ServerConfig, TelemetryConfig,
};
use super::settings::{FailureModeConfig, ModelSettings, StoreSettings, UpstreamLimits};
use super::span::Span;
use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

/// Where a bad value is written.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum At {
    /// A setting, by its path (`"queue.max_wait"`: the key `max_wait` of `[queue]`).
    Setting(String),
    /// A whole entry of a table (`[channels.one]`): the table and the entry's name.
    Entry(&'static str, String),
    /// A place in the text known from the value's own span (`toml::Spanned`).
    Text(Option<Range<usize>>),
}

/// A value the gateway cannot run with: where, and why.
#[derive(Debug)]
pub(super) struct Bad {
    pub(super) at: At,
    pub(super) reason: String,
}

fn bad(at: At, reason: impl Into<String>) -> Bad {
    Bad {
        at,
        reason: reason.into(),
    }
}

fn setting(path: &str, reason: impl Into<String>) -> Bad {
    bad(At::Setting(path.to_owned()), reason)
}

/// Longest wait or timeout most settings take.
const DAY: Duration = Duration::from_secs(24 * 3600);

/// The settings of the layers, the server, the telemetry export and the store, in the
/// order they are reported.
pub(super) fn settings(raw: &RawConfig) -> Result<(), Bad> {
    let too_long = DAY;
    let f = &raw.failover;
    let b = &raw.billing;
    let checks: [(&str, bool, &str); 17] = [
        (
            "billing.unknown_grace",
            b.unknown_grace.is_zero() || b.unknown_grace > too_long,
            "billing.unknown_grace must be between 1ms and 24h",
        ),
        (
            "billing.unknown_give_up",
            b.unknown_give_up > 30 * too_long,
            "billing.unknown_give_up must be at most 30 days",
        ),
        (
            "billing.correct_within",
            b.correct_within > 30 * too_long,
            "billing.correct_within must be at most 30 days",
        ),
        (
            "billing.resolve_interval",
            b.resolve_interval.is_zero() || b.resolve_interval > Duration::from_secs(3600),
            "billing.resolve_interval must be between 1ms and 1h",
        ),
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
            raw.limits.lease_ttl < Duration::from_secs(1),
            "limits.lease_ttl must be at least 1s",
        ),
        (
            "queue.max_wait",
            raw.queue.max_wait > too_long,
            "queue.max_wait must be at most 24h",
        ),
        (
            "limits.slot_max_wait",
            raw.limits.slot_max_wait > too_long,
            "limits.slot_max_wait must be at most 24h",
        ),
        (
            "limits.rolling_max_wait",
            raw.limits.rolling_max_wait > too_long,
            "limits.rolling_max_wait must be at most 24h",
        ),
        (
            "store.deadline",
            raw.store.deadline.is_zero() || raw.store.deadline > Duration::from_secs(60),
            "store.deadline must be between 1ms and 60s",
        ),
        (
            "store.money_blocks",
            raw.store.money_blocks == Some(true) && !raw.store.blocks,
            "store.money_blocks needs store.blocks = true",
        ),
        (
            "database.poll",
            raw.database.poll.is_zero() || raw.database.poll > Duration::from_secs(1),
            "database.poll must be between 1ms and 1s (a change reaches every instance \
             within one poll at worst)",
        ),
        (
            "database.url",
            raw.database
                .url
                .as_deref()
                .is_some_and(|u| u.trim() != "none" && portcullis_records::Backend::of(u).is_err()),
            "database.url must be sqlite://PATH, postgres://… or \"none\"",
        ),
        (
            "store.replica_acks",
            raw.store.replica_acks > 16,
            "store.replica_acks must be at most 16",
        ),
    ];
    for (path, is_bad, reason) in checks {
        if is_bad {
            return Err(setting(path, reason));
        }
    }
    telemetry(&raw.telemetry)?;
    server(&raw.server)?;
    billing(&raw.billing)?;
    if raw.queue.default_deadline.is_some_and(|d| d > too_long) {
        return Err(setting(
            "queue.default_deadline",
            "queue.default_deadline must be at most 24h",
        ));
    }
    failure_modes(&raw.store)
}

/// The failure modes `[store]` may not take: capacity has no `local` mode, billing only
/// `closed` (B5).
fn failure_modes(store: &StoreSettings) -> Result<(), Bad> {
    if store.capacity_failure == FailureModeConfig::Local {
        return Err(setting(
            "store.capacity_failure",
            "store.capacity_failure cannot be `local`: channel capacity leases have no \
             in-process fallback; write `open` (admit without a lease) or `closed` (503)",
        ));
    }
    // Billing is fail-closed only (B5): `open` would forward calls that are never
    // settled and leave no usage record; `local` would decide money per instance.
    match store.billing_failure {
        FailureModeConfig::Closed => Ok(()),
        FailureModeConfig::Open => Err(setting(
            "store.billing_failure",
            "store.billing_failure cannot be `open`: billing is fail-closed only (B5); \
             with the store down a request would be sent unbilled, with no settlement \
             and no usage record. Remove the setting or write `closed`",
        )),
        FailureModeConfig::Local => Err(setting(
            "store.billing_failure",
            "store.billing_failure cannot be `local`: money must not be decided per \
             instance (B5)",
        )),
    }
}

/// `[billing]` (B8): a share between 0 and 1, at most one way of saying what output is
/// expected and only under `reserve = "estimate"` (under the upper bound it would be
/// ignored), a cap of at least one minor unit.
fn billing(b: &BillingConfig) -> Result<(), Bad> {
    let estimate = b.reserve == ReserveConfig::Estimate;
    if let Some(v) = b.expected_output_share {
        if !(0.0..=1.0).contains(&v) {
            return Err(setting(
                "billing.expected_output_share",
                format!(
                    "billing.expected_output_share must be between 0 and 1 (a share of the \
                     request's max output), not {v}"
                ),
            ));
        }
    }
    for (key, set) in [
        ("expected_output_share", b.expected_output_share.is_some()),
        ("expected_output_tokens", b.expected_output_tokens.is_some()),
    ] {
        if set && !estimate {
            return Err(setting(
                &format!("billing.{key}"),
                format!(
                    "billing.{key} is read only with billing.reserve = \"estimate\" (the \
                     upper bound expects every choice's max output); set the one or remove \
                     the other"
                ),
            ));
        }
    }
    if b.expected_output_share.is_some() && b.expected_output_tokens.is_some() {
        return Err(setting(
            "billing.expected_output_tokens",
            "set at most one of billing.expected_output_share or \
             billing.expected_output_tokens",
        ));
    }
    if b.reserve_cap.is_some_and(|c| c < 1) {
        return Err(setting(
            "billing.reserve_cap",
            "billing.reserve_cap must be at least 1 minor unit (remove it for no cap)",
        ));
    }
    Ok(())
}

/// The first bad serving bound of `[server]`.
fn server(s: &ServerConfig) -> Result<(), Bad> {
    let day = DAY;
    let spans = [
        ("stall_timeout", s.stall_timeout, day, "24h"),
        (
            "max_response_lifetime",
            s.max_response_lifetime,
            7 * day,
            "7d",
        ),
        ("h2_idle_timeout", s.h2_idle_timeout, day, "24h"),
    ];
    for (key, Span(d), most, written) in spans {
        if d.is_zero() || d > most {
            return Err(setting(
                &format!("server.{key}"),
                format!("server.{key} must be between 1ms and {written}"),
            ));
        }
    }
    if s.drain_timeout.0 > day {
        return Err(setting(
            "server.drain_timeout",
            "server.drain_timeout must be at most 24h",
        ));
    }
    if s.max_connections == 0 || s.max_connections > 1 << 24 {
        return Err(setting(
            "server.max_connections",
            "server.max_connections must be between 1 and 16777216",
        ));
    }
    Ok(())
}

/// `[telemetry]`: a ratio and an export timeout in their bounds, a collector address
/// this build can export to, a service name that says something.
fn telemetry(t: &TelemetryConfig) -> Result<(), Bad> {
    let at = |span| At::Text(Some(span));
    if let Some(r) = &t.sampling_ratio {
        let v = *r.get_ref();
        if !(0.0..=1.0).contains(&v) {
            return Err(bad(
                at(r.span()),
                format!("telemetry.sampling_ratio must be between 0 and 1, not {v}"),
            ));
        }
    }
    if let Some(e) = &t.export_timeout {
        let d = e.get_ref().0;
        if d.is_zero() || d > Duration::from_secs(60) {
            return Err(bad(
                at(e.span()),
                "telemetry.export_timeout must be between 1ms and 60s",
            ));
        }
    }
    if let Some(e) = &t.otlp_endpoint {
        check_endpoint(e.get_ref())
            .map_err(|r| bad(at(e.span()), format!("telemetry.otlp_endpoint: {r}")))?;
        if !cfg!(feature = "otel") {
            return Err(bad(
                at(e.span()),
                "telemetry.otlp_endpoint is set, but this build exports no traces: \
                 build portcullis with the `otel` feature",
            ));
        }
    }
    if t.service_name.as_deref().is_some_and(str::is_empty) {
        return Err(bad(
            At::Text(None),
            "telemetry.service_name must not be empty",
        ));
    }
    Ok(())
}

/// An OTLP/gRPC endpoint: `http://` or `https://`, a host, no path, query or fragment
/// (gRPC names the service in the path itself). The file's is checked here; the
/// exporter checks the one it reads from the environment with it too.
pub fn check_endpoint(e: &str) -> Result<(), String> {
    let uri: http::Uri = e
        .parse()
        .map_err(|err| format!("{e:?} is not a URL ({err})"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(format!("{e:?} must start with http:// or https://")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{e:?} names no host"));
    }
    if !uri.path().trim_matches('/').is_empty() || uri.query().is_some() {
        return Err(format!(
            "{e:?} must be the collector's address only (no path or query)"
        ));
    }
    Ok(())
}

/// Every tenant a task names is a tenant of the file; a task that names none is shared
/// (allowed, with a warning in the log).
pub(super) fn tasks(raw: &RawConfig) -> Result<(), Bad> {
    for (name, task) in &raw.tasks {
        for t in task.tenant.iter().chain(&task.tenants) {
            if !raw.tenants.contains_key(t.get_ref()) {
                return Err(bad(
                    At::Text(Some(t.span())),
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
                "task names no tenant: any key may name it in x-portcullis-task; give it \
                 `tenant = \"…\"` or `tenants = [\"…\"]`"
            );
        }
    }
    Ok(())
}

/// `[vendors.*]`: a known vendor each, with limits that admit something.
pub(super) fn vendors(raw: &RawConfig) -> Result<(), Bad> {
    for (vendor, l) in &raw.vendors {
        let at = || At::Entry("vendors", vendor.clone());
        if !matches!(vendor.as_str(), "openai" | "anthropic" | "gemini") {
            return Err(bad(
                at(),
                format!("[vendors.{vendor}]: unknown vendor (openai, anthropic or gemini)"),
            ));
        }
        limits(l).map_err(|m| bad(at(), format!("[vendors.{vendor}]: {m}")))?;
    }
    Ok(())
}

/// A model's `fallback` names another `[models]` entry.
pub(super) fn fallbacks(raw: &RawConfig) -> Result<(), Bad> {
    for (id, m) in &raw.models {
        if let Some(to) = &m.fallback {
            if to == id || !raw.models.contains_key(to) {
                return Err(bad(
                    At::Entry("models", id.clone()),
                    format!("[models.{id}]: fallback {to:?} must name another [models] entry"),
                ));
            }
        }
    }
    Ok(())
}

/// A channel's limits, the models it serves (each with a `[models]` entry) and its base
/// URL.
pub(super) fn channel(
    name: &str,
    c: &ChannelConfig,
    models: &BTreeMap<String, ModelSettings>,
) -> Result<(), Bad> {
    let at = || At::Entry("channels", name.to_owned());
    limits(&c.limits).map_err(|m| bad(at(), format!("channel {name:?}: limits: {m}")))?;
    for (model, l) in &c.model_limits {
        // A served model, by its public name or by the id the channel serves it as.
        let served = c.models.iter().any(|m| m.get_ref() == model)
            || c.upstream_models.values().any(|id| id == model);
        if !served {
            return Err(bad(
                at(),
                format!(
                    "channel {name:?}: model_limits names {model:?}, which the channel does not serve"
                ),
            ));
        }
        limits(l).map_err(|m| bad(at(), format!("channel {name:?}: model_limits.{model}: {m}")))?;
    }
    for m in &c.models {
        if !models.contains_key(m.get_ref()) {
            return Err(bad(
                At::Text(Some(m.span())),
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
        return Err(bad(
            at(),
            format!("channel {name:?}: base_url must be http(s)://…"),
        ));
    }
    Ok(())
}

/// A limit of 0 would refuse every request: almost certainly a mistake.
fn limits(l: &UpstreamLimits) -> Result<(), String> {
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

/// The names of a table's entries, for an error about a reference to none of them.
pub(super) fn names<'a>(it: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<&str> = it.map(String::as_str).collect();
    if v.is_empty() {
        "none".to_owned()
    } else {
        v.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::config::tests::GOOD;

    #[test]
    fn b8_billing_settings_resolve_with_their_defaults() {
        use crate::reserve::{DEFAULT_EXPECTED_OUTPUT_SHARE, ExpectedOutput, Reservation, Reserve};
        let of = |billing: &str| {
            Config::parse(&format!("[billing]\n{billing}\n{GOOD}"))
                .unwrap_or_else(|e| panic!("{billing}: {e}"))
                .billing()
                .reservation
        };
        assert_eq!(
            Config::parse(GOOD).unwrap().billing().reservation,
            Reservation {
                reserve: Reserve::UpperBound,
                cap: None
            },
            "no [billing]: the upper bound, no cap"
        );
        assert_eq!(of(""), Reservation::default());
        assert_eq!(
            of("reserve = \"estimate\""),
            Reservation {
                reserve: Reserve::Estimate(DEFAULT_EXPECTED_OUTPUT_SHARE),
                cap: None
            }
        );
        assert_eq!(
            DEFAULT_EXPECTED_OUTPUT_SHARE,
            ExpectedOutput::Share(250_000)
        );
        assert_eq!(
            of("reserve = \"estimate\"\nexpected_output_share = 0.1\nreserve_cap = 250_000"),
            Reservation {
                reserve: Reserve::Estimate(ExpectedOutput::Share(100_000)),
                cap: Some(250_000)
            }
        );
        assert_eq!(
            of("reserve = \"estimate\"\nexpected_output_tokens = 2048"),
            Reservation {
                reserve: Reserve::Estimate(ExpectedOutput::Tokens(2048)),
                cap: None
            }
        );
        assert_eq!(
            of("reserve_cap = 1"),
            Reservation {
                reserve: Reserve::UpperBound,
                cap: Some(1)
            },
            "a cap applies to the upper bound too"
        );
    }

    #[test]
    fn b8_bad_billing_settings_are_refused_naming_the_field_at_its_line() {
        for (billing, field, reason) in [
            ("reserve = \"worst_case\"", "reserve", "unknown variant"),
            ("reserve = 3", "reserve", "invalid type"),
            ("reserve_cap = 0", "reserve_cap", "at least 1"),
            ("reserve_cap = -5", "reserve_cap", "at least 1"),
            ("reserve_cap = \"1000\"", "reserve_cap", "invalid type"),
            (
                "reserve = \"estimate\"\nexpected_output_share = 1.5",
                "expected_output_share",
                "between 0 and 1",
            ),
            (
                "reserve = \"estimate\"\nexpected_output_share = -0.1",
                "expected_output_share",
                "between 0 and 1",
            ),
            (
                "reserve = \"estimate\"\nexpected_output_share = nan",
                "expected_output_share",
                "between 0 and 1",
            ),
            (
                "reserve = \"estimate\"\nexpected_output_tokens = -1",
                "expected_output_tokens",
                "invalid value",
            ),
            (
                "reserve = \"estimate\"\nexpected_output_share = 0.5\nexpected_output_tokens = 9",
                "expected_output_tokens",
                "at most one",
            ),
            (
                "expected_output_share = 0.5",
                "expected_output_share",
                "only with billing.reserve = \"estimate\"",
            ),
            (
                "reserve = \"upper_bound\"\nexpected_output_tokens = 9",
                "expected_output_tokens",
                "only with billing.reserve = \"estimate\"",
            ),
            ("reserve_capp = 5", "reserve_capp", "unknown field"),
        ] {
            let text = format!("# the hold\n[billing]\n{billing}\n{GOOD}");
            let e = Config::parse(&text).expect_err(billing);
            assert!(e.reason.contains(reason), "{billing}: {e}");
            assert!(e.reason.contains(field), "{billing}: names {field}: {e}");
            let line = text
                .lines()
                .position(|l| l.starts_with(&format!("{field} =")))
                .map(|i| i + 1);
            assert_eq!(e.line, line, "{billing}: {e}");
        }
    }

    #[test]
    fn p3_channel_model_needs_a_price_entry() {
        let e = Config::parse(&GOOD.replace("models = [\"gpt-x\"]", "models = [\"gpt-y\"]"))
            .unwrap_err();
        assert!(e.reason.contains("gpt-y"), "{e}");
        assert_eq!(e.line, Some(20));
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

    #[test]
    fn d10_replica_acks_need_a_redis_store() {
        // Checked on the store the gateway opens: a `--store redis://…` given on the
        // command line overrides the file's `[store] url`.
        let mut c = Config::parse(&format!("[store]\nreplica_acks = 1\n{GOOD}")).unwrap();
        let e = crate::store::check_url(c.store()).unwrap_err().to_string();
        assert!(e.contains("replica_acks needs a Redis store"), "{e}");
        c.set_store_url("redis://127.0.0.1:6379");
        crate::store::check_url(c.store()).expect("the overriding URL is a Redis store");
        let c = Config::parse(&format!(
            "[store]\nurl = \"redis://127.0.0.1:6379\"\nreplica_acks = 1\n{GOOD}"
        ))
        .unwrap();
        assert_eq!(c.store().replica_acks, 1);
        assert_eq!(crate::store::redis_options(c.store()).get_replica_acks(), 1);
        let e = Config::parse(&format!(
            "[store]\nurl = \"redis://127.0.0.1:6379\"\nreplica_acks = 17\n{GOOD}"
        ))
        .unwrap_err();
        assert!(e.reason.contains("at most 16"), "{e}");
    }

    #[test]
    fn d10_the_replicas_wait_and_the_shortfall_policy_are_settings_of_a_redis_store() {
        let c = Config::parse(GOOD).unwrap();
        let o = crate::store::redis_options(c.store());
        assert_eq!(
            o.get_replica_ack_wait(),
            std::time::Duration::from_millis(100)
        );
        assert_eq!(
            o.get_unacknowledged(),
            portcullis_redis::Unacknowledged::Refuse,
            "refuse by default"
        );
        let c = Config::parse(&format!(
            "[store]\nurl = \"redis://127.0.0.1:6379\"\nreplica_acks = 1\n\
             replica_ack_wait = \"250ms\"\nunacknowledged = \"accept\"\n{GOOD}"
        ))
        .unwrap();
        let o = crate::store::redis_options(c.store());
        assert_eq!(
            o.get_replica_ack_wait(),
            std::time::Duration::from_millis(250)
        );
        assert_eq!(
            o.get_unacknowledged(),
            portcullis_redis::Unacknowledged::Accept
        );
        let e = Config::parse(&format!("[store]\nunacknowledged = \"maybe\"\n{GOOD}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected `refuse` or `accept`"), "{e}");
        // Each needs a Redis store, as the store the gateway opens (an overriding
        // `--store` is checked the same way).
        for setting in ["replica_ack_wait = \"1s\"", "unacknowledged = \"accept\""] {
            let mut c = Config::parse(&format!("[store]\n{setting}\n{GOOD}")).unwrap();
            let e = crate::store::check_url(c.store()).unwrap_err().to_string();
            let name = setting.split(' ').next().unwrap();
            assert!(
                e.contains(&format!("store.{name} needs a Redis store")),
                "{e}"
            );
            c.set_store_url("redis://127.0.0.1:6379");
            crate::store::check_url(c.store()).expect("a Redis store");
        }
    }

    #[test]
    fn d11_capacity_failure_is_open_or_closed_never_local() {
        let c = Config::parse(&format!("[store]\ncapacity_failure = \"closed\"\n{GOOD}")).unwrap();
        assert_eq!(c.store().capacity_failure, super::FailureModeConfig::Closed);
        let c = Config::parse(GOOD).unwrap();
        assert_eq!(
            c.store().capacity_failure,
            super::FailureModeConfig::Open,
            "the default"
        );
        let e =
            Config::parse(&format!("[store]\ncapacity_failure = \"local\"\n{GOOD}")).unwrap_err();
        assert!(e.reason.contains("capacity_failure"), "{e}");
    }

    /// B5: billing is fail-closed only; `billing_failure = "open"` is
    /// refused at start with the file, the line of the setting and the reason.
    #[test]
    fn b5_billing_failure_open_is_a_config_error() {
        let dir = std::env::temp_dir().join(format!("portcullis-cfg-b5-{}", std::process::id()));
        // A process of the same id may have left it (ids are reused): start empty.
        let _ = std::fs::remove_dir_all(&dir);
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
    fn d2_billing_blocks_need_quota_blocks() {
        let e = Config::parse(&format!(
            "[store]\nblocks = false\nmoney_blocks = true\n{GOOD}"
        ))
        .unwrap_err();
        assert!(e.reason.contains("money_blocks"), "{e}");
        let c = Config::parse(&format!("[store]\nmoney_blocks = true\n{GOOD}")).unwrap();
        assert!(c.store().money_blocks_on());
        let c = Config::parse(GOOD).unwrap();
        assert!(
            c.store().blocks && c.store().money_blocks_on(),
            "blocks and billing blocks on by default"
        );
        let c = Config::parse(&format!("[store]\nblocks = false\n{GOOD}")).unwrap();
        assert!(!c.store().money_blocks_on(), "off with quota blocks");
        let c = Config::parse(&format!("[store]\nmoney_blocks = false\n{GOOD}")).unwrap();
        assert!(c.store().blocks && !c.store().money_blocks_on());
    }
}
