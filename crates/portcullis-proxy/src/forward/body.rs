//! The answer's body on its way to the client: passed on frame by frame, watched for
//! usage (`usage.rs`), and cut when the provider goes silent for too long.

use super::translate::Answer;
use super::usage::{JobPoll, Watch};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;
use portcullis::BoxError;
use portcullis_core::{UpstreamError, UpstreamFailure};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

pin_project! {
    /// The upstream's response body, passed through frame by frame (backpressure is
    /// the client's), watched for usage which is recorded before the end is yielded.
    ///
    /// An upstream that sends nothing for `idle` ends the body with an error (the
    /// attempt's outcome becomes unknown): a stalled provider connection must not hold
    /// a slot, a capacity lease and a money reservation forever. Its errors are
    /// [`UpstreamError`]s: [`Idle`](UpstreamFailure::Idle), or
    /// [`Cut`](UpstreamFailure::Cut) when the provider's body broke off.
    pub struct ForwardBody {
        #[pin]
        inner: Either<hyper::body::Incoming, Full<Bytes>>,
        // A translated answer's way back to the client's dialect (X2); `None` on the
        // same-dialect path, which passes the provider's frames as they are.
        answer: Option<Box<Answer>>,
        // The translated answer's last bytes were given.
        finished: bool,
        // Boxed: the usage watcher is most of a kilobyte, and every layer above moves
        // the response (and this body in it) at least once.
        watch: Option<Box<Watch>>,
        // A client's poll of a video job, read for its final status (B7).
        poll: Option<Box<JobPoll>>,
        idle: Duration,
        #[pin]
        silence: tokio::time::Sleep,
    }
}

impl ForwardBody {
    /// The provider's body `inner`, cut after `idle` of silence, its usage recorded
    /// through `watch` (none for an attempt nobody records).
    pub(super) fn new(
        inner: Either<hyper::body::Incoming, Full<Bytes>>,
        idle: Duration,
        watch: Option<Box<Watch>>,
        answer: Option<Box<Answer>>,
    ) -> Self {
        let mut body = Self {
            inner,
            answer,
            finished: false,
            idle,
            silence: tokio::time::sleep(idle),
            watch,
            poll: None,
        };
        // An empty answer is over before anyone polls it, and the layers outside
        // release at once: record now.
        if body.inner.is_end_stream() {
            if let Some(w) = body.watch.as_mut() {
                w.record(true);
            }
        }
        body
    }

    /// Reads the answer as a client's poll of a video job (B7).
    pub(super) fn polled(mut self, poll: Option<Box<JobPoll>>) -> Self {
        match poll {
            Some(mut p) if self.inner.is_end_stream() => p.finish(),
            p => self.poll = p,
        }
        self
    }
}

impl Body for ForwardBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            if *this.finished {
                return Poll::Ready(None);
            }
            let mut inner = this.inner.as_mut();
            let Poll::Ready(res) = inner.as_mut().poll_frame(cx) else {
                if this.silence.as_mut().poll(cx).is_ready() {
                    if let Some(w) = this.watch.as_mut() {
                        w.record(false);
                    }
                    tracing::warn!(
                        idle_ms = this.idle.as_millis() as u64,
                        "upstream sent nothing for the idle timeout"
                    );
                    return Poll::Ready(Some(Err(Box::new(UpstreamError::new(
                        UpstreamFailure::Idle,
                    )))));
                }
                return Poll::Pending;
            };
            this.silence
                .as_mut()
                .reset(tokio::time::Instant::now() + *this.idle);
            let res = res.map(|r| {
                r.map_err(|e| {
                    tracing::debug!(error = %e, "upstream answer broke off");
                    Box::new(UpstreamError::new(UpstreamFailure::Cut)) as BoxError
                })
            });
            if let Some(p) = this.poll.as_mut() {
                match &res {
                    Some(Ok(frame)) => {
                        if let Some(d) = frame.data_ref() {
                            p.push(d);
                        }
                        if inner.is_end_stream() {
                            p.finish();
                        }
                    }
                    None => p.finish(),
                    Some(Err(_)) => {}
                }
            }
            if let Some(w) = this.watch.as_mut() {
                match &res {
                    Some(Ok(frame)) => {
                        if let (Some(d), Some(watcher)) = (frame.data_ref(), w.watcher.as_mut()) {
                            watcher.observe(d);
                        }
                        if let (true, Some(t)) = (frame.is_data(), w.trace.as_mut()) {
                            t.chunk();
                        }
                        // Outer layers settle as soon as the end is visible: record first.
                        if inner.is_end_stream() {
                            w.record(true);
                        }
                    }
                    None => w.record(true),
                    Some(Err(_)) => w.record(false),
                }
            }
            let Some(answer) = this.answer.as_mut() else {
                return Poll::Ready(res);
            };
            // X2: the provider's frames become the client's; an event split across
            // frames gives nothing until it is whole.
            match res {
                Some(Ok(frame)) => {
                    let out = match frame.data_ref() {
                        Some(d) => answer.push(d),
                        None => Bytes::new(),
                    };
                    if inner.is_end_stream() {
                        *this.finished = true;
                        let last = match answer.finish() {
                            Ok(b) => b,
                            Err(e) => return Poll::Ready(Some(Err(e))),
                        };
                        return Poll::Ready(Some(Ok(Frame::data([out, last].concat().into()))));
                    }
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
                None => {
                    *this.finished = true;
                    return Poll::Ready(match answer.finish() {
                        Ok(b) if b.is_empty() => None,
                        Ok(b) => Some(Ok(Frame::data(b))),
                        Err(e) => Some(Err(e)),
                    });
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self.answer {
            None => self.inner.is_end_stream(),
            Some(_) => self.finished,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self.answer {
            None => self.inner.size_hint(),
            Some(_) => SizeHint::default(),
        }
    }
}
