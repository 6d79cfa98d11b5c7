//! What the start tells an operator: one line per tenant about its balance — seeded
//! from the configuration, or kept because the store already holds one — never both.

mod common;

use common::*;
use portcullis_proxy::Config;
use std::io::Write;
use std::sync::{Arc, Mutex};
use tracing_subscriber::fmt::MakeWriter;

/// Every log line written, for the test to count.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Lines {
    type Writer = Lines;
    fn make_writer(&'a self) -> Lines {
        self.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b1_the_start_logs_one_line_per_tenant_balance() {
    let lines = Lines::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(lines.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    let toml = format!(
        "[tenants.acme]\nbalance = 1_000\n\n[tenants.solo]\nbalance = 2_000\n\n\
         [keys.k]\nkey = \"sk-start\"\ntenant = \"acme\"\n{CHANNELS}"
    );
    let config = Config::parse(&toml).expect("config");
    let fake = portcullis_fake_upstream::FakeUpstream::start().await;
    let (_addr, server) = serve_opened(config, fake.base_url()).await;
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
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
