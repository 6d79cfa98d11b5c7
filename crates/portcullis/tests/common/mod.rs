//! Helpers shared by the layer tests.
#![allow(dead_code)]

use bytes::Bytes;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use portcullis::BoxError;
use portcullis::core::window::{LimitView, Outcome};
use portcullis::core::{
    AccountView, AttemptRef, AttemptState, BillingDecision, BillingOutcome, BillingRequest,
    BillingStore, Budget, Money,
};
use portcullis::core::{
    Admission, Demand, LeaseId, Millis, Policy, Rejection, Scope, SlotDecision, SlotStore,
    StoreError, StoreErrorKind, StoreResult, Subject, SubjectKey, WindowStore, WindowTicket,
};
use std::convert::Infallible;
use std::future::Ready;
use tokio::sync::mpsc;

/// The senders of the bodies [`streaming`] answered with, one per request.
pub type Senders =
    std::sync::Arc<std::sync::Mutex<Vec<mpsc::UnboundedSender<Result<Frame<Bytes>, Infallible>>>>>;

/// An inner service answering with a body the test ends by dropping the sender.
pub fn streaming() -> (
    impl tower::Service<
        Request<()>,
        Response = Response<TestBody>,
        Error = Infallible,
        Future = impl Send,
    > + Clone,
    Senders,
) {
    let senders: Senders = Senders::default();
    let s2 = senders.clone();
    let svc = tower::service_fn(move |_r: Request<()>| {
        let (tx, body) = stream_body();
        s2.lock().unwrap().push(tx);
        async move { Ok::<_, Infallible>(Response::new(body)) }
    });
    (svc, senders)
}

/// A streamed body fed by the test.
pub type TestBody = StreamBody<tokio_stream_shim::Rx>;

pub mod tokio_stream_shim {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// Receiver side of a test stream.
    #[derive(Debug)]
    pub struct Rx(pub mpsc::UnboundedReceiver<Result<Frame<Bytes>, Infallible>>);

    impl futures_util::Stream for Rx {
        type Item = Result<Frame<Bytes>, Infallible>;
        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            self.0.poll_recv(cx)
        }
    }
}

/// A body the test controls: send chunks with the sender, drop it to end the body.
pub fn stream_body() -> (
    mpsc::UnboundedSender<Result<Frame<Bytes>, Infallible>>,
    TestBody,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, StreamBody::new(tokio_stream_shim::Rx(rx)))
}

/// A request for `subject` with an optional demand.
pub fn req(subject: &Subject, demand: Option<Demand>) -> Request<()> {
    let mut r = Request::new(());
    r.extensions_mut().insert(subject.clone());
    if let Some(d) = demand {
        r.extensions_mut().insert(d);
    }
    r
}

/// The rejection inside a layer error.
pub fn rejection(e: &BoxError) -> &Rejection {
    e.downcast_ref::<Rejection>()
        .unwrap_or_else(|| panic!("not a Rejection: {e}"))
}

/// Reads a body to its end.
pub async fn drain<B: http_body::Body>(b: B) -> Result<Bytes, B::Error> {
    Ok(b.collect().await?.to_bytes())
}

pub fn subject(key: &str, policy: Policy) -> Subject {
    Subject::new(key).with_policy(policy)
}

pub fn ok_response() -> Result<Response<http_body_util::Full<Bytes>>, Infallible> {
    Ok(Response::new(http_body_util::Full::new(
        Bytes::from_static(b"ok"),
    )))
}

/// A store whose every call fails: for the D4 failure-mode tests.
#[derive(Clone)]
pub struct DeadStore;

fn dead<T>() -> Ready<StoreResult<T>> {
    std::future::ready(Err(StoreError::new(
        StoreErrorKind::Unavailable,
        "connection refused",
    )))
}

impl SlotStore for DeadStore {
    type Future<T: Send + 'static> = Ready<StoreResult<T>>;
    fn acquire(&self, _: &SubjectKey, _: u32, _: Millis) -> Self::Future<SlotDecision> {
        dead()
    }
    fn renew(&self, _: &SubjectKey, _: LeaseId, _: Millis) -> Self::Future<bool> {
        dead()
    }
    fn release(&self, _: &SubjectKey, _: LeaseId) -> Self::Future<()> {
        dead()
    }
    fn in_flight(&self, _: &SubjectKey) -> Self::Future<u32> {
        dead()
    }
}

impl WindowStore for DeadStore {
    type Future<T: Send + 'static> = Ready<StoreResult<T>>;
    fn admit(
        &self,
        _: &SubjectKey,
        _: Scope,
        _: &std::sync::Arc<Policy>,
        _: &Demand,
    ) -> Self::Future<Admission> {
        dead()
    }
    fn settle(&self, _: &SubjectKey, _: Scope, _: WindowTicket, _: Outcome) -> Self::Future<()> {
        dead()
    }
    fn view(
        &self,
        _: &SubjectKey,
        _: Scope,
        _: &std::sync::Arc<Policy>,
    ) -> Self::Future<Vec<LimitView>> {
        dead()
    }
    fn admit_all(
        &self,
        _: &[portcullis::core::JointItem],
    ) -> Self::Future<portcullis::core::JointAdmission> {
        dead()
    }
    fn settle_all(&self, _: Vec<portcullis::core::JointSettle>) -> Self::Future<()> {
        dead()
    }
}

impl BillingStore for DeadStore {
    type Future<T: Send + 'static> = Ready<StoreResult<T>>;
    fn check_and_reserve(&self, _: &BillingRequest) -> Self::Future<BillingDecision> {
        dead()
    }
    fn settle_attempt(
        &self,
        _: &AttemptRef,
        _: BillingOutcome,
    ) -> Self::Future<Option<AttemptState>> {
        dead()
    }
    fn account(&self, _: Option<&str>, _: &SubjectKey, _: &[Budget]) -> Self::Future<AccountView> {
        dead()
    }
    fn seed_balance(&self, _: &str, _: Money) -> Self::Future<bool> {
        dead()
    }
    fn seed_key_spend(
        &self,
        _: &portcullis::core::Books,
        _: &SubjectKey,
        _: Money,
    ) -> Self::Future<bool> {
        dead()
    }
    fn set_balance(&self, _: &str, _: Money) -> Self::Future<()> {
        dead()
    }
    fn credit(&self, _: &str, _: Money) -> Self::Future<Money> {
        dead()
    }
    fn pending(&self) -> Self::Future<Vec<(AttemptRef, Money)>> {
        dead()
    }
}
