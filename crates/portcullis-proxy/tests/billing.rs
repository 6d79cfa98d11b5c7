//! Billing through the proxy, as a client sees it (B1–B6, S4).

mod common;

use common::*;
use std::time::Duration;

const KEYS: &str = r#"
[policies.open]

[tenants.rich]
balance = 1_000_000_000
budgets = [{ name = "monthly", limit = 1_000_000_000, period = "30d" }]

[tenants.broke]
balance = 0

[tenants.tight]
balance = 1_000_000_000
budgets = [{ name = "small", limit = 100 }]

[tasks.eval]
budget = 1

[keys.rich]
key = "sk-rich"
tenant = "rich"
policy = "open"

[keys.capped]
key = "sk-capped"
tenant = "rich"
policy = "open"
spend_cap = 1

[keys.broke]
key = "sk-broke"
tenant = "broke"
policy = "open"

[keys.tight]
key = "sk-tight"
tenant = "tight"
policy = "open"
"#;

fn money(v: &serde_json::Value) -> &serde_json::Value {
    &v["money"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b1_balance_at_or_below_zero_is_402_in_each_dialect_and_reaches_no_provider() {
    let p = Proxy::start(KEYS).await;
    for d in DIALECTS {
        let r = send(p.addr, &ask(d, "sk-broke", false)).await;
        let msg = rejection(&r, d, 40201);
        assert_eq!(msg, "Insufficient balance. Top up at the dashboard.");
        assert_eq!(
            r.header("x-should-retry"),
            Some("false"),
            "never retried (B1)"
        );
        assert_eq!(r.header("retry-after"), None);
    }
    // The dialects' error types (B1): OpenAI insufficient_quota, Anthropic
    // billing_error, Gemini RESOURCE_EXHAUSTED.
    let v = send(p.addr, &ask(Dialect::OpenAi, "sk-broke", false))
        .await
        .json();
    assert_eq!(v["error"]["type"], "insufficient_quota");
    let v = send(p.addr, &ask(Dialect::Anthropic, "sk-broke", false))
        .await
        .json();
    assert_eq!(v["error"]["type"], "billing_error");
    let v = send(p.addr, &ask(Dialect::Gemini, "sk-broke", false))
        .await
        .json();
    assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED");
    assert_eq!(p.fake.stats().total_calls, 0, "no provider call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b1_spend_cap_reached_is_402() {
    let p = Proxy::start(KEYS).await;
    let r = send(p.addr, &ask(Dialect::OpenAi, "sk-capped", false)).await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text());
    let r = send(p.addr, &ask(Dialect::OpenAi, "sk-capped", false)).await;
    let msg = rejection(&r, Dialect::OpenAi, 40202);
    assert_eq!(msg, "This API key has reached its spend limit.");
    assert_eq!(p.fake.stats().total_calls, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b2_settled_cost_is_the_price_of_the_reported_usage() {
    let p = Proxy::start(KEYS).await;
    let before = usage(p.addr, "sk-rich").await;
    let start = money(&before)["balance"].as_i64().unwrap();
    let req = ask(Dialect::Anthropic, "sk-rich", false)
        .header("x-fake-input-tokens", 1000)
        .header("x-fake-output-tokens", 200)
        .header("x-fake-cached-tokens", 300);
    let r = send(p.addr, &req).await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text());
    let v = r.json();
    let u = &v["usage"];
    let (input, cached, write, output) = (
        u["input_tokens"].as_i64().unwrap(),
        u["cache_read_input_tokens"].as_i64().unwrap(),
        u["cache_creation_input_tokens"].as_i64().unwrap(),
        u["output_tokens"].as_i64().unwrap(),
    );
    // claude-sonnet-4-5 in CHANNELS: 3_000_000 / 300_000 / 3_750_000 / 15_000_000 per Mtok.
    let micro = input * 3_000_000 + cached * 300_000 + write * 3_750_000 + output * 15_000_000;
    let cost = (micro + 999_999) / 1_000_000;
    let ok = eventually(WAIT, || async {
        money(&usage(p.addr, "sk-rich").await)["key_spent"].as_i64() == Some(cost)
    })
    .await;
    assert!(ok, "key spend = price × reported usage = {cost}");
    let after = usage(p.addr, "sk-rich").await;
    assert_eq!(money(&after)["balance"].as_i64().unwrap(), start - cost);
    assert_eq!(money(&after)["tenant_pending_reconciliation"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b3_scenario_4_budget_short_no_provider_call_budget_exhausted() {
    let p = Proxy::start(KEYS).await;
    // The tenant budget (100 micro-units) cannot hold claude's upper bound.
    for d in DIALECTS {
        let r = send(p.addr, &ask(d, "sk-tight", false)).await;
        let msg = rejection(&r, d, 40203);
        assert_eq!(msg, "BUDGET_EXHAUSTED");
        assert_eq!(r.header("x-should-retry"), Some("false"));
    }
    // A task budget named by header applies on top of the tenant's.
    let r = send(
        p.addr,
        &ask(Dialect::OpenAi, "sk-rich", false).header("x-portcullis-task", "eval"),
    )
    .await;
    rejection(&r, Dialect::OpenAi, 40203);
    // An unknown task is refused as a task the key may not use (403, the same answer
    // as another tenant's task: E4).
    let r = send(
        p.addr,
        &ask(Dialect::OpenAi, "sk-rich", false).header("x-portcullis-task", "nope"),
    )
    .await;
    rejection(&r, Dialect::OpenAi, 40301);
    assert_eq!(p.fake.stats().total_calls, 0, "the provider saw 0 calls");
    let v = usage(p.addr, "sk-tight").await;
    let b = &money(&v)["budgets"][0];
    assert_eq!(
        (b["spent"].as_i64(), b["reserved"].as_i64()),
        (Some(0), Some(0))
    );
}

/// The usage log's lines (a bounded file a test wrote).
fn log_lines(log: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// A gateway with `extra` settings logging usage to a fresh file.
async fn logging(name: &str, extra: &str) -> (Proxy, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("portcullis-{name}-{}", std::process::id()));
    // A process of the same id may have left it (ids are reused): start empty.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("usage.jsonl");
    let _ = std::fs::remove_file(&log);
    let toml = format!(
        "{extra}\n[server]\nusage_log = {:?}\n{KEYS}",
        log.display().to_string()
    );
    (Proxy::start(&toml).await, log)
}

/// Opens a slow stream of `dialect` and reads it until its first content went out, then
/// leaves (a chat UI's stop button); answers the output tokens the client received, as
/// the gateway counts them from the deltas.
async fn stop_after_first_content(p: &Proxy, dialect: Dialect) -> u64 {
    // The next chunk comes 5 s later: long after the gateway has seen the client leave.
    let req = ask(dialect, "sk-rich", true)
        .header("x-fake-chunk-interval-ms", 5_000)
        .header("x-fake-input-tokens", 50);
    let watched = match dialect {
        Dialect::OpenAi => portcullis_dialects::Dialect::OpenAi,
        Dialect::Anthropic => portcullis_dialects::Dialect::Anthropic,
        Dialect::Gemini => portcullis_dialects::Dialect::Gemini,
    };
    let mut seen = portcullis_dialects::UsageWatcher::new(watched, true);
    let mut o = open(p.addr, &req).await;
    assert_eq!(o.status, 200);
    while !seen.saw_content() {
        let data = o.next_data().await.expect("the stream's first content");
        seen.observe(&data);
    }
    o.disconnect();
    let out = seen.streamed_output_tokens();
    assert!(out > 0, "{dialect:?}: content went out");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_a_stream_the_client_stopped_after_content_is_charged_what_it_streamed() {
    let (p, log) = logging("cut-charge", "").await;
    let mut charged = 0;
    for (i, d) in DIALECTS.into_iter().enumerate() {
        let out = stop_after_first_content(&p, d).await;
        let landed = eventually(WAIT, || async { log_lines(&log).len() == i + 1 }).await;
        assert!(landed, "{d:?}: one record: {:?}", log_lines(&log));
        let r = &log_lines(&log)[i];
        assert_eq!(r["outcome"], "settled", "{d:?}: charged at once: {r}");
        assert_eq!(r["evidence"], "streamed", "{d:?}: {r}");
        assert_eq!(
            r["output_tokens"], out,
            "{d:?}: the output the client received: {r}"
        );
        // Anthropic and Gemini report the input before the content (the fake's 50);
        // OpenAI only at the end, so the gateway's estimate stands.
        let input = r["input_tokens"].as_u64().unwrap();
        match d {
            Dialect::OpenAi => assert!(input > 0, "{r}"),
            _ => assert_eq!(input, 50, "{d:?}: the reported input: {r}"),
        }
        let amount = r["amount"].as_i64().unwrap();
        assert!(amount > 0, "{d:?}: never written as zero: {r}");
        charged += amount;
    }
    // Nothing pending, nothing left reserved: the books hold exactly the charges.
    let v = usage(p.addr, "sk-rich").await;
    assert_eq!(money(&v)["key_spent"], charged, "{v}");
    assert_eq!(money(&v)["key_pending_reconciliation"], 0, "{v}");
    assert_eq!(money(&v)["budgets"][0]["reserved"], 0, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_with_cut_streams_hold_a_stopped_stream_stays_pending_reconciliation() {
    let (p, log) = logging("cut-hold", "[billing]\ncut_streams = \"hold\"").await;
    stop_after_first_content(&p, Dialect::OpenAi).await;
    let ok = eventually(WAIT, || async {
        money(&usage(p.addr, "sk-rich").await)["key_pending_reconciliation"]
            .as_i64()
            .is_some_and(|m| m > 0)
    })
    .await;
    assert!(ok, "the cut attempt is pending reconciliation");
    let v = usage(p.addr, "sk-rich").await;
    assert_eq!(money(&v)["key_spent"], 0);
    assert!(money(&v)["tenant_pending_reconciliation"].as_i64().unwrap() > 0);
    // The monthly budget keeps the reservation until reconciled.
    assert!(money(&v)["budgets"][0]["reserved"].as_i64().unwrap() > 0);
    // The record is written off the request path: waited for, not assumed.
    let logged = eventually(WAIT, || async { !log_lines(&log).is_empty() }).await;
    assert!(logged, "the cut attempt's usage record");
    let r = &log_lines(&log)[0];
    assert_eq!(r["outcome"], "pending_reconciliation", "{r}");
    assert_eq!(r["evidence"], serde_json::Value::Null, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b4_provider_error_answer_costs_nothing() {
    let p = Proxy::start(KEYS).await;
    let req = ask(Dialect::OpenAi, "sk-rich", false)
        .header("x-fake-status", 400)
        .header("x-fake-error", "invalid_request_error");
    let r = send(p.addr, &req).await;
    assert_eq!(
        r.status.as_u16(),
        400,
        "the provider's answer passes through"
    );
    let ok = eventually(WAIT, || async {
        let v = usage(p.addr, "sk-rich").await;
        money(&v)["key_spent"] == 0
            && money(&v)["key_pending_reconciliation"] == 0
            && money(&v)["budgets"][0]["reserved"] == 0
    })
    .await;
    assert!(
        ok,
        "a known provider error is settled at zero, not left pending"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b6_usage_log_has_one_line_per_attempt() {
    let dir = std::env::temp_dir().join(format!("portcullis-usage-{}", std::process::id()));
    // A process of the same id may have left it (ids are reused): start empty.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("usage.jsonl");
    let _ = std::fs::remove_file(&log);
    let toml = format!(
        "[server]\nusage_log = {:?}\n{KEYS}",
        log.display().to_string()
    );
    let p = Proxy::start(&toml).await;
    for d in DIALECTS {
        let r = send(p.addr, &ask(d, "sk-rich", false)).await;
        assert_eq!(r.status.as_u16(), 200, "{}", r.text());
    }
    let lines = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .collect::<Vec<_>>()
    };
    assert!(
        eventually(WAIT, || async { lines().len() == 3 }).await,
        "{:?}",
        lines()
    );
    let recs = lines();
    let spent: i64 = recs.iter().map(|r| r["amount"].as_i64().unwrap()).sum();
    let v = usage(p.addr, "sk-rich").await;
    assert_eq!(
        money(&v)["key_spent"].as_i64().unwrap(),
        spent,
        "the log adds up"
    );
    for r in &recs {
        assert_eq!(r["key"], "rich", "the label, never the secret");
        assert_eq!(r["tenant"], "rich");
        assert_eq!(r["outcome"], "settled");
        assert!(r["channel"].is_string() && r["model"].is_string() && r["attempt"].is_string());
        assert!(r["idempotency_key"].is_string());
        assert!(r["output_tokens"].as_u64().unwrap() > 0);
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("sk-rich"), "no secret in the usage log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b2_answers_are_asked_for_uncompressed_so_usage_can_be_read() {
    let p = Proxy::start(KEYS).await;
    let r = send(
        p.addr,
        &ask(Dialect::OpenAi, "sk-rich", false).header("accept-encoding", "gzip, deflate, br"),
    )
    .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text());
    let stats = p.fake.stats();
    let seen = &stats
        .recent_requests
        .last()
        .expect("one upstream call")
        .headers;
    assert!(seen.get("accept-encoding").is_none(), "{seen:?}");
    let ok = eventually(WAIT, || async {
        let v = usage(p.addr, "sk-rich").await;
        money(&v)["key_spent"].as_i64().is_some_and(|m| m > 0)
            && money(&v)["key_pending_reconciliation"] == 0
    })
    .await;
    assert!(ok, "settled from the usage it could read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_a_stalled_upstream_stream_is_cut_and_charged_what_it_streamed() {
    let toml = format!("[server]\nupstream_idle_timeout = \"300ms\"\n{KEYS}");
    let p = Proxy::start(&toml).await;
    let req = ask(Dialect::OpenAi, "sk-rich", true).header("x-fake-chunk-interval-ms", 3000);
    let mut o = open(p.addr, &req).await;
    let started = std::time::Instant::now();
    let _first = o.next_data().await;
    // The next chunk would come in 3 s; the gateway gives up after 300 ms of silence.
    // Content already reached the client, so there is no replay (F3): the stream ends
    // with an error event in the client's dialect.
    let rest = bounded(WAIT, "the cut stream", o.rest()).await;
    let text = String::from_utf8_lossy(&rest);
    assert!(
        text.contains("\n\ndata: {\"error\":{\"code\":\"50202\"") && text.ends_with("}}\n\n"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // Cut after its content went out: charged what the gateway saw streamed (B7).
    let ok = eventually(WAIT, || async {
        let v = usage(p.addr, "sk-rich").await;
        in_flight(&v) == 0 && money(&v)["key_spent"].as_i64().is_some_and(|m| m > 0)
    })
    .await;
    let v = usage(p.addr, "sk-rich").await;
    assert!(ok, "the slot is free and the attempt is charged: {v}");
    assert_eq!(money(&v)["key_pending_reconciliation"], 0, "{v}");
}

/// A coding agent's tenant: a budget of 2 500 000 that pays for the real costs of eight
/// agent turns (8 × 102 000) many times over but cannot hold three of their worst cases
/// at once (3 × ≈1 042 500), and a model priced like Claude Sonnet (micro-units: 3 a
/// token in, 0.3 read from cache, 3.75 written to it, 15 out).
const AGENT: &str = r#"
[policies.open]

[tenants.agents]
balance = 10_000_000
budgets = [{ name = "daily", limit = 2_500_000 }]

[keys.agent]
key = "sk-agent"
tenant = "agents"
policy = "open"

[channels.anthropic-a]
vendor = "anthropic"
base_url = "fake://"
credential = "sk-upstream-anthropic-e2e"
models = ["agent-model"]

[models.agent-model]
price = { input_per_mtok = 3_000_000, cached_input_per_mtok = 300_000, cache_write_per_mtok = 3_750_000, output_per_mtok = 15_000_000 }
"#;

/// One turn of a coding agent: ≈150 000 tokens of context (450 kB of text, three bytes
/// a token), a tool, `max_tokens` 32 000, streamed. The provider reports `input` prompt
/// tokens of which `cached` were read from its cache, and `output` tokens out, after
/// `latency_ms` (a batch sent together with a long latency is in flight together).
fn agent_turn(input: u64, cached: u64, output: u64, latency_ms: u64) -> Req {
    let context = "fn main() { println!(\"lorem ipsum\"); }\n".repeat(450_000 / 40);
    let body = serde_json::json!({
        "model": "agent-model",
        "max_tokens": 32_000,
        "stream": true,
        "system": "You are a coding agent.",
        "tools": [{"name": "read_file", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": context}],
    });
    Req::post("/v1/messages", body.to_string())
        .key(KeyAt::XApiKey, "sk-agent")
        .header("x-fake-latency-ms", latency_ms)
        .header("x-fake-input-tokens", input)
        .header("x-fake-cached-tokens", cached)
        .header("x-fake-output-tokens", output)
}

/// The real cost of a turn of 150 000 prompt tokens, 140 000 of them cached, and 2 000
/// out: 10 000 × 3 + 140 000 × 0.3 + 2 000 × 15.
const TURN_COST: i64 = 30_000 + 42_000 + 30_000;

/// Sends `n` agent turns at once, each answered after 3 s; the status of each answer,
/// every refusal checked to be the budget's (40203).
async fn agent_batch(addr: std::net::SocketAddr, n: usize) -> Vec<u16> {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let req = agent_turn(150_000, 140_000, 2_000, 3_000);
        set.spawn(async move { send(addr, &req).await });
    }
    let mut answers = Vec::new();
    while let Some(r) = set.join_next().await {
        let r = r.expect("the request task");
        if r.status != 200 {
            rejection(&r, Dialect::Anthropic, 40203);
        }
        answers.push(r.status.as_u16());
    }
    answers
}

/// The tenant's budget as `(spent, reserved)` and the key's spend and the balance.
async fn books(p: &Proxy) -> ((i64, i64), i64, i64) {
    let v = usage(p.addr, "sk-agent").await;
    let m = money(&v);
    let b = &m["budgets"][0];
    (
        (
            b["spent"].as_i64().unwrap(),
            b["reserved"].as_i64().unwrap(),
        ),
        m["key_spent"].as_i64().unwrap(),
        m["balance"].as_i64().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b8_an_agent_load_is_admitted_under_a_reserve_cap_and_charged_in_full() {
    // Today's holds (the upper bound, the default): 8 agent turns at once each hold
    // ≈1 042 500 (150 000 in at the cache-write rate + 32 000 out); the 2 500 000
    // budget holds two, the rest are refused although the budget could pay for all.
    let p = Proxy::start(AGENT).await;
    let answers = agent_batch(p.addr, 8).await;
    let refused = answers.iter().filter(|&&a| a == 402).count();
    assert!(
        refused >= 5,
        "most are refused under the upper bound: {answers:?}"
    );
    drop(p);

    // Capped holds: no turn holds more than 250 000, so the eight fit (2 000 000) and
    // every one is admitted. Without the cap each would hold its estimate (450 000 in
    // + a tenth of 32 000 out = 498 000) and at most five would fit.
    let capped = AGENT.replace(
        "[policies.open]",
        "[billing]\nreserve = \"estimate\"\nexpected_output_share = 0.1\n\
         reserve_cap = 250_000\n\n[policies.open]",
    );
    let p = Proxy::start(&capped).await;
    let (_, _, start) = books(&p).await;
    assert_eq!(start, 10_000_000);
    let batch = tokio::spawn(agent_batch(p.addr, 8));
    // While the eight are in flight the budget holds 8 × the cap.
    let (held, view) = usage_until(p.addr, "sk-agent", WAIT, |v| {
        money(v)["budgets"][0]["reserved"] == 2_000_000
    })
    .await;
    assert!(held, "8 holds of 250 000 each: {view}");
    let answers = batch.await.expect("the batch");
    assert_eq!(answers, [200; 8], "every turn is admitted");
    // The books end exact: each turn settled at its real cost, nothing still held.
    let settled = 8 * TURN_COST;
    let ok = eventually(WAIT, || async {
        books(&p).await == ((settled, 0), settled, start - settled)
    })
    .await;
    assert!(ok, "balance = start − Σ settled: {:?}", books(&p).await);

    // A turn whose real cost exceeds its hold (150 000 uncached in, 30 000 out:
    // 450 000 + 450 000 = 900 000, held 250 000) is charged all of it at settlement.
    let over = 450_000 + 450_000;
    let mut spent = settled;
    for _ in 0..2 {
        let r = send(p.addr, &agent_turn(150_000, 0, 30_000, 10)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        spent += over;
        let ok = eventually(WAIT, || async {
            books(&p).await == ((spent, 0), spent, start - spent)
        })
        .await;
        assert!(ok, "charged in full: {:?}", books(&p).await);
    }
    // The second was admitted with room for its hold (1 716 000 + 250 000 ≤ 2 500 000)
    // and overran the budget by less than its own overshoot; the next is refused.
    assert!(
        spent > 2_500_000 && spent - 2_500_000 <= over - 250_000,
        "{spent}"
    );
    let r = send(p.addr, &agent_turn(150_000, 140_000, 2_000, 10)).await;
    rejection(&r, Dialect::Anthropic, 40203);
    assert_eq!(
        books(&p).await,
        ((spent, 0), spent, start - spent),
        "a refusal changes nothing"
    );
    assert_eq!(
        p.fake.stats().total_calls,
        10,
        "the refused turn was not sent"
    );
}
