//! The request to the provider: the channel's URI with only the query parameters the
//! vendor needs, only the headers the allow-list lets through (never a client
//! credential), the channel's credential, and only the Gemini methods the gateway
//! prices (P2).

use super::error::upstream_failed;
use super::headers::{AllowLists, retain};
use crate::catalog::Route;
use bytes::Bytes;
use http::header::HeaderMap;
use http::{Request, Uri};
use http_body_util::BodyExt;
use http_body_util::Full;
use portcullis::BoxError;
use portcullis_core::Dialect;
use portcullis_core::{GatewayCode, LayerKind, Rejection, UpstreamFailure};
use portcullis_dialects::Operation;

/// The Gemini methods the gateway prices and limits (P2, P6); any other
/// (`batchGenerateContent`, `predictLongRunning`, `generateAnswer`, …) is never
/// forwarded.
pub const GEMINI_METHODS: [&str; 5] = [
    "generateContent",
    "streamGenerateContent",
    "embedContent",
    "batchEmbedContents",
    "countTokens",
];

/// Whether a Gemini path names a served method: the last segment is
/// `{model}:{method}` with a method of [`GEMINI_METHODS`] (read as the dialect crate
/// reads the model: up to the last `:` after the last `/models/`).
pub fn gemini_method_served(path: &str) -> bool {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    path.rfind("/models/")
        .and_then(|at| path[at + "/models/".len()..].rsplit_once(':'))
        .is_some_and(|(model, method)| {
            !model.is_empty() && !model.contains(['/', ':']) && GEMINI_METHODS.contains(&method)
        })
}

/// The client's 404 for a Gemini method that is not served: the last guard of "only
/// what is priced is sent" (the route table refuses other Gemini methods first).
pub(super) fn unserved_gemini_method() -> BoxError {
    Box::new(
        Rejection::new(GatewayCode::NotFound, LayerKind::Request).with_message(format!(
            "Only these methods are served: {}.",
            GEMINI_METHODS.join(", ")
        )),
    )
}

/// Whether a successful answer to a request for `operation` at `path` creates an
/// object the provider keeps for later requests: a Responses API response, a video job
/// (P6). Both are `POST`-only routes.
pub(super) fn creates_object(operation: Operation, path: &str) -> bool {
    operation == Operation::Video
        || operation == Operation::Generate && path.ends_with("/responses")
}

/// The request of a same-dialect attempt renamed for a channel that knows the public
/// `model` as `upstream` (X1): the Gemini path's model segment, or the body's
/// top-level `model` (a body that is not a JSON object, such as an image edit's
/// multipart form, or one without a `model`, goes as it is).
pub(super) async fn rename_model(
    dialect: Dialect,
    parts: &mut http::request::Parts,
    body: Full<Bytes>,
    model: &str,
    upstream: &str,
) -> Result<Full<Bytes>, BoxError> {
    if dialect == Dialect::Gemini {
        let renamed = parts.uri.path().replacen(
            &format!("/models/{model}:"),
            &format!("/models/{upstream}:"),
            1,
        );
        let pq = match parts.uri.query() {
            Some(q) => format!("{renamed}?{q}"),
            None => renamed,
        };
        parts.uri = pq
            .parse()
            .map_err(|_| upstream_failed(UpstreamFailure::Unsendable, "invalid upstream URI"))?;
        return Ok(body);
    }
    let bytes = body.collect().await.map_err(|e| match e {})?.to_bytes();
    let renamed = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|mut v| {
            let slot = v.as_object_mut()?.get_mut("model")?;
            *slot = serde_json::Value::String(upstream.to_owned());
            serde_json::to_vec(&v).ok()
        });
    Ok(Full::new(renamed.map_or(bytes, Bytes::from)))
}

/// The upstream URI: the channel's base URL + the client's path, and of the client's
/// query only the parameters the vendor's API needs (Gemini `alt`, Anthropic `beta`):
/// never a `key=` or `access_token=` (Gemini client credentials), nor a parameter
/// that picks a project or quota user on the operator's account.
fn upstream_uri(route: &Route, uri: &Uri) -> Result<Uri, BoxError> {
    let mut s = String::with_capacity(route.base_url.len() + 64);
    s.push_str(&route.base_url);
    s.push_str(uri.path());
    if let Some(q) = uri.query() {
        let mut first = true;
        for kv in q.split('&') {
            let name = kv.split_once('=').map_or(kv, |(k, _)| k);
            if portcullis_dialects::providers::upstream_query_allowed(route.dialect, name) {
                s.push(if first { '?' } else { '&' });
                s.push_str(kv);
                first = false;
            }
        }
    }
    s.parse()
        .map_err(|_| upstream_failed(UpstreamFailure::Unsendable, "invalid upstream URI"))
}

fn inject_credential(route: &Route, h: &mut HeaderMap) {
    let Some(cred) = route.credential.clone() else {
        return;
    };
    portcullis_dialects::providers::inject_credential(route.dialect, cred, h);
}

/// The request to the provider: the channel's URI, only the headers the allow-list
/// lets through (never a client credential) and the channel's credential.
pub(super) fn upstream_request(
    allow: &AllowLists,
    route: &Route,
    parts: &mut http::request::Parts,
    body: Full<Bytes>,
) -> Result<Request<Full<Bytes>>, BoxError> {
    let uri = upstream_uri(route, &parts.uri)?;
    let mut headers = std::mem::take(&mut parts.headers);
    retain(&mut headers, |n| allow.request_allowed(route, n));
    inject_credential(route, &mut headers);
    let mut up = Request::builder()
        .method(parts.method.clone())
        .uri(uri)
        .body(body)
        .map_err(|_| upstream_failed(UpstreamFailure::Unsendable, "invalid upstream request"))?;
    *up.headers_mut() = headers;
    Ok(up)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p2_only_priced_gemini_methods_are_served() {
        for ok in [
            "/v1beta/models/gemini-2.5-flash:generateContent",
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            "/v1/models/m:generateContent",
            "/v1/models/m:embedContent",
            "/v1beta/models/m:batchEmbedContents",
            "/v1beta/models/m:countTokens",
        ] {
            assert!(gemini_method_served(ok), "{ok}");
        }
        for no in [
            "/v1beta/models/m:batchGenerateContent",
            "/v1beta/models/m:generateAnswer",
            "/v1beta/models/m:predictLongRunning",
            "/v1beta/models/m:generateContent:embedContent",
            "/v1beta/models/:generateContent",
            "/v1beta/models/m",
            "/v1beta/models/a/b:generateContent/x",
            "/v1beta/tunedModels/m:generateContent",
        ] {
            assert!(!gemini_method_served(no), "{no}");
        }
    }
}
