//! The request extensions through which the layers, the application and the forwarder
//! cooperate: what each one says, who puts it in the request, who reads it, and when.
//!
//! The types this crate defines live here; the ones the stores and the proxy share are
//! portcullis-core's and are linked from the table. A layer reads its extensions in its
//! `call`, before it decides; whatever it holds for the request is then settled from
//! the [`UsageRecorder`](crate::core::UsageRecorder) when the response body ends (L3).
//!
//! | extension | written by | read by | when |
//! |---|---|---|---|
//! | [`Subject`](crate::core::Subject) | the application's authentication step (or a [`SubjectExtractor`](crate::SubjectExtractor) builds it for the slot and window layers, L6) | slots and windows (through the extractor), billing (key and tenant pay), capacity (the tenant of the fair queue) | before the stack; without one, slots, windows and billing refuse with 40101 |
//! | [`Demand`](crate::core::Demand) (optional) | the application (the proxy's body inspection) | windows (what to reserve), billing (`money`: the upper bound), upstream limits (the token estimate, without a `RateCount`) | before the stack |
//! | [`UsageRecorder`](crate::core::UsageRecorder) | windows, upstream limits and billing insert one if there is none; failover gives each attempt a child of the request's; the forwarder records the actual [`Usage`](crate::core::Usage) and the channel that served | windows, upstream limits and billing when the body ends (W5, U2, B4); failover (the channel that served) | recorded before the body ends |
//! | [`AdmittedUnder`](crate::core::AdmittedUnder) | windows, on admission | billing: a request the subscription covers is not charged to the balance (W8) | windows' `call`, then billing's |
//! | [`BillingProfile`] (optional) | the application | billing (spend cap, budgets, whether the tenant's record must exist) | before the stack |
//! | [`ClientRequestId`] (optional) | the application (the proxy keeps the client's `x-request-id` here) | billing (a field of the usage record) | before the stack |
//! | [`NotBilled`] (optional) | the application | billing: nothing reserved, settled or recorded (P6) | before the stack |
//! | [`Attempt`] | billing | the inner service, when it needs the attempt's id | billing's `call`, before the inner call |
//! | [`ModelId`](crate::core::ModelId) (optional) | the application | upstream limits (the credential + model scope), billing (the usage record), failover (the model whose channels were tried, F1) | before the stack |
//! | [`Candidates`](crate::core::Candidates) | the application; failover narrows them for each attempt (F1); the upstream limits drop channels without room (U1) | failover, upstream limits, capacity | before the stack, then per attempt |
//! | [`Chosen`](crate::core::Chosen) | upstream limits (the first channel kept, for a stack without a capacity layer); capacity (the channel with room, Q2), also into the **response**'s extensions | the forwarder (where to send); from the response: upstream limits (calibration, U3) and failover (which channel answered) | inner `call`; the response head |
//! | [`RateCount`](crate::core::upstream::RateCount) (optional) | the application | upstream limits (the per-window token estimate, U2) | before the stack |
//! | [`TenantWeight`](crate::core::TenantWeight) (optional) | the application | capacity (the tenant's share of the fair queue, Q4) | before the stack |
//! | [`Dialect`](crate::core::Dialect) (optional) | the application | error mapping (the error format, E1), failover (in-stream error events, F3) | before the stack |
//! | [`ModelFallback`] (optional) | the application | failover, which takes it out before the first attempt (F11) | before the stack |
//! | `SlotClaim` (this crate's own) | slots built with [`join_windows`](crate::ConcurrencySlotLayer::join_windows) | the window layer right below, which claims it (and then takes it out) to decide the slot with its windows (D2) | slots' `call`, before the inner call; windows' `call` |
//! | `Prefetched` (this crate's own) | upstream limits built with [`join_capacity`](crate::UpstreamLimitLayer::join_capacity) | capacity, which takes it out and holds the lease — or gives it back when the channel has waiters (D2) | upstream's `call`; capacity's `call` |
//!
//! The request headers the layers read or write for each other:
//!
//! | header | written by | read by |
//! |---|---|---|
//! | `x-request-id` | error mapping, when the request has no usable one (E3) | billing (the usage record's idempotency key) |
//! | [`x-portcullis-deadline-ms`](crate::DEADLINE_HEADER) | the client or the application | capacity (Q3), failover (F6) |
//! | `x-portcullis-conversation` | the client | failover (the conversation's pinned channel, F9) |
//! | `x-portcullis-queued-ms` (response) | capacity, on a request that waited (Q3) | the client |

#[cfg(feature = "billing")]
use portcullis_core::{AttemptId, Budget, Money};
#[cfg(any(feature = "billing", feature = "failover"))]
use std::sync::Arc;

#[cfg(any(feature = "slots", feature = "windows"))]
pub(crate) use slot_claim::SlotClaim;

/// The request's [`Demand`](portcullis_core::Demand): without one, a request counts as
/// one request and nothing else.
#[cfg(any(feature = "windows", feature = "billing", feature = "upstream"))]
pub(crate) fn demand<B>(req: &http::Request<B>) -> portcullis_core::Demand {
    req.extensions()
        .get::<portcullis_core::Demand>()
        .copied()
        .unwrap_or_default()
}

/// The request's [`UsageRecorder`](portcullis_core::UsageRecorder), put in first if it has
/// none: the windows, upstream limits and billing each settle from it, so whichever of
/// them comes first puts in the one they all share.
#[cfg(any(feature = "windows", feature = "billing", feature = "upstream"))]
pub(crate) fn usage_recorder<B>(req: &mut http::Request<B>) -> portcullis_core::UsageRecorder {
    req.extensions_mut()
        .get_or_insert_with(portcullis_core::UsageRecorder::new)
        .clone()
}

#[cfg(any(feature = "upstream", feature = "capacity"))]
pub(crate) use prefetched::Prefetched;

// What the application tells the billing layer, and the attempt billing opens.

/// Per-request billing settings (request extension): the key's spend cap and the
/// budgets the request draws on.
#[cfg(feature = "billing")]
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct BillingProfile {
    /// The key's spend cap.
    pub spend_cap: Option<Money>,
    /// Budgets to reserve the upper bound in (B3).
    pub budgets: Arc<[Budget]>,
    /// The tenant is expected to have a billing record (the configuration names it with
    /// a balance): a missing record is a 503 (50303), never a 402 (B7).
    pub tenant_expected: bool,
}

#[cfg(feature = "billing")]
impl BillingProfile {
    /// No spend cap, no budgets, no record expected: the same as `default()`.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the key's spend cap.
    pub fn with_spend_cap(mut self, cap: Option<Money>) -> Self {
        self.spend_cap = cap;
        self
    }
    /// Sets the budgets to reserve in (B3).
    pub fn with_budgets(mut self, budgets: impl Into<Arc<[Budget]>>) -> Self {
        self.budgets = budgets.into();
        self
    }
    /// Says whether the tenant is expected to have a billing record (B7).
    pub fn with_tenant_expected(mut self, expected: bool) -> Self {
        self.tenant_expected = expected;
        self
    }
}

/// The request id the client sent, kept apart from the gateway's own (request
/// extension, set by the application): never an idempotency key, only a field of the
/// usage record for the client's own correlation.
#[cfg(feature = "billing")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientRequestId(pub Arc<str>);

/// The attempt a request is billed as (request extension, set by the layer).
#[cfg(feature = "billing")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt(pub AttemptId);

/// Request extension: the request is free (token counting, P6). The gate lets it
/// through with nothing reserved, settled or recorded, whatever the balance or spend
/// cap — its key still needs a [`Subject`](portcullis_core::Subject) (401 without one),
/// and the other layers still count it as a request.
#[cfg(feature = "billing")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotBilled;

// What the application offers failover.

/// Request extension: the same request for a fallback model (F11), offered by whoever
/// knows the request's contract. The proxy offers one only when the fallback model
/// meets it: tools, structured output, context window, modality, max output, a channel
/// speaking the client's dialect. Failover switches to it when every channel of the
/// first model has been tried, nothing has been streamed, attempts remain, and the
/// fallback's own admission passes (its channels' limits have room; its money upper
/// bound fits the remaining budget — a refusal there ends the request with the first
/// model's failure). Channels of a paying account stopped by a spend cap stay excluded
/// after the switch (S6).
///
/// The request is rewritten for the fallback model only when failover switches to it,
/// so requests that never fall back pay nothing for the offer.
#[cfg(feature = "failover")]
#[derive(Clone)]
pub struct ModelFallback<B> {
    /// The fallback model.
    pub model: Arc<str>,
    build: Arc<dyn Fn() -> Option<FallbackRequest<B>> + Send + Sync>,
}

#[cfg(feature = "failover")]
impl<B> ModelFallback<B> {
    /// Offers `model`; `build` rewrites the request for it when failover switches
    /// (`None`: it cannot be rewritten after all, and the first model's failure stands).
    pub fn new(
        model: impl Into<Arc<str>>,
        build: impl Fn() -> Option<FallbackRequest<B>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            model: model.into(),
            build: Arc::new(build),
        }
    }
    /// The request rewritten for the fallback model.
    pub fn build(&self) -> Option<FallbackRequest<B>> {
        (self.build)()
    }
}

#[cfg(feature = "failover")]
impl<B> std::fmt::Debug for ModelFallback<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelFallback")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// A request rewritten for a fallback model (F11).
#[cfg(feature = "failover")]
#[derive(Debug)]
pub struct FallbackRequest<B> {
    /// The request's URI for it (Gemini names the model in the path).
    pub uri: http::Uri,
    /// The request's body for it.
    pub body: B,
    /// Extensions replacing the first model's: its `ModelId`, `Candidates`, `Demand`,
    /// `RateCount` and whatever the inner stack reads.
    pub extensions: http::Extensions,
}

/// A lease one layer took that another may take over (see `crate::joint`); the owner
/// gives back, when it is dropped, a lease nobody took.
#[cfg(any(
    feature = "slots",
    feature = "windows",
    feature = "upstream",
    feature = "capacity"
))]
struct HandedLease(std::sync::Mutex<Option<portcullis_core::LeaseId>>);

#[cfg(any(
    feature = "slots",
    feature = "windows",
    feature = "upstream",
    feature = "capacity"
))]
impl HandedLease {
    fn new(lease: Option<portcullis_core::LeaseId>) -> Self {
        Self(std::sync::Mutex::new(lease))
    }
    /// Hands `lease` over.
    #[cfg_attr(not(all(feature = "slots", feature = "windows")), allow(dead_code))]
    fn set(&self, lease: portcullis_core::LeaseId) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(lease);
    }
    /// The lease, once: the taker holds it from now on.
    fn take(&self) -> Option<portcullis_core::LeaseId> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
    /// The lease nobody took, as its owner is dropped.
    fn left(&mut self) -> Option<portcullis_core::LeaseId> {
        self.0.get_mut().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// The slot layer's acquisition handed down to the window layer below (see
/// `crate::joint`): the window layer claims it to decide the slot with its windows, or
/// the slot layer keeps it and acquires as usual.
#[cfg(any(feature = "slots", feature = "windows"))]
mod slot_claim {
    // Each half is used by its own layer: with one of the two, the other half has no
    // caller.
    #![cfg_attr(not(all(feature = "slots", feature = "windows")), allow(dead_code))]

    use super::HandedLease;
    use crate::joint::{JointFuture, SlotSide};
    use portcullis_core::{LeaseId, Rejection, SlotAsk, StoreError, SubjectKey, WindowAsk};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU8, Ordering};

    const OPEN: u8 = 0;
    const CLAIMED: u8 = 1;
    const KEPT: u8 = 2;

    struct Claim {
        state: AtomicU8,
        ask: SlotAsk,
        side: Arc<SlotSide>,
        lease: HandedLease,
    }

    impl Drop for Claim {
        fn drop(&mut self) {
            if let Some(lease) = self.lease.left() {
                (self.side.release)(&self.ask.key, lease);
            }
        }
    }

    /// A slot acquisition handed down by the slot layer (request extension).
    #[derive(Clone)]
    pub(crate) struct SlotClaim(Arc<Claim>);

    impl SlotClaim {
        pub(crate) fn new(ask: SlotAsk, side: Arc<SlotSide>) -> Self {
            Self(Arc::new(Claim {
                state: AtomicU8::new(OPEN),
                ask,
                side,
                lease: HandedLease::new(None),
            }))
        }

        /// The window layer takes the decision over; false if the slot layer kept it.
        pub(crate) fn claim(&self) -> bool {
            self.0
                .state
                .compare_exchange(OPEN, CLAIMED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        }

        /// The slot layer decides itself; false if the window layer claimed it.
        pub(crate) fn keep(&self) -> bool {
            self.0
                .state
                .compare_exchange(OPEN, KEPT, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        }

        /// The slot and `window` decided together.
        pub(crate) fn decide(&self, window: Option<WindowAsk<'_>>) -> JointFuture {
            (self.0.side.join)(&self.0.ask, window)
        }

        /// The slot layer's failure mode on `e`.
        pub(crate) fn on_error(&self, e: &StoreError) -> Option<Rejection> {
            (self.0.side.on_error)(e)
        }

        /// Tells the slot layer its store answered.
        pub(crate) fn answered(&self) {
            (self.0.side.answered)()
        }

        /// The slot layer's "every slot taken" rejection.
        pub(crate) fn full(&self) -> Rejection {
            (self.0.side.full)()
        }

        /// Hands the lease of an admitted joint decision to the slot layer.
        pub(crate) fn set_lease(&self, lease: LeaseId) {
            self.0.lease.set(lease);
        }

        /// The lease, once, for the slot layer's guard.
        pub(crate) fn take_lease(&self) -> Option<LeaseId> {
            self.0.lease.take()
        }

        /// The subject whose slot this is.
        pub(crate) fn key(&self) -> &SubjectKey {
            &self.0.ask.key
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use portcullis_core::JointDecision;
        use std::sync::atomic::AtomicUsize;

        fn side(released: Arc<AtomicUsize>) -> Arc<SlotSide> {
            Arc::new(SlotSide {
                join: Arc::new(|_, _| {
                    Box::pin(std::future::ready(Ok(JointDecision::SlotFull {
                        in_flight: 0,
                    })))
                }),
                on_error: Arc::new(|_| None),
                answered: Arc::new(|| {}),
                release: Arc::new(move |_, _| {
                    released.fetch_add(1, Ordering::SeqCst);
                }),
                full: || {
                    Rejection::new(
                        portcullis_core::GatewayCode::ConcurrencyLimit,
                        portcullis_core::LayerKind::ConcurrencySlot,
                    )
                },
            })
        }

        fn ask() -> SlotAsk {
            SlotAsk {
                key: SubjectKey::from("k"),
                limit: 1,
                ttl: 1_000,
            }
        }

        #[test]
        fn d2_exactly_one_layer_decides_the_slot() {
            let c = SlotClaim::new(ask(), side(Arc::default()));
            assert!(c.claim());
            assert!(
                !c.keep(),
                "claimed by the window layer: the slot layer must not acquire too"
            );
            let c = SlotClaim::new(ask(), side(Arc::default()));
            assert!(c.keep());
            assert!(
                !c.claim(),
                "kept by the slot layer: the window layer must not acquire too"
            );
        }

        #[test]
        fn c3_a_lease_nobody_took_over_is_released_once_with_the_last_claim() {
            let released = Arc::new(AtomicUsize::new(0));
            let c = SlotClaim::new(ask(), side(released.clone()));
            let other = c.clone();
            c.set_lease(7);
            drop(c);
            assert_eq!(released.load(Ordering::SeqCst), 0, "still referenced");
            drop(other);
            assert_eq!(released.load(Ordering::SeqCst), 1);
            // Taken over by the slot guard: the claim releases nothing.
            let c = SlotClaim::new(ask(), side(released.clone()));
            c.set_lease(8);
            assert_eq!(c.take_lease(), Some(8));
            assert_eq!(c.take_lease(), None);
            drop(c);
            assert_eq!(released.load(Ordering::SeqCst), 1);
        }
    }
}

/// What the upstream limit layer learnt of a channel's capacity with its windows, for
/// the capacity layer below (see `crate::joint`).
#[cfg(any(feature = "upstream", feature = "capacity"))]
mod prefetched {
    // Each half is used by its own layer: with one of the two, the other half has no
    // caller.
    #![cfg_attr(not(all(feature = "upstream", feature = "capacity")), allow(dead_code))]

    use super::HandedLease;
    use crate::joint::ReleaseChannel;
    use portcullis_core::LeaseId;
    use std::sync::Arc;

    struct Prefetch {
        channel: Arc<str>,
        lease: HandedLease,
        release: Arc<ReleaseChannel>,
    }

    impl Drop for Prefetch {
        fn drop(&mut self) {
            if let Some(lease) = self.lease.left() {
                (self.release)(&self.channel, lease);
            }
        }
    }

    /// What the upstream limit layer learnt of a channel's capacity with its windows
    /// (request extension): a lease it took there, or that the channel was full.
    #[derive(Clone)]
    pub(crate) struct Prefetched(Arc<Prefetch>, bool);

    impl Prefetched {
        /// What a windows-and-capacity decision on `channel` learnt: `None` when the
        /// capacity was not asked.
        pub(crate) fn of(
            channel: Arc<str>,
            take: portcullis_core::CapacityTake,
            release: Arc<ReleaseChannel>,
        ) -> Option<Self> {
            match take {
                portcullis_core::CapacityTake::Taken(lease) => {
                    Some(Self::taken(channel, lease, release))
                }
                portcullis_core::CapacityTake::Full => Some(Self::full(channel, release)),
                portcullis_core::CapacityTake::NotAsked => None,
            }
        }

        /// A lease taken on `channel`.
        pub(crate) fn taken(
            channel: Arc<str>,
            lease: LeaseId,
            release: Arc<ReleaseChannel>,
        ) -> Self {
            Self(
                Arc::new(Prefetch {
                    channel,
                    lease: HandedLease::new(Some(lease)),
                    release,
                }),
                false,
            )
        }

        /// `channel` had no free lease.
        pub(crate) fn full(channel: Arc<str>, release: Arc<ReleaseChannel>) -> Self {
            Self(
                Arc::new(Prefetch {
                    channel,
                    lease: HandedLease::new(None),
                    release,
                }),
                true,
            )
        }

        /// The channel it is about.
        pub(crate) fn channel(&self) -> &str {
            &self.0.channel
        }

        /// The lease, once.
        pub(crate) fn take_lease(&self) -> Option<LeaseId> {
            self.0.lease.take()
        }

        /// True when the channel was full.
        pub(crate) fn was_full(&self) -> bool {
            self.1
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use std::sync::atomic::{AtomicUsize, Ordering};

        #[test]
        fn q1_a_prefetched_lease_nobody_used_is_given_back() {
            let released = Arc::new(AtomicUsize::new(0));
            let r = released.clone();
            let release: Arc<ReleaseChannel> = Arc::new(move |ch, lease| {
                assert_eq!((ch, lease), ("ch", 5));
                r.fetch_add(1, Ordering::SeqCst);
            });
            drop(Prefetched::taken("ch".into(), 5, release.clone()));
            assert_eq!(released.load(Ordering::SeqCst), 1);
            let p = Prefetched::taken("ch".into(), 5, release.clone());
            assert_eq!(p.take_lease(), Some(5));
            drop(p);
            assert_eq!(
                released.load(Ordering::SeqCst),
                1,
                "taken over: not given back"
            );
            let full = Prefetched::full("ch".into(), release);
            assert!(full.was_full());
            assert_eq!(full.take_lease(), None);
        }
    }
}
