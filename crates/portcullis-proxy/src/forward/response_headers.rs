//! The layer that passes to the client only the response headers of the allow-list.

use super::headers::{AllowLists, retain};
use http::Response;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::Service;

/// Applies [`ResponseHeaders`].
#[derive(Clone)]
pub struct ResponseHeadersLayer {
    allow: Arc<AllowLists>,
}

impl ResponseHeadersLayer {
    /// The response allow-list of `allow`.
    pub fn new(allow: Arc<AllowLists>) -> Self {
        Self { allow }
    }
}

impl<S> tower::Layer<S> for ResponseHeadersLayer {
    type Service = ResponseHeaders<S>;
    fn layer(&self, inner: S) -> ResponseHeaders<S> {
        ResponseHeaders {
            inner,
            allow: self.allow.clone(),
        }
    }
}

/// Passes to the client only the response headers of the allow-list (P2):
/// placed right below the error mapping, so it sees every answer the layers below
/// return (a provider's, passed through) while those layers still read the provider's
/// `Retry-After` and rate-limit headers, and the gateway's own rejections (rendered
/// above it) keep theirs.
#[derive(Clone)]
pub struct ResponseHeaders<S> {
    inner: S,
    allow: Arc<AllowLists>,
}

impl<S, R, B> Service<R> for ResponseHeaders<S>
where
    S: Service<R, Response = Response<B>>,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = ResponseHeadersFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        ResponseHeadersFuture {
            inner: self.inner.call(req),
            allow: self.allow.clone(),
        }
    }
}

pin_project! {
    /// The future of [`ResponseHeaders`].
    pub struct ResponseHeadersFuture<F> {
        #[pin]
        inner: F,
        allow: Arc<AllowLists>,
    }
}

impl<F, B, E> Future for ResponseHeadersFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut res = std::task::ready!(this.inner.poll(cx))?;
        let allow = &this.allow;
        retain(res.headers_mut(), |n| allow.response_allowed(n));
        Poll::Ready(Ok(res))
    }
}
