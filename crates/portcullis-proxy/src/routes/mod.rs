//! The gateway's routes: the model routes ([`api`]), the operational routes ([`ops`])
//! and the admin routes ([`admin`]; [`keys`] and [`usage`] with a records database). The stack they run on is assembled in
//! [`crate::app`]; the admin routes reach it through [`crate::running`].

pub(crate) mod admin;
pub(crate) mod api;
pub(crate) mod keys;
pub(crate) mod ops;
pub(crate) mod records_api;
pub(crate) mod usage;

use axum::extract::Request;
use subtle::ConstantTimeEq;

/// Whether `req` carries `token` as its bearer token (`Authorization: Bearer …`),
/// compared in constant time: the admin and metrics tokens.
fn bearer_is(req: &Request, token: &str) -> bool {
    let given = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    bool::from(given.as_bytes().ct_eq(token.as_bytes()))
}
