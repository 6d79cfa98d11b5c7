//! Reading the first frames of an attempt's answer: the first-chunk gate of a
//! successful answer (F4) and the prefix of an error answer the classifier reads (F5).

use super::layer::Shared;
use super::{ChunkKind, FailoverBody};
use bytes::{Buf, Bytes};
use http::Response;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use portcullis_core::Dialect;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Past this many bytes a preamble that never ends is content by another name.
const MAX_PREAMBLE: usize = 64 * 1024;

/// How the gate ended.
pub(crate) enum Gated<B: Body> {
    /// The first content chunk arrived (or the answer ended): the client gets it.
    Committed(Response<FailoverBody<B>>),
    /// The answer failed, or stayed silent, before its first content chunk.
    Failed,
}

/// F4: holds a successful answer until its first content chunk, bounded by
/// `first_chunk_timeout`; preamble frames are kept and sent ahead of it.
pub(crate) struct Gate<B: Body> {
    parts: Option<http::response::Parts>,
    /// The provider's body, boxed once per request: the gate polls it before it is
    /// handed on in the [`FailoverBody`].
    body: Option<Pin<Box<B>>>,
    held: VecDeque<Frame<B::Data>>,
    held_bytes: usize,
    dialect: Dialect,
    /// Armed at the first frame that is not ready at once: a small answer is usually
    /// whole by the time its head is, and needs no timer (boxed then, and only then).
    timer: Option<Pin<Box<Sleep>>>,
    /// `Some` on an event stream, the only kind that can carry an error event after
    /// content.
    broken: Option<Arc<AtomicU64>>,
}

impl<B: Body> Gate<B>
where
    B::Data: From<Bytes>,
{
    /// A gate on the successful answer `res` of an attempt for a `dialect` client.
    pub(crate) fn new<C>(shared: &Shared<C>, res: Response<B>, dialect: Dialect) -> Self {
        let (parts, body) = res.into_parts();
        let sse = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        Self {
            parts: Some(parts),
            body: Some(Box::pin(body)),
            held: VecDeque::new(),
            held_bytes: 0,
            dialect,
            timer: None,
            broken: sse.then(|| shared.state.counters.broken_streams.clone()),
        }
    }

    /// Reads frames until the answer commits or fails (`shared`: the layer's first-chunk
    /// timeout and classifier).
    pub(crate) fn poll_gate<C>(
        &mut self,
        shared: &Shared<C>,
        cx: &mut Context<'_>,
    ) -> Poll<Gated<B>> {
        loop {
            let Some(body) = self.body.as_mut() else {
                return Poll::Ready(Gated::Failed);
            };
            if body.is_end_stream() {
                return Poll::Ready(self.commit());
            }
            // (The body's error is dropped here: a failed read is all the gate needs.)
            let next = match body.as_mut().poll_frame(cx) {
                Poll::Ready(next) => next,
                Poll::Pending => {
                    let timeout = shared.config.settings.first_chunk_timeout;
                    let timer = self
                        .timer
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                    ready!(timer.as_mut().poll(cx));
                    return Poll::Ready(self.fail());
                }
            };
            let frame = match next {
                None => return Poll::Ready(self.commit()),
                Some(Err(_)) => return Poll::Ready(self.fail()),
                Some(Ok(f)) => f,
            };
            let Some(data) = frame.data_ref() else {
                self.held.push_back(frame);
                continue;
            };
            if !data.has_remaining() {
                continue;
            }
            let kind = match &shared.config.chunks {
                Some(classify) => classify(self.dialect, data.chunk()),
                None => ChunkKind::Content,
            };
            self.held_bytes += data.remaining();
            self.held.push_back(frame);
            match kind {
                ChunkKind::Content => return Poll::Ready(self.commit()),
                ChunkKind::Error => return Poll::Ready(self.fail()),
                ChunkKind::Preamble if self.held_bytes > MAX_PREAMBLE => {
                    return Poll::Ready(self.commit());
                }
                ChunkKind::Preamble => {}
            }
        }
    }

    fn fail(&mut self) -> Gated<B> {
        self.body = None;
        Gated::Failed
    }

    fn commit(&mut self) -> Gated<B> {
        match (self.parts.take(), self.body.take()) {
            (Some(parts), Some(body)) => Gated::Committed(Response::from_parts(
                parts,
                FailoverBody::new(
                    std::mem::take(&mut self.held),
                    body,
                    self.dialect,
                    self.broken.take(),
                ),
            )),
            _ => Gated::Failed,
        }
    }
}

/// Reads up to `limit` bytes of an error answer (bounded in time); returns them and
/// the rest of the body.
pub(crate) async fn read_prefix<B>(body: B, limit: usize, within: Duration) -> (Bytes, Pin<Box<B>>)
where
    B: Body,
{
    let mut body = Box::pin(body);
    let mut buf = bytes::BytesMut::new();
    let until = Instant::now() + within;
    while buf.len() < limit && !body.is_end_stream() {
        match tokio::time::timeout_at(until, body.frame()).await {
            Ok(Some(Ok(f))) => {
                if let Ok(mut d) = f.into_data() {
                    let take = d.remaining().min(limit - buf.len());
                    buf.extend_from_slice(&d.copy_to_bytes(take));
                }
            }
            _ => break,
        }
    }
    (buf.freeze(), body)
}
