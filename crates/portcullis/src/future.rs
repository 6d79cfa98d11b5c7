//! The one skeleton of the layers' response futures: refused at once, still deciding
//! (a store answer, a wait, a queue — the layer's own part), or called and waiting
//! for the inner service's answer, whose body then holds the layer's guard (L3).
//!
//! A layer's `ResponseFuture` is a public newtype around [`Gate`]; what differs
//! between the layers is what is still pending ([`Pending`]) and what a layer does
//! around the inner future once called ([`Around`]).

// Each layer uses the skeleton with its own feature; with fewer layers, some of it has
// no caller.
#![allow(dead_code)]

use crate::BoxError;
use crate::body::{Hold, HoldBody};
use http::Response;
use pin_project_lite::pin_project;
use portcullis_core::{CallEnd, Rejection};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

/// The inner service that was driven to readiness, a clone left in its place: the
/// one `poll_ready` answered for takes the call that waits for a decision (tower's
/// contract), and the layer's service stays ready to clone for the next request.
pub(crate) fn take_ready<S: Clone>(svc: &mut S) -> S {
    let clone = svc.clone();
    std::mem::replace(svc, clone)
}

/// What is called once the decision is in: the inner future, the guard it holds (none
/// when nothing is held for the request) and what the layer does around the call.
pub(crate) type Called<F, G, A> = (F, Option<G>, A);

/// A decision polled: still out, called, or refused.
pub(crate) type Decided<F, G, A> = Poll<Result<Called<F, G, A>, Rejection>>;

/// A decision still out: polled until it calls the inner service or refuses.
pub(crate) trait Pending<F, G, A> {
    fn poll_decided(&mut self, cx: &mut Context<'_>) -> Decided<F, G, A>;
}

/// What a layer does around its inner future once called; nothing by default.
pub(crate) trait Around<G> {
    /// Before each poll of the inner future: `Err` refuses the request.
    fn before(
        &mut self,
        _guard: &mut Option<G>,
        _cx: &mut Context<'_>,
    ) -> Poll<Result<(), Rejection>> {
        Poll::Ready(Ok(()))
    }
    /// After each poll of the inner future.
    fn after_poll(&mut self, _guard: &mut Option<G>) {}
    /// The inner service answered with `res` (its guard already told so).
    fn answered<B>(&mut self, _res: &mut Response<B>, _guard: Option<&mut G>) {}
}

impl<G> Around<G> for () {}

pin_project! {
    /// The states of a layer's response future.
    #[project = GateProj]
    pub(crate) enum Gate<F, G, P, A> {
        Rejected { rejection: Option<Rejection> },
        Deciding { pending: P },
        Called { #[pin] fut: F, guard: Option<G>, around: A },
    }
}

impl<F, G, P, A> Gate<F, G, P, A> {
    pub(crate) fn rejected(r: Rejection) -> Self {
        Self::Rejected { rejection: Some(r) }
    }
    pub(crate) fn called(fut: F, guard: Option<G>, around: A) -> Self {
        Self::Called { fut, guard, around }
    }
    pub(crate) fn deciding(pending: P) -> Self {
        Self::Deciding { pending }
    }
}

impl<F, G, P, A, B, E> Gate<F, G, P, A>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
    G: Hold,
    P: Pending<F, G, A>,
    A: Around<G>,
    B: http_body::Body,
{
    pub(crate) fn poll_gate(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Response<HoldBody<B, G>>, BoxError>> {
        loop {
            let next = match self.as_mut().project() {
                GateProj::Rejected { rejection } => {
                    let r = rejection.take().expect("polled after completion");
                    return Poll::Ready(Err(r.into()));
                }
                GateProj::Deciding { pending } => match ready!(pending.poll_decided(cx)) {
                    Ok((fut, guard, around)) => Self::called(fut, guard, around),
                    Err(r) => Self::rejected(r),
                },
                GateProj::Called { fut, guard, around } => {
                    if let Err(r) = ready!(around.before(guard, cx)) {
                        return Poll::Ready(Err(r.into()));
                    }
                    let polled = fut.poll(cx);
                    around.after_poll(guard);
                    let Poll::Ready(res) = polled else {
                        if let Some(g) = guard.as_mut() {
                            g.keep_alive(cx);
                        }
                        return Poll::Pending;
                    };
                    let mut guard = guard.take();
                    return Poll::Ready(match res.map_err(Into::into) {
                        Ok(mut r) => {
                            if let Some(g) = guard.as_mut() {
                                g.call_ended(CallEnd::Answered);
                            }
                            around.answered(&mut r, guard.as_mut());
                            Ok(r.map(|b| HoldBody::holding(b, guard)))
                        }
                        Err(e) => {
                            // L5: refused further in → the request consumed nothing,
                            // unless it may have reached the provider (B4).
                            if let Some(g) = guard.as_mut() {
                                g.call_ended(CallEnd::of_error(&*e));
                            }
                            Err(e)
                        }
                    });
                }
            };
            self.set(next);
        }
    }
}
