//! D9: a decision that reaches Redis twice — sent again by a client that lost the
//! connection its first answer was coming on, after Redis had run it — counts once.
//! Every decision script finds what its first run took (its lease, its quota block's
//! leases, its window admission's record) and answers as that run did.

use super::test_common as common;

use super::RedisStore;
use common::RedisServer;
use portcullis_core::blocks::BlockSizing;
use portcullis_core::{
    Admission, BillingRequest, BillingStore, Budget, CapacityTake, ChannelStore, Demand, Dimension,
    JointDecision, JointItem, JointStore, Policy, Scope, SlotAsk, SlotDecision, SlotStore,
    SubjectKey, WindowAsk, WindowStore,
};
use std::sync::Arc;

fn policy() -> Arc<Policy> {
    common::roomy_policy()
}

async fn store(server: &RedisServer, blocks: bool, twice: bool) -> RedisStore {
    let s = RedisStore::connect(
        &server.url(),
        // Not about a deadline: calls wait for Redis as long as a loaded host needs.
        common::patient().blocks(blocks.then(BlockSizing::default)),
    )
    .await
    .expect("connect");
    s.client().send_twice(twice);
    s
}

async fn used(s: &RedisStore, key: &SubjectKey) -> (u64, u64) {
    let v = s.view(key, Scope::Key, &policy()).await.expect("view");
    let of = |d: Dimension| v.iter().find(|l| l.dimension == d).map_or(0, |l| l.used);
    (of(Dimension::Requests), of(Dimension::Tokens))
}

/// What one of each decision grants and leaves counted in Redis, its keys named after
/// `run`, under limits of `limit` slots and capacity leases (1: the second run of a
/// decision finds them all taken; 1,000: room for quota blocks).
async fn one_of_each(server: &RedisServer, s: &RedisStore, run: &str, limit: u32) -> Vec<String> {
    let observer = store(server, false, false).await;
    let (p, d) = (policy(), Demand::tokens(10));
    let key = |name: &str| SubjectKey::from(format!("{run}-{name}"));
    let mut seen = Vec::new();

    let slot = s
        .acquire(&key("slot"), limit, 60_000)
        .await
        .expect("acquire");
    seen.push(format!(
        "acquire: {}",
        matches!(slot, SlotDecision::Acquired(_))
    ));

    let ask = SlotAsk {
        key: key("joint"),
        limit,
        ttl: 60_000,
    };
    let window = WindowAsk {
        scope: Scope::Key,
        policy: &p,
        demand: &d,
    };
    let joint = s
        .acquire_and_admit(&ask, Some(window))
        .await
        .expect("joint");
    seen.push(format!(
        "joint: {}",
        matches!(joint, JointDecision::Admitted { .. })
    ));

    let admit = s
        .admit(&key("admit"), Scope::Key, &p, &d)
        .await
        .expect("admit");
    seen.push(format!(
        "admit: {}",
        matches!(admit, Admission::Admitted(_))
    ));

    let items: Vec<JointItem> = ["cred", "cred|model"]
        .into_iter()
        .map(|k| JointItem {
            key: key(k),
            scope: Scope::Key,
            policy: p.clone(),
            demand: d,
        })
        .collect();
    let chan = format!("{run}-chan");
    let (_, take) = s
        .admit_all_and_acquire(&items, &chan, limit, 60_000)
        .await
        .expect("channel");
    seen.push(format!(
        "capacity: {}",
        matches!(take, CapacityTake::Taken(_))
    ));

    for k in ["slot", "joint"] {
        let n = observer.in_flight(&key(k)).await.unwrap();
        seen.push(format!("{k} leases: {n}"));
    }
    for k in ["joint", "admit", "cred", "cred|model"] {
        seen.push(format!("{k} used: {:?}", used(&observer, &key(k)).await));
    }
    let count = format!(
        "local n = 0 for _, k in ipairs(redis.call('KEYS', '*capacity*{chan}*')) do \
         n = n + redis.call('ZCARD', k) end return n"
    );
    let leases = server.cli(&["EVAL", &count, "0"]);
    seen.push(format!("capacity leases: {}", leases.trim()));

    let tenant = format!("{run}-tenant");
    observer.set_balance(&tenant, 1_000).await.unwrap();
    let budget = Budget::new(format!("{run}-budget"), 1_000, None);
    let reserve = BillingRequest {
        attempt: format!("{run}-attempt").into(),
        tenant: Some(tenant.as_str().into()),
        key: key("billed"),
        spend_cap: None,
        budgets: vec![budget.clone()].into(),
        money: 10,
        bill_balance: true,
        lifetime_ms: portcullis_core::billing::DEFAULT_ATTEMPT_LIFETIME_MS,
        tenant_expected: false,
    };
    let decision = s.check_and_reserve(&reserve).await.expect("reserve");
    seen.push(format!("billing: {decision:?}"));
    let view = observer
        .account(Some(&tenant), &key("billed"), &[budget])
        .await
        .unwrap();
    seen.push(format!("budget reserved: {}", view.budgets[0].reserved));
    seen
}

async fn counted_once(blocks: bool) {
    let server = RedisServer::start();
    let limit = if blocks { 1_000 } else { 1 };
    let once = one_of_each(&server, &store(&server, blocks, false).await, "once", limit).await;
    let twice = one_of_each(&server, &store(&server, blocks, true).await, "twice", limit).await;
    assert_eq!(
        twice, once,
        "a decision run twice grants and counts what it did once"
    );
    if blocks {
        // The joint and channel decisions borrowed blocks: more than the one request
        // counted, and the same whether run once or twice.
        for one in [
            "joint leases: 1",
            "joint used: (1, 10)",
            "capacity leases: 1",
        ] {
            assert!(
                !once.contains(&one.to_owned()),
                "no block borrowed: {once:?}"
            );
        }
    } else {
        assert_eq!(
            once,
            [
                "acquire: true",
                "joint: true",
                "admit: true",
                "capacity: true",
                "slot leases: 1",
                "joint leases: 1",
                "joint used: (1, 10)",
                "admit used: (1, 10)",
                "cred used: (1, 10)",
                "cred|model used: (1, 10)",
                "capacity leases: 1",
                "billing: Admitted",
                "budget reserved: 10",
            ]
        );
    }
}

#[tokio::test]
async fn d9_a_decision_run_twice_counts_once() {
    counted_once(false).await;
}

#[tokio::test]
async fn d9_a_quota_block_borrowed_twice_counts_once() {
    counted_once(true).await;
}
