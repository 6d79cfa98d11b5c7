//! `portcullis`: the gateway as a program.
//!
//! ```sh
//! cargo install --path crates/portcullis-cli
//! portcullis check --config portcullis.toml        # or: portcullis check portcullis.toml
//! portcullis serve --config portcullis.toml [--listen ADDR] [--store URL]
//!
//! export PORTCULLIS_URL=http://127.0.0.1:8080
//! export PORTCULLIS_ADMIN_TOKEN="$(cat /run/secrets/portcullis-admin)"   # not typed in
//! portcullis tenants create acme --balance 1000000
//! portcullis keys create --label ci --tenant acme --rpm 60   # the secret, this once
//! portcullis keys list --tenant acme --all-pages
//! portcullis keys update key_… --policy standard --clear rpm
//! portcullis keys rotate key_… --grace-seconds 3600
//! portcullis keys revoke key_…
//! portcullis keys create --config portcullis.toml --label first   # no gateway running
//! ```
//!
//! - `check` loads and checks the file as `serve` does at start (no store connection,
//!   no listener): `ok: …` and exit 0, or `file:line: reason` and exit 1.
//! - `serve` runs the gateway; the bundled fake upstream starts only when a channel
//!   uses `fake://`.
//! - `SIGHUP` re-reads the file exactly as `POST /admin/reload` does: a bad file is
//!   refused (logged with its `file:line: reason`) and the running configuration
//!   stays.
//! - `SIGTERM` / `SIGINT` shut down gracefully: the listener closes, requests in flight
//!   (streams included) finish for up to `[server] drain_timeout`, then the process
//!   exits 0.
//! - `keys list|show|create|update|rotate|revoke` and `tenants
//!   list|create|update|top-up|token` call a running gateway's admin API (`--gateway URL`,
//!   default `$PORTCULLIS_URL`, else `http://127.0.0.1:8080`) with the bearer token read
//!   from the environment variable `--token-env` names (default `PORTCULLIS_ADMIN_TOKEN`;
//!   never from the command line, where `ps` and the shell's history would show it). A
//!   tenant's management token works for the `keys` commands. The answer is printed as
//!   JSON (`--json`: one line); a secret (create, rotate, token) is in it this once, and
//!   a note on stderr says so. A refusal prints the gateway's message and the field it
//!   names, and exits 1, as does a gateway that cannot be reached (the message names the
//!   URL) or does not answer within `--timeout` (30 s). See `manage.rs` and
//!   `admin_client.rs`.
//! - `keys create --config FILE [--database URL]` writes the key straight into the
//!   records database the file names, with no gateway running: the first key of a fresh
//!   install.
//!
//! Usage errors exit 2. Logs go to stderr (`RUST_LOG` filters them); the listening
//! address goes to stdout.
//!
//! With the `otel` feature (on by default), the request and attempt spans are exported
//! over OTLP/gRPC when `[telemetry] otlp_endpoint` (or `OTEL_EXPORTER_OTLP_ENDPOINT`)
//! names a collector; the spans still queued are sent before the process exits.

#![deny(unreachable_pub)]

mod admin_client;
mod books;
mod manage;

use clap::{Args, Parser, Subcommand};
use portcullis_fake_upstream::FakeUpstream;
use portcullis_proxy::Config;
use portcullis_proxy::admin::Reloader;
use portcullis_proxy::serve::{ServeOptions, serve_graceful};
use portcullis_proxy::store::{BuildOptions, open};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tokio::signal::unix::{SignalKind, signal};

// A gateway allocates a little per request on many threads; mimalloc's thread-local
// free lists cost far less there than the system allocator (measured with
// `examples/bench_e2e.sh` on the proxy example).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An LLM / model-API gateway: per-key limits, channel capacity, failover and billing.
#[derive(Parser, Debug)]
#[command(name = "portcullis", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// Runs the gateway.
    Serve(ServeArgs),
    /// Loads and checks a configuration file without starting anything.
    Check(CheckArgs),
    /// Manages the client keys of a running gateway's records database (admin API).
    Keys(manage::KeysArgs),
    /// Manages the tenants of a running gateway's records database (admin API).
    Tenants(manage::TenantsArgs),
    /// Checks the books: opening balance + top-ups = balance + settled + pending, per
    /// tenant, of a running gateway or of its database and Redis store.
    Books(books::BooksArgs),
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// The configuration file (TOML).
    #[arg(long, value_name = "PATH")]
    config: PathBuf,
    /// Listen address, overriding `[server] listen`.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Store, overriding `[store] url`: `memory` or a redis:// URL (a comma-separated
    /// list for a Cluster).
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// The records database (client keys, tenants, management tokens), overriding
    /// `[database] url`: `sqlite://PATH` or `postgres://…`.
    #[arg(long, value_name = "URL")]
    database: Option<String>,
    /// Where the bundled fake upstream listens when a channel uses `fake://`.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    fake_upstream: SocketAddr,
    /// No slots, windows or billing: the bare forwarder the benchmarks compare against.
    #[arg(long)]
    bare: bool,
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("file").required(true).args(["config", "path"]))]
struct CheckArgs {
    /// The configuration file (TOML).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// The configuration file, given without `--config`.
    #[arg(value_name = "PATH")]
    path: Option<PathBuf>,
}

fn main() -> ExitCode {
    // Usage errors exit 2, `--help` and `--version` 0 (clap's convention).
    let cli = Cli::parse();
    match cli.command {
        Command::Check(args) => {
            let path = args.config.or(args.path).expect("clap requires one");
            check(&path)
        }
        Command::Keys(args) => manage::keys(args),
        Command::Tenants(args) => manage::tenants(args),
        Command::Books(args) => books::books(args),
        Command::Serve(args) => {
            use tracing_subscriber::Layer;
            use tracing_subscriber::layer::SubscriberExt;
            use tracing_subscriber::util::SubscriberInitExt;
            let filter = || {
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "info,tower_http=warn,redis=error".into())
            };
            // The file is read under a logger of its own (its warnings are logged):
            // its `[telemetry]` table decides the process's subscriber.
            let reading = tracing_subscriber::fmt()
                .with_writer(std::io::stderr)
                .with_env_filter(filter())
                .finish();
            let config =
                match tracing::subscriber::with_default(reading, || Config::load(&args.config)) {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::FAILURE;
                    }
                };
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            match worker_threads() {
                Ok(Some(n)) => {
                    builder.worker_threads(n);
                }
                Ok(None) => {}
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            }
            let runtime = match builder.enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: starting the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let logs = tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(filter());
            let subscriber = tracing_subscriber::registry().with(logs);
            #[cfg(feature = "otel")]
            let (subscriber, exporter) = {
                // The exporter's gRPC channel runs on the runtime.
                let _in_runtime = runtime.enter();
                match portcullis_proxy::telemetry::Exporter::start(config.telemetry()) {
                    Ok(e) => (subscriber.with(e.as_ref().map(|e| e.layer())), e),
                    Err(e) => {
                        eprintln!("error: {}: {e}", args.config.display());
                        return ExitCode::FAILURE;
                    }
                }
            };
            subscriber.init();
            #[cfg(feature = "otel")]
            if let Some(e) = &exporter {
                tracing::info!(endpoint = e.endpoint(), "exporting traces over OTLP/gRPC");
            }
            let served = runtime.block_on(serve(args, config));
            #[cfg(feature = "otel")]
            if let Some(e) = exporter {
                // The spans of the last requests (those drained at shutdown) go out
                // before the exit; the runtime still carries the connection.
                if let Err(e) = e.shutdown(TRACE_FLUSH_TIMEOUT) {
                    tracing::warn!(error = %e, "spans lost at shutdown");
                }
            }
            match served {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// The worker threads `TOKIO_WORKER_THREADS` asks for (default: one per core). Read here
/// rather than by tokio, which panics on a value it cannot use.
fn worker_threads() -> Result<Option<usize>, String> {
    const VAR: &str = "TOKIO_WORKER_THREADS";
    let Some(v) = std::env::var_os(VAR) else {
        return Ok(None);
    };
    match v.to_str().and_then(|s| s.trim().parse::<usize>().ok()) {
        Some(n) if n > 0 => Ok(Some(n)),
        _ => Err(format!(
            "{VAR}={v:?}: must be a whole number of worker threads, at least 1"
        )),
    }
}

/// `portcullis check`: the checks `serve` runs at start, short of connecting to the store
/// or binding the listener.
fn check(path: &Path) -> ExitCode {
    let config = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = portcullis_proxy::store::check_url(config.store()) {
        eprintln!("{}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    // The channels as the gateway routes them (`serve` starts a fake upstream for
    // `fake://`, so any address stands for it here).
    if let Err(e) = portcullis_proxy::catalog::Catalog::new(&config, Some("http://127.0.0.1:0")) {
        eprintln!("{}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    println!(
        "ok: {} keys, {} channels, {} models, {} policies, {} tenants ({}; store {}, listen {})",
        config.keys.len(),
        config.channels.len(),
        config.models().len(),
        config.policies().len(),
        config.tenants().len(),
        path.display(),
        config.store().url,
        config.server().listen,
    );
    ExitCode::SUCCESS
}

/// The longest wait at exit for the collector to take the last spans.
#[cfg(feature = "otel")]
const TRACE_FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

async fn serve(args: ServeArgs, mut config: Config) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(url) = args.store {
        config.set_store_url(url);
    }
    if let Some(url) = args.database {
        config.set_database_url(url);
    }
    let listen = args.listen.unwrap_or(config.server().listen);
    let serving = ServeOptions::from(config.server());
    let drain = config.server().drain_timeout;
    let store = open(config.store()).await?;
    let what = store.describe();
    let settle_grace = store.settle_grace();
    let mut options = BuildOptions {
        limits: !args.bare,
        fake_upstream: None,
        directory: portcullis_proxy::keys::Directory::open(&config).await?,
    };
    let _fake = if config.uses_fake_upstream() {
        let fake = FakeUpstream::start_on(args.fake_upstream).await?;
        tracing::info!(url = %fake.base_url(), "fake upstream started for the fake:// channels");
        options.fake_upstream = Some(fake.base_url());
        Some(fake)
    } else {
        None
    };
    let app = store.build(config, options).await?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("listening on {listen}: {e}"))?;
    let addr = listener.local_addr()?;

    // The handlers are in place before the address is announced: a signal sent once
    // the gateway is reachable is never the default action (which would kill it).
    let mut hangup = signal(SignalKind::hangup())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let reloader = Reloader::new(app.clone());
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP: re-reading the configuration");
            // `Reloader` logs the outcome as `POST /admin/reload` does (a refused file
            // with its `file:line: reason`).
            let _ = reloader.reload().await;
        }
    });
    let shutdown = async move {
        let which = tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        tracing::info!(signal = which, "shutting down gracefully");
    };

    println!("portcullis listening on http://{addr} ({what})");
    let drained = serve_graceful(listener, app, serving, shutdown, drain).await;
    if drained.still_open > 0 {
        tracing::warn!(
            still_open = drained.still_open,
            drain_timeout = ?drain,
            "drain timeout passed: closing the connections still open"
        );
    } else {
        tracing::info!(
            drained = drained.open_at_shutdown,
            "every connection finished"
        );
    }
    if !settle_grace.is_zero() {
        // Releases and settlements a remote store answers later run on tasks; each
        // ends within the store deadline.
        tokio::time::sleep(settle_grace).await;
    }
    Ok(())
}
