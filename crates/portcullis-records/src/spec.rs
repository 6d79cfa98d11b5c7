//! The records as the database and the admin API carry them.
//!
//! A key's settings (`KeySpec`) and a tenant's (`TenantSpec`) are what a key and a tenant
//! of the configuration file carry. They are checked here for what needs no
//! configuration (a limit of zero, an empty name); names that must resolve against the
//! configuration (a policy, a tenant of the file, a model, a vendor) are checked by the
//! gateway before it writes.

use crate::secret::Digest;
use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch.
pub type Millis = u64;

/// What a key carries besides its identity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySpec {
    /// A named policy of the configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The key's own requests per minute (a rolling 60 s window); `None` = off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u32>,
    /// The key's own concurrent requests; `None` = off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Spend cap in minor units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend_cap: Option<i64>,
    /// Models the key may use; empty = all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// A subscription: its policy takes precedence while it is active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription: Option<SubscriptionSpec>,
    /// `"route"` (default) or `"native"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<String>,
}

/// A key's subscription.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionSpec {
    /// The subscription's policy (a named policy of the configuration).
    pub policy: String,
    /// When it ends (ms); `None` = never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Millis>,
    /// Whether requests beyond its quota fall through to the key's own policy.
    #[serde(default)]
    pub pay_as_you_go: bool,
}

/// A key's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyState {
    /// Served.
    Active,
    /// Refused (401) from its revocation on; the record stays, for the audit trail and
    /// so that a stale read cannot bring it back.
    Revoked,
}

impl KeyState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Revoked => "revoked",
        }
    }

    pub(crate) fn parse(s: &str) -> Self {
        // Anything but "active" is not served.
        if s == "active" {
            Self::Active
        } else {
            Self::Revoked
        }
    }
}

/// A client key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    /// Its id (`key_…`): the name limits, usage records and logs use.
    pub id: String,
    /// Its tenant, if any.
    pub tenant: Option<String>,
    /// A name for people.
    pub label: String,
    /// Its settings.
    #[serde(flatten)]
    pub spec: KeySpec,
    /// When it stops working (ms); `None` = never.
    pub expires_at: Option<Millis>,
    /// Active or revoked.
    pub state: KeyState,
    /// Created (ms).
    pub created_at: Millis,
    /// Last changed (ms).
    pub updated_at: Millis,
    /// The revision of its last change.
    pub revision: u64,
}

impl KeyRecord {
    /// Whether the key is served at `now`.
    pub fn live_at(&self, now: Millis) -> bool {
        self.state == KeyState::Active && self.expires_at.is_none_or(|t| now < t)
    }
}

/// One secret of a key (a hash of it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretRecord {
    /// The keyed hash of the secret.
    pub hash: Digest,
    /// The key it opens.
    pub key_id: String,
    /// `None` for the current secret; for one rotated out, the end of its grace (ms).
    pub valid_until: Option<Millis>,
    /// The revision that wrote it.
    pub revision: u64,
}

impl SecretRecord {
    /// Whether the secret opens its key at `now`.
    pub fn valid_at(&self, now: Millis) -> bool {
        self.valid_until.is_none_or(|t| now < t)
    }
}

/// What a tenant carries besides its name (its balance lives in the store).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    /// Weight in the capacity queue's fair share; `None` = 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Money budgets every request of the tenant draws on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetSpec>,
}

/// A tenant budget.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetSpec {
    /// Its name within the tenant.
    pub name: String,
    /// Most money per period (minor units).
    pub limit: i64,
    /// The period in seconds, anchored at first use; `None` = never resets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_seconds: Option<u64>,
}

/// A tenant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantRecord {
    /// Its name.
    pub name: String,
    /// Its settings.
    #[serde(flatten)]
    pub spec: TenantSpec,
    /// Created (ms).
    pub created_at: Millis,
    /// Last changed (ms).
    pub updated_at: Millis,
    /// The revision of its last change.
    pub revision: u64,
}

/// A tenant-scoped management token (a hash of it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRecord {
    /// The keyed hash of the token.
    pub hash: Digest,
    /// Its id, the name the audit trail gives it.
    pub id: String,
    /// The tenant whose keys it manages.
    pub tenant: String,
    /// Active or revoked.
    pub state: KeyState,
    /// The revision that wrote it.
    pub revision: u64,
}

/// A rule a record breaks: the field, and why (the admin API's 400).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    /// The field, as the admin API names it.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl Invalid {
    pub(crate) fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            field,
            reason: reason.into(),
        }
    }
}

/// Longest label, tenant name or model name kept (characters).
pub const NAME_MAX: usize = 128;

fn name(field: &'static str, s: &str) -> Result<(), Invalid> {
    if s.trim().is_empty() {
        return Err(Invalid::new(field, "must not be empty"));
    }
    if s.chars().count() > NAME_MAX {
        return Err(Invalid::new(
            field,
            format!("longer than {NAME_MAX} characters"),
        ));
    }
    if s.chars().any(char::is_control) {
        return Err(Invalid::new(field, "must not hold control characters"));
    }
    Ok(())
}

/// The checks of a key that need no configuration.
pub fn check_key(label: &str, tenant: Option<&str>, spec: &KeySpec) -> Result<(), Invalid> {
    name("label", label)?;
    if let Some(t) = tenant {
        name("tenant", t)?;
    }
    if spec.rpm == Some(0) {
        return Err(Invalid::new(
            "rpm",
            "must be at least 1 (leave it out for no limit)",
        ));
    }
    if spec.concurrency == Some(0) {
        return Err(Invalid::new(
            "concurrency",
            "must be at least 1 (leave it out for no limit)",
        ));
    }
    if spec.spend_cap.is_some_and(|c| c < 0) {
        return Err(Invalid::new("spend_cap", "must not be negative"));
    }
    if spec.policy.is_some() && (spec.rpm.is_some() || spec.concurrency.is_some()) {
        return Err(Invalid::new(
            "policy",
            "a key has a named policy or its own rpm/concurrency, not both",
        ));
    }
    for m in &spec.models {
        name("models", m)?;
    }
    if let Some(e) = &spec.errors {
        if e != "route" && e != "native" {
            return Err(Invalid::new("errors", "must be \"route\" or \"native\""));
        }
    }
    Ok(())
}

/// The checks of a tenant that need no configuration.
pub fn check_tenant(name_: &str, spec: &TenantSpec) -> Result<(), Invalid> {
    name("name", name_)?;
    if spec.weight == Some(0) {
        return Err(Invalid::new("weight", "must be at least 1"));
    }
    for b in &spec.budgets {
        name("budgets", &b.name)?;
        if b.limit < 0 {
            return Err(Invalid::new(
                "budgets",
                "a budget's limit must not be negative",
            ));
        }
        if b.period_seconds == Some(0) {
            return Err(Invalid::new(
                "budgets",
                "a budget's period must be at least 1 s",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k3_key_checks_name_the_field() {
        let ok = KeySpec::default();
        assert_eq!(check_key("a", None, &ok), Ok(()));
        let field =
            |label: &str, spec: KeySpec| check_key(label, Some("t"), &spec).unwrap_err().field;
        assert_eq!(field("", ok.clone()), "label");
        assert_eq!(field(&"x".repeat(NAME_MAX + 1), ok.clone()), "label");
        assert_eq!(field("a\n", ok.clone()), "label");
        assert_eq!(
            field(
                "a",
                KeySpec {
                    rpm: Some(0),
                    ..ok.clone()
                }
            ),
            "rpm"
        );
        assert_eq!(
            field(
                "a",
                KeySpec {
                    concurrency: Some(0),
                    ..ok.clone()
                }
            ),
            "concurrency"
        );
        assert_eq!(
            field(
                "a",
                KeySpec {
                    spend_cap: Some(-1),
                    ..ok.clone()
                }
            ),
            "spend_cap"
        );
        assert_eq!(
            field(
                "a",
                KeySpec {
                    policy: Some("p".into()),
                    rpm: Some(5),
                    ..ok.clone()
                }
            ),
            "policy"
        );
        assert_eq!(
            field(
                "a",
                KeySpec {
                    errors: Some("x".into()),
                    ..ok.clone()
                }
            ),
            "errors"
        );
        assert_eq!(
            field(
                "a",
                KeySpec {
                    models: vec![String::new()],
                    ..ok.clone()
                }
            ),
            "models"
        );
        assert_eq!(check_key("a", Some(""), &ok).unwrap_err().field, "tenant");
        assert!(
            check_key(
                "a",
                None,
                &KeySpec {
                    rpm: Some(1),
                    concurrency: Some(1),
                    spend_cap: Some(0),
                    ..ok
                }
            )
            .is_ok()
        );
    }

    #[test]
    fn k3_tenant_checks_name_the_field() {
        let ok = TenantSpec::default();
        assert!(check_tenant("acme", &ok).is_ok());
        assert_eq!(check_tenant(" ", &ok).unwrap_err().field, "name");
        assert_eq!(
            check_tenant(
                "a",
                &TenantSpec {
                    weight: Some(0),
                    ..ok.clone()
                }
            )
            .unwrap_err()
            .field,
            "weight"
        );
        let budget = |limit, period_seconds| TenantSpec {
            budgets: vec![BudgetSpec {
                name: "m".into(),
                limit,
                period_seconds,
            }],
            ..TenantSpec::default()
        };
        assert_eq!(
            check_tenant("a", &budget(-1, None)).unwrap_err().field,
            "budgets"
        );
        assert_eq!(
            check_tenant("a", &budget(1, Some(0))).unwrap_err().field,
            "budgets"
        );
        assert!(check_tenant("a", &budget(0, Some(60))).is_ok());
    }

    #[test]
    fn k2_a_key_is_live_while_active_and_unexpired() {
        let mut k = KeyRecord {
            id: "key_1".into(),
            tenant: None,
            label: "l".into(),
            spec: KeySpec::default(),
            expires_at: Some(100),
            state: KeyState::Active,
            created_at: 0,
            updated_at: 0,
            revision: 1,
        };
        assert!(k.live_at(99) && !k.live_at(100));
        k.expires_at = None;
        assert!(k.live_at(u64::MAX));
        k.state = KeyState::Revoked;
        assert!(!k.live_at(0));
        assert_eq!(KeyState::parse("active"), KeyState::Active);
        assert_eq!(KeyState::parse("anything"), KeyState::Revoked);
        let s = SecretRecord {
            hash: Digest([0; 32]),
            key_id: "k".into(),
            valid_until: Some(10),
            revision: 1,
        };
        assert!(s.valid_at(9) && !s.valid_at(10));
    }
}
