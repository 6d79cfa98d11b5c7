use super::decide::{Expiry, Probe, on_answer, shortest_wait, tenant_of, wait_budget};
use super::queue::{CapacityGuard, Counters, QueueTicket, Shared};
use super::{QUEUED_MS_HEADER, busy, deadline_exceeded};
use crate::future::{self, Around, Called, Decided};
use crate::time::ms;
use http::{HeaderValue, Request, Response};
use portcullis_core::{Candidates, CapacityStore, ChannelRef, Chosen, LeaseId, Millis, Rejection};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

/// A request not admitted at once: asking an asynchronous store, or queued.
pub(crate) struct Pending<S, ReqB, St: CapacityStore> {
    req: Option<Request<ReqB>>,
    svc: S,
    candidates: Candidates,
    shared: Arc<Shared<St>>,
    tenant: Arc<str>,
    weight: u32,
    /// When the request came, on the layer's clock.
    started: Millis,
    /// When its wait is over, on the layer's clock.
    wait_until: Millis,
    on_expiry: Expiry,
    ticket: Option<QueueTicket<St>>,
    polls: u32,
}

impl<S, ReqB, St: CapacityStore> Pending<S, ReqB, St> {
    pub(crate) fn new(
        req: Request<ReqB>,
        svc: S,
        candidates: Candidates,
        shared: Arc<Shared<St>>,
    ) -> Box<Self> {
        let started = shared.now();
        let (tenant, weight) = tenant_of(&req);
        let (budget, on_expiry) = wait_budget(req.headers(), &shared.config.settings);
        Box::new(Self {
            req: Some(req),
            svc,
            candidates,
            shared,
            tenant,
            weight,
            started,
            wait_until: started.saturating_add(portcullis_core::clock::millis(budget)),
            on_expiry,
            ticket: None,
            polls: 0,
        })
    }
}

/// What a request not admitted at once waits for.
enum Wait<St: CapacityStore> {
    /// The store's answer for candidate `index`.
    Ask {
        answer: St::Future<Option<LeaseId>>,
        index: usize,
    },
    /// A lease handed over from its queue, the end of its wait, or its next poll.
    Queued {
        rx: oneshot::Receiver<CapacityGuard<St>>,
        expiry: Pin<Box<Sleep>>,
        poll: Option<Pin<Box<Sleep>>>,
    },
}

/// A request not admitted at once: what it waits for, and the request.
pub(crate) struct Waiting<S, ReqB, St: CapacityStore> {
    wait: Wait<St>,
    pending: Box<Pending<S, ReqB, St>>,
}

/// What the layer adds to an answer: the channel that served it and how long the
/// request was queued.
pub(crate) struct Served {
    queued_ms: Option<u64>,
    chosen: Option<ChannelRef>,
}

impl Served {
    /// Admitted at once (nothing queued) on `chosen`, if a channel was chosen here.
    pub(crate) fn at_once(chosen: Option<ChannelRef>) -> Self {
        Self {
            queued_ms: None,
            chosen,
        }
    }
}

impl<St: CapacityStore> Around<CapacityGuard<St>> for Served {
    fn answered<B>(&mut self, res: &mut Response<B>, _: Option<&mut CapacityGuard<St>>) {
        // Outer layers (upstream limits, failover) learn which channel served the
        // request.
        if let Some(c) = self.chosen.take() {
            res.extensions_mut().insert(Chosen(c));
        }
        if let Some(ms) = self.queued_ms {
            res.headers_mut()
                .insert(QUEUED_MS_HEADER, HeaderValue::from(ms));
        }
    }
}

type CapacityCalled<S, ReqB, St> =
    Called<<S as Service<Request<ReqB>>>::Future, CapacityGuard<St>, Served>;

/// Where a request goes next: it waits again, or the decision is in.
enum Next<S: Service<Request<ReqB>>, ReqB, St: CapacityStore> {
    Wait(Wait<St>),
    Done(Result<CapacityCalled<S, ReqB, St>, Rejection>),
}

fn transition<S, ReqB, St>(probe: Probe<St>, p: &mut Pending<S, ReqB, St>) -> Next<S, ReqB, St>
where
    S: Service<Request<ReqB>>,
    St: CapacityStore,
{
    match probe {
        Probe::Admit { index, guard } => Next::Done(Ok(admit(p, index, guard, None))),
        Probe::Refuse(r) => Next::Done(Err(r)),
        Probe::Ask { index, answer } => Next::Wait(Wait::Ask { answer, index }),
        Probe::AllFull => match enqueue(p) {
            Ok(wait) => Next::Wait(wait),
            Err(r) => Next::Done(Err(r)),
        },
    }
}

/// Calls the inner service on candidate `index`.
fn admit<S, ReqB, St>(
    p: &mut Pending<S, ReqB, St>,
    index: usize,
    guard: Option<CapacityGuard<St>>,
    queued_ms: Option<u64>,
) -> CapacityCalled<S, ReqB, St>
where
    S: Service<Request<ReqB>>,
    St: CapacityStore,
{
    let counters = &p.shared.state.counters;
    Counters::bump(&counters.admitted);
    if let Some(_ms) = queued_ms {
        Counters::bump(&counters.admitted_after_wait);
        #[cfg(feature = "metrics")]
        metrics::histogram!("portcullis_queue_wait_seconds").record(_ms as f64 / 1000.0);
    }
    let mut req = p.req.take().expect("request taken once");
    let chosen = p.candidates.0[index].clone();
    req.extensions_mut().insert(Chosen(chosen.clone()));
    let served = Served {
        queued_ms,
        chosen: Some(chosen),
    };
    (p.svc.call(req), guard, served)
}

/// Refuses at the end of the wait: 42910 or 50401 (Q3).
fn expire<S, ReqB, St: CapacityStore>(p: &Pending<S, ReqB, St>) -> Rejection {
    let c = &p.shared.state.counters;
    match p.on_expiry {
        Expiry::Busy => {
            Counters::bump(&c.rejected_busy);
            busy(p.shared.config.settings.retry_after)
        }
        Expiry::Deadline => {
            Counters::bump(&c.rejected_deadline);
            deadline_exceeded()
        }
    }
}

/// Every candidate is full: join the queue of the one expected to free first (Q2).
fn enqueue<S, ReqB, St: CapacityStore>(
    p: &mut Pending<S, ReqB, St>,
) -> Result<Wait<St>, Rejection> {
    let now = p.shared.now();
    if now >= p.wait_until {
        return Err(expire(p));
    }
    let Some((index, ch)) = shortest_wait(&p.shared, &p.candidates.0) else {
        return Err(expire(p));
    };
    let (tx, rx) = oneshot::channel();
    let Ok(ticket) = ch.push(&p.tenant, p.weight, tx) else {
        Counters::bump(&p.shared.state.counters.rejected_queue_full);
        return Err(busy(p.shared.config.settings.retry_after));
    };
    let ticket = QueueTicket::new(p.shared.clone(), ch, index, ticket);
    // A lease released between our failed try and the push is handed over now.
    ticket.nudge();
    p.ticket = Some(ticket);
    let poll = next_poll(p).map(|at| Box::pin(tokio::time::sleep_until(at)));
    Ok(Wait::Queued {
        rx,
        expiry: Box::pin(tokio::time::sleep(ms(p.wait_until - now))),
        poll,
    })
}

/// When a waiter next polls its queue: 10 ms, doubling up to `poll_interval`.
fn next_poll<S, ReqB, St: CapacityStore>(p: &mut Pending<S, ReqB, St>) -> Option<Instant> {
    let max = p.shared.config.settings.poll_interval;
    if max.is_zero() {
        return None;
    }
    let pause = Duration::from_millis(10u64 << p.polls.min(16)).min(max);
    p.polls += 1;
    Some(Instant::now() + pause)
}

fn served<S, ReqB, St>(
    p: &mut Pending<S, ReqB, St>,
    guard: CapacityGuard<St>,
) -> CapacityCalled<S, ReqB, St>
where
    S: Service<Request<ReqB>>,
    St: CapacityStore,
{
    let mut ticket = p.ticket.take().expect("a queued request has a ticket");
    ticket.served();
    let waited = p.shared.now().saturating_sub(p.started);
    admit(p, ticket.index, Some(guard.start()), Some(waited))
}

/// A queued request: served by a hand-off, refused at the end of its wait, or polling
/// its queue meanwhile.
fn poll_queued<S, ReqB, St>(
    rx: &mut oneshot::Receiver<CapacityGuard<St>>,
    expiry: &mut Pin<Box<Sleep>>,
    poll: &mut Option<Pin<Box<Sleep>>>,
    p: &mut Pending<S, ReqB, St>,
    cx: &mut Context<'_>,
) -> Poll<Result<CapacityCalled<S, ReqB, St>, Rejection>>
where
    S: Service<Request<ReqB>>,
    St: CapacityStore,
{
    loop {
        if let Poll::Ready(handed) = Pin::new(&mut *rx).poll(cx) {
            return Poll::Ready(match handed {
                Ok(guard) => Ok(served(p, guard)),
                // Unreachable while the ticket holds the channel: every popped waiter
                // is sent a lease.
                Err(_) => Err(expire(p)),
            });
        }
        if expiry.as_mut().poll(cx).is_ready() {
            let left = p.wait_until.saturating_sub(p.shared.now());
            if left > 0 {
                // tokio's timer ran ahead of the layer's clock (a manual clock): the
                // clock decides, so wait out what it says is left.
                expiry.as_mut().reset(Instant::now() + ms(left));
                continue;
            }
            // A lease handed over at the last moment still counts.
            if let Ok(guard) = rx.try_recv() {
                return Poll::Ready(Ok(served(p, guard)));
            }
            if let Some(t) = p.ticket.as_mut() {
                // If the waiter was just popped, the lease being sent to it goes to
                // the next waiter once `rx` is dropped.
                t.leave();
            }
            return Poll::Ready(Err(expire(p)));
        }
        let Some(timer) = poll.as_mut() else {
            return Poll::Pending;
        };
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        if let Some(t) = p.ticket.as_ref() {
            t.nudge();
        }
        match next_poll(p) {
            Some(at) => timer.as_mut().reset(at),
            None => *poll = None,
        }
    }
}

impl<S, ReqB, St> future::Pending<S::Future, CapacityGuard<St>, Served> for Waiting<S, ReqB, St>
where
    S: Service<Request<ReqB>>,
    St: CapacityStore,
{
    fn poll_decided(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Decided<S::Future, CapacityGuard<St>, Served> {
        loop {
            let p = &mut *self.pending;
            let next = match &mut self.wait {
                Wait::Ask { answer, index } => {
                    let answer = ready!(Pin::new(answer).poll(cx));
                    let probe = on_answer(&p.shared, &p.candidates.0, *index, answer);
                    transition(probe, p)
                }
                Wait::Queued { rx, expiry, poll } => {
                    Next::Done(ready!(poll_queued(rx, expiry, poll, p, cx)))
                }
            };
            match next {
                Next::Wait(wait) => self.wait = wait,
                Next::Done(decided) => return Poll::Ready(decided),
            }
        }
    }
}

gate_future! {
    /// Response future of [`CapacityQueue`](super::CapacityQueue).
    ///
    /// Dropping it while queued takes the request out of the queue at once; dropping
    /// it later releases the lease (L3).
    pub struct ResponseFuture<S, ReqB, St>
    holds CapacityGuard, deciding Waiting<S, ReqB, St>, around Served
    where St: CapacityStore;
}

impl<S, ReqB, St> ResponseFuture<S, ReqB, St>
where
    S: Service<Request<ReqB>>,
    St: CapacityStore,
{
    pub(crate) fn pending(probe: Probe<St>, mut pending: Box<Pending<S, ReqB, St>>) -> Self {
        match transition(probe, &mut pending) {
            Next::Wait(wait) => Self::deciding(Waiting { wait, pending }),
            Next::Done(Ok((fut, guard, served))) => Self::called(fut, guard, served),
            Next::Done(Err(r)) => Self::rejected(r),
        }
    }
}
