//! Responses a client stops reading are cut on a timer of their own (L3).
//!
//! The layers hold a request's slot, channel capacity lease and window and money
//! reservations until its response body ends (L3), and the upstream idle timer only
//! runs while the body is polled. A client that stops reading stops the polling
//! (hyper pulls the next frame only when it has room to write it), so without this
//! module such a client holds all of it for as long as its socket stays open.
//!
//! [`StallLayer`] wraps every response body in a [`StallBody`] whose inner body sits
//! behind a lock shared with a watcher task. The watcher needs no polling: it sleeps
//! until the client has left a frame untaken for `stall` or the body has lived for
//! `lifetime`, then takes the inner body out and drops it — which gives back or
//! settles everything held exactly as a client disconnect does (L3: a partial answer
//! stays pending reconciliation, never charged zero). The client then gets an error
//! (the connection or stream ends without the rest of the answer): at once if it is
//! polling, else through the connection (an HTTP/1 connection is closed; an HTTP/2
//! stream no longer counts as open, so the connection's idle timeout applies).
//!
//! Time spent waiting for the upstream is not a stall: the stall clock runs only from
//! a frame handed to the client until the client asks for the next one.

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tower::{Layer, Service};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a response may go unread, and how long it may live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StallLimits {
    /// Longest time a frame may wait for the client to take it.
    pub stall: Duration,
    /// Longest life of a response body, from its head on.
    pub lifetime: Duration,
}

/// Why a response was cut: the error its body ends with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseCut {
    /// The client took no frame for this long.
    Stalled(Duration),
    /// The response lived this long.
    Lifetime(Duration),
}

impl ResponseCut {
    fn reason(self) -> &'static str {
        match self {
            ResponseCut::Stalled(_) => "stalled",
            ResponseCut::Lifetime(_) => "lifetime",
        }
    }
}

impl std::fmt::Display for ResponseCut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResponseCut::Stalled(d) => {
                write!(f, "the client read nothing for {} ms", d.as_millis())
            }
            ResponseCut::Lifetime(d) => {
                write!(f, "the response outlived {} ms", d.as_millis())
            }
        }
    }
}

impl std::error::Error for ResponseCut {}

/// Told when a response of its connection was cut while the client was not reading,
/// so that the connection itself can be ended (set by [`crate::serve`] as a request
/// extension).
pub(crate) trait OnCut: Send + Sync + 'static {
    fn cut(&self);
}

/// The extension [`crate::serve`] puts on each request.
#[derive(Clone)]
pub(crate) struct CutNotice(pub(crate) Arc<dyn OnCut>);

/// Wraps every response body in a [`StallBody`].
#[derive(Clone, Copy, Debug)]
pub struct StallLayer {
    limits: StallLimits,
}

impl StallLayer {
    /// Responses cut after `limits`.
    pub fn new(limits: StallLimits) -> Self {
        Self { limits }
    }
}

impl<S> Layer<S> for StallLayer {
    type Service = Stall<S>;
    fn layer(&self, inner: S) -> Stall<S> {
        Stall {
            inner,
            limits: self.limits,
        }
    }
}

/// See [`StallLayer`].
#[derive(Clone, Debug)]
pub struct Stall<S> {
    inner: S,
    limits: StallLimits,
}

impl<S, ReqB, B> Service<Request<ReqB>> for Stall<S>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<StallBody<B>>;
    type Error = S::Error;
    type Future = StallFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let notice = req.extensions().get::<CutNotice>().cloned();
        StallFuture {
            inner: self.inner.call(req),
            limits: self.limits,
            notice,
        }
    }
}

pin_project! {
    /// The response future of [`Stall`].
    pub struct StallFuture<F> {
        #[pin]
        inner: F,
        limits: StallLimits,
        notice: Option<CutNotice>,
    }
}

impl<F, B, E> Future for StallFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Output = Result<Response<StallBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let res = std::task::ready!(this.inner.poll(cx))?;
        let (limits, notice) = (*this.limits, this.notice.take());
        Poll::Ready(Ok(res.map(|b| StallBody::new(b, limits, notice))))
    }
}

struct State<B> {
    /// `None` once the body ended, failed or was cut.
    inner: Option<Pin<Box<B>>>,
    /// Since when a frame handed out waits for the client to ask for the next one;
    /// `None` while the client is waiting for the body (or before the head is out).
    waiting_since: Option<Instant>,
    /// Set by the watcher; reported once as the body's error.
    cut: Option<ResponseCut>,
    /// Who to wake when the body is cut while being polled.
    waker: Option<Waker>,
}

struct Shared<B> {
    state: Mutex<State<B>>,
    born: Instant,
    limits: StallLimits,
}

impl<B> Shared<B> {
    fn lock(&self) -> MutexGuard<'_, State<B>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A response body cut when its client stops reading (see the module docs).
pub struct StallBody<B> {
    shared: Arc<Shared<B>>,
    /// Dropped when the body ends or is dropped, which ends the watcher at once.
    _watching: Option<oneshot::Sender<()>>,
}

impl<B> StallBody<B>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    /// Wraps `inner`; `notice` is told when the body is cut while the client is not
    /// reading. Without a Tokio runtime there is no watcher, and nothing is cut.
    fn new(inner: B, limits: StallLimits, notice: Option<CutNotice>) -> Self {
        let at_end = inner.is_end_stream();
        let born = Instant::now();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                inner: (!at_end).then(|| Box::pin(inner)),
                // The head is out: the client is expected to read from here on.
                waiting_since: Some(born),
                cut: None,
                waker: None,
            }),
            born,
            limits,
        });
        let watching = match tokio::runtime::Handle::try_current() {
            Ok(rt) if !at_end => {
                let (tx, rx) = oneshot::channel();
                rt.spawn(watch(Arc::downgrade(&shared), rx, notice));
                Some(tx)
            }
            _ => None,
        };
        Self {
            shared,
            _watching: watching,
        }
    }

    /// Whether the inner body (and everything it holds) is still there.
    pub fn is_holding(&self) -> bool {
        self.shared.lock().inner.is_some()
    }
}

/// Sleeps until the body stalled or outlived its limit, then drops its inner body.
/// Ends when the body ends or is dropped (`done`), whichever comes first.
async fn watch<B>(
    shared: Weak<Shared<B>>,
    mut done: oneshot::Receiver<()>,
    notice: Option<CutNotice>,
) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        let end_of_life = s.born + s.limits.lifetime;
        let deadline = {
            let st = s.lock();
            if st.inner.is_none() {
                return;
            }
            match st.waiting_since {
                Some(t) => (t + s.limits.stall).min(end_of_life),
                // The client is waiting for the body: look again in a quarter of the
                // stall timeout (the body cannot tell the watcher when a frame goes
                // out without a wake-up per frame). A wait that starts meanwhile
                // carries its own start, so the cut still comes `stall` after it.
                None => (Instant::now() + s.limits.stall / 4).min(end_of_life),
            }
        };
        drop(s);
        tokio::select! {
            _ = &mut done => return,
            () = tokio::time::sleep_until(deadline) => {}
        }
        let Some(s) = shared.upgrade() else { return };
        let now = Instant::now();
        let (inner, waker, cut, unread) = {
            let mut st = s.lock();
            if st.inner.is_none() {
                return;
            }
            let stalled = st.waiting_since.filter(|t| now >= *t + s.limits.stall);
            let cut = if now >= end_of_life {
                ResponseCut::Lifetime(s.limits.lifetime)
            } else if stalled.is_some() {
                ResponseCut::Stalled(s.limits.stall)
            } else {
                // The client read in the meantime: sleep again.
                continue;
            };
            st.cut = Some(cut);
            (
                st.inner.take(),
                st.waker.take(),
                cut,
                st.waiting_since.is_some(),
            )
        };
        // Outside the lock: dropping the inner body gives back or settles everything
        // held for the request (L3), as a client disconnect does.
        drop(inner);
        tracing::info!(reason = cut.reason(), "response cut: {cut}");
        metrics::counter!("portcullis_responses_cut_total", "reason" => cut.reason()).increment(1);
        if let Some(w) = waker {
            // Polled and waiting for the upstream: the next poll reports the cut.
            w.wake();
        }
        if unread {
            // Nobody polls the body (the client reads nothing): end the connection
            // or stream from the outside.
            if let Some(n) = &notice {
                n.0.cut();
            }
        }
        return;
    }
}

impl<B> Body for StallBody<B>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let mut st = this.shared.lock();
        if let Some(cut) = st.cut.take() {
            return Poll::Ready(Some(Err(Box::new(cut))));
        }
        let Some(inner) = st.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let res = inner.as_mut().poll_frame(cx);
        let ended = match &res {
            Poll::Pending => {
                st.waiting_since = None;
                match &mut st.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    w => *w = Some(cx.waker().clone()),
                }
                false
            }
            Poll::Ready(Some(Ok(_))) => {
                let at_end = inner.is_end_stream();
                if !at_end {
                    st.waiting_since = Some(Instant::now());
                }
                at_end
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => true,
        };
        let inner = if ended { st.inner.take() } else { None };
        drop(st);
        if ended {
            // Release what the inner body holds now, and end the watcher.
            drop(inner);
            this._watching = None;
        }
        res.map(|r| r.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        let st = self.shared.lock();
        st.inner.is_none() && st.cut.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.shared.lock().inner {
            Some(inner) => inner.size_hint(),
            None => SizeHint::with_exact(0),
        }
    }
}

impl<B> std::fmt::Debug for StallBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("StallBody")
            .field("holding", &st.inner.is_some())
            .field("cut", &st.cut)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::sync::mpsc;

    /// A body fed by the test through a channel (its end: the sender dropped); it
    /// holds a flag set when it is dropped, standing for the guards of a request.
    struct Fed {
        rx: mpsc::Receiver<Bytes>,
        released: Arc<AtomicBool>,
    }

    impl Drop for Fed {
        fn drop(&mut self) {
            self.released.store(true, Ordering::SeqCst);
        }
    }

    impl Body for Fed {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            self.rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
        }
    }

    const LIMITS: StallLimits = StallLimits {
        stall: Duration::from_secs(60),
        lifetime: Duration::from_secs(1800),
    };

    fn fed() -> (mpsc::Sender<Bytes>, StallBody<Fed>, Arc<AtomicBool>) {
        let (tx, rx) = mpsc::channel(8);
        let released = Arc::new(AtomicBool::new(false));
        let body = Fed {
            rx,
            released: released.clone(),
        };
        (tx, StallBody::new(body, LIMITS, None), released)
    }

    #[tokio::test(start_paused = true)]
    async fn l3_an_unread_body_is_cut_after_the_stall_timeout_and_releases() {
        let (tx, mut b, released) = fed();
        tx.send(Bytes::from_static(b"a")).await.unwrap();
        let f = b.frame().await.unwrap().unwrap();
        assert_eq!(f.into_data().unwrap(), "a");
        // The client takes nothing more: just before the stall timeout all is held.
        tokio::time::sleep(Duration::from_secs(59)).await;
        assert!(!released.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(released.load(Ordering::SeqCst), "cut after 60 s unread");
        assert!(!b.is_holding());
        let e = b.frame().await.unwrap().unwrap_err();
        assert!(e.downcast_ref::<ResponseCut>().is_some(), "{e}");
        assert!(b.frame().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn l3_waiting_for_the_upstream_is_not_a_stall_and_reading_resets_it() {
        let (tx, mut b, released) = fed();
        // The client reads a frame every 50 s: never 60 s unread.
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_secs(50)).await;
            tx.send(Bytes::from_static(b"a")).await.unwrap();
            assert!(b.frame().await.unwrap().is_ok());
        }
        // The client polls and the upstream is silent for 5 minutes: not a stall.
        let (b, ()) = tokio::join!(
            async move {
                let f = b.frame().await.unwrap().unwrap();
                assert_eq!(f.into_data().unwrap(), "late");
                b
            },
            async {
                tokio::time::sleep(Duration::from_secs(300)).await;
                assert!(!released.load(Ordering::SeqCst));
                tx.send(Bytes::from_static(b"late")).await.unwrap();
            }
        );
        assert!(b.is_holding());
        drop(tx);
        let mut b = b;
        assert!(b.frame().await.is_none(), "the end passes through");
        assert!(released.load(Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn l3_a_stall_after_a_long_wait_for_the_upstream_is_cut_on_time() {
        let (tx, b, released) = fed();
        // The client waits 100 s for the upstream's first frame, takes it, then
        // reads nothing more.
        let feeder = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(100)).await;
            tx.send(Bytes::from_static(b"a")).await.unwrap();
            tx
        });
        let mut b = b;
        assert!(b.frame().await.unwrap().is_ok());
        let taken = Instant::now();
        let _tx = feeder.await.unwrap();
        tokio::time::sleep(Duration::from_secs(59)).await;
        assert!(!released.load(Ordering::SeqCst), "held before 60 s unread");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            released.load(Ordering::SeqCst),
            "cut 60 s after the frame taken at {:?}",
            taken
        );
    }

    #[tokio::test(start_paused = true)]
    async fn l3_a_body_polled_past_its_lifetime_is_cut_and_the_poller_woken() {
        let (tx, mut b, released) = fed();
        // Frames every 31 s, read at once: no stall, but the lifetime runs out.
        let reader = tokio::spawn(async move {
            let mut frames = 0;
            loop {
                match b.frame().await {
                    Some(Ok(_)) => frames += 1,
                    Some(Err(e)) => return (frames, e.downcast_ref::<ResponseCut>().copied()),
                    None => return (frames, None),
                }
            }
        });
        let feeder = tokio::spawn(async move {
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_secs(31)).await;
                if tx.send(Bytes::from_static(b"a")).await.is_err() {
                    return;
                }
            }
        });
        let (frames, cut) = reader.await.unwrap();
        assert_eq!(cut, Some(ResponseCut::Lifetime(LIMITS.lifetime)));
        assert_eq!(frames, 58, "the frames of the first 1800 s (every 31 s)");
        assert!(released.load(Ordering::SeqCst));
        feeder.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn l3_a_finished_or_dropped_body_leaves_no_watcher_behind() {
        let alive = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = alive();
        let (tx, mut b, _) = fed();
        assert_eq!(alive(), before + 1, "one watcher per body");
        drop(tx);
        assert!(b.frame().await.is_none());
        tokio::task::yield_now().await;
        assert_eq!(alive(), before, "the watcher ends with the body");
        let (_tx, b, released) = fed();
        assert_eq!(alive(), before + 1);
        drop(b);
        tokio::task::yield_now().await;
        assert_eq!(alive(), before);
        assert!(released.load(Ordering::SeqCst));
    }
}
