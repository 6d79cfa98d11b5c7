//! Releases and settlements off the response path (D2).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use tollgate_core::StoreResult;

/// Runs a store call whose answer nobody waits for. It is polled once in place — the
/// in-memory store finishes right there, with no task and no allocation — and spawned
/// on the current tokio runtime if it is still pending. Failures are logged, never
/// silently lost; a lease that could not be released still expires by its TTL.
pub(crate) fn detach<F>(mut fut: F, what: &'static str)
where
    F: Future<Output = StoreResult<()>> + Send + Unpin + 'static,
{
    match poll_now(&mut fut) {
        Some(Ok(())) => {}
        Some(Err(e)) => tracing::warn!(error = %e, "{what} failed"),
        None => match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(async move {
                    if let Err(e) = fut.await {
                        tracing::warn!(error = %e, "{what} failed");
                    }
                });
            }
            Err(_) => tracing::warn!("{what} dropped: no tokio runtime to finish it on"),
        },
    }
}

/// Maps a store future's output to `()` so it can be detached.
#[cfg(feature = "billing")]
pub(crate) struct Discard<F>(pub(crate) F);

#[cfg(feature = "billing")]
impl<F, T> Future for Discard<F>
where
    F: Future<Output = StoreResult<T>> + Unpin,
{
    type Output = StoreResult<()>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|r| r.map(drop))
    }
}

/// Polls a store future once without a waker: `Some` if it finished at once (the
/// in-memory store always does), `None` if it must be awaited. Polling again later
/// with a real waker is allowed, so nothing is lost.
pub(crate) fn poll_now<F: Future + Unpin>(fut: &mut F) -> Option<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(fut).poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// Renews a lease every `every` from a task of its own, started the first time the
/// request is seen waiting and stopped when the holder drops. Independent of whether
/// anyone polls the response: a slow reader (hyper stops polling a body whose socket
/// buffer is full) must not lose a lease it still uses.
#[cfg(any(feature = "slots", feature = "capacity"))]
#[derive(Debug, Default)]
pub(crate) struct Renewer {
    task: Option<tokio::task::JoinHandle<()>>,
}

#[cfg(any(feature = "slots", feature = "capacity"))]
impl Renewer {
    /// Starts the renewal loop unless it runs already (or there is no runtime: the
    /// lease then lives its TTL and heals).
    pub(crate) fn start_once<R, F>(
        &mut self,
        every: std::time::Duration,
        what: &'static str,
        renew: R,
    ) where
        R: Fn() -> F + Send + 'static,
        F: Future<Output = StoreResult<bool>> + Send + 'static,
    {
        if self.task.is_some() || every.is_zero() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.task = Some(rt.spawn(async move {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                tick.tick().await;
                match renew().await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(
                            "{what}: the lease had already expired; it no longer counts"
                        );
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "{what} failed"),
                }
            }
        }));
    }
}

#[cfg(any(feature = "slots", feature = "capacity"))]
impl Drop for Renewer {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}
