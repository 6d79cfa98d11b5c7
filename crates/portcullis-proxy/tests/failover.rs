//! Failover through the proxy (F1–F11, S5–S9) against the fake
//! upstream: two or three OpenAI channels, provider errors scripted per credential.

mod common;

use common::*;
use portcullis_fake_upstream::{Behavior, ErrorKind};
use std::time::{Duration, Instant};

/// Channels `one`, `two` (and `three`) with credentials `cred-<name>`; `extra` is
/// appended to every channel table; `head` goes before everything.
fn config(head: &str, channels: &[&str], extra: &str) -> String {
    let mut s = format!(
        "{head}\n[policies.open]\n\n[tenants.t]\nbalance = 1_000_000_000_000\n\n[keys.a]\nkey = \"sk-a\"\npolicy = \"open\"\ntenant = \"t\"\n\n"
    );
    for c in channels {
        s += &format!(
            "[channels.{c}]\nvendor = \"openai\"\nbase_url = \"fake://\"\ncredential = \"cred-{c}\"\nmodels = [\"gpt-4o-mini\"]\n{extra}\n\n"
        );
    }
    s += "[models.gpt-4o-mini]\nprice = { input_per_mtok = 1_000_000, output_per_mtok = 1_000_000 }\nmax_output_tokens = 16\n";
    s
}

fn usage_log(name: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("portcullis-failover-{}-{name}", std::process::id()));
    // A process of the same id may have left it (ids are reused): start empty.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("usage.jsonl");
    let _ = std::fs::remove_file(&log);
    log
}

fn log_lines(log: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s7_overload_fails_over_and_every_attempt_is_recorded_with_its_own_cost() {
    let log = usage_log("s7");
    let head = format!("[server]\nusage_log = {:?}\n", log.display().to_string());
    let p = Proxy::start(&config(&head, &["one", "two"], "")).await;
    p.fake
        .set_default_for("cred-one", Behavior::error(ErrorKind::Overloaded));
    let mut served = 0;
    for _ in 0..4 {
        let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        served += 1;
    }
    let s = p.fake.stats();
    assert_eq!(s.calls_for("cred-two"), served);
    let failed_attempts = s.calls_for("cred-one");
    assert!(failed_attempts >= 1, "{s:?}");
    // One usage record per attempt: the overloaded ones at zero, the served ones at
    // their price, each under its own attempt id (B4).
    let expected = (served + failed_attempts) as usize;
    assert!(eventually(WAIT, || async { log_lines(&log).len() == expected }).await);
    let lines = log_lines(&log);
    let ids: std::collections::HashSet<_> = lines
        .iter()
        .map(|l| l["attempt"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), expected, "attempt ids are distinct");
    for l in &lines {
        let amount = l["amount"].as_i64().unwrap();
        match l["channel"].as_str().unwrap() {
            "one" => assert_eq!((l["outcome"].as_str(), amount), (Some("settled"), 0), "{l}"),
            "two" => assert!(amount > 0 && l["outcome"] == "settled", "{l}"),
            other => panic!("channel {other}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_provider_retry_after_is_a_floor_and_a_wait_past_the_deadline_stops() {
    let p = Proxy::start(&config("", &["one"], "")).await;
    // First call: 429 with Retry-After 1 s; later calls succeed.
    p.fake.push_script_for(
        "cred-one",
        Behavior::error(ErrorKind::RateLimit).with_retry_after(1),
    );
    let t = Instant::now();
    let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        t.elapsed() >= Duration::from_secs(1),
        "re-sent after {:?}, before the provider's Retry-After",
        t.elapsed()
    );
    assert_eq!(p.fake.stats().calls_for("cred-one"), 2);

    // A deadline shorter than the provider's wait: the gateway stops instead of
    // waiting, and answers at once.
    p.fake.push_script_for(
        "cred-one",
        Behavior::error(ErrorKind::RateLimit).with_retry_after(5),
    );
    let t = Instant::now();
    let r = send(
        p.addr,
        &ask(Dialect::OpenAi, "sk-a", false).header("x-portcullis-deadline-ms", 500),
    )
    .await;
    rejection(&r, Dialect::OpenAi, 42911);
    let after: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((4..=5).contains(&after), "{after}");
    // At once: waiting out the provider's 5 s would take 5 s; 2 s is the slack of a
    // loaded 2-core host around the 500 ms deadline.
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(
        p.fake.stats().calls_for("cred-one"),
        3,
        "nothing re-sent early"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_provider_spend_cap_is_not_retried_on_the_same_paying_account() {
    // Channels one and two bill the same account; three another one.
    // Weights 10 / 10 / 1: a fresh gateway's first pick is `one`, and the candidate
    // order is one, two, three.
    let cfg = config("", &["one", "two"], "credential_id = \"acct-1\"\nweight = 10")
        .replace("[models.gpt-4o-mini]", "[channels.three]\nvendor = \"openai\"\nbase_url = \"fake://\"\ncredential = \"cred-three\"\nmodels = [\"gpt-4o-mini\"]\nweight = 1\n\n[models.gpt-4o-mini]");
    let p = Proxy::start(&cfg).await;
    p.fake
        .set_default_for("cred-one", Behavior::error(ErrorKind::SpendLimit));
    p.fake
        .set_default_for("cred-two", Behavior::error(ErrorKind::SpendLimit));
    let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
    let s = p.fake.stats();
    // Exactly one call to the capped account, none to its other channel; the other
    // account serves.
    assert_eq!(
        s.calls_for("cred-one") + s.calls_for("cred-two"),
        1,
        "{s:?}"
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.calls_for("cred-three"), 1);
    // The capped account stays out of rotation: the next requests go straight to
    // the other account.
    for _ in 0..3 {
        assert_eq!(
            send(p.addr, &ask(Dialect::OpenAi, "sk-a", false))
                .await
                .status,
            200
        );
    }
    let s = p.fake.stats();
    assert_eq!(
        s.calls_for("cred-one") + s.calls_for("cred-two"),
        1,
        "{s:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_spend_cap_with_no_other_account_answers_502_without_retry() {
    let p = Proxy::start(&config("", &["one", "two"], "credential_id = \"acct-1\"")).await;
    for c in ["cred-one", "cred-two"] {
        p.fake
            .set_default_for(c, Behavior::error(ErrorKind::SpendLimit));
    }
    let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
    rejection(&r, Dialect::OpenAi, 50202);
    assert_eq!(p.fake.stats().total_calls, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_error_after_part_of_a_stream_is_not_replayed_and_is_charged_what_streamed() {
    let p = Proxy::start(&config("", &["one", "two"], "")).await;
    let req = ask(Dialect::OpenAi, "sk-a", true)
        .header("x-fake-chunks", 4)
        .header("x-fake-fail-after-chunks", 2)
        .header("x-fake-cut", "true");
    let r = send(p.addr, &req).await;
    assert_eq!(r.status, 200);
    let text = r.text();
    assert!(
        text.contains("\"content\""),
        "content reached the client: {text}"
    );
    assert!(
        text.trim_end().ends_with("}}") && text.contains("data: {\"error\""),
        "an in-stream error event ends it: {text}"
    );
    assert_eq!(
        p.fake.stats().total_calls,
        1,
        "no replay after the first chunk"
    );
    // The upstream cut it after content went out: charged what the gateway saw
    // streamed, at once (B7) — neither as if complete, nor free, nor held.
    let charged = eventually(WAIT, || async {
        let v = usage(p.addr, "sk-a").await;
        v["money"]["key_spent"].as_i64().is_some_and(|m| m > 0)
    })
    .await;
    let v = usage(p.addr, "sk-a").await;
    assert!(charged, "the partial attempt is charged: {v}");
    assert_eq!(v["money"]["key_pending_reconciliation"], 0, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_stream_failing_before_its_first_content_chunk_fails_over() {
    let p = Proxy::start(&config("", &["one", "two"], "")).await;
    // Channel one's streams fail right away (before any content).
    p.fake.set_default_for(
        "cred-one",
        Behavior::error(ErrorKind::ServerError).with_fail_after_chunks(0),
    );
    for _ in 0..3 {
        let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", true)).await;
        assert_eq!(r.status, 200);
        let text = r.text();
        assert!(
            !text.contains("\"error\""),
            "the client never sees it: {text}"
        );
        assert!(text.contains("[DONE]"), "{text}");
    }
    assert_eq!(p.fake.stats().calls_for("cred-two"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_invalid_request_is_returned_as_the_provider_sent_it_and_not_retried() {
    let p = Proxy::start(&config("", &["one", "two"], "")).await;
    let r = send(
        p.addr,
        &ask(Dialect::OpenAi, "sk-a", false).header("x-fake-error", "invalid_request_error"),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("invalid_request_error"), "{}", r.text());
    assert_eq!(p.fake.stats().total_calls, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f10_all_rate_limited_is_42911_otherwise_50202_and_attempts_are_bounded() {
    let p = Proxy::start(&config("", &["one", "two"], "")).await;
    for c in ["cred-one", "cred-two"] {
        p.fake.set_default_for(
            c,
            Behavior::error(ErrorKind::RateLimit).with_retry_after(30),
        );
    }
    let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
    rejection(&r, Dialect::OpenAi, 42911);
    assert!(
        r.text()
            .contains("Upstream capacity for this model is busy. Retry shortly.")
    );
    assert_eq!(r.header("retry-after"), Some("30"));
    assert_eq!(p.fake.stats().total_calls, 2);

    let p = Proxy::start(&config("", &["one", "two"], "")).await;
    for c in ["cred-one", "cred-two"] {
        p.fake
            .set_default_for(c, Behavior::error(ErrorKind::ServerError));
    }
    let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
    rejection(&r, Dialect::OpenAi, 50202);
    assert!(
        r.text()
            .contains("The model provider returned an error. Please retry.")
    );
    assert!(
        p.fake.stats().total_calls <= 3,
        "max_attempts bounds the attempts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f9_conversation_sticks_to_its_channel_and_moves_when_it_fails() {
    let p = Proxy::start(&config("", &["one", "two"], "")).await;
    let conv =
        |id: &str| ask(Dialect::OpenAi, "sk-a", false).header("x-portcullis-conversation", id);
    for _ in 0..6 {
        assert_eq!(send(p.addr, &conv("c-1")).await.status, 200);
    }
    let s = p.fake.stats();
    let pinned = if s.calls_for("cred-one") == 6 {
        "cred-one"
    } else {
        "cred-two"
    };
    assert_eq!(
        s.calls_for(pinned),
        6,
        "round-robin ignored for a pinned conversation: {s:?}"
    );
    // The pinned channel fails: the conversation moves and is re-pinned there.
    p.fake
        .set_default_for(pinned, Behavior::error(ErrorKind::ServerError));
    assert_eq!(send(p.addr, &conv("c-1")).await.status, 200);
    p.fake.clear_behaviors();
    let other = if pinned == "cred-one" {
        "cred-two"
    } else {
        "cred-one"
    };
    let before = p.fake.stats().calls_for(other);
    for _ in 0..4 {
        assert_eq!(send(p.addr, &conv("c-1")).await.status, 200);
    }
    assert_eq!(p.fake.stats().calls_for(other), before + 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s9_sdk_retries_on_top_of_gateway_retries_stay_within_one_budget() {
    // Every channel fails. A client SDK retries each request 3 times (4 tries);
    // the gateway's own retries come out of one budget (10 % of requests + 1/s).
    // The circuit breaker is held off (it would cut the calls even further): this
    // test is about the budget.
    let head = "[failover]\nretry_ratio = 0.1\nretry_min_per_sec = 1\nbudget_ttl = \"10s\"\nbackoff_base = \"1ms\"\nbackoff_cap = \"2ms\"\ncircuit_min_requests = 1000000\n";
    let p = Proxy::start(&config(head, &["one", "two"], "")).await;
    for c in ["cred-one", "cred-two"] {
        p.fake
            .set_default_for(c, Behavior::error(ErrorKind::ServerError));
    }
    const LOGICAL: u64 = 25;
    const SDK_TRIES: u64 = 4;
    let mut gateway_requests = 0;
    for _ in 0..LOGICAL {
        for _ in 0..SDK_TRIES {
            let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
            assert!(r.status.is_server_error(), "{}", r.status);
            gateway_requests += 1;
        }
    }
    let calls = p.fake.stats().total_calls;
    // Without a budget: 100 requests × 3 attempts = 300 calls. With it: the first
    // attempts plus 10 % of them plus the 10-per-window reserve.
    let allowed = gateway_requests + gateway_requests / 10 + 10 + 2;
    println!("{gateway_requests} gateway requests → {calls} provider calls (allowed {allowed})");
    assert!(calls > gateway_requests, "some retries were allowed");
    assert!(calls <= allowed, "{calls} calls > {allowed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f8_outage_circuit_opens_then_the_channel_returns_through_probes() {
    let head = "[failover]\ncircuit_open = \"1s\"\nbackoff_base = \"1ms\"\nbackoff_cap = \"2ms\"\n";
    let p = Proxy::start(&config(head, &["one", "two"], "")).await;
    p.fake
        .set_default_for("cred-one", Behavior::error(ErrorKind::ServerError));
    let mut max_attempts_seen = 0;
    for _ in 0..60 {
        let before = p.fake.stats().total_calls;
        let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        max_attempts_seen = max_attempts_seen.max(p.fake.stats().total_calls - before);
    }
    let during = p.fake.stats().calls_for("cred-one");
    println!(
        "outage: 60 requests, {during} calls to the failing channel, at most {max_attempts_seen} attempts per request"
    );
    assert!(max_attempts_seen <= 3);
    // Round-robin alone would send it 30; the circuit opened after the minimum count.
    assert!(
        during <= 15,
        "the failing channel left the rotation: {during}"
    );
    // The channel heals; after the open period a few probes bring it back.
    p.fake.clear_behaviors();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    for _ in 0..20 {
        assert_eq!(
            send(p.addr, &ask(Dialect::OpenAi, "sk-a", false))
                .await
                .status,
            200
        );
    }
    let after = p.fake.stats().calls_for("cred-one") - during;
    println!("after healing: {after} of 20 requests on the recovered channel");
    assert!(after >= 5, "back in rotation: {after}");
}

/// `gpt-4o-mini` on channel `one`, falling back to `gpt-4o` on channel `two`;
/// `extra_b` goes into channel two's table, `caps` is gpt-4o's capability list.
fn fallback_config(head: &str, extra_b: &str, caps: &str) -> String {
    format!(
        r#"{head}
[policies.open]

[tenants.t]
balance = 1_000_000_000_000

[keys.a]
key = "sk-a"
policy = "open"
tenant = "t"

[channels.one]
vendor = "openai"
base_url = "fake://"
credential = "cred-one"
models = ["gpt-4o-mini"]

[channels.two]
vendor = "openai"
base_url = "fake://"
credential = "cred-two"
models = ["gpt-4o"]
{extra_b}

[models.gpt-4o-mini]
price = {{ input_per_mtok = 1_000_000, output_per_mtok = 1_000_000 }}
max_output_tokens = 16
fallback = "gpt-4o"

[models.gpt-4o]
price = {{ input_per_mtok = 5_000_000, output_per_mtok = 5_000_000 }}
max_output_tokens = 16
capabilities = [{caps}]
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s7_overload_falls_back_to_a_model_that_meets_the_contract_each_attempt_costed() {
    let log = usage_log("f11");
    let head = format!("[server]\nusage_log = {:?}\n", log.display().to_string());
    let p = Proxy::start(&fallback_config(&head, "", "\"tools\"")).await;
    p.fake
        .set_default_for("cred-one", Behavior::error(ErrorKind::Overloaded));
    let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.text().contains("\"model\":\"gpt-4o\""),
        "answered by the fallback model: {}",
        r.text()
    );
    let s = p.fake.stats();
    assert_eq!((s.calls_for("cred-one"), s.calls_for("cred-two")), (1, 1));
    assert!(eventually(WAIT, || async { log_lines(&log).len() == 2 }).await);
    let lines = log_lines(&log);
    let by_model = |m: &str| lines.iter().find(|l| l["model"] == m).unwrap().clone();
    let (a, b) = (by_model("gpt-4o-mini"), by_model("gpt-4o"));
    assert_eq!(
        (a["channel"].as_str(), a["amount"].as_i64()),
        (Some("one"), Some(0))
    );
    assert_eq!(b["channel"], "two");
    assert!(
        b["amount"].as_i64().unwrap() > 0,
        "the fallback attempt is costed at its own price"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f11_a_fallback_that_breaks_the_contract_is_not_used() {
    // gpt-4o here has no `tools` capability; the request defines tools.
    let p = Proxy::start(&fallback_config("", "", "")).await;
    p.fake
        .set_default_for("cred-one", Behavior::error(ErrorKind::Overloaded));
    let body = serde_json::json!({
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    });
    let req = Req::post("/v1/chat/completions", body.to_string()).key(KeyAt::Bearer, "sk-a");
    let r = send(p.addr, &req).await;
    rejection(&r, Dialect::OpenAi, 50202);
    assert_eq!(p.fake.stats().calls_for("cred-two"), 0);
    // Without tools the same fallback is fine.
    let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
    assert_eq!(r.status, 200);
    assert_eq!(p.fake.stats().calls_for("cred-two"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_no_switch_to_another_model_on_the_same_paying_account() {
    // Both models bill the same account: a spend cap on one rules out the other.
    let cfg = fallback_config("", "credential_id = \"acct-1\"", "\"tools\"").replace(
        "models = [\"gpt-4o-mini\"]",
        "models = [\"gpt-4o-mini\"]\ncredential_id = \"acct-1\"",
    );
    let p = Proxy::start(&cfg).await;
    p.fake
        .set_default_for("cred-one", Behavior::error(ErrorKind::SpendLimit));
    let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
    rejection(&r, Dialect::OpenAi, 50202);
    let s = p.fake.stats();
    assert_eq!((s.calls_for("cred-one"), s.calls_for("cred-two")), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_failover_stays_within_the_first_choices_group() {
    // one (group a, weight 10: a fresh gateway's first pick), other (group b), three
    // (group a); by name, `other` comes before `three` in the candidate order. One
    // fails: the request moves to three, never to other.
    let cfg = config("", &["one"], "group = \"a\"\nweight = 10").replace(
        "[models.gpt-4o-mini]",
        "[channels.other]\nvendor = \"openai\"\nbase_url = \"fake://\"\ncredential = \"cred-other\"\nmodels = [\"gpt-4o-mini\"]\ngroup = \"b\"\n\n[channels.three]\nvendor = \"openai\"\nbase_url = \"fake://\"\ncredential = \"cred-three\"\nmodels = [\"gpt-4o-mini\"]\ngroup = \"a\"\n\n[models.gpt-4o-mini]",
    );
    let p = Proxy::start(&cfg).await;
    p.fake
        .set_default_for("cred-one", Behavior::error(ErrorKind::ServerError));
    let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let s = p.fake.stats();
    assert_eq!(
        (
            s.calls_for("cred-one"),
            s.calls_for("cred-other"),
            s.calls_for("cred-three")
        ),
        (1, 0, 1),
        "{s:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_held_json_answer_keeps_its_content_length_and_a_stream_claims_none() {
    // The first-chunk gate holds a whole JSON answer before the client sees it; its
    // length must still reach the client (a chunked answer costs an extra frame and,
    // for pooled clients, a connection that is not reusable at the last byte).
    let p = Proxy::start(&config("", &["one", "two"], "")).await;
    for _ in 0..3 {
        let dialect = Dialect::OpenAi;
        let r = send(p.addr, &ask(dialect, "sk-a", false)).await;
        assert_eq!(r.status, 200, "{dialect:?}: {}", r.text());
        assert_eq!(
            r.header("content-length"),
            Some(r.body.len().to_string().as_str()),
            "{dialect:?}: {:?}",
            r.headers
        );
        let s = send(p.addr, &ask(dialect, "sk-a", true)).await;
        assert_eq!(s.status, 200, "{dialect:?}: {}", s.text());
        // A committed stream may still gain an error event (F3): no length promised.
        assert_eq!(
            s.header("content-length"),
            None,
            "{dialect:?}: {:?}",
            s.headers
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q2_checking_a_fallback_offer_takes_no_round_robin_turn() {
    // Two equal channels for gpt-4o-mini, whose fallback gpt-4o has its own channel.
    // Checking the fallback's contract on every request must not advance the weighted
    // round-robin: the requests still alternate between `one` and `two`.
    let cfg = config("", &["one", "two"], "").replace(
        "[models.gpt-4o-mini]",
        "[channels.three]\nvendor = \"openai\"\nbase_url = \"fake://\"\ncredential = \"cred-three\"\nmodels = [\"gpt-4o\"]\n\n[models.gpt-4o]\nprice = { input_per_mtok = 1_000_000, output_per_mtok = 1_000_000 }\nmax_output_tokens = 16\n\n[models.gpt-4o-mini]\nfallback = \"gpt-4o\"",
    );
    let p = Proxy::start(&cfg).await;
    for _ in 0..6 {
        let r = send(p.addr, &ask(Dialect::OpenAi, "sk-a", false)).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let s = p.fake.stats();
    assert_eq!(
        (
            s.calls_for("cred-one"),
            s.calls_for("cred-two"),
            s.calls_for("cred-three")
        ),
        (3, 3, 0)
    );
}
