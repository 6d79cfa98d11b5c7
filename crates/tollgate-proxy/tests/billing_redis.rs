//! Billing through the proxy on a Redis store when Redis loses its data (SPEC B7): the
//! tenants the configuration names get a fail-closed 503 with their own code (50303),
//! never a 402 and never a silent re-seed; an operator's explicit balance brings them
//! back.

mod common;
#[path = "../../tollgate-redis/tests/common/mod.rs"]
mod redis_server;

use common::*;
use redis_server::RedisServer;
use std::time::Duration;
use tokio::net::TcpListener;
use tollgate_fake_upstream::FakeUpstream;
use tollgate_proxy::{Config, Gateway};
use tollgate_redis::{RedisStore, RedisStoreOptions};

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
    let billed = eventually(Duration::from_secs(2), || {
        let s = store.clone();
        async move {
            let v = tollgate::core::BillingStore::account(&s, Some("acme"), &"acme".into(), &[])
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
