//! `portcullis books check`: the books check (B6) of a running gateway (`GET
//! /admin/books`), or of a records database and a Redis store read directly — after a
//! crash, with no gateway running. Prints the report (JSON) and exits 0 only when every
//! tenant's books are exact: opening balance + top-ups = balance + settled + pending.

use crate::manage::{Remote, connect, runtime};
use clap::{Args, Subcommand};
use portcullis_proxy::Config;
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;

/// `portcullis books`.
#[derive(Args, Debug)]
pub(crate) struct BooksArgs {
    #[command(subcommand)]
    command: BooksCommand,
}

#[derive(Subcommand, Debug)]
enum BooksCommand {
    /// Checks every tenant's books: exit 0 when exact, 1 when not (the differences and
    /// the pending attempts are in the report) or when they cannot be read.
    Check(CheckArgs),
}

#[derive(Args, Debug)]
struct CheckArgs {
    #[command(flatten)]
    remote: Remote,
    /// Read the records database and the Redis store this configuration names, with no
    /// gateway (instead of asking a running one).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["gateway", "token_env"])]
    config: Option<PathBuf>,
    /// With --config: the store, overriding `[store] url` (a redis:// URL).
    #[arg(long, value_name = "URL", requires = "config")]
    store: Option<String>,
    /// With --config: the records database, overriding `[database] url`.
    #[arg(long, value_name = "URL", requires = "config")]
    database: Option<String>,
}

/// `portcullis books …`.
pub(crate) fn books(args: BooksArgs) -> ExitCode {
    let BooksCommand::Check(a) = args.command;
    let report = match &a.config {
        Some(path) => direct(path, a.store.as_deref(), a.database.as_deref()),
        None => {
            let Some((rt, client)) = connect(&a.remote) else {
                return ExitCode::FAILURE;
            };
            rt.block_on(client.call(http::Method::GET, "/admin/books", None))
                .map_err(|e| e.to_string())
        }
    };
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let text = if a.remote.json {
        serde_json::to_string(&report)
    } else {
        serde_json::to_string_pretty(&report)
    }
    .unwrap_or_default();
    println!("{text}");
    if report["exact"] == Value::Bool(true) {
        ExitCode::SUCCESS
    } else {
        eprintln!("the books are not exact: see each tenant's difference and attempts above");
        ExitCode::FAILURE
    }
}

/// The check of the database and store `path` names, read directly.
fn direct(
    path: &std::path::Path,
    store: Option<&str>,
    database: Option<&str>,
) -> Result<Value, String> {
    let mut config = Config::load(path).map_err(|e| e.to_string())?;
    if let Some(url) = store {
        config.set_store_url(url);
    }
    if let Some(url) = database {
        config.set_database_url(url);
    }
    runtime()?.block_on(async {
        let records = portcullis_proxy::keys::open_records(&config)
            .await?
            .ok_or("the configuration names no records database (`[database] url` is \"none\")")?;
        let opened = portcullis_proxy::store::open(config.store())
            .await
            .map_err(|e| e.to_string())?;
        let report = opened.check_books(&records, &config).await?;
        serde_json::to_value(report).map_err(|e| e.to_string())
    })
}
