//! The key schema (D3, D7): every Redis key the store writes, built in this one place.
//!
//! Every script's keys share one hash tag, so each script runs on one Cluster slot:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `<prefix>:{<subject>}:slots` | ZSET | a subject's slot leases (member `<instance>:<lease>`, score = expiry) |
//! | `<prefix>:{\0capacity\0<channel>}:slots` | ZSET | a channel's capacity leases (a subject no key can be) |
//! | `<prefix>:{<subject>}:win:<scope>` | string | a subject's window state (little-endian doubles) |
//! | `<state>:roll` | ZSET | its rolling log (W10) |
//! | `<state>:adm` | ZSET | its admission records (D9): admitting call id → admission time |
//! | `<books>tenant` | HASH | a tenant's balance, pending money, block money |
//! | `<books>key:<subject>` | HASH | a key's spend, pending money, block money |
//! | `<books>budget:<id>` | HASH | a budget's period start, spend and reservations |
//! | `<books>attempt:<id>` | HASH | an attempt's record |
//! | `<books>open` | ZSET | open attempts by deadline |
//! | `<books>pending` | HASH | attempts pending reconciliation → amount |
//! | `<books>done` | ZSET | tombstones of settled attempts (D10) |
//! | `<prefix>:{<billing tag>}:pending-books` | SET | books that have had pending attempts |
//! | `<prefix>:home:<object id>` | string | a provider-side object's home channel (P6) |
//!
//! `<books>` is `<prefix>:{tenant:<tenant>}:billing:` for a tenant's books and
//! `<prefix>:{<subject>}:keybilling:` for a key with no tenant (its slot is its own
//! slots' and windows'). Expiries are documented on [`RedisStore`](crate::RedisStore).

use portcullis_core::{AttemptId, AttemptRef, Books, Scope, SubjectKey};

/// The key names of one store: its prefix and its billing registry's tag.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    prefix: String,
    /// `<prefix>:{<billing tag>}:`, the start of the cross-tenant billing key.
    registry: String,
}

impl Keys {
    pub(crate) fn new(prefix: String, billing_tag: &str) -> Self {
        let registry = format!("{prefix}:{{{billing_tag}}}:");
        Self { prefix, registry }
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A subject's slot leases.
    pub(crate) fn slots(&self, subject: &SubjectKey) -> String {
        format!("{}:{{{}}}:slots", self.prefix, subject.as_str())
    }

    /// The subject a channel's capacity leases live under: the same lease scripts as
    /// the slots, under keys no subject can have (NUL bytes), each channel on its own
    /// Cluster slot (D3, D5).
    pub(crate) fn channel_subject(channel: &str) -> SubjectKey {
        SubjectKey::from(format!("\0capacity\0{channel}"))
    }

    /// A subject's window state under `scope`.
    pub(crate) fn window(&self, subject: &SubjectKey, scope: Scope) -> String {
        format!(
            "{}:{{{}}}:win:{}",
            self.prefix,
            subject.as_str(),
            scope.as_str()
        )
    }

    /// The keys every window script takes for the state key `state`: the state, its
    /// rolling log and its admission records.
    pub(crate) fn window_script(state: String) -> Vec<String> {
        let roll = format!("{state}:roll");
        let adm = format!("{state}:adm");
        vec![state, roll, adm]
    }

    /// The start of every key of `books` (D3).
    pub(crate) fn books(&self, books: &Books) -> String {
        match books {
            Books::Tenant(t) => format!("{}:{{tenant:{t}}}:billing:", self.prefix),
            Books::Key(k) => format!("{}:{{{}}}:keybilling:", self.prefix, k.as_str()),
        }
    }

    /// A tenant's balance.
    pub(crate) fn tenant(&self, tenant: &str) -> String {
        let mut k = self.books(&Books::Tenant(tenant.into()));
        k.push_str("tenant");
        k
    }

    /// An API key's spend in `books`.
    pub(crate) fn spend(&self, books: &Books, key: &SubjectKey) -> String {
        format!("{}key:{}", self.books(books), key.as_str())
    }

    /// A money budget in `books`.
    pub(crate) fn budget(&self, books: &Books, id: &str) -> String {
        format!("{}budget:{id}", self.books(books))
    }

    /// An attempt's record.
    pub(crate) fn attempt(&self, attempt: &AttemptRef) -> String {
        format!("{}attempt:{}", self.books(&attempt.books), attempt.attempt)
    }

    /// A books' open attempts by deadline.
    pub(crate) fn open(&self, books: &Books) -> String {
        format!("{}open", self.books(books))
    }

    /// A books' attempts pending reconciliation.
    pub(crate) fn pending(&self, books: &Books) -> String {
        format!("{}pending", self.books(books))
    }

    /// The keys the settlement script takes for `attempt`: its record, its books'
    /// pending list, open attempts and tombstones.
    pub(crate) fn settle(&self, attempt: &AttemptRef) -> Vec<String> {
        let base = self.books(&attempt.books);
        vec![
            format!("{base}attempt:{}", attempt.attempt),
            format!("{base}pending"),
            format!("{base}open"),
            format!("{base}done"),
        ]
    }

    /// The keys the reservation script takes for `attempt` of `subject` in `books`: the
    /// attempt's record, the tenant's balance (the record again with no tenant), the
    /// key's spend, the books' open attempts and pending list, then the budgets.
    pub(crate) fn reserve<'a>(
        &self,
        books: &Books,
        attempt: &AttemptId,
        subject: &SubjectKey,
        has_tenant: bool,
        budgets: impl ExactSizeIterator<Item = &'a str>,
    ) -> Vec<String> {
        let base = self.books(books);
        let record = format!("{base}attempt:{attempt}");
        let mut keys = Vec::with_capacity(5 + budgets.len());
        keys.push(record.clone());
        let [tenant, spend] = Self::payers(&base, subject, has_tenant, record);
        keys.extend([
            tenant,
            spend,
            format!("{base}open"),
            format!("{base}pending"),
        ]);
        keys.extend(budgets.map(|id| format!("{base}budget:{id}")));
        keys
    }

    /// The keys the account script takes: the tenant's balance (the key's spend again
    /// with no tenant), the key's spend, then the budgets.
    pub(crate) fn account<'a>(
        &self,
        books: &Books,
        subject: &SubjectKey,
        has_tenant: bool,
        budgets: impl ExactSizeIterator<Item = &'a str>,
    ) -> Vec<String> {
        let base = self.books(books);
        let spend = format!("{base}key:{}", subject.as_str());
        let mut keys = Vec::with_capacity(2 + budgets.len());
        keys.extend(Self::payers(&base, subject, has_tenant, spend));
        keys.extend(budgets.map(|id| format!("{base}budget:{id}")));
        keys
    }

    /// The keys the correction script takes for `attempt` of `subject` (B7): its
    /// marker, its record, the tenant's balance (the key's spend again when no tenant
    /// pays), the key's spend, then the budgets.
    pub(crate) fn correct<'a>(
        &self,
        attempt: &AttemptRef,
        subject: &SubjectKey,
        has_tenant: bool,
        budgets: impl ExactSizeIterator<Item = &'a str>,
    ) -> Vec<String> {
        let base = self.books(&attempt.books);
        let mut keys = Vec::with_capacity(4 + budgets.len());
        keys.push(format!("{base}corrected:{}", attempt.attempt));
        keys.push(format!("{base}attempt:{}", attempt.attempt));
        let spend = format!("{base}key:{}", subject.as_str());
        keys.extend(Self::payers(&base, subject, has_tenant, spend));
        keys.extend(budgets.map(|id| format!("{base}budget:{id}")));
        keys
    }

    /// The tenant's balance (`instead` with no tenant: a key the script never reads
    /// as a balance) and the key's spend, under the books' `base`.
    fn payers(base: &str, subject: &SubjectKey, has_tenant: bool, instead: String) -> [String; 2] {
        let tenant = if has_tenant {
            format!("{base}tenant")
        } else {
            instead
        };
        [tenant, format!("{base}key:{}", subject.as_str())]
    }

    /// The registry of books that have had pending attempts: the one billing key
    /// shared by every tenant.
    pub(crate) fn pending_registry(&self) -> String {
        format!("{}pending-books", self.registry)
    }

    /// A provider-side object's home.
    pub(crate) fn home(&self, id: &str) -> String {
        format!("{}:home:{id}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::hash_slot;

    #[test]
    fn d3_every_key_of_one_script_shares_its_slot() {
        let k = Keys::new("gw".into(), "billing");
        let s = SubjectKey::from("key-1");
        let state = k.window(&s, Scope::Key);
        assert_eq!(state, "gw:{key-1}:win:key");
        let slot = hash_slot(k.slots(&s).as_bytes());
        for key in Keys::window_script(state) {
            assert_eq!(hash_slot(key.as_bytes()), slot, "{key}");
        }
        let a = AttemptRef {
            attempt: "a1".into(),
            books: Books::Tenant("acme".into()),
        };
        let keys = k.settle(&a);
        assert_eq!(keys[0], k.attempt(&a));
        assert_eq!(keys[0], "gw:{tenant:acme}:billing:attempt:a1");
        for key in keys
            .iter()
            .chain([&k.tenant("acme"), &k.open(&a.books), &k.pending(&a.books)])
        {
            assert_eq!(
                hash_slot(key.as_bytes()),
                hash_slot(b"tenant:acme"),
                "{key}"
            );
        }
        assert_eq!(k.pending_registry(), "gw:{billing}:pending-books");
        let lone = Books::Key(s.clone());
        assert_eq!(k.spend(&lone, &s), "gw:{key-1}:keybilling:key:key-1");
        assert_eq!(hash_slot(k.spend(&lone, &s).as_bytes()), slot);
    }
}
