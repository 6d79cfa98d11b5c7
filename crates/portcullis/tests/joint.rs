//! The slot and window layers deciding together (D2, T3): `ConcurrencySlotLayer::
//! join_windows` hands the slot to the `AnchoredWindowLayer` right below, which decides
//! it with the windows in one store call; with nothing below to take it, the slot layer
//! acquires it itself. Every rule of each layer alone still holds (C1–C3, W4, L3, L5).

mod common;

use common::*;
use http::Request;
use portcullis::core::window::{LimitView, Outcome};
use portcullis::core::{
    Admission, Demand, GatewayCode, JointAdmission, JointDecision, JointItem, JointSettle,
    JointStore, LeaseId, MemoryStore, Millis, Policy, Scope, SlotAsk, SlotDecision, SlotStore,
    StoreResult, SubjectKey, Tier, WindowAsk, WindowStore, WindowTicket,
};
use portcullis::time::TokioClock;
use portcullis::{AnchoredWindowLayer, ConcurrencySlotLayer};
use std::future::Ready;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tower::{ServiceBuilder, ServiceExt};

/// The in-memory store, counting how each slot was decided.
#[derive(Clone)]
struct Counting {
    inner: MemoryStore<TokioClock>,
    acquires: Arc<AtomicUsize>,
    joint: Arc<AtomicUsize>,
}

impl Counting {
    fn new() -> Self {
        Self {
            inner: MemoryStore::with_clock(TokioClock::new(1_000_000)),
            acquires: Arc::default(),
            joint: Arc::default(),
        }
    }
    fn counts(&self) -> (usize, usize) {
        (
            self.acquires.load(Ordering::SeqCst),
            self.joint.load(Ordering::SeqCst),
        )
    }
}

type R<T> = Ready<StoreResult<T>>;

impl SlotStore for Counting {
    type Future<T: Send + 'static> = R<T>;
    fn acquire(&self, k: &SubjectKey, limit: u32, ttl: Millis) -> R<SlotDecision> {
        self.acquires.fetch_add(1, Ordering::SeqCst);
        self.inner.acquire(k, limit, ttl)
    }
    fn renew(&self, k: &SubjectKey, l: LeaseId, ttl: Millis) -> R<bool> {
        self.inner.renew(k, l, ttl)
    }
    fn release(&self, k: &SubjectKey, l: LeaseId) -> R<()> {
        SlotStore::release(&self.inner, k, l)
    }
    fn in_flight(&self, k: &SubjectKey) -> R<u32> {
        SlotStore::in_flight(&self.inner, k)
    }
}

impl WindowStore for Counting {
    type Future<T: Send + 'static> = R<T>;
    fn admit(&self, k: &SubjectKey, s: Scope, p: &Arc<Policy>, d: &Demand) -> R<Admission> {
        self.inner.admit(k, s, p, d)
    }
    fn settle(&self, k: &SubjectKey, s: Scope, t: WindowTicket, o: Outcome) -> R<()> {
        self.inner.settle(k, s, t, o)
    }
    fn view(&self, k: &SubjectKey, s: Scope, p: &Arc<Policy>) -> R<Vec<LimitView>> {
        self.inner.view(k, s, p)
    }
    fn admit_all(&self, items: &[JointItem]) -> R<JointAdmission> {
        self.inner.admit_all(items)
    }
    fn settle_all(&self, items: Vec<JointSettle>) -> R<()> {
        self.inner.settle_all(items)
    }
}

impl JointStore for Counting {
    fn acquire_and_admit(&self, slot: &SlotAsk, window: Option<WindowAsk<'_>>) -> R<JointDecision> {
        self.joint.fetch_add(1, Ordering::SeqCst);
        self.inner.acquire_and_admit(slot, window)
    }
}

fn policy() -> Policy {
    Policy::default()
        .with_concurrency(1)
        .with_requests(Tier::per_minute(2))
}

fn used_requests(st: &Counting, k: &str) -> u64 {
    st.inner
        .view_now(&k.into(), Scope::Key, &policy())
        .iter()
        .map(|v| v.used)
        .sum()
}

#[tokio::test(start_paused = true)]
async fn d2_slot_decided_with_the_windows_holds_c1_c3_w4_and_l5() {
    let st = Counting::new();
    let (inner, senders) = streaming();
    let svc = ServiceBuilder::new()
        .layer(ConcurrencySlotLayer::new(st.clone()).join_windows())
        .layer(AnchoredWindowLayer::new(st.clone()))
        .service(inner);
    let k = subject("k", policy());
    // Admitted: the slot and the window in one joint call, no slot call of its own.
    let held = svc.clone().oneshot(req(&k, None)).await.unwrap();
    assert_eq!(st.counts(), (0, 1));
    assert_eq!(st.inner.in_flight_now(&"k".into()), 1, "the slot is held");
    assert_eq!(used_requests(&st, "k"), 1);
    // C1: the slot is taken: 42901, and the window counts nothing (W4).
    let e = svc.clone().oneshot(req(&k, None)).await.unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::ConcurrencyLimit);
    assert_eq!(
        used_requests(&st, "k"),
        1,
        "a slot refusal counted a request"
    );
    // L3, C3: held until the body ends, then released once.
    senders.lock().unwrap().clear();
    drop(held);
    assert_eq!(st.inner.in_flight_now(&"k".into()), 0);
    let second = svc.clone().oneshot(req(&k, None)).await.unwrap();
    drop(second);
    // The window is full (2 a minute): 42902, and no slot is taken by the refusal (L5).
    let e = svc.clone().oneshot(req(&k, None)).await.unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::RpmLimit);
    assert_eq!(
        st.inner.in_flight_now(&"k".into()),
        0,
        "a window refusal took a slot"
    );
    assert_eq!(st.counts().0, 0, "every slot was decided with the windows");
}

#[tokio::test(start_paused = true)]
async fn d2_with_nothing_below_to_take_it_the_slot_layer_acquires_itself() {
    let st = Counting::new();
    // A subject with a slot but no windows: the window layer has nothing to admit and
    // leaves the slot to the slot layer.
    let only_slot = subject("s", Policy::default().with_concurrency(1));
    let (inner, _senders) = streaming();
    let svc = ServiceBuilder::new()
        .layer(ConcurrencySlotLayer::new(st.clone()).join_windows())
        .layer(AnchoredWindowLayer::new(st.clone()))
        .service(inner);
    let held = svc.clone().oneshot(req(&only_slot, None)).await.unwrap();
    assert_eq!(st.counts(), (1, 0));
    let e = svc
        .clone()
        .oneshot(req(&only_slot, None))
        .await
        .unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::ConcurrencyLimit);
    drop(held);
    // No window layer at all below: the slot layer acquires, before the inner service's
    // future first runs (a refused request's never does).
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let (streaming_inner, _s) = streaming();
    // Counted when its future runs: the inner future of a refused request never does.
    let counted = tower::service_fn(move |r: Request<()>| {
        let (seen, inner) = (seen.clone(), streaming_inner.clone());
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            inner.oneshot(r).await
        }
    });
    let alone = ServiceBuilder::new()
        .layer(ConcurrencySlotLayer::new(st.clone()).join_windows())
        .service(counted);
    let k = subject("k", policy());
    let held = alone.clone().oneshot(req(&k, None)).await.unwrap();
    let e = alone.clone().oneshot(req(&k, None)).await.unwrap_err();
    assert_eq!(rejection(&e).code(), GatewayCode::ConcurrencyLimit);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the refused request reached the service"
    );
    assert_eq!(st.counts(), (4, 0), "every slot acquired by the slot layer");
    drop(held);
    assert_eq!(st.inner.in_flight_now(&"k".into()), 0);
}
