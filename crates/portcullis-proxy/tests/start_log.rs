//! What the start tells an operator: one line per tenant about its balance — seeded
//! from the configuration, or kept because the store already holds one — never both.

mod common;

use common::*;
use portcullis_proxy::Config;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b1_the_start_logs_one_line_per_tenant_balance() {
    let lines = portcullis_test_support::logs::capture();
    let toml = format!(
        "[tenants.acme]\nbalance = 1_000\n\n[tenants.solo]\nbalance = 2_000\n\n\
         [keys.k]\nkey = \"sk-start\"\ntenant = \"acme\"\n{CHANNELS}"
    );
    let config = Config::parse(&toml).expect("config");
    let fake = portcullis_fake_upstream::FakeUpstream::start().await;
    let (_addr, server) = serve_opened(config, fake.base_url()).await;
    let text = lines.text();
    for tenant in ["acme", "solo"] {
        let about: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("tenant balance") && l.contains(&format!("tenant=\"{tenant}\"")))
            .collect();
        assert_eq!(about.len(), 1, "{tenant}: {about:#?}\n{text}");
        assert!(
            about[0].contains("seeded"),
            "a fresh store seeds: {}",
            about[0]
        );
    }
    server.abort();
}
