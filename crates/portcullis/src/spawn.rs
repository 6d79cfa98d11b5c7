//! Releases and settlements off the response path (D2).

use portcullis_core::StoreResult;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Runs a store call whose answer nobody waits for. It is polled once in place — the
/// in-memory store finishes right there, with no task and no allocation — and spawned
/// on the current tokio runtime if it is still pending. Failures are logged, never
/// silently lost; a lease that could not be released still expires by its TTL.
pub(crate) fn detach<F, T>(fut: F, what: &'static str)
where
    F: Future<Output = StoreResult<T>> + Send + Unpin + 'static,
    T: Send + 'static,
{
    detach_then(fut, what, drop);
}

/// [`detach`], then `then` with the answer (in place, or on the spawned task).
pub(crate) fn detach_then<F, T>(
    mut fut: F,
    what: &'static str,
    then: impl FnOnce(T) + Send + 'static,
) where
    F: Future<Output = StoreResult<T>> + Send + Unpin + 'static,
    T: Send + 'static,
{
    match poll_now(&mut fut) {
        Some(Ok(v)) => {
            detached_answered();
            then(v)
        }
        Some(Err(e)) => detached_failed(what, &e),
        None => match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(async move {
                    match fut.await {
                        Ok(v) => {
                            detached_answered();
                            then(v)
                        }
                        Err(e) => detached_failed(what, &e),
                    }
                });
            }
            Err(_) => tracing::warn!("{what} dropped: no tokio runtime to finish it on"),
        },
    }
}

/// The outage of the calls sent off the response path (releases, settlements), all
/// layers together: logged when their failures begin, every 30 s while they go on and
/// when an answer ends them — not once per request (D11).
fn detached_outage() -> &'static crate::failure::Outage {
    static OUTAGE: std::sync::OnceLock<crate::failure::Outage> = std::sync::OnceLock::new();
    OUTAGE.get_or_init(Default::default)
}

/// What the log says the calls off the response path leave while they fail.
const DETACHED_SUBJECT: &str = "store calls off the response path";
const DETACHED_DOING: &str = "holding what they give back (at most until it expires)";

fn detached_failed(what: &'static str, e: &portcullis_core::StoreError) {
    detached_outage().log_failure(DETACHED_SUBJECT, DETACHED_DOING, what, e);
}

fn detached_answered() {
    detached_outage().log_answer(DETACHED_SUBJECT, "off the response path");
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

/// How a kind of lease is renewed.
#[cfg(any(feature = "slots", feature = "capacity"))]
pub(crate) trait Renew: Send + Sync + 'static {
    /// What names one lease.
    type Id: Clone + Send + Sync + 'static;
    /// Renews it; `Ok(false)` if it no longer exists.
    fn renew(&self, id: &Self::Id) -> impl Future<Output = StoreResult<bool>> + Send + 'static;
}

/// The leases a layer holds for running requests, renewed every renewal period by one
/// background task per layer (made once with the layer's state) — independent of whether anyone polls the responses (a
/// slow reader must not lose a lease it still uses), and with no task or timer per
/// request: a request registers its lease the first time it is seen waiting (one
/// uncontended lock) and leaves on drop.
#[cfg(any(feature = "slots", feature = "capacity"))]
pub(crate) struct Renewals<R, I> {
    renew: R,
    /// By registration number: numbers only grow, so a registration lands at the
    /// ordered map's right edge, with no key hashing (the map is touched twice per
    /// request).
    live: std::sync::Mutex<std::collections::BTreeMap<u64, I>>,
    next: std::sync::atomic::AtomicU64,
    started: std::sync::atomic::AtomicBool,
}

#[cfg(any(feature = "slots", feature = "capacity"))]
impl<R: Renew<Id = I>, I: Clone + Send + Sync + 'static> Renewals<R, I> {
    pub(crate) fn new(renew: R) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            renew,
            live: Default::default(),
            next: Default::default(),
            started: Default::default(),
        })
    }

    /// Keeps `id` renewed until the registration drops. The first registration starts
    /// the sweep, every `every` (the layer's renewal period). Without a tokio runtime
    /// (or with renewal off, `every` zero) nothing is renewed: the lease lives its TTL
    /// and heals.
    pub(crate) fn register(
        self: &std::sync::Arc<Self>,
        id: I,
        every: std::time::Duration,
    ) -> Option<Registration<R, I>> {
        use std::sync::atomic::Ordering;
        if every.is_zero() {
            return None;
        }
        if !self.started.swap(true, Ordering::AcqRel) {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    rt.spawn(sweep(std::sync::Arc::downgrade(self), every));
                }
                Err(_) => {
                    self.started.store(false, Ordering::Release);
                    return None;
                }
            }
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(n, id);
        Some(Registration {
            renewals: self.clone(),
            n,
        })
    }
}

/// Renews every registered lease every `every`, until the registry is gone.
#[cfg(any(feature = "slots", feature = "capacity"))]
async fn sweep<R: Renew<Id = I>, I: Clone + Send + Sync + 'static>(
    registry: std::sync::Weak<Renewals<R, I>>,
    every: std::time::Duration,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tick.tick().await;
        let Some(r) = registry.upgrade() else {
            return;
        };
        let ids: Vec<I> = r
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        let renewals: Vec<_> = ids.iter().map(|id| r.renew.renew(id)).collect();
        drop(r);
        for f in renewals {
            match f.await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(
                        "lease renewal: the lease had already expired; it no longer counts"
                    )
                }
                Err(e) => tracing::warn!(error = %e, "lease renewal failed"),
            }
        }
    }
}

/// A lease kept renewed; dropping it stops the renewal.
#[cfg(any(feature = "slots", feature = "capacity"))]
pub(crate) struct Registration<R, I> {
    renewals: std::sync::Arc<Renewals<R, I>>,
    n: u64,
}

#[cfg(any(feature = "slots", feature = "capacity"))]
impl<R, I> Drop for Registration<R, I> {
    fn drop(&mut self) {
        self.renewals
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.n);
    }
}
