//! Decisions of adjacent layers joined into one script (T3): the slot with its windows
//! ([`JointStore`](portcullis_core::JointStore)), a channel's provider windows with its
//! capacity lease ([`ChannelStore`](portcullis_core::ChannelStore), in [`channel`]).
//!
//! Each reads: ask the block book; else call Redis (asking for a block where the book
//! says so) and, when a block was asked for, install what Redis granted.

mod channel;
mod replies;

use super::book::{BlockBook, Decided};
use super::slots::{CapacityOps, SlotOps, lease_undo};
use super::windows::WindowOps;
use crate::client::{Client, Undo};
use crate::codec;
use crate::future::{RedisStoreFuture, spawn_quietly};
use crate::scripts::args::{JointArgs, JointWindow};
use portcullis_core::blocks::{BlockAsk, Borrow, SlotPart, WindowPart};
use portcullis_core::{
    Demand, JointDecision, Millis, Outcome, Policy, Scope, SlotAsk, StoreResult, SubjectKey,
    WindowAsk,
};
use replies::joint_decision;
use std::sync::Arc;

/// The joint decisions: a subject's slot with its windows, a channel's windows with a
/// capacity lease.
#[derive(Clone)]
pub(crate) struct JointOps {
    client: Client,
    book: Option<Arc<BlockBook>>,
    slots: SlotOps,
    windows: WindowOps,
    capacity: CapacityOps,
}

/// What a joint call asked of the windows: the policy, the demand and the scope.
type Asked = Option<(Arc<Policy>, Demand, Scope)>;

impl JointOps {
    pub(crate) fn new(
        client: Client,
        book: Option<Arc<BlockBook>>,
        slots: SlotOps,
        windows: WindowOps,
        capacity: CapacityOps,
    ) -> Self {
        Self {
            client,
            book,
            slots,
            windows,
            capacity,
        }
    }

    /// [`acquire_and_admit`](portcullis_core::JointStore::acquire_and_admit); `may_wait`:
    /// while a block this request needs is being borrowed, wait for it once (single
    /// node) instead of deciding alone.
    pub(crate) fn acquire_and_admit(
        &self,
        slot: &SlotAsk,
        window: Option<WindowAsk<'_>>,
        may_wait: bool,
    ) -> RedisStoreFuture<JointDecision> {
        let slots = self.client.keys().slots(&slot.key);
        let state = window.map(|w| self.windows.state(&slot.key, w.scope));
        let (mut borrow, mut asked_at) = (None, 0);
        if let Some(book) = &self.book {
            asked_at = book.now();
            let part = SlotPart {
                key: &slots,
                limit: slot.limit,
                ttl: slot.ttl,
            };
            let windows: Vec<WindowPart<'_>> = window
                .iter()
                .zip(&state)
                .map(|(w, key)| WindowPart {
                    key,
                    policy: w.policy,
                    demand: w.demand,
                })
                .collect();
            match book.decide(Some(part), &windows, asked_at, may_wait) {
                Decided::Granted(g) => {
                    return RedisStoreFuture::ready(Ok(JointDecision::Admitted {
                        lease: g.lease.expect("a slot was asked"),
                        ticket: g.tickets.first().copied(),
                    }));
                }
                Decided::Borrow(b) => borrow = Some(b),
                Decided::Wait(seen) => return self.after_borrow(book, seen, slot, window),
                Decided::Shared => {}
            }
        }
        let Some(borrow) = borrow else {
            return self.joint_call(slot, window, None, |(d, ..)| d).0;
        };
        let (call, asked) = self.joint_call(slot, window, Some(&borrow), |r| r);
        let book = self.book.as_ref().expect("a block was asked");
        let (this, key, scope) = (self.clone(), slot.key.clone(), window.map(|w| w.scope));
        let (limit, ttl) = (slot.limit, slot.ttl);
        let installer = Arc::clone(book);
        book.borrowing(
            call,
            move |r| {
                let b = JointBorrow {
                    slots,
                    limit,
                    ttl,
                    state,
                    asked,
                    borrow,
                    asked_at,
                };
                install(&installer, b, r)
            },
            // The request went away before its answer: what it holds goes back.
            move |held| this.give_back_joint(&key, scope, held),
        )
    }

    /// Gives back what a joint answer holds: its lease, its window admission.
    fn give_back_joint(&self, key: &SubjectKey, scope: Option<Scope>, held: JointDecision) {
        if let JointDecision::Admitted { lease, ticket } = held {
            spawn_quietly(self.slots.release(key, lease, true));
            if let (Some(t), Some(scope)) = (ticket, scope) {
                spawn_quietly(self.windows.settle(key, scope, t, Outcome::Refund));
            }
        }
    }

    /// Waits for the borrow under way from `seen`, then decides again without waiting.
    fn after_borrow(
        &self,
        book: &Arc<BlockBook>,
        seen: u64,
        slot: &SlotAsk,
        window: Option<WindowAsk<'_>>,
    ) -> RedisStoreFuture<JointDecision> {
        let (this, book, slot) = (self.clone(), Arc::clone(book), slot.clone());
        let owned = window.map(|w| (w.scope, w.policy.clone(), *w.demand));
        RedisStoreFuture::new(async move {
            book.wait(seen).await?;
            let window = owned.as_ref().map(|(scope, policy, demand)| WindowAsk {
                scope: *scope,
                policy,
                demand,
            });
            this.acquire_and_admit(&slot, window, false).await
        })
    }

    /// The joint script for `slot` and `window`, asking for `borrow`'s blocks too, with
    /// what it gives back if its answer never comes; its reply (the decision, the
    /// leases taken and the requests the windows counted) mapped by `map`. Answers what
    /// was asked of the windows too.
    fn joint_call<T: Send + 'static>(
        &self,
        slot: &SlotAsk,
        window: Option<WindowAsk<'_>>,
        borrow: Option<&Borrow>,
        map: impl FnOnce((JointDecision, u32, u64)) -> T + Send + 'static,
    ) -> (RedisStoreFuture<T>, Asked) {
        let c = &self.client;
        let slots = c.keys().slots(&slot.key);
        let id = c.next_id();
        let mut keys = vec![slots.clone()];
        let leases = borrow.map_or(1, |b| b.slots);
        let mut args = JointArgs {
            time: c.time(),
            limit: slot.limit,
            ttl: slot.ttl,
            member: c.member(id),
            leases,
            window: None,
        };
        let mut undo = lease_undo(c, &slots, id, leases);
        let asked = window.map(|w| {
            let ks = self.windows.script_keys(&slot.key, w.scope);
            let block = borrow.and_then(|b| b.windows[0]);
            let ttl = c.amount_ttl_ms();
            undo.push(Undo::Window {
                keys: ks.clone(),
                doubles: codec::undo_args(ttl, w.policy, w.demand, block),
                record: Client::record_member(id),
            });
            keys.extend(ks);
            args.window = Some(JointWindow {
                doubles: codec::admit_block_args(ttl, w.policy, w.demand, block),
                record: Client::record_member(id),
            });
            (w.policy.clone(), *w.demand, w.scope)
        });
        let read = asked.clone();
        let decided = c.eval(keys, args, move |r| {
            joint_decision(r, id, read.as_ref().map(|(p, d, _)| (p, d))).map(map)
        });
        (c.undoing(undo, decided), asked)
    }
}

/// What a slot-with-windows borrowing call asked for, to install what it got.
struct JointBorrow {
    slots: String,
    limit: u32,
    ttl: Millis,
    state: Option<String>,
    asked: Asked,
    borrow: Borrow,
    asked_at: Millis,
}

/// Installs the blocks a slot-with-windows borrowing call got (or clears its borrowing
/// marks) and answers the request's decision.
fn install(
    book: &Arc<BlockBook>,
    b: JointBorrow,
    r: StoreResult<(JointDecision, u32, u64)>,
) -> StoreResult<JointDecision> {
    let part = SlotPart {
        key: &b.slots,
        limit: b.limit,
        ttl: b.ttl,
    };
    let state_keys: Vec<&str> = b.state.iter().map(String::as_str).collect();
    match r {
        Ok((JointDecision::Admitted { lease, ticket }, took, counted)) => {
            let windows: Vec<_> = b
                .asked
                .iter()
                .zip(&b.state)
                .zip(ticket)
                .map(|(((policy, demand, _), key), mut t)| {
                    if let (true, Some(a)) = (counted > 1, b.borrow.windows[0]) {
                        t.demand.tokens = a.tokens;
                    }
                    let part = WindowPart {
                        key,
                        policy,
                        demand,
                    };
                    (part, t, counted)
                })
                .collect();
            let (lease, tickets) = book.install(
                Some((part, took, lease)),
                None,
                &windows,
                &b.borrow,
                b.asked_at,
            );
            Ok(JointDecision::Admitted {
                lease: lease.expect("a slot was asked"),
                ticket: tickets.first().copied(),
            })
        }
        Ok((other, ..)) => {
            book.abandon(Some(&b.slots), &state_keys, &b.borrow);
            Ok(other)
        }
        Err(e) => {
            // The script may still run: what it counts is given back by the call's
            // undo (see `undoing`).
            book.abandon(Some(&b.slots), &state_keys, &b.borrow);
            Err(e)
        }
    }
}

/// The block each item of a channel asks for.
fn asks_of(borrow: Option<&Borrow>, n: usize) -> Vec<Option<BlockAsk>> {
    (0..n).map(|i| borrow.and_then(|b| b.windows[i])).collect()
}
