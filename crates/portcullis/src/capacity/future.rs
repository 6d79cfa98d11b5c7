use super::choose::{Expiry, Probe, on_answer, probe, shortest_wait, tenant_of, wait_budget};
use super::queue::{CapacityGuard, Counters, QueueTicket, Shared};
use super::{QUEUED_MS_HEADER, busy, deadline_exceeded};
use crate::BoxError;
use crate::body::{Hold, HoldBody};
use crate::time::ms;
use http::{HeaderValue, Request, Response};
use pin_project_lite::pin_project;
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

pin_project! {
    #[project = StateProj]
    enum State<S, ReqB, St>
    where
        S: Service<Request<ReqB>>,
        St: CapacityStore,
    {
        Rejected { rejection: Option<Rejection> },
        Asking {
            answer: St::Future<Option<LeaseId>>,
            index: usize,
            pending: Option<Box<Pending<S, ReqB, St>>>,
        },
        Queued {
            rx: oneshot::Receiver<CapacityGuard<St>>,
            expiry: Pin<Box<Sleep>>,
            poll: Option<Pin<Box<Sleep>>>,
            pending: Option<Box<Pending<S, ReqB, St>>>,
        },
        Called {
            #[pin] fut: S::Future,
            guard: Option<CapacityGuard<St>>,
            queued_ms: Option<u64>,
            chosen: Option<ChannelRef>,
        },
    }
}

pin_project! {
    /// Response future of [`CapacityQueue`](super::CapacityQueue).
    ///
    /// Dropping it while queued takes the request out of the queue at once; dropping
    /// it later releases the lease (L3).
    pub struct ResponseFuture<S, ReqB, St>
    where
        S: Service<Request<ReqB>>,
        St: CapacityStore,
    {
        #[pin]
        state: State<S, ReqB, St>,
    }
}

impl<S, ReqB, St> ResponseFuture<S, ReqB, St>
where
    S: Service<Request<ReqB>>,
    St: CapacityStore,
{
    pub(crate) fn rejected(r: Rejection) -> Self {
        Self {
            state: State::Rejected { rejection: Some(r) },
        }
    }

    pub(crate) fn called(
        fut: S::Future,
        guard: Option<CapacityGuard<St>>,
        queued_ms: Option<u64>,
        chosen: Option<ChannelRef>,
    ) -> Self {
        Self {
            state: State::Called {
                fut,
                guard,
                queued_ms,
                chosen,
            },
        }
    }

    pub(crate) fn pending(probe: Probe<St>, pending: Box<Pending<S, ReqB, St>>) -> Self {
        Self {
            state: transition(probe, pending),
        }
    }
}

fn transition<S, ReqB, St>(probe: Probe<St>, mut p: Box<Pending<S, ReqB, St>>) -> State<S, ReqB, St>
where
    S: Service<Request<ReqB>>,
    St: CapacityStore,
{
    match probe {
        Probe::Admit { index, guard } => admit(&mut p, index, guard, None),
        Probe::Refuse(r) => State::Rejected { rejection: Some(r) },
        Probe::Ask { index, answer } => State::Asking {
            answer,
            index,
            pending: Some(p),
        },
        Probe::AllFull => enqueue(p),
    }
}

/// Calls the inner service on candidate `index`.
fn admit<S, ReqB, St>(
    p: &mut Pending<S, ReqB, St>,
    index: usize,
    guard: Option<CapacityGuard<St>>,
    queued_ms: Option<u64>,
) -> State<S, ReqB, St>
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
    State::Called {
        fut: p.svc.call(req),
        guard,
        queued_ms,
        chosen: Some(chosen),
    }
}

/// Refuses at the end of the wait: 42910 or 50401 (Q3).
fn expire<S, ReqB, St>(p: &Pending<S, ReqB, St>) -> State<S, ReqB, St>
where
    S: Service<Request<ReqB>>,
    St: CapacityStore,
{
    let c = &p.shared.state.counters;
    let rejection = match p.on_expiry {
        Expiry::Busy => {
            Counters::bump(&c.rejected_busy);
            busy(p.shared.config.settings.retry_after)
        }
        Expiry::Deadline => {
            Counters::bump(&c.rejected_deadline);
            deadline_exceeded()
        }
    };
    State::Rejected {
        rejection: Some(rejection),
    }
}

/// Every candidate is full: join the queue of the one expected to free first (Q2).
fn enqueue<S, ReqB, St>(mut p: Box<Pending<S, ReqB, St>>) -> State<S, ReqB, St>
where
    S: Service<Request<ReqB>>,
    St: CapacityStore,
{
    let now = p.shared.now();
    if now >= p.wait_until {
        return expire(&p);
    }
    let Some((index, ch)) = shortest_wait(&p.shared, &p.candidates.0) else {
        return expire(&p);
    };
    let (tx, rx) = oneshot::channel();
    match ch.push(&p.tenant, p.weight, tx) {
        Err(_) => {
            Counters::bump(&p.shared.state.counters.rejected_queue_full);
            State::Rejected {
                rejection: Some(busy(p.shared.config.settings.retry_after)),
            }
        }
        Ok(ticket) => {
            let ticket = QueueTicket::new(p.shared.clone(), ch, index, ticket);
            // A lease released between our failed try and the push is handed over now.
            ticket.nudge();
            p.ticket = Some(ticket);
            let poll = next_poll(&mut p).map(|at| Box::pin(tokio::time::sleep_until(at)));
            State::Queued {
                rx,
                expiry: Box::pin(tokio::time::sleep(ms(p.wait_until - now))),
                poll,
                pending: Some(p),
            }
        }
    }
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
    mut p: Box<Pending<S, ReqB, St>>,
    guard: CapacityGuard<St>,
) -> State<S, ReqB, St>
where
    S: Service<Request<ReqB>>,
    St: CapacityStore,
{
    let mut ticket = p.ticket.take().expect("a queued request has a ticket");
    ticket.served();
    let waited = p.shared.now().saturating_sub(p.started);
    admit(&mut p, ticket.index, Some(guard.start()), Some(waited))
}

impl<S, ReqB, St, ResB> Future for ResponseFuture<S, ReqB, St>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    St: CapacityStore,
    ResB: http_body::Body,
{
    type Output = Result<Response<HoldBody<ResB, CapacityGuard<St>>>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut state = self.as_mut().project().state;
            let next = match state.as_mut().project() {
                StateProj::Rejected { rejection } => {
                    let r = rejection.take().expect("polled after completion");
                    return Poll::Ready(Err(r.into()));
                }
                StateProj::Asking {
                    answer,
                    index,
                    pending,
                } => {
                    let answer = ready!(Pin::new(answer).poll(cx));
                    let p = pending.take().expect("polled after completion");
                    let index = *index;
                    let ch = p.shared.channel(&p.candidates.0[index]);
                    let probe = match on_answer(&p.shared, &ch, index, answer) {
                        Some(probe) => probe,
                        None => probe(&p.shared, &p.candidates.0, index + 1, None),
                    };
                    transition(probe, p)
                }
                StateProj::Queued {
                    rx,
                    expiry,
                    poll,
                    pending,
                } => loop {
                    if let Poll::Ready(handed) = Pin::new(&mut *rx).poll(cx) {
                        let p = pending.take().expect("polled after completion");
                        break match handed {
                            Ok(guard) => served(p, guard),
                            // Unreachable while the ticket holds the channel: every
                            // popped waiter is sent a lease.
                            Err(_) => expire(&p),
                        };
                    }
                    if expiry.as_mut().poll(cx).is_ready() {
                        let left = pending
                            .as_ref()
                            .map_or(0, |p| p.wait_until.saturating_sub(p.shared.now()));
                        if left > 0 {
                            // tokio's timer ran ahead of the layer's clock (a manual
                            // clock): the clock decides, so wait out what it says is left.
                            expiry.as_mut().reset(Instant::now() + ms(left));
                            continue;
                        }
                        let mut p = pending.take().expect("polled after completion");
                        // A lease handed over at the last moment still counts.
                        if let Ok(guard) = rx.try_recv() {
                            break served(p, guard);
                        }
                        if let Some(t) = p.ticket.as_mut() {
                            // If the waiter was just popped, the lease being sent to it
                            // goes to the next waiter once `rx` is dropped.
                            t.leave();
                        }
                        break expire(&p);
                    }
                    let Some(timer) = poll.as_mut() else {
                        return Poll::Pending;
                    };
                    if timer.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    let p = pending.as_mut().expect("polled after completion");
                    if let Some(t) = p.ticket.as_ref() {
                        t.nudge();
                    }
                    match next_poll(p) {
                        Some(at) => timer.as_mut().reset(at),
                        None => *poll = None,
                    }
                },
                StateProj::Called {
                    fut,
                    guard,
                    queued_ms,
                    chosen,
                } => {
                    let Poll::Ready(res) = fut.poll(cx) else {
                        if let Some(g) = guard.as_mut() {
                            g.keep_alive(cx);
                        }
                        return Poll::Pending;
                    };
                    let res = res.map_err(Into::into);
                    let guard = guard.take();
                    let queued_ms = *queued_ms;
                    let chosen = chosen.take();
                    return Poll::Ready(res.map(|r| {
                        let mut r = r.map(|b| HoldBody::holding(b, guard));
                        // Outer layers (upstream limits, failover) learn which channel
                        // served the request.
                        if let Some(c) = chosen {
                            r.extensions_mut().insert(Chosen(c));
                        }
                        if let Some(ms) = queued_ms {
                            r.headers_mut()
                                .insert(QUEUED_MS_HEADER, HeaderValue::from(ms));
                        }
                        r
                    }));
                }
            };
            state.set(next);
        }
    }
}
