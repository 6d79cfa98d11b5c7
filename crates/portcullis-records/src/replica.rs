//! The in-memory copy of the records an instance serves every lookup from.
//!
//! A request never waits for the database: it finds its key here. The copy is brought up
//! to date by [`Changes`] read from the database (everything stamped above the revision
//! held), and applying them is the one way it changes. Every row is applied only if its
//! revision is above the one held for it, so a read that started before a change and
//! arrives after it (a stale read, the way a revoked key comes back in other gateways'
//! caches) cannot undo it; a revoked key stays in the copy as a revoked record for the
//! same reason.
//!
//! An unknown key is answered from here as well, without asking the database: the copy
//! holds every key there is, so a flood of random keys costs no database call and no
//! memory.

use crate::secret::Digest;
use crate::spec::{KeyRecord, Millis, SecretRecord, TenantRecord, TokenRecord};
use std::collections::HashMap;

/// Rows changed since a revision, as the database returned them.
#[derive(Clone, Debug, Default)]
pub struct Changes {
    /// The revision these changes bring the copy to.
    pub revision: u64,
    /// Keys written.
    pub keys: Vec<KeyRecord>,
    /// Secrets written.
    pub secrets: Vec<SecretRecord>,
    /// Tenants written.
    pub tenants: Vec<TenantRecord>,
    /// Management tokens written.
    pub tokens: Vec<TokenRecord>,
}

impl Changes {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
            && self.secrets.is_empty()
            && self.tenants.is_empty()
            && self.tokens.is_empty()
    }
}

/// The copy.
#[derive(Clone, Debug, Default)]
pub struct Replica {
    revision: u64,
    keys: HashMap<String, KeyRecord>,
    secrets: HashMap<Digest, SecretRecord>,
    tenants: HashMap<String, TenantRecord>,
    tokens: HashMap<Digest, TokenRecord>,
}

/// Puts `row` under `k` unless the row held there is of the same or a later revision.
fn newer<K: Eq + std::hash::Hash, V>(
    map: &mut HashMap<K, V>,
    k: K,
    row: V,
    rev: impl Fn(&V) -> u64,
) -> bool {
    match map.get(&k) {
        Some(held) if rev(held) >= rev(&row) => false,
        _ => {
            map.insert(k, row);
            true
        }
    }
}

impl Replica {
    /// The revision the copy is at.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Applies `changes`; returns whether anything in the copy changed. A row older
    /// than (or as old as) the one held is ignored.
    pub fn apply(&mut self, changes: Changes) -> bool {
        let mut changed = false;
        for k in changes.keys {
            changed |= newer(&mut self.keys, k.id.clone(), k, |r| r.revision);
        }
        for s in changes.secrets {
            changed |= newer(&mut self.secrets, s.hash, s, |r| r.revision);
        }
        for t in changes.tenants {
            changed |= newer(&mut self.tenants, t.name.clone(), t, |r| r.revision);
        }
        for t in changes.tokens {
            changed |= newer(&mut self.tokens, t.hash, t, |r| r.revision);
        }
        self.revision = self.revision.max(changes.revision);
        changed
    }

    /// Drops the secrets whose grace ended before `now`: they open nothing any more.
    pub fn forget_expired_secrets(&mut self, now: Millis) {
        self.secrets.retain(|_, s| s.valid_at(now));
    }

    /// The key a secret's digest opens at `now`: a current secret (or one in its
    /// grace) of an active, unexpired key.
    pub fn open(&self, digest: &Digest, now: Millis) -> Option<&KeyRecord> {
        let s = self.secrets.get(digest)?;
        if !s.hash.matches(digest) || !s.valid_at(now) {
            return None;
        }
        self.keys.get(&s.key_id).filter(|k| k.live_at(now))
    }

    /// The tenant a management token's digest manages.
    pub fn token(&self, digest: &Digest) -> Option<&TokenRecord> {
        self.tokens
            .get(digest)
            .filter(|t| t.hash.matches(digest) && t.state == crate::spec::KeyState::Active)
    }

    /// A key by id (any state).
    pub fn key(&self, id: &str) -> Option<&KeyRecord> {
        self.keys.get(id)
    }

    /// A tenant by name.
    pub fn tenant(&self, name: &str) -> Option<&TenantRecord> {
        self.tenants.get(name)
    }

    /// Every key (any state).
    pub fn keys(&self) -> impl Iterator<Item = &KeyRecord> {
        self.keys.values()
    }

    /// Every secret held, with the key it opens.
    pub fn secrets(&self) -> impl Iterator<Item = &SecretRecord> {
        self.secrets.values()
    }

    /// Every active management token.
    pub fn tokens(&self) -> impl Iterator<Item = &TokenRecord> {
        self.tokens
            .values()
            .filter(|t| t.state == crate::spec::KeyState::Active)
    }

    /// Every tenant.
    pub fn tenants(&self) -> impl Iterator<Item = &TenantRecord> {
        self.tenants.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{KeySpec, KeyState};

    fn key(id: &str, state: KeyState, revision: u64) -> KeyRecord {
        KeyRecord {
            id: id.into(),
            tenant: None,
            label: "l".into(),
            spec: KeySpec::default(),
            expires_at: None,
            state,
            created_at: 0,
            updated_at: 0,
            revision,
        }
    }

    fn secret(b: u8, key_id: &str, valid_until: Option<Millis>, revision: u64) -> SecretRecord {
        SecretRecord {
            hash: Digest([b; 32]),
            key_id: key_id.into(),
            valid_until,
            revision,
        }
    }

    fn changes(revision: u64, keys: Vec<KeyRecord>, secrets: Vec<SecretRecord>) -> Changes {
        Changes {
            revision,
            keys,
            secrets,
            ..Changes::default()
        }
    }

    /// K4: a read that began before a revocation and is applied after it cannot bring
    /// the key back, however the two arrive.
    #[test]
    fn k4_a_stale_read_applied_after_a_revocation_does_not_revive_the_key() {
        let mut r = Replica::default();
        assert!(r.apply(changes(
            1,
            vec![key("k", KeyState::Active, 1)],
            vec![secret(1, "k", None, 1)]
        )));
        assert!(r.open(&Digest([1; 32]), 0).is_some());
        // The revocation (revision 2) lands first …
        assert!(r.apply(changes(2, vec![key("k", KeyState::Revoked, 2)], vec![])));
        assert!(r.open(&Digest([1; 32]), 0).is_none());
        // … then a read taken at revision 1 arrives: ignored.
        assert!(!r.apply(changes(
            1,
            vec![key("k", KeyState::Active, 1)],
            vec![secret(1, "k", None, 1)]
        )));
        assert!(
            r.open(&Digest([1; 32]), 0).is_none(),
            "the stale row changed nothing"
        );
        assert_eq!(r.revision(), 2, "the copy's revision never goes back");
        assert_eq!(r.key("k").unwrap().state, KeyState::Revoked);
    }

    /// K4: a row of the same revision is not applied twice; a later one replaces.
    #[test]
    fn k4_only_a_later_revision_replaces_a_row() {
        let mut r = Replica::default();
        r.apply(changes(3, vec![key("k", KeyState::Active, 3)], vec![]));
        assert!(!r.apply(changes(3, vec![key("k", KeyState::Revoked, 3)], vec![])));
        assert_eq!(r.key("k").unwrap().state, KeyState::Active);
        assert!(r.apply(changes(4, vec![key("k", KeyState::Revoked, 4)], vec![])));
        assert_eq!(r.key("k").unwrap().state, KeyState::Revoked);
    }

    /// K5: a rotated-out secret opens its key until its grace ends, the new one always;
    /// an expired key opens with neither.
    #[test]
    fn k5_rotation_grace_and_expiry() {
        let mut r = Replica::default();
        r.apply(changes(
            2,
            vec![key("k", KeyState::Active, 2)],
            vec![secret(1, "k", Some(1_000), 2), secret(2, "k", None, 2)],
        ));
        assert!(r.open(&Digest([1; 32]), 999).is_some());
        assert!(r.open(&Digest([1; 32]), 1_000).is_none());
        assert!(r.open(&Digest([2; 32]), 1_000).is_some());
        r.forget_expired_secrets(1_000);
        assert_eq!(r.secrets().count(), 1);
        let mut expiring = key("k", KeyState::Active, 3);
        expiring.expires_at = Some(5_000);
        r.apply(changes(3, vec![expiring], vec![]));
        assert!(r.open(&Digest([2; 32]), 4_999).is_some());
        assert!(r.open(&Digest([2; 32]), 5_000).is_none());
        assert!(
            r.open(&Digest([9; 32]), 0).is_none(),
            "an unknown digest opens nothing"
        );
    }

    #[test]
    fn k6_tokens_open_while_active() {
        let mut r = Replica::default();
        let t = |state, revision| TokenRecord {
            hash: Digest([7; 32]),
            id: "tok_1".into(),
            tenant: "acme".into(),
            state,
            revision,
        };
        r.apply(Changes {
            revision: 1,
            tokens: vec![t(KeyState::Active, 1)],
            ..Changes::default()
        });
        assert_eq!(r.token(&Digest([7; 32])).unwrap().tenant, "acme");
        r.apply(Changes {
            revision: 2,
            tokens: vec![t(KeyState::Revoked, 2)],
            ..Changes::default()
        });
        assert!(r.token(&Digest([7; 32])).is_none());
        assert!(Changes::default().is_empty());
    }
}
