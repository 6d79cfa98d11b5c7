//! Decisions of adjacent layers joined into one script (T3): the slot with its windows
//! ([`JointStore`](portcullis_core::JointStore)), a channel's provider windows with its
//! capacity lease ([`ChannelStore`](portcullis_core::ChannelStore)).

use super::*;
use crate::client::{Client, Undo};
use crate::codec::{self, AdmitReply};
use crate::conn::hash_slot;
use crate::future::spawn_quietly;
use crate::scripts::args::{
    BlockLeasesArgs, ChannelArgs, JointArgs, JointWindow, LeaseReleaseArgs,
};
use portcullis_core::blocks::{BlockAsk, Borrow, Local, SlotPart, WindowPart};
use portcullis_core::{
    CapacityTake, Demand, JointAdmission, JointDecision, JointItem, JointSettle, LeaseId, Millis,
    Outcome, Policy, Scope, SlotAsk, SlotStore, StoreResult, SubjectKey, WindowAsk, WindowStore,
};
use redis::FromRedisValue;
use std::sync::Arc;

/// Reads `window_admit_all.lua`'s reply: `{1, {item reply}...}` or `{0, i, reply}`, with
/// the requests each item counted (its quota block's, or 1).
pub(super) fn joint_reply_granted(
    r: redis::Value,
    items: &[JointItem],
    first: usize,
    id: u64,
) -> StoreResult<(JointAdmission, Vec<u64>)> {
    let bad = |what: &str| protocol(format!("admit_all: {what} in reply"));
    let ints = |v: redis::Value| -> StoreResult<Vec<i64>> {
        Vec::<i64>::from_redis_value(v).map_err(|e| protocol(format!("admit_all: {e}")))
    };
    let redis::Value::Array(mut parts) = r else {
        return Err(bad("no array"));
    };
    match parts.first() {
        Some(redis::Value::Int(1)) if parts.len() == 2 => {
            let redis::Value::Array(replies) = parts.swap_remove(1) else {
                return Err(bad("no item replies"));
            };
            if replies.len() != items.len() {
                return Err(bad("wrong item count"));
            }
            let mut tickets = Vec::with_capacity(items.len());
            let mut granted = Vec::with_capacity(items.len());
            for (v, it) in replies.into_iter().zip(items) {
                let ints = ints(v)?;
                match codec::admit_reply(&ints, &it.policy, &it.demand, id)? {
                    AdmitReply::Admitted(t) => tickets.push(t),
                    AdmitReply::Exceeded(_) => return Err(bad("a refusal among admissions")),
                }
                granted.push(codec::admitted_requests(&ints));
            }
            Ok((JointAdmission::Admitted(tickets), granted))
        }
        Some(redis::Value::Int(0)) if parts.len() == 3 => {
            let reply = ints(parts.swap_remove(2))?;
            let redis::Value::Int(i) = parts[1] else {
                return Err(bad("no index"));
            };
            let index = usize::try_from(i - 1).map_err(|_| bad("bad index"))?;
            let it = items.get(index).ok_or_else(|| bad("index out of range"))?;
            match codec::admit_reply(&reply, &it.policy, &it.demand, id)? {
                AdmitReply::Exceeded(exceeded) => Ok((
                    JointAdmission::Exceeded {
                        index: first + index,
                        exceeded,
                    },
                    Vec::new(),
                )),
                AdmitReply::Admitted(_) => Err(bad("an admission as the refusal")),
            }
        }
        _ => Err(bad("unknown shape")),
    }
}

impl portcullis_core::JointStore for RedisStore {
    fn acquire_and_admit(
        &self,
        slot: &SlotAsk,
        window: Option<WindowAsk<'_>>,
    ) -> RedisStoreFuture<JointDecision> {
        self.joint_decision(slot, window, true)
    }
}

impl RedisStore {
    /// [`acquire_and_admit`](portcullis_core::JointStore::acquire_and_admit); `may_wait`:
    /// while a block this request needs is being borrowed, wait for it once (single
    /// node) instead of deciding alone.
    fn joint_decision(
        &self,
        slot: &SlotAsk,
        window: Option<WindowAsk<'_>>,
        may_wait: bool,
    ) -> RedisStoreFuture<JointDecision> {
        let slots = self.slots_key(&slot.key);
        let state = window.map(|w| self.window_key(&slot.key, w.scope));
        let asked_at = self.local_now();
        let mut borrow = None;
        if let Some(mut blocks) = self.blocks() {
            let parts: Vec<WindowPart<'_>> = window
                .iter()
                .zip(&state)
                .map(|(w, key)| WindowPart {
                    key,
                    policy: w.policy,
                    demand: w.demand,
                })
                .collect();
            let part = SlotPart {
                key: &slots,
                limit: slot.limit,
                ttl: slot.ttl,
            };
            match blocks.decide(Some(part), &parts, asked_at) {
                Local::Granted(g) => {
                    return RedisStoreFuture::ready(Ok(JointDecision::Admitted {
                        lease: g.lease.expect("a slot was asked"),
                        ticket: g.tickets.first().copied(),
                    }));
                }
                Local::Ask(b) if !b.is_single() => borrow = Some(b),
                Local::Ask(_) if may_wait && !self.is_cluster() => {
                    let seen = self.borrows_ended();
                    drop(blocks);
                    let (store, slot) = (self.clone(), slot.clone());
                    let owned = window.map(|w| (w.scope, w.policy.clone(), *w.demand));
                    return RedisStoreFuture::new(async move {
                        store.wait_for_borrow(seen).await?;
                        let window = owned.as_ref().map(|(scope, policy, demand)| WindowAsk {
                            scope: *scope,
                            policy,
                            demand,
                        });
                        store.joint_decision(&slot, window, false).await
                    });
                }
                Local::Ask(_) | Local::Shared => {}
            }
        }
        let id = self.client().next_id();
        let mut keys = vec![slots.clone()];
        let leases = borrow.as_ref().map_or(1, |b| b.slots);
        let mut args = JointArgs {
            time: self.client().time(),
            limit: slot.limit,
            ttl: slot.ttl,
            member: self.client().member(id),
            leases,
            window: None,
        };
        let mut undo = self.lease_undo(&slots, id, leases);
        let asked = window.map(|w| {
            let ks = self.window_keys(&slot.key, w.scope);
            let block = borrow.as_ref().and_then(|b| b.windows[0]);
            undo.push(Undo::Window {
                keys: ks.clone(),
                doubles: codec::undo_args(self.client().amount_ttl_ms(), w.policy, w.demand, block),
                record: Client::record_member(id),
            });
            keys.extend(ks);
            args.window = Some(JointWindow {
                doubles: codec::admit_block_args(
                    self.client().amount_ttl_ms(),
                    w.policy,
                    w.demand,
                    block,
                ),
                record: Client::record_member(id),
            });
            (w.policy.clone(), *w.demand, w.scope)
        });
        let Some(borrow) = borrow else {
            let decided = self.client().eval(keys, args, move |r| {
                joint_decision(r, id, asked.as_ref().map(|(p, d, _)| (p, d))).map(|(d, ..)| d)
            });
            return self.client().undoing(undo, decided);
        };
        let asked_copy = asked.clone();
        let decided = self.client().eval(keys, args, move |r| {
            joint_decision(r, id, asked_copy.as_ref().map(|(p, d, _)| (p, d)))
        });
        let decided = self.client().undoing(undo, decided);
        let (key, ttl, limit) = (slot.key.clone(), slot.ttl, slot.limit);
        let scope = window.map(|w| w.scope);
        self.borrowing(
            decided,
            move |store, r| {
                let borrowed = JointBorrow {
                    slots,
                    limit,
                    ttl,
                    state,
                    asked,
                    borrow,
                    asked_at,
                };
                store.install_joint(borrowed, r)
            },
            move |store, held| {
                if let JointDecision::Admitted { lease, ticket } = held {
                    spawn_quietly(SlotStore::release(store, &key, lease));
                    if let (Some(t), Some(scope)) = (ticket, scope) {
                        spawn_quietly(WindowStore::settle(store, &key, scope, t, Outcome::Refund));
                    }
                }
            },
        )
    }
}

/// What a slot-with-windows borrowing call asked for, to install what it got.
struct JointBorrow {
    slots: String,
    limit: u32,
    ttl: Millis,
    state: Option<String>,
    asked: Option<(Arc<Policy>, Demand, Scope)>,
    borrow: Borrow,
    asked_at: Millis,
}

impl RedisStore {
    /// What a call taking leases of `slots` under `id` gives back if its answer never
    /// comes: the plain lease and, asking for a block of `size`, the block's.
    fn lease_undo(&self, slots: &str, id: LeaseId, size: u32) -> Vec<Undo> {
        let member = self.client().member(id);
        let mut undo = Vec::with_capacity(3);
        if size > 1 {
            let args = BlockLeasesArgs {
                base: member.clone(),
                size,
            };
            undo.push(Undo::op(vec![slots.to_owned()], args));
        }
        undo.push(Undo::op(
            vec![slots.to_owned()],
            LeaseReleaseArgs { member },
        ));
        undo
    }

    /// Installs the blocks a slot-with-windows borrowing call got (or clears its
    /// borrowing marks) and answers the request's decision.
    fn install_joint(
        &self,
        b: JointBorrow,
        r: StoreResult<(JointDecision, u32, u64)>,
    ) -> StoreResult<JointDecision> {
        let Some(mut blocks) = self.blocks() else {
            return r.map(|(d, ..)| d);
        };
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
                let (lease, tickets, retire) =
                    blocks.install(Some((part, took, lease)), &windows, &b.borrow, b.asked_at);
                drop(blocks);
                self.schedule_retire(retire);
                Ok(JointDecision::Admitted {
                    lease: lease.expect("a slot was asked"),
                    ticket: tickets.first().copied(),
                })
            }
            Ok((other, ..)) => {
                blocks.abandon(Some(&b.slots), &state_keys, &b.borrow);
                Ok(other)
            }
            Err(e) => {
                // The script may still run: what it counts is given back by the call's
                // undo (see `undoing`).
                blocks.abandon(Some(&b.slots), &state_keys, &b.borrow);
                Err(e)
            }
        }
    }
}

/// Reads `joint_admit.lua`'s reply: the decision, the leases taken and the requests
/// the windows counted (a quota block's, or 1).
pub(super) fn joint_decision(
    r: redis::Value,
    lease: LeaseId,
    asked: Option<(&Arc<Policy>, &Demand)>,
) -> StoreResult<(JointDecision, u32, u64)> {
    let bad = |what: &str| protocol(format!("acquire_and_admit: {what} in reply"));
    let redis::Value::Array(mut parts) = r else {
        return Err(bad("no array"));
    };
    let took = match parts.len() {
        2 => 0,
        3 => match parts.pop() {
            Some(redis::Value::Int(n)) => count(n, "acquire_and_admit")?,
            _ => return Err(bad("no lease count")),
        },
        _ => return Err(bad("wrong length")),
    };
    let rest = parts.pop().unwrap_or(redis::Value::Nil);
    let mut counted = 1;
    let mut window = |v: redis::Value| -> StoreResult<Option<AdmitReply>> {
        let ints = Vec::<i64>::from_redis_value(v)
            .map_err(|e| protocol(format!("acquire_and_admit: {e}")))?;
        match asked {
            None if ints.is_empty() => Ok(None),
            None => Err(bad("a window reply to a slot-only call")),
            Some((p, d)) => {
                counted = codec::admitted_requests(&ints);
                codec::admit_reply(&ints, p, d, lease).map(Some)
            }
        }
    };
    let decision = match parts[0] {
        redis::Value::Int(0) => {
            let redis::Value::Int(n) = rest else {
                return Err(bad("no lease count"));
            };
            JointDecision::SlotFull {
                in_flight: count(n, "acquire_and_admit")?,
            }
        }
        redis::Value::Int(1) => match window(rest)? {
            None => JointDecision::Admitted {
                lease,
                ticket: None,
            },
            Some(AdmitReply::Admitted(t)) => JointDecision::Admitted {
                lease,
                ticket: Some(t),
            },
            Some(AdmitReply::Exceeded(_)) => return Err(bad("a refusal with a slot taken")),
        },
        redis::Value::Int(2) => match window(rest)? {
            Some(AdmitReply::Exceeded(e)) => JointDecision::Exceeded(e),
            _ => return Err(bad("no refusal")),
        },
        _ => return Err(bad("unknown code")),
    };
    Ok((decision, took.max(1), counted))
}

impl portcullis_core::ChannelStore for RedisStore {
    fn admit_all_and_acquire(
        &self,
        items: &[JointItem],
        channel: &str,
        capacity: u32,
        ttl: Millis,
    ) -> RedisStoreFuture<(JointAdmission, CapacityTake)> {
        self.channel_decision(items, channel, capacity, ttl, true)
    }
}

impl RedisStore {
    /// [`admit_all_and_acquire`](portcullis_core::ChannelStore::admit_all_and_acquire);
    /// `may_wait` as for [`joint_decision`](Self::joint_decision).
    fn channel_decision(
        &self,
        items: &[JointItem],
        channel: &str,
        capacity: u32,
        ttl: Millis,
        may_wait: bool,
    ) -> RedisStoreFuture<(JointAdmission, CapacityTake)> {
        let leases = self.slots_key(&Keys::channel_subject(channel));
        let asked_at = self.local_now();
        let states: Vec<String> = items
            .iter()
            .map(|it| self.window_key(&it.key, it.scope))
            .collect();
        let mut borrow = None;
        if let Some(mut blocks) = self.blocks() {
            let parts = window_parts(items, &states);
            let part = SlotPart {
                key: &leases,
                limit: capacity,
                ttl,
            };
            match blocks.decide(Some(part), &parts, asked_at) {
                Local::Granted(g) => {
                    let lease = g.lease.expect("a lease was asked");
                    return RedisStoreFuture::ready(Ok((
                        JointAdmission::Admitted(g.tickets),
                        CapacityTake::Taken(lease),
                    )));
                }
                Local::Ask(b) if !b.is_single() => borrow = Some(b),
                Local::Ask(_) if may_wait && !self.is_cluster() => {
                    let seen = self.borrows_ended();
                    drop(blocks);
                    let (store, items, channel) =
                        (self.clone(), items.to_vec(), channel.to_owned());
                    return RedisStoreFuture::new(async move {
                        store.wait_for_borrow(seen).await?;
                        store
                            .channel_decision(&items, &channel, capacity, ttl, false)
                            .await
                    });
                }
                Local::Ask(_) | Local::Shared => {}
            }
        }
        let id = self.client().next_id();
        let asks: Vec<Option<BlockAsk>> = (0..items.len())
            .map(|i| borrow.as_ref().and_then(|b| b.windows[i]))
            .collect();
        let slots = borrow.as_ref().map_or(1, |b| b.slots);
        let decided = self.channel_call(items, &leases, &asks, capacity, ttl, id, slots);
        let Some(borrow) = borrow else {
            return RedisStoreFuture::new(async move { decided.await.map(|(a, t, ..)| (a, t)) });
        };
        let (owned, channel) = (items.to_vec(), channel.to_owned());
        let refunds: Vec<(SubjectKey, Scope)> =
            items.iter().map(|it| (it.key.clone(), it.scope)).collect();
        self.borrowing(
            decided,
            move |store, r| {
                let borrowed = ChannelBorrow {
                    leases,
                    capacity,
                    ttl,
                    states,
                    items: owned,
                    borrow,
                    asked_at,
                };
                store.install_channel(borrowed, r)
            },
            move |store, (admission, take)| {
                if let CapacityTake::Taken(lease) = take {
                    spawn_quietly(portcullis_core::CapacityStore::release(
                        store, &channel, lease,
                    ));
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
                    spawn_quietly(WindowStore::settle_all(store, back));
                }
            },
        )
    }
}

impl RedisStore {
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
        let mut keys: Vec<String> = items
            .iter()
            .flat_map(|it| self.window_keys(&it.key, it.scope))
            .collect();
        keys.push(leases.to_owned());
        let one_slot = !self.is_cluster() || {
            let first = hash_slot(keys[0].as_bytes());
            keys.iter().all(|k| hash_slot(k.as_bytes()) == first)
        };
        if one_slot {
            let items_args = items
                .iter()
                .zip(asks)
                .map(|(it, ask)| {
                    codec::admit_block_args(
                        self.client().amount_ttl_ms(),
                        &it.policy,
                        &it.demand,
                        *ask,
                    )
                })
                .collect();
            let args = ChannelArgs {
                time: self.client().time(),
                capacity,
                ttl,
                member: self.client().member(id),
                leases: slots,
                record: Client::record_member(id),
                items: items_args,
            };
            let owned = items.to_vec();
            let mut undo = self.lease_undo(leases, id, slots);
            for ((it, ask), ks) in items.iter().zip(asks).zip(keys.chunks(3)) {
                undo.push(Undo::Window {
                    keys: ks.to_vec(),
                    doubles: codec::undo_args(
                        self.client().amount_ttl_ms(),
                        &it.policy,
                        &it.demand,
                        *ask,
                    ),
                    record: Client::record_member(id),
                });
            }
            let decided = self.client().eval(keys, args, move |r: redis::Value| {
                channel_reply(r, id, &owned)
            });
            return self.client().undoing(undo, decided);
        }
        // On different Cluster slots: the windows, then the leases — as the slot-only
        // joint script takes them (a block where it fits).
        let admitted = self.admit_all_counted(items, asks);
        let args = JointArgs {
            time: self.client().time(),
            limit: capacity,
            ttl,
            member: self.client().member(id),
            leases: slots,
            window: None,
        };
        let leases = leases.to_owned();
        let store = self.clone();
        RedisStoreFuture::new(async move {
            let (a, counted) = admitted.await?;
            if !matches!(a, JointAdmission::Admitted(_)) {
                return Ok((a, CapacityTake::NotAsked, 0, counted));
            }
            let call = store.client().eval(vec![leases.clone()], args, move |r| {
                joint_decision(r, id, None)
            });
            let call = store
                .client()
                .undoing(store.lease_undo(&leases, id, slots), call);
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

/// What a channel's decision answers: the windows, the lease, the leases taken and the
/// requests each item counted.
type ChannelAnswer = RedisStoreFuture<(JointAdmission, CapacityTake, u32, Vec<u64>)>;

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

impl RedisStore {
    /// Installs the blocks a channel's borrowing call got (or clears its borrowing
    /// marks) and answers the request's decision.
    fn install_channel(
        &self,
        b: ChannelBorrow,
        r: StoreResult<(JointAdmission, CapacityTake, u32, Vec<u64>)>,
    ) -> StoreResult<(JointAdmission, CapacityTake)> {
        let Some(mut blocks) = self.blocks() else {
            return r.map(|(a, t, ..)| (a, t));
        };
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
                let slot = match take {
                    CapacityTake::Taken(lease) => Some((part, took, lease)),
                    _ => {
                        // No lease: no slot block.
                        blocks.abandon(Some(&b.leases), &[], &b.borrow);
                        None
                    }
                };
                let (lease, tickets, retire) =
                    blocks.install(slot, &windows, &b.borrow, b.asked_at);
                drop(blocks);
                self.schedule_retire(retire);
                let take = lease.map_or(take, CapacityTake::Taken);
                Ok((JointAdmission::Admitted(tickets), take))
            }
            Ok((other, take, ..)) => {
                blocks.abandon(Some(&b.leases), &keys, &b.borrow);
                Ok((other, take))
            }
            Err(e) => {
                // What the script may still count is given back by the call's undo.
                blocks.abandon(Some(&b.leases), &keys, &b.borrow);
                Err(e)
            }
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

/// Reads `admit_all_acquire.lua`'s reply: the windows' answer, the lease, the leases
/// taken and the requests each item counted.
fn channel_reply(
    r: redis::Value,
    id: LeaseId,
    items: &[JointItem],
) -> StoreResult<(JointAdmission, CapacityTake, u32, Vec<u64>)> {
    let redis::Value::Array(mut parts) = r else {
        return Err(protocol("admit_all_and_acquire: no array in reply"));
    };
    let took = match parts.pop() {
        Some(redis::Value::Int(n)) => count(n, "admit_all_and_acquire")?,
        other => {
            return Err(protocol(format!(
                "admit_all_and_acquire: lease count {other:?}"
            )));
        }
    };
    let take = match parts.pop() {
        Some(redis::Value::Int(1)) => CapacityTake::Taken(id),
        Some(redis::Value::Int(0)) => CapacityTake::Full,
        Some(redis::Value::Int(-1)) => CapacityTake::NotAsked,
        other => {
            return Err(protocol(format!(
                "admit_all_and_acquire: lease answer {other:?}"
            )));
        }
    };
    let windows = parts
        .pop()
        .ok_or_else(|| protocol("admit_all_and_acquire: no windows in reply"))?;
    let (admission, counted) = joint_reply_granted(windows, items, 0, id)?;
    Ok((admission, take, took.max(1), counted))
}
