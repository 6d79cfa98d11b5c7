//! The model routes (P2): the vendors' routes, and the same under `/native` with
//! every rejection in the native body and codes (E1).

use super::ops::{Ops, not_found};
use crate::auth::KeyTable;
use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, on_service, post_service};
use portcullis::core::Dialect;
use std::sync::Arc;

/// The model routes on one service stack: only the methods the gateway prices and
/// limits (P2, P6):
///
/// | route | operation |
/// |---|---|
/// | `POST /v1/chat/completions` | generation (OpenAI) |
/// | `POST /v1/responses` | generation (OpenAI Responses API; usage from `response.completed`) |
/// | `GET`, `DELETE /v1/responses/{id}`, `POST …/cancel`, `GET …/input_items` | a stored response: sent to the channel that created it, counted as a request, not billed |
/// | `POST /v1/images/generations`, `/v1/images/edits` (multipart) | image generation: `n` images against the image tiers and `per_image` price |
/// | `POST /v1/videos` | a video job: one video against the video tiers; its `per_video` price held until its end is known, then settled or refunded (B7) |
/// | `GET`, `DELETE /v1/videos/{id}`, `GET …/content` | a video job: sent to the channel that created it, counted as a request, not billed; a poll answered the job's end resolves its held price (B7) |
/// | `POST /v1/messages` | generation (Anthropic) |
/// | `POST /v1/embeddings` | embeddings (OpenAI) |
/// | `POST /v1/messages/count_tokens` | token counting (Anthropic), free |
/// | `POST /v1beta/models/{model}:{method}`, `POST /v1/models/{model}:{method}` | Gemini: `generateContent`, `streamGenerateContent`, `embedContent`, `batchEmbedContents`, `countTokens` (free) |
///
/// Gemini's other methods (`batchGenerateContent`, `predictLongRunning`, …) are 404 in
/// Gemini's format, before any key is read and never forwarded. Every route is also
/// served under `/native`.
pub(crate) fn routes<S, St>(stack: S) -> Router<Arc<Ops<St>>>
where
    S: tower::Service<Request, Error = std::convert::Infallible> + Clone + Send + Sync + 'static,
    S::Response: IntoResponse + 'static,
    S::Future: Send + 'static,
    St: Send + Sync + 'static,
{
    let gemini =
        || post_service(stack.clone()).route_layer(axum::middleware::from_fn(served_gemini_method));
    let native = axum::middleware::from_fn(native_errors);
    let mut router = Router::new();
    for (path, methods) in VENDOR_ROUTES {
        router = router
            .route(path, on_service(methods, stack.clone()))
            .route(
                &format!("/native{path}"),
                // The same requests, every rejection in the native body and 429xx codes (E1).
                on_service(methods, stack.clone()).route_layer(native.clone()),
            );
    }
    for path in GEMINI_ROUTES {
        router = router.route(path, gemini()).route(
            &format!("/native{path}"),
            gemini().route_layer(native.clone()),
        );
    }
    router
}

/// The OpenAI and Anthropic routes and their methods.
const VENDOR_ROUTES: [(&str, MethodFilter); 13] = [
    ("/v1/chat/completions", MethodFilter::POST),
    ("/v1/responses", MethodFilter::POST),
    (
        "/v1/responses/{id}",
        MethodFilter::GET.or(MethodFilter::DELETE),
    ),
    ("/v1/responses/{id}/cancel", MethodFilter::POST),
    ("/v1/responses/{id}/input_items", MethodFilter::GET),
    ("/v1/embeddings", MethodFilter::POST),
    ("/v1/images/generations", MethodFilter::POST),
    ("/v1/images/edits", MethodFilter::POST),
    ("/v1/videos", MethodFilter::POST),
    (
        "/v1/videos/{id}",
        MethodFilter::GET.or(MethodFilter::DELETE),
    ),
    ("/v1/videos/{id}/content", MethodFilter::GET),
    ("/v1/messages", MethodFilter::POST),
    ("/v1/messages/count_tokens", MethodFilter::POST),
];

/// Gemini's model methods, under both API versions (the official SDK may call either).
const GEMINI_ROUTES: [&str; 2] = ["/v1beta/models/{model_action}", "/v1/models/{model_action}"];

/// Marks a request whose rejections are answered in the native dialect while its body
/// speaks a vendor's: set with `Dialect::Native` for the error mapping, which reads it
/// first; [`wire_dialect`] then takes both away for the layers below, which read the
/// vendor's dialect from the path.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NativeErrors;

/// `/native/<vendor route>`: the vendor route, with native errors (E1).
async fn native_errors(mut req: Request, next: axum::middleware::Next) -> Response {
    let uri = req.uri();
    let path = uri.path().strip_prefix("/native").unwrap_or(uri.path());
    let rest = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    match rest.parse::<http::Uri>() {
        Ok(stripped) => *req.uri_mut() = stripped,
        Err(_) => return not_found(req).await,
    }
    req.extensions_mut().insert(Dialect::Native);
    req.extensions_mut().insert(NativeErrors);
    next.run(req).await
}

/// Above the error mapping: a request whose key asks for native errors (`errors =
/// "native"`) is marked as a `/native` route's request is (one more lookup of the key
/// by hash; authentication proper stays below).
pub(crate) fn native_for_key<B>(keys: &KeyTable, mut req: http::Request<B>) -> http::Request<B> {
    let native = keys
        .identify(req.headers(), req.uri())
        .is_ok_and(|e| e.native_errors);
    if native && req.extensions().get::<NativeErrors>().is_none() {
        req.extensions_mut().insert(Dialect::Native);
        req.extensions_mut().insert(NativeErrors);
    }
    req
}

/// Below the error mapping: a request marked [`NativeErrors`] goes on in the dialect of
/// its path.
pub(crate) fn wire_dialect<B>(mut req: http::Request<B>) -> http::Request<B> {
    if req.extensions_mut().remove::<NativeErrors>().is_some() {
        req.extensions_mut().remove::<Dialect>();
    }
    req
}

/// Lets a Gemini request through only on a method of
/// [`GEMINI_METHODS`](crate::forward::GEMINI_METHODS).
async fn served_gemini_method(req: Request, next: axum::middleware::Next) -> Response {
    if crate::forward::gemini_method_served(req.uri().path()) {
        next.run(req).await
    } else {
        not_found(req).await
    }
}
