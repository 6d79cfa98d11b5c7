//! The operational routes (P4): `GET /usage`, `GET /usage/requests` (B6: the calling
//! key's own recent attempts, from the ledger), `GET /healthz`, `GET /metrics`,
//! `GET /v1/models`, and the answer to an unknown path. The pages in a browser that read
//! them are [`crate::pages`].

use crate::auth::KeyTable;
use crate::catalog::Catalog;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use portcullis::core::{BillingStore, Dialect, LimitView, Scope, SlotStore, WindowStore};
use portcullis::error_map::render;
use serde_json::{Value, json};
use std::sync::Arc;

/// Called before every `/metrics` answer, to bring gauges and counters kept outside
/// the layers up to date (e.g. the local-mode decisions of a `LocalFallback` store).
pub type ScrapeHook = Arc<dyn Fn() + Send + Sync>;

/// Shared state of the operational routes.
pub(crate) struct Ops<St> {
    pub(crate) store: St,
    pub(crate) keys: KeyTable,
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) on_scrape: Option<ScrapeHook>,
    /// `GET /metrics` needs this bearer token when set.
    pub(crate) metrics_token: Option<String>,
    /// The records database the ledger is written to (B6), when there is one and the
    /// gateway keeps a ledger: `GET /usage/requests` reads it.
    pub(crate) ledger: Option<Arc<portcullis_records::Records>>,
}

/// The running stack's router: the model routes `api`, the operational routes beside
/// them, and the 404 of every other path.
pub(crate) fn routes<St>(api: Router<Arc<Ops<St>>>, ops: Arc<Ops<St>>) -> Router
where
    St: SlotStore + WindowStore + BillingStore,
{
    api.route("/v1/models", get(list_models::<St>))
        .route("/usage", get(usage::<St>))
        .route("/usage/requests", get(recent_requests::<St>))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(scrape::<St>))
        .fallback(not_found)
        .with_state(ops)
}

/// The answer to a path the gateway does not serve: 404 in the dialect of the path.
pub(crate) async fn not_found(req: Request) -> Response {
    let r = portcullis::core::Rejection::new(
        portcullis::core::GatewayCode::NotFound,
        portcullis::core::LayerKind::Request,
    )
    .with_message(format!(
        "No route for {} {}.",
        req.method(),
        req.uri().path()
    ));
    render(&r, Dialect::from_path(req.uri().path()), "").into_response()
}

/// `GET /metrics` (P4): Prometheus text; behind a bearer token when
/// `server.metrics_token` is set.
async fn scrape<St: BillingStore>(State(ops): State<Arc<Ops<St>>>, req: Request) -> Response {
    if let Some(token) = &ops.metrics_token {
        if !super::bearer_is(&req, token) {
            return (
                StatusCode::UNAUTHORIZED,
                [(http::header::WWW_AUTHENTICATE, "Bearer")],
                "metrics token required",
            )
                .into_response();
        }
    }
    if let Some(hook) = &ops.on_scrape {
        hook();
    }
    crate::metrics::record_pending(&ops.store).await;
    match crate::metrics::handle() {
        Some(h) => (
            [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            h.render(),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "metrics are recorded by the application",
        )
            .into_response(),
    }
}

async fn list_models<St>(State(ops): State<Arc<Ops<St>>>) -> Response {
    let data: Vec<Value> = ops
        .catalog
        .model_ids()
        .map(|id| json!({"id": id, "object": "model", "owned_by": "portcullis"}))
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

fn limit_json(v: &LimitView) -> Value {
    json!({
        "dimension": v.dimension.as_str(),
        "window_secs": (v.tier.window_ms > 0).then_some(v.tier.window_ms / 1000),
        "limit": v.tier.limit,
        "used": v.used,
        "remaining": v.tier.limit.saturating_sub(v.used),
        "resets_at": v.resets_at.map(|ms| ms.div_ceil(1000)),
    })
}

/// `GET /usage` (P4): the calling key's limits as the gateway sees them — the
/// source of truth rejections point to.
async fn usage<St: SlotStore + WindowStore + BillingStore>(
    State(ops): State<Arc<Ops<St>>>,
    req: Request,
) -> Response {
    let entry = match ops.keys.identify(req.headers(), req.uri()) {
        Ok(e) => e.clone(),
        Err(r) => return render(&r, Dialect::Native, "").into_response(),
    };
    let subject = &entry.subject;
    let now = portcullis::core::SystemClock::new();
    let now = portcullis::core::Clock::now(&now);
    let mut policies = Vec::new();
    let mut add = |scope: Scope,
                   policy: &Arc<portcullis::core::Policy>,
                   extra: Value,
                   views: portcullis::core::StoreResult<Vec<LimitView>>| {
        let limits: Vec<Value> = match views {
            Ok(v) => v.iter().map(limit_json).collect::<Vec<_>>(),
            Err(_) => Vec::new(),
        };
        let mut o = json!({
            "scope": match scope { Scope::Subscription => "subscription", Scope::Key => "key" },
            "concurrency": policy.concurrency,
            "limits": limits,
        });
        if let (Value::Object(o), Value::Object(e)) = (&mut o, extra) {
            o.extend(e);
        }
        policies.push(o);
    };
    if let Some(s) = &subject.subscription {
        let views = ops
            .store
            .view(&subject.key, Scope::Subscription, &s.policy)
            .await;
        add(
            Scope::Subscription,
            &s.policy,
            json!({
                "active": s.is_active(now),
                "pay_as_you_go": s.pay_as_you_go,
                "expires_at": s.expires_at.map(|ms| ms / 1000),
            }),
            views,
        );
    }
    if let Some(p) = &subject.policy {
        let views = ops.store.view(&subject.key, Scope::Key, p).await;
        add(Scope::Key, p, json!({}), views);
    }
    let in_flight = ops.store.in_flight(&subject.key).await.ok();
    let money = ops
        .store
        .account(
            subject.tenant.as_deref(),
            &subject.key,
            &entry.billing.budgets,
        )
        .await
        .ok();
    let money = money.map(|m| {
        json!({
            "balance": m.balance,
            "tenant_pending_reconciliation": m.tenant_pending,
            "key_spent": m.key_spent,
            "key_pending_reconciliation": m.key_pending,
            "spend_cap": entry.spend_cap,
            "budgets": m.budgets.iter().map(|b| json!({
                "id": &*b.id,
                "limit": b.limit,
                "spent": b.spent,
                "reserved": b.reserved,
                "resets_at": b.resets_at.map(|ms| ms.div_ceil(1000)),
            })).collect::<Vec<_>>(),
        })
    });
    (
        StatusCode::OK,
        axum::Json(json!({
            "key": &*entry.label,
            "tenant": subject.tenant.as_deref(),
            "in_flight": in_flight,
            "concurrency_limit": subject.concurrency_limit(now),
            "money": money,
            "policies": policies,
        })),
    )
        .into_response()
}

/// Most rows one `GET /usage/requests` page holds.
const RECENT_MAX: u32 = 100;

#[derive(serde::Deserialize)]
struct RecentParams {
    limit: Option<u32>,
    cursor: Option<String>,
}

/// An attempt as its key's holder sees it: when, the request id, the model, the tokens,
/// the cost and the outcome — not the channel, the attempt id or how the operator
/// resolved it.
fn recent_json(r: &portcullis_records::LedgerRow) -> Value {
    json!({
        "at": crate::keys::body::rfc3339(r.at),
        "at_ms": r.at,
        "request_id": r.request_id,
        "client_request_id": r.client_request_id,
        "model": r.model,
        "usage": r.usage,
        "amount": r.amount,
        "outcome": r.outcome.as_str(),
    })
}

/// `GET /usage/requests?limit=&cursor=` (B6): the calling key's own attempts from the
/// ledger, newest first, `limit` a page (20 unless given, at most [`RECENT_MAX`]), the
/// next page at `next_cursor`. Authenticated as `GET /usage`; the ledger is read by the
/// key's exact id, so no other key's rows can be selected. 404 when the gateway keeps no
/// ledger.
async fn recent_requests<St>(
    State(ops): State<Arc<Ops<St>>>,
    params: Result<axum::extract::Query<RecentParams>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    let refused = |status: StatusCode, message: String| {
        (status, axum::Json(json!({"error": {"message": message}}))).into_response()
    };
    let entry = match ops.keys.identify(req.headers(), req.uri()) {
        Ok(e) => e,
        Err(r) => return render(&r, Dialect::Native, "").into_response(),
    };
    let Some(records) = &ops.ledger else {
        return refused(
            StatusCode::NOT_FOUND,
            "This gateway keeps no ledger of requests (that needs a records database \
             with [database] ledger on)."
                .into(),
        );
    };
    let p = match params {
        Ok(axum::extract::Query(p)) => p,
        Err(e) => return refused(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let q = portcullis_records::UsageQuery {
        key_id: Some(entry.subject.key.as_str().to_owned()),
        newest_first: true,
        ..portcullis_records::UsageQuery::default()
    };
    let limit = p.limit.unwrap_or(20).clamp(1, RECENT_MAX);
    match records.usage(&q, p.cursor.as_deref(), limit).await {
        Ok(page) => axum::Json(json!({
            "records": page.rows.iter().map(recent_json).collect::<Vec<_>>(),
            "next_cursor": page.next_cursor,
        }))
        .into_response(),
        Err(portcullis_records::RecordsError::Unavailable(why)) => {
            tracing::warn!(error = %why, "the records database did not answer a key's recent requests");
            refused(
                StatusCode::SERVICE_UNAVAILABLE,
                "The records database is unavailable: retry later.".into(),
            )
        }
        Err(e) => super::records_api::records_error(e),
    }
}
