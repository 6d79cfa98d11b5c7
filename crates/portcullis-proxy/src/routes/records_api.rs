//! What the records admin routes share ([`super::keys`], [`super::usage`]): their
//! state, who calls (the admin token or a tenant's management token), and the answers
//! they refuse with.

// The helpers' error is the handler's answer itself (a 400 naming the field, a 404, a
// 503): it is returned at once, never carried, so its size costs nothing.
#![allow(clippy::result_large_err)]

use crate::keys::Directory;
use crate::running::Stack;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use portcullis_records::RecordsError;
use serde_json::{Value, json};
use std::sync::Arc;

/// The routes' state: the admin token, the records database and the running stack.
pub(super) struct Keys<St> {
    pub(super) token: Option<String>,
    pub(super) directory: Arc<Directory>,
    pub(super) stack: Arc<Stack<St>>,
}

/// Who calls: the admin token, or a tenant's management token.
pub(super) struct Caller {
    pub(super) actor: String,
    /// The tenant a management token is kept to.
    pub(super) scope: Option<String>,
}

/// What a handler answers: its response, or the refusal it stopped at (`?`).
pub(super) type Answer = Result<Response, Response>;

pub(super) fn answer(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

pub(super) fn refused(status: StatusCode, message: impl Into<String>) -> Response {
    answer(status, json!({"error": {"message": message.into()}}))
}

pub(super) fn invalid(field: &str, reason: impl std::fmt::Display) -> Response {
    answer(
        StatusCode::BAD_REQUEST,
        json!({"error": {"message": format!("{field}: {reason}"), "field": field}}),
    )
}

pub(super) fn records_error(e: RecordsError) -> Response {
    match e {
        RecordsError::Unavailable(why) => {
            tracing::warn!(error = %why, "a records change was refused: the database is unavailable");
            let mut r = refused(
                StatusCode::SERVICE_UNAVAILABLE,
                "The records database is unavailable: nothing was changed. Keys already \
                 known are still served. Retry later.",
            );
            r.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("1"),
            );
            r
        }
        RecordsError::NotFound => refused(StatusCode::NOT_FOUND, "No such record."),
        RecordsError::Conflict(m) => refused(StatusCode::CONFLICT, m),
        RecordsError::Invalid(i) => invalid(i.field, i.reason),
        RecordsError::Schema(m) => {
            tracing::error!(error = %m, "the records database answered an error");
            refused(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The records database answered an error.",
            )
        }
    }
}

impl<St> Keys<St> {
    /// The caller, or the answer to one who may not call.
    pub(super) fn caller(&self, req: &Request, tenants_allowed: bool) -> Result<Caller, Response> {
        let Some(token) = &self.token else {
            return Err(refused(StatusCode::NOT_FOUND, "No such route."));
        };
        if super::bearer_is(req, token) {
            return Ok(Caller {
                actor: "admin".into(),
                scope: None,
            });
        }
        let bearer = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match bearer.and_then(|b| self.directory.token(&self.directory.hasher().digest(b))) {
            Some(t) if tenants_allowed => Ok(Caller {
                actor: format!("token:{}", t.id),
                scope: Some(t.tenant),
            }),
            Some(_) => Err(refused(
                StatusCode::FORBIDDEN,
                "A tenant's management token may use the key routes only.",
            )),
            None => Err(refused(StatusCode::UNAUTHORIZED, "Admin token required.")),
        }
    }
}
