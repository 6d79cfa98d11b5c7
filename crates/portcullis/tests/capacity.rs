//! CapacityQueueLayer (Q1–Q5, S2 and S3), on paused tokio time: the
//! in-memory store reads a `TokioClock`, so lease TTLs follow the paused clock too.

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use portcullis::BoxError;
use portcullis::capacity::{DEADLINE_HEADER, QUEUED_MS_HEADER};
use portcullis::core::{
    Candidates, CapacityStore, ChannelRef, Chosen, GatewayCode, LayerKind, LeaseId, MemoryStore,
    Millis, Policy, QueueLimits, Rejection, StoreResult, Subject, TenantWeight, Tier,
};
use portcullis::time::TokioClock;
use portcullis::{AnchoredWindowLayer, CapacityQueueLayer};
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep, sleep};
use tower::{Layer, Service, ServiceExt};

type Store = MemoryStore<TokioClock>;

fn store() -> Store {
    MemoryStore::with_clock(TokioClock::new(0))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---------------------------------------------------------------- the fake forwarder

/// What the inner service saw: in-flight per channel (from call until its body ends),
/// the highest in-flight seen, calls, and the tenants in admission order.
#[derive(Default)]
struct Tracker {
    channels: Mutex<HashMap<String, Arc<(AtomicU32, AtomicU32)>>>,
    calls: AtomicUsize,
    order: Mutex<Vec<String>>,
}

impl Tracker {
    fn counters(&self, ch: &str) -> Arc<(AtomicU32, AtomicU32)> {
        self.channels
            .lock()
            .unwrap()
            .entry(ch.to_owned())
            .or_default()
            .clone()
    }
    fn max(&self, ch: &str) -> u32 {
        self.counters(ch).1.load(Ordering::SeqCst)
    }
    fn current(&self, ch: &str) -> u32 {
        self.counters(ch).0.load(Ordering::SeqCst)
    }
    fn order(&self) -> Vec<String> {
        self.order.lock().unwrap().clone()
    }
}

/// One unit of a channel's in-flight count, given back when dropped.
struct Counted(Arc<(AtomicU32, AtomicU32)>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How the fake upstream answers a request (request extension).
#[derive(Clone)]
enum Answer {
    /// One chunk after this long, then the end.
    After(Duration),
    /// Chunks from the test; the body ends when the sender is dropped.
    Stream(Arc<Mutex<Option<mpsc::UnboundedReceiver<Bytes>>>>),
}

enum Source {
    Timer(Option<Pin<Box<Sleep>>>),
    Stream(mpsc::UnboundedReceiver<Bytes>),
}

/// The response body: stops counting as in flight no later than it reports its end.
struct TestBody {
    source: Source,
    counted: Option<Counted>,
}

impl std::fmt::Debug for TestBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TestBody")
    }
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        match &mut this.source {
            Source::Timer(t) => match t {
                Some(s) => {
                    std::task::ready!(s.as_mut().poll(cx));
                    *t = None;
                    this.counted = None;
                    Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"ok")))))
                }
                None => Poll::Ready(None),
            },
            Source::Stream(rx) => match std::task::ready!(rx.poll_recv(cx)) {
                Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
                None => {
                    this.counted = None;
                    Poll::Ready(None)
                }
            },
        }
    }
    fn is_end_stream(&self) -> bool {
        matches!(self.source, Source::Timer(None))
    }
}

/// The fake forwarder: sends to `Chosen`, counts in flight per channel.
fn forwarder(
    t: Arc<Tracker>,
) -> impl Service<
    Request<()>,
    Response = Response<TestBody>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<TestBody>, Infallible>> + Send,
> + Clone
+ Send {
    tower::service_fn(move |req: Request<()>| {
        let t = t.clone();
        async move {
            let ch = req
                .extensions()
                .get::<Chosen>()
                .map(|c| c.0.name.to_string())
                .unwrap_or_default();
            let c = t.counters(&ch);
            let now = c.0.fetch_add(1, Ordering::SeqCst) + 1;
            c.1.fetch_max(now, Ordering::SeqCst);
            t.calls.fetch_add(1, Ordering::SeqCst);
            let tenant = req
                .extensions()
                .get::<Subject>()
                .and_then(|s| s.tenant.as_deref().map(str::to_owned))
                .unwrap_or_default();
            t.order.lock().unwrap().push(tenant);
            let source = match req.extensions().get::<Answer>().cloned() {
                Some(Answer::Stream(rx)) => Source::Stream(rx.lock().unwrap().take().unwrap()),
                Some(Answer::After(d)) => Source::Timer(Some(Box::pin(sleep(d)))),
                None => Source::Timer(Some(Box::pin(sleep(Duration::ZERO)))),
            };
            let mut res = Response::new(TestBody {
                source,
                counted: Some(Counted(c)),
            });
            res.headers_mut().insert("x-channel", ch.parse().unwrap());
            Ok(res)
        }
    })
}

fn channels(list: &[(&str, u32)]) -> Candidates {
    Candidates::new(list.iter().map(|(n, c)| ChannelRef::new(*n, *c)))
}

fn request(cands: &Candidates, tenant: &str, answer: Answer) -> Request<()> {
    let mut r = Request::new(());
    r.extensions_mut().insert(cands.clone());
    r.extensions_mut()
        .insert(Subject::new(format!("key-{tenant}")).with_tenant(tenant));
    r.extensions_mut().insert(answer);
    r
}

fn after(n: u64) -> Answer {
    Answer::After(ms(n))
}

fn stream() -> (mpsc::UnboundedSender<Bytes>, Answer) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, Answer::Stream(Arc::new(Mutex::new(Some(rx)))))
}

fn rejection(e: &BoxError) -> &Rejection {
    e.downcast_ref::<Rejection>()
        .unwrap_or_else(|| panic!("not a Rejection: {e}"))
}

fn channel_of<B>(r: &Response<B>) -> String {
    r.headers()["x-channel"].to_str().unwrap().to_owned()
}

fn queued_ms<B>(r: &Response<B>) -> Option<u64> {
    r.headers()
        .get(QUEUED_MS_HEADER)
        .map(|v| v.to_str().unwrap().parse().unwrap())
}

fn in_flight(s: &Store, ch: &str) -> u32 {
    let mut f = CapacityStore::in_flight(s, ch);
    match Pin::new(&mut f).poll(&mut Context::from_waker(std::task::Waker::noop())) {
        Poll::Ready(r) => r.unwrap(),
        Poll::Pending => unreachable!(),
    }
}

/// Lets spawned tasks run up to where they wait (paused time does not move).
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// Sends a request and reads the whole body; the channel and the queued-ms header.
async fn run<S, B>(svc: S, req: Request<()>) -> Result<(String, Option<u64>), BoxError>
where
    S: Service<Request<()>, Response = Response<B>, Error = BoxError>,
    B: Body,
    B::Error: std::fmt::Debug,
{
    let res = svc.oneshot(req).await?;
    let ch = channel_of(&res);
    let q = queued_ms(&res);
    res.into_body().collect().await.unwrap();
    Ok((ch, q))
}

/// Polls a future once, without being woken.
fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(std::task::Waker::noop()))
}

/// The tests drop answers before their end to hand capacity over; the abort grace
/// has a test of its own (`q5_abandoned_answer_keeps_its_lease_for_the_abort_grace`).
fn layer() -> CapacityQueueLayer<Store> {
    CapacityQueueLayer::new(store()).abort_grace(Duration::ZERO)
}

// ---------------------------------------------------------------- Q1

#[tokio::test(start_paused = true)]
async fn q1_capacity_never_exceeded() {
    let t = Arc::new(Tracker::default());
    let layer = layer();
    let svc = layer.layer(forwarder(t.clone()));
    let cands = channels(&[("a", 3), ("b", 2)]);
    let mut tasks = Vec::new();
    for i in 0..200u64 {
        let req = request(
            &cands,
            ["x", "y", "z"][i as usize % 3],
            after(5 + (i * 37) % 60),
        );
        tasks.push(tokio::spawn(run(svc.clone(), req)));
    }
    for task in tasks {
        task.await
            .unwrap()
            .expect("every request is served within max_wait");
    }
    assert_eq!(t.calls.load(Ordering::SeqCst), 200);
    assert!(
        t.max("a") <= 3 && t.max("b") <= 2,
        "a {} b {}",
        t.max("a"),
        t.max("b")
    );
    assert_eq!(
        (t.max("a"), t.max("b")),
        (3, 2),
        "both channels were used fully"
    );
    assert_eq!((t.current("a"), t.current("b")), (0, 0));
    assert_eq!(
        (in_flight(layer.store(), "a"), in_flight(layer.store(), "b")),
        (0, 0)
    );
    let s = layer.stats();
    assert_eq!((s.admitted, s.queued), (200, 0));
    assert!(s.admitted_after_wait >= 190);
}

#[tokio::test(start_paused = true)]
async fn q1_unlimited_channel_takes_no_lease_and_no_candidates_pass_through() {
    let t = Arc::new(Tracker::default());
    let layer = layer();
    let svc = layer.layer(forwarder(t.clone()));
    let cands = channels(&[("free", 0)]);
    let (tx, answer) = stream();
    let res = svc
        .clone()
        .oneshot(request(&cands, "x", answer))
        .await
        .unwrap();
    assert_eq!(channel_of(&res), "free");
    assert!(!res.body().is_holding());
    assert_eq!(in_flight(layer.store(), "free"), 0);
    drop((tx, res));
    // Without Candidates: untouched, no Chosen.
    let mut req = Request::new(());
    req.extensions_mut().insert(after(0));
    let res = svc.clone().oneshot(req).await.unwrap();
    assert_eq!(channel_of(&res), "");
    // With an empty candidate list: no upstream (50201).
    let err = svc
        .oneshot(request(&Candidates::new([]), "x", after(0)))
        .await
        .unwrap_err();
    assert_eq!(rejection(&err).code(), GatewayCode::NoUpstream);
}

// ---------------------------------------------------------------- Q2

#[tokio::test(start_paused = true)]
async fn q2_full_channel_spills_to_others_then_queues_on_first_to_free() {
    let t = Arc::new(Tracker::default());
    let layer = layer();
    let svc = layer.layer(forwarder(t.clone()));
    let cands = channels(&[("a", 1), ("b", 1)]);
    let only = |n: &str| channels(&[(n, 1)]);
    // History: "a" holds its requests 1 s, "b" 50 ms.
    run(svc.clone(), request(&only("a"), "x", after(1000)))
        .await
        .unwrap();
    run(svc.clone(), request(&only("b"), "x", after(50)))
        .await
        .unwrap();

    let first = tokio::spawn(run(svc.clone(), request(&cands, "x", after(5_000))));
    settle().await;
    let second = tokio::spawn(run(svc.clone(), request(&cands, "x", after(2_000))));
    settle().await;
    assert_eq!(
        (t.current("a"), t.current("b")),
        (1, 1),
        "the full first choice spilled to b"
    );
    let start = Instant::now();
    let third = tokio::spawn(run(svc.clone(), request(&cands, "x", after(10))));
    settle().await;
    assert_eq!(
        (layer.queued("a"), layer.queued("b")),
        (0, 1),
        "all full: waits on b, expected to free first (shorter service time)"
    );
    let (ch, q) = third.await.unwrap().unwrap();
    assert_eq!(ch, "b");
    assert_eq!(q, Some(2_000), "admitted when b's lease was released");
    assert_eq!(start.elapsed(), ms(2_010), "then served in its own 10 ms");
    assert_eq!(first.await.unwrap().unwrap().0, "a");
    assert_eq!(second.await.unwrap().unwrap().0, "b");
}

// ---------------------------------------------------------------- Q3

#[tokio::test(start_paused = true)]
async fn q3_max_wait_42910_with_retry_after() {
    let t = Arc::new(Tracker::default());
    let layer = layer().max_wait(ms(2_000));
    let svc = layer.layer(forwarder(t.clone()));
    let cands = channels(&[("a", 1)]);
    let holder = tokio::spawn(run(svc.clone(), request(&cands, "x", after(60_000))));
    settle().await;
    let start = Instant::now();
    let err = svc
        .clone()
        .oneshot(request(&cands, "y", after(0)))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), ms(2_000));
    let r = rejection(&err);
    assert_eq!(r.code(), GatewayCode::CapacityBusy);
    assert_eq!(r.code().code(), 42910);
    assert_eq!(r.http_status(), 429);
    assert_eq!(
        r.message(),
        "All upstream capacity for this model is busy. Retry shortly."
    );
    assert_eq!(r.retry_after_secs(), Some(1));
    assert_eq!(r.layer(), LayerKind::CapacityQueue);
    assert_eq!(layer.queued("a"), 0);
    assert_eq!(
        t.calls.load(Ordering::SeqCst),
        1,
        "the refused request never reached upstream"
    );
    // A deadline longer than max_wait: max_wait still binds, 42910.
    let mut req = request(&cands, "y", after(0));
    req.headers_mut()
        .insert(DEADLINE_HEADER, "5000".parse().unwrap());
    let err = svc.clone().oneshot(req).await.unwrap_err();
    assert_eq!(rejection(&err).code(), GatewayCode::CapacityBusy);
    // max_wait zero: refused at once, never queued.
    let at_once = CapacityQueueLayer::new(layer.store().clone()).max_wait(Duration::ZERO);
    let start = Instant::now();
    let err = at_once
        .layer(forwarder(t.clone()))
        .oneshot(request(&cands, "y", after(0)))
        .await
        .unwrap_err();
    assert_eq!(rejection(&err).code(), GatewayCode::CapacityBusy);
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(layer.stats().rejected_busy, 2);
    holder.abort();
}

#[tokio::test(start_paused = true)]
async fn q3_deadline_50401() {
    let t = Arc::new(Tracker::default());
    let layer = layer();
    let svc = layer.layer(forwarder(t.clone()));
    let cands = channels(&[("a", 1)]);
    let holder = tokio::spawn(run(svc.clone(), request(&cands, "x", after(60_000))));
    settle().await;
    let mut req = request(&cands, "y", after(0));
    req.headers_mut()
        .insert(DEADLINE_HEADER, "500".parse().unwrap());
    let start = Instant::now();
    let err = svc.clone().oneshot(req).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(500));
    let r = rejection(&err);
    assert_eq!(r.code(), GatewayCode::QueueDeadlineExceeded);
    assert_eq!(r.code().code(), 50401);
    assert_eq!(r.http_status(), 504);
    assert_eq!(r.message(), "QUEUE_DEADLINE_EXCEEDED");
    assert_eq!(layer.queued("a"), 0);
    // The configured default deadline applies without the header.
    let layer2 = CapacityQueueLayer::new(layer.store().clone()).default_deadline(Some(ms(300)));
    let start = Instant::now();
    let err = layer2
        .layer(forwarder(t.clone()))
        .oneshot(request(&cands, "y", after(0)))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), ms(300));
    assert_eq!(rejection(&err).code(), GatewayCode::QueueDeadlineExceeded);
    assert_eq!(layer.stats().rejected_deadline, 1);
    assert_eq!(t.calls.load(Ordering::SeqCst), 1);
    holder.abort();
}

#[tokio::test(start_paused = true)]
async fn q3_queued_ms_header() {
    let t = Arc::new(Tracker::default());
    let layer = layer();
    let svc = layer.layer(forwarder(t.clone()));
    let cands = channels(&[("a", 1)]);
    let holder = tokio::spawn(run(svc.clone(), request(&cands, "x", after(300))));
    settle().await;
    let waiter = tokio::spawn(run(svc.clone(), request(&cands, "y", after(0))));
    let (_, held_q) = holder.await.unwrap().unwrap();
    assert_eq!(held_q, None, "admitted at once: no header");
    let (_, q) = waiter.await.unwrap().unwrap();
    assert_eq!(q, Some(300));
    assert_eq!(layer.stats().admitted_after_wait, 1);
}

#[tokio::test(start_paused = true)]
async fn q3_disconnected_waiter_leaves_at_once() {
    let t = Arc::new(Tracker::default());
    let layer = layer();
    let svc = layer.layer(forwarder(t.clone()));
    let cands = channels(&[("a", 1)]);
    let (tx, answer) = stream();
    let held = svc
        .clone()
        .oneshot(request(&cands, "x", answer))
        .await
        .unwrap();

    // A waiter whose client goes away: out of the queue at once.
    let mut waiter = Box::pin(svc.clone().oneshot(request(&cands, "y", after(0))));
    assert!(poll_once(&mut waiter).is_pending());
    assert_eq!(layer.queued("a"), 1);
    drop(waiter);
    assert_eq!(
        layer.queued("a"),
        0,
        "left the queue the moment it was dropped"
    );
    assert_eq!(layer.stats().cancelled, 1);

    // A waiter dropped after a lease was handed to it but before it ran: the lease
    // goes back.
    let mut waiter = Box::pin(svc.clone().oneshot(request(&cands, "y", after(0))));
    assert!(poll_once(&mut waiter).is_pending());
    drop((tx, held)); // the holder's body ends: its lease is handed to the waiter
    assert_eq!(layer.queued("a"), 0);
    assert_eq!(
        in_flight(layer.store(), "a"),
        1,
        "handed over, not yet used"
    );
    drop(waiter);
    assert_eq!(in_flight(layer.store(), "a"), 0, "never used, given back");
    assert_eq!(
        t.calls.load(Ordering::SeqCst),
        1,
        "no work for a client that has gone"
    );
    // And the channel is usable at once.
    let (ch, q) = run(svc, request(&cands, "z", after(0))).await.unwrap();
    assert_eq!((ch.as_str(), q), ("a", None));
}

// ---------------------------------------------------------------- Q4

#[tokio::test(start_paused = true)]
async fn q4_weighted_fair_share_and_no_starvation() {
    const ADMISSIONS: usize = 400;
    let t = Arc::new(Tracker::default());
    let layer = layer();
    let svc = layer.layer(forwarder(t.clone()));
    let cands = channels(&[("pool", 1)]);
    let issued = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    // Closed loop: 8 clients per tenant, each sends again as soon as its answer ends,
    // so both tenants are backlogged throughout.
    for (tenant, weight) in [("heavy", 3), ("light", 1)] {
        for _ in 0..8 {
            let (svc, cands, issued) = (svc.clone(), cands.clone(), issued.clone());
            clients.push(tokio::spawn(async move {
                let mut done = 0;
                while issued.fetch_add(1, Ordering::SeqCst) < ADMISSIONS {
                    let mut req = request(&cands, tenant, after(10));
                    req.extensions_mut().insert(TenantWeight(weight));
                    run(svc.clone(), req).await.expect("no request is refused");
                    done += 1;
                }
                (tenant, done)
            }));
        }
    }
    let mut completed: HashMap<&str, usize> = HashMap::new();
    for c in clients {
        let (tenant, done) = c.await.unwrap();
        *completed.entry(tenant).or_default() += done;
    }
    let order = t.order();
    assert_eq!(order.len(), ADMISSIONS);
    // Both tenants are backlogged except for the tail, when clients stop sending.
    let window = &order[..ADMISSIONS - 16];
    let heavy = window.iter().filter(|t| *t == "heavy").count() as f64 / window.len() as f64;
    eprintln!(
        "q4: heavy share {:.1} %, light share {:.1} % over {} admissions; completed {completed:?}",
        heavy * 100.0,
        (1.0 - heavy) * 100.0,
        window.len()
    );
    assert!((0.65..=0.85).contains(&heavy), "heavy share {heavy}");
    assert!(
        completed["light"] >= 80,
        "the light tenant completes: {completed:?}"
    );
    assert_eq!(t.max("pool"), 1);
    // No starvation: between two admissions of the light tenant at most 3 of heavy
    // (after the first admission, which found the channel free and did not queue).
    let mut run_len = 0;
    for who in &window[1..] {
        run_len = if who == "heavy" { run_len + 1 } else { 0 };
        assert!(run_len <= 3, "light starved for {run_len} admissions");
    }
}

#[tokio::test(start_paused = true)]
async fn q4_depth_caps() {
    let t = Arc::new(Tracker::default());
    let layer = layer().queue_limits(QueueLimits::new(3, 2));
    let svc = layer.layer(forwarder(t.clone()));
    let cands = channels(&[("a", 1)]);
    let holder = tokio::spawn(run(svc.clone(), request(&cands, "x", after(1_000))));
    settle().await;
    let mut waiters = Vec::new();
    for tenant in ["p", "p"] {
        waiters.push(tokio::spawn(run(
            svc.clone(),
            request(&cands, tenant, after(0)),
        )));
    }
    settle().await;
    let start = Instant::now();
    let err = svc
        .clone()
        .oneshot(request(&cands, "p", after(0)))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO, "refused at once");
    let r = rejection(&err);
    assert_eq!(
        (r.code(), r.retry_after_secs()),
        (GatewayCode::CapacityBusy, Some(1))
    );
    waiters.push(tokio::spawn(run(
        svc.clone(),
        request(&cands, "q", after(0)),
    )));
    settle().await;
    assert_eq!(layer.queued("a"), 3);
    let err = svc
        .clone()
        .oneshot(request(&cands, "r", after(0)))
        .await
        .unwrap_err();
    assert_eq!(rejection(&err).code(), GatewayCode::CapacityBusy);
    assert_eq!(layer.stats().rejected_queue_full, 2);
    holder.await.unwrap().unwrap();
    for w in waiters {
        w.await.unwrap().expect("queued requests are served");
    }
}

// ---------------------------------------------------------------- Q5 / L3 / L5

#[tokio::test(start_paused = true)]
async fn q5_lease_held_until_body_end_and_nothing_held_while_queued() {
    let t = Arc::new(Tracker::default());
    let layer = layer();
    let svc = layer.layer(forwarder(t.clone()));
    let cands = channels(&[("a", 1)]);
    let (tx, answer) = stream();
    let mut res = svc
        .clone()
        .oneshot(request(&cands, "x", answer))
        .await
        .unwrap();
    assert_eq!(
        in_flight(layer.store(), "a"),
        1,
        "head returned, body open: still held"
    );

    let waiter = tokio::spawn(run(svc.clone(), request(&cands, "y", after(0))));
    settle().await;
    assert_eq!(layer.queued("a"), 1);
    assert_eq!(
        t.calls.load(Ordering::SeqCst),
        1,
        "a queued request has reached nothing"
    );
    assert_eq!(in_flight(layer.store(), "a"), 1, "and holds no lease");

    tx.send(Bytes::from_static(b"chunk")).unwrap();
    let frame = res.body_mut().frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "chunk");
    sleep(ms(1_000)).await;
    assert_eq!(
        in_flight(layer.store(), "a"),
        1,
        "a streaming answer keeps its lease"
    );
    assert_eq!(layer.queued("a"), 1);

    drop(tx);
    assert!(res.body_mut().frame().await.is_none());
    assert!(!res.body().is_holding(), "released at end of stream");
    let (_, q) = waiter.await.unwrap().unwrap();
    assert_eq!(q, Some(1_000));
    assert_eq!(in_flight(layer.store(), "a"), 0);

    // A body dropped before its end (client disconnect) releases too.
    let (_tx, answer) = stream();
    let res = svc
        .clone()
        .oneshot(request(&cands, "x", answer))
        .await
        .unwrap();
    assert_eq!(in_flight(layer.store(), "a"), 1);
    drop(res);
    assert_eq!(in_flight(layer.store(), "a"), 0);
}

#[tokio::test(start_paused = true)]
async fn q5_abandoned_answer_keeps_its_lease_for_the_abort_grace() {
    // The provider keeps working on an abandoned request until it notices the closed
    // connection: the lease outlives the client by the grace, then goes to the waiter.
    let t = Arc::new(Tracker::default());
    let layer = CapacityQueueLayer::new(store()).abort_grace(ms(250));
    let svc = layer.clone().layer(forwarder(t.clone()));
    let cands = channels(&[("a", 1)]);
    let (_tx, answer) = stream();
    let res = svc
        .clone()
        .oneshot(request(&cands, "x", answer))
        .await
        .unwrap();
    let waiter = tokio::spawn(svc.clone().oneshot(request(&cands, "y", after(0))));
    settle().await;
    drop(res);
    settle().await;
    assert_eq!(in_flight(layer.store(), "a"), 1, "held through the grace");
    assert_eq!(layer.queued("a"), 1);
    sleep(ms(250)).await;
    let res = waiter.await.unwrap().unwrap();
    assert_eq!(queued_ms(&res), Some(250));
    // An answer read to its end releases at once.
    res.into_body().collect().await.unwrap();
    assert_eq!(in_flight(layer.store(), "a"), 0);
}

#[tokio::test(start_paused = true)]
async fn q5_rejection_is_typed_so_outer_layers_refund() {
    // L5: the window layer outside counts 2 requests a minute; a request refused by
    // capacity gives its count back.
    let t = Arc::new(Tracker::default());
    let cap = layer().max_wait(ms(100));
    let svc = tower::ServiceBuilder::new()
        .layer(AnchoredWindowLayer::new(store()))
        .layer(cap.clone())
        .service(forwarder(t.clone()));
    let cands = channels(&[("a", 1)]);
    let subject =
        Subject::new("k").with_policy(Policy::default().with_requests(Tier::per_minute(2)));
    let req = |answer| {
        let mut r = request(&cands, "x", answer);
        r.extensions_mut().insert(subject.clone());
        r
    };
    let (tx, answer) = stream();
    let held = svc.clone().oneshot(req(answer)).await.unwrap();
    let err = svc.clone().oneshot(req(after(0))).await.unwrap_err();
    assert_eq!(rejection(&err).code(), GatewayCode::CapacityBusy);
    drop((tx, held));
    // Two requests counted only if the refused one was not refunded.
    let res = svc.clone().oneshot(req(after(0))).await;
    assert!(
        res.is_ok(),
        "the refused request consumed nothing: {:?}",
        res.err()
    );
}

/// D5: a held lease is renewed while its stream runs, so a short TTL does not expire
/// a long answer; once the body ends it is released.
#[tokio::test(start_paused = true)]
async fn d5_lease_renewed_while_stream_runs() {
    let t = Arc::new(Tracker::default());
    let layer = layer().lease_ttl(ms(3_000));
    let svc = layer.layer(forwarder(t.clone()));
    let cands = channels(&[("a", 1)]);
    let (tx, answer) = stream();
    let res = svc
        .clone()
        .oneshot(request(&cands, "x", answer))
        .await
        .unwrap();
    let reader = tokio::spawn(res.into_body().collect());
    sleep(ms(10_000)).await;
    assert_eq!(in_flight(layer.store(), "a"), 1, "renewed past its 3 s TTL");
    let err = svc
        .clone()
        .oneshot({
            let mut r = request(&cands, "y", after(0));
            r.headers_mut()
                .insert(DEADLINE_HEADER, "100".parse().unwrap());
            r
        })
        .await
        .unwrap_err();
    assert_eq!(rejection(&err).code(), GatewayCode::QueueDeadlineExceeded);
    drop(tx);
    reader.await.unwrap().unwrap();
    assert_eq!(in_flight(layer.store(), "a"), 0);
}

// ---------------------------------------------------------------- L1

#[tokio::test(start_paused = true)]
async fn l1_shared_once_per_layer_honest_poll_ready_and_behind_buffer() {
    let t = Arc::new(Tracker::default());
    let layer = layer();
    // Two services from one layer (two axum routes) share the capacity and the queue.
    let mut route1 = layer.layer(forwarder(t.clone()));
    let route2 = tower::buffer::Buffer::new(layer.layer(forwarder(t.clone())), 8);
    let cands = channels(&[("a", 1)]);
    for _ in 0..5 {
        std::future::poll_fn(|cx| route1.poll_ready(cx))
            .await
            .unwrap();
    }
    assert_eq!(
        in_flight(layer.store(), "a"),
        0,
        "readiness reserves nothing"
    );
    let (tx, answer) = stream();
    let held = route1.call(request(&cands, "x", answer)).await.unwrap();
    let waiter = tokio::spawn(route2.clone().oneshot(request(&cands, "y", after(0))));
    settle().await;
    assert_eq!(
        layer.queued("a"),
        1,
        "the other route's request waits in the same queue"
    );
    drop((tx, held));
    let res = waiter.await.unwrap().unwrap();
    assert_eq!(queued_ms(&res), Some(0));
    drop(res);
    assert_eq!(in_flight(layer.store(), "a"), 0);
}

// ---------------------------------------------------------------- stores that answer later

/// The in-memory store behind futures that are not ready at the first poll, like a
/// networked store: exercises the layer's asynchronous paths.
#[derive(Clone)]
struct SlowStore(Store);

struct Later<T>(Option<T>, bool);

impl<T> Unpin for Later<T> {}

impl<T> Future for Later<T> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        if !self.1 {
            self.1 = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(self.0.take().expect("polled after completion"))
    }
}

impl CapacityStore for SlowStore {
    type Future<T: Send + 'static> = Later<StoreResult<T>>;
    fn try_acquire(&self, ch: &str, cap: u32, ttl: Millis) -> Self::Future<Option<LeaseId>> {
        Later(
            Some(poll_ready(CapacityStore::try_acquire(
                &self.0, ch, cap, ttl,
            ))),
            false,
        )
    }
    fn renew(&self, ch: &str, lease: LeaseId, ttl: Millis) -> Self::Future<bool> {
        Later(
            Some(poll_ready(CapacityStore::renew(&self.0, ch, lease, ttl))),
            false,
        )
    }
    fn release(&self, ch: &str, lease: LeaseId) -> Self::Future<()> {
        Later(
            Some(poll_ready(CapacityStore::release(&self.0, ch, lease))),
            false,
        )
    }
    fn in_flight(&self, ch: &str) -> Self::Future<u32> {
        Later(
            Some(poll_ready(CapacityStore::in_flight(&self.0, ch))),
            false,
        )
    }
}

fn poll_ready<T>(f: std::future::Ready<T>) -> T {
    f.into_inner()
}

#[tokio::test(start_paused = true)]
async fn q1_async_store_capacity_never_exceeded_and_all_released() {
    let t = Arc::new(Tracker::default());
    let inner = store();
    let layer = CapacityQueueLayer::new(SlowStore(inner.clone()));
    let svc = layer.layer(forwarder(t.clone()));
    let cands = channels(&[("a", 2), ("b", 1)]);
    let mut tasks = Vec::new();
    for i in 0..60u64 {
        let req = request(&cands, ["x", "y"][i as usize % 2], after(5 + (i * 13) % 40));
        let svc = svc.clone();
        tasks.push(tokio::spawn(async move {
            let res = svc.oneshot(req).await?;
            res.into_body().collect().await.unwrap();
            Ok::<_, BoxError>(())
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    sleep(ms(10)).await; // releases run on spawned tasks
    assert!(t.max("a") <= 2 && t.max("b") <= 1);
    assert_eq!(t.calls.load(Ordering::SeqCst), 60);
    assert_eq!((in_flight(&inner, "a"), in_flight(&inner, "b")), (0, 0));
    assert_eq!(layer.stats().queued, 0);
}

// ---------------------------------------------------------------- scenarios

/// S2: a request at the capacity limit waits in the bounded queue and
/// proceeds when the lease is released; a lease left by a crashed instance expires
/// and is reclaimed by a waiter's poll.
#[tokio::test(start_paused = true)]
async fn s2_waits_and_proceeds_on_release() {
    let t = Arc::new(Tracker::default());
    let layer = layer().max_wait(ms(60_000)).lease_ttl(ms(30_000));
    let svc = layer.layer(forwarder(t.clone()));
    let cands = channels(&[("a", 1)]);
    let holder = tokio::spawn(run(svc.clone(), request(&cands, "t1", after(700))));
    settle().await;
    let start = Instant::now();
    let (ch, q) = run(svc.clone(), request(&cands, "t1", after(0)))
        .await
        .unwrap();
    assert_eq!((ch.as_str(), q), ("a", Some(700)));
    assert_eq!(start.elapsed(), ms(700));
    holder.await.unwrap().unwrap();

    // Another instance took the lease and crashed: nobody will release it.
    let crashed = CapacityStore::try_acquire(layer.store(), "a", 1, 30_000)
        .into_inner()
        .unwrap();
    assert!(crashed.is_some());
    let start = Instant::now();
    let (ch, q) = run(svc.clone(), request(&cands, "t1", after(0)))
        .await
        .unwrap();
    let waited = start.elapsed();
    assert_eq!(ch, "a");
    assert!(
        waited >= ms(30_000) && waited <= ms(30_250),
        "reclaimed after the TTL by a poll: {waited:?}"
    );
    assert_eq!(q, Some(waited.as_millis() as u64));
    assert_eq!(in_flight(layer.store(), "a"), 0);
}

/// S3: two tenants compete for one model pool; the global cap is never
/// exceeded and the low-weight tenant still completes.
#[tokio::test(start_paused = true)]
async fn s3_global_cap_never_exceeded_low_weight_completes() {
    let t = Arc::new(Tracker::default());
    let layer = layer().max_wait(ms(60_000));
    let svc = layer.layer(forwarder(t.clone()));
    let pool = channels(&[("p1", 2), ("p2", 3)]);
    let mut tasks = Vec::new();
    for i in 0..150u64 {
        for (tenant, weight) in [("big", 4), ("small", 1)] {
            let mut req = request(&pool, tenant, after(20 + (i * 7) % 30));
            req.extensions_mut().insert(TenantWeight(weight));
            tasks.push((tenant, tokio::spawn(run(svc.clone(), req))));
        }
    }
    let mut done: HashMap<&str, usize> = HashMap::new();
    for (tenant, task) in tasks {
        task.await.unwrap().expect("no request refused");
        *done.entry(tenant).or_default() += 1;
    }
    assert_eq!(done["small"], 150, "the low-weight tenant completes");
    assert_eq!(done["big"], 150);
    assert!(t.max("p1") <= 2 && t.max("p2") <= 3, "the pool's caps hold");
    let order = t.order();
    let early_big = order[..100].iter().filter(|t| *t == "big").count();
    eprintln!("scenario 3: big tenant took {early_big} of the first 100 admissions");
    assert!(
        early_big >= 70,
        "weights apply while both wait: {early_big}"
    );
    assert_eq!(
        (
            in_flight(layer.store(), "p1"),
            in_flight(layer.store(), "p2")
        ),
        (0, 0)
    );
}

/// A store that never answers a capacity call: every one fails.
#[derive(Clone)]
struct DownStore;

fn down<T>() -> std::future::Ready<StoreResult<T>> {
    std::future::ready(Err(portcullis::core::StoreError::new(
        portcullis::core::store::StoreErrorKind::Unavailable,
        "down",
    )))
}

impl CapacityStore for DownStore {
    type Future<T: Send + 'static> = std::future::Ready<StoreResult<T>>;
    fn try_acquire(&self, _: &str, _: u32, _: Millis) -> Self::Future<Option<LeaseId>> {
        down()
    }
    fn renew(&self, _: &str, _: LeaseId, _: Millis) -> Self::Future<bool> {
        down()
    }
    fn release(&self, _: &str, _: LeaseId) -> Self::Future<()> {
        down()
    }
    fn in_flight(&self, _: &str) -> Self::Future<u32> {
        down()
    }
}

/// D11: the capacity layer's failure mode is a setting: `open` (the default) admits a
/// request whose store cannot answer, without a lease; `closed` refuses it with 503
/// (50301) and Retry-After, and the forwarder is never called. Both are counted.
#[tokio::test(start_paused = true)]
async fn d11_capacity_failure_mode_open_admits_closed_refuses() {
    let cands = channels(&[("a", 2)]);
    let t = Arc::new(Tracker::default());
    let open = CapacityQueueLayer::new(DownStore);
    let res = open
        .layer(forwarder(t.clone()))
        .oneshot(request(&cands, "x", after(1)))
        .await
        .expect("admitted without a lease");
    res.into_body().collect().await.unwrap();
    assert_eq!(t.calls.load(Ordering::SeqCst), 1);
    assert_eq!(open.failure_stats().failed_open, 1);

    let closed = CapacityQueueLayer::new(DownStore).failure_mode(portcullis::FailureMode::Closed);
    let e = closed
        .layer(forwarder(t.clone()))
        .oneshot(request(&cands, "x", after(1)))
        .await
        .unwrap_err();
    let r = rejection(&e);
    assert_eq!(r.code(), GatewayCode::StoreUnavailable);
    assert_eq!(r.layer(), LayerKind::CapacityQueue);
    assert!(r.retry_after().is_some());
    assert_eq!(
        t.calls.load(Ordering::SeqCst),
        1,
        "refused before the forwarder"
    );
    assert_eq!(closed.failure_stats().failed_closed, 1);
}
