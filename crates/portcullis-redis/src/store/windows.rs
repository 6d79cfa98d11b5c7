//! [`WindowStore`](portcullis_core::WindowStore) on Redis: anchored windows, amount caps and the rolling log (W1–W10).

use super::book::{self, BlockBook};
use super::shared::settle_window;
use crate::client::{Client, Undo, protocol};
use crate::codec::{self, AdmitReply};
use crate::future::RedisStoreFuture;
use crate::keys::Keys;
use crate::scripts::args::{AdmitAllArgs, WindowAdmitArgs, WindowViewArgs};
use portcullis_core::blocks::{BlockAsk, GiveBack};
use portcullis_core::{
    Admission, Demand, Dimension, JointAdmission, JointItem, JointSettle, LimitView, Outcome,
    Policy, Scope, StoreResult, SubjectKey, WindowTicket,
};
use redis::FromRedisValue;
use std::sync::Arc;

/// Anchored windows: admit, settle, view, and several subjects' windows at once.
#[derive(Clone)]
pub(crate) struct WindowOps {
    client: Client,
    book: Option<Arc<BlockBook>>,
}

impl WindowOps {
    pub(crate) fn new(client: Client, book: Option<Arc<BlockBook>>) -> Self {
        Self { client, book }
    }

    /// Tests: the block book, where the store has one.
    #[cfg(test)]
    pub(crate) fn book(&self) -> Option<&Arc<BlockBook>> {
        self.book.as_ref()
    }

    /// The window state key of `key` under `scope`.
    pub(crate) fn state(&self, key: &SubjectKey, scope: Scope) -> String {
        self.client.keys().window(key, scope)
    }

    /// The keys of every window script: the state, its rolling log and its admission
    /// records (`<state>:adm`).
    pub(crate) fn script_keys(&self, key: &SubjectKey, scope: Scope) -> Vec<String> {
        Keys::window_script(self.state(key, scope))
    }

    /// [`WindowStore::admit`](portcullis_core::WindowStore::admit).
    pub(crate) fn admit(
        &self,
        key: &SubjectKey,
        scope: Scope,
        policy: &Arc<Policy>,
        demand: &Demand,
    ) -> RedisStoreFuture<Admission> {
        let blob = codec::admit_args(self.client.amount_ttl_ms(), policy, demand);
        let id = self.client.next_id();
        let keys = self.script_keys(key, scope);
        let undo = vec![Undo::Window {
            keys: keys.clone(),
            doubles: codec::undo_args(self.client.amount_ttl_ms(), policy, demand, None),
            record: Client::record_member(id),
        }];
        let (policy, demand) = (policy.clone(), *demand);
        let args = WindowAdmitArgs {
            time: self.client.time(),
            doubles: blob,
            record: Client::record_member(id),
        };
        let decided = self.client.eval(keys, args, move |r: Vec<i64>| {
            Ok(match codec::admit_reply(&r, &policy, &demand, id)? {
                AdmitReply::Admitted(t) => Admission::Admitted(t),
                AdmitReply::Exceeded(e) => Admission::Exceeded(e),
            })
        });
        self.client.undoing(undo, decided)
    }

    /// [`WindowStore::settle`](portcullis_core::WindowStore::settle).
    pub(crate) fn settle(
        &self,
        key: &SubjectKey,
        scope: Scope,
        ticket: WindowTicket,
        outcome: Outcome,
    ) -> RedisStoreFuture<()> {
        let ticket =
            match book::settle(self.book.as_ref(), &self.state(key, scope), ticket, outcome) {
                Ok(settled) => return settled,
                Err(ticket) => ticket,
            };
        let blob = codec::settle_args(self.client.amount_ttl_ms(), &ticket, outcome);
        settle_window(
            &self.client,
            self.script_keys(key, scope),
            blob,
            ticket.id,
            false,
        )
    }

    /// [`WindowStore::view`](portcullis_core::WindowStore::view).
    pub(crate) fn view(
        &self,
        key: &SubjectKey,
        scope: Scope,
        policy: &Arc<Policy>,
    ) -> RedisStoreFuture<Vec<LimitView>> {
        let blob = codec::admit_args(0, policy, &Demand::default());
        let policy = policy.clone();
        let state = self.state(key, scope);
        let book = self.book.clone();
        let args = WindowViewArgs {
            time: self.client.time(),
            doubles: blob,
        };
        self.client
            .eval(self.script_keys(key, scope), args, move |r: Vec<i64>| {
                let mut lines = codec::view_reply(&r, &policy)?;
                // What this instance borrowed and did not use is not used.
                let (requests, tokens) = book.map_or((0, 0), |b| b.unused_window(&state));
                for l in &mut lines {
                    match l.dimension {
                        Dimension::Requests => l.used = l.used.saturating_sub(requests),
                        Dimension::Tokens => l.used = l.used.saturating_sub(tokens),
                        _ => {}
                    }
                }
                Ok(lines)
            })
    }

    /// [`WindowStore::admit_all`](portcullis_core::WindowStore::admit_all).
    pub(crate) fn admit_all(&self, items: &[JointItem]) -> RedisStoreFuture<JointAdmission> {
        let decided = self.admit_all_counted(items, &vec![None; items.len()]);
        RedisStoreFuture::new(async move { decided.await.map(|(a, _)| a) })
    }

    /// [`WindowStore::settle_all`](portcullis_core::WindowStore::settle_all).
    pub(crate) fn settle_all(&self, items: Vec<JointSettle>) -> RedisStoreFuture<()> {
        // Each a window settlement of the batch: they go out in one call with the
        // request's other settlements.
        let calls: Vec<_> = items
            .into_iter()
            .map(|it| self.settle(&it.key, it.scope, it.ticket, it.outcome))
            .collect();
        RedisStoreFuture::new(async move {
            for r in futures_util::future::join_all(calls).await {
                r?;
            }
            Ok(())
        })
    }
}

impl WindowOps {
    /// Consecutive runs of `keys` that share a hash slot: one run on a single node (any
    /// script may touch any key there), one per slot change on a Cluster.
    pub(crate) fn slot_groups(
        &self,
        keys: impl Iterator<Item = String>,
    ) -> Vec<std::ops::Range<usize>> {
        let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
        let mut last = None;
        for (i, k) in keys.enumerate() {
            let slot = self.client.slot_of(&k);
            match groups.last_mut() {
                Some(g) if last == Some(slot) => g.end = i + 1,
                _ => groups.push(i..i + 1),
            }
            last = Some(slot);
        }
        groups
    }

    /// [`WindowStore::admit_all`](portcullis_core::WindowStore::admit_all) asking item `i` for the quota block `asks[i]` too;
    /// answers the requests each item counted (its block's, or 1). On a Cluster, items
    /// on different slots (a vendor-wide window beside a credential's) are one script
    /// per slot, in order; a refusal gives back what the groups before it counted.
    pub(crate) fn admit_all_counted(
        &self,
        items: &[JointItem],
        asks: &[Option<BlockAsk>],
    ) -> RedisStoreFuture<(JointAdmission, Vec<u64>)> {
        let groups = self.slot_groups(items.iter().map(|i| self.state(&i.key, i.scope)));
        if groups.len() <= 1 {
            return self.admit_group(items.to_vec(), asks.to_vec(), 0);
        }
        let store = self.clone();
        let (items, asks) = (items.to_vec(), asks.to_vec());
        RedisStoreFuture::new(async move {
            let mut tickets = Vec::with_capacity(items.len());
            let mut counted = Vec::with_capacity(items.len());
            for range in groups {
                let start = range.start;
                let answer = store
                    .admit_group(items[range.clone()].to_vec(), asks[range].to_vec(), start)
                    .await;
                match answer {
                    Ok((JointAdmission::Admitted(t), c)) => {
                        tickets.extend(t);
                        counted.extend(c);
                    }
                    other => {
                        for ((it, mut ticket), (n, ask)) in
                            items.iter().zip(tickets).zip(counted.iter().zip(&asks))
                        {
                            let state = store.state(&it.key, it.scope);
                            match ask.filter(|_| *n > 1) {
                                // A block counted whole: given back whole.
                                Some(a) => {
                                    ticket.demand.tokens = a.tokens;
                                    let book = store.book.as_ref().expect("blocks asked");
                                    book.give_back(GiveBack::Window {
                                        key: state,
                                        ticket,
                                        requests: *n,
                                        used: 0,
                                        outcome: Outcome::Refund,
                                        handed: 0,
                                    });
                                }
                                None => {
                                    let r =
                                        store.settle(&it.key, it.scope, ticket, Outcome::Refund);
                                    tokio::spawn(r);
                                }
                            }
                        }
                        return other;
                    }
                }
            }
            Ok((JointAdmission::Admitted(tickets), counted))
        })
    }

    /// One script admitting `items` (all on one slot) all or nothing, item `i` asking
    /// for the block `asks[i]` too; a refusal's index is offset by `first`, the position
    /// of `items[0]` in the whole request.
    pub(crate) fn admit_group(
        &self,
        items: Vec<JointItem>,
        asks: Vec<Option<BlockAsk>>,
        first: usize,
    ) -> RedisStoreFuture<(JointAdmission, Vec<u64>)> {
        let id = self.client.next_id();
        let mut keys = Vec::with_capacity(3 * items.len());
        let mut blobs = Vec::with_capacity(items.len());
        let mut undo = Vec::with_capacity(items.len());
        for (it, ask) in items.iter().zip(&asks) {
            let ks = self.script_keys(&it.key, it.scope);
            undo.push(Undo::Window {
                keys: ks.clone(),
                doubles: codec::undo_args(
                    self.client.amount_ttl_ms(),
                    &it.policy,
                    &it.demand,
                    *ask,
                ),
                record: Client::record_member(id),
            });
            keys.extend(ks);
            blobs.push(codec::admit_block_args(
                self.client.amount_ttl_ms(),
                &it.policy,
                &it.demand,
                *ask,
            ));
        }
        let args = AdmitAllArgs {
            time: self.client.time(),
            record: Client::record_member(id),
            items: blobs,
        };
        let decided = self.client.eval(keys, args, move |r: redis::Value| {
            joint_reply_granted(r, &items, first, id)
        });
        self.client.undoing(undo, decided)
    }
}

/// Reads `window_admit_all.lua`'s reply: `{1, {item reply}...}` or `{0, i, reply}`, with
/// the requests each item counted (its quota block's, or 1).
pub(crate) fn joint_reply_granted(
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
