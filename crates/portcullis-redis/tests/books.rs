//! D10: the books never lie. A settlement retried after a try whose answer never came
//! learns the attempt's final state from its tombstone; one that finds the attempt lost
//! (a failover took it before it was replicated) records an unknown outcome, pending
//! reconciliation and listed, never "settled".

mod common;

use common::{RedisServer, attempt, replicated, request};
use portcullis_core::{AttemptState, BillingDecision, BillingOutcome, BillingStore, SubjectKey};
use portcullis_redis::{RedisStore, RedisStoreOptions};
use std::time::{Duration, Instant};

async fn balance(s: &RedisStore) -> i64 {
    s.account(Some("acme"), &SubjectKey::from("k"), &[])
        .await
        .expect("account")
        .balance
        .expect("a balance")
}

/// How long the stores of the settlement tests wait for Redis: long enough for a
/// loaded host, short enough that a call on a frozen Redis gives up soon.
const WAITS: Duration = Duration::from_millis(500);

fn waits() -> RedisStoreOptions {
    RedisStoreOptions::default().deadline(WAITS)
}

/// A store on `server` with 1,000 in acme's balance and attempt `a` reserved (100). Its
/// calls wait for Redis up to [`WAITS`]: these tests are about a settlement whose
/// answer never came, which a frozen Redis gives whatever the deadline.
async fn reserved(server: &RedisServer, a: &str) -> RedisStore {
    let s = RedisStore::connect(&server.url(), waits())
        .await
        .expect("connect");
    s.set_balance("acme", 1_000).await.unwrap();
    assert_eq!(
        s.check_and_reserve(&request(a, 100)).await.unwrap(),
        BillingDecision::Admitted
    );
    s
}

/// Settles `a` with Redis frozen: the call fails (its answer never comes) and Redis
/// runs it once it is back, or — `lose` — finds the attempt gone, as after a failover
/// that lost its un-replicated write.
async fn settle_unanswered(server: &RedisServer, s: &RedisStore, a: &str, lose: bool) {
    if lose {
        let key = format!("portcullis:{{tenant:acme}}:billing:attempt:{a}");
        server.cli(&["DEL", &key]);
    }
    server.stop();
    let r = s
        .settle_attempt(&attempt(a), BillingOutcome::Settled(30))
        .await;
    assert!(r.is_err(), "Redis is frozen: {r:?}");
    server.cont();
    // Redis runs the frozen call (and any sent again) before the retry below.
    let start = Instant::now();
    while s.give_backs().waiting > 0 && start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn d10_a_retried_settlement_whose_answer_was_lost_learns_its_final_state() {
    let server = RedisServer::start();
    let s = reserved(&server, "a1").await;
    settle_unanswered(&server, &s, "a1", false).await;
    assert_eq!(
        s.settle_attempt(&attempt("a1"), BillingOutcome::Settled(30))
            .await
            .unwrap(),
        Some(AttemptState::Settled(30)),
        "the retry is told what the lost answer said"
    );
    assert_eq!(balance(&s).await, 970, "charged once");
    assert!(s.pending().await.unwrap().is_empty());
    // A settlement that is not a retry still does nothing to a final attempt.
    assert_eq!(
        s.settle_attempt(&attempt("a1"), BillingOutcome::Settled(30))
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn d10_a_retried_settlement_that_finds_its_attempt_lost_is_pending_not_settled() {
    let server = RedisServer::start();
    let s = reserved(&server, "a2").await;
    settle_unanswered(&server, &s, "a2", true).await;
    assert_eq!(
        s.settle_attempt(&attempt("a2"), BillingOutcome::Settled(30))
            .await
            .unwrap(),
        Some(AttemptState::Pending(30)),
        "an unknown outcome"
    );
    assert_eq!(
        balance(&s).await,
        1_000,
        "nothing charged without its attempt"
    );
    assert_eq!(
        s.pending().await.unwrap(),
        vec![(attempt("a2"), 30)],
        "listed for reconciliation"
    );
    // The first try's settlement, sent again later (it was kept for retries), leaves
    // the unknown outcome to the operator: still listed, nothing charged.
    let base = RedisStore::connect(&server.url(), waits()).await.unwrap();
    assert_eq!(
        base.settle_attempt(&attempt("a2"), BillingOutcome::Settled(30))
            .await
            .unwrap(),
        Some(AttemptState::Pending(30))
    );
    assert_eq!(s.pending().await.unwrap(), vec![(attempt("a2"), 30)]);
    assert_eq!(balance(&s).await, 1_000);
    let v = s
        .account(Some("acme"), &SubjectKey::from("k"), &[])
        .await
        .unwrap();
    assert_eq!(
        v.tenant_pending, 30,
        "counted against the balance as pending"
    );
    // The operator reconciles it: charged to the tenant, off the list.
    use portcullis_core::store::ReconcileStore;
    let r = s
        .reconcile(
            &attempt("a2"),
            portcullis_core::billing::Reconcile::Settle(30),
        )
        .await
        .unwrap();
    assert!(
        matches!(
            r,
            portcullis_core::billing::Reconciled::Settled { cost: 30, .. }
        ),
        "{r:?}"
    );
    assert!(s.pending().await.unwrap().is_empty());
    assert_eq!(balance(&s).await, 970);
    let v = s
        .account(Some("acme"), &SubjectKey::from("k"), &[])
        .await
        .unwrap();
    assert_eq!(v.tenant_pending, 0);
}

#[tokio::test]
async fn d10_a_settled_attempt_leaves_a_tombstone_that_expires() {
    let server = RedisServer::start();
    let s = reserved(&server, "a3").await;
    s.settle_attempt(&attempt("a3"), BillingOutcome::Settled(30))
        .await
        .unwrap();
    let done = "portcullis:{tenant:acme}:billing:done";
    assert_eq!(server.cli(&["ZCARD", done]).trim(), "1");
    let ttl: i64 = server.cli(&["PTTL", done]).trim().parse().unwrap();
    assert!(
        (100_000..=120_000).contains(&ttl),
        "tombstones kept for two minutes, then gone (D7): {ttl} ms"
    );
    assert_eq!(
        server
            .cli(&["EXISTS", "portcullis:{tenant:acme}:billing:attempt:a3"])
            .trim(),
        "0",
        "the attempt's record is gone"
    );
}

#[tokio::test]
async fn d10_with_replica_acks_a_write_is_answered_only_once_a_replica_holds_it() {
    let (master, replica) = replicated();
    // Not about a deadline: a frozen replica makes the master answer after the
    // replicas' wait, so both stores wait for Redis as long as a loaded host needs.
    let acked = RedisStore::connect(&master.url(), common::patient().replica_acks(1))
        .await
        .expect("connect");
    let plain = RedisStore::connect(&master.url(), common::patient())
        .await
        .expect("connect");
    plain.set_balance("acme", 1_000).await.unwrap();
    let wait_replica = || {
        let start = Instant::now();
        while !replica
            .cli(&["HGET", &plain.tenant_key("acme"), "bal"])
            .contains("1000")
        {
            assert!(start.elapsed() < Duration::from_secs(5), "replication");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    wait_replica();
    // Answered: the replica holds the reservation already.
    assert_eq!(
        acked.check_and_reserve(&request("r1", 100)).await.unwrap(),
        BillingDecision::Admitted
    );
    let attempt_key = "portcullis:{tenant:acme}:billing:attempt:r1";
    assert_eq!(replica.cli(&["EXISTS", attempt_key]).trim(), "1");
    assert_eq!(
        acked
            .settle_attempt(&attempt("r1"), BillingOutcome::Settled(40))
            .await
            .unwrap(),
        Some(AttemptState::Settled(40))
    );
    assert_eq!(replica.cli(&["EXISTS", attempt_key]).trim(), "0");
    assert_eq!(
        replica
            .cli(&["HGET", &plain.tenant_key("acme"), "bal"])
            .trim(),
        "960"
    );
    // A replica that cannot acknowledge (frozen): the write is not relied on — the
    // call fails — while a store that waits for no replica is answered.
    replica.stop();
    let e = acked
        .check_and_reserve(&request("r2", 100))
        .await
        .expect_err("no replica acknowledged");
    // A durability shortfall, told apart from an outage (the replica's own tests are in
    // `replica_acks.rs`).
    assert_eq!(
        e.kind(),
        portcullis_core::StoreErrorKind::Unacknowledged,
        "{e}"
    );
    assert!(
        acked.set_balance("acme", 5).await.is_err(),
        "a balance set is a write the gateway relies on too"
    );
    assert_eq!(
        plain.check_and_reserve(&request("r3", 100)).await.unwrap(),
        BillingDecision::Admitted
    );
    replica.cont();
}
