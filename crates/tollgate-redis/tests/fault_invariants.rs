//! T5, D9, D10: faults under load from several gateway instances sharing one Redis,
//! each run ending with the invariants:
//!
//! - **nothing held by nobody** — no slot lease, no channel capacity lease, no window
//!   unit beyond the requests that completed, no money reserved in a budget or held by
//!   a billing block, no admission record; every instance's give-backs landed;
//! - **books exact** — the balance went down by exactly the costs the store answered
//!   "settled", and every unknown outcome is listed pending with its cost.
//!
//! An instance here is a [`RedisStore`] driven as the layers drive it: a joint slot and
//! window decision, a billing reservation, a channel's provider windows with a capacity
//! lease, then the settlements and releases — a failed billing settlement retried
//! until it lands, as the billing layer does. A decision that fails is what the layers
//! fail open or closed on; here it is counted and the request goes no further.

mod common;

use common::RedisServer;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tollgate_core::blocks::BlockSizing;
use tollgate_core::{
    AttemptState, BillingDecision, BillingOutcome, BillingRequest, BillingStore, Budget,
    CapacityStore, CapacityTake, ChannelStore, Demand, Dimension, JointAdmission, JointDecision,
    JointItem, JointStore, Outcome, Policy, Scope, SlotAsk, SlotStore, SubjectKey, Tier, Usage,
    WindowAsk, WindowStore,
};
use tollgate_redis::{RedisStore, RedisStoreOptions};

/// Gateway instances, and client tasks per instance.
const INSTANCES: usize = 3;
const CLIENTS: usize = 4;
const TENANT: &str = "acme";
const BALANCE: i64 = 1_000_000_000;
const COST: i64 = 3;
const TOKENS: u64 = 7;
const CHANNEL: &str = "inv-chan";

fn policy() -> Arc<Policy> {
    Arc::new(
        Policy::default()
            .with_concurrency(200)
            .with_requests(Tier::per_hour(10_000_000))
            .with_tokens(Tier::per_hour(10_000_000_000)),
    )
}

fn budget() -> Budget {
    Budget::new("inv-budget", 1_000_000_000, None)
}

fn key() -> SubjectKey {
    SubjectKey::from("inv-key")
}

fn provider_items() -> Vec<JointItem> {
    ["inv-cred", "inv-cred|model"]
        .into_iter()
        .map(|k| JointItem {
            key: SubjectKey::from(k),
            scope: Scope::Key,
            policy: policy(),
            demand: Demand::tokens(TOKENS),
        })
        .collect()
}

/// What the instances did, as their usage log would say.
#[derive(Default)]
struct Tally {
    /// Requests that ran to the end (every decision admitted, everything settled).
    completed: AtomicU64,
    /// Decisions that failed (a store error), over all instances.
    failed: AtomicU64,
    /// Costs the store answered "settled".
    charged: AtomicI64,
    /// Amounts the store answered "pending" (unknown outcomes).
    pending: AtomicI64,
}

/// Settles `attempt` until the store answers, as the billing layer's retries do.
async fn settle_until_landed(
    s: &RedisStore,
    attempt: &tollgate_core::AttemptRef,
    outcome: BillingOutcome,
) -> Option<AttemptState> {
    let start = Instant::now();
    loop {
        match s.settle_attempt(attempt, outcome).await {
            Ok(state) => return state,
            Err(_) => {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "a settlement never landed"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// One client of instance `s`: requests one after the other until `stop`.
async fn client(s: RedisStore, name: String, tally: Arc<Tally>, stop: Arc<AtomicBool>) {
    let (p, d, k) = (policy(), Demand::tokens(TOKENS), key());
    let items = provider_items();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let failed = || {
            tally.failed.fetch_add(1, Ordering::Relaxed);
        };
        let slot = SlotAsk {
            key: k.clone(),
            limit: p.concurrency,
            ttl: 60_000,
        };
        let window = WindowAsk {
            scope: Scope::Key,
            policy: &p,
            demand: &d,
        };
        let (lease, ticket) = match s.acquire_and_admit(&slot, Some(window)).await {
            Ok(JointDecision::Admitted { lease, ticket }) => (lease, ticket.expect("windows")),
            Ok(other) => panic!("refused under limits far from exhausted: {other:?}"),
            Err(_) => {
                failed();
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        let give_back = |outcome: Outcome| {
            drop(WindowStore::settle(&s, &k, Scope::Key, ticket, outcome));
            drop(SlotStore::release(&s, &k, lease));
        };
        let req = BillingRequest {
            attempt: format!("{name}-{n}").into(),
            tenant: Some(TENANT.into()),
            key: k.clone(),
            spend_cap: None,
            budgets: vec![budget()].into(),
            money: 10,
            bill_balance: true,
            lifetime_ms: tollgate_core::billing::DEFAULT_ATTEMPT_LIFETIME_MS,
            tenant_expected: true,
        };
        let attempt = req.attempt_ref();
        match s.check_and_reserve(&req).await {
            Ok(BillingDecision::Admitted) => {}
            Ok(other) => panic!("billing refused: {other:?}"),
            Err(_) => {
                // Closed: the layer refunds the attempt it could not see reserved.
                failed();
                settle_until_landed(&s, &attempt, BillingOutcome::Refund).await;
                give_back(Outcome::Refund);
                continue;
            }
        }
        let channel = s
            .admit_all_and_acquire(&items, CHANNEL, 10_000, 60_000)
            .await;
        let (tickets, cap) = match channel {
            Ok((JointAdmission::Admitted(t), CapacityTake::Taken(l))) => (t, l),
            Ok(other) => panic!("the channel refused: {other:?}"),
            Err(_) => {
                failed();
                settle_until_landed(&s, &attempt, BillingOutcome::Refund).await;
                give_back(Outcome::Refund);
                continue;
            }
        };
        tokio::time::sleep(Duration::from_millis(n % 3)).await;
        let usage = Usage {
            input_tokens: TOKENS,
            ..Usage::default()
        };
        for (it, t) in items.iter().zip(tickets) {
            drop(WindowStore::settle(
                &s,
                &it.key,
                it.scope,
                t,
                Outcome::Completed(Some(usage)),
            ));
        }
        drop(CapacityStore::release(&s, CHANNEL, cap));
        match settle_until_landed(&s, &attempt, BillingOutcome::Settled(COST)).await {
            Some(AttemptState::Settled(c)) => {
                tally.charged.fetch_add(c, Ordering::Relaxed);
            }
            Some(AttemptState::Pending(m)) => {
                tally.pending.fetch_add(m, Ordering::Relaxed);
            }
            other => panic!("a settlement answered {other:?}"),
        }
        give_back(Outcome::Completed(Some(usage)));
        tally.completed.fetch_add(1, Ordering::Relaxed);
    }
}

/// Requests and tokens counted in `key`'s windows.
async fn used(s: &RedisStore, key: &SubjectKey) -> (u64, u64) {
    let v = s.view(key, Scope::Key, &policy()).await.expect("view");
    let of = |d: Dimension| v.iter().find(|l| l.dimension == d).map_or(0, |l| l.used);
    (of(Dimension::Requests), of(Dimension::Tokens))
}

/// Runs the load from [`INSTANCES`] instances on `url` for `before`, applies `fault`,
/// runs `after` more, stops, and checks the invariants with a store of its own.
async fn under_load(
    server: &RedisServer,
    blocks: bool,
    before: Duration,
    fault: impl AsyncFnOnce(),
    after: Duration,
) {
    let sizing = blocks.then(|| BlockSizing::default().with_money(true));
    let options = || RedisStoreOptions::default().blocks(sizing);
    let observer = RedisStore::connect(&server.url(), RedisStoreOptions::default())
        .await
        .expect("connect");
    observer.set_balance(TENANT, BALANCE).await.unwrap();
    let mut instances = Vec::new();
    for _ in 0..INSTANCES {
        instances.push(RedisStore::connect(&server.url(), options()).await.unwrap());
    }
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (i, s) in instances.iter().enumerate() {
        for c in 0..CLIENTS {
            let name = format!("i{i}c{c}-{blocks}");
            let (s, tally, stop) = (s.clone(), tally.clone(), stop.clone());
            tasks.push(tokio::spawn(client(s, name, tally, stop)));
        }
    }
    tokio::time::sleep(before).await;
    fault().await;
    tokio::time::sleep(after).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("client");
    }
    // Every give-back lands; blocks retire (they admit for a second at most) and give
    // back what they did not use.
    let start = Instant::now();
    while instances.iter().any(|s| s.give_backs().waiting > 0) {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "give-backs still waiting: {:?}",
            instances
                .iter()
                .map(RedisStore::give_backs)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(2_500)).await;

    let completed = tally.completed.load(Ordering::Relaxed);
    let failed = tally.failed.load(Ordering::Relaxed);
    let charged = tally.charged.load(Ordering::Relaxed);
    let pending = tally.pending.load(Ordering::Relaxed);
    let give_backs: Vec<_> = instances.iter().map(RedisStore::give_backs).collect();
    eprintln!(
        "blocks {blocks}: {completed} completed, {failed} decisions failed, charged {charged}, \
         pending {pending}; give-backs {give_backs:?}"
    );
    assert!(completed > 100, "the load ran: {completed} requests");
    assert!(failed > 0, "the fault was felt: no decision failed");

    // Nothing held by nobody.
    assert_eq!(
        SlotStore::in_flight(&observer, &key()).await.unwrap(),
        0,
        "slot leases"
    );
    let chan = format!(
        "local n = 0 for _, k in ipairs(redis.call('KEYS', '*capacity*{CHANNEL}*')) do \
         n = n + redis.call('ZCARD', k) end return n"
    );
    assert_eq!(
        server.cli(&["EVAL", &chan, "0"]).trim(),
        "0",
        "capacity leases"
    );
    let exact = (completed, completed * TOKENS);
    assert_eq!(
        used(&observer, &key()).await,
        exact,
        "the key's window units"
    );
    for it in provider_items() {
        assert_eq!(
            used(&observer, &it.key).await,
            exact,
            "{:?}'s units",
            it.key
        );
    }
    let records = "local n = 0 for _, k in ipairs(redis.call('KEYS', '*:adm')) do \
                   n = n + redis.call('ZCARD', k) end return n";
    assert_eq!(
        server.cli(&["EVAL", records, "0"]).trim(),
        "0",
        "admission records"
    );
    let view = observer
        .account(Some(TENANT), &key(), &[budget()])
        .await
        .unwrap();
    assert_eq!(view.budgets[0].reserved, 0, "money reserved in the budget");
    let blk = server.cli(&["HGET", &observer.tenant_key(TENANT), "blk"]);
    assert_eq!(
        blk.trim().parse::<i64>().unwrap_or(0),
        0,
        "money held by blocks"
    );

    // Books exact.
    assert_eq!(
        view.balance,
        Some(BALANCE - charged),
        "the balance went down by what was settled"
    );
    let listed: i64 = observer
        .pending()
        .await
        .unwrap()
        .iter()
        .map(|(_, m)| m)
        .sum();
    assert_eq!(listed, pending, "unknown outcomes are listed pending");
}

async fn stalled(blocks: bool, stall: Duration) {
    let server = RedisServer::start();
    under_load(
        &server,
        blocks,
        Duration::from_millis(700),
        async || {
            server.stop();
            tokio::time::sleep(stall).await;
            server.cont();
        },
        Duration::from_millis(700),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t5_a_redis_stalled_for_1_5_s_under_load_leaves_nothing_held_and_exact_books() {
    stalled(false, Duration::from_millis(1_500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t5_a_redis_stalled_for_3_s_under_load_with_blocks_leaves_nothing_held_and_exact_books() {
    stalled(true, Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t5_a_redis_stalled_for_1_5_s_under_load_with_blocks_leaves_nothing_held_and_exact_books() {
    stalled(true, Duration::from_millis(1_500)).await;
}
