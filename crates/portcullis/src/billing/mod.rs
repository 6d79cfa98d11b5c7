//! Balance and spend-cap gate, money budgets and per-attempt settlement (B1–B7).
//!
//! At `call` the layer asks the [`BillingStore`] once whether the request may run
//! (B1: balance > 0, key spend below its cap) and reserves its money upper bound in
//! every budget it draws on (B3). When the response body ends the attempt is settled
//! by its id (B4) from the [`UsageReport`] in the request's [`UsageRecorder`]: a
//! complete report with a cost settles at that cost; a stream cut after its content
//! went out is charged what the gateway saw streamed ([`CutStreams`], B7); a partial
//! or unknown one stays *pending reconciliation* with its upper bound — never zero. A
//! request refused
//! further in is refunded (L5). Every settled or pending attempt is emitted as a
//! [`UsageRecord`] through the [`UsageSink`] the application plugs in (B6).
//!
//! If the store cannot answer, the layer fails closed with 503 + Retry-After: no call
//! that cannot be billed is sent (B5). A settlement or refund the store could not take
//! is retried with backoff until it lands (B7, idempotent per attempt), and its usage
//! record is emitted once it has; see [`SettlementStats`]. A tenant whose billing
//! record is missing although its [`BillingProfile::tenant_expected`] says it has one
//! gets a 503 of its own (50303), an error log line and a metric — never a 402 (B7).
//! Every attempt is reserved with the layer's longest request life
//! ([`BillingGateLayer::max_request_lifetime`]): still open after it, the store sweeps it
//! into pending reconciliation.
//!
//! A request admitted under an active subscription (see
//! [`AdmittedUnder`](portcullis_core::AdmittedUnder), set by the window layer) is not
//! charged to the balance; one that fell through to pay-as-you-go is (W8).
//!
//! The request's extensions supply: the [`Subject`](portcullis_core::Subject) (its tenant
//! pays), an optional [`BillingProfile`] (spend cap, budgets), the
//! [`Demand`](portcullis_core::Demand) (its `money` is the upper bound) and, for records,
//! the [`ModelId`](portcullis_core::ModelId).
//!
//! An attempt left pending is closed by an operator with [`reconcile()`]: settled at its
//! real cost or written off, with a usage record through the same sink (B7).
//!
//! ```
//! use std::convert::Infallible;
//! use std::sync::{Arc, Mutex};
//! use portcullis::BillingGateLayer;
//! use portcullis::billing::UsageRecord;
//! use portcullis::core::{AttemptState, BillingStore, Demand, MemoryStore, Subject, Usage, UsageRecorder};
//! use tower::{ServiceBuilder, ServiceExt};
//! use http_body_util::BodyExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let store = MemoryStore::new();
//! store.seed_balance("acme", 100).await.unwrap();
//! let records = Arc::new(Mutex::new(Vec::<UsageRecord>::new()));
//! let sink = records.clone();
//! let svc = ServiceBuilder::new()
//!     .layer(BillingGateLayer::new(store.clone()).sink(move |r: UsageRecord| sink.lock().unwrap().push(r)))
//!     .service_fn(|req: http::Request<()>| async move {
//!         // The forwarder records what the provider reported, cost included.
//!         let usage = Usage { output_tokens: 12, cost: Some(30), ..Usage::default() };
//!         req.extensions().get::<UsageRecorder>().unwrap().record(usage);
//!         Ok::<_, Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::new())))
//!     });
//! let ask = || {
//!     let mut req = http::Request::new(());
//!     req.extensions_mut().insert(Subject::new("sk-1").with_tenant("acme"));
//!     req.extensions_mut().insert(Demand { money: 50, ..Demand::default() }); // upper bound
//!     req
//! };
//! let res = svc.clone().oneshot(ask()).await.unwrap();
//! res.into_body().collect().await.unwrap(); // settled when the body ends
//! let books = store.account(Some("acme"), &"sk-1".into(), &[]).await.unwrap();
//! assert_eq!(books.balance, Some(70));
//! assert_eq!(records.lock().unwrap()[0].outcome, AttemptState::Settled(30));
//!
//! // At or below zero: 402, and the provider is never called.
//! store.set_balance("acme", 0).await.unwrap();
//! let refused = svc.oneshot(ask()).await.unwrap_err();
//! let refused = refused.downcast_ref::<portcullis::core::Rejection>().unwrap();
//! assert_eq!(refused.http_status(), 402);
//! # }
//! ```
//!
//! [`BillingStore`]: portcullis_core::BillingStore
//! [`UsageReport`]: portcullis_core::UsageReport
//! [`UsageRecorder`]: portcullis_core::UsageRecorder

mod decide;
mod durable;
mod future;
mod layer;
mod reconcile;
mod service;

// The request extensions the billing layer reads and writes (defined with the others).
pub use crate::extensions::{Attempt, BillingProfile, ClientRequestId, NotBilled};
pub use durable::{FIRST_BACKOFF, MAX_BACKOFF, MAX_WAITING_SETTLEMENTS, SettlementStats};
pub use future::ResponseFuture;
pub use layer::BillingGateLayer;
pub use reconcile::{Reconciliation, reconcile, resolve};
pub use service::BillingGate;

use crate::body::Hold;
use durable::{Job, Settler};
use portcullis_core::attempt::CallEnd;
use portcullis_core::{
    AttemptId, AttemptRef, AttemptState, BillingOutcome, BillingStore, Millis, Money, SubjectKey,
    Usage, UsageRecorder,
};

/// What the billing layer charges for a stream cut after its content went out — by the
/// client (a chat UI's stop button) or by the upstream — whose provider reported no
/// final usage (B7). Set with
/// [`BillingGateLayer::cut_streams`](crate::BillingGateLayer::cut_streams).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CutStreams {
    /// Charge what the gateway saw streamed, at once: the input as the provider
    /// reported it (else the gateway's estimate) and the output counted from the
    /// deltas, never below the provider's own count so far (the default: the client has
    /// received, and the provider billed, at least that much).
    #[default]
    Charge,
    /// Hold the attempt's upper bound pending reconciliation, as an unknown outcome.
    Hold,
}

/// What an automatic charge or resolution of an attempt rests on (B7), named in its
/// usage record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// A stream cut after its content went out, charged what the gateway saw streamed
    /// ([`CutStreams::Charge`]).
    Streamed,
    /// A pending attempt settled at the usage the provider reported when asked later for
    /// the object the answer named (a stored response or chat completion).
    Provider,
    /// A pending attempt nothing answered for, settled at its upper bound when its time
    /// ran out (the `upper_bound` policy of unknown outcomes).
    UpperBound,
}

impl Evidence {
    /// The evidence's name in records and the ledger.
    pub fn as_str(self) -> &'static str {
        match self {
            Evidence::Streamed => "streamed",
            Evidence::Provider => "provider",
            Evidence::UpperBound => "upper_bound",
        }
    }
}
use std::sync::Arc;

/// One settled or pending attempt (B6). Made by the billing layer; new fields may be
/// added, so match it with `..`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UsageRecord {
    /// When it was settled (ms on the layer's clock).
    pub at: Millis,
    /// The key it ran under (the subject key, never a secret in the proxy).
    pub key: SubjectKey,
    /// The tenant.
    pub tenant: Option<Arc<str>>,
    /// The model.
    pub model: Option<Arc<str>>,
    /// The channel that served it.
    pub channel: Option<Arc<str>>,
    /// The id the channel's provider knows the model by, when it is not `model`.
    pub upstream_model: Option<Arc<str>>,
    /// The attempt.
    pub attempt: AttemptId,
    /// The request's idempotency key (its `x-request-id`; the proxy always makes its
    /// own).
    pub idempotency_key: Option<Arc<str>>,
    /// The client's own request id ([`ClientRequestId`]), when the application kept one.
    pub client_request_id: Option<Arc<str>>,
    /// Token and media figures, when known.
    pub usage: Option<Usage>,
    /// How it ended.
    pub outcome: AttemptState,
    /// Whether the balance pays (false when a subscription covers it).
    pub billed_to_balance: bool,
    /// What an automatic charge rests on (B7): set when the layer settled the attempt
    /// without a complete report from the provider.
    pub evidence: Option<Evidence>,
    /// Set when the attempt was closed from pending reconciliation (B7) — by an
    /// operator, or by the gateway on the evidence named in `evidence`: a second record
    /// of the attempt (its first said pending), with the settled cost or the write-off.
    pub reconciliation: Option<Reconciliation>,
    /// The provider's object the answer named, as the path it is retrieved at under the
    /// channel's base URL (`/v1/responses/resp_…`, `/v1/chat/completions/chatcmpl-…`):
    /// what a pending attempt can be resolved from (B7).
    pub provider_object: Option<Arc<str>>,
}

impl UsageRecord {
    /// The attempt and its books (D3), as a reconciliation names it to
    /// [`BillingStore::settle_attempt`].
    pub fn attempt_ref(&self) -> AttemptRef {
        AttemptRef {
            attempt: self.attempt.clone(),
            books: portcullis_core::Books::of(self.tenant.as_deref(), &self.key),
        }
    }

    /// The money this record stands for: the cost, or the pending upper bound (0 for a
    /// write-off).
    pub fn amount(&self) -> Money {
        match self.outcome {
            AttemptState::Settled(c) | AttemptState::Pending(c) => c,
            AttemptState::Open | AttemptState::Refunded => 0,
        }
    }
}

/// Where usage records go: the application's durable ledger (B6).
pub trait UsageSink: Send + Sync + 'static {
    /// Takes one record. Called off the response path; must not block for long.
    fn record(&self, record: UsageRecord);
}

impl UsageSink for () {
    fn record(&self, _: UsageRecord) {}
}

impl<F: Fn(UsageRecord) + Send + Sync + 'static> UsageSink for F {
    fn record(&self, record: UsageRecord) {
        self(record)
    }
}

/// A new attempt id: a per-process random prefix and a counter
/// (`att-<16 hex digits>-<counter>`).
pub(crate) fn next_attempt_id() -> AttemptId {
    use portcullis_core::id;
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    static NEXT: id::Sequence = id::Sequence::starting_at(1);
    let prefix = PREFIX.get_or_init(|| format!("att-{:016x}-", id::process_tag()));
    id::with_counter(prefix, NEXT.next())
}

/// What settling an attempt needs, before it is admitted.
pub(crate) struct Settlement<St> {
    pub(crate) settler: Arc<Settler<St>>,
    /// The attempt and its books.
    pub(crate) attempt: AttemptRef,
    /// Its money upper bound.
    pub(crate) money: Money,
    pub(crate) sink: Arc<dyn UsageSink>,
    pub(crate) recorder: UsageRecorder,
    pub(crate) template: UsageRecord,
    /// What a stream cut after its content went out is charged (B7).
    pub(crate) cut_streams: CutStreams,
}

impl<St: BillingStore> Settlement<St> {
    /// Refunds the attempt (a reservation whose answer was lost or abandoned), retried
    /// until it lands; no usage record.
    pub(crate) fn refund(&self, what: &'static str) {
        self.settler.settle(Job {
            attempt: self.attempt.clone(),
            outcome: BillingOutcome::Refund,
            money: self.money,
            record: None,
            what,
        });
    }

    /// Sends one refund of the attempt, not retried: for a reservation that was
    /// certainly never carried out (the store was unreachable), where a refund finds
    /// nothing anyway.
    pub(crate) fn refund_once(&self, what: &'static str) {
        crate::spawn::detach(
            self.settler
                .store()
                .settle_attempt(&self.attempt, BillingOutcome::Refund),
            what,
        );
    }

    /// The attempt was admitted: settle it when the guard drops.
    pub(crate) fn admitted(self) -> BillingGuard<St> {
        BillingGuard {
            s: self,
            end: CallEnd::Unanswered,
            _in_flight: crate::gauge::InFlight::enter(portcullis_core::LayerKind::BillingGate),
        }
    }
}

/// An admitted attempt: settled when dropped.
pub struct BillingGuard<St: BillingStore> {
    s: Settlement<St>,
    /// How the inner call ended (so far).
    pub(crate) end: CallEnd,
    _in_flight: crate::gauge::InFlight,
}

impl<St: BillingStore> Hold for BillingGuard<St> {
    fn call_ended(&mut self, end: CallEnd) {
        self.end = end;
    }
}

impl<St: BillingStore> Drop for BillingGuard<St> {
    fn drop(&mut self) {
        let decide::Closing {
            outcome,
            usage,
            evidence,
        } = decide::closing(self.end, self.s.recorder.report(), self.s.cut_streams);
        let mut record = self.s.template.clone();
        record.usage = usage;
        record.evidence = evidence;
        record.channel = self.s.recorder.channel();
        record.upstream_model = self.s.recorder.upstream_model();
        record.provider_object = self.s.recorder.provider_object();
        // The in-memory store settles right here: recorded at once, no task, no box. A
        // failure is retried until it lands (B7).
        self.s.settler.settle(Job {
            attempt: self.s.attempt.clone(),
            outcome,
            money: self.s.money,
            record: Some((record, self.s.sink.clone())),
            what: "billing settlement",
        });
    }
}

/// Passes a settled attempt's record to the sink (a refund is not a usage record).
fn report(sink: &dyn UsageSink, mut record: UsageRecord, state: Option<AttemptState>) {
    if let Some(state) = state {
        if state != AttemptState::Refunded {
            record.outcome = state;
            sink.record(record);
        }
    }
}

#[cfg(test)]
mod attempt_id_tests {
    use super::next_attempt_id;

    #[test]
    fn b4_attempt_ids_are_unique_and_shaped_prefix_then_counter() {
        let ids: Vec<_> = (0..1000).map(|_| next_attempt_id()).collect();
        let unique: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
        let mut last = 0u64;
        for id in &ids {
            let rest = id.strip_prefix("att-").expect("att- prefix");
            let (hex, n) = rest.split_once('-').expect("prefix-counter");
            assert_eq!(hex.len(), 16, "{id}");
            assert!(hex.bytes().all(|c| c.is_ascii_hexdigit()), "{id}");
            let n: u64 = n.parse().expect("decimal counter");
            assert!(n > last, "{id} after {last}");
            last = n;
        }
        assert!(ids.iter().all(|id| id[..21] == ids[0][..21]));
    }
}
