//! Pending reconciliation through the admin routes, over real sockets (B7): attempts
//! left pending by clients that went away mid-stream are listed page by page, settled
//! at a cost or written off — each exactly once, each leaving a usage record in the
//! usage log — and afterwards the books add up: balance + settled records + pending =
//! the starting balance, on the in-memory store and on Redis. `/metrics` shows the
//! pending amount from the store's counter, behind its token (P4).

mod common;
#[path = "../../portcullis-redis/tests/common/mod.rs"]
mod redis_server;

use common::*;
use portcullis::core::BillingStore;
use portcullis_fake_upstream::FakeUpstream;
use portcullis_proxy::{Config, Gateway};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const TOKEN: &str = "admin-token-0123456789";
const METRICS_TOKEN: &str = "metrics-token-0123456789";
const START: i64 = 1_000_000_000;

/// A usage log path of its own per test.
fn log_path(test: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!(
        "portcullis-reconcile-{test}-{}-{nanos}.jsonl",
        std::process::id()
    ))
}

fn config(log: &Path) -> String {
    format!(
        r#"
[server]
admin_token = "{TOKEN}"
metrics_token = "{METRICS_TOKEN}"
usage_log = "{}"

# The attempts these tests leave pending are streams their clients leave after the first
# chunk: held for an operator, not charged what was streamed (B7).
[billing]
cut_streams = "hold"

[policies.open]

[tenants.acme]
balance = {START}
budgets = [{{ name = "monthly", limit = 100_000_000_000, period = "30d" }}]

[keys.acme]
key = "sk-acme"
tenant = "acme"
policy = "open"

[keys.lone]
key = "sk-lone"
policy = "open"

{CHANNELS}
"#,
        log.display()
    )
}

/// A gateway on `store`, serving on `127.0.0.1:0`; aborted on drop.
struct Served {
    addr: SocketAddr,
    _fake: FakeUpstream,
    task: JoinHandle<()>,
    log: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.log);
    }
}

async fn serve<St>(store: St, test: &str) -> Served
where
    St: portcullis::core::JointStore
        + portcullis::core::ChannelStore
        + BillingStore
        + portcullis::core::CapacityStore,
{
    let log = log_path(test);
    let fake = FakeUpstream::start().await;
    let config = Config::parse(&config(&log)).expect("config");
    let app = Gateway::new(config, store)
        .fake_upstream(fake.base_url())
        .build()
        .await
        .expect("the gateway");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Served {
        addr,
        _fake: fake,
        task,
        log,
    }
}

fn admin(req: Req) -> Req {
    req.header("authorization", format!("Bearer {TOKEN}"))
}

fn post(path: &str, body: Value) -> Req {
    admin(Req::post(path, body.to_string()))
}

/// The tenant's money: (balance, pending reconciliation).
async fn money(addr: SocketAddr, key: &str) -> (i64, i64) {
    let v = usage(addr, key).await;
    let m = &v["money"];
    let balance = m["balance"].as_i64().unwrap_or(0);
    let pending = if m["balance"].is_null() {
        m["key_pending_reconciliation"].as_i64().unwrap()
    } else {
        m["tenant_pending_reconciliation"].as_i64().unwrap()
    };
    (balance, pending)
}

/// One attempt left pending: a stream the client leaves after its first chunk, held by
/// `cut_streams = "hold"` (the provider may have produced, and billed, more: B4).
/// Returns once the gateway counts it.
async fn leave_pending(addr: SocketAddr, key: &str) {
    let (_, before) = money(addr, key).await;
    let req = ask(Dialect::OpenAi, key, true).header("x-fake-chunk-interval-ms", 200);
    let mut o = open(addr, &req).await;
    assert_eq!(o.status, 200);
    assert!(o.next_data().await.is_some());
    o.disconnect();
    let counted = eventually(WAIT, || async { money(addr, key).await.1 > before }).await;
    assert!(counted, "the cut attempt did not go pending");
}

/// Every record of the usage log, once `want` of them are in (the writer flushes after
/// each batch).
async fn records(log: &Path, want: usize) -> Vec<Value> {
    let read = || {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
            .collect::<Vec<_>>()
    };
    let ok = eventually(WAIT, || async { read().len() >= want }).await;
    let recs = read();
    assert!(ok, "{} records, wanted {want}: {recs:?}", recs.len());
    recs
}

/// Money charged by the records: the settled costs (pending records are not charges).
fn settled_sum(recs: &[Value]) -> i64 {
    recs.iter()
        .filter(|r| r["outcome"] == "settled")
        .map(|r| r["amount"].as_i64().unwrap())
        .sum()
}

/// Money still pending by the records: the attempts whose last record says pending.
fn pending_sum(recs: &[Value]) -> i64 {
    let mut last = std::collections::BTreeMap::new();
    for r in recs {
        last.insert(r["attempt"].as_str().unwrap().to_owned(), r);
    }
    last.values()
        .filter(|r| r["outcome"] == "pending_reconciliation")
        .map(|r| r["amount"].as_i64().unwrap())
        .sum()
}

/// The books add up: what the tenant can still spend (its balance less what pending
/// holds) + the settled records + the pending records = the starting balance, and the
/// store's pending money is what the records leave pending.
async fn assert_books(addr: SocketAddr, recs: &[Value]) {
    let (balance, pending) = money(addr, "sk-acme").await;
    assert_eq!(pending, pending_sum(recs), "store vs records: {recs:?}");
    let available = balance - pending;
    assert_eq!(
        available + settled_sum(recs) + pending_sum(recs),
        START,
        "{recs:?}"
    );
}

async fn list(addr: SocketAddr, query: &str) -> Resp {
    send(addr, &admin(Req::get(format!("/admin/pending{query}")))).await
}

/// The scenario on one store: two attempts left pending; one settled through the admin
/// route at a cost (with its usage), one written off; each a second time changes nothing;
/// the books add up after each step.
async fn settle_and_write_off_leave_the_books_adding_up(s: &Served) {
    let addr = s.addr;
    // One ordinary request, then two attempts left pending.
    let r = send(addr, &ask(Dialect::OpenAi, "sk-acme", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    leave_pending(addr, "sk-acme").await;
    leave_pending(addr, "sk-acme").await;
    let recs = records(&s.log, 3).await;
    let (_, pending) = money(addr, "sk-acme").await;
    assert!(pending > 0);
    assert_books(addr, &recs).await;

    let r = list(addr, "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let listed = r.json()["pending"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 2, "{listed:?}");
    for p in &listed {
        assert_eq!((&p["tenant"], &p["key"]), (&json!("acme"), &json!("acme")));
        assert_eq!(p["billed_to_balance"], true);
        assert!(p["pending_since_ms"].as_u64().is_some(), "{p}");
    }
    assert_eq!(
        listed
            .iter()
            .map(|p| p["amount"].as_i64().unwrap())
            .sum::<i64>(),
        pending
    );
    let (first, second) = (&listed[0], &listed[1]);

    // Settled at a cost with the usage it reports.
    let settle = json!({
        "tenant": "acme",
        "attempt": first["attempt"],
        "cost": 1234,
        "usage": {"input_tokens": 12, "output_tokens": 34},
    });
    let r = send(addr, &post("/admin/pending/settle", settle.clone())).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (&v["outcome"], &v["cost"]),
        (&json!("settled"), &json!(1234))
    );
    assert_eq!(v["released"], first["amount"]);
    let recs = records(&s.log, 4).await;
    let rec = recs.last().unwrap();
    assert_eq!(
        (&rec["attempt"], &rec["outcome"], &rec["amount"]),
        (&first["attempt"], &json!("settled"), &json!(1234))
    );
    assert_eq!(
        (&rec["input_tokens"], &rec["output_tokens"]),
        (&json!(12), &json!(34))
    );
    assert_eq!(rec["reconciled"]["pending"], first["amount"]);
    let (balance, pending) = money(addr, "sk-acme").await;
    assert_eq!(pending, second["amount"].as_i64().unwrap());
    assert_books(addr, &recs).await;

    // Settling it again changes nothing and says so.
    let r = send(addr, &post("/admin/pending/settle", settle)).await;
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.json()["state"], "not_pending");
    assert_eq!(money(addr, "sk-acme").await, (balance, pending));

    // Written off: released, nothing charged.
    let off = json!({"tenant": "acme", "attempt": second["attempt"]});
    let r = send(addr, &post("/admin/pending/write-off", off.clone())).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["outcome"], "written_off");
    let recs = records(&s.log, 5).await;
    let rec = recs.last().unwrap();
    assert_eq!(
        (&rec["attempt"], &rec["outcome"], &rec["amount"]),
        (&second["attempt"], &json!("written_off"), &json!(0))
    );
    let r = send(addr, &post("/admin/pending/write-off", off)).await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["state"], "not_pending");
    let r = send(
        addr,
        &post(
            "/admin/pending/settle",
            json!({"tenant": "acme", "attempt": second["attempt"], "cost": 1}),
        ),
    )
    .await;
    assert_eq!(r.status, 409);

    let (_, pending) = money(addr, "sk-acme").await;
    assert_eq!(pending, 0);
    assert_books(addr, &recs).await;
    assert_eq!(
        records(&s.log, 5).await.len(),
        5,
        "one record per reconciliation"
    );
    let v = usage(addr, "sk-acme").await;
    assert_eq!(
        v["money"]["budgets"][0]["reserved"], 0,
        "the budget holds nothing once both are reconciled"
    );
    assert!(
        list(addr, "").await.json()["pending"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_pending_attempt_settled_or_written_off_through_admin_leaves_books_adding_up_memory() {
    let s = serve(portcullis::core::MemoryStore::new(), "memory").await;
    settle_and_write_off_leave_the_books_adding_up(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_pending_attempt_settled_or_written_off_through_admin_leaves_books_adding_up_redis() {
    let server = redis_server::RedisServer::start();
    let store = portcullis_redis::RedisStore::connect(
        &server.url(),
        portcullis_redis::RedisStoreOptions::default().deadline(Duration::from_secs(1)),
    )
    .await
    .expect("connect");
    let s = serve(store, "redis").await;
    settle_and_write_off_leave_the_books_adding_up(&s).await;
}

/// Paging: every pending attempt on exactly one page, in a stable order, whatever the
/// page size; a bad limit or cursor is a clear 400; the routes need the admin token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_pending_pages_return_every_attempt_exactly_once() {
    let s = serve(portcullis::core::MemoryStore::new(), "pages").await;
    let addr = s.addr;
    for _ in 0..4 {
        leave_pending(addr, "sk-acme").await;
    }
    for _ in 0..3 {
        leave_pending(addr, "sk-lone").await;
    }
    let whole = list(addr, "?limit=1000").await.json();
    let all: Vec<Value> = whole["pending"].as_array().unwrap().clone();
    assert_eq!(all.len(), 7, "{all:?}");
    assert!(whole["next_cursor"].is_null());
    // The key with no tenant keeps its own books.
    let lone: Vec<_> = all.iter().filter(|p| p["tenant"].is_null()).collect();
    assert_eq!(lone.len(), 3);
    assert!(lone.iter().all(|p| p["key"] == "lone"));
    for limit in [1, 2, 3, 7] {
        let mut seen = Vec::new();
        let mut query = format!("?limit={limit}");
        for _ in 0..20 {
            let v = list(addr, &query).await.json();
            let page = v["pending"].as_array().unwrap().clone();
            assert!(page.len() <= limit);
            seen.extend(page);
            match v["next_cursor"].as_str() {
                Some(c) => query = format!("?limit={limit}&cursor={c}"),
                None => break,
            }
        }
        assert_eq!(seen, all, "pages of {limit}: each attempt once, in order");
    }
    for bad in [
        "?limit=0",
        "?limit=1001",
        "?limit=x",
        "?cursor=zz",
        "?cursor=7401",
        "?page=2",
    ] {
        let r = list(addr, bad).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert!(r.json()["error"]["message"].is_string());
    }
    let r = send(addr, &Req::get("/admin/pending")).await;
    assert_eq!(r.status, 401);
    let r = send(
        addr,
        &Req::post(
            "/admin/pending/write-off",
            r#"{"tenant":"acme","attempt":"x"}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 401);
    // Bodies an operator could get wrong.
    for (path, body) in [
        (
            "/admin/pending/settle",
            json!({"tenant": "acme", "attempt": "x"}),
        ),
        (
            "/admin/pending/settle",
            json!({"tenant": "acme", "attempt": "x", "cost": -1}),
        ),
        ("/admin/pending/settle", json!({"attempt": "x", "cost": 1})),
        (
            "/admin/pending/write-off",
            json!({"tenant": "acme", "attempt": "x", "cost": 1}),
        ),
        ("/admin/pending/write-off", json!({"tenant": "acme"})),
    ] {
        let r = send(addr, &post(path, body.clone())).await;
        assert_eq!(r.status, 400, "{path} {body}: {}", r.text());
    }
    // Nothing was reconciled by any of that.
    assert_eq!(
        list(addr, "?limit=1000").await.json()["pending"],
        json!(all)
    );
}

fn gauge(text: &str, metric: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.split([' ', '{']).next() == Some(metric))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// `/metrics` is behind its token, and its pending amount is the store's counter: it
/// rises when an attempt goes pending and falls when an operator reconciles it. (The
/// only test of this binary that scrapes: the gauges are the process's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4_metrics_pending_amount_moves_with_the_counter_behind_the_metrics_token() {
    let s = serve(portcullis::core::MemoryStore::new(), "metrics").await;
    let addr = s.addr;
    let scrape = || async {
        let r = send(
            addr,
            &Req::get("/metrics").header("authorization", format!("Bearer {METRICS_TOKEN}")),
        )
        .await;
        assert_eq!(r.status, 200);
        r.text()
    };
    let r = send(addr, &Req::get("/metrics")).await;
    assert_eq!(r.status, 401, "no token: {}", r.text());
    assert!(!r.text().contains("portcullis_"));
    let r = send(addr, &admin(Req::get("/metrics"))).await;
    assert_eq!(r.status, 401, "the admin token is not the metrics token");

    let text = scrape().await;
    assert_eq!(
        gauge(&text, "portcullis_pending_reconciliation_amount"),
        Some(0.0),
        "{text}"
    );
    leave_pending(addr, "sk-acme").await;
    leave_pending(addr, "sk-acme").await;
    let (_, pending) = money(addr, "sk-acme").await;
    let text = scrape().await;
    assert_eq!(
        gauge(&text, "portcullis_pending_reconciliation_amount"),
        Some(pending as f64),
        "{text}"
    );
    assert_eq!(
        gauge(&text, "portcullis_pending_reconciliation_attempts"),
        Some(2.0)
    );
    assert!(
        text.lines().any(|l| l
            .starts_with("portcullis_tenant_pending_reconciliation_amount{tenant=\"acme\"}")
            && l.ends_with(&format!(" {pending}"))),
        "{text}"
    );

    let listed = list(addr, "").await.json()["pending"]
        .as_array()
        .unwrap()
        .clone();
    let r = send(
        addr,
        &post(
            "/admin/pending/settle",
            json!({"tenant": "acme", "attempt": listed[0]["attempt"], "cost": 5}),
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let left = listed[1]["amount"].as_f64().unwrap();
    let text = scrape().await;
    assert_eq!(
        gauge(&text, "portcullis_pending_reconciliation_amount"),
        Some(left)
    );
    assert_eq!(
        gauge(&text, "portcullis_pending_reconciliation_attempts"),
        Some(1.0)
    );
    let r = send(
        addr,
        &post(
            "/admin/pending/write-off",
            json!({"tenant": "acme", "attempt": listed[1]["attempt"]}),
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let text = scrape().await;
    assert_eq!(
        gauge(&text, "portcullis_pending_reconciliation_amount"),
        Some(0.0)
    );
    assert!(
        text.lines()
            .any(|l| l == "portcullis_tenant_pending_reconciliation_amount{tenant=\"acme\"} 0"),
        "a tenant with nothing pending reads 0: {text}"
    );
    // Counted (at least these two: other tests of this binary reconcile too).
    for outcome in ["settled", "written_off"] {
        let label = format!("portcullis_reconciliations_total{{outcome=\"{outcome}\"}} ");
        let n = text
            .lines()
            .find_map(|l| l.strip_prefix(label.as_str())?.parse::<f64>().ok());
        assert!(n.is_some_and(|n| n >= 1.0), "{label}: {text}");
    }
}

/// A reconciliation whose body is wrong is a 400 that says what was expected, and
/// changes nothing: no cost on a settlement, a cost out of range, a write-off with a
/// cost, no books named, a body that is not JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_a_malformed_reconciliation_is_a_400_that_changes_nothing() {
    let s = serve(portcullis::core::MemoryStore::new(), "malformed").await;
    let addr = s.addr;
    leave_pending(addr, "sk-acme").await;
    let before = money(addr, "sk-acme").await;
    let listed = list(addr, "").await.json()["pending"].clone();
    let attempt = listed[0]["attempt"].clone();
    let cases = [
        (
            "/admin/pending/settle",
            json!({"tenant": "acme", "attempt": attempt}).to_string(),
            "Expected a JSON body",
        ),
        (
            "/admin/pending/settle",
            json!({"tenant": "acme", "attempt": attempt, "cost": -1}).to_string(),
            "cost must be from 0 to 9007199254740991 minor units.",
        ),
        (
            "/admin/pending/write-off",
            json!({"tenant": "acme", "attempt": attempt, "cost": 5}).to_string(),
            "Expected a JSON body",
        ),
        (
            "/admin/pending/write-off",
            json!({"attempt": attempt}).to_string(),
            "Expected a JSON body",
        ),
        (
            "/admin/pending/settle",
            "{not json".to_owned(),
            "Expected a JSON body",
        ),
    ];
    for (path, body, says) in cases {
        let r = send(addr, &admin(Req::post(path, body.clone()))).await;
        assert_eq!(r.status, 400, "{path} {body}: {}", r.text());
        let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(says), "{path} {body}: {message}");
        assert_eq!(money(addr, "sk-acme").await, before, "{path} {body}");
        assert_eq!(list(addr, "").await.json()["pending"], listed);
    }
}
