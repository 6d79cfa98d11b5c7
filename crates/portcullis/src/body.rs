//! Holding something until the response body ends (L3).

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Something a layer holds for a request — a slot lease, window reservations. It is
/// given back by being dropped; while held it may need polling to stay alive (lease
/// renewal).
pub trait Hold: Send + 'static {
    /// Called when the response future or body is polled and still pending; may
    /// register a timer with `cx` to be polled again (e.g. to renew a lease). A request
    /// that completes at once never calls it.
    fn keep_alive(&mut self, _cx: &mut Context<'_>) {}
    /// Called just before the guard is given back because the body reached its end
    /// (or failed). A guard dropped without this call was abandoned mid-way: the
    /// client went away while the answer was still coming.
    fn finished(&mut self) {}
    /// Called once the inner service's call ended: with its answer
    /// (`CallEnd::Answered`) or an error. A guard that settles by how the call ended
    /// (refund what was never sent, L5) keeps it.
    fn call_ended(&mut self, _end: portcullis_core::CallEnd) {}
}

pin_project! {
    /// A response body that holds `G` until the body ends: end of stream, an error,
    /// or being dropped (a client disconnect). Everything else is forwarded unchanged.
    pub struct HoldBody<B, G> {
        #[pin]
        inner: B,
        guard: Option<G>,
    }
}

impl<B: Body, G: Hold> HoldBody<B, G> {
    /// Wraps `inner`. A body that is already at its end releases `guard` at once.
    pub fn new(inner: B, guard: G) -> Self {
        let guard = if inner.is_end_stream() {
            let mut guard = guard;
            guard.finished();
            None
        } else {
            Some(guard)
        };
        Self { inner, guard }
    }

    /// Wraps `inner` holding `guard` if there is one.
    pub fn holding(inner: B, guard: Option<G>) -> Self {
        match guard {
            Some(g) => Self::new(inner, g),
            None => Self::unguarded(inner),
        }
    }

    /// Wraps `inner` holding nothing (the layer had nothing to hold for this request).
    pub fn unguarded(inner: B) -> Self {
        Self { inner, guard: None }
    }

    /// Whether the guard is still held.
    pub fn is_holding(&self) -> bool {
        self.guard.is_some()
    }
}

impl<B: Body, G: Hold> Body for HoldBody<B, G> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let mut inner = this.inner;
        let res = inner.as_mut().poll_frame(cx);
        let ended = match &res {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => true,
            // Release as soon as the end is visible, not when the next poll finds it.
            Poll::Ready(Some(Ok(_))) => inner.is_end_stream(),
            Poll::Pending => {
                // Only a body that is still waiting needs its hold kept alive.
                if let Some(g) = this.guard.as_mut() {
                    g.keep_alive(cx);
                }
                false
            }
        };
        if ended {
            if let Some(mut g) = this.guard.take() {
                g.finished();
            }
        }
        res
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: std::fmt::Debug, G> std::fmt::Debug for HoldBody<B, G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HoldBody")
            .field("inner", &self.inner)
            .field("holding", &self.guard.is_some())
            .finish()
    }
}
