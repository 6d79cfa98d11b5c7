//! The admin routes (`/admin/*`, P4) on the running stack; what each does is told
//! in [`crate::admin`].

use crate::admin::InProcess;
use crate::config::Config;
use crate::running::{Live, Stack};
use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use portcullis::core::failover::HealthState;
use portcullis::core::upstream::{DISABLED, credential_key, model_key, vendor_key};
use portcullis::core::{
    AttemptRef, BillingStore, Books, CapacityStore, Clock, MAX_PENDING_PAGE, Money, PendingAttempt,
    Reconcile, Reconciled, Usage,
};
use serde_json::json;
use std::sync::Arc;

struct Admin<St> {
    /// The admin token of the configuration the gateway started with.
    token: Option<String>,
    /// The running stack, swapped by a reload.
    stack: Arc<Stack<St>>,
}

impl<St> Admin<St> {
    /// The live state of the running stack, to keep across awaits.
    fn live(&self) -> Arc<Live<St>> {
        self.stack.load().live.clone()
    }
    fn authorized(&self, req: &Request) -> bool {
        self.token
            .as_deref()
            .is_some_and(|token| super::bearer_is(req, token))
    }
}

/// The admin routes on `stack`, behind `token` (none: every admin route answers 404).
pub(crate) fn routes<St>(token: Option<String>, stack: Arc<Stack<St>>) -> Router
where
    St: BillingStore + CapacityStore,
{
    let admin = Arc::new(Admin { token, stack });
    Router::new()
        .route("/admin/channels", get(channels::<St>))
        .route("/admin/channels/{name}/enable", post(enable::<St>))
        .route("/admin/rejections", get(rejections::<St>))
        .route("/admin/reload", post(reload::<St>))
        .route("/admin/tenants/{tenant}/balance", put(set_balance::<St>))
        .route("/admin/pending", get(pending::<St>))
        .route("/admin/pending/settle", post(settle::<St>))
        .route("/admin/pending/write-off", post(write_off::<St>))
        .with_state(admin)
}

fn refused(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(json!({"error": {"message": message.into()}})),
    )
        .into_response()
}

/// Unauthorized admin calls look like unknown paths when no token is configured, and
/// get a 401 otherwise.
fn gate<St>(admin: &Admin<St>, req: &Request) -> Option<Response> {
    if admin.token.is_none() {
        return Some(refused(StatusCode::NOT_FOUND, "No such route."));
    }
    (!admin.authorized(req)).then(|| refused(StatusCode::UNAUTHORIZED, "Admin token required."))
}

async fn channels<St: CapacityStore>(
    State(admin): State<Arc<Admin<St>>>,
    req: Request,
) -> Response {
    if let Some(r) = gate(&admin, &req) {
        return r;
    }
    let live = admin.live();
    let registry = live.failover.registry();
    let health = live.failover.health();
    let now = portcullis::time::TokioClock::default().now();
    let mut out = Vec::new();
    for ch in &live.channels {
        let cred = &ch.credential_id;
        let mut keys = vec![credential_key(cred), vendor_key(ch.vendor.as_str())];
        keys.extend(ch.models.iter().map(|m| model_key(cred, m)));
        let cooling = registry.cooldowns().any_until(&keys, now);
        let in_flight = live.store.in_flight(&ch.name).await.ok();
        let (ok, failed) = health.counts(&ch.name, now);
        let state = match health.state(&ch.name, now) {
            HealthState::Healthy => json!("healthy"),
            HealthState::Degraded => json!("degraded"),
            HealthState::HalfOpen => json!("half_open"),
            HealthState::Open { until } => json!({"open_until_ms": until}),
        };
        out.push(json!({
            "name": &*ch.name,
            "vendor": ch.vendor.as_str(),
            "credential_id": cred,
            "models": &ch.models,
            "capacity": ch.capacity,
            "in_flight": in_flight,
            "disabled": cooling == Some(DISABLED),
            "cooling_until_ms": cooling.filter(|u| *u != DISABLED),
            "health": state,
            "recent_ok": ok,
            "recent_failed": failed,
        }));
    }
    axum::Json(json!({ "channels": out })).into_response()
}

/// `GET /admin/rejections`: rejections by code per minute over the last minutes
/// ([`crate::pages::rejections`]).
async fn rejections<St>(State(admin): State<Arc<Admin<St>>>, req: Request) -> Response {
    if let Some(r) = gate(&admin, &req) {
        return r;
    }
    axum::Json(admin.live().rejections.to_json()).into_response()
}

async fn enable<St>(
    State(admin): State<Arc<Admin<St>>>,
    Path(name): Path<String>,
    req: Request,
) -> Response {
    if let Some(r) = gate(&admin, &req) {
        return r;
    }
    let live = admin.live();
    let Some(ch) = live.channels.iter().find(|c| *c.name == *name) else {
        return refused(StatusCode::NOT_FOUND, format!("No channel named {name:?}."));
    };
    live.failover.reenable(&ch.name);
    tracing::info!(channel = %name, "channel re-enabled by an operator");
    axum::Json(json!({ "enabled": name })).into_response()
}

async fn reload<St>(State(admin): State<Arc<Admin<St>>>, req: Request) -> Response {
    if req.extensions().get::<InProcess>().is_none() {
        if let Some(r) = gate(&admin, &req) {
            return r;
        }
    }
    let Some(path) = admin.stack.load().config.source.clone() else {
        return refused(
            StatusCode::CONFLICT,
            "The configuration was not loaded from a file; nothing to reload.",
        );
    };
    let config = match Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "reload refused; keeping the running configuration");
            return refused(StatusCode::BAD_REQUEST, e.to_string());
        }
    };
    if let Err(e) = admin.stack.replace(config) {
        tracing::warn!(error = %e, "reload refused; keeping the running configuration");
        return refused(StatusCode::BAD_REQUEST, e);
    }
    tracing::info!(path = %path.display(), "configuration reloaded");
    axum::Json(json!({ "reloaded": path.display().to_string() })).into_response()
}

/// `PUT /admin/tenants/{tenant}/balance` with `{"balance": <minor units>}`: sets a
/// tenant's balance explicitly (B7) — e.g. after the store lost its data, which the
/// gateway answers with 503 50303 rather than re-seeding silently. Money pending
/// reconciliation is kept.
async fn set_balance<St: BillingStore>(
    State(admin): State<Arc<Admin<St>>>,
    Path(tenant): Path<String>,
    req: Request,
) -> Response {
    if let Some(r) = gate(&admin, &req) {
        return r;
    }
    let bytes = match axum::body::to_bytes(req.into_body(), 4096).await {
        Ok(b) => b,
        Err(_) => return refused(StatusCode::BAD_REQUEST, "The body could not be read."),
    };
    let balance = match serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("balance").and_then(serde_json::Value::as_i64))
    {
        Some(b) => b,
        None => {
            return refused(
                StatusCode::BAD_REQUEST,
                r#"Expected a JSON body {"balance": <integer minor units>}."#,
            );
        }
    };
    let live = admin.live();
    if let Err(e) = live.store.set_balance(&tenant, balance).await {
        tracing::error!(tenant = %tenant, error = %e, "setting a tenant balance failed");
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("The store failed: {e}"),
        );
    }
    let known = admin.stack.load().config.tenants().contains_key(&tenant);
    tracing::warn!(tenant = %tenant, balance, configured = known, "tenant balance set by an operator");
    axum::Json(json!({ "tenant": tenant, "balance": balance })).into_response()
}

// ------------------------------------------------------------------ reconciliation (B7)

/// Default page of `GET /admin/pending`.
const DEFAULT_PAGE: usize = 100;

/// The opaque cursor of a listing: the last attempt of a page, as hex of
/// `<t|k><name length>:<name><attempt id>` (hex keeps it safe in a query string whatever
/// a tenant name or attempt id holds; written out here, as it is a dozen lines).
fn cursor_of(a: &AttemptRef) -> String {
    let (kind, name) = match &a.books {
        Books::Tenant(t) => ('t', &**t),
        Books::Key(k) => ('k', k.as_str()),
    };
    let raw = format!("{kind}{}:{name}{}", name.len(), a.attempt);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn parse_cursor(c: &str) -> Option<AttemptRef> {
    if c.len() % 2 != 0 {
        return None;
    }
    let bytes: Vec<u8> = (0..c.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(c.get(i..i + 2)?, 16).ok())
        .collect::<Option<_>>()?;
    let raw = String::from_utf8(bytes).ok()?;
    let (tenant, rest) = match raw.as_bytes().first()? {
        b't' => (true, &raw[1..]),
        b'k' => (false, &raw[1..]),
        _ => return None,
    };
    let (len, rest) = rest.split_once(':')?;
    let len: usize = len.parse().ok()?;
    let (name, attempt) = (rest.get(..len)?, rest.get(len..)?);
    let books = if tenant {
        Books::Tenant(name.into())
    } else {
        Books::Key(name.into())
    };
    Some(AttemptRef {
        attempt: attempt.into(),
        books,
    })
}

fn pending_json(p: &PendingAttempt) -> serde_json::Value {
    let (tenant, key) = match &p.attempt.books {
        Books::Tenant(t) => (Some(&**t), p.key.as_ref().map(|k| k.as_str())),
        Books::Key(k) => (None, Some(k.as_str())),
    };
    json!({
        "tenant": tenant,
        "key": key,
        "attempt": &*p.attempt.attempt,
        "amount": p.amount,
        "billed_to_balance": p.billed_to_balance,
        "pending_since_ms": p.since,
    })
}

fn no_reconciler() -> Response {
    refused(
        StatusCode::NOT_IMPLEMENTED,
        "This gateway's billing store cannot list or reconcile pending attempts.",
    )
}

fn store_failed(e: &portcullis::core::StoreError) -> Response {
    tracing::error!(error = %e, "reconciliation: the store failed");
    refused(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("The store failed: {e}"),
    )
}

/// `GET /admin/pending?limit=N&cursor=C`: one page of the attempts pending
/// reconciliation.
async fn pending<St: BillingStore>(State(admin): State<Arc<Admin<St>>>, req: Request) -> Response {
    if let Some(r) = gate(&admin, &req) {
        return r;
    }
    let mut limit = DEFAULT_PAGE;
    let mut after = None;
    for (k, v) in req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
    {
        match k {
            "limit" => match v.parse::<usize>() {
                Ok(n) if (1..=MAX_PENDING_PAGE).contains(&n) => limit = n,
                _ => {
                    return refused(
                        StatusCode::BAD_REQUEST,
                        format!("limit must be an integer from 1 to {MAX_PENDING_PAGE}."),
                    );
                }
            },
            "cursor" => match parse_cursor(v) {
                Some(c) => after = Some(c),
                None => {
                    return refused(
                        StatusCode::BAD_REQUEST,
                        "cursor is not one this gateway handed out (use next_cursor).",
                    );
                }
            },
            other => {
                return refused(
                    StatusCode::BAD_REQUEST,
                    format!("Unknown parameter {other:?} (limit, cursor)."),
                );
            }
        }
    }
    let Some(rec) = admin.live().store.reconciler() else {
        return no_reconciler();
    };
    let page = match rec.pending_page(after.as_ref(), limit).await {
        Ok(p) => p,
        Err(e) => return store_failed(&e),
    };
    let next = (page.len() == limit)
        .then(|| page.last().map(|p| cursor_of(&p.attempt)))
        .flatten();
    axum::Json(json!({
        "pending": page.iter().map(pending_json).collect::<Vec<_>>(),
        "next_cursor": next,
    }))
    .into_response()
}

/// The usage an operator reports with a settlement.
#[derive(serde::Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct UsageBody {
    input_tokens: u64,
    cached_input_tokens: u64,
    cache_write_tokens: u64,
    output_tokens: u64,
    images: u64,
    videos: u64,
}

/// The body of `POST /admin/pending/settle` and `/write-off`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Target {
    tenant: Option<String>,
    key: Option<String>,
    attempt: String,
    cost: Option<Money>,
    usage: Option<UsageBody>,
}

const SETTLE_BODY: &str = r#"Expected a JSON body {"tenant": "<tenant>" (or "key": "<key label>" for a key with no tenant), "attempt": "<attempt id>", "cost": <minor units>, "usage": {"input_tokens": …, "cached_input_tokens": …, "cache_write_tokens": …, "output_tokens": …, "images": …, "videos": …} (optional)}."#;
const WRITE_OFF_BODY: &str = r#"Expected a JSON body {"tenant": "<tenant>" (or "key": "<key label>" for a key with no tenant), "attempt": "<attempt id>"}."#;

async fn settle<St: BillingStore>(State(admin): State<Arc<Admin<St>>>, req: Request) -> Response {
    close(admin, req, true).await
}

async fn write_off<St: BillingStore>(
    State(admin): State<Arc<Admin<St>>>,
    req: Request,
) -> Response {
    close(admin, req, false).await
}

/// Settles (`settle`) or writes off a pending attempt named in the body, and records it.
async fn close<St: BillingStore>(admin: Arc<Admin<St>>, req: Request, settle: bool) -> Response {
    if let Some(r) = gate(&admin, &req) {
        return r;
    }
    let expected = if settle { SETTLE_BODY } else { WRITE_OFF_BODY };
    let Ok(bytes) = axum::body::to_bytes(req.into_body(), 64 << 10).await else {
        return refused(
            StatusCode::BAD_REQUEST,
            "The body could not be read (at most 64 KiB).",
        );
    };
    let t: Target = match serde_json::from_slice(&bytes) {
        Ok(t) => t,
        Err(e) => return refused(StatusCode::BAD_REQUEST, format!("{e}. {expected}")),
    };
    let name = t.attempt.clone();
    let (attempt, how, usage) = match t.into_reconciliation(settle) {
        Ok(r) => r,
        Err(message) => return refused(StatusCode::BAD_REQUEST, message),
    };
    let live = admin.live();
    let Some(rec) = live.store.reconciler() else {
        return no_reconciler();
    };
    let now = portcullis::core::SystemClock::new().now();
    match portcullis::billing::reconcile(&*rec, &*live.sink, &attempt, how, usage, now).await {
        Ok(answer) => reconciled(answer, &name),
        Err(e) => store_failed(&e),
    }
}

impl Target {
    /// The attempt, what to do with it and the usage to record, or what the body
    /// should have been (a 400).
    fn into_reconciliation(
        self,
        settle: bool,
    ) -> Result<(AttemptRef, Reconcile, Option<Usage>), String> {
        let expected = if settle { SETTLE_BODY } else { WRITE_OFF_BODY };
        let books = match (self.tenant, self.key) {
            (Some(tenant), _) => Books::Tenant(tenant.into()),
            (None, Some(key)) => Books::Key(key.into()),
            (None, None) => return Err(expected.to_owned()),
        };
        let how = match (settle, self.cost, &self.usage) {
            (true, Some(c), _) if (0..=portcullis::core::MAX_STORABLE_MONEY).contains(&c) => {
                Reconcile::Settle(c)
            }
            (true, Some(_), _) => {
                return Err(format!(
                    "cost must be from 0 to {} minor units.",
                    portcullis::core::MAX_STORABLE_MONEY
                ));
            }
            (false, None, None) => Reconcile::WriteOff,
            _ => return Err(expected.to_owned()),
        };
        let usage = self.usage.map(|u| Usage {
            input_tokens: u.input_tokens,
            cached_input_tokens: u.cached_input_tokens,
            cache_write_tokens: u.cache_write_tokens,
            output_tokens: u.output_tokens,
            images: u.images,
            videos: u.videos,
            cost: match how {
                Reconcile::Settle(c) => Some(c),
                Reconcile::WriteOff => None,
            },
        });
        let attempt = AttemptRef {
            attempt: self.attempt.as_str().into(),
            books,
        };
        Ok((attempt, how, usage))
    }
}

/// The answer to a reconciliation of attempt `name`, counted by outcome.
fn reconciled(answer: Reconciled, name: &str) -> Response {
    let outcome = match &answer {
        Reconciled::Settled { .. } => "settled",
        Reconciled::WrittenOff { .. } => "written_off",
        Reconciled::InFlight => "in_flight",
        Reconciled::NotPending => "not_pending",
    };
    metrics::counter!("portcullis_reconciliations_total", "outcome" => outcome).increment(1);
    match answer {
        Reconciled::Settled { attempt: p, cost } => {
            let mut v = pending_json(&p);
            v["outcome"] = json!("settled");
            v["cost"] = json!(cost);
            v["released"] = json!(p.amount);
            axum::Json(v).into_response()
        }
        Reconciled::WrittenOff { attempt: p } => {
            let mut v = pending_json(&p);
            v["outcome"] = json!("written_off");
            v["released"] = json!(p.amount);
            axum::Json(v).into_response()
        }
        Reconciled::InFlight => (
            StatusCode::CONFLICT,
            axum::Json(json!({
                "state": "in_flight",
                "error": {"message": format!(
                    "Attempt {name:?} is still in flight; its request settles it."
                )},
            })),
        )
            .into_response(),
        Reconciled::NotPending => (
            StatusCode::CONFLICT,
            axum::Json(json!({
                "state": "not_pending",
                "error": {"message": format!(
                    "Attempt {name:?} is not pending reconciliation in those books (already \
                     settled or written off, or never pending); nothing changed."
                )},
            })),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn b7_cursors_round_trip_and_bad_ones_are_refused_without_a_panic() {
        for a in [
            AttemptRef {
                attempt: "att-1".into(),
                books: Books::Tenant("acme:é{x}".into()),
            },
            AttemptRef {
                attempt: "a:b:c".into(),
                books: Books::Key("12:label".into()),
            },
        ] {
            assert_eq!(parse_cursor(&cursor_of(&a)), Some(a));
        }
        let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
        for bad in [
            String::new(),
            "abc".into(),
            "zz".into(),
            hex("é3:abc"),
            hex("x3:abcatt"),
            hex("t9:abc"),
            hex("tx:abc"),
            hex("t"),
            "c3a9".into(),
        ] {
            assert_eq!(parse_cursor(&bad), None, "{bad}");
        }
    }
}
