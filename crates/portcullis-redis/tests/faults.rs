//! Faults (D4, T5): a dead, restarted, flushed or frozen Redis never makes a call wait
//! past its deadline, and decisions resume by themselves when Redis is back.

mod common;

use common::RedisServer;
use portcullis_core::{
    Admission, Demand, Dimension, Outcome, Policy, Scope, SlotDecision, SlotStore, StoreErrorKind,
    StoreResult, SubjectKey, Tier, WindowStore,
};
use portcullis_redis::{DEFAULT_DEADLINE, RedisStore, RedisStoreOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a loaded 2-core box may add to a deadline before the caller sees the error.
const SLACK: Duration = Duration::from_millis(50);

fn policy() -> Arc<Policy> {
    Arc::new(Policy::default().with_requests(Tier::per_minute(1_000)))
}

async fn admit(s: &RedisStore, key: &SubjectKey) -> StoreResult<Admission> {
    s.admit(key, Scope::Key, &policy(), &Demand::tokens(1))
        .await
}

fn requests_used(v: &[portcullis_core::LimitView]) -> u64 {
    v.iter()
        .find(|l| l.dimension == Dimension::Requests)
        .expect("requests line")
        .used
}

/// One call fails with a store error within the deadline (+ slack).
async fn fails_fast<T: std::fmt::Debug>(
    deadline: Duration,
    what: &str,
    call: impl std::future::Future<Output = StoreResult<T>>,
) {
    let start = Instant::now();
    let r = call.await;
    let took = start.elapsed();
    let e = r.expect_err(what);
    assert!(
        matches!(
            e.kind(),
            StoreErrorKind::Timeout | StoreErrorKind::Unavailable
        ),
        "{what}: {e}"
    );
    assert!(
        took < deadline + SLACK,
        "{what} took {took:?}, deadline {deadline:?}"
    );
}

/// Every kind of call fails with a store error within the deadline (+ slack).
async fn every_call_fails_fast(s: &RedisStore, key: &SubjectKey, what: &str) {
    let (p, d) = (policy(), s.deadline());
    let ticket = portcullis_core::WindowTicket {
        admitted_at: 0,
        anchors: [None; 3],
        demand: Demand::tokens(1),
        amount: false,
        money: 0,
        rolling: false,
        fallback: false,
        borrowed: 0,
        id: 0,
    };
    for round in 0..5 {
        let what = |call: &str| format!("{what}, round {round}: {call}");
        fails_fast(
            d,
            &what("admit"),
            s.admit(key, Scope::Key, &p, &Demand::tokens(1)),
        )
        .await;
        fails_fast(
            d,
            &what("settle"),
            s.settle(key, Scope::Key, ticket, Outcome::Refund),
        )
        .await;
        fails_fast(d, &what("view"), s.view(key, Scope::Key, &p)).await;
        fails_fast(d, &what("acquire"), s.acquire(key, 1, 60_000)).await;
        fails_fast(d, &what("renew"), s.renew(key, 1, 60_000)).await;
        fails_fast(d, &what("release"), s.release(key, 1)).await;
        fails_fast(d, &what("in_flight"), s.in_flight(key)).await;
    }
}

/// Calls `admit` until it succeeds; returns how long that took.
async fn time_to_recover(s: &RedisStore, key: &SubjectKey) -> Duration {
    let start = Instant::now();
    loop {
        if admit(s, key).await.is_ok() {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "decisions did not resume within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// D4: `NOSCRIPT` after `SCRIPT FLUSH` is recovered inside the call: the script is
/// loaded again and the decision made, state intact.
#[tokio::test]
async fn d4_noscript_after_script_flush_is_recovered() {
    let server = RedisServer::start();
    let s = RedisStore::connect(
        &server.url(),
        RedisStoreOptions::default().deadline(Duration::from_secs(1)),
    )
    .await
    .unwrap();
    let key = SubjectKey::from("noscript");
    assert!(matches!(
        admit(&s, &key).await.unwrap(),
        Admission::Admitted(_)
    ));
    assert!(matches!(
        s.acquire(&key, 1, 60_000).await.unwrap(),
        SlotDecision::Acquired(_)
    ));
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
    server.cli(&["CONFIG", "RESETSTAT"]);
    // Every script is gone: each call reloads its own.
    assert!(matches!(
        admit(&s, &key).await.unwrap(),
        Admission::Admitted(_)
    ));
    assert_eq!(
        s.acquire(&key, 1, 60_000).await.unwrap(),
        SlotDecision::Full { in_flight: 1 },
        "the lease survived the script flush"
    );
    assert_eq!(s.in_flight(&key).await.unwrap(), 1);
    let v = s.view(&key, Scope::Key, &policy()).await.unwrap();
    assert_eq!(
        requests_used(&v),
        2,
        "the window state survived the script flush"
    );
    let stats = common::command_calls(&server.cli(&["INFO", "commandstats"]));
    let calls = |c: &str| stats.iter().find(|s| s.0 == c).map_or(0, |s| s.1);
    assert_eq!(
        calls("script|load"),
        4,
        "one reload per script used: {stats:?}"
    );
    assert_eq!(
        calls("evalsha"),
        8,
        "NOSCRIPT, then the call again: {stats:?}"
    );
    assert_eq!(
        calls("eval"),
        0,
        "the script text is never sent with a call"
    );
}

/// T5, D4: Redis killed → every call fails within its deadline; Redis back on the same
/// port (empty: no state, no scripts) → decisions resume within 1 s.
#[tokio::test]
async fn t5_redis_restart_fails_fast_then_resumes_within_1s() {
    let mut server = RedisServer::start();
    let s = RedisStore::connect(&server.url(), RedisStoreOptions::default())
        .await
        .unwrap();
    assert_eq!(s.deadline(), DEFAULT_DEADLINE);
    let key = SubjectKey::from("restart");
    admit(&s, &key).await.unwrap();

    server.kill();
    every_call_fails_fast(&s, &key, "redis killed").await;
    // Still down a while later (reconnection backing off): still fast.
    tokio::time::sleep(Duration::from_millis(700)).await;
    every_call_fails_fast(&s, &key, "redis down for 1 s").await;

    server.restart();
    let took = time_to_recover(&s, &key).await;
    assert!(
        took < Duration::from_secs(1),
        "decisions resumed after {took:?}"
    );
    eprintln!("decisions resumed {took:?} after redis answered PING again");
    assert!(matches!(
        s.acquire(&key, 1, 60_000).await.unwrap(),
        SlotDecision::Acquired(_)
    ));
}

/// D4: a frozen Redis (SIGSTOP: connection open, no answer) never holds a call past its
/// deadline; the error is `Timeout`. After SIGCONT the same connection serves again.
#[tokio::test]
async fn d4_stalled_redis_times_out_at_the_deadline() {
    let server = RedisServer::start();
    let s = RedisStore::connect(&server.url(), RedisStoreOptions::default())
        .await
        .unwrap();
    let key = SubjectKey::from("stall");
    admit(&s, &key).await.unwrap();

    server.stop();
    let mut worst = Duration::ZERO;
    let mut fast = 0;
    for i in 0..10 {
        let start = Instant::now();
        let e = admit(&s, &key).await.expect_err("admit on a frozen redis");
        let took = start.elapsed();
        worst = worst.max(took);
        assert!(took < s.deadline() + SLACK, "took {took:?}");
        if i < 2 {
            // The first calls wait out their deadline, until the node has been silent
            // for two deadlines…
            assert_eq!(e.kind(), StoreErrorKind::Timeout, "{e}");
            assert!(
                took >= s.deadline(),
                "gave up before the deadline: {took:?}"
            );
        } else if took < s.deadline() / 2 {
            // …then the breaker opens and calls fail at once instead of each paying
            // the deadline again.
            assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
            fast += 1;
        }
    }
    assert!(
        fast >= 6,
        "the breaker made later calls fail fast: {fast} of 8"
    );
    every_call_fails_fast(&s, &key, "redis frozen").await;
    eprintln!("frozen redis: slowest admit returned Timeout after {worst:?}");

    server.cont();
    let took = time_to_recover(&s, &key).await;
    assert!(
        took < Duration::from_secs(1),
        "decisions resumed after {took:?}"
    );
}

/// D4: a store can start while Redis is down (`connect_lazy`); calls fail fast until
/// Redis comes up, then work without any action. `connect` itself fails within its
/// connect timeout instead of hanging.
#[tokio::test]
async fn d4_lazy_store_starts_before_redis() {
    let mut server = RedisServer::not_started();
    let start = Instant::now();
    let connect_timeout = Duration::from_millis(300);
    let e = RedisStore::connect(
        &server.url(),
        RedisStoreOptions::default().connect_timeout(connect_timeout),
    )
    .await
    .expect_err("connect with no redis");
    assert!(
        start.elapsed() < connect_timeout + SLACK,
        "connect took {:?}: {e}",
        start.elapsed()
    );

    let s = RedisStore::connect_lazy(&server.url(), RedisStoreOptions::default()).unwrap();
    let key = SubjectKey::from("lazy");
    every_call_fails_fast(&s, &key, "redis not started").await;
    server.restart();
    let took = time_to_recover(&s, &key).await;
    assert!(
        took < Duration::from_secs(1),
        "decisions started after {took:?}"
    );
}

/// L3 / D5: an acquire whose caller goes away before Redis answered (a client that
/// disconnected mid-decision, here while Redis is frozen) leaves no lease behind once
/// Redis runs the late script: the store removes the member it named.
#[tokio::test]
async fn l3_abandoned_acquire_leaves_no_lease() {
    let server = RedisServer::start();
    let opts = RedisStoreOptions::default().deadline(Duration::from_secs(5));
    let s = RedisStore::connect(&server.url(), opts).await.unwrap();
    let key = SubjectKey::from("abandoned");
    server.stop();
    let pending = s.acquire(&key, 1, 60_000);
    // Let the command reach the (frozen) server, then give up on it.
    let _ = tokio::time::timeout(Duration::from_millis(50), pending).await;
    server.cont();
    let mut last = u32::MAX;
    for _ in 0..50 {
        last = s.in_flight(&key).await.unwrap();
        if last == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(last, 0, "the late lease was removed");
    assert!(matches!(
        s.acquire(&key, 1, 60_000).await.unwrap(),
        SlotDecision::Acquired(_)
    ));
}
