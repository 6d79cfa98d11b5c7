//! Task budgets belong to tenants (B3, E4), over real sockets: a
//! key of another tenant naming a task in `x-portcullis-task` gets 403 in its dialect, the
//! very answer an unknown task name gets (so names cannot be probed), and nothing reaches
//! the provider; the owning tenants' keys draw on the task's budget; a task naming an
//! unknown tenant is a configuration error at its line.

mod common;

use common::*;
use portcullis_proxy::Config;

const KEYS: &str = r#"
[policies.open]

[tenants.acme]
balance = 1_000_000_000

[tenants.globex]
balance = 1_000_000_000

[tenants.initech]
balance = 1_000_000_000

[tasks.acme-eval]
budget = 1_000_000_000
tenant = "acme"

[tasks.joint]
budget = 1_000_000_000
tenants = ["acme", "initech"]

[tasks.tiny]
budget = 1
tenant = "globex"

[tasks.shared]
budget = 1_000_000_000

[keys.acme]
key = "sk-acme"
tenant = "acme"
policy = "open"

[keys.globex]
key = "sk-globex"
tenant = "globex"
policy = "open"

[keys.initech]
key = "sk-initech"
tenant = "initech"
policy = "open"

[keys.lone]
key = "sk-lone"
policy = "open"
"#;

fn with_task(d: Dialect, key: &str, task: &str) -> Req {
    ask(d, key, false).header("x-portcullis-task", task)
}

/// What a client can tell apart: status, body, and every header but the request id.
fn answer(r: &Resp) -> (u16, serde_json::Value, Vec<(String, String)>) {
    let mut headers: Vec<(String, String)> = r
        .headers
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "x-request-id" | "date"))
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    headers.sort();
    (r.status.as_u16(), r.json(), headers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e4_foreign_task_is_403_in_each_dialect_and_equal_to_the_unknown_task_answer() {
    let p = Proxy::start(KEYS).await;
    for d in DIALECTS {
        let foreign = send(p.addr, &with_task(d, "sk-globex", "acme-eval")).await;
        let msg = rejection(&foreign, d, 40301);
        assert!(msg.contains("x-portcullis-task"), "{msg}");
        let unknown = send(p.addr, &with_task(d, "sk-globex", "no-such-task")).await;
        rejection(&unknown, d, 40301);
        assert_eq!(
            answer(&foreign),
            answer(&unknown),
            "{d:?}: a foreign task must answer exactly as an unknown one"
        );
        // The same for a key with no tenant, and for one of the joint task's non-owners.
        let lone = send(p.addr, &with_task(d, "sk-lone", "acme-eval")).await;
        assert_eq!(answer(&lone), answer(&unknown), "{d:?}");
        let not_joint = send(p.addr, &with_task(d, "sk-globex", "joint")).await;
        assert_eq!(answer(&not_joint), answer(&unknown), "{d:?}");
    }
    assert_eq!(
        p.fake.stats().total_calls,
        0,
        "nothing reached the provider"
    );
    // Nothing was reserved in the books of the refused keys.
    let v = usage(p.addr, "sk-globex").await;
    assert_eq!(v["money"]["key_spent"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b3_owning_tenants_draw_on_their_task_and_a_shared_task_stays_open() {
    let p = Proxy::start(KEYS).await;
    for (key, task) in [
        ("sk-acme", "acme-eval"),
        ("sk-acme", "joint"),
        ("sk-initech", "joint"),
        ("sk-globex", "shared"),
        ("sk-lone", "shared"),
    ] {
        let r = send(p.addr, &with_task(Dialect::OpenAi, key, task)).await;
        assert_eq!(r.status, 200, "{key} naming {task}: {}", r.text());
    }
    // The owner's budget is the one applied: globex's own tiny task is short (B3).
    let r = send(p.addr, &with_task(Dialect::OpenAi, "sk-globex", "tiny")).await;
    rejection(&r, Dialect::OpenAi, 40203);
    assert_eq!(p.fake.stats().total_calls, 5);
}

#[test]
fn p3_task_naming_an_unknown_tenant_is_a_config_error_at_its_line() {
    for (field, text) in [
        (
            "tenant",
            "[tenants.acme]\nbalance = 1\n\n[tasks.t]\nbudget = 5\ntenant = \"nobody\"\n",
        ),
        (
            "tenants",
            "[tenants.acme]\nbalance = 1\n\n[tasks.t]\nbudget = 5\ntenants = [\"acme\",\n  \"nobody\"]\n",
        ),
    ] {
        let e = Config::parse(text).expect_err(field);
        let line = text.lines().position(|l| l.contains("\"nobody\"")).unwrap() + 1;
        assert_eq!(e.line, Some(line), "{field}: {e}");
        assert!(
            e.reason.contains("task \"t\"") && e.reason.contains("unknown tenant \"nobody\""),
            "{field}: {e}"
        );
        assert!(e.reason.contains("acme"), "names the defined tenants: {e}");
    }
    // A task naming no tenant is shared (accepted, with a warning at load).
    let c = Config::parse("[tasks.t]\nbudget = 5\n").expect("a shared task");
    assert_eq!(c.tasks()["t"].owners.len(), 0);
}
