//! The books of the tenants as the records database tells them (B6): each tenant's
//! opening balance (the configuration's, or the one given when it was created), its
//! top-ups, and what the ledger says was charged and is pending. `GET /admin/books`
//! holds them against the store; a starting gateway seeds every tenant that has no
//! balance in its store from them, so a restart of the in-memory store (or a Redis that
//! lost a tenant's record) forgets nothing that was spent.

use crate::config::Config;
use portcullis_records::{Records, RecordsError};

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
}
