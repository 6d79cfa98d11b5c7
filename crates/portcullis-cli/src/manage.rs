//! `portcullis keys …` and `portcullis tenants …`: the records admin API of a running
//! gateway from the shell (the routes of `portcullis-proxy`'s `routes/keys.rs`), through
//! [`crate::admin_client`]; and `portcullis keys create --config FILE`, which writes a
//! key straight into the records database the file names — the first key of a fresh
//! install, before any gateway runs.
//!
//! Every command prints the gateway's JSON answer on stdout (pretty, or one line with
//! `--json`). A secret (`keys create`, `keys rotate`, `tenants token`) is in that answer
//! this once; a note on stderr says so. An error goes to stderr (the gateway's message
//! and the field it names) and exits 1; a usage error exits 2.

use crate::admin_client::{AdminClient, Failure, encode};
use clap::{Args, Subcommand, ValueEnum};
use http::Method;
use portcullis_proxy::Config;
use portcullis_proxy::keys::body::{KeyBody, rfc3339};
use portcullis_records::KeyRecord;
use serde_json::{Map, Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Where the gateway is when neither `--gateway` nor [`GATEWAY_ENV`] says.
const DEFAULT_GATEWAY: &str = "http://127.0.0.1:8080";
/// The environment variable naming the gateway.
const GATEWAY_ENV: &str = "PORTCULLIS_URL";
/// The environment variable the token is read from unless `--token-env` names another.
const TOKEN_ENV: &str = "PORTCULLIS_ADMIN_TOKEN";
/// The audit trail's name for a key written by `keys create --config`.
const DIRECT_ACTOR: &str = "cli";

/// The flags every `keys` and `tenants` command takes.
#[derive(Args, Debug)]
pub(crate) struct Remote {
    /// The gateway's base URL: http://HOST:PORT or https://… [default: $PORTCULLIS_URL,
    /// else http://127.0.0.1:8080].
    #[arg(long, value_name = "URL", global = true, help_heading = "Gateway")]
    pub(crate) gateway: Option<String>,
    /// The environment variable holding the bearer token: the admin token or, for the
    /// `keys` commands, a tenant's management token (`portcullis tenants token`)
    /// [default: PORTCULLIS_ADMIN_TOKEN]. There is deliberately no flag for the token
    /// itself: on the command line it would show in `ps` and in the shell's history.
    #[arg(long, value_name = "VAR", global = true, help_heading = "Gateway")]
    pub(crate) token_env: Option<String>,
    /// The longest wait for the gateway's answer to one call, connection included.
    #[arg(long, value_name = "SECONDS", global = true, help_heading = "Gateway",
          default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) timeout: u64,
    /// Compact one-line JSON on stdout, for scripts (default: pretty-printed).
    #[arg(long, global = true, help_heading = "Gateway")]
    pub(crate) json: bool,
}

/// `portcullis keys`.
#[derive(Args, Debug)]
pub(crate) struct KeysArgs {
    #[command(flatten)]
    remote: Remote,
    #[command(subcommand)]
    command: KeysCommand,
}

#[derive(Subcommand, Debug)]
enum KeysCommand {
    /// Lists the keys of the records database (with the configuration file's keys,
    /// read-only, on the first page of an admin's list).
    List(ListArgs),
    /// Shows one key.
    Show {
        /// The key's id (`key_…`).
        id: String,
    },
    /// Creates a key: its secret is printed this once.
    Create(CreateArgs),
    /// Changes a key (PATCH): the flags given replace, `--clear` removes.
    Update(UpdateArgs),
    /// Gives a key a new secret (printed this once); the old one works `--grace-seconds`
    /// more.
    Rotate {
        /// The key's id.
        id: String,
        /// How long the old secret keeps working (at most 30 days).
        #[arg(long, value_name = "N", default_value_t = 0)]
        grace_seconds: u64,
    },
    /// Revokes a key: refused (401) from now on.
    Revoke {
        /// The key's id.
        id: String,
    },
}

#[derive(Args, Debug)]
struct ListArgs {
    /// Only this tenant's keys (a tenant's token sees its own tenant's only anyway).
    #[arg(long, value_name = "NAME")]
    tenant: Option<String>,
    /// Follows `next_cursor` to the end and prints every key in one answer.
    #[arg(long)]
    all_pages: bool,
    /// Starts after this key id (the `next_cursor` of a previous page).
    #[arg(long, value_name = "ID")]
    cursor: Option<String>,
    /// Keys per page (the gateway's default is 100).
    #[arg(long, value_name = "N")]
    limit: Option<u32>,
}

/// A key's settings as flags (`keys create`, `keys update`).
#[derive(Args, Debug)]
struct KeyFields {
    /// Its tenant (of the configuration file or of the database).
    #[arg(long, value_name = "NAME")]
    tenant: Option<String>,
    /// A named policy of the configuration (instead of `--rpm` / `--concurrency`).
    #[arg(long, value_name = "NAME")]
    policy: Option<String>,
    /// Its own limit: requests started in any 60 s.
    #[arg(long, value_name = "N")]
    rpm: Option<u32>,
    /// Its own limit: requests at once.
    #[arg(long, value_name = "N")]
    concurrency: Option<u32>,
    /// Spend cap, in minor units.
    #[arg(long, value_name = "N")]
    spend_cap: Option<i64>,
    /// A model the key may use (repeat it; none: every model).
    #[arg(long = "model", value_name = "MODEL")]
    models: Vec<String>,
    /// A subscription, on this named policy.
    #[arg(long, value_name = "NAME")]
    subscription_policy: Option<String>,
    /// When the subscription ends (RFC 3339; none: never).
    #[arg(long, value_name = "RFC3339", requires = "subscription_policy")]
    subscription_expires: Option<String>,
    /// Requests beyond the subscription's quota fall through to the key's own limits.
    #[arg(long, requires = "subscription_policy")]
    pay_as_you_go: bool,
    /// When the key stops working (RFC 3339).
    #[arg(long, value_name = "RFC3339")]
    expires_at: Option<String>,
    /// The error format: `route` (the route's dialect, the default) or `native`.
    #[arg(long, value_name = "FORMAT")]
    errors: Option<String>,
}

impl KeyFields {
    /// The fields given, as the API's JSON names them.
    fn given(&self) -> Map<String, Value> {
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_owned(), v);
        };
        if let Some(v) = &self.tenant {
            put("tenant", json!(v));
        }
        if let Some(v) = &self.policy {
            put("policy", json!(v));
        }
        if let Some(v) = self.rpm {
            put("rpm", json!(v));
        }
        if let Some(v) = self.concurrency {
            put("concurrency", json!(v));
        }
        if let Some(v) = self.spend_cap {
            put("spend_cap", json!(v));
        }
        if !self.models.is_empty() {
            put("models", json!(self.models));
        }
        if let Some(p) = &self.subscription_policy {
            put(
                "subscription",
                json!({
                    "policy": p,
                    "expires_at": self.subscription_expires,
                    "pay_as_you_go": self.pay_as_you_go,
                }),
            );
        }
        if let Some(v) = &self.expires_at {
            put("expires_at", json!(v));
        }
        if let Some(v) = &self.errors {
            put("errors", json!(v));
        }
        m
    }
}

#[derive(Args, Debug)]
struct CreateArgs {
    /// A name for people.
    #[arg(long, value_name = "TEXT")]
    label: String,
    #[command(flatten)]
    fields: KeyFields,
    /// Instead of a gateway: writes the key straight into the records database this
    /// configuration file names (the first key of a fresh install, before any gateway
    /// runs). The file is loaded as `serve` loads it (so in the environment `serve`
    /// runs in: its `*_env` variables set), and the key checked as the gateway checks
    /// it.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["gateway", "token_env"])]
    config: Option<PathBuf>,
    /// With `--config`: the records database, overriding `[database] url`, as
    /// `portcullis serve --database` does.
    #[arg(long, value_name = "URL", requires = "config")]
    database: Option<String>,
}

impl CreateArgs {
    fn body(&self) -> Map<String, Value> {
        let mut m = self.fields.given();
        m.insert("label".into(), json!(self.label));
        m
    }
}

#[derive(Args, Debug)]
struct UpdateArgs {
    /// The key's id.
    id: String,
    /// A new label.
    #[arg(long, value_name = "TEXT")]
    label: Option<String>,
    #[command(flatten)]
    fields: KeyFields,
    /// Removes a setting (sends `null`; `models`: every model again). Repeat it, or
    /// give several comma-separated.
    #[arg(long, value_name = "FIELD", value_enum, value_delimiter = ',')]
    clear: Vec<Clearable>,
}

/// A key setting `keys update --clear` removes.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Clearable {
    Tenant,
    Policy,
    Rpm,
    Concurrency,
    #[value(name = "spend_cap", alias = "spend-cap")]
    SpendCap,
    Models,
    Subscription,
    #[value(name = "expires_at", alias = "expires-at")]
    ExpiresAt,
    Errors,
}

impl Clearable {
    /// The field's name in the API, and what clears it.
    fn cleared(self) -> (&'static str, Value) {
        match self {
            Self::Tenant => ("tenant", Value::Null),
            Self::Policy => ("policy", Value::Null),
            Self::Rpm => ("rpm", Value::Null),
            Self::Concurrency => ("concurrency", Value::Null),
            Self::SpendCap => ("spend_cap", Value::Null),
            // A list, never null: no models listed is every model.
            Self::Models => ("models", json!([])),
            Self::Subscription => ("subscription", Value::Null),
            Self::ExpiresAt => ("expires_at", Value::Null),
            Self::Errors => ("errors", Value::Null),
        }
    }
}

impl UpdateArgs {
    /// The patch, or the usage error (a field both set and cleared, nothing to change).
    fn patch(&self) -> Result<Map<String, Value>, String> {
        let mut m = self.fields.given();
        if let Some(l) = &self.label {
            m.insert("label".into(), json!(l));
        }
        for c in &self.clear {
            let (field, value) = c.cleared();
            if m.contains_key(field) && m[field] != value {
                return Err(format!("`{field}` is both set and cleared"));
            }
            m.insert(field.into(), value);
        }
        if m.is_empty() {
            return Err("nothing to change: give a setting to replace or a --clear".into());
        }
        Ok(m)
    }
}

/// `portcullis tenants`.
#[derive(Args, Debug)]
pub(crate) struct TenantsArgs {
    #[command(flatten)]
    remote: Remote,
    #[command(subcommand)]
    command: TenantsCommand,
}

#[derive(Subcommand, Debug)]
enum TenantsCommand {
    /// Lists the tenants (the database's and the configuration file's) with their
    /// balances.
    List,
    /// Creates a tenant in the records database.
    Create {
        /// Its name.
        name: String,
        /// Its opening balance, in minor units.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        balance: Option<i64>,
        /// Its share of a contended channel.
        #[arg(long, value_name = "N")]
        weight: Option<u32>,
    },
    /// Changes a database tenant.
    Update {
        /// Its name.
        name: String,
        /// Its share of a contended channel.
        #[arg(long, value_name = "N", required = true)]
        weight: Option<u32>,
    },
    /// Credits a tenant's running balance.
    TopUp {
        /// Its name.
        name: String,
        /// The credit, in minor units.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        amount: i64,
    },
    /// Makes a management token for the tenant's keys: printed this once; it may use
    /// the `keys` commands for that tenant's keys only.
    Token {
        /// The tenant's name.
        name: String,
    },
}

/// What a command prints: the answer, and the field holding a secret shown this once.
struct Shown {
    answer: Value,
    secret: Option<&'static str>,
}

impl Shown {
    fn plain(answer: Value) -> Self {
        Self {
            answer,
            secret: None,
        }
    }

    fn secret(answer: Value, field: &'static str) -> Self {
        Self {
            answer,
            secret: Some(field),
        }
    }
}

/// `portcullis keys …`.
pub(crate) fn keys(args: KeysArgs) -> ExitCode {
    let KeysArgs { remote, command } = args;
    if let KeysCommand::Create(c) = &command {
        if let Some(path) = &c.config {
            return print(create_in_database(path, c), remote.json);
        }
    }
    if let KeysCommand::Update(u) = &command {
        if let Err(e) = u.patch() {
            usage_error(&e);
        }
    }
    let Some((runtime, client)) = connect(&remote) else {
        return ExitCode::FAILURE;
    };
    print(
        runtime
            .block_on(keys_remote(&client, command))
            .map_err(|e| e.to_string()),
        remote.json,
    )
}

/// `portcullis tenants …`.
pub(crate) fn tenants(args: TenantsArgs) -> ExitCode {
    let TenantsArgs { remote, command } = args;
    let Some((runtime, client)) = connect(&remote) else {
        return ExitCode::FAILURE;
    };
    print(
        runtime
            .block_on(tenants_remote(&client, command))
            .map_err(|e| e.to_string()),
        remote.json,
    )
}

async fn keys_remote(c: &AdminClient, command: KeysCommand) -> Result<Shown, Failure> {
    let key = |id: &str| format!("/admin/keys/{}", encode(id));
    Ok(match command {
        KeysCommand::List(l) => Shown::plain(list(c, l).await?),
        KeysCommand::Show { id } => Shown::plain(c.call(Method::GET, &key(&id), None).await?),
        KeysCommand::Create(a) => {
            let body = Value::Object(a.body());
            Shown::secret(
                c.call(Method::POST, "/admin/keys", Some(&body)).await?,
                "key",
            )
        }
        KeysCommand::Update(u) => {
            let patch = Value::Object(u.patch().map_err(Failure::Transport)?);
            Shown::plain(c.call(Method::PATCH, &key(&u.id), Some(&patch)).await?)
        }
        KeysCommand::Rotate { id, grace_seconds } => {
            let body = json!({ "grace_seconds": grace_seconds });
            let path = format!("{}/rotate", key(&id));
            Shown::secret(c.call(Method::POST, &path, Some(&body)).await?, "key")
        }
        KeysCommand::Revoke { id } => Shown::plain(c.call(Method::DELETE, &key(&id), None).await?),
    })
}

/// `GET /admin/keys`: one page, or with `--all-pages` every page in one answer.
async fn list(c: &AdminClient, l: ListArgs) -> Result<Value, Failure> {
    let mut cursor = l.cursor;
    let mut first: Option<Value> = None;
    let mut keys = Vec::new();
    loop {
        let mut query = Vec::new();
        if let Some(t) = &l.tenant {
            query.push(format!("tenant={}", encode(t)));
        }
        if let Some(k) = &cursor {
            query.push(format!("cursor={}", encode(k)));
        }
        if let Some(n) = l.limit {
            query.push(format!("limit={n}"));
        }
        let path = if query.is_empty() {
            "/admin/keys".to_owned()
        } else {
            format!("/admin/keys?{}", query.join("&"))
        };
        let page = c.call(Method::GET, &path, None).await?;
        if !l.all_pages {
            return Ok(page);
        }
        keys.extend(page["keys"].as_array().cloned().unwrap_or_default());
        let next = page["next_cursor"].as_str().map(str::to_owned);
        first.get_or_insert(page);
        match next {
            // A cursor that does not move on would never end.
            Some(n) if cursor.as_deref() != Some(n.as_str()) => cursor = Some(n),
            _ => break,
        }
    }
    let mut all = first.unwrap_or_else(|| json!({}));
    all["keys"] = Value::Array(keys);
    all["next_cursor"] = Value::Null;
    Ok(all)
}

async fn tenants_remote(c: &AdminClient, command: TenantsCommand) -> Result<Shown, Failure> {
    let tenant = |name: &str| format!("/admin/tenants/{}", encode(name));
    Ok(match command {
        TenantsCommand::List => Shown::plain(c.call(Method::GET, "/admin/tenants", None).await?),
        TenantsCommand::Create {
            name,
            balance,
            weight,
        } => {
            let mut body = json!({ "name": name });
            if let Some(b) = balance {
                body["balance"] = json!(b);
            }
            if let Some(w) = weight {
                body["weight"] = json!(w);
            }
            Shown::plain(c.call(Method::POST, "/admin/tenants", Some(&body)).await?)
        }
        TenantsCommand::Update { name, weight } => {
            let body = json!({ "weight": weight });
            Shown::plain(c.call(Method::PATCH, &tenant(&name), Some(&body)).await?)
        }
        TenantsCommand::TopUp { name, amount } => {
            let body = json!({ "amount": amount });
            let path = format!("{}/top-up", tenant(&name));
            Shown::plain(c.call(Method::POST, &path, Some(&body)).await?)
        }
        TenantsCommand::Token { name } => {
            let path = format!("{}/tokens", tenant(&name));
            Shown::secret(c.call(Method::POST, &path, None).await?, "token")
        }
    })
}

/// The runtime and the client of the gateway `remote` names, with its token; `None`
/// once the reason is on stderr.
pub(crate) fn connect(remote: &Remote) -> Option<(tokio::runtime::Runtime, AdminClient)> {
    let gateway = remote
        .gateway
        .clone()
        .or_else(|| {
            std::env::var(GATEWAY_ENV)
                .ok()
                .filter(|v| !v.trim().is_empty())
        })
        .unwrap_or_else(|| DEFAULT_GATEWAY.to_owned());
    let var = remote.token_env.as_deref().unwrap_or(TOKEN_ENV);
    let token = match std::env::var(var) {
        Ok(t) if !t.trim().is_empty() => t.trim().to_owned(),
        Ok(_) => {
            eprintln!("error: no token: ${var} is empty");
            return None;
        }
        Err(std::env::VarError::NotPresent) => {
            eprintln!(
                "error: no token: set ${var} to the gateway's admin token (or a tenant's \
                 management token), or name another variable with --token-env VAR"
            );
            return None;
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            eprintln!("error: ${var} is not valid UTF-8");
            return None;
        }
    };
    let client = match AdminClient::new(
        &gateway,
        &token,
        &format!("${var}"),
        std::time::Duration::from_secs(remote.timeout),
    ) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return None;
        }
    };
    match runtime() {
        Ok(rt) => Some((rt, client)),
        Err(e) => {
            eprintln!("error: {e}");
            None
        }
    }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))
}

/// A usage error: clap's format, exit 2.
fn usage_error(message: &str) -> ! {
    clap::Error::raw(
        clap::error::ErrorKind::ArgumentConflict,
        format!("{message}\n"),
    )
    .exit()
}

/// Prints the answer (or the error) and says what the process exits with.
fn print(result: Result<Shown, String>, compact: bool) -> ExitCode {
    let shown = match result {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let text = if compact {
        serde_json::to_string(&shown.answer)
    } else {
        serde_json::to_string_pretty(&shown.answer)
    }
    .unwrap_or_default();
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{text}").and_then(|()| out.flush()) {
        eprintln!("error: writing the answer to stdout: {e}");
        if shown.secret.is_some() {
            eprintln!("error: the secret it held is lost: rotate the key (or make a new token)");
        }
        return ExitCode::FAILURE;
    }
    if let Some(field) = shown.secret {
        eprintln!(
            "note: the secret (`{field}` above) is shown this once: only its hash is \
             stored. Keep it now; it will not be shown again."
        );
    }
    ExitCode::SUCCESS
}

/// `portcullis keys create --config FILE`: the key written straight into the records
/// database the file (or `--database`) names, checked as the gateway checks it; the
/// answer is the one `POST /admin/keys` gives.
fn create_in_database(path: &Path, args: &CreateArgs) -> Result<Shown, String> {
    // The file's warnings are logged as `serve` logs them.
    let _logs = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn".into()),
            )
            .finish(),
    );
    let mut config = Config::load(path).map_err(|e| e.to_string())?;
    if let Some(url) = &args.database {
        config.set_database_url(url.clone());
    }
    let body: KeyBody = serde_json::from_value(Value::Object(args.body()))
        .map_err(|e| format!("the key's fields: {e}"))?;
    runtime()?.block_on(async {
        let records = portcullis_proxy::keys::open_records(&config)
            .await?
            .ok_or_else(|| {
                format!(
                    "{}: no records database to write to (`[database] url` or --database \
                     is \"none\"): name one with `[database] url` or --database URL",
                    path.display()
                )
            })?;
        let created = async {
            let where_ = records.url();
            let tenants: Vec<String> = records
                .tenants()
                .await
                .map_err(|e| format!("records database {where_}: {e}"))?
                .into_iter()
                .map(|t| t.name)
                .collect();
            let key = body
                .into_key(&config, &tenants)
                .map_err(|i| format!("{}: {} (field `{}`)", i.field, i.reason, i.field))?;
            let (k, secret) = records
                .create_key(DIRECT_ACTOR, key, now_ms())
                .await
                .map_err(|e| match e {
                    portcullis_records::RecordsError::Invalid(i) => {
                        format!("{}: {} (field `{}`)", i.field, i.reason, i.field)
                    }
                    e => format!("records database {where_}: {e}"),
                })?;
            let mut v = shown(&k);
            v["key"] = json!(secret.expose());
            Ok::<_, String>(Shown::secret(v, "key"))
        }
        .await;
        records.close().await;
        created
    })
}

/// A key as `POST /admin/keys` shows it (without its secret).
fn shown(k: &KeyRecord) -> Value {
    let mut v = serde_json::to_value(KeyBody::of(k)).unwrap_or_default();
    v["id"] = json!(k.id);
    v["state"] = json!(k.state);
    v["created_at"] = json!(rfc3339(k.created_at));
    v["updated_at"] = json!(rfc3339(k.updated_at));
    v["revision"] = json!(k.revision);
    v
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Keys {
        #[command(flatten)]
        args: KeysArgs,
    }

    fn update(args: &[&str]) -> UpdateArgs {
        let all = [&["keys", "update", "key_1"][..], args].concat();
        match Keys::try_parse_from(all).unwrap().args.command {
            KeysCommand::Update(u) => u,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn k10_update_flags_make_the_patch_and_clear_sends_null() {
        let p = update(&[
            "--rpm",
            "5",
            "--clear",
            "policy,spend-cap",
            "--clear",
            "models",
        ])
        .patch()
        .unwrap();
        assert_eq!(
            Value::Object(p),
            json!({"rpm": 5, "policy": null, "spend_cap": null, "models": []})
        );
        let p = update(&["--subscription-policy", "gold", "--pay-as-you-go"])
            .patch()
            .unwrap();
        assert_eq!(
            Value::Object(p),
            json!({"subscription": {"policy": "gold", "expires_at": null, "pay_as_you_go": true}})
        );
        assert!(update(&["--rpm", "5", "--clear", "rpm"]).patch().is_err());
        assert!(update(&[]).patch().is_err());
    }

    #[test]
    fn k10_create_flags_make_the_api_body() {
        let parsed = Keys::try_parse_from([
            "keys",
            "create",
            "--label",
            "a",
            "--tenant",
            "acme",
            "--model",
            "m1",
            "--model",
            "m2",
            "--expires-at",
            "2030-01-01T00:00:00Z",
            "--errors",
            "native",
        ])
        .unwrap();
        let KeysCommand::Create(c) = parsed.args.command else {
            panic!()
        };
        let body: KeyBody = serde_json::from_value(Value::Object(c.body())).unwrap();
        assert_eq!(
            body,
            KeyBody {
                label: "a".into(),
                tenant: Some("acme".into()),
                models: vec!["m1".into(), "m2".into()],
                expires_at: Some("2030-01-01T00:00:00Z".into()),
                errors: Some("native".into()),
                ..KeyBody::default()
            }
        );
        // The database path and a gateway are one or the other.
        for bad in [
            &[
                "keys",
                "create",
                "--label",
                "a",
                "--config",
                "f",
                "--gateway",
                "http://x",
            ][..],
            &[
                "keys",
                "create",
                "--label",
                "a",
                "--config",
                "f",
                "--token-env",
                "T",
            ],
            &["keys", "create", "--label", "a", "--database", "sqlite://x"],
            &[
                "keys",
                "create",
                "--label",
                "a",
                "--subscription-expires",
                "2030-01-01T00:00:00Z",
            ],
            &["keys", "create"],
        ] {
            assert!(Keys::try_parse_from(bad).is_err(), "{bad:?}");
        }
        // The common flags go before or after the subcommand.
        for ok in [
            &["keys", "--gateway", "http://x", "list", "--json"][..],
            &["keys", "list", "--gateway", "http://x", "--token-env", "T"],
        ] {
            assert!(Keys::try_parse_from(ok).is_ok(), "{ok:?}");
        }
    }
}
