//! D11: the log tells per Redis node when it went down and when it came back, with
//! counts — one line each, whatever the number of calls, and only for the node that
//! failed: on a Cluster, the calls answered by healthy masters between a dead master's
//! failures neither end its outage nor start one of their own.

mod common;

use common::{EVENTUALLY, RedisServer};
use portcullis_core::outage::OUTAGE_QUIET;
use portcullis_core::{SlotStore, SubjectKey};
use portcullis_redis::{RedisStore, RedisStoreOptions};
use portcullis_test_support::cluster::{self, RedisCluster};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d11_on_a_cluster_only_the_dead_master_is_logged_down_while_the_others_answer() {
    capture();
    let mut c = RedisCluster::start(3, 0);
    for m in c.master_ports() {
        c.cli(m, &["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    }
    // Not a test of the deadline: a generous one, so a loaded host's scheduling gaps do
    // not pass for a healthy master's silence (D8).
    let options = RedisStoreOptions::default()
        .blocks(None)
        .deadline(Duration::from_millis(200));
    let store = RedisStore::connect(&c.comma_urls(), options)
        .await
        .expect("connect");
    let ports = c.master_ports();
    let on = |port: u16| {
        (0..)
            .map(|i| SubjectKey::from(format!("s-{i}")))
            .find(|k| c.master_of_slot(cluster::key_slot(store.slots_key(k).as_bytes())) == port)
            .unwrap()
    };
    let (dead_key, healthy_key) = (on(ports[1]), on(ports[0]));
    // The store's first read of the slot owners, and a connection to each master.
    for k in [&dead_key, &healthy_key] {
        common::until_ok(&format!("warm-up on {k:?}"), || store.in_flight(k)).await;
    }
    let dead = format!("127.0.0.1:{}", ports[1]);
    c.kill(ports[1]);
    // Calls on the dead master and on a healthy one, interleaved, for 2 s.
    let (mut healthy_ok, mut dead_failed) = (0u32, 0u32);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        if store.acquire(&healthy_key, 1_000, 30_000).await.is_ok() {
            healthy_ok += 1;
        }
        if store.in_flight(&dead_key).await.is_err() {
            dead_failed += 1;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(healthy_ok > 50, "a healthy master answers ({healthy_ok})");
    assert!(dead_failed > 50, "the dead master fails ({dead_failed})");
    let logged = of_node(&dead);
    assert_eq!(
        logged.len(),
        1,
        "one line for the dead master, however its failures and the others' answers \
         interleave:\n{logged:#?}"
    );
    assert!(logged[0].contains("down"), "{logged:#?}");
    for healthy in [ports[0], ports[2]] {
        let logged = of_node(&format!("127.0.0.1:{healthy}"));
        assert!(
            logged.is_empty(),
            "a healthy master is not logged: {logged:#?}"
        );
    }
}
