//! `GET /metrics` after a scripted run finds each metric with the right counts
//! (P4). One test in its own binary: the recorder is per process.

mod common;

use common::*;

const CFG: &str = r#"
[failover]
max_attempts = 2

[policies.two]
requests = [{ window = "1m", limit = 2 }]

[tenants.t]
balance = 1_000_000_000

[keys.m]
key = "sk-m"
tenant = "t"
policy = "two"

[policies.open]

[keys.o]
key = "sk-o"
tenant = "t"
policy = "open"
"#;

fn value(text: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(metric) && labels.iter().all(|x| l.contains(x)))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4_metrics_count_a_scripted_run() {
    let p = Proxy::start(CFG).await;
    // 1 success; 1 request the provider answers 429 twice (two attempts, then the
    // gateway's 42911, F10); then a 42902 refusal.
    let ok = send(p.addr, &ask(Dialect::OpenAi, "sk-m", false)).await;
    assert_eq!(ok.status.as_u16(), 200, "{}", ok.text());
    let limited = send(
        p.addr,
        &ask(Dialect::OpenAi, "sk-m", false)
            .header("x-fake-status", 429)
            .header("x-fake-error", "rate_limit_exceeded"),
    )
    .await;
    rejection(&limited, Dialect::OpenAi, 42911);
    let refused = send(p.addr, &ask(Dialect::OpenAi, "sk-m", false)).await;
    rejection(&refused, Dialect::OpenAi, 42902);

    let scrape = || async { send(p.addr, &Req::get("/metrics")).await.text() };
    let settled = eventually(WAIT, || async {
        value(
            &scrape().await,
            "portcullis_settlements_total",
            &["outcome=\"settled\""],
        ) == Some(3.0)
    })
    .await;
    let text = scrape().await;
    assert!(settled, "{text}");
    assert_eq!(
        value(
            &text,
            "portcullis_rejections_total",
            &["code=\"42902\"", "layer=\"anchored_window\""]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "portcullis_upstream_responses_total",
            &["channel=\"openai-a\"", "class=\"2xx\""]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "portcullis_upstream_responses_total",
            &["channel=\"openai-a\"", "class=\"429\""]
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "portcullis_attempts_per_request_count", &[]),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "portcullis_attempts_per_request_sum", &[]),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "portcullis_failover_attempt_failures_total",
            &["reason=\"rate_limited\""]
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "portcullis_request_cost_count", &[]),
        Some(3.0),
        "{text}"
    );
    // Bucketed histograms (which add up across instances), not summaries: one request
    // took one attempt, the other two.
    assert_eq!(
        value(
            &text,
            "portcullis_attempts_per_request_bucket",
            &["le=\"1\""]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "portcullis_attempts_per_request_bucket",
            &["le=\"2\""]
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "portcullis_request_cost_bucket", &["le=\"+Inf\""]),
        Some(3.0),
        "{text}"
    );
    assert!(!text.contains("quantile="), "no summaries: {text}");
    assert_eq!(
        value(&text, "portcullis_pending_reconciliation_amount", &[]),
        Some(0.0),
        "{text}"
    );
    assert!(!text.contains("sk-m"), "no secret in metrics");

    // In flight per layer: a stream held open counts once in the failover and the
    // billing layer, and nothing is left once it is gone. (Anthropic: the OpenAI
    // channel cools down after the provider's 429s above.)
    let held = ask(Dialect::Anthropic, "sk-o", true)
        .header("x-fake-chunks", 3)
        .header("x-fake-chunk-interval-ms", 2_000);
    let mut o = open(p.addr, &held).await;
    assert_eq!(o.status.as_u16(), 200);
    o.next_data().await;
    let text = scrape().await;
    for layer in ["failover", "billing_gate"] {
        let label = format!("layer=\"{layer}\"");
        assert_eq!(
            value(&text, "portcullis_in_flight", &[label.as_str()]),
            Some(1.0),
            "{layer}: {text}"
        );
    }
    o.disconnect();
    let drained = eventually(WAIT, || async {
        let t = scrape().await;
        ["failover", "billing_gate", "anchored_window"]
            .iter()
            .all(|l| {
                let label = format!("layer=\"{l}\"");
                value(&t, "portcullis_in_flight", &[label.as_str()]) == Some(0.0)
            })
    })
    .await;
    assert!(drained, "{}", scrape().await);
}
