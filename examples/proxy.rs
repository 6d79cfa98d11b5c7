//! The ready gateway.
//!
//! ```sh
//! cargo run -p tollgate-examples --example proxy                      # demo: bundled config + fake upstream
//! cargo run -p tollgate-examples --example proxy -- --config my.toml  # your configuration
//! ```
//!
//! Flags: `--config PATH` (default: the bundled `examples/demo.toml`), `--listen
//! ADDR` (overrides `[server] listen`), `--fake-upstream ADDR` (where the bundled fake
//! upstream listens when a channel uses `fake://`; default 127.0.0.1:0).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use tollgate::core::MemoryStore;
use tollgate_fake_upstream::FakeUpstream;
use tollgate_proxy::{Config, Gateway};

const DEMO: &str = include_str!("demo.toml");

struct Args {
    config: Option<PathBuf>,
    listen: Option<SocketAddr>,
    fake: SocketAddr,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        config: None,
        listen: None,
        fake: SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--config" => a.config = Some(value()?.into()),
            "--listen" => a.listen = Some(value()?.parse().map_err(|e| format!("--listen: {e}"))?),
            "--fake-upstream" => {
                a.fake = value()?
                    .parse()
                    .map_err(|e| format!("--fake-upstream: {e}"))?
            }
            "-h" | "--help" => {
                return Err(
                    "usage: proxy [--config PATH] [--listen ADDR] [--fake-upstream ADDR]".into(),
                );
            }
            other => return Err(format!("unknown argument {other:?}; see --help")),
        }
    }
    Ok(a)
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,tower_http=warn".into()),
        )
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = args()?;
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::parse(DEMO).map_err(|e| format!("bundled demo.toml: {e}"))?,
    };
    let listen = args.listen.unwrap_or(config.raw.server.listen);
    let uses_fake = config
        .channels
        .iter()
        .any(|c| c.config.base_url.starts_with("fake://"));
    let mut gateway = Gateway::new(config, MemoryStore::new());
    let _fake = if uses_fake {
        let fake = FakeUpstream::start_on(args.fake).await?;
        println!("fake upstream on {}", fake.base_url());
        gateway = gateway.fake_upstream(fake.base_url());
        Some(fake)
    } else {
        None
    };
    let app = gateway.router()?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let url = format!("http://{}", listener.local_addr()?);
    println!("tollgate listening on {url}");
    if args.config.is_none() {
        println!("demo keys: sk-demo-free, sk-demo-pro, sk-demo-plan, sk-demo-payg (see README)");
        println!(
            "try: curl -s {url}/v1/chat/completions -H 'Authorization: Bearer sk-demo-free' \
             -d '{{\"model\":\"gpt-4o-mini\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'"
        );
    }
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
