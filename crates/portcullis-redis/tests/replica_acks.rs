//! D10: the replicas' acknowledgement of a write. A shard whose replicas do not
//! acknowledge is a durability shortfall, told apart from an outage: its own error
//! kind, counter and log line, a setting for what the store then does — and a host that
//! is merely busy is neither.

mod common;

use common::{CpuHogs, EVENTUALLY, attempt, replicated, request, until_ok};
use portcullis_core::{
    AttemptState, BillingDecision, BillingOutcome, BillingStore, SlotDecision, SlotStore,
    StoreErrorKind, SubjectKey,
};
use portcullis_redis::{RedisStore, RedisStoreOptions, Unacked, Unacknowledged};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A store on `url` that waits for one replica (50 ms), every decision a call. Its
/// calls wait for Redis up to 2 s ([`common::patient`]): these tests are about what the
/// replicas acknowledge, not about a deadline (a master whose replica is stopped still
/// answers, after the wait), so a loaded host must not fail them.
async fn acked(url: &str, what: Unacknowledged) -> RedisStore {
    let options = common::patient()
        .replica_acks(1)
        .replica_ack_wait(Duration::from_millis(50))
        .unacknowledged(what)
        .blocks(None);
    RedisStore::connect(url, options).await.expect("connect")
}

#[tokio::test]
async fn d10_a_replica_shortfall_refuses_admissions_as_unacknowledged_not_as_an_outage() {
    let (master, replica) = replicated();
    let store = acked(&master.url(), Unacknowledged::Refuse).await;
    store.set_balance("acme", 1_000).await.unwrap();
    assert_eq!(
        store.check_and_reserve(&request("r1", 100)).await.unwrap(),
        BillingDecision::Admitted
    );
    assert_eq!(store.unacknowledged(), Unacked::default());
    replica.stop();
    // An admission: refused, as a shortfall naming the node — not "redis is down".
    for a in ["r2", "r3"] {
        let e = store
            .check_and_reserve(&request(a, 100))
            .await
            .expect_err("no replica acknowledged");
        assert_eq!(e.kind(), StoreErrorKind::Unacknowledged, "{e}");
        assert!(e.to_string().contains(&master.port().to_string()), "{e}");
        assert!(!e.to_string().contains("down"), "{e}");
    }
    let e = store
        .acquire(&SubjectKey::from("s"), 5, 30_000)
        .await
        .expect_err("a slot is an admission too");
    assert_eq!(e.kind(), StoreErrorKind::Unacknowledged, "{e}");
    // A follow-up is taken: the settlement is on the master either way.
    assert_eq!(
        store
            .settle_attempt(&attempt("r1"), BillingOutcome::Settled(40))
            .await
            .unwrap(),
        Some(AttemptState::Settled(40))
    );
    // Reads wait for no replica, and the node is not taken for down: it answers.
    let account = store
        .account(Some("acme"), &SubjectKey::from("k"), &[])
        .await
        .expect("a read on a shard short of its replicas");
    assert_eq!(
        account.balance,
        Some(1_000 - 40),
        "r1 settled; r2 and r3 refused before the gateway relied on them (the layer \
         refunds what the master holds of them)"
    );
    let counted = store.unacknowledged();
    assert_eq!(counted.refused, 3, "{counted:?}");
    assert!(counted.taken >= 1, "{counted:?}");
    // The replica back: admissions are taken again, without an operator.
    replica.cont();
    let back = Instant::now();
    let r = until_ok("an admission once the replica is back", || {
        store.check_and_reserve(&request("r4", 100))
    })
    .await;
    assert_eq!(r, BillingDecision::Admitted);
    eprintln!(
        "admissions taken again {:?} after the replica resumed",
        back.elapsed()
    );
    let s = store
        .acquire(&SubjectKey::from("s"), 5, 30_000)
        .await
        .unwrap();
    assert!(matches!(s, SlotDecision::Acquired(_)), "{s:?}");
}

/// `WAIT` calls the master at `master` has taken so far (Redis counts a blocking
/// command when it is called, not when it answers).
fn waits(master: &portcullis_test_support::redis::RedisServer) -> u64 {
    portcullis_test_support::redis::command_calls(&master.cli(&["INFO", "commandstats"]))
        .into_iter()
        .find_map(|(name, calls, _)| (name == "wait").then_some(calls))
        .unwrap_or(0)
}

/// D10: replicas that acknowledged until now get a second wait before their shortfall
/// counts — a busy host can hold them up past one wait, and a shortfall refuses the
/// node's admissions for a while. A write whose replica answers during the second wait
/// is acknowledged, and nothing is counted short; a replica that misses both makes the
/// shortfall, after which a write waits once (the node's replicas known short).
// Two workers: the test reads Redis' counts through `redis-cli`, blocking its thread,
// while the admission it watches goes on on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d10_replicas_acknowledging_until_now_get_a_second_wait_before_a_shortfall_counts() {
    let (master, replica) = replicated();
    // Long enough for a thawed replica to answer within the second wait on a busy host
    // — and past the redis crate's own 500 ms bound on a reply, which must not cut it.
    // The deadline: generous for a Redis that answers, and the room two missed waits
    // have under the call's busy bound (deadline + 2 × (wait + Redis' 100 ms tick)).
    // Under 500 ms, so the call's silence bound (deadline + wait + tick: 1.15 s) is
    // shorter than two missed waits (1.2 s at least): it must start again when the
    // first wait is answered.
    let wait = Duration::from_millis(600);
    let options = RedisStoreOptions::default()
        .deadline(Duration::from_millis(450))
        .replica_acks(1)
        .replica_ack_wait(wait)
        .blocks(None);
    let store = Arc::new(
        RedisStore::connect(&master.url(), options)
            .await
            .expect("connect"),
    );
    store.set_balance("acme", 1_000).await.unwrap();
    let before = waits(&master);
    assert_eq!(
        store.check_and_reserve(&request("r0", 100)).await.unwrap(),
        BillingDecision::Admitted
    );
    assert_eq!(
        waits(&master),
        before + 1,
        "an acknowledged write waits once"
    );

    // The replica misses the first wait, then answers within the second.
    replica.stop();
    let before = waits(&master);
    let admission = tokio::spawn({
        let store = store.clone();
        async move { store.check_and_reserve(&request("r1", 100)).await }
    });
    let asked = Instant::now();
    while waits(&master) < before + 2 {
        assert!(
            !admission.is_finished(),
            "the admission ended after one wait: {:?}",
            admission.await
        );
        assert!(
            asked.elapsed() < EVENTUALLY,
            "no second wait within {EVENTUALLY:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    replica.cont();
    assert_eq!(
        admission
            .await
            .expect("the admission")
            .expect("acknowledged"),
        BillingDecision::Admitted
    );
    assert_eq!(waits(&master), before + 2);
    assert_eq!(
        store.unacknowledged(),
        Unacked::default(),
        "no shortfall counted"
    );

    // The replica misses both: the shortfall counts, and is refused.
    replica.stop();
    let waited = refused_unacknowledged(&store, &master, "r2").await;
    assert_eq!(waited, 2, "two waits, then a shortfall");
    assert_eq!(store.unacknowledged().refused, 1);
    // Once the node's writes ask again, a write whose replicas are known short waits
    // once.
    tokio::time::sleep(portcullis_redis::SHORTFALL_RECHECK * 2).await;
    let waited = refused_unacknowledged(&store, &master, "r3").await;
    assert_eq!(waited, 1, "one wait in a known shortfall");
    assert_eq!(store.unacknowledged().refused, 2);

    // The replica back, and acknowledging for a quiet second: the shortfall is over, and
    // a write waits twice again.
    replica.cont();
    until_ok("an admission once the replica is back", || {
        store.check_and_reserve(&request("r4", 100))
    })
    .await;
    tokio::time::sleep(portcullis_core::outage::OUTAGE_QUIET).await;
    store.check_and_reserve(&request("r5", 100)).await.unwrap();
    replica.stop();
    let waited = refused_unacknowledged(&store, &master, "r6").await;
    assert_eq!(waited, 2, "two waits once the shortfall was over");
    replica.cont();
}

/// The admission `id` of `store`, refused for want of a replica's acknowledgement:
/// how many `WAIT`s the master took for it.
async fn refused_unacknowledged(
    store: &RedisStore,
    master: &portcullis_test_support::redis::RedisServer,
    id: &str,
) -> u64 {
    let before = waits(master);
    let e = store
        .check_and_reserve(&request(id, 100))
        .await
        .expect_err("no replica acknowledged");
    assert_eq!(e.kind(), StoreErrorKind::Unacknowledged, "{e}");
    waits(master) - before
}

/// D9 with D10: a give-back the master takes while its replicas do not acknowledge is
/// sent again until a send is acknowledged (under `refuse`, the default) — a master
/// that was stalled past its node timeout takes such writes in the moment before it
/// learns it was replaced, and loses them with its place. Here: a lease released
/// while the replica is stopped is released on the master at once, and kept to send
/// again; once the replica is back, a send is acknowledged and nothing waits.
#[tokio::test]
async fn d10_a_give_back_taken_unacknowledged_is_sent_again_until_acknowledged() {
    let (master, replica) = replicated();
    let store = acked(&master.url(), Unacknowledged::Refuse).await;
    let key = SubjectKey::from("s");
    let SlotDecision::Acquired(lease) = store.acquire(&key, 5, 30_000).await.unwrap() else {
        panic!("a slot with the replica up");
    };
    replica.stop();
    store.release(&key, lease).await.unwrap();
    assert_eq!(
        store.in_flight(&key).await.unwrap(),
        0,
        "the master released the lease at once"
    );
    let kept = store.give_backs();
    assert_eq!(
        kept.waiting, 1,
        "the release, taken unacknowledged, is kept to send again: {kept:?}"
    );
    replica.cont();
    let back = Instant::now();
    loop {
        let now = store.give_backs();
        if now.waiting == 0 {
            assert!(now.landed >= 1, "{now:?}");
            assert_eq!(now.expired, 0, "{now:?}");
            break;
        }
        assert!(
            back.elapsed() < EVENTUALLY,
            "the release still waits {EVENTUALLY:?} after the replica came back: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn d10_with_unacknowledged_accept_a_shortfall_takes_every_write_and_counts_it() {
    let (master, replica) = replicated();
    let store = acked(&master.url(), Unacknowledged::Accept).await;
    store.set_balance("acme", 1_000).await.unwrap();
    replica.stop();
    for a in ["r1", "r2"] {
        assert_eq!(
            store.check_and_reserve(&request(a, 100)).await.unwrap(),
            BillingDecision::Admitted
        );
    }
    store
        .settle_attempt(&attempt("r1"), BillingOutcome::Settled(40))
        .await
        .unwrap();
    let counted = store.unacknowledged();
    assert_eq!(counted.refused, 0, "{counted:?}");
    assert_eq!(
        counted.taken, 3,
        "two reservations and a settlement: {counted:?}"
    );
    assert_eq!(
        store.give_backs().waiting,
        0,
        "under accept, a give-back taken unacknowledged is not sent again"
    );
    replica.cont();
}

/// A host busy with two CPU hogs beside the test, its Redis master and the replica:
/// with `replica_acks = 1` and the default deadline, 8 callers make billed decisions
/// (a reservation, then its settlement) — none is refused. The replica acknowledges
/// late on such a host, by a few to a few tens of ms: that is what the replicas' wait
/// (100 ms by default, on top of the deadline) is for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d10_a_busy_host_with_replica_acks_refuses_no_billed_decision() {
    const CALLERS: u64 = 8;
    const PER_CALLER: u64 = 250;
    let (master, _replica) = replicated();
    let store = RedisStore::connect(
        &master.url(),
        RedisStoreOptions::default().replica_acks(1).blocks(None),
    )
    .await
    .expect("connect");
    store.set_balance("acme", 1_000_000_000).await.unwrap();
    let _hogs = CpuHogs::start(2);
    let refused = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let callers: Vec<_> = (0..CALLERS)
        .map(|c| {
            let (store, refused, done) = (store.clone(), refused.clone(), done.clone());
            tokio::spawn(async move {
                // Bounded in count and in time.
                for i in 0..PER_CALLER {
                    if t0.elapsed() > EVENTUALLY * 3 {
                        break;
                    }
                    let a = format!("c{c}-{i}");
                    match store.check_and_reserve(&request(&a, 10)).await {
                        Ok(BillingDecision::Admitted) => {}
                        other => {
                            eprintln!("{a}: {other:?}");
                            refused.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    }
                    if let Err(e) = store
                        .settle_attempt(&attempt(&a), BillingOutcome::Settled(7))
                        .await
                    {
                        eprintln!("{a} settle: {e}");
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for c in callers {
        c.await.unwrap();
    }
    let (done, refused) = (
        done.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    eprintln!(
        "busy host: {done} billed decisions in {:?}, {refused} refused, unacknowledged {:?}",
        t0.elapsed(),
        store.unacknowledged()
    );
    assert_eq!(refused, 0, "a busy host is not an outage");
    assert!(
        done >= CALLERS * PER_CALLER / 2,
        "the load ran ({done} decisions)"
    );
    assert_eq!(store.unacknowledged(), Unacked::default());
}
