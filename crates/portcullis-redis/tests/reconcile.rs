//! Reconciliation on Redis beyond the conformance suite (B7, issue 14 item 8): the
//! pending amount is read from each books' counter — one `SMEMBERS` of the registry and
//! one `HMGET` per books, whatever the number of pending attempts — never from the
//! pending lists; and the counter goes away with the last pending attempt (D7).

mod common;

use common::{RedisServer, command_calls};
use portcullis_core::{
    AttemptRef, BillingOutcome, BillingRequest, BillingStore, Books, PendingTotal, Reconcile,
    ReconcileStore,
};
use portcullis_redis::RedisStore;

fn request(attempt: &str, tenant: &str) -> BillingRequest {
    BillingRequest {
        attempt: attempt.into(),
        tenant: Some(tenant.into()),
        key: "k".into(),
        spend_cap: None,
        budgets: Vec::new().into(),
        money: 10,
        bill_balance: true,
        lifetime_ms: portcullis_core::billing::DEFAULT_ATTEMPT_LIFETIME_MS,
        tenant_expected: false,
    }
}

fn calls(server: &RedisServer, command: &str) -> u64 {
    command_calls(&server.cli(&["INFO", "commandstats"]))
        .into_iter()
        .find(|(c, _, _)| c == command)
        .map_or(0, |(_, n, _)| n)
}

#[tokio::test]
async fn d10_pending_totals_read_one_counter_per_books_not_the_pending_lists() {
    let server = RedisServer::start();
    let s = RedisStore::connect(&server.url(), common::patient())
        .await
        .expect("connect");
    let mut refs = Vec::new();
    for t in ["acme", "globex"] {
        s.seed_balance(t, 1_000_000).await.unwrap();
        for i in 0..40 {
            let r = request(&format!("{t}-{i}"), t);
            s.check_and_reserve(&r).await.unwrap();
            s.settle_attempt(&r.attempt_ref(), BillingOutcome::Pending)
                .await
                .unwrap();
            refs.push(r.attempt_ref());
        }
    }
    server.cli(&["CONFIG", "RESETSTAT"]);
    let totals = s.pending_totals().await.unwrap();
    assert_eq!(
        totals,
        [
            (
                Books::Tenant("acme".into()),
                PendingTotal {
                    attempts: 40,
                    amount: 400
                }
            ),
            (
                Books::Tenant("globex".into()),
                PendingTotal {
                    attempts: 40,
                    amount: 400
                }
            ),
        ]
    );
    assert_eq!(
        (
            calls(&server, "smembers"),
            calls(&server, "hmget"),
            calls(&server, "hgetall")
        ),
        (1, 2, 0),
        "the registry, then one counter per books; no pending list read"
    );
    // The counter agrees with the list, and leaves with its last attempt.
    assert_eq!(s.pending().await.unwrap().len(), 80);
    for (i, a) in refs.iter().enumerate() {
        let how = if i % 2 == 0 {
            Reconcile::Settle(3)
        } else {
            Reconcile::WriteOff
        };
        s.reconcile(a, how).await.unwrap();
    }
    assert!(s.pending_totals().await.unwrap().is_empty());
    for t in ["acme", "globex"] {
        let k = s.pending_key(&Books::Tenant(t.into()));
        assert_eq!(server.cli(&["EXISTS", &k]).trim(), "0", "{k} is left");
    }
    let unknown = AttemptRef {
        attempt: "acme-0".into(),
        books: Books::Tenant("acme".into()),
    };
    assert_eq!(
        s.reconcile(&unknown, Reconcile::WriteOff).await.unwrap(),
        portcullis_core::Reconciled::NotPending
    );
}
