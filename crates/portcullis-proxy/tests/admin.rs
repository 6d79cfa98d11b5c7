//! Admin endpoints (P4): channel live state, re-enabling a
//! disabled channel, config reload that keeps the last good configuration — all behind
//! the admin token.

mod common;

use common::*;
use portcullis_fake_upstream::{Behavior, ErrorKind};
use portcullis_proxy::Config;

const TOKEN: &str = "admin-token-0123456789";

fn config(extra_keys: &str) -> String {
    format!(
        r#"
[server]
admin_token = "{TOKEN}"

[policies.open]

[keys.a]
key = "sk-a"
policy = "open"
{extra_keys}

[channels.one]
vendor = "openai"
base_url = "fake://"
credential = "cred-one"
models = ["gpt-4o-mini"]
capacity = 4

[channels.two]
vendor = "openai"
base_url = "fake://"
credential = "cred-two"
models = ["gpt-4o-mini"]

[models.gpt-4o-mini]
price = {{ input_per_mtok = 1, output_per_mtok = 1 }}
"#
    )
}

fn admin(method: &str, path: &str, token: Option<&str>) -> Req {
    let mut r = match method {
        "GET" => Req::get(path),
        _ => Req::post(path, ""),
    };
    if let Some(t) = token {
        r = r.header("authorization", format!("Bearer {t}"));
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4_admin_routes_need_the_token_and_are_absent_without_one() {
    let p = Proxy::start(&config("")).await;
    let r = send(p.addr, &admin("GET", "/admin/channels", None)).await;
    assert_eq!(r.status, 401);
    let r = send(
        p.addr,
        &admin("GET", "/admin/channels", Some("admin-token-wrong-0000")),
    )
    .await;
    assert_eq!(r.status, 401);
    let r = send(p.addr, &admin("GET", "/admin/channels", Some(TOKEN))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        !r.text().contains("cred-one"),
        "no credential in the admin view"
    );

    let no_token = config("").replace(&format!("admin_token = \"{TOKEN}\""), "");
    let p = Proxy::start(&no_token).await;
    let r = send(p.addr, &admin("GET", "/admin/channels", Some(TOKEN))).await;
    assert_eq!(r.status, 404);
    // The model routes are untouched by the admin router in front of them.
    assert_eq!(
        send(p.addr, &ask(Dialect::OpenAi, "sk-a", false))
            .await
            .status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4_a_disabled_channel_is_shown_and_re_enabled_by_an_operator() {
    let p = Proxy::start(&config("")).await;
    // Channel one's credential is refused by the provider: disabled (F5).
    p.fake
        .set_default_for("cred-one", Behavior::error(ErrorKind::InvalidApiKey));
    for _ in 0..3 {
        assert_eq!(
            send(p.addr, &ask(Dialect::OpenAi, "sk-a", false))
                .await
                .status,
            200
        );
    }
    let view = send(p.addr, &admin("GET", "/admin/channels", Some(TOKEN)))
        .await
        .json();
    let one = view["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "one")
        .unwrap()
        .clone();
    assert_eq!(one["disabled"], true, "{view}");
    assert_eq!(one["capacity"], 4);
    assert_eq!(one["in_flight"], 0);
    assert_eq!(one["recent_failed"], 1, "{view}");
    let calls = p.fake.stats().calls_for("cred-one");
    assert_eq!(calls, 1);

    // The credential is fixed upstream; the operator re-enables the channel.
    p.fake.clear_behaviors();
    let r = send(
        p.addr,
        &admin("POST", "/admin/channels/one/enable", Some(TOKEN)),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = send(
        p.addr,
        &admin("POST", "/admin/channels/nope/enable", Some(TOKEN)),
    )
    .await;
    assert_eq!(r.status, 404);
    for _ in 0..4 {
        assert_eq!(
            send(p.addr, &ask(Dialect::OpenAi, "sk-a", false))
                .await
                .status,
            200
        );
    }
    assert!(
        p.fake.stats().calls_for("cred-one") > calls,
        "back in rotation"
    );
    let view = send(p.addr, &admin("GET", "/admin/channels", Some(TOKEN)))
        .await
        .json();
    assert!(
        view["channels"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["disabled"] == false)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4_reload_applies_a_good_file_and_keeps_the_last_good_one_on_a_bad_file() {
    let dir = std::env::temp_dir().join(format!("portcullis-reload-{}", std::process::id()));
    // A process of the same id may have left it (ids are reused): start empty.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gateway.toml");
    std::fs::write(&path, config("")).unwrap();
    let p = Proxy::start_config(Config::load(&path).unwrap()).await;
    let r = send(p.addr, &ask(Dialect::OpenAi, "sk-b", false)).await;
    assert_eq!(r.status, 401, "sk-b is not configured yet");

    // A new key in the file: reloaded, served.
    std::fs::write(
        &path,
        config("\n[keys.b]\nkey = \"sk-b\"\npolicy = \"open\"\n"),
    )
    .unwrap();
    let r = send(p.addr, &admin("POST", "/admin/reload", Some(TOKEN))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        send(p.addr, &ask(Dialect::OpenAi, "sk-b", false))
            .await
            .status,
        200
    );

    // A broken file: refused with file and line, the running configuration stays.
    std::fs::write(
        &path,
        "[keys.b]\nkey = \"sk-b\"\npolicy = \"missing-policy\"\n",
    )
    .unwrap();
    let r = send(p.addr, &admin("POST", "/admin/reload", Some(TOKEN))).await;
    assert_eq!(r.status, 400);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("gateway.toml"), "{msg}");
    assert_eq!(
        send(p.addr, &ask(Dialect::OpenAi, "sk-b", false))
            .await
            .status,
        200
    );
    assert_eq!(
        send(p.addr, &ask(Dialect::OpenAi, "sk-a", false))
            .await
            .status,
        200
    );
    // Reload needs the token too.
    assert_eq!(
        send(p.addr, &admin("POST", "/admin/reload", None))
            .await
            .status,
        401
    );
}

/// B7: `PUT /admin/tenants/{tenant}/balance` sets a balance explicitly, behind the
/// admin token like every admin route; a body without an integer balance is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_admin_route_sets_a_tenant_balance_behind_the_token() {
    let p = Proxy::start(&config("")).await;
    let put = |body: &str, token: Option<&str>| {
        let mut r = admin("POST", "/admin/tenants/acme/balance", token).body(body.to_owned());
        r.method = hyper::Method::PUT;
        r
    };
    let r = send(p.addr, &put(r#"{"balance": 42}"#, None)).await;
    assert_eq!(r.status, 401);
    let r = send(p.addr, &put(r#"{"balance": 4.5}"#, Some(TOKEN))).await;
    assert_eq!(r.status, 400);
    let r = send(p.addr, &put(r#"{"balance": 42}"#, Some(TOKEN))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = p
        .store
        .with_ledger(|l, now| l.account(Some("acme"), &"k".into(), &[], now));
    assert_eq!(v.balance, Some(42));
    let r = send(p.addr, &put(r#"{"balance": -7}"#, Some(TOKEN))).await;
    assert_eq!(r.status, 200);
    let v = p
        .store
        .with_ledger(|l, now| l.account(Some("acme"), &"k".into(), &[], now));
    assert_eq!(v.balance, Some(-7));
}
