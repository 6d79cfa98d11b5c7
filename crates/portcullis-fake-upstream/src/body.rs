//! The response body: a list of timed frames, then a clean end, a cut or a hang. It
//! holds the call's in-flight guard until its last frame is produced (or it is dropped).

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

use crate::stats::InFlightGuard;

/// How a body ends after its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// End of stream.
    Clean,
    /// Abort the connection (an error frame: hyper drops the connection).
    Cut,
    /// Never end (until the client or the server goes away).
    Hang,
    /// Already ended.
    Done,
}

/// The body of every answer of the fake upstream.
pub(crate) struct FakeBody {
    steps: VecDeque<(Duration, Bytes)>,
    end: End,
    exact_len: Option<u64>,
    sleep: Option<Pin<Box<Sleep>>>,
    waited: bool,
    yielded_before_cut: bool,
    guard: Option<InFlightGuard>,
}

impl FakeBody {
    /// A body sent in one piece (`content-length` set).
    pub(crate) fn full(bytes: impl Into<Bytes>, guard: InFlightGuard) -> Self {
        let b: Bytes = bytes.into();
        let len = b.len() as u64;
        let mut steps = VecDeque::with_capacity(1);
        if !b.is_empty() {
            steps.push_back((Duration::ZERO, b));
        }
        Self::new(steps, End::Clean, Some(len), guard)
    }

    pub(crate) fn new(
        steps: VecDeque<(Duration, Bytes)>,
        end: End,
        exact_len: Option<u64>,
        guard: InFlightGuard,
    ) -> Self {
        let mut body = FakeBody {
            steps,
            end,
            exact_len,
            sleep: None,
            waited: false,
            yielded_before_cut: false,
            guard: Some(guard),
        };
        if body.steps.is_empty() && body.end == End::Clean {
            body.finish();
        }
        body
    }

    fn finish(&mut self) {
        if let Some(g) = self.guard.take() {
            g.complete();
        }
    }
}

impl Body for FakeBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        loop {
            if let Some(sleep) = this.sleep.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                this.sleep = None;
                this.waited = true;
            }
            match this.steps.front() {
                Some((delay, _)) if !this.waited && !delay.is_zero() => {
                    this.sleep = Some(Box::pin(tokio::time::sleep(*delay)));
                }
                Some(_) => {
                    let (_, bytes) = this.steps.pop_front().expect("front exists");
                    this.waited = false;
                    if this.steps.is_empty() && this.end == End::Clean {
                        // Release before handing over the last bytes: a client that
                        // has read the whole answer always sees the decrement.
                        this.end = End::Done;
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(bytes))));
                }
                None => {
                    return match this.end {
                        End::Clean | End::Done => {
                            this.end = End::Done;
                            this.finish();
                            Poll::Ready(None)
                        }
                        End::Cut if !this.yielded_before_cut => {
                            // hyper writes frames into its buffer until the body is
                            // pending, then flushes; an error right away would lose
                            // the head and the bytes before the cut. Yield once.
                            this.yielded_before_cut = true;
                            cx.waker().wake_by_ref();
                            Poll::Pending
                        }
                        End::Cut => {
                            this.end = End::Done;
                            this.finish();
                            Poll::Ready(Some(Err(io::Error::new(
                                io::ErrorKind::ConnectionAborted,
                                "fake-upstream: connection cut on purpose",
                            ))))
                        }
                        End::Hang => Poll::Pending,
                    };
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.steps.is_empty() && matches!(self.end, End::Clean | End::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match self.exact_len {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

impl std::fmt::Debug for FakeBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeBody")
            .field("frames_left", &self.steps.len())
            .field("end", &self.end)
            .finish()
    }
}
