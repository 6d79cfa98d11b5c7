//! Subjects and policy resolution (the contract's vocabulary: subject, policy; W8).

use crate::clock::Millis;
use crate::policy::Policy;
use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

/// The key limits are kept under: an API key, a tenant, a model pool — whatever the
/// application's extractor chooses (L6). Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubjectKey(Arc<str>);

impl SubjectKey {
    /// Wraps a key.
    pub fn new(s: impl Into<Arc<str>>) -> Self {
        Self(s.into())
    }
    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for SubjectKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SubjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SubjectKey({:?})", &*self.0)
    }
}

impl fmt::Display for SubjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for SubjectKey {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl From<String> for SubjectKey {
    fn from(s: String) -> Self {
        Self::new(s)
    }
}

/// A subscription attached to a subject: its policy beats the key's own.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Subscription {
    /// The plan's limits.
    pub policy: Arc<Policy>,
    /// End of the subscription (same axis as the store clock); `None` = open-ended.
    pub expires_at: Option<Millis>,
    /// "API billing": once the subscription quota is exhausted, fall through to the
    /// key's own policy and bill the balance instead of rejecting with 42906 (W8).
    pub pay_as_you_go: bool,
}

impl Subscription {
    /// A subscription to `policy`, open-ended, rejecting once its quota is exhausted.
    pub fn new(policy: impl Into<Arc<Policy>>) -> Self {
        Self {
            policy: policy.into(),
            expires_at: None,
            pay_as_you_go: false,
        }
    }
    /// Ends the subscription at `at` (same axis as the store clock); `None` =
    /// open-ended.
    pub fn with_expiry(mut self, at: impl Into<Option<Millis>>) -> Self {
        self.expires_at = at.into();
        self
    }
    /// "API billing" (W8): once the quota is exhausted, fall through to the key's own
    /// policy and bill the balance.
    pub fn with_pay_as_you_go(mut self, on: bool) -> Self {
        self.pay_as_you_go = on;
        self
    }
    /// Whether the subscription is in force at `now`.
    pub fn is_active(&self, now: Millis) -> bool {
        self.expires_at.is_none_or(|e| now < e)
    }
}

/// Whom the user-policy layers limit, with everything needed to decide.
///
/// Put it in the request's extensions (the proxy's auth step does), or let a
/// [`SubjectKey`] extractor build it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Subject {
    /// The key limits are counted under.
    pub key: SubjectKey,
    /// The tenant / account the key belongs to, if any.
    pub tenant: Option<Arc<str>>,
    /// The policy attached to the key by hand.
    pub policy: Option<Arc<Policy>>,
    /// The active subscription, if any.
    pub subscription: Option<Subscription>,
}

impl Subject {
    /// A subject with no policy (unlimited by the policy layers).
    pub fn new(key: impl Into<SubjectKey>) -> Self {
        Self {
            key: key.into(),
            tenant: None,
            policy: None,
            subscription: None,
        }
    }
    /// Attaches the key's own policy.
    pub fn with_policy(mut self, p: impl Into<Arc<Policy>>) -> Self {
        self.policy = Some(p.into());
        self
    }
    /// Attaches a subscription.
    pub fn with_subscription(mut self, s: Subscription) -> Self {
        self.subscription = Some(s);
        self
    }
    /// Sets the tenant.
    pub fn with_tenant(mut self, t: impl Into<Arc<str>>) -> Self {
        self.tenant = Some(t.into());
        self
    }

    /// The policies to enforce at `now`, in priority order (W8).
    pub fn resolve(&self, now: Millis) -> Resolved<'_> {
        match &self.subscription {
            Some(s) if s.is_active(now) => Resolved {
                primary: Some((Scope::Subscription, &s.policy)),
                fallback: if s.pay_as_you_go {
                    Fallback::KeyPolicy(self.policy.as_ref())
                } else {
                    Fallback::Reject
                },
            },
            _ => Resolved {
                primary: self.policy.as_ref().map(|p| (Scope::Key, p)),
                fallback: Fallback::Reject,
            },
        }
    }

    /// The policy whose concurrency limit applies at `now`: the active
    /// subscription's, else the key's.
    pub fn concurrency_limit(&self, now: Millis) -> u32 {
        self.resolve(now)
            .primary
            .map(|(_, p)| p.concurrency)
            .unwrap_or(0)
    }
}

/// Which policy a counter belongs to. Subscription and key counters are kept apart so
/// falling through to pay-as-you-go does not spend the subscription's windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// The subscription's policy.
    Subscription,
    /// The key's own policy.
    Key,
}

impl Scope {
    /// Stable name used in store keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Subscription => "sub",
            Scope::Key => "key",
        }
    }
}

/// Put in a request's extensions by the window layer: the policy scope the request
/// was admitted under. `Key` after a subscription fell through to pay-as-you-go (W8),
/// which billing then charges to the balance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmittedUnder(pub Scope);

/// What to do when the primary policy rejects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback<'a> {
    /// Reject (42906 for a subscription, 42902/42905 for a key policy).
    Reject,
    /// Pay-as-you-go: enforce the key's own policy instead (`None` = no limits).
    KeyPolicy(Option<&'a Arc<Policy>>),
}

/// The outcome of policy resolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved<'a> {
    /// The policy to try first; `None` = the policy layers do not limit this subject.
    pub primary: Option<(Scope, &'a Arc<Policy>)>,
    /// What happens when `primary` is exhausted.
    pub fallback: Fallback<'a>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Tier;

    fn sub(payg: bool, expires_at: Option<Millis>) -> Subscription {
        Subscription {
            policy: Arc::new(Policy::default().with_requests(Tier::per_hour(500))),
            expires_at,
            pay_as_you_go: payg,
        }
    }

    #[test]
    fn w8_active_subscription_beats_key_policy() {
        let key_policy = Arc::new(Policy::default().with_concurrency(9));
        let s = Subject::new("k")
            .with_policy(key_policy.clone())
            .with_subscription(sub(false, None));
        let r = s.resolve(0);
        assert_eq!(r.primary.unwrap().0, Scope::Subscription);
        assert_eq!(r.fallback, Fallback::Reject);
    }

    #[test]
    fn w8_expired_subscription_uses_key_policy() {
        let key_policy = Arc::new(Policy::default().with_concurrency(9));
        let s = Subject::new("k")
            .with_policy(key_policy)
            .with_subscription(sub(false, Some(100)));
        assert_eq!(s.resolve(99).primary.unwrap().0, Scope::Subscription);
        let r = s.resolve(100);
        assert_eq!(r.primary.unwrap().0, Scope::Key);
        assert_eq!(s.concurrency_limit(100), 9);
    }

    #[test]
    fn w8_pay_as_you_go_falls_through_to_key_policy() {
        let key_policy = Arc::new(Policy::default());
        let s = Subject::new("k")
            .with_policy(key_policy.clone())
            .with_subscription(sub(true, None));
        assert_eq!(
            s.resolve(0).fallback,
            Fallback::KeyPolicy(Some(&key_policy))
        );
        let bare = Subject::new("k").with_subscription(sub(true, None));
        assert_eq!(bare.resolve(0).fallback, Fallback::KeyPolicy(None));
    }

    #[test]
    fn no_policy_means_unlimited() {
        let s = Subject::new("k");
        assert!(s.resolve(0).primary.is_none());
        assert_eq!(s.concurrency_limit(0), 0);
    }
}
