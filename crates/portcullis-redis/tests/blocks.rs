//! Quota blocks on Redis (D2, T3; `portcullis_core::blocks`): where a limit is far from
//! exhausted an instance borrows a share of it in one call and decides the next
//! requests in memory; instances together never admit more than a limit, what is not
//! used goes back, and a crashed instance's borrowed leases heal with their TTL.

mod common;

use cluster::RedisCluster;
use common::{RedisServer, command_calls};
use portcullis_core::blocks::BlockSizing;
use portcullis_core::{
    CapacityStore, CapacityTake, ChannelStore, Demand, Dimension, JointAdmission, JointDecision,
    JointItem, JointStore, Outcome, Policy, Scope, SlotAsk, SlotStore, SubjectKey, Tier, Usage,
    WindowAsk, WindowStore,
};
use portcullis_redis::RedisStore;
use portcullis_test_support::cluster;
use std::sync::Arc;
use std::time::Duration;

async fn store(server: &RedisServer, blocks: bool) -> RedisStore {
    let sizing = blocks.then(BlockSizing::default);
    RedisStore::connect(&server.url(), common::patient().blocks(sizing))
        .await
        .expect("connect")
}

fn evalsha_calls(server: &RedisServer) -> u64 {
    command_calls(&server.cli(&["INFO", "commandstats"]))
        .into_iter()
        .filter(|(c, _, _)| c == "evalsha")
        .map(|(_, n, _)| n)
        .sum()
}

fn big_policy() -> Arc<Policy> {
    Arc::new(
        Policy::default()
            .with_concurrency(100_000)
            .with_requests(Tier::per_minute(1_000_000))
            .with_requests(Tier::per_day(10_000_000))
            .with_tokens(Tier::per_minute(1_000_000_000)),
    )
}

/// `n` requests through channel `chan` (capacity 100,000) with provider windows
/// `items`, one after the other, each settled and released.
async fn serve_channel(s: &RedisStore, items: &[JointItem], n: u64) {
    for _ in 0..n {
        let (JointAdmission::Admitted(tickets), CapacityTake::Taken(lease)) = s
            .admit_all_and_acquire(items, "chan", 100_000, 60_000)
            .await
            .unwrap()
        else {
            panic!("refused under limits far from exhausted");
        };
        for (it, t) in items.iter().zip(tickets) {
            WindowStore::settle(s, &it.key, it.scope, t, Outcome::Completed(None))
                .await
                .unwrap();
        }
        CapacityStore::release(s, "chan", lease).await.unwrap();
    }
}

/// Once the blocks are retired (1 s at most), a store without blocks sees exactly the
/// `n` requests of [`serve_channel`] (and their tokens) and no capacity lease left.
async fn channel_counts_exact(plain: &RedisStore, items: &[JointItem], rpm: &Arc<Policy>, n: u64) {
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    for it in items {
        let view = plain.view(&it.key, it.scope, rpm).await.unwrap();
        assert_eq!(used(&view, Dimension::Requests), [n]);
        assert_eq!(used(&view, Dimension::Tokens), [it.demand.tokens * n]);
    }
    assert_eq!(CapacityStore::in_flight(plain, "chan").await.unwrap(), 0);
}

fn used(lines: &[portcullis_core::LimitView], d: Dimension) -> Vec<u64> {
    lines
        .iter()
        .filter(|l| l.dimension == d)
        .map(|l| l.used)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_blocks_decide_most_requests_in_memory_and_count_exactly() {
    let server = RedisServer::start();
    let s = store(&server, true).await;
    let plain = store(&server, false).await;
    let key = SubjectKey::from("hot");
    let policy = big_policy();
    let demand = Demand::tokens(100);
    server.cli(&["CONFIG", "RESETSTAT"]);
    let n = 1_000u64;
    for i in 0..n {
        let slot = SlotAsk {
            key: key.clone(),
            limit: policy.concurrency,
            ttl: 60_000,
        };
        let window = WindowAsk {
            scope: Scope::Key,
            policy: &policy,
            demand: &demand,
        };
        let JointDecision::Admitted { lease, ticket } =
            s.acquire_and_admit(&slot, Some(window)).await.unwrap()
        else {
            panic!("request {i} refused under limits far from exhausted");
        };
        let used = Usage {
            input_tokens: 10,
            output_tokens: 20,
            ..Usage::default()
        };
        WindowStore::settle(
            &s,
            &key,
            Scope::Key,
            ticket.unwrap(),
            Outcome::Completed(Some(used)),
        )
        .await
        .unwrap();
        SlotStore::release(&s, &key, lease).await.unwrap();
    }
    let calls = evalsha_calls(&server);
    // One borrow (and one give-back, in a batch) per 256 requests, not one call each.
    assert!(calls <= 20, "{calls} script calls for {n} requests");
    // This instance's view is exact: what it borrowed and did not use is not used.
    let view = s.view(&key, Scope::Key, &policy).await.unwrap();
    assert_eq!(used(&view, Dimension::Requests), [n, n]);
    assert_eq!(used(&view, Dimension::Tokens), [30 * n]);
    assert_eq!(SlotStore::in_flight(&s, &key).await.unwrap(), 0);
    // Once the last block is retired (1 s at most) it is given back: every instance
    // sees the exact counts, and no lease is left.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let view = plain.view(&key, Scope::Key, &policy).await.unwrap();
    assert_eq!(used(&view, Dimension::Requests), [n, n]);
    assert_eq!(used(&view, Dimension::Tokens), [30 * n]);
    assert_eq!(SlotStore::in_flight(&plain, &key).await.unwrap(), 0);
    assert_eq!(server.cli(&["ZCARD", &plain.slots_key(&key)]).trim(), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_instances_with_blocks_never_admit_more_than_a_limit() {
    let server = RedisServer::start();
    // 1,024 requests a minute: blocks of 16. Two instances race for them with 8
    // requests each in flight; each keeps asking until its store refuses.
    let limit = 1_024u64;
    let policy = Arc::new(
        Policy::default()
            .with_concurrency(1_024)
            .with_requests(Tier::per_minute(limit)),
    );
    let key = SubjectKey::from("contended");
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let s = store(&server, true).await;
        for _ in 0..8 {
            let (s, policy, key) = (s.clone(), policy.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0u64;
                loop {
                    let slot = SlotAsk {
                        key: key.clone(),
                        limit: policy.concurrency,
                        ttl: 60_000,
                    };
                    let demand = Demand::default();
                    let window = WindowAsk {
                        scope: Scope::Key,
                        policy: &policy,
                        demand: &demand,
                    };
                    match s.acquire_and_admit(&slot, Some(window)).await.unwrap() {
                        JointDecision::Admitted { lease, ticket } => {
                            admitted += 1;
                            WindowStore::settle(
                                &s,
                                &key,
                                Scope::Key,
                                ticket.unwrap(),
                                Outcome::Completed(None),
                            )
                            .await
                            .unwrap();
                            SlotStore::release(&s, &key, lease).await.unwrap();
                        }
                        JointDecision::Exceeded(_) => return admitted,
                        JointDecision::SlotFull { .. } => panic!("1,024 slots for 16 requests"),
                    }
                }
            }));
        }
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert!(total <= limit, "{total} admitted under a limit of {limit}");
    // Refused only once the shared count is at the limit, so borrowed units not used
    // by the instance that held them are at most one block per instance.
    assert!(total >= limit - 2 * 16, "only {total} of {limit} admitted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c1_borrowed_slots_never_exceed_the_limit_across_instances() {
    let server = RedisServer::start();
    let key = SubjectKey::from("slots");
    let limit = 1_000u32; // blocks of 15
    let a = store(&server, true).await;
    let b = store(&server, true).await;
    let mut held = Vec::new();
    for round in 0..2_000 {
        let s = if round % 3 == 0 { &a } else { &b };
        let slot = SlotAsk {
            key: key.clone(),
            limit,
            ttl: 60_000,
        };
        match s.acquire_and_admit(&slot, None).await.unwrap() {
            JointDecision::Admitted { lease, .. } => held.push((round % 3 == 0, lease)),
            JointDecision::SlotFull { in_flight } => {
                assert!(in_flight <= limit);
            }
            JointDecision::Exceeded(e) => panic!("no windows asked: {e:?}"),
        }
    }
    assert_eq!(held.len(), limit as usize, "every slot taken, none beyond");
    let plain = store(&server, false).await;
    assert_eq!(SlotStore::in_flight(&plain, &key).await.unwrap(), limit);
    for (on_a, lease) in held {
        let s = if on_a { &a } else { &b };
        SlotStore::release(s, &key, lease).await.unwrap();
        // Releasing twice frees nothing twice.
        SlotStore::release(s, &key, lease).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert_eq!(SlotStore::in_flight(&plain, &key).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c4_borrowed_leases_live_while_renewed_and_heal_after_a_crash() {
    let server = RedisServer::start();
    let key = SubjectKey::from("renewed");
    let plain = store(&server, false).await;
    let ttl = 800;
    let slot = SlotAsk {
        key: key.clone(),
        limit: 0,
        ttl,
    };
    let lease = {
        let s = store(&server, true).await;
        let JointDecision::Admitted { lease, .. } = s.acquire_and_admit(&slot, None).await.unwrap()
        else {
            panic!("unlimited slots")
        };
        // Renewed every third of the TTL for three TTLs: it stays held.
        for _ in 0..9 {
            tokio::time::sleep(Duration::from_millis(ttl / 3)).await;
            assert!(SlotStore::renew(&s, &key, lease, ttl).await.unwrap());
            assert!(SlotStore::in_flight(&plain, &key).await.unwrap() >= 1);
        }
        lease
        // The instance goes away without releasing anything (a crash).
    };
    assert!(SlotStore::in_flight(&plain, &key).await.unwrap() >= 1);
    tokio::time::sleep(Duration::from_millis(ttl + 200)).await;
    assert_eq!(
        SlotStore::in_flight(&plain, &key).await.unwrap(),
        0,
        "lease {lease} healed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_a_channel_decides_its_provider_windows_and_capacity_from_blocks() {
    let server = RedisServer::start();
    let s = store(&server, true).await;
    let plain = store(&server, false).await;
    let rpm = Arc::new(
        Policy::default()
            .with_requests(Tier::per_minute(10_000_000))
            .with_tokens(Tier::per_minute(10_000_000_000)),
    );
    let items: Vec<JointItem> = ["cred", "cred|model"]
        .into_iter()
        .map(|k| JointItem {
            key: SubjectKey::from(k),
            scope: Scope::Key,
            policy: rpm.clone(),
            demand: Demand::tokens(50),
        })
        .collect();
    server.cli(&["CONFIG", "RESETSTAT"]);
    let n = 600u64;
    serve_channel(&s, &items, n).await;
    let calls = evalsha_calls(&server);
    assert!(calls <= 15, "{calls} script calls for {n} requests");
    channel_counts_exact(&plain, &items, &rpm, n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_small_limits_are_decided_request_by_request() {
    let server = RedisServer::start();
    let s = store(&server, true).await;
    let key = SubjectKey::from("small");
    let policy = Arc::new(
        Policy::default()
            .with_concurrency(10)
            .with_requests(Tier::per_minute(100)),
    );
    server.cli(&["CONFIG", "RESETSTAT"]);
    for _ in 0..20 {
        let slot = SlotAsk {
            key: key.clone(),
            limit: 10,
            ttl: 60_000,
        };
        let demand = Demand::default();
        let window = WindowAsk {
            scope: Scope::Key,
            policy: &policy,
            demand: &demand,
        };
        let JointDecision::Admitted { lease, ticket } =
            s.acquire_and_admit(&slot, Some(window)).await.unwrap()
        else {
            panic!("refused")
        };
        assert_eq!(ticket.unwrap().borrowed, 0);
        WindowStore::settle(
            &s,
            &key,
            Scope::Key,
            ticket.unwrap(),
            Outcome::Completed(None),
        )
        .await
        .unwrap();
        SlotStore::release(&s, &key, lease).await.unwrap();
    }
    // A decision and a batch of settlements per request.
    assert!(evalsha_calls(&server) >= 40);
}

mod money {
    use super::*;
    use portcullis_core::{
        AttemptState, BillingDecision, BillingOutcome, BillingRequest, BillingStore, Budget,
        Refusal,
    };

    async fn money_store(server: &RedisServer, on: bool) -> RedisStore {
        let sizing = on.then(|| BlockSizing::default().with_money(true));
        RedisStore::connect(&server.url(), common::patient().blocks(sizing))
            .await
            .expect("connect")
    }

    fn req(attempt: String, money: i64) -> BillingRequest {
        BillingRequest {
            attempt: attempt.into(),
            tenant: Some("acme".into()),
            key: "k1".into(),
            spend_cap: Some(1 << 50),
            budgets: Arc::from(vec![Budget::new("month", 1 << 50, None)]),
            money,
            bill_balance: true,
            lifetime_ms: 60_000,
            tenant_expected: true,
        }
    }

    const START: i64 = 1 << 45;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn b3_billing_blocks_reserve_once_per_block_and_settle_exact_totals() {
        let server = RedisServer::start();
        let s = money_store(&server, true).await;
        let plain = money_store(&server, false).await;
        assert!(s.seed_balance("acme", START).await.unwrap());
        server.cli(&["CONFIG", "RESETSTAT"]);
        let n = 500i64;
        for i in 0..n {
            let r = req(format!("a{i}"), 100);
            assert_eq!(
                s.check_and_reserve(&r).await.unwrap(),
                BillingDecision::Admitted
            );
            assert_eq!(
                s.settle_attempt(&r.attempt_ref(), BillingOutcome::Settled(37))
                    .await
                    .unwrap(),
                Some(AttemptState::Settled(37))
            );
        }
        let calls = evalsha_calls(&server);
        // Settling again changes nothing (B4).
        let again = req("a7".into(), 100);
        assert_eq!(
            s.settle_attempt(&again.attempt_ref(), BillingOutcome::Settled(37))
                .await
                .unwrap(),
            None
        );
        assert!(calls <= 10, "{calls} script calls for {n} billed requests");
        let budgets = [Budget::new("month", 1 << 50, None)];
        let key = SubjectKey::from("k1");
        // This instance's view counts what its blocks settled.
        let v = s.account(Some("acme"), &key, &budgets).await.unwrap();
        assert_eq!(v.balance, Some(START - 37 * n));
        assert_eq!(v.key_spent, 37 * n);
        assert_eq!((v.budgets[0].spent, v.budgets[0].reserved), (37 * n, 0));
        // Within a block's life every instance sees it, and no attempt is left behind.
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        let v = plain.account(Some("acme"), &key, &budgets).await.unwrap();
        assert_eq!(v.balance, Some(START - 37 * n));
        assert_eq!(v.key_spent, 37 * n);
        assert_eq!((v.budgets[0].spent, v.budgets[0].reserved), (37 * n, 0));
        assert_eq!(server.cli(&["KEYS", "*attempt*"]).trim(), "");
        assert!(plain.pending().await.unwrap().is_empty());
    }

    /// A long stream shares its billing block with short requests: their costs reach
    /// the shared books within seconds of their end (as parts of the block), not when
    /// the stream ends; the stream's own cost follows when it ends, nothing twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn b3_costs_reach_the_shared_books_within_seconds_while_a_stream_holds_its_block() {
        let server = RedisServer::start();
        let s = money_store(&server, true).await;
        let plain = money_store(&server, false).await;
        s.seed_balance("acme", START).await.unwrap();
        let budgets = [Budget::new("month", 1 << 50, None)];
        let key = SubjectKey::from("k1");
        let stream = req("stream".into(), 100);
        let shorts: Vec<_> = (0..3).map(|i| req(format!("short{i}"), 100)).collect();
        for r in std::iter::once(&stream).chain(&shorts) {
            assert_eq!(
                s.check_and_reserve(r).await.unwrap(),
                BillingDecision::Admitted
            );
        }
        for r in &shorts {
            s.settle_attempt(&r.attempt_ref(), BillingOutcome::Settled(30))
                .await
                .unwrap();
        }
        // The block retires within 1 s and charges its ended requests then.
        let start = std::time::Instant::now();
        loop {
            let v = plain.account(Some("acme"), &key, &budgets).await.unwrap();
            if v.balance == Some(START - 90) {
                assert_eq!(v.key_spent, 90);
                assert_eq!(v.budgets[0].spent, 90);
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(4),
                "the ended requests' costs did not reach the shared books: {v:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // This instance's own view counts nothing twice.
        let v = s.account(Some("acme"), &key, &budgets).await.unwrap();
        assert_eq!(v.balance, Some(START - 90));
        assert_eq!(v.budgets[0].spent, 90);
        // The stream ends: the block settles at the rest.
        s.settle_attempt(&stream.attempt_ref(), BillingOutcome::Settled(55))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let v = plain.account(Some("acme"), &key, &budgets).await.unwrap();
        assert_eq!(v.balance, Some(START - 145));
        assert_eq!(v.key_spent, 145);
        assert_eq!((v.budgets[0].spent, v.budgets[0].reserved), (145, 0));
        assert_eq!(server.cli(&["KEYS", "*attempt*"]).trim(), "");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn b4_an_unknown_result_from_a_billing_block_is_pending_in_redis() {
        let server = RedisServer::start();
        let s = money_store(&server, true).await;
        let plain = money_store(&server, false).await;
        s.seed_balance("acme", START).await.unwrap();
        let known = req("known".into(), 100);
        let unknown = req("unknown".into(), 250);
        for r in [&known, &unknown] {
            assert_eq!(
                s.check_and_reserve(r).await.unwrap(),
                BillingDecision::Admitted
            );
        }
        s.settle_attempt(&known.attempt_ref(), BillingOutcome::Settled(40))
            .await
            .unwrap();
        assert_eq!(
            s.settle_attempt(&unknown.attempt_ref(), BillingOutcome::Pending)
                .await
                .unwrap(),
            Some(AttemptState::Pending(250))
        );
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        assert_eq!(
            plain.pending().await.unwrap(),
            [(unknown.attempt_ref(), 250)],
            "listed for reconciliation with its own id and upper bound"
        );
        let v = plain
            .account(
                Some("acme"),
                &"k1".into(),
                &[Budget::new("month", 1 << 50, None)],
            )
            .await
            .unwrap();
        assert_eq!(v.balance, Some(START - 40));
        assert_eq!((v.tenant_pending, v.key_pending), (250, 250));
        assert_eq!((v.budgets[0].spent, v.budgets[0].reserved), (40, 250));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn b1_billing_blocks_hold_their_money_against_later_blocks_headroom() {
        let server = RedisServer::start();
        let s = money_store(&server, true).await;
        // A block of 256 requests of 100 is 25,600; it needs 64 times that to spare.
        let block = 25_600;
        s.seed_balance("acme", 64 * block + block / 2)
            .await
            .unwrap();
        let tenant = s.tenant_key("acme");
        let on = |key: &str, i: usize| BillingRequest {
            key: key.into(),
            ..req(format!("{key}-{i}"), 100)
        };
        // Key 1 borrows a block: the tenant now holds its money against later blocks.
        let first = on("k1", 0);
        assert_eq!(
            s.check_and_reserve(&first).await.unwrap(),
            BillingDecision::Admitted
        );
        assert_eq!(
            server.cli(&["HGET", &tenant, "blk"]).trim(),
            block.to_string()
        );
        // Key 2 would have room for a block of its own were the first not counted: it
        // reserves alone instead (its own attempt in Redis, no second block).
        let second = on("k2", 0);
        assert_eq!(
            s.check_and_reserve(&second).await.unwrap(),
            BillingDecision::Admitted
        );
        assert_eq!(
            server.cli(&["HGET", &tenant, "blk"]).trim(),
            block.to_string()
        );
        let base = s.books_base(&second.books());
        assert_eq!(
            server
                .cli(&["EXISTS", &format!("{base}attempt:{}", second.attempt)])
                .trim(),
            "1"
        );
        for r in [&first, &second] {
            s.settle_attempt(&r.attempt_ref(), BillingOutcome::Settled(10))
                .await
                .unwrap();
        }
        // Once the block settles, it holds nothing.
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        assert_eq!(server.cli(&["HGET", &tenant, "blk"]).trim(), "0");
        let v = s.account(Some("acme"), &"k1".into(), &[]).await.unwrap();
        assert_eq!(v.balance, Some(64 * block + block / 2 - 20));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn b1_a_balance_near_zero_is_decided_request_by_request() {
        let server = RedisServer::start();
        let s = money_store(&server, true).await;
        // 250 left and 100 a request: far less than a block's headroom, so each request
        // is decided in Redis, exactly as without blocks (B1, B2).
        s.seed_balance("acme", 250).await.unwrap();
        let mut admitted = 0;
        for i in 0..5 {
            let r = req(format!("a{i}"), 100);
            match s.check_and_reserve(&r).await.unwrap() {
                BillingDecision::Admitted => {
                    admitted += 1;
                    s.settle_attempt(&r.attempt_ref(), BillingOutcome::Settled(100))
                        .await
                        .unwrap();
                }
                BillingDecision::Refused(Refusal::InsufficientBalance) => break,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(admitted, 3, "250 → 150 → 50 → -50, then refused");
        let v = s.account(Some("acme"), &"k1".into(), &[]).await.unwrap();
        assert_eq!(v.balance, Some(-50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_on_a_cluster_blocks_decide_channels_whose_keys_sit_on_several_slots() {
    let cluster = RedisCluster::start(3, 0);
    let connect = |sizing: Option<BlockSizing>| {
        let url = cluster.seed_url();
        async move {
            RedisStore::connect(&url, common::patient().blocks(sizing))
                .await
                .expect("connect to the test cluster")
        }
    };
    let s = connect(Some(BlockSizing::default())).await;
    let plain = connect(None).await;
    let rpm = Arc::new(
        Policy::default()
            .with_requests(Tier::per_minute(10_000_000))
            .with_tokens(Tier::per_minute(10_000_000_000)),
    );
    // A credential's and a vendor's window, and the channel's capacity: three hash tags.
    let items: Vec<JointItem> = ["cred-a", "vendor-openai"]
        .into_iter()
        .map(|k| JointItem {
            key: SubjectKey::from(k),
            scope: Scope::Key,
            policy: rpm.clone(),
            demand: Demand::tokens(10),
        })
        .collect();
    let slots: std::collections::HashSet<u16> = items
        .iter()
        .map(|it| cluster::key_slot(s.window_key(&it.key, it.scope).as_bytes()))
        .collect();
    assert_eq!(slots.len(), 2, "the two windows sit on two slots");
    cluster.reset_stats();
    let n = 600u64;
    serve_channel(&s, &items, n).await;
    let calls = cluster.calls_of("evalsha");
    assert!(calls <= 30, "{calls} script calls for {n} requests");
    channel_counts_exact(&plain, &items, &rpm, n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_a_retired_block_gives_back_what_it_did_not_use_while_a_request_is_in_flight() {
    let server = RedisServer::start();
    let s = store(&server, true).await;
    let plain = store(&server, false).await;
    let key = SubjectKey::from("long");
    let policy = big_policy();
    let demand = Demand::tokens(100);
    let ask = |s: &RedisStore| {
        let slot = SlotAsk {
            key: key.clone(),
            limit: policy.concurrency,
            ttl: 60_000,
        };
        let window = WindowAsk {
            scope: Scope::Key,
            policy: &policy,
            demand: &demand,
        };
        let s = s.clone();
        async move {
            match s.acquire_and_admit(&slot, Some(window)).await.unwrap() {
                JointDecision::Admitted { lease, ticket } => (lease, ticket.unwrap()),
                other => panic!("{other:?}"),
            }
        }
    };
    // A long request, and two short ones, from one block.
    let (long_lease, long_ticket) = ask(&s).await;
    assert_ne!(long_ticket.borrowed, 0);
    for _ in 0..2 {
        let (lease, ticket) = ask(&s).await;
        WindowStore::settle(&s, &key, Scope::Key, ticket, Outcome::Completed(None))
            .await
            .unwrap();
        SlotStore::release(&s, &key, lease).await.unwrap();
    }
    // The block retires (1 s at most) with the long request in flight: every other
    // instance then sees only what is used, not the block.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert_eq!(SlotStore::in_flight(&plain, &key).await.unwrap(), 1);
    let view = plain.view(&key, Scope::Key, &policy).await.unwrap();
    assert_eq!(used(&view, Dimension::Requests), [3, 3]);
    assert_eq!(used(&view, Dimension::Tokens), [300]);
    // The long request's lease is a lease of its own now: renewed and released there.
    assert!(
        SlotStore::renew(&s, &key, long_lease, 60_000)
            .await
            .unwrap()
    );
    let done = Usage {
        input_tokens: 30,
        output_tokens: 12,
        ..Usage::default()
    };
    WindowStore::settle(
        &s,
        &key,
        Scope::Key,
        long_ticket,
        Outcome::Completed(Some(done)),
    )
    .await
    .unwrap();
    SlotStore::release(&s, &key, long_lease).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(SlotStore::in_flight(&plain, &key).await.unwrap(), 0);
    let view = plain.view(&key, Scope::Key, &policy).await.unwrap();
    assert_eq!(used(&view, Dimension::Requests), [3, 3]);
    assert_eq!(used(&view, Dimension::Tokens), [242]);
    assert_eq!(server.cli(&["ZCARD", &plain.slots_key(&key)]).trim(), "0");
}
