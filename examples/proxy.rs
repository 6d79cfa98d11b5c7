//! The ready gateway.
//!
//! ```sh
//! cargo run -p tollgate-examples --example proxy                      # demo: bundled config + fake upstream
//! cargo run -p tollgate-examples --example proxy -- --config my.toml  # your configuration
//! ```
//!
//! Flags: `--config PATH` (default: the bundled `examples/demo.toml`), `--listen
//! ADDR` (overrides `[server] listen`), `--store URL` (overrides `[store] url`:
//! `memory` or `redis://host:port`), `--bare` (no slots, windows or billing: the
//! baseline forwarder the benchmarks compare against), `--fake-upstream ADDR` (where the bundled fake
//! upstream listens when a channel uses `fake://`; default 127.0.0.1:0).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tollgate::core::store::fallback::LocalFallback;
use tollgate::core::{BillingStore, Clock, MemoryStore, SystemClock};
use tollgate_fake_upstream::FakeUpstream;
use tollgate_proxy::config::FailureModeConfig;
use tollgate_proxy::store::Split;
use tollgate_proxy::{Config, Gateway};
use tollgate_redis::{CooldownSync, RedisStore, RedisStoreOptions};

const DEMO: &str = include_str!("demo.toml");

// A gateway allocates a little per request on many threads; mimalloc's thread-local
// free lists cost far less there than the system allocator (measured with
// `examples/bench_e2e.sh`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Args {
    config: Option<PathBuf>,
    listen: Option<SocketAddr>,
    store: Option<String>,
    fake: SocketAddr,
    bare: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        config: None,
        listen: None,
        store: None,
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
            "--bare" => a.bare = true,
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
    let url = args
        .store
        .clone()
        .unwrap_or_else(|| config.raw.store.url.clone());
    if url == "memory" {
        let store = MemoryStore::with_clock_and_capacity(
            tollgate::core::SystemClock::new(),
            config.raw.store.capacity,
        );
        serve(&args, config, listen, store, "in-memory store", None, None).await
    } else if url.starts_with("redis://") || url.starts_with("rediss://") {
        let opts = RedisStoreOptions::default()
            .prefix(config.raw.store.prefix.clone())
            .deadline(config.raw.store.deadline.0);
        // One node URL is asked whether it belongs to a Cluster; a comma-separated list
        // is a Cluster (D6). When Redis cannot be reached at start the gateway still
        // starts, lazily connected, and each layer applies its failure mode until it is
        // back (D4).
        let limits = match RedisStore::connect(&url, opts.clone()).await {
            Ok(store) => {
                let mode = if store.is_cluster() {
                    "Redis Cluster"
                } else {
                    "single node"
                };
                tracing::info!(url = %url, mode, "connected to the Redis store");
                store
            }
            Err(e) => {
                tracing::warn!(
                    url = %url,
                    error = %e,
                    "Redis unreachable at start: connecting lazily (one URL is taken as a \
                     single node; list a Cluster's nodes comma-separated)"
                );
                RedisStore::connect_lazy(&url, opts)?
            }
        };
        // Provider cooldowns and disabled credentials reach every instance (D1, F6).
        let sync = Arc::new(CooldownSync::start_url(
            &url,
            &config.raw.store.prefix,
            format!("gw-{}-{}", std::process::id(), SystemClock::new().now()),
        )?);
        let hook: tollgate_proxy::app::RegistryHook = Arc::new(move |r| sync.attach(r));
        let sc = &config.raw.store;
        let local_slots = sc.slots_failure == FailureModeConfig::Local;
        let local_windows = sc.windows_failure == FailureModeConfig::Local;
        let billing = limits.clone();
        let limits = LocalFallback::new(limits, sc.instances, local_slots, local_windows);
        // D4 `local` decisions are counted in the store; /metrics reports them with the
        // layers' fail-open / fail-closed counts.
        let counted = limits.clone();
        let scrape: tollgate_proxy::app::ScrapeHook = Arc::new(move || {
            metrics::counter!("tollgate_store_failures_total", "layer" => "store", "mode" => "local")
                .absolute(counted.local_decisions());
        });
        let store = Split { limits, billing };
        serve(
            &args,
            config,
            listen,
            store,
            "Redis store",
            Some(hook),
            Some(scrape),
        )
        .await
    } else {
        Err(format!("unknown store {url:?}: use `memory` or a redis:// URL").into())
    }
}

async fn serve<St>(
    args: &Args,
    config: Config,
    listen: SocketAddr,
    store: St,
    what: &str,
    hook: Option<tollgate_proxy::app::RegistryHook>,
    scrape: Option<tollgate_proxy::app::ScrapeHook>,
) -> Result<(), Box<dyn std::error::Error>>
where
    St: tollgate::core::JointStore
        + tollgate::core::ChannelStore
        + BillingStore
        + tollgate::core::CapacityStore,
{
    let uses_fake = config
        .channels
        .iter()
        .any(|c| c.config.base_url.starts_with("fake://"));
    let mut gateway = Gateway::new(config, store).limits(!args.bare);
    if let Some(hook) = hook {
        gateway = gateway.on_registry(hook);
    }
    if let Some(scrape) = scrape {
        gateway = gateway.on_scrape(scrape);
    }
    let _fake = if uses_fake {
        let fake = FakeUpstream::start_on(args.fake).await?;
        println!("fake upstream on {}", fake.base_url());
        gateway = gateway.fake_upstream(fake.base_url());
        Some(fake)
    } else {
        None
    };
    let serving = tollgate_proxy::serve::ServeOptions::from(&gateway.config().raw.server);
    let app = gateway.build().await?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let url = format!("http://{}", listener.local_addr()?);
    println!("tollgate listening on {url} ({what})");
    if args.config.is_none() {
        println!("demo keys: sk-demo-free, sk-demo-pro, sk-demo-plan, sk-demo-payg (see README)");
        println!(
            "try: curl -s {url}/v1/chat/completions -H 'Authorization: Bearer sk-demo-free' \
             -d '{{\"model\":\"gpt-4o-mini\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'"
        );
    }
    tollgate_proxy::serve::serve_with(listener, app, serving, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await;
    Ok(())
}
