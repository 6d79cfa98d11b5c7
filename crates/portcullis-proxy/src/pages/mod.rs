//! Pages in a browser (P4): a usage page for key holders, an operator page and a keys
//! page, static HTML, CSS and JavaScript embedded in the binary (no JavaScript toolchain
//! at build time), reading the gateway's JSON routes.
//!
//! | route | what it serves |
//! |---|---|
//! | `GET /usage/page` | the usage page: the holder pastes their key, the page calls `GET /usage` with it in the `Authorization` header and shows every tier (used / limit / live countdown to reset), in-flight slots, balance, spend against the cap, budgets, money pending reconciliation, the key's recent requests (`GET /usage/requests`: time, model, tokens in / cached / out, cost, outcome, request id, newest first, 20 a page with a **More** button following `next_cursor`; an empty state when there are none or the gateway keeps no ledger) and what each gateway code means |
//! | `GET /admin/page` | the operator page: the operator pastes the admin token, the page calls `GET /admin/channels` and `GET /admin/rejections` and shows channels (in flight against capacity, health, cooldowns, disabled credentials with an **Enable** button calling `POST /admin/channels/{name}/enable`) and rejections by code over the last minutes; with a records database (when `GET /admin/tenants` answers; the section is hidden on its 404) a tenant selector and the tenant's recent requests (`GET /admin/usage?tenant=T&order=newest&limit=20`, the same columns with the key and the channel, **More** for older ones) |
//! | `GET /keys/page` | the keys page (K9): the operator pastes the admin token, or a tenant its management token; the page lists the records database's keys (`GET /admin/keys`, paged, the file's keys read-only), creates one (`POST /admin/keys`, the secret shown once with a **Copy** button), changes its quota and limits (`PATCH /admin/keys/{id}`, an empty field clears), rotates it (`POST /admin/keys/{id}/rotate`, with a grace) and revokes it after a confirmation in the page (`DELETE /admin/keys/{id}`); with the admin token it also lists tenants with their balance (`GET /admin/tenants`), tops one up, creates one and makes a tenant's management token (shown once). A tenant's token (answered 403 by the tenant routes) sees its own tenant's keys only |
//! | `GET /pages/codes.json` | the gateway code table ([`codes::codes_json`]) |
//! | `GET /pages/{style.css, keys.css, pages.js, usage.js, admin.js, keys.js}` | the pages' assets |
//!
//! The pages hold no data and need no credential; the key and the token stay in the
//! page's memory only (password fields without a `name`, a Content-Security-Policy with
//! `form-action 'none'`, so a submission can never put them in a URL), and go to the
//! server only in the `Authorization` header of the JSON calls. A secret the keys page
//! is answered with (a new key, a rotated one, a tenant's token) is shown once, as
//! text, and leaves the page when dismissed or when its form is used again.

pub mod codes;
pub mod rejections;

use axum::Router;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName};

pub use rejections::{RejectionLog, RejectionRing};

const USAGE_HTML: &str = include_str!("../../assets/pages/usage.html");
const ADMIN_HTML: &str = include_str!("../../assets/pages/admin.html");
const KEYS_HTML: &str = include_str!("../../assets/pages/keys.html");
const STYLE_CSS: &str = include_str!("../../assets/pages/style.css");
const KEYS_CSS: &str = include_str!("../../assets/pages/keys.css");
const PAGES_JS: &str = include_str!("../../assets/pages/pages.js");
const USAGE_JS: &str = include_str!("../../assets/pages/usage.js");
const ADMIN_JS: &str = include_str!("../../assets/pages/admin.js");
const KEYS_JS: &str = include_str!("../../assets/pages/keys.js");

/// Scripts and styles from this origin only, no inline code, no form submissions, no
/// framing: the pages' own script is the only thing that sees the key.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (CONTENT_TYPE, content_type),
            (CACHE_CONTROL, "no-cache"),
            (HeaderName::from_static("content-security-policy"), CSP),
            (HeaderName::from_static("x-content-type-options"), "nosniff"),
            (HeaderName::from_static("referrer-policy"), "no-referrer"),
        ],
        body,
    )
        .into_response()
}

/// The pages' routes (public: they hold no data).
pub fn routes() -> Router {
    const HTML: &str = "text/html; charset=utf-8";
    const CSS: &str = "text/css; charset=utf-8";
    const JS: &str = "text/javascript; charset=utf-8";
    Router::new()
        .route("/usage/page", get(|| async { asset(HTML, USAGE_HTML) }))
        .route("/admin/page", get(|| async { asset(HTML, ADMIN_HTML) }))
        .route("/keys/page", get(|| async { asset(HTML, KEYS_HTML) }))
        .route("/pages/style.css", get(|| async { asset(CSS, STYLE_CSS) }))
        .route("/pages/keys.css", get(|| async { asset(CSS, KEYS_CSS) }))
        .route("/pages/pages.js", get(|| async { asset(JS, PAGES_JS) }))
        .route("/pages/usage.js", get(|| async { asset(JS, USAGE_JS) }))
        .route("/pages/admin.js", get(|| async { asset(JS, ADMIN_JS) }))
        .route("/pages/keys.js", get(|| async { asset(JS, KEYS_JS) }))
        .route(
            "/pages/codes.json",
            get(|| async {
                static CODES: std::sync::OnceLock<String> = std::sync::OnceLock::new();
                let body = CODES.get_or_init(|| codes::codes_json().to_string());
                (
                    [
                        (CONTENT_TYPE, "application/json"),
                        (CACHE_CONTROL, "no-cache"),
                    ],
                    body.as_str(),
                )
            }),
        )
}
