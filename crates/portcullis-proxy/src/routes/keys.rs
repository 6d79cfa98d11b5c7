//! The records admin routes (`/admin/keys…`, `/admin/tenants…`, `/admin/audit`): keys
//! and tenants of the records database, managed while the gateway runs. Thin: the
//! checks that need no configuration are `portcullis_records::check_key` and
//! `check_tenant`; those that do (a policy, a tenant, a model that must exist) are
//! here; every write is one `Records` call, then this instance follows it at once.
//!
//! The admin token may do everything. A tenant's management token (`POST
//! /admin/tenants/{name}/tokens`) may use the key routes for its own tenant's keys only:
//! another tenant's key answers 404, as an unknown one does, and a key it creates or
//! changes stays in its tenant.

// The helpers' error is the handler's answer itself (a 400 naming the field, a 404, a
// 503): it is returned at once, never carried, so its size costs nothing.
#![allow(clippy::result_large_err)]

use super::records_api::{Answer, Keys, answer, invalid, records_error, refused};
use crate::keys::body::{KeyBody, rfc3339, tenant_may_grant};
use crate::keys::{Directory, now_ms};
use crate::running::Stack;
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use portcullis::core::BillingStore;
use portcullis_records::{BudgetSpec, KeyRecord, KeySpec, TenantSpec};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// The routes on `directory`, behind the admin token (none: 404 as every admin route).
pub(crate) fn routes<St: BillingStore>(
    token: Option<String>,
    directory: Arc<Directory>,
    stack: Arc<Stack<St>>,
) -> Router {
    let state = Arc::new(Keys {
        token,
        directory,
        stack,
    });
    Router::new()
        .route("/admin/keys", post(create_key::<St>).get(list_keys::<St>))
        .route(
            "/admin/keys/{id}",
            get(get_key::<St>)
                .patch(patch_key::<St>)
                .delete(revoke_key::<St>),
        )
        .route("/admin/keys/{id}/rotate", post(rotate_key::<St>))
        .route(
            "/admin/tenants",
            post(create_tenant::<St>).get(list_tenants::<St>),
        )
        .route(
            "/admin/tenants/{name}",
            axum::routing::patch(patch_tenant::<St>),
        )
        .route("/admin/tenants/{name}/top-up", post(top_up::<St>))
        .route("/admin/tenants/{name}/tokens", post(create_token::<St>))
        .route("/admin/audit", get(audit::<St>))
        .route("/admin/usage", get(super::usage::usage::<St>))
        .route("/admin/books", get(super::usage::books::<St>))
        .with_state(state)
}

impl<St: BillingStore> Keys<St> {
    /// A tenant token's key checked against what its tenant has (K6): the least of
    /// the tenant's balance and its budgets' limits bounds a spend cap.
    async fn within_tenant(
        &self,
        tenant: &str,
        key: &KeySpec,
        before: Option<&KeySpec>,
    ) -> Result<(), Response> {
        let has = match key.spend_cap {
            None => None,
            Some(_) => self.tenant_has(tenant).await?,
        };
        tenant_may_grant(key, before, has).map_err(|i| invalid(i.field, i.reason))
    }

    /// The most a tenant has: its balance and every budget's limit, the least of them.
    async fn tenant_has(&self, tenant: &str) -> Result<Option<i64>, Response> {
        let running = self.stack.load();
        let mut limits: Vec<i64> = match running.config.tenant_profiles().get(tenant) {
            Some(t) => t.budgets.iter().map(|b| b.limit).collect(),
            None => self
                .directory
                .records()
                .tenants()
                .await
                .map_err(records_error)?
                .into_iter()
                .filter(|t| t.name == tenant)
                .flat_map(|t| t.spec.budgets)
                .map(|b| b.limit)
                .collect(),
        };
        let nobody = portcullis::core::SubjectKey::new("");
        let account = running
            .live
            .store
            .account(Some(tenant), &nobody, &[])
            .await
            .map_err(|e| {
                tracing::warn!(tenant, error = %e, "the store did not answer a tenant's balance");
                refused(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The store did not answer the tenant's balance, which bounds a spend cap; retry.",
                )
            })?;
        limits.extend(account.balance);
        Ok(limits.into_iter().min())
    }
}

/// A key as the API shows it: never a secret (no record holds one).
fn shown(k: &KeyRecord) -> Value {
    let mut v = serde_json::to_value(KeyBody::of(k)).unwrap_or_default();
    v["id"] = json!(k.id);
    v["state"] = json!(k.state);
    v["created_at"] = json!(rfc3339(k.created_at));
    v["updated_at"] = json!(rfc3339(k.updated_at));
    v["revision"] = json!(k.revision);
    v
}

/// The JSON body of a request (at most 64 KiB), or the 400 saying why not.
async fn body<T: serde::de::DeserializeOwned>(req: Request) -> Result<T, Response> {
    let bytes = axum::body::to_bytes(req.into_body(), 64 * 1024)
        .await
        .map_err(|_| refused(StatusCode::PAYLOAD_TOO_LARGE, "The body is over 64 KiB."))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        // serde names the field it could not take ("unknown field `x`", "invalid type
        // … at line 1 column 9").
        refused(StatusCode::BAD_REQUEST, format!("Bad JSON body: {e}"))
    })
}

async fn db_tenants(d: &Directory) -> Result<Vec<String>, Response> {
    Ok(d.records()
        .tenants()
        .await
        .map_err(records_error)?
        .into_iter()
        .map(|t| t.name)
        .collect())
}

async fn create_key<St: BillingStore>(State(s): State<Arc<Keys<St>>>, req: Request) -> Answer {
    let caller = s.caller(&req, true)?;
    let mut b: KeyBody = body(req).await?;
    if let Some(scope) = &caller.scope {
        match &b.tenant {
            Some(t) if t != scope => {
                return Err(invalid(
                    "tenant",
                    "a tenant's token creates keys of its own tenant only",
                ));
            }
            _ => b.tenant = Some(scope.clone()),
        }
    }
    let tenants = db_tenants(&s.directory).await?;
    let key = b
        .into_key(&s.stack.load().config, &tenants)
        .map_err(|i| invalid(i.field, i.reason))?;
    if let Some(scope) = &caller.scope {
        s.within_tenant(scope, &key.spec, None).await?;
    }
    Ok(
        match s
            .directory
            .records()
            .create_key(&caller.actor, key, now_ms())
            .await
        {
            Ok((k, secret)) => {
                s.directory.changed().await;
                tracing::info!(key = %k.id, tenant = ?k.tenant, actor = %caller.actor, "key created");
                let mut v = shown(&k);
                // The secret, this once: it is not stored and never shown again.
                v["key"] = json!(secret.expose());
                answer(StatusCode::CREATED, v)
            }
            Err(e) => records_error(e),
        },
    )
}

#[derive(Deserialize)]
struct ListQuery {
    tenant: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

async fn list_keys<St>(
    State(s): State<Arc<Keys<St>>>,
    Query(q): Query<ListQuery>,
    req: Request,
) -> Answer {
    let caller = s.caller(&req, true)?;
    let tenant = caller.scope.clone().or(q.tenant);
    let limit = q
        .limit
        .unwrap_or(100)
        .clamp(1, portcullis_records::PAGE_MAX);
    Ok(
        match s
            .directory
            .records()
            .keys(tenant.as_deref(), q.cursor.as_deref(), limit)
            .await
        {
            Ok(page) => {
                let next =
                    (page.len() == limit as usize).then(|| page.last().map(|k| k.id.clone()));
                let mut v = json!({
                    "keys": page.iter().map(shown).collect::<Vec<_>>(),
                    "next_cursor": next.flatten(),
                });
                // The file's keys, read-only, on the admin's first page.
                if caller.scope.is_none() && q.cursor.is_none() {
                    let config = &s.stack.load().config;
                    let file: Vec<Value> = config
                    .keys
                    .values()
                    .filter(|e| tenant.is_none() || e.subject.tenant.as_deref() == tenant.as_deref())
                    .map(|e| json!({"label": &*e.label, "tenant": e.subject.tenant.as_deref(), "static": true}))
                    .collect();
                    v["static_keys"] = json!(file);
                }
                answer(StatusCode::OK, v)
            }
            Err(e) => records_error(e),
        },
    )
}

async fn get_key<St>(
    State(s): State<Arc<Keys<St>>>,
    Path(id): Path<String>,
    req: Request,
) -> Answer {
    let caller = s.caller(&req, true)?;
    Ok(
        match s
            .directory
            .records()
            .key(&id, caller.scope.as_deref())
            .await
        {
            Ok(k) => answer(StatusCode::OK, shown(&k)),
            Err(e) => records_error(e),
        },
    )
}

async fn patch_key<St: BillingStore>(
    State(s): State<Arc<Keys<St>>>,
    Path(id): Path<String>,
    req: Request,
) -> Answer {
    let caller = s.caller(&req, true)?;
    let patch: serde_json::Map<String, Value> = body(req).await?;
    if caller.scope.is_some() && patch.contains_key("tenant") {
        return Err(invalid(
            "tenant",
            "a tenant's token cannot move a key to another tenant",
        ));
    }
    let records = s.directory.records();
    let stored = records
        .key(&id, caller.scope.as_deref())
        .await
        .map_err(records_error)?;
    // The patch over the stored key: a field given replaces, `null` clears.
    let mut merged = serde_json::to_value(KeyBody::of(&stored)).unwrap_or_default();
    for (k, v) in patch {
        merged[k] = v;
    }
    let b: KeyBody = serde_json::from_value(merged)
        .map_err(|e| refused(StatusCode::BAD_REQUEST, format!("Bad JSON body: {e}")))?;
    let tenants = db_tenants(&s.directory).await?;
    let key = b
        .into_key(&s.stack.load().config, &tenants)
        .map_err(|i| invalid(i.field, i.reason))?;
    if let Some(scope) = &caller.scope {
        s.within_tenant(scope, &key.spec, Some(&stored.spec))
            .await?;
    }
    let result = records
        .update_key(&caller.actor, &id, caller.scope.as_deref(), now_ms(), |k| {
            k.label = key.label;
            k.tenant = key.tenant;
            k.spec = key.spec;
            k.expires_at = key.expires_at;
            Ok(())
        })
        .await;
    Ok(match result {
        Ok(k) => {
            s.directory.changed().await;
            answer(StatusCode::OK, shown(&k))
        }
        Err(e) => records_error(e),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rotate {
    #[serde(default)]
    grace_seconds: u64,
}

async fn rotate_key<St>(
    State(s): State<Arc<Keys<St>>>,
    Path(id): Path<String>,
    req: Request,
) -> Answer {
    let caller = s.caller(&req, true)?;
    let r: Rotate = body(req).await?;
    if r.grace_seconds > 30 * 24 * 3600 {
        return Err(invalid("grace_seconds", "at most 30 days"));
    }
    let grace = r.grace_seconds * 1000;
    Ok(
        match s
            .directory
            .records()
            .rotate_key(&caller.actor, &id, caller.scope.as_deref(), grace, now_ms())
            .await
        {
            Ok(secret) => {
                s.directory.changed().await;
                answer(
                    StatusCode::OK,
                    json!({"id": id, "key": secret.expose(), "old_key_valid_for_seconds": r.grace_seconds}),
                )
            }
            Err(e) => records_error(e),
        },
    )
}

async fn revoke_key<St>(
    State(s): State<Arc<Keys<St>>>,
    Path(id): Path<String>,
    req: Request,
) -> Answer {
    let caller = s.caller(&req, true)?;
    Ok(
        match s
            .directory
            .records()
            .revoke_key(&caller.actor, &id, caller.scope.as_deref(), now_ms())
            .await
        {
            Ok(k) => {
                s.directory.changed().await;
                tracing::info!(key = %k.id, actor = %caller.actor, "key revoked");
                answer(StatusCode::OK, shown(&k))
            }
            Err(e) => records_error(e),
        },
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantBody {
    name: String,
    #[serde(default)]
    balance: Option<i64>,
    #[serde(default)]
    weight: Option<u32>,
    #[serde(default)]
    budgets: Vec<BudgetSpec>,
}

async fn create_tenant<St: BillingStore>(State(s): State<Arc<Keys<St>>>, req: Request) -> Answer {
    let caller = s.caller(&req, false)?;
    let b: TenantBody = body(req).await?;
    if s.stack
        .load()
        .config
        .tenant_profiles()
        .contains_key(&b.name)
    {
        return Err(refused(
            StatusCode::CONFLICT,
            format!("tenant {:?} is a tenant of the configuration file", b.name),
        ));
    }
    if b.balance.is_some_and(|v| v < 0) {
        return Err(invalid("balance", "must not be negative"));
    }
    let spec = TenantSpec {
        weight: b.weight,
        budgets: b.budgets,
    };
    let t = s
        .directory
        .records()
        .create_tenant(&caller.actor, &b.name, spec, now_ms())
        .await
        .map_err(records_error)?;
    s.directory.changed().await;
    let store = s.stack.load().live.store.clone();
    let balance = b.balance.unwrap_or(0);
    // The opening balance, where the books start (B6): an audit row of its own.
    let detail = json!({"balance": balance}).to_string();
    if let Err(e) = s
        .directory
        .records()
        .note(&caller.actor, "tenant.open", &t.name, detail, now_ms())
        .await
    {
        // The tenant and its balance stand; the books check will show the missing start.
        tracing::error!(tenant = %t.name, error = %e, "the opening balance was not recorded");
    }
    if let Err(e) = store.seed_balance(&t.name, balance).await {
        tracing::error!(tenant = %t.name, error = %e, "seeding a new tenant's balance failed");
        return Err(refused(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "Tenant {:?} was created, but the store did not take its balance: set it with PUT /admin/tenants/{}/balance.",
                t.name, t.name
            ),
        ));
    }
    let mut v = serde_json::to_value(&t).unwrap_or_default();
    v["balance"] = json!(balance);
    Ok(answer(StatusCode::CREATED, v))
}

async fn list_tenants<St: BillingStore>(State(s): State<Arc<Keys<St>>>, req: Request) -> Answer {
    s.caller(&req, false)?;
    let tenants = s
        .directory
        .records()
        .tenants()
        .await
        .map_err(records_error)?;
    let running = s.stack.load();
    let mut out = Vec::new();
    for name in tenants
        .iter()
        .map(|t| t.name.clone())
        .chain(running.config.tenant_profiles().keys().cloned())
    {
        let nobody = portcullis::core::SubjectKey::new("");
        let balance = running
            .live
            .store
            .account(Some(&name), &nobody, &[])
            .await
            .ok()
            .and_then(|a| a.balance);
        let from_file = running.config.tenant_profiles().contains_key(&name);
        out.push(json!({"name": name, "balance": balance, "static": from_file}));
    }
    Ok(answer(StatusCode::OK, json!({"tenants": out})))
}

async fn patch_tenant<St>(
    State(s): State<Arc<Keys<St>>>,
    Path(name): Path<String>,
    req: Request,
) -> Answer {
    let caller = s.caller(&req, false)?;
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Patch {
        #[serde(default)]
        weight: Option<u32>,
        #[serde(default)]
        budgets: Option<Vec<BudgetSpec>>,
    }
    let p: Patch = body(req).await?;
    let result = s
        .directory
        .records()
        .update_tenant(&caller.actor, &name, now_ms(), |spec| {
            if p.weight.is_some() {
                spec.weight = p.weight;
            }
            if let Some(b) = p.budgets {
                spec.budgets = b;
            }
            Ok(())
        })
        .await;
    Ok(match result {
        Ok(t) => {
            s.directory.changed().await;
            answer(StatusCode::OK, serde_json::to_value(&t).unwrap_or_default())
        }
        Err(e) => records_error(e),
    })
}

async fn tenant_known<St>(s: &Keys<St>, name: &str) -> Result<(), Response> {
    if s.stack.load().config.tenant_profiles().contains_key(name) {
        return Ok(());
    }
    let tenants = db_tenants(&s.directory).await?;
    if tenants.iter().any(|t| t == name) {
        Ok(())
    } else {
        Err(refused(
            StatusCode::NOT_FOUND,
            format!("No tenant {name:?}."),
        ))
    }
}

async fn top_up<St: BillingStore>(
    State(s): State<Arc<Keys<St>>>,
    Path(name): Path<String>,
    req: Request,
) -> Answer {
    let caller = s.caller(&req, false)?;
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct TopUp {
        amount: i64,
    }
    let t: TopUp = body(req).await?;
    if t.amount <= 0 {
        return Err(invalid(
            "amount",
            "must be a positive number of minor units",
        ));
    }
    tenant_known(&s, &name).await?;
    // The audit row first: a top-up the database could not record is not made.
    let detail = json!({"amount": t.amount}).to_string();
    if let Err(e) = s
        .directory
        .records()
        .note(&caller.actor, "tenant.top-up", &name, detail, now_ms())
        .await
    {
        return Err(records_error(e));
    }
    let store = s.stack.load().live.store.clone();
    Ok(match store.credit(&name, t.amount).await {
        Ok(balance) => {
            tracing::info!(tenant = %name, amount = t.amount, balance, "tenant topped up");
            answer(
                StatusCode::OK,
                json!({"tenant": name, "amount": t.amount, "balance": balance}),
            )
        }
        Err(e) => {
            tracing::error!(tenant = %name, error = %e, "a top-up was recorded but the store did not take it");
            refused(
                StatusCode::SERVICE_UNAVAILABLE,
                "The store did not take the top-up; retry it.",
            )
        }
    })
}

async fn create_token<St>(
    State(s): State<Arc<Keys<St>>>,
    Path(name): Path<String>,
    req: Request,
) -> Answer {
    let caller = s.caller(&req, false)?;
    tenant_known(&s, &name).await?;
    Ok(
        match s
            .directory
            .records()
            .create_token(&caller.actor, &name, now_ms())
            .await
        {
            Ok((id, secret)) => {
                s.directory.changed().await;
                answer(
                    StatusCode::CREATED,
                    json!({"id": id, "tenant": name, "token": secret.expose()}),
                )
            }
            Err(e) => records_error(e),
        },
    )
}

async fn audit<St>(State(s): State<Arc<Keys<St>>>, req: Request) -> Answer {
    s.caller(&req, false)?;
    Ok(match s.directory.records().audit(200).await {
        Ok(rows) => answer(StatusCode::OK, json!({"audit": rows})),
        Err(e) => records_error(e),
    })
}
