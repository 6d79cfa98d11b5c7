//! Keys managed while the gateway runs (K1–K8): the records database's keys through
//! the admin API and the model routes, on SQLite and on a PostgreSQL server the test
//! starts, one gateway or two sharing the database.

mod common;

use common::*;
use portcullis::core::MemoryStore;
use portcullis_proxy::keys::Directory;
use portcullis_proxy::{Config, Gateway};
use portcullis_test_support::postgres::PostgresServer;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOKEN: &str = "admin-token-records-0123";

/// The 1 s a change takes to reach every instance (K4), and the scheduling slack a
/// loaded two-core host adds to a timed observation.
const PROPAGATION: Duration = Duration::from_secs(1);
const SCHEDULING_SLACK: Duration = Duration::from_secs(1);

struct Gw {
    addr: SocketAddr,
    _fake: portcullis_fake_upstream::FakeUpstream,
    _directory: Arc<Directory>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Gw {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn temp_dir() -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "pcx-proxy-records-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A gateway (memory store, fake upstream) on the records database at `url`.
async fn gateway(url: &str, hash_env: &str) -> Gw {
    let text = format!(
        "[server]\nadmin_token = \"{TOKEN}\"\n\n[database]\nurl = \"{url}\"\nhash_secret_env = \"{hash_env}\"\n\n[policies.tight]\nconcurrency = 1\n\n[tenants.filed]\nbalance = 1000000\n{CHANNELS}"
    );
    let config = Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let directory = Directory::open(&config)
        .await
        .expect("the records database")
        .expect("configured");
    let fake = portcullis_fake_upstream::FakeUpstream::start().await;
    let app = Gateway::new(config, MemoryStore::new())
        .fake_upstream(fake.base_url())
        .directory(directory.clone())
        .router()
        .expect("the gateway");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Gw {
        addr,
        _fake: fake,
        _directory: directory,
        server,
    }
}

async fn sqlite_gateway() -> (Gw, std::path::PathBuf) {
    let dir = temp_dir();
    let url = format!("sqlite://{}", dir.join("records.db").display());
    (gateway(&url, "PCX_TEST_UNSET_HASH_SECRET").await, dir)
}

/// An admin call with `bearer`.
async fn admin(
    addr: SocketAddr,
    bearer: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = match body {
        Some(b) => Req::post(path, b.to_string()).header("content-type", "application/json"),
        None => Req::get(path),
    };
    req.method = method.parse().unwrap();
    let r = send(
        addr,
        &req.header("authorization", format!("Bearer {bearer}")),
    )
    .await;
    let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    (r.status.as_u16(), v)
}

async fn generate(addr: SocketAddr, key: &str) -> u16 {
    send(addr, &ask(Dialect::OpenAi, key, false))
        .await
        .status
        .as_u16()
}

/// Waits until `key` answers `status` on `addr`; returns how long that took.
async fn until_status(addr: SocketAddr, key: &str, status: u16) -> Duration {
    let start = Instant::now();
    loop {
        if generate(addr, key).await == status {
            return start.elapsed();
        }
        assert!(start.elapsed() < WAIT, "{key:.12}… never answered {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// K2/K3: a key created through the admin API answers at once; its secret is in the
/// creation's answer only; revoked, it is refused (401).
#[tokio::test]
async fn k3_a_key_created_through_the_admin_api_answers_and_once_revoked_is_refused() {
    let (gw, _dir) = sqlite_gateway().await;
    let (status, created) = admin(
        gw.addr,
        TOKEN,
        "POST",
        "/admin/keys",
        Some(json!({"label": "first", "rpm": 100})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let secret = created["key"].as_str().unwrap().to_owned();
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("sk-pcx-"));
    until_status(gw.addr, &secret, 200).await;
    let (status, shown) = admin(gw.addr, TOKEN, "GET", &format!("/admin/keys/{id}"), None).await;
    assert_eq!(status, 200);
    assert_eq!(shown["rpm"], 100);
    assert!(
        !shown.to_string().contains(&secret[7..]),
        "the secret is shown once only: {shown}"
    );
    let (_, list) = admin(gw.addr, TOKEN, "GET", "/admin/keys", None).await;
    assert!(!list.to_string().contains(&secret[7..]));
    assert_eq!(list["keys"].as_array().unwrap().len(), 1);
    let (status, _) = admin(gw.addr, TOKEN, "DELETE", &format!("/admin/keys/{id}"), None).await;
    assert_eq!(status, 200);
    until_status(gw.addr, &secret, 401).await;
    assert_eq!(generate(gw.addr, "sk-pcx-unknown").await, 401);
    let (status, _) = admin(gw.addr, "wrong-token", "GET", "/admin/keys", None).await;
    assert_eq!(status, 401);
}

/// K3: a change the rules refuse is a 400 naming the field; nothing is written.
#[tokio::test]
async fn k3_bad_input_is_a_400_naming_the_field() {
    let (gw, _dir) = sqlite_gateway().await;
    for (body, field) in [
        (json!({"label": "x", "rpm": 0}), "rpm"),
        (json!({"label": "x", "policy": "nope"}), "policy"),
        (json!({"label": "x", "tenant": "nobody"}), "tenant"),
        (json!({"label": "x", "models": ["no-such-model"]}), "models"),
        (
            json!({"label": "x", "expires_at": "tomorrow"}),
            "expires_at",
        ),
        (json!({"label": ""}), "label"),
    ] {
        let (status, v) = admin(gw.addr, TOKEN, "POST", "/admin/keys", Some(body.clone())).await;
        assert_eq!(
            (status, v["error"]["field"].as_str()),
            (400, Some(field)),
            "{body} → {v}"
        );
    }
    let (status, v) = admin(
        gw.addr,
        TOKEN,
        "POST",
        "/admin/keys",
        Some(json!({"label": "x", "colour": "red"})),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("colour"),
        "{v}"
    );
    let (_, list) = admin(gw.addr, TOKEN, "GET", "/admin/keys", None).await;
    assert_eq!(
        list["keys"].as_array().unwrap().len(),
        0,
        "nothing was written"
    );
}

/// K5: a rotated key's new secret works at once; the old one through its grace only.
#[tokio::test]
async fn k5_rotation_new_secret_works_old_one_only_through_its_grace() {
    let (gw, _dir) = sqlite_gateway().await;
    let (_, a) = admin(
        gw.addr,
        TOKEN,
        "POST",
        "/admin/keys",
        Some(json!({"label": "a"})),
    )
    .await;
    let (_, b) = admin(
        gw.addr,
        TOKEN,
        "POST",
        "/admin/keys",
        Some(json!({"label": "b"})),
    )
    .await;
    let rotate = |id: &Value, grace: u64| {
        (
            format!("/admin/keys/{}/rotate", id.as_str().unwrap()),
            json!({"grace_seconds": grace}),
        )
    };
    let (path, body) = rotate(&a["id"], 3600);
    let (status, ra) = admin(gw.addr, TOKEN, "POST", &path, Some(body)).await;
    assert_eq!(status, 200, "{ra}");
    let (path, body) = rotate(&b["id"], 0);
    let (_, rb) = admin(gw.addr, TOKEN, "POST", &path, Some(body)).await;
    until_status(gw.addr, ra["key"].as_str().unwrap(), 200).await;
    until_status(gw.addr, rb["key"].as_str().unwrap(), 200).await;
    assert_eq!(
        generate(gw.addr, a["key"].as_str().unwrap()).await,
        200,
        "in its grace"
    );
    assert_eq!(
        generate(gw.addr, b["key"].as_str().unwrap()).await,
        401,
        "no grace: refused"
    );
}

/// K6: a tenant's token manages its own tenant's keys only: another tenant's key is a
/// 404 to it (read, change, rotate, revoke), and it cannot create keys elsewhere.
#[tokio::test]
async fn k6_a_tenant_token_cannot_read_or_change_another_tenants_key() {
    let (gw, _dir) = sqlite_gateway().await;
    for name in ["acme", "other"] {
        let (status, v) = admin(
            gw.addr,
            TOKEN,
            "POST",
            "/admin/tenants",
            Some(json!({"name": name, "balance": 1_000_000})),
        )
        .await;
        assert_eq!(status, 201, "{v}");
    }
    let (_, theirs) = admin(
        gw.addr,
        TOKEN,
        "POST",
        "/admin/keys",
        Some(json!({"label": "theirs", "tenant": "other"})),
    )
    .await;
    let (status, tok) = admin(gw.addr, TOKEN, "POST", "/admin/tenants/acme/tokens", None).await;
    assert_eq!(status, 201, "{tok}");
    let token = tok["token"].as_str().unwrap().to_owned();
    let id = theirs["id"].as_str().unwrap();
    // The token reaches this instance's view through its follower.
    let start = Instant::now();
    let mine = loop {
        let (status, v) = admin(
            gw.addr,
            &token,
            "POST",
            "/admin/keys",
            Some(json!({"label": "mine"})),
        )
        .await;
        if status == 201 {
            break v;
        }
        assert!(
            start.elapsed() < WAIT,
            "the token never worked: {status} {v}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(mine["tenant"], "acme", "a token's key is of its tenant");
    for (method, path, body) in [
        ("GET", format!("/admin/keys/{id}"), None),
        (
            "PATCH",
            format!("/admin/keys/{id}"),
            Some(json!({"rpm": 1})),
        ),
        ("POST", format!("/admin/keys/{id}/rotate"), Some(json!({}))),
        ("DELETE", format!("/admin/keys/{id}"), None),
    ] {
        let (status, v) = admin(gw.addr, &token, method, &path, body).await;
        assert_eq!(status, 404, "{method} {path}: {v}");
    }
    let (status, v) = admin(
        gw.addr,
        &token,
        "POST",
        "/admin/keys",
        Some(json!({"label": "x", "tenant": "other"})),
    )
    .await;
    assert_eq!(
        (status, v["error"]["field"].as_str()),
        (400, Some("tenant"))
    );
    let (status, _) = admin(
        gw.addr,
        &token,
        "POST",
        "/admin/tenants/acme/top-up",
        Some(json!({"amount": 5})),
    )
    .await;
    assert_eq!(status, 403, "tenant routes are the admin's");
    let (_, list) = admin(gw.addr, &token, "GET", "/admin/keys?tenant=other", None).await;
    let ids: Vec<_> = list["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["id"].clone())
        .collect();
    assert_eq!(
        ids,
        vec![mine["id"].clone()],
        "only its own tenant's keys are listed"
    );
    let (_, still) = admin(gw.addr, TOKEN, "GET", &format!("/admin/keys/{id}"), None).await;
    assert_eq!(still["state"], "active");
    assert_eq!(still.get("rpm"), Some(&Value::Null));
    let (status, v) = admin(
        gw.addr,
        TOKEN,
        "POST",
        "/admin/tenants/acme/top-up",
        Some(json!({"amount": 250})),
    )
    .await;
    assert_eq!(
        (status, v["balance"].as_i64()),
        (200, Some(1_000_250)),
        "{v}"
    );
    let (_, audit) = admin(gw.addr, TOKEN, "GET", "/admin/audit", None).await;
    let actions: Vec<&str> = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert!(
        actions.contains(&"tenant.top-up") && actions.contains(&"token.create"),
        "{actions:?}"
    );
    assert!(
        !audit.to_string().contains(&token[7..]),
        "no token in the audit trail"
    );
}

/// K6: a tenant's token cannot give a key more than its tenant has: a spend cap above
/// the least of its balance and budgets is a 400 naming `spend_cap`; a named policy or a
/// subscription is the operator's to give (400 naming the field), and a key the operator
/// gave one keeps it through the tenant's own changes.
#[tokio::test]
async fn k6_a_tenant_token_cannot_give_a_key_more_than_its_tenant_has() {
    let (gw, _dir) = sqlite_gateway().await;
    let (status, v) = admin(
        gw.addr,
        TOKEN,
        "POST",
        "/admin/tenants",
        Some(json!({"name": "acme", "balance": 5_000, "budgets": [{"name": "month", "limit": 3_000}]})),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let (_, tok) = admin(gw.addr, TOKEN, "POST", "/admin/tenants/acme/tokens", None).await;
    let token = tok["token"].as_str().unwrap().to_owned();
    let create = |body: Value| {
        let token = token.clone();
        async move {
            let start = Instant::now();
            loop {
                let (status, v) =
                    admin(gw.addr, &token, "POST", "/admin/keys", Some(body.clone())).await;
                // The token reaches this instance's view through its follower.
                if status != 401 {
                    return (status, v);
                }
                assert!(start.elapsed() < WAIT, "the token never worked: {v}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let (status, v) = create(json!({"label": "big", "spend_cap": 3_001})).await;
    assert_eq!(
        (status, v["error"]["field"].as_str()),
        (400, Some("spend_cap")),
        "{v}"
    );
    assert!(
        v["error"]["message"].as_str().unwrap().contains("3000"),
        "{v}"
    );
    for (field, body) in [
        ("policy", json!({"label": "p", "policy": "tight"})),
        (
            "subscription",
            json!({"label": "s", "subscription": {"policy": "tight"}}),
        ),
    ] {
        let (status, v) = create(body).await;
        assert_eq!(
            (status, v["error"]["field"].as_str()),
            (400, Some(field)),
            "{v}"
        );
    }
    let (status, v) = create(json!({"label": "ok", "spend_cap": 3_000, "rpm": 5})).await;
    assert_eq!(status, 201, "{v}");
    // The operator gives a key a policy; the tenant renames it and keeps the policy,
    // but cannot take it away or raise the cap past what the tenant has.
    let (status, given) = admin(
        gw.addr,
        TOKEN,
        "POST",
        "/admin/keys",
        Some(json!({"label": "given", "tenant": "acme", "policy": "tight", "spend_cap": 4_000})),
    )
    .await;
    assert_eq!(status, 201, "{given}");
    let path = format!("/admin/keys/{}", given["id"].as_str().unwrap());
    let (status, v) = admin(
        gw.addr,
        &token,
        "PATCH",
        &path,
        Some(json!({"label": "renamed"})),
    )
    .await;
    assert_eq!(
        (status, v["policy"].as_str(), v["spend_cap"].as_i64()),
        (200, Some("tight"), Some(4_000)),
        "{v}"
    );
    let (status, v) = admin(
        gw.addr,
        &token,
        "PATCH",
        &path,
        Some(json!({"policy": null})),
    )
    .await;
    assert_eq!(
        (status, v["error"]["field"].as_str()),
        (400, Some("policy")),
        "{v}"
    );
    let (status, v) = admin(
        gw.addr,
        &token,
        "PATCH",
        &path,
        Some(json!({"spend_cap": 4_500})),
    )
    .await;
    assert_eq!(
        (status, v["error"]["field"].as_str()),
        (400, Some("spend_cap")),
        "{v}"
    );
}

/// K4/K8: two gateways sharing one PostgreSQL: a key created on one answers on the
/// other within the second; a limit lowered on one holds on both; revoked on one, it
/// is refused on both within the second.
#[tokio::test]
async fn k8_two_instances_sharing_postgres_see_every_change_within_a_second() {
    let pg = PostgresServer::start();
    let var = "PCX_TEST_HASH_SECRET_K8";
    // SAFETY: set before any gateway reads it, with a name no other test uses.
    unsafe { std::env::set_var(var, "k8-shared-hash-secret-0123456789") };
    let a = gateway(&pg.url(), var).await;
    let b = gateway(&pg.url(), var).await;
    let bound = PROPAGATION + SCHEDULING_SLACK;
    let (_, k) = admin(
        a.addr,
        TOKEN,
        "POST",
        "/admin/keys",
        Some(json!({"label": "shared"})),
    )
    .await;
    let secret = k["key"].as_str().unwrap().to_owned();
    let id = k["id"].as_str().unwrap().to_owned();
    let took = until_status(b.addr, &secret, 200).await;
    assert!(took < bound, "created on A, answered on B after {took:?}");
    let (status, v) = admin(
        a.addr,
        TOKEN,
        "PATCH",
        &format!("/admin/keys/{id}"),
        Some(json!({"rpm": 1})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    // Lowered to one request a minute: B refuses a request once one has gone in.
    let start = Instant::now();
    loop {
        if generate(b.addr, &secret).await == 429 {
            break;
        }
        assert!(
            start.elapsed() < bound,
            "the lowered limit did not hold on B within {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, _) = admin(
        a.addr,
        TOKEN,
        "PATCH",
        &format!("/admin/keys/{id}"),
        Some(json!({"rpm": null})),
    )
    .await;
    assert_eq!(status, 200);
    until_status(b.addr, &secret, 200).await;
    // Revoked on A while B serves it: refused on both within the bound.
    let (status, _) = admin(a.addr, TOKEN, "DELETE", &format!("/admin/keys/{id}"), None).await;
    assert_eq!(status, 200);
    let revoked = Instant::now();
    let mut admitted_after = 0u32;
    loop {
        match generate(b.addr, &secret).await {
            401 => break,
            _ => admitted_after += 1,
        }
        assert!(
            revoked.elapsed() < bound,
            "B still served the revoked key ({admitted_after} admitted)"
        );
    }
    // A answered the revocation before its own follower applied it: the same bound.
    let on_a = until_status(a.addr, &secret, 401).await;
    assert!(
        on_a < bound,
        "A still served the revoked key after {on_a:?}"
    );
    println!(
        "k8: admitted on B after the revocation: {admitted_after} in {:?}",
        revoked.elapsed()
    );
}

/// K7: the database killed under the gateway: known keys keep answering, key changes
/// answer 503 (and never hang), and after the restart changes work again.
#[tokio::test]
async fn k7_database_down_known_keys_work_changes_answer_503_then_recover() {
    let mut pg = PostgresServer::start();
    let var = "PCX_TEST_HASH_SECRET_K7";
    // SAFETY: set before any gateway reads it, with a name no other test uses.
    unsafe { std::env::set_var(var, "k7-shared-hash-secret-0123456789") };
    let gw = gateway(&pg.url(), var).await;
    let (_, k) = admin(
        gw.addr,
        TOKEN,
        "POST",
        "/admin/keys",
        Some(json!({"label": "known"})),
    )
    .await;
    let secret = k["key"].as_str().unwrap().to_owned();
    until_status(gw.addr, &secret, 200).await;
    pg.kill();
    let start = Instant::now();
    let (status, v) = admin(
        gw.addr,
        TOKEN,
        "POST",
        "/admin/keys",
        Some(json!({"label": "new"})),
    )
    .await;
    assert_eq!(status, 503, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unavailable")
    );
    assert!(start.elapsed() < WAIT, "answered, not hung");
    for _ in 0..5 {
        assert_eq!(
            generate(gw.addr, &secret).await,
            200,
            "a known key is served meanwhile"
        );
    }
    pg.restart();
    let start = Instant::now();
    let created = loop {
        let (status, v) = admin(
            gw.addr,
            TOKEN,
            "POST",
            "/admin/keys",
            Some(json!({"label": "after"})),
        )
        .await;
        if status == 201 {
            break v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no recovery: {status} {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    until_status(gw.addr, created["key"].as_str().unwrap(), 200).await;
    assert_eq!(
        generate(gw.addr, &secret).await,
        200,
        "written before: kept"
    );
}
