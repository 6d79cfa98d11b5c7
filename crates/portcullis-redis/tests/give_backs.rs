//! D9: nothing outlives its caller, nothing is given back twice. A settlement counts
//! once and only for what Redis counted; a give-back whose call fails is sent again
//! until it lands; a decision whose answer never came (a stalled Redis that runs it
//! later) is undone, so nothing it counted is held by nobody.

mod common;

use common::RedisServer;
use portcullis_core::blocks::BlockSizing;
use portcullis_core::{
    Admission, BillingOutcome, BillingRequest, BillingStore, Budget, ChannelStore, Demand,
    Dimension, JointItem, JointStore, Outcome, Policy, Scope, SlotAsk, SlotDecision, SlotStore,
    SubjectKey, WindowAsk, WindowStore, WindowTicket,
};
use portcullis_redis::{RedisStore, RedisStoreOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn policy() -> Arc<Policy> {
    common::roomy_policy()
}

/// A store on `server`; `blocks`: with quota blocks, billing blocks too. The default
/// deadline (20 ms): the stalled runs count on calls that give up.
async fn store(server: &RedisServer, blocks: bool) -> RedisStore {
    let sizing = blocks.then(|| BlockSizing::default().with_money(true));
    RedisStore::connect(&server.url(), RedisStoreOptions::default().blocks(sizing))
        .await
        .expect("connect")
}

/// A store on `server` for the tests and the checks that are not about a call giving
/// up ([`common::patient`]).
async fn patient(server: &RedisServer) -> RedisStore {
    RedisStore::connect(&server.url(), common::patient())
        .await
        .expect("connect")
}

/// Requests and tokens counted in `key`'s current windows, as a store without blocks
/// reads them.
async fn used(s: &RedisStore, key: &SubjectKey) -> (u64, u64) {
    let v = s.view(key, Scope::Key, &policy()).await.expect("view");
    let of = |d: Dimension| v.iter().find(|l| l.dimension == d).map_or(0, |l| l.used);
    (of(Dimension::Requests), of(Dimension::Tokens))
}

async fn admitted(s: &RedisStore, key: &SubjectKey, tokens: u64) -> WindowTicket {
    match s
        .admit(key, Scope::Key, &policy(), &Demand::tokens(tokens))
        .await
        .expect("admit")
    {
        Admission::Admitted(t) => t,
        Admission::Exceeded(e) => panic!("refused: {e:?}"),
    }
}

/// `call` until it answers (at most 5 s): the setup and the final reads of the tests
/// whose store keeps the 20 ms default deadline (what the stalled part is about) must
/// not fail because a loaded host made one answer from a live Redis late.
async fn answered<T, F: AsyncFnMut() -> portcullis_core::StoreResult<T>>(mut call: F) -> T {
    let start = Instant::now();
    loop {
        match call().await {
            Ok(v) => return v,
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(5),
                "a live Redis did not answer within 5 s: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `check` every 20 ms until it holds, for at most `limit`.
async fn eventually(limit: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn d9_a_window_settlement_counts_once() {
    let server = RedisServer::start();
    let s = patient(&server).await;
    let key = SubjectKey::from("twice");
    let a = admitted(&s, &key, 10).await;
    let _b = admitted(&s, &key, 10).await;
    assert_eq!(used(&s, &key).await, (2, 20));
    s.settle(&key, Scope::Key, a, Outcome::Refund)
        .await
        .unwrap();
    assert_eq!(used(&s, &key).await, (1, 10), "a's refund");
    // Sent again (as after a reply that was lost): nothing more is given back.
    s.settle(&key, Scope::Key, a, Outcome::Refund)
        .await
        .unwrap();
    assert_eq!(used(&s, &key).await, (1, 10), "the second refund of a");
    // Another instance settling the same ticket changes nothing either.
    let other = patient(&server).await;
    other
        .settle(&key, Scope::Key, a, Outcome::Refund)
        .await
        .unwrap();
    assert_eq!(
        used(&s, &key).await,
        (1, 10),
        "a's refund from another instance"
    );
}

#[tokio::test]
async fn d9_a_settlement_of_what_redis_never_counted_changes_nothing() {
    let server = RedisServer::start();
    let s = patient(&server).await;
    let key = SubjectKey::from("never");
    let a = admitted(&s, &key, 10).await;
    assert_ne!(a.id, 0, "a Redis admission is recorded under an id");
    // The same admission under an id Redis never recorded (as one lost in a failover).
    let lost = WindowTicket {
        id: a.id ^ (1 << 40),
        ..a
    };
    s.settle(&key, Scope::Key, lost, Outcome::Refund)
        .await
        .unwrap();
    assert_eq!(
        used(&s, &key).await,
        (1, 10),
        "another instance's admission stays"
    );
    s.settle(&key, Scope::Key, a, Outcome::Refund)
        .await
        .unwrap();
    assert_eq!(used(&s, &key).await, (0, 0));
    let records = format!("{}:adm", s.window_key(&key, Scope::Key));
    assert_eq!(
        server.cli(&["EXISTS", &records]).trim(),
        "0",
        "the last record went with its settlement"
    );
}

#[tokio::test]
async fn d9_a_give_back_that_fails_is_sent_again_until_it_lands() {
    let server = RedisServer::start();
    let s = store(&server, false).await;
    let key = SubjectKey::from("retried");
    let ticket = match answered(async || {
        s.admit(&key, Scope::Key, &policy(), &Demand::tokens(10))
            .await
    })
    .await
    {
        Admission::Admitted(t) => t,
        Admission::Exceeded(e) => panic!("refused: {e:?}"),
    };
    let SlotDecision::Acquired(lease) = answered(async || s.acquire(&key, 10, 60_000).await).await
    else {
        panic!("no slot");
    };
    server.stop();
    let settled = s.settle(&key, Scope::Key, ticket, Outcome::Refund).await;
    let released = SlotStore::release(&s, &key, lease).await;
    assert!(settled.is_err() && released.is_err(), "Redis is stalled");
    assert!(
        s.give_backs().waiting >= 2,
        "both kept to send again: {:?}",
        s.give_backs()
    );
    // Stalled for longer than the first gaps between tries.
    tokio::time::sleep(Duration::from_millis(700)).await;
    server.cont();
    eventually(Duration::from_secs(5), "the give-backs land", async || {
        s.give_backs().waiting == 0
    })
    .await;
    assert!(s.give_backs().landed >= 2, "{:?}", s.give_backs());
    let plain = patient(&server).await;
    assert_eq!(
        plain.in_flight(&key).await.unwrap(),
        0,
        "the lease was released"
    );
    assert_eq!(
        used(&plain, &key).await,
        (0, 0),
        "the refund was counted once"
    );
}

/// D9: a quota block retired with requests in flight hands them over to Redis, with a
/// record for each; a refund of one of them whose call fails while Redis is away is
/// sent again once it answers, and counts once — so no unit stays counted for a request
/// that was refunded (before, such a refund was a correction without a record, never
/// sent again).
#[tokio::test]
async fn d9_a_refund_of_a_handed_over_blocks_request_is_sent_again_and_counts_once() {
    let server = RedisServer::start();
    let s = store(&server, true).await;
    let plain = patient(&server).await;
    let key = SubjectKey::from("handed");
    let (p, d) = (policy(), Demand::tokens(10));
    let tickets = common::admitted_from_a_block(&s, &key, &p, d, 3).await;
    // The blocks' timers retire them with the three in flight: the window block's
    // requests, handed over, count as used in Redis; the slot block gives back the
    // leases it did not hand out. Both landed before Redis stops, so the one give-back
    // kept below is the refund's.
    eventually(Duration::from_secs(5), "the hand-over", async || {
        used(&plain, &key).await == (3, 30)
            && SlotStore::in_flight(&plain, &key).await.ok() == Some(3)
    })
    .await;
    server.stop();
    let refunded = s
        .settle(&key, Scope::Key, tickets[1], Outcome::Refund)
        .await;
    assert!(refunded.is_err(), "Redis is stalled");
    assert_eq!(
        s.give_backs().waiting,
        1,
        "the refund is kept to send again"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.cont();
    eventually(Duration::from_secs(5), "the refund lands", async || {
        s.give_backs().waiting == 0
    })
    .await;
    assert_eq!(used(&plain, &key).await, (2, 20), "the refund counted once");
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

/// A give-back kept while Redis was silent goes as soon as Redis answers again, not at
/// the end of a gap between tries that grew while it was silent (up to 2 s): until it
/// lands, the lease it gives back counts against the key's limit for nobody — after a
/// failover under load, enough of them to refuse requests at a limit far from reached.
#[tokio::test]
async fn d9_kept_give_backs_go_as_soon_as_redis_answers_again() {
    let server = RedisServer::start();
    let s = store(&server, false).await;
    let key = SubjectKey::from("woken");
    let SlotDecision::Acquired(lease) = answered(async || s.acquire(&key, 10, 60_000).await).await
    else {
        panic!("no slot");
    };
    server.stop();
    let released = SlotStore::release(&s, &key, lease).await;
    assert!(released.is_err(), "Redis is stalled");
    assert_eq!(s.give_backs().waiting, 1, "kept to send again");
    // Silent long enough for the gap between tries to grow: they go at about 0.1, 0.3,
    // 0.7, 1.5 and 3.1 s, and the next one 2 s after that.
    tokio::time::sleep(Duration::from_millis(3_400)).await;
    server.cont();
    let back = Instant::now();
    // Any call answered tells the store that Redis is back.
    eventually(Duration::from_secs(5), "Redis answers again", async || {
        s.in_flight(&key).await.is_ok()
    })
    .await;
    eventually(Duration::from_secs(5), "the release lands", async || {
        s.give_backs().waiting == 0
    })
    .await;
    let took = back.elapsed();
    assert!(
        took < Duration::from_millis(1_000),
        "the release landed {took:?} after Redis was back"
    );
    assert_eq!(s.give_backs().landed, 1);
    assert_eq!(
        answered(async || s.in_flight(&key).await).await,
        0,
        "the lease was released"
    );
}

/// Money of the "late" tenant reserved in its budget, and held by its billing blocks.
async fn money_held(server: &RedisServer, s: &RedisStore) -> (i64, i64) {
    let budget = Budget::new("late-budget", 1_000_000_000, None);
    let v = s
        .account(Some("late"), &SubjectKey::from("x"), &[budget])
        .await
        .expect("account");
    let blk = server.cli(&["HGET", &s.tenant_key("late"), "blk"]);
    (v.budgets[0].reserved, blk.trim().parse().unwrap_or(0))
}

/// Every kind of decision a layer makes, sent to a stalled Redis whose answer comes
/// after the caller gave up: once Redis runs them (late), what they counted is given
/// back, and nothing stays held.
async fn late_decisions_grant_nothing(blocks: bool) {
    let server = RedisServer::start();
    let s = store(&server, blocks).await;
    let plain = patient(&server).await;
    let (p, d) = (policy(), Demand::tokens(10));
    let key = SubjectKey::from(format!("late-{blocks}"));
    let items: Vec<JointItem> = ["cred", "cred|model"]
        .into_iter()
        .map(|k| JointItem {
            key: SubjectKey::from(format!("{k}-{blocks}")),
            scope: Scope::Key,
            policy: p.clone(),
            demand: d,
        })
        .collect();
    answered(async || s.set_balance("late", 1_000_000_000).await).await;
    let budget = Budget::new("late-budget", 1_000_000_000, None);
    let bill = |i: usize| BillingRequest {
        attempt: format!("late-{blocks}-{i}").into(),
        tenant: Some("late".into()),
        key: key.clone(),
        spend_cap: None,
        budgets: vec![budget.clone()].into(),
        money: 10,
        bill_balance: true,
        lifetime_ms: portcullis_core::billing::DEFAULT_ATTEMPT_LIFETIME_MS,
        tenant_expected: false,
    };
    server.stop();
    // Sent together, as under load: every call reaches the frozen Redis before the
    // first one gives up (and the breaker opens).
    let slot = SlotAsk {
        key: key.clone(),
        limit: p.concurrency,
        ttl: 60_000,
    };
    let window = WindowAsk {
        scope: Scope::Key,
        policy: &p,
        demand: &d,
    };
    let reqs: Vec<BillingRequest> = (0..3).map(bill).collect();
    let (joint, admit, acquire, channel, billing) = tokio::join!(
        s.acquire_and_admit(&slot, Some(window)),
        s.admit(&key, Scope::Key, &p, &d),
        s.acquire(&key, 1_000, 60_000),
        s.admit_all_and_acquire(&items, "late-chan", 1_000, 60_000),
        futures_util::future::join_all(reqs.iter().map(|r| s.check_and_reserve(r))),
    );
    assert!(joint.is_err() && admit.is_err() && acquire.is_err() && channel.is_err());
    for (r, answer) in reqs.iter().zip(billing) {
        assert!(answer.is_err(), "{answer:?}");
        // As the billing layer does when a reservation fails: it refunds its attempt.
        drop(s.settle_attempt(&r.attempt_ref(), BillingOutcome::Refund));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.cont();
    // The channel's capacity leases, counted from outside.
    let chan_leases = || {
        let count = "local n = 0 \
            for _, k in ipairs(redis.call('KEYS', '*capacity*late-chan*')) do \
            n = n + redis.call('ZCARD', k) end return n";
        server
            .cli(&["EVAL", count, "0"])
            .trim()
            .parse::<u64>()
            .expect("a count")
    };
    eventually(
        Duration::from_secs(5),
        "what the late calls counted is given back",
        async || {
            s.give_backs().waiting == 0
                && plain.in_flight(&key).await.unwrap() == 0
                && used(&plain, &key).await == (0, 0)
                && used(&plain, &items[0].key).await == (0, 0)
                && used(&plain, &items[1].key).await == (0, 0)
                && chan_leases() == 0
                && money_held(&server, &plain).await == (0, 0)
        },
    )
    .await;
    // No admission record is left behind either.
    for k in [&key, &items[0].key, &items[1].key] {
        let records = format!("{}:adm", s.window_key(k, Scope::Key));
        assert_eq!(server.cli(&["EXISTS", &records]).trim(), "0", "{records}");
    }
}

#[tokio::test]
async fn d9_decisions_answered_after_their_caller_gave_up_grant_nothing() {
    late_decisions_grant_nothing(false).await;
}

#[tokio::test]
async fn d9_quota_blocks_borrowed_after_their_caller_gave_up_grant_nothing() {
    late_decisions_grant_nothing(true).await;
}
