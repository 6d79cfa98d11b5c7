//! A channel's provider windows with its capacity lease
//! ([`ChannelStore`](portcullis_core::ChannelStore)).

use super::replies::{channel_reply, joint_decision};
use super::{JointOps, asks_of};
use crate::client::{Client, Undo};
use crate::codec;
use crate::future::{RedisStoreFuture, spawn_quietly};
use crate::keys::Keys;
use crate::scripts::args::{ChannelArgs, JointArgs};
use crate::store::book::{BlockBook, Decided};
use crate::store::slots::lease_undo;
use portcullis_core::blocks::{BlockAsk, Borrow, SlotPart, WindowPart};
use portcullis_core::{
    CapacityTake, JointAdmission, JointDecision, JointItem, JointSettle, LeaseId, Millis, Outcome,
    Scope, StoreResult, SubjectKey,
};
use std::sync::Arc;

/// What a channel's decision answers: the windows, the lease, the leases taken and the
/// requests each item counted.
type ChannelAnswer = RedisStoreFuture<(JointAdmission, CapacityTake, u32, Vec<u64>)>;

impl JointOps {
    /// [`admit_all_and_acquire`](portcullis_core::ChannelStore::admit_all_and_acquire);
    /// `may_wait` as for [`acquire_and_admit`](Self::acquire_and_admit).
    pub(crate) fn admit_all_and_acquire(
        &self,
        items: &[JointItem],
        channel: &str,
        capacity: u32,
        ttl: Millis,
        may_wait: bool,
    ) -> RedisStoreFuture<(JointAdmission, CapacityTake)> {
        let leases = self.client.keys().slots(&Keys::channel_subject(channel));
        let states: Vec<String> = items
            .iter()
            .map(|it| self.windows.state(&it.key, it.scope))
            .collect();
        let (mut borrow, mut asked_at) = (None, 0);
        if let Some(book) = &self.book {
            asked_at = book.now();
            let part = SlotPart {
                key: &leases,
                limit: capacity,
                ttl,
            };
            match book.decide(
                Some(part),
                &window_parts(items, &states),
                asked_at,
                may_wait,
            ) {
                Decided::Granted(g) => {
                    let lease = g.lease.expect("a lease was asked");
                    return RedisStoreFuture::ready(Ok((
                        JointAdmission::Admitted(g.tickets),
                        CapacityTake::Taken(lease),
                    )));
                }
                Decided::Borrow(b) => borrow = Some(b),
                Decided::Wait(seen) => {
                    let (this, book) = (self.clone(), Arc::clone(book));
                    let (items, channel) = (items.to_vec(), channel.to_owned());
                    return RedisStoreFuture::new(async move {
                        book.wait(seen).await?;
                        (this.admit_all_and_acquire(&items, &channel, capacity, ttl, false)).await
                    });
                }
                Decided::Shared => {}
            }
        }
        let id = self.client.next_id();
        let asks = asks_of(borrow.as_ref(), items.len());
        let slots = borrow.as_ref().map_or(1, |b| b.slots);
        let decided = self.channel_call(items, &leases, &asks, capacity, ttl, id, slots);
        let Some(borrow) = borrow else {
            return RedisStoreFuture::new(async move { decided.await.map(|(a, t, ..)| (a, t)) });
        };
        let book = self.book.as_ref().expect("a block was asked");
        let installer = Arc::clone(book);
        let (owned, channel, this) = (items.to_vec(), channel.to_owned(), self.clone());
        let refunds: Vec<_> = items.iter().map(|it| (it.key.clone(), it.scope)).collect();
        book.borrowing(
            decided,
            move |r| {
                let b = ChannelBorrow {
                    leases,
                    capacity,
                    ttl,
                    states,
                    items: owned,
                    borrow,
                    asked_at,
                };
                install(&installer, b, r)
            },
            // The request went away before its answer: what it holds goes back.
            move |held| this.give_back_channel(&channel, refunds, held),
        )
    }

    /// Gives back what a channel's answer holds: its capacity lease, its windows'
    /// admissions (of the items `refunds` names).
    fn give_back_channel(
        &self,
        channel: &str,
        refunds: Vec<(SubjectKey, Scope)>,
        (admission, take): (JointAdmission, CapacityTake),
    ) {
        if let CapacityTake::Taken(lease) = take {
            spawn_quietly(self.capacity.release(channel, lease));
        }
        if let JointAdmission::Admitted(tickets) = admission {
            let back = refunds
                .into_iter()
                .zip(tickets)
                .map(|((key, scope), ticket)| JointSettle {
                    key,
                    scope,
                    ticket,
                    outcome: Outcome::Refund,
                })
                .collect();
            spawn_quietly(self.windows.settle_all(back));
        }
    }

    /// The channel's decision as Redis makes it: its provider windows (item `i` asking
    /// for block `asks[i]`) and, when they admit, `slots` capacity leases (1 = one lease,
    /// more = a block) under lease id `id`. One script when every key is on one slot
    /// (always on a single node), else the windows (one script per slot) and then the
    /// leases.
    #[allow(clippy::too_many_arguments)]
    fn channel_call(
        &self,
        items: &[JointItem],
        leases: &str,
        asks: &[Option<BlockAsk>],
        capacity: u32,
        ttl: Millis,
        id: LeaseId,
        slots: u32,
    ) -> ChannelAnswer {
        let c = &self.client;
        let mut keys: Vec<String> = items
            .iter()
            .flat_map(|it| self.windows.script_keys(&it.key, it.scope))
            .collect();
        keys.push(leases.to_owned());
        let one_slot = !c.is_cluster() || {
            let first = c.slot_of(&keys[0]);
            keys.iter().all(|k| c.slot_of(k) == first)
        };
        let amount_ttl = c.amount_ttl_ms();
        if one_slot {
            let args = ChannelArgs {
                time: c.time(),
                capacity,
                ttl,
                member: c.member(id),
                leases: slots,
                record: Client::record_member(id),
                items: items
                    .iter()
                    .zip(asks)
                    .map(|(it, ask)| {
                        codec::admit_block_args(amount_ttl, &it.policy, &it.demand, *ask)
                    })
                    .collect(),
            };
            let owned = items.to_vec();
            let mut undo = lease_undo(c, leases, id, slots);
            for ((it, ask), ks) in items.iter().zip(asks).zip(keys.chunks(3)) {
                undo.push(Undo::Window {
                    keys: ks.to_vec(),
                    doubles: codec::undo_args(amount_ttl, &it.policy, &it.demand, *ask),
                    record: Client::record_member(id),
                });
            }
            let decided = c.eval(keys, args, move |r: redis::Value| {
                channel_reply(r, id, &owned)
            });
            return c.undoing(undo, decided);
        }
        // On different Cluster slots: the windows, then the leases — as the slot-only
        // joint script takes them (a block where it fits).
        let admitted = self.windows.admit_all_counted(items, asks);
        let args = JointArgs {
            time: c.time(),
            limit: capacity,
            ttl,
            member: c.member(id),
            leases: slots,
            window: None,
        };
        let (leases, c) = (leases.to_owned(), c.clone());
        RedisStoreFuture::new(async move {
            let (a, counted) = admitted.await?;
            if !matches!(a, JointAdmission::Admitted(_)) {
                return Ok((a, CapacityTake::NotAsked, 0, counted));
            }
            let call = c.eval(vec![leases.clone()], args, move |r| {
                joint_decision(r, id, None)
            });
            let call = c.undoing(lease_undo(&c, &leases, id, slots), call);
            let (take, took) = match call.await {
                Ok((JointDecision::Admitted { .. }, took, _)) => (CapacityTake::Taken(id), took),
                Ok(_) => (CapacityTake::Full, 0),
                // The windows stand; the capacity layer asks on its own.
                Err(_) => (CapacityTake::NotAsked, 0),
            };
            Ok((a, take, took, counted))
        })
    }
}

/// What a channel's borrowing call asked for, to install what it got.
struct ChannelBorrow {
    leases: String,
    capacity: u32,
    ttl: Millis,
    states: Vec<String>,
    items: Vec<JointItem>,
    borrow: Borrow,
    asked_at: Millis,
}

/// Installs the blocks a channel's borrowing call got (or clears its borrowing marks)
/// and answers the request's decision.
fn install(
    book: &Arc<BlockBook>,
    b: ChannelBorrow,
    r: StoreResult<(JointAdmission, CapacityTake, u32, Vec<u64>)>,
) -> StoreResult<(JointAdmission, CapacityTake)> {
    let part = SlotPart {
        key: &b.leases,
        limit: b.capacity,
        ttl: b.ttl,
    };
    let keys: Vec<&str> = b.states.iter().map(String::as_str).collect();
    match r {
        Ok((JointAdmission::Admitted(tickets), take, took, counted)) => {
            let windows: Vec<_> = window_parts(&b.items, &b.states)
                .into_iter()
                .zip(tickets)
                .zip(counted)
                .enumerate()
                .map(|(i, ((p, mut t), n))| {
                    if let (true, Some(a)) = (n > 1, b.borrow.windows[i]) {
                        t.demand.tokens = a.tokens;
                    }
                    (p, t, n)
                })
                .collect();
            // No lease: no slot block.
            let (slot, no_slot) = match take {
                CapacityTake::Taken(lease) => (Some((part, took, lease)), None),
                _ => (None, Some(&*b.leases)),
            };
            let (lease, tickets) = book.install(slot, no_slot, &windows, &b.borrow, b.asked_at);
            let take = lease.map_or(take, CapacityTake::Taken);
            Ok((JointAdmission::Admitted(tickets), take))
        }
        Ok((other, take, ..)) => {
            book.abandon(Some(&b.leases), &keys, &b.borrow);
            Ok((other, take))
        }
        Err(e) => {
            // What the script may still count is given back by the call's undo.
            book.abandon(Some(&b.leases), &keys, &b.borrow);
            Err(e)
        }
    }
}

/// The window parts of `items`, whose state keys are `states`.
fn window_parts<'a>(items: &'a [JointItem], states: &'a [String]) -> Vec<WindowPart<'a>> {
    items
        .iter()
        .zip(states)
        .map(|(it, key)| WindowPart {
            key,
            policy: &it.policy,
            demand: &it.demand,
        })
        .collect()
}
