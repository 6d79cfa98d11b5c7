//! The capacity layer's time rules read its injected clock (Q2, Q3): on paused tokio
//! time a `ManualClock` that does not move holds a wait open past `max_wait` of tokio's
//! time, and the wait it reports is the clock's.

use super::{CapacityQueueLayer, QUEUED_MS_HEADER};
use crate::BoxError;
use portcullis_core::{
    Candidates, CapacityStore, ChannelRef, GatewayCode, LeaseId, ManualClock, MemoryStore,
    Rejection,
};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, ServiceExt};

const TTL: u64 = 600_000;

fn now<F: Future + Unpin>(mut f: F) -> F::Output {
    match Pin::new(&mut f).poll(&mut Context::from_waker(std::task::Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => unreachable!("the in-memory store answers at once"),
    }
}

/// Channel "a" with room for one, taken by a lease held outside the layer.
fn full_channel(clock: &ManualClock) -> (MemoryStore<ManualClock>, LeaseId) {
    let store = MemoryStore::with_clock(clock.clone());
    let lease = now(store.try_acquire("a", 1, TTL))
        .unwrap()
        .expect("a free channel");
    (store, lease)
}

fn request() -> http::Request<()> {
    let mut r = http::Request::new(());
    r.extensions_mut()
        .insert(Candidates::new([ChannelRef::new("a", 1)]));
    r
}

fn inner() -> impl tower::Service<
    http::Request<()>,
    Response = http::Response<String>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(|_: http::Request<()>| async { Ok(http::Response::new(String::new())) })
}

#[tokio::test(start_paused = true)]
async fn q3_wait_ends_by_the_layer_clock_not_tokio_time() {
    let clock = ManualClock::new(1_000_000);
    let (store, _held) = full_channel(&clock);
    let layer = CapacityQueueLayer::new(store)
        .max_wait(Duration::from_secs(1))
        .poll_interval(Duration::ZERO)
        .clock(clock.clone());
    let mut answer = Box::pin(layer.layer(inner()).oneshot(request()));

    // Ten seconds of tokio's time, none of the clock's: still waiting.
    let early = tokio::time::timeout(Duration::from_secs(10), &mut answer).await;
    assert!(early.is_err(), "the wait ended on tokio's time: {early:?}");

    // The clock passes max_wait: 42910.
    clock.advance(Duration::from_secs(1));
    let err: BoxError = tokio::time::timeout(Duration::from_secs(10), answer)
        .await
        .expect("the wait ends once the clock says so")
        .expect_err("refused");
    let r = err.downcast_ref::<Rejection>().expect("a rejection");
    assert_eq!(r.code(), GatewayCode::CapacityBusy);
}

#[tokio::test(start_paused = true)]
async fn q3_queued_ms_is_the_layer_clock_wait() {
    let clock = ManualClock::new(1_000_000);
    let (store, held) = full_channel(&clock);
    let layer = CapacityQueueLayer::new(store.clone())
        .max_wait(Duration::from_secs(10))
        .clock(clock.clone());
    let mut answer = Box::pin(layer.layer(inner()).oneshot(request()));
    assert!(
        tokio::time::timeout(Duration::from_millis(1), &mut answer)
            .await
            .is_err(),
        "queued"
    );

    // 300 ms pass on the clock; the lease is freed; the waiter's poll finds it.
    clock.advance(Duration::from_millis(300));
    now(store.release("a", held)).unwrap();
    let res = answer.await.expect("admitted after waiting");
    assert_eq!(res.headers()[QUEUED_MS_HEADER], "300");
}
