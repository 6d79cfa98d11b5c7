//! D11: the log tells per Redis node when it went down and when it came back, with
//! counts — one line each, whatever the number of calls.

mod common;

use common::{EVENTUALLY, RedisServer};
use portcullis_core::outage::OUTAGE_QUIET;
use portcullis_core::{SlotStore, SubjectKey};
use portcullis_redis::{RedisStore, RedisStoreOptions};
use portcullis_test_support::logs::capture;
use std::time::{Duration, Instant};

/// The lines logged of the node `host:port`.
fn of_node(node: &str) -> Vec<String> {
    let needle = format!("redis node {node} ");
    capture()
        .text()
        .lines()
        .filter(|l| l.contains(&needle))
        .map(str::to_owned)
        .collect()
}

/// Calls on `key` until one is answered, then for [`OUTAGE_QUIET`] more: an outage
/// ends on an answer that came a quiet period after its last failure.
async fn answered_again(store: &RedisStore, key: &SubjectKey) {
    let back = Instant::now();
    while store.in_flight(key).await.is_err() {
        assert!(back.elapsed() < EVENTUALLY, "never answered again");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let answered = Instant::now();
    while answered.elapsed() < OUTAGE_QUIET + Duration::from_millis(200) {
        let _ = store.in_flight(key).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d11_a_frozen_node_is_logged_once_down_and_once_back_with_its_failures() {
    capture();
    let redis = RedisServer::start();
    let store = RedisStore::connect(&redis.url(), RedisStoreOptions::default())
        .await
        .expect("connect");
    let key = SubjectKey::from("k");
    common::until_ok("warm-up", || store.in_flight(&key)).await;
    let node = format!("127.0.0.1:{}", redis.port());
    redis.stop();
    let mut failed = 0;
    for _ in 0..200 {
        if store.in_flight(&key).await.is_err() {
            failed += 1;
        }
    }
    assert!(
        failed > 190,
        "a frozen node fails its calls ({failed} of 200)"
    );
    redis.cont();
    answered_again(&store, &key).await;
    let logged = of_node(&node);
    assert_eq!(logged.len(), 2, "one line down, one back:\n{logged:#?}");
    assert!(
        logged[0].contains(" WARN ") && logged[0].contains("down"),
        "{logged:#?}"
    );
    assert!(
        logged[1].contains(" INFO ") && logged[1].contains("answers again"),
        "{logged:#?}"
    );
    let counted: u64 = logged[1]
        .split("failures=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("the failures counted");
    // Counted from the call that found it down (the breaker tripping after two
    // deadlines of silence): the one or two timeouts before it are a gap, not yet down.
    assert!(
        counted <= failed && counted + 3 >= failed,
        "the failed calls are counted: {counted} logged, {failed} seen"
    );
}
