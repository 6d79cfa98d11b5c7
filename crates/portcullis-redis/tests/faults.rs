//! Faults (D4, T5): a dead, restarted, flushed or frozen Redis never makes a call wait
//! past its deadline, and decisions resume by themselves when Redis is back.

mod common;

use common::{LOADED_HOST_SLACK, RedisServer, until_ok};
use portcullis_core::{
    Admission, Demand, Dimension, Outcome, Policy, Scope, SlotDecision, SlotStore, StoreErrorKind,
    StoreResult, SubjectKey, Tier, WindowStore,
};
use portcullis_redis::{DEFAULT_DEADLINE, RedisStore, RedisStoreOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Decisions resume within this long of Redis answering again (T5, D4): the contract's
/// number, with no slack added — the clock starts once Redis answers (after the test's
/// own work of restarting or resuming it), and a loaded 2-core host took 20 ms at worst.
const RESUME_BOUND: Duration = Duration::from_secs(1);

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

/// One call fails with a store error within the deadline, plus what a loaded host adds
/// ([`LOADED_HOST_SLACK`]).
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
        took < deadline + LOADED_HOST_SLACK,
        "{what} took {took:?}, deadline {deadline:?} (+ {LOADED_HOST_SLACK:?} for a loaded host)"
    );
}

/// Every kind of call fails with a store error within the deadline (+ the loaded host's
/// slack).
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

/// Calls `admit` until it succeeds; returns how long that took. Called once Redis
/// answers again: what it measures is the store's own recovery (reconnecting, loading
/// its scripts again), from that event on.
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

/// D4: `NOSCRIPT` after `SCRIPT FLUSH` is recovered inside the call: the call is sent
/// again with the script's text (which caches it on that node) and the decision made,
/// state intact.
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
        calls("evalsha"),
        4,
        "each call first by its hash: {stats:?}"
    );
    assert_eq!(
        calls("eval"),
        4,
        "then, on NOSCRIPT, once more with the script's text — one per script used, \
         which caches it: {stats:?}"
    );
    assert_eq!(calls("script|load"), 0, "{stats:?}");
}

/// T5, D4: Redis killed → every call fails within its deadline; Redis back on the same
/// port (empty: no state, no scripts) → decisions resume within 1 s.
///
/// Bounds: each failed call's time, from the call to its error, to the deadline (20 ms)
/// + [`LOADED_HOST_SLACK`]; the recovery, from the restarted Redis answering `PING` to
/// the first decision made, to [`RESUME_BOUND`].
#[tokio::test]
async fn t5_redis_restart_fails_fast_then_resumes_within_1s() {
    let mut server = RedisServer::start();
    let s = RedisStore::connect(&server.url(), RedisStoreOptions::default())
        .await
        .unwrap();
    assert_eq!(s.deadline(), DEFAULT_DEADLINE);
    let key = SubjectKey::from("restart");
    // Setup, not the subject of a deadline: on a loaded host a 20 ms call may time out.
    until_ok("the first admit", || admit(&s, &key)).await;

    server.kill();
    every_call_fails_fast(&s, &key, "redis killed").await;
    // Still down a while later (reconnection backing off): still fast.
    tokio::time::sleep(Duration::from_millis(700)).await;
    every_call_fails_fast(&s, &key, "redis down for 1 s").await;

    server.restart();
    let took = time_to_recover(&s, &key).await;
    assert!(took < RESUME_BOUND, "decisions resumed after {took:?}");
    eprintln!("decisions resumed {took:?} after redis answered PING again");
    // Slots work too (their scripts were flushed with the restart). Not a deadline: each
    // try on a subject of its own, so a try that timed out on a loaded host after Redis
    // took its lease cannot make the next one find the slot full.
    let mut tries = 0;
    let decision = until_ok("an acquire after the restart", || {
        tries += 1;
        let key = SubjectKey::from(format!("restart-slot-{tries}"));
        let s = &s;
        async move { s.acquire(&key, 1, 60_000).await }
    })
    .await;
    assert!(
        matches!(decision, SlotDecision::Acquired(_)),
        "{decision:?}"
    );
}

/// D4: a frozen Redis (SIGSTOP: connection open, no answer) never holds a call past its
/// deadline; the error is `Timeout`. Once the node has been silent for two deadlines the
/// breaker opens and calls fail at once (`Unavailable`). After SIGCONT the same
/// connection serves again.
///
/// Bounds: a call that times out waited its deadline at least, and at most the deadline
/// + [`LOADED_HOST_SLACK`]; a call fails `Unavailable` only after a timeout that ended
/// two deadlines or more after Redis last answered (the breaker's rule, judged on the
/// silence the test saw rather than on the call's rank: on a loaded host the first call
/// alone may see two deadlines of silence — sending SIGSTOP through `kill(1)` takes
/// time too); most calls after that fail without waiting out a deadline; decisions
/// resume within [`RESUME_BOUND`] of SIGCONT.
#[tokio::test]
async fn d4_stalled_redis_times_out_at_the_deadline() {
    let server = RedisServer::start();
    let s = RedisStore::connect(&server.url(), RedisStoreOptions::default())
        .await
        .unwrap();
    let deadline = s.deadline();
    let key = SubjectKey::from("stall");
    // Redis's last answer came after `asked`: the silence the store sees at any later
    // instant is at most the time since `asked`.
    let mut asked = Instant::now();
    until_ok("the admit before the freeze", || {
        asked = Instant::now();
        admit(&s, &key)
    })
    .await;

    server.stop();
    let mut worst = Duration::ZERO;
    let mut fast = 0;
    // The longest silence (since `asked`) at the end of a call that timed out.
    let mut silence_at_a_timeout = Duration::ZERO;
    for i in 0..10 {
        let start = Instant::now();
        let e = admit(&s, &key).await.expect_err("admit on a frozen redis");
        let took = start.elapsed();
        worst = worst.max(took);
        assert!(
            took < deadline + LOADED_HOST_SLACK,
            "call {i} took {took:?} ({e})"
        );
        match e.kind() {
            // A call waits out its deadline while the breaker is closed (and as its
            // probe while it is open)…
            StoreErrorKind::Timeout => {
                assert!(
                    took >= deadline,
                    "call {i} gave up before the deadline: {took:?}"
                );
                silence_at_a_timeout = silence_at_a_timeout.max(asked.elapsed());
            }
            // …until one times out with the node silent for two deadlines: then the
            // breaker opens and calls fail at once instead of each paying the deadline.
            StoreErrorKind::Unavailable => {
                assert!(
                    silence_at_a_timeout >= 2 * deadline,
                    "call {i} failed fast before any call timed out on two deadlines \
                     of silence (longest: {silence_at_a_timeout:?})"
                );
                if took < deadline {
                    fast += 1;
                }
            }
            _ => panic!("call {i}: {e}"),
        }
    }
    assert!(
        fast >= 6,
        "the breaker made later calls fail fast: {fast} of 10"
    );
    every_call_fails_fast(&s, &key, "redis frozen").await;
    eprintln!("frozen redis: slowest admit returned after {worst:?}");

    server.cont();
    let took = time_to_recover(&s, &key).await;
    assert!(took < RESUME_BOUND, "decisions resumed after {took:?}");
}

/// D4: a store can start while Redis is down (`connect_lazy`); calls fail fast until
/// Redis comes up, then work without any action. `connect` itself fails within its
/// connect timeout instead of hanging.
///
/// Bounds: `connect`, from the call to its error, to the connect timeout +
/// [`LOADED_HOST_SLACK`]; each call of the lazy store, to the deadline (20 ms) + that
/// slack (with no Redis on the port they time out: nothing ever answered, so the
/// breaker has no silence to judge); decisions start within [`RESUME_BOUND`] of the
/// new Redis answering `PING` (its start-up is not counted).
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
    let took = start.elapsed();
    assert!(
        took < connect_timeout + LOADED_HOST_SLACK,
        "connect took {took:?}, connect timeout {connect_timeout:?} (+ {LOADED_HOST_SLACK:?} \
         for a loaded host): {e}"
    );

    let s = RedisStore::connect_lazy(&server.url(), RedisStoreOptions::default()).unwrap();
    let key = SubjectKey::from("lazy");
    every_call_fails_fast(&s, &key, "redis not started").await;
    server.restart();
    let took = time_to_recover(&s, &key).await;
    assert!(took < RESUME_BOUND, "decisions started after {took:?}");
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
    // Let the command reach the (frozen) server's socket, then give up on it: 500 ms,
    // well within the call's 5 s deadline, and long enough for a loaded host to write it.
    let _ = tokio::time::timeout(Duration::from_millis(500), pending).await;
    server.cont();
    // Not a deadline: the late script runs and the store removes its member soon after
    // Redis resumes; wait for that (generously), not for a fixed time.
    let start = Instant::now();
    loop {
        let last = s.in_flight(&key).await.unwrap();
        if last == 0 {
            break;
        }
        assert!(
            start.elapsed() < common::EVENTUALLY,
            "the late lease was not removed within {:?} ({last} in flight)",
            common::EVENTUALLY
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(matches!(
        s.acquire(&key, 1, 60_000).await.unwrap(),
        SlotDecision::Acquired(_)
    ));
}
