//! T4 support: the in-flight counters are exact under concurrency and follow the
//! response body to its end, including client disconnects.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use http::Method;
use portcullis_fake_upstream::{Behavior, FakeUpstream};
use tokio::sync::Semaphore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t4_calls_whose_client_will_leave_are_counted_apart() {
    let fake = Arc::new(FakeUpstream::start().await);
    // Held for 2 s each: the five overlap however late a loaded host sends them.
    fake.set_default(Behavior::new().with_latency(Duration::from_secs(2)));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let fake = fake.clone();
        tasks.push(tokio::spawn(async move {
            let leaves = [
                ("authorization", "Bearer sk-l"),
                (portcullis_fake_upstream::behavior::H_CLIENT_LEAVES, "1"),
            ];
            let stays = [("authorization", "Bearer sk-l")];
            let headers: &[(&str, &str)] = if i < 2 { &leaves } else { &stays };
            post(&fake, OPENAI, headers, &openai_body(false, false))
                .await
                .status
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let s = fake.stats();
    assert_eq!(s.max_in_flight_for("sk-l"), 5);
    assert_eq!(s.max_in_flight_stayed_for("sk-l"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_is_exact_with_parallel_slow_requests() {
    let fake = Arc::new(FakeUpstream::start().await);
    // Held for 2 s each: the sixteen overlap however late a loaded host sends them.
    fake.set_default(Behavior::new().with_latency(Duration::from_secs(2)));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let fake = fake.clone();
        let key = if i < 10 { "Bearer sk-a" } else { "Bearer sk-b" };
        tasks.push(tokio::spawn(async move {
            post(
                &fake,
                OPENAI,
                &[("authorization", key)],
                &openai_body(false, false),
            )
            .await
            .status
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let s = fake.stats();
    assert_eq!(s.total_calls, 16);
    assert_eq!(s.max_in_flight, 16);
    assert_eq!(s.max_in_flight_for("sk-a"), 10);
    assert_eq!(s.max_in_flight_for("sk-b"), 6);
    assert_eq!((s.in_flight, s.completed, s.cancelled), (0, 16, 0));
    assert!(s.in_flight_per_credential.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_is_exact_with_held_requests() {
    // Deterministic overlap: N requests that never answer, all held open at once.
    let fake = FakeUpstream::start().await;
    fake.set_default(Behavior::hang());
    const N: u64 = 24;
    let mut held = Vec::new();
    for i in 0..N {
        let key = format!("sk-{}", i % 3);
        let fut = {
            let fake = &fake;
            async move {
                post(
                    fake,
                    ANTHROPIC,
                    &[("x-api-key", key.as_str())],
                    &anthropic_body(false),
                )
                .await
            }
        };
        held.push(Box::pin(fut));
    }
    // Drive them until every request is in flight at the fake.
    let all = futures_poll_until(&mut held, || fake.in_flight() == N).await;
    assert!(all, "all {N} requests reached the fake");
    let s = fake.stats();
    assert_eq!(s.max_in_flight, N);
    assert_eq!(s.in_flight_per_credential.get("sk-0"), Some(&8));
    assert_eq!(s.max_in_flight_for("sk-2"), 8);
    // Every client disconnects.
    drop(held);
    assert!(fake.wait_idle(Duration::from_secs(3)).await);
    let s = fake.stats();
    assert_eq!((s.in_flight, s.max_in_flight, s.cancelled), (0, N, N));
    assert!(s.in_flight_per_credential.is_empty());

    // reset_stats: maxima restart from the current (zero) in-flight count.
    fake.reset_stats();
    assert_eq!(fake.stats().max_in_flight, 0);
}

/// Polls every future (without completing them) until `done()` holds or 5 s pass.
async fn futures_poll_until<F: std::future::Future + Unpin>(
    futs: &mut [F],
    done: impl Fn() -> bool,
) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        std::future::poll_fn(|cx| {
            for f in futs.iter_mut() {
                let _ = std::pin::Pin::new(f).poll(cx);
            }
            std::task::Poll::Ready(())
        })
        .await;
        if done() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_never_exceeds_the_clients_own_concurrency() {
    // The decrement happens before the last byte is handed over, so the fake never
    // sees more in flight than the client has outstanding: no phantom overshoot.
    let fake = Arc::new(
        FakeUpstream::builder()
            .recent_capacity(0)
            .start()
            .await
            .unwrap(),
    );
    fake.set_default(Behavior::new().with_latency(Duration::from_millis(1)));
    let sem = Arc::new(Semaphore::new(5));
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (fake, sem) = (fake.clone(), sem.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = sem.acquire_owned().await.unwrap();
            let path = if i % 2 == 0 { OPENAI } else { ANTHROPIC };
            let body = if i % 2 == 0 {
                openai_body(true, true)
            } else {
                anthropic_body(true)
            };
            let r = post(&fake, path, &[("x-api-key", "sk-shared")], &body).await;
            assert!(r.body.is_ok());
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let s = fake.stats();
    assert_eq!(s.total_calls, 200);
    assert!(s.max_in_flight <= 5, "max {}", s.max_in_flight);
    assert!(s.max_in_flight_for("sk-shared") <= 5);
    assert_eq!((s.in_flight, s.completed), (0, 200));
    assert!(s.recent_requests.is_empty(), "recording off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l3_dropped_streaming_client_decrements_in_flight() {
    let fake = FakeUpstream::start().await;
    let (res, guard) = open(
        &fake,
        Method::POST,
        GEMINI_SSE,
        &[
            ("x-goog-api-key", "AIza-drop"),
            ("x-fake-chunks", "50"),
            ("x-fake-chunk-interval-ms", "50"),
        ],
        &gemini_body(),
    )
    .await;
    let mut body = res.into_body();
    let first = next_frame(&mut body, Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    assert!(first.starts_with(b"data: "));
    let s = fake.stats();
    assert_eq!(s.in_flight, 1);
    assert_eq!(s.in_flight_per_credential.get("AIza-drop"), Some(&1));
    // The client goes away mid-stream.
    drop(body);
    drop(guard);
    assert!(fake.wait_idle(Duration::from_secs(2)).await);
    let s = fake.stats();
    assert_eq!((s.cancelled, s.completed), (1, 0));
    assert!(s.in_flight_per_credential.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_aborts_hung_requests() {
    let fake = FakeUpstream::start().await;
    let addr = fake.addr();
    let control = fake.control();
    let client = {
        let body = openai_body(false, false);
        tokio::spawn(async move {
            // Connect by hand: `fake` moves into shutdown below.
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .unwrap();
            tokio::spawn(conn);
            let req = http::Request::post(OPENAI)
                .header("host", addr.to_string())
                .header("x-fake-hang", "true")
                .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                .unwrap();
            sender.send_request(req).await.is_err()
        })
    };
    tokio::time::timeout(Duration::from_secs(2), async {
        while control.in_flight() == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .unwrap();
    fake.shutdown().await;
    let errored = tokio::time::timeout(Duration::from_secs(2), client)
        .await
        .unwrap()
        .unwrap();
    assert!(errored, "the hung request fails once the fake shuts down");
    assert_eq!(control.in_flight(), 0);
}
