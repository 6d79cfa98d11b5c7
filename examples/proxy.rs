//! The ready gateway.
//!
//! ```sh
//! cargo run -p portcullis-examples --example proxy                      # demo: bundled config + fake upstream
//! cargo run -p portcullis-examples --example proxy -- --config my.toml  # your configuration
//! ```
//!
//! Flags: `--config PATH` (default: the bundled `examples/demo.toml`), `--listen
//! ADDR` (overrides `[server] listen`), `--store URL` (overrides `[store] url`:
//! `memory` or `redis://host:port`), `--database URL` (overrides `[database] url`; the
//! demo's default is [`DEMO_DATABASE`], an SQLite file in the current directory, created
//! on first start; `none` for no records database), `--bare` (no slots, windows or billing: the
//! baseline forwarder the benchmarks compare against), `--fake-upstream ADDR` (where the bundled fake
//! upstream listens when a channel uses `fake://`; default 127.0.0.1:0).
#![deny(unreachable_pub)]

use portcullis_fake_upstream::FakeUpstream;
use portcullis_proxy::Config;
use portcullis_proxy::serve::ServeOptions;
use portcullis_proxy::store::{BuildOptions, open};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

const DEMO: &str = include_str!("demo.toml");

/// The demo's records database (keys and tenants managed through `/admin/keys…` and
/// the keys page): the bundled configuration is text, with no file to put it beside.
const DEMO_DATABASE: &str = "sqlite://portcullis-demo-records.db";

// A gateway allocates a little per request on many threads; mimalloc's thread-local
// free lists cost far less there than the system allocator (measured with
// `examples/bench_e2e.sh`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Args {
    config: Option<PathBuf>,
    listen: Option<SocketAddr>,
    store: Option<String>,
    database: Option<String>,
    fake: SocketAddr,
    bare: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        config: None,
        listen: None,
        store: None,
        database: None,
        fake: SocketAddr::from(([127, 0, 0, 1], 0)),
        bare: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--config" => a.config = Some(value()?.into()),
            "--listen" => a.listen = Some(value()?.parse().map_err(|e| format!("--listen: {e}"))?),
            "--store" => a.store = Some(value()?),
            "--database" => a.database = Some(value()?),
            "--bare" => a.bare = true,
            "--fake-upstream" => {
                a.fake = value()?
                    .parse()
                    .map_err(|e| format!("--fake-upstream: {e}"))?
            }
            "-h" | "--help" => {
                return Err(
                    "usage: proxy [--config PATH] [--listen ADDR] [--store URL] [--database URL] \
                     [--bare] [--fake-upstream ADDR]"
                        .into(),
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
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::parse(DEMO).map_err(|e| format!("bundled demo.toml: {e}"))?,
    };
    let listen = args.listen.unwrap_or(config.server().listen);
    if let Some(url) = &args.store {
        config.set_store_url(url.clone());
    }
    match (&args.database, &args.config) {
        (Some(url), _) => config.set_database_url(url.clone()),
        (None, None) => config.set_database_url(DEMO_DATABASE),
        (None, Some(_)) => {}
    }
    let store = open(config.store()).await?;
    let what = store.describe();
    let uses_fake = config.uses_fake_upstream();
    let mut options = BuildOptions {
        limits: !args.bare,
        fake_upstream: None,
        directory: portcullis_proxy::keys::Directory::open(&config).await?,
    };
    let _fake = if uses_fake {
        let fake = FakeUpstream::start_on(args.fake).await?;
        println!("fake upstream on {}", fake.base_url());
        options.fake_upstream = Some(fake.base_url());
        Some(fake)
    } else {
        None
    };
    let serving = ServeOptions::from(config.server());
    let app = store.build(config, options).await?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let url = format!("http://{}", listener.local_addr()?);
    println!("portcullis listening on {url} ({what})");
    if args.config.is_none() {
        println!("demo keys: sk-demo-free, sk-demo-pro, sk-demo-plan, sk-demo-payg (see README)");
        println!(
            "try: curl -s {url}/v1/chat/completions -H 'Authorization: Bearer sk-demo-free' \
             -d '{{\"model\":\"gpt-4o-mini\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'"
        );
    }
    portcullis_proxy::serve::serve_with(listener, app, serving, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await;
    Ok(())
}
