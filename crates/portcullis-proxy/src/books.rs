//! The books of the tenants as the records database tells them (B6): each tenant's
//! opening balance (the configuration's, or the one given when it was created), its
//! top-ups, and what the ledger says was charged and is pending. `GET /admin/books`
//! holds them against the store; a starting gateway seeds every tenant that has no
//! balance in its store from them, so a restart of the in-memory store (or a Redis that
//! lost a tenant's record) forgets nothing that was spent.

use crate::config::Config;
use crate::keys::body::rfc3339;
use portcullis::core::BillingStore;
use portcullis_records::{Outcome, Records, RecordsError, UsageQuery};
use serde::Serialize;
use serde_json::{Value, json};

/// One tenant's books, from the database.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledgered {
    /// The tenant.
    pub tenant: String,
    /// Its opening balance.
    pub start: i64,
    /// Its top-ups.
    pub top_ups: i64,
    /// Charged to its balance: settled and reconciled.
    pub settled: i64,
    /// Held at the upper bound for attempts pending reconciliation.
    pub pending: i64,
}

impl Ledgered {
    /// The balance the books leave it, its pending attempts held: what its store
    /// balance is, less the store's pending holds, when the books are exact.
    pub fn balance(&self) -> i64 {
        self.start + self.top_ups - self.settled - self.pending
    }
}

/// Every tenant's books: the configuration's tenants, then the database's.
pub async fn ledgered(records: &Records, config: &Config) -> Result<Vec<Ledgered>, RecordsError> {
    let mut books: Vec<Ledgered> = config
        .tenants()
        .iter()
        .map(|(name, &start)| Ledgered {
            tenant: name.clone(),
            start,
            ..Ledgered::default()
        })
        .collect();
    for t in records.tenants().await? {
        if !books.iter().any(|b| b.tenant == t.name) {
            books.push(Ledgered {
                tenant: t.name,
                ..Ledgered::default()
            });
        }
    }
    let money = records.ledger_money().await?;
    for b in &mut books {
        for e in records.money_events(&b.tenant).await? {
            let detail: serde_json::Value = serde_json::from_str(&e.detail).unwrap_or_default();
            match e.action.as_str() {
                "tenant.open" => b.start = detail["balance"].as_i64().unwrap_or(0),
                _ => b.top_ups += detail["amount"].as_i64().unwrap_or(0),
            }
        }
        if let Some((_, m)) = money
            .iter()
            .find(|((t, _), _)| t.as_deref() == Some(b.tenant.as_str()))
        {
            b.settled = m.settled;
            b.pending = m.pending;
        }
    }
    Ok(books)
}

/// One tenant's books held against its store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TenantBooks {
    /// The tenant.
    pub tenant: String,
    /// Its opening balance (the configuration's, or given when it was created).
    pub start: i64,
    /// Its top-ups (`POST /admin/tenants/{name}/top-up`).
    pub top_ups: i64,
    /// The store's balance less what it holds for pending attempts.
    pub balance: i64,
    /// What the ledger says was charged to the balance.
    pub settled: i64,
    /// What the ledger says is pending.
    pub pending: i64,
    /// What the store holds for pending attempts (equal to `pending` when exact).
    pub store_pending: i64,
    /// start + top_ups − (balance + settled + pending).
    pub difference: i64,
    /// `difference` is 0 and the ledger's pending is the store's.
    pub exact: bool,
    /// The ledger's pending attempts (at most 100), when the books are not exact.
    pub attempts: Vec<Value>,
}

impl TenantBooks {
    /// `l` held against the store's `balance` and its pending holds.
    pub fn of(l: Ledgered, balance: i64, store_pending: i64) -> Self {
        let balance = balance - store_pending;
        let difference = l.start + l.top_ups - (balance + l.settled + l.pending);
        Self {
            exact: difference == 0 && l.pending == store_pending,
            difference,
            balance,
            store_pending,
            tenant: l.tenant,
            start: l.start,
            top_ups: l.top_ups,
            settled: l.settled,
            pending: l.pending,
            attempts: Vec::new(),
        }
    }
}

/// One key's spend as the ledger tells it, held against its store (B6): what the
/// balance paid for its attempts — settled and pending — is what the store counts in
/// the key's spend and pending money (its spend cap's figures).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KeyBooks {
    /// The key (its id).
    pub key: String,
    /// Its tenant, `None` for a key with books of its own.
    pub tenant: Option<String>,
    /// What the ledger says was charged: settled and reconciled.
    pub settled: i64,
    /// What the ledger says is pending.
    pub pending: i64,
    /// The store's spend of the key.
    pub spent: i64,
    /// The store's pending money of the key.
    pub store_pending: i64,
    /// settled + pending − (spent + store_pending).
    pub difference: i64,
    /// `difference` is 0 and the ledger's pending is the store's.
    pub exact: bool,
}

impl KeyBooks {
    /// The ledger's `settled` and `pending` of `key` held against the store's `spent`
    /// and `store_pending`.
    pub fn of(
        tenant: Option<String>,
        key: String,
        (settled, pending): (i64, i64),
        (spent, store_pending): (i64, i64),
    ) -> Self {
        let difference = settled + pending - (spent + store_pending);
        Self {
            exact: difference == 0 && pending == store_pending,
            difference,
            key,
            tenant,
            settled,
            pending,
            spent,
            store_pending,
        }
    }
}

/// The spend every key starts with where its store has none: what the ledger says its
/// balance paid, settled and pending (B6), by its books. The pending attempts a store
/// lost are not in it any more; their holds stay charged, as in the tenants' balances
/// ([`Ledgered::balance`]).
pub async fn key_spends(
    records: &Records,
) -> Result<Vec<(portcullis::core::Books, portcullis::core::SubjectKey, i64)>, RecordsError> {
    Ok(records
        .key_money()
        .await?
        .into_iter()
        .map(|((tenant, key), m)| {
            let key = portcullis::core::SubjectKey::new(key.as_str());
            let books = portcullis::core::Books::of(tenant.as_deref(), &key);
            (books, key, m.settled + m.pending)
        })
        .collect())
}

/// The books check: every tenant's and every key's, and whether all are exact.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BooksReport {
    /// Every tenant's and every key's books are exact.
    pub exact: bool,
    /// Each tenant's.
    pub tenants: Vec<TenantBooks>,
    /// Each key's spend (every key the ledger has charged).
    pub keys: Vec<KeyBooks>,
}

/// Why the books could not be checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckError {
    /// The records database did not answer.
    Records(RecordsError),
    /// The store did not answer a balance.
    Store(String),
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Records(e) => write!(f, "the records database: {e}"),
            Self::Store(m) => f.write_str(m),
        }
    }
}

/// Checks every tenant's books (the database's) against `store`: opening balance +
/// top-ups = balance + settled + pending, and the ledger's pending = the store's. The
/// ledger as written so far: a check while requests run may see records on their way.
pub async fn check<St: BillingStore>(
    records: &Records,
    config: &Config,
    store: &St,
) -> Result<BooksReport, CheckError> {
    let nobody = portcullis::core::SubjectKey::new("");
    let mut report = BooksReport {
        exact: true,
        tenants: Vec::new(),
        keys: Vec::new(),
    };
    for l in ledgered(records, config)
        .await
        .map_err(CheckError::Records)?
    {
        let account = store
            .account(Some(&l.tenant), &nobody, &[])
            .await
            .map_err(|e| {
                CheckError::Store(format!(
                    "the store did not answer tenant {:?}'s balance: {e}",
                    l.tenant
                ))
            })?;
        let mut b = TenantBooks::of(l, account.balance.unwrap_or(0), account.tenant_pending);
        if !b.exact {
            report.exact = false;
            let q = UsageQuery {
                tenant: Some(b.tenant.clone()),
                outcome: Some(Outcome::Pending),
                ..UsageQuery::default()
            };
            let page = records
                .usage(&q, None, 100)
                .await
                .map_err(CheckError::Records)?;
            b.attempts = page
                .rows
                .iter()
                .map(|r| json!({"attempt": r.attempt, "key": r.key, "amount": r.amount, "at": rfc3339(r.at)}))
                .collect();
        }
        report.tenants.push(b);
    }
    for ((tenant, key), m) in records.key_money().await.map_err(CheckError::Records)? {
        let account = store
            .account(
                tenant.as_deref(),
                &portcullis::core::SubjectKey::new(key.as_str()),
                &[],
            )
            .await
            .map_err(|e| {
                CheckError::Store(format!("the store did not answer key {key:?}'s spend: {e}"))
            })?;
        let k = KeyBooks::of(
            tenant,
            key,
            (m.settled, m.pending),
            (account.key_spent, account.key_pending),
        );
        report.exact &= k.exact;
        report.keys.push(k);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn b6_the_books_balance_is_start_and_top_ups_less_settled_and_pending() {
        let b = Ledgered {
            tenant: "acme".into(),
            start: 1_000,
            top_ups: 250,
            settled: 300,
            pending: 155,
        };
        assert_eq!(b.balance(), 795);
    }

    #[test]
    fn b6_a_keys_books_are_exact_only_when_its_spend_and_pending_are_the_ledgers() {
        let k = |store| KeyBooks::of(None, "k".into(), (300, 155), store);
        let b = k((300, 155));
        assert_eq!((b.difference, b.exact), (0, true));
        // One unit spent that the ledger does not explain.
        let b = k((301, 155));
        assert_eq!((b.difference, b.exact), (-1, false));
        // The same total, but pending money the store counts as spent.
        let b = k((455, 0));
        assert_eq!((b.difference, b.exact), (0, false));
    }

    #[test]
    fn b6_books_are_exact_only_when_the_difference_is_zero_and_the_holds_agree() {
        let l = Ledgered {
            tenant: "acme".into(),
            start: 1_000,
            top_ups: 250,
            settled: 300,
            pending: 155,
        };
        // The store: 950 with 155 held, as the ledger says.
        let b = TenantBooks::of(l.clone(), 950, 155);
        assert_eq!((b.balance, b.difference, b.exact), (795, 0, true));
        // One unit more in the store than the books explain.
        let b = TenantBooks::of(l.clone(), 951, 155);
        assert_eq!((b.difference, b.exact), (-1, false));
        // The same total, but the store holds what the ledger says is settled.
        let b = TenantBooks::of(l, 950 + 5, 160);
        assert_eq!((b.difference, b.exact), (0, false));
    }
}
