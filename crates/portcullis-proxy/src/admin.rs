//! Admin endpoints (P4), guarded by the admin token (`Authorization: Bearer …`,
//! compared in constant time), and the reloadable routing behind them (the handlers are
//! in `routes/admin.rs`, the swapped stack in `running.rs`):
//!
//! | route | what it does |
//! |---|---|
//! | `GET /admin/channels` | every channel's live state: in flight, cooldowns and disablement, health |
//! | `POST /admin/channels/{name}/enable` | puts a disabled or failing channel back into rotation |
//! | `GET /admin/rejections` | rejections by code per minute over the last 15 minutes ([`crate::pages::rejections`]) |
//! | `POST /admin/reload` | re-reads the configuration file; a bad file is refused with its `file:line: reason` and the running configuration stays |
//! | `PUT /admin/tenants/{tenant}/balance` | sets a tenant's balance, body `{"balance": <minor units>}` (pending money is kept); the way back after the store lost a tenant's record (503 50303, B7) |
//! | `GET /admin/pending?limit=N&cursor=C` | one page (default 100, at most 1000) of the attempts pending reconciliation, in a stable order (tenant books, then key books, then attempt id); `next_cursor` names the next page (`null`: this was the last) |
//! | `POST /admin/pending/settle` | settles a pending attempt at a cost, body `{"tenant": …, "attempt": …, "cost": <minor units>, "usage": {…}}` (`"key"` instead of `"tenant"` for a key with no tenant; `usage` optional) |
//! | `POST /admin/pending/write-off` | writes a pending attempt off (nothing charged), body `{"tenant": …, "attempt": …}` |
//! | `/admin/keys…`, `/admin/tenants…`, `/admin/audit` | with a records database (`[database]`): keys, tenants and management tokens managed while the gateway runs (`routes/keys.rs`, contract page `keys`, K1–K10) |
//!
//! Settling or writing off releases what the attempt held (its pending money on the
//! balance and the key's spend, its budget reservations) exactly once and leaves a usage
//! record through the gateway's usage sink (the usage log), marked `reconciled` (B7). A
//! second call for the same attempt changes nothing and answers 409 with
//! `"state": "not_pending"`; an attempt still in flight answers 409 `"in_flight"`.
//!
//! Without an admin token in the configuration the routes answer 404 like any unknown
//! path. A reload builds a complete new stack on the same store (limits, balances and
//! leases carry over) and swaps it in for new requests; requests in flight finish on the
//! stack they started on.

pub use crate::running::Live;
use axum::Router;
use axum::extract::Request;
use tower::ServiceExt;

/// Marks a reload asked for inside the process ([`Reloader`]): a request extension,
/// which no client can set.
#[derive(Clone, Copy)]
pub(crate) struct InProcess;

/// Re-reads the configuration file from inside the process (the `portcullis` binary's
/// `SIGHUP`), exactly as `POST /admin/reload` does — same checks, same swap, same log
/// lines — without needing the admin token.
#[derive(Clone)]
pub struct Reloader {
    router: Router,
}

impl Reloader {
    /// For a router built by [`Gateway::build`](crate::Gateway::build) or
    /// [`Gateway::router`](crate::Gateway::router).
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
