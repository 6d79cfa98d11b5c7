//! Cost per request of each layer, of the three user-policy layers stacked and of all
//! seven stacked, over a no-op service (T1). In-memory store, one hot key and
//! 100k distinct keys, 1 and 2 threads.
//!
//! `cargo bench -p portcullis --bench layers`
//!
//! Each iteration is a whole request: `call`, poll the response future once (the
//! in-memory store and the no-op service answer at once), then drop the response,
//! which releases the slot and settles the windows.

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use http::{Request, Response};
use http_body_util::Empty;
use portcullis::core::upstream::{RateLimits, UpstreamChannel, UpstreamRegistry};
use portcullis::core::{
    BillingStore, Candidates, ChannelRef, Demand, Dialect, MemoryStore, ModelId, Policy, SlotStore,
    Subject, Tier, WindowStore,
};
use portcullis::{
    AnchoredWindowLayer, BillingGateLayer, CapacityQueueLayer, ConcurrencySlotLayer,
    ErrorMappingLayer, FailoverLayer, UpstreamLimitLayer,
};
use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tower::{Layer, Service, ServiceBuilder};

const DISTINCT: usize = 100_000;

/// The system allocator, counting allocations while `COUNTING` is on: the bench prints
/// how many one request makes through each stack (allocation is the largest item of a
/// profile). Off during the timed runs, where it costs one relaxed load.
struct Counting;

static ALLOCATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static COUNTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn count_allocation() {
    use std::sync::atomic::Ordering::Relaxed;
    if COUNTING.load(Relaxed) {
        ALLOCATIONS.fetch_add(1, Relaxed);
    }
}

// SAFETY: every call is passed to the system allocator unchanged.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: as above.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        count_allocation();
        // SAFETY: as above.
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations per request through `svc`, over 1,000 warm requests.
fn allocations_per_request<S: Service<Request<()>>>(svc: &mut S, subject: &Subject) -> f64 {
    for _ in 0..100 {
        one(svc, subject);
    }
    use std::sync::atomic::Ordering::Relaxed;
    let before = ALLOCATIONS.load(Relaxed);
    COUNTING.store(true, Relaxed);
    for _ in 0..1000 {
        one(svc, subject);
    }
    COUNTING.store(false, Relaxed);
    (ALLOCATIONS.load(Relaxed) - before) as f64 / 1000.0
}

fn policy() -> Arc<Policy> {
    Arc::new(
        Policy::default()
            .with_concurrency(1_000_000)
            .with_requests(Tier::per_minute(u64::MAX / 4))
            .with_requests(Tier::per_day(u64::MAX / 4))
            .with_tokens(Tier::per_minute(u64::MAX / 4))
            .with_tokens(Tier::per_day(u64::MAX / 4)),
    )
}

fn subjects(n: usize) -> Vec<Subject> {
    let p = policy();
    (0..n)
        .map(|i| {
            Subject::new(format!("sk-bench-{i:08}"))
                .with_policy(p.clone())
                .with_tenant("bench")
        })
        .collect()
}

thread_local! {
    static CANDIDATES: Candidates = Candidates::new([ChannelRef::new("openai-1", 1_000_000)]);
    static MODEL: Arc<str> = Arc::from("gpt-4o-mini");
}

/// One channel with provider RPM and TPM that are never the bottleneck.
fn registry() -> Arc<UpstreamRegistry> {
    Arc::new(UpstreamRegistry::new().with_channel(UpstreamChannel {
        name: "openai-1".into(),
        dialect: Dialect::OpenAi,
        vendor: "openai".into(),
        credential: "org-1".into(),
        limits: RateLimits {
            rpm: Some(u64::MAX / 4),
            tpm: Some(u64::MAX / 4),
            ..RateLimits::default()
        },
        model_limits: vec![],
    }))
}

/// A store whose tenant `bench` has a balance that never runs out.
fn funded() -> MemoryStore {
    let s = MemoryStore::new();
    let mut cx = Context::from_waker(Waker::noop());
    let _ = pin!(s.seed_balance("bench", i64::MAX / 4)).poll(&mut cx);
    s
}

#[derive(Clone)]
struct Noop;

impl Service<Request<()>> for Noop {
    type Response = Response<Empty<Bytes>>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: Request<()>) -> Self::Future {
        std::future::ready(Ok(Response::new(Empty::new())))
    }
}

/// One request through `svc`, to the dropped response.
#[inline]
fn one<S>(svc: &mut S, subject: &Subject)
where
    S: Service<Request<()>>,
{
    let mut req = Request::new(());
    let x = req.extensions_mut();
    x.insert(subject.clone());
    x.insert(Demand {
        tokens: 100,
        money: 10,
        ..Demand::default()
    });
    // What the upstream-side layers read: the channels, the model, the dialect.
    x.insert(CANDIDATES.with(Clone::clone));
    x.insert(ModelId(MODEL.with(Clone::clone)));
    x.insert(Dialect::OpenAi);
    let fut = pin!(svc.call(req));
    let mut cx = Context::from_waker(Waker::noop());
    match fut.poll(&mut cx) {
        Poll::Ready(r) => drop(black_box(r.ok())),
        Poll::Pending => panic!("the in-memory stack must answer at once"),
    }
}

fn bench_stack<L>(c: &mut Criterion, name: &str, make: impl Fn() -> L)
where
    L: Layer<Noop> + Send + 'static,
    L::Service: Service<Request<()>> + Clone + Send + 'static,
{
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(1));
    let hot = subjects(1);
    let many = Arc::new(subjects(DISTINCT));
    {
        let mut svc = make().layer(Noop);
        // (Minus the request's own: the no-op stack's count is the baseline.)
        println!(
            "{name}: {:.1} allocations per request",
            allocations_per_request(&mut svc, &hot[0])
        );
    }
    g.bench_function(BenchmarkId::new("hot_key", "1_thread"), |b| {
        let mut svc = make().layer(Noop);
        b.iter(|| one(&mut svc, &hot[0]));
    });
    g.bench_function(BenchmarkId::new("100k_keys", "1_thread"), |b| {
        let mut svc = make().layer(Noop);
        let mut i = 0usize;
        b.iter(|| {
            i = (i + 1) % DISTINCT;
            one(&mut svc, &many[i]);
        });
    });
    for (label, keys) in [
        ("hot_key", Arc::new(subjects(1))),
        ("100k_keys", many.clone()),
    ] {
        g.bench_function(BenchmarkId::new(label, "2_threads"), |b| {
            let svc = make().layer(Noop);
            b.iter_custom(|iters| {
                let per = iters.div_ceil(2);
                let start = Instant::now();
                let handles: Vec<_> = (0..2)
                    .map(|t| {
                        let mut svc = svc.clone();
                        let keys = keys.clone();
                        std::thread::spawn(move || {
                            let mut i = t * 7919;
                            for _ in 0..per {
                                i = (i + 1) % keys.len();
                                one(&mut svc, &keys[i]);
                            }
                        })
                    })
                    .collect();
                for h in handles {
                    h.join().unwrap();
                }
                // Wall time per request of the pair: throughput-equivalent latency.
                start.elapsed() / 2
            });
        });
    }
    g.finish();
}

/// The raw store decision of T1: one slot acquire + one window admit (all tiers),
/// then release and settle — no tower.
fn bench_decision(c: &mut Criterion) {
    let mut g = c.benchmark_group("decision");
    let store = MemoryStore::new();
    let p = policy();
    let hot = subjects(1);
    let many = subjects(DISTINCT);
    let run = |s: &Subject| {
        let mut cx = Context::from_waker(Waker::noop());
        let lease = match pin!(store.acquire(&s.key, 1_000_000, 600_000)).poll(&mut cx) {
            Poll::Ready(Ok(portcullis::core::SlotDecision::Acquired(l))) => l,
            _ => unreachable!(),
        };
        let ticket = match pin!(store.admit(
            &s.key,
            portcullis::core::Scope::Key,
            &p,
            &Demand::tokens(100)
        ))
        .poll(&mut cx)
        {
            Poll::Ready(Ok(portcullis::core::Admission::Admitted(t))) => t,
            _ => unreachable!(),
        };
        store.settle_now(
            &s.key,
            portcullis::core::Scope::Key,
            &ticket,
            portcullis::core::Outcome::Completed(None),
        );
        store.release_now(&s.key, lease);
    };
    g.bench_function("slot_plus_windows/hot_key", |b| b.iter(|| run(&hot[0])));
    g.bench_function("slot_plus_windows/100k_keys", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % DISTINCT;
            run(&many[i])
        })
    });
    g.finish();
}

/// Resident memory of this process, in bytes (Linux `/proc/self/statm`).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// T1 scaling: the three user-policy layers over 1 to 1,000,000 distinct keys (one
/// thread), and the resident memory one idle key's state costs, measured once over a
/// million keys.
fn bench_scaling(c: &mut Criterion) {
    const MILLION: usize = 1_000_000;
    // A store sized for the keys, as `[store] capacity` would be for a million keys: at
    // exactly the default capacity (1,000,000) the 64 shards fill unevenly, and keys
    // visited in a cycle evict each other (the least recently touched go first), so
    // every request would rebuild its state instead of finding it.
    let sized =
        || MemoryStore::with_clock_and_capacity(portcullis::core::SystemClock::new(), 2 * MILLION);
    let all = Arc::new(subjects(MILLION));
    {
        let store = sized();
        let mut svc = ServiceBuilder::new()
            .layer(ConcurrencySlotLayer::new(store.clone()))
            .layer(AnchoredWindowLayer::new(store.clone()))
            .service(Noop);
        let before = resident_bytes();
        for s in all.iter() {
            one(&mut svc, s);
        }
        if let (Some(b), Some(a)) = (before, resident_bytes()) {
            let stats = store.stats();
            println!(
                "scaling: {MILLION} idle keys hold {:.0} bytes each ({} window entries, {} slot entries)",
                a.saturating_sub(b) as f64 / stats.window_entries.max(1) as f64,
                stats.window_entries,
                stats.slot_entries
            );
        }
    }
    let mut g = c.benchmark_group("scaling_three_stacked");
    g.throughput(Throughput::Elements(1));
    for n in [1usize, 1_000, 100_000, MILLION] {
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            let store = sized();
            let mut svc = ServiceBuilder::new()
                .layer(ErrorMappingLayer::new())
                .layer(ConcurrencySlotLayer::new(store.clone()))
                .layer(AnchoredWindowLayer::new(store))
                .service(Noop);
            let mut i = 0usize;
            b.iter(|| {
                i = (i + 1) % n;
                one(&mut svc, &all[i]);
            });
        });
    }
    g.finish();
}

fn layers(c: &mut Criterion) {
    bench_decision(c);
    bench_scaling(c);
    // The cost of building the request and dropping the response, with no layer.
    bench_stack(c, "no_layer", tower::layer::util::Identity::new);
    bench_stack(c, "slot_layer", || {
        ConcurrencySlotLayer::new(MemoryStore::new())
    });
    bench_stack(c, "window_layer", || {
        AnchoredWindowLayer::new(MemoryStore::new())
    });
    bench_stack(c, "error_mapping_layer", ErrorMappingLayer::new);
    bench_stack(c, "three_stacked", || {
        let store = MemoryStore::new();
        ServiceBuilder::new()
            .layer(ErrorMappingLayer::new())
            .layer(ConcurrencySlotLayer::new(store.clone()))
            .layer(AnchoredWindowLayer::new(store))
            .into_inner()
    });
    bench_stack(c, "upstream_limit_layer", || {
        UpstreamLimitLayer::new(MemoryStore::new(), registry())
    });
    bench_stack(c, "capacity_queue_layer", || {
        CapacityQueueLayer::new(MemoryStore::new())
    });
    bench_stack(c, "billing_gate_layer", || BillingGateLayer::new(funded()));
    bench_stack(c, "failover_layer", || FailoverLayer::new(registry()));
    bench_stack(c, "seven_stacked", || {
        let store = funded();
        let registry = registry();
        ServiceBuilder::new()
            .layer(ErrorMappingLayer::new())
            .layer(ConcurrencySlotLayer::new(store.clone()))
            .layer(AnchoredWindowLayer::new(store.clone()))
            .layer(FailoverLayer::new(registry.clone()))
            .layer(UpstreamLimitLayer::new(store.clone(), registry))
            .layer(CapacityQueueLayer::new(store.clone()))
            .layer(BillingGateLayer::new(store))
            .into_inner()
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = layers
}
criterion_main!(benches);
