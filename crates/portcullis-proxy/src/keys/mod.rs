//! Client keys from the records database (`[database]`), beside the file's own keys.
//!
//! A [`Directory`] opens the database, follows its changes
//! ([`portcullis_records::Follower`]) and publishes, after every change, a [`View`]: each
//! live secret's digest with the key entry it opens, resolved against the running
//! configuration (named policies, the file's tenants) exactly as a file key is. A
//! request finds its key in the view with one `ArcSwap` load and one map lookup; it
//! never waits for the database, and an unknown key costs no database call.
//!
//! The view is rebuilt from the replica when the configuration is reloaded, so a key
//! naming a policy follows the policy's new limits.

pub mod body;

use crate::config::{Config, KeyEntry};
use arc_swap::ArcSwap;
use portcullis_core::{Budget, Policy, Subject, Subscription};
use portcullis_records::{
    Backend, Digest, Follower, Hasher, KeyRecord, Millis, Records, Replica, TenantRecord,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One live secret of a database key.
#[derive(Clone, Debug)]
struct Opens {
    entry: Arc<KeyEntry>,
    /// The end of a rotated-out secret's grace.
    valid_until: Option<Millis>,
    /// The key's expiry.
    expires_at: Option<Millis>,
}

/// How long a change's answer waits for this instance to serve it: above the records
/// pool's 2 s acquire timeout, so a read of a database gone away fails first.
const SYNC_WITHIN: std::time::Duration = std::time::Duration::from_secs(3);

/// What requests look keys up in.
#[derive(Debug, Default)]
pub struct View {
    keys: HashMap<Digest, Opens>,
    tokens: HashMap<Digest, Token>,
}

/// A tenant-scoped management token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// Its id (the audit trail's name for it).
    pub id: String,
    /// The tenant whose keys it manages.
    pub tenant: String,
}

/// The records database and the view of it requests are served from.
pub struct Directory {
    records: Arc<Records>,
    view: Arc<ArcSwap<View>>,
    state: Arc<Mutex<Resolving>>,
    follower: Follower,
}

/// The last replica published and the configuration it is resolved against.
struct Resolving {
    replica: Replica,
    config: Config,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory")
            .field("records", &self.records)
            .finish_non_exhaustive()
    }
}

pub(crate) fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Directory {
    /// Opens the database `[database]` names (none: `Ok(None)`), applies its
    /// migrations, reads every key, and follows its changes from then on. An error names
    /// the database and why: a start with a database it cannot use stops.
    pub async fn open(config: &Config) -> Result<Option<Arc<Self>>, String> {
        let Some(records) = open_records(config).await? else {
            return Ok(None);
        };
        Self::follow(Arc::new(records), config.clone())
            .await
            .map(Some)
    }

    /// Follows `records`, resolving its keys against `config`.
    pub async fn follow(records: Arc<Records>, config: Config) -> Result<Arc<Self>, String> {
        let view = Arc::new(ArcSwap::from_pointee(View::default()));
        let poll = config.database().poll;
        let state = Arc::new(Mutex::new(Resolving {
            replica: Replica::default(),
            config,
        }));
        let (v, s) = (view.clone(), state.clone());
        let follower = Follower::start(records.clone(), poll, move |replica| {
            let mut s = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            s.replica = replica.clone();
            v.store(Arc::new(resolve_view(&s.replica, &s.config)));
        })
        .await
        .map_err(|e| format!("records database {}: {e}", records.url()))?;
        Ok(Arc::new(Self {
            records,
            view,
            state,
            follower,
        }))
    }

    /// The database.
    pub fn records(&self) -> &Arc<Records> {
        &self.records
    }

    /// The keyed hash its secrets are stored under.
    pub fn hasher(&self) -> &Hasher {
        self.records.hasher()
    }

    /// Resolves the keys against a reloaded configuration.
    pub fn set_config(&self, config: &Config) {
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.config = config.clone();
        self.view
            .store(Arc::new(resolve_view(&s.replica, &s.config)));
    }

    /// A change was written by this instance: follow it now, and return once this
    /// instance serves it (K8: its answer to the change comes after that), or once the
    /// read failed or [`SYNC_WITHIN`] passed — the change then arrives with a later read.
    pub async fn changed(&self) {
        if !self.follower.sync(SYNC_WITHIN).await {
            tracing::warn!(
                database = %self.records.url(),
                "a key change was written but this instance had not read it back within \
                 {SYNC_WITHIN:?}; it serves it from its next read"
            );
        }
    }

    /// Whether the last read of the database succeeded, and the revision served.
    pub fn status(&self) -> portcullis_records::FollowerStatus {
        self.follower.status()
    }

    /// The key a secret's digest opens at `now`.
    pub fn open_key(&self, digest: &Digest, now: Millis) -> Option<Arc<KeyEntry>> {
        let view = self.view.load();
        let o = view.keys.get(digest)?;
        let live = o.valid_until.is_none_or(|t| now < t) && o.expires_at.is_none_or(|t| now < t);
        live.then(|| o.entry.clone())
    }

    /// The tenant token a digest is.
    pub fn token(&self, digest: &Digest) -> Option<Token> {
        self.view.load().tokens.get(digest).cloned()
    }
}

/// The database `[database]` names (none: `Ok(None)`), opened with its migrations
/// applied and the hash secret its keys are stored under — what `portcullis keys create
/// --database` writes to without a running gateway. An error names the database.
pub async fn open_records(config: &Config) -> Result<Option<Records>, String> {
    let Some(url) = config.database().url.clone() else {
        return Ok(None);
    };
    let url = sqlite_relative_to(&url, config.source.as_deref());
    let hasher = hash_secret(config, &url)?;
    Records::open(&url, hasher).await.map(Some).map_err(|e| {
        format!(
            "records database {}: {e}",
            portcullis_records::redact_url(&url)
        )
    })
}

/// `sqlite://PATH` with a relative path is relative to the configuration file.
fn sqlite_relative_to(url: &str, source: Option<&Path>) -> String {
    match (url.strip_prefix("sqlite://"), source.and_then(Path::parent)) {
        (Some(path), Some(dir)) if !path.starts_with('/') && !path.starts_with(':') => {
            format!("sqlite://{}", dir.join(path).display())
        }
        _ => url.to_owned(),
    }
}

/// The hash secret: from `[database] hash_secret_env`; on SQLite without it, a file
/// beside the database (created on first start, readable by its owner only).
fn hash_secret(config: &Config, url: &str) -> Result<Hasher, String> {
    let var = &config.database().hash_secret_env;
    if let Ok(v) = std::env::var(var) {
        return Hasher::new(v.trim().as_bytes())
            .map_err(|e| format!("database.hash_secret_env ({var}): {e}"));
    }
    let path = match (Backend::of(url), url.strip_prefix("sqlite://")) {
        (Ok(Backend::Sqlite), Some(p)) if !p.starts_with(':') => {
            PathBuf::from(format!("{}.hash-secret", p.split('?').next().unwrap_or(p)))
        }
        _ => {
            return Err(format!(
                "database.hash_secret_env: set {var} (at least 16 bytes): every instance \
                 sharing a PostgreSQL database must hash keys with the same secret"
            ));
        }
    };
    let secret = match std::fs::read_to_string(&path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let s: String = portcullis_records::random::<32>()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            write_private(&path, &s).map_err(|e| format!("writing {}: {e}", path.display()))?;
            tracing::warn!(path = %path.display(), "created the key hash secret; keep it with the database");
            s
        }
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    Hasher::new(secret.trim().as_bytes()).map_err(|e| format!("{}: {e}", path.display()))
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path)?.write_all(text.as_bytes())
}

/// The view of a replica under a configuration: every live secret of every active key
/// that resolves. A key that no longer resolves (its policy was removed from the file)
/// is left out, with a warning: refused rather than served with limits it was not given.
fn resolve_view(replica: &Replica, config: &Config) -> View {
    let mut entries: HashMap<&str, Arc<KeyEntry>> = HashMap::new();
    for k in replica
        .keys()
        .filter(|k| k.state == portcullis_records::KeyState::Active)
    {
        let tenant = k.tenant.as_deref().and_then(|t| replica.tenant(t));
        match entry(k, tenant, config) {
            Ok(e) => {
                entries.insert(&k.id, Arc::new(e));
            }
            Err(why) => tracing::warn!(key = %k.id, reason = %why, "a database key is not served"),
        }
    }
    let keys = replica
        .secrets()
        .filter_map(|s| {
            let entry = entries.get(s.key_id.as_str())?.clone();
            let expires_at = replica.key(&s.key_id).and_then(|k| k.expires_at);
            Some((
                s.hash,
                Opens {
                    entry,
                    valid_until: s.valid_until,
                    expires_at,
                },
            ))
        })
        .collect();
    let tokens = replica
        .tokens()
        .map(|t| {
            (
                t.hash,
                Token {
                    id: t.id.clone(),
                    tenant: t.tenant.clone(),
                },
            )
        })
        .collect();
    View { keys, tokens }
}

/// A database key as the layers see it: what [`crate::config`] makes of a file key. Its
/// limits are counted under its id (never its secret), which a rotation keeps.
pub(crate) fn entry(
    k: &KeyRecord,
    db_tenant: Option<&TenantRecord>,
    config: &Config,
) -> Result<KeyEntry, String> {
    let policy = |name: &str| {
        config
            .policies()
            .get(name)
            .cloned()
            .ok_or_else(|| format!("unknown policy {name:?}"))
    };
    let mut subject = Subject::new(k.id.as_str());
    if let Some(p) = &k.spec.policy {
        subject.policy = Some(policy(p)?);
    } else if k.spec.rpm.is_some() || k.spec.concurrency.is_some() {
        let mut own = Policy::default().with_concurrency(k.spec.concurrency.unwrap_or(0));
        if let Some(rpm) = k.spec.rpm {
            own = own.with_rolling_rpm(rpm);
        }
        subject.policy = Some(Arc::new(own));
    }
    if let Some(s) = &k.spec.subscription {
        subject.subscription = Some(
            Subscription::new(policy(&s.policy)?)
                .with_expiry(s.expires_at)
                .with_pay_as_you_go(s.pay_as_you_go),
        );
    }
    let file_tenant = k
        .tenant
        .as_deref()
        .and_then(|t| config.tenant_profiles().get(t));
    if let Some(t) = &k.tenant {
        if file_tenant.is_none() && db_tenant.is_none() {
            return Err(format!("unknown tenant {t:?}"));
        }
        subject.tenant = Some(t.as_str().into());
    }
    let (weight, budgets, allowed_vendors): (u32, Vec<Budget>, _) = match (file_tenant, db_tenant) {
        (Some(f), _) => (f.weight, f.budgets.clone(), f.allowed_vendors.clone()),
        (None, Some(d)) => (
            d.spec.weight.unwrap_or(1),
            d.spec
                .budgets
                .iter()
                .map(|b| {
                    Budget::new(
                        format!("tenant:{}:{}", d.name, b.name),
                        b.limit,
                        b.period_seconds.map(|s| s * 1000),
                    )
                })
                .collect(),
            None,
        ),
        (None, None) => (1, Vec::new(), None),
    };
    Ok(KeyEntry {
        label: k.id.as_str().into(),
        subject,
        spend_cap: k.spec.spend_cap,
        billing: portcullis::BillingProfile::new()
            .with_spend_cap(k.spec.spend_cap)
            .with_budgets(budgets)
            .with_tenant_expected(k.tenant.is_some()),
        weight,
        models: k.spec.models.clone(),
        native_errors: k.spec.errors.as_deref() == Some("native"),
        allowed_vendors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k1_a_relative_sqlite_path_is_relative_to_the_configuration_file() {
        let src = Path::new("/etc/portcullis/gateway.toml");
        assert_eq!(
            sqlite_relative_to("sqlite://records.db", Some(src)),
            "sqlite:///etc/portcullis/records.db"
        );
        assert_eq!(
            sqlite_relative_to("sqlite:///var/r.db", Some(src)),
            "sqlite:///var/r.db"
        );
        assert_eq!(sqlite_relative_to("sqlite://r.db", None), "sqlite://r.db");
        assert_eq!(
            sqlite_relative_to("postgres://h/d", Some(src)),
            "postgres://h/d"
        );
    }
}
