//! Object homes on Redis (P6): a home one instance learned is found by another,
//! expires with its TTL, and a later home replaces the earlier one.

mod common;

use common::RedisServer;
use portcullis_core::homes::{Home, HomeBook};
use portcullis_redis::{RedisStore, RedisStoreOptions};
use std::time::Duration;

async fn store(server: &RedisServer) -> RedisStore {
    RedisStore::connect(
        &server.url(),
        RedisStoreOptions::default().deadline(Duration::from_secs(1)),
    )
    .await
    .expect("connect")
}

fn home(channel: &str, model: &str) -> Home {
    Home {
        channel: channel.into(),
        model: model.into(),
    }
}

#[tokio::test]
async fn p6_a_home_learned_by_one_instance_is_found_by_another_until_its_ttl() {
    let server = RedisServer::start();
    let (a, b) = (store(&server).await, store(&server).await);
    assert_eq!(b.find("resp_1").await.unwrap(), None);
    a.remember("resp_1", home("openai-a", "gpt-4o"), 60_000)
        .await
        .unwrap();
    assert_eq!(
        b.find("resp_1").await.unwrap(),
        Some(home("openai-a", "gpt-4o"))
    );
    a.remember("resp_1", home("openai-b", "gpt-4o"), 150)
        .await
        .unwrap();
    assert_eq!(
        b.find("resp_1").await.unwrap(),
        Some(home("openai-b", "gpt-4o"))
    );
    let ttl: i64 = server
        .cli(&["PTTL", &a.home_key("resp_1")])
        .trim()
        .parse()
        .unwrap();
    assert!((1..=150).contains(&ttl), "PTTL {ttl}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.find("resp_1").await.unwrap(), None, "expired");
}

#[tokio::test]
async fn p6_a_malformed_home_is_a_store_error_not_a_wrong_channel() {
    let server = RedisServer::start();
    let a = store(&server).await;
    server.cli(&["SET", &a.home_key("video_1"), "no-newline"]);
    assert!(a.find("video_1").await.is_err());
}
