//! D9: a handed request's settlement that reaches Redis before its block's hand-over
//! (the hand-over failed and waits to be sent again) finds no record of its own yet;
//! Redis answers "not yet" and the settlement is kept and sent again after the
//! hand-over, so it counts once and leaves no unit counted for a refunded request.

use super::test_common as common;

use super::RedisStore;
use crate::RedisStoreOptions;
use common::{RedisServer, until_ok};
use portcullis_core::blocks::BlockSizing;
use portcullis_core::{Demand, Outcome, Scope, SlotStore, SubjectKey, WindowStore};
use portcullis_test_support::link::Link;
use std::time::{Duration, Instant};

/// Polls `check` every 20 ms until it holds (10 s at most: not a deadline under test).
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < common::EVENTUALLY, "{what}: never");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn d9_a_handed_requests_settlement_that_overtakes_its_hand_over_is_sent_again_after_it() {
    let server = RedisServer::start();
    let link = Link::to(server.port());
    // The store under test reaches Redis over the link; the default 20 ms deadline.
    let s = RedisStore::connect(
        &link.url(),
        RedisStoreOptions::default().blocks(Some(BlockSizing::default())),
    )
    .await
    .expect("connect");
    let plain = RedisStore::connect(&server.url(), common::patient())
        .await
        .expect("connect");
    let key = SubjectKey::from("early");
    let (p, d) = (common::roomy_policy(), Demand::tokens(10));
    let tickets = common::admitted_from_a_block(&s, &key, &p, d, 3).await;
    let (block_requests, _) = common::used(&plain, &key).await;
    assert!(block_requests > 3, "the block counts all it borrowed");
    // The link cut when the block's timer hands it over (with three requests in
    // flight): the hand-over fails without reaching Redis (a stopped Redis would run
    // it when woken) and waits, held back, to be sent again — as does the slot
    // block's give-back.
    s.client().hold_retries(true);
    link.cut();
    eventually("the blocks retired, their give-backs kept", async || {
        s.unused_borrowed(&key) == (0, 0) && s.give_backs().waiting >= 2
    })
    .await;
    let kept = s.give_backs().waiting;
    link.mend();
    // Redis answers again, the hand-over still waits: a handed request's refund now
    // reaches Redis first.
    until_ok("Redis answers again", || s.in_flight(&key)).await;
    until_ok("the refund is answered", || {
        s.settle(&key, Scope::Key, tickets[1], Outcome::Refund)
    })
    .await;
    assert_eq!(
        s.give_backs().waiting,
        kept + 1,
        "the refund, answered 'not yet', is kept to send again"
    );
    assert_eq!(
        common::used(&plain, &key).await.0,
        block_requests,
        "nothing settled before the hand-over"
    );
    s.client().hold_retries(false);
    eventually("everything kept lands", async || {
        s.give_backs().waiting == 0
    })
    .await;
    assert_eq!(
        common::used(&plain, &key).await,
        (2, 20),
        "the refund counted once"
    );
    common::handed_rest_settles_and_leaves_no_record(
        &server,
        &s,
        &plain,
        &key,
        &[tickets[0], tickets[2]],
        (2, 20),
    )
    .await;
}
