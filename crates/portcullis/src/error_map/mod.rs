//! Every rejection and error of the stack → a response in the client's dialect
//! (E1–E4), with `x-request-id` on every request and response (E3).
//!
//! Put [`ErrorMappingLayer`] outermost: the stack's error type becomes
//! [`Infallible`](std::convert::Infallible), so it mounts in axum's `Router::layer` with no
//! `HandleErrorLayer` (L2).
//!
//! - A [`Rejection`] from any layer below (found by downcast, also through
//!   [`source`](std::error::Error::source) chains such as `tower::buffer`'s
//!   `ServiceError`) is rendered by [`render`] with its status, body and `Retry-After`,
//!   `X-RateLimit-*` and `x-should-retry` headers (E1, E2).
//! - Any other error becomes a 500 saying only `unexpected gateway error (request id
//!   …)`; the error itself is logged with `tracing::error!` and the request id, never
//!   sent (E3).
//! - The dialect: a [`Dialect`] in the request extensions, else the layer's
//!   [`dialect`](ErrorMappingLayer::dialect), else [`Dialect::from_path`].
//! - gRPC (feature `grpc`): a request whose `content-type` is `application/grpc…`
//!   (`is_grpc`) — or every request, with `ErrorMappingLayer::grpc` — is answered with
//!   a trailers-only gRPC status instead (`render_grpc`): `RESOURCE_EXHAUSTED` for
//!   429s, `UNAVAILABLE` for 503s, …, the gateway code in `google.rpc.ErrorInfo` and
//!   the delay in `google.rpc.RetryInfo`.
//! - The request id: the request's `x-request-id` if it has a usable one (for instance
//!   set by tower-http's `SetRequestIdLayer` outside), else a generated one, inserted
//!   into the request headers before the inner service sees it. Successful responses
//!   pass through untouched except for that header.
//!
//! ```
//! use std::time::Duration;
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::{BodyExt, Full};
//! use portcullis::{BoxError, ErrorMappingLayer};
//! use portcullis::core::{GatewayCode, LayerKind, RateLimitInfo, Rejection};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let svc = ServiceBuilder::new()
//!     .layer(ErrorMappingLayer::new())
//!     // Stands in for a stack of portcullis layers that refused the request.
//!     .service(service_fn(|_req: Request<Full<Bytes>>| async {
//!         let rejection = Rejection::new(GatewayCode::RpmLimit, LayerKind::AnchoredWindow)
//!             .with_retry_after(Some(Duration::from_millis(2_500)))
//!             .with_rate_limits(RateLimitInfo { requests: Some(60), tokens: None });
//!         Err::<Response<Full<Bytes>>, BoxError>(rejection.into())
//!     }));
//!
//! let req = Request::post("/v1/chat/completions").body(Full::default()).unwrap();
//! let Ok(res) = svc.oneshot(req).await; // the error type is Infallible
//!
//! assert_eq!(res.status(), 429);
//! assert_eq!(res.headers()["retry-after"], "3");
//! assert_eq!(res.headers()["x-ratelimit-limit-requests"], "60");
//! assert_eq!(res.headers()["x-ratelimit-remaining-requests"], "0");
//! assert!(res.headers().contains_key("x-request-id"));
//!
//! let body = res.into_body().collect().await.unwrap().to_bytes();
//! let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
//! assert_eq!(json["error"]["type"], "rate_limit_exceeded"); // OpenAI, from the path
//! assert_eq!(json["error"]["code"], "42902");
//! # }
//! ```

mod future;
#[cfg(feature = "grpc")]
mod grpc;
mod layer;
mod render;
mod service;

pub use future::ResponseFuture;
#[cfg(feature = "grpc")]
pub use grpc::{ERROR_DOMAIN, grpc_code, is_grpc, render_grpc};
pub use layer::ErrorMappingLayer;
pub use render::{render, render_internal, stream_error_event};
pub use service::ErrorMapping;

use bytes::Bytes;
use http::{HeaderName, Response};
use http_body_util::{Either, Full};
use portcullis_core::{Dialect, Rejection};
use std::error::Error;
use std::fmt;

/// The response body of [`ErrorMapping`]: the inner service's body, or a rendered
/// error.
pub type MappedBody<B> = Either<B, Full<Bytes>>;

/// `x-request-id`, the request id header (E3).
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// How an error is answered: an HTTP response in a dialect, or a gRPC status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// A JSON body in the dialect, with the E2 headers.
    Http(Dialect),
    /// A trailers-only gRPC status ([`render_grpc`]).
    #[cfg(feature = "grpc")]
    Grpc,
}

/// The first [`Rejection`] in `err`'s source chain.
fn find_rejection<'a>(err: &'a (dyn Error + 'static)) -> Option<&'a Rejection> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(r) = e.downcast_ref::<Rejection>() {
            return Some(r);
        }
        cur = e.source();
    }
    None
}

/// The response for an error of the inner service: its [`Rejection`] rendered, or a
/// 500 that hides the error (logged here with the request id).
fn error_response(
    err: &(dyn Error + Send + Sync + 'static),
    form: Form,
    request_id: &http::HeaderValue,
) -> Response<Full<Bytes>> {
    // `request_id::ensure` only hands out ids that are visible ASCII.
    let id = request_id.to_str().unwrap_or_default();
    match find_rejection(err) {
        Some(rejection) => {
            #[cfg(feature = "metrics")]
            metrics::counter!(
                "portcullis_rejections_total",
                "code" => rejection.code().code().to_string(),
                "layer" => rejection.layer().as_str()
            )
            .increment(1);
            match form {
                Form::Http(dialect) => render(rejection, dialect, id),
                #[cfg(feature = "grpc")]
                Form::Grpc => render_grpc(rejection, id),
            }
        }
        None => {
            #[cfg(feature = "metrics")]
            metrics::counter!("portcullis_rejections_total", "code" => "50001", "layer" => "gateway")
                .increment(1);
            tracing::error!(request_id = id, error = %Chain(err), "unexpected gateway error");
            match form {
                Form::Http(dialect) => render_internal(id, dialect),
                #[cfg(feature = "grpc")]
                Form::Grpc => render_grpc(&render::internal_rejection(id), id),
            }
        }
    }
}

/// `error: source: source…` for logs.
struct Chain<'a>(&'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cur = self.0.source();
        while let Some(e) = cur {
            write!(f, ": {e}")?;
            cur = e.source();
        }
        Ok(())
    }
}

mod request_id {
    //! Request ids: the client's, or a per-process random prefix + a counter.

    use super::X_REQUEST_ID;
    use http::{HeaderMap, HeaderValue};
    use portcullis_core::id;

    /// The request's usable `x-request-id`, or a new one inserted into `headers`.
    ///
    /// Usable: non-empty and visible ASCII (so it can be echoed in a JSON message and
    /// read back by any client); anything else is replaced.
    pub(super) fn ensure(headers: &mut HeaderMap) -> HeaderValue {
        if let Some(id) = headers.get(X_REQUEST_ID) {
            if !id.is_empty() && id.to_str().is_ok() {
                return id.clone();
            }
        }
        let id = generate();
        headers.insert(X_REQUEST_ID, id.clone());
        id
    }

    /// `<16 hex digits of process prefix>-<counter in hex>`: unique within a process,
    /// unlikely to collide across processes, one atomic add and one small allocation.
    fn generate() -> HeaderValue {
        static COUNTER: id::Sequence = id::Sequence::starting_at(0);
        let prefix = id::process_tag();
        let n = COUNTER.next();
        HeaderValue::try_from(format!("{prefix:016x}-{n:x}"))
            .expect("hex digits and '-' are a valid header value")
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn e3_generated_ids_are_unique_and_share_the_prefix() {
            let a = generate();
            let b = generate();
            assert_ne!(a, b);
            let (pa, _) = a.to_str().unwrap().split_once('-').unwrap();
            let (pb, _) = b.to_str().unwrap().split_once('-').unwrap();
            assert_eq!(pa, pb);
            assert_eq!(pa.len(), 16);
        }

        #[test]
        fn e3_unusable_ids_are_replaced() {
            let mut h = HeaderMap::new();
            h.insert(X_REQUEST_ID, HeaderValue::from_static(""));
            let id = ensure(&mut h);
            assert!(!id.is_empty());
            assert_eq!(h[X_REQUEST_ID], id);

            let mut h = HeaderMap::new();
            h.insert(X_REQUEST_ID, HeaderValue::from_bytes(b"caf\xe9").unwrap());
            let id = ensure(&mut h);
            assert!(id.to_str().is_ok());
            assert_eq!(h[X_REQUEST_ID], id);

            let mut h = HeaderMap::new();
            h.insert(X_REQUEST_ID, HeaderValue::from_static("client-1"));
            assert_eq!(ensure(&mut h), "client-1");
        }
    }
}
