use super::{Form, MappedBody, X_REQUEST_ID, error_response};
use crate::BoxError;
use bytes::Bytes;
use http::{HeaderValue, Response};
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

pin_project! {
    /// Response future of [`ErrorMapping`](super::ErrorMapping): the inner service's
    /// response with `x-request-id`, or its error rendered in the client's dialect (or
    /// as a gRPC status).
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        // Waiting for the inner service.
        Inner {
            #[pin]
            future: F,
            form: Form,
            request_id: HeaderValue,
        },
        // Answered without the inner service (its `poll_ready` had failed).
        Ready {
            response: Option<Response<Full<Bytes>>>,
        },
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn inner(future: F, form: Form, request_id: HeaderValue) -> Self {
        Self {
            kind: Kind::Inner {
                future,
                form,
                request_id,
            },
        }
    }

    pub(super) fn ready(response: Response<Full<Bytes>>) -> Self {
        Self {
            kind: Kind::Ready {
                response: Some(response),
            },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<MappedBody<B>>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let rendered = match self.project().kind.project() {
            KindProj::Inner {
                future,
                form,
                request_id,
            } => match ready!(future.poll(cx)) {
                Ok(response) => {
                    let mut response = response.map(Either::Left);
                    // Like tower-http's PropagateRequestId: an id the application set
                    // itself is kept.
                    if !response.headers().contains_key(X_REQUEST_ID) {
                        response
                            .headers_mut()
                            .insert(X_REQUEST_ID, request_id.clone());
                    }
                    return Poll::Ready(Ok(response));
                }
                Err(err) => {
                    let err: BoxError = err.into();
                    error_response(&*err, *form, request_id)
                }
            },
            KindProj::Ready { response } => response
                .take()
                .expect("ResponseFuture polled after completion"),
        };
        Poll::Ready(Ok(rendered.map(Either::Right)))
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
