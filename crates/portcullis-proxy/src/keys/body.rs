//! A key as the admin API and `portcullis keys create` take it, and the checks that need
//! the running configuration (a policy, a tenant, a model that must exist). The checks
//! that need none are `portcullis_records::check_key`'s.

use crate::config::Config;
use portcullis_records::{Invalid, KeyRecord, KeySpec, Millis, NewKey, SubscriptionSpec};
use serde::{Deserialize, Serialize};

/// A key as the API takes it (create, and a patch overlaid on the stored key).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KeyBody {
    /// A name for people.
    pub label: String,
    /// Its tenant (of the file or of the database).
    #[serde(default)]
    pub tenant: Option<String>,
    /// A named policy of the configuration.
    #[serde(default)]
    pub policy: Option<String>,
    /// The key's own requests per minute.
    #[serde(default)]
    pub rpm: Option<u32>,
    /// The key's own concurrent requests.
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// Spend cap in minor units.
    #[serde(default)]
    pub spend_cap: Option<i64>,
    /// Models the key may use; empty = all.
    #[serde(default)]
    pub models: Vec<String>,
    /// A subscription.
    #[serde(default)]
    pub subscription: Option<SubscriptionBody>,
    /// RFC 3339.
    #[serde(default)]
    pub expires_at: Option<String>,
    /// `"route"` (default) or `"native"`.
    #[serde(default)]
    pub errors: Option<String>,
}

/// A key's subscription as the API takes it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionBody {
    /// Its policy (a named policy of the configuration).
    pub policy: String,
    /// RFC 3339; none = never ends.
    #[serde(default)]
    pub expires_at: Option<String>,
    /// Whether requests beyond its quota fall through to the key's own policy.
    #[serde(default)]
    pub pay_as_you_go: bool,
}

/// A time as the API shows it (RFC 3339, seconds).
pub fn rfc3339(ms: Millis) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

/// An RFC 3339 time, or the rule it breaks (naming `field`).
pub fn parse_time(field: &'static str, s: &str) -> Result<Millis, Invalid> {
    humantime::parse_rfc3339_weak(s)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .ok_or_else(|| Invalid {
            field,
            reason: format!("{s:?} is not an RFC 3339 time"),
        })
}

fn invalid(field: &'static str, reason: impl Into<String>) -> Invalid {
    Invalid {
        field,
        reason: reason.into(),
    }
}

impl KeyBody {
    /// The body a stored key would be given as.
    pub fn of(k: &KeyRecord) -> Self {
        Self {
            label: k.label.clone(),
            tenant: k.tenant.clone(),
            policy: k.spec.policy.clone(),
            rpm: k.spec.rpm,
            concurrency: k.spec.concurrency,
            spend_cap: k.spec.spend_cap,
            models: k.spec.models.clone(),
            subscription: k.spec.subscription.as_ref().map(|s| SubscriptionBody {
                policy: s.policy.clone(),
                expires_at: s.expires_at.map(rfc3339),
                pay_as_you_go: s.pay_as_you_go,
            }),
            expires_at: k.expires_at.map(rfc3339),
            errors: k.spec.errors.clone(),
        }
    }

    /// The key this body describes, checked against the running configuration and the
    /// database's tenants.
    pub fn into_key(self, config: &Config, db_tenants: &[String]) -> Result<NewKey, Invalid> {
        let policy_known = |field: &'static str, p: &str| {
            if config.policies().contains_key(p) {
                Ok(())
            } else {
                Err(invalid(field, format!("unknown policy {p:?}")))
            }
        };
        if let Some(p) = &self.policy {
            policy_known("policy", p)?;
        }
        if let Some(t) = &self.tenant {
            if !config.tenant_profiles().contains_key(t) && !db_tenants.contains(t) {
                return Err(invalid("tenant", format!("unknown tenant {t:?}")));
            }
        }
        for m in &self.models {
            if !config.models().contains_key(m) {
                return Err(invalid("models", format!("unknown model {m:?}")));
            }
        }
        let subscription = match self.subscription {
            None => None,
            Some(s) => {
                policy_known("subscription", &s.policy)?;
                Some(SubscriptionSpec {
                    policy: s.policy,
                    expires_at: s
                        .expires_at
                        .as_deref()
                        .map(|t| parse_time("subscription", t))
                        .transpose()?,
                    pay_as_you_go: s.pay_as_you_go,
                })
            }
        };
        let expires_at = self
            .expires_at
            .as_deref()
            .map(|t| parse_time("expires_at", t))
            .transpose()?;
        let key = NewKey {
            label: self.label,
            tenant: self.tenant,
            spec: KeySpec {
                policy: self.policy,
                rpm: self.rpm,
                concurrency: self.concurrency,
                spend_cap: self.spend_cap,
                models: self.models,
                subscription,
                errors: self.errors,
            },
            expires_at,
        };
        portcullis_records::check_key(&key.label, key.tenant.as_deref(), &key.spec)?;
        Ok(key)
    }
}

/// What a tenant's management token may give a key (K6): nothing its tenant does not
/// have. Named policies and subscriptions are the operator's plans — a tenant token keeps
/// the ones a key has and cannot give or change one; it sets the key's own limits (`rpm`,
/// `concurrency`: seed 002's quota and limits, which only restrict), and a spend cap of
/// at most `tenant_has` (the least of its tenant's balance and budget limits; `None`:
/// nothing to bound it). `before` is the stored key a patch changes (none: a creation).
pub fn tenant_may_grant(
    key: &KeySpec,
    before: Option<&KeySpec>,
    tenant_has: Option<i64>,
) -> Result<(), Invalid> {
    let policy_before = before.and_then(|b| b.policy.as_ref());
    if key.policy.as_ref() != policy_before {
        return Err(invalid(
            "policy",
            "a named policy is the operator's to give or change; a tenant's token sets \
             the key's own rpm and concurrency",
        ));
    }
    if key.subscription.as_ref() != before.and_then(|b| b.subscription.as_ref()) {
        return Err(invalid(
            "subscription",
            "a subscription is the operator's to give or change",
        ));
    }
    match (key.spend_cap, tenant_has) {
        (Some(cap), Some(has)) if cap > has && before.and_then(|b| b.spend_cap) != Some(cap) => {
            Err(invalid(
                "spend_cap",
                format!("at most what the tenant has ({has})"),
            ))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_records::SubscriptionSpec;

    fn spec() -> KeySpec {
        KeySpec::default()
    }

    #[test]
    fn k6_a_tenant_token_cannot_give_a_key_more_than_its_tenant_has() {
        // The key's own limits, and a cap within what the tenant has: granted.
        let own = KeySpec {
            rpm: Some(60),
            concurrency: Some(2),
            spend_cap: Some(500),
            ..spec()
        };
        assert_eq!(tenant_may_grant(&own, None, Some(500)), Ok(()));
        assert_eq!(
            tenant_may_grant(&own, None, None),
            Ok(()),
            "nothing bounds it"
        );
        // A cap above it: refused, naming the field and the bound.
        let e = tenant_may_grant(&own, None, Some(499)).unwrap_err();
        assert_eq!(e.field, "spend_cap");
        assert!(e.reason.contains("499"), "{}", e.reason);
        // A cap the key already had is kept through a patch of something else.
        assert_eq!(tenant_may_grant(&own, Some(&own), Some(10)), Ok(()));
        // A named policy or a subscription: not the tenant's to give …
        let policy = KeySpec {
            policy: Some("pro".into()),
            ..spec()
        };
        assert_eq!(
            tenant_may_grant(&policy, None, None).unwrap_err().field,
            "policy"
        );
        let sub = KeySpec {
            subscription: Some(SubscriptionSpec {
                policy: "plan".into(),
                expires_at: None,
                pay_as_you_go: false,
            }),
            ..spec()
        };
        assert_eq!(
            tenant_may_grant(&sub, None, None).unwrap_err().field,
            "subscription"
        );
        // … nor to change or take away; kept as the operator gave them, they pass.
        assert_eq!(
            tenant_may_grant(&spec(), Some(&policy), None)
                .unwrap_err()
                .field,
            "policy"
        );
        assert_eq!(
            tenant_may_grant(&spec(), Some(&sub), None)
                .unwrap_err()
                .field,
            "subscription"
        );
        assert_eq!(tenant_may_grant(&policy, Some(&policy), None), Ok(()));
        assert_eq!(tenant_may_grant(&sub, Some(&sub), None), Ok(()));
    }
}
