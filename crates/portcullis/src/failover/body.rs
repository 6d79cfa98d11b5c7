//! The body of a committed attempt: the frames held by the first-chunk gate, then the
//! rest of the provider's answer; a failure after commit becomes one in-stream error
//! event in the client's dialect (F3).

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use portcullis_core::{Dialect, GatewayCode, LayerKind, Rejection};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

/// Response body of [`Failover`](super::Failover). The provider's body is boxed once
/// per request: the first-chunk gate polls it before it is handed on.
pub struct FailoverBody<B: Body> {
    prefix: VecDeque<Frame<B::Data>>,
    /// Bytes of data in `prefix`, for the size hint.
    prefix_bytes: u64,
    inner: Pin<Box<B>>,
    dialect: Dialect,
    /// `Some` on a committed event stream: a failure is turned into an error event
    /// (and counted here) instead of cutting the stream.
    broken: Option<Arc<AtomicU64>>,
    done: bool,
    _in_flight: Option<crate::gauge::InFlight>,
}

// Nothing in it is pinned in place: the provider's body is behind its own box.
impl<B: Body> Unpin for FailoverBody<B> {}

impl<B: Body> FailoverBody<B> {
    pub(crate) fn new(
        prefix: VecDeque<Frame<B::Data>>,
        inner: Pin<Box<B>>,
        dialect: Dialect,
        broken: Option<Arc<AtomicU64>>,
    ) -> Self {
        let prefix_bytes = prefix
            .iter()
            .filter_map(|f| f.data_ref())
            .map(|d| d.remaining() as u64)
            .sum();
        Self {
            prefix,
            prefix_bytes,
            inner,
            dialect,
            broken,
            done: false,
            _in_flight: None,
        }
    }

    /// Counts the request in flight in the failover layer until the body is done.
    pub(crate) fn counting(mut self, token: crate::gauge::InFlight) -> Self {
        self._in_flight = Some(token);
        self
    }
}

impl<B> Body for FailoverBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(f) = this.prefix.pop_front() {
            if let Some(d) = f.data_ref() {
                this.prefix_bytes -= d.remaining() as u64;
            }
            return Poll::Ready(Some(Ok(f)));
        }
        if this.done {
            return Poll::Ready(None);
        }
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Err(e))) => match &this.broken {
                Some(counter) => {
                    // F3: content already reached the client; no replay. The client
                    // gets an error event in its dialect and a clean end; the forwarder
                    // has marked the partial usage for reconciliation.
                    counter.fetch_add(1, Ordering::Relaxed);
                    this.done = true;
                    drop(e);
                    let r = Rejection::new(GatewayCode::UpstreamFailed, LayerKind::Failover);
                    let event = crate::error_map::stream_error_event(&r, this.dialect);
                    Poll::Ready(Some(Ok(Frame::data(B::Data::from(event)))))
                }
                None => Poll::Ready(Some(Err(e))),
            },
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_empty() && (self.done || self.inner.is_end_stream())
    }

    /// The held bytes plus the provider's hint: a whole JSON answer held by the gate
    /// keeps its exact length, so the client gets `content-length` (and can reuse its
    /// connection as soon as the last byte arrives) instead of a chunked body. A stream
    /// that may still gain an error event (F3) gives no upper bound.
    fn size_hint(&self) -> SizeHint {
        if self.done {
            return SizeHint::with_exact(self.prefix_bytes);
        }
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(self.prefix_bytes));
        if self.broken.is_none() {
            if let Some(upper) = inner.upper() {
                hint.set_upper(upper.saturating_add(self.prefix_bytes));
            }
        }
        hint
    }
}
