//! Billing through the proxy on a Redis store when Redis loses its data (B7): the
//! tenants the configuration names get a fail-closed 503 with their own code (50303),
//! never a 402 and never a silent re-seed; an operator's explicit balance brings them
//! back.

mod common;
#[path = "../../portcullis-redis/tests/common/mod.rs"]
mod redis_server;

use common::*;
use portcullis_fake_upstream::FakeUpstream;
use portcullis_proxy::{Config, Gateway};
use portcullis_redis::{RedisStore, RedisStoreOptions};
use redis_server::RedisServer;
use std::time::Duration;
use tokio::net::TcpListener;

const TOKEN: &str = "admin-token-0123456789";

fn config() -> String {
    format!(
        r#"
[server]
admin_token = "{TOKEN}"

[policies.open]

[tenants.acme]
balance = 1_000_000_000

[keys.acme]
key = "sk-acme"
tenant = "acme"
policy = "open"

{CHANNELS}
"#
    )
}

fn set_balance(tenant: &str, body: &str) -> Req {
    let mut r = Req::post(format!("/admin/tenants/{tenant}/balance"), body.to_owned())
        .header("authorization", format!("Bearer {TOKEN}"));
    r.method = hyper::Method::PUT;
    r
}

/// B7: Redis restarted without its data (here `FLUSHALL`) → every request of a
/// configured tenant is a 503 with code 50303 in every dialect, not a 402, and nothing
/// is sent upstream; nothing re-seeds the balance by itself; after
/// `PUT /admin/tenants/acme/balance` requests pass again and are billed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_data_less_redis_restart_is_503_not_402_until_an_operator_sets_the_balance() {
    let server = RedisServer::start();
    let store = RedisStore::connect(
        &server.url(),
        RedisStoreOptions::default().deadline(Duration::from_secs(1)),
    )
    .await
    .expect("connect");
    let fake = FakeUpstream::start().await;
    let config = Config::parse(&config()).expect("config");
    let app = Gateway::new(config, store.clone())
        .fake_upstream(fake.base_url())
        .build()
        .await
        .expect("the gateway");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let r = send(addr, &ask(Dialect::OpenAi, "sk-acme", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let calls = fake.stats().total_calls;

    server.cli(&["FLUSHALL"]);
    for d in DIALECTS {
        let r = send(addr, &ask(d, "sk-acme", false)).await;
        rejection(&r, d, 50303);
        assert!(r.header("retry-after").is_some());
    }
    assert_eq!(fake.stats().total_calls, calls, "nothing sent upstream");
    assert_eq!(
        server.cli(&["EXISTS", &store.tenant_key("acme")]).trim(),
        "0",
        "the balance was re-seeded silently"
    );

    let r = send(addr, &set_balance("acme", r#"{"balance": "lots"}"#)).await;
    assert_eq!(r.status, 400);
    let r = send(addr, &set_balance("acme", r#"{"balance": 5000000}"#)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["balance"], 5_000_000);
    let r = send(addr, &ask(Dialect::OpenAi, "sk-acme", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let billed = eventually(WAIT, || {
        let s = store.clone();
        async move {
            let v = portcullis::core::BillingStore::account(&s, Some("acme"), &"acme".into(), &[])
                .await
                .unwrap();
            v.balance.is_some_and(|b| b < 5_000_000)
        }
    })
    .await;
    assert!(
        billed,
        "the request after the operator's balance was not billed"
    );
    serving.abort();
}

/// B7: Redis frozen (SIGSTOP) while the settlements of finished requests are sent: they
/// time out, wait in the layer's retry queue and land once Redis thaws. Afterwards the
/// books add up exactly: balance = start − settled costs, one usage record per attempt
/// (settled or pending), the pending list and the tenant's pending money = the pending
/// records, nothing left reserved in the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_settlements_during_a_frozen_redis_land_after_it_thaws() {
    use http::{Request, Response};
    use portcullis::core::{
        AttemptState, BillingStore, Budget, Demand, Subject, Usage, UsageRecorder,
    };
    use portcullis::{BillingGateLayer, BillingProfile, UsageRecord};
    use std::sync::{Arc, Mutex};
    use tower::{ServiceBuilder, ServiceExt};

    const N: usize = 12;
    const START: i64 = 1_000_000;
    let server = RedisServer::start();
    let store = RedisStore::connect(
        &server.url(),
        // Short enough that the settlements fail fast while Redis is frozen; long enough
        // that a loaded host does not make the admissions below miss it (billing fails
        // closed: a missed deadline would refuse them).
        RedisStoreOptions::default().deadline(Duration::from_millis(250)),
    )
    .await
    .expect("connect");
    store.seed_balance("acme", START).await.unwrap();
    let budget: Arc<[Budget]> = Arc::from(vec![Budget::new("frozen", 1_000_000, None)]);
    let records: Arc<Mutex<Vec<UsageRecord>>> = Arc::default();
    let sink = records.clone();
    let layer = BillingGateLayer::new(store.clone())
        .sink(move |r: UsageRecord| sink.lock().unwrap().push(r));
    // Even requests report a complete usage with a cost; odd ones nothing (pending).
    let inner = tower::service_fn(|r: Request<usize>| async move {
        let i = *r.body();
        if i % 2 == 0 {
            let rec = r.extensions().get::<UsageRecorder>().cloned().unwrap();
            rec.record(Usage {
                input_tokens: 10,
                output_tokens: 5,
                cost: Some(10 + i as i64),
                ..Usage::default()
            });
        }
        Ok::<_, std::convert::Infallible>(Response::new(http_body_util::Full::new(
            bytes::Bytes::from_static(b"ok"),
        )))
    });
    let svc = ServiceBuilder::new().layer(layer.clone()).service(inner);
    let mut answers = Vec::new();
    for i in 0..N {
        let mut r = Request::new(i);
        r.extensions_mut()
            .insert(Subject::new("key-1").with_tenant("acme"));
        r.extensions_mut().insert(Demand {
            money: 100,
            ..Demand::default()
        });
        r.extensions_mut().insert(
            BillingProfile::new()
                .with_budgets(budget.clone())
                .with_tenant_expected(true),
        );
        answers.push(svc.clone().oneshot(r).await.expect("admitted"));
    }
    server.stop();
    // The bodies end while Redis is frozen: every settlement fails (each within the
    // deadline; waited for generously).
    drop(answers);
    let all_failed = eventually(Duration::from_secs(20), || {
        let layer = layer.clone();
        async move { layer.settlement_stats().failed >= N as u64 }
    })
    .await;
    let frozen = layer.settlement_stats();
    assert!(
        all_failed,
        "settlements did not fail while frozen: {frozen:?}"
    );
    assert_eq!(
        records.lock().unwrap().len(),
        0,
        "recorded before it landed"
    );
    assert_eq!(frozen.failed, N as u64, "{frozen:?}");
    server.cont();
    let landed = eventually(Duration::from_secs(10), || {
        let (records, layer) = (records.clone(), layer.clone());
        async move { records.lock().unwrap().len() == N && layer.settlement_stats().waiting == 0 }
    })
    .await;
    let stats = layer.settlement_stats();
    assert!(landed, "settlements did not land after the thaw: {stats:?}");
    assert_eq!(
        (stats.landed_late, stats.dropped),
        (N as u64, 0),
        "{stats:?}"
    );

    let recs = records.lock().unwrap().clone();
    let mut ids: Vec<_> = recs.iter().map(|r| r.attempt.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), N, "one record per attempt");
    let settled: i64 = recs
        .iter()
        .filter_map(|r| match r.outcome {
            AttemptState::Settled(c) => Some(c),
            _ => None,
        })
        .sum();
    let pending_records: Vec<_> = recs
        .iter()
        .filter(|r| matches!(r.outcome, AttemptState::Pending(_)))
        .collect();
    assert_eq!(pending_records.len(), N / 2);
    assert_eq!(
        settled,
        (0..N as i64).step_by(2).map(|i| 10 + i).sum::<i64>()
    );
    let v = store
        .account(Some("acme"), &"key-1".into(), &budget)
        .await
        .unwrap();
    assert_eq!(
        v.balance,
        Some(START - settled),
        "balance = start − settled costs"
    );
    assert_eq!(v.key_spent, settled);
    let pending_money: i64 = pending_records.iter().map(|r| r.amount()).sum();
    assert_eq!(v.tenant_pending, pending_money);
    assert_eq!(
        (v.budgets[0].spent, v.budgets[0].reserved),
        (settled, pending_money),
        "the budget holds the pending upper bounds and nothing else"
    );
    let mut listed = store.pending().await.unwrap();
    listed.sort();
    let mut expected: Vec<_> = pending_records
        .iter()
        .map(|r| (r.attempt_ref(), r.amount()))
        .collect();
    expected.sort();
    assert_eq!(listed, expected, "the pending list = the pending records");
}
