//! [`RedisStoreFuture`], the future of every store call.

use portcullis_core::StoreResult;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The future of every [`RedisStore`](crate::RedisStore) call: one round trip bounded by the store's
/// deadline. `Send`, `Unpin` and `'static`, so a layer can poll it in place or spawn it.
/// A decision taken from a quota block is ready at once, without an allocation.
#[must_use = "futures do nothing unless polled"]
pub struct RedisStoreFuture<T>(Call<T>);

enum Call<T> {
    Pending(Pin<Box<dyn Future<Output = StoreResult<T>> + Send + 'static>>),
    Ready(Option<StoreResult<T>>),
}

impl<T> RedisStoreFuture<T> {
    pub(crate) fn new(f: impl Future<Output = StoreResult<T>> + Send + 'static) -> Self {
        Self(Call::Pending(Box::pin(f)))
    }
    /// An answer known without a call.
    pub(crate) fn ready(r: StoreResult<T>) -> Self {
        Self(Call::Ready(Some(r)))
    }
}

// Never pinned structurally: the ready value is moved out, the pending future is boxed.
impl<T> Unpin for RedisStoreFuture<T> {}

impl<T> Future for RedisStoreFuture<T> {
    type Output = StoreResult<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            Call::Pending(f) => f.as_mut().poll(cx),
            Call::Ready(r) => Poll::Ready(
                r.take()
                    .expect("RedisStoreFuture polled after it completed"),
            ),
        }
    }
}

impl<T> fmt::Debug for RedisStoreFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RedisStoreFuture")
    }
}

/// Runs `fut` on the current runtime, if there is one (an undo may run in a drop, which
/// can happen outside one, at shutdown).
pub(crate) fn spawn_quietly<F>(fut: F)
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(fut);
    }
}
