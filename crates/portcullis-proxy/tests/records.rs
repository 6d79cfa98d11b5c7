//! Keys managed while the gateway runs (K1–K8): the records database's keys through
//! the admin API and the model routes, on SQLite and on a PostgreSQL server the test
//! starts, one gateway or two sharing the database.

mod common;

use common::*;
use portcullis_proxy::Config;
use portcullis_proxy::keys::Directory;
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
    // A process of the same id may have left it (ids are reused): start empty.
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A gateway (memory store, fake upstream) on the records database at `url`.
async fn gateway(url: &str, hash_env: &str) -> Gw {
    gateway_with(url, hash_env, "").await
}

/// [`gateway`] with more `[database]` settings.
async fn gateway_with(url: &str, hash_env: &str, database: &str) -> Gw {
    let text = format!(
        "[server]\nadmin_token = \"{TOKEN}\"\n\n[database]\nurl = \"{url}\"\nhash_secret_env = \"{hash_env}\"\n{database}\n\n[policies.tight]\nconcurrency = 1\n\n[tenants.filed]\nbalance = 1000000\n{CHANNELS}"
    );
    serve(&text).await
}

/// The gateway `text` configures, built as `portcullis serve` builds it (its store
/// opened from `[store]`, the records database followed, balances seeded from the
/// books), in front of a fake upstream of its own.
async fn serve(text: &str) -> Gw {
    serve_to(text, None).await
}

/// [`serve`], its channels in front of the upstream at `upstream` when given (another
/// gateway's fake: two instances of one provider).
async fn serve_to(text: &str, upstream: Option<String>) -> Gw {
    let config = Config::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let directory = Directory::open(&config)
        .await
        .expect("the records database")
        .expect("configured");
    let fake = portcullis_fake_upstream::FakeUpstream::start().await;
    let base = upstream.unwrap_or_else(|| fake.base_url());
    let (addr, server) = serve_with_directory(config, base, Some(directory.clone())).await;
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

/// A gateway on the records database at `url` and the store at `store` (`memory` or a
/// Redis url) — built as `portcullis serve` builds it. The store's deadline is generous:
/// these tests are about keys, not about a Redis call's deadline on a loaded host.
async fn gateway_on(url: &str, hash_env: &str, store: &str) -> Gw {
    let text = format!(
        "[server]\nadmin_token = \"{TOKEN}\"\n\n[store]\nurl = \"{store}\"\ndeadline = \"2s\"\n\n[database]\nurl = \"{url}\"\nhash_secret_env = \"{hash_env}\"\n\n[tenants.filed]\nbalance = 1000000\n{CHANNELS}"
    );
    serve(&text).await
}

/// One answer of a load run: when the request was sent, by which instance it was
/// answered, and how.
#[derive(Clone, Copy, Debug)]
struct Shot {
    sent: Instant,
    answered: Instant,
    instance: usize,
    status: u16,
}

/// Requests with one secret, [`Load::PER_INSTANCE`] clients on each instance one after
/// the other, until stopped — bounded by [`Load::MAX_TIME`] and [`Load::MAX_SHOTS`].
struct Load {
    stop: Arc<std::sync::atomic::AtomicBool>,
    /// Answers received so far, by every client.
    answered: Arc<std::sync::atomic::AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Shot>>>,
}

impl Load {
    const PER_INSTANCE: usize = 2;
    const MAX_TIME: Duration = Duration::from_secs(60);
    const MAX_SHOTS: usize = 20_000;

    fn start(addrs: &[SocketAddr], secret: &str) -> Load {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for (instance, &addr) in addrs.iter().enumerate() {
            for _ in 0..Self::PER_INSTANCE {
                let (stop, answered, secret) = (stop.clone(), answered.clone(), secret.to_owned());
                tasks.push(tokio::spawn(async move {
                    let begun = Instant::now();
                    let mut shots = Vec::new();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed)
                        && begun.elapsed() < Self::MAX_TIME
                        && shots.len() < Self::MAX_SHOTS
                    {
                        let sent = Instant::now();
                        let status = generate(addr, &secret).await;
                        shots.push(Shot {
                            sent,
                            answered: Instant::now(),
                            instance,
                            status,
                        });
                        answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    shots
                }));
            }
        }
        Load {
            stop,
            answered,
            tasks,
        }
    }

    /// Waits (bounded) until the clients have had `n` answers.
    async fn until_answered(&self, n: usize) {
        let start = Instant::now();
        while self.answered.load(std::sync::atomic::Ordering::Relaxed) < n {
            assert!(start.elapsed() < WAIT * 4, "the load never got {n} answers");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stop(self) -> Vec<Shot> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut all = Vec::new();
        for t in self.tasks {
            all.extend(t.await.expect("load client"));
        }
        all.sort_by_key(|s| s.sent);
        all
    }
}

/// K8 under load (#36 item 8): two gateways sharing one PostgreSQL database and one
/// Redis store, clients on both all along.
/// - A key created on A answers on B within the second.
/// - Revoked on A while its load runs on both (and other keys are created on both at
///   the same moment, so followers' reads race the revocation), it is refused on both
///   within the second, and once an instance refused it, no later request is admitted
///   there (nothing brings it back). What was admitted after the revocation is counted.
/// - A limit lowered on A holds on both together: the limit is counted in the shared
///   store.
/// - A rotated key's old secret works through its grace and not after; the new one at
///   once on both.
/// - The database killed under load: the known key keeps answering 200 on both, key
///   changes answer 503, and after the restart changes work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k8_two_instances_sharing_postgres_and_redis_under_load() {
    let mut pg = PostgresServer::start();
    let redis = portcullis_test_support::redis::RedisServer::start();
    let var = "PCX_TEST_HASH_SECRET_K8_LOAD";
    // SAFETY: set before any gateway reads it, with a name no other test uses.
    unsafe { std::env::set_var(var, "k8-load-shared-hash-secret-0123456789") };
    let a = gateway_on(&pg.url(), var, &redis.url()).await;
    let b = gateway_on(&pg.url(), var, &redis.url()).await;
    let both = [a.addr, b.addr];
    let bound = PROPAGATION + SCHEDULING_SLACK;
    let create = |addr: SocketAddr, label: &'static str| async move {
        let (status, v) = admin(
            addr,
            TOKEN,
            "POST",
            "/admin/keys",
            Some(json!({"label": label})),
        )
        .await;
        assert_eq!(status, 201, "{v}");
        (
            v["key"].as_str().unwrap().to_owned(),
            v["id"].as_str().unwrap().to_owned(),
        )
    };

    // Created on A: answered on A as soon as the 201 is; on B within the bound.
    let (secret, id) = create(a.addr, "loaded").await;
    assert_eq!(
        generate(a.addr, &secret).await,
        200,
        "A refused the key it had just answered 201 for"
    );
    let took = until_status(b.addr, &secret, 200).await;
    assert!(took < bound, "created on A, answered on B after {took:?}");

    // Revoked on A under load, with other changes racing it on both instances.
    let load = Load::start(&both, &secret);
    load.until_answered(20).await;
    let revoked = Instant::now();
    let path = format!("/admin/keys/{id}");
    let (status, _) = tokio::join!(
        admin(a.addr, TOKEN, "DELETE", &path, None),
        create(a.addr, "racing-a"),
        create(b.addr, "racing-b"),
    )
    .0;
    assert_eq!(status, 200);
    assert_eq!(
        generate(a.addr, &secret).await,
        401,
        "A admitted the key it had just answered its revocation for"
    );
    for addr in both {
        let on = until_status(addr, &secret, 401).await;
        assert!(
            on < bound,
            "{addr} still served the revoked key after {on:?}"
        );
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let shots = load.stop().await;
    let after: Vec<&Shot> = shots.iter().filter(|s| s.sent >= revoked).collect();
    let admitted = after.iter().filter(|s| s.status == 200).count();
    let late: Vec<&&Shot> = after
        .iter()
        .filter(|s| s.status == 200 && s.sent > revoked + bound)
        .collect();
    println!(
        "k8 load: {} requests, {} after the revocation, {admitted} of them admitted",
        shots.len(),
        after.len()
    );
    assert!(
        shots.len() > after.len(),
        "the load ran before the revocation"
    );
    assert!(
        late.is_empty(),
        "admitted past {bound:?} after the revocation: {late:?}"
    );
    for instance in 0..2 {
        let mine: Vec<&Shot> = shots.iter().filter(|s| s.instance == instance).collect();
        // Once a refusal was answered, a request sent after it is never admitted. (By
        // send time alone, two requests sent a moment apart on two connections may be
        // checked in the other order on a loaded host: the earlier one after the
        // revocation reached the instance, the later one just before.)
        if let Some(refused) = mine
            .iter()
            .filter(|s| s.status == 401)
            .map(|s| s.answered)
            .min()
        {
            let back: Vec<_> = mine
                .iter()
                .filter(|s| s.sent > refused && s.status == 200)
                .collect();
            assert!(
                back.is_empty(),
                "instance {instance} admitted the key again after refusing it: {back:?}"
            );
        }
        assert!(
            mine.iter().all(|s| s.status == 200 || s.status == 401),
            "instance {instance}: {:?}",
            mine.iter().find(|s| s.status != 200 && s.status != 401)
        );
    }

    // A limit lowered on A holds on both together.
    let (secret, id) = create(b.addr, "limited").await;
    until_status(a.addr, &secret, 200).await;
    until_status(b.addr, &secret, 200).await;
    let load = Load::start(&both, &secret);
    let rpm = 10;
    let (status, v) = admin(
        a.addr,
        TOKEN,
        "PATCH",
        &format!("/admin/keys/{id}"),
        Some(json!({"rpm": rpm})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let lowered = Instant::now();
    tokio::time::sleep(bound + Duration::from_secs(2)).await;
    let shots = load.stop().await;
    let settled: Vec<&Shot> = shots.iter().filter(|s| s.sent > lowered + bound).collect();
    let admitted = settled.iter().filter(|s| s.status == 200).count();
    println!(
        "k8 load: rpm lowered to {rpm}: {admitted} of {} requests admitted on both after {bound:?}",
        settled.len()
    );
    assert!(
        admitted <= rpm,
        "{admitted} admitted by the two instances together under rpm = {rpm}"
    );
    for instance in 0..2 {
        assert!(
            settled
                .iter()
                .any(|s| s.instance == instance && s.status == 429),
            "instance {instance} never refused under the lowered limit"
        );
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

    // Rotated on B with a grace: the new secret at once on both, the old one through
    // its grace only.
    let grace = Duration::from_secs(4);
    let load = Load::start(&both, &secret);
    let asked = Instant::now();
    let (status, r) = admin(
        b.addr,
        TOKEN,
        "POST",
        &format!("/admin/keys/{id}/rotate"),
        Some(json!({"grace_seconds": grace.as_secs()})),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let rotated = Instant::now();
    let new = r["key"].as_str().unwrap().to_owned();
    for addr in both {
        let on = until_status(addr, &new, 200).await;
        assert!(on < bound, "the new secret answered on {addr} after {on:?}");
    }
    tokio::time::sleep(grace + bound).await;
    let shots = load.stop().await;
    // The grace ends between `asked + grace` and `rotated + grace` (the gateway reads
    // its clock while the rotation is answered). A request answered before the first was
    // judged inside the grace however late the host ran it; one sent after the second,
    // outside. `edge` covers the milliseconds the gateway's wall clock is kept in.
    let edge = Duration::from_millis(100);
    let in_grace: Vec<&Shot> = shots
        .iter()
        .filter(|s| s.sent > rotated && s.answered + edge < asked + grace)
        .collect();
    let past: Vec<&Shot> = shots
        .iter()
        .filter(|s| s.sent > rotated + grace + edge)
        .collect();
    assert!(
        !in_grace.is_empty() && !past.is_empty(),
        "the load ran through and past the grace"
    );
    assert!(
        in_grace.iter().all(|s| s.status == 200),
        "the old secret refused during its grace: {:?}",
        in_grace.iter().find(|s| s.status != 200)
    );
    assert!(
        past.iter().all(|s| s.status == 401),
        "the old secret served after its grace: {:?}",
        past.iter().find(|s| s.status != 401)
    );

    // The database killed under load.
    let load = Load::start(&both, &new);
    load.until_answered(20).await;
    pg.kill();
    for addr in both {
        let (status, v) = admin(
            addr,
            TOKEN,
            "POST",
            "/admin/keys",
            Some(json!({"label": "x"})),
        )
        .await;
        assert_eq!(status, 503, "a change while the database is down: {v}");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    pg.restart();
    let start = Instant::now();
    for addr in both {
        loop {
            let (status, v) = admin(
                addr,
                TOKEN,
                "POST",
                "/admin/keys",
                Some(json!({"label": "back"})),
            )
            .await;
            if status == 201 {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no recovery on {addr}: {status} {v}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let shots = load.stop().await;
    println!(
        "k8 load: {} requests through the database's outage",
        shots.len()
    );
    assert!(
        shots.iter().all(|s| s.status == 200),
        "the known key was refused while the database was down: {:?}",
        shots.iter().find(|s| s.status != 200)
    );
    for instance in 0..2 {
        assert!(
            shots.iter().any(|s| s.instance == instance),
            "instance {instance} ran"
        );
    }
}

// ------------------------------------------------------------------ the ledger (B6)

/// Polls `GET /admin/usage?{query}` until its totals count `n` attempts; returns the
/// answer.
async fn usage_until(addr: SocketAddr, query: &str, n: u64) -> Value {
    let start = Instant::now();
    loop {
        let (status, v) = admin(addr, TOKEN, "GET", &format!("/admin/usage?{query}"), None).await;
        if status == 200 && v["totals"]["attempts"].as_u64() == Some(n) {
            return v;
        }
        assert!(
            start.elapsed() < WAIT * 4,
            "the ledger never held {n} attempts for {query:?}: {status} {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (bounded, generously: the ledger is written off the request path) until
/// `done` holds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < WAIT * 4, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn spool_is_empty(path: &std::path::Path) -> bool {
    std::fs::metadata(path).map_or(true, |m| m.len() == 0)
}

/// One tenant's books in a `GET /admin/books` answer.
fn books_of<'a>(books: &'a Value, tenant: &str) -> &'a Value {
    books["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tenant"] == tenant)
        .unwrap_or_else(|| panic!("no books of {tenant}: {books}"))
}

/// A tenant with `balance`, a key of it, and the key's secret.
async fn tenant_and_key(addr: SocketAddr, tenant: &str, balance: i64) -> (String, String) {
    let (status, v) = admin(
        addr,
        TOKEN,
        "POST",
        "/admin/tenants",
        Some(json!({"name": tenant, "balance": balance})),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let (status, k) = admin(
        addr,
        TOKEN,
        "POST",
        "/admin/keys",
        Some(json!({"label": format!("{tenant}-key"), "tenant": tenant})),
    )
    .await;
    assert_eq!(status, 201, "{k}");
    let secret = k["key"].as_str().unwrap().to_owned();
    until_status(addr, &secret, 200).await;
    (secret, k["id"].as_str().unwrap().to_owned())
}

/// B6: every billed attempt reaches the ledger — key, tenant, model, channel, tokens,
/// amount, outcome — and the usage query selects it by key label or id, sums it, pages
/// it and exports it as CSV; a tenant's token sees its own tenant's attempts only.
#[tokio::test]
async fn b6_every_attempt_reaches_the_ledger_and_the_usage_query() {
    let (gw, _dir) = sqlite_gateway().await;
    let (secret, id) = tenant_and_key(gw.addr, "acme", 1_000_000).await;
    let (other, _) = tenant_and_key(gw.addr, "other", 1_000_000).await;
    for _ in 0..9 {
        assert_eq!(generate(gw.addr, &secret).await, 200);
    }
    assert_eq!(generate(gw.addr, &other).await, 200);
    // until_status above sent one request each as well.
    let v = usage_until(gw.addr, "tenant=acme", 10).await;
    let rows = v["records"].as_array().unwrap();
    assert_eq!(rows.len(), 10);
    for r in rows {
        assert_eq!(r["key"], id.as_str(), "{r}");
        assert_eq!(r["tenant"], "acme");
        assert_eq!(r["model"], "gpt-4o-mini");
        assert_eq!(r["channel"], "openai-a");
        assert_eq!(r["outcome"], "settled");
        assert!(r["amount"].as_i64().unwrap() > 0, "{r}");
        assert!(r["usage"]["output_tokens"].as_u64().unwrap() > 0, "{r}");
        assert!(
            r["request_id"].as_str().is_some_and(|s| !s.is_empty()),
            "{r}"
        );
        assert!(r["at"].as_str().unwrap().ends_with('Z'), "{r}");
    }
    let total: i64 = rows.iter().map(|r| r["amount"].as_i64().unwrap()).sum();
    assert_eq!(v["totals"]["settled"].as_i64(), Some(total));
    let by_label = usage_until(gw.addr, "key=acme-key", 10).await;
    assert_eq!(by_label["records"], v["records"], "a key by its label");
    // Pages of 3 follow the cursor to the same ten.
    let (mut paged, mut cursor) = (Vec::new(), String::new());
    loop {
        let (_, p) = admin(
            gw.addr,
            TOKEN,
            "GET",
            &format!("/admin/usage?tenant=acme&limit=3{cursor}"),
            None,
        )
        .await;
        paged.extend(p["records"].as_array().unwrap().iter().cloned());
        match p["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(Value::Array(paged), v["records"]);
    let csv = send(
        gw.addr,
        &Req::get("/admin/usage?tenant=acme&format=csv")
            .header("authorization", format!("Bearer {TOKEN}")),
    )
    .await;
    assert_eq!(csv.status, 200);
    let text = String::from_utf8(csv.body.to_vec()).unwrap();
    assert!(text.starts_with("at,attempt,"), "{text}");
    assert_eq!(text.lines().count(), 11, "a header and ten rows: {text}");
    assert!(
        text.lines()
            .skip(1)
            .all(|l| l.contains(&id) && l.contains(",settled,")),
        "{text}"
    );
    for (query, field) in [
        ("outcome=lost", "outcome"),
        ("from=yesterday", "from"),
        ("cursor=x", "cursor"),
        ("format=xml", "format"),
    ] {
        let (status, e) = admin(
            gw.addr,
            TOKEN,
            "GET",
            &format!("/admin/usage?{query}"),
            None,
        )
        .await;
        assert_eq!(
            (status, e["error"]["field"].as_str()),
            (400, Some(field)),
            "{query}: {e}"
        );
    }
    // The other tenant's token: its own attempts, never acme's.
    let (_, tok) = admin(gw.addr, TOKEN, "POST", "/admin/tenants/other/tokens", None).await;
    let token = tok["token"].as_str().unwrap().to_owned();
    let start = Instant::now();
    let mine = loop {
        let (status, v) = admin(gw.addr, &token, "GET", "/admin/usage", None).await;
        if status == 200 {
            break v;
        }
        assert!(start.elapsed() < WAIT, "the token never worked: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(mine["totals"]["attempts"].as_u64(), Some(2), "{mine}");
    assert!(
        mine["records"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["tenant"] == "other")
    );
    let (status, e) = admin(gw.addr, &token, "GET", "/admin/usage?tenant=acme", None).await;
    assert_eq!(
        (status, e["error"]["field"].as_str()),
        (400, Some("tenant"))
    );
    let (status, _) = admin(gw.addr, &token, "GET", "/admin/books", None).await;
    assert_eq!(status, 403, "the books are the operator's");
}

/// B6: the books check — opening balance + top-ups = balance + settled + pending, per
/// tenant — is exact after traffic and a top-up, and names the difference when the
/// balance moved outside the books (an operator's explicit set).
#[tokio::test]
async fn b6_books_are_exact_after_traffic_and_show_a_difference() {
    let (gw, _dir) = sqlite_gateway().await;
    let (secret, _) = tenant_and_key(gw.addr, "acme", 1_000_000).await;
    for _ in 0..5 {
        assert_eq!(generate(gw.addr, &secret).await, 200);
    }
    let (status, _) = admin(
        gw.addr,
        TOKEN,
        "POST",
        "/admin/tenants/acme/top-up",
        Some(json!({"amount": 5_000})),
    )
    .await;
    assert_eq!(status, 200);
    usage_until(gw.addr, "tenant=acme", 6).await;
    let (status, books) = admin(gw.addr, TOKEN, "GET", "/admin/books", None).await;
    assert_eq!(status, 200, "{books}");
    assert_eq!(books["exact"], true, "{books}");
    let acme = books_of(&books, "acme").clone();
    assert_eq!(
        (acme["start"].as_i64(), acme["top_ups"].as_i64()),
        (Some(1_000_000), Some(5_000)),
        "{acme}"
    );
    let settled = acme["settled"].as_i64().unwrap();
    assert!(settled > 0, "{acme}");
    assert_eq!(
        acme["balance"].as_i64(),
        Some(1_005_000 - settled),
        "{acme}"
    );
    assert_eq!(acme["difference"].as_i64(), Some(0));
    let filed = books_of(&books, "filed");
    assert_eq!(
        (filed["start"].as_i64(), filed["exact"].as_bool()),
        (Some(1_000_000), Some(true)),
        "{filed}"
    );
    // The balance set by hand, outside the books: not exact, and by how much.
    let (status, _) = admin(
        gw.addr,
        TOKEN,
        "PUT",
        "/admin/tenants/acme/balance",
        Some(json!({"balance": 7})),
    )
    .await;
    assert_eq!(status, 200);
    let (_, books) = admin(gw.addr, TOKEN, "GET", "/admin/books", None).await;
    assert_eq!(books["exact"], false, "{books}");
    let acme = books_of(&books, "acme");
    assert_eq!(
        acme["difference"].as_i64(),
        Some(1_005_000 - settled - 7),
        "{acme}"
    );
    assert_eq!(acme["exact"], false);
}

/// B6: with the database down, the gateway keeps serving and its records go to the
/// spool; when the database is back they are written, each attempt exactly once.
#[tokio::test]
async fn b6_the_ledger_spools_while_the_database_is_down_and_loses_nothing() {
    let mut pg = PostgresServer::start();
    let var = "PCX_TEST_HASH_SECRET_B6";
    // SAFETY: set before any gateway reads it, with a name no other test uses.
    unsafe { std::env::set_var(var, "b6-shared-hash-secret-0123456789") };
    let dir = temp_dir();
    let spool = dir.join("ledger.spool");
    let gw = gateway_with(&pg.url(), var, &format!("spool = \"{}\"", spool.display())).await;
    let (secret, _) = tenant_and_key(gw.addr, "acme", 100_000_000).await;
    for _ in 0..4 {
        assert_eq!(generate(gw.addr, &secret).await, 200);
    }
    usage_until(gw.addr, "tenant=acme", 5).await;
    pg.kill();
    for _ in 0..20 {
        assert_eq!(
            generate(gw.addr, &secret).await,
            200,
            "served while the database is down"
        );
    }
    // The records of the outage wait in the spool.
    until("the records reach the spool", || {
        std::fs::read_to_string(&spool)
            .unwrap_or_default()
            .lines()
            .count()
            >= 20
    })
    .await;
    pg.restart();
    let v = usage_until(gw.addr, "tenant=acme&limit=1000", 25).await;
    let mut attempts: Vec<&str> = v["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["attempt"].as_str().unwrap())
        .collect();
    attempts.sort_unstable();
    attempts.dedup();
    assert_eq!(attempts.len(), 25, "every attempt once");
    until("the spool is emptied", || spool_is_empty(&spool)).await;
    let (_, books) = admin(gw.addr, TOKEN, "GET", "/admin/books", None).await;
    assert_eq!(books["exact"], true, "{books}");
}

/// B6: a spool left by a crash (records the database has, and records it lacks) is
/// replayed when the gateway starts: every attempt in the ledger once.
#[tokio::test]
async fn b6_a_spool_left_by_a_crash_is_replayed_once_at_start() {
    let dir = temp_dir();
    let url = format!("sqlite://{}", dir.join("records.db").display());
    let hash = "PCX_TEST_UNSET_HASH_SECRET";
    let gw = gateway(&url, hash).await;
    let (secret, _) = tenant_and_key(gw.addr, "acme", 100_000_000).await;
    for _ in 0..2 {
        assert_eq!(generate(gw.addr, &secret).await, 200);
    }
    let before = usage_until(gw.addr, "tenant=acme", 3).await;
    drop(gw);
    // What a crash leaves: the three written rows again, two the database never got,
    // and a last line cut in the middle.
    // A row as the API shows it is the ledger's row with `at` as a time: back to ms.
    let rows: Vec<portcullis_records::LedgerRow> = before["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r["at"] = r["at_ms"].clone();
            serde_json::from_value(r).unwrap()
        })
        .collect();
    let mut lines: Vec<String> = rows
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    for n in 0..2 {
        let mut row: portcullis_records::LedgerRow = serde_json::from_str(&lines[0]).unwrap();
        row.attempt = format!("att-from-the-crash-{n}");
        lines.push(serde_json::to_string(&row).unwrap());
    }
    lines.push("{\"attempt\": \"att-cut".into());
    std::fs::write(dir.join("records.db.spool"), lines.join("\n") + "\n").unwrap();
    let gw = gateway(&url, hash).await;
    let v = usage_until(gw.addr, "tenant=acme", 5).await;
    let attempts: Vec<&str> = v["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["attempt"].as_str().unwrap())
        .collect();
    assert!(
        attempts.contains(&"att-from-the-crash-0") && attempts.contains(&"att-from-the-crash-1"),
        "{attempts:?}"
    );
    let spool = dir.join("records.db.spool");
    until("the replayed spool is emptied", || spool_is_empty(&spool)).await;
}

/// B6: a restart forgets nothing — a gateway whose in-memory store starts empty seeds
/// every tenant (of the file and of the database) from its books: opening balance and
/// top-ups less what the ledger says was charged, and every key's spend, so the books
/// are exact after the restart — per tenant and per key — and the balances and spends
/// are what they were.
#[tokio::test]
async fn b6_a_restart_of_the_memory_store_forgets_nothing() {
    let dir = temp_dir();
    let url = format!("sqlite://{}", dir.join("records.db").display());
    let hash = "PCX_TEST_UNSET_HASH_SECRET";
    let gw = gateway(&url, hash).await;
    let (acme, _) = tenant_and_key(gw.addr, "acme", 1_000_000).await;
    let (status, k) = admin(
        gw.addr,
        TOKEN,
        "POST",
        "/admin/keys",
        Some(json!({"label": "filed-key", "tenant": "filed"})),
    )
    .await;
    assert_eq!(status, 201, "{k}");
    let filed = k["key"].as_str().unwrap().to_owned();
    until_status(gw.addr, &filed, 200).await;
    for _ in 0..4 {
        assert_eq!(generate(gw.addr, &acme).await, 200);
        assert_eq!(generate(gw.addr, &filed).await, 200);
    }
    let (status, _) = admin(
        gw.addr,
        TOKEN,
        "POST",
        "/admin/tenants/acme/top-up",
        Some(json!({"amount": 5_000})),
    )
    .await;
    assert_eq!(status, 200);
    usage_until(gw.addr, "tenant=acme", 5).await;
    usage_until(gw.addr, "tenant=filed", 5).await;
    let balances = |books: &Value| -> Vec<(String, i64)> {
        books["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["tenant"].as_str().unwrap().to_owned(),
                    t["balance"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let spends = |books: &Value| -> Vec<(String, i64)> {
        books["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| {
                assert_eq!(k["exact"], true, "{k}");
                (
                    k["key"].as_str().unwrap().to_owned(),
                    k["spent"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let (_, before) = admin(gw.addr, TOKEN, "GET", "/admin/books", None).await;
    assert_eq!(before["exact"], true, "{before}");
    assert_eq!(spends(&before).len(), 2, "both keys' books: {before}");
    assert!(
        spends(&before).iter().all(|(_, s)| *s > 0),
        "the keys spent: {before}"
    );
    assert!(
        balances(&before).iter().all(|(_, b)| *b < 1_005_000),
        "money was spent: {before}"
    );
    drop(gw);
    let gw = gateway(&url, hash).await;
    let (_, after) = admin(gw.addr, TOKEN, "GET", "/admin/books", None).await;
    assert_eq!(after["exact"], true, "{after}");
    assert_eq!(
        balances(&after),
        balances(&before),
        "the balances after the restart"
    );
    assert_eq!(
        spends(&after),
        spends(&before),
        "the keys' spends (their spend caps' figures) after the restart"
    );
    assert_eq!(
        generate(gw.addr, &acme).await,
        200,
        "a database tenant's key after the restart"
    );
    assert_eq!(generate(gw.addr, &filed).await, 200);
}

/// The channels of the books load run: two OpenAI channels, the first of which fails
/// every call before any content (so the gateway fails over to the second), and one
/// Anthropic channel.
const LOAD_CHANNELS: &str = r#"
[channels.openai-a]
vendor = "openai"
base_url = "fake://"
credential = "cred-load-openai-a"
models = ["gpt-4o-mini"]

[channels.openai-b]
vendor = "openai"
base_url = "fake://"
credential = "cred-load-openai-b"
models = ["gpt-4o-mini"]

[channels.anthropic-a]
vendor = "anthropic"
base_url = "fake://"
credential = "cred-load-anthropic"
models = ["claude-sonnet-4-5"]

[models.gpt-4o-mini]
price = { input_per_mtok = 150_000, cached_input_per_mtok = 75_000, output_per_mtok = 600_000 }
max_output_tokens = 256

[models.claude-sonnet-4-5]
price = { input_per_mtok = 3_000_000, cached_input_per_mtok = 300_000, cache_write_per_mtok = 3_750_000, output_per_mtok = 15_000_000 }
max_output_tokens = 256
"#;

/// The price of `model` in [`LOAD_CHANNELS`].
fn load_price(model: &str) -> portcullis::core::Price {
    let (input, output) = match model {
        "gpt-4o-mini" => (150_000, 600_000),
        "claude-sonnet-4-5" => (3_000_000, 15_000_000),
        other => panic!("no price for {other}"),
    };
    portcullis::core::Price {
        input_per_mtok: input,
        output_per_mtok: output,
        cached_input_per_mtok: if model == "gpt-4o-mini" {
            75_000
        } else {
            300_000
        },
        cache_write_per_mtok: if model == "gpt-4o-mini" { 0 } else { 3_750_000 },
        ..Default::default()
    }
}

/// What one request of the books load run did.
enum Sent {
    /// Answered to its end (or refused).
    Whole,
    /// A stream the client left after `seen` output tokens had reached it.
    Cut { request_id: String, seen: u64 },
}

/// Request `i` of the books load run: mostly OpenAI, every fifth Anthropic; four in ten
/// answered whole, three in ten streamed whole, the rest streams the client leaves at a
/// point of its own, and one in fifty left hanging by the provider until the gateway's
/// upstream timeout.
async fn load_request(addr: SocketAddr, secret: &str, i: u64) -> Sent {
    // A fixed scramble of `i`: the same run every time.
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    let dialect = if i % 5 == 4 {
        Dialect::Anthropic
    } else {
        Dialect::OpenAi
    };
    let kind = h % 100;
    if !(40..98).contains(&kind) {
        let mut req = ask(dialect, secret, false);
        if kind >= 98 {
            req = req.header("x-fake-hang", "true");
        }
        let status = send(addr, &req).await.status.as_u16();
        assert!(matches!(status, 200 | 502 | 504), "request {i}: {status}");
        return Sent::Whole;
    }
    if kind < 70 {
        let r = send(addr, &ask(dialect, secret, true).header("x-fake-chunks", 6)).await;
        assert_eq!(r.status, 200, "request {i}");
        return Sent::Whole;
    }
    // The client's own request id, which the ledger keeps (the gateway's ids of two
    // instances in one test process may meet). Chunks 40 ms apart: the gateway sees the
    // client leave before the stream's end, with a margin of at least three intervals
    // on a loaded host.
    let request_id = format!("load-{i}");
    let req = ask(dialect, secret, true)
        .header("x-fake-chunks", 6)
        .header("x-fake-chunk-interval-ms", 40)
        .header("x-request-id", &request_id);
    let watched = match dialect {
        Dialect::Anthropic => portcullis_dialects::Dialect::Anthropic,
        _ => portcullis_dialects::Dialect::OpenAi,
    };
    let mut seen = portcullis_dialects::UsageWatcher::new(watched, true);
    let mut o = open(addr, &req).await;
    assert_eq!(o.status, 200, "request {i}");
    // Leave after the first content and 0–2 more frames.
    let mut more = h / 100 % 3;
    while let Some(data) = o.next_data().await {
        seen.observe(&data);
        if seen.saw_content() {
            if more == 0 {
                break;
            }
            more -= 1;
        }
    }
    o.disconnect();
    Sent::Cut {
        request_id,
        seen: seen.streamed_output_tokens(),
    }
}

/// Every ledger row of `tenant`, page by page.
async fn all_rows(addr: SocketAddr, tenant: &str) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut cursor = String::new();
    for _ in 0..1_000 {
        let (status, v) = admin(
            addr,
            TOKEN,
            "GET",
            &format!("/admin/usage?tenant={tenant}&limit=1000{cursor}"),
            None,
        )
        .await;
        assert_eq!(status, 200, "{v}");
        rows.extend(v["records"].as_array().unwrap().iter().cloned());
        match v["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return rows,
        }
    }
    panic!("more than a million rows")
}

/// B6/B7 under load (#38 item 5): 10,000 requests over two gateways sharing the records
/// database at `url` and one Redis store — failovers on every OpenAI request, streams
/// the clients leave at random points, provider hangs cut by the upstream timeout.
/// Then the books check is exact, and every stream a client left was charged what the
/// gateway saw streamed: at least what reached the client, at its model's price.
async fn ten_thousand_requests_over_two_instances(url: &str, hash_env: &str) {
    const REQUESTS: u64 = 10_000;
    const CLIENTS: usize = 16;
    let redis = portcullis_test_support::redis::RedisServer::start();
    let dir = temp_dir();
    let instance = |name: &str| {
        format!(
            "[server]\nadmin_token = \"{TOKEN}\"\nupstream_timeout = \"400ms\"\n\n\
             [store]\nurl = \"{}\"\ndeadline = \"2s\"\n\n\
             [database]\nurl = \"{url}\"\nhash_secret_env = \"{hash_env}\"\nspool = {:?}\n\
             {LOAD_CHANNELS}",
            redis.url(),
            dir.join(format!("{name}.spool")).display().to_string(),
        )
    };
    let a = serve(&instance("a")).await;
    let b = serve(&instance("b")).await;
    for gw in [&a, &b] {
        gw._fake.set_default_for(
            "cred-load-openai-a",
            portcullis_fake_upstream::Behavior::error(
                portcullis_fake_upstream::ErrorKind::ServerError,
            )
            .with_fail_after_chunks(0),
        );
    }
    let (secret, _) = tenant_and_key(a.addr, "load", 1_000_000_000_000).await;
    until_status(b.addr, &secret, 200).await;
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (next, secret) = (next.clone(), secret.clone());
        let addr = if c % 2 == 0 { a.addr } else { b.addr };
        clients.push(tokio::spawn(async move {
            let mut cuts = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= REQUESTS || started.elapsed() > Duration::from_secs(300) {
                    return cuts;
                }
                if let Sent::Cut { request_id, seen } = load_request(addr, &secret, i).await {
                    cuts.push((request_id, seen));
                }
            }
        }));
    }
    let mut cuts = Vec::new();
    for c in clients {
        cuts.extend(c.await.expect("a load client"));
    }
    assert!(
        next.load(std::sync::atomic::Ordering::Relaxed) >= REQUESTS,
        "the run ended before its {REQUESTS} requests"
    );
    eprintln!("{REQUESTS} requests in {:?}", started.elapsed());
    // The books: exact once the ledger has caught up (written off the request path).
    let start = Instant::now();
    let books = loop {
        let (status, books) = admin(a.addr, TOKEN, "GET", "/admin/books", None).await;
        assert_eq!(status, 200, "{books}");
        if books["exact"] == true {
            break books;
        }
        assert!(
            start.elapsed() < WAIT * 12,
            "the books never came out exact: {books}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let load = books_of(&books, "load");
    assert_eq!(load["difference"], 0, "{load}");
    assert!(load["settled"].as_i64().unwrap() > 0, "{load}");
    // Every stream a client left: charged at once, at its model's price, at least what
    // reached the client.
    let rows = all_rows(a.addr, "load").await;
    let by_request: std::collections::HashMap<&str, Vec<&Value>> =
        rows.iter().fold(Default::default(), |mut m, r| {
            if let Some(id) = r["client_request_id"].as_str() {
                m.entry(id).or_default().push(r);
            }
            m
        });
    let mut streamed = 0;
    for (request_id, seen) in &cuts {
        let charged: Vec<_> = by_request
            .get(request_id.as_str())
            .unwrap_or_else(|| panic!("no ledger row of {request_id}"))
            .iter()
            // The failed-over attempt before it, whose stream failed before any content,
            // is pending (B4): its outcome is unknown.
            .filter(|r| r["outcome"] != "pending")
            .collect();
        assert_eq!(
            charged.len(),
            1,
            "one charged attempt of {request_id}: {charged:?}"
        );
        let r = charged[0];
        assert_eq!(r["outcome"], "settled", "charged at once: {r}");
        assert!(r["amount"].as_i64() > Some(0), "never written as zero: {r}");
        let u = &r["usage"];
        let usage = portcullis::core::Usage {
            input_tokens: u["input_tokens"].as_u64().unwrap(),
            cached_input_tokens: u["cached_input_tokens"].as_u64().unwrap(),
            cache_write_tokens: u["cache_write_tokens"].as_u64().unwrap(),
            output_tokens: u["output_tokens"].as_u64().unwrap(),
            ..Default::default()
        };
        assert!(
            usage.output_tokens >= *seen,
            "at least what reached the client ({seen}): {r}"
        );
        let price = load_price(r["model"].as_str().unwrap());
        assert_eq!(
            r["amount"].as_i64(),
            Some(price.cost(&usage)),
            "at its price: {r}"
        );
        if r["resolved_by"] == "streamed" {
            streamed += 1;
        }
    }
    eprintln!(
        "{} streams left by their clients, {streamed} of them charged what was streamed \
         (the others had reached their end at the gateway)",
        cuts.len()
    );
    assert!(cuts.len() > 2_000, "{}", cuts.len());
    assert!(
        streamed * 2 > cuts.len(),
        "most cuts reach the gateway before the stream's end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_ten_thousand_requests_over_two_instances_on_sqlite_leave_exact_books() {
    let dir = temp_dir();
    let url = format!("sqlite://{}", dir.join("records.db").display());
    ten_thousand_requests_over_two_instances(&url, "PCX_TEST_UNSET_HASH_SECRET").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_ten_thousand_requests_over_two_instances_on_postgres_leave_exact_books() {
    let pg = PostgresServer::start();
    let var = "PCX_TEST_HASH_SECRET_B7_LOAD";
    // SAFETY: set before any gateway reads it, with a name no other test uses.
    unsafe { std::env::set_var(var, "b7-load-shared-hash-secret-0123456789") };
    ten_thousand_requests_over_two_instances(&pg.url(), var).await;
}

// ------------------------------------------------------------------ unknown outcomes (B7)

/// A gateway on a fresh SQLite records database with `[billing]` and `[server]` settings
/// of the test's own; returns it and its directory.
async fn sqlite_gateway_with(server: &str, billing: &str) -> (Gw, std::path::PathBuf) {
    let dir = temp_dir();
    let url = format!("sqlite://{}", dir.join("records.db").display());
    let gw = gateway_on_with(&url, "PCX_TEST_UNSET_HASH_SECRET", server, billing).await;
    (gw, dir)
}

/// A gateway on the records database at `url` with `[billing]` and `[server]` settings
/// of the test's own.
async fn gateway_on_with(url: &str, hash_env: &str, server: &str, billing: &str) -> Gw {
    let text = format!(
        "[server]\nadmin_token = \"{TOKEN}\"\n{server}\n\n[database]\nurl = \"{url}\"\nhash_secret_env = \"{hash_env}\"\n\n[billing]\n{billing}\n{CHANNELS}"
    );
    serve(&text).await
}

/// The tenant's ledger rows once there are `n` and `done` holds for every one (polled,
/// bounded generously).
async fn rows_when(
    addr: SocketAddr,
    tenant: &str,
    n: usize,
    done: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let start = Instant::now();
    let query = format!("/admin/usage?tenant={tenant}");
    loop {
        let (status, v) = admin(addr, TOKEN, "GET", &query, None).await;
        if let Some(rows) = v["records"].as_array().filter(|_| status == 200) {
            if rows.len() == n && rows.iter().all(&done) {
                return rows.clone();
            }
        }
        assert!(
            start.elapsed() < WAIT * 4,
            "the ledger never got there: {v}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The cost of OpenAI `usage` at the price of `gpt-4o-mini` in [`CHANNELS`] (rounded up
/// once, in minor units).
fn gpt_4o_mini_cost(usage: &Value) -> i64 {
    let n = |p: &str| usage.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let (input, cached, output) = if usage.get("prompt_tokens").is_some() {
        (
            n("/prompt_tokens"),
            n("/prompt_tokens_details/cached_tokens"),
            n("/completion_tokens"),
        )
    } else {
        (
            n("/input_tokens"),
            n("/input_tokens_details/cached_tokens"),
            n("/output_tokens"),
        )
    };
    let micro = (input - cached) * 150_000 + cached * 75_000 + output * 600_000;
    (micro + 999_999) / 1_000_000
}

/// B7: an OpenAI stream whose upstream falls silent after naming its object
/// (`response.created`, the chat completion's role chunk) and before any content is cut
/// by `upstream_idle_timeout` and stays pending with the object in the ledger; after the
/// grace the gateway asks the provider for it, waits while it is in progress, and settles
/// it at exactly the price of the stored usage — `reconciled` by `provider` in the ledger
/// and in the JSON-lines log — with the books exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_a_pending_unknown_outcome_is_settled_from_the_providers_stored_response() {
    let dir = temp_dir();
    let url = format!("sqlite://{}", dir.join("records.db").display());
    settled_from_the_providers_stored_response(&url, "PCX_TEST_UNSET_HASH_SECRET").await;
}

/// [`b7_a_pending_unknown_outcome_is_settled_from_the_providers_stored_response`] with
/// the ledger on a PostgreSQL server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_a_pending_unknown_outcome_is_settled_from_the_providers_stored_response_on_postgres() {
    let pg = PostgresServer::start();
    let var = "PCX_TEST_HASH_SECRET_B7_STORED";
    // SAFETY: set before any gateway reads it, with a name no other test uses.
    unsafe { std::env::set_var(var, "b7-stored-shared-hash-secret-0123456789") };
    settled_from_the_providers_stored_response(&pg.url(), var).await;
}

async fn settled_from_the_providers_stored_response(url: &str, hash_env: &str) {
    let log_dir = temp_dir();
    let log = log_dir.join("usage.jsonl");
    let gw = gateway_on_with(
        url,
        hash_env,
        &format!(
            "upstream_idle_timeout = \"300ms\"\nusage_log = \"{}\"",
            log.display()
        ),
        // One attempt a request: every attempt a failover made would be resolved alike.
        "unknown_grace = \"200ms\"\nunknown_give_up = \"30s\"\nresolve_interval = \"100ms\"\n\n[failover]\nmax_attempts = 1",
    )
    .await;
    let (secret, _) = tenant_and_key(gw.addr, "acme", 1_000_000).await;
    // The content comes 1.5 s after the object is named: the gateway cuts the silence.
    let stalled = |req: Req| {
        req.key(KeyAt::Bearer, &secret)
            .header("x-fake-ttfb-ms", 1500)
            .header("x-fake-chunks", 1)
            .header("x-fake-output-tokens", 9)
    };
    let responses = Req::post(
        "/v1/responses",
        json!({"model": "gpt-4o-mini", "input": "What is the answer?", "stream": true}).to_string(),
    );
    // A chat completion is kept by the provider only when the client asks it to.
    let chat = Req::post(
        "/v1/chat/completions",
        json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}],
               "stream": true, "stream_options": {"include_usage": true}, "store": true})
        .to_string(),
    );
    for req in [responses, chat] {
        // Silent before its first content: an error to the client (a 502 before anything
        // was committed to it), whatever the provider went on to do.
        let r = send(gw.addr, &stalled(req)).await;
        assert!(
            r.status == 502 || r.status == 200,
            "{} {}",
            r.status,
            r.text()
        );
    }
    // The generation calls of this test (the key's first check was a chat completion).
    let pending = rows_when(gw.addr, "acme", 3, |r| {
        r["outcome"] != "pending" || r["provider_object"].is_string()
    })
    .await;
    let objects: Vec<String> = pending
        .iter()
        .filter(|r| r["outcome"] != "settled")
        .filter_map(|r| r["provider_object"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(objects.len(), 2, "{pending:?}");
    assert!(
        objects
            .iter()
            .any(|o| o.starts_with("/v1/responses/resp_fake")),
        "{objects:?}"
    );
    assert!(
        objects
            .iter()
            .any(|o| o.starts_with("/v1/chat/completions/chatcmpl-")),
        "{objects:?}"
    );
    // Settled from the provider's answer, each at its stored usage's price.
    let rows = rows_when(gw.addr, "acme", 3, |r| r["outcome"] != "pending").await;
    assert_eq!(
        rows.iter().filter(|r| r["outcome"] == "settled").count(),
        1,
        "the key's check"
    );
    for object in &objects {
        let row = rows
            .iter()
            .find(|r| r["provider_object"] == object.as_str())
            .unwrap();
        let stored = send(gw._fake.addr(), &Req::get(object.clone())).await;
        assert_eq!(stored.status, 200, "{}", stored.text());
        let usage = serde_json::from_slice::<Value>(&stored.body).unwrap()["usage"].clone();
        assert_eq!(
            (row["outcome"].as_str(), row["resolved_by"].as_str()),
            (Some("reconciled"), Some("provider")),
            "{row}"
        );
        assert_eq!(
            row["amount"].as_i64(),
            Some(gpt_4o_mini_cost(&usage)),
            "{row} {usage}"
        );
        assert_eq!(row["usage"]["output_tokens"], 9, "{row}");
    }
    // The provider was asked with the channel's credential, never the client's key.
    let s = gw._fake.stats();
    assert!(s.calls(portcullis_fake_upstream::Route::ResponseRetrieve) >= 1);
    assert!(s.calls(portcullis_fake_upstream::Route::ChatCompletionRetrieve) >= 1);
    assert!(!s.saw_anywhere(&secret));
    // Once each, in the log too, naming the evidence.
    let resolved = |text: &str| {
        text.lines()
            .filter(|l| l.contains("\"by\":\"provider\""))
            .count()
    };
    assert!(
        eventually(WAIT, || async {
            resolved(&std::fs::read_to_string(&log).unwrap_or_default()) == 2
        })
        .await,
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let (status, books) = admin(gw.addr, TOKEN, "GET", "/admin/books", None).await;
    assert_eq!(status, 200);
    assert_eq!(books["exact"], true, "{books}");
    assert_eq!(
        books_of(&books, "acme")["pending"].as_i64(),
        Some(0),
        "{books}"
    );
    // Still once each however many looks went by.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(resolved(&std::fs::read_to_string(&log).unwrap()), 2);
}

/// B7: a pending attempt with nothing to ask the provider for (an Anthropic stream cut
/// before its content) is settled at its upper bound once the give-up period has passed,
/// with `unknown_outcome = "upper_bound"`; the books stay exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_with_upper_bound_a_pending_attempt_nothing_answers_for_is_settled_at_its_upper_bound() {
    let (gw, _dir) = sqlite_gateway_with(
        "upstream_idle_timeout = \"300ms\"",
        "unknown_grace = \"200ms\"\nunknown_give_up = \"300ms\"\nunknown_outcome = \"upper_bound\"\nresolve_interval = \"100ms\"",
    )
    .await;
    let (secret, _) = tenant_and_key(gw.addr, "acme", 1_000_000).await;
    let req = gen_for(Dialect::Anthropic, "claude-sonnet-4-5", true, Some(100))
        .key(KeyAt::XApiKey, &secret)
        .header("x-fake-ttfb-ms", 1500);
    let r = send(gw.addr, &req).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let rows = rows_when(gw.addr, "acme", 2, |r| r["outcome"] != "pending").await;
    let row = rows
        .iter()
        .find(|r| r["model"] == "claude-sonnet-4-5")
        .unwrap();
    assert_eq!(
        (row["outcome"].as_str(), row["resolved_by"].as_str()),
        (Some("reconciled"), Some("upper_bound")),
        "{row}"
    );
    assert!(row["provider_object"].is_null(), "{row}");
    // The upper bound: 100 output tokens at 15,000,000 a million, and the input.
    let amount = row["amount"].as_i64().unwrap();
    assert!(amount >= 1_500, "{row}");
    assert_eq!(
        gw._fake
            .stats()
            .calls(portcullis_fake_upstream::Route::ResponseRetrieve),
        0
    );
    let (_, books) = admin(gw.addr, TOKEN, "GET", "/admin/books", None).await;
    assert_eq!(books["exact"], true, "{books}");
    let acme = books_of(&books, "acme");
    assert_eq!(acme["pending"].as_i64(), Some(0), "{acme}");
}

// ------------------------------------------------------------------ jobs billed by their result (B7)

/// A video model on an OpenAI channel of its own, beside [`CHANNELS`].
const JOBS: &str = r#"
[channels.openai-video]
vendor = "openai"
base_url = "fake://"
credential = "sk-upstream-openai-video"
models = ["sora-2"]

[models.sora-2]
price = { per_video = 500_000 }
"#;

/// The `per_video` price of `sora-2` in [`JOBS`].
const PER_VIDEO: i64 = 500_000;

/// A gateway on a fresh SQLite records database with a video model and `[billing]`
/// settings of the test's own.
async fn jobs_gateway(billing: &str) -> (Gw, std::path::PathBuf) {
    sqlite_gateway_with("", &format!("{billing}\n{JOBS}")).await
}

/// Creates a video job through the gateway with the fake's job controls `headers`;
/// returns its id.
async fn create_job(addr: SocketAddr, secret: &str, headers: &[(&str, &str)]) -> String {
    let mut req = Req::post(
        "/v1/videos",
        json!({"model": "sora-2", "prompt": "waves at dusk", "seconds": "4"}).to_string(),
    )
    .key(KeyAt::Bearer, secret);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let r = send(addr, &req).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["status"], "queued", "{v}");
    v["id"].as_str().expect("the job's id").to_owned()
}

/// The ledger row of the job `id` among `rows`.
fn job_row<'a>(rows: &'a [Value], id: &str) -> &'a Value {
    let object = format!("/v1/videos/{id}");
    rows.iter()
        .find(|r| r["provider_object"] == object.as_str())
        .unwrap_or_else(|| panic!("no row of {object}: {rows:?}"))
}

/// The tenant's books, checked exact.
async fn exact_books(addr: SocketAddr, tenant: &str) -> Value {
    let (status, books) = admin(addr, TOKEN, "GET", "/admin/books", None).await;
    assert_eq!(status, 200, "{books}");
    assert_eq!(books["exact"], true, "{books}");
    books_of(&books, tenant).clone()
}

/// The amount of the key's first check (a chat completion) among `rows`.
fn check_amount(rows: &[Value]) -> i64 {
    rows.iter()
        .find(|r| r["model"] == "gpt-4o-mini")
        .and_then(|r| r["amount"].as_i64())
        .expect("the key's check")
}

/// B7: a video job is not settled at its creation: it stays pending at its `per_video`
/// hold with its object `/v1/videos/{id}` in the ledger; the resolver asks the provider
/// for it from its first look (long before the grace, which is for lost answers, not
/// for jobs), and once the job is `completed` settles it at `per_video`, once —
/// `reconciled` by `provider` — with the books exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_a_video_job_that_completes_is_charged_per_video_once_from_its_status() {
    let (gw, _dir) = jobs_gateway(JOB_LOOKS).await;
    a_job_that_completes_is_charged_per_video_once(&gw).await;
}

/// B7: [`b7_a_video_job_that_completes_is_charged_per_video_once_from_its_status`] on
/// a PostgreSQL records database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_a_video_job_that_completes_is_charged_per_video_once_on_postgres() {
    let pg = PostgresServer::start();
    let var = "PCX_TEST_HASH_SECRET_B7_JOBS";
    // SAFETY: set before any gateway reads it, with a name no other test uses.
    unsafe { std::env::set_var(var, "b7-jobs-hash-secret-0123456789") };
    let gw = gateway_with(&pg.url(), var, &format!("\n[billing]\n{JOB_LOOKS}\n{JOBS}")).await;
    a_job_that_completes_is_charged_per_video_once(&gw).await;
}

/// A grace and give-up of an hour, a look every 100 ms: only a job is asked for.
const JOB_LOOKS: &str =
    "unknown_grace = \"1h\"\nunknown_give_up = \"1h\"\nresolve_interval = \"100ms\"";

async fn a_job_that_completes_is_charged_per_video_once(gw: &Gw) {
    let (secret, _) = tenant_and_key(gw.addr, "acme", 1_000_000).await;
    let id = create_job(gw.addr, &secret, &[("x-fake-job-ms", "1000")]).await;
    // Pending at its hold while the job runs.
    let rows = rows_when(gw.addr, "acme", 2, |r| {
        r["model"] != "sora-2" || r["provider_object"].is_string()
    })
    .await;
    let row = job_row(&rows, &id);
    if row["outcome"] == "pending" {
        assert_eq!(row["amount"].as_i64(), Some(PER_VIDEO), "{row}");
    }
    // Settled from the job's status, well within the hour's grace.
    let rows = rows_when(gw.addr, "acme", 2, |r| r["outcome"] != "pending").await;
    let row = job_row(&rows, &id);
    assert_eq!(
        (row["outcome"].as_str(), row["resolved_by"].as_str()),
        (Some("reconciled"), Some("provider")),
        "{row}"
    );
    assert_eq!(row["amount"].as_i64(), Some(PER_VIDEO), "{row}");
    assert_eq!(row["usage"]["videos"], 1, "{row}");
    let s = gw._fake.stats();
    assert!(s.calls(portcullis_fake_upstream::Route::VideoRetrieve) >= 1);
    assert!(
        !s.saw_anywhere(&secret),
        "asked with the channel's credential"
    );
    let acme = exact_books(gw.addr, "acme").await;
    assert_eq!(acme["pending"].as_i64(), Some(0), "{acme}");
    assert_eq!(
        acme["settled"].as_i64(),
        Some(check_amount(&rows) + PER_VIDEO),
        "{acme}"
    );
    assert_eq!(
        acme["balance"].as_i64(),
        Some(1_000_000 - check_amount(&rows) - PER_VIDEO),
        "{acme}"
    );
    // Charged once: the attempt's usage query still sums one video.
    let (_, v) = admin(
        gw.addr,
        TOKEN,
        "GET",
        "/admin/usage?tenant=acme&model=sora-2",
        None,
    )
    .await;
    assert_eq!(v["totals"]["attempts"], 1, "{v}");
}

/// B7: a video job the provider fails is refunded: the resolver reads `failed` and
/// writes its pending attempt off — `written_off` by `provider` in the ledger, amount
/// 0 — and the tenant's balance is back where it was before the job, the books exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_a_video_job_the_provider_fails_is_refunded() {
    let (gw, _dir) = jobs_gateway(
        "unknown_grace = \"1h\"\nunknown_give_up = \"1h\"\nresolve_interval = \"100ms\"",
    )
    .await;
    let (secret, _) = tenant_and_key(gw.addr, "acme", 1_000_000).await;
    let id = create_job(
        gw.addr,
        &secret,
        &[("x-fake-job-ms", "300"), ("x-fake-job-fails", "true")],
    )
    .await;
    let rows = rows_when(gw.addr, "acme", 2, |r| r["outcome"] != "pending").await;
    let row = job_row(&rows, &id);
    assert_eq!(
        (row["outcome"].as_str(), row["resolved_by"].as_str()),
        (Some("written_off"), Some("provider")),
        "{row}"
    );
    assert_eq!(row["amount"].as_i64(), Some(0), "{row}");
    let acme = exact_books(gw.addr, "acme").await;
    assert_eq!(acme["pending"].as_i64(), Some(0), "{acme}");
    assert_eq!(acme["store_pending"].as_i64(), Some(0), "{acme}");
    assert_eq!(
        acme["balance"].as_i64(),
        Some(1_000_000 - check_amount(&rows)),
        "the job's hold is back: {acme}"
    );
}

/// B7: a client that polls its job through the gateway (`GET /v1/videos/{id}`) and is
/// answered its end resolves the job's pending attempt then: the resolver looks only
/// once an hour here, and never asks the provider itself, yet a completed job is
/// settled at `per_video` and a failed one written off as soon as the client saw it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_a_video_job_polled_by_the_client_to_its_end_is_resolved_at_once() {
    let (gw, _dir) =
        jobs_gateway("unknown_grace = \"1h\"\nunknown_give_up = \"1h\"\nresolve_interval = \"1h\"")
            .await;
    let (secret, _) = tenant_and_key(gw.addr, "acme", 1_000_000).await;
    let done = create_job(gw.addr, &secret, &[("x-fake-job-ms", "300")]).await;
    let failed = create_job(
        gw.addr,
        &secret,
        &[("x-fake-job-ms", "300"), ("x-fake-job-fails", "true")],
    )
    .await;
    // Both pending in the ledger (a poll that comes before its attempt reaches the
    // ledger is left to the resolver's next look).
    rows_when(gw.addr, "acme", 3, |r| {
        r["model"] != "sora-2" || (r["outcome"] == "pending" && r["provider_object"].is_string())
    })
    .await;
    let mut polls = 0;
    for (id, end) in [(&done, "completed"), (&failed, "failed")] {
        let start = Instant::now();
        loop {
            let r = send(
                gw.addr,
                &Req::get(format!("/v1/videos/{id}")).key(KeyAt::Bearer, &secret),
            )
            .await;
            polls += 1;
            assert_eq!(r.status, 200, "{}", r.text());
            if r.json()["status"] == end {
                break;
            }
            assert!(
                start.elapsed() < WAIT * 4,
                "the job never ended: {}",
                r.text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let rows = rows_when(gw.addr, "acme", 3, |r| r["outcome"] != "pending").await;
    let row = job_row(&rows, &done);
    assert_eq!(
        (
            row["outcome"].as_str(),
            row["resolved_by"].as_str(),
            row["amount"].as_i64()
        ),
        (Some("reconciled"), Some("provider"), Some(PER_VIDEO)),
        "{row}"
    );
    let row = job_row(&rows, &failed);
    assert_eq!(
        (
            row["outcome"].as_str(),
            row["resolved_by"].as_str(),
            row["amount"].as_i64()
        ),
        (Some("written_off"), Some("provider"), Some(0)),
        "{row}"
    );
    // Only the client's polls reached the provider: the resolver never asked.
    assert_eq!(
        gw._fake
            .stats()
            .calls(portcullis_fake_upstream::Route::VideoRetrieve),
        polls
    );
    let acme = exact_books(gw.addr, "acme").await;
    assert_eq!(acme["pending"].as_i64(), Some(0), "{acme}");
    assert_eq!(
        acme["balance"].as_i64(),
        Some(1_000_000 - check_amount(&rows) - PER_VIDEO),
        "{acme}"
    );
    // Polled again: still one close, nothing changes.
    let r = send(
        gw.addr,
        &Req::get(format!("/v1/videos/{done}")).key(KeyAt::Bearer, &secret),
    )
    .await;
    assert_eq!(r.status, 200);
    let again = exact_books(gw.addr, "acme").await;
    assert_eq!(again["settled"], acme["settled"], "{again}");
}

/// B7: a video job whose end is never seen (it runs past the give-up period) goes to
/// the same end policy as any unknown outcome: held pending at its `per_video` by
/// default (the books exact, the hold counted), settled at its upper bound — its
/// `per_video` — with `unknown_outcome = "upper_bound"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_a_video_job_whose_end_is_never_seen_is_held_or_settled_at_its_upper_bound() {
    for policy in ["hold", "upper_bound"] {
        let (gw, _dir) = jobs_gateway(&format!(
            "unknown_grace = \"200ms\"\nunknown_give_up = \"300ms\"\nunknown_outcome = \"{policy}\"\nresolve_interval = \"100ms\""
        ))
        .await;
        let (secret, _) = tenant_and_key(gw.addr, "acme", 1_000_000).await;
        let id = create_job(gw.addr, &secret, &[("x-fake-job-ms", "3600000")]).await;
        let started = Instant::now();
        // Asked while it runs.
        assert!(
            eventually(WAIT * 4, || async {
                gw._fake
                    .stats()
                    .calls(portcullis_fake_upstream::Route::VideoRetrieve)
                    >= 2
            })
            .await,
            "the resolver never asked for the job"
        );
        if policy == "upper_bound" {
            let rows = rows_when(gw.addr, "acme", 2, |r| r["outcome"] != "pending").await;
            let row = job_row(&rows, &id);
            assert_eq!(
                (
                    row["outcome"].as_str(),
                    row["resolved_by"].as_str(),
                    row["amount"].as_i64()
                ),
                (Some("reconciled"), Some("upper_bound"), Some(PER_VIDEO)),
                "{row}"
            );
            let acme = exact_books(gw.addr, "acme").await;
            assert_eq!(acme["pending"].as_i64(), Some(0), "{acme}");
            continue;
        }
        // Held: still pending well past the grace and give-up (and many looks).
        let past = Duration::from_millis(200 + 300 + 1_000);
        if let Some(left) = past.checked_sub(started.elapsed()) {
            tokio::time::sleep(left).await;
        }
        let rows = rows_when(gw.addr, "acme", 2, |_| true).await;
        let row = job_row(&rows, &id);
        assert_eq!(
            (row["outcome"].as_str(), row["amount"].as_i64()),
            (Some("pending"), Some(PER_VIDEO)),
            "{row}"
        );
        let acme = exact_books(gw.addr, "acme").await;
        assert_eq!(acme["pending"].as_i64(), Some(PER_VIDEO), "{acme}");
        assert_eq!(acme["store_pending"].as_i64(), Some(PER_VIDEO), "{acme}");
    }
}

/// B7: a stream the client stops after its first content is charged at once what the
/// gateway saw streamed (`streamed`); the provider finishes and stores the response, and
/// its full usage corrects that charge exactly once — by the difference of its price, the
/// first charge kept beside it (`correction`, by `provider`) — although two instances
/// sharing the ledger and the store both resolve it; the books are exact before and
/// after, and stay so over later looks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_a_later_provider_report_corrects_a_cut_streams_charge_exactly_once() {
    let dir = temp_dir();
    let url = format!("sqlite://{}", dir.join("records.db").display());
    corrected_once_by_two_instances(&url, "PCX_TEST_UNSET_HASH_SECRET").await;
}

/// [`b7_a_later_provider_report_corrects_a_cut_streams_charge_exactly_once`] with the
/// ledger on a PostgreSQL server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_a_later_provider_report_corrects_a_cut_streams_charge_exactly_once_on_postgres() {
    let pg = PostgresServer::start();
    let var = "PCX_TEST_HASH_SECRET_B7_CORRECT";
    // SAFETY: set before any gateway reads it, with a name no other test uses.
    unsafe { std::env::set_var(var, "b7-correct-shared-hash-secret-0123456789") };
    corrected_once_by_two_instances(&pg.url(), var).await;
}

/// Cut streams of [`corrected_once_by_two_instances`]: each a chance for the two
/// resolvers to meet on one attempt.
const CUT_STREAMS: usize = 4;

async fn corrected_once_by_two_instances(url: &str, hash_env: &str) {
    let redis = portcullis_test_support::redis::RedisServer::start();
    let dir = temp_dir();
    let instance = |name: &str| {
        format!(
            "[server]\nadmin_token = \"{TOKEN}\"\n\n\
             [store]\nurl = \"{}\"\ndeadline = \"2s\"\n\n\
             [database]\nurl = \"{url}\"\nhash_secret_env = \"{hash_env}\"\nspool = {:?}\n\n\
             [billing]\nunknown_grace = \"200ms\"\nresolve_interval = \"100ms\"\n\n\
             [failover]\nmax_attempts = 1\n{CHANNELS}",
            redis.url(),
            dir.join(format!("{name}.spool")).display().to_string(),
        )
    };
    let a = serve(&instance("a")).await;
    // The same provider behind both: either may ask it for the stored response.
    let b = serve_to(&instance("b"), Some(a._fake.base_url())).await;
    let (secret, _) = tenant_and_key(a.addr, "acme", 1_000_000).await;
    until_status(b.addr, &secret, 200).await;
    // 60 output tokens over 6 chunks 400 ms apart: the client stops after the first
    // content, long before the provider ends (and stores) the response.
    let req = Req::post(
        "/v1/responses",
        json!({"model": "gpt-4o-mini", "input": "Tell me a story.", "stream": true}).to_string(),
    )
    .key(KeyAt::Bearer, &secret)
    .header("x-fake-chunks", 6)
    .header("x-fake-chunk-interval-ms", 400)
    .header("x-fake-output-tokens", 60);
    let mut streamed = Vec::new();
    for i in 0..CUT_STREAMS {
        let mut seen =
            portcullis_dialects::UsageWatcher::new(portcullis_dialects::Dialect::OpenAi, true);
        let mut o = open(if i % 2 == 0 { a.addr } else { b.addr }, &req).await;
        assert_eq!(o.status, 200);
        while !seen.saw_content() {
            let data = o.next_data().await.expect("the stream's first content");
            seen.observe(&data);
        }
        o.disconnect();
        streamed.push(seen.streamed_output_tokens());
    }
    let cut_rows = |rows: Vec<Value>| -> Vec<Value> {
        rows.into_iter()
            .filter(|r| r["resolved_by"] == "streamed")
            .collect()
    };
    let start = Instant::now();
    let cut = loop {
        let cut = cut_rows(all_rows(a.addr, "acme").await);
        if cut.len() == CUT_STREAMS {
            break cut;
        }
        assert!(start.elapsed() < WAIT * 2, "streamed charges: {cut:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut charged = std::collections::BTreeMap::new();
    for row in &cut {
        let object = row["provider_object"]
            .as_str()
            .unwrap_or_else(|| panic!("a cut stream names its response: {row}"));
        assert!(object.starts_with("/v1/responses/resp_fake"), "{row}");
        let amount = row["amount"].as_i64().unwrap();
        assert!(amount > 0, "{row}");
        assert!(
            streamed.contains(&row["usage"]["output_tokens"].as_u64().unwrap()),
            "charged what was streamed: {row} {streamed:?}"
        );
        charged.insert(object.to_owned(), amount);
    }
    // Before the provider's report: exact (the responses are still in progress at the
    // provider, nothing corrected yet).
    let before = exact_books(a.addr, "acme").await;
    exact_books(b.addr, "acme").await;
    // The provider's report: each stored response, with its whole usage.
    let start = Instant::now();
    let corrected = loop {
        let cut = cut_rows(all_rows(a.addr, "acme").await);
        if cut.iter().all(|r| r["correction"].is_object()) {
            break cut;
        }
        assert!(
            start.elapsed() < WAIT * 4,
            "never corrected: {cut:?} {before}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut difference = 0;
    for row in &corrected {
        let object = row["provider_object"].as_str().unwrap();
        let stored = send(a._fake.addr(), &Req::get(object.to_owned())).await;
        assert_eq!(stored.status, 200, "{}", stored.text());
        let stored: Value = serde_json::from_slice(&stored.body).unwrap();
        assert_eq!(stored["status"], "completed", "{stored}");
        let cost = gpt_4o_mini_cost(&stored["usage"]);
        let first = charged[object];
        assert!(
            cost > first,
            "60 output tokens cost more than the streamed part"
        );
        assert_eq!(row["amount"].as_i64(), Some(first), "the first charge kept");
        assert_eq!(
            row["correction"]["amount"].as_i64(),
            Some(cost - first),
            "{row} {stored}"
        );
        assert_eq!(row["correction"]["by"], "provider", "{row}");
        difference += cost - first;
    }
    // Both instances resolve; the store and the ledger took each correction once: the
    // books exact after, and over more looks of both resolvers.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        for gw in [&a, &b] {
            let after = exact_books(gw.addr, "acme").await;
            assert_eq!(
                after["settled"].as_i64().unwrap() - before["settled"].as_i64().unwrap(),
                difference,
                "{before} {after}"
            );
        }
        let cut = cut_rows(all_rows(a.addr, "acme").await);
        for row in &cut {
            let first = corrected
                .iter()
                .find(|r| r["attempt"] == row["attempt"])
                .unwrap();
            assert_eq!(row["correction"], first["correction"], "written once");
        }
    }
    // The balance moved by each difference once: what it started with, less every cost.
    let rows = all_rows(a.addr, "acme").await;
    let spent: i64 = rows
        .iter()
        .map(|r| r["amount"].as_i64().unwrap() + r["correction"]["amount"].as_i64().unwrap_or(0))
        .sum();
    let (status, v) = admin(a.addr, TOKEN, "GET", "/admin/books", None).await;
    assert_eq!(status, 200);
    let acme = books_of(&v, "acme");
    assert_eq!(acme["balance"].as_i64(), Some(1_000_000 - spent), "{acme}");
    let s = a._fake.stats();
    assert!(s.calls(portcullis_fake_upstream::Route::ResponseRetrieve) >= CUT_STREAMS as u64);
    assert!(!s.saw_anywhere(&secret));
}
