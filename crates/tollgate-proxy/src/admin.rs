//! Admin endpoints (SPEC P4), guarded by the admin token (`Authorization: Bearer …`,
//! compared in constant time), and the reloadable routing behind them:
//!
//! | route | what it does |
//! |---|---|
//! | `GET /admin/channels` | every channel's live state: in flight, cooldowns and disablement, health |
//! | `POST /admin/channels/{name}/enable` | puts a disabled or failing channel back into rotation |
//! | `POST /admin/reload` | re-reads the configuration file; a bad file is refused with its `file:line: reason` and the running configuration stays |
//! | `PUT /admin/tenants/{tenant}/balance` | sets a tenant's balance, body `{"balance": <minor units>}` (pending money is kept); the way back after the store lost a tenant's record (503 50303, B7) |
//!
//! Without an admin token in the configuration the routes answer 404 like any unknown
//! path. A reload builds a complete new stack on the same store (limits, balances and
//! leases carry over) and swaps it in for new requests; requests in flight finish on the
//! stack they started on.

use crate::app::Gateway;
use crate::catalog::Catalog;
use crate::config::{Channel, Config};
use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde_json::json;
use std::sync::{Arc, RwLock};
use subtle::ConstantTimeEq;
use tollgate::FailoverLayer;
use tollgate::core::failover::HealthState;
use tollgate::core::upstream::{DISABLED, credential_key, model_key, vendor_key};
use tollgate::core::{BillingStore, CapacityStore, Clock};
use tower::ServiceExt;

/// What the admin endpoints read and act on, for one configuration.
pub struct Live<St> {
    /// The failover layer (health, registry and its cooldowns).
    pub failover: FailoverLayer,
    /// Models and channels.
    pub catalog: Arc<Catalog>,
    /// The configured channels.
    pub channels: Vec<Channel>,
    /// The store (capacity leases).
    pub store: St,
}

struct Admin<St> {
    token: Option<String>,
    /// The running routes, swapped by a reload.
    current: RwLock<(Router, Arc<Live<St>>)>,
    /// The gateway the running routes were built from (its configuration included).
    gateway: std::sync::Mutex<Gateway<St>>,
}

impl<St> Admin<St> {
    fn routes(&self) -> Router {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }
    fn live(&self) -> Arc<Live<St>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }
    fn authorized(&self, req: &Request) -> bool {
        let Some(token) = &self.token else {
            return false;
        };
        let given = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        bool::from(given.as_bytes().ct_eq(token.as_bytes()))
    }
}

/// The router: admin routes, then everything else on the current (reloadable) routes.
pub(crate) fn outer<St>(gateway: Gateway<St>, routes: Router, live: Arc<Live<St>>) -> Router
where
    St: tollgate::core::JointStore + tollgate::core::ChannelStore + BillingStore + CapacityStore,
{
    let admin = Arc::new(Admin {
        token: gateway.config().admin_token.clone(),
        current: RwLock::new((routes, live)),
        gateway: std::sync::Mutex::new(gateway),
    });
    let fallback = {
        let admin = admin.clone();
        tower::service_fn(move |req: Request| {
            let routes = admin.routes();
            async move { routes.oneshot(req).await }
        })
    };
    Router::new()
        .route("/admin/channels", get(channels::<St>))
        .route("/admin/channels/{name}/enable", post(enable::<St>))
        .route("/admin/reload", post(reload::<St>))
        .route("/admin/tenants/{tenant}/balance", put(set_balance::<St>))
        .with_state(admin)
        .fallback_service(fallback)
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
    let now = tollgate::time::TokioClock::default().now();
    let mut out = Vec::new();
    for ch in &live.channels {
        let cred = ch.credential_id();
        let mut keys = vec![credential_key(&cred), vendor_key(ch.config.vendor.as_str())];
        keys.extend(
            ch.config
                .models
                .iter()
                .map(|m| model_key(&cred, m.get_ref())),
        );
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
            "vendor": ch.config.vendor.as_str(),
            "credential_id": cred,
            "models": ch.config.models.iter().map(|m| m.get_ref().as_str()).collect::<Vec<_>>(),
            "capacity": ch.config.capacity,
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

async fn reload<St>(State(admin): State<Arc<Admin<St>>>, req: Request) -> Response
where
    St: tollgate::core::JointStore + tollgate::core::ChannelStore + BillingStore + CapacityStore,
{
    if req.extensions().get::<InProcess>().is_none() {
        if let Some(r) = gate(&admin, &req) {
            return r;
        }
    }
    let current = admin
        .gateway
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let Some(path) = current.config().source.clone() else {
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
    let next = current.with_config(config);
    let (routes, live) = match next.assemble() {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(error = %e, "reload refused; keeping the running configuration");
            return refused(StatusCode::BAD_REQUEST, e);
        }
    };
    next.seed_balances();
    *admin.current.write().unwrap_or_else(|e| e.into_inner()) = (routes, live);
    *admin.gateway.lock().unwrap_or_else(|e| e.into_inner()) = next;
    tracing::info!(path = %path.display(), "configuration reloaded");
    axum::Json(json!({ "reloaded": path.display().to_string() })).into_response()
}

/// `PUT /admin/tenants/{tenant}/balance` with `{"balance": <minor units>}`: sets a
/// tenant's balance explicitly (B7) — e.g. after the store lost its data, which the
/// gateway answers with 503 50303 rather than re-seeding silently. Money pending
/// reconciliation is kept.
async fn set_balance<St>(
    State(admin): State<Arc<Admin<St>>>,
    Path(tenant): Path<String>,
    req: Request,
) -> Response
where
    St: tollgate::core::JointStore + tollgate::core::ChannelStore + BillingStore + CapacityStore,
{
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
    let known = admin
        .gateway
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .config()
        .raw
        .tenants
        .contains_key(&tenant);
    tracing::warn!(tenant = %tenant, balance, configured = known, "tenant balance set by an operator");
    axum::Json(json!({ "tenant": tenant, "balance": balance })).into_response()
}

/// Marks a reload asked for inside the process ([`Reloader`]): a request extension,
/// which no client can set.
#[derive(Clone, Copy)]
struct InProcess;

/// Re-reads the configuration file from inside the process (the `tollgate` binary's
/// `SIGHUP`), exactly as `POST /admin/reload` does — same checks, same swap, same log
/// lines — without needing the admin token.
#[derive(Clone)]
pub struct Reloader {
    router: Router,
}

impl Reloader {
    /// For a router built by [`Gateway::build`] or [`Gateway::router`].
    pub fn new(router: Router) -> Self {
        Self { router }
    }

    /// Reloads: `Ok` with the file re-read, or `Err` with why the new file was refused
    /// (`file:line: reason`; the running configuration stays).
    pub async fn reload(&self) -> Result<String, String> {
        let mut req = Request::new(axum::body::Body::empty());
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = http::Uri::from_static("/admin/reload");
        req.extensions_mut().insert(InProcess);
        let res = match self.router.clone().oneshot(req).await {
            Ok(r) => r,
            Err(e) => match e {},
        };
        let status = res.status();
        let body = axum::body::to_bytes(res.into_body(), 64 * 1024)
            .await
            .map_err(|e| format!("reading the reload answer: {e}"))?;
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if status.is_success() {
            Ok(v["reloaded"].as_str().unwrap_or_default().to_owned())
        } else {
            Err(v["error"]["message"]
                .as_str()
                .map_or_else(|| format!("reload answered {status}"), str::to_owned))
        }
    }
}
