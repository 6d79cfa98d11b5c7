//! A store outage an operator can read (D11): the log tells when the failures
//! began (per layer, with the failure mode), not one line per request; the per-request
//! facts are in the metrics.

mod common;
#[path = "../../portcullis-redis/tests/common/mod.rs"]
mod redis_server;

use common::*;
use portcullis_proxy::Config;

const REQUESTS: usize = 200;

/// D11: 200 requests while Redis is gone: each answered at once (503: billing is
/// fail-closed), and the log holds a handful of WARN/ERROR lines — the outage's
/// beginning per layer — not hundreds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d11_a_store_outage_logs_its_state_changes_not_a_line_per_request() {
    let lines = portcullis_test_support::logs::capture();

    let mut redis = redis_server::RedisServer::start();
    let toml = format!(
        "[store]\nurl = \"{}\"\n\n[policies.p]\nconcurrency = 4\nrequests = [{{ window = \"1m\", limit = 1000 }}]\n\n[tenants.t]\nbalance = 1_000_000\n\n[keys.k]\nkey = \"sk-outage\"\ntenant = \"t\"\npolicy = \"p\"\n{CHANNELS}",
        redis.url()
    );
    let config = Config::parse(&toml).expect("config");
    let fake = portcullis_fake_upstream::FakeUpstream::start().await;
    let (addr, server) = serve_opened(config, fake.base_url()).await;
    // Redis goes away under the running gateway.
    redis.kill();
    let before = warn_or_error(lines);
    for _ in 0..REQUESTS {
        let r = send(addr, &ask(Dialect::OpenAi, "sk-outage", false)).await;
        assert_eq!(r.status, 503, "{}", r.text());
    }
    server.abort();
    let logged = warn_or_error(lines) - before;
    let text = lines.text();
    eprintln!("{logged} WARN/ERROR lines for {REQUESTS} requests through an outage");
    assert!(
        logged <= 12,
        "{logged} WARN/ERROR lines for {REQUESTS} requests through an outage:\n{text}"
    );
    assert!(
        text.contains("limit store failing; refusing (fail-closed)"),
        "the outage's beginning is logged:\n{text}"
    );
}

fn warn_or_error(lines: &portcullis_test_support::logs::Lines) -> usize {
    lines
        .text()
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .count()
}
